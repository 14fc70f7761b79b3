//! The hub's controller driven by scripted fake agents ([`support::agent::FakeAgent`]):
//! status phases from acks, nacks and reports, the serving-state rule (a Pending
//! generation keeps answering, a cluster that never applied is never answered), the
//! lease, and continuity across a hub restart. Observed through the REST API (status,
//! `/explain`) and the embedded DNS server; every wait has a deadline.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::{IpAddr, Ipv4Addr};

use fedingress_api::plan::{IngressKey, RuleError};
use fedingress_testsupport::eventually_async;
use hickory_proto::op::ResponseCode;
use serde_json::{Value, json};
use support::agent::FakeAgent;
use support::dns::{Answer, query_a};
use support::{DEADLINE, INGRESSES, TestHub, condition, dns_name, entry, record_values};

const EU_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 21);
const US_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 22);

fn key(name: &str) -> IngressKey {
    IngressKey::new("default", name)
}

/// Waits until the A answer for `name` is `expected` (NOERROR with these addresses, or
/// NODATA when empty).
async fn wait_answer(hub: &TestHub, name: &str, expected: &[Ipv4Addr]) -> Answer {
    let dns = hub.addresses.dns.unwrap();
    eventually_async(DEADLINE, &format!("A {name} = {expected:?}"), || async {
        let answer = query_a(dns, &dns_name(name)).await;
        (answer.rcode == ResponseCode::NoError && answer.ips == expected)
            .then(|| answer.clone())
            .ok_or(format!("{answer:?}"))
    })
    .await
}

/// Connects an agent for `cluster`, has it apply and report `name` healthy on `ip`, and
/// waits until the hub answers it in DNS.
async fn serve(hub: &TestHub, cluster: &str, name: &str, ip: Ipv4Addr) -> FakeAgent {
    hub.wait_entry(name, cluster, "placement", |_, _| true)
        .await;
    let mut agent = FakeAgent::connect(hub, cluster).await;
    agent.expect_share(&key(name), 1).await;
    agent.ack();
    agent.report(IpAddr::V4(ip), 1);
    hub.wait_entry(name, cluster, "Applied and healthy", |_, e| {
        e["phase"] == "Applied" && e["healthy"] == true
    })
    .await;
    agent
}

/// eu-west's `lastUpdateTime` in a FederatedIngress (it must be there).
fn last_update_time(ingress: &Value) -> fedingress_api::Time {
    let entry = entry(ingress, "eu-west").unwrap();
    let time = entry["lastUpdateTime"]
        .as_str()
        .unwrap_or_else(|| panic!("{entry}"));
    fedingress_api::Time::parse(time).unwrap()
}

