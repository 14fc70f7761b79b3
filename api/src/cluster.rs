//! The `Cluster` resource: a member cluster of the federation (cluster-scoped).
//!
//! Users (or `fedctl cluster join`) write the spec: where the cluster is, which cloud it
//! runs on, its capacity, and whether it is cordoned. The hub writes the status from what
//! the cluster's agent reports: connection, addresses, load and conditions.

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, ObjectMeta, Time, string_enum, validate_object_meta};
use crate::names;
use crate::validation::{FieldError, FieldPath};
use crate::{API_VERSION, Resource};

/// Condition type: the cluster's agent holds a live connection and lease.
pub const CONDITION_CONNECTED: &str = "Connected";
/// How long a disconnected member stays listed in `status.members` (then the hub
/// forgets it; it is a new member when it comes back).
pub const MEMBER_FORGOTTEN_AFTER: std::time::Duration = std::time::Duration::from_secs(600);
/// Condition type: the cluster can take traffic (connected, not cordoned, healthy).
pub const CONDITION_READY: &str = "Ready";

/// A member cluster of the federation. Cluster-scoped; its name is a DNS-1123 label
/// (it appears in DNS scopes, weights and failover tiers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// `fedingress.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,

    /// `Cluster`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Standard object metadata. The name is a DNS-1123 label such as `eu-west`; labels
    /// are what `placement.clusterSelector` of a FederatedIngress matches.
    #[serde(default)]
    pub metadata: ObjectMeta,

    /// Where the cluster is and how it may be used.
    #[serde(default)]
    pub spec: ClusterSpec,

    /// What the hub last observed about the cluster, written from its agent's reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterStatus>,
}

/// Where a member cluster is and how it may be used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Region the cluster runs in, e.g. `europe-west1` or `us-east-1`. Required; lower-case
    /// letters, digits and `-`. Placement with `maxClusters` spreads across regions.
    #[serde(default)]
    pub region: String,

    /// Zone within the region, e.g. `europe-west1-b`. Optional; same characters as
    /// `region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,

    /// Geographic position of the cluster, used by the Geo strategy to send clients to
    /// the nearest healthy cluster. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,

    /// Infrastructure the cluster runs on: `aws`, `gcp`, `azure`, `onprem` or `other`
    /// (case-insensitive; default `other`). Drives how L4 listeners are rendered (e.g.
    /// mixed TCP+UDP load balancers and their per-cloud workarounds).
    #[serde(default)]
    pub provider: Provider,

    /// How much traffic the cluster can take. Overflow reads `rps`: it sends new clients
    /// elsewhere once `status.load.rps` passes `overflowThreshold` × `rps`. Placement
    /// reads both: a cluster at 0.9 of either (`status.load.rps`,
    /// `status.load.activeConnections`) takes no new FederatedIngress, like one whose
    /// IngressPools are all saturated (docs/pools.md). Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,

    /// Cordon: when true, no new ingress is placed here and the cluster leaves every DNS
    /// answer; listeners already applied keep serving until uncordoned or unjoined.
    /// Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unschedulable: bool,

    /// The CIDR the VIPs of this cluster's IngressPools come from when a pool names none,
    /// e.g. `10.0.0.96/27` (one L2 domain: VRRP moves the VIPs between the members).
    /// Optional: without it, pools need their own `vipCIDR` or have no VIP.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "vipCIDR")]
    pub vip_cidr: Option<String>,
}

/// A geographic position in decimal degrees (WGS 84).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    /// Latitude in degrees, from -90 (south pole) to 90 (north pole).
    pub latitude: f64,
    /// Longitude in degrees, from -180 (west) to 180 (east).
    pub longitude: f64,
}

string_enum! {
    /// Infrastructure a cluster runs on.
    #[derive(Default)]
    pub enum Provider {
        /// Amazon Web Services.
        Aws => "aws",
        /// Google Cloud.
        Gcp => "gcp",
        /// Microsoft Azure.
        Azure => "azure",
        /// Own data centre or bare metal (e.g. MetalLB).
        OnPrem => "onprem",
        /// Anything else; generic rendering.
        #[default]
        Other => "other",
    }
}

/// How much traffic a cluster can take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// Requests plus new connections per second the cluster can serve (at least 0), in
    /// the unit of `status.load.rps`; the Overflow strategy's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps: Option<i64>,
    /// Concurrent connections the cluster can hold (at least 0). No routing strategy
    /// reads it; placement does (a cluster at 0.9 of it takes no new ingress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<i64>,
}

