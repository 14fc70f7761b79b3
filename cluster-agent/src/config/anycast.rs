//! `anycast:` of the agent config: the BGP speaker that announces the anycast addresses
//! of the shares placed on this cluster (see [`crate::anycast`]).
//!
//! ```yaml
//! anycast:
//!   speaker: {command: gobgpd, api: "127.0.0.1:50051"}   # managed; without command: an external gobgpd
//!   asn: 65010
//!   routerId: 192.0.2.10
//!   listenPort: -1                  # -1: never accept sessions (connect out only); or 179
//!   peers:
//!   - {address: 192.0.2.1, asn: 65000, port: 179, localAddress: 192.0.2.10, passive: false,
//!      holdTimeSeconds: 9, keepaliveSeconds: 3, connectRetrySeconds: 5}
//!   nextHop: 192.0.2.10             # default: the agent's advertised address of the route's family (not loopback)
//!   communities: ["65000:100"]
//!   interface: lo                   # optional: the agent puts each anycast address on it
//!   withdrawDelayMs: 1000           # on SIGTERM: after withdrawing, before listeners drain
//! ```
//!
//! Decisions:
//! - `speaker.command` present: the agent runs that gobgpd itself (with the parent-death
//!   signal, so its sessions and routes end with the agent) with its gRPC API on
//!   `speaker.api`, which must then be a loopback address (GoBGP's API has no
//!   authentication). Absent: `speaker.api` is an external gobgpd that the agent
//!   configures and whose locally originated host routes it owns.
//! - Only the standalone driver binds the anycast addresses, so `anycast:` needs it.
//! - `nextHop` applies to routes of its own address family; a route of the other family
//!   takes the first advertised IP address of that family (`listen[].advertise`, else
//!   `bind`) that is not loopback (peers drop loopback next hops), and without one it is
//!   not announced (its reason says so).
//! - A relative `speaker.command` with a `/` is resolved against the config file's
//!   directory; a bare name is looked up on `PATH` at start.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fedingress_api::cluster::Address;
use serde::Deserialize;

/// The `anycast:` section (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AnycastConfig {
    /// The gobgpd the agent drives.
    pub speaker: SpeakerConfig,
    /// This speaker's AS number.
    pub asn: u32,
    /// BGP identifier (an IPv4 address, also for IPv6-only speakers).
    pub router_id: Ipv4Addr,
    /// TCP port BGP accepts sessions on; `-1` accepts none (the speaker connects out).
    #[serde(default = "default_listen_port")]
    pub listen_port: i32,
    /// The BGP neighbors routes are announced to.
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    /// Next hop of IPv4 or IPv6 routes (of this address's family).
    #[serde(default)]
    pub next_hop: Option<IpAddr>,
    /// Standard communities on every announced route, `ASN:VALUE`.
    #[serde(default)]
    pub communities: Vec<String>,
    /// Network interface (`lo`) the anycast addresses of applied shares are added to.
    #[serde(default)]
    pub interface: Option<String>,
    /// On SIGTERM: how long to wait after withdrawing every route before listeners
    /// stop accepting (peers converge meanwhile).
    #[serde(default = "default_withdraw_delay_ms")]
    pub withdraw_delay_ms: u64,
}

/// Which gobgpd, and whether the agent runs it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpeakerConfig {
    /// The gobgpd executable the agent starts (managed); external when absent.
    #[serde(default)]
    pub command: Option<PathBuf>,
    /// gobgpd's gRPC API (`--api-hosts`).
    pub api: SocketAddr,
}

/// One BGP neighbor.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PeerConfig {
    pub address: IpAddr,
    pub asn: u32,
    /// The neighbor's TCP port (179 when absent).
    #[serde(default)]
    pub port: Option<u16>,
    /// The address sessions are opened from.
    #[serde(default)]
    pub local_address: Option<IpAddr>,
    /// Wait for the neighbor to connect (needs `listenPort`).
    #[serde(default)]
    pub passive: bool,
    /// GoBGP's defaults when absent: 90 s hold, 30 s keepalive, 120 s connect retry.
    #[serde(default)]
    pub hold_time_seconds: Option<u32>,
    #[serde(default)]
    pub keepalive_seconds: Option<u32>,
    #[serde(default)]
    pub connect_retry_seconds: Option<u32>,
}

