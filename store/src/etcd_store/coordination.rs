//! [`Coordination`] on etcd: leases with a background keep-alive, elections on one key
//! created with the campaigner's lease (etcd's `concurrency.Election` without its
//! queue: whoever creates the key first after it is deleted wins), and fenced writes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::rpc::pb::etcdserverpb::compare::CompareResult;
use super::rpc::pb::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest, TxnRequest};
use super::{EtcdStore, rpc};
use crate::{
    Coordination, Event, EventKind, Fence, KeyValue, Lease, Precondition, RangeResult, Revision,
    Store, StoreError, WatchStream,
};

/// Renewals happen every sixth of the time to live (every 500 ms for the replicas'
/// default of 3 s): the lease is lost when none sent in the last time to live was
/// confirmed, or the store says it expired. Renewing that often leaves most of the
/// time to live for riding out an etcd leader election (1-2 s with etcd's defaults),
/// during which no renewal can succeed: losing etcd's raft-leader member keeps every
/// lease.
fn renewal_interval(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_millis(200))
}

/// Ends the keep-alive task and revokes the lease (best effort) when dropped.
struct Keeper {
    task: tokio::task::JoinHandle<()>,
    store: EtcdStore,
    id: i64,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
        let (store, id) = (self.store.clone(), self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let mut lease = store.client.lease.clone();
                let _ = lease.lease_revoke(LeaseRevokeRequest { id }).await;
            });
        }
    }
}

/// Renews `id` until the store stops confirming it for `ttl`, or says it expired.
/// `confirmed` is when the last confirmed renewal was *sent*: etcd counts the time to
/// live from when it received it, later.
async fn keep_alive(store: EtcdStore, id: i64, ttl: Duration, lost: watch::Sender<bool>) {
    let mut confirmed = Instant::now();
    let interval = renewal_interval(ttl);
    'connection: while confirmed.elapsed() < ttl {
        let sent = Instant::now();
        let opened = tokio::time::timeout(interval, store.client.keep_alive(id)).await;
        let mut stream = match opened {
            // Opening the stream renews the lease once (and reads that answer).
            Ok(Ok(Some(stream))) => {
                confirmed = sent;
                stream
            }
            Ok(Ok(None)) => {
                tracing::warn!(lease = id, "etcd says the lease expired");
                break;
            }
            Ok(Err(error)) => {
                tracing::info!(lease = id, error = %error, unconfirmed_ms = confirmed.elapsed().as_millis() as u64, "opening the lease keep-alive failed; retrying");
                tokio::time::sleep(interval / 4).await;
                continue;
            }
            Err(_) => {
                tracing::info!(
                    lease = id,
                    unconfirmed_ms = confirmed.elapsed().as_millis() as u64,
                    "opening the lease keep-alive timed out; retrying"
                );
                continue;
            }
        };
        loop {
            tokio::time::sleep(interval).await;
            let renew = rpc::pb::etcdserverpb::LeaseKeepAliveRequest { id };
            let sent = Instant::now();
            if stream.requests.send(renew).await.is_err() {
                continue 'connection;
            }
            let broke = match tokio::time::timeout(interval, stream.responses.message()).await {
                Ok(Ok(Some(answer))) if answer.ttl > 0 => {
                    confirmed = sent;
                    continue;
                }
                Ok(Ok(Some(_))) => {
                    tracing::warn!(lease = id, "etcd says the lease expired");
                    break 'connection;
                }
                Ok(Ok(None)) => "etcd closed the stream".to_string(),
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {interval:?}"),
            };
            tracing::info!(lease = id, error = %broke, "lease keep-alive broke; reopening");
            continue 'connection;
        }
    }
    tracing::warn!(lease = id, ttl_ms = ttl.as_millis() as u64, "lease lost");
    let _ = lost.send(true);
}

#[async_trait::async_trait]
impl Coordination for EtcdStore {
    async fn grant(&self, ttl: Duration) -> Result<Lease, StoreError> {
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let answer = self
            .call(false, move |mut client| async move {
                let request = LeaseGrantRequest {
                    ttl: seconds,
                    id: 0,
                };
                Ok(client.lease.lease_grant(request).await?.into_inner())
            })
            .await
            .map_err(|f| f.into_store("grant a lease"))?;
        let id = answer.id;
        let ttl = Duration::from_secs(u64::try_from(answer.ttl).unwrap_or(1).max(1));
        let (lost_tx, lost) = watch::channel(false);
        let task = tokio::spawn(keep_alive(self.clone(), id, ttl, lost_tx));
        Ok(Lease {
            id,
            ttl,
            lost,
            _keeper: Box::new(Keeper {
                task,
                store: self.clone(),
                id,
            }),
        })
    }

