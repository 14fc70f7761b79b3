//! The routing strategies: pure functions of (policy, cluster views, client) → the answer
//! and the reasons for it.
//!
//! Entry points:
//!
//! - [`decide`]: one FederatedIngress's [`Decision`] for one client (location bucket):
//!   the [`Answer`] to serve and a [`Reason`] for every placed cluster, included or not.
//!   The apiserver's explain endpoint returns it as JSON; routing events come from
//!   comparing successive decisions.
//! - [`failover_step`] and [`next_failover_change_ms`]: the Failover strategy's memory
//!   ([`FailoverState`]), stepped by the caller whenever cluster views change and when a
//!   pending failback falls due. It is the only state; everything else is recomputed.
//!
//! # Eligibility
//!
//! A placed cluster can be in a normal answer when it is healthy, not cordoned, and has
//! an address (an IP or a host name; Anycast needs none of its own). Cordoned clusters
//! are never in any answer, not even when failing open.
//!
//! # When no cluster is eligible
//!
//! `whenAllUnhealthy: ServeAll` (the default) answers with every non-cordoned placed
//! cluster (fail open); `NoData` answers NOERROR without records (fail closed). The same
//! applies when a strategy finds nobody to pick for another reason (Weighted with every
//! healthy cluster at weight 0, Failover with no healthy tier).
//!
//! What does not belong here: DNS encoding (the server turns [`Answer`] into records),
//! clocks (callers pass `now_ms`), locating clients (see [`crate::location`]).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use fedingress_api::ingress::{StrategyType, Traffic, WhenAllUnhealthy};
use serde::{Deserialize, Serialize};

use crate::location::Located;
use crate::{ClusterView, Location};

/// Mean Earth radius used for great-circle distances, in kilometres.
pub const EARTH_RADIUS_KM: f64 = 6371.0;

/// The client a decision is for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientInfo {
    /// The address located (ECS subnet address or resolver address), for explain.
    pub address: Option<IpAddr>,
    pub location: Location,
    /// The client's row of the RTT table (cluster → ms), if any.
    pub rtt: Option<BTreeMap<String, f64>>,
}

impl ClientInfo {
    /// The client at `located` (from [`crate::location::Locator::locate`] or one of
    /// [`crate::location::Locator::buckets`]).
    pub fn from_located(address: Option<IpAddr>, located: &Located) -> Self {
        ClientInfo {
            address,
            location: located.location.clone(),
            rtt: located.rtt.clone(),
        }
    }
}

/// What to answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value")]
pub enum Answer {
    /// Every listed cluster's addresses in one response (sorted by cluster name); the
    /// server may rotate the order.
    All(Vec<String>),
    /// One cluster per response, picked with these shares (each > 0, summing to 1):
    /// by cluster name for Weighted, nearest first for Overflow; see [`pick_weighted`].
    Weighted(Vec<(String, f64)>),
    /// Fixed addresses (Anycast).
    Addresses(Vec<IpAddr>),
    /// NOERROR with no records.
    NoData,
}

impl Answer {
    /// The clusters that can appear in responses (none for `Addresses` and `NoData`).
    pub fn clusters(&self) -> Vec<&str> {
        match self {
            Answer::All(names) => names.iter().map(String::as_str).collect(),
            Answer::Weighted(shares) => shares.iter().map(|(name, _)| name.as_str()).collect(),
            Answer::Addresses(_) | Answer::NoData => Vec::new(),
        }
    }
}

/// Why one placed cluster is in the answer or not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reason {
    pub cluster: String,
    pub included: bool,
    pub detail: String,
    /// Great-circle distance from the client (location-based strategies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distance_km: Option<f64>,
    /// Share of responses in [0, 1] (Weighted, Overflow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// Reported load (Overflow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// Measured RTT from the client's subnet (Latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ms: Option<f64>,
    /// Anycast: each anycast address on this cluster (in `anycastAddresses` order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anycast: Vec<AnycastAnnouncement>,
}

/// One anycast address on one placed cluster, as the Anycast strategy counts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnycastAnnouncement {
    pub address: IpAddr,
    /// The cluster counts as announcing the address: it is eligible (healthy, not
    /// cordoned) and its agent reports the route announced — or reports no BGP state at
    /// all for the ingress (an agent without a speaker, or an older one), when that is
    /// assumed from its health.
    pub announcing: bool,
    /// The route as the cluster's agent reports it (`true`: announced); `None` when it
    /// reports none for this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<bool>,
    /// The agent's reason for the route (empty when it reports none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The outcome of [`decide`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub strategy: StrategyType,
    pub answer: Answer,
    /// One per placed cluster, sorted by cluster name.
    pub reasons: Vec<Reason>,
    /// One sentence on the whole decision.
    pub summary: String,
}

/// The Failover strategy's memory of one FederatedIngress.
///
/// `active_tier` indexes `failoverOrder`. While a better tier than the active one is
/// healthy, `failback_tier` names the best such tier and `better_tier_healthy_since_ms`
/// says since when it has been continuously healthy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailoverState {
    pub active_tier: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better_tier_healthy_since_ms: Option<u64>,
    /// The tier traffic moves back to once the failback delay has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failback_tier: Option<usize>,
}

/// Great-circle (haversine) distance between two places, in kilometres.
pub fn distance_km(a: &Location, b: &Location) -> f64 {
    haversine_km(a.latitude, a.longitude, b.latitude, b.longitude)
}

/// [`distance_km`] on bare coordinates (degrees): the one formula both [`decide`] and
/// [`PointRouter`] use, so that their distances are bit for bit the same.
fn haversine_km(a_latitude: f64, a_longitude: f64, b_latitude: f64, b_longitude: f64) -> f64 {
    let lat1 = a_latitude.to_radians();
    let lat2 = b_latitude.to_radians();
    let dlat = lat2 - lat1;
    let dlon = (b_longitude - a_longitude).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_KM * h.sqrt().min(1.0).asin()
}

