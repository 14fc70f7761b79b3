//! Scheduling shares onto pools: which pool of a cluster serves each (ingress, cluster)
//! share, by the ingress's `poolSelector`, the number of shares already bound, and live
//! load against capacity (issue 24).
//!
//! Entry points: [`schedule`] (one [`Binding`] per share, in input order) and
//! [`schedule_projected`] (the same, plus each pool's projected load afterwards),
//! [`utilization`], and [`saturated`] (a cluster whose every ready pool is saturated takes
//! no new shares). Pure and deterministic: the same input gives the same output, whatever
//! order the pools come in; the hub runs it again whenever pools, shares or loads change.
//!
//! # Rules
//! - **Eligible pool** for a share: it matches the share's selector (none: every pool),
//!   has a ready member and is not being deleted.
//! - **Sticky.** A share stays on its current pool while that pool is eligible and not
//!   saturated ([`Policy::saturated_at`]).
//! - **Forced moves.** A share whose pool is gone, not ready, being deleted or no longer
//!   selected moves to the eligible pool a new share would get. These moves count
//!   against [`Policy::max_moves`] but are never held back by it: the share is not
//!   served where it is.
//! - **Saturation moves**, pool by pool in name order: from a saturated pool, its shares
//!   leave most loaded first (so the fewest moves bring it down), each only to an eligible
//!   pool whose projected utilization *after* taking it stays below
//!   [`Policy::move_below`] (hysteresis: the target does not become the next saturated
//!   pool), and only until the source's projected utilization is below
//!   [`Policy::saturated_at`]; at most [`Policy::max_moves`] moves per call in all. A
//!   share that cannot go anywhere stays ([`Decision::KeptSaturated`]).
//! - **New shares**, most loaded first (then by key), go to the eligible pool that is not
//!   saturated with the lowest projected utilization after taking the share; ties go to
//!   the pool with the fewest shares bound (counted as bindings are made in this call),
//!   then to the first name. Pools without a capacity compare by cpu and then by count.
//! - Order within a call: forced moves, then saturation moves, then new shares.
//!   Projected loads are updated with every binding made, so many new shares spread.
//! - **Nowhere to go**: a share is [`Decision::Unbound`]; one whose pool lost its last
//!   ready member stays bound to it (it serves again when a member is back), any other
//!   is on no pool.
//!
//! # Load of a share
//! A share's own measured load ([`ShareInput::load`]) is used when it has one. A share
//! reporting nothing (all zero) is counted as an equal part of its current pool's load;
//! a share that reports traffic but no cpu is given the pool's cpu in proportion to its
//! largest traffic fraction. A new share with no load adds nothing but a count.
//!
//! What does not belong here: reading loads, persisting bindings, make-before-break (the
//! hub carries a move out), and placement across clusters (see [`saturated`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use crate::plan::IngressKey;
use crate::selector::LabelSelector;

/// Load measured on a pool (the sum over its members) or a share's part of it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    pub rps: f64,
    pub connections: f64,
    pub bytes_per_second: f64,
    /// 0..1: the busiest member's data plane CPU (its process's share of the host's
    /// cores).
    pub cpu: f64,
}

impl Load {
    pub const ZERO: Load = Load {
        rps: 0.0,
        connections: 0.0,
        bytes_per_second: 0.0,
        cpu: 0.0,
    };

    /// Nothing measured.
    pub fn is_zero(&self) -> bool {
        self.rps <= 0.0
            && self.connections <= 0.0
            && self.bytes_per_second <= 0.0
            && self.cpu <= 0.0
    }

    pub fn plus(&self, other: &Load) -> Load {
        Load {
            rps: self.rps + other.rps,
            connections: self.connections + other.connections,
            bytes_per_second: self.bytes_per_second + other.bytes_per_second,
            cpu: self.cpu + other.cpu,
        }
    }

    /// `self − other`, never below zero.
    pub fn minus(&self, other: &Load) -> Load {
        Load {
            rps: (self.rps - other.rps).max(0.0),
            connections: (self.connections - other.connections).max(0.0),
            bytes_per_second: (self.bytes_per_second - other.bytes_per_second).max(0.0),
            cpu: (self.cpu - other.cpu).max(0.0),
        }
    }

    pub fn scaled(&self, factor: f64) -> Load {
        Load {
            rps: self.rps * factor,
            connections: self.connections * factor,
            bytes_per_second: self.bytes_per_second * factor,
            cpu: self.cpu * factor,
        }
    }
}

/// What a pool can carry (`IngressPool.spec.capacity`); `None` = not limited in that
/// dimension. A capacity of zero or less is ignored (validation refuses it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Capacity {
    pub rps: Option<f64>,
    pub connections: Option<f64>,
    pub bytes_per_second: Option<f64>,
}

/// How full a pool is: the highest of `load / capacity` over the dimensions that have a
/// capacity, and of cpu (whose capacity is 1). 1.0 = full; may exceed 1.
pub fn utilization(load: &Load, capacity: &Capacity) -> f64 {
    let mut highest = load.cpu.max(0.0);
    for (used, limit) in [
        (load.rps, capacity.rps),
        (load.connections, capacity.connections),
        (load.bytes_per_second, capacity.bytes_per_second),
    ] {
        if let Some(limit) = limit
            && limit > 0.0
        {
            highest = highest.max(used / limit);
        }
    }
    highest
}

/// A pool of the cluster, as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct PoolInput<'a> {
    /// Unique within the cluster (a duplicate name is ignored after the first).
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// At least one member is ready.
    pub ready: bool,
    pub capacity: Capacity,
    /// Measured, including the shares bound to it now.
    pub load: Load,
    /// Being deleted: keeps serving its shares until they have moved, takes no new ones.
    pub draining: bool,
}

