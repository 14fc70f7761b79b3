//! dns-rrl-bench: what DNS response-rate limiting (`dns.rrl`) costs legitimate clients
//! and how much of a reflection attack it stops, against Knot DNS's `mod-rrl` in the
//! same run, each also with RRL off.
//!
//! Servers, one after the other: ours (the release `federation-apiserver` with the
//! `dns-bench` federation, `dnscommon::GeoFleet`, of `--ingresses` Geo names) and Knot
//! (the same names as static A records), each with RRL off, on with `--table-size`
//! buckets and on with `--small-table` buckets. On means `responsesPerSecond`/`rate-limit`
//! `--rate`, slip `--slip`, nothing exempt (`exempt: []`, no `whitelist`), /24 source
//! prefixes (Knot 3.2's are fixed at /24 and /56) and our `burst` `--burst` (default 4 s
//! of the rate: Knot 3.2's buckets hold 4 s of tokens).
//!
//! Two workloads per server and setting, `--seconds` each:
//!
//! 1. **legitimate clients only**: `--sources` distinct source addresses, each in its
//!    own /24 of 127.0.0.0/8 (`127.1.0.7`, `127.1.1.7`, …), round-robin, source i asking
//!    name i mod names: every client and (client, name) bucket sees qps / sources
//!    queries per second, far under the limit. Closed loop: `--sockets` threads, each
//!    with `--window` queries outstanding. Every truncated or missing answer is a
//!    legitimate answer lost to RRL (or to the machine).
//! 2. **attack mix**: the same legitimate load plus an open-loop flood at
//!    `--attack-rate` queries per second from `--attack-prefixes` /24s
//!    (`127.250.0.0/24`, …; a different host address every query), reflection style:
//!    even queries ask one of `--attack-names` existing names (positive answers), odd
//!    ones a fresh random name (`x12345678.fedingress.test`, NXDOMAIN: Knot and we both
//!    key those by the zone). Counted per class: full answers, truncated (slipped) ones,
//!    and neither (dropped).
//!
//! Many sources from one process: a socket may name any local address as the source of
//! a datagram (`IP_PKTINFO`'s `ipi_spec_dst` on `sendmsg`, as `tests/src/flood.rs`
//! does), and all of 127.0.0.0/8 is local. To get the replies back, the socket is bound
//! to the wildcard address **and to the loopback device** (`SO_BINDTODEVICE lo`, needs
//! CAP_NET_RAW): it receives what is sent to any 127.x.y.z at its port, and nothing
//! from other interfaces.
//!
//! Run: `cargo build --release -p federation-apiserver -p fedingress-bench --bins &&
//! target/release/dns-rrl-bench` (see docs/benchmarks.md). It prints numbers; it
//! asserts nothing.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use fedingress_bench::dnscommon::{
    DEPLOY_TIMING, DnsHub, GeoFleet, KnotRrl, TYPE_A, ZONE, knot_version, name, start_knot_with,
    wait_answers,
};
use fedingress_bench::{CpuWindow, Proc, clock_ticks, cpu_ticks, sibling, today};
use fedingress_testsupport::dns::Query;
use nix::libc;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, SockaddrIn, bind, sendmsg,
    setsockopt, socket, sockopt,
};

