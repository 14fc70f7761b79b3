//! `pools:` of the agent config: this host runs VRRP (keepalived) for the IngressPools
//! the hub puts it in (issue 24), as `vrrp:` does for one group typed in by hand. The
//! hub's plan gives each pool's virtual router id, its VIPs and their prefix length,
//! and every member's priority and address; this section gives what only the host
//! knows: the same keys and defaults as `vrrp:` ([`VrrpHost`]) without
//! `virtualRouterId`, `priority`, `virtualAddresses` and `unicastPeers`.
//!
//! ```yaml
//! member: {name: edge-a, address: 10.0.0.1, labels: {tier: edge}}
//! pools:
//!   interface: eth0
//!   advertIntervalMs: 200
//!   trackIntervalMs: 1000
//!   trackFall: 2
//!   trackRise: 2
//!   nopreempt: false
//!   preemptDelayMs: 0
//!   routerId: eu-west-edge-a         # optional
//!   keepalived: {command: keepalived, configPath: keepalived.conf}
//! ```
//!
//! Decisions (the operator's view is in `docs/anycast.md`, "VRRP"; the rendering in
//! [`crate::vrrp::render::render_pools`], the reloads in [`crate::vrrp::pools`]):
//! - `vrrp:` and `pools:` exclude each other: one keepalived per agent, with one
//!   config, either typed in or following the hub.
//! - `member.address` is required: it is `unicast_src_ip`, and the address the hub
//!   gives the pool peers to send VRRP to (unicast, so no multicast is needed).
//! - The agent always runs keepalived itself (`keepalived.manage: false` is refused):
//!   it rewrites keepalived's config and reloads it whenever the plan's pools change,
//!   and reads the VRRP state per pool that it reports to the hub.
//! - `routerId` defaults to `<cluster>-<member>`, unique per host.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde::Deserialize;

use super::Driver;
use super::vrrp::{VrrpHost, unusable};

/// The `pools:` section (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PoolsConfig {
    /// Interface, timers, preemption, keepalived: as in `vrrp:`.
    #[serde(flatten)]
    pub host: VrrpHost,
}

impl PoolsConfig {
    /// keepalived's `router_id`: `routerId`, or `<cluster>-<member>` (`<cluster>` for
    /// a config without a member name).
    pub fn router_id(&self, cluster: &str, member: &str) -> String {
        match (&self.host.router_id, member) {
            (Some(id), _) => id.clone(),
            (None, "") => cluster.to_owned(),
            (None, member) => format!("{cluster}-{member}"),
        }
    }

    /// Resolves `keepalived.configPath` against `base` (the config file's directory).
    pub(super) fn resolve_paths(&mut self, base: &Path) {
        self.host.resolve_paths(base);
    }

