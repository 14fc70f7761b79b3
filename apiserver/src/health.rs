//! Whether the store answers, as `/readyz` and `/healthz` report it and as the API's
//! write path uses it.
//!
//! [`StoreHealth::probe`] reads the store's revision every [`PROBE_INTERVAL`] (with a
//! deadline of [`PROBE_TIMEOUT`]). Once none succeeded for [`UNAVAILABLE_AFTER`], object requests are refused at once
//! with 503 (and `Retry-After`) saying why, instead of waiting for the store's own
//! timeout; whatever the process serves from memory keeps serving (the hub's DNS and
//! agent plans; the messages say so through [`Meanwhile`]), so the replicas are
//! read-only in effect.
//! When the store answers again the replica records a Warning Event
//! (`StoreUnavailable`, about the `FederationAPIServer` named after the replica, in
//! namespace `default`) saying how long it was gone. `/livez` stays 200: restarting
//! the process would not bring the store back.
//!
//! A store can answer reads and still not commit (redb on a full or read-only disk,
//! etcd whose member answers serializable reads without a quorum).
//! [`StoreHealth::probe_commits`] checks that commits happen: every
//! `storage.commitProbeIntervalSeconds` it reads the revision, and when nothing was
//! committed since the last check it writes one tiny key of its own
//! (`/fedingress/health/<replica>`), so an idle server writes once per interval and a
//! busy one never. While that write fails (or takes longer than [`UNAVAILABLE_AFTER`])
//! `/readyz` fails with `[-]store-commit failed: …` saying why and since when; reads
//! are still served (writes fail on their own).
//!
//! [`routes`] serves `/livez`, `/healthz` and `/readyz`, without authentication.

use std::sync::Arc;
use std::time::Duration;

use fedingress_api::Time;
use fedingress_api::event::ObjectReference;
use fedingress_store::Store;
use tokio::sync::watch;

use crate::events::Recorder;
use crate::registry::Registry;

/// How often the store is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// A probe without an answer within this fails.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The store is unavailable once no probe succeeded for this long: longer than an etcd
/// leader election (1-2 s with etcd's default election timeout of 1 s, plus the vote),
/// so that losing etcd's raft leader while a quorum holds makes no replica read-only.
pub const UNAVAILABLE_AFTER: Duration = Duration::from_secs(5);

/// The store's availability as last probed.
#[derive(Clone, Debug, PartialEq)]
pub enum Availability {
    Available,
    Unavailable { since: Time, error: String },
}

/// How often commits are checked by default (`storage.commitProbeIntervalSeconds`).
pub const DEFAULT_COMMIT_PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// Where the commit probe of `replica` writes.
pub fn commit_probe_key(replica: &str) -> String {
    format!("/fedingress/health/{replica}")
}

/// What keeps serving from memory while the store is gone, as the messages say it.
/// The REST server serves nothing from memory; the process that also runs DNS and the
/// agent gateway says what they keep doing ([`StoreHealth::with_meanwhile`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Meanwhile {
    /// Ends a refused request's reason: `…until it answers; {unavailable}`.
    pub unavailable: &'static str,
    /// Follows "refused writes" in the recovery Event: `…refused writes{recovered} meanwhile`.
    pub recovered: &'static str,
    /// Follows "read-only" in the error logged when the store stops answering.
    pub logged: &'static str,
}

/// Shared between the prober, the API and `/readyz`.
pub struct StoreHealth {
    state: watch::Sender<Availability>,
    /// Whether the store commits, as the commit probe last saw it.
    commits: watch::Sender<Availability>,
    /// What the store is, for messages ("etcd" or "the store").
    what: &'static str,
    /// What keeps serving meanwhile, for messages.
    meanwhile: Meanwhile,
}

impl StoreHealth {
    /// Messages name `what` and nothing that keeps serving meanwhile.
    pub fn new(what: &'static str) -> Arc<Self> {
        Self::with_meanwhile(what, Meanwhile::default())
    }

