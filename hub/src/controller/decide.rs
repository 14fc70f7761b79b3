//! The controller's *decide* step: a pure function from what was observed ([`World`])
//! and what changed ([`Dirty`]) to placement, status, routing state and its timers, the
//! routed ingresses the DNS snapshot is built from and what is done to agents
//! ([`Pass`]); then, once DNS is published, the DNS part of each status and the Events
//! of answer changes ([`settle`]). No I/O, no clock: `now` is an input. Unit-tested in
//! `tests.rs` beside this file.
//!
//! # Guarantees
//! - Only dirty ingresses (changed themselves, placed or serving on a dirty cluster, or
//!   whose conflicts changed) are recomputed; only dirty clusters get a new status.
//! - Routing works from serving state (see [`super::serving`]): a Pending generation, a
//!   hub restart or a new ingress never takes a serving cluster out of the answers, and a
//!   cluster that never served is never answered.
//! - The plans do not depend on capabilities: a cluster whose driver lacks a rule's
//!   capability gets the rule anyway (its agent reports the rule error); the hub sets
//!   `Servable=False` and leaves the cluster out of that rule's SRV answers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use fedingress_api::capability;
use fedingress_api::cluster::{
    CONDITION_CONNECTED, CONDITION_READY as CLUSTER_READY, ClusterLoad, SpeakerStatus,
};
use fedingress_api::conflict::{Conflict, PlacedIngress, find_conflicts};
use fedingress_api::ingress::{
    BackendStatus, CONDITION_DNS_READY, CONDITION_HEALTHY, CONDITION_PLACED, CONDITION_PROPAGATED,
    CONDITION_READY, CONDITION_SERVABLE, ClusterIngressStatus, ClusterPhase, DnsProviderStatus,
    DnsStatus, FederatedIngressStatus, IngressRule, REASON_ALL_RULES_SERVABLE, REASON_CONFLICT,
    REASON_UNSUPPORTED_RULES, RuleAddressStatus, StrategyType,
};
use fedingress_api::meta::{Condition, set_condition};
use fedingress_api::plan::{ClusterPlan, IngressKey, cluster_plans};
use fedingress_api::{Cluster, ClusterStatus, FederatedIngress, Resource, Time};
use fedingress_dns::routing::failover_step;
use fedingress_dns::zone::Snapshot;
use fedingress_dns::{ClusterView, Location, RoutedIngress, ServiceAddresses, SrvService};

use super::super::AgentState;
use super::super::gslb::AnswerChange;
use super::super::providers::{ProviderEvent, ProviderNameStatus, ProviderReadiness};
use super::super::routing_state::{IngressRouting, Serving};
use super::pools::{self, Bindings, Book, Members, condition};
use super::serving::{AgentKnowledge, serving};

/// lastHeartbeatTime is rewritten at most this often while nothing else changes.
const HEARTBEAT_TIME_RESOLUTION: Duration = Duration::from_secs(30);

/// Everything a pass decides from.
pub struct World<'a> {
    /// Every Cluster, by name.
    pub clusters: &'a BTreeMap<String, Cluster>,
    /// Every FederatedIngress, by key.
    pub ingresses: &'a BTreeMap<IngressKey, FederatedIngress>,
    /// What each cluster's agents said since the hub started (`connected` false past the
    /// lease), each cluster's members folded into one state
    /// ([`pools::cluster_view`](super::pools::cluster_view)).
    pub agents: &'a BTreeMap<String, AgentState>,
    /// Every member of every cluster (for `status.members`).
    pub members: &'a Members,
    /// Every cluster's pools this pass.
    pub book: &'a Book,
    /// Where each share is bound, by cluster.
    pub bindings: &'a Bindings,
    /// Clusters that take no new share (their pools, or their capacity, are saturated).
    pub saturated: &'a BTreeSet<String>,
    /// The hub started less than one lease ago: clusters whose agents have not
    /// reconnected keep their persisted routing state and stored status.
    pub restoring: bool,
    /// Routing state after the previous pass (or as loaded at start).
    pub routing: &'a BTreeMap<IngressKey, IngressRouting>,
    /// Placement after the previous pass.
    pub placements: &'a BTreeMap<IngressKey, Vec<String>>,
    /// Conflicts after the previous pass, by loser.
    pub conflicts: &'a BTreeMap<IngressKey, Vec<Conflict>>,
    pub now: Time,
}

impl World<'_> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.now.0.timestamp_millis()).unwrap_or_default()
    }

    fn knowledge(&self, cluster: &str) -> AgentKnowledge<'_> {
        AgentKnowledge::of(self.agents.get(cluster), self.restoring)
    }

    /// The capability rule `rule` needs that `cluster`'s driver does not offer (from its
    /// agent's last Hello; `None` when it can serve it or its capabilities are unknown).
    fn missing(&self, cluster: &str, rule: &IngressRule) -> Option<&'static str> {
        let agent = self.agents.get(cluster)?;
        capability::missing(rule, &agent.capabilities)
    }
}

/// What changed since the previous pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dirty {
    /// Recompute everything (first pass, a relist, a cluster's spec or labels changed).
    pub all: bool,
    /// Objects that changed (created, updated, deleted).
    pub ingresses: BTreeSet<IngressKey>,
    /// Clusters whose object or agent changed.
    pub clusters: BTreeSet<String>,
    /// An ingress's spec, generation or deletion changed, or one came or went: plans
    /// and conflicts are recomputed.
    pub replan: bool,
    /// Clusters deleted (each deletion seen, even when one of that name was created
    /// again since).
    pub deleted_clusters: BTreeSet<String>,
    /// Clusters whose `spec.provider` or `spec.unschedulable` (cordon), what a Welcome
    /// tells the agent, changed.
    pub welcome_changed: BTreeSet<String>,
    /// What the DNS providers' syncers reported that is recorded as Events (a provider
    /// started or stopped rejecting a name).
    pub provider_events: Vec<ProviderEvent>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        !self.all
            && !self.replan
            && self.ingresses.is_empty()
            && self.clusters.is_empty()
            && self.deleted_clusters.is_empty()
            && self.welcome_changed.is_empty()
            && self.provider_events.is_empty()
    }

    pub fn merge(&mut self, other: Dirty) {
        self.all |= other.all;
        self.replan |= other.replan;
        self.ingresses.extend(other.ingresses);
        self.clusters.extend(other.clusters);
        self.deleted_clusters.extend(other.deleted_clusters);
        self.welcome_changed.extend(other.welcome_changed);
        self.provider_events.extend(other.provider_events);
    }
}

/// Why a session ends when its Cluster's provider or cordon changed.
pub const WELCOME_CHANGED: &str =
    "the cluster's provider or cordon changed: reconnect for a new Welcome";
/// Why a session ends when its Cluster was deleted.
pub const CLUSTER_DELETED: &str = "the cluster was deleted";

