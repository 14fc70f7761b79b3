//! The claim controller: each IngressClaim gets a pool in every cluster where one of
//! its FederatedIngresses is placed, and its reclaim policy is applied once they are all
//! gone (or the claim is deleted). See `docs/pools.md`, "Claims".
//!
//! - a cluster whose agent (or one of its members) runs the `kubernetes` driver: the
//!   claim *provisions* a pool, `<claim>-<cluster>`, labelled
//!   [`PROVISIONED_BY`]`: <namespace>.<claim>` and selecting the members labelled
//!   [`POOL_LABEL`]`: <pool>`; the controller's plan carries it to the agent as a
//!   `PoolProvision` ([`crate::controller::pools::provisions`]) and the agent runs it as a
//!   workload;
//! - a standalone cluster: the claim *binds* a free pool of that cluster (no claim, not
//!   `Released`, the template's labels, at least the template's capacity), oldest first,
//!   like a PersistentVolumeClaim binds a PersistentVolume; none: the cluster stays
//!   Pending with the reason;
//! - reclaim: `Delete` deletes the pools the claim provisioned (the agent removes their
//!   workloads with the plan) and recycles those it only bound; `Recycle` clears their
//!   `spec.claimRef`; `Retain` keeps it and marks the pool `Released`. A claim carries the
//!   finalizer [`FINALIZER`] so that its deletion waits for this.
//!
//! observe (the controller's [`Cache`], listed then followed by a store watch) → decide
//! ([`decide`], pure: a list of [`Action`]s) → apply (writes through the fenced store of
//! the leader, as [`CLAIMS_MANAGER`]; a claim's actions stop at its first failure and are
//! decided again on the next pass). Only the leader runs it; every step is idempotent,
//! so a new leader starts over from what is stored.
//!
//! What does not belong here: binding shares to pools and building the plan (the
//! controller, [`crate::controller::pools`]), running a provisioned pool (the kubernetes
//! agent).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::claim::{
    self, ClaimPhase, ClaimedPool, IngressClaimStatus, PoolTemplate, ReclaimPolicy,
};
use fedingress_api::cluster::AgentDriver;
use fedingress_api::meta::{ConditionStatus, set_condition};
use fedingress_api::plan::IngressKey;
use fedingress_api::pool::{ClaimRef, IngressPoolSpec, PoolCapacity, PoolPhase};
use fedingress_api::selector::LabelSelector;
use fedingress_api::{
    Cluster, Condition, FederatedIngress, IngressClaim, IngressPool, ObjectMeta, Time,
};
use fedingress_store::{Revision, Store};
use futures_util::StreamExt;
use http::StatusCode;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::controller::observe::Cache;
pub use crate::controller::pools::{POOL_LABEL, PROVISIONED_BY};
use crate::replication::Role;
use fedingress_apiserver::events::Recorder;
use fedingress_apiserver::registry::{DeletePreconditions, Registry, Scope, parse_revision};
use fedingress_apiserver::status::ApiError;

/// The finalizer on every claim: its deletion waits until its pools are reclaimed.
pub const FINALIZER: &str = "fedingress.io/claim-protection";
/// The field manager of the claim controller's writes.
pub const CLAIMS_MANAGER: &str = "fedingress-claims";

/// Wait after a watch event before a pass, so bursts coalesce.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// How soon a pass whose writes failed is tried again.
const RETRY: Duration = Duration::from_secs(1);
/// How long an idle controller waits before a pass anyway.
const RESYNC: Duration = Duration::from_secs(30);
/// How long a pass waits for the watch to bring back the previous pass's writes.
const CATCH_UP: Duration = Duration::from_secs(2);
/// The longest name a pool may have (a DNS-1123 label), and a label value.
const MAX_NAME: usize = 63;

/// One thing the claim controller does, for the claim it names. Actions come in the
/// order they are to be applied; a claim's are skipped after its first failure.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Adds [`FINALIZER`] to the claim.
    Protect { claim: IngressKey },
    /// Creates a pool the claim provisions (kubernetes cluster).
    Create {
        claim: IngressKey,
        pool: Box<IngressPool>,
    },
    /// Sets `spec.claimRef` of a free pool, if it is still at `resource_version`.
    Bind {
        claim: IngressKey,
        pool: String,
        resource_version: String,
        claim_ref: ClaimRef,
    },
    /// Clears `spec.claimRef` of a pool (it becomes `Available`), if it is still at
    /// `resource_version`.
    Recycle {
        claim: IngressKey,
        pool: String,
        resource_version: String,
    },
    /// Deletes a pool the claim provisioned, if it is still the pool of `uid`.
    Delete {
        claim: IngressKey,
        pool: String,
        uid: String,
    },
    /// Writes a pool's `status.phase`: `Released` (Retain) or `Bound` (a retained pool
    /// its own claim binds again).
    PoolPhase {
        claim: IngressKey,
        pool: String,
        phase: PoolPhase,
    },
    /// Writes the claim's status.
    Status {
        claim: IngressKey,
        status: IngressClaimStatus,
    },
    /// Records an Event about the claim.
    Event {
        claim: IngressKey,
        type_: &'static str,
        reason: &'static str,
        message: String,
    },
    /// Removes [`FINALIZER`]: the claim, being deleted, goes.
    Finalize { claim: IngressKey },
}

impl Action {
    /// The claim the action is for.
    pub fn claim(&self) -> &IngressKey {
        match self {
            Action::Protect { claim }
            | Action::Create { claim, .. }
            | Action::Bind { claim, .. }
            | Action::Recycle { claim, .. }
            | Action::Delete { claim, .. }
            | Action::PoolPhase { claim, .. }
            | Action::Status { claim, .. }
            | Action::Event { claim, .. }
            | Action::Finalize { claim } => claim,
        }
    }
}

/// What [`decide`] reads: the stored objects.
pub struct World<'a> {
    pub claims: &'a BTreeMap<IngressKey, IngressClaim>,
    pub pools: &'a BTreeMap<String, IngressPool>,
    /// Their `status.driver` and `status.members[].driver` say how each cluster serves.
    pub clusters: &'a BTreeMap<String, Cluster>,
    /// Their `status.clusters[].name` say where each is placed.
    pub ingresses: &'a BTreeMap<IngressKey, FederatedIngress>,
    pub now: Time,
}

/// Decides what to do for every claim.
///
/// # Guarantees
/// - Pure and deterministic: claims in (namespace, name) order, a free pool bound by the
///   first claim that wants it (pools oldest first, then by name), never two claims
///   binding one pool nor two creating one name in a pass.
/// - A status is written only when it differs from the stored one (condition times move
///   only when a condition's status does); Events only for what changed from the stored
///   status (a cluster bound, provisioned or pending for a new reason; released;
///   deleted), after the status write they describe.
/// - Reclaim acts only on the pools whose `spec.claimRef` names this claim (its uid, or
///   none), and the finalizer is removed only after it.
pub fn decide(world: &World<'_>) -> Vec<Action> {
    let mut out = Vec::new();
    // Pools bound or created by earlier claims in this pass.
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (key, claim) in world.claims {
        decide_claim(world, key, claim, &mut taken, &mut out);
    }
    out
}