#[derive(Parser, Clone)]
#[command(about = "DNS response-rate limiting: ours vs Knot's mod-rrl, each vs RRL off")]
struct Args {
    /// FederatedIngresses (DNS names) of our federation; Knot serves the same names.
    #[arg(long, default_value_t = 100)]
    ingresses: usize,
    /// Seconds per workload run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Distinct legitimate source addresses (each in its own /24 of 127/8; at most 60,000).
    #[arg(long, default_value_t = 50_000)]
    sources: u32,
    /// Legitimate load: sockets (one thread each).
    #[arg(long, default_value_t = 2)]
    sockets: usize,
    /// Legitimate load: queries outstanding per socket (closed loop).
    #[arg(long, default_value_t = 50)]
    window: usize,
    /// A query unanswered this long is lost.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Responses per second per (/24, class, name): ours `responsesPerSecond`, Knot
    /// `rate-limit`.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Our `burst` (Knot 3.2's buckets hold 4 s of `rate-limit`, not configurable).
    #[arg(long, default_value_t = 400)]
    burst: u32,
    /// `slip`, both servers.
    #[arg(long, default_value_t = 2)]
    slip: u32,
    /// Buckets of the first RRL-on setting (ours `tableSize`, Knot `table-size`).
    #[arg(long, default_value_t = 65_536)]
    table_size: usize,
    /// Buckets of the second RRL-on setting (0: leave it out).
    #[arg(long, default_value_t = 4096)]
    small_table: usize,
    /// Attack queries per second (open loop; 0: no attack workload).
    #[arg(long, default_value_t = 20_000)]
    attack_rate: u64,
    /// Attacking /24s.
    #[arg(long, default_value_t = 2)]
    attack_prefixes: u32,
    /// Existing names the attack's positive half cycles through.
    #[arg(long, default_value_t = 10)]
    attack_names: usize,
    /// Leave out Knot.
    #[arg(long)]
    no_knot: bool,
    /// federation-apiserver binary (default: next to this one).
    #[arg(long)]
    apiserver: Option<PathBuf>,
}

const KNOT_PORT: u16 = 15395;
/// Second octet of the first attacking /24 (`127.250.0.0/24`).
const ATTACK_OCTET: u8 = 250;
/// The attack's random names: `x` and 8 digits, overwritten per query.
const NX_TEMPLATE: &str = "x00000000";

// --- sockets that send as any loopback address and get the replies ----------------

/// A UDP socket on the wildcard address, bound to the loopback device: it sends as any
/// 127.x.y.z (`IP_PKTINFO`) and receives the replies to all of them at its port.
struct Spoofer {
    socket: UdpSocket,
}

impl Spoofer {
    fn bind() -> anyhow::Result<Self> {
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        // Before bind, so that no datagram from another interface is ever received.
        setsockopt(&fd, sockopt::BindToDevice, &std::ffi::OsString::from("lo"))
            .context("SO_BINDTODEVICE lo (needs CAP_NET_RAW)")?;
        setsockopt(&fd, sockopt::RcvBuf, &(4 << 20))?;
        bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, 0))?;
        Ok(Self {
            socket: UdpSocket::from(fd),
        })
    }

    fn send_as(&self, source: Ipv4Addr, to: SocketAddrV4, payload: &[u8]) -> io::Result<()> {
        let info = libc::in_pktinfo {
            ipi_ifindex: 0,
            ipi_spec_dst: libc::in_addr {
                // Network byte order: the octets as they lie in memory.
                s_addr: u32::from_ne_bytes(source.octets()),
            },
            ipi_addr: libc::in_addr { s_addr: 0 },
        };
        sendmsg(
            self.socket.as_raw_fd(),
            &[IoSlice::new(payload)],
            &[ControlMessage::Ipv4PacketInfo(&info)],
            MsgFlags::empty(),
            Some(&SockaddrIn::from(to)),
        )
        .map(|_| ())
        .map_err(io::Error::from)
    }
}

/// Legitimate source `i`: `127.<1 + i / 256>.<i % 256>.7`, one /24 each.
fn legit_source(i: u32) -> Ipv4Addr {
    let block = i + 256;
    let [_, _, a, b] = block.to_be_bytes();
    Ipv4Addr::new(127, a, b, 7)
}

