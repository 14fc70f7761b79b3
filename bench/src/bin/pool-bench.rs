//! pool-bench: the pool scheduler (`fedingress_api::pool::schedule`, issue 24) at scale,
//! in-process: how long binding 10,000 new shares onto 1,000 pools takes, and how even
//! the load per pool comes out under a skewed (Zipf) load, against count-only
//! round-robin binding measured in the same run.
//!
//! Time: wall time per call (median of `--runs`), and CPU time per share from the
//! process's utime + stime in `/proc/self/stat` over all runs (clock ticks, 10 ms: hence
//! many runs; the bench is one thread). The peer is count-only round-robin binding of
//! the same shares into the same output (a key and a pool name per share).
//!
//! Balance: every share gets an rps load drawn from a Zipf distribution (weight of rank
//! k = k^−s, ranks shuffled over the shares), scaled so that the pools are on average
//! `--mean-utilization` full; every pool has the same rps capacity. Per binding, the load
//! per pool is summed and reported as max/min, max/mean, and max over the best possible
//! maximum (no binding can do better than the larger of the biggest share and the mean).
//! Ours is run the ways the hub would: all shares in one call with their loads known; as
//! they arrive, `--batch` new shares per call; and bound with no load known (a new
//! ingress has reported nothing), then measured loads fed back for `--rounds` calls with
//! the default policy (at most 10 moves per call) and with 100 moves per call.
//!
//! Run: `cargo build --release -p fedingress-bench --bin pool-bench &&
//! target/release/pool-bench` (see docs/benchmarks.md). It prints numbers; it asserts
//! nothing.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use clap::Parser;
use fedingress_api::plan::IngressKey;
use fedingress_api::pool::schedule::{
    Binding, Capacity, Decision, Load, Policy, PoolInput, ShareInput, schedule,
};
use fedingress_api::selector::LabelSelector;
use fedingress_bench::{clock_ticks, cpu_ticks, load_average, ms, percentile, today};

#[derive(Parser)]
#[command(about = "The pool scheduler: bind time and balance under skewed load vs round-robin")]
struct Args {
    #[arg(long, default_value_t = 1_000)]
    pools: usize,
    #[arg(long, default_value_t = 10_000)]
    shares: usize,
    /// Timed calls per scenario.
    #[arg(long, default_value_t = 25)]
    runs: usize,
    /// Zipf exponent of the per-share load.
    #[arg(long, default_value_t = 1.1)]
    zipf: f64,
    /// Total load as a fraction of the total capacity.
    #[arg(long, default_value_t = 0.5)]
    mean_utilization: f64,
    /// Feedback calls after binding with no load known.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// New shares per call when binding them as they arrive.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Capacity of every pool, rps (a nominal unit: only ratios matter).
const CAPACITY: f64 = 1_000.0;

/// xorshift64*: deterministic, so two runs draw the same loads.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The pools and shares of one run.
struct World {
    names: Vec<String>,
    index: HashMap<String, usize>,
    /// Even pools `tier=gold`, odd ones `tier=silver`.
    labels: Vec<BTreeMap<String, String>>,
    keys: Vec<IngressKey>,
    /// Per share, rps.
    loads: Vec<f64>,
}

impl World {
    fn new(args: &Args) -> Self {
        let names: Vec<String> = (0..args.pools).map(|i| format!("pool-{i:04}")).collect();
        let index = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let labels = (0..args.pools)
            .map(|i| {
                let tier = if i % 2 == 0 { "gold" } else { "silver" };
                BTreeMap::from([("tier".to_string(), tier.to_string())])
            })
            .collect();
        let keys = (0..args.shares)
            .map(|i| IngressKey::new("bench", format!("ing-{i:05}")))
            .collect();
        // Zipf weights by rank, ranks shuffled over the shares (Fisher-Yates).
        let mut rng = Rng(args.seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut ranks: Vec<usize> = (1..=args.shares).collect();
        for i in (1..ranks.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            ranks.swap(i, j);
        }
        let weights: Vec<f64> = ranks.iter().map(|k| (*k as f64).powf(-args.zipf)).collect();
        let total: f64 = weights.iter().sum();
        let target = args.pools as f64 * CAPACITY * args.mean_utilization;
        let loads = weights.iter().map(|w| w / total * target).collect();
        Self {
            names,
            index,
            labels,
            keys,
            loads,
        }
    }

    fn pool_inputs(&self, loads: &[f64]) -> Vec<PoolInput<'_>> {
        self.names
            .iter()
            .zip(&self.labels)
            .zip(loads)
            .map(|((name, labels), load)| PoolInput {
                name,
                labels,
                ready: true,
                capacity: Capacity {
                    rps: Some(CAPACITY),
                    ..Capacity::default()
                },
                load: rps(*load),
                draining: false,
            })
            .collect()
    }