/// One (ingress, cluster) share to bind.
#[derive(Clone, Debug)]
pub struct ShareInput<'a> {
    pub key: &'a IngressKey,
    /// The ingress's `poolSelector` for this cluster; `None` = any pool.
    pub selector: Option<&'a LabelSelector>,
    /// The pool it is bound to now (`status.clusters[].pool`).
    pub current: Option<&'a str>,
    /// Its own measured load on its current pool; zero if unknown.
    pub load: Load,
}

/// The scheduler's knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// A pool at or above this utilization is saturated: it takes no new share, and
    /// shares leave it (default 0.9).
    pub saturated_at: f64,
    /// A share leaves a saturated pool only for a pool that stays below this after taking
    /// it (default 0.7): the gap to `saturated_at` is the hysteresis.
    pub move_below: f64,
    /// Moves per call, forced ones included (default 10).
    pub max_moves: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            saturated_at: 0.9,
            move_below: 0.7,
            max_moves: 10,
        }
    }
}

/// Where a share is bound after this call, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub key: IngressKey,
    /// `None`: on no pool (see [`Decision::Unbound`]).
    pub pool: Option<String>,
    pub decision: Decision,
}

/// Why a share is where it is: one sentence for `fedctl explain` ([`fmt::Display`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Stays on its current pool, which is eligible and not saturated.
    Kept,
    /// Stays on its current pool although that pool is saturated.
    KeptSaturated { utilization: f64, why: StayReason },
    /// A new share, bound to the best eligible pool.
    Bound {
        /// The pool's projected utilization before it took the share.
        utilization: f64,
        /// Shares bound to the pool before this one.
        bound: usize,
    },
    /// Moved off its previous pool.
    Moved { from: String, why: MoveReason },
    /// On no pool; or, for a pool with no ready member, still on it (see
    /// [`Binding::pool`]) until another pool can take it.
    Unbound { why: UnboundReason },
}

/// Why a share left its pool.
#[derive(Clone, Debug, PartialEq)]
pub enum MoveReason {
    /// The pool was at or above `saturated_at`.
    Saturated { utilization: f64 },
    /// The pool no longer exists.
    Gone,
    /// The pool had no ready member.
    NotReady,
    /// The pool is being deleted.
    Draining,
    /// The pool no longer matches the share's `poolSelector`.
    SelectorChanged,
}

/// Why a share stays on a saturated pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StayReason {
    /// No other eligible pool would stay below `move_below` after taking it.
    NoRoom { move_below: f64 },
    /// This call already made its `max_moves` moves.
    MoveLimit { max_moves: usize },
}

/// Why a share is on no pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnboundReason {
    /// No pool of the cluster matches the `poolSelector`.
    NoPoolMatches,
    /// Pools match, but none has a ready member (or all are being deleted).
    NoneReady,
    /// Every eligible pool is saturated.
    AllSaturated,
}

fn percent(utilization: f64) -> String {
    format!("{:.0}%", utilization * 100.0)
}

impl fmt::Display for MoveReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveReason::Saturated { utilization } => {
                write!(f, "it was saturated ({} utilized)", percent(*utilization))
            }
            MoveReason::Gone => write!(f, "it no longer exists"),
            MoveReason::NotReady => write!(f, "it has no ready member"),
            MoveReason::Draining => write!(f, "it is being deleted"),
            MoveReason::SelectorChanged => write!(f, "it no longer matches the poolSelector"),
        }
    }
}

impl fmt::Display for StayReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StayReason::NoRoom { move_below } => write!(
                f,
                "no other matching pool would stay below {} after taking it",
                percent(*move_below)
            ),
            StayReason::MoveLimit { max_moves } => {
                write!(f, "this round already made its {max_moves} moves")
            }
        }
    }
}

impl fmt::Display for UnboundReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UnboundReason::NoPoolMatches => "no pool matches the poolSelector",
            UnboundReason::NoneReady => "no matching pool has a ready member",
            UnboundReason::AllSaturated => "every matching pool is saturated",
        })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Kept => write!(f, "kept: its pool is ready and not saturated"),
            Decision::KeptSaturated { utilization, why } => write!(
                f,
                "kept on a saturated pool ({} utilized): {why}",
                percent(*utilization)
            ),
            Decision::Bound { utilization, bound } => write!(
                f,
                "bound to the least utilized matching pool ({} projected, {bound} shares before it)",
                percent(*utilization)
            ),
            Decision::Moved { from, why } => write!(f, "moved from pool {from}: {why}"),
            Decision::Unbound { why } => write!(f, "unbound: {why}"),
        }
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pool {
            Some(pool) => write!(f, "{} is on pool {pool}, {}", self.key, self.decision),
            None => write!(f, "{} is on no pool, {}", self.key, self.decision),
        }
    }
}

/// Whether the cluster takes no new shares: every pool with a ready member that is not
/// being deleted is saturated, or there is none.
pub fn saturated(pools: &[PoolInput], policy: &Policy) -> bool {
    pools
        .iter()
        .filter(|pool| pool.ready && !pool.draining)
        .all(|pool| utilization(&pool.load, &pool.capacity) >= policy.saturated_at)
}

/// A pool after a [`schedule_projected`] call.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolProjection {
    pub name: String,
    /// Its measured load with the moved shares' loads taken off and the new ones' added.
    pub load: Load,
    /// Shares bound to it after the call.
    pub shares: usize,
    pub utilization: f64,
}

/// The result of [`schedule_projected`].
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// One per share, in input order.
    pub bindings: Vec<Binding>,
    /// One per distinct pool name, in name order.
    pub pools: Vec<PoolProjection>,
}

/// Binds every share to a pool (see the module's rules). One [`Binding`] per share, in
/// input order.
pub fn schedule(pools: &[PoolInput], shares: &[ShareInput], policy: &Policy) -> Vec<Binding> {
    schedule_projected(pools, shares, policy).bindings
}

/// A pool's running state during one call.
struct PoolState<'a> {
    name: &'a str,
    eligible: bool,
    capacity: Capacity,
    load: Load,
    bound: usize,
}

