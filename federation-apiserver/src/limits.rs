//! Serving limits of the REST API and the agent gateway: the `limits:` block of the
//! config file ([`LimitsConfig`]), checked into [`Limits`], and the pure decisions the
//! listeners take with them: which in-flight cap a request counts against
//! ([`RequestKind`]) and the in-flight caps themselves ([`InFlight`]). What a watch may
//! do goes to the API as [`WatchLimits`] ([`Limits::watch`]).
//!
//! Defaults follow kube-apiserver where it has one: `--max-requests-inflight` 400,
//! `--max-mutating-requests-inflight` 200, `--min-request-timeout` 1800 s,
//! `--request-timeout` 60 s, its HTTP
//! server's `ReadHeaderTimeout` 32 s and `IdleTimeout` 90 s, and Go's HTTP/2 default of
//! 250 concurrent streams per connection. What kube-apiserver does not cap (open
//! connections, watches, watch `timeoutSeconds`, unauthenticated agent streams) gets a
//! cap of ours. What each limit refuses is counted in `/metrics`
//! ([`fedingress_apiserver::metrics::LimitCounters`], [`fedingress_hub::metrics::GatewayCounters`]).
//!
//! The I/O (accepting, timing out, answering 429) is in [`crate::listener`], [`crate::connections`], [`fedingress_apiserver::endpoints`]
//! and the gateway; nothing here touches a socket.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use fedingress_apiserver::watch::WatchLimits;
use fedingress_hub::admission::GatewayLimits;

/// `limits:` in the config file. Unknown keys are errors; every value must be positive.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LimitsConfig {
    /// Open REST connections; more are closed at accept.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// HTTP/1: time to send a request's headers (also the idle time between keep-alive
    /// requests); and a connection's first bytes, until they tell HTTP/1 from HTTP/2
    /// (with TLS, counted from the end of the handshake).
    #[serde(default = "default_header_read_timeout")]
    pub header_read_timeout_seconds: u64,
    /// A connection with no request in flight for this long is closed (HTTP/1 and
    /// HTTP/2; watches count as in flight).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_seconds: u64,
    /// HTTP/2: concurrent streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[serde(default = "default_http2_streams")]
    pub http2_max_streams_per_connection: u32,
    /// HTTP/2: PING interval; a connection whose PING is not answered within 20 s is
    /// closed.
    #[serde(default = "default_http2_keepalive")]
    pub http2_keep_alive_interval_seconds: u64,
    /// Non-mutating requests (GET, HEAD, OPTIONS) in flight; watches do not count.
    #[serde(default = "default_max_inflight")]
    pub max_requests_inflight: usize,
    /// Mutating requests (POST, PUT, PATCH, DELETE) in flight.
    #[serde(default = "default_max_mutating")]
    pub max_mutating_requests_inflight: usize,
    /// A request (watches excepted) that has no answer within this, body read included,
    /// is answered 504 (kube-apiserver's `--request-timeout`).
    #[serde(default = "default_request_timeout")]
    pub request_timeout_seconds: u64,
    /// Open watches, all users together.
    #[serde(default = "default_max_watches")]
    pub max_watches: usize,
    /// Open watches of one user.
    #[serde(default = "default_max_watches_per_user")]
    pub max_watches_per_user: usize,
    /// A watch without `timeoutSeconds` lasts a random time in [this, 2 × this]
    /// (kube-apiserver's `--min-request-timeout`), so clients reconnect spread out.
    #[serde(default = "default_min_request_timeout")]
    pub min_request_timeout_seconds: u64,
    /// A larger `timeoutSeconds` is lowered to this.
    #[serde(default = "default_max_watch_timeout")]
    pub max_watch_timeout_seconds: u64,
    #[serde(default)]
    pub gateway: GatewayLimitsConfig,
}

/// `limits.gateway:` the agent gateway's limits on what has not authenticated yet.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayLimitsConfig {
    /// Open agent gateway connections. At the cap a new one takes the place of the
    /// one without a live stream longest; only when each has one is it closed at
    /// accept.
    #[serde(default = "default_gateway_connections")]
    pub max_connections: usize,
    /// A stream whose first message (Hello) does not arrive within this is ended; a
    /// connection without a live stream (one past its first message) for this long,
    /// from accept or from its last live stream's end, is closed.
    #[serde(default = "default_hello_timeout")]
    pub hello_timeout_seconds: u64,
    /// Streams waiting for their Hello, all connections together; more are refused
    /// (`RESOURCE_EXHAUSTED`).
    #[serde(default = "default_pending_hellos")]
    pub max_pending_hellos: usize,
    /// HTTP/2 concurrent streams per connection (an agent uses one).
    #[serde(default = "default_gateway_streams")]
    pub max_streams_per_connection: u32,
}

