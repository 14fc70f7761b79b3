//! failover-bench: how long after a backend dies the embedded DNS server still answers
//! with its cluster, in a real federation: the release `federation-apiserver` with DNS,
//! three release `cluster-agent`s health-checking in-process TCP echo backends, and a
//! Geo FederatedIngress. With `--replicas N` the hub is N replicas on one etcd (every
//! replica serving DNS, the agents knowing every gateway), and every number is taken on
//! every replica's DNS; `--compare` runs one replica on redb and then the replicas, and
//! prints each figure's ratio against the single replica.
//!
//! Chain measured: backend listener closed → the agent's TCP connect checks fail
//! (`unhealthyThreshold` times) → the agent's report → the hub's controller pass (on the
//! leader; with replicas, through the agent's record in etcd when a follower holds its
//! session) → status and GSLB step → a new DNS snapshot swapped in (with replicas: the
//! leader's DNS state in etcd, rebuilt by every replica when the serial key changes) →
//! seen by a client polling each DNS server over UDP (raw query with ECS from the
//! cluster's region, and an SOA query for the serial) every 5 ms.
//!
//! Before the failover cycles, `--changes K` rounds measure propagation: a new
//! FederatedIngress, then a change of its strategy, each written through one replica (in
//! turn) → every replica's DNS serving the new answer, and all of them with one SOA
//! serial. After them, `--leader-kills K` (replicas only) `kill -9`s the elected leader:
//! time until another replica leads, and a backend dying right then → its cluster gone
//! from every survivor's answers.
//!
//! Run: `cargo build --release --workspace --bins && target/release/failover-bench` (see
//! docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::dnscommon::{
    DEPLOY_TIMING, REGIONS, Response, TYPE_A, TYPE_SOA, ZONE, ask, locations_section, region_client,
};
use fedingress_bench::replicas::{ReplicaFlags, Replicas};
use fedingress_bench::{
    Agent, AgentSpec, Api, GROUP_PATH, ms, percentile, print_ratio_table, sibling, summary, today,
};
use fedingress_testsupport::dns::Query;
use fedingress_testsupport::echo::{Echo, Reply};
use serde_json::json;

#[derive(Parser)]
#[command(about = "Backend death → last DNS answer with its cluster, real agents")]
struct Args {
    /// Kill/restore cycles (the killed cluster rotates over the three regions).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Propagation rounds before the cycles: a new ingress, then a strategy change.
    #[arg(long, default_value_t = 0)]
    changes: usize,
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
    #[command(flatten)]
    hub: ReplicaFlags,
    /// After the cycles: kill -9 the leader this many times (replicas only).
    #[arg(long, default_value_t = 0)]
    leader_kills: usize,
    /// Run one replica on redb, then `--replicas` (at least 2; default 3) on `--store`
    /// (default etcd3), and print the ratios against the single replica.
    #[arg(long)]
    compare: bool,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// cluster-agent binary (default: next to this one).
    #[arg(long)]
    agent: Option<PathBuf>,
}

const NS: &str = "bench";
/// Replica rN on 127.0.89.N, agents on .11-.13, backends on .21-.23.
const BLOCK: u8 = 89;
const PORT: u16 = 17089;
/// TCP port of propagation round k: `ROUND_PORT + k`.
const ROUND_PORT: u16 = 17100;
const TTL: u32 = 5;
/// After every replica answers the new way, keep polling this long to catch flaps.
const SETTLE: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(30);

fn agent_ip(c: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, BLOCK, 11 + c as u8)
}

fn backend(c: usize) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(127, 0, BLOCK, 21 + c as u8).into(), 9000)
}

fn fo_name() -> String {
    format!("fo.{ZONE}")
}

/// A DNS client of every replica: one UDP socket each, a new ID per query.
struct Poller {
    sockets: Vec<tokio::net::UdpSocket>,
    servers: Vec<SocketAddr>,
    id: u16,
    lost: usize,
}

/// One replica's answer in a poll: the A records for the name (with ECS) and the SOA
/// serial asked right after.
struct Answer {
    a: Response,
    serial: Option<u32>,
}