/// Something done to a cluster's agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentAction {
    /// The Cluster was deleted: every credential of its agent (tokens, join tokens,
    /// certificates) is revoked. The leader's to do.
    RevokeCredentials { cluster: String },
    /// The agent's session ends with `reason`, so that it reconnects (and is welcomed
    /// anew). Every replica ends the sessions it holds.
    EndSession {
        cluster: String,
        reason: &'static str,
    },
}

/// One ingress's outcome of a pass.
#[derive(Clone, Debug, PartialEq)]
pub struct IngressOutcome {
    /// The status without `dns` and the DNS-dependent conditions (see [`dns_status`]).
    pub status: FederatedIngressStatus,
    /// `None` when the ingress is gone: its routing state is deleted.
    pub routing: Option<IngressRouting>,
    /// What DNS serves for it; `None` when its name is not served.
    pub routed: Option<RoutedIngress>,
    /// When its routing next changes with time alone (unix ms): a failback hold ends or
    /// a Failover wait passes. A pass is due then.
    pub timer: Option<u64>,
}

/// What a pass decided.
#[derive(Debug, Default)]
pub struct Pass {
    /// New placement of the recomputed ingresses (removed ones map to nothing).
    pub placements: BTreeMap<IngressKey, Vec<String>>,
    /// Every conflict, by loser, when plans were recomputed.
    pub conflicts: Option<BTreeMap<IngressKey, Vec<Conflict>>>,
    /// Every cluster's plan, when recomputed.
    pub plans: Option<BTreeMap<String, ClusterPlan>>,
    /// Recomputed ingresses; deleted ones have `routing: None`.
    pub ingresses: BTreeMap<IngressKey, IngressOutcome>,
    /// Cluster statuses that differ from the stored ones.
    pub cluster_statuses: BTreeMap<String, ClusterStatus>,
    /// What is done to agents, in order.
    pub agent_actions: Vec<AgentAction>,
    /// Events of the providers' reports (recorded by the leader, before those of
    /// answer changes: see [`settle`]).
    pub events: Vec<IngressEvent>,
}

/// The pass for `dirty` in `world`.
pub fn decide(world: &World<'_>, dirty: &Dirty) -> Pass {
    let mut pass = Pass {
        agent_actions: agent_actions(dirty),
        events: dirty.provider_events.iter().map(provider_event).collect(),
        ..Pass::default()
    };
    let now_ms = world.now_ms();

    // Placement of changed ingresses (and of all when clusters changed).
    let cluster_list: Vec<Cluster> = world.clusters.values().cloned().collect();
    let mut touched: BTreeSet<IngressKey> = if dirty.all {
        // Routing state of ingresses deleted while the hub was down goes too.
        world
            .ingresses
            .keys()
            .chain(world.routing.keys())
            .chain(world.placements.keys())
            .cloned()
            .collect()
    } else {
        dirty.ingresses.clone()
    };
    if !dirty.all && !dirty.clusters.is_empty() {
        // Ingresses placed or serving on a dirty cluster: one walk over both maps.
        let placed_there = world
            .placements
            .iter()
            .filter(|(_, placed)| placed.iter().any(|c| dirty.clusters.contains(c)));
        let serving_there = world
            .routing
            .iter()
            .filter(|(_, routing)| routing.clusters.keys().any(|c| dirty.clusters.contains(c)));
        touched.extend(placed_there.map(|(key, _)| key.clone()));
        touched.extend(serving_there.map(|(key, _)| key.clone()));
    }
    let mut placements = world.placements.clone();
    let mut replan = dirty.all || dirty.replan;
    for key in &touched {
        let placed = world
            .ingresses
            .get(key)
            .map(|ingress| place(ingress, &cluster_list, world.saturated))
            .unwrap_or_default();
        if world.ingresses.contains_key(key) {
            if placements.get(key) != Some(&placed) {
                replan = true;
            }
            placements.insert(key.clone(), placed.clone());
        } else {
            replan |= placements.remove(key).is_some();
        }
        pass.placements.insert(key.clone(), placed);
    }

    // Conflicts and plans: global, only when something they depend on changed.
    let mut conflicts = world.conflicts;
    let recomputed;
    if replan {
        let placed: Vec<PlacedIngress> = world
            .ingresses
            .iter()
            .map(|(key, ingress)| PlacedIngress {
                ingress,
                clusters: placements.get(key).cloned().unwrap_or_default(),
            })
            .collect();
        let found = find_conflicts(&placed);
        pass.plans = Some(cluster_plans(&placed, &found));
        let mut by_loser: BTreeMap<IngressKey, Vec<Conflict>> = BTreeMap::new();
        for conflict in found {
            by_loser
                .entry(conflict.loser.clone())
                .or_default()
                .push(conflict);
        }
        // Ingresses whose conflicts changed are recomputed too.
        for key in world.conflicts.keys().chain(by_loser.keys()) {
            if world.conflicts.get(key) != by_loser.get(key) {
                touched.insert(key.clone());
            }
        }
        recomputed = by_loser;
        conflicts = &recomputed;
        pass.conflicts = Some(recomputed.clone());
    }

    // Ingress status, serving state and routing of the touched ingresses.
    let no_conflicts = Vec::new();
    for key in &touched {
        let Some(ingress) = world.ingresses.get(key) else {
            pass.ingresses.insert(
                key.clone(),
                IngressOutcome {
                    status: FederatedIngressStatus::default(),
                    routing: None,
                    routed: None,
                    timer: None,
                },
            );
            continue;
        };
        let placed = placements.get(key).map(Vec::as_slice).unwrap_or_default();
        let mine = conflicts.get(key).unwrap_or(&no_conflicts);
        let outcome = ingress_outcome(world, key, ingress, placed, mine, now_ms);
        pass.ingresses.insert(key.clone(), outcome);
    }

    // Cluster status.
    let clusters: Box<dyn Iterator<Item = &String>> = if dirty.all {
        Box::new(world.clusters.keys())
    } else {
        Box::new(dirty.clusters.iter())
    };
    for name in clusters {
        let Some(cluster) = world.clusters.get(name) else {
            continue;
        };
        let agent = world.agents.get(name);
        if agent.is_none() && world.restoring {
            // The stored status stands until the agent is back or the lease passed.
            continue;
        }
        let mut status = cluster.status.clone().unwrap_or_default();
        cluster_status(cluster, agent, &mut status, world.now);
        if let Some(members) = world.members.get(name) {
            let (mut listed, count, ready) = pools::members_status(members, world.book.get(name));
            // A member's heartbeat time moves like the cluster's: at most every
            // HEARTBEAT_TIME_RESOLUTION while nothing else changes.
            for member in &mut listed {
                let Some(before) = status.members.iter().find(|m| m.name == member.name) else {
                    continue;
                };
                let fresh = match (before.last_heartbeat_time, member.last_heartbeat_time) {
                    (Some(then), Some(now)) => {
                        (now.0 - then.0).to_std().unwrap_or_default() < HEARTBEAT_TIME_RESOLUTION
                    }
                    _ => false,
                };
                if fresh && before.connected == member.connected {
                    member.last_heartbeat_time = before.last_heartbeat_time;
                }
            }
            status.members = listed;
            status.member_count = count;
            status.ready_members = ready;
        }
        if Some(&status) != cluster.status.as_ref() {
            pass.cluster_statuses.insert(name.clone(), status);
        }
    }
    pass
}

