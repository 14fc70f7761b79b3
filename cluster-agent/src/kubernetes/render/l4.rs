//! TCP, UDP and TLS passthrough rules → `Service type=LoadBalancer` (every profile but
//! nginx-configmap), one unit per KEP-1435 / blog row.
//!
//! Shared by every LB profile:
//! - A TLS passthrough rule is a TCP port: the load balancer forwards the encrypted
//!   stream, the backend terminates. An L4 load balancer cannot route by SNI, so one
//!   port of one share carries one host; a second host on that port is a rule error. A
//!   TLS rule that terminates is a rule error: a Kubernetes Secret cannot be put on an L4
//!   load balancer.
//! - The LB Service selects the backend's pods: its `selector` is copied from the
//!   backend Service, and each port's `targetPort` from the backend Service's port of
//!   the same number and protocol (its `targetPort`, else its `port`). A backend Service
//!   that is missing, has no selector (hand-made Endpoints), or lacks the port is a rule
//!   error naming it.
//! - One Service per backend Service (one selector each), named by
//!   [`super::names::service_name`]; ports named `tcp-3306` / `udp-3306`, sorted.
//!
//! Per profile:
//! - `mixed`: one Service with TCP and UDP ports (Kubernetes ≥ 1.26,
//!   `MixedProtocolLBService` GA; the load balancer implementation must support it).
//! - `aws`: the AWS Load Balancer Controller's NLB: `spec.loadBalancerClass:
//!   service.k8s.aws/nlb` (controller ≥ v2.4 on Kubernetes ≥ 1.22), `ip` targets,
//!   internet-facing; where one port has both TCP and UDP, the `TCP_UDP` listener
//!   annotation (controller ≥ v2.13). Annotations from the controller's docs:
//!   <https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/annotations/>,
//!   <https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/nlb/>.
//! - `gcp`: split `-tcp` and `-udp` Services (a GCE forwarding rule carries one
//!   protocol); with `loadBalancerIP` set both ask for that reserved static IP in
//!   `spec.loadBalancerIP` and share it, else each gets its own address and the
//!   per-rule addresses keep DNS right. KEP-1435 "GCE";
//!   <https://cloud.google.com/kubernetes-engine/docs/how-to/mixed-protocol-lb>.
//! - `azure`: one Service with both protocols; the old
//!   `service.beta.kubernetes.io/azure-load-balancer-mixed-protocols` annotation was
//!   deleted in Kubernetes 1.21 (kubernetes/kubernetes#97096) in favour of
//!   `MixedProtocolLBService`. With `loadBalancerIP`, the
//!   `service.beta.kubernetes.io/azure-load-balancer-ipv4` (or `-ipv6`) annotation
//!   makes every Service share that public IP (cloud-provider-azure ≥ v1.20:
//!   <https://kubernetes-sigs.github.io/cloud-provider-azure/topics/shared-ip/>,
//!   <https://kubernetes-sigs.github.io/cloud-provider-azure/topics/loadbalancer/>).
//! - `metallb`: split `-tcp` and `-udp` Services with one `metallb.io/allow-shared-ip`
//!   key and `externalTrafficPolicy: Cluster` (MetalLB shares an IP between Services
//!   with the same key, disjoint ports, and both `Cluster` policy or identical
//!   selectors — Services of different backends have different selectors); with
//!   `loadBalancerIP`, `metallb.io/loadBalancerIPs` pins the IP. The `metallb.io/`
//!   prefix replaced `metallb.universe.tf/` in MetalLB v0.14.9 (the old one still
//!   works, with a deprecation warning): <https://metallb.io/usage/#ip-address-sharing>.
//!
//! One IP for the whole cluster (`loadBalancerIP` with gcp, azure or metallb): every
//! Service of every share asks for it, so a protocol and port can be used once in the
//! cluster; later shares (in key order) get a rule error for a taken port.

use std::collections::BTreeMap;

