//! anycast-bench (`anycast-failover`): how fast a dead backend takes its site out of
//! BGP, in the anycast network of `fedingress_tests::anycast` (network namespaces: BIRD
//! as route reflector and router, two sites each with a release cluster-agent driving
//! its own gobgpd, a client routed by the router's FIB, the release hub).
//!
//! Two series of cycles (default 20 each): **idle**, where no client connects to site-a
//! until its route is gone (only the agent's active health checks see the dead
//! backend), and **busy**, where the client connects every `--poll-ms` from the kill
//! on (the agent's proxy fails to reach the backend, and failed proxied connects count
//! against the endpoint's health like failed checks). Per cycle, site-a's echo backend
//! is SIGKILLed at a different phase of the health check interval each time, and from
//! that instant three pollers run every `--poll-ms`:
//! - BIRD's RIB (its control socket): until site-a's path is gone → **route withdrawn**;
//! - the client (a thread inside its namespace): a new TCP connection to the anycast
//!   address until one is answered by site-b → **client on site-b**;
//! - the hub's DNS (a thread inside the router): the A records of a second ingress on
//!   the same backends with a unicast strategy (Failover site-a, then site-b) until
//!   they no longer hold site-a's address → **DNS moved**, and the gap DNS − BGP
//!   (positive: DNS later).
//!
//! Then the backend is restarted and the bench waits until everything is back (and
//! times the route's return). After the cycles, the peer in the same run: a plain BGP
//! withdrawal, `gobgp global rib del` run on site-a's speaker directly (no health check,
//! no agent) → the path gone at the router, the floor of pure BGP propagation; the
//! ratio compares the two medians.
//!
//! Run: `cargo build --release --workspace --bins && target/release/anycast-bench` as root with
//! bird2 and gobgpd installed (see docs/benchmarks.md). It prints numbers; it asserts
//! nothing.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::dnscommon;
use fedingress_bench::{sibling, today};
use fedingress_tests::anycast::{
    ANYCAST, ANYCAST_PREFIX, AnycastLab, Binaries, DNS, LabOptions, PORT, UNICAST_NAME, unavailable,
};
use fedingress_tests::bgp::BirdControl;
use fedingress_testsupport::Poll;
use fedingress_testsupport::dns::Query;

#[derive(Parser)]
#[command(about = "Backend death → anycast route withdrawn and client moved (real BGP)")]
struct Args {
    /// Kill/restore cycles of each series (idle, busy).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Plain BGP withdrawals (the floor) after the cycles.
    #[arg(long, default_value_t = 20)]
    floor_runs: usize,
    /// Agent health check `intervalMs` (and `timeoutMs`); unhealthy after 2 failures.
    #[arg(long, default_value_t = 200)]
    interval_ms: u64,
    /// Poll period of the RIB, the client and DNS, ms.
    #[arg(long, default_value_t = 10)]
    poll_ms: u64,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
    /// cluster-agent binary (default: next to this one).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// fedctl binary, the echo backends (default: next to this one).
    #[arg(long)]
    fedctl: Option<PathBuf>,
}

const LIMIT: Duration = Duration::from_secs(20);
/// Site-a's address, the next hop of its route and its DNS answer.
const SITE_A: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);

/// What one kill cycle measured, from the kill.
struct Cycle {
    route: Duration,
    client: Duration,
    dns: Duration,
    back: Duration,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(why) = unavailable() {
        bail!("cannot run: {why}");
    }
    let bins = Binaries {
        apiserver: sibling(args.apiserver.clone(), "federation-apiserver")?,
        agent: sibling(args.agent.clone(), "cluster-agent")?,
        fedctl: sibling(args.fedctl.clone(), "fedctl")?,
        kubectl: fedingress_tests::kubectl_path(None),
    };
    let options = LabOptions {
        unicast: true,
        health_interval_ms: args.interval_ms,
        withdraw_delay_ms: 1000,
        reflect: true,
    };
    println!(
        "anycast-bench {}: {} cycles, health checks every {} ms (unhealthy after 2), polls every {} ms",
        today(),
        args.runs,
        args.interval_ms,
        args.poll_ms
    );
    let mut lab = AnycastLab::start(bins, options)?;
    let poll = Duration::from_millis(args.poll_ms);
    let mut results = Vec::new();
    for busy in [false, true] {
        let mode = if busy { "busy" } else { "idle" };
        let mut cycles = Vec::new();
        for r in 0..args.runs {
            steady(&lab).with_context(|| format!("before {mode} cycle {r}"))?;
            // Kills fall at different phases of the check interval.
            std::thread::sleep(Duration::from_millis(
                300 + (73 * r as u64) % args.interval_ms.max(1),
            ));
            let cycle =
                kill_cycle(&mut lab, poll, busy).with_context(|| format!("{mode} cycle {r}"))?;
            println!(
                "{mode} {r:2}: route withdrawn {:7.1} ms, client on site-b {:7.1} ms, DNS moved {:7.1} ms (gap {:+7.1} ms), route back {:7.1} ms",
                millis(cycle.route),
                millis(cycle.client),
                millis(cycle.dns),
                millis(cycle.dns) - millis(cycle.route),
                millis(cycle.back),
            );
            cycles.push(cycle);
        }
        results.push((mode, cycles));
    }

