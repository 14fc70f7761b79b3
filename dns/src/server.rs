//! The embedded authoritative DNS server: UDP and TCP, answering from the current
//! [`Snapshot`], which [`DnsServer::swap`] replaces atomically (arc-swap: the query
//! path takes no lock).
//!
//! # Query path
//!
//! Every packet is first read by a strict hand-written parser (`server/wire.rs`): header,
//! questions, records, the OPT record and its EDNS Client Subnet option (validated as
//! RFC 7871 asks).
//!
//! - **Fast path**: a standard query with exactly one IN question of type A, AAAA or
//!   SRV and at most an OPT record, for a name the snapshot holds. The response is the
//!   snapshot's pre-encoded one for (name, type, location bucket of the ECS address or
//!   else the source address), copied with the ID, flags (QR, AA; OPCODE, RD and CD
//!   copied), counts and the question's letter case patched, plus an OPT record that
//!   echoes the ECS option with its SCOPE prefix (the located prefix length for
//!   location-dependent answers, 0 otherwise, and 0 when the query's source prefix is
//!   0; RFC 7871 §7.2.1). NODATA for these types at the names of an ingress (an AAAA
//!   question for an IPv4-only name: half of real traffic) is pre-encoded too. Measured
//!   here with dnsperf (2 cores shared with dnsperf, release build): about 250k
//!   queries/s, with or without ECS.
//! - **Slow path**: everything else, parsed with hickory-proto (`Message::from_vec`)
//!   and answered with responses built from hickory types: NXDOMAIN, NODATA for other
//!   types, SOA/NS at the apex, CNAME for any type at a CNAME name, ANY (RFC 8482: one
//!   HINFO `"RFC8482"`), AXFR/IXFR, REFUSED outside the zones (and for non-IN classes),
//!   NOTIMP for other opcodes, BADVERS for EDNS versions above 0, FORMERR for malformed
//!   queries whose header is readable. Packets shorter than a header and responses are
//!   dropped.
//!
//! # Size limits
//!
//! A UDP response may be as large as the client's EDNS payload size (at least 512, at
//! most 1232, DNS flag day 2020), or 512 without EDNS. A larger one first loses its
//! additional section (SRV target addresses); if still too large it is sent with TC
//! set, the question and OPT only, so that the client retries over TCP. TCP messages
//! use 2-byte length framing and are limited to 65535 octets; a connection may carry
//! many queries and is closed after `dns.tcp.idleTimeoutSeconds` (10) idle or when one
//! message takes that long to arrive (or to be written); at most
//! `dns.tcp.maxConnections` (1024) are open at once, further ones are closed at once.
//!
//! # Hostile networks
//!
//! - **Response-rate limiting** (`server/rrl.rs`, `dns.rrl`): UDP responses are
//!   charged to token buckets per (source prefix, response class, name); over the
//!   limit they are dropped, every `slip`-th one sent truncated so that real resolvers
//!   retry over TCP, which is never limited.
//! - **ECS from trusted resolvers only** (`dns.ecs.trustedResolvers`): from any other
//!   source the EDNS Client Subnet option does not steer; the answer is for the source
//!   address, with the option echoed at SCOPE PREFIX-LENGTH 0.
//!
//! # Metrics
//!
//! Every message handled is counted in fixed arrays of atomics (nothing allocated per
//! query; one relaxed increment on the fast path, as before the labels existed), by
//! transport, path, query type and response code, plus truncated responses and dropped
//! packets per transport. [`DnsServer::write_prometheus`] renders them in the
//! Prometheus text format; [`DnsServer::stats`] sums them.
//!
//! # Wildcard addresses
//!
//! A UDP socket bound to `0.0.0.0` or `::` answers every query from the address it was
//! sent to (IP_PKTINFO / IPV6_PKTINFO, `server/pktinfo.rs`), so one listener can serve
//! several nameserver addresses of a host: resolvers drop replies from another source
//! address. TCP replies always leave from the connection's own address.
//!
//! # Zone transfers
//!
//! AXFR (and IXFR, answered with a full transfer) over TCP from addresses in
//! `allow_transfer` get every record of the zone between two SOAs, location-dependent
//! names with the default location's answer; anyone else gets REFUSED. Over UDP an
//! allowed client gets TC (retry over TCP).
//!
//! # Why not hickory-server
//!
//! The fast path needs the raw datagram and the socket; the rest is a few hundred lines
//! on hickory-proto. Running hickory-server's `Server` beside it would have meant two
//! socket loops and two places that decide truncation and EDNS; one handler serves
//! both transports here.
//!
//! Never panics on any input; per-packet problems are logged at debug level.

pub mod config;
mod pktinfo;
pub mod rrl;
pub(crate) mod wire;