use fedingress_api::ingress::{Backend, Protocol, TlsMode};
use fedingress_api::plan::IngressKey;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    Desired, Kind, ObjectRef, RuleTarget, ServiceFacts, ShareContext, ShareRender, names,
    rule_index,
};
use crate::config::kubernetes::Profile;

/// `spec.loadBalancerClass` of the AWS Load Balancer Controller's NLBs.
pub const AWS_NLB_CLASS: &str = "service.k8s.aws/nlb";
/// AWS: `ip` (pods) or `instance` (node ports) targets.
pub const AWS_NLB_TARGET_TYPE: &str =
    "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type";
/// AWS: `internet-facing` or `internal` (the controller's default).
pub const AWS_SCHEME: &str = "service.beta.kubernetes.io/aws-load-balancer-scheme";
/// AWS: `"true"` makes a port with TCP and UDP one `TCP_UDP` listener (controller ≥ v2.13).
pub const AWS_TCP_UDP_LISTENER: &str =
    "service.beta.kubernetes.io/aws-load-balancer-enable-tcp-udp-listener";
/// Azure: the IPv4 address of the load balancer (replaces `spec.loadBalancerIP`).
pub const AZURE_IPV4: &str = "service.beta.kubernetes.io/azure-load-balancer-ipv4";
/// Azure: the IPv6 address of the load balancer.
pub const AZURE_IPV6: &str = "service.beta.kubernetes.io/azure-load-balancer-ipv6";
/// MetalLB: Services with the same key may share an IP.
pub const METALLB_SHARING_KEY: &str = "metallb.io/allow-shared-ip";
/// MetalLB: the IP(s) to assign.
pub const METALLB_IPS: &str = "metallb.io/loadBalancerIPs";

/// The transport of an L4 port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    /// `TCP`, `UDP`: a Service port's `protocol`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP",
            Transport::Udp => "UDP",
        }
    }

    /// `tcp`, `udp`: in port and Service names.
    pub fn lower(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }

    /// Whether a Service port speaks this transport (no `protocol` means TCP).
    pub fn matches(self, port: &ServicePort) -> bool {
        port.protocol.as_deref().unwrap_or("TCP") == self.as_str()
    }
}

/// One L4 rule of a share: a port of one transport forwarded to a backend.
pub(super) struct L4Rule<'a> {
    pub rule: usize,
    pub transport: Transport,
    pub port: i32,
    pub backend: &'a Backend,
}

/// The share's TCP, UDP and TLS rules as L4 ports; rules that cannot be one get their
/// error in `out`. `what` names the thing that cannot route by SNI ("a LoadBalancer
/// Service").
pub(super) fn collect<'a>(
    ctx: &ShareContext<'a>,
    what: &str,
    out: &mut ShareRender,
) -> Vec<L4Rule<'a>> {
    let mut rules: Vec<L4Rule<'a>> = Vec::new();
    // (transport, port) → first rule there; TLS port → (host, rule)
    let mut taken: BTreeMap<(Transport, i32), usize> = BTreeMap::new();
    let mut sni: BTreeMap<i32, (&str, usize)> = BTreeMap::new();
    for (index, rule) in ctx.share.rules.iter().enumerate() {
        let transport = match (rule.protocol, rule.effective_tls_mode()) {
            (Protocol::Tcp, _) => Transport::Tcp,
            (Protocol::Udp, _) => Transport::Udp,
            (Protocol::Tls, Some(TlsMode::Passthrough)) => Transport::Tcp,
            (Protocol::Tls, _) => {
                out.errors.push(ctx.error(
                    index,
                    "TLS termination is not available with the kubernetes driver: a Kubernetes Secret cannot be put on an L4 load balancer (use an HTTPS rule, tlsMode: Passthrough with the backend terminating, or the standalone driver)",
                ));
                continue;
            }
            (Protocol::Http | Protocol::Https, _) => continue,
        };
        let Some(port) = rule.effective_port() else {
            out.errors
                .push(ctx.error(index, format!("the {} rule has no port", rule.protocol)));
            continue;
        };
        let Some(backend) = rule.backend.as_ref() else {
            out.errors
                .push(ctx.error(index, format!("the {} rule has no backend", rule.protocol)));
            continue;
        };
        if rule.protocol == Protocol::Tls {
            let host = rule.host().unwrap_or("");
            match sni.get(&port) {
                Some((other, first)) if *other != host => {
                    out.errors.push(ctx.error(
                        index,
                        format!(
                            "{what} cannot route by SNI: port {port} already passes {other} through (rule {first}); give {host} a port of its own"
                        ),
                    ));
                    continue;
                }
                Some(_) => {}
                None => {
                    sni.insert(port, (host, index));
                }
            }
        }
        if let Some(first) = taken.get(&(transport, port)) {
            out.errors.push(ctx.error(
                index,
                format!(
                    "port {port}/{} is already used by rule {first}",
                    transport.as_str()
                ),
            ));
            continue;
        }
        taken.insert((transport, port), index);
        rules.push(L4Rule {
            rule: index,
            transport,
            port,
            backend,
        });
    }
    rules
}

