//! Pools in the controller's pass. Pure.
//!
//! - [`book`]: each cluster's IngressPools as this pass sees them: their members (the
//!   known members whose labels the pool selects, in name order, with their VRRP
//!   priorities), the VIPs and VRRP group each holds (allocated here, deterministically,
//!   so every replica computes the same before the leader's status write lands), who
//!   holds the VIPs, and the members' summed load;
//! - [`bind`]: the scheduler ([`fedingress_api::pool::schedule`]) run per cluster, plus
//!   what the scheduler does not know: claims (a claimed pool serves exactly its claim's
//!   ingresses) and make-before-break moves (a share that moves is served by both pools
//!   until the new one serves it and has answered health, then by the new one while the
//!   old one drains for the ingress's DNS TTL);
//! - [`pool_plan`]: what the cluster's members are sent (pools with peers and
//!   priorities, bindings, provisions);
//! - [`cluster_view`]: the cluster's members folded into the one agent state the rest of
//!   the controller reads per cluster: each share as the members that serve it now
//!   report it, its addresses the pool's VIPs while a ready member holds them;
//! - [`pool_status`] and [`members_status`]: what IngressPool and Cluster status say.
//!
//! What does not belong here: reading or writing the store (the controller), running
//! VRRP (the agent), the allocation and scheduling rules themselves (`fedingress_api`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use fedingress_api::claim::IngressClaim;
use fedingress_api::cluster::{Address, ClusterLoad, MemberStatus, MemberVrrp};
use fedingress_api::meta::ConditionStatus;
use fedingress_api::meta::set_condition;
use fedingress_api::plan::{
    AgentReport, ClusterPlan, IngressKey, IngressReport, IngressShare, PoolAssignment, PoolPeer,
    PoolPlan, PoolProvision,
};
use fedingress_api::pool::alloc::{self, Taken};
use fedingress_api::pool::schedule::{self, Capacity, Decision, Load, Policy};
use fedingress_api::pool::{
    self as pool_api, IngressPool, IngressPoolStatus, PoolLoad, PoolMemberStatus, PoolPhase,
};
use fedingress_api::{Cluster, Condition, FederatedIngress, Time};
use ipnet::IpNet;

use super::super::{AgentState, Published};

/// Addresses DNS answers for one share on one cluster at most, when they are the
/// members' own (no VIP): enough to spread, bounded with 100 members.
pub const MEMBER_ADDRESSES_ANSWERED: usize = 8;
/// The highest VRRP priority given (the first member of a pool by name); each next
/// member gets 2 less, down to 1.
pub const TOP_PRIORITY: u8 = 250;
/// A share that left a pool is served there for at least this long after DNS moved
/// (longer when the ingress's TTL is): resolvers that still hold the old answer reach a
/// listener.
pub const MIN_DRAIN_MS: u64 = 5_000;

/// Members of all clusters, by cluster then member name.
pub type Members = BTreeMap<String, BTreeMap<String, AgentState>>;

/// One pool as this pass sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolState {
    pub name: String,
    pub cluster: String,
    pub labels: BTreeMap<String, String>,
    /// Known members it selects, by name, with their priority and address.
    pub members: Vec<PoolPeer>,
    /// Members connected now.
    pub ready: BTreeSet<String>,
    /// The VIPs it holds (empty without a CIDR, or when allocation failed).
    pub vips: Vec<IpAddr>,
    pub cidr: Option<IpNet>,
    /// The VRRP group id; `None` when every id 1-255 is taken in the cluster.
    pub virtual_router_id: Option<u8>,
    /// Why VIPs could not be allocated.
    pub allocation_error: Option<String>,
    /// The ready member reporting MASTER for it.
    pub holder: Option<String>,
    /// A ready member reports BACKUP for it: its keepalived runs and stands ready.
    pub standby: bool,
    pub load: Load,
    pub capacity: Capacity,
    /// Being deleted.
    pub draining: bool,
    /// The claim it is bound to (`namespace/name`), and that claim's uid (empty when
    /// the claimRef was written without one).
    pub claim: Option<String>,
    pub claim_uid: String,
}

impl PoolState {
    /// Whether DNS answers its VIPs: it has some, and a ready member holds them or
    /// stands by for them (BACKUP). The second covers a failover: the old master's
    /// member is gone and the new master's report is on its way, while VRRP already
    /// moves the VIP; only when no ready member runs VRRP for the pool (every one INIT
    /// or FAULT) does DNS fall back to the members' own addresses.
    pub fn vips_held(&self) -> bool {
        !self.vips.is_empty() && (self.holder.is_some() || self.standby)
    }

    pub fn utilization(&self) -> f64 {
        schedule::utilization(&self.load, &self.capacity)
    }

    /// The pool as the scheduler sees it.
    pub fn scheduler_input(&self) -> schedule::PoolInput<'_> {
        schedule::PoolInput {
            name: &self.name,
            labels: &self.labels,
            ready: !self.ready.is_empty(),
            capacity: self.capacity,
            load: self.load,
            draining: self.draining,
        }
    }
}

/// Every cluster's pools this pass, by cluster, in name order.
pub type Book = BTreeMap<String, Vec<PoolState>>;