string_enum! {
    /// How a cluster's agent serves ingresses.
    pub enum AgentDriver {
        /// The agent itself proxies TCP, UDP, HTTP and TLS on the cluster's addresses.
        Standalone => "standalone",
        /// The agent applies Ingress and Service objects to a Kubernetes cluster.
        Kubernetes => "kubernetes",
    }
}

/// What the hub last observed about a member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Whether the cluster's agent holds a live connection and lease to the hub.
    #[serde(default)]
    pub connected: bool,

    /// Version of the connected agent, e.g. `0.1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,

    /// How the agent serves ingresses: `standalone` or `kubernetes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<AgentDriver>,

    /// When the hub last heard from the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,

    /// Addresses on which the cluster serves ingresses: IPs (IPv4 and IPv6) or, e.g.
    /// behind a cloud load balancer, host names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,

    /// Load last reported by the agent; the Overflow strategy reads `rps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<ClusterLoad>,

    /// The agent's BGP speaker (it announces the anycast addresses of the Anycast
    /// ingresses placed here), as the agent last reported it; absent when the agent has
    /// no BGP speaker configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker: Option<SpeakerStatus>,

    /// The cluster's members (agents), by name; the first
    /// [`MEMBERS_LISTED`](crate::pool::MEMBERS_LISTED) only: `memberCount` and
    /// `readyMembers` are always exact. A cluster with one agent has one member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub members: Vec<MemberStatus>,

    /// Members known: connected, or disconnected less than
    /// [`MEMBER_FORGOTTEN_AFTER`] ago.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub member_count: i32,

    /// Members connected now.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_members: i32,

    /// Observed state: `Connected`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// One member (agent) of a cluster, as the hub last heard from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member's name (`member.name` of its agent; default its host name).
    pub name: String,
    /// Its session is open and within its lease.
    #[serde(default)]
    pub connected: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<AgentDriver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// The real address VRRP peers reach it on (`member.address`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// The addresses it serves on (the first 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,
    /// The IngressPools it is in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<String>,
    /// Per pool, its keepalived's VRRP state (`MASTER`, `BACKUP`, `FAULT`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vrrp: Vec<MemberVrrp>,
    /// Its load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<ClusterLoad>,
}

/// A member's VRRP state for one pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberVrrp {
    pub pool: String,
    pub state: String,
}

/// An address where a cluster (or one ingress on it) can be reached: exactly one of
/// `ip` and `hostname`. IPs become A/AAAA records, host names CNAME records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Address {
    /// An IPv4 or IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    /// A DNS name, e.g. of a cloud load balancer (`abc.elb.amazonaws.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

impl Address {
    /// An IP address.
    pub fn ip(ip: IpAddr) -> Self {
        Address {
            ip: Some(ip),
            hostname: None,
        }
    }

    /// A host name.
    pub fn hostname(hostname: impl Into<String>) -> Self {
        Address {
            ip: None,
            hostname: Some(hostname.into()),
        }
    }

    /// Validates that exactly one of `ip` and `hostname` is set and the host name is a
    /// DNS name.
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match (&self.ip, &self.hostname) {
            (None, None) => errs.push(FieldError::required(
                path.clone(),
                "one of ip and hostname is required",
            )),
            (Some(_), Some(_)) => errs.push(FieldError::forbidden(
                path.child("hostname"),
                "may not be set together with ip",
            )),
            (None, Some(hostname)) => {
                for msg in names::non_wildcard_hostname(hostname) {
                    errs.push(FieldError::invalid(path.child("hostname"), hostname, msg));
                }
            }
            (Some(_), None) => {}
        }
        errs
    }
}

/// Load last reported by a cluster's agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLoad {
    /// Per second: HTTP(S) requests plus new TCP connections, UDP sessions and TLS
    /// connections across the agent's listeners; an HTTP(S) listener's connections are
    /// not counted again. Reported by the standalone driver (the kubernetes driver
    /// reports 0). Overflow compares it with `spec.capacity.rps`.
    #[serde(default)]
    pub rps: f64,
    /// Connections currently open across all listeners.
    #[serde(default)]
    pub active_connections: i64,
    /// CPU of the data plane (the agent process), as a share of the host's cores, 0-1;
    /// for a cluster, the busiest member's. The kubernetes driver reports its own
    /// process (it does not proxy).
    #[serde(default)]
    pub cpu: f64,
    /// CPU use of the whole host, 0-1 (for a cluster: the busiest member's).
    #[serde(default)]
    pub host_cpu: f64,
    /// Bytes per second through the listeners, both directions (the standalone driver;
    /// the kubernetes driver reports 0: the traffic does not cross it).
    #[serde(default)]
    pub bytes_per_second: f64,
}

