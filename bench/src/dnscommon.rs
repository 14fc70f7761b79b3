//! Shared by the DNS benches `dns-bench`, `dns-geo-bench`, `dns-rrl-bench`,
//! `failover-bench`, `anycast-bench` and the load generator `ecs-load`: the release
//! apiserver started with a `dns:` section ([`DnsHub`]), hand-built DNS packets (a query
//! with an optional EDNS Client Subnet option, and just enough of a response parser to
//! read the rcode and the A records of the answer section), the federation of 1,000 Geo
//! ingresses on 3 clusters with simulated agents ([`GeoFleet`]) and the checks of its
//! answers, and Knot DNS with the same names ([`start_knot`]; with `mod-rrl`:
//! [`start_knot_with`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fedingress_testsupport::dns::Query;
use futures_util::StreamExt;
use serde_json::json;
use tokio::task::JoinHandle;
use tonic::transport::Endpoint;

use crate::sim_agent::{AgentStats, agent};
use crate::{Api, GROUP_PATH, HubTiming, Proc};

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

/// The `dns:` section: one zone, a 3-region location table, listening on `ip:0`; with
/// `mmdb`, that MaxMind database for clients outside the table.
pub fn dns_section(ip: &str, mmdb: Option<&Path>) -> String {
    format!(
        "dns:
  listen: {ip}:0
  zones:
  - name: {ZONE}
    nameservers: [ns1.{ZONE}]
    soa: {{mname: ns1.{ZONE}, rname: hostmaster.{ZONE}, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}
{}",
        locations_section(mmdb)
    )
}

/// The `locations:` part of [`dns_section`] (indented for the `dns:` section).
pub fn locations_section(mmdb: Option<&Path>) -> String {
    let mmdb = mmdb
        .map(|path| format!("  mmdb: \"{}\"\n", path.display()))
        .unwrap_or_default();
    format!(
        "  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
    table:
    - {{cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}}
    - {{cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}}
    - {{cidr: 10.3.0.0/16, region: asia-south1, latitude: 19.0, longitude: 72.8}}
{mmdb}"
    )
}

/// Agent session settings of `deploy/config/apiserver.yaml` (heartbeat 2 s, lease 6 s).
pub const DEPLOY_TIMING: HubTiming = HubTiming {
    heartbeat_ms: 2000,
    lease_ms: 6000,
};

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
    /// `log` is the hub's `FEDINGRESS_LOG` (e.g. `warn`, `error`); `mmdb` as in
    /// [`dns_section`].
    pub async fn start(
        binary: &Path,
        ip: &str,
        timing: HubTiming,
        log: &str,
        mmdb: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Self::start_with(binary, ip, timing, log, mmdb, "").await
    }

    /// As [`DnsHub::start`], with `extra` appended to the `dns:` section (keys indented
    /// by two spaces, e.g. `  rrl:\n    enabled: false\n`).
    pub async fn start_with(
        binary: &Path,
        ip: &str,
        timing: HubTiming,
        log: &str,
        mmdb: Option<&Path>,
        extra: &str,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("apiserver.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: {ip}:0\nagentListen: {ip}:0\ndev: true\nagents:\n  heartbeatIntervalMs: {}\n  leaseMs: {}\n{}{extra}",
                timing.heartbeat_ms,
                timing.lease_ms,
                dns_section(ip, mmdb)
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

pub use fedingress_testsupport::dns::{TYPE_A, TYPE_SOA};

/// What [`parse`] read of a response.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Response {
    pub id: u16,
    pub rcode: u8,
    pub authoritative: bool,
    /// A records of the answer section, in order.
    pub a: Vec<Ipv4Addr>,
    /// The serial of the answer section's SOA record, if it has one.
    pub serial: Option<u32>,
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
        serial: None,
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
        if rtype == TYPE_SOA {
            // MNAME and RNAME (possibly compressed), then the serial.
            let serial_at = skip_name(packet, skip_name(packet, at + 10)?)?;
            let bytes = packet
                .get(serial_at..serial_at + 4)
                .context("SOA serial runs past the end")?;
            response.serial = Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
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

// --- ecs-load ---------------------------------------------------------------------------

/// How hard `ecs-load` sends: its flags, which `dns-geo-bench` passes on unchanged.
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct LoadFlags {
    /// UDP sockets, one thread each.
    #[arg(long, default_value_t = 2)]
    pub sockets: usize,
    /// Queries outstanding per socket at most (closed loop: always, once started).
    #[arg(long, default_value_t = 50)]
    pub window: usize,
    /// Open loop: queries per second over all sockets (0 = closed loop, as fast as the
    /// windows allow).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// A query unanswered this long is lost.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
}

impl LoadFlags {
    /// The flags as `ecs-load` arguments.
    pub fn to_args(self) -> Vec<String> {
        [
            ("--sockets", self.sockets as u64),
            ("--window", self.window as u64),
            ("--rate", self.rate),
            ("--timeout-ms", self.timeout_ms),
        ]
        .iter()
        .flat_map(|(flag, value)| [flag.to_string(), value.to_string()])
        .collect()
    }
}

// --- the GSLB setup ------------------------------------------------------------------

/// Namespace of the bench ingresses.
pub const NS: &str = "bench";
/// Addresses the clusters' agents report (never bound: only answered), c1..c3 in the
/// order of [`REGIONS`].
pub const CLUSTER_IPS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 91, 11),
    Ipv4Addr::new(127, 0, 91, 12),
    Ipv4Addr::new(127, 0, 91, 13),
];
/// TTL of every bench name, ours and the peers'.
pub const TTL: u32 = 30;

/// The bench name of ingress `i`: `gNNNN.fedingress.test`.
pub fn name(i: usize) -> String {
    format!("g{i:04}.{ZONE}")
}

/// The federation the DNS benches query: 3 Clusters (c1..c3 in [`REGIONS`]) with
/// simulated agents and `n` Geo FederatedIngresses `gNNNN` (one TCP rule each, TTL
/// [`TTL`]), healthy everywhere. The agents stop when this is dropped.
pub struct GeoFleet {
    pub stats: Arc<AgentStats>,
    agents: Vec<JoinHandle<()>>,
}

impl GeoFleet {
    /// Creates the clusters, tokens, agents and ingresses (16 requests at a time) and
    /// waits until every name gives the expected Geo answer without ECS and with ECS from
    /// each region of the table.
    pub async fn create(hub: &DnsHub, n: usize) -> anyhow::Result<Self> {
        let api = Api::new(&hub.api)?;
        api.create_namespace(NS).await?;
        let stats = Arc::new(AgentStats::default());
        let mut fleet = Self {
            stats: stats.clone(),
            agents: Vec::new(),
        };
        let endpoint = Endpoint::from_shared(format!("http://{}", hub.agent))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10));
        for (c, (region, _, lat, lon)) in REGIONS.iter().enumerate() {
            let cluster = format!("c{}", c + 1);
            api.create_cluster(&cluster, region, *lat, *lon).await?;
            let token = api.issue_token(&cluster).await?;
            let channel = endpoint.connect().await?;
            fleet.agents.push(tokio::spawn(agent(
                channel,
                cluster,
                token,
                CLUSTER_IPS[c],
                stats.clone(),
            )));
        }

        let started = Instant::now();
        let created: Vec<anyhow::Result<()>> = futures_util::stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                async move {
                    let body = json!({
                        "apiVersion": "fedingress.io/v1alpha1",
                        "kind": "FederatedIngress",
                        "metadata": {"name": format!("g{i:04}")},
                        "spec": {
                            "rules": [{"protocol": "TCP", "port": 20000 + i, "backend": {"service": "echo", "port": 9000}}],
                            "traffic": {"dnsName": name(i), "ttl": TTL, "strategy": {"type": "Geo"}}
                        }
                    });
                    api.post(
                        &format!("{GROUP_PATH}/namespaces/{NS}/federatedingresses"),
                        Some(&body),
                    )
                    .await?;
                    Ok(())
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        println!(
            "created 3 Clusters (europe-west1, us-east1, asia-south1) with simulated agents and {n} FederatedIngresses (Geo, TTL {TTL}) in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        wait_answers(
            "our server",
            hub.dns,
            n,
            true,
            true,
            Duration::from_secs(180),
        )
        .await?;
        println!(
            "  dig {} A +subnet=10.2.0.0/24 -> {}; agents: {}",
            name(n / 2),
            dig(hub.dns, &[&name(n / 2), "A", "+subnet=10.2.0.0/24"]),
            fleet.agent_summary()
        );
        Ok(fleet)
    }

    /// `N sessions, N plans acked, N reports sent, N session errors`.
    pub fn agent_summary(&self) -> String {
        format!(
            "{} sessions, {} plans acked, {} reports sent, {} session errors",
            self.stats.sessions.load(Ordering::Relaxed),
            self.stats.plans.load(Ordering::Relaxed),
            self.stats.reports.load(Ordering::Relaxed),
            self.stats.errors.load(Ordering::Relaxed)
        )
    }
}

impl Drop for GeoFleet {
    fn drop(&mut self) {
        for task in &self.agents {
            task.abort();
        }
    }
}

// --- answers -------------------------------------------------------------------------

/// Which (name, ECS region or none) queries do not get the expected answer yet: with ECS
/// from region r the cluster of region r, without ECS (127.0.0.1: the default location,
/// Europe) c1. Not `geo` (Knot, PowerDNS): exactly one of the three cluster addresses.
pub async fn wrong_answers(
    server: SocketAddr,
    n: usize,
    with_ecs: bool,
    geo: bool,
) -> anyhow::Result<(usize, String)> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    let mut wrong = 0;
    let mut example = String::new();
    let mut id: u16 = 1;
    let cases: Vec<Option<usize>> = if with_ecs {
        vec![None, Some(0), Some(1), Some(2)]
    } else {
        vec![None]
    };
    for i in 0..n {
        for case in &cases {
            id = id.wrapping_add(1);
            let ecs = case.map(|r| region_client(REGIONS[r].1, i));
            let packet = Query::new(id, &name(i), TYPE_A).edns(ecs).encode();
            let answer = ask(&socket, server, &packet, Duration::from_secs(1)).await;
            let ok = match &answer {
                Ok(r) if r.rcode == 0 && r.a.len() == 1 => {
                    if geo {
                        r.a[0] == CLUSTER_IPS[case.unwrap_or(0)]
                    } else {
                        CLUSTER_IPS.contains(&r.a[0])
                    }
                }
                _ => false,
            };
            if !ok {
                wrong += 1;
                if example.is_empty() {
                    example = format!("{} ecs {ecs:?}: {answer:?}", name(i));
                }
            }
        }
    }
    Ok((wrong, example))
}

