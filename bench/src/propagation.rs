//! propagation-bench: how fast a FederatedIngress reaches N connected cluster agents, how
//! fast its status says Propagated=True, and what N idle agents cost the hub.
//!
//! The N agents are simulated in this process: each speaks the real agent protocol over
//! real gRPC on loopback (Hello, Ack of every Snapshot/Delta at once, a Heartbeat every
//! Welcome interval), without serving anything.
//!
//! Run: `cargo build --release --bins && target/release/propagation-bench --clusters 100`
//! (see docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::{
    Api, Apiserver, CpuWindow, GROUP_PATH, HubTiming, ingress, ms, percentile, rss_mib, sibling,
    summary, today,
};
use fedingress_proto::convert::{agent_to_pb, hub_from_pb};
use fedingress_proto::pb::agent_gateway_client::AgentGatewayClient;
use fedingress_proto::{AgentToHub, Hello, HubToAgent};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
#[command(about = "Plan propagation from the hub to N (simulated) cluster agents")]
struct Args {
    /// Clusters, each with one simulated agent.
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    /// FederatedIngresses posted one after another (one measured round each).
    #[arg(long, default_value_t = 20)]
    ingresses: usize,
    /// gRPC channels (HTTP/2 connections) the agents share round-robin; 0 = one per agent.
    #[arg(long, default_value_t = 0)]
    channels: usize,
    /// Concurrent REST requests while creating Clusters and tokens.
    #[arg(long, default_value_t = 16)]
    rest_clients: usize,
    /// Idle window for the hub's CPU measurement, seconds.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
}

const NS: &str = "bench";
const REGIONS: [(&str, f64, f64); 5] = [
    ("europe-west1", 50.4, 3.8),
    ("us-east1", 33.2, -80.0),
    ("asia-south1", 19.1, 72.9),
    ("us-west1", 45.6, -121.2),
    ("europe-north1", 60.6, 27.2),
];
const ROUND_TIMEOUT: Duration = Duration::from_secs(120);

