//! Placement: which member clusters carry a FederatedIngress.
//!
//! [`place`] is a pure function of the ingress's `spec.placement`, the registered
//! [`Cluster`]s and the clusters the ingress is placed on now (the hub remembers them in
//! status). It returns the clusters chosen ([`Placed::clusters`]) and, for every other
//! cluster it considered, why not ([`Placed::reasons`]), so that `fedctl explain` and the
//! `Placed` condition can say it in words.
//!
//! Rules (docs/design.md, "Semantics every part shares"):
//!
//! - Candidates are the clusters named in `placement.clusters` plus those whose labels
//!   match `placement.clusterSelector`. When the placement names neither, every cluster is
//!   a candidate. A name in `placement.clusters` with no registered Cluster is never
//!   placed.
//! - Placement is sticky: a cluster the ingress is on now that is still a candidate stays,
//!   whatever its health or connection, even when cordoned (cordon stops new placement;
//!   listeners already applied keep serving). Routing, not placement, reacts to health.
//! - A cordoned (`spec.unschedulable`) cluster is never newly placed.
//! - Without `maxClusters`, every non-cordoned candidate is placed, connected or not (its
//!   agent gets its share when it connects).
//! - With `maxClusters: N`, the sticky clusters are kept first (when more than N remain:
//!   connected ones first, then spread across regions, then by name), then the rest is
//!   filled from connected, non-cordoned candidates, preferring a region not used yet,
//!   ties by name. Disconnected clusters are not newly chosen under `maxClusters`.
//!
//! The output does not depend on the order of the inputs.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::Cluster;
use crate::ingress::FederatedIngress;

/// Reason: the cluster is cordoned (`spec.unschedulable`) and the ingress is not on it yet.
pub const REASON_CORDONED: &str = "cordoned";
/// Reason: under `maxClusters`, only connected clusters are newly chosen.
pub const REASON_NOT_CONNECTED: &str = "not connected";
/// Reason: `placement.clusters` names a cluster that is not registered.
pub const REASON_NO_SUCH_CLUSTER: &str = "no such cluster";

/// The outcome of [`place`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// The chosen clusters, sorted by name.
    pub clusters: Vec<String>,
    /// Every other cluster considered (each registered cluster, each name in
    /// `placement.clusters`, each cluster in `previous`), and why it was not chosen,
    /// e.g. `cordoned`, `not connected`, `maxClusters 2 reached`,
    /// `does not match clusterSelector`.
    pub reasons: BTreeMap<String, String>,
}

impl Placed {
    /// Whether `cluster` was chosen.
    pub fn contains(&self, cluster: &str) -> bool {
        self.clusters
            .binary_search_by(|c| c.as_str().cmp(cluster))
            .is_ok()
    }
}

