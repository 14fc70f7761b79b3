//! ecs-load: a DNS load generator in which every query carries a different EDNS Client
//! Subnet. `dnsperf -E` puts one option on every query; this sends A queries whose ECS
//! option (code 8, family 1, source prefix /24) walks round-robin through a file of
//! client subnets, while the names walk through a names file.
//!
//! Query k (counted over all sockets) asks for subnet `k mod S` and name
//! `(k mod S + k div S) mod N`: consecutive queries never share a subnet, and every
//! pass over the subnets shifts the names by one, so a long run pairs each subnet with
//! every name.
//!
//! Design, for a generator that shares 2 cores with the server: one OS thread per UDP
//! socket (connected to the server), each keeping a window of outstanding queries. In
//! the default closed loop a thread sends until its window is full and then blocks in
//! `recv`; each response frees a slot for the next query (one `send` and one `recv`
//! system call per query, no async runtime). With `--rate` (open loop) the queries are
//! sent on a schedule (the window still caps what is outstanding) and the thread sleeps
//! between sends when nothing arrives. Queries are copied from per-name templates built
//! by `dnscommon::query`; only the ID and the three subnet bytes change. A query not
//! answered within `--timeout-ms` is lost; a response after that is counted as late.
//!
//! Files: names, one per line (the first word, so a dnsperf file `name A` works);
//! subnets, one `a.b.c.0/24` per line (the first word; further words are ignored, `#`
//! starts a comment). The target must be a loopback address.
//!
//! Output: a human summary, then `RESULT {json}` (what `dns-geo-bench` reads).
//!
//! Run: `target/release/ecs-load --server 127.0.0.1:5353 --names names.txt --subnets
//! subnets.txt --seconds 10` (see docs/benchmarks.md). It prints numbers; it asserts
//! nothing.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::dnscommon::{LoadFlags, TYPE_A};
use fedingress_bench::{clock_ticks, cpu_ticks};
use fedingress_testsupport::dns::Query;
use serde_json::json;

#[derive(Parser)]
#[command(about = "DNS load with a different EDNS Client Subnet in every query")]
struct Args {
    /// The DNS server (loopback only), e.g. 127.0.0.1:5353.
    #[arg(long)]
    server: SocketAddr,
    /// Names to ask for, one per line.
    #[arg(long)]
    names: PathBuf,
    /// Client subnets (`a.b.c.0/24`), one per line.
    #[arg(long)]
    subnets: PathBuf,
    /// How long to send queries, seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    #[command(flatten)]
    load: LoadFlags,
}

/// Reads the first word of every non-empty, non-comment line.
fn first_words(path: &Path) -> anyhow::Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split('#').next()?.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The first three octets of `a.b.c.0/24` (or of a bare address).
fn parse_subnet(text: &str) -> anyhow::Result<[u8; 3]> {
    let (address, prefix) = text.split_once('/').unwrap_or((text, "24"));
    if prefix != "24" {
        bail!("subnet {text}: only /24 subnets are sent (source prefix 24)");
    }
    let ip: Ipv4Addr = address
        .parse()
        .with_context(|| format!("subnet {text}: not an IPv4 address"))?;
    let [a, b, c, _] = ip.octets();
    Ok([a, b, c])
}

/// What every sender thread works from (shared, read-only).
struct Plan {
    server: SocketAddr,
    /// One query per name: ID 0, ECS 0.0.0.0/24 (the last three bytes are the subnet).
    templates: Vec<Vec<u8>>,
    subnets: Vec<[u8; 3]>,
    threads: usize,
    window: usize,
    /// Queries per second per thread; 0 = closed loop.
    rate: f64,
    duration: Duration,
    timeout: Duration,
}

