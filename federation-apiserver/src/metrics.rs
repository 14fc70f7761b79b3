//! Prometheus metrics of the API server: requests by verb/resource/code, request
//! latency histograms, open watches and the store revision ([`Metrics`]); and of the
//! hub ([`HubMetrics`]): controller passes, dirty sets, DNS snapshot builds, answer
//! changes by reason, per (ingress, cluster) serving and healthy gauges, connected
//! agents. The embedded DNS server's own counters are appended by `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_api::plan::IngressKey;

use crate::hub::gslb::AnswerChange;
use crate::hub::routing_state::IngressRouting;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (count, bound) in self.counts.iter_mut().zip(BUCKETS) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// Writes `name_bucket`, `name_sum` and `name_count` with `labels` (may be empty).
    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let counts = if self.counts.is_empty() {
            vec![0; BUCKETS.len()]
        } else {
            self.counts.clone()
        };
        for (count, bound) in counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<(String, String), Histogram>>,
    watches: AtomicI64,
}

/// Decrements the open-watch gauge when the watch ends.
pub struct WatchGuard(Arc<Metrics>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.watches.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn observe(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        if let Ok(mut requests) = self.requests.lock() {
            *requests
                .entry((verb.to_string(), resource.to_string(), code))
                .or_default() += 1;
        }
        // Watches last as long as the client wants: their latency says nothing.
        if verb == "watch" {
            return;
        }
        if let Ok(mut latency) = self.latency.lock() {
            latency
                .entry((verb.to_string(), resource.to_string()))
                .or_default()
                .observe(elapsed.as_secs_f64());
        }
    }

    pub fn watch_started(self: &Arc<Self>) -> WatchGuard {
        self.watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard(self.clone())
    }

    pub fn open_watches(&self) -> i64 {
        self.watches.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition.
    pub fn render(&self, store_revision: i64) -> String {
        let mut out = String::new();
        out.push_str("# HELP apiserver_request_total Requests by verb, resource and HTTP code.\n");
        out.push_str("# TYPE apiserver_request_total counter\n");
        if let Ok(requests) = self.requests.lock() {
            for ((verb, resource, code), count) in requests.iter() {
                let _ = writeln!(
                    out,
                    "apiserver_request_total{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}} {count}"
                );
            }
        }
        out.push_str("# HELP apiserver_request_duration_seconds Request latency by verb and resource (watches excluded).\n");
        out.push_str("# TYPE apiserver_request_duration_seconds histogram\n");
        if let Ok(latency) = self.latency.lock() {
            for ((verb, resource), histogram) in latency.iter() {
                let labels = format!("verb=\"{verb}\",resource=\"{resource}\"");
                histogram.write(&mut out, "apiserver_request_duration_seconds", &labels);
            }
        }
        out.push_str(
            "# HELP apiserver_watches Open watch requests.\n# TYPE apiserver_watches gauge\n",
        );
        let _ = writeln!(out, "apiserver_watches {}", self.open_watches());
        out.push_str("# HELP apiserver_storage_revision Current store revision.\n# TYPE apiserver_storage_revision gauge\n");
        let _ = writeln!(out, "apiserver_storage_revision {store_revision}");
        out
    }
}

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
    }
}

/// Escapes a Prometheus label value.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let metrics = Arc::new(Metrics::default());
        metrics.observe(
            "create",
            "federatedingresses",
            201,
            Duration::from_millis(3),
        );
        metrics.observe(
            "create",
            "federatedingresses",
            201,
            Duration::from_millis(30),
        );
        let guard = metrics.watch_started();
        let text = metrics.render(42);
        assert!(text.contains("apiserver_request_total{verb=\"create\",resource=\"federatedingresses\",code=\"201\"} 2"));
        assert!(text.contains("le=\"0.005\"} 1"));
        assert!(text.contains("apiserver_watches 1"));
        assert!(text.contains("apiserver_storage_revision 42"));
        drop(guard);
        assert_eq!(metrics.open_watches(), 0);
    }
}
