//! Merging an applied configuration into a live object (SMD's `typed/merge.go`):
//! granular maps merge key by key, sets and list-maps item by item, everything else is
//! replaced by the configuration.

use crate::path::PathElement;
use crate::schema::{ListType, Schema};
use crate::walk::{Shape, WalkError, is_empty_container, list_item_pe, same_kind, shape};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Merges `rhs` (the configuration) into `lhs` (the live object).
///
/// # Errors
/// A list-map item without one of its keys (either side), or a duplicated item in the
/// configuration; the error names the path.
pub(crate) fn merge_values(schema: &Schema, lhs: &Value, rhs: &Value) -> Result<Value, WalkError> {
    Ok(merge(schema, Some(lhs), Some(rhs), &mut Vec::new())?
        .unwrap_or_else(|| Value::Object(Map::new())))
}

fn merge(
    schema: &Schema,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut Vec<PathElement>,
) -> Result<Option<Value>, WalkError> {
    let Some(rhs) = rhs else {
        return Ok(lhs.cloned());
    };
    let lhs = lhs.filter(|l| same_kind(l, rhs));
    match shape(schema, rhs) {
        Shape::Leaf => Ok(Some(rhs.clone())),
        Shape::Map(rmap) => {
            let lmap = lhs.and_then(Value::as_object);
            if is_empty_container(lhs) && rmap.is_empty() {
                return Ok(Some(rhs.clone()));
            }
            let mut out = Map::new();
            let empty = Map::new();
            let lmap = lmap.unwrap_or(&empty);
            let keys = lmap
                .keys()
                .chain(rmap.keys().filter(|k| !lmap.contains_key(*k)));
            for key in keys {
                path.push(PathElement::Field(key.clone()));
                let merged = merge(schema.child(key), lmap.get(key), rmap.get(key), path)?;
                path.pop();
                if let Some(v) = merged {
                    out.insert(key.clone(), v);
                }
            }
            Ok(if out.is_empty() {
                None
            } else {
                Some(Value::Object(out))
            })
        }
        Shape::List(ritems, item_schema, list) => {
            let litems: &[Value] = lhs
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            if litems.is_empty() && ritems.is_empty() {
                return Ok(Some(rhs.clone()));
            }
            merge_list(item_schema, list, litems, ritems, path)
        }
    }
}

type Indexed<'a> = (Vec<PathElement>, BTreeMap<PathElement, Option<&'a Value>>);

/// Names every item; a duplicated name maps to `None` (allowed in the live object only).
fn index<'a>(
    list: &ListType,
    items: &'a [Value],
    allow_duplicates: bool,
    path: &[PathElement],
) -> Result<Indexed<'a>, WalkError> {
    let mut pes = Vec::with_capacity(items.len());
    let mut observed: BTreeMap<PathElement, Option<&Value>> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let pe = list_item_pe(list, item)
            .map_err(|e| WalkError::at(path, format!("element {i}: {e}")))?;
        if observed.contains_key(&pe) {
            if !allow_duplicates {
                return Err(WalkError::at(
                    path,
                    format!("duplicate entries for key {pe}"),
                ));
            }
            observed.insert(pe.clone(), None);
        } else {
            observed.insert(pe.clone(), Some(item));
        }
        pes.push(pe);
    }
    Ok((pes, observed))
}

