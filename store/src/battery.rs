//! The test battery every [`Store`] implementation must pass (cargo feature `battery`).
//!
//! Each check is a pub async fn taking a fresh, empty store; [`run_all`] runs them all.
//! The checks use only the [`Store`] trait, never an implementation's internals, and
//! count revisions relative to the store's revision at the start, so a store whose
//! "fresh" is a new key namespace on a shared server passes too. They panic on failure,
//! like any test; every wait is bounded by [`WAIT`] so a lost event fails instead of
//! hanging. Some spawn tokio tasks: run them on a multi-threaded runtime for the
//! concurrency checks to mean anything.
//!
//! ```no_run
//! # async fn example(dir: &std::path::Path) {
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use fedingress_store::{RedbOptions, RedbStore, battery};
//!
//! let stores = AtomicUsize::new(0);
//! battery::run_all(|| {
//!     let n = stores.fetch_add(1, Ordering::Relaxed);
//!     let path = dir.join(format!("store-{n}.redb"));
//!     async move { RedbStore::open(&path, RedbOptions::default()).expect("open") }
//! })
//! .await;
//! # }
//! ```
//!
//! Besides the checks, test wrappers for the crates that use a store: [`Deposable`], a
//! leader's store whose writes are refused once it is deposed.

mod deposable;

pub use deposable::{DEPOSABLE_ELECTION_KEY, Deposable};

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;

use crate::{
    Event, EventKind, KeyValue, Precondition, RangeResult, Revision, Store, StoreError, WatchStream,
};

/// The longest any check waits for an answer or an event.
pub const WAIT: Duration = Duration::from_secs(60);

/// Runs every check, each on a store from `fresh`.
pub async fn run_all<S, F, Fut>(fresh: F)
where
    S: Store,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    revisions_increase_by_one_per_write(fresh().await).await;
    create_with_absent_fails_when_present(fresh().await).await;
    compare_and_swap_fails_on_stale_revision(fresh().await).await;
    delete_with_and_without_precondition(fresh().await).await;
    range_by_prefix_in_key_order(fresh().await).await;
    range_pages_with_start_after_and_limit(fresh().await).await;
    range_revision_is_consistent(fresh().await).await;
    range_at_reads_past_revisions(fresh().await).await;
    range_at_pages_a_snapshot_while_writes_go_on(fresh().await).await;
    range_at_refuses_compacted_and_future_revisions(fresh().await).await;
    watch_replays_history_then_live(fresh().await).await;
    watch_has_no_gaps_while_writes_race_its_start(fresh().await).await;
    watch_from_before_compaction_fails(fresh().await).await;
    compaction_keeps_current_keys(fresh().await).await;
    concurrent_writers_are_all_acknowledged(fresh().await).await;
    concurrent_preconditions_see_each_other(fresh().await).await;
    hundred_watchers_all_receive_a_write(fresh().await).await;
}

fn value(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no answer within {WAIT:?}"),
    }
}

async fn revision(store: &impl Store) -> Revision {
    within("revision", store.revision())
        .await
        .expect("revision")
}

async fn put(store: &impl Store, key: &str, text: &str) -> KeyValue {
    within("put", store.put(key, value(text), Precondition::None))
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"))
}

async fn get(store: &impl Store, key: &str) -> Option<KeyValue> {
    within("get", store.get(key))
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"))
}

async fn range(
    store: &impl Store,
    prefix: &str,
    start_after: Option<&str>,
    limit: usize,
) -> RangeResult {
    within("range", store.range(prefix, start_after, limit))
        .await
        .unwrap_or_else(|e| panic!("range {prefix}: {e}"))
}

fn keys(result: &RangeResult) -> Vec<&str> {
    result.kvs.iter().map(|kv| kv.key.as_str()).collect()
}

async fn watch(store: &impl Store, prefix: &str, after: Revision) -> WatchStream {
    within("watch", store.watch(prefix, after))
        .await
        .unwrap_or_else(|e| panic!("watch {prefix} after {after}: {e}"))
}

async fn next_event(stream: &mut WatchStream) -> Event {
    match within("next watch event", stream.next()).await {
        Some(Ok(event)) => event,
        Some(Err(e)) => panic!("watch failed: {e}"),
        None => panic!("watch ended"),
    }
}