/// What the simulated agents saw.
#[derive(Default)]
struct Shared {
    /// FederatedIngress name → when each agent first had it in a plan.
    received: std::sync::Mutex<HashMap<String, Vec<Instant>>>,
    /// Sessions that got a Welcome.
    sessions: AtomicUsize,
    /// Sessions that ended with an error (the agent reconnects).
    session_errors: AtomicUsize,
    plans: AtomicU64,
    snapshots: AtomicU64,
    /// Deltas that brought no FederatedIngress new to the agent (e.g. the first plan of a
    /// cluster published after its agent connected: an empty delta from version 0).
    deltas_without_news: AtomicU64,
    heartbeats: AtomicU64,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One simulated agent: sessions until aborted, reconnecting after an error.
async fn agent(channel: Channel, cluster: String, token: String, shared: Arc<Shared>) {
    let mut seen = HashSet::new();
    loop {
        if let Err(e) = session(&channel, &cluster, &token, &shared, &mut seen).await {
            let n = shared.session_errors.fetch_add(1, Ordering::Relaxed);
            if n < 5 {
                eprintln!("agent {cluster}: session ended: {e:#} (reconnecting)");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn session(
    channel: &Channel,
    cluster: &str,
    token: &str,
    shared: &Shared,
    seen: &mut HashSet<String>,
) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel(32);
    // The hub answers the call only after reading Hello: queue it first.
    tx.send(agent_to_pb(&AgentToHub::Hello(Hello {
        cluster: cluster.to_string(),
        token: token.to_string(),
        agent_version: "propagation-bench".into(),
        driver: "bench".into(),
        capabilities: vec!["TCP".into(), "UDP".into()],
        applied_version: 0,
        applied_digest: String::new(),
    })))
    .await?;
    let mut client = AgentGatewayClient::new(channel.clone());
    let mut inbound = client.connect(ReceiverStream::new(rx)).await?.into_inner();
    let first = inbound
        .message()
        .await?
        .context("stream closed before Welcome")?;
    let HubToAgent::Welcome {
        heartbeat_interval_ms,
        ..
    } = hub_from_pb(first)?
    else {
        bail!("the first hub message is not a Welcome");
    };
    shared.sessions.fetch_add(1, Ordering::Relaxed);
    let period = Duration::from_millis(u64::from(heartbeat_interval_ms));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            message = inbound.message() => {
                let now = Instant::now();
                let message = message?.context("the hub closed the stream")?;
                let (version, names, snapshot): (u64, Vec<String>, bool) = match hub_from_pb(message)? {
                    HubToAgent::Snapshot { version, plan, .. } => {
                        (version, plan.ingresses.keys().map(|k| k.name.clone()).collect(), true)
                    }
                    HubToAgent::Delta { version, delta, .. } => {
                        (version, delta.upserts.iter().map(|s| s.key.name.clone()).collect(), false)
                    }
                    HubToAgent::Welcome { .. } | HubToAgent::Ping => continue,
                };
                let new: Vec<String> = names.into_iter().filter(|n| seen.insert(n.clone())).collect();
                if snapshot {
                    shared.snapshots.fetch_add(1, Ordering::Relaxed);
                } else if new.is_empty() {
                    shared.deltas_without_news.fetch_add(1, Ordering::Relaxed);
                }
                if !new.is_empty() {
                    let mut received = lock(&shared.received);
                    for name in new {
                        received.entry(name).or_default().push(now);
                    }
                }
                shared.plans.fetch_add(1, Ordering::Relaxed);
                tx.send(agent_to_pb(&AgentToHub::Ack { version })).await?;
            }
            _ = ticks.tick() => {
                shared.heartbeats.fetch_add(1, Ordering::Relaxed);
                tx.send(agent_to_pb(&AgentToHub::Heartbeat)).await?;
            }
        }
    }
}

/// Records when each FederatedIngress first shows Propagated=True for its generation.
async fn watch_propagated(
    api: Api,
    rv: String,
    propagated: Arc<std::sync::Mutex<HashMap<String, Instant>>>,
) -> anyhow::Result<()> {
    let response = api
        .client
        .get(format!(
            "{}{GROUP_PATH}/namespaces/{NS}/federatedingresses?watch=true&resourceVersion={rv}&timeoutSeconds=7200",
            api.base
        ))
        .send()
        .await?;
    let mut stream = response.bytes_stream();
    let mut buffer = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let now = Instant::now();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let object = &event["object"];
            let generation = object["metadata"]["generation"].as_i64();
            let done = object["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "Propagated"
                        && c["status"] == "True"
                        && c["observedGeneration"].as_i64() == generation
                });
            if done && let Some(name) = object["metadata"]["name"].as_str() {
                lock(&propagated).entry(name.to_string()).or_insert(now);
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let binary = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let hub = Apiserver::start(
        &binary,
        "127.0.0.1",
        HubTiming {
            heartbeat_ms: 2000,
            lease_ms: 6000,
        },
    )
    .await?;
    let result = run(&args, &hub).await;
    hub.proc.stop().await;
    result
}

async fn run(args: &Args, hub: &Apiserver) -> anyhow::Result<()> {
    let n = args.clusters;
    let pid = hub.proc.pid;
    let api = Api::new(&hub.api)?;
    println!(
        "propagation-bench {}: federation-apiserver pid {pid}, api {}, agent gateway {}; heartbeat 2000 ms, lease 6000 ms",
        today(),
        hub.api,
        hub.agent
    );
    println!(
        "{n} clusters, {} ingress rounds, {}",
        args.ingresses,
        if args.channels == 0 {
            "one gRPC channel (HTTP/2 connection) per agent".to_string()
        } else {
            format!("{} shared gRPC channels", args.channels)
        }
    );

    // Clusters and tokens over REST, several requests at once.
    let started = Instant::now();
    let credentials: Vec<(String, String)> = futures_util::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("c{i:04}");
                let (region, lat, lon) = REGIONS[i % REGIONS.len()];
                api.create_cluster(&name, region, lat + (i % 7) as f64 * 0.1, lon)
                    .await?;
                let token = api.issue_token(&name).await?;
                Ok::<_, anyhow::Error>((name, token))
            }
        })
        .buffer_unordered(args.rest_clients.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    println!(
        "created {n} Clusters and {n} tokens in {:.2} s ({} concurrent requests)",
        started.elapsed().as_secs_f64(),
        args.rest_clients
    );

    // Channels, then agents.
    let endpoint = Endpoint::from_shared(format!("http://{}", hub.agent))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10));
    let channel_count = if args.channels == 0 { n } else { args.channels };
    let limit = Arc::new(Semaphore::new(64));
    let started = Instant::now();
    let channels: Vec<Channel> = futures_util::stream::iter(0..channel_count)
        .map(|_| {
            let (endpoint, limit) = (endpoint.clone(), limit.clone());
            async move {
                let _permit = limit.acquire().await?;
                Ok::<_, anyhow::Error>(endpoint.connect().await?)
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let shared = Arc::new(Shared::default());
    let agents: Vec<_> = credentials
        .iter()
        .enumerate()
        .map(|(i, (cluster, token))| {
            tokio::spawn(agent(
                channels[i % channels.len()].clone(),
                cluster.clone(),
                token.clone(),
                shared.clone(),
            ))
        })
        .collect();
    let mut connected = 0;
    let deadline = Instant::now() + Duration::from_secs(180);
    while connected < n {
        if Instant::now() > deadline {
            bail!("only {connected} of {n} clusters connected after 180 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        let list = api.get(&format!("{GROUP_PATH}/clusters")).await?;
        connected = list["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|c| c["status"]["connected"] == true)
                    .count()
            })
            .unwrap_or(0);
    }
    println!(
        "all {n} agents connected (Cluster status.connected) {:.2} s after the first channel was dialled; {} sessions",
        started.elapsed().as_secs_f64(),
        shared.sessions.load(Ordering::Relaxed)
    );
    println!(
        "hub rss with {n} agents connected: {:.1} MiB",
        rss_mib(pid)?
    );

    // Watch for Propagated=True.
    let list = api
        .get(&format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses"))
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let propagated: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let watcher = tokio::spawn(watch_propagated(api.clone(), rv, propagated.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Rounds.
    let mut all_times = Vec::new();
    let mut per_agent = Vec::new();
    let mut propagated_times = Vec::new();
    let mut post_times = Vec::new();
    for round in 0..args.ingresses {
        let name = format!("p{round:03}");
        let port = 20000 + u16::try_from(round).unwrap_or(0);
        let body = ingress(&name, &[("TCP", port)], 9000);
        let t0 = Instant::now();
        api.post(
            &format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses"),
            Some(&body),
        )
        .await?;
        let posted = t0.elapsed();
        post_times.push(posted);
        let deadline = t0 + ROUND_TIMEOUT;
        let times = loop {
            let have = lock(&shared.received)
                .get(&name)
                .cloned()
                .unwrap_or_default();
            if have.len() >= n {
                break have;
            }
            if Instant::now() > deadline {
                bail!(
                    "round {round}: only {} of {n} agents got {name} within {ROUND_TIMEOUT:?}",
                    have.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let deltas: Vec<Duration> = times
            .iter()
            .map(|t| t.saturating_duration_since(t0))
            .collect();
        let first = deltas.iter().min().copied().unwrap_or_default();
        let last = deltas.iter().max().copied().unwrap_or_default();
        all_times.push(last);
        per_agent.extend_from_slice(&deltas);
        let prop = loop {
            if let Some(at) = lock(&propagated).get(&name).copied() {
                break at.saturating_duration_since(t0);
            }
            if Instant::now() > deadline {
                bail!("round {round}: {name} not Propagated=True within {ROUND_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        propagated_times.push(prop);
        println!(
            "round {round:2} ({name}, TCP {port}): POST answered {}, first agent {}, all {n} agents {}, Propagated=True {}",
            ms(posted),
            ms(first),
            ms(last),
            ms(prop)
        );
        // Let the status writes of this round settle before the next.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut sorted_all = all_times.clone();
    sorted_all.sort();
    let mut sorted_agent = per_agent.clone();
    sorted_agent.sort();
    let mut sorted_prop = propagated_times.clone();
    sorted_prop.sort();
    println!("--- {n} clusters, {} rounds ---", args.ingresses);
    println!("POST FederatedIngress answered: {}", summary(&post_times));
    println!(
        "POST -> last of {n} agents has the plan: p50 {}, p99 {} (max {})",
        ms(percentile(&sorted_all, 0.5)),
        ms(percentile(&sorted_all, 0.99)),
        ms(percentile(&sorted_all, 1.0))
    );
    println!(
        "POST -> one agent has the plan (all {} agent×round samples): p50 {}, p99 {}",
        sorted_agent.len(),
        ms(percentile(&sorted_agent, 0.5)),
        ms(percentile(&sorted_agent, 0.99))
    );
    println!(
        "POST -> status Propagated=True (all {n} acks recorded): p50 {}, p99 {} (max {})",
        ms(percentile(&sorted_prop, 0.5)),
        ms(percentile(&sorted_prop, 0.99)),
        ms(percentile(&sorted_prop, 1.0))
    );
    watcher.abort();

    // Idle: N agents heartbeating, nothing changing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let heartbeats_before = shared.heartbeats.load(Ordering::Relaxed);
    let window = CpuWindow::start(&[pid, std::process::id()]);
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let cpu = window.finish();
    let heartbeats = shared.heartbeats.load(Ordering::Relaxed) - heartbeats_before;
    println!(
        "idle with {n} agents heartbeating every 2 s ({heartbeats} heartbeats in {} s): hub CPU {:.1}% of one core, hub RSS {:.1} MiB (this bench process, simulating the agents: CPU {:.1}%)",
        args.idle_seconds,
        cpu[0],
        rss_mib(pid)?,
        cpu[1]
    );
    println!(
        "agent sessions: {} started, {} ended with an error (reconnected); {} plans acked: {} snapshots, {} deltas, {} of the deltas with no FederatedIngress new to the agent",
        shared.sessions.load(Ordering::Relaxed),
        shared.session_errors.load(Ordering::Relaxed),
        shared.plans.load(Ordering::Relaxed),
        shared.snapshots.load(Ordering::Relaxed),
        shared.plans.load(Ordering::Relaxed) - shared.snapshots.load(Ordering::Relaxed),
        shared.deltas_without_news.load(Ordering::Relaxed)
    );
    for task in agents {
        task.abort();
    }
    drop(channels);
    Ok(())
}
