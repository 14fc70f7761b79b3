//! Prometheus metrics of the API server: requests by verb/resource/code, request
//! latency histograms, open watches and the store revision ([`Metrics`]), and what the
//! serving limits refused ([`LimitCounters`]), with the text-format pieces the hub's
//! metrics reuse ([`Histogram`], [`escape`]). What the REST layer's extensions write
//! (the hub's metrics, the embedded DNS server's counters) follows these in `/metrics`
//! ([`crate::endpoints::extensions`]). [`routes`] serves `/metrics` through an [`Exposition`].
//!
//! # Guarantees
//! Label values built from URLs (verb, resource, subresource) come from a fixed set
//! ([`verb_label`], [`resource_label`]; the extensions' subresources are added once, when
//! the [`Metrics`] are made); anything else is `other`, so random paths cannot grow the
//! label set.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// A latency histogram over fixed buckets (seconds).
#[derive(Default)]
pub struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
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
    pub fn write(&self, out: &mut String, name: &str, labels: &str) {
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

/// The verbs a request label may name; anything else is `other`.
const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// The resources (plurals) a request label may name.
const RESOURCES: &[&str] = &[
    "federatedingresses",
    "clusters",
    "ingresspools",
    "ingressclaims",
    "events",
    "roles",
    "rolebindings",
    "clusterroles",
    "clusterrolebindings",
    "selfsubjectaccessreviews",
    "selfsubjectrulesreviews",
];

/// The subresources the REST layer serves itself; those of the extensions are added
/// when the [`Metrics`] are made ([`Metrics::with_subresources`]).
const SUBRESOURCES: &[&str] = &["status"];

/// The `verb` label: one of a fixed set, `""` for requests refused before a verb was
/// known, else `other`.
pub fn verb_label(verb: &str) -> &'static str {
    if verb.is_empty() {
        return "";
    }
    VERBS
        .iter()
        .find(|known| **known == verb)
        .copied()
        .unwrap_or("other")
}

/// A `resource` label: a plural (or `""`, `other`) and maybe a subresource, each from a
/// fixed set, so that a request's labels are never allocated. Ordered as their text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResourceLabel(&'static str, Option<&'static str>);

impl std::fmt::Display for ResourceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.1 {
            Some(sub) => write!(f, "{}/{sub}", self.0),
            None => f.write_str(self.0),
        }
    }
}

/// The `resource` label: `plural` or `plural/subresource` from a fixed set (the
/// subresources: `subresources`), `""` for non-resource paths, else `other`.
pub fn resource_label(resource: &str, subresources: &[&'static str]) -> ResourceLabel {
    const OTHER: ResourceLabel = ResourceLabel("other", None);
    if resource.is_empty() {
        return ResourceLabel("", None);
    }
    let (plural, sub) = match resource.split_once('/') {
        Some((plural, sub)) => (plural, Some(sub)),
        None => (resource, None),
    };
    let Some(plural) = RESOURCES.iter().find(|known| **known == plural) else {
        return OTHER;
    };
    match sub {
        None => ResourceLabel(plural, None),
        Some(sub) => subresources
            .iter()
            .find(|known| **known == sub)
            .map_or(OTHER, |sub| ResourceLabel(plural, Some(sub))),
    }
}

/// What the serving limits refused or ended; rendered with [`Metrics`].
#[derive(Default)]
pub struct LimitCounters {
    /// Open REST connections (gauge).
    pub connections: AtomicI64,
    /// REST connections closed at accept because `limits.maxConnections` were open.
    pub connections_refused: AtomicU64,
    /// HTTP/1 connections closed because request headers did not arrive in time.
    pub header_timeouts: AtomicU64,
    /// Connections closed after `limits.idleTimeoutSeconds` without a request.
    pub idle_closed: AtomicU64,
    /// Requests answered 504: no answer within `limits.requestTimeoutSeconds`.
    pub request_timeouts: AtomicU64,
    /// Requests answered 429 by the read-only in-flight cap.
    pub inflight_refused_readonly: AtomicU64,
    /// Requests answered 429 by the mutating in-flight cap.
    pub inflight_refused_mutating: AtomicU64,
    /// Watches answered 429 by `limits.maxWatches`.
    pub watches_refused_total: AtomicU64,
    /// Watches answered 429 by `limits.maxWatchesPerUser`.
    pub watches_refused_user: AtomicU64,
    /// Watches whose `timeoutSeconds` was lowered to `limits.maxWatchTimeoutSeconds`.
    pub watch_timeouts_capped: AtomicU64,
}

impl LimitCounters {
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.push_str("# HELP apiserver_connections Open REST API connections.\n# TYPE apiserver_connections gauge\n");
        let _ = writeln!(
            out,
            "apiserver_connections {}",
            self.connections.load(Ordering::Relaxed)
        );
        out.push_str("# HELP apiserver_connections_refused_total REST API connections closed at accept: limits.maxConnections were open.\n# TYPE apiserver_connections_refused_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_connections_refused_total {}",
            get(&self.connections_refused)
        );
        out.push_str("# HELP apiserver_connections_closed_total REST API connections closed by a limit, by reason.\n# TYPE apiserver_connections_closed_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_connections_closed_total{{reason=\"header_timeout\"}} {}",
            get(&self.header_timeouts)
        );
        let _ = writeln!(
            out,
            "apiserver_connections_closed_total{{reason=\"idle\"}} {}",
            get(&self.idle_closed)
        );
        out.push_str("# HELP apiserver_dropped_requests_total Requests answered 429 by the in-flight caps, by request kind (as kube-apiserver's).\n# TYPE apiserver_dropped_requests_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_dropped_requests_total{{request_kind=\"readOnly\"}} {}",
            get(&self.inflight_refused_readonly)
        );
        let _ = writeln!(
            out,
            "apiserver_dropped_requests_total{{request_kind=\"mutating\"}} {}",
            get(&self.inflight_refused_mutating)
        );
        out.push_str("# HELP apiserver_request_timeouts_total Requests answered 504: no answer within limits.requestTimeoutSeconds (body read included).\n# TYPE apiserver_request_timeouts_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_request_timeouts_total {}",
            get(&self.request_timeouts)
        );
        out.push_str("# HELP apiserver_watches_refused_total Watches answered 429 by a watch cap, by cap.\n# TYPE apiserver_watches_refused_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_watches_refused_total{{limit=\"total\"}} {}",
            get(&self.watches_refused_total)
        );
        let _ = writeln!(
            out,
            "apiserver_watches_refused_total{{limit=\"user\"}} {}",
            get(&self.watches_refused_user)
        );
        out.push_str("# HELP apiserver_watch_timeouts_capped_total Watches whose timeoutSeconds was lowered to limits.maxWatchTimeoutSeconds.\n# TYPE apiserver_watch_timeouts_capped_total counter\n");
        let _ = writeln!(
            out,
            "apiserver_watch_timeouts_capped_total {}",
            get(&self.watch_timeouts_capped)
        );
    }
}

