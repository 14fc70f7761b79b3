//! Conflicts between FederatedIngresses: two objects that need the same listener on one
//! cluster, or the same DNS name.
//!
//! [`find_conflicts`] takes every ingress with the clusters it is placed on
//! ([`PlacedIngress`], from [`crate::placement::place`]) and returns one [`Conflict`] per
//! (loser, cluster, winner). The older object (`creationTimestamp`, ties by namespace,
//! then name) keeps what is contested; the newer one loses it. The hub turns each
//! conflict into a `Placed=False, reason=Conflict` condition on the loser naming the
//! winner, and [`crate::plan::cluster_plans`] leaves the loser out where it lost.
//!
//! What conflicts (rules of one object against another's; conflicts inside one object are
//! validation errors, see [`crate::ingress`]):
//!
//! - the same effective `traffic.dnsName` (case-insensitive, trailing dot ignored): the
//!   newer object loses everywhere ([`Conflict::cluster`] is `None`);
//! - on one cluster where both are placed, listeners that cannot share a port:
//!   - two TCP rules, or two UDP rules, on the same port;
//!   - an HTTP rule and a TCP, TLS or HTTPS rule on the same port (plain vs TLS);
//!   - a TCP rule and an HTTP, HTTPS or TLS rule on the same port;
//!   - two HTTP, or two HTTPS, rules with the same host (no host = `*`) and a path with
//!     the same path and pathType on the same port;
//!   - a TLS rule and a TLS or HTTPS rule with the same host (SNI) on the same port.
//!
//! A TCP rule and a UDP rule on one port never conflict (mixed protocol), and neither do
//! HTTP rules with different hosts on one port.
//!
//! Objects are processed oldest first, and a loser contributes nothing where it lost: its
//! rules on that cluster never block a third object (which is then older than it), and an
//! object that lost its DNS name contributes nothing anywhere.

use std::collections::{BTreeMap, BTreeSet};

use crate::ingress::{FederatedIngress, IngressRule, Protocol};
use crate::ingress_key::IngressKey;
use crate::meta::Time;

/// One ingress and the clusters it is placed on.
#[derive(Clone, Debug)]
pub struct PlacedIngress<'a> {
    /// The object, as stored.
    pub ingress: &'a FederatedIngress,
    /// Cluster names (any order; duplicates are ignored).
    pub clusters: Vec<String>,
}

impl PlacedIngress<'_> {
    /// The ingress's key.
    pub fn key(&self) -> IngressKey {
        IngressKey::of(self.ingress)
    }
}

/// `loser` cannot have something `winner` (the older object) holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The newer object, left out where the conflict applies.
    pub loser: IngressKey,
    /// The older object, which keeps the listener or DNS name.
    pub winner: IngressKey,
    /// The cluster where the loser is left out, or `None` for everywhere (DNS name).
    pub cluster: Option<String>,
    /// For people, e.g. `TCP port 3306 is already used by default/shop on cluster
    /// eu-west`.
    pub reason: String,
}

impl Conflict {
    /// Whether this conflict keeps its loser off `cluster` (it names that cluster, or it
    /// holds everywhere).
    pub fn applies_to(&self, cluster: &str) -> bool {
        self.cluster.as_deref().is_none_or(|c| c == cluster)
    }
}

