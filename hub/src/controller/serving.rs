//! Serving state: whether a cluster serves an ingress now, where, and whether routing may
//! send clients there. Pure.
//!
//! A cluster serves an ingress from the moment its agent acknowledges a plan holding the
//! ingress's share until it acknowledges one without it. A new generation that is still
//! Pending changes nothing here: the listener of the previous generation keeps serving,
//! with the health the agent last reported for it. Health comes from the agent's latest
//! report while it is connected, from the persisted state while the hub is restoring
//! (restarted less than one lease ago, agent not yet back), and is false once the agent
//! missed its lease.
//!
//! A cluster that turns healthy again after having been unhealthy is held out of answers
//! for `failbackDelaySeconds` (Failover keeps its own tier memory instead, see
//! `fedingress_dns::routing::failover_step`).
//!
//! Per rule, the serving state remembers what differs from the share: a rule served on
//! addresses of its own (the agent's `IngressReport.rules`, e.g. a UDP load balancer split
//! from the TCP one) and a rule the agent failed (a rule error). A cluster that failed
//! some rules still serves the others (it stays healthy, and leaves only the SRV answers
//! of the failed rules); one that failed every rule is unhealthy.
//!
//! For Anycast, the serving state keeps each anycast address's BGP route as the agent
//! last reported it (`IngressReport.anycast`); an agent reporting its BGP speaker down
//! has every route withdrawn, whatever the routes say. Routing counts a cluster as
//! announcing from that (`fedingress_dns::routing`, Anycast).

use std::collections::BTreeSet;

use fedingress_api::cluster::Address;
use fedingress_api::ingress::{AnycastRouteStatus, StrategyType, Traffic};
use fedingress_api::plan::{IngressKey, IngressReport, IngressShare, SpeakerReport};

use super::super::AgentState;
use super::super::routing_state::{RuleServing, Serving};

/// What the hub knows of one cluster's agent at a pass.
#[derive(Clone, Copy, Debug)]
pub enum AgentKnowledge<'a> {
    /// A session is open and within its lease.
    Connected(&'a AgentState),
    /// The agent had a session since the hub started, and missed its lease.
    Lost(&'a AgentState),
    /// No session since the hub started, which was less than one lease ago: the
    /// persisted state stands.
    Restoring,
    /// No session since the hub started, more than a lease ago.
    Unknown,
}

impl<'a> AgentKnowledge<'a> {
    pub fn of(agent: Option<&'a AgentState>, restoring: bool) -> Self {
        match agent {
            Some(agent) if agent.connected => AgentKnowledge::Connected(agent),
            Some(agent) => AgentKnowledge::Lost(agent),
            None if restoring => AgentKnowledge::Restoring,
            None => AgentKnowledge::Unknown,
        }
    }

    fn agent(self) -> Option<&'a AgentState> {
        match self {
            AgentKnowledge::Connected(agent) | AgentKnowledge::Lost(agent) => Some(agent),
            AgentKnowledge::Restoring | AgentKnowledge::Unknown => None,
        }
    }
}