/// A request's labels: verb and resource, each from a fixed set.
type Labels = (&'static str, ResourceLabel);

pub struct Metrics {
    /// The subresources the `resource` label may name.
    subresources: Vec<&'static str>,
    requests: Mutex<BTreeMap<(Labels, u16), u64>>,
    latency: Mutex<BTreeMap<Labels, Histogram>>,
    watches: AtomicI64,
    /// Open watches per user, for `limits.maxWatchesPerUser`.
    watches_by_user: Mutex<std::collections::HashMap<String, usize>>,
    pub limits: LimitCounters,
}

/// Why a watch was refused (answered 429).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRefused {
    /// `limits.maxWatches` watches are open.
    Total(usize),
    /// The user has `limits.maxWatchesPerUser` watches open.
    User(usize),
}

/// Decrements the open-watch gauge (and the user's count) when the watch ends.
pub struct WatchGuard {
    metrics: Arc<Metrics>,
    user: String,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.metrics.watches.fetch_sub(1, Ordering::Relaxed);
        // Poisoned or not, as `try_start_watch` counts: a skipped decrement would refuse
        // the user's watches for good.
        let mut by_user = self
            .metrics
            .watches_by_user
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = by_user.get_mut(&self.user) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                by_user.remove(&self.user);
            }
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::with_subresources(&[])
    }
}