/// Builds the [`Book`]: members, allocation, holders and load of every pool.
///
/// Allocation is deterministic: pools are taken oldest first (then by name), each keeps
/// the VIPs its status holds, and the rest come lowest-free from its CIDR (its own
/// `vipCIDR`, else its Cluster's); the VRRP id is the spec's, else the one in status,
/// else the lowest free in the cluster.
pub fn book(
    clusters: &BTreeMap<String, Cluster>,
    pools: &BTreeMap<String, IngressPool>,
    members: &Members,
) -> Book {
    let mut ordered: Vec<&IngressPool> = pools.values().collect();
    ordered.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, a.name()).cmp(&(&b.metadata.creation_timestamp, b.name()))
    });
    let mut taken = Taken::new();
    for pool in &ordered {
        taken.set(pool.name(), pool.vips());
    }
    // Group ids by cluster: the spec's first, then those in status (the first pool
    // to hold one keeps it), then the lowest free for the rest.
    let mut ids: BTreeMap<&str, BTreeMap<u8, &str>> = BTreeMap::new();
    for pool in &ordered {
        if let Some(id) = pool
            .spec
            .virtual_router_id
            .and_then(|i| u8::try_from(i).ok())
        {
            ids.entry(pool.spec.cluster.as_str())
                .or_default()
                .entry(id)
                .or_insert(pool.name());
        }
    }
    for pool in &ordered {
        let stored = pool.status.as_ref().and_then(|s| s.virtual_router_id);
        if pool.spec.virtual_router_id.is_none()
            && let Some(id) = stored.and_then(|i| u8::try_from(i).ok()).filter(|i| *i > 0)
        {
            ids.entry(pool.spec.cluster.as_str())
                .or_default()
                .entry(id)
                .or_insert(pool.name());
        }
    }
    let none = BTreeMap::new();
    let mut out: Book = BTreeMap::new();
    for pool in ordered {
        let cluster = clusters.get(&pool.spec.cluster);
        let cluster_members = members.get(&pool.spec.cluster).unwrap_or(&none);
        let mut state = PoolState {
            name: pool.name().to_owned(),
            cluster: pool.spec.cluster.clone(),
            labels: pool.metadata.labels.clone(),
            draining: pool.metadata.deletion_timestamp.is_some(),
            claim: pool
                .spec
                .claim_ref
                .as_ref()
                .map(|c| format!("{}/{}", c.namespace, c.name)),
            claim_uid: pool
                .spec
                .claim_ref
                .as_ref()
                .map(|c| c.uid.clone())
                .unwrap_or_default(),
            capacity: capacity(pool),
            ..PoolState::default()
        };
        select_members(pool, cluster_members, &mut state);
        allocate(pool, cluster, &mut taken, &mut state);
        let used = ids.entry(pool.spec.cluster.as_str()).or_default();
        state.virtual_router_id = used
            .iter()
            .find(|(_, holder)| **holder == pool.name())
            .map(|(id, _)| *id)
            .or_else(|| (1..=255u8).find(|i| !used.contains_key(i)));
        if let Some(id) = state.virtual_router_id {
            used.entry(id).or_insert(pool.name());
        }
        out.entry(state.cluster.clone()).or_default().push(state);
    }
    for pools in out.values_mut() {
        pools.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

fn capacity(pool: &IngressPool) -> Capacity {
    let c = pool.spec.capacity.unwrap_or_default();
    #[allow(clippy::cast_precision_loss)]
    let f = |v: Option<i64>| v.map(|v| v as f64);
    Capacity {
        rps: f(c.rps),
        connections: f(c.connections),
        bytes_per_second: f(c.bandwidth),
    }
}

/// The pool's members (every known member of its cluster it selects), their priorities
/// in name order, who is ready, who holds the VIPs, and their summed load.
fn select_members(
    pool: &IngressPool,
    members: &BTreeMap<String, AgentState>,
    state: &mut PoolState,
) {
    let mut rank: u8 = 0;
    for (name, agent) in members {
        if !pool.selects(&agent.labels) {
            continue;
        }
        state.members.push(PoolPeer {
            name: name.clone(),
            address: agent.address,
            priority: TOP_PRIORITY.saturating_sub(rank.saturating_mul(2)).max(1),
        });
        rank = rank.saturating_add(1);
        if !agent.connected {
            continue;
        }
        state.ready.insert(name.clone());
        let Some(report) = agent.report.as_deref() else {
            continue;
        };
        for vrrp in report.vrrp.iter().filter(|v| v.pool == state.name) {
            if vrrp.is_master() {
                state.holder.get_or_insert_with(|| name.clone());
            } else if vrrp.state.eq_ignore_ascii_case("BACKUP") {
                state.standby = true;
            }
        }
        let load = member_load(report);
        // Load adds up across members; CPU is the busiest member's.
        state.load = Load {
            cpu: state.load.cpu.max(load.cpu),
            ..state.load.plus(&load)
        };
    }
}

/// One member's load, as the scheduler counts it.
pub fn member_load(report: &AgentReport) -> Load {
    #[allow(clippy::cast_precision_loss)]
    Load {
        rps: report.load_per_second(),
        connections: report.active_connections as f64,
        bytes_per_second: report.bytes_per_second,
        // The data plane's own CPU: a host busy with other work does not make a pool
        // full (hostCpu is reported, and shown, but not scheduled on).
        cpu: report.process_cpu,
    }
}

fn allocate(
    pool: &IngressPool,
    cluster: Option<&Cluster>,
    taken: &mut Taken,
    state: &mut PoolState,
) {
    let cidr = pool
        .spec
        .vip_cidr
        .as_deref()
        .or_else(|| cluster.and_then(|c| c.spec.vip_cidr.as_deref()));
    let Some(cidr) = cidr else {
        taken.release(pool.name());
        return;
    };
    let net = match pool_api::parse_cidr(cidr) {
        Ok(net) => net,
        Err(e) => {
            state.allocation_error = Some(format!("vipCIDR {cidr:?} {e}"));
            return;
        }
    };
    state.cidr = Some(net);
    let requested: Vec<IpAddr> = pool
        .spec
        .vips
        .iter()
        .filter_map(|v| v.parse().ok())
        .collect();
    match alloc::allocate(&net, taken, pool.name(), &requested, pool.vip_count()) {
        Ok(vips) => {
            taken.set(pool.name(), &vips);
            state.vips = vips;
        }
        Err(e) => state.allocation_error = Some(e.to_string()),
    }
}

/// Where one share of one cluster is bound.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareBinding {
    /// The pool that serves it (`None`: the cluster's members in no pool).
    pub pool: Option<String>,
    /// The pool it is leaving, while it still serves there.
    pub leaving: Option<Leaving>,
    /// Why, in one sentence (the scheduler's decision).
    pub why: String,
}

/// A pool a share is leaving (make-before-break).
#[derive(Clone, Debug, PartialEq)]
pub struct Leaving {
    pub pool: String,
    /// `None` while the new pool does not serve the share yet (DNS still answers the
    /// old pool); then when the old pool stops serving it (unix ms).
    pub drain_until_ms: Option<u64>,
}

impl ShareBinding {
    /// The pool DNS answers for now: the one it leaves until the new one serves.
    pub fn active(&self) -> Option<&str> {
        match &self.leaving {
            Some(Leaving {
                pool,
                drain_until_ms: None,
            }) => Some(pool),
            _ => self.pool.as_deref(),
        }
    }

    /// The pools its members are told to serve it on.
    pub fn serving_pools(&self) -> Vec<String> {
        self.pool
            .iter()
            .chain(self.leaving.as_ref().map(|l| &l.pool))
            .cloned()
            .collect()
    }
}

/// Every cluster's bindings, by cluster then share.
pub type Bindings = BTreeMap<String, BTreeMap<IngressKey, ShareBinding>>;

/// What [`bind`] needs besides the previous bindings.
pub struct BindInputs<'a> {
    pub book: &'a Book,
    pub members: &'a Members,
    pub ingresses: &'a BTreeMap<IngressKey, FederatedIngress>,
    pub claims: &'a BTreeMap<IngressKey, IngressClaim>,
    pub now_ms: u64,
    pub policy: Policy,
}

