//! [`Deposable`]: a store as a leader sees it, whose writes are refused once it is
//! deposed, for tests of what a deposed leader does without an election.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use crate::{Event, KeyValue, Precondition, RangeResult, Revision, Store, StoreError, WatchStream};

/// The election key a [`Deposable`]'s refusals name.
pub const DEPOSABLE_ELECTION_KEY: &str = "/leader";

/// A leader's view of a store: reads, watches and compaction go to the store; once
/// [`depose`](Deposable::depose) is called, `put` and `delete` are refused with
/// [`StoreError::Fenced`] (naming [`DEPOSABLE_ELECTION_KEY`]), as a fenced store
/// ([`Coordination::fenced`](crate::Coordination::fenced)) refuses a deposed leader's.
pub struct Deposable<S> {
    store: S,
    deposed: AtomicBool,
}

impl<S: Store> Deposable<S> {
    /// `store`, as its leader sees it while it leads.
    pub fn new(store: S) -> Self {
        Self {
            store,
            deposed: AtomicBool::new(false),
        }
    }

    /// From now on, writes are refused.
    pub fn depose(&self) {
        self.deposed.store(true, Ordering::SeqCst);
    }

    fn refuse_if_deposed(&self) -> Result<(), StoreError> {
        if self.deposed.load(Ordering::SeqCst) {
            return Err(StoreError::Fenced {
                key: DEPOSABLE_ELECTION_KEY.into(),
            });
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl<S: Store> Store for Deposable<S> {
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
        self.refuse_if_deposed()?;
        self.store.put(key, value, precondition).await
    }

    async fn delete(&self, key: &str, precondition: Precondition) -> Result<Event, StoreError> {
        self.refuse_if_deposed()?;
        self.store.delete(key, precondition).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        self.store.watch(prefix, after).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.store.compact(revision).await
    }
}