/// The port of `facts` with `number` and `transport`, or why there is none (naming the
/// Service `described`).
pub(super) fn service_port<'f>(
    facts: &'f ServiceFacts,
    described: &str,
    transport: Transport,
    number: i32,
) -> Result<&'f ServicePort, String> {
    if let Some(port) = facts
        .ports
        .iter()
        .find(|p| p.port == number && transport.matches(p))
    {
        return Ok(port);
    }
    let others: Vec<&str> = facts
        .ports
        .iter()
        .filter(|p| p.port == number)
        .map(|p| p.protocol.as_deref().unwrap_or("TCP"))
        .collect();
    Err(if others.is_empty() {
        format!("{described} has no port {number}")
    } else {
        format!(
            "{described} has no {} port {number} (only {})",
            transport.as_str(),
            others.join(", ")
        )
    })
}

/// Protocols and ports held cluster-wide when every Service asks for one IP.
#[derive(Default)]
pub(super) struct ClusterPorts {
    taken: BTreeMap<(Transport, i32), (IngressKey, usize)>,
}

/// A port of a Service being built.
struct PortEntry {
    rule: usize,
    transport: Transport,
    port: i32,
    target: IntOrString,
}

/// A Service being built: one backend (and one transport when split).
struct Group<'f> {
    backend: &'f str,
    transport: Option<Transport>,
    selector: BTreeMap<String, String>,
    ports: Vec<PortEntry>,
}

/// Renders the share's L4 rules as LoadBalancer Services per the profile.
pub(super) fn render(ctx: &ShareContext<'_>, cluster: &mut ClusterPorts, out: &mut ShareRender) {
    let settings = ctx.settings;
    let profile = settings.profile;
    let shared_ip = settings
        .load_balancer_ip
        .filter(|_| profile.uses_load_balancer_ip());
    let rules = collect(ctx, "a LoadBalancer Service", out);
    let mut groups: BTreeMap<(String, Option<Transport>), Group<'_>> = BTreeMap::new();
    for l4 in rules {
        let service = &l4.backend.service;
        let described = format!("backend Service {}/{service}", ctx.namespace());
        let Some(facts) = ctx.facts.service(ctx.namespace(), service) else {
            out.errors.push(ctx.error(
                l4.rule,
                format!("{described} does not exist in this cluster"),
            ));
            continue;
        };
        let Some(selector) = facts.selector.clone().filter(|s| !s.is_empty()) else {
            out.errors.push(ctx.error(
                l4.rule,
                format!(
                    "{described} has no selector: a LoadBalancer Service can only forward to the pods it selects"
                ),
            ));
            continue;
        };
        let target = match service_port(&facts, &described, l4.transport, l4.backend.port) {
            Ok(port) => port
                .target_port
                .clone()
                .unwrap_or(IntOrString::Int(port.port)),
            Err(message) => {
                out.errors.push(ctx.error(l4.rule, message));
                continue;
            }
        };
        if let Some(ip) = shared_ip {
            let key = (l4.transport, l4.port);
            if let Some((holder, rule)) = cluster.taken.get(&key)
                && holder != &ctx.share.key
            {
                out.errors.push(ctx.error(
                    l4.rule,
                    format!(
                        "port {}/{} of the cluster's load balancer IP {ip} is already used by {holder} (rule {rule})",
                        l4.port,
                        l4.transport.as_str()
                    ),
                ));
                continue;
            }
            cluster.taken.insert(key, (ctx.share.key.clone(), l4.rule));
        }
        let transport = profile.splits_protocols().then_some(l4.transport);
        groups
            .entry((service.clone(), transport))
            .or_insert_with(|| Group {
                backend: service,
                transport,
                selector,
                ports: Vec::new(),
            })
            .ports
            .push(PortEntry {
                rule: l4.rule,
                transport: l4.transport,
                port: l4.port,
                target,
            });
    }
    let mut services: Vec<Service> = Vec::new();
    for group in groups.into_values() {
        let name = names::service_name(
            &ctx.share.key.name,
            group.backend,
            group.transport.map(Transport::lower),
        );
        let object = ObjectRef::new(Kind::Service, ctx.namespace(), &name);
        out.targets.extend(group.ports.iter().map(|p| RuleTarget {
            rule: rule_index(p.rule),
            object: object.clone(),
        }));
        services.push(service(ctx, name, group));
    }
    services.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out.objects
        .extend(services.into_iter().map(Desired::Service));
}

