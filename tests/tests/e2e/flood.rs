//! A UDP flood at a real standalone agent (issue 12): datagrams from 100,000 distinct
//! sources (spoofed loopback addresses, a few sockets) leave the agent small, its TCP,
//! HTTP and UDP listeners serving, its hub session up, and its `/metrics` counting what
//! it refused and evicted. Loopback block 127.0.61.x; flood sources in 127.200.0.0/14.

#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use fedingress_tests::echo::{Echo, tcp_roundtrip};
use fedingress_tests::federation::{
    ClusterSpec, cluster_entry, create_cluster, get_json, issue_token, kubectl, start_agent,
    start_hub,
};
use fedingress_tests::flood::{SpoofingSender, flood, metric};
use fedingress_tests::web::{Web, curl};
use fedingress_tests::{Kubectl, eventually};

/// Generous: timing is measured elsewhere, not here.
const WAIT: Duration = Duration::from_secs(30);
const BLOCK: u8 = 61;
const SOURCES: u32 = 100_000;
/// Sender sockets: each flood address sends from this many ports.
const PORTS: usize = 8;
const PORT: u16 = 16_100;
const HTTP_PORT: u16 = 16_180;
/// Per-source cap of the agent under test: half of each address's ports are refused.
const PER_SOURCE: u32 = 4;

fn ip(host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, BLOCK, host)
}

const INGRESS: &str = "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: flood
spec:
  rules:
  - {protocol: TCP, port: 16100, backend: {service: echo, port: 9000}}
  - {protocol: UDP, port: 16100, backend: {service: echo, port: 9000}}
  - protocol: HTTP
    host: flood.example.com
    port: 16180
    paths:
    - {path: /, pathType: Prefix, backend: {service: web, port: 9080}}
  traffic:
    dnsName: flood.fedingress.test
";

/// The agent's resident set size in KiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn metrics(admin: &str) -> String {
    let out = curl(&[&format!("http://{admin}/metrics")]);
    assert!(out.ok, "GET /metrics: {}", out.stderr);
    out.stdout
}

/// A UDP client on its own address, reused for every try.
struct UdpClient(UdpSocket);

impl UdpClient {
    fn bind(address: Ipv4Addr, target: SocketAddr) -> Self {
        let socket = UdpSocket::bind(SocketAddr::from((address, 0))).unwrap();
        socket.connect(target).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        Self(socket)
    }

    fn roundtrip(&self, text: &str) -> Result<String, String> {
        self.0.send(text.as_bytes()).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 256];
        loop {
            let n = self.0.recv(&mut buf).map_err(|e| e.to_string())?;
            let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
            // A late answer to an earlier try is skipped.
            if reply == text.to_ascii_uppercase() {
                return Ok(reply);
            }
        }
    }
}

/// The `Connected` condition of the Cluster: status and last transition time.
fn connected(k: &Kubectl) -> (String, String) {
    let cluster = get_json(k, &["cluster", "c1"]);
    cluster["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Connected"))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["lastTransitionTime"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .unwrap_or_default()
}

