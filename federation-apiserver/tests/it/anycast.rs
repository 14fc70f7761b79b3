//! The hub side of anycast, end to end: scripted agents ([`support::agent::FakeAgent`])
//! report their BGP routes and speaker over the real gateway; the test reads what the
//! hub made of them through the REST API (status, `/explain`, Events), the embedded DNS
//! server, and the real `fedctl` binary (`describe`, `explain`).

#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::Command;

use fedingress_api::plan::{AnycastRoute, IngressKey, SpeakerReport};
use fedingress_testsupport::eventually_async;
use hickory_proto::op::ResponseCode;
use serde_json::{Value, json};
use support::agent::FakeAgent;
use support::dns::query_a;
use support::{DEADLINE, GROUP, TestHub, dns_name, entry};

const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const EU_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 21);
const US_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 22);
const NO_ENDPOINT: &str = "backend echo:9000 has no ready endpoint";

fn route(announced: bool, reason: &str) -> Vec<AnycastRoute> {
    vec![AnycastRoute {
        address: IpAddr::V4(VIP),
        announced,
        reason: reason.into(),
    }]
}

fn speaker(up: bool, message: &str) -> Option<SpeakerReport> {
    Some(SpeakerReport {
        up,
        peers: 1,
        established_peers: u32::from(up),
        message: message.into(),
    })
}

/// `status.clusters[cluster].anycast[0]` of `vip` once `check` accepts it.
async fn wait_route(hub: &TestHub, cluster: &str, what: &str, check: impl Fn(&Value) -> bool) {
    hub.wait_entry("vip", cluster, what, |_, e| check(&e["anycast"][0]))
        .await;
}

/// The A answer for `vip`, once it is `expected` (NODATA when empty).
async fn wait_answer(hub: &TestHub, expected: &[Ipv4Addr]) {
    let dns = hub.addresses.dns.unwrap();
    eventually_async(DEADLINE, &format!("A vip = {expected:?}"), || async {
        let answer = query_a(dns, &dns_name("vip")).await;
        (answer.rcode == ResponseCode::NoError && answer.ips == expected)
            .then_some(())
            .ok_or(format!("{answer:?}"))
    })
    .await;
}

