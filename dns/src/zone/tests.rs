//! Unit tests that look inside a [`Snapshot`]: renderings made at build time and shared,
//! answers reused by a rebuild, service views, bounded memory for distinct clients, the
//! encoded wire form, rotations.
//!
//! What does not belong here: behaviour visible through the public API (see
//! `dns/tests/it/zone.rs`), name helpers (tested in `names`).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use fedingress_api::ingress::{Strategy, StrategyType, Traffic};
use hickory_proto::op::Message;
use hickory_proto::rr::{RData, RecordType};

use super::encode::{Prepared, Rendered};
use super::names::{name_key, parse_name};
use super::{Lookup, MAX_ROTATIONS, NameserverConfig, Snapshot, SoaConfig, ZoneConfig};
use crate::location::Locator;
use crate::location::test_mmdb::{CityNetwork, city_db, ip, net};
use crate::routing::FailoverState;
use crate::{ClusterView, Location, RoutedIngress};

fn location(region: &str, latitude: f64, longitude: f64) -> Location {
    Location {
        region: region.to_owned(),
        latitude,
        longitude,
    }
}

fn cluster(name: &str, at: Location, ips: &[IpAddr]) -> ClusterView {
    ClusterView {
        name: name.to_owned(),
        location: at,
        healthy: true,
        cordoned: false,
        ips: ips.to_vec(),
        hostnames: Vec::new(),
        load: 0.0,
        capacity: None,
        cloud: Default::default(),
        anycast: Vec::new(),
    }
}

fn routed(type_: StrategyType, clusters: Vec<ClusterView>) -> RoutedIngress {
    RoutedIngress {
        ingress: "default/x".to_owned(),
        dns_name: "x.test".to_owned(),
        traffic: Traffic {
            strategy: Strategy {
                type_,
                ..Strategy::default()
            },
            ..Traffic::default()
        },
        clusters,
        srv: Vec::new(),
        failover: FailoverState::default(),
        health_port: None,
    }
}

fn zones() -> Vec<ZoneConfig> {
    vec![ZoneConfig {
        name: "test".to_owned(),
        nameservers: vec![NameserverConfig {
            name: "ns.test".to_owned(),
            addresses: vec!["192.0.2.53".parse().unwrap()],
        }],
        soa: SoaConfig::default(),
        ttl: 3600,
    }]
}

fn a_values(lookup: &Lookup) -> Vec<String> {
    lookup.answers.iter().map(|r| r.data.to_string()).collect()
}

#[test]
fn mmdb_points_are_answered_by_route_key_without_a_cache() {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        city_db(&[CityNetwork {
            network: net("2001:218::/32"),
            latitude: Some(35.685),
            longitude: Some(139.7514),
            country: Some("JP"),
            subdivision: None,
        }]),
    )
    .unwrap();
    let locator = Locator::new(Vec::new(), location("eu", 50.0, 4.0), Some(file.path())).unwrap();
    let ingress = routed(
        StrategyType::Geo,
        vec![
            cluster("eu", location("eu", 50.0, 4.0), &[ip("192.0.2.1")]),
            cluster("jp", location("jp", 35.0, 139.0), &[ip("192.0.2.2")]),
        ],
    );
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], Arc::new(locator));
    assert!(problems.is_empty(), "{problems:?}");
    let tokyo = snapshot.lookup("x.test", RecordType::A, Some(ip("2001:218::1")));
    assert_eq!(a_values(&tokyo), vec!["192.0.2.2"]);
    assert_eq!(tokyo.scope_prefix, 32);
    // Both clusters were rendered at build time, nothing is added per client.
    assert_eq!(snapshot.ingresses[0].answers.rendered.len(), 2);
    let again = snapshot.lookup("x.test", RecordType::A, Some(ip("2001:218:ffff::1")));
    assert_eq!(a_values(&again), vec!["192.0.2.2"]);
    assert_eq!(snapshot.ingresses[0].answers.rendered.len(), 2);
    // Elsewhere: the default (Europe), pre-encoded.
    let other = snapshot.lookup("x.test", RecordType::A, Some(ip("192.0.2.200")));
    assert_eq!(a_values(&other), vec!["192.0.2.1"]);
    // The fast path takes the same route.
    let key = name_key(&parse_name("x.test").unwrap());
    let fast = snapshot
        .with_fast_answer(&key, RecordType::A, ip("2001:218::2"), |e, scope| {
            (e.answers[0].data.to_string(), scope)
        })
        .unwrap();
    assert_eq!(fast, ("192.0.2.2".to_owned(), 32));
}

