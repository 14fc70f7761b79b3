//! The merge schema of one kind: which parts are structs (granular by field), maps
//! (granular by key), lists (atomic, sets, or maps keyed by some fields) and leaves. It
//! is read from the kind's OpenAPI v3 schema with the Kubernetes extensions, as
//! kube-apiserver reads a CRD's structural schema.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// How a list merges.
#[derive(Clone, Debug, PartialEq)]
pub enum ListType {
    /// Replaced as a whole (`x-kubernetes-list-type: atomic`, or none given).
    Atomic,
    /// Items are identified by their value (`set`).
    Set,
    /// Items are identified by the values of these fields (`map`).
    Map { keys: Vec<String> },
}

/// The merge schema of a value.
#[derive(Clone, Debug, PartialEq)]
pub enum Schema {
    /// A leaf (string, number, boolean, int-or-string).
    Scalar,
    /// An object with named fields; `atomic` when `x-kubernetes-map-type: atomic`.
    Struct {
        fields: BTreeMap<String, Schema>,
        atomic: bool,
    },
    /// An object with arbitrary keys (`additionalProperties`).
    Map { values: Box<Schema>, atomic: bool },
    /// A list.
    List { items: Box<Schema>, list: ListType },
    /// No type information: objects are granular maps of untyped values, lists are
    /// atomic, everything else is a leaf (SMD's deduced type).
    Untyped,
}

/// Why an OpenAPI schema could not be read as a merge schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("schema at {at}: {reason}")]
pub struct SchemaError {
    /// Where in the schema (`properties.spec.properties.rules`).
    pub at: String,
    /// What is wrong.
    pub reason: String,
}

static UNTYPED: Schema = Schema::Untyped;

impl Schema {
    /// Reads `type`, `properties`, `additionalProperties`, `items`,
    /// `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type`,
    /// following `allOf`/`anyOf`/`oneOf` wrappers and `nullable`. A list without
    /// `x-kubernetes-list-type` is atomic; a schema without type information is
    /// `Untyped`.
    ///
    /// # Errors
    /// An unknown list or map type, a list-map without keys, or a schema that is not a
    /// JSON object or boolean.
    ///
    /// For a kind (an object schema at the root), `apiVersion` and `kind` are leaves and
    /// `metadata`, when the schema leaves it out or untyped, is kube's ObjectMeta (as
    /// kube-apiserver always types a custom resource's metadata).
    pub fn from_openapi(schema: &Value) -> Result<Schema, SchemaError> {
        let mut root = read(schema, "")?;
        if let Schema::Struct { fields, .. } = &mut root {
            for top in ["apiVersion", "kind"] {
                fields.entry(top.into()).or_insert(Schema::Scalar);
            }
            let meta = fields.entry("metadata".into()).or_insert(Schema::Untyped);
            if *meta == Schema::Untyped {
                *meta = object_meta();
            }
        }
        Ok(root)
    }

    /// The schema of a struct field or map value; `Untyped` for anything else.
    pub(crate) fn child(&self, key: &str) -> &Schema {
        match self {
            Schema::Struct { fields, .. } => fields.get(key).unwrap_or(&UNTYPED),
            Schema::Map { values, .. } => values,
            _ => &UNTYPED,
        }
    }

    /// True when `key` is a declared field of this struct (not a map key).
    pub(crate) fn is_named_field(&self, key: &str) -> bool {
        matches!(self, Schema::Struct { fields, .. } if fields.contains_key(key))
    }
}

/// kube's ObjectMeta merge schema: labels and annotations are granular maps,
/// finalizers a set, ownerReferences a list-map keyed by uid (atomic items),
/// managedFields atomic.
fn object_meta() -> Schema {
    let scalars = [
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ];
    let mut fields: BTreeMap<String, Schema> = scalars
        .iter()
        .map(|n| (n.to_string(), Schema::Scalar))
        .collect();
    for map in ["labels", "annotations"] {
        fields.insert(
            map.into(),
            Schema::Map {
                values: Box::new(Schema::Scalar),
                atomic: false,
            },
        );
    }
    fields.insert(
        "finalizers".into(),
        Schema::List {
            items: Box::new(Schema::Scalar),
            list: ListType::Set,
        },
    );
    fields.insert(
        "ownerReferences".into(),
        Schema::List {
            items: Box::new(Schema::Map {
                values: Box::new(Schema::Untyped),
                atomic: true,
            }),
            list: ListType::Map {
                keys: vec!["uid".into()],
            },
        },
    );
    fields.insert(
        "managedFields".into(),
        Schema::List {
            items: Box::new(Schema::Untyped),
            list: ListType::Atomic,
        },
    );
    Schema::Struct {
        fields,
        atomic: false,
    }
}

