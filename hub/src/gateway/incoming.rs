//! The agent gateway's connections ([`capped_incoming`], [`Counted`], [`Connections`]).
//!
//! # Guarantees
//! - At most `limits.gateway.maxConnections` are open.
//! - A connection that carries no live stream (one past its first message, see
//!   [`crate::admission`]) for `limits.gateway.helloTimeoutSeconds` is closed: counted
//!   from accept, this bounds its first bytes, its TLS handshake, its HTTP/2 preface and
//!   its first stream's Hello together; counted from its last live stream's end, its
//!   idle time. A stream still waiting for its first message defers the close until it
//!   ends (at its own Hello deadline, so that it is answered `DEADLINE_EXCEEDED`). A
//!   client that finishes TLS and says nothing holds a slot that long, no longer.
//! - At the cap, a new connection takes the slot of the open connection that has been
//!   without a live stream longest, which is closed; only when every open connection
//!   carries a live stream is the new one closed at accept. So connections that say
//!   nothing cannot keep an agent out, however long their sender holds them.
//!
//! Counted: `fedingress_gateway_connections_refused_total` (closed at accept) and
//! `fedingress_gateway_connections_closed_total{reason="idle"|"evicted"}`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::metrics::HubMetrics;
use fedingress_apiserver::metrics::LimitCounters;

/// The open gateway connections by peer address: what admission marks live and the
/// accept loop evicts.
#[derive(Default)]
pub struct Connections {
    open: Mutex<HashMap<SocketAddr, Arc<Connection>>>,
}

/// One open gateway connection's state, shared by its socket and its streams.
pub struct Connection {
    /// Streams past their first message, open now.
    live: AtomicUsize,
    /// Streams waiting for their first message, open now.
    waiting: AtomicUsize,
    /// Since when no stream has been live (accept, or the last live stream's end).
    idle_since: Mutex<Instant>,
    /// Closed by eviction: its reads fail from now on.
    evicted: AtomicBool,
    /// Its slot of the cap; taken over by the connection that evicts it.
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    /// The task reading the socket, woken when the above change.
    reader: AtomicWaker,
}

impl Connections {
    /// The open connection from `peer`, if any.
    pub fn get(&self, peer: SocketAddr) -> Option<Arc<Connection>> {
        self.lock().get(&peer).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Arc<Connection>>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes the connection without a live stream for longest and takes its slot.
    fn evict_idlest(&self) -> Option<OwnedSemaphorePermit> {
        let open = self.lock();
        let idlest = open
            .values()
            .filter(|c| c.live.load(Ordering::Acquire) == 0 && !c.evicted.load(Ordering::Acquire))
            .min_by_key(|c| c.idle_since())?;
        let permit = idlest
            .permit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        idlest.evicted.store(true, Ordering::Release);
        idlest.reader.wake();
        permit
    }
}

impl Connection {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        Self {
            live: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            evicted: AtomicBool::new(false),
            permit: Mutex::new(Some(permit)),
            reader: AtomicWaker::new(),
        }
    }

    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A stream opened on this connection: it waits for its first message.
    pub fn stream_opened(&self) {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.reader.wake();
    }

    /// A waiting stream got past its first message: it is live.
    pub fn stream_live(&self) {
        self.live.fetch_add(1, Ordering::AcqRel);
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        self.reader.wake();
    }

    /// A stream ended, `live` or still waiting: once no live stream is left, the idle
    /// time starts now.
    pub fn stream_ended(&self, live: bool) {
        if live {
            let mut since = self
                .idle_since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if self.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                *since = Instant::now();
            }
        } else {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
        self.reader.wake();
    }
}

