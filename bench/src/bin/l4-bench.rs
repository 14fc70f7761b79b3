//! l4-bench: TCP bulk echo throughput and UDP request/response rate through a release
//! `cluster-agent` standalone listener, against the same load sent directly to the
//! backend and through HAProxy (TCP mode, `nbthread 1`).
//!
//! The load generator and the echo backend run in this process (tokio); the agent
//! (with the release `federation-apiserver` as its hub) and HAProxy are child processes.
//!
//! Run: `cargo build --release --workspace --bins && target/release/l4-bench` (see
//! docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use fedingress_bench::{
    Agent, AgentSpec, Api, Apiserver, CpuWindow, GROUP_PATH, HubTiming, Proc, Stop, ingress,
    sibling, today,
};
use fedingress_testsupport::Poll;
use fedingress_testsupport::echo::{Echo, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

#[derive(Parser)]
#[command(about = "TCP and UDP through the cluster-agent vs direct vs HAProxy")]
struct Args {
    /// Measured seconds per test (after the warm-up).
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Warm-up seconds per test (not counted).
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Parallel TCP connections, each streaming chunks and reading the echo.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// TCP write size, bytes.
    #[arg(long, default_value_t = 65536)]
    chunk: usize,
    /// Concurrent UDP clients, one datagram in flight each.
    #[arg(long, default_value_t = 8)]
    udp_clients: usize,
    /// UDP datagram size, bytes (≥ 8).
    #[arg(long, default_value_t = 64)]
    udp_size: usize,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// cluster-agent binary (default: next to this one).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// haproxy binary (default: `haproxy` on PATH).
    #[arg(long)]
    haproxy: Option<PathBuf>,
}

const HUB_IP: &str = "127.0.88.2";
const AGENT_IP: &str = "127.0.88.12";
const BACKEND: &str = "127.0.88.22:9000";
const HAPROXY: &str = "127.0.88.32:7000";
const PORT: u16 = 7000;

struct TcpResult {
    bytes_per_second: f64,
    cpu: Vec<f64>,
}

struct UdpResult {
    packets_per_second: f64,
    timeouts: u64,
    cpu: Vec<f64>,
}

/// `connections` connections each writing `chunk`-byte writes and reading the echo;
/// echoed bytes received per second over `duration` after `warmup`. `pids` get their
/// CPU measured over the same window.
async fn tcp_bulk(addr: SocketAddr, args: &Args, pids: &[u32]) -> anyhow::Result<TcpResult> {
    let received = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut read, mut write) = stream.into_split();
        let chunk = vec![0x5a_u8; args.chunk];
        tasks.push(tokio::spawn(async move {
            while write.write_all(&chunk).await.is_ok() {}
        }));
        let received = received.clone();
        tasks.push(tokio::spawn(async move {
            let mut buffer = vec![0u8; 65536];
            while let Ok(n) = read.read(&mut buffer).await {
                if n == 0 {
                    return;
                }
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    let start = received.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let window = CpuWindow::start(pids);
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    let bytes = received.load(Ordering::Relaxed) - start;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = window.finish();
    for task in tasks {
        task.abort();
    }
    if bytes == 0 {
        anyhow::bail!("no bytes echoed by {addr}");
    }
    Ok(TcpResult {
        bytes_per_second: bytes as f64 / elapsed,
        cpu,
    })
}

/// `udp_clients` sockets, each sending one `udp_size`-byte datagram and waiting for its
/// echo (200 ms timeout) before the next; replies per second after `warmup`.
async fn udp_rr(addr: SocketAddr, args: &Args, pids: &[u32]) -> anyhow::Result<UdpResult> {
    let replies = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let mut tasks = Vec::new();
    for client in 0..args.udp_clients {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        socket.connect(addr).await?;
        let (replies, timeouts, stop) = (replies.clone(), timeouts.clone(), stop.clone());
        let size = args.udp_size.max(8);
        tasks.push(tokio::spawn(async move {
            let mut payload = vec![client as u8; size];
            let mut buffer = vec![0u8; 65536];
            let mut seq: u64 = 0;
            while !stop.is_set() {
                seq += 1;
                payload[..8].copy_from_slice(&seq.to_le_bytes());
                if socket.send(&payload).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let wait = async {
                    loop {
                        match socket.recv(&mut buffer).await {
                            Ok(n) if n >= 8 && buffer[..8] == seq.to_le_bytes() => return true,
                            Ok(_) => continue, // a late reply to an earlier datagram
                            Err(_) => return false,
                        }
                    }
                };
                match tokio::time::timeout(Duration::from_millis(200), wait).await {
                    Ok(true) => {
                        replies.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    let start = replies.load(Ordering::Relaxed);
    let start_timeouts = timeouts.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let window = CpuWindow::start(pids);
    tokio::time::sleep(Duration::from_secs(args.duration)).await;
    let count = replies.load(Ordering::Relaxed) - start;
    let lost = timeouts.load(Ordering::Relaxed) - start_timeouts;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = window.finish();
    stop.set();
    for task in tasks {
        task.abort();
    }
    if count == 0 {
        anyhow::bail!("no UDP replies from {addr}");
    }
    Ok(UdpResult {
        packets_per_second: count as f64 / elapsed,
        timeouts: lost,
        cpu,
    })
}

async fn tcp_ping(addr: SocketAddr) -> Result<(), String> {
    let io = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(b"ping").await?;
        let mut buffer = [0u8; 4];
        stream.read_exact(&mut buffer).await?;
        Ok::<_, std::io::Error>(buffer)
    };
    match tokio::time::timeout(Duration::from_secs(2), io).await {
        Ok(Ok(b)) if &b == b"ping" => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

async fn udp_ping(addr: SocketAddr) -> Result<(), String> {
    let io = async {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        socket.connect(addr).await?;
        socket.send(b"ping").await?;
        let mut buffer = [0u8; 16];
        let n = socket.recv(&mut buffer).await?;
        Ok::<_, std::io::Error>(buffer[..n].to_vec())
    };
    match tokio::time::timeout(Duration::from_millis(500), io).await {
        Ok(Ok(b)) if b == b"ping" => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

fn mib(bytes_per_second: f64) -> String {
    format!(
        "{:.1} MiB/s ({:.2} Gbit/s)",
        bytes_per_second / (1024.0 * 1024.0),
        bytes_per_second * 8.0 / 1e9
    )
}

/// `haproxy` on PATH (or the given path), if it runs.
fn find_haproxy(given: Option<PathBuf>) -> Option<PathBuf> {
    let path = given.unwrap_or_else(|| PathBuf::from("haproxy"));
    Command::new(&path)
        .arg("-v")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| path)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let apiserver = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let agent_binary = sibling(args.agent.clone(), "cluster-agent")?;
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
    agent_binary: &std::path::Path,
    children: &mut Vec<Proc>,
    dirs: &mut Vec<tempfile::TempDir>,
) -> anyhow::Result<()> {
    let api = Api::new(&hub.api)?;
    let backend: SocketAddr = BACKEND.parse()?;
    // Its own runtime with as many threads as the bench's, so it is not the bottleneck.
    let _echo = Echo::builder()
        .reply(Reply::Same)
        .threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
        .start(backend)
        .with_context(|| format!("echo backend on {backend}"))?;
    let me = std::process::id();
    println!(
        "l4-bench {}: {} TCP connections × {} B writes; {} UDP clients × {} B datagrams (one in flight each); {} s warm-up + {} s measured per test",
        today(),
        args.connections,
        args.chunk,
        args.udp_clients,
        args.udp_size,
        args.warmup,
        args.duration
    );
    println!("echo backend (in this process) at {BACKEND}; load generator in this process");

    // (b) setup: Cluster, token, agent, FederatedIngress with TCP+UDP on one port.
    api.create_namespace("bench").await?;
    api.create_cluster("l4", "europe-west1", 50.4, 3.8).await?;
    let token = api.issue_token("l4").await?;
    let agent = Agent::start(
        agent_binary,
        &AgentSpec {
            cluster: "l4",
            token: &token,
            hubs: std::slice::from_ref(&hub.agent),
            bind: AGENT_IP,
            echo: &[backend],
            extra: "",
        },
    )
    .await?;
    let agent_pid = agent.proc.pid;
    let Agent { proc, dir } = agent;
    children.push(proc);
    dirs.push(dir);
    api.post(
        &format!("{GROUP_PATH}/namespaces/bench/federatedingresses"),
        Some(&ingress("l4", &[("TCP", PORT), ("UDP", PORT)], 9000)),
    )
    .await?;
    let through_agent = SocketAddr::new(AGENT_IP.parse()?, PORT);
    Poll::new(Duration::from_secs(60))
        .every(Duration::from_millis(50))
        .try_async("TCP through the agent", || tcp_ping(through_agent))
        .await?;
    Poll::new(Duration::from_secs(60))
        .every(Duration::from_millis(50))
        .try_async("UDP through the agent", || udp_ping(through_agent))
        .await?;
    println!("cluster-agent pid {agent_pid} serving TCP+UDP {through_agent} (standalone driver)");

    // (c) setup: HAProxy, TCP mode, one thread.
    let haproxy = match find_haproxy(args.haproxy.clone()) {
        None => {
            println!(
                "haproxy not found on PATH: skipping (c). Install it with `apt-get install haproxy` (Debian) to compare."
            );
            None
        }
        Some(path) => {
            let dir = tempfile::tempdir()?;
            let config = dir.path().join("haproxy.cfg");
            std::fs::write(
                &config,
                format!(
                    "global\n    nbthread 1\n    maxconn 4096\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nfrontend bench\n    bind {HAPROXY}\n    default_backend echo\nbackend echo\n    server echo1 {BACKEND}\n"
                ),
            )?;
            let mut command = Command::new(&path);
            command.arg("-db").arg("-f").arg(&config);
            let proc = Proc::start_plain(command, "haproxy")?;
            let pid = proc.pid;
            children.push(proc);
            let addr: SocketAddr = HAPROXY.parse()?;
            Poll::new(Duration::from_secs(10))
                .every(Duration::from_millis(50))
                .try_async("TCP through haproxy", || tcp_ping(addr))
                .await?;
            let version = Command::new(&path)
                .arg("-v")
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .and_then(|s| s.lines().next().map(str::to_string))
                .unwrap_or_default();
            println!(
                "haproxy pid {pid} ({version}) TCP mode, nbthread 1, at {HAPROXY}; HAProxy does not proxy UDP: no UDP comparison"
            );
            dirs.push(dir);
            Some((pid, addr))
        }
    };

    // TCP.
    println!("--- TCP bulk echo ---");
    let direct = tcp_bulk(backend, args, &[me]).await?;
    println!(
        "(a) direct:        {}  [bench process CPU {:.0}%]",
        mib(direct.bytes_per_second),
        direct.cpu[0]
    );
    let via_agent = tcp_bulk(through_agent, args, &[me, agent_pid]).await?;
    println!(
        "(b) cluster-agent: {}  [agent CPU {:.0}%, bench process {:.0}%]",
        mib(via_agent.bytes_per_second),
        via_agent.cpu[1],
        via_agent.cpu[0]
    );
    let via_haproxy = match &haproxy {
        Some((pid, addr)) => {
            let r = tcp_bulk(*addr, args, &[me, *pid]).await?;
            println!(
                "(c) haproxy:       {}  [haproxy CPU {:.0}%, bench process {:.0}%]",
                mib(r.bytes_per_second),
                r.cpu[1],
                r.cpu[0]
            );
            Some(r)
        }
        None => None,
    };
    println!(
        "TCP agent/direct = {:.2}{}",
        via_agent.bytes_per_second / direct.bytes_per_second,
        via_haproxy
            .as_ref()
            .map(|h| format!(
                ", agent/haproxy = {:.2}",
                via_agent.bytes_per_second / h.bytes_per_second
            ))
            .unwrap_or_else(|| ", agent/haproxy: haproxy not run".into())
    );

    // UDP.
    println!("--- UDP request/response ---");
    let direct = udp_rr(backend, args, &[me]).await?;
    println!(
        "(a) direct:        {:.0} packets/s ({} timeouts)  [bench process CPU {:.0}%]",
        direct.packets_per_second, direct.timeouts, direct.cpu[0]
    );
    let via_agent = udp_rr(through_agent, args, &[me, agent_pid]).await?;
    println!(
        "(b) cluster-agent: {:.0} packets/s ({} timeouts)  [agent CPU {:.0}%, bench process {:.0}%]",
        via_agent.packets_per_second, via_agent.timeouts, via_agent.cpu[1], via_agent.cpu[0]
    );
    println!("(c) haproxy:       n/a (HAProxy does not proxy UDP)");
    println!(
        "UDP agent/direct = {:.2}",
        via_agent.packets_per_second / direct.packets_per_second
    );
    Ok(())
}
