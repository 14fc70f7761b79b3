//! Which anycast routes the agent announces, and why each is or is not: pure, from what
//! the loop observed (the applied plan, the driver's report, draining, cordon, the
//! speaker, the interface).
//!
//! A share wants its anycast addresses announced while it is applied and healthy — not
//! every rule failed, at least one backend, and every backend with a ready endpoint
//! (the hub's rule, `hub/src/controller/serving.rs`) — and the
//! agent is neither draining nor cordoned. An address several shares carry is announced
//! while any of them wants it. A wanted address is still not announced without a next
//! hop of its family, when putting it on the interface failed, or while the speaker is
//! down.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use fedingress_api::plan::{AgentReport, AnycastRoute, ClusterPlan, IngressKey, IngressReport};

use crate::config::anycast::NextHops;

/// Whether the speaker can take routes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpeakerState {
    Up,
    /// Why not (connect error, dead gobgpd...).
    Down(String),
}

/// What one decision looks at.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The plan the driver applied last (empty before the first apply).
    pub plan: &'a ClusterPlan,
    /// The driver's report of `plan`.
    pub report: &'a AgentReport,
    /// SIGTERM: every route goes.
    pub draining: bool,
    /// The hub's `Welcome` said the cluster is cordoned.
    pub cordoned: bool,
    pub speaker: &'a SpeakerState,
    /// The speaker's peer sessions as last polled.
    pub sessions: Sessions,
    /// Addresses whose host route an established peer holds (its Adj-RIB-Out), as
    /// last polled.
    pub sent: &'a BTreeSet<IpAddr>,
    pub next_hops: NextHops,
    /// Addresses the interface could not take, with the error.
    pub interface_errors: &'a BTreeMap<IpAddr, String>,
}

/// How many peers the speaker has, and how many of their sessions are established.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sessions {
    pub peers: u32,
    pub established: u32,
}

/// What the speaker should carry, and what to report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Addresses the speaker should carry, and their next hops.
    pub announce: BTreeMap<IpAddr, IpAddr>,
    /// Addresses of `announce` that no established peer holds yet (not reported
    /// announced: the routers do not have them).
    pub unsent: BTreeSet<IpAddr>,
    /// Per share of the plan, its anycast addresses in plan order.
    pub routes: BTreeMap<IngressKey, Vec<AnycastRoute>>,
    /// Addresses that belong on the interface: every anycast address of an applied
    /// share, announced or not (its listeners serve it; see `docs/cluster-agent.md`).
    pub local: BTreeSet<IpAddr>,
}

/// The speaker calls that turn `announced` into `desired`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub withdraw: Vec<IpAddr>,
    /// Address and next hop; also a route whose next hop changed (announcing replaces).
    pub announce: Vec<(IpAddr, IpAddr)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.withdraw.is_empty() && self.announce.is_empty()
    }
}

/// Why `share` does not want its addresses announced; `None` when it does.
fn unwanted(inputs: &Inputs<'_>, report: Option<&IngressReport>, rules: usize) -> Option<String> {
    if inputs.draining {
        return Some("draining (SIGTERM)".to_owned());
    }
    if inputs.cordoned {
        return Some("cluster cordoned".to_owned());
    }
    let Some(report) = report else {
        return Some("not applied".to_owned());
    };
    let failed: BTreeSet<u32> = report.rule_errors.iter().map(|e| e.rule).collect();
    let all_failed = !failed.is_empty()
        && (0..rules).all(|i| u32::try_from(i).is_ok_and(|i| failed.contains(&i)));
    if all_failed {
        let first = report
            .rule_errors
            .first()
            .map_or("", |e| e.message.as_str());
        return Some(format!("every rule failed: {first}"));
    }
    if report.backends.is_empty() {
        return Some("no backend".to_owned());
    }
    if let Some(backend) = report.backends.iter().find(|b| b.ready == 0) {
        return Some(format!(
            "backend {}:{} has no ready endpoint ({} of {})",
            backend.service, backend.port, backend.ready, backend.total
        ));
    }
    None
}

