//! Routed ingresses → the [`PolicyRecordSet`]s every provider should hold (pure).
//!
//! The input is the same [`RoutedIngress`] list the embedded server builds its
//! [`Snapshot`](fedingress_dns::zone::Snapshot) from, so a provider publishes what the hub
//! answers, steered by the cloud's own policy instead of by the hub per query.
//!
//! # Strategy → policy
//!
//! | strategy   | [`Policy`]     | targets                                                  |
//! |------------|----------------|----------------------------------------------------------|
//! | RoundRobin | `Multivalue`   | every eligible cluster                                   |
//! | Weighted   | `Weighted`     | eligible clusters with a weight above 0 ([`Target::weight`]) |
//! | Failover   | `Failover`     | eligible clusters of `failoverOrder`, [`Target::tier`] = the tier's index |
//! | Geo        | `Geo`          | every eligible cluster, nearest answers                  |
//! | Overflow   | `Geo`          | as Geo: the load spill cannot be expressed by a cloud    |
//! | Latency    | `Latency`      | every eligible cluster                                   |
//! | Anycast    | `Simple`       | one target, cluster `""`, with the anycast addresses     |
//!
//! Overflow's spill (a cluster past `overflowThreshold` of its capacity sends new
//! clients to the next nearest) depends on load reports no cloud DNS policy can read, so
//! a provider steers Overflow ingresses as Geo: nearest healthy cluster.
//!
//! The Failover *memory* (failback delay) is the hub's: a cloud fails over and back on
//! its own health checks, so every eligible tier is published and the cloud picks.
//!
//! # Eligibility and failing open
//!
//! Targets are the clusters [`routing`](fedingress_dns::routing) calls eligible: healthy, not
//! cordoned, with an address. When the strategy finds none (nobody eligible, every
//! eligible cluster at weight 0, no eligible cluster in `failoverOrder`, no usable
//! anycast address or nobody to announce it), `whenAllUnhealthy` applies as in
//! routing: `ServeAll` publishes every non-cordoned placed cluster with an address as
//! one `Simple` record set (fail open, what the embedded server answers then), `NoData`
//! publishes nothing (the record set must not exist).
//!
//! # Record types and host names
//!
//! An `A` record set carries the targets' IPv4 addresses, an `AAAA` one their IPv6
//! addresses; a record set without targets is left out. A cluster that reports only
//! load balancer host names:
//!
//! - when no target of the ingress has an IP, the ingress is one `CNAME` record set, a
//!   target per cluster with [`Target::hostname`] (its first host name) and no values
//!   (a `Simple` one, failing open, keeps only the first cluster's: a CNAME holds one
//!   name);
//! - otherwise it joins the `A` record set with its host name and no values: a provider
//!   aliases it when it can (a Route53 alias to an AWS load balancer), else leaves it out
//!   and says so in the sync report.
//!
//! # Health checks
//!
//! Each cluster target carries a TCP [`HealthEndpoint`] on the ingress's
//! [`RoutedIngress::health_port`] (its first IP of the record set's family, else its
//! host name), so that a cloud keeps steering when the hub is down. An ingress with only
//! UDP rules has no health port and no health endpoints.
//!
//! # Not published
//!
//! SRV services (`_<name>._tcp|_udp.<dnsName>`) and their per-cluster target names stay
//! on the embedded server: cloud routing policies steer address records, and an SRV
//! answer that lists every cluster would bypass them. Names at or under a delegated
//! zone's apex are not published either: the parent holds the delegation to the
//! embedded server, which answers them; records below a zone cut would never be served.
//!
//! # Delegation
//!
//! For each delegated [`ZoneConfig`], an `NS` record set at the apex (`Simple`, values =
//! the nameserver names with a trailing dot) and glue `A`/`AAAA` record sets for its
//! nameservers at or under the apex (their configured addresses). Their owner is
//! `zone/<apex>`, their DNS name the apex, their TTL the zone's.

use std::collections::BTreeSet;
use std::net::IpAddr;