/// How long a peer's session stays idle after it went down before the speaker accepts
/// or opens a new one (GoBGP's default is 30 s).
pub const IDLE_HOLD_AFTER_RESET_SECONDS: u32 = 1;

fn default_listen_port() -> i32 {
    -1
}

fn default_withdraw_delay_ms() -> u64 {
    1000
}

/// The next hop of each address family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHops {
    pub v4: Option<IpAddr>,
    pub v6: Option<IpAddr>,
}

impl NextHops {
    /// The next hop for a route to `address`.
    pub fn of(&self, address: IpAddr) -> Option<IpAddr> {
        match address {
            IpAddr::V4(_) => self.v4,
            IpAddr::V6(_) => self.v6,
        }
    }
}

impl AnycastConfig {
    /// Whether the agent runs gobgpd itself.
    pub fn managed(&self) -> bool {
        self.speaker.command.is_some()
    }

    pub fn withdraw_delay(&self) -> Duration {
        Duration::from_millis(self.withdraw_delay_ms)
    }

    /// `nextHop` for its family; otherwise the first advertised IP of each family that
    /// is not loopback (peers drop loopback next hops, RFC 4271 §6.3) (`advertised` as
    /// [`crate::Config::advertised_addresses`] gives them).
    pub fn next_hops(&self, advertised: &[Address]) -> NextHops {
        let first = |v4: bool| {
            advertised
                .iter()
                .filter_map(|a| a.ip)
                .find(|ip| ip.is_ipv4() == v4 && !ip.is_unspecified() && !ip.is_loopback())
        };
        let given = |v4: bool| self.next_hop.filter(|ip| ip.is_ipv4() == v4);
        NextHops {
            v4: given(true).or_else(|| first(true)),
            v6: given(false).or_else(|| first(false)),
        }
    }

    /// Resolves a relative `speaker.command` that has a `/` against `base` (the config
    /// file's directory); a bare name stays as it is, for `PATH`.
    pub fn resolve_paths(&mut self, base: &Path) {
        if let Some(command) = &mut self.speaker.command
            && command.is_relative()
            && command.components().count() > 1
        {
            *command = base.join(&*command);
        }
    }

