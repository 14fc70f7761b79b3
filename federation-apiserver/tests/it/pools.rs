//! Several agents per cluster and IngressPools (issue 24), driven by scripted fake
//! members: each member keeps its own session and plan view, a member's loss is not the
//! cluster's, a pool gets a VIP from the CIDR and its members the VRRP assignment with
//! their peers, and DNS answers the VIP while a ready member holds it.

use crate::support;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use fedingress_api::plan::IngressKey;
use fedingress_testsupport::eventually_async;
use hickory_proto::op::ResponseCode;
use serde_json::{Value, json};
use support::agent::FakeAgent;
use support::dns::query_a;
use support::{DEADLINE, GROUP, TestHub, dns_name};

const H1: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 31);
const H2: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 32);
const H3: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 33);

fn key(name: &str) -> IngressKey {
    IngressKey::new("default", name)
}

/// Waits until the A answer for `name` holds exactly `expected` (in any order).
async fn wait_answer(hub: &TestHub, name: &str, expected: &[Ipv4Addr]) {
    let dns = hub.addresses.dns.unwrap();
    let mut want = expected.to_vec();
    want.sort_unstable();
    eventually_async(DEADLINE, &format!("A {name} = {want:?}"), || async {
        let answer = query_a(dns, &dns_name(name)).await;
        let mut ips = answer.ips.clone();
        ips.sort_unstable();
        (answer.rcode == ResponseCode::NoError && ips == want)
            .then_some(())
            .ok_or(format!("{answer:?}"))
    })
    .await;
}

/// Waits until `check` accepts the object at `path`; returns it.
async fn wait_object(
    hub: &TestHub,
    path: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually_async(DEADLINE, what, || async {
        let object = hub.get(path).await;
        if check(&object) {
            Ok(object)
        } else {
            Err(object["status"].to_string())
        }
    })
    .await
}

/// Reads plans until `agent` holds `share` at generation 1 (or, `false`, a plan
/// without it); acks it.
async fn settle(agent: &mut FakeAgent, share: &IngressKey, held: bool) {
    if held {
        agent.expect_share(share, 1).await;
    } else {
        if agent.version == 0 {
            agent.next().await;
        }
        while agent.plan.ingresses.contains_key(share) {
            agent.next().await;
        }
    }
    agent.ack();
}

#[tokio::test]
async fn members_of_one_cluster_keep_their_sessions_and_a_members_loss_is_not_the_clusters() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu").await;
    hub.create_ingress("web", 7101, json!({})).await;
    let mut a = FakeAgent::connect_member(&hub, "eu", "host-a", &[], IpAddr::V4(H1)).await;
    let mut b = FakeAgent::connect_member(&hub, "eu", "host-b", &[], IpAddr::V4(H2)).await;
    for (agent, ip) in [(&mut a, H1), (&mut b, H2)] {
        settle(agent, &key("web"), true).await;
        agent.report(IpAddr::V4(ip), 1);
    }
    // Both members serve: DNS answers both, the cluster lists both.
    wait_answer(&hub, "web", &[H1, H2]).await;
    let cluster = wait_object(&hub, &format!("{GROUP}/clusters/eu"), "two members", |c| {
        c["status"]["readyMembers"] == 2
    })
    .await;
    assert_eq!(cluster["status"]["memberCount"], 2);
    assert_eq!(cluster["status"]["members"][0]["name"], "host-a");
    assert_eq!(cluster["status"]["members"][1]["address"], H2.to_string());
    // Neither session replaced the other: both still get plan changes.
    hub.create_ingress("api", 7102, json!({})).await;
    a.expect_share(&key("api"), 1).await;
    b.expect_share(&key("api"), 1).await;
    // host-a goes: the cluster stays Ready and DNS answers host-b alone.
    drop(a);
    wait_answer(&hub, "web", &[H2]).await;
    let cluster = wait_object(&hub, &format!("{GROUP}/clusters/eu"), "host-a gone", |c| {
        c["status"]["readyMembers"] == 1
    })
    .await;
    assert_eq!(cluster["status"]["connected"], true);
    assert_eq!(cluster["status"]["members"][0]["connected"], false);
    let web = hub.ingress("web").await;
    assert_eq!(support::entry(&web, "eu").unwrap()["healthy"], true);
    hub.stop().await;
}