fn assert_precondition_failed<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    key: &str,
    expected_current: Option<&KeyValue>,
) {
    match result {
        Err(StoreError::PreconditionFailed {
            key: failed,
            current,
        }) => {
            assert_eq!(failed, key, "PreconditionFailed names the key");
            assert_eq!(
                current.as_ref(),
                expected_current,
                "PreconditionFailed carries the current kv"
            );
        }
        other => panic!("expected PreconditionFailed on {key}, got {other:?}"),
    }
}

/// Each successful put or delete advances the revision by exactly one; failed writes
/// and reads do not; create and mod revisions follow.
pub async fn revisions_increase_by_one_per_write(store: impl Store) {
    let r0 = revision(&store).await;
    assert!(r0 >= 1, "an empty store is at revision 1 or later");

    let a1 = put(&store, "/rev/a", "1").await;
    assert_eq!((a1.create_revision, a1.mod_revision), (r0 + 1, r0 + 1));
    assert_eq!(revision(&store).await, r0 + 1);

    let a2 = put(&store, "/rev/a", "2").await;
    assert_eq!((a2.create_revision, a2.mod_revision), (r0 + 1, r0 + 2));
    let b = put(&store, "/rev/b", "1").await;
    assert_eq!(b.mod_revision, r0 + 3);

    let failed = store.put("/rev/b", value("x"), Precondition::Absent).await;
    assert!(failed.is_err(), "create of an existing key fails");
    let failed = store.delete("/rev/missing", Precondition::None).await;
    assert!(failed.is_err(), "delete of a missing key fails");
    let _ = get(&store, "/rev/a").await;
    let _ = range(&store, "/rev/", None, 0).await;
    assert_eq!(
        revision(&store).await,
        r0 + 3,
        "failures and reads write nothing"
    );

    let deleted = within("delete", store.delete("/rev/a", Precondition::None))
        .await
        .expect("delete");
    assert_eq!(deleted.revision, r0 + 4);
    assert_eq!(revision(&store).await, r0 + 4);

    let a3 = put(&store, "/rev/a", "3").await;
    assert_eq!(
        (a3.create_revision, a3.mod_revision),
        (r0 + 5, r0 + 5),
        "a key recreated after deletion has a new create revision"
    );
    assert_eq!(get(&store, "/rev/a").await, Some(a3));
    assert_eq!(get(&store, "/rev/b").await, Some(b));
}

/// `Precondition::Absent` creates once and then fails with the current kv.
pub async fn create_with_absent_fails_when_present(store: impl Store) {
    let created = within(
        "create",
        store.put("/create/x", value("first"), Precondition::Absent),
    )
    .await
    .expect("create of a missing key");
    assert_eq!(created.value, value("first"));

    let again = store
        .put("/create/x", value("second"), Precondition::Absent)
        .await;
    assert_precondition_failed(again, "/create/x", Some(&created));
    assert_eq!(get(&store, "/create/x").await, Some(created));
}

/// `Precondition::ModRevision` is compare-and-swap: a stale revision fails with the
/// current kv; a missing key fails with none.
pub async fn compare_and_swap_fails_on_stale_revision(store: impl Store) {
    let v1 = put(&store, "/cas/k", "1").await;
    let v2 = within(
        "cas",
        store.put(
            "/cas/k",
            value("2"),
            Precondition::ModRevision(v1.mod_revision),
        ),
    )
    .await
    .expect("CAS with the current revision");
    assert_eq!(v2.value, value("2"));
    assert_eq!(v2.create_revision, v1.create_revision);

    let stale = store
        .put(
            "/cas/k",
            value("3"),
            Precondition::ModRevision(v1.mod_revision),
        )
        .await;
    assert_precondition_failed(stale, "/cas/k", Some(&v2));
    assert_eq!(get(&store, "/cas/k").await, Some(v2.clone()));

    let missing = store
        .put(
            "/cas/missing",
            value("x"),
            Precondition::ModRevision(v2.mod_revision),
        )
        .await;
    assert_precondition_failed(missing, "/cas/missing", None);
    assert_eq!(get(&store, "/cas/missing").await, None);
}

