//! Unit tests of [`super::decide`] (and of what the observe cache marks dirty for it):
//! worlds built in memory, no I/O.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use fedingress_api::cluster::Address;
use fedingress_api::ingress::ClusterPhase;
use fedingress_api::plan::{
    AgentReport, BackendHealth, ClusterPlan, IngressKey, IngressReport, IngressShare,
};
use fedingress_api::{Cluster, FederatedIngress, Time};
use fedingress_dns::SrvService;

use super::*;
use crate::controller::observe::Cache;
use crate::controller::pools::{Bindings, Book, Members};
use crate::gslb::AnswerChange;
use crate::routing_state::{IngressRouting, Serving};
use crate::{AgentState, Published};

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
                anycast_addresses: Vec::new(),
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
            anycast: Vec::new(),
        });
    }
    AgentState {
        session: 1,
        connected,
        member: String::new(),
        labels: BTreeMap::new(),
        address: None,
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
    /// Clusters that take no new share.
    saturated: BTreeSet<String>,
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
            saturated: BTreeSet::new(),
            restoring: false,
            now: at(T0),
        }
    }

    /// `cluster`'s agent is now `state`.
    fn set_agent(&mut self, cluster: &str, state: AgentState) {
        self.agents.insert(cluster.into(), state);
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
            members: &Members::new(),
            book: &Book::new(),
            bindings: &Bindings::new(),
            saturated: &self.saturated,
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
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 1, true));
    f.set_agent("us-east", agent("127.0.0.12", &[("echo", 1)], 1, true));
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
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 0, true));
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
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 3)], 1, true));
    f.set_agent("us-east", agent("127.0.0.12", &[("echo", 3)], 1, true));
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
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 1, true));
    f.set_agent("us-east", agent("127.0.0.12", &[("echo", 1)], 1, true));
    f.step();
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 0, true));
    assert!(!routed_health(&f.step(), "echo")["eu-west"]);
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 1, true));
    f.now = at(T0 + 1_000);
    let held = f.step();
    assert!(!routed_health(&held, "echo")["eu-west"], "held for 30 s");
    let end_of_hold = u64::try_from(T0 + 31_000).unwrap();
    assert_eq!(
        held.ingresses[&key("echo")].timer,
        Some(end_of_hold),
        "a pass is due when the hold ends"
    );
    f.now = at(T0 + 31_000);
    let back = f.step();
    assert!(routed_health(&back, "echo")["eu-west"]);
    assert_eq!(
        back.ingresses[&key("echo")].timer,
        None,
        "nothing left to wait for"
    );
}

#[test]
fn a_cluster_entrys_last_update_time_moves_only_when_it_changes() {
    let mut f = Fixture::new().with_ingress(ingress("echo", 1, "ServeAll"));
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 1, true));
    f.set_agent("us-east", agent("127.0.0.12", &[("echo", 1)], 1, true));
    let times = |pass: &Pass| -> BTreeMap<String, Option<Time>> {
        pass.ingresses[&key("echo")]
            .status
            .clusters
            .iter()
            .map(|c| (c.name.clone(), c.last_update_time))
            .collect()
    };
    let pass = f.step();
    assert_eq!(
        times(&pass),
        [
            ("eu-west".to_string(), Some(at(T0))),
            ("us-east".to_string(), Some(at(T0)))
        ]
        .into()
    );

    // Nothing changed: the times stay, and the status equals the stored one (no write).
    let stored = f.ingresses[&key("echo")].status.clone().unwrap();
    f.now = at(T0 + 5_000);
    let pass = f.step();
    assert_eq!(pass.ingresses[&key("echo")].status, stored);

    // eu-west's backend goes down: only its entry moves.
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 0, true));
    f.now = at(T0 + 9_000);
    let pass = f.step();
    let entry = |name: &str| cluster_status(&pass.ingresses[&key("echo")].status, name).clone();
    assert!(!entry("eu-west").healthy);
    assert_eq!(entry("eu-west").last_update_time, Some(at(T0 + 9_000)));
    assert_eq!(entry("us-east").last_update_time, Some(at(T0)));

    // An entry stored without a time (by an older hub) gets one once.
    let status = f
        .ingresses
        .get_mut(&key("echo"))
        .unwrap()
        .status
        .as_mut()
        .unwrap();
    for entry in &mut status.clusters {
        entry.last_update_time = None;
    }
    f.now = at(T0 + 12_000);
    let pass = f.step();
    assert!(
        times(&pass).values().all(|t| *t == Some(at(T0 + 12_000))),
        "{:?}",
        times(&pass)
    );
}