#[test]
fn rebuild_reuses_unchanged_names_and_answers_like_a_fresh_build() {
    let locator = Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap());
    let eu = cluster("eu", location("eu", 50.0, 4.0), &[ip("192.0.2.1")]);
    let us = cluster("us", location("us", 39.0, -77.0), &[ip("192.0.2.2")]);
    let named = |name: &str, clusters: Vec<ClusterView>| {
        let mut r = routed(StrategyType::Geo, clusters);
        r.ingress = format!("default/{name}");
        r.dns_name = format!("{name}.test");
        r
    };
    let first = vec![
        named("a", vec![eu.clone(), us.clone()]),
        named("b", vec![eu.clone(), us.clone()]),
    ];
    let (before, _) = Snapshot::build(&zones(), 1, &first, locator.clone());
    // b's eu cluster goes unhealthy; a is untouched.
    let mut second = first.clone();
    second[1].clusters[0].healthy = false;
    let (after, problems) = before.rebuild(&zones(), 2, &second);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(Arc::ptr_eq(
        &before.ingresses[0].answers,
        &after.ingresses[0].answers
    ));
    assert!(!Arc::ptr_eq(
        &before.ingresses[1].answers,
        &after.ingresses[1].answers
    ));
    let (fresh, _) = Snapshot::build(&zones(), 2, &second, locator);
    for name in ["a.test", "b.test"] {
        for rtype in [RecordType::A, RecordType::AAAA] {
            assert_eq!(
                after.lookup(name, rtype, None),
                fresh.lookup(name, rtype, None),
                "{name} {rtype}"
            );
        }
    }
    // A reused negative answer (AAAA of an IPv4-only name) carries the new serial,
    // on the slow path and on the fast path.
    let nodata = after.lookup("a.test", RecordType::AAAA, None);
    match &nodata.authority[0].data {
        RData::SOA(soa) => assert_eq!(soa.serial, 2),
        other => panic!("{other:?}"),
    }
    let key = name_key(&parse_name("a.test").unwrap());
    let at = after
        .with_fast_answer(&key, RecordType::AAAA, ip("192.0.2.9"), |e, _| e.serial_at)
        .unwrap()
        .unwrap();
    let wire = after
        .with_fast_answer(&key, RecordType::AAAA, ip("192.0.2.9"), |e, _| {
            e.wire.clone()
        })
        .unwrap();
    let message = Message::from_vec(&wire).unwrap();
    match &message.authorities[0].data {
        RData::SOA(soa) => assert_eq!(soa.serial, 1, "the stored bytes are the old ones"),
        other => panic!("{other:?}"),
    }
    assert_eq!(&wire[at..at + 4], &1u32.to_be_bytes());
}