/// Delete: NotFound when absent; preconditions as for put; the event carries the
/// deleted kv at the deletion revision and the previous kv.
pub async fn delete_with_and_without_precondition(store: impl Store) {
    match store.delete("/del/missing", Precondition::None).await {
        Err(StoreError::NotFound { key }) => assert_eq!(key, "/del/missing"),
        other => panic!("expected NotFound, got {other:?}"),
    }

    let v1 = put(&store, "/del/k", "1").await;
    let v2 = put(&store, "/del/k", "2").await;
    let stale = store
        .delete("/del/k", Precondition::ModRevision(v1.mod_revision))
        .await;
    assert_precondition_failed(stale, "/del/k", Some(&v2));
    let absent = store.delete("/del/k", Precondition::Absent).await;
    assert_precondition_failed(absent, "/del/k", Some(&v2));
    assert_eq!(get(&store, "/del/k").await, Some(v2.clone()));

    let event = within(
        "delete",
        store.delete("/del/k", Precondition::ModRevision(v2.mod_revision)),
    )
    .await
    .expect("delete with the current revision");
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.revision, v2.mod_revision + 1);
    assert_eq!(event.kv.key, "/del/k");
    assert_eq!(event.kv.value, value("2"));
    assert_eq!(event.kv.create_revision, v1.create_revision);
    assert_eq!(event.kv.mod_revision, event.revision);
    assert_eq!(event.prev, Some(v2));
    assert_eq!(get(&store, "/del/k").await, None);
    assert!(matches!(
        store.delete("/del/k", Precondition::None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store
            .delete("/del/k", Precondition::ModRevision(event.revision))
            .await,
        Err(StoreError::NotFound { .. })
    ));

    let other = put(&store, "/del/other", "x").await;
    let event = within("delete", store.delete("/del/other", Precondition::None))
        .await
        .expect("unconditional delete");
    assert_eq!(event.prev, Some(other));
    assert!(range(&store, "/del/", None, 0).await.kvs.is_empty());
}

/// Range returns exactly the keys with the prefix, in key order.
pub async fn range_by_prefix_in_key_order(store: impl Store) {
    for key in ["/r/b", "/r/a", "/r/c/1", "/r/c", "/r0", "/q/x", "/r/", "/s"] {
        put(&store, key, key).await;
    }
    let result = range(&store, "/r/", None, 0).await;
    assert_eq!(keys(&result), ["/r/", "/r/a", "/r/b", "/r/c", "/r/c/1"]);
    assert!(!result.more);
    for kv in &result.kvs {
        assert_eq!(kv.value, value(&kv.key), "values travel with their keys");
    }
    let everything = range(&store, "/", None, 0).await;
    assert_eq!(
        keys(&everything),
        ["/q/x", "/r/", "/r/a", "/r/b", "/r/c", "/r/c/1", "/r0", "/s"]
    );
    let nothing = range(&store, "/nothing/", None, 0).await;
    assert!(nothing.kvs.is_empty());
    assert!(!nothing.more);
}

/// `start_after` + `limit` page through a prefix; `more` says whether to go on.
pub async fn range_pages_with_start_after_and_limit(store: impl Store) {
    let all: Vec<String> = (0..10).map(|i| format!("/p/{i:02}")).collect();
    for key in all.iter().rev() {
        put(&store, key, "v").await;
    }
    put(&store, "/q", "outside").await;

    for limit in [1, 3, 5, 10, 11] {
        let mut seen = Vec::new();
        let mut start_after: Option<String> = None;
        loop {
            let page = range(&store, "/p/", start_after.as_deref(), limit).await;
            assert!(page.kvs.len() <= limit, "a page holds at most `limit` keys");
            seen.extend(page.kvs.iter().map(|kv| kv.key.clone()));
            if !page.more {
                break;
            }
            assert_eq!(page.kvs.len(), limit, "only a full page has more");
            start_after = page.kvs.last().map(|kv| kv.key.clone());
        }
        assert_eq!(seen, all, "paging with limit {limit} sees every key once");
    }

    let exact = range(&store, "/p/", Some("/p/04"), 5).await;
    assert_eq!(keys(&exact), ["/p/05", "/p/06", "/p/07", "/p/08", "/p/09"]);
    assert!(!exact.more, "no more when the last page is exactly full");

    let between = range(&store, "/p/", Some("/p/035"), 2).await;
    assert_eq!(keys(&between), ["/p/04", "/p/05"]);
    assert!(between.more);

    let before_prefix = range(&store, "/p/", Some("/a"), 2).await;
    assert_eq!(keys(&before_prefix), ["/p/00", "/p/01"]);
    let after_prefix = range(&store, "/p/", Some("/p/99"), 0).await;
    assert!(after_prefix.kvs.is_empty());
    assert!(!after_prefix.more);
    assert_eq!(range(&store, "/p/", None, 0).await.kvs.len(), 10);
}