    steady(&lab).context("before the plain withdrawals")?;
    let cli = cli_cost(&lab)?;
    let mut floor = Vec::new();
    for r in 0..args.floor_runs {
        let took = plain_withdrawal(&lab, poll).with_context(|| format!("plain withdrawal {r}"))?;
        println!("plain withdrawal {r:2}: {:7.1} ms", millis(took));
        floor.push(took);
    }
    let floor: Vec<f64> = floor.into_iter().map(millis).collect();
    let (floor_median, ..) = stats(&floor);

    for (mode, cycles) in &results {
        let column = |f: fn(&Cycle) -> f64| cycles.iter().map(f).collect::<Vec<f64>>();
        let route = column(|c| millis(c.route));
        println!();
        println!(
            "| {mode}: from the backend's death (n={}) | median | p90 | max |",
            cycles.len()
        );
        println!("|---|---|---|---|");
        for (label, values) in [
            ("route withdrawn at the router (BIRD's RIB)", &route),
            (
                "client's first answer from site-b",
                &column(|c| millis(c.client)),
            ),
            (
                "DNS (unicast ingress) stops answering site-a",
                &column(|c| millis(c.dns)),
            ),
            (
                "gap DNS − BGP (positive: DNS later)",
                &column(|c| millis(c.dns) - millis(c.route)),
            ),
            (
                "backend back → route back at the router",
                &column(|c| millis(c.back)),
            ),
        ] {
            let (median, p90, max) = stats(values);
            println!("| {label} | {median:.1} ms | {p90:.1} ms | {max:.1} ms |");
        }
        let (route_median, ..) = stats(&route);
        println!(
            "{mode}: route withdrawn / plain withdrawal (medians) = {:.1}× ({route_median:.1} / {floor_median:.1} ms)",
            route_median / floor_median.max(f64::EPSILON),
        );
    }
    let (median, p90, max) = stats(&floor);
    println!(
        "\nplain `gobgp global rib del` → withdrawn (the floor, n={}): median {median:.1} ms, p90 {p90:.1} ms, max {max:.1} ms; it includes starting the gobgp CLI, {:.1} ms for a read-only call",
        floor.len(),
        millis(cli)
    );
    Ok(())
}

