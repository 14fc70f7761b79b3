//! The controller's *observe* step: an in-memory copy of every Cluster,
//! FederatedIngress, IngressPool and IngressClaim, listed once and then kept current from a store watch (as
//! kube-runtime's reflector does), and the [`Dirty`] set each change implies. Nothing is
//! listed or decoded again while the store is idle.
//!
//! Observing only updates the cache: what a change means for agents (a deleted
//! cluster's credentials revoked, a session ended) is decided from the [`Dirty`] set
//! ([`super::decide::AgentAction`]) and applied with the pass.

use std::collections::BTreeMap;

use fedingress_api::plan::IngressKey;
use fedingress_api::{Cluster, FederatedIngress, IngressClaim, IngressPool};
use fedingress_store::{Event, EventKind, Revision};

use super::decide::Dirty;
use fedingress_apiserver::registry::{Filter, Registry, prefix};
use fedingress_apiserver::status::ApiError;

/// Every Cluster, FederatedIngress, IngressPool and IngressClaim as stored, at
/// `revision`.
#[derive(Default)]
pub struct Cache {
    pub clusters: BTreeMap<String, Cluster>,
    pub ingresses: BTreeMap<IngressKey, FederatedIngress>,
    pub pools: BTreeMap<String, IngressPool>,
    /// By namespace and name.
    pub claims: BTreeMap<IngressKey, IngressClaim>,
    pub revision: Revision,
}

impl Cache {
    /// Lists everything.
    pub async fn list(registry: &Registry) -> Result<Self, ApiError> {
        let all = Filter::default();
        let clusters = registry.list::<Cluster>(None, &all, 0, None).await?;
        let ingresses = registry
            .list::<FederatedIngress>(None, &all, 0, None)
            .await?;
        let pools = registry.list::<IngressPool>(None, &all, 0, None).await?;
        let claims = registry.list::<IngressClaim>(None, &all, 0, None).await?;
        Ok(Cache {
            revision: clusters
                .resource_version
                .max(ingresses.resource_version)
                .max(pools.resource_version)
                .max(claims.resource_version),
            pools: pools
                .items
                .into_iter()
                .map(|p| (p.name().to_string(), p))
                .collect(),
            claims: claims
                .items
                .into_iter()
                .map(|c| {
                    let key = IngressKey::new(
                        c.metadata.namespace.as_deref().unwrap_or_default(),
                        c.name(),
                    );
                    (key, c)
                })
                .collect(),
            clusters: clusters
                .items
                .into_iter()
                .map(|c| (c.name().to_string(), c))
                .collect(),
            ingresses: ingresses
                .items
                .into_iter()
                .map(|i| (IngressKey::of(&i), i))
                .collect(),
        })
    }

    /// Replaces everything with a new list (after the watch broke): everything is
    /// recomputed, and clusters deleted or changed meanwhile are marked as the watch
    /// would have.
    pub fn replace(&mut self, listed: Cache) -> Dirty {
        let mut dirty = Dirty {
            all: true,
            replan: true,
            ..Dirty::default()
        };
        for (name, before) in &self.clusters {
            match listed.clusters.get(name) {
                Some(after) if welcome_changed(before, after) => {
                    dirty.welcome_changed.insert(name.clone());
                }
                Some(_) => {}
                None => {
                    dirty.deleted_clusters.insert(name.clone());
                }
            }
        }
        *self = listed;
        dirty
    }

    /// The store prefix that holds both kinds (watched from [`Cache::revision`]).
    pub fn watch_prefix() -> String {
        format!("/registry/{}/", fedingress_api::GROUP)
    }

    /// Applies one watch event; events of other kinds are ignored.
    pub fn apply(&mut self, event: &Event) -> Dirty {
        self.revision = self.revision.max(event.revision);
        let key = event.kv.key.as_str();
        if key.starts_with(&prefix::<Cluster>(None)) {
            self.apply_cluster(event)
        } else if key.starts_with(&prefix::<FederatedIngress>(None)) {
            self.apply_ingress(event)
        } else if key.starts_with(&prefix::<IngressPool>(None)) {
            self.apply_pool(event)
        } else if key.starts_with(&prefix::<IngressClaim>(None)) {
            self.apply_claim(event)
        } else {
            Dirty::default()
        }
    }

