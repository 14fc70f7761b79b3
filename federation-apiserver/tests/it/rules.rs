//! Per-rule addresses and capabilities, end to end through an in-process hub: fake
//! agents report a UDP rule behind its own load balancer (split TCP/UDP Services) and a
//! driver that cannot terminate TLS; the FederatedIngress status says so (`Servable`,
//! per-cluster `rules` and messages) and the embedded DNS server, asked with `dig`,
//! points `_dns._udp` at the UDP load balancer and `_dns._tcp` at the TCP one.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::net::{IpAddr, Ipv4Addr};

use fedingress_api::cluster::Address;
use fedingress_api::plan::{IngressKey, RuleAddresses};
use fedingress_testsupport::eventually_async;
use serde_json::{Value, json};
use support::agent::FakeAgent;
use support::dns::dig;
use support::{DEADLINE, TestHub, entry};

const EU_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 21);
const US_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 22);
/// eu-west's UDP load balancer, apart from its TCP one (`EU_IP`).
const EU_UDP_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 31);

const NAME: &str = "dns.fedingress.test";
/// The kubernetes driver's profile on eu-west: no TLS termination.
const KUBERNETES: &[&str] = &["HTTP", "HTTPS", "TCP", "UDP", "TLS/Passthrough"];
const STANDALONE: &[&str] = &["HTTP", "HTTPS", "TLS", "TCP", "UDP"];

fn key() -> IngressKey {
    IngressKey::new("default", "dns")
}

