//! NamespaceLifecycle admission, as kube-apiserver runs it by default: an object of a
//! namespaced kind is created only in a namespace that exists and is not being deleted.
//!
//! kube's plugin exempts access reviews (ours are not stored objects, so they never get
//! here) and deletions; immortal namespaces are refused deletion in the HTTP layer
//! (`api::namespaces`), where the request's verb is known.

use fedingress_api::namespace::Namespace;
use fedingress_api::{Resource, Time};
use http::StatusCode;
use serde_json::json;

use super::{Registry, group_resource, target};
use crate::status::ApiError;

/// Whether an object `name` of kind `R` may be created in `namespace`, given what the
/// store holds under that name (`None`: no such namespace).
///
/// # Errors
/// NotFound `namespaces "x" not found` when the namespace does not exist; Forbidden with
/// kube's message and a `NamespaceTerminating` cause when it is being deleted.
pub fn decide<R: Resource>(
    namespace: &str,
    found: Option<&Namespace>,
    name: &str,
) -> Result<(), ApiError> {
    match found {
        None => Err(ApiError::not_found(
            &group_resource::<Namespace>(),
            target::<Namespace>(namespace),
        )),
        Some(ns) if ns.is_terminating() => {
            let mut error = ApiError::forbidden(
                format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    group_resource::<R>()
                ),
                Some(target::<R>(name)),
            );
            error.causes.push(json!({
                "reason": "NamespaceTerminating",
                "message": format!("namespace {namespace} is being terminated"),
                "field": "metadata.namespace",
            }));
            Err(error)
        }
        Some(_) => Ok(()),
    }
}

/// Reads `namespace` from the store and applies [`decide`] (a live read: a namespace
/// created or deleted a moment ago counts at once).
pub async fn admit_create<R: Resource>(
    registry: &Registry,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    // Validation has already refused a namespaced object without a namespace.
    let Some(namespace) = namespace.filter(|ns| !ns.is_empty()) else {
        return Ok(());
    };
    let found = match registry.get::<Namespace>(None, namespace).await {
        Ok(ns) => Some(ns),
        Err(e) if e.code == StatusCode::NOT_FOUND => None,
        Err(e) => return Err(e),
    };
    let result = decide::<R>(namespace, found.as_ref(), name);
    if let Err(e) = &result {
        tracing::debug!(
            kind = R::KIND,
            namespace,
            name,
            reason = e.reason,
            "create refused by namespace lifecycle"
        );
    }
    result
}

/// Creates `name` if it does not exist; another replica creating it first is fine.
/// Returns whether this call created it.
pub async fn ensure(registry: &Registry, name: &str, now: Time) -> Result<bool, ApiError> {
    match registry
        .create::<Namespace>(None, Namespace::named(name), now, false)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.code == StatusCode::CONFLICT => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::FederatedIngress;

    fn active(name: &str) -> Namespace {
        let mut ns = Namespace::named(name);
        ns.apply_defaults();
        ns
    }

    #[test]
    fn a_missing_namespace_is_not_found() {
        let e = decide::<FederatedIngress>("x", None, "web").unwrap_err();
        assert_eq!(e.code, StatusCode::NOT_FOUND);
        assert_eq!(e.message, "namespaces \"x\" not found");
    }

    #[test]
    fn an_active_namespace_admits() {
        assert!(decide::<FederatedIngress>("shop", Some(&active("shop")), "web").is_ok());
    }

    #[test]
    fn a_terminating_namespace_forbids_with_kubes_cause() {
        let mut ns = active("shop");
        ns.metadata.deletion_timestamp = Some(Time(chrono::Utc::now()));
        ns.begin_deletion();
        let e = decide::<FederatedIngress>("shop", Some(&ns), "web").unwrap_err();
        assert_eq!(e.code, StatusCode::FORBIDDEN);
        assert_eq!(
            e.message,
            "federatedingresses.fedingress.io \"web\" is forbidden: unable to create new content in namespace shop because it is being terminated"
        );
        assert_eq!(e.causes[0]["reason"], "NamespaceTerminating");
        assert_eq!(
            e.to_status()["details"]["causes"][0]["field"],
            "metadata.namespace"
        );
    }
}
