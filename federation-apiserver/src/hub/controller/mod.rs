//! The hub's reconcile loop, in kube-runtime's shape: observe → decide → apply.
//!
//! - *observe* ([`observe`]): every Cluster and FederatedIngress is listed once, then
//!   kept current from a store watch; agents' messages name the clusters they concern
//!   ([`Hub::take_dirty`]); leases and timers are checked on a tick. Each change marks
//!   what it affects dirty.
//! - *decide* ([`decide::decide`]): a pure function of the observed world and the dirty
//!   set: placement, conflicts and plans, status, serving state ([`serving`]), and the
//!   routed ingresses DNS answers from.
//! - *apply* (this module): publish plans, persist routing state that changed, rebuild
//!   the DNS snapshot when an answer-relevant input changed, record routing Events,
//!   write the statuses that differ (concurrently, in one batch).
//!
//! [`Controller::start`] lists, loads the persisted routing state and runs the first
//! pass before anything is served, so the DNS server answers from persisted state from
//! its very first packet after a restart and agents that reconnect are never sent an
//! empty plan.
//!
//! # Guarantees
//! Status is written only when it differs from what is stored (transition times move
//! only when a condition's status does). A pass runs only when something is dirty or a
//! timer (failback hold, Failover wait, end of restoring) falls due: an idle hub lists
//! and decodes nothing.

pub mod decide;
pub mod observe;
pub mod serving;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fedingress_api::conflict::Conflict;
use fedingress_api::plan::IngressKey;
use fedingress_api::{
    Cluster, ClusterStatus, FederatedIngress, FederatedIngressStatus, Resource, Time,
};
use fedingress_dns::RoutedIngress;
use fedingress_store::StoreError;
use futures_util::{StreamExt, stream};
use tracing::Instrument;

use self::decide::{Dirty, IngressOutcome, Pass, World, dns_status};
use self::observe::Cache;
use super::Hub;
use super::events::Recorder;
use super::gslb::{AnswerChange, Gslb};
use super::routing_state::{IngressRouting, RoutingStore};
use super::tokens::TokenStore;
use crate::metrics::HubMetrics;
use crate::registry::{Registry, Scope};
use crate::status::ApiError;

/// Wait after a trigger before a pass, so bursts coalesce.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// Status writes in flight at once.
const WRITE_CONCURRENCY: usize = 32;
/// Why a session ends when its Cluster's provider changed.
const PROVIDER_CHANGED: &str = "the cluster's provider changed: reconnect for a new Welcome";

pub struct Controller {
    registry: Registry,
    hub: Arc<Hub>,
    tokens: TokenStore,
    routing_store: RoutingStore,
    recorder: Recorder,
    /// DNS steering, when the embedded DNS server runs.
    gslb: Option<Gslb>,
    metrics: Arc<HubMetrics>,
    tick: Duration,

    cache: Cache,
    routing: BTreeMap<IngressKey, IngressRouting>,
    placements: BTreeMap<IngressKey, Vec<String>>,
    conflicts: BTreeMap<IngressKey, Vec<Conflict>>,
    routed: BTreeMap<IngressKey, RoutedIngress>,
    /// Connected flag per cluster at the last pass (leases expire without events).
    connected: BTreeMap<String, bool>,
    /// Ingresses whose routing changes with time alone, and when (unix ms).
    timers: BTreeMap<IngressKey, u64>,
    /// Why names are not (fully) served, from the last snapshot build, by ingress.
    dns_problems: HashMap<String, Vec<String>>,
    restoring: bool,
    pending: Dirty,
    last_prune: Option<Instant>,
}

