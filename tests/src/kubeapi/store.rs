//! The object store: every object by (group, plural, namespace, name), one global
//! resourceVersion counter, a bounded history of changes for watches, and the write
//! verbs (create, replace, patch, apply, delete) with kube-apiserver's preconditions.

use std::collections::{BTreeMap, VecDeque};

use base64::Engine as _;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::ownership::{Ownership, Scope};
use super::resources::{ResourceType, split_api_version};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, delete_success};

/// How many changes the store keeps for watches by default; a watch from an older
/// resourceVersion gets 410 Expired.
pub const DEFAULT_HISTORY: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub group: String,
    pub plural: String,
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(resource: &ResourceType, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: resource.group.clone(),
            plural: resource.plural.clone(),
            namespace: if resource.namespaced {
                namespace.unwrap_or_default().to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    fn is_of(&self, resource: &ResourceType, namespace: Option<&str>) -> bool {
        self.group == resource.group
            && self.plural == resource.plural
            && namespace.is_none_or(|ns| self.namespace == ns)
    }
}

/// One committed write.
#[derive(Clone, Debug)]
pub struct Change {
    pub rv: u64,
    pub key: ObjectKey,
    pub old: Option<Value>,
    /// The object after the write; for a deletion, the last state with the deletion's
    /// resourceVersion.
    pub new: Value,
    pub deleted: bool,
}

/// Which objects a list or watch selects.
#[derive(Clone, Debug)]
pub struct Selection {
    pub resource: ResourceType,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// The watch event a change produces for this selection: an object that starts to
    /// match is ADDED, one that stops matching is DELETED, as kube-apiserver does.
    pub fn event(&self, change: &Change) -> Option<Value> {
        if !change.key.is_of(&self.resource, self.namespace.as_deref()) {
            return None;
        }
        let was = change.old.as_ref().is_some_and(|old| self.matches(old));
        let kind = if change.deleted {
            (was || self.matches(&change.new)).then_some("DELETED")
        } else {
            match (was, self.matches(&change.new)) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }?;
        Some(json!({"type": kind, "object": change.new}))
    }

    pub fn bookmark(&self, rv: u64) -> Value {
        json!({"type": "BOOKMARK", "object": {
            "kind": self.resource.kind,
            "apiVersion": self.resource.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
        }})
    }
}

/// How a PATCH body is to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    Apply,
    Merge,
    Json,
}

/// Who writes, and how.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `fieldManager`, or the user agent's product name for updates.
    pub manager: Option<String>,
    pub force: bool,
    pub dry_run: bool,
}

pub struct Store {
    pub resources: Vec<ResourceType>,
    objects: BTreeMap<ObjectKey, Value>,
    rv: u64,
    history: VecDeque<Change>,
    pub history_limit: usize,
    /// Watches must start at or after this resourceVersion (older changes are gone).
    floor: u64,
    changed: watch::Sender<u64>,
    next_uid: u64,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn rv_of(object: &Value) -> Option<&str> {
    object["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = json!({});
    }
    let Some(map) = object.as_object_mut() else {
        unreachable!("just made an object")
    };
    let metadata = map.entry("metadata").or_insert_with(|| json!({}));
    if !metadata.is_object() {
        *metadata = json!({});
    }
    let Some(metadata) = metadata.as_object_mut() else {
        unreachable!("just made an object")
    };
    metadata
}

impl Store {
    pub fn new(resources: Vec<ResourceType>) -> Self {
        Self {
            resources,
            objects: BTreeMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_limit: DEFAULT_HISTORY,
            floor: 0,
            changed: watch::channel(0).0,
            next_uid: 0,
        }
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Drops the history: watches and continue tokens from before now get 410.
    pub fn compact(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }

    /// A resource type by plural, `plural.group` or kind.
    pub fn resource_named(&self, name: &str) -> Option<ResourceType> {
        self.resources.iter().find(|r| r.is_named(name)).cloned()
    }

    pub fn resource_of(&self, api_version: &str, kind: &str) -> Option<ResourceType> {
        let (group, version) = split_api_version(api_version);
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
            .cloned()
    }

    pub fn object(&self, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(key)
    }

    pub fn objects_of(&self, resource: &ResourceType) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(key, _)| key.is_of(resource, None))
            .map(|(_, object)| object.clone())
            .collect()
    }

