//! The agent protocol's domain types: the plan the hub pushes to one cluster's agent
//! (its share of every FederatedIngress placed there), deltas between plans, and the
//! reports agents send back. Generated protobuf types convert to and from these in
//! `fedingress-proto` and nowhere else.
//!
//! [`cluster_plans`] builds every cluster's plan from the placements
//! ([`crate::placement`]) and the conflicts between them ([`crate::conflict`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::cluster::Address;
use crate::conflict::{Conflict, PlacedIngress};
use crate::ingress::{ClusterOverride, FederatedIngress, IngressRule, IngressTls, StrategyType};

// Shares, rule errors and reports name their ingress by it: the agent protocol's users
// (the hub, the agent, fedingress-proto) import it from here.
pub use crate::ingress_key::IngressKey;

/// One FederatedIngress as one cluster serves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IngressShare {
    pub key: IngressKey,
    pub uid: String,
    /// `metadata.generation` of the FederatedIngress this share was built from.
    pub generation: i64,
    /// Every rule, of every protocol; an agent that cannot serve one says so per rule.
    pub rules: Vec<IngressRule>,
    pub tls: Vec<IngressTls>,
    /// The override for this cluster, if any.
    pub cluster_override: Option<ClusterOverride>,
    /// Anycast strategy only: the addresses the cluster announces while it serves the
    /// share (applied, healthy, not draining, not cordoned); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anycast_addresses: Vec<IpAddr>,
}

impl IngressShare {
    /// The share of `ingress` that `cluster` serves: every rule and certificate, and the
    /// override whose `cluster` is `cluster` (the first, should there be several) without
    /// its `poolSelector` (the hub's business: agents are not sent it).
    pub fn of(ingress: &FederatedIngress, cluster: &str) -> Self {
        IngressShare {
            key: IngressKey::of(ingress),
            uid: ingress.metadata.uid.clone().unwrap_or_default(),
            generation: ingress.metadata.generation.unwrap_or_default(),
            rules: ingress.spec.rules.clone(),
            tls: ingress.spec.tls.clone(),
            cluster_override: ingress
                .spec
                .overrides
                .iter()
                .find(|o| o.cluster == cluster)
                .map(|o| ClusterOverride {
                    pool_selector: None,
                    ..o.clone()
                }),
            anycast_addresses: anycast_addresses(ingress),
        }
    }
}

/// The anycast addresses of `ingress` when its strategy is Anycast (validation has
/// checked that they parse; one that does not is left out).
fn anycast_addresses(ingress: &FederatedIngress) -> Vec<IpAddr> {
    let strategy = &ingress.spec.traffic.strategy;
    if strategy.type_ != StrategyType::Anycast {
        return Vec::new();
    }
    strategy
        .anycast_addresses
        .iter()
        .flatten()
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// A plan's shares by key, read like a `BTreeMap<IngressKey, Arc<IngressShare>>`
/// (through `Deref`) and changed through [`Shares::insert`] and [`Shares::remove`].
///
/// Nothing here is copied per cluster: cloning is O(1) and clones share one map until
/// one of them changes (copy on write); every share is reference-counted, so plans that
/// differ in one share hold the others once; [`cluster_plans`] gives clusters with the
/// same shares the same map, whose [`ClusterPlan::digest`] is then computed once. A hub
/// with 5,000 clusters × 1,000 ingresses on every cluster holds 1,000 shares, not
/// 5,000,000 (issue 9).
#[derive(Clone, Default)]
pub struct Shares(Arc<SharesInner>);

#[derive(Default)]
struct SharesInner {
    map: BTreeMap<IngressKey, Arc<IngressShare>>,
    /// [`ClusterPlan::digest`] of `map`, once computed.
    digest: OnceLock<String>,
}

impl Clone for SharesInner {
    /// Only [`Shares::make_mut`] clones, right before a change: the digest is not kept.
    fn clone(&self) -> Self {
        Self {
            map: self.map.clone(),
            digest: OnceLock::new(),
        }
    }
}

impl Shares {
    /// Files `share` under `key` (its own key, as [`cluster_plans`] does); returns the
    /// share that was there.
    pub fn insert(
        &mut self,
        key: IngressKey,
        share: impl Into<Arc<IngressShare>>,
    ) -> Option<Arc<IngressShare>> {
        self.make_mut().insert(key, share.into())
    }

    pub fn remove(&mut self, key: &IngressKey) -> Option<Arc<IngressShare>> {
        if !self.0.map.contains_key(key) {
            return None;
        }
        self.make_mut().remove(key)
    }

    /// The map, copied first if another plan shares it; the digest is forgotten.
    fn make_mut(&mut self) -> &mut BTreeMap<IngressKey, Arc<IngressShare>> {
        let inner = Arc::make_mut(&mut self.0);
        inner.digest = OnceLock::new();
        &mut inner.map
    }
}

impl std::ops::Deref for Shares {
    type Target = BTreeMap<IngressKey, Arc<IngressShare>>;

    fn deref(&self) -> &Self::Target {
        &self.0.map
    }
}

impl PartialEq for Shares {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.len() == other.len()
                && self
                    .iter()
                    .zip(other.iter())
                    .all(|((k1, s1), (k2, s2))| k1 == k2 && same_share(s1, s2)))
    }
}