    async fn put_leased(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
        lease: &Lease,
    ) -> Result<KeyValue, StoreError> {
        self.put_with(key, value, precondition, None, lease.id)
            .await
    }

    async fn campaign(&self, key: &str, holder: &str, lease: &Lease) -> Result<Fence, StoreError> {
        const OPERATION: &str = "campaign for leadership";
        let full = self.full_key(key);
        let mut lost = lease.lost.clone();
        loop {
            if *lost.borrow() {
                return Err(StoreError::Backend {
                    operation: OPERATION,
                    source: "the lease ended before the election was won".into(),
                });
            }
            let txn = TxnRequest {
                compare: vec![rpc::create_revision_is(&full, CompareResult::Equal, 0)],
                success: vec![rpc::put(&full, holder.as_bytes().to_vec(), lease.id)],
                failure: vec![rpc::get(&full)],
            };
            let answer = self.txn(OPERATION, txn).await?;
            let revision = super::header_revision(answer.header.as_ref(), OPERATION)?;
            if answer.succeeded {
                return Ok(Fence {
                    key: key.to_string(),
                    revision,
                });
            }
            // Someone holds it: wait for its deletion (or our lease's end).
            let current = self.current_from(&answer)?;
            if let Some(current) = &current
                && current.value.as_ref() == holder.as_bytes()
                && self.lease_of(key).await? == Some(lease.id)
            {
                // Our own key from before (e.g. a retried request that had succeeded).
                return Ok(Fence {
                    key: key.to_string(),
                    revision: current.create_revision,
                });
            }
            let mut events = self.watch(key, revision).await?;
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(event)) if event.kv.key == key && event.kind == EventKind::Delete => break,
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => break,
                    },
                    _ = lost.changed() => break,
                }
            }
        }
    }

    async fn revoke(&self, lease: &Lease) -> Result<(), StoreError> {
        let id = lease.id;
        let answer = self
            .call(false, move |mut client| async move {
                let request = LeaseRevokeRequest { id };
                Ok(client.lease.lease_revoke(request).await?.into_inner())
            })
            .await;
        // The keeper's own revoke when the lease is dropped then finds nothing to do.
        match answer {
            Ok(_) => Ok(()),
            Err(failure) => Err(failure.into_store("revoke a lease")),
        }
    }

    async fn resign(&self, fence: &Fence) -> Result<(), StoreError> {
        match self
            .delete_with(&fence.key, Precondition::None, Some(fence))
            .await
        {
            Ok(_) | Err(StoreError::NotFound { .. } | StoreError::Fenced { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn fenced(&self, fence: Fence) -> Arc<dyn Store> {
        Arc::new(FencedEtcd {
            store: self.clone(),
            fence,
        })
    }
}

impl EtcdStore {
    /// The lease `key` is attached to (`None`: no such key, or none).
    async fn lease_of(&self, key: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .get_raw(key)
            .await?
            .map(|kv| kv.lease)
            .filter(|&id| id != 0))
    }
}

/// [`EtcdStore`] as the holder of a fence sees it.
struct FencedEtcd {
    store: EtcdStore,
    fence: Fence,
}

#[async_trait::async_trait]
impl Store for FencedEtcd {
    async fn revision(&self) -> Result<Revision, StoreError> {
        self.store.revision().await
    }

    async fn compacted_revision(&self) -> Result<Revision, StoreError> {
        self.store.compacted_revision().await
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        self.store.get(key).await
    }

    async fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RangeResult, StoreError> {
        self.store.range(prefix, start_after, limit).await
    }

    async fn range_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Revision,
    ) -> Result<RangeResult, StoreError> {
        self.store
            .range_at(prefix, start_after, limit, revision)
            .await
    }

    async fn put(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
    ) -> Result<KeyValue, StoreError> {
        self.store
            .put_with(key, value, precondition, Some(&self.fence), 0)
            .await
    }

    async fn delete(&self, key: &str, precondition: Precondition) -> Result<Event, StoreError> {
        self.store
            .delete_with(key, precondition, Some(&self.fence))
            .await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        self.store.watch(prefix, after).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.store.compact(revision).await
    }
}
