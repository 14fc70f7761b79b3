//! `metadata.managedFields`: decoding, encoding and the identity of managers, as
//! apimachinery's `managedfields.go` and `fieldmanager.go` (`decodeLiveOrNew`).

use crate::fields_v1::DecodeError;
use crate::set::FieldSet;
use crate::time::{normalize, unix_seconds};
use crate::value::go_json;
use serde_json::{Map, Value};

/// The operation of a managedFields entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write (create, update, patch).
    Update,
}

impl Operation {
    /// `"Apply"` or `"Update"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One manager's fields.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    /// RFC 3339, UTC, seconds.
    pub time: Option<String>,
    /// Empty for the main resource.
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// kube's manager identifier (`BuildManagerIdentifier`): the JSON of the entry
    /// without time and fields, and without the apiVersion for appliers, so an applier
    /// is the same manager whatever version it applies.
    pub fn identifier(&self) -> String {
        let mut parts = Vec::new();
        if !self.manager.is_empty() {
            parts.push(format!(
                "\"manager\":{}",
                go_json(&Value::String(self.manager.clone()))
            ));
        }
        parts.push(format!("\"operation\":\"{}\"", self.operation.as_str()));
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            parts.push(format!(
                "\"apiVersion\":{}",
                go_json(&Value::String(self.api_version.clone()))
            ));
        }
        if !self.subresource.is_empty() {
            parts.push(format!(
                "\"subresource\":{}",
                go_json(&Value::String(self.subresource.clone()))
            ));
        }
        format!("{{{}}}", parts.join(","))
    }

    /// The time as Unix seconds, 0 when absent (kube sorts a missing time first).
    pub(crate) fn seconds(&self) -> i64 {
        self.time.as_deref().and_then(unix_seconds).unwrap_or(0)
    }
}

/// All managers of an object.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Managed {
    pub entries: Vec<Entry>,
}

fn entry_error(index: usize, reason: impl Into<String>) -> DecodeError {
    DecodeError::Entry {
        index,
        reason: reason.into(),
    }
}

fn string_field(obj: &Map<String, Value>, key: &str, index: usize) -> Result<String, DecodeError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(entry_error(
            index,
            format!("{key} must be a string, got {other}"),
        )),
    }
}

fn decode_entry(index: usize, value: &Value) -> Result<Entry, DecodeError> {
    let Value::Object(obj) = value else {
        return Err(entry_error(index, "must be an object"));
    };
    let operation = match string_field(obj, "operation", index)?.as_str() {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return Err(entry_error(index, "operation must be `Apply` or `Update`")),
    };
    let api_version = string_field(obj, "apiVersion", index)?;
    if api_version.is_empty() {
        return Err(entry_error(index, "apiVersion must not be empty"));
    }
    match string_field(obj, "fieldsType", index)?.as_str() {
        "FieldsV1" => {}
        "" => {
            return Err(entry_error(
                index,
                format!("missing fieldsType in managed fields entry {index}"),
            ));
        }
        other => {
            return Err(entry_error(
                index,
                format!("invalid fieldsType {other:?} in managed fields entry {index}"),
            ));
        }
    }
    let fields = match obj.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::new(),
        Some(v) => FieldSet::from_fields_v1(v).map_err(|e| entry_error(index, e.to_string()))?,
    };
    let time = match obj.get("time") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(normalize(t)),
        Some(other) => {
            return Err(entry_error(
                index,
                format!("time must be a string, got {other}"),
            ));
        }
    };
    Ok(Entry {
        manager: string_field(obj, "manager", index)?,
        operation,
        api_version,
        time,
        subresource: string_field(obj, "subresource", index)?,
        fields,
    })
}

/// True for kube's "reset" managedFields: an empty list, or one empty entry.
fn is_reset(value: &Value) -> bool {
    match value {
        Value::Array(items) if items.is_empty() => true,
        Value::Array(items) if items.len() == 1 => match &items[0] {
            Value::Object(obj) => obj.iter().all(|(k, v)| match k.as_str() {
                "manager" | "operation" | "apiVersion" | "fieldsType" | "subresource" => {
                    v.is_null() || v.as_str() == Some("")
                }
                "time" | "fieldsV1" => v.is_null(),
                _ => true,
            }),
            _ => false,
        },
        _ => false,
    }
}

