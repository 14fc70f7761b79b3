//! Snapshots without sockets: what is served for which client, problems, status records
//! and the zone config format.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::IpAddr;

use common::*;
use fedingress_api::ingress::{RecordType as ApiRecordType, StrategyType};
use fedingress_dns::SrvService;
use fedingress_dns::zone::{Snapshot, ZoneConfig, ZoneConfigError, validate_zones};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

fn ip(text: &str) -> Option<IpAddr> {
    Some(text.parse().unwrap())
}

fn values(lookup: &fedingress_dns::zone::Lookup) -> Vec<String> {
    lookup.answers.iter().map(|r| r.data.to_string()).collect()
}

#[test]
fn lookups_follow_location_and_report_scope() {
    let (snapshot, problems) = snapshot();
    assert!(problems.is_empty(), "{problems:?}");
    let name = format!("geo.{ZONE}");
    let eu = snapshot.lookup(&name, RecordType::A, ip("203.0.113.9"));
    assert_eq!(values(&eu), vec!["192.0.2.1"]);
    assert_eq!(eu.scope_prefix, 24);
    assert!(eu.authoritative);
    let us = snapshot.lookup(&name, RecordType::AAAA, ip("198.51.100.9"));
    assert_eq!(values(&us), vec!["2001:db8::2"]);
    assert_eq!(us.scope_prefix, 24);
    let default = snapshot.lookup(&name, RecordType::A, None);
    assert_eq!(values(&default), vec!["192.0.2.1"]);

    let rr = snapshot.lookup(&format!("rr.{ZONE}"), RecordType::A, ip("198.51.100.9"));
    assert_eq!(rr.answers.len(), 3);
    assert_eq!(
        rr.scope_prefix, 0,
        "RoundRobin does not depend on the client"
    );
}

#[test]
fn negative_answers() {
    let (snapshot, _) = snapshot();
    let nx = snapshot.lookup(&format!("nope.{ZONE}"), RecordType::A, None);
    assert_eq!(nx.rcode, ResponseCode::NXDomain);
    assert_eq!(nx.authority.len(), 1);
    assert_eq!(nx.authority[0].record_type(), RecordType::SOA);
    assert_eq!(nx.authority[0].ttl, 30);

    let nodata = snapshot.lookup(&format!("v4only.{ZONE}"), RecordType::AAAA, None);
    assert_eq!(nodata.rcode, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert_eq!(nodata.authority[0].record_type(), RecordType::SOA);

    // Empty non-terminals exist (RFC 8020).
    let ent = snapshot.lookup(&format!("_tcp.svc.{ZONE}"), RecordType::A, None);
    assert_eq!(ent.rcode, ResponseCode::NoError);
    let below = snapshot.lookup(&format!("x.geo.{ZONE}"), RecordType::A, None);
    assert_eq!(below.rcode, ResponseCode::NXDomain);

    let refused = snapshot.lookup("shop.example.com", RecordType::A, None);
    assert_eq!(refused.rcode, ResponseCode::Refused);
    assert!(!refused.authoritative);
}

#[test]
fn srv_answers_follow_routing_and_carry_target_addresses() {
    let (snapshot, _) = snapshot();
    let srv = snapshot.lookup(
        &format!("_mysql._tcp.svc.{ZONE}"),
        RecordType::SRV,
        ip("198.51.100.1"),
    );
    assert_eq!(srv.answers.len(), 1);
    let RData::SRV(record) = &srv.answers[0].data else {
        panic!("not SRV");
    };
    assert_eq!((record.priority, record.weight, record.port), (0, 1, 3306));
    assert_eq!(record.target.to_ascii(), format!("us-east.svc.{ZONE}."));
    let additional: Vec<String> = srv.additional.iter().map(|r| r.data.to_string()).collect();
    assert_eq!(additional, vec!["192.0.2.2", "2001:db8::2"]);
    assert_eq!(srv.scope_prefix, 24);
}

#[test]
fn weighted_srv_carries_rfc2782_weights() {
    let mut weights = std::collections::BTreeMap::new();
    weights.insert("eu-west".to_owned(), 3);
    weights.insert("us-east".to_owned(), 1);
    let mut strategy = strategy(StrategyType::Weighted);
    strategy.weights = Some(weights);
    let srv = vec![SrvService {
        name: "dns".to_owned(),
        transport: "udp".to_owned(),
        port: 53,
    }];
    let ingress = ingress(
        "w",
        &format!("w.{ZONE}"),
        strategy,
        vec![eu_west(), us_east()],
        srv,
    );
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], locator());
    assert!(problems.is_empty(), "{problems:?}");
    let lookup = snapshot.lookup(&format!("_dns._udp.w.{ZONE}"), RecordType::SRV, None);
    let weights: Vec<u16> = lookup
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(srv) => srv.weight,
            _ => 0,
        })
        .collect();
    assert_eq!(weights, vec![7500, 2500]);
    let status = snapshot.records_for_status(&format!("w.{ZONE}"));
    let a: Vec<_> = status
        .iter()
        .filter(|r| r.type_ == ApiRecordType::A && r.name == format!("w.{ZONE}"))
        .collect();
    assert_eq!(a.len(), 2, "{status:?}");
    assert_eq!(a[0].values, vec!["192.0.2.1"]);
    assert_eq!(a[0].scope, "weight 75%");
    assert_eq!(a[1].scope, "weight 25%");
}

