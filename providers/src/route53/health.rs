//! Route53 health checks of cluster endpoints: one per distinct [`HealthEndpoint`], so
//! that Route53 keeps steering by itself when the hub is down.
//!
//! # Life cycle (copied into docs/providers.md)
//!
//! - **Created** before the record sets that refer to them (each record's
//!   `HealthCheckId`), deleted only after no record set refers to them any more (the
//!   record changes of a sync come first; a health check still referred to by a record
//!   set whose change failed is kept for the next sync).
//! - **Only for record sets that are written**: a (name, type) in conflict (someone
//!   else's record sets) is never written, so its endpoints get no check, and a name that
//!   becomes a conflict loses its checks like any other unused ones (issue 23, item 3).
//! - **Ownership**: a health check is this federation's when its `CallerReference`
//!   starts with `fedingress-<hash of the owner id>-`. Route53 cannot filter health
//!   checks by tag, so the prefix is what makes listing cheap (one paged
//!   `ListHealthChecks`, no tag calls); a health check without that prefix is never
//!   updated or deleted. Each one also carries the tags `Name` (what it probes, for the
//!   console), `fedingress:owner` and `fedingress:endpoint`, for people.
//! - **Settings**: TCP (HTTP/HTTPS where the endpoint says so) to the IP, or to the host
//!   name when the endpoint has no IP, with `RequestInterval` and `FailureThreshold`
//!   from `healthChecks`. The failure threshold is updated in place; the request
//!   interval (and the type) cannot be changed in Route53, so a changed interval creates a
//!   new health check, moves the records to it and deletes the old one.
//! - **Addresses Route53 cannot probe** (private, loopback, link-local, CGNAT): no
//!   health check; the record goes out without one and the report says so. A health
//!   check Route53 refuses likewise (the report carries its message). One that failed
//!   for a passing reason (throttled, unreachable, after the retries) keeps the DNS name
//!   as the zone holds it until the next sync, rather than publishing it unguarded.
//! - **Disabled** (`healthChecks.enabled: false`): no record refers to a health check,
//!   and the owned ones are deleted. Route53 then treats every record as healthy, so
//!   failover and the skipping of unhealthy clusters only happen through the hub's own
//!   syncs (it leaves unhealthy clusters out of the desired record sets).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::publish::{HealthEndpoint, HealthProtocol, Owner};
use aws_sdk_route53::types::{HealthCheck, HealthCheckConfig, HealthCheckType, Tag};

/// The tag that names the owning federation.
pub const OWNER_TAG: &str = "fedingress:owner";
/// The tag that names the probed endpoint.
pub const ENDPOINT_TAG: &str = "fedingress:endpoint";

/// A health check this federation wants: an endpoint with the configured settings.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Wanted {
    pub endpoint: HealthEndpoint,
    pub request_interval: i32,
    pub failure_threshold: i32,
}

/// An owned health check as Route53 holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owned {
    pub id: String,
    /// [`endpoint_key`] of what it probes, read from its configuration.
    pub key: String,
    pub request_interval: i32,
    pub failure_threshold: i32,
}

/// What a health check probes, in words; equal for a [`HealthEndpoint`] and the
/// configuration Route53 holds for it: `tcp 192.0.2.1:443`,
/// `http lb.example.com:80/healthz`, `https 192.0.2.1:443/ready host=shop.example.com`.
pub fn endpoint_key(e: &HealthEndpoint) -> String {
    let (ip, fqdn) = match (e.ip, &e.hostname) {
        (Some(ip), _) => (Some(ip.to_string()), e.host.clone()),
        (None, Some(h)) => (None, Some(h.clone())),
        (None, None) => (None, e.host.clone()),
    };
    key(
        protocol_word(e.protocol),
        ip.as_deref(),
        fqdn.as_deref(),
        e.port,
        e.path.as_deref(),
    )
}

fn protocol_word(p: HealthProtocol) -> &'static str {
    match p {
        HealthProtocol::Tcp => "tcp",
        HealthProtocol::Http => "http",
        HealthProtocol::Https => "https",
    }
}

fn key(
    protocol: &str,
    ip: Option<&str>,
    fqdn: Option<&str>,
    port: u16,
    path: Option<&str>,
) -> String {
    let fqdn = fqdn.map(|h| h.trim_end_matches('.').to_ascii_lowercase());
    let path = if protocol == "tcp" { None } else { path };
    let mut k = match (ip, &fqdn) {
        (Some(ip), _) => format!("{protocol} {ip}:{port}"),
        (None, Some(h)) => format!("{protocol} {h}:{port}"),
        (None, None) => format!("{protocol} ?:{port}"),
    };
    if let Some(p) = path.filter(|p| !p.is_empty()) {
        k.push_str(p);
    }
    if let (Some(_), Some(h)) = (ip, &fqdn) {
        k.push_str(&format!(" host={h}"));
    }
    k
}