#[test]
fn a_udp_flood_from_100000_sources_leaves_the_agent_small_and_serving() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, BLOCK);
    let k = kubectl(dir, &hub.api);
    let bind = ip(11);
    let echo_addr = SocketAddr::from((ip(21), 9000));
    let web_addr = SocketAddr::from((ip(22), 9080));
    let _echo = Echo::start(echo_addr).unwrap();
    let _web = Web::start(web_addr, "web-c1").unwrap();
    let mut spec = ClusterSpec::numbered(BLOCK, 1, "europe-west1", 10.0, 20.0);
    spec.backend = echo_addr;
    create_cluster(&k, dir, &spec);
    let (_, token) = issue_token(&hub.api, "c1").unwrap();
    let agent_dir = dir.join("agent-c1");
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(agent_dir.join("token"), token).unwrap();
    // Default limits but the per-source cap; sessions outlive the flood, so the
    // listener's cap (not the idle timeout) is what makes room.
    let config = format!(
        "hub:\n  address: {hub}\ncluster: c1\ntokenFile: token\ndriver: standalone\nlisten:\n- bind: \"{bind}\"\nservices:\n  echo: [\"{echo_addr}\"]\n  web: [\"{web_addr}\"]\nhealthCheck:\n  intervalMs: 200\n  timeoutMs: 500\n  healthyThreshold: 1\n  unhealthyThreshold: 2\n  http: {{path: /healthz}}\nudpIdleTimeoutMs: 120000\nstateDir: state\nadmin: 127.0.0.1:0\nreportIntervalMs: 1000\nlimits:\n  udpSessionsPerSource: {PER_SOURCE}\n",
        hub = hub.agent,
    );
    let config_path = agent_dir.join("agent.yaml");
    std::fs::write(&config_path, config).unwrap();
    let agent = start_agent(&config_path, "c1");
    let admin = agent.addr("admin");

    let path = dir.join("flood.yaml");
    std::fs::write(&path, INGRESS).unwrap();
    k.ok(&["apply", "-f", &path.display().to_string()]);
    eventually(WAIT, "c1 applied the ingress and is healthy", || {
        let entry = cluster_entry(&get_json(&k, &["federatedingress", "flood"]), "c1");
        if entry["phase"] == "Applied" && entry["healthy"] == true {
            Ok(())
        } else {
            Err(entry.to_string())
        }
    });
    let udp_target = SocketAddr::from((bind, PORT));
    let tcp_works = || match tcp_roundtrip(udp_target, "tcp still\n") {
        Ok(reply) if reply == "TCP STILL\n" => Ok(()),
        other => Err(format!("{other:?}")),
    };
    let resolve = format!("flood.example.com:{HTTP_PORT}:{bind}");
    let url = format!("http://flood.example.com:{HTTP_PORT}/hello");
    let http_works = || {
        let out = curl(&["--resolve", &resolve, &url]);
        if out.ok && out.stdout.contains("web-c1") {
            Ok(())
        } else {
            Err(format!("{} {}", out.stdout, out.stderr))
        }
    };
    eventually(WAIT, "TCP through the agent", tcp_works);
    eventually(WAIT, "HTTP through the agent", http_works);
    let pacer = UdpClient::bind(Ipv4Addr::LOCALHOST, udp_target);
    eventually(WAIT, "UDP through the agent", || pacer.roundtrip("pace"));
    let before = connected(&k);
    assert_eq!(before.0, "True", "the hub sees the agent before the flood");
    let rss_before = rss_kib(agent.pid());

    // The flood: every 100 datagrams (well under the default socket receive buffer) a
    // round trip of the pacer, so the agent handles each datagram rather than the
    // kernel dropping them from a full buffer.
    let senders: Vec<SpoofingSender> = (0..PORTS)
        .map(|_| SpoofingSender::bind().unwrap())
        .collect();
    let SocketAddr::V4(target) = udp_target else {
        unreachable!("an IPv4 listener")
    };
    let mut lost = 0u32;
    let failed = flood(
        SocketAddrV4::new(*target.ip(), target.port()),
        &senders,
        200,
        SOURCES,
        100,
        || {
            if pacer.roundtrip("pace").is_err() {
                lost += 1;
            }
        },
    );
    assert_eq!(failed, 0, "every flood datagram was sent");
    let rss_after = rss_kib(agent.pid());
    let text = metrics(&admin);
    let udp = format!("address=\"{bind}:{PORT}\"");
    let series = |name: &str, extra: &[&str]| {
        let mut labels = vec!["kind=\"UDP\"", udp.as_str()];
        labels.extend_from_slice(extra);
        metric(&text, name, &labels).unwrap_or_else(|| panic!("{name} {labels:?} in\n{text}"))
    };
    let opened = series("fedingress_agent_listener_connections_total", &[]);
    let active = series("fedingress_agent_listener_active_connections", &[]);
    let limit = series("fedingress_agent_listener_limit", &[]);
    let evicted = series("fedingress_agent_listener_evicted_total", &[]);
    let by_source = series(
        "fedingress_agent_listener_refused_total",
        &["reason=\"source_limit\""],
    );
    let fds_used = metric(&text, "fedingress_agent_fd_budget_used", &[]).unwrap();
    let fds = metric(&text, "fedingress_agent_fd_budget", &[]).unwrap();
    eprintln!(
        "flood of {SOURCES} sources: RSS {rss_before} KiB before, {rss_after} KiB after; \
         sessions opened {opened}, active {active} (limit {limit}), evicted {evicted}, \
         refused per source {by_source}; fd budget {fds_used}/{fds}; pacer round trips lost {lost}"
    );

    assert!(
        rss_after < 100 * 1024,
        "agent RSS {rss_after} KiB after the flood (before: {rss_before} KiB)"
    );
    assert!(active <= limit, "{active} sessions, limit {limit}");
    assert!(fds_used < fds, "fd budget {fds_used}/{fds}");
    assert!(
        by_source > 0.0,
        "sources over {PER_SOURCE} sessions were refused"
    );
    assert!(
        evicted > 0.0,
        "the full listener evicted unassured sessions"
    );

    // Everything else still works.
    eventually(WAIT, "TCP through the agent after the flood", tcp_works);
    eventually(WAIT, "HTTP through the agent after the flood", http_works);
    let fresh = UdpClient::bind(ip(50), udp_target);
    eventually(WAIT, "UDP from a fresh source after the flood", || {
        fresh.roundtrip("fresh")
    });
    eventually(WAIT, "the pacer's assured session still works", || {
        pacer.roundtrip("pace")
    });
    let after = connected(&k);
    assert_eq!(
        after, before,
        "the hub session never dropped: Connected kept its transition time"
    );
    let text = metrics(&admin);
    let healthy = metric(
        &text,
        "fedingress_agent_endpoint_healthy",
        &[&format!("endpoint=\"{echo_addr}\"")],
    );
    assert_eq!(healthy, Some(1.0), "health checks still pass");
}
