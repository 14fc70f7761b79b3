//! A scripted fake cluster agent: it connects to a hub's agent gateway over real gRPC
//! (the generated tonic client, messages built from `fedingress_proto`'s domain types),
//! says Hello with a token, and then does only what the test tells it to: ack, nack,
//! report, stop heartbeating, or wait for the hub's next message with a deadline.
//!
//! It heartbeats on its own at the interval the Welcome gives (so a test does not lose
//! its session to the lease by being slow) until [`FakeAgent::stop_heartbeats`]. It
//! keeps the plan the hub sent it, applying snapshots and deltas as a real agent would,
//! and checks that every delta builds on the version it holds.
//!
//! The mirror image of `cluster-agent/tests/it/hub.rs`, which scripts a fake hub.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fedingress_api::cluster::{Address, Provider};
use fedingress_api::plan::{
    AgentReport, AnycastRoute, BackendHealth, ClusterPlan, IngressKey, IngressReport, PlanDelta,
    RuleAddresses, RuleError, SpeakerReport, VrrpReport,
};
use fedingress_proto::convert::{agent_to_pb, hub_from_pb};
use fedingress_proto::pb;
use fedingress_proto::pb::agent_gateway_client::AgentGatewayClient;
use fedingress_proto::{AgentToHub, Hello, HubToAgent};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;

use super::{DEADLINE, TestHub};

/// A Hello for `cluster` with `token`, as an agent that never applied a plan sends it.
pub fn hello(cluster: &str, token: &str) -> Hello {
    Hello {
        cluster: cluster.to_string(),
        token: token.to_string(),
        agent_version: "fake-agent".into(),
        driver: "standalone".into(),
        capabilities: vec!["TCP".into(), "UDP".into()],
        applied_version: 0,
        applied_digest: String::new(),
        ..Hello::default()
    }
}

/// What the hub's Welcome said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub heartbeat_interval_ms: u32,
    pub lease_ms: u32,
    pub provider: Option<Provider>,
    /// The Cluster was cordoned when the session started.
    pub cordoned: bool,
}

/// One agent session, scripted by the test. Dropping it closes the stream.
pub struct FakeAgent {
    pub cluster: String,
    pub welcome: Welcome,
    /// The plan as the agent holds it after every Snapshot and Delta received so far.
    pub plan: ClusterPlan,
    /// Version of [`FakeAgent::plan`] (0 before the first one).
    pub version: u64,
    /// Digest of [`FakeAgent::plan`] as the hub gave it.
    pub digest: String,
    outbound: mpsc::UnboundedSender<pb::AgentMessage>,
    inbound: tonic::Streaming<pb::HubMessage>,
    heartbeats: Option<JoinHandle<()>>,
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeats.take() {
            task.abort();
        }
    }
}

impl FakeAgent {
    /// Issues a token for `cluster` on `hub`'s REST API and connects with it; panics
    /// unless the hub welcomes the agent.
    pub async fn connect(hub: &TestHub, cluster: &str) -> FakeAgent {
        let token = hub.issue_token(cluster).await;
        FakeAgent::try_connect(hub.addresses.agent, hello(cluster, &token))
            .await
            .unwrap_or_else(|status| panic!("agent of {cluster} refused: {status}"))
    }

    /// [`FakeAgent::connect`] as an agent whose driver is `driver` and offers
    /// `capabilities` (see `fedingress_api::capability`).
    pub async fn connect_with(
        hub: &TestHub,
        cluster: &str,
        driver: &str,
        capabilities: &[&str],
    ) -> FakeAgent {
        let token = hub.issue_token(cluster).await;
        let hello = Hello {
            driver: driver.to_string(),
            capabilities: capabilities.iter().map(|c| (*c).to_string()).collect(),
            ..hello(cluster, &token)
        };
        FakeAgent::try_connect(hub.addresses.agent, hello)
            .await
            .unwrap_or_else(|status| panic!("agent of {cluster} refused: {status}"))
    }

    /// [`FakeAgent::connect`] as member `member` of `cluster`, with `labels` and real
    /// address `address`.
    pub async fn connect_member(
        hub: &TestHub,
        cluster: &str,
        member: &str,
        labels: &[(&str, &str)],
        address: IpAddr,
    ) -> FakeAgent {
        let token = hub.issue_token(cluster).await;
        let hello = Hello {
            member: member.to_string(),
            member_labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
            member_address: Some(address),
            ..hello(cluster, &token)
        };
        FakeAgent::try_connect(hub.addresses.agent, hello)
            .await
            .unwrap_or_else(|status| panic!("member {member} of {cluster} refused: {status}"))
    }

