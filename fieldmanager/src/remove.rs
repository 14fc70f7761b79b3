//! Removing paths from a value (SMD's `typed/remove.go`): a member path removes the field,
//! map entry or list item with everything under it; a path below descends.

use crate::path::PathElement;
use crate::schema::Schema;
use crate::set::FieldSet;
use crate::walk::{Shape, list_item_pe, shape};
use serde_json::{Map, Value};

/// `value` without the paths in `to_remove`. Maps and lists that the removal empties are
/// dropped from their parent (SMD leaves `null` there, which kube-apiserver then prunes
/// from structural objects).
pub(crate) fn remove_items(schema: &Schema, value: &Value, to_remove: &FieldSet) -> Value {
    if to_remove.is_empty() {
        return value.clone();
    }
    remove(schema, value, to_remove).unwrap_or_else(|| Value::Object(Map::new()))
}

fn remove(schema: &Schema, value: &Value, to_remove: &FieldSet) -> Option<Value> {
    match shape(schema, value) {
        Shape::Leaf => Some(value.clone()),
        Shape::Map(map) => {
            if map.is_empty() {
                return Some(value.clone());
            }
            let mut out = Map::new();
            for (key, child) in map {
                let pe = PathElement::Field(key.clone());
                if to_remove.members.contains(&pe) {
                    continue;
                }
                let kept = match to_remove.with_prefix(&pe) {
                    Some(sub) => remove(schema.child(key), child, sub),
                    None => Some(child.clone()),
                };
                if let Some(kept) = kept {
                    out.insert(key.clone(), kept);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Shape::List(items, item_schema, list) => {
            if items.is_empty() {
                return Some(value.clone());
            }
            let mut out = Vec::new();
            for item in items {
                let Ok(pe) = list_item_pe(list, item) else {
                    out.push(item.clone());
                    continue;
                };
                if to_remove.members.contains(&pe) {
                    continue;
                }
                let kept = match to_remove.with_prefix(&pe) {
                    Some(sub) => remove(item_schema, item, sub),
                    None => Some(item.clone()),
                };
                out.extend(kept);
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
    }
}