/// What the clusters deleted or changed since the previous pass mean for their agents:
/// a deleted cluster's credentials are revoked and its session ends; an agent whose
/// Welcome would say something else reconnects.
fn agent_actions(dirty: &Dirty) -> Vec<AgentAction> {
    let mut actions = Vec::new();
    for cluster in &dirty.deleted_clusters {
        actions.push(AgentAction::RevokeCredentials {
            cluster: cluster.clone(),
        });
        actions.push(AgentAction::EndSession {
            cluster: cluster.clone(),
            reason: CLUSTER_DELETED,
        });
    }
    for cluster in &dirty.welcome_changed {
        actions.push(AgentAction::EndSession {
            cluster: cluster.clone(),
            reason: WELCOME_CHANGED,
        });
    }
    actions
}

/// The Event of a provider's report.
fn provider_event(event: &ProviderEvent) -> IngressEvent {
    IngressEvent {
        ingress: event.ingress.clone(),
        type_: event.type_,
        reason: event.reason,
        message: event.message.clone(),
    }
}

/// The clusters an ingress is placed on; objects being deleted are placed nowhere (their
/// listeners close). Sticky through the clusters in its status.
/// Where `ingress` is placed: the placement rules over `clusters`, where a saturated
/// cluster keeps the ingresses placed there but takes no new one.
fn place(
    ingress: &FederatedIngress,
    clusters: &[Cluster],
    saturated: &BTreeSet<String>,
) -> Vec<String> {
    if ingress.metadata().deletion_timestamp.is_some() {
        return Vec::new();
    }
    let previous: Vec<String> = ingress
        .status
        .as_ref()
        .map(|s| s.clusters.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    if saturated.is_empty() {
        return fedingress_api::placement::place(ingress, clusters, &previous).clusters;
    }
    let open: Vec<Cluster> = clusters
        .iter()
        .filter(|c| !saturated.contains(c.name()) || previous.iter().any(|p| p == c.name()))
        .cloned()
        .collect();
    fedingress_api::placement::place(ingress, &open, &previous).clusters
}

fn ingress_outcome(
    world: &World<'_>,
    key: &IngressKey,
    ingress: &FederatedIngress,
    placed: &[String],
    conflicts: &[Conflict],
    now_ms: u64,
) -> IngressOutcome {
    let previous = world.routing.get(key);
    // Serving state: every placed cluster, and every cluster that still serves.
    let mut routing = IngressRouting::default();
    let candidates: BTreeSet<&str> = placed
        .iter()
        .map(String::as_str)
        .chain(
            previous
                .iter()
                .flat_map(|p| p.clusters.keys().map(String::as_str)),
        )
        .collect();
    for cluster in candidates {
        if !world.clusters.contains_key(cluster) {
            continue;
        }
        let before = previous.and_then(|p| p.clusters.get(cluster));
        let knowledge = world.knowledge(cluster);
        if let Some(state) = serving(key, &ingress.spec.traffic, knowledge, before, now_ms) {
            routing.clusters.insert(cluster.to_string(), state);
        }
    }
    let mut status = ingress.status.clone().unwrap_or_default();
    ingress_status(
        world,
        key,
        ingress,
        placed,
        conflicts,
        &routing,
        &mut status,
    );
    let mut routed = routed_ingress(world, key, ingress, conflicts, &routing, now_ms);
    if let Some(routed) = &mut routed {
        let previous_failover = previous.map(|p| p.failover.clone()).unwrap_or_default();
        routing.failover = failover_step(
            &routed.traffic,
            &routed.clusters,
            &previous_failover,
            now_ms,
        );
        routed.failover = routing.failover.clone();
    }
    IngressOutcome {
        status,
        timer: next_change_ms(ingress, &routing, now_ms),
        routing: Some(routing),
        routed,
    }
}

/// When `routing` of `ingress` next changes with time alone (unix ms): the earliest
/// failback hold of a healthy cluster that ends after `now_ms`, or the next Failover
/// change.
fn next_change_ms(
    ingress: &FederatedIngress,
    routing: &IngressRouting,
    now_ms: u64,
) -> Option<u64> {
    let held = routing
        .clusters
        .values()
        .filter(|s| s.healthy == Some(true))
        .filter_map(|s| s.held_until_ms)
        .filter(|&at| at > now_ms)
        .min();
    let failover =
        fedingress_dns::routing::next_failover_change_ms(&ingress.spec.traffic, &routing.failover);
    held.into_iter().chain(failover).min()
}

/// Cluster status from what its agent said.
fn cluster_status(
    cluster: &Cluster,
    agent: Option<&AgentState>,
    status: &mut ClusterStatus,
    now: Time,
) {
    let connected = agent.is_some_and(|a| a.connected);
    let was_connected = status.connected;
    status.connected = connected;
    if let Some(agent) = agent {
        status.agent_version = Some(agent.agent_version.clone()).filter(|v| !v.is_empty());
        status.driver = agent.driver.parse().ok();
        let stale = status.last_heartbeat_time.is_none_or(|t| {
            (agent.last_seen_time.0 - t.0).to_std().unwrap_or_default() >= HEARTBEAT_TIME_RESOLUTION
        });
        if stale || was_connected != connected {
            status.last_heartbeat_time = Some(agent.last_seen_time);
        }
        if let Some(report) = &agent.report {
            status.addresses = report.addresses.clone();
            status.load = Some(ClusterLoad {
                // The same number Overflow reads (see `routed_ingress`), rounded.
                rps: (report.load_per_second() * 100.0).round() / 100.0,
                active_connections: i64::try_from(report.active_connections).unwrap_or(i64::MAX),
                cpu: report.process_cpu,
                host_cpu: report.host_cpu,
                bytes_per_second: report.bytes_per_second,
            });
            status.speaker = report.speaker.as_ref().map(|s| SpeakerStatus {
                up: s.up,
                peers: i32::try_from(s.peers).unwrap_or(i32::MAX),
                established_peers: i32::try_from(s.established_peers).unwrap_or(i32::MAX),
                message: s.message.clone(),
            });
        }
    }
    let (reason, message) = match agent {
        Some(_) if connected => (
            "AgentConnected",
            "the cluster's agent is connected".to_string(),
        ),
        Some(a) => (
            "AgentOffline",
            format!(
                "no message from the agent for more than the lease (last: {})",
                a.last_seen_time
            ),
        ),
        None => (
            "NeverConnected",
            "no agent has connected since the hub started".to_string(),
        ),
    };
    set_condition(
        &mut status.conditions,
        condition(CONDITION_CONNECTED, connected, reason, message),
        now,
    );
    let (ready, reason, mut message) = if cluster.spec.unschedulable {
        (
            false,
            "Cordoned",
            "cordoned: no new placement and out of routing; applied listeners keep serving"
                .to_string(),
        )
    } else if connected {
        (true, "Ready", "connected and schedulable".to_string())
    } else {
        (
            false,
            "Offline",
            "the agent is not connected: out of routing".to_string(),
        )
    };
    // Still Ready (non-anycast ingresses are served), but its anycast routes are gone.
    if connected && let Some(speaker) = status.speaker.as_ref().filter(|s| !s.up) {
        message.push_str("; the BGP speaker is down");
        if !speaker.message.is_empty() {
            message.push_str(": ");
            message.push_str(&speaker.message);
        }
        message.push_str(" (no anycast address is announced from here)");
    }
    set_condition(
        &mut status.conditions,
        condition(CLUSTER_READY, ready, reason, message),
        now,
    );
}

/// FederatedIngress status from placement, conflicts, the agents' acks and reports and
/// serving state. `status.dns` and DNSReady come later, from the DNS snapshot.
fn ingress_status(
    world: &World<'_>,
    key: &IngressKey,
    ingress: &FederatedIngress,
    placed: &[String],
    conflicts: &[Conflict],
    routing: &IngressRouting,
    status: &mut FederatedIngressStatus,
) {
    let now = world.now;
    let inputs = StatusInputs {
        world,
        key,
        ingress,
        placed,
        conflicts,
        routing,
        generation: ingress.metadata().generation.unwrap_or(0),
        unsupported: unsupported_rules(world, ingress, placed, conflicts),
    };
    let previous_entries = std::mem::take(&mut status.clusters);
    status.observed_generation = Some(inputs.generation);
    status.clusters = placed
        .iter()
        .map(|name| inputs.cluster_entry(name, &previous_entries))
        .collect();

    let observed = |c: Condition| c.with_observed_generation(inputs.generation);
    let placed_condition = inputs.placed_condition();
    let placed_ok = placed_condition.is_true();
    set_condition(&mut status.conditions, observed(placed_condition), now);

    let serving: Vec<&ClusterIngressStatus> = status
        .clusters
        .iter()
        .filter(|c| !c.message.starts_with("conflict"))
        .collect();
    let (propagated, propagated_ok) = propagated_condition(&serving);
    set_condition(&mut status.conditions, observed(propagated), now);
    let (health, healthy_ok) = healthy_condition(&serving);
    set_condition(&mut status.conditions, observed(health), now);
    // Servable: informational (Ready does not wait for it).
    set_condition(
        &mut status.conditions,
        observed(inputs.servable_condition()),
        now,
    );
    let ready = placed_ok && propagated_ok && healthy_ok;
    set_condition(
        &mut status.conditions,
        observed(ready_condition(ready)),
        now,
    );
}

/// What [`ingress_status`] computes one ingress's status from; its methods are the
/// phases that need more than the status's own cluster entries.
struct StatusInputs<'a> {
    world: &'a World<'a>,
    key: &'a IngressKey,
    ingress: &'a FederatedIngress,
    placed: &'a [String],
    conflicts: &'a [Conflict],
    routing: &'a IngressRouting,
    generation: i64,
    unsupported: Vec<Unsupported>,
}

