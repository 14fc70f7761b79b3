//! IngressClaims (issue 24 item 4) driven through the REST API with scripted fake
//! agents: on a kubernetes cluster the claim controller provisions a pool and the agent
//! is sent its PoolProvision; on a standalone cluster it binds a free pool that matches
//! or stays Pending with the reason; once the ingresses are gone each reclaim policy
//! applies (Delete: the pool goes; Recycle: its claimRef is cleared; Retain: Released),
//! a deleted claim goes once its finalizer is removed, and a Namespace being deleted
//! waits for its claims' reclaim.

use crate::support;

use std::collections::BTreeSet;

use fedingress_testsupport::eventually_async;
use serde_json::{Value, json};
use support::agent::FakeAgent;
use support::{DEADLINE, GROUP, TestHub};

const CLAIMS: &str = "/apis/fedingress.io/v1alpha1/namespaces/default/ingressclaims";
const EVENTS: &str = "/api/v1/namespaces/default/events";

fn pool_path(name: &str) -> String {
    format!("{GROUP}/ingresspools/{name}")
}

/// Waits until `check` accepts the object at `path`; returns it.
async fn wait_object(
    hub: &TestHub,
    path: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually_async(DEADLINE, what, || async {
        let response = hub.client.get(hub.url(path)).send().await.unwrap();
        let object: Value = response.json().await.unwrap();
        if check(&object) {
            Ok(object)
        } else {
            Err(object.to_string())
        }
    })
    .await
}

/// Waits until `path` answers 404.
async fn wait_gone(hub: &TestHub, path: &str) {
    eventually_async(DEADLINE, &format!("{path} gone"), || async {
        let response = hub.client.get(hub.url(path)).send().await.unwrap();
        if response.status() == http::StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(response.text().await.unwrap())
        }
    })
    .await;
}

/// Creates the claim `name` for the ingress of the same name.
async fn create_claim(hub: &TestHub, name: &str, policy: &str, labels: Value) {
    let body = json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "IngressClaim",
        "metadata": {"name": name},
        "spec": {
            "ingresses": [name],
            "template": {
                "replicas": 3,
                "memberLabels": {"role": "edge"},
                "labels": labels,
                "resources": {"requests": {"cpu": "250m"}},
            },
            "reclaimPolicy": policy,
        }
    });
    hub.post(CLAIMS, Some(&body)).await;
}

/// Waits until the Event `reason` about claim `name` was recorded; returns it.
async fn wait_event(hub: &TestHub, name: &str, reason: &str) -> Value {
    eventually_async(DEADLINE, &format!("{reason} Event of {name}"), || async {
        let events = hub.get(EVENTS).await;
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| {
                e["involvedObject"]["kind"] == "IngressClaim"
                    && e["involvedObject"]["name"] == name
                    && e["reason"] == reason
            })
            .cloned()
            .ok_or(events.to_string())
    })
    .await
}

/// The kubernetes agent's driver profile in these tests.
const KUBERNETES: &[&str] = &["TCP", "UDP"];

/// Waits until the names of the provisions in the plan `agent` holds are `want`,
/// following the Snapshots and Deltas of its session (the fake agent checks each
/// Delta's digest, pools-only Deltas included).
async fn wait_provisions(agent: &mut FakeAgent, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|w| (*w).to_owned()).collect();
    loop {
        let names: BTreeSet<String> = agent
            .plan
            .pools
            .provisions
            .iter()
            .map(|p| p.name.clone())
            .collect();
        if names == want {
            return;
        }
        agent.next().await;
    }
}

/// Creates the ingress `name` placed on `clusters` and waits until it is placed there.
async fn placed_ingress(hub: &TestHub, name: &str, port: u16, clusters: &[&str]) {
    hub.create_ingress(name, port, json!({"placement": {"clusters": clusters}}))
        .await;
    for cluster in clusters {
        hub.wait_entry(name, cluster, "placement", |_, _| true)
            .await;
    }
}

