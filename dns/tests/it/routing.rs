//! The routing strategies through the public API of `fedingress_dns::routing`.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use fedingress_api::ingress::{
    AnycastRouteStatus, Strategy, StrategyType, Traffic, WhenAllUnhealthy,
};
use fedingress_dns::location::{LocationEntry, Locator, RttRow, RttTable};
use fedingress_dns::routing::{
    Answer, ClientInfo, Decision, FailoverState, PointRouter, RouteKey, anycast_answer, decide,
    distance_km, failover_step, next_failover_change_ms, pick_weighted,
};
use fedingress_dns::{ClusterView, Location};

fn loc(region: &str, latitude: f64, longitude: f64) -> Location {
    Location {
        region: region.to_owned(),
        latitude,
        longitude,
    }
}

fn cluster(name: &str, location: Location, ip: &str) -> ClusterView {
    ClusterView {
        name: name.to_owned(),
        location,
        healthy: true,
        cordoned: false,
        ips: vec![ip.parse().unwrap()],
        hostnames: vec![],
        load: 0.0,
        capacity: None,
        cloud: Default::default(),
        anycast: Vec::new(),
    }
}

/// Four clusters, deliberately not in name order.
fn fleet() -> Vec<ClusterView> {
    vec![
        cluster("us-west", loc("us-west1", 45.6, -121.2), "127.0.0.13"),
        cluster("eu-west", loc("europe-west1", 50.45, 3.82), "127.0.0.11"),
        cluster("asia", loc("asia-southeast1", 1.35, 103.82), "127.0.0.14"),
        cluster("us-east", loc("us-east4", 39.0, -77.5), "127.0.0.12"),
    ]
}

fn set(clusters: &mut [ClusterView], name: &str, f: impl FnOnce(&mut ClusterView)) {
    f(clusters.iter_mut().find(|c| c.name == name).unwrap());
}

fn traffic(strategy: Strategy) -> Traffic {
    Traffic {
        strategy,
        ..Traffic::default()
    }
}

fn strategy(type_: StrategyType) -> Strategy {
    Strategy {
        type_,
        ..Strategy::default()
    }
}

fn paris() -> ClientInfo {
    ClientInfo {
        address: Some("10.0.0.1".parse().unwrap()),
        location: loc("fr", 48.8566, 2.3522),
        rtt: None,
    }
}

fn new_york() -> ClientInfo {
    ClientInfo {
        address: None,
        location: loc("us-ny", 40.71, -74.0),
        rtt: None,
    }
}

fn run(t: &Traffic, clusters: &[ClusterView], client: &ClientInfo) -> Decision {
    let decision = decide(t, clusters, client, &FailoverState::default());
    check_invariants(&decision, clusters);
    decision
}

/// What every decision must satisfy.
fn check_invariants(decision: &Decision, clusters: &[ClusterView]) {
    let mut names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    let reasons: Vec<&str> = decision
        .reasons
        .iter()
        .map(|r| r.cluster.as_str())
        .collect();
    assert_eq!(reasons, names, "one reason per placed cluster, sorted");
    for name in decision.answer.clusters() {
        let view = clusters.iter().find(|c| c.name == name).unwrap();
        assert!(!view.cordoned, "cordoned {name} answered: {decision:#?}");
        let reason = decision.reasons.iter().find(|r| r.cluster == name).unwrap();
        assert!(reason.included, "{name} answered but not marked included");
    }
    for reason in &decision.reasons {
        assert!(!reason.detail.is_empty());
        if reason.included && !matches!(decision.answer, Answer::Addresses(_)) {
            assert!(
                decision
                    .answer
                    .clusters()
                    .contains(&reason.cluster.as_str())
            );
        }
    }
    if let Answer::Weighted(shares) = &decision.answer {
        let total: f64 = shares.iter().map(|(_, s)| s).sum();
        assert!((total - 1.0).abs() < 1e-9, "shares sum to {total}");
        assert!(shares.iter().all(|(_, s)| *s > 0.0));
    }
}

