//! The `FederatedIngress` resource: how one service is exposed across member clusters
//! (namespaced).
//!
//! The spec says which listeners exist ([`IngressRule`]: HTTP/HTTPS hosts and paths, TLS
//! SNI routes, bare TCP/UDP ports), which certificates serve them ([`IngressTls`]),
//! which clusters carry them ([`Placement`], [`ClusterOverride`]) and how clients are
//! steered between clusters ([`Traffic`], [`Strategy`]). The hub writes the status: the
//! per-cluster state, the DNS records it serves, and the `Placed`, `Propagated`,
//! `Healthy`, `DNSReady`, `Ready` and `Servable` conditions.
//!
//! Defaulting happens in two places: decoding fills the unconditional defaults (path `/`,
//! pathType `Prefix`, ttl 30, strategy `RoundRobin`, whenAllUnhealthy `ServeAll`,
//! failbackDelaySeconds 30), and [`Resource::apply_defaults`] the ones that depend on
//! other fields (ports per protocol, `tlsMode`, `overflowThreshold`, `dnsName`).
//! Validation is per object and pure; facts that need other objects show in the status
//! instead: a conflict makes `Placed` False (reason [`REASON_CONFLICT`]), and
//! `failoverOrder` names of clusters the ingress is not placed on are named in the
//! `Placed` message (still True) while routing skips them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster::Address;
use crate::meta::{
    Condition, ObjectMeta, Time, string_enum, validate_annotations, validate_object_meta,
};
use crate::names;
use crate::selector::LabelSelector;
use crate::validation::{FieldError, FieldPath};
use crate::{API_VERSION, Resource};

/// Condition type: the ingress is placed on its clusters (`False` with reason
/// [`REASON_CONFLICT`] when another ingress holds a listener or DNS name it needs). When
/// True, its message also names the `failoverOrder` entries of clusters the ingress is
/// not placed on.
pub const CONDITION_PLACED: &str = "Placed";
/// Condition type: every placed cluster's agent has applied the current generation.
pub const CONDITION_PROPAGATED: &str = "Propagated";
/// Condition type: at least one placed cluster serves it with healthy backends.
pub const CONDITION_HEALTHY: &str = "Healthy";
/// Condition type: DNS records are served and synced to every provider.
pub const CONDITION_DNS_READY: &str = "DNSReady";
/// Condition type: all of the above.
pub const CONDITION_READY: &str = "Ready";
/// Condition reason: another (older) object holds a listener or DNS name this one needs.
pub const REASON_CONFLICT: &str = "Conflict";
/// Condition type: every placed cluster's driver can serve every rule (`False` with
/// reason [`REASON_UNSUPPORTED_RULES`] naming the clusters and rules it cannot; see
/// [`crate::capability`]). Informational: `Ready` does not wait for it.
pub const CONDITION_SERVABLE: &str = "Servable";
/// Condition reason: some placed cluster's driver lacks a capability a rule needs.
pub const REASON_UNSUPPORTED_RULES: &str = "UnsupportedRules";
/// Condition reason: no placed cluster lacks a capability a rule needs.
pub const REASON_ALL_RULES_SERVABLE: &str = "AllRulesServable";

/// Port range of rules and backends.
const PORT_RANGE: std::ops::RangeInclusive<i32> = 1..=65535;
const PORT_MSG: &str = "must be between 1 and 65535";
/// Longest TTL and failback delay: one day.
const ONE_DAY: i32 = 86_400;

/// Default DNS TTL in seconds.
pub const DEFAULT_TTL: i32 = 30;
/// Default delay before traffic moves back to a recovered cluster, in seconds.
pub const DEFAULT_FAILBACK_DELAY_SECONDS: i32 = 30;
/// Default share of capacity beyond which the Overflow strategy spills over.
pub const DEFAULT_OVERFLOW_THRESHOLD: f64 = 0.8;

// ---------------------------------------------------------------------------------------
// Object

/// How one service is exposed across member clusters: listeners, certificates,
/// placement and global traffic steering. Namespaced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedIngress {
    /// `fedingress.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,

    /// `FederatedIngress`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Standard object metadata. The name is a DNS-1123 subdomain.
    #[serde(default)]
    pub metadata: ObjectMeta,

    /// What to expose, where, and how clients are steered.
    #[serde(default)]
    pub spec: FederatedIngressSpec,

    /// What the hub last observed: per-cluster state, DNS records and conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FederatedIngressStatus>,
}

/// What to expose, where, and how clients are steered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedIngressSpec {
    /// Listeners, one per rule, each with an explicit protocol: HTTP and HTTPS rules
    /// route hosts and paths, TLS rules route by SNI on a port, TCP and UDP rules
    /// forward a whole port. TCP and UDP rules may share a port (and address).
    /// At least one rule is required.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub rules: Vec<IngressRule>,

    /// Certificates for HTTPS rules and for TLS rules with `tlsMode: Terminate`: every
    /// such rule's host must be covered by one entry's hosts (exactly or by a `*.`
    /// wildcard).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub tls: Vec<IngressTls>,

    /// Which member clusters carry this ingress. When neither `clusters` nor
    /// `clusterSelector` is given, every schedulable cluster does.
    #[serde(default, skip_serializing_if = "Placement::is_unset")]
    pub placement: Placement,

    /// Per-cluster adjustments of how the ingress is rendered there (one per cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub overrides: Vec<ClusterOverride>,

    /// How clients are steered to clusters through DNS.
    #[serde(default)]
    pub traffic: Traffic,
}

// ---------------------------------------------------------------------------------------
// Rules

string_enum! {
    /// The protocol of a rule's listener.
    pub enum Protocol {
        /// Plain HTTP, routed by host and path (default port 80).
        Http => "HTTP",
        /// HTTP over TLS terminated by the ingress, routed by host and path (default
        /// port 443).
        Https => "HTTPS",
        /// TLS routed by SNI host name, terminated or passed through (default port 443).
        Tls => "TLS",
        /// A bare TCP port.
        Tcp => "TCP",
        /// A bare UDP port.
        Udp => "UDP",
    }
}