/// The serving state of `key` on a cluster after this pass, from what the agent said and
/// the `previous` state; `None` when the cluster does not serve the ingress.
///
/// # Guarantees
/// - A cluster whose agent never acknowledged the ingress's share is never serving.
/// - Health is `Some(true)` only from a connected agent's report (or, while restoring,
///   from the persisted state); it is never invented.
/// - Rule errors make the cluster unhealthy only when every rule of the applied share
///   failed; otherwise they are remembered per rule (see [`RuleServing`]).
pub fn serving(
    key: &IngressKey,
    traffic: &Traffic,
    knowledge: AgentKnowledge<'_>,
    previous: Option<&Serving>,
    now_ms: u64,
) -> Option<Serving> {
    let agent = knowledge.agent();
    let share = agent
        .and_then(|a| a.applied.as_ref())
        .and_then(|applied| applied.plan.ingresses.get(key));
    let applied_generation = match agent.and_then(|a| a.applied.as_ref()) {
        Some(_) => share.map(|s| s.generation)?,
        None => previous.map(|p| p.applied_generation)?,
    };
    let report = agent
        .and_then(|a| a.report.as_deref())
        .and_then(|r| r.ingresses.iter().find(|i| &i.key == key));
    let addresses = report
        .map(|r| r.addresses.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| previous.map(|p| p.addresses.clone()))
        .filter(|a| !a.is_empty())
        .or_else(|| {
            agent
                .and_then(|a| a.report.as_ref())
                .map(|r| r.addresses.clone())
        })
        .unwrap_or_default();
    let failed: BTreeSet<u32> = match (agent, report) {
        (Some(agent), Some(report)) => agent
            .rule_errors
            .iter()
            .chain(report.rule_errors.iter())
            .filter(|e| &e.ingress == key)
            .map(|e| e.rule)
            .collect(),
        _ => BTreeSet::new(),
    };
    let rules = match (share, report) {
        (Some(share), Some(report)) => rules_of(share, report, &failed, &addresses),
        _ => previous.map(|p| p.rules.clone()).unwrap_or_default(),
    };
    let speaker = agent
        .and_then(|a| a.report.as_deref())
        .and_then(|r| r.speaker.as_ref());
    // From a connected agent's report; a lost agent's routes count as withdrawn;
    // otherwise (not reported yet, restoring) the routes last reported stand.
    let anycast = match (knowledge, report) {
        (AgentKnowledge::Connected(_), Some(report)) => {
            anycast_of(share.map(|s| &**s), report, speaker)
        }
        // Its last report first: the one sent on SIGTERM arrives just before the
        // session ends, possibly with no pass in between.
        (AgentKnowledge::Lost(_), Some(report)) => {
            withdrawn_with_the_agent(&anycast_of(share.map(|s| &**s), report, speaker))
        }
        (AgentKnowledge::Lost(_), None) => previous
            .map(|p| withdrawn_with_the_agent(&p.anycast))
            .unwrap_or_default(),
        _ => previous.map(|p| p.anycast.clone()).unwrap_or_default(),
    };
    // Every rule of the share failed (a share without rules: any error).
    let all_failed = !failed.is_empty()
        && share.is_none_or(|s| {
            (0..s.rules.len()).all(|i| u32::try_from(i).is_ok_and(|i| failed.contains(&i)))
        });
    let healthy = match knowledge {
        AgentKnowledge::Connected(_) => match report {
            Some(report) => Some(
                !all_failed
                    && !report.backends.is_empty()
                    && report.backends.iter().all(|b| b.ready > 0),
            ),
            // Connected, no report of this share yet: what was known stands.
            None => previous.and_then(|p| p.healthy),
        },
        AgentKnowledge::Restoring => previous.and_then(|p| p.healthy),
        AgentKnowledge::Lost(_) | AgentKnowledge::Unknown => Some(false),
    };
    let was_healthy = previous.is_some_and(|p| p.was_healthy) || healthy == Some(true);
    let held_until_ms = match (healthy, previous) {
        (Some(true), Some(previous)) if previous.healthy == Some(false) && previous.was_healthy => {
            let delay = failback_delay_ms(traffic);
            (delay > 0).then(|| now_ms.saturating_add(delay))
        }
        (Some(true), Some(previous)) => previous.held_until_ms.filter(|&until| until > now_ms),
        _ => None,
    };
    Some(Serving {
        applied_generation,
        addresses,
        healthy,
        held_until_ms,
        was_healthy,
        rules,
        anycast,
    })
}

/// Why a route its agent last reported announced counts as withdrawn once the agent's
/// session is gone.
pub const AGENT_GONE: &str =
    "withdrawn: the agent is not connected (a managed BGP speaker stops with its agent)";

/// The routes of an agent whose session ended: the announced ones count as withdrawn
/// (an agent that stops withdraws first and says so in its last report; one that dies
/// takes its managed speaker, and with it the routes, along); withdrawn ones keep their
/// reason.
fn withdrawn_with_the_agent(routes: &[AnycastRouteStatus]) -> Vec<AnycastRouteStatus> {
    routes
        .iter()
        .map(|r| AnycastRouteStatus {
            address: r.address,
            announced: false,
            reason: if r.announced {
                AGENT_GONE.to_owned()
            } else {
                r.reason.clone()
            },
        })
        .collect()
}