/// The explain subresource for a client at `client`: (cluster → detail, summary).
async fn explain(hub: &TestHub, client: &str) -> (Vec<(String, String)>, String) {
    let value = hub
        .get(&format!(
            "{}/vip/explain?client={client}",
            support::INGRESSES
        ))
        .await;
    let reasons = value["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["cluster"].as_str().unwrap().to_string(),
                r["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (reasons, value["summary"].as_str().unwrap().to_string())
}

/// Waits for an Event about `vip` with `reason` and `message`.
async fn wait_event(hub: &TestHub, reason: &str, message: &str) {
    eventually_async(DEADLINE, &format!("event {reason}: {message}"), || async {
        let events = hub.get("/api/v1/namespaces/default/events").await;
        let seen: Vec<String> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == "vip")
            .map(|e| format!("{}: {}", e["reason"], e["message"]))
            .collect();
        seen.iter()
            .any(|e| e == &format!("\"{reason}\": \"{message}\""))
            .then_some(())
            .ok_or(format!("{seen:#?}"))
    })
    .await;
}

/// The `fedctl` binary of this build (`FEDINGRESS_TEST_BIN_DIR` when set), built when
/// missing; run against the in-process hub with a kubeconfig of its own.
struct Fedctl {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

/// The `fedctl` binary of this build: from `FEDINGRESS_TEST_BIN_DIR` when set, else
/// built (`cargo build --workspace --bins --tests`, as scripts/test does before the
/// tests, so normally a no-op). Call it before any hub or agent runs: it blocks the test's
/// runtime, and scripted agents that cannot heartbeat meanwhile lose their lease.
fn fedctl_binary() -> PathBuf {
    match std::env::var_os("FEDINGRESS_TEST_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join("fedctl"),
        None => {
            // target/<profile>/deps/<test> → target/<profile>
            let exe = std::env::current_exe().unwrap();
            let dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = Command::new(cargo);
            build.args(["build", "--workspace", "--bins", "--tests", "--quiet"]);
            if dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            if let Some(target) = dir.parent() {
                build.env("CARGO_TARGET_DIR", target);
            }
            let status = build
                .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
                .status()
                .unwrap();
            assert!(status.success(), "building the binaries failed");
            dir.join("fedctl")
        }
    }
}

impl Fedctl {
    fn new(hub: &TestHub, binary: PathBuf) -> Self {
        assert!(binary.exists(), "no fedctl at {}", binary.display());
        let kubeconfig = hub.data_dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster: {{server: \"http://{}\"}}\nusers:\n- name: dev\n  user: {{}}\ncontexts:\n- name: hub\n  context: {{cluster: hub, user: dev, namespace: default}}\ncurrent-context: hub\n",
                hub.addresses.api
            ),
        )
        .unwrap();
        Fedctl { binary, kubeconfig }
    }

    /// Runs `fedctl ARGS` (off the test's runtime threads) and returns its stdout;
    /// fails the test unless it exits 0.
    async fn ok(&self, args: &[&str]) -> String {
        let mut command = Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", "/nonexistent-home");
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "fedctl {args:?}: {}\n{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

#[tokio::test]
async fn reported_routes_reach_status_dns_explain_events_and_fedctl() {
    let fedctl_binary = fedctl_binary();
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_cluster("us-east").await;
    hub.create_ingress(
        "vip",
        7000,
        json!({"traffic": {
            "strategy": {"type": "Anycast", "anycastAddresses": [VIP.to_string()]},
            "whenAllUnhealthy": "NoData",
            "failbackDelaySeconds": 0,
        }}),
    )
    .await;
    let key = IngressKey::new("default", "vip");

    // eu-west's agent announces the address; us-east's reports no BGP state (an agent
    // without a speaker).
    let mut eu = FakeAgent::connect(&hub, "eu-west").await;
    eu.expect_share(&key, 1).await;
    assert_eq!(eu.plan.ingresses[&key].anycast_addresses, [IpAddr::V4(VIP)]);
    eu.ack();
    eu.report_anycast(
        IpAddr::V4(EU_IP),
        1,
        route(true, "healthy"),
        speaker(true, ""),
    );
    let mut us = FakeAgent::connect(&hub, "us-east").await;
    us.expect_share(&key, 1).await;
    us.ack();
    us.report(IpAddr::V4(US_IP), 1);
    hub.wait_entry("vip", "us-east", "Applied and healthy", |_, e| {
        e["phase"] == "Applied" && e["healthy"] == true
    })
    .await;
    wait_route(&hub, "eu-west", "announced", |r| {
        r["announced"] == true && r["reason"] == "healthy"
    })
    .await;
    wait_answer(&hub, &[VIP]).await;
    let (reasons, summary) = explain(&hub, "10.2.0.1").await;
    assert_eq!(
        reasons,
        [
            ("eu-west".into(), "healthy: announces 192.0.2.10".into()),
            (
                "us-east".into(),
                "healthy; the agent reports no BGP announcement".into()
            ),
        ]
    );
    assert!(
        summary.contains("the network (BGP) carries each client to the nearest announcing site"),
        "{summary}"
    );
    // The controller writes ingress statuses before cluster statuses: wait for eu-west's.
    eventually_async(DEADLINE, "eu-west's speaker in its status", || async {
        let speaker = hub.cluster("eu-west").await["status"]["speaker"].clone();
        (speaker == json!({"up": true, "peers": 1, "establishedPeers": 1}))
            .then_some(())
            .ok_or(speaker.to_string())
    })
    .await;

    // eu-west withdraws: its backend lost its endpoints.
    eu.report_anycast(
        IpAddr::V4(EU_IP),
        0,
        route(false, NO_ENDPOINT),
        speaker(true, ""),
    );
    wait_route(&hub, "eu-west", "withdrawn", |r| {
        r["announced"] == false && r["reason"] == NO_ENDPOINT
    })
    .await;
    wait_event(
        &hub,
        "AnycastWithdrawn",
        &format!("eu-west withdrew 192.0.2.10: {NO_ENDPOINT}"),
    )
    .await;
    // us-east (counted from its health) still answers for the address.
    wait_answer(&hub, &[VIP]).await;

    // us-east gains a speaker that is down: nobody announces, DNS fails closed (NoData).
    us.report_anycast(
        IpAddr::V4(US_IP),
        1,
        route(true, "healthy"),
        speaker(false, "gobgpd does not answer"),
    );
    let down = "the BGP speaker is down: gobgpd does not answer";
    wait_route(&hub, "us-east", "withdrawn by the speaker", |r| {
        r["announced"] == false && r["reason"] == format!("withdrawn: {down}")
    })
    .await;
    wait_event(
        &hub,
        "AnycastWithdrawn",
        &format!("us-east withdrew 192.0.2.10: {down}"),
    )
    .await;
    wait_answer(&hub, &[]).await;
    let cluster = eventually_async(DEADLINE, "us-east's speaker in its status", || async {
        let cluster = hub.cluster("us-east").await;
        (cluster["status"]["speaker"]["up"] == false)
            .then(|| cluster.clone())
            .ok_or(cluster["status"].to_string())
    })
    .await;
    let ready = cluster["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("the BGP speaker is down: gobgpd does not answer"),
        "{ready}"
    );
    let (reasons, _) = explain(&hub, "10.2.0.1").await;
    assert_eq!(reasons[1].1, format!("withdrawn: {down}"));

    // eu-west announces again.
    eu.report_anycast(
        IpAddr::V4(EU_IP),
        1,
        route(true, "healthy"),
        speaker(true, ""),
    );
    wait_event(
        &hub,
        "AnycastAnnounced",
        "eu-west announced 192.0.2.10: healthy",
    )
    .await;
    wait_answer(&hub, &[VIP]).await;

    // fedctl: what an operator sees.
    let fedctl = Fedctl::new(&hub, fedctl_binary);
    let describe = fedctl.ok(&["describe", "ingress", "vip"]).await;
    let routes = describe
        .split("Anycast routes:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no anycast section in\n{describe}"));
    let rows: Vec<Vec<&str>> = routes
        .lines()
        .take(3)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[1],
        ["eu-west", "192.0.2.10", "announced", "healthy"],
        "{describe}"
    );
    assert_eq!(
        rows[2][..5],
        ["us-east", "192.0.2.10", "withdrawn", "the", "BGP"],
        "{describe}"
    );
    assert!(
        describe.contains("eu-west withdrew 192.0.2.10: backend echo:9000"),
        "the event, in {describe}"
    );
    let explained = fedctl.ok(&["explain", "vip", "--client", "10.2.0.1"]).await;
    assert!(
        explained.contains("Answer:   192.0.2.10 (anycast)\n"),
        "{explained}"
    );
    assert!(
        explained.contains(
            "Anycast:  192.0.2.10 is announced by eu-west; the network (BGP) carries the client to the nearest of them"
        ),
        "{explained}"
    );
    let cluster = fedctl.ok(&["describe", "cluster", "us-east"]).await;
    assert!(
        cluster.contains(
            "BGP speaker:  down: gobgpd does not answer (no anycast address is announced from here)"
        ),
        "{cluster}"
    );
    drop((eu, us));
    hub.stop().await;
}

#[tokio::test]
async fn reported_routes_survive_a_hub_restart_until_the_agent_reports_again() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_ingress(
        "vip",
        7000,
        json!({"traffic": {"strategy": {"type": "Anycast", "anycastAddresses": [VIP.to_string()]}}}),
    )
    .await;
    let key = IngressKey::new("default", "vip");
    let mut agent = FakeAgent::connect(&hub, "eu-west").await;
    agent.expect_share(&key, 1).await;
    agent.ack();
    agent.report_anycast(
        IpAddr::V4(EU_IP),
        1,
        route(true, "healthy"),
        speaker(true, ""),
    );
    wait_route(&hub, "eu-west", "announced", |r| r["announced"] == true).await;

    // A new hub on the same store; the agent comes back with its plan applied and has
    // not reported yet: the routes persisted with the serving state stand.
    let data_dir = hub.stop().await;
    let hub = TestHub::start_in(data_dir).await;
    let token = hub.issue_token("eu-west").await;
    let again = FakeAgent::try_connect(hub.addresses.agent, agent.hello_applied(&token))
        .await
        .unwrap();
    drop(agent);
    let ingress = hub
        .wait_entry(
            "vip",
            "eu-west",
            "waiting for the new session's report",
            |_, e| e["message"] == "waiting for the agent's report",
        )
        .await;
    let eu = entry(&ingress, "eu-west").unwrap();
    assert_eq!(
        eu["anycast"],
        json!([{"address": "192.0.2.10", "announced": true, "reason": "healthy"}]),
        "{eu}"
    );
    wait_answer(&hub, &[VIP]).await;
    let (reasons, _) = explain(&hub, "10.1.0.1").await;
    assert_eq!(reasons[0].1, "healthy: announces 192.0.2.10");
    let cluster = hub.get(&format!("{GROUP}/clusters/eu-west")).await;
    assert_eq!(cluster["status"]["speaker"]["up"], true);
    drop(again);
    hub.stop().await;
}