impl Protocol {
    /// The port a rule gets when it names none: 80 for HTTP, 443 for HTTPS and TLS,
    /// none for TCP and UDP (they must name one).
    pub const fn default_port(self) -> Option<i32> {
        match self {
            Protocol::Http => Some(80),
            Protocol::Https | Protocol::Tls => Some(443),
            Protocol::Tcp | Protocol::Udp => None,
        }
    }

    /// Whether rules of this protocol route hosts and paths (HTTP, HTTPS).
    pub const fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Https)
    }

    /// Whether rules of this protocol forward a bare port (TCP, UDP).
    pub const fn is_l4(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp)
    }

    /// The transport under the listener: `"udp"` for UDP, `"tcp"` for everything else
    /// (as in SRV records `_<name>._tcp`).
    pub const fn transport(self) -> &'static str {
        match self {
            Protocol::Udp => "udp",
            _ => "tcp",
        }
    }
}

string_enum! {
    /// How an HTTP path matches request paths.
    #[derive(Default)]
    pub enum PathType {
        /// Matches the path and everything below it, element-wise (`/api` matches `/api`
        /// and `/api/v1`, not `/apis`).
        #[default]
        Prefix => "Prefix",
        /// Matches the path exactly.
        Exact => "Exact",
    }
}

string_enum! {
    /// What a TLS rule does with the TLS connection.
    pub enum TlsMode {
        /// The ingress terminates TLS with a certificate from `spec.tls` and forwards
        /// plain TCP to the backend.
        Terminate => "Terminate",
        /// The ingress routes by SNI and forwards the encrypted stream untouched.
        Passthrough => "Passthrough",
    }
}

/// One listener. Which fields apply depends on `protocol`:
///
/// - HTTP and HTTPS: `paths` (required), `host` (optional), `port` (default 80 / 443).
/// - TLS: `host` and `backend` (required), `port` (default 443), `tlsMode` (default
///   `Terminate`).
/// - TCP and UDP: `port` and `backend` (required), `name` (optional).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    /// Protocol of the listener: `HTTP`, `HTTPS`, `TLS`, `TCP` or `UDP`
    /// (case-insensitive). Required.
    pub protocol: Protocol,

    /// Host name the rule answers for (HTTP, HTTPS: the Host header; TLS: the SNI name,
    /// required). A lower-case DNS name; `*.example.com` matches one extra leftmost
    /// label. Not allowed on TCP and UDP rules. Also the default `traffic.dnsName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,

    /// Port of the listener, 1-65535. Defaults to 80 for HTTP and 443 for HTTPS and TLS;
    /// required for TCP and UDP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,

    /// Service name of a TCP or UDP rule (RFC 6335: up to 15 lower-case letters, digits
    /// and `-`, e.g. `mysql`); publishes an SRV record `_<name>._tcp.<dnsName>` (or
    /// `_udp`). Only on TCP and UDP rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Paths routed by an HTTP or HTTPS rule, each to a backend; at least one. Only on
    /// HTTP and HTTPS rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<HttpPath>,

    /// What a TLS rule does with TLS: `Terminate` (default; needs a certificate in
    /// `spec.tls`) or `Passthrough`. Only on TLS rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_mode: Option<TlsMode>,

    /// Where a TLS, TCP or UDP rule forwards connections. Required on those; HTTP and
    /// HTTPS rules name a backend per path instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
}

impl IngressRule {
    /// A rule of `protocol` with nothing else set.
    pub fn new(protocol: Protocol) -> Self {
        IngressRule {
            protocol,
            host: None,
            port: None,
            name: None,
            paths: Vec::new(),
            tls_mode: None,
            backend: None,
        }
    }

    /// The port, or the protocol's default when none is set.
    pub fn effective_port(&self) -> Option<i32> {
        self.port.or(self.protocol.default_port())
    }

    /// For TLS rules the TLS mode (default `Terminate`); `None` for other protocols.
    pub fn effective_tls_mode(&self) -> Option<TlsMode> {
        (self.protocol == Protocol::Tls).then(|| self.tls_mode.unwrap_or(TlsMode::Terminate))
    }

    /// Whether the ingress terminates TLS for this rule (HTTPS, and TLS in `Terminate`
    /// mode), and so needs a certificate from `spec.tls`.
    pub fn terminates_tls(&self) -> bool {
        self.protocol == Protocol::Https || self.effective_tls_mode() == Some(TlsMode::Terminate)
    }

    /// The host, treating an empty string as none.
    pub fn host(&self) -> Option<&str> {
        self.host.as_deref().filter(|h| !h.is_empty())
    }
}

fn default_path() -> String {
    "/".to_owned()
}

/// One path of an HTTP or HTTPS rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpPath {
    /// Request path to match; must start with `/`. Default `/`.
    #[serde(default = "default_path")]
    pub path: String,

    /// How `path` matches: `Prefix` (default; element-wise prefix) or `Exact`.
    #[serde(default)]
    pub path_type: PathType,

    /// Where matching requests go.
    #[serde(default)]
    pub backend: Backend,
}

impl Default for HttpPath {
    fn default() -> Self {
        HttpPath {
            path: default_path(),
            path_type: PathType::Prefix,
            backend: Backend::default(),
        }
    }
}

/// A service in the member cluster that receives the traffic (a Kubernetes Service, or
/// for the standalone driver a service from the agent's config).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backend {
    /// Name of the service (a DNS-1123 label). Required.
    #[serde(default)]
    pub service: String,

    /// Port of the service, 1-65535. Required.
    #[serde(default)]
    pub port: i32,
}

impl Backend {
    /// A backend on `service`:`port`.
    pub fn new(service: impl Into<String>, port: i32) -> Self {
        Backend {
            service: service.into(),
            port,
        }
    }

