//! The echo backend of the tests and benchmarks: TCP and UDP on one address, sending
//! back what it receives (upper-cased unless told otherwise), with counts of what it
//! served, and its clients ([`tcp_roundtrip`], [`udp_roundtrip`]).
//!
//! An [`Echo`] runs on a thread and tokio runtime of its own, so sync tests, async tests
//! and benchmarks start it alike, and a busy test runtime never starves it. Dropping it
//! closes its sockets and every open connection before `drop` returns, so its address
//! can be bound again at once.
//!
//! Not here: `fedctl dev echo` (product code, run as a process by `fedctl dev up` and in
//! the network-namespace labs) and the TLS and HTTP backends of the L7 tests.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

/// A UDP health check's datagram in these tests (`udp: {send: ping}`): answered, but not
/// counted in [`Echo::udp_served`].
pub const HEALTH_PROBE: &[u8] = b"ping";

/// What an echo sends back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The bytes upper-cased (ASCII), so a reply shows it went through the echo.
    Upper,
    /// The bytes as they came.
    Same,
}

impl Reply {
    fn apply(self, bytes: &mut [u8]) {
        if self == Reply::Upper {
            bytes.make_ascii_uppercase();
        }
    }
}

/// How an [`Echo`] starts (from [`Echo::builder`]): by default TCP and UDP, upper-cased
/// replies, one thread.
#[derive(Clone, Copy, Debug)]
pub struct EchoBuilder {
    reply: Reply,
    udp: bool,
    threads: usize,
}

impl EchoBuilder {
    /// What it sends back.
    pub fn reply(self, reply: Reply) -> EchoBuilder {
        EchoBuilder { reply, ..self }
    }

    /// Whether it serves UDP too.
    pub fn udp(self, udp: bool) -> EchoBuilder {
        EchoBuilder { udp, ..self }
    }

    /// Its runtime's worker threads (for throughput benchmarks); 1, a current-thread
    /// runtime, unless set.
    pub fn threads(self, threads: usize) -> EchoBuilder {
        EchoBuilder { threads, ..self }
    }

    /// Serves on `addr`. With port 0 it picks a port, free for both TCP and UDP when it
    /// serves both.
    ///
    /// # Errors
    /// When the address cannot be bound or the runtime not started.
    pub fn start(self, addr: SocketAddr) -> io::Result<Echo> {
        let (tcp, udp) = bind(addr, self.udp)?;
        let addr = tcp.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (started, handle) = std::sync::mpsc::channel();
        let threads = self.threads;
        let thread = std::thread::Builder::new()
            .name(format!("echo {addr}"))
            .spawn(move || {
                let mut builder = if threads <= 1 {
                    tokio::runtime::Builder::new_current_thread()
                } else {
                    let mut builder = tokio::runtime::Builder::new_multi_thread();
                    builder.worker_threads(threads);
                    builder
                };
                let runtime = match builder.enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                let _ = started.send(Ok(runtime.handle().clone()));
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Dropping the runtime here closes the sockets and every connection.
            })?;
        let handle = handle
            .recv()
            .map_err(|_| io::Error::other("the echo thread ended"))??;
        let mut echo = Echo {
            addr,
            reply: self.reply,
            served: Arc::default(),
            handle,
            tcp: None,
            stop: Some(stop),
            thread: Some(thread),
        };
        echo.serve_tcp(tcp)?;
        if let Some(udp) = udp {
            udp.set_nonblocking(true)?;
            let (reply, served) = (echo.reply, Arc::clone(&echo.served));
            echo.handle.spawn(async move {
                if let Ok(socket) = tokio::net::UdpSocket::from_std(udp) {
                    serve_udp(socket, reply, served).await;
                }
            });
        }
        Ok(echo)
    }
}

/// Binds TCP (and UDP) on `addr`; with port 0 and UDP, a port free for both.
fn bind(addr: SocketAddr, udp: bool) -> io::Result<(TcpListener, Option<UdpSocket>)> {
    if !udp {
        return Ok((TcpListener::bind(addr)?, None));
    }
    if addr.port() != 0 {
        return Ok((TcpListener::bind(addr)?, Some(UdpSocket::bind(addr)?)));
    }
    for _ in 0..50 {
        let tcp = TcpListener::bind(addr)?;
        // The UDP port of the same number may be taken: try another.
        if let Ok(udp) = UdpSocket::bind(tcp.local_addr()?) {
            return Ok((tcp, Some(udp)));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no port free for both TCP and UDP on {}", addr.ip()),
    ))
}

/// A running echo backend; stops (sockets and connections closed) when dropped.
pub struct Echo {
    /// Where it listens (the picked port when started on port 0).
    pub addr: SocketAddr,
    reply: Reply,
    served: Arc<Served>,
    handle: tokio::runtime::Handle,
    tcp: Option<JoinHandle<()>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Served {
    tcp: AtomicUsize,
    udp: AtomicUsize,
}

impl Echo {
    /// TCP and UDP on `addr`, upper-casing: [`Echo::builder`]`().start(addr)`.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub fn start(addr: SocketAddr) -> io::Result<Echo> {
        Echo::builder().start(addr)
    }

    /// Another reply, TCP only, or more threads.
    pub fn builder() -> EchoBuilder {
        EchoBuilder {
            reply: Reply::Upper,
            udp: true,
            threads: 1,
        }
    }

