//! apiserver-bench: durable create throughput, watch fan-out latency, list latency and
//! resident memory of a real `federation-apiserver` process over loopback, on its
//! embedded redb store or on real etcd (`--store etcd|etcd3` starts one member or a
//! three-member cluster on loopback; `--compare` runs redb, etcd and etcd3 in one
//! invocation and prints the ratios against redb).
//!
//! Run: `cargo build --release --bins && target/release/apiserver-bench`
//! (see docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(about = "Benchmark the federation-apiserver")]
struct Args {
    /// FederatedIngresses to create.
    #[arg(long, default_value_t = 10_000)]
    objects: usize,
    /// Concurrent creating clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Watchers for the fan-out measurement.
    #[arg(long, default_value_t = 100)]
    watchers: usize,
    /// Writes whose delivery to every watcher is timed.
    #[arg(long, default_value_t = 200)]
    writes: usize,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// The apiserver's store: its embedded redb file, one etcd member, or a
    /// three-member etcd cluster (started here on loopback, data on disk in a fresh
    /// temp dir, stopped by PID at the end).
    #[arg(long, value_enum, default_value_t = Store::Redb)]
    store: Store,
    /// Run redb, then etcd, then etcd3 (same workload) and print a table with the
    /// ratios against redb. Overrides --store.
    #[arg(long)]
    compare: bool,
    /// etcd binary for --store etcd|etcd3 (default: `FEDINGRESS_ETCD`, else `etcd`).
    #[arg(long)]
    etcd: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Store {
    /// The embedded redb file (`--data-dir`).
    Redb,
    /// One etcd member.
    Etcd,
    /// A three-member etcd cluster.
    Etcd3,
}

impl Store {
    fn label(self) -> &'static str {
        match self {
            Store::Redb => "redb",
            Store::Etcd => "etcd (1 member)",
            Store::Etcd3 => "etcd (3 members)",
        }
    }

    fn members(self) -> usize {
        match self {
            Store::Redb => 0,
            Store::Etcd => 1,
            Store::Etcd3 => 3,
        }
    }
}

/// What one run measured.
struct Results {
    creates_per_s: f64,
    create_p50: Duration,
    create_p99: Duration,
    list_p50: Duration,
    page_p50: Duration,
    watch_p50: Duration,
    watch_p99: Duration,
    rss_creates: f64,
    rss_watches: f64,
}

const NS: &str = "/apis/fedingress.io/v1alpha1/namespaces/bench/federatedingresses";

fn ingress(name: &str) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name, "labels": {"bench": "yes"}},
        "spec": {
            "rules": [
                {"protocol": "TCP", "port": 7777, "name": "echo", "backend": {"service": "echo", "port": 7777}},
                {"protocol": "UDP", "port": 7777, "backend": {"service": "echo", "port": 7777}},
                {"protocol": "HTTP", "host": format!("{name}.bench.test"), "paths": [{"path": "/", "backend": {"service": "web", "port": 8080}}]}
            ],
            "traffic": {"dnsName": format!("{name}.bench.test"), "strategy": {"type": "Geo"}}
        }
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS not found")?;
    Ok(kib / 1024.0)
}

