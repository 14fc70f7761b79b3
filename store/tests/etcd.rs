//! EtcdStore against a real etcd (Debian's etcd-server) started by each test: the
//! shared battery, plus what only a store on a shared, distributed server has to prove
//! (key prefixes, compaction by someone else, member failures, unreachable servers).
//! Needs the `etcd` feature: `cargo nextest run -p fedingress-store --features etcd`.

#![allow(
    clippy::unwrap_used,
    reason = "a test: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use fedingress_store::etcd_process::EtcdCluster;
use fedingress_store::{
    Coordination, EtcdOptions, EtcdStore, EventKind, Precondition, Store, StoreError, battery,
};
use futures_util::StreamExt;

const WAIT: Duration = Duration::from_secs(30);

async fn connect(cluster: &EtcdCluster, prefix: &str) -> EtcdStore {
    let mut options = EtcdOptions::new(cluster.endpoints());
    options.key_prefix = prefix.to_string();
    EtcdStore::connect(options).await.unwrap()
}

macro_rules! battery_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let etcd = EtcdCluster::single();
                battery::$name(connect(&etcd, "").await).await;
            }
        )*
    };
}

battery_tests!(
    revisions_increase_by_one_per_write,
    create_with_absent_fails_when_present,
    compare_and_swap_fails_on_stale_revision,
    delete_with_and_without_precondition,
    range_by_prefix_in_key_order,
    range_pages_with_start_after_and_limit,
    range_revision_is_consistent,
    range_at_reads_past_revisions,
    range_at_pages_a_snapshot_while_writes_go_on,
    range_at_refuses_compacted_and_future_revisions,
    watch_replays_history_then_live,
    watch_has_no_gaps_while_writes_race_its_start,
    watch_from_before_compaction_fails,
    compaction_keeps_current_keys,
    concurrent_writers_are_all_acknowledged,
    concurrent_preconditions_see_each_other,
    hundred_watchers_all_receive_a_write,
);

/// The battery again, through a key prefix (kube-apiserver's `--etcd-prefix`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn battery_passes_under_a_key_prefix() {
    let etcd = EtcdCluster::single();
    battery::watch_replays_history_then_live(connect(&etcd, "/prefixed").await).await;
    battery::range_pages_with_start_after_and_limit(connect(&etcd, "/paged").await).await;
    battery::delete_with_and_without_precondition(connect(&etcd, "/deleted").await).await;
}

#[tokio::test]
async fn empty_etcd_is_at_revision_one() {
    let etcd = EtcdCluster::single();
    let store = connect(&etcd, "").await;
    assert_eq!(store.revision().await.unwrap(), 1);
    assert_eq!(store.compacted_revision().await.unwrap(), 0);
    let kv = store
        .put("/a", Bytes::from_static(b"x"), Precondition::None)
        .await
        .unwrap();
    assert_eq!(kv.mod_revision, 2, "the first write gets revision 2");
}

/// Two prefixes on one etcd: neither sees the other's keys, in ranges or watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prefixes_keep_stores_apart() {
    let etcd = EtcdCluster::single();
    let a = connect(&etcd, "/a").await;
    let b = connect(&etcd, "/b").await;
    let mut watch_a = a.watch("", 1).await.unwrap();
    a.put("/x", Bytes::from_static(b"a"), Precondition::Absent)
        .await
        .unwrap();
    let b_x = b
        .put("/x", Bytes::from_static(b"b"), Precondition::Absent)
        .await
        .unwrap();
    let a_y = a
        .put("/y", Bytes::from_static(b"a"), Precondition::None)
        .await
        .unwrap();
    let all_b = b.range("", None, 0).await.unwrap();
    assert_eq!(all_b.kvs, vec![b_x.clone()]);
    assert_eq!(b.get("/y").await.unwrap(), None);
    assert_eq!(
        a.range("", None, 0)
            .await
            .unwrap()
            .kvs
            .iter()
            .map(|kv| kv.key.as_str())
            .collect::<Vec<_>>(),
        ["/x", "/y"]
    );
    let first = tokio::time::timeout(WAIT, watch_a.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((first.kv.key.as_str(), first.revision), ("/x", 2));
    let second = tokio::time::timeout(WAIT, watch_a.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.kv, a_y, "b's write at revision 3 is not a's");
}

