//! Pure: a [`PoolProvision`] of the plan → the workload that runs the pool in the member
//! cluster: our agent in member mode (driver `standalone`, the pool's member labels,
//! hub-managed VRRP with keepalived), on host network, one replica per node.
//!
//! Entry point: [`render`] (a provision and the [`PoolSettings`] the driver gathered) →
//! three objects, all named [`object_name`] (`fedingress-pool-<name>`) in the agent's own
//! namespace, in the order they are applied:
//! - a `ConfigMap` with the members' agent config (`agent.yaml`, with the placeholders
//!   [`NODE_NAME_PLACEHOLDER`] and [`HOST_IP_PLACEHOLDER`]) and the hub's CA
//!   (`hub-ca.pem`);
//! - a `Deployment` of `max(replicas, 2)` Pods: `hostNetwork`, `dnsPolicy:
//!   ClusterFirstWithHostNet`, required pod anti-affinity on `kubernetes.io/hostname`,
//!   the agent's own image with `NET_ADMIN`, `NET_RAW` and `NET_BIND_SERVICE` (keepalived
//!   adds the VIPs and speaks VRRP; the data plane binds ports below 1024), the
//!   provision's requests and limits, readiness on `/readyz`;
//! - a `PodDisruptionBudget` with `minAvailable: 1`.
//!
//! # Guarantees
//!
//! - Every object carries the ownership labels of every other rendered object
//!   ([`super::MANAGED_BY_LABEL`], [`super::OWNER_LABEL`]) plus [`POOL_LABEL`], so the
//!   driver's garbage collection deletes them once the provision leaves the plan.
//! - The Pod template carries [`CONFIG_HASH_ANNOTATION`], a hash of the ConfigMap's data:
//!   a changed config rolls the Pods (a ConfigMap mounted as a volume is re-read by the
//!   kubelet, but the agent reads its config once, at start).
//! - Output is deterministic (maps are sorted), so server-side apply patches are stable.
//!
//! # Assumptions
//!
//! The image holds `/bin/sh`, `sed` and `keepalived` (the agent runs keepalived as its
//! child, `pools.keepalived.manage: true`); see docs/cluster-agent.md ("kubernetes
//! driver: pool workloads"). The agent config cannot take values from the environment,
//! so the container's command writes the Pod's node name and host IP into a copy of
//! `agent.yaml` before it starts the agent.

use std::collections::BTreeMap;

use fedingress_api::plan::PoolProvision;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::names::short_hash;
use super::{Desired, MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL};

/// Label naming the pool an object runs (its value: the provision's name, shortened
/// with a hash when longer than a label value may be).
pub const POOL_LABEL: &str = "fedingress.io/pool";
/// Pod template annotation: a hash of the members' ConfigMap data.
pub const CONFIG_HASH_ANNOTATION: &str = "fedingress.io/config-hash";
/// `app.kubernetes.io/name` of every pool Pod.
pub const POOL_APP: &str = "fedingress-pool";
/// Where the members' admin endpoint listens (on the node: host network).
pub const ADMIN_PORT: u16 = 9090;
/// Replaced by the Pod's node name (`spec.nodeName`) before the agent starts: the
/// member's name.
pub const NODE_NAME_PLACEHOLDER: &str = "@NODE_NAME@";
/// Replaced by the Pod's host IP (`status.hostIP`): the member's address, which its VRRP
/// peers send to and the hub publishes.
pub const HOST_IP_PLACEHOLDER: &str = "@HOST_IP@";
/// The fewest replicas a pool runs: one host is no pool.
pub const MIN_REPLICAS: u32 = 2;

/// Where the config, the token and the agent's state are in a member's container.
const CONFIG_DIR: &str = "/etc/fedingress";
const TOKEN_DIR: &str = "/var/run/fedingress/token";
const STATE_DIR: &str = "/var/lib/fedingress";
/// The config with the placeholders filled in (an emptyDir: the root file system is
/// read-only).
const RUN_DIR: &str = "/run/fedingress";
const AGENT_BINARY: &str = "/usr/local/bin/cluster-agent";

