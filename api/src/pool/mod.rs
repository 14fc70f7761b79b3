//! Ingress pools: the hosts (members) of one cluster that serve a set of shares behind
//! VIPs held by VRRP.
//!
//! - [`IngressPool`] is the kind (cluster-scoped, like a PersistentVolume): which members
//!   of which cluster, the pool's capacity and the CIDR its VIPs come from; the hub
//!   writes its status (VIPs, members, the VIP holder, bound shares and load);
//! - [`alloc`] allocates VIPs from a CIDR without conflicts (pure);
//! - [`schedule`] binds each (ingress, cluster) share to one pool of that cluster, by
//!   selector, number bound and live load, sticky with hysteresis (pure).
//!
//! What does not belong here: persisting allocations and bindings (the hub's
//! controller), running VRRP (the agent), the IngressClaim kind ([`crate::claim`]).
//! The model is in `docs/pools.md`.

pub mod alloc;
pub mod schedule;

use std::collections::BTreeMap;
use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, ObjectMeta, string_enum, validate_object_meta};
use crate::names;
use crate::selector::LabelSelector;
use crate::validation::{FieldError, FieldPath};
use crate::{API_VERSION, Resource};

/// Condition type: the pool has a ready member holding each of its VIPs (or, without
/// VIPs, a ready member).
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the pool's load has reached its capacity (`saturatedAt`): no new share
/// is bound to it and shares move off it.
pub const CONDITION_SATURATED: &str = "Saturated";
/// Condition type: VIPs could be allocated (False with the allocator's error otherwise).
pub const CONDITION_ALLOCATED: &str = "VIPsAllocated";

/// VIPs per pool when `vipCount` is not set.
pub const DEFAULT_VIP_COUNT: i32 = 1;
/// The most VIPs one pool may ask for.
pub const MAX_VIP_COUNT: i32 = 16;
/// Members listed in `status.members` at most (the count is always exact).
pub const MEMBERS_LISTED: usize = 128;
/// Shares listed in `status.shares` at most (`boundShares` is always exact).
pub const SHARES_LISTED: usize = 100;

/// A set of members (agents) of one cluster that serve ingress shares together, behind
/// VIPs the hub allocates and VRRP moves between the members. Cluster-scoped.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressPool {
    /// `fedingress.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,

    /// `IngressPool`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Standard object metadata. The labels are the pool's own, matched by
    /// `placement.poolSelector` of a FederatedIngress.
    #[serde(default)]
    pub metadata: ObjectMeta,

    /// Which members, how much they can take, where the VIPs come from.
    #[serde(default)]
    pub spec: IngressPoolSpec,

    /// What the hub observed and allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<IngressPoolStatus>,
}

/// Which members of which cluster form a pool, and its VIPs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressPoolSpec {
    /// The Cluster whose members serve in this pool. Required; immutable.
    #[serde(default)]
    pub cluster: String,

    /// Members whose labels (the agent's `member.labels`) match are in the pool. Absent:
    /// every member of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_selector: Option<LabelSelector>,

    /// How much the pool can take; the scheduler reads it against the members' summed
    /// load. Absent: only the number of bound shares and CPU count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<PoolCapacity>,

    /// The CIDR the pool's VIPs come from, e.g. `10.0.0.96/28`. Absent: the Cluster's
    /// `spec.vipCIDR`; with neither, the pool has no VIP and DNS answers its ready
    /// members' addresses.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "vipCIDR")]
    pub vip_cidr: Option<String>,

    /// How many VIPs to allocate (1-16, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip_count: Option<i32>,

    /// Particular VIPs wanted (inside the CIDR, not held by another pool); the rest of
    /// `vipCount` is allocated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub vips: Vec<String>,

    /// The VRRP group id (1-255), unique among the cluster's pools. Absent: allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_router_id: Option<i32>,

    /// Set when an IngressClaim binds (or provisioned) this pool; a pool with a claim is
    /// not bound by another claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<ClaimRef>,
}

/// How much a pool (all its members together) can take. Every field is optional; the
/// scheduler's utilization is the highest ratio of load to capacity among those set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolCapacity {
    /// Concurrent connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<i64>,
    /// Requests plus new connections per second (the unit of `load.rps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps: Option<i64>,
    /// Bytes per second, both directions together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<i64>,
}

/// The IngressClaim a pool is bound to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
    /// The claim's uid: a claim deleted and created again is another claim.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

string_enum! {
    /// Where a pool stands with claims.
    #[derive(Default)]
    pub enum PoolPhase {
        /// No claim: any claim that matches may bind it.
        #[default]
        Available => "Available",
        /// Bound to the claim in `spec.claimRef`.
        Bound => "Bound",
        /// Its claim was released with `reclaimPolicy: Retain`: kept, bound to nobody
        /// new until `spec.claimRef` is cleared by hand.
        Released => "Released",
    }
}

