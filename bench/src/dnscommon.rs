//! Shared by `dns-bench` and `failover-bench` (included with `mod dnscommon;`): the
//! release apiserver started with a `dns:` section, and hand-built DNS packets (a query
//! with an optional EDNS Client Subnet option, and just enough of a response parser to
//! read the rcode and the A records of the answer section).

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use fedingress_bench::{HubTiming, Proc};

/// The zone every bench name lives in.
pub const ZONE: &str = "fedingress.test";

/// The three regions of the location table: (region, client /16 for ECS, cluster
/// latitude, longitude). Clients in 10.1/16 are in Europe, 10.2/16 US east, 10.3/16
/// India; anything else (e.g. 127.0.0.1 without ECS) is the default, Europe.
pub const REGIONS: [(&str, u8, f64, f64); 3] = [
    ("europe-west1", 1, 50.4, 3.8),
    ("us-east1", 2, 39.0, -77.5),
    ("asia-south1", 3, 19.1, 72.9),
];

/// The `dns:` section: one zone, a 3-region location table, listening on `ip:0`.
pub fn dns_section(ip: &str) -> String {
    format!(
        "dns:
  listen: {ip}:0
  zones:
  - name: {ZONE}
    nameservers: [ns1.{ZONE}]
    soa: {{mname: ns1.{ZONE}, rname: hostmaster.{ZONE}, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}
  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
    table:
    - {{cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}}
    - {{cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}}
    - {{cidr: 10.3.0.0/16, region: asia-south1, latitude: 19.0, longitude: 72.8}}
"
    )
}

/// The release `federation-apiserver` with DNS: `--dev`, fresh temp data dir, API,
/// agent gateway and DNS (UDP+TCP) on `ip`:0.
pub struct DnsHub {
    pub proc: Proc,
    /// `http://ip:port` of the REST API.
    pub api: String,
    /// `host:port` of the agent gateway.
    pub agent: String,
    /// UDP/TCP address of the embedded DNS server.
    pub dns: SocketAddr,
    _dir: tempfile::TempDir,
}

impl DnsHub {
    /// `log` is the hub's `FEDINGRESS_LOG` (e.g. `warn`, `error`).
    pub async fn start(
        binary: &Path,
        ip: &str,
        timing: HubTiming,
        log: &str,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("apiserver.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: {ip}:0\nagentListen: {ip}:0\ndev: true\nagents:\n  heartbeatIntervalMs: {}\n  leaseMs: {}\n{}",
                timing.heartbeat_ms,
                timing.lease_ms,
                dns_section(ip)
            ),
        )?;
        let mut command = Command::new(binary);
        command
            .arg("--config")
            .arg(&config)
            .arg("--dev")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("FEDINGRESS_LOG", log);
        let proc = Proc::start_ready(command, "federation-apiserver").await?;
        let dns = proc
            .addr("dns")
            .parse()
            .context("no `dns` address in the READY line")?;
        Ok(Self {
            api: format!("http://{}", proc.addr("api")),
            agent: proc.addr("agent"),
            dns,
            proc,
            _dir: dir,
        })
    }
}

// --- DNS wire ----------------------------------------------------------------------

pub const TYPE_A: u16 = 1;
const TYPE_OPT: u16 = 41;
const OPTION_ECS: u16 = 8;

/// A standard query (RD clear) for `name`/`qtype` class IN. With `ecs`, an OPT record
/// (payload 1232) carrying an EDNS Client Subnet option for `ecs`/24 (source prefix 24,
/// scope 0, three address bytes: RFC 7871).
pub fn query(id: u16, name: &str, qtype: u16, ecs: Option<Ipv4Addr>) -> Vec<u8> {
    let mut packet = Vec::with_capacity(64);
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&[0, 0]); // flags: standard query, RD clear
    packet.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    packet.extend_from_slice(&[0, 0, 0, 0]); // ANCOUNT, NSCOUNT
    packet.extend_from_slice(&u16::from(ecs.is_some()).to_be_bytes()); // ARCOUNT
    for label in name.trim_end_matches('.').split('.') {
        packet.push(label.len() as u8);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.push(0);
    packet.extend_from_slice(&qtype.to_be_bytes());
    packet.extend_from_slice(&1u16.to_be_bytes()); // IN
    if let Some(ip) = ecs {
        let octets = ip.octets();
        packet.push(0); // root
        packet.extend_from_slice(&TYPE_OPT.to_be_bytes());
        packet.extend_from_slice(&1232u16.to_be_bytes()); // UDP payload size
        packet.extend_from_slice(&[0, 0, 0, 0]); // extended rcode, version 0, flags
        packet.extend_from_slice(&11u16.to_be_bytes()); // RDLENGTH
        packet.extend_from_slice(&OPTION_ECS.to_be_bytes());
        packet.extend_from_slice(&7u16.to_be_bytes());
        packet.extend_from_slice(&1u16.to_be_bytes()); // family IPv4
        packet.push(24); // source prefix
        packet.push(0); // scope prefix
        packet.extend_from_slice(&octets[..3]);
    }
    packet
}

