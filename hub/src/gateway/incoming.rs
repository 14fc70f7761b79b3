//! The agent gateway's connections: at most `limits.gateway.maxConnections` open (more
//! are closed at accept and counted), and each must send its first bytes within
//! `limits.gateway.helloTimeoutSeconds` ([`capped_incoming`], [`Counted`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::HubMetrics;
use fedingress_apiserver::metrics::LimitCounters;

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
