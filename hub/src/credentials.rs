//! Revocation of live agent sessions: every session is registered under the store key of
//! the credential that authenticated it (a token, or a certificate's record) and its
//! Cluster's key. One store watch on the clusters' prefix
//! ([`super::tokens::credentials_watch_prefix`]) ends a session as soon as either key is
//! deleted — on every replica, since each watches the shared store.
//!
//! # Guarantees
//! - A deleted credential or Cluster ends the sessions it authenticated within the
//!   store's watch latency (milliseconds on redb and etcd).
//! - After a broken watch (compaction, store restart) every live session's keys are read
//!   again; the ones gone end then.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_store::{EventKind, Store};
use futures_util::StreamExt;
use tokio::sync::watch;

use super::tokens::credentials_watch_prefix;

/// Agent identity counters, rendered into the hub's `/metrics` (one set per process;
/// every label value is one of a fixed few).
pub struct IdentityCounters {
    /// Certificates issued by `Join`.
    pub joins: AtomicU64,
    /// Certificates issued by `Renew`.
    pub renewals: AtomicU64,
    /// Sessions ended because their credential or Cluster was deleted.
    pub revoked_sessions: AtomicU64,
    /// Refusals by what was refused: `token`, `certificate`, `join`, `renew`, `csr`,
    /// `name` (not a valid Cluster name).
    refused: Mutex<BTreeMap<&'static str, u64>>,
}

/// The process's identity counters.
pub static IDENTITY: IdentityCounters = IdentityCounters {
    joins: AtomicU64::new(0),
    renewals: AtomicU64::new(0),
    revoked_sessions: AtomicU64::new(0),
    refused: Mutex::new(BTreeMap::new()),
};

impl IdentityCounters {
    /// Counts a refusal of `what` (`token`, `certificate`, `join`, `renew`, `csr`, `name`).
    pub fn refused(&self, what: &'static str) {
        *self
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(what)
            .or_default() += 1;
    }

    /// Prometheus text.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        out.push_str("# HELP fedingress_agent_certificates_issued_total Client certificates the agent CA issued, by RPC.\n# TYPE fedingress_agent_certificates_issued_total counter\n");
        let _ = writeln!(
            out,
            "fedingress_agent_certificates_issued_total{{rpc=\"join\"}} {}",
            get(&self.joins)
        );
        let _ = writeln!(
            out,
            "fedingress_agent_certificates_issued_total{{rpc=\"renew\"}} {}",
            get(&self.renewals)
        );
        out.push_str("# HELP fedingress_agent_sessions_revoked_total Agent sessions ended because their credential or Cluster was deleted.\n# TYPE fedingress_agent_sessions_revoked_total counter\n");
        let _ = writeln!(
            out,
            "fedingress_agent_sessions_revoked_total {}",
            get(&self.revoked_sessions)
        );
        out.push_str("# HELP fedingress_agent_auth_refused_total Refused agent credentials and requests, by kind.\n# TYPE fedingress_agent_auth_refused_total counter\n");
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        for what in ["token", "certificate", "join", "renew", "csr", "name"] {
            let _ = writeln!(
                out,
                "fedingress_agent_auth_refused_total{{kind=\"{what}\"}} {}",
                refused.get(what).copied().unwrap_or(0)
            );
        }
    }
}

/// Why a revoked session ended (sent to the session loop).
pub const CREDENTIAL_REVOKED: &str = "credential revoked";
pub const CLUSTER_DELETED: &str = "cluster deleted";

struct Entry {
    credential: String,
    cluster_key: String,
    end: watch::Sender<&'static str>,
}

/// The live sessions by id, with the keys whose deletion ends them.
#[derive(Clone, Default)]
pub struct Revocations {
    sessions: Arc<Mutex<HashMap<u64, Entry>>>,
    next: Arc<AtomicU64>,
}

/// A registered session: `ended` changes when its credential or Cluster is deleted;
/// dropping it unregisters the session.
pub struct Registration {
    id: u64,
    revocations: Revocations,
    pub ended: watch::Receiver<&'static str>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.revocations.lock().remove(&self.id);
    }
}

