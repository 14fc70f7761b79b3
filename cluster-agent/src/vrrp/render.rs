//! keepalived's config, pure text, no I/O, the same at every render of the same input
//! (golden tests hold it): from the agent's `vrrp:` section ([`render`]), or from the
//! pools of the hub's plan and the `pools:` section ([`render_pools`]).
//!
//! What is rendered and why:
//! - `global_defs`: `router_id`, `vrrp_version 3`, and `enable_script_security` with
//!   `script_user root`: keepalived then runs the track script as root only when the
//!   program and every directory above it are writable by root alone (else
//!   `keepalived --config-test` fails, which the agent turns into exit 64).
//! - `vrrp_script fedingress_ready`: `<this program> ready --admin <admin>
//!   --timeout-ms <half the interval>` every `trackIntervalMs` (whole seconds), killed
//!   after the interval, `fall`/`rise` from the config.
//! - `vrrp_instance fedingress_<id>` (`vrrp:`) or `fedingress_<pool>` (one per pool):
//!   `state BACKUP` on every host (the priorities elect the master; no host claims the
//!   address before it has heard the others), `advert_int` in seconds with centisecond
//!   resolution, `nopreempt` or `preempt_delay`, `unicast_peer` and (pools: the
//!   member's address) `unicast_src_ip` when there are peers (multicast otherwise), `virtual_ipaddress` with each address's
//!   prefix length, and the track script without `weight`, so a failing check puts the
//!   instance in FAULT whatever the priorities.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use fedingress_api::plan::PoolAssignment;

use crate::config::vrrp::{VirtualAddress, VrrpHost, unusable};
use crate::config::{PoolsConfig, VrrpConfig};

/// The track script's name in the rendered config.
pub const SCRIPT_NAME: &str = "fedingress_ready";

/// Why a config cannot be rendered.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// keepalived splits `script` at spaces and has no quoting for a program path.
    #[error(
        "the agent's program path {0:?} must be absolute, without spaces or quotes, to be keepalived's track script"
    )]
    Program(String),
    /// The track script needs the admin endpoint's real port.
    #[error("the admin address {0} has port 0: the track script needs a fixed port")]
    AdminPort(SocketAddr),
}

/// The instance's name in the rendered config: `fedingress_<virtualRouterId>`.
pub fn instance_name(vrrp: &VrrpConfig) -> String {
    format!("fedingress_{}", vrrp.virtual_router_id)
}

/// The instance of pool `pool`: `fedingress_<pool>`, every character but ASCII letters,
/// digits, `-`, `_` and `.` replaced by `_` (pool names are DNS names already).
pub fn pool_instance_name(pool: &str) -> String {
    let name: String = pool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("fedingress_{name}")
}

/// The address the track script asks: `admin`, with an unspecified address (the admin
/// endpoint listening on every address) replaced by loopback of the same family.
pub fn check_address(admin: SocketAddr) -> SocketAddr {
    match admin.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), admin.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), admin.port())
        }
        _ => admin,
    }
}

/// The readiness check keepalived runs: `program ready --admin ADDR --timeout-ms N`.
pub fn ready_command(program: &Path, admin: SocketAddr, host: &VrrpHost) -> String {
    format!(
        "{} ready --admin {} --timeout-ms {}",
        program.display(),
        check_address(admin),
        host.track_interval_ms / 2
    )
}

/// keepalived.conf for `vrrp` of cluster `cluster`, whose track script runs `program`
/// (this binary) against the admin endpoint at `admin`.
///
/// # Guarantees
/// The same input renders the same text. Every value comes from a checked config
/// ([`crate::Config::from_yaml`] refuses what keepalived would not take), so the
/// result passes `keepalived --config-test` on a host that has the interface.
///
/// # Errors
/// [`RenderError::Program`] for a program path keepalived cannot run as a script,
/// [`RenderError::AdminPort`] for admin port 0.
pub fn render(
    vrrp: &VrrpConfig,
    cluster: &str,
    program: &Path,
    admin: SocketAddr,
) -> Result<String, RenderError> {
    let mut text = format!(
        "\
# Rendered by cluster-agent from the vrrp: section of its config (cluster {cluster}).
# Do not edit: `cluster-agent keepalived render -c <config>` renders it again.
"
    );
    preamble(
        &mut text,
        &vrrp.host,
        &vrrp.router_id(cluster),
        program,
        admin,
    )?;
    instance(
        &mut text,
        &vrrp.host,
        &Instance {
            name: &instance_name(vrrp),
            virtual_router_id: vrrp.virtual_router_id,
            priority: vrrp.priority,
            source: None,
            peers: &vrrp.unicast_peers,
            addresses: &vrrp.virtual_addresses,
        },
    );
    Ok(text)
}