impl std::fmt::Debug for Shares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.map.fmt(f)
    }
}

impl From<BTreeMap<IngressKey, Arc<IngressShare>>> for Shares {
    fn from(map: BTreeMap<IngressKey, Arc<IngressShare>>) -> Self {
        Self(Arc::new(SharesInner {
            map,
            digest: OnceLock::new(),
        }))
    }
}

impl FromIterator<(IngressKey, Arc<IngressShare>)> for Shares {
    fn from_iter<I: IntoIterator<Item = (IngressKey, Arc<IngressShare>)>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<BTreeMap<_, _>>())
    }
}

impl FromIterator<(IngressKey, IngressShare)> for Shares {
    fn from_iter<I: IntoIterator<Item = (IngressKey, IngressShare)>>(iter: I) -> Self {
        iter.into_iter().map(|(k, s)| (k, Arc::new(s))).collect()
    }
}

impl<'a> IntoIterator for &'a Shares {
    type Item = (&'a IngressKey, &'a Arc<IngressShare>);
    type IntoIter = std::collections::btree_map::Iter<'a, IngressKey, Arc<IngressShare>>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.map.iter()
    }
}

/// Equal shares; the same share (one `Arc`) without comparing contents.
fn same_share(a: &Arc<IngressShare>, b: &Arc<IngressShare>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// Everything one cluster's agent (or one member's) serves. Without pools it
/// serialises as a list of shares in key order (`plan.json` of the agent, the digest),
/// as before pools existed; with pools, as `{ingresses, pools}`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterPlan {
    pub ingresses: Shares,
    /// The cluster's pools, which pools serve which shares, and the pools to provision;
    /// empty for a cluster without pools.
    pub pools: Arc<PoolPlan>,
}

/// A cluster's pools as its members run them. See `docs/pools.md`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlan {
    /// Every pool that has members, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolAssignment>,
    /// The pools that serve a share (two while it moves from one to the other). A share
    /// not listed is served by the members that are in no pool.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "bindings_as_list"
    )]
    pub bindings: BTreeMap<IngressKey, Vec<String>>,
    /// Pools the cluster's agent runs as workloads (kubernetes driver), from claims.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisions: Vec<PoolProvision>,
}

/// Bindings as a JSON list of `{key, pools}` (an object key is only a string).
mod bindings_as_list {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::IngressKey;

    #[derive(Serialize, Deserialize)]
    struct Binding {
        key: IngressKey,
        pools: Vec<String>,
    }

    pub fn serialize<S: Serializer>(
        bindings: &BTreeMap<IngressKey, Vec<String>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(bindings.iter().map(|(key, pools)| Binding {
            key: key.clone(),
            pools: pools.clone(),
        }))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<IngressKey, Vec<String>>, D::Error> {
        Ok(Vec::<Binding>::deserialize(deserializer)?
            .into_iter()
            .map(|b| (b.key, b.pools))
            .collect())
    }
}

impl PoolPlan {
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty() && self.bindings.is_empty() && self.provisions.is_empty()
    }
}

/// One pool as its members run VRRP for it: keepalived holds `vips` on the member with
/// the highest priority among the ready ones, its peers reached on their real addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolAssignment {
    pub name: String,
    /// The VIPs (none: the pool's members serve on their own addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vips: Vec<IpAddr>,
    /// The prefix length of the CIDR the VIPs come from (keepalived adds `vip/len`).
    #[serde(default)]
    pub prefix_len: u8,
    /// The VRRP group id, unique among the cluster's pools.
    #[serde(default)]
    pub virtual_router_id: u8,
    /// Every member of the pool, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<PoolPeer>,
}

/// A member of a pool, as its peers see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPeer {
    pub name: String,
    /// Its real address (`member.address`); VRRP peers send to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// Its VRRP priority, 1-254 (distinct within the pool).
    #[serde(default)]
    pub priority: u8,
}

/// A pool the cluster's (kubernetes) agent runs as a workload: the data plane in member
/// mode on `replicas` hosts, with keepalived. From an IngressClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolProvision {
    /// The IngressPool's name (the workload is named after it).
    pub name: String,
    pub replicas: u32,
    /// Labels each member carries (the pool's memberSelector matches them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub member_labels: BTreeMap<String, String>,
    /// Container resources as Kubernetes quantities.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

