//! fedingress-store: where the API server keeps its objects.
//!
//! The model is etcd v3's: every successful write gets the next global [`Revision`]
//! (Kubernetes' `resourceVersion`); keys are compared-and-swapped on their modification
//! revision ([`Precondition`]); reads are ranges over a key prefix; a watch streams every
//! [`Event`] on a prefix after a revision, first from the stored history and then live;
//! a range can also read a past revision ([`Store::range_at`], a snapshot to page
//! through, as Kubernetes' consistent lists and `resourceVersionMatch=Exact` need);
//! compaction discards old history, after which a watch or a read from before it fails
//! with [`StoreError::Compacted`] (HTTP 410 Gone in the API).
//!
//! Entry types:
//! - [`Store`], the trait the API server is written against;
//! - [`RedbStore`] (with [`RedbOptions`]), the embedded implementation: one redb file,
//!   group-committed durable writes, history kept on disk until compaction;
//! - `EtcdStore` (with `EtcdOptions`; cargo feature `etcd`, which needs `protoc` to
//!   build), the distributed implementation on etcd v3, for several API server replicas;
//! - [`Coordination`] (leases, leader election, fenced writes), implemented by the stores
//!   several processes can share (`EtcdStore`);
//! - [`battery`] (cargo feature `battery`), the implementation-independent test battery
//!   every `Store` must pass;
//! - `etcd_process` (cargo feature `etcd-process`), test support that runs real etcd
//!   servers (one member or a three-member cluster) on loopback.
//!
//! What does not belong here: anything that knows about Kubernetes objects, JSON,
//! resource kinds or key layout (the API server owns those; values are opaque bytes),
//! and HTTP status codes.
//!
//! # Revisions
//!
//! As in etcd, an empty store is at revision 1 and the first write gets revision 2. Each
//! successful `put` or `delete` advances the revision by exactly one; a failed
//! precondition, a read or a compaction does not. [`Store::compacted_revision`] is 0
//! until the first compaction.

#[cfg(feature = "battery")]
pub mod battery;
mod coordination;
#[cfg(feature = "etcd-process")]
pub mod etcd_process;
#[cfg(feature = "etcd")]
mod etcd_store;
mod redb_store;

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

pub use coordination::{Coordination, Fence, Lease, SharedStore};
#[cfg(feature = "etcd")]
pub use etcd_store::{EtcdOptions, EtcdStore, EtcdTls};
pub use redb_store::{RedbOptions, RedbStore};

/// A global store revision (Kubernetes' `resourceVersion`).
pub type Revision = i64;

/// A key with its value and the revisions that created and last modified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value, opaque to the store.
    pub value: Bytes,
    /// Revision of the write that created the key (since its last deletion).
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
}

/// What must hold for a write to go ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Nothing: the write always goes ahead.
    None,
    /// The key must not exist (create).
    Absent,
    /// The key must exist with exactly this modification revision (compare-and-swap).
    ModRevision(Revision),
}

/// What an [`Event`] did to its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted.
    Delete,
}

/// One write, as seen by watchers.
#[derive(Clone, Debug)]
pub struct Event {
    /// Revision of the write.
    pub revision: Revision,
    /// Put or delete.
    pub kind: EventKind,
    /// For a put, the new key-value. For a delete, the deleted key-value with
    /// `mod_revision` set to the deletion's revision.
    pub kv: KeyValue,
    /// The key-value before this event, if the key existed.
    pub prev: Option<KeyValue>,
}

/// The answer to [`Store::range`].
#[derive(Clone, Debug)]
pub struct RangeResult {
    /// Matching key-values in key order.
    pub kvs: Vec<KeyValue>,
    /// Whether more keys match after the last one returned (the limit cut the answer).
    pub more: bool,
    /// The store revision the read saw; `kvs` are exactly the keys at this revision.
    pub revision: Revision,
}

/// A stream of watch events; see [`Store::watch`].
pub type WatchStream = Pin<Box<dyn futures_util::Stream<Item = Result<Event, StoreError>> + Send>>;