    fn validate(&self, path: &FieldPath, errs: &mut Vec<FieldError>) {
        if self.service.is_empty() {
            errs.push(FieldError::required(path.child("service"), ""));
        } else {
            for msg in names::dns1123_label(&self.service) {
                errs.push(FieldError::invalid(
                    path.child("service"),
                    &self.service,
                    msg,
                ));
            }
        }
        if !PORT_RANGE.contains(&self.port) {
            errs.push(FieldError::invalid(path.child("port"), self.port, PORT_MSG));
        }
    }
}

/// A certificate and the hosts it serves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    /// Host names the certificate is for; `*.example.com` covers one leftmost label.
    /// An entry without hosts only serves rules without a host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,

    /// Name of the secret holding the certificate and key, in each member cluster (or in
    /// the standalone agent's config). A DNS-1123 subdomain. Required.
    #[serde(default)]
    pub secret_name: String,
}

// ---------------------------------------------------------------------------------------
// Placement and overrides

/// Which member clusters carry an ingress: the clusters listed and those the selector
/// matches. Placement is sticky: a placed cluster keeps its share while it is offline or
/// unhealthy; only cordon, a change here, or deletion removes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Names of clusters to place on (DNS-1123 labels), e.g. `[eu-west, us-east]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub clusters: Vec<String>,

    /// Clusters whose labels match are placed on too, e.g. `{matchLabels: {env: prod}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,

    /// At most this many clusters (at least 1), chosen among connected clusters spread
    /// across regions, then kept. Optional: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_clusters: Option<i32>,

    /// Within each placed cluster, the IngressPools (by their own labels) that may serve
    /// the ingress; the scheduler binds the share to one of them by load. Absent: any
    /// pool of the cluster. A cluster without pools serves it on every member.
    /// `overrides[].poolSelector` replaces it for one cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_selector: Option<LabelSelector>,
}

impl Placement {
    /// Whether no cluster choice is set (the ingress goes to every schedulable cluster);
    /// `poolSelector` chooses within clusters and does not count.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty() && self.cluster_selector.is_none() && self.max_clusters.is_none()
    }

    /// Whether nothing at all is set, `poolSelector` included: what serialization leaves
    /// out (`is_empty` would drop a lone `poolSelector` from the stored object).
    pub fn is_unset(&self) -> bool {
        self.is_empty() && self.pool_selector.is_none()
    }
}

/// Adjustments for one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOverride {
    /// Name of the cluster this override applies to. Required; one override per cluster.
    #[serde(default)]
    pub cluster: String,

    /// IngressClass of the Ingress objects rendered in this cluster (kubernetes driver),
    /// e.g. `nginx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_class_name: Option<String>,

    /// Extra annotations on the objects rendered in this cluster (kubernetes driver),
    /// e.g. `{example.com/tier: gold}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Replaces `placement.poolSelector` on this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_selector: Option<LabelSelector>,
}

// ---------------------------------------------------------------------------------------
// Traffic

string_enum! {
    /// How DNS answers pick among healthy clusters.
    #[derive(Default)]
    pub enum StrategyType {
        /// Every healthy cluster, rotated (default).
        #[default]
        RoundRobin => "RoundRobin",
        /// Healthy clusters in proportion to `weights`.
        Weighted => "Weighted",
        /// The first tier of `failoverOrder` with a healthy cluster.
        Failover => "Failover",
        /// The healthy cluster nearest to the client.
        Geo => "Geo",
        /// The healthy cluster with the lowest round-trip time for the client's subnet in
        /// the hub's `dns.latency` table (RTTs the operator supplies; the hub measures
        /// nothing), else as Geo. A Route53 provider publishes latency records instead
        /// (AWS's own measurements).
        Latency => "Latency",
        /// The nearest healthy cluster until its load (`status.load.rps`) passes
        /// `overflowThreshold` of its `capacity.rps`, then the next nearest.
        Overflow => "Overflow",
        /// Anycast addresses announced over BGP by every healthy, uncordoned cluster's
        /// agent; DNS answers the addresses some cluster announces.
        Anycast => "Anycast",
    }
}

string_enum! {
    /// What DNS answers when no placed cluster is healthy.
    #[derive(Default)]
    pub enum WhenAllUnhealthy {
        /// Answer with every placed cluster (fail open; default).
        #[default]
        ServeAll => "ServeAll",
        /// Answer with no records (fail closed).
        NoData => "NoData",
    }
}

fn default_ttl() -> i32 {
    DEFAULT_TTL
}

fn default_failback_delay() -> i32 {
    DEFAULT_FAILBACK_DELAY_SECONDS
}

/// How clients are steered to clusters through DNS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Traffic {
    /// DNS name the hub answers for (A/AAAA/CNAME, and SRV below it for named TCP/UDP
    /// rules). Defaults to the rules' host when they name exactly one non-wildcard host;
    /// required otherwise. Not a wildcard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,

    /// TTL of the DNS records in seconds, 1-86400. Default 30. Failover takes effect
    /// for clients within about this long.
    #[serde(default = "default_ttl")]
    pub ttl: i32,

    /// How answers pick among healthy clusters.
    #[serde(default)]
    pub strategy: Strategy,

    /// What to answer when no placed cluster is healthy: `ServeAll` (fail open;
    /// default) or `NoData` (fail closed).
    #[serde(default)]
    pub when_all_unhealthy: WhenAllUnhealthy,

    /// Seconds a recovered cluster must stay healthy before traffic moves back to it,
    /// 0-86400. Default 30.
    #[serde(default = "default_failback_delay")]
    pub failback_delay_seconds: i32,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            dns_name: None,
            ttl: DEFAULT_TTL,
            strategy: Strategy::default(),
            when_all_unhealthy: WhenAllUnhealthy::ServeAll,
            failback_delay_seconds: DEFAULT_FAILBACK_DELAY_SECONDS,
        }
    }
}

