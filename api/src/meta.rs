//! Object metadata shared by every kind: [`ObjectMeta`], [`Time`], [`Condition`], their
//! validation ([`validate_object_meta`]), and the `string_enum!` macro behind every enum of
//! the API (PascalCase words accepted case-insensitively and written back canonical).
//!
//! The shapes follow Kubernetes' `metav1` so that kubectl and client libraries read them
//! unchanged. This module never reads a clock: callers pass `now`.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, SecondsFormat, Timelike, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names;
use crate::validation::{FieldError, FieldPath};

// ---------------------------------------------------------------------------------------
// Enumerations

/// A string that is not one of an enum's values (from [`std::str::FromStr`] of every API
/// enum). Its message is the body of a Kubernetes `Unsupported value` error, so that a
/// decode error located with its field path reads like a validation error:
/// `spec.rules[0].protocol: Unsupported value: "SCTP": supported values: "HTTP", ...`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Unsupported value: {}: supported values: {}", serde_json::Value::from(.value.as_str()), crate::validation::quote_list(.supported))]
pub struct UnsupportedValue {
    /// The rejected input.
    pub value: String,
    /// The canonical spellings that would have been accepted (case-insensitively).
    pub supported: &'static [&'static str],
}

/// Declares an API enum of unit variants, each with its canonical spelling:
///
/// ```text
/// string_enum! {
///     /// Doc.
///     pub enum Protocol { Http => "HTTP", Tcp => "TCP" }
/// }
/// ```
///
/// gives `as_str`, `VALUES`, `ALL`, `Display`, `FromStr` (case-insensitive, error
/// [`UnsupportedValue`]), `Serialize` (canonical), `Deserialize` (case-insensitive) and a
/// `JsonSchema` that is an inline `{"type": "string", "enum": [...]}`.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The canonical spellings, in declaration order.
            pub const VALUES: &'static [&'static str] = &[$($text),+];

            /// The canonical spelling, as written back by the API.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::meta::UnsupportedValue;

            /// Parses any capitalisation of a canonical spelling.
            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                $(
                    if s.eq_ignore_ascii_case($text) {
                        return Ok($name::$variant);
                    }
                )+
                Err($crate::meta::UnsupportedValue {
                    value: s.to_owned(),
                    supported: Self::VALUES,
                })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> ::std::result::Result<Self, D::Error> {
                struct Visitor;
                impl ::serde::de::Visitor<'_> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        write!(f, "one of {}", $crate::validation::quote_list($name::VALUES))
                    }
                    fn visit_str<E: ::serde::de::Error>(self, v: &str) -> ::std::result::Result<$name, E> {
                        v.parse().map_err(E::custom)
                    }
                }
                deserializer.deserialize_str(Visitor)
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(stringify!($name))
            }
            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({
                    "type": "string",
                    "enum": $name::VALUES,
                })
            }
        }
    };
}
pub(crate) use string_enum;

// ---------------------------------------------------------------------------------------
// Time

/// A point in time, written as RFC 3339 in UTC with whole seconds
/// (`2026-11-21T10:00:00Z`), like Kubernetes' `metav1.Time`. Any RFC 3339 timestamp is
/// accepted on input and converted to UTC.
///
/// Sub-second precision is dropped on serialization; [`Time::new`] drops it up front so a
/// value compares equal to itself after a round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub DateTime<Utc>);

impl Time {
    /// `at`, truncated to whole seconds.
    pub fn new(at: DateTime<Utc>) -> Self {
        Time(at.with_nanosecond(0).unwrap_or(at))
    }

    /// Parses an RFC 3339 timestamp (any offset) into UTC.
    pub fn parse(s: &str) -> Result<Self, chrono::ParseError> {
        Ok(Time(DateTime::parse_from_rfc3339(s)?.with_timezone(&Utc)))
    }