#[test]
fn problems_for_names_outside_zones_and_conflicts() {
    let mut list = ingresses();
    list.push(ingress(
        "shop",
        "shop.example.com",
        strategy(StrategyType::RoundRobin),
        vec![eu_west()],
        vec![],
    ));
    list.push(ingress(
        "geo-again",
        &format!("geo.{ZONE}"),
        strategy(StrategyType::RoundRobin),
        vec![eu_west()],
        vec![],
    ));
    // Takes the name of svc's SRV target for eu-west: svc (earlier) keeps it.
    list.push(ingress(
        "target",
        &format!("eu-west.svc.{ZONE}"),
        strategy(StrategyType::RoundRobin),
        vec![us_east()],
        vec![],
    ));
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &list, locator());
    let messages: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.ingress, p.message))
        .collect();
    assert_eq!(problems.len(), 3, "{messages:?}");
    assert_eq!(problems[0].ingress, "default/shop");
    assert_eq!(
        problems[0].message,
        "dnsName shop.example.com is outside every configured zone"
    );
    assert_eq!(problems[1].ingress, "default/geo-again");
    assert_eq!(problems[2].ingress, "default/target");
    // The first owner keeps serving.
    let geo = snapshot.lookup(&format!("geo.{ZONE}"), RecordType::A, ip("198.51.100.1"));
    assert_eq!(values(&geo), vec!["192.0.2.2"]);
    let target = snapshot.lookup(&format!("eu-west.svc.{ZONE}"), RecordType::A, None);
    assert_eq!(values(&target), vec!["192.0.2.1"]);
}

#[test]
fn a_cname_cannot_live_at_the_apex() {
    let ingress = ingress(
        "apex",
        ZONE,
        strategy(StrategyType::RoundRobin),
        vec![cluster("aws", eu(), &[], &["lb.elb.amazonaws.com"])],
        vec![],
    );
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], locator());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].message.contains("zone apex"),
        "{}",
        problems[0].message
    );
    let a = snapshot.lookup(ZONE, RecordType::A, None);
    assert!(a.answers.is_empty());
    assert_eq!(a.rcode, ResponseCode::NoError);
    let soa = snapshot.lookup(ZONE, RecordType::SOA, None);
    assert_eq!(soa.answers.len(), 1);
}

