//! l7-bench: HTTP and HTTPS requests per second with `wrk` straight to nginx, through
//! HAProxy (`nbthread 1`, `http-reuse always`) and through a release `cluster-agent`'s
//! HTTP and HTTPS listeners, all to the same nginx returning a fixed body.
//!
//! nginx, HAProxy and wrk are the Debian packages (`apt-get install nginx haproxy wrk`);
//! the certificate (ECDSA P-256, the same for nginx, HAProxy and the agent) is made with
//! the `openssl` command. The agent gets its rules from a release `federation-apiserver`
//! like in production: Cluster, token and a FederatedIngress with an HTTP and an HTTPS
//! rule are created over REST.
//!
//! Run: `cargo build --release --workspace --bins && target/release/l7-bench` (see
//! docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::{Api, Apiserver, CpuWindow, GROUP_PATH, HubTiming, Proc, sibling, today};
use fedingress_testsupport::Poll;
use serde_json::json;

#[derive(Parser)]
#[command(about = "HTTP(S) through the cluster-agent vs straight to nginx vs through HAProxy")]
struct Args {
    /// Measured seconds per wrk run.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Warm-up seconds before each measured run (a separate wrk run, not counted).
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// wrk threads.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// wrk connections.
    #[arg(long, default_value_t = 50)]
    connections: u32,
    /// Rounds over all targets (the order rotates per round); the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// nginx worker processes.
    #[arg(long, default_value_t = 1)]
    nginx_workers: u32,
    /// The agent's runtime worker threads (`TOKIO_WORKER_THREADS`); 0: its default, one
    /// per CPU.
    #[arg(long, default_value_t = 0)]
    agent_threads: usize,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// cluster-agent binary (default: next to this one).
    #[arg(long)]
    agent: Option<PathBuf>,
}

const HUB_IP: &str = "127.0.86.2";
const AGENT_IP: &str = "127.0.86.12";
const NGINX_IP: &str = "127.0.86.21";
const HAPROXY_IP: &str = "127.0.86.32";
const HTTP_PORT: u16 = 8080;
const HTTPS_PORT: u16 = 8443;
/// What nginx answers (the same bytes through every path).
const BODY: &str = "hello from nginx\n";

fn tool(name: &str) -> anyhow::Result<PathBuf> {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match found {
        Some(path) if !path.as_os_str().is_empty() => Ok(path),
        _ => bail!(
            "{name} not found on PATH: install it with `apt-get install -y {}` (Debian)",
            match name {
                "nginx" => "nginx",
                "haproxy" => "haproxy",
                "wrk" => "wrk",
                _ => "openssl",
            }
        ),
    }
}

