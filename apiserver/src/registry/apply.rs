//! Server-side apply on the registry: the applied configuration merged into the stored
//! object (or creating it) with field ownership, then the same normalisation,
//! validation and optimistic concurrency as any update.

use fedingress_api::{Resource, Time};
use serde_json::Value;

use super::fields::{self, ApplyRequest};
use super::{Registry, Scope, Tracking, group_resource, target};
use crate::codec::{self, FieldValidation};
use crate::status::ApiError;

/// A server-side apply request, checked by the HTTP layer (kind, name, no managedFields).
pub struct Apply<'a> {
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub scope: Scope,
    /// The applied configuration as sent (YAML or JSON, as a JSON value).
    pub config: Value,
    pub force: bool,
    pub validation: FieldValidation,
    pub dry_run: bool,
    pub now: Time,
}

/// What an apply did.
pub struct Applied<R> {
    pub object: R,
    /// Unknown fields, when `fieldValidation=Warn`.
    pub warnings: Vec<String>,
    pub created: bool,
}

impl Registry {
    /// Applies `request.config` as this registry's manager. The object is created when
    /// missing (not through a subresource). Fields other managers own are a 409 unless
    /// `force`; an invalid result gets the same field-path errors as create and update.
    pub async fn apply<R: Resource>(&self, request: Apply<'_>) -> Result<Applied<R>, ApiError> {
        self.apply_checked(request, |_: Option<&R>, _: &R| Ok(()))
            .await
    }

    /// [`Registry::apply`], with `check` run on the object the apply makes (over the
    /// current one, `None` when it creates) before it is stored: what a verb checks on
    /// every write (RBAC escalation) is checked on applies too.
    pub async fn apply_checked<R: Resource>(
        &self,
        request: Apply<'_>,
        check: impl Fn(Option<&R>, &R) -> Result<(), ApiError>,
    ) -> Result<Applied<R>, ApiError> {
        let mut config = request.config;
        // Unknown fields are refused or reported per fieldValidation, then dropped:
        // nobody owns a field the object cannot hold.
        let (_, warnings) = codec::decode::<R>(config.clone(), request.validation)?;
        fields::prune_unknown(fields::schema::<R>(), &mut config);
        let precondition = config
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            .map(String::from);
        let apply = ApplyRequest {
            manager: &self.manager,
            scope: request.scope,
            force: request.force,
        };
        let decode = |merged: Value| -> Result<R, ApiError> {
            let (mut object, _) = codec::decode::<R>(merged, FieldValidation::Ignore)?;
            object.metadata_mut().resource_version = precondition.clone();
            Ok(object)
        };
        // One read per apply: the update finds the object or says it is missing. Create
        // and update race with other writers: a create that finds the object applies to
        // it again.
        for _ in 0..2 {
            match self
                .update_tracked(
                    request.namespace,
                    request.name,
                    request.scope,
                    request.dry_run,
                    Tracking::Applied,
                    |current: &R| {
                        let object = decode(fields::apply(Some(current), &config, &apply)?)?;
                        check(Some(current), &object)?;
                        Ok(object)
                    },
                )
                .await
            {
                Ok(object) => {
                    return Ok(Applied {
                        object,
                        warnings,
                        created: false,
                    });
                }
                Err(e) if e.code == http::StatusCode::NOT_FOUND => {}
                Err(e) => return Err(e),
            }
            // Missing: created, as kube does, but never through a subresource nor for a
            // configuration that names a resourceVersion.
            if request.scope == Scope::Status || precondition.is_some() {
                return Err(ApiError::not_found(
                    &group_resource::<R>(),
                    target::<R>(request.name),
                ));
            }
            let mut object = decode(fields::apply::<R>(None, &config, &apply)?)?;
            let meta = object.metadata_mut();
            meta.name = Some(request.name.to_string());
            meta.namespace = request.namespace.map(String::from);
            check(None, &object)?;
            match self
                .create_tracked(
                    request.namespace,
                    object,
                    request.now,
                    request.dry_run,
                    Tracking::Applied,
                )
                .await
            {
                Ok(object) => {
                    return Ok(Applied {
                        object,
                        warnings,
                        created: true,
                    });
                }
                Err(e) if e.reason == "AlreadyExists" => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::conflict(
            &group_resource::<R>(),
            target::<R>(request.name),
            "the object was created and deleted while applying; please try again",
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fedingress_api::namespace::Namespace;
    use fedingress_api::{FederatedIngress, Resource, Time};
    use serde_json::json;

    use super::*;

    async fn registry(dir: &tempfile::TempDir) -> Registry {
        let store = fedingress_store::RedbStore::open(
            &dir.path().join("store.redb"),
            fedingress_store::RedbOptions::default(),
        )
        .unwrap();
        let registry = Registry::new(Arc::new(store));
        registry
            .create(None, Namespace::named("default"), now(), false)
            .await
            .unwrap();
        registry
    }

    fn now() -> Time {
        Time::new(chrono::Utc::now())
    }

    fn apply(config: &serde_json::Value) -> Apply<'_> {
        Apply {
            namespace: Some("default"),
            name: "web",
            scope: Scope::Main,
            config: config.clone(),
            force: false,
            validation: FieldValidation::Strict,
            dry_run: false,
            now: now(),
        }
    }

    /// A GitOps resync re-applies configurations that leave out server defaults (an HTTP
    /// rule's port, inside the atomic `rules`): nothing may be written.
    #[tokio::test]
    async fn an_unchanged_apply_leaving_out_defaults_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry(&dir).await.managed_by("flux");
        let config = json!({
            "apiVersion": FederatedIngress::api_version(),
            "kind": "FederatedIngress",
            "metadata": {"name": "web"},
            "spec": {
                "rules": [{"protocol": "HTTP", "host": "web.example.com",
                           "paths": [{"path": "/", "backend": {"service": "web", "port": 8080}}]}],
                "traffic": {"dnsName": "web.example.com"},
            },
        });
        let first: Applied<FederatedIngress> = registry.apply(apply(&config)).await.unwrap();
        assert!(first.created);
        assert_eq!(first.object.spec.rules[0].port, Some(80), "defaulted");
        // managedFields times are whole seconds: let the clock move past the first's.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let again: Applied<FederatedIngress> = registry.apply(apply(&config)).await.unwrap();
        assert_eq!(
            again.object.metadata().resource_version,
            first.object.metadata().resource_version,
            "an unchanged apply is not written"
        );
        // A real change is written, and the manager's entry follows it.
        let mut changed = config.clone();
        changed["spec"]["traffic"]["ttl"] = json!(60);
        let third: Applied<FederatedIngress> = registry.apply(apply(&changed)).await.unwrap();
        assert_ne!(
            third.object.metadata().resource_version,
            first.object.metadata().resource_version
        );
        let entries = &third.object.metadata().managed_fields;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].manager.as_deref(), Some("flux"));
        assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
    }
}
