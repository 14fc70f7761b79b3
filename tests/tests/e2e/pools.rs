//! VRRP for the hub's pools (issue 24, `pools:`): two hosts and a hub on one LAN of
//! network namespaces (`fedingress_tests::netns::Lan`): host-a 10.0.0.1, host-b
//! 10.0.0.2, and the fake hub (`fedingress_testsupport::gateway::FakeHub`, scripted) on
//! 10.0.0.3, which is also the client. Each host runs an echo backend and a standalone
//! cluster-agent with `member:` and `pools:` and no VRRP typed in: the hub's plan gives
//! the pool `gold` (VIP 10.0.0.100/24, virtual router 51, host-a 150, host-b 140) and a
//! TCP share on port 7000, and the agents render, load and reload keepalived from it.
//!
//! `hub_pools_hold_move_and_report`, in order:
//! 1. host-a holds the VIP and answers on it; the hub hears gold MASTER from host-a and
//!    BACKUP from host-b.
//! 2. A new plan adds the pool `silver` (10.0.0.101, host-b first) and leaves gold as it
//!    was: keepalived is reloaded on both hosts, 10.0.0.100 never leaves host-a (sampled
//!    every 10 ms through the reload), silver's VIP goes to host-b, both Ack.
//! 3. A plan that swaps gold's priorities moves its VIP to host-b (reload, preemption);
//!    the reports follow.
//! 4. host-b's agent frozen (SIGSTOP: the track script fails): the VIP goes to host-a,
//!    which reports MASTER; resumed, host-b takes it back.
//! 5. host-b's agent SIGKILLed: the VIP goes to host-a.
//! 6. A plan whose gold keepalived cannot run (host-a's priority 0) is Nacked by host-a
//!    with an error naming the pool.
//!
//! Needs root, iproute2 and keepalived (skips otherwise, saying why).

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fedingress_api::plan::{
    AgentReport, ClusterPlan, IngressShare, PoolAssignment, PoolPeer, PoolPlan,
};
use fedingress_proto::AgentToHub;
use fedingress_tests::netns::{Lan, NetNs};
use fedingress_tests::vrrp::{Programs, keepalived};
use fedingress_tests::{Process, eventually};
use fedingress_testsupport::gateway::FakeHub;

const GOLD: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);
const SILVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
const PORT: u16 = 7000;
const HOSTS: [(&str, &str); 2] = [("host-a", "10.0.0.1"), ("host-b", "10.0.0.2")];
const MOVE: Duration = Duration::from_secs(20);
const START: Duration = Duration::from_secs(30);

/// The hosts' processes, and the LAN (dropped last: every process inside goes first).
struct Site {
    agents: Vec<(String, Option<Process>)>,
    _echoes: Vec<Process>,
    lan: Lan,
    dir: tempfile::TempDir,
}

impl Drop for Site {
    fn drop(&mut self) {
        for (name, _) in HOSTS {
            if let Err(error) = self.lan.host(name).kill_all() {
                eprintln!("stopping the processes of {name}: {error:#}");
            }
        }
    }
}

impl Site {
    fn ns(&self, host: &str) -> &NetNs {
        self.lan.host(host)
    }

    fn agent(&mut self, host: &str) -> &mut Option<Process> {
        &mut self
            .agents
            .iter_mut()
            .find(|(name, _)| name == host)
            .unwrap()
            .1
    }

    /// Which hosts hold `vip` now.
    fn holders(&self, vip: Ipv4Addr) -> Vec<&'static str> {
        HOSTS
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| self.ns(name).has_address(IpAddr::V4(vip)))
            .collect()
    }

    fn wait_for_holder(&self, vip: Ipv4Addr, host: &str) {
        eventually(MOVE, &format!("{host} alone holds {vip}"), || {
            let holders = self.holders(vip);
            if holders == [host] {
                Ok(())
            } else {
                Err(format!("holders {holders:?}{}", self.logs()))
            }
        });
    }

    /// One connection from the hub's namespace to `vip`:7000: who answered.
    fn probe(&self, vip: Ipv4Addr) -> Result<String, String> {
        self.ns("hub")
            .run_inside(move || -> Result<String, String> {
                let timeout = Duration::from_secs(1);
                let addr = SocketAddr::new(IpAddr::V4(vip), PORT);
                let mut stream =
                    TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
                stream
                    .set_read_timeout(Some(timeout))
                    .map_err(|e| e.to_string())?;
                stream.write_all(b"hello\n").map_err(|e| e.to_string())?;
                let mut line = String::new();
                BufReader::new(stream)
                    .read_line(&mut line)
                    .map_err(|e| e.to_string())?;
                line.split_once(": ")
                    .map(|(host, _)| host.to_owned())
                    .ok_or_else(|| format!("unexpected answer {line:?}"))
            })
            .map_err(|e| format!("{e:#}"))?
    }

    fn logs(&self) -> String {
        let mut text = String::new();
        for (name, _) in HOSTS {
            let log = self.dir.path().join(name).join("agent.log");
            let all = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = all.lines().collect();
            text.push_str(&format!(
                "\n--- {name} agent log (end):\n{}",
                lines[lines.len().saturating_sub(25)..].join("\n")
            ));
        }
        text
    }
}

