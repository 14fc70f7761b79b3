//! Snapshots without sockets: what is served for which client, problems, status records
//! and the zone config format.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::net::IpAddr;

use common::*;
use fedingress_api::ingress::{RecordType as ApiRecordType, StrategyType};
use fedingress_dns::zone::{
    NameserverConfig, Snapshot, ZoneConfig, ZoneConfigError, default_nameserver_addresses,
    validate_zones,
};
use fedingress_dns::{ServiceAddresses, SrvService};
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
    let srv = vec![SrvService::new("dns", "udp", 53)];
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
nameservers: [{name: ns1.fedingress.test, addresses: [192.0.2.53]}, ns.elsewhere.example]
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

/// `_dns._tcp` and `_dns._udp` of one ingress: TCP on the clusters' own addresses, UDP
/// on a load balancer of its own where the cluster reports one.
fn split_services(udp_own: Vec<(&str, ServiceAddresses)>) -> Vec<SrvService> {
    let tcp = SrvService::new("dns", "tcp", 53);
    let mut udp = SrvService::new("dns", "udp", 53);
    udp.addresses = udp_own
        .into_iter()
        .map(|(cluster, own)| (cluster.to_owned(), own))
        .collect();
    vec![tcp, udp]
}

fn own_ips(ips: &[&str]) -> ServiceAddresses {
    ServiceAddresses {
        ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        hostnames: Vec::new(),
    }
}

fn own_hostname(host: &str) -> ServiceAddresses {
    ServiceAddresses {
        ips: Vec::new(),
        hostnames: vec![host.to_owned()],
    }
}

/// (weight, port, target) of each SRV answer, sorted by target.
fn srv_targets(lookup: &fedingress_dns::zone::Lookup) -> Vec<String> {
    let mut out: Vec<String> = lookup
        .answers
        .iter()
        .map(|r| match &r.data {
            RData::SRV(srv) => format!("{} {}", srv.port, srv.target.to_ascii()),
            other => panic!("not SRV: {other:?}"),
        })
        .collect();
    out.sort();
    out
}

/// (owner, address) of the additional records, sorted.
fn additional(lookup: &fedingress_dns::zone::Lookup) -> Vec<String> {
    let mut out: Vec<String> = lookup
        .additional
        .iter()
        .map(|r| format!("{} {}", r.name.to_ascii(), r.data))
        .collect();
    out.sort();
    out
}

#[test]
fn udp_srv_points_at_the_udp_load_balancer_through_a_per_rule_target_name() {
    let name = format!("split.{ZONE}");
    let ingress = ingress(
        "split",
        &name,
        strategy(StrategyType::RoundRobin),
        vec![eu_west(), us_east()],
        // eu-west's UDP rule has its own load balancer; us-east serves both on one.
        split_services(vec![(
            "eu-west",
            own_ips(&["192.0.2.101", "2001:db8::101"]),
        )]),
    );
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], locator());
    assert!(problems.is_empty(), "{problems:?}");

    let udp = snapshot.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, None);
    assert_eq!(
        srv_targets(&udp),
        [
            format!("53 eu-west.udp-dns.{name}."),
            format!("53 us-east.{name}.")
        ]
    );
    assert_eq!(
        additional(&udp),
        [
            format!("eu-west.udp-dns.{name}. 192.0.2.101"),
            format!("eu-west.udp-dns.{name}. 2001:db8::101"),
            format!("us-east.{name}. 192.0.2.2"),
            format!("us-east.{name}. 2001:db8::2"),
        ]
    );
    // The per-rule target name is served with A/AAAA of the UDP load balancer only.
    let target = format!("eu-west.udp-dns.{name}");
    assert_eq!(
        values(&snapshot.lookup(&target, RecordType::A, None)),
        ["192.0.2.101"]
    );
    assert_eq!(
        values(&snapshot.lookup(&target, RecordType::AAAA, None)),
        ["2001:db8::101"]
    );

    // TCP stays on the cluster's own addresses: never the UDP load balancer.
    let tcp = snapshot.lookup(&format!("_dns._tcp.{name}"), RecordType::SRV, None);
    assert_eq!(
        srv_targets(&tcp),
        [format!("53 eu-west.{name}."), format!("53 us-east.{name}.")]
    );
    assert!(!additional(&tcp).iter().any(|a| a.contains("192.0.2.101")));
    assert_eq!(
        values(&snapshot.lookup(&format!("eu-west.{name}"), RecordType::A, None)),
        ["192.0.2.1"]
    );
    // The name itself keeps answering the share's addresses.
    let mut a = values(&snapshot.lookup(&name, RecordType::A, None));
    a.sort();
    assert_eq!(a, ["192.0.2.1", "192.0.2.2"]);

    // status.dns.records lists the per-rule target name too.
    let status = snapshot.records_for_status(&name);
    assert!(
        status
            .iter()
            .any(|r| r.name == target && r.values == ["192.0.2.101"]),
        "{status:?}"
    );
}

