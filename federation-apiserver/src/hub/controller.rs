//! The hub's reconcile loop: placement, conflicts, per-cluster plans, and status.
//!
//! Each pass reads every Cluster and FederatedIngress, places each ingress (sticky: the
//! clusters in its status stay while they still qualify), finds conflicts, publishes
//! each cluster's plan to the [`Hub`] and writes the Cluster and FederatedIngress
//! status that changed. A pass runs after any store change, any agent event
//! (connect, ack, report, disconnect) and at least every `tick` (leases expire
//! without events), debounced so bursts cost one pass.
//!
//! # Guarantees
//! Status is written only when it differs from what is stored (transition times move
//! only when a condition's status does); writes are batched per pass.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::cluster::{CONDITION_CONNECTED, CONDITION_READY as CLUSTER_READY, ClusterLoad};
use fedingress_api::conflict::{Conflict, PlacedIngress, find_conflicts};
use fedingress_api::ingress::{
    BackendStatus, CONDITION_DNS_READY, CONDITION_HEALTHY, CONDITION_PLACED, CONDITION_PROPAGATED,
    CONDITION_READY, ClusterIngressStatus, ClusterPhase, DnsProviderStatus, DnsStatus,
    FederatedIngressStatus, REASON_CONFLICT,
};
use fedingress_api::meta::{Condition, ConditionStatus, set_condition};
use fedingress_api::plan::{IngressKey, cluster_plans};
use fedingress_api::{Cluster, ClusterStatus, FederatedIngress, Resource, Time};
use fedingress_dns::zone::Snapshot;
use fedingress_dns::{ClusterView, Location, RoutedIngress, SrvService};
use futures_util::StreamExt;

use super::events::Recorder;
use super::gslb::Gslb;
use super::tokens::TokenStore;
use super::{AgentState, Hub};
use crate::registry::{Filter, Registry, Scope};

/// Wait after a trigger before a pass, so bursts coalesce.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// lastHeartbeatTime is rewritten at most this often while nothing else changes.
const HEARTBEAT_TIME_RESOLUTION: Duration = Duration::from_secs(30);

pub struct Controller {
    registry: Registry,
    hub: Arc<Hub>,
    tokens: TokenStore,
    tick: Duration,
    /// Clusters seen in the previous pass (their tokens are revoked when they go).
    known_clusters: Vec<String>,
    /// DNS steering, when the embedded DNS server runs.
    gslb: Option<Gslb>,
    recorder: Recorder,
    /// When a pending failback needs a pass.
    wake_in: Option<Duration>,
    last_prune: Option<std::time::Instant>,
}

impl Controller {
    pub fn new(registry: Registry, hub: Arc<Hub>, tokens: TokenStore, gslb: Option<Gslb>) -> Self {
        let tick = (hub.settings.lease / 4).max(Duration::from_millis(100));
        Self {
            recorder: Recorder::new(registry.clone()),
            registry,
            hub,
            tokens,
            tick,
            known_clusters: Vec::new(),
            gslb,
            wake_in: None,
            last_prune: None,
        }
    }