/// A range is a snapshot: its `revision` is one at which exactly its keys existed, even
/// while writes go on.
pub async fn range_revision_is_consistent(store: impl Store) {
    let store = Arc::new(store);
    let r0 = revision(&*store).await;
    let quiet = range(&*store, "/", None, 0).await;
    assert_eq!(quiet.revision, r0);

    const WRITES: i64 = 200;
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for i in 0..WRITES {
                put(&*store, &format!("/consistent/{i:04}"), "v").await;
            }
        })
    };
    // Key i is created at r0 + 1 + i, so a snapshot at R holds exactly R - r0 keys, all
    // with revisions <= R.
    loop {
        let snapshot = range(&*store, "/consistent/", None, 0).await;
        let count = i64::try_from(snapshot.kvs.len()).expect("count");
        assert_eq!(
            count,
            snapshot.revision - r0,
            "range is a consistent snapshot"
        );
        assert!(
            snapshot
                .kvs
                .iter()
                .all(|kv| kv.mod_revision <= snapshot.revision)
        );
        if count == WRITES {
            break;
        }
        tokio::task::yield_now().await;
    }
    within("writer", writer).await.expect("writer task");
    assert_eq!(
        range(&*store, "/consistent/", None, 0).await.revision,
        r0 + WRITES
    );
}

async fn range_at(
    store: &impl Store,
    prefix: &str,
    start_after: Option<&str>,
    limit: usize,
    at: Revision,
) -> RangeResult {
    within("range_at", store.range_at(prefix, start_after, limit, at))
        .await
        .unwrap_or_else(|e| panic!("range_at {prefix} at {at}: {e}"))
}

/// A range at a past revision returns the keys exactly as they were then: later
/// creates absent, later updates undone, later deletes restored, with their revisions.
pub async fn range_at_reads_past_revisions(store: impl Store) {
    let r0 = revision(&store).await;
    let a = put(&store, "/past/a", "a1").await;
    let b = put(&store, "/past/b", "b1").await;
    let c = put(&store, "/past/c", "c1").await;
    put(&store, "/pastx", "outside").await;
    let then = revision(&store).await;
    put(&store, "/past/b", "b2").await;
    within("delete", store.delete("/past/c", Precondition::None))
        .await
        .expect("delete /past/c");
    put(&store, "/past/d", "d1").await;
    put(&store, "/past/0", "first").await;
    put(&store, "/past/b", "b3").await;

    let snapshot = range_at(&store, "/past/", None, 0, then).await;
    assert_eq!(snapshot.revision, then);
    assert_eq!(snapshot.kvs, vec![a.clone(), b.clone(), c.clone()]);
    assert!(!snapshot.more);
    let page = range_at(&store, "/past/", None, 2, then).await;
    assert_eq!(page.kvs, vec![a.clone(), b.clone()]);
    assert!(page.more);
    let rest = range_at(&store, "/past/", Some("/past/b"), 2, then).await;
    assert_eq!(rest.kvs, vec![c]);
    assert!(!rest.more);

    let empty = range_at(&store, "/past/", None, 0, r0).await;
    assert!(
        empty.kvs.is_empty(),
        "nothing existed before the first write"
    );
    let first = range_at(&store, "/past/", None, 0, a.mod_revision).await;
    assert_eq!(first.kvs, vec![a]);

    let now = revision(&store).await;
    assert_eq!(
        range_at(&store, "/past/", None, 0, now).await.kvs,
        range(&store, "/past/", None, 0).await.kvs,
        "a range at the current revision is the current range"
    );
    assert!(
        range_at(&store, "/past/", Some("/past/zz"), 0, then)
            .await
            .kvs
            .is_empty()
    );
}

