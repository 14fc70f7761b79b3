//! dns-bench: queries per second of the embedded GSLB DNS server with a Geo policy over
//! 1,000 FederatedIngresses, against Knot DNS serving the same names statically and
//! PowerDNS serving them as health-checked LUA records (`ifportup`,
//! `enable-lua-records=shared`), all driven by the same `dnsperf` flags.
//!
//! Our side: the release `federation-apiserver` with a `dns:` section (one zone, a
//! 3-region location table), three Clusters, and three **simulated agents** in this
//! process (`fedingress_bench::sim_agent`, set up by `dnscommon::GeoFleet`) speaking the real protocol over real gRPC (Hello with the token, an Ack of
//! every plan, a Report with every share applied, its backends ready and the cluster's
//! address), so every ingress is healthy on every cluster and Geo answers the nearest.
//!
//! Run: `bench/dns-qps.sh` (installs dnsperf, knot, pdns-server if missing, builds,
//! runs) or `cargo build --release --workspace --bins && target/release/dns-bench` (see
//! docs/benchmarks.md). It prints numbers; it asserts nothing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::dnscommon::{
    CLUSTER_IPS, DEPLOY_TIMING, DnsHub, GeoFleet, REGIONS, TYPE_A, ZONE, ask, dig, knot_version,
    name, region_client, start_knot, wait_answers, which, zone_file,
};
use fedingress_bench::{CpuWindow, Proc, sibling, today};
use fedingress_testsupport::dns::Query;

#[derive(Parser)]
#[command(about = "DNS qps: our Geo GSLB vs Knot (static) vs PowerDNS (LUA ifportup)")]
struct Args {
    /// FederatedIngresses (DNS names).
    #[arg(long, default_value_t = 1000)]
    ingresses: usize,
    /// dnsperf `-l`: seconds per run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Rounds; each round runs every (query file, server) pair once, servers interleaved.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Extra dnsperf flags, the same for every server (default: none, dnsperf defaults:
    /// 1 client, 1 thread, 100 queries outstanding, no rate limit, UDP).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    dnsperf_args: String,
    /// After the throughput runs: one run per server at this fixed rate (dnsperf `-Q`) with
    /// the ECS file, for latency at equal load; 0 = none.
    #[arg(long, default_value_t = 20000)]
    fixed_qps: u64,
    /// Query files to run: any of one, names, ecs (comma separated).
    #[arg(long, default_value = "one,names,ecs")]
    files: String,
    /// Leave out Knot.
    #[arg(long)]
    no_knot: bool,
    /// PowerDNS `enable-lua-records` (`shared`: one Lua state for all queries, its
    /// fastest; `yes`: a new Lua state per query).
    #[arg(long, default_value = "shared")]
    pdns_lua: String,
    /// Leave out PowerDNS.
    #[arg(long)]
    no_pdns: bool,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
}

const HUB_IP: &str = "127.0.0.1";
/// Knot and PowerDNS ports on 127.0.0.1.
const KNOT_PORT: u16 = 15391;
const PDNS_PORT: u16 = 15392;
/// The port PowerDNS's `ifportup` checks on the three cluster addresses (bound here).
const CHECK_PORT: u16 = 19053;

// --- Knot and PowerDNS -----------------------------------------------------------------

/// pdns_server (bind backend) with the names as LUA records
/// `ifportup(CHECK_PORT, {c1, c2, c3})`, `enable-lua-records=<lua>`, on
/// 127.0.0.1:PDNS_PORT. Everything else is PowerDNS's default (packet cache on).
fn start_pdns(dir: &Path, n: usize, lua: &str) -> anyhow::Result<Proc> {
    let pdns = which("pdns_server")
        .or_else(|| Some(PathBuf::from("/usr/sbin/pdns_server")).filter(|p| p.exists()))
        .context("pdns_server not found (apt-get install -y pdns-server pdns-backend-bind)")?;
    let addresses = CLUSTER_IPS
        .iter()
        .map(|ip| format!("'{ip}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let zone = dir.join(format!("{ZONE}.zone"));
    std::fs::write(
        &zone,
        zone_file(n, |_| {
            format!("LUA A \"ifportup({CHECK_PORT}, {{{addresses}}})\"")
        }),
    )?;
    std::fs::write(
        dir.join("named.conf"),
        format!(
            "zone \"{ZONE}\" {{ type master; file \"{}\"; }};\n",
            zone.display()
        ),
    )?;
    std::fs::write(
        dir.join("pdns.conf"),
        format!(
            "launch=bind\nbind-config={d}/named.conf\nlocal-address=127.0.0.1\nlocal-port={PDNS_PORT}\nenable-lua-records={lua}\nsecurity-poll-suffix=\nsocket-dir={d}\nguardian=no\ndaemon=no\ndisable-syslog=yes\nloglevel=3\nwebserver=no\napi=no\n",
            d = dir.display()
        ),
    )?;
    let mut command = Command::new(pdns);
    command.arg(format!("--config-dir={}", dir.display()));
    Proc::start_plain(command, "pdns_server")
}

/// Accepts (and drops) TCP connections on the three cluster addresses, port CHECK_PORT,
/// so that PowerDNS's `ifportup` finds them up.
async fn check_listeners() -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for ip in CLUSTER_IPS {
        let listener = tokio::net::TcpListener::bind((ip, CHECK_PORT))
            .await
            .with_context(|| format!("binding {ip}:{CHECK_PORT}"))?;
        tasks.push(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        }));
    }
    Ok(tasks)
}