    /// The same, with messages that say what keeps serving while the store is gone.
    pub fn with_meanwhile(what: &'static str, meanwhile: Meanwhile) -> Arc<Self> {
        Arc::new(Self {
            state: watch::channel(Availability::Available).0,
            commits: watch::channel(Availability::Available).0,
            what,
            meanwhile,
        })
    }

    pub fn current(&self) -> Availability {
        self.state.borrow().clone()
    }

    /// `None` when available; else why a request (a `write` or a read) is refused.
    pub fn unavailable_reason(&self, write: bool) -> Option<String> {
        match self.current() {
            Availability::Available => None,
            Availability::Unavailable { since, error } => Some(format!(
                "{} unavailable since {} ({error}): {} until it answers{}{}",
                self.what,
                since.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                if write {
                    "this server is read-only, writes are refused"
                } else {
                    "objects cannot be read"
                },
                if self.meanwhile.unavailable.is_empty() {
                    ""
                } else {
                    "; "
                },
                self.meanwhile.unavailable,
            )),
        }
    }

    /// The `/readyz` (`/healthz`) body and whether it is healthy, in kube-apiserver's
    /// `?verbose` format.
    pub fn readyz(&self) -> (bool, String) {
        let mut body = String::from("[+]ping ok\n");
        let mut ok = true;
        match self.unavailable_reason(true) {
            None => body.push_str(&format!("[+]{} ok\n", self.check_name())),
            Some(reason) => {
                ok = false;
                body.push_str(&format!("[-]{} failed: {reason}\n", self.check_name()));
            }
        }
        match &*self.commits.borrow() {
            Availability::Available => body.push_str("[+]store-commit ok\n"),
            Availability::Unavailable { since, error } => {
                ok = false;
                body.push_str(&format!(
                    "[-]store-commit failed: {} cannot commit writes since {} ({error})\n",
                    self.what,
                    since.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                ));
            }
        }
        body.push_str(if ok {
            "readyz check passed\n"
        } else {
            "readyz check failed\n"
        });
        (ok, body)
    }

    /// Checks every `interval` that the store commits (see the module docs) until the
    /// process ends; while it does not, every [`PROBE_INTERVAL`].
    pub async fn probe_commits(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        key: String,
        interval: Duration,
    ) {
        let mut last_revision = None;
        loop {
            let failing = matches!(*self.commits.borrow(), Availability::Unavailable { .. });
            tokio::time::sleep(if failing { PROBE_INTERVAL } else { interval }).await;
            // A store that does not answer reads is the read probe's to report.
            let Ok(Ok(revision)) = tokio::time::timeout(PROBE_TIMEOUT, store.revision()).await
            else {
                continue;
            };
            if !failing && last_revision.is_some_and(|last| revision > last) {
                // Something committed since the last check: no write needed.
                last_revision = Some(revision);
                continue;
            }
            let value = bytes::Bytes::from(chrono::Utc::now().to_rfc3339());
            // As long as the read probe waits: an etcd leader election is no failure.
            let written = tokio::time::timeout(
                UNAVAILABLE_AFTER,
                store.put(&key, value, fedingress_store::Precondition::None),
            )
            .await;
            let error = match written {
                Ok(Ok(kv)) => {
                    last_revision = Some(kv.mod_revision);
                    None
                }
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no commit within {UNAVAILABLE_AFTER:?}")),
            };
            match (error, failing) {
                (None, false) | (Some(_), true) => {}
                (None, true) => {
                    tracing::warn!(key, "{} commits again: ready", self.what);
                    self.commits.send_replace(Availability::Available);
                }
                (Some(error), false) => {
                    tracing::error!(key, error = %error, "{} cannot commit: /readyz fails", self.what);
                    self.commits.send_replace(Availability::Unavailable {
                        since: Time::new(chrono::Utc::now()),
                        error,
                    });
                }
            }
        }
    }