#[tokio::test]
async fn status_goes_from_pending_to_applied_and_healthy_after_ack_and_report() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress("web", 7001, json!({})).await;
    // No agent yet: placed, Offline.
    let ingress = hub
        .wait_entry("web", "eu-west", "Offline", |_, e| e["phase"] == "Offline")
        .await;
    assert_eq!(condition(&ingress, "Placed"), "True");
    assert_eq!(condition(&ingress, "Propagated"), "False");
    assert!(
        record_values(&ingress).is_empty(),
        "not answered before it serves"
    );

    let offline_time = last_update_time(&ingress);

    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    agent.expect_share(&key("web"), 1).await;
    // Connected, plan received, not acked: Pending.
    let ingress = hub
        .wait_entry("web", "eu-west", "Pending", |_, e| e["phase"] == "Pending")
        .await;
    assert_eq!(entry(&ingress, "eu-west").unwrap()["healthy"], false);
    let pending_time = last_update_time(&ingress);
    assert!(
        pending_time >= offline_time,
        "{pending_time} < {offline_time}"
    );
    assert_eq!(condition(&ingress, "Propagated"), "False");
    let cluster = eventually_async(DEADLINE, "eu-west connected", || async {
        let cluster = hub.cluster("eu-west").await;
        (cluster["status"]["connected"] == true)
            .then(|| cluster.clone())
            .ok_or(cluster["status"].to_string())
    })
    .await;
    assert_eq!(condition(&cluster, "Ready"), "True");

    agent.ack();
    let ingress = hub
        .wait_entry("web", "eu-west", "Applied", |_, e| e["phase"] == "Applied")
        .await;
    let applied = entry(&ingress, "eu-west").unwrap();
    assert_eq!(applied["healthy"], false, "no report yet: {applied}");
    assert_eq!(condition(&ingress, "Propagated"), "True");
    // Whole seconds on the wire: it may not grow, but it never goes back.
    let applied_time = last_update_time(&ingress);
    assert!(
        applied_time >= pending_time,
        "{applied_time} < {pending_time}"
    );

    agent.report(IpAddr::V4(EU_IP), 1);
    let ingress = hub
        .wait_entry("web", "eu-west", "healthy", |i, e| {
            e["healthy"] == true && condition(i, "Ready") == "True"
        })
        .await;
    let healthy = entry(&ingress, "eu-west").unwrap();
    assert_eq!(healthy["phase"], "Applied");
    assert_eq!(healthy["addresses"], json!([{"ip": "127.0.0.21"}]));
    assert_eq!(healthy["backends"][0]["ready"], 1);
    assert_eq!(condition(&ingress, "Healthy"), "True");
    assert_eq!(condition(&ingress, "DNSReady"), "True");
    assert_eq!(record_values(&ingress), ["127.0.0.21"]);
    let answer = query_a(hub.addresses.dns.unwrap(), &dns_name("web")).await;
    assert_eq!(answer.ips, [EU_IP], "{answer:?}");
    hub.stop().await;
}

#[tokio::test]
async fn a_spec_edit_not_yet_acked_keeps_the_cluster_answered() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    // NoData: were the Pending cluster counted unhealthy, the name would go NODATA.
    hub.create_ingress(
        "web",
        7001,
        json!({"traffic": {"whenAllUnhealthy": "NoData"}}),
    )
    .await;
    let mut agent = serve(&hub, "eu-west", "web", EU_IP).await;
    wait_answer(&hub, "web", &[EU_IP]).await;

    hub.merge_patch(
        &format!("{INGRESSES}/web"),
        &json!({"spec": {"traffic": {"ttl": 45}}}),
    )
    .await;
    agent.expect_share(&key("web"), 2).await;
    // The agent has generation 2 but does not ack it.
    let ingress = hub
        .wait_entry("web", "eu-west", "Pending at generation 2", |i, e| {
            i["status"]["observedGeneration"] == 2 && e["phase"] == "Pending"
        })
        .await;
    let pending = entry(&ingress, "eu-west").unwrap();
    assert_eq!(
        pending["healthy"], true,
        "generation 1 still serves: {pending}"
    );
    assert!(
        pending["message"]
            .as_str()
            .unwrap()
            .contains("generation 1 serves meanwhile"),
        "{pending}"
    );
    assert_eq!(condition(&ingress, "Propagated"), "False");
    assert_eq!(condition(&ingress, "Healthy"), "True");
    assert_eq!(record_values(&ingress), ["127.0.0.21"]);
    // DNS (and /explain, from the snapshot being served) still answer the cluster.
    let answer = query_a(hub.addresses.dns.unwrap(), &dns_name("web")).await;
    assert_eq!(answer.rcode, ResponseCode::NoError);
    assert_eq!(answer.ips, [EU_IP]);
    let explain = hub.get(&format!("{INGRESSES}/web/explain")).await;
    assert_eq!(
        explain["answer"]["clusters"],
        json!(["eu-west"]),
        "{explain}"
    );
    assert_eq!(
        explain["answer"]["records"],
        json!(["127.0.0.21"]),
        "{explain}"
    );

    agent.ack();
    agent.report(IpAddr::V4(EU_IP), 1);
    let ingress = hub
        .wait_entry("web", "eu-west", "generation 2 Applied", |i, e| {
            e["phase"] == "Applied" && condition(i, "Propagated") == "True"
        })
        .await;
    assert_eq!(entry(&ingress, "eu-west").unwrap()["healthy"], true);
    hub.stop().await;
}

