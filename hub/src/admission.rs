//! Admission of unauthenticated agent gateway streams: a tower layer around every RPC
//! of the gateway, apart from how the gateway authenticates.
//!
//! # Guarantees
//! - At most `limits.gateway.maxPendingHellos` streams wait for their first message
//!   (the Hello, or a Join's request) at once, over all connections; one more is
//!   answered `RESOURCE_EXHAUSTED` at once.
//! - A stream whose first message is not complete within
//!   `limits.gateway.helloTimeoutSeconds` ends with `DEADLINE_EXCEEDED`.
//! - Both are counted (`fedingress_gateway_streams_refused_total`), the waiting streams
//!   are a gauge (`fedingress_gateway_pending_streams`).
//! - A stream past its first message keeps its connection live (marked in
//!   [`Connections`]) until its response ends: a connection without one is closed after
//!   `helloTimeoutSeconds`, or sooner for a new connection at the cap.
//!
//! Concurrent streams per connection are capped by HTTP/2 itself
//! (`limits.gateway.maxStreamsPerConnection`, set on the server); connections by
//! [`capped_incoming`](super::gateway::incoming::capped_incoming).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use crate::gateway::incoming::{Connection, Connections};
use crate::metrics::HubMetrics;
use fedingress_apiserver::metrics::LimitCounters;

/// The agent gateway's limits on what has not authenticated yet (`limits.gateway:`,
/// checked by the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayLimits {
    pub max_connections: usize,
    pub hello_timeout: Duration,
    pub max_pending_hellos: usize,
    pub max_streams_per_connection: u32,
}

/// The layer; see the module docs.
#[derive(Clone)]
pub struct AdmissionLayer {
    shared: Arc<Shared>,
}

struct Shared {
    pending: Arc<Semaphore>,
    limits: GatewayLimits,
    metrics: Arc<HubMetrics>,
    connections: Arc<Connections>,
}

impl AdmissionLayer {
    /// Admission under `limits`, marking live streams on `connections` (the ones
    /// [`capped_incoming`](super::gateway::incoming::capped_incoming) accepts).
    pub fn new(
        limits: GatewayLimits,
        metrics: Arc<HubMetrics>,
        connections: Arc<Connections>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                pending: Arc::new(Semaphore::new(limits.max_pending_hellos)),
                limits,
                metrics,
                connections,
            }),
        }
    }
}

/// The peer a request came from, as tonic records it (with TLS or without).
fn peer_of<B>(request: &http::Request<B>) -> Option<std::net::SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let extensions = request.extensions();
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|info| info.get_ref().remote_addr())
        })
}

/// A stream's mark on its connection: waiting until its first message, live from then
/// until both its request and its response are done.
struct Live {
    connection: Arc<Connection>,
    live: std::sync::atomic::AtomicBool,
}

