//! TCP plumbing shared by every stream listener (TCP, HTTP, TLS): binding, the accept
//! loop, connecting to a pool's endpoints with passive ejection, and splicing two
//! streams; plus the TCP proxy of TCP rules: accept, pick an endpoint, connect, copy
//! both ways.
//!
//! A failed connect counts against the endpoint (passive ejection) and the next
//! candidate is tried; with none left the client connection is closed. Connections run
//! in their own tasks, so closing the listener stops accepting but lets established
//! connections finish, within the drain time (see [`super::drain`]).
//!
//! Limits: a connection beyond the listener's cap or the descriptor budget is closed
//! right after accept; every client connection and every upstream connection holds one
//! descriptor of the budget; a spliced connection with no bytes either way for the idle
//! timeout is closed on both sides (see [`super::limits`]).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::time::timeout;

use super::Route;
use super::drain::{Phase, Tracked, Tracker, reached};
use super::endpoint::{Endpoint, Pool};
use super::limits::{Activity, FdPermit, Limits, Refusal, Timeout, Watched, take_fd};
use super::load::{Active, LoadCounters};

const BACKLOG: i32 = 1024;

/// Binds a TCP listener (address reuse for quick restarts; IPv6 sockets are IPv6-only,
/// so `0.0.0.0` and `::` can both be bound). `freebind` (Linux `IP_FREEBIND`) binds an
/// address that is on no interface yet, as anycast addresses may be.
pub(crate) fn bind(addr: SocketAddr, freebind: bool) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(SockProtocol::TCP),
    )?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if freebind {
        set_freebind(&socket, addr)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// `IP_FREEBIND` (`IPV6_FREEBIND`) on `socket` for a bind to `addr` (Linux; elsewhere
/// the bind needs the address to be local).
pub(crate) fn set_freebind(socket: &Socket, addr: SocketAddr) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if addr.is_ipv6() {
        socket.set_freebind_v6(true)?;
    } else {
        socket.set_freebind_v4(true)?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (socket, addr);
    Ok(())
}

/// One accepted connection with its guards: it counts as active for the listener's
/// load and open for its drain tracker until these drop.
pub(crate) struct Accepted {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub active: Active,
    pub tracked: Tracked,
    pub phase: watch::Receiver<Phase>,
    /// The client socket's descriptor.
    pub fd: FdPermit,
}

/// What a listener does with each accepted connection (it spawns a task).
pub(crate) type Handler = Arc<dyn Fn(Accepted) + Send + Sync>;

/// Accepts on `listener` until `stop` fires (or its sender is dropped), handing every
/// connection to `handler`; the socket is closed when this returns.
///
/// A connection beyond `limits.connectionsPerListener`, or without a descriptor left in
/// the budget, is closed at once (counted as refused): the backlog keeps draining and
/// the client learns at once, instead of waiting in a queue that no longer moves.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    label: String,
    load: Arc<LoadCounters>,
    limits: Arc<Limits>,
    tracker: Arc<Tracker>,
    handler: Handler,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let fd = if load.active() >= limits.connections_per_listener {
                    Err(Refusal::ListenerLimit)
                } else {
                    take_fd(&limits).ok_or(Refusal::FdBudget)
                };
                let fd = match fd {
                    Ok(fd) => fd,
                    Err(why) => {
                        drop(stream);
                        if load.guard.refused(why) {
                            tracing::warn!(listener = %label, client = %peer, reason = why.as_str(), "refusing connections (counted in fedingress_agent_listener_refused_total)");
                        } else {
                            tracing::debug!(listener = %label, client = %peer, reason = why.as_str(), "connection refused");
                        }
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                handler(Accepted {
                    stream,
                    peer,
                    active: load.opened(),
                    tracked: tracker.track(),
                    phase: tracker.phase(),
                    fd,
                });
            }
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(listener = %label, %error, "accepting a TCP connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    tracing::debug!(listener = %label, "listener closed");
}

/// The handler of a TCP rule's listener: proxies each connection to the current route.
pub(crate) fn l4_handler(
    routes: watch::Receiver<Arc<Route>>,
    connect_timeout: Duration,
    limits: Arc<Limits>,
    label: String,
) -> Handler {
    let label: Arc<str> = label.into();
    Arc::new(move |accepted: Accepted| {
        let route = Arc::clone(&routes.borrow());
        tokio::spawn(proxy(
            accepted,
            route,
            connect_timeout,
            Arc::clone(&limits),
            Arc::clone(&label),
        ));
    })
}

async fn proxy(
    accepted: Accepted,
    route: Arc<Route>,
    connect_timeout: Duration,
    limits: Arc<Limits>,
    label: Arc<str>,
) {
    let Accepted {
        mut stream,
        peer,
        active,
        tracked: _tracked,
        mut phase,
        fd: _fd,
    } = accepted;
    let Some((mut upstream, endpoint, _upstream_fd)) = connect(
        &route.pool,
        connect_timeout,
        &limits,
        &route.ingress.to_string(),
        &label,
    )
    .await
    else {
        tracing::debug!(
            ingress = %route.ingress,
            rule = route.rule,
            listener = %label,
            client = %peer,
            "no healthy endpoint; closing the client connection"
        );
        return;
    };
    let idle = limits.stream_idle;
    if let Err(error) = splice(
        &mut stream,
        &mut upstream,
        &mut phase,
        idle,
        active.counters(),
    )
    .await
    {
        tracing::debug!(
            ingress = %route.ingress,
            listener = %label,
            endpoint = %endpoint.addr,
            client = %peer,
            %error,
            "TCP connection ended with an error"
        );
    }
}

/// Connects to the first candidate of `pool` that takes the connection; failed connects
/// count against their endpoint, a success for it. `None` also when the descriptor
/// budget is spent (then no endpoint is tried or blamed).
pub(crate) async fn connect(
    pool: &Pool,
    connect_timeout: Duration,
    limits: &Arc<Limits>,
    ingress: &str,
    label: &str,
) -> Option<(TcpStream, Arc<Endpoint>, FdPermit)> {
    let Some(fd) = take_fd(limits) else {
        tracing::debug!(
            ingress,
            listener = label,
            "no file descriptor left in the budget for an upstream connection"
        );
        return None;
    };
    for endpoint in pool.candidates() {
        let connected = timeout(connect_timeout, TcpStream::connect(endpoint.addr))
            .await
            .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")));
        match connected {
            Ok(upstream) => {
                endpoint.record(true, "proxy");
                let _ = upstream.set_nodelay(true);
                return Some((upstream, endpoint, fd));
            }
            Err(error) => {
                tracing::debug!(
                    ingress,
                    listener = label,
                    endpoint = %endpoint.addr,
                    %error,
                    "connecting to endpoint failed"
                );
                endpoint.record(false, "proxy");
            }
        }
    }
    None
}

/// Copies both ways until both sides are done, the listener's drain time is up, or no
/// byte has moved either way for `idle` (then both sides are closed, and the timeout is
/// counted in `counters`). `a` is the client's side: its bytes count in `counters`.
pub(crate) async fn splice<A, B>(
    a: &mut A,
    b: &mut B,
    phase: &mut watch::Receiver<Phase>,
    idle: Duration,
    counters: &Arc<LoadCounters>,
) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let activity = Activity::new();
    // Every byte either way passes through `a`'s reads or writes.
    let mut a = Watched::new(a, activity.clone()).counting(Arc::clone(counters));
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut a, b) => copied.map(|_| ()),
        () = reached(phase, Phase::Closing) => Ok(()),
        () = activity.idle_for(idle) => {
            counters.guard.timed_out(Timeout::Idle);
            tracing::debug!("spliced connection idle; closed both sides");
            Ok(())
        }
    }
}
