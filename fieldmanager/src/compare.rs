//! Comparing two versions of an object (SMD's `typed/compare.go`): which paths were
//! added, modified or removed. A new map or list item is added together with everything
//! in it; a removed one is removed with everything in it.

use crate::path::PathElement;
use crate::schema::{ListType, Schema};
use crate::set::FieldSet;
use crate::value::value_eq;
use crate::walk::{Shape, WalkError, is_empty_container, list_item_pe, same_kind, shape};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The difference between two objects, as paths.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Paths set in both, with different values (leaves only).
    pub modified: FieldSet,
    /// Paths set only in the new object.
    pub added: FieldSet,
    /// Paths set only in the old object.
    pub removed: FieldSet,
}

impl Comparison {
    /// Keeps only the paths `keep` accepts in each set.
    pub(crate) fn filtered(self, keep: impl Fn(&FieldSet) -> FieldSet) -> Comparison {
        Comparison {
            modified: keep(&self.modified),
            added: keep(&self.added),
            removed: keep(&self.removed),
        }
    }
}

/// Compares `lhs` (old) with `rhs` (new).
///
/// # Errors
/// A list-map item without one of its keys; the error names the path.
pub(crate) fn compare_values(
    schema: &Schema,
    lhs: &Value,
    rhs: &Value,
) -> Result<Comparison, WalkError> {
    let mut cmp = Comparison::default();
    compare(schema, Some(lhs), Some(rhs), &mut Vec::new(), &mut cmp)?;
    Ok(cmp)
}

fn compare(
    schema: &Schema,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    cmp: &mut Comparison,
) -> Result<(), WalkError> {
    let leaf = compare_inner(schema, lhs, rhs, path, cmp)?;
    if !leaf {
        if lhs.is_none() {
            cmp.added.insert_elements(path);
        } else if rhs.is_none() {
            cmp.removed.insert_elements(path);
        }
    }
    Ok(())
}

fn leaf(
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &[PathElement],
    cmp: &mut Comparison,
) -> bool {
    match (lhs, rhs) {
        (None, _) => cmp.added.insert_elements(path),
        (_, None) => cmp.removed.insert_elements(path),
        (Some(l), Some(r)) if !value_eq(l, r) => cmp.modified.insert_elements(path),
        _ => {}
    }
    true
}

/// Returns whether the value was compared as a leaf.
fn compare_inner(
    schema: &Schema,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
    cmp: &mut Comparison,
) -> Result<bool, WalkError> {
    let Some(probe) = rhs.or(lhs) else {
        return Ok(true);
    };
    if let (Some(l), Some(r)) = (lhs, rhs)
        && !same_kind(l, r)
    {
        return Ok(leaf(lhs, rhs, path, cmp));
    }
    match shape(schema, probe) {
        Shape::Leaf => Ok(leaf(lhs, rhs, path, cmp)),
        Shape::Map(_) => {
            if is_empty_container(lhs) && is_empty_container(rhs) {
                return Ok(leaf(lhs, rhs, path, cmp));
            }
            let empty = Map::new();
            let lmap = lhs.and_then(Value::as_object).unwrap_or(&empty);
            let rmap = rhs.and_then(Value::as_object).unwrap_or(&empty);
            for key in lmap
                .keys()
                .chain(rmap.keys().filter(|k| !lmap.contains_key(*k)))
            {
                path.push(PathElement::Field(key.clone()));
                compare(schema.child(key), lmap.get(key), rmap.get(key), path, cmp)?;
                path.pop();
            }
            Ok(false)
        }
        Shape::List(_, item_schema, list) => {
            if is_empty_container(lhs) && is_empty_container(rhs) {
                return Ok(leaf(lhs, rhs, path, cmp));
            }
            let litems: &[Value] = lhs
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let ritems: &[Value] = rhs
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            compare_list(item_schema, list, litems, ritems, path, cmp)?;
            Ok(false)
        }
    }
}

fn compare_list(
    item_schema: &Schema,
    list: &ListType,
    litems: &[Value],
    ritems: &[Value],
    path: &mut Vec<PathElement>,
    cmp: &mut Comparison,
) -> Result<(), WalkError> {
    let mut all = Vec::new();
    let mut lvalues: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
    for (i, item) in litems.iter().enumerate() {
        let pe = list_item_pe(list, item)
            .map_err(|e| WalkError::at(path, format!("element {i}: {e}")))?;
        let entry = lvalues.entry(pe.clone()).or_default();
        if entry.is_empty() {
            all.push(pe);
        }
        entry.push(item);
    }
    let mut rvalues: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
    for (i, item) in ritems.iter().enumerate() {
        let pe = list_item_pe(list, item)
            .map_err(|e| WalkError::at(path, format!("element {i}: {e}")))?;
        let entry = rvalues.entry(pe.clone()).or_default();
        if entry.is_empty() && !lvalues.contains_key(&pe) {
            all.push(pe);
        }
        entry.push(item);
    }
    for pe in all {
        let l = lvalues.get(&pe).map(Vec::as_slice).unwrap_or(&[]);
        let r = rvalues.get(&pe).map(Vec::as_slice).unwrap_or(&[]);
        path.push(pe);
        match (l.len(), r.len()) {
            (0..=1, 0..=1) => compare(
                item_schema,
                l.first().copied(),
                r.first().copied(),
                path,
                cmp,
            )?,
            (2.., 2..) => {
                let equal = l.len() == r.len() && l.iter().zip(r).all(|(a, b)| value_eq(a, b));
                if !equal {
                    cmp.modified.insert_elements(path);
                }
            }
            (2.., _) => {
                if let Some(first) = r.first() {
                    compare(item_schema, None, Some(first), path, cmp)?;
                }
                cmp.removed.insert_elements(path);
            }
            (_, _) => {
                if let Some(first) = l.first() {
                    compare(item_schema, Some(first), None, path, cmp)?;
                }
                cmp.added.insert_elements(path);
            }
        }
        path.pop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v1(s: &FieldSet) -> String {
        serde_json::to_string(&s.to_fields_v1()).unwrap()
    }

    #[test]
    fn reports_added_modified_removed() {
        let schema = Schema::from_openapi(&json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"}, "paused": {"type": "boolean"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}}}}}))
        .unwrap();
        let old = json!({"spec": {"replicas": 1, "paused": true, "ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}});
        let new = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"replicas": 2.0, "ports": [{"name": "a", "port": 1}, {"name": "c", "port": 3}]}});
        let cmp = compare_values(&schema, &old, &new).unwrap();
        assert_eq!(v1(&cmp.modified), r#"{"f:spec":{"f:replicas":{}}}"#);
        assert_eq!(
            v1(&cmp.added),
            r#"{"f:metadata":{".":{},"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:ports":{"k:{\"name\":\"c\"}":{".":{},"f:name":{},"f:port":{}}}}}"#
        );
        assert_eq!(
            v1(&cmp.removed),
            r#"{"f:spec":{"f:paused":{},"f:ports":{"k:{\"name\":\"b\"}":{".":{},"f:name":{},"f:port":{}}}}}"#
        );
        // Equal numbers of different representations are not modified.
        let cmp = compare_values(
            &schema,
            &json!({"spec": {"replicas": 1}}),
            &json!({"spec": {"replicas": 1.0}}),
        )
        .unwrap();
        assert!(cmp.modified.is_empty());
    }
}
