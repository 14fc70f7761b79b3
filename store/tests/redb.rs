//! RedbStore: the shared battery, plus what only an on-disk store has to prove
//! (reopen, crash durability, bad files).

// clippy's allow-unwrap-in-tests covers #[test] fns only, not this file's helpers.
#![allow(
    clippy::unwrap_used,
    reason = "a test: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fedingress_store::{
    EventKind, Precondition, RedbOptions, RedbStore, Store, StoreError, battery,
};
use futures_util::StreamExt;

fn options() -> RedbOptions {
    RedbOptions {
        cache_size_bytes: 16 * 1024 * 1024,
        max_batch: 128,
    }
}

/// A fresh store in its own directory; keep the directory alive as long as the store.
fn fresh() -> (tempfile::TempDir, RedbStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("store.redb"), options()).unwrap();
    (dir, store)
}

macro_rules! battery_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (_dir, store) = fresh();
                battery::$name(store).await;
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

#[tokio::test]
async fn empty_store_is_at_revision_one() {
    let (_dir, store) = fresh();
    assert_eq!(store.revision().await.unwrap(), 1);
    assert_eq!(store.compacted_revision().await.unwrap(), 0);
    let kv = store
        .put("/a", Bytes::from_static(b"x"), Precondition::None)
        .await
        .unwrap();
    assert_eq!(
        kv.mod_revision, 2,
        "the first write gets revision 2, as in etcd"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_keeps_data_revision_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let store = RedbStore::open(&path, options()).unwrap();
    let mut written = Vec::new();
    for i in 0..20 {
        let key = format!("/reopen/{}", i % 5);
        written.push(
            store
                .put(&key, Bytes::from(format!("v{i}")), Precondition::None)
                .await
                .unwrap(),
        );
    }
    let deleted = store.delete("/reopen/4", Precondition::None).await.unwrap();
    store.compact(written[4].mod_revision).await.unwrap();
    let revision = store.revision().await.unwrap();
    let before = store.range("/reopen/", None, 0).await.unwrap();
    let mut history_before = Vec::new();
    let mut stream = store
        .watch("/reopen/", written[4].mod_revision)
        .await
        .unwrap();
    for _ in written[4].mod_revision..revision {
        history_before.push(stream.next().await.unwrap().unwrap());
    }
    drop(stream);
    store.close().await.unwrap();

    let store = RedbStore::open(&path, options()).unwrap();
    assert_eq!(store.revision().await.unwrap(), revision);
    assert_eq!(
        store.compacted_revision().await.unwrap(),
        written[4].mod_revision
    );
    let after = store.range("/reopen/", None, 0).await.unwrap();
    assert_eq!(after.kvs, before.kvs);
    assert_eq!(after.revision, revision);
    assert_eq!(store.get("/reopen/4").await.unwrap(), None);

    // A watch from an old revision replays the history written before the restart.
    let mut stream = store
        .watch("/reopen/", written[4].mod_revision)
        .await
        .unwrap();
    for expected in &history_before {
        let event = stream.next().await.unwrap().unwrap();
        assert_eq!(event.revision, expected.revision);
        assert_eq!(event.kind, expected.kind);
        assert_eq!(event.kv, expected.kv);
        assert_eq!(event.prev, expected.prev);
    }
    let last = history_before.last().unwrap();
    assert_eq!(last.kind, EventKind::Delete);
    assert_eq!(last.kv, deleted.kv);
    assert!(matches!(
        store.watch("/reopen/", written[3].mod_revision).await,
        Err(StoreError::Compacted { .. })
    ));

    // And goes on live with the next revision.
    let next = store
        .put("/reopen/new", Bytes::new(), Precondition::Absent)
        .await
        .unwrap();
    assert_eq!(next.mod_revision, revision + 1);
    assert_eq!(stream.next().await.unwrap().unwrap().kv, next);
}

/// The child side of `acknowledged_writes_survive_kill_9`: writes until killed, printing
/// each acknowledged key. Does nothing unless the parent set the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by acknowledged_writes_survive_kill_9 in a child process"]
async fn crash_child_writer() {
    let Some(path) = std::env::var_os("FEDINGRESS_STORE_CRASH_CHILD") else {
        return;
    };
    let store = Arc::new(RedbStore::open(Path::new(&path), options()).unwrap());
    let (acks, mut acked) = tokio::sync::mpsc::unbounded_channel::<String>();
    for w in 0..8 {
        let store = Arc::clone(&store);
        let acks = acks.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let key = format!("/crash/{w}/{i}");
                store
                    .put(&key, Bytes::from(key.clone()), Precondition::Absent)
                    .await
                    .unwrap();
                if acks.send(key).is_err() {
                    return;
                }
            }
        });
    }
    let mut stdout = std::io::stdout();
    while let Some(key) = acked.recv().await {
        writeln!(stdout, "{key}").unwrap();
        stdout.flush().unwrap();
    }
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child_writer", "--ignored", "--nocapture"])
        .env("FEDINGRESS_STORE_CRASH_CHILD", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut acknowledged = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if line.starts_with("/crash/") {
            acknowledged.push(line);
        }
        if acknowledged.len() >= 300 || Instant::now() > deadline {
            break;
        }
    }
    // SIGKILL: no destructor, no close, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        acknowledged.len() >= 300,
        "child acknowledged only {} writes",
        acknowledged.len()
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = RedbStore::open(&path, options()).unwrap();
        for key in &acknowledged {
            let kv = store.get(key).await.unwrap();
            assert_eq!(
                kv.map(|kv| kv.value),
                Some(Bytes::from(key.clone())),
                "acknowledged write {key} survived"
            );
        }
        // The history is whole too: replaying it from the start has no gaps.
        let revision = store.revision().await.unwrap();
        let mut stream = store.watch("", 0).await.unwrap();
        for expected in 2..=revision {
            assert_eq!(stream.next().await.unwrap().unwrap().revision, expected);
        }
    });
}