/// Chooses the clusters `ingress` is placed on.
///
/// `clusters` are all registered clusters (a name registered twice counts once, the first
/// wins); `previous` the clusters the ingress is placed on now.
///
/// # Guarantees
///
/// - Deterministic: the same inputs in any order give the same [`Placed`].
/// - A chosen cluster is a registered candidate; a cluster in `previous` that is still a
///   registered candidate is kept unless `maxClusters` leaves no room for it.
/// - With `maxClusters: N`, at most N clusters are chosen.
///
/// # Assumptions
///
/// The ingress is validated: `maxClusters` is at least 1 (a smaller value counts as 1).
pub fn place(ingress: &FederatedIngress, clusters: &[Cluster], previous: &[String]) -> Placed {
    let placement = &ingress.spec.placement;
    let listed: BTreeSet<&str> = placement.clusters.iter().map(String::as_str).collect();
    let everything = placement.clusters.is_empty() && placement.cluster_selector.is_none();

    let mut registered: BTreeMap<&str, &Cluster> = BTreeMap::new();
    for cluster in clusters {
        registered.entry(cluster.name()).or_insert(cluster);
    }
    let previous: BTreeSet<&str> = previous.iter().map(String::as_str).collect();

    let mut reasons: BTreeMap<String, String> = BTreeMap::new();
    // Registered candidates, by name.
    let mut candidates: BTreeMap<&str, &Cluster> = BTreeMap::new();
    for (&name, &cluster) in &registered {
        let selected = placement
            .cluster_selector
            .as_ref()
            .is_some_and(|s| s.matches(&cluster.metadata.labels));
        if everything || listed.contains(name) || selected {
            candidates.insert(name, cluster);
        } else {
            reasons.insert(name.to_owned(), not_a_candidate(ingress).to_owned());
        }
    }
    for name in listed.iter().chain(previous.iter()) {
        if !registered.contains_key(name) {
            reasons.insert((*name).to_owned(), REASON_NO_SUCH_CLUSTER.to_owned());
        }
    }

    let sticky: Vec<&Cluster> = candidates
        .iter()
        .filter(|(name, _)| previous.contains(*name))
        .map(|(_, c)| *c)
        .collect();
    let fresh: Vec<&Cluster> = candidates
        .iter()
        .filter(|(name, _)| !previous.contains(*name))
        .map(|(_, c)| *c)
        .collect();

    let mut chosen: Vec<&Cluster> = Vec::new();
    match placement.max_clusters {
        None => {
            chosen.extend(sticky);
            for cluster in fresh {
                if cluster.spec.unschedulable {
                    reasons.insert(cluster.name().to_owned(), REASON_CORDONED.to_owned());
                } else {
                    chosen.push(cluster);
                }
            }
        }
        Some(max) => {
            let max_usize = usize::try_from(max.max(1)).unwrap_or(1);
            let full = format!("maxClusters {} reached", max.max(1));

            // Sticky clusters first: connected ones, then spread across regions.
            let mut regions: BTreeSet<&str> = BTreeSet::new();
            let mut rest = sticky;
            while chosen.len() < max_usize && !rest.is_empty() {
                let best = pick(&rest, &regions, true);
                let cluster = rest.remove(best);
                regions.insert(cluster.spec.region.as_str());
                chosen.push(cluster);
            }
            for cluster in rest {
                reasons.insert(cluster.name().to_owned(), full.clone());
            }

            // Then connected, schedulable newcomers, spread across regions.
            let mut eligible: Vec<&Cluster> = Vec::new();
            for cluster in fresh {
                if cluster.spec.unschedulable {
                    reasons.insert(cluster.name().to_owned(), REASON_CORDONED.to_owned());
                } else if !cluster.is_connected() {
                    reasons.insert(cluster.name().to_owned(), REASON_NOT_CONNECTED.to_owned());
                } else {
                    eligible.push(cluster);
                }
            }
            while chosen.len() < max_usize && !eligible.is_empty() {
                let best = pick(&eligible, &regions, false);
                let cluster = eligible.remove(best);
                regions.insert(cluster.spec.region.as_str());
                chosen.push(cluster);
            }
            for cluster in eligible {
                reasons.insert(cluster.name().to_owned(), full.clone());
            }
        }
    }

    let mut clusters: Vec<String> = chosen.iter().map(|c| c.name().to_owned()).collect();
    clusters.sort();
    Placed { clusters, reasons }
}

/// Why a registered cluster is not a candidate at all.
fn not_a_candidate(ingress: &FederatedIngress) -> &'static str {
    let placement = &ingress.spec.placement;
    match (
        placement.clusters.is_empty(),
        placement.cluster_selector.is_some(),
    ) {
        (false, true) => "not in placement.clusters and does not match clusterSelector",
        (false, false) => "not in placement.clusters",
        _ => "does not match clusterSelector",
    }
}

