//! `vrrp:` of the agent config: a virtual IP address this host shares with the agents of
//! other hosts of the same cluster through keepalived (VRRPv3). The agent renders
//! keepalived's config from this section ([`crate::vrrp::render`]), keepalived's track
//! script is the agent's readiness, and with `keepalived.manage` the agent runs and
//! supervises keepalived itself ([`crate::vrrp::keepalived`]).
//!
//! ```yaml
//! vrrp:
//!   interface: eth0
//!   virtualRouterId: 51
//!   priority: 150                     # the other host: 100
//!   virtualAddresses: ["10.0.0.100/24"]
//!   advertIntervalMs: 200
//!   unicastPeers: ["10.0.0.2"]        # optional: no multicast on this network
//!   trackIntervalMs: 1000
//!   trackFall: 2
//!   trackRise: 2
//!   nopreempt: false
//!   preemptDelayMs: 0
//!   routerId: eu-west-a               # optional
//!   keepalived: {command: keepalived, configPath: keepalived.conf, manage: true}
//! ```
//!
//! Decisions (the operator's view is in `docs/anycast.md`, "VRRP"):
//! - VRRP version 3 (RFC 5798), the only version rendered. It has no authentication
//!   (RFC 5798 removed VRRPv2's, which never protected anything: the password crosses
//!   the wire in the clear), so there is no `authentication` key and one is refused
//!   like any unknown key. Keep VRRP on a segment only the hosts reach, or use
//!   `unicastPeers`.
//! - `advertIntervalMs`: VRRPv3 counts centiseconds (10 ms to 40.95 s), so a multiple
//!   of 10; default 200 ms, so a dead master is replaced after about 0.7 s (three
//!   intervals plus the skew time) rather than keepalived's 3.6 s at its 1 s default.
//! - `trackIntervalMs`: keepalived 2.2.7 runs track scripts at whole seconds
//!   (`interval` 1-4294), so a multiple of 1000; default 1000. An unready agent gives
//!   the address up after `trackFall` failed checks (default 2) and takes part again
//!   after `trackRise` passed ones (default 2). A failing check puts the instance in
//!   FAULT (no `weight`): an unready agent never holds the address, whatever the
//!   priorities.
//! - Preemption is on by default (keepalived's and the RFC's default): the host with
//!   the higher priority takes the address back once it is ready again, after
//!   `preemptDelayMs` (default 0). That move resets the connections open through the
//!   other host; `nopreempt: true` keeps the address where it is instead.
//! - `routerId` (keepalived's `router_id`, in its logs) defaults to
//!   `<cluster>-vr<virtualRouterId>-p<priority>`: unique within a VRRP group whose hosts
//!   have different priorities, and the same at every render.
//! - VRRP needs the standalone driver and a fixed admin port (the track script asks
//!   `/readyz` at the address written into keepalived's config). A virtual address is
//!   not a `listen[].bind` (it is local only on the host holding it, and configured
//!   binds are not freebind): bind the wildcard address and advertise the VIP.
//! - `keepalived.configPath` (default `<stateDir>/keepalived.conf`) is resolved against
//!   the config file's directory like the other paths; `keepalived.command` is run as
//!   given (a bare name is looked up on `PATH`).

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::{Driver, ListenAddress};

/// How this host runs VRRP: what `vrrp:` and `pools:` ([`super::PoolsConfig`]) share,
/// with the same keys and defaults in both. Deserialized only flattened into one of
/// them, which refuses unknown keys.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VrrpHost {
    /// The interface VRRP runs on and the virtual addresses are added to.
    pub interface: String,
    /// Time between two advertisements of the master (a multiple of 10 ms).
    #[serde(default = "default_advert_interval_ms")]
    pub advert_interval_ms: u32,
    /// Time between two readiness checks (a multiple of 1000 ms).
    #[serde(default = "default_track_interval_ms")]
    pub track_interval_ms: u64,
    /// Failed readiness checks in a row that give the address up.
    #[serde(default = "default_track_count")]
    pub track_fall: u32,
    /// Passed readiness checks in a row after which the host takes part again.
    #[serde(default = "default_track_count")]
    pub track_rise: u32,
    /// Never take the address from a lower-priority master.
    #[serde(default)]
    pub nopreempt: bool,
    /// How long to wait before taking the address from a lower-priority master.
    #[serde(default)]
    pub preempt_delay_ms: u64,
    /// keepalived's `router_id`; the default depends on the section.
    #[serde(default)]
    pub router_id: Option<String>,
    /// How keepalived is found and run.
    #[serde(default)]
    pub keepalived: KeepalivedConfig,
}

