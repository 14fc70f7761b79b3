//! Pure rendering: a plan share → the Kubernetes objects that serve it, per profile.
//!
//! Entry point: [`render_plan`] (a [`ClusterPlan`], the [`RenderSettings`] of the agent
//! config, and what the cluster holds through [`ClusterFacts`]) → [`PlanRender`]: per
//! share the desired objects, which object serves which rule ([`RuleTarget`]) and the
//! rules that cannot be rendered ([`RuleError`]); plus the objects shared by every share
//! (the `nginx-configmap` profile's ConfigMaps). No I/O happens here and no kube client
//! is used: the objects are plain k8s-openapi types, applied elsewhere with server-side
//! apply under [`FIELD_MANAGER`].
//!
//! Submodules, one per kind of rule:
//! - [`http`]: HTTP and HTTPS rules → one `networking.k8s.io/v1` Ingress per share.
//! - [`l4`]: TCP, UDP and TLS passthrough rules → `Service type=LoadBalancer` per
//!   profile (mixed, aws, gcp, azure, metallb).
//! - [`nginx`]: the same rules → entries of ingress-nginx's `tcp-services` /
//!   `udp-services` ConfigMaps (profile `nginx-configmap`).
//! - [`names`]: object names and label values (DNS-1035 labels, stable hash suffixes).
//! - [`pool`]: the plan's pool provisions → each pool's workload (ConfigMap, Deployment,
//!   PodDisruptionBudget) in the agent's own namespace.
//!
//! # Guarantees
//!
//! - Every rule of every share either renders (and has a [`RuleTarget`]) or has a
//!   [`RuleError`] saying why; an HTTP rule may have both (one path conflicts, the others
//!   render).
//! - Output is deterministic: objects, ports, paths, map keys, targets and errors are
//!   sorted, so server-side apply patches are stable.
//! - Per-share objects live in the FederatedIngress's namespace (namespaces are never
//!   created), carry the labels [`MANAGED_BY_LABEL`]`=`[`MANAGED_BY`] and
//!   [`INGRESS_LABEL`]`=<namespace>.<name>` ([`ingress_label_value`]) and the annotation
//!   [`UID_ANNOTATION`]`=<uid>`. The share's cluster override annotations go on every
//!   object rendered for that share (Ingress and Services; not on the shared ConfigMaps);
//!   [`RenderSettings::service_annotations`] go on every LoadBalancer Service. When keys
//!   collide: profile annotations < settings' service annotations < override
//!   annotations < the fedingress annotation.
//!
//! # Assumptions
//!
//! Shares come from the hub and were validated there; anything validation should have
//! caught but did not (a TCP rule without a port, say) becomes a rule error, never a
//! panic.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use fedingress_api::plan::{ClusterPlan, IngressKey, IngressShare, RuleError};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::config::kubernetes::{ObjectName, Profile};

pub mod http;
pub mod l4;
pub mod names;
pub mod nginx;
pub mod pool;

pub use names::ingress_label_value;

/// The server-side apply field manager of every object the agent writes.
pub const FIELD_MANAGER: &str = "fedingress-agent";
/// Label marking objects the agent owns (and may delete).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "fedingress";
/// Label naming the FederatedIngress an object serves: `<namespace>.<name>`
/// ([`ingress_label_value`]; shortened with a hash when longer than a label value may be).
pub const INGRESS_LABEL: &str = "fedingress.io/ingress";
/// Which agent owns the object (`kubernetes.ownerId`, default the cluster's name): two
/// agents writing to one member cluster — two federations, say — never take or delete
/// each other's objects.
pub const OWNER_LABEL: &str = "fedingress.io/owner";
/// Annotation with the `metadata.uid` of the FederatedIngress an object serves.
pub const UID_ANNOTATION: &str = "fedingress.io/ingress-uid";

/// The kinds of object the agent renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Ingress,
    Service,
    ConfigMap,
    /// A pool's workload ([`pool`]).
    Deployment,
    /// A pool's disruption budget ([`pool`]).
    PodDisruptionBudget,
}

impl Kind {
    /// `Ingress`, `Service`, `ConfigMap`, `Deployment`, `PodDisruptionBudget`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ingress => "Ingress",
            Kind::Service => "Service",
            Kind::ConfigMap => "ConfigMap",
            Kind::Deployment => "Deployment",
            Kind::PodDisruptionBudget => "PodDisruptionBudget",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One object: kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The Service `name`.
    pub fn service(name: &ObjectName) -> Self {
        ObjectRef::new(Kind::Service, &name.namespace, &name.name)
    }
}