fn default_max_connections() -> usize {
    2048
}
fn default_header_read_timeout() -> u64 {
    32
}
fn default_idle_timeout() -> u64 {
    90
}
fn default_http2_streams() -> u32 {
    250
}
fn default_http2_keepalive() -> u64 {
    30
}
fn default_max_inflight() -> usize {
    400
}
fn default_max_mutating() -> usize {
    200
}
fn default_request_timeout() -> u64 {
    60
}
fn default_max_watches() -> usize {
    2048
}
fn default_max_watches_per_user() -> usize {
    256
}
fn default_min_request_timeout() -> u64 {
    1800
}
fn default_max_watch_timeout() -> u64 {
    3600
}
fn default_gateway_connections() -> usize {
    4096
}
fn default_hello_timeout() -> u64 {
    10
}
fn default_pending_hellos() -> usize {
    256
}
fn default_gateway_streams() -> u32 {
    4
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: default_max_connections(),
            header_read_timeout_seconds: default_header_read_timeout(),
            idle_timeout_seconds: default_idle_timeout(),
            http2_max_streams_per_connection: default_http2_streams(),
            http2_keep_alive_interval_seconds: default_http2_keepalive(),
            max_requests_inflight: default_max_inflight(),
            max_mutating_requests_inflight: default_max_mutating(),
            request_timeout_seconds: default_request_timeout(),
            max_watches: default_max_watches(),
            max_watches_per_user: default_max_watches_per_user(),
            min_request_timeout_seconds: default_min_request_timeout(),
            max_watch_timeout_seconds: default_max_watch_timeout(),
            gateway: GatewayLimitsConfig::default(),
        }
    }
}

impl Default for GatewayLimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: default_gateway_connections(),
            hello_timeout_seconds: default_hello_timeout(),
            max_pending_hellos: default_pending_hellos(),
            max_streams_per_connection: default_gateway_streams(),
        }
    }
}

/// How long an HTTP/2 PING may go unanswered.
pub const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The checked limits the servers run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub http2_max_streams: u32,
    pub http2_keep_alive_interval: Duration,
    pub max_requests_inflight: usize,
    pub max_mutating_requests_inflight: usize,
    pub request_timeout: Duration,
    pub max_watches: usize,
    pub max_watches_per_user: usize,
    pub min_request_timeout: Duration,
    pub max_watch_timeout: Duration,
    pub gateway: GatewayLimits,
}

impl Limits {
    /// The watch caps and durations, as the API applies them.
    pub fn watch(&self) -> WatchLimits {
        WatchLimits {
            max_watches: self.max_watches,
            max_watches_per_user: self.max_watches_per_user,
            min_request_timeout: self.min_request_timeout,
            max_watch_timeout: self.max_watch_timeout,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        LimitsConfig::default()
            .check(&LimitFlags::default())
            .unwrap_or_else(|_| unreachable!("the defaults are valid"))
    }
}

/// The kube-apiserver flags that override `limits:` keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct LimitFlags {
    pub max_requests_inflight: Option<usize>,
    pub max_mutating_requests_inflight: Option<usize>,
    pub min_request_timeout: Option<u64>,
}