/// The cluster of `shares` that `x` (uniform in [0, 1): random per response, or a hash
/// of the client subnet for sticky answers) falls on.
pub fn pick_weighted(shares: &[(String, f64)], x: f64) -> Option<&str> {
    let total: f64 = shares.iter().map(|(_, s)| s.max(0.0)).sum();
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let target = x.clamp(0.0, 1.0) * total;
    let mut cumulative = 0.0;
    let mut last = None;
    for (name, share) in shares {
        if *share > 0.0 {
            cumulative += share;
            last = Some(name.as_str());
            if target < cumulative {
                return last;
            }
        }
    }
    last
}

// ---------------------------------------------------------------------------------------
// Eligibility

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Eligible,
    Cordoned,
    Unhealthy,
    NoAddress,
}

impl Status {
    fn of(cluster: &ClusterView, needs_address: bool) -> Status {
        if cluster.cordoned {
            Status::Cordoned
        } else if !cluster.healthy {
            Status::Unhealthy
        } else if needs_address && cluster.ips.is_empty() && cluster.hostnames.is_empty() {
            Status::NoAddress
        } else {
            Status::Eligible
        }
    }

    fn detail(self) -> &'static str {
        match self {
            Status::Eligible => "healthy",
            Status::Cordoned => "cordoned",
            Status::Unhealthy => "unhealthy",
            Status::NoAddress => "healthy but reports no address",
        }
    }
}

