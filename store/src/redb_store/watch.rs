//! Watches: history from disk, then live events from the broadcast channel.
//!
//! Starting without gaps: subscribe to the live channel first, then read the history
//! `(after, R]` from one redb snapshot at revision R, then deliver live events skipping
//! revisions <= R. Every event > R was committed after the snapshot, so it was published
//! after the subscription and is either still in the channel or reported as lost
//! (`Lagged`). A lagging watcher re-reads what it missed from the on-disk history the
//! same way, so it never fails for being slow unless the history it needs was compacted
//! meanwhile (then `Err(Compacted)` is its last item).
//!
//! Each watcher is a small state machine polled by its consumer: no task per watcher,
//! one shared `Arc<Event>` per write, a prefix check per watcher.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use redb::{Database, ReadableDatabase};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use super::{
    HISTORY, INITIAL_REVISION, META, META_COMPACTED, META_REVISION, backend, read_meta, record,
};
use crate::{Event, Revision, StoreError, WatchStream};

/// History rows scanned per blocking read, bounding the memory and the time a catch-up
/// step holds a snapshot.
const HISTORY_CHUNK: usize = 1024;

/// Starts a watch of `prefix` after revision `after`.
pub(super) async fn start(
    db: Weak<Database>,
    events: &broadcast::Sender<Arc<Event>>,
    prefix: &str,
    after: Revision,
) -> Result<WatchStream, StoreError> {
    let live = events.subscribe();
    let prefix: Arc<str> = Arc::from(prefix);
    // The first chunk is read here so that a compacted `after` fails the call itself.
    let first = read_history(db.clone(), Arc::clone(&prefix), after).await?;
    let watch = Watch {
        db,
        prefix,
        live,
        last: first.last,
        pending: first.events.into(),
        catching_up: !first.complete,
        finished: false,
    };
    Ok(Box::pin(futures_util::stream::unfold(watch, Watch::step)))
}

struct Watch {
    /// Weak so that an open watch does not keep a closed store's file open.
    db: Weak<Database>,
    prefix: Arc<str>,
    live: broadcast::Receiver<Arc<Event>>,
    /// Every revision <= `last` has been delivered or skipped (not matching the prefix).
    last: Revision,
    /// Events read from history, not yet delivered.
    pending: VecDeque<Event>,
    /// History after `last` must be read from disk before going live.
    catching_up: bool,
    finished: bool,
}

impl Watch {
    async fn step(mut self) -> Option<(Result<Event, StoreError>, Self)> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            if self.catching_up {
                match read_history(self.db.clone(), Arc::clone(&self.prefix), self.last).await {
                    Ok(chunk) => {
                        self.last = chunk.last;
                        self.pending = chunk.events.into();
                        self.catching_up = !chunk.complete;
                    }
                    Err(error) => {
                        self.finished = true;
                        return Some((Err(error), self));
                    }
                }
                continue;
            }
            match self.live.recv().await {
                Ok(event) if event.revision <= self.last => {}
                Ok(event) if event.revision != self.last + 1 => {
                    // Cannot happen while the writer publishes every revision in order;
                    // if it ever does, the disk has the truth.
                    tracing::warn!(
                        prefix = %self.prefix,
                        last = self.last,
                        revision = event.revision,
                        "watch saw a revision gap; re-reading history"
                    );
                    self.catching_up = true;
                }
                Ok(event) => {
                    self.last = event.revision;
                    if event.kv.key.starts_with(&*self.prefix) {
                        return Some((Ok((*event).clone()), self));
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(
                        prefix = %self.prefix,
                        last = self.last,
                        missed,
                        "watcher lagged; catching up from history"
                    );
                    self.catching_up = true;
                }
                Err(RecvError::Closed) => {
                    self.finished = true;
                    return Some((Err(StoreError::Closed), self));
                }
            }
        }
    }
}

/// Up to [`HISTORY_CHUNK`] history rows after some revision, filtered by prefix.
struct Chunk {
    events: Vec<Event>,
    /// Every revision <= `last` was scanned.
    last: Revision,
    /// The scan reached the snapshot's current revision.
    complete: bool,
}

/// Reads the history after `after` from one snapshot, on the blocking pool.
async fn read_history(
    db: Weak<Database>,
    prefix: Arc<str>,
    after: Revision,
) -> Result<Chunk, StoreError> {
    tokio::task::spawn_blocking(move || {
        let db = db.upgrade().ok_or(StoreError::Closed)?;
        let txn = db
            .begin_read()
            .map_err(backend("begin a read transaction"))?;
        let meta = txn
            .open_table(META)
            .map_err(backend("open the meta table"))?;
        let compacted = read_meta(&meta, META_COMPACTED)?;
        let revision = read_meta(&meta, META_REVISION)?;
        if after < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted,
            });
        }
        let history = txn
            .open_table(HISTORY)
            .map_err(backend("open the history table"))?;
        let rows = history
            .range(after.saturating_add(1)..)
            .map_err(backend("scan the history"))?;
        let mut events = Vec::new();
        // Revision 1 is the empty store's and has no history row.
        let mut last = after.max(INITIAL_REVISION);
        for (scanned, row) in rows.enumerate() {
            if scanned == HISTORY_CHUNK {
                return Ok(Chunk {
                    events,
                    last,
                    complete: false,
                });
            }
            let (at, value) = row.map_err(backend("scan the history"))?;
            let at = at.value();
            if at != last.saturating_add(1) {
                return Err(StoreError::Corrupt {
                    detail: format!("history row of revision {} is missing", last + 1),
                });
            }
            let event = record::decode_event(at, value.value())?;
            if event.kv.key.starts_with(&*prefix) {
                events.push(event);
            }
            last = at;
        }
        Ok(Chunk {
            events,
            last: last.max(revision),
            complete: true,
        })
    })
    .await
    .map_err(|e| StoreError::Backend {
        operation: "run a history read",
        source: Box::new(e),
    })?
}
