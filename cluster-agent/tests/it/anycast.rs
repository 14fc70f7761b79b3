//! Anycast through a real BGP speaker (issue 15): the agent binary with a managed
//! gobgpd peers (iBGP, AS 65000) with a second gobgpd the test runs, on loopback
//! addresses of block 127.0.79.x and free high ports, following a fake hub. Through the
//! second speaker's RIB: the route is announced while the share is healthy, withdrawn
//! when its backend dies, on cordon and on SIGTERM (before the listeners stop
//! accepting); a killed speaker is reported down and brought back. A missing or
//! unreachable speaker is exit 64.
//!
//! Needs root (the anycast address goes on `lo`) and gobgpd; skipped, with a message,
//! without gobgpd (scripts/test installs it).

// Test helpers outside #[test] functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fedingress_api::ingress::{Backend, IngressRule, Protocol};
use fedingress_api::plan::{AgentReport, AnycastRoute, ClusterPlan, IngressKey, IngressShare};
use fedingress_gobgp::{Community, Global, Gobgpd, Peer, RibEntry, Speaker};
use fedingress_testsupport::echo::{Echo, Reply};
use fedingress_testsupport::free_port;
use fedingress_testsupport::gateway::FakeHub;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_cluster-agent");
/// Generous: a BGP session takes a few seconds to come up (GoBGP's connect timer).
const BGP_DEADLINE: Duration = Duration::from_secs(90);
const DEADLINE: Duration = Duration::from_secs(20);
const ASN: u32 = 65000;
const AGENT_SPEAKER: [u8; 4] = [127, 0, 79, 1];
const PEER_SPEAKER: [u8; 4] = [127, 0, 79, 2];
const AGENT_BIND: [u8; 4] = [127, 0, 79, 10];
const ANYCAST: [u8; 4] = [127, 0, 79, 100];
/// Peers drop loopback next hops: a TEST-NET address (GoBGP without zebra does not
/// check it is reachable).
const NEXT_HOP: [u8; 4] = [192, 0, 2, 10];

fn gobgpd_installed() -> bool {
    let found = Command::new("gobgpd").arg("--version").output().is_ok();
    if !found {
        eprintln!("SKIPPED: gobgpd is not installed (apt-get install gobgpd; scripts/test does)");
    }
    found
}

/// The agent process and its admin address; killed if the test fails before it exits.
struct Agent(Child, SocketAddr);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Agent {
    /// Starts the agent and waits for its READY line.
    fn start(config: &Path) -> Agent {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut agent = Agent(child, SocketAddr::from(([127, 0, 0, 1], 0)));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(DEADLINE).expect("no READY line");
        let ready: serde_json::Value = serde_json::from_str(
            line.strip_prefix("READY ")
                .unwrap_or_else(|| panic!("not a READY line: {line:?}")),
        )
        .unwrap();
        agent.1 = ready["admin"].as_str().unwrap().parse().unwrap();
        agent
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.0.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The managed gobgpd: the agent's child process running gobgpd.
    fn gobgpd_pid(&self) -> Option<u32> {
        let children = std::fs::read_dir(format!("/proc/{}/task", self.0.id()))
            .ok()?
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|pid| pid.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>();
        children.into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "gobgpd")
        })
    }

    /// `GET path` of the admin endpoint: the whole response, status line first.
    async fn get(&self, path: &str) -> String {
        let mut stream = TcpStream::connect(self.1).await.unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        text
    }

    /// `GET /metrics` of the admin endpoint.
    async fn metrics(&self) -> String {
        self.get("/metrics").await
    }

    /// `GET /readyz`: whether it answered 200, and its body.
    async fn readyz(&self) -> (bool, String) {
        let text = self.get("/readyz").await;
        let ok = text.starts_with("HTTP/1.1 200");
        let body = text
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_owned();
        (ok, body)
    }

    async fn wait_exit(&mut self) -> std::process::ExitStatus {
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < until, "the agent did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Removes the anycast address from `lo` should the agent not have (a failed test).
struct LoopbackAddress(IpAddr);

impl Drop for LoopbackAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{}/32", self.0), "dev", "lo"])
            .stderr(Stdio::null())
            .status();
    }
}

