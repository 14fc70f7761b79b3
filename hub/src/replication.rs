//! Several replicas on one etcd: each keeps a lease (its agent records live on it) and
//! campaigns for leadership with it; the leader runs what must run once (placement and
//! status writes, routing state, DNS state, events, token revocation) through a fenced
//! store, so that a deposed leader's writes are refused by etcd itself.
//!
//! [`Replication::start`] returns two channels: the current lease (`None` while etcd is
//! unreachable and none could be granted) and the [`Role`]. When the lease is lost
//! (etcd unreachable for its time to live, or it expired), the replica is a follower
//! at once, and grants a new lease as soon as etcd answers again.

use std::sync::Arc;
use std::time::Duration;

use fedingress_store::{Lease, SharedStore, Store};
use tokio::sync::watch;

/// The election key.
pub const LEADER_KEY: &str = "/fedingress/leader";
/// Pause between attempts to grant a lease while etcd does not answer.
const RETRY: Duration = Duration::from_millis(500);

/// This replica's identity and lease settings.
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// Unique among the replicas (`--replica-name`).
    pub name: String,
    /// Time to live of the replica's lease: a dead leader is replaced, and a dead
    /// replica's agent records vanish, within it.
    pub lease: Duration,
}

/// What this replica does.
#[derive(Clone)]
pub enum Role {
    /// Serves the API, agents and DNS; writes only its agents' records.
    Follower,
    /// Also runs the controller's writes, through this fenced store.
    Leader(Arc<dyn Store>),
}

impl Role {
    pub fn is_leader(&self) -> bool {
        matches!(self, Role::Leader(_))
    }
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_leader() {
            "Leader"
        } else {
            "Follower"
        })
    }
}

/// The running election; see the module docs.
pub struct Replication {
    pub lease: watch::Receiver<Option<Arc<Lease>>>,
    pub role: watch::Receiver<Role>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Replication {
    /// Grants the first lease (so the replica starts with one) and starts campaigning.
    ///
    /// # Errors
    /// etcd refused the lease.
    pub async fn start(
        store: Arc<dyn SharedStore>,
        settings: ReplicaSettings,
    ) -> Result<Self, fedingress_store::StoreError> {
        let first = Arc::new(store.grant(settings.lease).await?);
        let (lease_tx, lease) = watch::channel(Some(first.clone()));
        let (role_tx, role) = watch::channel(Role::Follower);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(campaign_forever(
            store, settings, first, lease_tx, role_tx, stop_rx,
        ));
        Ok(Self {
            lease,
            role,
            stop,
            task,
        })
    }

    /// Steps down and revokes the lease (its agent records and, when leading, the
    /// election key go at once: another replica takes over without waiting for expiry).
    pub async fn stop(self, store: &dyn SharedStore) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let lease = self.lease.borrow().clone();
        if let Some(lease) = lease
            && let Err(error) = store.revoke(&lease).await
        {
            tracing::warn!(error = %error, "revoking the replica's lease failed");
        }
    }
}

async fn campaign_forever(
    store: Arc<dyn SharedStore>,
    settings: ReplicaSettings,
    first: Arc<Lease>,
    lease_tx: watch::Sender<Option<Arc<Lease>>>,
    role_tx: watch::Sender<Role>,
    mut stop: watch::Receiver<bool>,
) {
    let mut lease = Some(first);
    loop {
        let current = match lease.take() {
            Some(lease) => lease,
            None => match store.grant(settings.lease).await {
                Ok(granted) => {
                    tracing::info!(replica = %settings.name, lease = granted.id, "replica lease granted");
                    let granted = Arc::new(granted);
                    lease_tx.send_replace(Some(granted.clone()));
                    granted
                }
                Err(error) => {
                    tracing::warn!(error = %error, "granting the replica lease failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(RETRY) => continue,
                        _ = stop.changed() => return,
                    }
                }
            },
        };
        tokio::select! {
            won = store.campaign(LEADER_KEY, &settings.name, &current) => match won {
                Ok(fence) => {
                    tracing::info!(replica = %settings.name, fence = fence.revision, "elected leader");
                    role_tx.send_replace(Role::Leader(store.fenced(fence.clone())));
                    tokio::select! {
                        () = until_lost(&current) => {
                            tracing::warn!(replica = %settings.name, "replica lease lost: no longer the leader");
                        }
                        _ = stop.changed() => {
                            role_tx.send_replace(Role::Follower);
                            let _ = store.resign(&fence).await;
                            // The caller revokes the lease.
                            lease_tx.send_replace(Some(current));
                            return;
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(error = %error, "campaign ended");
                }
            },
            () = until_lost(&current) => {
                tracing::warn!(replica = %settings.name, "replica lease lost");
            }
            _ = stop.changed() => {
                lease_tx.send_replace(Some(current));
                return;
            }
        }
        role_tx.send_replace(Role::Follower);
        if current.is_lost() {
            lease_tx.send_replace(None);
        } else {
            // The campaign failed for another reason (etcd error): try again with it.
            lease = Some(current);
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Completes when `lease` is lost.
async fn until_lost(lease: &Lease) {
    let mut lost = lease.lost.clone();
    let _lost = lost.wait_for(|lost| *lost).await.is_ok();
}