#[test]
fn failover_order_names_of_unplaced_clusters_are_named_in_the_placed_message() {
    let failover = |order: &[&[&str]]| {
        let mut ingress = ingress("fo", 1, "NoData");
        let strategy = &mut ingress.spec.traffic.strategy;
        strategy.type_ = StrategyType::Failover;
        strategy.failover_order = Some(
            order
                .iter()
                .map(|tier| tier.iter().map(|n| (*n).to_string()).collect())
                .collect(),
        );
        ingress
    };
    let placed = |pass: &Pass| {
        pass.ingresses[&key("fo")]
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_PLACED)
            .unwrap()
            .clone()
    };
    // A typo in tier 0.
    let mut f = Fixture::new().with_ingress(failover(&[&["eu-west", "eu-wst"], &["us-east"]]));
    f.agents
        .insert("eu-west".into(), agent("127.0.0.11", &[("fo", 1)], 1, true));
    f.agents
        .insert("us-east".into(), agent("127.0.0.12", &[("fo", 1)], 1, true));
    let pass = f.step();
    let condition = placed(&pass);
    assert!(condition.is_true(), "{condition:?}");
    assert_eq!(condition.reason, "Placed");
    assert_eq!(
        condition.message,
        "placed on eu-west, us-east; failoverOrder names clusters it is not placed on, which routing skips: eu-wst (failoverOrder[0])"
    );
    // Routing still answers tier 0 with eu-west.
    let routed = pass.ingresses[&key("fo")].routed.as_ref().unwrap();
    assert_eq!(routed.failover.active_tier, 0);
    assert!(routed.clusters.iter().all(|c| c.healthy));

    // The typo fixed: the message says only where it is placed.
    let mut fixed = failover(&[&["eu-west"], &["us-east"]]);
    fixed.metadata.generation = Some(2);
    fixed.status = f.ingresses[&key("fo")].status.clone();
    f.ingresses.insert(key("fo"), fixed);
    let condition = placed(&f.step());
    assert!(condition.is_true());
    assert_eq!(condition.message, "placed on eu-west, us-east");
}

#[test]
fn status_load_rps_is_the_load_overflow_reads_and_only_capacity_rps_is_its_limit() {
    use fedingress_api::cluster::Capacity;
    use fedingress_api::plan::ListenerLoad;
    let mut ingress = ingress("ov", 1, "NoData");
    ingress.spec.traffic.strategy.type_ = StrategyType::Overflow;
    let mut f = Fixture::new().with_ingress(ingress);
    f.clusters.get_mut("eu-west").unwrap().spec.capacity = Some(Capacity {
        rps: Some(100),
        connections: Some(1),
    });
    // connections alone: no limit for Overflow.
    f.clusters.get_mut("us-east").unwrap().spec.capacity = Some(Capacity {
        rps: None,
        connections: Some(5),
    });
    let loaded = |ip: &str| {
        let mut a = agent(ip, &[("ov", 1)], 1, true);
        let mut report = (**a.report.as_ref().unwrap()).clone();
        report.requests_per_second = 1.0;
        let listener = |protocol: &str, per_second: f64| ListenerLoad {
            protocol: protocol.into(),
            port: 7000,
            connections_per_second: per_second,
            active_connections: 2,
        };
        // The HTTP listener's connections are its requests: not counted again.
        report.ingresses[0].listeners = vec![listener("TCP", 3.0), listener("HTTP", 5.0)];
        a.report = Some(Arc::new(report));
        a
    };
    f.set_agent("eu-west", loaded("127.0.0.11"));
    f.set_agent("us-east", loaded("127.0.0.12"));
    let pass = f.step();
    let routed = pass.ingresses[&key("ov")].routed.as_ref().unwrap();
    let view = |name: &str| routed.clusters.iter().find(|c| c.name == name).unwrap();
    for name in ["eu-west", "us-east"] {
        let rps = pass.cluster_statuses[name].load.unwrap().rps;
        assert_eq!(rps, 4.0, "{name}");
        assert_eq!(view(name).load, rps, "{name}: status and Overflow agree");
    }
    assert_eq!(view("eu-west").capacity, Some(100.0));
    assert_eq!(view("us-east").capacity, None);
}