/// Paging through one snapshot while writes go on sees every key of the snapshot once
/// and nothing else.
pub async fn range_at_pages_a_snapshot_while_writes_go_on(store: impl Store) {
    let store = Arc::new(store);
    for i in 0..20 {
        put(&*store, &format!("/snap/{i:02}"), "v1").await;
    }
    let snapshot = range(&*store, "/snap/", None, 0).await;
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for i in 0..20 {
                match i % 3 {
                    0 => {
                        within(
                            "delete",
                            store.delete(&format!("/snap/{i:02}"), Precondition::None),
                        )
                        .await
                        .expect("delete");
                    }
                    1 => {
                        put(&*store, &format!("/snap/{i:02}"), "v2").await;
                    }
                    _ => {
                        put(&*store, &format!("/snap/{i:02}b"), "new").await;
                    }
                }
            }
        })
    };
    let mut seen = Vec::new();
    let mut start_after: Option<String> = None;
    loop {
        let page = range_at(
            &*store,
            "/snap/",
            start_after.as_deref(),
            3,
            snapshot.revision,
        )
        .await;
        assert_eq!(page.revision, snapshot.revision);
        seen.extend(page.kvs.iter().cloned());
        if !page.more {
            break;
        }
        start_after = page.kvs.last().map(|kv| kv.key.clone());
        tokio::task::yield_now().await;
    }
    within("writer", writer).await.expect("writer task");
    assert_eq!(seen, snapshot.kvs, "the pages are exactly the snapshot");
    let again = range_at(&*store, "/snap/", None, 0, snapshot.revision).await;
    assert_eq!(
        again.kvs, snapshot.kvs,
        "after the writes, the snapshot is the same"
    );
}

