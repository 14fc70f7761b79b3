//! A steady stream of DNS queries against a server, recorded for judging afterwards:
//! "did any client, at any moment, get an answer other than the steady state?"
//!
//! Entry points: [`Prober::start`] runs one background thread per [`Target`] (a name
//! asked with an EDNS Client Subnet, so each target stands for one client region),
//! each sending an `A` query every `interval` and recording a [`Sample`] per query:
//! the rcode and addresses that came back, or that nothing came back.
//! [`Prober::wait_steady`] waits until every target answers its steady state;
//! [`judge`] classifies the samples against the targets' expectations and the windows
//! in which the server process was down, and renders a report with counts and
//! examples.
//!
//! Queries are hand-encoded (one question, class IN, an OPT record with an ECS
//! option); answers are parsed only as far as the header and the answer section's
//! A/AAAA records. What does not belong here: any knowledge of the product beyond
//! the DNS wire format.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fedingress_testsupport::dns::{Edns, Query, TYPE_A};

/// How long one query waits for its answer before it counts as unanswered.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// A prober never outlives this, even if the test forgets to stop it.
const MAX_RUN: Duration = Duration::from_secs(300);

/// One stream of queries: a name asked on behalf of clients in one region.
#[derive(Clone, Debug)]
pub struct Target {
    /// A short label for reports, e.g. `eu`.
    pub region: String,
    /// The name queried (`A`).
    pub name: String,
    /// The EDNS Client Subnet sent with every query (a /24).
    pub subnet: Ipv4Addr,
    /// The steady-state answer: the address set these clients must get.
    pub steady: Vec<IpAddr>,
    /// `Some(port)` for a name that is being created while probing: before any
    /// address is answered, NXDOMAIN and NODATA are fine; every address answered must
    /// already accept TCP connections on `port`; once an address was answered, the
    /// name must not fall back to NXDOMAIN or NODATA.
    pub new_on_port: Option<u16>,
}

impl Target {
    /// A target whose answer must always be `steady`.
    pub fn steady(region: &str, name: &str, subnet: Ipv4Addr, steady: Vec<IpAddr>) -> Self {
        Self {
            region: region.into(),
            name: name.into(),
            subnet,
            steady,
            new_on_port: None,
        }
    }

    /// A target for a name created while probing (see [`Target::new_on_port`]).
    pub fn created(
        region: &str,
        name: &str,
        subnet: Ipv4Addr,
        steady: Vec<IpAddr>,
        port: u16,
    ) -> Self {
        Self {
            new_on_port: Some(port),
            ..Self::steady(region, name, subnet, steady)
        }
    }
}

/// What came back for one query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response: its rcode, and the A/AAAA addresses of its answer section (sorted).
    /// `other_records` counts answer records of other types (e.g. CNAME).
    Response {
        rcode: u8,
        truncated: bool,
        addresses: Vec<IpAddr>,
        other_records: usize,
    },
    /// Nothing usable came back: a timeout, ICMP port unreachable, a garbled packet.
    Unanswered(String),
}

impl Outcome {
    fn is_nodata(&self) -> bool {
        matches!(self, Outcome::Response { rcode: 0, addresses, other_records: 0, .. } if addresses.is_empty())
    }

    fn is_nxdomain(&self) -> bool {
        matches!(self, Outcome::Response { rcode: 3, .. })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Unanswered(why) => write!(f, "no answer ({why})"),
            Outcome::Response {
                rcode,
                truncated,
                addresses,
                other_records,
            } => {
                let name = match rcode {
                    0 if addresses.is_empty() && *other_records == 0 => "NODATA",
                    0 => "NOERROR",
                    1 => "FORMERR",
                    2 => "SERVFAIL",
                    3 => "NXDOMAIN",
                    4 => "NOTIMP",
                    5 => "REFUSED",
                    _ => "rcode",
                };
                write!(f, "{name}")?;
                if !matches!(rcode, 0..=5) {
                    write!(f, " {rcode}")?;
                }
                if !addresses.is_empty() {
                    let list: Vec<String> = addresses.iter().map(IpAddr::to_string).collect();
                    write!(f, " [{}]", list.join(", "))?;
                }
                if *other_records > 0 {
                    write!(f, " +{other_records} other records")?;
                }
                if *truncated {
                    write!(f, " (TC)")?;
                }
                Ok(())
            }
        }
    }
}

