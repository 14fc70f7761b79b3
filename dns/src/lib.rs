//! fedingress-dns: global server load balancing.
//!
//! - [`location`]: where a client is (EDNS Client Subnet or resolver address) from the
//!   config's CIDR table or a MaxMind `.mmdb` file.
//! - [`routing`]: the strategies, pure functions of (policy, cluster views, client) →
//!   which clusters answer and why.
//! - [`zone`]: an immutable snapshot of everything served (zones, names, answers per
//!   client location bucket), built from routed ingresses and swapped atomically.
//! - [`server`]: the embedded authoritative server (UDP fast path from pre-encoded
//!   answers; everything else through hickory), with response-rate limiting, an ECS
//!   trust list and TCP limits ([`server::config::ServerConfig`]).
//!
//! What does not belong here: reading API objects or the store (the hub turns them into
//! [`ClusterView`]s and [`RoutedIngress`]es), clocks (callers pass `now`), and
//! publishing the same decisions to cloud DNS services (`fedingress-providers`'
//! `publish`, beside the providers themselves).

pub mod location;
pub mod routing;
pub mod server;
pub mod zone;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use fedingress_api::ingress::Traffic;
use serde::{Deserialize, Serialize};

/// A place: a region name and coordinates in degrees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Location {
    pub region: String,
    pub latitude: f64,
    pub longitude: f64,
}

impl Location {
    /// (latitude, longitude).
    pub fn coordinates(&self) -> (f64, f64) {
        (self.latitude, self.longitude)
    }
}

/// A member cluster as routing sees it for one FederatedIngress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub name: String,
    pub location: Location,
    /// Agent connected and every backend service of this ingress has a ready endpoint.
    pub healthy: bool,
    /// `spec.unschedulable`: never in an answer.
    pub cordoned: bool,
    /// Addresses the cluster serves this ingress on.
    pub ips: Vec<IpAddr>,
    /// Load balancer host names (answered as CNAME).
    pub hostnames: Vec<String>,
    /// Reported load per second, as in `Cluster.status.load.rps`: HTTP(S) requests plus
    /// new TCP connections, UDP sessions and TLS connections
    /// (`fedingress_api::plan::AgentReport::load_per_second`).
    pub load: f64,
    /// `spec.capacity.rps`, used by Overflow (the only capacity field routing reads).
    pub capacity: Option<f64>,
    /// The infrastructure the cluster runs on (`spec.provider`): DNS providers read
    /// `location.region` as a region of that cloud (Route53 latency records need an AWS
    /// region). Not used by routing.
    #[serde(default)]
    pub cloud: fedingress_api::cluster::Provider,
    /// Anycast strategy: the BGP routes of this ingress's anycast addresses as the
    /// cluster's agent reports them; empty when it reports none (no BGP speaker, an
    /// older agent, not reported yet). See [`routing`] (Anycast).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anycast: Vec<fedingress_api::ingress::AnycastRouteStatus>,
}

/// An L4 rule that carries a `name`: served as SRV `_<name>._tcp|_udp.<dnsName>`.
///
/// Each cluster in the answer serves the rule on its [`ClusterView`] addresses unless it
/// is listed in `addresses` (the rule has a load balancer of its own there, e.g. UDP split
/// from TCP on a cloud that cannot mix them). Clusters in `excluded` are left out of this
/// service's answers, which are then routed among the other clusters; they stay in the
/// dnsName's A/AAAA answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SrvService {
    pub name: String,
    /// `tcp` or `udp`.
    pub transport: String,
    pub port: u16,
    /// Where this rule is served, by cluster name, for clusters that serve it elsewhere
    /// than on their `ClusterView` addresses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub addresses: BTreeMap<String, ServiceAddresses>,
    /// Clusters that cannot serve this rule (their driver lacks it, or their agent
    /// reported an error for it).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub excluded: BTreeSet<String>,
}

impl SrvService {
    /// A service served by every cluster on its own addresses.
    pub fn new(name: impl Into<String>, transport: impl Into<String>, port: u16) -> Self {
        SrvService {
            name: name.into(),
            transport: transport.into(),
            port,
            addresses: BTreeMap::new(),
            excluded: BTreeSet::new(),
        }
    }
}

/// Where one cluster serves one SRV service: IPs (answered through a target name of
/// their own, `<cluster>.<transport>-<name>.<dnsName>`) or load balancer host names (the
/// SRV target itself).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAddresses {
    pub ips: Vec<IpAddr>,
    pub hostnames: Vec<String>,
}

/// Everything needed to serve one FederatedIngress's DNS name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoutedIngress {
    /// `namespace/name` of the FederatedIngress (for logs and explain).
    pub ingress: String,
    /// Fully qualified, lower case, without the trailing dot.
    pub dns_name: String,
    pub traffic: Traffic,
    /// The placed clusters (cordoned ones included; routing leaves them out).
    pub clusters: Vec<ClusterView>,
    pub srv: Vec<SrvService>,
    /// Failover memory (see [`routing::FailoverState`]).
    pub failover: routing::FailoverState,
    /// The port a cloud health check probes (TCP) on each cluster: the effective port of
    /// the first HTTP, HTTPS, TLS or TCP rule; `None` when the ingress has only UDP
    /// rules (nothing a TCP probe could reach). Not used by the embedded server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_port: Option<u16>,
}
