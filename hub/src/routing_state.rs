//! What routing remembers of each FederatedIngress, persisted in the store so that the
//! DNS server answers from it from its very first packet after a restart.
//!
//! Per (ingress, cluster) a [`Serving`] entry says that the cluster's listener for the
//! ingress has been applied (at some generation) and not removed since, where it serves
//! (addresses), whether it was healthy, until when a recovered cluster is held out of
//! answers (`failbackDelaySeconds`), and, for Anycast, the BGP routes its agent
//! reported. Per ingress, the Failover strategy's tier memory rides along. A cluster
//! without an entry has never served the ingress (or stopped): it is never answered.
//!
//! Stored under `/fedingress/routing/<namespace>/<name>` as JSON, outside
//! `/registry/` (no API object, no watch of the controller's own input). Written only
//! when it changed; deleted with the ingress.
//!
//! What does not belong here: deciding the state (see `controller::serving`), answering
//! DNS (see `fedingress_dns`).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use fedingress_api::cluster::Address;
use fedingress_api::ingress::{AnycastRouteStatus, IngressRule, Protocol};
use fedingress_api::plan::IngressKey;
use fedingress_dns::routing::FailoverState;
use fedingress_store::{Precondition, Store, StoreError};
use serde::{Deserialize, Serialize};

/// Storage prefix of routing state.
pub const PREFIX: &str = "/fedingress/routing/";

/// One cluster's serving state for one ingress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Serving {
    /// Generation of the ingress the cluster's agent last applied.
    pub applied_generation: i64,
    /// Where the listener serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,
    /// Last known health (listener up, a ready endpoint behind every backend, agent
    /// connected); `None` until the agent first reports the share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// A cluster that recovered stays out of answers until then (unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until_ms: Option<u64>,
    /// Whether it has been healthy since it started serving: only then is turning
    /// healthy a recovery (a new listener's first health checks are not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub was_healthy: bool,
    /// Rules not simply served on `addresses`: served on addresses of their own (a split
    /// TCP/UDP load balancer), or failed (the agent reported an error for them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleServing>,
    /// Anycast: each anycast address's BGP route on the cluster, as its agent last
    /// reported it (with its BGP speaker down: every route withdrawn); kept while the
    /// agent reports nothing newer. Empty when it reports none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anycast: Vec<AnycastRouteStatus>,
}

/// One rule of an ingress on one cluster, when it is not simply served on the share's
/// addresses. Identified by its listener (protocol, port, host), not by its index: an
/// edited spec may move rules while the previous generation still serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleServing {
    pub protocol: Protocol,
    pub port: i32,
    /// The rule's host (HTTP, HTTPS, TLS rules that name one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Where the rule is served, when not on the share's addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<Address>,
    /// The agent reported an error for the rule: it is not served there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

impl RuleServing {
    /// Whether this is the listener of `rule`.
    pub fn matches(&self, rule: &IngressRule) -> bool {
        self.protocol == rule.protocol
            && Some(self.port) == rule.effective_port()
            && self.host.as_deref() == rule.host()
    }
}

impl Serving {
    /// Healthy and not held back by the failback delay at `now_ms`.
    pub fn routable(&self, now_ms: u64) -> bool {
        self.healthy == Some(true) && self.held_until_ms.is_none_or(|until| now_ms >= until)
    }

    /// What is known of `rule` beyond the share's addresses (`None`: served there).
    pub fn rule(&self, rule: &IngressRule) -> Option<&RuleServing> {
        self.rules.iter().find(|r| r.matches(rule))
    }
}

/// What routing remembers of one ingress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IngressRouting {
    /// By cluster name: only clusters that serve the ingress.
    #[serde(default)]
    pub clusters: BTreeMap<String, Serving>,
    /// The Failover strategy's tier memory.
    #[serde(default)]
    pub failover: FailoverState,
}

/// Reads and writes [`IngressRouting`] in the store.
#[derive(Clone)]
pub struct RoutingStore {
    store: Arc<dyn Store>,
}

/// Why routing state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RoutingStateError {
    #[error("reading routing state")]
    Read(#[source] StoreError),
    #[error("writing routing state of {ingress}")]
    Write {
        ingress: String,
        #[source]
        source: StoreError,
    },
    #[error("encoding routing state of {ingress}")]
    Encode {
        ingress: String,
        #[source]
        source: serde_json::Error,
    },
}

fn key(ingress: &IngressKey) -> String {
    format!("{PREFIX}{}/{}", ingress.namespace, ingress.name)
}