fn peer(name: &str, address: &str, priority: u8) -> PoolPeer {
    PoolPeer {
        name: name.into(),
        address: Some(address.parse().unwrap()),
        priority,
    }
}

fn pool(name: &str, vip: Ipv4Addr, id: u8, members: Vec<PoolPeer>) -> PoolAssignment {
    PoolAssignment {
        name: name.into(),
        vips: vec![IpAddr::V4(vip)],
        prefix_len: 24,
        virtual_router_id: id,
        members,
    }
}

/// The plan: TCP 7000 → the echo backend, and `pools`.
fn plan(pools: Vec<PoolAssignment>) -> ClusterPlan {
    let share: IngressShare = serde_json::from_value(serde_json::json!({
        "key": {"namespace": "default", "name": "echo"},
        "uid": "uid-echo",
        "generation": 1,
        "rules": [{"protocol": "TCP", "port": PORT, "backend": {"service": "echo", "port": 9001}}],
        "tls": [],
    }))
    .unwrap();
    let mut plan = ClusterPlan::from(vec![share]);
    plan.pools = Arc::new(PoolPlan {
        pools,
        ..PoolPlan::default()
    });
    plan
}

fn gold(a: u8, b: u8) -> PoolAssignment {
    pool(
        "gold",
        GOLD,
        51,
        vec![peer("host-a", "10.0.0.1", a), peer("host-b", "10.0.0.2", b)],
    )
}

fn silver() -> PoolAssignment {
    pool(
        "silver",
        SILVER,
        52,
        vec![
            peer("host-a", "10.0.0.1", 140),
            peer("host-b", "10.0.0.2", 150),
        ],
    )
}

/// The state `report` gives `pool`.
fn state<'a>(report: &'a AgentReport, pool: &str) -> Option<&'a str> {
    report
        .vrrp
        .iter()
        .find(|v| v.pool == pool)
        .map(|v| v.state.as_str())
}

/// Starts host `name` (address `address`): its echo backend and its agent.
fn start_host(
    lan: &Lan,
    dir: &Path,
    name: &str,
    address: &str,
    hub: SocketAddr,
    keepalived: &Path,
    programs: &Programs,
) -> (Process, Process) {
    let ns = lan.host(name);
    let mut echo = ns.command(&programs.fedctl);
    echo.args(["dev", "echo", "--name", name, "--listen", "127.0.0.1:9001"]);
    let echo = Process::start(echo, &format!("echo {name}"), START).unwrap();
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "t0ken\n").unwrap();
    let config = dir.join("agent.yaml");
    std::fs::write(
        &config,
        format!(
            "\
hub: {{address: 'http://{hub}', insecureAllowPlaintext: true}}
cluster: site
tokenFile: token
driver: standalone
listen: [{{bind: 0.0.0.0, advertise: {address}}}]
services: {{echo: ['127.0.0.1:9001']}}
stateDir: state
admin: 127.0.0.1:9901
reportIntervalMs: 1000
member: {{name: {name}, address: {address}}}
pools:
  interface: {dev}
  advertIntervalMs: 100
  keepalived: {{command: '{keepalived}'}}
",
            dev = Lan::HOST_DEV,
            keepalived = keepalived.display(),
        ),
    )
    .unwrap();
    let mut agent = ns.command(&programs.cluster_agent);
    agent.arg("--config").arg(&config);
    let agent = Process::start_logging_to(
        agent,
        &format!("cluster-agent {name}"),
        START,
        &dir.join("agent.log"),
    )
    .unwrap();
    (echo, agent)
}

