//! Generic object storage with Kubernetes semantics on top of a [`Store`]: keys, uid,
//! creationTimestamp, generation, resourceVersion = store revision, optimistic
//! concurrency, the status subresource, finalizers, list paging and selectors.
//!
//! Everything here is generic over [`Resource`]; the HTTP layer decides which kind.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use fedingress_api::selector::{FieldSelector, LabelSelectorRequirements};
use fedingress_api::{Resource, Time};
use fedingress_store::{KeyValue, Precondition, Revision, Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::status::{ApiError, Target};

/// How many times an update without a client resourceVersion is retried on a race.
const UPDATE_RETRIES: usize = 8;

/// Where a write lands: the object, or only its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Main,
    Status,
}

/// `group/resource` for messages, e.g. `federatedingresses.fedingress.io`.
pub fn group_resource<R: Resource>() -> String {
    if R::GROUP.is_empty() {
        R::PLURAL.to_string()
    } else {
        format!("{}.{}", R::PLURAL, R::GROUP)
    }
}

pub fn target<R: Resource>(name: &str) -> Target {
    Target {
        group: R::GROUP,
        kind: R::PLURAL.to_string(),
        name: name.to_string(),
    }
}

/// Storage key prefix of a kind (and namespace).
pub fn prefix<R: Resource>(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if R::NAMESPACED => {
            format!("/registry/{}/{}/{ns}/", fedingress_api::GROUP, R::PLURAL)
        }
        _ => format!("/registry/{}/{}/", fedingress_api::GROUP, R::PLURAL),
    }
}

fn key<R: Resource>(namespace: Option<&str>, name: &str) -> String {
    format!("{}{name}", prefix::<R>(namespace))
}

/// Filters of a list or watch.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub labels: Option<LabelSelectorRequirements>,
    pub fields: Option<FieldSelector>,
}

impl Filter {
    /// Parses the selectors of a list or watch of kind `R`.
    pub fn parse<R: Resource>(
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Self, ApiError> {
        let labels =
            match label_selector.filter(|s| !s.trim().is_empty()) {
                Some(s) => Some(LabelSelectorRequirements::parse(s).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?),
                None => None,
            };
        let fields = match field_selector.filter(|s| !s.trim().is_empty()) {
            Some(s) => {
                let selector = FieldSelector::parse(s)
                    .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
                for field in selector.fields() {
                    let known = field == "metadata.name"
                        || field == "metadata.namespace"
                        || R::SELECTABLE_FIELDS.contains(&field);
                    if !known {
                        return Err(ApiError::bad_request(format!(
                            "field label not supported: {field}"
                        )));
                    }
                }
                Some(selector)
            }
            None => None,
        };
        Ok(Self { labels, fields })
    }

    pub fn matches<R: Resource>(&self, object: &R) -> bool {
        let meta = object.metadata();
        if let Some(labels) = &self.labels
            && !labels.matches(&meta.labels)
        {
            return false;
        }
        if let Some(fields) = &self.fields {
            return fields.matches(|field| match field {
                "metadata.name" => meta.name.clone(),
                "metadata.namespace" => Some(meta.namespace.clone().unwrap_or_default()),
                other => object.selectable_field(other),
            });
        }
        true
    }
}

/// The opaque `continue` token of a paged list.
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    /// Revision of the first page (reported as the list's resourceVersion).
    rv: Revision,
    /// Last key returned; the next page starts after it.
    start: String,
}

impl ContinueToken {
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(token: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::bad_request("continue key is not valid: malformed token");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| bad())?;
        serde_json::from_slice(&bytes).map_err(|_| bad())
    }
}

/// One page of a list.
pub struct Page<R> {
    pub items: Vec<R>,
    pub resource_version: Revision,
    pub continue_token: Option<String>,
}

/// Parses a resourceVersion given by a client.
pub fn parse_revision(value: &str) -> Result<Revision, ApiError> {
    value
        .parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {value:?}")))
}

pub fn store_error<R: Resource>(name: &str, error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound { .. } => {
            ApiError::not_found(&group_resource::<R>(), target::<R>(name))
        }
        StoreError::Compacted {
            requested,
            compacted,
        } => ApiError::expired(format!(
            "too old resource version: {requested} ({compacted})"
        )),
        // Only the leader's controller writes fenced; losing leadership is expected.
        StoreError::Fenced { key } => {
            tracing::debug!(
                resource = R::PLURAL,
                name,
                key,
                "write refused: no longer the leader"
            );
            ApiError::unavailable(format!("write refused: leadership of {key:?} was lost"))
        }
        other => {
            tracing::error!(error = %other, resource = R::PLURAL, name, "store request failed");
            ApiError::internal(format!("storage error: {other}"))
        }
    }
}

