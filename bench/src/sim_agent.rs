//! A simulated cluster agent for the benches: it speaks the real agent protocol over real
//! gRPC (Hello with the cluster's token, an Ack of every Snapshot/Delta, heartbeats) and,
//! at most every 100 ms after a plan change, sends a Report saying every share of its
//! plan is applied, its `echo:9000` backend has 1 of 1 endpoints ready and the cluster's
//! address is the given IP. The hub then counts every ingress healthy on that cluster.
//!
//! Entry point: [`agent`] (spawn it; abort the task to stop it) with [`AgentStats`].
//! [`Session::open`] (Hello, Welcome) and [`report`] (with load figures and backend
//! readiness of the bench's choosing, [`Load`]) serve agents that do something else with
//! plans.
//! It runs no data plane and no health checks: benches that need those start the real
//! `cluster-agent` ([`crate::Agent`]).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use fedingress_proto::convert::{agent_to_pb, hub_from_pb};
use fedingress_proto::pb;
use fedingress_proto::pb::agent_gateway_client::AgentGatewayClient;
use fedingress_proto::{AgentToHub, Hello, HubToAgent};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// Counters of the simulated agents of one bench.
#[derive(Default)]
pub struct AgentStats {
    /// Sessions opened (a Welcome received).
    pub sessions: AtomicUsize,
    /// Sessions that ended with an error (the agent reconnects).
    pub errors: AtomicUsize,
    /// Snapshots and Deltas received (each acked).
    pub plans: AtomicUsize,
    /// Reports sent.
    pub reports: AtomicUsize,
}