/// The anycast routes of a share as its agent's `report` gives them, with the agent's
/// BGP `speaker` down counting as every route of the `share`'s anycast addresses
/// withdrawn (the speaker's words as the reason, unless the agent already gave one for
/// a withdrawn route).
fn anycast_of(
    share: Option<&IngressShare>,
    report: &IngressReport,
    speaker: Option<&SpeakerReport>,
) -> Vec<AnycastRouteStatus> {
    let mut routes: Vec<AnycastRouteStatus> = report
        .anycast
        .iter()
        .map(|r| AnycastRouteStatus {
            address: r.address,
            announced: r.announced,
            reason: r.reason.clone(),
        })
        .collect();
    let Some(down) = speaker.filter(|s| !s.up) else {
        // An agent that runs a speaker reports BGP state: an address it has no route for
        // (its first decision is still to come) is not announced.
        if speaker.is_some() {
            for address in share
                .map(|s| s.anycast_addresses.as_slice())
                .unwrap_or_default()
            {
                if !routes.iter().any(|r| r.address == *address) {
                    routes.push(AnycastRouteStatus {
                        address: *address,
                        announced: false,
                        reason: "withdrawn: its agent has not reported the route yet".to_owned(),
                    });
                }
            }
        }
        return routes;
    };
    let why = if down.message.is_empty() {
        "withdrawn: the BGP speaker is down".to_owned()
    } else {
        format!("withdrawn: the BGP speaker is down: {}", down.message)
    };
    for route in routes.iter_mut().filter(|r| r.announced) {
        route.announced = false;
        route.reason.clone_from(&why);
    }
    for address in share
        .map(|s| s.anycast_addresses.as_slice())
        .unwrap_or_default()
    {
        if !routes.iter().any(|r| r.address == *address) {
            routes.push(AnycastRouteStatus {
                address: *address,
                announced: false,
                reason: why.clone(),
            });
        }
    }
    routes
}

/// The rules of `share` not simply served on `addresses`, from the agent's `report` and
/// the indices of the rules it `failed`.
fn rules_of(
    share: &IngressShare,
    report: &IngressReport,
    failed: &BTreeSet<u32>,
    addresses: &[Address],
) -> Vec<RuleServing> {
    let same = |a: &[Address], b: &[Address]| {
        a.len() == b.len() && a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x))
    };
    let mut out: Vec<RuleServing> = Vec::new();
    for (i, rule) in share.rules.iter().enumerate() {
        let Ok(index) = u32::try_from(i) else {
            break;
        };
        let Some(port) = rule.effective_port() else {
            continue;
        };
        let own = report
            .rules
            .iter()
            .find(|r| r.rule == index)
            .map(|r| r.addresses.clone())
            .filter(|own| !same(own, addresses))
            .unwrap_or_default();
        let failed = failed.contains(&index);
        if own.is_empty() && !failed {
            continue;
        }
        let entry = RuleServing {
            protocol: rule.protocol,
            port,
            host: rule.host().map(str::to_owned),
            addresses: own,
            failed,
        };
        // One entry per listener (HTTP rules of one host and port share it).
        if !out.iter().any(|r| r.matches(rule)) {
            out.push(entry);
        }
    }
    out
}

