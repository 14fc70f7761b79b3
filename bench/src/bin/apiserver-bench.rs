//! apiserver-bench: durable create throughput, watch latency (a create's acknowledgement
//! → its event on a watch) and fan-out, list latency and resident memory of a real
//! `federation-apiserver` process over loopback, on its embedded redb store or on real
//! etcd (`--store etcd|etcd3` starts one member or a three-member cluster on loopback;
//! `--compare` runs redb, etcd and etcd3 in one invocation and prints the ratios against
//! redb). `--authz` measures issue 12's authorization instead: the admin token against
//! 200 users under 10,000 RoleBindings, and OIDC ID tokens with `--oidc`
//! ([`fedingress_bench::authz`]). `--apply` measures server-side apply and
//! managedFields, each phase against its non-apply peer ([`fedingress_bench::apply`]).
//!
//! Run: `cargo build --release --workspace --bins && target/release/apiserver-bench`
//! (see docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::etcd::{Etcd, StoreKind as Store, etcd_binary};
use fedingress_bench::{ms, percentile, rss_mib};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(about = "Benchmark the federation-apiserver")]
struct Args {
    /// FederatedIngresses to create [default: 10000; with --apply 3000 per set].
    #[arg(long)]
    objects: Option<usize>,
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
    /// Measure authorization at scale instead (issue 12): the admin token, then users
    /// under a multi-tenant RBAC policy (and OIDC tokens with --oidc), interleaved, as
    /// ratios against the admin; uses --clients.
    #[arg(long)]
    authz: bool,
    #[command(flatten)]
    authz_options: fedingress_bench::authz::Options,
    /// Measure server-side apply instead: create, change, resync, a second manager and
    /// status writes, each against its non-apply peer (--objects per set, --clients).
    #[arg(long)]
    apply: bool,
}

impl Args {
    fn objects(&self) -> usize {
        self.objects.unwrap_or(10_000)
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
    /// Create acknowledged → its ADDED event on a watch, ms (negative: the event came
    /// first), while 16 clients create; and one create at a time.
    ack_watch_loaded: (f64, f64),
    ack_watch_sequential: (f64, f64),
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
    if args.authz {
        let binary = fedingress_bench::sibling(args.apiserver.clone(), "federation-apiserver")?;
        return fedingress_bench::authz::run(&binary, &args.authz_options, args.clients).await;
    }
    if args.apply {
        let binary = fedingress_bench::sibling(args.apiserver.clone(), "federation-apiserver")?;
        let objects = args.objects.unwrap_or(3_000);
        return fedingress_bench::apply::run(&binary, objects, args.clients).await;
    }
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
    let rows: [Row; 13] = [
        (
            "durable creates/s",
            |r| r.creates_per_s,
            |v| format!("{v:.0}/s"),
        ),
        ("create p50", |r| r.create_p50.as_secs_f64() * 1e3, fmt_ms),
        ("create p99", |r| r.create_p99.as_secs_f64() * 1e3, fmt_ms),
        (
            "create ack → on a watch, p50 (16 clients creating)",
            |r| r.ack_watch_loaded.0,
            fmt_ms,
        ),
        (
            "create ack → on a watch, p99 (16 clients creating)",
            |r| r.ack_watch_loaded.1,
            fmt_ms,
        ),
        (
            "create ack → on a watch, p50 (one create at a time)",
            |r| r.ack_watch_sequential.0,
            fmt_ms,
        ),
        (
            "create ack → on a watch, p99 (one create at a time)",
            |r| r.ack_watch_sequential.1,
            fmt_ms,
        ),
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
        let etcd_binary = etcd_binary(args.etcd.clone());
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
    fedingress_bench::Api::new(&base)?
        .create_namespace("bench")
        .await?;
    println!(
        "federation-apiserver pid {pid} at {base}; {} objects, {} clients, {} watchers",
        args.objects(),
        args.clients,
        args.watchers
    );

    // A watch on the namespace from before the first create: when each object arrives.
    let added = watch_added(&client, &base).await?;

    // 1. Durable creates with concurrent clients.
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(args.objects())));
    let acks: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let (client, base, next, latencies, acks, total) = (
            client.clone(),
            base.clone(),
            next.clone(),
            latencies.clone(),
            acks.clone(),
            args.objects(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                let t = Instant::now();
                let name = format!("b{n:05}");
                let response = client
                    .post(format!("{base}{NS}"))
                    .json(&ingress(&name))
                    .send()
                    .await?;
                if response.status() != 201 {
                    bail!(
                        "create failed: {} {}",
                        response.status(),
                        response.text().await?
                    );
                }
                let acked = Instant::now();
                latencies.lock().await.push(acked - t);
                acks.lock().await.push((name, acked));
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    let mut create = latencies.lock().await.clone();
    create.sort();
    let creates_per_s = args.objects() as f64 / elapsed.as_secs_f64();
    println!(
        "creates: {} in {:.2} s = {:.0} creates/s (p50 {}, p99 {})",
        args.objects(),
        elapsed.as_secs_f64(),
        creates_per_s,
        ms(percentile(&create, 0.5)),
        ms(percentile(&create, 0.99))
    );
    let rss_creates = rss_mib(pid)?;
    println!("rss after creates: {rss_creates:.1} MiB");
    let ack_watch_loaded = ack_to_watch(&acks.lock().await, &added).await?;
    println!(
        "create acknowledged -> its ADDED event on a watch of the namespace, {} creates by {} clients: p50 {:.2} ms, p99 {:.2} ms ({:.1} % of the events arrived before the acknowledgement)",
        args.objects(),
        args.clients,
        ack_watch_loaded.0,
        ack_watch_loaded.1,
        ack_watch_loaded.2
    );

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
        if count != args.objects() {
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
        args.objects(),
        ms(percentile(&full, 0.5)),
        ms(percentile(&full, 1.0)),
        ms(percentile(&paged, 0.5))
    );

    // The same one create at a time.
    let mut sequential = Vec::with_capacity(args.writes);
    for n in 0..args.writes {
        let name = format!("s{n:05}");
        let response = client
            .post(format!("{base}{NS}"))
            .json(&ingress(&name))
            .send()
            .await?;
        if response.status() != 201 {
            bail!("create failed: {}", response.status());
        }
        sequential.push((name, Instant::now()));
    }
    let ack_watch_sequential = ack_to_watch(&sequential, &added).await?;
    println!(
        "create acknowledged -> its ADDED event on a watch, {} creates one at a time: p50 {:.2} ms, p99 {:.2} ms ({:.1} % before the acknowledgement)",
        args.writes, ack_watch_sequential.0, ack_watch_sequential.1, ack_watch_sequential.2
    );
    added.abort();

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
        args.objects(),
        args.watchers,
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
        ack_watch_loaded: (ack_watch_loaded.0, ack_watch_loaded.1),
        ack_watch_sequential: (ack_watch_sequential.0, ack_watch_sequential.1),
        rss_creates,
        rss_watches,
    })
}