/// Issue 24: a saturated cluster (its pools, or its own capacity) takes no new ingress
/// and keeps the ones placed there.
#[test]
fn a_saturated_cluster_keeps_its_ingresses_and_takes_no_new_one() {
    let mut f = Fixture::new().with_ingress(ingress("old", 1, "ServeAll"));
    f.step();
    assert_eq!(f.placements[&key("old")], ["eu-west", "us-east"]);
    f.saturated.insert("us-east".into());
    f.ingresses
        .insert(key("new"), ingress("new", 1, "ServeAll"));
    f.step();
    assert_eq!(f.placements[&key("new")], ["eu-west"]);
    assert_eq!(f.placements[&key("old")], ["eu-west", "us-east"], "kept");
    // Below capacity again: the new one is placed there too.
    f.saturated.clear();
    f.step();
    assert_eq!(f.placements[&key("new")], ["eu-west", "us-east"]);
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
    f.set_agent("eu-west", agent("127.0.0.11", &[("echo", 1)], 1, true));
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

/// An ingress with the rules of a DNS service: TCP and UDP 53 named `dns` (rules 0, 1)
/// and a TLS rule terminated by the ingress (rule 2).
fn dns_ingress(name: &str) -> FederatedIngress {
    let yaml = format!(
        r#"apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {{name: {name}, namespace: default, uid: uid-{name}, generation: 1, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  rules:
  - {{protocol: TCP, port: 53, name: dns, backend: {{service: echo, port: 9000}}}}
  - {{protocol: UDP, port: 53, name: dns, backend: {{service: echo, port: 9000}}}}
  - {{protocol: TLS, host: dot.example.com, port: 853, tlsMode: Terminate, backend: {{service: echo, port: 9000}}}}
  tls: [{{hosts: [dot.example.com], secretName: dot}}]
  traffic: {{dnsName: {name}.fedingress.test, strategy: {{type: RoundRobin}}}}
"#
    );
    let mut ingress: FederatedIngress = yaml_serde::from_str(&yaml).unwrap();
    ingress.spec.apply_defaults();
    ingress
}

/// [`agent_of`] `ingress` on `ip`, a standalone agent offering everything, with its
/// rules in `rule_errors` failing and no per-rule addresses.
fn standalone_agent_of(ingress: &FederatedIngress, ip: &str, rule_errors: &[u32]) -> AgentState {
    agent_of(
        ingress,
        ip,
        Vec::new(),
        rule_errors,
        "standalone",
        EVERYTHING,
    )
}

/// An agent that applied `ingress` (its real rules), reports it healthy on `ip` with
/// `rules` (per-rule addresses) and `rule_errors` (rule indices), and offers
/// `capabilities` with `driver`.
fn agent_of(
    ingress: &FederatedIngress,
    ip: &str,
    rules: Vec<fedingress_api::plan::RuleAddresses>,
    rule_errors: &[u32],
    driver: &str,
    capabilities: &[&str],
) -> AgentState {
    let share = IngressShare::of(ingress, "any");
    let key = share.key.clone();
    let mut state = agent(ip, &[], 1, true);
    let mut plan = ClusterPlan::default();
    plan.ingresses.insert(key.clone(), share);
    state.applied = Some(Published {
        version: 1,
        digest: String::new(),
        plan: Arc::new(plan),
    });
    state.driver = driver.into();
    state.capabilities = capabilities.iter().map(|c| (*c).to_string()).collect();
    state.report = Some(Arc::new(AgentReport {
        ingresses: vec![IngressReport {
            key: key.clone(),
            applied_generation: 1,
            addresses: vec![Address::ip(ip.parse().unwrap())],
            backends: vec![BackendHealth {
                service: "echo".into(),
                port: 9000,
                ready: 1,
                total: 1,
            }],
            listeners: Vec::new(),
            rule_errors: rule_errors
                .iter()
                .map(|&rule| fedingress_api::plan::RuleError {
                    ingress: key.clone(),
                    rule,
                    message: format!("rule {rule} is not served"),
                })
                .collect(),
            rules,
            anycast: Vec::new(),
        }],
        ..AgentReport::default()
    }));
    state
}

const EVERYTHING: &[&str] = &["HTTP", "HTTPS", "TLS", "TCP", "UDP"];

fn service<'a>(routed: &'a fedingress_dns::RoutedIngress, transport: &str) -> &'a SrvService {
    routed
        .srv
        .iter()
        .find(|s| s.transport == transport)
        .unwrap()
}

/// `cluster`'s entry in `status`.
fn cluster_status<'a>(
    status: &'a FederatedIngressStatus,
    cluster: &str,
) -> &'a fedingress_api::ingress::ClusterIngressStatus {
    status.clusters.iter().find(|c| c.name == cluster).unwrap()
}

