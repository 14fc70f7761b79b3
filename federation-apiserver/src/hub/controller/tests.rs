//! Unit tests of [`super::decide`]: worlds built in memory, no I/O.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use fedingress_api::cluster::Address;
use fedingress_api::ingress::ClusterPhase;
use fedingress_api::plan::{
    AgentReport, BackendHealth, ClusterPlan, IngressKey, IngressReport, IngressShare,
};
use fedingress_api::{Cluster, FederatedIngress, Time};

use super::*;
use crate::hub::routing_state::{IngressRouting, Serving};
use crate::hub::{AgentState, Published};

const T0: i64 = 1_700_000_000_000;

fn at(ms: i64) -> Time {
    Time(chrono::DateTime::from_timestamp_millis(ms).unwrap())
}

fn cluster(name: &str, region: &str, lat: f64, lon: f64) -> Cluster {
    let yaml = format!(
        "apiVersion: fedingress.io/v1alpha1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec: {{region: {region}, location: {{latitude: {lat}, longitude: {lon}}}}}\n"
    );
    yaml_serde::from_str(&yaml).unwrap()
}

fn ingress(name: &str, generation: i64, policy: &str) -> FederatedIngress {
    let yaml = format!(
        r#"apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {{name: {name}, namespace: default, uid: uid-{name}, generation: {generation}, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  rules:
  - {{protocol: TCP, port: 7000, backend: {{service: echo, port: 9000}}}}
  traffic: {{dnsName: {name}.fedingress.test, ttl: 5, strategy: {{type: Geo}}, whenAllUnhealthy: {policy}, failbackDelaySeconds: 30}}
"#
    );
    yaml_serde::from_str(&yaml).unwrap()
}

fn key(name: &str) -> IngressKey {
    IngressKey::new("default", name)
}

/// An agent that applied `shares` (ingress → generation) and reports `ready` endpoints
/// for each.
fn agent(ip: &str, shares: &[(&str, i64)], ready: u32, connected: bool) -> AgentState {
    let mut plan = ClusterPlan::default();
    let mut reports = Vec::new();
    for (name, generation) in shares {
        plan.ingresses.insert(
            key(name),
            IngressShare {
                key: key(name),
                uid: format!("uid-{name}"),
                generation: *generation,
                rules: Vec::new(),
                tls: Vec::new(),
                cluster_override: None,
            },
        );
        reports.push(IngressReport {
            key: key(name),
            applied_generation: *generation,
            addresses: vec![Address::ip(ip.parse().unwrap())],
            backends: vec![BackendHealth {
                service: "echo".into(),
                port: 9000,
                ready,
                total: 1,
            }],
            listeners: Vec::new(),
            rule_errors: Vec::new(),
            rules: Vec::new(),
        });
    }
    AgentState {
        session: 1,
        connected,
        agent_version: "test".into(),
        driver: "standalone".into(),
        capabilities: Vec::new(),
        last_seen: Instant::now(),
        last_seen_time: at(T0),
        applied: Some(Published {
            version: 1,
            digest: String::new(),
            plan: Arc::new(plan),
        }),
        rule_errors: Vec::new(),
        report: Some(Arc::new(AgentReport {
            ingresses: reports,
            ..AgentReport::default()
        })),
    }
}

struct Fixture {
    clusters: BTreeMap<String, Cluster>,
    ingresses: BTreeMap<IngressKey, FederatedIngress>,
    agents: BTreeMap<String, AgentState>,
    routing: BTreeMap<IngressKey, IngressRouting>,
    placements: BTreeMap<IngressKey, Vec<String>>,
    conflicts: BTreeMap<IngressKey, Vec<Conflict>>,
    restoring: bool,
    now: Time,
}