impl StatusInputs<'_> {
    /// The status entry of placed cluster `name`, given the entries stored before.
    fn cluster_entry(
        &self,
        name: &String,
        previous_entries: &[ClusterIngressStatus],
    ) -> ClusterIngressStatus {
        let conflict = self.conflicts.iter().find(|c| c.applies_to(name));
        let knowledge = self.world.knowledge(name);
        let previous = previous_entries.iter().find(|e| &e.name == name);
        match (knowledge, previous) {
            // Restoring: what was stored stands until the agent is back, its time too.
            (AgentKnowledge::Restoring, Some(stored)) if conflict.is_none() => stored.clone(),
            _ => {
                let cordoned = self
                    .world
                    .clusters
                    .get(name.as_str())
                    .is_some_and(|c| c.spec.unschedulable);
                let mut entry = cluster_entry(
                    self.key,
                    self.generation,
                    name,
                    conflict,
                    knowledge,
                    self.routing.clusters.get(name),
                    cordoned,
                    &self.ingress.spec.rules,
                );
                if conflict.is_none() {
                    self.add_lacking_capabilities(name, &mut entry);
                    self.add_pool(name, &mut entry);
                }
                entry.last_update_time = last_update_time(previous, &entry, self.world.now);
                entry
            }
        }
    }

    /// The pool the share is bound to on `name` (and the one it leaves); a cluster with
    /// pools where none takes the share says why.
    fn add_pool(&self, name: &str, entry: &mut ClusterIngressStatus) {
        let Some(binding) = self.world.bindings.get(name).and_then(|b| b.get(self.key)) else {
            return;
        };
        entry.pool.clone_from(&binding.pool);
        entry.previous_pool = binding.leaving.as_ref().map(|l| l.pool.clone());
        entry.pool_reason.clone_from(&binding.why);
        if binding.pool.is_none() {
            let why = format!("no pool: {}", binding.why);
            entry.message = if entry.message.is_empty() {
                why
            } else {
                format!("{}; {why}", entry.message)
            };
        }
    }

    /// Appends to `entry`'s message the rules `name`'s driver cannot serve, if any.
    fn add_lacking_capabilities(&self, name: &String, entry: &mut ClusterIngressStatus) {
        let lacking: Vec<String> = self
            .unsupported
            .iter()
            .filter(|u| &u.cluster == name)
            .map(|u| {
                format!(
                    "driver {} cannot serve rule {} ({})",
                    u.driver, u.rule, u.capability
                )
            })
            .collect();
        if !lacking.is_empty() {
            let mut parts: Vec<String> = Vec::new();
            if !entry.message.is_empty() {
                parts.push(std::mem::take(&mut entry.message));
            }
            parts.extend(lacking);
            entry.message = parts.join("; ");
        }
    }

    /// Placed: false on a conflict or when no cluster matches.
    fn placed_condition(&self) -> Condition {
        let (conflicts, placed) = (self.conflicts, self.placed);
        if !conflicts.is_empty() {
            let text = conflicts
                .iter()
                .map(|c| match &c.cluster {
                    Some(cluster) => format!("on {cluster}: {} (held by {})", c.reason, c.winner),
                    None => format!("{} (held by {})", c.reason, c.winner),
                })
                .collect::<Vec<_>>()
                .join("; ");
            condition(CONDITION_PLACED, false, REASON_CONFLICT, text)
        } else if placed.is_empty() {
            condition(
                CONDITION_PLACED,
                false,
                "NoClusters",
                "no registered cluster matches the placement",
            )
        } else {
            let mut message = format!("placed on {}", placed.join(", "));
            let unplaced = unplaced_failover_names(self.ingress, placed);
            if !unplaced.is_empty() {
                message.push_str(&format!(
                    "; failoverOrder names clusters it is not placed on, which routing skips: {}",
                    unplaced.join(", ")
                ));
            }
            condition(CONDITION_PLACED, true, "Placed", message)
        }
    }

    /// Servable: whether every placed cluster's driver can serve every rule.
    fn servable_condition(&self) -> Condition {
        if self.unsupported.is_empty() {
            let unknown: Vec<&str> = self
                .placed
                .iter()
                .filter(|c| !self.conflicts.iter().any(|x| x.applies_to(c)))
                .filter(|c| {
                    self.world
                        .agents
                        .get(c.as_str())
                        .is_none_or(|a| a.capabilities.is_empty())
                })
                .map(String::as_str)
                .collect();
            let mut message = "every placed cluster's driver can serve every rule".to_string();
            if !unknown.is_empty() {
                message = format!(
                    "no placed cluster is known to lack a capability the rules need (not known for {}: no agent said)",
                    unknown.join(", ")
                );
            }
            condition(CONDITION_SERVABLE, true, REASON_ALL_RULES_SERVABLE, message)
        } else {
            let text = self
                .unsupported
                .iter()
                .map(|u| {
                    format!(
                        "cluster {} (driver {}) cannot serve rule {} ({})",
                        u.cluster, u.driver, u.rule, u.capability
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            condition(CONDITION_SERVABLE, false, REASON_UNSUPPORTED_RULES, text)
        }
    }
}

/// Propagated over the serving (conflict-free) entries, and whether it holds.
fn propagated_condition(serving: &[&ClusterIngressStatus]) -> (Condition, bool) {
    let not_applied: Vec<String> = serving
        .iter()
        .filter(|c| c.phase != ClusterPhase::Applied)
        .map(|c| format!("{} is {}", c.name, c.phase))
        .collect();
    let propagated_ok = !serving.is_empty() && not_applied.is_empty();
    let propagated = if serving.is_empty() {
        condition(
            CONDITION_PROPAGATED,
            false,
            "NoClusters",
            "not placed on any cluster",
        )
    } else if propagated_ok {
        condition(
            CONDITION_PROPAGATED,
            true,
            "Applied",
            "every placed cluster applied this generation",
        )
    } else {
        condition(
            CONDITION_PROPAGATED,
            false,
            "Pending",
            not_applied.join("; "),
        )
    };
    (propagated, propagated_ok)
}

/// Healthy over the serving (conflict-free) entries, and whether it holds.
fn healthy_condition(serving: &[&ClusterIngressStatus]) -> (Condition, bool) {
    let healthy: Vec<&str> = serving
        .iter()
        .filter(|c| c.healthy)
        .map(|c| c.name.as_str())
        .collect();
    let healthy_ok = !healthy.is_empty();
    let health = if healthy_ok {
        condition(
            CONDITION_HEALTHY,
            true,
            "Healthy",
            format!("healthy on {}", healthy.join(", ")),
        )
    } else {
        condition(
            CONDITION_HEALTHY,
            false,
            "NoHealthyCluster",
            "no placed cluster reports healthy backends",
        )
    };
    (health, healthy_ok)
}

/// Ready: placed, applied and healthy.
fn ready_condition(ready: bool) -> Condition {
    if ready {
        condition(
            CONDITION_READY,
            true,
            "Ready",
            "placed, applied and healthy",
        )
    } else {
        condition(
            CONDITION_READY,
            false,
            "NotReady",
            "see the Placed, Propagated and Healthy conditions",
        )
    }
}

/// The names in a Failover ingress's `failoverOrder` that it is not placed on, each with
/// its tier (`eu-wst (failoverOrder[0])`), in order. Routing resolves tiers against the
/// clusters that serve the ingress, so these are skipped (a tier of only such names is
/// never healthy); the Placed condition's message names them so that a typo, a deleted
/// cluster or one outside `placement` shows.
fn unplaced_failover_names(ingress: &FederatedIngress, placed: &[String]) -> Vec<String> {
    let strategy = &ingress.spec.traffic.strategy;
    if strategy.type_ != StrategyType::Failover {
        return Vec::new();
    }
    strategy
        .failover_order
        .iter()
        .flatten()
        .enumerate()
        .flat_map(|(tier, names)| {
            names
                .iter()
                .filter(|name| !placed.contains(name))
                .map(move |name| format!("{name} (failoverOrder[{tier}])"))
        })
        .collect()
}

/// `lastUpdateTime` of a recomputed status entry (`entry`, whose own time is not set
/// yet): the previous entry's time when nothing else in the entry changed, else `now`. An
/// unchanged entry therefore leaves the status as stored (no write); an entry stored
/// without a time (by an older hub) gets `now` once.
fn last_update_time(
    previous: Option<&ClusterIngressStatus>,
    entry: &ClusterIngressStatus,
    now: Time,
) -> Option<Time> {
    match previous {
        Some(p)
            if p.last_update_time.is_some()
                && *p
                    == (ClusterIngressStatus {
                        last_update_time: p.last_update_time,
                        ..entry.clone()
                    }) =>
        {
            p.last_update_time
        }
        _ => Some(now),
    }
}

/// A rule a placed cluster's driver cannot serve.
struct Unsupported {
    cluster: String,
    driver: String,
    /// Index into `spec.rules`.
    rule: usize,
    capability: &'static str,
}

/// Every (placed cluster, rule) whose driver lacks the capability the rule needs, by
/// cluster then rule. Clusters with a conflict (nothing is applied there) and clusters
/// whose capabilities are unknown are left out.
fn unsupported_rules(
    world: &World<'_>,
    ingress: &FederatedIngress,
    placed: &[String],
    conflicts: &[Conflict],
) -> Vec<Unsupported> {
    let mut out = Vec::new();
    for cluster in placed {
        if conflicts.iter().any(|c| c.applies_to(cluster)) {
            continue;
        }
        let driver = world
            .agents
            .get(cluster.as_str())
            .map(|a| a.driver.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "unknown".into());
        for (rule, spec) in ingress.spec.rules.iter().enumerate() {
            if let Some(capability) = world.missing(cluster, spec) {
                out.push(Unsupported {
                    cluster: cluster.clone(),
                    driver: driver.clone(),
                    rule,
                    capability,
                });
            }
        }
    }
    out
}

/// One placed cluster's entry in the ingress status. `healthy` is the serving state's
/// health: a Pending new generation keeps the previous generation's, and a cluster that
/// failed only some rules stays healthy (phase Failed names them).
#[allow(clippy::too_many_arguments)]
fn cluster_entry(
    key: &IngressKey,
    generation: i64,
    name: &str,
    conflict: Option<&Conflict>,
    knowledge: AgentKnowledge<'_>,
    serving: Option<&Serving>,
    cordoned: bool,
    rules: &[IngressRule],
) -> ClusterIngressStatus {
    let mut entry = ClusterIngressStatus {
        name: name.to_string(),
        ..Default::default()
    };
    if let Some(conflict) = conflict {
        entry.phase = ClusterPhase::Failed;
        entry.message = format!(
            "conflict: {} (held by {})",
            conflict.reason, conflict.winner
        );
        return entry;
    }
    if let Some(serving) = serving {
        entry.addresses = serving.addresses.clone();
        entry.anycast = serving.anycast.clone();
        entry.rules = rules
            .iter()
            .enumerate()
            .filter_map(|(i, rule)| {
                let own = serving.rule(rule).filter(|r| !r.addresses.is_empty())?;
                Some(RuleAddressStatus {
                    rule: i32::try_from(i).ok()?,
                    addresses: own.addresses.clone(),
                })
            })
            .collect();
    }
    let agent = match knowledge {
        AgentKnowledge::Connected(agent) | AgentKnowledge::Lost(agent) => agent,
        AgentKnowledge::Restoring | AgentKnowledge::Unknown => {
            entry.phase = ClusterPhase::Offline;
            entry.message = if serving.is_some() {
                "the cluster's agent has not connected since the hub started: out of routing (its listeners keep serving what they had)".into()
            } else {
                "the cluster's agent has not connected".into()
            };
            return entry;
        }
    };
    let report = agent
        .report
        .as_ref()
        .and_then(|r| r.ingresses.iter().find(|i| &i.key == key));
    if let Some(report) = report {
        entry.backends = report
            .backends
            .iter()
            .map(|b| BackendStatus {
                service: b.service.clone(),
                port: b.port,
                ready: i32::try_from(b.ready).unwrap_or(i32::MAX),
                total: i32::try_from(b.total).unwrap_or(i32::MAX),
            })
            .collect();
    } else if serving.is_none()
        && let Some(report) = &agent.report
    {
        entry.addresses = report.addresses.clone();
    }
    if matches!(knowledge, AgentKnowledge::Lost(_)) {
        entry.phase = ClusterPhase::Offline;
        entry.message = "the cluster's agent missed its lease: out of routing (its listeners keep serving what they had)".into();
        return entry;
    }
    entry.healthy = serving.is_some_and(|s| s.healthy == Some(true));
    let applied = agent
        .applied
        .as_ref()
        .and_then(|p| p.plan.ingresses.get(key))
        .is_some_and(|share| share.generation == generation);
    if !applied {
        entry.phase = ClusterPhase::Pending;
        entry.message = match serving {
            Some(s) => format!(
                "waiting for the agent to apply this generation (generation {} serves meanwhile)",
                s.applied_generation
            ),
            None => "waiting for the agent to apply this generation".into(),
        };
        return entry;
    }
    // Rule errors from the last Nack, and from reports (an agent whose plan was already
    // current when it reconnected only reports them).
    let mut errors: Vec<String> = agent
        .rule_errors
        .iter()
        .chain(report.iter().flat_map(|r| r.rule_errors.iter()))
        .filter(|e| &e.ingress == key)
        .map(|e| format!("rule {}: {}", e.rule, e.message))
        .collect();
    errors.sort();
    errors.dedup();
    if !errors.is_empty() {
        // Failed rules leave the answers of those rules; the others are served (unless
        // every rule failed: then the serving state is unhealthy).
        entry.phase = ClusterPhase::Failed;
        entry.message = errors.join("; ");
        return entry;
    }
    entry.phase = ClusterPhase::Applied;
    let reported = report.is_some();
    entry.message = if cordoned {
        "cluster cordoned: out of routing, listeners keep serving".into()
    } else if !reported {
        "waiting for the agent's report".into()
    } else if entry.healthy {
        String::new()
    } else {
        let down: Vec<String> = entry
            .backends
            .iter()
            .filter(|b| b.ready == 0)
            .map(|b| {
                format!(
                    "{}:{} has no ready endpoint ({} total)",
                    b.service, b.port, b.total
                )
            })
            .collect();
        down.join("; ")
    };
    entry
}

/// What DNS needs of one ingress, or `None` when it is not served (being deleted, or its
/// DNS name belongs to an older object). Its clusters are the serving ones; their health
/// for routing includes the failback hold, and load is kept only where it matters
/// (Overflow), so that load reports do not rebuild answers. Each SRV service (an L4 rule
/// with a `name`) carries, per serving cluster, the rule's own addresses when the agent
/// reported some, and leaves out the clusters that cannot serve the rule (their driver
/// lacks its capability, or their agent reported an error for it).
fn routed_ingress(
    world: &World<'_>,
    key: &IngressKey,
    ingress: &FederatedIngress,
    conflicts: &[Conflict],
    routing: &IngressRouting,
    now_ms: u64,
) -> Option<RoutedIngress> {
    let meta = ingress.metadata();
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    if conflicts.iter().any(|c| c.cluster.is_none()) {
        return None;
    }
    let dns_name = ingress
        .spec
        .effective_dns_name()?
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let overflow = ingress.spec.traffic.strategy.type_ == StrategyType::Overflow;
    let anycast = ingress.spec.traffic.strategy.type_ == StrategyType::Anycast;
    let views = routing
        .clusters
        .iter()
        .filter(|(name, _)| !conflicts.iter().any(|c| c.applies_to(name)))
        .filter_map(|(name, serving)| {
            let cluster = world.clusters.get(name)?;
            let location = cluster.spec.location.as_ref();
            let load = world
                .agents
                .get(name)
                .and_then(|a| a.report.as_ref())
                .filter(|_| overflow)
                .map(|r| r.load_per_second());
            Some(ClusterView {
                name: name.clone(),
                location: Location {
                    region: cluster.spec.region.clone(),
                    latitude: location.map(|l| l.latitude).unwrap_or_default(),
                    longitude: location.map(|l| l.longitude).unwrap_or_default(),
                },
                healthy: serving.routable(now_ms),
                cordoned: cluster.spec.unschedulable,
                ips: serving.addresses.iter().filter_map(|a| a.ip).collect(),
                hostnames: serving
                    .addresses
                    .iter()
                    .filter_map(|a| a.hostname.clone())
                    .collect(),
                load: load.unwrap_or_default(),
                capacity: cluster
                    .spec
                    .capacity
                    .as_ref()
                    .and_then(|c| c.rps)
                    .filter(|_| overflow)
                    .map(|r| r as f64),
                cloud: cluster.spec.provider,
                // Only where it matters (Anycast), so that route reports of other
                // strategies' ingresses do not rebuild answers.
                anycast: if anycast {
                    serving.anycast.clone()
                } else {
                    Vec::new()
                },
            })
        })
        .collect();
    let serving_clusters: Vec<(&String, &Serving)> = routing
        .clusters
        .iter()
        .filter(|(name, _)| !conflicts.iter().any(|c| c.applies_to(name)))
        .collect();
    let mut srv: Vec<SrvService> = ingress
        .spec
        .rules
        .iter()
        .filter(|r| r.protocol.is_l4())
        .filter_map(|r| {
            let mut service = SrvService::new(
                r.name.clone()?,
                r.protocol.as_str().to_ascii_lowercase(),
                u16::try_from(r.effective_port()?).ok()?,
            );
            for (cluster, serving) in &serving_clusters {
                let rule = serving.rule(r);
                if rule.is_some_and(|x| x.failed) || world.missing(cluster, r).is_some() {
                    service.excluded.insert((*cluster).clone());
                } else if let Some(own) = rule.filter(|x| !x.addresses.is_empty()) {
                    service.addresses.insert(
                        (*cluster).clone(),
                        ServiceAddresses {
                            ips: own.addresses.iter().filter_map(|a| a.ip).collect(),
                            hostnames: own
                                .addresses
                                .iter()
                                .filter_map(|a| a.hostname.clone())
                                .collect(),
                        },
                    );
                }
            }
            Some(service)
        })
        .collect();
    srv.dedup();
    Some(RoutedIngress {
        ingress: key.to_string(),
        dns_name,
        traffic: ingress.spec.traffic.clone(),
        clusters: views,
        srv,
        failover: Default::default(),
        health_port: ingress
            .spec
            .rules
            .iter()
            .find(|r| r.protocol.transport() == "tcp")
            .and_then(|r| r.effective_port())
            .and_then(|p| u16::try_from(p).ok()),
    })
}

/// What DNS serves once a pass has published, for the statuses ([`settle`]).
pub struct Served<'a> {
    /// The embedded server's snapshot.
    pub snapshot: &'a Snapshot,
    /// Why names are not (fully) served, from the last snapshot build, by ingress
    /// (`namespace/name`).
    pub problems: &'a HashMap<String, Vec<String>>,
    /// Each configured provider's entry for the ingress (computed by
    /// [`crate::providers`]), by ingress.
    pub providers: &'a BTreeMap<IngressKey, Vec<ProviderNameStatus>>,
}

/// An Event to record on an ingress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressEvent {
    pub ingress: IngressKey,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// What the leader writes once DNS is published.
#[derive(Debug, Default, PartialEq)]
pub struct Writes {
    /// Events (of provider reports, then of clusters that entered or left answers), in
    /// order; recorded first.
    pub events: Vec<IngressEvent>,
    /// Ingress statuses, their DNS part included, that differ from the stored ones.
    pub ingress_statuses: Vec<(IngressKey, FederatedIngressStatus)>,
}

/// The rest of a pass once DNS is published: each recomputed ingress's `statuses`
/// completed with what DNS serves ([`dns_status`]; left as they are without the
/// embedded server), the ones that differ from the stored ones, and the Events: the
/// pass's `events` (of provider reports), then those of the publication's
/// `answer_changes`. Ingresses no longer in `ingresses` are left out.
pub fn settle(
    ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    statuses: Vec<(IngressKey, FederatedIngressStatus)>,
    served: Option<&Served<'_>>,
    events: Vec<IngressEvent>,
    answer_changes: &[AnswerChange],
    now: Time,
) -> Writes {
    let no_providers = Vec::new();
    let ingress_statuses = statuses
        .into_iter()
        .filter_map(|(key, mut status)| {
            let ingress = ingresses.get(&key)?;
            if let Some(served) = served {
                dns_status(
                    &mut status,
                    &served_name(ingress),
                    served.problems.get(&key.to_string()),
                    served.snapshot,
                    served.providers.get(&key).unwrap_or(&no_providers),
                    ingress.metadata().generation.unwrap_or(0),
                    now,
                );
            }
            (ingress.status.as_ref() != Some(&status)).then_some((key, status))
        })
        .collect();
    let events = events
        .into_iter()
        .filter(|event| ingresses.contains_key(&event.ingress))
        .chain(
            answer_changes
                .iter()
                .filter_map(|change| answer_event(change, ingresses)),
        )
        .collect();
    Writes {
        events,
        ingress_statuses,
    }
}

/// The name DNS serves for `ingress`, as the snapshot and the providers spell it (lower
/// case, no trailing dot; empty when it has none).
pub fn served_name(ingress: &FederatedIngress) -> String {
    ingress
        .spec
        .effective_dns_name()
        .unwrap_or_default()
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// The Event of a cluster entering or leaving an ingress's answers (or, for Anycast, of
/// a route announced or withdrawn); `None` when the ingress is gone.
pub fn answer_event(
    change: &AnswerChange,
    ingresses: &BTreeMap<IngressKey, FederatedIngress>,
) -> Option<IngressEvent> {
    let (key, ingress) = change
        .ingress
        .split_once('/')
        .map(|(ns, name)| IngressKey::new(ns, name))
        .and_then(|k| ingresses.get_key_value(&k))?;
    let dns_name = ingress.spec.effective_dns_name().unwrap_or_default();
    let (type_, reason, message) = match (change.anycast, change.joined) {
        (Some(_), true) => (
            "Normal",
            "AnycastAnnounced",
            format!("{} {}", change.cluster, change.detail),
        ),
        (Some(_), false) => (
            "Warning",
            "AnycastWithdrawn",
            format!("{} {}", change.cluster, change.detail),
        ),
        (None, true) => (
            "Normal",
            "ClusterJoinedAnswers",
            format!(
                "cluster {} joined the DNS answers for {dns_name}: {}",
                change.cluster, change.detail
            ),
        ),
        (None, false) => (
            "Warning",
            "ClusterLeftAnswers",
            format!(
                "cluster {} left the DNS answers for {dns_name}: {}",
                change.cluster, change.detail
            ),
        ),
    };
    Some(IngressEvent {
        ingress: key.clone(),
        type_,
        reason,
        message,
    })
}

/// `status.dns` and the DNS-dependent conditions (`DNSReady`, then `Ready`) of one
/// ingress, from the snapshot the embedded server serves and what each configured DNS
/// provider that manages `dns_name` reported ([`ProviderNameStatus`], computed by
/// [`crate::providers`]).
///
/// Who is expected to serve the name: the embedded server when the name lies in one of
/// its zones (`dns.zones`); otherwise, when at least one provider that is not a dry run
/// manages it, the providers alone (a *provider-only* name, issue 23 item 4: the
/// embedded server refuses it, by design, and is not waited for).
///
/// # Guarantees
/// - `providers` lists the embedded server first (`synced` true: it answers from the
///   snapshot), then the configured providers in config order; for a provider-only name
///   only the providers.
/// - `DNSReady` is True only when the embedded server serves the name (unless it is
///   provider-only) and every provider (dry-run ones excepted: they publish nothing by
///   design) is synced, a provider-only name's providers holding records for it;
///   otherwise its reason is `NotServed` (the embedded server, or no provider holds
///   records), `ProviderNotSynced` (a provider failed: its name and words) or `Syncing`
///   (a provider has not caught up with this name's latest change yet), in that order
///   (for a provider-only name: `ProviderNotSynced`, `Syncing`, `NotServed`).
pub fn dns_status(
    status: &mut FederatedIngressStatus,
    dns_name: &str,
    problems: Option<&Vec<String>>,
    snapshot: &Snapshot,
    providers: &[ProviderNameStatus],
    generation: i64,
    now: Time,
) {
    let records = snapshot.records_for_status(dns_name);
    let provider_only = !in_zones(dns_name, &snapshot.zones())
        && providers
            .iter()
            .any(|p| p.readiness != ProviderReadiness::DryRun);
    let mut statuses = Vec::new();
    if !provider_only {
        statuses.push(DnsProviderStatus {
            name: "embedded".into(),
            synced: true,
            ..DnsProviderStatus::default()
        });
    }
    statuses.extend(providers.iter().map(|p| p.status.clone()));
    let served = problems.is_none_or(Vec::is_empty) && !records.is_empty();
    let why_not_served = || {
        problems
            .map(|p| p.join("; "))
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| format!("{dns_name} has no records (no cluster answers)"))
    };
    status.dns = Some(DnsStatus {
        records,
        providers: statuses,
    });
    let ready = if provider_only {
        provider_only_ready(dns_name, providers)
    } else if !served {
        condition(CONDITION_DNS_READY, false, "NotServed", why_not_served())
    } else {
        embedded_ready(dns_name, providers)
    };
    set_condition(
        &mut status.conditions,
        ready.with_observed_generation(generation),
        now,
    );
    let all = [
        CONDITION_PLACED,
        CONDITION_PROPAGATED,
        CONDITION_HEALTHY,
        CONDITION_DNS_READY,
    ]
    .iter()
    .all(|t| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == *t && c.is_true())
    });
    let ready = if all {
        condition(
            CONDITION_READY,
            true,
            "Ready",
            "placed, applied, healthy and served in DNS",
        )
    } else {
        condition(
            CONDITION_READY,
            false,
            "NotReady",
            "see the Placed, Propagated, Healthy and DNSReady conditions",
        )
    };
    set_condition(
        &mut status.conditions,
        ready.with_observed_generation(generation),
        now,
    );
}