    /// The instant as a chrono value.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Time {
    fn from(at: DateTime<Utc>) -> Self {
        Time::new(at)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

impl std::str::FromStr for Time {
    type Err = chrono::ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Time::parse(s)
    }
}

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Time;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 timestamp such as \"2026-11-21T10:00:00Z\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Time, E> {
                Time::parse(v).map_err(|err| E::custom(format!("invalid timestamp {v:?}: {err}")))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl JsonSchema for Time {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("Time")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "date-time",
        })
    }
}

// ---------------------------------------------------------------------------------------
// ObjectMeta

/// Standard object metadata, as in Kubernetes (`metadata`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Name of the object, unique within its namespace (or cluster-wide for cluster-scoped
    /// kinds). Required unless `generateName` is set. Cannot be changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Prefix from which the server generates a unique name when `name` is empty; a
    /// random suffix is appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,

    /// Namespace of a namespaced object (a DNS-1123 label). Must be empty for
    /// cluster-scoped kinds such as Cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Unique id the server assigns on creation. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,

    /// Opaque version of this object, changed by every write; send it back on update
    /// for optimistic concurrency, and use it to resume a watch. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,

    /// Sequence number of the desired state: incremented by the server whenever the
    /// spec changes. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,

    /// When the object was created. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,

    /// When deletion was requested; the object is removed once its finalizers are
    /// gone. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,

    /// Seconds allowed for graceful termination when deletion was requested. Read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_grace_period_seconds: Option<i64>,

    /// Key/value pairs used to select objects (e.g. `env: prod` on a Cluster, matched by
    /// `placement.clusterSelector`). Keys are qualified names, values at most 63
    /// characters.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub labels: BTreeMap<String, String>,

    /// Non-identifying key/value data for tools and people. Keys are qualified names;
    /// all annotations together are at most 256 KiB.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub annotations: BTreeMap<String, String>,

    /// Names of controllers that must finish cleaning up before the object is deleted.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub finalizers: Vec<String>,

    /// Objects this one belongs to; garbage collection follows them.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["uid"]))]
    pub owner_references: Vec<OwnerReference>,

    /// Which manager (a client, a controller) owns which fields, and when it last changed
    /// them: server-side apply's record (`docs/api.md`). Maintained by the server; a write
    /// may replace it, and `[{}]` clears it.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub managed_fields: Vec<ManagedFieldsEntry>,
}

/// One manager's fields (`metadata.managedFields[]`), as in Kubernetes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedFieldsEntry {
    /// The manager: the `fieldManager` of its requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<String>,
    /// `Apply` (server-side apply) or `Update` (any other write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The version of the fields' schema, e.g. `fedingress.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// When the manager last changed the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// The format of `fieldsV1`: always `FieldsV1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields_type: Option<String>,
    /// The fields owned, as a trie of `f:<field>`, `k:<keys>`, `v:<value>` and `.`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, serde_json::Value>>")]
    pub fields_v1: Option<serde_json::Value>,
    /// The subresource written (`status`), empty for the object itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subresource: Option<String>,
}

/// A reference to an owning object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// API version of the owner, e.g. `fedingress.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// Kind of the owner, e.g. `FederatedIngress`.
    #[serde(default)]
    pub kind: String,
    /// Name of the owner.
    #[serde(default)]
    pub name: String,
    /// UID of the owner.
    #[serde(default)]
    pub uid: String,
    /// Whether the owner is the managing controller (at most one reference may say so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether deleting the owner in the foreground waits for this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Kubernetes sends `null` for empty maps and lists now and then; read it as empty.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