// --- dnsperf -------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct Perf {
    qps: f64,
    avg_ms: f64,
    min_ms: f64,
    max_ms: f64,
    stddev_ms: f64,
    sent: u64,
    lost: String,
    codes: String,
    /// "request N, response M" (bytes).
    sizes: String,
    /// CPU of the server process over the run, % of one core.
    server_cpu: f64,
    /// CPU of dnsperf over the run, % of one core.
    client_cpu: f64,
    /// The dnsperf command line.
    command: String,
}

fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(str::trim)
}

fn parse_perf(text: &str) -> anyhow::Result<Perf> {
    let qps = field(text, "Queries per second:")
        .context("no `Queries per second` in dnsperf's output")?
        .parse()?;
    // "0.000941 (min 0.000031, max 0.004588)"
    let latency = field(text, "Average Latency (s):").context("no average latency")?;
    let numbers: Vec<f64> = latency
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect();
    let stddev: f64 = field(text, "Latency StdDev (s):")
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    Ok(Perf {
        qps,
        avg_ms: numbers.first().copied().unwrap_or_default() * 1000.0,
        min_ms: numbers.get(1).copied().unwrap_or_default() * 1000.0,
        max_ms: numbers.get(2).copied().unwrap_or_default() * 1000.0,
        stddev_ms: stddev * 1000.0,
        sent: field(text, "Queries sent:")
            .and_then(|s| s.parse().ok())
            .unwrap_or_default(),
        lost: field(text, "Queries lost:").unwrap_or_default().to_string(),
        codes: field(text, "Response codes:")
            .unwrap_or_default()
            .to_string(),
        sizes: field(text, "Average packet size:")
            .unwrap_or_default()
            .to_string(),
        ..Default::default()
    })
}

struct QueryFile {
    label: &'static str,
    path: PathBuf,
    binary: bool,
}

