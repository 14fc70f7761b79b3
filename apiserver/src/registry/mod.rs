//! Generic object storage with Kubernetes semantics on top of a [`Store`]: keys, uid,
//! creationTimestamp, generation, resourceVersion = store revision, optimistic
//! concurrency, the status subresource, finalizers, list paging and selectors, and the
//! admission that reads the store ([`namespaces`]: NamespaceLifecycle; [`pools`]:
//! IngressPool conflicts).
//!
//! Everything here is generic over [`Resource`]; the HTTP layer decides which kind.

use std::sync::Arc;

use bytes::Bytes;
use fedingress_api::selector::{FieldSelector, LabelSelectorRequirements};
use fedingress_api::{Resource, Time};
use fedingress_store::{KeyValue, Precondition, Revision, Store, StoreError};
use serde::Deserialize;

use crate::status::{ApiError, Target};

mod apply;
mod collection;
pub mod fields;
mod list;
pub mod namespaces;
pub mod pools;

pub use apply::{Applied, Apply};
pub use collection::DeletedCollection;
pub use list::{Page, REVISION_WAIT, ReadAt, too_large, wait_for_revision};

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

/// Parses a resourceVersion given by a client.
pub fn parse_revision(value: &str) -> Result<Revision, ApiError> {
    value
        .parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {value:?}")))
}

/// `error` and its sources, joined with ": ".
fn error_chain(error: &StoreError) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
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
        // Nothing changed: the client may send it again (kube-apiserver's 503 for
        // etcd unavailable).
        StoreError::Unavailable { .. } => {
            tracing::warn!(error = %error_chain(&error), resource = R::PLURAL, name, "store unavailable");
            ApiError::unavailable(format!("storage unavailable: {}", error_chain(&error)))
        }
        // The write may have been applied: kube-apiserver's 504 Timeout, after which
        // clients read again.
        StoreError::Indeterminate { .. } => {
            tracing::warn!(error = %error_chain(&error), resource = R::PLURAL, name, "store did not confirm a write");
            ApiError::timeout(format!(
                "{}: the change may or may not have been made; read the object before retrying",
                error_chain(&error)
            ))
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
    /// Who writes through this registry: the manager of its writes' managedFields.
    manager: Arc<str>,
}

/// Whether a write's managedFields are still to be computed (create, update, patch) or
/// were computed by server-side apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tracking {
    Update,
    Applied,
}

impl Registry {
    /// A registry whose writes are managed by [`fields::DEFAULT_MANAGER`].
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            manager: Arc::from(fields::DEFAULT_MANAGER),
        }
    }

    /// The same registry, its writes recorded in managedFields as `manager`'s (a
    /// request's `fieldManager`, or a controller's name).
    pub fn managed_by(&self, manager: &str) -> Self {
        Self {
            store: self.store.clone(),
            manager: Arc::from(manager),
        }
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

    /// Creates an object. The caller has decoded it; this sets server-owned metadata,
    /// defaults and validates it, and stores it unless `dry_run`.
    pub async fn create<R: Resource>(
        &self,
        namespace: Option<&str>,
        object: R,
        now: Time,
        dry_run: bool,
    ) -> Result<R, ApiError> {
        self.create_tracked(namespace, object, now, dry_run, Tracking::Update)
            .await
    }

    async fn create_tracked<R: Resource>(
        &self,
        namespace: Option<&str>,
        mut object: R,
        now: Time,
        dry_run: bool,
        tracking: Tracking,
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
        if tracking == Tracking::Update {
            fields::track_update(None, &mut object, Scope::Main, &self.manager)?;
        }
        let name = object.metadata().name.clone().unwrap_or_default();
        let errors = object.validate();
        if !errors.is_empty() {
            return Err(ApiError::invalid(R::KIND, R::GROUP, &name, &errors));
        }
        pools::admit(self, None, &object).await?;
        if R::NAMESPACED {
            namespaces::admit_create::<R>(self, object.metadata().namespace.as_deref(), &name)
                .await?;
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
        desired: impl FnMut(&R) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        self.update_tracked(namespace, name, scope, dry_run, Tracking::Update, desired)
            .await
    }

    async fn update_tracked<R: Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        scope: Scope,
        dry_run: bool,
        tracking: Tracking,
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
            let applied_fields = wanted.metadata().managed_fields.clone();
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
            match tracking {
                Tracking::Update => {
                    fields::track_update(Some(&current), &mut next, scope, &self.manager)?;
                }
                Tracking::Applied => {
                    next.metadata_mut().managed_fields = applied_fields;
                    fields::keep_times_when_unchanged(&current, &mut next);
                }
            }
            let errors = next.validate();
            if !errors.is_empty() {
                return Err(ApiError::invalid(R::KIND, R::GROUP, name, &errors));
            }
            if scope == Scope::Main {
                pools::admit(self, Some(&current), &next).await?;
            }
            let encoded = Self::encode(&next)?;
            if encoded == current_kv.value {
                return Ok(current);
            }
            if dry_run {
                // Nothing is written: the object keeps the stored resourceVersion, as in
                // kube (`kubectl diff --server-side` compares it with the live object).
                next.metadata_mut().resource_version = Some(current_kv.mod_revision.to_string());
                return Ok(next);
            }
            let precondition = Precondition::ModRevision(current_kv.mod_revision);
            let finished = next.metadata().deletion_timestamp.is_some()
                && next.metadata().finalizers.is_empty()
                && !next.holds_deletion();
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
            if !object.metadata().finalizers.is_empty() || object.holds_deletion() {
                if object.metadata().deletion_timestamp.is_some() {
                    return Ok(object);
                }
                object.begin_deletion();
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

/// Runs a bootstrap write until it succeeds (the store may not answer yet), backing off
/// from 200 ms to 10 s; `what` names it in the log.
pub async fn until_written<F, Fut>(what: &str, mut write: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    let mut delay = std::time::Duration::from_millis(200);
    while let Err(error) = write().await {
        tracing::warn!(%error, what, "bootstrap write failed; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(10));
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

#[cfg(test)]
mod tests {
    use fedingress_api::FederatedIngress;
    use fedingress_store::StoreError;

    use super::store_error;

    #[test]
    fn store_outcomes_answer_like_kube() {
        let unavailable = store_error::<FederatedIngress>(
            "web",
            StoreError::Unavailable {
                operation: "read a key",
                source: "etcdserver: no leader".into(),
            },
        );
        assert_eq!(
            (
                unavailable.code.as_u16(),
                unavailable.reason,
                unavailable.retry_after
            ),
            (503, "ServiceUnavailable", Some(1))
        );
        assert!(
            unavailable.message.contains("no leader"),
            "{}",
            unavailable.message
        );
        let unknown = store_error::<FederatedIngress>(
            "web",
            StoreError::Indeterminate {
                operation: "write a key",
                source: "h2 protocol error".into(),
            },
        );
        assert_eq!((unknown.code.as_u16(), unknown.reason), (504, "Timeout"));
        assert!(
            unknown.message.contains("may or may not have been made"),
            "{}",
            unknown.message
        );
    }
}