/// What the hub observed and allocated for a pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressPoolStatus {
    /// `Available`, `Bound` or `Released`.
    #[serde(default)]
    pub phase: PoolPhase,

    /// The VIPs allocated to the pool (kept until the pool is deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vips: Vec<IpAddr>,

    /// The CIDR the VIPs were allocated from.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "vipCIDR")]
    pub vip_cidr: Option<String>,

    /// The VRRP group id in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_router_id: Option<i32>,

    /// Members in the pool (the first [`MEMBERS_LISTED`] by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub members: Vec<PoolMemberStatus>,

    /// Members in the pool, and how many of them are ready.
    #[serde(default)]
    pub member_count: i32,
    #[serde(default)]
    pub ready_members: i32,

    /// The member holding the VIPs (VRRP master), when one reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip_holder: Option<String>,

    /// Shares (ingress, this cluster) bound to the pool.
    #[serde(default)]
    pub bound_shares: i32,

    /// The bound ingresses as `namespace/name` (the first [`SHARES_LISTED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<String>,

    /// The members' summed load, and its utilization against `spec.capacity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<PoolLoad>,

    /// `Ready`, `Saturated`, `VIPsAllocated`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One member of a pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolMemberStatus {
    /// The member's name (the agent's `member.name`).
    pub name: String,
    /// Its real address, which VRRP peers use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    /// VRRP priority the hub gave it (the first member by name gets the highest).
    #[serde(default)]
    pub priority: i32,
    /// Connected and ready.
    #[serde(default)]
    pub ready: bool,
    /// `MASTER`, `BACKUP` or `FAULT` as its keepalived last said; absent before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vrrp_state: Option<String>,
}

/// A pool's (or a member's, or a cluster's) load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolLoad {
    /// Requests plus new connections per second.
    #[serde(default)]
    pub rps: f64,
    /// Open connections.
    #[serde(default)]
    pub active_connections: i64,
    /// Bytes per second, both directions.
    #[serde(default)]
    pub bytes_per_second: f64,
    /// The busiest member's data plane CPU (the agent process's share of the host's
    /// cores), 0-1.
    #[serde(default)]
    pub cpu: f64,
    /// The highest ratio of load to `spec.capacity` (and of `cpu` to 1), 0 and up.
    #[serde(default)]
    pub utilization: f64,
}

impl IngressPool {
    /// A pool named `name` with `apiVersion` and `kind` set.
    pub fn new(name: impl Into<String>, spec: IngressPoolSpec) -> Self {
        IngressPool {
            api_version: API_VERSION.to_owned(),
            kind: <IngressPool as Resource>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            status: None,
        }
    }

    /// The name, or `""` when unset.
    pub fn name(&self) -> &str {
        self.metadata.name_str()
    }

    /// `spec.vipCount`, defaulted.
    pub fn vip_count(&self) -> usize {
        usize::try_from(self.spec.vip_count.unwrap_or(DEFAULT_VIP_COUNT).max(0)).unwrap_or(0)
    }

    /// Whether a member with `labels` is in the pool.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.spec
            .member_selector
            .as_ref()
            .is_none_or(|s| s.matches(labels))
    }

    /// The VIPs allocated so far.
    pub fn vips(&self) -> &[IpAddr] {
        self.status
            .as_ref()
            .map(|s| s.vips.as_slice())
            .unwrap_or_default()
    }
}

pub use crate::cidr::parse_cidr;

/// Validates a `vipCIDR` at `path`: it parses, and holds at least `count` usable
/// addresses.
pub fn validate_cidr(value: &str, count: usize, path: &FieldPath) -> Vec<FieldError> {
    match parse_cidr(value) {
        Err(msg) => vec![FieldError::invalid(path.clone(), value, msg)],
        Ok(net) if alloc::usable(&net) < count as u128 => vec![FieldError::invalid(
            path.clone(),
            value,
            format!(
                "is too small: {} usable addresses, {count} VIPs wanted",
                alloc::usable(&net)
            ),
        )],
        Ok(_) => Vec::new(),
    }
}

impl PoolCapacity {
    /// Validates at `path`: no field negative.
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        [
            ("connections", self.connections),
            ("rps", self.rps),
            ("bandwidth", self.bandwidth),
        ]
        .into_iter()
        .filter_map(|(field, value)| {
            value.filter(|v| *v < 0).map(|v| {
                FieldError::invalid(path.child(field), v, "must be greater than or equal to 0")
            })
        })
        .collect()
    }
}

