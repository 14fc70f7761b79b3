//! The agent gateway against a scripted fake agent ([`support::agent::FakeAgent`]):
//! who may connect, what a session is sent first, how plan changes travel and what a
//! second session of the same cluster does to the first. Objects are created through
//! the REST API of an in-process hub; every wait has a deadline.

#![allow(clippy::unwrap_used)]

use crate::support;

use fedingress_api::cluster::Provider;
use fedingress_api::plan::IngressKey;
use fedingress_proto::{AgentToHub, HubToAgent};
use serde_json::json;
use support::agent::{FakeAgent, hello};
use support::{INGRESSES, TestHub};

fn key(name: &str) -> IngressKey {
    IngressKey::new("default", name)
}

/// Waits until the controller placed `name` on `cluster` (its plan is then published).
async fn wait_placed(hub: &TestHub, name: &str, cluster: &str) {
    hub.wait_entry(name, cluster, "placement", |_, _| true)
        .await;
}

#[tokio::test]
async fn a_wrong_token_is_refused() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_cluster("us-east").await;
    let us_token = hub.issue_token("us-east").await;
    let eu_token = hub.issue_token("eu-west").await;

    let refusals = [
        (
            "a made-up token",
            hello("eu-west", "abcdefghij.not-the-secret"),
        ),
        ("another cluster's token", hello("eu-west", &us_token)),
        ("an unknown cluster", hello("nowhere", &eu_token)),
        ("an empty token", hello("eu-west", "")),
    ];
    for (what, hello) in refusals {
        match FakeAgent::try_connect(hub.addresses.agent, hello).await {
            Err(status) => assert_eq!(
                status.code(),
                tonic::Code::Unauthenticated,
                "{what}: {status}"
            ),
            Ok(_) => panic!("{what} was accepted"),
        }
    }
    // A revoked token is refused too.
    let id = eu_token.split('.').next().unwrap();
    hub.delete(&format!("{}/clusters/eu-west/token/{id}", support::GROUP))
        .await;
    let status = FakeAgent::try_connect(hub.addresses.agent, hello("eu-west", &eu_token))
        .await
        .err()
        .expect("a revoked token was accepted");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
    // The cluster's own live token is welcome.
    let token = hub.issue_token("eu-west").await;
    FakeAgent::try_connect(hub.addresses.agent, hello("eu-west", &token))
        .await
        .unwrap();
    hub.stop().await;
}

#[tokio::test]
async fn hello_gets_a_welcome_then_a_snapshot_of_the_clusters_share() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_cluster("us-east").await;
    hub.create_ingress(
        "mine",
        7001,
        json!({"placement": {"clusters": ["eu-west"]}}),
    )
    .await;
    hub.create_ingress(
        "theirs",
        7002,
        json!({"placement": {"clusters": ["us-east"]}}),
    )
    .await;
    wait_placed(&hub, "mine", "eu-west").await;
    wait_placed(&hub, "theirs", "us-east").await;

    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    assert_eq!(agent.welcome.heartbeat_interval_ms, 200);
    assert_eq!(agent.welcome.lease_ms, 1500);
    let plan = agent.expect_snapshot().await;
    let keys: Vec<&IngressKey> = plan.ingresses.keys().collect();
    assert_eq!(keys, [&key("mine")], "only the cluster's own share");
    let share = &plan.ingresses[&key("mine")];
    assert_eq!(share.generation, 1);
    assert_eq!(share.rules.len(), 1);
    assert_eq!(share.rules[0].port, Some(7001));
    assert!(!agent.digest.is_empty());
    assert_eq!(
        plan.digest(),
        agent.digest,
        "the snapshot's digest is its plan's"
    );
    hub.stop().await;
}

#[tokio::test]
async fn an_agent_whose_applied_plan_is_current_gets_no_snapshot() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress("web", 7001, json!({})).await;
    wait_placed(&hub, "web", "eu-west").await;
    let token = hub.issue_token("eu-west").await;
    let mut first = FakeAgent::try_connect(hub.addresses.agent, hello("eu-west", &token))
        .await
        .unwrap();
    first.expect_snapshot().await;
    first.ack();
    hub.wait_entry("web", "eu-west", "Applied", |_, e| e["phase"] == "Applied")
        .await;
    let reconnect = first.hello_applied(&token);
    let applied_version = first.version;
    let held = first.plan.clone();
    drop(first);

    let mut again = FakeAgent::try_connect(hub.addresses.agent, reconnect)
        .await
        .unwrap();
    // It still holds what it applied, as a restarted agent reads it from its state dir.
    again.plan = held;
    again.version = applied_version;
    // The next plan change is the next message, and it builds on the applied version:
    // nothing (no Snapshot) came between the Welcome and it.
    hub.create_ingress("api", 7002, json!({})).await;
    match again.next().await {
        HubToAgent::Delta {
            base_version,
            delta,
            ..
        } => {
            assert_eq!(base_version, applied_version);
            let upserted: Vec<&IngressKey> = delta.upserts.iter().map(|s| &s.key).collect();
            assert_eq!(upserted, [&key("api")]);
            assert!(delta.deletes.is_empty());
        }
        other => panic!("expected a Delta, got {other:?}"),
    }
    // The reconnected agent counts as having applied what it said it had.
    let ingress = hub
        .wait_entry("web", "eu-west", "still Applied", |_, e| {
            e["phase"] == "Applied"
        })
        .await;
    assert_eq!(ingress["status"]["observedGeneration"], 1);
    hub.stop().await;
}