impl From<Vec<IngressShare>> for ClusterPlan {
    fn from(shares: Vec<IngressShare>) -> Self {
        Self {
            ingresses: shares.into_iter().map(|s| (s.key.clone(), s)).collect(),
            pools: Arc::default(),
        }
    }
}

/// `ClusterPlan` with pools, as serialised.
#[derive(Serialize)]
struct WithPools<'a> {
    ingresses: Vec<&'a IngressShare>,
    pools: &'a PoolPlan,
}

/// `ClusterPlan` as read back: a list of shares (no pools) or `{ingresses, pools}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredPlan {
    Shares(Vec<IngressShare>),
    WithPools {
        ingresses: Vec<IngressShare>,
        #[serde(default)]
        pools: PoolPlan,
    },
}

impl Serialize for ClusterPlan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.pools.is_empty() {
            serializer.collect_seq(self.ingresses.values().map(|share| &**share))
        } else {
            WithPools {
                ingresses: self.ingresses.values().map(|share| &**share).collect(),
                pools: &self.pools,
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for ClusterPlan {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match StoredPlan::deserialize(deserializer)? {
            StoredPlan::Shares(shares) => Self::from(shares),
            StoredPlan::WithPools { ingresses, pools } => Self {
                pools: Arc::new(pools),
                ..Self::from(ingresses)
            },
        })
    }
}

/// The change from one plan to the next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanDelta {
    /// Shared with the plan the delta leads to.
    pub upserts: Vec<Arc<IngressShare>>,
    pub deletes: Vec<IngressKey>,
    /// The whole new pool plan, when it changed.
    pub pools: Option<Arc<PoolPlan>>,
}

impl PlanDelta {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty() && self.pools.is_none()
    }
}

/// FNV-1a 64, fed by `serde_json::to_writer`.
struct Fnv1a(u64);

impl std::io::Write for Fnv1a {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ClusterPlan {
    /// A content digest (FNV-1a 64 over the canonical JSON, hex): equal plans have equal
    /// digests, on any machine and across restarts. Computed once per shared map; a plan
    /// with pools hashes the shares' digest with its pool plan.
    pub fn digest(&self) -> String {
        let shares = self.shares_digest();
        if self.pools.is_empty() {
            return shares;
        }
        let mut hash = Fnv1a(0xcbf2_9ce4_8422_2325);
        let _ = std::io::Write::write_all(&mut hash, shares.as_bytes());
        let _ = serde_json::to_writer(&mut hash, &*self.pools);
        format!("{:016x}", hash.0)
    }

    /// The members of `member`'s pools, its shares and pools: a member in pools gets the
    /// shares bound to them; a member in no pool gets the shares bound to no pool, and
    /// the pools to provision. A plan without pools is every member's whole plan.
    pub fn for_member(&self, member: &str) -> ClusterPlan {
        if self.pools.pools.is_empty() && self.pools.bindings.is_empty() {
            return self.clone();
        }
        let mine: Vec<&PoolAssignment> = self
            .pools
            .pools
            .iter()
            .filter(|p| p.members.iter().any(|m| m.name == member))
            .collect();
        let serves = |key: &IngressKey| match self.pools.bindings.get(key) {
            Some(pools) => pools.iter().any(|p| mine.iter().any(|m| &m.name == p)),
            None => mine.is_empty(),
        };
        let ingresses: Shares = self
            .ingresses
            .iter()
            .filter(|(key, _)| serves(key))
            .map(|(key, share)| (key.clone(), share.clone()))
            .collect();
        let pools = PoolPlan {
            pools: mine.iter().map(|p| (*p).clone()).collect(),
            bindings: self
                .pools
                .bindings
                .iter()
                .filter(|(key, _)| ingresses.contains_key(*key))
                .map(|(key, pools)| (key.clone(), pools.clone()))
                .collect(),
            provisions: if mine.is_empty() {
                self.pools.provisions.clone()
            } else {
                Vec::new()
            },
        };
        ClusterPlan {
            ingresses,
            pools: Arc::new(pools),
        }
    }

    /// The digest of the shares alone (the JSON list of a plan without pools), cached
    /// with the shares: it never covers the pools, which change without them.
    fn shares_digest(&self) -> String {
        self.ingresses
            .0
            .digest
            .get_or_init(|| {
                const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
                let mut hash = Fnv1a(OFFSET_BASIS);
                let shares: Vec<&IngressShare> = self.ingresses.values().map(|s| &**s).collect();
                // Fails only on a failing writer, and ours does not.
                let hash = match serde_json::to_writer(&mut hash, &shares) {
                    Ok(()) => hash.0,
                    Err(_) => OFFSET_BASIS,
                };
                format!("{hash:016x}")
            })
            .clone()
    }