/// A boxed error source, for backends' own error types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The write's [`Precondition`] did not hold; `current` is the key as it is now.
    #[error("precondition failed on key {key:?}")]
    PreconditionFailed {
        /// The key written.
        key: String,
        /// The key's current value, `None` when it does not exist.
        current: Option<KeyValue>,
    },
    /// The key to delete does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The history a watch or a past read needs has been compacted away.
    #[error("revision {requested} is compacted (history kept after revision {compacted})")]
    Compacted {
        /// The revision the watch needed history after.
        requested: Revision,
        /// The store's compacted revision.
        compacted: Revision,
    },
    /// A revision beyond the store's current revision was given (to compact, or to read
    /// at).
    #[error("revision {requested} is beyond the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// A fenced write ([`Coordination::fenced`]) was refused: the writer is no longer
    /// the holder of the election key (it lost its lease, or resigned).
    #[error("write refused: leadership of {key:?} was lost")]
    Fenced {
        /// The election key.
        key: String,
    },
    /// The store is shut down (or its writer died); nothing more can be done with it.
    #[error("store is closed")]
    Closed,
    /// The store could not be opened.
    #[error("cannot open store {}", path.display())]
    Open {
        /// Where the store was to be opened.
        path: PathBuf,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// Data read from the store is not what this code wrote.
    #[error("store data is corrupt: {detail}")]
    Corrupt {
        /// What was wrong, and where.
        detail: String,
    },
    /// The store could not be reached in time (no member answered, no leader): the
    /// request changed nothing, and sending it again later may succeed.
    #[error("store unavailable: could not {operation}")]
    Unavailable {
        /// What was being done, e.g. "write a key".
        operation: &'static str,
        /// Why, as the last try failed.
        #[source]
        source: BoxError,
    },
    /// A write's answer was lost (the connection broke or no answer came in time after
    /// it was sent): it may or may not have been applied. Read before writing again.
    #[error("store did not confirm the write: could not tell whether it did {operation}")]
    Indeterminate {
        /// What was being done, e.g. "write a key".
        operation: &'static str,
        /// Why the answer was lost.
        #[source]
        source: BoxError,
    },
    /// The storage backend failed.
    #[error("store backend failed to {operation}")]
    Backend {
        /// What was being done, e.g. "commit a write batch".
        operation: &'static str,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
}

/// An etcd-like versioned key-value store.
///
/// Keys are UTF-8 strings ordered bytewise; values are opaque bytes. All methods are
/// cancel-safe in the sense that dropping a write's future never tears the write: it is
/// either applied whole or not at all (whether it was applied is then unknown, as with
/// any lost reply).
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// The current revision: that of the last successful write (1 for an empty store).
    async fn revision(&self) -> Result<Revision, StoreError>;

    /// The revision up to which history has been discarded (0 before any compaction).
    async fn compacted_revision(&self) -> Result<Revision, StoreError>;

    /// The key's current value, `None` when it does not exist.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError>;

    /// Keys starting with `prefix` in key order, strictly after `start_after` when given,
    /// at most `limit` (0 = all).
    ///
    /// To page: pass the last key of one answer as `start_after` of the next while
    /// `more` is true. Each page is a consistent snapshot at its own `revision`.
    async fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RangeResult, StoreError>;

    /// The keys [`Store::range`] would have returned at `revision` (a past snapshot):
    /// keys starting with `prefix` as they were right after the write of `revision`, in
    /// key order, strictly after `start_after`, at most `limit` (0 = all); the answer's
    /// `revision` is `revision`, its `more` says whether more keys matched at it.
    ///
    /// Paging through a snapshot: pass the same `revision` and the last key of one
    /// answer as `start_after` of the next; writes made meanwhile change nothing.
    ///
    /// # Errors
    /// [`StoreError::Compacted`] when `revision` < the compacted revision (its history
    /// is gone); [`StoreError::FutureRevision`] when `revision` is beyond the current
    /// revision.
    async fn range_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Revision,
    ) -> Result<RangeResult, StoreError>;

    /// Writes `value` if `precondition` holds; the returned kv carries the new revision.
    ///
    /// # Errors
    /// [`StoreError::PreconditionFailed`] (with the current kv) when the precondition does
    /// not hold; backend errors. An `Ok` means the write is durable.
    async fn put(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
    ) -> Result<KeyValue, StoreError>;

    /// Deletes `key` if `precondition` holds; returns the Delete event (its revision, the
    /// deleted kv).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the key does not exist (whatever the precondition);
    /// [`StoreError::PreconditionFailed`] when it exists but the precondition does not
    /// hold.
    async fn delete(&self, key: &str, precondition: Precondition) -> Result<Event, StoreError>;

    /// Every event on keys starting with `prefix` whose revision is > `after`, in revision
    /// order, first from history then live, without gaps or duplicates.
    ///
    /// # Errors
    /// [`StoreError::Compacted`] at once when `after` < the compacted revision. A watcher
    /// that falls so far behind that the history it needs gets compacted receives
    /// `Err(Compacted)` as its last item; a store that shuts down ends its watches with
    /// `Err(Closed)`. Dropping the stream cancels the watch.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError>;

    /// Discards the history of revisions <= `revision` (a watch with `after >= revision`
    /// still works); current keys are kept. Compacting to or below the compacted revision
    /// does nothing.
    ///
    /// # Errors
    /// [`StoreError::FutureRevision`] when `revision` is beyond the current revision.
    async fn compact(&self, revision: Revision) -> Result<(), StoreError>;
}

/// A shared store is a store, so `Arc<dyn Store>` can be passed wherever `S: Store` is
/// expected.
#[async_trait::async_trait]
impl<T: Store + ?Sized> Store for Arc<T> {
    async fn revision(&self) -> Result<Revision, StoreError> {
        (**self).revision().await
    }

    async fn compacted_revision(&self) -> Result<Revision, StoreError> {
        (**self).compacted_revision().await
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        (**self).get(key).await
    }

    async fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RangeResult, StoreError> {
        (**self).range(prefix, start_after, limit).await
    }

    async fn range_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Revision,
    ) -> Result<RangeResult, StoreError> {
        (**self)
            .range_at(prefix, start_after, limit, revision)
            .await
    }

    async fn put(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
    ) -> Result<KeyValue, StoreError> {
        (**self).put(key, value, precondition).await
    }

    async fn delete(&self, key: &str, precondition: Precondition) -> Result<Event, StoreError> {
        (**self).delete(key, precondition).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        (**self).watch(prefix, after).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        (**self).compact(revision).await
    }
}