/// The steering strategy and its parameters; each parameter belongs to one type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// `RoundRobin` (default), `Weighted`, `Failover`, `Geo`, `Latency`, `Overflow` or
    /// `Anycast` (case-insensitive). Latency picks the cluster with the lowest RTT for the
    /// client's subnet in the hub's `dns.latency` table, which the operator supplies (the
    /// hub measures nothing), else the nearest.
    #[serde(rename = "type", default)]
    pub type_: StrategyType,

    /// Weighted: relative weight per cluster name, each at least 0, at least one above 0,
    /// e.g. `{eu-west: 3, us-east: 1}`. Required for Weighted, only allowed there;
    /// clusters without a weight get none of the traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<BTreeMap<String, i32>>,

    /// Failover: tiers of cluster names, e.g. `[[eu-west], [us-east, us-west]]`. Clients
    /// get the first tier with a healthy cluster. Required for Failover, only allowed
    /// there; each cluster at most once. Names of clusters the ingress is not placed on
    /// are skipped (a tier of only such names is never used) and named in the Placed
    /// condition's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_order: Option<Vec<Vec<String>>>,

    /// Overflow: share of a cluster's `spec.capacity.rps` (above 0, at most 1) beyond
    /// which new clients go to the next nearest cluster (the load compared is its
    /// `status.load.rps`). Default 0.8; only allowed for Overflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow_threshold: Option<f64>,

    /// Anycast: the addresses (IPv4 or IPv6) each healthy, uncordoned cluster's agent
    /// announces over BGP (`status.clusters[].anycast` says what it reports). Required
    /// for Anycast, only allowed there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anycast_addresses: Option<Vec<String>>,
}

impl Strategy {
    /// The overflow threshold, or its default.
    pub fn effective_overflow_threshold(&self) -> f64 {
        self.overflow_threshold
            .unwrap_or(DEFAULT_OVERFLOW_THRESHOLD)
    }
}

// ---------------------------------------------------------------------------------------
// Status

string_enum! {
    /// Where an ingress stands on one cluster.
    #[derive(Default)]
    pub enum ClusterPhase {
        /// Placed, not yet applied by the cluster's agent.
        #[default]
        Pending => "Pending",
        /// Applied by the cluster's agent at the current generation.
        Applied => "Applied",
        /// The cluster's agent could not apply it (see `message`).
        Failed => "Failed",
        /// The cluster's agent is not connected; it keeps serving what it had.
        Offline => "Offline",
    }
}

string_enum! {
    /// Type of a DNS record.
    pub enum RecordType {
        /// IPv4 address.
        A => "A",
        /// IPv6 address.
        Aaaa => "AAAA",
        /// Alias to a host name.
        Cname => "CNAME",
        /// Service location (`_<name>._tcp.<dnsName>`).
        Srv => "SRV",
        /// Text (ownership markers for providers).
        Txt => "TXT",
        /// Name server (a delegation a provider holds in a parent zone).
        Ns => "NS",
    }
}

/// What the hub last observed about a FederatedIngress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederatedIngressStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// State on each placed cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub clusters: Vec<ClusterIngressStatus>,

    /// DNS records served for this ingress and their sync state per provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsStatus>,

    /// `Placed`, `Propagated`, `Healthy`, `DNSReady`, `Ready` and `Servable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// State of an ingress on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterIngressStatus {
    /// Name of the cluster.
    #[serde(default)]
    pub name: String,

    /// `Pending`, `Applied`, `Failed` or `Offline`.
    #[serde(default)]
    pub phase: ClusterPhase,

    /// Addresses where the ingress is served on this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,

    /// Rules served on other addresses than `addresses` on this cluster, e.g. a UDP rule
    /// behind its own cloud load balancer (split TCP/UDP Services). Only rules whose
    /// addresses differ are listed; SRV records of such a rule point at these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleAddressStatus>,

    /// Readiness of each backend on this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendStatus>,

    /// Anycast strategy: each anycast address's BGP route on this cluster, as the
    /// cluster's agent last reported it (kept while the agent is away or has not
    /// reported the current generation yet). Absent when the agent reports no BGP state
    /// (it has no BGP speaker configured, or predates anycast).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anycast: Vec<AnycastRouteStatus>,

    /// Whether this cluster takes traffic for the ingress (listeners up, a ready backend
    /// behind every rule, agent connected).
    #[serde(default)]
    pub healthy: bool,

    /// The IngressPool of this cluster the share is bound to (absent: the cluster has no
    /// pool, or none matches; then its members outside every pool serve it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,

    /// While a share moves between pools: the pool it leaves, which serves until the new
    /// one does (make-before-break), then drains for the DNS TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_pool: Option<String>,

    /// Why the share is on `pool` (or on none), as the scheduler decided when it was
    /// bound or moved, e.g. `moved from pool a: it was saturated (95% utilized)`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pool_reason: String,

    /// Why the cluster is not healthy or not applied, for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,

    /// When anything else in this entry last changed (phase, health, addresses,
    /// backends, message...); it stays put while the entry stays the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// Where one rule of an ingress is served on one cluster, when that is not the
/// cluster's `addresses`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleAddressStatus {
    /// Index of the rule in `spec.rules`.
    #[serde(default)]
    pub rule: i32,
    /// Addresses the rule is served on: IPs or load balancer host names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,
}

/// One anycast address's route on one cluster, as the cluster's BGP speaker carries it
/// (reported by the cluster's agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnycastRouteStatus {
    /// The anycast address (one of `spec.traffic.strategy.anycastAddresses`), announced
    /// as a /32 or /128.
    pub address: IpAddr,
    /// Whether the cluster's BGP speaker announces the route to its peers.
    #[serde(default)]
    pub announced: bool,
    /// Why the route is announced or withdrawn, in the agent's words (e.g. a backend
    /// without ready endpoints, the cluster cordoned, the speaker down).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Readiness of one backend on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    /// Name of the service.
    #[serde(default)]
    pub service: String,
    /// Port of the service.
    #[serde(default)]
    pub port: i32,
    /// Endpoints passing health checks.
    #[serde(default)]
    pub ready: i32,
    /// All endpoints.
    #[serde(default)]
    pub total: i32,
}

/// DNS records served for an ingress and their sync state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsStatus {
    /// Records currently answered, per client scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<DnsRecordStatus>,
    /// Sync state per DNS provider (`embedded`, `route53`, `clouddns`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub providers: Vec<DnsProviderStatus>,
}

