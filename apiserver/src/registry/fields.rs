//! `metadata.managedFields`: the one place where the registry's writes meet
//! `fedingress-fieldmanager` (server-side apply's field ownership).
//!
//! Every write records who changed which fields: a create, update or patch as an
//! `Update` entry of its manager, a server-side apply as an `Apply` entry, each for the
//! object itself or its `status` subresource. The merge schema of a kind is its OpenAPI
//! schema (the list types and map keys it declares), read once.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use fedingress_api::Resource;
use fedingress_fieldmanager::{self as fieldmanager, ApplyError, Managed, Schema};
use serde_json::Value;

use super::Scope;
use crate::status::ApiError;

/// The manager of writes whose request names none and carries no User-Agent.
pub const DEFAULT_MANAGER: &str = "federation-apiserver";

/// The longest `fieldManager` kube accepts.
const MAX_MANAGER_LEN: usize = 128;

/// The merge schema of kind `R`, read from its OpenAPI schema on first use.
pub fn schema<R: Resource>() -> &'static Schema {
    static SCHEMAS: OnceLock<Mutex<HashMap<&'static str, &'static Schema>>> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Default::default);
    let mut schemas = schemas.lock().unwrap_or_else(|e| e.into_inner());
    schemas.entry(R::KIND).or_insert_with(|| {
        let schema = Schema::from_openapi(&crate::openapi::kind_schema::<R>()).unwrap_or_else(|e| {
            // Our own schemas are tested to read (tests below); should one not, fields are
            // still tracked, with lists atomic.
            tracing::error!(kind = R::KIND, error = %e, "the kind's OpenAPI schema does not read as a merge schema");
            Schema::Untyped
        });
        Box::leak(Box::new(schema))
    })
}

/// Checks a `fieldManager` query parameter (kube's rules).
pub fn validate_manager(manager: &str) -> Result<(), ApiError> {
    if manager.chars().count() > MAX_MANAGER_LEN {
        return Err(ApiError::bad_request(format!(
            "fieldManager: Invalid value: {manager:?}: must be no more than {MAX_MANAGER_LEN} characters"
        )));
    }
    if manager.chars().any(|c| c.is_control()) {
        return Err(ApiError::bad_request(format!(
            "fieldManager: Invalid value: {manager:?}: must only contain printable characters"
        )));
    }
    Ok(())
}

/// The manager of a non-apply write without `fieldManager`: the User-Agent up to its
/// first `/` (kube's prefixFromUserAgent), e.g. `kubectl` or `curl`.
pub fn manager_from_user_agent(user_agent: Option<&str>) -> String {
    let prefix = user_agent
        .and_then(|agent| agent.split('/').next())
        .map(str::trim)
        .filter(|prefix| !prefix.is_empty())
        .unwrap_or(DEFAULT_MANAGER);
    prefix.chars().take(MAX_MANAGER_LEN).collect()
}

fn now() -> String {
    chrono::Utc::now()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        .to_string()
}

fn subresource(scope: Scope) -> Option<&'static str> {
    match scope {
        Scope::Main => None,
        Scope::Status => Some("status"),
    }
}

fn to_json<R: Resource>(object: &R) -> Result<Value, ApiError> {
    serde_json::to_value(object).map_err(|e| ApiError::internal(format!("encoding object: {e}")))
}

fn store_managed<R: Resource>(object: &mut R, managed: &Managed) -> Result<(), ApiError> {
    object.metadata_mut().managed_fields = serde_json::from_value(managed.encode())
        .map_err(|e| ApiError::internal(format!("encoding managedFields: {e}")))?;
    Ok(())
}

/// Records a create, update or patch by `manager` in `next`'s managedFields (`live` is
/// `None` on create). Managed fields the request carries replace the stored ones (`[{}]`
/// clears them), except on a subresource, as in kube.
pub fn track_update<R: Resource>(
    live: Option<&R>,
    next: &mut R,
    scope: Scope,
    manager: &str,
) -> Result<(), ApiError> {
    let live = live.map(to_json).transpose()?;
    let new = to_json(next)?;
    let managed = Managed::for_write(
        new.pointer("/metadata/managedFields"),
        live.as_ref()
            .and_then(|l| l.pointer("/metadata/managedFields")),
        scope == Scope::Status,
    );
    let now = now();
    let api_version = R::api_version();
    let request = fieldmanager::Request {
        manager,
        api_version: &api_version,
        subresource: subresource(scope),
        now: &now,
    };
    let managed = fieldmanager::update(schema::<R>(), live.as_ref(), &new, managed, &request);
    store_managed(next, &managed)
}

/// What a server-side apply asks for.
pub struct ApplyRequest<'a> {
    pub manager: &'a str,
    pub scope: Scope,
    pub force: bool,
}

