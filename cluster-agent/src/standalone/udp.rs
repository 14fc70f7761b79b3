//! The UDP proxy of one bound listener, with per-client sessions.
//!
//! Each client address gets a session: a connected upstream socket to an endpoint picked
//! round-robin. Datagrams from the client go out through it; replies come back to the
//! client from the listener socket, so the client sees the address it sent to. A
//! session ends after the idle timeout without traffic either way, when its endpoint
//! refuses datagrams (ICMP port unreachable; counted against the endpoint, passive
//! ejection), or when its endpoint has turned unhealthy and the client sends again (the
//! client then gets a new session to a healthy endpoint). Closing the listener ends every
//! session and releases the socket before [`serve`] returns.
//!
//! # Limits
//! A session holds one socket (one descriptor of the [`Limits`] budget) and no buffer
//! while it waits: the listener receives into its own buffer, and replies are read into
//! one buffer per worker thread, borrowed only while a datagram is copied. The session
//! [`Table`] caps sessions per listener and per client address: at the listener's cap
//! (or with the descriptor budget spent) the oldest session that is not *assured* — its
//! client never sent again after a reply — is evicted for the new one, and only when
//! every session is assured is the new client refused; a client address at its own cap
//! is refused. Refusals, evictions and idle timeouts are counted per listener.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::{oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};

use super::Route;
use super::endpoint::{Endpoint, Health};
use super::health::any_local;
use super::limits::{FdPermit, Limits, Refusal, Timeout, take_fd};
use super::load::{Active, LoadCounters};

const MAX_DATAGRAM: usize = 65_535;

