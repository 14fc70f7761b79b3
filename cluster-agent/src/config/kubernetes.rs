//! The `kubernetes:` section of the agent config (driver `kubernetes`), and two types of
//! its values that the renderer ([`crate::kubernetes::render`]) takes as they are: the
//! rendering [`Profile`] and [`ObjectName`] (`namespace/name`).
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
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use fedingress_api::capability;
use fedingress_api::cluster::Provider;
use fedingress_api::names;
use serde::{Deserialize, Serialize};

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

/// How L4 rules (TCP, UDP, TLS passthrough) become Kubernetes objects: one rendering per
/// row of KEP-1435's cloud survey and the bare TCP/UDP blog, plus the L4 proposal's
/// ingress-nginx ConfigMaps. HTTP and HTTPS rules become an Ingress in every profile.
/// See docs/cluster-agent.md ("kubernetes driver: rendering profiles").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// One LoadBalancer Service per backend carrying TCP and UDP ports (Kubernetes ≥ 1.26,
    /// `MixedProtocolLBService` GA) and a load balancer implementation that supports it.
    Mixed,
    /// AWS Load Balancer Controller NLB (`loadBalancerClass: service.k8s.aws/nlb`): TCP
    /// and UDP on one NLB; a `TCP_UDP` listener where a port has both.
    Aws,
    /// GKE / GCE: split TCP and UDP Services that share a reserved static IP
    /// (`spec.loadBalancerIP`) when one is configured.
    Gcp,
    /// cloud-provider-azure: one Service with both protocols (the old mixed-protocol
    /// annotation was removed in favour of `MixedProtocolLBService`).
    Azure,
    /// MetalLB: split TCP and UDP Services sharing an IP through
    /// `metallb.io/allow-shared-ip` (KEP-1435's "merging services" alternative).
    Metallb,
    /// ingress-nginx `tcp-services` / `udp-services` ConfigMaps owned by the agent; the
    /// ingress controller's own Service carries the ports.
    NginxConfigmap,
}

impl Profile {
    /// Every profile, in declaration order.
    pub const ALL: [Profile; 6] = [
        Profile::Mixed,
        Profile::Aws,
        Profile::Gcp,
        Profile::Azure,
        Profile::Metallb,
        Profile::NginxConfigmap,
    ];

    /// The profile for a Cluster's `spec.provider` (`profile: auto`): aws → aws,
    /// gcp → gcp, azure → azure, onprem → metallb, other → mixed.
    pub fn from_provider(provider: Provider) -> Profile {
        match provider {
            Provider::Aws => Profile::Aws,
            Provider::Gcp => Profile::Gcp,
            Provider::Azure => Profile::Azure,
            Provider::OnPrem => Profile::Metallb,
            Provider::Other => Profile::Mixed,
        }
    }

    /// The name as written in the config (`nginx-configmap`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Mixed => "mixed",
            Profile::Aws => "aws",
            Profile::Gcp => "gcp",
            Profile::Azure => "azure",
            Profile::Metallb => "metallb",
            Profile::NginxConfigmap => "nginx-configmap",
        }
    }

    /// What the profile renders, in the vocabulary of [`fedingress_api::capability`]
    /// (sent in `Hello`): HTTP and HTTPS (an Ingress), TCP, UDP and TLS passthrough (a
    /// TCP port). No profile terminates TLS for a TLS rule: a Kubernetes Secret cannot be
    /// put on an L4 load balancer.
    pub fn capabilities(self) -> Vec<String> {
        [
            capability::HTTP,
            capability::HTTPS,
            capability::TCP,
            capability::UDP,
            capability::TLS_PASSTHROUGH,
        ]
        .iter()
        .map(|c| (*c).to_owned())
        .collect()
    }

    /// Whether [`KubernetesConfig::load_balancer_ip`] means anything to this profile (gcp:
    /// `spec.loadBalancerIP`; metallb: `metallb.io/loadBalancerIPs`; azure:
    /// `service.beta.kubernetes.io/azure-load-balancer-ipv4`/`-ipv6`). The other
    /// profiles ignore it; a config check may reject it there.
    pub fn uses_load_balancer_ip(self) -> bool {
        matches!(self, Profile::Gcp | Profile::Metallb | Profile::Azure)
    }

    /// Whether TCP and UDP ports of one backend go to separate Services (`-tcp`, `-udp`).
    pub fn splits_protocols(self) -> bool {
        matches!(self, Profile::Gcp | Profile::Metallb)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A namespaced object's `namespace/name`, as written in the agent config
/// (`ingress-nginx/tcp-services`); (de)serialized as that text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct ObjectName {
    pub namespace: String,
    pub name: String,
}

impl ObjectName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectName {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// Text that is not `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not namespace/name")]
pub struct InvalidObjectName(String);

impl FromStr for ObjectName {
    type Err = InvalidObjectName;

    /// `namespace/name`, both non-empty, no further `/`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(ObjectName::new(namespace, name))
            }
            _ => Err(InvalidObjectName(text.to_owned())),
        }
    }
}

impl TryFrom<String> for ObjectName {
    type Error = InvalidObjectName;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<ObjectName> for String {
    fn from(name: ObjectName) -> String {
        name.to_string()
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_follow_providers_and_config_names() {
        let cases = [
            (Provider::Aws, Profile::Aws),
            (Provider::Gcp, Profile::Gcp),
            (Provider::Azure, Profile::Azure),
            (Provider::OnPrem, Profile::Metallb),
            (Provider::Other, Profile::Mixed),
        ];
        for (provider, profile) in cases {
            assert_eq!(Profile::from_provider(provider), profile);
        }
        for profile in Profile::ALL {
            let yaml = yaml_serde::to_string(&profile).unwrap();
            assert_eq!(yaml.trim(), profile.as_str());
            assert_eq!(yaml_serde::from_str::<Profile>(&yaml).unwrap(), profile);
            assert!(!profile.capabilities().iter().any(|c| c == "TLS/Terminate"));
        }
        assert_eq!(Profile::NginxConfigmap.as_str(), "nginx-configmap");
        assert_eq!(
            Profile::Mixed.capabilities(),
            ["HTTP", "HTTPS", "TCP", "UDP", "TLS/Passthrough"]
        );
    }

    #[test]
    fn object_names_parse_namespace_slash_name() {
        let name: ObjectName = "ingress-nginx/tcp-services".parse().unwrap();
        assert_eq!(name, ObjectName::new("ingress-nginx", "tcp-services"));
        assert_eq!(name.to_string(), "ingress-nginx/tcp-services");
        let yaml: ObjectName = yaml_serde::from_str("ingress-nginx/tcp-services").unwrap();
        assert_eq!(yaml, name);
        assert_eq!(
            yaml_serde::to_string(&name).unwrap().trim(),
            "ingress-nginx/tcp-services"
        );
        assert!(yaml_serde::from_str::<ObjectName>("tcp-services").is_err());
        for bad in ["tcp-services", "/x", "x/", "a/b/c", ""] {
            let err = bad.parse::<ObjectName>().unwrap_err();
            assert!(err.to_string().contains("namespace/name"), "{err}");
        }
    }
}
