//! The fake hub of the agent's tests: a real tonic `AgentGateway` server on a loopback
//! port (or on a listener the test bound, in a network namespace:
//! [`FakeHub::start_on_std`], [`FakeHub::scripted_on`]), standing in for the
//! federation-apiserver.
//!
//! Interactive ([`FakeHub::start`]): every agent stream is handed to the test as a
//! [`Conn`], which the test scripts message by message (`send`, `expect_ack`, ...).
//! Scripted ([`FakeHub::scripted`]): the hub answers each session itself, with a Welcome
//! (cordoned or not, [`FakeHub::set_cordoned`]) and its plan as a snapshot (a new plan:
//! [`FakeHub::set_plan`]), and keeps the agents' reports ([`FakeHub::wait_report`]; per
//! member, [`FakeHub::wait_member_report`]) and their last Ack or Nack
//! ([`FakeHub::answer_of`]).
//!
//! Either way, [`FakeHub::end_sessions`] ends the open streams (the agent reconnects, as
//! after the real hub's cordon change), [`FakeHub::refuse_next`] refuses Hellos as a
//! revoked token is, and [`FakeHub::kill`] stops it as a dying hub. Every wait has a
//! deadline ([`DEADLINE`]), so a missing or unexpected message fails the test instead of
//! hanging it. Certificates (`Join`, `Renew`) are not served.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_api::plan::{AgentReport, ClusterPlan, RuleError};
use fedingress_proto::convert::{agent_from_pb, hub_to_pb};
use fedingress_proto::pb::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use fedingress_proto::{AgentToHub, Hello, HubToAgent, pb};
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::poll::eventually_async;

/// How long the fake hub waits for the agent (a connection, a message, a stop).
pub const DEADLINE: Duration = Duration::from_secs(10);

/// One accepted agent stream, handed to the test to script.
pub struct Conn {
    /// The agent's first message.
    pub hello: Hello,
    inbound: mpsc::UnboundedReceiver<AgentToHub>,
    outbound: mpsc::UnboundedSender<Result<pb::HubMessage, Status>>,
}

impl Conn {
    /// Sends `message` to the agent.
    ///
    /// # Panics
    /// When the stream is gone.
    pub fn send(&self, message: HubToAgent) {
        self.outbound
            .send(Ok(hub_to_pb(&message)))
            .expect("the stream to the agent is gone");
    }

    /// The next message `pick` accepts, skipping the others (heartbeats, reports...).
    ///
    /// # Panics
    /// When the stream closes or [`DEADLINE`] passes first.
    pub async fn expect<T>(
        &mut self,
        what: &str,
        mut pick: impl FnMut(AgentToHub) -> Option<T>,
    ) -> T {
        let wait = async {
            loop {
                match self.inbound.recv().await {
                    Some(message) => {
                        if let Some(found) = pick(message) {
                            return found;
                        }
                    }
                    None => panic!("stream closed while waiting for {what}"),
                }
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("no {what} within {DEADLINE:?}"))
    }

    /// The next Ack's version.
    ///
    /// # Panics
    /// On a Nack, or as [`Conn::expect`].
    pub async fn expect_ack(&mut self) -> u64 {
        self.expect("Ack", |m| match m {
            AgentToHub::Ack { version } => Some(version),
            AgentToHub::Nack { version, .. } => panic!("Nack for {version}, expected an Ack"),
            _ => None,
        })
        .await
    }

    /// The next Nack's version and rule errors.
    ///
    /// # Panics
    /// On an Ack, or as [`Conn::expect`].
    pub async fn expect_nack(&mut self) -> (u64, Vec<RuleError>) {
        self.expect("Nack", |m| match m {
            AgentToHub::Nack {
                version,
                rule_errors,
                ..
            } => Some((version, rule_errors)),
            AgentToHub::Ack { version } => panic!("Ack for {version}, expected a Nack"),
            _ => None,
        })
        .await
    }

    /// The next report.
    ///
    /// # Panics
    /// As [`Conn::expect`].
    pub async fn expect_report(&mut self) -> AgentReport {
        self.expect("Report", |m| match m {
            AgentToHub::Report(report) => Some(report),
            _ => None,
        })
        .await
    }

    /// Waits until the agent's side of the stream is gone.
    ///
    /// # Panics
    /// When it is still there after [`DEADLINE`].
    pub async fn expect_closed(&mut self) {
        let wait = async { while self.inbound.recv().await.is_some() {} };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .expect("the agent did not drop the stream");
    }
}

/// What a scripted hub tells each session, and what the agent reported.
#[derive(Default)]
struct Script {
    cordoned: bool,
    plan: ClusterPlan,
    version: u64,
    reports: Vec<AgentReport>,
    /// The latest report per member (its Hello's `member`).
    by_member: BTreeMap<String, AgentReport>,
    /// The latest Ack or Nack per member.
    answers: BTreeMap<String, AgentToHub>,
}

#[derive(Clone)]
struct Service {
    conns: mpsc::UnboundedSender<Conn>,
    /// Refuse this many more Hellos with Unauthenticated.
    refuse: Arc<AtomicUsize>,
    /// Bumped to end every open stream.
    end: watch::Receiver<u64>,
}

type HubStream = Pin<Box<dyn futures_util::Stream<Item = Result<pb::HubMessage, Status>> + Send>>;

#[tonic::async_trait]
impl AgentGateway for Service {
    type ConnectStream = HubStream;