/// A cluster agent's BGP speaker, as the agent reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeakerStatus {
    /// The speaker answers the agent and is configured. While it is not, the cluster
    /// announces no anycast address.
    #[serde(default)]
    pub up: bool,
    /// BGP peers configured.
    #[serde(default)]
    pub peers: i32,
    /// Peers whose BGP session is established.
    #[serde(default)]
    pub established_peers: i32,
    /// What is wrong, in the agent's words (empty when nothing is).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Cluster {
    /// A cluster named `name` with `apiVersion` and `kind` set.
    pub fn new(name: impl Into<String>, spec: ClusterSpec) -> Self {
        Cluster {
            api_version: API_VERSION.to_owned(),
            kind: <Cluster as Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }

    /// The name, or `""` when unset.
    pub fn name(&self) -> &str {
        self.metadata.name_str()
    }

    /// Whether the agent is connected (status present and `connected: true`).
    pub fn is_connected(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.connected)
    }
}

/// `[a-z0-9-]+`, at most 63 characters: regions and zones as clouds spell them.
fn region_like(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > names::DNS1123_LABEL_MAX_LEN {
        errs.push(format!(
            "must be no more than {} characters",
            names::DNS1123_LABEL_MAX_LEN
        ));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push(
            "must consist of lower case alphanumeric characters or '-' (e.g. 'europe-west1')"
                .to_owned(),
        );
    }
    errs
}

impl ClusterSpec {
    /// Validates the spec at `path` (usually `spec`).
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.region.is_empty() {
            errs.push(FieldError::required(path.child("region"), ""));
        } else {
            for msg in region_like(&self.region) {
                errs.push(FieldError::invalid(path.child("region"), &self.region, msg));
            }
        }
        if let Some(zone) = &self.zone {
            if zone.is_empty() {
                errs.push(FieldError::invalid(
                    path.child("zone"),
                    zone,
                    "must not be empty when set",
                ));
            }
            for msg in region_like(zone) {
                errs.push(FieldError::invalid(path.child("zone"), zone, msg));
            }
        }
        match &self.location {
            None => errs.push(FieldError::required(
                path.child("location"),
                "latitude and longitude of the cluster are required",
            )),
            Some(location) => {
                let at = path.child("location");
                if !(location.latitude.is_finite() && (-90.0..=90.0).contains(&location.latitude)) {
                    errs.push(FieldError::invalid(
                        at.child("latitude"),
                        location.latitude,
                        "must be between -90 and 90",
                    ));
                }
                if !(location.longitude.is_finite()
                    && (-180.0..=180.0).contains(&location.longitude))
                {
                    errs.push(FieldError::invalid(
                        at.child("longitude"),
                        location.longitude,
                        "must be between -180 and 180",
                    ));
                }
            }
        }
        if let Some(cidr) = &self.vip_cidr
            && let Err(msg) = crate::cidr::parse_cidr(cidr)
        {
            errs.push(FieldError::invalid(path.child("vipCIDR"), cidr, msg));
        }
        if let Some(capacity) = &self.capacity {
            let at = path.child("capacity");
            for (field, value) in [("rps", capacity.rps), ("connections", capacity.connections)] {
                if let Some(value) = value
                    && value < 0
                {
                    errs.push(FieldError::invalid(
                        at.child(field),
                        value,
                        "must be greater than or equal to 0",
                    ));
                }
            }
        }
        errs
    }
}