use fedingress_api::ingress::{RecordType, StrategyType, WhenAllUnhealthy};

use super::{Desired, HealthEndpoint, HealthProtocol, Policy, PolicyRecordSet, Target};
use fedingress_dns::zone::ZoneConfig;
use fedingress_dns::{ClusterView, Location, RoutedIngress};

/// The record sets of one routed ingress, sorted by type (`A`, `AAAA` or `CNAME`; empty
/// when nothing is to be published, e.g. `whenAllUnhealthy: NoData` with no eligible
/// cluster).
pub fn record_sets(routed: &RoutedIngress) -> Vec<PolicyRecordSet> {
    let Some(choice) = choose(routed) else {
        return Vec::new();
    };
    let ttl = u32::try_from(routed.traffic.ttl).unwrap_or(0);
    let set = |type_: RecordType, targets: Vec<Target>| PolicyRecordSet {
        name: routed.dns_name.clone(),
        type_,
        ttl,
        owner_ref: routed.ingress.clone(),
        dns_name: routed.dns_name.clone(),
        policy: choice.policy,
        targets,
    };
    let mut out = Vec::new();
    if let Some(addresses) = &choice.anycast {
        for (type_, v4) in [(RecordType::A, true), (RecordType::Aaaa, false)] {
            let values: Vec<String> = addresses
                .iter()
                .filter(|ip| ip.is_ipv4() == v4)
                .map(ToString::to_string)
                .collect();
            if !values.is_empty() {
                out.push(set(
                    type_,
                    vec![Target {
                        cluster: String::new(),
                        values,
                        hostname: None,
                        weight: 1,
                        tier: 0,
                        location: Location {
                            region: String::new(),
                            latitude: 0.0,
                            longitude: 0.0,
                        },
                        cloud: Default::default(),
                        health: None,
                    }],
                ));
            }
        }
        return out;
    }
    let any_ip = choice.clusters.iter().any(|c| !c.view.ips.is_empty());
    if !any_ip {
        let targets = choice
            .clusters
            .iter()
            .filter_map(|c| {
                let hostname = c.view.hostnames.first()?;
                Some(target(routed, c, Vec::new(), Some(hostname), None))
            })
            .collect::<Vec<_>>();
        // A simple (fail-open) CNAME holds one host name: the first cluster's.
        let keep = if choice.policy == Policy::Simple {
            1
        } else {
            targets.len()
        };
        let targets: Vec<Target> = targets.into_iter().take(keep).collect();
        if !targets.is_empty() {
            out.push(set(RecordType::Cname, targets));
        }
        return out;
    }
    for (type_, v4) in [(RecordType::A, true), (RecordType::Aaaa, false)] {
        let targets: Vec<Target> = choice
            .clusters
            .iter()
            .filter_map(|c| {
                if c.view.ips.is_empty() {
                    // Host name only: it joins the A record set, to be aliased.
                    let hostname = c.view.hostnames.first().filter(|_| v4)?;
                    return Some(target(routed, c, Vec::new(), Some(hostname), None));
                }
                let ips: Vec<IpAddr> = c
                    .view
                    .ips
                    .iter()
                    .copied()
                    .filter(|ip| ip.is_ipv4() == v4)
                    .collect();
                let first = *ips.first()?;
                let values = ips.iter().map(ToString::to_string).collect();
                Some(target(routed, c, values, None, Some(first)))
            })
            .collect();
        if !targets.is_empty() {
            out.push(set(type_, targets));
        }
    }
    out
}

/// Everything every provider should hold: the record sets of `routed` (except names at
/// or under a delegated apex) and the delegation records of `delegated`, sorted by
/// (name, type).
pub fn desired<'a>(
    serial: u32,
    routed: impl IntoIterator<Item = &'a RoutedIngress>,
    delegated: &[ZoneConfig],
) -> Desired {
    let apexes: Vec<String> = delegated.iter().map(|z| normalise(&z.name)).collect();
    let mut record_sets: Vec<PolicyRecordSet> = routed
        .into_iter()
        .filter(|r| !apexes.iter().any(|apex| at_or_under(&r.dns_name, apex)))
        .flat_map(record_sets)
        .collect();
    for zone in delegated {
        record_sets.extend(delegation(zone));
    }
    record_sets.sort_by(|a, b| a.name.cmp(&b.name).then(a.type_.cmp(&b.type_)));
    Desired {
        serial,
        record_sets,
    }
}

