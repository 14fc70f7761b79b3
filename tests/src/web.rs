//! HTTP and TLS peers for the L7 end-to-end tests: an HTTP/1.1 backend that says who it
//! is and what it received ([`Web`]), a TLS client that checks the peer against a CA
//! ([`tls_roundtrip`]), and `curl` ([`curl`]). The TLS echo backend and the test CA are
//! `fedingress_testsupport::tls`'s.
//!
//! Each peer runs on its own thread, so sync tests can start and stop it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A running HTTP/1.1 backend; stops (closing its connections) when dropped.
pub struct Web {
    pub addr: SocketAddr,
    /// Slow requests (`/slow/<ms>`) being answered now.
    pub in_flight: Arc<AtomicUsize>,
    /// Status of `/healthz`.
    pub health: Arc<AtomicU16>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Web {
    /// Serves on `addr`. Answers `/healthz` with [`Web::health`], `/slow/<ms>` with
    /// `slow done` after that long, anything else with JSON naming `name` and echoing
    /// the path and the forwarding headers.
    pub fn start(addr: SocketAddr, name: &str) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let health = Arc::new(AtomicU16::new(200));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let name: Arc<str> = name.into();
        let (flight, status) = (Arc::clone(&in_flight), Arc::clone(&health));
        let thread = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let serve = async {
                    while let Ok((stream, _)) = listener.accept().await {
                        let (name, flight, status) =
                            (Arc::clone(&name), Arc::clone(&flight), Arc::clone(&status));
                        tokio::spawn(serve_http(stream, name, flight, status));
                    }
                };
                tokio::select! {
                    () = serve => {}
                    _ = stop_rx => {}
                }
            });
            // Dropping the runtime closes the socket and every connection.
        });
        Ok(Self {
            addr,
            in_flight,
            health,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Counts a slow request until it ends, answered or dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve_http(
    stream: tokio::net::TcpStream,
    name: Arc<str>,
    in_flight: Arc<AtomicUsize>,
    health: Arc<AtomicU16>,
) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        match stream.read_line(&mut request_line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut headers: Vec<(String, String)> = Vec::new();
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((key, value)) = line.split_once(':') {
                headers.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        let header = |key: &str| {
            headers
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let length: usize = header("content-length").parse().unwrap_or(0);
        if length > 0 {
            let mut body = vec![0u8; length];
            if stream.read_exact(&mut body).await.is_err() {
                return;
            }
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string();
        let (status, body) = if path == "/healthz" {
            (health.load(Ordering::SeqCst), "ok".to_string())
        } else if let Some(ms) = path.strip_prefix("/slow/") {
            in_flight.fetch_add(1, Ordering::SeqCst);
            let _guard = InFlight(Arc::clone(&in_flight));
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(1000))).await;
            (200, "slow done".to_string())
        } else {
            let body = serde_json::json!({
                "backend": &*name,
                "path": path,
                "host": header("host"),
                "xff": header("x-forwarded-for"),
                "xfp": header("x-forwarded-proto"),
                "xfh": header("x-forwarded-host"),
                "forwarded": header("forwarded"),
            });
            (200, body.to_string())
        };
        let close = header("connection").eq_ignore_ascii_case("close");
        let response = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if stream
            .get_mut()
            .write_all(response.as_bytes())
            .await
            .is_err()
            || close
        {
            return;
        }
    }
}

/// Connects to `addr` with SNI `sni`, verifies the peer against `ca_pem`, sends `text`
/// and returns the answer (or why not).
pub fn tls_roundtrip(
    addr: SocketAddr,
    sni: &str,
    ca_pem: &str,
    text: &str,
) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(connection, stream);
    tls.write_all(text.as_bytes())
        .map_err(|e| format!("TLS write: {e}"))?;
    tls.flush().map_err(|e| format!("TLS flush: {e}"))?;
    let mut buffer = vec![0u8; text.len()];
    tls.read_exact(&mut buffer)
        .map_err(|e| format!("TLS read: {e}"))?;
    Ok(String::from_utf8_lossy(&buffer).into_owned())
}

/// What `curl` did: exit status, stdout, stderr.
#[derive(Debug)]
pub struct Curl {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `curl -sS --max-time 10 ARGS`.
pub fn curl(args: &[&str]) -> Curl {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("running curl (install it: apt-get install curl)");
    Curl {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
