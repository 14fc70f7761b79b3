//! propagation-bench: how fast a FederatedIngress reaches N connected cluster agents, how
//! fast its status says Propagated=True, and what N idle agents cost the hub, optionally
//! on top of a population of M FederatedIngresses already placed on every cluster
//! (`--preload M`). `--cold-start K` measures instead how long K FederatedIngresses,
//! created at once, take to reach every agent and to show Propagated=True.
//!
//! The N agents are simulated in this process: each speaks the real agent protocol over
//! real gRPC on loopback (Hello through `fedingress_bench::sim_agent::Session`, Ack of
//! every Snapshot/Delta at once, a Heartbeat every Welcome interval), without serving
//! anything.
//!
//! `--replicas R` runs the hub as R replicas on one etcd (`--store etcd|etcd3`), the
//! agents spread over their gateways; `--dns` gives every replica the embedded DNS
//! server. `--report-seconds S` adds, after the rounds, a window of S seconds in which
//! every agent reports every `--report-interval-ms` with load figures that change at
//! every report (as a busy cluster's do), and measures what that writes to etcd: the
//! revision and put counters, and the changed keys per prefix (a watch on every key),
//! against the naive cost of writing every report; with `--flap-percent P` a second
//! window does the same with P % of the clusters flapping their backend's health.
//!
//! Run: `cargo build --release --workspace --bins && target/release/propagation-bench --clusters 100`
//! (see docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::etcd::{EtcdCounters, KeyWatch};
use fedingress_bench::replicas::{ReplicaFlags, Replicas};
use fedingress_bench::sim_agent::{Applied, Load, Session, report, track};
use fedingress_bench::{
    Api, CpuWindow, GROUP_PATH, HubTiming, ingress, ms, percentile, print_ratio_table, rss_mib,
    sibling, summary, today,
};
use fedingress_proto::convert::{agent_to_pb, hub_from_pb};
use fedingress_proto::{AgentToHub, HubToAgent};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::{Semaphore, watch};
use tonic::transport::{Channel, Endpoint};

#[derive(Parser)]
#[command(about = "Plan propagation from the hub to N (simulated) cluster agents")]
struct Args {
    /// Clusters, each with one simulated agent.
    #[arg(long, default_value_t = 100)]
    clusters: usize,
    /// FederatedIngresses posted one after another (one measured round each).
    #[arg(long = "rounds", visible_alias = "ingresses", default_value_t = 20)]
    rounds: usize,
    /// FederatedIngresses created (and placed on every cluster) before the agents connect
    /// and the rounds start: the population the rounds are measured on top of.
    #[arg(long, default_value_t = 0)]
    preload: usize,
    /// Place each preloaded FederatedIngress on this many clusters (`placement.clusters`,
    /// consecutive names round-robin) instead of on every cluster (0).
    #[arg(long, default_value_t = 0)]
    preload_width: usize,
    /// Cold start instead of rounds: with every agent connected, create this many
    /// FederatedIngresses at once (`--rest-clients` requests at a time) and measure until
    /// every agent has acked all of them and every one shows Propagated=True.
    #[arg(long, default_value_t = 0)]
    cold_start: usize,
    /// Give up waiting for a bulk step (preload acked, cold start) after this many seconds.
    #[arg(long, default_value_t = 1800)]
    bulk_timeout_seconds: u64,
    /// gRPC channels (HTTP/2 connections) the agents share round-robin; 0 = one per agent.
    #[arg(long, default_value_t = 0)]
    channels: usize,
    /// Concurrent REST requests while creating Clusters and tokens.
    #[arg(long, default_value_t = 16)]
    rest_clients: usize,
    /// Idle window for the hub's CPU measurement, seconds.
    #[arg(long, default_value_t = 10)]
    idle_seconds: u64,
    /// The hub's replicas (agent i connects to the gateway of replica i mod R).
    #[command(flatten)]
    hub: ReplicaFlags,
    /// Run one replica on redb, then `--replicas` (at least 2; default 3) on `--store`
    /// (default etcd3), and print the rounds' ratios against the single replica.
    #[arg(long)]
    compare: bool,
    /// The embedded DNS server on every replica (zone `bench.test`).
    #[arg(long)]
    dns: bool,
    /// After the rounds: a window of this many seconds with every agent reporting (0:
    /// none).
    #[arg(long, default_value_t = 0)]
    report_seconds: u64,
    /// Report interval of every agent in the window (the real agent's default
    /// `reportIntervalMs` is 5000).
    #[arg(long, default_value_t = 5000)]
    report_interval_ms: u64,
    /// A second window in which this % of the clusters flap their backend's health.
    #[arg(long, default_value_t = 0.0)]
    flap_percent: f64,
    /// A flapping cluster's backend goes unready and ready again every this many ms
    /// (half of it each way).
    #[arg(long, default_value_t = 10_000)]
    flap_period_ms: u64,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
}