/// Both paths in the RIB, the client on site-a, DNS answering site-a only.
fn steady(lab: &AnycastLab) -> anyhow::Result<()> {
    lab.wait_for_paths(&[true, true], LIMIT)?;
    let deadline = Instant::now() + LIMIT;
    loop {
        let client = lab.client_roundtrip("x").unwrap_or_default();
        let dns = dns_answer(lab).unwrap_or_default();
        if client == "site-a: x" && dns == [SITE_A] {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("not steady after {LIMIT:?}: client {client:?}, DNS {dns:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills site-a's backend and measures (see the module docs; `busy`: the client
/// connects from the kill on, not only once the route is gone); then restores it and
/// times the route's return.
fn kill_cycle(lab: &mut AnycastLab, poll: Duration, busy: bool) -> anyhow::Result<Cycle> {
    let socket = lab.bird().socket().to_owned();
    let mut bird = BirdControl::connect(&socket)?;
    let died = Instant::now();
    lab.kill_backend(0);
    let lab_ref = &*lab;
    let withdrawn = &AtomicBool::new(false);
    let (route, client, dns) = std::thread::scope(|scope| {
        let route = scope.spawn(move || {
            let took = until(died, poll, || site_a_gone(&mut bird));
            withdrawn.store(true, Ordering::Relaxed);
            took
        });
        let client = scope.spawn(move || {
            lab_ref.client.run_inside(|| {
                until(died, poll, || {
                    // Idle: no traffic reaches site-a's proxy (whose failed connects to
                    // the dead backend would count against its health at once).
                    if !busy && !withdrawn.load(Ordering::Relaxed) {
                        return Ok(false);
                    }
                    Ok(quick_roundtrip(SocketAddr::new(ANYCAST.into(), PORT))
                        .is_some_and(|a| a == "site-b: x"))
                })
            })
        });
        let dns = scope.spawn(move || {
            lab_ref.router.run_inside(|| {
                let socket = UdpSocket::bind("0.0.0.0:0")?;
                socket.set_read_timeout(Some(Duration::from_millis(200)))?;
                until(died, poll, || {
                    Ok(ask(&socket).is_ok_and(|a| !a.is_empty() && !a.contains(&SITE_A)))
                })
            })
        });
        (route.join(), client.join(), dns.join())
    });
    let route = route.map_err(|_| anyhow::anyhow!("the RIB poller panicked"))??;
    let client = client.map_err(|_| anyhow::anyhow!("the client panicked"))???;
    let dns = dns.map_err(|_| anyhow::anyhow!("the DNS poller panicked"))???;

    let restarted = Instant::now();
    lab.start_backend(0)?;
    let mut bird = BirdControl::connect(&socket)?;
    let back = until(restarted, poll, || Ok(!site_a_gone(&mut bird)?))?;
    Ok(Cycle {
        route,
        client,
        dns,
        back,
    })
}

/// Polls `done` every `poll` until it says yes, for up to [`LIMIT`] after `from`; the
/// time since `from` when it did. An error from `done` ends the wait at once.
fn until(
    from: Instant,
    poll: Duration,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Duration> {
    let mut failed = None;
    Poll::new(LIMIT.saturating_sub(from.elapsed()))
        .every(poll)
        .try_sync("done", || {
            done().unwrap_or_else(|e| {
                failed = Some(e);
                true
            })
        })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(from.elapsed()),
    }
}

fn site_a_gone(bird: &mut BirdControl) -> anyhow::Result<bool> {
    let routes = bird.routes(ANYCAST_PREFIX)?;
    Ok(!routes.iter().any(|r| r.next_hop == Some(SITE_A.into())))
}

/// One short-lived connection: `x` in, the answer line out; `None` on any failure
/// within 300 ms.
fn quick_roundtrip(addr: SocketAddr) -> Option<String> {
    use std::io::{BufRead, BufReader, Write};
    let timeout = Duration::from_millis(300);
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.write_all(b"x\n").ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    Some(line.trim_end().to_owned())
}

/// The A records the hub's DNS answers for the unicast ingress (asked from the router).
fn dns_answer(lab: &AnycastLab) -> anyhow::Result<Vec<Ipv4Addr>> {
    lab.router.run_inside(|| {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        ask(&socket)
    })?
}

fn ask(socket: &UdpSocket) -> anyhow::Result<Vec<Ipv4Addr>> {
    static NEXT_ID: AtomicU16 = AtomicU16::new(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    socket.send_to(
        &Query::new(id, UNICAST_NAME, dnscommon::TYPE_A).encode(),
        DNS,
    )?;
    let mut buffer = [0u8; 1500];
    loop {
        let (n, _) = socket.recv_from(&mut buffer)?;
        let response = dnscommon::parse(&buffer[..n])?;
        if response.id == id {
            return Ok(response.a);
        }
    }
}

/// `gobgp` (the CLI) on site-a's speaker with `args`; fails when it does.
fn gobgp(lab: &AnycastLab, args: &[&str]) -> anyhow::Result<()> {
    let out = lab.sites[0]
        .ns
        .command("gobgp")
        .args(["-u", "127.0.0.1", "-p", "50051"])
        .args(args)
        .output()
        .context("running gobgp")?;
    if !out.status.success() {
        bail!(
            "gobgp {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// How long a read-only `gobgp global` takes (starting the CLI, one call), median of 5.
fn cli_cost(lab: &AnycastLab) -> anyhow::Result<Duration> {
    let mut took = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        gobgp(lab, &["global"])?;
        took.push(started.elapsed());
    }
    took.sort();
    Ok(took[2])
}

/// `gobgp global rib del` of the anycast route on site-a's speaker → its path gone at
/// the router; then the route is added back the same way (with the agent's community)
/// and the bench waits until it is there.
fn plain_withdrawal(lab: &AnycastLab, poll: Duration) -> anyhow::Result<Duration> {
    let mut bird = lab.bird().control()?;
    let started = Instant::now();
    gobgp(lab, &["global", "rib", "del", ANYCAST_PREFIX, "-a", "ipv4"])?;
    let took = until(started, poll, || site_a_gone(&mut bird))?;
    let community = lab.sites[0].community.clone();
    gobgp(
        lab,
        &[
            "global",
            "rib",
            "add",
            ANYCAST_PREFIX,
            "nexthop",
            &SITE_A.to_string(),
            "community",
            &community,
            "-a",
            "ipv4",
        ],
    )?;
    until(Instant::now(), poll, || Ok(!site_a_gone(&mut bird)?))?;
    // Let the sessions settle before the next one.
    std::thread::sleep(Duration::from_millis(300));
    Ok(took)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median, p90 and max (nearest rank) of `values`.
fn stats(values: &[f64]) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |p: f64| sorted[(((sorted.len() - 1) as f64) * p).round() as usize];
    (at(0.5), at(0.9), at(1.0))
}
