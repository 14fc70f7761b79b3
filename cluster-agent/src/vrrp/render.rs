//! keepalived's config from the agent's `vrrp:` section: pure text, no I/O, the same
//! at every render of the same input (a golden test holds it).
//!
//! What is rendered and why:
//! - `global_defs`: `router_id`, `vrrp_version 3`, and `enable_script_security` with
//!   `script_user root`: keepalived then runs the track script as root only when the
//!   program and every directory above it are writable by root alone (else
//!   `keepalived --config-test` fails, which the agent turns into exit 64).
//! - `vrrp_script fedingress_ready`: `<this program> ready --admin <admin>
//!   --timeout-ms <half the interval>` every `trackIntervalMs` (whole seconds), killed
//!   after the interval, `fall`/`rise` from the config.
//! - `vrrp_instance fedingress_<id>`: `state BACKUP` on every host (the priorities
//!   elect the master; no host claims the address before it has heard the others),
//!   `advert_int` in seconds with centisecond resolution, `nopreempt` or
//!   `preempt_delay`, `unicast_peer` when given, `virtual_ipaddress` with each address's
//!   prefix length, and the track script without `weight`, so a failing check puts the
//!   instance in FAULT whatever the priorities.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use crate::config::VrrpConfig;

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
pub fn ready_command(program: &Path, admin: SocketAddr, vrrp: &VrrpConfig) -> String {
    format!(
        "{} ready --admin {} --timeout-ms {}",
        program.display(),
        check_address(admin),
        vrrp.track_interval_ms / 2
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
    let shown = program.display().to_string();
    if !program.is_absolute()
        || shown.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'')
    {
        return Err(RenderError::Program(shown));
    }
    if admin.port() == 0 {
        return Err(RenderError::AdminPort(admin));
    }
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = write!(
        text,
        "\
# Rendered by cluster-agent from the vrrp: section of its config (cluster {cluster}).
# Do not edit: `cluster-agent keepalived render -c <config>` renders it again.

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

vrrp_instance {instance} {{
    state BACKUP
    interface {interface}
    virtual_router_id {id}
    priority {priority}
    advert_int {advert}
",
        router_id = vrrp.router_id(cluster),
        script = ready_command(program, admin, vrrp),
        interval = vrrp.track_interval_ms / 1000,
        fall = vrrp.track_fall,
        rise = vrrp.track_rise,
        instance = instance_name(vrrp),
        interface = vrrp.interface,
        id = vrrp.virtual_router_id,
        priority = vrrp.priority,
        advert = seconds(u64::from(vrrp.advert_interval_ms)),
    );
    if vrrp.nopreempt {
        text.push_str("    nopreempt\n");
    } else if vrrp.preempt_delay_ms > 0 {
        let _ = writeln!(text, "    preempt_delay {}", seconds(vrrp.preempt_delay_ms));
    }
    if !vrrp.unicast_peers.is_empty() {
        text.push_str("    unicast_peer {\n");
        for peer in &vrrp.unicast_peers {
            let _ = writeln!(text, "        {peer}");
        }
        text.push_str("    }\n");
    }
    text.push_str("    virtual_ipaddress {\n");
    for address in &vrrp.virtual_addresses {
        let _ = writeln!(text, "        {address}");
    }
    let _ = write!(
        text,
        "    }}\n    track_script {{\n        {SCRIPT_NAME}\n    }}\n}}\n"
    );
    Ok(text)
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
}