impl LimitsConfig {
    /// Applies `flags` over the file and checks every value; the error names the key.
    pub fn check(&self, flags: &LimitFlags) -> Result<Limits, String> {
        let max_requests_inflight = flags
            .max_requests_inflight
            .unwrap_or(self.max_requests_inflight);
        let max_mutating = flags
            .max_mutating_requests_inflight
            .unwrap_or(self.max_mutating_requests_inflight);
        let min_request_timeout = flags
            .min_request_timeout
            .unwrap_or(self.min_request_timeout_seconds);
        let positive =
            self.must_be_positive(max_requests_inflight, max_mutating, min_request_timeout);
        if let Some((key, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(format!("{key} must be positive"));
        }
        if self.max_watch_timeout_seconds < min_request_timeout {
            return Err(format!(
                "limits.maxWatchTimeoutSeconds ({}) must be at least limits.minRequestTimeoutSeconds ({min_request_timeout})",
                self.max_watch_timeout_seconds
            ));
        }
        // A watch without timeoutSeconds may last 2 × min: keep that under the cap too.
        let min_request_timeout = Duration::from_secs(min_request_timeout);
        Ok(Limits {
            max_connections: self.max_connections,
            header_read_timeout: Duration::from_secs(self.header_read_timeout_seconds),
            idle_timeout: Duration::from_secs(self.idle_timeout_seconds),
            http2_max_streams: self.http2_max_streams_per_connection,
            http2_keep_alive_interval: Duration::from_secs(self.http2_keep_alive_interval_seconds),
            max_requests_inflight,
            max_mutating_requests_inflight: max_mutating,
            request_timeout: Duration::from_secs(self.request_timeout_seconds),
            max_watches: self.max_watches,
            max_watches_per_user: self.max_watches_per_user,
            min_request_timeout,
            max_watch_timeout: Duration::from_secs(self.max_watch_timeout_seconds),
            gateway: GatewayLimits {
                max_connections: self.gateway.max_connections,
                hello_timeout: Duration::from_secs(self.gateway.hello_timeout_seconds),
                max_pending_hellos: self.gateway.max_pending_hellos,
                max_streams_per_connection: self.gateway.max_streams_per_connection,
            },
        })
    }

    /// Every value that must be positive, with the key (and flag) that sets it.
    fn must_be_positive(
        &self,
        max_requests_inflight: usize,
        max_mutating: usize,
        min_request_timeout: u64,
    ) -> [(&'static str, u64); 16] {
        [
            ("limits.maxConnections", self.max_connections as u64),
            (
                "limits.headerReadTimeoutSeconds",
                self.header_read_timeout_seconds,
            ),
            ("limits.idleTimeoutSeconds", self.idle_timeout_seconds),
            (
                "limits.http2MaxStreamsPerConnection",
                u64::from(self.http2_max_streams_per_connection),
            ),
            (
                "limits.http2KeepAliveIntervalSeconds",
                self.http2_keep_alive_interval_seconds,
            ),
            (
                "limits.maxRequestsInflight (--max-requests-inflight)",
                max_requests_inflight as u64,
            ),
            (
                "limits.maxMutatingRequestsInflight (--max-mutating-requests-inflight)",
                max_mutating as u64,
            ),
            ("limits.requestTimeoutSeconds", self.request_timeout_seconds),
            ("limits.maxWatches", self.max_watches as u64),
            ("limits.maxWatchesPerUser", self.max_watches_per_user as u64),
            (
                "limits.minRequestTimeoutSeconds (--min-request-timeout)",
                min_request_timeout,
            ),
            (
                "limits.maxWatchTimeoutSeconds",
                self.max_watch_timeout_seconds,
            ),
            (
                "limits.gateway.maxConnections",
                self.gateway.max_connections as u64,
            ),
            (
                "limits.gateway.helloTimeoutSeconds",
                self.gateway.hello_timeout_seconds,
            ),
            (
                "limits.gateway.maxPendingHellos",
                self.gateway.max_pending_hellos as u64,
            ),
            (
                "limits.gateway.maxStreamsPerConnection",
                u64::from(self.gateway.max_streams_per_connection),
            ),
        ]
    }
}

/// Which in-flight cap a request counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    ReadOnly,
    Mutating,
    /// Watches (and the health and metrics endpoints, which must answer under load):
    /// not capped here; watches have caps of their own.
    Exempt,
}

impl RequestKind {
    /// Classifies a request by its method and URL, as kube-apiserver's
    /// max-in-flight filter does (watches are long-running and exempt).
    pub fn of(method: &Method, path: &str, query: Option<&str>) -> Self {
        if matches!(path, "/livez" | "/readyz" | "/healthz" | "/metrics") {
            return Self::Exempt;
        }
        match *method {
            Method::GET | Method::HEAD | Method::OPTIONS => {
                let watch = query.is_some_and(|q| {
                    q.split('&')
                        .any(|pair| matches!(pair, "watch=true" | "watch=1" | "watch"))
                }) || path.contains("/watch/");
                if watch { Self::Exempt } else { Self::ReadOnly }
            }
            _ => Self::Mutating,
        }
    }
}

/// The two in-flight caps.
pub struct InFlight {
    read_only: Arc<Semaphore>,
    mutating: Arc<Semaphore>,
}

impl InFlight {
    pub fn new(limits: &Limits) -> Self {
        Self {
            read_only: Arc::new(Semaphore::new(limits.max_requests_inflight)),
            mutating: Arc::new(Semaphore::new(limits.max_mutating_requests_inflight)),
        }
    }