fn eligible(cluster: &ClusterView) -> bool {
    Status::of(cluster, true) == Status::Eligible
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if (p - p.round()).abs() < 0.05 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

fn km(distance: f64) -> String {
    format!("{distance:.0} km")
}

fn ms(rtt: f64) -> String {
    if (rtt - rtt.round()).abs() < 0.05 {
        format!("{rtt:.0} ms")
    } else {
        format!("{rtt:.1} ms")
    }
}

fn number(value: f64) -> String {
    if (value - value.round()).abs() < 0.005 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// Overflow's view of `cluster`: its reported load (0 when not a positive number) and the
/// load above which it spills (`capacity × threshold`; `None` without a capacity).
fn overflow_load_limit(cluster: &ClusterView, threshold: f64) -> (f64, Option<f64>) {
    let load = if cluster.load.is_finite() && cluster.load > 0.0 {
        cluster.load
    } else {
        0.0
    };
    let limit = cluster
        .capacity
        .filter(|c| c.is_finite() && *c >= 0.0)
        .map(|c| c * threshold);
    (load, limit)
}

/// Overflow's `keep`: the fraction of the traffic reaching `cluster` that it keeps
/// (1 when it has room for all of it). [`overflow`] and [`PointRouter`] share it.
fn overflow_keep(cluster: &ClusterView, threshold: f64) -> f64 {
    let (load, limit) = overflow_load_limit(cluster, threshold);
    match limit {
        Some(limit) if load > limit => limit / load,
        _ => 1.0,
    }
}

/// The working set of one decision: placed clusters sorted by name, a reason each.
struct Ctx<'a> {
    traffic: &'a Traffic,
    client: &'a ClientInfo,
    clusters: Vec<&'a ClusterView>,
    status: Vec<Status>,
    reasons: Vec<Reason>,
}

/// A strategy's result: the answer and summary, or why nobody could be picked.
type Picked = Result<(Answer, String), String>;

impl<'a> Ctx<'a> {
    fn new(
        traffic: &'a Traffic,
        clusters: &'a [ClusterView],
        client: &'a ClientInfo,
        needs_address: bool,
    ) -> Self {
        let mut sorted: Vec<&ClusterView> = clusters.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let status: Vec<Status> = sorted
            .iter()
            .map(|c| Status::of(c, needs_address))
            .collect();
        let reasons = sorted
            .iter()
            .zip(&status)
            .map(|(c, s)| Reason {
                cluster: c.name.clone(),
                included: false,
                detail: s.detail().to_owned(),
                distance_km: None,
                weight: None,
                load: None,
                rtt_ms: None,
                anycast: Vec::new(),
            })
            .collect();
        Ctx {
            traffic,
            client,
            clusters: sorted,
            status,
            reasons,
        }
    }

    fn eligible(&self) -> Vec<usize> {
        (0..self.clusters.len())
            .filter(|&i| self.status[i] == Status::Eligible)
            .collect()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.clusters
            .binary_search_by(|c| c.name.as_str().cmp(name))
            .ok()
    }

    fn name(&self, i: usize) -> &'a str {
        &self.clusters[i].name
    }

    fn distance(&self, i: usize) -> f64 {
        distance_km(&self.client.location, &self.clusters[i].location)
    }

    fn set(&mut self, i: usize, included: bool, detail: String) {
        let reason = &mut self.reasons[i];
        reason.included = included;
        reason.detail = detail;
    }

    /// Every placed cluster's distance into its reason; the eligible ones sorted by
    /// (distance, name).
    fn by_distance(&mut self) -> Vec<(usize, f64)> {
        for i in 0..self.clusters.len() {
            self.reasons[i].distance_km = Some(self.distance(i));
        }
        let mut order: Vec<(usize, f64)> = self
            .eligible()
            .into_iter()
            .map(|i| (i, self.distance(i)))
            .collect();
        order.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        order
    }

    fn finish(mut self, strategy: StrategyType, picked: Picked) -> Decision {
        let (answer, summary) = match picked {
            Ok(found) => found,
            Err(why) => self.when_all_unhealthy(&why),
        };
        Decision {
            strategy,
            answer,
            reasons: self.reasons,
            summary: format!("{strategy}: {summary}"),
        }
    }

    fn when_all_unhealthy(&mut self, why: &str) -> (Answer, String) {
        match self.traffic.when_all_unhealthy {
            WhenAllUnhealthy::NoData => (
                Answer::NoData,
                format!("{why}; whenAllUnhealthy is NoData: answering no records (failing closed)"),
            ),
            WhenAllUnhealthy::ServeAll => {
                let open: Vec<usize> = (0..self.clusters.len())
                    .filter(|&i| self.status[i] != Status::Cordoned)
                    .collect();
                if open.is_empty() {
                    let what = if self.clusters.is_empty() {
                        "no cluster is placed"
                    } else {
                        "every placed cluster is cordoned"
                    };
                    return (
                        Answer::NoData,
                        format!(
                            "{why}; whenAllUnhealthy is ServeAll but {what}: answering no records"
                        ),
                    );
                }
                for &i in &open {
                    let detail = format!(
                        "{}; answered anyway: whenAllUnhealthy is ServeAll (failing open)",
                        self.reasons[i].detail
                    );
                    self.set(i, true, detail);
                }
                let names = open.iter().map(|&i| self.name(i).to_owned()).collect();
                (
                    Answer::All(names),
                    format!(
                        "{why}; whenAllUnhealthy is ServeAll: answering every non-cordoned cluster (failing open)"
                    ),
                )
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// decide

/// The answer for `client` under `traffic`'s strategy, with a reason per placed cluster.
///
/// # Guarantees
///
/// - Cordoned clusters are never in the answer.
/// - `Answer::Weighted` shares are positive and sum to 1 (up to rounding).
/// - `reasons` has one entry per element of `clusters`, sorted by name.
///
/// # Assumptions
///
/// Cluster names are unique. `failover` is the latest [`failover_step`] result (when it
/// is stale and its active tier has no eligible cluster, the best tier with one is used,
/// as the next step would).
pub fn decide(
    traffic: &Traffic,
    clusters: &[ClusterView],
    client: &ClientInfo,
    failover: &FailoverState,
) -> Decision {
    let strategy = traffic.strategy.type_;
    let mut ctx = Ctx::new(traffic, clusters, client, strategy != StrategyType::Anycast);
    let picked = match strategy {
        StrategyType::RoundRobin => round_robin(&mut ctx),
        StrategyType::Weighted => weighted(&mut ctx),
        StrategyType::Failover => failover_decide(&mut ctx, failover),
        StrategyType::Geo => geo(&mut ctx, ""),
        StrategyType::Latency => latency(&mut ctx),
        StrategyType::Overflow => overflow(&mut ctx),
        StrategyType::Anycast => anycast(&mut ctx),
    };
    ctx.finish(strategy, picked)
}

fn round_robin(ctx: &mut Ctx<'_>) -> Picked {
    let chosen = ctx.eligible();
    if chosen.is_empty() {
        return Err("no placed cluster is healthy".to_owned());
    }
    let count = chosen.len();
    for &i in &chosen {
        ctx.set(
            i,
            true,
            format!("healthy: one of {count} healthy clusters answered together"),
        );
    }
    let names: Vec<String> = chosen.iter().map(|&i| ctx.name(i).to_owned()).collect();
    let summary = format!("every healthy cluster ({})", names.join(", "));
    Ok((Answer::All(names), summary))
}

fn weighted(ctx: &mut Ctx<'_>) -> Picked {
    let weights = ctx.traffic.strategy.weights.clone().unwrap_or_default();
    let weight_of = |name: &str| weights.get(name).copied().map(|w| w.max(0));
    let eligible = ctx.eligible();
    let total: i64 = eligible
        .iter()
        .map(|&i| i64::from(weight_of(ctx.name(i)).unwrap_or(0)))
        .sum();
    // Clusters that are not eligible say what their weight would have been.
    for i in 0..ctx.clusters.len() {
        if ctx.status[i] != Status::Eligible
            && let Some(w) = weight_of(ctx.name(i))
            && w > 0
        {
            let detail = format!(
                "{}: its weight {w} goes to the others",
                ctx.reasons[i].detail
            );
            ctx.set(i, false, detail);
        }
    }
    if total <= 0 {
        for &i in &eligible {
            let detail = match weight_of(ctx.name(i)) {
                Some(_) => "healthy but has weight 0".to_owned(),
                None => "healthy but has no weight".to_owned(),
            };
            ctx.set(i, false, detail);
        }
        return Err("no healthy cluster has a weight above 0".to_owned());
    }
    let mut shares = Vec::new();
    for &i in &eligible {
        let name = ctx.name(i);
        match weight_of(name) {
            Some(w) if w > 0 => {
                #[allow(clippy::cast_precision_loss)]
                let share = f64::from(w) / total as f64;
                ctx.set(
                    i,
                    true,
                    format!("weight {w} of {total} ({})", percent(share)),
                );
                ctx.reasons[i].weight = Some(share);
                shares.push((name.to_owned(), share));
            }
            Some(_) => ctx.set(i, false, "healthy but has weight 0".to_owned()),
            None => ctx.set(i, false, "healthy but has no weight".to_owned()),
        }
    }
    let summary = format!(
        "one cluster per response by weight: {}",
        shares
            .iter()
            .map(|(n, s)| format!("{n} {}", percent(*s)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((Answer::Weighted(shares), summary))
}

fn geo(ctx: &mut Ctx<'_>, note: &str) -> Picked {
    let order = ctx.by_distance();
    let Some(&(nearest, nearest_km)) = order.first() else {
        return Err(format!("{note}no placed cluster is healthy"));
    };
    let nearest_name = ctx.name(nearest);
    ctx.set(
        nearest,
        true,
        format!(
            "{note}nearest healthy cluster to the client ({})",
            km(nearest_km)
        ),
    );
    for &(i, d) in order.iter().skip(1) {
        ctx.set(
            i,
            false,
            format!(
                "{note}farther than {nearest_name} ({} vs {})",
                km(d),
                km(nearest_km)
            ),
        );
    }
    let region = &ctx.client.location.region;
    let summary = format!(
        "{note}{nearest_name} is the nearest healthy cluster to the client{} ({})",
        if region.is_empty() {
            String::new()
        } else {
            format!(" in {region}")
        },
        km(nearest_km)
    );
    Ok((Answer::All(vec![nearest_name.to_owned()]), summary))
}

fn latency(ctx: &mut Ctx<'_>) -> Picked {
    let Some(row) = ctx.client.rtt.as_ref() else {
        return geo(
            ctx,
            "no RTT measurements for the client's subnet; Geo fallback: ",
        );
    };
    for i in 0..ctx.clusters.len() {
        ctx.reasons[i].rtt_ms = row.get(ctx.name(i)).copied().filter(|r| *r >= 0.0);
    }
    let mut measured: Vec<(usize, f64)> = ctx
        .eligible()
        .into_iter()
        .filter_map(|i| ctx.reasons[i].rtt_ms.map(|rtt| (i, rtt)))
        .collect();
    measured.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let Some(&(fastest, fastest_rtt)) = measured.first() else {
        return geo(
            ctx,
            "the client's RTT row measures no healthy cluster; Geo fallback: ",
        );
    };
    let fastest_name = ctx.name(fastest);
    ctx.set(
        fastest,
        true,
        format!("lowest measured RTT from the client ({})", ms(fastest_rtt)),
    );
    for &(i, rtt) in measured.iter().skip(1) {
        ctx.set(
            i,
            false,
            format!(
                "slower than {fastest_name} ({} vs {})",
                ms(rtt),
                ms(fastest_rtt)
            ),
        );
    }
    for i in ctx.eligible() {
        if ctx.reasons[i].rtt_ms.is_none() {
            ctx.set(
                i,
                false,
                "healthy but not measured from the client's subnet".to_owned(),
            );
        }
    }
    let summary = format!(
        "{fastest_name} has the lowest measured RTT from the client ({})",
        ms(fastest_rtt)
    );
    Ok((Answer::All(vec![fastest_name.to_owned()]), summary))
}

fn overflow(ctx: &mut Ctx<'_>) -> Picked {
    let threshold = ctx.traffic.strategy.effective_overflow_threshold();
    let order = ctx.by_distance();
    if order.is_empty() {
        return Err("no placed cluster is healthy".to_owned());
    }
    for i in 0..ctx.clusters.len() {
        ctx.reasons[i].load = Some(ctx.clusters[i].load);
    }
    let mut remaining = 1.0_f64;
    let mut shares: Vec<(usize, f64)> = Vec::new();
    let mut details: Vec<String> = Vec::new();
    // Which earlier cluster had room for everything that reached it, if any.
    let mut absorbed_by: Option<String> = None;
    let last = order.len() - 1;
    for (position, &(i, d)) in order.iter().enumerate() {
        let cluster = ctx.clusters[i];
        let rank = if position == 0 {
            format!("nearest ({})", km(d))
        } else {
            format!("next nearest ({})", km(d))
        };
        if let Some(why) = &absorbed_by {
            details.push(format!("{rank}; not needed: {why}"));
            shares.push((i, 0.0));
            continue;
        }
        let (load, limit) = overflow_load_limit(cluster, threshold);
        let keep = overflow_keep(cluster, threshold);
        let share = if position == last {
            remaining
        } else {
            remaining * keep
        };
        let spilled = remaining - share;
        let mut detail = rank;
        match (limit, cluster.capacity) {
            (Some(limit), Some(capacity)) if load > limit => {
                let _ = write!(
                    detail,
                    "; load {} over {} of capacity {} ({})",
                    number(load),
                    percent(threshold),
                    number(capacity),
                    number(limit)
                );
            }
            (Some(limit), Some(capacity)) => {
                let _ = write!(
                    detail,
                    "; load {} within {} of capacity {} ({})",
                    number(load),
                    percent(threshold),
                    number(capacity),
                    number(limit)
                );
            }
            _ => {
                let _ = write!(detail, "; no capacity set, never overflows");
            }
        }
        if position == last {
            if position > 0 {
                let _ = write!(
                    detail,
                    "; last in distance order: takes the remaining {}",
                    percent(share)
                );
            } else {
                let _ = write!(detail, "; the only healthy cluster: takes everything");
            }
        } else if spilled > 0.0 {
            let next = ctx.name(order[position + 1].0);
            let _ = write!(
                detail,
                "; takes {} of the traffic, {} spills to {next}",
                percent(share),
                percent(spilled)
            );
        } else {
            let _ = write!(detail, "; takes {} of the traffic", percent(share));
            absorbed_by = Some(format!(
                "{} has room for everything that reaches it",
                ctx.name(i)
            ));
        }
        remaining -= share;
        shares.push((i, share));
        details.push(detail);
    }
    let mut answer = Vec::new();
    for ((i, share), detail) in shares.into_iter().zip(details) {
        let included = share > 0.0;
        ctx.set(i, included, detail);
        ctx.reasons[i].weight = Some(share);
        if included {
            answer.push((ctx.name(i).to_owned(), share));
        }
    }
    let summary = if answer.len() == 1 {
        format!("{} takes all the traffic", answer[0].0)
    } else {
        format!(
            "nearest first, spilling above {} of capacity: {}",
            percent(threshold),
            answer
                .iter()
                .map(|(n, s)| format!("{n} {}", percent(*s)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    // Nearest first: the order says who overflows into whom.
    Ok((Answer::Weighted(answer), summary))
}

/// The Anycast strategy: the anycast addresses that some placed cluster announces, to
/// every client; the network (BGP) then carries each client to the nearest announcing
/// site. A cluster counts as announcing an address when it is eligible (healthy, not
/// cordoned) and — when its agent reports BGP state for the ingress — it reports the
/// route announced (see [`anycast_announcements`]). Addresses nobody announces are left
/// out of the answer; with none left, `whenAllUnhealthy` applies.
fn anycast(ctx: &mut Ctx<'_>) -> Picked {
    let addresses = anycast_addresses(ctx.traffic);
    if addresses.is_empty() {
        return Err("no usable anycastAddresses".to_owned());
    }
    // Per address (in anycastAddresses order): the clusters counted as announcing it.
    let mut announcers: Vec<Vec<&str>> = vec![Vec::new(); addresses.len()];
    // Clusters counted without BGP state of their own (their health stands for it).
    let mut assumed: Vec<&str> = Vec::new();
    for i in 0..ctx.clusters.len() {
        let cluster = ctx.clusters[i];
        let status = ctx.status[i];
        let routes = anycast_announcements(cluster, status == Status::Eligible, &addresses);
        for (k, route) in routes.iter().enumerate() {
            if route.announcing {
                announcers[k].push(ctx.name(i));
            }
        }
        let detail = anycast_detail(status, cluster, &routes);
        if status == Status::Eligible && cluster.anycast.is_empty() {
            assumed.push(ctx.name(i));
        }
        let included = routes.iter().any(|r| r.announcing);
        ctx.set(i, included, detail);
        ctx.reasons[i].anycast = routes;
    }
    let answered: Vec<IpAddr> = addresses
        .iter()
        .zip(&announcers)
        .filter(|(_, who)| !who.is_empty())
        .map(|(a, _)| *a)
        .collect();
    if answered.is_empty() {
        return Err(if ctx.eligible().is_empty() {
            "no placed cluster is healthy to announce the anycast addresses".to_owned()
        } else {
            "no healthy cluster announces the anycast addresses (their agents report the routes withdrawn)".to_owned()
        });
    }
    // "192.0.2.10 announced by eu-west, us-east": one group per set of announcers.
    let mut groups: Vec<(Vec<IpAddr>, &Vec<&str>)> = Vec::new();
    for (address, who) in addresses.iter().zip(&announcers) {
        match groups.iter_mut().find(|(_, w)| *w == who) {
            Some((list, _)) => list.push(*address),
            None => groups.push((vec![*address], who)),
        }
    }
    let mut parts: Vec<String> = groups
        .iter()
        .map(|(list, who)| {
            let list = join(list);
            if who.is_empty() {
                format!("{list} announced by no cluster")
            } else {
                format!("{list} announced by {}", who.join(", "))
            }
        })
        .collect();
    match assumed.as_slice() {
        [] => {}
        [one] => parts.push(format!(
            "{one} counted from its health alone (its agent reports no BGP state)"
        )),
        many => parts.push(format!(
            "{} counted from their health alone (their agents report no BGP state)",
            many.join(", ")
        )),
    }
    let summary = format!(
        "{}; the network (BGP) carries each client to the nearest announcing site",
        parts.join("; ")
    );
    Ok((Answer::Addresses(answered), summary))
}

/// The addresses the Anycast strategy answers for `clusters`: those of
/// `anycastAddresses` that some placed cluster counts as announcing (see
/// [`anycast_announcements`]), in their configured order; empty when nobody announces
/// any (then `whenAllUnhealthy` applies). DNS providers publish the same.
pub fn anycast_answer(traffic: &Traffic, clusters: &[ClusterView]) -> Vec<IpAddr> {
    let addresses = anycast_addresses(traffic);
    let mut announced = vec![false; addresses.len()];
    for cluster in clusters {
        let eligible = Status::of(cluster, false) == Status::Eligible;
        for (k, route) in anycast_announcements(cluster, eligible, &addresses)
            .iter()
            .enumerate()
        {
            announced[k] |= route.announcing;
        }
    }
    addresses
        .into_iter()
        .zip(announced)
        .filter_map(|(address, announced)| announced.then_some(address))
        .collect()
}

/// The strategy's `anycastAddresses` that parse (validation has checked them).
fn anycast_addresses(traffic: &Traffic) -> Vec<IpAddr> {
    traffic
        .strategy
        .anycast_addresses
        .iter()
        .flatten()
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// Each of `addresses` on `cluster`: whether it counts as announcing it and what its
/// agent reported.
///
/// # Guarantees
/// - Only an `eligible` cluster counts as announcing.
/// - An eligible cluster whose agent reports BGP state for the ingress counts only for
///   the addresses it reports announced (not for one it reports nothing for); one whose
///   agent reports no BGP state at all counts for every address.
pub fn anycast_announcements(
    cluster: &ClusterView,
    eligible: bool,
    addresses: &[IpAddr],
) -> Vec<AnycastAnnouncement> {
    let reports = !cluster.anycast.is_empty();
    addresses
        .iter()
        .map(|address| {
            let route = cluster.anycast.iter().find(|r| r.address == *address);
            AnycastAnnouncement {
                address: *address,
                announcing: eligible && route.map_or(!reports, |r| r.announced),
                reported: route.map(|r| r.announced),
                reason: match route {
                    Some(route) => route.reason.clone(),
                    None if reports => "the agent reports no route for it".to_owned(),
                    None => String::new(),
                },
            }
        })
        .collect()
}

/// Why one cluster counts as announcing (some of) the anycast addresses or not.
fn anycast_detail(status: Status, cluster: &ClusterView, routes: &[AnycastAnnouncement]) -> String {
    let announced: Vec<IpAddr> = routes
        .iter()
        .filter(|r| r.reported == Some(true))
        .map(|r| r.address)
        .collect();
    let withdrawn: Vec<&AnycastAnnouncement> =
        routes.iter().filter(|r| r.reported != Some(true)).collect();
    match status {
        Status::Eligible | Status::NoAddress if cluster.anycast.is_empty() => {
            "healthy; the agent reports no BGP announcement".to_owned()
        }
        Status::Eligible | Status::NoAddress => {
            match (announced.is_empty(), withdrawn.is_empty()) {
                (false, true) => format!("healthy: announces {}", join(&announced)),
                (true, _) => format!("withdrawn: {}", withdrawn_reasons(&withdrawn, routes.len())),
                (false, false) => format!(
                    "healthy: announces {}; withdrawn {}",
                    join(&announced),
                    withdrawn_reasons(&withdrawn, 0)
                ),
            }
        }
        Status::Cordoned | Status::Unhealthy => {
            let mut detail = status.detail().to_owned();
            if !announced.is_empty() {
                // Traffic still arrives until the agent withdraws the route.
                let _ = write!(
                    detail,
                    "; its agent still reports {} announced",
                    join(&announced)
                );
            } else if !cluster.anycast.is_empty() {
                let _ = write!(
                    detail,
                    "; withdrawn: {}",
                    withdrawn_reasons(&withdrawn, routes.len())
                );
            }
            detail
        }
    }
}

/// The agent's reasons for `withdrawn` routes: one reason when they share it and are all
/// of the `total` addresses, else `address: reason` each.
fn withdrawn_reasons(withdrawn: &[&AnycastAnnouncement], total: usize) -> String {
    // The agents' reasons start with "withdrawn: ", which the sentence says already
    // (issue 23: "withdrawn: withdrawn: …").
    let reason = |r: &AnycastAnnouncement| {
        let reason = r.reason.strip_prefix("withdrawn: ").unwrap_or(&r.reason);
        if reason.is_empty() {
            "no reason given".to_owned()
        } else {
            reason.to_owned()
        }
    };
    match withdrawn.first() {
        Some(first)
            if withdrawn.len() == total && withdrawn.iter().all(|r| r.reason == first.reason) =>
        {
            reason(first)
        }
        _ => withdrawn
            .iter()
            .map(|r| format!("{}: {}", r.address, reason(r)))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn join(addresses: &[IpAddr]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------
// Route keys

/// What the answer of a location-dependent strategy depends on for one client point:
/// clients with equal keys get equal [`Decision::answer`]s (the reasons and summary may
/// differ: they quote distances). Computed by [`PointRouter::key`].
///
/// The number of distinct keys of one ingress is bounded by its clusters, never by its
/// clients: at most one per eligible cluster plus [`RouteKey::Same`] for Geo and Latency;
/// for Overflow at most the number of orders of the eligible clusters (and far fewer in
/// practice: points of the sphere give few distance orders, and an order is cut after the
/// first cluster that has room for everything).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RouteKey {
    /// Every client gets the same answer: no cluster is eligible (whenAllUnhealthy
    /// applies), or the strategy does not depend on the client.
    Same,
    /// Geo and Latency: the answer is this one cluster (an index into the placed
    /// clusters sorted by name; see [`PointRouter::cluster_name`]).
    Cluster(u32),
    /// Overflow: the eligible clusters nearest first, up to and including the first
    /// that keeps all the traffic reaching it (later ones get no share).
    Order(ClusterOrder),
}

/// Cluster indices of an Overflow [`RouteKey`], stored inline up to
/// [`ClusterOrder::INLINE`] of them (no allocation per query for ordinary placements).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClusterOrder(OrderRepr);

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum OrderRepr {
    /// `items[..len]`; the rest zero, so that derived equality is equality of orders.
    Inline {
        len: u8,
        items: [u16; ClusterOrder::INLINE],
    },
    Heap(Box<[u32]>),
}

impl ClusterOrder {
    /// Most indices stored without allocating.
    pub const INLINE: usize = 14;

    fn from_indices(indices: &[u32]) -> Self {
        let small = indices.len() <= Self::INLINE;
        if small
            && let Ok(len) = u8::try_from(indices.len())
            && indices.iter().all(|&i| u16::try_from(i).is_ok())
        {
            let mut items = [0u16; Self::INLINE];
            for (slot, &index) in items.iter_mut().zip(indices) {
                *slot = u16::try_from(index).unwrap_or(u16::MAX);
            }
            return ClusterOrder(OrderRepr::Inline { len, items });
        }
        ClusterOrder(OrderRepr::Heap(indices.into()))
    }

    /// The cluster indices, nearest first.
    pub fn indices(&self) -> Vec<u32> {
        match &self.0 {
            OrderRepr::Inline { len, items } => items
                .iter()
                .take(usize::from(*len))
                .map(|&i| u32::from(i))
                .collect(),
            OrderRepr::Heap(items) => items.to_vec(),
        }
    }
}

/// One eligible cluster, as [`PointRouter`] needs it.
#[derive(Clone, Debug)]
struct RouterCluster {
    /// Index among the placed clusters sorted by name.
    index: u32,
    latitude: f64,
    longitude: f64,
    /// Overflow: keeps all the traffic reaching it (the order is cut after it).
    absorbs: bool,
}

/// Computes [`RouteKey`]s of one ingress cheaply (no allocation for Geo and Latency,
/// none for Overflow up to [`ClusterOrder::INLINE`] eligible clusters): built once per
/// (traffic, clusters), asked per client point.
///
/// # Guarantees
///
/// For every pair of clients `a`, `b` (location and RTT row) with
/// `key(a) == key(b)`: `decide(traffic, clusters, a, failover).answer ==
/// decide(traffic, clusters, b, failover).answer`; and for [`RouteKey::Cluster`]`(i)`
/// that answer is [`PointRouter::answer`]'s, `Answer::All([name of i])`.
///
/// # Assumptions
///
/// The strategy is Geo, Latency or Overflow (others get [`RouteKey::Same`], which is
/// right: they do not depend on the client); cluster names are unique.
#[derive(Clone, Debug)]
pub struct PointRouter {
    strategy: StrategyType,
    /// Placed clusters' names, sorted.
    names: Vec<String>,
    /// The eligible clusters in name order.
    eligible: Vec<RouterCluster>,
}

impl PointRouter {
    pub fn new(traffic: &Traffic, clusters: &[ClusterView]) -> Self {
        let strategy = traffic.strategy.type_;
        let mut sorted: Vec<&ClusterView> = clusters.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let threshold = traffic.strategy.effective_overflow_threshold();
        let eligible = sorted
            .iter()
            .enumerate()
            .filter(|(_, c)| Status::of(c, strategy != StrategyType::Anycast) == Status::Eligible)
            .filter_map(|(i, c)| {
                Some(RouterCluster {
                    index: u32::try_from(i).ok()?,
                    latitude: c.location.latitude,
                    longitude: c.location.longitude,
                    absorbs: overflow_keep(c, threshold) == 1.0,
                })
            })
            .collect();
        PointRouter {
            strategy,
            names: sorted.iter().map(|c| c.name.clone()).collect(),
            eligible,
        }
    }

    /// The name of cluster `index` of a [`RouteKey`].
    pub fn cluster_name(&self, index: u32) -> Option<&str> {
        self.names.get(index as usize).map(String::as_str)
    }

    /// The answer a key stands for, when it can be told without a client:
    /// `Answer::All([name])` for [`RouteKey::Cluster`], `None` otherwise (decide for
    /// any client of the key instead).
    pub fn answer(&self, key: &RouteKey) -> Option<Answer> {
        match key {
            RouteKey::Cluster(index) => self
                .cluster_name(*index)
                .map(|name| Answer::All(vec![name.to_owned()])),
            RouteKey::Same | RouteKey::Order(_) => None,
        }
    }

    /// Every [`RouteKey::Cluster`] this ingress can give (its eligible clusters, for
    /// Geo and Latency; none otherwise).
    pub fn cluster_keys(&self) -> impl Iterator<Item = RouteKey> + '_ {
        let applies = matches!(self.strategy, StrategyType::Geo | StrategyType::Latency);
        self.eligible
            .iter()
            .filter(move |_| applies)
            .map(|c| RouteKey::Cluster(c.index))
    }

    /// The key of a client at (`latitude`, `longitude`) (degrees, as in its
    /// [`ClientInfo::location`]) with RTT row `rtt` (its [`ClientInfo::rtt`]).
    pub fn key(
        &self,
        latitude: f64,
        longitude: f64,
        rtt: Option<&BTreeMap<String, f64>>,
    ) -> RouteKey {
        if self.eligible.is_empty() {
            return RouteKey::Same;
        }
        match self.strategy {
            StrategyType::Geo => self.nearest(latitude, longitude),
            StrategyType::Latency => match rtt.and_then(|row| self.fastest(row)) {
                Some(index) => RouteKey::Cluster(index),
                None => self.nearest(latitude, longitude),
            },
            StrategyType::Overflow => self.order(latitude, longitude),
            StrategyType::RoundRobin
            | StrategyType::Weighted
            | StrategyType::Failover
            | StrategyType::Anycast => RouteKey::Same,
        }
    }

    /// Geo: the eligible cluster first by (distance, name), as [`Ctx::by_distance`].
    fn nearest(&self, latitude: f64, longitude: f64) -> RouteKey {
        let mut best: Option<(f64, u32)> = None;
        for c in &self.eligible {
            let d = haversine_km(latitude, longitude, c.latitude, c.longitude);
            // Ascending index order: a tie keeps the earlier (smaller) index.
            if best.is_none_or(|(best_d, _)| d.total_cmp(&best_d) == Ordering::Less) {
                best = Some((d, c.index));
            }
        }
        best.map_or(RouteKey::Same, |(_, index)| RouteKey::Cluster(index))
    }

    /// Latency: the eligible cluster first by (measured RTT, name), as in [`latency`];
    /// `None` when the row measures no eligible cluster (Geo fallback).
    fn fastest(&self, row: &BTreeMap<String, f64>) -> Option<u32> {
        let mut best: Option<(f64, u32)> = None;
        for c in &self.eligible {
            let Some(rtt) = self
                .names
                .get(c.index as usize)
                .and_then(|name| row.get(name))
                .copied()
                .filter(|r| *r >= 0.0)
            else {
                continue;
            };
            if best.is_none_or(|(best_rtt, _)| rtt.total_cmp(&best_rtt) == Ordering::Less) {
                best = Some((rtt, c.index));
            }
        }
        best.map(|(_, index)| index)
    }

    /// Overflow: the distance order, cut after the first cluster that keeps everything.
    fn order(&self, latitude: f64, longitude: f64) -> RouteKey {
        const STACK: usize = 32;
        let n = self.eligible.len();
        let distance =
            |c: &RouterCluster| haversine_km(latitude, longitude, c.latitude, c.longitude);
        // (distance, position in `eligible`): position order is name order, the
        // tie-break of `Ctx::by_distance`.
        let cmp =
            |a: &(f64, usize), b: &(f64, usize)| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1));
        let mut stack_order = [(0.0, 0usize); STACK];
        let mut heap_order: Vec<(f64, usize)>;
        let order: &mut [(f64, usize)] = if n <= STACK {
            for (slot, (k, c)) in stack_order.iter_mut().zip(self.eligible.iter().enumerate()) {
                *slot = (distance(c), k);
            }
            &mut stack_order[..n]
        } else {
            heap_order = self
                .eligible
                .iter()
                .enumerate()
                .map(|(k, c)| (distance(c), k))
                .collect();
            &mut heap_order
        };
        order.sort_unstable_by(cmp);
        let end = order
            .iter()
            .position(|&(_, k)| self.eligible.get(k).is_some_and(|c| c.absorbs))
            .map_or(order.len(), |p| p + 1);
        let index = |&(_, k): &(f64, usize)| self.eligible.get(k).map_or(u32::MAX, |c| c.index);
        if end <= STACK {
            let mut indices = [0u32; STACK];
            for (slot, entry) in indices.iter_mut().zip(order.iter().take(end)) {
                *slot = index(entry);
            }
            RouteKey::Order(ClusterOrder::from_indices(&indices[..end]))
        } else {
            let indices: Vec<u32> = order.iter().take(end).map(index).collect();
            RouteKey::Order(ClusterOrder::from_indices(&indices))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Failover

/// `failoverOrder` as placed clusters, tier by tier (indices kept; names that are not
/// placed are dropped). Without a `failoverOrder`, every placed cluster is one tier.
fn tiers<'a>(traffic: &Traffic, clusters: &'a [ClusterView]) -> Vec<Vec<&'a ClusterView>> {
    match &traffic.strategy.failover_order {
        Some(order) => order
            .iter()
            .map(|tier| {
                tier.iter()
                    .filter_map(|name| clusters.iter().find(|c| &c.name == name))
                    .collect()
            })
            .collect(),
        None => vec![clusters.iter().collect()],
    }
}

fn tier_healthy(tier: &[&ClusterView]) -> bool {
    tier.iter().any(|c| eligible(c))
}

fn delay_ms(traffic: &Traffic) -> u64 {
    u64::try_from(traffic.failback_delay_seconds)
        .unwrap_or(0)
        .saturating_mul(1000)
}

/// The Failover memory after observing `clusters` at `now_ms`.
///
/// # Guarantees
///
/// - When the active tier has no eligible cluster, traffic moves at once to the best
///   (first) tier that has one: a forced move waits for nothing.
/// - Traffic moves back up to a better tier only after that tier has been continuously
///   healthy for `failbackDelaySeconds`. Should the best healthy better tier change while
///   waiting (say tier 0 recovers while tier 1 was pending), the wait starts over for the
///   new target: the primary never gets traffic before it has been healthy for the delay.
/// - With no tier healthy, the active tier stays (whenAllUnhealthy applies) and the first
///   tier to recover takes traffic at once.
///
/// # Assumptions
///
/// The caller steps on every change of cluster views and at [`next_failover_change_ms`];
/// health between two steps is taken to be what the later step sees. For strategies other
/// than Failover the state is reset to its default.
pub fn failover_step(
    traffic: &Traffic,
    clusters: &[ClusterView],
    previous: &FailoverState,
    now_ms: u64,
) -> FailoverState {
    if traffic.strategy.type_ != StrategyType::Failover {
        return FailoverState::default();
    }
    let tiers = tiers(traffic, clusters);
    let healthy: Vec<bool> = tiers.iter().map(|t| tier_healthy(t)).collect();
    let first_healthy = healthy.iter().position(|h| *h);
    let active = previous.active_tier;
    if !healthy.get(active).copied().unwrap_or(false) {
        return FailoverState {
            active_tier: first_healthy.unwrap_or(active.min(tiers.len().saturating_sub(1))),
            better_tier_healthy_since_ms: None,
            failback_tier: None,
        };
    }
    let target = match first_healthy {
        Some(target) if target < active => target,
        _ => {
            return FailoverState {
                active_tier: active,
                better_tier_healthy_since_ms: None,
                failback_tier: None,
            };
        }
    };
    let since = match (
        previous.failback_tier,
        previous.better_tier_healthy_since_ms,
    ) {
        (Some(tier), Some(since)) if tier == target => since,
        _ => now_ms,
    };
    if now_ms.saturating_sub(since) >= delay_ms(traffic) {
        FailoverState {
            active_tier: target,
            better_tier_healthy_since_ms: None,
            failback_tier: None,
        }
    } else {
        FailoverState {
            active_tier: active,
            better_tier_healthy_since_ms: Some(since),
            failback_tier: Some(target),
        }
    }
}

/// When a pending failback falls due (ms), so that the caller can step again then; `None`
/// when nothing is pending.
pub fn next_failover_change_ms(traffic: &Traffic, state: &FailoverState) -> Option<u64> {
    if traffic.strategy.type_ != StrategyType::Failover {
        return None;
    }
    state.failback_tier?;
    state
        .better_tier_healthy_since_ms
        .map(|since| since.saturating_add(delay_ms(traffic)))
}

fn failover_decide(ctx: &mut Ctx<'_>, state: &FailoverState) -> Picked {
    // failoverOrder resolved against the sorted working set (indices into ctx).
    let tiers: Vec<Vec<usize>> = match &ctx.traffic.strategy.failover_order {
        Some(order) => order
            .iter()
            .map(|tier| tier.iter().filter_map(|name| ctx.index_of(name)).collect())
            .collect(),
        None => vec![(0..ctx.clusters.len()).collect()],
    };
    let tier_of = |i: usize| tiers.iter().position(|t| t.contains(&i));
    let healthy_tier = |t: &Vec<usize>| t.iter().any(|&i| ctx.status[i] == Status::Eligible);
    let active = match tiers.get(state.active_tier) {
        Some(tier) if healthy_tier(tier) => Some(state.active_tier),
        _ => tiers.iter().position(healthy_tier),
    };
    for i in 0..ctx.clusters.len() {
        if tier_of(i).is_none() {
            let detail = match ctx.status[i] {
                Status::Eligible => "healthy but not in failoverOrder".to_owned(),
                other => format!("{}; not in failoverOrder", other.detail()),
            };
            ctx.set(i, false, detail);
        }
    }
    let Some(active) = active else {
        for (t, tier) in tiers.iter().enumerate() {
            for &i in tier {
                let detail = format!("{} (failoverOrder[{t}])", ctx.reasons[i].detail);
                ctx.set(i, false, detail);
            }
        }
        return Err("no tier of failoverOrder has a healthy cluster".to_owned());
    };
    let delay = ctx.traffic.failback_delay_seconds;
    let mut chosen = Vec::new();
    for (t, tier) in tiers.iter().enumerate() {
        for &i in tier {
            let status = ctx.status[i];
            let detail = match (status, t.cmp(&active)) {
                (Status::Eligible, Ordering::Equal) => {
                    chosen.push(i);
                    format!("healthy in failoverOrder[{t}], the active tier")
                }
                (Status::Eligible, Ordering::Less) => {
                    match (state.failback_tier, state.better_tier_healthy_since_ms) {
                        (Some(pending), Some(since)) if pending == t => format!(
                            "healthy in failoverOrder[{t}], a better tier: failback pending (healthy since {since} unix ms; failbackDelaySeconds {delay})"
                        ),
                        _ => format!(
                            "healthy in failoverOrder[{t}], a better tier: traffic moves back once it has been healthy for {delay} s"
                        ),
                    }
                }
                (Status::Eligible, Ordering::Greater) => format!(
                    "healthy standby in failoverOrder[{t}] (failoverOrder[{active}] is active)"
                ),
                (other, _) => format!("{} (failoverOrder[{t}])", other.detail()),
            };
            ctx.set(i, status == Status::Eligible && t == active, detail);
        }
    }
    chosen.sort_unstable();
    let names: Vec<String> = chosen.iter().map(|&i| ctx.name(i).to_owned()).collect();
    let summary = format!("failoverOrder[{active}] is active: {}", names.join(", "));
    Ok((Answer::All(names), summary))
}