/// Whether `dns_name` is one of `zones` (apexes) or lies below one.
fn in_zones(dns_name: &str, zones: &[&str]) -> bool {
    !dns_name.is_empty()
        && zones
            .iter()
            .any(|z| dns_name == *z || dns_name.ends_with(&format!(".{z}")))
}

/// The providers' failures and those not caught up yet, in words (`provider aws: …`).
fn provider_troubles(providers: &[ProviderNameStatus]) -> (Vec<String>, Vec<String>) {
    let mut failed = Vec::new();
    let mut syncing = Vec::new();
    for p in providers {
        match &p.readiness {
            ProviderReadiness::Failed(why) => {
                failed.push(format!("provider {}: {why}", p.status.name));
            }
            ProviderReadiness::Syncing(why) => {
                syncing.push(format!("provider {}: {why}", p.status.name));
            }
            ProviderReadiness::Synced | ProviderReadiness::DryRun => {}
        }
    }
    (failed, syncing)
}

/// `DNSReady` of a name the embedded server serves: True when every provider is synced.
fn embedded_ready(dns_name: &str, providers: &[ProviderNameStatus]) -> Condition {
    let (failed, syncing) = provider_troubles(providers);
    if !failed.is_empty() {
        condition(
            CONDITION_DNS_READY,
            false,
            "ProviderNotSynced",
            format!(
                "{dns_name} is served by the embedded DNS server, but {}",
                failed.join("; ")
            ),
        )
    } else if !syncing.is_empty() {
        condition(
            CONDITION_DNS_READY,
            false,
            "Syncing",
            format!(
                "{dns_name} is served by the embedded DNS server; {}",
                syncing.join("; ")
            ),
        )
    } else if providers.is_empty() {
        condition(
            CONDITION_DNS_READY,
            true,
            "Served",
            format!("{dns_name} is served by the embedded DNS server"),
        )
    } else {
        let names: Vec<&str> = providers.iter().map(|p| p.status.name.as_str()).collect();
        condition(
            CONDITION_DNS_READY,
            true,
            "Served",
            format!(
                "{dns_name} is served by the embedded DNS server and synced to {}",
                names.join(", ")
            ),
        )
    }
}