    /// A slot for one request of `kind` (`Ok(None)` when exempt), or `Err` when the cap
    /// is reached: answer 429.
    pub fn admit(&self, kind: RequestKind) -> Result<Option<OwnedSemaphorePermit>, RequestKind> {
        let semaphore = match kind {
            RequestKind::Exempt => return Ok(None),
            RequestKind::ReadOnly => &self.read_only,
            RequestKind::Mutating => &self.mutating,
        };
        semaphore
            .clone()
            .try_acquire_owned()
            .map(Some)
            .map_err(|_| kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_kube_apiserver() {
        let limits = Limits::default();
        assert_eq!(limits.max_requests_inflight, 400);
        assert_eq!(limits.max_mutating_requests_inflight, 200);
        assert_eq!(limits.min_request_timeout, Duration::from_secs(1800));
        assert_eq!(limits.header_read_timeout, Duration::from_secs(32));
        assert_eq!(limits.idle_timeout, Duration::from_secs(90));
    }

    #[test]
    fn config_is_strict_and_checked() {
        let parse = |text: &str| yaml_serde::from_str::<LimitsConfig>(text);
        assert!(parse("maxWatchs: 1\n").is_err());
        assert!(parse("gateway:\n  helloTimeout: 1\n").is_err());
        let zero = parse("maxWatches: 0\n").unwrap();
        assert_eq!(
            zero.check(&LimitFlags::default()).unwrap_err(),
            "limits.maxWatches must be positive"
        );
        let flags = LimitFlags {
            max_requests_inflight: Some(0),
            ..LimitFlags::default()
        };
        assert!(
            LimitsConfig::default()
                .check(&flags)
                .unwrap_err()
                .contains("--max-requests-inflight")
        );
        let short = parse("maxWatchTimeoutSeconds: 60\n").unwrap();
        assert!(
            short
                .check(&LimitFlags::default())
                .unwrap_err()
                .contains("at least limits.minRequestTimeoutSeconds")
        );
        let flags = LimitFlags {
            min_request_timeout: Some(30),
            ..LimitFlags::default()
        };
        let limits = short.check(&flags).unwrap();
        assert_eq!(limits.min_request_timeout, Duration::from_secs(30));
        assert_eq!(limits.max_watch_timeout, Duration::from_secs(60));
    }

    #[test]
    fn the_config_file_and_the_flags_set_the_limits() {
        use clap::Parser;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apiserver.yaml");
        std::fs::write(
            &path,
            "dev: true\nlimits:\n  maxConnections: 10\n  maxRequestsInflight: 7\n  gateway:\n    maxPendingHellos: 3\nstorage:\n  commitProbeIntervalSeconds: 2\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let load = |args: &[&str]| {
            let mut all = vec!["federation-apiserver", "--config", path];
            all.extend_from_slice(args);
            crate::config::load(&crate::config::Cli::parse_from(all))
        };
        let settings = load(&[]).unwrap();
        assert_eq!(settings.limits.max_connections, 10);
        assert_eq!(settings.limits.max_requests_inflight, 7);
        assert_eq!(settings.limits.gateway.max_pending_hellos, 3);
        assert_eq!(settings.commit_probe_interval, Duration::from_secs(2));
        let settings = load(&[
            "--max-requests-inflight",
            "9",
            "--min-request-timeout",
            "60",
        ])
        .unwrap();
        assert_eq!(settings.limits.max_requests_inflight, 9);
        assert_eq!(settings.limits.min_request_timeout, Duration::from_secs(60));
        let error = load(&["--max-mutating-requests-inflight", "0"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("--max-mutating-requests-inflight"),
            "{error}"
        );
        std::fs::write(path, "dev: true\nlimits:\n  maxConections: 10\n").unwrap();
        let error = load(&[]).err().unwrap().to_string();
        assert!(error.contains("maxConections"), "{error}");
    }

    #[test]
    fn requests_are_classified_like_kube_apiserver() {
        let kind =
            |method: Method, path: &str, query: Option<&str>| RequestKind::of(&method, path, query);
        assert_eq!(
            kind(Method::GET, "/apis/x", Some("limit=5")),
            RequestKind::ReadOnly
        );
        assert_eq!(
            kind(Method::GET, "/apis/x", Some("a=b&watch=true")),
            RequestKind::Exempt
        );
        assert_eq!(
            kind(Method::GET, "/apis/x", Some("watch=false")),
            RequestKind::ReadOnly
        );
        assert_eq!(kind(Method::POST, "/apis/x", None), RequestKind::Mutating);
        assert_eq!(kind(Method::DELETE, "/apis/x", None), RequestKind::Mutating);
        assert_eq!(kind(Method::GET, "/readyz", None), RequestKind::Exempt);
    }

    #[test]
    fn in_flight_caps_refuse_past_the_limit() {
        let limits = Limits {
            max_requests_inflight: 1,
            max_mutating_requests_inflight: 1,
            ..Limits::default()
        };
        let caps = InFlight::new(&limits);
        let held = caps.admit(RequestKind::ReadOnly).unwrap();
        assert!(held.is_some());
        assert_eq!(
            caps.admit(RequestKind::ReadOnly).err(),
            Some(RequestKind::ReadOnly)
        );
        assert!(caps.admit(RequestKind::Mutating).unwrap().is_some());
        assert!(caps.admit(RequestKind::Exempt).unwrap().is_none());
        drop(held);
        assert!(caps.admit(RequestKind::ReadOnly).is_ok());
    }

    #[test]
    fn watch_limits_default_to_the_limits_defaults() {
        assert_eq!(Limits::default().watch(), WatchLimits::default());
    }
}