impl PoolState<'_> {
    fn utilization(&self) -> f64 {
        utilization(&self.load, &self.capacity)
    }
    fn utilization_with(&self, extra: &Load) -> f64 {
        utilization(&self.load.plus(extra), &self.capacity)
    }
}

/// The pools during one call, with the eligible ones ordered by (utilization, shares
/// bound, name), so that a search stops at the first pool that cannot beat the best
/// found: a share's load only raises a pool's utilization.
struct Board<'a> {
    pools: Vec<PoolState<'a>>,
    /// (utilization as bits, bound, index): utilizations are never negative, so their
    /// bit patterns sort like the numbers.
    order: BTreeSet<(u64, usize, usize)>,
}

impl<'a> Board<'a> {
    fn new(pools: Vec<PoolState<'a>>) -> Self {
        let mut board = Self {
            pools,
            order: BTreeSet::new(),
        };
        for p in 0..board.pools.len() {
            if board.pools[p].eligible {
                let key = board.key(p);
                board.order.insert(key);
            }
        }
        board
    }

    fn key(&self, p: usize) -> (u64, usize, usize) {
        (
            self.pools[p].utilization().to_bits(),
            self.pools[p].bound,
            p,
        )
    }

    /// Changes pool `p` by `change`, keeping the order.
    fn change(&mut self, p: usize, change: impl FnOnce(&mut PoolState)) {
        let eligible = self.pools[p].eligible;
        if eligible {
            let key = self.key(p);
            self.order.remove(&key);
        }
        change(&mut self.pools[p]);
        if eligible {
            let key = self.key(p);
            self.order.insert(key);
        }
    }

    fn add(&mut self, p: usize, load: &Load) {
        self.change(p, |pool| {
            pool.load = pool.load.plus(load);
            pool.bound += 1;
        });
    }

    fn remove(&mut self, p: usize, load: &Load) {
        self.change(p, |pool| {
            pool.load = pool.load.minus(load);
            pool.bound = pool.bound.saturating_sub(1);
        });
    }

    /// The best eligible pool of `group` for `load`: the lowest utilization after taking
    /// it, then the fewest shares bound, then the name; only pools whose utilization now
    /// is below `now_below` and after taking it below `after_below` count.
    fn best(
        &self,
        group: &Group,
        load: &Load,
        except: Option<usize>,
        now_below: f64,
        after_below: f64,
    ) -> Option<usize> {
        let mut best: Option<(f64, usize, usize)> = None;
        for &(bits, bound, p) in &self.order {
            let now = f64::from_bits(bits);
            if now >= now_below || now >= after_below {
                break;
            }
            if let Some(best) = best
                && (now, bound, p) > best
            {
                break;
            }
            if Some(p) == except || !group.contains(p) {
                continue;
            }
            let after = self.pools[p].utilization_with(load);
            if after >= after_below {
                continue;
            }
            let candidate = (after, bound, p);
            if best.is_none_or(|best| candidate < best) {
                best = Some(candidate);
            }
        }
        best.map(|(_, _, p)| p)
    }

    /// The pool a new (or forced-out) share goes to, or why none: the best eligible
    /// pool of its group that is not saturated.
    fn for_new(&self, group: &Group, load: &Load, policy: &Policy) -> Result<usize, UnboundReason> {
        if group.pools.is_empty() {
            return Err(UnboundReason::NoPoolMatches);
        }
        if !group.any_eligible {
            return Err(UnboundReason::NoneReady);
        }
        self.best(group, load, None, policy.saturated_at, f64::INFINITY)
            .ok_or(UnboundReason::AllSaturated)
    }
}

/// The pools one selector matches, in index (= name) order.
struct Group {
    pools: Vec<usize>,
    /// Whether the group is every pool (no selector): no lookup needed.
    all: bool,
    any_eligible: bool,
}

impl Group {
    fn contains(&self, p: usize) -> bool {
        self.all || self.pools.binary_search(&p).is_ok()
    }
}

/// Per share during one call.
struct ShareState {
    /// Index into the selector groups.
    group: usize,
    /// Its load as counted on a pool (see the module's "Load of a share").
    load: Load,
    /// Index of the pool it is on (tentatively, or finally).
    pool: Option<usize>,
    decision: Option<Decision>,
}

