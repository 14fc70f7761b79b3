//! [`RedbStore`]: the embedded [`Store`], one redb file.
//!
//! Layout (see [`record`] for the byte encodings):
//! - `fedingress_kv`: key → (create revision, mod revision, value), the current state;
//! - `fedingress_history`: revision → event (kind, key, value, create revision, prev kv),
//!   one row per write, kept until compaction so a watch resumes after a restart;
//! - `fedingress_meta`: `format`, `revision` (the current revision) and `compacted`.
//!
//! Writes go through one writer thread ([`writer`]) that group-commits every queued
//! request into one durable redb transaction; reads run on tokio's blocking pool against
//! redb's MVCC snapshots; watches ([`watch`]) fan out from a broadcast channel and fall
//! back to the on-disk history when they lag; ranges at a past revision ([`snapshot`])
//! correct the current table with the history written since.

mod record;
mod snapshot;
mod watch;
mod writer;

use std::any::Any;
use std::ops::Bound;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread::JoinHandle;

use bytes::Bytes;
use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition,
};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::{
    BoxError, Event, KeyValue, Precondition, RangeResult, Revision, Store, StoreError, WatchStream,
};
use writer::{Op, Reply, Request};

const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("fedingress_kv");
const HISTORY: TableDefinition<i64, &[u8]> = TableDefinition::new("fedingress_history");
const META: TableDefinition<&str, i64> = TableDefinition::new("fedingress_meta");

const META_FORMAT: &str = "format";
const META_REVISION: &str = "revision";
const META_COMPACTED: &str = "compacted";
/// Version of the on-disk layout; bump on incompatible changes.
const FORMAT_VERSION: i64 = 1;
/// Revision of an empty store (etcd's convention: the first write gets 2).
const INITIAL_REVISION: Revision = 1;

/// Live events buffered (shared by all watchers) before a slow watcher lags and re-reads
/// history from disk. Events carry whole objects (a FederatedIngress status with 1,000
/// clusters is ~90 KB), so this bounds memory too.
const WATCH_BUFFER: usize = 256;
/// Write requests queued for the writer before `put`/`delete` wait for room, as a
/// multiple of the batch size.
const QUEUE_BATCHES: usize = 4;

/// How to open a [`RedbStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedbOptions {
    /// Bound on redb's page cache, in bytes.
    pub cache_size_bytes: usize,
    /// Most write requests committed together in one transaction (one fsync); 0 counts
    /// as 1.
    pub max_batch: usize,
}

impl Default for RedbOptions {
    /// 64 MiB of cache, batches of up to 256 writes.
    fn default() -> Self {
        Self {
            cache_size_bytes: 64 * 1024 * 1024,
            max_batch: 256,
        }
    }
}