/// The NS record set at `zone`'s apex and the glue of its in-zone nameservers.
fn delegation(zone: &ZoneConfig) -> Vec<PolicyRecordSet> {
    let apex = normalise(&zone.name);
    let owner_ref = format!("zone/{apex}");
    let simple = |name: String, type_: RecordType, values: Vec<String>| PolicyRecordSet {
        name,
        type_,
        ttl: zone.ttl,
        owner_ref: owner_ref.clone(),
        dns_name: apex.clone(),
        policy: Policy::Simple,
        targets: vec![Target {
            cluster: String::new(),
            values,
            hostname: None,
            weight: 1,
            tier: 0,
            location: Location {
                region: String::new(),
                latitude: 0.0,
                longitude: 0.0,
            },
            cloud: Default::default(),
            health: None,
        }],
    };
    let mut out = Vec::new();
    let names: BTreeSet<String> = zone
        .nameservers
        .iter()
        .map(|ns| format!("{}.", normalise(&ns.name)))
        .collect();
    if !names.is_empty() {
        out.push(simple(
            apex.clone(),
            RecordType::Ns,
            names.into_iter().collect(),
        ));
    }
    for ns in &zone.nameservers {
        let name = normalise(&ns.name);
        if !at_or_under(&name, &apex) {
            continue;
        }
        for (type_, v4) in [(RecordType::A, true), (RecordType::Aaaa, false)] {
            let values: BTreeSet<IpAddr> = ns
                .addresses
                .iter()
                .copied()
                .filter(|ip| ip.is_ipv4() == v4)
                .collect();
            if !values.is_empty() {
                out.push(simple(
                    name.clone(),
                    type_,
                    values.iter().map(ToString::to_string).collect(),
                ));
            }
        }
    }
    out
}

/// Lower case, without the trailing dot.
fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `name` is `apex` or below it (both normalised).
fn at_or_under(name: &str, apex: &str) -> bool {
    name == apex
        || (name.len() > apex.len()
            && name.ends_with(apex)
            && name.as_bytes()[name.len() - apex.len() - 1] == b'.')
}

/// One chosen cluster and its [`Target`] fields that depend on the strategy.
struct Chosen<'a> {
    view: &'a ClusterView,
    weight: u32,
    tier: u32,
}

fn each(view: &ClusterView) -> Chosen<'_> {
    Chosen {
        view,
        weight: 1,
        tier: 0,
    }
}

/// What one ingress publishes: a policy over clusters, or anycast addresses.
struct Choice<'a> {
    policy: Policy,
    clusters: Vec<Chosen<'a>>,
    anycast: Option<Vec<IpAddr>>,
}

/// The same eligibility as routing: healthy, not cordoned, with an address (Anycast
/// needs none of its own).
fn eligible(cluster: &ClusterView, needs_address: bool) -> bool {
    cluster.healthy
        && !cluster.cordoned
        && (!needs_address || !cluster.ips.is_empty() || !cluster.hostnames.is_empty())
}

