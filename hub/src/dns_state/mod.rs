//! What DNS serves, in the store: the leader's routed ingresses, so that every replica
//! builds the same snapshot with the same SOA serial.
//!
//! Layout: `/fedingress/dns/ingress/<namespace>/<name>` holds one [`RoutedIngress`] as
//! JSON; `/fedingress/dns/serial` is written after every batch of changes. A replica
//! rebuilds its snapshot only when it sees the serial key change, from the records as
//! they are at that revision, and takes the serial key's revision as the SOA serial. A
//! watch delivers writes in revision order, so every replica builds exactly the leader's
//! snapshot, never a half-applied batch. A new leader writes the serial key after its
//! first pass, so a batch its predecessor left without one is published too.
//!
//! [`DnsReplica`] (in `replica.rs`) is what one replica serves from it: the leader's
//! publications, or, on every other replica, the stored state as it completes.
//!
//! What does not belong here: deciding what is routed (the controller), building the
//! snapshot (the GSLB step).

mod replica;

pub use replica::{DnsReplica, Published};

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use fedingress_api::plan::IngressKey;
use fedingress_dns::RoutedIngress;
use fedingress_store::{Event, EventKind, Precondition, Revision, Store, StoreError, WatchStream};
use futures_util::{StreamExt, stream};

/// Storage prefix of everything DNS serves.
pub const PREFIX: &str = "/fedingress/dns/";
const INGRESS_PREFIX: &str = "/fedingress/dns/ingress/";
const SERIAL_KEY: &str = "/fedingress/dns/serial";
/// Record writes in flight at once.
const WRITE_CONCURRENCY: usize = 32;

/// The SOA serial of a snapshot built at the serial key's `revision` (RFC 1982 serial
/// arithmetic tolerates the wrap past 2^32).
pub fn serial_of(revision: Revision) -> u32 {
    u32::try_from(revision.rem_euclid(1 << 32)).unwrap_or(0)
}

/// What DNS serves, as stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DnsState {
    pub routed: BTreeMap<IngressKey, RoutedIngress>,
    /// Revision of the serial key (`None`: never written).
    pub serial_revision: Option<Revision>,
}

/// One decoded change of the stored DNS state.
#[derive(Clone, Debug, PartialEq)]
pub enum DnsChange {
    Routed(IngressKey, Option<Box<RoutedIngress>>),
    /// A batch is complete: build the snapshot (serial from this revision).
    Serial(Revision),
}

/// Why the DNS state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DnsStateError {
    #[error("reading the DNS state")]
    Read(#[source] StoreError),
    #[error("writing the DNS state of {what}")]
    Write {
        what: String,
        #[source]
        source: StoreError,
    },
}

impl DnsStateError {
    /// The store refused the write because this replica is no longer the leader.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            DnsStateError::Write {
                source: StoreError::Fenced { .. },
                ..
            }
        )
    }
}

fn key(ingress: &IngressKey) -> String {
    format!("{INGRESS_PREFIX}{}/{}", ingress.namespace, ingress.name)
}

/// Decodes one watch event of [`PREFIX`] (`None`: not ours, or damaged: skipped with a
/// warning).
pub fn decode(event: &Event) -> Option<DnsChange> {
    if event.kv.key == SERIAL_KEY {
        return (event.kind == EventKind::Put).then_some(DnsChange::Serial(event.revision));
    }
    let (namespace, name) = event.kv.key.strip_prefix(INGRESS_PREFIX)?.split_once('/')?;
    let ingress = IngressKey::new(namespace, name);
    match event.kind {
        EventKind::Delete => Some(DnsChange::Routed(ingress, None)),
        EventKind::Put => match serde_json::from_slice::<RoutedIngress>(&event.kv.value) {
            Ok(routed) => Some(DnsChange::Routed(ingress, Some(Box::new(routed)))),
            Err(error) => {
                tracing::warn!(key = %event.kv.key, error = %error, "DNS state does not decode; ignored");
                None
            }
        },
    }
}

/// Reads and writes the DNS state.
#[derive(Clone)]
pub struct DnsStore {
    store: Arc<dyn Store>,
}