    /// What turns `self` into `next`.
    pub fn delta_to(&self, next: &ClusterPlan) -> PlanDelta {
        let pools = (self.pools != next.pools).then(|| next.pools.clone());
        if Arc::ptr_eq(&self.ingresses.0, &next.ingresses.0) {
            return PlanDelta {
                pools,
                ..PlanDelta::default()
            };
        }
        let upserts = next
            .ingresses
            .iter()
            .filter(|(key, share)| {
                self.ingresses
                    .get(*key)
                    .is_none_or(|old| !same_share(old, share))
            })
            .map(|(_, share)| share.clone())
            .collect();
        let deletes = self
            .ingresses
            .keys()
            .filter(|key| !next.ingresses.contains_key(*key))
            .cloned()
            .collect();
        PlanDelta {
            upserts,
            deletes,
            pools,
        }
    }

    /// Applies a delta in place.
    pub fn apply(&mut self, delta: &PlanDelta) {
        if let Some(pools) = &delta.pools {
            self.pools = pools.clone();
        }
        if delta.upserts.is_empty() && delta.deletes.is_empty() {
            return;
        }
        let map = self.ingresses.make_mut();
        for key in &delta.deletes {
            map.remove(key);
        }
        for share in &delta.upserts {
            map.insert(share.key.clone(), share.clone());
        }
    }
}

/// Every cluster's plan: for each cluster named in any placement, a share of each
/// ingress placed there that has no conflict there (neither on that cluster nor
/// everywhere). A cluster left with no shares still gets an (empty) plan, so its agent
/// is told to serve nothing.
///
/// # Guarantees
///
/// Nothing is built per cluster × ingress: one share per ingress serves every cluster
/// without an override of its own (a share differs between clusters only in
/// `cluster_override`), and clusters with the same shares share one map ([`Shares`]).
///
/// # Assumptions
///
/// `conflicts` come from [`crate::conflict::find_conflicts`] over the same `placed`.
/// Objects being deleted are not left out here: the caller decides what to pass.
pub fn cluster_plans(
    placed: &[PlacedIngress],
    conflicts: &[Conflict],
) -> BTreeMap<String, ClusterPlan> {
    let mut lost_by: HashMap<&IngressKey, Vec<&Conflict>> = HashMap::new();
    for conflict in conflicts {
        lost_by.entry(&conflict.loser).or_default().push(conflict);
    }
    // Per cluster, its shares in the order of `placed` (a pointer each).
    let mut shares: BTreeMap<&str, Vec<Arc<IngressShare>>> = BTreeMap::new();
    for entry in placed {
        let key = IngressKey::of(entry.ingress);
        let lost = lost_by.get(&key).map(Vec::as_slice).unwrap_or_default();
        // Built on first use, for every cluster without an override.
        let mut common: Option<Arc<IngressShare>> = None;
        for cluster in &entry.clusters {
            let list = shares.entry(cluster).or_default();
            if lost.iter().any(|c| c.applies_to(cluster)) {
                continue;
            }
            let overridden = entry
                .ingress
                .spec
                .overrides
                .iter()
                .any(|o| &o.cluster == cluster);
            let share = if overridden {
                Arc::new(IngressShare::of(entry.ingress, cluster))
            } else {
                common
                    .get_or_insert_with(|| Arc::new(IngressShare::of(entry.ingress, cluster)))
                    .clone()
            };
            list.push(share);
        }
    }
    // Clusters with the same shares (the same pointers, in the same order) get one map.
    let mut built: HashMap<Vec<*const IngressShare>, Shares> = HashMap::new();
    shares
        .into_iter()
        .map(|(cluster, list)| {
            let pointers: Vec<*const IngressShare> = list.iter().map(Arc::as_ptr).collect();
            let ingresses = built
                .entry(pointers)
                .or_insert_with(|| list.into_iter().map(|s| (s.key.clone(), s)).collect())
                .clone();
            (
                cluster.to_owned(),
                ClusterPlan {
                    ingresses,
                    pools: Arc::default(),
                },
            )
        })
        .collect()
}

/// A rule an agent could not apply, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleError {
    pub ingress: IngressKey,
    /// Index into the share's `rules`.
    pub rule: u32,
    pub message: String,
}

/// Health of one backend service behind a share, as the agent measures it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendHealth {
    pub service: String,
    pub port: i32,
    /// Endpoints passing health checks.
    pub ready: u32,
    pub total: u32,
}

/// Load on one listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ListenerLoad {
    /// `TCP`, `UDP`, ...
    pub protocol: String,
    pub port: u16,
    pub connections_per_second: f64,
    pub active_connections: u64,
}