fn err(at: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError {
        at: if at.is_empty() {
            "the root".into()
        } else {
            at.into()
        },
        reason: reason.into(),
    }
}

fn join(at: &str, part: &str) -> String {
    if at.is_empty() {
        part.to_string()
    } else {
        format!("{at}.{part}")
    }
}

fn types_of(obj: &Map<String, Value>) -> Vec<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .filter(|t| *t != "null")
    .collect()
}

fn is_null_only(v: &Value) -> bool {
    match v {
        Value::Object(obj) => match obj.get("type") {
            Some(Value::String(t)) => t == "null",
            Some(Value::Array(ts)) => ts.iter().all(|t| t == "null"),
            _ => obj
                .get("enum")
                .is_some_and(|e| e == &Value::Array(vec![Value::Null])),
        },
        _ => false,
    }
}

fn read(schema: &Value, at: &str) -> Result<Schema, SchemaError> {
    let obj = match schema {
        Value::Bool(_) => return Ok(Schema::Untyped),
        Value::Object(obj) => obj,
        _ => return Err(err(at, "a schema must be a JSON object or boolean")),
    };
    if obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return Ok(Schema::Scalar);
    }
    let types = types_of(obj);
    let ty = types.first().copied();
    let object_like = ty == Some("object")
        || (ty.is_none()
            && (obj.contains_key("properties") || obj.contains_key("additionalProperties")));
    if object_like {
        return read_object(obj, at);
    }
    if ty == Some("array") || (ty.is_none() && obj.contains_key("items")) {
        return read_list(obj, at);
    }
    if let Some(t) = ty {
        return match t {
            "string" | "integer" | "number" | "boolean" => Ok(Schema::Scalar),
            other => Err(err(at, format!("unknown type {other:?}"))),
        };
    }
    read_wrappers(obj, at)
}

/// `allOf`/`anyOf`/`oneOf` without a type of their own: the alternatives that are not
/// just `null`; one kind of object merges their properties, one kind of anything else
/// is taken as it is, mixed kinds are untyped.
fn read_wrappers(obj: &Map<String, Value>, at: &str) -> Result<Schema, SchemaError> {
    let mut alternatives = Vec::new();
    for wrapper in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(subs)) = obj.get(wrapper) {
            for (i, sub) in subs.iter().enumerate() {
                if is_null_only(sub) {
                    continue;
                }
                let read = read(sub, &format!("{}[{i}]", join(at, wrapper)))?;
                if read != Schema::Untyped {
                    alternatives.push(read);
                }
            }
        }
    }
    let mut iter = alternatives.into_iter();
    let Some(first) = iter.next() else {
        return Ok(Schema::Untyped);
    };
    iter.try_fold(first, |acc, next| Ok(combine(acc, next)))
}

fn combine(a: Schema, b: Schema) -> Schema {
    match (a, b) {
        (
            Schema::Struct { mut fields, atomic },
            Schema::Struct {
                fields: more,
                atomic: b_atomic,
            },
        ) => {
            for (k, v) in more {
                fields.entry(k).or_insert(v);
            }
            Schema::Struct {
                fields,
                atomic: atomic || b_atomic,
            }
        }
        (Schema::Scalar, Schema::Scalar) => Schema::Scalar,
        (a, b) if std::mem::discriminant(&a) == std::mem::discriminant(&b) => a,
        _ => Schema::Untyped,
    }
}

fn map_type_atomic(obj: &Map<String, Value>, at: &str) -> Result<bool, SchemaError> {
    match obj.get("x-kubernetes-map-type").and_then(Value::as_str) {
        None | Some("granular") => Ok(false),
        Some("atomic") => Ok(true),
        Some(other) => Err(err(at, format!("unknown x-kubernetes-map-type {other:?}"))),
    }
}

