//! NamespaceLifecycle admission, as kube-apiserver runs it by default: an object of a
//! namespaced kind is created only in a namespace that exists and is not being deleted.
//!
//! kube's plugin exempts access reviews (ours are not stored objects, so they never get
//! here) and deletions; immortal namespaces are refused deletion in the HTTP layer
//! (`api::namespaces`), where the request's verb is known.
//!
//! Bootstrap ([`bootstrap`]) runs at every start on every replica: the namespaces kube
//! creates, and one for every namespace that holds stored objects without one.

use std::collections::BTreeSet;

use fedingress_api::event::Event;
use fedingress_api::namespace::{self, Namespace};
use fedingress_api::rbac::{Role, RoleBinding};
use fedingress_api::{FederatedIngress, Resource, Time};
use http::StatusCode;
use serde_json::json;

use super::{Filter, Registry, group_resource, target};
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

/// Creates the namespaces kube-apiserver creates (`default`, `kube-system`,
/// `kube-public`, `kube-node-lease`) and one for every namespace that holds stored
/// objects without one, so objects stored before Namespaces existed keep a namespace.
///
/// # Guarantees
/// Idempotent and safe with several replicas at once: each namespace is created only if
/// absent, and one created by another replica first counts as done. Each namespace
/// created for existing objects is logged.
pub async fn bootstrap(registry: &Registry) -> Result<(), ApiError> {
    let now = Time(chrono::Utc::now());
    for name in namespace::BOOTSTRAP {
        if ensure(registry, name, now).await? {
            tracing::info!(namespace = name, "bootstrap namespace created");
        }
    }
    let mut used = BTreeSet::new();
    used_namespaces::<FederatedIngress>(registry, &mut used).await?;
    used_namespaces::<Event>(registry, &mut used).await?;
    used_namespaces::<Role>(registry, &mut used).await?;
    used_namespaces::<RoleBinding>(registry, &mut used).await?;
    for name in used {
        if ensure(registry, &name, now).await? {
            tracing::info!(namespace = %name, "namespace created for objects stored without one");
        }
    }
    Ok(())
}

async fn used_namespaces<R: Resource>(
    registry: &Registry,
    used: &mut BTreeSet<String>,
) -> Result<(), ApiError> {
    let page = registry
        .list::<R>(None, &Filter::default(), 0, None)
        .await?;
    used.extend(
        page.items
            .iter()
            .filter_map(|o| o.metadata().namespace.clone())
            .filter(|ns| !ns.is_empty()),
    );
    Ok(())
}

/// Runs [`bootstrap`] until it succeeds (the store may not answer yet).
pub async fn bootstrap_until_done(registry: Registry) {
    super::until_written("creating the bootstrap namespaces", || bootstrap(&registry)).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fedingress_api::ObjectMeta;
    use fedingress_store::{Precondition, RedbStore, Store};

    use super::*;
    use crate::registry::prefix;

    fn registry(dir: &std::path::Path) -> Registry {
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&dir.join("db"), Default::default()).unwrap());
        Registry::new(store)
    }

    async fn stored_ingress(registry: &Registry, namespace: &str, name: &str) {
        let ingress = FederatedIngress {
            metadata: ObjectMeta::namespaced(namespace, name),
            ..FederatedIngress::default()
        };
        registry
            .store()
            .put(
                &format!("{}{name}", prefix::<FederatedIngress>(Some(namespace))),
                serde_json::to_vec(&ingress).unwrap().into(),
                Precondition::Absent,
            )
            .await
            .unwrap();
    }

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

    #[tokio::test]
    async fn bootstrap_creates_kubes_namespaces_and_those_of_stored_objects_once() {
        let dir = tempfile::tempdir().unwrap();
        let registry = registry(dir.path());
        stored_ingress(&registry, "legacy", "web").await;
        bootstrap(&registry).await.unwrap();
        bootstrap(&registry).await.unwrap();
        let names: Vec<String> = registry
            .list::<Namespace>(None, &Filter::default(), 0, None)
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(|ns| ns.metadata.name.clone())
            .collect();
        assert_eq!(
            names,
            [
                "default",
                "kube-node-lease",
                "kube-public",
                "kube-system",
                "legacy"
            ]
        );
    }
}
