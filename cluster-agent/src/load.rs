//! What the agent measures of its own load for its reports (issue 24): the CPU of the
//! agent process and of the host, and the rate of a byte counter (the standalone data
//! plane's bytes both ways), each over the interval between two reports.
//!
//! - `process_cpu`: the process's CPU time (`utime + stime` of `/proc/self/stat`) per
//!   second of wall time, divided by the cores ([`std::thread::available_parallelism`]),
//!   0-1.
//! - `host_cpu`: from the aggregate `cpu` line of `/proc/stat`, 1 - (idle + iowait) /
//!   total over the interval, 0-1.
//! - bytes per second: the difference of a monotonic byte counter over the interval.
//!
//! The parsing and the arithmetic are pure functions ([`process_ticks`], [`host_ticks`],
//! [`process_cpu`], [`host_cpu`]); [`CpuMeter`] and [`RateMeter`] do the reading and
//! keep the previous sample. A sample younger than [`MIN_INTERVAL`] is not taken: the
//! figures of the previous one stand (a report right after another would otherwise
//! measure a few clock ticks). Off Linux (no `/proc`) both CPU figures are 0.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The shortest interval a figure is measured over.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Clock ticks per second of `/proc`'s CPU times: `USER_HZ`, which Linux fixes at 100
/// for user space on every architecture it exports these files on.
const TICKS_PER_SECOND: f64 = 100.0;

/// `utime + stime` (clock ticks) from the text of `/proc/<pid>/stat`. The command name
/// (field 2, in parentheses) may hold spaces and parentheses, so the fields are counted
/// from its last `)`.
pub fn process_ticks(stat: &str) -> Option<u64> {
    let (_, after) = stat.rsplit_once(')')?;
    // After the name: state (field 3) ... utime (14), stime (15).
    let mut fields = after.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The host's CPU time (clock ticks) from `/proc/stat`'s aggregate `cpu` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTicks {
    /// idle + iowait.
    pub idle: u64,
    /// user + nice + system + idle + iowait + irq + softirq + steal (guest time is
    /// already in user and nice).
    pub total: u64,
}

/// The aggregate `cpu` line of the text of `/proc/stat`.
pub fn host_ticks(stat: &str) -> Option<HostTicks> {
    let line = stat
        .lines()
        .find(|line| line.split_ascii_whitespace().next() == Some("cpu"))?;
    let values: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // Kernels since 2.6.11 have at least these eight; iowait and later default to 0.
    let at = |i: usize| values.get(i).copied().unwrap_or(0);
    if values.len() < 4 {
        return None;
    }
    Some(HostTicks {
        idle: at(3) + at(4),
        total: values.iter().sum(),
    })
}

/// The process's share of the host's cores over `wall`: `ticks` of CPU time used in it,
/// 0-1.
pub fn process_cpu(ticks: u64, wall: Duration, cores: usize) -> f64 {
    let capacity = wall.as_secs_f64() * cores.max(1) as f64;
    if capacity <= 0.0 {
        return 0.0;
    }
    (ticks as f64 / TICKS_PER_SECOND / capacity).clamp(0.0, 1.0)
}

/// The host's busy share between two samples, 0-1 (0 when no time passed).
pub fn host_cpu(before: HostTicks, after: HostTicks) -> f64 {
    let total = after.total.saturating_sub(before.total);
    if total == 0 {
        return 0.0;
    }
    let idle = after.idle.saturating_sub(before.idle).min(total);
    (1.0 - idle as f64 / total as f64).clamp(0.0, 1.0)
}

/// The CPU figures of one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuLoad {
    /// The agent process's CPU time per wall second per core, 0-1.
    pub process: f64,
    /// The host's busy share, 0-1.
    pub host: f64,
}

#[derive(Debug)]
struct CpuSample {
    at: Instant,
    process: Option<u64>,
    host: Option<HostTicks>,
}

/// Measures [`CpuLoad`] between calls (see the module docs).
#[derive(Debug, Default)]
pub struct CpuMeter {
    last: Mutex<Option<(CpuSample, CpuLoad)>>,
}

impl CpuMeter {
    /// The CPU load since the previous sample (0 at the first call), or the previous
    /// figures when that sample is younger than [`MIN_INTERVAL`].
    pub fn sample(&self) -> CpuLoad {
        let now = CpuSample {
            at: Instant::now(),
            process: read("/proc/self/stat").as_deref().and_then(process_ticks),
            host: read("/proc/stat").as_deref().and_then(host_ticks),
        };
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let load = match last.as_ref() {
            None => CpuLoad::default(),
            Some((before, figures)) if now.at.duration_since(before.at) < MIN_INTERVAL => {
                return *figures;
            }
            Some((before, _)) => CpuLoad {
                process: match (before.process, now.process) {
                    (Some(a), Some(b)) => {
                        process_cpu(b.saturating_sub(a), now.at.duration_since(before.at), cores)
                    }
                    _ => 0.0,
                },
                host: match (before.host, now.host) {
                    (Some(a), Some(b)) => host_cpu(a, b),
                    _ => 0.0,
                },
            },
        };
        *last = Some((now, load));
        load
    }
}

