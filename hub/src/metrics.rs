//! The hub's Prometheus metrics ([`HubMetrics`]): controller passes, dirty sets, DNS
//! snapshot builds, answer changes by reason, per (ingress, cluster) serving and healthy
//! gauges, the leader gauge ([`report_role`]), connected agents, agent gateway admission
//! ([`GatewayCounters`]), and the DNS providers' syncs and API calls (read from
//! [`ProviderMetrics`] at scrape time). Rendered after the API server's metrics.
//!
//! # Guarantees
//! Answer-change reasons come from a fixed set; a DNS provider's labels are its
//! configured name and type: bounded by the config.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_api::plan::IngressKey;

use super::gslb::AnswerChange;
use super::providers::{ProviderMetrics, render_providers};
use super::replication::Role;
use super::routing_state::IngressRouting;
use fedingress_apiserver::metrics::{Histogram, escape};

/// Why a cluster entered or left an ingress's answers, as a bounded label.
fn change_reason(change: &AnswerChange) -> &'static str {
    let detail = change.detail.as_str();
    if change.joined {
        return "healthy";
    }
    if detail.contains("cordon") {
        "cordoned"
    } else if detail.contains("no longer serving") {
        "removed"
    } else if detail.contains("offline")
        || detail.contains("not connected")
        || detail.contains("lease")
    {
        "offline"
    } else if detail.contains("unhealthy")
        || detail.contains("not healthy")
        || detail.contains("failback")
        || detail.contains("held")
    {
        "unhealthy"
    } else {
        "routing"
    }
}

/// The hub's metrics; rendered after the API server's.
#[derive(Default)]
pub struct HubMetrics {
    passes: Mutex<Histogram>,
    snapshot_builds: Mutex<Histogram>,
    dirty_ingresses: AtomicI64,
    dirty_clusters: AtomicI64,
    answer_changes: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// (ingress, cluster) → (serving, routable)
    routing: Mutex<BTreeMap<(String, String), (bool, bool)>>,
    leader: std::sync::atomic::AtomicBool,
    dns_serial: std::sync::atomic::AtomicU32,
    /// The agent gateway's admission of unauthenticated connections and streams.
    pub gateway: GatewayCounters,
    /// The configured DNS providers, when there are any.
    providers: std::sync::OnceLock<Arc<ProviderMetrics>>,
}

/// The agent gateway's limits on what has not authenticated yet.
#[derive(Default)]
pub struct GatewayCounters {
    /// Open agent gateway connections (gauge).
    pub connections: AtomicI64,
    /// Connections closed at accept: `limits.gateway.maxConnections` were open, each
    /// with a live stream.
    pub connections_refused: AtomicU64,
    /// Connections closed after `limits.gateway.helloTimeoutSeconds` without a live
    /// stream.
    pub idle_closed: AtomicU64,
    /// Connections without a live stream closed to make room for a new one.
    pub evicted: AtomicU64,
    /// Streams waiting for their Hello (gauge).
    pub pending: AtomicI64,
    /// Streams refused: `limits.gateway.maxPendingHellos` were waiting for their Hello.
    pub pending_refused: AtomicU64,
    /// Streams ended: no Hello within `limits.gateway.helloTimeoutSeconds`.
    pub hello_timeouts: AtomicU64,
}