/// Binds the shares of `cluster` (`shares`: the keys of its plan) to its pools, keeping
/// `previous` where the scheduler keeps them, and advances moves: a move whose new pool
/// serves the share starts draining, a drain that ended is dropped. Returns the new
/// bindings of the cluster (empty when it has no pool).
pub fn bind(
    inputs: &BindInputs<'_>,
    cluster: &str,
    shares: &[&IngressKey],
    previous: Option<&BTreeMap<IngressKey, ShareBinding>>,
) -> BTreeMap<IngressKey, ShareBinding> {
    let Some(pools) = inputs.book.get(cluster).filter(|p| !p.is_empty()) else {
        return BTreeMap::new();
    };
    let members = inputs.members.get(cluster);
    // Claimed pools serve exactly their claims' ingresses: one scheduling group per
    // claim, and one for everything else on the unclaimed pools.
    let mut groups: BTreeMap<Option<&str>, (Vec<&PoolState>, Vec<&IngressKey>)> = BTreeMap::new();
    // A pool whose claim is gone, or is another claim of the same name (its uid
    // differs), is its own group: it takes no share.
    let stale: Vec<String> = pools
        .iter()
        .map(|p| match &p.claim {
            Some(claim) if !claimed_by(inputs.claims, claim, &p.claim_uid) => {
                format!("{claim} (gone)")
            }
            _ => String::new(),
        })
        .collect();
    for (pool, stale) in pools.iter().zip(&stale) {
        groups
            .entry(if stale.is_empty() {
                pool.claim.as_deref()
            } else {
                Some(stale.as_str())
            })
            .or_default()
            .0
            .push(pool);
    }
    for key in shares {
        let claim = claim_of(inputs.claims, key)
            .filter(|c| groups.contains_key(&Some(c.as_str())))
            .and_then(|c| groups.keys().flatten().find(|k| **k == c).copied());
        groups.entry(claim).or_default().1.push(key);
    }
    let mut out = BTreeMap::new();
    for (claim, (group_pools, keys)) in &groups {
        let inputs_pools: Vec<schedule::PoolInput<'_>> =
            group_pools.iter().map(|p| p.scheduler_input()).collect();
        let share_inputs: Vec<schedule::ShareInput<'_>> = keys
            .iter()
            .map(|key| schedule::ShareInput {
                key,
                selector: if claim.is_some() {
                    None
                } else {
                    inputs
                        .ingresses
                        .get(*key)
                        .and_then(|i| i.pool_selector(cluster))
                },
                current: previous
                    .and_then(|p| p.get(*key))
                    .and_then(|b| b.pool.as_deref()),
                load: share_load(key, members),
            })
            .collect();
        for binding in schedule::schedule(&inputs_pools, &share_inputs, &inputs.policy) {
            let before = previous.and_then(|p| p.get(&binding.key));
            let next = advance(inputs, cluster, &binding, before, members);
            out.insert(binding.key, next);
        }
    }
    out
}

/// Whether the claim `claim` (`namespace/name`) exists and is the one of uid `uid`
/// (any, when `uid` is empty).
fn claimed_by(claims: &BTreeMap<IngressKey, IngressClaim>, claim: &str, uid: &str) -> bool {
    let Some((namespace, name)) = claim.split_once('/') else {
        return false;
    };
    claims
        .get(&IngressKey::new(namespace, name))
        .is_some_and(|c| uid.is_empty() || c.metadata.uid.as_deref() == Some(uid))
}

/// The claim (`namespace/name`) that names the ingress of `key`, if any.
fn claim_of(claims: &BTreeMap<IngressKey, IngressClaim>, key: &IngressKey) -> Option<String> {
    claims
        .iter()
        .filter(|(claim_key, claim)| {
            claim_key.namespace == key.namespace
                && claim.metadata.deletion_timestamp.is_none()
                && claim.spec.ingresses.contains(&key.name)
        })
        .map(|(claim_key, _)| format!("{}/{}", claim_key.namespace, claim_key.name))
        .next()
}

/// A share's own load where it is served now: the listeners its members report for it.
fn share_load(key: &IngressKey, members: Option<&BTreeMap<String, AgentState>>) -> Load {
    let mut load = Load::default();
    for agent in members.into_iter().flat_map(|m| m.values()) {
        if !agent.connected {
            continue;
        }
        let Some(report) = agent.report.as_deref() else {
            continue;
        };
        for ingress in report.ingresses.iter().filter(|i| &i.key == key) {
            for listener in &ingress.listeners {
                load.rps += listener.connections_per_second;
                #[allow(clippy::cast_precision_loss)]
                {
                    load.connections += listener.active_connections as f64;
                }
            }
        }
    }
    load
}

/// The binding after the scheduler's `binding`, from what it was: a new pool for a
/// share that had one starts a move; a move whose new pool serves the share starts its
/// drain; an ended drain is dropped.
fn advance(
    inputs: &BindInputs<'_>,
    cluster: &str,
    binding: &schedule::Binding,
    before: Option<&ShareBinding>,
    members: Option<&BTreeMap<String, AgentState>>,
) -> ShareBinding {
    // The reason it got where it is: a share kept where it was keeps its reason.
    let kept = matches!(
        binding.decision,
        Decision::Kept | Decision::KeptSaturated { .. }
    );
    let why = match before {
        Some(b) if kept && b.pool == binding.pool && !b.why.is_empty() => b.why.clone(),
        _ => binding.decision.to_string(),
    };
    let mut leaving = before.and_then(|b| b.leaving.clone());
    let moved_from = before.and_then(|b| b.pool.clone()).filter(|from| {
        Some(from.as_str()) != binding.pool.as_deref()
            && matches!(binding.decision, Decision::Moved { .. })
    });
    if let Some(from) = moved_from {
        leaving = Some(Leaving {
            pool: from,
            drain_until_ms: None,
        });
    }
    // A move back to the pool being left: nothing to leave.
    if leaving.as_ref().map(|l| Some(l.pool.as_str())) == Some(binding.pool.as_deref()) {
        leaving = None;
    }
    if let Some(l) = &mut leaving {
        let old_alive = inputs
            .book
            .get(cluster)
            .and_then(|pools| pools.iter().find(|p| p.name == l.pool))
            .is_some_and(|p| !p.ready.is_empty());
        match l.drain_until_ms {
            None if !old_alive => leaving = None,
            None => {
                if serves(
                    inputs,
                    cluster,
                    &binding.key,
                    binding.pool.as_deref(),
                    members,
                ) {
                    l.drain_until_ms =
                        Some(inputs.now_ms + drain_ms(inputs.ingresses.get(&binding.key)));
                }
            }
            Some(until) if until <= inputs.now_ms || !old_alive => leaving = None,
            Some(_) => {}
        }
    }
    ShareBinding {
        pool: binding.pool.clone(),
        leaving,
        why,
    }
}

/// How long a pool keeps serving a share that left it once DNS moved.
fn drain_ms(ingress: Option<&FederatedIngress>) -> u64 {
    let ttl = ingress
        .and_then(|i| u64::try_from(i.spec.traffic.ttl).ok())
        .unwrap_or(0);
    (ttl * 1000).max(MIN_DRAIN_MS)
}

/// Whether a ready member of `pool` applied the current generation of the share and
/// reports it healthy (every backend with a ready endpoint).
fn serves(
    inputs: &BindInputs<'_>,
    cluster: &str,
    key: &IngressKey,
    pool: Option<&str>,
    members: Option<&BTreeMap<String, AgentState>>,
) -> bool {
    let Some(pool) = pool else {
        return true;
    };
    let Some(state) = inputs
        .book
        .get(cluster)
        .and_then(|pools| pools.iter().find(|p| p.name == pool))
    else {
        return false;
    };
    let generation = inputs
        .ingresses
        .get(key)
        .and_then(|i| i.metadata.generation)
        .unwrap_or_default();
    members.into_iter().flat_map(|m| m.values()).any(|agent| {
        agent.connected
            && state.ready.contains(&agent.member)
            && agent
                .applied
                .as_ref()
                .and_then(|a| a.plan.ingresses.get(key))
                .is_some_and(|s| s.generation == generation)
            && agent.report.as_deref().is_some_and(|r| {
                r.ingresses.iter().any(|i| {
                    &i.key == key
                        && !i.backends.is_empty()
                        && i.backends.iter().all(|b| b.ready > 0)
                })
            })
    })
}