/// Another replica compacts: this store learns the compacted revision from etcd, and a
/// watch from before it fails with Compacted (410 Gone in the API).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_by_another_client_is_seen() {
    let etcd = EtcdCluster::single();
    let here = connect(&etcd, "").await;
    let there = connect(&etcd, "").await;
    let mut written = Vec::new();
    for i in 0..40 {
        written.push(
            here.put(&format!("/c/{i}"), Bytes::new(), Precondition::None)
                .await
                .unwrap(),
        );
    }
    let at = written[26].mod_revision;
    there.compact(at).await.unwrap();
    assert_eq!(here.compacted_revision().await.unwrap(), at);
    match here.watch("/c/", at - 1).await {
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (at - 1, at)),
        Err(other) => panic!("expected Compacted, got {other}"),
        Ok(_) => panic!("expected Compacted, got a watch"),
    }
    let mut watch = here.watch("/c/", at).await.unwrap();
    let next = tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.revision, at + 1);
    // Compacting behind what etcd already compacted is a no-op, not an error.
    here.compact(at - 3).await.unwrap();
    there.compact(at + 5).await.unwrap();
    assert_eq!(here.compacted_revision().await.unwrap(), at + 5);
}

#[tokio::test]
async fn unreachable_etcd_fails_connect_in_time() {
    // A port nothing listens on.
    let port = fedingress_testsupport::free_port([127, 0, 0, 1]);
    let mut options = EtcdOptions::new([format!("http://127.0.0.1:{port}")]);
    options.request_timeout = Duration::from_secs(2);
    let started = std::time::Instant::now();
    match EtcdStore::connect(options).await {
        Err(StoreError::Backend { operation, .. }) => assert_eq!(operation, "connect to etcd"),
        Err(other) => panic!("expected a connect error, got {other}"),
        Ok(_) => panic!("connected to nothing"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Writes one key until etcd acknowledges it; a retry after a lost reply that finds its
/// own value counts as acknowledged.
async fn put_until_acknowledged(store: &EtcdStore, key: &str) -> i64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match store
            .put(key, Bytes::from(key.to_string()), Precondition::Absent)
            .await
        {
            Ok(kv) => return kv.mod_revision,
            Err(StoreError::PreconditionFailed {
                current: Some(current),
                ..
            }) if current.value == key.as_bytes() => return current.mod_revision,
            Err(error) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "write of {key} not acknowledged: {error}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Three members; the leader is killed (and later the member after it) while a watch
/// is open and writes go on: the watch delivers every write once, in order, and the
/// store keeps working on the surviving quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_leader_loss_in_a_three_member_cluster() {
    let mut etcd = EtcdCluster::three();
    let store = connect(&etcd, "").await;
    let r0 = store.revision().await.unwrap();
    let mut watch = store.watch("/ha/", r0).await.unwrap();
    let mut acknowledged = BTreeMap::new();
    for i in 0..20 {
        let key = format!("/ha/{i:03}");
        acknowledged.insert(put_until_acknowledged(&store, &key).await, key);
    }
    let leader = etcd.wait_for_leader(WAIT);
    etcd.member_mut(leader).kill();
    for i in 20..60 {
        let key = format!("/ha/{i:03}");
        acknowledged.insert(put_until_acknowledged(&store, &key).await, key);
    }
    // Back to three, then lose another one (maybe the member serving the watch).
    etcd.member_mut(leader).restart();
    etcd.wait_healthy(WAIT).unwrap();
    let other = (leader + 1) % 3;
    etcd.member_mut(other).kill();
    for i in 60..100 {
        let key = format!("/ha/{i:03}");
        acknowledged.insert(put_until_acknowledged(&store, &key).await, key);
    }
    let last = *acknowledged.keys().last().unwrap();
    let mut seen = BTreeMap::new();
    let mut previous = r0;
    while previous < last {
        let event = tokio::time::timeout(WAIT, watch.next())
            .await
            .unwrap_or_else(|_| panic!("no event after revision {previous}"))
            .unwrap()
            .unwrap();
        assert!(event.revision > previous, "events in revision order, once");
        assert_eq!(event.kind, EventKind::Put);
        previous = event.revision;
        seen.insert(event.revision, event.kv.key);
    }
    assert_eq!(
        seen, acknowledged,
        "every acknowledged write seen exactly once"
    );
    let range = store.range("/ha/", None, 0).await.unwrap();
    assert_eq!(range.kvs.len(), 100);
}

/// The member serving a watch dies and comes back (same data, same ports): the stream
/// breaks, and the watch resumes from the last revision it delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_its_member_restarts() {
    let mut etcd = EtcdCluster::single();
    let mut options = EtcdOptions::new(etcd.endpoints());
    options.request_timeout = Duration::from_secs(2);
    let store = EtcdStore::connect(options).await.unwrap();
    let r0 = store.revision().await.unwrap();
    let mut watch = store.watch("/resume/", r0).await.unwrap();
    let before = put_until_acknowledged(&store, "/resume/before").await;
    let first = tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.revision, before);

    etcd.member_mut(0).kill();
    // Written while the watch is broken: the write fails, nothing is delivered.
    assert!(
        store
            .put("/resume/down", Bytes::new(), Precondition::None)
            .await
            .is_err()
    );
    etcd.member_mut(0).restart();
    etcd.wait_healthy(WAIT).unwrap();
    let after = put_until_acknowledged(&store, "/resume/after").await;
    let next = tokio::time::timeout(WAIT, watch.next())
        .await
        .expect("the watch resumed")
        .unwrap()
        .unwrap();
    assert_eq!(
        (next.revision, next.kv.key.as_str()),
        (after, "/resume/after"),
        "no gap, no duplicate"
    );
    assert_eq!(after, before + 1);
}

/// A key written with a lease goes when the lease ends: dropped by its holder (revoked),
/// or expired because its holder stopped renewing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_keys_vanish_with_their_lease() {
    let etcd = EtcdCluster::single();
    let store = connect(&etcd, "").await;
    let lease = store.grant(Duration::from_secs(2)).await.unwrap();
    store
        .put_leased(
            "/agents/a",
            Bytes::from_static(b"1"),
            Precondition::None,
            &lease,
        )
        .await
        .unwrap();
    // Renewed in the background: still there after more than one time to live.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!lease.is_lost());
    assert!(store.get("/agents/a").await.unwrap().is_some());
    let mut events = store
        .watch("/agents/", store.revision().await.unwrap())
        .await
        .unwrap();
    drop(lease);
    let event = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.kv.key, "/agents/a");
}