    /// Commits `new` (or the deletion of `key` when `None`): assigns the next
    /// resourceVersion, bumps `generation` when `spec` changed, records the change and
    /// wakes watches. A write that changes nothing is a no-op, as in kube-apiserver.
    fn commit(&mut self, key: ObjectKey, new: Option<Value>, dry_run: bool) -> Option<Value> {
        let old = self.objects.get(&key).cloned();
        let deleted = new.is_none();
        let mut object = match (new, &old) {
            (Some(new), _) => new,
            (None, Some(old)) => old.clone(),
            (None, None) => return None,
        };
        if let (Some(old), false) = (&old, deleted) {
            let mut unchanged = object.clone();
            metadata_mut(&mut unchanged).insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
            if unchanged == *old {
                return Some(old.clone());
            }
        }
        // A deleted object whose last finalizer went away is gone.
        let finalized = !deleted
            && object["metadata"]["deletionTimestamp"].is_string()
            && object["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty);
        let deleted = deleted || finalized;
        let generation = match &old {
            Some(old) if old.get("spec") != object.get("spec") => {
                old["metadata"]["generation"].as_i64().unwrap_or(0) + 1
            }
            Some(old) => old["metadata"]["generation"].as_i64().unwrap_or(1),
            None => 1,
        };
        let rv = if dry_run { self.rv } else { self.rv + 1 };
        let metadata = metadata_mut(&mut object);
        metadata.insert("resourceVersion".into(), json!(rv.to_string()));
        metadata.insert("generation".into(), json!(generation));
        if dry_run {
            return Some(object);
        }
        self.rv = rv;
        if deleted {
            self.objects.remove(&key);
        } else {
            self.objects.insert(key.clone(), object.clone());
        }
        self.history.push_back(Change {
            rv,
            key,
            old,
            new: object.clone(),
            deleted,
        });
        while self.history.len() > self.history_limit {
            if let Some(change) = self.history.pop_front() {
                self.floor = change.rv;
            }
        }
        self.changed.send_replace(rv);
        Some(object)
    }

    /// Fills what the server sets on create: apiVersion, kind, namespace, uid and
    /// creationTimestamp.
    fn prepare_create(&mut self, resource: &ResourceType, key: &ObjectKey, object: &mut Value) {
        self.next_uid += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.next_uid);
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), json!(resource.api_version()));
            map.insert("kind".into(), json!(resource.kind));
        }
        let metadata = metadata_mut(object);
        metadata.insert("name".into(), json!(key.name));
        if resource.namespaced {
            metadata.insert("namespace".into(), json!(key.namespace));
        } else {
            metadata.remove("namespace");
        }
        metadata.insert("uid".into(), json!(uid));
        metadata.insert("creationTimestamp".into(), json!(now()));
        metadata.remove("resourceVersion");
        metadata.remove("deletionTimestamp");
    }

    /// What an update of `old` to `body` stores: through the status subresource only
    /// the status changes; otherwise everything but the status (kept from `old`).
    fn updated(
        resource: &ResourceType,
        old: &Value,
        mut body: Value,
        status_subresource: bool,
    ) -> Value {
        if status_subresource {
            let mut new = old.clone();
            new["status"] = body.get("status").cloned().unwrap_or(Value::Null);
            return new;
        }
        if resource.has_status
            && let Some(map) = body.as_object_mut()
        {
            match old.get("status") {
                Some(status) => map.insert("status".into(), status.clone()),
                None => map.remove("status"),
            };
        }
        Self::carry_over(old, &mut body);
        body
    }

    /// Keeps what an update cannot change: identity, creation time, deletion state.
    fn carry_over(old: &Value, new: &mut Value) {
        if let Some(map) = new.as_object_mut() {
            map.insert("apiVersion".into(), old["apiVersion"].clone());
            map.insert("kind".into(), old["kind"].clone());
        }
        let metadata = metadata_mut(new);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ] {
            match old["metadata"].get(field) {
                Some(value) => metadata.insert(field.into(), value.clone()),
                None => metadata.remove(field),
            };
        }
    }

    // ---- script writes -------------------------------------------------------------

    /// Creates or replaces `object` as a controller would; returns the stored object.
    pub fn put(&mut self, resource: &ResourceType, mut object: Value) -> Value {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
        assert!(
            !name.is_empty(),
            "put: the object has no metadata.name: {object}"
        );
        assert!(
            !resource.namespaced || namespace.is_some(),
            "put: a {} needs metadata.namespace: {object}",
            resource.kind
        );
        let key = ObjectKey::new(resource, namespace.as_deref(), &name);
        match self.objects.get(&key).cloned() {
            Some(old) => {
                Self::carry_over(&old, &mut object);
                let metadata = metadata_mut(&mut object);
                if !metadata.contains_key("managedFields")
                    && let Some(fields) = old["metadata"].get("managedFields")
                {
                    metadata.insert("managedFields".into(), fields.clone());
                }
                if object.get("status").is_none()
                    && let (Some(status), Some(map)) = (old.get("status"), object.as_object_mut())
                {
                    map.insert("status".into(), status.clone());
                }
            }
            None => self.prepare_create(resource, &key, &mut object),
        }
        self.commit(key, Some(object), false)
            .unwrap_or_else(|| unreachable!("a put always stores"))
    }

    /// Replaces the status of an existing object; `None` when it does not exist.
    pub fn set_status(&mut self, key: &ObjectKey, status: Value) -> Option<Value> {
        let mut object = self.objects.get(key)?.clone();
        object.as_object_mut()?.insert("status".into(), status);
        self.commit(key.clone(), Some(object), false)
    }

    /// Deletes at once (finalizers are not waited for).
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Value> {
        self.commit(key.clone(), None, false)
    }

    // ---- API verbs -----------------------------------------------------------------

    pub fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&ObjectKey::new(resource, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))
    }

    /// A list response, paged by `limit` with `continue` tokens.
    pub fn list(
        &self,
        selection: &Selection,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let (list_rv, start) = match continue_token {
            Some(token) => {
                let (rv, start) = decode_continue(token)
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
                if rv < self.floor {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(start))
            }
            None => (self.rv, None),
        };
        let matching: Vec<(&ObjectKey, &Value)> = self
            .objects
            .iter()
            .filter(|(key, object)| {
                key.is_of(&selection.resource, selection.namespace.as_deref())
                    && selection.matches(object)
            })
            .filter(|(key, _)| {
                start
                    .as_ref()
                    .is_none_or(|s| (&key.namespace, &key.name) > (&s.0, &s.1))
            })
            .collect();
        let take = if limit == 0 {
            matching.len()
        } else {
            limit.min(matching.len())
        };
        let items: Vec<Value> = matching[..take].iter().map(|(_, o)| (*o).clone()).collect();
        let mut metadata = json!({"resourceVersion": list_rv.to_string()});
        if take < matching.len()
            && let Some((last, _)) = matching.get(take.wrapping_sub(1))
        {
            metadata["continue"] = json!(encode_continue(list_rv, &last.namespace, &last.name));
            metadata["remainingItemCount"] = json!(matching.len() - take);
        }
        Ok(json!({
            "kind": format!("{}List", selection.resource.kind),
            "apiVersion": selection.resource.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// The start of a watch from `rv` (`None`/`0`: the current state as ADDED events):
    /// the first events and the resourceVersion they bring the watch to.
    pub fn watch_start(
        &self,
        selection: &Selection,
        rv: Option<u64>,
    ) -> Result<(Vec<Value>, u64), ApiError> {
        match rv {
            None | Some(0) => {
                let events = self
                    .objects
                    .iter()
                    .filter(|(key, object)| {
                        key.is_of(&selection.resource, selection.namespace.as_deref())
                            && selection.matches(object)
                    })
                    .map(|(_, object)| json!({"type": "ADDED", "object": object}))
                    .collect();
                Ok((events, self.rv))
            }
            Some(rv) => self.events_since(selection, rv),
        }
    }

    /// The events for `selection` after `rv`, or 410 when the history no longer reaches
    /// back that far.
    pub fn events_since(
        &self,
        selection: &Selection,
        rv: u64,
    ) -> Result<(Vec<Value>, u64), ApiError> {
        if rv < self.floor {
            return Err(ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                self.floor + 1
            )));
        }
        let events = self
            .history
            .iter()
            .filter(|change| change.rv > rv)
            .filter_map(|change| selection.event(change))
            .collect();
        Ok((events, self.rv.max(rv)))
    }

    pub fn create(
        &mut self,
        resource: &ResourceType,
        namespace: Option<&str>,
        mut body: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        check_type(resource, &body)?;
        let generate = body["metadata"]["generateName"]
            .as_str()
            .map(str::to_string);
        let name = match (body["metadata"]["name"].as_str(), generate) {
            (Some(name), _) if !name.is_empty() => name.to_string(),
            (_, Some(prefix)) => {
                format!("{prefix}{:05x}", (self.rv * 7919 + self.next_uid) % 0xfffff)
            }
            _ => {
                return Err(ApiError::invalid(
                    resource,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
        };
        check_namespace(&body, namespace)?;
        let key = ObjectKey::new(resource, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(resource, &name));
        }
        let scope = Scope {
            status_subresource: false,
            has_status: resource.has_status,
        };
        if resource.has_status
            && let Some(map) = body.as_object_mut()
        {
            map.remove("status");
        }
        metadata_mut(&mut body).remove("managedFields");
        self.prepare_create(resource, &key, &mut body);
        if let Some(manager) = &options.manager {
            let mut ownership = Ownership::default();
            ownership.record_update(
                manager,
                scope,
                &resource.api_version(),
                &json!({}),
                &body,
                &now(),
            );
            ownership.store(&mut body);
        }
        Ok(self
            .commit(key, Some(body), options.dry_run)
            .unwrap_or_default())
    }

    /// PUT: replaces the object (or only its status), with optimistic concurrency when the
    /// body carries `metadata.resourceVersion`.
    pub fn replace(
        &mut self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        status_subresource: bool,
        body: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        check_type(resource, &body)?;
        check_name(&body, name)?;
        check_namespace(&body, namespace)?;
        let key = ObjectKey::new(resource, namespace, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        check_precondition(resource, name, &body, &old)?;
        let scope = Scope {
            status_subresource,
            has_status: resource.has_status,
        };
        let mut new = Self::updated(resource, &old, body, status_subresource);
        let mut ownership = Ownership::of(&old);
        if let Some(manager) = &options.manager {
            ownership.record_update(manager, scope, &resource.api_version(), &old, &new, &now());
        }
        ownership.store(&mut new);
        Ok(self
            .commit(key, Some(new), options.dry_run)
            .unwrap_or_default())
    }

    /// PATCH: server-side apply (creates when absent), JSON merge patch or JSON patch.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        status_subresource: bool,
        patch_type: PatchType,
        patch: Value,
        options: &WriteOptions,
    ) -> Result<Value, ApiError> {
        let key = ObjectKey::new(resource, namespace, name);
        let scope = Scope {
            status_subresource,
            has_status: resource.has_status,
        };
        let old = self.objects.get(&key).cloned();
        let api_version = resource.api_version();
        let stamp = now();
        let new = match patch_type {
            PatchType::Apply => {
                let manager = options.manager.as_deref().filter(|m| !m.is_empty()).ok_or_else(|| {
                    ApiError::bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")
                })?;
                if patch.get("apiVersion").and_then(Value::as_str).is_none()
                    || patch.get("kind").and_then(Value::as_str).is_none()
                {
                    return Err(ApiError::bad_request(
                        "invalid object type: apiVersion and kind are required for apply",
                    ));
                }
                check_type(resource, &patch)?;
                check_name(&patch, name)?;
                check_namespace(&patch, namespace)?;
                let (existing, mut ownership) = match &old {
                    Some(old) => {
                        check_precondition(resource, name, &patch, old)?;
                        (old.clone(), Ownership::of(old))
                    }
                    None if status_subresource => return Err(ApiError::not_found(resource, name)),
                    None => {
                        let mut skeleton = json!({});
                        self.prepare_create(resource, &key, &mut skeleton);
                        (skeleton, Ownership::default())
                    }
                };
                let mut new = ownership
                    .apply(
                        manager,
                        scope,
                        &api_version,
                        &existing,
                        &patch,
                        options.force,
                        &stamp,
                    )
                    .map_err(|conflicts| ApiError::apply_conflict(resource, name, &conflicts))?;
                ownership.store(&mut new);
                new
            }
            PatchType::Merge | PatchType::Json => {
                let old = old
                    .clone()
                    .ok_or_else(|| ApiError::not_found(resource, name))?;
                let mut patched = old.clone();
                if patch_type == PatchType::Merge {
                    check_precondition(resource, name, &patch, &old)?;
                    json_patch::merge(&mut patched, &patch);
                } else {
                    let operations: json_patch::Patch = serde_json::from_value(patch)
                        .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                    json_patch::patch(&mut patched, &operations)
                        .map_err(|e| ApiError::invalid(resource, name, e.to_string()))?;
                    check_precondition(resource, name, &patched, &old)?;
                }
                let mut new = Self::updated(resource, &old, patched, status_subresource);
                let mut ownership = Ownership::of(&old);
                if let Some(manager) = &options.manager {
                    ownership.record_update(manager, scope, &api_version, &old, &new, &stamp);
                }
                ownership.store(&mut new);
                new
            }
        };
        Ok(self
            .commit(key, Some(new), options.dry_run)
            .unwrap_or_default())
    }

    /// DELETE: the object with `deletionTimestamp` while finalizers remain, otherwise a
    /// `Status` Success. `options` is the DeleteOptions body (preconditions).
    pub fn delete(
        &mut self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let key = ObjectKey::new(resource, namespace, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        let preconditions = &options["preconditions"];
        for field in ["uid", "resourceVersion"] {
            if let Some(expected) = preconditions[field].as_str()
                && old["metadata"][field].as_str() != Some(expected)
            {
                let mut error = ApiError::conflict(resource, name);
                error.message = format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field} in precondition: {expected}, {field} in object meta: {}",
                    resource.qualified_plural(),
                    old["metadata"][field].as_str().unwrap_or_default()
                );
                return Err(error);
            }
        }
        let has_finalizers = old["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            let mut new = old.clone();
            metadata_mut(&mut new)
                .entry("deletionTimestamp")
                .or_insert_with(|| json!(now()));
            return Ok(self.commit(key, Some(new), dry_run).unwrap_or_default());
        }
        if !dry_run {
            self.commit(key, None, false);
        }
        Ok(delete_success(resource, name, &old["metadata"]["uid"]))
    }

    /// DELETE on a collection: deletes every selected object; answers the list of them.
    pub fn delete_collection(
        &mut self,
        selection: &Selection,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut list = self.list(selection, 0, None)?;
        let mut items = Vec::new();
        for object in list["items"].as_array().cloned().unwrap_or_default() {
            let meta = &object["metadata"];
            let name = meta["name"].as_str().unwrap_or_default();
            let deleted = self.delete(
                &selection.resource,
                meta["namespace"].as_str(),
                name,
                &Value::Null,
                dry_run,
            )?;
            items.push(if deleted["kind"] == "Status" {
                object.clone()
            } else {
                deleted
            });
        }
        list["items"] = Value::Array(items);
        list["metadata"] = json!({"resourceVersion": self.rv.to_string()});
        Ok(list)
    }
}

/// A body's apiVersion and kind, when given, must be the path's.
fn check_type(resource: &ResourceType, body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the request body is not a JSON object",
        ));
    }
    let api_version = resource.api_version();
    let kind_ok = body["kind"].as_str().is_none_or(|k| k == resource.kind);
    let version_ok = body["apiVersion"].as_str().is_none_or(|v| v == api_version);
    if kind_ok && version_ok {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "the API version in the data ({}) does not match the expected API version ({api_version}) or kind ({}) does not match ({})",
        body["apiVersion"].as_str().unwrap_or_default(),
        body["kind"].as_str().unwrap_or_default(),
        resource.kind
    )))
}