/// One query and what came of it.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Index into the prober's targets.
    pub target: usize,
    /// When the query was sent.
    pub sent: Instant,
    /// When the answer arrived or the query was given up.
    pub done: Instant,
    pub outcome: Outcome,
    /// For a target created while probing: the answered addresses that did not accept
    /// a TCP connection on its port right after the answer arrived.
    pub not_serving: Vec<IpAddr>,
}

/// The background query streams; stopped (threads joined) on drop or by [`Prober::stop`].
pub struct Prober {
    pub targets: Vec<Target>,
    /// When the prober started: the origin of the times in reports.
    pub started: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Prober {
    /// Starts one thread per target, each sending a query to `server` every `interval`
    /// whether or not earlier ones were answered (after a stall of the thread itself it
    /// carries on from then, without a burst).
    pub fn start(server: SocketAddr, targets: Vec<Target>, interval: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let threads = targets
            .iter()
            .enumerate()
            .map(|(index, target)| {
                let stream = Stream {
                    index,
                    target: target.clone(),
                    server,
                    interval,
                    samples: samples.clone(),
                    stop: stop.clone(),
                };
                std::thread::spawn(move || stream.run(started + MAX_RUN))
            })
            .collect();
        Self {
            targets,
            started,
            samples,
            stop,
            threads,
        }
    }

    /// A copy of every sample so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until every steady target's latest answer is its steady state and every
    /// created target's is (if `created_too`); returns the moment it was seen.
    pub fn wait_steady(&self, timeout: Duration, created_too: bool) -> Instant {
        crate::eventually(timeout, "every region answered its steady state", || {
            let samples = self.samples();
            for (index, target) in self.targets.iter().enumerate() {
                if target.new_on_port.is_some() && !created_too {
                    continue;
                }
                let latest = samples.iter().rev().find(|s| s.target == index);
                match latest {
                    Some(sample) if is_steady(target, &sample.outcome) => {}
                    Some(sample) => {
                        return Err(format!(
                            "{} {}: {}",
                            target.region, target.name, sample.outcome
                        ));
                    }
                    None => {
                        return Err(format!("{} {}: no sample yet", target.region, target.name));
                    }
                }
            }
            Ok(Instant::now())
        })
    }

    /// Waits until every target has `count` samples sent after `after` (keeps probing
    /// across a settled state for a while, without a fixed sleep).
    pub fn wait_samples(&self, after: Instant, count: usize, timeout: Duration) {
        crate::eventually(timeout, "more probe samples", || {
            let samples = self.samples();
            for index in 0..self.targets.len() {
                let n = samples
                    .iter()
                    .filter(|s| s.target == index && s.sent >= after)
                    .count();
                if n < count {
                    return Err(format!("{}: {n} of {count}", self.targets[index].region));
                }
            }
            Ok(())
        });
    }

    /// Stops every stream and returns all samples.
    pub fn stop(mut self) -> Vec<Sample> {
        self.halt();
        self.samples()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.halt();
    }
}

fn is_steady(target: &Target, outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Response { rcode: 0, truncated: false, addresses, other_records: 0 }
        if *addresses == sorted(&target.steady))
}

fn sorted(addresses: &[IpAddr]) -> Vec<IpAddr> {
    let mut addresses = addresses.to_vec();
    addresses.sort();
    addresses
}

/// One target's query loop.
struct Stream {
    index: usize,
    target: Target,
    server: SocketAddr,
    interval: Duration,
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
}