#[tokio::test]
async fn a_nack_with_rule_errors_makes_the_cluster_failed() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress("web", 7001, json!({})).await;
    hub.wait_entry("web", "eu-west", "placement", |_, _| true)
        .await;
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    agent.expect_share(&key("web"), 1).await;
    agent.nack(vec![RuleError {
        ingress: key("web"),
        rule: 0,
        message: "port 7001 is in use".into(),
    }]);
    agent.report(IpAddr::V4(EU_IP), 1);
    let ingress = hub
        .wait_entry("web", "eu-west", "Failed", |_, e| e["phase"] == "Failed")
        .await;
    let failed = entry(&ingress, "eu-west").unwrap();
    assert_eq!(failed["healthy"], false, "{failed}");
    assert_eq!(failed["message"], "rule 0: port 7001 is in use");
    assert_eq!(condition(&ingress, "Propagated"), "False");
    assert_eq!(condition(&ingress, "Ready"), "False");

    // Fixed by the next plan: the agent acks generation 2 without errors.
    hub.merge_patch(
        &format!("{INGRESSES}/web"),
        &json!({"spec": {"rules": [{"protocol": "TCP", "port": 7002, "backend": {"service": "echo", "port": 9000}}]}}),
    )
    .await;
    agent.expect_share(&key("web"), 2).await;
    agent.ack();
    agent.report(IpAddr::V4(EU_IP), 1);
    hub.wait_entry("web", "eu-west", "Applied and healthy", |_, e| {
        e["phase"] == "Applied" && e["healthy"] == true
    })
    .await;
    hub.stop().await;
}

#[tokio::test]
async fn a_cluster_whose_agent_never_acked_is_never_answered() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_cluster("us-east").await;
    // ServeAll: even its fallback (every applied cluster) must not include us-east.
    hub.create_ingress("web", 7001, json!({"traffic": {"failbackDelaySeconds": 0}}))
        .await;
    hub.wait_entry("web", "us-east", "placement", |_, _| true)
        .await;
    // us-east's agent gets the plan and reports the share healthy, but never acks.
    let mut silent = FakeAgent::connect(&hub, "us-east").await;
    silent.expect_share(&key("web"), 1).await;
    silent.report(IpAddr::V4(US_IP), 1);
    eventually_async(DEADLINE, "us-east's report seen", || async {
        let cluster = hub.cluster("us-east").await;
        (cluster["status"]["addresses"] == json!([{"ip": "127.0.0.22"}]))
            .then_some(())
            .ok_or(cluster["status"].to_string())
    })
    .await;
    let ingress = hub.ingress("web").await;
    assert!(record_values(&ingress).is_empty(), "{}", ingress["status"]);
    let dns = hub.addresses.dns.unwrap();
    let answer = query_a(dns, &dns_name("web")).await;
    assert!(answer.ips.is_empty(), "{answer:?}");

    let eu = serve(&hub, "eu-west", "web", EU_IP).await;
    let ingress = hub.ingress("web").await;
    assert_eq!(record_values(&ingress), ["127.0.0.21"]);
    let pending = entry(&ingress, "us-east").unwrap();
    assert_eq!(pending["phase"], "Pending");
    assert_eq!(pending["healthy"], false);
    wait_answer(&hub, "web", &[EU_IP]).await;

    // eu-west turns unhealthy: ServeAll falls back to the clusters that serve, which
    // still leaves out us-east.
    eu.report(IpAddr::V4(EU_IP), 0);
    let ingress = hub
        .wait_entry("web", "eu-west", "unhealthy", |_, e| e["healthy"] == false)
        .await;
    assert_eq!(condition(&ingress, "Healthy"), "False");
    let values = record_values(&ingress);
    assert!(!values.contains(&"127.0.0.22".to_string()), "{values:?}");
    assert_eq!(values, ["127.0.0.21"], "{}", ingress["status"]);
    let answer = query_a(dns, &dns_name("web")).await;
    assert_eq!(answer.ips, [EU_IP], "{answer:?}");
    drop(silent);
    hub.stop().await;
}