fn read_object(obj: &Map<String, Value>, at: &str) -> Result<Schema, SchemaError> {
    let atomic = map_type_atomic(obj, at)?;
    if let Some(Value::Object(props)) = obj.get("properties") {
        let mut fields = BTreeMap::new();
        for (name, sub) in props {
            fields.insert(
                name.clone(),
                read(sub, &join(&join(at, "properties"), name))?,
            );
        }
        return Ok(Schema::Struct { fields, atomic });
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => Ok(Schema::Struct {
            fields: BTreeMap::new(),
            atomic,
        }),
        Some(sub @ (Value::Object(_) | Value::Bool(true))) => Ok(Schema::Map {
            values: Box::new(read(sub, &join(at, "additionalProperties"))?),
            atomic,
        }),
        _ if atomic => Ok(Schema::Map {
            values: Box::new(Schema::Untyped),
            atomic,
        }),
        _ => Ok(Schema::Untyped),
    }
}

fn read_list(obj: &Map<String, Value>, at: &str) -> Result<Schema, SchemaError> {
    let items = match obj.get("items") {
        Some(sub @ (Value::Object(_) | Value::Bool(_))) => read(sub, &join(at, "items"))?,
        _ => Schema::Untyped,
    };
    let list = match obj.get("x-kubernetes-list-type").and_then(Value::as_str) {
        None | Some("atomic") => ListType::Atomic,
        Some("set") => ListType::Set,
        Some("map") => {
            let keys: Vec<String> = match obj.get("x-kubernetes-list-map-keys") {
                Some(Value::Array(keys)) => keys
                    .iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect(),
                _ => Vec::new(),
            };
            if keys.is_empty() {
                return Err(err(
                    at,
                    "x-kubernetes-list-type map needs x-kubernetes-list-map-keys",
                ));
            }
            ListType::Map { keys }
        }
        Some(other) => return Err(err(at, format!("unknown x-kubernetes-list-type {other:?}"))),
    };
    Ok(Schema::List {
        items: Box::new(items),
        list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_structs_maps_and_lists() {
        let s = Schema::from_openapi(&json!({
            "type": "object",
            "properties": {
                "spec": {"anyOf": [{"type": "object", "properties": {
                    "replicas": {"type": ["integer", "null"], "format": "int32"},
                    "rules": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["name"],
                              "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "plain": {"type": "array", "items": {"type": "string"}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                                 "properties": {"app": {"type": "string"}}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "any": {"x-kubernetes-preserve-unknown-fields": true}
                }}, {"type": "null"}]}
            }
        }))
        .unwrap();
        let spec = s.child("spec");
        assert_eq!(spec.child("replicas"), &Schema::Scalar);
        assert!(
            matches!(spec.child("rules"), Schema::List { list: ListType::Map { keys }, .. } if keys == &["name"])
        );
        assert!(matches!(
            spec.child("tags"),
            Schema::List {
                list: ListType::Set,
                ..
            }
        ));
        assert!(matches!(
            spec.child("plain"),
            Schema::List {
                list: ListType::Atomic,
                ..
            }
        ));
        assert!(matches!(
            spec.child("selector"),
            Schema::Struct { atomic: true, .. }
        ));
        assert!(matches!(
            spec.child("labels"),
            Schema::Map { atomic: false, .. }
        ));
        assert_eq!(spec.child("any"), &Schema::Untyped);
        assert!(spec.is_named_field("rules"));
    }

    #[test]
    fn kinds_get_object_meta_when_their_schema_has_none() {
        let s = Schema::from_openapi(
            &json!({"type": "object", "properties": {"spec": {"type": "object"}}}),
        )
        .unwrap();
        assert_eq!(s.child("kind"), &Schema::Scalar);
        let meta = s.child("metadata");
        assert!(matches!(
            meta.child("labels"),
            Schema::Map { atomic: false, .. }
        ));
        assert!(matches!(
            meta.child("finalizers"),
            Schema::List {
                list: ListType::Set,
                ..
            }
        ));
        assert!(meta.is_named_field("name"));
    }

    #[test]
    fn rejects_unknown_extensions() {
        let e = Schema::from_openapi(&json!({"type": "object", "properties": {"l": {"type": "array", "x-kubernetes-list-type": "map"}}})).unwrap_err();
        assert!(e.to_string().contains("properties.l"), "{e}");
        assert!(
            Schema::from_openapi(&json!({"type": "array", "x-kubernetes-list-type": "bag"}))
                .is_err()
        );
        assert!(Schema::from_openapi(&json!(3)).is_err());
    }
}