impl Fixture {
    fn new() -> Self {
        let clusters = [
            cluster("eu-west", "europe", 50.0, 4.0),
            cluster("us-east", "us", 39.0, -77.0),
        ]
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap(), c))
        .collect();
        Fixture {
            clusters,
            ingresses: BTreeMap::new(),
            agents: BTreeMap::new(),
            routing: BTreeMap::new(),
            placements: BTreeMap::new(),
            conflicts: BTreeMap::new(),
            restoring: false,
            now: at(T0),
        }
    }

    fn with_ingress(mut self, ingress: FederatedIngress) -> Self {
        self.ingresses.insert(IngressKey::of(&ingress), ingress);
        self
    }

    fn decide(&self, dirty: &Dirty) -> Pass {
        let world = World {
            clusters: &self.clusters,
            ingresses: &self.ingresses,
            agents: &self.agents,
            restoring: self.restoring,
            routing: &self.routing,
            placements: &self.placements,
            conflicts: &self.conflicts,
            now: self.now,
        };
        decide(&world, dirty)
    }

    /// Runs a pass over everything and keeps its memory, as the controller does.
    fn step(&mut self) -> Pass {
        let pass = self.decide(&Dirty {
            all: true,
            replan: true,
            ..Dirty::default()
        });
        self.remember(&pass);
        pass
    }

    fn remember(&mut self, pass: &Pass) {
        self.placements.extend(pass.placements.clone());
        if let Some(conflicts) = &pass.conflicts {
            self.conflicts = conflicts.clone();
        }
        for (key, outcome) in &pass.ingresses {
            match &outcome.routing {
                Some(routing) => self.routing.insert(key.clone(), routing.clone()),
                None => self.routing.remove(key),
            };
            if let Some(ingress) = self.ingresses.get_mut(key) {
                ingress.status = Some(outcome.status.clone());
            }
        }
    }
}

fn routed_health(pass: &Pass, name: &str) -> BTreeMap<String, bool> {
    pass.ingresses[&key(name)]
        .routed
        .as_ref()
        .unwrap()
        .clusters
        .iter()
        .map(|c| (c.name.clone(), c.healthy))
        .collect()
}

fn both_healthy() -> BTreeMap<String, bool> {
    [("eu-west".to_string(), true), ("us-east".to_string(), true)].into()
}

#[test]
fn a_pending_generation_keeps_routing_on_the_previous_one() {
    let mut f = Fixture::new().with_ingress(ingress("echo", 1, "NoData"));
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 1)], 1, true),
    );
    f.agents.insert(
        "us-east".into(),
        agent("127.0.0.12", &[("echo", 1)], 1, true),
    );
    f.step();
    // A spec edit: generation 2, not applied anywhere yet.
    f.ingresses.insert(key("echo"), {
        let mut next = ingress("echo", 2, "NoData");
        next.status = f.ingresses[&key("echo")].status.clone();
        next
    });
    let pass = f.step();
    assert_eq!(routed_health(&pass, "echo"), both_healthy());
    let status = &pass.ingresses[&key("echo")].status;
    assert!(
        status
            .clusters
            .iter()
            .all(|c| c.phase == ClusterPhase::Pending && c.healthy),
        "{status:?}"
    );
}

#[test]
fn a_cluster_that_never_applied_the_share_is_never_answered() {
    let mut f = Fixture::new().with_ingress(ingress("echo", 1, "ServeAll"));
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 1)], 0, true),
    );
    f.agents
        .insert("us-east".into(), agent("127.0.0.12", &[], 1, true));
    let pass = f.step();
    let routed = pass.ingresses[&key("echo")].routed.as_ref().unwrap();
    let names: Vec<&str> = routed.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["eu-west"], "us-east never applied echo");
    // And a brand-new ingress that nobody applied has no cluster at all.
    let mut f = Fixture::new().with_ingress(ingress("fresh", 1, "ServeAll"));
    f.agents
        .insert("eu-west".into(), agent("127.0.0.11", &[], 1, true));
    let pass = f.step();
    assert!(
        pass.ingresses[&key("fresh")]
            .routed
            .as_ref()
            .unwrap()
            .clusters
            .is_empty()
    );
}