#[tokio::test]
async fn a_pool_gets_a_vip_its_members_the_vrrp_assignment_and_dns_answers_the_vip() {
    let hub = TestHub::start().await;
    hub.post(
        &format!("{GROUP}/clusters"),
        Some(&json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "eu"},
            "spec": {"region": "europe-west1", "location": {"latitude": 50.45, "longitude": 3.82},
                     "vipCIDR": "127.0.1.0/28"},
        })),
    )
    .await;
    hub.post(
        &format!("{GROUP}/ingresspools"),
        Some(&json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "IngressPool",
            "metadata": {"name": "gold", "labels": {"tier": "gold"}},
            "spec": {"cluster": "eu", "memberSelector": {"matchLabels": {"rack": "r1"}}},
        })),
    )
    .await;
    hub.create_ingress(
        "web",
        7103,
        json!({"placement": {"poolSelector": {"matchLabels": {"tier": "gold"}}}}),
    )
    .await;
    let mut h1 =
        FakeAgent::connect_member(&hub, "eu", "h1", &[("rack", "r1")], IpAddr::V4(H1)).await;
    let mut h2 =
        FakeAgent::connect_member(&hub, "eu", "h2", &[("rack", "r1")], IpAddr::V4(H2)).await;
    let mut h3 =
        FakeAgent::connect_member(&hub, "eu", "h3", &[("rack", "r2")], IpAddr::V4(H3)).await;
    settle(&mut h1, &key("web"), true).await;
    settle(&mut h2, &key("web"), true).await;
    // The members of the pool hold its assignment, with both peers; h3 (in no pool)
    // is not given the share.
    while h1.plan.pools.pools.is_empty() || h1.plan.pools.pools[0].members.len() < 2 {
        h1.next().await;
    }
    let gold = &h1.plan.pools.pools[0];
    assert_eq!(gold.name, "gold");
    assert_eq!(gold.vips, ["127.0.1.1".parse::<IpAddr>().unwrap()]);
    assert_eq!(gold.prefix_len, 28);
    assert_eq!(gold.virtual_router_id, 1);
    let peers: Vec<(&str, Option<IpAddr>, u8)> = gold
        .members
        .iter()
        .map(|m| (m.name.as_str(), m.address, m.priority))
        .collect();
    assert_eq!(
        peers,
        [
            ("h1", Some(IpAddr::V4(H1)), 250),
            ("h2", Some(IpAddr::V4(H2)), 248)
        ]
    );
    settle(&mut h3, &key("web"), false).await;
    assert!(!h3.plan.ingresses.contains_key(&key("web")));
    assert!(h3.plan.pools.pools.is_empty());
    // h1 holds the VIP: DNS answers it, the pool's status says so.
    h1.report_vrrp(IpAddr::V4(H1), 1, &[("gold", "MASTER")]);
    h2.report_vrrp(IpAddr::V4(H2), 1, &[("gold", "BACKUP")]);
    wait_answer(&hub, "web", &[Ipv4Addr::new(127, 0, 1, 1)]).await;
    let pool = wait_object(
        &hub,
        &format!("{GROUP}/ingresspools/gold"),
        "gold held by h1",
        |p| p["status"]["vipHolder"] == "h1",
    )
    .await;
    assert_eq!(pool["status"]["vips"], json!(["127.0.1.1"]));
    assert_eq!(pool["status"]["boundShares"], 1);
    assert_eq!(pool["status"]["readyMembers"], 2);
    let web = hub.ingress("web").await;
    assert_eq!(support::entry(&web, "eu").unwrap()["pool"], "gold");
    // h1 dies; h2 takes the VIP: the same answer, the cluster healthy.
    drop(h1);
    h2.report_vrrp(IpAddr::V4(H2), 1, &[("gold", "MASTER")]);
    wait_object(
        &hub,
        &format!("{GROUP}/ingresspools/gold"),
        "gold held by h2",
        |p| p["status"]["vipHolder"] == "h2",
    )
    .await;
    wait_answer(&hub, "web", &[Ipv4Addr::new(127, 0, 1, 1)]).await;
    let web = hub.ingress("web").await;
    assert_eq!(support::entry(&web, "eu").unwrap()["healthy"], true);
    hub.stop().await;
}

/// The series of a Prometheus text exposition (name and labels, without values).
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_string()))
        .collect()
}

/// Status, DNS and metrics stay bounded with 100 members: the status lists each member
/// once (128 at most), DNS answers at most 8 member addresses, and members 11 to 100 add
/// no metric series.
#[tokio::test]
async fn a_cluster_of_100_members_stays_bounded() {
    let hub = TestHub::start().await;
    hub.create_cluster("eu").await;
    hub.create_ingress("web", 7104, json!({})).await;
    let mut members = Vec::new();
    let mut series_before = BTreeSet::new();
    for i in 0..100u8 {
        let ip = Ipv4Addr::new(127, 0, 2, i + 1);
        let mut agent =
            FakeAgent::connect_member(&hub, "eu", &format!("host-{i:03}"), &[], IpAddr::V4(ip))
                .await;
        settle(&mut agent, &key("web"), true).await;
        agent.report(IpAddr::V4(ip), 1);
        members.push(agent);
        if i == 9 {
            // Every kind of series has appeared with ten members.
            wait_object(&hub, &format!("{GROUP}/clusters/eu"), "10 members", |c| {
                c["status"]["readyMembers"] == 10
            })
            .await;
            // The first scrape and query add their own series.
            hub.get_text("/metrics").await;
            query_a(hub.addresses.dns.unwrap(), &dns_name("web")).await;
            series_before = series(&hub.get_text("/metrics").await);
        }
    }
    let cluster = wait_object(&hub, &format!("{GROUP}/clusters/eu"), "100 members", |c| {
        c["status"]["readyMembers"] == 100
    })
    .await;
    assert_eq!(cluster["status"]["members"].as_array().unwrap().len(), 100);
    let size = serde_json::to_vec(&cluster).unwrap().len();
    assert!(
        size < 64 * 1024,
        "the Cluster is {size} bytes with 100 members"
    );
    let dns = hub.addresses.dns.unwrap();
    let answer = eventually_async(DEADLINE, "8 member addresses", || async {
        let answer = query_a(dns, &dns_name("web")).await;
        (answer.ips.len() == 8)
            .then_some(answer.clone())
            .ok_or(format!("{answer:?}"))
    })
    .await;
    assert!(answer.ips.iter().all(|ip| ip.octets()[2] == 2));
    let series_after = series(&hub.get_text("/metrics").await);
    let new: Vec<&String> = series_after.difference(&series_before).collect();
    assert!(new.is_empty(), "series added by members 11-100: {new:#?}");
    drop(members);
    hub.stop().await;
}
