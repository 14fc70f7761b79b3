//! The provider-neutral pipeline end to end: routed ingresses → desired record sets →
//! a plain provider's native record sets → plan → zone, and again after changes: the
//! published targets agree with routing's decisions, a second sync has nothing to do,
//! and nothing foreign is touched.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used)]

// The DNS crate's test fixtures (clusters, locations, ingresses), shared, not copied.
#[path = "../../dns/tests/it/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{cluster, eu_west, ingress, location, strategy, us_east};
use fedingress_api::ingress::{RecordType, StrategyType, WhenAllUnhealthy};
use fedingress_dns::routing::{self, Answer, ClientInfo, FailoverState};
use fedingress_dns::zone::{NameserverConfig, ZoneConfig};
use fedingress_dns::{ClusterView, RoutedIngress};
use fedingress_providers::publish::desired::desired;
use fedingress_providers::publish::plan::{self, NativeRecordSet, Wanted};
use fedingress_providers::publish::{Owner, PolicyRecordSet};

/// A record set of a provider without routing policies: one per (name, type).
#[derive(Clone, Debug, PartialEq)]
struct Plain {
    name: String,
    type_: String,
    ttl: u32,
    values: BTreeSet<String>,
}

impl NativeRecordSet for Plain {
    fn name(&self) -> &str {
        &self.name
    }
    fn type_(&self) -> &str {
        &self.type_
    }
    fn txt_values(&self) -> Vec<String> {
        if self.type_ == "TXT" {
            self.values.iter().cloned().collect()
        } else {
            Vec::new()
        }
    }
    fn marker(name: &str, value: &str) -> Self {
        Plain {
            name: name.to_owned(),
            type_: "TXT".to_owned(),
            ttl: plan::MARKER_TTL,
            values: BTreeSet::from([value.to_owned()]),
        }
    }
}

/// What a plain provider publishes for a policy record set: every target's values (or
/// host name) together.
fn native(set: &PolicyRecordSet) -> Wanted<Plain> {
    let values = set
        .targets
        .iter()
        .flat_map(|t| {
            t.values
                .iter()
                .cloned()
                .chain(t.hostname.iter().map(|h| format!("{h}.")))
        })
        .collect();
    Wanted::new(
        Plain {
            name: set.name.clone(),
            type_: set.type_.to_string(),
            ttl: set.ttl,
            values,
        },
        set,
    )
}

fn owner() -> Owner {
    Owner::new("hub-test")
}

/// One sync: desired → plan → batches applied; returns the zone and the plan.
fn sync(
    routed: &[RoutedIngress],
    zones: &[ZoneConfig],
    zone: &[Plain],
) -> (Vec<Plain>, plan::Plan<Plain>) {
    let desired = desired(1, routed, zones);
    let wanted: Vec<Wanted<Plain>> = desired.record_sets.iter().map(native).collect();
    let planned = plan::diff(&wanted, zone, &owner());
    let mut state = zone.to_vec();
    for batch in plan::batches(&planned, 2) {
        state = plan::apply(&state, &batch.changes);
    }
    (state, planned)
}

fn get<'a>(zone: &'a [Plain], name: &str, type_: &str) -> Option<&'a Plain> {
    zone.iter().find(|r| r.name == name && r.type_ == type_)
}

fn values(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|v| (*v).to_owned()).collect()
}

#[test]
fn publishes_converges_follows_health_and_leaves_foreign_records_alone() {
    let foreign = Plain {
        name: "www.example.com".to_owned(),
        type_: "A".to_owned(),
        ttl: 300,
        values: values(&["203.0.113.80"]),
    };
    let mut routed = vec![ingress(
        "shop",
        "shop.example.com",
        strategy(StrategyType::RoundRobin),
        vec![eu_west(), us_east()],
        Vec::new(),
    )];
    let (zone, planned) = sync(&routed, &[], std::slice::from_ref(&foreign));
    assert!(planned.conflicts().next().is_none());
    assert_eq!(
        get(&zone, "shop.example.com", "A").unwrap().values,
        values(&["192.0.2.1", "192.0.2.2"])
    );
    assert_eq!(
        get(&zone, "shop.example.com", "AAAA").unwrap().values,
        values(&["2001:db8::1", "2001:db8::2"])
    );
    assert!(get(&zone, "_fedingress-a.shop.example.com", "TXT").is_some());
    let (again, planned) = sync(&routed, &[], &zone);
    assert!(planned.is_empty());
    assert_eq!(again, zone);

    // us-east goes down: its addresses leave the record sets.
    routed[0].clusters[1].healthy = false;
    let (zone, planned) = sync(&routed, &[], &zone);
    assert_eq!(planned.names["shop.example.com"].updates.len(), 2);
    assert_eq!(
        get(&zone, "shop.example.com", "A").unwrap().values,
        values(&["192.0.2.1"])
    );

    // Someone edits the record set by hand: the next sync repairs it.
    let mut drifted = zone.clone();
    for r in &mut drifted {
        if r.name == "shop.example.com" && r.type_ == "A" {
            r.values = values(&["198.51.100.66"]);
        }
    }
    let (repaired, _) = sync(&routed, &[], &drifted);
    assert_eq!(repaired, zone);

    // The ingress goes away: everything of ours goes, the foreign record stays.
    let (zone, _) = sync(&[], &[], &zone);
    assert_eq!(zone, vec![foreign]);
}