fn on_loopback(address: IpAddr) -> bool {
    let output = Command::new("ip")
        .args(["-o", "addr", "show", "dev", "lo"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).contains(&format!("inet {address}/32 "))
}

async fn echo_through(addr: SocketAddr) -> Result<String, String> {
    let mut stream = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"hello")
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 5];
    tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut buf))
        .await
        .map_err(|_| "reply timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The test's own speaker, the agent's peer (passive: the agent's gobgpd connects).
async fn peer_speaker(bgp_port: u16) -> (Gobgpd, Speaker) {
    let api = SocketAddr::from(([127, 0, 0, 1], free_port([127, 0, 0, 1])));
    let mut gobgpd = Gobgpd::start(api, &[]).unwrap();
    let mut speaker = gobgpd.wait_ready(DEADLINE).await.unwrap();
    speaker
        .start(&Global {
            asn: ASN,
            router_id: PEER_SPEAKER.into(),
            listen_port: i32::from(bgp_port),
            listen_addresses: vec![IpAddr::from(PEER_SPEAKER)],
        })
        .await
        .unwrap();
    let mut agent = Peer::new(IpAddr::from(AGENT_SPEAKER), ASN);
    agent.passive = true;
    agent.hold_time_seconds = Some(9);
    agent.keepalive_seconds = Some(3);
    speaker.add_peer(&agent).await.unwrap();
    (gobgpd, speaker)
}

/// The route to the anycast address the peer learned from the agent's speaker.
async fn learned(peer: &mut Speaker) -> Option<RibEntry> {
    let anycast = IpAddr::from(ANYCAST);
    peer.rib().await.unwrap().into_iter().find(|e| {
        e.prefix.addr() == anycast
            && e.prefix.prefix_len() == 32
            && e.neighbor == Some(IpAddr::from(AGENT_SPEAKER))
    })
}

/// Waits until the peer has (or lacks) the route; returns how long that took.
async fn wait_route(peer: &mut Speaker, present: bool, what: &str) -> Duration {
    let started = Instant::now();
    loop {
        if learned(peer).await.is_some() == present {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < BGP_DEADLINE,
            "{what}: the peer's RIB {} the route after {BGP_DEADLINE:?}",
            if present { "still lacks" } else { "still has" }
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn route(report: &AgentReport) -> Option<&AnycastRoute> {
    report
        .ingresses
        .iter()
        .find(|i| i.key.name == "echo")?
        .anycast
        .first()
}

fn plan(port: u16, backend_port: u16) -> ClusterPlan {
    let mut rule = IngressRule::new(Protocol::Tcp);
    rule.port = Some(i32::from(port));
    rule.backend = Some(Backend::new("echo", i32::from(backend_port)));
    ClusterPlan::from(vec![IngressShare {
        key: IngressKey::new("default", "echo"),
        uid: "uid-echo".into(),
        generation: 1,
        rules: vec![rule],
        tls: Vec::new(),
        cluster_override: None,
        anycast_addresses: vec![IpAddr::from(ANYCAST)],
    }])
}

fn write_config(
    dir: &Path,
    hub: SocketAddr,
    echo: SocketAddr,
    anycast: &str,
) -> std::path::PathBuf {
    std::fs::write(dir.join("token"), "t0k3n\n").unwrap();
    let text = format!(
        "hub: {{address: 'http://{hub}'}}
cluster: eu-west
tokenFile: token
driver: standalone
listen: [{{bind: {bind}}}]
services: {{echo: ['{echo}']}}
healthCheck: {{intervalMs: 200, timeoutMs: 200}}
reportIntervalMs: 500
stateDir: state
admin: 127.0.0.1:0
{anycast}",
        bind = IpAddr::from(AGENT_BIND),
    );
    let path = dir.join("agent.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_follow_health_cordon_the_speaker_and_sigterm() {
    if !gobgpd_installed() {
        return;
    }
    let _cleanup = LoopbackAddress(IpAddr::from(ANYCAST));
    let bgp_port = free_port(PEER_SPEAKER);
    let (_peer_gobgpd, mut peer) = peer_speaker(bgp_port).await;
    let mut echo = Echo::builder()
        .reply(Reply::Same)
        .udp(false)
        .start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let port = free_port(ANYCAST);
    let hub = FakeHub::scripted(plan(port, echo.addr.port())).await;
    let dir = tempfile::tempdir().unwrap();
    let api = SocketAddr::from(([127, 0, 0, 1], free_port([127, 0, 0, 1])));
    let config = write_config(
        dir.path(),
        hub.addr,
        echo.addr,
        &format!(
            "anycast:
  speaker: {{command: gobgpd, api: '{api}'}}
  asn: {ASN}
  routerId: {agent}
  peers:
  - {{address: {peer}, asn: {ASN}, port: {bgp_port}, localAddress: {agent},
     holdTimeSeconds: 9, keepaliveSeconds: 3, connectRetrySeconds: 1}}
  nextHop: {NEXT_HOP}
  communities: ['65000:100']
  interface: lo
  withdrawDelayMs: 3000
",
            agent = IpAddr::from(AGENT_SPEAKER),
            peer = IpAddr::from(PEER_SPEAKER),
            NEXT_HOP = IpAddr::from(NEXT_HOP),
        ),
    );
    let mut agent = Agent::start(&config);
    let anycast = SocketAddr::from((ANYCAST, port));

    // Healthy, but no session yet (GoBGP 3 connects out 5-9 s after a peer is added):
    // the speaker carries the route, no router has it, so it is not reported
    // announced and the agent is not ready (issue 23).
    // (The backend's first health check may come after the first report that carries
    // the route: wait for the one that says the backend is ready.)
    let report = hub
        .wait_report("the route carried, no session yet", DEADLINE, |r| {
            route(r).is_some_and(|c| !c.reason.contains("no ready endpoint"))
        })
        .await;
    let carried = route(&report).unwrap();
    assert!(
        learned(&mut peer).await.is_none(),
        "the session is not up yet"
    );
    assert!(!carried.announced, "{carried:?}");
    assert_eq!(
        carried.reason,
        "withdrawn: no BGP session established (0 of 1 peers)"
    );
    let (ready, why) = agent.readyz().await;
    assert!(!ready, "ready before a router has the route: {why}");
    assert!(why.contains("no BGP session established"), "{why}");

    // Healthy: announced with the next hop and the community.
    wait_route(&mut peer, true, "healthy").await;
    let entry = learned(&mut peer).await.unwrap();
    assert_eq!(entry.next_hop, IpAddr::from(NEXT_HOP));
    assert_eq!(
        entry.communities,
        ["65000:100".parse::<Community>().unwrap()]
    );
    let report = hub
        .wait_report("announced, one peer established", DEADLINE, |r| {
            route(r).is_some_and(|r| r.announced)
                && r.speaker
                    .as_ref()
                    .is_some_and(|s| s.up && s.established_peers == 1)
        })
        .await;
    assert_eq!(
        route(&report).unwrap().reason,
        "announced: applied and healthy"
    );
    fedingress_testsupport::eventually_async(DEADLINE, "the agent ready", || async {
        match agent.readyz().await {
            (true, _) => Ok(()),
            (false, why) => Err(why),
        }
    })
    .await;
    assert!(on_loopback(IpAddr::from(ANYCAST)), "the address is on lo");
    assert_eq!(echo_through(anycast).await.unwrap(), "hello");
    let metrics = agent.metrics().await;
    for line in [
        "fedingress_agent_anycast_routes_announced 1\n",
        "fedingress_agent_anycast_announces_total 1\n",
        "fedingress_agent_bgp_speaker_up 1\n",
        "fedingress_agent_bgp_peers_established 1\n",
    ] {
        assert!(metrics.contains(line), "{line} missing in\n{metrics}");
    }

    // The backend dies: withdrawn once the health checks notice.
    let stopped = Instant::now();
    echo.stop_tcp();
    wait_route(&mut peer, false, "backend stopped").await;
    eprintln!(
        "MEASURED health loss -> route withdrawn at the peer: {} ms (checks every 200 ms, unhealthyThreshold 2)",
        stopped.elapsed().as_millis()
    );
    let report = hub
        .wait_report("withdrawn for the backend", DEADLINE, |r| {
            route(r).is_some_and(|r| !r.announced)
        })
        .await;
    let reason = &route(&report).unwrap().reason;
    assert!(
        reason.starts_with("withdrawn: backend echo:") && reason.contains("has no ready endpoint"),
        "{reason}"
    );
    assert!(
        on_loopback(IpAddr::from(ANYCAST)),
        "listeners remain: so does the address"
    );
    echo.start_tcp().unwrap();
    wait_route(&mut peer, true, "backend back").await;

    // Cordoned: withdrawn, and back when uncordoned.
    hub.set_cordoned(true);
    wait_route(&mut peer, false, "cordoned").await;
    let report = hub
        .wait_report("withdrawn for the cordon", DEADLINE, |r| {
            route(r).is_some_and(|r| r.reason == "withdrawn: cluster cordoned")
        })
        .await;
    assert!(!route(&report).unwrap().announced);
    assert_eq!(
        echo_through(anycast).await.unwrap(),
        "hello",
        "a cordon keeps listeners"
    );
    hub.set_cordoned(false);
    wait_route(&mut peer, true, "uncordoned").await;

    // The speaker dies: reported down, then restarted and announcing again.
    let pid = agent
        .gobgpd_pid()
        .expect("the managed gobgpd is the agent's child");
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let report = hub
        .wait_report("speaker down", DEADLINE, |r| {
            r.speaker.as_ref().is_some_and(|s| !s.up)
        })
        .await;
    let speaker = report.speaker.as_ref().unwrap();
    assert!(speaker.message.contains("gobgpd exited"), "{speaker:?}");
    assert!(
        !speaker.message.contains("it said"),
        "gobgpd's log lines go to the agent's log, not to status: {speaker:?}"
    );
    let route_state = route(&report).unwrap();
    assert!(!route_state.announced);
    assert!(
        route_state
            .reason
            .starts_with("withdrawn: the BGP speaker is down: gobgpd exited: signal: 9"),
        "{route_state:?}"
    );
    wait_route(&mut peer, true, "speaker restarted").await;
    hub.wait_report("speaker back", BGP_DEADLINE, |r| {
        r.speaker.as_ref().is_some_and(|s| s.up) && route(r).is_some_and(|r| r.announced)
    })
    .await;
    let restarted = agent.gobgpd_pid().expect("a new managed gobgpd");
    assert_ne!(restarted, pid);

    // SIGTERM: withdrawn first, while the listener still accepts.
    agent.signal("TERM");
    wait_route(&mut peer, false, "SIGTERM").await;
    // ... and the hub hears it before the session closes (issue 23).
    hub.wait_report("the SIGTERM withdrawal reported", DEADLINE, |r| {
        route(r).is_some_and(|r| !r.announced && r.reason == "withdrawn: draining (SIGTERM)")
    })
    .await;
    assert_eq!(
        echo_through(anycast).await,
        Ok("hello".to_owned()),
        "listeners drain only after withdrawDelayMs"
    );
    let status = agent.wait_exit().await;
    assert_eq!(status.code(), Some(0));
    assert!(!on_loopback(IpAddr::from(ANYCAST)), "the address left lo");
    assert!(
        !Path::new(&format!("/proc/{restarted}")).exists()
            || std::fs::read_to_string(format!("/proc/{restarted}/stat"))
                .is_ok_and(|stat| stat.contains(") Z ")),
        "the managed gobgpd is gone with the agent"
    );
}

#[test]
fn a_missing_or_unreachable_speaker_exits_64_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let unused = SocketAddr::from(([127, 0, 0, 1], 1));
    let anycast = |speaker: &str| {
        format!(
            "anycast:
  speaker: {speaker}
  asn: {ASN}
  routerId: {}
  peers: [{{address: {}, asn: {ASN}}}]
  nextHop: {}
",
            IpAddr::from(AGENT_SPEAKER),
            IpAddr::from(PEER_SPEAKER),
            IpAddr::from(NEXT_HOP),
        )
    };
    for (speaker, expected) in [
        (
            "{command: /nonexistent/gobgpd, api: '127.0.0.1:1'}",
            "cluster-agent: anycast.speaker.command: /nonexistent/gobgpd not found",
        ),
        (
            "{api: '127.0.0.1:1'}",
            "cluster-agent: anycast.speaker.api: cannot connect to the GoBGP API at 127.0.0.1:1",
        ),
    ] {
        let config = write_config(dir.path(), unused, unused, &anycast(speaker));
        let output = Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert!(output.stdout.is_empty(), "no READY line");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(expected), "{stderr}");
    }
}