fn reason<'a>(decision: &'a Decision, name: &str) -> &'a fedingress_dns::routing::Reason {
    decision.reasons.iter().find(|r| r.cluster == name).unwrap()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn shares(answer: &Answer) -> BTreeMap<String, f64> {
    match answer {
        Answer::Weighted(shares) => shares.iter().cloned().collect(),
        other => panic!("expected Weighted, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Geometry

#[test]
fn haversine_distances() {
    let london = loc("", 51.5074, -0.1278);
    let paris = loc("", 48.8566, 2.3522);
    let d = distance_km(&london, &paris);
    assert!((d - 343.5).abs() < 1.0, "{d}");
    assert_eq!(distance_km(&paris, &paris), 0.0);
    // Antipodes: half the circumference.
    let d = distance_km(&loc("", 0.0, 0.0), &loc("", 0.0, 180.0));
    assert!((d - std::f64::consts::PI * 6371.0).abs() < 1e-6);
}

// ---------------------------------------------------------------------------------------
// RoundRobin

#[test]
fn round_robin_answers_every_healthy_cluster_sorted() {
    let mut clusters = fleet();
    set(&mut clusters, "asia", |c| c.healthy = false);
    set(&mut clusters, "us-west", |c| c.cordoned = true);
    let d = run(&traffic(Strategy::default()), &clusters, &paris());
    assert_eq!(d.strategy, StrategyType::RoundRobin);
    assert_eq!(d.answer, Answer::All(names(&["eu-west", "us-east"])));
    assert_eq!(reason(&d, "asia").detail, "unhealthy");
    assert_eq!(reason(&d, "us-west").detail, "cordoned");
    assert!(d.summary.starts_with("RoundRobin: "));
}

#[test]
fn healthy_cluster_without_address_is_left_out() {
    let mut clusters = fleet();
    set(&mut clusters, "asia", |c| c.ips.clear());
    let d = run(&traffic(Strategy::default()), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::All(names(&["eu-west", "us-east", "us-west"]))
    );
    assert!(reason(&d, "asia").detail.contains("no address"));
    // A host name is an address.
    set(&mut clusters, "asia", |c| {
        c.hostnames = vec!["lb.example.com".to_owned()]
    });
    let d = run(&traffic(Strategy::default()), &clusters, &paris());
    assert_eq!(d.answer.clusters().len(), 4);
}

// ---------------------------------------------------------------------------------------
// Weighted

fn weighted(weights: &[(&str, i32)]) -> Traffic {
    traffic(Strategy {
        type_: StrategyType::Weighted,
        weights: Some(weights.iter().map(|(n, w)| ((*n).to_owned(), *w)).collect()),
        ..Strategy::default()
    })
}

#[test]
fn weighted_shares_follow_weights_and_sum_to_one() {
    let t = weighted(&[("eu-west", 3), ("us-east", 1), ("us-west", 0)]);
    let d = run(&t, &fleet(), &paris());
    let s = shares(&d.answer);
    assert_eq!(s.len(), 2);
    assert_eq!(s["eu-west"], 0.75);
    assert_eq!(s["us-east"], 0.25);
    assert_eq!(reason(&d, "eu-west").detail, "weight 3 of 4 (75%)");
    assert_eq!(reason(&d, "eu-west").weight, Some(0.75));
    assert_eq!(reason(&d, "us-west").detail, "healthy but has weight 0");
    assert_eq!(reason(&d, "asia").detail, "healthy but has no weight");
    assert!(!reason(&d, "asia").included);
}

#[test]
fn weighted_redistributes_an_unhealthy_clusters_weight() {
    let t = weighted(&[("eu-west", 3), ("us-east", 1), ("asia", 2)]);
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| c.healthy = false);
    let d = run(&t, &clusters, &paris());
    let s = shares(&d.answer);
    assert!((s["us-east"] - 1.0 / 3.0).abs() < 1e-12);
    assert!((s["asia"] - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(
        reason(&d, "eu-west").detail,
        "unhealthy: its weight 3 goes to the others"
    );
}

#[test]
fn weighted_with_no_weighted_healthy_cluster_is_all_unhealthy() {
    let t = weighted(&[("eu-west", 3)]);
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| c.healthy = false);
    set(&mut clusters, "asia", |c| c.cordoned = true);
    let d = run(&t, &clusters, &paris());
    // ServeAll: every non-cordoned placed cluster, failing open.
    assert_eq!(
        d.answer,
        Answer::All(names(&["eu-west", "us-east", "us-west"]))
    );
    assert!(d.summary.contains("failing open"), "{}", d.summary);
    assert!(reason(&d, "us-east").detail.contains("failing open"));
    assert!(!reason(&d, "asia").included);

    let t = Traffic {
        when_all_unhealthy: WhenAllUnhealthy::NoData,
        ..t
    };
    let d = run(&t, &clusters, &paris());
    assert_eq!(d.answer, Answer::NoData);
    assert!(d.summary.contains("failing closed"));
}

#[test]
fn pick_weighted_follows_the_shares() {
    let shares = vec![
        ("a".to_owned(), 0.75),
        ("b".to_owned(), 0.25),
        ("zero".to_owned(), 0.0),
    ];
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    let n = 10_000;
    for k in 0..n {
        let x = (f64::from(k) + 0.5) / f64::from(n);
        *counts
            .entry(pick_weighted(&shares, x).unwrap())
            .or_default() += 1;
    }
    assert_eq!(counts["a"], 7500);
    assert_eq!(counts["b"], 2500);
    assert!(!counts.contains_key("zero"));
    assert_eq!(pick_weighted(&shares, 1.0), Some("b"));
    assert_eq!(pick_weighted(&shares, -3.0), Some("a"));
    assert_eq!(pick_weighted(&[], 0.5), None);
}

// ---------------------------------------------------------------------------------------
// Geo

#[test]
fn geo_picks_the_nearest_healthy_cluster() {
    let t = traffic(strategy(StrategyType::Geo));
    let d = run(&t, &fleet(), &paris());
    assert_eq!(d.answer, Answer::All(names(&["eu-west"])));
    let eu = reason(&d, "eu-west");
    assert!(eu.included);
    let eu_km = eu.distance_km.unwrap();
    assert!((200.0..300.0).contains(&eu_km), "{eu_km}");
    let us = reason(&d, "us-east");
    assert!(
        us.detail.starts_with("farther than eu-west ("),
        "{}",
        us.detail
    );
    assert!(us.distance_km.unwrap() > eu_km);

    let d = run(&t, &fleet(), &new_york());
    assert_eq!(d.answer, Answer::All(names(&["us-east"])));
    assert!(
        d.summary
            .contains("us-east is the nearest healthy cluster to the client in us-ny")
    );
}

#[test]
fn geo_skips_unhealthy_and_cordoned_and_breaks_ties_by_name() {
    let t = traffic(strategy(StrategyType::Geo));
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| c.healthy = false);
    set(&mut clusters, "us-east", |c| c.cordoned = true);
    let d = run(&t, &clusters, &paris());
    // From Paris, us-west is nearer than asia? Oregon ~8,300 km, Singapore ~10,700 km.
    assert_eq!(d.answer, Answer::All(names(&["us-west"])));
    assert_eq!(reason(&d, "eu-west").detail, "unhealthy");
    assert!(reason(&d, "eu-west").distance_km.is_some());

    let same = loc("x", 10.0, 10.0);
    let twins = vec![
        cluster("b", same.clone(), "127.0.0.2"),
        cluster("a", same.clone(), "127.0.0.1"),
    ];
    let d = run(&t, &twins, &paris());
    assert_eq!(d.answer, Answer::All(names(&["a"])));
}

// ---------------------------------------------------------------------------------------
// Overflow

fn overflow(threshold: Option<f64>) -> Traffic {
    traffic(Strategy {
        type_: StrategyType::Overflow,
        overflow_threshold: threshold,
        ..Strategy::default()
    })
}

#[test]
fn overflow_sends_everything_to_the_nearest_with_room() {
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| {
        c.capacity = Some(1000.0);
        c.load = 500.0;
    });
    let d = run(&overflow(None), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::Weighted(vec![("eu-west".to_owned(), 1.0)])
    );
    let eu = reason(&d, "eu-west");
    assert_eq!(eu.load, Some(500.0));
    assert!(
        eu.detail.contains("within 80% of capacity 1000 (800)"),
        "{}",
        eu.detail
    );
    let us = reason(&d, "us-east");
    assert!(!us.included);
    assert!(
        us.detail.contains("not needed: eu-west has room"),
        "{}",
        us.detail
    );
}

#[test]
fn overflow_spills_a_proportional_share() {
    let mut clusters = fleet();
    // Over 80% of 1000 by 1000/800: keeps 800/1000 = 80%, spills 20%.
    set(&mut clusters, "eu-west", |c| {
        c.capacity = Some(1000.0);
        c.load = 1000.0;
    });
    let d = run(&overflow(None), &clusters, &paris());
    let s = shares(&d.answer);
    assert_eq!(s.len(), 2);
    assert!((s["eu-west"] - 0.8).abs() < 1e-12);
    // The next nearest from Paris is us-east (no capacity: never overflows).
    assert!((s["us-east"] - 0.2).abs() < 1e-12);
    let eu = reason(&d, "eu-west");
    assert!(
        eu.detail
            .contains("load 1000 over 80% of capacity 1000 (800)"),
        "{}",
        eu.detail
    );
    assert!(eu.detail.contains("20% spills to us-east"), "{}", eu.detail);
    // Nearest first in the answer.
    match &d.answer {
        Answer::Weighted(list) => assert_eq!(list[0].0, "eu-west"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn overflow_cascades_and_the_last_takes_the_rest() {
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| {
        c.capacity = Some(1000.0);
        c.load = 2000.0; // keeps 50% of 1.0 at threshold 1.0
    });
    set(&mut clusters, "us-east", |c| {
        c.capacity = Some(1000.0);
        c.load = 4000.0; // keeps 25% of the remaining 0.5 = 0.125
    });
    set(&mut clusters, "us-west", |c| {
        c.capacity = Some(0.0); // keeps nothing: all of the remaining 0.375 spills
        c.load = 10.0;
    });
    // asia is last: takes the remaining 0.375 even though it is overloaded.
    set(&mut clusters, "asia", |c| {
        c.capacity = Some(10.0);
        c.load = 1e6;
    });
    let d = run(&overflow(Some(1.0)), &clusters, &paris());
    let s = shares(&d.answer);
    assert!((s["eu-west"] - 0.5).abs() < 1e-12);
    assert!((s["us-east"] - 0.125).abs() < 1e-12);
    assert!(!s.contains_key("us-west"), "zero shares are omitted");
    assert!((s["asia"] - 0.375).abs() < 1e-12);
    assert!(!reason(&d, "us-west").included);
    assert_eq!(reason(&d, "us-west").weight, Some(0.0));
    assert!(
        reason(&d, "asia")
            .detail
            .contains("takes the remaining 37.5%")
    );
}

#[test]
fn overflow_skips_unhealthy_clusters() {
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| {
        c.healthy = false;
        c.capacity = Some(1.0);
        c.load = 1e9;
    });
    let d = run(&overflow(None), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::Weighted(vec![("us-east".to_owned(), 1.0)])
    );
}

// ---------------------------------------------------------------------------------------
// Latency

fn with_rtt(client: ClientInfo, rtt: &[(&str, f64)]) -> ClientInfo {
    ClientInfo {
        rtt: Some(rtt.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect()),
        ..client
    }
}

#[test]
fn latency_picks_the_lowest_rtt() {
    let t = traffic(strategy(StrategyType::Latency));
    // Measured: from Paris, us-east is faster than eu-west (say, a bad peering).
    let client = with_rtt(
        paris(),
        &[("eu-west", 50.0), ("us-east", 10.0), ("nowhere", 1.0)],
    );
    let d = run(&t, &fleet(), &client);
    assert_eq!(d.answer, Answer::All(names(&["us-east"])));
    assert_eq!(reason(&d, "us-east").rtt_ms, Some(10.0));
    assert_eq!(
        reason(&d, "eu-west").detail,
        "slower than us-east (50 ms vs 10 ms)"
    );
    assert!(reason(&d, "asia").detail.contains("not measured"));

    let mut clusters = fleet();
    set(&mut clusters, "us-east", |c| c.healthy = false);
    let d = run(&t, &clusters, &client);
    assert_eq!(d.answer, Answer::All(names(&["eu-west"])));
}

#[test]
fn latency_falls_back_to_geo() {
    let t = traffic(strategy(StrategyType::Latency));
    // No RTT row at all.
    let d = run(&t, &fleet(), &new_york());
    assert_eq!(d.strategy, StrategyType::Latency);
    assert_eq!(d.answer, Answer::All(names(&["us-east"])));
    assert!(d.summary.contains("Geo fallback"), "{}", d.summary);
    assert!(reason(&d, "us-east").distance_km.is_some());
    // A row that measures only unhealthy clusters.
    let mut clusters = fleet();
    set(&mut clusters, "asia", |c| c.healthy = false);
    let client = with_rtt(paris(), &[("asia", 5.0)]);
    let d = run(&t, &clusters, &client);
    assert_eq!(d.answer, Answer::All(names(&["eu-west"])));
    assert!(
        d.summary
            .contains("measures no healthy cluster; Geo fallback"),
        "{}",
        d.summary
    );
}

#[test]
fn client_info_from_the_locator() {
    let locator = Locator::new(
        vec![LocationEntry {
            cidr: "10.0.0.0/8".parse().unwrap(),
            location: loc("ny", 40.71, -74.0),
        }],
        loc("default", 50.0, 4.0),
        None,
    )
    .unwrap()
    .with_rtt(
        RttTable::new(vec![RttRow {
            cidr: "10.1.0.0/16".parse().unwrap(),
            rtt_ms: BTreeMap::from([("asia".to_owned(), 3.0)]),
        }])
        .unwrap(),
    );
    let t = traffic(strategy(StrategyType::Latency));
    let address: IpAddr = "10.1.2.3".parse().unwrap();
    let client = ClientInfo::from_located(Some(address), &locator.locate(address));
    assert_eq!(
        run(&t, &fleet(), &client).answer,
        Answer::All(names(&["asia"]))
    );
    let address: IpAddr = "10.2.2.3".parse().unwrap();
    let client = ClientInfo::from_located(Some(address), &locator.locate(address));
    assert_eq!(
        run(&t, &fleet(), &client).answer,
        Answer::All(names(&["us-east"]))
    );
    // Every pre-encodable bucket decides without an address.
    for located in locator.buckets() {
        let client = ClientInfo::from_located(None, &located);
        assert_eq!(run(&t, &fleet(), &client).answer.clusters().len(), 1);
    }
}

// ---------------------------------------------------------------------------------------
// Failover

fn failover(delay_seconds: i32) -> Traffic {
    Traffic {
        failback_delay_seconds: delay_seconds,
        ..traffic(Strategy {
            type_: StrategyType::Failover,
            failover_order: Some(vec![
                vec!["eu-west".to_owned(), "not-placed".to_owned()],
                vec!["us-east".to_owned(), "us-west".to_owned()],
                vec!["asia".to_owned()],
            ]),
            ..Strategy::default()
        })
    }
}

fn health(up: &[&str]) -> Vec<ClusterView> {
    let mut clusters = fleet();
    for c in &mut clusters {
        c.healthy = up.contains(&c.name.as_str());
    }
    clusters
}

#[test]
fn failover_answers_the_active_tier() {
    let t = failover(30);
    let all = health(&["eu-west", "us-east", "us-west", "asia"]);
    let state = failover_step(&t, &all, &FailoverState::default(), 0);
    assert_eq!(state, FailoverState::default());
    let d = decide(&t, &all, &paris(), &state);
    check_invariants(&d, &all);
    assert_eq!(d.answer, Answer::All(names(&["eu-west"])));
    assert_eq!(
        reason(&d, "eu-west").detail,
        "healthy in failoverOrder[0], the active tier"
    );
    assert!(
        reason(&d, "us-east")
            .detail
            .contains("standby in failoverOrder[1]")
    );

    // A placed cluster missing from failoverOrder is never answered (except failing open).
    let mut extra = all.clone();
    extra.push(cluster("spare", loc("x", 0.0, 0.0), "127.0.0.99"));
    let d = decide(&t, &extra, &paris(), &state);
    check_invariants(&d, &extra);
    assert_eq!(
        reason(&d, "spare").detail,
        "healthy but not in failoverOrder"
    );
}

#[test]
fn failover_moves_down_at_once_and_back_only_after_the_delay() {
    let t = failover(30);
    let all_up = health(&["eu-west", "us-east", "us-west", "asia"]);
    let eu_down = health(&["us-east", "us-west", "asia"]);

    let s0 = failover_step(&t, &all_up, &FailoverState::default(), 0);
    // eu-west fails: move down immediately.
    let s1 = failover_step(&t, &eu_down, &s0, 1_000);
    assert_eq!(s1.active_tier, 1);
    assert_eq!(next_failover_change_ms(&t, &s1), None);
    let d = decide(&t, &eu_down, &paris(), &s1);
    assert_eq!(d.answer, Answer::All(names(&["us-east", "us-west"])));

    // eu-west recovers at 5 s: pending, due at 35 s.
    let s2 = failover_step(&t, &all_up, &s1, 5_000);
    assert_eq!(s2.active_tier, 1);
    assert_eq!(s2.better_tier_healthy_since_ms, Some(5_000));
    assert_eq!(next_failover_change_ms(&t, &s2), Some(35_000));
    let d = decide(&t, &all_up, &paris(), &s2);
    check_invariants(&d, &all_up);
    assert_eq!(d.answer, Answer::All(names(&["us-east", "us-west"])));
    assert!(
        reason(&d, "eu-west").detail.contains("failback pending"),
        "{}",
        reason(&d, "eu-west").detail
    );

    // Still pending just before the delay, repeated steps keep the start time.
    let s3 = failover_step(&t, &all_up, &s2, 20_000);
    assert_eq!(s3, s2);
    let s4 = failover_step(&t, &all_up, &s3, 34_999);
    assert_eq!(s4.active_tier, 1);
    // Due: fail back.
    let s5 = failover_step(&t, &all_up, &s4, 35_000);
    assert_eq!(s5, FailoverState::default());
    assert_eq!(next_failover_change_ms(&t, &s5), None);
    assert_eq!(
        decide(&t, &all_up, &paris(), &s5).answer,
        Answer::All(names(&["eu-west"]))
    );
}

#[test]
fn a_flapping_primary_does_not_get_traffic_back() {
    let t = failover(30);
    let up = health(&["eu-west", "us-east", "us-west", "asia"]);
    let down = health(&["us-east", "us-west", "asia"]);
    let mut state = failover_step(&t, &down, &FailoverState::default(), 0);
    assert_eq!(state.active_tier, 1);
    // Up 10 s, down 10 s, for five minutes: never 30 s in a row.
    let mut switches = 0;
    let mut now = 0;
    for cycle in 0..15 {
        for (views, span) in [(&up, 10_000), (&down, 10_000)] {
            now += span;
            let next = failover_step(&t, views, &state, now);
            if next.active_tier != state.active_tier {
                switches += 1;
            }
            state = next;
            assert_eq!(state.active_tier, 1, "cycle {cycle} at {now}");
        }
    }
    assert_eq!(switches, 0);
    // Once it stays up, it gets traffic back after the delay and not before.
    now += 1;
    state = failover_step(&t, &up, &state, now);
    let since = now;
    assert_eq!(next_failover_change_ms(&t, &state), Some(since + 30_000));
    state = failover_step(&t, &up, &state, since + 29_999);
    assert_eq!(state.active_tier, 1);
    state = failover_step(&t, &up, &state, since + 30_000);
    assert_eq!(state.active_tier, 0);
}

#[test]
fn failover_forced_moves_go_to_the_best_healthy_tier() {
    let t = failover(30);
    // Active tier 1, asia only healthy below: tier 1 dies → tier 2.
    let s = FailoverState {
        active_tier: 1,
        ..FailoverState::default()
    };
    let s = failover_step(&t, &health(&["asia"]), &s, 0);
    assert_eq!(s.active_tier, 2);
    // eu-west recovering while tier 2 is active: pending for tier 0...
    let s = failover_step(&t, &health(&["eu-west", "asia"]), &s, 1_000);
    assert_eq!((s.active_tier, s.failback_tier), (2, Some(0)));
    // ...then tier 2 dies: forced move, straight to the best healthy tier.
    let s = failover_step(&t, &health(&["eu-west"]), &s, 2_000);
    assert_eq!(s, FailoverState::default());
}

#[test]
fn failover_restarts_the_wait_when_the_target_tier_changes() {
    let t = failover(30);
    let s = FailoverState {
        active_tier: 2,
        ..FailoverState::default()
    };
    // Tier 1 healthy since 0.
    let s = failover_step(&t, &health(&["us-east", "asia"]), &s, 0);
    assert_eq!(
        (s.failback_tier, s.better_tier_healthy_since_ms),
        (Some(1), Some(0))
    );
    // Tier 0 recovers at 25 s: the target becomes tier 0, its own wait starts.
    let s = failover_step(&t, &health(&["eu-west", "us-east", "asia"]), &s, 25_000);
    assert_eq!(
        (s.failback_tier, s.better_tier_healthy_since_ms),
        (Some(0), Some(25_000))
    );
    let s = failover_step(&t, &health(&["eu-west", "us-east", "asia"]), &s, 40_000);
    assert_eq!(s.active_tier, 2);
    let s = failover_step(&t, &health(&["eu-west", "us-east", "asia"]), &s, 55_000);
    assert_eq!(s.active_tier, 0);
}

#[test]
fn failover_with_zero_delay_fails_back_at_once() {
    let t = failover(0);
    let s = failover_step(&t, &health(&["asia"]), &FailoverState::default(), 0);
    assert_eq!(s.active_tier, 2);
    let s = failover_step(&t, &health(&["eu-west", "asia"]), &s, 1);
    assert_eq!(s.active_tier, 0);
}

#[test]
fn failover_with_nothing_healthy() {
    let t = failover(30);
    let none = health(&[]);
    let s = failover_step(&t, &none, &FailoverState::default(), 0);
    assert_eq!(s.active_tier, 0);
    let d = decide(&t, &none, &paris(), &s);
    check_invariants(&d, &none);
    assert_eq!(d.answer.clusters().len(), 4, "ServeAll fails open");
    assert!(
        d.summary
            .contains("no tier of failoverOrder has a healthy cluster")
    );
    // The first tier to recover gets traffic at once.
    let s = failover_step(&t, &health(&["us-west"]), &s, 1_000);
    assert_eq!(s.active_tier, 1);
    let t = Traffic {
        when_all_unhealthy: WhenAllUnhealthy::NoData,
        ..t
    };
    assert_eq!(decide(&t, &none, &paris(), &s).answer, Answer::NoData);
}

#[test]
fn decide_with_a_stale_failover_state_uses_the_best_healthy_tier() {
    let t = failover(30);
    let eu_down = health(&["us-east", "asia"]);
    let d = decide(&t, &eu_down, &paris(), &FailoverState::default());
    assert_eq!(d.answer, Answer::All(names(&["us-east"])));
    // An out-of-range tier (failoverOrder shortened) too.
    let stale = FailoverState {
        active_tier: 7,
        ..FailoverState::default()
    };
    let d = decide(&t, &eu_down, &paris(), &stale);
    assert_eq!(d.answer, Answer::All(names(&["us-east"])));
    let s = failover_step(&t, &eu_down, &stale, 0);
    assert_eq!(s.active_tier, 1);
}

#[test]
fn failover_state_is_reset_for_other_strategies() {
    let t = traffic(Strategy::default());
    let s = FailoverState {
        active_tier: 2,
        better_tier_healthy_since_ms: Some(1),
        failback_tier: Some(0),
    };
    assert_eq!(failover_step(&t, &fleet(), &s, 5), FailoverState::default());
    assert_eq!(next_failover_change_ms(&t, &s), None);
}

#[test]
fn failover_state_round_trips_through_json() {
    let s = FailoverState {
        active_tier: 1,
        better_tier_healthy_since_ms: Some(5_000),
        failback_tier: Some(0),
    };
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(
        json,
        r#"{"activeTier":1,"betterTierHealthySinceMs":5000,"failbackTier":0}"#
    );
    assert_eq!(serde_json::from_str::<FailoverState>(&json).unwrap(), s);
    assert_eq!(
        serde_json::from_str::<FailoverState>(r#"{"activeTier":0}"#).unwrap(),
        FailoverState::default()
    );
}

// ---------------------------------------------------------------------------------------
// Cordon and whenAllUnhealthy across strategies

fn every_strategy() -> Vec<Traffic> {
    vec![
        traffic(Strategy::default()),
        weighted(&[("eu-west", 1), ("us-east", 1), ("us-west", 1), ("asia", 1)]),
        failover(30),
        traffic(strategy(StrategyType::Geo)),
        traffic(strategy(StrategyType::Latency)),
        overflow(None),
    ]
}

#[test]
fn cordoned_clusters_never_answer_even_failing_open() {
    for t in every_strategy() {
        // All unhealthy, one cordoned: ServeAll answers the other three.
        let mut clusters = health(&[]);
        set(&mut clusters, "eu-west", |c| c.cordoned = true);
        let d = run(&t, &clusters, &paris());
        assert_eq!(
            d.answer,
            Answer::All(names(&["asia", "us-east", "us-west"])),
            "{:?}",
            t.strategy.type_
        );
        let detail = &reason(&d, "eu-west").detail;
        assert!(detail.starts_with("cordoned"), "{detail}");

        // Healthy but cordoned: never picked, even as the nearest.
        let mut clusters = fleet();
        set(&mut clusters, "eu-west", |c| c.cordoned = true);
        let d = run(&t, &clusters, &paris());
        assert!(
            !d.answer.clusters().contains(&"eu-west"),
            "{:?}",
            t.strategy.type_
        );
        assert!(!d.answer.clusters().is_empty());

        // Everything cordoned: nothing to serve, even with ServeAll.
        let mut clusters = fleet();
        for c in &mut clusters {
            c.cordoned = true;
        }
        let d = run(&t, &clusters, &paris());
        assert_eq!(d.answer, Answer::NoData, "{:?}", t.strategy.type_);
        assert!(d.summary.contains("cordoned"));
    }
}

#[test]
fn no_data_when_all_unhealthy_fails_closed() {
    for t in every_strategy() {
        let t = Traffic {
            when_all_unhealthy: WhenAllUnhealthy::NoData,
            ..t
        };
        let d = run(&t, &health(&[]), &paris());
        assert_eq!(d.answer, Answer::NoData, "{:?}", t.strategy.type_);
        assert!(d.reasons.iter().all(|r| !r.included));
        // One healthy cluster is enough to answer.
        let d = run(&t, &health(&["asia"]), &paris());
        assert_eq!(d.answer.clusters(), vec!["asia"], "{:?}", t.strategy.type_);
    }
}

#[test]
fn nothing_placed() {
    for t in every_strategy() {
        let d = run(&t, &[], &paris());
        assert_eq!(d.answer, Answer::NoData);
        assert!(d.reasons.is_empty());
        assert!(d.summary.contains("no cluster is placed"), "{}", d.summary);
    }
}

// ---------------------------------------------------------------------------------------
// Anycast

fn anycast() -> Traffic {
    traffic(Strategy {
        type_: StrategyType::Anycast,
        anycast_addresses: Some(vec!["192.0.2.10".to_owned(), "2001:db8::10".to_owned()]),
        ..Strategy::default()
    })
}

#[test]
fn anycast_answers_its_addresses_while_a_cluster_is_healthy() {
    let mut clusters = health(&["asia"]);
    set(&mut clusters, "asia", |c| c.ips.clear()); // Anycast needs no own address.
    let d = run(&anycast(), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::Addresses(vec![
            "192.0.2.10".parse().unwrap(),
            "2001:db8::10".parse().unwrap()
        ])
    );
    assert!(reason(&d, "asia").included);
    // No agent reports BGP state here: health alone counts, and the texts say so.
    assert_eq!(
        reason(&d, "asia").detail,
        "healthy; the agent reports no BGP announcement"
    );
    assert_eq!(reason(&d, "eu-west").detail, "unhealthy");
    assert!(!reason(&d, "eu-west").included);
}

fn route(address: &str, announced: bool, reason: &str) -> AnycastRouteStatus {
    AnycastRouteStatus {
        address: address.parse().unwrap(),
        announced,
        reason: reason.to_owned(),
    }
}

#[test]
fn anycast_counts_a_cluster_only_while_its_agent_reports_the_route_announced() {
    let mut clusters = fleet();
    set(&mut clusters, "eu-west", |c| {
        c.anycast = vec![
            route("192.0.2.10", true, "healthy"),
            route("2001:db8::10", true, "healthy"),
        ];
    });
    set(&mut clusters, "us-east", |c| {
        c.anycast = vec![
            route(
                "192.0.2.10",
                false,
                "withdrawn: backend echo:9000 has no ready endpoint",
            ),
            route(
                "2001:db8::10",
                false,
                "withdrawn: backend echo:9000 has no ready endpoint",
            ),
        ];
    });
    // Cordoned, and its agent has not withdrawn yet: not counted, and said so.
    set(&mut clusters, "us-west", |c| {
        c.cordoned = true;
        c.anycast = vec![
            route("192.0.2.10", true, "healthy"),
            route("2001:db8::10", true, "healthy"),
        ];
    });
    let d = run(&anycast(), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::Addresses(vec![
            "192.0.2.10".parse().unwrap(),
            "2001:db8::10".parse().unwrap()
        ])
    );
    let eu = reason(&d, "eu-west");
    assert!(eu.included);
    assert_eq!(eu.detail, "healthy: announces 192.0.2.10, 2001:db8::10");
    assert!(
        eu.anycast
            .iter()
            .all(|a| a.announcing && a.reported == Some(true))
    );
    let us = reason(&d, "us-east");
    assert!(!us.included, "a healthy cluster whose agent withdrew");
    assert_eq!(
        us.detail,
        "withdrawn: backend echo:9000 has no ready endpoint"
    );
    assert_eq!(us.anycast[0].reported, Some(false));
    let west = reason(&d, "us-west");
    assert!(!west.included);
    assert_eq!(
        west.detail,
        "cordoned; its agent still reports 192.0.2.10, 2001:db8::10 announced"
    );
    let asia = reason(&d, "asia");
    assert!(asia.included);
    assert_eq!(
        asia.detail,
        "healthy; the agent reports no BGP announcement"
    );
    assert_eq!(asia.anycast[0].reported, None);
    assert_eq!(
        d.summary,
        "Anycast: 192.0.2.10, 2001:db8::10 announced by asia, eu-west; asia counted from its \
         health alone (its agent reports no BGP state); the network (BGP) carries each \
         client to the nearest announcing site"
    );
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["reasons"][1]["anycast"][0]["address"], "192.0.2.10");
    assert_eq!(json["reasons"][1]["anycast"][0]["announcing"], true);
}

#[test]
fn anycast_answers_only_the_addresses_someone_announces() {
    let mut clusters = health(&["eu-west"]);
    set(&mut clusters, "eu-west", |c| {
        c.anycast = vec![
            route("192.0.2.10", true, "healthy"),
            route("2001:db8::10", false, "not configured on this site"),
        ];
    });
    set(&mut clusters, "us-east", |c| {
        c.anycast = vec![route("192.0.2.10", false, "backend down")];
    });
    let d = run(&anycast(), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::Addresses(vec!["192.0.2.10".parse().unwrap()])
    );
    // What DNS providers publish is the same.
    assert_eq!(
        anycast_answer(&anycast(), &clusters),
        vec!["192.0.2.10".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(
        reason(&d, "eu-west").detail,
        "healthy: announces 192.0.2.10; withdrawn 2001:db8::10: not configured on this site"
    );
    assert_eq!(
        reason(&d, "us-east").detail,
        "unhealthy; withdrawn: 192.0.2.10: backend down; 2001:db8::10: the agent reports no route for it"
    );
    assert!(
        d.summary
            .contains("192.0.2.10 announced by eu-west; 2001:db8::10 announced by no cluster"),
        "{}",
        d.summary
    );
}

#[test]
fn anycast_with_every_route_withdrawn_is_whenallunhealthy() {
    let mut clusters = fleet();
    for c in &mut clusters {
        c.anycast = vec![
            route(
                "192.0.2.10",
                false,
                "the BGP speaker is down: connection refused",
            ),
            route(
                "2001:db8::10",
                false,
                "the BGP speaker is down: connection refused",
            ),
        ];
    }
    let d = run(&anycast(), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::All(names(&["asia", "eu-west", "us-east", "us-west"])),
        "ServeAll: the clusters' own addresses"
    );
    assert!(
        d.summary
            .contains("no healthy cluster announces the anycast addresses"),
        "{}",
        d.summary
    );
    assert!(
        reason(&d, "eu-west")
            .detail
            .starts_with("withdrawn: the BGP speaker is down: connection refused"),
        "{}",
        reason(&d, "eu-west").detail
    );
    let t = Traffic {
        when_all_unhealthy: WhenAllUnhealthy::NoData,
        ..anycast()
    };
    assert_eq!(run(&t, &clusters, &paris()).answer, Answer::NoData);
}

#[test]
fn anycast_when_all_unhealthy() {
    // A healthy but cordoned cluster does not count.
    let mut clusters = health(&["asia"]);
    set(&mut clusters, "asia", |c| c.cordoned = true);
    let d = run(&anycast(), &clusters, &paris());
    assert_eq!(
        d.answer,
        Answer::All(names(&["eu-west", "us-east", "us-west"]))
    );
    let t = Traffic {
        when_all_unhealthy: WhenAllUnhealthy::NoData,
        ..anycast()
    };
    assert_eq!(run(&t, &clusters, &paris()).answer, Answer::NoData);
}

// ---------------------------------------------------------------------------------------
// Explain

#[test]
fn decisions_serialise_for_explain() {
    let t = weighted(&[("eu-west", 3), ("us-east", 1)]);
    let mut clusters = fleet();
    set(&mut clusters, "asia", |c| c.healthy = false);
    let d = run(&t, &clusters, &paris());
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["strategy"], "Weighted");
    assert_eq!(json["answer"]["type"], "Weighted");
    assert_eq!(json["answer"]["value"][0][0], "eu-west");
    assert_eq!(json["answer"]["value"][0][1], 0.75);
    assert_eq!(json["reasons"][0]["cluster"], "asia");
    assert_eq!(json["reasons"][0]["included"], false);
    assert_eq!(json["reasons"][0]["detail"], "unhealthy");
    assert_eq!(json["reasons"][1]["weight"], 0.75);
    assert!(json["reasons"][0].get("distanceKm").is_none());
    let back: Decision = serde_json::from_value(json).unwrap();
    assert_eq!(back, d);
    let no_data = serde_json::to_value(Answer::NoData).unwrap();
    assert_eq!(no_data, serde_json::json!({"type": "NoData"}));
}

// ---------------------------------------------------------------------------------------
// Route keys: equal keys give equal answers

/// A small deterministic generator (xorshift64*), so that failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A coordinate: often one of a few shared values (ties), else anywhere.
    fn point(&mut self, shared: &[(f64, f64)]) -> (f64, f64) {
        if !shared.is_empty() && self.below(3) == 0 {
            shared[self.below(shared.len() as u64) as usize]
        } else {
            (self.unit() * 180.0 - 90.0, self.unit() * 360.0 - 180.0)
        }
    }
}

fn random_clusters(rng: &mut Rng, shared: &[(f64, f64)]) -> Vec<ClusterView> {
    let count = 1 + rng.below(7) as usize;
    (0..count)
        .map(|i| {
            let (latitude, longitude) = rng.point(shared);
            let mut c = cluster(
                // Names out of order on purpose.
                &format!("c{}", (i * 5 + 3) % 11),
                loc("r", latitude, longitude),
                "192.0.2.1",
            );
            c.healthy = rng.below(5) != 0;
            c.cordoned = rng.below(8) == 0;
            match rng.below(8) {
                0 => c.ips.clear(),
                1 => {
                    c.ips.clear();
                    c.hostnames = vec![format!("lb{i}.example.net")];
                }
                _ => {}
            }
            c.load = [0.0, 50.0, 100.0, 200.0, f64::NAN][rng.below(5) as usize];
            c.capacity = [None, Some(0.0), Some(100.0), Some(1000.0)][rng.below(4) as usize];
            c
        })
        .collect()
}

fn random_row(rng: &mut Rng, clusters: &[ClusterView]) -> Option<BTreeMap<String, f64>> {
    if rng.below(3) == 0 {
        return None;
    }
    let mut row = BTreeMap::new();
    for c in clusters {
        if rng.below(3) != 0 {
            row.insert(
                c.name.clone(),
                [1.0, 5.0, 5.0, 20.0, -0.0][rng.below(5) as usize],
            );
        }
    }
    Some(row)
}

#[test]
fn equal_route_keys_give_equal_answers() {
    let mut rng = Rng(0x5EED_0FC0_FFEE);
    let mut keys_seen = 0;
    for round in 0..600 {
        let type_ = [
            StrategyType::Geo,
            StrategyType::Latency,
            StrategyType::Overflow,
        ][round % 3];
        // A few shared coordinates so that clusters and clients tie on distance.
        let shared: Vec<(f64, f64)> = (0..3).map(|_| rng.point(&[])).collect();
        let clusters = random_clusters(&mut rng, &shared);
        let mut traffic = traffic(strategy(type_));
        traffic.strategy.overflow_threshold = [None, Some(0.5), Some(1.0)][rng.below(3) as usize];
        traffic.when_all_unhealthy = if rng.below(2) == 0 {
            WhenAllUnhealthy::ServeAll
        } else {
            WhenAllUnhealthy::NoData
        };
        let router = PointRouter::new(&traffic, &clusters);
        let rows: Vec<Option<BTreeMap<String, f64>>> =
            (0..3).map(|_| random_row(&mut rng, &clusters)).collect();
        let mut by_key: Vec<(RouteKey, Answer)> = Vec::new();
        for _ in 0..60 {
            let (latitude, longitude) = rng.point(&shared);
            let rtt = rows[rng.below(rows.len() as u64) as usize].clone();
            let key = router.key(latitude, longitude, rtt.as_ref());
            let client = ClientInfo {
                address: None,
                location: loc("", latitude, longitude),
                rtt,
            };
            let answer = decide(&traffic, &clusters, &client, &FailoverState::default()).answer;
            if let Some(expected) = router.answer(&key) {
                assert_eq!(
                    answer, expected,
                    "round {round}: {key:?} at {latitude},{longitude}"
                );
            }
            match by_key.iter().find(|(k, _)| *k == key) {
                Some((_, first)) => assert_eq!(
                    &answer, first,
                    "round {round}: two clients with key {key:?} got different answers"
                ),
                None => {
                    keys_seen += 1;
                    by_key.push((key, answer));
                }
            }
        }
        // Geo and Latency keys are the eligible clusters (or Same): bounded by them.
        if type_ != StrategyType::Overflow {
            assert!(by_key.len() <= router.cluster_keys().count() + 1);
        }
    }
    assert!(
        keys_seen > 600,
        "the test explores too few keys: {keys_seen}"
    );
}

#[test]
fn route_keys_for_geo_are_the_nearest_eligible_cluster() {
    let clusters = fleet();
    let traffic = traffic(strategy(StrategyType::Geo));
    let router = PointRouter::new(&traffic, &clusters);
    // Sorted by name: asia, eu-west, us-east, us-west.
    assert_eq!(router.key(48.0, 2.0, None), RouteKey::Cluster(1));
    assert_eq!(router.cluster_name(1), Some("eu-west"));
    assert_eq!(router.cluster_keys().count(), 4);
    let mut down = fleet();
    for c in &mut down {
        c.healthy = false;
    }
    assert_eq!(
        PointRouter::new(&traffic, &down).key(48.0, 2.0, None),
        RouteKey::Same
    );
}