/// A self-signed ECDSA P-256 certificate and key for `bench.example.com` (PEM files).
fn certificate(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let cert = dir.join("bench.crt");
    let key = dir.join("bench.key");
    let status = Command::new(tool("openssl")?)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .arg("ec_paramgen_curve:prime256v1")
        .args(["-nodes", "-days", "2", "-subj", "/CN=bench.example.com"])
        .args(["-addext", "subjectAltName=DNS:bench.example.com"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .context("running openssl")?;
    if !status.success() {
        bail!("openssl req failed");
    }
    Ok((cert, key))
}

fn nginx_config(dir: &Path, workers: u32, cert: &Path, key: &Path) -> String {
    let d = dir.display();
    format!(
        "worker_processes {workers};\n\
         daemon off;\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n\
           access_log off;\n\
           keepalive_requests 10000000;\n\
           keepalive_timeout 120s;\n\
           client_body_temp_path {d}/client;\n\
           proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fastcgi;\n\
           uwsgi_temp_path {d}/uwsgi;\n\
           scgi_temp_path {d}/scgi;\n\
           default_type text/plain;\n\
           server {{\n\
             listen {NGINX_IP}:{HTTP_PORT};\n\
             listen {NGINX_IP}:{HTTPS_PORT} ssl;\n\
             ssl_certificate {cert};\n\
             ssl_certificate_key {key};\n\
             location / {{ return 200 \"{body}\"; }}\n\
           }}\n\
         }}\n",
        cert = cert.display(),
        key = key.display(),
        body = BODY.replace('\n', "\\n"),
    )
}

fn haproxy_config(pem: &Path) -> String {
    format!(
        "global\n    nbthread 1\n    maxconn 4096\n    tune.ssl.default-dh-param 2048\n\
         defaults\n    mode http\n    option http-keep-alive\n    option forwardfor\n    http-reuse always\n\
         \x20   timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\
         frontend http\n    bind {HAPROXY_IP}:{HTTP_PORT}\n\
         \x20   http-request set-header X-Forwarded-Proto http\n\
         \x20   http-request set-header X-Forwarded-Host %[req.hdr(host)]\n\
         \x20   default_backend nginx\n\
         frontend https\n    bind {HAPROXY_IP}:{HTTPS_PORT} ssl crt {pem} alpn h2,http/1.1\n\
         \x20   http-request set-header X-Forwarded-Proto https\n\
         \x20   http-request set-header X-Forwarded-Host %[req.hdr(host)]\n\
         \x20   default_backend nginx\n\
         backend nginx\n    server nginx1 {NGINX_IP}:{HTTP_PORT}\n",
        pem = pem.display()
    )
}

/// What one wrk run measured.
#[derive(Clone, Debug, Default)]
struct Run {
    requests_per_second: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    errors: u64,
    /// CPU of the proxy (or of nginx's processes when direct), % of one core.
    cpu: f64,
}

fn parse_ms(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, factor) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (text, 1.0)
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// Parses wrk's `--latency` output.
fn parse_wrk(output: &str) -> anyhow::Result<Run> {
    let mut run = Run::default();
    for line in output.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            run.requests_per_second = rest.trim().parse().context("Requests/sec")?;
        } else if let Some(rest) = line.strip_prefix("50%") {
            run.latency_p50_ms = parse_ms(rest).unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("99%") {
            run.latency_p99_ms = parse_ms(rest).unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            run.errors += rest.trim().parse::<u64>().unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            run.errors += rest
                .split(',')
                .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    if run.requests_per_second == 0.0 {
        bail!("no Requests/sec in wrk's output:\n{output}");
    }
    Ok(run)
}

/// `pid` and its child processes (nginx's workers).
fn with_children(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    pids
}

async fn wrk(args: &Args, url: &str, seconds: u64, pid: u32) -> anyhow::Result<Run> {
    let window = CpuWindow::start(&with_children(pid));
    let output = tokio::process::Command::new("wrk")
        .arg(format!("-t{}", args.threads))
        .arg(format!("-c{}", args.connections))
        .arg(format!("-d{seconds}s"))
        .arg("--latency")
        .arg(url)
        .output()
        .await
        .context("running wrk")?;
    let cpu = window.finish().iter().sum();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "wrk {url} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut run = parse_wrk(&text)?;
    run.cpu = cpu;
    Ok(run)
}

/// One answer through `url` with the expected body (curl, certificate not checked).
fn probe(url: &str) -> Result<(), String> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "2", url])
        .output()
        .map_err(|e| e.to_string())?;
    let body = String::from_utf8_lossy(&out.stdout);
    if body == BODY {
        Ok(())
    } else {
        Err(format!("{url} answered {body:?}"))
    }
}

struct Target {
    name: &'static str,
    http: String,
    https: String,
    pid: u32,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or_default()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let apiserver = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let agent_binary = sibling(args.agent.clone(), "cluster-agent")?;
    for name in ["nginx", "haproxy", "wrk", "openssl", "curl"] {
        tool(name)?;
    }
    let hub = Apiserver::start(
        &apiserver,
        HUB_IP,
        HubTiming {
            heartbeat_ms: 2000,
            lease_ms: 6000,
        },
    )
    .await?;
    let mut children: Vec<Proc> = Vec::new();
    let mut dirs: Vec<tempfile::TempDir> = Vec::new();
    let result = run(&args, &hub, &agent_binary, &mut children, &mut dirs).await;
    for child in children {
        child.stop().await;
    }
    hub.proc.stop().await;
    drop(dirs);
    result
}