/// Attack query `k`'s source: /24 number `k / 2 % prefixes` from `127.250.0.0/24`
/// (both classes of query, even and odd `k`, from every /24), a different host each
/// time.
fn attack_source(k: u64, prefixes: u32) -> Ipv4Addr {
    let prefixes = u64::from(prefixes.max(1));
    let prefix = (k / 2 % prefixes) as u8;
    let host = (k / 2 / prefixes % 254 + 1) as u8;
    Ipv4Addr::new(127, ATTACK_OCTET.wrapping_add(prefix), 0, host)
}

// --- the load ----------------------------------------------------------------------------

/// What every load thread works from.
#[derive(Clone)]
struct Plan {
    server: SocketAddrV4,
    /// One query per name, ID 0.
    names: Vec<Vec<u8>>,
    sources: u32,
    threads: usize,
    window: usize,
    duration: Duration,
    timeout: Duration,
    attack_rate: u64,
    attack_prefixes: u32,
    attack_names: usize,
    /// A query for `x00000000.<zone>`, ID 0.
    nx: Vec<u8>,
}

/// Counters of the legitimate load.
#[derive(Default, Clone)]
struct Legit {
    sent: u64,
    /// NOERROR with an answer.
    answered: u64,
    /// TC set: the client would have to retry over TCP.
    truncated: u64,
    /// Any other response (rcode, no answer).
    other: u64,
    lost: u64,
    late: u64,
    send_errors: u64,
    /// Latency of the answered ones, 10 µs buckets up to the timeout.
    latency: Vec<u64>,
}

impl Legit {
    fn merge(&mut self, o: &Legit) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.truncated += o.truncated;
        self.other += o.other;
        self.lost += o.lost;
        self.late += o.late;
        self.send_errors += o.send_errors;
        if self.latency.len() < o.latency.len() {
            self.latency.resize(o.latency.len(), 0);
        }
        for (a, b) in self.latency.iter_mut().zip(&o.latency) {
            *a += b;
        }
    }

    /// The `p` quantile of answered latency, ms.
    fn quantile_ms(&self, p: f64) -> f64 {
        let target = ((self.answered as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, count) in self.latency.iter().enumerate() {
            seen += count;
            if seen >= target {
                return bucket as f64 * 0.01;
            }
        }
        0.0
    }
}

/// Counters of the attack, per class (0: positive, 1: NXDOMAIN).
#[derive(Default, Clone, Copy)]
struct Attack {
    sent: [u64; 2],
    full: [u64; 2],
    slipped: [u64; 2],
    send_errors: u64,
}

impl Attack {
    fn dropped(&self, class: usize) -> u64 {
        self.sent[class].saturating_sub(self.full[class] + self.slipped[class])
    }
}