    /// Runs forever.
    pub async fn run(mut self) {
        let mut changes = self.hub.subscribe_changes();
        loop {
            let revision = match self.pass().await {
                Ok(revision) => revision,
                Err(e) => {
                    tracing::warn!(error = %e, "reconcile pass failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            // Wait for the next trigger.
            let prefix = format!("/registry/{}/", fedingress_api::GROUP);
            let watch = self.registry.store().watch(&prefix, revision).await;
            let mut events = match watch {
                Ok(events) => events,
                Err(e) => {
                    tracing::debug!(error = %e, "controller watch failed; next pass on tick");
                    tokio::time::sleep(self.tick).await;
                    continue;
                }
            };
            let wait = self
                .wake_in
                .map_or(self.tick, |w| w.min(self.tick))
                .max(Duration::from_millis(5));
            tokio::select! {
                _ = events.next() => {}
                _ = changes.changed() => {}
                () = tokio::time::sleep(wait) => {}
            }
            tokio::time::sleep(DEBOUNCE).await;
        }
    }

    /// One reconcile pass; returns the store revision it read.
    async fn pass(&mut self) -> Result<i64, crate::status::ApiError> {
        let all = Filter::default();
        let clusters_page = self.registry.list::<Cluster>(None, &all, 0, None).await?;
        let ingresses_page = self
            .registry
            .list::<FederatedIngress>(None, &all, 0, None)
            .await?;
        let revision = clusters_page
            .resource_version
            .max(ingresses_page.resource_version);
        let clusters = clusters_page.items;
        let ingresses = ingresses_page.items;
        let agents = self.hub.agents();
        let now = Time(chrono::Utc::now());

        // Clusters that went away: their agents' tokens go too.
        let names: Vec<String> = clusters.iter().map(|c| c.name().to_string()).collect();
        for gone in self.known_clusters.iter().filter(|n| !names.contains(n)) {
            match self.tokens.revoke_all(gone).await {
                Ok(n) => {
                    tracing::info!(cluster = %gone, tokens = n, "cluster deleted: tokens revoked")
                }
                Err(e) => {
                    tracing::warn!(cluster = %gone, error = %e, "revoking tokens of a deleted cluster failed")
                }
            }
        }
        self.known_clusters = names.clone();
        self.hub.retain_clusters(&names);

        // Placement (sticky through status) and conflicts. Objects being deleted are
        // placed nowhere: their listeners close.
        let placed: Vec<PlacedIngress> = ingresses
            .iter()
            .map(|ingress| {
                let clusters = if ingress.metadata().deletion_timestamp.is_some() {
                    Vec::new()
                } else {
                    let previous: Vec<String> = ingress
                        .status
                        .as_ref()
                        .map(|s| s.clusters.iter().map(|c| c.name.clone()).collect())
                        .unwrap_or_default();
                    fedingress_api::placement::place(ingress, &clusters, &previous).clusters
                };
                PlacedIngress { ingress, clusters }
            })
            .collect();
        let conflicts = find_conflicts(&placed);
        let plans = cluster_plans(&placed, &conflicts);
        let version = u64::try_from(revision).unwrap_or_default();
        for cluster in &clusters {
            let plan = plans.get(cluster.name()).cloned().unwrap_or_default();
            self.hub.publish(cluster.name(), plan, version);
        }

        // Status: computed for every object, then DNS, then written where it changed.
        for cluster in &clusters {
            let agent = agents.get(cluster.name());
            let mut status = cluster.status.clone().unwrap_or_default();
            cluster_status(cluster, agent, &mut status, now);
            if Some(&status) != cluster.status.as_ref() {
                self.write_status(cluster, status).await;
            }
        }
        let by_name: BTreeMap<&str, &Cluster> = clusters.iter().map(|c| (c.name(), c)).collect();
        let mut statuses = Vec::with_capacity(placed.len());
        for placed_ingress in &placed {
            let ingress = placed_ingress.ingress;
            let key = placed_ingress.key();
            let mine: Vec<&Conflict> = conflicts.iter().filter(|c| c.loser == key).collect();
            let mut status = ingress.status.clone().unwrap_or_default();
            ingress_status(
                ingress,
                &key,
                &placed_ingress.clusters,
                &mine,
                &by_name,
                &agents,
                &mut status,
                now,
            );
            statuses.push(status);
        }
        if let Some(gslb) = &mut self.gslb {
            let mut order: Vec<usize> = (0..placed.len()).collect();
            order.sort_by(|&a, &b| {
                let (a, b) = (placed[a].ingress.metadata(), placed[b].ingress.metadata());
                (a.creation_timestamp.map(|t| t.0), &a.namespace, &a.name).cmp(&(
                    b.creation_timestamp.map(|t| t.0),
                    &b.namespace,
                    &b.name,
                ))
            });
            let routed: Vec<RoutedIngress> = order
                .iter()
                .filter_map(|&i| {
                    routed_ingress(
                        placed[i].ingress,
                        &statuses[i],
                        &conflicts,
                        &by_name,
                        &agents,
                    )
                })
                .collect();
            let now_ms = u64::try_from(now.0.timestamp_millis()).unwrap_or_default();
            let step = gslb.step(routed, revision, now_ms);
            self.wake_in = step.wake_in;
            let snapshot = gslb.snapshot();
            for (placed_ingress, status) in placed.iter().zip(statuses.iter_mut()) {
                let key = placed_ingress.key().to_string();
                let dns_name = placed_ingress
                    .ingress
                    .spec
                    .effective_dns_name()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                dns_status(
                    status,
                    &dns_name,
                    step.problems.get(&key),
                    &snapshot,
                    placed_ingress.ingress.metadata().generation.unwrap_or(0),
                    now,
                );
            }
            for change in step.changes {
                let Some(index) = placed
                    .iter()
                    .position(|p| p.key().to_string() == change.ingress)
                else {
                    continue;
                };
                let ingress = placed[index].ingress;
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
                self.recorder
                    .record(ingress, type_, reason, &message, now)
                    .await;
            }
        }
        for (placed_ingress, status) in placed.iter().zip(statuses) {
            let ingress = placed_ingress.ingress;
            if Some(&status) != ingress.status.as_ref() {
                self.write_status(ingress, status).await;
            }
        }
        if self
            .last_prune
            .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
        {
            self.last_prune = Some(std::time::Instant::now());
            self.recorder.prune(now).await;
        }
        Ok(revision)
    }

    async fn write_status<R: Resource + HasStatus>(&self, object: &R, status: R::Status) {
        let meta = object.metadata();
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta.namespace.clone();
        let mut next = object.clone();
        next.set_status(status);
        // The status is computed from this resourceVersion: a concurrent write wins and
        // the next pass recomputes.
        let result = self
            .registry
            .update::<R>(namespace.as_deref(), &name, Scope::Status, false, |_| {
                Ok(next.clone())
            })
            .await;
        if let Err(e) = result {
            tracing::debug!(kind = R::KIND, name, error = %e, "status write skipped");
        }
    }
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

fn condition(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
    let status = if ok {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    Condition::new(type_, status, reason, message)
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
                rps: (report.requests_per_second * 100.0).round() / 100.0,
                active_connections: i64::try_from(report.active_connections).unwrap_or(i64::MAX),
                cpu: status.load.as_ref().map(|l| l.cpu).unwrap_or_default(),
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
    let (ready, reason, message) = if cluster.spec.unschedulable {
        (
            false,
            "Cordoned",
            "cordoned: no new placement and out of routing; applied listeners keep serving",
        )
    } else if connected {
        (true, "Ready", "connected and schedulable")
    } else {
        (
            false,
            "Offline",
            "the agent is not connected: out of routing",
        )
    };
    set_condition(
        &mut status.conditions,
        condition(CLUSTER_READY, ready, reason, message),
        now,
    );
}

/// FederatedIngress status from placement, conflicts and the agents' acks and reports.
#[allow(clippy::too_many_arguments)]
fn ingress_status(
    ingress: &FederatedIngress,
    key: &IngressKey,
    placed: &[String],
    conflicts: &[&Conflict],
    clusters: &BTreeMap<&str, &Cluster>,
    agents: &BTreeMap<String, AgentState>,
    status: &mut FederatedIngressStatus,
    now: Time,
) {
    let generation = ingress.metadata().generation.unwrap_or(0);
    status.observed_generation = Some(generation);
    let mut entries = Vec::new();
    for name in placed {
        let conflict = conflicts.iter().find(|c| c.applies_to(name));
        let agent = agents.get(name.as_str());
        let cordoned = clusters
            .get(name.as_str())
            .is_some_and(|c| c.spec.unschedulable);
        entries.push(cluster_entry(
            key,
            generation,
            name,
            conflict.copied(),
            agent,
            cordoned,
        ));
    }
    status.clusters = entries;

    let observed = |c: Condition| c.with_observed_generation(generation);
    let placed_condition = if !conflicts.is_empty() {
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
        condition(
            CONDITION_PLACED,
            true,
            "Placed",
            format!("placed on {}", placed.join(", ")),
        )
    };
    let placed_ok = placed_condition.is_true();
    set_condition(&mut status.conditions, observed(placed_condition), now);

    let serving: Vec<&ClusterIngressStatus> = status
        .clusters
        .iter()
        .filter(|c| !c.message.starts_with("conflict"))
        .collect();
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
    set_condition(&mut status.conditions, observed(propagated), now);

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
    set_condition(&mut status.conditions, observed(health), now);

    let ready = placed_ok && propagated_ok && healthy_ok;
    let ready_condition = if ready {
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
    };
    set_condition(&mut status.conditions, observed(ready_condition), now);
}

fn cluster_entry(
    key: &IngressKey,
    generation: i64,
    name: &str,
    conflict: Option<&Conflict>,
    agent: Option<&AgentState>,
    cordoned: bool,
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
    let Some(agent) = agent else {
        entry.phase = ClusterPhase::Offline;
        entry.message = "the cluster's agent has not connected".into();
        return entry;
    };
    let report = agent
        .report
        .as_ref()
        .and_then(|r| r.ingresses.iter().find(|i| &i.key == key));
    if let Some(report) = report {
        entry.addresses = report.addresses.clone();
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
    } else if let Some(report) = &agent.report {
        entry.addresses = report.addresses.clone();
    }
    if !agent.connected {
        entry.phase = ClusterPhase::Offline;
        entry.message = "the cluster's agent missed its lease: out of routing (its listeners keep serving what they had)".into();
        return entry;
    }
    let applied = agent
        .applied
        .as_ref()
        .and_then(|p| p.plan.ingresses.get(key))
        .is_some_and(|share| share.generation == generation);
    if !applied {
        entry.phase = ClusterPhase::Pending;
        entry.message = "waiting for the agent to apply this generation".into();
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
        entry.phase = ClusterPhase::Failed;
        entry.message = errors.join("; ");
        return entry;
    }
    entry.phase = ClusterPhase::Applied;
    let reported = report.is_some_and(|r| r.applied_generation == generation);
    entry.healthy =
        reported && !entry.backends.is_empty() && entry.backends.iter().all(|b| b.ready > 0);
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
/// DNS name belongs to an older object).
fn routed_ingress(
    ingress: &FederatedIngress,
    status: &FederatedIngressStatus,
    conflicts: &[Conflict],
    clusters: &BTreeMap<&str, &Cluster>,
    agents: &BTreeMap<String, AgentState>,
) -> Option<RoutedIngress> {
    let meta = ingress.metadata();
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let key = IngressKey::of(ingress);
    if conflicts
        .iter()
        .any(|c| c.loser == key && c.cluster.is_none())
    {
        return None;
    }
    let dns_name = ingress
        .spec
        .effective_dns_name()?
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let views = status
        .clusters
        .iter()
        .filter(|entry| {
            !conflicts
                .iter()
                .any(|c| c.loser == key && c.applies_to(&entry.name))
        })
        .filter_map(|entry| {
            let cluster = clusters.get(entry.name.as_str())?;
            let location = cluster.spec.location.as_ref();
            let load = agents
                .get(cluster.name())
                .and_then(|a| a.report.as_ref())
                .map(|r| {
                    let connections: f64 = r
                        .ingresses
                        .iter()
                        .flat_map(|i| i.listeners.iter())
                        .map(|l| l.connections_per_second)
                        .sum();
                    r.requests_per_second + connections
                });
            Some(ClusterView {
                name: entry.name.clone(),
                location: Location {
                    region: cluster.spec.region.clone(),
                    latitude: location.map(|l| l.latitude).unwrap_or_default(),
                    longitude: location.map(|l| l.longitude).unwrap_or_default(),
                },
                healthy: entry.healthy,
                cordoned: cluster.spec.unschedulable,
                ips: entry.addresses.iter().filter_map(|a| a.ip).collect(),
                hostnames: entry
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
                    .map(|r| r as f64),
            })
        })
        .collect();
    let mut srv: Vec<SrvService> = ingress
        .spec
        .rules
        .iter()
        .filter(|r| r.protocol.is_l4())
        .filter_map(|r| {
            Some(SrvService {
                name: r.name.clone()?,
                transport: r.protocol.as_str().to_ascii_lowercase(),
                port: u16::try_from(r.effective_port()?).ok()?,
            })
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
    })
}

/// `status.dns` and the DNSReady condition; Ready then also needs DNSReady.
fn dns_status(
    status: &mut FederatedIngressStatus,
    dns_name: &str,
    problems: Option<&Vec<String>>,
    snapshot: &Snapshot,
    generation: i64,
    now: Time,
) {
    let records = snapshot.records_for_status(dns_name);
    let served = problems.is_none_or(Vec::is_empty) && !records.is_empty();
    status.dns = Some(DnsStatus {
        records,
        providers: vec![DnsProviderStatus {
            name: "embedded".into(),
            synced: true,
            message: String::new(),
            last_sync_time: None,
        }],
    });
    let ready = if served {
        condition(
            CONDITION_DNS_READY,
            true,
            "Served",
            format!("{dns_name} is served by the embedded DNS server"),
        )
    } else {
        let why = problems
            .map(|p| p.join("; "))
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| format!("{dns_name} has no records (no cluster answers)"));
        condition(CONDITION_DNS_READY, false, "NotServed", why)
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