#[test]
fn hub_pools_hold_move_and_report() {
    if let Some(why) = fedingress_tests::vrrp::Site::unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let keepalived: PathBuf = keepalived().unwrap();
    let programs = Programs::built();
    let lan = Lan::create(
        "pools",
        &[
            ("host-a", "10.0.0.1/24"),
            ("host-b", "10.0.0.2/24"),
            ("hub", "10.0.0.3/24"),
        ],
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let listener = lan
        .host("hub")
        .run_inside(|| std::net::TcpListener::bind("10.0.0.3:0"))
        .unwrap()
        .unwrap();
    let hub_addr = listener.local_addr().unwrap();
    let hub = FakeHub::scripted_on(listener, plan(vec![gold(150, 140)]));
    let dir = tempfile::tempdir().unwrap();
    let mut agents = Vec::new();
    let mut echoes = Vec::new();
    for (name, address) in HOSTS {
        let (echo, agent) = start_host(
            &lan,
            dir.path(),
            name,
            address,
            hub_addr,
            &keepalived,
            &programs,
        );
        echoes.push(echo);
        agents.push((name.to_owned(), Some(agent)));
    }
    let mut site = Site {
        agents,
        _echoes: echoes,
        lan,
        dir,
    };
    let report = |member: &str, what: &str, check: &dyn Fn(&AgentReport) -> bool| {
        runtime.block_on(hub.wait_member_report(member, what, MOVE, check))
    };

    // 1. host-a holds gold's VIP and serves on it; both report their state.
    site.wait_for_holder(GOLD, "host-a");
    eventually(MOVE, "host-a answers on the VIP", || {
        match site.probe(GOLD) {
            Ok(host) if host == "host-a" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    report("host-a", "gold is MASTER", &|r| {
        state(r, "gold") == Some("MASTER")
    });
    report("host-b", "gold is BACKUP", &|r| {
        state(r, "gold") == Some("BACKUP")
    });
    assert_eq!(
        hub.answer_of("host-a"),
        Some(AgentToHub::Ack { version: 1 }),
        "{}",
        site.logs()
    );

    // 2. A pool added: keepalived reloads, gold's VIP stays where it is.
    hub.set_plan(plan(vec![gold(150, 140), silver()]));
    let since = Instant::now();
    let (mut samples, mut after) = (0, 0);
    while after < 50 {
        let holders = site.holders(GOLD);
        assert_eq!(
            holders,
            ["host-a"],
            "gold moved during a reload{}",
            site.logs()
        );
        samples += 1;
        // Half a second more once both reloaded and silver is placed.
        let reloaded = HOSTS
            .iter()
            .all(|(host, _)| hub.answer_of(host) == Some(AgentToHub::Ack { version: 2 }));
        if reloaded && site.holders(SILVER) == ["host-b"] {
            after += 1;
        }
        assert!(
            since.elapsed() < MOVE,
            "no reload within {MOVE:?}{}",
            site.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    site.wait_for_holder(SILVER, "host-b");
    eprintln!("gold held by host-a through the reload: {samples} samples, 10 ms apart");
    report("host-b", "silver MASTER, gold BACKUP", &|r| {
        state(r, "silver") == Some("MASTER") && state(r, "gold") == Some("BACKUP")
    });
    report("host-a", "silver BACKUP, gold MASTER", &|r| {
        state(r, "silver") == Some("BACKUP") && state(r, "gold") == Some("MASTER")
    });
    let log = std::fs::read_to_string(site.dir.path().join("host-a/agent.log")).unwrap();
    assert!(log.contains("keepalived reloading its config"), "{log}");

    // 3. Priorities swapped: gold's VIP moves to host-b.
    hub.set_plan(plan(vec![gold(140, 150), silver()]));
    site.wait_for_holder(GOLD, "host-b");
    eventually(MOVE, "host-b answers on gold's VIP", || {
        match site.probe(GOLD) {
            Ok(host) if host == "host-b" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    report("host-b", "gold is MASTER", &|r| {
        state(r, "gold") == Some("MASTER")
    });
    report("host-a", "gold is BACKUP", &|r| {
        state(r, "gold") == Some("BACKUP")
    });

    // 4. The master's agent frozen: the VIPs go to host-a; resumed, back to host-b.
    site.agent("host-b").as_ref().unwrap().pause();
    let since = Instant::now();
    site.wait_for_holder(GOLD, "host-a");
    eprintln!(
        "host-b's agent frozen → host-a holds gold: {:?}",
        since.elapsed()
    );
    report("host-a", "gold and silver MASTER", &|r| {
        state(r, "gold") == Some("MASTER") && state(r, "silver") == Some("MASTER")
    });
    site.agent("host-b").as_ref().unwrap().resume();
    site.wait_for_holder(GOLD, "host-b");
    report("host-b", "gold MASTER again", &|r| {
        state(r, "gold") == Some("MASTER")
    });

    // 5. The master's agent killed: its keepalived's track script fails.
    site.agent("host-b").take().unwrap().kill9();
    let since = Instant::now();
    site.wait_for_holder(GOLD, "host-a");
    eprintln!(
        "host-b's agent killed → host-a holds gold: {:?}",
        since.elapsed()
    );
    report("host-a", "gold MASTER", &|r| {
        state(r, "gold") == Some("MASTER")
    });

    // 6. A pool keepalived cannot run: Nacked, saying which and why.
    hub.set_plan(plan(vec![gold(0, 150), silver()]));
    let version = hub.version();
    eventually(MOVE, "host-a Nacks the plan", || {
        match hub.answer_of("host-a") {
            Some(AgentToHub::Nack {
                version: v, error, ..
            }) if v == version => {
                if error.contains("gold: this member's priority 0 is outside 1-254") {
                    Ok(())
                } else {
                    Err(format!("Nack error {error:?}"))
                }
            }
            other => Err(format!("{other:?}")),
        }
    });
    drop(hub);
}