/// This agent among the pools' members.
#[derive(Clone, Copy, Debug)]
pub struct Member<'a> {
    pub cluster: &'a str,
    /// `member.name`: how the plan's pools name this agent.
    pub name: &'a str,
    /// `member.address`: the VRRP source address (else the plan's address for it).
    pub address: Option<IpAddr>,
}

/// keepalived's config for the pools of a plan, and what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolsRender {
    /// keepalived.conf.
    pub text: String,
    /// Instance name → pool name, of every rendered instance.
    pub instances: BTreeMap<String, String>,
    /// Every virtual address of the rendered instances.
    pub addresses: Vec<VirtualAddress>,
    /// Pools left out because the plan gives them values keepalived cannot run, each
    /// `<pool>: why` (the plan is not applied in full: the agent Nacks it with them).
    pub errors: Vec<String>,
    /// What was left out of the rest, each `<pool>: what and why` (a peer without an
    /// address, a pool without VIPs): logged.
    pub notes: Vec<String>,
}

/// keepalived.conf for the pools of `plan` (the member's view: the pools it is in) as
/// `member` runs them with the settings of `pools`; the track script runs `program`
/// against the admin endpoint at `admin`. One `vrrp_instance` per pool with VIPs
/// (sorted by pool name): `virtual_router_id` from the plan, this member's priority
/// (its own entry, found by name), `unicast_peer` the other members' addresses (members
/// without one, or of the other family, are left out with a note) and `unicast_src_ip`
/// the member's address (without peers neither: keepalived sends to the multicast group), `virtual_ipaddress` each VIP with the plan's
/// prefix length (0: a host address). No pool renders no instance: keepalived runs
/// with nothing to do until the plan gives it some.
///
/// # Guarantees
/// The same input renders the same text. A pool whose values keepalived cannot run
/// (virtual router id 0, a priority outside 1-254, VIPs of two families or one that is
/// loopback or multicast, a VRRP group or VIP another pool of the plan has) is left
/// out with an error, and the other pools are rendered.
///
/// # Errors
/// As [`render`].
pub fn render_pools(
    pools: &PoolsConfig,
    member: &Member<'_>,
    plan: &[PoolAssignment],
    program: &Path,
    admin: SocketAddr,
) -> Result<PoolsRender, RenderError> {
    let mut out = PoolsRender {
        text: format!(
            "\
# Rendered by cluster-agent from the pools of its hub's plan (cluster {cluster}, member {name}).
# Do not edit: the agent writes it again whenever the plan's pools change.
",
            cluster = member.cluster,
            name = member.name,
        ),
        ..PoolsRender::default()
    };
    let router_id = pools.router_id(member.cluster, member.name);
    preamble(&mut out.text, &pools.host, &router_id, program, admin)?;
    let mut sorted: Vec<&PoolAssignment> = plan.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut groups = BTreeSet::new();
    let mut held = BTreeSet::new();
    for pool in sorted {
        let checked = match check_pool(pool, member) {
            Ok(Some(checked)) => checked,
            Ok(None) => {
                out.notes
                    .push(format!("{}: no VIPs, no VRRP instance", pool.name));
                continue;
            }
            Err(why) => {
                out.errors.push(format!("{}: {why}", pool.name));
                continue;
            }
        };
        let name = pool_instance_name(&pool.name);
        if out.instances.contains_key(&name) {
            out.errors.push(format!(
                "{}: its instance name {name} is another pool's",
                pool.name
            ));
            continue;
        }
        if !groups.insert(pool.virtual_router_id) {
            out.errors.push(format!(
                "{}: virtual router id {} is another pool's",
                pool.name, pool.virtual_router_id
            ));
            continue;
        }
        if let Some(taken) = checked.addresses.iter().find(|a| held.contains(&a.ip)) {
            out.errors
                .push(format!("{}: VIP {} is another pool's", pool.name, taken.ip));
            continue;
        }
        held.extend(checked.addresses.iter().map(|a| a.ip));
        out.notes.extend(
            checked
                .left_out
                .iter()
                .map(|why| format!("{}: {why}", pool.name)),
        );
        let _ = write!(out.text, "\n# pool {}", pool.name);
        instance(
            &mut out.text,
            &pools.host,
            &Instance {
                name: &name,
                virtual_router_id: pool.virtual_router_id,
                priority: checked.priority,
                source: checked.source,
                peers: &checked.peers,
                addresses: &checked.addresses,
            },
        );
        out.addresses.extend(checked.addresses.iter().copied());
        out.instances.insert(name, pool.name.clone());
    }
    Ok(out)
}