    async fn join(
        &self,
        _request: Request<pb::JoinRequest>,
    ) -> Result<Response<pb::IssuedCertificate>, Status> {
        Err(Status::unimplemented("the fake hub issues no certificates"))
    }

    async fn renew(
        &self,
        _request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::IssuedCertificate>, Status> {
        Err(Status::unimplemented("the fake hub issues no certificates"))
    }

    async fn connect(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<HubStream>, Status> {
        let mut stream = request.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no Hello"))?;
        let AgentToHub::Hello(hello) = agent_from_pb(first)? else {
            return Err(Status::invalid_argument("first message is not a Hello"));
        };
        if self
            .refuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Status::unauthenticated("token revoked"));
        }
        let (in_tx, inbound) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(message)) = stream.message().await {
                let message = agent_from_pb(message)
                    .unwrap_or_else(|e| panic!("the agent sent an invalid message: {e}"));
                if in_tx.send(message).is_err() {
                    break;
                }
            }
        });
        let (outbound, out_rx) = mpsc::unbounded_channel();
        let _ = self.conns.send(Conn {
            hello,
            inbound,
            outbound,
        });
        let mut end = self.end.clone();
        end.borrow_and_update();
        let stream = UnboundedReceiverStream::new(out_rx).take_until(async move {
            let _ = end.changed().await;
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A running fake hub; stops when dropped.
pub struct FakeHub {
    /// Where agents reach it (`http://{addr}`).
    pub addr: SocketAddr,
    /// The streams not yet taken by [`FakeHub::next_conn`]; `None` once scripted.
    conns: Option<mpsc::UnboundedReceiver<Conn>>,
    /// Set once scripted.
    script: Option<Arc<Mutex<Script>>>,
    refuse: Arc<AtomicUsize>,
    end: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl FakeHub {
    /// An interactive hub on `addr` (port 0: a port of its own). Binding is retried for
    /// up to [`DEADLINE`]: the port may still be held for a moment by a hub just killed.
    pub async fn start(addr: SocketAddr) -> FakeHub {
        let listener = eventually_async(DEADLINE, "binding the hub port", || async {
            tokio::net::TcpListener::bind(addr).await.ok()
        })
        .await;
        FakeHub::start_on(listener)
    }

    /// An interactive hub on `listener`, bound by the caller (inside a network
    /// namespace, say: the socket stays in the namespace it was made in).
    ///
    /// # Panics
    /// When `listener` cannot be used by tokio.
    pub fn start_on_std(listener: std::net::TcpListener) -> FakeHub {
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        FakeHub::start_on(tokio::net::TcpListener::from_std(listener).expect("a tokio listener"))
    }

    fn start_on(listener: tokio::net::TcpListener) -> FakeHub {
        let addr = listener.local_addr().expect("the hub's address");
        let (conns_tx, conns) = mpsc::unbounded_channel();
        let (end, end_rx) = watch::channel(0);
        let (shutdown, mut stopping) = watch::channel(false);
        let refuse = Arc::new(AtomicUsize::new(0));
        let service = Service {
            conns: conns_tx,
            refuse: Arc::clone(&refuse),
            end: end_rx,
        };
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(AgentGatewayServer::new(service))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async move {
                        let _ = stopping.wait_for(|s| *s).await;
                    },
                )
                .await
                .expect("the fake hub failed");
        });
        FakeHub {
            addr,
            conns: Some(conns),
            script: None,
            refuse,
            end,
            shutdown,
            tasks: vec![server],
        }
    }

    /// A scripted hub on 127.0.0.1 (a port of its own) serving `plan` as version 1: each
    /// session gets a Welcome (heartbeat 1 s, lease 10 s) and the plan as a snapshot.
    pub async fn scripted(plan: ClusterPlan) -> FakeHub {
        FakeHub::scripting(
            FakeHub::start(SocketAddr::from(([127, 0, 0, 1], 0))).await,
            plan,
        )
    }

    /// [`FakeHub::scripted`] on `listener` (see [`FakeHub::start_on_std`]).
    pub fn scripted_on(listener: std::net::TcpListener, plan: ClusterPlan) -> FakeHub {
        FakeHub::scripting(FakeHub::start_on_std(listener), plan)
    }

    /// Makes the interactive `hub` scripted, serving `plan` as version 1.
    fn scripting(mut hub: FakeHub, plan: ClusterPlan) -> FakeHub {
        let script = Arc::new(Mutex::new(Script {
            plan,
            version: 1,
            ..Script::default()
        }));
        let Some(mut conns) = hub.conns.take() else {
            unreachable!("a hub just started is interactive")
        };
        let scripting = Arc::clone(&script);
        hub.tasks.push(tokio::spawn(async move {
            while let Some(conn) = conns.recv().await {
                let (cordoned, plan, version) = {
                    let script = lock(&scripting);
                    (script.cordoned, script.plan.clone(), script.version)
                };
                conn.send(HubToAgent::Welcome {
                    heartbeat_interval_ms: 1000,
                    lease_ms: 10_000,
                    provider: None,
                    cordoned,
                });
                conn.send(HubToAgent::Snapshot {
                    version,
                    digest: plan.digest(),
                    plan,
                });
                let script = Arc::clone(&scripting);
                tokio::spawn(async move {
                    // The whole Conn, not only `inbound`: its sending half keeps the
                    // session open for as long as the agent's side is.
                    let mut conn = conn;
                    let member = conn.hello.member.clone();
                    while let Some(message) = conn.inbound.recv().await {
                        match message {
                            AgentToHub::Report(report) => {
                                let mut script = lock(&script);
                                script.by_member.insert(member.clone(), report.clone());
                                script.reports.push(report);
                            }
                            answer @ (AgentToHub::Ack { .. } | AgentToHub::Nack { .. }) => {
                                lock(&script).answers.insert(member.clone(), answer);
                            }
                            _ => {}
                        }
                    }
                });
            }
        }));
        hub.script = Some(script);
        hub
    }

    /// The next agent stream.
    ///
    /// # Panics
    /// On a scripted hub, or when no agent connects within [`DEADLINE`].
    pub async fn next_conn(&mut self) -> Conn {
        let conns = self
            .conns
            .as_mut()
            .expect("a scripted hub answers its streams itself");
        tokio::time::timeout(DEADLINE, conns.recv())
            .await
            .expect("the agent did not connect")
            .expect("hub gone")
    }

    /// Refuses the next `n` Hellos with Unauthenticated ("token revoked").
    pub fn refuse_next(&self, n: usize) {
        self.refuse.store(n, Ordering::SeqCst);
    }

    /// How many of the refusals [`FakeHub::refuse_next`] asked for are still to come.
    pub fn refusals_left(&self) -> usize {
        self.refuse.load(Ordering::SeqCst)
    }

    /// Ends every open stream: the agent reconnects and is welcomed again.
    pub fn end_sessions(&self) {
        self.end.send_modify(|n| *n += 1);
    }

    /// Stops as a dying hub: every stream ends and the listener closes. Returns the
    /// address, to start a hub there again.
    ///
    /// # Panics
    /// When the server does not stop within [`DEADLINE`].
    pub async fn kill(mut self) -> SocketAddr {
        self.end_sessions();
        self.shutdown.send_replace(true);
        let server = self.tasks.remove(0);
        tokio::time::timeout(DEADLINE, server)
            .await
            .expect("the fake hub did not stop")
            .expect("the fake hub failed");
        self.addr
    }

    /// Welcomes later sessions as cordoned (or not) and ends the open ones, so the agent
    /// reconnects and hears it, as from the real hub.
    ///
    /// # Panics
    /// On an interactive hub.
    pub fn set_cordoned(&self, cordoned: bool) {
        lock(self.script()).cordoned = cordoned;
        self.end_sessions();
    }

    /// Serves `plan` as the next version from now on, and ends the open sessions, so
    /// every agent reconnects and is sent it as a snapshot.
    ///
    /// # Panics
    /// On an interactive hub.
    pub fn set_plan(&self, plan: ClusterPlan) {
        {
            let mut script = lock(self.script());
            script.plan = plan;
            script.version += 1;
        }
        self.end_sessions();
    }

    /// The version [`FakeHub::set_plan`] serves now (1 at first).
    ///
    /// # Panics
    /// On an interactive hub.
    pub fn version(&self) -> u64 {
        lock(self.script()).version
    }

    /// The latest Ack or Nack of the agent whose Hello named `member`.
    ///
    /// # Panics
    /// On an interactive hub.
    pub fn answer_of(&self, member: &str) -> Option<AgentToHub> {
        lock(self.script()).answers.get(member).cloned()
    }

    /// Waits until the latest report of the agent whose Hello named `member` satisfies
    /// `check`, and returns it.
    ///
    /// # Panics
    /// On an interactive hub, or after `deadline`, with that agent's latest report.
    pub async fn wait_member_report(
        &self,
        member: &str,
        what: &str,
        deadline: Duration,
        check: impl Fn(&AgentReport) -> bool,
    ) -> AgentReport {
        eventually_async(
            deadline,
            &format!("a report of {member} where {what}"),
            || async {
                let latest = lock(self.script()).by_member.get(member).cloned();
                match latest {
                    Some(report) if check(&report) => Ok(report),
                    latest => Err(format!("{latest:#?}")),
                }
            },
        )
        .await
    }

    /// The latest report, if any.
    ///
    /// # Panics
    /// On an interactive hub.
    pub fn latest_report(&self) -> Option<AgentReport> {
        lock(self.script()).reports.last().cloned()
    }

    /// Waits until the latest report satisfies `check`, and returns it.
    ///
    /// # Panics
    /// On an interactive hub, or after `deadline`, with the latest report.
    pub async fn wait_report(
        &self,
        what: &str,
        deadline: Duration,
        check: impl Fn(&AgentReport) -> bool,
    ) -> AgentReport {
        eventually_async(deadline, &format!("a report where {what}"), || async {
            match self.latest_report() {
                Some(report) if check(&report) => Ok(report),
                latest => Err(format!("{latest:#?}")),
            }
        })
        .await
    }

    fn script(&self) -> &Mutex<Script> {
        self.script
            .as_deref()
            .expect("an interactive hub keeps no script: see FakeHub::scripted")
    }
}

fn lock(script: &Mutex<Script>) -> std::sync::MutexGuard<'_, Script> {
    script
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