impl Poller {
    async fn new(replicas: &Replicas) -> anyhow::Result<Self> {
        let mut sockets = Vec::new();
        let mut servers = Vec::new();
        for replica in &replicas.replicas {
            sockets.push(tokio::net::UdpSocket::bind("127.0.0.1:0").await?);
            servers.push(replica.dns.context("replica without DNS")?);
        }
        Ok(Self {
            sockets,
            servers,
            id: 0,
            lost: 0,
        })
    }

    /// Asks each of the `live` replicas, at once, for `name` with ECS from region `r`
    /// and for the zone's SOA; `None` for a replica that did not answer within 200 ms.
    async fn poll(&mut self, live: &[usize], name: &str, r: usize) -> Vec<Option<Answer>> {
        let first = self.id;
        self.id = self.id.wrapping_add(2 * live.len() as u16);
        let sockets = &self.sockets;
        let servers = &self.servers;
        let asks = live.iter().enumerate().map(|(k, &i)| {
            let id = first.wrapping_add(2 * k as u16 + 2);
            let a = Query::new(id, name, TYPE_A)
                .edns(Some(region_client(REGIONS[r].1, 7)))
                .encode();
            let soa = Query::new(id.wrapping_add(1), ZONE, TYPE_SOA).encode();
            let (socket, server) = (&sockets[i], servers[i]);
            async move {
                let timeout = Duration::from_millis(200);
                let a = ask(socket, server, &a, timeout).await.ok()?;
                let soa = ask(socket, server, &soa, timeout).await.ok()?;
                Some(Answer {
                    a,
                    serial: soa.serial,
                })
            }
        });
        let answers = futures_util::future::join_all(asks.collect::<Vec<_>>()).await;
        self.lost += answers.iter().filter(|a| a.is_none()).count();
        answers
    }
}

/// What the replicas' DNS did after a change at `t0`.
struct Observed {
    /// Per live replica: the receipt of its first answer the new way (kept only if no
    /// answer the old way came after it).
    first_new: Vec<Duration>,
    /// Per live replica: the receipt of its last answer the old way (zero if none).
    last_old: Vec<Duration>,
    /// Per live replica: its first answer the old way, if any (rcode, A records, serial).
    first_old: Vec<Option<String>>,
    /// The first poll in which every live replica answered the new way with one serial.
    converged: Duration,
    /// Distinct SOA serials seen after `t0`.
    serials: usize,
    /// Answers the old way after an answer the new way.
    flaps: usize,
}

impl Observed {
    fn all_new(&self) -> Duration {
        self.first_new.iter().max().copied().unwrap_or_default()
    }

    fn all_old(&self) -> Duration {
        self.last_old.iter().max().copied().unwrap_or_default()
    }
}

/// Polls the `live` replicas every `poll` from now on until each answers `name` (ECS
/// from region `r`) the new way (`is_new`) with one serial among them, and then for
/// [`SETTLE`] more; times are since `t0`.
async fn observe(
    poller: &mut Poller,
    live: &[usize],
    name: &str,
    r: usize,
    is_new: impl Fn(&Response) -> bool,
    t0: Instant,
    poll: Duration,
) -> anyhow::Result<Observed> {
    let n = live.len();
    let mut first_new: Vec<Option<Duration>> = vec![None; n];
    let mut last_old = vec![Duration::ZERO; n];
    let mut first_old: Vec<Option<String>> = vec![None; n];
    let mut converged: Option<Duration> = None;
    let mut serials = BTreeSet::new();
    let mut flaps = 0;
    let mut next = tokio::time::Instant::now();
    let mut last: String;
    loop {
        let answers = poller.poll(live, name, r).await;
        last = answers
            .iter()
            .map(|a| match a {
                Some(a) => format!("rcode {} {:?} serial {:?}", a.a.rcode, a.a.a, a.serial),
                None => "no answer".to_string(),
            })
            .collect::<Vec<_>>()
            .join("; ");
        let now = t0.elapsed();
        let mut round: Vec<Option<u32>> = Vec::with_capacity(n);
        for (k, answer) in answers.iter().enumerate() {
            let Some(answer) = answer else {
                round.push(None);
                continue;
            };
            if let Some(serial) = answer.serial {
                serials.insert(serial);
            }
            if is_new(&answer.a) {
                first_new[k].get_or_insert(now);
                round.push(answer.serial);
            } else {
                last_old[k] = now;
                first_old[k].get_or_insert_with(|| {
                    format!(
                        "rcode {} {:?} serial {:?}",
                        answer.a.rcode, answer.a.a, answer.serial
                    )
                });
                if first_new[k].take().is_some() {
                    flaps += 1;
                    converged = None;
                }
                round.push(None);
            }
        }
        if converged.is_none()
            && round.iter().all(Option::is_some)
            && round.windows(2).all(|w| w[0] == w[1])
        {
            converged = Some(now);
        }
        if let Some(at) = converged
            && now > at + SETTLE
        {
            return Ok(Observed {
                first_new: first_new
                    .into_iter()
                    .map(Option::unwrap_or_default)
                    .collect(),
                last_old,
                first_old,
                converged: at,
                serials: serials.len(),
                flaps,
            });
        }
        if now > TIMEOUT {
            bail!(
                "{name}: the replicas did not all answer the new way within {TIMEOUT:?} (last: {last})"
            );
        }
        next += poll;
        tokio::time::sleep_until(next).await;
    }
}

