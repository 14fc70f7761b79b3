//! The FieldsV1 encoding of a `FieldSet` (SMD's `fieldpath/serialize.go`): a JSON object
//! whose keys are serialized path elements (`f:`, `k:`, `v:`, `i:`), `"."` marking that
//! the path to this object is itself a member, and `{}` for a member without children.

use crate::path::PathElement;
use crate::set::FieldSet;
use serde_json::{Map, Value};

/// Why managed fields (or a FieldsV1 set) could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// A FieldsV1 value that is not a well-formed set.
    #[error("invalid fieldsV1 at {at}: {reason}")]
    FieldsV1 { at: String, reason: String },
    /// A managedFields entry that is not valid.
    #[error("managedFields entry {index}: {reason}")]
    Entry { index: usize, reason: String },
    /// managedFields that is not a list.
    #[error("managedFields must be a list, got {0}")]
    NotAList(String),
}

fn fields_error(at: &str, reason: impl Into<String>) -> DecodeError {
    DecodeError::FieldsV1 {
        at: if at.is_empty() {
            "the root".into()
        } else {
            at.into()
        },
        reason: reason.into(),
    }
}

/// Parses one serialized path element; `Ok(None)` for an element of an unknown type,
/// which SMD skips.
pub(crate) fn parse_path_element(key: &str, at: &str) -> Result<Option<PathElement>, DecodeError> {
    let bytes = key.as_bytes();
    if bytes.len() < 2 {
        return Err(fields_error(
            at,
            format!("key {key:?} must be at least 2 characters long"),
        ));
    }
    if bytes[1] != b':' {
        return Err(fields_error(
            at,
            format!("key {key:?} is missing its colon"),
        ));
    }
    let rest = &key[2..];
    match bytes[0] {
        b'f' => Ok(Some(PathElement::Field(rest.to_string()))),
        b'v' => serde_json::from_str::<Value>(rest)
            .map(|v| Some(PathElement::Value(v)))
            .map_err(|e| fields_error(at, format!("key {key:?}: {e}"))),
        b'k' => match serde_json::from_str::<Value>(rest) {
            Ok(Value::Object(fields)) => Ok(Some(PathElement::key(fields.into_iter().collect()))),
            Ok(_) => Err(fields_error(
                at,
                format!("key {key:?}: keys must be a JSON object"),
            )),
            Err(e) => Err(fields_error(at, format!("key {key:?}: {e}"))),
        },
        b'i' => rest
            .parse::<usize>()
            .map(|i| Some(PathElement::Index(i)))
            .map_err(|e| fields_error(at, format!("key {key:?}: {e}"))),
        _ => Ok(None),
    }
}

impl FieldSet {
    /// Decodes a FieldsV1 object (`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`).
    ///
    /// # Errors
    /// A value that is not an object, a key that is not a path element, or a malformed
    /// key/value element; the error names where.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, DecodeError> {
        let (set, _) = read_node(value, "")?;
        Ok(set.unwrap_or_default())
    }

    /// Encodes as FieldsV1, in kube's exact order: `"."` first, then elements in
    /// `PathElement` order.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.emit(false))
    }

    fn emit(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self && !(self.members.is_empty() && self.children.is_empty()) {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        let mut members = self.members.iter().peekable();
        let mut children = self.children.iter().peekable();
        loop {
            let next_member = members.peek().copied();
            let next_child = children.peek().map(|(pe, c)| (*pe, *c));
            match (next_member, next_child) {
                (None, None) => break,
                (Some(m), None) => {
                    out.insert(m.to_fields_v1_key(), Value::Object(Map::new()));
                    members.next();
                }
                (None, Some((pe, c))) => {
                    out.insert(pe.to_fields_v1_key(), Value::Object(c.emit(false)));
                    children.next();
                }
                (Some(m), Some((pe, c))) => match m.cmp(pe) {
                    std::cmp::Ordering::Less => {
                        out.insert(m.to_fields_v1_key(), Value::Object(Map::new()));
                        members.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.insert(pe.to_fields_v1_key(), Value::Object(c.emit(false)));
                        children.next();
                    }
                    std::cmp::Ordering::Equal => {
                        out.insert(pe.to_fields_v1_key(), Value::Object(c.emit(true)));
                        members.next();
                        children.next();
                    }
                },
            }
        }
        out
    }
}

/// Reads one FieldsV1 node: its children (None when it has none) and whether the path
/// to it is a member (`"."`, or an object without children).
fn read_node(value: &Value, at: &str) -> Result<(Option<FieldSet>, bool), DecodeError> {
    let Value::Object(map) = value else {
        return Err(fields_error(at, "expected a JSON object"));
    };
    let mut children: Option<FieldSet> = None;
    let mut is_member = false;
    for (key, sub) in map {
        if key == "." {
            is_member = true;
            continue;
        }
        let Some(pe) = parse_path_element(key, at)? else {
            continue;
        };
        let here = format!("{at}{pe}");
        let (grandchildren, child_is_member) = read_node(sub, &here)?;
        let node = children.get_or_insert_with(FieldSet::default);
        if child_is_member {
            node.members.insert(pe.clone());
        }
        if let Some(g) = grandchildren {
            let merged = match node.children.remove(&pe) {
                Some(existing) => existing.union(&g),
                None => g,
            };
            node.children.insert(pe, merged);
        }
    }
    if children.is_none() {
        is_member = true;
    }
    Ok((children.map(FieldSet::normalized), is_member))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Path;
    use serde_json::json;

    fn round_trip(text: &str) {
        let v: Value = serde_json::from_str(text).unwrap();
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert_eq!(serde_json::to_string(&set.to_fields_v1()).unwrap(), text);
    }

    #[test]
    fn round_trips_kube_examples() {
        // From the server-side apply docs (field management section).
        round_trip(r#"{"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}"#);
        // A Deployment as kube-apiserver records it (kubectl create).
        round_trip(
            r#"{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}}},"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}}}}}}}}"#,
        );
        // Sets of values and indexes.
        round_trip(
            r#"{"f:spec":{"f:finalizers":{"v:\"a\\u003cb\"":{},"v:\"b\"":{}},"f:x":{"i:0":{},"i:10":{}}}}"#,
        );
    }

    #[test]
    fn decodes_members_and_children() {
        let v = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}});
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert!(set.has(&Path::fields(["metadata", "labels"])));
        assert!(set.has(&Path::fields(["metadata", "labels", "app"])));
        assert!(!set.has(&Path::fields(["metadata"])));
        // Keys in any order come out sorted.
        let v = json!({"f:b": {}, "f:a": {}, ".": {}});
        assert_eq!(
            serde_json::to_string(&FieldSet::from_fields_v1(&v).unwrap().to_fields_v1()).unwrap(),
            r#"{"f:a":{},"f:b":{}}"#
        );
    }

    #[test]
    fn rejects_malformed_sets() {
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"x": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"fname": {}})).is_err());
        let err = FieldSet::from_fields_v1(&json!({"f:spec": {"k:[1]": {}}})).unwrap_err();
        assert!(err.to_string().contains(".spec"), "{err}");
        assert!(FieldSet::from_fields_v1(&json!({"f:spec": 3})).is_err());
        // Unknown element types are skipped, as SMD does.
        assert!(
            FieldSet::from_fields_v1(&json!({"z:x": {}}))
                .unwrap()
                .is_empty()
        );
    }
}
