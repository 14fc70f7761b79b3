//! The `IngressClaim` resource (namespaced): a request for an ingress pool in every
//! cluster where some FederatedIngresses are placed, the way a PersistentVolumeClaim asks
//! for a volume. The claim controller (in the hub) provisions a pool from the template
//! (kubernetes clusters: the agent runs it as a workload) or binds a free pool that
//! matches (standalone clusters), and applies the reclaim policy once every named
//! ingress is gone. See `docs/pools.md`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, ObjectMeta, string_enum, validate_object_meta};
use crate::names;
use crate::pool::{MAX_VIP_COUNT, PoolCapacity, validate_cidr};
use crate::selector::LabelSelector;
use crate::validation::{FieldError, FieldPath};
use crate::{API_VERSION, Resource};

/// Members a provisioned pool runs when `replicas` is not set, and the fewest allowed
/// (VRRP needs a second host to fail over to).
pub const MIN_REPLICAS: i32 = 2;
/// The most members a claim may ask for.
pub const MAX_REPLICAS: i32 = 64;

/// Condition type: every placed cluster has a pool bound to the claim.
pub const CONDITION_BOUND: &str = "Bound";

/// A request for a pool in each cluster where the named FederatedIngresses are placed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressClaim {
    /// `fedingress.io/v1alpha1`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,

    /// `IngressClaim`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,

    /// Which ingresses, what pool, and what happens to it afterwards.
    #[serde(default)]
    pub spec: IngressClaimSpec,

    /// What the claim controller did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<IngressClaimStatus>,
}

/// What an IngressClaim asks for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressClaimSpec {
    /// Names of FederatedIngresses in the claim's namespace. Required (at least one). The
    /// claim provisions or binds a pool in every cluster where one of them is placed,
    /// and their shares there are bound to that pool.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub ingresses: Vec<String>,

    /// The pool to provision or bind.
    #[serde(default)]
    pub template: PoolTemplate,

    /// What happens to the pools once every named ingress is gone: `Delete` (default:
    /// provisioned pools and their workloads are deleted, bound ones released like
    /// `Recycle`), `Retain` (kept, `Released`, bound to no new claim) or `Recycle` (kept
    /// and `Available` to the next claim).
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,
}

string_enum! {
    /// What happens to a claim's pools once its ingresses are gone.
    #[derive(Default)]
    pub enum ReclaimPolicy {
        /// Keep the pool; it is `Released` and bound to no new claim.
        Retain => "Retain",
        /// Keep the pool and make it `Available` again.
        Recycle => "Recycle",
        /// Delete what the claim provisioned (a bound pool it did not provision is
        /// recycled instead).
        #[default]
        Delete => "Delete",
    }
}

/// The pool a claim provisions (or the pool it may bind).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolTemplate {
    /// Members to run (kubernetes clusters), at least 2; default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Labels the provisioned members carry (`member.labels`); the pool selects them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub member_labels: BTreeMap<String, String>,

    /// Labels of the pool itself (what `poolSelector` matches). A free pool is bound only
    /// when its labels include all of these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Compute resources of each provisioned member's data plane container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// VIPs wanted (1-16, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip_count: Option<i32>,

    /// The CIDR to allocate from; absent: the Cluster's `spec.vipCIDR`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "vipCIDR")]
    pub vip_cidr: Option<String>,

    /// The provisioned pool's capacity; a free pool binds only with at least this much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<PoolCapacity>,
}

/// Requests and limits as Kubernetes quantities (`500m`, `256Mi`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

string_enum! {
    /// Where a claim stands.
    #[derive(Default)]
    pub enum ClaimPhase {
        /// Some placed cluster has no pool for it yet (`status.clusters` says why).
        #[default]
        Pending => "Pending",
        /// Every placed cluster has a pool bound to it.
        Bound => "Bound",
        /// Every named ingress is gone; the reclaim policy was applied.
        Released => "Released",
    }
}

/// What the claim controller did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressClaimStatus {
    #[serde(default)]
    pub phase: ClaimPhase,

    /// Per placed cluster: the pool, and whether the claim provisioned it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["cluster"]))]
    pub clusters: Vec<ClaimedPool>,

    /// `Bound`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A claim's pool in one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedPool {
    pub cluster: String,
    /// The IngressPool's name; absent while Pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The claim created the pool (and, on kubernetes clusters, its workload).
    #[serde(default)]
    pub provisioned: bool,
    /// Why it is pending, or how it was bound, for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl IngressClaim {
    /// `replicas`, defaulted.
    pub fn replicas(&self) -> i32 {
        self.spec.template.replicas.unwrap_or(MIN_REPLICAS)
    }

    /// The name, or `""` when unset.
    pub fn name(&self) -> &str {
        self.metadata.name_str()
    }

    /// A claim named `name` in `namespace` with `apiVersion` and `kind` set.
    pub fn new(namespace: &str, name: &str, spec: IngressClaimSpec) -> Self {
        let mut metadata = ObjectMeta::named(name);
        metadata.namespace = Some(namespace.to_owned());
        IngressClaim {
            api_version: API_VERSION.to_owned(),
            kind: <IngressClaim as Resource>::KIND.to_owned(),
            metadata,
            spec,
            status: None,
        }
    }
}