/// One closed-loop thread of legitimate clients: queries `k = first, first + threads,
/// …`, source `k % sources`, name `source % names`.
fn legit_thread(plan: &Plan, first: u64, start: Instant) -> anyhow::Result<Legit> {
    let spoofer = Spoofer::bind()?;
    spoofer
        .socket
        .set_read_timeout(Some(Duration::from_millis(10)))?;
    let timeout_ns = plan.timeout.as_nanos() as u64;
    let end_ns = plan.duration.as_nanos() as u64;
    let mut tally = Legit {
        latency: vec![0; (plan.timeout.as_micros() / 10) as usize + 1],
        ..Legit::default()
    };
    // Send time + 1 per ID (0: free), and the send order for timeouts.
    let mut sent_at = vec![0u64; 65536];
    let mut order: VecDeque<(u16, u64)> = VecDeque::new();
    let mut outstanding = 0usize;
    let mut packet = [0u8; 512];
    let mut response = [0u8; 1500];
    let mut next_id: u16 = (first as u16).wrapping_mul(7919);
    let mut k = first;
    loop {
        let now = start.elapsed().as_nanos() as u64 + 1;
        let sending = now <= end_ns;
        if !sending && (outstanding == 0 || now > end_ns + timeout_ns + 1) {
            break;
        }
        while sending && outstanding < plan.window {
            let slot = usize::from(next_id);
            if sent_at[slot] != 0 {
                sent_at[slot] = 0;
                outstanding -= 1;
                tally.lost += 1;
            }
            let source = (k % u64::from(plan.sources)) as u32;
            let template = &plan.names[source as usize % plan.names.len()];
            let len = template.len();
            packet[..len].copy_from_slice(template);
            packet[..2].copy_from_slice(&next_id.to_be_bytes());
            match spoofer.send_as(legit_source(source), plan.server, &packet[..len]) {
                Ok(()) => {
                    sent_at[slot] = now;
                    order.push_back((next_id, now));
                    outstanding += 1;
                    tally.sent += 1;
                    k += plan.threads as u64;
                    next_id = next_id.wrapping_add(1);
                }
                Err(_) => {
                    tally.send_errors += 1;
                    break;
                }
            }
        }
        match spoofer.socket.recv(&mut response) {
            Ok(n) if n >= 12 && response[2] & 0x80 != 0 => {
                let at = start.elapsed().as_nanos() as u64 + 1;
                let id = u16::from_be_bytes([response[0], response[1]]);
                let sent = std::mem::replace(&mut sent_at[usize::from(id)], 0);
                if sent == 0 {
                    tally.late += 1;
                } else {
                    outstanding -= 1;
                    let truncated = response[2] & 0x02 != 0;
                    let rcode = response[3] & 0x0F;
                    let answers = u16::from_be_bytes([response[6], response[7]]);
                    if truncated {
                        tally.truncated += 1;
                    } else if rcode == 0 && answers > 0 {
                        tally.answered += 1;
                        let bucket = (((at - sent) / 10_000) as usize).min(tally.latency.len() - 1);
                        tally.latency[bucket] += 1;
                    } else {
                        tally.other += 1;
                    }
                }
            }
            // Nothing within 10 ms, or not a response.
            _ => {}
        }
        // Expire what has waited longer than the timeout.
        let deadline = (start.elapsed().as_nanos() as u64 + 1).saturating_sub(timeout_ns);
        while let Some(&(id, at)) = order.front() {
            let slot = &mut sent_at[usize::from(id)];
            if *slot != at {
                order.pop_front();
            } else if at < deadline {
                *slot = 0;
                outstanding -= 1;
                tally.lost += 1;
                order.pop_front();
            } else {
                break;
            }
        }
    }
    tally.lost += outstanding as u64;
    Ok(tally)
}

