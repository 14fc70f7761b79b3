//! A fault-injection harness of our own for the HA mode (issue 23): three etcd members
//! and three replicas on loopback (block 127.0.83.x, the default replica lease of 3 s),
//! two standalone agents and a RoundRobin ingress, as `ha.rs` sets them up. Throughout:
//!
//! - **optimistic-concurrency counters:** workers read a Role through one replica and
//!   write it back through the same replica with its annotation `count` plus one and a
//!   unique `writer`, under the resourceVersion read (a 409 reads again). Every answer
//!   is recorded, and at the end judged against etcd's own history of those keys
//!   (etcd's watch from revision 1): every acknowledged write is in it exactly once, at
//!   its resourceVersion; the counts go up by exactly one per revision (no lost update);
//!   no write answered 503 ("not applied") is there; only 504 ("outcome unknown")
//!   writes may or may not be;
//! - **every live replica's SOA serial**, sampled every 100 ms: two live replicas serving
//!   different serials for more than 1 s fail the test.
//!
//! The faults, in order:
//! 1. `kill -9` of etcd's raft-leader member while the counters run: no answer of 500,
//!    no replica read-only (`/readyz` sampled), no replica lease lost. The write latency
//!    spike (from the kill to the first acknowledged write sent after it) is printed;
//! 2. the member restarted;
//! 3. SIGSTOP of the leader replica for twice its lease while an ingress is created
//!    through another: once resumed, it serves the current serial (and the new name)
//!    within 1 s; the time is printed;
//! 4. `kill -9` of a replica while the counters run.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fedingress_store::etcd_process::EtcdCluster;
use fedingress_store::{EtcdOptions, EtcdStore, EventKind, Store};
use fedingress_tests::eventually;
use fedingress_tests::replicas::{WAIT, converged, federation, leader};
use futures_util::StreamExt;

const BLOCK: u8 = 83;
/// The default `--leader-elect-lease-duration`.
const LEASE: Duration = Duration::from_secs(3);
const COUNTERS: usize = 4;
const WORKERS_PER_REPLICA: usize = 2;
const NAMESPACE: &str = "counters";
/// Two live replicas may serve different serials for at most this long.
const SERIAL_SKEW: Duration = Duration::from_secs(1);

/// What a replica answered one counter write (printed with `Debug` when wrong).
#[derive(Clone, Debug)]
#[allow(dead_code)]
struct Answer {
    sent: Instant,
    answered: Instant,
    replica: usize,
    counter: usize,
    /// The unique value of the `writer` annotation.
    writer: String,
    /// 0: no HTTP answer (the connection failed).
    code: u16,
    /// The resourceVersion of an acknowledged write.
    rv: Option<i64>,
    body: String,
}

/// Which replicas the workers and samplers may talk to (not paused, not killed).
#[derive(Clone)]
struct Live(Arc<Vec<AtomicBool>>);

impl Live {
    fn new(n: usize) -> Self {
        Self(Arc::new((0..n).map(|_| AtomicBool::new(true)).collect()))
    }
    fn get(&self, i: usize) -> bool {
        self.0[i].load(Ordering::SeqCst)
    }
    fn set(&self, i: usize, live: bool) {
        self.0[i].store(live, Ordering::SeqCst);
    }
}

fn role_url(api: &str, counter: usize) -> String {
    format!("{api}/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles/c-{counter}")
}