/// `DNSReady` of a provider-only name (outside the embedded server's zones): True when
/// every provider that publishes it (dry runs excepted) is synced and holds records for
/// it.
fn provider_only_ready(dns_name: &str, providers: &[ProviderNameStatus]) -> Condition {
    let outside = format!("{dns_name} lies outside the embedded DNS server's zones");
    let (failed, syncing) = provider_troubles(providers);
    let publishing: Vec<&ProviderNameStatus> = providers
        .iter()
        .filter(|p| p.readiness != ProviderReadiness::DryRun)
        .collect();
    let empty: Vec<&str> = publishing
        .iter()
        .filter(|p| p.status.records.is_empty())
        .map(|p| p.status.name.as_str())
        .collect();
    let names: Vec<&str> = publishing.iter().map(|p| p.status.name.as_str()).collect();
    if !failed.is_empty() {
        condition(
            CONDITION_DNS_READY,
            false,
            "ProviderNotSynced",
            format!("{outside} and {}", failed.join("; ")),
        )
    } else if !syncing.is_empty() {
        condition(
            CONDITION_DNS_READY,
            false,
            "Syncing",
            format!("{outside}; {}", syncing.join("; ")),
        )
    } else if !empty.is_empty() {
        condition(
            CONDITION_DNS_READY,
            false,
            "NotServed",
            format!(
                "{outside}, and {} hold no records for it (no cluster answers)",
                empty.join(", ")
            ),
        )
    } else {
        condition(
            CONDITION_DNS_READY,
            true,
            "Served",
            format!(
                "{dns_name} is published by {}; it lies outside the embedded DNS server's zones, so that server does not answer for it",
                names.join(", ")
            ),
        )
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