#[test]
fn a_foreign_record_set_at_the_name_is_a_conflict_and_untouched() {
    let theirs = Plain {
        name: "shop.example.com".to_owned(),
        type_: "A".to_owned(),
        ttl: 60,
        values: values(&["203.0.113.1"]),
    };
    let routed = vec![ingress(
        "shop",
        "shop.example.com",
        strategy(StrategyType::RoundRobin),
        vec![eu_west()],
        Vec::new(),
    )];
    let (zone, planned) = sync(&routed, &[], std::slice::from_ref(&theirs));
    let conflicts: Vec<&plan::Conflict> = planned.conflicts().collect();
    assert_eq!(conflicts.len(), 1, "{conflicts:#?}");
    assert_eq!(conflicts[0].type_, "A");
    assert!(zone.contains(&theirs));
    // The AAAA record set had nobody in the way.
    assert!(get(&zone, "shop.example.com", "AAAA").is_some());
}

#[test]
fn delegation_is_published_and_withdrawn() {
    let zones = vec![ZoneConfig {
        name: "gslb.example.com".to_owned(),
        nameservers: vec![NameserverConfig {
            name: "ns1.gslb.example.com".to_owned(),
            addresses: vec!["192.0.2.53".parse().unwrap()],
        }],
        soa: Default::default(),
        ttl: 3600,
    }];
    let (zone, _) = sync(&[], &zones, &[]);
    assert_eq!(
        get(&zone, "gslb.example.com", "NS").unwrap().values,
        values(&["ns1.gslb.example.com."])
    );
    assert_eq!(
        get(&zone, "ns1.gslb.example.com", "A").unwrap().values,
        values(&["192.0.2.53"])
    );
    let (zone, planned) = sync(&[], &[], &zone);
    assert!(zone.is_empty());
    assert_eq!(
        planned.names.keys().collect::<Vec<_>>(),
        vec!["gslb.example.com"]
    );
}

/// Every combination of health, cordon and addresses over three clusters.
fn cluster_sets() -> Vec<Vec<ClusterView>> {
    let mut out = Vec::new();
    for mask in 0..(1u32 << 9) {
        let clusters = (0..3u32)
            .map(|i| {
                let bits = (mask >> (i * 3)) & 0b111;
                let ip = format!("192.0.2.{}", i + 1);
                let ips: Vec<&str> = if bits & 0b100 != 0 {
                    Vec::new()
                } else {
                    vec![ip.as_str()]
                };
                let mut c = cluster(&format!("c{i}"), location("r", 0.0, 0.0), &ips, &[]);
                c.healthy = bits & 0b001 == 0;
                c.cordoned = bits & 0b010 != 0;
                c
            })
            .collect();
        out.push(clusters);
    }
    out
}

/// Published targets are the clusters routing answers with, for the strategies that
/// do not depend on the client, healthy or failing open or closed.
#[test]
fn targets_agree_with_routing() {
    let client = ClientInfo {
        address: None,
        location: location("r", 0.0, 0.0),
        rtt: None,
    };
    let mut weighted = strategy(StrategyType::Weighted);
    weighted.weights = Some(BTreeMap::from([
        ("c0".to_owned(), 2),
        ("c1".to_owned(), 0),
        ("c2".to_owned(), 1),
    ]));
    for strategy in [strategy(StrategyType::RoundRobin), weighted] {
        for when in [WhenAllUnhealthy::ServeAll, WhenAllUnhealthy::NoData] {
            for clusters in cluster_sets() {
                let mut routed =
                    ingress("x", "x.example.com", strategy.clone(), clusters, Vec::new());
                routed.traffic.when_all_unhealthy = when;
                let decision = routing::decide(
                    &routed.traffic,
                    &routed.clusters,
                    &client,
                    &FailoverState::default(),
                );
                let answered: BTreeSet<&str> = match &decision.answer {
                    Answer::All(names) => names.iter().map(String::as_str).collect(),
                    Answer::Weighted(shares) => shares.iter().map(|(n, _)| n.as_str()).collect(),
                    Answer::NoData => BTreeSet::new(),
                    Answer::Addresses(_) => unreachable!(),
                };
                // Routing may answer a fail-open cluster without an address (it adds
                // nothing to the response); a provider cannot publish it.
                let with_address: BTreeSet<&str> = answered
                    .into_iter()
                    .filter(|n| {
                        routed
                            .clusters
                            .iter()
                            .any(|c| c.name == *n && !c.ips.is_empty())
                    })
                    .collect();
                let sets = fedingress_providers::publish::desired::record_sets(&routed);
                let published: BTreeSet<&str> = sets
                    .iter()
                    .filter(|s| s.type_ == RecordType::A)
                    .flat_map(|s| s.targets.iter().map(|t| t.cluster.as_str()))
                    .collect();
                assert_eq!(
                    published, with_address,
                    "{:?} {when:?} {:?}: {}",
                    strategy.type_, routed.clusters, decision.summary
                );
            }
        }
    }
}