/// What the members of a cluster are sent of its pools.
pub fn pool_plan(
    pools: Option<&Vec<PoolState>>,
    bindings: Option<&BTreeMap<IngressKey, ShareBinding>>,
    provisions: Vec<PoolProvision>,
) -> PoolPlan {
    PoolPlan {
        pools: pools
            .into_iter()
            .flatten()
            .filter(|p| !p.members.is_empty())
            .map(|p| PoolAssignment {
                name: p.name.clone(),
                vips: if p.virtual_router_id.is_some() {
                    p.vips.clone()
                } else {
                    Vec::new()
                },
                prefix_len: p.cidr.map(|c| c.prefix_len()).unwrap_or_default(),
                virtual_router_id: p.virtual_router_id.unwrap_or_default(),
                members: p.members.clone(),
            })
            .collect(),
        bindings: bindings
            .into_iter()
            .flatten()
            .filter(|(_, b)| b.pool.is_some())
            .map(|(key, b)| (key.clone(), b.serving_pools()))
            .collect(),
        provisions,
    }
}

/// The cluster's members folded into one agent state, as the controller reads a
/// cluster: see the module docs.
///
/// - Connected: some member is. Each share is taken from the members of the pool DNS
///   answers for it now ([`ShareBinding::active`]; members in no pool for an unbound
///   share), connected ones only while any is.
/// - A share's applied generation is the highest such a member applied; its report
///   merges theirs: backends from a member reporting every backend ready (else the
///   first), listener load summed, and its addresses the pool's VIPs while a ready member
///   holds them, else the members' own (at most [`MEMBER_ADDRESSES_ANSWERED`]).
/// - A cluster with one member and no pool reads exactly as that member.
pub fn cluster_view(
    members: &BTreeMap<String, AgentState>,
    pools: Option<&Vec<PoolState>>,
    bindings: Option<&BTreeMap<IngressKey, ShareBinding>>,
) -> Option<AgentState> {
    let no_pools = pools.is_none_or(Vec::is_empty);
    if no_pools && members.len() == 1 {
        return members.values().next().cloned();
    }
    let any_connected = members.values().any(|a| a.connected);
    let sources: Vec<&AgentState> = members
        .values()
        .filter(|a| a.connected || !any_connected)
        .collect();
    let first = sources.first()?;
    let pooled: BTreeSet<&str> = pools
        .into_iter()
        .flatten()
        .flat_map(|p| p.members.iter().map(|m| m.name.as_str()))
        .collect();
    // Which members a share is taken from, and the VIPs it is answered on.
    let source = |key: &IngressKey| -> (Option<&PoolState>, bool) {
        let active = bindings
            .and_then(|b| b.get(key))
            .and_then(ShareBinding::active);
        let pool = active.and_then(|name| pools.into_iter().flatten().find(|p| p.name == name));
        (pool, active.is_none())
    };
    let takes = |agent: &AgentState, pool: Option<&PoolState>, unbound: bool| match pool {
        Some(pool) => pool.members.iter().any(|m| m.name == agent.member),
        None => unbound && !pooled.contains(agent.member.as_str()),
    };

    let mut applied: BTreeMap<IngressKey, Arc<IngressShare>> = BTreeMap::new();
    let mut version = 0;
    let mut any_applied = false;
    let mut rule_errors = Vec::new();
    let mut reports: BTreeMap<IngressKey, Vec<&IngressReport>> = BTreeMap::new();
    let mut report = AgentReport::default();
    let mut reported = false;
    for agent in &sources {
        if let Some(published) = &agent.applied {
            any_applied = true;
            version = version.max(published.version);
            for (key, share) in &published.plan.ingresses {
                let (pool, unbound) = source(key);
                if !takes(agent, pool, unbound) {
                    continue;
                }
                match applied.get(key) {
                    Some(have) if have.generation >= share.generation => {}
                    _ => {
                        applied.insert(key.clone(), share.clone());
                    }
                }
            }
        }
        for error in &agent.rule_errors {
            let (pool, unbound) = source(&error.ingress);
            if takes(agent, pool, unbound) && !rule_errors.contains(error) {
                rule_errors.push(error.clone());
            }
        }
        let Some(own) = agent.report.as_deref() else {
            continue;
        };
        reported = true;
        for ingress in &own.ingresses {
            let (pool, unbound) = source(&ingress.key);
            if takes(agent, pool, unbound) {
                reports
                    .entry(ingress.key.clone())
                    .or_default()
                    .push(ingress);
            }
        }
        for address in &own.addresses {
            if report.addresses.len() < MEMBER_ADDRESSES_ANSWERED
                && !report.addresses.contains(address)
            {
                report.addresses.push(address.clone());
            }
        }
        report.requests_per_second += own.requests_per_second;
        report.active_connections += own.active_connections;
        report.bytes_per_second += own.bytes_per_second;
        report.process_cpu = report.process_cpu.max(own.process_cpu);
        report.host_cpu = report.host_cpu.max(own.host_cpu);
        if report.speaker.is_none() {
            report.speaker.clone_from(&own.speaker);
        }
        report.vrrp.extend(own.vrrp.iter().cloned());
    }
    for (key, list) in reports {
        let (pool, _) = source(&key);
        let vips = pool
            .filter(|p| p.vips_held())
            .map(|p| p.vips.iter().map(|ip| Address::ip(*ip)).collect());
        report.ingresses.push(merge_reports(key, &list, vips));
    }
    let mut view = (*first).clone();
    view.connected = any_connected;
    view.member = String::new();
    view.last_seen = members
        .values()
        .map(|a| a.last_seen)
        .max()
        .unwrap_or(first.last_seen);
    view.last_seen_time = members
        .values()
        .map(|a| a.last_seen_time)
        .max()
        .unwrap_or(first.last_seen_time);
    view.applied = any_applied.then(|| Published {
        version,
        digest: String::new(),
        plan: Arc::new(ClusterPlan {
            ingresses: applied.into_iter().collect(),
            pools: Arc::default(),
        }),
    });
    view.rule_errors = rule_errors;
    view.report = reported.then(|| Arc::new(report));
    Some(view)
}

