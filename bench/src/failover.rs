//! failover-bench: how long after a backend dies the embedded DNS server still answers
//! with its cluster, in a real federation: the release `federation-apiserver` with DNS,
//! three release `cluster-agent`s health-checking in-process TCP echo backends, and a
//! Geo FederatedIngress.
//!
//! Chain measured: backend listener closed → the agent's TCP connect checks fail
//! (`unhealthyThreshold` times) → the agent's report → the hub's controller pass →
//! status and GSLB step → a new DNS snapshot swapped in → seen by a client polling the
//! DNS server over UDP (raw query with ECS from the cluster's region) every 5 ms.
//!
//! Run: `cargo build --release --bins && target/release/failover-bench` (see
//! docs/benchmarks.md). It prints numbers; it asserts nothing.

mod dnscommon;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use dnscommon::{
    DEPLOY_TIMING, DnsHub, REGIONS, Response, TYPE_A, ZONE, ask, query, region_client,
};
use fedingress_bench::{Agent, AgentSpec, Api, Echo, GROUP_PATH, ms, sibling, summary, today};
use serde_json::json;

#[derive(Parser)]
#[command(about = "Backend death → last DNS answer with its cluster, real agents")]
struct Args {
    /// Kill/restore cycles (the killed cluster rotates over the three regions).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Agent health check `intervalMs`.
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// Agent health check `timeoutMs`.
    #[arg(long, default_value_t = 200)]
    timeout_ms: u64,
    /// Agent health check `unhealthyThreshold`.
    #[arg(long, default_value_t = 2)]
    unhealthy_threshold: u32,
    /// Agent health check `healthyThreshold`.
    #[arg(long, default_value_t = 1)]
    healthy_threshold: u32,
    /// DNS poll period, ms.
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// cluster-agent binary (default: next to this one).
    #[arg(long)]
    agent: Option<PathBuf>,
}

const NS: &str = "bench";
const HUB_IP: &str = "127.0.89.1";
const PORT: u16 = 17089;
const TTL: u32 = 5;
/// After the first answer without the cluster, keep polling this long to catch flaps.
const SETTLE: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(30);

fn agent_ip(c: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 89, 11 + c as u8)
}

fn backend(c: usize) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(127, 0, 89, 21 + c as u8).into(), 9000)
}

fn fo_name() -> String {
    format!("fo.{ZONE}")
}

/// The DNS client: one UDP socket, a new ID per query.
struct Client {
    socket: tokio::net::UdpSocket,
    server: SocketAddr,
    id: u16,
    lost: usize,
}

impl Client {
    /// Asks for `fo` with ECS from region `r`; `None` when no answer within 200 ms.
    async fn ask(&mut self, r: usize) -> Option<Response> {
        self.id = self.id.wrapping_add(1);
        let packet = query(
            self.id,
            &fo_name(),
            TYPE_A,
            Some(region_client(REGIONS[r].1, 7)),
        );
        match ask(
            &self.socket,
            self.server,
            &packet,
            Duration::from_millis(200),
        )
        .await
        {
            Ok(r) => Some(r),
            Err(_) => {
                self.lost += 1;
                None
            }
        }
    }

