//! Active health checks: one task per (service, endpoint) probes it every interval and
//! feeds the result into the endpoint's state machine (see [`super::endpoint`]).
//!
//! Probes: a TCP connect for endpoints behind TCP listeners; for endpoints behind UDP
//! listeners the configured UDP probe (send a payload, expect a reply starting with a
//! prefix), or without one the TCP connect too, which fits backends that serve both
//! transports on one port (set `healthCheck.udp` for UDP-only backends). An endpoint
//! behind both gets both probes; a round passes only when every probe passes, since the
//! endpoint has one health state.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tokio::time::{MissedTickBehavior, timeout};

use super::endpoint::Endpoint;
use crate::config::{HealthCheckConfig, UdpProbe};

/// How endpoints are checked.
#[derive(Clone, Debug)]
pub(crate) struct CheckSettings {
    pub interval: Duration,
    pub timeout: Duration,
    pub udp: Option<UdpProbe>,
}

impl From<&HealthCheckConfig> for CheckSettings {
    fn from(config: &HealthCheckConfig) -> Self {
        CheckSettings {
            interval: config.interval(),
            timeout: config.timeout(),
            udp: config.udp.clone(),
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
    let tcp = endpoint.behind_tcp.load(Ordering::Relaxed) || (behind_udp && udp_probe.is_none());
    if tcp {
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
