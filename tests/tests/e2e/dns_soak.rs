//! The embedded DNS server under hostile input (issue 12): a real federation-apiserver
//! with a zone, two clusters and a FederatedIngress gets 1,000,000 structure-aware
//! random and mutated datagrams over UDP and thousands of messages over TCP (framed,
//! pipelined, and with broken framing); afterwards it is alive, its objects are
//! unchanged and well-formed queries over UDP and TCP get the right answers. Also:
//! response-rate limiting drops and slips over the limit from one source while an exempt
//! source is answered, and ECS from an untrusted source does not steer.
//!
//! Messages are generated with `arbitrary` from a seeded PRNG (`DNS_SOAK_SEED` replays
//! a run; the seed is printed): real header, question, record, OPT and ECS structure,
//! with count lies, compression-pointer loops, reserved label types and length-field
//! lies built in, then mutated byte-wise on every send (bit flips, truncation, huge
//! counts, pointer loops, garbage tails). Sending is paced by the replies (a window of
//! datagrams in flight), never by timing; the count and the packets are fixed by the
//! seed. Own loopback blocks 93 and 94.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use fedingress_tests::dnsprobe::{Outcome, parse_response};
use fedingress_tests::echo::Echo;
use fedingress_tests::federation::{
    ClusterSpec, HubProcess, agent_config, create_cluster, curl_json, issue_token, kubectl,
    start_agent, start_hub_with,
};
use fedingress_tests::{Kubectl, Process, eventually};
use fedingress_testsupport::dns::dig_short;
use fedingress_testsupport::dns::{Edns, Query, TYPE_A};

const WAIT: Duration = Duration::from_secs(60);
/// Datagrams sent in the UDP soak.
const UDP_PACKETS: usize = 1_000_000;
/// Well-formed-looking messages sent over TCP, pipelined on `TCP_CONNECTIONS`.
const TCP_MESSAGES: usize = 20_000;
const TCP_CONNECTIONS: usize = 200;
/// Connections with broken framing.
const TCP_BROKEN: usize = 300;
/// Structured messages generated up front; every send mutates one of them.
const POOL: usize = 20_000;
/// Datagrams that may await their reply at once.
const WINDOW: usize = 64;

