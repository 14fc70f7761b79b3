//! The agent's connection to its BGP speaker: start a managed gobgpd (or reach an
//! external one), start BGP, add the configured peers and clear the routes a previous
//! life left; then announce, withdraw and poll.
//!
//! # Guarantees
//! - After [`open`] the speaker runs BGP with the configured AS, router id and listen
//!   port, knows every configured peer, and originates no route: the agent owns the
//!   routes its speaker originates and starts from none.
//! - A managed gobgpd dies with the agent (parent-death signal; see
//!   `fedingress_gobgp::Gobgpd`) and is killed when its [`Connection`] drops.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use fedingress_gobgp::{
    Community, Global, Gobgpd, GobgpdCommand, Peer, Route, SessionState, Speaker, SpeakerError,
};
use ipnet::IpNet;

use crate::config::anycast::AnycastConfig;

/// How long one API call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a started gobgpd may take until its API answers.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything needed to (re)build the speaker's configuration.
#[derive(Clone, Debug)]
pub(crate) struct SpeakerSettings {
    pub api: SocketAddr,
    pub command: Option<PathBuf>,
    pub global: Global,
    pub peers: Vec<Peer>,
    pub communities: Vec<Community>,
}

impl SpeakerSettings {
    pub fn from_config(config: &AnycastConfig) -> Self {
        SpeakerSettings {
            api: config.speaker.api,
            command: config.speaker.command.clone(),
            global: Global {
                asn: config.asn,
                router_id: config.router_id,
                listen_port: config.listen_port,
                listen_addresses: Vec::new(),
            },
            peers: config.peers.iter().map(|p| p.to_peer()).collect(),
            communities: config.communities(),
        }
    }

    /// The route announcing `address` (a host route) via `next_hop`.
    pub fn route(&self, address: IpAddr, next_hop: IpAddr) -> Route {
        Route {
            prefix: IpNet::from(address),
            next_hop,
            communities: self.communities.clone(),
        }
    }
}

/// Why the speaker cannot be used, naming the config field to look at.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct StartError {
    pub field: String,
    pub message: String,
}

impl StartError {
    fn new(field: impl Into<String>, error: &SpeakerError) -> Self {
        StartError {
            field: field.into(),
            message: error.to_string(),
        }
    }
}

/// Session counts of the speaker's peers, and what its established peers hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PeerCounts {
    pub peers: u32,
    pub established: u32,
    /// Host-route addresses in the Adj-RIB-Out of at least one established peer: sent
    /// to a router and not withdrawn.
    pub sent: BTreeSet<IpAddr>,
}

/// A configured speaker and, when managed, its gobgpd.
#[derive(Debug)]
pub struct Connection {
    speaker: Speaker,
    child: Option<Gobgpd>,
}

/// Starts the managed gobgpd or connects to the external one, then configures it (see
/// the module guarantees).
///
/// # Assumptions
/// Runs on a thread that lives as long as a managed gobgpd should (the main thread or a
/// runtime worker): the parent-death signal follows the spawning thread.
///
/// # Errors
/// gobgpd missing or exiting, an API that does not answer, BGP already running with
/// another configuration, a peer GoBGP refuses.
pub(crate) async fn open(settings: &SpeakerSettings) -> Result<Connection, StartError> {
    let (speaker, child) = match &settings.command {
        Some(command) => {
            let mut child = GobgpdCommand::new(settings.api)
                .program(command)
                .spawn()
                .map_err(|e| StartError::new("anycast.speaker.command", &e))?;
            let speaker = child
                .wait_ready(READY_TIMEOUT)
                .await
                .map_err(|e| StartError::new("anycast.speaker", &e))?;
            (speaker, Some(child))
        }
        None => {
            let mut speaker = Speaker::connect(settings.api, CALL_TIMEOUT)
                .await
                .map_err(|e| StartError::new("anycast.speaker.api", &e))?;
            // Connecting is lazy about HTTP/2: make sure gobgpd answers.
            speaker
                .global()
                .await
                .map_err(|e| StartError::new("anycast.speaker.api", &e))?;
            (speaker, None)
        }
    };
    let mut connection = Connection { speaker, child };
    connection.configure(settings).await?;
    Ok(connection)
}

