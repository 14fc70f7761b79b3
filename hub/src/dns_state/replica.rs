//! What DNS this replica serves ([`DnsReplica`]): the stored DNS state followed as it
//! completes, or, while this replica leads, what it publishes there itself.
//!
//! A follower remembers every record the watch of [`super::PREFIX`] delivers and
//! rebuilds its snapshot only when the serial key changes, from the records as they are
//! at that revision, with that revision's serial. The leader stores its changes, then
//! the serial key, and rebuilds from what it stored with the serial the store gave it.
//! Either way the snapshot is exactly the leader's, with the leader's serial.
//!
//! The controller decides what is routed and says which role this replica has
//! ([`DnsReplica::lead`], [`DnsReplica::follow`]); it feeds the watch's events to
//! [`DnsReplica::observe`] and the routed ingresses that changed to
//! [`DnsReplica::publish`]. What does not belong here: deciding what is routed, the DNS
//! providers (the controller hands them each [`Published::Stored`] serial), and
//! building the snapshot itself (the GSLB step).
//!
//! # Guarantees
//! - Every replica serves a snapshot built from the records of one complete batch, with
//!   the serial of that batch's serial key: never a half-applied batch, never a serial
//!   of other answers.
//! - The serial served never goes back.
//! - A replica that takes the lead publishes the serial key with its first publication,
//!   even without changes, so a batch its predecessor left without one completes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use fedingress_api::FederatedIngress;
use fedingress_api::Resource;
use fedingress_api::plan::IngressKey;
use fedingress_dns::RoutedIngress;
use fedingress_dns::zone::Snapshot;
use fedingress_store::{Event, Revision, StoreError, WatchStream};
use futures_util::StreamExt;

use super::{DnsChange, DnsStateError, DnsStore, decode, serial_of};
use crate::gslb::{AnswerChange, Gslb};
use crate::metrics::HubMetrics;

/// What DNS this replica serves: following the stored DNS state as a follower,
/// publishing it as the leader.
pub struct DnsReplica {
    /// Reads the stored state (the plain store).
    store: DnsStore,
    /// `Some` while leading: writes through the leader's fenced store.
    writer: Option<DnsStore>,
    /// The watch of the stored state (`None`: to be started again). In a mutex only so
    /// that the replica is `Sync` (the controller's futures hold it across awaits): it
    /// is never locked, only polled through `get_mut`.
    watch: Option<Mutex<WatchStream>>,
    /// Revision the watch resumes after.
    watched: Revision,
    /// The records as stored, at `watched`.
    stored: BTreeMap<IngressKey, RoutedIngress>,
    /// The highest serial key revision seen in the stored state.
    stored_serial: Revision,
    /// The records the snapshot is built from.
    served: BTreeMap<IngressKey, RoutedIngress>,
    /// Revision of the serial key the served snapshot was built at.
    built_serial: Revision,
    /// The next publication writes the serial key even without changes (a new leader
    /// completes its predecessor's last batch).
    publish_serial: bool,
    /// The embedded DNS server's steering, when it runs (without it, the state is still
    /// followed and published: the DNS providers are fed from it).
    gslb: Option<Gslb>,
    /// Why names are not (fully) served, from the last snapshot build, by ingress
    /// (`namespace/name`).
    problems: HashMap<String, Vec<String>>,
    metrics: Arc<HubMetrics>,
}

/// The outcome of [`DnsReplica::publish`].
#[derive(Debug)]
pub enum Published {
    /// Nothing to store: no change (and no serial owed), or not leading.
    Nothing,
    /// Stored, and the snapshot rebuilt with `serial`.
    Stored {
        /// The SOA serial of the new snapshot.
        serial: u32,
        /// The ingresses whose records changed.
        changed: BTreeSet<IngressKey>,
        /// The clusters that entered or left the changed ingresses' answers.
        answer_changes: Vec<AnswerChange>,
    },
    /// The store refused the write because this replica no longer leads: it stopped
    /// writing and follows the stored state (the last complete batch seen, at once).
    Fenced,
    /// The store failed: answers stay as they are; these ingresses are to be published
    /// again.
    Failed(Vec<IngressKey>),
}

impl DnsReplica {
    /// Loads the stored state and serves it (the snapshot is built at once, without
    /// answer changes), as a follower.
    ///
    /// `ingresses`: every FederatedIngress, for the snapshot's priority order (oldest
    /// first), here and in every method that takes them.
    pub async fn load(
        store: DnsStore,
        gslb: Option<Gslb>,
        metrics: Arc<HubMetrics>,
        ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    ) -> Result<Self, DnsStateError> {
        let (state, watched) = store.load().await?;
        let serial = state.serial_revision.unwrap_or_default();
        let mut replica = Self {
            store,
            writer: None,
            watch: None,
            watched,
            stored: state.routed.clone(),
            stored_serial: serial,
            served: state.routed,
            built_serial: serial,
            publish_serial: false,
            gslb,
            problems: HashMap::new(),
            metrics,
        };
        // DNS answers from the stored state from the first packet.
        replica.rebuild(&BTreeSet::new(), serial, true, ingresses);
        Ok(replica)
    }