impl ObjectMeta {
    /// Metadata with just a name.
    pub fn named(name: impl Into<String>) -> Self {
        ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        }
    }

    /// Metadata with a namespace and a name.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        }
    }

    /// The name, or `""` when unset.
    pub fn name_str(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The namespace, or `""` when unset.
    pub fn namespace_str(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
}

/// The total size of all annotations (keys and values), as in Kubernetes.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// A function validating a name, returning messages (one of [`crate::names`]).
pub type NameValidator = fn(&str) -> Vec<String>;

/// Validates `meta` at `path` (usually `metadata`).
///
/// - `name` is required unless `generateName` is set, and must pass `validate_name`
///   (e.g. [`names::dns1123_subdomain`] for FederatedIngress, [`names::dns1123_label`]
///   for Cluster); `generateName` must pass it too once a suffix would be appended.
/// - `namespace` is a required DNS-1123 label when `namespaced`, forbidden otherwise.
/// - label keys are qualified names and values label values; annotation keys are
///   qualified names and all annotations fit in 256 KiB; finalizers are qualified names;
///   owner references name their owner completely and at most one is the controller.
pub fn validate_object_meta(
    meta: &ObjectMeta,
    namespaced: bool,
    validate_name: NameValidator,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();

    let generate_name = meta.generate_name.as_deref().unwrap_or("");
    match meta.name.as_deref() {
        Some(name) if !name.is_empty() => {
            for msg in validate_name(name) {
                errs.push(FieldError::invalid(path.child("name"), name, msg));
            }
        }
        _ if !generate_name.is_empty() => {
            // The server appends a suffix; validate what the prefix can become.
            let masked = match generate_name.strip_suffix('-') {
                Some(prefix) => format!("{prefix}a"),
                None => generate_name.to_owned(),
            };
            for msg in validate_name(&masked) {
                errs.push(FieldError::invalid(
                    path.child("generateName"),
                    generate_name,
                    msg,
                ));
            }
        }
        _ => errs.push(FieldError::required(
            path.child("name"),
            "name or generateName is required",
        )),
    }

    let namespace = meta.namespace.as_deref().unwrap_or("");
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required(path.child("namespace"), ""));
        } else {
            for msg in names::dns1123_label(namespace) {
                errs.push(FieldError::invalid(path.child("namespace"), namespace, msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            path.child("namespace"),
            "not allowed on this type",
        ));
    }

    if let Some(generation) = meta.generation
        && generation < 0
    {
        errs.push(FieldError::invalid(
            path.child("generation"),
            generation,
            "must be greater than or equal to 0",
        ));
    }

    errs.extend(validate_labels(&meta.labels, &path.child("labels")));
    errs.extend(validate_annotations(
        &meta.annotations,
        &path.child("annotations"),
    ));

    let finalizers = path.child("finalizers");
    for (i, finalizer) in meta.finalizers.iter().enumerate() {
        for msg in names::qualified_name(finalizer) {
            errs.push(FieldError::invalid(finalizers.index(i), finalizer, msg));
        }
    }

    let owners = path.child("ownerReferences");
    let mut controllers = 0;
    for (i, owner) in meta.owner_references.iter().enumerate() {
        let at = owners.index(i);
        for (field, value) in [
            ("apiVersion", &owner.api_version),
            ("kind", &owner.kind),
            ("name", &owner.name),
            ("uid", &owner.uid),
        ] {
            if value.is_empty() {
                errs.push(FieldError::required(at.child(field), ""));
            }
        }
        if owner.controller == Some(true) {
            controllers += 1;
        }
    }
    if controllers > 1 {
        errs.push(FieldError::invalid(
            owners,
            controllers,
            "only one reference can have controller set to true",
        ));
    }

    errs
}

/// Validates label keys (qualified names) and values (label values). Key errors are at
/// `path`, value errors at `path[key]`.
pub fn validate_labels(labels: &BTreeMap<String, String>, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in labels {
        for msg in names::qualified_name(key) {
            errs.push(FieldError::invalid(path.clone(), key, msg));
        }
        for msg in names::label_value(value) {
            errs.push(FieldError::invalid(path.key(key), value, msg));
        }
    }
    errs
}