/// The `vrrp:` section (see the module docs): [`VrrpHost`] and the one VRRP group
/// typed in by hand.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VrrpConfig {
    /// Interface, timers, preemption, keepalived.
    #[serde(flatten)]
    pub host: VrrpHost,
    /// The VRRP group's id, 1-255; the same on every host of the group, different from
    /// every other group on the segment.
    pub virtual_router_id: u8,
    /// This host's priority, 1-254 (255 is the address owner's); the highest ready host
    /// holds the addresses.
    pub priority: u8,
    /// The shared addresses with their prefix length (`10.0.0.100/24`; without one,
    /// /32 or /128); one address family.
    pub virtual_addresses: Vec<VirtualAddress>,
    /// The other hosts' addresses, for networks without multicast: advertisements go to
    /// each of them instead of 224.0.0.18 / ff02::12.
    #[serde(default)]
    pub unicast_peers: Vec<IpAddr>,
}

/// `vrrp.keepalived`: where the rendered config goes and whether the agent runs
/// keepalived itself.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeepalivedConfig {
    /// The keepalived program (a bare name is looked up on `PATH`).
    #[serde(default = "default_command")]
    pub command: PathBuf,
    /// Where the agent writes the rendered config; default `<stateDir>/keepalived.conf`.
    #[serde(default)]
    pub config_path: Option<PathBuf>,
    /// The agent runs keepalived itself (checks the rendered config at start, restarts
    /// it when it dies, stops it on exit). With `false` the agent only renders the
    /// config (`cluster-agent keepalived render`) and the operator runs keepalived.
    #[serde(default = "default_manage")]
    pub manage: bool,
}

impl Default for KeepalivedConfig {
    fn default() -> Self {
        KeepalivedConfig {
            command: default_command(),
            config_path: None,
            manage: default_manage(),
        }
    }
}

/// An address with its prefix length, written `10.0.0.100/24`, `fd00::100/64`, or
/// without a prefix (a host address: /32, /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct VirtualAddress {
    pub ip: IpAddr,
    pub prefix_len: u8,
}

/// A virtual address that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "virtual address {0:?} must be an IP address with an optional prefix length (10.0.0.100/24, fd00::100/64, 10.0.0.100)"
)]
pub struct InvalidVirtualAddress(String);

impl FromStr for VirtualAddress {
    type Err = InvalidVirtualAddress;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidVirtualAddress(text.to_owned());
        let (ip, prefix) = match text.split_once('/') {
            Some((ip, prefix)) => (ip, Some(prefix)),
            None => (text, None),
        };
        let ip: IpAddr = ip.parse().map_err(|_| invalid())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix {
            None => max,
            // Digits only: "+24" and " 24" are not prefix lengths.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(invalid)?,
            Some(_) => return Err(invalid()),
        };
        Ok(VirtualAddress { ip, prefix_len })
    }
}

impl TryFrom<String> for VirtualAddress {
    type Error = InvalidVirtualAddress;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for VirtualAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix_len)
    }
}

/// The files of one managed keepalived, all per agent so that several run on one
/// machine (in network namespaces, say) without sharing any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepalivedFiles {
    /// The rendered config.
    pub config: PathBuf,
    /// keepalived's own pid file (`-p`).
    pub pid: PathBuf,
    /// The VRRP child's pid file (`-r`).
    pub vrrp_pid: PathBuf,
}