impl fmt::Display for ObjectRef {
    /// `Service default/fedingress-shop-mysql`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the agent config says about rendering (its `kubernetes:` section).
#[derive(Clone, Debug, PartialEq)]
pub struct RenderSettings {
    pub profile: Profile,
    /// The Ingress class when the share's override names none; none: omitted.
    pub ingress_class_name: Option<String>,
    /// gcp: the reserved static IP every split Service asks for; metallb: the IP to
    /// request; azure: the public IP to share. One IP for the whole cluster: every L4
    /// port of every share must then be distinct (later shares get rule errors).
    pub load_balancer_ip: Option<IpAddr>,
    /// metallb: the `metallb.io/allow-shared-ip` key of every Service (the whole cluster
    /// may share one IP). Default: one key per share, or `fedingress` with
    /// `load_balancer_ip`.
    pub metallb_sharing_key: Option<String>,
    /// Put on every LoadBalancer Service (an internal load balancer, say).
    pub service_annotations: BTreeMap<String, String>,
    /// nginx-configmap: the ConfigMap ingress-nginx reads with `--tcp-services-configmap`
    /// (owned by the agent, whole).
    pub nginx_tcp_services: Option<ObjectName>,
    /// nginx-configmap: the ConfigMap read with `--udp-services-configmap`.
    pub nginx_udp_services: Option<ObjectName>,
    /// The ingress controller's Service (nginx-configmap: where L4 rules are served).
    pub ingress_controller: Option<ObjectName>,
    /// The [`OWNER_LABEL`] value of every object (none: no owner label).
    pub owner: Option<String>,
}

impl Default for RenderSettings {
    /// Profile `mixed`, nothing else set.
    fn default() -> Self {
        RenderSettings::new(Profile::Mixed)
    }
}

impl RenderSettings {
    /// Settings of `profile` with nothing else set.
    pub fn new(profile: Profile) -> Self {
        RenderSettings {
            profile,
            ingress_class_name: None,
            load_balancer_ip: None,
            metallb_sharing_key: None,
            service_annotations: BTreeMap::new(),
            nginx_tcp_services: None,
            nginx_udp_services: None,
            ingress_controller: None,
            owner: None,
        }
    }

    /// The labels every rendered object carries.
    fn ownership_labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned())]);
        if let Some(owner) = &self.owner {
            labels.insert(OWNER_LABEL.to_owned(), owner.clone());
        }
        labels
    }
}

/// A backend (or ingress-controller) Service as the member cluster has it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceFacts {
    pub selector: Option<BTreeMap<String, String>>,
    pub ports: Vec<ServicePort>,
}

impl ServiceFacts {
    /// The facts of `service` as read from the cluster.
    pub fn of(service: &Service) -> Self {
        let spec = service.spec.as_ref();
        ServiceFacts {
            selector: spec.and_then(|s| s.selector.clone()),
            ports: spec.and_then(|s| s.ports.clone()).unwrap_or_default(),
        }
    }
}

/// What rendering needs to know about the member cluster.
pub trait ClusterFacts {
    /// The Service `namespace/name`, if the cluster has it.
    fn service(&self, namespace: &str, name: &str) -> Option<ServiceFacts>;
}

/// Facts from a fixed table (tests, dry runs).
impl ClusterFacts for BTreeMap<ObjectName, ServiceFacts> {
    fn service(&self, namespace: &str, name: &str) -> Option<ServiceFacts> {
        self.get(&ObjectName::new(namespace, name)).cloned()
    }
}

/// One object to apply.
#[derive(Clone, Debug, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a plan renders a few objects per share, all kept at once; boxes would only add indirection"
)]
pub enum Desired {
    Ingress(Ingress),
    Service(Service),
    ConfigMap(ConfigMap),
    Deployment(Deployment),
    PodDisruptionBudget(PodDisruptionBudget),
}

impl Desired {
    pub fn object_ref(&self) -> ObjectRef {
        let (kind, meta) = match self {
            Desired::Ingress(o) => (Kind::Ingress, &o.metadata),
            Desired::Service(o) => (Kind::Service, &o.metadata),
            Desired::ConfigMap(o) => (Kind::ConfigMap, &o.metadata),
            Desired::Deployment(o) => (Kind::Deployment, &o.metadata),
            Desired::PodDisruptionBudget(o) => (Kind::PodDisruptionBudget, &o.metadata),
        };
        ObjectRef::new(
            kind,
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Desired::Ingress(o) => &o.metadata,
            Desired::Service(o) => &o.metadata,
            Desired::ConfigMap(o) => &o.metadata,
            Desired::Deployment(o) => &o.metadata,
            Desired::PodDisruptionBudget(o) => &o.metadata,
        }
    }

    /// The object as YAML (golden files, logs).
    ///
    /// # Errors
    /// Never for these types; the serializer's error is passed on.
    pub fn to_yaml(&self) -> Result<String, yaml_serde::Error> {
        match self {
            Desired::Ingress(o) => yaml_serde::to_string(o),
            Desired::Service(o) => yaml_serde::to_string(o),
            Desired::ConfigMap(o) => yaml_serde::to_string(o),
            Desired::Deployment(o) => yaml_serde::to_string(o),
            Desired::PodDisruptionBudget(o) => yaml_serde::to_string(o),
        }
    }
}