/// Measures the rate of a monotonic counter between calls (see the module docs).
#[derive(Debug, Default)]
pub struct RateMeter {
    last: Mutex<Option<(Instant, u64, f64)>>,
}

impl RateMeter {
    /// Per second since the previous sample of `total` (0 at the first call), or the
    /// previous rate when that sample is younger than [`MIN_INTERVAL`].
    pub fn sample(&self, total: u64, now: Instant) -> f64 {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let rate = match *last {
            None => 0.0,
            Some((at, _, rate)) if now.saturating_duration_since(at) < MIN_INTERVAL => {
                return rate;
            }
            Some((at, before, _)) => {
                total.saturating_sub(before) as f64 / now.duration_since(at).as_secs_f64()
            }
        };
        *last = Some((now, total, rate));
        rate
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/stat` of a process whose name holds a space and a parenthesis.
    const SELF_STAT: &str = "4242 (cluster (agent) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
        250 130 0 0 20 0 12 0 98765 123456789 4321 18446744073709551615 1 1 0 0 0 0 0 \
        4096 17479 0 0 0 17 3 0 0 0 0 0\n";

    const STAT: &str = "cpu  1000 50 300 8000 400 20 30 0 100 0\n\
        cpu0 500 25 150 4000 200 10 15 0 50 0\n\
        cpu1 500 25 150 4000 200 10 15 0 50 0\n\
        intr 12345 0 0\n\
        ctxt 987654\n";

    #[test]
    fn process_ticks_are_utime_plus_stime_after_the_name() {
        assert_eq!(process_ticks(SELF_STAT), Some(250 + 130));
        assert_eq!(process_ticks("4242 (agent) S 1 2"), None, "too short");
        assert_eq!(process_ticks(""), None);
    }

    #[test]
    fn host_ticks_read_the_aggregate_line() {
        let ticks = host_ticks(STAT).unwrap();
        assert_eq!(ticks.idle, 8000 + 400);
        assert_eq!(ticks.total, 1000 + 50 + 300 + 8000 + 400 + 20 + 30);
        assert_eq!(host_ticks("cpu0 1 2 3 4\n"), None, "no aggregate line");
        assert_eq!(host_ticks("cpu  1 x 3 4\n"), None);
    }

    #[test]
    fn cpu_figures_are_shares_clamped_to_one() {
        // 150 ticks = 1.5 s of CPU in 1 s on 2 cores: 75 %.
        assert!((process_cpu(150, Duration::from_secs(1), 2) - 0.75).abs() < 1e-9);
        assert_eq!(process_cpu(500, Duration::from_secs(1), 2), 1.0);
        assert_eq!(process_cpu(5, Duration::ZERO, 2), 0.0);
        let before = HostTicks {
            idle: 100,
            total: 200,
        };
        let after = HostTicks {
            idle: 130,
            total: 300,
        };
        assert!((host_cpu(before, after) - 0.7).abs() < 1e-9);
        assert_eq!(host_cpu(after, after), 0.0);
        assert_eq!(host_cpu(after, before), 0.0, "a counter that went back");
    }

    #[test]
    fn a_rate_is_measured_over_at_least_the_minimum_interval() {
        let meter = RateMeter::default();
        let start = Instant::now();
        assert_eq!(meter.sample(1000, start), 0.0, "nothing to compare with");
        assert_eq!(meter.sample(5000, start + Duration::from_millis(10)), 0.0);
        let rate = meter.sample(3000, start + Duration::from_secs(2));
        assert!((rate - 1000.0).abs() < 1e-9, "{rate}");
        assert_eq!(
            meter.sample(9000, start + Duration::from_millis(2500)),
            rate,
            "too soon: the previous rate"
        );
    }

    #[test]
    fn the_meter_reads_this_process_and_host() {
        let meter = CpuMeter::default();
        assert_eq!(meter.sample(), CpuLoad::default());
        if std::fs::metadata("/proc/self/stat").is_err() {
            return;
        }
        assert!(process_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap()).is_some());
        assert!(host_ticks(&std::fs::read_to_string("/proc/stat").unwrap()).is_some());
        // Burn CPU past the minimum interval: the process's share is above 0.
        let started = Instant::now();
        let mut x = 0u64;
        while started.elapsed() < MIN_INTERVAL + Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let load = meter.sample();
        assert!(load.process > 0.0 && load.process <= 1.0, "{load:?}");
        assert!(load.host > 0.0 && load.host <= 1.0, "{load:?}");
    }
}
