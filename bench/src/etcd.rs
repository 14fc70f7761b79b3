//! Real etcd for the benches: [`Etcd`] starts one member or a cluster of several on
//! loopback, data on disk in a fresh temp dir (the same filesystem as redb's file: etcd
//! fsyncs its WAL per commit, so tmpfs would not be a fair peer; the tests'
//! `fedingress_store::etcd_process` puts data in `/dev/shm` instead), killed by PID on
//! drop. [`StoreKind`] is the `--store redb|etcd|etcd3` choice of the benches.
//!
//! What etcd did is read over plain HTTP, with no etcd client: [`Etcd::counters`] from
//! a member's `/metrics` (revision, puts, deletes, raft proposals, WAL fsyncs), and
//! [`KeyWatch`] follows every key through etcd's JSON gateway (`/v3/watch`) and counts
//! the changed keys and bytes per key prefix.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fedingress_testsupport::free_port;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Where an apiserver keeps its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    /// The embedded redb file (`--data-dir`).
    Redb,
    /// One etcd member.
    Etcd,
    /// A three-member etcd cluster.
    Etcd3,
}

impl StoreKind {
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Redb => "redb",
            StoreKind::Etcd => "etcd (1 member)",
            StoreKind::Etcd3 => "etcd (3 members)",
        }
    }

    /// etcd members to start (0 for redb).
    pub fn members(self) -> usize {
        match self {
            StoreKind::Redb => 0,
            StoreKind::Etcd => 1,
            StoreKind::Etcd3 => 3,
        }
    }
}

/// The etcd binary: `given`, else `FEDINGRESS_ETCD`, else `etcd` (on `PATH`).
pub fn etcd_binary(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("FEDINGRESS_ETCD").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("etcd"))
}

