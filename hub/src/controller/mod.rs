//! The hub's reconcile loop, in kube-runtime's shape: observe → decide → apply.
//!
//! - *observe* ([`observe`]): every Cluster and FederatedIngress is listed once, then
//!   kept current from a store watch; agents' messages name the clusters they concern
//!   ([`Sessions::take_dirty`]); leases and timers are checked on a tick. Each change marks
//!   what it affects dirty, and does nothing else.
//! - *decide* ([`decide::decide`]): a pure function of the observed world and the dirty
//!   set: placement, conflicts and plans, status, serving state ([`serving`]) and when
//!   it next changes with time alone (failback holds, Failover waits), the routed
//!   ingresses DNS answers from, and what is done to agents ([`decide::AgentAction`]: a
//!   deleted cluster's credentials revoked, sessions ended). Once DNS is published,
//!   [`decide::settle`], pure too, completes each status with what DNS serves and turns
//!   the answer changes into Events.
//! - *apply* (this module): do the agent actions, publish plans, persist routing state
//!   that changed and arm its timers, publish what DNS serves through this replica's
//!   [`DnsReplica`] (which stores it and rebuilds the snapshot) when an answer-relevant
//!   input changed, hand each completed serial to the DNS providers
//!   ([`providers`](super::providers)); then record the Events and write the statuses
//!   `settle` says (concurrently, in one batch). A provider's sync report is observed
//!   too: it marks the ingresses whose provider status changed dirty, and the Events it
//!   asks for are recorded by the next pass.
//!
//! # Roles
//! Every replica runs a controller. Each computes placement and plans itself (a pure
//! function of the stored objects) and publishes them to the agents it holds. Only the
//! leader ([`Role::Leader`]) writes: routing state, DNS state, Events, statuses, token
//! revocations, all through its fenced store; and only it syncs the DNS providers. A
//! follower's [`DnsReplica`] serves DNS from the DNS state the leader stored, rebuilt
//! when a batch completes, with the same serial. With one replica on redb, the role is
//! always leader and the store unfenced.
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
pub mod pools;
pub mod serving;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fedingress_api::conflict::Conflict;
use fedingress_api::plan::{ClusterPlan, IngressKey};
use fedingress_api::{
    Cluster, ClusterStatus, FederatedIngress, FederatedIngressStatus, Resource, Time,
};
use fedingress_dns::RoutedIngress;
use fedingress_store::{Store, StoreError};
use futures_util::{StreamExt, stream};
use tokio::sync::watch;
use tracing::Instrument;

use self::decide::{AgentAction, Dirty, IngressOutcome, Pass, Served, World, Writes};
use self::observe::Cache;
use self::pools::{Bindings, Book, Members};
use super::AgentState;
use super::Sessions;
use super::dns_state::{DnsReplica, DnsStore, Published};
use super::gslb::{AnswerChange, Gslb};
use super::providers::{ProviderNameStatus, ProviderSet};
use super::replication::Role;
use super::routing_state::{IngressRouting, RoutingStore};
use super::tokens::TokenStore;
use crate::metrics::HubMetrics;
use fedingress_api::pool::schedule::Policy;
use fedingress_api::pool::{IngressPool, IngressPoolStatus};
use fedingress_apiserver::events::Recorder;
use fedingress_apiserver::registry::{Registry, Scope};
use fedingress_apiserver::status::ApiError;

/// Wait after a trigger before a pass, so bursts coalesce.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// Status writes in flight at once.
const WRITE_CONCURRENCY: usize = 32;
/// An IngressPool status whose only change is load is rewritten at most this often.
const POOL_LOAD_INTERVAL: Duration = Duration::from_secs(15);

/// The field manager of the controller's writes.
pub const CONTROLLER_MANAGER: &str = "fedingress-controller";

/// What the controller writes with, while it leads (built on the fenced store).
struct Writers {
    store: Arc<dyn Store>,
    registry: Registry,
    tokens: TokenStore,
    routing: RoutingStore,
    recorder: Recorder,
}