/// Every conflict among `placed`, sorted by loser, then cluster (everywhere first), then
/// winner.
///
/// # Guarantees
///
/// - Deterministic and independent of the order of `placed`.
/// - At most one conflict per (loser, cluster, winner), with the first reason found (the
///   loser's rules in order against the winner's rules in order).
/// - The winner of every conflict is older than its loser, and contributes its rules on
///   that cluster (it did not itself lose there).
///
/// # Assumptions
///
/// Each object appears once. An object without `creationTimestamp` (never stored) counts
/// as newer than every stored one.
pub fn find_conflicts(placed: &[PlacedIngress]) -> Vec<Conflict> {
    let mut order: Vec<(AgeKey, usize)> = placed
        .iter()
        .enumerate()
        .map(|(i, p)| (AgeKey::of(p.ingress), i))
        .collect();
    order.sort();
    let keys: Vec<IngressKey> = placed.iter().map(PlacedIngress::key).collect();

    let mut conflicts: Vec<Conflict> = Vec::new();

    // DNS names, oldest first.
    let mut dns_owner: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost_everywhere: BTreeSet<usize> = BTreeSet::new();
    for &(_, i) in &order {
        let Some(name) = placed[i].ingress.spec.effective_dns_name() else {
            continue;
        };
        let normalized = name.trim_end_matches('.').to_ascii_lowercase();
        match dns_owner.get(&normalized) {
            Some(&winner) => {
                lost_everywhere.insert(i);
                conflicts.push(Conflict {
                    loser: keys[i].clone(),
                    winner: keys[winner].clone(),
                    cluster: None,
                    reason: format!("DNS name {normalized} is already used by {}", keys[winner]),
                });
            }
            None => {
                dns_owner.insert(normalized, i);
            }
        }
    }

    // Which objects are on each cluster, oldest first.
    let mut by_cluster: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for &(_, i) in &order {
        if lost_everywhere.contains(&i) {
            continue;
        }
        let names: BTreeSet<&str> = placed[i].clusters.iter().map(String::as_str).collect();
        for name in names {
            by_cluster.entry(name).or_default().push(i);
        }
    }

    for (cluster, members) in by_cluster {
        // Rules of the winners on this cluster, by port.
        let mut taken: BTreeMap<i32, Vec<(usize, &IngressRule)>> = BTreeMap::new();
        for i in members {
            let rules = &placed[i].ingress.spec.rules;
            // First reason per winner, in the order winners were found.
            let mut lost_to: Vec<(usize, String)> = Vec::new();
            for rule in rules {
                let Some(port) = rule.effective_port() else {
                    continue;
                };
                for &(winner, held) in taken.get(&port).into_iter().flatten() {
                    if lost_to.iter().any(|(w, _)| *w == winner) {
                        continue;
                    }
                    if let Some(what) = clash(rule, held, port) {
                        let reason = format!(
                            "{what} is already used by {} on cluster {cluster}",
                            keys[winner]
                        );
                        lost_to.push((winner, reason));
                    }
                }
            }
            if lost_to.is_empty() {
                for rule in rules {
                    if let Some(port) = rule.effective_port() {
                        taken.entry(port).or_default().push((i, rule));
                    }
                }
            }
            for (winner, reason) in lost_to {
                conflicts.push(Conflict {
                    loser: keys[i].clone(),
                    winner: keys[winner].clone(),
                    cluster: Some(cluster.to_owned()),
                    reason,
                });
            }
        }
    }

    conflicts
        .sort_by(|a, b| (&a.loser, &a.cluster, &a.winner).cmp(&(&b.loser, &b.cluster, &b.winner)));
    conflicts
}

/// Sort key putting older objects first: stored objects by `creationTimestamp`, then
/// objects never stored; ties by namespace, then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct AgeKey<'a> {
    unstored: bool,
    created: Option<Time>,
    namespace: &'a str,
    name: &'a str,
}

impl<'a> AgeKey<'a> {
    fn of(ingress: &'a FederatedIngress) -> Self {
        let meta = &ingress.metadata;
        AgeKey {
            unstored: meta.creation_timestamp.is_none(),
            created: meta.creation_timestamp,
            namespace: meta.namespace_str(),
            name: meta.name_str(),
        }
    }
}