impl Live {
    fn new(connection: Arc<Connection>) -> Self {
        connection.stream_opened();
        Self {
            connection,
            live: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn start(&self) {
        if !self.live.swap(true, Ordering::AcqRel) {
            self.connection.stream_live();
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.connection.stream_ended(*self.live.get_mut());
    }
}

impl<S> tower::Layer<S> for AdmissionLayer {
    type Service = Admission<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Admission {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`AdmissionLayer`] wraps around the gateway.
#[derive(Clone)]
pub struct Admission<S> {
    inner: S,
    shared: Arc<Shared>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for Admission<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let shared = &self.shared;
        let Ok(permit) = shared.pending.clone().try_acquire_owned() else {
            LimitCounters::count(&shared.metrics.gateway.pending_refused);
            tracing::debug!(
                max_pending_hellos = shared.limits.max_pending_hellos,
                "agent stream refused: limits.gateway.maxPendingHellos streams wait for their Hello"
            );
            let status = Status::resource_exhausted(format!(
                "too many agent streams waiting for their first message ({}, limits.gateway.maxPendingHellos); retry later",
                shared.limits.max_pending_hellos
            ));
            return Box::pin(std::future::ready(Ok(status.into_http())));
        };
        shared
            .metrics
            .gateway
            .pending
            .fetch_add(1, Ordering::Relaxed);
        let pending = Pending {
            _permit: permit,
            deadline: Box::pin(tokio::time::sleep(shared.limits.hello_timeout)),
            header: [0; 5],
            seen: 0,
            metrics: shared.metrics.clone(),
        };
        let live = peer_of(&request)
            .and_then(|peer| shared.connections.get(peer))
            .map(|connection| Arc::new(Live::new(connection)));
        let request = request.map(|body| {
            tonic::body::Body::new(FirstMessage {
                inner: body,
                pending: Some(pending),
                live: live.clone(),
            })
        });
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(match live {
                Some(live) => response.map(|body| {
                    tonic::body::Body::new(Held {
                        inner: body,
                        _live: live,
                    })
                }),
                None => response,
            })
        })
    }
}

/// A response body that keeps its stream's connection live until it is sent.
struct Held {
    inner: tonic::body::Body,
    _live: Arc<Live>,
}

impl Body for Held {
    type Data = bytes::Bytes;
    type Error = Status;

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

/// A stream that has not delivered its first gRPC message yet.
struct Pending {
    _permit: OwnedSemaphorePermit,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The gRPC message prefix: compressed flag and big-endian length.
    header: [u8; 5],
    /// Bytes of the stream seen so far.
    seen: u64,
    metrics: Arc<HubMetrics>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.metrics.gateway.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pending {
    /// Takes the next bytes of the stream; true once the first message is complete.
    fn observe(&mut self, mut data: &[u8]) -> bool {
        while self.seen < 5 {
            let Some((first, rest)) = data.split_first() else {
                return false;
            };
            self.header[self.seen as usize] = *first;
            self.seen += 1;
            data = rest;
        }
        self.seen += data.len() as u64;
        let [_, a, b, c, d] = self.header;
        self.seen >= 5 + u64::from(u32::from_be_bytes([a, b, c, d]))
    }
}

/// A request body that enforces the first-message deadline and frees the pending slot
/// once the first message is in.
struct FirstMessage {
    inner: tonic::body::Body,
    pending: Option<Pending>,
    /// Started once the first message is in.
    live: Option<Arc<Live>>,
}

impl Body for FirstMessage {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let Some(pending) = this.pending.as_mut() else {
            return polled;
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && pending.observe(data)
                {
                    this.pending = None;
                    if let Some(live) = &this.live {
                        live.start();
                    }
                }
            }
            Poll::Ready(_) => this.pending = None,
            Poll::Pending => {
                if pending.deadline.as_mut().poll(cx).is_ready() {
                    LimitCounters::count(&pending.metrics.gateway.hello_timeouts);
                    this.pending = None;
                    tracing::debug!(
                        "agent stream ended: no first message within limits.gateway.helloTimeoutSeconds"
                    );
                    return Poll::Ready(Some(Err(Status::deadline_exceeded(
                        "no Hello within limits.gateway.helloTimeoutSeconds",
                    ))));
                }
            }
        }
        polled
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

    #[test]
    fn the_first_message_is_complete_after_its_declared_length() {
        let metrics = Arc::new(HubMetrics::default());
        let semaphore = Arc::new(Semaphore::new(1));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        metrics.gateway.pending.fetch_add(1, Ordering::Relaxed);
        let mut pending = Pending {
            _permit: semaphore.clone().try_acquire_owned().unwrap(),
            deadline: Box::pin(tokio::time::sleep(std::time::Duration::from_secs(1))),
            header: [0; 5],
            seen: 0,
            metrics: metrics.clone(),
        };
        assert!(!pending.observe(&[0, 0, 0]));
        assert!(!pending.observe(&[0, 3, b'a']));
        assert!(!pending.observe(b"b"));
        assert!(pending.observe(b"c and the next message"));
        drop(pending);
        assert_eq!(metrics.gateway.pending.load(Ordering::Relaxed), 0);
        assert!(semaphore.try_acquire().is_ok());
    }
}