/// [`endpoint_key`] of the configuration Route53 holds.
pub fn config_key(c: &HealthCheckConfig) -> String {
    let protocol = match c.r#type() {
        HealthCheckType::Tcp => "tcp",
        HealthCheckType::Http => "http",
        HealthCheckType::Https => "https",
        other => other.as_str(),
    };
    let port = c.port().and_then(|p| u16::try_from(p).ok()).unwrap_or(0);
    key(
        &protocol.to_ascii_lowercase(),
        c.ip_address(),
        c.fully_qualified_domain_name(),
        port,
        c.resource_path(),
    )
}

/// Whether Route53 can probe `e`: not an address that is private, loopback, link-local,
/// unspecified, multicast or shared (CGNAT), which Route53 refuses (and could not reach).
/// A host name is left to Route53.
pub fn probeable(e: &HealthEndpoint) -> bool {
    match e.ip {
        None => true,
        Some(IpAddr::V4(ip)) => {
            let shared = ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64;
            !(ip.is_private()
                || ip.is_loopback()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_multicast()
                || ip.is_broadcast()
                || shared)
        }
        Some(IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            !(ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// The Route53 configuration of `w`.
pub fn config(w: &Wanted) -> Result<HealthCheckConfig, String> {
    let e = &w.endpoint;
    let type_ = match e.protocol {
        HealthProtocol::Tcp => HealthCheckType::Tcp,
        HealthProtocol::Http => HealthCheckType::Http,
        HealthProtocol::Https => HealthCheckType::Https,
    };
    let fqdn = match (e.ip, &e.hostname) {
        (Some(_), _) => e.host.clone(),
        (None, Some(h)) => Some(h.trim_end_matches('.').to_ascii_lowercase()),
        (None, None) => e.host.clone(),
    };
    let mut b = HealthCheckConfig::builder()
        .r#type(type_)
        .port(i32::from(e.port))
        .request_interval(w.request_interval)
        .failure_threshold(w.failure_threshold)
        .set_ip_address(e.ip.map(|ip| ip.to_string()))
        .set_fully_qualified_domain_name(fqdn);
    if e.protocol != HealthProtocol::Tcp {
        b = b.set_resource_path(e.path.clone());
    }
    if e.protocol == HealthProtocol::Https {
        b = b.enable_sni(true);
    }
    b.build()
        .map_err(|err| format!("health check of {}: {err}", endpoint_key(&w.endpoint)))
}

/// 64-bit FNV-1a, hex: stable across builds and platforms (unlike `DefaultHasher`).
fn fnv64(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The `CallerReference` prefix of `owner`'s health checks.
pub fn caller_reference_prefix(owner: &Owner) -> String {
    format!("fedingress-{}-", fnv64(&owner.id))
}

/// A new `CallerReference` for `w` (at most 64 characters, as Route53 requires). The
/// time makes it unique: Route53 refuses a reference reused after a delete.
pub fn caller_reference(owner: &Owner, w: &Wanted, unix_millis: u128) -> String {
    let what = format!("{}|{}", endpoint_key(&w.endpoint), w.request_interval);
    format!(
        "{}{}-{unix_millis}",
        caller_reference_prefix(owner),
        &fnv64(&what)[..8]
    )
}

/// The tags of a new health check.
pub fn tags(owner: &Owner, w: &Wanted) -> Vec<Tag> {
    let key = endpoint_key(&w.endpoint);
    [
        ("Name", format!("fedingress {}: {key}", owner.id)),
        (OWNER_TAG, owner.id.clone()),
        (ENDPOINT_TAG, key),
    ]
    .into_iter()
    .map(|(k, v)| Tag::builder().key(k).value(v).build())
    .collect()
}

/// `owner`'s health checks among `all`.
pub fn owned(owner: &Owner, all: &[HealthCheck]) -> Vec<Owned> {
    let prefix = caller_reference_prefix(owner);
    all.iter()
        .filter(|h| h.caller_reference().starts_with(&prefix))
        .filter_map(|h| {
            let c = h.health_check_config()?;
            Some(Owned {
                id: h.id().to_string(),
                key: config_key(c),
                request_interval: c.request_interval().unwrap_or(30),
                failure_threshold: c.failure_threshold().unwrap_or(3),
            })
        })
        .collect()
}

/// What to do with health checks in one sync.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthPlan {
    /// Endpoints that need a new health check.
    pub create: Vec<Wanted>,
    /// Owned health checks whose failure threshold changes (id, wanted).
    pub update: Vec<(String, Wanted)>,
    /// The health check of each wanted endpoint that exists and is kept.
    pub existing: BTreeMap<HealthEndpoint, String>,
    /// Owned health checks no wanted endpoint uses: deleted after the record changes,
    /// unless a record set still refers to them.
    pub unused: BTreeSet<String>,
}

/// Matches `wanted` with `owned`: an owned check of the same endpoint and interval is
/// kept (and its threshold updated if it differs); anything else is created; owned
/// checks left over are unused.
pub fn plan(wanted: &BTreeSet<Wanted>, owned: &[Owned]) -> HealthPlan {
    let mut p = HealthPlan::default();
    let mut taken = BTreeSet::new();
    for w in wanted {
        let key = endpoint_key(&w.endpoint);
        let found = owned.iter().find(|o| {
            !taken.contains(&o.id) && o.key == key && o.request_interval == w.request_interval
        });
        match found {
            Some(o) => {
                taken.insert(o.id.clone());
                if o.failure_threshold != w.failure_threshold {
                    p.update.push((o.id.clone(), w.clone()));
                }
                p.existing.insert(w.endpoint.clone(), o.id.clone());
            }
            None => p.create.push(w.clone()),
        }
    }
    p.unused = owned
        .iter()
        .filter(|o| !taken.contains(&o.id))
        .map(|o| o.id.clone())
        .collect();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(ip: &str, port: u16) -> HealthEndpoint {
        HealthEndpoint {
            ip: Some(ip.parse().unwrap()),
            hostname: None,
            port,
            protocol: HealthProtocol::Tcp,
            path: None,
            host: None,
        }
    }

    #[test]
    fn keys_of_endpoints_and_configs_agree() {
        let mut https = tcp("192.0.2.1", 443);
        https.protocol = HealthProtocol::Https;
        https.path = Some("/ready".into());
        https.host = Some("Shop.Example.com".into());
        let by_name = HealthEndpoint {
            ip: None,
            hostname: Some("lb.example.net.".into()),
            ..tcp("192.0.2.1", 80)
        };
        for e in [tcp("192.0.2.1", 443), https, by_name] {
            let w = Wanted {
                endpoint: e.clone(),
                request_interval: 30,
                failure_threshold: 3,
            };
            assert_eq!(endpoint_key(&e), config_key(&config(&w).unwrap()), "{e:?}");
        }
        assert_eq!(endpoint_key(&tcp("192.0.2.1", 443)), "tcp 192.0.2.1:443");
    }

    #[test]
    fn private_and_loopback_addresses_are_not_probed() {
        assert!(probeable(&tcp("192.0.2.1", 443)));
        assert!(probeable(&tcp("2001:db8::1", 443)));
        for ip in [
            "10.1.2.3",
            "127.0.0.11",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.1.1",
            "fd00::1",
            "::1",
        ] {
            assert!(!probeable(&tcp(ip, 443)), "{ip}");
        }
    }

    #[test]
    fn a_changed_interval_is_a_new_check_and_a_changed_threshold_an_update() {
        let owner = Owner { id: "prod".into() };
        let w = |interval, threshold| Wanted {
            endpoint: tcp("192.0.2.1", 443),
            request_interval: interval,
            failure_threshold: threshold,
        };
        let owned = vec![Owned {
            id: "hc1".into(),
            key: "tcp 192.0.2.1:443".into(),
            request_interval: 30,
            failure_threshold: 3,
        }];
        let same = plan(&[w(30, 3)].into(), &owned);
        assert!(same.create.is_empty() && same.update.is_empty() && same.unused.is_empty());
        let threshold = plan(&[w(30, 2)].into(), &owned);
        assert_eq!(threshold.update.len(), 1);
        let interval = plan(&[w(10, 3)].into(), &owned);
        assert_eq!(interval.create, vec![w(10, 3)]);
        assert_eq!(interval.unused, ["hc1".to_string()].into());
        let r = caller_reference(&owner, &w(10, 3), 1_790_000_000_000);
        assert!(
            r.len() <= 64 && r.starts_with(&caller_reference_prefix(&owner)),
            "{r}"
        );
    }
}
