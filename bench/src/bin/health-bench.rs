//! health-bench: how long after a backend dies (and comes back) the FederatedIngress
//! status says so, with a real `cluster-agent` health-checking it.
//!
//! Chain measured: backend listener closed → the agent's TCP connect checks fail
//! (`unhealthyThreshold` times) → the agent's report → the hub's controller → the
//! FederatedIngress status `clusters[].healthy` → seen by a client polling the API
//! every 10 ms.
//!
//! Run: `cargo build --release --workspace --bins && target/release/health-bench` (see
//! docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use fedingress_bench::{
    Agent, AgentSpec, Api, Apiserver, GROUP_PATH, HubTiming, ingress, ms, sibling, summary, today,
};
use fedingress_testsupport::Poll;
use fedingress_testsupport::echo::{Echo, Reply};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
#[command(about = "Backend health → FederatedIngress status latency through a real agent")]
struct Args {
    /// Kill/restore cycles.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// cluster-agent binary (default: next to this one).
    #[arg(long)]
    agent: Option<PathBuf>,
}

const NS: &str = "bench";
const HUB_IP: &str = "127.0.88.1";
const AGENT_IP: &str = "127.0.88.11";
const BACKEND: &str = "127.0.88.21:9000";
const PORT: u16 = 17088;
const HEALTH: &str = "healthCheck:\n  intervalMs: 200\n  timeoutMs: 200\n  healthyThreshold: 1\n  unhealthyThreshold: 2\nreportIntervalMs: 1000\n";
const POLL: Duration = Duration::from_millis(10);
const TIMEOUT: Duration = Duration::from_secs(30);

/// `clusters[]` entry of cluster `c1` in the ingress status: (phase, healthy).
async fn entry(api: &Api) -> anyhow::Result<(String, bool)> {
    let object = api
        .get(&format!(
            "{GROUP_PATH}/namespaces/{NS}/federatedingresses/echo"
        ))
        .await?;
    let entry = object["status"]["clusters"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == "c1"))
        .cloned()
        .unwrap_or(Value::Null);
    Ok((
        entry["phase"].as_str().unwrap_or_default().to_string(),
        entry["healthy"] == true,
    ))
}

/// Polls every 10 ms until the entry is Applied with `healthy == want`; the time since `t0`.
async fn until_healthy(api: &Api, want: bool, t0: Instant) -> anyhow::Result<Duration> {
    let deadline = t0 + TIMEOUT;
    loop {
        let (phase, healthy) = entry(api).await?;
        if phase == "Applied" && healthy == want {
            return Ok(t0.elapsed());
        }
        if Instant::now() > deadline {
            anyhow::bail!("status not healthy={want} within {TIMEOUT:?} (phase {phase})");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn tcp_echo(addr: SocketAddr) -> Result<(), String> {
    let io = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let apiserver = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let agent_binary = sibling(args.agent.clone(), "cluster-agent")?;
    let hub = Apiserver::start(
        &apiserver,
        HUB_IP,
        HubTiming {
            heartbeat_ms: 300,
            lease_ms: 1500,
        },
    )
    .await?;
    let mut agent = None;
    let result = run(&args, &hub, &agent_binary, &mut agent).await;
    if let Some(agent) = agent {
        agent.proc.stop().await;
    }
    hub.proc.stop().await;
    result
}

async fn run(
    args: &Args,
    hub: &Apiserver,
    agent_binary: &std::path::Path,
    agent: &mut Option<Agent>,
) -> anyhow::Result<()> {
    let api = Api::new(&hub.api)?;
    let backend: SocketAddr = BACKEND.parse()?;
    let mut echo = Echo::builder()
        .reply(Reply::Same)
        .udp(false)
        .start(backend)
        .with_context(|| format!("echo backend on {backend}"))?;
    api.create_namespace(NS).await?;
    api.create_cluster("c1", "europe-west1", 50.4, 3.8).await?;
    let token = api.issue_token("c1").await?;
    *agent = Some(
        Agent::start(
            agent_binary,
            &AgentSpec {
                cluster: "c1",
                token: &token,
                hubs: std::slice::from_ref(&hub.agent),
                bind: AGENT_IP,
                echo: &[backend],
                extra: HEALTH,
            },
        )
        .await?,
    );
    println!(
        "health-bench {}: federation-apiserver pid {} (heartbeat 300 ms, lease 1500 ms), cluster-agent pid {} serving TCP {AGENT_IP}:{PORT} -> in-process echo backend {BACKEND}",
        today(),
        hub.proc.pid,
        agent.as_ref().map(|a| a.proc.pid).unwrap_or_default()
    );
    println!(
        "agent health checks: TCP connect, intervalMs 200, timeoutMs 200, healthyThreshold 1, unhealthyThreshold 2; reportIntervalMs 1000 (reports on change are sent at once, coalesced to one per 50 ms); status polled every 10 ms"
    );
    api.post(
        &format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses"),
        Some(&ingress("echo", &[("TCP", PORT)], 9000)),
    )
    .await?;
    let through = SocketAddr::new(AGENT_IP.parse()?, PORT);
    Poll::new(Duration::from_secs(60))
        .every(Duration::from_millis(50))
        .try_async("TCP through the agent", || tcp_echo(through))
        .await?;
    until_healthy(&api, true, Instant::now())
        .await
        .context("waiting for the first healthy status")?;

    let mut down = Vec::new();
    let mut up = Vec::new();
    for run in 0..args.runs {
        // Spread the kill over the phase of the 200 ms check interval.
        let jitter = Duration::from_millis(300 + (run as u64 * 73) % 200);
        tokio::time::sleep(jitter).await;
        let t0 = Instant::now();
        echo.stop_tcp();
        let d = until_healthy(&api, false, t0).await?;
        down.push(d);
        tokio::time::sleep(jitter).await;
        let t1 = Instant::now();
        echo.start_tcp()?;
        let u = until_healthy(&api, true, t1).await?;
        up.push(u);
        println!(
            "run {run:2}: backend killed -> status healthy=false {}; backend back -> healthy=true {}",
            ms(d),
            ms(u)
        );
    }
    println!("--- {} runs ---", args.runs);
    println!(
        "backend killed -> status healthy: false: {}",
        summary(&down)
    );
    println!("backend back   -> status healthy: true:  {}", summary(&up));
    Ok(())
}