/// Replica rN on 127.0.84.N.
const BLOCK: u8 = 84;
/// The `locations:` of the replicas' `dns:` section (`--dns`).
const LOCATIONS: &str =
    "  locations:\n    default: {region: europe-west1, latitude: 50.0, longitude: 4.0}\n";

const NS: &str = "bench";
const REGIONS: [(&str, f64, f64); 5] = [
    ("europe-west1", 50.4, 3.8),
    ("us-east1", 33.2, -80.0),
    ("asia-south1", 19.1, 72.9),
    ("us-west1", 45.6, -121.2),
    ("europe-north1", 60.6, 27.2),
];
const ROUND_TIMEOUT: Duration = Duration::from_secs(600);
/// TCP port of round `i` is `ROUND_PORT + i`; bulk ingresses follow from `BULK_PORT`.
const ROUND_PORT: u16 = 20000;
const BULK_PORT: u16 = 21000;

/// What the simulated agents saw.
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
    /// (agent, ingress) pairs seen so far of the bulk ingresses (preloaded or cold start;
    /// counted, not timed one by one).
    bulk_seen: AtomicUsize,
    /// When `bulk_seen` reached `bulk_target` (clusters × bulk ingresses).
    bulk_target: AtomicUsize,
    bulk_done: std::sync::Mutex<Option<Instant>>,
    /// What the agents report now (the report windows).
    reporting: watch::Sender<Reporting>,
    /// Reports sent, and of them those that changed the backend's health.
    reports: AtomicU64,
    health_reports: AtomicU64,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            received: Default::default(),
            sessions: Default::default(),
            session_errors: Default::default(),
            plans: Default::default(),
            snapshots: Default::default(),
            deltas_without_news: Default::default(),
            heartbeats: Default::default(),
            bulk_seen: Default::default(),
            bulk_target: Default::default(),
            bulk_done: Default::default(),
            reporting: watch::Sender::new(Reporting::default()),
            reports: Default::default(),
            health_reports: Default::default(),
        }
    }
}

/// When the simulated agents report. Outside the windows they send no Reports.
#[derive(Clone, Copy, Debug, Default)]
struct Reporting {
    /// Every agent reports this often (`None`: no reports).
    every: Option<Duration>,
    /// Agents whose index is a multiple of this flap their backend (0: none).
    flap_every: usize,
    /// How long a flapping backend stays ready, and then unready.
    flap_half: Duration,
}

/// What a simulated agent reports: load figures that change at every report, and its
/// backend's readiness.
struct Reporter {
    index: usize,
    ip: Ipv4Addr,
    mode: Reporting,
    /// When the mode was taken up: reports and flips are phased from it.
    since: tokio::time::Instant,
    sent: u64,
    ready: bool,
    next_report: tokio::time::Instant,
    next_flip: Option<tokio::time::Instant>,
}

