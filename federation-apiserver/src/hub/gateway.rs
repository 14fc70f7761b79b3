//! The agents' gRPC endpoint (`fedingress.v1.AgentGateway/Connect`).
//!
//! # Guarantees
//! - The first message must be a Hello with a live token of the named cluster (else
//!   `Unauthenticated`); everything on the stream is then attributed to that cluster
//!   only, so a connection speaks only for its own cluster.
//! - After Welcome the agent gets a Snapshot unless the plan it applied (by digest) is
//!   the current one; then a Delta per plan change, always against the plan last sent
//!   on this stream.
//! - A session that sends nothing for one lease is ended (the agent reconnects); a
//!   newer session of the same cluster replaces the older.
//! - Welcome carries the Cluster's `spec.provider` as stored when the session started; a
//!   later change of it ends the session ([`Hub::end_session`], called by the
//!   controller), so the agent reconnects and is welcomed with the new value.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::cluster::Provider;
use fedingress_proto::convert::{agent_from_pb, hub_to_pb};
use fedingress_proto::pb::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use fedingress_proto::pb::{AgentMessage, HubMessage};
use fedingress_proto::{AgentToHub, HubToAgent};
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::tokens::TokenStore;
use super::{Hub, Published};
use crate::registry::Registry;

/// How long an agent has to say Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Plans sent on one stream that an Ack may still refer to.
const SENT_PLANS_KEPT: usize = 4;

pub struct Gateway {
    hub: Arc<Hub>,
    tokens: TokenStore,
    registry: Registry,
}

impl Gateway {
    pub fn server(
        hub: Arc<Hub>,
        tokens: TokenStore,
        registry: Registry,
    ) -> AgentGatewayServer<Self> {
        AgentGatewayServer::new(Self {
            hub,
            tokens,
            registry,
        })
    }
}

type HubStream = Pin<Box<dyn Stream<Item = Result<HubMessage, Status>> + Send>>;

#[tonic::async_trait]
impl AgentGateway for Gateway {
    type ConnectStream = HubStream;

