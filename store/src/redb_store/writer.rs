//! The writer thread: group commit.
//!
//! One thread owns every write. It takes all the requests queued (up to `max_batch`),
//! applies them in order inside ONE redb write transaction — a failed precondition fails
//! only its own request — commits once with immediate durability (one fsync for the
//! batch), then updates the revision counters, publishes the events to watchers, and
//! answers each request. A batch where nothing changed is not committed at all.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Database, Durability, Table};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::{
    Counters, HISTORY, KV, META, META_COMPACTED, META_REVISION, backend, get_current, panic_error,
    read_meta, record,
};
use crate::{Event, EventKind, KeyValue, Precondition, Revision, StoreError};

/// Longest a batch waits for more writers before committing.
const MAX_LINGER: Duration = Duration::from_millis(1);
/// How often a lingering batch looks for more requests.
const LINGER_STEP: Duration = Duration::from_micros(20);

/// One queued write.
pub(super) struct Request {
    pub(super) op: Op,
    pub(super) reply: Reply,
}

/// What to write.
pub(super) enum Op {
    Put {
        key: String,
        value: Bytes,
        precondition: Precondition,
    },
    Delete {
        key: String,
        precondition: Precondition,
    },
    Compact {
        revision: Revision,
    },
}

/// Where to send the answer, typed per operation.
pub(super) enum Reply {
    Put(oneshot::Sender<Result<KeyValue, StoreError>>),
    Delete(oneshot::Sender<Result<Event, StoreError>>),
    Compact(oneshot::Sender<Result<(), StoreError>>),
}

/// What one request did: `Some(event)` for a put or delete, `None` for a compaction.
type Outcome = Result<Option<Event>, StoreError>;

/// The state of the writer thread.
pub(super) struct Writer {
    pub(super) db: Arc<Database>,
    pub(super) queue: mpsc::Receiver<Request>,
    pub(super) events: broadcast::Sender<Arc<Event>>,
    pub(super) counters: Arc<Counters>,
    pub(super) max_batch: usize,
}

/// The result of a committed (or skipped) batch.
struct Applied {
    outcomes: Vec<Outcome>,
    revision: Revision,
    compacted: Revision,
}

impl Writer {
    /// Serves requests until every sender is gone and the queue is drained.
    pub(super) fn run(mut self) {
        let mut batch = Vec::with_capacity(self.max_batch);
        let mut last_batch = 1;
        let mut last_commit = Duration::ZERO;
        while let Some(first) = self.queue.blocking_recv() {
            batch.push(first);
            self.drain(&mut batch);
            // The writers answered by the previous commit come back microseconds later;
            // without waiting for them, batches alternate between a few requests and the
            // rest, halving what each fsync carries. Wait for as many as last time, but
            // never longer than a fraction of what a commit costs.
            let linger_until = Instant::now() + (last_commit / 4).min(MAX_LINGER);
            while batch.len() < last_batch.min(self.max_batch) && Instant::now() < linger_until {
                std::thread::sleep(LINGER_STEP);
                self.drain(&mut batch);
            }
            last_batch = batch.len();
            let started = Instant::now();
            self.process(&mut batch);
            last_commit = started.elapsed();
        }
        tracing::debug!("store writer stopped");
    }