/// The embedded [`Store`]: one redb file, durable group-committed writes, history on
/// disk until compaction.
///
/// # Guarantees
/// - A write is acknowledged only after its transaction committed with immediate
///   durability: it survives `kill -9` and power loss (as far as fsync does).
/// - Concurrent writes share transactions (up to [`RedbOptions::max_batch`]) and so
///   fsyncs; each keeps its own precondition, evaluated in arrival order.
/// - Nothing blocks the async runtime: writes run on a dedicated thread, reads and
///   history scans on tokio's blocking pool. [`RedbStore::open`] itself blocks.
///
/// # Assumptions
/// One process opens the file at a time (redb locks it; a second open fails).
pub struct RedbStore {
    db: Arc<Database>,
    requests: mpsc::Sender<Request>,
    events: broadcast::Sender<Arc<Event>>,
    counters: Arc<Counters>,
    writer: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("path", &self.path)
            .field("revision", &self.counters.revision.load(Ordering::Relaxed))
            .field(
                "compacted",
                &self.counters.compacted.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

/// The revisions as of the last commit, kept for cheap [`Store::revision`] calls.
struct Counters {
    revision: AtomicI64,
    compacted: AtomicI64,
}

impl RedbStore {
    /// Opens the store file at `path`, creating it (not its directory) when missing.
    ///
    /// Blocks: the whole file is verified against its checksums on open (a corrupt file
    /// is an error, never a panic), which takes time proportional to its size. Call it
    /// before serving, or from `spawn_blocking`.
    ///
    /// # Errors
    /// [`StoreError::Open`] when the file cannot be opened, is not a redb database, is
    /// corrupt or is open elsewhere; [`StoreError::Corrupt`] when it is a redb database
    /// but not one this code wrote.
    pub fn open(path: &Path, options: RedbOptions) -> Result<Self, StoreError> {
        Self::open_with_watch_buffer(path, options, WATCH_BUFFER)
    }

    fn open_with_watch_buffer(
        path: &Path,
        options: RedbOptions,
        watch_buffer: usize,
    ) -> Result<Self, StoreError> {
        let open_error = |source: BoxError| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        // redb documents that a plain open "may panic" on a file corrupted outside redb;
        // with the integrity check it reports Corrupted instead. The catch_unwind is the
        // second line of defence: a bad file must never take the process down.
        let db = catch_unwind(AssertUnwindSafe(|| {
            let mut builder = redb::Builder::new();
            builder
                .set_cache_size(options.cache_size_bytes)
                .set_check_integrity_on_open(true);
            builder.create(path)
        }))
        .map_err(|panic| open_error(panic_error("open the database", panic.as_ref())))?
        .map_err(|e| open_error(Box::new(e)))?;

        let (revision, compacted) =
            catch_unwind(AssertUnwindSafe(|| initialize(&db))).map_err(|panic| {
                open_error(panic_error("read the store metadata", panic.as_ref()))
            })??;

        let db = Arc::new(db);
        let max_batch = options.max_batch.max(1);
        let (requests, queue) = mpsc::channel(max_batch.saturating_mul(QUEUE_BATCHES));
        let (events, _) = broadcast::channel(watch_buffer.max(1));
        let counters = Arc::new(Counters {
            revision: AtomicI64::new(revision),
            compacted: AtomicI64::new(compacted),
        });
        let writer = writer::Writer {
            db: Arc::clone(&db),
            queue,
            events: events.clone(),
            counters: Arc::clone(&counters),
            max_batch,
        };
        let writer = std::thread::Builder::new()
            .name("fedingress-store-writer".to_owned())
            .spawn(move || writer.run())
            .map_err(|e| open_error(Box::new(e)))?;

        tracing::info!(
            path = %path.display(),
            revision,
            compacted,
            cache_size_bytes = options.cache_size_bytes,
            max_batch,
            "store opened"
        );
        Ok(Self {
            db,
            requests,
            events,
            counters,
            writer: Some(writer),
            path: path.to_owned(),
        })
    }

    /// Where the store file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops accepting writes, lets the writer finish what is queued, and closes the file
    /// once in-flight reads are done, so it can be opened again. Open watches end with
    /// `Err(Closed)`.
    ///
    /// Dropping the store does the same in the background.
    ///
    /// # Errors
    /// [`StoreError::Backend`] when the writer thread had panicked.
    pub async fn close(self) -> Result<(), StoreError> {
        let Self {
            db,
            requests,
            events,
            writer,
            path,
            ..
        } = self;
        drop(requests);
        drop(events);
        drop(db);
        if let Some(writer) = writer {
            tokio::task::spawn_blocking(move || writer.join())
                .await
                .map_err(|e| StoreError::Backend {
                    operation: "wait for the writer thread",
                    source: Box::new(e),
                })?
                .map_err(|panic| StoreError::Backend {
                    operation: "stop the writer thread",
                    source: panic_error("run the writer", panic.as_ref()),
                })?;
        }
        tracing::info!(path = %path.display(), "store closed");
        Ok(())
    }

    /// Runs `read` against a fresh snapshot on the blocking pool.
    async fn read<T, F>(&self, read: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&ReadTransaction) -> Result<T, StoreError> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        tokio::task::spawn_blocking(move || {
            let txn = db
                .begin_read()
                .map_err(backend("begin a read transaction"))?;
            read(&txn)
        })
        .await
        .map_err(|e| StoreError::Backend {
            operation: "run a read",
            source: Box::new(e),
        })?
    }

    /// Queues a write and waits for the writer's answer.
    async fn write<T>(
        &self,
        op: Op,
        reply: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Reply,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request {
                op,
                reply: reply(tx),
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }
}

#[async_trait::async_trait]
impl Store for RedbStore {
    async fn revision(&self) -> Result<Revision, StoreError> {
        Ok(self.counters.revision.load(Ordering::Acquire))
    }

    async fn compacted_revision(&self) -> Result<Revision, StoreError> {
        Ok(self.counters.compacted.load(Ordering::Acquire))
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        let key = key.to_owned();
        self.read(move |txn| {
            let kv = txn.open_table(KV).map_err(backend("open the key table"))?;
            get_current(&kv, &key)
        })
        .await
    }

    async fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RangeResult, StoreError> {
        let prefix = prefix.to_owned();
        let start_after = start_after.map(str::to_owned);
        self.read(move |txn| {
            let meta = txn
                .open_table(META)
                .map_err(backend("open the meta table"))?;
            let revision = read_meta(&meta, META_REVISION)?;
            let kv = txn.open_table(KV).map_err(backend("open the key table"))?;
            let lower = match &start_after {
                Some(after) if after.as_str() >= prefix.as_str() => Bound::Excluded(after.as_str()),
                _ => Bound::Included(prefix.as_str()),
            };
            let mut kvs = Vec::new();
            let mut more = false;
            let range = kv
                .range::<&str>((lower, Bound::Unbounded))
                .map_err(backend("scan keys"))?;
            for entry in range {
                let (key, value) = entry.map_err(backend("scan keys"))?;
                let key = key.value();
                if !key.starts_with(prefix.as_str()) {
                    break;
                }
                if limit != 0 && kvs.len() == limit {
                    more = true;
                    break;
                }
                kvs.push(record::decode_current(key, value.value())?);
            }
            Ok(RangeResult {
                kvs,
                more,
                revision,
            })
        })
        .await
    }

    async fn range_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Revision,
    ) -> Result<RangeResult, StoreError> {
        let prefix = prefix.to_owned();
        let start_after = start_after.map(str::to_owned);
        self.read(move |txn| {
            snapshot::range_at(txn, &prefix, start_after.as_deref(), limit, revision)
        })
        .await
    }

    async fn put(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
    ) -> Result<KeyValue, StoreError> {
        let op = Op::Put {
            key: key.to_owned(),
            value,
            precondition,
        };
        self.write(op, Reply::Put).await
    }

    async fn delete(&self, key: &str, precondition: Precondition) -> Result<Event, StoreError> {
        let op = Op::Delete {
            key: key.to_owned(),
            precondition,
        };
        self.write(op, Reply::Delete).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        watch::start(Arc::downgrade(&self.db), &self.events, prefix, after).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.write(Op::Compact { revision }, Reply::Compact).await
    }
}

/// Creates the tables of a new store, or checks those of an existing one; returns the
/// current and compacted revisions.
fn initialize(db: &Database) -> Result<(Revision, Revision), StoreError> {
    let txn = db
        .begin_write()
        .map_err(backend("begin the opening transaction"))?;
    let (revision, compacted, created) = {
        let kv = txn.open_table(KV).map_err(backend("open the key table"))?;
        let history = txn
            .open_table(HISTORY)
            .map_err(backend("open the history table"))?;
        let mut meta = txn
            .open_table(META)
            .map_err(backend("open the meta table"))?;
        let format = meta
            .get(META_FORMAT)
            .map_err(backend("read the store format"))?
            .map(|v| v.value());
        match format {
            Some(FORMAT_VERSION) => {
                let revision = read_meta(&meta, META_REVISION)?;
                let compacted = read_meta(&meta, META_COMPACTED)?;
                if revision < INITIAL_REVISION || compacted < 0 || compacted > revision {
                    return Err(StoreError::Corrupt {
                        detail: format!(
                            "impossible revisions: current {revision}, compacted {compacted}"
                        ),
                    });
                }
                (revision, compacted, false)
            }
            Some(other) => {
                return Err(StoreError::Corrupt {
                    detail: format!(
                        "unknown store format {other} (this code reads {FORMAT_VERSION})"
                    ),
                });
            }
            None => {
                let empty = |len: Result<u64, redb::StorageError>| {
                    len.map(|n| n == 0).map_err(backend("count rows"))
                };
                if !(empty(kv.len())? && empty(history.len())? && empty(meta.len())?) {
                    return Err(StoreError::Corrupt {
                        detail: "the file holds data but no store format marker".to_owned(),
                    });
                }
                for (name, value) in [
                    (META_FORMAT, FORMAT_VERSION),
                    (META_REVISION, INITIAL_REVISION),
                    (META_COMPACTED, 0),
                ] {
                    meta.insert(name, value)
                        .map_err(backend("write the store metadata"))?;
                }
                (INITIAL_REVISION, 0, true)
            }
        }
    };
    if created {
        txn.commit().map_err(backend("commit the new store"))?;
    } else {
        // Nothing was written; committing would only cost an fsync.
        txn.abort()
            .map_err(backend("end the opening transaction"))?;
    }
    Ok((revision, compacted))
}

/// Reads a required meta entry.
fn read_meta(
    meta: &impl ReadableTable<&'static str, i64>,
    name: &str,
) -> Result<Revision, StoreError> {
    meta.get(name)
        .map_err(backend("read the store metadata"))?
        .map(|v| v.value())
        .ok_or_else(|| StoreError::Corrupt {
            detail: format!("store metadata {name:?} is missing"),
        })
}

/// Reads a key's current value.
fn get_current(
    kv: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<Option<KeyValue>, StoreError> {
    kv.get(key)
        .map_err(backend("read a key"))?
        .map(|value| record::decode_current(key, value.value()))
        .transpose()
}

/// Maps a redb error to [`StoreError::Backend`].
fn backend<E>(operation: &'static str) -> impl FnOnce(E) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| StoreError::Backend {
        operation,
        source: Box::new(e),
    }
}

/// Turns a caught panic into an error source.
fn panic_error(doing: &str, panic: &(dyn Any + Send)) -> BoxError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    format!("panicked trying to {doing}: {message}").into()
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    fn fresh(dir: &tempfile::TempDir, watch_buffer: usize) -> RedbStore {
        RedbStore::open_with_watch_buffer(
            &dir.path().join("store.redb"),
            RedbOptions::default(),
            watch_buffer,
        )
        .unwrap()
    }