fn servable(status: &FederatedIngressStatus) -> (String, String, String) {
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_SERVABLE)
        .unwrap();
    (
        format!("{:?}", c.status),
        c.reason.clone(),
        c.message.clone(),
    )
}

#[test]
fn per_rule_addresses_reach_the_srv_services_and_the_status() {
    let ingress = dns_ingress("dns");
    let mut f = Fixture::new().with_ingress(ingress.clone());
    let udp_lb = fedingress_api::plan::RuleAddresses {
        rule: 1,
        addresses: vec![Address::hostname("udp-lb.elb.example.com")],
    };
    // A rule listed with the share's own addresses is not different: not kept.
    let same = fedingress_api::plan::RuleAddresses {
        rule: 0,
        addresses: vec![Address::ip("127.0.0.11".parse().unwrap())],
    };
    f.set_agent(
        "eu-west",
        agent_of(
            &ingress,
            "127.0.0.11",
            vec![udp_lb, same],
            &[],
            "kubernetes",
            EVERYTHING,
        ),
    );
    f.set_agent("us-east", standalone_agent_of(&ingress, "127.0.0.12", &[]));
    let pass = f.step();
    let outcome = &pass.ingresses[&key("dns")];
    let routed = outcome.routed.as_ref().unwrap();
    let udp = service(routed, "udp");
    assert_eq!(udp.addresses.len(), 1, "{udp:?}");
    assert_eq!(
        udp.addresses["eu-west"].hostnames,
        ["udp-lb.elb.example.com"]
    );
    assert!(udp.excluded.is_empty());
    assert!(service(routed, "tcp").addresses.is_empty());
    // Every cluster stays healthy; the name's addresses are the share's.
    assert!(routed.clusters.iter().all(|c| c.healthy));
    let eu = routed
        .clusters
        .iter()
        .find(|c| c.name == "eu-west")
        .unwrap();
    assert_eq!(eu.ips, ["127.0.0.11".parse::<std::net::IpAddr>().unwrap()]);

    let status = &outcome.status;
    let entry = |name: &str| cluster_status(status, name);
    assert_eq!(
        entry("eu-west").rules,
        [fedingress_api::ingress::RuleAddressStatus {
            rule: 1,
            addresses: vec![Address::hostname("udp-lb.elb.example.com")],
        }]
    );
    assert!(entry("us-east").rules.is_empty());
    // Remembered in the serving state by listener (persisted across restarts).
    let serving = &outcome.routing.as_ref().unwrap().clusters["eu-west"];
    assert_eq!(serving.rules.len(), 1);
    assert_eq!(serving.rules[0].port, 53);
}

#[test]
fn capabilities_lacking_a_rule_set_servable_false_and_leave_its_srv_answers() {
    let ingress = dns_ingress("dns");
    let mut f = Fixture::new().with_ingress(ingress.clone());
    // eu-west's kubernetes profile: no UDP, TLS only as passthrough.
    f.set_agent(
        "eu-west",
        agent_of(
            &ingress,
            "127.0.0.11",
            Vec::new(),
            &[],
            "kubernetes",
            &["HTTP", "HTTPS", "TCP", "TLS/Passthrough"],
        ),
    );
    // us-east's agent predates capabilities: unknown, nothing is taken to be missing.
    f.set_agent(
        "us-east",
        agent_of(&ingress, "127.0.0.12", Vec::new(), &[], "standalone", &[]),
    );
    let pass = f.step();
    let outcome = &pass.ingresses[&key("dns")];
    let (status, reason, message) = servable(&outcome.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnsupportedRules")
    );
    assert_eq!(
        message,
        "cluster eu-west (driver kubernetes) cannot serve rule 1 (UDP); cluster eu-west (driver kubernetes) cannot serve rule 2 (TLS/Terminate)"
    );
    let eu = cluster_status(&outcome.status, "eu-west");
    assert!(
        eu.message
            .contains("driver kubernetes cannot serve rule 2 (TLS/Terminate)"),
        "{eu:?}"
    );
    let routed = outcome.routed.as_ref().unwrap();
    assert_eq!(
        service(routed, "udp").excluded,
        ["eu-west".to_string()].into()
    );
    assert!(service(routed, "tcp").excluded.is_empty());
    // Still in the name's answers: its other rules are served.
    assert!(routed.clusters.iter().all(|c| c.healthy));
    // The plans are unchanged: the agent gets every rule and says what it cannot do.
    let plans = pass.plans.unwrap();
    assert_eq!(
        plans["eu-west"].ingresses[&key("dns")].rules.len(),
        3,
        "the plan keeps every rule"
    );

    // A new session offering everything (a new Hello): servable again.
    f.agents.get_mut("eu-west").unwrap().capabilities =
        EVERYTHING.iter().map(|c| (*c).to_string()).collect();
    let pass = f.decide(&Dirty {
        clusters: ["eu-west".to_string()].into(),
        ..Dirty::default()
    });
    let outcome = &pass.ingresses[&key("dns")];
    let (status, reason, message) = servable(&outcome.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "AllRulesServable")
    );
    assert!(message.contains("not known for us-east"), "{message}");
    assert!(
        service(outcome.routed.as_ref().unwrap(), "udp")
            .excluded
            .is_empty()
    );
}