/// [`schedule`], plus every pool's projected load and share count afterwards (what the
/// next call would see if the measured loads follow the projection).
pub fn schedule_projected(pools: &[PoolInput], shares: &[ShareInput], policy: &Policy) -> Schedule {
    // Pools in name order (the tie-break), duplicates dropped.
    let mut by_name: BTreeMap<&str, &PoolInput> = BTreeMap::new();
    for pool in pools {
        by_name.entry(pool.name).or_insert(pool);
    }
    let inputs: Vec<&PoolInput> = by_name.values().copied().collect();
    let index: HashMap<&str, usize> = inputs
        .iter()
        .enumerate()
        .map(|(i, pool)| (pool.name, i))
        .collect();
    let eligible = |p: usize| inputs[p].ready && !inputs[p].draining;

    // The pools each distinct selector matches (group 0: no selector, every pool).
    let mut groups: Vec<Group> = vec![Group {
        pools: (0..inputs.len()).collect(),
        all: true,
        any_eligible: (0..inputs.len()).any(eligible),
    }];
    let mut group_of: HashMap<String, usize> = HashMap::new();
    let share_groups: Vec<usize> = shares
        .iter()
        .map(|share| {
            let Some(selector) = share.selector else {
                return 0;
            };
            let key = serde_json::to_string(selector).ok();
            if let Some(group) = key.as_ref().and_then(|key| group_of.get(key)) {
                return *group;
            }
            let pools: Vec<usize> = (0..inputs.len())
                .filter(|i| selector.matches(inputs[*i].labels))
                .collect();
            groups.push(Group {
                any_eligible: pools.iter().any(|p| eligible(*p)),
                pools,
                all: false,
            });
            if let Some(key) = key {
                group_of.insert(key, groups.len() - 1);
            }
            groups.len() - 1
        })
        .collect();

    // Shares on each pool now, for the even split of unknown loads.
    let mut on_pool = vec![0usize; inputs.len()];
    for share in shares {
        if let Some(i) = share.current.and_then(|name| index.get(name)) {
            on_pool[*i] += 1;
        }
    }

    // Where each share stands: tentatively kept, forced out, or new. Pool loads as
    // measured, minus the forced-out shares' loads.
    let mut pool_states: Vec<PoolState> = inputs
        .iter()
        .enumerate()
        .map(|(p, pool)| PoolState {
            name: pool.name,
            eligible: eligible(p),
            capacity: pool.capacity,
            load: sanitized(&pool.load),
            bound: 0,
        })
        .collect();
    let mut states: Vec<ShareState> = Vec::with_capacity(shares.len());
    let mut forced: Vec<(usize, MoveReason)> = Vec::new();
    let mut new: Vec<usize> = Vec::new();
    for (s, share) in shares.iter().enumerate() {
        let group = share_groups[s];
        let mut entry = ShareState {
            group,
            load: sanitized(&share.load),
            pool: None,
            decision: None,
        };
        match share.current.map(|name| index.get(name).copied()) {
            None => new.push(s),
            Some(None) => forced.push((s, MoveReason::Gone)),
            Some(Some(p)) => {
                entry.load = effective_load(&entry.load, &pool_states[p].load, on_pool[p]);
                let why = if !groups[group].contains(p) {
                    Some(MoveReason::SelectorChanged)
                } else if inputs[p].draining {
                    Some(MoveReason::Draining)
                } else if !inputs[p].ready {
                    Some(MoveReason::NotReady)
                } else {
                    None
                };
                match why {
                    Some(why) => forced.push((s, why)),
                    None => {
                        entry.pool = Some(p);
                        pool_states[p].bound += 1;
                    }
                }
            }
        }
        states.push(entry);
    }
    for (s, _) in &forced {
        if let Some(p) = shares[*s].current.and_then(|name| index.get(name)) {
            pool_states[*p].load = pool_states[*p].load.minus(&states[*s].load);
        }
    }
    let mut board = Board::new(pool_states);

    let by_load_then_key = |a: &usize, b: &usize, states: &[ShareState]| {
        total_load(&states[*b].load)
            .total_cmp(&total_load(&states[*a].load))
            .then_with(|| shares[*a].key.cmp(shares[*b].key))
    };
    let mut moves = 0usize;

    // Forced moves, most loaded first: like new shares, but they name their old pool.
    forced.sort_by(|a, b| by_load_then_key(&a.0, &b.0, &states));
    for (s, why) in forced {
        let from = shares[s].current.unwrap_or_default().to_string();
        let load = states[s].load;
        match board.for_new(&groups[states[s].group], &load, policy) {
            Ok(p) => {
                board.add(p, &load);
                states[s].pool = Some(p);
                states[s].decision = Some(Decision::Moved { from, why });
                moves += 1;
            }
            Err(unbound) => {
                // Still there but not ready: it stays bound until another pool can take it.
                states[s].pool = match why {
                    MoveReason::NotReady => index.get(from.as_str()).copied(),
                    _ => None,
                };
                states[s].decision = Some(Decision::Unbound { why: unbound });
            }
        }
    }

    // Saturation moves, pool by pool in name order, most loaded share first.
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); board.pools.len()];
    for (s, share) in states.iter().enumerate() {
        if let (Some(p), None) = (share.pool, &share.decision) {
            on[p].push(s);
        }
    }
    let mut stay_reason: Vec<Option<StayReason>> = vec![None; board.pools.len()];
    for p in 0..board.pools.len() {
        let before = board.pools[p].utilization();
        if !board.pools[p].eligible || before < policy.saturated_at {
            continue;
        }
        let mut candidates = std::mem::take(&mut on[p]);
        candidates.sort_by(|a, b| by_load_then_key(a, b, &states));
        for s in candidates {
            let now = board.pools[p].utilization();
            if now < policy.saturated_at {
                break;
            }
            if moves >= policy.max_moves {
                stay_reason[p] = Some(StayReason::MoveLimit {
                    max_moves: policy.max_moves,
                });
                break;
            }
            let load = states[s].load;
            // Only a move that brings this pool down at all, to a pool that stays below
            // move_below after taking the share.
            let target =
                if utilization(&board.pools[p].load.minus(&load), &board.pools[p].capacity) < now {
                    board.best(
                        &groups[states[s].group],
                        &load,
                        Some(p),
                        policy.move_below,
                        policy.move_below,
                    )
                } else {
                    None
                };
            match target {
                Some(target) => {
                    board.remove(p, &load);
                    board.add(target, &load);
                    states[s].pool = Some(target);
                    states[s].decision = Some(Decision::Moved {
                        from: board.pools[p].name.to_string(),
                        why: MoveReason::Saturated {
                            utilization: before,
                        },
                    });
                    moves += 1;
                }
                None => {
                    stay_reason[p].get_or_insert(StayReason::NoRoom {
                        move_below: policy.move_below,
                    });
                }
            }
        }
    }
    for share in states.iter_mut() {
        if let (Some(p), None) = (share.pool, &share.decision) {
            let now = board.pools[p].utilization();
            share.decision = Some(if now >= policy.saturated_at {
                Decision::KeptSaturated {
                    utilization: now,
                    why: stay_reason[p].unwrap_or(StayReason::NoRoom {
                        move_below: policy.move_below,
                    }),
                }
            } else {
                Decision::Kept
            });
        }
    }

    // New shares, most loaded first.
    new.sort_by(|a, b| by_load_then_key(a, b, &states));
    for s in new {
        let load = states[s].load;
        match board.for_new(&groups[states[s].group], &load, policy) {
            Ok(p) => {
                let utilization = board.pools[p].utilization();
                let bound = board.pools[p].bound;
                board.add(p, &load);
                states[s].pool = Some(p);
                states[s].decision = Some(Decision::Bound { utilization, bound });
            }
            Err(why) => states[s].decision = Some(Decision::Unbound { why }),
        }
    }

    let bindings = shares
        .iter()
        .zip(states)
        .map(|(share, state)| Binding {
            key: share.key.clone(),
            pool: state.pool.map(|p| board.pools[p].name.to_string()),
            decision: state.decision.unwrap_or(Decision::Unbound {
                why: UnboundReason::NoPoolMatches,
            }),
        })
        .collect();
    let pools = board
        .pools
        .iter()
        .map(|pool| PoolProjection {
            name: pool.name.to_string(),
            load: pool.load,
            shares: pool.bound,
            utilization: pool.utilization(),
        })
        .collect();
    Schedule { bindings, pools }
}

