//! Serving one REST connection ([`serve`]) with the limits of the REST API: the
//! open-connection cap ([`Open`]), telling HTTP/2 from HTTP/1 within the header-read
//! timeout (on a plain socket [`sniff`], after TLS [`Deciding`]), the in-flight caps and
//! request timeout of each
//! request, and idle tracking ([`Activity`], [`HeldBody`]). The limits themselves are in
//! [`crate::limits`]; accepting connections is [`crate::listener`].

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use fedingress_apiserver::endpoints::Peer;
use fedingress_apiserver::metrics::{LimitCounters, Metrics};
use fedingress_apiserver::status::ApiError;

use crate::limits::{InFlight, Limits, RequestKind};

/// What every REST connection is served with.
#[derive(Clone)]
pub struct Serving {
    pub router: axum::Router,
    pub limits: Arc<Limits>,
    pub in_flight: Arc<InFlight>,
    pub metrics: Arc<Metrics>,
    /// Served over TLS: responses carry `Strict-Transport-Security`.
    pub tls: bool,
}

/// Serves one connection with the serving limits: HTTP/1 header-read timeout, HTTP/2
/// stream cap and keep-alive PINGs, the in-flight caps (429), and the idle timeout.
pub async fn serve<S>(stream: S, peer: SocketAddr, serving: Serving, protocol: Protocol)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let limits = serving.limits.clone();
    let metrics = serving.metrics.clone();
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(Peer(peer));
            let busy = activity.start();
            let tls = serving.tls;
            let answer = handle(request, peer, serving.clone(), busy);
            async move {
                let mut response = answer.await?;
                security_headers(response.headers_mut(), tls);
                Ok::<_, std::convert::Infallible>(response)
            }
        })
    };
    let builder = http_builder(&limits, protocol);
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = activity.idle_for(limits.idle_timeout) => {
            LimitCounters::count(&metrics.limits.idle_closed);
            tracing::debug!(%peer, "connection idle for limits.idleTimeoutSeconds: closing");
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(IDLE_CLOSE_GRACE, connection.as_mut()).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        log_ended(&*e, peer, &metrics);
    }
}

/// How long an idle connection, told to close (HTTP/2: a GOAWAY), has to close before
/// the socket is closed: nothing is in flight on it. Go's HTTP/2 server waits as long.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// HTTP/1 or HTTP/2 only, with the header-read timeout, the stream cap and keep-alive.
fn http_builder(limits: &Limits, protocol: Protocol) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(crate::limits::HTTP2_KEEP_ALIVE_TIMEOUT);
    match protocol {
        Protocol::Http1 => builder.http1_only(),
        Protocol::Http2 => builder.http2_only(),
    }
}