impl DnsStore {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Everything stored, and the revision to watch from.
    pub async fn load(&self) -> Result<(DnsState, Revision), DnsStateError> {
        let mut state = DnsState::default();
        let mut start_after: Option<String> = None;
        let mut first_revision = None;
        loop {
            let page = self
                .store
                .range(PREFIX, start_after.as_deref(), 1000)
                .await
                .map_err(DnsStateError::Read)?;
            first_revision.get_or_insert(page.revision);
            for kv in &page.kvs {
                let event = Event {
                    revision: kv.mod_revision,
                    kind: EventKind::Put,
                    kv: kv.clone(),
                    prev: None,
                };
                match decode(&event) {
                    Some(DnsChange::Routed(key, Some(routed))) => {
                        state.routed.insert(key, *routed);
                    }
                    Some(DnsChange::Serial(revision)) => state.serial_revision = Some(revision),
                    _ => {}
                }
            }
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => start_after = Some(last.key.clone()),
                _ => break,
            }
        }
        Ok((state, first_revision.unwrap_or_default()))
    }

    /// The changes of the stored DNS state after `revision`, in revision order.
    pub async fn watch(&self, after: Revision) -> Result<WatchStream, StoreError> {
        self.store.watch(PREFIX, after).await
    }

    /// Writes the changed records, then the serial key; returns the serial key's
    /// revision. `changes`: `None` deletes.
    pub async fn publish(
        &self,
        changes: Vec<(IngressKey, Option<RoutedIngress>)>,
    ) -> Result<Revision, DnsStateError> {
        let results: Vec<Result<(), DnsStateError>> = stream::iter(changes)
            .map(|(ingress, routed)| async move { self.write(&ingress, routed.as_ref()).await })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        let kv = self
            .store
            .put(SERIAL_KEY, Bytes::new(), Precondition::None)
            .await
            .map_err(|source| DnsStateError::Write {
                what: "the serial".into(),
                source,
            })?;
        Ok(kv.mod_revision)
    }

    async fn write(
        &self,
        ingress: &IngressKey,
        routed: Option<&RoutedIngress>,
    ) -> Result<(), DnsStateError> {
        let error = |source| DnsStateError::Write {
            what: ingress.to_string(),
            source,
        };
        match routed {
            Some(routed) => {
                let value = serde_json::to_vec(routed).map_err(|e| {
                    error(StoreError::Corrupt {
                        detail: format!("encoding: {e}"),
                    })
                })?;
                self.store
                    .put(&key(ingress), Bytes::from(value), Precondition::None)
                    .await
                    .map_err(error)?;
            }
            None => match self.store.delete(&key(ingress), Precondition::None).await {
                Ok(_) | Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(error(e)),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fedingress_api::ingress::Traffic;
    use fedingress_store::{RedbOptions, RedbStore};

    /// A routed ingress `default/{name}` at `{name}.example.com`, with no clusters (the
    /// replica's tests use it too).
    pub(super) fn routed(name: &str) -> RoutedIngress {
        RoutedIngress {
            ingress: format!("default/{name}"),
            dns_name: format!("{name}.example.com"),
            traffic: Traffic::default(),
            clusters: Vec::new(),
            srv: Vec::new(),
            failover: Default::default(),
            health_port: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_sees_a_batch_complete_only_at_its_serial() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(RedbStore::open(&dir.path().join("s.redb"), RedbOptions::default()).unwrap());
        let dns = DnsStore::new(store.clone());
        let (empty, from) = dns.load().await.unwrap();
        assert_eq!(empty, DnsState::default());
        let mut events = store.watch(PREFIX, from).await.unwrap();
        let a = IngressKey::new("default", "a");
        let b = IngressKey::new("default", "b");
        let serial = dns
            .publish(vec![
                (a.clone(), Some(routed("a"))),
                (b.clone(), Some(routed("b"))),
            ])
            .await
            .unwrap();
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let event = events.next().await.unwrap().unwrap();
            seen.push(decode(&event).unwrap());
        }
        assert_eq!(seen.last(), Some(&DnsChange::Serial(serial)), "serial last");
        let second = dns.publish(vec![(a.clone(), None)]).await.unwrap();
        assert!(second > serial);
        let (state, _) = dns.load().await.unwrap();
        assert_eq!(state.serial_revision, Some(second));
        assert_eq!(state.routed.keys().collect::<Vec<_>>(), [&b]);
        assert_eq!(serial_of(second), u32::try_from(second).unwrap());
    }
}
