//! Leases, leader election and fencing: what several processes sharing one store need to
//! run a controller exactly once and to publish state that vanishes with its writer.
//!
//! The model is etcd's (`concurrency.Election`):
//! - a [`Lease`] is granted with a time to live and kept alive in the background; keys
//!   written with it ([`Coordination::put_leased`]) are deleted by the store when it ends
//!   (its holder died, was cut off, or dropped it);
//! - [`Coordination::campaign`] waits until the election key is created with the
//!   caller's lease: the key's create revision is the [`Fence`];
//! - [`Coordination::fenced`] is the store as the holder of a fence sees it: every write
//!   also requires that the election key still exists with that create revision, so a
//!   deposed leader's writes are refused with [`StoreError::Fenced`] even when it does
//!   not know yet that it lost.
//!
//! Only a store that several processes can share implements it (`EtcdStore`); the
//! embedded redb store is one process's by construction (redb locks its file).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use crate::{KeyValue, Precondition, Revision, Store, StoreError};

/// A granted lease, kept alive until dropped (then revoked) or lost.
pub struct Lease {
    /// The store's id of the lease.
    pub id: i64,
    /// The time to live it was granted with.
    pub ttl: Duration,
    /// Turns true, once and for good, when the lease ended without being dropped: the
    /// store stopped confirming it for a whole `ttl`, or said it expired.
    pub lost: watch::Receiver<bool>,
    /// Ends the keep-alive (and revokes the lease) when dropped.
    pub(crate) _keeper: Box<dyn Send + Sync>,
}

impl Lease {
    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// Proof of leadership: the election key and the revision that created it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The election key.
    pub key: String,
    /// Its create revision when this holder won.
    pub revision: Revision,
}

/// Leases, elections and fenced writes on a store shared by several processes.
#[async_trait::async_trait]
pub trait Coordination: Send + Sync + 'static {
    /// Grants a lease of `ttl` (whole seconds, at least one) and keeps it alive in the
    /// background.
    async fn grant(&self, ttl: Duration) -> Result<Lease, StoreError>;

    /// Writes `key` attached to `lease` if `precondition` holds: the store deletes it
    /// when the lease ends.
    async fn put_leased(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
        lease: &Lease,
    ) -> Result<KeyValue, StoreError>;

    /// Waits until `key` is created with `lease` and the value `holder` (while another
    /// holder's key exists, until it is deleted), and returns the fence. Ends with an
    /// error when the lease is lost meanwhile.
    async fn campaign(&self, key: &str, holder: &str, lease: &Lease) -> Result<Fence, StoreError>;

    /// Ends a lease now: its keys are deleted (a replica shutting down).
    async fn revoke(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Deletes the election key if it is still `fence`'s (a leader stepping down).
    async fn resign(&self, fence: &Fence) -> Result<(), StoreError>;

    /// The store as seen by the holder of `fence`: reads as usual; every write also
    /// requires the election key to exist with the fence's create revision, and fails
    /// with [`StoreError::Fenced`] otherwise.
    fn fenced(&self, fence: Fence) -> Arc<dyn Store>;
}

/// A store several processes share: a [`Store`] with [`Coordination`].
pub trait SharedStore: Store + Coordination {}

impl<T: Store + Coordination> SharedStore for T {}