/// One request: admitted under the in-flight caps (else 429), answered within the
/// request timeout (else 504; watches are exempt), its response holding the
/// connection busy and the in-flight slot until its body is sent.
async fn handle(
    request: hyper::Request<Incoming>,
    peer: SocketAddr,
    serving: Serving,
    busy: Busy,
) -> Result<Response, std::convert::Infallible> {
    let Serving {
        router,
        limits,
        in_flight,
        metrics,
        tls: _,
    } = serving;
    let kind = RequestKind::of(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    let permit = match in_flight.admit(kind) {
        Ok(permit) => permit,
        Err(kind) => return Ok(too_many_requests(kind, &limits, &metrics)),
    };
    // Watches are long-running: their own duration applies.
    let response = if kind == RequestKind::Exempt {
        router.oneshot(request).await?
    } else {
        match tokio::time::timeout(limits.request_timeout, router.oneshot(request)).await {
            Ok(response) => response?,
            Err(_) => {
                LimitCounters::count(&metrics.limits.request_timeouts);
                tracing::debug!(%peer, "request timed out: limits.requestTimeoutSeconds");
                return Ok(ApiError::timeout(format!(
                    "Timeout: request did not complete within {}s (limits.requestTimeoutSeconds)",
                    limits.request_timeout.as_secs()
                ))
                .into_response());
            }
        }
    };
    // The connection is busy until the body is sent (a watch streams for long).
    Ok(response.map(|body| axum::body::Body::new(HeldBody::new(body, (busy, permit)))))
}

/// `Strict-Transport-Security` over TLS: a year, this host only (no subdomains, no
/// preload list).
const HSTS: &str = "max-age=31536000";

/// The headers every REST response carries, as kube-apiserver's (docs/security.md,
/// "Response headers"): `X-Content-Type-Options: nosniff`, `Cache-Control: no-cache,
/// private` unless the handler chose one, and over TLS `Strict-Transport-Security`.
fn security_headers(headers: &mut http::HeaderMap, tls: bool) {
    use http::HeaderValue;
    use http::header::{CACHE_CONTROL, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS};
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers
        .entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-cache, private"));
    if tls {
        headers.insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
}

/// The 429 of a request over its in-flight cap, counted.
fn too_many_requests(kind: RequestKind, limits: &Limits, metrics: &Metrics) -> Response {
    let (counter, key, cap) = match kind {
        RequestKind::Mutating => (
            &metrics.limits.inflight_refused_mutating,
            "limits.maxMutatingRequestsInflight",
            limits.max_mutating_requests_inflight,
        ),
        _ => (
            &metrics.limits.inflight_refused_readonly,
            "limits.maxRequestsInflight",
            limits.max_requests_inflight,
        ),
    };
    LimitCounters::count(counter);
    ApiError::too_many_requests(
        format!("Too many requests, please try again later ({cap} in flight: {key})"),
        1,
    )
    .into_response()
}

/// Logs (and counts, for a header-read timeout) a connection that ended with `error`.
fn log_ended(error: &(dyn std::error::Error + 'static), peer: SocketAddr, metrics: &Metrics) {
    let header_timeout = error
        .downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_timeout);
    if header_timeout {
        LimitCounters::count(&metrics.limits.header_timeouts);
        tracing::debug!(%peer, "request headers not received within limits.headerReadTimeoutSeconds");
    } else {
        tracing::debug!(%peer, error = %error, "connection ended with an error");
    }
}

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

/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection speaks HTTP/2 (prior knowledge: the client preface) or
/// HTTP/1, from its first bytes; `None` when it sends nothing decisive within
/// `timeout` (or closes).
pub async fn sniff(stream: &TcpStream, timeout: Duration) -> Option<Protocol> {
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

/// A TLS connection's plain text, until its first bytes decide HTTP/1 or HTTP/2 as
/// [`sniff`] decides on a plain socket (the whole client preface, or a byte that is not
/// the preface's): when that takes longer than its deadline, reads fail with
/// `TimedOut`, counted as a header timeout. Without it a client that finishes the
/// handshake and says nothing would be held until the idle timeout.
pub struct Deciding<S> {
    inner: S,
    /// How many bytes of the preface have been seen.
    seen: usize,
    /// Until decided: the deadline.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    metrics: Arc<Metrics>,
}

impl<S> Deciding<S> {
    /// `inner`, whose first bytes must decide within `timeout`.
    pub fn new(inner: S, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            inner,
            seen: 0,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            metrics,
        }
    }

    /// Takes the next bytes read; true once they decide.
    fn decided_by(&mut self, data: &[u8]) -> bool {
        for byte in data {
            if PREFACE.get(self.seen) != Some(byte) {
                return true;
            }
            self.seen += 1;
        }
        self.seen == PREFACE.len()
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Deciding<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.deadline.is_none() {
            return polled;
        }
        match &polled {
            Poll::Ready(Ok(())) => {
                if self.decided_by(&buf.filled()[before..]) {
                    self.deadline = None;
                }
            }
            Poll::Pending => {
                if let Some(deadline) = self.deadline.as_mut()
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    LimitCounters::count(&self.metrics.limits.header_timeouts);
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no request within limits.headerReadTimeoutSeconds",
                    )));
                }
            }
            Poll::Ready(Err(_)) => {}
        }
        polled
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Deciding<S> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_bytes_decide_like_sniff() {
        let metrics = Arc::new(Metrics::default());
        let deciding = |data: &[&[u8]]| {
            let mut d = Deciding::new((), Duration::from_secs(1), metrics.clone());
            data.iter().any(|piece| d.decided_by(piece))
        };
        assert!(deciding(&[b"G"]), "HTTP/1 at its first byte");
        assert!(
            !deciding(&[b"PRI * HTTP/2.0"]),
            "a partial preface decides nothing"
        );
        assert!(deciding(&[b"PRI * HTTP/2.0", b"\r\n\r\nSM\r\n\r\n"]));
        assert!(
            deciding(&[b"PRI * HTTP/1.1"]),
            "a byte off the preface: HTTP/1"
        );
    }

    #[test]
    fn responses_carry_the_security_headers_and_hsts_only_over_tls() {
        let mut plain = http::HeaderMap::new();
        security_headers(&mut plain, false);
        assert_eq!(plain["x-content-type-options"], "nosniff");
        assert_eq!(plain["cache-control"], "no-cache, private");
        assert!(plain.get("strict-transport-security").is_none());
        let mut tls = http::HeaderMap::new();
        tls.insert(
            "cache-control",
            http::HeaderValue::from_static("max-age=60"),
        );
        security_headers(&mut tls, true);
        assert_eq!(tls["strict-transport-security"], HSTS);
        assert_eq!(
            tls["cache-control"], "max-age=60",
            "a handler's own is kept"
        );
    }

    #[tokio::test]
    async fn a_tls_connection_that_sends_nothing_times_out_and_is_counted() {
        let metrics = Arc::new(Metrics::default());
        let (client, server) = tokio::io::duplex(64);
        let mut deciding = Deciding::new(server, Duration::from_millis(50), metrics.clone());
        let mut buffer = [0u8; 8];
        let error = tokio::io::AsyncReadExt::read(&mut deciding, &mut buffer)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(metrics.limits.header_timeouts.load(Ordering::Relaxed), 1);
        drop(client);
    }
}
