//! The RBAC authorizer: an in-memory [`Policy`] of every Role, ClusterRole and binding,
//! kept current by store watches (no store read per request), and the bootstrap roles
//! and bindings written at start.
//!
//! # Guarantees
//! - Requests are evaluated against the last policy seen; a watch that fails is
//!   relisted while the previous policy keeps answering.
//! - Before the first complete list of all four kinds, [`Authorizer::authorize`]
//!   answers [`Decision::NotReady`] (the API then answers 503 with Retry-After): never
//!   an allow from a half-loaded policy, never a 403 that is not meant.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use fedingress_api::rbac::{
    self, Attributes, ClusterRole, ClusterRoleBinding, Grant, Policy, PolicyRule, Role, RoleBinding,
};
use fedingress_api::{Resource, Time};
use fedingress_store::{EventKind, Store, StoreError};
use futures_util::StreamExt;
use http::StatusCode;

use crate::registry::{self, Registry, Scope};
use crate::status::ApiError;

/// The answer for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; the binding that allowed it.
    Allow(String),
    Deny,
    /// The policy has not been loaded yet.
    NotReady,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    not_ready: AtomicU64,
    relists: AtomicU64,
}

/// Evaluates requests against the cached RBAC objects.
#[derive(Debug)]
pub struct Authorizer {
    policy: ArcSwap<Policy>,
    /// Kinds listed at least once (bit per kind); synced when all four are.
    listed: AtomicU64,
    synced: AtomicBool,
    counters: Counters,
}

const ALL_KINDS: u64 = 0b1111;