/// How long a recovered cluster is held out of answers (0 for Failover, whose tiers wait
/// instead).
fn failback_delay_ms(traffic: &Traffic) -> u64 {
    if traffic.strategy.type_ == StrategyType::Failover {
        return 0;
    }
    u64::try_from(traffic.failback_delay_seconds)
        .unwrap_or(0)
        .saturating_mul(1000)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;
    use std::time::Instant;

    use fedingress_api::Time;
    use fedingress_api::cluster::Address;
    use fedingress_api::plan::{
        AgentReport, AnycastRoute, BackendHealth, ClusterPlan, IngressReport, IngressShare,
    };

    use super::*;
    use crate::Published;

    fn key() -> IngressKey {
        IngressKey::new("default", "echo")
    }

    fn traffic(delay: i32) -> Traffic {
        Traffic {
            failback_delay_seconds: delay,
            ..Traffic::default()
        }
    }

    fn agent(applied_generation: Option<i64>, ready: Option<u32>, connected: bool) -> AgentState {
        let mut plan = ClusterPlan::default();
        if let Some(generation) = applied_generation {
            plan.ingresses.insert(
                key(),
                IngressShare {
                    key: key(),
                    uid: "uid".into(),
                    generation,
                    rules: Vec::new(),
                    tls: Vec::new(),
                    cluster_override: None,
                    anycast_addresses: Vec::new(),
                },
            );
        }
        let report = ready.map(|ready| {
            Arc::new(AgentReport {
                ingresses: vec![IngressReport {
                    key: key(),
                    applied_generation: applied_generation.unwrap_or(0),
                    addresses: vec![Address::ip("127.0.0.11".parse().unwrap())],
                    backends: vec![BackendHealth {
                        service: "echo".into(),
                        port: 7,
                        ready,
                        total: 1,
                    }],
                    listeners: Vec::new(),
                    rule_errors: Vec::new(),
                    rules: Vec::new(),
                    anycast: Vec::new(),
                }],
                ..AgentReport::default()
            })
        });
        AgentState {
            session: 1,
            connected,
            member: String::new(),
            labels: Default::default(),
            address: None,
            agent_version: String::new(),
            driver: String::new(),
            capabilities: Vec::new(),
            last_seen: Instant::now(),
            last_seen_time: Time(chrono::Utc::now()),
            applied: Some(Published {
                version: 1,
                digest: String::new(),
                plan: Arc::new(plan),
            }),
            rule_errors: Vec::new(),
            report,
        }
    }

    #[test]
    fn never_applied_is_never_serving() {
        let a = agent(None, Some(1), true);
        let state = serving(&key(), &traffic(0), AgentKnowledge::Connected(&a), None, 0);
        assert_eq!(state, None);
        assert_eq!(
            serving(&key(), &traffic(0), AgentKnowledge::Restoring, None, 0),
            None
        );
    }

    #[test]
    fn a_pending_generation_keeps_the_previous_serving_state() {
        // The agent applied generation 1 and reported it healthy; the hub now wants 2.
        let a = agent(Some(1), Some(1), true);
        let state = serving(&key(), &traffic(30), AgentKnowledge::Connected(&a), None, 0).unwrap();
        assert_eq!(state.applied_generation, 1);
        assert_eq!(state.healthy, Some(true));
        assert!(state.routable(0));
    }

    #[test]
    fn a_removed_share_stops_serving() {
        let a = agent(None, None, true);
        let previous = Serving {
            applied_generation: 1,
            healthy: Some(true),
            ..Serving::default()
        };
        let state = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Connected(&a),
            Some(&previous),
            0,
        );
        assert_eq!(state, None);
    }

    #[test]
    fn restoring_keeps_the_persisted_state_and_a_lost_agent_is_unhealthy() {
        let previous = Serving {
            applied_generation: 4,
            addresses: vec![Address::ip("127.0.0.12".parse().unwrap())],
            healthy: Some(true),
            held_until_ms: None,
            was_healthy: true,
            rules: Vec::new(),
            anycast: vec![AnycastRouteStatus {
                address: "192.0.2.10".parse().unwrap(),
                announced: true,
                reason: "healthy".into(),
            }],
        };
        let restored = serving(
            &key(),
            &traffic(30),
            AgentKnowledge::Restoring,
            Some(&previous),
            10,
        )
        .unwrap();
        assert_eq!(restored, previous);
        let offline = serving(
            &key(),
            &traffic(30),
            AgentKnowledge::Unknown,
            Some(&previous),
            10,
        )
        .unwrap();
        assert_eq!(offline.healthy, Some(false));
        assert_eq!(offline.addresses, previous.addresses);
        // Lost before reporting anything: the routes last known count as withdrawn.
        let mut lost = agent(Some(4), Some(1), false);
        lost.report = None;
        let state = serving(
            &key(),
            &traffic(30),
            AgentKnowledge::Lost(&lost),
            Some(&previous),
            10,
        )
        .unwrap();
        assert_eq!(state.healthy, Some(false));
        assert_eq!(
            state.anycast,
            vec![AnycastRouteStatus {
                address: "192.0.2.10".parse().unwrap(),
                announced: false,
                reason: AGENT_GONE.into(),
            }],
            "a lost agent's announced routes count as withdrawn"
        );
    }

    #[test]
    fn a_lost_agent_keeps_its_last_words_and_its_announced_routes_count_withdrawn() {
        let speaker = Some(SpeakerReport {
            up: true,
            peers: 1,
            established_peers: 1,
            message: String::new(),
        });
        // Its last report (SIGTERM's) arrived just before the session ended, with no
        // pass in between: it wins over what the previous pass saw.
        let mut drained = anycast_agent(
            vec![
                route("192.0.2.10", false, "withdrawn: draining (SIGTERM)"),
                route("192.0.2.11", false, "withdrawn: draining (SIGTERM)"),
            ],
            speaker.clone(),
        );
        drained.connected = false;
        let connected = anycast_agent(
            vec![
                route("192.0.2.10", true, "announced: applied and healthy"),
                route("192.0.2.11", true, "announced: applied and healthy"),
            ],
            speaker.clone(),
        );
        let before = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Connected(&connected),
            None,
            0,
        )
        .unwrap();
        let state = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Lost(&drained),
            Some(&before),
            1,
        )
        .unwrap();
        assert!(state.anycast.iter().all(|r| !r.announced));
        assert!(
            state
                .anycast
                .iter()
                .all(|r| r.reason == "withdrawn: draining (SIGTERM)"),
            "{:?}",
            state.anycast
        );
        // Killed: its last report said announced, which no longer holds.
        let mut killed = connected.clone();
        killed.connected = false;
        let state = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Lost(&killed),
            Some(&before),
            2,
        )
        .unwrap();
        assert!(
            state
                .anycast
                .iter()
                .all(|r| !r.announced && r.reason == AGENT_GONE),
            "{:?}",
            state.anycast
        );
    }

    fn route(address: &str, announced: bool, reason: &str) -> AnycastRoute {
        AnycastRoute {
            address: address.parse().unwrap(),
            announced,
            reason: reason.into(),
        }
    }

    /// [`agent`] (generation 1, healthy, connected) whose share has the anycast addresses
    /// 192.0.2.10 and 192.0.2.11, reporting `routes` and `speaker`.
    fn anycast_agent(routes: Vec<AnycastRoute>, speaker: Option<SpeakerReport>) -> AgentState {
        let mut a = agent(Some(1), Some(1), true);
        let applied = a.applied.as_mut().unwrap();
        let mut share = (**applied.plan.ingresses.get(&key()).unwrap()).clone();
        share.anycast_addresses =
            vec!["192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap()];
        let mut plan = ClusterPlan::default();
        plan.ingresses.insert(key(), share);
        applied.plan = Arc::new(plan);
        let mut report = (**a.report.as_ref().unwrap()).clone();
        report.ingresses[0].anycast = routes;
        report.speaker = speaker;
        a.report = Some(Arc::new(report));
        a
    }

    #[test]
    fn anycast_routes_come_from_the_report_and_stand_until_the_next_one() {
        let a = anycast_agent(
            vec![
                route("192.0.2.10", true, "healthy"),
                route("192.0.2.11", false, "backend echo:7 has no ready endpoint"),
            ],
            Some(SpeakerReport {
                up: true,
                peers: 1,
                established_peers: 1,
                message: String::new(),
            }),
        );
        let first = serving(&key(), &traffic(0), AgentKnowledge::Connected(&a), None, 0).unwrap();
        assert_eq!(
            first.anycast,
            vec![
                AnycastRouteStatus {
                    address: "192.0.2.10".parse().unwrap(),
                    announced: true,
                    reason: "healthy".into(),
                },
                AnycastRouteStatus {
                    address: "192.0.2.11".parse().unwrap(),
                    announced: false,
                    reason: "backend echo:7 has no ready endpoint".into(),
                },
            ]
        );
        // Connected, but no report of the share since (a reconnect): what was known stands.
        let mut quiet = a.clone();
        quiet.report = None;
        let next = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Connected(&quiet),
            Some(&first),
            1,
        )
        .unwrap();
        assert_eq!(next.anycast, first.anycast);
        // An agent without BGP state: none.
        let plain = anycast_agent(Vec::new(), None);
        let none = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Connected(&plain),
            Some(&first),
            2,
        )
        .unwrap();
        assert!(none.anycast.is_empty());
        // An agent with a speaker that reports one address of two: the other is not
        // announced (it is not "no BGP state").
        let partial = anycast_agent(
            vec![route("192.0.2.10", true, "announced: applied and healthy")],
            Some(SpeakerReport {
                up: true,
                peers: 1,
                established_peers: 1,
                message: String::new(),
            }),
        );
        let state = serving(
            &key(),
            &traffic(0),
            AgentKnowledge::Connected(&partial),
            None,
            3,
        )
        .unwrap();
        assert_eq!(state.anycast.len(), 2);
        assert!(!state.anycast[1].announced);
        assert_eq!(
            state.anycast[1].reason,
            "withdrawn: its agent has not reported the route yet"
        );
    }

    #[test]
    fn a_speaker_down_withdraws_every_route_of_the_share() {
        let a = anycast_agent(
            vec![route("192.0.2.10", true, "healthy")],
            Some(SpeakerReport {
                up: false,
                peers: 1,
                established_peers: 0,
                message: "gobgpd at 127.0.0.1:50051: connection refused".into(),
            }),
        );
        let state = serving(&key(), &traffic(0), AgentKnowledge::Connected(&a), None, 0).unwrap();
        let why =
            "withdrawn: the BGP speaker is down: gobgpd at 127.0.0.1:50051: connection refused";
        assert_eq!(
            state.anycast,
            vec![
                AnycastRouteStatus {
                    address: "192.0.2.10".parse().unwrap(),
                    announced: false,
                    reason: why.into(),
                },
                AnycastRouteStatus {
                    address: "192.0.2.11".parse().unwrap(),
                    announced: false,
                    reason: why.into(),
                },
            ]
        );
    }

    #[test]
    fn a_recovered_cluster_is_held_for_the_failback_delay() {
        let down = agent(Some(1), Some(0), true);
        let up = agent(Some(1), Some(1), true);
        let t = traffic(30);
        let first = serving(&key(), &t, AgentKnowledge::Connected(&up), None, 0).unwrap();
        assert!(first.routable(0), "first health is not a recovery");
        let failed = serving(
            &key(),
            &t,
            AgentKnowledge::Connected(&down),
            Some(&first),
            1_000,
        )
        .unwrap();
        assert!(!failed.routable(1_000));
        let back = serving(
            &key(),
            &t,
            AgentKnowledge::Connected(&up),
            Some(&failed),
            2_000,
        )
        .unwrap();
        assert_eq!(back.held_until_ms, Some(32_000));
        assert!(!back.routable(31_999));
        let later = serving(
            &key(),
            &t,
            AgentKnowledge::Connected(&up),
            Some(&back),
            10_000,
        )
        .unwrap();
        assert_eq!(later.held_until_ms, Some(32_000));
        let done = serving(
            &key(),
            &t,
            AgentKnowledge::Connected(&up),
            Some(&later),
            32_000,
        )
        .unwrap();
        assert!(done.routable(32_000));
        assert_eq!(done.held_until_ms, None);
    }

    #[test]
    fn a_new_listener_turning_healthy_is_not_a_recovery() {
        // The first report comes before the first health checks passed.
        let starting = agent(Some(1), Some(0), true);
        let up = agent(Some(1), Some(1), true);
        let t = traffic(30);
        let first = serving(&key(), &t, AgentKnowledge::Connected(&starting), None, 0).unwrap();
        assert_eq!(first.healthy, Some(false));
        let ready = serving(
            &key(),
            &t,
            AgentKnowledge::Connected(&up),
            Some(&first),
            500,
        )
        .unwrap();
        assert!(
            ready.routable(500),
            "not held: it never served clients before"
        );
        assert!(ready.was_healthy);
    }

    #[test]
    fn failover_is_not_held_per_cluster() {
        let down = agent(Some(1), Some(0), true);
        let up = agent(Some(1), Some(1), true);
        let mut t = traffic(30);
        t.strategy.type_ = StrategyType::Failover;
        let failed = serving(&key(), &t, AgentKnowledge::Connected(&down), None, 0).unwrap();
        let back = serving(&key(), &t, AgentKnowledge::Connected(&up), Some(&failed), 1).unwrap();
        assert!(back.routable(1));
    }
}