/// The open-loop attack: `attack_rate` queries per second until the end, then the
/// replies for one more timeout. Even IDs ask an existing name, odd ones a random one.
fn attack_thread(plan: &Plan, start: Instant) -> anyhow::Result<Attack> {
    let spoofer = Spoofer::bind()?;
    spoofer.socket.set_nonblocking(true)?;
    let end = plan.duration;
    let drain = plan.duration + plan.timeout;
    let mut tally = Attack::default();
    let mut response = [0u8; 1500];
    let mut packet = [0u8; 512];
    let mut k: u64 = 0;
    let mut random: u64 = 0x9E37_79B9_7F4A_7C15;
    loop {
        let elapsed = start.elapsed();
        if elapsed > drain {
            break;
        }
        if elapsed <= end {
            let due = (plan.attack_rate as f64 * elapsed.as_secs_f64()) as u64 + 1;
            while k < due {
                let class = (k % 2) as usize;
                let len = if class == 0 {
                    let template = &plan.names[(k as usize / 2) % plan.attack_names.max(1)];
                    packet[..template.len()].copy_from_slice(template);
                    template.len()
                } else {
                    // splitmix64 for the random label's 8 digits.
                    random = random.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut z = random;
                    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    z ^= z >> 31;
                    packet[..plan.nx.len()].copy_from_slice(&plan.nx);
                    let mut digits = z % 100_000_000;
                    // Header (12), the label's length (1), `x` (1), then 8 digits.
                    for digit in packet[14..22].iter_mut().rev() {
                        *digit = b'0' + (digits % 10) as u8;
                        digits /= 10;
                    }
                    plan.nx.len()
                };
                packet[..2].copy_from_slice(&(k as u16).to_be_bytes());
                match spoofer.send_as(
                    attack_source(k, plan.attack_prefixes),
                    plan.server,
                    &packet[..len],
                ) {
                    Ok(()) => tally.sent[class] += 1,
                    Err(_) => tally.send_errors += 1,
                }
                k += 1;
            }
        }
        let mut got = false;
        loop {
            match spoofer.socket.recv(&mut response) {
                Ok(n) if n >= 12 && response[2] & 0x80 != 0 => {
                    got = true;
                    let class = usize::from(response[1] & 1);
                    if response[2] & 0x02 != 0 {
                        tally.slipped[class] += 1;
                    } else {
                        tally.full[class] += 1;
                    }
                }
                Ok(_) => got = true,
                Err(_) => break,
            }
        }
        if !got {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    Ok(tally)
}

/// UDP counters of the whole machine (`/proc/net/snmp`): (InErrors, RcvbufErrors).
fn udp_errors() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return (0, 0);
    };
    let find = |key: &str| {
        names
            .split_whitespace()
            .position(|n| n == key)
            .and_then(|i| values.split_whitespace().nth(i))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (find("InErrors"), find("RcvbufErrors"))
}

/// One workload run's results.
#[derive(Clone, Default)]
struct Run {
    legit: Legit,
    attack: Option<Attack>,
    seconds: f64,
    server_cpu: f64,
    load_cpu: f64,
    /// Machine-wide UDP receive-buffer drops during the run (any socket).
    rcvbuf_errors: u64,
    /// Our `fedingress_dns_rrl_responses_total` over the run: (dropped, slipped).
    ours_rrl: Option<(f64, f64)>,
}

impl Run {
    fn qps(&self) -> f64 {
        self.legit.answered as f64 / self.seconds
    }
}

async fn rrl_counters(api: Option<&str>) -> Option<(f64, f64)> {
    let text = reqwest::get(format!("{}/metrics", api?))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let mut dropped = 0.0;
    let mut slipped = 0.0;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("fedingress_dns_rrl_responses_total{") else {
            continue;
        };
        let value: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        if rest.contains("action=\"dropped\"") {
            dropped += value;
        } else if rest.contains("action=\"slipped\"") {
            slipped += value;
        }
    }
    Some((dropped, slipped))
}

async fn run_load(plan: std::sync::Arc<Plan>, pid: u32, api: Option<&str>) -> anyhow::Result<Run> {
    let before = rrl_counters(api).await;
    let (_, rcvbuf_before) = udp_errors();
    let me = std::process::id();
    let my_cpu = cpu_ticks(me)?;
    let window = CpuWindow::start(&[pid]);
    let started = Instant::now();
    let load_plan = plan.clone();
    let (legit, attack) = tokio::task::spawn_blocking(move || {
        let plan = &*load_plan;
        let start = Instant::now();
        std::thread::scope(|scope| {
            let attack = (plan.attack_rate > 0).then(|| scope.spawn(|| attack_thread(plan, start)));
            let legit: Vec<_> = (0..plan.threads)
                .map(|t| scope.spawn(move || legit_thread(plan, t as u64, start)))
                .collect();
            let mut total = Legit::default();
            for handle in legit {
                let tally = handle
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("load thread panicked")))?;
                total.merge(&tally);
            }
            let attack = match attack {
                Some(handle) => Some(
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("attack thread panicked")))?,
                ),
                None => None,
            };
            Ok::<_, anyhow::Error>((total, attack))
        })
    })
    .await??;
    let wall = started.elapsed().as_secs_f64();
    let server_cpu = window.finish().first().copied().unwrap_or_default();
    let load_cpu = cpu_ticks(me)?.saturating_sub(my_cpu) as f64 / clock_ticks() / wall * 100.0;
    let (_, rcvbuf_after) = udp_errors();
    let after = rrl_counters(api).await;
    Ok(Run {
        legit,
        attack,
        seconds: plan.duration.as_secs_f64(),
        server_cpu,
        load_cpu,
        rcvbuf_errors: rcvbuf_after.saturating_sub(rcvbuf_before),
        ours_rrl: before.zip(after).map(|(b, a)| (a.0 - b.0, a.1 - b.1)),
    })
}