impl Reporter {
    fn new(index: usize, mode: Reporting, agents: usize) -> Self {
        let since = tokio::time::Instant::now();
        let spread = |period: Duration| {
            // Agents are spread evenly over the period, not all at once.
            period.mul_f64(index as f64 / agents.max(1) as f64)
        };
        let flapping = mode.flap_every > 0 && index.is_multiple_of(mode.flap_every);
        Self {
            index,
            ip: Ipv4Addr::new(127, 1, (index / 250) as u8, (index % 250 + 1) as u8),
            mode,
            since,
            sent: 0,
            ready: true,
            next_report: since + mode.every.map(spread).unwrap_or_default(),
            next_flip: flapping.then(|| since + spread(mode.flap_half) + mode.flap_half),
        }
    }

    /// When to act next (far away when not reporting).
    fn wake(&self) -> tokio::time::Instant {
        if self.mode.every.is_none() {
            return self.since + Duration::from_secs(86_400);
        }
        self.next_flip
            .map_or(self.next_report, |flip| flip.min(self.next_report))
    }

    /// The next report: its load figures differ from the previous report's.
    fn report(&mut self, plan: &Applied) -> fedingress_proto::pb::AgentMessage {
        self.sent += 1;
        let step = self.index as u64 * 31 + self.sent * 17;
        if let Some(every) = self.mode.every {
            self.next_report = tokio::time::Instant::now() + every;
        }
        report(
            plan,
            self.ip,
            &Load {
                requests_per_second: 50.0 + (step % 100) as f64 + 0.25,
                active_connections: 10 + (step % 53),
                ready: self.ready,
            },
        )
    }

    /// At a flip: the backend's readiness changes (the report follows at once, as a real
    /// agent's does on a change).
    fn flip_due(&mut self) -> bool {
        match self.next_flip {
            Some(at) if at <= tokio::time::Instant::now() => {
                self.ready = !self.ready;
                self.next_flip = Some(at + self.mode.flap_half);
                true
            }
            _ => false,
        }
    }
}

/// Name prefixes of the bulk ingresses (counted, not timed one by one).
const PRELOAD_PREFIX: &str = "pre";
const COLD_PREFIX: &str = "cold";

