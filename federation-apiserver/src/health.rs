//! Whether the store answers, as `/readyz` and `/healthz` report it and as the API's
//! write path uses it.
//!
//! [`StoreHealth::probe`] reads the store's revision every [`PROBE_INTERVAL`] (with a
//! deadline of [`PROBE_TIMEOUT`]). While it fails, object requests are refused at once
//! with 503 (and `Retry-After`) saying why, instead of waiting for the store's own
//! timeout; DNS serves the last snapshot and agents keep their last plans (nothing
//! there needs the store), so the replicas are read-only in effect.
//! When the store answers again the replica records a Warning Event
//! (`StoreUnavailable`, about the `FederationAPIServer` named after the replica, in
//! namespace `default`) saying how long it was gone. `/livez` stays 200: restarting
//! the process would not bring the store back.

use std::sync::Arc;
use std::time::Duration;

use fedingress_api::Time;
use fedingress_api::event::ObjectReference;
use fedingress_store::Store;
use tokio::sync::watch;

use crate::hub::events::Recorder;
use crate::registry::Registry;

/// How often the store is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);
/// A probe without an answer within this fails.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The store's availability as last probed.
#[derive(Clone, Debug, PartialEq)]
pub enum Availability {
    Available,
    Unavailable { since: Time, error: String },
}

/// Shared between the prober, the API and `/readyz`.
pub struct StoreHealth {
    state: watch::Sender<Availability>,
    /// What the store is, for messages ("etcd" or "the store").
    what: &'static str,
}

impl StoreHealth {
    pub fn new(what: &'static str) -> Arc<Self> {
        Arc::new(Self {
            state: watch::channel(Availability::Available).0,
            what,
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
                "{} unavailable since {} ({error}): {} until it answers; DNS and agents keep their last state",
                self.what,
                since.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                if write {
                    "this server is read-only, writes are refused"
                } else {
                    "objects cannot be read"
                }
            )),
        }
    }

    /// The `/readyz` (`/healthz`) body and whether it is healthy, in kube-apiserver's
    /// `?verbose` format.
    pub fn readyz(&self) -> (bool, String) {
        match self.unavailable_reason(true) {
            None => (
                true,
                format!(
                    "[+]ping ok\n[+]{} ok\nreadyz check passed\n",
                    self.check_name()
                ),
            ),
            Some(reason) => (
                false,
                format!(
                    "[+]ping ok\n[-]{} failed: {reason}\nreadyz check failed\n",
                    self.check_name()
                ),
            ),
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
        loop {
            ticker.tick().await;
            let answer = tokio::time::timeout(PROBE_TIMEOUT, store.revision()).await;
            let error = match answer {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {PROBE_TIMEOUT:?}")),
            };
            let before = self.current();
            match (error, before) {
                (None, Availability::Available) => {}
                (None, Availability::Unavailable { since, error }) => {
                    let now = Time::new(chrono::Utc::now());
                    let seconds = (now.0 - since.0).num_seconds();
                    tracing::warn!(since = %since.0, seconds, "{} answers again: writes accepted", self.what);
                    self.state.send_replace(Availability::Available);
                    let message = format!(
                        "{} did not answer from {} for {seconds}s ({error}): replica {replica} refused writes and served DNS from its last state meanwhile",
                        self.what,
                        since.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
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
                    tracing::error!(error = %error, "{} does not answer: read-only, DNS serves its last state", self.what);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_says_what_failed_and_since_when() {
        let health = StoreHealth::new("etcd");
        assert_eq!(
            health.readyz(),
            (true, "[+]ping ok\n[+]etcd ok\nreadyz check passed\n".into())
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
}