#[test]
fn a_rule_error_leaves_only_that_rules_srv_answers() {
    let ingress = dns_ingress("dns");
    let mut f = Fixture::new().with_ingress(ingress.clone());
    f.set_agent("eu-west", standalone_agent_of(&ingress, "127.0.0.11", &[1]));
    f.set_agent("us-east", standalone_agent_of(&ingress, "127.0.0.12", &[]));
    let pass = f.step();
    let outcome = &pass.ingresses[&key("dns")];
    let routed = outcome.routed.as_ref().unwrap();
    assert_eq!(
        service(routed, "udp").excluded,
        ["eu-west".to_string()].into()
    );
    assert!(service(routed, "tcp").excluded.is_empty());
    assert!(
        routed.clusters.iter().all(|c| c.healthy),
        "eu-west still serves its other rules"
    );
    let eu = cluster_status(&outcome.status, "eu-west");
    assert_eq!(eu.phase, ClusterPhase::Failed);
    assert!(eu.healthy);
    assert_eq!(eu.message, "rule 1: rule 1 is not served");

    // Every rule failed: nothing is served there, the cluster is unhealthy.
    f.set_agent(
        "eu-west",
        standalone_agent_of(&ingress, "127.0.0.11", &[0, 1, 2]),
    );
    let health = routed_health(&f.step(), "dns");
    assert!(!health["eu-west"]);
    assert!(health["us-east"]);
}

#[test]
fn per_rule_addresses_follow_the_listener_when_an_edit_moves_the_rules() {
    let applied = dns_ingress("dns");
    let udp_lb = fedingress_api::plan::RuleAddresses {
        rule: 1,
        addresses: vec![Address::ip("127.0.0.99".parse().unwrap())],
    };
    // Generation 2 puts the UDP rule first; the agent still serves generation 1.
    let mut edited = applied.clone();
    edited.metadata.generation = Some(2);
    edited.spec.rules.swap(0, 1);
    let mut f = Fixture::new().with_ingress(edited);
    f.set_agent(
        "eu-west",
        agent_of(
            &applied,
            "127.0.0.11",
            vec![udp_lb],
            &[],
            "standalone",
            EVERYTHING,
        ),
    );
    let pass = f.step();
    let outcome = &pass.ingresses[&key("dns")];
    let routed = outcome.routed.as_ref().unwrap();
    assert_eq!(
        service(routed, "udp").addresses["eu-west"].ips,
        ["127.0.0.99".parse::<std::net::IpAddr>().unwrap()]
    );
    assert!(service(routed, "tcp").addresses.is_empty());
    let eu = &outcome.status.clusters[0];
    assert_eq!(eu.phase, ClusterPhase::Pending);
    assert_eq!(eu.rules.len(), 1);
    assert_eq!(eu.rules[0].rule, 0, "the index in the current spec");
}

/// `ingress` with the Anycast strategy on 192.0.2.10.
fn anycast_ingress(name: &str) -> FederatedIngress {
    let mut ingress = ingress(name, 1, "NoData");
    ingress.spec.traffic.strategy.type_ = fedingress_api::ingress::StrategyType::Anycast;
    ingress.spec.traffic.strategy.anycast_addresses = Some(vec!["192.0.2.10".into()]);
    ingress
}

/// `agent` whose share of `name` reports the route of 192.0.2.10 and whose speaker is
/// `speaker`.
fn anycast_agent(
    ip: &str,
    name: &str,
    announced: bool,
    reason: &str,
    speaker: Option<fedingress_api::plan::SpeakerReport>,
) -> AgentState {
    let mut a = agent(ip, &[(name, 1)], 1, true);
    let mut report = (**a.report.as_ref().unwrap()).clone();
    report.ingresses[0].anycast = vec![fedingress_api::plan::AnycastRoute {
        address: "192.0.2.10".parse().unwrap(),
        announced,
        reason: reason.into(),
    }];
    report.speaker = speaker;
    a.report = Some(Arc::new(report));
    a
}