impl IngressPoolSpec {
    /// Validates the spec at `path` (usually `spec`). Conflicts with other pools
    /// (overlapping CIDRs, a VIP or group id another pool holds) need the other pools and
    /// are checked at admission by the hub ([`conflicts`]).
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.cluster.is_empty() {
            errs.push(FieldError::required(path.child("cluster"), ""));
        } else {
            for msg in names::dns1123_label(&self.cluster) {
                errs.push(FieldError::invalid(
                    path.child("cluster"),
                    &self.cluster,
                    msg,
                ));
            }
        }
        if let Some(selector) = &self.member_selector {
            errs.extend(selector.validate(&path.child("memberSelector")));
        }
        if let Some(capacity) = &self.capacity {
            errs.extend(capacity.validate(&path.child("capacity")));
        }
        let count = self.vip_count.unwrap_or(DEFAULT_VIP_COUNT);
        if !(1..=MAX_VIP_COUNT).contains(&count) {
            errs.push(FieldError::invalid(
                path.child("vipCount"),
                count,
                format!("must be between 1 and {MAX_VIP_COUNT}"),
            ));
        }
        let cidr = self.vip_cidr.as_deref().map(|value| {
            let at = path.child("vipCIDR");
            let count = usize::try_from(count.clamp(1, MAX_VIP_COUNT)).unwrap_or(1);
            errs.extend(validate_cidr(value, count, &at));
            parse_cidr(value).ok()
        });
        if self.vips.len() > usize::try_from(count.max(0)).unwrap_or(0) {
            errs.push(FieldError::invalid(
                path.child("vips"),
                self.vips.len(),
                format!("lists more VIPs than vipCount ({count})"),
            ));
        }
        for (i, vip) in self.vips.iter().enumerate() {
            let at = path.child("vips").index(i);
            match vip.parse::<IpAddr>() {
                Err(_) => errs.push(FieldError::invalid(at, vip, "must be an IP address")),
                Ok(ip) => {
                    if let Some(Some(net)) = &cidr
                        && !net.contains(&ip)
                    {
                        errs.push(FieldError::invalid(
                            at,
                            vip,
                            format!("is not in vipCIDR {net}"),
                        ));
                    }
                }
            }
        }
        if let Some(id) = self.virtual_router_id
            && !(1..=255).contains(&id)
        {
            errs.push(FieldError::invalid(
                path.child("virtualRouterId"),
                id,
                "must be between 1 and 255",
            ));
        }
        if let Some(claim) = &self.claim_ref {
            let at = path.child("claimRef");
            if claim.namespace.is_empty() {
                errs.push(FieldError::required(at.child("namespace"), ""));
            }
            if claim.name.is_empty() {
                errs.push(FieldError::required(at.child("name"), ""));
            }
        }
        errs
    }
}

/// What makes `pool` conflict with the other pools of its cluster (`others`, itself left
/// out by name) and the cluster's own `vipCIDR`: an explicit `vipCIDR` that overlaps
/// another pool's explicit one or the cluster's (pools share a CIDR by leaving theirs
/// out, taking the cluster's), a wanted VIP another pool wants or holds, a group id
/// another pool uses. Each error has its field path.
pub fn conflicts(
    pool: &IngressPool,
    cluster_cidr: Option<&str>,
    others: &[&IngressPool],
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = FieldPath::new("spec");
    let others: Vec<&IngressPool> = others
        .iter()
        .copied()
        .filter(|o| o.name() != pool.name() && o.spec.cluster == pool.spec.cluster)
        .collect();
    if let Some(mine) = pool
        .spec
        .vip_cidr
        .as_deref()
        .and_then(|c| parse_cidr(c).ok())
    {
        if let Some(theirs) = cluster_cidr.and_then(|c| parse_cidr(c).ok())
            && alloc::overlaps(&mine, &theirs)
        {
            errs.push(FieldError::invalid(
                spec.child("vipCIDR"),
                mine.to_string(),
                format!(
                    "overlaps the vipCIDR of Cluster {:?} ({theirs}): leave vipCIDR out to allocate from the cluster's",
                    pool.spec.cluster
                ),
            ));
        }
        for other in &others {
            if let Some(theirs) = other
                .spec
                .vip_cidr
                .as_deref()
                .and_then(|c| parse_cidr(c).ok())
                && alloc::overlaps(&mine, &theirs)
            {
                errs.push(FieldError::invalid(
                    spec.child("vipCIDR"),
                    mine.to_string(),
                    format!(
                        "overlaps the vipCIDR of IngressPool {:?} ({theirs})",
                        other.name()
                    ),
                ));
            }
        }
    }
    for (i, vip) in pool.spec.vips.iter().enumerate() {
        let Ok(ip) = vip.parse::<IpAddr>() else {
            continue;
        };
        if let Some(other) = others
            .iter()
            .find(|o| o.vips().contains(&ip) || o.spec.vips.iter().any(|v| v.parse() == Ok(ip)))
        {
            errs.push(FieldError::invalid(
                spec.child("vips").index(i),
                vip,
                format!("is taken by IngressPool {:?}", other.name()),
            ));
        }
    }
    if let Some(id) = pool.spec.virtual_router_id
        && let Some(other) = others.iter().find(|o| {
            o.spec.virtual_router_id == Some(id)
                || o.status.as_ref().and_then(|s| s.virtual_router_id) == Some(id)
        })
    {
        errs.push(FieldError::invalid(
            spec.child("virtualRouterId"),
            id,
            format!(
                "is used by IngressPool {:?} of the same cluster",
                other.name()
            ),
        ));
    }
    errs
}