    /// A watcher that falls behind the live buffer re-reads what it missed from disk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lagging_watcher_catches_up_from_history() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(fresh(&dir, 4));
        let start = store.revision().await.unwrap();
        let mut watch = store.watch("/lag/", start).await.unwrap();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for i in 0..25 {
                        let key = format!("/lag/{w}/{i}");
                        store
                            .put(&key, Bytes::from_static(b"v"), Precondition::None)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        for expected in start + 1..=start + 100 {
            let event = watch.next().await.unwrap().unwrap();
            assert_eq!(event.revision, expected);
        }
    }

    /// A watcher that lagged past a compaction gets Compacted as its last item.
    #[tokio::test]
    async fn lagging_watcher_past_compaction_gets_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh(&dir, 2);
        let start = store.revision().await.unwrap();
        let mut watch = store.watch("/c/", start).await.unwrap();
        for i in 0..10 {
            store
                .put(&format!("/c/{i}"), Bytes::new(), Precondition::None)
                .await
                .unwrap();
        }
        store.compact(start + 5).await.unwrap();
        let mut last = None;
        while let Some(item) = watch.next().await {
            last = Some(item);
        }
        match last {
            Some(Err(StoreError::Compacted {
                requested,
                compacted,
            })) => {
                assert_eq!(compacted, start + 5);
                assert!(requested < compacted);
            }
            other => panic!("expected Compacted as the last item, got {other:?}"),
        }
    }

    /// Closing ends open watches with Closed and releases the file.
    #[tokio::test]
    async fn close_ends_watches_and_releases_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh(&dir, 16);
        let mut watch = store.watch("", 0).await.unwrap();
        store.close().await.unwrap();
        assert!(matches!(watch.next().await, Some(Err(StoreError::Closed))));
        assert!(watch.next().await.is_none());
        let again = fresh(&dir, 16);
        assert_eq!(again.revision().await.unwrap(), INITIAL_REVISION);
    }
}