/// One simulated agent: sessions until aborted, reconnecting after an error.
pub async fn agent(
    channel: Channel,
    cluster: String,
    token: String,
    ip: Ipv4Addr,
    stats: Arc<AgentStats>,
) {
    loop {
        if let Err(e) = session(&channel, &cluster, &token, ip, &stats).await {
            if stats.errors.fetch_add(1, Ordering::Relaxed) < 5 {
                eprintln!("agent {cluster}: session ended: {e:#} (reconnecting)");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn ip_address(ip: Ipv4Addr) -> pb::Address {
    pb::Address {
        kind: Some(pb::address::Kind::Ip(ip.to_string())),
    }
}

/// The plan as a simulated agent has it: (namespace, name) → generation of each share
/// (what its reports say is applied).
pub type Applied = BTreeMap<(String, String), i64>;

/// Takes in a Snapshot or Delta: `applied` becomes the plan it leads to; its version
/// (`None` for other messages, which change nothing).
pub fn track(applied: &mut Applied, message: &HubToAgent) -> Option<u64> {
    match message {
        HubToAgent::Snapshot { version, plan, .. } => {
            *applied = plan
                .ingresses
                .values()
                .map(|s| ((s.key.namespace.clone(), s.key.name.clone()), s.generation))
                .collect();
            Some(*version)
        }
        HubToAgent::Delta { version, delta, .. } => {
            for key in &delta.deletes {
                applied.remove(&(key.namespace.clone(), key.name.clone()));
            }
            for s in &delta.upserts {
                applied.insert((s.key.namespace.clone(), s.key.name.clone()), s.generation);
            }
            Some(*version)
        }
        HubToAgent::Welcome { .. } | HubToAgent::Ping => None,
    }
}

/// What a report says besides the plan: the cluster's load figures and whether its
/// `echo:9000` backend is ready.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub requests_per_second: f64,
    pub active_connections: u64,
    pub ready: bool,
}

impl Default for Load {
    /// Idle and ready.
    fn default() -> Self {
        Self {
            requests_per_second: 0.0,
            active_connections: 0,
            ready: true,
        }
    }
}

/// A report saying every share of `plan` (key → generation) is applied, its `echo:9000`
/// backend has 1 of 1 endpoints ready (0 of 1 when `load.ready` is false), and the
/// cluster's address is `ip`, with `load`'s figures.
pub fn report(plan: &Applied, ip: Ipv4Addr, load: &Load) -> pb::AgentMessage {
    let ingresses = plan
        .iter()
        .map(|((namespace, name), generation)| pb::IngressReport {
            key: Some(pb::IngressKey {
                namespace: namespace.clone(),
                name: name.clone(),
            }),
            applied_generation: *generation,
            addresses: vec![ip_address(ip)],
            backends: vec![pb::BackendHealth {
                service: "echo".into(),
                port: 9000,
                ready: u32::from(load.ready),
                total: 1,
            }],
            listeners: Vec::new(),
            rule_errors: Vec::new(),
            rules: Vec::new(),
            anycast: Vec::new(),
        })
        .collect();
    pb::AgentMessage {
        kind: Some(pb::agent_message::Kind::Report(pb::Report {
            ingresses,
            addresses: vec![ip_address(ip)],
            requests_per_second: load.requests_per_second,
            active_connections: load.active_connections,
            ..pb::Report::default()
        })),
    }
}

/// An open agent session: the hub has answered Hello with a Welcome.
pub struct Session {
    /// Messages to the hub.
    pub tx: mpsc::Sender<pb::AgentMessage>,
    /// Messages from the hub, after the Welcome.
    pub inbound: tonic::Streaming<pb::HubMessage>,
    /// The heartbeat interval the Welcome asked for.
    pub heartbeat: Duration,
}

impl Session {
    /// Sends Hello (cluster, token, `agent_version`, TCP and UDP, nothing applied yet)
    /// and waits for the hub's Welcome.
    pub async fn open(
        channel: &Channel,
        cluster: &str,
        token: &str,
        agent_version: &str,
    ) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel(64);
        // The hub answers the call only after reading Hello: queue it first.
        tx.send(agent_to_pb(&AgentToHub::Hello(Hello {
            cluster: cluster.to_string(),
            token: token.to_string(),
            agent_version: agent_version.into(),
            driver: "bench".into(),
            capabilities: vec!["TCP".into(), "UDP".into()],
            applied_version: 0,
            applied_digest: String::new(),
            ..Hello::default()
        })))
        .await?;
        let mut client = AgentGatewayClient::new(channel.clone());
        let mut inbound = client.connect(ReceiverStream::new(rx)).await?.into_inner();
        let first = inbound
            .message()
            .await?
            .context("stream closed before Welcome")?;
        let HubToAgent::Welcome {
            heartbeat_interval_ms,
            ..
        } = hub_from_pb(first)?
        else {
            bail!("the first hub message is not a Welcome");
        };
        Ok(Self {
            tx,
            inbound,
            heartbeat: Duration::from_millis(u64::from(heartbeat_interval_ms)),
        })
    }
}

async fn session(
    channel: &Channel,
    cluster: &str,
    token: &str,
    ip: Ipv4Addr,
    stats: &AgentStats,
) -> anyhow::Result<()> {
    let Session {
        tx,
        mut inbound,
        heartbeat: period,
    } = Session::open(channel, cluster, token, "bench-sim-agent").await?;
    stats.sessions.fetch_add(1, Ordering::Relaxed);
    let mut heartbeats = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    // Reports are coalesced: at most one per 100 ms, after a plan changed.
    let mut reports = tokio::time::interval(Duration::from_millis(100));
    let mut plan = Applied::new();
    let mut dirty = true;
    loop {
        tokio::select! {
            message = inbound.message() => {
                let message = message?.context("the hub closed the stream")?;
                let Some(version) = track(&mut plan, &hub_from_pb(message)?) else {
                    continue;
                };
                stats.plans.fetch_add(1, Ordering::Relaxed);
                tx.send(agent_to_pb(&AgentToHub::Ack { version })).await?;
                dirty = true;
            }
            _ = reports.tick() => {
                if dirty {
                    dirty = false;
                    stats.reports.fetch_add(1, Ordering::Relaxed);
                    tx.send(report(&plan, ip, &Load::default())).await?;
                }
            }
            _ = heartbeats.tick() => {
                tx.send(agent_to_pb(&AgentToHub::Heartbeat)).await?;
            }
        }
    }
}
