//! The hub connection loop against the fake hub (`fedingress_testsupport::gateway`, a
//! real tonic `AgentGateway` server on 127.0.0.1:0) and a fake driver that records what
//! it is asked to apply. Each test scripts the hub side message by message; every wait
//! has a deadline, so a missing or unexpected message fails the test instead of hanging
//! it.

// Test helpers outside #[test] functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_agent::config::MemberConfig;
use fedingress_agent::driver::Driver;
use fedingress_agent::hub::{
    Agent, Applied, BackoffPolicy, HubSettings, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT,
};
use fedingress_agent::state::{PersistedPlan, PlanStore};
use fedingress_api::ingress::{Backend, IngressRule, Protocol};
use fedingress_api::plan::{
    AgentReport, ClusterPlan, IngressKey, IngressShare, PlanDelta, RuleError,
};
use fedingress_proto::{AgentToHub, HubToAgent};
use fedingress_testsupport::gateway::FakeHub;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(10);
const TOKEN: &str = "agent-token-1";

/// Within this long of its hub's death an agent is on another one (issue 11).
const FAILOVER_BOUND: Duration = Duration::from_secs(5);

// --- a relay in front of a hub, to kill or pause it ---------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Relaying {
    Open,
    /// Connections stay open and nothing passes: a paused or partitioned hub.
    Silent,
    /// The port refuses and every connection is closed: a `kill -9`ed hub (its kernel
    /// closes its sockets).
    Dead,
}

/// A TCP relay the agent dials instead of the hub behind it.
struct Relay {
    addr: SocketAddr,
    state: watch::Sender<Relaying>,
    task: JoinHandle<()>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (state, watching) = watch::channel(Relaying::Open);
        let task = tokio::spawn(relay(listener, upstream, watching));
        Relay { addr, state, task }
    }

    fn silence(&self) {
        self.state.send_replace(Relaying::Silent);
    }

    /// Closes the port and every connection through it.
    async fn kill(self) {
        self.state.send_replace(Relaying::Dead);
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the relay did not stop")
            .unwrap();
    }
}

async fn relay(listener: TcpListener, upstream: SocketAddr, state: watch::Receiver<Relaying>) {
    let mut pipes = JoinSet::new();
    let mut dead = state.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    pipes.spawn(pipe(client, upstream, state.clone()));
                }
            }
            _ = dead.wait_for(|s| *s == Relaying::Dead) => break,
        }
    }
    // Dropping the listener and the pipes (aborted) closes every socket.
    pipes.shutdown().await;
}

async fn pipe(mut client: TcpStream, upstream: SocketAddr, mut state: watch::Receiver<Relaying>) {
    let open = *state.borrow() == Relaying::Open;
    let held = if open {
        let Ok(mut server) = TcpStream::connect(upstream).await else {
            return;
        };
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
            _ = state.wait_for(|s| *s != Relaying::Open) => {}
        }
        Some(server)
    } else {
        None
    };
    // Silent: hold both ends open until the relay dies (and aborts this task).
    std::future::pending::<()>().await;
    drop((client, held));
}

/// An address nothing listens on (connecting is refused).
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

// --- the fake driver -------------------------------------------------------------------

#[derive(Default)]
struct FakeDriver {
    applies: Mutex<Vec<ClusterPlan>>,
    /// Returned by every apply until changed.
    rule_errors: Mutex<Vec<RuleError>>,
    reports: AtomicUsize,
    changes: watch::Sender<u64>,
}

impl FakeDriver {
    fn applies(&self) -> Vec<ClusterPlan> {
        self.applies.lock().unwrap().clone()
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n += 1);
    }
}

#[async_trait::async_trait]
impl Driver for FakeDriver {
    fn name(&self) -> &'static str {
        "standalone"
    }

    fn capabilities(&self) -> Vec<String> {
        vec!["TCP".into(), "UDP".into()]
    }

    async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        self.applies.lock().unwrap().push(plan.clone());
        self.bump();
        self.rule_errors.lock().unwrap().clone()
    }

    fn report(&self, plan: &ClusterPlan) -> AgentReport {
        self.reports.fetch_add(1, Ordering::SeqCst);
        AgentReport {
            active_connections: plan.ingresses.len() as u64,
            ..AgentReport::default()
        }
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn shutdown(&self) {}
}

// --- the agent under test --------------------------------------------------------------