fn decide_claim(
    world: &World<'_>,
    key: &IngressKey,
    claim: &IngressClaim,
    taken: &mut BTreeSet<String>,
    out: &mut Vec<Action>,
) {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let protected = claim.metadata.finalizers.iter().any(|f| f == FINALIZER);
    if !deleting && !protected {
        out.push(Action::Protect { claim: key.clone() });
    }
    let mut owned: Vec<&IngressPool> = world
        .pools
        .values()
        .filter(|p| owns(p, key, &uid))
        .collect();
    owned.sort_by(|a, b| a.name().cmp(b.name()));
    let existing: Vec<&FederatedIngress> = claim
        .spec
        .ingresses
        .iter()
        .filter_map(|name| world.ingresses.get(&IngressKey::new(&key.namespace, name)))
        .collect();
    let stored = claim.status.clone().unwrap_or_default();
    let released = deleting
        || (existing.is_empty() && (!owned.is_empty() || stored.phase == ClaimPhase::Released));
    let (status, events) = if released {
        reclaim(world, key, claim, &owned, &stored, out)
    } else {
        bind(
            world, key, claim, &uid, &owned, &existing, &stored, taken, out,
        )
    };
    if status != stored {
        out.push(Action::Status {
            claim: key.clone(),
            status,
        });
    }
    out.extend(events);
    if deleting && protected {
        out.push(Action::Event {
            claim: key.clone(),
            type_: "Normal",
            reason: "Deleted",
            message: format!(
                "the claim is deleted: its pools were reclaimed (reclaimPolicy {}); finalizer {FINALIZER} removed",
                claim.spec.reclaim_policy
            ),
        });
        out.push(Action::Finalize { claim: key.clone() });
    }
}

/// Whether `pool` is bound to the claim `key` with `uid` (a claimRef without uid, as
/// written by hand, names the claim by namespace and name).
fn owns(pool: &IngressPool, key: &IngressKey, uid: &str) -> bool {
    pool.spec.claim_ref.as_ref().is_some_and(|r| {
        r.namespace == key.namespace && r.name == key.name && (r.uid.is_empty() || r.uid == uid)
    })
}

/// The value of [`PROVISIONED_BY`] on the pools the claim `key` provisions:
/// `<namespace>.<name>`, shortened with a hash when longer than a label value may be.
pub fn provisioned_by(key: &IngressKey) -> String {
    fit(&format!("{}.{}", key.namespace, key.name))
}

/// Whether the claim `key` provisioned `pool` (its [`PROVISIONED_BY`] label).
pub fn provisioned(pool: &IngressPool, key: &IngressKey) -> bool {
    pool.metadata.labels.get(PROVISIONED_BY) == Some(&provisioned_by(key))
}

/// `value` when at most [`MAX_NAME`] long; else its first 57 characters (without a
/// trailing `-` or `.`), `-` and 5 hex digits of its hash.
fn fit(value: &str) -> String {
    if value.len() <= MAX_NAME {
        return value.to_owned();
    }
    let hash = hex::encode(Sha256::digest(value.as_bytes()));
    let head: String = value.chars().take(MAX_NAME - 6).collect();
    format!("{}-{}", head.trim_end_matches(['-', '.']), &hash[..5])
}

/// The name of the pool the claim `key` provisions in `cluster`: `<claim>-<cluster>`
/// (dots become dashes: a DNS-1123 label), and when another pool (or one created
/// earlier in this pass) holds that name, the same with 5 hex digits of the claim's uid.
pub fn pool_name(
    key: &IngressKey,
    cluster: &str,
    uid: &str,
    pools: &BTreeMap<String, IngressPool>,
    taken: &BTreeSet<String>,
) -> String {
    let base = format!("{}-{cluster}", key.name.replace('.', "-"));
    let name = fit(&base);
    if !pools.contains_key(&name) && !taken.contains(&name) {
        return name;
    }
    let hash = hex::encode(Sha256::digest(uid.as_bytes()));
    fit(&format!("{base}-{}", &hash[..5]))
}

/// How `cluster` serves, as its status says: `kubernetes` when its agent or any member
/// runs that driver, else the driver named, else `None` (no agent has connected).
pub fn driver(cluster: &Cluster) -> Option<AgentDriver> {
    let status = cluster.status.as_ref()?;
    let drivers: Vec<AgentDriver> = status
        .driver
        .iter()
        .chain(status.members.iter().filter_map(|m| m.driver.as_ref()))
        .copied()
        .collect();
    if drivers.contains(&AgentDriver::Kubernetes) {
        Some(AgentDriver::Kubernetes)
    } else {
        drivers.first().copied()
    }
}

/// Whether `pool` has at least the capacity `want` sets (a field the pool leaves unset
/// is not enough for one the template sets).
fn has_capacity(pool: &IngressPool, want: Option<&PoolCapacity>) -> bool {
    let Some(want) = want else {
        return true;
    };
    let have = pool.spec.capacity.unwrap_or_default();
    [
        (want.connections, have.connections),
        (want.rps, have.rps),
        (want.bandwidth, have.bandwidth),
    ]
    .into_iter()
    .all(|(want, have)| want.is_none_or(|w| have.is_some_and(|h| h >= w)))
}

/// Whether `pool` of `cluster` is free for a claim with `template`.
fn free(pool: &IngressPool, cluster: &str, template: &PoolTemplate) -> bool {
    pool.spec.cluster == cluster
        && pool.spec.claim_ref.is_none()
        && pool.metadata.deletion_timestamp.is_none()
        && pool.status.as_ref().map(|s| s.phase) != Some(PoolPhase::Released)
        && template
            .labels
            .iter()
            .all(|(k, v)| pool.metadata.labels.get(k) == Some(v))
        && has_capacity(pool, template.capacity.as_ref())
}

/// The IngressPool a claim provisions in `cluster`, named `name`.
pub fn provisioned_pool(
    claim: &IngressClaim,
    key: &IngressKey,
    cluster: &str,
    name: &str,
) -> IngressPool {
    let template = &claim.spec.template;
    let mut member_labels = template.member_labels.clone();
    member_labels.insert(POOL_LABEL.to_owned(), name.to_owned());
    let mut labels = template.labels.clone();
    labels.insert(PROVISIONED_BY.to_owned(), provisioned_by(key));
    let mut pool = IngressPool::new(
        name,
        IngressPoolSpec {
            cluster: cluster.to_owned(),
            member_selector: Some(LabelSelector::from_labels(member_labels)),
            capacity: template.capacity,
            vip_cidr: template.vip_cidr.clone(),
            vip_count: template.vip_count,
            claim_ref: Some(claim_ref(claim, key)),
            ..IngressPoolSpec::default()
        },
    );
    pool.metadata = ObjectMeta {
        labels,
        ..pool.metadata
    };
    pool
}

fn claim_ref(claim: &IngressClaim, key: &IngressKey) -> ClaimRef {
    ClaimRef {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
    }
}