/// What the driver knows that every pool's workload needs (from its own config and its
/// own Pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// Where the workloads live: the agent's own namespace (the token Secret is there).
    pub namespace: String,
    /// The agent's own image (the members run the same build).
    pub image: String,
    /// The cluster the members join.
    pub cluster: String,
    /// The hub's agent gateway addresses, as in the agent's config.
    pub hub_addresses: Vec<String>,
    /// The PEM CA bundle the agent verifies the hub with (none: the system roots).
    pub hub_ca_pem: Option<String>,
    pub hub_insecure_allow_plaintext: bool,
    /// The Secret holding the agent token (the agent's own: agent tokens are
    /// cluster-wide, a member authenticates as any member of its cluster), and its key.
    pub token_secret: String,
    pub token_key: String,
    /// The interface keepalived adds the pool's VIPs to (on every node).
    pub interface: String,
    /// The [`OWNER_LABEL`] value (none: no owner label).
    pub owner: Option<String>,
}

/// `fedingress-pool-<name>`: the ConfigMap, Deployment and PodDisruptionBudget of pool
/// `name`. A name with a `.` or longer than 52 characters (so that Pod names stay
/// within 63) becomes its readable part plus a stable hash.
pub fn object_name(pool: &str) -> String {
    const MAX: usize = 52;
    let readable = format!("{POOL_APP}-{pool}");
    if readable.len() <= MAX && !pool.contains('.') {
        return readable;
    }
    let hash = short_hash(&[pool]);
    let head = readable.replace('.', "-");
    let mut end = head.len().min(MAX - hash.len() - 1);
    while !head.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", head[..end].trim_end_matches('-'))
}

/// The [`POOL_LABEL`] value of pool `name`.
pub fn label_value(pool: &str) -> String {
    if pool.len() <= 63 {
        return pool.to_owned();
    }
    format!("{}-{}", &pool[..54], short_hash(&[pool]))
}

/// The ConfigMap, the Deployment and the PodDisruptionBudget of `provision` (see the
/// module docs).
pub fn render(provision: &PoolProvision, settings: &PoolSettings) -> Vec<Desired> {
    let name = object_name(&provision.name);
    let config_map = config_map(provision, settings, &name);
    let hash = short_hash(&[&format!("{:?}", config_map.data)]);
    vec![
        Desired::ConfigMap(config_map),
        Desired::Deployment(deployment(provision, settings, &name, &hash)),
        Desired::PodDisruptionBudget(disruption_budget(provision, settings, &name)),
    ]
}

/// The labels selecting the pool's Pods (immutable once the Deployment exists).
fn selector(provision: &PoolProvision) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), POOL_APP.to_owned()),
        (POOL_LABEL.to_owned(), label_value(&provision.name)),
    ])
}