#[test]
fn service_views_are_served_on_the_fast_path_and_reused_by_rebuild() {
    let locator = Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap());
    let eu = cluster("eu", location("eu", 50.0, 4.0), &[ip("192.0.2.1")]);
    let us = cluster("us", location("us", 39.0, -77.0), &[ip("192.0.2.2")]);
    let mut udp = crate::SrvService::new("dns", "udp", 53);
    udp.excluded.insert("eu".to_owned());
    let mut ingress = routed(StrategyType::Geo, vec![eu, us]);
    ingress.srv = vec![crate::SrvService::new("dns", "tcp", 53), udp];
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress.clone()], locator);
    assert!(problems.is_empty(), "{problems:?}");
    let entry = &snapshot.ingresses[0];
    assert!(entry.services[0].is_none());
    assert!(entry.services[1].is_some());
    let target = |key: &[u8]| {
        snapshot
            .with_fast_answer(key, RecordType::SRV, ip("192.0.2.9"), |e, _| {
                match &e.answers[0].data {
                    RData::SRV(srv) => srv.target.to_ascii(),
                    other => panic!("{other:?}"),
                }
            })
            .unwrap()
    };
    let udp_key = name_key(&parse_name("_dns._udp.x.test").unwrap());
    let tcp_key = name_key(&parse_name("_dns._tcp.x.test").unwrap());
    assert_eq!(target(&udp_key), "us.x.test.");
    assert_eq!(target(&tcp_key), "eu.x.test.");
    // Unchanged: the service view is shared with the next snapshot.
    let (next, _) = snapshot.rebuild(&zones(), 2, &[ingress]);
    match (
        &snapshot.ingresses[0].services[1],
        &next.ingresses[0].services[1],
    ) {
        (Some(a), Some(b)) => assert!(Arc::ptr_eq(a, b)),
        other => panic!("{other:?}"),
    }
    // A zone transfer lists the service view's answer.
    let zone = name_key(&parse_name("test").unwrap());
    let records = next.transfer(&zone).unwrap();
    let udp: Vec<String> = records
        .iter()
        .filter(|r| {
            r.record_type() == RecordType::SRV && r.name.to_ascii().starts_with("_dns._udp")
        })
        .map(|r| r.data.to_string())
        .collect();
    assert_eq!(udp.len(), 1, "{udp:?}");
    assert!(udp[0].ends_with("us.x.test."), "{udp:?}");
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn distinct_client_points_leave_memory_bounded() {
    let spots = [
        ("a", 50.0, 4.0),
        ("b", 39.0, -77.0),
        ("c", 1.3, 103.8),
        ("d", -33.9, 151.2),
        ("e", 35.7, 139.7),
    ];
    let clusters: Vec<ClusterView> = spots
        .iter()
        .enumerate()
        .map(|(i, (name, lat, lon))| {
            let mut c = cluster(
                name,
                location(name, *lat, *lon),
                &[IpAddr::from([192, 0, 2, i as u8 + 1])],
            );
            // Overflow: some clusters spill over, one has room for everything.
            c.capacity = Some(100.0);
            c.load = [50.0, 300.0, 500.0, 90.0, 1000.0][i];
            c
        })
        .collect();
    let locator = Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap());
    let mut rng = Rng(7);
    for type_ in [
        StrategyType::Geo,
        StrategyType::Latency,
        StrategyType::Overflow,
    ] {
        let ingress = routed(type_, clusters.clone());
        let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], locator.clone());
        assert!(problems.is_empty(), "{problems:?}");
        let entry = &snapshot.ingresses[0];
        let built = entry.answers.rendered.len();
        let mut answers = BTreeSet::new();
        for _ in 0..100_000 {
            let latitude = rng.unit() * 180.0 - 90.0;
            let longitude = rng.unit() * 360.0 - 180.0;
            let rendered = snapshot
                .rendered_for_key(entry, entry.view(), None, latitude, longitude, None)
                .unwrap();
            answers.insert(format!("{:?}", rendered.answer));
        }
        let orders = entry.answers.keyed.as_ref().unwrap().orders.read().unwrap();
        match type_ {
            // One rendering per eligible cluster, made at build time.
            StrategyType::Geo | StrategyType::Latency => {
                assert_eq!(built, 5, "{type_:?}");
                assert_eq!(entry.answers.rendered.len(), 5);
                assert!(orders.is_empty());
                assert_eq!(answers.len(), 5);
            }
            // At most one per distance order (5! = 120), cut after the first
            // cluster with room for everything; equal answers share one Arc.
            _ => {
                assert!(orders.len() <= 120, "{}", orders.len());
                assert!(orders.len() >= answers.len());
                let mut distinct: Vec<&Arc<Rendered>> = Vec::new();
                for r in orders.values() {
                    match distinct.iter().find(|d| d.answer == r.answer) {
                        Some(d) => assert!(Arc::ptr_eq(d, r)),
                        None => distinct.push(r),
                    }
                }
                assert_eq!(distinct.len(), answers.len());
            }
        }
    }
}

#[test]
fn answers_are_pre_encoded_with_compressed_owner_names() {
    let ingress = routed(
        StrategyType::RoundRobin,
        vec![cluster("a", location("a", 0.0, 0.0), &[ip("192.0.2.1")])],
    );
    let (snapshot, _) = Snapshot::build(
        &zones(),
        1,
        &[ingress],
        Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap()),
    );
    let key = name_key(&parse_name("x.test").unwrap());
    let wire = snapshot
        .with_fast_answer(&key, RecordType::A, ip("127.0.0.1"), |e, _| e.wire.to_vec())
        .unwrap();
    // Header, question (x.test: 8 octets + type + class), then the answer whose owner
    // is a pointer to the question name at offset 12.
    assert_eq!(&wire[4..12], &[0, 1, 0, 1, 0, 0, 0, 0]);
    assert_eq!(&wire[12..20], b"\x01x\x04test\x00");
    assert_eq!(&wire[24..26], &[0xC0, 12]);
    assert_eq!(wire.len(), 24 + 16);
}

#[test]
fn rotations_are_capped_and_start_at_different_records() {
    let ips: Vec<IpAddr> = (1..=40).map(|i| IpAddr::from([10, 0, 0, i])).collect();
    let ingress = routed(
        StrategyType::RoundRobin,
        vec![cluster("a", location("a", 0.0, 0.0), &ips)],
    );
    let (snapshot, _) = Snapshot::build(
        &zones(),
        1,
        &[ingress],
        Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap()),
    );
    let Prepared::Rotate { options, .. } = &snapshot.ingresses[0].answers.rendered[0].a else {
        panic!("not rotated");
    };
    assert_eq!(options.len(), MAX_ROTATIONS);
    let mut firsts: Vec<String> = options
        .iter()
        .map(|e| e.answers[0].data.to_string())
        .collect();
    firsts.sort();
    firsts.dedup();
    assert_eq!(firsts.len(), MAX_ROTATIONS);
    assert!(options.iter().all(|e| e.answers.len() == 40));
}
