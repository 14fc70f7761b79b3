//! Prometheus metrics of the API server: requests by verb/resource/code, request
//! latency histograms, open watches and the store revision.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
            let histogram = latency
                .entry((verb.to_string(), resource.to_string()))
                .or_default();
            if histogram.counts.is_empty() {
                histogram.counts = vec![0; BUCKETS.len()];
            }
            let seconds = elapsed.as_secs_f64();
            for (count, bound) in histogram.counts.iter_mut().zip(BUCKETS) {
                if seconds <= *bound {
                    *count += 1;
                }
            }
            histogram.sum += seconds;
            histogram.count += 1;
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
                for (count, bound) in histogram.counts.iter().zip(BUCKETS) {
                    let _ = writeln!(
                        out,
                        "apiserver_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {count}"
                    );
                }
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                    histogram.count
                );
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_sum{{{labels}}} {}",
                    histogram.sum
                );
                let _ = writeln!(
                    out,
                    "apiserver_request_duration_seconds_count{{{labels}}} {}",
                    histogram.count
                );
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
