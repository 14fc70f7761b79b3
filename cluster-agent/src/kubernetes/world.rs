//! What the driver knows of its member cluster: kube-runtime reflectors (watch, not
//! polling) over the objects it renders, the backends' Services and EndpointSlices,
//! and Warning events on Services — plus how each watch is doing. The pools' Deployments
//! and PodDisruptionBudgets are watched in the agent's own namespace only (where pools
//! run), the rest cluster-wide.
//!
//! Every watch event bumps the driver's change signal, so a load balancer address or
//! an endpoint turning ready reaches the hub in the next report (at most
//! [`crate::hub::REPORT_COALESCE`] later). A failing watch (RBAC denied, API down) is
//! retried with kube-runtime's default backoff and recorded per resource, so reports
//! and readiness can say what is wrong, in the words of [`describe_kube_error`] (which
//! [`super::apply`] uses for failed writes too).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::render::{ClusterFacts, MANAGED_BY, MANAGED_BY_LABEL, ServiceFacts};
use crate::state::error_chain;

/// The label EndpointSlices carry with their Service's name.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The watched resources, by the name used in errors and RBAC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Watched {
    Services,
    Ingresses,
    ConfigMaps,
    EndpointSlices,
    Events,
    /// The pools' Deployments, in the agent's namespace.
    Deployments,
    /// The pools' PodDisruptionBudgets, in the agent's namespace.
    PodDisruptionBudgets,
}

impl Watched {
    pub const ALL: [Watched; 7] = [
        Watched::Services,
        Watched::Ingresses,
        Watched::ConfigMaps,
        Watched::EndpointSlices,
        Watched::Events,
        Watched::Deployments,
        Watched::PodDisruptionBudgets,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Watched::Services => "services",
            Watched::Ingresses => "ingresses.networking.k8s.io",
            Watched::ConfigMaps => "configmaps",
            Watched::EndpointSlices => "endpointslices.discovery.k8s.io",
            Watched::Events => "events",
            Watched::Deployments => "deployments.apps",
            Watched::PodDisruptionBudgets => "poddisruptionbudgets.policy",
        }
    }
}

/// (ready, total) endpoints per (namespace, Service) ([`World::endpoint_counts`]).
#[derive(Clone, Debug, Default)]
pub struct EndpointCounts(BTreeMap<(String, String), (u32, u32)>);

impl EndpointCounts {
    /// A Service without EndpointSlices has (0, 0).
    pub fn get(&self, namespace: &str, service: &str) -> (u32, u32) {
        self.0
            .get(&(namespace.to_owned(), service.to_owned()))
            .copied()
            .unwrap_or_default()
    }
}

/// Read side of the watched cluster state.
pub struct World {
    pub services: Store<Service>,
    /// Only the Ingresses fedingress manages (label selector).
    pub ingresses: Store<Ingress>,
    /// Only the ConfigMaps fedingress manages (label selector).
    pub config_maps: Store<ConfigMap>,
    pub slices: Store<EndpointSlice>,
    /// Warning events about Services.
    pub events: Store<Event>,
    /// Only the Deployments fedingress manages (the pools'), in the pool namespace.
    pub deployments: Store<Deployment>,
    /// Only the PodDisruptionBudgets fedingress manages, in the pool namespace.
    pub disruption_budgets: Store<PodDisruptionBudget>,
    health: Mutex<BTreeMap<Watched, WatchHealth>>,
}

/// How one watch is doing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchHealth {
    /// The initial list completed at least once.
    pub synced: bool,
    /// The last error, until the watch works again.
    pub error: Option<String>,
}

/// Write side: one reflector writer per store, consumed by [`World::spawn_watches`] (or
/// fed by hand in tests).
pub struct Writers {
    pub services: reflector::store::Writer<Service>,
    pub ingresses: reflector::store::Writer<Ingress>,
    pub config_maps: reflector::store::Writer<ConfigMap>,
    pub slices: reflector::store::Writer<EndpointSlice>,
    pub events: reflector::store::Writer<Event>,
    pub deployments: reflector::store::Writer<Deployment>,
    pub disruption_budgets: reflector::store::Writer<PodDisruptionBudget>,
}

impl World {
    pub fn new() -> (Arc<World>, Writers) {
        let (services, services_w) = reflector::store();
        let (ingresses, ingresses_w) = reflector::store();
        let (config_maps, config_maps_w) = reflector::store();
        let (slices, slices_w) = reflector::store();
        let (events, events_w) = reflector::store();
        let (deployments, deployments_w) = reflector::store();
        let (disruption_budgets, disruption_budgets_w) = reflector::store();
        let world = Arc::new(World {
            services,
            ingresses,
            config_maps,
            slices,
            events,
            deployments,
            disruption_budgets,
            health: Mutex::new(BTreeMap::new()),
        });
        let writers = Writers {
            services: services_w,
            ingresses: ingresses_w,
            config_maps: config_maps_w,
            slices: slices_w,
            events: events_w,
            deployments: deployments_w,
            disruption_budgets: disruption_budgets_w,
        };
        (world, writers)
    }