impl Default for Authorizer {
    fn default() -> Self {
        Self {
            policy: ArcSwap::from_pointee(Policy::default()),
            listed: AtomicU64::new(0),
            synced: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }
}

impl Authorizer {
    /// An authorizer answering from `policy`, already synced (tests).
    pub fn with_policy(policy: Policy) -> Self {
        let authorizer = Self::default();
        authorizer.policy.store(Arc::new(policy));
        authorizer.listed.store(ALL_KINDS, Ordering::Relaxed);
        authorizer.synced.store(true, Ordering::Release);
        authorizer
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn authorize(&self, attrs: &Attributes) -> Decision {
        if !self.is_synced() {
            self.counters.not_ready.fetch_add(1, Ordering::Relaxed);
            return Decision::NotReady;
        }
        match self.policy.load().authorize(attrs) {
            Some(allowed) => {
                self.counters.allowed.fetch_add(1, Ordering::Relaxed);
                Decision::Allow(allowed.reason)
            }
            None => {
                self.counters.denied.fetch_add(1, Ordering::Relaxed);
                Decision::Deny
            }
        }
    }

    /// The rules `user` holds in `namespace` ("" = cluster-wide only).
    pub fn rules_for(&self, user: &str, groups: &[String], namespace: &str) -> Vec<PolicyRule> {
        self.policy.load().rules_for(user, groups, namespace)
    }

    /// The rules of a role reference as cached (`None`: no such role).
    pub fn role_rules(&self, role_ref: &rbac::RoleRef, namespace: &str) -> Option<Vec<PolicyRule>> {
        self.policy
            .load()
            .role_rules(role_ref, namespace)
            .map(<[PolicyRule]>::to_vec)
    }

    /// Appends the authorizer's metrics in the Prometheus text format.
    pub fn write_prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.counters;
        let _ = writeln!(
            out,
            "# HELP fedingress_authorization_decisions_total RBAC decisions by result.\n# TYPE fedingress_authorization_decisions_total counter"
        );
        for (decision, counter) in [
            ("allow", &c.allowed),
            ("deny", &c.denied),
            ("not_ready", &c.not_ready),
        ] {
            let _ = writeln!(
                out,
                "fedingress_authorization_decisions_total{{decision=\"{decision}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        let policy = self.policy.load();
        let _ = writeln!(
            out,
            "# HELP fedingress_authorization_policy_objects RBAC objects in the authorizer's cache.\n# TYPE fedingress_authorization_policy_objects gauge"
        );
        for (kind, count) in [
            ("roles", policy.roles.len()),
            ("clusterroles", policy.cluster_roles.len()),
            ("rolebindings", policy.role_binding_count()),
            ("clusterrolebindings", policy.cluster_role_bindings.len()),
        ] {
            let _ = writeln!(
                out,
                "fedingress_authorization_policy_objects{{kind=\"{kind}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP fedingress_authorization_synced Whether the RBAC cache has been loaded.\n# TYPE fedingress_authorization_synced gauge\nfedingress_authorization_synced {}",
            u8::from(self.is_synced())
        );
        let _ = writeln!(
            out,
            "# HELP fedingress_authorization_relists_total Times the RBAC cache relisted a kind after its watch ended.\n# TYPE fedingress_authorization_relists_total counter\nfedingress_authorization_relists_total {}",
            c.relists.load(Ordering::Relaxed)
        );
    }

    fn update(&self, change: impl Fn(&mut Policy)) {
        self.policy.rcu(|current| {
            let mut next = Policy::clone(current);
            change(&mut next);
            next
        });
    }

    fn mark_listed(&self, bit: u64) {
        let listed = self.listed.fetch_or(bit, Ordering::AcqRel) | bit;
        if listed == ALL_KINDS && !self.synced.swap(true, Ordering::AcqRel) {
            tracing::info!("RBAC authorizer cache synced");
        }
    }

    /// Follows the four kinds in the store until the process ends.
    pub async fn run(self: Arc<Self>, store: Arc<dyn Store>) {
        tokio::join!(
            self.clone().follow::<Role>(store.clone(), 0b0001),
            self.clone().follow::<ClusterRole>(store.clone(), 0b0010),
            self.clone().follow::<RoleBinding>(store.clone(), 0b0100),
            self.clone().follow::<ClusterRoleBinding>(store, 0b1000),
        );
    }

    /// Waits (at most `limit`) until the cache is synced and holds every bootstrap
    /// ClusterRole and ClusterRoleBinding: [`bootstrap`] writes them after the first
    /// list, and until their watch events arrive the groups they grant to (the
    /// `fedingress:admins` of `--dev`, say) would be refused.
    pub async fn wait_bootstrapped(&self, limit: Duration) -> bool {
        let (roles, bindings) = rbac::bootstrap();
        let role_names: Vec<String> = roles.into_iter().filter_map(|r| r.metadata.name).collect();
        let binding_names: Vec<String> = bindings
            .into_iter()
            .filter_map(|b| b.metadata.name)
            .collect();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let policy = self.policy.load();
            if self.is_synced()
                && role_names
                    .iter()
                    .all(|n| policy.cluster_roles.contains_key(n))
                && binding_names
                    .iter()
                    .all(|n| policy.cluster_role_bindings.contains_key(n))
            {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (at most `limit`) until the cache is synced.
    pub async fn wait_synced(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while !self.is_synced() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    async fn follow<K: PolicyKind>(self: Arc<Self>, store: Arc<dyn Store>, bit: u64) {
        let prefix = registry::prefix::<K>(None);
        let mut first = true;
        loop {
            if !first {
                self.counters.relists.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            first = false;
            let listed = match store.range(&prefix, None, 0).await {
                Ok(listed) => listed,
                Err(error) => {
                    tracing::warn!(kind = K::KIND, %error, "listing RBAC objects failed; retrying");
                    continue;
                }
            };
            let objects: Vec<K> = listed
                .kvs
                .iter()
                .filter_map(|kv| Registry::decode_stored::<K>(kv).ok())
                .collect();
            self.update(|policy| {
                K::clear(policy);
                for object in &objects {
                    object.insert(policy);
                }
            });
            self.mark_listed(bit);
            let stream = match store.watch(&prefix, listed.revision).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(kind = K::KIND, %error, "watching RBAC objects failed; relisting");
                    continue;
                }
            };
            // Every event already waiting is applied with one copy of the policy: one copy
            // per event made writing N bindings in a row cost O(N²) (10,000 RoleBindings
            // reached the cache 36 s after the last one was acknowledged; docs/benchmarks.md,
            // "Authorization at scale").
            let mut batches = stream.ready_chunks(WATCH_BATCH);
            while let Some(events) = batches.next().await {
                if self.apply::<K>(&prefix, events).is_break() {
                    break;
                }
            }
        }
    }

    /// Applies a batch of watch events in order, copying the policy once; `Break` when
    /// the watch ended (the kind is listed again).
    fn apply<K: PolicyKind>(
        &self,
        prefix: &str,
        events: Vec<Result<fedingress_store::Event, StoreError>>,
    ) -> ControlFlow<()> {
        let mut changes: Vec<Change<K>> = Vec::with_capacity(events.len());
        let mut flow = ControlFlow::Continue(());
        for event in events {
            let event = match event {
                Ok(event) => event,
                Err(StoreError::Compacted { .. }) => {
                    flow = ControlFlow::Break(());
                    break;
                }
                Err(error) => {
                    tracing::warn!(kind = K::KIND, %error, "RBAC watch ended; relisting");
                    flow = ControlFlow::Break(());
                    break;
                }
            };
            match event.kind {
                EventKind::Put => match Registry::decode_stored::<K>(&event.kv) {
                    Ok(object) => changes.push(Change::Put(object)),
                    Err(error) => {
                        tracing::warn!(key = %event.kv.key, %error, "undecodable RBAC object ignored")
                    }
                },
                EventKind::Delete => {
                    if let Some(rest) = event.kv.key.strip_prefix(prefix) {
                        let (namespace, name) = match rest.split_once('/') {
                            Some((ns, name)) if K::NAMESPACED => (ns, name),
                            _ => ("", rest),
                        };
                        changes.push(Change::Delete(namespace.to_string(), name.to_string()));
                    }
                }
            }
        }
        if !changes.is_empty() {
            self.update(|policy| {
                for change in &changes {
                    match change {
                        Change::Put(object) => object.insert(policy),
                        Change::Delete(namespace, name) => K::remove(policy, namespace, name),
                    }
                }
            });
        }
        flow
    }
}

/// Most watch events applied with one copy of the policy.
const WATCH_BATCH: usize = 4096;

/// One watch event, decoded.
enum Change<K> {
    Put(K),
    /// (namespace, name); namespace `""` for cluster-scoped kinds.
    Delete(String, String),
}

/// How each RBAC kind lands in the [`Policy`].
trait PolicyKind: Resource {
    fn clear(policy: &mut Policy);
    fn insert(&self, policy: &mut Policy);
    fn remove(policy: &mut Policy, namespace: &str, name: &str);
}

fn key_of(meta: &fedingress_api::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl PolicyKind for Role {
    fn clear(policy: &mut Policy) {
        policy.roles.clear();
    }
    fn insert(&self, policy: &mut Policy) {
        policy
            .roles
            .insert(key_of(&self.metadata), self.rules.clone());
    }
    fn remove(policy: &mut Policy, namespace: &str, name: &str) {
        policy.roles.remove(&(namespace.into(), name.into()));
    }
}

impl PolicyKind for ClusterRole {
    fn clear(policy: &mut Policy) {
        policy.cluster_roles.clear();
    }
    fn insert(&self, policy: &mut Policy) {
        policy
            .cluster_roles
            .insert(key_of(&self.metadata).1, self.rules.clone());
    }
    fn remove(policy: &mut Policy, _namespace: &str, name: &str) {
        policy.cluster_roles.remove(name);
    }
}

impl PolicyKind for RoleBinding {
    fn clear(policy: &mut Policy) {
        policy.role_bindings.clear();
    }
    fn insert(&self, policy: &mut Policy) {
        let (namespace, name) = key_of(&self.metadata);
        policy.insert_role_binding(
            &namespace,
            &name,
            Grant {
                subjects: self.subjects.clone(),
                role_ref: self.role_ref.clone(),
            },
        );
    }
    fn remove(policy: &mut Policy, namespace: &str, name: &str) {
        policy.remove_role_binding(namespace, name);
    }
}

impl PolicyKind for ClusterRoleBinding {
    fn clear(policy: &mut Policy) {
        policy.cluster_role_bindings.clear();
    }
    fn insert(&self, policy: &mut Policy) {
        policy.cluster_role_bindings.insert(
            key_of(&self.metadata).1,
            Grant {
                subjects: self.subjects.clone(),
                role_ref: self.role_ref.clone(),
            },
        );
    }
    fn remove(policy: &mut Policy, _namespace: &str, name: &str) {
        policy.cluster_role_bindings.remove(name);
    }
}

/// Creates the bootstrap ClusterRoles and ClusterRoleBindings that are absent, and adds
/// missing rules and subjects to those that carry `autoupdate: "true"` (kube's
/// reconciliation at start). Another replica racing on the same object is fine.
pub async fn bootstrap(registry: &Registry) -> Result<(), ApiError> {
    let (roles, bindings) = rbac::bootstrap();
    for role in roles {
        let name = role.metadata.name.clone().unwrap_or_default();
        ensure(registry, role, &name, rbac::reconcile_rules).await?;
    }
    for binding in bindings {
        let name = binding.metadata.name.clone().unwrap_or_default();
        ensure(registry, binding, &name, rbac::reconcile_subjects).await?;
    }
    Ok(())
}

async fn ensure<R: Resource>(
    registry: &Registry,
    default: R,
    name: &str,
    reconcile: fn(&R, &R) -> Option<R>,
) -> Result<(), ApiError> {
    match registry.get::<R>(None, name).await {
        Ok(stored) => {
            if reconcile(&stored, &default).is_some() {
                let result = registry
                    .update::<R>(None, name, Scope::Main, false, |current| {
                        Ok(reconcile(current, &default).unwrap_or_else(|| current.clone()))
                    })
                    .await;
                match result {
                    Ok(_) => {
                        tracing::info!(kind = R::KIND, name, "bootstrap RBAC object reconciled")
                    }
                    Err(e) if e.code == StatusCode::CONFLICT => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }
        Err(e) if e.code == StatusCode::NOT_FOUND => {
            match registry
                .create::<R>(None, default, Time(chrono::Utc::now()), false)
                .await
            {
                Ok(_) => {
                    tracing::info!(kind = R::KIND, name, "bootstrap RBAC object created");
                    Ok(())
                }
                Err(e) if e.code == StatusCode::CONFLICT => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Runs [`bootstrap`] until it succeeds (the store may not answer yet).
pub async fn bootstrap_until_done(registry: Registry) {
    crate::registry::until_written("writing the bootstrap RBAC roles", || bootstrap(&registry))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_store::RedbStore;

    /// Watch events that arrive together are applied together, in order, and an error
    /// ends the watch after the events before it.
    #[test]
    fn a_batch_of_watch_events_is_applied_in_order() {
        let authorizer = Authorizer::with_policy(Policy::default());
        let prefix = registry::prefix::<RoleBinding>(None);
        let kv = |name: &str, revision: i64| fedingress_store::KeyValue {
            key: format!("{prefix}shop/{name}"),
            value: serde_json::to_vec(&serde_json::json!({
                "metadata": {"name": name, "namespace": "shop"},
                "subjects": [{"kind": "User", "name": name}],
                "roleRef": {"apiGroup": rbac::GROUP, "kind": "ClusterRole", "name": "edit"},
            }))
            .unwrap()
            .into(),
            create_revision: revision,
            mod_revision: revision,
        };
        let event = |kind, name: &str, revision| {
            Ok(fedingress_store::Event {
                revision,
                kind,
                kv: kv(name, revision),
                prev: None,
            })
        };
        let mut events: Vec<_> = (0..500)
            .map(|n| event(EventKind::Put, &format!("b{n}"), n + 1))
            .collect();
        events.push(event(EventKind::Delete, "b0", 501));
        assert!(
            authorizer
                .apply::<RoleBinding>(&prefix, events)
                .is_continue()
        );
        let count = || authorizer.policy.load().role_binding_count();
        assert_eq!(count(), 499);
        let events = vec![
            event(EventKind::Put, "before", 502),
            Err(StoreError::Compacted {
                requested: 1,
                compacted: 2,
            }),
            event(EventKind::Put, "after", 503),
        ];
        assert!(authorizer.apply::<RoleBinding>(&prefix, events).is_break());
        assert_eq!(count(), 500);
        let policy = authorizer.policy.load();
        assert!(policy.role_bindings["shop"].contains_key("before"));
        assert!(!policy.role_bindings["shop"].contains_key("after"));
    }

    #[tokio::test]
    async fn serving_waits_for_the_bootstrap_objects_not_only_the_first_list() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&dir.path().join("db"), Default::default()).unwrap());
        let registry = Registry::new(store.clone());
        // As at start: the cache lists an empty store (synced), then the bootstrap writes.
        let authorizer = Arc::new(Authorizer::default());
        tokio::spawn(authorizer.clone().run(store.clone()));
        assert!(authorizer.wait_synced(Duration::from_secs(30)).await);
        assert!(
            !authorizer
                .wait_bootstrapped(Duration::from_millis(50))
                .await,
            "synced, but the bootstrap objects are not there yet"
        );
        bootstrap(&registry).await.unwrap();
        assert!(authorizer.wait_bootstrapped(Duration::from_secs(30)).await);
        let admin = Attributes {
            user: "system:anonymous".into(),
            groups: vec![crate::auth::ADMINS.into()],
            verb: "get".into(),
            resource_request: true,
            api_group: fedingress_api::GROUP.into(),
            resource: "clusters".into(),
            ..Attributes::default()
        };
        assert!(matches!(authorizer.authorize(&admin), Decision::Allow(_)));
    }

    #[tokio::test]
    async fn follows_the_store_and_bootstraps() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&dir.path().join("db"), Default::default()).unwrap());
        let registry = Registry::new(store.clone());
        bootstrap(&registry).await.unwrap();
        // A second run changes nothing and does not fail.
        bootstrap(&registry).await.unwrap();
        let authorizer = Arc::new(Authorizer::default());
        let attrs = Attributes {
            user: "alice".into(),
            groups: vec!["system:authenticated".into()],
            verb: "create".into(),
            resource_request: true,
            api_group: fedingress_api::GROUP.into(),
            resource: "federatedingresses".into(),
            namespace: "shop".into(),
            ..Attributes::default()
        };
        assert_eq!(authorizer.authorize(&attrs), Decision::NotReady);
        tokio::spawn(authorizer.clone().run(store.clone()));
        assert!(authorizer.wait_synced(Duration::from_secs(30)).await);
        assert_eq!(authorizer.authorize(&attrs), Decision::Deny);
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "alice-edit", "namespace": "shop"},
            "subjects": [{"kind": "User", "name": "alice"}],
            "roleRef": {"apiGroup": rbac::GROUP, "kind": "ClusterRole", "name": "edit"},
        }))
        .unwrap();
        crate::registry::namespaces::ensure(&registry, "shop", Time(chrono::Utc::now()))
            .await
            .unwrap();
        registry
            .create(Some("shop"), binding, Time(chrono::Utc::now()), false)
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while authorizer.authorize(&attrs) == Decision::Deny {
            assert!(tokio::time::Instant::now() < deadline, "binding never seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        registry
            .delete::<RoleBinding>(
                Some("shop"),
                "alice-edit",
                &Default::default(),
                Time(chrono::Utc::now()),
                false,
            )
            .await
            .unwrap();
        while authorizer.authorize(&attrs) != Decision::Deny {
            assert!(tokio::time::Instant::now() < deadline, "delete never seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
