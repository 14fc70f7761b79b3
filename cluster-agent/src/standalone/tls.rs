//! The TLS listener of a port with HTTPS and TLS rules: reads the ClientHello, routes
//! by its SNI ([`super::routes::TlsTable::decide`]) and then
//!
//! - **passthrough**: connects to the rule's backend, replays the ClientHello and
//!   splices the still-encrypted streams (the agent never sees a key);
//! - **terminate** (TLS rules): completes the handshake with rustls and the rule's
//!   certificate (no ALPN) and splices the plain stream to the backend;
//! - **HTTPS**: completes the handshake (ALPN `h2`, `http/1.1`) and serves HTTP
//!   ([`super::http::serve`]);
//! - **no match**: answers a fatal `unrecognized_name` alert and closes: a name that is
//!   not served gets no certificate at all (there is no default certificate unless an
//!   HTTPS rule without a host has a `spec.tls` entry without hosts).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;

use super::certs::CertStore;
use super::clienthello;
use super::http::{HttpListener, TlsInfo};
use super::limits::{Limits, Timeout};
use super::routes::{Target, TlsDecision, TlsTable};
use super::tcp::{self, Accepted, Handler};

/// A TLS alert record: fatal (2), unrecognized_name (112).
const ALERT_UNRECOGNIZED_NAME: [u8; 7] = [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x70];

/// What every connection of one bound TLS listener shares.
pub(crate) struct TlsListener {
    pub label: Arc<str>,
    pub table: Arc<ArcSwap<TlsTable>>,
    pub certs: Arc<CertStore>,
    pub http: Arc<HttpListener>,
    pub connect_timeout: Duration,
    /// The handshake timeout (for the ClientHello, then again for the rest), the idle
    /// timeout of spliced connections, the descriptor budget.
    pub limits: Arc<Limits>,
}

/// The handler of a TLS listener.
pub(crate) fn handler(listener: Arc<TlsListener>) -> Handler {
    Arc::new(move |accepted: Accepted| {
        tokio::spawn(serve(accepted, Arc::clone(&listener)));
    })
}

/// What to do, decided from a snapshot of the table and owned, so that the table can
/// change while the connection lives.
enum Plan {
    Passthrough(Arc<Target>),
    Terminate(Arc<Target>, String),
    Https(String),
    Reject,
}

async fn serve(accepted: Accepted, listener: Arc<TlsListener>) {
    let Accepted {
        mut stream,
        peer,
        active,
        tracked: _tracked,
        mut phase,
        fd: _fd,
    } = accepted;
    let label = &listener.label;
    let handshake = listener.limits.tls_handshake;
    let idle = listener.limits.stream_idle;
    let counters = active.counters();
    let (hello, raw) = match timeout(handshake, clienthello::read(&mut stream)).await {
        Ok(Ok(read)) => read,
        Ok(Err(error)) => {
            tracing::debug!(listener = %label, client = %peer, %error, "no usable ClientHello");
            return;
        }
        Err(_) => {
            counters.guard.timed_out(Timeout::Handshake);
            tracing::debug!(listener = %label, client = %peer, "no ClientHello in time");
            return;
        }
    };
    let plan = {
        let table = listener.table.load();
        match table.decide(hello.sni.as_deref()) {
            TlsDecision::Passthrough(target) => Plan::Passthrough(Arc::clone(target)),
            TlsDecision::Terminate { target, secret } => {
                Plan::Terminate(Arc::clone(target), secret.to_owned())
            }
            TlsDecision::Https { secret } => Plan::Https(secret.to_owned()),
            TlsDecision::Reject => Plan::Reject,
        }
    };
    match plan {
        Plan::Passthrough(target) => {
            let _share = target.load.opened();
            let Some((mut upstream, endpoint, _upstream_fd)) = tcp::connect(
                &target.pool,
                listener.connect_timeout,
                &listener.limits,
                &target.ingress.to_string(),
                label,
            )
            .await
            else {
                tracing::debug!(ingress = %target.ingress, listener = %label, client = %peer, "no healthy endpoint for a passthrough connection");
                return;
            };
            if upstream.write_all(&raw).await.is_err() {
                return;
            }
            drop(raw);
            if let Err(error) =
                tcp::splice(&mut stream, &mut upstream, &mut phase, idle, counters).await
            {
                tracing::debug!(listener = %label, endpoint = %endpoint.addr, %error, "passthrough connection ended with an error");
            }
        }
        Plan::Terminate(target, secret) => {
            let Some(configs) = listener.certs.get(&secret) else {
                reject(stream, label, hello.sni.as_deref()).await;
                return;
            };
            let acceptor = TlsAcceptor::from(Arc::clone(&configs.raw));
            let accepted = timeout(handshake, acceptor.accept(Prefixed::new(raw, stream))).await;
            if accepted.is_err() {
                counters.guard.timed_out(Timeout::Handshake);
            }
            let Ok(Ok(mut tls)) = accepted else {
                tracing::debug!(listener = %label, client = %peer, "TLS handshake failed");
                return;
            };
            let _share = target.load.opened();
            let Some((mut upstream, endpoint, _upstream_fd)) = tcp::connect(
                &target.pool,
                listener.connect_timeout,
                &listener.limits,
                &target.ingress.to_string(),
                label,
            )
            .await
            else {
                let _ = tls.shutdown().await;
                return;
            };
            if let Err(error) =
                tcp::splice(&mut tls, &mut upstream, &mut phase, idle, counters).await
            {
                tracing::debug!(listener = %label, endpoint = %endpoint.addr, %error, "terminated TLS connection ended with an error");
            }
        }
        Plan::Https(secret) => {
            let Some(configs) = listener.certs.get(&secret) else {
                reject(stream, label, hello.sni.as_deref()).await;
                return;
            };
            let acceptor = TlsAcceptor::from(Arc::clone(&configs.http));
            let accepted = timeout(handshake, acceptor.accept(Prefixed::new(raw, stream))).await;
            if accepted.is_err() {
                counters.guard.timed_out(Timeout::Handshake);
            }
            let Ok(Ok(tls)) = accepted else {
                tracing::debug!(listener = %label, client = %peer, "TLS handshake failed");
                return;
            };
            let info = TlsInfo {
                sni: hello.sni,
                secret,
            };
            super::http::serve(tls, Arc::clone(&listener.http), peer, Some(info), phase).await;
        }
        Plan::Reject => reject(stream, label, hello.sni.as_deref()).await,
    }
}

async fn reject(mut stream: TcpStream, label: &str, sni: Option<&str>) {
    tracing::debug!(
        listener = label,
        sni,
        "no rule or certificate for this name; refusing the handshake"
    );
    let _ = stream.write_all(&ALERT_UNRECOGNIZED_NAME).await;
    let _ = stream.shutdown().await;
}

/// A stream that first yields bytes already read from it (the ClientHello).
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    offset: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Prefixed {
            prefix,
            offset: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(rest) = this.prefix.get(this.offset..)
            && !rest.is_empty()
        {
            let n = rest.len().min(buf.remaining());
            buf.put_slice(rest.get(..n).unwrap_or_default());
            this.offset += n;
            if this.offset >= this.prefix.len() {
                this.prefix = Vec::new();
                this.offset = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn prefixed_replays_then_reads_on() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b" world").await.unwrap();
        drop(a);
        let mut stream = Prefixed::new(b"hello".to_vec(), b);
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