impl Controller {
    /// Lists every object, loads the persisted routing state and runs the first pass
    /// (plans published, DNS snapshot built), so that what is served next starts right.
    pub async fn start(
        registry: Registry,
        hub: Arc<Hub>,
        tokens: TokenStore,
        gslb: Option<Gslb>,
        metrics: Arc<HubMetrics>,
    ) -> anyhow::Result<Self> {
        use anyhow::Context;
        let routing_store = RoutingStore::new(registry.store().clone());
        let routing = routing_store.load().await?;
        let cache = Cache::list(&registry)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))
            .context("listing clusters and ingresses")?;
        let tick = (hub.settings.lease / 4).max(Duration::from_millis(100));
        tracing::info!(
            clusters = cache.clusters.len(),
            ingresses = cache.ingresses.len(),
            routing_states = routing.len(),
            "controller starting from stored state"
        );
        let mut controller = Self {
            recorder: Recorder::new(registry.clone()),
            routing_store,
            registry,
            hub,
            tokens,
            gslb,
            metrics,
            tick,
            cache,
            routing,
            placements: BTreeMap::new(),
            conflicts: BTreeMap::new(),
            routed: BTreeMap::new(),
            connected: BTreeMap::new(),
            timers: BTreeMap::new(),
            dns_problems: HashMap::new(),
            restoring: true,
            pending: Dirty {
                all: true,
                replan: true,
                ..Dirty::default()
            },
            last_prune: None,
        };
        controller.pass(true).await;
        Ok(controller)
    }

    /// Runs until the process ends.
    pub async fn run(mut self) {
        let mut changes = self.hub.subscribe_changes();
        loop {
            let mut events = match self
                .registry
                .store()
                .watch(&Cache::watch_prefix(), self.cache.revision)
                .await
            {
                Ok(events) => events,
                Err(e) => {
                    self.relist(&e).await;
                    continue;
                }
            };
            loop {
                let wait = self.next_wait();
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(event)) => self.observe(&event).await,
                        Some(Err(e)) => { self.relist(&e).await; break; }
                        None => { self.relist(&StoreError::Closed).await; break; }
                    },
                    _ = changes.changed() => {}
                    () = tokio::time::sleep(wait) => {}
                }
                // Debounce: let a burst land, then take everything that arrived.
                tokio::time::sleep(DEBOUNCE).await;
                let mut broken = None;
                while let Some(Some(event)) = futures_util::FutureExt::now_or_never(events.next()) {
                    match event {
                        Ok(event) => self.observe(&event).await,
                        Err(e) => {
                            broken = Some(e);
                            break;
                        }
                    }
                }
                self.collect_triggers();
                if !self.pending.is_empty() {
                    self.pass(false).await;
                }
                if let Some(e) = broken {
                    self.relist(&e).await;
                    break;
                }
            }
        }
    }

    /// How long until the next timer or lease check.
    fn next_wait(&self) -> Duration {
        let now_ms = now_ms();
        let timer = self
            .timers
            .values()
            .min()
            .map(|&at| Duration::from_millis(at.saturating_sub(now_ms)));
        let restoring = self.restoring.then(|| self.hub.restoring_left());
        [Some(self.tick), timer, restoring]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.tick)
            .max(Duration::from_millis(5))
    }

    async fn observe(&mut self, event: &fedingress_store::Event) {
        let observed = self.cache.apply(event);
        for gone in observed.deleted_clusters {
            match self.tokens.revoke_all(&gone).await {
                Ok(n) => {
                    tracing::info!(cluster = %gone, tokens = n, "cluster deleted: tokens revoked")
                }
                Err(e) => {
                    tracing::warn!(cluster = %gone, error = %e, "revoking tokens of a deleted cluster failed")
                }
            }
        }
        for cluster in observed.provider_changed {
            tracing::info!(
                cluster,
                "cluster provider changed: ending its agent's session"
            );
            self.hub.end_session(&cluster, PROVIDER_CHANGED);
        }
        self.pending.merge(observed.dirty);
    }

    /// The watch broke (compaction, store closed): list again and recompute everything.
    async fn relist(&mut self, error: &StoreError) {
        tracing::warn!(error = %error, "controller watch ended; listing again");
        loop {
            match Cache::list(&self.registry).await {
                Ok(cache) => {
                    for (name, cluster) in &cache.clusters {
                        let before = self.cache.clusters.get(name).map(|c| c.spec.provider);
                        if before.is_some_and(|p| p != cluster.spec.provider) {
                            self.hub.end_session(name, PROVIDER_CHANGED);
                        }
                    }
                    let gone: Vec<String> = self
                        .cache
                        .clusters
                        .keys()
                        .filter(|n| !cache.clusters.contains_key(*n))
                        .cloned()
                        .collect();
                    self.cache = cache;
                    for cluster in gone {
                        if let Err(e) = self.tokens.revoke_all(&cluster).await {
                            tracing::warn!(cluster, error = %e, "revoking tokens of a deleted cluster failed");
                        }
                    }
                    self.pending.all = true;
                    self.pending.replan = true;
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e.message, "listing for the controller failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Agent messages, lease expiries, due timers and the end of restoring.
    fn collect_triggers(&mut self) {
        self.pending.clusters.extend(self.hub.take_dirty());
        for (name, agent) in self.hub.agents() {
            if self.connected.get(&name) != Some(&agent.connected) {
                self.pending.clusters.insert(name.clone());
                self.connected.insert(name, agent.connected);
            }
        }
        if self.restoring && !self.hub.restoring() {
            tracing::info!("restoring ended: clusters whose agents did not reconnect are offline");
            self.restoring = false;
            self.pending.all = true;
        }
        let now = now_ms();
        let due: Vec<IngressKey> = self
            .timers
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.timers.remove(&key);
            self.pending.ingresses.insert(key);
        }
    }

    /// One pass over what is pending.
    async fn pass(&mut self, first: bool) {
        let dirty = std::mem::take(&mut self.pending);
        let started = Instant::now();
        let span = tracing::info_span!(
            "reconcile",
            all = dirty.all,
            ingresses = dirty.ingresses.len(),
            clusters = dirty.clusters.len()
        );
        async {
            let agents = self.hub.agents();
            for (name, agent) in &agents {
                self.connected.insert(name.clone(), agent.connected);
            }
            self.restoring = self.restoring && self.hub.restoring();
            let now = Time(chrono::Utc::now());
            let world = World {
                clusters: &self.cache.clusters,
                ingresses: &self.cache.ingresses,
                agents: &agents,
                restoring: self.restoring,
                routing: &self.routing,
                placements: &self.placements,
                conflicts: &self.conflicts,
                now,
            };
            // CPU-bound at scale: keep agent sessions' timers running meanwhile.
            let decided = tokio::task::block_in_place(|| decide::decide(&world, &dirty));
            self.metrics
                .observe_dirty(decided.ingresses.len(), dirty.clusters.len());
            self.apply(decided, now, first).await;
        }
        .instrument(span)
        .await;
        self.metrics.observe_pass(started.elapsed());
        if self
            .last_prune
            .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
        {
            self.last_prune = Some(Instant::now());
            self.recorder.prune(Time(chrono::Utc::now())).await;
        }
    }

    /// Publishes, persists, rebuilds DNS, records events and writes status.
    async fn apply(&mut self, pass: Pass, now: Time, first: bool) {
        let Pass {
            placements,
            conflicts,
            plans,
            ingresses,
            cluster_statuses,
        } = pass;
        for (key, placed) in placements {
            if self.cache.ingresses.contains_key(&key) {
                self.placements.insert(key, placed);
            } else {
                self.placements.remove(&key);
            }
        }
        if let Some(conflicts) = conflicts {
            self.conflicts = conflicts;
        }
        if let Some(plans) = plans {
            let version = u64::try_from(self.cache.revision).unwrap_or_default();
            for name in self.cache.clusters.keys() {
                let plan = plans.get(name).cloned().unwrap_or_default();
                self.hub.publish(name, plan, version);
            }
            let names: Vec<String> = self.cache.clusters.keys().cloned().collect();
            self.hub.retain_clusters(&names);
        }

        // Routing state: remember, persist what changed, arm timers.
        let now_ms = now_ms();
        let mut changed_routes: BTreeSet<String> = BTreeSet::new();
        let mut statuses: Vec<(IngressKey, FederatedIngressStatus)> = Vec::new();
        let mut saves = Vec::new();
        for (key, outcome) in ingresses {
            let IngressOutcome {
                status,
                routing,
                routed,
            } = outcome;
            match &routing {
                Some(routing) if self.routing.get(&key) != Some(routing) => {
                    saves.push((key.clone(), Some(routing.clone())));
                    self.routing.insert(key.clone(), routing.clone());
                }
                None if self.routing.remove(&key).is_some() => saves.push((key.clone(), None)),
                _ => {}
            }
            match routing
                .as_ref()
                .and_then(|r| self.timer_of(&key, r, now_ms))
            {
                Some(at) => self.timers.insert(key.clone(), at),
                None => self.timers.remove(&key),
            };
            let before = self.routed.get(&key);
            if before != routed.as_ref() {
                changed_routes.insert(key.to_string());
                match routed {
                    Some(routed) => self.routed.insert(key.clone(), routed),
                    None => self.routed.remove(&key),
                };
            }
            if self.cache.ingresses.contains_key(&key) {
                statuses.push((key, status));
            }
        }
        self.save_routing(saves).await;
        self.metrics.set_routing(&self.routing, now_ms);

        // DNS: rebuilt only when an answer-relevant input changed.
        let mut answer_changes: Vec<AnswerChange> = Vec::new();
        if let Some(gslb) = &mut self.gslb {
            if !changed_routes.is_empty() || first {
                let mut order: Vec<&RoutedIngress> = self.routed.values().collect();
                let age = |r: &RoutedIngress| {
                    r.ingress
                        .split_once('/')
                        .map(|(ns, name)| IngressKey::new(ns, name))
                        .and_then(|k| self.cache.ingresses.get(&k))
                        .and_then(|i| i.metadata().creation_timestamp.map(|t| t.0))
                };
                order.sort_by(|a, b| (age(a), &a.ingress).cmp(&(age(b), &b.ingress)));
                let revision = self.cache.revision;
                let step = tokio::task::block_in_place(|| {
                    gslb.step(&order, &changed_routes, revision, first)
                });
                if let Some(took) = step.build_time {
                    self.metrics.observe_snapshot_build(took);
                }
                for change in &step.changes {
                    self.metrics.count_answer_change(change);
                }
                self.dns_problems = step.problems;
                answer_changes = step.changes;
            }
            let snapshot = gslb.snapshot();
            for (key, status) in &mut statuses {
                let Some(ingress) = self.cache.ingresses.get(key) else {
                    continue;
                };
                let dns_name = ingress
                    .spec
                    .effective_dns_name()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                dns_status(
                    status,
                    &dns_name,
                    self.dns_problems.get(&key.to_string()),
                    &snapshot,
                    ingress.metadata().generation.unwrap_or(0),
                    now,
                );
            }
        }
        for change in answer_changes {
            self.record_change(&change, now).await;
        }

        // Status writes, concurrently.
        let ingress_writes: Vec<(FederatedIngress, FederatedIngressStatus)> = statuses
            .into_iter()
            .filter_map(|(key, status)| {
                let ingress = self.cache.ingresses.get(&key)?;
                (ingress.status.as_ref() != Some(&status)).then(|| (ingress.clone(), status))
            })
            .collect();
        let cluster_writes: Vec<(Cluster, ClusterStatus)> = cluster_statuses
            .into_iter()
            .filter_map(|(name, status)| Some((self.cache.clusters.get(&name)?.clone(), status)))
            .collect();
        let registry = &self.registry;
        stream::iter(ingress_writes)
            .for_each_concurrent(WRITE_CONCURRENCY, |(object, status)| async move {
                write_status(registry, &object, status).await;
            })
            .await;
        stream::iter(cluster_writes)
            .for_each_concurrent(WRITE_CONCURRENCY, |(object, status)| async move {
                write_status(registry, &object, status).await;
            })
            .await;
    }

    /// When `key`'s routing next changes with time alone.
    fn timer_of(&self, key: &IngressKey, routing: &IngressRouting, now_ms: u64) -> Option<u64> {
        let ingress = self.cache.ingresses.get(key)?;
        let held = routing
            .clusters
            .values()
            .filter(|s| s.healthy == Some(true))
            .filter_map(|s| s.held_until_ms)
            .filter(|&at| at > now_ms)
            .min();
        let failover = fedingress_dns::routing::next_failover_change_ms(
            &ingress.spec.traffic,
            &routing.failover,
        );
        held.into_iter().chain(failover).min()
    }

    async fn save_routing(&self, saves: Vec<(IngressKey, Option<IngressRouting>)>) {
        let store = &self.routing_store;
        stream::iter(saves)
            .for_each_concurrent(WRITE_CONCURRENCY, |(key, routing)| async move {
                if let Err(e) = store.save(&key, routing.as_ref()).await {
                    tracing::warn!(ingress = %key, error = %e, "persisting routing state failed");
                }
            })
            .await;
    }

    async fn record_change(&mut self, change: &AnswerChange, now: Time) {
        let Some(ingress) = change
            .ingress
            .split_once('/')
            .map(|(ns, name)| IngressKey::new(ns, name))
            .and_then(|k| self.cache.ingresses.get(&k))
        else {
            return;
        };
        let dns_name = ingress.spec.effective_dns_name().unwrap_or_default();
        let (type_, reason, verb) = if change.joined {
            ("Normal", "ClusterJoinedAnswers", "joined")
        } else {
            ("Warning", "ClusterLeftAnswers", "left")
        };
        let message = format!(
            "cluster {} {verb} the DNS answers for {dns_name}: {}",
            change.cluster, change.detail
        );
        let ingress = ingress.clone();
        self.recorder
            .record(&ingress, type_, reason, &message, now)
            .await;
    }
}

fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or_default()
}

async fn write_status<R: Resource + HasStatus>(registry: &Registry, object: &R, status: R::Status) {
    let meta = object.metadata();
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone();
    let mut next = object.clone();
    next.set_status(status);
    // The status is computed from this resourceVersion: a concurrent write wins and the
    // watch brings the object back for another pass.
    let result = registry
        .update::<R>(namespace.as_deref(), &name, Scope::Status, false, |_| {
            Ok(next.clone())
        })
        .await;
    if let Err(e) = result {
        log_skipped::<R>(&name, &e);
    }
}

fn log_skipped<R: Resource>(name: &str, e: &ApiError) {
    tracing::debug!(kind = R::KIND, name, error = %e, "status write skipped");
}

/// Kinds whose status the controller writes.
pub trait HasStatus {
    type Status;
    fn set_status(&mut self, status: Self::Status);
}

impl HasStatus for Cluster {
    type Status = ClusterStatus;
    fn set_status(&mut self, status: ClusterStatus) {
        self.status = Some(status);
    }
}

impl HasStatus for FederatedIngress {
    type Status = FederatedIngressStatus;
    fn set_status(&mut self, status: FederatedIngressStatus) {
        self.status = Some(status);
    }
}