/// The Service of one group, with the profile's fields and annotations.
fn service(ctx: &ShareContext<'_>, name: String, mut group: Group<'_>) -> Service {
    let settings = ctx.settings;
    group.ports.sort_by_key(|p| (p.port, p.transport));
    let mut annotations = BTreeMap::new();
    let mut spec = ServiceSpec {
        type_: Some("LoadBalancer".to_owned()),
        selector: Some(group.selector),
        ..ServiceSpec::default()
    };
    let ip = settings.load_balancer_ip;
    match settings.profile {
        Profile::Mixed | Profile::NginxConfigmap => {}
        Profile::Aws => {
            spec.load_balancer_class = Some(AWS_NLB_CLASS.to_owned());
            annotations.insert(AWS_NLB_TARGET_TYPE.to_owned(), "ip".to_owned());
            annotations.insert(AWS_SCHEME.to_owned(), "internet-facing".to_owned());
            let both = group.ports.windows(2).any(|w| w[0].port == w[1].port);
            if both {
                annotations.insert(AWS_TCP_UDP_LISTENER.to_owned(), "true".to_owned());
            }
        }
        Profile::Gcp => spec.load_balancer_ip = ip.map(|ip| ip.to_string()),
        Profile::Azure => {
            if let Some(ip) = ip {
                let key = if ip.is_ipv4() { AZURE_IPV4 } else { AZURE_IPV6 };
                annotations.insert(key.to_owned(), ip.to_string());
            }
        }
        Profile::Metallb => {
            let key = match (&settings.metallb_sharing_key, ip) {
                (Some(key), _) => key.clone(),
                (None, Some(_)) => "fedingress".to_owned(),
                (None, None) => format!("fedingress:{}", ctx.share.key),
            };
            annotations.insert(METALLB_SHARING_KEY.to_owned(), key);
            if let Some(ip) = ip {
                annotations.insert(METALLB_IPS.to_owned(), ip.to_string());
            }
            spec.external_traffic_policy = Some("Cluster".to_owned());
        }
    }
    spec.ports = Some(
        group
            .ports
            .into_iter()
            .map(|p| ServicePort {
                name: Some(format!("{}-{}", p.transport.lower(), p.port)),
                protocol: Some(p.transport.as_str().to_owned()),
                port: p.port,
                target_port: Some(p.target),
                ..ServicePort::default()
            })
            .collect(),
    );
    Service {
        metadata: ctx.metadata(name, annotations, true),
        spec: Some(spec),
        status: None,
    }
}