impl GatewayCounters {
    fn render(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.push_str("# HELP fedingress_gateway_connections Open agent gateway connections.\n# TYPE fedingress_gateway_connections gauge\n");
        let _ = writeln!(
            out,
            "fedingress_gateway_connections {}",
            self.connections.load(Ordering::Relaxed)
        );
        out.push_str("# HELP fedingress_gateway_connections_refused_total Agent gateway connections closed at accept: limits.gateway.maxConnections were open.\n# TYPE fedingress_gateway_connections_refused_total counter\n");
        let _ = writeln!(
            out,
            "fedingress_gateway_connections_refused_total {}",
            get(&self.connections_refused)
        );
        out.push_str("# HELP fedingress_gateway_connections_closed_total Agent gateway connections closed by a limit, by reason: idle (no live stream within limits.gateway.helloTimeoutSeconds), evicted (without a live stream, for a new connection at limits.gateway.maxConnections).\n# TYPE fedingress_gateway_connections_closed_total counter\n");
        let _ = writeln!(
            out,
            "fedingress_gateway_connections_closed_total{{reason=\"idle\"}} {}",
            get(&self.idle_closed)
        );
        let _ = writeln!(
            out,
            "fedingress_gateway_connections_closed_total{{reason=\"evicted\"}} {}",
            get(&self.evicted)
        );
        out.push_str("# HELP fedingress_gateway_pending_streams Agent streams not yet authenticated (waiting for Hello).\n# TYPE fedingress_gateway_pending_streams gauge\n");
        let _ = writeln!(
            out,
            "fedingress_gateway_pending_streams {}",
            self.pending.load(Ordering::Relaxed)
        );
        out.push_str("# HELP fedingress_gateway_streams_refused_total Unauthenticated agent streams refused or ended by a limit, by reason.\n# TYPE fedingress_gateway_streams_refused_total counter\n");
        let _ = writeln!(
            out,
            "fedingress_gateway_streams_refused_total{{reason=\"pending_cap\"}} {}",
            get(&self.pending_refused)
        );
        let _ = writeln!(
            out,
            "fedingress_gateway_streams_refused_total{{reason=\"hello_timeout\"}} {}",
            get(&self.hello_timeouts)
        );
    }
}

impl HubMetrics {
    pub fn observe_pass(&self, elapsed: Duration) {
        if let Ok(mut h) = self.passes.lock() {
            h.observe(elapsed.as_secs_f64());
        }
    }

    /// Whether this replica's controller writes (always, with one replica).
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// The configured DNS providers, rendered at every scrape (set once).
    pub fn set_providers(&self, providers: Arc<ProviderMetrics>) {
        let _ = self.providers.set(providers);
    }

    /// The SOA serial of the snapshot being served.
    pub fn set_dns_serial(&self, serial: u32) {
        self.dns_serial.store(serial, Ordering::Relaxed);
    }

    pub fn dns_serial(&self) -> u32 {
        self.dns_serial.load(Ordering::Relaxed)
    }

    pub fn observe_snapshot_build(&self, elapsed: Duration) {
        if let Ok(mut h) = self.snapshot_builds.lock() {
            h.observe(elapsed.as_secs_f64());
        }
    }