/// One worker: read-modify-write of its counters through replica `replica` until `stop`.
async fn worker(
    id: usize,
    api: String,
    replica: usize,
    live: Live,
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<Answer>>>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut attempt = 0u64;
    while !stop.load(Ordering::SeqCst) {
        if !live.get(replica) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        attempt += 1;
        let counter = (id + attempt as usize) % COUNTERS;
        let url = role_url(&api, counter);
        let Ok(read) = client.get(&url).send().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let read_code = read.status().as_u16();
        let Ok(mut role) = read.json::<serde_json::Value>().await else {
            continue;
        };
        if read_code != 200 {
            answers.lock().unwrap().push(Answer {
                sent: Instant::now(),
                answered: Instant::now(),
                replica,
                counter,
                writer: String::new(),
                code: read_code,
                rv: None,
                body: format!("GET: {role}"),
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let count: u64 = role["metadata"]["annotations"]["count"]
            .as_str()
            .and_then(|c| c.parse().ok())
            .unwrap();
        let writer = format!("w{id}-{attempt}");
        role["metadata"]["annotations"]["count"] = (count + 1).to_string().into();
        role["metadata"]["annotations"]["writer"] = writer.clone().into();
        let sent = Instant::now();
        let answer = client.put(&url).json(&role).send().await;
        let (code, body) = match answer {
            Ok(response) => (
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            ),
            Err(error) => (0, error.to_string()),
        };
        let rv = (code == 200)
            .then(|| serde_json::from_str::<serde_json::Value>(&body).ok())
            .flatten()
            .and_then(|o| o["metadata"]["resourceVersion"].as_str()?.parse().ok());
        answers.lock().unwrap().push(Answer {
            sent,
            answered: Instant::now(),
            replica,
            counter,
            writer,
            code,
            rv,
            body: if code == 200 { String::new() } else { body },
        });
    }
}

/// One sample of every live replica's SOA serial (`None`: no answer).
type SerialSample = (Instant, Vec<Option<Option<String>>>);

/// Samples every live replica's serial every 100 ms until `stop`.
fn sample_serials(
    replicas: Vec<std::net::SocketAddr>,
    live: Live,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<SerialSample>> {
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let at = Instant::now();
            let serials = replicas
                .iter()
                .enumerate()
                .map(|(i, dns)| {
                    live.get(i)
                        .then(|| {
                            fedingress_testsupport::dns::dig_short(*dns, &["SOA", "ha.test"])
                                .first()
                                .and_then(|soa| soa.split_whitespace().nth(2).map(str::to_string))
                        })
                        // A replica paused or killed while it was asked does not count.
                        .filter(|_| live.get(i))
                })
                .collect();
            samples.push((at, serials));
            std::thread::sleep(Duration::from_millis(100));
        }
        samples
    })
}

/// The longest stretch during which two live replicas served different serials.
fn longest_disagreement(samples: &[SerialSample]) -> (Duration, String) {
    let mut longest = (Duration::ZERO, String::new());
    let mut since: Option<Instant> = None;
    for (at, serials) in samples {
        let answered: Vec<&String> = serials.iter().flatten().flatten().collect();
        let differ = answered.windows(2).any(|w| w[0] != w[1]);
        match (differ, since) {
            (true, None) => since = Some(*at),
            (true, Some(start)) if at.duration_since(start) > longest.0 => {
                longest = (at.duration_since(start), format!("{serials:?}"));
            }
            (false, _) => since = None,
            _ => {}
        }
    }
    longest
}

/// `/readyz` of every live replica every 50 ms until `stop`: the failures seen.
fn sample_readyz(
    apis: Vec<String>,
    live: Live,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(Instant, usize, String)>> {
    std::thread::spawn(move || {
        let mut failures = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            for (i, api) in apis.iter().enumerate() {
                if !live.get(i) {
                    continue;
                }
                let out = Command::new("curl")
                    .args(["-sS", "--max-time", "2", "-w", " %{http_code}"])
                    .arg(format!("{api}/readyz"))
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                if !text.ends_with(" 200") && live.get(i) {
                    failures.push((Instant::now(), i, text));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        failures
    })
}

/// etcd's own history of the counters: per counter, (mod revision, count, writer) of
/// every put, in revision order.
fn history(
    runtime: &tokio::runtime::Runtime,
    endpoints: &[String],
) -> Vec<Vec<(i64, u64, String)>> {
    runtime.block_on(async {
        let mut options = EtcdOptions::new(endpoints.to_vec());
        options.key_prefix = "/ha".into();
        let store = EtcdStore::connect(options).await.unwrap();
        let now = store.revision().await.unwrap();
        let mut events = store.watch("/registry/", 1).await.unwrap();
        let mut per_counter = vec![Vec::new(); COUNTERS];
        let mut last = 1;
        while last < now {
            let event = tokio::time::timeout(WAIT, events.next())
                .await
                .expect("etcd's history up to now")
                .unwrap()
                .unwrap();
            last = event.kv.mod_revision.max(last);
            let Some(counter) =
                (0..COUNTERS).find(|c| event.kv.key.ends_with(&format!("/{NAMESPACE}/c-{c}")))
            else {
                continue;
            };
            assert_eq!(event.kind, EventKind::Put, "a counter was deleted");
            let role: serde_json::Value = serde_json::from_slice(&event.kv.value).unwrap();
            let annotations = &role["metadata"]["annotations"];
            per_counter[counter].push((
                event.kv.mod_revision,
                annotations["count"].as_str().unwrap().parse().unwrap(),
                annotations["writer"].as_str().unwrap().to_string(),
            ));
        }
        per_counter
    })
}

/// Judges the answers against etcd's history (see the module's documentation).
fn judge_counters(answers: &[Answer], history: &[Vec<(i64, u64, String)>]) -> Result<(), String> {
    let mut written: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    for (counter, puts) in history.iter().enumerate() {
        for pair in puts.windows(2) {
            if pair[1].1 != pair[0].1 + 1 {
                return Err(format!(
                    "counter {counter}: {:?} then {:?}",
                    pair[0], pair[1]
                ));
            }
        }
        for (rv, _, writer) in puts {
            if written.insert(writer.as_str(), (counter, *rv)).is_some() && writer != "init" {
                return Err(format!("writer {writer} applied twice"));
            }
        }
    }
    for answer in answers.iter().filter(|a| !a.writer.is_empty()) {
        let applied = written.get(answer.writer.as_str());
        match (answer.code, applied) {
            (200, Some(&(counter, rv))) if counter == answer.counter && Some(rv) == answer.rv => {}
            (200, other) => {
                return Err(format!("{answer:?} acknowledged but etcd has {other:?}"));
            }
            (409 | 503, Some(applied)) => {
                return Err(format!("{answer:?} refused but applied at {applied:?}"));
            }
            _ => {}
        }
    }
    Ok(())
}

fn create_late_ingress(k: &fedingress_tests::Kubectl, dir: &std::path::Path) {
    let path = dir.join("late.yaml");
    std::fs::write(
        &path,
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: late\nspec:\n  rules:\n  - protocol: TCP\n    port: 7002\n    backend: {service: echo, port: 9000}\n  traffic:\n    dnsName: late.ha.test\n    ttl: 5\n    strategy: {type: RoundRobin}\n",
    )
    .unwrap();
    k.ok(&["apply", "-f", &path.display().to_string()]);
}

#[test]
fn counters_serials_and_leases_hold_through_member_loss_a_paused_leader_and_a_killed_replica() {
    let mut etcd = EtcdCluster::three();
    let endpoints = etcd.endpoints();
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut f = federation(dir.path(), BLOCK, 3, &endpoints.join(","), LEASE.as_secs());
    let steady = f.steady.clone();
    let serial = eventually(WAIT, "every replica answers the same", || {
        converged(&f.replicas, &steady)
    });
    eprintln!("steady state {steady:?}, serial {serial}");
    let k = f.replicas[0].kubectl(dir.path());
    k.create_namespace(NAMESPACE);
    for c in 0..COUNTERS {
        let path = dir.path().join(format!("c-{c}.yaml"));
        std::fs::write(
            &path,
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: c-{c}\n  namespace: {NAMESPACE}\n  annotations: {{count: \"0\", writer: init}}\nrules: []\n"),
        )
        .unwrap();
        k.ok(&["create", "-f", &path.display().to_string()]);
    }

    let live = Live::new(3);
    let stop = Arc::new(AtomicBool::new(false));
    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let workers: Vec<_> = (0..3 * WORKERS_PER_REPLICA)
        .map(|id| {
            let replica = id % 3;
            runtime.spawn(worker(
                id,
                f.replicas[replica].api.clone(),
                replica,
                live.clone(),
                stop.clone(),
                answers.clone(),
            ))
        })
        .collect();
    let serials = sample_serials(
        f.replicas.iter().map(|r| r.dns).collect(),
        live.clone(),
        stop.clone(),
    );
    let readyz = sample_readyz(
        f.replicas.iter().map(|r| r.api.clone()).collect(),
        live.clone(),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_secs(3));

    // 1. The raft leader member dies.
    let leases_before: usize = f
        .replicas
        .iter()
        .map(|r| r.logged("lease lost").len())
        .sum();
    let member = etcd.wait_for_leader(WAIT);
    let member_killed = Instant::now();
    etcd.member_mut(member).kill();
    eprintln!("etcd member {member} (the raft leader) killed");
    std::thread::sleep(Duration::from_secs(8));
    let member_phase_end = Instant::now();
    let lost_leases: Vec<String> = f
        .replicas
        .iter()
        .flat_map(|r| r.logged("lease lost"))
        .skip(leases_before)
        .collect();
    // 2. It comes back.
    etcd.member_mut(member).restart();
    etcd.wait_healthy(WAIT).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let read_only: Vec<String> = f
        .replicas
        .iter()
        .flat_map(|r| r.logged("read-only"))
        .collect();

    // 3. The leader replica freezes past its lease while an ingress is created.
    let paused = leader(&f.replicas).unwrap();
    let other = (paused + 1) % 3;
    live.set(paused, false);
    f.replicas[paused].process.as_ref().unwrap().pause();
    let paused_at = Instant::now();
    eprintln!("replica {} (the leader) paused", f.replicas[paused].name);
    std::thread::sleep(LEASE / 2);
    create_late_ingress(&f.replicas[other].kubectl(dir.path()), dir.path());
    eventually(WAIT, "the live replicas answer the new name", || {
        let answers: Vec<Vec<String>> = f
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != paused)
            .map(|(_, r)| r.dig(&["A", "late.ha.test"]))
            .collect();
        (answers.iter().all(|a| *a == steady))
            .then_some(())
            .ok_or(format!("{answers:?}"))
    });
    let current = eventually(WAIT, "the live replicas agree on a serial", || {
        converged(&f.replicas[other..=other], &steady)
    });
    std::thread::sleep((LEASE * 2).saturating_sub(paused_at.elapsed()));
    f.replicas[paused].process.as_ref().unwrap().resume();
    let resumed_at = Instant::now();
    live.set(paused, true);
    let caught_up = eventually(
        WAIT,
        "the resumed replica serves the current serial",
        || {
            let replica = &f.replicas[paused];
            let serial = replica.serial();
            let answer = replica.dig(&["A", "late.ha.test"]);
            (serial.as_deref() == Some(current.as_str()) && answer == steady)
                .then(Instant::now)
                .ok_or(format!("serial {serial:?}, late.ha.test {answer:?}"))
        },
    );
    let catch_up = caught_up.duration_since(resumed_at);
    eprintln!(
        "resumed ex-leader {} served serial {current} {catch_up:?} after resuming (paused {:?})",
        f.replicas[paused].name,
        resumed_at.duration_since(paused_at)
    );
    std::thread::sleep(Duration::from_secs(2));

    // 4. A replica dies under the counters (not the one that now leads).
    let leading = eventually(WAIT, "a leader", || leader(&f.replicas));
    let victim = (leading + 1) % 3;
    live.set(victim, false);
    let victim_killed = Instant::now();
    f.replicas[victim].kill9();
    eprintln!("replica {} killed", f.replicas[victim].name);
    std::thread::sleep(Duration::from_secs(4));

    stop.store(true, Ordering::SeqCst);
    runtime.block_on(async {
        for worker in workers {
            worker.await.unwrap();
        }
    });
    let serials = serials.join().unwrap();
    let readyz = readyz.join().unwrap();
    let answers = std::mem::take(&mut *answers.lock().unwrap());

    // The counters: answers by code, the spike, and the judgement against etcd.
    let mut codes: BTreeMap<u16, usize> = BTreeMap::new();
    for answer in &answers {
        *codes.entry(answer.code).or_default() += 1;
    }
    eprintln!("counter answers by status code: {codes:?}");
    for answer in answers.iter().filter(|a| matches!(a.code, 503 | 504)) {
        let since = |t: Instant| answer.sent.checked_duration_since(t);
        eprintln!(
            "{} sent {:?} after the member's kill, {:?} after the pause, {:?} after the replica's kill: {}",
            answer.code,
            since(member_killed),
            since(paused_at),
            since(victim_killed),
            answer.body
        );
    }
    let first_after_kill = answers
        .iter()
        .filter(|a| a.code == 200 && a.sent >= member_killed)
        .map(|a| a.answered)
        .min()
        .unwrap();
    let last_before = answers
        .iter()
        .filter(|a| a.code == 200 && a.answered < member_killed)
        .map(|a| a.answered)
        .max()
        .unwrap();
    eprintln!(
        "write latency spike: first write sent after the member's kill acknowledged {:?} after the kill (the last one before it {:?} before)",
        first_after_kill.duration_since(member_killed),
        member_killed.duration_since(last_before)
    );
    let slowest = answers
        .iter()
        .filter(|a| a.sent >= member_killed && a.sent < member_phase_end)
        .map(|a| a.answered.duration_since(a.sent))
        .max()
        .unwrap_or_default();
    eprintln!("slowest counter write during the member loss: {slowest:?}");
    let bad: Vec<&Answer> = answers
        .iter()
        .filter(|a| !matches!(a.code, 200 | 409 | 503 | 504))
        // A request in flight to the replica killed fails with the connection.
        .filter(|a| !(a.code == 0 && a.replica == victim && a.answered >= victim_killed))
        .collect();
    let history = history(&runtime, &endpoints);
    let acknowledged = answers.iter().filter(|a| a.code == 200).count();
    let puts: usize = history.iter().map(Vec::len).sum();
    eprintln!("{acknowledged} acknowledged counter writes, {puts} puts in etcd's history");
    judge_counters(&answers, &history).unwrap();
    assert!(
        bad.is_empty(),
        "answers other than 200, 409, 503, 504: {bad:#?}"
    );

    // Readiness and leases through the member loss.
    let not_ready: Vec<_> = readyz
        .iter()
        .filter(|(at, _, _)| *at >= member_killed && *at < member_phase_end)
        .collect();
    assert!(
        not_ready.is_empty(),
        "/readyz failed during the member loss: {not_ready:#?}"
    );
    if !lost_leases.is_empty() {
        for replica in &f.replicas {
            for line in replica.logged("lease") {
                eprintln!("{}: {line}", replica.name);
            }
        }
    }
    assert!(
        lost_leases.is_empty(),
        "leases lost to the member loss: {lost_leases:#?}"
    );
    assert!(
        read_only.is_empty(),
        "a replica went read-only: {read_only:#?}"
    );

    // Serials: never apart for long, and the resumed ex-leader caught up in time.
    let (longest, at) = longest_disagreement(&serials);
    eprintln!("longest serial disagreement between live replicas: {longest:?}");
    assert!(
        longest <= SERIAL_SKEW,
        "live replicas disagreed {longest:?}: {at}"
    );
    assert!(
        catch_up <= SERIAL_SKEW,
        "the resumed ex-leader took {catch_up:?}"
    );
    drop(f);
}
