//! apiserver-bench: durable create throughput, watch fan-out latency, list latency and
//! resident memory of a real `federation-apiserver` process over loopback.
//!
//! Run: `cargo build --release --bins && target/release/apiserver-bench`
//! (see docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let binary = match args.apiserver {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .context("bench binary has a directory")?
            .join("federation-apiserver"),
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
    println!(
        "creates: {} in {:.2} s = {:.0} creates/s (p50 {}, p99 {})",
        args.objects,
        elapsed.as_secs_f64(),
        args.objects as f64 / elapsed.as_secs_f64(),
        ms(percentile(&create, 0.5)),
        ms(percentile(&create, 0.99))
    );
    println!("rss after creates: {:.1} MiB", rss_mib(pid)?);

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
    println!(
        "rss with {} objects and {} watches: {:.1} MiB",
        args.objects,
        args.watchers,
        rss_mib(pid)?
    );
    for watcher in watchers {
        watcher.abort();
    }
    let _ = child.kill().await;
    Ok(())
}