/// A zone, and a location table: 10.1/16 Europe, 10.2/16 US east; default Europe.
fn dns_config(block: u8, extra: &str) -> String {
    format!(
        "dns:
  listen: 127.0.{block}.1:0
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
    soa: {{mname: ns1.fedingress.test, rname: hostmaster.fedingress.test, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}
  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
    table:
    - {{cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}}
    - {{cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}}
{extra}"
    )
}

/// A hub with two clusters (c1 Europe, c2 US) and the Geo ingress `soak`.
struct Federation {
    hub: HubProcess,
    k: Kubectl,
    dns: SocketAddr,
    specs: Vec<ClusterSpec>,
    _agents: Vec<Process>,
    _echoes: Vec<Echo>,
}

fn start(dir: &Path, block: u8, extra: &str) -> Federation {
    let hub = start_hub_with(dir, block, &dns_config(block, extra));
    let dns: SocketAddr = hub.process.addr("dns").parse().unwrap();
    let k = kubectl(dir, &hub.api);
    let specs = vec![
        ClusterSpec::numbered(block, 1, "europe-west1", 50.4, 3.8),
        ClusterSpec::numbered(block, 2, "us-east1", 39.0, -77.5),
    ];
    let mut agents = Vec::new();
    let mut echoes = Vec::new();
    for spec in &specs {
        echoes.push(Echo::start(spec.backend).unwrap());
        create_cluster(&k, dir, spec);
        let (_, token) = issue_token(&hub.api, &spec.name).unwrap();
        agents.push(start_agent(
            &agent_config(dir, &hub.agent, spec, &token),
            &spec.name,
        ));
    }
    let path = dir.join("soak.yaml");
    std::fs::write(
        &path,
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: soak\nspec:\n  rules:\n  - protocol: TCP\n    port: 7100\n    name: echo\n    backend: {service: echo, port: 9000}\n  - protocol: UDP\n    port: 7100\n    name: echo\n    backend: {service: echo, port: 9000}\n  traffic:\n    dnsName: soak.fedingress.test\n    ttl: 5\n    strategy: {type: Geo}\n",
    )
    .unwrap();
    k.ok(&["apply", "-f", &path.display().to_string()]);
    let f = Federation {
        hub,
        k,
        dns,
        specs,
        _agents: agents,
        _echoes: echoes,
    };
    let (eu, us) = (f.ip(0), f.ip(1));
    eventually(WAIT, "Geo answers for both regions", || {
        let got = (
            f.dig(&["soak.fedingress.test", "+subnet=10.1.0.0/24"]),
            f.dig(&["soak.fedingress.test", "+subnet=10.2.0.0/24"]),
        );
        if got == (vec![eu.clone()], vec![us.clone()]) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    f
}

impl Federation {
    fn ip(&self, n: usize) -> String {
        self.specs[n].bind.to_string()
    }

    /// `dig +short` from 127.0.0.1.
    fn dig(&self, args: &[&str]) -> Vec<String> {
        dig_short(self.dns, args)
    }

    /// The Clusters and FederatedIngresses as (kind, name, uid, spec).
    fn objects(&self) -> Vec<String> {
        let mut out = Vec::new();
        for path in [
            "/apis/fedingress.io/v1alpha1/clusters",
            "/apis/fedingress.io/v1alpha1/federatedingresses",
        ] {
            let list = curl_json(&[&format!("{}{path}", self.hub.api)]).unwrap();
            for item in list["items"].as_array().unwrap() {
                out.push(format!(
                    "{path} {} {} {}",
                    item["metadata"]["name"], item["metadata"]["uid"], item["spec"]
                ));
            }
        }
        out.sort();
        out
    }

    /// The sum of a counter family's series on the hub's /metrics whose labels contain
    /// `labels`.
    fn metric(&self, family: &str, labels: &str) -> u64 {
        let out = Command::new("curl")
            .args(["-sS", &format!("{}/metrics", self.hub.api)])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(family) && l.contains(labels))
            .filter(|l| l[family.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

// ---------------------------------------------------------------------------------
// Structure-aware generation

/// splitmix64: the seeded source of every random byte.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

const LABELS: &[&[u8]] = &[
    b"soak",
    b"fedingress",
    b"test",
    b"ns1",
    b"_echo",
    b"_tcp",
    b"_udp",
    b"c1",
    b"c2",
    b"SoAk",
    b"*",
    b"www",
];

#[derive(Arbitrary, Debug)]
enum Label {
    Known(u8),
    Random(Vec<u8>),
    /// A label of this length (up to 255: beyond 63 is a reserved label type).
    Long(u8),
}

#[derive(Arbitrary, Debug)]
enum NameEnd {
    Root,
    Root2,
    /// A compression pointer to this offset.
    Pointer(u16),
    /// A pointer to the name's own start: a loop.
    Loop,
    /// A label byte with a reserved type (0x40 or 0x80).
    Reserved(bool),
    /// Nothing: the name runs into what follows.
    Unterminated,
}

#[derive(Arbitrary, Debug)]
struct Name {
    labels: Vec<Label>,
    end: NameEnd,
}

#[derive(Arbitrary, Debug)]
enum Type {
    A,
    Aaaa,
    Srv,
    Soa,
    Ns,
    Any,
    Axfr,
    Ixfr,
    Txt,
    Opt,
    Raw(u16),
}

#[derive(Arbitrary, Debug)]
enum Class {
    In,
    In2,
    Chaos,
    Any,
    Raw(u16),
}

#[derive(Arbitrary, Debug)]
struct Question {
    name: Name,
    qtype: Type,
    class: Class,
}

#[derive(Arbitrary, Debug)]
struct Record {
    name: Name,
    rtype: Type,
    class: Class,
    ttl: u32,
    rdata: Vec<u8>,
    /// Added to the real RDLENGTH.
    rdlength_lie: Option<i8>,
}

#[derive(Arbitrary, Debug)]
enum Family {
    V4,
    V6,
    Zero,
    Raw(u16),
}

#[derive(Arbitrary, Debug)]
enum EdnsOption {
    /// ECS with the address length its prefix needs.
    Ecs {
        family: Family,
        source: u8,
        scope: u8,
    },
    /// ECS with whatever address bytes.
    EcsRaw {
        family: Family,
        source: u8,
        scope: u8,
        address: Vec<u8>,
    },
    Cookie(Vec<u8>),
    Padding(u8),
    Raw {
        code: u16,
        data: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
struct Opt {
    payload: u16,
    ext_rcode: u8,
    /// Version 0 unless set.
    version: Option<u8>,
    dnssec_ok: bool,
    options: Vec<EdnsOption>,
    /// Added to each option's and the record's real length.
    length_lie: Option<i8>,
    non_root_owner: bool,
}

#[derive(Arbitrary, Debug)]
enum Counts {
    Real,
    Real2,
    Real3,
    Lie([u16; 4]),
    Huge,
}

#[derive(Arbitrary, Debug)]
struct Message {
    id: u16,
    /// A response (QR) only when both are set.
    qr: (bool, bool),
    opcode: u8,
    flag_bits: u8,
    questions: Vec<Question>,
    answers: Vec<Record>,
    additional: Vec<Record>,
    opt: Option<Opt>,
    counts: Counts,
}

fn type_code(t: &Type) -> u16 {
    match t {
        Type::A => 1,
        Type::Aaaa => 28,
        Type::Srv => 33,
        Type::Soa => 6,
        Type::Ns => 2,
        Type::Any => 255,
        Type::Axfr => 252,
        Type::Ixfr => 251,
        Type::Txt => 16,
        Type::Opt => 41,
        Type::Raw(code) => *code,
    }
}

fn class_code(c: &Class) -> u16 {
    match c {
        Class::In | Class::In2 => 1,
        Class::Chaos => 3,
        Class::Any => 255,
        Class::Raw(code) => *code,
    }
}

fn lie(len: usize, by: Option<i8>) -> u16 {
    let len = i64::try_from(len).unwrap_or(0) + i64::from(by.unwrap_or(0));
    len.clamp(0, 0xFFFF) as u16
}

fn put_name(out: &mut Vec<u8>, name: &Name) {
    let start = out.len();
    for label in name.labels.iter().take(8) {
        match label {
            Label::Known(i) => {
                let label = LABELS[usize::from(*i) % LABELS.len()];
                out.push(label.len() as u8);
                out.extend_from_slice(label);
            }
            Label::Random(bytes) => {
                let bytes = &bytes[..bytes.len().min(63)];
                out.push(bytes.len() as u8);
                out.extend_from_slice(bytes);
            }
            Label::Long(len) => {
                out.push(*len);
                out.extend(std::iter::repeat_n(b'a', usize::from(*len & 0x3F)));
            }
        }
    }
    match name.end {
        NameEnd::Root | NameEnd::Root2 => out.push(0),
        NameEnd::Pointer(to) => out.extend_from_slice(&(0xC000 | (to & 0x3FFF)).to_be_bytes()),
        NameEnd::Loop => out.extend_from_slice(&(0xC000 | (start as u16 & 0x3FFF)).to_be_bytes()),
        NameEnd::Reserved(high) => out.push(if high { 0x80 } else { 0x40 }),
        NameEnd::Unterminated => {}
    }
}

fn put_opt(out: &mut Vec<u8>, opt: &Opt) {
    out.push(if opt.non_root_owner { 1 } else { 0 });
    if opt.non_root_owner {
        out.extend_from_slice(b"a\0");
    }
    out.extend_from_slice(&41u16.to_be_bytes());
    out.extend_from_slice(&opt.payload.to_be_bytes());
    out.push(opt.ext_rcode);
    out.push(opt.version.unwrap_or(0));
    out.push(if opt.dnssec_ok { 0x80 } else { 0 });
    out.push(0);
    let mut rdata = Vec::new();
    for option in opt.options.iter().take(4) {
        let (code, data) = match option {
            EdnsOption::Ecs {
                family,
                source,
                scope,
            } => {
                let (family, max) = match family {
                    Family::V4 => (1, 32),
                    Family::V6 => (2, 128),
                    Family::Zero => (0, 0),
                    Family::Raw(f) => (*f, 128),
                };
                let source = if max == 0 { 0 } else { source % (max + 1) };
                let mut data = family.to_be_bytes().to_vec();
                data.extend_from_slice(&[source, *scope]);
                data.extend(std::iter::repeat_n(10u8, usize::from(source).div_ceil(8)));
                (8, data)
            }
            EdnsOption::EcsRaw {
                family,
                source,
                scope,
                address,
            } => {
                let family: u16 = match family {
                    Family::V4 => 1,
                    Family::V6 => 2,
                    Family::Zero => 0,
                    Family::Raw(f) => *f,
                };
                let mut data = family.to_be_bytes().to_vec();
                data.extend_from_slice(&[*source, *scope]);
                data.extend_from_slice(&address[..address.len().min(20)]);
                (8, data)
            }
            EdnsOption::Cookie(bytes) => (10, bytes[..bytes.len().min(40)].to_vec()),
            EdnsOption::Padding(len) => (12, vec![0; usize::from(*len)]),
            EdnsOption::Raw { code, data } => (*code, data[..data.len().min(40)].to_vec()),
        };
        rdata.extend_from_slice(&code.to_be_bytes());
        rdata.extend_from_slice(&lie(data.len(), opt.length_lie).to_be_bytes());
        rdata.extend_from_slice(&data);
    }
    out.extend_from_slice(&lie(rdata.len(), opt.length_lie).to_be_bytes());
    out.extend_from_slice(&rdata);
}

fn put_record(out: &mut Vec<u8>, record: &Record) {
    put_name(out, &record.name);
    out.extend_from_slice(&type_code(&record.rtype).to_be_bytes());
    out.extend_from_slice(&class_code(&record.class).to_be_bytes());
    out.extend_from_slice(&record.ttl.to_be_bytes());
    let rdata = &record.rdata[..record.rdata.len().min(64)];
    out.extend_from_slice(&lie(rdata.len(), record.rdlength_lie).to_be_bytes());
    out.extend_from_slice(rdata);
}

fn encode(message: &Message) -> Vec<u8> {
    let questions = &message.questions[..message.questions.len().min(3)];
    let answers = &message.answers[..message.answers.len().min(3)];
    let additional = &message.additional[..message.additional.len().min(2)];
    let mut out = message.id.to_be_bytes().to_vec();
    let qr = if message.qr.0 && message.qr.1 {
        0x80
    } else {
        0
    };
    out.push(qr | ((message.opcode % 16) << 3) | (message.flag_bits & 0x07));
    out.push(message.flag_bits & 0xF0);
    let real = [
        questions.len() as u16,
        answers.len() as u16,
        0,
        (additional.len() + usize::from(message.opt.is_some())) as u16,
    ];
    let counts = match &message.counts {
        Counts::Real | Counts::Real2 | Counts::Real3 => real,
        Counts::Lie(counts) => *counts,
        Counts::Huge => [0xFFFF; 4],
    };
    for count in counts {
        out.extend_from_slice(&count.to_be_bytes());
    }
    for question in questions {
        put_name(&mut out, &question.name);
        out.extend_from_slice(&type_code(&question.qtype).to_be_bytes());
        out.extend_from_slice(&class_code(&question.class).to_be_bytes());
    }
    for record in answers {
        put_record(&mut out, record);
    }
    for record in additional {
        put_record(&mut out, record);
    }
    if let Some(opt) = &message.opt {
        put_opt(&mut out, opt);
    }
    out
}

/// `POOL` messages from `arbitrary` over seeded random bytes; most are plain queries
/// for names of the zone (a fresh message of random bytes mostly fails early).
fn pool(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut bytes = vec![0u8; 512];
    (0..POOL)
        .map(|_| {
            rng.fill(&mut bytes);
            let len = 16 + rng.below(bytes.len() - 16);
            let mut u = Unstructured::new(&bytes[..len]);
            match Message::arbitrary(&mut u) {
                Ok(message) => encode(&message),
                Err(_) => bytes[..len].to_vec(),
            }
        })
        .collect()
}

/// Mutates `packet` in place: nothing, bit flips, truncation, huge counts, a pointer
/// loop, a garbage tail, or a random packet.
fn mutate(rng: &mut Rng, packet: &mut Vec<u8>) {
    match rng.below(10) {
        0..=2 => {}
        3 | 4 => {
            for _ in 0..=rng.below(4) {
                if !packet.is_empty() {
                    let at = rng.below(packet.len());
                    packet[at] ^= 1 << rng.below(8);
                }
            }
        }
        5 => {
            let len = rng.below(packet.len() + 1);
            packet.truncate(len);
        }
        6 => {
            if packet.len() >= 12 {
                let at = 4 + 2 * rng.below(4);
                packet[at] = 0xFF;
                packet[at + 1] = 0xFF;
            }
        }
        7 => {
            // A compression pointer to itself, or to the header, at a random offset.
            if packet.len() > 13 {
                let at = 12 + rng.below(packet.len() - 13);
                let to = if rng.below(2) == 0 { at as u16 } else { 12 };
                packet[at..at + 2].copy_from_slice(&(0xC000 | (to & 0x3FFF)).to_be_bytes());
            }
        }
        8 => {
            let mut tail = vec![0u8; rng.below(64)];
            rng.fill(&mut tail);
            packet.extend_from_slice(&tail);
        }
        _ => {
            packet.resize(rng.below(600), 0);
            rng.fill(packet);
        }
    }
}

/// Whether the server answers this datagram (it drops those shorter than a header and
/// responses): what the sender's window counts on.
fn expects_reply(packet: &[u8]) -> bool {
    packet.len() >= 12 && packet[2] & 0x80 == 0
}

/// Sends `count` mutated datagrams from `pool`, at most `WINDOW` awaiting replies.
/// Returns (sent, replies received, window resets after a silence).
fn udp_soak(
    server: SocketAddr,
    pool: &[Vec<u8>],
    rng: &mut Rng,
    count: usize,
) -> (usize, usize, usize) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(server).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (mut sent, mut received, mut resets, mut in_flight) = (0, 0, 0, 0usize);
    let mut packet = Vec::with_capacity(1024);
    let mut reply = [0u8; 4096];
    while sent < count {
        while in_flight < WINDOW && sent < count {
            packet.clear();
            packet.extend_from_slice(&pool[rng.below(pool.len())]);
            mutate(rng, &mut packet);
            // A send error (ICMP from an earlier reply) is not the server's problem.
            let _ = socket.send(&packet);
            sent += 1;
            if expects_reply(&packet) {
                in_flight += 1;
            }
        }
        match socket.recv(&mut reply) {
            Ok(_) => {
                received += 1;
                in_flight = in_flight.saturating_sub(1);
            }
            Err(_) => {
                // Nothing for a while: whatever is still out was lost or not answered.
                resets += 1;
                in_flight = 0;
            }
        }
    }
    (sent, received, resets)
}

fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = (message.len().min(0xFFFF) as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&message[..message.len().min(0xFFFF)]);
    out
}

/// Pipelines `per_connection` framed mutated messages on each of `connections`
/// connections, then sends broken framing on `broken` more. Returns the bytes read back.
fn tcp_soak(
    server: SocketAddr,
    pool: &[Vec<u8>],
    rng: &mut Rng,
    connections: usize,
    per_connection: usize,
    broken: usize,
) -> usize {
    let mut read_back = 0;
    let mut packet = Vec::new();
    for _ in 0..connections {
        let mut stream = TcpStream::connect(server).unwrap();
        let mut batch = Vec::new();
        for _ in 0..per_connection {
            packet.clear();
            packet.extend_from_slice(&pool[rng.below(pool.len())]);
            mutate(rng, &mut packet);
            batch.extend_from_slice(&framed(&packet));
        }
        let reader = {
            let mut stream = stream.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut all = Vec::new();
                let _ = stream.read_to_end(&mut all);
                all.len()
            })
        };
        let _ = stream.write_all(&batch);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        read_back += reader.join().unwrap();
    }
    for i in 0..broken {
        let mut stream = TcpStream::connect(server).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        packet.clear();
        packet.extend_from_slice(&pool[rng.below(pool.len())]);
        let bytes: Vec<u8> = match i % 5 {
            // The length promises more than comes.
            0 => {
                let mut b = ((packet.len() + 100).min(0xFFFF) as u16)
                    .to_be_bytes()
                    .to_vec();
                b.extend_from_slice(&packet);
                b
            }
            // Zero-length messages, then a real one.
            1 => [&[0u8, 0, 0, 0][..], &framed(&packet)].concat(),
            // Half a length prefix.
            2 => vec![0x01],
            // The largest length and a little data.
            3 => [&[0xFFu8, 0xFF][..], &packet].concat(),
            // A message split over two writes with a length that is too short.
            _ => {
                let mut b = ((packet.len() / 2) as u16).to_be_bytes().to_vec();
                b.extend_from_slice(&packet);
                b
            }
        };
        let _ = stream.write_all(&bytes);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        // The server closes on EOF: a read that ends proves it let go.
        let _ = stream.read_to_end(&mut sink);
        read_back += sink.len();
    }
    read_back
}

/// One A query over TCP; the answer's addresses.
fn tcp_query(server: SocketAddr, name: &str, subnet: Ipv4Addr) -> Vec<IpAddr> {
    let mut stream = TcpStream::connect(server).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&framed(
            &Query::new(77, name, TYPE_A)
                .edns(Edns::Ecs(subnet))
                .encode(),
        ))
        .unwrap();
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).unwrap();
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut reply).unwrap();
    match parse_response(&reply).unwrap().1 {
        Outcome::Response { addresses, .. } => addresses,
        other => panic!("{other:?}"),
    }
}

fn seed() -> u64 {
    std::env::var("DNS_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[test]
fn a_million_hostile_packets_leave_dns_and_the_store_intact() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut f = start(dir, 93, "");
    let before = f.objects();
    let seed = seed();
    eprintln!("dns_soak: DNS_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let started = Instant::now();
    let pool = pool(&mut rng);
    let generated = started.elapsed();
    let udp_before = f.metric("fedingress_dns_queries_total", "transport=\"udp\"")
        + f.metric("fedingress_dns_dropped_total", "transport=\"udp\"");

    let (sent, received, resets) = udp_soak(f.dns, &pool, &mut rng, UDP_PACKETS);
    let udp_time = started.elapsed() - generated;
    assert!(
        f.hub.process.is_running(),
        "the apiserver died during the UDP soak"
    );
    let tcp_started = Instant::now();
    let read_back = tcp_soak(
        f.dns,
        &pool,
        &mut rng,
        TCP_CONNECTIONS,
        TCP_MESSAGES / TCP_CONNECTIONS,
        TCP_BROKEN,
    );
    let tcp_time = tcp_started.elapsed();
    assert!(
        f.hub.process.is_running(),
        "the apiserver died during the TCP soak"
    );
    let udp_handled = f.metric("fedingress_dns_queries_total", "transport=\"udp\"")
        + f.metric("fedingress_dns_dropped_total", "transport=\"udp\"")
        - udp_before;
    let tcp_handled = f.metric("fedingress_dns_queries_total", "transport=\"tcp\"")
        + f.metric("fedingress_dns_dropped_total", "transport=\"tcp\"");
    eprintln!(
        "dns_soak: pool of {POOL} generated in {generated:?}; UDP: {sent} sent, {received} replies, {resets} window resets, {udp_handled} handled by the server in {udp_time:?}; TCP: {TCP_MESSAGES} messages on {TCP_CONNECTIONS} connections and {TCP_BROKEN} broken ones, {read_back} bytes back, {tcp_handled} handled, in {tcp_time:?}"
    );
    assert_eq!(sent, UDP_PACKETS);
    // Paced by replies, nearly every datagram reaches the server (a few may be lost to
    // a full socket buffer while the window waits).
    assert!(
        udp_handled * 10 >= sent as u64 * 9,
        "only {udp_handled} of {sent} datagrams were handled"
    );
    assert!(tcp_handled > 0 && read_back > 0);

    // Alive, the store unchanged, and well-formed queries answered correctly.
    assert!(f.hub.process.is_running());
    assert_eq!(f.objects(), before, "objects changed under DNS garbage");
    let (eu, us) = (f.ip(0), f.ip(1));
    assert_eq!(
        f.dig(&["soak.fedingress.test", "+subnet=10.1.0.0/24"]),
        vec![eu.clone()]
    );
    assert_eq!(
        f.dig(&["soak.fedingress.test", "+subnet=10.2.0.0/24"]),
        vec![us.clone()]
    );
    assert_eq!(
        f.dig(&["+tcp", "soak.fedingress.test", "+subnet=10.2.0.0/24"]),
        vec![us.clone()]
    );
    assert_eq!(
        tcp_query(f.dns, "soak.fedingress.test", Ipv4Addr::new(10, 1, 0, 0)),
        vec![eu.parse::<IpAddr>().unwrap()]
    );
    assert_eq!(f.dig(&["fedingress.test", "SOA"]).len(), 1);
    assert_eq!(
        f.dig(&[
            "_echo._tcp.soak.fedingress.test",
            "SRV",
            "+subnet=10.2.0.0/24"
        ])
        .len(),
        1
    );
    // The REST API still answers too.
    f.k.ok(&["get", "federatedingresses"]);
}

/// One query from `from` (a loopback address): its outcome, or `None` when nothing
/// came back within a second.
fn ask_from(from: &str, server: SocketAddr, packet: &[u8]) -> Option<Outcome> {
    let socket = UdpSocket::bind(format!("{from}:0")).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    socket.send_to(packet, server).unwrap();
    let mut reply = [0u8; 4096];
    let len = socket.recv(&mut reply).ok()?;
    Some(parse_response(&reply[..len]).unwrap().1)
}

#[test]
fn rrl_drops_and_slips_one_source_and_untrusted_ecs_does_not_steer() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // Buckets per source address (/32) holding 5 responses, refilled at 1/s. Only
    // 127.0.94.2 is exempt; it and 127.0.0.1 (dig, while start() waits for the Geo
    // answers) are the trusted resolvers.
    let f = start(
        dir,
        94,
        "  rrl: {responsesPerSecond: 1, burst: 5, slip: 2, ipv4PrefixLength: 32, exempt: [127.0.94.2/32]}\n  ecs: {trustedResolvers: [127.0.94.2/32, 127.0.0.1/32]}\n",
    );
    let (eu, us): (IpAddr, IpAddr) = (f.ip(0).parse().unwrap(), f.ip(1).parse().unwrap());
    let us_query = Query::new(1, "soak.fedingress.test", TYPE_A)
        .edns(Edns::Ecs(Ipv4Addr::new(10, 2, 0, 0)))
        .encode();

    // ECS from an untrusted source does not steer: 127.0.94.3 is not in the table, so
    // it gets the default location's (Europe's) answer whatever subnet it claims.
    let from_untrusted = ask_from("127.0.94.3", f.dns, &us_query).unwrap();
    assert!(
        matches!(&from_untrusted, Outcome::Response { addresses, .. } if addresses == &vec![eu]),
        "{from_untrusted:?}"
    );
    let from_trusted = ask_from("127.0.94.2", f.dns, &us_query).unwrap();
    assert!(
        matches!(&from_trusted, Outcome::Response { addresses, .. } if addresses == &vec![us]),
        "{from_trusted:?}"
    );
    assert!(f.metric("fedingress_dns_ecs_untrusted_total", "transport=\"udp\"") >= 1);

    // 40 queries at once from 127.0.94.4: the burst of 5 answered (and one more per
    // second the sending takes), the rest over the limit: dropped, every second one
    // sent truncated.
    let slipped_before = f.metric("fedingress_dns_rrl_responses_total", "action=\"slipped\"");
    let dropped_before = f.metric("fedingress_dns_rrl_responses_total", "action=\"dropped\"");
    let socket = UdpSocket::bind("127.0.94.4:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    for _ in 0..40 {
        socket.send_to(&us_query, f.dns).unwrap();
    }
    let (mut answered, mut truncated) = (0usize, 0usize);
    let mut reply = [0u8; 4096];
    while let Ok(len) = socket.recv(&mut reply) {
        match parse_response(&reply[..len]).unwrap().1 {
            Outcome::Response {
                truncated: true,
                addresses,
                ..
            } => {
                assert!(addresses.is_empty());
                truncated += 1;
            }
            Outcome::Response { .. } => answered += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!((5..=10).contains(&answered), "{answered} answered");
    let dropped = 40 - answered - truncated;
    assert!(
        truncated >= 10 && dropped >= 10 && truncated.abs_diff(dropped) <= 1,
        "{truncated} truncated, {dropped} dropped"
    );
    let slipped =
        f.metric("fedingress_dns_rrl_responses_total", "action=\"slipped\"") - slipped_before;
    let rrl_dropped =
        f.metric("fedingress_dns_rrl_responses_total", "action=\"dropped\"") - dropped_before;
    assert_eq!((slipped, rrl_dropped), (truncated as u64, dropped as u64));

    // Meanwhile the exempt source is answered every time, and TCP from the limited one.
    for _ in 0..20 {
        let outcome = ask_from("127.0.94.2", f.dns, &us_query).unwrap();
        assert!(
            matches!(&outcome, Outcome::Response { truncated: false, addresses, .. } if addresses == &vec![us]),
            "{outcome:?}"
        );
    }
    let out = Command::new("dig")
        .args([
            "-b",
            "127.0.94.4",
            &format!("@{}", f.dns.ip()),
            "-p",
            &f.dns.port().to_string(),
            "+tcp",
            "+short",
            "+time=5",
            "+tries=1",
            "soak.fedingress.test",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), eu.to_string());
}
