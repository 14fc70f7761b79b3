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
        // Create and update race with other writers: a create that finds the object
        // applies to it, an update that finds it gone creates it.
        for _ in 0..2 {
            let exists = match self.get::<R>(request.namespace, request.name).await {
                Ok(_) => true,
                Err(e) if e.code == http::StatusCode::NOT_FOUND => false,
                Err(e) => return Err(e),
            };
            if !exists {
                // As kube: a subresource is never created, nor an object whose
                // configuration names a resourceVersion.
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
            match self
                .update_tracked(
                    request.namespace,
                    request.name,
                    request.scope,
                    request.dry_run,
                    Tracking::Applied,
                    |current: &R| decode(fields::apply(Some(current), &config, &apply)?),
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
                Err(e) if e.code == http::StatusCode::NOT_FOUND => continue,
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