impl VrrpHost {
    /// `advertIntervalMs` as a duration.
    pub fn advert_interval(&self) -> Duration {
        Duration::from_millis(u64::from(self.advert_interval_ms))
    }

    /// `trackIntervalMs` as a duration.
    pub fn track_interval(&self) -> Duration {
        Duration::from_millis(self.track_interval_ms)
    }

    /// The rendered config and pid files: `keepalived.configPath` (default
    /// `<stateDir>/keepalived.conf`), `<stateDir>/keepalived.pid` and
    /// `<stateDir>/keepalived-vrrp.pid`.
    pub fn files(&self, state_dir: &Path) -> KeepalivedFiles {
        KeepalivedFiles {
            config: self
                .keepalived
                .config_path
                .clone()
                .unwrap_or_else(|| state_dir.join("keepalived.conf")),
            pid: state_dir.join("keepalived.pid"),
            vrrp_pid: state_dir.join("keepalived-vrrp.pid"),
        }
    }

    /// Resolves `keepalived.configPath` against `base` (the config file's directory).
    pub(super) fn resolve_paths(&mut self, base: &Path) {
        if let Some(path) = &mut self.keepalived.config_path {
            *path = base.join(&*path);
        }
    }

    /// Every problem of these keys of `section` (`vrrp`, `pools`), each naming its
    /// field; `driver` and `admin` are the config's.
    pub(super) fn problems(&self, section: &str, driver: Driver, admin: SocketAddr) -> Vec<String> {
        let mut problems = Vec::new();
        if driver != Driver::Standalone {
            problems.push(format!("{section}: only used with driver standalone"));
        }
        if admin.port() == 0 {
            problems.push(format!(
                "admin: {section} needs a fixed admin port (not 0): keepalived's track script \
                 asks /readyz at the address written into its config"
            ));
        }
        // Linux interface names: 1-15 bytes, no '/', ':' or whitespace.
        if self.interface.is_empty()
            || self.interface.len() > 15
            || self
                .interface
                .contains(|c: char| c == '/' || c == ':' || !c.is_ascii_graphic())
        {
            problems.push(format!(
                "{section}.interface: {:?} is not an interface name (1-15 characters, no /, : or spaces)",
                self.interface
            ));
        }
        if self.interface == "lo" {
            problems.push(format!(
                "{section}.interface: lo is the loopback interface; VRRP runs on a network"
            ));
        }
        let advert = self.advert_interval_ms;
        if !(10..=40_950).contains(&advert) || !advert.is_multiple_of(10) {
            problems.push(format!(
                "{section}.advertIntervalMs: {advert} must be a multiple of 10 from 10 to 40950 \
                 (VRRPv3 counts centiseconds)"
            ));
        }
        let track = self.track_interval_ms;
        if !(1000..=4_294_000).contains(&track) || !track.is_multiple_of(1000) {
            problems.push(format!(
                "{section}.trackIntervalMs: {track} must be whole seconds (a multiple of 1000 \
                 from 1000 to 4294000): keepalived runs track scripts at whole seconds"
            ));
        }
        for (field, value) in [
            ("trackFall", self.track_fall),
            ("trackRise", self.track_rise),
        ] {
            if value == 0 {
                problems.push(format!("{section}.{field}: must be at least 1"));
            }
        }
        if self.preempt_delay_ms > 1_000_000 {
            problems.push(format!(
                "{section}.preemptDelayMs: at most 1000000 (1000 s)"
            ));
        }
        if self.nopreempt && self.preempt_delay_ms > 0 {
            problems.push(format!(
                "{section}.preemptDelayMs: has no effect with nopreempt"
            ));
        }
        if let Some(id) = &self.router_id
            && (id.is_empty()
                || id.contains(|c: char| !c.is_ascii_graphic() || "\"'{}#!".contains(c)))
        {
            problems.push(format!(
                "{section}.routerId: {id:?} must be non-empty printable ASCII without spaces, \
                 quotes, braces, # or !"
            ));
        }
        if self.keepalived.command.as_os_str().is_empty() {
            problems.push(format!("{section}.keepalived.command: must not be empty"));
        }
        if self
            .keepalived
            .config_path
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            problems.push(format!(
                "{section}.keepalived.configPath: must not be empty"
            ));
        }
        problems
    }
}