/// How one share is doing on one cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressReport {
    pub key: IngressKey,
    pub applied_generation: i64,
    pub addresses: Vec<Address>,
    pub backends: Vec<BackendHealth>,
    pub listeners: Vec<ListenerLoad>,
    pub rule_errors: Vec<RuleError>,
    /// Rules served on addresses other than `addresses` (a split TCP or UDP load
    /// balancer, say), by rule index; rules not listed are served on `addresses`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleAddresses>,
    /// Anycast shares: each anycast address's route on this cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anycast: Vec<AnycastRoute>,
}

/// One anycast address of a share, as the cluster's BGP speaker carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnycastRoute {
    pub address: IpAddr,
    /// The route is in the speaker's RIB, announced to its peers.
    pub announced: bool,
    /// Why it is announced or withdrawn, for people.
    pub reason: String,
}

/// The agent's BGP speaker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpeakerReport {
    /// The speaker answers its API and is configured.
    pub up: bool,
    pub peers: u32,
    pub established_peers: u32,
    /// What is wrong, for people (empty when nothing is).
    pub message: String,
}

/// Where one rule of a share is served, when that differs from the share's addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleAddresses {
    /// Index into the share's `rules`.
    pub rule: u32,
    pub addresses: Vec<Address>,
}

/// An agent's report: per share, plus the member's addresses and load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    pub ingresses: Vec<IngressReport>,
    pub addresses: Vec<Address>,
    pub requests_per_second: f64,
    pub active_connections: u64,
    /// The BGP speaker; `None` when the agent has no anycast configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker: Option<SpeakerReport>,
    /// CPU of the agent process as a share of the host's cores, 0-1.
    #[serde(default)]
    pub process_cpu: f64,
    /// CPU use of the whole host, 0-1.
    #[serde(default)]
    pub host_cpu: f64,
    /// Bytes per second through the data plane, both directions.
    #[serde(default)]
    pub bytes_per_second: f64,
    /// Per pool of the member's plan, its keepalived's VRRP state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vrrp: Vec<VrrpReport>,
}

/// A member's VRRP instance for one pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VrrpReport {
    pub pool: String,
    /// `MASTER`, `BACKUP`, `FAULT` or `INIT` (keepalived's words).
    pub state: String,
}

impl VrrpReport {
    /// Whether this member holds the pool's VIPs.
    pub fn is_master(&self) -> bool {
        self.state.eq_ignore_ascii_case("MASTER")
    }
}