/// The status of condition `type_`: (status, reason, message).
fn condition(object: &Value, type_: &str) -> (String, String, String) {
    let found = object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_default();
    let text = |field: &str| found[field].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

/// Waits until `dig NAME QTYPE` answers `expected` (sorted lines).
async fn wait_dig(hub: &TestHub, name: &str, qtype: &str, expected: &[String]) {
    let dns = hub.addresses.dns.unwrap();
    let mut expected = expected.to_vec();
    expected.sort();
    eventually_async(
        DEADLINE,
        &format!("dig {name} {qtype} = {expected:?}"),
        || {
            let expected = expected.clone();
            async move {
                let got = dig(dns, name, qtype).await;
                (got == expected).then_some(()).ok_or(format!("{got:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn split_udp_load_balancers_and_missing_capabilities_reach_status_and_dns() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu-west").await;
    hub.create_cluster("us-east").await;
    hub.create_ingress(
        "dns",
        5353,
        json!({
            "rules": [
                {"protocol": "TCP", "port": 5353, "name": "dns", "backend": {"service": "echo", "port": 9000}},
                {"protocol": "UDP", "port": 5353, "name": "dns", "backend": {"service": "echo", "port": 9000}},
                {"protocol": "TLS", "host": "dot.example.com", "port": 8853, "backend": {"service": "echo", "port": 9000}},
            ],
            "tls": [{"hosts": ["dot.example.com"], "secretName": "dot"}],
        }),
    )
    .await;
    hub.wait_entry("dns", "eu-west", "placement", |_, _| true)
        .await;
    hub.wait_entry("dns", "us-east", "placement", |_, _| true)
        .await;

    // eu-west: kubernetes driver, UDP behind its own load balancer, and (second line of
    // defence) a rule error for the TLS rule it cannot terminate.
    let mut eu = FakeAgent::connect_with(&hub, "eu-west", "kubernetes", KUBERNETES).await;
    eu.expect_share(&key(), 1).await;
    eu.ack();
    let udp_lb = RuleAddresses {
        rule: 1,
        addresses: vec![Address::ip(IpAddr::V4(EU_UDP_IP))],
    };
    eu.report_with(IpAddr::V4(EU_IP), 1, vec![udp_lb], &[2]);
    // us-east: standalone, everything on one address.
    let mut us = FakeAgent::connect_with(&hub, "us-east", "standalone", STANDALONE).await;
    us.expect_share(&key(), 1).await;
    us.ack();
    us.report(IpAddr::V4(US_IP), 1);

    let ingress = hub
        .wait_entry("dns", "eu-west", "eu-west's UDP rule apart", |_, e| {
            e["rules"] == json!([{"rule": 1, "addresses": [{"ip": "127.0.0.31"}]}])
        })
        .await;
    let (status, reason, message) = condition(&ingress, "Servable");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnsupportedRules")
    );
    assert_eq!(
        message,
        "cluster eu-west (driver kubernetes) cannot serve rule 2 (TLS/Terminate)"
    );
    let eu_entry = entry(&ingress, "eu-west").unwrap();
    assert_eq!(eu_entry["phase"], "Failed", "{eu_entry}");
    assert_eq!(
        eu_entry["healthy"], true,
        "it serves its other rules: {eu_entry}"
    );
    let eu_message = eu_entry["message"].as_str().unwrap();
    assert!(
        eu_message.contains("rule 2: ")
            && eu_message.contains("driver kubernetes cannot serve rule 2 (TLS/Terminate)"),
        "{eu_message}"
    );
    let us_entry = hub
        .wait_entry("dns", "us-east", "us-east healthy", |_, e| {
            e["healthy"] == true
        })
        .await;
    assert!(entry(&us_entry, "us-east").unwrap()["rules"].is_null());

    // DNS: _udp points at eu-west's UDP load balancer through its own target name,
    // _tcp at the TCP one; the name itself answers the share's addresses.
    let eu_udp_target = format!("eu-west.udp-dns.{NAME}.");
    wait_dig(
        &hub,
        &format!("_dns._udp.{NAME}"),
        "SRV",
        &[
            format!("0 1 5353 {eu_udp_target}"),
            format!("0 1 5353 us-east.{NAME}."),
        ],
    )
    .await;
    let dns = hub.addresses.dns.unwrap();
    assert_eq!(dig(dns, &eu_udp_target, "A").await, ["127.0.0.31"]);
    assert_eq!(
        dig(dns, &format!("_dns._tcp.{NAME}"), "SRV").await,
        [
            format!("0 1 5353 eu-west.{NAME}."),
            format!("0 1 5353 us-east.{NAME}.")
        ]
    );
    assert_eq!(
        dig(dns, &format!("eu-west.{NAME}"), "A").await,
        ["127.0.0.21"]
    );
    assert_eq!(dig(dns, NAME, "A").await, ["127.0.0.21", "127.0.0.22"]);

    // us-east's agent comes back with a driver that cannot serve UDP: a new Hello
    // recomputes the ingress; us-east leaves the _udp answers, not the name's.
    let reconnect_hello = us.hello_applied(&hub.issue_token("us-east").await);
    drop(us);
    let hello = fedingress_proto::Hello {
        capabilities: ["HTTP", "HTTPS", "TLS", "TCP"].map(String::from).to_vec(),
        ..reconnect_hello
    };
    let _us = FakeAgent::try_connect(hub.addresses.agent, hello)
        .await
        .unwrap();
    wait_dig(
        &hub,
        &format!("_dns._udp.{NAME}"),
        "SRV",
        &[format!("0 1 5353 {eu_udp_target}")],
    )
    .await;
    assert_eq!(dig(dns, NAME, "A").await, ["127.0.0.21", "127.0.0.22"]);
    assert_eq!(dig(dns, &format!("_dns._tcp.{NAME}"), "SRV").await.len(), 2);
    let ingress = eventually_async(DEADLINE, "Servable names both clusters", || async {
        let ingress = hub.ingress("dns").await;
        let (_, _, message) = condition(&ingress, "Servable");
        message
            .contains("cluster us-east (driver standalone) cannot serve rule 1 (UDP)")
            .then_some(ingress)
            .ok_or(message)
    })
    .await;
    let (_, _, message) = condition(&ingress, "Servable");
    assert!(
        message.starts_with("cluster eu-west (driver kubernetes) cannot serve rule 2"),
        "{message}"
    );
    hub.stop().await;
}