impl IngressClaimSpec {
    /// Validates the spec at `path` (usually `spec`).
    pub fn validate(&self, path: &FieldPath) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.ingresses.is_empty() {
            errs.push(FieldError::required(
                path.child("ingresses"),
                "at least one FederatedIngress name",
            ));
        }
        for (i, name) in self.ingresses.iter().enumerate() {
            for msg in names::dns1123_subdomain(name) {
                errs.push(FieldError::invalid(
                    path.child("ingresses").index(i),
                    name,
                    msg,
                ));
            }
        }
        let at = path.child("template");
        let t = &self.template;
        if let Some(replicas) = t.replicas
            && !(MIN_REPLICAS..=MAX_REPLICAS).contains(&replicas)
        {
            errs.push(FieldError::invalid(
                at.child("replicas"),
                replicas,
                format!(
                    "must be between {MIN_REPLICAS} and {MAX_REPLICAS}: VRRP needs a second host"
                ),
            ));
        }
        for (field, labels) in [("memberLabels", &t.member_labels), ("labels", &t.labels)] {
            let at = at.child(field);
            for (key, value) in labels {
                for msg in names::qualified_name(key) {
                    errs.push(FieldError::invalid(at.clone(), key, msg));
                }
                for msg in names::label_value(value) {
                    errs.push(FieldError::invalid(at.key(key), value, msg));
                }
            }
        }
        let count = t.vip_count.unwrap_or(1);
        if !(1..=MAX_VIP_COUNT).contains(&count) {
            errs.push(FieldError::invalid(
                at.child("vipCount"),
                count,
                format!("must be between 1 and {MAX_VIP_COUNT}"),
            ));
        }
        if let Some(cidr) = &t.vip_cidr {
            let count = usize::try_from(count.clamp(1, MAX_VIP_COUNT)).unwrap_or(1);
            errs.extend(validate_cidr(cidr, count, &at.child("vipCIDR")));
        }
        if let Some(capacity) = &t.capacity {
            errs.extend(capacity.validate(&at.child("capacity")));
        }
        errs
    }
}

/// A selector for the free pools a claim may bind: the template's pool labels.
pub fn pool_selector(template: &PoolTemplate) -> LabelSelector {
    LabelSelector::from_labels(template.labels.clone())
}

impl Resource for IngressClaim {
    const KIND: &'static str = "IngressClaim";
    const LIST_KIND: &'static str = "IngressClaimList";
    const PLURAL: &'static str = "ingressclaims";
    const SINGULAR: &'static str = "ingressclaim";
    const SHORT_NAMES: &'static [&'static str] = &["iclaim"];
    const NAMESPACED: bool = true;

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

    /// `replicas` 2 and `vipCount` 1 when unset.
    fn apply_defaults(&mut self) {
        self.spec.template.replicas.get_or_insert(MIN_REPLICAS);
        self.spec.template.vip_count.get_or_insert(1);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = validate_object_meta(
            &self.metadata,
            Self::NAMESPACED,
            names::dns1123_subdomain,
            &FieldPath::new("metadata"),
        );
        errs.extend(self.spec.validate(&FieldPath::new("spec")));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_defaults_round_trips_and_refuses_bad_input_with_field_paths() {
        let mut claim: IngressClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "IngressClaim",
            "metadata": {"name": "shop", "namespace": "default"},
            "spec": {
                "ingresses": ["web", "api"],
                "template": {"memberLabels": {"pool": "shop"}, "labels": {"tier": "gold"},
                             "resources": {"requests": {"cpu": "500m"}}},
                "reclaimPolicy": "recycle",
            },
        }))
        .unwrap();
        claim.apply_defaults();
        assert_eq!(claim.replicas(), 2);
        assert_eq!(claim.spec.reclaim_policy, ReclaimPolicy::Recycle);
        assert!(claim.validate().is_empty(), "{:?}", claim.validate());
        let json = serde_json::to_value(&claim).unwrap();
        assert_eq!(json["spec"]["reclaimPolicy"], "Recycle");

        claim.spec.ingresses.clear();
        claim.spec.template.replicas = Some(1);
        claim.spec.template.vip_cidr = Some("10.0.0.0/31".into());
        claim.spec.template.vip_count = Some(3);
        let errs: Vec<String> = claim.validate().iter().map(ToString::to_string).collect();
        for want in [
            "spec.ingresses: Required value",
            "spec.template.replicas: Invalid value",
            "spec.template.vipCIDR: Invalid value",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "{want} in {errs:#?}"
            );
        }
    }
}