    /// Moves queued requests into `batch`, up to `max_batch`.
    fn drain(&mut self, batch: &mut Vec<Request>) {
        while batch.len() < self.max_batch {
            match self.queue.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
    }

    /// Applies, commits, publishes and answers one batch; leaves `batch` empty.
    fn process(&self, batch: &mut Vec<Request>) {
        let started = Instant::now();
        let applied =
            catch_unwind(AssertUnwindSafe(|| apply(&self.db, batch))).unwrap_or_else(|panic| {
                Err(StoreError::Backend {
                    operation: "apply a write batch",
                    source: panic_error("apply a write batch", panic.as_ref()),
                })
            });
        let applied = match applied {
            Ok(applied) => applied,
            Err(error) => {
                tracing::error!(
                    requests = batch.len(),
                    error = &error as &dyn std::error::Error,
                    "write batch failed; no request in it was applied"
                );
                fail_all(batch, error);
                return;
            }
        };
        self.counters
            .revision
            .store(applied.revision, Ordering::Release);
        let previous = self
            .counters
            .compacted
            .swap(applied.compacted, Ordering::AcqRel);
        if previous != applied.compacted {
            tracing::info!(
                compacted = applied.compacted,
                previous,
                "store history compacted"
            );
        }
        tracing::debug!(
            requests = batch.len(),
            revision = applied.revision,
            elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "write batch applied"
        );
        // Publish before answering: once a writer has its answer, every watch already
        // open has the event queued.
        let outcomes: Vec<Result<Option<Arc<Event>>, StoreError>> = applied
            .outcomes
            .into_iter()
            .map(|outcome| {
                outcome.map(|event| {
                    event.map(|event| {
                        let event = Arc::new(event);
                        // No receivers is fine: nobody is watching.
                        let _ = self.events.send(Arc::clone(&event));
                        event
                    })
                })
            })
            .collect();
        for (request, outcome) in batch.drain(..).zip(outcomes) {
            answer(request.reply, outcome);
        }
    }
}

/// Sends each request's answer; a caller that went away is not an error.
fn answer(reply: Reply, outcome: Result<Option<Arc<Event>>, StoreError>) {
    fn event_of(outcome: Result<Option<Arc<Event>>, StoreError>) -> Result<Arc<Event>, StoreError> {
        outcome?.ok_or_else(|| StoreError::Backend {
            operation: "apply a write",
            source: "the write produced no event".into(),
        })
    }
    match reply {
        Reply::Put(tx) => {
            let _ = tx.send(event_of(outcome).map(|event| event.kv.clone()));
        }
        Reply::Delete(tx) => {
            let _ = tx.send(event_of(outcome).map(|event| (*event).clone()));
        }
        Reply::Compact(tx) => {
            let _ = tx.send(outcome.map(|_| ()));
        }
    }
}

/// Answers every request of a failed batch with (a copy of) its error.
fn fail_all(batch: &mut Vec<Request>, error: StoreError) {
    if batch.len() == 1 {
        if let Some(request) = batch.pop() {
            answer(request.reply, Err(error));
        }
        return;
    }
    let shared = Arc::new(error);
    for request in batch.drain(..) {
        let error = StoreError::Backend {
            operation: "commit a write batch",
            source: Box::new(SharedError(Arc::clone(&shared))),
        };
        answer(request.reply, Err(error));
    }
}

/// One batch failure shared by all the requests in it.
#[derive(Debug)]
struct SharedError(Arc<StoreError>);

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(self.0.as_ref())
    }
}

type KvTable<'txn> = Table<'txn, &'static str, &'static [u8]>;
type HistoryTable<'txn> = Table<'txn, i64, &'static [u8]>;

/// Applies a batch in one transaction and commits it if anything changed.
///
/// The outer error fails the whole batch (nothing applied); per-request failures
/// (preconditions, a corrupt current value) are in the outcomes.
fn apply(db: &Database, batch: &[Request]) -> Result<Applied, StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(backend("begin a write transaction"))?;
    txn.set_durability(Durability::Immediate)
        .map_err(backend("set write durability"))?;
    let mut outcomes = Vec::with_capacity(batch.len());
    let (revision, compacted, changed) = {
        let mut kv = txn.open_table(KV).map_err(backend("open the key table"))?;
        let mut history = txn
            .open_table(HISTORY)
            .map_err(backend("open the history table"))?;
        let mut meta = txn
            .open_table(META)
            .map_err(backend("open the meta table"))?;
        let start_revision = read_meta(&meta, META_REVISION)?;
        let start_compacted = read_meta(&meta, META_COMPACTED)?;
        let mut revision = start_revision;
        let mut compacted = start_compacted;
        for request in batch {
            let outcome = match &request.op {
                Op::Put {
                    key,
                    value,
                    precondition,
                } => put(
                    &mut kv,
                    &mut history,
                    &mut revision,
                    key,
                    value,
                    *precondition,
                )?,
                Op::Delete { key, precondition } => {
                    delete(&mut kv, &mut history, &mut revision, key, *precondition)?
                }
                Op::Compact { revision: target } => {
                    compact(&mut history, revision, &mut compacted, *target)?
                }
            };
            outcomes.push(outcome);
        }
        let changed = revision != start_revision || compacted != start_compacted;
        if changed {
            meta.insert(META_REVISION, revision)
                .map_err(backend("write the store revision"))?;
            meta.insert(META_COMPACTED, compacted)
                .map_err(backend("write the compacted revision"))?;
        }
        (revision, compacted, changed)
    };
    if changed {
        txn.commit().map_err(backend("commit a write batch"))?;
    } else {
        txn.abort().map_err(backend("abort an empty write batch"))?;
    }
    Ok(Applied {
        outcomes,
        revision,
        compacted,
    })
}

