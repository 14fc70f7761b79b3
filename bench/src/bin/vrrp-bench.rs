//! vrrp-bench: how long after a host dies a client reconnects to the virtual IP it
//! shared with another host through keepalived (VRRPv3), with the agent running
//! keepalived (readiness as the track script) and, in the same run as the peer, plain
//! keepalived with a plain TCP echo server and no agent; and (issue 24) with the agents
//! as pool members of a real hub: the VRRP group, its VIP, priorities and peers from the
//! hub's plan (`fedingress_tests::pools::PoolSite`: pool gold = h1, h2; the hub and its
//! sessions up throughout; `--no-pool` leaves this mode out).
//!
//! The site is `fedingress_tests::vrrp::Site`: network namespaces `host-a` (priority
//! 150), `host-b` (100) and `client` on one bridge. Per cycle: host-a holds the VIP and
//! answers; its cable is pulled and every process inside SIGKILLed (t0); the client
//! reconnects every few milliseconds (a new connection each time, 50 ms to connect and
//! 50 ms for the answer) until host-b answers one line (t1); then host-a is revived and
//! takes the VIP back (preemption) before the next cycle. Reported: t1 − t0, median and
//! p90, per mode, and the agent's ratio to keepalived alone.
//!
//! Chain measured: host-b's VRRP master-down timer (3 × advertisement interval + skew
//! time, (256 − priority) / 256 of an interval) → keepalived adds the VIP and sends
//! gratuitous ARP → the client's next SYN goes to host-b → (agent mode) host-b's agent
//! accepts on the wildcard address and proxies to its backend → the answer.
//!
//! Pool mode: the same cycle on `PoolSite` (h1 holds gold's VIP 10.0.0.97; the probe is
//! one HTTP request to VIP:8080 for an ingress bound to gold, answered by h1 or h2; h1
//! dies as host-a does; revived, it connects to the hub again and takes the VIP back).
//! The advertisement interval is the same; the pool's health is tracked the same way.
//!
//! Run as root with keepalived installed: `cargo build --release --workspace --bins &&
//! target/release/vrrp-bench` (see docs/benchmarks.md). It prints numbers; it asserts
//! nothing.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::{load_average, ms, percentile, today};
use fedingress_tests::pools::{self, PoolSite};
use fedingress_tests::vrrp::{Mode, PROBE_TIMEOUT, Programs, Site};

#[derive(Parser)]
#[command(
    about = "Host death → client reconnected to the VIP: agent + keepalived vs keepalived alone"
)]
struct Args {
    /// Host deaths per mode.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// VRRP advertisement interval (the agent's `vrrp.advertIntervalMs`), both modes.
    #[arg(long, default_value_t = 100)]
    advert_interval_ms: u32,
    /// Directory of `cluster-agent`, `fedctl` and `federation-apiserver` (default: this
    /// binary's own).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Leave out the pool mode (agents as pool members of a real hub).
    #[arg(long)]
    no_pool: bool,
}

/// How long one failover or one recovery may take before the run gives up.
const GIVE_UP: Duration = Duration::from_secs(30);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(why) = Site::unavailable() {
        bail!("vrrp-bench cannot run here: {why}");
    }
    let dir = match args.bin_dir.clone() {
        Some(dir) => dir,
        None => std::env::current_exe()?
            .parent()
            .context("the bench binary has a directory")?
            .to_path_buf(),
    };
    let programs = Programs::in_dir(&dir);
    for program in [&programs.cluster_agent, &programs.fedctl] {
        if !program.exists() {
            bail!(
                "{} not found: run `cargo build --release --workspace --bins` first (or pass --bin-dir)",
                program.display()
            );
        }
    }
    println!(
        "vrrp-bench {} — {} host deaths per mode, advertIntervalMs {}, load {}",
        today(),
        args.runs,
        args.advert_interval_ms,
        load_average()
    );
    let mut results = Vec::new();
    for (label, mode, tag) in [
        ("keepalived alone", Mode::KeepalivedAlone, "vrrpb-alone"),
        ("agent + keepalived", Mode::Agent, "vrrpb-agent"),
    ] {
        let times =
            cycles(tag, mode, &args, &programs).with_context(|| format!("measuring {label}"))?;
        println!("{label:>20}: {}", line(&times));
        results.push((label, times));
    }
    if !args.no_pool {
        let label = "pool member of a hub";
        let times = pool_cycles(&args, &dir).with_context(|| format!("measuring {label}"))?;
        println!("{label:>20}: {}", line(&times));
        results.push((label, times));
    }
    let quantiles = |times: &[Duration]| {
        let mut sorted = times.to_vec();
        sorted.sort();
        (percentile(&sorted, 0.5), percentile(&sorted, 0.9))
    };
    println!();
    println!("| host death → client reconnected | median | p90 | max |");
    println!("|---|---|---|---|");
    for (label, times) in &results {
        let (median, p90) = quantiles(times);
        let max = times.iter().max().copied().unwrap_or_default();
        println!("| {label} | {} | {} | {} |", ms(median), ms(p90), ms(max));
    }
    if let [(_, alone), rest @ ..] = results.as_slice() {
        let (alone_median, alone_p90) = quantiles(alone);
        for (label, times) in rest {
            let (median, p90) = quantiles(times);
            println!(
                "| {label} / alone | {:.2}× | {:.2}× | |",
                median.as_secs_f64() / alone_median.as_secs_f64().max(1e-9),
                p90.as_secs_f64() / alone_p90.as_secs_f64().max(1e-9)
            );
        }
    }
    Ok(())
}