/// The object whose `status.loadBalancer.ingress` gives rule `rule`'s addresses.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleTarget {
    /// Index into the share's `rules`.
    pub rule: u32,
    pub object: ObjectRef,
}

/// One share rendered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareRender {
    /// The share's own objects: its Ingress first, then its Services by name.
    pub objects: Vec<Desired>,
    /// Rules that rendered, by rule index.
    pub targets: Vec<RuleTarget>,
    /// Rules (or paths of HTTP rules) that cannot be rendered, by rule index.
    pub errors: Vec<RuleError>,
}

/// A whole plan rendered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanRender {
    pub shares: BTreeMap<IngressKey, ShareRender>,
    /// Objects serving several shares: the nginx-configmap profile's ConfigMaps, rendered
    /// whole from the whole plan (empty when no rule uses them).
    pub shared: Vec<Desired>,
}

impl PlanRender {
    /// Every object to apply: each share's, then the shared ones.
    pub fn objects(&self) -> impl Iterator<Item = &Desired> {
        self.shares
            .values()
            .flat_map(|s| s.objects.iter())
            .chain(self.shared.iter())
    }
}

/// Renders every share of `plan` (see the module docs for the guarantees). Shares are
/// rendered in key order: where shares compete for one port (the nginx-configmap
/// profile's ConfigMaps, a cluster-wide load balancer IP) the first in key order keeps
/// it and the others get rule errors.
pub fn render_plan(
    plan: &ClusterPlan,
    settings: &RenderSettings,
    facts: &dyn ClusterFacts,
) -> PlanRender {
    let mut out = PlanRender::default();
    let mut cluster_ports = l4::ClusterPorts::default();
    let mut nginx_maps = nginx::ServicesMaps::default();
    for (key, share) in plan.ingresses.iter() {
        let ctx = ShareContext {
            share,
            settings,
            facts,
        };
        let mut render = ShareRender::default();
        http::render(&ctx, &mut render);
        match settings.profile {
            Profile::NginxConfigmap => nginx::render(&ctx, &mut nginx_maps, &mut render),
            _ => l4::render(&ctx, &mut cluster_ports, &mut render),
        }
        render.targets.sort();
        render.errors.sort_by_key(|e| e.rule);
        out.shares.insert(key.clone(), render);
    }
    if settings.profile == Profile::NginxConfigmap {
        out.shared = nginx_maps.into_objects(settings);
    }
    out
}

/// One share being rendered, and what it is rendered with.
pub(crate) struct ShareContext<'a> {
    pub share: &'a IngressShare,
    pub settings: &'a RenderSettings,
    pub facts: &'a dyn ClusterFacts,
}

impl ShareContext<'_> {
    /// The FederatedIngress namespace: where every per-share object lives.
    pub fn namespace(&self) -> &str {
        &self.share.key.namespace
    }

    /// Metadata of an object rendered for this share: its name and namespace, the
    /// ownership labels, and the annotations in rising precedence: `own` (the
    /// profile's), for LoadBalancer Services the settings' `service_annotations`, the
    /// cluster override's annotations, and [`UID_ANNOTATION`].
    pub fn metadata(
        &self,
        name: String,
        own: BTreeMap<String, String>,
        load_balancer: bool,
    ) -> ObjectMeta {
        let mut annotations = own;
        if load_balancer {
            annotations.extend(self.settings.service_annotations.clone());
        }
        if let Some(over) = &self.share.cluster_override {
            annotations.extend(over.annotations.clone());
        }
        annotations.insert(UID_ANNOTATION.to_owned(), self.share.uid.clone());
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace().to_owned()),
            labels: Some({
                let mut labels = self.settings.ownership_labels();
                labels.insert(
                    INGRESS_LABEL.to_owned(),
                    ingress_label_value(&self.share.key),
                );
                labels
            }),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }
    }

    /// A rule error of this share.
    pub fn error(&self, rule: usize, message: impl Into<String>) -> RuleError {
        RuleError {
            ingress: self.share.key.clone(),
            rule: rule_index(rule),
            message: message.into(),
        }
    }
}

/// A rule's index as the protocol carries it (plans never hold 2^32 rules).
pub(crate) fn rule_index(rule: usize) -> u32 {
    u32::try_from(rule).unwrap_or(u32::MAX)
}

/// Labels of the objects shared by every share (only the ownership labels).
pub(crate) fn shared_metadata(name: &ObjectName, settings: &RenderSettings) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.name.clone()),
        namespace: Some(name.namespace.clone()),
        labels: Some(settings.ownership_labels()),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests;