#[test]
fn anycast_routes_reach_the_status_the_routing_and_the_cluster_speaker() {
    use fedingress_api::plan::SpeakerReport;
    let mut f = Fixture::new().with_ingress(anycast_ingress("vip"));
    let up = SpeakerReport {
        up: true,
        peers: 2,
        established_peers: 2,
        message: String::new(),
    };
    f.set_agent(
        "eu-west",
        anycast_agent("127.0.0.11", "vip", true, "healthy", Some(up)),
    );
    f.set_agent(
        "us-east",
        anycast_agent(
            "127.0.0.12",
            "vip",
            false,
            "backend echo:9000 has no ready endpoint",
            None,
        ),
    );
    let pass = f.step();
    let outcome = &pass.ingresses[&key("vip")];
    let eu = cluster_status(&outcome.status, "eu-west");
    assert_eq!(eu.anycast.len(), 1);
    assert!(eu.anycast[0].announced);
    let routed = outcome.routed.as_ref().unwrap();
    let us = routed
        .clusters
        .iter()
        .find(|c| c.name == "us-east")
        .unwrap();
    assert_eq!(
        us.anycast[0].reason,
        "backend echo:9000 has no ready endpoint"
    );
    let speaker = pass.cluster_statuses["eu-west"].speaker.clone().unwrap();
    assert!(speaker.up && speaker.established_peers == 2);
    assert!(pass.cluster_statuses["us-east"].speaker.is_none());

    // The speaker goes down: the route is withdrawn whatever the agent said, and the
    // cluster's Ready condition says so.
    let down = SpeakerReport {
        up: false,
        peers: 2,
        established_peers: 0,
        message: "gobgpd does not answer".into(),
    };
    f.set_agent(
        "eu-west",
        anycast_agent("127.0.0.11", "vip", true, "healthy", Some(down)),
    );
    let pass = f.step();
    let eu = cluster_status(&pass.ingresses[&key("vip")].status, "eu-west").clone();
    assert!(!eu.anycast[0].announced);
    assert_eq!(
        eu.anycast[0].reason,
        "withdrawn: the BGP speaker is down: gobgpd does not answer"
    );
    let ready = pass.cluster_statuses["eu-west"]
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .clone();
    assert!(ready.is_true(), "other ingresses are still served");
    assert!(
        ready
            .message
            .contains("the BGP speaker is down: gobgpd does not answer"),
        "{}",
        ready.message
    );
}

#[test]
fn routes_of_other_strategies_do_not_reach_routing() {
    // An agent reporting a route for a Geo ingress (say, before the spec changed).
    let mut f = Fixture::new().with_ingress(ingress("geo", 1, "NoData"));
    f.set_agent(
        "eu-west",
        anycast_agent("127.0.0.11", "geo", true, "healthy", None),
    );
    let pass = f.step();
    let routed = pass.ingresses[&key("geo")].routed.as_ref().unwrap();
    assert!(routed.clusters.iter().all(|c| c.anycast.is_empty()));
}

/// A watch event of the Cluster `cluster`: a put, or (`None`) the deletion of `name`.
fn cluster_event(name: &str, cluster: Option<&Cluster>, revision: i64) -> fedingress_store::Event {
    use fedingress_store::{Event, EventKind, KeyValue};
    let kv = KeyValue {
        key: format!(
            "{}{name}",
            fedingress_apiserver::registry::prefix::<Cluster>(None)
        ),
        value: cluster
            .map(|c| serde_json::to_vec(c).unwrap().into())
            .unwrap_or_default(),
        create_revision: 1,
        mod_revision: revision,
    };
    Event {
        revision,
        kind: match cluster {
            Some(_) => EventKind::Put,
            None => EventKind::Delete,
        },
        kv,
        prev: None,
    }
}

fn cache_of(f: &Fixture) -> Cache {
    Cache {
        clusters: f.clusters.clone(),
        ingresses: f.ingresses.clone(),
        pools: BTreeMap::new(),
        claims: BTreeMap::new(),
        revision: 1,
    }
}

fn end(cluster: &str, reason: &'static str) -> AgentAction {
    AgentAction::EndSession {
        cluster: cluster.into(),
        reason,
    }
}