#[test]
fn host_name_load_balancers_are_srv_targets_themselves() {
    let name = format!("aws.{ZONE}");
    let tcp_lb = |region: &str| format!("tcp-{region}.elb.amazonaws.com");
    let ingress = ingress(
        "aws",
        &name,
        strategy(StrategyType::RoundRobin),
        vec![
            cluster("eu-west", eu(), &[], &[&tcp_lb("eu")]),
            cluster("us-east", us(), &[], &[&tcp_lb("us")]),
        ],
        split_services(vec![
            ("eu-west", own_hostname("udp-eu.elb.amazonaws.com")),
            ("us-east", own_hostname("udp-us.elb.amazonaws.com")),
        ]),
    );
    let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], locator());
    assert!(problems.is_empty(), "{problems:?}");
    let udp = snapshot.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, None);
    assert_eq!(
        srv_targets(&udp),
        [
            "53 udp-eu.elb.amazonaws.com.",
            "53 udp-us.elb.amazonaws.com."
        ]
    );
    assert!(udp.additional.is_empty(), "{:?}", udp.additional);
    let tcp = snapshot.lookup(&format!("_dns._tcp.{name}"), RecordType::SRV, None);
    assert_eq!(
        srv_targets(&tcp),
        [
            "53 tcp-eu.elb.amazonaws.com.",
            "53 tcp-us.elb.amazonaws.com."
        ]
    );
    // No per-rule target name for host names.
    let nx = snapshot.lookup(&format!("eu-west.udp-dns.{name}"), RecordType::A, None);
    assert_eq!(nx.rcode, ResponseCode::NXDomain);
    // The name is a CNAME to a TCP (share) load balancer.
    let cname = snapshot.lookup(&name, RecordType::A, None);
    assert_eq!(cname.answers[0].record_type(), RecordType::CNAME);
    assert!(values(&cname)[0].starts_with("tcp-"), "{cname:?}");
}