/// What `rule` (of the newer object) contests with `held` (of the older one) on `port`,
/// in words (`TCP port 3306`, `HTTP host a.example.com path / (Prefix) on port 80`, ...),
/// or `None` when they share the port fine.
fn clash(rule: &IngressRule, held: &IngressRule, port: i32) -> Option<String> {
    use Protocol::{Http, Https, Tcp, Tls, Udp};
    let host = |r: &IngressRule| {
        r.host()
            .map_or_else(|| "*".to_owned(), str::to_ascii_lowercase)
    };
    match (rule.protocol, held.protocol) {
        (Udp, Udp) => Some(format!("UDP port {port}")),
        (Udp, _) | (_, Udp) => None,
        (Tcp, Tcp) => Some(format!("TCP port {port}")),
        (Tcp, other)
        | (Http, other @ (Tcp | Tls | Https))
        | (Tls | Https, other @ (Tcp | Http)) => Some(format!("port {port} ({other})")),
        (Http, Http) | (Https, Https) => {
            let (h, held_host) = (host(rule), host(held));
            if h != held_host {
                return None;
            }
            rule.paths.iter().find_map(|p| {
                held.paths
                    .iter()
                    .any(|q| q.path == p.path && q.path_type == p.path_type)
                    .then(|| {
                        format!(
                            "{} host {h} path {} ({}) on port {port}",
                            rule.protocol, p.path, p.path_type
                        )
                    })
            })
        }
        (Tls, Tls | Https) | (Https, Tls) => {
            let h = host(rule);
            (h == host(held)).then(|| format!("TLS host {h} on port {port}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::{Backend, FederatedIngressSpec, HttpPath, PathType};

    fn at(namespace_name: &str, created: &str, rules: Vec<IngressRule>) -> FederatedIngress {
        let (namespace, name) = namespace_name.split_once('/').unwrap();
        let mut fi = FederatedIngress::new(
            namespace,
            name,
            FederatedIngressSpec {
                rules,
                ..FederatedIngressSpec::default()
            },
        );
        fi.metadata.creation_timestamp = Some(Time::parse(created).unwrap());
        // A DNS name of its own, so that only listeners can conflict.
        fi.spec.traffic.dns_name = Some(format!("{name}.{namespace}.test"));
        fi
    }

    fn l4(protocol: Protocol, port: i32) -> IngressRule {
        IngressRule {
            port: Some(port),
            backend: Some(Backend::new("svc", port)),
            ..IngressRule::new(protocol)
        }
    }

    fn web(protocol: Protocol, host: Option<&str>, path: &str, path_type: PathType) -> IngressRule {
        IngressRule {
            host: host.map(str::to_owned),
            paths: vec![HttpPath {
                path: path.to_owned(),
                path_type,
                backend: Backend::new("web", 8080),
            }],
            ..IngressRule::new(protocol)
        }
    }

    fn sni(host: &str, port: i32) -> IngressRule {
        IngressRule {
            host: Some(host.to_owned()),
            port: Some(port),
            backend: Some(Backend::new("pg", 5432)),
            ..IngressRule::new(Protocol::Tls)
        }
    }

    fn on<'a>(ingress: &'a FederatedIngress, clusters: &[&str]) -> PlacedIngress<'a> {
        PlacedIngress {
            ingress,
            clusters: clusters.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn key(s: &str) -> IngressKey {
        let (namespace, name) = s.split_once('/').unwrap();
        IngressKey::new(namespace, name)
    }

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-02T00:00:00Z";
    const T3: &str = "2026-01-03T00:00:00Z";

    /// Whether `a` (older) and `b` (newer), both on one cluster, conflict.
    fn pair_conflicts(a: IngressRule, b: IngressRule) -> bool {
        let old = at("default/old", T1, vec![a]);
        let new = at("default/new", T2, vec![b]);
        !find_conflicts(&[on(&old, &["c"]), on(&new, &["c"])]).is_empty()
    }

    #[test]
    fn the_older_object_wins_and_the_reason_names_it() {
        let shop = at("default/shop", T1, vec![l4(Protocol::Tcp, 3306)]);
        let blog = at("default/blog", T2, vec![l4(Protocol::Tcp, 3306)]);
        // Input order does not matter.
        for placed in [
            vec![on(&blog, &["eu-west"]), on(&shop, &["eu-west"])],
            vec![on(&shop, &["eu-west"]), on(&blog, &["eu-west"])],
        ] {
            assert_eq!(
                find_conflicts(&placed),
                vec![Conflict {
                    loser: key("default/blog"),
                    winner: key("default/shop"),
                    cluster: Some("eu-west".to_owned()),
                    reason: "TCP port 3306 is already used by default/shop on cluster eu-west"
                        .to_owned(),
                }]
            );
        }
    }

    #[test]
    fn equal_ages_fall_back_to_namespace_then_name() {
        let a = at("b/a", T1, vec![l4(Protocol::Udp, 53)]);
        let b = at("a/z", T1, vec![l4(Protocol::Udp, 53)]);
        let conflicts = find_conflicts(&[on(&a, &["c"]), on(&b, &["c"])]);
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].winner, key("a/z"));
        assert_eq!(conflicts[0].loser, key("b/a"));
        assert_eq!(
            conflicts[0].reason,
            "UDP port 53 is already used by a/z on cluster c"
        );

        // Never stored (no creationTimestamp) counts as newest.
        let mut unstored = at("a/a", T1, vec![l4(Protocol::Udp, 53)]);
        unstored.metadata.creation_timestamp = None;
        let conflicts = find_conflicts(&[on(&unstored, &["c"]), on(&b, &["c"])]);
        assert_eq!(conflicts[0].loser, key("a/a"));
    }

    #[test]
    fn only_clusters_where_both_are_placed_conflict() {
        let shop = at("default/shop", T1, vec![l4(Protocol::Tcp, 3306)]);
        let blog = at("default/blog", T2, vec![l4(Protocol::Tcp, 3306)]);
        let conflicts = find_conflicts(&[on(&shop, &["a", "b"]), on(&blog, &["b", "c"])]);
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].cluster.as_deref(), Some("b"));
        assert!(conflicts[0].applies_to("b") && !conflicts[0].applies_to("c"));
    }

    #[test]
    fn tcp_and_udp_share_a_port() {
        assert!(!pair_conflicts(
            l4(Protocol::Tcp, 3306),
            l4(Protocol::Udp, 3306)
        ));
        assert!(!pair_conflicts(
            l4(Protocol::Udp, 443),
            sni("db.example.com", 443)
        ));
        assert!(!pair_conflicts(
            l4(Protocol::Tcp, 3306),
            l4(Protocol::Tcp, 3307)
        ));
        assert!(pair_conflicts(l4(Protocol::Tcp, 53), l4(Protocol::Tcp, 53)));
        assert!(pair_conflicts(l4(Protocol::Udp, 53), l4(Protocol::Udp, 53)));
    }

    #[test]
    fn http_rules_share_a_port_by_host_and_path() {
        let prefix = PathType::Prefix;
        let h = |host: Option<&str>, path: &str| web(Protocol::Http, host, path, prefix);
        assert!(!pair_conflicts(
            h(Some("a.example.com"), "/"),
            h(Some("b.example.com"), "/")
        ));
        assert!(!pair_conflicts(
            h(Some("a.example.com"), "/"),
            h(Some("a.example.com"), "/x")
        ));
        assert!(!pair_conflicts(
            h(Some("a.example.com"), "/"),
            web(Protocol::Http, Some("a.example.com"), "/", PathType::Exact)
        ));
        assert!(!pair_conflicts(h(None, "/"), h(Some("a.example.com"), "/")));
        assert!(pair_conflicts(
            h(Some("a.example.com"), "/"),
            h(Some("a.example.com"), "/")
        ));
        assert!(pair_conflicts(h(None, "/"), h(Some(""), "/")));
        // Different ports never meet.
        let mut other_port = h(Some("a.example.com"), "/");
        other_port.port = Some(8080);
        assert!(!pair_conflicts(h(Some("a.example.com"), "/"), other_port));

        let s = |host: &str, path: &str| web(Protocol::Https, Some(host), path, prefix);
        assert!(pair_conflicts(
            s("a.example.com", "/"),
            s("a.example.com", "/")
        ));
        assert!(!pair_conflicts(
            s("a.example.com", "/"),
            s("a.example.com", "/api")
        ));
        assert!(!pair_conflicts(
            s("a.example.com", "/"),
            s("b.example.com", "/")
        ));

        let old = at("default/old", T1, vec![h(Some("a.example.com"), "/")]);
        let new = at(
            "default/new",
            T2,
            vec![web(Protocol::Http, Some("a.example.com"), "/", prefix)],
        );
        assert_eq!(
            find_conflicts(&[on(&old, &["c"]), on(&new, &["c"])])[0].reason,
            "HTTP host a.example.com path / (Prefix) on port 80 is already used by \
             default/old on cluster c"
        );
    }

    #[test]
    fn plain_and_tls_and_tcp_do_not_share_a_port() {
        let http = |port: i32| IngressRule {
            port: Some(port),
            ..web(Protocol::Http, Some("a.example.com"), "/", PathType::Prefix)
        };
        let https = |port: i32| IngressRule {
            port: Some(port),
            ..web(
                Protocol::Https,
                Some("b.example.com"),
                "/",
                PathType::Prefix,
            )
        };
        assert!(pair_conflicts(http(443), https(443)));
        assert!(pair_conflicts(https(443), http(443)));
        assert!(pair_conflicts(http(5433), sni("db.example.com", 5433)));
        assert!(pair_conflicts(sni("db.example.com", 80), http(80)));
        assert!(pair_conflicts(http(3306), l4(Protocol::Tcp, 3306)));
        assert!(pair_conflicts(l4(Protocol::Tcp, 443), https(443)));
        assert!(pair_conflicts(
            sni("db.example.com", 443),
            l4(Protocol::Tcp, 443)
        ));
        assert!(!pair_conflicts(http(80), https(443)));

        let old = at("default/old", T1, vec![https(443)]);
        let new = at("default/new", T2, vec![http(443)]);
        assert_eq!(
            find_conflicts(&[on(&old, &["c"]), on(&new, &["c"])])[0].reason,
            "port 443 (HTTPS) is already used by default/old on cluster c"
        );
    }

    #[test]
    fn sni_hosts_conflict_when_either_rule_is_tls() {
        let https = |host: &str| IngressRule {
            port: Some(443),
            ..web(Protocol::Https, Some(host), "/", PathType::Prefix)
        };
        assert!(pair_conflicts(
            sni("db.example.com", 443),
            sni("db.example.com", 443)
        ));
        assert!(pair_conflicts(
            sni("db.example.com", 443),
            https("db.example.com")
        ));
        assert!(pair_conflicts(
            https("db.example.com"),
            sni("db.example.com", 443)
        ));
        assert!(!pair_conflicts(
            sni("db.example.com", 443),
            sni("db2.example.com", 443)
        ));
        assert!(!pair_conflicts(
            sni("db.example.com", 443),
            https("shop.example.com")
        ));
        assert!(!pair_conflicts(
            sni("db.example.com", 443),
            sni("db.example.com", 5433)
        ));
    }

    #[test]
    fn a_shared_dns_name_conflicts_everywhere() {
        let mut shop = at("default/shop", T1, vec![l4(Protocol::Tcp, 1)]);
        shop.spec.traffic.dns_name = Some("shop.example.com".to_owned());
        // Defaults to its one host, so the same name.
        let mut copy = at(
            "team/copy",
            T2,
            vec![web(
                Protocol::Http,
                Some("shop.example.com"),
                "/x",
                PathType::Prefix,
            )],
        );
        copy.spec.traffic.dns_name = None;
        let conflicts = find_conflicts(&[on(&copy, &["b"]), on(&shop, &["a"])]);
        assert_eq!(
            conflicts,
            vec![Conflict {
                loser: key("team/copy"),
                winner: key("default/shop"),
                cluster: None,
                reason: "DNS name shop.example.com is already used by default/shop".to_owned(),
            }]
        );
        assert!(conflicts[0].applies_to("a") && conflicts[0].applies_to("b"));

        let mut dotted = at("team/dotted", T3, vec![l4(Protocol::Tcp, 2)]);
        dotted.spec.traffic.dns_name = Some("Shop.Example.com.".to_owned());
        let conflicts = find_conflicts(&[on(&dotted, &["a"]), on(&shop, &["a"])]);
        assert_eq!(conflicts.len(), 1);
        assert_eq!(conflicts[0].cluster, None);
    }

    #[test]
    fn a_loser_does_not_block_a_third_object() {
        // b (middle) loses TCP 80 to a (oldest) on cluster x; c (newest) shares UDP 53 with
        // b only, and must not lose to it there.
        let a = at("default/a", T1, vec![l4(Protocol::Tcp, 80)]);
        let b = at(
            "default/b",
            T2,
            vec![l4(Protocol::Tcp, 80), l4(Protocol::Udp, 53)],
        );
        let c = at("default/c", T3, vec![l4(Protocol::Udp, 53)]);
        let conflicts = find_conflicts(&[on(&c, &["x"]), on(&b, &["x", "y"]), on(&a, &["x"])]);
        assert_eq!(conflicts.len(), 1, "{conflicts:#?}");
        assert_eq!(conflicts[0].loser, key("default/b"));
        assert_eq!(conflicts[0].winner, key("default/a"));
        assert_eq!(conflicts[0].cluster.as_deref(), Some("x"));

        // Where b won (y), it blocks c.
        let conflicts = find_conflicts(&[on(&c, &["y"]), on(&b, &["x", "y"]), on(&a, &["x"])]);
        assert_eq!(conflicts.len(), 2);
        assert_eq!(
            (conflicts[1].loser.clone(), conflicts[1].winner.clone()),
            (key("default/c"), key("default/b"))
        );
        assert_eq!(conflicts[1].cluster.as_deref(), Some("y"));
    }

    #[test]
    fn a_dns_loser_blocks_nothing_anywhere() {
        let mut a = at("default/a", T1, vec![l4(Protocol::Tcp, 1)]);
        a.spec.traffic.dns_name = Some("x.example.com".to_owned());
        let mut b = at("default/b", T2, vec![l4(Protocol::Tcp, 80)]);
        b.spec.traffic.dns_name = Some("x.example.com".to_owned());
        let c = at("default/c", T3, vec![l4(Protocol::Tcp, 80)]);
        let conflicts = find_conflicts(&[on(&a, &["x"]), on(&b, &["x", "y"]), on(&c, &["x", "y"])]);
        assert_eq!(conflicts.len(), 1, "{conflicts:#?}");
        assert_eq!(conflicts[0].loser, key("default/b"));
        assert_eq!(conflicts[0].cluster, None);
    }

    #[test]
    fn one_conflict_per_loser_cluster_and_winner_with_the_first_reason() {
        let a = at(
            "default/a",
            T1,
            vec![l4(Protocol::Tcp, 1), l4(Protocol::Tcp, 2)],
        );
        let b = at("default/b", T2, vec![l4(Protocol::Udp, 3)]);
        let c = at(
            "default/c",
            T3,
            vec![
                l4(Protocol::Tcp, 2),
                l4(Protocol::Tcp, 1),
                l4(Protocol::Udp, 3),
            ],
        );
        let conflicts = find_conflicts(&[
            on(&a, &["x", "y"]),
            on(&b, &["x"]),
            on(&c, &["x", "y", "y"]),
        ]);
        let summary: Vec<(String, String, String)> = conflicts
            .iter()
            .map(|c| {
                (
                    c.cluster.clone().unwrap_or_default(),
                    c.winner.to_string(),
                    c.reason.clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "x".into(),
                    "default/a".into(),
                    "TCP port 2 is already used by default/a on cluster x".into()
                ),
                (
                    "x".into(),
                    "default/b".into(),
                    "UDP port 3 is already used by default/b on cluster x".into()
                ),
                (
                    "y".into(),
                    "default/a".into(),
                    "TCP port 2 is already used by default/a on cluster y".into()
                ),
            ]
        );
    }
}