fn pct(part: u64, whole: u64) -> f64 {
    part as f64 / whole.max(1) as f64 * 100.0
}

fn print_run(label: &str, workload: &str, run: &Run) {
    let l = &run.legit;
    println!(
        "{label:<22} {workload:<7} legit {:>8.0} qps answered ({} of {} sent; truncated {}, lost {}, other {}, late {}, send errors {}); p50 {:.2} ms p99 {:.2} ms; server CPU {:.0}% = {:.1} µs/answer; load CPU {:.0}%; UDP rcvbuf drops {}{}",
        run.qps(),
        l.answered,
        l.sent,
        l.truncated,
        l.lost,
        l.other,
        l.late,
        l.send_errors,
        l.quantile_ms(0.5),
        l.quantile_ms(0.99),
        run.server_cpu,
        run.server_cpu / 100.0 / run.qps().max(1.0) * 1e6,
        run.load_cpu,
        run.rcvbuf_errors,
        run.ours_rrl
            .map(|(d, s)| format!("; our RRL counters: dropped {d:.0}, slipped {s:.0}"))
            .unwrap_or_default()
    );
    if let Some(a) = &run.attack {
        for (class, what) in [(0, "positive"), (1, "NXDOMAIN")] {
            println!(
                "{label:<22} {workload:<7}   attack {what:<8}: sent {:>7}, answered {:>6.2}%, truncated {:>6.2}%, dropped {:>6.2}%",
                a.sent[class],
                pct(a.full[class], a.sent[class]),
                pct(a.slipped[class], a.sent[class]),
                pct(a.dropped(class), a.sent[class]),
            );
        }
    }
}

// --- servers --------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Setting {
    Off,
    On(usize),
}

impl Setting {
    fn label(self) -> String {
        match self {
            Setting::Off => "RRL off".to_string(),
            Setting::On(size) => format!("RRL on, table {size}"),
        }
    }
}

/// Both workloads against a server at `server` (pid `pid`).
async fn workloads(
    args: &Args,
    server: SocketAddrV4,
    pid: u32,
    api: Option<&str>,
    label: &str,
) -> anyhow::Result<(Run, Option<Run>)> {
    let names: Vec<Vec<u8>> = (0..args.ingresses)
        .map(|i| Query::new(0, &name(i), TYPE_A).encode())
        .collect();
    let mut plan = Plan {
        server,
        names,
        sources: args.sources,
        threads: args.sockets,
        window: args.window,
        duration: Duration::from_secs_f64(args.seconds),
        timeout: Duration::from_millis(args.timeout_ms),
        attack_rate: 0,
        attack_prefixes: args.attack_prefixes,
        attack_names: args.attack_names.min(args.ingresses),
        nx: Query::new(0, &format!("{NX_TEMPLATE}.{ZONE}"), TYPE_A).encode(),
    };
    let legit = run_load(std::sync::Arc::new(plan.clone()), pid, api).await?;
    print_run(label, "legit", &legit);
    if args.attack_rate == 0 {
        return Ok((legit, None));
    }
    // Let the legitimate buckets refill.
    tokio::time::sleep(Duration::from_secs(2)).await;
    plan.attack_rate = args.attack_rate;
    let mixed = run_load(std::sync::Arc::new(plan), pid, api).await?;
    print_run(label, "attack", &mixed);
    Ok((legit, Some(mixed)))
}

