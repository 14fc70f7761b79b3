//! A TCP+UDP echo service on ONE address and port that upper-cases what it receives
//! (the seed blog's mixed-protocol service), run on its own thread so sync tests can
//! start and stop it.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A running echo service; stops when dropped.
pub struct Echo {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Echo {
    /// Serves TCP and UDP on `addr` (both must be free).
    pub fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        let tcp = std::net::TcpListener::bind(addr)?;
        let udp = UdpSocket::bind(addr)?;
        tcp.set_nonblocking(true)?;
        udp.set_nonblocking(true)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let (Ok(tcp), Ok(udp)) = (
                    tokio::net::TcpListener::from_std(tcp),
                    tokio::net::UdpSocket::from_std(udp),
                ) else {
                    return;
                };
                let serve_udp = async {
                    let mut buffer = vec![0u8; 65536];
                    while let Ok((n, from)) = udp.recv_from(&mut buffer).await {
                        let reply = buffer[..n].to_ascii_uppercase();
                        let _ = udp.send_to(&reply, from).await;
                    }
                };
                let serve_tcp = async {
                    while let Ok((mut stream, _)) = tcp.accept().await {
                        tokio::spawn(async move {
                            let mut buffer = vec![0u8; 16384];
                            while let Ok(n) = stream.read(&mut buffer).await {
                                if n == 0
                                    || stream
                                        .write_all(&buffer[..n].to_ascii_uppercase())
                                        .await
                                        .is_err()
                                {
                                    return;
                                }
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = serve_udp => {}
                    _ = serve_tcp => {}
                    _ = stop_rx => {}
                }
            });
            // Dropping the runtime closes the sockets and every open connection.
        });
        Ok(Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
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

/// Sends `text` over TCP to `addr` and returns the answer (or an error text).
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
pub fn udp_roundtrip(addr: SocketAddr, text: &str) -> Result<String, String> {
    let local: SocketAddr = if addr.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    }
    .parse()
    .map_err(|e| format!("{e}"))?;
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