#[test]
fn a_cluster_that_cannot_serve_a_rule_leaves_only_that_rules_srv_answers() {
    let name = format!("excl.{ZONE}");
    let mut services = split_services(Vec::new());
    // eu-west reported an error for the UDP rule (or its driver lacks UDP).
    services[1].excluded.insert("eu-west".to_owned());
    let geo = ingress(
        "excl",
        &name,
        strategy(StrategyType::Geo),
        vec![eu_west(), us_east()],
        services,
    );
    let (snapshot, problems) = Snapshot::build(&zones(), 1, std::slice::from_ref(&geo), locator());
    assert!(problems.is_empty(), "{problems:?}");
    let europe = ip("203.0.113.9");
    // European clients: A and _tcp go to eu-west, the nearest ...
    assert_eq!(
        values(&snapshot.lookup(&name, RecordType::A, europe)),
        ["192.0.2.1"]
    );
    let tcp = snapshot.lookup(&format!("_dns._tcp.{name}"), RecordType::SRV, europe);
    assert_eq!(srv_targets(&tcp), [format!("53 eu-west.{name}.")]);
    // ... but _udp is routed among the clusters that serve it: us-east.
    let udp = snapshot.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, europe);
    assert_eq!(srv_targets(&udp), [format!("53 us-east.{name}.")]);
    assert_eq!(udp.scope_prefix, 24);
    // status lists the UDP answer once per scope, never with eu-west.
    let status = snapshot.records_for_status(&name);
    let udp_records: Vec<_> = status
        .iter()
        .filter(|r| r.name == format!("_dns._udp.{name}"))
        .collect();
    assert!(!udp_records.is_empty(), "{status:?}");
    assert!(
        udp_records
            .iter()
            .all(|r| r.values == [format!("0 1 53 us-east.{name}")]),
        "{udp_records:?}"
    );

    // RoundRobin: eu-west is simply not among the _udp targets; the name keeps both.
    let mut rr = geo.clone();
    rr.traffic.strategy = strategy(StrategyType::RoundRobin);
    let (snapshot, _) = Snapshot::build(&zones(), 1, &[rr], locator());
    let udp = snapshot.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, None);
    assert_eq!(srv_targets(&udp), [format!("53 us-east.{name}.")]);
    assert_eq!(snapshot.lookup(&name, RecordType::A, None).answers.len(), 2);

    // No cluster can serve it: NODATA for _udp only.
    let mut none = geo;
    none.srv[1].excluded.insert("us-east".to_owned());
    let (snapshot, _) = Snapshot::build(&zones(), 1, &[none], locator());
    let udp = snapshot.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, europe);
    assert_eq!(udp.rcode, ResponseCode::NoError);
    assert!(udp.answers.is_empty());
    let tcp = snapshot.lookup(&format!("_dns._tcp.{name}"), RecordType::SRV, europe);
    assert_eq!(tcp.answers.len(), 1);
}

#[test]
fn rebuild_follows_a_change_of_per_rule_addresses() {
    let name = format!("split.{ZONE}");
    let before = ingress(
        "split",
        &name,
        strategy(StrategyType::RoundRobin),
        vec![eu_west()],
        split_services(vec![("eu-west", own_ips(&["192.0.2.101"]))]),
    );
    let mut after = before.clone();
    after.srv[1]
        .addresses
        .insert("eu-west".into(), own_ips(&["192.0.2.102"]));
    let (first, _) = Snapshot::build(&zones(), 1, &[before], locator());
    let target = format!("eu-west.udp-dns.{name}");
    assert_eq!(
        values(&first.lookup(&target, RecordType::A, None)),
        ["192.0.2.101"]
    );
    let (second, problems) = first.rebuild(&zones(), 2, std::slice::from_ref(&after));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        values(&second.lookup(&target, RecordType::A, None)),
        ["192.0.2.102"]
    );
    let udp = second.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, None);
    assert_eq!(additional(&udp), [format!("{target}. 192.0.2.102")]);
    // The rule's own addresses go away: back to the cluster's target.
    let mut back = after;
    back.srv[1].addresses.clear();
    let (third, _) = second.rebuild(&zones(), 3, &[back]);
    let udp = third.lookup(&format!("_dns._udp.{name}"), RecordType::SRV, None);
    assert_eq!(srv_targets(&udp), [format!("53 eu-west.{name}.")]);
    assert_eq!(
        third.lookup(&target, RecordType::A, None).rcode,
        ResponseCode::NXDomain
    );
}