impl Stream {
    /// Sends on schedule whether or not earlier queries were answered (a query lost
    /// when the server dies must not pause the stream), matches answers to queries by
    /// id, and gives a query up after [`ANSWER_TIMEOUT`]. An ICMP error (the port is
    /// closed) fails every query in flight.
    fn run(self, deadline: Instant) {
        let local: SocketAddr = if self.server.is_ipv4() {
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
        } else {
            SocketAddr::from((Ipv6Addr::LOCALHOST, 0))
        };
        let Ok(socket) = UdpSocket::bind(local) else {
            return;
        };
        if socket.connect(self.server).is_err() {
            return;
        }
        let mut served: HashSet<IpAddr> = HashSet::new();
        let mut pending: VecDeque<(u16, Instant)> = VecDeque::new();
        let mut id: u16 = u16::try_from(self.index).unwrap_or(0).wrapping_mul(10_007);
        let mut next = Instant::now();
        let mut buffer = [0u8; 4096];
        while !self.stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let now = Instant::now();
            if now >= next {
                // On schedule; after a stall, start afresh rather than send a burst.
                next = (next + self.interval).max(now);
                id = id.wrapping_add(1);
                let query = Query::new(id, &self.target.name, TYPE_A)
                    .edns(Edns::Ecs(self.target.subnet))
                    .encode();
                pending.push_back((id, Instant::now()));
                if let Err(error) = socket.send(&query) {
                    self.fail_all(&mut pending, &format!("send: {error}"));
                }
            }
            while let Some(&(_, sent)) = pending.front() {
                if sent.elapsed() < ANSWER_TIMEOUT {
                    break;
                }
                pending.pop_front();
                self.record(sent, Outcome::Unanswered("timeout".into()), Vec::new());
            }
            let wait = next
                .saturating_duration_since(Instant::now())
                .max(Duration::from_micros(100));
            if socket.set_read_timeout(Some(wait)).is_err() {
                return;
            }
            match socket.recv(&mut buffer) {
                Ok(n) => self.answered(&buffer[..n], &mut pending, &mut served),
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(error) => self.fail_all(&mut pending, &error.to_string()),
            }
        }
    }

    /// Records the answer to the pending query it answers (an answer to a query already
    /// given up is dropped; a garbled one fails the oldest pending query).
    fn answered(
        &self,
        packet: &[u8],
        pending: &mut VecDeque<(u16, Instant)>,
        served: &mut HashSet<IpAddr>,
    ) {
        match parse_response(packet) {
            Ok((id, outcome)) => {
                let Some(position) = pending.iter().position(|(i, _)| *i == id) else {
                    return;
                };
                if let Some((_, sent)) = pending.remove(position) {
                    let not_serving = self.check_serving(&outcome, served);
                    self.record(sent, outcome, not_serving);
                }
            }
            Err(error) => {
                if let Some((_, sent)) = pending.pop_front() {
                    let outcome = Outcome::Unanswered(format!("garbled answer: {error}"));
                    self.record(sent, outcome, Vec::new());
                }
            }
        }
    }

    /// For a created name: the answered addresses that do not accept TCP on its port
    /// (an address that accepted once is not asked again: listeners are not removed).
    fn check_serving(&self, outcome: &Outcome, served: &mut HashSet<IpAddr>) -> Vec<IpAddr> {
        let (Some(port), Outcome::Response { addresses, .. }) = (self.target.new_on_port, outcome)
        else {
            return Vec::new();
        };
        let mut not_serving = Vec::new();
        for address in addresses {
            if served.contains(address) {
                continue;
            }
            let at = SocketAddr::new(*address, port);
            match TcpStream::connect_timeout(&at, Duration::from_secs(1)) {
                Ok(_) => {
                    served.insert(*address);
                }
                Err(_) => not_serving.push(*address),
            }
        }
        not_serving
    }

    /// Fails every query in flight (the server's port is closed, or the socket broke).
    fn fail_all(&self, pending: &mut VecDeque<(u16, Instant)>, why: &str) {
        for (_, sent) in pending.drain(..) {
            self.record(sent, Outcome::Unanswered(why.to_string()), Vec::new());
        }
    }

    fn record(&self, sent: Instant, outcome: Outcome, not_serving: Vec<IpAddr>) {
        let sample = Sample {
            target: self.index,
            sent,
            done: Instant::now(),
            outcome,
            not_serving,
        };
        if let Ok(mut samples) = self.samples.lock() {
            samples.push(sample);
        }
    }
}