/// Real etcd members on loopback; see the module docs.
pub struct Etcd {
    children: Vec<Child>,
    pub client_urls: Vec<String>,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts `size` members and waits (30 s at most) until every one is healthy.
    pub async fn start(binary: &Path, size: usize) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("fedingress-bench-etcd-")
            .tempdir()?;
        let mut members = Vec::new();
        for i in 0..size {
            members.push((
                format!("m{i}"),
                free_port(Ipv4Addr::LOCALHOST),
                free_port(Ipv4Addr::LOCALHOST),
            ));
        }
        let initial_cluster = members
            .iter()
            .map(|(name, _, peer)| format!("{name}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Self {
            children: Vec::new(),
            client_urls: Vec::new(),
            http: reqwest::Client::new(),
            dir,
        };
        for (name, client, peer) in &members {
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(etcd.dir.path().join(format!("{name}.log")))?;
            let child = Command::new(binary)
                .arg("--name")
                .arg(name)
                .arg("--data-dir")
                .arg(etcd.dir.path().join(name))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "fedingress-bench"])
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?;
            etcd.children.push(child);
            etcd.client_urls.push(client_url);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for url in &etcd.client_urls {
            loop {
                let healthy = match etcd.http.get(format!("{url}/health")).send().await {
                    Ok(response) => response
                        .text()
                        .await
                        .is_ok_and(|body| body.contains("\"health\":\"true\"")),
                    Err(_) => false,
                };
                if healthy {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "etcd at {url} not healthy in 30 s (logs in {})",
                        etcd.dir.path().display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(etcd)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The client URLs, comma-separated (what `--etcd-servers` takes).
    pub fn servers(&self) -> String {
        self.client_urls.join(",")
    }

    /// What the first member counted so far (every member applies the same writes).
    pub async fn counters(&self) -> anyhow::Result<EtcdCounters> {
        let url = self.client_urls.first().context("no etcd member")?;
        let text = self
            .http
            .get(format!("{url}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let metric = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_default()
        };
        Ok(EtcdCounters {
            revision: metric("etcd_debugging_mvcc_current_revision"),
            puts: metric("etcd_mvcc_put_total"),
            deletes: metric("etcd_mvcc_delete_total"),
            proposals: metric("etcd_server_proposals_committed_total"),
            fsyncs: metric("etcd_disk_wal_fsync_duration_seconds_count"),
        })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Counters of one etcd member (`/metrics`). Puts and deletes count keys (a transaction
/// writing several keys counts each); the revision moves once per transaction that
/// changed something; proposals are raft entries (writes, lease grants and revokes;
/// keep-alives are not proposals); fsyncs are the member's WAL fsyncs.
#[derive(Clone, Copy, Debug, Default)]
pub struct EtcdCounters {
    pub revision: f64,
    pub puts: f64,
    pub deletes: f64,
    pub proposals: f64,
    pub fsyncs: f64,
}

impl EtcdCounters {
    /// `self - before`, per second over `seconds`.
    pub fn rate_since(&self, before: &Self, seconds: f64) -> Self {
        let per = |a: f64, b: f64| (a - b) / seconds;
        Self {
            revision: per(self.revision, before.revision),
            puts: per(self.puts, before.puts),
            deletes: per(self.deletes, before.deletes),
            proposals: per(self.proposals, before.proposals),
            fsyncs: per(self.fsyncs, before.fsyncs),
        }
    }
}

/// Changed keys and bytes of value written, per key prefix.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrefixCount {
    /// Puts and deletes.
    pub changes: u64,
    pub bytes: u64,
}

/// The prefix a key is counted under: `/registry/<group>/<resource>` for objects,
/// else the first two segments (`/fedingress/agents`, `/fedingress/dns`).
pub fn key_prefix(key: &str) -> String {
    let segments = if key.starts_with("/registry/") { 4 } else { 3 };
    key.splitn(segments + 1, '/')
        .take(segments)
        .collect::<Vec<_>>()
        .join("/")
}

/// Follows every key of an etcd from a revision on and counts the changes per prefix;
/// see the module docs. Stops (aborts its task) on drop.
pub struct KeyWatch {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

/// What a [`KeyWatch`] saw: every change (revision, prefix, bytes of value, when it
/// arrived) and the
/// latest revision among them (every revision changes at least one key, and the watch
/// covers every key, so a revision it has seen means it has seen all before it).
#[derive(Default)]
struct Seen {
    changes: Vec<(i64, String, usize, Instant)>,
    revision: i64,
}

/// Standard base64 (what etcd's JSON gateway writes bytes as); invalid characters are
/// skipped.
fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut count) = (0u32, 0);
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => continue,
        };
        bits = (bits << 6) | u32::from(value);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

/// A revision as etcd's JSON gateway writes it (a string).
fn revision_of(value: &Value) -> i64 {
    value
        .as_str()
        .and_then(|v| v.parse().ok())
        .or_else(|| value.as_i64())
        .unwrap_or_default()
}

impl KeyWatch {
    /// Watches from the revision after `revision` through the member at `url`.
    pub async fn start(url: &str, revision: i64) -> anyhow::Result<Self> {
        // Key "\0" with range end "\0": every key (base64, as the gateway wants bytes).
        let everything = "AA==";
        let body = json!({"create_request": {
            "key": everything,
            "range_end": everything,
            "start_revision": (revision + 1).to_string(),
        }});
        let response = reqwest::Client::new()
            .post(format!("{url}/v3/watch"))
            .json(&body)
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("etcd watch: {}", response.status());
        }
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let out = seen.clone();
        let task = tokio::spawn(async move {
            let mut stream = response.bytes_stream();
            let mut buffer = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    let Ok(message) = serde_json::from_slice::<Value>(&line) else {
                        continue;
                    };
                    let result = &message["result"];
                    let mut seen = out.lock().unwrap_or_else(|p| p.into_inner());
                    for event in result["events"].as_array().into_iter().flatten() {
                        let decode = |field: &str| {
                            event["kv"][field]
                                .as_str()
                                .map(base64_decode)
                                .unwrap_or_default()
                        };
                        let key = String::from_utf8_lossy(&decode("key")).to_string();
                        let at = revision_of(&event["kv"]["mod_revision"]);
                        seen.changes.push((
                            at,
                            key_prefix(&key),
                            decode("value").len(),
                            Instant::now(),
                        ));
                        seen.revision = seen.revision.max(at);
                    }
                }
            }
        });
        Ok(Self { seen, task })
    }

    /// The changes after revision `from` up to and including `until`, per prefix, once
    /// the watch has seen that far (10 s at most; what it saw by then otherwise).
    pub async fn counts_between(&self, from: i64, until: i64) -> BTreeMap<String, PrefixCount> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                if seen.revision >= until || Instant::now() > deadline {
                    let mut counts: BTreeMap<String, PrefixCount> = BTreeMap::new();
                    for (at, prefix, bytes, _) in &seen.changes {
                        if *at > from && *at <= until {
                            let count = counts.entry(prefix.clone()).or_default();
                            count.changes += 1;
                            count.bytes += *bytes as u64;
                        }
                    }
                    return counts;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Changes of keys under `prefix` (as [`key_prefix`] names it) that arrived in the
    /// last `window`.
    pub fn recent(&self, prefix: &str, window: Duration) -> usize {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.changes
            .iter()
            .rev()
            .take_while(|(.., arrived)| arrived.elapsed() < window)
            .filter(|(_, p, ..)| p == prefix)
            .count()
    }

    /// Changes seen so far under `prefix`.
    pub fn total(&self, prefix: &str) -> usize {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.changes.iter().filter(|(_, p, ..)| p == prefix).count()
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