/// `load` with negative or NaN readings as zero.
fn sanitized(load: &Load) -> Load {
    let clean = |v: f64| if v > 0.0 { v } else { 0.0 };
    Load {
        rps: clean(load.rps),
        connections: clean(load.connections),
        bytes_per_second: clean(load.bytes_per_second),
        cpu: clean(load.cpu),
    }
}

/// A share's load as counted on a pool carrying `pool_load` for `shares` shares.
fn effective_load(own: &Load, pool_load: &Load, shares: usize) -> Load {
    if own.is_zero() {
        return if shares == 0 {
            Load::ZERO
        } else {
            pool_load.scaled(1.0 / shares as f64)
        };
    }
    if own.cpu > 0.0 {
        return *own;
    }
    let fraction = [
        (own.rps, pool_load.rps),
        (own.connections, pool_load.connections),
        (own.bytes_per_second, pool_load.bytes_per_second),
    ]
    .into_iter()
    .filter(|(_, total)| *total > 0.0)
    .map(|(part, total)| part / total)
    .fold(0.0f64, f64::max)
    .min(1.0);
    Load {
        cpu: pool_load.cpu * fraction,
        ..*own
    }
}

/// One number to order shares by load (most first): traffic dimensions are not
/// comparable, so the sum of cpu and of each dimension per a nominal unit is only an
/// order, not a quantity.
fn total_load(load: &Load) -> f64 {
    load.cpu + load.rps / 1_000.0 + load.connections / 1_000.0 + load.bytes_per_second / 1e8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn rps(value: f64) -> Load {
        Load {
            rps: value,
            ..Load::ZERO
        }
    }

    fn cap(value: f64) -> Capacity {
        Capacity {
            rps: Some(value),
            ..Capacity::default()
        }
    }

    struct Pool {
        name: String,
        labels: BTreeMap<String, String>,
        ready: bool,
        draining: bool,
        capacity: Capacity,
        load: Load,
    }

    fn pool(name: &str, capacity: f64, load: f64) -> Pool {
        Pool {
            name: name.to_string(),
            labels: BTreeMap::new(),
            ready: true,
            draining: false,
            capacity: cap(capacity),
            load: rps(load),
        }
    }

    fn inputs(pools: &[Pool]) -> Vec<PoolInput<'_>> {
        pools
            .iter()
            .map(|p| PoolInput {
                name: &p.name,
                labels: &p.labels,
                ready: p.ready,
                capacity: p.capacity,
                load: p.load,
                draining: p.draining,
            })
            .collect()
    }

    struct Share {
        key: IngressKey,
        selector: Option<LabelSelector>,
        current: Option<String>,
        load: Load,
    }

    fn share(name: &str, current: Option<&str>, load: f64) -> Share {
        Share {
            key: IngressKey::new("default", name),
            selector: None,
            current: current.map(String::from),
            load: rps(load),
        }
    }

    fn share_inputs(shares: &[Share]) -> Vec<ShareInput<'_>> {
        shares
            .iter()
            .map(|s| ShareInput {
                key: &s.key,
                selector: s.selector.as_ref(),
                current: s.current.as_deref(),
                load: s.load,
            })
            .collect()
    }

    fn run(pools: &[Pool], shares: &[Share], policy: &Policy) -> Schedule {
        schedule_projected(&inputs(pools), &share_inputs(shares), policy)
    }

    /// Feeds a schedule's projection back: pools carry the projected load, shares are on
    /// their new pools.
    fn apply(pools: &mut [Pool], shares: &mut [Share], result: &Schedule) {
        for pool in pools.iter_mut() {
            if let Some(p) = result.pools.iter().find(|p| p.name == pool.name) {
                pool.load = p.load;
            }
        }
        for (share, binding) in shares.iter_mut().zip(&result.bindings) {
            share.current = binding.pool.clone();
        }
    }

    fn on<'a>(result: &'a Schedule, name: &str) -> &'a Binding {
        result.bindings.iter().find(|b| b.key.name == name).unwrap()
    }

    #[test]
    fn utilization_is_the_fullest_dimension_or_cpu() {
        let load = Load {
            rps: 50.0,
            connections: 900.0,
            bytes_per_second: 1e6,
            cpu: 0.3,
        };
        let capacity = Capacity {
            rps: Some(100.0),
            connections: None,
            bytes_per_second: Some(1e7),
        };
        assert_eq!(utilization(&load, &capacity), 0.5);
        assert_eq!(utilization(&load, &Capacity::default()), 0.3);
        let capacity = Capacity {
            connections: Some(1000.0),
            ..capacity
        };
        assert_eq!(utilization(&load, &capacity), 0.9);
        // A zero capacity is ignored, not a division by zero.
        assert_eq!(utilization(&load, &cap(0.0)), 0.3);
    }

    #[test]
    fn a_share_keeps_its_pool_while_it_is_fine() {
        // b is emptier, but a is ready, selected and not saturated: no move.
        let pools = [pool("a", 100.0, 60.0), pool("b", 100.0, 0.0)];
        let shares = [share("web", Some("a"), 30.0)];
        let result = run(&pools, &shares, &Policy::default());
        assert_eq!(result.bindings[0].pool.as_deref(), Some("a"));
        assert_eq!(result.bindings[0].decision, Decision::Kept);
        assert_eq!(
            result.bindings[0].to_string(),
            "default/web is on pool a, kept: its pool is ready and not saturated"
        );
    }

    #[test]
    fn new_shares_go_to_the_least_utilized_pool_then_fewest_then_name() {
        let pools = [
            pool("c", 100.0, 10.0),
            pool("b", 100.0, 0.0),
            pool("a", 100.0, 0.0),
        ];
        let shares = [
            share("x", None, 0.0),
            share("y", None, 0.0),
            share("z", None, 0.0),
        ];
        let result = run(&pools, &shares, &Policy::default());
        // x (first by key) to a (name), y to b (fewest), z to a or b? Both have one now:
        // a by name; c is more utilized.
        assert_eq!(on(&result, "x").pool.as_deref(), Some("a"));
        assert_eq!(on(&result, "y").pool.as_deref(), Some("b"));
        assert_eq!(on(&result, "z").pool.as_deref(), Some("a"));
        assert_eq!(
            on(&result, "y").decision,
            Decision::Bound {
                utilization: 0.0,
                bound: 0
            }
        );
        // The order of the pools in the input changes nothing.
        let reversed: Vec<Pool> = pools.into_iter().rev().collect();
        assert_eq!(run(&reversed, &shares, &Policy::default()), result);
    }

    #[test]
    fn selector_limits_the_pools() {
        let mut pools = [pool("a", 100.0, 0.0), pool("b", 100.0, 50.0)];
        pools[1].labels = labels(&[("tier", "gold")]);
        let mut shares = [share("gold", None, 0.0), share("none", None, 0.0)];
        shares[0].selector = Some(LabelSelector::from_labels([("tier", "gold")]));
        shares[1].selector = Some(LabelSelector::from_labels([("tier", "silver")]));
        let result = run(&pools, &shares, &Policy::default());
        assert_eq!(on(&result, "gold").pool.as_deref(), Some("b"));
        assert_eq!(on(&result, "none").pool, None);
        assert_eq!(
            on(&result, "none").to_string(),
            "default/none is on no pool, unbound: no pool matches the poolSelector"
        );
        // The selector changes: the share moves to a pool that matches.
        shares[0].current = Some("b".into());
        pools[0].labels = labels(&[("tier", "silver")]);
        shares[0].selector = Some(LabelSelector::from_labels([("tier", "silver")]));
        let result = run(&pools, &shares, &Policy::default());
        assert_eq!(on(&result, "gold").pool.as_deref(), Some("a"));
        assert_eq!(
            on(&result, "gold").decision,
            Decision::Moved {
                from: "b".into(),
                why: MoveReason::SelectorChanged
            }
        );
    }

    #[test]
    fn shares_leave_a_gone_not_ready_or_draining_pool() {
        let mut pools = [
            pool("a", 100.0, 10.0),
            pool("b", 100.0, 10.0),
            pool("c", 100.0, 0.0),
        ];
        pools[0].ready = false;
        pools[1].draining = true;
        let shares = [
            share("on-a", Some("a"), 10.0),
            share("on-b", Some("b"), 10.0),
            share("on-gone", Some("gone"), 0.0),
        ];
        let result = run(&pools, &shares, &Policy::default());
        for (name, from, why) in [
            ("on-a", "a", MoveReason::NotReady),
            ("on-b", "b", MoveReason::Draining),
            ("on-gone", "gone", MoveReason::Gone),
        ] {
            let binding = on(&result, name);
            assert_eq!(binding.pool.as_deref(), Some("c"), "{binding}");
            assert_eq!(
                binding.decision,
                Decision::Moved {
                    from: from.into(),
                    why
                }
            );
        }
        assert_eq!(
            on(&result, "on-a").to_string(),
            "default/on-a is on pool c, moved from pool a: it has no ready member"
        );
        // With nowhere to go, a share of a pool without a ready member stays bound to it;
        // one of a gone pool is on no pool.
        pools[2].ready = false;
        let result = run(&pools, &shares, &Policy::default());
        assert_eq!(on(&result, "on-a").pool.as_deref(), Some("a"));
        assert_eq!(
            on(&result, "on-a").decision,
            Decision::Unbound {
                why: UnboundReason::NoneReady
            }
        );
        assert_eq!(on(&result, "on-b").pool, None);
        assert_eq!(on(&result, "on-gone").pool, None);
    }

    #[test]
    fn a_saturated_pool_sheds_just_enough_most_loaded_first() {
        // a: 95 of 100 rps from four shares; b empty. Moving the 40 brings a to 55 %
        // (< 90 %) and b to 40 % (< 70 %): one move, the largest.
        let mut pools = [pool("a", 100.0, 95.0), pool("b", 100.0, 0.0)];
        let mut shares = [
            share("s10", Some("a"), 10.0),
            share("s40", Some("a"), 40.0),
            share("s20", Some("a"), 20.0),
            share("s25", Some("a"), 25.0),
        ];
        let policy = Policy::default();
        let result = run(&pools, &shares, &policy);
        let moved: Vec<&str> = result
            .bindings
            .iter()
            .filter(|b| matches!(b.decision, Decision::Moved { .. }))
            .map(|b| b.key.name.as_str())
            .collect();
        assert_eq!(moved, ["s40"]);
        assert_eq!(
            on(&result, "s40").to_string(),
            "default/s40 is on pool b, moved from pool a: it was saturated (95% utilized)"
        );
        // No flapping: the next call, on the projected loads, moves nothing.
        apply(&mut pools, &mut shares, &result);
        let again = run(&pools, &shares, &policy);
        assert!(
            again.bindings.iter().all(|b| b.decision == Decision::Kept),
            "{:?}",
            again.bindings
        );
    }

    #[test]
    fn hysteresis_keeps_a_share_rather_than_saturate_another_pool() {
        // b would be at 75 % after taking the 40: above move_below, so the share stays.
        let pools = [pool("a", 100.0, 95.0), pool("b", 100.0, 35.0)];
        let shares = [share("s40", Some("a"), 40.0), share("s55", Some("a"), 55.0)];
        let result = run(&pools, &shares, &Policy::default());
        for binding in &result.bindings {
            assert_eq!(binding.pool.as_deref(), Some("a"));
            assert_eq!(
                binding.decision,
                Decision::KeptSaturated {
                    utilization: 0.95,
                    why: StayReason::NoRoom { move_below: 0.7 }
                }
            );
        }
        assert_eq!(
            result.bindings[0].to_string(),
            "default/s40 is on pool a, kept on a saturated pool (95% utilized): no other matching pool would stay below 70% after taking it"
        );
    }

    #[test]
    fn a_saturated_pool_with_unknown_share_loads_splits_evenly() {
        // a: 100 % cpu, ten shares reporting nothing: each counts as 10 % cpu, so two
        // move (to 80 %, below 90 %).
        let mut pools = [pool("a", 100.0, 0.0), pool("b", 100.0, 0.0)];
        pools[0].load = Load {
            cpu: 1.0,
            ..Load::ZERO
        };
        let shares: Vec<Share> = (0..10)
            .map(|i| share(&format!("s{i}"), Some("a"), 0.0))
            .collect();
        let result = run(&pools, &shares, &Policy::default());
        let moved = result
            .bindings
            .iter()
            .filter(|b| b.pool.as_deref() == Some("b"))
            .count();
        assert_eq!(moved, 2);
        assert!((result.pools[0].utilization - 0.8).abs() < 1e-9);
    }

    #[test]
    fn max_moves_bounds_the_moves_of_one_call() {
        // 30 shares of 5 rps saturate a (150 %); 10 pools could take them all.
        let mut pools = vec![pool("a", 100.0, 150.0)];
        pools.extend((0..10).map(|i| pool(&format!("p{i}"), 100.0, 0.0)));
        let shares: Vec<Share> = (0..30)
            .map(|i| share(&format!("s{i:02}"), Some("a"), 5.0))
            .collect();
        let policy = Policy {
            max_moves: 4,
            ..Policy::default()
        };
        let result = run(&pools, &shares, &policy);
        let moved = result
            .bindings
            .iter()
            .filter(|b| matches!(b.decision, Decision::Moved { .. }))
            .count();
        assert_eq!(moved, 4);
        let stayed = result
            .bindings
            .iter()
            .find(|b| b.pool.as_deref() == Some("a"))
            .unwrap();
        assert_eq!(
            stayed.decision,
            Decision::KeptSaturated {
                utilization: 1.3,
                why: StayReason::MoveLimit { max_moves: 4 }
            }
        );
    }

    #[test]
    fn ten_thousand_new_shares_spread_evenly() {
        let pools: Vec<Pool> = (0..1_000)
            .map(|i| pool(&format!("pool-{i:04}"), 1_000.0, 0.0))
            .collect();
        let shares: Vec<Share> = (0..10_000)
            .map(|i| share(&format!("ing-{i:05}"), None, 0.0))
            .collect();
        let result = run(&pools, &shares, &Policy::default());
        assert!(
            result.pools.iter().all(|p| p.shares == 10),
            "{:?}",
            &result.pools[..3]
        );
        assert!(
            result
                .bindings
                .iter()
                .all(|b| matches!(b.decision, Decision::Bound { .. }))
        );
        // Deterministic.
        assert_eq!(run(&pools, &shares, &Policy::default()), result);
    }

    #[test]
    fn new_shares_with_loads_balance_the_load() {
        let pools: Vec<Pool> = (0..4)
            .map(|i| pool(&format!("p{i}"), 1_000.0, 0.0))
            .collect();
        let loads = [
            400.0, 300.0, 200.0, 100.0, 100.0, 100.0, 100.0, 100.0, 100.0,
        ];
        let shares: Vec<Share> = loads
            .iter()
            .enumerate()
            .map(|(i, l)| share(&format!("s{i}"), None, *l))
            .collect();
        let result = run(&pools, &shares, &Policy::default());
        let per_pool: Vec<f64> = result.pools.iter().map(|p| p.load.rps).collect();
        // 1,500 over four pools, the largest first: 400 | 300+100 | 200+100+100 | 100+100+100+...
        assert!(
            per_pool.iter().all(|l| *l >= 300.0 && *l <= 400.0),
            "{per_pool:?}"
        );
    }

    #[test]
    fn saturated_pools_take_no_new_shares_and_the_cluster_says_so() {
        let mut pools = [pool("a", 100.0, 95.0), pool("b", 100.0, 90.0)];
        let policy = Policy::default();
        assert!(saturated(&inputs(&pools), &policy));
        let shares = [share("new", None, 0.0)];
        let result = run(&pools, &shares, &policy);
        assert_eq!(result.bindings[0].pool, None);
        assert_eq!(
            result.bindings[0].decision,
            Decision::Unbound {
                why: UnboundReason::AllSaturated
            }
        );
        pools[1].load = rps(10.0);
        assert!(!saturated(&inputs(&pools), &policy));
        // A ready pool that is not saturated but draining does not count.
        pools[1].draining = true;
        assert!(saturated(&inputs(&pools), &policy));
        // No ready pool: saturated.
        pools[0].ready = false;
        assert!(saturated(&inputs(&pools), &policy));
        assert!(saturated(&[], &policy));
    }

    /// The ordered search with its early stop picks what a plain scan of every pool picks.
    #[test]
    fn board_search_agrees_with_a_full_scan() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: u64| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) % n
        };
        let names: Vec<String> = (0..40).map(|i| format!("p{i:02}")).collect();
        for _ in 0..500 {
            let count = 1 + next(40) as usize;
            let mut pools: Vec<PoolState> = (0..count)
                .map(|i| {
                    let limit = |next: &mut dyn FnMut(u64) -> u64| match next(3) {
                        0 => None,
                        _ => Some(1.0 + next(100) as f64),
                    };
                    PoolState {
                        name: &names[i],
                        eligible: next(5) != 0,
                        capacity: Capacity {
                            rps: limit(&mut next),
                            connections: limit(&mut next),
                            bytes_per_second: None,
                        },
                        load: Load {
                            rps: next(100) as f64,
                            connections: next(100) as f64,
                            bytes_per_second: 0.0,
                            cpu: next(10) as f64 / 10.0,
                        },
                        bound: next(4) as usize,
                    }
                })
                .collect();
            // Equal utilizations are common in practice (empty pools): make some.
            if next(2) == 0 {
                for pool in pools.iter_mut().step_by(2) {
                    pool.load = Load::ZERO;
                }
            }
            let board = Board::new(pools);
            let members: Vec<usize> = (0..count).filter(|_| next(3) != 0).collect();
            let group = Group {
                any_eligible: true,
                all: members.len() == count,
                pools: members,
            };
            let load = Load {
                rps: next(30) as f64,
                connections: next(30) as f64,
                bytes_per_second: 0.0,
                cpu: next(3) as f64 / 10.0,
            };
            let except = (next(2) == 0).then(|| next(count as u64) as usize);
            let (now_below, after_below) = match next(2) {
                0 => (0.9, f64::INFINITY),
                _ => (0.7, 0.7),
            };
            let scan = (0..count)
                .filter(|p| board.pools[*p].eligible && group.contains(*p) && Some(*p) != except)
                .filter(|p| board.pools[*p].utilization() < now_below)
                .map(|p| {
                    (
                        board.pools[p].utilization_with(&load),
                        board.pools[p].bound,
                        p,
                    )
                })
                .filter(|(after, _, _)| *after < after_below)
                .min_by(|a, b| a.partial_cmp(b).unwrap())
                .map(|(_, _, p)| p);
            assert_eq!(
                board.best(&group, &load, except, now_below, after_below),
                scan
            );
        }
    }

    /// Random clusters: every binding is to an eligible pool its selector matches, a kept
    /// share is where it was, saturation moves stay within max_moves, and the order of
    /// the pools in the input changes nothing.
    #[test]
    fn random_schedules_keep_the_rules() {
        let mut seed = 0x0123_4567_89AB_CDEFu64;
        let mut next = move |n: u64| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
        };
        let tiers = ["gold", "silver"];
        for round in 0..300 {
            let pools: Vec<Pool> = (0..1 + next(8))
                .map(|i| {
                    let mut p = pool(&format!("p{i}"), 100.0, next(120) as f64);
                    p.labels = labels(&[("tier", tiers[next(2) as usize])]);
                    p.ready = next(6) != 0;
                    p.draining = next(8) == 0;
                    p
                })
                .collect();
            let shares: Vec<Share> = (0..next(30))
                .map(|i| {
                    let current = match next(4) {
                        0 => None,
                        1 => Some("gone".to_string()),
                        _ => Some(format!("p{}", next(pools.len() as u64))),
                    };
                    let mut s = share(&format!("s{i:02}"), current.as_deref(), next(40) as f64);
                    if next(3) == 0 {
                        s.selector = Some(LabelSelector::from_labels([(
                            "tier",
                            tiers[next(2) as usize],
                        )]));
                    }
                    s
                })
                .collect();
            let policy = Policy {
                max_moves: next(5) as usize,
                ..Policy::default()
            };
            let result = run(&pools, &shares, &policy);
            let reversed: Vec<Pool> = pools
                .iter()
                .rev()
                .map(|p| Pool {
                    name: p.name.clone(),
                    labels: p.labels.clone(),
                    ..*p
                })
                .collect();
            assert_eq!(run(&reversed, &shares, &policy), result, "round {round}");
            let mut saturation_moves = 0;
            for (share, binding) in shares.iter().zip(&result.bindings) {
                let target = binding
                    .pool
                    .as_deref()
                    .map(|name| pools.iter().find(|p| p.name == name).unwrap());
                let fits = |p: &Pool| {
                    p.ready
                        && !p.draining
                        && share.selector.as_ref().is_none_or(|s| s.matches(&p.labels))
                };
                match &binding.decision {
                    Decision::Kept | Decision::KeptSaturated { .. } => {
                        assert_eq!(binding.pool, share.current, "round {round}");
                        assert!(fits(target.unwrap()), "round {round}: {binding}");
                    }
                    Decision::Bound { .. } => {
                        assert!(share.current.is_none());
                        assert!(fits(target.unwrap()), "round {round}: {binding}");
                    }
                    Decision::Moved { from, why } => {
                        assert_eq!(Some(from), share.current.as_ref());
                        assert_ne!(binding.pool, share.current);
                        assert!(fits(target.unwrap()), "round {round}: {binding}");
                        if matches!(why, MoveReason::Saturated { .. }) {
                            saturation_moves += 1;
                        }
                    }
                    Decision::Unbound { why } => {
                        if *why == UnboundReason::NoPoolMatches {
                            assert!(!pools.iter().any(|p| {
                                share.selector.as_ref().is_none_or(|s| s.matches(&p.labels))
                            }));
                        }
                        if let Some(pool) = target {
                            assert!(!pool.ready && Some(&pool.name) == share.current.as_ref());
                        }
                    }
                }
            }
            assert!(saturation_moves <= policy.max_moves, "round {round}");
        }
    }
}
