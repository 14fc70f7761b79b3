//! `member:` of the agent config: who this agent is among the agents of its cluster
//! (issue 24, ingress pools). A cluster has members, one agent each; IngressPools select
//! members by their labels, and a pool's members run VRRP with each other on their
//! addresses.
//!
//! ```yaml
//! member:
//!   name: web-1                              # default: the host name
//!   labels: {pool.example.com/tier: edge, zone: a}
//!   address: 192.0.2.11                      # optional
//! ```
//!
//! - `name` is a DNS-1123 label. Without it the agent takes the host name
//!   (`/proc/sys/kernel/hostname`) when it loads the file ([`crate::Config::load`]), as
//!   `hostname -s` shows it and made a label: its first dot-separated part, lower case,
//!   any other character than a letter, digit or `-` turned into `-`, no `-` at either
//!   end, 63 characters at most (`IP-10-0-0-1.ec2.internal` → `ip-10-0-0-1`,
//!   `web_1` → `web-1`). So an agent upgraded from before members, on any host, starts
//!   with no new setting (an existing single-agent cluster keeps working). A host name
//!   with nothing left (`___`) is refused, and the error says to set `member.name`.
//! - `labels` are Kubernetes labels: keys are qualified names (`prefix/name`), values
//!   label values.
//! - `address` is the member's real IP address in its L2 domain: its pool peers send
//!   VRRP to it (unicast). Optional; a member without one takes part in no pool's VRRP.
//!
//! The agent sends all three in its Hello, and the name in `Join` and `Renew`: its
//! client certificate names the member, and a session on that certificate speaks only as
//! that member.

use std::collections::BTreeMap;
use std::net::IpAddr;

use fedingress_api::names;
use serde::Deserialize;

/// Where the kernel keeps the host name.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// The `member:` section (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MemberConfig {
    /// The member's name (a DNS-1123 label); `None` until [`crate::Config::load`] fills
    /// in the host name.
    #[serde(default)]
    pub name: Option<String>,
    /// The member's labels, which IngressPools' `memberSelector` matches.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The member's real address in its L2 domain, where pool peers send VRRP.
    #[serde(default)]
    pub address: Option<IpAddr>,
}

impl MemberConfig {
    /// The member name, or `""` when none is set (a config from
    /// [`crate::Config::from_yaml`] that was not loaded from a file: the hub then names
    /// the member after the cluster, as it does for agents from before members).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or_default()
    }

    /// Fills in the host name when no name is given.
    ///
    /// # Errors
    /// The host name cannot be read, or is not a DNS-1123 label: the message names
    /// `member.name` and says to set it.
    pub fn default_name(&mut self) -> Result<(), String> {
        if self.name.is_some() {
            return Ok(());
        }
        let text = std::fs::read_to_string(HOSTNAME_FILE).map_err(|e| {
            format!("member.name: not set, and the host name cannot be read from {HOSTNAME_FILE} ({e}): set member.name")
        })?;
        self.name = Some(name_from_hostname(&text)?);
        Ok(())
    }

    /// Every problem of the section, each naming its field.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(name) = &self.name {
            for message in names::dns1123_label(name) {
                problems.push(format!("member.name: {message}"));
            }
        }
        for (key, value) in &self.labels {
            for message in names::qualified_name(key) {
                problems.push(format!("member.labels: key {key:?}: {message}"));
            }
            for message in names::label_value(value) {
                problems.push(format!("member.labels.{key}: {message}"));
            }
        }
        if let Some(address) = self.address
            && (address.is_unspecified() || address.is_multicast())
        {
            problems.push(format!(
                "member.address: {address} is not a host's address (unspecified or multicast)"
            ));
        }
        problems
    }
}

/// The member name a host name gives (see the module docs): its first part, made a
/// DNS-1123 label.
///
/// # Errors
/// Nothing of a label is left: a message naming `member.name` and saying to set it.
pub fn name_from_hostname(text: &str) -> Result<String, String> {
    let host = text.trim();
    let short = host.split('.').next().unwrap_or_default();
    let mapped: String = short
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect();
    let mut name = mapped.trim_matches('-').to_owned();
    name.truncate(names::DNS1123_LABEL_MAX_LEN);
    let name = name.trim_end_matches('-').to_owned();
    let problems = names::dns1123_label(&name);
    if problems.is_empty() {
        return Ok(name);
    }
    Err(format!(
        "member.name: not set, and the host name {host:?} gives no DNS-1123 label: set member.name"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_name_is_made_the_member_name() {
        for (host, name) in [
            ("web-1\n", "web-1"),
            ("Web-1", "web-1"),
            ("web-1.example.com", "web-1"),
            ("IP-10-0-0-1.ec2.internal", "ip-10-0-0-1"),
            ("web_1", "web-1"),
            ("-edge-", "edge"),
        ] {
            assert_eq!(name_from_hostname(host).unwrap(), name, "{host}");
        }
        let long = "a".repeat(70);
        assert_eq!(name_from_hostname(&long).unwrap().len(), 63);
        for bad in ["", "___", ".example.com"] {
            let error = name_from_hostname(bad).unwrap_err();
            assert!(
                error.starts_with("member.name: ") && error.ends_with("set member.name"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_given_name_is_kept() {
        let mut member = MemberConfig {
            name: Some("edge-a".into()),
            ..MemberConfig::default()
        };
        member.default_name().unwrap();
        assert_eq!(member.name(), "edge-a");
    }

    #[test]
    fn problems_name_their_fields() {
        let member = MemberConfig {
            name: Some("Edge_A".into()),
            labels: BTreeMap::from([
                ("zone".into(), "a".into()),
                ("bad key!".into(), "x".into()),
                ("tier".into(), "not a value".into()),
            ]),
            address: Some("0.0.0.0".parse().unwrap()),
        };
        let problems = member.problems();
        for field in [
            "member.name: ",
            "member.labels: key \"bad key!\"",
            "member.labels.tier: ",
            "member.address: 0.0.0.0",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(field)),
                "{field} not in {problems:?}"
            );
        }
    }
}