/// Kubernetes object semantics over a [`Store`].
#[derive(Clone)]
pub struct Registry {
    store: Arc<dyn Store>,
}

impl Registry {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Decodes a stored object, setting its resourceVersion from the store.
    pub fn decode_stored<R: Resource>(kv: &KeyValue) -> Result<R, ApiError> {
        let mut object: R = serde_json::from_slice(&kv.value).map_err(|e| {
            tracing::error!(key = %kv.key, error = %e, "stored object does not decode");
            ApiError::internal(format!("stored object {} does not decode: {e}", kv.key))
        })?;
        object.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
        Ok(object)
    }

    fn encode<R: Resource>(object: &R) -> Result<Bytes, ApiError> {
        let mut object = object.clone();
        object.metadata_mut().resource_version = None;
        serde_json::to_vec(&object)
            .map(Bytes::from)
            .map_err(|e| ApiError::internal(format!("encoding object: {e}")))
    }

    pub async fn get<R: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<R, ApiError> {
        let kv = self
            .store
            .get(&key::<R>(namespace, name))
            .await
            .map_err(|e| store_error::<R>(name, e))?
            .ok_or_else(|| ApiError::not_found(&group_resource::<R>(), target::<R>(name)))?;
        Self::decode_stored(&kv)
    }

    /// Lists objects matching `filter`, at most `limit` (0 = all), continuing a paged list.
    pub async fn list<R: Resource>(
        &self,
        namespace: Option<&str>,
        filter: &Filter,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<Page<R>, ApiError> {
        let prefix = prefix::<R>(namespace);
        let token = continue_token
            .filter(|t| !t.is_empty())
            .map(ContinueToken::decode)
            .transpose()?;
        if let Some(token) = &token {
            if !token.start.starts_with(&prefix) {
                return Err(ApiError::bad_request(
                    "continue key is not valid: it belongs to another list",
                ));
            }
            let compacted = self
                .store
                .compacted_revision()
                .await
                .map_err(|e| store_error::<R>("", e))?;
            if token.rv < compacted {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ));
            }
        }
        let mut start = token.as_ref().map(|t| t.start.clone());
        let mut items = Vec::new();
        let mut revision = None;
        loop {
            // Read somewhat more than needed: the filter may drop some.
            let batch = if limit == 0 {
                0
            } else {
                (limit - items.len()).max(16)
            };
            let result = self
                .store
                .range(&prefix, start.as_deref(), batch)
                .await
                .map_err(|e| store_error::<R>("", e))?;
            revision.get_or_insert(result.revision);
            let mut last_key = None;
            for kv in &result.kvs {
                last_key = Some(kv.key.clone());
                let object: R = Self::decode_stored(kv)?;
                if filter.matches(&object) {
                    items.push(object);
                    if limit != 0 && items.len() == limit {
                        break;
                    }
                }
            }
            let consumed_all = last_key.as_deref() == result.kvs.last().map(|kv| kv.key.as_str());
            let more = result.more || !consumed_all;
            if limit != 0 && items.len() == limit {
                let continue_token = if more {
                    let rv = token
                        .as_ref()
                        .map(|t| t.rv)
                        .or(revision)
                        .unwrap_or_default();
                    last_key.map(|start| ContinueToken { rv, start }.encode())
                } else {
                    None
                };
                return Ok(Page {
                    items,
                    resource_version: token.map(|t| t.rv).or(revision).unwrap_or_default(),
                    continue_token,
                });
            }
            if !result.more {
                return Ok(Page {
                    items,
                    resource_version: token.map(|t| t.rv).or(revision).unwrap_or_default(),
                    continue_token: None,
                });
            }
            start = last_key;
        }
    }

    /// Creates an object. The caller has decoded it; this sets server-owned metadata,
    /// defaults and validates it, and stores it unless `dry_run`.
    pub async fn create<R: Resource>(
        &self,
        namespace: Option<&str>,
        mut object: R,
        now: Time,
        dry_run: bool,
    ) -> Result<R, ApiError> {
        {
            let meta = object.metadata_mut();
            if R::NAMESPACED {
                match (&meta.namespace, namespace) {
                    (Some(body), Some(url)) if body != url => {
                        return Err(ApiError::bad_request(
                            "the namespace of the provided object does not match the namespace sent on the request",
                        ));
                    }
                    _ => meta.namespace = namespace.map(String::from),
                }
            }
            if meta.name.as_deref().unwrap_or("").is_empty()
                && let Some(base) = meta.generate_name.as_deref().filter(|b| !b.is_empty())
            {
                meta.name = Some(format!("{base}{}", random_suffix()));
            }
            meta.uid = Some(uuid::Uuid::new_v4().to_string());
            meta.creation_timestamp = Some(now);
            meta.deletion_timestamp = None;
            meta.deletion_grace_period_seconds = None;
            meta.generation = Some(1);
            meta.resource_version = None;
        }
        object.clear_status();
        object.apply_defaults();
        let name = object.metadata().name.clone().unwrap_or_default();
        let errors = object.validate();
        if !errors.is_empty() {
            return Err(ApiError::invalid(R::KIND, R::GROUP, &name, &errors));
        }
        if dry_run {
            return Ok(object);
        }
        let ns = object.metadata().namespace.clone();
        let kv = match self
            .store
            .put(
                &key::<R>(ns.as_deref(), &name),
                Self::encode(&object)?,
                Precondition::Absent,
            )
            .await
        {
            Ok(kv) => kv,
            Err(StoreError::PreconditionFailed { .. }) => {
                return Err(ApiError::already_exists(
                    &group_resource::<R>(),
                    target::<R>(&name),
                ));
            }
            Err(e) => return Err(store_error::<R>(&name, e)),
        };
        object.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
        Ok(object)
    }

    /// Read-modify-write with optimistic concurrency (kube-apiserver's GuaranteedUpdate).
    ///
    /// `desired` computes the object the client wants from the current one. When the
    /// result carries a resourceVersion that is not the current one the update fails
    /// with Conflict; without one, races are retried.
    ///
    /// # Guarantees
    /// uid, creationTimestamp, deletionTimestamp, namespace and name stay the server's;
    /// the main resource never changes status and the status scope changes nothing but
    /// status; generation moves only when the spec (or deletionTimestamp) changes; an
    /// update that changes nothing is not written; an object being deleted whose last
    /// finalizer is removed is deleted.
    pub async fn update<R: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        scope: Scope,
        dry_run: bool,
        mut desired: impl FnMut(&R) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        let key = key::<R>(namespace, name);
        for _ in 0..UPDATE_RETRIES {
            let current_kv = self
                .store
                .get(&key)
                .await
                .map_err(|e| store_error::<R>(name, e))?
                .ok_or_else(|| ApiError::not_found(&group_resource::<R>(), target::<R>(name)))?;
            let current: R = Self::decode_stored(&current_kv)?;
            let wanted = desired(&current)?;
            let client_rv = wanted
                .metadata()
                .resource_version
                .clone()
                .filter(|rv| !rv.is_empty());
            if let Some(rv) = &client_rv {
                let rv = parse_revision(rv)?;
                if rv != current_kv.mod_revision {
                    return Err(ApiError::stale(&group_resource::<R>(), target::<R>(name)));
                }
            }
            if wanted.metadata().name.as_deref().is_some_and(|n| n != name) {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    wanted.metadata().name.as_deref().unwrap_or_default()
                )));
            }
            if R::NAMESPACED
                && wanted
                    .metadata()
                    .namespace
                    .as_deref()
                    .is_some_and(|n| Some(n) != namespace)
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            let mut next = match scope {
                Scope::Main => {
                    let mut next = wanted;
                    next.copy_status_from(&current);
                    next
                }
                Scope::Status => {
                    let mut next = current.clone();
                    next.copy_status_from(&wanted);
                    next
                }
            };
            {
                let (old, meta) = (current.metadata(), next.metadata_mut());
                meta.name = old.name.clone();
                meta.namespace = old.namespace.clone();
                meta.uid = old.uid.clone();
                meta.creation_timestamp = old.creation_timestamp;
                meta.deletion_timestamp = old.deletion_timestamp;
                meta.deletion_grace_period_seconds = old.deletion_grace_period_seconds;
                meta.generate_name = old.generate_name.clone();
                meta.generation = old.generation;
                meta.resource_version = None;
            }
            next.apply_defaults();
            if next.spec_value() != current.spec_value() {
                let meta = next.metadata_mut();
                meta.generation = Some(meta.generation.unwrap_or(0) + 1);
            }
            let errors = next.validate();
            if !errors.is_empty() {
                return Err(ApiError::invalid(R::KIND, R::GROUP, name, &errors));
            }
            let encoded = Self::encode(&next)?;
            if encoded == current_kv.value {
                return Ok(current);
            }
            if dry_run {
                return Ok(next);
            }
            let precondition = Precondition::ModRevision(current_kv.mod_revision);
            let finished = next.metadata().deletion_timestamp.is_some()
                && next.metadata().finalizers.is_empty();
            let result = if finished {
                self.store
                    .delete(&key, precondition)
                    .await
                    .map(|event| event.revision)
            } else {
                self.store
                    .put(&key, encoded, precondition)
                    .await
                    .map(|kv| kv.mod_revision)
            };
            match result {
                Ok(revision) => {
                    next.metadata_mut().resource_version = Some(revision.to_string());
                    return Ok(next);
                }
                Err(StoreError::PreconditionFailed { .. }) if client_rv.is_none() => continue,
                Err(StoreError::PreconditionFailed { .. }) => {
                    return Err(ApiError::stale(&group_resource::<R>(), target::<R>(name)));
                }
                Err(StoreError::NotFound { .. }) if client_rv.is_none() => continue,
                Err(e) => return Err(store_error::<R>(name, e)),
            }
        }
        Err(ApiError::conflict(
            &group_resource::<R>(),
            target::<R>(name),
            "too many concurrent writers; please try again",
        ))
    }

    /// Deletes an object, honouring finalizers: with finalizers left it only gets a
    /// deletionTimestamp and goes when the last one is removed.
    pub async fn delete<R: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        preconditions: &DeletePreconditions,
        now: Time,
        dry_run: bool,
    ) -> Result<R, ApiError> {
        let key = key::<R>(namespace, name);
        for _ in 0..UPDATE_RETRIES {
            let kv = self
                .store
                .get(&key)
                .await
                .map_err(|e| store_error::<R>(name, e))?
                .ok_or_else(|| ApiError::not_found(&group_resource::<R>(), target::<R>(name)))?;
            let mut object: R = Self::decode_stored(&kv)?;
            if let Some(uid) = &preconditions.uid
                && object.metadata().uid.as_ref() != Some(uid)
            {
                return Err(ApiError::conflict(
                    &group_resource::<R>(),
                    target::<R>(name),
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        object.metadata().uid.clone().unwrap_or_default()
                    ),
                ));
            }
            if let Some(rv) = &preconditions.resource_version
                && parse_revision(rv)? != kv.mod_revision
            {
                return Err(ApiError::conflict(
                    &group_resource::<R>(),
                    target::<R>(name),
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        kv.mod_revision
                    ),
                ));
            }
            if dry_run {
                return Ok(object);
            }
            let precondition = Precondition::ModRevision(kv.mod_revision);
            if !object.metadata().finalizers.is_empty() {
                if object.metadata().deletion_timestamp.is_some() {
                    return Ok(object);
                }
                let meta = object.metadata_mut();
                meta.deletion_timestamp = Some(now);
                meta.deletion_grace_period_seconds = Some(0);
                meta.generation = Some(meta.generation.unwrap_or(0) + 1);
                match self
                    .store
                    .put(&key, Self::encode(&object)?, precondition)
                    .await
                {
                    Ok(kv) => {
                        object.metadata_mut().resource_version = Some(kv.mod_revision.to_string());
                        return Ok(object);
                    }
                    Err(StoreError::PreconditionFailed { .. }) => continue,
                    Err(e) => return Err(store_error::<R>(name, e)),
                }
            }
            match self.store.delete(&key, precondition).await {
                Ok(_) => return Ok(object),
                Err(StoreError::PreconditionFailed { .. }) => continue,
                Err(e) => return Err(store_error::<R>(name, e)),
            }
        }
        Err(ApiError::conflict(
            &group_resource::<R>(),
            target::<R>(name),
            "too many concurrent writers; please try again",
        ))
    }
}

/// `DeleteOptions.preconditions`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletePreconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}