/// Decides every route (see the module docs).
///
/// # Guarantees
/// - An address is in `announce` only when some share of the plan wants it, it has a
///   next hop of its family, the interface took it, and the speaker is up.
/// - Every anycast address of every share of the plan has exactly one entry in that
///   share's `routes`, whose `announced` is true exactly when the address is in
///   `announce` and an established peer holds it (`sent`): what the routers have, not
///   what was handed to the speaker. Its reason starts with `announced: ` or
///   `withdrawn: `.
pub fn decide(inputs: &Inputs<'_>) -> Decision {
    // Per share: None = wants its addresses; Some(why not).
    let mut wants: BTreeMap<&IngressKey, Option<String>> = BTreeMap::new();
    // Address → the first share (key order) that wants it.
    let mut wanted_by: BTreeMap<IpAddr, &IngressKey> = BTreeMap::new();
    let mut local = BTreeSet::new();
    for (key, share) in inputs.plan.ingresses.iter() {
        if share.anycast_addresses.is_empty() {
            continue;
        }
        // The driver reports generation 0 for a share it did not apply.
        let report = inputs
            .report
            .ingresses
            .iter()
            .find(|r| &r.key == key && r.applied_generation != 0);
        let why_not = unwanted(inputs, report, share.rules.len());
        for &address in &share.anycast_addresses {
            if report.is_some() {
                local.insert(address);
            }
            if why_not.is_none() {
                wanted_by.entry(address).or_insert(key);
            }
        }
        wants.insert(key, why_not);
    }
    // Why a wanted address is still not announced.
    let blocked = |address: IpAddr| -> Option<String> {
        let Some(_) = inputs.next_hops.of(address) else {
            let family = if address.is_ipv4() { "IPv4" } else { "IPv6" };
            return Some(format!(
                "no {family} next hop: set anycast.nextHop or advertise an {family} listen address"
            ));
        };
        if let Some(error) = inputs.interface_errors.get(&address) {
            return Some(error.clone());
        }
        match inputs.speaker {
            SpeakerState::Up => None,
            SpeakerState::Down(why) => Some(format!("the BGP speaker is down: {why}")),
        }
    };
    let announce: BTreeMap<IpAddr, IpAddr> = wanted_by
        .keys()
        .filter(|&&a| blocked(a).is_none())
        .filter_map(|&a| inputs.next_hops.of(a).map(|hop| (a, hop)))
        .collect();
    // Carried, but a router has it only once an established peer was sent it.
    let unsent: BTreeSet<IpAddr> = announce
        .keys()
        .filter(|a| !inputs.sent.contains(a))
        .copied()
        .collect();
    let unsent_reason = if inputs.sessions.established == 0 {
        format!(
            "no BGP session established ({} of {} peers)",
            inputs.sessions.established, inputs.sessions.peers
        )
    } else {
        "not yet sent to an established BGP peer".to_owned()
    };
    let mut routes = BTreeMap::new();
    for (key, share) in inputs.plan.ingresses.iter() {
        let Some(why_not) = wants.get(key) else {
            continue;
        };
        let list = share
            .anycast_addresses
            .iter()
            .map(|&address| {
                let carried = announce.contains_key(&address);
                let announced = carried && !unsent.contains(&address);
                let reason = match (why_not, announced) {
                    (None, true) => "announced: applied and healthy".to_owned(),
                    (_, false) if carried => format!("withdrawn: {unsent_reason}"),
                    (None, false) => format!(
                        "withdrawn: {}",
                        blocked(address).unwrap_or_else(|| "not wanted".to_owned())
                    ),
                    (Some(why), true) => {
                        let by = wanted_by.get(&address).map(ToString::to_string);
                        format!(
                            "announced for {} (this share: {why})",
                            by.unwrap_or_default()
                        )
                    }
                    (Some(why), false) => format!("withdrawn: {why}"),
                };
                AnycastRoute {
                    address,
                    announced,
                    reason,
                }
            })
            .collect();
        routes.insert(key.clone(), list);
    }
    Decision {
        announce,
        unsent,
        routes,
        local,
    }
}