#[test]
fn after_a_restart_routing_comes_from_the_persisted_state_until_the_lease_passes() {
    let mut f = Fixture::new().with_ingress(ingress("echo", 3, "NoData"));
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 3)], 1, true),
    );
    f.agents.insert(
        "us-east".into(),
        agent("127.0.0.12", &[("echo", 3)], 1, true),
    );
    f.step();
    let persisted = f.routing.clone();
    let stored = f.ingresses[&key("echo")].status.clone();

    // A new hub: no agent has reconnected, the state was loaded from the store.
    let mut restarted = Fixture::new().with_ingress(f.ingresses[&key("echo")].clone());
    restarted.routing = persisted;
    restarted.restoring = true;
    let pass = restarted.step();
    assert_eq!(routed_health(&pass, "echo"), both_healthy());
    assert_eq!(
        pass.ingresses[&key("echo")].status.clusters,
        stored.unwrap().clusters,
        "stored status stands while restoring"
    );
    assert!(
        pass.cluster_statuses.is_empty(),
        "no cluster goes offline while restoring"
    );

    // One agent came back; the other did not within the lease.
    restarted.restoring = false;
    restarted.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 3)], 1, true),
    );
    let pass = restarted.step();
    let health = routed_health(&pass, "echo");
    assert!(health["eu-west"]);
    assert!(!health["us-east"], "offline, still a ServeAll candidate");
}

#[test]
fn a_recovered_cluster_waits_for_the_failback_delay() {
    let mut f = Fixture::new().with_ingress(ingress("echo", 1, "ServeAll"));
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 1)], 1, true),
    );
    f.agents.insert(
        "us-east".into(),
        agent("127.0.0.12", &[("echo", 1)], 1, true),
    );
    f.step();
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 1)], 0, true),
    );
    assert!(!routed_health(&f.step(), "echo")["eu-west"]);
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 1)], 1, true),
    );
    f.now = at(T0 + 1_000);
    assert!(
        !routed_health(&f.step(), "echo")["eu-west"],
        "held for 30 s"
    );
    f.now = at(T0 + 31_000);
    assert!(routed_health(&f.step(), "echo")["eu-west"]);
}

#[test]
fn only_dirty_ingresses_are_recomputed() {
    let mut f = Fixture::new()
        .with_ingress(ingress("a", 1, "ServeAll"))
        .with_ingress(ingress("b", 1, "ServeAll"));
    f.agents
        .insert("eu-west".into(), agent("127.0.0.11", &[("a", 1)], 1, true));
    f.agents
        .insert("us-east".into(), agent("127.0.0.12", &[("b", 1)], 1, true));
    f.step();
    let pass = f.decide(&Dirty {
        ingresses: [key("a")].into(),
        ..Dirty::default()
    });
    assert_eq!(pass.ingresses.keys().collect::<Vec<_>>(), [&key("a")]);
    assert!(pass.plans.is_none(), "no spec changed: no replan");
    // A dirty cluster recomputes what is placed or serving there: both are placed on
    // every cluster here.
    let pass = f.decide(&Dirty {
        clusters: ["us-east".to_string()].into(),
        ..Dirty::default()
    });
    assert_eq!(pass.ingresses.len(), 2);
    let idle = f.decide(&Dirty::default());
    assert!(idle.ingresses.is_empty() && idle.cluster_statuses.is_empty());
}

#[test]
fn a_deleted_ingress_loses_its_routing_state() {
    let mut f = Fixture::new().with_ingress(ingress("echo", 1, "ServeAll"));
    f.agents.insert(
        "eu-west".into(),
        agent("127.0.0.11", &[("echo", 1)], 1, true),
    );
    f.step();
    f.ingresses.clear();
    let pass = f.decide(&Dirty {
        ingresses: [key("echo")].into(),
        replan: true,
        ..Dirty::default()
    });
    assert_eq!(pass.ingresses[&key("echo")].routing, None);
    assert!(pass.plans.unwrap().values().all(|p| p.ingresses.is_empty()));
    let _ = Serving::default();
}

#[test]
fn routing_state_of_an_ingress_deleted_while_the_hub_was_down_is_dropped() {
    let mut f = Fixture::new();
    f.routing.insert(key("gone"), IngressRouting::default());
    f.restoring = true;
    let pass = f.step();
    assert_eq!(pass.ingresses[&key("gone")].routing, None);
}
