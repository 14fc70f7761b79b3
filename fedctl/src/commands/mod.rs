//! The commands that talk to a federation: one module per group, each printing tables
//! for people or the API's objects with `-o yaml|json`.
//!
//! - `cluster`: join, unjoin, cordon, uncordon (a member cluster's lifecycle);
//! - `agent_manifests`: the member cluster's manifests `join --emit kubernetes` prints;
//! - `token`: a cluster's agent tokens;
//! - `inspect`: get, describe, status (views of clusters and ingresses);
//! - `explain`: one client's routing decision.

pub mod agent_manifests;
pub mod cluster;
pub mod explain;
pub mod inspect;
pub mod token;

use fedingress_api::Cluster;
use fedingress_api::cluster::Address;

/// One word for where a cluster stands: `Cordoned`, `Ready` (agent connected),
/// `Offline` (agent past its lease) or `NotConnected` (no agent yet).
pub fn cluster_state(cluster: &Cluster) -> &'static str {
    if cluster.spec.unschedulable {
        return "Cordoned";
    }
    if cluster.is_connected() {
        return "Ready";
    }
    let offline = cluster.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Connected" && c.reason == "AgentOffline")
    });
    if offline { "Offline" } else { "NotConnected" }
}

/// Addresses as text: IPs and host names.
pub fn address_texts(addresses: &[Address]) -> Vec<String> {
    addresses
        .iter()
        .filter_map(|a| a.ip.map(|ip| ip.to_string()).or_else(|| a.hostname.clone()))
        .collect()
}

/// Labels as `k=v,k=v`.
pub fn labels_text(labels: &std::collections::BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "<none>".into();
    }
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