    /// Starts one reflector per resource, cluster-wide (the plan's namespaces change
    /// with it), the pools' kinds in `pool_namespace`. Each event bumps `changes`.
    pub fn spawn_watches(
        self: &Arc<Self>,
        client: &Client,
        pool_namespace: &str,
        writers: Writers,
        changes: &watch::Sender<u64>,
    ) -> Vec<JoinHandle<()>> {
        let managed = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
        let all = watcher::Config::default();
        vec![
            self.spawn(
                Watched::Services,
                Api::all(client.clone()),
                all.clone(),
                writers.services,
                changes,
            ),
            self.spawn(
                Watched::Ingresses,
                Api::all(client.clone()),
                all.clone().labels(&managed),
                writers.ingresses,
                changes,
            ),
            self.spawn(
                Watched::ConfigMaps,
                Api::all(client.clone()),
                all.clone().labels(&managed),
                writers.config_maps,
                changes,
            ),
            self.spawn(
                Watched::EndpointSlices,
                Api::all(client.clone()),
                all.clone(),
                writers.slices,
                changes,
            ),
            self.spawn(
                Watched::Events,
                Api::all(client.clone()),
                all.clone()
                    .fields("type=Warning,involvedObject.kind=Service"),
                writers.events,
                changes,
            ),
            self.spawn(
                Watched::Deployments,
                Api::namespaced(client.clone(), pool_namespace),
                all.clone().labels(&managed),
                writers.deployments,
                changes,
            ),
            self.spawn(
                Watched::PodDisruptionBudgets,
                Api::namespaced(client.clone(), pool_namespace),
                all.labels(&managed),
                writers.disruption_budgets,
                changes,
            ),
        ]
    }