/// Index of the best cluster in `from` (non-empty, sorted by name): connected first when
/// `prefer_connected`, then in a region not in `used`, then by name.
fn pick(from: &[&Cluster], used: &BTreeSet<&str>, prefer_connected: bool) -> usize {
    from.iter()
        .enumerate()
        .min_by_key(|(_, c)| {
            (
                prefer_connected && !c.is_connected(),
                used.contains(c.spec.region.as_str()),
                c.name(),
            )
        })
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSpec, ClusterStatus};
    use crate::ingress::{FederatedIngressSpec, Placement};
    use crate::selector::LabelSelector;

    fn cluster(name: &str, region: &str, connected: bool) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                region: region.to_owned(),
                ..ClusterSpec::default()
            },
        );
        c.status = Some(ClusterStatus {
            connected,
            ..ClusterStatus::default()
        });
        c
    }

    fn labelled(mut c: Cluster, key: &str, value: &str) -> Cluster {
        c.metadata.labels.insert(key.to_owned(), value.to_owned());
        c
    }

    fn cordoned(mut c: Cluster) -> Cluster {
        c.spec.unschedulable = true;
        c
    }

    fn ingress(placement: Placement) -> FederatedIngress {
        FederatedIngress::new(
            "default",
            "shop",
            FederatedIngressSpec {
                placement,
                ..FederatedIngressSpec::default()
            },
        )
    }

    fn listed(names: &[&str]) -> Placement {
        Placement {
            clusters: names.iter().map(|s| (*s).to_owned()).collect(),
            ..Placement::default()
        }
    }

    fn max(n: i32) -> Placement {
        Placement {
            max_clusters: Some(n),
            ..Placement::default()
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn empty_placement_takes_every_schedulable_cluster() {
        let clusters = [
            cluster("b", "r1", true),
            cluster("a", "r1", false),
            cordoned(cluster("c", "r2", true)),
        ];
        let placed = place(&ingress(Placement::default()), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["a", "b"]));
        assert_eq!(placed.reasons["c"], "cordoned");
        assert_eq!(placed.reasons.len(), 1);
        assert!(placed.contains("a") && !placed.contains("c"));
    }

    #[test]
    fn list_and_selector_are_a_union() {
        let clusters = [
            cluster("listed", "r1", true),
            labelled(cluster("prod", "r1", true), "env", "prod"),
            labelled(cluster("dev", "r1", true), "env", "dev"),
            cluster("other", "r2", true),
        ];
        let placement = Placement {
            clusters: names(&["listed", "ghost"]),
            cluster_selector: Some(LabelSelector::from_labels([("env", "prod")])),
            max_clusters: None,
            pool_selector: None,
        };
        let placed = place(&ingress(placement), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["listed", "prod"]));
        assert_eq!(
            placed.reasons["dev"],
            "not in placement.clusters and does not match clusterSelector"
        );
        assert_eq!(placed.reasons["ghost"], "no such cluster");

        let only_selector = Placement {
            cluster_selector: Some(LabelSelector::from_labels([("env", "prod")])),
            ..Placement::default()
        };
        let placed = place(&ingress(only_selector), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["prod"]));
        assert_eq!(placed.reasons["other"], "does not match clusterSelector");

        let placed = place(&ingress(listed(&["other"])), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["other"]));
        assert_eq!(placed.reasons["prod"], "not in placement.clusters");
    }

    #[test]
    fn disconnected_clusters_are_placed_without_max_clusters() {
        let clusters = [cluster("a", "r1", false), cluster("b", "r2", false)];
        let placed = place(&ingress(listed(&["a", "b"])), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["a", "b"]));
    }

    #[test]
    fn placement_is_sticky_through_cordon_and_disconnection() {
        let clusters = [
            cordoned(cluster("a", "r1", false)),
            cordoned(cluster("b", "r1", true)),
            cluster("c", "r1", false),
        ];
        let placed = place(&ingress(Placement::default()), &clusters, &names(&["a"]));
        assert_eq!(placed.clusters, names(&["a", "c"]));
        assert_eq!(placed.reasons["b"], "cordoned");

        // Under maxClusters too: the sticky one stays, offline and cordoned.
        let placed = place(&ingress(max(1)), &clusters, &names(&["a"]));
        assert_eq!(placed.clusters, names(&["a"]));
        assert_eq!(placed.reasons["c"], "not connected");
    }

    #[test]
    fn a_previous_cluster_that_is_no_longer_a_candidate_is_dropped() {
        let clusters = [cluster("a", "r1", true), cluster("b", "r1", true)];
        let placed = place(&ingress(listed(&["b"])), &clusters, &names(&["a", "gone"]));
        assert_eq!(placed.clusters, names(&["b"]));
        assert_eq!(placed.reasons["a"], "not in placement.clusters");
        assert_eq!(placed.reasons["gone"], "no such cluster");
    }

    #[test]
    fn max_clusters_spreads_across_regions() {
        let clusters = [
            cluster("eu-1", "eu", true),
            cluster("eu-2", "eu", true),
            cluster("us-1", "us", true),
            cluster("us-2", "us", true),
            cluster("ap-1", "ap", true),
        ];
        let placed = place(&ingress(max(2)), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["ap-1", "eu-1"]));
        assert_eq!(placed.reasons["us-1"], "maxClusters 2 reached");
        assert_eq!(placed.reasons.len(), 3);

        let placed = place(&ingress(max(4)), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["ap-1", "eu-1", "eu-2", "us-1"]));

        // Sticky ones count for the regions used: us-1 stays, the next is ap-1 then eu-1.
        let placed = place(&ingress(max(3)), &clusters, &names(&["us-1"]));
        assert_eq!(placed.clusters, names(&["ap-1", "eu-1", "us-1"]));
        let placed = place(&ingress(max(2)), &clusters, &names(&["us-1", "us-2"]));
        assert_eq!(placed.clusters, names(&["us-1", "us-2"]));
    }

    #[test]
    fn max_clusters_does_not_newly_choose_disconnected_or_cordoned_clusters() {
        let clusters = [
            cluster("a", "r1", false),
            cordoned(cluster("b", "r2", true)),
            cluster("c", "r1", true),
        ];
        let placed = place(&ingress(max(3)), &clusters, &[]);
        assert_eq!(placed.clusters, names(&["c"]));
        assert_eq!(placed.reasons["a"], "not connected");
        assert_eq!(placed.reasons["b"], "cordoned");
    }

    #[test]
    fn too_many_sticky_clusters_keep_connected_then_regions_then_names() {
        let clusters = [
            cluster("a", "eu", false),
            cluster("b", "eu", true),
            cluster("c", "eu", true),
            cluster("d", "us", true),
        ];
        let previous = names(&["a", "b", "c", "d"]);
        let placed = place(&ingress(max(2)), &clusters, &previous);
        assert_eq!(placed.clusters, names(&["b", "d"]));
        assert_eq!(placed.reasons["a"], "maxClusters 2 reached");
        assert_eq!(placed.reasons["c"], "maxClusters 2 reached");

        let placed = place(&ingress(max(3)), &clusters, &previous);
        assert_eq!(placed.clusters, names(&["b", "c", "d"]));
    }

    #[test]
    fn output_does_not_depend_on_input_order() {
        let mut clusters = vec![
            cluster("eu-1", "eu", true),
            cluster("us-1", "us", true),
            cluster("eu-2", "eu", true),
            cordoned(cluster("ap-1", "ap", true)),
        ];
        let a = place(&ingress(max(2)), &clusters, &names(&["eu-2", "ap-1"]));
        clusters.reverse();
        let b = place(&ingress(max(2)), &clusters, &names(&["ap-1", "eu-2"]));
        assert_eq!(a, b);
        assert_eq!(a.clusters, names(&["ap-1", "eu-2"]));
    }
}