impl Plan {
    /// Writes query `k` with `id` into `buffer`; returns its length.
    fn write(&self, k: u64, id: u16, buffer: &mut [u8]) -> usize {
        let s = self.subnets.len() as u64;
        let subnet = (k % s) as usize;
        let name = ((k % s + k / s) % self.templates.len() as u64) as usize;
        let template = &self.templates[name];
        let len = template.len();
        buffer[..len].copy_from_slice(template);
        buffer[..2].copy_from_slice(&id.to_be_bytes());
        buffer[len - 3..len].copy_from_slice(&self.subnets[subnet]);
        len
    }
}

/// Counters of one thread (merged at the end).
struct Tally {
    sent: u64,
    answered: u64,
    lost: u64,
    late: u64,
    send_errors: u64,
    recv_errors: u64,
    /// Responses that are not a response to an outstanding query of ours (bad header).
    malformed: u64,
    rcodes: [u64; 16],
    /// NOERROR responses with no answer records (NODATA).
    nodata: u64,
    /// Latency histogram, 1 µs buckets up to the timeout.
    latency_us: Vec<u32>,
}

impl Tally {
    fn new(timeout: Duration) -> Self {
        Self {
            sent: 0,
            answered: 0,
            lost: 0,
            late: 0,
            send_errors: 0,
            recv_errors: 0,
            malformed: 0,
            rcodes: [0; 16],
            nodata: 0,
            latency_us: vec![0; timeout.as_micros() as usize + 1],
        }
    }

    fn merge(&mut self, other: &Tally) {
        self.sent += other.sent;
        self.answered += other.answered;
        self.lost += other.lost;
        self.late += other.late;
        self.send_errors += other.send_errors;
        self.recv_errors += other.recv_errors;
        self.malformed += other.malformed;
        self.nodata += other.nodata;
        for (a, b) in self.rcodes.iter_mut().zip(other.rcodes) {
            *a += b;
        }
        for (a, b) in self.latency_us.iter_mut().zip(&other.latency_us) {
            *a += b;
        }
    }