/// The policy and its targets, or `None` when nothing is published.
fn choose(routed: &RoutedIngress) -> Option<Choice<'_>> {
    let strategy = &routed.traffic.strategy;
    let mut sorted: Vec<&ClusterView> = routed.clusters.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let plain = |c: &&ClusterView| eligible(c, true);

    let picked: Option<Choice<'_>> = match strategy.type_ {
        StrategyType::RoundRobin
        | StrategyType::Geo
        | StrategyType::Overflow
        | StrategyType::Latency => {
            let policy = match strategy.type_ {
                StrategyType::RoundRobin => Policy::Multivalue,
                StrategyType::Latency => Policy::Latency,
                _ => Policy::Geo,
            };
            let clusters: Vec<Chosen<'_>> =
                sorted.iter().copied().filter(plain).map(each).collect();
            (!clusters.is_empty()).then_some(Choice {
                policy,
                clusters,
                anycast: None,
            })
        }
        StrategyType::Weighted => {
            let weights = strategy.weights.clone().unwrap_or_default();
            let clusters: Vec<Chosen<'_>> = sorted
                .iter()
                .copied()
                .filter(plain)
                .filter_map(|view| {
                    let weight = u32::try_from(*weights.get(&view.name)?).ok()?;
                    (weight > 0).then_some(Chosen {
                        view,
                        weight,
                        tier: 0,
                    })
                })
                .collect();
            (!clusters.is_empty()).then_some(Choice {
                policy: Policy::Weighted,
                clusters,
                anycast: None,
            })
        }
        StrategyType::Failover => {
            let tier_of = |name: &str| -> Option<u32> {
                match &strategy.failover_order {
                    Some(order) => order
                        .iter()
                        .position(|tier| tier.iter().any(|n| n == name))
                        .and_then(|t| u32::try_from(t).ok()),
                    None => Some(0),
                }
            };
            let clusters: Vec<Chosen<'_>> = sorted
                .iter()
                .copied()
                .filter(plain)
                .filter_map(|view| {
                    Some(Chosen {
                        view,
                        weight: 1,
                        tier: tier_of(&view.name)?,
                    })
                })
                .collect();
            (!clusters.is_empty()).then_some(Choice {
                policy: Policy::Failover,
                clusters,
                anycast: None,
            })
        }
        StrategyType::Anycast => {
            // The addresses some cluster announces, as the embedded server answers.
            let addresses =
                fedingress_dns::routing::anycast_answer(&routed.traffic, &routed.clusters);
            (!addresses.is_empty()).then_some(Choice {
                policy: Policy::Simple,
                clusters: Vec::new(),
                anycast: Some(addresses),
            })
        }
    };
    if picked.is_some() {
        return picked;
    }
    match routed.traffic.when_all_unhealthy {
        WhenAllUnhealthy::NoData => None,
        WhenAllUnhealthy::ServeAll => {
            let clusters: Vec<Chosen<'_>> = sorted
                .iter()
                .copied()
                .filter(|c| !c.cordoned && (!c.ips.is_empty() || !c.hostnames.is_empty()))
                .map(each)
                .collect();
            (!clusters.is_empty()).then_some(Choice {
                policy: Policy::Simple,
                clusters,
                anycast: None,
            })
        }
    }
}