pub async fn wait_answers(
    what: &str,
    server: SocketAddr,
    n: usize,
    with_ecs: bool,
    geo: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let (wrong, example) = wrong_answers(server, n, with_ecs, geo).await?;
        if wrong == 0 {
            println!(
                "{what}: all {n} names answer as expected{} ({:.1} s)",
                if with_ecs {
                    " without ECS and with ECS from each of the 3 regions"
                } else {
                    ""
                },
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!(
                "{what}: {wrong} queries still answered wrongly after {timeout:?}, e.g. {example}"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub fn dig(server: SocketAddr, args: &[&str]) -> String {
    Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args([
            "-p",
            &server.port().to_string(),
            "+short",
            "+time=2",
            "+tries=1",
        ])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('\n', " "))
        .unwrap_or_else(|e| format!("(dig failed: {e})"))
}

// --- Knot --------------------------------------------------------------------------------

pub fn zone_file(n: usize, record: impl Fn(usize) -> String) -> String {
    let mut text = format!(
        "$ORIGIN {ZONE}.\n$TTL {TTL}\n@ IN SOA ns1.{ZONE}. hostmaster.{ZONE}. 1 3600 600 86400 30\n@ IN NS ns1.{ZONE}.\nns1 IN A 127.0.0.1\n"
    );
    for i in 0..n {
        text.push_str(&format!("g{i:04} IN {}\n", record(i)));
    }
    text
}

pub fn which(program: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!path.is_empty()).then(|| PathBuf::from(path))
}
/// Knot's `mod-geoip` (Debian `knot-module-geoip`) for [`start_knot`]: `mode: geodb`,
/// `geodb-key: continent/code`, one answer per continent code for every name; clients of
/// other continents (or none) get the zone's static record.
pub struct KnotGeo<'a> {
    /// The `.mmdb` (City layout).
    pub mmdb: &'a Path,
    /// (continent code, address) pairs, e.g. `("EU", c1)`.
    pub continents: &'a [(String, Ipv4Addr)],
}

/// knotd with its own config in `dir` on 127.0.0.1:`port`, the names as static A records
/// (c1's address, the answer our server gives clients without ECS). With `geo`, also
/// `edns-client-subnet: on` in `server:` and the zone runs `mod-geoip`.
pub fn start_knot(dir: &Path, n: usize, port: u16, geo: Option<&KnotGeo>) -> anyhow::Result<Proc> {
    start_knot_with(dir, n, port, geo, None)
}

/// Knot's response-rate limiting (`mod-rrl`, built into knotd) for [`start_knot_with`],
/// as the global module of every zone; no `whitelist` (loopback is limited too).
pub struct KnotRrl {
    /// `rate-limit`: responses per second per (/24, class, name); Knot 3.2's buckets
    /// hold 4 s of it.
    pub rate_limit: u32,
    /// `slip`: every n-th limited response (at random, 1 in n) is sent truncated.
    pub slip: u32,
    /// `table-size`: buckets.
    pub table_size: usize,
}

/// [`start_knot`], with `rrl` when given.
pub fn start_knot_with(
    dir: &Path,
    n: usize,
    port: u16,
    geo: Option<&KnotGeo>,
    rrl: Option<&KnotRrl>,
) -> anyhow::Result<Proc> {
    let knotd = which("knotd").context("knotd not found (apt-get install -y knot)")?;
    std::fs::create_dir_all(dir.join("db"))?;
    std::fs::write(
        dir.join(format!("{ZONE}.zone")),
        zone_file(n, |_| format!("A {}", CLUSTER_IPS[0])),
    )?;
    let d = dir.display();
    let (ecs, module, zone_module) = match geo {
        None => (String::new(), String::new(), String::new()),
        Some(geo) => {
            let mut answers = String::new();
            for i in 0..n {
                answers.push_str(&format!("{}:\n", name(i)));
                for (continent, ip) in geo.continents {
                    answers.push_str(&format!("  - geo: \"{continent}\"\n    A: {ip}\n"));
                }
            }
            std::fs::write(dir.join("geo.conf"), answers)?;
            (
                "    edns-client-subnet: on\n".to_string(),
                format!(
                    "mod-geoip:\n  - id: geo\n    config-file: \"{d}/geo.conf\"\n    ttl: {TTL}\n    mode: geodb\n    geodb-file: \"{}\"\n    geodb-key: [ continent/code ]\n",
                    geo.mmdb.display()
                ),
                "    module: mod-geoip/geo\n".to_string(),
            )
        }
    };
    let (rrl_module, global_module) = match rrl {
        None => (String::new(), String::new()),
        Some(rrl) => (
            format!(
                "mod-rrl:\n  - id: bench\n    rate-limit: {}\n    slip: {}\n    table-size: {}\n",
                rrl.rate_limit, rrl.slip, rrl.table_size
            ),
            "    global-module: mod-rrl/bench\n".to_string(),
        ),
    };
    let config = dir.join("knot.conf");
    std::fs::write(
        &config,
        format!(
            "server:\n    listen: 127.0.0.1@{port}\n    rundir: \"{d}\"\n    pidfile: \"{d}/knot.pid\"\n{ecs}control:\n    listen: \"{d}/knot.sock\"\ndatabase:\n    storage: \"{d}/db\"\nlog:\n  - target: stderr\n    any: warning\n{module}{rrl_module}template:\n  - id: default\n    storage: \"{d}\"\n    file: \"%s.zone\"\n    zonefile-sync: -1\n    journal-content: none\n{global_module}zone:\n  - domain: {ZONE}\n{zone_module}",
        ),
    )?;
    let mut command = Command::new(knotd);
    command.arg("-c").arg(&config);
    Proc::start_plain(command, "knotd")
}

/// `knotd --version`, e.g. `knotd (Knot DNS), version 3.2.6`.
pub fn knot_version() -> String {
    Command::new("knotd")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_parse() {
        let q = Query::new(0x1234, "g0001.fedingress.test", TYPE_A)
            .edns(Some("10.2.3.0".parse().unwrap()))
            .encode();
        // header 12 + name (1+5+1+10+1+4+1 = 23) + 4 + OPT 11 + option 11
        assert_eq!(q.len(), 12 + 23 + 4 + 11 + 11);
        assert_eq!(&q[q.len() - 3..], &[10, 2, 3]);
        // A hand-made response: the query with QR|AA, one compressed A record.
        let mut r = Query::new(0x1234, "x.test", TYPE_A).encode();
        r[2] = 0x84;
        r[7] = 1;
        r.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 127, 0, 0, 9]);
        let parsed = parse(&r).unwrap();
        assert_eq!(parsed.id, 0x1234);
        assert!(parsed.authoritative);
        assert_eq!(parsed.a, vec![Ipv4Addr::new(127, 0, 0, 9)]);
    }
}
