//! What a write may touch (kube's reset fields and `stripMetaManager`): a write to the
//! main resource ignores `status`, a `status` subresource write touches only `status`,
//! and the object's identity and server-set metadata are never owned.

use crate::path::PathElement;
use crate::set::FieldSet;
use serde_json::Value;

/// Metadata fields the server sets or that identify the object: never owned, never
/// taken from an applied configuration. kube's stripMetaManager list plus the deletion
/// fields.
const STRIPPED_METADATA: [&str; 11] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "clusterName",
];

/// The part of an object a write is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The main resource (and subresources other than status): everything but `status`.
    Main,
    /// The status subresource: only `status`.
    Status,
}

fn status() -> PathElement {
    PathElement::Field("status".into())
}

impl Scope {
    pub(crate) fn of(subresource: Option<&str>) -> Scope {
        if subresource == Some("status") {
            Scope::Status
        } else {
            Scope::Main
        }
    }

    /// The paths of `set` this write may own or change.
    pub(crate) fn filter(self, set: &FieldSet) -> FieldSet {
        match self {
            Scope::Main => set.without_top(&status()),
            Scope::Status => set.only_top(&status()),
        }
    }

    /// The part of an applied configuration that is merged into the live object: in
    /// scope, without managedFields, and (when the object exists) without the
    /// identity and server-set metadata, whose live values stay.
    pub(crate) fn project_config(self, config: &Value, create: bool) -> Value {
        let Value::Object(obj) = config else {
            return config.clone();
        };
        let mut out = obj.clone();
        match self {
            Scope::Main => {
                out.shift_remove("status");
            }
            Scope::Status => out.retain(|k, _| k == "status"),
        }
        if !create {
            out.shift_remove("apiVersion");
            out.shift_remove("kind");
        }
        if let Some(Value::Object(meta)) = out.get_mut("metadata") {
            meta.retain(|k, _| {
                !STRIPPED_METADATA.contains(&k.as_str())
                    || (create && (k == "name" || k == "namespace"))
            });
        }
        Value::Object(out)
    }
}

/// The paths stripMetaManager removes from the writer's set.
pub(crate) fn strip_set() -> FieldSet {
    let mut set = FieldSet::new();
    for top in ["apiVersion", "kind", "metadata"] {
        set.insert(&crate::path::Path::fields([top]));
    }
    for field in STRIPPED_METADATA {
        set.insert(&crate::path::Path::fields(["metadata", field]));
    }
    set
}

/// `value` without `metadata.managedFields`.
pub(crate) fn without_managed_fields(value: &Value) -> Value {
    let mut out = value.clone();
    if let Some(Value::Object(meta)) = out.get_mut("metadata") {
        meta.shift_remove("managedFields");
    }
    out
}

/// The live object's `metadata.uid`, when it has one.
pub(crate) fn has_uid(value: &Value) -> bool {
    value
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .is_some_and(|u| !u.is_empty())
}