/// One share's report from the members that serve it.
fn merge_reports(
    key: IngressKey,
    list: &[&IngressReport],
    vips: Option<Vec<Address>>,
) -> IngressReport {
    let healthy = list
        .iter()
        .find(|r| !r.backends.is_empty() && r.backends.iter().all(|b| b.ready > 0))
        .unwrap_or(&list[0]);
    let mut merged = IngressReport {
        key,
        applied_generation: list
            .iter()
            .map(|r| r.applied_generation)
            .max()
            .unwrap_or_default(),
        backends: healthy.backends.clone(),
        rule_errors: healthy.rule_errors.clone(),
        rules: healthy.rules.clone(),
        ..IngressReport::default()
    };
    match vips {
        Some(vips) => merged.addresses = vips,
        None => {
            for r in list {
                for address in &r.addresses {
                    if merged.addresses.len() < MEMBER_ADDRESSES_ANSWERED
                        && !merged.addresses.contains(address)
                    {
                        merged.addresses.push(address.clone());
                    }
                }
            }
        }
    }
    for r in list {
        for listener in &r.listeners {
            match merged
                .listeners
                .iter_mut()
                .find(|l| l.protocol == listener.protocol && l.port == listener.port)
            {
                Some(l) => {
                    l.connections_per_second += listener.connections_per_second;
                    l.active_connections += listener.active_connections;
                }
                None => merged.listeners.push(listener.clone()),
            }
        }
        for route in &r.anycast {
            match merged
                .anycast
                .iter_mut()
                .find(|a| a.address == route.address)
            {
                Some(a) if !a.announced && route.announced => *a = route.clone(),
                Some(_) => {}
                None => merged.anycast.push(route.clone()),
            }
        }
    }
    merged
}