/// One record set as answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsRecordStatus {
    /// Owner name, e.g. `shop.example.com` or `_mysql._tcp.shop.example.com`.
    pub name: String,
    /// `A`, `AAAA`, `CNAME`, `SRV` or `TXT`.
    #[serde(rename = "type")]
    pub type_: RecordType,
    /// Record data in presentation format, e.g. `127.0.0.11`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Which clients get this answer (e.g. a region such as `eu`); empty for everyone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// Sync state of one DNS provider: the embedded server (always first), then each
/// configured provider (`dns.providers` of the apiserver's config) that manages the
/// ingress's DNS name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsProviderStatus {
    /// Provider name: `embedded`, or a configured provider's name (e.g. `aws-prod`).
    #[serde(default)]
    pub name: String,
    /// `route53` or `clouddns`; empty for the embedded server.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Whether the provider holds the records of the current DNS serial for this name.
    #[serde(default)]
    pub synced: bool,
    /// Why not synced (the provider's own words), or what a dry run would change.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the provider last finished a sync (successful or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    /// The DNS serial (the embedded server's SOA serial) the provider's last sync was
    /// derived from; `synced` means it is the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_serial: Option<i64>,
    /// The provider plans changes without making them (`dryRun` in its config).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The record sets the provider holds for this name after its last sync (what it
    /// would hold, on a dry run), with their native routing policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<DnsProviderRecord>,
}

/// One record set as a DNS provider holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DnsProviderRecord {
    /// Owner name, e.g. `shop.example.com`.
    #[serde(default)]
    pub name: String,
    /// `A`, `AAAA`, `CNAME`, `SRV`, `TXT` or `NS`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// The provider's set identifier (Route53: the cluster), empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub set_identifier: String,
    /// The native routing policy in words, e.g. `weighted 3`, `failover PRIMARY`,
    /// `latency us-east-1`, `geo europe-west1`, `wrr 0.75`, `multivalue`, `simple`,
    /// `alias`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// Record data in presentation format.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// The provider's health check guarding this record, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health_check: String,
}

// ---------------------------------------------------------------------------------------
// Queries used by the API server's table and by controllers

impl FederatedIngress {
    /// The pool selector on `cluster`: its override's, else `placement.poolSelector`.
    pub fn pool_selector(&self, cluster: &str) -> Option<&LabelSelector> {
        self.spec
            .overrides
            .iter()
            .find(|o| o.cluster == cluster)
            .and_then(|o| o.pool_selector.as_ref())
            .or(self.spec.placement.pool_selector.as_ref())
    }

    /// An ingress `namespace/name` with `apiVersion` and `kind` set.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        spec: FederatedIngressSpec,
    ) -> Self {
        FederatedIngress {
            api_version: API_VERSION.to_owned(),
            kind: <FederatedIngress as Resource>::KIND.to_owned(),
            metadata: ObjectMeta::namespaced(namespace, name),
            spec,
            status: None,
        }
    }

    /// Listeners as `port/PROTOCOL`, deduplicated, in rule order, e.g.
    /// `["80/HTTP", "443/HTTPS", "5433/TLS", "3306/TCP", "3306/UDP"]`. Rules without a port
    /// (an invalid TCP/UDP rule) are left out.
    pub fn listener_summary(&self) -> Vec<String> {
        self.spec.listener_summary()
    }

    /// Distinct rule hosts, in rule order.
    pub fn hosts(&self) -> Vec<String> {
        self.spec.hosts()
    }
}

impl FederatedIngressSpec {
    /// See [`FederatedIngress::listener_summary`].
    pub fn listener_summary(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for rule in &self.rules {
            if let Some(port) = rule.effective_port() {
                let listener = format!("{port}/{}", rule.protocol);
                if !out.contains(&listener) {
                    out.push(listener);
                }
            }
        }
        out
    }