    /// Shares `0..count`, on the pools of `assigned`, with their loads if `known`.
    fn share_inputs<'a>(
        &'a self,
        assigned: &[Option<usize>],
        count: usize,
        known: bool,
        selector: Option<&'a LabelSelector>,
    ) -> Vec<ShareInput<'a>> {
        (0..count)
            .map(|i| ShareInput {
                key: &self.keys[i],
                selector,
                current: assigned[i].map(|p| self.names[p].as_str()),
                load: if known {
                    rps(self.loads[i])
                } else {
                    Load::ZERO
                },
            })
            .collect()
    }

    /// Load per pool of an assignment.
    fn per_pool(&self, assigned: &[Option<usize>]) -> Vec<f64> {
        let mut loads = vec![0.0; self.names.len()];
        for (share, pool) in assigned.iter().enumerate() {
            if let Some(p) = pool {
                loads[*p] += self.loads[share];
            }
        }
        loads
    }

    /// Applies bindings; returns the number of moves.
    fn apply(&self, assigned: &mut [Option<usize>], bindings: &[Binding]) -> usize {
        let mut moves = 0;
        for (i, binding) in bindings.iter().enumerate() {
            if matches!(binding.decision, Decision::Moved { .. }) {
                moves += 1;
            }
            assigned[i] = binding
                .pool
                .as_ref()
                .and_then(|name| self.index.get(name).copied());
        }
        moves
    }
}

fn rps(value: f64) -> Load {
    Load {
        rps: value,
        ..Load::ZERO
    }
}

/// Runs `call` `runs` times: wall time of each, and process CPU seconds over all.
fn timed(runs: usize, mut call: impl FnMut() -> usize) -> (Vec<Duration>, f64) {
    let pid = std::process::id();
    let hz = clock_ticks();
    let mut times = Vec::with_capacity(runs);
    let mut sink = 0;
    let cpu_before = cpu_ticks(pid).unwrap_or(0);
    for _ in 0..runs {
        let started = Instant::now();
        sink += call();
        times.push(started.elapsed());
    }
    let cpu_after = cpu_ticks(pid).unwrap_or(cpu_before);
    std::hint::black_box(sink);
    (times, cpu_after.saturating_sub(cpu_before) as f64 / hz)
}

/// Load per pool, summarized.
struct Balance {
    max: f64,
    min: f64,
    mean: f64,
    p10: f64,
    p90: f64,
    /// Pools at or above the default `saturated_at` (0.9 of capacity).
    saturated: usize,
    /// Load above capacity, summed over the pools.
    overload: f64,
}

