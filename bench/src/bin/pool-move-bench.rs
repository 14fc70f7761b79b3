//! pool-move-bench: a share moved between IngressPools under load (issue 24, "Share move
//! under load"): failed connections (the goal is 0) and the connect time of clients
//! that follow DNS, during the move.
//!
//! The site is `fedingress_tests::pools::PoolSite` with the real hub: pools gold (h1,
//! h2) and silver (h3, h4) of one cluster, each with `capacity.connections`
//! (`--capacity`, default 20), DNS TTL 1 s. Per run, on a new site: four HTTP ingresses
//! with no `poolSelector`; of the pool holding at least two of them, A gets `wrk` with
//! 60 % of the capacity in keep-alive connections and B 40 % (`wrk -t1 -cN` at the
//! pool's VIP), so the pool is saturated and A, the most loaded, has to move. From the
//! start of the load, `--clients` threads in the client namespace each resolve A
//! through the hub's DNS and fetch `/` from the answer over a new connection, every
//! 10 ms, until DNS has answered the other pool's VIP for 10 s (the old pool's drain is
//! 5 s). Reported per run and over all runs: requests, failed requests, connect time
//! median / p99 / max, the time from the load's start to A's binding to the other pool
//! and to DNS answering it, and how many shares moved in all. A run whose share cannot
//! move is reported with both pools' load and left out of the totals.
//!
//! Run as root with keepalived and wrk installed: `cargo build --release --workspace
//! --bins && target/release/pool-move-bench` (see docs/benchmarks.md). It prints
//! numbers; it asserts nothing.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::{load_average, ms, percentile, today};
use fedingress_tests::pools::{
    self, ClientLoop, GOLD_VIP, Options, PoolSite, Programs, SILVER_VIP, wrk, wrk_installed,
};