fn check_name(body: &Value, name: &str) -> Result<(), ApiError> {
    match body["metadata"]["name"].as_str() {
        Some(given) if given != name => Err(ApiError::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        ))),
        _ => Ok(()),
    }
}

fn check_namespace(body: &Value, namespace: Option<&str>) -> Result<(), ApiError> {
    match (body["metadata"]["namespace"].as_str(), namespace) {
        (Some(given), Some(path)) if !given.is_empty() && given != path => {
            Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ))
        }
        _ => Ok(()),
    }
}

/// `metadata.resourceVersion` in a write body must be the stored one.
fn check_precondition(
    resource: &ResourceType,
    name: &str,
    body: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    match rv_of(body) {
        Some(given) if Some(given) != rv_of(old) => Err(ApiError::conflict(resource, name)),
        _ => Ok(()),
    }
}

fn encode_continue(rv: u64, namespace: &str, name: &str) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{namespace}/{name}")});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw.to_string())
}

fn decode_continue(token: &str) -> Option<(u64, (String, String))> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let value: Value = serde_json::from_slice(&raw).ok()?;
    let (namespace, name) = value["start"].as_str()?.split_once('/')?;
    Some((
        value["rv"].as_u64()?,
        (namespace.to_string(), name.to_string()),
    ))
}
