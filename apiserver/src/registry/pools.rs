//! Pool admission: the checks on an IngressPool or a Cluster's `vipCIDR` that need the
//! other objects in the store, run on every write of the main resource (create, update,
//! patch, server-side apply; the hub's own writes too) after validation. The rules are
//! `fedingress_api::pool`'s ([`conflicts`]); this module only gathers what they read.
//!
//! - An IngressPool's `spec.cluster` never changes (`field is immutable`, as kube says
//!   it).
//! - An IngressPool may not conflict with the other pools of its cluster or with the
//!   Cluster's `spec.vipCIDR`: an explicit `vipCIDR` overlapping another pool's or the
//!   cluster's, a wanted VIP another pool wants or holds, a `virtualRouterId` another
//!   pool uses. A pool whose Cluster does not exist yet is admitted against the other
//!   pools alone (a PersistentVolume may name a node that is not there yet either).
//! - A Cluster's `spec.vipCIDR` may not overlap the explicit `vipCIDR` of one of its
//!   pools.
//!
//! Each refusal is a 422 Invalid with the field path. An update is refused only for a
//! conflict the stored object did not already have, so an object that conflicts (two
//! writes that raced, each admitted before the other was stored) can still lose its
//! finalizers or labels; the VIP allocator refuses to hand out a held address either way.
//!
//! # Assumptions
//! The store has no transactions across keys: two pools written at the same moment are
//! each checked against what the store held before both. Status writes are not checked
//! (the hub writes what it allocated).

use std::any::Any;

use fedingress_api::pool::conflicts;
use fedingress_api::{Cluster, FieldError, FieldPath, IngressPool, Resource};
use http::StatusCode;

use super::{Filter, Registry};
use crate::status::ApiError;

/// Checks `new` (replacing `current` on update) against the store; kinds other than
/// IngressPool and Cluster pass.
///
/// # Errors
/// 422 Invalid with every new conflict's field path; a store error as the registry
/// reports it.
pub async fn admit<R: Resource>(
    registry: &Registry,
    current: Option<&R>,
    new: &R,
) -> Result<(), ApiError> {
    let any = new as &dyn Any;
    let old = current.map(|c| c as &dyn Any);
    let errors = if let Some(pool) = any.downcast_ref::<IngressPool>() {
        let old = old.and_then(|o| o.downcast_ref::<IngressPool>());
        admit_pool(registry, old, pool).await?
    } else if let Some(cluster) = any.downcast_ref::<Cluster>() {
        let old = old.and_then(|o| o.downcast_ref::<Cluster>());
        admit_cluster(registry, old, cluster).await?
    } else {
        return Ok(());
    };
    if errors.is_empty() {
        return Ok(());
    }
    let name = new.metadata().name_str();
    tracing::debug!(
        kind = R::KIND,
        name,
        errors = errors.len(),
        "write refused by pool admission"
    );
    Err(ApiError::invalid(R::KIND, R::GROUP, name, &errors))
}

/// Every stored IngressPool of `cluster`.
async fn pools_of(registry: &Registry, cluster: &str) -> Result<Vec<IngressPool>, ApiError> {
    let page = registry
        .list::<IngressPool>(None, &Filter::default(), 0, None)
        .await?;
    Ok(page
        .items
        .into_iter()
        .filter(|p| p.spec.cluster == cluster)
        .collect())
}

async fn admit_pool(
    registry: &Registry,
    current: Option<&IngressPool>,
    pool: &IngressPool,
) -> Result<Vec<FieldError>, ApiError> {
    if let Some(current) = current
        && current.spec.cluster != pool.spec.cluster
    {
        return Ok(vec![FieldError::invalid(
            FieldPath::new("spec").child("cluster"),
            &pool.spec.cluster,
            "field is immutable",
        )]);
    }
    let cidr = match registry.get::<Cluster>(None, &pool.spec.cluster).await {
        Ok(cluster) => cluster.spec.vip_cidr,
        Err(e) if e.code == StatusCode::NOT_FOUND => None,
        Err(e) => return Err(e),
    };
    let pools = pools_of(registry, &pool.spec.cluster).await?;
    let others: Vec<&IngressPool> = pools.iter().collect();
    let found = conflicts(pool, cidr.as_deref(), &others);
    let had: Vec<String> = current
        .map(|c| conflicts(c, cidr.as_deref(), &others))
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
    Ok(found
        .into_iter()
        .filter(|e| !had.contains(&e.to_string()))
        .collect())
}

async fn admit_cluster(
    registry: &Registry,
    current: Option<&Cluster>,
    cluster: &Cluster,
) -> Result<Vec<FieldError>, ApiError> {
    let Some(cidr) = cluster.spec.vip_cidr.as_deref() else {
        return Ok(Vec::new());
    };
    if current.is_some_and(|c| c.spec.vip_cidr.as_deref() == Some(cidr)) {
        return Ok(Vec::new());
    }
    let pools = pools_of(registry, cluster.metadata.name_str()).await?;
    // Against no other pool, a pool's only possible conflict is its own vipCIDR
    // overlapping the cluster's.
    Ok(pools
        .iter()
        .filter(|pool| !conflicts(pool, Some(cidr), &[]).is_empty())
        .map(|pool| {
            FieldError::invalid(
                FieldPath::new("spec").child("vipCIDR"),
                cidr,
                format!(
                    "overlaps the vipCIDR of IngressPool {:?} ({}): a pool's own CIDR must lie outside its cluster's",
                    pool.name(),
                    pool.spec.vip_cidr.as_deref().unwrap_or_default()
                ),
            )
        })
        .collect())
}