/// The managedFields value of either a managedFields list or a whole object.
fn managed_fields_of(value: &Value) -> Option<&Value> {
    match value {
        Value::Object(obj) if obj.contains_key("metadata") || obj.contains_key("apiVersion") => {
            obj.get("metadata").and_then(|m| m.get("managedFields"))
        }
        other => Some(other),
    }
}

impl Managed {
    /// Decodes `metadata.managedFields` (a list of ManagedFieldsEntry, fieldsType
    /// FieldsV1); `null` is no managers. A later entry with the identity of an earlier
    /// one replaces it, as kube's decoding does.
    ///
    /// # Errors
    /// Not a list, or an entry with an unknown operation, no apiVersion, a fieldsType
    /// other than FieldsV1 or a malformed fieldsV1; the error names the entry.
    pub fn decode(value: &Value) -> Result<Managed, DecodeError> {
        let items = match value {
            Value::Null => return Ok(Managed::default()),
            Value::Array(items) => items,
            other => return Err(DecodeError::NotAList(other.to_string())),
        };
        let mut managed = Managed::default();
        for (index, item) in items.iter().enumerate() {
            managed.put(decode_entry(index, item)?);
        }
        Ok(managed)
    }

    /// kube's `decodeLiveOrNew`: the managers a write starts from. Each argument is a
    /// `metadata.managedFields` value (or a whole object holding one). An empty list or
    /// one empty entry (`[{}]`) in the request resets them; a request with none, or with
    /// ones that do not decode, keeps the live object's; `ignore_request` (subresource
    /// writes) always keeps the live object's. Live managedFields that do not decode
    /// are dropped as a whole (see [`Managed::for_write_checked`] for the reason).
    pub fn for_write(
        request: Option<&Value>,
        live: Option<&Value>,
        ignore_request: bool,
    ) -> Managed {
        Managed::for_write_checked(request, live, ignore_request).0
    }

    /// [`Managed::for_write`], with the error that made it drop the live managedFields
    /// (for the caller to log).
    pub fn for_write_checked(
        request: Option<&Value>,
        live: Option<&Value>,
        ignore_request: bool,
    ) -> (Managed, Option<DecodeError>) {
        let from_live = || match live.and_then(managed_fields_of) {
            None => (Managed::default(), None),
            Some(v) => match Managed::decode(v) {
                Ok(m) => (m, None),
                Err(e) => (Managed::default(), Some(e)),
            },
        };
        if ignore_request {
            return from_live();
        }
        let request = request.and_then(managed_fields_of);
        if request.is_some_and(is_reset) {
            return (Managed::default(), None);
        }
        match request.map(Managed::decode) {
            Some(Ok(m)) if !m.entries.is_empty() => (m, None),
            _ => from_live(),
        }
    }

    /// Encodes as kube does: sorted by operation, time, manager, apiVersion and
    /// subresource; fieldsType FieldsV1; no managers is an empty list.
    pub fn encode(&self) -> Value {
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by(|p, q| {
            p.operation
                .cmp(&q.operation)
                .then(p.seconds().cmp(&q.seconds()))
                .then_with(|| p.manager.cmp(&q.manager))
                .then_with(|| p.api_version.cmp(&q.api_version))
                .then_with(|| p.subresource.cmp(&q.subresource))
        });
        Value::Array(entries.into_iter().map(encode_entry).collect())
    }

    /// The entry with this identity.
    pub fn get(&self, identifier: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.identifier() == identifier)
    }

    pub(crate) fn get_mut(&mut self, identifier: &str) -> Option<&mut Entry> {
        self.entries
            .iter_mut()
            .find(|e| e.identifier() == identifier)
    }

    /// Adds an entry, replacing the one with the same identity.
    pub(crate) fn put(&mut self, entry: Entry) {
        let id = entry.identifier();
        match self.get_mut(&id) {
            Some(existing) => *existing = entry,
            None => self.entries.push(entry),
        }
    }

    pub(crate) fn remove(&mut self, identifier: &str) -> Option<Entry> {
        let index = self
            .entries
            .iter()
            .position(|e| e.identifier() == identifier)?;
        Some(self.entries.remove(index))
    }

    /// Drops the managers that own nothing.
    pub(crate) fn drop_empty(&mut self) {
        self.entries.retain(|e| !e.fields.is_empty());
    }
}