    /// Distinct rule hosts, in rule order.
    pub fn hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for host in self.rules.iter().filter_map(IngressRule::host) {
            if !out.iter().any(|h| h == host) {
                out.push(host.to_owned());
            }
        }
        out
    }

    /// `traffic.dnsName`, or the host it defaults to (the one non-wildcard host the rules
    /// name), or `None`.
    pub fn effective_dns_name(&self) -> Option<String> {
        if let Some(name) = self.traffic.dns_name.as_deref().filter(|n| !n.is_empty()) {
            return Some(name.to_owned());
        }
        match self.hosts().as_slice() {
            [only] if !only.starts_with('*') => Some(only.clone()),
            _ => None,
        }
    }

    /// Fills in the defaults that depend on other fields. Idempotent.
    ///
    /// - `port`: 80 on HTTP rules, 443 on HTTPS and TLS rules;
    /// - `tlsMode`: `Terminate` on TLS rules;
    /// - `traffic.strategy.overflowThreshold`: 0.8 when the type is Overflow;
    /// - `traffic.dnsName`: the host, when all rules with a host name the same single
    ///   non-wildcard host.
    ///
    /// Unconditional defaults (path `/`, pathType `Prefix`, ttl 30, strategy
    /// `RoundRobin`, whenAllUnhealthy `ServeAll`, failbackDelaySeconds 30) are filled in
    /// when decoding, and by `Default` for values built in code.
    pub fn apply_defaults(&mut self) {
        for rule in &mut self.rules {
            if rule.port.is_none() {
                rule.port = rule.protocol.default_port();
            }
            if rule.protocol == Protocol::Tls && rule.tls_mode.is_none() {
                rule.tls_mode = Some(TlsMode::Terminate);
            }
        }
        let strategy = &mut self.traffic.strategy;
        if strategy.type_ == StrategyType::Overflow && strategy.overflow_threshold.is_none() {
            strategy.overflow_threshold = Some(DEFAULT_OVERFLOW_THRESHOLD);
        }
        if self.traffic.dns_name.is_none() {
            self.traffic.dns_name = self.effective_dns_name();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Validation

impl FederatedIngressSpec {
    /// Validates the spec at `path` (usually `spec`): every problem, each with its field
    /// path. Works on defaulted and undefaulted specs alike.
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let rules = path.child("rules");
        if self.rules.is_empty() {
            errs.push(FieldError::required(
                rules.clone(),
                "at least one rule is required",
            ));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            self.validate_rule(rule, &rules.index(i), path, &mut errs);
        }
        self.validate_rule_conflicts(&rules, &mut errs);
        self.validate_tls(&path.child("tls"), &mut errs);
        self.validate_placement(&path.child("placement"), &mut errs);
        self.validate_overrides(&path.child("overrides"), &mut errs);
        self.validate_traffic(&path.child("traffic"), &mut errs);
        errs
    }

    fn validate_rule(
        &self,
        rule: &IngressRule,
        at: &FieldPath,
        spec: &FieldPath,
        errs: &mut Vec<FieldError>,
    ) {
        let protocol = rule.protocol;
        let host_valid = match &rule.host {
            Some(host) => {
                let msgs = names::hostname(host);
                let valid = msgs.is_empty();
                for msg in msgs {
                    errs.push(FieldError::invalid(at.child("host"), host, msg));
                }
                valid
            }
            None => true,
        };
        if let Some(port) = rule.port
            && !PORT_RANGE.contains(&port)
        {
            errs.push(FieldError::invalid(at.child("port"), port, PORT_MSG));
        }

        match protocol {
            Protocol::Http | Protocol::Https => {
                if rule.paths.is_empty() {
                    errs.push(FieldError::required(
                        at.child("paths"),
                        "at least one path is required on HTTP and HTTPS rules",
                    ));
                }
                if rule.backend.is_some() {
                    errs.push(FieldError::forbidden(
                        at.child("backend"),
                        "not allowed on HTTP and HTTPS rules: give each path a backend",
                    ));
                }
                let paths = at.child("paths");
                for (j, path) in rule.paths.iter().enumerate() {
                    if !path.path.starts_with('/') {
                        errs.push(FieldError::invalid(
                            paths.index(j).child("path"),
                            &path.path,
                            "must start with '/'",
                        ));
                    }
                    path.backend
                        .validate(&paths.index(j).child("backend"), errs);
                }
            }
            Protocol::Tls => {
                if rule.host.is_none() {
                    errs.push(FieldError::required(
                        at.child("host"),
                        "required on TLS rules: they are routed by SNI host name",
                    ));
                }
                if rule.backend.is_none() {
                    errs.push(FieldError::required(
                        at.child("backend"),
                        "required on TLS rules",
                    ));
                }
                if !rule.paths.is_empty() {
                    errs.push(FieldError::forbidden(
                        at.child("paths"),
                        "only allowed on HTTP and HTTPS rules",
                    ));
                }
            }
            Protocol::Tcp | Protocol::Udp => {
                if rule.port.is_none() {
                    errs.push(FieldError::required(
                        at.child("port"),
                        "required on TCP and UDP rules",
                    ));
                }
                if rule.backend.is_none() {
                    errs.push(FieldError::required(
                        at.child("backend"),
                        "required on TCP and UDP rules",
                    ));
                }
                if rule.host.is_some() {
                    errs.push(FieldError::forbidden(
                        at.child("host"),
                        "not allowed on TCP and UDP rules: they match on the port alone",
                    ));
                }
                if !rule.paths.is_empty() {
                    errs.push(FieldError::forbidden(
                        at.child("paths"),
                        "only allowed on HTTP and HTTPS rules",
                    ));
                }
            }
        }

        if rule.tls_mode.is_some() && protocol != Protocol::Tls {
            errs.push(FieldError::forbidden(
                at.child("tlsMode"),
                "only allowed on TLS rules",
            ));
        }
        if let Some(name) = &rule.name {
            if protocol.is_l4() {
                for msg in names::service_name(name) {
                    errs.push(FieldError::invalid(at.child("name"), name, msg));
                }
            } else {
                errs.push(FieldError::forbidden(
                    at.child("name"),
                    "only allowed on TCP and UDP rules (it names their SRV records)",
                ));
            }
        }
        if let Some(backend) = &rule.backend
            && !protocol.is_http()
        {
            backend.validate(&at.child("backend"), errs);
        }

        // A certificate must cover every host the ingress terminates TLS for.
        if rule.terminates_tls() && host_valid {
            let needs = if protocol == Protocol::Https {
                "HTTPS rules need a certificate"
            } else {
                "TLS rules with tlsMode Terminate need a certificate"
            };
            match rule.host() {
                Some(host) => {
                    let covered = self.tls.iter().any(|t| {
                        t.hosts
                            .iter()
                            .any(|pattern| names::host_matches(pattern, host))
                    });
                    if !covered {
                        errs.push(FieldError::invalid(
                            at.child("host"),
                            host,
                            format!("no spec.tls entry covers this host ({needs})"),
                        ));
                    }
                }
                None if protocol == Protocol::Https && self.tls.is_empty() => {
                    errs.push(FieldError::required(
                        spec.child("tls"),
                        format!("{at} has no host and {needs}: add a spec.tls entry"),
                    ));
                }
                None => {}
            }
        }
    }

    /// Listeners two rules of this object would both need.
    fn validate_rule_conflicts(&self, rules: &FieldPath, errs: &mut Vec<FieldError>) {
        // Listener families that cannot share a TCP port; UDP lives apart.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        enum Family {
            Http,
            Sni,
            Tcp,
        }

        let mut l4: HashSet<(Protocol, i32)> = HashSet::new();
        let mut sni: HashMap<(i32, &str), Protocol> = HashMap::new();
        let mut http_paths: HashSet<(i32, &str, &str, PathType)> = HashSet::new();
        let mut families: BTreeMap<i32, Vec<(Family, Protocol)>> = BTreeMap::new();
        let mut reported: HashSet<(i32, Family, Family)> = HashSet::new();

        for (i, rule) in self.rules.iter().enumerate() {
            let Some(port) = rule.effective_port().filter(|p| PORT_RANGE.contains(p)) else {
                continue;
            };
            let at = rules.index(i);
            match rule.protocol {
                Protocol::Tcp | Protocol::Udp => {
                    if !l4.insert((rule.protocol, port)) {
                        errs.push(FieldError::duplicate(
                            at.clone(),
                            format!("{}/{port}", rule.protocol),
                        ));
                    }
                }
                Protocol::Tls | Protocol::Https => {
                    if let Some(host) = rule.host() {
                        match sni.get(&(port, host)) {
                            Some(first)
                                if *first == Protocol::Tls || rule.protocol == Protocol::Tls =>
                            {
                                errs.push(FieldError::duplicate(
                                    at.child("host"),
                                    format!("{host}:{port}"),
                                ));
                            }
                            Some(_) => {}
                            None => {
                                sni.insert((port, host), rule.protocol);
                            }
                        }
                    }
                }
                Protocol::Http => {}
            }
            if rule.protocol.is_http() {
                let host = rule.host().unwrap_or("");
                for (j, path) in rule.paths.iter().enumerate() {
                    if !http_paths.insert((port, host, path.path.as_str(), path.path_type)) {
                        errs.push(FieldError::duplicate(
                            at.child("paths").index(j),
                            format!("{host}:{port}{} ({})", path.path, path.path_type),
                        ));
                    }
                }
            }

            let family = match rule.protocol {
                Protocol::Http => Family::Http,
                Protocol::Https | Protocol::Tls => Family::Sni,
                Protocol::Tcp => Family::Tcp,
                Protocol::Udp => continue,
            };
            let seen = families.entry(port).or_default();
            for &(other, other_protocol) in seen.iter() {
                if other != family && reported.insert((port, other.min(family), other.max(family)))
                {
                    errs.push(FieldError::invalid(
                        at.child("port"),
                        port,
                        format!(
                            "port {port} is used by both {other_protocol} and {} rules",
                            rule.protocol
                        ),
                    ));
                }
            }
            if !seen.iter().any(|(f, _)| *f == family) {
                seen.push((family, rule.protocol));
            }
        }
    }

    fn validate_tls(&self, path: &FieldPath, errs: &mut Vec<FieldError>) {
        let mut hosts_seen: HashSet<&str> = HashSet::new();
        for (k, entry) in self.tls.iter().enumerate() {
            let at = path.index(k);
            if entry.secret_name.is_empty() {
                errs.push(FieldError::required(at.child("secretName"), ""));
            } else {
                for msg in names::dns1123_subdomain(&entry.secret_name) {
                    errs.push(FieldError::invalid(
                        at.child("secretName"),
                        &entry.secret_name,
                        msg,
                    ));
                }
            }
            for (m, host) in entry.hosts.iter().enumerate() {
                let host_at = at.child("hosts").index(m);
                let msgs = names::hostname(host);
                if msgs.is_empty() && !hosts_seen.insert(host) {
                    errs.push(FieldError::duplicate(host_at.clone(), host));
                }
                for msg in msgs {
                    errs.push(FieldError::invalid(host_at.clone(), host, msg));
                }
            }
        }
    }

    fn validate_placement(&self, path: &FieldPath, errs: &mut Vec<FieldError>) {
        let placement = &self.placement;
        let clusters = path.child("clusters");
        let mut seen: HashSet<&str> = HashSet::new();
        for (j, cluster) in placement.clusters.iter().enumerate() {
            let msgs = names::dns1123_label(cluster);
            if msgs.is_empty() && !seen.insert(cluster) {
                errs.push(FieldError::duplicate(clusters.index(j), cluster));
            }
            for msg in msgs {
                errs.push(FieldError::invalid(clusters.index(j), cluster, msg));
            }
        }
        if let Some(selector) = &placement.cluster_selector {
            errs.extend(selector.validate(&path.child("clusterSelector")));
        }
        if let Some(selector) = &placement.pool_selector {
            errs.extend(selector.validate(&path.child("poolSelector")));
        }
        if let Some(max) = placement.max_clusters
            && max < 1
        {
            errs.push(FieldError::invalid(
                path.child("maxClusters"),
                max,
                "must be greater than or equal to 1",
            ));
        }
    }

    fn validate_overrides(&self, path: &FieldPath, errs: &mut Vec<FieldError>) {
        let mut seen: HashSet<&str> = HashSet::new();
        for (k, entry) in self.overrides.iter().enumerate() {
            let at = path.index(k);
            if entry.cluster.is_empty() {
                errs.push(FieldError::required(at.child("cluster"), ""));
            } else {
                let msgs = names::dns1123_label(&entry.cluster);
                if msgs.is_empty() && !seen.insert(&entry.cluster) {
                    errs.push(FieldError::duplicate(at.child("cluster"), &entry.cluster));
                }
                for msg in msgs {
                    errs.push(FieldError::invalid(
                        at.child("cluster"),
                        &entry.cluster,
                        msg,
                    ));
                }
            }
            if let Some(class) = &entry.ingress_class_name {
                for msg in names::dns1123_subdomain(class) {
                    errs.push(FieldError::invalid(
                        at.child("ingressClassName"),
                        class,
                        msg,
                    ));
                }
            }
            errs.extend(validate_annotations(
                &entry.annotations,
                &at.child("annotations"),
            ));
            if let Some(selector) = &entry.pool_selector {
                errs.extend(selector.validate(&at.child("poolSelector")));
            }
        }
    }

    fn validate_traffic(&self, path: &FieldPath, errs: &mut Vec<FieldError>) {
        let traffic = &self.traffic;
        match &traffic.dns_name {
            Some(name) => {
                for msg in names::non_wildcard_hostname(name) {
                    errs.push(FieldError::invalid(path.child("dnsName"), name, msg));
                }
            }
            None => {
                let hosts = self.hosts();
                match hosts.as_slice() {
                    [only] if !only.starts_with('*') => {}
                    [_] => errs.push(FieldError::required(
                        path.child("dnsName"),
                        "required when the only host of the rules is a wildcard",
                    )),
                    _ => errs.push(FieldError::required(
                        path.child("dnsName"),
                        "required when rules do not name exactly one host",
                    )),
                }
            }
        }
        if !(1..=ONE_DAY).contains(&traffic.ttl) {
            errs.push(FieldError::invalid(
                path.child("ttl"),
                traffic.ttl,
                format!("must be between 1 and {ONE_DAY}"),
            ));
        }
        if !(0..=ONE_DAY).contains(&traffic.failback_delay_seconds) {
            errs.push(FieldError::invalid(
                path.child("failbackDelaySeconds"),
                traffic.failback_delay_seconds,
                format!("must be between 0 and {ONE_DAY}"),
            ));
        }
        validate_strategy(&traffic.strategy, &path.child("strategy"), errs);
    }
}

