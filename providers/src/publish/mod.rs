//! DNS providers: the hub publishes its routing decisions to the cloud DNS services
//! where users' zones live (Route53, Google Cloud DNS), with each cloud's native routing
//! policies, and delegates the embedded server's zones from a parent zone there.
//!
//! The pieces, pure ones apart from I/O (decide, then apply):
//! - this module: the provider-neutral model ([`PolicyRecordSet`], [`Desired`]), the
//!   ownership marker ([`Owner`]), what a sync reports ([`SyncReport`]) and the
//!   [`DnsProvider`] trait a cloud implements;
//! - [`desired`]: routed ingresses → the policy record sets a provider should hold,
//!   derived from the same [`RoutedIngress`](fedingress_dns::RoutedIngress)es the embedded server
//!   answers from, and the delegation records of the embedded zones;
//! - [`plan`]: a diff of a provider's native record sets against what it holds, limited
//!   to the record sets this federation owns (one TXT record per record set carries the
//!   owner id), grouped per DNS name into batches;
//! - [`call`]: every provider API call goes through one policy: a rate limit, retries
//!   with exponential backoff and jitter on throttling and transient errors;
//! - [`sync`]: the loop per provider: a sync after answer-relevant changes (debounced),
//!   a periodic resync that repairs drift, results per DNS name for status.
//!
//! The clouds themselves live in the `fedingress-providers` crate, so that this crate
//! (and the DNS server) builds without any cloud SDK.

pub mod call;
pub mod desired;
pub mod plan;
pub mod sync;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use fedingress_api::cluster::Provider as Cloud;
use fedingress_api::ingress::RecordType;
use serde::{Deserialize, Serialize};

use fedingress_dns::Location;

/// How one record set is steered, provider-neutral. Each provider maps it to a native
/// policy (see docs/providers.md for the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Policy {
    /// One answer for everyone: the targets' values together (Anycast, delegation, and
    /// whatever a provider cannot express natively).
    Simple,
    /// Every healthy target, each health-checked on its own (RoundRobin).
    Multivalue,
    /// Targets in proportion to [`Target::weight`] (Weighted).
    Weighted,
    /// The first [`Target::tier`] with a healthy target (Failover).
    Failover,
    /// The target with the lowest latency from the client (Latency).
    Latency,
    /// The target nearest to the client (Geo, and Overflow without its load spill).
    Geo,
}

/// One cluster's part of a [`PolicyRecordSet`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Cluster name (a Route53 set identifier; a Cloud DNS item's label in status).
    /// Empty for the one target of a record set that belongs to no cluster (anycast
    /// addresses, a delegation's NS and glue); such record sets are `Simple`.
    pub cluster: String,
    /// Record data in presentation format (IPs for A/AAAA, SRV data, TXT text).
    pub values: Vec<String>,
    /// A load balancer host name this cluster serves on (CNAME, or a Route53 alias when
    /// it is an AWS load balancer), instead of `values`.
    pub hostname: Option<String>,
    /// Relative weight (Weighted; 1 elsewhere).
    pub weight: u32,
    /// Failover tier, 0 first (Failover; 0 elsewhere).
    pub tier: u32,
    /// Where the cluster is: `region` is the cluster's `spec.region`.
    pub location: Location,
    /// The infrastructure the cluster runs on (`spec.provider`): a cluster on `aws` has
    /// an AWS region as its `spec.region`, one on `gcp` a Google Cloud region.
    pub cloud: Cloud,
    /// What a cloud health check probes for this target, when it has an endpoint to probe.
    pub health: Option<HealthEndpoint>,
}

/// A cloud health check's target for one cluster endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthEndpoint {
    /// The IP probed, or `None` when `hostname` is.
    pub ip: Option<IpAddr>,
    pub hostname: Option<String>,
    pub port: u16,
    pub protocol: HealthProtocol,
    /// Request path (HTTP, HTTPS).
    pub path: Option<String>,
    /// Host header / SNI (HTTP, HTTPS).
    pub host: Option<String>,
}

/// How a health check probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HealthProtocol {
    Tcp,
    Http,
    Https,
}

/// One record set the federation wants a provider to hold: a name and type, with its
/// policy over the clusters that may answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRecordSet {
    /// Fully qualified, lower case, without the trailing dot.
    pub name: String,
    /// `A`, `AAAA` or `CNAME` for ingresses; `NS`, `A`, `AAAA` for a delegation.
    #[serde(rename = "type")]
    pub type_: RecordType,
    pub ttl: u32,
    /// `namespace/name` of the FederatedIngress it comes from, or `zone/<apex>` for a
    /// delegation.
    pub owner_ref: String,
    /// The DNS name whose status this record set reports to (the ingress's `dnsName`, or
    /// the delegated zone's apex).
    pub dns_name: String,
    pub policy: Policy,
    /// Sorted by cluster name; empty targets mean the record set should not exist.
    pub targets: Vec<Target>,
}

/// Everything every provider should hold, at one DNS serial.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    /// The SOA serial of the DNS state these record sets were derived from.
    pub serial: u32,
    /// Sorted by (name, type).
    pub record_sets: Vec<PolicyRecordSet>,
}