    /// Opens a session with `hello` and waits for the Welcome. The hub's refusal is the
    /// error (e.g. `Unauthenticated`).
    pub async fn try_connect(gateway: SocketAddr, hello: Hello) -> Result<FakeAgent, Status> {
        let cluster = hello.cluster.clone();
        FakeAgent::open(gateway, cluster, AgentToHub::Hello(hello)).await
    }

    /// Opens a session whose first message is `first` (a protocol violation unless it
    /// is a Hello); the hub's refusal is the error.
    pub async fn try_connect_with_first(
        gateway: SocketAddr,
        first: AgentToHub,
    ) -> Result<FakeAgent, Status> {
        FakeAgent::open(gateway, String::new(), first).await
    }

    async fn open(
        gateway: SocketAddr,
        cluster: String,
        first: AgentToHub,
    ) -> Result<FakeAgent, Status> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{gateway}"))
            .unwrap()
            .connect_timeout(DEADLINE)
            .connect()
            .await
            .unwrap();
        let (outbound, rx) = mpsc::unbounded_channel();
        outbound.send(agent_to_pb(&first)).unwrap();
        let mut client = AgentGatewayClient::new(channel);
        let mut inbound =
            tokio::time::timeout(DEADLINE, client.connect(UnboundedReceiverStream::new(rx)))
                .await
                .expect("the hub neither accepted nor refused the session")?
                .into_inner();
        let first = tokio::time::timeout(DEADLINE, inbound.message())
            .await
            .expect("no Welcome")?
            .ok_or_else(|| Status::cancelled("stream closed before Welcome"))?;
        let HubToAgent::Welcome {
            heartbeat_interval_ms,
            lease_ms,
            provider,
            cordoned,
        } = hub_from_pb(first).expect("the hub sent an invalid message")
        else {
            panic!("the hub's first message is not a Welcome");
        };
        let period = Duration::from_millis(u64::from(heartbeat_interval_ms.max(10)));
        let beat = outbound.clone();
        let heartbeats = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            loop {
                ticks.tick().await;
                if beat.send(agent_to_pb(&AgentToHub::Heartbeat)).is_err() {
                    return;
                }
            }
        });
        Ok(FakeAgent {
            cluster,
            welcome: Welcome {
                heartbeat_interval_ms,
                lease_ms,
                provider,
                cordoned,
            },
            plan: ClusterPlan::default(),
            version: 0,
            digest: String::new(),
            outbound,
            inbound,
            heartbeats: Some(heartbeats),
        })
    }

    /// A Hello for this agent's cluster that says the plan it holds is applied (what a
    /// real agent sends when it reconnects).
    pub fn hello_applied(&self, token: &str) -> Hello {
        Hello {
            applied_version: self.version,
            applied_digest: self.digest.clone(),
            ..hello(&self.cluster, token)
        }
    }

    pub fn send(&self, message: AgentToHub) {
        self.outbound
            .send(agent_to_pb(&message))
            .expect("the agent's stream is closed");
    }

    /// Acknowledges the plan held now.
    pub fn ack(&self) {
        self.send(AgentToHub::Ack {
            version: self.version,
        });
    }

    /// Says the plan held now is applied except for `rule_errors`.
    pub fn nack(&self, rule_errors: Vec<RuleError>) {
        self.send(AgentToHub::Nack {
            version: self.version,
            error: String::new(),
            rule_errors,
        });
    }

    /// Reports every share of the plan held now as applied, served on `ip`, with
    /// `ready` of 1 endpoint of its `echo:9000` backend ready.
    pub fn report(&self, ip: IpAddr, ready: u32) {
        self.report_with(ip, ready, Vec::new(), &[]);
    }

    /// [`FakeAgent::report`] with, for every share, `rules` served on addresses of their
    /// own (e.g. a split UDP load balancer) and errors for the rules at `failed`.
    pub fn report_with(&self, ip: IpAddr, ready: u32, rules: Vec<RuleAddresses>, failed: &[u32]) {
        self.send_report(ip, ready, rules, failed, Vec::new(), None);
    }

    /// [`FakeAgent::report`] with each pool's VRRP state (`(pool, "MASTER")`, ...).
    pub fn report_vrrp(&self, ip: IpAddr, ready: u32, vrrp: &[(&str, &str)]) {
        let mut report = self.build_report(ip, ready, Vec::new(), &[], Vec::new(), None);
        report.vrrp = vrrp
            .iter()
            .map(|(pool, state)| VrrpReport {
                pool: (*pool).to_string(),
                state: (*state).to_string(),
            })
            .collect();
        self.send(AgentToHub::Report(report));
    }

    /// [`FakeAgent::report`] with, for every share, the BGP routes `anycast` and the
    /// agent's BGP `speaker` (`None`: the agent has none).
    pub fn report_anycast(
        &self,
        ip: IpAddr,
        ready: u32,
        anycast: Vec<AnycastRoute>,
        speaker: Option<SpeakerReport>,
    ) {
        self.send_report(ip, ready, Vec::new(), &[], anycast, speaker);
    }

    fn send_report(
        &self,
        ip: IpAddr,
        ready: u32,
        rules: Vec<RuleAddresses>,
        failed: &[u32],
        anycast: Vec<AnycastRoute>,
        speaker: Option<SpeakerReport>,
    ) {
        let report = self.build_report(ip, ready, rules, failed, anycast, speaker);
        self.send(AgentToHub::Report(report));
    }

    fn build_report(
        &self,
        ip: IpAddr,
        ready: u32,
        rules: Vec<RuleAddresses>,
        failed: &[u32],
        anycast: Vec<AnycastRoute>,
        speaker: Option<SpeakerReport>,
    ) -> AgentReport {
        let ingresses = self
            .plan
            .ingresses
            .values()
            .map(|share| IngressReport {
                key: share.key.clone(),
                applied_generation: share.generation,
                addresses: vec![Address::ip(ip)],
                backends: vec![BackendHealth {
                    service: "echo".into(),
                    port: 9000,
                    ready,
                    total: 1,
                }],
                listeners: Vec::new(),
                rule_errors: failed
                    .iter()
                    .map(|&rule| RuleError {
                        ingress: share.key.clone(),
                        rule,
                        message: format!("rule {rule} is not supported by this driver"),
                    })
                    .collect(),
                rules: rules.clone(),
                anycast: anycast.clone(),
            })
            .collect();
        AgentReport {
            ingresses,
            addresses: vec![Address::ip(ip)],
            requests_per_second: 0.0,
            active_connections: 0,
            speaker,
            ..AgentReport::default()
        }
    }

    /// Stops the automatic heartbeats: the session now lives only as long as the test
    /// sends something within every lease.
    pub fn stop_heartbeats(&mut self) {
        if let Some(task) = self.heartbeats.take() {
            task.abort();
        }
    }

    /// The hub's next message (Snapshot and Delta update the plan held), within
    /// [`DEADLINE`].
    pub async fn next(&mut self) -> HubToAgent {
        let message = tokio::time::timeout(DEADLINE, self.inbound.message())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{}: no message from the hub within {DEADLINE:?}",
                    self.cluster
                )
            })
            .unwrap_or_else(|status| panic!("{}: stream error: {status}", self.cluster))
            .unwrap_or_else(|| panic!("{}: the hub closed the stream", self.cluster));
        let message = hub_from_pb(message).expect("the hub sent an invalid message");
        match &message {
            HubToAgent::Snapshot {
                version,
                digest,
                plan,
            } => {
                self.plan = plan.clone();
                self.version = *version;
                self.digest = digest.clone();
            }
            HubToAgent::Delta {
                version,
                digest,
                base_version,
                delta,
            } => {
                assert_eq!(
                    *base_version, self.version,
                    "{}: a delta that does not build on the plan held",
                    self.cluster
                );
                self.plan.apply(delta);
                self.version = *version;
                self.digest = digest.clone();
                assert_eq!(self.plan.digest(), self.digest, "the delta's digest");
            }
            HubToAgent::Welcome { .. } | HubToAgent::Ping => {}
        }
        message
    }

    /// The next message, which must be a Snapshot; returns its plan.
    pub async fn expect_snapshot(&mut self) -> ClusterPlan {
        match self.next().await {
            HubToAgent::Snapshot { plan, .. } => plan,
            other => panic!("{}: expected a Snapshot, got {other:?}", self.cluster),
        }
    }

    /// The next message, which must be a Delta; returns its base version and delta.
    pub async fn expect_delta(&mut self) -> (u64, PlanDelta) {
        match self.next().await {
            HubToAgent::Delta {
                base_version,
                delta,
                ..
            } => (base_version, delta),
            other => panic!("{}: expected a Delta, got {other:?}", self.cluster),
        }
    }

    /// Reads Snapshots and Deltas until the plan held has `key` at `generation`.
    pub async fn expect_share(&mut self, key: &IngressKey, generation: i64) {
        while self.plan.ingresses.get(key).map(|s| s.generation) != Some(generation) {
            self.next().await;
        }
    }

    /// Waits until the hub ends the session (the stream ends, with or without an error).
    pub async fn expect_closed(&mut self) {
        let closed = async {
            loop {
                match self.inbound.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => return,
                }
            }
        };
        tokio::time::timeout(DEADLINE, closed)
            .await
            .unwrap_or_else(|_| panic!("{}: the hub did not end the session", self.cluster));
    }
}