/// Server-side apply of `config` onto `live` (`None`: the object is created): the merged
/// object with its managedFields, ready to decode. Conflicts with other managers are a
/// 409 naming each field and manager, unless forced.
pub fn apply<R: Resource>(
    live: Option<&R>,
    config: &Value,
    request: &ApplyRequest,
) -> Result<Value, ApiError> {
    let live_json = live.map(to_json).transpose()?;
    let managed = Managed::for_write(
        None,
        live_json
            .as_ref()
            .and_then(|l| l.pointer("/metadata/managedFields")),
        true,
    );
    let now = now();
    let api_version = R::api_version();
    let fm_request = fieldmanager::Request {
        manager: request.manager,
        api_version: &api_version,
        subresource: subresource(request.scope),
        now: &now,
    };
    let applied = fieldmanager::apply(
        schema::<R>(),
        live_json.as_ref(),
        config,
        managed,
        &fm_request,
        request.force,
    )
    .map_err(apply_error)?;
    let mut object = applied.object;
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("managedFields".into(), applied.managed.encode());
    }
    Ok(object)
}

/// After an apply: when the result, defaults filled in, is the stored object and only the
/// managers' times moved, keeps the stored managedFields, so nothing is written. (An
/// applied configuration that leaves out a default inside an atomic list "changes" the
/// list, then defaulting restores it; kube-apiserver writes a new time in that case,
/// kubernetes#121404, and a GitOps resync would rewrite every object.)
pub fn keep_times_when_unchanged<R: Resource>(live: &R, next: &mut R) {
    fn without_times(object: &impl Resource) -> Vec<fedingress_api::ManagedFieldsEntry> {
        let mut entries = object.metadata().managed_fields.clone();
        entries.iter_mut().for_each(|entry| entry.time = None);
        entries.sort_by(|a, b| {
            let key = |e: &fedingress_api::ManagedFieldsEntry| {
                (
                    e.manager.clone(),
                    e.operation.clone(),
                    e.subresource.clone(),
                    e.api_version.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        entries
    }
    if without_times(live) != without_times(next) {
        return;
    }
    let stored = live.metadata().managed_fields.clone();
    let mut unchanged = next.clone();
    unchanged.metadata_mut().managed_fields = stored.clone();
    let same = |a: &R, b: &R| {
        let mut a = serde_json::to_value(a).ok();
        let mut b = serde_json::to_value(b).ok();
        for value in [&mut a, &mut b].into_iter().flatten() {
            if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
        }
        a == b
    };
    if same(live, &unchanged) {
        next.metadata_mut().managed_fields = stored;
    }
}

fn apply_error(error: ApplyError) -> ApiError {
    match error {
        ApplyError::Conflicts(conflicts) => {
            let mut error = ApiError::apply_conflict(conflicts.message());
            if let Value::Array(causes) = conflicts.status_causes() {
                error.causes = causes;
            }
            error
        }
        ApplyError::Invalid(message) => ApiError::bad_request(message),
    }
}

/// Removes from an applied configuration the fields `schema` does not declare (after
/// the client was told about them per `fieldValidation`), so no manager owns a field
/// the object cannot hold.
pub fn prune_unknown(schema: &Schema, value: &mut Value) {
    match (schema, value) {
        (Schema::Struct { fields, .. }, Value::Object(map)) => {
            map.retain(|key, _| fields.contains_key(key));
            for (key, child) in map.iter_mut() {
                if let Some(field) = fields.get(key) {
                    prune_unknown(field, child);
                }
            }
        }
        (Schema::Map { values, .. }, Value::Object(map)) => {
            map.values_mut()
                .for_each(|child| prune_unknown(values, child));
        }
        (Schema::List { items, .. }, Value::Array(list)) => {
            list.iter_mut()
                .for_each(|child| prune_unknown(items, child));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::rbac::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use fedingress_api::{Cluster, FederatedIngress};

    fn reads<R: Resource>() {
        let openapi = crate::openapi::kind_schema::<R>();
        Schema::from_openapi(&openapi).unwrap_or_else(|e| panic!("{}: {e}", R::KIND));
    }

    #[test]
    fn every_kind_has_a_merge_schema() {
        reads::<FederatedIngress>();
        reads::<Cluster>();
        reads::<fedingress_api::event::Event>();
        reads::<Role>();
        reads::<ClusterRole>();
        reads::<RoleBinding>();
        reads::<ClusterRoleBinding>();
    }

    #[test]
    fn managers() {
        assert_eq!(
            manager_from_user_agent(Some("kubectl/v1.33.0 (linux/amd64)")),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent(None), DEFAULT_MANAGER);
        assert!(validate_manager(&"x".repeat(129)).is_err());
        assert!(validate_manager("bad\nname").is_err());
        assert!(validate_manager("kubectl").is_ok());
    }
}