/// SMD's list merge order: walk both lists; items in both come in the configuration's
/// order, live-only items stay where they were relative to them.
fn merge_list(
    item_schema: &Schema,
    list: &ListType,
    litems: &[Value],
    ritems: &[Value],
    path: &mut Vec<PathElement>,
) -> Result<Option<Value>, WalkError> {
    let (rpes, robserved) = index(list, ritems, false, path)?;
    let (lpes, lobserved) = index(list, litems, true, path)?;
    let mut shared: VecDeque<&PathElement> = rpes
        .iter()
        .filter(|pe| lobserved.contains_key(*pe))
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(litems.len().max(ritems.len()));
    let (llen, rlen) = (lpes.len(), rpes.len());
    let (mut li, mut ri) = (0, 0);
    let item = |pe: &PathElement,
                l: Option<&Value>,
                r: Option<&Value>,
                out: &mut Vec<Value>,
                path: &mut Vec<PathElement>| {
        path.push(pe.clone());
        let merged = merge(item_schema, l, r, path);
        path.pop();
        merged.map(|m| out.extend(m))
    };
    while li < llen || ri < rlen {
        if li < llen && ri < rlen {
            let pe = &lpes[li];
            if *pe == rpes[ri] {
                merged_rhs.insert(pe);
                let l = lobserved.get(pe).copied().flatten();
                let r = robserved.get(pe).copied().flatten();
                item(pe, l, r, &mut out, path)?;
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if robserved.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < llen {
            let pe = &lpes[li];
            if !robserved.contains_key(pe) {
                item(pe, Some(&litems[li]), None, &mut out, path)?;
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
            }
        }
        if ri < rlen {
            let pe = &rpes[ri];
            merged_rhs.insert(pe);
            let l = lobserved.get(pe).copied().flatten();
            let r = robserved.get(pe).copied().flatten();
            item(pe, l, r, &mut out, path)?;
            ri += 1;
            if next_shared.is_some_and(|n| n == pe) {
                next_shared = shared.pop_front();
            }
        }
    }
    Ok(if out.is_empty() {
        None
    } else {
        Some(Value::Array(out))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_openapi(&json!({"type": "object", "properties": {
            "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}, "w": {"type": "integer"}}}},
            "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "a": {"type": "array", "items": {"type": "string"}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "atomic": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {"x": {"type": "string"}, "y": {"type": "string"}}}
        }}))
        .unwrap()
    }

    fn names(v: &Value) -> Vec<String> {
        v["l"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn list_map_items_merge_by_key_in_smd_order() {
        let live =
            json!({"l": [{"name": "a", "v": 1}, {"name": "b", "v": 2}, {"name": "c", "v": 3}]});
        let config = json!({"l": [{"name": "c", "w": 9}, {"name": "d"}, {"name": "a"}]});
        let merged = merge_values(&schema(), &live, &config).unwrap();
        // Shared items follow the configuration's order (c before a); b, live only, is
        // emitted when the walk over the live list reaches it, before c.
        assert_eq!(names(&merged), ["b", "c", "d", "a"]);
        assert_eq!(merged["l"][1], json!({"name": "c", "v": 3, "w": 9}));

        let live = json!({"l": [{"name": "x"}, {"name": "a"}, {"name": "y"}, {"name": "b"}]});
        let config = json!({"l": [{"name": "b"}, {"name": "a"}]});
        let merged = merge_values(&schema(), &live, &config).unwrap();
        assert_eq!(names(&merged), ["x", "y", "b", "a"]);
    }

    #[test]
    fn sets_union_and_atomic_things_replace() {
        let live = json!({"s": ["a", "b"], "a": ["1", "2"], "atomic": {"x": "1", "y": "2"}, "m": {"k": "v"}});
        let config = json!({"s": ["c", "a"], "a": ["3"], "atomic": {"x": "9"}, "m": {"j": "w"}});
        let merged = merge_values(&schema(), &live, &config).unwrap();
        assert_eq!(
            merged,
            json!({"s": ["c", "a", "b"], "a": ["3"], "atomic": {"x": "9"}, "m": {"k": "v", "j": "w"}})
        );
    }

    #[test]
    fn invalid_configurations_name_the_path() {
        let e = merge_values(&schema(), &json!({}), &json!({"l": [{"v": 1}]})).unwrap_err();
        assert_eq!(
            e.0,
            r#".l: element 0: associative list with keys has an element that omits key field "name""#
        );
        let e = merge_values(&schema(), &json!({}), &json!({"s": ["a", "a"]})).unwrap_err();
        assert_eq!(e.0, r#".s: duplicate entries for key [="a"]"#);
        // Duplicates in the live object are tolerated.
        let merged =
            merge_values(&schema(), &json!({"s": ["a", "a"]}), &json!({"s": ["b"]})).unwrap();
        assert_eq!(merged, json!({"s": ["a", "a", "b"]}));
    }
}