    /// The size of the last pass's dirty set.
    pub fn observe_dirty(&self, ingresses: usize, clusters: usize) {
        self.dirty_ingresses.store(
            i64::try_from(ingresses).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        self.dirty_clusters.store(
            i64::try_from(clusters).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn count_answer_change(&self, change: &AnswerChange) {
        let direction = if change.joined { "joined" } else { "left" };
        if let Ok(mut changes) = self.answer_changes.lock() {
            *changes
                .entry((direction, change_reason(change)))
                .or_default() += 1;
        }
    }

    /// The serving and healthy gauges from the routing state.
    pub fn set_routing(&self, routing: &BTreeMap<IngressKey, IngressRouting>, now_ms: u64) {
        let gauges = routing
            .iter()
            .flat_map(|(key, r)| {
                r.clusters.iter().map(move |(cluster, serving)| {
                    (
                        (key.to_string(), cluster.clone()),
                        (true, serving.routable(now_ms)),
                    )
                })
            })
            .collect();
        if let Ok(mut current) = self.routing.lock() {
            *current = gauges;
        }
    }

    /// The Prometheus text of the hub's metrics; `connected_agents` and the DNS server's
    /// counters come from their owners.
    pub fn render(&self, out: &mut String, connected_agents: usize) {
        super::credentials::IDENTITY.render(out);
        out.push_str("# HELP fedingress_controller_pass_duration_seconds Duration of the hub controller's passes.\n# TYPE fedingress_controller_pass_duration_seconds histogram\n");
        if let Ok(h) = self.passes.lock() {
            h.write(out, "fedingress_controller_pass_duration_seconds", "");
        }
        out.push_str("# HELP fedingress_controller_dirty Ingresses and clusters recomputed by the last pass.\n# TYPE fedingress_controller_dirty gauge\n");
        let _ = writeln!(
            out,
            "fedingress_controller_dirty{{kind=\"ingress\"}} {}",
            self.dirty_ingresses.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "fedingress_controller_dirty{{kind=\"cluster\"}} {}",
            self.dirty_clusters.load(Ordering::Relaxed)
        );
        out.push_str("# HELP fedingress_dns_snapshot_build_seconds Time to build a DNS snapshot.\n# TYPE fedingress_dns_snapshot_build_seconds histogram\n");
        if let Ok(h) = self.snapshot_builds.lock() {
            h.write(out, "fedingress_dns_snapshot_build_seconds", "");
        }
        out.push_str("# HELP fedingress_dns_answer_changes_total Clusters entering or leaving an ingress's DNS answers, by reason.\n# TYPE fedingress_dns_answer_changes_total counter\n");
        if let Ok(changes) = self.answer_changes.lock() {
            for ((direction, reason), count) in changes.iter() {
                let _ = writeln!(
                    out,
                    "fedingress_dns_answer_changes_total{{direction=\"{direction}\",reason=\"{reason}\"}} {count}"
                );
            }
        }
        out.push_str("# HELP fedingress_ingress_cluster_serving Whether the cluster serves the ingress (its listener is applied).\n# TYPE fedingress_ingress_cluster_serving gauge\n");
        out.push_str("# HELP fedingress_ingress_cluster_healthy Whether routing may send clients of the ingress to the cluster (healthy, not held by failbackDelaySeconds).\n# TYPE fedingress_ingress_cluster_healthy gauge\n");
        if let Ok(routing) = self.routing.lock() {
            for ((ingress, cluster), (serving, healthy)) in routing.iter() {
                let labels = format!(
                    "ingress=\"{}\",cluster=\"{}\"",
                    escape(ingress),
                    escape(cluster)
                );
                let _ = writeln!(
                    out,
                    "fedingress_ingress_cluster_serving{{{labels}}} {}",
                    u8::from(*serving)
                );
                let _ = writeln!(
                    out,
                    "fedingress_ingress_cluster_healthy{{{labels}}} {}",
                    u8::from(*healthy)
                );
            }
        }
        out.push_str("# HELP fedingress_controller_leader Whether this replica's controller writes (the elected leader).\n# TYPE fedingress_controller_leader gauge\n");
        let _ = writeln!(
            out,
            "fedingress_controller_leader {}",
            u8::from(self.is_leader())
        );
        out.push_str("# HELP fedingress_dns_soa_serial SOA serial of the DNS snapshot being served.\n# TYPE fedingress_dns_soa_serial gauge\n");
        let _ = writeln!(out, "fedingress_dns_soa_serial {}", self.dns_serial());
        out.push_str("# HELP fedingress_agents_connected Cluster agents with a live session.\n# TYPE fedingress_agents_connected gauge\n");
        let _ = writeln!(out, "fedingress_agents_connected {connected_agents}");
        self.gateway.render(out);
        let providers = self
            .providers
            .get()
            .map(|p| p.samples())
            .unwrap_or_default();
        render_providers(out, &providers);
    }
}

/// Keeps the leader gauge true to the election (not to the controller, which may be in
/// the middle of a pass when leadership ends).
pub async fn report_role(mut role: tokio::sync::watch::Receiver<Role>, metrics: Arc<HubMetrics>) {
    loop {
        metrics.set_leader(role.borrow_and_update().is_leader());
        if role.changed().await.is_err() {
            return;
        }
    }
}