impl Desired {
    /// The record sets a provider may manage (see [`DnsProvider::manages`]).
    pub fn for_provider<'a>(
        &'a self,
        provider: &'a dyn DnsProvider,
    ) -> impl Iterator<Item = &'a PolicyRecordSet> + 'a {
        self.record_sets
            .iter()
            .filter(move |r| provider.manages(&r.name))
    }
}

/// The federation's identity in a provider's zone: one TXT record per owned record set,
/// `"heritage=fedingress,fedingress/owner=<id>,fedingress/resource=<owner_ref>"`, at
/// [`Owner::marker_name`] (a name of its own, because a CNAME cannot share its name with a
/// TXT record, as ExternalDNS's TXT registry learnt). The marker functions
/// ([`Owner::marker_name`], [`Owner::marker_value`], [`Owner::claims`]) are in [`plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub id: String,
}

/// A provider operation that failed, classified for the retry policy.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// The provider asked us to slow down (Route53 `Throttling`/`PriorRequestNotComplete`,
    /// HTTP 429): retried with backoff.
    #[error("{operation}: throttled by the provider: {message}")]
    Throttled {
        operation: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A network error or a 5xx: retried with backoff.
    #[error("{operation}: {message}")]
    Transient { operation: String, message: String },
    /// The provider refused the request (invalid change, missing permission, unknown
    /// zone): not retried; reported in status.
    #[error("{operation}: rejected by the provider: {message}")]
    Rejected { operation: String, message: String },
    /// The provider cannot be called as this process is configured (no cloud
    /// credentials): not retried, since another try finds the same; reported in status.
    #[error("{operation}: configuration error: {message}")]
    Misconfigured { operation: String, message: String },
}

impl ProviderError {
    /// Whether [`call`] retries it.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::Throttled { .. } | ProviderError::Transient { .. }
        )
    }
}

/// How a sync runs.
#[derive(Clone, Debug)]
pub struct SyncOptions {
    pub owner: Owner,
    /// Plan and report, change nothing.
    pub dry_run: bool,
    /// Changes per batch, at most (a provider may send fewer to keep within its own
    /// request limits, e.g. Route53 counts values and characters).
    pub batch_size: usize,
}

/// One record as a provider holds it after a sync, for status and `fedctl describe`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishedRecord {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    /// Route53 set identifier (the cluster), empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub set_identifier: String,
    /// The native policy in words, e.g. `weighted 3`, `failover PRIMARY`,
    /// `latency us-east-1`, `geoproximity 50.11,8.68`, `multivalue`, `geo europe-west1`,
    /// `wrr 0.75`, `primaryBackup primary`, `simple`, `alias`.
    pub policy: String,
    pub values: Vec<String>,
    /// The cloud health check guarding it, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health_check: String,
}

/// What happened to one DNS name in a sync.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NameResult {
    /// The provider holds the desired record sets.
    pub synced: bool,
    /// Why not, for people (a rejected change, a foreign record set in the way).
    pub message: String,
    /// What the provider holds for this name (or would hold, on a dry run).
    pub records: Vec<PublishedRecord>,
    /// Changes made (or planned, on a dry run) for this name in this sync.
    pub changes: usize,
}

/// The outcome of one [`DnsProvider::sync`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    /// Per DNS name (an ingress's `dnsName` or a delegated apex).
    pub names: BTreeMap<String, NameResult>,
    /// Record changes applied (or planned, on a dry run).
    pub changes: usize,
    /// Health checks created, updated and deleted (or planned, on a dry run).
    pub health_checks_changed: usize,
    /// Nothing was changed: the counts are what a real sync would do.
    pub dry_run: bool,
}

/// A cloud DNS service the hub publishes to.
///
/// An implementation lists what it holds in its zone, derives its native record sets from
/// the desired ones, diffs them with [`plan`] (never touching a record set without this
/// federation's ownership marker), and applies the changes in batches through
/// [`call::CallPolicy`]. One failed DNS name never stops the others.
#[async_trait::async_trait]
pub trait DnsProvider: Send + Sync + 'static {
    /// The configured name, e.g. `aws-prod`.
    fn name(&self) -> &str;
    /// `route53` or `clouddns`.
    fn kind(&self) -> &'static str;
    /// Whether `name` (fully qualified, lower case, no trailing dot) is inside this
    /// provider's zone and its configured names or suffixes.
    fn manages(&self, name: &str) -> bool;
    /// Bring the provider to `desired` (already filtered with [`DnsProvider::manages`]).
    /// `Err` only when nothing could be done at all (zone unreadable); per-name failures
    /// are in the report.
    async fn sync(
        &self,
        desired: &[&PolicyRecordSet],
        options: &SyncOptions,
    ) -> Result<SyncReport, ProviderError>;
    /// Which of `records` a client at `client` would get, in one sentence, as this
    /// provider would choose (for `explain`).
    fn explain(&self, records: &[PublishedRecord], client: &Location) -> String;
    /// The counters of this provider's [`call::CallPolicy`] (for `/metrics`); zero for a
    /// provider without one.
    fn call_stats(&self) -> call::CallStats {
        call::CallStats::default()
    }
}