    fn check_name(&self) -> &'static str {
        if self.what == "etcd" { "etcd" } else { "store" }
    }

    /// Probes `store` until the process ends; records an Event (through `registry`)
    /// about `replica` when the store comes back.
    pub async fn probe(
        self: Arc<Self>,
        store: Arc<dyn Store>,
        registry: Registry,
        replica: String,
    ) {
        let mut recorder = Recorder::new(registry);
        let mut ticker = tokio::time::interval(PROBE_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut answered = tokio::time::Instant::now();
        loop {
            ticker.tick().await;
            let asked = tokio::time::Instant::now();
            let answer = tokio::time::timeout(PROBE_TIMEOUT, store.revision()).await;
            let error = match answer {
                Ok(Ok(_)) => {
                    answered = asked;
                    None
                }
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {PROBE_TIMEOUT:?}")),
            };
            // A failure that has not lasted UNAVAILABLE_AFTER (etcd electing a new
            // leader, say) does not make the replica read-only.
            if let Some(error) = &error
                && answered.elapsed() < UNAVAILABLE_AFTER
            {
                tracing::debug!(error = %error, "{} probe failed; not unavailable yet", self.what);
                continue;
            }
            let before = self.current();
            match (error, before) {
                (None, Availability::Available) => {}
                (None, Availability::Unavailable { since, error }) => {
                    let now = Time::new(chrono::Utc::now());
                    let seconds = (now.0 - since.0).num_seconds();
                    tracing::warn!(since = %since.0, seconds, "{} answers again: writes accepted", self.what);
                    self.state.send_replace(Availability::Available);
                    let message = format!(
                        "{} did not answer from {} for {seconds}s ({error}): replica {replica} refused writes{} meanwhile",
                        self.what,
                        since.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        self.meanwhile.recovered,
                    );
                    recorder
                        .record_about(
                            ObjectReference {
                                api_version: "fedingress.io/v1alpha1".into(),
                                kind: "FederationAPIServer".into(),
                                namespace: "default".into(),
                                name: replica.clone(),
                                uid: String::new(),
                            },
                            "Warning",
                            "StoreUnavailable",
                            &message,
                            now,
                        )
                        .await;
                }
                (Some(error), Availability::Available) => {
                    tracing::error!(error = %error, "{} does not answer: read-only{}", self.what, self.meanwhile.logged);
                    self.state.send_replace(Availability::Unavailable {
                        since: Time::new(chrono::Utc::now()),
                        error,
                    });
                }
                (Some(_), Availability::Unavailable { .. }) => {}
            }
        }
    }
}

/// The probes' state in a router's state (`FromRef`).
#[derive(Clone)]
pub struct Probes(pub Arc<StoreHealth>);

/// `/livez`, `/healthz` and `/readyz`, for any method and without authentication:
/// `/livez` answers as long as the process does, the others whether the store answers
/// and commits (`?verbose`: every check).
pub fn routes<S>() -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
    Probes: axum::extract::FromRef<S>,
{
    use axum::routing::any;
    axum::Router::new()
        .route("/livez", any(|| async { "ok" }))
        .route("/healthz", any(readyz))
        .route("/readyz", any(readyz))
}