impl RoutingStore {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Everything stored. Entries that do not decode (written by a newer version, or
    /// damaged) are skipped with a warning: routing then starts from what agents report.
    pub async fn load(&self) -> Result<BTreeMap<IngressKey, IngressRouting>, RoutingStateError> {
        let mut out = BTreeMap::new();
        let mut start_after: Option<String> = None;
        loop {
            let page = self
                .store
                .range(PREFIX, start_after.as_deref(), 1000)
                .await
                .map_err(RoutingStateError::Read)?;
            for kv in &page.kvs {
                let Some((namespace, name)) = kv
                    .key
                    .strip_prefix(PREFIX)
                    .and_then(|rest| rest.split_once('/'))
                else {
                    continue;
                };
                match serde_json::from_slice::<IngressRouting>(&kv.value) {
                    Ok(routing) => {
                        out.insert(IngressKey::new(namespace, name), routing);
                    }
                    Err(error) => {
                        tracing::warn!(key = %kv.key, error = %error, "routing state does not decode; ignored");
                    }
                }
            }
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => start_after = Some(last.key.clone()),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Stores one ingress's routing state (`None`: deletes it).
    pub async fn save(
        &self,
        ingress: &IngressKey,
        routing: Option<&IngressRouting>,
    ) -> Result<(), RoutingStateError> {
        let key = key(ingress);
        let write = |source| RoutingStateError::Write {
            ingress: ingress.to_string(),
            source,
        };
        match routing {
            Some(routing) => {
                let value =
                    serde_json::to_vec(routing).map_err(|source| RoutingStateError::Encode {
                        ingress: ingress.to_string(),
                        source,
                    })?;
                self.store
                    .put(&key, Bytes::from(value), Precondition::None)
                    .await
                    .map_err(write)?;
            }
            None => match self.store.delete(&key, Precondition::None).await {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(write(e)),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fedingress_store::{RedbOptions, RedbStore};

    #[tokio::test]
    async fn saves_loads_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&dir.path().join("s.redb"), RedbOptions::default()).unwrap());
        let routing = RoutingStore::new(store);
        let key = IngressKey::new("default", "echo");
        let mut state = IngressRouting::default();
        state.clusters.insert(
            "eu-west".into(),
            Serving {
                applied_generation: 3,
                addresses: vec![Address::ip("127.0.0.11".parse().unwrap())],
                healthy: Some(true),
                held_until_ms: Some(5),
                was_healthy: true,
                rules: vec![RuleServing {
                    protocol: Protocol::Udp,
                    port: 53,
                    host: None,
                    addresses: vec![Address::hostname("udp.elb.example.com")],
                    failed: false,
                }],
                anycast: vec![AnycastRouteStatus {
                    address: "192.0.2.10".parse().unwrap(),
                    announced: false,
                    reason: "backend echo:9000 has no ready endpoint".into(),
                }],
            },
        );
        state.failover.active_tier = 1;
        routing.save(&key, Some(&state)).await.unwrap();
        let loaded = routing.load().await.unwrap();
        assert_eq!(loaded.get(&key), Some(&state));
        routing.save(&key, None).await.unwrap();
        routing.save(&key, None).await.unwrap();
        assert!(routing.load().await.unwrap().is_empty());
    }

    #[test]
    fn held_clusters_are_not_routable_until_the_delay_passed() {
        let serving = Serving {
            healthy: Some(true),
            held_until_ms: Some(1000),
            ..Serving::default()
        };
        assert!(!serving.routable(999));
        assert!(serving.routable(1000));
        let unhealthy = Serving::default();
        assert!(!unhealthy.routable(u64::MAX));
    }

    #[test]
    fn state_written_before_per_rule_addresses_still_loads() {
        let old = r#"{"clusters":{"eu":{"appliedGeneration":2,"addresses":[{"ip":"127.0.0.1"}],"healthy":true}},"failover":{"activeTier":0}}"#;
        let routing: IngressRouting = serde_json::from_str(old).unwrap();
        assert!(routing.clusters["eu"].rules.is_empty());
        let mut rule = IngressRule::new(Protocol::Tcp);
        rule.port = Some(53);
        let serving = Serving {
            rules: vec![RuleServing {
                protocol: Protocol::Tcp,
                port: 53,
                host: None,
                addresses: Vec::new(),
                failed: true,
            }],
            ..Serving::default()
        };
        assert!(serving.rule(&rule).is_some_and(|r| r.failed));
        rule.protocol = Protocol::Udp;
        assert!(serving.rule(&rule).is_none(), "UDP 53 is another listener");
    }
}
