//! What the driver gathers, once, to run the plan's pools as workloads
//! ([`super::render::pool`]): the agent's own namespace, image and token Secret (read
//! from its own Pod) and its hub settings (from its config).
//!
//! Decisions:
//! - The members run the agent's own image: the one in its Pod's spec (the container
//!   named `agent`, else the only one), so the pools follow the agent's upgrades.
//! - The members authenticate with the agent's own token (agent tokens are
//!   cluster-wide): the Secret volume mounted where the agent's `tokenFile` is, mounted
//!   in the members' Pods too. An agent that joined with a join token has no such
//!   Secret and cannot provision pools (it says so in its readiness).
//! - The workloads live in the agent's namespace, where that Secret is.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

use super::render::pool::PoolSettings;
use super::world::describe_kube_error;

/// The interface keepalived uses when `FEDINGRESS_POOL_INTERFACE` is not set.
pub const DEFAULT_INTERFACE: &str = "eth0";

/// What the driver needs, beyond its `kubernetes:` section, to run pools: the rest of
/// the agent config and the Pod's environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSource {
    /// The agent's namespace (`POD_NAMESPACE`, else the client's default): where pools
    /// run.
    pub namespace: String,
    /// The agent's Pod (`POD_NAME`) in `namespace`.
    pub own_pod: Option<String>,
    pub cluster: String,
    pub hub_addresses: Vec<String>,
    pub hub_ca_file: Option<PathBuf>,
    pub hub_insecure_allow_plaintext: bool,
    /// The agent token's file; none when the agent joined with a join token.
    pub token_file: Option<PathBuf>,
    /// The interface keepalived adds the VIPs to on every node
    /// (`FEDINGRESS_POOL_INTERFACE`, default [`DEFAULT_INTERFACE`]).
    pub interface: String,
    /// The owner label of the agent's objects.
    pub owner: Option<String>,
}

/// What the agent's own Pod says: its image, and the Secret (and key) holding its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnPod {
    pub image: String,
    pub token_secret: String,
    pub token_key: String,
}

/// Reads the image and the token Secret from the agent's Pod.
///
/// # Errors
/// No container has an image, or no Secret volume is mounted where `token_file` is.
pub fn own_pod_facts(pod: &Pod, token_file: &Path) -> Result<OwnPod, String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| format!("Pod {name} has no spec"))?;
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == "agent")
        .or_else(|| spec.containers.first())
        .ok_or_else(|| format!("Pod {name} has no container"))?;
    let image = container
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| format!("container {} of Pod {name} has no image", container.name))?;
    let no_secret = || {
        format!(
            "no Secret volume of Pod {name} is mounted where tokenFile {} is: the pool's members mount the agent's token Secret",
            token_file.display()
        )
    };
    for mount in container.volume_mounts.iter().flatten() {
        let Ok(rest) = token_file.strip_prefix(&mount.mount_path) else {
            continue;
        };
        let Some(secret) = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .and_then(|v| v.secret.as_ref())
        else {
            continue;
        };
        let Some(secret_name) = secret.secret_name.clone() else {
            continue;
        };
        let path = match &mount.sub_path {
            Some(sub) if !sub.is_empty() => Path::new(sub).join(rest),
            _ => rest.to_path_buf(),
        };
        let path = path.to_string_lossy().into_owned();
        // `items` maps keys to other paths; without it each key is its own file.
        let key = match &secret.items {
            Some(items) => items
                .iter()
                .find(|i| i.path == path)
                .map(|i| i.key.clone())
                .ok_or_else(no_secret)?,
            None => path,
        };
        return Ok(OwnPod {
            image,
            token_secret: secret_name,
            token_key: key,
        });
    }
    Err(no_secret())
}

/// The settings of every pool's workload: reads the agent's Pod and the hub's CA file.
///
/// # Errors
/// What is missing, in words for the agent's readiness.
pub async fn settings(client: &Client, source: &PoolSource) -> Result<PoolSettings, String> {
    let token_file = source.token_file.as_ref().ok_or(
        "a pool's members authenticate with the agent token, and this agent joined with a join token (tokenFile is not set)",
    )?;
    let pod_name = source.own_pod.as_ref().ok_or(
        "POD_NAME is not set: the agent reads its own Pod for the members' image and token Secret",
    )?;
    let pod = Api::<Pod>::namespaced(client.clone(), &source.namespace)
        .get(pod_name)
        .await
        .map_err(|e| {
            format!(
                "reading the agent's Pod {}/{pod_name}: {}",
                source.namespace,
                describe_kube_error(&e)
            )
        })?;
    let own = own_pod_facts(&pod, token_file)?;
    let hub_ca_pem = match &source.hub_ca_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("reading hub.caFile {}: {e}", path.display()))?,
        ),
        None => None,
    };
    Ok(PoolSettings {
        namespace: source.namespace.clone(),
        image: own.image,
        cluster: source.cluster.clone(),
        hub_addresses: source.hub_addresses.clone(),
        hub_ca_pem,
        hub_insecure_allow_plaintext: source.hub_insecure_allow_plaintext,
        token_secret: own.token_secret,
        token_key: own.token_key,
        interface: source.interface.clone(),
        owner: source.owner.clone(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(extra_volume: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "fedingress-agent-0", "namespace": "fedingress-system"},
            "spec": {
                "containers": [
                    {"name": "sidecar", "image": "busybox"},
                    {"name": "agent", "image": "registry.example.com/fedingress/cluster-agent:0.1.0",
                     "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/fedingress"},
                        {"name": "token", "mountPath": "/var/run/fedingress/token"}]}],
                "volumes": [
                    {"name": "config", "configMap": {"name": "fedingress-agent"}},
                    extra_volume]
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_image_and_the_token_secret_come_from_the_agents_pod() {
        let own = own_pod_facts(
            &pod(json!({"name": "token", "secret": {"secretName": "fedingress-agent-token"}})),
            Path::new("/var/run/fedingress/token/token"),
        );
        assert_eq!(
            own,
            Ok(OwnPod {
                image: "registry.example.com/fedingress/cluster-agent:0.1.0".to_owned(),
                token_secret: "fedingress-agent-token".to_owned(),
                token_key: "token".to_owned(),
            })
        );
        // A key mapped to another file name.
        let mapped = own_pod_facts(
            &pod(json!({"name": "token", "secret": {"secretName": "t",
                        "items": [{"key": "agent-token", "path": "token"}]}})),
            Path::new("/var/run/fedingress/token/token"),
        );
        assert_eq!(mapped.map(|o| o.token_key), Ok("agent-token".to_owned()));
    }

    #[test]
    fn a_token_outside_every_secret_volume_is_said() {
        let error = own_pod_facts(
            &pod(json!({"name": "token", "emptyDir": {}})),
            Path::new("/var/run/fedingress/token/token"),
        )
        .unwrap_err();
        assert!(error.contains("no Secret volume"), "{error}");
    }
}
