//! Server-side apply (SMD `Updater.Apply` under kube's manager chain): merge the
//! configuration, prune what the applier stopped applying, detect conflicts, move
//! ownership.

use crate::compare::compare_values;
use crate::conflict::{Conflicts, RawConflict, print_manager};
use crate::last_applied::{
    allowed_conflicts, build_last_applied, has_last_applied, set_last_applied,
};
use crate::managed::{Entry, Managed, Operation};
use crate::merge::merge_values;
use crate::remove::remove_items;
use crate::request::Request;
use crate::schema::Schema;
use crate::scope::{Scope, strip_set, without_managed_fields};
use crate::set::FieldSet;
use crate::time::normalize;
use crate::tofieldset::ensure_named_fields_are_members;
use crate::update::track_update;
use crate::value::value_eq;
use crate::walk::WalkError;
use serde_json::{Map, Value};

/// The result of a successful apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The new object, with `metadata.managedFields` set to `managed` (absent when
    /// there are no managers) and the last-applied annotation updated for kubectl.
    pub object: Value,
    /// The managers to store.
    pub managed: Managed,
    /// False when the apply left the object as it was (then only managers may change).
    pub changed: bool,
}

/// Why an apply was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// Fields other managers own with other values (409 Conflict in kube).
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The configuration (or the live object) is not valid for the schema.
    #[error("{0}")]
    Invalid(String),
}

impl From<WalkError> for ApplyError {
    fn from(e: WalkError) -> ApplyError {
        ApplyError::Invalid(e.0)
    }
}

const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Server-side apply of `config` onto `live` (None = create).
///
/// # Guarantees
/// - The object is `live` merged with `config` (outside the ignored fields, see
///   `scope`), minus what the applier applied before and no longer applies and nobody
///   else owns.
/// - The applier's Apply entry owns exactly what `config` sets; its time is
///   `request.now` when the object changed. Other managers lose the fields the apply
///   removed and (with `force`) the ones it took from them.
/// - For manager `kubectl`, conflicts on fields in the live object's last-applied
///   annotation are forced, and an existing annotation is set to `config`.
///
/// # Errors
/// `Conflicts` when another manager owns a field the apply changes and `force` is off;
/// `Invalid` for a configuration that is not an object, is in another apiVersion,
/// carries managedFields, or has a list item without its keys or duplicated.
pub fn apply(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    managed: Managed,
    request: &Request,
    force: bool,
) -> Result<Applied, ApplyError> {
    validate_config(config, request)?;
    let result = match apply_tracked(schema, live, config, managed.clone(), request, force) {
        Err(Refused::Conflicts(conflicts)) if request.manager == "kubectl" => {
            match live.and_then(|l| allowed_conflicts(schema, l, request.api_version)) {
                None => Err(Refused::Conflicts(conflicts)),
                Some(allowed) => {
                    let rest: Vec<RawConflict> = conflicts
                        .into_iter()
                        .filter(|c| !allowed.has(&c.path))
                        .collect();
                    if rest.is_empty() {
                        apply_tracked(schema, live, config, managed, request, true)
                    } else {
                        Err(Refused::Conflicts(rest))
                    }
                }
            }
        }
        other => other,
    };
    let (mut object, managed, changed) = match result {
        Ok(done) => done,
        Err(Refused::Conflicts(raw)) => {
            return Err(ApplyError::Conflicts(Conflicts::from_raw(raw)));
        }
        Err(Refused::Invalid(e)) => return Err(e),
    };
    if request.manager == "kubectl" && has_last_applied(&object) {
        set_last_applied(&mut object, build_last_applied(config));
    }
    set_managed_fields(&mut object, &managed);
    Ok(Applied {
        object,
        managed,
        changed,
    })
}

fn validate_config(config: &Value, request: &Request) -> Result<(), ApplyError> {
    if !config.is_object() {
        return Err(ApplyError::Invalid(
            "the applied configuration must be a JSON object".into(),
        ));
    }
    let version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if version != request.api_version {
        return Err(ApplyError::Invalid(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {}",
            request.api_version
        )));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    Ok(())
}