#[test]
fn a_deleted_cluster_is_only_observed_and_its_pass_revokes_and_ends_its_session() {
    let mut f = Fixture::new();
    f.step();
    let mut cache = cache_of(&f);
    let dirty = cache.apply(&cluster_event("us-east", None, 2));
    assert!(!cache.clusters.contains_key("us-east"));
    assert_eq!(dirty.deleted_clusters, ["us-east".to_string()].into());
    assert!(dirty.all);

    f.clusters = cache.clusters.clone();
    let pass = f.decide(&dirty);
    assert_eq!(
        pass.agent_actions,
        [
            AgentAction::RevokeCredentials {
                cluster: "us-east".into()
            },
            end("us-east", CLUSTER_DELETED),
        ]
    );
    let plans = pass.plans.unwrap();
    assert!(!plans.contains_key("us-east"), "no plan: its entry goes");
    // Done once: the next pass has nothing to do to agents.
    assert!(f.decide(&Dirty::default()).agent_actions.is_empty());
}

#[test]
fn a_provider_or_cordon_change_ends_the_session_and_other_edits_do_not() {
    let f = Fixture::new();
    let mut cache = cache_of(&f);
    let mut relabelled = f.clusters["eu-west"].clone();
    relabelled
        .metadata
        .labels
        .insert("tier".into(), "gold".into());
    let dirty = cache.apply(&cluster_event("eu-west", Some(&relabelled), 2));
    assert!(dirty.all && dirty.welcome_changed.is_empty());
    assert!(f.decide(&dirty).agent_actions.is_empty());

    let mut cordoned = relabelled.clone();
    cordoned.spec.unschedulable = true;
    let dirty = cache.apply(&cluster_event("eu-west", Some(&cordoned), 3));
    assert_eq!(dirty.welcome_changed, ["eu-west".to_string()].into());
    assert_eq!(
        f.decide(&dirty).agent_actions,
        [end("eu-west", WELCOME_CHANGED)]
    );
}

#[test]
fn a_relist_marks_the_clusters_deleted_or_rewelcomed_while_the_watch_was_down() {
    let f = Fixture::new();
    let mut cache = cache_of(&f);
    let mut listed = cache_of(&f);
    listed.clusters.remove("us-east");
    listed
        .clusters
        .get_mut("eu-west")
        .unwrap()
        .spec
        .unschedulable = true;
    listed.revision = 9;
    let dirty = cache.replace(listed);
    assert_eq!(cache.revision, 9);
    assert!(dirty.all && dirty.replan);
    assert_eq!(dirty.deleted_clusters, ["us-east".to_string()].into());
    assert_eq!(dirty.welcome_changed, ["eu-west".to_string()].into());
    let mut merged = Dirty::default();
    merged.merge(dirty);
    assert!(!merged.is_empty());
    assert_eq!(
        f.decide(&merged).agent_actions,
        [
            AgentAction::RevokeCredentials {
                cluster: "us-east".into()
            },
            end("us-east", CLUSTER_DELETED),
            end("eu-west", WELCOME_CHANGED),
        ]
    );
}

fn answer_change(ingress: &str, joined: bool, anycast: bool) -> AnswerChange {
    AnswerChange {
        ingress: ingress.into(),
        cluster: "eu-west".into(),
        joined,
        detail: "why".into(),
        anycast: anycast.then(|| "192.0.2.10".parse().unwrap()),
    }
}

#[test]
fn answer_changes_are_events_with_their_reasons_and_none_for_a_gone_ingress() {
    let f = Fixture::new().with_ingress(ingress("echo", 1, "ServeAll"));
    let event = |joined, anycast| {
        answer_event(
            &answer_change("default/echo", joined, anycast),
            &f.ingresses,
        )
        .unwrap()
    };
    let joined = event(true, false);
    assert_eq!(
        (joined.ingress.clone(), joined.type_, joined.reason),
        (key("echo"), "Normal", "ClusterJoinedAnswers")
    );
    assert_eq!(
        joined.message,
        "cluster eu-west joined the DNS answers for echo.fedingress.test: why"
    );
    let left = event(false, false);
    assert_eq!((left.type_, left.reason), ("Warning", "ClusterLeftAnswers"));
    assert_eq!(
        left.message,
        "cluster eu-west left the DNS answers for echo.fedingress.test: why"
    );
    let announced = event(true, true);
    assert_eq!(
        (announced.type_, announced.reason),
        ("Normal", "AnycastAnnounced")
    );
    assert_eq!(announced.message, "eu-west why");
    let withdrawn = event(false, true);
    assert_eq!(
        (withdrawn.type_, withdrawn.reason),
        ("Warning", "AnycastWithdrawn")
    );
    assert_eq!(
        answer_event(&answer_change("default/gone", true, false), &f.ingresses),
        None
    );
}

