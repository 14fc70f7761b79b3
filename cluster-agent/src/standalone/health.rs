//! Active health checks: one task per (service, endpoint) probes it every interval and
//! feeds the result into the endpoint's state machine (see [`super::endpoint`]).
//!
//! Probes: for endpoints behind HTTP or HTTPS routes an HTTP/1.1 `GET` of
//! `healthCheck.http.path` whose status must be in `expectStatus`; a TCP connect for
//! endpoints behind TCP and TLS listeners (the HTTP probe connects too, so it stands in
//! for it); for endpoints behind UDP listeners the configured UDP probe (send a payload,
//! expect a reply starting with a prefix), or without one the TCP connect too, which fits
//! backends that serve both transports on one port (set `healthCheck.udp` for UDP-only
//! backends). An endpoint behind several kinds gets every probe; a round passes only
//! when every probe passes, since the endpoint has one health state.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio::time::{MissedTickBehavior, timeout};

use super::endpoint::Endpoint;
use crate::config::{HealthCheckConfig, HttpProbe, UdpProbe};

/// How endpoints are checked.
#[derive(Clone, Debug)]
pub(crate) struct CheckSettings {
    pub interval: Duration,
    pub timeout: Duration,
    pub udp: Option<UdpProbe>,
    pub http: HttpProbe,
}

impl From<&HealthCheckConfig> for CheckSettings {
    fn from(config: &HealthCheckConfig) -> Self {
        CheckSettings {
            interval: config.interval(),
            timeout: config.timeout(),
            udp: config.udp.clone(),
            http: config.http.clone(),
        }
    }
}

/// Starts checking `endpoint`: the first probe at once, then every interval.
pub(crate) fn spawn(endpoint: Arc<Endpoint>, settings: Arc<CheckSettings>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(settings.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let result = check(&endpoint, &settings).await;
            if let Err(error) = &result {
                tracing::debug!(
                    service = %endpoint.service,
                    endpoint = %endpoint.addr,
                    %error,
                    "health check failed"
                );
            }
            endpoint.record(result.is_ok(), "check");
        }
    })
}

async fn check(endpoint: &Endpoint, settings: &CheckSettings) -> io::Result<()> {
    let behind_udp = endpoint.behind_udp.load(Ordering::Relaxed);
    let udp_probe = settings.udp.as_ref().filter(|_| behind_udp);
    let http = endpoint.behind_http.load(Ordering::Relaxed);
    let tcp = endpoint.behind_tcp.load(Ordering::Relaxed) || (behind_udp && udp_probe.is_none());
    if http {
        probe_http(endpoint.addr, &settings.http, settings.timeout).await?;
    } else if tcp {
        probe_tcp(endpoint.addr, settings.timeout).await?;
    }
    if let Some(probe) = udp_probe {
        probe_udp(endpoint.addr, probe, settings.timeout).await?;
    }
    Ok(())
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "health check timed out")
}

async fn probe_tcp(addr: SocketAddr, limit: Duration) -> io::Result<()> {
    timeout(limit, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())??;
    Ok(())
}

/// The largest status line (and headers read with it) the HTTP probe looks at.
const MAX_STATUS_LINE: usize = 8192;

/// `GET path` over HTTP/1.1 with `Connection: close`; passes when the status is in the
/// expected range. Reads only up to the end of the status line.
pub(crate) async fn probe_http(
    addr: SocketAddr,
    probe: &HttpProbe,
    limit: Duration,
) -> io::Result<()> {
    let status = timeout(limit, async {
        let mut stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        let host = probe.host.clone().unwrap_or_else(|| addr.to_string());
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: fedingress-agent-health\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            probe.path
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = Vec::with_capacity(512);
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
            if buf.windows(2).any(|w| w == b"\r\n") || buf.len() > MAX_STATUS_LINE {
                break;
            }
        }
        parse_status(&buf)
    })
    .await
    .map_err(|_| timed_out())??;
    if probe.expect_status.contains(status) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "HTTP health check answered {status}, expected {}",
            probe.expect_status
        )))
    }
}

/// The status code of `HTTP/1.x NNN ...`.
fn parse_status(response: &[u8]) -> io::Result<u16> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "not an HTTP/1.x response");
    let line_end = response
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or_else(invalid)?;
    let line =
        std::str::from_utf8(response.get(..line_end).unwrap_or_default()).map_err(|_| invalid())?;
    let mut parts = line.split(' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(invalid());
    }
    parts
        .next()
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| (100..=599).contains(code))
        .ok_or_else(invalid)
}

/// An unconnected local address of `addr`'s family.
pub(crate) fn any_local(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
    }
}

async fn probe_udp(addr: SocketAddr, probe: &UdpProbe, limit: Duration) -> io::Result<()> {
    timeout(limit, async {
        let socket = UdpSocket::bind(any_local(addr)).await?;
        socket.connect(addr).await?;
        socket.send(probe.send.as_bytes()).await?;
        let mut buf = vec![0u8; 65_535];
        let n = socket.recv(&mut buf).await?;
        let reply = buf.get(..n).unwrap_or_default();
        if reply.starts_with(probe.expect.as_bytes()) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "UDP health check reply does not start with the expected bytes",
            ))
        }
    })
    .await
    .map_err(|_| timed_out())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StatusRange;
    use tokio::net::TcpListener;

    #[test]
    fn status_lines_parse() {
        assert_eq!(parse_status(b"HTTP/1.1 204 No Content\r\n").unwrap(), 204);
        assert_eq!(parse_status(b"HTTP/1.0 503\r\nx: y\r\n").unwrap(), 503);
        for bad in [
            &b"HTTP/1.1 200"[..],
            b"SSH-2.0-x\r\n",
            b"HTTP/1.1 abc\r\n",
            b"HTTP/1.1 999 x\r\n",
        ] {
            assert!(parse_status(bad).is_err(), "{bad:?}");
        }
    }

    /// A server answering every connection with `status` after reading the request.
    async fn answering(status: u16) -> (SocketAddr, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut requests = Vec::new();
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = stream.read(&mut buf).await.unwrap();
            requests.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
            stream.write_all(answer.as_bytes()).await.unwrap();
            requests
        });
        (addr, task)
    }

    #[tokio::test]
    async fn http_probe_checks_the_status_against_the_range() {
        let probe = HttpProbe {
            path: "/healthz?full=1".into(),
            expect_status: StatusRange { min: 200, max: 299 },
            host: Some("shop.example.com".into()),
        };
        let (addr, server) = answering(204).await;
        probe_http(addr, &probe, Duration::from_secs(2))
            .await
            .unwrap();
        let request = &server.await.unwrap()[0];
        assert!(
            request.starts_with("GET /healthz?full=1 HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("Host: shop.example.com\r\n"), "{request}");

        let (addr, _server) = answering(500).await;
        let err = probe_http(addr, &probe, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("answered 500, expected 200-299"),
            "{err}"
        );

        // Nobody listening.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = listener.local_addr().unwrap();
        drop(listener);
        assert!(
            probe_http(closed, &probe, Duration::from_secs(2))
                .await
                .is_err()
        );
    }
}
