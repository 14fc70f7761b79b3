//! `deploy/kubernetes/`: the agent config in its ConfigMap is a valid config for driver
//! kubernetes once its placeholders are filled in (`fedctl join --emit kubernetes` fills
//! in exactly those, its own tests check that), and the Deployment runs that config,
//! probes the admin endpoint it binds and mounts the token where it reads it.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use fedingress_agent::config::{Driver, ProfileSetting};
use fedingress_agent::kubernetes::render::{MANAGED_BY, MANAGED_BY_LABEL};
use fedingress_agent::{Config, ConfigError};
use yaml_serde::Value;

fn manifest(file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kubernetes")
        .join(file);
    yaml_serde::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn agent_yaml() -> String {
    manifest("configmap.yaml")["data"]["agent.yaml"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_shipped_agent_config_is_valid_once_filled_in() {
    // As shipped, the placeholder cluster name keeps the agent from starting.
    match Config::from_yaml(&agent_yaml()) {
        Err(ConfigError::Invalid { problems }) => {
            assert!(
                problems.iter().any(|p| p.starts_with("cluster")),
                "{problems:?}"
            )
        }
        other => panic!("the placeholder config was accepted: {other:?}"),
    }
    let filled = agent_yaml().replace("REPLACE-cluster-name", "eu-west");
    let config = Config::from_yaml(&filled).unwrap();
    assert_eq!(config.driver, Driver::Kubernetes);
    assert_eq!(config.cluster, "eu-west");
    let kubernetes = config.kubernetes.as_ref().unwrap();
    assert_eq!(kubernetes.profile, ProfileSetting::Auto);
    assert!(kubernetes.leader_election.enabled);
    assert_eq!(kubernetes.leader_election.namespace, None);
}

#[test]
fn the_deployment_runs_probes_and_mounts_what_the_config_names() {
    let config =
        Config::from_yaml(&agent_yaml().replace("REPLACE-cluster-name", "eu-west")).unwrap();
    let deployment = manifest("deployment.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["--config", "/etc/fedingress/agent.yaml"]);
    assert_eq!(
        container["ports"][0]["containerPort"].as_u64(),
        Some(u64::from(config.admin.port()))
    );
    assert!(
        config.admin.ip().is_unspecified(),
        "the kubelet probes the Pod IP"
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    let mount = |volume: &str| -> String {
        container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["name"].as_str() == Some(volume))
            .and_then(|m| m["mountPath"].as_str())
            .unwrap()
            .to_owned()
    };
    assert_eq!(mount("config"), "/etc/fedingress");
    assert_eq!(
        config.token_file,
        Path::new(&mount("token")).join("token"),
        "tokenFile is the Secret's key `token`"
    );
    assert_eq!(config.state_dir, Path::new(&mount("state")));
    assert_eq!(pod["serviceAccountName"].as_str(), Some("fedingress-agent"));
    // POD_NAMESPACE: where the Lease lives when leaderElection.namespace is not set.
    assert!(
        container["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|e| e["name"].as_str() == Some("POD_NAMESPACE"))
    );
}

/// The agent deletes objects labelled as its own that its plan no longer holds: its own
/// manifests must not carry that label.
#[test]
fn no_shipped_manifest_carries_the_ownership_label() {
    let kustomization = manifest("kustomization.yaml");
    let resources = kustomization["resources"].as_sequence().unwrap();
    assert_eq!(resources.len(), 9);
    for file in resources {
        let file = file.as_str().unwrap();
        let object = manifest(file);
        assert!(object["kind"].as_str().is_some(), "{file}");
        let label = &object["metadata"]["labels"][MANAGED_BY_LABEL];
        assert_ne!(label.as_str(), Some(MANAGED_BY), "{file}");
    }
}