#[tokio::test]
async fn a_kubernetes_cluster_gets_provisioned_pools_and_each_reclaim_policy_applies() {
    let hub = TestHub::start().await;
    hub.create_cluster("k8s").await;
    let mut agent = FakeAgent::connect_with(&hub, "k8s", "kubernetes", KUBERNETES).await;
    wait_object(&hub, &format!("{GROUP}/clusters/k8s"), "k8s driver", |c| {
        c["status"]["driver"] == "kubernetes"
    })
    .await;
    for (name, port) in [("web", 7201), ("shop", 7202), ("blog", 7203)] {
        placed_ingress(&hub, name, port, &["k8s"]).await;
    }
    create_claim(&hub, "web", "Delete", json!({"tier": "gold"})).await;
    create_claim(&hub, "shop", "Recycle", json!({})).await;
    create_claim(&hub, "blog", "Retain", json!({})).await;

    let claim = wait_object(&hub, &format!("{CLAIMS}/web"), "web Bound", |c| {
        c["status"]["phase"] == "Bound"
    })
    .await;
    assert_eq!(
        claim["status"]["clusters"],
        json!([{"cluster": "k8s", "pool": "web-k8s", "provisioned": true,
                "message": "provisioned for the claim"}])
    );
    assert_eq!(
        claim["metadata"]["finalizers"],
        json!(["fedingress.io/claim-protection"])
    );
    let pool = hub.get(&pool_path("web-k8s")).await;
    assert_eq!(pool["spec"]["cluster"], "k8s");
    assert_eq!(
        pool["spec"]["claimRef"],
        json!({"namespace": "default", "name": "web", "uid": claim["metadata"]["uid"]})
    );
    assert_eq!(
        pool["spec"]["memberSelector"]["matchLabels"],
        json!({"fedingress.io/pool": "web-k8s", "role": "edge"})
    );
    assert_eq!(
        pool["metadata"]["labels"],
        json!({"fedingress.io/provisioned-by": "default.web", "tier": "gold"})
    );
    let event = wait_event(&hub, "web", "Provisioned").await;
    assert_eq!(
        event["message"],
        "IngressPool web-k8s provisioned in cluster k8s"
    );

    // The kubernetes agent is sent each provisioned pool to run.
    wait_provisions(&mut agent, &["blog-k8s", "shop-k8s", "web-k8s"]).await;
    let web = agent
        .plan
        .pools
        .provisions
        .iter()
        .find(|p| p.name == "web-k8s")
        .unwrap();
    assert_eq!(web.replicas, 3);
    assert_eq!(web.member_labels["fedingress.io/pool"], "web-k8s");
    assert_eq!(web.member_labels["role"], "edge");
    assert_eq!(web.requests["cpu"], "250m");

    // Delete: the provisioned pool goes, and its provision with it.
    hub.delete("/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/web")
        .await;
    wait_gone(&hub, &pool_path("web-k8s")).await;
    let claim = wait_object(&hub, &format!("{CLAIMS}/web"), "web Released", |c| {
        c["status"]["phase"] == "Released"
    })
    .await;
    assert_eq!(
        claim["status"]["clusters"][0]["message"],
        "deleted (reclaimPolicy Delete)"
    );
    wait_event(&hub, "web", "Released").await;
    wait_provisions(&mut agent, &["blog-k8s", "shop-k8s"]).await;

    // Recycle: the pool stays, its claimRef cleared: Available.
    hub.delete("/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/shop")
        .await;
    wait_object(&hub, &pool_path("shop-k8s"), "shop-k8s Available", |p| {
        p["spec"]["claimRef"].is_null() && p["status"]["phase"] == "Available"
    })
    .await;
    wait_object(&hub, &format!("{CLAIMS}/shop"), "shop Released", |c| {
        c["status"]["phase"] == "Released"
    })
    .await;
    wait_provisions(&mut agent, &["blog-k8s"]).await;

    // Retain: the pool keeps its claimRef and is Released.
    hub.delete("/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/blog")
        .await;
    wait_object(&hub, &pool_path("blog-k8s"), "blog-k8s Released", |p| {
        p["spec"]["claimRef"]["name"] == "blog" && p["status"]["phase"] == "Released"
    })
    .await;
    wait_object(&hub, &format!("{CLAIMS}/blog"), "blog Released", |c| {
        c["status"]["phase"] == "Released"
    })
    .await;

    // Deleted claims go once reclaimed (their finalizer removed); the retained pool stays.
    hub.delete(&format!("{CLAIMS}/blog")).await;
    hub.delete(&format!("{CLAIMS}/web")).await;
    wait_gone(&hub, &format!("{CLAIMS}/blog")).await;
    wait_gone(&hub, &format!("{CLAIMS}/web")).await;
    wait_event(&hub, "blog", "Deleted").await;
    let pool = hub.get(&pool_path("blog-k8s")).await;
    assert_eq!(pool["status"]["phase"], "Released", "{pool}");
    hub.stop().await;
}