impl VrrpConfig {
    /// keepalived's `router_id`: `routerId`, or `<cluster>-vr<id>-p<priority>`.
    pub fn router_id(&self, cluster: &str) -> String {
        self.host
            .router_id
            .clone()
            .unwrap_or_else(|| format!("{cluster}-vr{}-p{}", self.virtual_router_id, self.priority))
    }

    /// Resolves `keepalived.configPath` against `base` (the config file's directory).
    pub(super) fn resolve_paths(&mut self, base: &Path) {
        self.host.resolve_paths(base);
    }

    /// Every problem of the section, each naming its field; `driver`, `admin` and
    /// `listen` are the config's.
    pub(super) fn problems(
        &self,
        driver: Driver,
        admin: SocketAddr,
        listen: &[ListenAddress],
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for (i, address) in listen.iter().enumerate() {
            if self.virtual_addresses.iter().any(|v| v.ip == address.bind) {
                problems.push(format!(
                    "listen[{i}].bind: {} is a VRRP virtual address, local only on the host \
                     holding it: bind the wildcard address and advertise it instead",
                    address.bind
                ));
            }
        }
        problems.extend(self.host.problems("vrrp", driver, admin));
        if self.virtual_router_id == 0 {
            problems.push("vrrp.virtualRouterId: must be 1-255".to_owned());
        }
        if !(1..=254).contains(&self.priority) {
            problems.push(
                "vrrp.priority: must be 1-254 (255 is reserved for the address owner)".to_owned(),
            );
        }
        if self.virtual_addresses.is_empty() {
            problems.push("vrrp.virtualAddresses: at least one address is required".to_owned());
        }
        let mut seen = BTreeSet::new();
        for (i, address) in self.virtual_addresses.iter().enumerate() {
            let field = format!("vrrp.virtualAddresses[{i}]");
            if !seen.insert(address.ip) {
                problems.push(format!("{field}: {} is listed twice", address.ip));
            }
            if let Some(why) = unusable(address.ip) {
                problems.push(format!("{field}: {} {why}", address.ip));
            }
        }
        let family = self.virtual_addresses.first().map(|a| a.ip.is_ipv4());
        if let Some(v4) = family {
            for (i, address) in self.virtual_addresses.iter().enumerate() {
                if address.ip.is_ipv4() != v4 {
                    problems.push(format!(
                        "vrrp.virtualAddresses[{i}]: one VRRP instance carries one address \
                         family, that of the first ({})",
                        if v4 { "IPv4" } else { "IPv6" }
                    ));
                }
            }
        }
        let mut peers = BTreeSet::new();
        for (i, peer) in self.unicast_peers.iter().enumerate() {
            let field = format!("vrrp.unicastPeers[{i}]");
            if !peers.insert(peer) {
                problems.push(format!("{field}: {peer} is listed twice"));
            }
            if let Some(why) = unusable(*peer) {
                problems.push(format!("{field}: {peer} {why}"));
            }
            if family.is_some_and(|v4| peer.is_ipv4() != v4) {
                problems.push(format!("{field}: must be of the virtual addresses' family"));
            }
        }
        problems
    }
}

/// Why `ip` cannot be a virtual address or a VRRP peer, or `None`.
pub(crate) fn unusable(ip: IpAddr) -> Option<&'static str> {
    if ip.is_unspecified() {
        Some("is the unspecified address")
    } else if ip.is_loopback() {
        Some("is a loopback address")
    } else if ip.is_multicast() {
        Some("is a multicast address")
    } else if ip == IpAddr::from([255, 255, 255, 255]) {
        Some("is the broadcast address")
    } else {
        None
    }
}