    /// TCP connections that carried data (a health check that only connects is not
    /// counted).
    pub fn tcp_served(&self) -> usize {
        self.served.tcp.load(Ordering::SeqCst)
    }

    /// UDP datagrams other than [`HEALTH_PROBE`].
    pub fn udp_served(&self) -> usize {
        self.served.udp.load(Ordering::SeqCst)
    }

    /// Closes the TCP listener and every open TCP connection (UDP goes on): the port
    /// refuses once this returns.
    pub fn stop_tcp(&mut self) {
        if let Some(task) = self.tcp.take() {
            task.abort();
            // The echo's own runtime drops the listener (the task is finished once it
            // has): wait for it, a matter of microseconds.
            while !task.is_finished() {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// Listens on TCP again, on the same address.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub fn start_tcp(&mut self) -> io::Result<()> {
        self.stop_tcp();
        self.serve_tcp(TcpListener::bind(self.addr)?)
    }

    fn serve_tcp(&mut self, listener: TcpListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let (reply, served) = (self.reply, Arc::clone(&self.served));
        self.tcp = Some(self.handle.spawn(async move {
            if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                serve_tcp(listener, reply, served).await;
            }
        }));
        Ok(())
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve_tcp(listener: tokio::net::TcpListener, reply: Reply, served: Arc<Served>) {
    // Connections live in this task's set: stopping the listener closes them too.
    let mut connections = JoinSet::new();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let served = Arc::clone(&served);
        connections.spawn(async move {
            let mut buffer = vec![0u8; 65536];
            let mut first = true;
            loop {
                let n = match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if first {
                    served.tcp.fetch_add(1, Ordering::SeqCst);
                    first = false;
                }
                reply.apply(&mut buffer[..n]);
                if stream.write_all(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn serve_udp(socket: tokio::net::UdpSocket, reply: Reply, served: Arc<Served>) {
    let mut buffer = vec![0u8; 65536];
    loop {
        let Ok((n, from)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        if &buffer[..n] != HEALTH_PROBE {
            served.udp.fetch_add(1, Ordering::SeqCst);
        }
        reply.apply(&mut buffer[..n]);
        let _ = socket.send_to(&buffer[..n], from).await;
    }
}

/// Sends `text` over TCP to `addr` and returns the answer (or an error text).
///
/// # Errors
/// What failed (connect, write, read), as text for [`crate::eventually`].
pub fn tcp_roundtrip(addr: SocketAddr, text: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(text.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut buffer = vec![0u8; text.len()];
    stream
        .read_exact(&mut buffer)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    Ok(String::from_utf8_lossy(&buffer).into_owned())
}

/// Sends `text` in one UDP datagram to `addr` and returns the answer (or an error text).
///
/// # Errors
/// What failed (send, receive within a second), as text for [`crate::eventually`].
pub fn udp_roundtrip(addr: SocketAddr, text: &str) -> Result<String, String> {
    let local: SocketAddr = if addr.is_ipv4() {
        SocketAddr::from(([127, 0, 0, 1], 0))
    } else {
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 0))
    };
    let socket = UdpSocket::bind(local).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    socket
        .send_to(text.as_bytes(), addr)
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut buffer = vec![0u8; 65536];
    let (n, _) = socket
        .recv_from(&mut buffer)
        .map_err(|e| format!("recv from {addr}: {e}"))?;
    Ok(String::from_utf8_lossy(&buffer[..n]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPBACK: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

    #[test]
    fn echoes_tcp_and_udp_on_one_port_and_counts_what_it_served() {
        let echo = Echo::start(LOOPBACK).unwrap();
        assert_ne!(echo.addr.port(), 0);
        assert_eq!(tcp_roundtrip(echo.addr, "hello").unwrap(), "HELLO");
        assert_eq!(udp_roundtrip(echo.addr, "hi").unwrap(), "HI");
        assert_eq!(udp_roundtrip(echo.addr, "ping").unwrap(), "PING");
        // A connection that sends nothing is no service.
        drop(TcpStream::connect(echo.addr).unwrap());
        assert_eq!((echo.tcp_served(), echo.udp_served()), (1, 1));
    }

    #[test]
    fn stops_and_restarts_tcp_on_the_same_address_and_closes_on_drop() {
        let mut echo = Echo::builder()
            .reply(Reply::Same)
            .udp(false)
            .start(LOOPBACK)
            .unwrap();
        let addr = echo.addr;
        assert_eq!(tcp_roundtrip(addr, "as is").unwrap(), "as is");
        echo.stop_tcp();
        assert!(TcpStream::connect(addr).is_err(), "refused once stopped");
        echo.start_tcp().unwrap();
        assert_eq!(tcp_roundtrip(addr, "back").unwrap(), "back");
        drop(echo);
        assert!(TcpStream::connect(addr).is_err(), "refused once dropped");
        // Free again at once.
        let again = Echo::builder().threads(2).start(addr).unwrap();
        assert_eq!(tcp_roundtrip(addr, "x").unwrap(), "X");
        drop(again);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn starts_and_stops_inside_an_async_test() {
        let echo = Echo::start(LOOPBACK).unwrap();
        let addr = echo.addr;
        let answer = tokio::task::spawn_blocking(move || tcp_roundtrip(addr, "busy"))
            .await
            .unwrap();
        assert_eq!(answer.unwrap(), "BUSY");
        drop(echo);
    }
}
