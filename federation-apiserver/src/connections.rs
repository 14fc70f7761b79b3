//! Connection-level limits of the REST API and the agent gateway: the open-connection
//! cap ([`Open`], [`capped_incoming`]), telling HTTP/2 from HTTP/1 on a plain socket
//! within the header-read timeout ([`sniff`]), and idle tracking ([`Activity`],
//! [`HeldBody`]). The limits themselves are in [`crate::limits`]; serving is in
//! [`crate::server`].

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::hub::metrics::HubMetrics;
use crate::metrics::{LimitCounters, Metrics};

/// One open REST connection: a slot of the cap, counted in `apiserver_connections`.
pub struct Open {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Open {
    /// A slot when fewer than the cap are open; `None` means refuse.
    pub fn try_new(slots: &Arc<Semaphore>, metrics: &Arc<Metrics>) -> Option<Self> {
        let permit = slots.clone().try_acquire_owned().ok()?;
        metrics.limits.connections.fetch_add(1, Ordering::Relaxed);
        Some(Self {
            _permit: permit,
            metrics: metrics.clone(),
        })
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.metrics
            .limits
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The HTTP version a connection speaks (ALPN with TLS, the preface without).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
}

/// Whether a plain connection speaks HTTP/2 (prior knowledge: the client preface) or
/// HTTP/1, from its first bytes; `None` when it sends nothing decisive within
/// `timeout` (or closes).
pub async fn sniff(stream: &TcpStream, timeout: Duration) -> Option<Protocol> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let decide = async {
        let mut buffer = [0u8; PREFACE.len()];
        // Real clients send the preface in one segment; a client trickling it gets
        // ever rarer looks (10 ms doubling to 500 ms), not a wake-up every 10 ms.
        let mut pause = Duration::from_millis(10);
        loop {
            let n = stream.peek(&mut buffer).await.ok()?;
            if n == 0 {
                return None;
            }
            if buffer[..n] != PREFACE[..n] {
                return Some(Protocol::Http1);
            }
            if n == PREFACE.len() {
                return Some(Protocol::Http2);
            }
            // A partial preface: peek returns at once, so wait for more.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    };
    tokio::time::timeout(timeout, decide).await.ok().flatten()
}

/// Requests in flight on one connection, for the idle timeout.
#[derive(Default)]
pub struct Activity {
    busy: AtomicUsize,
    changed: Notify,
}

/// Marks a connection busy while alive (a request, then its response body).
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_waiters();
    }
}

impl Activity {
    pub fn start(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
        Busy(self.clone())
    }

    /// Completes once nothing has been in flight for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.busy.load(Ordering::Acquire) == 0 {
                if tokio::time::timeout(idle, changed).await.is_err() {
                    return;
                }
            } else {
                changed.await;
            }
        }
    }
}

/// A response body that holds `T` (the busy mark, the in-flight slot) until it is sent
/// or dropped.
pub struct HeldBody<T> {
    inner: axum::body::Body,
    _held: T,
}

impl<T> HeldBody<T> {
    pub fn new(inner: axum::body::Body, held: T) -> Self {
        Self { inner, _held: held }
    }
}

impl<T: Unpin> Body for HeldBody<T> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The agent gateway's connections: at most `max` open (more are closed at accept and
/// counted), and each must send its first bytes within `first_bytes` (a silent socket
/// is closed).
pub fn capped_incoming(
    listener: TcpListener,
    max: usize,
    first_bytes: Duration,
    metrics: Arc<HubMetrics>,
) -> impl Stream<Item = Result<Counted, std::io::Error>> {
    let slots = Arc::new(Semaphore::new(max));
    futures_util::stream::unfold(
        (listener, slots, metrics),
        move |(listener, slots, metrics)| async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "agent gateway accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    LimitCounters::count(&metrics.gateway.connections_refused);
                    tracing::debug!(%peer, max, "agent gateway connection refused: limits.gateway.maxConnections open");
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                metrics.gateway.connections.fetch_add(1, Ordering::Relaxed);
                let counted = Counted {
                    inner: stream,
                    _permit: permit,
                    metrics: metrics.clone(),
                    first_bytes: Some(Box::pin(tokio::time::sleep(first_bytes))),
                };
                return Some((Ok(counted), (listener, slots, metrics)));
            }
        },
    )
}

/// An agent gateway connection holding its slot of the cap.
pub struct Counted {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    metrics: Arc<HubMetrics>,
    /// Until the first bytes arrive: the deadline for them.
    first_bytes: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.metrics
            .gateway
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.first_bytes.is_some() {
            match &polled {
                Poll::Ready(Ok(())) if buf.filled().len() > before => self.first_bytes = None,
                Poll::Pending => {
                    if let Some(deadline) = self.first_bytes.as_mut()
                        && deadline.as_mut().poll(cx).is_ready()
                    {
                        LimitCounters::count(&self.metrics.gateway.hello_timeouts);
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "no bytes within limits.gateway.helloTimeoutSeconds",
                        )));
                    }
                }
                _ => {}
            }
        }
        polled
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