/// Object names the watch saw ADDED, and when.
type Added = Arc<std::sync::Mutex<HashMap<String, Instant>>>;

/// A watch task on the namespace from its current resourceVersion, recording when each
/// object's ADDED event arrived.
async fn watch_added(client: &reqwest::Client, base: &str) -> anyhow::Result<WatchTask> {
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
    let response = client
        .get(format!("{base}{NS}?watch=true&resourceVersion={rv}"))
        .send()
        .await?;
    let added: Added = Arc::default();
    let out = added.clone();
    let task = tokio::spawn(async move {
        let mut stream = response.bytes_stream();
        let mut buffer = Vec::new();
        while let Some(Ok(chunk)) = stream.next().await {
            let now = Instant::now();
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if let Ok(event) = serde_json::from_slice::<Value>(&line)
                    && event["type"] == "ADDED"
                    && let Some(name) = event["object"]["metadata"]["name"].as_str()
                {
                    out.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(name.to_string())
                        .or_insert(now);
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(WatchTask { added, task })
}

struct WatchTask {
    added: Added,
    task: tokio::task::JoinHandle<()>,
}

impl WatchTask {
    fn abort(&self) {
        self.task.abort();
    }
}

/// For each acknowledged create, its event's arrival minus the acknowledgement, ms
/// (waits up to 10 s for the last events): p50, p99, and the % that came first.
async fn ack_to_watch(
    acks: &[(String, Instant)],
    watch: &WatchTask,
) -> anyhow::Result<(f64, f64, f64)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let missing = {
            let added = watch.added.lock().unwrap_or_else(|p| p.into_inner());
            acks.iter()
                .filter(|(name, _)| !added.contains_key(name))
                .count()
        };
        if missing == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{missing} acknowledged creates never arrived on the watch");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let added = watch.added.lock().unwrap_or_else(|p| p.into_inner());
    let mut deltas: Vec<f64> = acks
        .iter()
        .filter_map(|(name, acked)| {
            let arrived = *added.get(name)?;
            Some(if arrived >= *acked {
                (arrived - *acked).as_secs_f64() * 1e3
            } else {
                -((*acked - arrived).as_secs_f64() * 1e3)
            })
        })
        .collect();
    deltas.sort_by(f64::total_cmp);
    if deltas.is_empty() {
        return Ok((0.0, 0.0, 0.0));
    }
    let at = |p: f64| deltas[((deltas.len() as f64 - 1.0) * p).round() as usize];
    let before = deltas.iter().filter(|d| **d < 0.0).count() as f64 / deltas.len() as f64;
    Ok((at(0.5), at(0.99), before * 100.0))
}