    /// The records the snapshot is built from, by ingress.
    pub fn served(&self) -> &BTreeMap<IngressKey, RoutedIngress> {
        &self.served
    }

    /// Revision of the serial key the served snapshot was built at (its SOA serial is
    /// [`serial_of`] it).
    pub fn built_serial(&self) -> Revision {
        self.built_serial
    }

    /// The snapshot the embedded DNS server serves, when it runs.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.gslb.as_ref().map(Gslb::snapshot)
    }

    /// Why names are not (fully) served, from the last snapshot build, by ingress
    /// (`namespace/name`).
    pub fn problems(&self) -> &HashMap<String, Vec<String>> {
        &self.problems
    }

    /// Whether this replica publishes (leads).
    pub fn is_leading(&self) -> bool {
        self.writer.is_some()
    }

    /// This replica leads and writes through `store` (its fenced store): it publishes
    /// from now on, starting from the stored state, and its first publication writes
    /// the serial key even without changes. The snapshot served stays as it is until
    /// then.
    pub fn lead(&mut self, store: DnsStore) {
        self.writer = Some(store);
        self.served = self.stored.clone();
        self.publish_serial = true;
    }

    /// This replica no longer leads: it stops writing and serves the stored state from
    /// now on, starting with the last complete batch seen.
    pub fn follow(&mut self, ingresses: &BTreeMap<IngressKey, FederatedIngress>) {
        self.writer = None;
        self.follow_stored(self.stored_serial, ingresses);
    }

    /// Starts watching the stored state again when the watch ended; after a compaction,
    /// loads it again first and serves it when its serial is newer (then the watch
    /// starts on a later call).
    pub async fn watch(&mut self, ingresses: &BTreeMap<IngressKey, FederatedIngress>) {
        if self.watch.is_some() {
            return;
        }
        match self.store.watch(self.watched).await {
            Ok(events) => self.watch = Some(Mutex::new(events)),
            Err(StoreError::Compacted { .. }) => match self.store.load().await {
                Ok((state, revision)) => {
                    self.stored = state.routed;
                    self.watched = revision;
                    if let Some(serial) = state.serial_revision {
                        self.stored_serial = self.stored_serial.max(serial);
                        if self.writer.is_none() {
                            self.follow_stored(serial, ingresses);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "loading the DNS state failed"),
            },
            Err(e) => tracing::warn!(error = %e, "watching the DNS state failed; retrying"),
        }
    }

    /// The next event of the stored state's watch (pending forever while there is
    /// none: see [`DnsReplica::watch`]). Cancel-safe.
    pub async fn next_event(&mut self) -> Option<Result<Event, StoreError>> {
        match &mut self.watch {
            Some(events) => {
                let events = events.get_mut().unwrap_or_else(PoisonError::into_inner);
                events.next().await
            }
            None => std::future::pending().await,
        }
    }

    /// One event of the stored state's watch ([`DnsReplica::next_event`]): records are
    /// remembered; a serial key serves them (a follower; the leader built its snapshot
    /// when it published). A watch that ended is started again by the next
    /// [`DnsReplica::watch`].
    pub fn observe(
        &mut self,
        event: Option<Result<Event, StoreError>>,
        ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    ) {
        let event = match event {
            Some(Ok(event)) => event,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "DNS state watch ended; watching again");
                self.watch = None;
                return;
            }
            None => {
                self.watch = None;
                return;
            }
        };
        self.watched = event.revision;
        match decode(&event) {
            Some(DnsChange::Routed(key, Some(routed))) => {
                self.stored.insert(key, *routed);
            }
            Some(DnsChange::Routed(key, None)) => {
                self.stored.remove(&key);
            }
            Some(DnsChange::Serial(revision)) => {
                self.stored_serial = self.stored_serial.max(revision);
                if self.writer.is_none() {
                    self.follow_stored(revision, ingresses);
                }
            }
            None => {}
        }
    }

    /// Stores what DNS serves for the changed ingresses (`None`: not served), then the
    /// serial key, and rebuilds the snapshot from it with that serial: every replica
    /// builds the same one. `first`: the controller's first pass (no answer changes).
    ///
    /// # Errors
    /// None returned: a refused write is [`Published::Fenced`] (this replica stopped
    /// writing and follows) or [`Published::Failed`] (the answers stay as they are).
    pub async fn publish(
        &mut self,
        changes: Vec<(IngressKey, Option<RoutedIngress>)>,
        first: bool,
        ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    ) -> Published {
        let Some(writer) = &self.writer else {
            return Published::Nothing;
        };
        if changes.is_empty() && !self.publish_serial {
            return Published::Nothing;
        }
        let keys: Vec<IngressKey> = changes.iter().map(|(k, _)| k.clone()).collect();
        match writer.publish(changes.clone()).await {
            Ok(revision) => {
                self.publish_serial = false;
                for (key, routed) in changes {
                    match routed {
                        Some(routed) => self.served.insert(key, routed),
                        None => self.served.remove(&key),
                    };
                }
                let names: BTreeSet<String> = keys.iter().map(ToString::to_string).collect();
                let answer_changes = self.rebuild(&names, revision, first, ingresses);
                Published::Stored {
                    serial: serial_of(revision.max(1)),
                    changed: keys.into_iter().collect(),
                    answer_changes,
                }
            }
            Err(e) if e.is_fenced() => {
                tracing::warn!(error = %e, "no longer the leader: DNS state not published; following it");
                // A deposed leader may have seen its successor's batches already (a
                // resumed pause delivers them before the election says so): it serves
                // them now, not at the next one (issue 23, item 1).
                self.follow(ingresses);
                Published::Fenced
            }
            Err(e) => {
                tracing::warn!(error = %e, "publishing the DNS state failed; answers unchanged, retrying");
                Published::Failed(keys)
            }
        }
    }

    /// Serves the stored state, complete at the serial key's `revision` (nothing when
    /// the snapshot is that recent already).
    fn follow_stored(
        &mut self,
        revision: Revision,
        ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    ) {
        if revision <= self.built_serial {
            return;
        }
        let changed: BTreeSet<String> = self
            .stored
            .iter()
            .filter(|(k, v)| self.served.get(*k) != Some(*v))
            .map(|(k, _)| k.to_string())
            .chain(
                self.served
                    .keys()
                    .filter(|k| !self.stored.contains_key(*k))
                    .map(ToString::to_string),
            )
            .collect();
        self.served = self.stored.clone();
        self.rebuild(&changed, revision, false, ingresses);
        tracing::debug!(
            serial = serial_of(revision),
            changed = changed.len(),
            "DNS snapshot follows the stored state"
        );
    }

    /// Rebuilds the snapshot from `served` with the serial of `revision` (the serial
    /// key's); returns the clusters that entered or left the `changed` ingresses'
    /// answers.
    fn rebuild(
        &mut self,
        changed: &BTreeSet<String>,
        revision: Revision,
        first: bool,
        ingresses: &BTreeMap<IngressKey, FederatedIngress>,
    ) -> Vec<AnswerChange> {
        self.built_serial = self.built_serial.max(revision);
        let Some(gslb) = &mut self.gslb else {
            return Vec::new();
        };
        let mut order: Vec<&RoutedIngress> = self.served.values().collect();
        let age = |r: &RoutedIngress| {
            r.ingress
                .split_once('/')
                .map(|(ns, name)| IngressKey::new(ns, name))
                .and_then(|k| ingresses.get(&k))
                .and_then(|i| i.metadata().creation_timestamp.map(|t| t.0))
        };
        order.sort_by(|a, b| (age(a), &a.ingress).cmp(&(age(b), &b.ingress)));
        let serial = serial_of(revision.max(1));
        let step = tokio::task::block_in_place(|| gslb.step(&order, changed, serial, first));
        if let Some(took) = step.build_time {
            self.metrics.observe_snapshot_build(took);
        }
        self.metrics.set_dns_serial(serial);
        // Anycast route changes are not DNS answer changes.
        for change in step.changes.iter().filter(|c| c.anycast.is_none()) {
            self.metrics.count_answer_change(change);
        }
        self.problems = step.problems;
        step.changes
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use bytes::Bytes;
    use fedingress_store::battery::Deposable;
    use fedingress_store::{Precondition, RedbOptions, RedbStore, Store};

    use super::*;
    use crate::dns_state::tests::routed;

    fn key(name: &str) -> IngressKey {
        IngressKey::new("default", name)
    }

    fn no_ingresses() -> BTreeMap<IngressKey, FederatedIngress> {
        BTreeMap::new()
    }

    /// One store for the replicas of a test.
    fn shared() -> (Arc<RedbStore>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("s.redb"), RedbOptions::default()).unwrap();
        (Arc::new(store), dir)
    }

    /// A replica of `store`, loaded and watching, following.
    async fn replica(store: Arc<dyn Store>) -> DnsReplica {
        let mut replica = DnsReplica::load(
            DnsStore::new(store),
            None,
            Arc::new(HubMetrics::default()),
            &no_ingresses(),
        )
        .await
        .unwrap();
        replica.watch(&no_ingresses()).await;
        replica
    }

    /// Feeds `replica` its watch's events until it has seen the serial key at
    /// `revision`.
    async fn observe_until(replica: &mut DnsReplica, revision: Revision) {
        while replica.stored_serial < revision {
            let event = tokio::time::timeout(Duration::from_secs(5), replica.next_event())
                .await
                .expect("the DNS state watch delivers the batch");
            replica.observe(event, &no_ingresses());
        }
    }

    async fn publish(
        replica: &mut DnsReplica,
        changes: Vec<(IngressKey, Option<RoutedIngress>)>,
    ) -> Published {
        replica.publish(changes, false, &no_ingresses()).await
    }

    fn stored_serial(published: Published) -> u32 {
        match published {
            Published::Stored { serial, .. } => serial,
            other => panic!("not stored: {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_serves_the_leaders_records_and_serial_once_their_batch_completes() {
        let (store, _dir) = shared();
        let mut leader = replica(store.clone()).await;
        let mut follower = replica(store.clone()).await;
        leader.lead(DnsStore::new(store.clone()));
        assert!(leader.is_leading() && !follower.is_leading());

        let published = publish(
            &mut leader,
            vec![(key("a"), Some(routed("a"))), (key("b"), Some(routed("b")))],
        )
        .await;
        let Published::Stored {
            serial, changed, ..
        } = published
        else {
            panic!("not stored: {published:?}");
        };
        assert_eq!(changed, BTreeSet::from([key("a"), key("b")]));
        assert_eq!(serial, serial_of(leader.built_serial()));
        assert_eq!(leader.served().len(), 2);

        // The records arrive before the serial key: none is served before it.
        let event = follower.next_event().await;
        follower.observe(event, &no_ingresses());
        assert!(follower.served().is_empty(), "half a batch is never served");
        observe_until(&mut follower, leader.built_serial()).await;
        assert_eq!(follower.served(), leader.served());
        assert_eq!(follower.built_serial(), leader.built_serial());

        // A deletion; then nothing changed: nothing is written.
        let second = stored_serial(publish(&mut leader, vec![(key("a"), None)]).await);
        assert!(second > serial);
        assert!(matches!(
            publish(&mut leader, Vec::new()).await,
            Published::Nothing
        ));
        observe_until(&mut follower, leader.built_serial()).await;
        assert_eq!(follower.served().keys().collect::<Vec<_>>(), [&key("b")]);
        assert_eq!(follower.served(), leader.served());
        assert_eq!(follower.built_serial(), leader.built_serial());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_leader_completes_its_predecessors_batch_once() {
        let (store, _dir) = shared();
        let mut next = replica(store.clone()).await;
        // The old leader stored a record, then died before the serial key.
        let record = serde_json::to_vec(&routed("a")).unwrap();
        store
            .put(
                "/fedingress/dns/ingress/default/a",
                Bytes::from(record),
                Precondition::None,
            )
            .await
            .unwrap();
        let event = next.next_event().await;
        next.observe(event, &no_ingresses());
        assert!(next.served().is_empty());

        next.lead(DnsStore::new(store.clone()));
        assert_eq!(
            next.served().len(),
            1,
            "a leader starts from the stored state"
        );
        let serial = stored_serial(publish(&mut next, Vec::new()).await);
        assert_eq!(serial, serial_of(next.built_serial()));
        assert!(matches!(
            publish(&mut next, Vec::new()).await,
            Published::Nothing
        ));
        let late = replica(store).await;
        assert_eq!(late.served(), next.served());
        assert_eq!(late.built_serial(), next.built_serial());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deposed_leader_stops_writing_and_serves_its_successors_state() {
        let (store, _dir) = shared();
        let fenced = Arc::new(Deposable::new(store.clone()));
        let mut old = replica(store.clone()).await;
        old.lead(DnsStore::new(fenced.clone()));
        stored_serial(publish(&mut old, vec![(key("a"), Some(routed("a")))]).await);
        let built = old.built_serial();
        observe_until(&mut old, built).await;

        // Paused past its lease: another replica leads and publishes a change; the old
        // leader's watch delivers it when it resumes, before it learns its role.
        fenced.depose();
        let mut new = replica(store.clone()).await;
        new.lead(DnsStore::new(store.clone()));
        stored_serial(publish(&mut new, vec![(key("b"), Some(routed("b")))]).await);
        observe_until(&mut old, new.built_serial()).await;
        assert!(old.built_serial() < new.built_serial());

        // Its next publication is refused: it writes no more and serves the stored state
        // at once, not at the next change (issue 23, item 1).
        let refused = publish(&mut old, vec![(key("c"), Some(routed("c")))]).await;
        assert!(matches!(refused, Published::Fenced), "{refused:?}");
        assert!(!old.is_leading());
        assert_eq!(old.served(), new.served());
        assert_eq!(old.built_serial(), new.built_serial());
    }
}