fn our_rrl_yaml(args: &Args, setting: Setting) -> String {
    match setting {
        Setting::Off => "  rrl:\n    enabled: false\n".to_string(),
        Setting::On(size) => format!(
            "  rrl:\n    enabled: true\n    responsesPerSecond: {}\n    burst: {}\n    slip: {}\n    ipv4PrefixLength: 24\n    tableSize: {size}\n    exempt: []\n",
            args.rate, args.burst, args.slip
        ),
    }
}

async fn run_ours(
    args: &Args,
    binary: &std::path::Path,
    setting: Setting,
) -> anyhow::Result<(Run, Option<Run>)> {
    let hub = DnsHub::start_with(
        binary,
        "127.0.0.1",
        DEPLOY_TIMING,
        "error",
        None,
        &our_rrl_yaml(args, setting),
    )
    .await?;
    let result = async {
        let fleet = GeoFleet::create(&hub, args.ingresses).await?;
        let SocketAddr::V4(server) = hub.dns else {
            bail!("our DNS server is not on IPv4: {}", hub.dns);
        };
        let label = format!("ours, {}", setting.label());
        println!(
            "{label}: federation-apiserver pid {} DNS {server}",
            hub.proc.pid
        );
        let runs = workloads(args, server, hub.proc.pid, Some(&hub.api), &label).await;
        drop(fleet);
        runs
    }
    .await;
    hub.proc.stop().await;
    result
}

async fn run_knot(args: &Args, setting: Setting) -> anyhow::Result<(Run, Option<Run>)> {
    let dir = tempfile::tempdir()?;
    let rrl = match setting {
        Setting::Off => None,
        Setting::On(size) => Some(KnotRrl {
            rate_limit: args.rate,
            slip: args.slip,
            table_size: size,
        }),
    };
    let knot: Proc = start_knot_with(dir.path(), args.ingresses, KNOT_PORT, None, rrl.as_ref())?;
    let result = async {
        let server = SocketAddrV4::new(Ipv4Addr::LOCALHOST, KNOT_PORT);
        wait_answers(
            "knot",
            SocketAddr::V4(server),
            args.ingresses,
            false,
            false,
            Duration::from_secs(30),
        )
        .await?;
        let label = format!("knot, {}", setting.label());
        println!("{label}: knotd pid {} on {server}", knot.pid);
        workloads(args, server, knot.pid, None, &label).await
    }
    .await;
    knot.stop().await;
    result
}

// --- main ----------------------------------------------------------------------------

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.sources == 0 || args.sources > 60_000 {
        bail!("--sources must be in 1..=60000 (one /24 each below 127.250/16)");
    }
    if args.ingresses == 0 || args.sockets == 0 || args.window == 0 || args.window > 30_000 {
        bail!("--ingresses, --sockets and --window must be at least 1 (window at most 30,000)");
    }
    // Fails early without CAP_NET_RAW.
    drop(Spoofer::bind()?);
    let binary = sibling(args.apiserver.clone(), "federation-apiserver")?;
    println!(
        "dns-rrl-bench {}: {} names, {} legitimate sources ({} sockets x window {}), attack {} qps from {} /24s ({} names + random NXDOMAIN names); RRL: rate {} slip {} (ours burst {}), tables {} and {}; {} s per run; {}",
        today(),
        args.ingresses,
        args.sources,
        args.sockets,
        args.window,
        args.attack_rate,
        args.attack_prefixes,
        args.attack_names,
        args.rate,
        args.slip,
        args.burst,
        args.table_size,
        args.small_table,
        args.seconds,
        knot_version()
    );
    let mut settings = vec![Setting::Off, Setting::On(args.table_size)];
    if args.small_table > 0 {
        settings.push(Setting::On(args.small_table));
    }
    // (server, setting) -> runs, servers interleaved per setting.
    let mut results: Vec<(&str, Setting, Run, Option<Run>)> = Vec::new();
    for setting in &settings {
        let (legit, attack) = run_ours(&args, &binary, *setting).await?;
        results.push(("ours", *setting, legit, attack));
        if !args.no_knot {
            let (legit, attack) = run_knot(&args, *setting).await?;
            results.push(("knot", *setting, legit, attack));
        }
    }
    summary(&results);
    Ok(())
}