/// What one setup measured (durations per round or cycle).
#[derive(Default)]
struct Results {
    label: String,
    /// New ingress: POST → the last replica answering it; per replica; all with one serial.
    created_all: Vec<Duration>,
    created_per_replica: Vec<Vec<Duration>>,
    created_converged: Vec<Duration>,
    /// Strategy change: PATCH → likewise.
    changed_all: Vec<Duration>,
    changed_converged: Vec<Duration>,
    /// Backend died → the last answer with its cluster from any replica; per replica;
    /// every replica without it and with one serial.
    failover_all: Vec<Duration>,
    failover_per_replica: Vec<Vec<Duration>>,
    failover_converged: Vec<Duration>,
    /// Backend back → in every replica's answers again.
    back_all: Vec<Duration>,
    /// Leader kill -9 → another replica leads.
    elected: Vec<Duration>,
    /// Backend died right after the election → gone from every survivor's answers.
    after_election: Vec<Duration>,
    /// Leader kill → that.
    kill_to_dns: Vec<Duration>,
    /// The killed replica's agents connected elsewhere (from the kill).
    reconnected: Vec<Duration>,
    /// Killed replica restarted → answering the steady state with the others' serial.
    rejoined: Vec<Duration>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let apiserver = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let agent_binary = sibling(args.agent.clone(), "cluster-agent")?;
    let setups = args.hub.setups(args.compare);
    let mut results = Vec::new();
    for (count, store) in setups {
        let locations = locations_section(None);
        let settings =
            args.hub
                .settings(count, store, BLOCK, DEPLOY_TIMING, Some((ZONE, &locations)));
        let mut replicas = Replicas::start(&apiserver, &settings).await?;
        let mut agents = Vec::new();
        let result = run(&args, &mut replicas, &agent_binary, &mut agents).await;
        for agent in agents {
            agent.proc.stop().await;
        }
        replicas.stop().await;
        results.push(result?);
    }
    if results.len() > 1 {
        print_table(&results);
    }
    Ok(())
}