enum Refused {
    Conflicts(Vec<RawConflict>),
    Invalid(ApplyError),
}

impl From<WalkError> for Refused {
    fn from(e: WalkError) -> Refused {
        Refused::Invalid(e.into())
    }
}

/// skipNonAppliedManager, then the apply itself: returns the object, the managers and
/// whether the object changed.
fn apply_tracked(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    mut managed: Managed,
    request: &Request,
    force: bool,
) -> Result<(Value, Managed, bool), Refused> {
    let live = live.map(without_managed_fields);
    if managed.entries.is_empty()
        && let Some(live) = &live
    {
        let mut empty = Map::new();
        for key in ["apiVersion", "kind"] {
            if let Some(v) = config.get(key) {
                empty.insert(key.into(), v.clone());
            }
        }
        managed = track_update(
            schema,
            &Value::Object(empty),
            live,
            managed,
            request,
            BEFORE_FIRST_APPLY,
        )?;
    }
    let scope = Scope::of(request.subresource);
    let create = live.is_none();
    let live = live.unwrap_or_else(|| Value::Object(Map::new()));

    // The whole configuration must be valid, including what is not merged.
    merge_values(schema, &Value::Object(Map::new()), config)?;
    let mut merged = merge_values(schema, &live, &scope.project_config(config, create))?;

    let applier = Entry {
        manager: request.manager.to_string(),
        operation: Operation::Apply,
        api_version: request.api_version.to_string(),
        time: None,
        subresource: request.subresource.unwrap_or_default().to_string(),
        fields: scope.filter(&FieldSet::from_value(schema, config)),
    };
    let applier_id = applier.identifier();
    let previous = managed.remove(&applier_id);
    let last_set = previous
        .as_ref()
        .map(|p| p.fields.clone())
        .unwrap_or_default();
    managed.put(Entry {
        time: previous.and_then(|p| p.time),
        ..applier
    });

    let owned = managed
        .entries
        .iter()
        .fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
    merged = prune(schema, &merged, &owned, &last_set);

    let cmp = compare_values(schema, &live, &merged)?.filtered(|s| scope.filter(s));
    let changed_fields = cmp.modified.union(&cmp.added);
    let mut conflicts = Vec::new();
    for entry in managed
        .entries
        .iter()
        .filter(|e| e.identifier() != applier_id)
    {
        let mine = entry.fields.intersection(&changed_fields);
        conflicts.extend(mine.paths().into_iter().map(|path| RawConflict {
            identifier: entry.identifier(),
            manager: print_manager(entry),
            path,
        }));
    }
    if !force && !conflicts.is_empty() {
        return Err(Refused::Conflicts(conflicts));
    }
    for entry in managed
        .entries
        .iter_mut()
        .filter(|e| e.identifier() != applier_id)
    {
        entry.fields = entry
            .fields
            .difference(&changed_fields)
            .difference(&cmp.removed);
    }
    let changed = !value_eq(&live, &merged);
    if let Some(entry) = managed.get_mut(&applier_id) {
        entry.fields = entry.fields.difference(&strip_set());
        if changed {
            entry.time = Some(normalize(request.now));
        }
    }
    managed.drop_empty();
    Ok((if changed { merged } else { live }, managed, changed))
}

/// SMD's prune: removes from `merged` what the applier applied last time (`last`) and
/// no longer applies, unless some manager (`owned`, the applier's new set included)
/// still owns it. Named struct fields count as owned when something under them is.
fn prune(schema: &Schema, merged: &Value, owned: &FieldSet, last: &FieldSet) -> Value {
    if last.is_empty() {
        return merged.clone();
    }
    let named = |s: &FieldSet| ensure_named_fields_are_members(schema, s);
    let last = named(last);
    let merged_set = named(&FieldSet::from_value(schema, merged));
    // Remove everything the applier applied last time...
    let pruned = remove_items(schema, merged, &last);
    // ...add back whatever someone owns...
    let pruned_set = named(&FieldSet::from_value(schema, &pruned));
    let pruned = remove_items(
        schema,
        merged,
        &merged_set.difference(&pruned_set.union(&named(owned))),
    );
    // ...and anything removed on the way that the applier never applied.
    let pruned_set = named(&FieldSet::from_value(schema, &pruned));
    remove_items(
        schema,
        merged,
        &merged_set.difference(&pruned_set).intersection(&last),
    )
}