/// Validates annotation keys (qualified names, compared lower-cased as Kubernetes does)
/// and the total size of all annotations.
pub fn validate_annotations(
    annotations: &BTreeMap<String, String>,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0;
    for (key, value) in annotations {
        for msg in names::qualified_name(&key.to_ascii_lowercase()) {
            errs.push(FieldError::invalid(path.clone(), key, msg));
        }
        total += key.len() + value.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(
            path.clone(),
            TOTAL_ANNOTATION_SIZE_LIMIT,
        ));
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Conditions

string_enum! {
    /// Whether a condition holds.
    pub enum ConditionStatus {
        /// The condition holds.
        True => "True",
        /// The condition does not hold.
        False => "False",
        /// It is not known whether the condition holds.
        Unknown => "Unknown",
    }
}

/// One aspect of an object's observed state, as in Kubernetes' `metav1.Condition`
/// (e.g. `Ready`, `Placed`, `Connected`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition in PascalCase, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,

    /// Whether the condition holds: `True`, `False` or `Unknown`.
    pub status: ConditionStatus,

    /// Machine-readable reason for the last transition, in PascalCase (e.g. `Conflict`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,

    /// Human-readable details about the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,

    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,

    /// The `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition without transition time or observed generation (see
    /// [`set_condition`], which fills in the time).
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    /// Sets the observed generation.
    #[must_use]
    pub fn with_observed_generation(mut self, generation: i64) -> Self {
        self.observed_generation = Some(generation);
        self
    }

    /// Whether `status` is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Sets `condition` in `conditions`, replacing the one of the same type.
///
/// `lastTransitionTime` moves only when the status changes (to the new condition's own
/// time if it carries one, else `now`); reason, message and observed generation are always
/// taken from `condition`. Returns whether anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, condition: Condition, now: Time) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            let mut condition = condition;
            condition.last_transition_time.get_or_insert(now);
            conditions.push(condition);
            true
        }
        Some(existing) => {
            let mut changed = false;
            if existing.status != condition.status {
                existing.status = condition.status;
                existing.last_transition_time = Some(condition.last_transition_time.unwrap_or(now));
                changed = true;
            }
            if existing.reason != condition.reason {
                existing.reason = condition.reason;
                changed = true;
            }
            if existing.message != condition.message {
                existing.message = condition.message;
                changed = true;
            }
            if existing.observed_generation != condition.observed_generation {
                existing.observed_generation = condition.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present and `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(Condition::is_true)
}

/// Removes the condition of type `type_`; returns whether one was removed.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64) -> Time {
        Time::new(Utc.timestamp_opt(1_795_000_000 + secs, 0).single().unwrap())
    }

    #[test]
    fn time_round_trip() {
        let t: Time = serde_json::from_str("\"2026-11-21T10:00:00Z\"").unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-11-21T10:00:00Z\""
        );
        // Any offset and fractional seconds are accepted; output is UTC, whole seconds.
        let t: Time = serde_json::from_str("\"2026-11-21T11:00:00.123456+01:00\"").unwrap();
        assert_eq!(t.to_string(), "2026-11-21T10:00:00Z");
        let again: Time = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(again.to_string(), t.to_string());
        // Time::new truncates, so values survive a round trip unchanged.
        let precise = Utc
            .timestamp_opt(1_795_000_000, 999_000_000)
            .single()
            .unwrap();
        let t = Time::new(precise);
        let back: Time = serde_json::from_value(serde_json::to_value(t).unwrap()).unwrap();
        assert_eq!(back, t);
        let err = serde_json::from_str::<Time>("\"yesterday\"").unwrap_err();
        assert!(
            err.to_string().contains("invalid timestamp \"yesterday\""),
            "{err}"
        );
        assert!(serde_json::from_str::<Time>("12").is_err());
    }

    #[test]
    fn time_schema() {
        let schema = schemars::schema_for!(Time);
        assert_eq!(schema.get("type"), Some(&serde_json::json!("string")));
        assert_eq!(schema.get("format"), Some(&serde_json::json!("date-time")));
    }

    #[test]
    fn object_meta_camel_case_and_sparse() {
        let meta = ObjectMeta {
            name: Some("shop".into()),
            generate_name: Some("shop-".into()),
            resource_version: Some("42".into()),
            creation_timestamp: Some(Time::parse("2026-11-21T10:00:00Z").unwrap()),
            deletion_grace_period_seconds: Some(0),
            owner_references: vec![OwnerReference {
                api_version: "v1".into(),
                kind: "X".into(),
                name: "x".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }],
            ..ObjectMeta::default()
        };
        assert_eq!(
            serde_json::to_value(&meta).unwrap(),
            serde_json::json!({
                "name": "shop",
                "generateName": "shop-",
                "resourceVersion": "42",
                "creationTimestamp": "2026-11-21T10:00:00Z",
                "deletionGracePeriodSeconds": 0,
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u", "controller": true}],
            })
        );
        assert_eq!(
            serde_json::to_value(ObjectMeta::default()).unwrap(),
            serde_json::json!({})
        );
        // kubectl sometimes sends nulls.
        let meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "a", "creationTimestamp": null, "labels": null, "annotations": null,
            "finalizers": null, "ownerReferences": null,
        }))
        .unwrap();
        assert_eq!(meta, ObjectMeta::named("a"));
    }

    fn paths(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn meta_name_and_namespace() {
        let root = FieldPath::new("metadata");
        let ok = ObjectMeta::namespaced("default", "shop.v2");
        assert!(validate_object_meta(&ok, true, names::dns1123_subdomain, &root).is_empty());

        let missing = ObjectMeta::default();
        assert_eq!(
            paths(&validate_object_meta(
                &missing,
                false,
                names::dns1123_label,
                &root
            )),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert_eq!(
            paths(&validate_object_meta(
                &missing,
                true,
                names::dns1123_label,
                &root
            )),
            vec![
                "metadata.name: Required value: name or generateName is required",
                "metadata.namespace: Required value",
            ]
        );

        let generated = ObjectMeta {
            generate_name: Some("shop-".into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        };
        assert!(validate_object_meta(&generated, true, names::dns1123_label, &root).is_empty());
        let bad_generated = ObjectMeta {
            generate_name: Some("Shop-".into()),
            ..ObjectMeta::default()
        };
        assert_eq!(
            validate_object_meta(&bad_generated, false, names::dns1123_label, &root)[0].field(),
            "metadata.generateName"
        );

        let cluster_with_ns = ObjectMeta::namespaced("default", "eu.west");
        assert_eq!(
            paths(&validate_object_meta(
                &cluster_with_ns,
                false,
                names::dns1123_label,
                &root
            )),
            vec![
                "metadata.name: Invalid value: \"eu.west\": must not contain dots",
                "metadata.namespace: Forbidden: not allowed on this type",
            ]
        );
        let bad_ns = ObjectMeta::namespaced("Default", "shop");
        let errs = validate_object_meta(&bad_ns, true, names::dns1123_subdomain, &root);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field(), "metadata.namespace");
    }

    #[test]
    fn meta_labels_annotations_finalizers() {
        let root = FieldPath::new("metadata");
        let mut meta = ObjectMeta::named("eu-west");
        meta.labels.insert("env".into(), "prod".into());
        meta.labels.insert("example.com/tier".into(), "gold".into());
        meta.annotations
            .insert("Example.com/Note".into(), "anything goes here".into());
        meta.finalizers.push("fedingress.io/dns".into());
        assert!(validate_object_meta(&meta, false, names::dns1123_label, &root).is_empty());

        meta.labels.insert("bad key".into(), "ok".into());
        meta.labels.insert("k".into(), "-bad".into());
        meta.annotations.insert("a/b/c".into(), String::new());
        meta.finalizers.push("not/a/qualified/name".into());
        let errs = validate_object_meta(&meta, false, names::dns1123_label, &root);
        let fields: Vec<String> = errs.iter().map(FieldError::field).collect();
        assert_eq!(
            fields,
            vec![
                "metadata.labels",
                "metadata.labels[k]",
                "metadata.annotations",
                "metadata.finalizers[1]"
            ]
        );
        assert!(
            errs[0]
                .to_string()
                .starts_with("metadata.labels: Invalid value: \"bad key\": name part must consist")
        );

        let mut big = ObjectMeta::named("a");
        big.annotations
            .insert("a".into(), "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT));
        assert_eq!(
            paths(&validate_object_meta(
                &big,
                false,
                names::dns1123_label,
                &root
            )),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]
        );
    }

    #[test]
    fn meta_owner_references() {
        let root = FieldPath::new("metadata");
        let mut meta = ObjectMeta::named("a");
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "X".into(),
            name: "x".into(),
            uid: "1".into(),
            controller: Some(true),
            block_owner_deletion: None,
        };
        meta.owner_references = vec![owner.clone(), owner, OwnerReference::default()];
        assert_eq!(
            paths(&validate_object_meta(
                &meta,
                false,
                names::dns1123_label,
                &root
            )),
            vec![
                "metadata.ownerReferences[2].apiVersion: Required value",
                "metadata.ownerReferences[2].kind: Required value",
                "metadata.ownerReferences[2].name: Required value",
                "metadata.ownerReferences[2].uid: Required value",
                "metadata.ownerReferences: Invalid value: 2: only one reference can have controller set to true",
            ]
        );
    }

    #[test]
    fn condition_status_case_insensitive() {
        let c: Condition =
            serde_json::from_value(serde_json::json!({"type": "Ready", "status": "true"})).unwrap();
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({"type": "Ready", "status": "True"})
        );
        let err = serde_json::from_value::<Condition>(
            serde_json::json!({"type": "Ready", "status": "yes"}),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains(
                "Unsupported value: \"yes\": supported values: \"True\", \"False\", \"Unknown\""
            ),
            "{err}"
        );
    }

    #[test]
    fn set_condition_moves_time_only_on_status_change() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            Condition::new("Ready", ConditionStatus::False, "Pending", "waiting"),
            at(0)
        ));
        assert_eq!(conditions[0].last_transition_time, Some(at(0)));

        // Same status, new message: time stays.
        assert!(set_condition(
            &mut conditions,
            Condition::new("Ready", ConditionStatus::False, "Pending", "still waiting")
                .with_observed_generation(2),
            at(10)
        ));
        assert_eq!(conditions[0].last_transition_time, Some(at(0)));
        assert_eq!(conditions[0].message, "still waiting");
        assert_eq!(conditions[0].observed_generation, Some(2));

        // Nothing new: no change reported.
        assert!(!set_condition(
            &mut conditions,
            Condition::new("Ready", ConditionStatus::False, "Pending", "still waiting")
                .with_observed_generation(2),
            at(20)
        ));

        // Status flips: time moves.
        assert!(set_condition(
            &mut conditions,
            Condition::new("Ready", ConditionStatus::True, "Ready", ""),
            at(30)
        ));
        assert_eq!(conditions[0].last_transition_time, Some(at(30)));
        assert!(is_condition_true(&conditions, "Ready"));
        assert!(!is_condition_true(&conditions, "Placed"));

        set_condition(
            &mut conditions,
            Condition::new("Placed", ConditionStatus::True, "", ""),
            at(40),
        );
        assert_eq!(conditions.len(), 2);
        assert!(remove_condition(&mut conditions, "Placed"));
        assert!(!remove_condition(&mut conditions, "Placed"));
        assert_eq!(
            find_condition(&conditions, "Ready").map(|c| c.type_.as_str()),
            Some("Ready")
        );
    }
}