fn encode_entry(e: &Entry) -> Value {
    let mut obj = Map::new();
    if !e.manager.is_empty() {
        obj.insert("manager".into(), Value::String(e.manager.clone()));
    }
    obj.insert(
        "operation".into(),
        Value::String(e.operation.as_str().into()),
    );
    if !e.api_version.is_empty() {
        obj.insert("apiVersion".into(), Value::String(e.api_version.clone()));
    }
    if let Some(t) = &e.time {
        obj.insert("time".into(), Value::String(t.clone()));
    }
    obj.insert("fieldsType".into(), Value::String("FieldsV1".into()));
    obj.insert("fieldsV1".into(), e.fields.to_fields_v1());
    if !e.subresource.is_empty() {
        obj.insert("subresource".into(), Value::String(e.subresource.clone()));
    }
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, op: &str, time: &str) -> Value {
        json!({"manager": manager, "operation": op, "apiVersion": "v1", "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:key": {}}}})
    }

    #[test]
    fn round_trips_and_sorts_like_kube() {
        let input = json!([
            entry("b", "Update", "2026-11-24T10:00:00Z"),
            entry("a", "Update", "2026-11-24T10:00:00Z"),
            entry("z", "Apply", "2026-11-24T12:00:00Z"),
            entry("c", "Update", "2026-11-24T09:00:00Z"),
        ]);
        let managed = Managed::decode(&input).unwrap();
        let order: Vec<String> = managed
            .encode()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(order, ["z", "c", "a", "b"]);
        assert_eq!(
            Managed::decode(&managed.encode()).unwrap().encode(),
            managed.encode()
        );
        assert_eq!(Managed::default().encode(), json!([]));
    }

    #[test]
    fn identifiers_match_kube() {
        let m = Managed::decode(&json!([
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}},
            {"manager": "ctl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "subresource": "status"}
        ]))
        .unwrap();
        assert_eq!(
            m.entries[0].identifier(),
            r#"{"manager":"kubectl","operation":"Apply"}"#
        );
        assert_eq!(
            m.entries[1].identifier(),
            r#"{"manager":"ctl","operation":"Update","apiVersion":"v1","subresource":"status"}"#
        );
    }

    #[test]
    fn decode_errors_name_the_entry() {
        let e = Managed::decode(&json!([entry("a", "Update", "2026-11-24T10:00:00Z"), {"manager": "x", "operation": "Patch", "apiVersion": "v1"}])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "managedFields entry 1: operation must be `Apply` or `Update`"
        );
        let e =
            Managed::decode(&json!([{"manager": "x", "operation": "Apply", "apiVersion": "v1"}]))
                .unwrap_err();
        assert!(e.to_string().contains("missing fieldsType"), "{e}");
        let e = Managed::decode(
            &json!([{"manager": "x", "operation": "Apply", "fieldsType": "FieldsV1"}]),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("apiVersion must not be empty"),
            "{e}"
        );
        assert!(Managed::decode(&json!({})).is_err());
    }

    #[test]
    fn decode_live_or_new_rules() {
        let live = json!([entry("live", "Update", "2026-11-24T10:00:00Z")]);
        let req = json!([entry("req", "Update", "2026-11-24T10:00:00Z")]);
        let names = |m: Managed| {
            m.entries
                .iter()
                .map(|e| e.manager.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Managed::for_write(Some(&req), Some(&live), false)),
            ["req"]
        );
        assert_eq!(
            names(Managed::for_write(Some(&req), Some(&live), true)),
            ["live"]
        );
        assert_eq!(
            names(Managed::for_write(None, Some(&live), false)),
            ["live"]
        );
        assert!(
            Managed::for_write(Some(&json!([{}])), Some(&live), false)
                .entries
                .is_empty()
        );
        assert!(
            Managed::for_write(Some(&json!([])), Some(&live), false)
                .entries
                .is_empty()
        );
        assert_eq!(
            names(Managed::for_write(
                Some(&json!([{"manager": "bad"}])),
                Some(&live),
                false
            )),
            ["live"]
        );
        let (m, warning) =
            Managed::for_write_checked(None, Some(&json!([{"operation": "x"}])), false);
        assert!(m.entries.is_empty() && warning.is_some());
        // Whole objects are accepted too.
        let obj = json!({"apiVersion": "v1", "metadata": {"managedFields": live}});
        assert_eq!(names(Managed::for_write(None, Some(&obj), false)), ["live"]);
    }
}