impl ClusterStatus {
    /// Validates the status at `path` (usually `status`): addresses well-formed, load not
    /// negative.
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, address) in self.addresses.iter().enumerate() {
            errs.extend(address.validate(&path.child("addresses").index(i)));
        }
        if let Some(load) = &self.load {
            let at = path.child("load");
            for (field, value) in [
                ("rps", load.rps),
                ("cpu", load.cpu),
                ("hostCpu", load.host_cpu),
                ("bytesPerSecond", load.bytes_per_second),
            ] {
                if !(value.is_finite() && value >= 0.0) {
                    errs.push(FieldError::invalid(
                        at.child(field),
                        value,
                        "must be greater than or equal to 0",
                    ));
                }
            }
            if load.active_connections < 0 {
                errs.push(FieldError::invalid(
                    at.child("activeConnections"),
                    load.active_connections,
                    "must be greater than or equal to 0",
                ));
            }
        }
        if let Some(speaker) = &self.speaker {
            let at = path.child("speaker");
            for (field, value) in [
                ("peers", speaker.peers),
                ("establishedPeers", speaker.established_peers),
            ] {
                if value < 0 {
                    errs.push(FieldError::invalid(
                        at.child(field),
                        value,
                        "must be greater than or equal to 0",
                    ));
                }
            }
        }
        errs
    }
}