    /// Polls until the answer for region `r` contains (or not) `ip`; the time since `t0`.
    async fn until(
        &mut self,
        r: usize,
        ip: Ipv4Addr,
        present: bool,
        t0: Instant,
        poll: Duration,
    ) -> anyhow::Result<Duration> {
        let mut next = tokio::time::Instant::now();
        loop {
            if let Some(answer) = self.ask(r).await
                && answer.rcode == 0
                && answer.a.contains(&ip) == present
            {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > TIMEOUT {
                bail!("answer for region {r} not {present} for {ip} within {TIMEOUT:?}");
            }
            next += poll;
            tokio::time::sleep_until(next).await;
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let apiserver = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let agent_binary = sibling(args.agent.clone(), "cluster-agent")?;
    let hub = DnsHub::start(&apiserver, HUB_IP, DEPLOY_TIMING, "warn", None).await?;
    let mut agents = Vec::new();
    let result = run(&args, &hub, &agent_binary, &mut agents).await;
    for agent in agents {
        agent.proc.stop().await;
    }
    hub.proc.stop().await;
    result
}

async fn run(
    args: &Args,
    hub: &DnsHub,
    agent_binary: &std::path::Path,
    agents: &mut Vec<Agent>,
) -> anyhow::Result<()> {
    let api = Api::new(&hub.api)?;
    let health = format!(
        "healthCheck:\n  intervalMs: {}\n  timeoutMs: {}\n  healthyThreshold: {}\n  unhealthyThreshold: {}\nreportIntervalMs: 5000\n",
        args.interval_ms, args.timeout_ms, args.healthy_threshold, args.unhealthy_threshold
    );
    let mut echoes = Vec::new();
    for (c, (region, _, lat, lon)) in REGIONS.iter().enumerate() {
        let cluster = format!("c{}", c + 1);
        echoes.push(Echo::start(backend(c), false).await?);
        api.create_cluster(&cluster, region, *lat, *lon).await?;
        let token = api.issue_token(&cluster).await?;
        let bind = agent_ip(c).to_string();
        agents.push(
            Agent::start(
                agent_binary,
                &AgentSpec {
                    cluster: &cluster,
                    token: &token,
                    hub: &hub.agent,
                    bind: &bind,
                    echo: &[backend(c)],
                    extra: &health,
                },
            )
            .await?,
        );
    }
    println!(
        "failover-bench {}: federation-apiserver pid {} (DNS {}, heartbeat 2000 ms, lease 6000 ms); cluster-agents {} on {}..{} (standalone), echo backends {}..{}",
        today(),
        hub.proc.pid,
        hub.dns,
        agents
            .iter()
            .map(|a| a.proc.pid.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        agent_ip(0),
        agent_ip(2),
        backend(0),
        backend(2)
    );
    println!(
        "agent health checks: TCP connect, intervalMs {}, timeoutMs {}, healthyThreshold {}, unhealthyThreshold {}; reportIntervalMs 5000 (reports on change go out at once, at most one per 50 ms)",
        args.interval_ms, args.timeout_ms, args.healthy_threshold, args.unhealthy_threshold
    );
    let body = json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": "fo"},
        "spec": {
            "rules": [{"protocol": "TCP", "port": PORT, "backend": {"service": "echo", "port": 9000}}],
            "traffic": {"dnsName": fo_name(), "ttl": TTL, "strategy": {"type": "Geo"}}
        }
    });
    api.post(
        &format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses"),
        Some(&body),
    )
    .await?;
    let mut client = Client {
        socket: tokio::net::UdpSocket::bind("127.0.0.1:0").await?,
        server: hub.dns,
        id: 0,
        lost: 0,
    };
    let poll = Duration::from_millis(args.poll_ms);
    for (r, (region, ..)) in REGIONS.iter().enumerate() {
        client
            .until(r, agent_ip(r), true, Instant::now(), poll)
            .await
            .with_context(|| format!("waiting for {region} to answer its region"))?;
    }
    println!(
        "Geo ingress {} (TTL {TTL}, TCP {PORT}) answers each region with its own cluster; DNS polled every {} ms with ECS from the killed cluster's region",
        fo_name(),
        args.poll_ms
    );

    let mut last_with = Vec::new();
    let mut first_without = Vec::new();
    let mut back = Vec::new();
    let mut flaps = 0;
    for run in 0..args.runs {
        let c = run % REGIONS.len();
        let ip = agent_ip(c);
        // Spread the kill over the phase of the check interval.
        let jitter = Duration::from_millis(300 + (run as u64 * 73) % args.interval_ms.max(1));
        tokio::time::sleep(jitter).await;
        let t0 = Instant::now();
        echoes[c].stop_tcp().await;
        let mut last = Duration::ZERO;
        let mut first = None;
        let mut next = tokio::time::Instant::now();
        let mut moved_to = Vec::new();
        loop {
            let at_send = t0.elapsed();
            if let Some(answer) = client.ask(c).await {
                if answer.a.contains(&ip) {
                    // The answer was produced between sending and receiving: count the
                    // receive time (the later bound).
                    last = t0.elapsed();
                    if first.is_some() {
                        flaps += 1;
                        first = None;
                    }
                } else if first.is_none() {
                    first = Some(at_send);
                    moved_to = answer.a.clone();
                }
            }
            if let Some(f) = first
                && t0.elapsed() > f + SETTLE
            {
                break;
            }
            if t0.elapsed() > TIMEOUT {
                bail!("run {run}: {ip} still answered {TIMEOUT:?} after its backend died");
            }
            next += poll;
            tokio::time::sleep_until(next).await;
        }
        let first = first.unwrap_or_default();
        last_with.push(last);
        first_without.push(first);
        tokio::time::sleep(jitter).await;
        let t1 = Instant::now();
        echoes[c].start_tcp().await?;
        let b = client.until(c, ip, true, t1, poll).await?;
        back.push(b);
        println!(
            "run {run:2}: killed c{} ({}): last answer with it {}, first without {} (now {:?}); backend back -> answered again {}",
            c + 1,
            REGIONS[c].0,
            ms(last),
            ms(first),
            moved_to,
            ms(b)
        );
    }
    println!(
        "--- {} runs; health checks intervalMs {}, timeoutMs {}, unhealthyThreshold {}, healthyThreshold {} ---",
        args.runs,
        args.interval_ms,
        args.timeout_ms,
        args.unhealthy_threshold,
        args.healthy_threshold
    );
    println!(
        "backend died -> last DNS answer containing its cluster: {}",
        summary(&last_with)
    );
    println!(
        "backend died -> first DNS answer without it:            {}",
        summary(&first_without)
    );
    println!(
        "backend back -> DNS answers with its cluster again:     {}",
        summary(&back)
    );
    println!(
        "answers flapping back after leaving: {flaps}; DNS queries unanswered within 200 ms: {}",
        client.lost
    );
    Ok(())
}