async fn dnsperf(
    file: &QueryFile,
    port: u16,
    seconds: u64,
    extra: &[String],
    server_pid: u32,
) -> anyhow::Result<Perf> {
    let mut args: Vec<String> = vec![
        "-s".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-d".into(),
        file.path.display().to_string(),
        "-l".into(),
        seconds.to_string(),
    ];
    if file.binary {
        args.push("-B".into());
    }
    args.extend(extra.iter().cloned());
    let window = CpuWindow::start(&[server_pid]);
    let started = Instant::now();
    // `times` after dnsperf prints the shell's children's user and system time.
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg("dnsperf \"$@\"; times")
        .arg("sh")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("running dnsperf (apt-get install -y dnsperf)")?;
    let cpu = window.finish();
    let wall = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    let client_seconds: f64 = text
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|t| {
            let (m, s) = t.strip_suffix('s')?.split_once('m')?;
            Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
        })
        .sum();
    let mut perf = parse_perf(&text).with_context(|| {
        format!(
            "dnsperf {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    perf.server_cpu = cpu[0];
    perf.client_cpu = client_seconds / wall * 100.0;
    perf.command = format!("dnsperf {}", args.join(" "));
    Ok(perf)
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

// --- main ----------------------------------------------------------------------------

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let binary = sibling(args.apiserver.clone(), "federation-apiserver")?;
    let hub = DnsHub::start(
        &binary,
        HUB_IP,
        DEPLOY_TIMING,
        // error only: with 1,000 ingresses the controller logs a warning per event it
        // fails to record (see docs/benchmarks.md).
        "error",
        None,
    )
    .await?;
    let mut others: Vec<Proc> = Vec::new();
    let result = run(&args, &hub, &mut others).await;
    for proc in others {
        proc.stop().await;
    }
    hub.proc.stop().await;
    result
}

async fn run(args: &Args, hub: &DnsHub, others: &mut Vec<Proc>) -> anyhow::Result<()> {
    let n = args.ingresses;
    println!(
        "dns-bench {}: federation-apiserver pid {}, api {}, agent gateway {}, DNS {}",
        today(),
        hub.proc.pid,
        hub.api,
        hub.agent,
        hub.dns
    );

    let fleet = GeoFleet::create(hub, n).await?;

    // Query files.
    let dir = tempfile::tempdir()?;
    let wanted: Vec<&str> = args.files.split(',').map(str::trim).collect();
    let mut files = Vec::new();
    if wanted.contains(&"one") {
        let path = dir.path().join("one.txt");
        std::fs::write(&path, format!("{} A\n", name(0)))?;
        files.push(QueryFile {
            label: "one name, no EDNS",
            path,
            binary: false,
        });
    }
    if wanted.contains(&"names") {
        let path = dir.path().join("names.txt");
        let text: String = (0..n).map(|i| format!("{} A\n", name(i))).collect();
        std::fs::write(&path, text)?;
        files.push(QueryFile {
            label: "1,000 names, no EDNS",
            path,
            binary: false,
        });
    }
    if wanted.contains(&"ecs") {
        // dnsperf's -E adds one option to every query; per-query ECS needs its binary
        // input (-B): length-prefixed wire queries, ID overwritten by dnsperf. Entry k is
        // name k % n with ECS from region k % 3 (10.<1|2|3>.<k%256>.0/24): all 3n pairs.
        let path = dir.path().join("ecs.bin");
        let mut bytes = Vec::new();
        for k in 0..3 * n {
            let region = REGIONS[k % 3].1;
            let packet = Query::new(0, &name(k % n), TYPE_A)
                .edns(Some(region_client(region, k)))
                .encode();
            bytes.extend_from_slice(&(packet.len() as u16).to_be_bytes());
            bytes.extend_from_slice(&packet);
        }
        std::fs::write(&path, bytes)?;
        files.push(QueryFile {
            label: "1,000 names x ECS from 3 regions",
            path,
            binary: true,
        });
    }
    let file_labels: Vec<&str> = files.iter().map(|f| f.label).collect();
    if files.is_empty() {
        bail!("no query files selected (--files one,names,ecs)");
    }

    // Knot and PowerDNS.
    let mut servers: Vec<(&str, u16, u32)> = vec![("ours", hub.dns.port(), hub.proc.pid)];
    let _checks = check_listeners().await?;
    if !args.no_knot {
        let knot_dir = dir.path().join("knot");
        std::fs::create_dir_all(&knot_dir)?;
        let knot = start_knot(&knot_dir, n, KNOT_PORT, None)?;
        let pid = knot.pid;
        others.push(knot);
        let addr: SocketAddr = format!("127.0.0.1:{KNOT_PORT}").parse()?;
        wait_answers("knot", addr, n, false, false, Duration::from_secs(30)).await?;
        println!(
            "  knotd pid {pid} on {addr}: {}, static A records; dig {} A -> {}",
            knot_version(),
            name(n / 2),
            dig(addr, &[&name(n / 2), "A"])
        );
        servers.push(("knot", KNOT_PORT, pid));
    }
    if !args.no_pdns {
        let pdns_dir = dir.path().join("pdns");
        std::fs::create_dir_all(&pdns_dir)?;
        let pdns = start_pdns(&pdns_dir, n, &args.pdns_lua)?;
        let pid = pdns.pid;
        others.push(pdns);
        let addr: SocketAddr = format!("127.0.0.1:{PDNS_PORT}").parse()?;
        wait_answers("powerdns", addr, n, false, false, Duration::from_secs(30)).await?;
        println!(
            "  pdns_server pid {pid} on {addr}: LUA A \"ifportup({CHECK_PORT}, {{c1, c2, c3}})\", enable-lua-records={}, bind backend; dig {} A -> {}",
            args.pdns_lua,
            name(n / 2),
            dig(addr, &[&name(n / 2), "A"])
        );
        // ifportup's default selector is random: if the answers of one name vary, they are
        // computed per query (not served from the packet cache).
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
        let mut seen = std::collections::BTreeSet::new();
        for id in 0..30u16 {
            if let Ok(r) = ask(
                &socket,
                addr,
                &Query::new(id, &name(0), TYPE_A).encode(),
                Duration::from_secs(1),
            )
            .await
            {
                seen.extend(r.a);
            }
        }
        println!(
            "  30 queries for {}: {} distinct addresses {seen:?}",
            name(0),
            seen.len()
        );
        servers.push(("powerdns", PDNS_PORT, pid));
    }

    let extra: Vec<String> = args
        .dnsperf_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    println!(
        "dnsperf flags for every server: -s 127.0.0.1 -p PORT -d FILE -l {} {} (dnsperf defaults otherwise); {} rounds, servers interleaved",
        args.seconds,
        if extra.is_empty() {
            "(nothing else)".to_string()
        } else {
            extra.join(" ")
        },
        args.rounds
    );
    // results[(file, server)] = one Perf per round.
    let mut results: BTreeMap<(usize, usize), Vec<Perf>> = BTreeMap::new();
    for round in 0..args.rounds {
        for (f, file) in files.iter().enumerate() {
            for (s, (server, port, pid)) in servers.iter().enumerate() {
                let perf = dnsperf(file, *port, args.seconds, &extra, *pid).await?;
                println!(
                    "round {round} {:<34} {server:<9} {:>9.0} qps  latency avg {:.3} ms (min {:.3}, max {:.2}, sd {:.3})  (sent {}, lost {}, {}; packets {}; server CPU {:.0}%, dnsperf CPU {:.0}%)",
                    file.label,
                    perf.qps,
                    perf.avg_ms,
                    perf.min_ms,
                    perf.max_ms,
                    perf.stddev_ms,
                    perf.sent,
                    perf.lost,
                    perf.codes,
                    perf.sizes,
                    perf.server_cpu,
                    perf.client_cpu
                );
                if round == 0 && f == 0 && s == 0 {
                    println!("  e.g. {}", perf.command);
                }
                results.entry((f, s)).or_default().push(perf);
            }
        }
    }

    println!(
        "--- medians over {} rounds of {} s (2-core machine, shared and noisy) ---",
        args.rounds, args.seconds
    );
    for (f, label) in file_labels.iter().enumerate() {
        let mut qps = Vec::new();
        for (s, (server, _, _)) in servers.iter().enumerate() {
            let runs = &results[&(f, s)];
            let q = median(runs.iter().map(|p| p.qps).collect());
            qps.push(q);
            println!(
                "{label:<34} {server:<9} qps {q:>9.0} (runs {})  avg latency {:.3} ms  max latency {:.2} ms (max of runs {:.2})  server CPU {:.0}% = {:.2} µs CPU per query, dnsperf CPU {:.0}%",
                runs.iter()
                    .map(|p| format!("{:.0}", p.qps))
                    .collect::<Vec<_>>()
                    .join("/"),
                median(runs.iter().map(|p| p.avg_ms).collect()),
                median(runs.iter().map(|p| p.max_ms).collect()),
                runs.iter().map(|p| p.max_ms).fold(0.0, f64::max),
                median(runs.iter().map(|p| p.server_cpu).collect()),
                median(
                    runs.iter()
                        .map(|p| p.server_cpu / 100.0 / p.qps.max(1.0) * 1e6)
                        .collect()
                ),
                median(runs.iter().map(|p| p.client_cpu).collect())
            );
        }
        let ratio = |name: &str| {
            servers
                .iter()
                .position(|s| s.0 == name)
                .map(|i| format!("{:.2}x", qps[0] / qps[i]))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{label:<34} ratios: ours/knot {}, ours/powerdns {}",
            ratio("knot"),
            ratio("powerdns")
        );
    }
    // Latency at the same offered load for every server.
    if args.fixed_qps > 0
        && let Some(ecs) = files.iter().find(|f| f.binary)
    {
        let mut fixed = extra.clone();
        fixed.extend(["-Q".to_string(), args.fixed_qps.to_string()]);
        println!(
            "--- fixed rate: {} with -Q {} (same offered load for all) ---",
            ecs.label, args.fixed_qps
        );
        for (server, port, pid) in &servers {
            let perf = dnsperf(ecs, *port, args.seconds, &fixed, *pid).await?;
            println!(
                "fixed {:>6} qps {server:<9} achieved {:>7.0} qps  latency avg {:.3} ms (min {:.3}, max {:.2}, sd {:.3})  (lost {}, {}; server CPU {:.0}% = {:.2} µs per query; dnsperf CPU {:.0}%)",
                args.fixed_qps,
                perf.qps,
                perf.avg_ms,
                perf.min_ms,
                perf.max_ms,
                perf.stddev_ms,
                perf.lost,
                perf.codes,
                perf.server_cpu,
                perf.server_cpu / 100.0 / perf.qps.max(1.0) * 1e6,
                perf.client_cpu
            );
        }
    }
    println!("agents at the end: {}", fleet.agent_summary());
    Ok(())
}
