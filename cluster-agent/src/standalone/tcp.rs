//! The TCP proxy of one bound listener: accept, pick an endpoint, connect, copy both ways.
//!
//! A failed connect counts against the endpoint (passive ejection) and the next
//! candidate is tried; with none left the client connection is closed. Connections run
//! in their own tasks, so closing the listener stops accepting but lets established
//! connections finish.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::time::timeout;

use super::Route;
use super::load::{Active, LoadCounters};

const BACKLOG: i32 = 1024;

/// Binds a TCP listener (address reuse for quick restarts; IPv6 sockets are IPv6-only,
/// so `0.0.0.0` and `::` can both be bound).
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(SockProtocol::TCP),
    )?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}

/// Serves `listener` until `stop` fires (or its sender is dropped).
pub(crate) async fn serve(
    listener: TcpListener,
    label: String,
    routes: watch::Receiver<Arc<Route>>,
    load: Arc<LoadCounters>,
    connect_timeout: Duration,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((client, peer)) => {
                let route = Arc::clone(&routes.borrow());
                let active = load.opened();
                let label = label.clone();
                tokio::spawn(proxy(client, peer, route, active, connect_timeout, label));
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

async fn proxy(
    mut client: TcpStream,
    peer: SocketAddr,
    route: Arc<Route>,
    _active: Active,
    connect_timeout: Duration,
    label: String,
) {
    let _ = client.set_nodelay(true);
    for endpoint in route.pool.candidates() {
        let connected = timeout(connect_timeout, TcpStream::connect(endpoint.addr))
            .await
            .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")));
        let mut upstream = match connected {
            Ok(upstream) => upstream,
            Err(error) => {
                tracing::debug!(
                    ingress = %route.ingress,
                    listener = %label,
                    endpoint = %endpoint.addr,
                    %error,
                    "connecting to endpoint failed"
                );
                endpoint.record(false, "proxy");
                continue;
            }
        };
        endpoint.record(true, "proxy");
        let _ = upstream.set_nodelay(true);
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            tracing::debug!(
                ingress = %route.ingress,
                listener = %label,
                endpoint = %endpoint.addr,
                client = %peer,
                %error,
                "TCP connection ended with an error"
            );
        }
        return;
    }
    tracing::debug!(
        ingress = %route.ingress,
        rule = route.rule,
        listener = %label,
        client = %peer,
        "no healthy endpoint; closing the client connection"
    );
}