impl AgentReport {
    /// IP addresses among the reported ones.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().filter_map(|a| a.ip)
    }

    /// The cluster's load in one number, per second: HTTP requests
    /// (`requests_per_second`: responses on the HTTP and HTTPS listeners) plus the new
    /// connections (TCP, TLS) and sessions (UDP) of the share listeners labelled `TCP`,
    /// `UDP` or `TLS`. It is `Cluster.status.load.rps`, and what Overflow compares with
    /// `spec.capacity.rps`, so the two always agree.
    ///
    /// The connections of listeners labelled `HTTP` or `HTTPS` are left out: their
    /// traffic is counted as requests, so a connection carrying one request (no
    /// keep-alive) counts once, not twice. A share's HTTPS and TLS rules on one port are
    /// one listener, labelled with the first rule's protocol: labelled `TLS`, its HTTPS
    /// connections count as connections too (on top of their requests); labelled
    /// `HTTPS`, its TLS connections are not counted. An agent that reports no counters
    /// (the kubernetes driver) has a load of 0.
    pub fn load_per_second(&self) -> f64 {
        let connections: f64 = self
            .ingresses
            .iter()
            .flat_map(|i| &i.listeners)
            .filter(|l| {
                !l.protocol.eq_ignore_ascii_case("HTTP")
                    && !l.protocol.eq_ignore_ascii_case("HTTPS")
            })
            .map(|l| l.connections_per_second)
            .sum();
        self.requests_per_second + connections
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingress::{Backend, Protocol};

    fn share(name: &str, port: i32) -> IngressShare {
        let mut rule = IngressRule::new(Protocol::Tcp);
        rule.port = Some(port);
        rule.backend = Some(Backend::new("echo", port));
        IngressShare {
            key: IngressKey::new("default", name),
            uid: format!("uid-{name}"),
            generation: 1,
            rules: vec![rule],
            tls: Vec::new(),
            cluster_override: None,
            anycast_addresses: Vec::new(),
        }
    }

    fn plan(shares: &[IngressShare]) -> ClusterPlan {
        ClusterPlan {
            ingresses: shares.iter().map(|s| (s.key.clone(), s.clone())).collect(),
            pools: Arc::default(),
        }
    }

    fn peer(name: &str, priority: u8) -> PoolPeer {
        PoolPeer {
            name: name.into(),
            address: Some(format!("10.0.0.{priority}").parse().unwrap()),
            priority,
        }
    }

    fn pooled() -> ClusterPlan {
        let mut plan = plan(&[share("a", 80), share("b", 81), share("c", 82)]);
        plan.pools = Arc::new(PoolPlan {
            pools: vec![
                PoolAssignment {
                    name: "gold".into(),
                    vips: vec!["10.0.0.100".parse().unwrap()],
                    prefix_len: 24,
                    virtual_router_id: 1,
                    members: vec![peer("h1", 150), peer("h2", 140)],
                },
                PoolAssignment {
                    name: "silver".into(),
                    members: vec![peer("h3", 150)],
                    virtual_router_id: 2,
                    ..PoolAssignment::default()
                },
            ],
            bindings: [
                (IngressKey::new("default", "a"), vec!["gold".to_owned()]),
                (
                    IngressKey::new("default", "b"),
                    vec!["silver".to_owned(), "gold".to_owned()],
                ),
            ]
            .into(),
            provisions: vec![PoolProvision {
                name: "claimed".into(),
                replicas: 2,
                ..PoolProvision::default()
            }],
        });
        plan
    }

    #[test]
    fn a_member_gets_its_pools_shares_and_a_member_in_no_pool_the_unbound_ones() {
        let plan = pooled();
        let names = |p: &ClusterPlan| {
            p.ingresses
                .keys()
                .map(|k| k.name.clone())
                .collect::<Vec<_>>()
        };
        let h1 = plan.for_member("h1");
        assert_eq!(
            names(&h1),
            ["a", "b"],
            "b moves from silver to gold: both serve it"
        );
        assert_eq!(h1.pools.pools.len(), 1);
        assert_eq!(h1.pools.pools[0].members.len(), 2, "with its peers");
        assert!(h1.pools.provisions.is_empty());
        assert_eq!(names(&plan.for_member("h3")), ["b"]);
        let outside = plan.for_member("kube-agent");
        assert_eq!(names(&outside), ["c"]);
        assert_eq!(outside.pools.provisions.len(), 1);
        // Without pools every member gets the whole plan, digest unchanged.
        let flat = self::plan(&[share("a", 80)]);
        assert_eq!(flat.for_member("anyone").digest(), flat.digest());
    }

    #[test]
    fn a_plan_with_pools_round_trips_and_its_digest_covers_them() {
        let plan = pooled();
        let json = serde_json::to_string(&plan).unwrap();
        let back: ClusterPlan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan);
        assert_eq!(back.digest(), plan.digest());
        let mut other = plan.clone();
        Arc::make_mut(&mut other.pools).pools[0].members[1].priority = 130;
        assert_ne!(other.digest(), plan.digest());
        let delta = plan.delta_to(&other);
        assert!(delta.upserts.is_empty() && delta.pools.is_some());
        let mut applied = plan.clone();
        // Digested before the delta, as an agent's plan is: the shares' cached digest
        // must not carry the old pools.
        let _ = applied.digest();
        applied.apply(&delta);
        assert_eq!(applied, other);
        // The same content built afresh (no cache shared with `plan`).
        let fresh = ClusterPlan {
            ingresses: other
                .ingresses
                .values()
                .map(|s| (s.key.clone(), (**s).clone()))
                .collect(),
            pools: Arc::new((*other.pools).clone()),
        };
        assert_eq!(applied.digest(), fresh.digest(), "a pools-only delta");
        assert_eq!(other.digest(), fresh.digest());
        // A plan without pools is still written as a list (agents' plan.json).
        let flat = self::plan(&[share("a", 80)]);
        assert!(serde_json::to_value(&flat).unwrap().is_array());
    }

    #[test]
    fn load_per_second_is_requests_plus_the_connections_of_non_http_listeners() {
        let listener = |protocol: &str, port: u16, per_second: f64| ListenerLoad {
            protocol: protocol.into(),
            port,
            connections_per_second: per_second,
            active_connections: 7,
        };
        let report = AgentReport {
            ingresses: vec![
                IngressReport {
                    key: IngressKey::new("default", "web"),
                    // Counted as requests already: a connection per request would
                    // count twice.
                    listeners: vec![listener("HTTP", 80, 5.0), listener("HTTPS", 443, 4.0)],
                    ..IngressReport::default()
                },
                IngressReport {
                    key: IngressKey::new("default", "l4"),
                    listeners: vec![
                        listener("TCP", 7000, 3.0),
                        listener("UDP", 5353, 2.0),
                        listener("TLS", 8443, 1.0),
                    ],
                    ..IngressReport::default()
                },
            ],
            requests_per_second: 10.0,
            ..AgentReport::default()
        };
        assert_eq!(report.load_per_second(), 16.0);
        assert_eq!(AgentReport::default().load_per_second(), 0.0);
    }

    #[test]
    fn delta_turns_one_plan_into_the_next() {
        let old = plan(&[share("a", 1), share("b", 2)]);
        let new = plan(&[share("a", 1), share("b", 3), share("c", 4)]);
        let delta = old.delta_to(&new);
        assert_eq!(delta.deletes, Vec::<IngressKey>::new());
        assert_eq!(delta.upserts.len(), 2);
        let mut applied = old.clone();
        applied.apply(&delta);
        assert_eq!(applied, new);
        assert_eq!(applied.digest(), new.digest());
        let back = new.delta_to(&plan(&[share("a", 1)]));
        assert_eq!(back.deletes.len(), 2);
        assert!(old.delta_to(&old).is_empty());
        assert_ne!(old.digest(), new.digest());
        let json = serde_json::to_string(&new).unwrap();
        assert_eq!(serde_json::from_str::<ClusterPlan>(&json).unwrap(), new);
    }

    /// The digest and the JSON (the agent's `plan.json`) are what they were before
    /// shares were shared: a plan persisted or digested by an older build still matches.
    #[test]
    fn digest_and_json_are_unchanged_by_sharing() {
        let with_override = |name: &str, port: i32| IngressShare {
            cluster_override: Some(ClusterOverride {
                cluster: "eu".into(),
                ingress_class_name: Some("nginx".into()),
                ..ClusterOverride::default()
            }),
            generation: 1,
            ..share(name, port)
        };
        let plan = ClusterPlan::from(vec![with_override("b", 2), with_override("a", 1)]);
        let json = r#"[{"key":{"namespace":"default","name":"a"},"uid":"uid-a","generation":1,"rules":[{"protocol":"TCP","port":1,"backend":{"service":"echo","port":1}}],"tls":[],"cluster_override":{"cluster":"eu","ingressClassName":"nginx"}},{"key":{"namespace":"default","name":"b"},"uid":"uid-b","generation":1,"rules":[{"protocol":"TCP","port":2,"backend":{"service":"echo","port":2}}],"tls":[],"cluster_override":{"cluster":"eu","ingressClassName":"nginx"}}]"#;
        assert_eq!(serde_json::to_string(&plan).unwrap(), json);
        assert_eq!(plan.digest(), "b46fca53bff7b925");
        assert_eq!(serde_json::from_str::<ClusterPlan>(json).unwrap(), plan);
        assert_eq!(ClusterPlan::default().digest(), "09612b07b5ecb5a5");
    }

    #[test]
    fn a_change_to_a_shared_plan_copies_it_and_forgets_the_digest() {
        let shared = plan(&[share("a", 1)]);
        let before = shared.digest();
        let mut changed = shared.clone();
        assert!(Arc::ptr_eq(&shared.ingresses.0, &changed.ingresses.0));
        changed.ingresses.insert(share("b", 2).key, share("b", 2));
        assert_eq!(shared.digest(), before);
        assert_eq!(
            changed.digest(),
            plan(&[share("a", 1), share("b", 2)]).digest()
        );
        assert_eq!(
            changed
                .ingresses
                .remove(&IngressKey::new("default", "b"))
                .map(|s| s.generation),
            Some(1)
        );
        assert_eq!(changed.digest(), before);
        assert_eq!(
            changed.ingresses.remove(&IngressKey::new("default", "b")),
            None
        );
        // A delta shares the shares of the plan it leads to.
        let next = plan(&[share("a", 1), share("c", 3)]);
        let delta = shared.delta_to(&next);
        assert!(Arc::ptr_eq(
            &delta.upserts[0],
            &next.ingresses[&IngressKey::new("default", "c")]
        ));
        assert!(next.delta_to(&next.clone()).is_empty());
    }

    fn tcp_ingress(name: &str, created: &str, port: i32) -> FederatedIngress {
        let mut rule = IngressRule::new(Protocol::Tcp);
        rule.port = Some(port);
        rule.backend = Some(Backend::new("echo", port));
        let mut fi = FederatedIngress::new(
            "default",
            name,
            crate::ingress::FederatedIngressSpec {
                rules: vec![rule],
                ..Default::default()
            },
        );
        fi.metadata.uid = Some(format!("uid-{name}"));
        fi.metadata.generation = Some(3);
        fi.metadata.creation_timestamp = Some(crate::meta::Time::parse(created).unwrap());
        fi
    }

    fn placed<'a>(ingress: &'a FederatedIngress, clusters: &[&str]) -> PlacedIngress<'a> {
        PlacedIngress {
            ingress,
            clusters: clusters.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn plans_leave_out_conflicted_shares_and_pick_overrides_per_cluster() {
        let mut shop = tcp_ingress("shop", "2026-01-01T00:00:00Z", 3306);
        shop.spec.overrides = vec![
            ClusterOverride {
                cluster: "us".into(),
                ingress_class_name: Some("nginx".into()),
                ..ClusterOverride::default()
            },
            ClusterOverride {
                cluster: "eu".into(),
                ingress_class_name: Some("haproxy".into()),
                ..ClusterOverride::default()
            },
        ];
        let blog = tcp_ingress("blog", "2026-01-02T00:00:00Z", 3306);
        let mut deleting = tcp_ingress("old", "2026-01-03T00:00:00Z", 9000);
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp;
        let all = [
            placed(&shop, &["eu", "us"]),
            placed(&blog, &["eu", "ap"]),
            placed(&deleting, &["eu"]),
        ];
        let conflicts = crate::conflict::find_conflicts(&all);
        assert_eq!(conflicts.len(), 1);
        let plans = cluster_plans(&all, &conflicts);
        let keys = |cluster: &str| -> Vec<String> {
            plans[cluster]
                .ingresses
                .keys()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(plans.keys().collect::<Vec<_>>(), ["ap", "eu", "us"]);
        assert_eq!(keys("eu"), ["default/old", "default/shop"]);
        assert_eq!(keys("us"), ["default/shop"]);
        assert_eq!(keys("ap"), ["default/blog"]);

        let share = &plans["eu"].ingresses[&IngressKey::new("default", "shop")];
        assert_eq!(share.uid, "uid-shop");
        assert_eq!(share.generation, 3);
        assert_eq!(share.rules, shop.spec.rules);
        let class = |cluster: &str| {
            plans[cluster].ingresses[&IngressKey::new("default", "shop")]
                .cluster_override
                .as_ref()
                .and_then(|o| o.ingress_class_name.clone())
        };
        assert_eq!(class("eu").as_deref(), Some("haproxy"));
        assert_eq!(class("us").as_deref(), Some("nginx"));
        assert_eq!(
            plans["ap"].ingresses[&IngressKey::new("default", "blog")].cluster_override,
            None
        );
    }

    #[test]
    fn clusters_share_one_share_per_ingress_and_one_map_per_set_of_shares() {
        let mut shop = tcp_ingress("shop", "2026-01-01T00:00:00Z", 80);
        shop.spec.overrides = vec![ClusterOverride {
            cluster: "us".into(),
            ingress_class_name: Some("nginx".into()),
            ..ClusterOverride::default()
        }];
        let blog = tcp_ingress("blog", "2026-01-02T00:00:00Z", 81);
        let all = [
            placed(&shop, &["eu", "us", "ap"]),
            placed(&blog, &["eu", "us", "ap"]),
        ];
        let plans = cluster_plans(&all, &crate::conflict::find_conflicts(&all));
        let share = |cluster: &str, name: &str| {
            plans[cluster].ingresses[&IngressKey::new("default", name)].clone()
        };
        assert!(Arc::ptr_eq(&share("eu", "shop"), &share("ap", "shop")));
        assert!(!Arc::ptr_eq(&share("eu", "shop"), &share("us", "shop")));
        assert!(Arc::ptr_eq(&share("eu", "blog"), &share("us", "blog")));
        assert!(Arc::ptr_eq(
            &plans["eu"].ingresses.0,
            &plans["ap"].ingresses.0
        ));
        assert!(!Arc::ptr_eq(
            &plans["eu"].ingresses.0,
            &plans["us"].ingresses.0
        ));
        assert_eq!(share("us", "shop"), Arc::new(IngressShare::of(&shop, "us")));
        assert_eq!(share("ap", "shop"), Arc::new(IngressShare::of(&shop, "ap")));
    }

    #[test]
    fn clusters_left_without_shares_get_an_empty_plan() {
        let mut shop = tcp_ingress("shop", "2026-01-01T00:00:00Z", 80);
        shop.spec.traffic.dns_name = Some("shop.example.com".into());
        let mut copy = tcp_ingress("copy", "2026-01-02T00:00:00Z", 81);
        copy.spec.traffic.dns_name = Some("shop.example.com".into());
        let all = [placed(&shop, &["eu"]), placed(&copy, &["us", "ap"])];
        let conflicts = crate::conflict::find_conflicts(&all);
        let plans = cluster_plans(&all, &conflicts);
        assert_eq!(plans.len(), 3);
        assert!(plans["us"].ingresses.is_empty());
        assert!(plans["ap"].ingresses.is_empty());
        assert_eq!(plans["eu"].ingresses.len(), 1);
    }
}