/// The agent gateway's connections: at most `max` open (see the module docs for which
/// one goes at the cap), each closed once it has carried no live stream for `idle`.
pub fn capped_incoming(
    listener: TcpListener,
    max: usize,
    idle: Duration,
    connections: Arc<Connections>,
    metrics: Arc<HubMetrics>,
) -> impl Stream<Item = Result<Counted, std::io::Error>> {
    let slots = Arc::new(Semaphore::new(max));
    futures_util::stream::unfold(
        (listener, slots, connections, metrics),
        move |(listener, slots, connections, metrics)| async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "agent gateway accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let permit = match slots.clone().try_acquire_owned() {
                    Ok(permit) => permit,
                    Err(_) => match connections.evict_idlest() {
                        Some(permit) => {
                            LimitCounters::count(&metrics.gateway.evicted);
                            tracing::debug!(%peer, max, "agent gateway connection without a live stream closed for a new one: limits.gateway.maxConnections open");
                            permit
                        }
                        None => {
                            LimitCounters::count(&metrics.gateway.connections_refused);
                            tracing::debug!(%peer, max, "agent gateway connection refused: limits.gateway.maxConnections open, each with a live stream");
                            drop(stream);
                            continue;
                        }
                    },
                };
                let _ = stream.set_nodelay(true);
                metrics.gateway.connections.fetch_add(1, Ordering::Relaxed);
                let connection = Arc::new(Connection::new(permit));
                connections.lock().insert(peer, connection.clone());
                let counted = Counted {
                    inner: stream,
                    peer,
                    connection,
                    connections: connections.clone(),
                    metrics: metrics.clone(),
                    idle,
                    deadline: Box::pin(tokio::time::sleep(idle)),
                };
                return Some((Ok(counted), (listener, slots, connections, metrics)));
            }
        },
    )
}

/// An agent gateway connection holding its slot of the cap.
pub struct Counted {
    inner: TcpStream,
    peer: SocketAddr,
    connection: Arc<Connection>,
    connections: Arc<Connections>,
    metrics: Arc<HubMetrics>,
    idle: Duration,
    /// When it is closed unless a stream is live by then.
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        if open
            .get(&self.peer)
            .is_some_and(|c| Arc::ptr_eq(c, &self.connection))
        {
            open.remove(&self.peer);
        }
        drop(open);
        self.metrics
            .gateway
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Counted {
    /// Whether the connection must close now (evicted, or idle for too long); else the
    /// reader is woken when that changes.
    fn closing(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        let connection = self.connection.clone();
        connection.reader.register(cx.waker());
        if connection.evicted.load(Ordering::Acquire) {
            return Some(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed for a new connection: limits.gateway.maxConnections open",
            ));
        }
        if connection.live.load(Ordering::Acquire) > 0
            || connection.waiting.load(Ordering::Acquire) > 0
        {
            return None;
        }
        let deadline = connection.idle_since() + self.idle;
        if self.deadline.deadline() != deadline {
            self.deadline.as_mut().reset(deadline);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            LimitCounters::count(&self.metrics.gateway.idle_closed);
            tracing::debug!(peer = %self.peer, "agent gateway connection without a live stream for limits.gateway.helloTimeoutSeconds: closing");
            return Some(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no live stream within limits.gateway.helloTimeoutSeconds",
            ));
        }
        None
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(error) = self.closing(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Counted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection() -> (Arc<Semaphore>, Arc<Connection>) {
        let slots = Arc::new(Semaphore::new(1));
        let permit = slots.clone().try_acquire_owned().unwrap();
        (slots, Arc::new(Connection::new(permit)))
    }

    #[test]
    fn the_idlest_connection_without_a_live_stream_is_evicted_and_gives_its_slot() {
        let connections = Connections::default();
        let now = Instant::now();
        let (_a, busy) = connection();
        let (_b, older) = connection();
        let (_c, newer) = connection();
        for (c, ago) in [(&busy, 3), (&older, 2), (&newer, 1)] {
            *c.idle_since.lock().unwrap() = now - Duration::from_secs(ago);
        }
        busy.stream_opened();
        busy.stream_live();
        // A stream waiting for its first message does not keep a connection.
        older.stream_opened();
        for (port, c) in [(1, &busy), (2, &older), (3, &newer)] {
            connections
                .lock()
                .insert(SocketAddr::from(([127, 0, 0, 1], port)), c.clone());
        }
        // The busy one has been open longest but carries a stream: the next goes.
        assert!(connections.evict_idlest().is_some());
        assert!(older.evicted.load(Ordering::Acquire));
        assert!(!busy.evicted.load(Ordering::Acquire));
        assert!(connections.evict_idlest().is_some());
        assert!(newer.evicted.load(Ordering::Acquire));
        // Only a connection with a live stream is left: a newcomer is refused.
        assert!(connections.evict_idlest().is_none());
        // Its stream ends: idle from now on, and evictable.
        busy.stream_ended(true);
        assert!(busy.idle_since() >= now);
        assert!(connections.evict_idlest().is_some());
    }
}