impl Writers {
    fn new(store: Arc<dyn Store>) -> Self {
        // Its writes (status, finalizers, Events) are recorded in managedFields as its own.
        let registry = Registry::new(store.clone()).managed_by(CONTROLLER_MANAGER);
        Self {
            recorder: Recorder::new(registry.clone()),
            registry,
            tokens: TokenStore::new(store.clone()),
            routing: RoutingStore::new(store.clone()),
            store,
        }
    }
}

/// What a controller is started with.
pub struct Parts {
    /// Reads (lists, watches) go through it, on the plain store.
    pub registry: Registry,
    /// The agent sessions this replica holds: plans are published there.
    pub sessions: Arc<Sessions>,
    /// What every cluster's agent said: `sessions` itself with one replica, the mirror
    /// of the shared agent records with several.
    pub agents: Arc<Sessions>,
    /// Leader or follower (always leader with one replica).
    pub role: watch::Receiver<Role>,
    /// DNS steering, when the embedded DNS server runs.
    pub gslb: Option<Gslb>,
    /// The configured DNS providers (`dns.providers`), synced while leading.
    pub providers: Option<ProviderSet>,
    pub metrics: Arc<HubMetrics>,
}

pub struct Controller {
    registry: Registry,
    sessions: Arc<Sessions>,
    agents: Arc<Sessions>,
    role: watch::Receiver<Role>,
    /// `Some` while leading.
    writers: Option<Writers>,
    /// What DNS this replica serves: published while leading, followed otherwise.
    dns: DnsReplica,
    /// The configured DNS providers: fed each completed serial, synced while leading.
    providers: Option<ProviderSet>,
    metrics: Arc<HubMetrics>,
    tick: Duration,

    cache: Cache,
    /// Every cluster's shares after the last replan (pools are added when published).
    plans: BTreeMap<String, ClusterPlan>,
    /// Every cluster's pools at the last pass.
    book: Book,
    /// Where each share is bound, by cluster (seeded from stored status at start).
    bindings: Bindings,
    /// Clusters that took no new share at the last pass.
    saturated: BTreeSet<String>,
    policy: Policy,
    /// When each pool's status was last written.
    pool_written: BTreeMap<String, Instant>,
    routing: BTreeMap<IngressKey, IngressRouting>,
    placements: BTreeMap<IngressKey, Vec<String>>,
    conflicts: BTreeMap<IngressKey, Vec<Conflict>>,
    /// Connected flag per cluster at the last pass (leases expire without events).
    connected: BTreeMap<String, bool>,
    /// Ingresses whose routing changes with time alone, and when (unix ms).
    timers: BTreeMap<IngressKey, u64>,
    restoring: bool,
    pending: Dirty,
    last_prune: Option<Instant>,
}