/// `runs` host deaths on one site in `mode`: kill → reconnect each.
fn cycles(
    tag: &str,
    mode: Mode,
    args: &Args,
    programs: &Programs,
) -> anyhow::Result<Vec<Duration>> {
    let mut site = Site::start(tag, mode, args.advert_interval_ms, programs.clone())?;
    let mut times = Vec::with_capacity(args.runs);
    for run in 0..args.runs {
        site.wait_for_holder("host-a", GIVE_UP)?;
        site.until_answered_by("host-a", Instant::now(), GIVE_UP)?;
        let since = Instant::now();
        site.kill_host("host-a")?;
        let took = site
            .until_answered_by("host-b", since, GIVE_UP)
            .with_context(|| format!("run {run}"))?;
        times.push(took);
        site.revive_host("host-a")?;
    }
    Ok(times)
}

/// `runs` deaths of h1, gold's VIP holder, on a [`PoolSite`] run by a real hub: kill →
/// an HTTP request through gold's VIP answered by h2.
fn pool_cycles(args: &Args, dir: &Path) -> anyhow::Result<Vec<Duration>> {
    let programs = pools::Programs::in_dir(dir);
    if !programs.apiserver.exists() {
        bail!(
            "{} not found: run `cargo build --release --workspace --bins` first (or pass --bin-dir, or --no-pool)",
            programs.apiserver.display()
        );
    }
    let options = pools::Options {
        capacity_connections: None,
        advert_interval_ms: args.advert_interval_ms,
        ttl: 1,
    };
    let mut site = PoolSite::start("vrrpb-pool", programs, options)?;
    site.create_ingress("web", Some(("tier", "gold")))?;
    let vip = SocketAddr::new(IpAddr::V4(pools::GOLD_VIP), pools::HTTP_PORT);
    let host = pools::dns_name("web");
    let probe = |site: &PoolSite| -> Result<String, String> {
        let host = host.clone();
        site.ns("client")
            .run_inside(move || pools::http_get(vip, &host, PROBE_TIMEOUT))
            .map_err(|e| format!("{e:#}"))?
            .map(|body| body.split(':').next().unwrap_or_default().to_owned())
    };
    let answered_by = |site: &PoolSite, who: &str, since: Instant| -> anyhow::Result<Duration> {
        let mut last = String::new();
        while since.elapsed() < GIVE_UP {
            match probe(site) {
                Ok(answer) if answer == who => return Ok(since.elapsed()),
                Ok(answer) => last = format!("answered by {answer}"),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        bail!(
            "{who} did not answer within {GIVE_UP:?} (last: {last}){}",
            site.logs()
        )
    };
    let mut times = Vec::with_capacity(args.runs);
    for run in 0..args.runs {
        // h1 holds the VIP, the hub knows it, and serves the ingress on it.
        let since = Instant::now();
        loop {
            let pool = site.pool("gold")?;
            if site.holders(pools::GOLD_VIP) == ["h1"]
                && pool["status"]["vipHolder"] == "h1"
                && pool["status"]["readyMembers"] == 2
            {
                break;
            }
            if since.elapsed() > GIVE_UP {
                bail!(
                    "run {run}: h1 does not hold gold: {}{}",
                    pool["status"],
                    site.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        answered_by(&site, "h1", Instant::now())?;
        let since = Instant::now();
        site.kill_host("h1")?;
        let took = answered_by(&site, "h2", since).with_context(|| format!("run {run}"))?;
        times.push(took);
        site.revive_host("h1")?;
    }
    Ok(times)
}

/// `median X, p90 Y (n)` of unsorted durations.
fn line(times: &[Duration]) -> String {
    let mut sorted = times.to_vec();
    sorted.sort();
    format!(
        "median {}, p90 {}, min {}, max {} (n={})",
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.9)),
        ms(sorted.first().copied().unwrap_or_default()),
        ms(sorted.last().copied().unwrap_or_default()),
        sorted.len()
    )
}
