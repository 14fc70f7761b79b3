//! Watches of the [`EtcdStore`]: one etcd watch stream per [`Store::watch`], opened
//! from `after + 1` with `prev_kv`, mapped event by event.
//!
//! # Resuming
//! etcd keeps a watch open across leader elections. When the stream itself breaks (the
//! member serving it died, the connection dropped, or etcd cancelled the watch because
//! its member lost the leader), the watch is opened again from the revision after the
//! last one delivered, through the client's balanced channel (so on any reachable
//! member), pausing between attempts and retrying until it works or the watcher is
//! dropped. A resume that finds the history compacted ends the stream with
//! [`StoreError::Compacted`], as the trait requires for a watcher that fell behind.

use std::collections::VecDeque;
use std::time::Duration;

use super::rpc::pb::etcdserverpb::{WatchCreateRequest, WatchResponse};
use super::rpc::pb::mvccpb::event::EventType;
use super::{EtcdStore, prefix_end};
use crate::{Event, EventKind, KeyValue, Revision, Store, StoreError, WatchStream};

/// Pause before the first attempt to reopen a broken watch; doubles up to
/// [`MAX_REOPEN_PAUSE`].
const FIRST_REOPEN_PAUSE: Duration = Duration::from_millis(50);
const MAX_REOPEN_PAUSE: Duration = Duration::from_secs(2);

/// Starts a watch of `prefix` after `after`. The caller has checked `after` against the
/// compacted revision; etcd's own answer is checked again here.
pub(super) async fn start(
    store: EtcdStore,
    prefix: &str,
    after: Revision,
) -> Result<WatchStream, StoreError> {
    let mut key = store.full_key(prefix);
    let end = prefix_end(&key);
    if key.is_empty() {
        key = vec![0];
    }
    let mut watch = Watch {
        store,
        key,
        end,
        last: after,
        stream: None,
        pending: VecDeque::new(),
        done: false,
    };
    watch.open().await?;
    Ok(Box::pin(futures_util::stream::unfold(
        watch,
        |mut watch| async move {
            let item = watch.next().await?;
            Some((item, watch))
        },
    )))
}

struct Watch {
    store: EtcdStore,
    key: Vec<u8>,
    end: Vec<u8>,
    /// The revision of the last event received (or the watch's `after`).
    last: Revision,
    stream: Option<tonic::Streaming<WatchResponse>>,
    /// Events received but not yet handed out.
    pending: VecDeque<Event>,
    /// Set after the last item (an error) was handed out.
    done: bool,
}

impl Watch {
    /// Opens an etcd watch from `last + 1` and waits until etcd confirms it.
    async fn open(&mut self) -> Result<(), StoreError> {
        const OPERATION: &str = "open a watch";
        let timeout = self.store.request_timeout;
        let backend = |source: crate::BoxError| StoreError::Backend {
            operation: OPERATION,
            source,
        };
        let create = WatchCreateRequest {
            key: self.key.clone(),
            range_end: self.end.clone(),
            start_revision: self.last + 1,
            prev_kv: true,
            ..WatchCreateRequest::default()
        };
        let mut stream = tokio::time::timeout(timeout, self.store.client.watch(create))
            .await
            .map_err(|_| backend(format!("no answer from etcd within {timeout:?}").into()))?
            .map_err(|e| backend(Box::new(e)))?;
        loop {
            let response = tokio::time::timeout(timeout, stream.message())
                .await
                .map_err(|_| backend(format!("etcd did not confirm within {timeout:?}").into()))?
                .map_err(|e| backend(Box::new(e)))?
                .ok_or_else(|| backend("etcd closed the watch stream".into()))?;
            if response.canceled || response.compact_revision > 0 {
                return Err(self.cancelled(&response));
            }
            if response.created {
                break;
            }
        }
        self.stream = Some(stream);
        Ok(())
    }

