//! A scripted fake hub for tests that run the agent binary: a real tonic
//! `AgentGateway` on a loopback port that welcomes each session as the test says
//! (cordoned or not), sends the test's plan as a snapshot, and keeps every report.
//! Ending a session ([`FakeHub::end_sessions`]) makes the agent reconnect and be
//! welcomed again, as the real hub does on a cordon change.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fedingress_api::plan::{AgentReport, ClusterPlan};
use fedingress_proto::convert::{agent_from_pb, hub_to_pb};
use fedingress_proto::pb::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use fedingress_proto::{AgentToHub, HubToAgent, pb};
use fedingress_testsupport::eventually_async;
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status, Streaming};

/// What the next session gets, and what the agent said.
#[derive(Default)]
struct Script {
    cordoned: bool,
    plan: ClusterPlan,
    version: u64,
    reports: Vec<AgentReport>,
}

#[derive(Clone)]
struct Service {
    script: Arc<Mutex<Script>>,
    /// Bumped to end every open session.
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
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no Hello"))?;
        let AgentToHub::Hello(_) = agent_from_pb(first)? else {
            return Err(Status::invalid_argument("first message is not a Hello"));
        };
        let (cordoned, plan, version) = {
            let script = self.script.lock().unwrap();
            (script.cordoned, script.plan.clone(), script.version)
        };
        let script = Arc::clone(&self.script);
        tokio::spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                if let Ok(AgentToHub::Report(report)) = agent_from_pb(message) {
                    script.lock().unwrap().reports.push(report);
                }
            }
        });
        let messages = vec![
            HubToAgent::Welcome {
                heartbeat_interval_ms: 1000,
                lease_ms: 10_000,
                provider: None,
                cordoned,
            },
            HubToAgent::Snapshot {
                version,
                digest: plan.digest(),
                plan,
            },
        ];
        let mut end = self.end.clone();
        end.borrow_and_update();
        let stream = futures_util::stream::iter(messages.into_iter().map(|m| Ok(hub_to_pb(&m))))
            .chain(futures_util::stream::pending())
            .take_until(async move {
                let _ = end.changed().await;
            });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// A running fake hub; stops on drop.
pub struct FakeHub {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    end: watch::Sender<u64>,
    server: JoinHandle<()>,
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeHub {
    /// Serves `plan` (as version 1) on 127.0.0.1, a port of its own.
    pub async fn start(plan: ClusterPlan) -> FakeHub {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script = Arc::new(Mutex::new(Script {
            plan,
            version: 1,
            ..Script::default()
        }));
        let (end, end_rx) = watch::channel(0);
        let service = Service {
            script: Arc::clone(&script),
            end: end_rx,
        };
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(AgentGatewayServer::new(service))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
        FakeHub {
            addr,
            script,
            end,
            server,
        }
    }

    /// Welcomes later sessions as cordoned (or not) and ends the open ones, so the
    /// agent reconnects and hears it, as from the real hub.
    pub fn set_cordoned(&self, cordoned: bool) {
        self.script.lock().unwrap().cordoned = cordoned;
        self.end.send_modify(|n| *n += 1);
    }

    /// The latest report, if any.
    pub fn latest_report(&self) -> Option<AgentReport> {
        self.script.lock().unwrap().reports.last().cloned()
    }

    /// Waits until the latest report satisfies `check`; panics with it after `deadline`.
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
}