fn summary(results: &[(&str, Setting, Run, Option<Run>)]) {
    let find = |server: &str, setting: Setting| {
        results
            .iter()
            .find(|r| r.0 == server && r.1 == setting)
            .map(|r| (&r.2, r.3.as_ref()))
    };
    println!("--- summary (ratios of answered legitimate qps, same run) ---");
    for (server, setting, legit, attack) in results {
        let off = find(server, Setting::Off);
        let peer = find(if *server == "ours" { "knot" } else { "ours" }, *setting);
        let ratio = |a: f64, b: Option<f64>| {
            b.filter(|b| *b > 0.0)
                .map(|b| format!("{:.2}", a / b))
                .unwrap_or_else(|| "-".into())
        };
        let lost = legit.legit.truncated + legit.legit.lost + legit.legit.other;
        println!(
            "{server} {:<18} legit only: {:>8.0} qps, vs RRL off {}, vs {} {}; legitimate answers not delivered {} of {} ({:.4}%); {:.1} µs server CPU per answer",
            setting.label(),
            legit.qps(),
            ratio(legit.qps(), off.map(|o| o.0.qps())),
            if *server == "ours" { "knot" } else { "ours" },
            ratio(legit.qps(), peer.map(|p| p.0.qps())),
            lost,
            legit.legit.sent,
            pct(lost, legit.legit.sent),
            legit.server_cpu / 100.0 / legit.qps().max(1.0) * 1e6,
        );
        if let Some(mixed) = attack {
            let l = &mixed.legit;
            let lost = l.truncated + l.lost + l.other;
            let a = mixed.attack.unwrap_or_default();
            let passed = |class: usize| pct(a.full[class], a.sent[class]);
            println!(
                "{server} {:<18} attack mix: {:>8.0} legit qps, vs RRL off {}, vs {} {}; legitimate not delivered {:.4}%; attack answered in full: positive {:.2}%, NXDOMAIN {:.2}% (truncated {:.2}% / {:.2}%); UDP rcvbuf drops {}",
                setting.label(),
                mixed.qps(),
                ratio(mixed.qps(), off.and_then(|o| o.1).map(Run::qps)),
                if *server == "ours" { "knot" } else { "ours" },
                ratio(mixed.qps(), peer.and_then(|p| p.1).map(Run::qps)),
                pct(lost, l.sent),
                passed(0),
                passed(1),
                pct(a.slipped[0], a.sent[0]),
                pct(a.slipped[1], a.sent[1]),
                mixed.rcvbuf_errors,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legitimate_sources_have_a_slash_24_each_below_the_attackers() {
        assert_eq!(legit_source(0), Ipv4Addr::new(127, 1, 0, 7));
        assert_eq!(legit_source(255), Ipv4Addr::new(127, 1, 255, 7));
        assert_eq!(legit_source(256), Ipv4Addr::new(127, 2, 0, 7));
        assert!(legit_source(59_999).octets()[1] < ATTACK_OCTET);
        assert_eq!(attack_source(0, 2), Ipv4Addr::new(127, 250, 0, 1));
        assert_eq!(attack_source(1, 2), Ipv4Addr::new(127, 250, 0, 1));
        assert_eq!(attack_source(2, 2), Ipv4Addr::new(127, 251, 0, 1));
        assert_eq!(attack_source(3, 2), Ipv4Addr::new(127, 251, 0, 1));
        assert_eq!(attack_source(4, 2), Ipv4Addr::new(127, 250, 0, 2));
    }
}