/// Binds a UDP listener (IPv6 sockets are IPv6-only, so `0.0.0.0` and `::` can both be
/// bound; no address reuse, so two listeners never share a port by accident).
/// `freebind` binds an address that is on no interface yet (see [`super::tcp::bind`]).
pub(crate) fn bind(addr: SocketAddr, freebind: bool) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::DGRAM,
        Some(SockProtocol::UDP),
    )?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if freebind {
        super::tcp::set_freebind(&socket, addr)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

struct Session {
    id: u64,
    upstream: UdpSocket,
    endpoint: Arc<Endpoint>,
    ingress: String,
    born: Instant,
    /// Milliseconds after `born` of the last datagram either way.
    last_seen_ms: AtomicU64,
    /// A reply of the endpoint was relayed to the client.
    replied: AtomicBool,
    /// The client sent again after a reply: it receives what it is sent, so it is not a
    /// spoofed address. Sessions that are not assured are evicted first.
    assured: AtomicBool,
    task: OnceLock<AbortHandle>,
    /// The session socket's descriptor; an evicted session hands it to the new one.
    fd: Mutex<Option<FdPermit>>,
}

impl Session {
    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_seen_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_deadline(&self, idle: Duration) -> Instant {
        self.born + Duration::from_millis(self.last_seen_ms.load(Ordering::Relaxed)) + idle
    }

    fn end(&self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }

    fn take_fd(&self) -> Option<FdPermit> {
        self.fd
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// What the session table needs to know of a session.
trait Entry {
    fn id(&self) -> u64;
    fn assured(&self) -> bool;
}

impl Entry for Arc<Session> {
    fn id(&self) -> u64 {
        self.id
    }

    fn assured(&self) -> bool {
        self.assured.load(Ordering::Relaxed)
    }
}

/// The sessions of one listener and its per-source counts; decides, at the limits,
/// which session makes room for a new one (pure: no I/O).
///
/// A listener or a source at its limit refuses a new client; except that a listener at
/// its limit (or out of descriptors) first evicts its oldest session that is not
/// assured — a source that never answered a reply, as every spoofed one is — the way
/// the kernel's connection tracking drops unassured entries first when its table is
/// full. Assured sessions are never evicted: a flood cannot push out clients that
/// proved their address.
struct Table<S> {
    sessions: HashMap<SocketAddr, S>,
    per_source: HashMap<IpAddr, usize>,
    /// Sessions in the order they were opened, with their ids; stale entries (ended or
    /// assured sessions) are skipped when popped.
    opened: VecDeque<(SocketAddr, u64)>,
    max_sessions: usize,
    max_per_source: usize,
}

impl<S: Entry> Table<S> {
    fn new(max_sessions: usize, max_per_source: usize) -> Self {
        Table {
            sessions: HashMap::new(),
            per_source: HashMap::new(),
            opened: VecDeque::new(),
            max_sessions,
            max_per_source,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions.len()
    }

    fn get(&self, client: &SocketAddr) -> Option<&S> {
        self.sessions.get(client)
    }

    /// Whether `client` may open a session as far as its own address goes.
    fn source_has_room(&self, client: &SocketAddr) -> bool {
        self.per_source.get(&client.ip()).copied().unwrap_or(0) < self.max_per_source
    }

    fn is_full(&self) -> bool {
        self.sessions.len() >= self.max_sessions
    }

    fn insert(&mut self, client: SocketAddr, session: S) {
        let id = session.id();
        if let Some(old) = self.sessions.insert(client, session) {
            // The caller removes a session before replacing it; keep counts right anyway.
            drop(old);
        } else {
            *self.per_source.entry(client.ip()).or_default() += 1;
        }
        self.opened.push_back((client, id));
        if self.opened.len() > 2 * self.sessions.len().max(512) {
            let sessions = &self.sessions;
            self.opened.retain(|(client, id)| {
                sessions
                    .get(client)
                    .is_some_and(|s| s.id() == *id && !s.assured())
            });
        }
    }

    /// Removes the session of `client` if it is `id` (any, for `None`).
    fn remove(&mut self, client: &SocketAddr, id: Option<u64>) -> Option<S> {
        if id.is_some_and(|id| self.sessions.get(client).is_none_or(|s| s.id() != id)) {
            return None;
        }
        let removed = self.sessions.remove(client)?;
        if let Some(count) = self.per_source.get_mut(&client.ip()) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_source.remove(&client.ip());
            }
        }
        Some(removed)
    }

    /// Removes and returns the oldest session that is not assured, if any.
    fn evict_oldest_unassured(&mut self) -> Option<S> {
        while let Some((client, id)) = self.opened.pop_front() {
            let candidate = self
                .sessions
                .get(&client)
                .is_some_and(|s| s.id() == id && !s.assured());
            if candidate {
                return self.remove(&client, Some(id));
            }
        }
        None
    }

    fn drain(&mut self) -> impl Iterator<Item = S> + '_ {
        self.per_source.clear();
        self.opened.clear();
        self.sessions.drain().map(|(_, s)| s)
    }
}

/// Everything a listener's sessions share.
struct Listener {
    socket: UdpSocket,
    label: String,
    load: Arc<LoadCounters>,
    limits: Arc<Limits>,
}

/// Serves `socket` until `stop` fires (or its sender is dropped).
pub(crate) async fn serve(
    socket: UdpSocket,
    label: String,
    routes: watch::Receiver<Arc<Route>>,
    load: Arc<LoadCounters>,
    limits: Arc<Limits>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = Arc::new(Listener {
        socket,
        label,
        load,
        limits,
    });
    let mut table: Table<Arc<Session>> = Table::new(
        listener.limits.udp_sessions_per_listener,
        listener.limits.udp_sessions_per_source,
    );
    let mut tasks: JoinSet<(SocketAddr, u64)> = JoinSet::new();
    let mut next_id: u64 = 0;
    // The one receive buffer of the listener; sessions share one per worker thread.
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(done) = tasks.join_next() => {
                if let Ok((client, id)) = done {
                    table.remove(&client, Some(id));
                }
            }
            received = listener.socket.recv_from(&mut buf) => {
                let (n, client) = match received {
                    Ok(received) => received,
                    Err(error) => {
                        tracing::debug!(listener = %listener.label, %error, "receiving a UDP datagram failed");
                        continue;
                    }
                };
                let datagram = buf.get(..n).unwrap_or_default();
                let reusable = table
                    .get(&client)
                    .filter(|s| s.endpoint.health() != Health::Unhealthy)
                    .cloned();
                let session = match reusable {
                    Some(session) => {
                        if session.replied.load(Ordering::Relaxed) {
                            session.assured.store(true, Ordering::Relaxed);
                        }
                        session
                    }
                    None => {
                        let mut fd = None;
                        if let Some(old) = table.remove(&client, None) {
                            fd = old.take_fd();
                            old.end();
                        }
                        let fd = match fd {
                            Some(fd) => fd,
                            None => match admit(&listener, &mut table, client) {
                                Ok(fd) => fd,
                                Err(why) => {
                                    refuse(&listener, client, why);
                                    continue;
                                }
                            },
                        };
                        let route = Arc::clone(&routes.borrow());
                        next_id = next_id.wrapping_add(1);
                        match open_session(&listener, &route, client, next_id, fd, &mut tasks) {
                            Some(session) => {
                                table.insert(client, Arc::clone(&session));
                                session
                            }
                            None => continue,
                        }
                    }
                };
                session.touch();
                // A UDP send waits only while the socket buffer is full, which is momentary;
                // `try_send` would fail on a fresh socket whose readiness is not known yet.
                let sent = session.upstream.send(datagram).await;
                if let Ok(n) = sent {
                    listener.load.received(n);
                }
                if let Err(error) = sent {
                    if error.kind() == io::ErrorKind::ConnectionRefused {
                        session.endpoint.record(false, "proxy");
                        session.end();
                        table.remove(&client, Some(session.id));
                    }
                    tracing::debug!(
                        ingress = %session.ingress,
                        listener = %listener.label,
                        endpoint = %session.endpoint.addr,
                        %error,
                        "forwarding a UDP datagram failed"
                    );
                }
            }
        }
    }
    // Ends every session and waits, so the listener socket is closed when this returns.
    for session in table.drain() {
        session.end();
    }
    tasks.shutdown().await;
    tracing::debug!(listener = %listener.label, "listener closed");
}