fn default_advert_interval_ms() -> u32 {
    200
}
fn default_track_interval_ms() -> u64 {
    1000
}
fn default_track_count() -> u32 {
    2
}
fn default_command() -> PathBuf {
    PathBuf::from("keepalived")
}
fn default_manage() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(extra: &str) -> String {
        format!(
            "interface: eth0\nvirtualRouterId: 51\npriority: 150\nvirtualAddresses: ['10.0.0.100/24']\n{extra}"
        )
    }

    fn problems(extra: &str) -> Vec<String> {
        let config: VrrpConfig = yaml_serde::from_str(&section(extra)).unwrap();
        config.problems(Driver::Standalone, "127.0.0.1:9901".parse().unwrap(), &[])
    }

    #[test]
    fn defaults() {
        let config: VrrpConfig = yaml_serde::from_str(&section("")).unwrap();
        assert_eq!(config.host.advert_interval(), Duration::from_millis(200));
        assert_eq!(config.host.track_interval(), Duration::from_secs(1));
        assert_eq!((config.host.track_fall, config.host.track_rise), (2, 2));
        assert!(!config.host.nopreempt);
        assert_eq!(config.host.preempt_delay_ms, 0);
        assert_eq!(config.host.keepalived, KeepalivedConfig::default());
        assert!(config.host.keepalived.manage);
        assert_eq!(config.router_id("eu-west"), "eu-west-vr51-p150");
        let files = config.host.files(Path::new("/var/lib/agent"));
        assert_eq!(files.config, Path::new("/var/lib/agent/keepalived.conf"));
        assert_eq!(files.pid, Path::new("/var/lib/agent/keepalived.pid"));
        assert_eq!(
            files.vrrp_pid,
            Path::new("/var/lib/agent/keepalived-vrrp.pid")
        );
        assert_eq!(problems(""), Vec::<String>::new());
    }

    #[test]
    fn virtual_addresses_parse() {
        let ok = |text: &str, shown: &str| {
            let address: VirtualAddress = text.parse().unwrap();
            assert_eq!(address.to_string(), shown, "{text}");
        };
        ok("10.0.0.100/24", "10.0.0.100/24");
        ok("10.0.0.100", "10.0.0.100/32");
        ok("fd00::100/64", "fd00::100/64");
        ok("fd00::100", "fd00::100/128");
        for bad in [
            "",
            "10.0.0.100/33",
            "10.0.0.100/",
            "10.0.0.100/+1",
            "vip/24",
            "fd00::1/129",
        ] {
            assert!(bad.parse::<VirtualAddress>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_problem_names_its_field() {
        let cases: &[(&str, &str)] = &[
            (
                "advertIntervalMs: 15\n",
                "vrrp.advertIntervalMs: 15 must be a multiple of 10",
            ),
            ("advertIntervalMs: 50000\n", "vrrp.advertIntervalMs"),
            (
                "trackIntervalMs: 500\n",
                "vrrp.trackIntervalMs: 500 must be whole seconds",
            ),
            ("trackFall: 0\n", "vrrp.trackFall: must be at least 1"),
            ("trackRise: 0\n", "vrrp.trackRise: must be at least 1"),
            (
                "nopreempt: true\npreemptDelayMs: 100\n",
                "vrrp.preemptDelayMs: has no effect",
            ),
            ("preemptDelayMs: 2000000\n", "vrrp.preemptDelayMs: at most"),
            (
                "unicastPeers: ['10.0.0.2', '10.0.0.2']\n",
                "vrrp.unicastPeers[1]: 10.0.0.2 is listed twice",
            ),
            (
                "unicastPeers: ['fd00::2']\n",
                "vrrp.unicastPeers[0]: must be of the virtual addresses' family",
            ),
            (
                "unicastPeers: ['127.0.0.1']\n",
                "vrrp.unicastPeers[0]: 127.0.0.1 is a loopback address",
            ),
            ("routerId: 'a b'\n", "vrrp.routerId"),
            (
                "keepalived: {command: ''}\n",
                "vrrp.keepalived.command: must not be empty",
            ),
            (
                "keepalived: {configPath: ''}\n",
                "vrrp.keepalived.configPath: must not be empty",
            ),
        ];
        for (extra, expected) in cases {
            let problems = problems(extra);
            assert_eq!(problems.len(), 1, "{extra}: {problems:?}");
            assert!(problems[0].starts_with(expected), "{extra}: {problems:?}");
        }
        let config: VrrpConfig = yaml_serde::from_str(
            "interface: 'eth0 x'\nvirtualRouterId: 0\npriority: 255\nvirtualAddresses: ['10.0.0.100/24', '10.0.0.100', 'fd00::1', 0.0.0.0]\n",
        )
        .unwrap();
        let all = config
            .problems(Driver::Kubernetes, "127.0.0.1:0".parse().unwrap(), &[])
            .join("\n");
        for expected in [
            "vrrp: only used with driver standalone",
            "admin: vrrp needs a fixed admin port",
            "vrrp.interface: \"eth0 x\" is not an interface name",
            "vrrp.virtualRouterId: must be 1-255",
            "vrrp.priority: must be 1-254",
            "vrrp.virtualAddresses[1]: 10.0.0.100 is listed twice",
            "vrrp.virtualAddresses[2]: one VRRP instance carries one address family",
            "vrrp.virtualAddresses[3]: 0.0.0.0 is the unspecified address",
        ] {
            assert!(all.contains(expected), "{expected} missing in:\n{all}");
        }
        let config: VrrpConfig = yaml_serde::from_str(
            "interface: eth0\nvirtualRouterId: 1\npriority: 1\nvirtualAddresses: []\n",
        )
        .unwrap();
        let all = config
            .problems(Driver::Standalone, "127.0.0.1:1".parse().unwrap(), &[])
            .join("\n");
        assert!(all.contains("vrrp.virtualAddresses: at least one"), "{all}");
        let config: VrrpConfig =
            yaml_serde::from_str(&section("").replace("interface: eth0", "interface: lo")).unwrap();
        let all = config
            .problems(Driver::Standalone, "127.0.0.1:1".parse().unwrap(), &[])
            .join("\n");
        assert!(
            all.starts_with("vrrp.interface: lo is the loopback"),
            "{all}"
        );
    }

    #[test]
    fn a_virtual_address_is_not_a_bind_address() {
        let config: VrrpConfig = yaml_serde::from_str(&section("")).unwrap();
        let listen = [
            ListenAddress {
                bind: "0.0.0.0".parse().unwrap(),
                advertise: Some("10.0.0.100".into()),
            },
            ListenAddress {
                bind: "10.0.0.100".parse().unwrap(),
                advertise: None,
            },
        ];
        let problems = config.problems(
            Driver::Standalone,
            "127.0.0.1:9901".parse().unwrap(),
            &listen,
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("listen[1].bind: 10.0.0.100 is a VRRP virtual address"),
            "{problems:?}"
        );
    }

    #[test]
    fn unknown_keys_and_authentication_are_refused() {
        for extra in [
            "authentication: {authType: PASS, authPass: secret}\n",
            "advertInt: 1\n",
            "keepalived: {manage: true, pidFile: x}\n",
        ] {
            let err = yaml_serde::from_str::<VrrpConfig>(&section(extra)).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{extra}: {err}");
        }
        for bad in ["virtualRouterId: 256\n", "priority: -1\n"] {
            let text = section("").replace(
                if bad.starts_with("virtual") {
                    "virtualRouterId: 51\n"
                } else {
                    "priority: 150\n"
                },
                bad,
            );
            assert!(yaml_serde::from_str::<VrrpConfig>(&text).is_err(), "{bad}");
        }
    }
}