/// A loopback port that was free a moment ago.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Real etcd members on loopback, data on disk (the same temp filesystem as redb's
/// file: etcd fsyncs its WAL per commit, so tmpfs would not be a fair peer); killed by
/// PID on drop, before the data dir goes.
struct Etcd {
    children: Vec<Child>,
    client_urls: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Etcd {
    async fn start(binary: &Path, size: usize) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("apiserver-bench-etcd-")
            .tempdir()?;
        let mut members = Vec::new();
        for i in 0..size {
            members.push((format!("m{i}"), free_port()?, free_port()?));
        }
        let initial_cluster = members
            .iter()
            .map(|(name, _, peer)| format!("{name}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Self {
            children: Vec::new(),
            client_urls: Vec::new(),
            _dir: dir,
        };
        for (name, client, peer) in &members {
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = std::fs::File::create(etcd._dir.path().join(format!("{name}.log")))?;
            let child = Command::new(binary)
                .arg("--name")
                .arg(name)
                .arg("--data-dir")
                .arg(etcd._dir.path().join(name))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial_cluster])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "apiserver-bench"])
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?;
            etcd.children.push(child);
            etcd.client_urls.push(client_url);
        }
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        for url in &etcd.client_urls {
            loop {
                let healthy = match http.get(format!("{url}/health")).send().await {
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
                        etcd._dir.path().display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(etcd)
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
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

fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}×", value / base)
    } else {
        "—".into()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let stores = if args.compare {
        vec![Store::Redb, Store::Etcd, Store::Etcd3]
    } else {
        vec![args.store]
    };
    let mut results = Vec::new();
    for store in stores {
        println!("== {} ==", store.label());
        results.push((store, run(&args, store).await?));
    }
    if results.len() > 1 {
        print_table(&results);
    }
    Ok(())
}

/// A markdown table of every run, each etcd column followed by its ratio against redb
/// (for latencies, > 1 is slower; for creates/s, < 1 is fewer).
fn print_table(results: &[(Store, Results)]) {
    let base = &results[0].1;
    type Row = (&'static str, fn(&Results) -> f64, fn(f64) -> String);
    let fmt_ms = |v: f64| format!("{v:.2} ms");
    let rows: [Row; 9] = [
        (
            "durable creates/s",
            |r| r.creates_per_s,
            |v| format!("{v:.0}/s"),
        ),
        ("create p50", |r| r.create_p50.as_secs_f64() * 1e3, fmt_ms),
        ("create p99", |r| r.create_p99.as_secs_f64() * 1e3, fmt_ms),
        (
            "watch fan-out p50",
            |r| r.watch_p50.as_secs_f64() * 1e3,
            fmt_ms,
        ),
        (
            "watch fan-out p99",
            |r| r.watch_p99.as_secs_f64() * 1e3,
            fmt_ms,
        ),
        ("list all p50", |r| r.list_p50.as_secs_f64() * 1e3, fmt_ms),
        (
            "first page of 500 p50",
            |r| r.page_p50.as_secs_f64() * 1e3,
            fmt_ms,
        ),
        (
            "apiserver RSS after creates",
            |r| r.rss_creates,
            |v| format!("{v:.1} MiB"),
        ),
        (
            "apiserver RSS with watches",
            |r| r.rss_watches,
            |v| format!("{v:.1} MiB"),
        ),
    ];
    let mut header = String::from("| what |");
    let mut rule = String::from("|---|");
    for (i, (store, _)) in results.iter().enumerate() {
        header.push_str(&format!(" {} |", store.label()));
        rule.push_str("---|");
        if i > 0 {
            header.push_str(" vs redb |");
            rule.push_str("---|");
        }
    }
    println!();
    println!("{header}");
    println!("{rule}");
    for (name, get, show) in rows {
        let mut line = format!("| {name} |");
        for (i, (_, r)) in results.iter().enumerate() {
            line.push_str(&format!(" {} |", show(get(r))));
            if i > 0 {
                line.push_str(&format!(" {} |", ratio(get(r), get(base))));
            }
        }
        println!("{line}");
    }
}

async fn run(args: &Args, store: Store) -> anyhow::Result<Results> {
    let binary = match &args.apiserver {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("bench binary has a directory")?
            .join("federation-apiserver"),
    };
    let etcd = if store == Store::Redb {
        None
    } else {
        let etcd_binary = args
            .etcd
            .clone()
            .or_else(|| std::env::var_os("FEDINGRESS_ETCD").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("etcd"));
        let etcd = Etcd::start(&etcd_binary, store.members()).await?;
        println!(
            "etcd {} (pids {:?}) at {}",
            etcd_binary.display(),
            etcd.pids(),
            etcd.client_urls.join(",")
        );
        Some(etcd)
    };
    let data = tempfile::tempdir()?;
    let mut child = tokio::process::Command::from({
        let mut command = Command::new(&binary);
        command
            .args([
                "--dev",
                "--listen",
                "127.0.0.1:0",
                "--agent-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data.path())
            .env("FEDINGRESS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(etcd) = &etcd {
            command
                .arg("--etcd-servers")
                .arg(etcd.client_urls.join(","));
        }
        command
    })
    .kill_on_drop(true)
    .spawn()
    .with_context(|| format!("starting {}", binary.display()))?;
    let pid = child.id().context("apiserver pid")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("no READY line in 30 s")??
        .context("apiserver exited")?;
    let Some(json) = ready.strip_prefix("READY ") else {
        bail!("unexpected first line: {ready}");
    };
    let addr: Value = serde_json::from_str(json)?;
    let base = format!("http://{}", addr["api"].as_str().unwrap_or_default());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    println!(
        "federation-apiserver pid {pid} at {base}; {} objects, {} clients, {} watchers",
        args.objects, args.clients, args.watchers
    );

    // 1. Durable creates with concurrent clients.
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(args.objects)));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let (client, base, next, latencies, total) = (
            client.clone(),
            base.clone(),
            next.clone(),
            latencies.clone(),
            args.objects,
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                let t = Instant::now();
                let response = client
                    .post(format!("{base}{NS}"))
                    .json(&ingress(&format!("b{n:05}")))
                    .send()
                    .await?;
                if response.status() != 201 {
                    bail!(
                        "create failed: {} {}",
                        response.status(),
                        response.text().await?
                    );
                }
                latencies.lock().await.push(t.elapsed());
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let mut create = latencies.lock().await.clone();
    create.sort();
    let creates_per_s = args.objects as f64 / elapsed.as_secs_f64();
    println!(
        "creates: {} in {:.2} s = {:.0} creates/s (p50 {}, p99 {})",
        args.objects,
        elapsed.as_secs_f64(),
        creates_per_s,
        ms(percentile(&create, 0.5)),
        ms(percentile(&create, 0.99))
    );
    let rss_creates = rss_mib(pid)?;
    println!("rss after creates: {rss_creates:.1} MiB");

    // 2. List latency.
    let mut full = Vec::new();
    let mut paged = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list: Value = client
            .get(format!("{base}{NS}"))
            .send()
            .await?
            .json()
            .await?;
        full.push(t.elapsed());
        let count = list["items"].as_array().map(Vec::len).unwrap_or(0);
        if count != args.objects {
            bail!("list returned {count} items");
        }
        let t = Instant::now();
        let _: Value = client
            .get(format!("{base}{NS}?limit=500"))
            .send()
            .await?
            .json()
            .await?;
        paged.push(t.elapsed());
    }
    full.sort();
    paged.sort();
    println!(
        "list all {}: p50 {} (max {}); first page of 500: p50 {}",
        args.objects,
        ms(percentile(&full, 0.5)),
        ms(percentile(&full, 1.0)),
        ms(percentile(&paged, 0.5))
    );

    // 3. Watch fan-out: time from sending a write to its event reaching every watcher.
    let list: Value = client
        .get(format!("{base}{NS}?limit=1"))
        .send()
        .await?
        .json()
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let received: Arc<Mutex<std::collections::HashMap<String, Vec<Instant>>>> = Arc::default();
    let mut watchers = Vec::new();
    for _ in 0..args.watchers {
        let response = client
            .get(format!(
                "{base}{NS}?watch=true&resourceVersion={rv}&fieldSelector=metadata.name%3Db00000"
            ))
            .send()
            .await?;
        let received = received.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = response.bytes_stream();
            let mut buffer = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                let now = Instant::now();
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(event) = serde_json::from_slice::<Value>(&line)
                        && let Some(v) = event["object"]["metadata"]["labels"]["seq"].as_str()
                    {
                        received
                            .lock()
                            .await
                            .entry(v.to_string())
                            .or_default()
                            .push(now);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut delivery = Vec::new();
    for seq in 0..args.writes {
        let patch = json!({"metadata": {"labels": {"seq": seq.to_string()}}});
        let t = Instant::now();
        let response = client
            .patch(format!("{base}{NS}/b00000"))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("patch failed: {}", response.status());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let done = received
                .lock()
                .await
                .get(&seq.to_string())
                .map(Vec::len)
                .unwrap_or(0);
            if done >= args.watchers {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "write {seq} reached only {done} of {} watchers in 10 s",
                    args.watchers
                );
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let last = received.lock().await[&seq.to_string()]
            .iter()
            .max()
            .copied()
            .unwrap_or(t);
        delivery.push(last - t);
    }
    delivery.sort();
    println!(
        "one write reaching {} watchers (write sent -> last watcher has it), {} writes: p50 {}, p99 {}",
        args.watchers,
        args.writes,
        ms(percentile(&delivery, 0.5)),
        ms(percentile(&delivery, 0.99))
    );
    let rss_watches = rss_mib(pid)?;
    println!(
        "rss with {} objects and {} watches: {rss_watches:.1} MiB",
        args.objects, args.watchers,
    );
    for watcher in watchers {
        watcher.abort();
    }
    let _ = child.kill().await;
    // The apiserver first, then etcd (by PID, in Etcd's drop), then the data dirs.
    drop(etcd);
    Ok(Results {
        creates_per_s,
        create_p50: percentile(&create, 0.5),
        create_p99: percentile(&create, 0.99),
        list_p50: percentile(&full, 0.5),
        page_p50: percentile(&paged, 0.5),
        watch_p50: percentile(&delivery, 0.5),
        watch_p99: percentile(&delivery, 0.99),
        rss_creates,
        rss_watches,
    })
}