async fn readyz(
    axum::extract::State(Probes(health)): axum::extract::State<Probes>,
    uri: http::Uri,
) -> (http::StatusCode, String) {
    let (ok, body) = health.readyz();
    let code = if ok {
        http::StatusCode::OK
    } else {
        http::StatusCode::SERVICE_UNAVAILABLE
    };
    let verbose = uri.query().is_some_and(|q| q.contains("verbose"));
    let body = if ok && !verbose {
        "ok".to_string()
    } else {
        body
    };
    (code, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_says_what_failed_and_since_when() {
        let health = StoreHealth::new("etcd");
        assert_eq!(
            health.readyz(),
            (
                true,
                "[+]ping ok\n[+]etcd ok\n[+]store-commit ok\nreadyz check passed\n".into()
            )
        );
        assert!(health.unavailable_reason(true).is_none());
        health.state.send_replace(Availability::Unavailable {
            since: Time::new(chrono::DateTime::UNIX_EPOCH),
            error: "no answer within 2s".into(),
        });
        let (ok, body) = health.readyz();
        assert!(!ok);
        assert!(
            body.contains("[-]etcd failed: etcd unavailable since 1970-01-01T00:00:00Z (no answer within 2s): this server is read-only, writes are refused"),
            "{body}"
        );
    }

    /// A store that reads but cannot commit: every write fails.
    struct ReadOnlyStore(fedingress_store::RedbStore);

    #[async_trait::async_trait]
    impl Store for ReadOnlyStore {
        async fn revision(
            &self,
        ) -> Result<fedingress_store::Revision, fedingress_store::StoreError> {
            self.0.revision().await
        }
        async fn compacted_revision(
            &self,
        ) -> Result<fedingress_store::Revision, fedingress_store::StoreError> {
            self.0.compacted_revision().await
        }
        async fn get(
            &self,
            key: &str,
        ) -> Result<Option<fedingress_store::KeyValue>, fedingress_store::StoreError> {
            self.0.get(key).await
        }
        async fn range(
            &self,
            prefix: &str,
            start_after: Option<&str>,
            limit: usize,
        ) -> Result<fedingress_store::RangeResult, fedingress_store::StoreError> {
            self.0.range(prefix, start_after, limit).await
        }
        async fn range_at(
            &self,
            prefix: &str,
            start_after: Option<&str>,
            limit: usize,
            revision: fedingress_store::Revision,
        ) -> Result<fedingress_store::RangeResult, fedingress_store::StoreError> {
            self.0.range_at(prefix, start_after, limit, revision).await
        }
        async fn put(
            &self,
            _key: &str,
            _value: bytes::Bytes,
            _precondition: fedingress_store::Precondition,
        ) -> Result<fedingress_store::KeyValue, fedingress_store::StoreError> {
            Err(fedingress_store::StoreError::Backend {
                operation: "commit a write batch",
                source: "No space left on device (os error 28)".into(),
            })
        }
        async fn delete(
            &self,
            key: &str,
            precondition: fedingress_store::Precondition,
        ) -> Result<fedingress_store::Event, fedingress_store::StoreError> {
            self.0.delete(key, precondition).await
        }
        async fn watch(
            &self,
            prefix: &str,
            after: fedingress_store::Revision,
        ) -> Result<fedingress_store::WatchStream, fedingress_store::StoreError> {
            self.0.watch(prefix, after).await
        }
        async fn compact(
            &self,
            revision: fedingress_store::Revision,
        ) -> Result<(), fedingress_store::StoreError> {
            self.0.compact(revision).await
        }
    }

    #[tokio::test]
    async fn readyz_fails_when_the_store_cannot_commit() {
        let dir = tempfile::tempdir().unwrap();
        let redb = fedingress_store::RedbStore::open(
            &dir.path().join("s.redb"),
            fedingress_store::RedbOptions::default(),
        )
        .unwrap();
        let health = StoreHealth::new("the store");
        let key = commit_probe_key("r1");
        tokio::spawn(health.clone().probe_commits(
            Arc::new(ReadOnlyStore(redb)),
            key,
            Duration::from_millis(20),
        ));
        let mut commits = health.commits.subscribe();
        tokio::time::timeout(Duration::from_secs(60), commits.changed())
            .await
            .unwrap()
            .unwrap();
        let (ok, body) = health.readyz();
        assert!(!ok);
        assert!(
            body.contains(
                "[+]store ok\n[-]store-commit failed: the store cannot commit writes since"
            ) && body.contains("commit a write batch"),
            "{body}"
        );
        // Reads are still served.
        assert!(health.unavailable_reason(false).is_none());
    }

    #[tokio::test]
    async fn an_idle_store_gets_probe_writes_and_stays_ready() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            fedingress_store::RedbStore::open(
                &dir.path().join("s.redb"),
                fedingress_store::RedbOptions::default(),
            )
            .unwrap(),
        );
        let health = StoreHealth::new("the store");
        let key = commit_probe_key("r1");
        tokio::spawn(health.clone().probe_commits(
            store.clone(),
            key.clone(),
            Duration::from_millis(20),
        ));
        tokio::time::timeout(Duration::from_secs(60), async {
            while store.get(&key).await.unwrap().is_none() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
        assert!(health.readyz().0);
    }
}