/// One leader at a time; the next campaigner wins when the leader's lease ends, and the
/// deposed leader's fenced writes are refused although it never noticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_fence_the_deposed_leader() {
    let etcd = EtcdCluster::single();
    let first = connect(&etcd, "/p").await;
    let second = connect(&etcd, "/p").await;
    let first_lease = first.grant(Duration::from_secs(2)).await.unwrap();
    let fence = first.campaign("/leader", "r1", &first_lease).await.unwrap();
    let leader = first.fenced(fence.clone());
    leader
        .put(
            "/status/x",
            Bytes::from_static(b"by r1"),
            Precondition::None,
        )
        .await
        .unwrap();
    assert_eq!(
        first.get("/leader").await.unwrap().unwrap().value,
        Bytes::from_static(b"r1")
    );

    let second_lease = second.grant(Duration::from_secs(2)).await.unwrap();
    let campaign = {
        let second = second.clone();
        tokio::spawn(async move {
            let fence = second.campaign("/leader", "r2", &second_lease).await;
            (fence, second_lease)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!campaign.is_finished(), "r1 still leads");

    // r1's lease ends (revoked on drop; as when its process dies and it expires).
    drop(first_lease);
    let (won, _second_lease) = tokio::time::timeout(WAIT, campaign).await.unwrap().unwrap();
    let won = won.unwrap();
    assert!(won.revision > fence.revision);

    // r1 still believes it leads: its writes are refused, not applied.
    let refused = leader
        .put(
            "/status/x",
            Bytes::from_static(b"stale"),
            Precondition::None,
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    let refused = leader.delete("/status/x", Precondition::None).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(
        first.get("/status/x").await.unwrap().unwrap().value,
        Bytes::from_static(b"by r1")
    );
    // The new leader's writes go through, preconditions still apply.
    let new_leader = second.fenced(won.clone());
    let stale = new_leader
        .put("/status/x", Bytes::from_static(b"r2"), Precondition::Absent)
        .await;
    assert!(
        matches!(stale, Err(StoreError::PreconditionFailed { .. })),
        "{stale:?}"
    );
    new_leader
        .put("/status/x", Bytes::from_static(b"r2"), Precondition::None)
        .await
        .unwrap();
    second.resign(&won).await.unwrap();
    assert!(second.get("/leader").await.unwrap().is_none());
}