/// A range at a compacted revision fails with Compacted, at a future one with
/// FutureRevision; at the compacted revision itself it still works.
pub async fn range_at_refuses_compacted_and_future_revisions(store: impl Store) {
    let r0 = revision(&store).await;
    for i in 0..6 {
        put(&store, &format!("/rc/{i}"), "v").await;
    }
    let at = r0 + 3;
    within("compact", store.compact(at)).await.expect("compact");
    match within("range_at", store.range_at("/rc/", None, 0, at - 1)).await {
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => {
            assert_eq!(requested, at - 1);
            assert_eq!(compacted, at);
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    let kept = range_at(&store, "/rc/", None, 0, at).await;
    assert_eq!(
        kept.kvs.len(),
        3,
        "the compacted revision itself is readable"
    );
    let current = revision(&store).await;
    match within("range_at", store.range_at("/rc/", None, 0, current + 1)).await {
        Err(StoreError::FutureRevision { requested, .. }) => assert_eq!(requested, current + 1),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
    match within("range_at", store.range_at("/rc/", Some("/rc/9"), 0, at - 1)).await {
        Err(StoreError::Compacted { .. }) => {}
        other => panic!("an empty range at a compacted revision is Compacted too, got {other:?}"),
    }
}

/// A watch delivers matching history after `after`, then live events, each once, in
/// revision order, with `prev` and delete events right.
pub async fn watch_replays_history_then_live(store: impl Store) {
    let r0 = revision(&store).await;
    let mut written = Vec::new();
    for i in 0..5 {
        written.push(put(&store, &format!("/w/{i}"), "old").await);
        put(&store, &format!("/other/{i}"), "x").await;
    }
    // History: the /w/ writes after the second one.
    let after = written[1].mod_revision;
    let mut stream = watch(&store, "/w/", after).await;
    for kv in &written[2..] {
        let event = next_event(&mut stream).await;
        assert_eq!(event.kind, EventKind::Put);
        assert_eq!(&event.kv, kv);
        assert_eq!(event.revision, kv.mod_revision);
        assert_eq!(event.prev, None);
    }

    // Live.
    let updated = put(&store, "/w/0", "new").await;
    put(&store, "/other/live", "x").await;
    let deleted = within("delete", store.delete("/w/1", Precondition::None))
        .await
        .expect("delete");
    let event = next_event(&mut stream).await;
    assert_eq!(event.kv, updated);
    assert_eq!(event.prev.as_ref(), Some(&written[0]));
    let event = next_event(&mut stream).await;
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.revision, deleted.revision);
    assert_eq!(event.kv, deleted.kv);
    assert_eq!(event.prev.as_ref(), Some(&written[1]));

    // Nothing extra: the next event is the next matching write.
    put(&store, "/other/sentinel", "x").await;
    let sentinel = put(&store, "/w/sentinel", "x").await;
    assert_eq!(next_event(&mut stream).await.kv, sentinel);

    // The same from the very beginning, with the empty prefix seeing everything.
    let mut all = watch(&store, "", r0).await;
    let current = revision(&store).await;
    for expected in r0 + 1..=current {
        assert_eq!(next_event(&mut all).await.revision, expected);
    }
}

/// A watch started while writes are in flight misses none and repeats none.
pub async fn watch_has_no_gaps_while_writes_race_its_start(store: impl Store) {
    let store = Arc::new(store);
    let r0 = revision(&*store).await;
    const WRITES: i64 = 300;
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for i in 0..WRITES {
                put(&*store, &format!("/race/{}", i % 7), "v").await;
            }
        })
    };
    // Start several watches at different moments of the run, all from r0.
    let mut streams = Vec::new();
    for _ in 0..4 {
        streams.push(watch(&*store, "/race/", r0).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    within("writer", writer).await.expect("writer task");
    for mut stream in streams {
        for expected in r0 + 1..=r0 + WRITES {
            assert_eq!(next_event(&mut stream).await.revision, expected);
        }
    }
}

/// After compaction, a watch from before the compacted revision fails with Compacted
/// and one from it works; compacting to the future fails.
pub async fn watch_from_before_compaction_fails(store: impl Store) {
    let r0 = revision(&store).await;
    for i in 0..10 {
        put(&store, &format!("/compact/{i}"), "v").await;
    }
    let at = r0 + 5;
    within("compact", store.compact(at)).await.expect("compact");
    assert_eq!(
        within("compacted_revision", store.compacted_revision())
            .await
            .expect("compacted_revision"),
        at
    );

    match within("watch", store.watch("/compact/", at - 1)).await {
        Err(StoreError::Compacted { compacted, .. }) => assert_eq!(compacted, at),
        Err(other) => panic!("expected Compacted, got {other}"),
        Ok(_) => panic!("expected Compacted, got a watch"),
    }
    let mut stream = watch(&store, "/compact/", at).await;
    for expected in at + 1..=r0 + 10 {
        assert_eq!(next_event(&mut stream).await.revision, expected);
    }
    let live = put(&store, "/compact/live", "v").await;
    assert_eq!(next_event(&mut stream).await.kv, live);

    // Compacting again to an older revision changes nothing.
    within("compact", store.compact(at - 2))
        .await
        .expect("compact to an already compacted revision");
    assert_eq!(
        within("compacted_revision", store.compacted_revision())
            .await
            .expect("compacted_revision"),
        at
    );
    let current = revision(&store).await;
    match within("compact", store.compact(current + 1)).await {
        Err(StoreError::FutureRevision { requested, .. }) => assert_eq!(requested, current + 1),
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

/// Compaction discards history only: current keys, their revisions and the store
/// revision stay; writes go on from there.
pub async fn compaction_keeps_current_keys(store: impl Store) {
    put(&store, "/keep/a", "1").await;
    put(&store, "/keep/b", "1").await;
    put(&store, "/keep/c", "1").await;
    put(&store, "/keep/a", "2").await;
    within("delete", store.delete("/keep/c", Precondition::None))
        .await
        .expect("delete");
    let before = range(&store, "/keep/", None, 0).await;
    let current = revision(&store).await;

    within("compact", store.compact(current))
        .await
        .expect("compact to the current revision");
    assert_eq!(revision(&store).await, current, "compaction is not a write");
    let after = range(&store, "/keep/", None, 0).await;
    assert_eq!(after.kvs, before.kvs);
    assert_eq!(after.revision, current);
    assert_eq!(get(&store, "/keep/c").await, None);

    let mut stream = watch(&store, "/keep/", current).await;
    let next = put(&store, "/keep/b", "2").await;
    assert_eq!(next.mod_revision, current + 1);
    assert_eq!(next_event(&mut stream).await.kv, next);
}

/// 16 concurrent writers × 100 writes: every write acknowledged with its own revision,
/// the revisions contiguous, and a watcher sees each exactly once in order.
pub async fn concurrent_writers_are_all_acknowledged(store: impl Store) {
    const WRITERS: usize = 16;
    const EACH: usize = 100;
    let store = Arc::new(store);
    let r0 = revision(&*store).await;
    let mut stream = watch(&*store, "/concurrent/", r0).await;

    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut acknowledged = Vec::with_capacity(EACH);
                for i in 0..EACH {
                    let key = format!("/concurrent/{w:02}/{i:03}");
                    let kv = put(&*store, &key, &key).await;
                    acknowledged.push((kv.mod_revision, key));
                }
                acknowledged
            })
        })
        .collect();
    let mut by_revision = BTreeMap::new();
    for task in tasks {
        for (revision, key) in within("writer", task).await.expect("writer task") {
            assert!(
                by_revision.insert(revision, key).is_none(),
                "revision {revision} acknowledged twice"
            );
        }
    }
    let total = i64::try_from(WRITERS * EACH).expect("total");
    assert_eq!(by_revision.len(), WRITERS * EACH);
    assert_eq!(by_revision.keys().next(), Some(&(r0 + 1)));
    assert_eq!(by_revision.keys().last(), Some(&(r0 + total)));
    assert_eq!(revision(&*store).await, r0 + total);

    for (revision, key) in &by_revision {
        let event = next_event(&mut stream).await;
        assert_eq!(
            event.revision, *revision,
            "watch events are gapless and ordered"
        );
        assert_eq!(&event.kv.key, key);
    }
}