/// Parses a response: its id and what it says.
pub fn parse_response(packet: &[u8]) -> Result<(u16, Outcome), String> {
    let mut reader = Reader { packet, at: 0 };
    let id = reader.u16()?;
    let flags = reader.u16()?;
    if flags & 0x8000 == 0 {
        return Err("not a response".into());
    }
    let (qd, an) = (reader.u16()?, reader.u16()?);
    reader.u16()?; // NS
    reader.u16()?; // AR
    for _ in 0..qd {
        reader.skip_name()?;
        reader.skip(4)?;
    }
    let mut addresses = Vec::new();
    let mut other_records = 0;
    for _ in 0..an {
        reader.skip_name()?;
        let kind = reader.u16()?;
        reader.skip(6)?; // class, TTL
        let length = usize::from(reader.u16()?);
        let data = reader.take(length)?;
        match (kind, data.len()) {
            (1, 4) => addresses.push(IpAddr::from([data[0], data[1], data[2], data[3]])),
            (28, 16) => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(data);
                addresses.push(IpAddr::from(octets));
            }
            _ => other_records += 1,
        }
    }
    addresses.sort();
    let outcome = Outcome::Response {
        rcode: u8::try_from(flags & 0x000f).unwrap_or(0),
        truncated: flags & 0x0200 != 0,
        addresses,
        other_records,
    };
    Ok((id, outcome))
}

struct Reader<'a> {
    packet: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at + n;
        let bytes = self
            .packet
            .get(self.at..end)
            .ok_or_else(|| format!("packet ends at {} (wanted {end})", self.packet.len()))?;
        self.at = end;
        Ok(bytes)
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        self.take(n).map(|_| ())
    }

    fn u16(&mut self) -> Result<u16, String> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn skip_name(&mut self) -> Result<(), String> {
        loop {
            let length = self.take(1)?[0];
            match length {
                0 => return Ok(()),
                l if l & 0xc0 == 0xc0 => return self.skip(1),
                l => self.skip(usize::from(l))?,
            }
        }
    }
}

/// A period in which the server process was down (from just before the kill until
/// the restarted process announced READY).
#[derive(Clone, Copy, Debug)]
pub struct Down {
    pub from: Instant,
    pub until: Instant,
}

/// How one sample is judged.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    Steady,
    /// NXDOMAIN/NODATA, or served addresses, for a name being created.
    Allowed,
    /// Unanswered while the server was down.
    Down,
    Deviation(String),
}

/// The judgement of a run: per target the counts, and every failing sample.
pub struct Judgement {
    pub report: String,
    pub deviations: usize,
}

impl Judgement {
    pub fn passed(&self) -> bool {
        self.deviations == 0
    }
}

/// Judges the samples sent at or after `since` against each target's expectation.
/// A query may go unanswered only if it was in flight during one of the `down`
/// windows; everything else that is not the steady state (or, for a created name,
/// allowed) is a deviation. The report has per-target counts and up to `examples`
/// failing samples per target.
pub fn judge(
    prober_targets: &[Target],
    started: Instant,
    samples: &[Sample],
    since: Instant,
    down: &[Down],
    examples: usize,
) -> Judgement {
    let mut report = String::new();
    let mut total_deviations = 0;
    for (index, target) in prober_targets.iter().enumerate() {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut failures: Vec<(f64, String)> = Vec::new();
        let mut seen_address = false;
        let mut queries = 0;
        for sample in samples
            .iter()
            .filter(|s| s.target == index && s.sent >= since)
        {
            queries += 1;
            let verdict = verdict(target, sample, down, &mut seen_address);
            let key = match &verdict {
                Verdict::Steady => "steady".to_string(),
                Verdict::Allowed => format!("allowed: {}", sample.outcome),
                Verdict::Down => "unanswered while down".to_string(),
                Verdict::Deviation(_) => format!("DEVIATION {}", sample.outcome),
            };
            *counts.entry(key).or_default() += 1;
            if let Verdict::Deviation(why) = verdict {
                let at = sample.sent.saturating_duration_since(started).as_secs_f64();
                failures.push((at, why));
            }
        }
        failures.sort_by(|a, b| a.0.total_cmp(&b.0));
        total_deviations += failures.len();
        let steady: Vec<String> = target.steady.iter().map(IpAddr::to_string).collect();
        report.push_str(&format!(
            "{} ({} A, ECS {}/24, steady [{}]{}): {queries} queries, {} deviations\n",
            target.region,
            target.name,
            target.subnet,
            steady.join(", "),
            if target.new_on_port.is_some() {
                ", created while probing"
            } else {
                ""
            },
            failures.len(),
        ));
        for (key, count) in &counts {
            report.push_str(&format!("    {count:>6}  {key}\n"));
        }
        if !failures.is_empty() {
            let first = failures.first().map(|f| f.0).unwrap_or_default();
            let last = failures.last().map(|f| f.0).unwrap_or_default();
            report.push_str(&format!(
                "    deviations from t=+{first:.3}s to t=+{last:.3}s; e.g.\n"
            ));
            for (at, why) in spread(&failures, examples) {
                report.push_str(&format!("      t=+{at:.3}s {why}\n"));
            }
        }
    }
    for window in down {
        report.push_str(&format!(
            "server down from t=+{:.3}s to t=+{:.3}s\n",
            window.from.saturating_duration_since(started).as_secs_f64(),
            window
                .until
                .saturating_duration_since(started)
                .as_secs_f64(),
        ));
    }
    Judgement {
        report,
        deviations: total_deviations,
    }
}

