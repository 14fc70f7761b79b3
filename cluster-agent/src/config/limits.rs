//! `limits:` of the agent config: how much of the machine the standalone data plane may
//! take from its clients, so that a flood (spoofed UDP sources, idle connections, slow
//! headers) cannot starve the hub session, the health checks or the other listeners.
//!
//! ```yaml
//! limits:
//!   udpSessionsPerListener: 10000
//!   udpSessionsPerSource: 256
//!   connectionsPerListener: 10000
//!   streamIdleTimeoutMs: 300000
//!   httpIdleTimeoutMs: 60000
//!   httpHeaderReadTimeoutMs: 10000
//!   tlsHandshakeTimeoutMs: 10000
//!   reservedFileDescriptors: 256
//! ```
//!
//! Every key is optional (the defaults above); every value must be positive. The UDP
//! session idle timeout stays where it always was, `udpIdleTimeoutMs`. What the data
//! plane does at each limit is in `docs/cluster-agent.md` ("Limits").

use std::time::Duration;

use serde::Deserialize;

/// The data plane's resource limits (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LimitsConfig {
    /// UDP sessions (one upstream socket each) one bound UDP listener holds at most.
    pub udp_sessions_per_listener: u32,
    /// UDP sessions one client IP address holds at most on one listener (above
    /// `udp_sessions_per_listener` it never binds).
    pub udp_sessions_per_source: u32,
    /// Open client connections of one bound TCP, HTTP or TLS listener at most.
    pub connections_per_listener: u32,
    /// A spliced TCP or TLS connection (TCP rules, TLS passthrough and termination) with
    /// no bytes either way for this long is closed on both sides.
    pub stream_idle_timeout_ms: u64,
    /// An HTTP/1.1 keep-alive or HTTP/2 connection with no bytes either way for this
    /// long is closed (gracefully: a request in flight finishes).
    pub http_idle_timeout_ms: u64,
    /// How long an HTTP/1.1 client may take to send a request's headers, counted from
    /// when the connection is ready for the next request.
    pub http_header_read_timeout_ms: u64,
    /// How long a TLS client may take to send its ClientHello, and then again to finish
    /// the handshake.
    pub tls_handshake_timeout_ms: u64,
    /// File descriptors kept free for the hub session, health checks, listeners, the
    /// admin endpoint and the state file: client connections, their upstream
    /// connections and UDP session sockets together stay below `RLIMIT_NOFILE` minus
    /// this.
    pub reserved_file_descriptors: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            udp_sessions_per_listener: 10_000,
            udp_sessions_per_source: 256,
            connections_per_listener: 10_000,
            stream_idle_timeout_ms: 300_000,
            http_idle_timeout_ms: 60_000,
            http_header_read_timeout_ms: 10_000,
            tls_handshake_timeout_ms: 10_000,
            reserved_file_descriptors: 256,
        }
    }
}

impl LimitsConfig {
    pub fn stream_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.stream_idle_timeout_ms)
    }

    pub fn http_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.http_idle_timeout_ms)
    }

    pub fn http_header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.http_header_read_timeout_ms)
    }

    pub fn tls_handshake_timeout(&self) -> Duration {
        Duration::from_millis(self.tls_handshake_timeout_ms)
    }

    /// Every problem, each naming its field (`limits.<key>`).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let counts = [
            ("udpSessionsPerListener", self.udp_sessions_per_listener),
            ("udpSessionsPerSource", self.udp_sessions_per_source),
            ("connectionsPerListener", self.connections_per_listener),
            ("reservedFileDescriptors", self.reserved_file_descriptors),
        ];
        let times = [
            ("streamIdleTimeoutMs", self.stream_idle_timeout_ms),
            ("httpIdleTimeoutMs", self.http_idle_timeout_ms),
            ("httpHeaderReadTimeoutMs", self.http_header_read_timeout_ms),
            ("tlsHandshakeTimeoutMs", self.tls_handshake_timeout_ms),
        ];
        for (field, value) in counts.iter().map(|&(f, v)| (f, u64::from(v))).chain(times) {
            if value == 0 {
                problems.push(format!("limits.{field}: must be positive"));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_partial_blocks_and_problems() {
        let parsed: LimitsConfig = yaml_serde::from_str("{}").unwrap();
        assert_eq!(parsed, LimitsConfig::default());
        assert!(parsed.problems().is_empty());
        let parsed: LimitsConfig =
            yaml_serde::from_str("{udpSessionsPerListener: 50, streamIdleTimeoutMs: 1000}")
                .unwrap();
        assert_eq!(parsed.udp_sessions_per_listener, 50);
        assert_eq!(parsed.stream_idle_timeout(), Duration::from_secs(1));
        assert_eq!(
            parsed.connections_per_listener,
            LimitsConfig::default().connections_per_listener
        );
        // A per-source cap above the listener's is allowed (it just never binds): lowering
        // one key alone must not need the other.
        assert!(parsed.problems().is_empty());
        let zero: LimitsConfig =
            yaml_serde::from_str("{connectionsPerListener: 0, tlsHandshakeTimeoutMs: 0}").unwrap();
        assert_eq!(
            zero.problems(),
            [
                "limits.connectionsPerListener: must be positive",
                "limits.tlsHandshakeTimeoutMs: must be positive"
            ]
        );
        let unknown = yaml_serde::from_str::<LimitsConfig>("{udpSessions: 5}").unwrap_err();
        assert!(unknown.to_string().contains("udpSessions"), "{unknown}");
    }
}
