//! The controller's *observe* step: an in-memory copy of every Cluster and
//! FederatedIngress, listed once and then kept current from a store watch (as
//! kube-runtime's reflector does), and the [`Dirty`] set each change implies. Nothing is
//! listed or decoded again while the store is idle.

use std::collections::BTreeMap;

use fedingress_api::plan::IngressKey;
use fedingress_api::{Cluster, FederatedIngress};
use fedingress_store::{Event, EventKind, Revision};

use super::decide::Dirty;
use crate::registry::{Filter, Registry, prefix};
use crate::status::ApiError;

/// Every Cluster and FederatedIngress as stored, at `revision`.
#[derive(Default)]
pub struct Cache {
    pub clusters: BTreeMap<String, Cluster>,
    pub ingresses: BTreeMap<IngressKey, FederatedIngress>,
    pub revision: Revision,
}

/// What one store event changed.
#[derive(Debug, Default)]
pub struct Observed {
    pub dirty: Dirty,
    /// Clusters deleted (their agents' tokens are revoked).
    pub deleted_clusters: Vec<String>,
    /// Clusters whose `spec.provider` or `spec.unschedulable` (cordon) changed: their
    /// agents' sessions end, so that they reconnect and are welcomed with the new values.
    pub welcome_changed: Vec<String>,
}

impl Cache {
    /// Lists everything.
    pub async fn list(registry: &Registry) -> Result<Self, ApiError> {
        let all = Filter::default();
        let clusters = registry.list::<Cluster>(None, &all, 0, None).await?;
        let ingresses = registry
            .list::<FederatedIngress>(None, &all, 0, None)
            .await?;
        Ok(Cache {
            revision: clusters.resource_version.max(ingresses.resource_version),
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

    /// The store prefix that holds both kinds (watched from [`Cache::revision`]).
    pub fn watch_prefix() -> String {
        format!("/registry/{}/", fedingress_api::GROUP)
    }

    /// Applies one watch event; events of other kinds are ignored.
    pub fn apply(&mut self, event: &Event) -> Observed {
        self.revision = self.revision.max(event.revision);
        let key = event.kv.key.as_str();
        if key.starts_with(&prefix::<Cluster>(None)) {
            self.apply_cluster(event)
        } else if key.starts_with(&prefix::<FederatedIngress>(None)) {
            self.apply_ingress(event)
        } else {
            Observed::default()
        }
    }

    fn apply_cluster(&mut self, event: &Event) -> Observed {
        let mut observed = Observed::default();
        let decoded = match event.kind {
            EventKind::Put => match Registry::decode_stored::<Cluster>(&event.kv) {
                Ok(cluster) => Some(cluster),
                Err(_) => return observed,
            },
            EventKind::Delete => None,
        };
        let name = match (&decoded, event.kv.key.rsplit('/').next()) {
            (Some(cluster), _) => cluster.name().to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => return observed,
        };
        let before = match &decoded {
            Some(cluster) => self.clusters.insert(name.clone(), cluster.clone()),
            None => self.clusters.remove(&name),
        };
        observed.dirty.clusters.insert(name.clone());
        match (&before, &decoded) {
            (Some(before), Some(after)) => {
                let placement_inputs = before.spec != after.spec
                    || before.metadata.labels != after.metadata.labels
                    || before.metadata.deletion_timestamp != after.metadata.deletion_timestamp;
                if welcome_changed(before, after) {
                    observed.welcome_changed.push(name.clone());
                }
                if placement_inputs {
                    observed.dirty.all = true;
                } else if before.is_connected() != after.is_connected() {
                    // Only maxClusters placement looks at connectivity.
                    observed.dirty.ingresses.extend(
                        self.ingresses
                            .iter()
                            .filter(|(_, i)| i.spec.placement.max_clusters.is_some())
                            .map(|(k, _)| k.clone()),
                    );
                }
            }
            (None, Some(_)) => observed.dirty.all = true,
            (Some(_), None) => {
                observed.dirty.all = true;
                observed.deleted_clusters.push(name);
            }
            (None, None) => {}
        }
        observed
    }

    fn apply_ingress(&mut self, event: &Event) -> Observed {
        let mut observed = Observed::default();
        let (key, decoded) = match event.kind {
            EventKind::Put => match Registry::decode_stored::<FederatedIngress>(&event.kv) {
                Ok(ingress) => (IngressKey::of(&ingress), Some(ingress)),
                Err(_) => return observed,
            },
            EventKind::Delete => {
                let mut parts = event.kv.key.rsplit('/');
                match (parts.next(), parts.next()) {
                    (Some(name), Some(namespace)) => (IngressKey::new(namespace, name), None),
                    _ => return observed,
                }
            }
        };
        let before = match &decoded {
            Some(ingress) => self.ingresses.insert(key.clone(), ingress.clone()),
            None => self.ingresses.remove(&key),
        };
        observed.dirty.replan = match (&before, &decoded) {
            (Some(before), Some(after)) => {
                before.spec != after.spec
                    || before.metadata.generation != after.metadata.generation
                    || before.metadata.deletion_timestamp != after.metadata.deletion_timestamp
                    || before.metadata.creation_timestamp != after.metadata.creation_timestamp
                    || before.metadata.uid != after.metadata.uid
            }
            _ => true,
        };
        observed.dirty.ingresses.insert(key);
        observed
    }
}

/// Whether what a Welcome tells the agent (provider, cordon) differs between `before`
/// and `after`.
pub fn welcome_changed(before: &Cluster, after: &Cluster) -> bool {
    before.spec.provider != after.spec.provider
        || before.spec.unschedulable != after.spec.unschedulable
}