fn assert_open_fails(path: &Path) {
    match RedbStore::open(path, options()) {
        Err(StoreError::Open { .. } | StoreError::Corrupt { .. }) => {}
        Err(other) => panic!("unexpected error kind: {other}"),
        Ok(_) => panic!("opening {} should fail", path.display()),
    }
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
fn garbage(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn garbage_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    for (i, len) in [1usize, 100, 4096, 64 * 1024, 1024 * 1024]
        .into_iter()
        .enumerate()
    {
        let path = dir.path().join(format!("garbage-{i}.redb"));
        std::fs::write(&path, garbage(len, i as u64 + 7)).unwrap();
        assert_open_fails(&path);
    }
    let text = dir.path().join("text.redb");
    std::fs::write(&text, "apiVersion: v1\nkind: Config\n").unwrap();
    assert_open_fails(&text);
}

#[test]
fn foreign_redb_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let table: redb::TableDefinition<&str, &[u8]> =
                redb::TableDefinition::new("fedingress_kv");
            let mut table = txn.open_table(table).unwrap();
            table.insert("/a", b"not a record".as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    assert_open_fails(&path);
}

/// Flipping bytes anywhere in a real store file must never panic the opener or the
/// reader: open may fail, or succeed with reads that fail or return what survived.
#[test]
fn corrupted_store_file_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = RedbStore::open(&path, options()).unwrap();
        for i in 0..200 {
            store
                .put(
                    &format!("/c/{i:03}"),
                    Bytes::from(vec![b'x'; 300]),
                    Precondition::None,
                )
                .await
                .unwrap();
        }
        store.close().await.unwrap();
    });
    let pristine = std::fs::read(&path).unwrap();
    let copy: PathBuf = dir.path().join("corrupt.redb");
    let step = (pristine.len() / 97).max(1);
    for (n, offset) in (0..pristine.len()).step_by(step).enumerate() {
        let mut bytes = pristine.clone();
        let end = (offset + 64).min(bytes.len());
        bytes[offset..end].copy_from_slice(&garbage(end - offset, n as u64 + 1));
        std::fs::write(&copy, &bytes).unwrap();
        let Ok(store) = RedbStore::open(&copy, options()) else {
            continue;
        };
        runtime.block_on(async {
            let _ = store.range("", None, 0).await;
            let _ = store.get("/c/100").await;
            if let Ok(mut stream) = store.watch("", 0).await {
                let revision = store.revision().await.unwrap_or(0);
                for _ in 1..revision {
                    match stream.next().await {
                        Some(Ok(_)) => {}
                        _ => break,
                    }
                }
            }
            let _ = store.put("/after", Bytes::new(), Precondition::None).await;
            store.close().await.unwrap();
        });
    }
}

#[tokio::test]
async fn second_open_of_the_same_file_fails() {
    let (dir, _store) = fresh();
    assert_open_fails(&dir.path().join("store.redb"));
}

#[test]
fn open_in_a_missing_directory_fails() {
    let dir = tempfile::tempdir().unwrap();
    assert_open_fails(&dir.path().join("missing/store.redb"));
}

/// Durable writes per second with 16 concurrent writers. Not an assertion (machines
/// differ): `cargo test --release -p fedingress-store --test redb -- --ignored
/// write_throughput --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, not a check"]
async fn write_throughput() {
    const WRITERS: usize = 16;
    const EACH: usize = 500;
    let (_dir, store) = fresh();
    let store = Arc::new(store);
    let started = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for i in 0..EACH {
                    store
                        .put(
                            &format!("/bench/{w}/{i}"),
                            Bytes::from(vec![b'v'; 512]),
                            Precondition::None,
                        )
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let writes = WRITERS * EACH;
    eprintln!(
        "{writes} durable writes by {WRITERS} writers in {elapsed:?}: {:.0} writes/s",
        writes as f64 / elapsed.as_secs_f64()
    );
}