#[tokio::test]
async fn a_spec_change_arrives_as_a_delta() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress("web", 7001, json!({})).await;
    wait_placed(&hub, "web", "eu-west").await;
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    agent.expect_snapshot().await;
    agent.ack();
    let snapshot_version = agent.version;

    hub.merge_patch(
        &format!("{INGRESSES}/web"),
        &json!({"spec": {"rules": [{"protocol": "TCP", "port": 7005, "backend": {"service": "echo", "port": 9000}}]}}),
    )
    .await;
    let (base, delta) = agent.expect_delta().await;
    assert_eq!(base, snapshot_version);
    assert!(delta.deletes.is_empty());
    assert_eq!(delta.upserts.len(), 1);
    assert_eq!(delta.upserts[0].key, key("web"));
    assert_eq!(delta.upserts[0].generation, 2);
    assert_eq!(delta.upserts[0].rules[0].port, Some(7005));
    assert!(agent.version > snapshot_version, "versions only grow");
    agent.ack();

    hub.delete(&format!("{INGRESSES}/web")).await;
    let (base, delta) = agent.expect_delta().await;
    assert_eq!(delta.deletes, [key("web")]);
    assert!(delta.upserts.is_empty());
    assert!(agent.plan.ingresses.is_empty());
    let _ = base;
    hub.stop().await;
}

#[tokio::test]
async fn a_second_session_of_the_same_cluster_replaces_the_first() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress("web", 7001, json!({})).await;
    wait_placed(&hub, "web", "eu-west").await;
    let mut first = FakeAgent::connect(&hub, "eu-west").await;
    first.expect_snapshot().await;

    let mut second = FakeAgent::connect(&hub, "eu-west").await;
    second.expect_snapshot().await;
    first.expect_closed().await;

    // The cluster is served by the second session: it acks, and the hub believes it.
    second.ack();
    hub.wait_entry(
        "web",
        "eu-west",
        "Applied through the second session",
        |_, e| e["phase"] == "Applied",
    )
    .await;
    hub.merge_patch(
        &format!("{INGRESSES}/web"),
        &json!({"spec": {"traffic": {"ttl": 60}}}),
    )
    .await;
    second.expect_share(&key("web"), 2).await;
    second.ack();
    let ingress = hub
        .wait_entry("web", "eu-west", "generation 2 Applied", |i, e| {
            e["phase"] == "Applied" && i["status"]["observedGeneration"] == 2
        })
        .await;
    assert_eq!(support::condition(&ingress, "Propagated"), "True");
    let cluster = hub.cluster("eu-west").await;
    assert_eq!(cluster["status"]["connected"], true);
    hub.stop().await;
}

#[tokio::test]
async fn the_first_message_must_be_a_hello() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    let status = FakeAgent::try_connect_with_first(hub.addresses.agent, AgentToHub::Heartbeat)
        .await
        .err()
        .expect("a session without Hello was accepted");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    hub.stop().await;
}

#[tokio::test]
async fn welcome_carries_the_provider_and_a_provider_change_ends_the_session() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    let cluster = format!("{}/clusters/eu-west", support::GROUP);
    let first = FakeAgent::connect(&hub, "eu-west").await;
    assert_eq!(
        first.welcome.provider,
        Some(Provider::Other),
        "the default provider"
    );
    drop(first);

    hub.merge_patch(&cluster, &json!({"spec": {"provider": "GCP"}}))
        .await;
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    assert_eq!(agent.welcome.provider, Some(Provider::Gcp));
    hub.merge_patch(&cluster, &json!({"spec": {"provider": "aws"}}))
        .await;
    agent.expect_closed().await;
    let again = FakeAgent::connect(&hub, "eu-west").await;
    assert_eq!(again.welcome.provider, Some(Provider::Aws));
    hub.stop().await;
}

#[tokio::test]
async fn welcome_says_whether_the_cluster_is_cordoned_and_a_cordon_ends_the_session() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    let cluster = format!("{}/clusters/eu-west", support::GROUP);
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    assert!(!agent.welcome.cordoned);

    // Cordoned: the session ends, and the agent is welcomed back cordoned (so that it
    // withdraws its anycast routes).
    hub.merge_patch(&cluster, &json!({"spec": {"unschedulable": true}}))
        .await;
    agent.expect_closed().await;
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    assert!(agent.welcome.cordoned);

    // Uncordoned: again.
    hub.merge_patch(&cluster, &json!({"spec": {"unschedulable": false}}))
        .await;
    agent.expect_closed().await;
    let agent = FakeAgent::connect(&hub, "eu-west").await;
    assert!(!agent.welcome.cordoned);
    hub.stop().await;
}