fn set_managed_fields(object: &mut Value, managed: &Managed) {
    let Value::Object(root) = object else { return };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if managed.entries.is_empty() {
        meta.shift_remove("managedFields");
    } else {
        meta.insert("managedFields".into(), managed.encode());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::update;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_openapi(&json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"}, "uid": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"}, "image": {"type": "string"},
                "rules": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
                "hosts": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}},
            "status": {"type": "object", "properties": {"ready": {"type": "integer"}}}}}))
        .unwrap()
    }

    fn req(manager: &str) -> Request<'_> {
        Request {
            manager,
            api_version: "v1",
            subresource: None,
            now: "2026-11-24T11:00:00Z",
        }
    }

    fn obj(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}, "spec": spec})
    }

    fn fields(m: &Managed, manager: &str) -> Option<String> {
        m.entries
            .iter()
            .find(|e| e.manager == manager)
            .map(|e| serde_json::to_string(&e.fields.to_fields_v1()).unwrap())
    }

    fn live_with_uid(applied: &Applied) -> Value {
        let mut o = applied.object.clone();
        o["metadata"]["uid"] = json!("u");
        o
    }

    #[test]
    fn apply_creates_and_owns_what_it_sets() {
        let a = apply(
            &schema(),
            None,
            &obj(json!({"replicas": 1})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap();
        assert!(a.changed);
        assert_eq!(
            fields(&a.managed, "a").unwrap(),
            r#"{"f:spec":{"f:replicas":{}}}"#
        );
        assert_eq!(a.object["metadata"]["managedFields"], a.managed.encode());
        assert_eq!(
            a.managed.entries[0].time.as_deref(),
            Some("2026-11-24T11:00:00Z")
        );
    }

    #[test]
    fn conflicts_unless_forced_and_force_moves_ownership() {
        let s = schema();
        let a = apply(
            &s,
            None,
            &obj(json!({"replicas": 1, "image": "x"})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap();
        let live = live_with_uid(&a);
        let err = apply(
            &s,
            Some(&live),
            &obj(json!({"replicas": 2, "image": "y"})),
            a.managed.clone(),
            &req("b"),
            false,
        )
        .unwrap_err();
        let ApplyError::Conflicts(c) = err else {
            panic!("expected conflicts")
        };
        assert_eq!(
            c.message(),
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.image\n- .spec.replicas"
        );
        let forced = apply(
            &s,
            Some(&live),
            &obj(json!({"replicas": 2})),
            a.managed,
            &req("b"),
            true,
        )
        .unwrap();
        assert_eq!(
            fields(&forced.managed, "a").unwrap(),
            r#"{"f:spec":{"f:image":{}}}"#
        );
        assert_eq!(
            fields(&forced.managed, "b").unwrap(),
            r#"{"f:spec":{"f:replicas":{}}}"#
        );
        assert_eq!(forced.object["spec"], json!({"replicas": 2, "image": "x"}));
    }

    #[test]
    fn same_value_is_shared_and_pruned_only_when_nobody_owns_it() {
        let s = schema();
        let a = apply(
            &s,
            None,
            &obj(json!({"replicas": 1, "image": "x"})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap();
        let b = apply(
            &s,
            Some(&live_with_uid(&a)),
            &obj(json!({"replicas": 1})),
            a.managed,
            &req("b"),
            false,
        )
        .unwrap();
        assert!(!b.changed);
        assert_eq!(
            fields(&b.managed, "b").unwrap(),
            r#"{"f:spec":{"f:replicas":{}}}"#
        );
        assert_eq!(
            b.managed
                .entries
                .iter()
                .find(|e| e.manager == "b")
                .unwrap()
                .time,
            None
        );
        // a stops applying replicas (still owned by b) and image (owned by nobody else).
        let a2 = apply(
            &s,
            Some(&live_with_uid(&b)),
            &obj(json!({})),
            b.managed,
            &req("a"),
            false,
        )
        .unwrap();
        assert_eq!(a2.object["spec"], json!({"replicas": 1}));
        assert_eq!(fields(&a2.managed, "a").unwrap(), r#"{"f:spec":{}}"#);
    }

    #[test]
    fn pruning_a_struct_keeps_it_while_someone_owns_something_in_it() {
        let s = schema();
        let a = apply(
            &s,
            None,
            &obj(json!({"replicas": 1})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap();
        let live = live_with_uid(&a);
        let mut new = live.clone();
        new["spec"]["image"] = json!("x");
        let managed = update(&s, Some(&live), &new, a.managed, &req("u"));
        let cfg = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"}});
        let out = apply(&s, Some(&new), &cfg, managed.clone(), &req("a"), false).unwrap();
        assert_eq!(out.object["spec"], json!({"image": "x"}));
        assert_eq!(fields(&out.managed, "a"), None);
        // Nobody else owns anything under spec: the struct goes with its last field.
        let alone = apply(
            &s,
            Some(&live),
            &cfg,
            managed_without(&managed, "u"),
            &req("a"),
            false,
        )
        .unwrap();
        assert!(alone.object.get("spec").is_none(), "{}", alone.object);
    }

    fn managed_without(m: &Managed, manager: &str) -> Managed {
        Managed {
            entries: m
                .entries
                .iter()
                .filter(|e| e.manager != manager)
                .cloned()
                .collect(),
        }
    }

    #[test]
    fn pruning_removes_list_items_whole() {
        let s = schema();
        let cfg = obj(
            json!({"rules": [{"name": "r1", "port": 1}, {"name": "r2", "port": 2}], "hosts": ["h1", "h2"]}),
        );
        let a = apply(&s, None, &cfg, Managed::default(), &req("a"), false).unwrap();
        let cfg = obj(json!({"rules": [{"name": "r2", "port": 2}], "hosts": ["h2"]}));
        let a2 = apply(
            &s,
            Some(&live_with_uid(&a)),
            &cfg,
            a.managed,
            &req("a"),
            false,
        )
        .unwrap();
        assert_eq!(
            a2.object["spec"],
            json!({"rules": [{"name": "r2", "port": 2}], "hosts": ["h2"]})
        );
    }

    #[test]
    fn update_then_apply_conflicts_with_the_updater() {
        let s = schema();
        let a = apply(
            &s,
            None,
            &obj(json!({"replicas": 1})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap();
        let live = live_with_uid(&a);
        let mut new = live.clone();
        new["spec"]["replicas"] = json!(3);
        let managed = update(&s, Some(&live), &new, a.managed, &req("hpa"));
        assert_eq!(fields(&managed, "a"), None);
        let err = apply(
            &s,
            Some(&new),
            &obj(json!({"replicas": 1})),
            managed,
            &req("a"),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"hpa\" using v1: .spec.replicas"
        );
    }

    #[test]
    fn status_is_ignored_by_main_resource_applies() {
        let s = schema();
        let mut cfg = obj(json!({"replicas": 1}));
        cfg["status"] = json!({"ready": 5});
        let a = apply(&s, None, &cfg, Managed::default(), &req("a"), false).unwrap();
        assert!(a.object.get("status").is_none());
        assert_eq!(
            fields(&a.managed, "a").unwrap(),
            r#"{"f:spec":{"f:replicas":{}}}"#
        );
        let live = live_with_uid(&a);
        let status_cfg = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"replicas": 9}, "status": {"ready": 2}});
        let r = Request {
            subresource: Some("status"),
            ..req("ctrl")
        };
        let st = apply(&s, Some(&live), &status_cfg, a.managed, &r, false).unwrap();
        assert_eq!(st.object["spec"], json!({"replicas": 1}));
        assert_eq!(st.object["status"], json!({"ready": 2}));
        assert!(st.object["metadata"].get("labels").is_none());
        assert_eq!(
            fields(&st.managed, "ctrl").unwrap(),
            r#"{"f:status":{"f:ready":{}}}"#
        );
    }

    #[test]
    fn invalid_configurations_are_refused_with_the_path() {
        let s = schema();
        let e = apply(
            &s,
            None,
            &obj(json!({"rules": [{"port": 1}]})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap_err();
        assert_eq!(e, ApplyError::Invalid(r#".spec.rules: element 0: associative list with keys has an element that omits key field "name""#.into()));
        let e = apply(
            &s,
            None,
            &obj(json!({"hosts": ["a", "a"]})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(".spec.hosts: duplicate entries"),
            "{e}"
        );
        assert!(matches!(
            apply(&s, None, &json!([]), Managed::default(), &req("a"), false),
            Err(ApplyError::Invalid(_))
        ));
        let mut other = obj(json!({}));
        other["apiVersion"] = json!("v2");
        assert!(matches!(
            apply(&s, None, &other, Managed::default(), &req("a"), false),
            Err(ApplyError::Invalid(_))
        ));
    }

    #[test]
    fn objects_without_managers_get_before_first_apply() {
        let s = schema();
        let live = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 1, "image": "x"}});
        let err = apply(
            &s,
            Some(&live),
            &obj(json!({"replicas": 2})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"before-first-apply\" using v1: .spec.replicas"
        );
        let ok = apply(
            &s,
            Some(&live),
            &obj(json!({"image": "x"})),
            Managed::default(),
            &req("a"),
            false,
        )
        .unwrap();
        assert_eq!(
            fields(&ok.managed, "before-first-apply").unwrap(),
            r#"{"f:spec":{".":{},"f:image":{},"f:replicas":{}}}"#
        );
    }

    #[test]
    fn kubectl_forces_conflicts_on_its_last_applied_fields_and_keeps_the_annotation() {
        let s = schema();
        let last = r#"{"apiVersion":"v1","kind":"K","metadata":{"annotations":{},"name":"a"},"spec":{"replicas":1}}"#;
        let live = json!({"apiVersion": "v1", "kind": "K",
            "metadata": {"name": "a", "uid": "u", "annotations": {LAST_APPLIED: last}},
            "spec": {"replicas": 1, "image": "x"}});
        let new_managed = update(
            &s,
            None,
            &live,
            Managed::default(),
            &req("kubectl-client-side-apply"),
        );
        let cfg = obj(json!({"replicas": 3}));
        let ok = apply(
            &s,
            Some(&live),
            &cfg,
            new_managed.clone(),
            &req("kubectl"),
            false,
        )
        .unwrap();
        assert_eq!(ok.object["spec"]["replicas"], json!(3));
        assert_eq!(
            ok.object["metadata"]["annotations"][LAST_APPLIED],
            json!(
                "{\"apiVersion\":\"v1\",\"kind\":\"K\",\"metadata\":{\"name\":\"a\"},\"spec\":{\"replicas\":3}}\n"
            )
        );
        // image is not in the annotation: changing it still conflicts.
        let err = apply(
            &s,
            Some(&live),
            &obj(json!({"replicas": 3, "image": "y"})),
            new_managed.clone(),
            &req("kubectl"),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .spec.image"
        );
        // Other managers get no such allowance.
        assert!(apply(&s, Some(&live), &cfg, new_managed, &req("other"), false).is_err());
    }

    const LAST_APPLIED: &str = crate::last_applied::LAST_APPLIED_ANNOTATION;
}