    /// Every problem of the section, each naming its field (`anycast.<key>`);
    /// `advertised` are the agent's advertised addresses (for the default next hop).
    pub fn problems(&self, advertised: &[Address]) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(command) = &self.speaker.command {
            if command.as_os_str().is_empty() {
                problems.push("anycast.speaker.command: must not be empty".to_owned());
            }
            if !self.speaker.api.ip().is_loopback() {
                problems.push(format!(
                    "anycast.speaker.api: {} is not a loopback address: a managed gobgpd's API has no authentication",
                    self.speaker.api
                ));
            }
        }
        if self.speaker.api.port() == 0 {
            problems.push("anycast.speaker.api: needs a port".to_owned());
        }
        if self.asn == 0 {
            problems.push("anycast.asn: must be 1-4294967295".to_owned());
        }
        if self.router_id.is_unspecified() {
            problems.push("anycast.routerId: must not be 0.0.0.0".to_owned());
        }
        if self.listen_port != -1 && !(1..=65535).contains(&self.listen_port) {
            problems.push(format!(
                "anycast.listenPort: {} must be -1 (accept no sessions) or a port 1-65535",
                self.listen_port
            ));
        }
        if self.peers.is_empty() {
            problems.push("anycast.peers: at least one peer is required".to_owned());
        }
        let mut seen = BTreeSet::new();
        for (i, peer) in self.peers.iter().enumerate() {
            problems.extend(
                peer.problems(self.listen_port)
                    .into_iter()
                    .map(|p| format!("anycast.peers[{i}].{p}")),
            );
            if !seen.insert(peer.address) {
                problems.push(format!(
                    "anycast.peers[{i}].address: {} is listed twice",
                    peer.address
                ));
            }
        }
        match self.next_hop {
            Some(ip) if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() => {
                problems.push(format!(
                    "anycast.nextHop: {ip} is not a unicast address peers can reach (loopback and unspecified next hops are dropped)"
                ));
            }
            Some(_) => {}
            None => {
                let hops = self.next_hops(advertised);
                if hops.v4.is_none() && hops.v6.is_none() {
                    problems.push(
                        "anycast.nextHop: required, since no listen address advertises an IP address that is not loopback"
                            .to_owned(),
                    );
                }
            }
        }
        for (i, community) in self.communities.iter().enumerate() {
            if let Err(error) = community.parse::<fedingress_gobgp::Community>() {
                problems.push(format!("anycast.communities[{i}]: {error}"));
            }
        }
        if let Some(name) = &self.interface
            && (name.is_empty()
                || name.len() > 15
                || name.contains(|c: char| c == '/' || c.is_whitespace() || c.is_control()))
        {
            problems.push(format!(
                "anycast.interface: {name:?} is not an interface name (1-15 characters, no '/' or spaces)"
            ));
        }
        problems
    }

    /// The communities, parsed (checked by [`AnycastConfig::problems`]).
    pub fn communities(&self) -> Vec<fedingress_gobgp::Community> {
        self.communities
            .iter()
            .filter_map(|c| c.parse().ok())
            .collect()
    }
}

impl PeerConfig {
    /// Problems of one peer, each starting with its key.
    fn problems(&self, listen_port: i32) -> Vec<String> {
        let mut problems = Vec::new();
        if self.address.is_unspecified() {
            problems.push("address: must not be the unspecified address".to_owned());
        }
        if self.asn == 0 {
            problems.push("asn: must be 1-4294967295".to_owned());
        }
        if self.port == Some(0) {
            problems.push("port: must be 1-65535".to_owned());
        }
        if let Some(local) = self.local_address
            && (local.is_unspecified() || local.is_ipv4() != self.address.is_ipv4())
        {
            problems.push(format!(
                "localAddress: {local} must be a specific address of the family of {}",
                self.address
            ));
        }
        if self.passive && listen_port == -1 {
            problems.push(
                "passive: the speaker accepts no sessions (listenPort -1): set listenPort"
                    .to_owned(),
            );
        }
        // RFC 4271 §4.2: a hold time is 0 (no keepalives) or at least 3 seconds.
        if let Some(hold) = self.hold_time_seconds
            && (1..3).contains(&hold)
        {
            problems.push("holdTimeSeconds: must be 0 or at least 3".to_owned());
        }
        if let Some(keepalive) = self.keepalive_seconds {
            let hold = self.hold_time_seconds.unwrap_or(90);
            if keepalive == 0 || (hold > 0 && keepalive >= hold) {
                problems.push(format!(
                    "keepaliveSeconds: must be positive and below the hold time ({hold} s)"
                ));
            }
        }
        if self.connect_retry_seconds == Some(0) {
            problems.push("connectRetrySeconds: must be positive".to_owned());
        }
        problems
    }