#[test]
fn nameservers_are_names_or_names_with_addresses() {
    let yaml = r#"
name: fedingress.test
nameservers:
- ns.elsewhere.example
- {name: ns1.fedingress.test, addresses: [127.0.0.1, "::1"]}
"#;
    let zone: ZoneConfig = yaml_serde::from_str(yaml).unwrap();
    assert_eq!(
        zone.nameservers,
        vec![
            NameserverConfig::from("ns.elsewhere.example"),
            NameserverConfig {
                name: "ns1.fedingress.test".to_owned(),
                addresses: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
            },
        ]
    );
    zone.validate().unwrap();
    // Written back in the same two forms.
    let json = serde_json::to_value(&zone.nameservers).unwrap();
    assert_eq!(
        json,
        serde_json::json!(["ns.elsewhere.example", {"name": "ns1.fedingress.test", "addresses": ["127.0.0.1", "::1"]}])
    );

    let unknown = "name: a.test\nnameservers: [{name: ns.a.test, address: [127.0.0.1]}]\n";
    let error = yaml_serde::from_str::<ZoneConfig>(unknown)
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown field `address`"), "{error}");
    let bad_ip = "name: a.test\nnameservers: [{name: ns.a.test, addresses: [localhost]}]\n";
    let error = yaml_serde::from_str::<ZoneConfig>(bad_ip)
        .unwrap_err()
        .to_string();
    assert!(error.contains("invalid IP address syntax"), "{error}");
    let number = "name: a.test\nnameservers: [5]\n";
    let error = yaml_serde::from_str::<ZoneConfig>(number)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("a nameserver name or {name, addresses}"),
        "{error}"
    );
}

#[test]
fn in_zone_nameservers_need_addresses_unless_the_listen_ip_is_specific() {
    let zone = |name: &str, nameservers: &[&str]| ZoneConfig {
        name: name.to_owned(),
        nameservers: nameservers.iter().map(|&n| n.into()).collect(),
        soa: Default::default(),
        ttl: 3600,
    };
    let zones = vec![
        zone("a.test", &["ns.elsewhere.example"]),
        zone("b.test", &["ns.elsewhere.example", "ns1.b.test"]),
    ];
    let error = validate_zones(&zones).unwrap_err();
    assert!(matches!(
        error,
        ZoneConfigError::NameserverWithoutAddresses {
            zone_index: 1,
            index: 1,
            ..
        }
    ));
    assert!(error.names_field());
    assert!(
        error.to_string().starts_with(
            "zones[1].nameservers[1]: ns1.b.test is inside zone b.test and needs addresses"
        ),
        "{error}"
    );

    // An unspecified listen address gives nothing to default to.
    let mut unspecified = zones.clone();
    default_nameserver_addresses(&mut unspecified, Some("0.0.0.0".parse().unwrap()));
    assert_eq!(unspecified, zones);
    default_nameserver_addresses(&mut unspecified, None);
    assert_eq!(unspecified, zones);

    // A specific one fills in-zone nameservers only.
    let mut specific = zones.clone();
    default_nameserver_addresses(&mut specific, Some("127.0.0.1".parse().unwrap()));
    validate_zones(&specific).unwrap();
    assert!(specific[0].nameservers[0].addresses.is_empty());
    assert!(specific[1].nameservers[0].addresses.is_empty());
    assert_eq!(
        specific[1].nameservers[1].addresses,
        vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
    );
    // Given addresses are kept.
    let mut given = zones.clone();
    given[1].nameservers[1].addresses = vec!["192.0.2.53".parse().unwrap()];
    default_nameserver_addresses(&mut given, Some("127.0.0.1".parse().unwrap()));
    assert_eq!(
        given[1].nameservers[1].addresses,
        vec!["192.0.2.53".parse::<IpAddr>().unwrap()]
    );

    // Out of zone: no addresses.
    let mut outside = zones.clone();
    outside[0].nameservers[0].addresses = vec!["192.0.2.53".parse().unwrap()];
    let error = validate_zones(&outside).unwrap_err();
    assert!(
        matches!(
            error,
            ZoneConfigError::AddressesOutsideZone {
                zone_index: 0,
                index: 0,
                ..
            }
        ),
        "{error}"
    );
}

/// The zone of [`zones`] with a second in-zone nameserver (IPv4 only) and one outside.
fn three_nameservers() -> Vec<ZoneConfig> {
    let mut zones = zones();
    zones[0].nameservers.push(NameserverConfig {
        name: format!("ns2.{ZONE}"),
        addresses: vec!["192.0.2.54".parse().unwrap()],
    });
    zones[0].nameservers.push("ns.elsewhere.example".into());
    zones[0].ttl = 7200;
    zones
}

