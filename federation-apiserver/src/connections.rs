//! Connection-level limits of the REST API: the open-connection cap ([`Open`]), telling HTTP/2 from HTTP/1 on a plain socket
//! within the header-read timeout ([`sniff`]), and idle tracking ([`Activity`],
//! [`HeldBody`]). The limits themselves are in [`crate::limits`]; serving is in
//! [`crate::server`].

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use fedingress_apiserver::metrics::Metrics;

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