    /// The peer as the speaker takes it.
    pub fn to_peer(&self) -> fedingress_gobgp::Peer {
        fedingress_gobgp::Peer {
            address: self.address,
            asn: self.asn,
            port: self.port,
            local_address: self.local_address,
            passive: self.passive,
            route_reflector_client: false,
            hold_time_seconds: self.hold_time_seconds,
            keepalive_seconds: self.keepalive_seconds,
            connect_retry_seconds: self.connect_retry_seconds,
            // GoBGP's 30 s would refuse a restarted router's connections that long.
            idle_hold_after_reset_seconds: Some(IDLE_HOLD_AFTER_RESET_SECONDS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> AnycastConfig {
        yaml_serde::from_str(yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"))
    }

    const MINIMAL: &str = "
speaker: {api: '127.0.0.1:50051'}
asn: 65010
routerId: 192.0.2.10
peers: [{address: 192.0.2.1, asn: 65000}]
";

    fn advertised() -> Vec<Address> {
        vec![
            Address::hostname("lb.example.com"),
            Address::ip("203.0.113.7".parse().unwrap()),
            Address::ip("2001:db8::7".parse().unwrap()),
        ]
    }

    #[test]
    fn defaults_and_next_hops() {
        let config = parse(MINIMAL);
        assert!(!config.managed());
        assert_eq!(config.listen_port, -1);
        assert_eq!(config.withdraw_delay(), Duration::from_secs(1));
        assert!(config.problems(&advertised()).is_empty());
        let hops = config.next_hops(&advertised());
        assert_eq!(hops.v4, Some("203.0.113.7".parse().unwrap()));
        assert_eq!(hops.v6, Some("2001:db8::7".parse().unwrap()));
        let config = parse(&format!("{MINIMAL}nextHop: 192.0.2.10\n"));
        let hops = config.next_hops(&advertised());
        assert_eq!(
            hops.of("10.9.9.9".parse().unwrap()),
            "192.0.2.10".parse().ok()
        );
        assert_eq!(
            hops.of("fd00::9".parse().unwrap()),
            "2001:db8::7".parse().ok()
        );
        // Loopback addresses are no next hops.
        let hops = parse(MINIMAL).next_hops(&[
            Address::ip("127.0.0.11".parse().unwrap()),
            Address::ip("::1".parse().unwrap()),
            Address::ip("2001:db8::7".parse().unwrap()),
        ]);
        assert_eq!(hops.v4, None);
        assert_eq!(hops.v6, Some("2001:db8::7".parse().unwrap()));
        let loopback = parse(&format!("{MINIMAL}nextHop: 127.0.0.11\n"));
        assert!(
            loopback.problems(&advertised())[0].starts_with("anycast.nextHop: 127.0.0.11 is not"),
            "{:?}",
            loopback.problems(&advertised())
        );
        // Only a name advertised and no nextHop: nothing to announce with.
        let problems = parse(MINIMAL).problems(&[Address::hostname("lb.example.com")]);
        assert_eq!(
            problems,
            [
                "anycast.nextHop: required, since no listen address advertises an IP address that is not loopback"
            ]
        );
    }

    #[test]
    fn a_full_section_parses() {
        let config = parse(
            "
speaker: {command: gobgpd, api: '127.0.0.1:50051'}
asn: 65010
routerId: 192.0.2.10
listenPort: 179
peers:
- {address: 192.0.2.1, asn: 65000, port: 1790, localAddress: 192.0.2.10, passive: true,
   holdTimeSeconds: 9, keepaliveSeconds: 3, connectRetrySeconds: 5}
- {address: '2001:db8::1', asn: 65000}
nextHop: 192.0.2.10
communities: ['65000:100', '65000:200']
interface: lo
withdrawDelayMs: 0
",
        );
        assert!(config.managed());
        assert!(
            config.problems(&advertised()).is_empty(),
            "{:?}",
            config.problems(&advertised())
        );
        assert_eq!(config.communities().len(), 2);
        assert_eq!(config.communities()[0].to_string(), "65000:100");
        let peer = config.peers[0].to_peer();
        assert_eq!(peer.port, Some(1790));
        assert!(peer.passive);
        assert_eq!(peer.hold_time_seconds, Some(9));
        let mut resolved = config.clone();
        resolved.resolve_paths(Path::new("/etc/fedingress"));
        assert_eq!(
            resolved.speaker.command,
            Some(PathBuf::from("gobgpd")),
            "PATH lookup"
        );
        resolved.speaker.command = Some(PathBuf::from("bin/gobgpd"));
        resolved.resolve_paths(Path::new("/etc/fedingress"));
        assert_eq!(
            resolved.speaker.command,
            Some(PathBuf::from("/etc/fedingress/bin/gobgpd"))
        );
    }

    #[test]
    fn problems_name_their_fields() {
        let config = parse(
            "
speaker: {command: '', api: '192.0.2.10:0'}
asn: 0
routerId: 0.0.0.0
listenPort: 0
peers:
- {address: 0.0.0.0, asn: 0, port: 0, localAddress: '::1', passive: true, holdTimeSeconds: 2, keepaliveSeconds: 0, connectRetrySeconds: 0}
- {address: 192.0.2.1, asn: 65000}
- {address: 192.0.2.1, asn: 65000, holdTimeSeconds: 9, keepaliveSeconds: 9}
nextHop: 0.0.0.0
communities: ['65000:100', '65000', '70000:1']
interface: 'not/a name'
",
        );
        let problems = config.problems(&advertised());
        let expected = [
            "anycast.speaker.command: must not be empty",
            "anycast.speaker.api: 192.0.2.10:0 is not a loopback address",
            "anycast.speaker.api: needs a port",
            "anycast.asn: must be",
            "anycast.routerId: must not be 0.0.0.0",
            "anycast.listenPort: 0 must be -1",
            "anycast.peers[0].address: must not be the unspecified address",
            "anycast.peers[0].asn: must be",
            "anycast.peers[0].port: must be 1-65535",
            "anycast.peers[0].localAddress: ::1 must be",
            "anycast.peers[0].holdTimeSeconds: must be 0 or at least 3",
            "anycast.peers[0].keepaliveSeconds: must be positive",
            "anycast.peers[0].connectRetrySeconds: must be positive",
            "anycast.peers[2].keepaliveSeconds: must be positive and below the hold time (9 s)",
            "anycast.peers[2].address: 192.0.2.1 is listed twice",
            "anycast.nextHop: 0.0.0.0 is not a unicast address",
            "anycast.communities[1]:",
            "anycast.communities[2]:",
            "anycast.interface: \"not/a name\"",
        ];
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        for (problem, expected) in problems.iter().zip(expected) {
            assert!(
                problem.starts_with(expected),
                "{problem:?} is not {expected:?}"
            );
        }
        let passive = parse(&MINIMAL.replace("asn: 65000}", "asn: 65000, passive: true}"));
        assert_eq!(
            passive.problems(&advertised()),
            [
                "anycast.peers[0].passive: the speaker accepts no sessions (listenPort -1): set listenPort"
            ]
        );
        let no_peers = parse(&MINIMAL.replace("peers: [{address: 192.0.2.1, asn: 65000}]", ""));
        assert_eq!(
            no_peers.problems(&advertised()),
            ["anycast.peers: at least one peer is required"]
        );
    }

    /// The commented-out section of the shipped example config, uncommented, is valid.
    #[test]
    fn the_example_section_is_valid() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/agent-standalone.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let block: String = text
            .lines()
            .skip_while(|l| !l.starts_with("# anycast:"))
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
            .collect();
        let section = block.strip_prefix("anycast:\n").unwrap();
        let unindented: String = section
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
            .collect();
        let config = parse(&unindented);
        assert!(config.managed());
        assert_eq!(config.problems(&advertised()), Vec::<String>::new());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        for yaml in [
            format!("{MINIMAL}bogus: 1\n"),
            MINIMAL.replace("api: '127.0.0.1:50051'", "api: '127.0.0.1:50051', bogus: 1"),
            MINIMAL.replace("asn: 65000}", "asn: 65000, bogus: 1}"),
        ] {
            let err = yaml_serde::from_str::<AnycastConfig>(&yaml).unwrap_err();
            assert!(err.to_string().contains("bogus"), "{err}");
        }
    }
}