fn target(
    routed: &RoutedIngress,
    chosen: &Chosen<'_>,
    values: Vec<String>,
    hostname: Option<&String>,
    ip: Option<IpAddr>,
) -> Target {
    let health = routed.health_port.map(|port| HealthEndpoint {
        ip,
        hostname: if ip.is_none() {
            hostname.cloned()
        } else {
            None
        },
        port,
        protocol: HealthProtocol::Tcp,
        path: None,
        host: None,
    });
    Target {
        cluster: chosen.view.name.clone(),
        values,
        hostname: hostname.cloned(),
        weight: chosen.weight,
        tier: chosen.tier,
        location: chosen.view.location.clone(),
        cloud: chosen.view.cloud,
        health,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use fedingress_api::cluster::Provider as Cloud;
    use fedingress_api::ingress::{Strategy, Traffic};

    use super::*;
    use fedingress_dns::routing::FailoverState;
    use fedingress_dns::zone::NameserverConfig;

    fn at(region: &str) -> Location {
        Location {
            region: region.to_owned(),
            latitude: 50.0,
            longitude: 8.0,
        }
    }

    fn cluster(name: &str, ips: &[&str]) -> ClusterView {
        ClusterView {
            name: name.to_owned(),
            location: at(name),
            healthy: true,
            cordoned: false,
            ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
            hostnames: Vec::new(),
            load: 0.0,
            capacity: None,
            cloud: Cloud::Aws,
            anycast: Vec::new(),
        }
    }

    fn routed(strategy: Strategy, clusters: Vec<ClusterView>) -> RoutedIngress {
        RoutedIngress {
            ingress: "shop/web".to_owned(),
            dns_name: "shop.example.com".to_owned(),
            traffic: Traffic {
                strategy,
                ttl: 60,
                ..Traffic::default()
            },
            clusters,
            srv: Vec::new(),
            failover: FailoverState::default(),
            health_port: Some(443),
        }
    }

    fn strategy(type_: StrategyType) -> Strategy {
        Strategy {
            type_,
            ..Strategy::default()
        }
    }

    /// (type, policy, [(cluster, values)]) per record set.
    type Summary = Vec<(RecordType, Policy, Vec<(String, Vec<String>)>)>;

    fn summary(sets: &[PolicyRecordSet]) -> Summary {
        sets.iter()
            .map(|s| {
                (
                    s.type_,
                    s.policy,
                    s.targets
                        .iter()
                        .map(|t| (t.cluster.clone(), t.values.clone()))
                        .collect(),
                )
            })
            .collect()
    }

    fn pair(cluster: &str, values: &[&str]) -> (String, Vec<String>) {
        (
            cluster.to_owned(),
            values.iter().map(|v| (*v).to_owned()).collect(),
        )
    }

    #[test]
    fn round_robin_is_multivalue_split_by_family_with_health_endpoints() {
        let r = routed(
            strategy(StrategyType::RoundRobin),
            vec![
                cluster("us-east", &["198.51.100.1"]),
                cluster("eu-west", &["192.0.2.1", "2001:db8::1", "192.0.2.2"]),
            ],
        );
        let sets = record_sets(&r);
        assert_eq!(
            summary(&sets),
            vec![
                (
                    RecordType::A,
                    Policy::Multivalue,
                    vec![
                        pair("eu-west", &["192.0.2.1", "192.0.2.2"]),
                        pair("us-east", &["198.51.100.1"])
                    ]
                ),
                (
                    RecordType::Aaaa,
                    Policy::Multivalue,
                    vec![pair("eu-west", &["2001:db8::1"])]
                ),
            ]
        );
        let a = &sets[0];
        assert_eq!((a.ttl, a.owner_ref.as_str()), (60, "shop/web"));
        assert_eq!(a.dns_name, "shop.example.com");
        let health = a.targets[0].health.clone().unwrap();
        assert_eq!(health.ip, Some("192.0.2.1".parse().unwrap()));
        assert_eq!((health.port, health.protocol), (443, HealthProtocol::Tcp));
        assert_eq!(a.targets[0].cloud, Cloud::Aws);
        assert_eq!(
            sets[1].targets[0].health.as_ref().unwrap().ip,
            Some("2001:db8::1".parse().unwrap())
        );
    }

    #[test]
    fn eligibility_is_routings() {
        let mut sick = cluster("sick", &["192.0.2.9"]);
        sick.healthy = false;
        let mut cordoned = cluster("cordoned", &["192.0.2.8"]);
        cordoned.cordoned = true;
        let bare = cluster("bare", &[]);
        let r = routed(
            strategy(StrategyType::Geo),
            vec![sick, cordoned, bare, cluster("ok", &["192.0.2.1"])],
        );
        assert_eq!(
            summary(&record_sets(&r)),
            vec![(RecordType::A, Policy::Geo, vec![pair("ok", &["192.0.2.1"])])]
        );
    }

    #[test]
    fn weighted_leaves_out_zero_and_missing_weights() {
        let mut s = strategy(StrategyType::Weighted);
        s.weights = Some(BTreeMap::from([("a".to_owned(), 3), ("b".to_owned(), 0)]));
        let r = routed(
            s,
            vec![
                cluster("a", &["192.0.2.1"]),
                cluster("b", &["192.0.2.2"]),
                cluster("c", &["192.0.2.3"]),
            ],
        );
        let sets = record_sets(&r);
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].policy, Policy::Weighted);
        let weights: Vec<(&str, u32)> = sets[0]
            .targets
            .iter()
            .map(|t| (t.cluster.as_str(), t.weight))
            .collect();
        assert_eq!(weights, vec![("a", 3)]);
    }

    #[test]
    fn failover_tiers_are_failover_order_indices() {
        let mut s = strategy(StrategyType::Failover);
        s.failover_order = Some(vec![
            vec!["eu".to_owned()],
            vec!["us".to_owned(), "ap".to_owned()],
        ]);
        let r = routed(
            s,
            vec![
                cluster("us", &["192.0.2.2"]),
                cluster("eu", &["192.0.2.1"]),
                cluster("ap", &["192.0.2.3"]),
                cluster("elsewhere", &["192.0.2.4"]),
            ],
        );
        let sets = record_sets(&r);
        let tiers: Vec<(&str, u32)> = sets[0]
            .targets
            .iter()
            .map(|t| (t.cluster.as_str(), t.tier))
            .collect();
        assert_eq!(sets[0].policy, Policy::Failover);
        assert_eq!(tiers, vec![("ap", 1), ("eu", 0), ("us", 1)]);
    }

    #[test]
    fn overflow_is_geo_and_latency_is_latency() {
        let clusters = vec![cluster("a", &["192.0.2.1"])];
        let overflow = record_sets(&routed(strategy(StrategyType::Overflow), clusters.clone()));
        assert_eq!(overflow[0].policy, Policy::Geo);
        let latency = record_sets(&routed(strategy(StrategyType::Latency), clusters));
        assert_eq!(latency[0].policy, Policy::Latency);
        assert_eq!(latency[0].targets[0].location.region, "a");
    }

    #[test]
    fn anycast_is_simple_with_the_anycast_addresses() {
        let mut s = strategy(StrategyType::Anycast);
        s.anycast_addresses = Some(vec!["203.0.113.7".to_owned(), "2001:db8::7".to_owned()]);
        let r = routed(s.clone(), vec![cluster("a", &[])]);
        assert_eq!(
            summary(&record_sets(&r)),
            vec![
                (
                    RecordType::A,
                    Policy::Simple,
                    vec![pair("", &["203.0.113.7"])]
                ),
                (
                    RecordType::Aaaa,
                    Policy::Simple,
                    vec![pair("", &["2001:db8::7"])]
                ),
            ]
        );
        // Nobody healthy to announce them: fail open to the clusters' own addresses.
        let mut sick = cluster("a", &["192.0.2.1"]);
        sick.healthy = false;
        let r = routed(s, vec![sick]);
        assert_eq!(
            summary(&record_sets(&r)),
            vec![(
                RecordType::A,
                Policy::Simple,
                vec![pair("a", &["192.0.2.1"])]
            )]
        );
    }

    #[test]
    fn when_all_unhealthy_serve_all_fails_open_and_no_data_publishes_nothing() {
        let mut sick = cluster("sick", &["192.0.2.1"]);
        sick.healthy = false;
        let mut cordoned = cluster("cordoned", &["192.0.2.2"]);
        cordoned.cordoned = true;
        let mut r = routed(
            strategy(StrategyType::RoundRobin),
            vec![sick, cordoned, cluster("bare", &[])],
        );
        r.clusters[2].healthy = false;
        assert_eq!(
            summary(&record_sets(&r)),
            vec![(
                RecordType::A,
                Policy::Simple,
                vec![pair("sick", &["192.0.2.1"])]
            )]
        );
        r.traffic.when_all_unhealthy = WhenAllUnhealthy::NoData;
        assert!(record_sets(&r).is_empty());
        // Weighted with every eligible cluster at weight 0 is "nobody to pick" too.
        let mut s = strategy(StrategyType::Weighted);
        s.weights = Some(BTreeMap::from([("a".to_owned(), 0)]));
        let mut r = routed(s, vec![cluster("a", &["192.0.2.1"])]);
        r.traffic.when_all_unhealthy = WhenAllUnhealthy::NoData;
        assert!(record_sets(&r).is_empty());
    }

    #[test]
    fn host_names_are_cname_alone_and_alias_targets_when_mixed() {
        let mut lb = cluster("lb", &[]);
        lb.hostnames = vec![
            "a1.elb.amazonaws.com".to_owned(),
            "a2.elb.amazonaws.com".to_owned(),
        ];
        let mut lb2 = cluster("lb2", &[]);
        lb2.hostnames = vec!["b.elb.amazonaws.com".to_owned()];
        let r = routed(strategy(StrategyType::RoundRobin), vec![lb.clone(), lb2]);
        let sets = record_sets(&r);
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].type_, RecordType::Cname);
        let hosts: Vec<Option<&str>> = sets[0]
            .targets
            .iter()
            .map(|t| t.hostname.as_deref())
            .collect();
        assert_eq!(
            hosts,
            vec![Some("a1.elb.amazonaws.com"), Some("b.elb.amazonaws.com")]
        );
        let health = sets[0].targets[0].health.clone().unwrap();
        assert_eq!(health.ip, None);
        assert_eq!(health.hostname.as_deref(), Some("a1.elb.amazonaws.com"));

        let r = routed(
            strategy(StrategyType::RoundRobin),
            vec![lb, cluster("ip", &["192.0.2.1", "2001:db8::1"])],
        );
        let sets = record_sets(&r);
        assert_eq!(
            summary(&sets),
            vec![
                (
                    RecordType::A,
                    Policy::Multivalue,
                    vec![pair("ip", &["192.0.2.1"]), pair("lb", &[])]
                ),
                (
                    RecordType::Aaaa,
                    Policy::Multivalue,
                    vec![pair("ip", &["2001:db8::1"])]
                ),
            ]
        );
        assert_eq!(
            sets[0].targets[1].hostname.as_deref(),
            Some("a1.elb.amazonaws.com")
        );
    }

    #[test]
    fn no_health_port_means_no_health_endpoints() {
        let mut r = routed(
            strategy(StrategyType::RoundRobin),
            vec![cluster("a", &["192.0.2.1"])],
        );
        r.health_port = None;
        assert_eq!(record_sets(&r)[0].targets[0].health, None);
    }

    #[test]
    fn desired_adds_delegation_and_skips_names_under_it_sorted() {
        let zone = ZoneConfig {
            name: "GSLB.example.com.".to_owned(),
            nameservers: vec![
                NameserverConfig {
                    name: "ns1.gslb.example.com".to_owned(),
                    addresses: vec![
                        "192.0.2.53".parse().unwrap(),
                        "2001:db8::53".parse().unwrap(),
                    ],
                },
                NameserverConfig::from("ns.other.example."),
            ],
            soa: Default::default(),
            ttl: 3600,
        };
        let shop = routed(
            strategy(StrategyType::RoundRobin),
            vec![cluster("a", &["192.0.2.1"])],
        );
        let mut inner = shop.clone();
        inner.dns_name = "app.gslb.example.com".to_owned();
        let d = desired(7, [&inner, &shop], &[zone]);
        assert_eq!(d.serial, 7);
        let keys: Vec<(&str, RecordType)> = d
            .record_sets
            .iter()
            .map(|r| (r.name.as_str(), r.type_))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("gslb.example.com", RecordType::Ns),
                ("ns1.gslb.example.com", RecordType::A),
                ("ns1.gslb.example.com", RecordType::Aaaa),
                ("shop.example.com", RecordType::A),
            ]
        );
        let ns = &d.record_sets[0];
        assert_eq!(
            ns.targets[0].values,
            vec!["ns.other.example.", "ns1.gslb.example.com."]
        );
        assert_eq!((ns.ttl, ns.policy), (3600, Policy::Simple));
        assert_eq!(
            (ns.owner_ref.as_str(), ns.dns_name.as_str()),
            ("zone/gslb.example.com", "gslb.example.com")
        );
        assert_eq!(d.record_sets[1].targets[0].values, vec!["192.0.2.53"]);
        assert_eq!(d.record_sets[1].dns_name, "gslb.example.com");
    }
}