fn metadata(provision: &PoolProvision, settings: &PoolSettings, name: &str) -> ObjectMeta {
    let mut labels = selector(provision);
    labels.insert(
        "app.kubernetes.io/part-of".to_owned(),
        "fedingress".to_owned(),
    );
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    if let Some(owner) = &settings.owner {
        labels.insert(OWNER_LABEL.to_owned(), owner.clone());
    }
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(settings.namespace.clone()),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

/// The members' agent config, as YAML with the placeholders.
pub fn agent_config(provision: &PoolProvision, settings: &PoolSettings) -> String {
    let mut hub = json!({ "addresses": settings.hub_addresses });
    if settings.hub_ca_pem.is_some() {
        hub["caFile"] = json!(format!("{CONFIG_DIR}/hub-ca.pem"));
    }
    if settings.hub_insecure_allow_plaintext {
        hub["insecureAllowPlaintext"] = json!(true);
    }
    let config: Value = json!({
        "hub": hub,
        "cluster": settings.cluster,
        "tokenFile": format!("{TOKEN_DIR}/{}", settings.token_key),
        "driver": "standalone",
        "member": {
            "name": NODE_NAME_PLACEHOLDER,
            "address": HOST_IP_PLACEHOLDER,
            "labels": provision.member_labels,
        },
        // Every rule's port on every address of the node; the hub publishes the pool's
        // VIPs (or the members' addresses while no member holds them).
        "listen": [{"bind": "0.0.0.0", "advertise": HOST_IP_PLACEHOLDER}],
        "pools": {
            "interface": settings.interface,
            "keepalived": {"manage": true},
        },
        "stateDir": STATE_DIR,
        "admin": format!("0.0.0.0:{ADMIN_PORT}"),
    });
    let text = yaml_serde::to_string(&config).unwrap_or_default();
    format!(
        "# Pool {}: written by the fedingress agent (kubernetes driver). The member's name and\n# address are filled in from the Pod's node name and host IP before the agent starts.\n{text}",
        provision.name
    )
}

fn config_map(provision: &PoolProvision, settings: &PoolSettings, name: &str) -> ConfigMap {
    let mut data = BTreeMap::from([("agent.yaml".to_owned(), agent_config(provision, settings))]);
    if let Some(ca) = &settings.hub_ca_pem {
        data.insert("hub-ca.pem".to_owned(), ca.clone());
    }
    ConfigMap {
        metadata: metadata(provision, settings, name),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The container's command: fill the placeholders in, then become the agent. The member
/// name is the node's name as a DNS-1123 label (a member name is one; node names are
/// often DNS subdomains, `ip-10-0-0-1.ec2.internal`): lower case, `.` and `_` as `-`, at
/// most 63 characters, no trailing `-`.
fn entrypoint() -> String {
    format!(
        "set -e; member=$(printf '%s' \"$NODE_NAME\" | tr 'A-Z._' 'a-z--' | cut -c1-63 | sed 's/-*$//'); \
         sed -e \"s|{NODE_NAME_PLACEHOLDER}|$member|g\" -e \"s|{HOST_IP_PLACEHOLDER}|$HOST_IP|g\" \
         {CONFIG_DIR}/agent.yaml > {RUN_DIR}/agent.yaml; exec {AGENT_BINARY} --config {RUN_DIR}/agent.yaml"
    )
}

fn env_from(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn quantities(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, Quantity>> {
    (!map.is_empty()).then(|| {
        map.iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect()
    })
}

fn probe(path: &str, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(i32::from(ADMIN_PORT)),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        ..Probe::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn container(provision: &PoolProvision, settings: &PoolSettings) -> Container {
    Container {
        name: "agent".to_owned(),
        image: Some(settings.image.clone()),
        command: Some(vec!["/bin/sh".to_owned(), "-c".to_owned(), entrypoint()]),
        env: Some(vec![
            env_from("NODE_NAME", "spec.nodeName"),
            env_from("HOST_IP", "status.hostIP"),
            env_from("POD_NAME", "metadata.name"),
            env_from("POD_NAMESPACE", "metadata.namespace"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("admin".to_owned()),
            container_port: i32::from(ADMIN_PORT),
            ..ContainerPort::default()
        }]),
        liveness_probe: Some(probe("/healthz", 10)),
        readiness_probe: Some(probe("/readyz", 5)),
        resources: Some(ResourceRequirements {
            requests: quantities(&provision.requests),
            limits: quantities(&provision.limits),
            ..ResourceRequirements::default()
        }),
        // keepalived needs root with NET_ADMIN (the VIPs) and NET_RAW (VRRP is IP
        // protocol 112); Kubernetes grants added capabilities to root only.
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(false),
            run_as_user: Some(0),
            capabilities: Some(Capabilities {
                add: Some(vec![
                    "NET_ADMIN".to_owned(),
                    "NET_BIND_SERVICE".to_owned(),
                    "NET_RAW".to_owned(),
                ]),
                drop: Some(vec!["ALL".to_owned()]),
            }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            mount("config", CONFIG_DIR, true),
            mount("token", TOKEN_DIR, true),
            mount("state", STATE_DIR, false),
            mount("run", RUN_DIR, false),
        ]),
        ..Container::default()
    }
}

fn deployment(
    provision: &PoolProvision,
    settings: &PoolSettings,
    name: &str,
    config_hash: &str,
) -> Deployment {
    let selector_labels = selector(provision);
    let replicas = i32::try_from(provision.replicas.max(MIN_REPLICAS)).unwrap_or(i32::MAX);
    let mut pod_labels = selector_labels.clone();
    pod_labels.insert(
        "app.kubernetes.io/part-of".to_owned(),
        "fedingress".to_owned(),
    );
    let pod = PodSpec {
        host_network: Some(true),
        dns_policy: Some("ClusterFirstWithHostNet".to_owned()),
        // The members talk to the hub, not to the Kubernetes API.
        automount_service_account_token: Some(false),
        termination_grace_period_seconds: Some(30),
        security_context: Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_owned(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        affinity: Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    topology_key: "kubernetes.io/hostname".to_owned(),
                    label_selector: Some(LabelSelector {
                        match_labels: Some(selector_labels.clone()),
                        ..LabelSelector::default()
                    }),
                    ..PodAffinityTerm::default()
                }]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        }),
        containers: vec![container(provision, settings)],
        volumes: Some(vec![
            Volume {
                name: "config".to_owned(),
                config_map: Some(ConfigMapVolumeSource {
                    name: name.to_owned(),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            Volume {
                name: "token".to_owned(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(settings.token_secret.clone()),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
            empty_dir("state"),
            empty_dir("run"),
        ]),
        ..PodSpec::default()
    };
    Deployment {
        metadata: metadata(provision, settings, name),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels),
                ..LabelSelector::default()
            },
            // One node per member: a surge Pod would find no free node when the pool
            // has as many replicas as the cluster has nodes.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(0)),
                    max_unavailable: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH_ANNOTATION.to_owned(),
                        config_hash.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

fn disruption_budget(
    provision: &PoolProvision,
    settings: &PoolSettings,
    name: &str,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: metadata(provision, settings, name),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector(provision)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provision(name: &str, replicas: u32) -> PoolProvision {
        PoolProvision {
            name: name.to_owned(),
            replicas,
            member_labels: BTreeMap::from([("pool".to_owned(), name.to_owned())]),
            requests: BTreeMap::from([("cpu".to_owned(), "250m".to_owned())]),
            limits: BTreeMap::new(),
        }
    }

    fn settings() -> PoolSettings {
        PoolSettings {
            namespace: "fedingress-system".to_owned(),
            image: "fedingress/cluster-agent:0.1.0".to_owned(),
            cluster: "eu-west".to_owned(),
            hub_addresses: vec!["https://hub.example.com:6444".to_owned()],
            hub_ca_pem: None,
            hub_insecure_allow_plaintext: false,
            token_secret: "fedingress-agent-token".to_owned(),
            token_key: "token".to_owned(),
            interface: "eth0".to_owned(),
            owner: Some("eu-west".to_owned()),
        }
    }

    #[test]
    fn names_fit_pod_names_and_labels() {
        assert_eq!(object_name("web"), "fedingress-pool-web");
        let dotted = object_name("web.v2");
        assert!(dotted.starts_with("fedingress-pool-web-v2-"), "{dotted}");
        let long = object_name(&"p".repeat(80));
        assert!(long.len() <= 52, "{long}");
        assert_ne!(long, object_name(&"p".repeat(81)));
        assert_eq!(label_value(&"q".repeat(80)).len(), 63);
    }

    #[test]
    fn a_pool_has_at_least_two_replicas_and_a_config_change_rolls_the_pods() {
        let objects = render(&provision("web", 1), &settings());
        let Desired::Deployment(deployment) = &objects[1] else {
            panic!("{objects:?}")
        };
        let spec = deployment.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(2));
        let hash = |objects: &[Desired]| match &objects[1] {
            Desired::Deployment(d) => d.spec.as_ref().unwrap().template.metadata.clone(),
            _ => None,
        };
        let mut other = provision("web", 1);
        other
            .member_labels
            .insert("zone".to_owned(), "a".to_owned());
        assert_ne!(hash(&objects), hash(&render(&other, &settings())));
        assert_eq!(
            hash(&objects),
            hash(&render(&provision("web", 3), &settings()))
        );
    }

    #[test]
    fn the_agent_config_names_the_member_from_the_pod() {
        let text = agent_config(&provision("web", 2), &settings());
        assert!(text.contains("name: '@NODE_NAME@'"), "{text}");
        assert!(text.contains("address: '@HOST_IP@'"), "{text}");
        assert!(text.contains("driver: standalone"), "{text}");
        assert!(!text.contains("caFile"), "{text}");
    }
}