impl Resource for Cluster {
    const KIND: &'static str = "Cluster";
    const LIST_KIND: &'static str = "ClusterList";
    const PLURAL: &'static str = "clusters";
    const SINGULAR: &'static str = "cluster";
    const SHORT_NAMES: &'static [&'static str] = &["fcl"];
    const NAMESPACED: bool = false;

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

    /// Nothing to fill in beyond what decoding already defaults (`provider: other`,
    /// `unschedulable: false`).
    fn apply_defaults(&mut self) {}

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validate_object_meta(
            &self.metadata,
            Self::NAMESPACED,
            names::dns1123_label,
            &FieldPath::new("metadata"),
        );
        errs.extend(self.spec.validate(&FieldPath::new("spec")));
        if let Some(status) = &self.status {
            errs.extend(status.validate(&FieldPath::new("status")));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eu_west() -> Cluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "eu-west", "labels": {"env": "prod", "provider": "gcp"}},
            "spec": {
                "region": "europe-west1",
                "zone": "europe-west1-b",
                "location": {"latitude": 50.45, "longitude": 3.82},
                "provider": "GCP",
                "capacity": {"rps": 5000, "connections": 20000},
                "unschedulable": false,
            },
            "status": {
                "connected": true,
                "agentVersion": "0.1.0",
                "driver": "standalone",
                "lastHeartbeatTime": "2026-11-21T10:00:00Z",
                "addresses": [{"ip": "127.0.0.12"}, {"ip": "::1"}, {"hostname": "abc.elb.amazonaws.com"}],
                "load": {"rps": 1200, "activeConnections": 340, "cpu": 0.41},
                "speaker": {"up": true, "peers": 2, "establishedPeers": 1},
                "conditions": [{"type": "Connected", "status": "True"}, {"type": "Ready", "status": "True"}],
            },
        }))
        .unwrap()
    }

    fn errors(c: &Cluster) -> Vec<String> {
        c.validate().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn design_example_round_trips_canonical() {
        let c = eu_west();
        assert_eq!(c.spec.provider, Provider::Gcp);
        assert!(c.is_connected());
        assert!(errors(&c).is_empty(), "{:?}", errors(&c));
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["spec"]["provider"], "gcp");
        // unschedulable: false is omitted.
        assert!(json["spec"].get("unschedulable").is_none());
        assert_eq!(json["status"]["addresses"][1]["ip"], "::1");
        assert_eq!(json["status"]["lastHeartbeatTime"], "2026-11-21T10:00:00Z");
        assert_eq!(json["status"]["speaker"]["establishedPeers"], 1);
        // An empty message is omitted.
        assert!(json["status"]["speaker"].get("message").is_none());
        let back: Cluster = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn provider_case_insensitive() {
        for (input, want) in [
            ("aws", Provider::Aws),
            ("AWS", Provider::Aws),
            ("OnPrem", Provider::OnPrem),
            ("Azure", Provider::Azure),
        ] {
            assert_eq!(
                serde_json::from_value::<Provider>(serde_json::json!(input)).unwrap(),
                want
            );
            assert_eq!(input.parse::<Provider>().unwrap(), want);
        }
        assert_eq!(serde_json::to_value(Provider::OnPrem).unwrap(), "onprem");
        let err = serde_json::from_value::<Provider>(serde_json::json!("ibm")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Unsupported value: \"ibm\": supported values: \"aws\", \"gcp\", \"azure\", \"onprem\", \"other\""
        );
        let spec: ClusterSpec = serde_json::from_value(serde_json::json!({"region": "x"})).unwrap();
        assert_eq!(spec.provider, Provider::Other);
    }

    #[test]
    fn validation() {
        let mut c = Cluster::new("EU.west", ClusterSpec::default());
        c.metadata.namespace = Some("default".into());
        assert_eq!(
            errors(&c),
            vec![
                "metadata.name: Invalid value: \"EU.west\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')",
                "metadata.namespace: Forbidden: not allowed on this type",
                "spec.region: Required value",
                "spec.location: Required value: latitude and longitude of the cluster are required",
            ]
        );

        let mut c = eu_west();
        c.spec.region = "Europe_West".into();
        c.spec.zone = Some(String::new());
        c.spec.location = Some(Location {
            latitude: 91.0,
            longitude: f64::NAN,
        });
        c.spec.capacity = Some(Capacity {
            rps: Some(-1),
            connections: Some(0),
        });
        assert_eq!(
            errors(&c),
            vec![
                "spec.region: Invalid value: \"Europe_West\": must consist of lower case alphanumeric characters or '-' (e.g. 'europe-west1')",
                "spec.zone: Invalid value: \"\": must not be empty when set",
                "spec.location.latitude: Invalid value: 91.0: must be between -90 and 90",
                "spec.location.longitude: Invalid value: null: must be between -180 and 180",
                "spec.capacity.rps: Invalid value: -1: must be greater than or equal to 0",
            ]
        );

        let mut c = eu_west();
        c.spec.location = Some(Location {
            latitude: -90.0,
            longitude: 180.0,
        });
        assert!(errors(&c).is_empty());
        c.spec.location = Some(Location {
            latitude: 0.0,
            longitude: -180.5,
        });
        assert_eq!(
            errors(&c),
            vec!["spec.location.longitude: Invalid value: -180.5: must be between -180 and 180"]
        );
    }

    #[test]
    fn vip_cidr_must_be_a_network_cidr() {
        let mut c = eu_west();
        c.spec.vip_cidr = Some("10.0.0.96/27".into());
        assert!(errors(&c).is_empty(), "{:?}", errors(&c));
        for bad in ["10.0.0.97/27", "nope", "10.0.0.0/33"] {
            c.spec.vip_cidr = Some(bad.into());
            let errs = errors(&c);
            assert!(
                errs.len() == 1 && errs[0].starts_with("spec.vipCIDR: Invalid value"),
                "{bad}: {errs:?}"
            );
        }
    }

    #[test]
    fn status_validation() {
        let mut c = eu_west();
        let status = c.status.as_mut().unwrap();
        status.addresses = vec![
            Address::default(),
            Address {
                ip: Some("10.0.0.1".parse().unwrap()),
                hostname: Some("a.example.com".into()),
            },
            Address::hostname("Bad_Name"),
        ];
        status.load = Some(ClusterLoad {
            rps: -1.0,
            active_connections: -2,
            cpu: 0.5,
            ..ClusterLoad::default()
        });
        status.speaker = Some(SpeakerStatus {
            up: false,
            peers: -1,
            established_peers: 0,
            message: String::new(),
        });
        let errs = errors(&c);
        let fields: Vec<&str> = errs.iter().map(|e| e.split(':').next().unwrap()).collect();
        assert_eq!(
            fields,
            vec![
                "status.addresses[0]",
                "status.addresses[1].hostname",
                "status.addresses[2].hostname",
                "status.load.rps",
                "status.load.activeConnections",
                "status.speaker.peers",
            ]
        );
    }

    #[test]
    fn resource_impl() {
        let mut c = eu_west();
        assert_eq!(c.spec_value()["region"], "europe-west1");
        let other = Cluster::new("x", ClusterSpec::default());
        c.copy_status_from(&other);
        assert!(c.status.is_none());
        let with_status = eu_west();
        c.copy_status_from(&with_status);
        assert!(c.status.is_some());
        c.clear_status();
        assert!(c.status.is_none());
        assert_eq!(Cluster::SHORT_NAMES, &["fcl"]);
        const { assert!(!Cluster::NAMESPACED) };
        let before = c.clone();
        c.apply_defaults();
        assert_eq!(c, before);
    }

    #[test]
    fn schema_has_descriptions_and_enums() {
        let schema = serde_json::to_value(schemars::schema_for!(Cluster)).unwrap();
        let text = schema.to_string();
        assert!(text.contains("Cordon: when true"), "{text}");
        assert!(
            text.contains("\"enum\":[\"aws\",\"gcp\",\"azure\",\"onprem\",\"other\"]"),
            "{text}"
        );
    }
}
