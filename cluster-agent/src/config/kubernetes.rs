//! The `kubernetes:` section of the agent config (driver `kubernetes`).
//!
//! ```yaml
//! driver: kubernetes
//! kubernetes:
//!   kubeconfig: member.kubeconfig     # absent: in-cluster (the Pod's service account)
//!   context: prod-eu                  # optional: a context of that kubeconfig
//!   profile: auto                     # auto (from Cluster.spec.provider) | mixed | aws | gcp | azure | metallb | nginx-configmap
//!   ingressClassName: nginx           # default for the Ingress; a cluster override wins
//!   loadBalancerIP: 203.0.113.7       # gcp: the reserved static IP split Services share; metallb: the IP to request
//!   metallbSharingKey: fedingress     # metallb: the allow-shared-ip key
//!   serviceAnnotations: {}            # on every LoadBalancer Service
//!   nginx: {tcpServicesConfigMap: ingress-nginx/fedingress-tcp, udpServicesConfigMap: ingress-nginx/fedingress-udp}
//!   ingressController: {service: ingress-nginx/ingress-nginx-controller}
//!   loadBalancerPendingSeconds: 120   # a load balancer without an address this long is a rule error
//!   leaderElection: {namespace: fedingress-system, leaseName: fedingress-agent, leaseDurationSeconds: 15}
//!   ownerId: eu-west                  # the fedingress.io/owner label (default: the cluster's name)
//! ```
//!
//! Decisions:
//! - Without `kubeconfig` the agent uses the in-cluster config (service account token,
//!   `KUBERNETES_SERVICE_HOST`), as every controller deployed in the cluster does. A
//!   relative `kubeconfig` path is resolved against the config file's directory.
//! - `profile: auto` maps the hub's `Cluster.spec.provider` (sent in `Welcome`):
//!   aws → aws, gcp → gcp, azure → azure, onprem → metallb, other → mixed.
//! - `ingressController.service` names the ingress controller's own Service: its
//!   EndpointSlices are the data-path health of HTTP(S) rules (and of the
//!   `nginx-configmap` profile's L4 rules), and its load balancer is where the
//!   `nginx-configmap` profile's rules are served.
//! - Leader election is on by default (two replicas per cluster); its namespace
//!   defaults to the Pod's namespace (`POD_NAMESPACE`, then the service account's
//!   namespace file), and must be given when neither exists.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use fedingress_api::names;
use serde::Deserialize;

use crate::kubernetes::render::{ObjectName, Profile};

/// The `kubernetes:` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesConfig {
    /// A kubeconfig file for the member cluster; in-cluster config when absent.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (its current context when absent).
    #[serde(default)]
    pub context: Option<String>,
    /// How L4 rules are rendered.
    #[serde(default)]
    pub profile: ProfileSetting,
    /// The Ingress class when the cluster's override names none.
    #[serde(default)]
    pub ingress_class_name: Option<String>,
    /// gcp: the reserved static IP that split TCP and UDP Services share; metallb: the
    /// IP address to request.
    #[serde(default, rename = "loadBalancerIP")]
    pub load_balancer_ip: Option<IpAddr>,
    /// metallb: the sharing key of split Services.
    #[serde(default)]
    pub metallb_sharing_key: Option<String>,
    /// Annotations put on every LoadBalancer Service (internal load balancers, say).
    #[serde(default)]
    pub service_annotations: BTreeMap<String, String>,
    /// The `nginx-configmap` profile's ConfigMaps (owned by the agent).
    #[serde(default)]
    pub nginx: Option<NginxConfig>,
    /// The ingress controller's Service.
    #[serde(default)]
    pub ingress_controller: Option<IngressControllerConfig>,
    /// A load balancer still without an address this long after it was applied is
    /// reported as a rule error.
    #[serde(default = "default_pending_seconds")]
    pub load_balancer_pending_seconds: u64,
    /// Leader election between agent replicas.
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
    /// The `fedingress.io/owner` label of every object this agent writes; it only
    /// ever changes or deletes objects carrying it. Default: the cluster's name. Give
    /// each federation its own when several manage one member cluster.
    #[serde(default)]
    pub owner_id: Option<String>,
}

/// `auto` or a fixed profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProfileSetting {
    /// From the hub's `Cluster.spec.provider`.
    #[default]
    Auto,
    Fixed(Profile),
}

impl<'de> Deserialize<'de> for ProfileSetting {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "auto" {
            return Ok(ProfileSetting::Auto);
        }
        Profile::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(&text))
            .map(ProfileSetting::Fixed)
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "unknown profile {text:?}: expected auto, mixed, aws, gcp, azure, metallb or nginx-configmap"
                ))
            })
    }
}