/// `only allowed when type is X`.
fn only_with(path: FieldPath, type_: StrategyType) -> FieldError {
    FieldError::forbidden(path, format!("only allowed when type is {type_}"))
}

/// `required when type is X`.
fn required_with(path: FieldPath, type_: StrategyType) -> FieldError {
    FieldError::required(path, format!("required when type is {type_}"))
}

fn validate_strategy(strategy: &Strategy, path: &FieldPath, errs: &mut Vec<FieldError>) {
    let type_ = strategy.type_;

    let weights_at = path.child("weights");
    match (&strategy.weights, type_ == StrategyType::Weighted) {
        (Some(_), false) => errs.push(only_with(weights_at, StrategyType::Weighted)),
        (None, true) => errs.push(required_with(weights_at, StrategyType::Weighted)),
        (Some(weights), true) => {
            for (cluster, weight) in weights {
                for msg in names::dns1123_label(cluster) {
                    errs.push(FieldError::invalid(weights_at.clone(), cluster, msg));
                }
                if *weight < 0 {
                    errs.push(FieldError::invalid(
                        weights_at.key(cluster),
                        weight,
                        "must be greater than or equal to 0",
                    ));
                }
            }
            if !weights.values().any(|w| *w > 0) {
                errs.push(FieldError::invalid(
                    weights_at,
                    weights,
                    "at least one weight must be greater than 0",
                ));
            }
        }
        (None, false) => {}
    }

    let order_at = path.child("failoverOrder");
    match (&strategy.failover_order, type_ == StrategyType::Failover) {
        (Some(_), false) => errs.push(only_with(order_at, StrategyType::Failover)),
        (None, true) => errs.push(required_with(order_at, StrategyType::Failover)),
        (Some(tiers), true) => {
            if tiers.is_empty() {
                errs.push(FieldError::required(
                    order_at.clone(),
                    "at least one tier is required when type is Failover",
                ));
            }
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for (t, tier) in tiers.iter().enumerate() {
                if tier.is_empty() {
                    errs.push(FieldError::required(
                        order_at.index(t),
                        "a tier must name at least one cluster",
                    ));
                }
                for (c, cluster) in tier.iter().enumerate() {
                    let at = order_at.index(t).index(c);
                    let msgs = names::dns1123_label(cluster);
                    if msgs.is_empty() && !seen.insert(cluster) {
                        errs.push(FieldError::duplicate(at.clone(), cluster));
                    }
                    for msg in msgs {
                        errs.push(FieldError::invalid(at.clone(), cluster, msg));
                    }
                }
            }
        }
        (None, false) => {}
    }

    let threshold_at = path.child("overflowThreshold");
    match (strategy.overflow_threshold, type_ == StrategyType::Overflow) {
        (Some(_), false) => errs.push(only_with(threshold_at, StrategyType::Overflow)),
        (Some(threshold), true) => {
            if !(threshold > 0.0 && threshold <= 1.0) {
                errs.push(FieldError::invalid(
                    threshold_at,
                    threshold,
                    "must be greater than 0 and at most 1",
                ));
            }
        }
        // Defaulted to 0.8.
        (None, _) => {}
    }

    let anycast_at = path.child("anycastAddresses");
    match (&strategy.anycast_addresses, type_ == StrategyType::Anycast) {
        (Some(_), false) => errs.push(only_with(anycast_at, StrategyType::Anycast)),
        (None, true) => errs.push(required_with(anycast_at, StrategyType::Anycast)),
        (Some(addresses), true) => {
            if addresses.is_empty() {
                errs.push(FieldError::required(
                    anycast_at.clone(),
                    "at least one address is required when type is Anycast",
                ));
            }
            let mut seen: HashSet<std::net::IpAddr> = HashSet::new();
            for (j, address) in addresses.iter().enumerate() {
                match address.parse::<std::net::IpAddr>() {
                    Ok(ip) => {
                        if !seen.insert(ip) {
                            errs.push(FieldError::duplicate(anycast_at.index(j), address));
                        }
                    }
                    Err(_) => {
                        for msg in names::ip_address(address) {
                            errs.push(FieldError::invalid(anycast_at.index(j), address, msg));
                        }
                    }
                }
            }
        }
        (None, false) => {}
    }
}

impl Resource for FederatedIngress {
    const KIND: &'static str = "FederatedIngress";
    const LIST_KIND: &'static str = "FederatedIngressList";
    const PLURAL: &'static str = "federatedingresses";
    const SINGULAR: &'static str = "federatedingress";
    const SHORT_NAMES: &'static [&'static str] = &["fing"];
    const NAMESPACED: bool = true;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn spec_value(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or(serde_json::Value::Null)
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status.clone_from(&other.status);
    }

    fn clear_status(&mut self) {
        self.status = None;
    }

    /// See [`FederatedIngressSpec::apply_defaults`].
    fn apply_defaults(&mut self) {
        self.spec.apply_defaults();
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validate_object_meta(
            &self.metadata,
            Self::NAMESPACED,
            names::dns1123_subdomain,
            &FieldPath::new("metadata"),
        );
        errs.extend(self.spec.validate(&FieldPath::new("spec")));
        errs
    }
}

#[cfg(test)]
mod tests;
