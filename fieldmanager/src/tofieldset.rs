//! The set of fields a value sets (SMD's `ToFieldSet`) and `EnsureNamedFieldsAreMembers`.

use crate::path::PathElement;
use crate::schema::Schema;
use crate::set::FieldSet;
use crate::walk::{Shape, child_schema, list_item_pe, shape};
use serde_json::Value;
use std::collections::BTreeSet;

impl FieldSet {
    /// The fields `value` sets, as SMD's `ToFieldSet`: leaves, atomic values as leaves,
    /// list items as members (and their fields), map entries as members, struct fields
    /// only when null or an empty object. A list item that cannot be named (a list-map
    /// item without a key) is skipped; a duplicated item is a member without children.
    pub fn from_value(schema: &Schema, value: &Value) -> FieldSet {
        let mut set = FieldSet::new();
        walk(schema, value, &mut Vec::new(), &mut set);
        set
    }
}

fn walk(schema: &Schema, value: &Value, path: &mut Vec<PathElement>, set: &mut FieldSet) {
    match shape(schema, value) {
        Shape::Leaf => set.insert_elements(path),
        Shape::Map(map) => {
            for (key, child) in map {
                path.push(PathElement::Field(key.clone()));
                walk(schema.child(key), child, path, set);
                let empty_object = matches!(child, Value::Object(m) if m.is_empty());
                if child.is_null() || empty_object || !schema.is_named_field(key) {
                    set.insert_elements(path);
                }
                path.pop();
            }
        }
        Shape::List(items, item_schema, list) => {
            let pes: Vec<Option<PathElement>> =
                items.iter().map(|i| list_item_pe(list, i).ok()).collect();
            let mut seen = BTreeSet::new();
            let mut duplicates = BTreeSet::new();
            for pe in pes.iter().flatten() {
                if !seen.insert(pe.clone()) && duplicates.insert(pe.clone()) {
                    path.push(pe.clone());
                    set.insert_elements(path);
                    path.pop();
                }
            }
            for (item, pe) in items.iter().zip(pes) {
                let Some(pe) = pe else { continue };
                if duplicates.contains(&pe) {
                    continue;
                }
                path.push(pe);
                walk(item_schema, item, path, set);
                set.insert_elements(path);
                path.pop();
            }
        }
    }
}

/// `set` with every named struct field on the way to its paths made a member too (so
/// that removing `a.b.c` can remove the struct `a.b`), as SMD's
/// `EnsureNamedFieldsAreMembers`; map keys are not named fields.
pub(crate) fn ensure_named_fields_are_members(schema: &Schema, set: &FieldSet) -> FieldSet {
    let mut out = FieldSet {
        members: set.members.clone(),
        children: Default::default(),
    };
    for (pe, child) in &set.children {
        if let PathElement::Field(name) = pe
            && schema.is_named_field(name)
        {
            out.members.insert(pe.clone());
        }
        out.children.insert(
            pe.clone(),
            ensure_named_fields_are_members(child_schema(schema, pe), child),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Path;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_openapi(&json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "empty": {"type": "object", "properties": {"a": {"type": "string"}}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}, "name": {"type": "string"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}}}}}}))
        .unwrap()
    }

    #[test]
    fn sets_leaves_items_and_entries() {
        let v = json!({
            "metadata": {"name": "x", "labels": {"app": "a"}},
            "spec": {"replicas": 1, "empty": {}, "selector": {"a": "b"},
                     "ports": [{"port": 80, "protocol": "TCP", "name": "http"}],
                     "tags": ["a", "b", "a"], "args": ["x"], "unknown": {"deep": 1}}
        });
        let set = FieldSet::from_value(&schema(), &v);
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            concat!(
                r#"{"f:metadata":{"f:labels":{"f:app":{}},"f:name":{}},"#,
                r#""f:spec":{"f:args":{},"f:empty":{},"#,
                r#""f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{}}},"#,
                r#""f:replicas":{},"f:selector":{},"f:tags":{"v:\"a\"":{},"v:\"b\"":{}},"#,
                r#""f:unknown":{".":{},"f:deep":{}}}}"#
            )
        );
    }

    #[test]
    fn named_fields_become_members() {
        let mut set = FieldSet::new();
        set.insert(&Path::fields(["metadata", "labels", "app"]));
        set.insert(&Path::fields(["spec", "unknown", "x"]));
        let named = ensure_named_fields_are_members(&schema(), &set);
        assert!(named.has(&Path::fields(["metadata"])));
        assert!(named.has(&Path::fields(["metadata", "labels"])));
        assert!(named.has(&Path::fields(["spec"])));
        assert!(!named.has(&Path::fields(["spec", "unknown"])));
    }
}