#[tokio::test]
async fn a_standalone_claim_binds_a_free_pool_or_stays_pending_with_the_reason() {
    let hub = TestHub::start().await;
    hub.create_cluster("std").await;
    hub.create_cluster("bare").await;
    let _std = FakeAgent::connect(&hub, "std").await;
    let _bare = FakeAgent::connect(&hub, "bare").await;
    for cluster in ["std", "bare"] {
        wait_object(
            &hub,
            &format!("{GROUP}/clusters/{cluster}"),
            "standalone",
            |c| c["status"]["driver"] == "standalone",
        )
        .await;
    }
    placed_ingress(&hub, "site", 7301, &["std", "bare"]).await;
    for (name, cluster, tier) in [
        ("std-gold", "std", "gold"),
        ("bare-silver", "bare", "silver"),
    ] {
        let body = json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "IngressPool",
            "metadata": {"name": name, "labels": {"tier": tier}},
            "spec": {"cluster": cluster},
        });
        hub.post(&format!("{GROUP}/ingresspools"), Some(&body))
            .await;
    }
    create_claim(&hub, "site", "Delete", json!({"tier": "gold"})).await;

    let claim = wait_object(
        &hub,
        &format!("{CLAIMS}/site"),
        "site: std bound, bare pending",
        |c| {
            c["status"]["clusters"]
                .as_array()
                .is_some_and(|e| e.len() == 2)
        },
    )
    .await;
    assert_eq!(claim["status"]["phase"], "Pending");
    assert_eq!(
        claim["status"]["clusters"],
        json!([
            {"cluster": "bare", "provisioned": false,
             "message": "no free IngressPool of cluster bare has labels {tier=gold}"},
            {"cluster": "std", "pool": "std-gold", "provisioned": false,
             "message": "bound to the claim"},
        ])
    );
    let pool = hub.get(&pool_path("std-gold")).await;
    assert_eq!(pool["spec"]["claimRef"]["name"], "site");
    let silver = hub.get(&pool_path("bare-silver")).await;
    assert!(silver["spec"]["claimRef"].is_null(), "{silver}");
    let pending = wait_event(&hub, "site", "Pending").await;
    assert_eq!(pending["type"], "Warning");
    assert_eq!(
        pending["message"],
        "no free IngressPool of cluster bare has labels {tier=gold}"
    );
    wait_event(&hub, "site", "Bound").await;
    wait_object(&hub, &pool_path("std-gold"), "std-gold Bound", |p| {
        p["status"]["phase"] == "Bound"
    })
    .await;

    // The ingress gone, Delete recycles the pool the claim only bound.
    hub.delete("/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/site")
        .await;
    wait_object(&hub, &pool_path("std-gold"), "std-gold recycled", |p| {
        p["spec"]["claimRef"].is_null()
    })
    .await;
    wait_object(&hub, &format!("{CLAIMS}/site"), "site Released", |c| {
        c["status"]["phase"] == "Released"
    })
    .await;
    hub.stop().await;
}

#[tokio::test]
async fn a_namespace_being_deleted_waits_until_its_claims_are_reclaimed() {
    let hub = TestHub::start().await;
    hub.create_cluster("k8s").await;
    let _agent = FakeAgent::connect_with(&hub, "k8s", "kubernetes", KUBERNETES).await;
    wait_object(&hub, &format!("{GROUP}/clusters/k8s"), "k8s driver", |c| {
        c["status"]["driver"] == "kubernetes"
    })
    .await;
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    hub.post("/api/v1/namespaces", Some(&namespace)).await;
    let ingresses = format!("{GROUP}/namespaces/team/federatedingresses");
    let ingress = json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": "app"},
        "spec": {
            "rules": [{"protocol": "TCP", "port": 7401, "backend": {"service": "echo", "port": 9000}}],
            "traffic": {"dnsName": "app.fedingress.test"},
            "placement": {"clusters": ["k8s"]},
        }
    });
    hub.post(&ingresses, Some(&ingress)).await;
    wait_object(&hub, &format!("{ingresses}/app"), "app placed", |i| {
        i["status"]["clusters"][0]["name"] == "k8s"
    })
    .await;
    let claims = format!("{GROUP}/namespaces/team/ingressclaims");
    let claim = json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "IngressClaim",
        "metadata": {"name": "app"},
        "spec": {"ingresses": ["app"]},
    });
    hub.post(&claims, Some(&claim)).await;
    let pool = wait_object(&hub, &pool_path("app-k8s"), "app-k8s provisioned", |p| {
        p["spec"]["claimRef"]["namespace"] == "team"
    })
    .await;
    assert_eq!(
        pool["metadata"]["labels"]["fedingress.io/provisioned-by"],
        "team.app"
    );
    wait_object(&hub, &format!("{claims}/app"), "app protected", |c| {
        c["metadata"]["finalizers"] == json!(["fedingress.io/claim-protection"])
    })
    .await;

    hub.delete("/api/v1/namespaces/team").await;
    // The claim's deletion waits for its reclaim (Delete: the pool goes), then the
    // namespace goes.
    wait_gone(&hub, &pool_path("app-k8s")).await;
    wait_gone(&hub, &format!("{claims}/app")).await;
    wait_gone(&hub, "/api/v1/namespaces/team").await;
    hub.stop().await;
}
