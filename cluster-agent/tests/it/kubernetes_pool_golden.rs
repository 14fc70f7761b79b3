//! Golden files of the workload a pool provision becomes
//! ([`fedingress_agent::kubernetes::render::pool`]):
//! `tests/golden/pool/<case>.yaml` holds the ConfigMap, the Deployment and the
//! PodDisruptionBudget, each read back strictly into its k8s-openapi type as the
//! rendering goldens are (`kubernetes_golden::check_objects`).
//!
//! `UPDATE_GOLDEN=1 cargo nextest run -p cluster-agent -E 'test(golden)'` rewrites them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fedingress_agent::kubernetes::render::Desired;
use fedingress_agent::kubernetes::render::pool::{
    HOST_IP_PLACEHOLDER, NODE_NAME_PLACEHOLDER, PoolSettings, render,
};
use fedingress_api::plan::PoolProvision;

use super::kubernetes_golden::check_objects;

fn settings(ca: bool) -> PoolSettings {
    PoolSettings {
        namespace: "fedingress-system".to_owned(),
        image: "registry.example.com/fedingress/cluster-agent:0.1.0".to_owned(),
        cluster: "eu-west".to_owned(),
        hub_addresses: vec![
            "https://hub-a.example.com:6444".to_owned(),
            "https://hub-b.example.com:6444".to_owned(),
        ],
        hub_ca_pem: ca.then(|| {
            "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n".to_owned()
        }),
        hub_insecure_allow_plaintext: false,
        token_secret: "fedingress-agent-token".to_owned(),
        token_key: "token".to_owned(),
        interface: "eth0".to_owned(),
        owner: Some("eu-west".to_owned()),
    }
}

/// (case, provision, settings with a CA)
fn cases() -> Vec<(&'static str, PoolProvision, bool)> {
    vec![
        (
            "web",
            PoolProvision {
                name: "web".to_owned(),
                replicas: 3,
                member_labels: BTreeMap::from([
                    ("fedingress.io/pool".to_owned(), "web".to_owned()),
                    ("tier".to_owned(), "edge".to_owned()),
                ]),
                requests: BTreeMap::from([
                    ("cpu".to_owned(), "500m".to_owned()),
                    ("memory".to_owned(), "128Mi".to_owned()),
                ]),
                limits: BTreeMap::from([("memory".to_owned(), "512Mi".to_owned())]),
            },
            true,
        ),
        (
            "minimal",
            PoolProvision {
                name: "claim-a1b2".to_owned(),
                replicas: 1,
                ..PoolProvision::default()
            },
            false,
        ),
    ]
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/pool")
}

fn golden_text(case: &str, objects: &[Desired]) -> String {
    let mut out = format!(
        "# Pool case {case}: written by cluster-agent/tests/it/kubernetes_pool_golden.rs\n# (UPDATE_GOLDEN=1 rewrites it).\n"
    );
    for object in objects {
        out.push_str("---\n");
        out.push_str(&object.to_yaml().unwrap());
    }
    out
}