    fn apply_cluster(&mut self, event: &Event) -> Dirty {
        let mut dirty = Dirty::default();
        let decoded = match event.kind {
            EventKind::Put => match Registry::decode_stored::<Cluster>(&event.kv) {
                Ok(cluster) => Some(cluster),
                Err(_) => return dirty,
            },
            EventKind::Delete => None,
        };
        let name = match (&decoded, event.kv.key.rsplit('/').next()) {
            (Some(cluster), _) => cluster.name().to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => return dirty,
        };
        let before = match &decoded {
            Some(cluster) => self.clusters.insert(name.clone(), cluster.clone()),
            None => self.clusters.remove(&name),
        };
        dirty.clusters.insert(name.clone());
        match (&before, &decoded) {
            (Some(before), Some(after)) => {
                let placement_inputs = before.spec != after.spec
                    || before.metadata.labels != after.metadata.labels
                    || before.metadata.deletion_timestamp != after.metadata.deletion_timestamp;
                if welcome_changed(before, after) {
                    dirty.welcome_changed.insert(name.clone());
                }
                if placement_inputs {
                    dirty.all = true;
                } else if before.is_connected() != after.is_connected() {
                    // Only maxClusters placement looks at connectivity.
                    dirty.ingresses.extend(
                        self.ingresses
                            .iter()
                            .filter(|(_, i)| i.spec.placement.max_clusters.is_some())
                            .map(|(k, _)| k.clone()),
                    );
                }
            }
            (None, Some(_)) => dirty.all = true,
            (Some(_), None) => {
                dirty.all = true;
                dirty.deleted_clusters.insert(name);
            }
            (None, None) => {}
        }
        dirty
    }

    /// A pool's spec, labels or existence changed: bindings and plans are recomputed
    /// everywhere (pools change rarely). A status write (the controller's own) only
    /// updates the cache.
    fn apply_pool(&mut self, event: &Event) -> Dirty {
        let decoded = match event.kind {
            EventKind::Put => match Registry::decode_stored::<IngressPool>(&event.kv) {
                Ok(pool) => Some(pool),
                Err(_) => return Dirty::default(),
            },
            EventKind::Delete => None,
        };
        let Some(name) = decoded
            .as_ref()
            .map(|p| p.name().to_string())
            .or_else(|| event.kv.key.rsplit('/').next().map(str::to_string))
        else {
            return Dirty::default();
        };
        let before = match decoded {
            Some(pool) => self.pools.insert(name.clone(), pool),
            None => self.pools.remove(&name),
        };
        let after = self.pools.get(&name);
        let changed = match (&before, after) {
            (Some(before), Some(after)) => {
                before.spec != after.spec
                    || before.metadata.labels != after.metadata.labels
                    || before.metadata.deletion_timestamp != after.metadata.deletion_timestamp
            }
            _ => true,
        };
        Dirty {
            all: changed,
            replan: changed,
            ..Dirty::default()
        }
    }

    /// A claim changed: everything is recomputed (its pools' bindings, its status).
    fn apply_claim(&mut self, event: &Event) -> Dirty {
        let decoded = match event.kind {
            EventKind::Put => match Registry::decode_stored::<IngressClaim>(&event.kv) {
                Ok(claim) => Some(claim),
                Err(_) => return Dirty::default(),
            },
            EventKind::Delete => None,
        };
        let key = match &decoded {
            Some(claim) => IngressKey::new(
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.name(),
            ),
            None => {
                let mut parts = event.kv.key.rsplit('/');
                match (parts.next(), parts.next()) {
                    (Some(name), Some(namespace)) => IngressKey::new(namespace, name),
                    _ => return Dirty::default(),
                }
            }
        };
        let before = match decoded {
            Some(claim) => self.claims.insert(key.clone(), claim),
            None => self.claims.remove(&key),
        };
        let changed = match (&before, self.claims.get(&key)) {
            (Some(before), Some(after)) => {
                before.spec != after.spec
                    || before.metadata.deletion_timestamp != after.metadata.deletion_timestamp
            }
            _ => true,
        };
        Dirty {
            all: changed,
            replan: changed,
            ..Dirty::default()
        }
    }

    fn apply_ingress(&mut self, event: &Event) -> Dirty {
        let mut dirty = Dirty::default();
        let (key, decoded) = match event.kind {
            EventKind::Put => match Registry::decode_stored::<FederatedIngress>(&event.kv) {
                Ok(ingress) => (IngressKey::of(&ingress), Some(ingress)),
                Err(_) => return dirty,
            },
            EventKind::Delete => {
                let mut parts = event.kv.key.rsplit('/');
                match (parts.next(), parts.next()) {
                    (Some(name), Some(namespace)) => (IngressKey::new(namespace, name), None),
                    _ => return dirty,
                }
            }
        };
        let before = match &decoded {
            Some(ingress) => self.ingresses.insert(key.clone(), ingress.clone()),
            None => self.ingresses.remove(&key),
        };
        dirty.replan = match (&before, &decoded) {
            (Some(before), Some(after)) => {
                before.spec != after.spec
                    || before.metadata.generation != after.metadata.generation
                    || before.metadata.deletion_timestamp != after.metadata.deletion_timestamp
                    || before.metadata.creation_timestamp != after.metadata.creation_timestamp
                    || before.metadata.uid != after.metadata.uid
            }
            _ => true,
        };
        dirty.ingresses.insert(key);
        dirty
    }
}

/// Whether what a Welcome tells the agent (provider, cordon) differs between `before`
/// and `after`.
pub fn welcome_changed(before: &Cluster, after: &Cluster) -> bool {
    before.spec.provider != after.spec.provider
        || before.spec.unschedulable != after.spec.unschedulable
}