use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hickory_proto::op::{Message, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::{Record, RecordType};
use ipnet::IpNet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::zone::Snapshot;
use config::ServerConfig;
use rrl::{ResponseClass, Rrl, Verdict};
use wire::{CLASS_IN, OptOut, ParseError, ParseFailure, RawQuery};
/// Largest DNS message over TCP.
const TCP_LIMIT: usize = 65_535;
/// Records per AXFR message (before size checks).
const TRANSFER_CHUNK: usize = 256;

const RCODE_NOTIMP: u8 = 4;
const RCODE_REFUSED: u8 = 5;
const RCODE_NOTAUTH: u8 = 9;
const TYPE_IXFR: u16 = 251;
const TYPE_AXFR: u16 = 252;

/// Binds UDP and TCP on the same address and port, as a DNS server listens. With port 0
/// it looks for a port free for both (a free UDP port may be taken for TCP), up to 20 tries.
pub async fn bind_udp_and_tcp(listen: SocketAddr) -> io::Result<(UdpSocket, TcpListener)> {
    let failed = |what: &str, at: SocketAddr, e: io::Error| {
        io::Error::new(e.kind(), format!("binding DNS ({what}) on {at}: {e}"))
    };
    for _ in 0..20 {
        let udp = UdpSocket::bind(listen)
            .await
            .map_err(|e| failed("UDP", listen, e))?;
        let address = udp.local_addr()?;
        match TcpListener::bind(address).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() != 0 => return Err(failed("TCP", address, e)),
            Err(_) => continue,
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no port free for both UDP and TCP DNS on {}", listen.ip()),
    ))
}

/// The transport a query came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
}

/// Query counters since the server started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Answered from a pre-encoded response.
    pub fast: u64,
    /// Answered by the slow path (including errors).
    pub slow: u64,
    /// Sent with TC set.
    pub truncated: u64,
    /// Not answered (shorter than a header, or a response).
    pub dropped: u64,
}

/// `transport` label values, by [`Transport`] index.
const TRANSPORTS: [&str; 2] = ["udp", "tcp"];
/// `path` label values: 0 fast, 1 slow.
const PATHS: [&str; 2] = ["fast", "slow"];
/// `qtype` label values; the last is every other type (and questions not read).
const QTYPES: [&str; 9] = [
    "A", "AAAA", "SRV", "SOA", "NS", "ANY", "AXFR", "IXFR", "other",
];
/// `rcode` label values; the last is every other code (NOTAUTH, BADVERS, ...).
const RCODES: [&str; 7] = [
    "NOERROR", "NXDOMAIN", "REFUSED", "SERVFAIL", "FORMERR", "NOTIMP", "other",
];
const QUERY_SERIES: usize = TRANSPORTS.len() * PATHS.len() * QTYPES.len() * RCODES.len();

/// `action` label values of the RRL counter: 0 dropped, 1 slipped (sent truncated).
const RRL_ACTIONS: [&str; 2] = ["dropped", "slipped"];

/// Counters with bounded labels: 252 query series, 2 truncated, 2 dropped, 8 RRL, 2
/// untrusted ECS, and the TCP listener's.
struct Counters {
    /// Indexed by [`Counters::index`].
    queries: [AtomicU64; QUERY_SERIES],
    /// By transport.
    truncated: [AtomicU64; 2],
    /// By transport.
    dropped: [AtomicU64; 2],
    /// By response class × action (`class * 2 + action`).
    rrl: [AtomicU64; rrl::CLASSES.len() * RRL_ACTIONS.len()],
    /// Queries whose ECS option was ignored (source not trusted), by transport.
    ecs_untrusted: [AtomicU64; 2],
    /// TCP connections open now.
    tcp_open: AtomicU64,
    /// TCP connections closed at once: `dns.tcp.maxConnections` were open.
    tcp_refused: AtomicU64,
    /// TCP connections closed for idleness (or a message too slow to arrive).
    tcp_idle_closed: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            queries: [const { AtomicU64::new(0) }; QUERY_SERIES],
            truncated: [const { AtomicU64::new(0) }; 2],
            dropped: [const { AtomicU64::new(0) }; 2],
            rrl: [const { AtomicU64::new(0) }; rrl::CLASSES.len() * RRL_ACTIONS.len()],
            ecs_untrusted: [const { AtomicU64::new(0) }; 2],
            tcp_open: AtomicU64::new(0),
            tcp_refused: AtomicU64::new(0),
            tcp_idle_closed: AtomicU64::new(0),
        }
    }
}