/// The ConfigMaps ingress-nginx reads with `--tcp-services-configmap` and
/// `--udp-services-configmap`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NginxConfig {
    #[serde(deserialize_with = "object_name")]
    pub tcp_services_config_map: ObjectName,
    #[serde(deserialize_with = "object_name")]
    pub udp_services_config_map: ObjectName,
}

/// The ingress controller's Service, `namespace/name`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IngressControllerConfig {
    #[serde(deserialize_with = "object_name")]
    pub service: ObjectName,
}

/// Leader election with a `coordination.k8s.io/v1` Lease.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Off: this agent always leads (one replica only).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The Lease's namespace (default: the Pod's).
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    #[serde(default = "default_lease_seconds")]
    pub lease_duration_seconds: u32,
}

impl Default for KubernetesConfig {
    /// What an empty `kubernetes: {}` section means.
    fn default() -> Self {
        KubernetesConfig {
            kubeconfig: None,
            context: None,
            profile: ProfileSetting::Auto,
            ingress_class_name: None,
            load_balancer_ip: None,
            metallb_sharing_key: None,
            service_annotations: BTreeMap::new(),
            nginx: None,
            ingress_controller: None,
            load_balancer_pending_seconds: default_pending_seconds(),
            leader_election: LeaderElectionConfig::default(),
            owner_id: None,
        }
    }
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        LeaderElectionConfig {
            enabled: true,
            namespace: None,
            lease_name: default_lease_name(),
            lease_duration_seconds: default_lease_seconds(),
        }
    }
}

impl LeaderElectionConfig {
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(u64::from(self.lease_duration_seconds))
    }
}

impl KubernetesConfig {
    pub fn load_balancer_pending(&self) -> Duration {
        Duration::from_secs(self.load_balancer_pending_seconds)
    }

    /// Every problem of the section, with `kubernetes.` field paths.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(class) = &self.ingress_class_name {
            for message in names::dns1123_subdomain(class) {
                problems.push(format!("kubernetes.ingressClassName: {message}"));
            }
        }
        if let Some(key) = &self.metallb_sharing_key
            && key.is_empty()
        {
            problems.push("kubernetes.metallbSharingKey: must not be empty".to_owned());
        }
        if self.profile == ProfileSetting::Fixed(Profile::NginxConfigmap) {
            if self.nginx.is_none() {
                problems.push(
                    "kubernetes.nginx: required by profile nginx-configmap (the tcp/udp services ConfigMaps)"
                        .to_owned(),
                );
            }
            if self.ingress_controller.is_none() {
                problems.push(
                    "kubernetes.ingressController: required by profile nginx-configmap (its Service carries the ports)"
                        .to_owned(),
                );
            }
        }
        if let Some(nginx) = &self.nginx
            && nginx.tcp_services_config_map == nginx.udp_services_config_map
        {
            problems.push(
                "kubernetes.nginx: tcpServicesConfigMap and udpServicesConfigMap must differ"
                    .to_owned(),
            );
        }
        if let Some(owner) = &self.owner_id {
            // A label value: at most 63 characters of [a-z0-9A-Z-_.], alphanumeric ends.
            let ok = !owner.is_empty()
                && owner.len() <= 63
                && owner
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && owner.starts_with(|c: char| c.is_ascii_alphanumeric())
                && owner.ends_with(|c: char| c.is_ascii_alphanumeric());
            if !ok {
                problems.push(format!(
                    "kubernetes.ownerId: {owner:?} is not a valid label value (1-63 letters, digits, '-', '_', '.', alphanumeric at both ends)"
                ));
            }
        }
        if self.load_balancer_pending_seconds == 0 {
            problems.push("kubernetes.loadBalancerPendingSeconds: must be positive".to_owned());
        }
        let election = &self.leader_election;
        if let Some(namespace) = &election.namespace {
            for message in names::dns1123_label(namespace) {
                problems.push(format!("kubernetes.leaderElection.namespace: {message}"));
            }
        }
        for message in names::dns1123_subdomain(&election.lease_name) {
            problems.push(format!("kubernetes.leaderElection.leaseName: {message}"));
        }
        if election.lease_duration_seconds < 2 {
            problems.push(
                "kubernetes.leaderElection.leaseDurationSeconds: must be at least 2".to_owned(),
            );
        }
        problems
    }
}

fn object_name<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<ObjectName, D::Error> {
    let text = String::deserialize(deserializer)?;
    ObjectName::from_str(&text).map_err(serde::de::Error::custom)
}

fn default_true() -> bool {
    true
}
fn default_lease_name() -> String {
    "fedingress-agent".to_owned()
}
fn default_lease_seconds() -> u32 {
    15
}
fn default_pending_seconds() -> u64 {
    120
}