    /// Every problem of the section, each naming its field; `driver`, `admin` and
    /// `member_address` (`member.address`) are the config's.
    pub(super) fn problems(
        &self,
        driver: Driver,
        admin: SocketAddr,
        member_address: Option<IpAddr>,
    ) -> Vec<String> {
        let mut problems = self.host.problems("pools", driver, admin);
        if !self.host.keepalived.manage {
            problems.push(
                "pools.keepalived.manage: must be true: the agent reloads keepalived whenever \
                 the hub's plan changes the pools, and reports the VRRP state it reads"
                    .to_owned(),
            );
        }
        match member_address {
            None => problems.push(
                "member.address: required with pools: (this host's address on \
                 pools.interface: its pool peers send VRRP to it)"
                    .to_owned(),
            ),
            Some(address) => {
                if let Some(why) = unusable(address) {
                    problems.push(format!(
                        "member.address: {address} {why}; pools: needs this host's address on \
                         pools.interface"
                    ));
                }
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::vrrp::KeepalivedConfig;
    use std::time::Duration;

    const ADMIN: &str = "127.0.0.1:9901";

    fn parse(text: &str) -> PoolsConfig {
        yaml_serde::from_str(text).unwrap()
    }

    fn problems(text: &str) -> Vec<String> {
        parse(text).problems(
            Driver::Standalone,
            ADMIN.parse().unwrap(),
            Some("10.0.0.1".parse().unwrap()),
        )
    }

    #[test]
    fn defaults_are_vrrps() {
        let pools = parse("interface: eth0\n");
        assert_eq!(pools.host.advert_interval(), Duration::from_millis(200));
        assert_eq!(pools.host.track_interval(), Duration::from_secs(1));
        assert_eq!((pools.host.track_fall, pools.host.track_rise), (2, 2));
        assert!(!pools.host.nopreempt);
        assert_eq!(pools.host.preempt_delay_ms, 0);
        assert_eq!(pools.host.keepalived, KeepalivedConfig::default());
        assert_eq!(pools.router_id("eu-west", "edge-a"), "eu-west-edge-a");
        assert_eq!(pools.router_id("eu-west", ""), "eu-west");
        assert_eq!(
            parse("interface: eth0\nrouterId: r1\n").router_id("eu-west", "edge-a"),
            "r1"
        );
        assert_eq!(
            pools.host.files(Path::new("/var/lib/agent")).config,
            Path::new("/var/lib/agent/keepalived.conf")
        );
        assert_eq!(problems("interface: eth0\n"), Vec::<String>::new());
    }

    #[test]
    fn what_the_hub_gives_is_not_typed_in() {
        for key in [
            "virtualRouterId: 51\n",
            "priority: 150\n",
            "virtualAddresses: ['10.0.0.100/24']\n",
            "unicastPeers: ['10.0.0.2']\n",
            "advertInt: 1\n",
        ] {
            let err = yaml_serde::from_str::<PoolsConfig>(&format!("interface: eth0\n{key}"))
                .unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{key}: {err}");
        }
        let err =
            yaml_serde::from_str::<PoolsConfig>("interface: eth0\nkeepalived: {pidFile: x}\n")
                .unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn every_problem_names_its_field() {
        let cases: &[(&str, &str)] = &[
            (
                "interface: eth0\nadvertIntervalMs: 15\n",
                "pools.advertIntervalMs: 15 must be a multiple of 10",
            ),
            (
                "interface: eth0\ntrackIntervalMs: 500\n",
                "pools.trackIntervalMs: 500 must be whole seconds",
            ),
            (
                "interface: eth0\ntrackFall: 0\n",
                "pools.trackFall: must be at least 1",
            ),
            (
                "interface: eth0\nnopreempt: true\npreemptDelayMs: 5\n",
                "pools.preemptDelayMs: has no effect",
            ),
            ("interface: lo\n", "pools.interface: lo is the loopback"),
            (
                "interface: 'a b'\n",
                "pools.interface: \"a b\" is not an interface name",
            ),
            ("interface: eth0\nrouterId: 'a b'\n", "pools.routerId"),
            (
                "interface: eth0\nkeepalived: {manage: false}\n",
                "pools.keepalived.manage: must be true",
            ),
            (
                "interface: eth0\nkeepalived: {command: ''}\n",
                "pools.keepalived.command: must not be empty",
            ),
        ];
        for (text, expected) in cases {
            let problems = problems(text);
            assert_eq!(problems.len(), 1, "{text}: {problems:?}");
            assert!(problems[0].starts_with(expected), "{text}: {problems:?}");
        }
        let pools = parse("interface: eth0\n");
        let all = pools
            .problems(Driver::Kubernetes, "127.0.0.1:0".parse().unwrap(), None)
            .join("\n");
        for expected in [
            "pools: only used with driver standalone",
            "admin: pools needs a fixed admin port",
            "member.address: required with pools:",
        ] {
            assert!(all.contains(expected), "{expected} missing in:\n{all}");
        }
        let all = pools
            .problems(
                Driver::Standalone,
                ADMIN.parse().unwrap(),
                Some("127.0.0.1".parse().unwrap()),
            )
            .join("\n");
        assert!(
            all.starts_with("member.address: 127.0.0.1 is a loopback address"),
            "{all}"
        );
    }
}