fn bump(counter: Option<&AtomicU64>) {
    if let Some(c) = counter {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl Transport {
    fn index(self) -> usize {
        match self {
            Transport::Udp => 0,
            Transport::Tcp => 1,
        }
    }
}

fn qtype_index(qtype: Option<u16>) -> usize {
    match qtype {
        Some(1) => 0,          // A
        Some(28) => 1,         // AAAA
        Some(33) => 2,         // SRV
        Some(6) => 3,          // SOA
        Some(2) => 4,          // NS
        Some(255) => 5,        // ANY
        Some(TYPE_AXFR) => 6,  // AXFR
        Some(TYPE_IXFR) => 7,  // IXFR
        _ => QTYPES.len() - 1, // other
    }
}

fn rcode_index(rcode: u8) -> usize {
    match rcode {
        0 => 0,             // NOERROR
        3 => 1,             // NXDOMAIN
        RCODE_REFUSED => 2, // REFUSED
        2 => 3,             // SERVFAIL
        1 => 4,             // FORMERR
        RCODE_NOTIMP => 5,  // NOTIMP
        _ => RCODES.len() - 1,
    }
}

impl Counters {
    fn index(transport: usize, path: usize, qtype: usize, rcode: usize) -> usize {
        ((transport * PATHS.len() + path) * QTYPES.len() + qtype) * RCODES.len() + rcode
    }

    fn sum(counters: &[AtomicU64], mut keep: impl FnMut(usize) -> bool) -> u64 {
        counters
            .iter()
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .map(|(_, c)| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// The embedded authoritative server. Create it with the first snapshot, [`swap`] in
/// new ones, run [`serve`] (or [`serve_udp`] and [`serve_tcp`]) on bound sockets.
///
/// [`swap`]: DnsServer::swap
/// [`serve`]: DnsServer::serve
/// [`serve_udp`]: DnsServer::serve_udp
/// [`serve_tcp`]: DnsServer::serve_tcp
pub struct DnsServer {
    snapshot: ArcSwap<Snapshot>,
    counters: Counters,
    config: ServerConfig,
    /// `None`: RRL disabled.
    rrl: Option<Rrl>,
    /// RRL's clock starts here.
    epoch: Instant,
}

impl std::fmt::Debug for DnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsServer")
            .field("serial", &self.snapshot.load().serial())
            .field("stats", &self.stats())
            .finish()
    }
}

/// What handling one message produced.
enum Outcome {
    /// The response is in the output buffer.
    Reply,
    /// Nothing to send.
    Drop,
    /// A zone transfer: these messages, in order (TCP only).
    Transfer(Vec<Vec<u8>>),
}

impl DnsServer {
    /// A server with the default [`ServerConfig`] (RRL on, loopback exempt; ECS
    /// trusted from loopback only; 1024 TCP connections, 10 s idle).
    pub fn new(initial: Arc<Snapshot>) -> Self {
        Self::with_config(initial, ServerConfig::default())
    }

    /// A server with `config` (assumed valid: [`ServerConfig::validate`]).
    pub fn with_config(initial: Arc<Snapshot>, config: ServerConfig) -> Self {
        let rrl = config.rrl.enabled.then(|| Rrl::new(config.rrl.clone()));
        DnsServer {
            snapshot: ArcSwap::new(initial),
            counters: Counters::default(),
            config,
            rrl,
            epoch: Instant::now(),
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Serves `snapshot` from now on. Queries in flight finish with the old one.
    pub fn swap(&self, snapshot: Arc<Snapshot>) {
        debug!(serial = snapshot.serial(), "DNS snapshot swapped");
        self.snapshot.store(snapshot);
    }

    /// The snapshot being served.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub fn stats(&self) -> Stats {
        let per_path = QTYPES.len() * RCODES.len();
        let path_of = |i: usize| (i / per_path) % PATHS.len();
        let counters = &self.counters;
        Stats {
            fast: Counters::sum(&counters.queries, |i| path_of(i) == 0),
            slow: Counters::sum(&counters.queries, |i| path_of(i) == 1),
            truncated: Counters::sum(&counters.truncated, |_| true),
            dropped: Counters::sum(&counters.dropped, |_| true),
        }
    }

    /// Appends the counters in the Prometheus text format (0.0.4):
    /// `fedingress_dns_queries_total{transport,path,qtype,rcode}` (series that are
    /// still zero are left out: 252 label combinations exist, few occur),
    /// `fedingress_dns_truncated_total{transport}` and
    /// `fedingress_dns_dropped_total{transport}` (always both transports). Every
    /// family has its `# HELP` and `# TYPE` lines, even with no series.
    pub fn write_prometheus(&self, out: &mut String) {
        let counters = &self.counters;
        out.push_str(
            "# HELP fedingress_dns_queries_total DNS messages answered by the embedded server, by transport, path (fast: pre-encoded answer; slow: built per query), query type and response code.\n\
             # TYPE fedingress_dns_queries_total counter\n",
        );
        for (t, transport) in TRANSPORTS.iter().enumerate() {
            for (p, path) in PATHS.iter().enumerate() {
                for (q, qtype) in QTYPES.iter().enumerate() {
                    for (r, rcode) in RCODES.iter().enumerate() {
                        let value = counters
                            .queries
                            .get(Counters::index(t, p, q, r))
                            .map_or(0, |c| c.load(Ordering::Relaxed));
                        if value > 0 {
                            let _ = writeln!(
                                out,
                                "fedingress_dns_queries_total{{transport=\"{transport}\",path=\"{path}\",qtype=\"{qtype}\",rcode=\"{rcode}\"}} {value}"
                            );
                        }
                    }
                }
            }
        }
        for (name, help, values) in [
            (
                "fedingress_dns_truncated_total",
                "DNS responses sent with TC set (too large for the client's UDP payload size), by transport.",
                &counters.truncated,
            ),
            (
                "fedingress_dns_dropped_total",
                "DNS packets not answered (shorter than a header, or responses), by transport.",
                &counters.dropped,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (transport, value) in TRANSPORTS.iter().zip(values) {
                let _ = writeln!(
                    out,
                    "{name}{{transport=\"{transport}\"}} {}",
                    value.load(Ordering::Relaxed)
                );
            }
        }
        self.write_prometheus_limits(out);
    }

    /// The hostile-network families: RRL, untrusted ECS, TCP limits (always every
    /// series, zero or not).
    fn write_prometheus_limits(&self, out: &mut String) {
        let counters = &self.counters;
        out.push_str(
            "# HELP fedingress_dns_rrl_responses_total UDP responses over the response-rate limit (dns.rrl), by response class and action (dropped, or slipped: sent truncated).\n\
             # TYPE fedingress_dns_rrl_responses_total counter\n",
        );
        for (c, class) in rrl::CLASSES.iter().enumerate() {
            for (a, action) in RRL_ACTIONS.iter().enumerate() {
                let value = counters
                    .rrl
                    .get(c * RRL_ACTIONS.len() + a)
                    .map_or(0, |v| v.load(Ordering::Relaxed));
                let _ = writeln!(
                    out,
                    "fedingress_dns_rrl_responses_total{{class=\"{class}\",action=\"{action}\"}} {value}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP fedingress_dns_rrl_enabled 1 when response-rate limiting (dns.rrl) is on.\n# TYPE fedingress_dns_rrl_enabled gauge\nfedingress_dns_rrl_enabled {}",
            u8::from(self.rrl.is_some())
        );
        out.push_str(
            "# HELP fedingress_dns_ecs_untrusted_total Queries whose EDNS Client Subnet option was ignored because the source is not in dns.ecs.trustedResolvers, by transport.\n\
             # TYPE fedingress_dns_ecs_untrusted_total counter\n",
        );
        for (transport, value) in TRANSPORTS.iter().zip(&counters.ecs_untrusted) {
            let _ = writeln!(
                out,
                "fedingress_dns_ecs_untrusted_total{{transport=\"{transport}\"}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        let tcp = &self.config.tcp;
        let _ = writeln!(
            out,
            "# HELP fedingress_dns_tcp_connections DNS TCP connections open now.\n# TYPE fedingress_dns_tcp_connections gauge\nfedingress_dns_tcp_connections {}\n\
             # HELP fedingress_dns_tcp_max_connections dns.tcp.maxConnections: further connections are closed at once.\n# TYPE fedingress_dns_tcp_max_connections gauge\nfedingress_dns_tcp_max_connections {}\n\
             # HELP fedingress_dns_tcp_refused_total DNS TCP connections closed at once because dns.tcp.maxConnections were open.\n# TYPE fedingress_dns_tcp_refused_total counter\nfedingress_dns_tcp_refused_total {}\n\
             # HELP fedingress_dns_tcp_idle_closed_total DNS TCP connections closed after dns.tcp.idleTimeoutSeconds without a complete message.\n# TYPE fedingress_dns_tcp_idle_closed_total counter\nfedingress_dns_tcp_idle_closed_total {}",
            counters.tcp_open.load(Ordering::Relaxed),
            tcp.max_connections,
            counters.tcp_refused.load(Ordering::Relaxed),
            counters.tcp_idle_closed.load(Ordering::Relaxed),
        );
    }

    /// Serves UDP and TCP until the returned future is dropped (or aborted): one receive
    /// loop per core on the UDP socket, and an accept loop with a task per TCP
    /// connection. Zone transfers are allowed from `allow_transfer` only.
    ///
    /// # Errors
    ///
    /// None in practice: per-packet and per-connection errors are logged and survived.
    pub async fn serve(
        self: Arc<Self>,
        udp: UdpSocket,
        tcp: TcpListener,
        allow_transfer: Vec<IpNet>,
    ) -> io::Result<()> {
        let allow: Arc<[IpNet]> = allow_transfer.into();
        let mut tasks = JoinSet::new();
        tasks.spawn(self.clone().serve_udp(udp, allow.clone()));
        tasks.spawn(self.serve_tcp(tcp, allow));
        while let Some(result) = tasks.join_next().await {
            match result {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(error),
                Err(error) => return Err(io::Error::other(error)),
            }
        }
        Ok(())
    }

    /// Serves UDP on `socket` until dropped: one receive loop per available core. On a
    /// wildcard address (`0.0.0.0`, `::`) replies leave from the address each query was
    /// sent to (packet info, `server/pktinfo.rs`).
    ///
    /// # Errors
    ///
    /// None in practice (receive and send errors are logged and survived).
    pub async fn serve_udp(
        self: Arc<Self>,
        socket: UdpSocket,
        allow_transfer: Arc<[IpNet]>,
    ) -> io::Result<()> {
        let local = socket.local_addr().ok();
        let destinations = match local {
            Some(local) if pktinfo::needed(local) => match pktinfo::enable(&socket) {
                Ok(()) => true,
                Err(error) => {
                    warn!(%error, address = %local, "DNS UDP listener on a wildcard address cannot learn the address each query was sent to; replies leave from the kernel's choice of source address");
                    false
                }
            },
            _ => false,
        };
        let socket = Arc::new(socket);
        let workers = std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .clamp(1, 16);
        info!(address = ?local, workers, "DNS UDP listener serving");
        let mut tasks = JoinSet::new();
        for _ in 0..workers {
            tasks.spawn(self.clone().udp_loop(
                socket.clone(),
                allow_transfer.clone(),
                destinations,
            ));
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// One receive loop. With `destinations` (a wildcard socket with packet info on,
    /// see `server/pktinfo.rs`) each reply leaves from the address its query was sent to.
    async fn udp_loop(
        self: Arc<Self>,
        socket: Arc<UdpSocket>,
        allow: Arc<[IpNet]>,
        destinations: bool,
    ) {
        let mut buf = vec![0u8; 65_535];
        let mut control = if destinations {
            pktinfo::control_buffer()
        } else {
            Vec::new()
        };
        let mut out = Vec::with_capacity(1500);
        let mut consecutive_errors = 0u32;
        loop {
            let received = if destinations {
                pktinfo::recv(&socket, &mut buf, &mut control).await
            } else {
                (socket.recv_from(&mut buf).await).map(|(len, peer)| (len, peer, None))
            };
            let (len, peer, destination) = match received {
                Ok(received) => {
                    consecutive_errors = 0;
                    received
                }
                Err(error) => {
                    // ICMP errors from earlier sends surface here (ECONNREFUSED); back
                    // off only when errors repeat, so a broken socket does not spin.
                    consecutive_errors = consecutive_errors.saturating_add(1);
                    debug!(%error, "DNS UDP receive failed");
                    if consecutive_errors > 100 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    continue;
                }
            };
            let packet = buf.get(..len).unwrap_or(&[]);
            let snapshot = self.snapshot.load();
            match self.handle(
                &snapshot,
                packet,
                peer.ip(),
                Transport::Udp,
                &allow,
                &mut out,
            ) {
                Outcome::Reply => {
                    let sent = match destination {
                        Some(from) => pktinfo::send(&socket, &out, peer, from).await,
                        None => socket.send_to(&out, peer).await,
                    };
                    if let Err(error) = sent {
                        debug!(%peer, %error, "DNS UDP send failed");
                    }
                }
                Outcome::Drop | Outcome::Transfer(_) => {}
            }
        }
    }

    /// Serves TCP on `listener` until dropped.
    ///
    /// # Errors
    ///
    /// None in practice (accept errors, e.g. out of file descriptors, are logged and
    /// retried after a pause).
    pub async fn serve_tcp(
        self: Arc<Self>,
        listener: TcpListener,
        allow_transfer: Arc<[IpNet]>,
    ) -> io::Result<()> {
        info!(address = ?listener.local_addr().ok(), "DNS TCP listener serving");
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    warn!(%error, "DNS TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if connections.len() >= self.config.tcp.max_connections {
                debug!(%peer, max = self.config.tcp.max_connections, "too many DNS TCP connections; closing");
                self.counters.tcp_refused.fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            }
            connections.spawn(
                self.clone()
                    .tcp_connection(stream, peer, allow_transfer.clone()),
            );
        }
    }

    async fn tcp_connection(
        self: Arc<Self>,
        mut stream: TcpStream,
        peer: SocketAddr,
        allow: Arc<[IpNet]>,
    ) {
        /// Keeps `fedingress_dns_tcp_connections` while the connection lives.
        struct Open<'a>(&'a AtomicU64);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.counters.tcp_open.fetch_add(1, Ordering::Relaxed);
        let _open = Open(&self.counters.tcp_open);
        let idle = self.config.tcp.idle_timeout();
        let _ = stream.set_nodelay(true);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let mut len = [0u8; 2];
            match tokio::time::timeout(idle, stream.read_exact(&mut len)).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return, // closed
                Err(_) => {
                    self.counters
                        .tcp_idle_closed
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            let len = usize::from(u16::from_be_bytes(len));
            buf.resize(len, 0);
            match tokio::time::timeout(idle, stream.read_exact(&mut buf)).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    debug!(%peer, %error, "DNS TCP read failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "DNS TCP message timed out");
                    self.counters
                        .tcp_idle_closed
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            let messages = {
                let snapshot = self.snapshot.load();
                match self.handle(&snapshot, &buf, peer.ip(), Transport::Tcp, &allow, &mut out) {
                    Outcome::Reply => vec![std::mem::take(&mut out)],
                    Outcome::Drop => Vec::new(),
                    Outcome::Transfer(messages) => messages,
                }
            };
            for message in messages {
                let Ok(len) = u16::try_from(message.len()) else {
                    continue;
                };
                let mut framed = Vec::with_capacity(message.len() + 2);
                framed.extend_from_slice(&len.to_be_bytes());
                framed.extend_from_slice(&message);
                // A client that stops reading must not hold its slot of
                // `dns.tcp.maxConnections` forever.
                match tokio::time::timeout(idle, stream.write_all(&framed)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        debug!(%peer, %error, "DNS TCP write failed");
                        return;
                    }
                    Err(_) => {
                        debug!(%peer, "DNS TCP write timed out");
                        return;
                    }
                }
            }
        }
    }

    /// Answers one message as the listeners do: the response messages (none when the
    /// packet is dropped; several for a zone transfer over TCP).
    pub fn respond(
        &self,
        packet: &[u8],
        peer: IpAddr,
        transport: Transport,
        allow_transfer: &[IpNet],
    ) -> Vec<Vec<u8>> {
        let snapshot = self.snapshot.load();
        let mut out = Vec::new();
        match self.handle(&snapshot, packet, peer, transport, allow_transfer, &mut out) {
            Outcome::Reply => vec![out],
            Outcome::Drop => Vec::new(),
            Outcome::Transfer(messages) => messages,
        }
    }

    fn handle(
        &self,
        snapshot: &Snapshot,
        packet: &[u8],
        peer: IpAddr,
        transport: Transport,
        allow: &[IpNet],
        out: &mut Vec<u8>,
    ) -> Outcome {
        let handled = handle(
            snapshot,
            packet,
            peer,
            transport,
            allow,
            &self.config.ecs,
            out,
        );
        let counters = &self.counters;
        let t = transport.index();
        if handled.ecs_ignored {
            bump(counters.ecs_untrusted.get(t));
        }
        let rcode = match &handled.outcome {
            Outcome::Drop => {
                if let Some(c) = counters.dropped.get(t) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                return handled.outcome;
            }
            Outcome::Reply => {
                if is_truncated(out)
                    && let Some(c) = counters.truncated.get(t)
                {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                out.get(3).map_or(0, |b| b & 0x0F)
            }
            Outcome::Transfer(messages) => messages
                .first()
                .and_then(|m| m.get(3))
                .map_or(0, |b| b & 0x0F),
        };
        // BADVERS has RCODE 0 in the header (its upper bits are in OPT).
        let r = if handled.badvers {
            RCODES.len() - 1
        } else {
            rcode_index(rcode)
        };
        let index = Counters::index(t, usize::from(!handled.fast), qtype_index(handled.qtype), r);
        if let Some(c) = counters.queries.get(index) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if transport == Transport::Udp
            && matches!(handled.outcome, Outcome::Reply)
            && let Some(rrl) = &self.rrl
        {
            return self.rate_limit(rrl, snapshot, &handled, peer, out);
        }
        handled.outcome
    }

    /// Charges a UDP reply in `out` to RRL: sent as is, dropped, or slipped (rewritten
    /// truncated).
    fn rate_limit(
        &self,
        rrl: &Rrl,
        snapshot: &Snapshot,
        handled: &Handled,
        peer: IpAddr,
        out: &mut Vec<u8>,
    ) -> Outcome {
        if rrl.exempt(peer) {
            return Outcome::Reply;
        }
        let class = if handled.badvers {
            ResponseClass::Error
        } else {
            classify(out)
        };
        let key = handled
            .key
            .as_ref()
            .map_or(&[][..], wire::NameKey::as_bytes);
        let name = match class {
            ResponseClass::Positive | ResponseClass::Nodata => key,
            ResponseClass::Nxdomain => zone_key(snapshot, key),
            ResponseClass::Error => &[],
        };
        let now_ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let verdict = rrl.charge(peer, class, name, now_ms);
        let action = match verdict {
            Verdict::Send => return Outcome::Reply,
            Verdict::Drop => 0,
            Verdict::Slip => 1,
        };
        bump(
            self.counters
                .rrl
                .get(class.index() * RRL_ACTIONS.len() + action),
        );
        debug!(%peer, ?class, ?verdict, "DNS response over the rate limit");
        if verdict == Verdict::Slip {
            wire::slip_response(out);
            Outcome::Reply
        } else {
            out.clear();
            Outcome::Drop
        }
    }
}

/// The RRL class of a response (`server/rrl.rs`): size-truncated ones count as
/// positive answers.
fn classify(response: &[u8]) -> ResponseClass {
    let rcode = response.get(3).map_or(0, |b| b & 0x0F);
    let answers = match response.get(6..8) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => 0,
    };
    match rcode {
        0 if answers > 0 || is_truncated(response) => ResponseClass::Positive,
        0 => ResponseClass::Nodata,
        3 => ResponseClass::Nxdomain,
        _ => ResponseClass::Error,
    }
}

/// The apex of the served zone holding `key` (both wire format, lower case), or
/// nothing.
fn zone_key<'k>(snapshot: &Snapshot, key: &'k [u8]) -> &'k [u8] {
    let mut at = 0usize;
    while let Some(suffix) = key.get(at..).filter(|s| !s.is_empty()) {
        if snapshot.is_apex(suffix) {
            return suffix;
        }
        match suffix.first() {
            Some(&len) if len > 0 => at += usize::from(len) + 1,
            _ => break,
        }
    }
    &[]
}

fn is_truncated(response: &[u8]) -> bool {
    response.get(2).is_some_and(|b| b & 0x02 != 0)
}

/// What [`handle`] did, for the counters.
struct Handled {
    outcome: Outcome,
    /// Answered by the fast path.
    fast: bool,
    /// The question's type, when one was read.
    qtype: Option<u16>,
    /// Answered BADVERS.
    badvers: bool,
    /// The query's ECS option was ignored: its source is not a trusted resolver.
    ecs_ignored: bool,
    /// The question's name, when one was read (the RRL key of positive answers).
    key: Option<wire::NameKey>,
}

impl Handled {
    fn slow(outcome: Outcome, qtype: Option<u16>) -> Self {
        Handled {
            outcome,
            fast: false,
            qtype,
            badvers: false,
            ecs_ignored: false,
            key: None,
        }
    }
}

/// Handles one message into `out` (see the module docs).
fn handle(
    snapshot: &Snapshot,
    packet: &[u8],
    peer: IpAddr,
    transport: Transport,
    allow: &[IpNet],
    ecs_trust: &config::EcsConfig,
    out: &mut Vec<u8>,
) -> Handled {
    let query = match wire::parse_lenient(packet) {
        Ok(query) => query,
        Err(ParseFailure {
            error: ParseError::Drop(reason),
            ..
        }) => {
            debug!(%peer, reason, len = packet.len(), "DNS packet dropped");
            return Handled::slow(Outcome::Drop, None);
        }
        Err(ParseFailure {
            error: ParseError::FormErr(reason),
            partial,
        }) => {
            debug!(%peer, reason, len = packet.len(), "malformed DNS query: FORMERR");
            let qtype = partial
                .as_ref()
                .and_then(|p| p.question.as_ref())
                .map(|q| q.qtype);
            match partial {
                Some(partial) => wire::write_error(&partial, packet, wire::RCODE_FORMERR, 0, out),
                None => wire::write_formerr_header(packet, out),
            }
            let outcome = if out.is_empty() {
                Outcome::Drop
            } else {
                Outcome::Reply
            };
            return Handled::slow(outcome, qtype);
        }
    };
    let limit = match transport {
        Transport::Udp => query.udp_limit(),
        Transport::Tcp => TCP_LIMIT,
    };
    let ecs = query.edns.as_ref().and_then(|e| e.ecs.as_ref());
    // ECS from a source that is not a trusted resolver does not steer: locate the
    // source, answer with scope 0 (valid for every client of that source).
    let ecs_ignored = ecs.is_some() && !ecs_trust.trusts(peer);
    let ecs_address = ecs
        .filter(|_| !ecs_ignored)
        .and_then(wire::Ecs::client_address);
    // An ECS option with source prefix 0 asks for an answer not tied to the client:
    // locate the resolver, answer with scope 0.
    let scope_applies = !ecs_ignored && (ecs.is_none() || ecs_address.is_some());
    let client = ecs_address.unwrap_or(peer);

    if query.is_fast_path_shape()
        && let Some(question) = &query.question
    {
        let serial = snapshot.serial();
        let served = snapshot.with_fast_answer(
            question.key.as_bytes(),
            RecordType::from(question.qtype),
            client,
            |encoded, scope| {
                let scope = if scope_applies { scope } else { 0 };
                wire::write_fast_response(encoded, serial, &query, packet, scope, limit, out);
            },
        );
        if served.is_some() {
            return Handled {
                outcome: Outcome::Reply,
                fast: true,
                qtype: Some(question.qtype),
                badvers: false,
                ecs_ignored,
                key: Some(question.key.clone()),
            };
        }
    }
    let outcome = slow_path(
        snapshot,
        &query,
        packet,
        peer,
        client,
        scope_applies,
        transport,
        limit,
        allow,
        out,
    );
    Handled {
        outcome,
        fast: false,
        qtype: query.question.as_ref().map(|q| q.qtype),
        badvers: query.edns.as_ref().is_some_and(|e| e.version != 0),
        ecs_ignored,
        key: query.question.as_ref().map(|q| q.key.clone()),
    }
}

#[allow(clippy::too_many_arguments)]
fn slow_path(
    snapshot: &Snapshot,
    query: &RawQuery,
    packet: &[u8],
    peer: IpAddr,
    client: IpAddr,
    scope_applies: bool,
    transport: Transport,
    limit: usize,
    allow: &[IpNet],
    out: &mut Vec<u8>,
) -> Outcome {
    if let Some(edns) = &query.edns
        && edns.version != 0
    {
        debug!(%peer, version = edns.version, "unsupported EDNS version: BADVERS");
        wire::write_error(query, packet, 0, wire::EXT_RCODE_BADVERS, out);
        return Outcome::Reply;
    }
    if query.opcode() != 0 {
        debug!(%peer, opcode = query.opcode(), "unsupported opcode: NOTIMP");
        wire::write_error(query, packet, RCODE_NOTIMP, 0, out);
        return Outcome::Reply;
    }
    let Some(question) = query.question.as_ref().filter(|_| query.qdcount == 1) else {
        debug!(%peer, questions = query.qdcount, "not exactly one question: FORMERR");
        wire::write_error(query, packet, wire::RCODE_FORMERR, 0, out);
        return Outcome::Reply;
    };
    let message = match Message::from_vec(packet) {
        Ok(message) => message,
        Err(error) => {
            debug!(%peer, %error, "hickory cannot decode the query: FORMERR");
            wire::write_error(query, packet, wire::RCODE_FORMERR, 0, out);
            return Outcome::Reply;
        }
    };
    let Some(hickory_query) = message.queries.first() else {
        wire::write_error(query, packet, wire::RCODE_FORMERR, 0, out);
        return Outcome::Reply;
    };
    let key = question.key.as_bytes();
    if question.qclass != CLASS_IN {
        debug!(%peer, class = question.qclass, "non-IN class: REFUSED");
        wire::write_error(query, packet, RCODE_REFUSED, 0, out);
        return Outcome::Reply;
    }
    if matches!(question.qtype, TYPE_AXFR | TYPE_IXFR) {
        let allowed = allow.iter().any(|net| net.contains(&peer.to_canonical()));
        if !allowed || !snapshot.in_zone(key) {
            debug!(%peer, zone = ?question.key, "zone transfer refused");
            wire::write_error(query, packet, RCODE_REFUSED, 0, out);
            return Outcome::Reply;
        }
        if !snapshot.is_apex(key) {
            wire::write_error(query, packet, RCODE_NOTAUTH, 0, out);
            return Outcome::Reply;
        }
        if transport == Transport::Udp {
            wire::write_truncated(query, packet, 0, out);
            return Outcome::Reply;
        }
        debug!(%peer, zone = ?question.key, "zone transfer");
        return Outcome::Transfer(transfer(snapshot, query, &message, key, packet));
    }

    let lookup = snapshot.lookup_key(key, RecordType::from(question.qtype), Some(client));
    let scope = if scope_applies {
        lookup.scope_prefix
    } else {
        0
    };
    let mut response = Message::response(message.metadata.id, OpCode::Query);
    response.metadata = Metadata::response_from_request(&message.metadata);
    response.metadata.authoritative = lookup.authoritative;
    response.metadata.response_code = lookup.rcode;
    response.add_query(hickory_query.clone());
    response.add_answers(lookup.answers);
    response.add_authorities(lookup.authority);
    response.add_additionals(lookup.additional);
    encode_into(response, query, packet, scope, limit, out)
}

/// Encodes a hickory response and finishes it (OPT, letter case, truncation).
fn encode_into(
    response: Message,
    query: &RawQuery,
    packet: &[u8],
    scope: u8,
    limit: usize,
    out: &mut Vec<u8>,
) -> Outcome {
    match response.to_vec() {
        Ok(bytes) => {
            let opt = query
                .edns
                .as_ref()
                .map(|edns| OptOut::for_query(edns, scope));
            wire::finish_response(bytes, query, packet, opt, limit, out);
            if out.is_empty() {
                Outcome::Drop
            } else {
                Outcome::Reply
            }
        }
        Err(error) => {
            warn!(%error, "cannot encode DNS response: SERVFAIL");
            wire::write_error(query, packet, ResponseCode::ServFail.low(), 0, out);
            Outcome::Reply
        }
    }
}

/// The messages of a zone transfer.
fn transfer(
    snapshot: &Snapshot,
    query: &RawQuery,
    message: &Message,
    key: &[u8],
    packet: &[u8],
) -> Vec<Vec<u8>> {
    let Some(records) = snapshot.transfer(key) else {
        return Vec::new();
    };
    let mut messages = Vec::new();
    let mut pending: Vec<&[Record]> = records.chunks(TRANSFER_CHUNK).rev().collect();
    while let Some(chunk) = pending.pop() {
        let mut response = Message::response(message.metadata.id, OpCode::Query);
        response.metadata = Metadata::response_from_request(&message.metadata);
        response.metadata.authoritative = true;
        if let Some(q) = message.queries.first() {
            response.add_query(q.clone());
        }
        response.add_answers(chunk.iter().cloned());
        let mut out = Vec::new();
        match response.to_vec() {
            Ok(bytes) if bytes.len() + 64 <= TCP_LIMIT => {
                let opt = query.edns.as_ref().map(|edns| OptOut::for_query(edns, 0));
                wire::finish_response(bytes, query, packet, opt, TCP_LIMIT, &mut out);
                messages.push(out);
            }
            Ok(_) if chunk.len() > 1 => {
                let (a, b) = chunk.split_at(chunk.len() / 2);
                pending.push(b);
                pending.push(a);
            }
            Ok(_) | Err(_) => {
                warn!(zone = ?snapshot.zone_origin(key), "cannot encode a zone transfer message");
                return Vec::new();
            }
        }
    }
    messages
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod perf;
