//! The agent protocol's domain types: the plan the hub pushes to one cluster's agent
//! (its share of every FederatedIngress placed there), deltas between plans, and the
//! reports agents send back. Generated protobuf types convert to and from these in
//! `fedingress-proto` and nowhere else.
//!
//! [`cluster_plans`] builds every cluster's plan from the placements
//! ([`crate::placement`]) and the conflicts between them ([`crate::conflict`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::cluster::Address;
use crate::conflict::{Conflict, PlacedIngress};
use crate::ingress::{ClusterOverride, FederatedIngress, IngressRule, IngressTls};

/// Identifies a FederatedIngress.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IngressKey {
    pub namespace: String,
    pub name: String,
}

impl IngressKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of `ingress` (empty namespace or name when unset).
    pub fn of(ingress: &FederatedIngress) -> Self {
        Self::new(
            ingress.metadata.namespace_str(),
            ingress.metadata.name_str(),
        )
    }
}

impl std::fmt::Display for IngressKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

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
}

impl IngressShare {
    /// The share of `ingress` that `cluster` serves: every rule and certificate, and the
    /// override whose `cluster` is `cluster` (the first, should there be several).
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
                .cloned(),
        }
    }
}

/// Everything one cluster's agent serves. Serialises as a list of shares in key order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "Vec<IngressShare>", from = "Vec<IngressShare>")]
pub struct ClusterPlan {
    pub ingresses: BTreeMap<IngressKey, IngressShare>,
}

impl From<Vec<IngressShare>> for ClusterPlan {
    fn from(shares: Vec<IngressShare>) -> Self {
        Self {
            ingresses: shares.into_iter().map(|s| (s.key.clone(), s)).collect(),
        }
    }
}

impl From<ClusterPlan> for Vec<IngressShare> {
    fn from(plan: ClusterPlan) -> Self {
        plan.ingresses.into_values().collect()
    }
}

/// The change from one plan to the next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanDelta {
    pub upserts: Vec<IngressShare>,
    pub deletes: Vec<IngressKey>,
}

impl PlanDelta {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.deletes.is_empty()
    }
}

impl ClusterPlan {
    /// A content digest (FNV-1a 64 over the canonical JSON, hex): equal plans have equal
    /// digests, on any machine and across restarts.
    pub fn digest(&self) -> String {
        let shares: Vec<&IngressShare> = self.ingresses.values().collect();
        let json = serde_json::to_vec(&shares).unwrap_or_default();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in json {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{hash:016x}")
    }

    /// What turns `self` into `next`.
    pub fn delta_to(&self, next: &ClusterPlan) -> PlanDelta {
        let upserts = next
            .ingresses
            .iter()
            .filter(|(key, share)| self.ingresses.get(*key) != Some(*share))
            .map(|(_, share)| share.clone())
            .collect();
        let deletes = self
            .ingresses
            .keys()
            .filter(|key| !next.ingresses.contains_key(*key))
            .cloned()
            .collect();
        PlanDelta { upserts, deletes }
    }

    /// Applies a delta in place.
    pub fn apply(&mut self, delta: &PlanDelta) {
        for key in &delta.deletes {
            self.ingresses.remove(key);
        }
        for share in &delta.upserts {
            self.ingresses.insert(share.key.clone(), share.clone());
        }
    }
}

/// Every cluster's plan: for each cluster named in any placement, a share of each
/// ingress placed there that has no conflict there (neither on that cluster nor
/// everywhere). A cluster left with no shares still gets an (empty) plan, so its agent
/// is told to serve nothing.
///
/// # Assumptions
///
/// `conflicts` come from [`crate::conflict::find_conflicts`] over the same `placed`.
/// Objects being deleted are not left out here: the caller decides what to pass.
pub fn cluster_plans(
    placed: &[PlacedIngress],
    conflicts: &[Conflict],
) -> BTreeMap<String, ClusterPlan> {
    let mut plans: BTreeMap<String, ClusterPlan> = BTreeMap::new();
    for entry in placed {
        let key = IngressKey::of(entry.ingress);
        for cluster in &entry.clusters {
            let plan = plans.entry(cluster.clone()).or_default();
            let lost = conflicts
                .iter()
                .any(|c| c.loser == key && c.applies_to(cluster));
            if !lost {
                let share = IngressShare::of(entry.ingress, cluster);
                plan.ingresses.insert(share.key.clone(), share);
            }
        }
    }
    plans
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
}

/// An agent's report: per share, plus the cluster's addresses and load.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    pub ingresses: Vec<IngressReport>,
    pub addresses: Vec<Address>,
    pub requests_per_second: f64,
    pub active_connections: u64,
}

impl AgentReport {
    /// IP addresses among the reported ones.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().filter_map(|a| a.ip)
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
        }
    }

    fn plan(shares: &[IngressShare]) -> ClusterPlan {
        ClusterPlan {
            ingresses: shares.iter().map(|s| (s.key.clone(), s.clone())).collect(),
        }
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