#[derive(Parser)]
#[command(about = "A share moved between pools under load: failed connections and connect time")]
struct Args {
    /// Moves (each on a new site).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Client threads following DNS.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Both pools' `capacity.connections`.
    #[arg(long, default_value_t = 20)]
    capacity: u32,
    /// Directory of the product's binaries (default: this binary's own).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

const GIVE_UP: Duration = Duration::from_secs(90);
const AFTER_DNS: Duration = Duration::from_secs(10);

struct Run {
    requests: usize,
    failures: Vec<String>,
    connects: Vec<Duration>,
    bound_after: Duration,
    dns_after: Duration,
    moved: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(why) = PoolSite::unavailable() {
        bail!("pool-move-bench cannot run here: {why}");
    }
    if !wrk_installed() {
        bail!("pool-move-bench needs wrk (Debian: apt-get install wrk)");
    }
    let dir = match args.bin_dir.clone() {
        Some(dir) => dir,
        None => std::env::current_exe()?
            .parent()
            .context("the bench binary has a directory")?
            .to_path_buf(),
    };
    let programs = Programs::in_dir(&dir);
    for program in [
        &programs.apiserver,
        &programs.cluster_agent,
        &programs.fedctl,
    ] {
        if !program.exists() {
            bail!(
                "{} not found: run `cargo build --release --workspace --bins` first (or pass --bin-dir)",
                program.display()
            );
        }
    }
    println!(
        "pool-move-bench {} — {} moves, {} clients, capacity {} connections, load {}",
        today(),
        args.runs,
        args.clients,
        args.capacity,
        load_average()
    );
    let mut all = Vec::new();
    for run in 0..args.runs {
        println!("run {run}: load {}", load_average());
        // A run whose share cannot move (every pool saturated, e.g. by the host's cpu,
        // which every member on this one machine reports) is reported and left out.
        let result = match one_move(&args, programs.clone()) {
            Ok(result) => result,
            Err(error) => {
                println!("run {run}: no move: {error}");
                continue;
            }
        };
        let mut sorted = result.connects.clone();
        sorted.sort();
        println!(
            "run {run}: {} requests, {} failed, connect median {} p99 {} max {}, bound after {}, DNS after {}, {} shares moved{}",
            result.requests,
            result.failures.len(),
            ms(percentile(&sorted, 0.5)),
            ms(percentile(&sorted, 0.99)),
            ms(sorted.last().copied().unwrap_or_default()),
            ms(result.bound_after),
            ms(result.dns_after),
            result.moved,
            if result.failures.is_empty() {
                String::new()
            } else {
                format!(": {:?}", &result.failures[..result.failures.len().min(5)])
            }
        );
        all.push(result);
    }
    let requests: usize = all.iter().map(|r| r.requests).sum();
    let failed: usize = all.iter().map(|r| r.failures.len()).sum();
    let mut connects: Vec<Duration> = all.iter().flat_map(|r| r.connects.clone()).collect();
    connects.sort();
    let mut bound: Vec<Duration> = all.iter().map(|r| r.bound_after).collect();
    bound.sort();
    let mut dns: Vec<Duration> = all.iter().map(|r| r.dns_after).collect();
    dns.sort();
    println!();
    println!(
        "| moves | requests | failed | connect median | connect p99 | connect max | load → bound (median) | load → DNS moved (median) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {requests} | {failed} | {} | {} | {} | {} | {} |",
        all.len(),
        ms(percentile(&connects, 0.5)),
        ms(percentile(&connects, 0.99)),
        ms(connects.last().copied().unwrap_or_default()),
        ms(percentile(&bound, 0.5)),
        ms(percentile(&dns, 0.5)),
    );
    Ok(())
}

fn pool_of(site: &PoolSite, name: &str) -> anyhow::Result<Option<String>> {
    let ingress = site.ingress(name)?;
    Ok(ingress["status"]["clusters"]
        .as_array()
        .and_then(|c| c.iter().find(|e| e["name"] == pools::CLUSTER))
        .and_then(|e| e["pool"].as_str())
        .map(str::to_owned))
}

fn one_move(args: &Args, programs: Programs) -> anyhow::Result<Run> {
    let options = Options {
        capacity_connections: Some(args.capacity),
        ..Options::default()
    };
    let site = PoolSite::start("pmove", programs, options)?;
    let names: Vec<String> = (1..=4).map(|i| format!("m{i}")).collect();
    for name in &names {
        site.create_ingress(name, None)?;
    }
    let since = Instant::now();
    let bound: Vec<String> = loop {
        let pools: Vec<Option<String>> = names
            .iter()
            .map(|n| pool_of(&site, n))
            .collect::<anyhow::Result<_>>()?;
        if pools.iter().all(Option::is_some) {
            break pools.into_iter().flatten().collect();
        }
        if since.elapsed() > GIVE_UP {
            bail!("not every ingress bound: {pools:?}{}", site.logs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let on = |pool: &str| -> Vec<&String> {
        names
            .iter()
            .zip(&bound)
            .filter(|(_, p)| *p == pool)
            .map(|(n, _)| n)
            .collect()
    };
    let (from, to, from_vip, to_vip) = if on("gold").len() >= 2 {
        ("gold", "silver", GOLD_VIP, SILVER_VIP)
    } else {
        ("silver", "gold", SILVER_VIP, GOLD_VIP)
    };
    let (a, b) = (on(from)[0].clone(), on(from)[1].clone());
    // Let the members report the ingresses healthy before the load.
    std::thread::sleep(Duration::from_secs(2));
    let clients = ClientLoop::start(&site, &a, args.clients, Duration::ZERO)?;
    let heavy = (args.capacity * 6).div_ceil(10);
    let light = args.capacity - heavy;
    let load_a = wrk(&site, &a, heavy, from_vip, 300)?;
    let load_b = wrk(&site, &b, light.max(1), from_vip, 300)?;
    let started = Instant::now();
    let bound_after = loop {
        if pool_of(&site, &a)?.as_deref() == Some(to) {
            break started.elapsed();
        }
        if started.elapsed() > GIVE_UP {
            bail!(
                "{a} did not leave {from} within {GIVE_UP:?}: {from}'s load {}, {to}'s {}",
                site.pool(from)?["status"]["load"],
                site.pool(to)?["status"]["load"]
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dns_after = loop {
        if clients.answers().last() == Some(&IpAddr::V4(to_vip)) {
            break started.elapsed();
        }
        if started.elapsed() > GIVE_UP {
            bail!(
                "DNS never answered {to} for {a}: {:?}{}",
                clients.answers(),
                site.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(AFTER_DNS);
    let report = clients.finish()?;
    load_a.kill9();
    load_b.kill9();
    let after: Vec<Option<String>> = names
        .iter()
        .map(|n| pool_of(&site, n))
        .collect::<anyhow::Result<_>>()?;
    let moved = bound
        .iter()
        .zip(&after)
        .filter(|(before, after)| after.as_deref() != Some(before.as_str()))
        .count();
    Ok(Run {
        requests: report.ok + report.failures.len(),
        failures: report.failures,
        connects: report.connect_times,
        bound_after,
        dns_after,
        moved,
    })
}