#[test]
fn nameserver_names_answer_their_addresses_and_ns_answers_carry_glue() {
    let (snapshot, problems) = Snapshot::build(&three_nameservers(), 7, &ingresses(), locator());
    assert!(problems.is_empty(), "{problems:?}");

    let ns = snapshot.lookup(ZONE, RecordType::NS, None);
    assert_eq!(
        values(&ns),
        vec![
            format!("ns1.{ZONE}."),
            format!("ns2.{ZONE}."),
            "ns.elsewhere.example.".to_owned()
        ],
        "N nameservers, N NS records"
    );
    let glue: Vec<(String, String)> = ns
        .additional
        .iter()
        .map(|r| (r.name.to_ascii(), r.data.to_string()))
        .collect();
    assert_eq!(
        glue,
        vec![
            (format!("ns1.{ZONE}."), "192.0.2.53".to_owned()),
            (format!("ns1.{ZONE}."), "2001:db8::53".to_owned()),
            (format!("ns2.{ZONE}."), "192.0.2.54".to_owned()),
        ],
        "glue for in-zone nameservers only"
    );
    assert!(ns.additional.iter().all(|r| r.ttl == 7200));

    let a = snapshot.lookup(&format!("NS1.{ZONE}."), RecordType::A, ip("203.0.113.9"));
    assert!(a.authoritative);
    assert_eq!(a.rcode, ResponseCode::NoError);
    assert_eq!(values(&a), vec!["192.0.2.53"]);
    assert_eq!(a.answers[0].ttl, 7200, "the zone's NS TTL");
    assert_eq!(a.scope_prefix, 0);
    let aaaa = snapshot.lookup(&format!("ns1.{ZONE}"), RecordType::AAAA, None);
    assert_eq!(values(&aaaa), vec!["2001:db8::53"]);
    let nodata = snapshot.lookup(&format!("ns2.{ZONE}"), RecordType::AAAA, None);
    assert_eq!(nodata.rcode, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert_eq!(nodata.authority[0].record_type(), RecordType::SOA);
    let txt = snapshot.lookup(&format!("ns2.{ZONE}"), RecordType::TXT, None);
    assert!(txt.answers.is_empty());
    assert_eq!(txt.rcode, ResponseCode::NoError);

    // Out of zone: not ours to answer.
    let outside = snapshot.lookup("ns.elsewhere.example", RecordType::A, None);
    assert_eq!(outside.rcode, ResponseCode::Refused);

    // SOA unchanged: one record, no additional section.
    let soa = snapshot.lookup(ZONE, RecordType::SOA, None);
    assert_eq!(soa.answers.len(), 1);
    assert!(soa.additional.is_empty());
}

#[test]
fn out_of_zone_nameservers_get_no_glue() {
    let mut zones = zones();
    zones[0].nameservers = vec![
        "ns1.elsewhere.example".into(),
        "ns2.elsewhere.example".into(),
    ];
    let (snapshot, problems) = Snapshot::build(&zones, 7, &[], locator());
    assert!(problems.is_empty(), "{problems:?}");
    let ns = snapshot.lookup(ZONE, RecordType::NS, None);
    assert_eq!(ns.answers.len(), 2);
    assert!(ns.additional.is_empty());
    let gone = snapshot.lookup(&format!("ns1.{ZONE}"), RecordType::A, None);
    assert_eq!(gone.rcode, ResponseCode::NXDomain);
}

#[test]
fn an_ingress_cannot_take_a_nameserver_name() {
    let clash = ingress(
        "clash",
        &format!("ns2.{ZONE}"),
        strategy(StrategyType::RoundRobin),
        vec![eu_west()],
        vec![],
    );
    let (snapshot, problems) = Snapshot::build(&three_nameservers(), 7, &[clash], locator());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].ingress, "default/clash");
    assert!(
        problems[0]
            .message
            .contains("is already served as a nameserver of the zone"),
        "{problems:?}"
    );
    let a = snapshot.lookup(&format!("ns2.{ZONE}"), RecordType::A, None);
    assert_eq!(
        values(&a),
        vec!["192.0.2.54"],
        "the nameserver keeps its name"
    );
}