/// One pool as this member renders it.
struct CheckedPool {
    priority: u8,
    source: Option<IpAddr>,
    peers: Vec<IpAddr>,
    addresses: Vec<VirtualAddress>,
    /// Peers left out, and why.
    left_out: Vec<String>,
}

/// `pool` as `member` renders it; `None` for a pool without VIPs (nothing to hold).
///
/// # Errors
/// Why keepalived cannot run it.
fn check_pool(pool: &PoolAssignment, member: &Member<'_>) -> Result<Option<CheckedPool>, String> {
    let Some(me) = pool.members.iter().find(|m| m.name == member.name) else {
        return Err(format!(
            "this member ({:?}) is not among its members",
            member.name
        ));
    };
    let Some(first) = pool.vips.first() else {
        return Ok(None);
    };
    if pool.virtual_router_id == 0 {
        return Err("virtual router id 0 (VRRP's are 1-255)".to_owned());
    }
    if !(1..=254).contains(&me.priority) {
        return Err(format!(
            "this member's priority {} is outside 1-254",
            me.priority
        ));
    }
    let v4 = first.is_ipv4();
    let max = if v4 { 32 } else { 128 };
    let prefix_len = match pool.prefix_len {
        0 => max,
        len if len <= max => len,
        len => return Err(format!("prefix length {len} is longer than {max}")),
    };
    let mut addresses = Vec::new();
    for vip in &pool.vips {
        if vip.is_ipv4() != v4 {
            return Err(format!(
                "VIP {vip}: one VRRP instance carries one address family, that of the first ({first})"
            ));
        }
        if let Some(why) = unusable(*vip) {
            return Err(format!("VIP {vip} {why}"));
        }
        let address = VirtualAddress {
            ip: *vip,
            prefix_len,
        };
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    let source = member.address.or(me.address);
    if let Some(source) = source
        && source.is_ipv4() != v4
    {
        return Err(format!(
            "this member's address {source} is not of its VIPs' family ({first})"
        ));
    }
    let mut peers = Vec::new();
    let mut left_out = Vec::new();
    for peer in pool.members.iter().filter(|m| m.name != member.name) {
        match peer.address {
            None => left_out.push(format!(
                "peer {} has no address (member.address): left out of unicast_peer",
                peer.name
            )),
            Some(address) if address.is_ipv4() != v4 => left_out.push(format!(
                "peer {}'s address {address} is not of the VIPs' family: left out of unicast_peer",
                peer.name
            )),
            Some(address) if Some(address) == source || unusable(address).is_some() => {
                left_out.push(format!(
                    "peer {}'s address {address} cannot be a VRRP peer: left out of unicast_peer",
                    peer.name
                ));
            }
            Some(address) if !peers.contains(&address) => peers.push(address),
            Some(_) => {}
        }
    }
    if peers.is_empty() && pool.members.len() > 1 {
        left_out.push(
            "no peer has an address: advertisements go to the VRRP multicast group".to_owned(),
        );
    }
    Ok(Some(CheckedPool {
        priority: me.priority,
        source,
        peers,
        addresses,
        left_out,
    }))
}

/// `global_defs` and the track script, after the header comment.
fn preamble(
    text: &mut String,
    host: &VrrpHost,
    router_id: &str,
    program: &Path,
    admin: SocketAddr,
) -> Result<(), RenderError> {
    let shown = program.display().to_string();
    if !program.is_absolute()
        || shown.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'')
    {
        return Err(RenderError::Program(shown));
    }
    if admin.port() == 0 {
        return Err(RenderError::AdminPort(admin));
    }
    // Writing to a String cannot fail.
    let _ = write!(
        text,
        "
global_defs {{
    router_id {router_id}
    vrrp_version 3
    enable_script_security
    script_user root
}}

vrrp_script {SCRIPT_NAME} {{
    script \"{script}\"
    interval {interval}
    timeout {interval}
    fall {fall}
    rise {rise}
}}
",
        script = ready_command(program, admin, host),
        interval = host.track_interval_ms / 1000,
        fall = host.track_fall,
        rise = host.track_rise,
    );
    Ok(())
}