impl Controller {
    /// Lists every object, loads the persisted routing and DNS state and runs the first
    /// pass (plans published, DNS snapshot built), so that what is served next starts
    /// right.
    pub async fn start(parts: Parts) -> anyhow::Result<Self> {
        use anyhow::Context;
        let Parts {
            registry,
            sessions,
            agents,
            role,
            gslb,
            providers,
            metrics,
        } = parts;
        let routing = RoutingStore::new(registry.store().clone()).load().await?;
        let cache = Cache::list(&registry)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))
            .context("listing clusters and ingresses")?;
        // DNS answers from the stored state from the first packet.
        let dns_store = DnsStore::new(registry.store().clone());
        let dns = DnsReplica::load(dns_store, gslb, metrics.clone(), &cache.ingresses)
            .await
            .context("loading the DNS state")?;
        let tick = (agents.settings.lease / 4).max(Duration::from_millis(100));
        tracing::info!(
            clusters = cache.clusters.len(),
            ingresses = cache.ingresses.len(),
            routing_states = routing.len(),
            dns_names = dns.served().len(),
            "controller starting from stored state"
        );
        let mut controller = Self {
            registry,
            sessions,
            agents,
            role,
            writers: None,
            dns,
            providers,
            metrics,
            tick,
            bindings: pools::stored_bindings(&cache.ingresses, now_ms()),
            cache,
            plans: BTreeMap::new(),
            book: Book::new(),
            saturated: BTreeSet::new(),
            policy: Policy::default(),
            pool_written: BTreeMap::new(),
            routing,
            placements: BTreeMap::new(),
            conflicts: BTreeMap::new(),
            connected: BTreeMap::new(),
            timers: BTreeMap::new(),
            restoring: true,
            pending: Dirty {
                all: true,
                replan: true,
                ..Dirty::default()
            },
            last_prune: None,
        };
        controller.take_role().await;
        controller.pass(true).await;
        Ok(controller)
    }

    /// Runs until the process ends.
    pub async fn run(mut self) {
        let mut changes = self.agents.subscribe_changes();
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
                self.dns.watch(&self.cache.ingresses).await;
                let wait = self.next_wait();
                let mut dns_only = false;
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(event)) => self.observe(&event),
                        Some(Err(e)) => { self.relist(&e).await; break; }
                        None => { self.relist(&StoreError::Closed).await; break; }
                    },
                    event = self.dns.next_event() => {
                        self.dns.observe(event, &self.cache.ingresses);
                        dns_only = true;
                    }
                    _ = changes.changed() => {}
                    _ = self.role.changed() => self.take_role().await,
                    () = providers_changed(&mut self.providers) => self.observe_providers(),
                    () = tokio::time::sleep(wait) => {}
                }
                // Debounce: let a burst land, then take everything that arrived. The
                // stored DNS state needs none (its batches end with the serial key): a
                // follower serves each batch as soon as that arrives, debounce or not.
                if !dns_only {
                    let until = tokio::time::Instant::now() + DEBOUNCE;
                    loop {
                        tokio::select! {
                            () = tokio::time::sleep_until(until) => break,
                            event = self.dns.next_event() => self.dns.observe(event, &self.cache.ingresses),
                        }
                    }
                }
                let mut broken = None;
                while let Some(Some(event)) = futures_util::FutureExt::now_or_never(events.next()) {
                    match event {
                        Ok(event) => self.observe(&event),
                        Err(e) => {
                            broken = Some(e);
                            break;
                        }
                    }
                }
                while let Some(event) = futures_util::FutureExt::now_or_never(self.dns.next_event())
                {
                    self.dns.observe(event, &self.cache.ingresses);
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

    /// Takes the role the election says: a new leader loads its predecessor's routing
    /// memory and recomputes everything; a follower stops writing and serves the stored
    /// DNS state.
    async fn take_role(&mut self) {
        let role = self.role.borrow_and_update().clone();
        match role {
            Role::Leader(store)
                if self
                    .writers
                    .as_ref()
                    .is_none_or(|w| !Arc::ptr_eq(&w.store, &store)) =>
            {
                tracing::info!("leading: this replica's controller writes");
                let writers = Writers::new(store);
                match writers.routing.load().await {
                    Ok(routing) => self.routing = routing,
                    Err(e) => {
                        tracing::warn!(error = %e, "loading routing state failed; deciding from what agents report")
                    }
                }
                self.dns.lead(DnsStore::new(writers.store.clone()));
                self.writers = Some(writers);
                if let Some(providers) = &mut self.providers {
                    providers.lead();
                }
                self.pending.all = true;
                self.pending.replan = true;
            }
            Role::Follower if self.writers.is_some() => {
                tracing::info!("following: another replica's controller writes");
                self.writers = None;
                if let Some(providers) = &mut self.providers {
                    providers.follow();
                }
                self.dns.follow(&self.cache.ingresses);
            }
            _ => {}
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
        let restoring = self.restoring.then(|| self.agents.restoring_left());
        let drain = pools::next_drain_end(&self.bindings)
            .map(|at| Duration::from_millis(at.saturating_sub(now_ms)));
        [Some(self.tick), timer, restoring, drain]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.tick)
            .max(Duration::from_millis(5))
    }

    /// One store event: the cache takes it, and what it affects is pending.
    fn observe(&mut self, event: &fedingress_store::Event) {
        let dirty = self.cache.apply(event);
        self.pending.merge(dirty);
    }

    /// The watch broke (compaction, store closed): list again and recompute everything.
    async fn relist(&mut self, error: &StoreError) {
        tracing::warn!(error = %error, "controller watch ended; listing again");
        loop {
            match Cache::list(&self.registry).await {
                Ok(listed) => {
                    let dirty = self.cache.replace(listed);
                    self.pending.merge(dirty);
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
        self.pending.clusters.extend(self.agents.take_dirty());
        for (name, agent) in self.agents.agents() {
            if self.connected.get(&name) != Some(&agent.connected) {
                self.pending.clusters.insert(name.clone());
                self.connected.insert(name, agent.connected);
            }
        }
        if self.restoring && !self.agents.restoring() {
            tracing::info!("restoring ended: clusters whose agents did not reconnect are offline");
            self.restoring = false;
            self.pending.all = true;
        }
        let now = now_ms();
        for (cluster, bindings) in &self.bindings {
            let drained = bindings.values().any(|b| {
                b.leaving
                    .as_ref()
                    .and_then(|l| l.drain_until_ms)
                    .is_some_and(|at| at <= now)
            });
            if drained {
                self.pending.clusters.insert(cluster.clone());
            }
        }
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
            let mut dirty = dirty;
            let members = self.agents.members();
            let (views, saturated) =
                tokio::task::block_in_place(|| self.observe_pools(&members, &mut dirty));
            for (name, agent) in &views {
                self.connected.insert(name.clone(), agent.connected);
            }
            self.restoring = self.restoring && self.agents.restoring();
            let now = Time(chrono::Utc::now());
            let world = World {
                clusters: &self.cache.clusters,
                ingresses: &self.cache.ingresses,
                agents: &views,
                members: &members,
                book: &self.book,
                bindings: &self.bindings,
                saturated: &saturated,
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
        if let Some(writers) = &mut self.writers
            && self
                .last_prune
                .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
        {
            self.last_prune = Some(Instant::now());
            writers.recorder.prune(Time(chrono::Utc::now())).await;
        }
    }

    /// Does what the pass decided: the agent actions and plans on every replica; while
    /// leading, also persists routing state and arms its timers, publishes DNS, then
    /// records the Events and writes the statuses [`decide::settle`] says.
    async fn apply(&mut self, pass: Pass, now: Time, first: bool) {
        let Pass {
            placements,
            conflicts,
            plans,
            ingresses,
            cluster_statuses,
            agent_actions,
            events,
        } = pass;
        for action in agent_actions {
            self.apply_agent_action(action).await;
        }
        self.remember_placement(placements, conflicts);
        if let Some(plans) = plans {
            self.plans = plans;
            // New shares on clusters with pools are bound on the pass that follows.
            self.pending.clusters.extend(
                self.book
                    .keys()
                    .filter(|c| self.plans.contains_key(*c))
                    .cloned(),
            );
        }
        self.publish_plans();
        if self.writers.is_none() {
            // A follower: the leader persists, serves DNS state and writes status.
            return;
        }
        let (routed_changes, statuses) = self.apply_routing(ingresses).await;
        let answer_changes = self.publish_dns(routed_changes, first).await;
        let providers = self.provider_statuses(&statuses);
        let snapshot = self.dns.snapshot();
        let served = snapshot.as_deref().map(|snapshot| Served {
            snapshot,
            problems: self.dns.problems(),
            providers: &providers,
        });
        let writes = decide::settle(
            &self.cache.ingresses,
            statuses,
            served.as_ref(),
            events,
            &answer_changes,
            now,
        );
        self.write(writes, cluster_statuses, now).await;
        self.write_pool_statuses(now).await;
    }

    /// Writes each IngressPool's status where it changed (while leading); a change of
    /// load figures alone at most every [`POOL_LOAD_INTERVAL`].
    async fn write_pool_statuses(&mut self, now: Time) {
        let Some(writers) = &self.writers else {
            return;
        };
        let mut writes = Vec::new();
        for (name, pool) in &self.cache.pools {
            let state = self
                .book
                .get(&pool.spec.cluster)
                .and_then(|pools| pools.iter().find(|p| &p.name == name));
            let status = pools::pool_status(
                pool,
                state,
                self.bindings.get(&pool.spec.cluster),
                &self.policy,
                now,
            );
            let stored = pool.status.clone().unwrap_or_default();
            if status == stored {
                continue;
            }
            let load_only = IngressPoolStatus {
                load: stored.load,
                ..status.clone()
            } == stored;
            let recent = self
                .pool_written
                .get(name)
                .is_some_and(|at| at.elapsed() < POOL_LOAD_INTERVAL);
            if load_only && recent {
                continue;
            }
            self.pool_written.insert(name.clone(), Instant::now());
            writes.push((pool.clone(), status));
        }
        let registry = &writers.registry;
        stream::iter(writes)
            .for_each_concurrent(WRITE_CONCURRENCY, |(object, status)| async move {
                write_status(registry, &object, status).await;
            })
            .await;
    }

    fn remember_placement(
        &mut self,
        placements: BTreeMap<IngressKey, Vec<String>>,
        conflicts: Option<BTreeMap<IngressKey, Vec<Conflict>>>,
    ) {
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
    }

    /// Hands every cluster its plan (its shares, and its pools with the bindings and
    /// provisions); sessions of clusters that are gone end. A plan that did not change
    /// is not sent again ([`Sessions::publish`]).
    fn publish_plans(&self) {
        let version = u64::try_from(self.cache.revision).unwrap_or_default();
        for name in self.cache.clusters.keys() {
            let mut plan = self.plans.get(name).cloned().unwrap_or_default();
            let provisions =
                pools::provisions(self.book.get(name), &self.cache.pools, &self.cache.claims);
            let pool_plan =
                pools::pool_plan(self.book.get(name), self.bindings.get(name), provisions);
            if !pool_plan.is_empty() {
                plan.pools = Arc::new(pool_plan);
            }
            self.sessions.publish(name, plan, version);
        }
        let names: Vec<String> = self.cache.clusters.keys().cloned().collect();
        self.sessions.retain_clusters(&names);
    }

    /// The pools' part of a pass, before [`decide::decide`]: every pool's members, VIPs
    /// and load ([`pools::book`]); the bindings of every cluster with pools, rebound
    /// ([`pools::bind`], the ingresses whose binding changed marked dirty); each
    /// cluster's members folded into one state ([`pools::cluster_view`]); and the
    /// clusters that take no new share.
    fn observe_pools(
        &mut self,
        members: &Members,
        dirty: &mut Dirty,
    ) -> (BTreeMap<String, AgentState>, BTreeSet<String>) {
        self.book = pools::book(&self.cache.clusters, &self.cache.pools, members);
        let inputs = pools::BindInputs {
            book: &self.book,
            members,
            ingresses: &self.cache.ingresses,
            claims: &self.cache.claims,
            now_ms: now_ms(),
            policy: self.policy,
        };
        let mut bindings = Bindings::new();
        for cluster in self.book.keys() {
            let shares: Vec<&IngressKey> = self
                .plans
                .get(cluster)
                .map(|p| p.ingresses.keys().collect())
                .unwrap_or_default();
            let previous = self.bindings.get(cluster);
            let next = pools::bind(&inputs, cluster, &shares, previous);
            for (key, binding) in &next {
                if previous.and_then(|p| p.get(key)) != Some(binding) {
                    dirty.ingresses.insert(key.clone());
                }
            }
            for key in previous.into_iter().flat_map(|p| p.keys()) {
                if !next.contains_key(key) {
                    dirty.ingresses.insert(key.clone());
                }
            }
            if !next.is_empty() {
                bindings.insert(cluster.clone(), next);
            }
        }
        for (cluster, previous) in &self.bindings {
            if !bindings.contains_key(cluster) {
                dirty.ingresses.extend(previous.keys().cloned());
            }
        }
        self.bindings = bindings;
        let views: BTreeMap<String, AgentState> = members
            .iter()
            .filter_map(|(cluster, m)| {
                let view =
                    pools::cluster_view(m, self.book.get(cluster), self.bindings.get(cluster))?;
                Some((cluster.clone(), view))
            })
            .collect();
        let saturated =
            pools::saturated_clusters(&self.cache.clusters, &self.book, &views, &self.policy);
        if saturated != self.saturated {
            // Placement reads it: new placements avoid (or may use again) these clusters.
            dirty.all = true;
            self.saturated.clone_from(&saturated);
        }
        (views, saturated)
    }

    /// Remembers and persists the routing state that changed and arms its timers.
    /// Returns what DNS is to serve differently, and the statuses of the ingresses that
    /// still exist (without their DNS part).
    async fn apply_routing(
        &mut self,
        outcomes: BTreeMap<IngressKey, IngressOutcome>,
    ) -> (
        Vec<(IngressKey, Option<RoutedIngress>)>,
        Vec<(IngressKey, FederatedIngressStatus)>,
    ) {
        let mut routed_changes = Vec::new();
        let mut statuses = Vec::new();
        let mut saves = Vec::new();
        for (key, outcome) in outcomes {
            let IngressOutcome {
                status,
                routing,
                routed,
                timer,
            } = outcome;
            match routing {
                Some(routing) if self.routing.get(&key) != Some(&routing) => {
                    saves.push((key.clone(), Some(routing.clone())));
                    self.routing.insert(key.clone(), routing);
                }
                None if self.routing.remove(&key).is_some() => saves.push((key.clone(), None)),
                _ => {}
            }
            match timer {
                Some(at) => self.timers.insert(key.clone(), at),
                None => self.timers.remove(&key),
            };
            if self.dns.served().get(&key) != routed.as_ref() {
                routed_changes.push((key.clone(), routed));
            }
            if self.cache.ingresses.contains_key(&key) {
                statuses.push((key, status));
            }
        }
        self.save_routing(saves).await;
        self.metrics.set_routing(&self.routing, now_ms());
        (routed_changes, statuses)
    }

    /// What each configured DNS provider reports for the ingresses of `statuses` (none
    /// without the embedded server or providers).
    fn provider_statuses(
        &mut self,
        statuses: &[(IngressKey, FederatedIngressStatus)],
    ) -> BTreeMap<IngressKey, Vec<ProviderNameStatus>> {
        let (Some(providers), true) = (&mut self.providers, self.dns.snapshot().is_some()) else {
            return BTreeMap::new();
        };
        let mut out = BTreeMap::new();
        for (key, _) in statuses {
            let Some(ingress) = self.cache.ingresses.get(key) else {
                continue;
            };
            let stored = ingress
                .status
                .as_ref()
                .and_then(|s| s.dns.as_ref())
                .map(|d| d.providers.as_slice())
                .unwrap_or_default();
            let entries = providers.name_statuses(key, &decide::served_name(ingress), stored);
            out.insert(key.clone(), entries);
        }
        out
    }

    /// Records the Events, then writes the statuses (concurrently), while leading.
    async fn write(
        &mut self,
        writes: Writes,
        cluster_statuses: BTreeMap<String, ClusterStatus>,
        now: Time,
    ) {
        let Some(writers) = &mut self.writers else {
            return;
        };
        let Writes {
            events,
            ingress_statuses,
        } = writes;
        for event in events {
            let Some(ingress) = self.cache.ingresses.get(&event.ingress) else {
                continue;
            };
            writers
                .recorder
                .record(ingress, event.type_, event.reason, &event.message, now)
                .await;
        }
        let ingress_writes: Vec<(FederatedIngress, FederatedIngressStatus)> = ingress_statuses
            .into_iter()
            .filter_map(|(key, status)| Some((self.cache.ingresses.get(&key)?.clone(), status)))
            .collect();
        let cluster_writes: Vec<(Cluster, ClusterStatus)> = cluster_statuses
            .into_iter()
            .filter_map(|(name, status)| Some((self.cache.clusters.get(&name)?.clone(), status)))
            .collect();
        let registry = &writers.registry;
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

    /// Publishes what DNS serves for the changed ingresses (see
    /// [`DnsReplica::publish`]) and hands a stored serial to the DNS providers. Refused
    /// as fenced, this replica stops writing (its DNS follows the stored state); refused
    /// otherwise, the answers stay as they are and the ingresses are recomputed on the
    /// next pass. Returns the clusters that entered or left answers.
    async fn publish_dns(
        &mut self,
        changes: Vec<(IngressKey, Option<RoutedIngress>)>,
        first: bool,
    ) -> Vec<AnswerChange> {
        match self
            .dns
            .publish(changes, first, &self.cache.ingresses)
            .await
        {
            Published::Nothing => Vec::new(),
            Published::Stored {
                serial,
                changed,
                answer_changes,
            } => {
                if let Some(providers) = &mut self.providers {
                    providers.publish(serial, self.dns.served(), &changed);
                }
                answer_changes
            }
            Published::Fenced => {
                self.writers = None;
                if let Some(providers) = &mut self.providers {
                    providers.follow();
                }
                Vec::new()
            }
            Published::Failed(keys) => {
                self.pending.ingresses.extend(keys);
                Vec::new()
            }
        }
    }

    /// Revokes a deleted cluster's credentials (while leading) or ends an agent's
    /// session (every replica, for the sessions it holds).
    async fn apply_agent_action(&self, action: AgentAction) {
        match action {
            AgentAction::RevokeCredentials { cluster } => {
                let Some(writers) = &self.writers else {
                    return;
                };
                match writers.tokens.revoke_all(&cluster).await {
                    Ok(n) => {
                        tracing::info!(cluster, tokens = n, "cluster deleted: tokens revoked")
                    }
                    Err(e) => {
                        tracing::warn!(cluster, error = %e, "revoking tokens of a deleted cluster failed")
                    }
                }
            }
            AgentAction::EndSession { cluster, reason } => {
                tracing::info!(cluster, reason, "ending the agent's session");
                self.sessions.end_session(&cluster, reason);
            }
        }
    }

    async fn save_routing(&self, saves: Vec<(IngressKey, Option<IngressRouting>)>) {
        let Some(writers) = &self.writers else {
            return;
        };
        let store = &writers.routing;
        stream::iter(saves)
            .for_each_concurrent(WRITE_CONCURRENCY, |(key, routing)| async move {
                if let Err(e) = store.save(&key, routing.as_ref()).await {
                    tracing::warn!(ingress = %key, error = %e, "persisting routing state failed");
                }
            })
            .await;
    }

    /// A provider's syncer reported: the ingresses whose provider entries changed are
    /// recomputed (status rewritten) on the next pass, which also records rejections and
    /// recoveries as Events.
    fn observe_providers(&mut self) {
        let Some(providers) = &mut self.providers else {
            return;
        };
        let changes = providers.take_changes(self.dns.served());
        for event in &changes.events {
            tracing::info!(ingress = %event.ingress, reason = event.reason, message = %event.message, "DNS provider event");
        }
        self.pending.merge(Dirty {
            ingresses: changes.dirty,
            provider_events: changes.events,
            ..Dirty::default()
        });
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

impl HasStatus for IngressPool {
    type Status = IngressPoolStatus;
    fn set_status(&mut self, status: IngressPoolStatus) {
        self.status = Some(status);
    }
}

impl HasStatus for FederatedIngress {
    type Status = FederatedIngressStatus;
    fn set_status(&mut self, status: FederatedIngressStatus) {
        self.status = Some(status);
    }
}

/// Resolves when a DNS provider's syncer reports (pending forever without providers).
async fn providers_changed(providers: &mut Option<ProviderSet>) {
    match providers {
        Some(providers) => providers.changed().await,
        None => std::future::pending().await,
    }
}