/// The calls that take the speaker from `announced` to `desired` (address → next hop):
/// withdraw what is no longer desired, announce what is new or has a new next hop.
pub fn changes(
    desired: &BTreeMap<IpAddr, IpAddr>,
    announced: &BTreeMap<IpAddr, IpAddr>,
) -> Changes {
    Changes {
        withdraw: announced
            .keys()
            .filter(|a| !desired.contains_key(a))
            .copied()
            .collect(),
        announce: desired
            .iter()
            .filter(|(a, hop)| announced.get(a) != Some(hop))
            .map(|(&a, &hop)| (a, hop))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::ingress::{Backend, IngressRule, Protocol};
    use fedingress_api::plan::{BackendHealth, IngressShare, RuleError};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn share(name: &str, addresses: &[&str], rules: usize) -> IngressShare {
        let mut rule = IngressRule::new(Protocol::Tcp);
        rule.port = Some(7777);
        rule.backend = Some(Backend::new("echo", 7777));
        IngressShare {
            key: IngressKey::new("default", name),
            uid: format!("uid-{name}"),
            generation: 1,
            rules: vec![rule; rules],
            tls: Vec::new(),
            cluster_override: None,
            anycast_addresses: addresses.iter().map(|a| ip(a)).collect(),
        }
    }

    fn healthy(name: &str) -> IngressReport {
        IngressReport {
            key: IngressKey::new("default", name),
            applied_generation: 1,
            backends: vec![BackendHealth {
                service: "echo".into(),
                port: 7777,
                ready: 2,
                total: 2,
            }],
            ..IngressReport::default()
        }
    }

    fn unhealthy(name: &str) -> IngressReport {
        let mut report = healthy(name);
        report.backends[0].ready = 0;
        report
    }

    struct World {
        plan: ClusterPlan,
        report: AgentReport,
        draining: bool,
        cordoned: bool,
        speaker: SpeakerState,
        sessions: Sessions,
        sent: BTreeSet<IpAddr>,
        next_hops: NextHops,
        interface_errors: BTreeMap<IpAddr, String>,
    }

    impl World {
        fn new(shares: Vec<IngressShare>, reports: Vec<IngressReport>) -> World {
            World {
                plan: ClusterPlan::from(shares),
                report: AgentReport {
                    ingresses: reports,
                    ..AgentReport::default()
                },
                draining: false,
                cordoned: false,
                speaker: SpeakerState::Up,
                sessions: Sessions {
                    peers: 1,
                    established: 1,
                },
                // Every address of these tests, as a peer would hold it.
                sent: ["10.99.0.1", "10.99.0.2", "10.99.0.3", "fd00:99::1"]
                    .into_iter()
                    .map(ip)
                    .collect(),
                next_hops: NextHops {
                    v4: Some(ip("192.0.2.10")),
                    v6: None,
                },
                interface_errors: BTreeMap::new(),
            }
        }

        fn decide(&self) -> Decision {
            decide(&Inputs {
                plan: &self.plan,
                report: &self.report,
                draining: self.draining,
                cordoned: self.cordoned,
                speaker: &self.speaker,
                sessions: self.sessions,
                sent: &self.sent,
                next_hops: self.next_hops,
                interface_errors: &self.interface_errors,
            })
        }
    }

    fn route<'a>(decision: &'a Decision, name: &str, address: &str) -> &'a AnycastRoute {
        decision.routes[&IngressKey::new("default", name)]
            .iter()
            .find(|r| r.address == ip(address))
            .unwrap()
    }

    #[test]
    fn a_healthy_applied_share_is_announced_with_its_next_hop() {
        let world = World::new(
            vec![share("echo", &["10.99.0.1"], 1), share("plain", &[], 1)],
            vec![healthy("echo"), healthy("plain")],
        );
        let decision = world.decide();
        assert_eq!(
            decision.announce,
            BTreeMap::from([(ip("10.99.0.1"), ip("192.0.2.10"))])
        );
        let r = route(&decision, "echo", "10.99.0.1");
        assert!(r.announced);
        assert_eq!(r.reason, "announced: applied and healthy");
        assert_eq!(decision.local, BTreeSet::from([ip("10.99.0.1")]));
        // Shares without anycast addresses have no routes at all.
        assert_eq!(decision.routes.len(), 1);
    }

    #[test]
    fn each_reason_withdraws() {
        let base = || {
            World::new(
                vec![share("echo", &["10.99.0.1"], 2)],
                vec![healthy("echo")],
            )
        };
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|w| w.report.ingresses = vec![unhealthy("echo")]),
                "withdrawn: backend echo:7777 has no ready endpoint (0 of 2)",
            ),
            (
                Box::new(|w| w.report.ingresses[0].backends.clear()),
                "withdrawn: no backend",
            ),
            (
                Box::new(|w| {
                    w.report.ingresses[0].rule_errors = (0..2)
                        .map(|rule| RuleError {
                            ingress: IngressKey::new("default", "echo"),
                            rule,
                            message: "binding TCP 10.99.0.1:7777: address in use".into(),
                        })
                        .collect();
                }),
                "withdrawn: every rule failed: binding TCP 10.99.0.1:7777: address in use",
            ),
            (
                Box::new(|w| w.cordoned = true),
                "withdrawn: cluster cordoned",
            ),
            (
                Box::new(|w| w.draining = true),
                "withdrawn: draining (SIGTERM)",
            ),
            (
                Box::new(|w| w.speaker = SpeakerState::Down("gobgpd exited".into())),
                "withdrawn: the BGP speaker is down: gobgpd exited",
            ),
            (
                Box::new(|w| w.report.ingresses.clear()),
                "withdrawn: not applied",
            ),
            (
                Box::new(|w| w.next_hops.v4 = None),
                "withdrawn: no IPv4 next hop: set anycast.nextHop or advertise an IPv4 listen address",
            ),
            (
                Box::new(|w| {
                    w.interface_errors.insert(
                        ip("10.99.0.1"),
                        "adding 10.99.0.1/32 to lo: Operation not permitted".into(),
                    );
                }),
                "withdrawn: adding 10.99.0.1/32 to lo: Operation not permitted",
            ),
        ];
        for (change, reason) in cases {
            let mut world = base();
            change(&mut world);
            let decision = world.decide();
            assert!(decision.announce.is_empty(), "{reason}");
            let r = route(&decision, "echo", "10.99.0.1");
            assert!(!r.announced, "{reason}");
            assert_eq!(r.reason, reason);
        }
        // One failed rule of two: still healthy.
        let mut world = base();
        world.report.ingresses[0].rule_errors = vec![RuleError {
            ingress: IngressKey::new("default", "echo"),
            rule: 1,
            message: "x".into(),
        }];
        assert_eq!(world.decide().announce.len(), 1);
    }

    #[test]
    fn a_carried_route_is_announced_only_once_an_established_peer_holds_it() {
        let mut world = World::new(
            vec![share("echo", &["10.99.0.1"], 1)],
            vec![healthy("echo")],
        );
        world.sent.clear();
        world.sessions.established = 0;
        let decision = world.decide();
        // The speaker carries it, so that it goes out once a session is up ...
        assert_eq!(decision.announce.len(), 1);
        assert_eq!(decision.unsent, BTreeSet::from([ip("10.99.0.1")]));
        // ... but no router has it: not announced.
        let r = route(&decision, "echo", "10.99.0.1");
        assert!(!r.announced);
        assert_eq!(
            r.reason,
            "withdrawn: no BGP session established (0 of 1 peers)"
        );
        world.sessions.established = 1;
        assert_eq!(
            route(&world.decide(), "echo", "10.99.0.1").reason,
            "withdrawn: not yet sent to an established BGP peer"
        );
        world.sent.insert(ip("10.99.0.1"));
        let decision = world.decide();
        assert!(decision.unsent.is_empty());
        assert!(route(&decision, "echo", "10.99.0.1").announced);
        // Withdrawn at once, whatever the last poll saw.
        world.draining = true;
        let decision = world.decide();
        assert!(decision.announce.is_empty() && decision.unsent.is_empty());
        assert!(!route(&decision, "echo", "10.99.0.1").announced);
    }

    #[test]
    fn cordon_and_drain_outrank_health_and_the_speaker() {
        let mut world = World::new(
            vec![share("echo", &["10.99.0.1"], 1)],
            vec![unhealthy("echo")],
        );
        world.cordoned = true;
        world.speaker = SpeakerState::Down("x".into());
        assert_eq!(
            route(&world.decide(), "echo", "10.99.0.1").reason,
            "withdrawn: cluster cordoned"
        );
        world.draining = true;
        assert_eq!(
            route(&world.decide(), "echo", "10.99.0.1").reason,
            "withdrawn: draining (SIGTERM)"
        );
        // Listeners still exist while draining: the address stays on the interface.
        assert_eq!(world.decide().local, BTreeSet::from([ip("10.99.0.1")]));
    }

    #[test]
    fn a_shared_address_is_announced_while_any_share_wants_it() {
        let mut world = World::new(
            vec![
                share("a", &["10.99.0.1", "10.99.0.2"], 1),
                share("b", &["10.99.0.1"], 1),
            ],
            vec![unhealthy("a"), healthy("b")],
        );
        let decision = world.decide();
        assert_eq!(
            decision.announce.keys().copied().collect::<Vec<_>>(),
            [ip("10.99.0.1")]
        );
        let a1 = route(&decision, "a", "10.99.0.1");
        assert!(a1.announced);
        assert_eq!(
            a1.reason,
            "announced for default/b (this share: backend echo:7777 has no ready endpoint (0 of 2))"
        );
        assert!(!route(&decision, "a", "10.99.0.2").announced);
        assert!(route(&decision, "b", "10.99.0.1").announced);
        assert_eq!(
            decision.local,
            BTreeSet::from([ip("10.99.0.1"), ip("10.99.0.2")])
        );
        world.report.ingresses = vec![unhealthy("a"), unhealthy("b")];
        assert!(world.decide().announce.is_empty());
    }

    #[test]
    fn next_hops_follow_the_family() {
        let mut world = World::new(
            vec![share("echo", &["10.99.0.1", "fd00:99::1"], 1)],
            vec![healthy("echo")],
        );
        let decision = world.decide();
        assert_eq!(decision.announce.len(), 1, "no IPv6 next hop");
        assert_eq!(
            route(&decision, "echo", "fd00:99::1").reason,
            "withdrawn: no IPv6 next hop: set anycast.nextHop or advertise an IPv6 listen address"
        );
        world.next_hops.v6 = Some(ip("2001:db8::10"));
        let decision = world.decide();
        assert_eq!(decision.announce[&ip("fd00:99::1")], ip("2001:db8::10"));
    }

    #[test]
    fn changes_withdraw_the_gone_and_announce_the_new_or_moved() {
        let desired = BTreeMap::from([
            (ip("10.99.0.1"), ip("192.0.2.10")),
            (ip("10.99.0.2"), ip("192.0.2.11")),
            (ip("10.99.0.3"), ip("192.0.2.10")),
        ]);
        let announced = BTreeMap::from([
            (ip("10.99.0.1"), ip("192.0.2.10")),
            (ip("10.99.0.2"), ip("192.0.2.10")),
            (ip("10.99.0.4"), ip("192.0.2.10")),
        ]);
        let changes = changes(&desired, &announced);
        assert_eq!(changes.withdraw, [ip("10.99.0.4")]);
        assert_eq!(
            changes.announce,
            [
                (ip("10.99.0.2"), ip("192.0.2.11")),
                (ip("10.99.0.3"), ip("192.0.2.10"))
            ]
        );
        assert!(super::changes(&desired, &desired).is_empty());
    }
}