async fn run(
    args: &Args,
    replicas: &mut Replicas,
    agent_binary: &std::path::Path,
    agents: &mut Vec<Agent>,
) -> anyhow::Result<Results> {
    let api = Api::new(&replicas.replicas[0].api)?;
    let health = format!(
        "healthCheck:\n  intervalMs: {}\n  timeoutMs: {}\n  healthyThreshold: {}\n  unhealthyThreshold: {}\nreportIntervalMs: 5000\n",
        args.interval_ms, args.timeout_ms, args.healthy_threshold, args.unhealthy_threshold
    );
    let gateways = replicas.gateways();
    api.create_namespace(NS).await?;
    let mut echoes = Vec::new();
    for (c, (region, _, lat, lon)) in REGIONS.iter().enumerate() {
        let cluster = format!("c{}", c + 1);
        echoes.push(
            Echo::builder()
                .reply(Reply::Same)
                .udp(false)
                .start(backend(c))
                .with_context(|| format!("echo backend on {}", backend(c)))?,
        );
        api.create_cluster(&cluster, region, *lat, *lon).await?;
        let token = api.issue_token(&cluster).await?;
        let bind = agent_ip(c).to_string();
        agents.push(
            Agent::start(
                agent_binary,
                &AgentSpec {
                    cluster: &cluster,
                    token: &token,
                    hubs: &gateways,
                    bind: &bind,
                    echo: &[backend(c)],
                    extra: &health,
                },
            )
            .await?,
        );
    }
    let label = replicas.label();
    println!(
        "failover-bench {}: {label}: federation-apiserver pids {:?} on {} (DNS :{}, heartbeat 2000 ms, lease 6000 ms{}){}; cluster-agents {} on {}..{} (standalone, hub.addresses: every replica), echo backends {}..{}",
        today(),
        replicas.pids(),
        replicas
            .replicas
            .iter()
            .map(|r| r.ip.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        fedingress_bench::replicas::DNS_PORT,
        if replicas.etcd.is_some() {
            format!(
                ", --leader-elect-lease-duration {}",
                args.hub.leader_elect_lease_duration
            )
        } else {
            String::new()
        },
        replicas
            .etcd
            .as_ref()
            .map(|e| format!("; etcd pids {:?}", e.pids()))
            .unwrap_or_default(),
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
    if replicas.etcd.is_some() {
        let leader = replicas.wait_leader(TIMEOUT).await?;
        println!("leader: {}", replicas.replicas[leader].name);
    }
    let path = format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses");
    api.post(&path, Some(&geo_ingress("fo", &fo_name(), PORT)))
        .await?;
    let mut poller = Poller::new(replicas).await?;
    let poll = Duration::from_millis(args.poll_ms);
    wait_steady(&mut poller, replicas, poll).await?;
    println!(
        "Geo ingress {} (TTL {TTL}, TCP {PORT}) answers each region with its own cluster on every replica; DNS polled every {} ms with ECS from the region concerned, and SOA",
        fo_name(),
        args.poll_ms
    );
    let mut results = Results {
        label,
        created_per_replica: vec![Vec::new(); replicas.replicas.len()],
        failover_per_replica: vec![Vec::new(); replicas.replicas.len()],
        ..Results::default()
    };

    // Propagation: a new ingress, then a change of its strategy.
    for k in 0..args.changes {
        let r = k % REGIONS.len();
        let through = k % replicas.replicas.len();
        let writer = Api::new(&replicas.replicas[through].api)?;
        let name = format!("p{k:02}");
        let dns_name = format!("{name}.{ZONE}");
        let port = ROUND_PORT + u16::try_from(k).unwrap_or(0);
        let live = replicas.live();
        let own = vec![agent_ip(r)];
        let t0 = Instant::now();
        writer
            .post(&path, Some(&geo_ingress(&name, &dns_name, port)))
            .await?;
        let posted = t0.elapsed();
        let created = observe(
            &mut poller,
            &live,
            &dns_name,
            r,
            |a| a.rcode == 0 && a.a == own,
            t0,
            poll,
        )
        .await?;
        results.created_all.push(created.all_new());
        results.created_converged.push(created.converged);
        for (j, &i) in live.iter().enumerate() {
            results.created_per_replica[i].push(created.first_new[j]);
        }
        let t1 = Instant::now();
        writer
            .merge_patch(
                &format!("{path}/{name}"),
                &json!({"spec": {"traffic": {"strategy": {"type": "RoundRobin"}}}}),
            )
            .await?;
        let patched = t1.elapsed();
        let every: BTreeSet<Ipv4Addr> = (0..REGIONS.len()).map(agent_ip).collect();
        let changed = observe(
            &mut poller,
            &live,
            &dns_name,
            r,
            |a| a.rcode == 0 && a.a.iter().copied().collect::<BTreeSet<_>>() == every,
            t1,
            poll,
        )
        .await?;
        results.changed_all.push(changed.all_new());
        results.changed_converged.push(changed.converged);
        println!(
            "change {k:2} through {}: new {dns_name} (POST answered {}): answered by every replica {} (each: {}), all with one serial {} ({} serials seen, {} flaps); Geo -> RoundRobin (PATCH answered {}): {} (each: {}), one serial {} ({} serials, {} flaps)",
            replicas.replicas[through].name,
            ms(posted),
            ms(created.all_new()),
            list(&created.first_new),
            ms(created.converged),
            created.serials,
            created.flaps,
            ms(patched),
            ms(changed.all_new()),
            list(&changed.first_new),
            ms(changed.converged),
            changed.serials,
            changed.flaps,
        );
    }

    // The failover cycles run with `fo` alone, as without --changes.
    for k in 0..args.changes {
        api.delete(&format!("{path}/p{k:02}")).await?;
    }
    if args.changes > 0 {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Failover cycles.
    let mut flaps = 0;
    for run in 0..args.runs {
        let c = run % REGIONS.len();
        let ip = agent_ip(c);
        let live = replicas.live();
        // Spread the kill over the phase of the check interval.
        let jitter = Duration::from_millis(300 + (run as u64 * 73) % args.interval_ms.max(1));
        tokio::time::sleep(jitter).await;
        let t0 = Instant::now();
        echoes[c].stop_tcp();
        let gone = observe(
            &mut poller,
            &live,
            &fo_name(),
            c,
            |a| a.rcode == 0 && !a.a.is_empty() && !a.a.contains(&ip),
            t0,
            poll,
        )
        .await?;
        flaps += gone.flaps;
        results.failover_all.push(gone.all_old());
        results.failover_converged.push(gone.converged);
        for (j, &i) in live.iter().enumerate() {
            results.failover_per_replica[i].push(gone.last_old[j]);
        }
        tokio::time::sleep(jitter).await;
        let t1 = Instant::now();
        echoes[c].start_tcp()?;
        let back = observe(
            &mut poller,
            &live,
            &fo_name(),
            c,
            |a| a.a.contains(&ip),
            t1,
            poll,
        )
        .await?;
        flaps += back.flaps;
        results.back_all.push(back.all_new());
        println!(
            "run {run:2}: killed c{} ({}): last answer with it {} (each replica: {}), every replica without it and one serial {}; backend back -> answered again by every replica {}",
            c + 1,
            REGIONS[c].0,
            ms(gone.all_old()),
            list(&gone.last_old),
            ms(gone.converged),
            ms(back.all_new())
        );
    }

    // Leader kills.
    if args.leader_kills > 0 && replicas.replicas.len() > 1 {
        for k in 0..args.leader_kills {
            leader_kill(args, k, replicas, &mut poller, &mut echoes, &mut results).await?;
        }
    }

    if replicas.etcd.is_some() {
        let leader = replicas.wait_leader(TIMEOUT).await?;
        println!("leader now: {}", replicas.replicas[leader].name);
    }
    println!(
        "--- {}: {} changes, {} runs, {} leader kills; health checks intervalMs {}, timeoutMs {}, unhealthyThreshold {}, healthyThreshold {} ---",
        results.label,
        args.changes,
        args.runs,
        results.elected.len(),
        args.interval_ms,
        args.timeout_ms,
        args.unhealthy_threshold,
        args.healthy_threshold
    );
    if args.changes > 0 {
        println!(
            "new ingress -> answered by every replica:                 {}",
            summary(&results.created_all)
        );
        for (i, times) in results.created_per_replica.iter().enumerate() {
            println!(
                "  {}:                                                     {}",
                replicas.replicas[i].name,
                summary(times)
            );
        }
        println!(
            "new ingress -> every replica with it and one SOA serial: {}",
            summary(&results.created_converged)
        );
        println!(
            "strategy change -> answered by every replica:             {}",
            summary(&results.changed_all)
        );
        println!(
            "strategy change -> every replica and one SOA serial:      {}",
            summary(&results.changed_converged)
        );
    }
    if args.runs > 0 {
        println!(
            "backend died -> last DNS answer containing its cluster (any replica): {}",
            summary(&results.failover_all)
        );
        for (i, times) in results.failover_per_replica.iter().enumerate() {
            println!(
                "  {}:                                                               {}",
                replicas.replicas[i].name,
                summary(times)
            );
        }
        println!(
            "backend died -> every replica without it and one SOA serial:         {}",
            summary(&results.failover_converged)
        );
        println!(
            "backend back -> every replica answers with its cluster again:        {}",
            summary(&results.back_all)
        );
    }
    if !results.elected.is_empty() {
        println!(
            "leader kill -9 -> another replica leads:                        {}",
            summary(&results.elected)
        );
        println!(
            "  then a backend died -> gone from every survivor's answers:    {}",
            summary(&results.after_election)
        );
        println!(
            "  leader kill -> that:                                          {}",
            summary(&results.kill_to_dns)
        );
        println!(
            "leader kill -> its agents connected to the survivors:           {}",
            summary(&results.reconnected)
        );
        println!(
            "killed replica restarted -> serving the steady answers and serial: {}",
            summary(&results.rejoined)
        );
        let p50 = |values: &[Duration]| {
            let mut sorted = values.to_vec();
            sorted.sort();
            percentile(&sorted, 0.5).as_secs_f64()
        };
        println!(
            "election ÷ --leader-elect-lease-duration: p50 {:.2}×, max {:.2}×",
            p50(&results.elected) / args.hub.leader_elect_lease_duration as f64,
            results
                .elected
                .iter()
                .max()
                .copied()
                .unwrap_or_default()
                .as_secs_f64()
                / args.hub.leader_elect_lease_duration as f64
        );
        if !results.failover_all.is_empty() {
            println!(
                "backend died right after an election ÷ in the steady state (the runs above), p50: {:.2}×",
                p50(&results.after_election) / p50(&results.failover_all)
            );
        }
    }
    println!(
        "answers flapping back: {flaps}; DNS polls unanswered within 200 ms: {}",
        poller.lost
    );
    Ok(results)
}

/// A Geo FederatedIngress (TTL 5, `failbackDelaySeconds` 0: a cluster whose backend is
/// back returns to the answers at once, instead of after the default 30 s) with one TCP
/// rule to `echo:9000`.
fn geo_ingress(name: &str, dns_name: &str, port: u16) -> serde_json::Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name},
        "spec": {
            "rules": [{"protocol": "TCP", "port": port, "backend": {"service": "echo", "port": 9000}}],
            "traffic": {
                "dnsName": dns_name,
                "ttl": TTL,
                "failbackDelaySeconds": 0,
                "strategy": {"type": "Geo"}
            }
        }
    })
}