#[tokio::test]
async fn a_cluster_whose_agent_stops_heartbeating_goes_offline_after_the_lease() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress(
        "web",
        7001,
        json!({"traffic": {"whenAllUnhealthy": "NoData"}}),
    )
    .await;
    let mut agent = serve(&hub, "eu-west", "web", EU_IP).await;
    wait_answer(&hub, "web", &[EU_IP]).await;

    agent.stop_heartbeats();
    let ingress = hub
        .wait_entry("web", "eu-west", "Offline", |_, e| e["phase"] == "Offline")
        .await;
    let offline = entry(&ingress, "eu-west").unwrap();
    assert_eq!(offline["healthy"], false, "{offline}");
    assert_eq!(condition(&ingress, "Healthy"), "False");
    let cluster = eventually_async(DEADLINE, "eu-west disconnected", || async {
        let cluster = hub.cluster("eu-west").await;
        (cluster["status"]["connected"] == false)
            .then(|| cluster.clone())
            .ok_or(cluster["status"].to_string())
    })
    .await;
    assert_eq!(condition(&cluster, "Connected"), "False");
    assert_eq!(condition(&cluster, "Ready"), "False");
    // Out of routing: under NoData the name has no records.
    wait_answer(&hub, "web", &[]).await;
    agent.expect_closed().await;
    hub.stop().await;
}

/// The conditions of `name` as `type=status` strings, for messages.
fn conditions(ingress: &Value) -> String {
    ingress["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}={}",
                c["type"].as_str().unwrap_or(""),
                c["status"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test]
async fn after_a_restart_dns_answers_from_persisted_state_until_the_lease_passes() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    // NoData: an answer after the restart proves persisted health, not the fallback.
    hub.create_ingress(
        "strict",
        7001,
        json!({"traffic": {"whenAllUnhealthy": "NoData"}}),
    )
    .await;
    hub.create_ingress(
        "open",
        7002,
        json!({"traffic": {"whenAllUnhealthy": "ServeAll"}}),
    )
    .await;
    hub.wait_entry("strict", "eu-west", "placement", |_, _| true)
        .await;
    hub.wait_entry("open", "eu-west", "placement", |_, _| true)
        .await;
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    agent.expect_share(&key("strict"), 1).await;
    agent.expect_share(&key("open"), 1).await;
    agent.ack();
    agent.report(IpAddr::V4(EU_IP), 1);
    for name in ["strict", "open"] {
        hub.wait_entry(name, "eu-west", "Applied and healthy", |_, e| {
            e["phase"] == "Applied" && e["healthy"] == true
        })
        .await;
        wait_answer(&hub, name, &[EU_IP]).await;
    }

    // The hub goes away (its runtime is dropped, as a killed process would); the agent
    // does not reconnect.
    let data_dir = hub.stop().await;
    drop(agent);
    let hub = TestHub::start_in(data_dir).await;
    let dns = hub.addresses.dns.unwrap();
    for name in ["strict", "open"] {
        let first = query_a(dns, &dns_name(name)).await;
        assert_eq!(first.rcode, ResponseCode::NoError, "{name}: {first:?}");
        assert_eq!(
            first.ips,
            [EU_IP],
            "{name}: the first answer after the restart"
        );
    }

    // No agent within the lease: Offline, out of routing under NoData, still answered
    // under ServeAll (listeners fail static).
    for name in ["strict", "open"] {
        let ingress = hub
            .wait_entry(name, "eu-west", "Offline", |_, e| e["phase"] == "Offline")
            .await;
        let offline = entry(&ingress, "eu-west").unwrap();
        assert_eq!(offline["healthy"], false, "{name}: {offline}");
        assert_eq!(
            condition(&ingress, "Healthy"),
            "False",
            "{}",
            conditions(&ingress)
        );
    }
    let cluster = eventually_async(DEADLINE, "eu-west not connected", || async {
        let cluster = hub.cluster("eu-west").await;
        (condition(&cluster, "Ready") == "False")
            .then(|| cluster.clone())
            .ok_or(cluster["status"].to_string())
    })
    .await;
    assert_eq!(cluster["status"]["connected"], false);
    wait_answer(&hub, "strict", &[]).await;
    wait_answer(&hub, "open", &[EU_IP]).await;
    hub.stop().await;
}