    /// Starts the reflector of one resource.
    pub fn spawn<K>(
        self: &Arc<Self>,
        watched: Watched,
        api: Api<K>,
        config: watcher::Config,
        writer: reflector::store::Writer<K>,
        changes: &watch::Sender<u64>,
    ) -> JoinHandle<()>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone,
    {
        let world = Arc::clone(self);
        let changes = changes.clone();
        tokio::spawn(async move {
            let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
            futures_util::pin_mut!(stream);
            while let Some(item) = stream.next().await {
                let changed = match item {
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
                    Ok(watcher::Event::InitDone) => world.record(watched, None, true),
                    Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                        world.record(watched, None, false);
                        true
                    }
                    Err(error) => {
                        let message = error_message(&error);
                        tracing::warn!(resource = watched.as_str(), error = %message, "watch failed; retrying");
                        world.record(watched, Some(message), false)
                    }
                };
                if changed {
                    changes.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
        })
    }

    /// Records a watch outcome; true when the health changed.
    pub fn record(&self, watched: Watched, error: Option<String>, synced: bool) -> bool {
        let mut health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        let entry = health.entry(watched).or_default();
        let before = entry.clone();
        if synced {
            entry.synced = true;
        }
        // An event after an error means the watch works again.
        entry.error = error;
        *entry != before
    }

    /// The health of every watch (a resource never heard of is not synced).
    pub fn health(&self) -> BTreeMap<Watched, WatchHealth> {
        let health = self.health.lock().unwrap_or_else(|e| e.into_inner());
        Watched::ALL
            .iter()
            .map(|w| (*w, health.get(w).cloned().unwrap_or_default()))
            .collect()
    }

    /// Problems worth a rule error and a not-ready agent: failing watches.
    pub fn problems(&self) -> Vec<String> {
        self.health()
            .into_iter()
            .filter_map(|(watched, health)| {
                health
                    .error
                    .map(|error| format!("watching {}: {error}", watched.as_str()))
            })
            .collect()
    }

    /// Lists one object of every resource whose watch failed last, and clears the
    /// failure when that works: a watch that resumed from its resourceVersion yields
    /// nothing until something changes, so its recovery is not otherwise seen.
    pub async fn probe_failed(&self, client: &Client, pool_namespace: &str) {
        let failed: Vec<Watched> = self
            .health()
            .into_iter()
            .filter(|(_, h)| h.error.is_some())
            .map(|(w, _)| w)
            .collect();
        for watched in failed {
            let one = kube::api::ListParams::default().limit(1);
            let result = match watched {
                Watched::Services => Api::<Service>::all(client.clone())
                    .list_metadata(&one)
                    .await
                    .map(|_| ()),
                Watched::Ingresses => Api::<Ingress>::all(client.clone())
                    .list_metadata(&one)
                    .await
                    .map(|_| ()),
                Watched::ConfigMaps => Api::<ConfigMap>::all(client.clone())
                    .list_metadata(&one)
                    .await
                    .map(|_| ()),
                Watched::EndpointSlices => Api::<EndpointSlice>::all(client.clone())
                    .list_metadata(&one)
                    .await
                    .map(|_| ()),
                Watched::Events => Api::<Event>::all(client.clone())
                    .list_metadata(&one)
                    .await
                    .map(|_| ()),
                Watched::Deployments => {
                    Api::<Deployment>::namespaced(client.clone(), pool_namespace)
                        .list_metadata(&one)
                        .await
                        .map(|_| ())
                }
                Watched::PodDisruptionBudgets => {
                    Api::<PodDisruptionBudget>::namespaced(client.clone(), pool_namespace)
                        .list_metadata(&one)
                        .await
                        .map(|_| ())
                }
            };
            match result {
                Ok(()) => {
                    tracing::info!(
                        resource = watched.as_str(),
                        "member cluster API answers again"
                    );
                    self.record(watched, None, false);
                }
                Err(error) => {
                    self.record(watched, Some(describe_kube_error(&error)), false);
                }
            }
        }
    }

    /// Whether every store holding objects the driver may delete has listed once, so
    /// that garbage collection sees everything it owns.
    pub fn owned_stores_synced(&self) -> bool {
        let health = self.health();
        [
            Watched::Services,
            Watched::Ingresses,
            Watched::ConfigMaps,
            Watched::Deployments,
            Watched::PodDisruptionBudgets,
        ]
        .iter()
        .all(|w| health.get(w).is_some_and(|h| h.synced))
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn ingress(&self, namespace: &str, name: &str) -> Option<Arc<Ingress>> {
        self.ingresses.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.config_maps
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub fn deployment(&self, namespace: &str, name: &str) -> Option<Arc<Deployment>> {
        self.deployments
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub fn disruption_budget(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<PodDisruptionBudget>> {
        self.disruption_budgets
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// (ready, total) endpoints of every Service, over all its EndpointSlices, in one
    /// pass (a report reads many Services; the slices of a big cluster are many).
    /// `ready` follows the EndpointSlice API: a missing condition means ready, a
    /// terminating endpoint is not ready.
    pub fn endpoint_counts(&self) -> EndpointCounts {
        let mut counts = EndpointCounts::default();
        for slice in self.slices.state() {
            let service = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL));
            let (Some(namespace), Some(service)) = (&slice.metadata.namespace, service) else {
                continue;
            };
            let entry = counts
                .0
                .entry((namespace.clone(), service.clone()))
                .or_default();
            for endpoint in &slice.endpoints {
                entry.1 = entry.1.saturating_add(1);
                let conditions = endpoint.conditions.as_ref();
                let is_ready = conditions.and_then(|c| c.ready).unwrap_or(true)
                    && !conditions.and_then(|c| c.terminating).unwrap_or(false);
                if is_ready {
                    entry.0 = entry.0.saturating_add(1);
                }
            }
        }
        counts
    }

    /// The newest `SyncLoadBalancerFailed` message about the Service with this uid.
    pub fn load_balancer_failure(&self, uid: &str) -> Option<String> {
        self.events
            .state()
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                    && e.involved_object.uid.as_deref() == Some(uid)
            })
            .max_by_key(|e| {
                e.last_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .or_else(|| e.event_time.as_ref().map(|t| t.0))
                    .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
            })
            .and_then(|e| e.message.clone())
    }
}

impl ClusterFacts for World {
    fn service(&self, namespace: &str, name: &str) -> Option<ServiceFacts> {
        let service = World::service(self, namespace, name)?;
        let spec = service.spec.as_ref();
        Some(ServiceFacts {
            selector: spec.and_then(|s| s.selector.clone()),
            ports: spec.and_then(|s| s.ports.clone()).unwrap_or_default(),
        })
    }
}

/// The API server's words for an error, with what to do for the common ones.
pub fn describe_kube_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "forbidden: {} (grant the agent's ClusterRole and Role, deploy/kubernetes/clusterrole.yaml and role.yaml)",
            status.message
        ),
        kube::Error::Api(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            format!("member cluster API unreachable: {}", error_chain(error))
        }
        other => error_chain(other),
    }
}

/// One line for a watcher error, with the API server's own message when it sent one.
fn error_message(error: &watcher::Error) -> String {
    let source = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        watcher::Error::WatchError(status) => return status.message.clone(),
        watcher::Error::NoResourceVersion => return error.to_string(),
    };
    describe_kube_error(source)
}