/// `status.members`, `memberCount` and `readyMembers` of a Cluster, and each member's
/// pools.
pub fn members_status(
    members: &BTreeMap<String, AgentState>,
    pools: Option<&Vec<PoolState>>,
) -> (Vec<MemberStatus>, i32, i32) {
    let count = i32::try_from(members.len()).unwrap_or(i32::MAX);
    let ready = i32::try_from(members.values().filter(|a| a.connected).count()).unwrap_or(i32::MAX);
    let listed = members
        .iter()
        .take(pool_api::MEMBERS_LISTED)
        .map(|(name, agent)| {
            let report = agent.report.as_deref();
            MemberStatus {
                name: name.clone(),
                connected: agent.connected,
                agent_version: Some(agent.agent_version.clone()).filter(|v| !v.is_empty()),
                driver: agent.driver.parse().ok(),
                last_heartbeat_time: Some(agent.last_seen_time),
                address: agent.address,
                addresses: report
                    .map(|r| r.addresses.iter().take(4).cloned().collect())
                    .unwrap_or_default(),
                pools: pools
                    .into_iter()
                    .flatten()
                    .filter(|p| p.members.iter().any(|m| &m.name == name))
                    .map(|p| p.name.clone())
                    .collect(),
                vrrp: report
                    .map(|r| {
                        r.vrrp
                            .iter()
                            .map(|v| MemberVrrp {
                                pool: v.pool.clone(),
                                state: v.state.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                load: report.map(|r| ClusterLoad {
                    rps: round2(r.load_per_second()),
                    active_connections: i64::try_from(r.active_connections).unwrap_or(i64::MAX),
                    cpu: round2(r.process_cpu),
                    host_cpu: round2(r.host_cpu),
                    bytes_per_second: r.bytes_per_second.round(),
                }),
            }
        })
        .collect();
    (listed, count, ready)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// An IngressPool's status this pass (from its stored `status`, so that conditions keep
/// their transition times).
pub fn pool_status(
    pool: &IngressPool,
    state: Option<&PoolState>,
    bindings: Option<&BTreeMap<IngressKey, ShareBinding>>,
    policy: &Policy,
    now: Time,
) -> IngressPoolStatus {
    let mut status = pool.status.clone().unwrap_or_default();
    status.phase = match (&pool.spec.claim_ref, status.phase) {
        (None, _) => PoolPhase::Available,
        (Some(_), PoolPhase::Released) => PoolPhase::Released,
        (Some(_), _) => PoolPhase::Bound,
    };
    let Some(state) = state else {
        return status;
    };
    status.vips.clone_from(&state.vips);
    status.vip_cidr = state.cidr.map(|c| c.to_string());
    status.virtual_router_id = state.virtual_router_id.map(i32::from);
    status.members = state
        .members
        .iter()
        .take(pool_api::MEMBERS_LISTED)
        .map(|m| PoolMemberStatus {
            name: m.name.clone(),
            address: m.address,
            priority: i32::from(m.priority),
            ready: state.ready.contains(&m.name),
            vrrp_state: None,
        })
        .collect();
    status.member_count = i32::try_from(state.members.len()).unwrap_or(i32::MAX);
    status.ready_members = i32::try_from(state.ready.len()).unwrap_or(i32::MAX);
    status.vip_holder.clone_from(&state.holder);
    let bound: Vec<&IngressKey> = bindings
        .into_iter()
        .flatten()
        .filter(|(_, b)| b.pool.as_deref() == Some(state.name.as_str()))
        .map(|(key, _)| key)
        .collect();
    status.bound_shares = i32::try_from(bound.len()).unwrap_or(i32::MAX);
    status.shares = bound
        .iter()
        .take(pool_api::SHARES_LISTED)
        .map(|k| format!("{}/{}", k.namespace, k.name))
        .collect();
    let utilization = state.utilization();
    #[allow(clippy::cast_possible_truncation)]
    let load = PoolLoad {
        rps: round2(state.load.rps),
        active_connections: state.load.connections.round() as i64,
        bytes_per_second: state.load.bytes_per_second.round(),
        cpu: round2(state.load.cpu),
        utilization: round2(utilization),
    };
    status.load = Some(load);
    let ready = !state.ready.is_empty() && (state.vips.is_empty() || state.holder.is_some());
    let (reason, message) = if state.ready.is_empty() {
        (
            "NoReadyMember",
            "no member of the pool is connected".to_owned(),
        )
    } else if !ready {
        (
            "NoVIPHolder",
            "no ready member reports holding the VIPs (VRRP MASTER)".to_owned(),
        )
    } else {
        (
            "Ready",
            format!(
                "{} of {} members ready",
                state.ready.len(),
                state.members.len()
            ),
        )
    };
    set_condition(
        &mut status.conditions,
        condition(pool_api::CONDITION_READY, ready, reason, message),
        now,
    );
    let saturated = utilization >= policy.saturated_at;
    set_condition(
        &mut status.conditions,
        condition(
            pool_api::CONDITION_SATURATED,
            saturated,
            if saturated {
                "Saturated"
            } else {
                "BelowCapacity"
            },
            format!(
                "utilization {utilization:.2} (saturated at {:.2})",
                policy.saturated_at
            ),
        ),
        now,
    );
    let (ok, reason, message) = match (&state.allocation_error, state.cidr) {
        (Some(e), _) => (false, "AllocationFailed", e.clone()),
        (None, None) => (
            true,
            "NoCIDR",
            "no vipCIDR here or on the Cluster: members serve on their own addresses".to_owned(),
        ),
        (None, Some(cidr)) => (
            true,
            "Allocated",
            format!("{} VIPs from {cidr}", state.vips.len()),
        ),
    };
    set_condition(
        &mut status.conditions,
        condition(pool_api::CONDITION_ALLOCATED, ok, reason, message),
        now,
    );
    status
}

/// The clusters that take no new share: every ready pool saturated (a cluster with
/// pools but none ready counts too), or the cluster's own `spec.capacity` reached
/// (`rps`, `connections`, at the same threshold).
pub fn saturated_clusters(
    clusters: &BTreeMap<String, Cluster>,
    book: &Book,
    views: &BTreeMap<String, AgentState>,
    policy: &Policy,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (name, cluster) in clusters {
        let pools_full = book
            .get(name)
            .filter(|p| !p.is_empty())
            .is_some_and(|pools| {
                let inputs: Vec<schedule::PoolInput<'_>> =
                    pools.iter().map(PoolState::scheduler_input).collect();
                schedule::saturated(&inputs, policy)
            });
        let capacity_full = match (
            cluster.spec.capacity,
            views.get(name).and_then(|a| a.report.as_deref()),
        ) {
            (Some(capacity), Some(report)) => {
                #[allow(clippy::cast_precision_loss)]
                let over = |limit: Option<i64>, value: f64| {
                    limit.is_some_and(|l| l > 0 && value >= policy.saturated_at * l as f64)
                };
                #[allow(clippy::cast_precision_loss)]
                let connections = report.active_connections as f64;
                over(capacity.rps, report.load_per_second())
                    || over(capacity.connections, connections)
            }
            _ => false,
        };
        if pools_full || capacity_full {
            out.insert(name.clone());
        }
    }
    out
}

/// A condition of `type_`, True when `ok`. (Here rather than in `decide`, which uses it
/// too: `decide` depends on this module, not the other way round.)
pub(super) fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
) -> Condition {
    let status = if ok {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    Condition::new(type_, status, reason, message)
}

/// Label the claim controller puts on an IngressPool it provisioned: the claim as
/// `<namespace>.<name>`. Such a pool is run as a workload by its cluster's (kubernetes)
/// agent ([`provisions`]).
pub const PROVISIONED_BY: &str = "fedingress.io/provisioned-by";
/// Label every member of a provisioned pool carries: the pool's name (its
/// `memberSelector`).
pub const POOL_LABEL: &str = "fedingress.io/pool";

/// The pools of a cluster its agent runs as workloads: those a claim provisioned
/// ([`PROVISIONED_BY`]) and still claims, from the claim's template.
pub fn provisions(
    pools: Option<&Vec<PoolState>>,
    all: &BTreeMap<String, IngressPool>,
    claims: &BTreeMap<IngressKey, IngressClaim>,
) -> Vec<PoolProvision> {
    let mut out = Vec::new();
    for state in pools.into_iter().flatten() {
        let Some(pool) = all.get(&state.name) else {
            continue;
        };
        let (Some(claim_ref), true) = (
            &pool.spec.claim_ref,
            pool.metadata.labels.contains_key(PROVISIONED_BY),
        ) else {
            continue;
        };
        if state.draining {
            continue;
        }
        let Some(claim) = claims
            .get(&IngressKey::new(&claim_ref.namespace, &claim_ref.name))
            .filter(|c| {
                claim_ref.uid.is_empty() || c.metadata.uid.as_deref() == Some(&claim_ref.uid)
            })
        else {
            continue;
        };
        let template = &claim.spec.template;
        let mut member_labels = template.member_labels.clone();
        member_labels.insert(POOL_LABEL.to_owned(), state.name.clone());
        let resources = template.resources.clone().unwrap_or_default();
        out.push(PoolProvision {
            name: state.name.clone(),
            replicas: u32::try_from(claim.replicas()).unwrap_or(2),
            member_labels,
            requests: resources.requests,
            limits: resources.limits,
        });
    }
    out
}

/// The bindings the stored statuses say (`status.clusters[].pool` and `previousPool`),
/// for a controller that starts: shares stay where they are, and a pool being left
/// drains for [`MIN_DRAIN_MS`] from `now_ms`.
pub fn stored_bindings(
    ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    now_ms: u64,
) -> Bindings {
    let mut out = Bindings::new();
    for (key, ingress) in ingresses {
        for entry in ingress.status.iter().flat_map(|s| &s.clusters) {
            let Some(pool) = &entry.pool else {
                continue;
            };
            out.entry(entry.name.clone()).or_default().insert(
                key.clone(),
                ShareBinding {
                    pool: Some(pool.clone()),
                    leaving: entry.previous_pool.as_ref().map(|p| Leaving {
                        pool: p.clone(),
                        drain_until_ms: Some(now_ms + MIN_DRAIN_MS),
                    }),
                    why: entry.pool_reason.clone(),
                },
            );
        }
    }
    out
}

/// When the next drain ends (unix ms), if any share is draining.
pub fn next_drain_end(bindings: &Bindings) -> Option<u64> {
    bindings
        .values()
        .flat_map(|b| b.values())
        .filter_map(|b| b.leaving.as_ref()?.drain_until_ms)
        .min()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use fedingress_api::Resource;
    use fedingress_api::ingress::{Backend, IngressRule, Protocol};
    use fedingress_api::plan::{BackendHealth, ListenerLoad, VrrpReport};
    use fedingress_api::pool::IngressPoolSpec;
    use fedingress_api::selector::LabelSelector;

    use super::*;

    fn key(name: &str) -> IngressKey {
        IngressKey::new("default", name)
    }

    fn share(name: &str) -> IngressShare {
        let mut rule = IngressRule::new(Protocol::Tcp);
        rule.port = Some(7000);
        rule.backend = Some(Backend::new("echo", 7000));
        IngressShare {
            key: key(name),
            uid: name.into(),
            generation: 1,
            rules: vec![rule],
            tls: Vec::new(),
            cluster_override: None,
            anycast_addresses: Vec::new(),
        }
    }

    fn ingress(name: &str) -> FederatedIngress {
        let mut i = FederatedIngress::default();
        i.metadata.name = Some(name.into());
        i.metadata.namespace = Some("default".into());
        i.metadata.generation = Some(1);
        i.spec.traffic.ttl = 1;
        i
    }

    fn cluster() -> Cluster {
        let mut c = Cluster::new("eu", Default::default());
        c.spec.vip_cidr = Some("10.0.0.96/28".into());
        c
    }

    fn pool(name: &str, rack: &str, rps: i64) -> IngressPool {
        let mut p = IngressPool::new(
            name,
            IngressPoolSpec {
                cluster: "eu".into(),
                member_selector: Some(LabelSelector::from_labels([("rack", rack)])),
                capacity: Some(pool_api::PoolCapacity {
                    rps: Some(rps),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        p.apply_defaults();
        p
    }

    /// A connected member in `rack` that applied `shares`, reports them healthy with
    /// `rps` each, and says `vrrp` for its pool.
    fn member(
        name: &str,
        rack: &str,
        shares: &[&str],
        rps: f64,
        vrrp: Option<(&str, &str)>,
    ) -> AgentState {
        let plan: ClusterPlan = shares.iter().map(|s| share(s)).collect::<Vec<_>>().into();
        let report = AgentReport {
            ingresses: shares
                .iter()
                .map(|s| IngressReport {
                    key: key(s),
                    applied_generation: 1,
                    addresses: vec![Address::ip(
                        format!("10.0.1.{}", name.len()).parse().unwrap(),
                    )],
                    backends: vec![BackendHealth {
                        service: "echo".into(),
                        port: 7000,
                        ready: 1,
                        total: 1,
                    }],
                    listeners: vec![ListenerLoad {
                        protocol: "TCP".into(),
                        port: 7000,
                        connections_per_second: rps,
                        active_connections: 1,
                    }],
                    ..IngressReport::default()
                })
                .collect(),
            vrrp: vrrp
                .map(|(pool, state)| VrrpReport {
                    pool: pool.into(),
                    state: state.into(),
                })
                .into_iter()
                .collect(),
            ..AgentReport::default()
        };
        AgentState {
            session: 1,
            connected: true,
            member: name.into(),
            labels: [("rack".to_owned(), rack.to_owned())].into(),
            address: Some(format!("192.168.0.{}", name.as_bytes()[1]).parse().unwrap()),
            agent_version: "test".into(),
            driver: "standalone".into(),
            capabilities: Vec::new(),
            last_seen: Instant::now(),
            last_seen_time: Time(chrono::Utc::now()),
            applied: Some(Published {
                version: 1,
                digest: String::new(),
                plan: Arc::new(plan),
            }),
            rule_errors: Vec::new(),
            report: Some(Arc::new(report)),
        }
    }

    fn world(
        members: Vec<AgentState>,
    ) -> (
        BTreeMap<String, Cluster>,
        BTreeMap<String, IngressPool>,
        Members,
    ) {
        let clusters = [("eu".to_owned(), cluster())].into();
        let pools = [
            ("a".to_owned(), pool("a", "r1", 100)),
            ("b".to_owned(), pool("b", "r2", 100)),
        ]
        .into();
        let members = [(
            "eu".to_owned(),
            members.into_iter().map(|m| (m.member.clone(), m)).collect(),
        )]
        .into();
        (clusters, pools, members)
    }

    #[test]
    fn the_book_allocates_vips_and_group_ids_and_orders_members() {
        let (clusters, pools, members) = world(vec![
            member("h2", "r1", &[], 0.0, Some(("a", "BACKUP"))),
            member("h1", "r1", &[], 0.0, Some(("a", "MASTER"))),
            member("h3", "r2", &[], 0.0, None),
        ]);
        let book = book(&clusters, &pools, &members);
        let [a, b] = &book["eu"][..] else { panic!() };
        assert_eq!(a.vips, ["10.0.0.97".parse::<IpAddr>().unwrap()]);
        assert_eq!(b.vips, ["10.0.0.98".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            (a.virtual_router_id, b.virtual_router_id),
            (Some(1), Some(2))
        );
        let priorities: Vec<(&str, u8)> = a
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.priority))
            .collect();
        assert_eq!(priorities, [("h1", 250), ("h2", 248)]);
        assert_eq!(a.holder.as_deref(), Some("h1"));
        assert!(a.vips_held() && !b.vips_held(), "nobody says MASTER for b");
        // Stored VIPs stay where they are, whatever the order.
        let mut stored = pools.clone();
        stored.get_mut("b").unwrap().status = Some(IngressPoolStatus {
            vips: vec!["10.0.0.97".parse().unwrap()],
            virtual_router_id: Some(1),
            ..Default::default()
        });
        let again = super::book(&clusters, &stored, &members);
        assert_eq!(
            again["eu"][1].vips,
            ["10.0.0.97".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(
            again["eu"][0].vips,
            ["10.0.0.98".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(again["eu"][1].virtual_router_id, Some(1));
        assert_eq!(again["eu"][0].virtual_router_id, Some(2));
    }

    #[test]
    fn a_members_loss_is_not_the_clusters_and_dns_answers_the_pools_vip() {
        let mut lost = member("h1", "r1", &["web"], 1.0, Some(("a", "MASTER")));
        lost.connected = false;
        let (clusters, pools, members) = world(vec![
            lost,
            member("h2", "r1", &["web"], 1.0, Some(("a", "MASTER"))),
        ]);
        let book = book(&clusters, &pools, &members);
        let bindings: BTreeMap<IngressKey, ShareBinding> = [(
            key("web"),
            ShareBinding {
                pool: Some("a".into()),
                ..Default::default()
            },
        )]
        .into();
        let view = cluster_view(&members["eu"], book.get("eu"), Some(&bindings)).unwrap();
        assert!(view.connected);
        let report = view.report.as_deref().unwrap();
        let web = report
            .ingresses
            .iter()
            .find(|i| i.key == key("web"))
            .unwrap();
        assert_eq!(web.addresses, [Address::ip("10.0.0.97".parse().unwrap())]);
        assert!(
            view.applied
                .unwrap()
                .plan
                .ingresses
                .contains_key(&key("web"))
        );
        // A failover: the master's member is gone, the other stands by (BACKUP, its
        // MASTER report on its way): still the VIP.
        let mut gone = member("h1", "r1", &["web"], 1.0, Some(("a", "MASTER")));
        gone.connected = false;
        let (clusters, pools, members) = world(vec![
            gone,
            member("h2", "r1", &["web"], 1.0, Some(("a", "BACKUP"))),
        ]);
        let book = super::book(&clusters, &pools, &members);
        let view = cluster_view(&members["eu"], book.get("eu"), Some(&bindings)).unwrap();
        let web = &view.report.as_deref().unwrap().ingresses[0];
        assert_eq!(web.addresses, [Address::ip("10.0.0.97".parse().unwrap())]);
        // Nobody runs VRRP for it (FAULT, or no state): the members' own addresses.
        let (clusters, pools, members) = world(vec![
            member("h2", "r1", &["web"], 1.0, Some(("a", "FAULT"))),
            member("h3", "r1", &["web"], 1.0, None),
        ]);
        let book = super::book(&clusters, &pools, &members);
        let view = cluster_view(&members["eu"], book.get("eu"), Some(&bindings)).unwrap();
        let web = &view.report.as_deref().unwrap().ingresses[0];
        assert!(
            web.addresses
                .iter()
                .all(|a| a.ip.unwrap().to_string().starts_with("10.0.1.")),
            "{web:?}"
        );
    }

    #[test]
    fn a_share_moves_make_before_break_then_drains() {
        // Pool a saturated (95 rps of 100); b idle.
        let (clusters, pools, mut members) = world(vec![
            member("h1", "r1", &["hot", "web"], 47.5, Some(("a", "MASTER"))),
            member("h3", "r2", &[], 0.0, Some(("b", "MASTER"))),
        ]);
        let ingresses: BTreeMap<IngressKey, FederatedIngress> =
            [(key("hot"), ingress("hot")), (key("web"), ingress("web"))].into();
        let previous: BTreeMap<IngressKey, ShareBinding> = ["hot", "web"]
            .iter()
            .map(|n| {
                (
                    key(n),
                    ShareBinding {
                        pool: Some("a".into()),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let claims = BTreeMap::new();
        let keys = [key("hot"), key("web")];
        let shares: Vec<&IngressKey> = keys.iter().collect();
        let run = |members: &Members, previous: &BTreeMap<IngressKey, ShareBinding>, now_ms| {
            let book = book(&clusters, &pools, members);
            let inputs = BindInputs {
                book: &book,
                members,
                ingresses: &ingresses,
                claims: &claims,
                now_ms,
                policy: Policy::default(),
            };
            let next = bind(&inputs, "eu", &shares, Some(previous));
            let view = cluster_view(&members["eu"], book.get("eu"), Some(&next)).unwrap();
            (next, view, book)
        };
        let (moved, view, book) = run(&members, &previous, 1_000);
        let left: Vec<&IngressKey> = moved
            .iter()
            .filter(|(_, b)| b.pool.as_deref() == Some("b"))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(left.len(), 1, "one share is enough to leave: {moved:?}");
        let mover = left[0].clone();
        let binding = &moved[&mover];
        assert_eq!(binding.leaving.as_ref().unwrap().pool, "a");
        assert_eq!(binding.active(), Some("a"), "DNS stays on a until b serves");
        let vip_of = |view: &AgentState| {
            view.report
                .as_deref()
                .unwrap()
                .ingresses
                .iter()
                .find(|i| i.key == mover)
                .unwrap()
                .addresses
                .clone()
        };
        assert_eq!(vip_of(&view), [Address::ip(book["eu"][0].vips[0])]);
        // Both pools are told to serve it.
        let plan = pool_plan(book.get("eu"), Some(&moved), Vec::new());
        assert_eq!(plan.bindings[&mover], ["b", "a"]);
        // b applies and reports it healthy: DNS moves to b's VIP, a drains.
        let h3 = members.get_mut("eu").unwrap().get_mut("h3").unwrap();
        *h3 = member("h3", "r2", &[&mover.name], 0.0, Some(("b", "MASTER")));
        let (serving, view, book) = run(&members, &moved, 2_000);
        let drain = serving[&mover]
            .leaving
            .as_ref()
            .unwrap()
            .drain_until_ms
            .unwrap();
        assert_eq!(drain, 2_000 + MIN_DRAIN_MS);
        assert_eq!(serving[&mover].active(), Some("b"));
        assert_eq!(vip_of(&view), [Address::ip(book["eu"][1].vips[0])]);
        // After the drain, a is told to stop.
        let (done, _, book) = run(&members, &serving, drain);
        assert!(done[&mover].leaving.is_none());
        let plan = pool_plan(book.get("eu"), Some(&done), Vec::new());
        assert_eq!(plan.bindings[&mover], ["b"]);
    }

    #[test]
    fn a_cluster_is_saturated_when_every_ready_pool_is_or_its_capacity_is_reached() {
        let policy = Policy::default();
        // a at 95 of 100 rps, b idle: not saturated.
        let (clusters, pools, members) = world(vec![
            member("h1", "r1", &["web"], 95.0, None),
            member("h3", "r2", &[], 0.0, None),
        ]);
        let book = book(&clusters, &pools, &members);
        let views: BTreeMap<String, AgentState> = [(
            "eu".to_owned(),
            cluster_view(&members["eu"], book.get("eu"), None).unwrap(),
        )]
        .into();
        assert!(saturated_clusters(&clusters, &book, &views, &policy).is_empty());
        // b gone: the only ready pool is saturated.
        let (clusters, pools, members) = world(vec![member("h1", "r1", &["web"], 95.0, None)]);
        let book = super::book(&clusters, &pools, &members);
        assert!(saturated_clusters(&clusters, &book, &views, &policy).contains("eu"));
        // No pools, the Cluster's own capacity.connections reached (1 connection per
        // share listener here; 0.9 of 1 is reached).
        let mut clusters = clusters;
        clusters.get_mut("eu").unwrap().spec.capacity = Some(fedingress_api::cluster::Capacity {
            rps: None,
            connections: Some(1),
        });
        let mut view = views["eu"].clone();
        let mut report = (*view.report.clone().unwrap()).clone();
        report.active_connections = 1;
        view.report = Some(Arc::new(report));
        let views = [("eu".to_owned(), view)].into();
        assert!(saturated_clusters(&clusters, &Book::new(), &views, &policy).contains("eu"));
    }

    #[test]
    fn a_claimed_pool_serves_its_claim_only_and_a_stale_claim_nothing() {
        let (clusters, mut pools, members) = world(vec![
            member("h1", "r1", &[], 0.0, None),
            member("h3", "r2", &[], 0.0, None),
        ]);
        let mut claim = IngressClaim::new("default", "shop", Default::default());
        claim.metadata.uid = Some("new".into());
        claim.spec.ingresses = vec!["web".into()];
        let claims: BTreeMap<IngressKey, IngressClaim> = [(key("shop"), claim)].into();
        let ingresses: BTreeMap<IngressKey, FederatedIngress> =
            [(key("web"), ingress("web")), (key("api"), ingress("api"))].into();
        let keys = [key("api"), key("web")];
        let shares: Vec<&IngressKey> = keys.iter().collect();
        let run = |pools: &BTreeMap<String, IngressPool>| {
            let book = book(&clusters, pools, &members);
            let inputs = BindInputs {
                book: &book,
                members: &members,
                ingresses: &ingresses,
                claims: &claims,
                now_ms: 0,
                policy: Policy::default(),
            };
            bind(&inputs, "eu", &shares, None)
        };
        // a is claimed by shop (same uid): web goes there, api to b.
        pools.get_mut("a").unwrap().spec.claim_ref = Some(pool_api::ClaimRef {
            namespace: "default".into(),
            name: "shop".into(),
            uid: "new".into(),
        });
        let bound = run(&pools);
        assert_eq!(bound[&key("web")].pool.as_deref(), Some("a"));
        assert_eq!(bound[&key("api")].pool.as_deref(), Some("b"));
        // a was retained by an earlier claim of that name: it takes nothing.
        pools
            .get_mut("a")
            .unwrap()
            .spec
            .claim_ref
            .as_mut()
            .unwrap()
            .uid = "old".into();
        let bound = run(&pools);
        assert_eq!(bound[&key("web")].pool.as_deref(), Some("b"));
        assert_eq!(bound[&key("api")].pool.as_deref(), Some("b"));
    }

    #[test]
    fn provisions_come_from_the_claim_of_a_provisioned_pool() {
        let mut p = pool("shop-eu", "r1", 100);
        p.metadata
            .labels
            .insert(PROVISIONED_BY.into(), "default.shop".into());
        p.spec.claim_ref = Some(pool_api::ClaimRef {
            namespace: "default".into(),
            name: "shop".into(),
            uid: String::new(),
        });
        let mut claim = IngressClaim::new("default", "shop", Default::default());
        claim.spec.template.replicas = Some(3);
        claim.spec.template.member_labels = [("tier".to_owned(), "gold".to_owned())].into();
        let pools: BTreeMap<String, IngressPool> = [("shop-eu".to_owned(), p)].into();
        let claims = [(key("shop"), claim)].into();
        let book = book(
            &[("eu".to_owned(), cluster())].into(),
            &pools,
            &Members::new(),
        );
        let provisions = provisions(book.get("eu"), &pools, &claims);
        assert_eq!(provisions.len(), 1);
        assert_eq!(provisions[0].replicas, 3);
        assert_eq!(provisions[0].member_labels[POOL_LABEL], "shop-eu");
        assert_eq!(provisions[0].member_labels["tier"], "gold");
    }
}
