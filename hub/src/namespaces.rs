//! The namespace controller (kube-controller-manager's, for the kinds we store): a
//! Namespace being deleted has its content deleted (FederatedIngresses, so agents stop
//! serving them; IngressClaims, Events, Roles, RoleBindings), kube's deletion conditions
//! set while it waits, and then `kubernetes` removed from `spec.finalizers`, which
//! removes the namespace.
//!
//! observe ([`observe`]: the namespace's content) → decide ([`decide`], pure) → apply
//! (deletes, status, finalize). Only the leader runs it, through its fenced store; a
//! replica that stops leading stops at once and the next leader starts over from what is
//! stored (every step is idempotent).
//!
//! The namespaces created at start are the registry's
//! ([`fedingress_apiserver::registry::namespaces::bootstrap`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::event::Event;
use fedingress_api::meta::{ConditionStatus, set_condition};
use fedingress_api::namespace::{self, FINALIZER_KUBERNETES, Namespace, NamespaceStatus};
use fedingress_api::rbac::{Role as RbacRole, RoleBinding};
use fedingress_api::{Condition, FederatedIngress, IngressClaim, Resource, Time};
use fedingress_store::{Revision, Store};
use futures_util::StreamExt;
use http::StatusCode;
use tokio::sync::watch;
use tracing::Instrument;

use super::replication::Role;
use fedingress_apiserver::registry::{
    DeletePreconditions, Filter, Registry, Scope, group_resource, prefix,
};
use fedingress_apiserver::status::ApiError;

/// How often a namespace being deleted is looked at again while its content remains.
const RETRY: Duration = Duration::from_millis(500);
/// How long an idle controller waits for a namespace change before it lists again.
const IDLE: Duration = Duration::from_secs(30);

/// One stored object in a namespace being deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// `group_resource`, e.g. `federatedingresses.fedingress.io`.
    pub resource: String,
    pub name: String,
    /// Whether it already carries a deletionTimestamp.
    pub deleting: bool,
    pub finalizers: Vec<String>,
}

/// What one pass does to a namespace being deleted.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Objects to delete (`resource`, `name`): those not being deleted yet.
    pub delete: Vec<(String, String)>,
    /// The status to write, when it differs from the stored one.
    pub status: Option<NamespaceStatus>,
    /// Whether the content is gone: `kubernetes` leaves `spec.finalizers`.
    pub finalize: bool,
}