fn list(times: &[Duration]) -> String {
    times.iter().map(|t| ms(*t)).collect::<Vec<_>>().join(", ")
}

/// Waits until every running replica answers `fo` for each region with its own cluster,
/// with one serial.
async fn wait_steady(
    poller: &mut Poller,
    replicas: &Replicas,
    poll: Duration,
) -> anyhow::Result<()> {
    let live = replicas.live();
    for (r, (region, ..)) in REGIONS.iter().enumerate() {
        let own = vec![agent_ip(r)];
        observe(
            poller,
            &live,
            &fo_name(),
            r,
            |a| a.a == own,
            Instant::now(),
            poll,
        )
        .await
        .with_context(|| format!("waiting for {region} to answer its region"))?;
    }
    Ok(())
}

/// One leader kill: kill -9 of the elected leader, a backend dying once another replica
/// leads, then the backend and the replica back.
async fn leader_kill(
    args: &Args,
    k: usize,
    replicas: &mut Replicas,
    poller: &mut Poller,
    echoes: &mut [Echo],
    results: &mut Results,
) -> anyhow::Result<()> {
    let poll = Duration::from_millis(args.poll_ms);
    let leader = replicas.wait_leader(TIMEOUT).await?;
    let deadline = Instant::now() + TIMEOUT;
    while replicas.agents_connected().await < REGIONS.len() {
        if Instant::now() > deadline {
            bail!("leader kill {k}: the agents did not all connect");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = replicas
        .metric(leader, "fedingress_agents_connected")
        .await
        .unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(300 + (k as u64 * 277) % 1000)).await;
    let t0 = replicas.kill9(leader).await?;
    let live = replicas.live();
    let mut reconnected = None;
    let elected = loop {
        if let Some(new) = replicas.leader().await {
            break (new, t0.elapsed());
        }
        if reconnected.is_none() && replicas.agents_connected().await == REGIONS.len() {
            reconnected = Some(t0.elapsed());
        }
        if t0.elapsed() > TIMEOUT {
            bail!("leader kill {k}: no new leader within {TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let c = k % REGIONS.len();
    let ip = agent_ip(c);
    let t1 = Instant::now();
    echoes[c].stop_tcp();
    let gone = observe(
        poller,
        &live,
        &fo_name(),
        c,
        |a| a.rcode == 0 && !a.a.is_empty() && !a.a.contains(&ip),
        t1,
        poll,
    )
    .await?;
    while reconnected.is_none() {
        if replicas.agents_connected().await == REGIONS.len() {
            reconnected = Some(t0.elapsed());
        } else if t0.elapsed() > TIMEOUT {
            bail!("leader kill {k}: the agents did not reconnect");
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let reconnected = reconnected.unwrap_or_default();
    echoes[c].start_tcp()?;
    observe(
        poller,
        &live,
        &fo_name(),
        c,
        |a| a.a.contains(&ip),
        Instant::now(),
        poll,
    )
    .await?;
    let t2 = Instant::now();
    replicas.restart(leader).await?;
    let ready = t2.elapsed();
    let all = replicas.live();
    let restarted = all.iter().position(|&i| i == leader).unwrap_or_default();
    // Timed on the first region's answer; the others are checked after it.
    let mut before_steady = Vec::new();
    let mut rejoined = Duration::ZERO;
    for (r, _) in REGIONS.iter().enumerate() {
        let own = vec![agent_ip(r)];
        let seen = observe(poller, &all, &fo_name(), r, |a| a.a == own, t2, poll).await?;
        if r == 0 {
            rejoined = seen.converged;
        }
        if let Some(first) = &seen.first_old[restarted] {
            before_steady.push(format!(
                "region {r}: {first} until {}",
                ms(seen.last_old[restarted])
            ));
        }
    }
    println!(
        "leader kill {k}: killed {} (leader, {held} agent sessions): {} leads after {}; c{} backend died then: gone from every survivor's answers after {} ({} after the kill; serials seen {}); agents all connected {} after the kill; {} restarted: READY after {}, serving the same answers and serial after {}{}",
        replicas.replicas[leader].name,
        replicas.replicas[elected.0].name,
        ms(elected.1),
        c + 1,
        ms(gone.all_old()),
        ms(t1.duration_since(t0) + gone.all_old()),
        gone.serials,
        ms(reconnected),
        replicas.replicas[leader].name,
        ms(ready),
        ms(rejoined),
        if before_steady.is_empty() {
            String::new()
        } else {
            format!(" (answered before: {})", before_steady.join("; "))
        }
    );
    results.elected.push(elected.1);
    results.after_election.push(gone.all_old());
    results
        .kill_to_dns
        .push(t1.duration_since(t0) + gone.all_old());
    results.reconnected.push(reconnected);
    results.rejoined.push(rejoined);
    Ok(())
}

/// The figures of every setup, with ratios against the first.
fn print_table(results: &[Results]) {
    type Get = fn(&Results) -> &[Duration];
    let rows: [(&str, Get); 6] = [
        ("new ingress → every replica answers it", |r| {
            &r.created_all
        }),
        ("new ingress → every replica, one SOA serial", |r| {
            &r.created_converged
        }),
        ("strategy change → every replica", |r| &r.changed_all),
        ("strategy change → every replica, one serial", |r| {
            &r.changed_converged
        }),
        ("backend died → last answer with it (any replica)", |r| {
            &r.failover_all
        }),
        ("backend back → in every replica's answers", |r| {
            &r.back_all
        }),
    ];
    let labels: Vec<String> = results.iter().map(|r| r.label.clone()).collect();
    let rows: Vec<(&str, Vec<&[Duration]>)> = rows
        .iter()
        .map(|(name, get)| (*name, results.iter().map(get).collect()))
        .collect();
    print_ratio_table(&labels, &rows);
}