/// Room for a new session of `client`: its descriptor, taken from the budget or from
/// an evicted session (see [`Table`]).
fn admit(
    listener: &Listener,
    table: &mut Table<Arc<Session>>,
    client: SocketAddr,
) -> Result<FdPermit, Refusal> {
    if !table.source_has_room(&client) {
        return Err(Refusal::SourceLimit);
    }
    let evict = |table: &mut Table<Arc<Session>>| {
        let old = table.evict_oldest_unassured()?;
        old.end();
        listener.load.guard.evicted();
        old.take_fd()
    };
    if table.is_full() {
        return evict(table).ok_or(Refusal::ListenerLimit);
    }
    if let Some(fd) = take_fd(&listener.limits) {
        return Ok(fd);
    }
    evict(table).ok_or(Refusal::FdBudget)
}

fn refuse(listener: &Listener, client: SocketAddr, why: Refusal) {
    if listener.load.guard.refused(why) {
        tracing::warn!(
            listener = %listener.label,
            client = %client,
            reason = why.as_str(),
            "refusing new UDP sessions (counted in fedingress_agent_listener_refused_total)"
        );
    } else {
        tracing::debug!(listener = %listener.label, client = %client, reason = why.as_str(), "UDP session refused");
    }
}

/// A connected upstream socket to the first candidate endpoint that takes one.
fn open_session(
    listener: &Arc<Listener>,
    route: &Route,
    client: SocketAddr,
    id: u64,
    fd: FdPermit,
    tasks: &mut JoinSet<(SocketAddr, u64)>,
) -> Option<Arc<Session>> {
    for endpoint in route.pool.candidates() {
        let upstream = match connect_upstream(endpoint.addr) {
            Ok(upstream) => upstream,
            Err(error) => {
                tracing::debug!(
                    ingress = %route.ingress,
                    listener = %listener.label,
                    endpoint = %endpoint.addr,
                    %error,
                    "opening a UDP session socket failed"
                );
                continue;
            }
        };
        let session = Arc::new(Session {
            id,
            upstream,
            endpoint,
            ingress: route.ingress.to_string(),
            born: Instant::now(),
            last_seen_ms: AtomicU64::new(0),
            replied: AtomicBool::new(false),
            assured: AtomicBool::new(false),
            task: OnceLock::new(),
            fd: Mutex::new(Some(fd)),
        });
        let active = listener.load.opened();
        let task = tasks.spawn(run_session(
            Arc::clone(listener),
            client,
            Arc::clone(&session),
            active,
        ));
        let _ = session.task.set(task);
        return Some(session);
    }
    tracing::debug!(
        ingress = %route.ingress,
        rule = route.rule,
        listener = %listener.label,
        client = %client,
        "no healthy endpoint; dropping the UDP datagram"
    );
    None
}