/// Decides one pass over a namespace being deleted, from its content as observed.
///
/// # Guarantees
/// Everything not being deleted yet is deleted; the conditions are kube's five
/// (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining` and the three failure
/// conditions, `False` here), messages worded as kube words them; transition times move
/// only when a status does; `finalize` only when nothing is left and the `kubernetes`
/// finalizer is still there.
pub fn decide(namespace: &Namespace, items: &[Item], now: Time) -> Step {
    let delete = items
        .iter()
        .filter(|i| !i.deleting)
        .map(|i| (i.resource.clone(), i.name.clone()))
        .collect();
    // Objects without finalizers go with their delete; those with some remain.
    let remaining: Vec<&Item> = items.iter().filter(|i| !i.finalizers.is_empty()).collect();
    let mut by_resource: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_finalizer: BTreeMap<&str, usize> = BTreeMap::new();
    for item in &remaining {
        *by_resource.entry(&item.resource).or_default() += 1;
        for finalizer in &item.finalizers {
            *by_finalizer.entry(finalizer).or_default() += 1;
        }
    }
    let condition = |type_: &str, status, reason: &str, message: String| {
        Condition::new(type_, status, reason, message)
    };
    let [discovery, parsing, content, remaining_type, finalizers_type] = namespace::CONDITION_TYPES;
    let mut wanted = vec![
        condition(
            discovery,
            ConditionStatus::False,
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        condition(
            parsing,
            ConditionStatus::False,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        condition(
            content,
            ConditionStatus::False,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        ),
    ];
    wanted.push(if by_resource.is_empty() {
        condition(
            remaining_type,
            ConditionStatus::False,
            "ContentRemoved",
            "All content successfully removed".into(),
        )
    } else {
        let list: Vec<String> = by_resource
            .iter()
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        condition(
            remaining_type,
            ConditionStatus::True,
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", list.join(", ")),
        )
    });
    wanted.push(if by_finalizer.is_empty() {
        condition(
            finalizers_type,
            ConditionStatus::False,
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        )
    } else {
        let list: Vec<String> = by_finalizer
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        condition(
            finalizers_type,
            ConditionStatus::True,
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                list.join(", ")
            ),
        )
    });
    let stored = namespace.status.clone().unwrap_or_default();
    let mut status = stored.clone();
    status.phase = Some(namespace::NamespacePhase::Terminating);
    for condition in wanted {
        set_condition(&mut status.conditions, condition, now);
    }
    let finalize = items.is_empty()
        && namespace
            .spec
            .finalizers
            .iter()
            .any(|f| f == FINALIZER_KUBERNETES);
    Step {
        delete,
        status: (status != stored).then_some(status),
        finalize,
    }
}

/// The namespace controller; see the module docs.
pub struct NamespaceController {
    /// Reads, on the plain store.
    registry: Registry,
    role: watch::Receiver<Role>,
}

impl NamespaceController {
    pub fn new(registry: Registry, role: watch::Receiver<Role>) -> Self {
        Self { registry, role }
    }

    /// Runs until the process ends: while this replica leads, every namespace being
    /// deleted is driven to its end.
    pub async fn run(mut self) {
        loop {
            let role = self.role.borrow_and_update().clone();
            let Role::Leader(store) = role else {
                if self.role.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let writer = Registry::new(store.clone());
            let (pending, revision) = match self.pass(&writer).await {
                Ok(outcome) => outcome,
                Err(error) => {
                    tracing::warn!(%error, "namespace controller pass failed; retrying");
                    (true, 0)
                }
            };
            let wait = if pending { RETRY } else { IDLE };
            tokio::select! {
                _ = self.role.changed() => {}
                () = namespace_change(self.registry.store().clone(), revision, wait) => {}
            }
        }
    }

    /// One pass over every namespace being deleted. Returns whether any remains, and
    /// the revision the namespaces were listed at.
    async fn pass(&self, writer: &Registry) -> Result<(bool, Revision), ApiError> {
        let page = self
            .registry
            .list::<Namespace>(None, &Filter::default(), 0, None)
            .await?;
        let namespaces = page.items;
        let mut pending = false;
        for ns in namespaces
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_some())
        {
            pending = true;
            let name = ns.metadata.name.clone().unwrap_or_default();
            let span = tracing::info_span!("namespace", namespace = %name);
            if let Err(error) = self.reconcile(writer, ns).instrument(span).await {
                tracing::warn!(namespace = %name, %error, "deleting the namespace's content failed; retrying");
            }
        }
        Ok((pending, page.resource_version))
    }

    /// observe → decide → apply for one namespace being deleted.
    async fn reconcile(&self, writer: &Registry, ns: &Namespace) -> Result<(), ApiError> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let items = observe(&self.registry, &name).await?;
        let now = Time(chrono::Utc::now());
        let step = decide(ns, &items, now);
        for (resource, object) in &step.delete {
            delete(writer, &name, resource, object, now).await?;
            tracing::info!(namespace = %name, resource, name = %object, "namespace content deleted");
        }
        if let Some(status) = step.status {
            let written = writer
                .update::<Namespace>(None, &name, Scope::Status, false, |current| {
                    let mut next = current.clone();
                    next.status = Some(status.clone());
                    next.metadata.resource_version = None;
                    Ok(next)
                })
                .await;
            ignore_gone(written)?;
        }
        if step.finalize {
            let finalized = writer
                .update::<Namespace>(None, &name, Scope::Main, false, |current| {
                    let mut next = current.clone();
                    next.spec.finalizers.retain(|f| f != FINALIZER_KUBERNETES);
                    next.metadata.resource_version = None;
                    Ok(next)
                })
                .await;
            if ignore_gone(finalized)?.is_some() {
                tracing::info!(namespace = %name, "namespace content gone: finalized");
            }
        }
        Ok(())
    }
}

/// Waits until a namespace changes after `revision`, at most `wait`.
async fn namespace_change(store: Arc<dyn Store>, revision: Revision, wait: Duration) {
    let sleep = tokio::time::sleep(wait);
    if revision == 0 {
        return sleep.await;
    }
    match store.watch(&prefix::<Namespace>(None), revision).await {
        Ok(mut events) => {
            tokio::select! {
                _ = events.next() => {}
                () = sleep => {}
            }
        }
        Err(_) => sleep.await,
    }
}