/// Preconditions inside concurrent (possibly batched) writes see the writes queued
/// before them: one create of a key wins, and CAS increments never lose an update.
pub async fn concurrent_preconditions_see_each_other(store: impl Store) {
    let store = Arc::new(store);
    let creators: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .put("/cp/only", value(&i.to_string()), Precondition::Absent)
                    .await
            })
        })
        .collect();
    let mut won = 0;
    for task in creators {
        match within("creator", task).await.expect("creator task") {
            Ok(_) => won += 1,
            Err(StoreError::PreconditionFailed { current, .. }) => {
                assert!(current.is_some(), "a lost create sees the winner");
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    assert_eq!(won, 1, "exactly one create wins");

    const WORKERS: usize = 8;
    const INCREMENTS: usize = 20;
    put(&*store, "/cp/counter", "0").await;
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut conflicts = 0usize;
                for _ in 0..INCREMENTS {
                    loop {
                        let current = get(&*store, "/cp/counter").await.expect("counter exists");
                        let n: usize = std::str::from_utf8(&current.value)
                            .expect("utf-8")
                            .parse()
                            .expect("number");
                        let next = value(&(n + 1).to_string());
                        match store
                            .put(
                                "/cp/counter",
                                next,
                                Precondition::ModRevision(current.mod_revision),
                            )
                            .await
                        {
                            Ok(_) => break,
                            Err(StoreError::PreconditionFailed { .. }) => conflicts += 1,
                            Err(other) => panic!("unexpected error: {other}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    for worker in workers {
        within("worker", worker).await.expect("worker task");
    }
    let counter = get(&*store, "/cp/counter").await.expect("counter");
    assert_eq!(counter.value, value(&(WORKERS * INCREMENTS).to_string()));
}

/// 100 watchers of one prefix all receive a write.
pub async fn hundred_watchers_all_receive_a_write(store: impl Store) {
    let r0 = revision(&store).await;
    let mut streams = Vec::with_capacity(100);
    for _ in 0..100 {
        streams.push(watch(&store, "/many/", r0).await);
    }
    let written = put(&store, "/many/x", "v").await;
    for (i, stream) in streams.iter_mut().enumerate() {
        assert_eq!(
            next_event(stream).await.kv,
            written,
            "watcher {i} got the write"
        );
    }
}
