//! A simplified model of server-side apply and `metadata.managedFields`.
//!
//! A manager owns a set of *leaf paths*: walking an object, every non-empty map is
//! descended into and everything else (scalars, lists, empty maps) is a leaf. Lists are
//! atomic (one leaf), where kube-apiserver merges most lists by key (`ports` by
//! `port`+`protocol`, `containers` by `name`). Labels and annotations are maps, so each
//! key is owned on its own, as in the real thing. The owned fields are written to
//! `managedFields` as `FieldsV1` (`{"f:spec":{"f:type":{}}}`) with one entry per
//! (manager, operation, subresource).
//!
//! Apply (`apply`): fields this manager applied before and omits now are removed unless
//! another manager owns them; applied fields are set; a field owned by another manager
//! with a different value is a conflict (409) unless `force`, which takes it over.
//! Update (`record_update`: PUT, merge patch, JSON patch): the fields the write changed
//! move to the updating manager. Not modelled: list merge keys, `x-kubernetes-*`
//! schema markers, defaulting, version conversion of field sets.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

/// A path of map keys from the object root, e.g. `["spec", "type"]`.
pub type FieldPath = Vec<String>;

/// Which part of an object a write touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The write went to the `status` subresource: only `status` is in scope.
    pub status_subresource: bool,
    /// The type has a status subresource: writes to the main resource leave `status`.
    pub has_status: bool,
}

impl Scope {
    fn subresource(self) -> Option<&'static str> {
        self.status_subresource.then_some("status")
    }
}

/// The leaf paths of `object` a client can own in `scope`.
pub fn leaf_paths(object: &Value, scope: Scope) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    let Some(map) = object.as_object() else {
        return out;
    };
    for (key, value) in map {
        let path = vec![key.clone()];
        match key.as_str() {
            "status" if scope.status_subresource || !scope.has_status => {
                walk(value, path, &mut out)
            }
            _ if scope.status_subresource => {}
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(v) = value.get(field) {
                        walk(v, vec![key.clone(), field.to_string()], &mut out);
                    }
                }
            }
            _ => walk(value, path, &mut out),
        }
    }
    out
}