/// `{a=b, c=d}`.
fn labels_text(labels: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

fn capacity_text(capacity: &PoolCapacity) -> String {
    let mut parts = Vec::new();
    for (field, value) in [
        ("connections", capacity.connections),
        ("rps", capacity.rps),
        ("bandwidth", capacity.bandwidth),
    ] {
        if let Some(v) = value {
            parts.push(format!("{field}={v}"));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

fn bound_condition(ok: bool, reason: &str, message: String, generation: Option<i64>) -> Condition {
    let status = if ok {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let condition = Condition::new(claim::CONDITION_BOUND, status, reason, message);
    match generation {
        Some(g) => condition.with_observed_generation(g),
        None => condition,
    }
}

/// The status and Events of a claim that is not released: a pool in each placed
/// cluster, provisioned or bound (the actions for it pushed to `out`), or why not.
#[allow(clippy::too_many_arguments)]
fn bind(
    world: &World<'_>,
    key: &IngressKey,
    claim: &IngressClaim,
    uid: &str,
    owned: &[&IngressPool],
    existing: &[&FederatedIngress],
    stored: &IngressClaimStatus,
    taken: &mut BTreeSet<String>,
    out: &mut Vec<Action>,
) -> (IngressClaimStatus, Vec<Action>) {
    let template = &claim.spec.template;
    let placed: BTreeSet<&str> = existing
        .iter()
        .flat_map(|i| i.status.iter().flat_map(|s| &s.clusters))
        .map(|c| c.name.as_str())
        .filter(|c| world.clusters.contains_key(*c))
        .collect();
    let mut entries: Vec<ClaimedPool> = Vec::new();
    let mut warnings: BTreeSet<String> = BTreeSet::new();
    for cluster in &placed {
        let mine = owned
            .iter()
            .find(|p| p.spec.cluster == *cluster && p.metadata.deletion_timestamp.is_none());
        if let Some(pool) = mine {
            let provisioned = provisioned(pool, key);
            if pool.status.as_ref().map(|s| s.phase) == Some(PoolPhase::Released) {
                out.push(Action::PoolPhase {
                    claim: key.clone(),
                    pool: pool.name().to_owned(),
                    phase: PoolPhase::Bound,
                });
            }
            entries.push(ClaimedPool {
                cluster: (*cluster).to_owned(),
                pool: Some(pool.name().to_owned()),
                provisioned,
                message: if provisioned {
                    "provisioned for the claim".to_owned()
                } else {
                    "bound to the claim".to_owned()
                },
            });
            continue;
        }
        let driver = world.clusters.get(*cluster).and_then(driver);
        match driver {
            Some(AgentDriver::Kubernetes) => {
                let name = pool_name(key, cluster, uid, world.pools, taken);
                taken.insert(name.clone());
                out.push(Action::Create {
                    claim: key.clone(),
                    pool: Box::new(provisioned_pool(claim, key, cluster, &name)),
                });
                entries.push(ClaimedPool {
                    cluster: (*cluster).to_owned(),
                    pool: Some(name),
                    provisioned: true,
                    message: "provisioned for the claim".to_owned(),
                });
            }
            Some(AgentDriver::Standalone) => {
                let mut candidates: Vec<&IngressPool> = world
                    .pools
                    .values()
                    .filter(|p| !taken.contains(p.name()) && free(p, cluster, template))
                    .collect();
                candidates.sort_by(|a, b| {
                    (&a.metadata.creation_timestamp, a.name())
                        .cmp(&(&b.metadata.creation_timestamp, b.name()))
                });
                if let Some(pool) = candidates.first() {
                    taken.insert(pool.name().to_owned());
                    out.push(Action::Bind {
                        claim: key.clone(),
                        pool: pool.name().to_owned(),
                        resource_version: pool
                            .metadata
                            .resource_version
                            .clone()
                            .unwrap_or_default(),
                        claim_ref: claim_ref(claim, key),
                    });
                    entries.push(ClaimedPool {
                        cluster: (*cluster).to_owned(),
                        pool: Some(pool.name().to_owned()),
                        provisioned: false,
                        message: "bound to the claim".to_owned(),
                    });
                } else {
                    let mut message = format!(
                        "no free IngressPool of cluster {cluster} has labels {}",
                        labels_text(&template.labels)
                    );
                    if let Some(capacity) = &template.capacity {
                        message.push_str(&format!(
                            " and at least the capacity {}",
                            capacity_text(capacity)
                        ));
                    }
                    warnings.insert((*cluster).to_owned());
                    entries.push(ClaimedPool {
                        cluster: (*cluster).to_owned(),
                        pool: None,
                        provisioned: false,
                        message,
                    });
                }
            }
            None => entries.push(ClaimedPool {
                cluster: (*cluster).to_owned(),
                pool: None,
                provisioned: false,
                message: format!("cluster {cluster} has no agent yet"),
            }),
        }
    }
    // Pools it holds where no named ingress is placed now stay bound to it.
    for pool in owned {
        let cluster = pool.spec.cluster.as_str();
        if placed.contains(cluster) || entries.iter().any(|e| e.cluster == cluster) {
            continue;
        }
        entries.push(ClaimedPool {
            cluster: cluster.to_owned(),
            pool: Some(pool.name().to_owned()),
            provisioned: provisioned(pool, key),
            message: format!("bound; no named ingress is placed on cluster {cluster} now"),
        });
    }
    entries.sort_by(|a, b| a.cluster.cmp(&b.cluster));

    let pending: Vec<&ClaimedPool> = entries
        .iter()
        .filter(|e| e.pool.is_none() && placed.contains(e.cluster.as_str()))
        .collect();
    let (phase, condition) = if placed.is_empty() {
        let message = if existing.is_empty() {
            format!(
                "none of the named FederatedIngresses exists ({})",
                claim.spec.ingresses.join(", ")
            )
        } else {
            "no named FederatedIngress is placed on a cluster yet".to_owned()
        };
        (
            ClaimPhase::Pending,
            bound_condition(false, "NotPlaced", message, claim.metadata.generation),
        )
    } else if pending.is_empty() {
        (
            ClaimPhase::Bound,
            bound_condition(
                true,
                "Bound",
                format!("a pool in each of the {} placed clusters", placed.len()),
                claim.metadata.generation,
            ),
        )
    } else {
        let reasons: Vec<&str> = pending.iter().map(|e| e.message.as_str()).collect();
        (
            ClaimPhase::Pending,
            bound_condition(
                false,
                "Pending",
                format!(
                    "{} of {} placed clusters have no pool: {}",
                    pending.len(),
                    placed.len(),
                    reasons.join("; ")
                ),
                claim.metadata.generation,
            ),
        )
    };
    let mut status = stored.clone();
    status.phase = phase;
    status.clusters = entries;
    set_condition(&mut status.conditions, condition.clone(), world.now);

    let mut events = Vec::new();
    for entry in &status.clusters {
        // A released claim's entries say what reclaim did: what it binds now is news.
        let before = stored
            .clusters
            .iter()
            .filter(|_| stored.phase != ClaimPhase::Released)
            .find(|e| e.cluster == entry.cluster);
        match &entry.pool {
            Some(pool) if before.and_then(|b| b.pool.as_ref()) != Some(pool) => {
                let (reason, message) = if entry.provisioned {
                    (
                        "Provisioned",
                        format!(
                            "IngressPool {pool} provisioned in cluster {}",
                            entry.cluster
                        ),
                    )
                } else {
                    (
                        "Bound",
                        format!("IngressPool {pool} of cluster {} bound", entry.cluster),
                    )
                };
                events.push(Action::Event {
                    claim: key.clone(),
                    type_: "Normal",
                    reason,
                    message,
                });
            }
            None if before.is_none_or(|b| b.pool.is_some() || b.message != entry.message) => {
                events.push(Action::Event {
                    claim: key.clone(),
                    type_: if warnings.contains(&entry.cluster) {
                        "Warning"
                    } else {
                        "Normal"
                    },
                    reason: "Pending",
                    message: entry.message.clone(),
                });
            }
            _ => {}
        }
    }
    let condition_before = stored
        .conditions
        .iter()
        .find(|c| c.type_ == claim::CONDITION_BOUND);
    if placed.is_empty() && condition_before.is_none_or(|c| c.message != condition.message) {
        events.push(Action::Event {
            claim: key.clone(),
            type_: "Normal",
            reason: "Pending",
            message: condition.message.clone(),
        });
    }
    (status, events)
}

/// The status and Events of a released claim (its ingresses gone, or itself being
/// deleted), the reclaim policy's actions on its pools pushed to `out`.
fn reclaim(
    world: &World<'_>,
    key: &IngressKey,
    claim: &IngressClaim,
    owned: &[&IngressPool],
    stored: &IngressClaimStatus,
    out: &mut Vec<Action>,
) -> (IngressClaimStatus, Vec<Action>) {
    let policy = claim.spec.reclaim_policy;
    let mut entries: BTreeMap<String, ClaimedPool> = BTreeMap::new();
    // What the stored status says it held (pools that are gone or recycled since).
    for entry in stored.clusters.iter().filter(|e| e.pool.is_some()) {
        entries.insert(
            entry.cluster.clone(),
            ClaimedPool {
                message: reclaimed(policy, entry.provisioned).to_owned(),
                ..entry.clone()
            },
        );
    }
    let mut done = Vec::new();
    for pool in owned {
        let name = pool.name().to_owned();
        let was_provisioned = provisioned(pool, key);
        match (policy, was_provisioned) {
            (ReclaimPolicy::Delete, true) => {
                if pool.metadata.deletion_timestamp.is_none() {
                    out.push(Action::Delete {
                        claim: key.clone(),
                        pool: name.clone(),
                        uid: pool.metadata.uid.clone().unwrap_or_default(),
                    });
                }
                done.push(format!("IngressPool {name} deleted"));
            }
            (ReclaimPolicy::Delete | ReclaimPolicy::Recycle, _) => {
                out.push(Action::Recycle {
                    claim: key.clone(),
                    pool: name.clone(),
                    resource_version: pool.metadata.resource_version.clone().unwrap_or_default(),
                });
                done.push(format!("IngressPool {name} recycled"));
            }
            (ReclaimPolicy::Retain, _) => {
                if pool.status.as_ref().map(|s| s.phase) != Some(PoolPhase::Released) {
                    out.push(Action::PoolPhase {
                        claim: key.clone(),
                        pool: name.clone(),
                        phase: PoolPhase::Released,
                    });
                }
                done.push(format!("IngressPool {name} retained (Released)"));
            }
        }
        entries.insert(
            pool.spec.cluster.clone(),
            ClaimedPool {
                cluster: pool.spec.cluster.clone(),
                pool: Some(name),
                provisioned: was_provisioned,
                message: reclaimed(policy, was_provisioned).to_owned(),
            },
        );
    }
    let why = if claim.metadata.deletion_timestamp.is_some() {
        "the claim is being deleted"
    } else {
        "every named FederatedIngress is gone"
    };
    let mut status = stored.clone();
    status.phase = ClaimPhase::Released;
    status.clusters = entries.into_values().collect();
    set_condition(
        &mut status.conditions,
        bound_condition(
            false,
            "Released",
            format!("{why}: reclaimPolicy {policy} applied"),
            claim.metadata.generation,
        ),
        world.now,
    );
    let mut events = Vec::new();
    if stored.phase != ClaimPhase::Released {
        let what = if done.is_empty() {
            "no pool to reclaim".to_owned()
        } else {
            done.join("; ")
        };
        events.push(Action::Event {
            claim: key.clone(),
            type_: "Normal",
            reason: "Released",
            message: format!("{why}: reclaimPolicy {policy}: {what}"),
        });
    }
    (status, events)
}

/// What reclaim did to a pool, for `status.clusters[].message`.
fn reclaimed(policy: ReclaimPolicy, provisioned: bool) -> &'static str {
    match (policy, provisioned) {
        (ReclaimPolicy::Delete, true) => "deleted (reclaimPolicy Delete)",
        (ReclaimPolicy::Delete, false) => {
            "recycled: claimRef cleared (reclaimPolicy Delete recycles a pool the claim did not provision)"
        }
        (ReclaimPolicy::Recycle, _) => {
            "recycled: claimRef cleared, Available (reclaimPolicy Recycle)"
        }
        (ReclaimPolicy::Retain, _) => {
            "retained: Released, still referring to the claim (reclaimPolicy Retain)"
        }
    }
}

/// The claim controller; see the module docs.
pub struct ClaimController {
    /// Reads (lists, watches), on the plain store.
    registry: Registry,
    role: watch::Receiver<Role>,
}

/// What the controller writes with while it leads (on the fenced store).
struct Writers {
    registry: Registry,
    recorder: Recorder,
}

/// How a pass went.
#[derive(Default)]
struct Outcome {
    /// Some action failed: pass again soon.
    failed: bool,
    /// The highest revision written to the watched kinds.
    written: Revision,
}

impl ClaimController {
    pub fn new(registry: Registry, role: watch::Receiver<Role>) -> Self {
        Self { registry, role }
    }

    /// Runs until the process ends: while this replica leads, claims are driven.
    pub async fn run(mut self) {
        loop {
            let role = self.role.borrow_and_update().clone();
            let Role::Leader(store) = role else {
                if self.role.changed().await.is_err() {
                    return;
                }
                continue;
            };
            let registry = Registry::new(store).managed_by(CLAIMS_MANAGER);
            let mut writers = Writers {
                recorder: Recorder::new(registry.clone()),
                registry,
            };
            let reads = self.registry.clone();
            tokio::select! {
                changed = self.role.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = lead(&reads, &mut writers) => {}
            }
        }
    }
}

/// Lists, then passes on every change (and every [`RESYNC`]) until the watch breaks,
/// then lists again; runs until dropped.
async fn lead(reads: &Registry, writers: &mut Writers) {
    loop {
        let mut cache = match Cache::list(reads).await {
            Ok(cache) => cache,
            Err(error) => {
                tracing::warn!(%error, "listing for the claim controller failed; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let store: Arc<dyn Store> = reads.store().clone();
        let mut events = match store.watch(&Cache::watch_prefix(), cache.revision).await {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(%error, "watching for the claim controller failed; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        'watch: loop {
            let outcome = pass(&cache, writers).await;
            // The next pass starts from this one's writes (their events, within a bound).
            let until = tokio::time::Instant::now() + CATCH_UP;
            while cache.revision < outcome.written {
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(event)) => { cache.apply(&event); }
                        _ => break 'watch,
                    },
                    () = tokio::time::sleep_until(until) => break,
                }
            }
            let wait = if outcome.failed { RETRY } else { RESYNC };
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => { cache.apply(&event); }
                    _ => break 'watch,
                },
                () = tokio::time::sleep(wait) => continue 'watch,
            }
            tokio::time::sleep(DEBOUNCE).await;
            while let Some(event) = futures_util::FutureExt::now_or_never(events.next()) {
                match event {
                    Some(Ok(event)) => {
                        cache.apply(&event);
                    }
                    _ => break 'watch,
                }
            }
        }
        tracing::debug!("claim controller watch ended; listing again");
    }
}

/// observe → decide → apply over the cache.
async fn pass(cache: &Cache, writers: &mut Writers) -> Outcome {
    if cache.claims.is_empty() {
        return Outcome::default();
    }
    let now = Time(chrono::Utc::now());
    let world = World {
        claims: &cache.claims,
        pools: &cache.pools,
        clusters: &cache.clusters,
        ingresses: &cache.ingresses,
        now,
    };
    let actions = decide(&world);
    let mut outcome = Outcome::default();
    let mut failed: BTreeSet<IngressKey> = BTreeSet::new();
    for action in actions {
        let key = action.claim().clone();
        if failed.contains(&key) {
            continue;
        }
        match apply(cache, writers, action, now).await {
            Ok(revision) => outcome.written = outcome.written.max(revision),
            Err(error) => {
                tracing::warn!(claim = %key, %error, "claim controller write failed; deciding again");
                failed.insert(key);
                outcome.failed = true;
            }
        }
    }
    outcome
}

/// Applies one action; returns the revision written (0: none, or not a watched kind).
async fn apply(
    cache: &Cache,
    writers: &mut Writers,
    action: Action,
    now: Time,
) -> Result<Revision, ApiError> {
    let registry = &writers.registry;
    let written = |rv: Option<&String>| -> Revision {
        rv.and_then(|rv| parse_revision(rv).ok())
            .unwrap_or_default()
    };
    match action {
        Action::Protect { claim } => {
            let updated = registry
                .update::<IngressClaim>(
                    Some(&claim.namespace),
                    &claim.name,
                    Scope::Main,
                    false,
                    |current| {
                        let mut next = current.clone();
                        let meta = &mut next.metadata;
                        if meta.deletion_timestamp.is_none()
                            && !meta.finalizers.iter().any(|f| f == FINALIZER)
                        {
                            meta.finalizers.push(FINALIZER.to_owned());
                        }
                        meta.resource_version = None;
                        Ok(next)
                    },
                )
                .await?;
            Ok(written(updated.metadata.resource_version.as_ref()))
        }
        Action::Create { claim, pool } => {
            let name = pool.name().to_owned();
            let created = registry.create(None, *pool, now, false).await?;
            tracing::info!(claim = %claim, pool = %name, "IngressPool provisioned for the claim");
            Ok(written(created.metadata.resource_version.as_ref()))
        }
        Action::Bind {
            claim,
            pool,
            resource_version,
            claim_ref,
        } => {
            let updated = registry
                .update::<IngressPool>(None, &pool, Scope::Main, false, |current| {
                    let mut next = current.clone();
                    next.spec.claim_ref = Some(claim_ref.clone());
                    // Bound only if nobody changed it since it was found free.
                    next.metadata.resource_version = Some(resource_version.clone());
                    Ok(next)
                })
                .await?;
            tracing::info!(claim = %claim, pool, "free IngressPool bound to the claim");
            Ok(written(updated.metadata.resource_version.as_ref()))
        }
        Action::Recycle {
            claim,
            pool,
            resource_version,
        } => {
            let updated = registry
                .update::<IngressPool>(None, &pool, Scope::Main, false, |current| {
                    let mut next = current.clone();
                    next.spec.claim_ref = None;
                    next.metadata.resource_version = Some(resource_version.clone());
                    Ok(next)
                })
                .await;
            let Some(updated) = ignore_gone(updated)? else {
                return Ok(0);
            };
            tracing::info!(claim = %claim, pool, "IngressPool recycled: claimRef cleared");
            Ok(written(updated.metadata.resource_version.as_ref()))
        }
        Action::Delete { claim, pool, uid } => {
            let preconditions = DeletePreconditions {
                uid: Some(uid),
                resource_version: None,
            };
            let deleted = registry
                .delete::<IngressPool>(None, &pool, &preconditions, now, false)
                .await;
            if ignore_gone(deleted)?.is_some() {
                tracing::info!(claim = %claim, pool, "IngressPool the claim provisioned deleted");
            }
            // A delete's revision is not known here: the next pass may run before its
            // event, and finds the pool again only to delete it again (gone: fine).
            Ok(0)
        }
        Action::PoolPhase { claim, pool, phase } => {
            let updated = registry
                .update::<IngressPool>(None, &pool, Scope::Status, false, |current| {
                    let mut next = current.clone();
                    next.status.get_or_insert_default().phase = phase;
                    next.metadata.resource_version = None;
                    Ok(next)
                })
                .await;
            let Some(updated) = ignore_gone(updated)? else {
                return Ok(0);
            };
            tracing::info!(claim = %claim, pool, phase = %phase, "IngressPool phase written");
            Ok(written(updated.metadata.resource_version.as_ref()))
        }
        Action::Status { claim, status } => {
            let updated = registry
                .update::<IngressClaim>(
                    Some(&claim.namespace),
                    &claim.name,
                    Scope::Status,
                    false,
                    |current| {
                        let mut next = current.clone();
                        next.status = Some(status.clone());
                        next.metadata.resource_version = None;
                        Ok(next)
                    },
                )
                .await?;
            Ok(written(updated.metadata.resource_version.as_ref()))
        }
        Action::Event {
            claim,
            type_,
            reason,
            message,
        } => {
            if let Some(object) = cache.claims.get(&claim) {
                writers
                    .recorder
                    .record(object, type_, reason, &message, now)
                    .await;
            }
            Ok(0)
        }
        Action::Finalize { claim } => {
            let updated = registry
                .update::<IngressClaim>(
                    Some(&claim.namespace),
                    &claim.name,
                    Scope::Main,
                    false,
                    |current| {
                        let mut next = current.clone();
                        next.metadata.finalizers.retain(|f| f != FINALIZER);
                        next.metadata.resource_version = None;
                        Ok(next)
                    },
                )
                .await;
            if ignore_gone(updated)?.is_some() {
                tracing::info!(claim = %claim, "claim reclaimed: finalizer removed");
            }
            Ok(0)
        }
    }
}

/// An object that is already gone is what the controller wanted.
fn ignore_gone<T>(result: Result<T, ApiError>) -> Result<Option<T>, ApiError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.code == StatusCode::NOT_FOUND => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::cluster::{ClusterStatus, MemberStatus};
    use fedingress_api::ingress::ClusterIngressStatus;
    use fedingress_api::pool::IngressPoolStatus;
    use fedingress_api::{FederatedIngressStatus, Resource};

    fn now() -> Time {
        Time(chrono::Utc::now())
    }

    fn key(name: &str) -> IngressKey {
        IngressKey::new("shop", name)
    }

    fn cluster(name: &str, driver: Option<AgentDriver>) -> Cluster {
        let mut cluster = Cluster {
            metadata: ObjectMeta::named(name),
            ..Cluster::default()
        };
        cluster.status = driver.map(|d| ClusterStatus {
            driver: Some(d),
            ..ClusterStatus::default()
        });
        cluster
    }

    fn ingress(name: &str, clusters: &[&str]) -> FederatedIngress {
        FederatedIngress {
            metadata: ObjectMeta::namespaced("shop", name),
            status: Some(FederatedIngressStatus {
                clusters: clusters
                    .iter()
                    .map(|c| ClusterIngressStatus {
                        name: (*c).to_owned(),
                        ..ClusterIngressStatus::default()
                    })
                    .collect(),
                ..FederatedIngressStatus::default()
            }),
            ..FederatedIngress::default()
        }
    }

    fn claim(name: &str, ingresses: &[&str], policy: ReclaimPolicy) -> IngressClaim {
        let mut claim = IngressClaim::new(
            "shop",
            name,
            claim::IngressClaimSpec {
                ingresses: ingresses.iter().map(|i| (*i).to_owned()).collect(),
                template: PoolTemplate {
                    member_labels: [("role".to_owned(), "edge".to_owned())].into(),
                    labels: [("tier".to_owned(), "gold".to_owned())].into(),
                    vip_cidr: Some("10.0.0.0/28".into()),
                    vip_count: Some(2),
                    capacity: Some(PoolCapacity {
                        rps: Some(100),
                        ..PoolCapacity::default()
                    }),
                    ..PoolTemplate::default()
                },
                reclaim_policy: policy,
            },
        );
        claim.apply_defaults();
        claim.metadata.uid = Some(format!("uid-{name}"));
        claim.metadata.generation = Some(1);
        claim.metadata.finalizers = vec![FINALIZER.to_owned()];
        claim
    }

    /// A free standalone pool of `cluster`, created at second `age`.
    fn pool(
        name: &str,
        cluster: &str,
        labels: &[(&str, &str)],
        rps: Option<i64>,
        age: i64,
    ) -> IngressPool {
        let mut pool = IngressPool::new(
            name,
            IngressPoolSpec {
                cluster: cluster.to_owned(),
                capacity: rps.map(|rps| PoolCapacity {
                    rps: Some(rps),
                    ..PoolCapacity::default()
                }),
                ..IngressPoolSpec::default()
            },
        );
        pool.metadata.labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        pool.metadata.uid = Some(format!("uid-{name}"));
        pool.metadata.resource_version = Some("7".into());
        pool.metadata.creation_timestamp = Some(Time(
            chrono::DateTime::from_timestamp(1_700_000_000 + age, 0).unwrap(),
        ));
        pool
    }

    struct Fixture {
        claims: BTreeMap<IngressKey, IngressClaim>,
        pools: BTreeMap<String, IngressPool>,
        clusters: BTreeMap<String, Cluster>,
        ingresses: BTreeMap<IngressKey, FederatedIngress>,
    }

    impl Fixture {
        fn new(
            clusters: Vec<Cluster>,
            ingresses: Vec<FederatedIngress>,
            claims: Vec<IngressClaim>,
        ) -> Self {
            Fixture {
                claims: claims.into_iter().map(|c| (key(c.name()), c)).collect(),
                pools: BTreeMap::new(),
                clusters: clusters
                    .into_iter()
                    .map(|c| (c.name().to_owned(), c))
                    .collect(),
                ingresses: ingresses
                    .into_iter()
                    .map(|i| (IngressKey::of(&i), i))
                    .collect(),
            }
        }

        fn add_pool(&mut self, pool: IngressPool) {
            self.pools.insert(pool.name().to_owned(), pool);
        }

        fn decide(&self) -> Vec<Action> {
            decide(&World {
                claims: &self.claims,
                pools: &self.pools,
                clusters: &self.clusters,
                ingresses: &self.ingresses,
                now: now(),
            })
        }

        /// Applies the actions as the store would (creates, binds, recycles, deletes,
        /// phases, statuses, finalizers) and returns the Events' reasons.
        fn apply(&mut self, actions: Vec<Action>) -> Vec<String> {
            let mut events = Vec::new();
            for action in actions {
                match action {
                    Action::Protect { claim } => self
                        .claims
                        .get_mut(&claim)
                        .unwrap()
                        .metadata
                        .finalizers
                        .push(FINALIZER.into()),
                    Action::Create { pool, .. } => self.add_pool(*pool),
                    Action::Bind {
                        pool, claim_ref, ..
                    } => {
                        self.pools.get_mut(&pool).unwrap().spec.claim_ref = Some(claim_ref);
                    }
                    Action::Recycle { pool, .. } => {
                        self.pools.get_mut(&pool).unwrap().spec.claim_ref = None;
                    }
                    Action::Delete { pool, .. } => {
                        self.pools.remove(&pool);
                    }
                    Action::PoolPhase { pool, phase, .. } => {
                        self.pools
                            .get_mut(&pool)
                            .unwrap()
                            .status
                            .get_or_insert_default()
                            .phase = phase;
                    }
                    Action::Status { claim, status } => {
                        self.claims.get_mut(&claim).unwrap().status = Some(status);
                    }
                    Action::Event { reason, .. } => events.push(reason.to_owned()),
                    Action::Finalize { claim } => {
                        self.claims.remove(&claim);
                    }
                }
            }
            events
        }

        fn status(&self, name: &str) -> IngressClaimStatus {
            self.claims[&key(name)].status.clone().unwrap_or_default()
        }
    }

    fn reasons(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Event { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_kubernetes_cluster_gets_a_provisioned_pool_once() {
        let mut unprotected = claim("web", &["web"], ReclaimPolicy::Delete);
        unprotected.metadata.finalizers.clear();
        let mut world = Fixture::new(
            vec![cluster("k8s", Some(AgentDriver::Kubernetes))],
            vec![ingress("web", &["k8s"])],
            vec![unprotected],
        );
        let actions = world.decide();
        assert_eq!(actions[0], Action::Protect { claim: key("web") });
        let Some(Action::Create { pool, .. }) = actions.get(1) else {
            panic!("{actions:#?}");
        };
        assert_eq!(pool.name(), "web-k8s");
        assert_eq!(pool.kind, "IngressPool");
        assert_eq!(pool.spec.cluster, "k8s");
        assert_eq!(
            pool.spec.claim_ref,
            Some(ClaimRef {
                namespace: "shop".into(),
                name: "web".into(),
                uid: "uid-web".into(),
            })
        );
        assert_eq!(
            pool.spec.member_selector.as_ref().unwrap().match_labels,
            BTreeMap::from([
                ("role".to_owned(), "edge".to_owned()),
                (POOL_LABEL.to_owned(), "web-k8s".to_owned()),
            ])
        );
        assert_eq!(pool.metadata.labels[PROVISIONED_BY], "shop.web");
        assert_eq!(pool.metadata.labels["tier"], "gold");
        assert_eq!(pool.spec.vip_cidr.as_deref(), Some("10.0.0.0/28"));
        assert_eq!(pool.spec.vip_count, Some(2));
        assert_eq!(pool.spec.capacity.unwrap().rps, Some(100));
        assert!(pool.validate().is_empty(), "{:?}", pool.validate());
        assert_eq!(reasons(&actions), ["Provisioned"]);
        assert_eq!(world.apply(actions), ["Provisioned"]);
        let status = world.status("web");
        assert_eq!(status.phase, ClaimPhase::Bound);
        assert_eq!(
            status.clusters,
            [ClaimedPool {
                cluster: "k8s".into(),
                pool: Some("web-k8s".into()),
                provisioned: true,
                message: "provisioned for the claim".into(),
            }]
        );
        let bound = &status.conditions[0];
        assert_eq!(
            (bound.type_.as_str(), bound.status),
            ("Bound", ConditionStatus::True)
        );
        // Nothing changes: nothing to do, no Event.
        assert_eq!(world.decide(), []);
    }

    #[test]
    fn a_kubernetes_member_makes_the_cluster_kubernetes() {
        let mut k8s = cluster("k8s", Some(AgentDriver::Standalone));
        k8s.status.as_mut().unwrap().members = vec![
            MemberStatus {
                name: "a".into(),
                driver: Some(AgentDriver::Standalone),
                ..MemberStatus::default()
            },
            MemberStatus {
                name: "b".into(),
                driver: Some(AgentDriver::Kubernetes),
                ..MemberStatus::default()
            },
        ];
        assert_eq!(driver(&k8s), Some(AgentDriver::Kubernetes));
        assert_eq!(driver(&cluster("x", None)), None);
        assert_eq!(
            driver(&cluster("x", Some(AgentDriver::Standalone))),
            Some(AgentDriver::Standalone)
        );
    }

    #[test]
    fn a_standalone_cluster_binds_the_oldest_free_pool_that_matches() {
        let mut world = Fixture::new(
            vec![cluster("std", Some(AgentDriver::Standalone))],
            vec![ingress("web", &["std"]), ingress("api", &["std"])],
            vec![
                claim("api", &["api"], ReclaimPolicy::Delete),
                claim("web", &["web"], ReclaimPolicy::Delete),
            ],
        );
        let gold = [("tier", "gold"), ("zone", "a")];
        world.add_pool(pool("a-silver", "std", &[("tier", "silver")], Some(500), 0));
        world.add_pool(pool("b-small", "std", &gold, Some(50), 1));
        world.add_pool(pool("c-unsized", "std", &gold, None, 2));
        let mut taken = pool("d-taken", "std", &gold, Some(500), 3);
        taken.spec.claim_ref = Some(ClaimRef {
            namespace: "other".into(),
            name: "x".into(),
            uid: String::new(),
        });
        world.add_pool(taken);
        let mut released = pool("e-released", "std", &gold, Some(500), 4);
        released.status = Some(IngressPoolStatus {
            phase: PoolPhase::Released,
            ..IngressPoolStatus::default()
        });
        world.add_pool(released);
        world.add_pool(pool("z-oldest", "std", &gold, Some(100), 5));
        world.add_pool(pool("f-newer", "std", &gold, Some(1000), 6));
        world.add_pool(pool("g-other-cluster", "eu", &gold, Some(1000), -1));
        let actions = world.decide();
        let binds: Vec<(&str, &str, &str)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Bind {
                    claim,
                    pool,
                    resource_version,
                    ..
                } => Some((
                    claim.name.as_str(),
                    pool.as_str(),
                    resource_version.as_str(),
                )),
                _ => None,
            })
            .collect();
        // Claims in name order; the oldest matching pool first, each pool once.
        assert_eq!(binds, [("api", "z-oldest", "7"), ("web", "f-newer", "7")]);
        assert_eq!(world.apply(actions), ["Bound", "Bound"]);
        let status = world.status("web");
        assert_eq!(status.phase, ClaimPhase::Bound);
        assert_eq!(status.clusters[0].pool.as_deref(), Some("f-newer"));
        assert!(!status.clusters[0].provisioned);
        assert_eq!(world.decide(), []);
    }

    #[test]
    fn a_cluster_without_a_free_pool_or_an_agent_stays_pending_with_the_reason() {
        let mut world = Fixture::new(
            vec![
                cluster("std", Some(AgentDriver::Standalone)),
                cluster("new", None),
            ],
            vec![ingress("web", &["std", "new"])],
            vec![claim("web", &["web"], ReclaimPolicy::Delete)],
        );
        world.add_pool(pool("silver", "std", &[("tier", "silver")], Some(500), 0));
        let actions = world.decide();
        assert_eq!(reasons(&actions), ["Pending", "Pending"]);
        let types: Vec<&str> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Event { type_, .. } => Some(*type_),
                _ => None,
            })
            .collect();
        assert_eq!(types, ["Normal", "Warning"]);
        world.apply(actions);
        let status = world.status("web");
        assert_eq!(status.phase, ClaimPhase::Pending);
        let messages: Vec<(&str, &str)> = status
            .clusters
            .iter()
            .map(|e| (e.cluster.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            messages,
            [
                ("new", "cluster new has no agent yet"),
                (
                    "std",
                    "no free IngressPool of cluster std has labels {tier=gold} and at least the capacity {rps=100}"
                ),
            ]
        );
        let bound = &status.conditions[0];
        assert_eq!(bound.status, ConditionStatus::False);
        assert_eq!(bound.reason, "Pending");
        assert!(
            bound
                .message
                .starts_with("2 of 2 placed clusters have no pool: ")
        );
        // The same reasons again: no Event, no write.
        assert_eq!(world.decide(), []);
        // A matching pool appears: bound.
        world.add_pool(pool("gold", "std", &[("tier", "gold")], Some(100), 1));
        let actions = world.decide();
        assert_eq!(reasons(&actions), ["Bound"]);
    }

    #[test]
    fn a_claim_without_placed_ingresses_is_pending_not_released() {
        let mut world = Fixture::new(
            vec![cluster("k8s", Some(AgentDriver::Kubernetes))],
            vec![],
            vec![claim("web", &["web", "api"], ReclaimPolicy::Delete)],
        );
        assert_eq!(world.apply(world.decide()), ["Pending"]);
        let status = world.status("web");
        assert_eq!(status.phase, ClaimPhase::Pending);
        assert_eq!(
            status.conditions[0].message,
            "none of the named FederatedIngresses exists (web, api)"
        );
        assert_eq!(world.decide(), []);
    }

    /// A claim bound to a provisioned pool on `k8s` and a free pool it bound on `std`.
    fn bound_world(policy: ReclaimPolicy) -> Fixture {
        let mut world = Fixture::new(
            vec![
                cluster("k8s", Some(AgentDriver::Kubernetes)),
                cluster("std", Some(AgentDriver::Standalone)),
            ],
            vec![ingress("web", &["k8s", "std"])],
            vec![claim("web", &["web"], policy)],
        );
        world.add_pool(pool("gold", "std", &[("tier", "gold")], Some(100), 0));
        let events = world.apply(world.decide());
        assert_eq!(events, ["Provisioned", "Bound"]);
        assert_eq!(world.status("web").phase, ClaimPhase::Bound);
        world
    }

    fn pool_actions(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { pool, .. } => Some(format!("delete {pool}")),
                Action::Recycle { pool, .. } => Some(format!("recycle {pool}")),
                Action::PoolPhase { pool, phase, .. } => Some(format!("{phase} {pool}")),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn delete_deletes_what_the_claim_provisioned_and_recycles_what_it_bound() {
        let mut world = bound_world(ReclaimPolicy::Delete);
        world.ingresses.clear();
        let actions = world.decide();
        assert_eq!(pool_actions(&actions), ["recycle gold", "delete web-k8s"]);
        assert_eq!(world.apply(actions), ["Released"]);
        assert!(!world.pools.contains_key("web-k8s"));
        assert_eq!(world.pools["gold"].spec.claim_ref, None);
        let status = world.status("web");
        assert_eq!(status.phase, ClaimPhase::Released);
        let messages: Vec<&str> = status.clusters.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "deleted (reclaimPolicy Delete)",
                "recycled: claimRef cleared (reclaimPolicy Delete recycles a pool the claim did not provision)",
            ]
        );
        assert_eq!(status.conditions[0].reason, "Released");
        // Released stays so, quietly.
        assert_eq!(world.decide(), []);
        // The ingress comes back: a new pool is provisioned, the recycled one bound again.
        world
            .ingresses
            .insert(key("web"), ingress("web", &["k8s", "std"]));
        assert_eq!(world.apply(world.decide()), ["Provisioned", "Bound"]);
        assert_eq!(world.status("web").phase, ClaimPhase::Bound);
        assert_eq!(world.decide(), []);
    }

    #[test]
    fn recycle_clears_every_claim_ref() {
        let mut world = bound_world(ReclaimPolicy::Recycle);
        world.ingresses.clear();
        let actions = world.decide();
        assert_eq!(pool_actions(&actions), ["recycle gold", "recycle web-k8s"]);
        let Some(Action::Recycle {
            resource_version, ..
        }) = actions.iter().find(|a| matches!(a, Action::Recycle { .. }))
        else {
            unreachable!()
        };
        assert_eq!(resource_version, "7", "only the pool as it was found");
        assert_eq!(world.apply(actions), ["Released"]);
        assert!(world.pools.values().all(|p| p.spec.claim_ref.is_none()));
        assert_eq!(world.status("web").phase, ClaimPhase::Released);
        assert_eq!(world.decide(), []);
    }

    #[test]
    fn retain_keeps_the_claim_ref_and_releases_the_pools() {
        let mut world = bound_world(ReclaimPolicy::Retain);
        world.ingresses.clear();
        let actions = world.decide();
        assert_eq!(
            pool_actions(&actions),
            ["Released gold", "Released web-k8s"]
        );
        assert_eq!(world.apply(actions), ["Released"]);
        assert!(world.pools.values().all(|p| p.spec.claim_ref.is_some()));
        assert_eq!(world.status("web").phase, ClaimPhase::Released);
        assert_eq!(world.decide(), []);
        // The ingress comes back: the claim binds its retained pools again.
        world
            .ingresses
            .insert(key("web"), ingress("web", &["k8s", "std"]));
        let actions = world.decide();
        assert_eq!(pool_actions(&actions), ["Bound web-k8s", "Bound gold"]);
        world.apply(actions);
        assert_eq!(world.status("web").phase, ClaimPhase::Bound);
    }

    #[test]
    fn a_deleted_claim_is_reclaimed_then_finalized() {
        let mut world = bound_world(ReclaimPolicy::Delete);
        let claim = world.claims.get_mut(&key("web")).unwrap();
        claim.metadata.deletion_timestamp = Some(now());
        let actions = world.decide();
        assert!(!actions.iter().any(|a| matches!(a, Action::Protect { .. })));
        assert_eq!(pool_actions(&actions), ["recycle gold", "delete web-k8s"]);
        assert_eq!(
            actions.last(),
            Some(&Action::Finalize { claim: key("web") })
        );
        assert_eq!(world.apply(actions), ["Released", "Deleted"]);
        assert!(world.claims.is_empty());
        assert_eq!(world.pools.len(), 1);
    }

    #[test]
    fn pools_of_another_claim_or_an_earlier_claim_of_the_same_name_are_not_its_own() {
        let mut world = Fixture::new(
            vec![cluster("k8s", Some(AgentDriver::Kubernetes))],
            vec![ingress("web", &["k8s"])],
            vec![claim("web", &["web"], ReclaimPolicy::Delete)],
        );
        // Retained by a claim `web` deleted before this one was created.
        let mut retained = pool("web-k8s", "k8s", &[], None, 0);
        retained.spec.claim_ref = Some(ClaimRef {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "uid-earlier".into(),
        });
        world.add_pool(retained);
        let actions = world.decide();
        let Some(Action::Create { pool, .. }) =
            actions.iter().find(|a| matches!(a, Action::Create { .. }))
        else {
            panic!("{actions:#?}");
        };
        let hash = &hex::encode(Sha256::digest(b"uid-web"))[..5];
        assert_eq!(pool.name(), format!("web-k8s-{hash}"));
        world.apply(actions);
        assert_eq!(world.decide(), []);
        // Its ingress gone, only its own pool is reclaimed.
        world.ingresses.clear();
        let actions = world.decide();
        assert_eq!(pool_actions(&actions), [format!("delete web-k8s-{hash}")]);
    }

    #[test]
    fn names_and_label_values_stay_within_63_characters() {
        let long = "a".repeat(60);
        let key = IngressKey::new("shop", format!("{long}.v2"));
        let name = pool_name(&key, "eu-west", "u", &BTreeMap::new(), &BTreeSet::new());
        assert_eq!(name.len(), 63, "{name}");
        assert!(
            fedingress_api::names::dns1123_label(&name).is_empty(),
            "{name}"
        );
        let value = provisioned_by(&key);
        assert!(value.len() <= 63);
        assert!(
            fedingress_api::names::label_value(&value).is_empty(),
            "{value}"
        );
        assert_ne!(
            provisioned_by(&IngressKey::new("shop", format!("{long}.v3"))),
            value
        );
        assert_eq!(provisioned_by(&IngressKey::new("shop", "web")), "shop.web");
    }

    /// A registry on a fresh redb store holding a kubernetes cluster, an ingress placed
    /// on it and a claim for it, written straight to the store (statuses included).
    async fn stored_world(dir: &std::path::Path) -> Registry {
        use fedingress_apiserver::registry::prefix;
        use fedingress_store::{Precondition, RedbStore};
        async fn put<R: Resource>(registry: &Registry, namespace: Option<&str>, object: &R) {
            let name = object.metadata().name.clone().unwrap();
            registry
                .store()
                .put(
                    &format!("{}{name}", prefix::<R>(namespace)),
                    serde_json::to_vec(object).unwrap().into(),
                    Precondition::Absent,
                )
                .await
                .unwrap();
        }
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&dir.join("db"), Default::default()).unwrap());
        let registry = Registry::new(store);
        fedingress_apiserver::registry::namespaces::ensure(&registry, "shop", now())
            .await
            .unwrap();
        put(
            &registry,
            None,
            &cluster("k8s", Some(AgentDriver::Kubernetes)),
        )
        .await;
        put(&registry, Some("shop"), &ingress("web", &["k8s"])).await;
        let mut claim = claim("web", &["web"], ReclaimPolicy::Delete);
        claim.metadata.finalizers.clear();
        put(&registry, Some("shop"), &claim).await;
        registry
    }

    #[tokio::test]
    async fn only_the_leader_writes() {
        let dir = tempfile::tempdir().unwrap();
        let registry = stored_world(dir.path()).await;
        let (role, receiver) = watch::channel(Role::Follower);
        let task = tokio::spawn(ClaimController::new(registry.clone(), receiver).run());
        // A follower: nothing is written (it would have been within this long).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let claim = registry
            .get::<IngressClaim>(Some("shop"), "web")
            .await
            .unwrap();
        assert!(claim.metadata.finalizers.is_empty());
        assert!(claim.status.is_none());
        let pool = registry.get::<IngressPool>(None, "web-k8s").await;
        assert_eq!(pool.unwrap_err().code, StatusCode::NOT_FOUND);
        // Leading: the pool is provisioned, the claim protected and Bound.
        role.send(Role::Leader(registry.store().clone())).unwrap();
        fedingress_testsupport::eventually_async(
            Duration::from_secs(10),
            "the leader provisions and protects",
            || async {
                let claim = registry
                    .get::<IngressClaim>(Some("shop"), "web")
                    .await
                    .map_err(|e| e.message)?;
                let pool = registry
                    .get::<IngressPool>(None, "web-k8s")
                    .await
                    .map_err(|e| e.message)?;
                let bound = claim.status.as_ref().map(|s| s.phase) == Some(ClaimPhase::Bound);
                let managed = pool
                    .metadata
                    .managed_fields
                    .iter()
                    .any(|f| f.manager.as_deref() == Some(CLAIMS_MANAGER));
                (claim.metadata.finalizers == [FINALIZER] && bound && managed)
                    .then_some(())
                    .ok_or(format!("{claim:?}"))
            },
        )
        .await;
        task.abort();
    }
}
