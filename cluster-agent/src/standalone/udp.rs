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

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::{oneshot, watch};
use tokio::task::{AbortHandle, JoinSet};

use super::Route;
use super::endpoint::{Endpoint, Health};
use super::health::any_local;
use super::load::{Active, LoadCounters};

const MAX_DATAGRAM: usize = 65_535;

/// Binds a UDP listener (IPv6 sockets are IPv6-only, so `0.0.0.0` and `::` can both be
/// bound; no address reuse, so two listeners never share a port by accident).
pub(crate) fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::DGRAM,
        Some(SockProtocol::UDP),
    )?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

struct Session {
    id: u64,
    upstream: Arc<UdpSocket>,
    endpoint: Arc<Endpoint>,
    ingress: String,
    born: Instant,
    /// Milliseconds after `born` of the last datagram either way.
    last_seen_ms: AtomicU64,
    task: OnceLock<AbortHandle>,
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
}

/// Everything a listener's sessions share.
struct Listener {
    socket: Arc<UdpSocket>,
    label: String,
    load: Arc<LoadCounters>,
    idle: Duration,
}

/// Serves `socket` until `stop` fires (or its sender is dropped).
pub(crate) async fn serve(
    socket: UdpSocket,
    label: String,
    routes: watch::Receiver<Arc<Route>>,
    load: Arc<LoadCounters>,
    idle: Duration,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = Arc::new(Listener {
        socket: Arc::new(socket),
        label,
        load,
        idle,
    });
    let mut sessions: HashMap<SocketAddr, Arc<Session>> = HashMap::new();
    let mut tasks: JoinSet<(SocketAddr, u64)> = JoinSet::new();
    let mut next_id: u64 = 0;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            Some(done) = tasks.join_next() => {
                if let Ok((client, id)) = done
                    && sessions.get(&client).is_some_and(|s| s.id == id)
                {
                    sessions.remove(&client);
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
                let reusable = sessions
                    .get(&client)
                    .filter(|s| s.endpoint.health() != Health::Unhealthy)
                    .cloned();
                let session = match reusable {
                    Some(session) => session,
                    None => {
                        if let Some(old) = sessions.remove(&client) {
                            old.end();
                        }
                        let route = Arc::clone(&routes.borrow());
                        next_id = next_id.wrapping_add(1);
                        match open_session(&listener, &route, client, next_id, &mut tasks) {
                            Some(session) => {
                                sessions.insert(client, Arc::clone(&session));
                                session
                            }
                            None => continue,
                        }
                    }
                };
                session.touch();
                // A UDP send waits only while the socket buffer is full, which is momentary;
                // `try_send` would fail on a fresh socket whose readiness is not known yet.
                if let Err(error) = session.upstream.send(datagram).await {
                    if error.kind() == io::ErrorKind::ConnectionRefused {
                        session.endpoint.record(false, "proxy");
                        session.end();
                        sessions.remove(&client);
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
    tasks.shutdown().await;
    tracing::debug!(listener = %listener.label, "listener closed");
}

/// A connected upstream socket to the first candidate endpoint that takes one.
fn open_session(
    listener: &Arc<Listener>,
    route: &Route,
    client: SocketAddr,
    id: u64,
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
            upstream: Arc::new(upstream),
            endpoint,
            ingress: route.ingress.to_string(),
            born: Instant::now(),
            last_seen_ms: AtomicU64::new(0),
            task: OnceLock::new(),
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

/// Relays replies from the session's endpoint to the client until the session is idle
/// for too long or its endpoint refuses.
async fn run_session(
    listener: Arc<Listener>,
    client: SocketAddr,
    session: Arc<Session>,
    _active: Active,
) -> (SocketAddr, u64) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let deadline = session.idle_deadline(listener.idle);
        tokio::select! {
            received = session.upstream.recv(&mut buf) => match received {
                Ok(n) => {
                    session.touch();
                    let reply = buf.get(..n).unwrap_or_default();
                    if let Err(error) = listener.socket.send_to(reply, client).await {
                        tracing::debug!(listener = %listener.label, client = %client, %error, "sending a UDP reply failed");
                    }
                }
                Err(error) => {
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
                    break;
                }
            },
            _ = tokio::time::sleep_until(deadline.into()) => {
                if Instant::now() >= session.idle_deadline(listener.idle) {
                    tracing::debug!(listener = %listener.label, client = %client, "UDP session idle; ended");
                    break;
                }
            }
        }
    }
    (client, session.id)
}