#[test]
fn settle_writes_only_the_statuses_that_differ_with_their_dns_part_and_the_events() {
    use fedingress_dns::location::Locator;
    use fedingress_dns::zone::{NameserverConfig, Snapshot, SoaConfig, ZoneConfig};

    let mut f = Fixture::new()
        .with_ingress(ingress("a", 1, "ServeAll"))
        .with_ingress(ingress("b", 1, "ServeAll"));
    f.set_agent(
        "eu-west",
        agent("127.0.0.11", &[("a", 1), ("b", 1)], 1, true),
    );
    let pass = f.step();
    let statuses: Vec<(IngressKey, FederatedIngressStatus)> = pass
        .ingresses
        .iter()
        .map(|(key, outcome)| (key.clone(), outcome.status.clone()))
        .chain([(key("gone"), FederatedIngressStatus::default())])
        .collect();
    let changes = [
        answer_change("default/a", true, false),
        answer_change("default/gone", true, false),
    ];

    // Stored as decided (`step` remembers them), without the embedded server: nothing to
    // write but the Event of the ingress that exists.
    let writes = settle(
        &f.ingresses,
        statuses.clone(),
        None,
        Vec::new(),
        &changes,
        f.now,
    );
    assert!(writes.ingress_statuses.is_empty());
    assert_eq!(writes.events.len(), 1);
    assert_eq!(writes.events[0].ingress, key("a"));

    // With the embedded server, each status gains its DNS part: no records here.
    let zones = vec![ZoneConfig {
        name: "fedingress.test".into(),
        nameservers: vec![NameserverConfig {
            name: "ns.fedingress.test".into(),
            addresses: vec!["192.0.2.53".parse().unwrap()],
        }],
        soa: SoaConfig::default(),
        ttl: 3600,
    }];
    let place = fedingress_dns::Location {
        region: "eu".into(),
        latitude: 50.0,
        longitude: 8.0,
    };
    let locator = Locator::new(Vec::new(), place, None).unwrap();
    let snapshot = Snapshot::build(&zones, 7, &[], Arc::new(locator)).0;
    let problems = HashMap::new();
    let providers = BTreeMap::new();
    let served = Served {
        snapshot: &snapshot,
        problems: &problems,
        providers: &providers,
    };
    let writes = settle(
        &f.ingresses,
        statuses,
        Some(&served),
        Vec::new(),
        &[],
        f.now,
    );
    assert_eq!(
        writes
            .ingress_statuses
            .iter()
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>(),
        [key("a"), key("b")]
    );
    for (_, status) in &writes.ingress_statuses {
        let dns = status.dns.as_ref().unwrap();
        assert_eq!(dns.providers[0].name, "embedded");
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "DNSReady")
            .unwrap();
        assert_eq!(ready.reason, "NotServed");
    }
    assert!(writes.events.is_empty());
}

#[test]
fn provider_reports_are_observed_as_data_and_recorded_first_by_the_pass() {
    use crate::providers::ProviderEvent;

    let mut f = Fixture::new().with_ingress(ingress("a", 1, "ServeAll"));
    f.step();
    let report = |name: &str| ProviderEvent {
        ingress: key(name),
        type_: "Warning",
        reason: "DNSProviderRejected",
        message: format!("route53 refused {name}"),
    };
    let dirty = Dirty {
        ingresses: [key("a")].into(),
        provider_events: vec![report("a"), report("gone")],
        ..Dirty::default()
    };
    assert!(!dirty.is_empty(), "a report alone makes a pass due");
    let pass = f.decide(&dirty);
    assert_eq!(pass.events.len(), 2);
    let statuses = vec![(key("a"), pass.ingresses[&key("a")].status.clone())];
    let changes = [answer_change("default/a", false, false)];
    let writes = settle(&f.ingresses, statuses, None, pass.events, &changes, f.now);
    let reasons: Vec<(&IngressKey, &str)> = writes
        .events
        .iter()
        .map(|e| (&e.ingress, e.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (&key("a"), "DNSProviderRejected"),
            (&key("a"), "ClusterLeftAnswers")
        ],
        "a gone ingress's report is dropped; reports come first"
    );
}