/// What [`parse`] read of a response.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Response {
    pub id: u16,
    pub rcode: u8,
    pub authoritative: bool,
    /// A records of the answer section, in order.
    pub a: Vec<Ipv4Addr>,
}

/// Skips a (possibly compressed) name at `at`; returns the offset after it.
fn skip_name(packet: &[u8], mut at: usize) -> anyhow::Result<usize> {
    loop {
        let len = *packet.get(at).context("name runs past the end")?;
        if len & 0xC0 == 0xC0 {
            return Ok(at + 2);
        }
        if len == 0 {
            return Ok(at + 1);
        }
        at += 1 + usize::from(len);
    }
}

fn u16_at(packet: &[u8], at: usize) -> anyhow::Result<u16> {
    let bytes = packet.get(at..at + 2).context("packet too short")?;
    Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
}

/// Reads the header and the A records of the answer section of a response.
pub fn parse(packet: &[u8]) -> anyhow::Result<Response> {
    if packet.len() < 12 {
        bail!("shorter than a header");
    }
    if packet[2] & 0x80 == 0 {
        bail!("not a response");
    }
    let mut response = Response {
        id: u16_at(packet, 0)?,
        rcode: packet[3] & 0x0F,
        authoritative: packet[2] & 0x04 != 0,
        a: Vec::new(),
    };
    let questions = u16_at(packet, 4)?;
    let answers = u16_at(packet, 6)?;
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(packet, at)? + 4;
    }
    for _ in 0..answers {
        at = skip_name(packet, at)?;
        let rtype = u16_at(packet, at)?;
        let rdlength = usize::from(u16_at(packet, at + 8)?);
        let rdata = packet
            .get(at + 10..at + 10 + rdlength)
            .context("record data runs past the end")?;
        if rtype == TYPE_A && rdlength == 4 {
            response
                .a
                .push(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]));
        }
        at += 10 + rdlength;
    }
    Ok(response)
}

/// One query over UDP from `socket` (bound, not connected) to `server`; waits up to
/// `timeout` for the response with the same ID.
pub async fn ask(
    socket: &tokio::net::UdpSocket,
    server: SocketAddr,
    packet: &[u8],
    timeout: Duration,
) -> anyhow::Result<Response> {
    let id = u16_at(packet, 0)?;
    socket.send_to(packet, server).await?;
    let mut buffer = [0u8; 1500];
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (n, from) = tokio::time::timeout_at(deadline, socket.recv_from(&mut buffer))
            .await
            .context("no DNS response in time")??;
        if from != server {
            continue;
        }
        let response = parse(&buffer[..n])?;
        if response.id == id {
            return Ok(response);
        }
    }
}

/// The ECS client address of a region: `10.<block>.<i % 256>.0`.
pub fn region_client(block: u8, i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, block, (i % 256) as u8, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_parse() {
        let q = query(
            0x1234,
            "g0001.fedingress.test",
            TYPE_A,
            Some("10.2.3.0".parse().unwrap()),
        );
        // header 12 + name (1+5+1+10+1+4+1 = 23) + 4 + OPT 11 + option 11
        assert_eq!(q.len(), 12 + 23 + 4 + 11 + 11);
        assert_eq!(&q[q.len() - 3..], &[10, 2, 3]);
        // A hand-made response: the query with QR|AA, one compressed A record.
        let mut r = query(0x1234, "x.test", TYPE_A, None);
        r[2] = 0x84;
        r[7] = 1;
        r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 127, 0, 0, 9]);
        let parsed = parse(&r).unwrap();
        assert_eq!(parsed.id, 0x1234);
        assert!(parsed.authoritative);
        assert_eq!(parsed.a, vec![Ipv4Addr::new(127, 0, 0, 9)]);
    }
}