/// Up to `n` items spread over `items` (first, last and evenly between).
fn spread<T: Clone>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n || n < 2 {
        return items.iter().take(n.max(1)).cloned().collect();
    }
    (0..n)
        .map(|i| items[i * (items.len() - 1) / (n - 1)].clone())
        .collect()
}

fn verdict(target: &Target, sample: &Sample, down: &[Down], seen_address: &mut bool) -> Verdict {
    let outcome = &sample.outcome;
    if let Outcome::Unanswered(why) = outcome {
        let in_flight_while_down = down
            .iter()
            .any(|w| sample.sent <= w.until && sample.done >= w.from);
        return if in_flight_while_down {
            Verdict::Down
        } else {
            Verdict::Deviation(format!("{outcome} while the server was up ({why})"))
        };
    }
    if is_steady(target, outcome) {
        if target.new_on_port.is_some() {
            *seen_address = true;
            if !sample.not_serving.is_empty() {
                return Verdict::Deviation(format!(
                    "{outcome}, but {:?} did not accept TCP",
                    sample.not_serving
                ));
            }
        }
        return Verdict::Steady;
    }
    let Some(port) = target.new_on_port else {
        return Verdict::Deviation(outcome.to_string());
    };
    match outcome {
        Outcome::Response {
            rcode: 0,
            truncated: false,
            addresses,
            other_records: 0,
        } if !addresses.is_empty() => {
            *seen_address = true;
            if sample.not_serving.is_empty() {
                Verdict::Allowed
            } else {
                Verdict::Deviation(format!(
                    "{outcome}, but {:?} did not accept TCP on port {port}",
                    sample.not_serving
                ))
            }
        }
        _ if (outcome.is_nodata() || outcome.is_nxdomain()) && !*seen_address => Verdict::Allowed,
        _ if outcome.is_nodata() || outcome.is_nxdomain() => Verdict::Deviation(format!(
            "{outcome} after the name was answered with addresses"
        )),
        _ => Verdict::Deviation(outcome.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_encodes_and_a_response_parses() {
        let query = Query::new(0x1234, "geo.fedingress.test", TYPE_A)
            .edns(Edns::Ecs(Ipv4Addr::new(10, 1, 2, 0)))
            .encode();
        assert_eq!(&query[..2], &[0x12, 0x34]);
        // A response: the query with QR set, one A answer by compression pointer.
        let mut response = query[..12].to_vec();
        response[2] = 0x84; // QR AA
        response[7] = 1; // AN=1
        response[11] = 0; // AR=0
        let question_end = query.len() - 22; // the OPT RR: 11 bytes + an 11-byte option
        response.extend_from_slice(&query[12..question_end]);
        response.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 127, 0, 51, 11]);
        let (id, outcome) = parse_response(&response).unwrap();
        assert_eq!(id, 0x1234);
        assert_eq!(outcome.to_string(), "NOERROR [127.0.51.11]");
        response[3] = 3;
        response[7] = 0;
        response.truncate(question_end);
        assert_eq!(parse_response(&response).unwrap().1.to_string(), "NXDOMAIN");
        response[3] = 0;
        assert_eq!(parse_response(&response).unwrap().1.to_string(), "NODATA");
        assert!(parse_response(&response[..5]).is_err());
    }
}