/// Why a managed gobgpd is down, for status (`gobgpd exited: signal: 9 (SIGKILL)`); its
/// last log lines go to the agent's log only.
fn exited_reason(child: &Gobgpd, status: &str) -> String {
    tracing::error!(api = %child.api(), status = %status, last_output = %child.last_output(), "gobgpd exited");
    format!("gobgpd exited: {status}")
}

impl Connection {
    async fn configure(&mut self, settings: &SpeakerSettings) -> Result<(), StartError> {
        let speaker = &mut self.speaker;
        speaker
            .start(&settings.global)
            .await
            .map_err(|e| StartError::new("anycast", &e))?;
        // Announce only: a route learnt from a peer (a reflected copy of another site's
        // path) must never become this speaker's best path for our own prefix.
        speaker
            .reject_imports()
            .await
            .map_err(|e| StartError::new("anycast.speaker", &e))?;
        let existing = speaker
            .peers()
            .await
            .map_err(|e| StartError::new("anycast.peers", &e))?;
        for (i, peer) in settings.peers.iter().enumerate() {
            let field = format!("anycast.peers[{i}]");
            match existing.iter().find(|p| p.address == peer.address) {
                // An external speaker that already has this neighbor: kept as it is
                // (a session is not reset on an agent restart).
                Some(known) if known.asn == peer.asn => continue,
                Some(_) => speaker
                    .delete_peer(peer.address)
                    .await
                    .map_err(|e| StartError::new(field.clone(), &e))?,
                None => {}
            }
            speaker
                .add_peer(peer)
                .await
                .map_err(|e| StartError::new(field, &e))?;
        }
        speaker
            .withdraw_all()
            .await
            .map_err(|e| StartError::new("anycast.speaker", &e))?;
        tracing::info!(
            api = %speaker.endpoint(),
            managed = self.child.is_some(),
            pid = self.child.as_ref().and_then(Gobgpd::id),
            asn = settings.global.asn,
            router_id = %settings.global.router_id,
            peers = settings.peers.len(),
            "BGP speaker configured"
        );
        Ok(())
    }

    pub(crate) async fn announce(&mut self, route: &Route) -> Result<(), SpeakerError> {
        self.speaker.announce(route).await
    }

    pub(crate) async fn withdraw(&mut self, route: &Route) -> Result<(), SpeakerError> {
        self.speaker.withdraw(route).await
    }

    /// Whether the speaker answers, and how many of its sessions are up. A managed
    /// gobgpd that exited is an error saying how.
    pub(crate) async fn poll(&mut self) -> Result<PeerCounts, String> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_exit_status()
        {
            return Err(exited_reason(child, &status));
        }
        let peers = self.speaker.peers().await.map_err(|e| e.to_string())?;
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let established: Vec<IpAddr> = peers
            .iter()
            .filter(|p| p.state == SessionState::Established)
            .map(|p| p.address)
            .collect();
        let mut sent = BTreeSet::new();
        for peer in &established {
            let prefixes = self
                .speaker
                .advertised(*peer)
                .await
                .map_err(|e| e.to_string())?;
            sent.extend(
                prefixes
                    .into_iter()
                    .filter(|p| p.prefix_len() == p.max_prefix_len())
                    .map(|p| p.addr()),
            );
        }
        Ok(PeerCounts {
            peers: count(peers.len()),
            established: count(established.len()),
            sent,
        })
    }

    /// Completes when a managed gobgpd exits, with how; never for an external speaker.
    pub(crate) async fn exited(&mut self) -> String {
        match self.child.as_mut() {
            Some(child) => {
                let status = child.wait_exit_status().await;
                exited_reason(child, &status)
            }
            None => std::future::pending().await,
        }
    }

    /// Stops a managed gobgpd (its sessions close); an external speaker keeps running,
    /// with whatever was withdrawn withdrawn.
    pub(crate) async fn close(self) {
        if let Some(child) = self.child {
            child.stop().await;
        }
    }
}