/// One VRRP group as this host runs it.
struct Instance<'a> {
    name: &'a str,
    virtual_router_id: u8,
    priority: u8,
    source: Option<IpAddr>,
    peers: &'a [IpAddr],
    addresses: &'a [VirtualAddress],
}

/// A `vrrp_instance` block, after a line break.
fn instance(text: &mut String, host: &VrrpHost, instance: &Instance<'_>) {
    let _ = write!(
        text,
        "
vrrp_instance {name} {{
    state BACKUP
    interface {interface}
    virtual_router_id {id}
    priority {priority}
    advert_int {advert}
",
        name = instance.name,
        interface = host.interface,
        id = instance.virtual_router_id,
        priority = instance.priority,
        advert = seconds(u64::from(host.advert_interval_ms)),
    );
    if host.nopreempt {
        text.push_str("    nopreempt\n");
    } else if host.preempt_delay_ms > 0 {
        let _ = writeln!(text, "    preempt_delay {}", seconds(host.preempt_delay_ms));
    }
    if !instance.peers.is_empty() {
        // keepalived refuses a unicast_src_ip without peers.
        if let Some(source) = instance.source {
            let _ = writeln!(text, "    unicast_src_ip {source}");
        }
        text.push_str("    unicast_peer {\n");
        for peer in instance.peers {
            let _ = writeln!(text, "        {peer}");
        }
        text.push_str("    }\n");
    }
    text.push_str("    virtual_ipaddress {\n");
    for address in instance.addresses {
        let _ = writeln!(text, "        {address}");
    }
    let _ = write!(
        text,
        "    }}\n    track_script {{\n        {SCRIPT_NAME}\n    }}\n}}\n"
    );
}

/// Milliseconds as keepalived's decimal seconds: `1`, `0.2`, `0.125`.
fn seconds(ms: u64) -> String {
    let (whole, fraction) = (ms / 1000, ms % 1000);
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:03}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_decimal() {
        assert_eq!(seconds(1000), "1");
        assert_eq!(seconds(200), "0.2");
        assert_eq!(seconds(10), "0.01");
        assert_eq!(seconds(1250), "1.25");
        assert_eq!(seconds(40_950), "40.95");
    }

    #[test]
    fn the_check_asks_loopback_for_a_wildcard_admin() {
        assert_eq!(
            check_address("0.0.0.0:9901".parse().unwrap()),
            "127.0.0.1:9901".parse().unwrap()
        );
        assert_eq!(
            check_address("[::]:9901".parse().unwrap()),
            "[::1]:9901".parse().unwrap()
        );
        assert_eq!(
            check_address("10.0.0.1:9901".parse().unwrap()),
            "10.0.0.1:9901".parse().unwrap()
        );
    }

    use fedingress_api::plan::PoolPeer;

    fn peer(name: &str, priority: u8, address: Option<&str>) -> PoolPeer {
        PoolPeer {
            name: name.into(),
            address: address.map(|a| a.parse().unwrap()),
            priority,
        }
    }

    fn pool(name: &str, id: u8, vips: &[&str], members: Vec<PoolPeer>) -> PoolAssignment {
        PoolAssignment {
            name: name.into(),
            vips: vips.iter().map(|v| v.parse().unwrap()).collect(),
            prefix_len: 24,
            virtual_router_id: id,
            members,
        }
    }

    fn rendered(plan: &[PoolAssignment]) -> PoolsRender {
        let pools: PoolsConfig = yaml_serde::from_str("interface: eth0\n").unwrap();
        let member = Member {
            cluster: "eu-west",
            name: "a",
            address: Some("10.0.0.1".parse().unwrap()),
        };
        render_pools(
            &pools,
            &member,
            plan,
            Path::new("/usr/bin/cluster-agent"),
            "127.0.0.1:9901".parse().unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn instance_names_are_the_pools() {
        assert_eq!(pool_instance_name("gold"), "fedingress_gold");
        assert_eq!(pool_instance_name("eu.gold-1"), "fedingress_eu.gold-1");
        assert_eq!(pool_instance_name("a b{}#!\"x"), "fedingress_a_b_____x");
    }

    #[test]
    fn a_pool_keepalived_cannot_run_is_left_out_and_said() {
        let me = |priority| peer("a", priority, Some("10.0.0.1"));
        let b = || peer("b", 140, Some("10.0.0.2"));
        let plan = [
            pool("good", 7, &["10.0.0.100"], vec![me(150), b()]),
            pool("zero-id", 0, &["10.0.0.101"], vec![me(150), b()]),
            pool("no-priority", 9, &["10.0.0.102"], vec![me(0), b()]),
            pool("mixed", 10, &["10.0.0.103", "fd00::1"], vec![me(150), b()]),
            pool("loopback", 11, &["127.0.0.5"], vec![me(150), b()]),
            pool("same-id", 7, &["10.0.0.104"], vec![me(150), b()]),
            pool("taken-vip", 12, &["10.0.0.100"], vec![me(150), b()]),
            pool("not-mine", 13, &["10.0.0.105"], vec![b()]),
            pool("v6", 14, &["fd00::100"], vec![me(150), b()]),
            pool("no-vips", 15, &[], vec![me(150), b()]),
        ];
        let out = rendered(&plan);
        assert_eq!(
            out.instances.into_iter().collect::<Vec<_>>(),
            [("fedingress_good".to_owned(), "good".to_owned())]
        );
        assert_eq!(
            out.addresses,
            ["10.0.0.100/24".parse::<VirtualAddress>().unwrap()]
        );
        let errors = out.errors.join("\n");
        for expected in [
            "zero-id: virtual router id 0",
            "no-priority: this member's priority 0 is outside 1-254",
            "mixed: VIP fd00::1: one VRRP instance carries one address family",
            "loopback: VIP 127.0.0.5 is a loopback address",
            "same-id: virtual router id 7 is another pool's",
            "taken-vip: VIP 10.0.0.100 is another pool's",
            "not-mine: this member (\"a\") is not among its members",
            "v6: this member's address 10.0.0.1 is not of its VIPs' family",
        ] {
            assert!(errors.contains(expected), "{expected} not in:\n{errors}");
        }
        assert_eq!(out.errors.len(), 8, "{errors}");
        assert_eq!(out.notes, ["no-vips: no VIPs, no VRRP instance"]);
    }

    #[test]
    fn peers_without_an_address_are_left_out() {
        let plan = [pool(
            "gold",
            7,
            &["10.0.0.100"],
            vec![
                peer("a", 150, None),
                peer("b", 140, Some("10.0.0.2")),
                peer("c", 130, None),
                peer("d", 120, Some("fd00::4")),
                peer("e", 110, Some("10.0.0.2")),
            ],
        )];
        let out = rendered(&plan);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert!(
            out.text.contains(
                "    unicast_src_ip 10.0.0.1\n    unicast_peer {\n        10.0.0.2\n    }\n"
            ),
            "{}",
            out.text
        );
        assert_eq!(
            out.notes,
            [
                "gold: peer c has no address (member.address): left out of unicast_peer",
                "gold: peer d's address fd00::4 is not of the VIPs' family: left out of unicast_peer",
            ]
        );
    }

    #[test]
    fn no_pool_renders_no_instance() {
        let out = rendered(&[]);
        assert!(out.text.contains("vrrp_script fedingress_ready {"));
        assert!(!out.text.contains("vrrp_instance"), "{}", out.text);
        assert!(out.instances.is_empty() && out.errors.is_empty() && out.notes.is_empty());
    }
}