    /// The `p` quantile (0..=1) of the answered queries' latency, ms.
    fn quantile_ms(&self, p: f64) -> f64 {
        let target = ((self.answered as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (us, count) in self.latency_us.iter().enumerate() {
            seen += u64::from(*count);
            if seen >= target {
                return us as f64 / 1000.0;
            }
        }
        0.0
    }

    fn mean_ms(&self) -> f64 {
        let total: f64 = self
            .latency_us
            .iter()
            .enumerate()
            .map(|(us, count)| us as f64 * f64::from(*count))
            .sum();
        total / (self.answered.max(1) as f64) / 1000.0
    }
}

/// Outstanding queries of one socket: send time per ID (0 = free) and the send order,
/// so that timeouts are found at the front.
struct Outstanding {
    /// Nanoseconds since the start + 1, per ID; 0 = no query with this ID outstanding.
    sent_at: Vec<u64>,
    order: VecDeque<(u16, u64)>,
    count: usize,
}

impl Outstanding {
    fn new() -> Self {
        Self {
            sent_at: vec![0; 65536],
            order: VecDeque::new(),
            count: 0,
        }
    }

    fn insert(&mut self, id: u16, at: u64) {
        self.sent_at[usize::from(id)] = at;
        self.order.push_back((id, at));
        self.count += 1;
    }

    /// The send time of `id` if it is outstanding; frees it.
    fn take(&mut self, id: u16) -> Option<u64> {
        let slot = &mut self.sent_at[usize::from(id)];
        let at = std::mem::replace(slot, 0);
        if at == 0 {
            return None;
        }
        self.count -= 1;
        Some(at)
    }

    /// Frees every query sent before `deadline` (ns + 1 as in `sent_at`); returns how many.
    fn expire(&mut self, deadline: u64) -> u64 {
        let mut expired = 0;
        while let Some(&(id, at)) = self.order.front() {
            let slot = &mut self.sent_at[usize::from(id)];
            if *slot != at {
                // Answered (or its ID reused by a later query): nothing to do.
                self.order.pop_front();
            } else if at < deadline {
                *slot = 0;
                self.count -= 1;
                expired += 1;
                self.order.pop_front();
            } else {
                break;
            }
        }
        expired
    }
}

/// One sender thread: its own socket, window and counters. `first` is its index.
fn sender(plan: &Plan, first: u64, start: Instant) -> anyhow::Result<Tally> {
    let bind = if plan.server.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let socket = UdpSocket::bind(bind)?;
    socket.connect(plan.server)?;
    let open_loop = plan.rate > 0.0;
    if open_loop {
        socket.set_nonblocking(true)?;
    } else {
        socket.set_read_timeout(Some(Duration::from_millis(10)))?;
    }
    let timeout_ns = plan.timeout.as_nanos() as u64;
    let end_ns = plan.duration.as_nanos() as u64;
    let mut tally = Tally::new(plan.timeout);
    let mut outstanding = Outstanding::new();
    let mut query = [0u8; 512];
    let mut response = [0u8; 1500];
    let mut next_id: u16 = (first as u16).wrapping_mul(7919);
    let mut k = first;
    loop {
        let now = start.elapsed().as_nanos() as u64 + 1;
        let sending = now <= end_ns;
        if !sending && outstanding.count == 0 {
            break;
        }
        if !sending && now > end_ns + timeout_ns + 1 {
            break;
        }
        // Send what the window (and, open loop, the schedule) allows.
        let due = if open_loop {
            (plan.rate * (now as f64 / 1e9)) as u64 + 1
        } else {
            u64::MAX
        };
        while sending && outstanding.count < plan.window && tally.sent < due {
            if outstanding.sent_at[usize::from(next_id)] != 0 {
                // 65,536 queries later still outstanding: count it lost, reuse the ID.
                outstanding.take(next_id);
                tally.lost += 1;
            }
            let len = plan.write(k, next_id, &mut query);
            match socket.send(&query[..len]) {
                Ok(_) => {
                    outstanding.insert(next_id, now);
                    tally.sent += 1;
                    k += plan.threads as u64;
                    next_id = next_id.wrapping_add(1);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    tally.send_errors += 1;
                    break;
                }
            }
        }
        // Receive one response (closed loop: block up to 10 ms).
        let mut received = false;
        match socket.recv(&mut response) {
            Ok(n) => {
                received = true;
                let at = start.elapsed().as_nanos() as u64 + 1;
                if n < 12 || response[2] & 0x80 == 0 {
                    tally.malformed += 1;
                } else {
                    let id = u16::from_be_bytes([response[0], response[1]]);
                    match outstanding.take(id) {
                        Some(sent) => {
                            tally.answered += 1;
                            let us = ((at - sent) / 1000) as usize;
                            let bucket = us.min(tally.latency_us.len() - 1);
                            tally.latency_us[bucket] += 1;
                            let rcode = usize::from(response[3] & 0x0F);
                            tally.rcodes[rcode] += 1;
                            if rcode == 0 && response[6] == 0 && response[7] == 0 {
                                tally.nodata += 1;
                            }
                        }
                        None => tally.late += 1,
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => tally.recv_errors += 1,
        }
        let now = start.elapsed().as_nanos() as u64 + 1;
        tally.lost += outstanding.expire(now.saturating_sub(timeout_ns));
        if open_loop && !received {
            // Nothing arrived: sleep until the next query is due (at most 200 µs).
            let next_due = ((tally.sent as f64) / plan.rate * 1e9) as u64;
            let wait = next_due.saturating_sub(now).clamp(20_000, 200_000);
            std::thread::sleep(Duration::from_nanos(wait));
        }
    }
    // Whatever is still outstanding past the drain is lost.
    tally.lost += outstanding.count as u64;
    Ok(tally)
}

const RCODES: [&str; 16] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET",
    "NXRRSET", "NOTAUTH", "NOTZONE", "RCODE11", "RCODE12", "RCODE13", "RCODE14", "RCODE15",
];

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let LoadFlags {
        sockets,
        window,
        rate,
        timeout_ms,
    } = args.load;
    if !args.server.ip().is_loopback() {
        bail!(
            "--server {}: only loopback targets (this is a benchmark tool)",
            args.server
        );
    }
    if sockets == 0 || window == 0 || window > 60_000 {
        bail!("--sockets must be at least 1 and --window between 1 and 60,000");
    }
    if !(args.seconds > 0.0 && args.seconds <= 3600.0) {
        bail!("--seconds must be in (0, 3600]");
    }
    let names = first_words(&args.names)?;
    if names.is_empty() {
        bail!("{}: no names", args.names.display());
    }
    let subnets = first_words(&args.subnets)?
        .iter()
        .map(|s| parse_subnet(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if subnets.is_empty() {
        bail!("{}: no subnets", args.subnets.display());
    }
    let templates: Vec<Vec<u8>> = names
        .iter()
        .map(|n| {
            Query::new(0, n, TYPE_A)
                .edns(Some(Ipv4Addr::UNSPECIFIED))
                .encode()
        })
        .collect();
    if templates.iter().any(|t| t.len() > 512) {
        bail!("a name is too long for a 512-byte query");
    }
    let plan = Plan {
        server: args.server,
        templates,
        subnets,
        threads: sockets,
        window,
        rate: rate as f64 / sockets as f64,
        duration: Duration::from_secs_f64(args.seconds),
        timeout: Duration::from_millis(timeout_ms),
    };
    let pid = std::process::id();
    let cpu_start = cpu_ticks(pid)?;
    let start = Instant::now();
    let tallies: Vec<anyhow::Result<Tally>> = std::thread::scope(|scope| {
        let plan = &plan;
        let handles: Vec<_> = (0..plan.threads)
            .map(|t| scope.spawn(move || sender(plan, t as u64, start)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("sender thread panicked")))
            })
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu = (cpu_ticks(pid)?.saturating_sub(cpu_start)) as f64 / clock_ticks() / wall * 100.0;
    let mut total = Tally::new(plan.timeout);
    for tally in tallies {
        total.merge(&tally?);
    }
    let seconds = plan.duration.as_secs_f64();
    let qps = total.answered as f64 / seconds;
    let rcodes: serde_json::Map<String, serde_json::Value> = RCODES
        .iter()
        .zip(total.rcodes)
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| (name.to_string(), json!(n)))
        .collect();
    let result = json!({
        "server": args.server.to_string(),
        "seconds": seconds,
        "sockets": sockets,
        "window": window,
        "rate": rate,
        "timeout_ms": timeout_ms,
        "names": names.len(),
        "subnets": plan.subnets.len(),
        "sent": total.sent,
        "answered": total.answered,
        "qps": qps,
        "sent_qps": total.sent as f64 / seconds,
        "lost": total.lost,
        "late": total.late,
        "send_errors": total.send_errors,
        "recv_errors": total.recv_errors,
        "malformed": total.malformed,
        "rcodes": rcodes,
        "nodata": total.nodata,
        "p50_ms": total.quantile_ms(0.5),
        "p99_ms": total.quantile_ms(0.99),
        "p999_ms": total.quantile_ms(0.999),
        "mean_ms": total.mean_ms(),
        "max_ms": total.quantile_ms(1.0),
        "cpu_percent": cpu,
    });
    println!(
        "ecs-load {}: {} names x {} subnets, {} sockets x window {}, {}, {:.0} s",
        args.server,
        names.len(),
        plan.subnets.len(),
        sockets,
        window,
        if rate == 0 {
            "closed loop".to_string()
        } else {
            format!("open loop at {} qps", rate)
        },
        seconds
    );
    println!(
        "  answered {} of {} sent: {qps:.0} qps; latency p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms, mean {:.3} ms, max {:.3} ms",
        total.answered,
        total.sent,
        total.quantile_ms(0.5),
        total.quantile_ms(0.99),
        total.quantile_ms(0.999),
        total.mean_ms(),
        total.quantile_ms(1.0)
    );
    println!(
        "  lost (no answer within {} ms) {}, late {}, send errors {}, receive errors {}, malformed {}; rcodes {}; NOERROR without answers {}; ecs-load CPU {cpu:.0}% of one core",
        timeout_ms,
        total.lost,
        total.late,
        total.send_errors,
        total.recv_errors,
        total.malformed,
        result["rcodes"],
        total.nodata
    );
    println!("RESULT {result}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(names: &[&str], subnets: &[[u8; 3]]) -> Plan {
        Plan {
            server: "127.0.0.1:53".parse().unwrap(),
            templates: names
                .iter()
                .map(|n| {
                    Query::new(0, n, TYPE_A)
                        .edns(Some(Ipv4Addr::UNSPECIFIED))
                        .encode()
                })
                .collect(),
            subnets: subnets.to_vec(),
            threads: 1,
            window: 1,
            rate: 0.0,
            duration: Duration::from_secs(1),
            timeout: Duration::from_millis(10),
        }
    }

    #[test]
    fn every_query_has_the_next_subnet_and_passes_shift_the_names() {
        let plan = plan(&["a.test", "b.test"], &[[1, 2, 3], [4, 5, 6], [7, 8, 9]]);
        let mut buffer = [0u8; 512];
        let mut seen = Vec::new();
        for k in 0..6 {
            let len = plan.write(k, 0xBEEF, &mut buffer);
            assert_eq!(&buffer[..2], &[0xBE, 0xEF]);
            // The name is the first label after the header.
            seen.push((buffer[13], buffer[len - 3..len].to_vec()));
        }
        let subnets: Vec<u8> = seen.iter().map(|(_, s)| s[0]).collect();
        assert_eq!(subnets, [1, 4, 7, 1, 4, 7]);
        let names: Vec<u8> = seen.iter().map(|(n, _)| *n).collect();
        // Pass 0: a b a; pass 1 starts one name later: b a b.
        assert_eq!(names, [b'a', b'b', b'a', b'b', b'a', b'b']);
    }

    #[test]
    fn subnets_parse_as_slash_24_only() {
        assert_eq!(parse_subnet("81.2.69.0/24").unwrap(), [81, 2, 69]);
        assert_eq!(parse_subnet("81.2.69.7").unwrap(), [81, 2, 69]);
        assert!(parse_subnet("81.2.0.0/16").is_err());
        assert!(parse_subnet("nope/24").is_err());
    }

    #[test]
    fn outstanding_queries_expire_in_send_order_and_answers_free_them() {
        let mut outstanding = Outstanding::new();
        outstanding.insert(1, 10);
        outstanding.insert(2, 20);
        outstanding.insert(3, 30);
        assert_eq!(outstanding.take(2), Some(20));
        assert_eq!(outstanding.take(2), None);
        assert_eq!(outstanding.expire(25), 1); // 1 expired, 2 answered
        assert_eq!(outstanding.count, 1);
        assert_eq!(outstanding.take(1), None); // late
        assert_eq!(outstanding.take(3), Some(30));
        assert_eq!(outstanding.count, 0);
    }

    #[test]
    fn quantiles_come_from_the_histogram() {
        let mut tally = Tally::new(Duration::from_millis(10));
        for us in [100, 200, 300, 400] {
            tally.latency_us[us] += 1;
            tally.answered += 1;
        }
        assert_eq!(tally.quantile_ms(0.5), 0.2);
        assert_eq!(tally.quantile_ms(0.99), 0.4);
        assert!((tally.mean_ms() - 0.25).abs() < 1e-9);
    }
}