fn connect_upstream(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind(any_local(addr))?;
    socket.connect(addr)?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// Replies relayed per wake-up of a session before it waits again.
const RELAY_BATCH: usize = 64;

thread_local! {
    /// The receive buffer of the sessions running on this worker thread: a session holds
    /// no buffer while it waits, only while it relays one datagram without awaiting.
    static RELAY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// What reading one reply from a session socket came to.
enum Relayed {
    /// Sent on to the client (or dropped on a send error).
    Done,
    /// The listener socket's buffer is full: a copy to send when it has room.
    Blocked(Vec<u8>),
    /// Nothing more to read now.
    Empty,
    /// The socket failed (the endpoint refused: ICMP port unreachable).
    Ended(io::Error),
}

/// Reads one reply into this thread's buffer and passes it on to the client.
fn relay_one(listener: &Listener, client: SocketAddr, session: &Session) -> Relayed {
    RELAY.with_borrow_mut(|buf| {
        if buf.len() < MAX_DATAGRAM {
            buf.resize(MAX_DATAGRAM, 0);
        }
        let n = match session.upstream.try_recv(buf) {
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Relayed::Empty,
            Err(error) => return Relayed::Ended(error),
        };
        session.touch();
        session.replied.store(true, Ordering::Relaxed);
        listener.load.sent(n);
        let reply = buf.get(..n).unwrap_or_default();
        match listener.socket.try_send_to(reply, client) {
            Ok(_) => Relayed::Done,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                Relayed::Blocked(reply.to_vec())
            }
            Err(error) => {
                tracing::debug!(listener = %listener.label, client = %client, %error, "sending a UDP reply failed");
                Relayed::Done
            }
        }
    })
}

/// Relays replies from the session's endpoint to the client until the session is idle
/// for too long or its endpoint refuses.
async fn run_session(
    listener: Arc<Listener>,
    client: SocketAddr,
    session: Arc<Session>,
    _active: Active,
) -> (SocketAddr, u64) {
    let idle = listener.limits.udp_idle;
    'session: loop {
        let deadline = session.idle_deadline(idle);
        tokio::select! {
            ready = session.upstream.readable() => {
                if let Err(error) = ready {
                    tracing::debug!(listener = %listener.label, client = %client, %error, "UDP session socket failed");
                    break;
                }
                // A bounded batch per wake-up: an endpoint that never stops sending must
                // not hold the worker thread (the next `readable` spends tokio's budget).
                for _ in 0..RELAY_BATCH {
                    match relay_one(&listener, client, &session) {
                        Relayed::Done => {}
                        Relayed::Empty => break,
                        Relayed::Blocked(reply) => {
                            if let Err(error) = listener.socket.send_to(&reply, client).await {
                                tracing::debug!(listener = %listener.label, client = %client, %error, "sending a UDP reply failed");
                            }
                        }
                        Relayed::Ended(error) => {
                            if error.kind() == io::ErrorKind::ConnectionRefused {
                                session.endpoint.record(false, "proxy");
                            }
                            tracing::debug!(
                                ingress = %session.ingress,
                                listener = %listener.label,
                                endpoint = %session.endpoint.addr,
                                %error,
                                "UDP session ended by its endpoint"
                            );
                            break 'session;
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                if Instant::now() >= session.idle_deadline(idle) {
                    listener.load.guard.timed_out(Timeout::Idle);
                    tracing::debug!(listener = %listener.label, client = %client, "UDP session idle; ended");
                    break;
                }
            }
        }
    }
    (client, session.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        id: u64,
        assured: bool,
    }

    impl Entry for Fake {
        fn id(&self) -> u64 {
            self.id
        }

        fn assured(&self) -> bool {
            self.assured
        }
    }

    fn at(ip: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([127, 1, 0, ip], port))
    }

    #[test]
    fn a_full_table_evicts_the_oldest_unassured_session_and_never_an_assured_one() {
        let mut table: Table<Fake> = Table::new(3, 2);
        table.insert(
            at(1, 1),
            Fake {
                id: 1,
                assured: true,
            },
        );
        table.insert(
            at(2, 1),
            Fake {
                id: 2,
                assured: false,
            },
        );
        table.insert(
            at(3, 1),
            Fake {
                id: 3,
                assured: false,
            },
        );
        assert!(table.is_full());
        let evicted = table.evict_oldest_unassured().unwrap();
        assert_eq!(evicted.id, 2, "the oldest that is not assured");
        assert_eq!(table.len(), 2);
        table.insert(
            at(4, 1),
            Fake {
                id: 4,
                assured: true,
            },
        );
        assert_eq!(table.evict_oldest_unassured().unwrap().id, 3);
        table.insert(
            at(5, 1),
            Fake {
                id: 5,
                assured: true,
            },
        );
        assert!(
            table.evict_oldest_unassured().is_none(),
            "only assured sessions left: the new client is refused"
        );
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn sources_are_counted_per_address_and_released_on_removal() {
        let mut table: Table<Fake> = Table::new(10, 2);
        table.insert(
            at(1, 1),
            Fake {
                id: 1,
                assured: false,
            },
        );
        assert!(table.source_has_room(&at(1, 2)));
        table.insert(
            at(1, 2),
            Fake {
                id: 2,
                assured: false,
            },
        );
        assert!(
            !table.source_has_room(&at(1, 3)),
            "two ports of one address"
        );
        assert!(table.source_has_room(&at(2, 1)), "another address");
        assert!(
            table.remove(&at(1, 1), Some(99)).is_none(),
            "a newer session stays"
        );
        assert!(table.remove(&at(1, 1), Some(1)).is_some());
        assert!(table.source_has_room(&at(1, 3)));
        assert_eq!(
            table.evict_oldest_unassured().unwrap().id,
            2,
            "stale entries skipped"
        );
        assert!(table.per_source.is_empty());
        assert!(table.evict_oldest_unassured().is_none());
    }

    #[test]
    fn the_eviction_queue_stays_bounded_under_churn() {
        let mut table: Table<Fake> = Table::new(10_000, 10_000);
        for id in 0..100_000u64 {
            let client = SocketAddr::from(([127, 2, (id >> 8) as u8, id as u8], 1));
            table.insert(client, Fake { id, assured: false });
            table.remove(&client, Some(id));
        }
        assert!(table.opened.len() <= 1024, "{}", table.opened.len());
    }
}