async fn run(
    args: &Args,
    hub: &Apiserver,
    agent_binary: &Path,
    children: &mut Vec<Proc>,
    dirs: &mut Vec<tempfile::TempDir>,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (cert, key) = certificate(dir.path())?;

    // nginx: the backend, and the direct target.
    let nginx_dir = dir.path().join("nginx");
    std::fs::create_dir_all(&nginx_dir)?;
    let conf = nginx_dir.join("nginx.conf");
    std::fs::write(
        &conf,
        nginx_config(&nginx_dir, args.nginx_workers, &cert, &key),
    )?;
    let mut command = Command::new(tool("nginx")?);
    command
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(&nginx_dir)
        .arg("-e")
        .arg(nginx_dir.join("error.log"));
    let nginx = Proc::start_plain(command, "nginx")?;
    let nginx_pid = nginx.pid;
    children.push(nginx);
    let direct_http = format!("http://{NGINX_IP}:{HTTP_PORT}/");
    let direct_https = format!("https://{NGINX_IP}:{HTTPS_PORT}/");
    Poll::new(Duration::from_secs(10))
        .every(Duration::from_millis(50))
        .try_async("nginx", || async { probe(&direct_http) })
        .await?;

    // HAProxy.
    let pem = dir.path().join("haproxy.pem");
    std::fs::write(
        &pem,
        format!(
            "{}{}",
            std::fs::read_to_string(&cert)?,
            std::fs::read_to_string(&key)?
        ),
    )?;
    let haproxy_cfg = dir.path().join("haproxy.cfg");
    std::fs::write(&haproxy_cfg, haproxy_config(&pem))?;
    let mut command = Command::new(tool("haproxy")?);
    command.arg("-db").arg("-f").arg(&haproxy_cfg);
    let haproxy = Proc::start_plain(command, "haproxy")?;
    let haproxy_pid = haproxy.pid;
    children.push(haproxy);
    let haproxy_http = format!("http://{HAPROXY_IP}:{HTTP_PORT}/");
    let haproxy_https = format!("https://{HAPROXY_IP}:{HTTPS_PORT}/");
    Poll::new(Duration::from_secs(10))
        .every(Duration::from_millis(50))
        .try_async("haproxy", || async { probe(&haproxy_http) })
        .await?;

    // The agent, configured through the hub.
    let api = Api::new(&hub.api)?;
    api.create_namespace("bench").await?;
    api.create_cluster("l7", "europe-west1", 50.4, 3.8).await?;
    let token = api.issue_token("l7").await?;
    let agent_dir = tempfile::tempdir()?;
    std::fs::write(agent_dir.path().join("token"), &token)?;
    let config = agent_dir.path().join("agent.yaml");
    std::fs::write(
        &config,
        format!(
            "hub:\n  address: http://{hub}\ncluster: l7\ntokenFile: token\ndriver: standalone\nlisten:\n- bind: \"{AGENT_IP}\"\nservices:\n  nginx: [\"{NGINX_IP}:{HTTP_PORT}\"]\ntlsSecrets:\n  bench-tls: {{certFile: '{cert}', keyFile: '{key}'}}\nstateDir: state\nadmin: 127.0.0.1:0\n",
            hub = hub.agent,
            cert = cert.display(),
            key = key.display(),
        ),
    )?;
    let mut command = Command::new(agent_binary);
    command
        .arg("--config")
        .arg(&config)
        .env("FEDINGRESS_LOG", "error");
    if args.agent_threads > 0 {
        command.env("TOKIO_WORKER_THREADS", args.agent_threads.to_string());
    }
    let agent = Proc::start_ready(command, "cluster-agent l7").await?;
    let agent_pid = agent.pid;
    children.push(agent);
    dirs.push(agent_dir);
    // Rules without a host (wrk sends the IP as Host and SNI): the tls entry without
    // hosts is the default certificate.
    let path = json!([{"path": "/", "pathType": "Prefix", "backend": {"service": "nginx", "port": HTTP_PORT}}]);
    let ingress = json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": "l7"},
        "spec": {
            "rules": [
                {"protocol": "HTTP", "port": HTTP_PORT, "paths": path},
                {"protocol": "HTTPS", "port": HTTPS_PORT, "paths": path},
            ],
            "tls": [{"secretName": "bench-tls"}],
            "traffic": {"dnsName": "l7.bench.test"}
        }
    });
    api.post(
        &format!("{GROUP_PATH}/namespaces/bench/federatedingresses"),
        Some(&ingress),
    )
    .await?;
    let agent_http = format!("http://{AGENT_IP}:{HTTP_PORT}/");
    let agent_https = format!("https://{AGENT_IP}:{HTTPS_PORT}/");
    for url in [&agent_http, &agent_https] {
        Poll::new(Duration::from_secs(60))
            .every(Duration::from_millis(100))
            .try_async("the agent", || async { probe(url) })
            .await?;
    }
    dirs.push(dir);

    let version = |binary: &str, flag: &str| {
        Command::new(binary)
            .arg(flag)
            .output()
            .ok()
            .map(|o| {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                text.lines().next().unwrap_or_default().trim().to_owned()
            })
            .unwrap_or_default()
    };
    println!(
        "l7-bench {}: wrk -t{} -c{} -d{}s (after a {} s warm-up run), {} rounds, median reported",
        today(),
        args.threads,
        args.connections,
        args.duration,
        args.warmup,
        args.rounds
    );
    println!(
        "backend: {} ({} worker(s)) at {NGINX_IP}, fixed {}-byte body; {}; {}; wrk {}",
        version("nginx", "-v"),
        args.nginx_workers,
        BODY.len(),
        version("haproxy", "-v"),
        match args.agent_threads {
            0 => "agent: release cluster-agent (standalone driver), runtime worker threads: one per CPU".to_owned(),
            n => format!("agent: release cluster-agent (standalone driver), {n} runtime worker thread(s)"),
        },
        version("wrk", "--version")
    );

    let targets = [
        Target {
            name: "direct nginx",
            http: direct_http,
            https: direct_https,
            pid: nginx_pid,
        },
        Target {
            name: "haproxy",
            http: haproxy_http,
            https: haproxy_https,
            pid: haproxy_pid,
        },
        Target {
            name: "cluster-agent",
            http: agent_http,
            https: agent_https,
            pid: agent_pid,
        },
    ];
    // results[scheme][target] = runs
    let mut results: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); targets.len()]; 2];
    for round in 0..args.rounds {
        for (scheme, by_target) in results.iter_mut().enumerate() {
            for k in 0..targets.len() {
                let t = (k + round) % targets.len();
                let target = &targets[t];
                let url = if scheme == 0 {
                    &target.http
                } else {
                    &target.https
                };
                if args.warmup > 0 {
                    wrk(args, url, args.warmup, target.pid).await?;
                }
                let run = wrk(args, url, args.duration, target.pid).await?;
                println!(
                    "round {} {:5} {:13} {:>9.0} req/s  p50 {:.2} ms  p99 {:.2} ms  errors {}  cpu {:.0}%",
                    round + 1,
                    if scheme == 0 { "HTTP" } else { "HTTPS" },
                    target.name,
                    run.requests_per_second,
                    run.latency_p50_ms,
                    run.latency_p99_ms,
                    run.errors,
                    run.cpu
                );
                by_target[t].push(run);
            }
        }
    }

    println!("--- median of {} rounds ---", args.rounds);
    for (scheme, label) in ["HTTP", "HTTPS"].iter().enumerate() {
        let mut medians = Vec::new();
        let mut per_cores = Vec::new();
        for (t, target) in targets.iter().enumerate() {
            let runs = &results[scheme][t];
            let rps = median(
                &mut runs
                    .iter()
                    .map(|r| r.requests_per_second)
                    .collect::<Vec<_>>(),
            );
            let p50 = median(&mut runs.iter().map(|r| r.latency_p50_ms).collect::<Vec<_>>());
            let p99 = median(&mut runs.iter().map(|r| r.latency_p99_ms).collect::<Vec<_>>());
            let cpu = median(&mut runs.iter().map(|r| r.cpu).collect::<Vec<_>>());
            let errors: u64 = runs.iter().map(|r| r.errors).sum();
            // Requests per second per core of the proxy's (or nginx's) own CPU, run by
            // run: less sensitive to what else the machine was doing.
            let per_core = median(
                &mut runs
                    .iter()
                    .map(|r| r.requests_per_second / (r.cpu / 100.0).max(0.01))
                    .collect::<Vec<_>>(),
            );
            println!(
                "{label:5} {:13} {rps:>9.0} req/s  p50 {p50:.2} ms  p99 {p99:.2} ms  cpu {cpu:.0}%  {per_core:>7.0} req/s per core  errors {errors}",
                target.name
            );
            per_cores.push(per_core);
            medians.push(rps);
        }
        println!(
            "{label:5} agent/haproxy = {:.2}  agent/direct = {:.2}  haproxy/direct = {:.2}",
            medians[2] / medians[1],
            medians[2] / medians[0],
            medians[1] / medians[0]
        );
        println!(
            "{label:5} per core of proxy CPU: agent/haproxy = {:.2}",
            per_cores[2] / per_cores[1]
        );
    }
    Ok(())
}
