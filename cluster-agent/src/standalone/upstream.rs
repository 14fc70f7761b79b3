//! HTTP/1.1 connections to endpoints, pooled per endpoint (each [`Endpoint`] holds its
//! [`IdlePool`](super::idle::IdlePool), so an endpoint that leaves the plan takes its
//! connections with it) and shared by every HTTP listener.
//!
//! A request takes an idle connection of its endpoint (the most recently used first) or
//! opens one (connect timeout `connectTimeoutMs`). The connection goes back to the pool
//! when the response body has been read to its end; a response dropped early (the client
//! went away) closes it, since unread bytes would follow. Idle connections are kept for
//! at most [`IDLE_TIMEOUT`](super::idle::IDLE_TIMEOUT), [`MAX_IDLE`](super::idle::MAX_IDLE)
//! per endpoint. A request sent on a pooled connection that the endpoint closed meanwhile
//! (hyper gives the request back unsent) is retried once on a new connection.
//!
//! This replaces hyper-util's legacy client on the hot path: that client spawns a task
//! per request to return the connection to its pool and races a connect future against
//! every checkout; here a request costs no task beyond the connection's own.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::body::RequestBody;
use super::endpoint::Endpoint;
use super::limits::{Limits, take_fd};

/// Why a request to an endpoint failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    #[error("connecting")]
    Connect(#[source] io::Error),
    #[error("HTTP/1.1 handshake")]
    Handshake(#[source] hyper::Error),
    #[error("exchanging the request")]
    Exchange(#[source] hyper::Error),
    #[error("no file descriptor left in the agent's budget for another upstream connection")]
    FdBudget,
}

impl UpstreamError {
    /// The endpoint was not reached (nothing was sent): another one may be tried.
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            UpstreamError::Connect(_) | UpstreamError::Handshake(_)
        )
    }
}

/// Sends `request` to `endpoint` and returns the response; its body returns the
/// connection to the endpoint's pool once read to the end.
///
/// # Errors
/// Connecting (within `connect_timeout`), the handshake, or the exchange failed; or a
/// new connection would exceed the descriptor budget of `limits`.
pub(crate) async fn send(
    endpoint: &Arc<Endpoint>,
    request: Request<RequestBody>,
    connect_timeout: Duration,
    limits: &Arc<Limits>,
) -> Result<Response<PooledBody>, UpstreamError> {
    let addr = endpoint.addr;
    let (mut sender, pooled) = loop {
        match endpoint.idle.checkout() {
            // Ready at once unless the connection is still finishing its last response;
            // an error means the endpoint closed it.
            Some(mut sender) => {
                if sender.ready().await.is_ok() {
                    break (sender, true);
                }
            }
            // Boxed: the connect future is large and rare; inline it would grow (and
            // make every request move) the state of every proxied request.
            None => {
                break (
                    Box::pin(connect(addr, connect_timeout, limits)).await?,
                    false,
                );
            }
        }
    };
    let request = match sender.try_send_request(request).await {
        Ok(response) => return Ok(wrap(endpoint, sender, response)),
        Err(mut error) => match error.take_message() {
            // Never sent: the pooled connection was closed meanwhile.
            Some(request) if pooled => request,
            _ => return Err(UpstreamError::Exchange(error.into_error())),
        },
    };
    let mut sender = Box::pin(connect(addr, connect_timeout, limits)).await?;
    match sender.send_request(request).await {
        Ok(response) => Ok(wrap(endpoint, sender, response)),
        Err(error) => Err(UpstreamError::Exchange(error)),
    }
}

fn wrap(
    endpoint: &Arc<Endpoint>,
    sender: SendRequest<RequestBody>,
    response: Response<Incoming>,
) -> Response<PooledBody> {
    response.map(|body| {
        let done = body.is_end_stream();
        PooledBody {
            body,
            done,
            back: Some((Arc::clone(endpoint), sender)),
        }
    })
}

async fn connect(
    addr: SocketAddr,
    connect_timeout: Duration,
    limits: &Arc<Limits>,
) -> Result<SendRequest<RequestBody>, UpstreamError> {
    // Held by the connection's task: given back when the connection closes.
    let fd = take_fd(limits).ok_or(UpstreamError::FdBudget)?;
    let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            UpstreamError::Connect(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
        })?
        .map_err(UpstreamError::Connect)?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .writev(false)
        .handshake::<_, RequestBody>(TokioIo::new(stream))
        .await
        .map_err(UpstreamError::Handshake)?;
    tokio::spawn(async move {
        let _fd = fd;
        if let Err(error) = connection.await {
            tracing::debug!(endpoint = %addr, %error, "upstream connection ended with an error");
        }
    });
    Ok(sender)
}

/// A response body from an endpoint; gives its connection back to the pool when read to
/// the end (or when it was empty to begin with).
pub(crate) struct PooledBody {
    body: Incoming,
    done: bool,
    back: Option<(Arc<Endpoint>, SendRequest<RequestBody>)>,
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl PooledBody {
    fn release(&mut self) {
        if let Some((endpoint, sender)) = self.back.take() {
            endpoint.idle.put(sender);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => {
                this.done = true;
                this.release();
            }
            Poll::Ready(Some(Err(_))) => {
                // The connection is broken: never reuse it.
                this.back = None;
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if self.done || self.body.is_end_stream() {
            self.release();
        }
    }
}