/// Fails unless `precondition` holds for `current`.
fn check(
    key: &str,
    precondition: Precondition,
    current: Option<&KeyValue>,
) -> Result<(), StoreError> {
    let holds = match (precondition, current) {
        (Precondition::None, _) => true,
        (Precondition::Absent, current) => current.is_none(),
        (Precondition::ModRevision(expected), Some(current)) => current.mod_revision == expected,
        (Precondition::ModRevision(_), None) => false,
    };
    if holds {
        Ok(())
    } else {
        Err(StoreError::PreconditionFailed {
            key: key.to_owned(),
            current: current.cloned(),
        })
    }
}

fn put(
    kv: &mut KvTable<'_>,
    history: &mut HistoryTable<'_>,
    revision: &mut Revision,
    key: &str,
    value: &Bytes,
    precondition: Precondition,
) -> Result<Outcome, StoreError> {
    let current = match get_current(kv, key) {
        Ok(current) => current,
        Err(error) => return Ok(Err(error)),
    };
    if let Err(error) = check(key, precondition, current.as_ref()) {
        return Ok(Err(error));
    }
    let next = *revision + 1;
    let event = Event {
        revision: next,
        kind: EventKind::Put,
        kv: KeyValue {
            key: key.to_owned(),
            value: value.clone(),
            create_revision: current.as_ref().map_or(next, |c| c.create_revision),
            mod_revision: next,
        },
        prev: current,
    };
    record_event(kv, history, &event)?;
    *revision = next;
    Ok(Ok(Some(event)))
}

fn delete(
    kv: &mut KvTable<'_>,
    history: &mut HistoryTable<'_>,
    revision: &mut Revision,
    key: &str,
    precondition: Precondition,
) -> Result<Outcome, StoreError> {
    let prev = match get_current(kv, key) {
        Ok(Some(current)) => current,
        Ok(None) => {
            return Ok(Err(StoreError::NotFound {
                key: key.to_owned(),
            }));
        }
        Err(error) => return Ok(Err(error)),
    };
    if let Err(error) = check(key, precondition, Some(&prev)) {
        return Ok(Err(error));
    }
    let next = *revision + 1;
    let event = Event {
        revision: next,
        kind: EventKind::Delete,
        kv: KeyValue {
            mod_revision: next,
            ..prev.clone()
        },
        prev: Some(prev),
    };
    record_event(kv, history, &event)?;
    *revision = next;
    Ok(Ok(Some(event)))
}

/// Writes an event's effect on the current table and its history row.
fn record_event(
    kv: &mut KvTable<'_>,
    history: &mut HistoryTable<'_>,
    event: &Event,
) -> Result<(), StoreError> {
    match event.kind {
        EventKind::Put => {
            kv.insert(
                event.kv.key.as_str(),
                record::encode_current(&event.kv).as_slice(),
            )
            .map_err(backend("write a key"))?;
        }
        EventKind::Delete => {
            kv.remove(event.kv.key.as_str())
                .map_err(backend("delete a key"))?;
        }
    }
    history
        .insert(event.revision, record::encode_event(event).as_slice())
        .map_err(backend("append to the history"))?;
    Ok(())
}

fn compact(
    history: &mut HistoryTable<'_>,
    revision: Revision,
    compacted: &mut Revision,
    target: Revision,
) -> Result<Outcome, StoreError> {
    if target > revision {
        return Ok(Err(StoreError::FutureRevision {
            requested: target,
            current: revision,
        }));
    }
    if target <= *compacted {
        return Ok(Ok(None));
    }
    history
        .retain_in(..=target, |_, _| false)
        .map_err(backend("discard compacted history"))?;
    *compacted = target;
    Ok(Ok(None))
}