impl Resource for IngressPool {
    const KIND: &'static str = "IngressPool";
    const LIST_KIND: &'static str = "IngressPoolList";
    const PLURAL: &'static str = "ingresspools";
    const SINGULAR: &'static str = "ingresspool";
    const SHORT_NAMES: &'static [&'static str] = &["ipool"];
    const NAMESPACED: bool = false;
    const SELECTABLE_FIELDS: &'static [&'static str] = &["spec.cluster"];

    fn selectable_field(&self, field: &str) -> Option<String> {
        (field == "spec.cluster").then(|| self.spec.cluster.clone())
    }

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

    /// `vipCount` 1 when unset.
    fn apply_defaults(&mut self) {
        self.spec.vip_count.get_or_insert(DEFAULT_VIP_COUNT);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validate_object_meta(
            &self.metadata,
            Self::NAMESPACED,
            names::dns1123_label,
            &FieldPath::new("metadata"),
        );
        errs.extend(self.spec.validate(&FieldPath::new("spec")));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, spec: serde_json::Value) -> IngressPool {
        let mut pool: IngressPool = serde_json::from_value(serde_json::json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "IngressPool",
            "metadata": {"name": name, "labels": {"tier": "gold"}},
            "spec": spec,
        }))
        .unwrap();
        pool.apply_defaults();
        pool
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_pool_round_trips_and_validates() {
        let p = pool(
            "gold",
            serde_json::json!({
                "cluster": "eu-west",
                "memberSelector": {"matchLabels": {"rack": "r1"}},
                "capacity": {"connections": 10000, "rps": 2000, "bandwidth": 125000000},
                "vipCIDR": "10.0.0.96/28",
                "vips": ["10.0.0.100"],
            }),
        );
        assert!(p.validate().is_empty(), "{:?}", errors(p.validate()));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["spec"]["vipCIDR"], "10.0.0.96/28");
        assert_eq!(json["spec"]["vipCount"], 1);
        assert!(p.selects(&BTreeMap::from([("rack".into(), "r1".into())])));
        assert!(!p.selects(&BTreeMap::new()));
    }

    #[test]
    fn bad_input_is_refused_with_field_paths() {
        let p = pool(
            "bad",
            serde_json::json!({
                "vipCIDR": "10.0.0.97/28",
                "vipCount": 40,
                "vips": ["10.1.0.1", "nope"],
                "virtualRouterId": 300,
                "capacity": {"rps": -1},
            }),
        );
        let errs = errors(p.validate());
        for want in [
            "spec.cluster: Required value",
            "spec.vipCIDR: Invalid value",
            "spec.vipCount: Invalid value",
            "spec.vips[1]: Invalid value",
            "spec.virtualRouterId: Invalid value",
            "spec.capacity.rps: Invalid value",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "{want} in {errs:#?}"
            );
        }
        let small = pool(
            "small",
            serde_json::json!({"cluster": "eu-west", "vipCIDR": "10.0.0.96/30", "vipCount": 3}),
        );
        let errs = errors(small.validate());
        assert!(errs[0].contains("too small"), "{errs:?}");
    }

    #[test]
    fn conflicts_name_the_other_pool() {
        let mut a = pool(
            "a",
            serde_json::json!({"cluster": "eu-west", "vipCIDR": "10.0.0.0/24", "virtualRouterId": 7}),
        );
        a.status = Some(IngressPoolStatus {
            vips: vec!["10.0.0.1".parse().unwrap()],
            ..IngressPoolStatus::default()
        });
        let b = pool(
            "b",
            serde_json::json!({"cluster": "eu-west", "vipCIDR": "10.0.0.128/25", "vips": ["10.0.0.1"], "virtualRouterId": 7}),
        );
        let errs = errors(conflicts(&b, Some("10.9.0.0/16"), &[&a]));
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(errs[0].starts_with("spec.vipCIDR: Invalid value") && errs[0].contains("\"a\""));
        let errs = errors(conflicts(&b, Some("10.0.0.0/8"), &[]));
        assert!(errs[0].contains("Cluster \"eu-west\""), "{errs:?}");
        // Another cluster's pools never conflict.
        let mut elsewhere = a.clone();
        elsewhere.spec.cluster = "us-east".into();
        assert!(conflicts(&b, None, &[&elsewhere]).is_empty());
    }
}
