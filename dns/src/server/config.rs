//! What the embedded server is configured with beyond its zones: response-rate limiting
//! ([`RrlConfig`]), whose EDNS Client Subnet is trusted ([`EcsConfig`]) and the TCP
//! side's limits ([`TcpConfig`]). Each is a section of `dns:` in the apiserver's config
//! file (`dns.rrl`, `dns.ecs`, `dns.tcp`), strict (unknown keys are errors), with
//! [`ServerConfig::validate`] naming the bad field.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

pub use super::rrl::RrlConfig;
use super::rrl::loopback_nets;

/// Everything [`DnsServer`](super::DnsServer) is configured with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerConfig {
    pub rrl: RrlConfig,
    pub ecs: EcsConfig,
    pub tcp: TcpConfig,
}

impl ServerConfig {
    /// Checks every section.
    ///
    /// # Errors
    ///
    /// A message naming the first bad field (`dns.rrl.slip: ...`).
    pub fn validate(&self) -> Result<(), String> {
        self.rrl.validate()?;
        self.tcp.validate()
    }
}

/// `dns.ecs`: whose EDNS Client Subnet option steers answers.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EcsConfig {
    /// Resolvers whose ECS option is used to locate the client. From any other source
    /// the option is ignored: the answer is steered by the source address and echoes
    /// the option with SCOPE PREFIX-LENGTH 0 (RFC 7871 §7.2.1: valid for every client
    /// of that resolver). Default: loopback (`127.0.0.0/8`, `::1/128`), which cannot
    /// be spoofed from the network; a list given replaces it, `[]` trusts nobody.
    #[serde(default = "loopback_nets")]
    pub trusted_resolvers: Vec<IpNet>,
}

impl Default for EcsConfig {
    fn default() -> Self {
        EcsConfig {
            trusted_resolvers: loopback_nets(),
        }
    }
}

impl EcsConfig {
    /// Whether ECS from `source` is trusted.
    pub fn trusts(&self, source: IpAddr) -> bool {
        let source = source.to_canonical();
        self.trusted_resolvers
            .iter()
            .any(|net| net.contains(&source))
    }
}

/// `dns.tcp`: limits of the TCP listener.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TcpConfig {
    /// Most concurrent connections; further ones are closed at once (counted).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// How long a connection may stay idle, or take to send one message, before it is
    /// closed (counted).
    #[serde(default = "default_idle_timeout_seconds")]
    pub idle_timeout_seconds: u64,
}

fn default_max_connections() -> usize {
    1024
}

fn default_idle_timeout_seconds() -> u64 {
    10
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_connections: default_max_connections(),
            idle_timeout_seconds: default_idle_timeout_seconds(),
        }
    }
}

impl TcpConfig {
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_seconds)
    }

    fn validate(&self) -> Result<(), String> {
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(format!(
                "dns.tcp.maxConnections: must be in 1..=1000000, not {}",
                self.max_connections
            ));
        }
        if !(1..=3600).contains(&self.idle_timeout_seconds) {
            return Err(format!(
                "dns.tcp.idleTimeoutSeconds: must be in 1..=3600, not {}",
                self.idle_timeout_seconds
            ));
        }
        Ok(())
    }
}