    /// The error for a watch etcd cancelled: compaction, or whatever etcd said.
    fn cancelled(&self, response: &WatchResponse) -> StoreError {
        let compacted = response.compact_revision;
        if compacted > 0 {
            self.store.saw_compacted(compacted);
            StoreError::Compacted {
                requested: self.last,
                compacted,
            }
        } else {
            StoreError::Backend {
                operation: "watch",
                source: format!("etcd cancelled the watch: {}", response.cancel_reason).into(),
            }
        }
    }

    /// The next item of the stream; `None` after the final error.
    async fn next(&mut self) -> Option<Result<Event, StoreError>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            let Some(stream) = self.stream.as_mut() else {
                if let Err(error) = self.reopen().await {
                    self.done = true;
                    return Some(Err(error));
                }
                continue;
            };
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => {
                    tracing::info!(revision = self.last, "etcd watch stream ended, resuming");
                    self.stream = None;
                    continue;
                }
                Err(error) => {
                    tracing::info!(revision = self.last, error = %error, "etcd watch stream broke, resuming");
                    self.stream = None;
                    continue;
                }
            };
            if response.compact_revision > 0 {
                self.done = true;
                return Some(Err(self.cancelled(&response)));
            }
            if response.canceled {
                tracing::info!(
                    revision = self.last,
                    reason = response.cancel_reason,
                    "etcd cancelled the watch, resuming"
                );
                self.stream = None;
                continue;
            }
            if let Err(error) = self.take_events(&response).await {
                self.done = true;
                return Some(Err(error));
            }
        }
    }

    /// Opens the watch again after a break, until it works or the history it needs is
    /// gone.
    async fn reopen(&mut self) -> Result<(), StoreError> {
        let mut pause = FIRST_REOPEN_PAUSE;
        loop {
            match self.store.compacted_revision().await {
                Ok(compacted) if self.last < compacted => {
                    return Err(StoreError::Compacted {
                        requested: self.last,
                        compacted,
                    });
                }
                Ok(_) => match self.open().await {
                    Ok(()) => return Ok(()),
                    Err(error @ StoreError::Compacted { .. }) => return Err(error),
                    Err(error) => {
                        tracing::warn!(revision = self.last, error = %error, "reopening the etcd watch failed");
                    }
                },
                Err(error) => {
                    tracing::warn!(revision = self.last, error = %error, "etcd unreachable while resuming a watch");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_REOPEN_PAUSE);
        }
    }

    /// Maps a response's events onto [`Event`]s in `pending`.
    async fn take_events(&mut self, response: &WatchResponse) -> Result<(), StoreError> {
        for event in &response.events {
            let kv = event.kv.as_ref().ok_or_else(|| StoreError::Corrupt {
                detail: "etcd sent a watch event without a key-value".into(),
            })?;
            let revision = kv.mod_revision;
            let prev = event
                .prev_kv
                .as_ref()
                .map(|prev| self.store.key_value(prev))
                .transpose()?;
            let mapped = match event.r#type() {
                EventType::Put => Event {
                    revision,
                    kind: EventKind::Put,
                    kv: self.store.key_value(kv)?,
                    prev: match prev {
                        Some(prev) => Some(prev),
                        None if kv.version == 1 => None,
                        None => return Err(self.history_lost(revision).await),
                    },
                },
                EventType::Delete => {
                    let Some(prev) = prev else {
                        return Err(self.history_lost(revision).await);
                    };
                    Event {
                        revision,
                        kind: EventKind::Delete,
                        kv: KeyValue {
                            mod_revision: revision,
                            ..prev.clone()
                        },
                        prev: Some(prev),
                    }
                }
            };
            self.last = self.last.max(revision);
            self.pending.push_back(mapped);
        }
        Ok(())
    }

    /// etcd could not send an event's previous value: the history before it was
    /// compacted while the event was on its way.
    async fn history_lost(&self, revision: Revision) -> StoreError {
        let compacted = self
            .store
            .compacted_revision()
            .await
            .unwrap_or(revision)
            .max(revision);
        StoreError::Compacted {
            requested: revision - 1,
            compacted,
        }
    }
}