    async fn connect(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let peer = request.remote_addr();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Hello within 10 s"))??
            .ok_or_else(|| Status::cancelled("stream closed before Hello"))?;
        let AgentToHub::Hello(hello) = agent_from_pb(first)? else {
            return Err(Status::invalid_argument(
                "the first message must be a Hello",
            ));
        };
        let cluster = hello.cluster.clone();
        let exists = self
            .registry
            .get::<fedingress_api::Cluster>(None, &cluster)
            .await
            .is_ok();
        let valid = exists
            && self
                .tokens
                .verify(&cluster, &hello.token)
                .await
                .map_err(|e| Status::unavailable(e.message))?;
        if !valid {
            tracing::warn!(cluster, peer = ?peer, "agent refused: invalid or revoked token");
            return Err(Status::unauthenticated(format!(
                "invalid or revoked token for cluster {cluster:?} (or no such cluster)"
            )));
        }
        let (session, kill) = self.hub.connect(
            &cluster,
            &hello.agent_version,
            &hello.driver,
            &hello.capabilities,
        );
        // Read after the session is registered: a provider change stored later ends this
        // session (the controller sees it after this read), one stored earlier is read here.
        let provider = match self
            .registry
            .get::<fedingress_api::Cluster>(None, &cluster)
            .await
        {
            Ok(object) => Some(object.spec.provider),
            Err(e) => {
                tracing::warn!(cluster, error = %e.message, "reading the cluster's provider failed; Welcome says none");
                None
            }
        };
        tracing::info!(cluster, session, peer = ?peer, agent_version = %hello.agent_version, driver = %hello.driver, capabilities = ?hello.capabilities, applied_version = hello.applied_version, "agent connected");
        let (tx, rx) = mpsc::channel::<Result<HubMessage, Status>>(64);
        let hub = self.hub.clone();
        tokio::spawn(async move {
            let end = session_loop(
                &hub, &cluster, session, &hello, provider, inbound, &tx, kill,
            )
            .await;
            tracing::info!(cluster, session, reason = %end, "agent session ended");
            hub.disconnect(&cluster, session);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

async fn send(
    tx: &mpsc::Sender<Result<HubMessage, Status>>,
    message: &HubToAgent,
) -> Result<(), String> {
    tx.send(Ok(hub_to_pb(message)))
        .await
        .map_err(|_| "agent went away".to_string())
}

/// Runs one agent session; returns why it ended.
#[allow(clippy::too_many_arguments)]
async fn session_loop(
    hub: &Hub,
    cluster: &str,
    session: u64,
    hello: &fedingress_proto::Hello,
    provider: Option<Provider>,
    mut inbound: Streaming<AgentMessage>,
    tx: &mpsc::Sender<Result<HubMessage, Status>>,
    mut kill: tokio::sync::watch::Receiver<&'static str>,
) -> String {
    let settings = hub.settings;
    let welcome = HubToAgent::Welcome {
        heartbeat_interval_ms: u32::try_from(settings.heartbeat_interval.as_millis())
            .unwrap_or(u32::MAX),
        lease_ms: u32::try_from(settings.lease.as_millis()).unwrap_or(u32::MAX),
        provider,
    };
    if let Err(e) = send(tx, &welcome).await {
        return e;
    }
    let mut plans = hub.plan_receiver(cluster);
    let current = plans.borrow_and_update().clone();
    // Plans sent on this stream by version, for Acks.
    let mut sent: BTreeMap<u64, Published> = BTreeMap::new();
    let mut last_sent = current.clone();
    if !hello.applied_digest.is_empty() && hello.applied_digest == current.digest {
        // Same content under the agent's own version number (versions are re-derived
        // after a hub restart): deltas build on the agent's version.
        tracing::debug!(
            cluster,
            version = hello.applied_version,
            "agent's plan is current: no snapshot"
        );
        last_sent.version = hello.applied_version;
        hub.applied(cluster, session, last_sent.clone(), Vec::new());
    } else {
        let snapshot = HubToAgent::Snapshot {
            version: current.version,
            digest: current.digest.clone(),
            plan: (*current.plan).clone(),
        };
        if let Err(e) = send(tx, &snapshot).await {
            return e;
        }
    }
    sent.insert(last_sent.version, last_sent.clone());
    loop {
        tokio::select! {
            changed = plans.changed() => {
                if changed.is_err() {
                    return "cluster removed".into();
                }
                let next = plans.borrow_and_update().clone();
                if next.digest == last_sent.digest {
                    continue;
                }
                let delta = HubToAgent::Delta {
                    version: next.version,
                    digest: next.digest.clone(),
                    base_version: last_sent.version,
                    delta: last_sent.plan.delta_to(&next.plan),
                };
                if let Err(e) = send(tx, &delta).await {
                    return e;
                }
                last_sent = next.clone();
                sent.insert(next.version, next);
                while sent.len() > SENT_PLANS_KEPT {
                    sent.pop_first();
                }
            }
            message = tokio::time::timeout(settings.lease, inbound.message()) => {
                let message = match message {
                    Err(_) => return "lease expired".into(),
                    Ok(Err(status)) => return format!("stream error: {}", status.message()),
                    Ok(Ok(None)) => return "agent closed the stream".into(),
                    Ok(Ok(Some(message))) => message,
                };
                let message = match agent_from_pb(message) {
                    Ok(message) => message,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return "invalid message".into();
                    }
                };
                if !hub.seen(cluster, session) {
                    return "replaced by a newer session".into();
                }
                match message {
                    AgentToHub::Hello(_) => {
                        let _ = tx.send(Err(Status::invalid_argument("Hello may only be sent once"))).await;
                        return "second Hello".into();
                    }
                    AgentToHub::Ack { version } => match sent.get(&version) {
                        Some(published) => {
                            tracing::debug!(cluster, version, "plan acknowledged");
                            hub.applied(cluster, session, published.clone(), Vec::new());
                        }
                        None => tracing::warn!(cluster, version, "ack for a version not sent on this stream"),
                    },
                    AgentToHub::Nack { version, error, rule_errors } => {
                        tracing::warn!(cluster, version, error = %error, rule_errors = rule_errors.len(), "plan not fully applied");
                        // With `error` nothing was applied; otherwise all but `rule_errors`.
                        if let (true, Some(published)) = (error.is_empty(), sent.get(&version)) {
                            hub.applied(cluster, session, published.clone(), rule_errors);
                        }
                    }
                    AgentToHub::Report(report) => hub.reported(cluster, session, report),
                    AgentToHub::Heartbeat => {}
                }
            }
            ended = kill.changed() => {
                // A reason sent by the hub (`Hub::end_session`), or the sender dropped by a
                // newer session of the same cluster.
                return match ended {
                    Ok(()) => (*kill.borrow()).to_string(),
                    Err(_) => "replaced by a newer session".into(),
                };
            }
        }
    }
}