#[test]
fn golden_pool_workloads() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let dir = golden_dir();
    let mut mismatched = Vec::new();
    for (case, provision, ca) in cases() {
        let objects = render(&provision, &settings(ca));
        let text = golden_text(case, &objects);
        assert_eq!(check_objects(&text, case), 3);
        let path = dir.join(format!("{case}.yaml"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        if expected != text {
            eprintln!(
                "--- {} (expected)\n{expected}\n+++ rendered\n{text}",
                path.display()
            );
            mismatched.push(path.display().to_string());
        }
    }
    assert!(mismatched.is_empty(), "golden files differ: {mismatched:?}");
    if !update {
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        found.sort();
        let mut expected: Vec<String> = cases()
            .iter()
            .map(|(case, _, _)| format!("{case}.yaml"))
            .collect();
        expected.sort();
        assert_eq!(found, expected, "golden files left over");
    }
}

/// What the workload must hold for the members to run: host network, one per node,
/// at least two, keepalived's capabilities, the agent's image, the probes on the
/// admin port the config names, the token Secret where the config reads it.
#[test]
fn the_pool_workload_runs_members_that_can_hold_a_vip() {
    let (_, provision, _) = cases().remove(1);
    let objects = render(&provision, &settings(false));
    let value =
        |o: &Desired| -> serde_json::Value { yaml_serde::from_str(&o.to_yaml().unwrap()).unwrap() };
    let config = value(&objects[0]);
    let deployment = value(&objects[1]);
    let budget = value(&objects[2]);
    for object in [&config, &deployment, &budget] {
        assert_eq!(object["metadata"]["name"], "fedingress-pool-claim-a1b2");
        assert_eq!(object["metadata"]["namespace"], "fedingress-system");
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "fedingress");
        assert_eq!(labels["fedingress.io/owner"], "eu-west");
        assert_eq!(labels["fedingress.io/pool"], "claim-a1b2");
    }
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2, "at least two replicas");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    let term =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        term["labelSelector"]["matchLabels"],
        spec["selector"]["matchLabels"]
    );
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        spec["selector"]["matchLabels"]
    );
    assert_eq!(budget["spec"]["minAvailable"], 1);
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/fedingress/cluster-agent:0.1.0"
    );
    let added = &container["securityContext"]["capabilities"]["add"];
    for capability in ["NET_ADMIN", "NET_RAW"] {
        assert!(
            added.as_array().unwrap().iter().any(|c| c == capability),
            "{added}"
        );
    }
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let agent_yaml: serde_json::Value =
        yaml_serde::from_str(config["data"]["agent.yaml"].as_str().unwrap()).unwrap();
    let admin_port = agent_yaml["admin"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(
        container["readinessProbe"]["httpGet"]["port"].as_u64(),
        Some(admin_port)
    );
    assert_eq!(agent_yaml["member"]["name"], NODE_NAME_PLACEHOLDER);
    assert_eq!(agent_yaml["member"]["address"], HOST_IP_PLACEHOLDER);
    assert_eq!(agent_yaml["driver"], "standalone");
    assert_eq!(agent_yaml["pools"]["keepalived"]["manage"], true);
    // The token Secret is mounted where tokenFile points.
    let token_mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "token")
        .unwrap();
    assert_eq!(
        agent_yaml["tokenFile"],
        format!("{}/token", token_mount["mountPath"].as_str().unwrap())
    );
    let token_volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "token")
        .unwrap();
    assert_eq!(
        token_volume["secret"]["secretName"],
        "fedingress-agent-token"
    );
    // The environment the entrypoint fills the placeholders from.
    let env = container["env"].as_array().unwrap();
    let field = |name: &str| {
        env.iter()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(field("NODE_NAME"), Some("spec.nodeName".into()));
    assert_eq!(field("HOST_IP"), Some("status.hostIP".into()));
}

/// The members' config, with what the entrypoint writes in, is a config the agent
/// accepts: driver standalone, the member named after the node, its address the host
/// IP, pools' VRRP managed by the agent.
#[test]
fn the_members_config_is_accepted_once_the_pod_fills_it_in() {
    for (case, provision, ca) in cases() {
        let objects = render(&provision, &settings(ca));
        let Desired::ConfigMap(config_map) = &objects[0] else {
            panic!("{objects:?}")
        };
        let text = config_map.data.as_ref().unwrap()["agent.yaml"]
            .replace(NODE_NAME_PLACEHOLDER, "ip-10-0-0-1-ec2-internal")
            .replace(HOST_IP_PLACEHOLDER, "10.0.0.1");
        let config = fedingress_agent::Config::from_yaml(&text)
            .unwrap_or_else(|e| panic!("{case}: {e:?}\n{text}"));
        assert_eq!(config.driver, fedingress_agent::config::Driver::Standalone);
        assert_eq!(config.cluster, "eu-west");
        assert_eq!(config.member.name(), "ip-10-0-0-1-ec2-internal");
        assert_eq!(config.member.address, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(config.member.labels, provision.member_labels);
        assert!(config.pools.is_some(), "{case}");
    }
}