struct RunningAgent {
    applied: watch::Receiver<Option<Applied>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl RunningAgent {
    fn start(settings: HubSettings, driver: Arc<FakeDriver>) -> RunningAgent {
        let agent = Agent::new(settings, driver);
        let applied = agent.applied();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        }));
        RunningAgent {
            applied,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(DEADLINE, &mut self.task)
            .await
            .expect("the agent did not stop")
            .unwrap();
    }

    async fn wait_applied(&mut self, version: u64) -> Applied {
        let wait = self
            .applied
            .wait_for(|a| a.as_ref().is_some_and(|a| a.version == version));
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("version {version} not applied"))
            .unwrap()
            .clone()
            .unwrap()
    }
}

fn settings(hub: SocketAddr, dir: &std::path::Path) -> HubSettings {
    settings_for(&[hub], dir)
}

/// Settings for hubs at `hubs`, tried in that order.
fn settings_for(hubs: &[SocketAddr], dir: &std::path::Path) -> HubSettings {
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("  {TOKEN}\n")).unwrap();
    HubSettings {
        addresses: hubs.iter().map(|hub| format!("http://{hub}")).collect(),
        first_address: Some(0),
        ca_file: None,
        cluster: "eu-west".into(),
        member: MemberConfig {
            name: Some("web-1".into()),
            labels: [("zone".to_owned(), "a".to_owned())].into(),
            address: Some("192.0.2.11".parse().unwrap()),
        },
        token_file,
        join_token_file: None,
        state_dir: dir.join("state"),
        plan_file: dir.join("state/plan.json"),
        report_interval: Duration::from_secs(60),
        backoff: BackoffPolicy {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            refused_max: Duration::from_millis(400),
            reset_after: Duration::from_secs(10),
        },
    }
}

/// A backoff no test waits out: a switch of hub that slept it (full jitter up to an
/// hour) would miss [`DEADLINE`] but for a 0.3% chance.
const SLOW: BackoffPolicy = BackoffPolicy {
    initial: Duration::from_secs(3600),
    max: Duration::from_secs(3600),
    refused_max: Duration::from_secs(3600),
    reset_after: Duration::from_secs(3600),
};

fn share(name: &str, port: i32) -> IngressShare {
    let mut rule = IngressRule::new(Protocol::Tcp);
    rule.port = Some(port);
    rule.backend = Some(Backend::new("echo", port));
    IngressShare {
        key: IngressKey::new("default", name),
        uid: format!("uid-{name}"),
        generation: 1,
        rules: vec![rule],
        tls: Vec::new(),
        cluster_override: None,
        anycast_addresses: Vec::new(),
    }
}

fn plan(shares: &[IngressShare]) -> ClusterPlan {
    ClusterPlan::from(shares.to_vec())
}

fn snapshot(version: u64, plan: &ClusterPlan) -> HubToAgent {
    HubToAgent::Snapshot {
        version,
        digest: plan.digest(),
        plan: plan.clone(),
    }
}

fn delta(base_version: u64, from: &ClusterPlan, version: u64, to: &ClusterPlan) -> HubToAgent {
    HubToAgent::Delta {
        version,
        digest: to.digest(),
        base_version,
        delta: from.delta_to(to),
    }
}

fn welcome(heartbeat_interval_ms: u32) -> HubToAgent {
    HubToAgent::Welcome {
        heartbeat_interval_ms,
        lease_ms: heartbeat_interval_ms * 3,
        provider: None,
        cordoned: false,
    }
}

fn persisted(dir: &std::path::Path) -> Option<PersistedPlan> {
    PlanStore::new(dir.join("state/plan.json")).load().unwrap()
}

