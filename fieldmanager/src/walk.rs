//! What the walks over a value share: how a value is handled under its schema (a leaf,
//! a granular map, a granular list) and how a list item is named (SMD's
//! `listItemToPathElement`).

use crate::path::{Path, PathElement};
use crate::schema::{ListType, Schema};
use serde_json::{Map, Value};

/// An error found while walking a value: where, and what.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WalkError(pub String);

impl WalkError {
    pub(crate) fn at(path: &[PathElement], reason: impl std::fmt::Display) -> WalkError {
        let p = Path(path.to_vec()).to_string();
        if p.is_empty() {
            WalkError(reason.to_string())
        } else {
            WalkError(format!("{p}: {reason}"))
        }
    }
}

/// How a value merges under its schema.
pub(crate) enum Shape<'a> {
    /// Compared and replaced as a whole: scalars, null, atomic maps and lists, untyped
    /// lists, and values whose kind does not match their schema.
    Leaf,
    /// An object merged key by key.
    Map(&'a Map<String, Value>),
    /// A set or list-map merged item by item.
    List(&'a [Value], &'a Schema, &'a ListType),
}

/// The shape of `value` under `schema`.
pub(crate) fn shape<'a>(schema: &'a Schema, value: &'a Value) -> Shape<'a> {
    match (schema, value) {
        (
            Schema::Struct { atomic: false, .. }
            | Schema::Map { atomic: false, .. }
            | Schema::Untyped,
            Value::Object(m),
        ) => Shape::Map(m),
        (
            Schema::List {
                items,
                list: list @ (ListType::Set | ListType::Map { .. }),
            },
            Value::Array(a),
        ) => Shape::List(a, items, list),
        _ => Shape::Leaf,
    }
}

/// True when both values have the same JSON kind (object, array, or other).
pub(crate) fn same_kind(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::Object(_), Value::Object(_)) | (Value::Array(_), Value::Array(_))
    ) || (!a.is_object() && !a.is_array() && !b.is_object() && !b.is_array())
}

/// The path element naming a list item: its value in a set, its key fields in a
/// list-map.
pub(crate) fn list_item_pe(list: &ListType, item: &Value) -> Result<PathElement, String> {
    match list {
        ListType::Atomic => Err("invalid indexing of non-associative list".into()),
        ListType::Set => Ok(PathElement::Value(item.clone())),
        ListType::Map { keys } => {
            let Value::Object(fields) = item else {
                return Err("associative list with keys has an element that is not a map".into());
            };
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                match fields.get(key) {
                    Some(v) => out.push((key.clone(), v.clone())),
                    None => {
                        return Err(format!(
                            "associative list with keys has an element that omits key field {key:?}"
                        ));
                    }
                }
            }
            Ok(PathElement::key(out))
        }
    }
}

/// True for an absent value, an empty object or an empty list.
pub(crate) fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// The schema below a path element.
pub(crate) fn child_schema<'a>(schema: &'a Schema, pe: &PathElement) -> &'a Schema {
    match (pe, schema) {
        (PathElement::Field(name), _) => schema.child(name),
        (_, Schema::List { items, .. }) => items,
        _ => schema.child(""),
    }
}