impl Metrics {
    /// Metrics whose `resource` label may also name `subresources` (those served by the
    /// REST layer's extensions), beside `status`.
    pub fn with_subresources(subresources: &[&'static str]) -> Self {
        let mut all = SUBRESOURCES.to_vec();
        all.extend(subresources.iter().filter(|s| !SUBRESOURCES.contains(s)));
        Self {
            subresources: all,
            requests: Mutex::default(),
            latency: Mutex::default(),
            watches: AtomicI64::default(),
            watches_by_user: Mutex::default(),
            limits: LimitCounters::default(),
        }
    }

    pub fn observe(&self, verb: &str, resource: &str, code: u16, elapsed: Duration) {
        let verb = verb_label(verb);
        let resource = resource_label(resource, &self.subresources);
        // Watches last as long as the client wants: their latency says nothing.
        if verb != "watch"
            && let Ok(mut latency) = self.latency.lock()
        {
            latency
                .entry((verb, resource))
                .or_default()
                .observe(elapsed.as_secs_f64());
        }
        if let Ok(mut requests) = self.requests.lock() {
            *requests.entry(((verb, resource), code)).or_default() += 1;
        }
    }

    /// Counts an open watch without a cap (in-process tests).
    pub fn watch_started(self: &Arc<Self>) -> WatchGuard {
        self.watches.fetch_add(1, Ordering::Relaxed);
        WatchGuard {
            metrics: self.clone(),
            user: String::new(),
        }
    }

    /// Opens a watch for `user` unless `max_total` watches are open, or `max_per_user`
    /// of that user's; a refusal is counted.
    pub fn try_start_watch(
        self: &Arc<Self>,
        user: &str,
        max_total: usize,
        max_per_user: usize,
    ) -> Result<WatchGuard, WatchRefused> {
        let mut by_user = match self.watches_by_user.lock() {
            Ok(by_user) => by_user,
            Err(poisoned) => poisoned.into_inner(),
        };
        let open = usize::try_from(self.watches.load(Ordering::Relaxed)).unwrap_or(0);
        if open >= max_total {
            LimitCounters::count(&self.limits.watches_refused_total);
            return Err(WatchRefused::Total(max_total));
        }
        let mine = by_user.entry(user.to_string()).or_default();
        if *mine >= max_per_user {
            LimitCounters::count(&self.limits.watches_refused_user);
            return Err(WatchRefused::User(max_per_user));
        }
        *mine += 1;
        self.watches.fetch_add(1, Ordering::Relaxed);
        Ok(WatchGuard {
            metrics: self.clone(),
            user: user.to_string(),
        })
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
            for (((verb, resource), code), count) in requests.iter() {
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
        self.limits.render(&mut out);
        out
    }
}

/// What `/metrics` shows, as the state of its route (the server that mounts it
/// implements it: these metrics, then what the rest of the server counts).
pub trait Exposition: Send + Sync {
    /// The text for `user`: a 403 unless they may `get` the path `/metrics`.
    fn render(
        &self,
        user: crate::auth::User,
    ) -> futures_util::future::BoxFuture<'_, Result<String, crate::status::ApiError>>;
}

/// `/metrics` (GET), for an authenticated user (a request extension).
pub fn routes<S>() -> axum::Router<S>
where
    S: Exposition + Clone + Send + Sync + 'static,
{
    async fn scrape<S: Exposition>(
        axum::extract::State(state): axum::extract::State<S>,
        axum::Extension(user): axum::Extension<crate::auth::User>,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        match state.render(user).await {
            Ok(text) => (
                [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                text,
            )
                .into_response(),
            Err(e) => e.into_response(),
        }
    }
    axum::Router::new().route("/metrics", axum::routing::get(scrape::<S>))
}

/// Escapes a Prometheus label value.
pub fn escape(value: &str) -> String {
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
        assert!(text.contains("apiserver_connections_refused_total 0"));
    }

    #[test]
    fn url_labels_stay_in_a_fixed_set() {
        let metrics = Metrics::default();
        for i in 0..1000 {
            metrics.observe(
                &format!("verb{i}"),
                &format!("federatedingresses/sub{i}"),
                404,
                Duration::from_millis(1),
            );
            metrics.observe("get", &format!("thing{i}"), 404, Duration::from_millis(1));
        }
        metrics.observe("get", "clusters/status", 200, Duration::from_millis(1));
        metrics.observe("", "", 401, Duration::from_millis(1));
        let text = metrics.render(1);
        let series = text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total"))
            .count();
        assert_eq!(series, 4, "{text}");
        assert!(text.contains(
            "apiserver_request_total{verb=\"other\",resource=\"other\",code=\"404\"} 1000"
        ));
        assert!(text.contains(
            "apiserver_request_total{verb=\"get\",resource=\"clusters/status\",code=\"200\"} 1"
        ));
    }

    #[test]
    fn extension_subresources_are_labels_on_every_known_plural() {
        let metrics = Metrics::with_subresources(&["token"]);
        metrics.observe("list", "clusters/token", 200, Duration::from_millis(1));
        metrics.observe(
            "get",
            "federatedingresses/token",
            404,
            Duration::from_millis(1),
        );
        metrics.observe("get", "clusters/explain", 404, Duration::from_millis(1));
        let text = metrics.render(1);
        for series in [
            "{verb=\"list\",resource=\"clusters/token\",code=\"200\"} 1",
            "{verb=\"get\",resource=\"federatedingresses/token\",code=\"404\"} 1",
            "{verb=\"get\",resource=\"other\",code=\"404\"} 1",
        ] {
            assert!(
                text.contains(&format!("apiserver_request_total{series}")),
                "{text}"
            );
        }
    }

    #[test]
    fn watch_caps_total_and_per_user() {
        let metrics = Arc::new(Metrics::default());
        let a1 = metrics.try_start_watch("alice", 3, 2).unwrap();
        let _a2 = metrics.try_start_watch("alice", 3, 2).unwrap();
        assert_eq!(
            metrics.try_start_watch("alice", 3, 2).err(),
            Some(WatchRefused::User(2))
        );
        let _b1 = metrics.try_start_watch("bob", 3, 2).unwrap();
        assert_eq!(
            metrics.try_start_watch("carol", 3, 2).err(),
            Some(WatchRefused::Total(3))
        );
        drop(a1);
        assert!(metrics.try_start_watch("alice", 3, 2).is_ok());
        let text = metrics.render(1);
        assert!(text.contains("apiserver_watches_refused_total{limit=\"total\"} 1"));
        assert!(text.contains("apiserver_watches_refused_total{limit=\"user\"} 1"));
    }
}
