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
//!   (`/proc/sys/kernel/hostname`) when it loads the file ([`crate::Config::load`]); a
//!   host name that is not a DNS-1123 label (upper case, dots, underscores) is refused
//!   rather than rewritten, and the error says to set `member.name`.
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

/// The member name a host name gives: the host name itself, trimmed, when it is a
/// DNS-1123 label.
///
/// # Errors
/// Not a DNS-1123 label: a message naming `member.name` and saying to set it.
pub fn name_from_hostname(text: &str) -> Result<String, String> {
    let host = text.trim();
    let problems = names::dns1123_label(host);
    if problems.is_empty() {
        return Ok(host.to_owned());
    }
    Err(format!(
        "member.name: not set, and the host name {host:?} is not a DNS-1123 label ({}): set member.name",
        problems.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_name_is_the_member_name_only_when_it_is_a_label() {
        assert_eq!(name_from_hostname("web-1\n").unwrap(), "web-1");
        for bad in ["Web-1", "web-1.example.com", "web_1", ""] {
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