// --- the tests -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_snapshot_delta_nack_heartbeats_and_resync() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let driver = Arc::new(FakeDriver::default());
    let mut agent = RunningAgent::start(settings(hub.addr, dir.path()), Arc::clone(&driver));

    // Hello: who the agent is, with nothing applied yet.
    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.cluster, "eu-west");
    assert_eq!(
        conn.hello.token, TOKEN,
        "the token file is read and trimmed"
    );
    assert_eq!(conn.hello.driver, "standalone");
    assert_eq!(conn.hello.member, "web-1", "the member from the config");
    assert_eq!(conn.hello.member_labels["zone"], "a");
    assert_eq!(
        conn.hello.member_address,
        Some("192.0.2.11".parse().unwrap())
    );
    assert_eq!(conn.hello.capabilities, ["TCP", "UDP"]);
    assert_eq!(conn.hello.agent_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (
            conn.hello.applied_version,
            conn.hello.applied_digest.as_str()
        ),
        (0, "")
    );
    assert!(agent.applied.borrow().is_none());

    // Welcome: a report follows at once, then heartbeats at the hub's interval.
    conn.send(welcome(50));
    conn.expect_report().await;
    for _ in 0..3 {
        conn.expect("Heartbeat", |m| (m == AgentToHub::Heartbeat).then_some(()))
            .await;
    }
    // Ping is answered with a heartbeat.
    conn.send(HubToAgent::Ping);
    conn.expect("Heartbeat", |m| (m == AgentToHub::Heartbeat).then_some(()))
        .await;

    // Snapshot → apply → persist → Ack → Report.
    let v5 = plan(&[share("a", 3306), share("b", 5432)]);
    conn.send(snapshot(5, &v5));
    assert_eq!(conn.expect_ack().await, 5);
    assert_eq!(driver.applies(), std::slice::from_ref(&v5));
    let stored = persisted(dir.path()).expect("the plan is persisted before the Ack");
    assert_eq!((stored.version, &stored.plan), (5, &v5));
    assert_eq!(stored.digest, v5.digest());
    assert_eq!(conn.expect_report().await.active_connections, 2);
    assert_eq!(agent.wait_applied(5).await.digest, v5.digest());

    // Delta on the applied version → apply the patched plan → Ack.
    let v6 = plan(&[share("a", 3306), share("c", 6379)]);
    conn.send(delta(5, &v5, 6, &v6));
    assert_eq!(conn.expect_ack().await, 6);
    assert_eq!(driver.applies().last(), Some(&v6));
    assert_eq!(persisted(dir.path()).unwrap().version, 6);

    // Rules the driver cannot apply → Nack naming them (the rest is applied).
    let error = RuleError {
        ingress: IngressKey::new("default", "d"),
        rule: 0,
        message: "port 53 in use".into(),
    };
    *driver.rule_errors.lock().unwrap() = vec![error.clone()];
    let v7 = plan(&[share("a", 3306), share("c", 6379), share("d", 53)]);
    conn.send(delta(6, &v6, 7, &v7));
    let (version, rule_errors) = conn
        .expect("Nack", |m| match m {
            AgentToHub::Nack {
                version,
                error,
                rule_errors,
            } => {
                assert_eq!(error, "", "a partial apply is no whole-plan error");
                Some((version, rule_errors))
            }
            AgentToHub::Ack { version } => panic!("Ack for {version}, expected a Nack"),
            _ => None,
        })
        .await;
    assert_eq!((version, rule_errors), (7, vec![error]));
    assert_eq!(agent.wait_applied(7).await.rule_errors.len(), 1);
    assert_eq!(persisted(dir.path()).unwrap().plan, v7);
    driver.rule_errors.lock().unwrap().clear();

    // A delta on a base the agent does not have: it drops the stream and says hello
    // again with what it has, so the hub sends a snapshot.
    let applies_before = driver.applies().len();
    let v9 = plan(&[share("a", 3306)]);
    conn.send(delta(8, &plan(&[]), 9, &v9));
    conn.expect_closed().await;
    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.applied_version, 7);
    assert_eq!(conn.hello.applied_digest, v7.digest());
    assert_eq!(
        driver.applies().len(),
        applies_before,
        "the bad delta is not applied"
    );

    // A delta whose result does not match the hub's digest is a resync too.
    conn.send(welcome(50));
    conn.send(HubToAgent::Delta {
        version: 8,
        digest: "0000000000000000".into(),
        base_version: 7,
        delta: PlanDelta::default(),
    });
    conn.expect_closed().await;
    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.applied_version, 7);
    conn.send(snapshot(9, &v9));
    assert_eq!(conn.expect_ack().await, 9);
    assert_eq!(driver.applies().last(), Some(&v9));
    assert_eq!(driver.applies().len(), applies_before + 1);

    agent.stop().await;
    hub.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persisted_plan_is_served_without_a_hub_and_the_agent_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let first_driver = Arc::new(FakeDriver::default());
    let mut agent = RunningAgent::start(settings(hub.addr, dir.path()), first_driver);
    let mut conn = hub.next_conn().await;
    conn.send(welcome(100));
    let v12 = plan(&[share("db", 3306)]);
    conn.send(snapshot(12, &v12));
    assert_eq!(conn.expect_ack().await, 12);
    agent.wait_applied(12).await;

    // The hub goes away; the agent keeps what it serves and keeps trying.
    drop(conn);
    let addr = hub.kill().await;
    agent.stop().await;

    // A new agent run (a restart) with the hub still unreachable: the persisted plan is
    // applied at once, and the agent is ready on it.
    let driver = Arc::new(FakeDriver::default());
    let mut agent = RunningAgent::start(settings(addr, dir.path()), Arc::clone(&driver));
    let applied = agent.wait_applied(12).await;
    assert_eq!(applied.digest, v12.digest());
    assert_eq!(driver.applies(), std::slice::from_ref(&v12));

    // The hub comes back on the same port: Hello says which plan the agent has.
    let mut hub = FakeHub::start(addr).await;
    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.applied_version, 12);
    assert_eq!(conn.hello.applied_digest, v12.digest());
    // The hub's plan is current: no snapshot, but the agent reports on welcome.
    conn.send(welcome(100));
    assert_eq!(conn.expect_report().await.active_connections, 1);

    // The hub restarts again while the agent is connected: the agent reconnects.
    drop(conn);
    let addr = hub.kill().await;
    let mut hub = FakeHub::start(addr).await;
    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.applied_version, 12);
    let v13 = plan(&[share("db", 3306), share("cache", 6379)]);
    conn.send(welcome(100));
    conn.send(delta(12, &v12, 13, &v13));
    assert_eq!(conn.expect_ack().await, 13);
    assert_eq!(driver.applies(), [v12, v13]);

    agent.stop().await;
    hub.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_hello_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    hub.refuse_next(2);
    let driver = Arc::new(FakeDriver::default());
    let agent = RunningAgent::start(settings(hub.addr, dir.path()), Arc::clone(&driver));
    // Two refusals, then the third Hello gets through.
    let mut conn = hub.next_conn().await;
    assert_eq!(hub.refusals_left(), 0);
    assert_eq!(conn.hello.token, TOKEN);
    conn.send(welcome(100));
    conn.send(snapshot(1, &plan(&[])));
    assert_eq!(conn.expect_ack().await, 1);
    agent.stop().await;
    hub.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_changes_are_reported_coalesced_and_periodically() {
    let dir = tempfile::tempdir().unwrap();
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let driver = Arc::new(FakeDriver::default());
    let mut settings = settings(hub.addr, dir.path());
    settings.report_interval = Duration::from_millis(300);
    let agent = RunningAgent::start(settings, Arc::clone(&driver));
    let mut conn = hub.next_conn().await;
    conn.send(welcome(10_000));
    conn.expect_report().await;

    // A burst of 50 changes gives a report or two, not 50.
    let before = driver.reports.load(Ordering::SeqCst);
    for _ in 0..50 {
        driver.bump();
        tokio::task::yield_now().await;
    }
    conn.expect_report().await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let burst = driver.reports.load(Ordering::SeqCst) - before;
    assert!((1..=3).contains(&burst), "{burst} reports for one burst");

    // Nothing changes: reports still come every reportIntervalMs.
    let start = tokio::time::Instant::now();
    conn.expect_report().await;
    conn.expect_report().await;
    assert!(start.elapsed() < Duration::from_secs(2));

    agent.stop().await;
    hub.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_hub_is_replaced_by_the_next_without_a_reapply() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let mut second = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let relay = Relay::start(first.addr).await;
    let driver = Arc::new(FakeDriver::default());
    let mut settings = settings_for(&[relay.addr, second.addr], dir.path());
    settings.backoff = SLOW;
    let mut agent = RunningAgent::start(settings, Arc::clone(&driver));

    let mut conn = first.next_conn().await;
    assert_eq!(conn.hello.applied_version, 0);
    conn.send(welcome(100));
    let v5 = plan(&[share("db", 3306)]);
    conn.send(snapshot(5, &v5));
    assert_eq!(conn.expect_ack().await, 5);
    agent.wait_applied(5).await;

    // The first hub's process dies: the agent is on the second at once (no backoff:
    // an hour's would miss the deadline), and its Hello says what it serves.
    let killed = Instant::now();
    relay.kill().await;
    let mut conn = second.next_conn().await;
    let took = killed.elapsed();
    eprintln!("on the second hub {took:?} after the first was killed");
    assert!(took < FAILOVER_BOUND, "{took:?}");
    assert_eq!(
        (
            conn.hello.applied_version,
            conn.hello.applied_digest.as_str()
        ),
        (5, v5.digest().as_str())
    );

    // The second hub's plan is current (one store, one version): welcome and no
    // snapshot. The agent reports and applies nothing.
    conn.send(welcome(100));
    assert_eq!(conn.expect_report().await.active_connections, 1);
    assert_eq!(
        driver.applies(),
        std::slice::from_ref(&v5),
        "not re-applied"
    );

    // It follows the second hub from there: a delta on the version it had.
    let v6 = plan(&[share("db", 3306), share("cache", 6379)]);
    conn.send(delta(5, &v5, 6, &v6));
    assert_eq!(conn.expect_ack().await, 6);
    assert_eq!(driver.applies(), [v5, v6]);

    agent.stop().await;
    first.kill().await;
    second.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_hub_is_skipped_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let dead = closed_port().await;
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let mut settings = settings_for(&[dead, hub.addr], dir.path());
    settings.backoff = SLOW;
    let started = Instant::now();
    let agent = RunningAgent::start(settings, Arc::new(FakeDriver::default()));
    let mut conn = hub.next_conn().await;
    let took = started.elapsed();
    eprintln!("on the second hub {took:?} after start, the first refusing");
    assert!(took < FAILOVER_BOUND, "{took:?}");
    conn.send(welcome(100));
    conn.expect_report().await;
    agent.stop().await;
    hub.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_hub_is_left_within_the_keepalive_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let mut second = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let relay = Relay::start(first.addr).await;
    let driver = Arc::new(FakeDriver::default());
    let mut settings = settings_for(&[relay.addr, second.addr], dir.path());
    settings.backoff = SLOW;
    let agent = RunningAgent::start(settings, Arc::clone(&driver));
    let mut conn = first.next_conn().await;
    conn.send(welcome(100));
    let v3 = plan(&[share("db", 3306)]);
    conn.send(snapshot(3, &v3));
    assert_eq!(conn.expect_ack().await, 3);

    // The first hub stops answering (paused, or partitioned away) with its
    // connections open: HTTP/2 keepalive finds out.
    let silenced = Instant::now();
    relay.silence();
    let conn = second.next_conn().await;
    let took = silenced.elapsed();
    eprintln!("on the second hub {took:?} after the first fell silent");
    assert!(
        took < KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(took < FAILOVER_BOUND, "{took:?}");
    assert_eq!(conn.hello.applied_version, 3);
    assert_eq!(driver.applies().len(), 1);

    agent.stop().await;
    relay.kill().await;
    first.kill().await;
    second.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_equal_snapshot_is_acknowledged_without_applying() {
    let dir = tempfile::tempdir().unwrap();
    let v12 = plan(&[share("db", 3306)]);
    PlanStore::new(dir.path().join("state/plan.json"))
        .save(&PersistedPlan {
            version: 12,
            digest: v12.digest(),
            plan: v12.clone(),
        })
        .unwrap();
    let error = RuleError {
        ingress: IngressKey::new("default", "db"),
        rule: 0,
        message: "port 3306 in use".into(),
    };
    let driver = Arc::new(FakeDriver::default());
    *driver.rule_errors.lock().unwrap() = vec![error.clone()];
    let mut hub = FakeHub::start("127.0.0.1:0".parse().unwrap()).await;
    let mut agent = RunningAgent::start(settings(hub.addr, dir.path()), Arc::clone(&driver));
    agent.wait_applied(12).await;
    assert_eq!(driver.applies().len(), 1, "the persisted plan, at start");

    // A hub (another replica, or one restarted) sends the plan the agent serves: it is
    // acknowledged as it was applied, rule errors included, and not applied again.
    let mut conn = hub.next_conn().await;
    assert_eq!(conn.hello.applied_version, 12);
    conn.send(welcome(100));
    conn.send(snapshot(12, &v12));
    assert_eq!(conn.expect_nack().await, (12, vec![error.clone()]));
    assert_eq!(driver.applies().len(), 1);

    // The same plan under another version: the version is recorded, nothing applied.
    conn.send(snapshot(13, &v12));
    assert_eq!(conn.expect_nack().await, (13, vec![error]));
    assert_eq!(driver.applies().len(), 1);
    agent.wait_applied(13).await;
    let stored = persisted(dir.path()).unwrap();
    assert_eq!((stored.version, &stored.plan), (13, &v12));

    // A different plan is applied as always.
    driver.rule_errors.lock().unwrap().clear();
    let v14 = plan(&[share("db", 3306), share("cache", 6379)]);
    conn.send(snapshot(14, &v14));
    assert_eq!(conn.expect_ack().await, 14);
    assert_eq!(driver.applies(), [v12, v14]);

    agent.stop().await;
    hub.kill().await;
}