/// The stored objects in `namespace`, of every namespaced kind we store.
pub async fn observe(registry: &Registry, namespace: &str) -> Result<Vec<Item>, ApiError> {
    let mut items = Vec::new();
    collect::<FederatedIngress>(registry, namespace, &mut items).await?;
    collect::<IngressClaim>(registry, namespace, &mut items).await?;
    collect::<Event>(registry, namespace, &mut items).await?;
    collect::<RbacRole>(registry, namespace, &mut items).await?;
    collect::<RoleBinding>(registry, namespace, &mut items).await?;
    Ok(items)
}

async fn collect<R: Resource>(
    registry: &Registry,
    namespace: &str,
    items: &mut Vec<Item>,
) -> Result<(), ApiError> {
    let page = registry
        .list::<R>(Some(namespace), &Filter::default(), 0, None)
        .await?;
    items.extend(page.items.iter().map(|object| {
        let meta = object.metadata();
        Item {
            resource: group_resource::<R>(),
            name: meta.name.clone().unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone(),
        }
    }));
    Ok(())
}

async fn delete(
    writer: &Registry,
    namespace: &str,
    resource: &str,
    name: &str,
    now: Time,
) -> Result<(), ApiError> {
    async fn one<R: Resource>(
        writer: &Registry,
        namespace: &str,
        name: &str,
        now: Time,
    ) -> Result<(), ApiError> {
        let deleted = writer
            .delete::<R>(
                Some(namespace),
                name,
                &DeletePreconditions::default(),
                now,
                false,
            )
            .await;
        ignore_gone(deleted).map(|_| ())
    }
    match resource {
        r if r == group_resource::<FederatedIngress>() => {
            one::<FederatedIngress>(writer, namespace, name, now).await
        }
        r if r == group_resource::<IngressClaim>() => {
            one::<IngressClaim>(writer, namespace, name, now).await
        }
        r if r == group_resource::<Event>() => one::<Event>(writer, namespace, name, now).await,
        r if r == group_resource::<RbacRole>() => {
            one::<RbacRole>(writer, namespace, name, now).await
        }
        r if r == group_resource::<RoleBinding>() => {
            one::<RoleBinding>(writer, namespace, name, now).await
        }
        other => Err(ApiError::internal(format!(
            "the namespace controller does not delete {other}"
        ))),
    }
}