fn walk(value: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            for (key, child) in map {
                let mut next = path.clone();
                next.push(key.clone());
                walk(child, next, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

pub fn get_path<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn set_path(value: &mut Value, path: &[String], new: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = value;
    for key in parents {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Some(map) = current.as_object_mut() else {
            return;
        };
        current = map
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
    }
    if let Some(map) = current.as_object_mut() {
        map.insert(last.clone(), new);
    }
}

/// Removes the field at `path`, then maps left empty by the removal (top-level fields
/// stay).
fn remove_path(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let Some(parent) = parents
        .iter()
        .try_fold(&mut *value, |v, key| v.get_mut(key))
    else {
        return;
    };
    let emptied = parent.as_object_mut().is_some_and(|map| {
        map.remove(last);
        map.is_empty()
    });
    if emptied && parents.len() > 1 {
        remove_path(value, parents);
    }
}

fn overlap(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn display_path(path: &[String]) -> String {
    path.iter().map(|key| format!(".{key}")).collect()
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: BTreeSet<FieldPath>,
}

impl Entry {
    fn parse(value: &Value) -> Option<Self> {
        let mut fields = BTreeSet::new();
        fields_from_v1(value.get("fieldsV1")?, Vec::new(), &mut fields);
        Some(Self {
            manager: value.get("manager")?.as_str()?.to_string(),
            operation: value.get("operation")?.as_str()?.to_string(),
            api_version: value["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: value["time"].as_str().unwrap_or_default().to_string(),
            subresource: value["subresource"].as_str().map(str::to_string),
            fields,
        })
    }

    fn to_value(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_to_v1(&self.fields),
        });
        if let Some(sub) = &self.subresource {
            entry["subresource"] = json!(sub);
        }
        entry
    }
}

/// `{"f:spec":{"f:type":{}}}` → `[["spec","type"]]`. Keys other than `f:` (list keys
/// `k:`, values `v:`, the `.` self marker) make their parent an atomic leaf.
fn fields_from_v1(node: &Value, path: FieldPath, out: &mut BTreeSet<FieldPath>) {
    let children: Vec<(&String, &Value)> = node
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    let atomic = children.iter().any(|(key, _)| !key.starts_with("f:"));
    if children.is_empty() || atomic {
        if !path.is_empty() {
            out.insert(path);
        }
        return;
    }
    for (key, child) in children {
        let mut next = path.clone();
        next.push(key[2..].to_string());
        fields_from_v1(child, next, out);
    }
}

fn fields_to_v1(fields: &BTreeSet<FieldPath>) -> Value {
    let mut root = Value::Object(Map::new());
    for path in fields {
        let prefixed: Vec<String> = path.iter().map(|key| format!("f:{key}")).collect();
        set_path(&mut root, &prefixed, json!({}));
    }
    root
}

/// The `managedFields` of one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ownership {
    entries: Vec<Entry>,
}

impl Ownership {
    pub fn of(object: &Value) -> Self {
        let entries = object["metadata"]["managedFields"]
            .as_array()
            .map(|list| list.iter().filter_map(Entry::parse).collect())
            .unwrap_or_default();
        Self { entries }
    }

    /// Writes the entries into `object.metadata.managedFields` (removes it when empty).
    pub fn store(&self, object: &mut Value) {
        let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        if self.entries.is_empty() {
            metadata.remove("managedFields");
        } else {
            let list = self.entries.iter().map(Entry::to_value).collect();
            metadata.insert("managedFields".into(), Value::Array(list));
        }
    }

    fn position(&self, manager: &str, operation: &str, scope: Scope) -> Option<usize> {
        self.entries.iter().position(|e| {
            e.manager == manager
                && e.operation == operation
                && e.subresource.as_deref() == scope.subresource()
        })
    }

    /// Sets the fields of (manager, operation, scope); keeps the entry's time when its
    /// fields did not change, as kube-apiserver does.
    fn set_entry(
        &mut self,
        manager: &str,
        operation: &str,
        scope: Scope,
        api_version: &str,
        fields: BTreeSet<FieldPath>,
        now: &str,
    ) {
        match self.position(manager, operation, scope) {
            Some(i) => {
                let entry = &mut self.entries[i];
                if entry.fields != fields || entry.api_version != api_version {
                    entry.fields = fields;
                    entry.api_version = api_version.to_string();
                    entry.time = now.to_string();
                }
            }
            None => self.entries.push(Entry {
                manager: manager.to_string(),
                operation: operation.to_string(),
                api_version: api_version.to_string(),
                time: now.to_string(),
                subresource: scope.subresource().map(str::to_string),
                fields,
            }),
        }
        self.entries.retain(|e| !e.fields.is_empty());
    }

    /// Server-side apply of `applied` by `manager` onto `existing` (a skeleton with only
    /// apiVersion, kind and metadata when the object is new). Returns the merged object,
    /// or the conflicts as (manager, `.path`) when `force` is off.
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &mut self,
        manager: &str,
        scope: Scope,
        api_version: &str,
        existing: &Value,
        applied: &Value,
        force: bool,
        now: &str,
    ) -> Result<Value, Vec<(String, String)>> {
        let new_paths = leaf_paths(applied, scope);
        let mine = self.position(manager, "Apply", scope);
        let mut conflicts = Vec::new();
        for (i, entry) in self.entries.iter().enumerate() {
            if Some(i) == mine || entry.subresource.as_deref() != scope.subresource() {
                continue;
            }
            for path in &new_paths {
                let differs = get_path(existing, path) != get_path(applied, path);
                if differs && entry.fields.iter().any(|owned| overlap(owned, path)) {
                    conflicts.push((i, path.clone()));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(conflicts
                .into_iter()
                .map(|(i, path)| (self.entries[i].manager.clone(), display_path(&path)))
                .collect());
        }
        for (i, path) in &conflicts {
            self.entries[*i]
                .fields
                .retain(|owned| !overlap(owned, path));
        }
        let old_paths = mine
            .map(|i| self.entries[i].fields.clone())
            .unwrap_or_default();
        let mut result = existing.clone();
        for path in old_paths.difference(&new_paths) {
            let still_applied = new_paths.iter().any(|p| overlap(p, path));
            let owned_by_others = self.entries.iter().enumerate().any(|(i, e)| {
                Some(i) != mine
                    && e.subresource.as_deref() == scope.subresource()
                    && e.fields.iter().any(|owned| overlap(owned, path))
            });
            if !still_applied && !owned_by_others {
                remove_path(&mut result, path);
            }
        }
        for path in &new_paths {
            if let Some(value) = get_path(applied, path) {
                set_path(&mut result, path, value.clone());
            }
        }
        self.set_entry(manager, "Apply", scope, api_version, new_paths, now);
        Ok(result)
    }

    /// An update (PUT or patch) by `manager` changed `old` into `new`: the changed fields
    /// move to the manager's `Update` entry; removed fields leave every entry.
    pub fn record_update(
        &mut self,
        manager: &str,
        scope: Scope,
        api_version: &str,
        old: &Value,
        new: &Value,
        now: &str,
    ) {
        let changed: BTreeSet<FieldPath> = leaf_paths(new, scope)
            .into_iter()
            .filter(|path| get_path(old, path) != get_path(new, path))
            .collect();
        let removed: BTreeSet<FieldPath> = leaf_paths(old, scope)
            .into_iter()
            .filter(|path| get_path(new, path).is_none())
            .collect();
        let mine = self.position(manager, "Update", scope);
        for (i, entry) in self.entries.iter_mut().enumerate() {
            if entry.subresource.as_deref() != scope.subresource() {
                continue;
            }
            entry.fields.retain(|owned| {
                let taken = Some(i) != mine && changed.iter().any(|p| overlap(p, owned));
                let gone =
                    removed.iter().any(|p| overlap(p, owned)) && get_path(new, owned).is_none();
                !taken && !gone
            });
        }
        let mut fields = mine
            .map(|i| self.entries[i].fields.clone())
            .unwrap_or_default();
        fields.retain(|owned| !changed.iter().any(|p| overlap(p, owned)));
        fields.extend(changed);
        self.entries.retain(|e| !e.fields.is_empty());
        if fields.is_empty() && self.position(manager, "Update", scope).is_none() {
            return;
        }
        self.set_entry(manager, "Update", scope, api_version, fields, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: Scope = Scope {
        status_subresource: false,
        has_status: true,
    };

    fn path(p: &str) -> FieldPath {
        p.split('.').map(str::to_string).collect()
    }

    #[test]
    fn leaf_paths_skip_server_fields() {
        let object = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "labels": {"app": "web"}, "resourceVersion": "3"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "selector": {}},
            "status": {"loadBalancer": {}}});
        let paths = leaf_paths(&object, MAIN);
        let expected: BTreeSet<FieldPath> = [
            "metadata.labels.app",
            "spec.type",
            "spec.ports",
            "spec.selector",
        ]
        .into_iter()
        .map(path)
        .collect();
        assert_eq!(paths, expected);
        let status = Scope {
            status_subresource: true,
            has_status: true,
        };
        assert_eq!(
            leaf_paths(&object, status),
            [path("status.loadBalancer")].into()
        );
    }

    #[test]
    fn fields_v1_round_trip() {
        let fields: BTreeSet<FieldPath> = [path("spec.type"), path("metadata.labels.app")].into();
        let v1 = fields_to_v1(&fields);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:type": {}}})
        );
        let mut back = BTreeSet::new();
        fields_from_v1(&v1, Vec::new(), &mut back);
        assert_eq!(back, fields);
        let mut keyed = BTreeSet::new();
        fields_from_v1(
            &json!({"f:spec": {"f:ports": {".": {}, "k:{\"port\":80}": {}}}}),
            Vec::new(),
            &mut keyed,
        );
        assert_eq!(keyed, [path("spec.ports")].into());
    }

    #[test]
    fn reapply_removes_omitted_fields_and_keeps_foreign_ones() {
        let mut own = Ownership::default();
        let skeleton = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}});
        let first = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"type": "LoadBalancer", "ports": [1]}});
        let mut object = own
            .apply("agent", MAIN, "v1", &skeleton, &first, false, "t1")
            .unwrap();
        // Another writer adds a field the agent never applied.
        object["spec"]["clusterIP"] = json!("10.0.0.1");
        let second = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"type": "LoadBalancer"}});
        let object = own
            .apply("agent", MAIN, "v1", &object, &second, false, "t2")
            .unwrap();
        assert_eq!(object["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(
            object["spec"],
            json!({"type": "LoadBalancer", "clusterIP": "10.0.0.1"})
        );
        assert_eq!(own.entries.len(), 1);
        assert_eq!(own.entries[0].time, "t2");
    }

    #[test]
    fn conflicts_need_force() {
        let mut own = Ownership::default();
        let skeleton = json!({"metadata": {"name": "web"}});
        let object = own
            .apply(
                "a",
                MAIN,
                "v1",
                &skeleton,
                &json!({"spec": {"type": "ClusterIP"}}),
                false,
                "t",
            )
            .unwrap();
        let applied = json!({"spec": {"type": "LoadBalancer"}});
        let err = own
            .apply("b", MAIN, "v1", &object, &applied, false, "t")
            .unwrap_err();
        assert_eq!(err, vec![("a".to_string(), ".spec.type".to_string())]);
        // The same value is shared ownership, not a conflict.
        let same = json!({"spec": {"type": "ClusterIP"}});
        assert!(
            own.clone()
                .apply("b", MAIN, "v1", &object, &same, false, "t")
                .is_ok()
        );
        let object = own
            .apply("b", MAIN, "v1", &object, &applied, true, "t")
            .unwrap();
        assert_eq!(object["spec"]["type"], "LoadBalancer");
        assert_eq!(own.entries.len(), 1, "a lost its only field: {own:?}");
        assert_eq!(own.entries[0].manager, "b");
    }

    #[test]
    fn updates_take_changed_fields() {
        let mut own = Ownership::default();
        let skeleton = json!({"metadata": {"name": "l"}});
        let old = own
            .apply(
                "a",
                MAIN,
                "v1",
                &skeleton,
                &json!({"spec": {"holder": "a", "ttl": 10}}),
                false,
                "t",
            )
            .unwrap();
        let mut new = old.clone();
        new["spec"]["holder"] = json!("b");
        own.record_update("b", MAIN, "v1", &old, &new, "t");
        let mut store = json!({"metadata": {}});
        own.store(&mut store);
        let entries = store["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(entries[0]["fieldsV1"], json!({"f:spec": {"f:ttl": {}}}));
        assert_eq!(entries[1]["manager"], "b");
        assert_eq!(entries[1]["operation"], "Update");
        assert_eq!(entries[1]["fieldsV1"], json!({"f:spec": {"f:holder": {}}}));
    }
}
