//! Namespaces end to end with the real kubectl and a real standalone agent: create, list
//! (server-side Table), describe, label, explain and client-side apply; admission refuses
//! objects in a namespace that does not exist; `kubectl delete ns` cascades to the
//! namespace's content (the agent stops serving its ingress) and returns once the
//! namespace is gone; the immortal `default` cannot be deleted. Loopback block 87.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use fedingress_tests::echo::{Echo, tcp_roundtrip};
use fedingress_tests::eventually;
use fedingress_tests::federation::{
    ClusterSpec, agent_config, create_cluster, issue_token, kubectl, start_agent, start_hub,
};

/// Generous: timing is measured by the benchmarks, not here.
const WAIT: Duration = Duration::from_secs(30);
const BLOCK: u8 = 87;
const PORT: u16 = 17087;

#[test]
fn namespaces_are_created_listed_and_deleted_with_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, BLOCK);
    let k = kubectl(dir, &hub.api);

    // Create, list as kube's Table, read back with kube's defaults.
    let created = k.ok(&["create", "namespace", "shop"]);
    assert!(created.contains("namespace/shop created"), "{created}");
    let listed = k.ok(&["get", "ns"]);
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"], "{listed}");
    for name in [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "shop",
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().take(2).eq([name, "Active"])),
            "{name} Active in:\n{listed}"
        );
    }
    let yaml = k.ok(&["get", "ns", "shop", "-o", "yaml"]);
    assert!(yaml.contains("finalizers:\n  - kubernetes"), "{yaml}");
    assert!(yaml.contains("phase: Active"), "{yaml}");
    let described = k.ok(&["describe", "ns", "shop"]);
    assert!(
        described.contains("Name:") && described.contains("Active"),
        "{described}"
    );
    k.ok(&["label", "ns", "shop", "team=web"]);
    assert!(
        k.ok(&["get", "ns", "-l", "team=web", "-o", "name"])
            .contains("namespace/shop")
    );
    let explained = k.ok(&["explain", "ns.spec"]);
    assert!(explained.contains("finalizers"), "{explained}");

    // Client-side apply (a strategic merge patch the second time).
    let ns_yaml = dir.join("ns.yaml");
    std::fs::write(
        &ns_yaml,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: applied\n  labels: {stage: one}\n",
    )
    .unwrap();
    let ns_path = ns_yaml.display().to_string();
    assert!(
        k.ok(&["apply", "-f", &ns_path])
            .contains("namespace/applied created")
    );
    std::fs::write(
        &ns_yaml,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: applied\n  labels: {stage: two}\n",
    )
    .unwrap();
    assert!(
        k.ok(&["apply", "-f", &ns_path])
            .contains("namespace/applied configured")
    );
    assert!(
        k.ok(&["get", "ns", "applied", "--show-labels"])
            .contains("stage=two")
    );

    // A cluster with a real agent serving the namespace's ingress on a TCP port.
    let spec = ClusterSpec::numbered(BLOCK, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    create_cluster(&k, dir, &spec);
    let (_, token) = issue_token(&hub.api, &spec.name).unwrap();
    let _agent = start_agent(&agent_config(dir, &hub.agent, &spec, &token), &spec.name);
    let ingress = dir.join("echo.yaml");
    std::fs::write(
        &ingress,
        format!(
            "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: echo\nspec:\n  rules:\n  - protocol: TCP\n    port: {PORT}\n    backend: {{service: echo, port: 9000}}\n  traffic:\n    dnsName: echo.shop.fedingress.test\n"
        ),
    )
    .unwrap();
    let ingress = ingress.display().to_string();
    k.ok(&["apply", "-n", "shop", "-f", &ingress]);
    let at = SocketAddr::new(spec.bind, PORT);
    eventually(WAIT, "the agent serves the ingress of shop", || {
        tcp_roundtrip(at, "hello\n").and_then(|answer| {
            (answer == "HELLO\n")
                .then_some(())
                .ok_or(format!("answered {answer:?}"))
        })
    });
    let event = dir.join("event.yaml");
    std::fs::write(&event, "apiVersion: v1\nkind: Event\nmetadata:\n  name: echo.test\ninvolvedObject: {kind: FederatedIngress, name: echo, apiVersion: fedingress.io/v1alpha1}\nreason: Tested\nmessage: an event in shop\ntype: Normal\n").unwrap();
    // Events have no OpenAPI schema here: kubectl validates nothing client-side.
    k.ok(&[
        "create",
        "-n",
        "shop",
        "--validate=false",
        "-f",
        &event.display().to_string(),
    ]);

    // Admission: no objects in a namespace that does not exist.
    let out = k.run(&["apply", "-n", "nowhere", "-f", &ingress]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("namespaces \"nowhere\" not found"),
        "{stderr}"
    );

    // Deleting the namespace deletes its content; kubectl returns once it is gone.
    let deleted = k.ok(&["delete", "ns", "shop", "--timeout=60s"]);
    assert!(deleted.contains("namespace \"shop\" deleted"), "{deleted}");
    let gone = k.fails(&["get", "ns", "shop"]);
    assert!(gone.contains("namespaces \"shop\" not found"), "{gone}");
    let left = k.run(&["get", "fing,events", "-n", "shop", "-o", "name"]);
    assert!(left.status.success());
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "");
    eventually(
        WAIT,
        "the agent stops serving the deleted namespace's port",
        || match tcp_roundtrip(at, "hello\n") {
            Ok(answer) => Err(format!("still served: {answer:?}")),
            Err(_) => Ok(()),
        },
    );

    // The immortal namespaces stay.
    let refused = k.fails(&["delete", "ns", "default"]);
    assert!(
        refused.contains("namespaces \"default\" is forbidden: this namespace may not be deleted"),
        "{refused}"
    );
    assert!(k.ok(&["get", "ns", "default"]).contains("Active"));
}