impl Balance {
    fn of(loads: &[f64]) -> Self {
        let mut sorted = loads.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        Self {
            max: at(1.0),
            min: at(0.0),
            mean: loads.iter().sum::<f64>() / loads.len() as f64,
            p10: at(0.1),
            p90: at(0.9),
            saturated: loads.iter().filter(|l| **l >= 0.9 * CAPACITY).count(),
            overload: loads.iter().map(|l| (l - CAPACITY).max(0.0)).sum(),
        }
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b <= 0.0 {
        "∞".to_string()
    } else {
        format!("{:.2}", a / b)
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.pools > 0 && args.shares > 0,
        "--pools and --shares must be > 0"
    );
    let world = World::new(&args);
    let n = args.shares;
    println!(
        "pool-bench {} — {} shares onto {} pools, {} runs, Zipf s = {}, mean utilization {}, load {}",
        today(),
        n,
        args.pools,
        args.runs,
        args.zipf,
        args.mean_utilization,
        load_average()
    );
    let policy = Policy::default();
    let nowhere = vec![None; n];
    let empty = vec![0.0; args.pools];

    // --- time ---------------------------------------------------------------------------
    let gold = LabelSelector::from_labels([("tier", "gold")]);
    let mut rows: Vec<(&str, Vec<Duration>, f64)> = Vec::new();
    let (times, cpu) = timed(args.runs, || {
        let pools = world.pool_inputs(&empty);
        let shares = world.share_inputs(&nowhere, n, false, None);
        schedule(&pools, &shares, &policy).len()
    });
    rows.push(("ours: new shares, no load known", times, cpu));
    let (times, cpu) = timed(args.runs, || {
        let pools = world.pool_inputs(&empty);
        let shares = world.share_inputs(&nowhere, n, true, None);
        schedule(&pools, &shares, &policy).len()
    });
    rows.push(("ours: new shares, Zipf loads known", times, cpu));
    let (times, cpu) = timed(args.runs, || {
        let pools = world.pool_inputs(&empty);
        let shares = world.share_inputs(&nowhere, n, true, Some(&gold));
        schedule(&pools, &shares, &policy).len()
    });
    rows.push((
        "ours: new shares, Zipf, poolSelector (half the pools)",
        times,
        cpu,
    ));
    // Steady state: every share bound (load-aware), loads measured; nothing to do.
    let mut settled = nowhere.clone();
    {
        let pools = world.pool_inputs(&empty);
        let shares = world.share_inputs(&nowhere, n, true, None);
        world.apply(&mut settled, &schedule(&pools, &shares, &policy));
    }
    let settled_loads = world.per_pool(&settled);
    let mut steady_moves = 0;
    let (times, cpu) = timed(args.runs, || {
        let pools = world.pool_inputs(&settled_loads);
        let shares = world.share_inputs(&settled, n, true, None);
        let bindings = schedule(&pools, &shares, &policy);
        steady_moves = bindings
            .iter()
            .filter(|b| matches!(b.decision, Decision::Moved { .. }))
            .count();
        bindings.len()
    });
    rows.push(("ours: re-run, all bound, loads measured", times, cpu));
    let (times, cpu) = timed(args.runs, || {
        // The peer: count-only round-robin into the same output.
        let bindings: Vec<(IngressKey, String)> = (0..n)
            .map(|i| (world.keys[i].clone(), world.names[i % args.pools].clone()))
            .collect();
        bindings.len()
    });
    rows.push(("peer: count-only round-robin", times, cpu));

    let peer_median = {
        let mut sorted = rows[rows.len() - 1].1.clone();
        sorted.sort();
        percentile(&sorted, 0.5)
    };
    println!();
    println!(
        "| {n} shares onto {} pools, one call | median | min | max | CPU per share | median / round-robin |",
        args.pools
    );
    println!("|---|---|---|---|---|---|");
    for (label, times, cpu) in &rows {
        let mut sorted = times.clone();
        sorted.sort();
        let median = percentile(&sorted, 0.5);
        println!(
            "| {label} | {} | {} | {} | {:.2} µs | {:.1}× |",
            ms(median),
            ms(sorted[0]),
            ms(sorted[sorted.len() - 1]),
            cpu / (args.runs * n) as f64 * 1e6,
            median.as_secs_f64() / peer_median.as_secs_f64().max(1e-12)
        );
    }
    println!("(re-run moved {steady_moves} shares)");

    // --- balance ------------------------------------------------------------------------
    let total: f64 = world.loads.iter().sum();
    let biggest = world.loads.iter().copied().fold(0.0, f64::max);
    let mean = total / args.pools as f64;
    let best_max = biggest.max(mean);
    // A share above a pool's capacity overloads whichever pool it is on.
    let unavoidable: f64 = world.loads.iter().map(|l| (l - CAPACITY).max(0.0)).sum();
    let above = world.loads.iter().filter(|l| **l >= 0.9 * CAPACITY).count();
    println!();
    println!(
        "Zipf s = {}: biggest share {:.0} rps = {:.1}× a pool's capacity ({CAPACITY} rps), mean per pool {:.0} rps: no binding has a max below {:.0} rps; {above} shares are ≥ 90 % of a pool alone; unavoidable overload {:.1} % of the load",
        args.zipf,
        biggest,
        biggest / CAPACITY,
        mean,
        best_max,
        unavoidable / total * 100.0
    );
    println!();
    println!(
        "| binding | max/min | max/mean | max/best possible | p90/p10 | pools ≥ 90 % | overload beyond the unavoidable | calls | moves |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let row = |label: &str, assigned: &[Option<usize>], calls: usize, moves: usize| {
        let balance = Balance::of(&world.per_pool(assigned));
        println!(
            "| {label} | {} | {} | {} | {} | {} | {:.1} % | {calls} | {moves} |",
            ratio(balance.max, balance.min),
            ratio(balance.max, balance.mean),
            ratio(balance.max, best_max),
            ratio(balance.p90, balance.p10),
            balance.saturated,
            (balance.overload - unavoidable).max(0.0) / total * 100.0
        );
    };

    // The peer.
    let round_robin: Vec<Option<usize>> = (0..n).map(|i| Some(i % args.pools)).collect();
    row("peer: count-only round-robin", &round_robin, 1, 0);

    // Ours, one call, loads known.
    row("ours: one call, loads known", &settled, 1, 0);

    // Ours, as shares arrive, `batch` per call, loads known.
    let mut arriving = nowhere.clone();
    let mut calls = 0;
    let mut moves = 0;
    let mut count = 0;
    while count < n {
        count = (count + args.batch.max(1)).min(n);
        let pools = world.pool_inputs(&world.per_pool(&arriving));
        let shares = world.share_inputs(&arriving, count, true, None);
        moves += world.apply(&mut arriving, &schedule(&pools, &shares, &policy));
        calls += 1;
    }
    row(
        &format!("ours: {} per call as they arrive, loads known", args.batch),
        &arriving,
        calls,
        moves,
    );

    // Ours, no load known at first, then measured loads fed back.
    let mut unknown = nowhere.clone();
    {
        let pools = world.pool_inputs(&empty);
        let shares = world.share_inputs(&nowhere, n, false, None);
        world.apply(&mut unknown, &schedule(&pools, &shares, &policy));
    }
    row("ours: one call, no load known", &unknown, 1, 0);
    let mut lasts = Vec::new();
    for max_moves in [policy.max_moves, 100] {
        let policy = Policy {
            max_moves,
            ..policy
        };
        let mut assigned = unknown.clone();
        let mut moves = 0;
        let mut last = 0;
        for round in 1..=args.rounds {
            let pools = world.pool_inputs(&world.per_pool(&assigned));
            let shares = world.share_inputs(&assigned, n, true, None);
            last = world.apply(&mut assigned, &schedule(&pools, &shares, &policy));
            moves += last;
            if round == 1 || round == args.rounds {
                row(
                    &format!(
                        "ours: no load known, then {round} feedback call{} (max_moves {max_moves})",
                        if round == 1 { "" } else { "s" }
                    ),
                    &assigned,
                    round + 1,
                    moves,
                );
            }
        }
        lasts.push(format!("max_moves {max_moves}: {last}"));
    }
    println!("(moves in the last feedback call: {})", lasts.join(", "));
    Ok(())
}