fn is_bulk(name: &str) -> bool {
    name.starts_with(PRELOAD_PREFIX) || name.starts_with(COLD_PREFIX)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One simulated agent (the `index`-th of `agents`): sessions until aborted,
/// reconnecting after an error.
async fn agent(
    channel: Channel,
    cluster: String,
    token: String,
    (index, agents): (usize, usize),
    shared: Arc<Shared>,
) {
    let mut seen = HashSet::new();
    loop {
        let session = session(
            &channel,
            &cluster,
            &token,
            (index, agents),
            &shared,
            &mut seen,
        );
        if let Err(e) = session.await {
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
    (index, agents): (usize, usize),
    shared: &Shared,
    seen: &mut HashSet<String>,
) -> anyhow::Result<()> {
    let Session {
        tx,
        mut inbound,
        heartbeat: period,
    } = Session::open(channel, cluster, token, "propagation-bench").await?;
    shared.sessions.fetch_add(1, Ordering::Relaxed);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut reporting = shared.reporting.subscribe();
    let mut reporter = Reporter::new(index, *reporting.borrow_and_update(), agents);
    let mut plan = Applied::new();
    loop {
        tokio::select! {
            message = inbound.message() => {
                let now = Instant::now();
                let message = message?.context("the hub closed the stream")?;
                let message = hub_from_pb(message)?;
                let (names, snapshot): (Vec<String>, bool) = match &message {
                    HubToAgent::Snapshot { plan, .. } => {
                        (plan.ingresses.keys().map(|k| k.name.clone()).collect(), true)
                    }
                    HubToAgent::Delta { delta, .. } => {
                        (delta.upserts.iter().map(|s| s.key.name.clone()).collect(), false)
                    }
                    HubToAgent::Welcome { .. } | HubToAgent::Ping => continue,
                };
                let Some(version) = track(&mut plan, &message) else {
                    continue;
                };
                let new: Vec<String> = names.into_iter().filter(|n| seen.insert(n.clone())).collect();
                if snapshot {
                    shared.snapshots.fetch_add(1, Ordering::Relaxed);
                } else if new.is_empty() {
                    shared.deltas_without_news.fetch_add(1, Ordering::Relaxed);
                }
                let (bulk, timed): (Vec<String>, Vec<String>) = new.into_iter().partition(|n| is_bulk(n));
                if !bulk.is_empty() {
                    let total = shared.bulk_seen.fetch_add(bulk.len(), Ordering::Relaxed) + bulk.len();
                    let target = shared.bulk_target.load(Ordering::Relaxed);
                    if target > 0 && total >= target {
                        lock(&shared.bulk_done).get_or_insert(now);
                    }
                }
                if !timed.is_empty() {
                    let mut received = lock(&shared.received);
                    for name in timed {
                        received.entry(name).or_default().push(now);
                    }
                }
                shared.plans.fetch_add(1, Ordering::Relaxed);
                tx.send(agent_to_pb(&AgentToHub::Ack { version })).await?;
                if reporter.mode.every.is_some() {
                    // A real agent reports right after every apply.
                    shared.reports.fetch_add(1, Ordering::Relaxed);
                    tx.send(reporter.report(&plan)).await?;
                }
            }
            _ = ticks.tick() => {
                shared.heartbeats.fetch_add(1, Ordering::Relaxed);
                tx.send(agent_to_pb(&AgentToHub::Heartbeat)).await?;
            }
            changed = reporting.changed() => {
                changed?;
                reporter = Reporter::new(index, *reporting.borrow_and_update(), agents);
            }
            () = tokio::time::sleep_until(reporter.wake()) => {
                if reporter.flip_due() {
                    shared.health_reports.fetch_add(1, Ordering::Relaxed);
                }
                shared.reports.fetch_add(1, Ordering::Relaxed);
                tx.send(reporter.report(&plan)).await?;
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
    let setups = args.hub.setups(args.compare);
    let mut results = Vec::new();
    for (count, store) in setups {
        let settings = args.hub.settings(
            count,
            store,
            BLOCK,
            HubTiming {
                heartbeat_ms: 2000,
                lease_ms: 6000,
            },
            args.dns.then_some(("bench.test", LOCATIONS)),
        );
        let replicas = Replicas::start(&binary, &settings).await?;
        let result = run(&args, &replicas).await;
        let label = replicas.label();
        replicas.stop().await;
        results.push((label, result?));
    }
    if results.len() > 1 {
        print_table(&results);
    }
    Ok(())
}

/// What the rounds measured (empty with --cold-start).
#[derive(Default)]
struct Rounds {
    post: Vec<Duration>,
    /// POST → the last agent has the plan, per round.
    all_agents: Vec<Duration>,
    /// POST → each agent has it, every agent and round.
    per_agent: Vec<Duration>,
    propagated: Vec<Duration>,
}

/// The rounds of every setup, with ratios against the first.
fn print_table(results: &[(String, Rounds)]) {
    type Get = fn(&Rounds) -> &[Duration];
    let rows: [(&str, Get); 4] = [
        ("POST answered", |r| &r.post),
        ("POST → last agent has the plan", |r| &r.all_agents),
        ("POST → one agent has it (every agent)", |r| &r.per_agent),
        ("POST → Propagated=True", |r| &r.propagated),
    ];
    let labels: Vec<String> = results.iter().map(|(label, _)| label.clone()).collect();
    let rows: Vec<(&str, Vec<&[Duration]>)> = rows
        .iter()
        .map(|(name, get)| (*name, results.iter().map(|(_, r)| get(r)).collect()))
        .collect();
    print_ratio_table(&labels, &rows);
}

async fn run(args: &Args, replicas: &Replicas) -> anyhow::Result<Rounds> {
    let n = args.clusters;
    let r1 = &replicas.replicas[0];
    let pid = r1.pid().context("r1 runs")?;
    let api = Api::new(&r1.api)?;
    api.create_namespace(NS).await?;
    let gateways = replicas.gateways();
    println!(
        "propagation-bench {}: {}{}: federation-apiserver pids {:?}, api {} (REST requests go to r1), agent gateways {}; heartbeat 2000 ms, lease 6000 ms{}",
        today(),
        replicas.label(),
        if args.dns {
            ", DNS on every replica"
        } else {
            ""
        },
        replicas.pids(),
        r1.api,
        gateways.join(", "),
        replicas
            .etcd
            .as_ref()
            .map(|e| format!("; etcd pids {:?}", e.pids()))
            .unwrap_or_default()
    );
    if args.rounds > usize::from(BULK_PORT - ROUND_PORT) {
        bail!("at most {} rounds", BULK_PORT - ROUND_PORT);
    }
    if args.preload + args.cold_start > usize::from(u16::MAX - BULK_PORT) {
        bail!(
            "--preload + --cold-start: at most {} (one TCP port each)",
            u16::MAX - BULK_PORT
        );
    }
    println!(
        "{n} clusters, {} preloaded ingresses, {}, {}",
        args.preload,
        if args.cold_start > 0 {
            format!("cold start of {} ingresses", args.cold_start)
        } else {
            format!("{} ingress rounds", args.rounds)
        },
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

    // Watch for Propagated=True, from here on.
    let list = api
        .get(&format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses"))
        .await?;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let propagated: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let watcher = tokio::spawn(watch_propagated(api.clone(), rv, propagated.clone()));
    let shared = Arc::new(Shared::default());
    let bulk_timeout = Duration::from_secs(args.bulk_timeout_seconds);

    // The preloaded population, before any agent connects.
    let preloaded: Vec<String> = (0..args.preload)
        .map(|i| format!("{PRELOAD_PREFIX}{i:05}"))
        .collect();
    if !preloaded.is_empty() {
        let width = if args.preload_width == 0 {
            n
        } else {
            args.preload_width.min(n)
        };
        shared
            .bulk_target
            .store(width * preloaded.len(), Ordering::Relaxed);
        let placement = (width < n).then_some((width, n));
        let took = create_bulk(&api, &preloaded, BULK_PORT, args.rest_clients, placement).await?;
        println!(
            "preloaded {} FederatedIngresses (each placed on {width} of the {n} clusters) in {:.2} s ({} concurrent requests); hub rss {:.1} MiB",
            preloaded.len(),
            took.as_secs_f64(),
            args.rest_clients,
            rss_mib(pid)?
        );
    }

    // Channels (channel j to replica j mod R), then agents.
    let endpoints = gateways
        .iter()
        .map(|gateway| {
            Ok::<_, anyhow::Error>(
                Endpoint::from_shared(format!("http://{gateway}"))?
                    .tcp_nodelay(true)
                    .connect_timeout(Duration::from_secs(10)),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let channel_count = if args.channels == 0 { n } else { args.channels };
    let limit = Arc::new(Semaphore::new(64));
    let started = Instant::now();
    let channels: Vec<Channel> = futures_util::stream::iter(0..channel_count)
        .map(|j| {
            let (endpoint, limit) = (endpoints[j % endpoints.len()].clone(), limit.clone());
            async move {
                let _permit = limit.acquire().await?;
                Ok::<_, anyhow::Error>(endpoint.connect().await?)
            }
        })
        .buffered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let agents: Vec<_> = credentials
        .iter()
        .enumerate()
        .map(|(i, (cluster, token))| {
            tokio::spawn(agent(
                channels[i % channels.len()].clone(),
                cluster.clone(),
                token.clone(),
                (i, n),
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
    if !preloaded.is_empty() {
        let acked = wait_bulk(&shared, started, bulk_timeout, "the preloaded ingresses").await?;
        let done = wait_propagated(&propagated, &preloaded, started, bulk_timeout).await?;
        println!(
            "every agent acked a plan with all {} preloaded ingresses {:.2} s after the first dial; all {} Propagated=True after {:.2} s; hub rss {:.1} MiB",
            preloaded.len(),
            acked.as_secs_f64(),
            preloaded.len(),
            done.as_secs_f64(),
            rss_mib(pid)?
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    if args.cold_start > 0 {
        let names: Vec<String> = (0..args.cold_start)
            .map(|i| format!("{COLD_PREFIX}{i:05}"))
            .collect();
        shared.bulk_seen.store(0, Ordering::Relaxed);
        *lock(&shared.bulk_done) = None;
        shared.bulk_target.store(n * names.len(), Ordering::Relaxed);
        let port = BULK_PORT + u16::try_from(preloaded.len()).unwrap_or(0);
        let t0 = Instant::now();
        let posted = create_bulk(&api, &names, port, args.rest_clients, None).await?;
        println!(
            "cold start: {} FederatedIngresses created in {:.2} s ({} concurrent requests)",
            names.len(),
            posted.as_secs_f64(),
            args.rest_clients
        );
        let acked = wait_bulk(&shared, t0, bulk_timeout, "the cold-start ingresses").await?;
        println!(
            "cold start: every one of the {n} agents acked a plan with all {} after {:.2} s",
            names.len(),
            acked.as_secs_f64()
        );
        let done = wait_propagated(&propagated, &names, t0, bulk_timeout).await?;
        println!(
            "cold start: all {} Propagated=True after {:.2} s (from the first POST); hub rss {:.1} MiB",
            names.len(),
            done.as_secs_f64(),
            rss_mib(pid)?
        );
        watcher.abort();
        idle(args, &shared, replicas).await?;
        for task in agents {
            task.abort();
        }
        drop(channels);
        return Ok(Rounds::default());
    }

    // Rounds.
    let mut all_times = Vec::new();
    let mut per_agent = Vec::new();
    let mut propagated_times = Vec::new();
    let mut post_times = Vec::new();
    for round in 0..args.rounds {
        let name = format!("p{round:03}");
        let port = ROUND_PORT + u16::try_from(round).unwrap_or(0);
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
    println!(
        "--- {n} clusters, {} preloaded ingresses, {} rounds ---",
        args.preload, args.rounds
    );
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
    idle(args, &shared, replicas).await?;
    if args.report_seconds > 0 {
        report_window(args, &shared, replicas, false).await?;
        if args.flap_percent > 0.0 {
            report_window(args, &shared, replicas, true).await?;
        }
    }
    for task in agents {
        task.abort();
    }
    drop(channels);
    Ok(Rounds {
        post: post_times,
        all_agents: all_times,
        per_agent,
        propagated: propagated_times,
    })
}

/// The most RSS the process has had (`VmHWM`), MiB.
fn peak_rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmHWM not found")?;
    Ok(kib / 1024.0)
}

/// Idle: N agents heartbeating, nothing changing; the hub's CPU and RSS (each replica's
/// with several).
async fn idle(args: &Args, shared: &Shared, replicas: &Replicas) -> anyhow::Result<()> {
    let n = args.clusters;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let heartbeats_before = shared.heartbeats.load(Ordering::Relaxed);
    let mut pids = replicas.pids();
    pids.push(std::process::id());
    let window = CpuWindow::start(&pids);
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let cpu = window.finish();
    let heartbeats = shared.heartbeats.load(Ordering::Relaxed) - heartbeats_before;
    let hubs = &pids[..pids.len() - 1];
    let each = |values: Vec<String>| {
        if hubs.len() > 1 {
            format!(" ({})", values.join(", "))
        } else {
            String::new()
        }
    };
    let mut rss = Vec::new();
    let mut peak = Vec::new();
    for pid in hubs {
        rss.push(rss_mib(*pid)?);
        peak.push(peak_rss_mib(*pid)?);
    }
    println!(
        "idle with {n} agents heartbeating every 2 s ({heartbeats} heartbeats in {} s): hub CPU {:.1}% of one core{}, hub RSS {:.1} MiB{}, peak {:.1} MiB (this bench process, simulating the agents: CPU {:.1}%)",
        args.idle_seconds,
        cpu[..hubs.len()].iter().sum::<f64>(),
        each(
            cpu[..hubs.len()]
                .iter()
                .map(|c| format!("{c:.1}%"))
                .collect()
        ),
        rss.iter().sum::<f64>(),
        each(rss.iter().map(|r| format!("{r:.1} MiB")).collect()),
        peak.iter().sum::<f64>(),
        cpu[hubs.len()]
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
    Ok(())
}

/// Creates the FederatedIngresses `names` (TCP ports from `first_port` on), `concurrency`
/// requests at a time; how long it took. With `placement: Some((width, n))` the i-th is
/// placed on the `width` clusters from `c(i × width mod n)` on, else on every cluster.
async fn create_bulk(
    api: &Api,
    names: &[String],
    first_port: u16,
    concurrency: usize,
    placement: Option<(usize, usize)>,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let path = format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses");
    futures_util::stream::iter(names.iter().enumerate())
        .map(|(i, name)| {
            let (api, path) = (api.clone(), path.clone());
            let port = first_port + u16::try_from(i).unwrap_or(0);
            let mut body = ingress(name, &[("TCP", port)], 9000);
            if let Some((width, n)) = placement {
                let clusters: Vec<String> = (0..width)
                    .map(|j| format!("c{:04}", (i * width + j) % n))
                    .collect();
                body["spec"]["placement"] = serde_json::json!({ "clusters": clusters });
            }
            async move { api.post(&path, Some(&body)).await.map(|_| ()) }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()?;
    Ok(started.elapsed())
}

/// Waits until every agent has seen every bulk ingress; the time from `since`.
async fn wait_bulk(
    shared: &Shared,
    since: Instant,
    timeout: Duration,
    what: &str,
) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(at) = *lock(&shared.bulk_done) {
            return Ok(at.saturating_duration_since(since));
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {} (agent, ingress) pairs of {what} acked within {timeout:?}",
                shared.bulk_seen.load(Ordering::Relaxed),
                shared.bulk_target.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every one of `names` was seen Propagated=True; the time of the last,
/// from `since`.
async fn wait_propagated(
    propagated: &std::sync::Mutex<HashMap<String, Instant>>,
    names: &[String],
    since: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + timeout;
    loop {
        {
            let seen = lock(propagated);
            let last = names
                .iter()
                .map(|n| seen.get(n))
                .collect::<Option<Vec<_>>>();
            if let Some(last) = last.and_then(|times| times.into_iter().max().copied()) {
                return Ok(last.saturating_duration_since(since));
            }
            if Instant::now() > deadline {
                let done = names.iter().filter(|n| seen.contains_key(*n)).count();
                bail!(
                    "only {done} of {} Propagated=True within {timeout:?}",
                    names.len()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A window of `--report-seconds` with every agent reporting (and, with `flapping`,
/// `--flap-percent` of them flapping their backend): what it wrote to etcd, against
/// the naive cost of writing every report.
async fn report_window(
    args: &Args,
    shared: &Shared,
    replicas: &Replicas,
    flapping: bool,
) -> anyhow::Result<()> {
    let n = args.clusters;
    let every = Duration::from_millis(args.report_interval_ms.max(1));
    let flap_every = if flapping {
        ((100.0 / args.flap_percent).round() as usize).max(1)
    } else {
        0
    };
    let flappers = if flap_every > 0 {
        n.div_ceil(flap_every)
    } else {
        0
    };
    shared.reporting.send_replace(Reporting {
        every: Some(every),
        flap_every,
        flap_half: Duration::from_millis(args.flap_period_ms / 2),
    });
    // The first reports change more than load: every (cluster, ingress) becomes healthy,
    // with an Event each. Not measured: the window starts once no Event was written for
    // 3 s (and at least two report intervals in).
    let etcd = replicas.etcd.as_ref();
    let keys = match etcd {
        Some(etcd) => {
            let now = etcd.counters().await?;
            Some(KeyWatch::start(&etcd.client_urls[0], now.revision as i64).await?)
        }
        None => None,
    };
    let warming = Instant::now();
    let events = "/registry/fedingress.io/events";
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waited = warming.elapsed();
        let quiet = keys
            .as_ref()
            .is_none_or(|k| k.recent(events, Duration::from_secs(3)) == 0);
        if (waited >= every * 2 && waited >= Duration::from_secs(5) && quiet)
            || waited > Duration::from_secs(300)
        {
            break;
        }
    }
    let warm_up = warming.elapsed();
    let warm_events = keys.as_ref().map_or(0, |k| k.total(events));
    let before = match etcd {
        Some(etcd) => Some(etcd.counters().await?),
        None => None,
    };
    let reports_before = shared.reports.load(Ordering::Relaxed);
    let health_before = shared.health_reports.load(Ordering::Relaxed);
    let mut pids = replicas.pids();
    let hubs = pids.len();
    let etcd_pids = etcd.map(|e| e.pids()).unwrap_or_default();
    pids.extend(&etcd_pids);
    pids.push(std::process::id());
    let window = CpuWindow::start(&pids);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.report_seconds)).await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = window.finish();
    let after = match etcd {
        Some(etcd) => Some(etcd.counters().await?),
        None => None,
    };
    let reports = (shared.reports.load(Ordering::Relaxed) - reports_before) as f64 / seconds;
    let health = (shared.health_reports.load(Ordering::Relaxed) - health_before) as f64 / seconds;
    shared.reporting.send_replace(Reporting::default());
    println!(
        "--- report window: {n} agents reporting every {} ms, load figures changing at every report{}; {seconds:.1} s measured after {:.1} s of warm-up ({warm_events} Events written in it) ---",
        every.as_millis(),
        if flapping {
            format!(
                ", {flappers} clusters ({} %) flapping their backend every {} ms",
                args.flap_percent, args.flap_period_ms
            )
        } else {
            String::new()
        },
        warm_up.as_secs_f64()
    );
    println!(
        "naive cost, every report written: {reports:.1} reports/s ({health:.2}/s of them health changes)"
    );
    if let (Some(before), Some(after), Some(keys)) = (before, after, keys) {
        let EtcdCounters {
            revision,
            puts,
            deletes,
            proposals,
            fsyncs,
        } = after.rate_since(&before, seconds);
        println!(
            "etcd: revisions {revision:.1}/s, puts {puts:.1}/s, deletes {deletes:.1}/s, raft proposals {proposals:.1}/s, WAL fsyncs {fsyncs:.1}/s (member m0)"
        );
        println!(
            "etcd writes ÷ naive: revisions {:.3}×, puts {:.3}×",
            revision / reports,
            puts / reports
        );
        let counts = keys
            .counts_between(before.revision as i64, after.revision as i64)
            .await;
        for (prefix, count) in &counts {
            println!(
                "  {prefix}: {:.1} changes/s, {:.1} KB/s of values ({:.3}× the naive rate)",
                count.changes as f64 / seconds,
                count.bytes as f64 / seconds / 1000.0,
                count.changes as f64 / seconds / reports
            );
        }
    } else {
        println!("store writes are counted on etcd only (this run: redb)");
    }
    let fmt = |values: &[f64]| {
        if values.is_empty() {
            return "none".to_string();
        }
        values
            .iter()
            .map(|c| format!("{c:.1}%"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "CPU (% of one core): replicas {}; etcd members {}; this bench process {:.1}%",
        fmt(&cpu[..hubs]),
        fmt(&cpu[hubs..hubs + etcd_pids.len()]),
        cpu[cpu.len() - 1]
    );
    // Let the last reports settle before anything else is measured.
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(())
}