/// An object that is already gone is what the controller wanted.
fn ignore_gone<T>(result: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code == StatusCode::NOT_FOUND => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminating() -> Namespace {
        let mut ns = Namespace::named("shop");
        ns.apply_defaults();
        ns.metadata.deletion_timestamp = Some(Time(chrono::Utc::now()));
        ns.begin_deletion();
        ns
    }

    fn item(resource: &str, name: &str, deleting: bool, finalizers: &[&str]) -> Item {
        Item {
            resource: resource.into(),
            name: name.into(),
            deleting,
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
        }
    }

    fn condition<'a>(status: &'a NamespaceStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn content_is_deleted_and_reported_remaining_while_finalizers_hold_it() {
        let ns = terminating();
        let items = [
            item(
                "federatedingresses.fedingress.io",
                "web",
                false,
                &["example.com/hold"],
            ),
            item("events", "web.1", false, &[]),
            item(
                "roles.rbac.authorization.k8s.io",
                "r",
                true,
                &["example.com/hold"],
            ),
        ];
        let step = decide(&ns, &items, Time(chrono::Utc::now()));
        assert_eq!(
            step.delete,
            [
                (
                    "federatedingresses.fedingress.io".to_string(),
                    "web".to_string()
                ),
                ("events".to_string(), "web.1".to_string()),
            ]
        );
        assert!(!step.finalize);
        let status = step.status.unwrap();
        assert_eq!(status.conditions.len(), 5);
        let remaining = condition(&status, "NamespaceContentRemaining");
        assert_eq!(remaining.status, ConditionStatus::True);
        assert_eq!(remaining.reason, "SomeResourcesRemain");
        assert_eq!(
            remaining.message,
            "Some resources are remaining: federatedingresses.fedingress.io has 1 resource instances, roles.rbac.authorization.k8s.io has 1 resource instances"
        );
        let finalizers = condition(&status, "NamespaceFinalizersRemaining");
        assert_eq!(
            finalizers.message,
            "Some content in the namespace has finalizers remaining: example.com/hold in 2 resource instances"
        );
    }

    #[test]
    fn an_empty_namespace_is_finalized_once() {
        let ns = terminating();
        let step = decide(&ns, &[], Time(chrono::Utc::now()));
        assert!(step.delete.is_empty());
        assert!(step.finalize);
        let status = step.status.unwrap();
        assert_eq!(
            condition(&status, "NamespaceContentRemaining").reason,
            "ContentRemoved"
        );
        let mut finalized = ns.clone();
        finalized.status = Some(status);
        finalized.spec.finalizers.clear();
        let again = decide(&finalized, &[], Time(chrono::Utc::now()));
        assert!(!again.finalize);
        assert!(again.status.is_none(), "an unchanged status is not written");
    }

    /// A registry on a fresh redb store, and an object written straight to the store
    /// (as data stored before Namespaces existed, or content of a namespace).
    mod stored {
        use super::*;
        use fedingress_api::ObjectMeta;
        use fedingress_store::{Precondition, RedbStore};

        pub fn registry(dir: &std::path::Path) -> Registry {
            let store: Arc<dyn Store> =
                Arc::new(RedbStore::open(&dir.join("db"), Default::default()).unwrap());
            Registry::new(store)
        }

        pub async fn ingress(registry: &Registry, namespace: &str, name: &str) {
            let ingress = FederatedIngress {
                metadata: ObjectMeta::namespaced(namespace, name),
                ..FederatedIngress::default()
            };
            put(registry, namespace, name, &ingress).await;
        }

        pub async fn claim(registry: &Registry, namespace: &str, name: &str) {
            let claim = IngressClaim {
                metadata: ObjectMeta::namespaced(namespace, name),
                ..IngressClaim::default()
            };
            put(registry, namespace, name, &claim).await;
        }

        async fn put<R: Resource>(registry: &Registry, namespace: &str, name: &str, object: &R) {
            registry
                .store()
                .put(
                    &format!("{}{name}", prefix::<R>(Some(namespace))),
                    serde_json::to_vec(object).unwrap().into(),
                    Precondition::Absent,
                )
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn a_deleted_namespace_loses_its_content_then_goes() {
        let dir = tempfile::tempdir().unwrap();
        let registry = stored::registry(dir.path());
        let now = Time(chrono::Utc::now());
        fedingress_apiserver::registry::namespaces::ensure(&registry, "shop", now)
            .await
            .unwrap();
        stored::ingress(&registry, "shop", "web").await;
        stored::claim(&registry, "shop", "web").await;
        assert_eq!(observe(&registry, "shop").await.unwrap().len(), 2);
        let deleting = registry
            .delete::<Namespace>(None, "shop", &DeletePreconditions::default(), now, false)
            .await
            .unwrap();
        assert!(deleting.is_terminating());
        let (_role, receiver) = watch::channel(Role::Leader(registry.store().clone()));
        let controller = NamespaceController::new(registry.clone(), receiver);
        let (pending, _) = controller.pass(&registry).await.unwrap();
        assert!(pending);
        assert!(observe(&registry, "shop").await.unwrap().is_empty());
        let status = registry
            .get::<Namespace>(None, "shop")
            .await
            .unwrap()
            .status
            .unwrap();
        assert_eq!(status.conditions.len(), 5, "{status:?}");
        // The next pass finds nothing left: finalized, and the namespace is gone.
        controller.pass(&registry).await.unwrap();
        let gone = registry.get::<Namespace>(None, "shop").await.unwrap_err();
        assert_eq!(gone.code, StatusCode::NOT_FOUND);
    }

    #[test]
    fn objects_already_being_deleted_are_not_deleted_again() {
        let ns = terminating();
        let items = [item(
            "federatedingresses.fedingress.io",
            "web",
            true,
            &["x.io/y"],
        )];
        let step = decide(&ns, &items, Time(chrono::Utc::now()));
        assert!(step.delete.is_empty());
        assert!(!step.finalize);
    }
}