impl Revocations {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a session authenticated by the credential at `credential` for the
    /// Cluster stored at `cluster_key`.
    pub fn register(&self, credential: String, cluster_key: String) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (end, ended) = watch::channel("");
        self.lock().insert(
            id,
            Entry {
                credential,
                cluster_key,
                end,
            },
        );
        Registration {
            id,
            revocations: self.clone(),
            ended,
        }
    }

    /// `key` was deleted: ends the sessions it authenticated or whose Cluster it was.
    /// Returns how many.
    pub fn deleted(&self, key: &str) -> usize {
        let sessions = self.lock();
        let mut ended = 0;
        for entry in sessions.values() {
            let reason = if entry.credential == key {
                CREDENTIAL_REVOKED
            } else if entry.cluster_key == key {
                CLUSTER_DELETED
            } else {
                continue;
            };
            entry.end.send_replace(reason);
            ended += 1;
        }
        IDENTITY
            .revoked_sessions
            .fetch_add(ended as u64, Ordering::Relaxed);
        ended
    }

    fn keys(&self) -> Vec<String> {
        let sessions = self.lock();
        let mut keys: Vec<String> = sessions
            .values()
            .flat_map(|e| [e.credential.clone(), e.cluster_key.clone()])
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// Follows the store until it closes: deletions under the clusters' prefix end
    /// sessions. Restarts the watch after errors, checking every live key again.
    pub async fn follow(self, store: Arc<dyn Store>) {
        let prefix = credentials_watch_prefix();
        loop {
            let after = match store.revision().await {
                Ok(revision) => revision,
                Err(fedingress_store::StoreError::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "credential watch: reading the revision failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            // Keys deleted while no watch ran.
            for key in self.keys() {
                if let Ok(None) = store.get(&key).await {
                    let n = self.deleted(&key);
                    tracing::info!(
                        key,
                        sessions = n,
                        "credential gone while the watch restarted: sessions ended"
                    );
                }
            }
            let mut events = match store.watch(&prefix, after).await {
                Ok(events) => events,
                Err(fedingress_store::StoreError::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "credential watch failed to start; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) if event.kind == EventKind::Delete => {
                        let n = self.deleted(&event.kv.key);
                        if n > 0 {
                            tracing::info!(key = %event.kv.key, sessions = n, "credential or cluster deleted: agent sessions ended");
                        }
                    }
                    Ok(_) => {}
                    Err(fedingress_store::StoreError::Closed) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "credential watch ended; watching again");
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_a_credential_or_cluster_ends_exactly_its_sessions() {
        let revocations = Revocations::default();
        let a = revocations.register("/t/eu/a".into(), "/c/eu".into());
        let b = revocations.register("/t/eu/b".into(), "/c/eu".into());
        let c = revocations.register("/t/us/c".into(), "/c/us".into());
        assert_eq!(revocations.deleted("/t/eu/a"), 1);
        assert_eq!(*a.ended.borrow(), CREDENTIAL_REVOKED);
        assert_eq!(*b.ended.borrow(), "");
        assert_eq!(revocations.deleted("/c/eu"), 2);
        assert_eq!(*b.ended.borrow(), CLUSTER_DELETED);
        assert_eq!(*c.ended.borrow(), "");
        drop(c);
        assert_eq!(revocations.deleted("/c/us"), 0);
    }

    #[tokio::test]
    async fn the_store_watch_ends_sessions() {
        use fedingress_store::Precondition;
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            fedingress_store::RedbStore::open(&dir.path().join("s.redb"), Default::default())
                .unwrap(),
        );
        let key = super::super::tokens::token_key("eu", "abc");
        store
            .put(&key, bytes::Bytes::from_static(b"{}"), Precondition::None)
            .await
            .unwrap();
        // The Cluster exists too: a session whose keys are missing ends when the watch
        // starts.
        let cluster_key = "/registry/fedingress.io/clusters/eu".to_string();
        store
            .put(
                &cluster_key,
                bytes::Bytes::from_static(b"{}"),
                Precondition::None,
            )
            .await
            .unwrap();
        let revocations = Revocations::default();
        let mut session = revocations.register(key.clone(), cluster_key);
        let task = tokio::spawn(revocations.clone().follow(store.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        store.delete(&key, Precondition::None).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), session.ended.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*session.ended.borrow(), CREDENTIAL_REVOKED);
        task.abort();
    }
}