#[test]
fn status_records_per_region() {
    let (snapshot, _) = snapshot();
    let records = snapshot.records_for_status(&format!("geo.{ZONE}"));
    let a: Vec<_> = records
        .iter()
        .filter(|r| r.type_ == ApiRecordType::A)
        .collect();
    assert_eq!(a.len(), 2, "{records:?}");
    let eu = a.iter().find(|r| r.values == vec!["192.0.2.1"]).unwrap();
    assert_eq!(eu.scope, "default, eu");
    let us = a.iter().find(|r| r.values == vec!["192.0.2.2"]).unwrap();
    assert_eq!(us.scope, "us");
    assert_eq!(
        records
            .iter()
            .filter(|r| r.type_ == ApiRecordType::Aaaa)
            .count(),
        2
    );

    let cname = snapshot.records_for_status(&format!("cname.{ZONE}"));
    assert_eq!(cname.len(), 1, "{cname:?}");
    assert_eq!(cname[0].type_, ApiRecordType::Cname);
    assert_eq!(
        cname[0].values,
        vec!["a473cf621de6b49d.us-east-2.elb.amazonaws.com"]
    );
    assert_eq!(cname[0].scope, "");

    let svc = snapshot.records_for_status(&format!("svc.{ZONE}"));
    let srv: Vec<_> = svc
        .iter()
        .filter(|r| r.type_ == ApiRecordType::Srv)
        .collect();
    assert_eq!(srv.len(), 2);
    assert!(
        srv.iter()
            .any(|r| r.values == vec![format!("0 1 3306 us-east.svc.{ZONE}")] && r.scope == "us")
    );
    assert!(
        svc.iter()
            .any(|r| r.name == format!("eu-west.svc.{ZONE}") && r.scope.is_empty())
    );

    let rr = snapshot.records_for_status(&format!("rr.{ZONE}"));
    assert_eq!(rr.len(), 1);
    assert_eq!(rr[0].values, vec!["192.0.2.10", "192.0.2.11", "192.0.2.12"]);
    assert!(
        snapshot
            .records_for_status("unknown.example.com")
            .is_empty()
    );
}

#[test]
fn explain_returns_the_decision_for_a_client() {
    let (snapshot, _) = snapshot();
    let (located, decision) = snapshot
        .explain(&format!("geo.{ZONE}"), ip("198.51.100.3"))
        .unwrap();
    assert_eq!(located.location.region, "us");
    assert_eq!(decision.answer.clusters(), vec!["us-east"]);
}

#[test]
fn zone_config_parses_strictly_from_yaml() {
    let yaml = "
name: Fedingress.Test.
nameservers: [ns1.fedingress.test, ns2.fedingress.test]
soa: {rname: hostmaster@fedingress.test, minimum: 60}
";
    let zone: ZoneConfig = yaml_serde::from_str(yaml).unwrap();
    assert_eq!(zone.apex(), "fedingress.test");
    assert_eq!(zone.soa.minimum, 60);
    assert_eq!(zone.soa.refresh, 3600);
    assert_eq!(zone.ttl, 3600);
    zone.validate().unwrap();

    let unknown = "name: a.test\nnameservers: [ns.a.test]\nsoa: {serial: 4}\n";
    assert!(yaml_serde::from_str::<ZoneConfig>(unknown).is_err());
    let unknown = "name: a.test\nnameservers: [ns.a.test]\nextra: 1\n";
    assert!(yaml_serde::from_str::<ZoneConfig>(unknown).is_err());

    let mut bad = zone.clone();
    bad.nameservers.clear();
    assert!(matches!(
        bad.validate(),
        Err(ZoneConfigError::NoNameservers { .. })
    ));
    let mut bad = zone.clone();
    bad.name = "bad name.test".to_owned();
    assert!(matches!(
        bad.validate(),
        Err(ZoneConfigError::InvalidName { .. })
    ));
    assert!(matches!(
        validate_zones(&[zone.clone(), zone]),
        Err(ZoneConfigError::Duplicate { .. })
    ));
}
