//! Non-apply writes (SMD `Updater.Update` under kube's managedFieldsUpdater,
//! stripMetaManager, capManagersManager and skipNonAppliedManager): the writer takes the
//! fields it changed from everyone else.

use crate::cap::{MAX_UPDATE_MANAGERS, cap_update_managers};
use crate::compare::compare_values;
use crate::managed::{Entry, Managed, Operation};
use crate::request::Request;
use crate::schema::Schema;
use crate::scope::{Scope, has_uid, strip_set, without_managed_fields};
use crate::time::normalize;
use crate::walk::WalkError;
use serde_json::{Map, Value};

/// A non-apply write (create, update, merge/JSON patch): `live` is None on create.
/// Returns the managers to store.
///
/// # Guarantees
/// - Every other manager loses the fields this write modified, added or removed; the
///   writer's Update entry (manager, apiVersion, subresource) gains the modified and
///   added ones, loses the removed ones, gets `request.now` when it gained something,
///   and is dropped when empty.
/// - At most ten Update managers remain (the oldest merge into `ancient-changes`).
/// - An existing object (one with a `metadata.uid`) whose managers are empty stays
///   untracked, as kube does (this is how `managedFields: [{}]` clears them).
/// - If either object cannot be compared (a list-map item without a key), the managers
///   are returned unchanged, as kube's `UpdateNoErrors` keeps the live ones.
pub fn update(
    schema: &Schema,
    live: Option<&Value>,
    new: &Value,
    managed: Managed,
    request: &Request,
) -> Managed {
    if managed.entries.is_empty() && live.is_some_and(has_uid) {
        return managed;
    }
    let empty = Value::Object(Map::new());
    match track_update(
        schema,
        live.unwrap_or(&empty),
        new,
        managed.clone(),
        request,
        request.manager,
    ) {
        Ok(updated) => updated,
        Err(_) => managed,
    }
}

/// Records a write by `manager` (kube's chain below skipNonAppliedManager).
pub(crate) fn track_update(
    schema: &Schema,
    live: &Value,
    new: &Value,
    mut managed: Managed,
    request: &Request,
    manager: &str,
) -> Result<Managed, WalkError> {
    let scope = Scope::of(request.subresource);
    let cmp = compare_values(
        schema,
        &without_managed_fields(live),
        &without_managed_fields(new),
    )?
    .filtered(|s| scope.filter(s));
    let changed = cmp.modified.union(&cmp.added);
    for entry in &mut managed.entries {
        entry.fields = entry.fields.difference(&changed).difference(&cmp.removed);
    }
    managed.drop_empty();
    let current = changed.difference(&strip_set());
    if !current.is_empty() {
        let mut writer = Entry {
            manager: manager.to_string(),
            operation: Operation::Update,
            api_version: request.api_version.to_string(),
            time: Some(normalize(request.now)),
            subresource: request.subresource.unwrap_or_default().to_string(),
            fields: current,
        };
        if let Some(previous) = managed.remove(&writer.identifier()) {
            writer.fields = writer.fields.union(&previous.fields);
        }
        managed.put(writer);
    }
    cap_update_managers(&mut managed, MAX_UPDATE_MANAGERS);
    Ok(managed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_openapi(&json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}, "uid": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}, "image": {"type": "string"}}},
            "status": {"type": "object", "properties": {"ready": {"type": "integer"}}}}}))
        .unwrap()
    }

    fn req<'a>(manager: &'a str, sub: Option<&'a str>, now: &'a str) -> Request<'a> {
        Request {
            manager,
            api_version: "v1",
            subresource: sub,
            now,
        }
    }

    fn fields(m: &Managed, manager: &str) -> String {
        let e = m.entries.iter().find(|e| e.manager == manager).unwrap();
        serde_json::to_string(&e.fields.to_fields_v1()).unwrap()
    }

    #[test]
    fn create_owns_everything_but_identity_and_status() {
        let new = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a", "labels": {"x": "1"}},
                         "spec": {"replicas": 1}, "status": {"ready": 0}});
        let m = update(
            &schema(),
            None,
            &new,
            Managed::default(),
            &req("ctl", None, "2026-11-24T11:00:00Z"),
        );
        assert_eq!(
            fields(&m, "ctl"),
            r#"{"f:metadata":{"f:labels":{".":{},"f:x":{}}},"f:spec":{".":{},"f:replicas":{}}}"#
        );
        assert_eq!(m.entries[0].time.as_deref(), Some("2026-11-24T11:00:00Z"));
    }

    #[test]
    fn update_transfers_ownership_of_changed_fields() {
        let live =
            json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 1, "image": "x"}});
        let m = update(
            &schema(),
            None,
            &live,
            Managed::default(),
            &req("a", None, "2026-11-24T11:00:00Z"),
        );
        let new =
            json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 2, "image": "x"}});
        let m = update(
            &schema(),
            Some(&live),
            &new,
            m,
            &req("b", None, "2026-11-24T11:01:00Z"),
        );
        assert_eq!(fields(&m, "a"), r#"{"f:spec":{".":{},"f:image":{}}}"#);
        assert_eq!(fields(&m, "b"), r#"{"f:spec":{"f:replicas":{}}}"#);
        // Removing a field takes it from its owner; an unchanged write records nothing.
        let newer = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 2}});
        let m = update(
            &schema(),
            Some(&new),
            &newer,
            m,
            &req("c", None, "2026-11-24T11:02:00Z"),
        );
        assert_eq!(fields(&m, "a"), r#"{"f:spec":{}}"#);
        assert!(!m.entries.iter().any(|e| e.manager == "c"));
    }

    #[test]
    fn status_writes_track_only_status() {
        let live = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 1}});
        let m = update(
            &schema(),
            None,
            &live,
            Managed::default(),
            &req("a", None, "2026-11-24T11:00:00Z"),
        );
        let new = json!({"metadata": {"name": "a", "uid": "u", "labels": {"l": "v"}}, "spec": {"replicas": 5}, "status": {"ready": 1}});
        let m = update(
            &schema(),
            Some(&live),
            &new,
            m,
            &req("ctrl", Some("status"), "2026-11-24T11:01:00Z"),
        );
        assert_eq!(fields(&m, "ctrl"), r#"{"f:status":{".":{},"f:ready":{}}}"#);
        assert_eq!(fields(&m, "a"), r#"{"f:spec":{".":{},"f:replicas":{}}}"#);
        assert_eq!(
            m.entries
                .iter()
                .find(|e| e.manager == "ctrl")
                .unwrap()
                .subresource,
            "status"
        );
    }

    #[test]
    fn untracked_existing_objects_stay_untracked() {
        let live = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 1}});
        let new = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 2}});
        assert!(
            update(
                &schema(),
                Some(&live),
                &new,
                Managed::default(),
                &req("a", None, "2026-11-24T11:00:00Z")
            )
            .entries
            .is_empty()
        );
    }
}
