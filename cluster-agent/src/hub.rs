//! The agent's side of the agent protocol: one outbound gRPC stream to the hub
//! (`AgentGateway.Connect`), kept up for the agent's whole life.
//!
//! Entry points: [`Agent`] ([`Agent::new`], [`Agent::applied`] for readiness,
//! [`Agent::run`]) and the shorthand [`run`]. [`HubSettings`] says where the hub is (one
//! address per federation-apiserver replica) and who the agent is
//! ([`HubSettings::from_config`]); [`Backoff`] paces reconnects.
//!
//! # Guarantees
//!
//! - Fail static: at start the persisted plan ([`crate::state`]) is applied before the
//!   hub is contacted, so the agent serves its last plan with the hub unreachable, also
//!   after a restart. Nothing is ever un-applied because the hub is gone.
//! - Every applied plan is persisted before it is acknowledged (`Ack`, or `Nack` with
//!   the rules that could not be applied while the rest is served, and with the
//!   driver's [`Driver::plan_error`] for what else it could not apply: the pools' VRRP).
//! - A `Delta` is applied only on top of the plan it was computed from (`base_version`
//!   equal to the applied version, and the result's digest equal to the hub's when the
//!   hub sends one); otherwise the agent drops the stream and reconnects, and its
//!   `Hello` (still carrying the old version) makes the hub send a snapshot.
//! - The hub's `Welcome` names the cluster's provider; a driver whose capabilities
//!   follow it (the kubernetes driver's `auto` profile) makes the agent reconnect at
//!   once, so the hub always judges rules by what the driver really serves.
//! - Heartbeats are sent by their own task, so a slow apply does not cost the lease.
//! - Reports go out right after every apply, when the driver signals a change (at most
//!   one per [`REPORT_COALESCE`]), when a hub welcomes the agent, and at least every
//!   `reportIntervalMs`.
//! - Several hub addresses (replicas of the federation-apiserver on one store) are used
//!   round robin, starting at a random one so that agents spread over the replicas. The
//!   agent holds one session; when it fails, the stream ends or connecting fails, the
//!   next address is tried at once: a failed address is not tried again before every
//!   other one was. Backoff applies per full round, not per address, so a replica going
//!   away costs at most one connect attempt before the next replica (a killed one resets
//!   its connections; a silent one is found by HTTP/2 keepalive within
//!   [`KEEPALIVE_INTERVAL`] + [`KEEPALIVE_TIMEOUT`]). Versions derive from the store
//!   revision, the same on every replica, so the `Hello` of the new session (the applied
//!   version and digest) lets a replica whose plan is current send nothing.
//! - A plan is never applied twice: a `Snapshot` of the plan the agent already serves
//!   (same digest and plan; a new version is only recorded) is acknowledged without
//!   calling the driver.
//! - Reconnects use full-jitter exponential backoff ([`BackoffPolicy`]) between rounds;
//!   a refused `Hello` (`Unauthenticated`, `PermissionDenied`) is logged at error level
//!   with the hub's message and retried on the same backoff with a higher cap.
//! - Every switch of address is logged with the address in the `hub` field.
//! - With `joinTokenFile` the agent authenticates by client certificate (mTLS; see
//!   [`crate::identity`]): without a usable certificate it joins first (`Join`: a fresh
//!   key, a CSR and the join token, sent at most once per join token); while connected
//!   it renews the certificate (`Renew`, over the same connection, authenticated by the
//!   current certificate) at a random point between 70 and 80 % of its lifetime; the
//!   new one is used from the next connection on. An expired or refused certificate
//!   with no unused join token is logged at error level, saying to issue a new one.
//!
//! What does not belong here: serving traffic (drivers), the config file
//! ([`crate::config`]), the admin endpoint.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fedingress_api::plan::{AgentReport, ClusterPlan, RuleError};
use fedingress_proto::convert::{agent_to_pb, hub_from_pb};
use fedingress_proto::pb::agent_gateway_client::AgentGatewayClient;
use fedingress_proto::{AgentToHub, Hello, HubToAgent, pb};
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use crate::config::{Config, MemberConfig};
use crate::driver::Driver;
use crate::identity::{
    ClientIdentity, IdentityFiles, RENEW_FROM, RENEW_TO, new_key_and_csr, token_id,
};
use crate::load::CpuMeter;
use crate::state::{PersistedPlan, PlanStore, error_chain};

/// At most one report per this long when the driver signals changes in a burst.
pub const REPORT_COALESCE: Duration = Duration::from_millis(50);

/// Heartbeat interval until the hub's `Welcome` says otherwise (the design's default).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(2);

/// How long connecting to the hub (TCP, TLS and the HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 keepalive: a PING goes out when the hub has sent nothing for this long. A hub
/// that stops answering (paused, partitioned) is detected within
/// `KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT` (4 s), so the agent is on another replica
/// within 5 s of its replica's death. A killed hub needs no PING: its kernel closes
/// the connection, and the stream fails at once.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// How long a keepalive PING may go unanswered before the connection is given up.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Messages queued towards the hub before senders wait.
const OUTBOUND_QUEUE: usize = 64;

/// How long the hub may take to answer `Connect` (it reads the Hello first, and gives
/// an agent 10 s to send it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// How soon a failed certificate renewal is tried again.
const RENEW_RETRY: Duration = Duration::from_secs(10);

/// Stand-in for "never" where a configured interval does not fit an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);
/// On shutdown, how long an open session may take to say goodbye: the driver's
/// [`Driver::begin_shutdown`] (anycast: up to 10 s for the speaker to confirm the
/// withdrawal), the last report, and the hub closing the stream after reading it.
const FAREWELL: Duration = Duration::from_secs(15);
/// The last of it: how long the agent waits for the hub to close the stream once the
/// last report is sent.
const FAREWELL_FLUSH: Duration = Duration::from_secs(2);

/// Where the hub is, who this agent is, and how it paces itself.
#[derive(Clone, Debug)]
pub struct HubSettings {
    /// The hub's agent gateway, one address per federation-apiserver replica:
    /// `https://host:port` or `http://host:port`. At least one.
    pub addresses: Vec<String>,
    /// Index into `addresses` of the address tried first; `None` (what a config gives)
    /// picks one at random, so that a fleet of agents spreads over the replicas.
    pub first_address: Option<usize>,
    /// PEM CA bundle every hub address's certificate must chain to (https only); each
    /// address's host is its TLS server name. Without it the roots compiled into tonic
    /// are used (none unless a `tls-*-roots` feature is on).
    pub ca_file: Option<PathBuf>,
    /// This cluster's name at the hub.
    pub cluster: String,
    /// Which member of the cluster this agent is: its name goes into Hello, Join and
    /// Renew (the client certificate names it), its labels and address into Hello.
    pub member: MemberConfig,
    /// File holding the agent token; read (and trimmed) at every connect, so a rotated
    /// token is picked up without a restart. Unused with `join_token_file`.
    pub token_file: PathBuf,
    /// File holding a join token: authenticate by client certificate (kept in
    /// `state_dir`) instead of the token; see [`crate::identity`].
    pub join_token_file: Option<PathBuf>,
    /// Where the client certificate and its key are kept.
    pub state_dir: PathBuf,
    /// Where the applied plan is persisted (`<stateDir>/plan.json`).
    pub plan_file: PathBuf,
    /// A report is sent at least this often.
    pub report_interval: Duration,
    /// Reconnect pacing.
    pub backoff: BackoffPolicy,
}

/// Why the hub cannot be reached with these settings.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("no hub address")]
    NoAddress,
    #[error("invalid hub address {address:?}")]
    Address {
        address: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("reading hub CA file {}", path.display())]
    ReadCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("hub CA file {} holds no PEM certificate", path.display())]
    EmptyCa { path: PathBuf },
    #[error("configuring TLS for the hub")]
    Tls(#[source] tonic::transport::Error),
    #[error("reading token file {}", path.display())]
    ReadToken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("token file {} is empty", path.display())]
    EmptyToken { path: PathBuf },
}

impl HubSettings {
    /// The settings a config file gives (paths as [`Config::load`] resolved them).
    pub fn from_config(config: &Config) -> Self {
        HubSettings {
            addresses: config.hub.address_list(),
            first_address: None,
            ca_file: config.hub.ca_file.clone(),
            cluster: config.cluster.clone(),
            member: config.member.clone(),
            token_file: config.token_file.clone(),
            join_token_file: config.join_token_file.clone(),
            state_dir: config.state_dir.clone(),
            plan_file: config.plan_file(),
            report_interval: config.report_interval(),
            backoff: BackoffPolicy::default(),
        }
    }

    /// The gRPC endpoints of every hub address (see [`HubSettings::endpoint`]). Reads the
    /// CA file, so `main` calls it once before binding anything to refuse a bad config
    /// early.
    ///
    /// # Errors
    /// No address, the first bad address, an unreadable CA file or one without
    /// certificates.
    pub fn endpoints(&self) -> Result<Vec<Endpoint>, HubError> {
        if self.addresses.is_empty() {
            return Err(HubError::NoAddress);
        }
        self.addresses.iter().map(|a| self.endpoint(a)).collect()
    }

    /// The gRPC endpoint of one hub address: TLS with the CA file and the address's
    /// host as server name for `https://`, plain HTTP/2 for `http://`.
    ///
    /// # Errors
    /// An address that is not a URI, an unreadable CA file or one without certificates.
    pub fn endpoint(&self, address: &str) -> Result<Endpoint, HubError> {
        self.endpoint_as(address, None)
    }

    /// [`HubSettings::endpoint`], presenting `identity` as TLS client certificate.
    ///
    /// # Errors
    /// As [`HubSettings::endpoint`].
    pub fn endpoint_as(
        &self,
        address: &str,
        identity: Option<&ClientIdentity>,
    ) -> Result<Endpoint, HubError> {
        let address_error = |source| HubError::Address {
            address: address.to_owned(),
            source,
        };
        let endpoint = Endpoint::from_shared(address.to_owned())
            .map_err(address_error)?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        if endpoint.uri().scheme_str() != Some("https") {
            return Ok(endpoint);
        }
        let host = endpoint.uri().host().unwrap_or_default();
        // `[::1]` in a URI is the IP address `::1` to TLS.
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_owned();
        let mut tls = ClientTlsConfig::new().domain_name(host);
        match &self.ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|source| HubError::ReadCa {
                    path: path.clone(),
                    source,
                })?;
                // tonic skips unparsable certificates silently: insist on one.
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(HubError::EmptyCa { path: path.clone() });
                }
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            None => tls = tls.with_enabled_roots(),
        }
        if let Some(identity) = identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(
                &identity.cert_pem,
                &identity.key_pem,
            ));
        }
        endpoint.tls_config(tls).map_err(HubError::Tls)
    }

    /// The agent token: the token file's content, trimmed.
    ///
    /// # Errors
    /// The file cannot be read or holds only white space.
    pub fn token(&self) -> Result<String, HubError> {
        let text =
            std::fs::read_to_string(&self.token_file).map_err(|source| HubError::ReadToken {
                path: self.token_file.clone(),
                source,
            })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(HubError::EmptyToken {
                path: self.token_file.clone(),
            });
        }
        Ok(token.to_owned())
    }
}

/// How reconnects are paced: full-jitter exponential backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Ceiling of the first delay.
    pub initial: Duration,
    /// Largest ceiling after a failed or ended connection.
    pub max: Duration,
    /// Largest ceiling after the hub refused the agent's credentials.
    pub refused_max: Duration,
    /// A connection that lasted longer than this resets the backoff.
    pub reset_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            refused_max: Duration::from_secs(30),
            reset_after: Duration::from_secs(10),
        }
    }
}

/// Full-jitter exponential backoff: the n-th delay (from 0) is uniform in
/// `[0, min(cap, initial * 2^n)]`.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(initial: Duration) -> Self {
        Backoff {
            initial,
            attempt: 0,
        }
    }

    /// The ceiling of the next delay under `cap`.
    pub fn ceiling(&self, cap: Duration) -> Duration {
        let factor = 1u32.checked_shl(self.attempt).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(cap)
    }

    /// The next delay: uniform in `[0, ceiling(cap)]`; the ceiling then doubles.
    pub fn next_delay(&mut self, cap: Duration, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(cap);
        self.attempt = self.attempt.saturating_add(1).min(31);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=nanos))
    }

    /// Back to the first delay.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Which hub address the agent tries next, and after how long: round robin over the
/// addresses, backoff once per full round. Pure (the loop in [`Agent::run`] tells it how
/// each session ended), so its decisions are unit-tested.
#[derive(Clone, Debug)]
struct Rotation {
    len: usize,
    current: usize,
    /// Sessions ended since the round began (a session that lasted begins a new one).
    ended_in_round: usize,
    /// A Hello of this round was refused: the round's delay gets the higher cap.
    refused_in_round: bool,
    backoff: Backoff,
}

impl Rotation {
    /// Over `len` addresses (at least one is assumed), `first` tried first.
    fn new(len: usize, first: usize, initial: Duration) -> Self {
        let len = len.max(1);
        Rotation {
            len,
            current: first % len,
            ended_in_round: 0,
            refused_in_round: false,
            backoff: Backoff::new(initial),
        }
    }

    /// The address to connect to.
    fn current(&self) -> usize {
        self.current
    }

    /// The session on the current address ended; `lasted` says it was connected for
    /// longer than [`BackoffPolicy::reset_after`]. Moves to the next address and says
    /// how long to wait before connecting to it: nothing within a round, a backoff
    /// delay once every address of the round has failed.
    fn ended(
        &mut self,
        lasted: bool,
        refused: bool,
        policy: &BackoffPolicy,
        rng: &mut impl Rng,
    ) -> Duration {
        if lasted {
            // Earlier failures are stale: the address that just went away is the
            // first of a new round, and the backoff starts over.
            self.backoff.reset();
            self.ended_in_round = 0;
            self.refused_in_round = false;
        }
        self.ended_in_round += 1;
        self.refused_in_round |= refused;
        self.current = (self.current + 1) % self.len;
        if self.ended_in_round < self.len {
            return Duration::ZERO;
        }
        let cap = if self.refused_in_round {
            policy.refused_max
        } else {
            policy.max
        };
        self.ended_in_round = 0;
        self.refused_in_round = false;
        self.backoff.next_delay(cap, rng)
    }
}

/// The plan the agent serves now.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub version: u64,
    pub digest: String,
    /// Rules of the plan the driver could not apply.
    pub rule_errors: Vec<RuleError>,
}

/// The hub connection loop of one agent.
pub struct Agent {
    settings: HubSettings,
    driver: Arc<dyn Driver>,
    store: PlanStore,
    applied: watch::Sender<Option<Applied>>,
    /// The plan applied last, with its version and digest.
    current: Option<PersistedPlan>,
    /// Which stored client certificate the next connection presents.
    certificate: Presented,
    /// The CPU of this process and of the host between two reports.
    cpu: CpuMeter,
}

/// Which stored client certificate the agent presents (kubelet keeps its old
/// certificate until the new one works).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Presented {
    /// The newest one.
    Current,
    /// The hub refused the newest one: the one before it (kept since the renewal).
    Previous,
    /// Both refused: join again when a new join token is there.
    Neither,
}

/// How the agent authenticates one connection.
enum Credential {
    Token(String),
    Certificate(ClientIdentity, Presented),
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// When (as an `Instant`) to renew `identity`: a random point in 70-80 % of its life.
fn renewal_deadline(identity: &ClientIdentity) -> Instant {
    let at = identity
        .meta
        .renew_at(rand::rng().random_range(RENEW_FROM..RENEW_TO));
    let wait = u64::try_from(at - unix_now()).unwrap_or(0);
    Instant::now() + Duration::from_secs(wait)
}

/// How one connection ended.
enum End {
    /// The hub refused the Hello (or later the credentials).
    Refused(tonic::Status),
    /// Connecting failed, the stream broke, or the hub sent garbage.
    Failed(String),
    /// The hub ended the stream.
    Closed,
    /// A delta did not fit the applied plan: reconnect for a snapshot.
    Resync,
    /// The driver's capabilities changed: reconnect at once with a new Hello.
    Renegotiate,
    /// Shutdown: the last report was sent and the stream closed.
    Stopped,
}

impl Agent {
    pub fn new(settings: HubSettings, driver: Arc<dyn Driver>) -> Self {
        let store = PlanStore::new(settings.plan_file.clone());
        Agent {
            settings,
            driver,
            store,
            applied: watch::Sender::new(None),
            current: None,
            certificate: Presented::Current,
            cpu: CpuMeter::default(),
        }
    }

    /// What the agent serves: `None` until a plan (persisted or from the hub) is
    /// applied, then the latest one. The admin endpoint's `/readyz` watches this.
    pub fn applied(&self) -> watch::Receiver<Option<Applied>> {
        self.applied.subscribe()
    }

    /// Applies the persisted plan, then connects to the hub and follows it until
    /// `shutdown` completes; reconnects forever. Does not shut the driver down (the
    /// caller owns it and does that after this returns).
    ///
    /// # Guarantees
    /// When `shutdown` completes during an open session, the session says goodbye
    /// before this returns (at most [`FAREWELL`]): [`Driver::begin_shutdown`] (anycast
    /// routes withdrawn), a last report, and the stream closed only once the hub has
    /// read it (the hub closes its side after the agent's last message, or
    /// [`FAREWELL_FLUSH`] passes).
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let (stopping, stop) = watch::channel(false);
        let cluster = self.settings.cluster.clone();
        let follow = self.follow(stop);
        tokio::pin!(follow, shutdown);
        tokio::select! {
            biased;
            () = &mut follow => return,
            () = &mut shutdown => {}
        }
        stopping.send_replace(true);
        if tokio::time::timeout(FAREWELL, follow).await.is_err() {
            tracing::warn!(
                cluster = %cluster,
                waited_ms = FAREWELL.as_millis(),
                "the hub session did not end in time; closing it"
            );
        }
    }

    /// `run` until `stop` turns true: returns at once outside a session, and after the
    /// session's goodbye inside one.
    async fn follow(&mut self, mut stop: watch::Receiver<bool>) {
        tokio::select! {
            biased;
            () = stopped(&mut stop) => return,
            () = self.apply_persisted() => {}
        }
        let policy = self.settings.backoff;
        let addresses = self.settings.addresses.clone();
        let first = self
            .settings
            .first_address
            .unwrap_or_else(|| rand::rng().random_range(0..addresses.len().max(1)));
        let mut rotation = Rotation::new(addresses.len(), first, policy.initial);
        loop {
            let hub = addresses.get(rotation.current()).map_or("", String::as_str);
            let mut connected_at = None;
            let connected = Arc::new(AtomicBool::new(false));
            // Stopping cancels a session still connecting at once; a connected one says
            // goodbye itself (see `run`).
            let cancel = {
                let mut stop = stop.clone();
                let connected = Arc::clone(&connected);
                async move {
                    stopped(&mut stop).await;
                    if connected.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                }
            };
            let end = tokio::select! {
                biased;
                end = self.session(hub, &mut connected_at, &connected, stop.clone()) => end,
                () = cancel => return,
            };
            let lasted = connected_at.is_some_and(|at: Instant| at.elapsed() > policy.reset_after);
            let cluster = &self.settings.cluster;
            let version = self.applied_version();
            let refused = match &end {
                End::Refused(status) => {
                    tracing::error!(
                        cluster = %cluster,
                        hub = %hub,
                        version,
                        code = ?status.code(),
                        error = status.message(),
                        "agent credentials refused (by the hub, or no usable one left): the error says which and what to do"
                    );
                    true
                }
                End::Failed(error) => {
                    tracing::warn!(cluster = %cluster, hub = %hub, version, error = %error, "hub connection failed");
                    false
                }
                End::Closed => {
                    tracing::info!(cluster = %cluster, hub = %hub, version, "hub closed the stream");
                    false
                }
                End::Resync => false,
                // Same hub, at once: only the Hello changes.
                End::Renegotiate => continue,
                End::Stopped => return,
            };
            let delay = rotation.ended(lasted, refused, &policy, &mut rand::rng());
            let next = addresses.get(rotation.current()).map_or("", String::as_str);
            if next == hub {
                tracing::debug!(cluster = %cluster, hub = %hub, delay_ms = delay.as_millis(), "reconnecting");
            } else {
                tracing::info!(
                    cluster = %cluster,
                    hub = %next,
                    previous = %hub,
                    delay_ms = delay.as_millis(),
                    "switching to the next hub address"
                );
            }
            if delay.is_zero() {
                continue;
            }
            tokio::select! {
                biased;
                () = stopped(&mut stop) => return,
                () = tokio::time::sleep(delay) => {}
            }
            if *stop.borrow_and_update() {
                return;
            }
        }
    }

    fn applied_version(&self) -> u64 {
        self.current.as_ref().map_or(0, |c| c.version)
    }

    /// Fail static: serve the plan persisted by the previous run, if any.
    async fn apply_persisted(&mut self) {
        let store = self.store.clone();
        let loaded = tokio::task::spawn_blocking(move || store.load_or_empty())
            .await
            .unwrap_or_default();
        let Some(persisted) = loaded else {
            tracing::info!(cluster = %self.settings.cluster, "no persisted plan");
            return;
        };
        let rule_errors = self.driver.apply(&persisted.plan).await;
        tracing::info!(
            cluster = %self.settings.cluster,
            version = persisted.version,
            rule_errors = rule_errors.len(),
            "persisted plan applied"
        );
        self.applied.send_replace(Some(Applied {
            version: persisted.version,
            digest: persisted.digest.clone(),
            rule_errors,
        }));
        self.current = Some(persisted);
    }

    /// The rule errors of the applied plan when `plan` (with the hub's `digest`) is the
    /// plan the agent serves already; `None` when it must be applied.
    fn already_serving(&self, digest: &str, plan: &ClusterPlan) -> Option<Vec<RuleError>> {
        let current = self.current.as_ref()?;
        if current.digest != digest || current.plan != *plan {
            return None;
        }
        let applied = self.applied.borrow();
        Some(
            applied
                .as_ref()
                .map(|a| a.rule_errors.clone())
                .unwrap_or_default(),
        )
    }

    /// Records `version` for the plan already served (a replica may number the same
    /// plan differently): persisted and published, the driver is not called.
    async fn adopt_version(&mut self, version: u64) {
        let Some(current) = self.current.as_mut() else {
            return;
        };
        if current.version == version {
            return;
        }
        current.version = version;
        let copy = current.clone();
        self.persist(copy).await;
        self.applied.send_modify(|applied| {
            if let Some(applied) = applied {
                applied.version = version;
            }
        });
    }

    /// Writes the applied plan to the state dir (errors are logged: the agent serves on).
    async fn persist(&self, persisted: PersistedPlan) {
        let cluster = &self.settings.cluster;
        let version = persisted.version;
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || store.save(&persisted)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(
                cluster = %cluster,
                version,
                error = %error_chain(&error),
                "persisting the applied plan failed; a restart would serve an older plan"
            ),
            Err(error) => tracing::error!(
                cluster = %cluster,
                version,
                error = %error,
                "persisting the applied plan failed"
            ),
        }
    }

    /// Applies `plan`, persists it, publishes it; returns the rule errors.
    async fn apply(&mut self, version: u64, digest: String, plan: ClusterPlan) -> Vec<RuleError> {
        let cluster = &self.settings.cluster;
        let rule_errors = self.driver.apply(&plan).await;
        let persisted = PersistedPlan {
            version,
            digest,
            plan,
        };
        self.persist(persisted.clone()).await;
        if rule_errors.is_empty() {
            tracing::info!(cluster = %cluster, version, "plan applied");
        } else {
            tracing::warn!(
                cluster = %cluster,
                version,
                rule_errors = rule_errors.len(),
                error = %rule_errors.first().map(|e| format!("{} rule {}: {}", e.ingress, e.rule, e.message)).unwrap_or_default(),
                "plan applied except for some rules"
            );
        }
        self.applied.send_replace(Some(Applied {
            version,
            digest: persisted.digest.clone(),
            rule_errors: rule_errors.clone(),
        }));
        self.current = Some(persisted);
        rule_errors
    }

    /// One connection to the hub at `hub`: Hello, then follow the hub until the stream
    /// ends.
    async fn session(
        &mut self,
        hub: &str,
        connected_at: &mut Option<Instant>,
        connected: &AtomicBool,
        mut stop: watch::Receiver<bool>,
    ) -> End {
        let cluster = self.settings.cluster.clone();
        if hub.is_empty() {
            return End::Failed(error_chain(&HubError::NoAddress));
        }
        let credential = match self.credential(hub).await {
            Ok(credential) => credential,
            Err(end) => return end,
        };
        let (identity, presented, token) = match credential {
            Credential::Token(token) => (None, None, token),
            Credential::Certificate(identity, presented) => {
                (Some(identity), Some(presented), String::new())
            }
        };
        let endpoint = match self.settings.endpoint_as(hub, identity.as_ref()) {
            Ok(endpoint) => endpoint,
            Err(error) => return End::Failed(error_chain(&error)),
        };
        // tonic bounds only the TCP connect; a hub that accepts and then says nothing
        // (paused) would hold the TLS or HTTP/2 handshake forever.
        let channel = match tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => return End::Failed(error_chain(&error)),
            Err(_) => {
                return End::Failed(format!("connecting took longer than {CONNECT_TIMEOUT:?}"));
            }
        };
        let (tx, rx) = mpsc::channel::<pb::AgentMessage>(OUTBOUND_QUEUE);
        let hello = AgentToHub::Hello(Hello {
            cluster: cluster.clone(),
            token,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            driver: self.driver.name().to_owned(),
            capabilities: self.driver.capabilities(),
            applied_version: self.applied_version(),
            applied_digest: self
                .current
                .as_ref()
                .map(|c| c.digest.clone())
                .unwrap_or_default(),
            member: self.settings.member.name().to_owned(),
            member_labels: self.settings.member.labels.clone(),
            member_address: self.settings.member.address,
        });
        if tx.send(agent_to_pb(&hello)).await.is_err() {
            return End::Failed("outbound stream closed".to_owned());
        }
        let mut client = AgentGatewayClient::new(channel);
        let mut renew_client = client.clone();
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, client.connect(ReceiverStream::new(rx)));
        let mut inbound = match answer.await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => {
                if status.code() == tonic::Code::Unauthenticated {
                    self.certificate = match presented {
                        Some(Presented::Current) => Presented::Previous,
                        Some(_) => Presented::Neither,
                        None => self.certificate,
                    };
                }
                return status_end(status);
            }
            Err(_) => return End::Failed(format!("hub did not answer within {ANSWER_TIMEOUT:?}")),
        };
        *connected_at = Some(Instant::now());
        connected.store(true, Ordering::SeqCst);
        tracing::info!(
            cluster = %cluster,
            version = self.applied_version(),
            hub = %hub,
            auth = if identity.is_some() { "certificate" } else { "token" },
            "connected to the hub"
        );
        let mut renew_at = identity.as_ref().map(renewal_deadline);
        if presented == Some(Presented::Current) {
            // The newest certificate works: the one before it is no longer needed.
            IdentityFiles::new(&self.settings.state_dir).drop_previous();
        }

        let (period_tx, period_rx) = watch::channel(DEFAULT_HEARTBEAT);
        let heartbeat_task = AbortOnDrop(tokio::spawn(heartbeats(tx.clone(), period_rx)));
        let mut changes = self.driver.subscribe();
        changes.borrow_and_update();
        let mut watching = true;
        let mut report_pending = false;
        let mut last_report = Instant::now();

        loop {
            let periodic = last_report
                .checked_add(self.settings.report_interval)
                .unwrap_or_else(|| last_report + FAR_FUTURE);
            let coalesced = last_report + REPORT_COALESCE;
            let send_report = tokio::select! {
                biased;
                () = stopped(&mut stop) => {
                    drop(heartbeat_task);
                    return self.farewell(hub, tx, inbound).await;
                }
                message = inbound.message() => {
                    let message = match message {
                        Ok(Some(message)) => message,
                        Ok(None) => return End::Closed,
                        Err(status) => return status_end(status),
                    };
                    let message = match hub_from_pb(message) {
                        Ok(message) => message,
                        Err(error) => {
                            return End::Failed(format!("hub sent an invalid message: {error}"));
                        }
                    };
                    match self.handle(message, &tx, &period_tx).await {
                        Ok(report) => report,
                        Err(end) => return end,
                    }
                }
                changed = changes.changed(), if watching => {
                    match changed {
                        Ok(()) => report_pending = true,
                        Err(_) => watching = false,
                    }
                    false
                }
                () = tokio::time::sleep_until(coalesced), if report_pending => true,
                () = tokio::time::sleep_until(periodic) => true,
                () = tokio::time::sleep_until(renew_at.unwrap_or_else(Instant::now)), if renew_at.is_some() => {
                    renew_at = Some(match self.renew(&mut renew_client).await {
                        Ok(renewed) => renewal_deadline(&renewed),
                        Err(error) => {
                            tracing::warn!(cluster = %cluster, hub = %hub, error = %error, "renewing the client certificate failed; retrying in 10 s");
                            Instant::now() + RENEW_RETRY
                        }
                    });
                    false
                }
            };
            if send_report {
                changes.borrow_and_update();
                report_pending = false;
                last_report = Instant::now();
                if let Err(end) = send(&tx, AgentToHub::Report(self.report())).await {
                    return end;
                }
            }
        }
    }

    /// The driver's report of the applied plan, with the CPU of this process and of the
    /// host since the report before (whichever the driver).
    fn report(&self) -> AgentReport {
        let mut report = match self.current.as_ref().map(|c| &c.plan) {
            Some(plan) => self.driver.report(plan),
            None => self.driver.report(&ClusterPlan::default()),
        };
        let cpu = self.cpu.sample();
        report.process_cpu = cpu.process;
        report.host_cpu = cpu.host;
        report
    }

    /// Shutdown during a session: [`Driver::begin_shutdown`], the last report, then the
    /// end of the agent's stream; returns once the hub has closed its side (it reads
    /// every message before it does), or after [`FAREWELL_FLUSH`].
    async fn farewell(
        &mut self,
        hub: &str,
        tx: mpsc::Sender<pb::AgentMessage>,
        mut inbound: tonic::Streaming<pb::HubMessage>,
    ) -> End {
        let cluster = self.settings.cluster.clone();
        self.driver.begin_shutdown().await;
        if send(&tx, AgentToHub::Report(self.report())).await.is_err() {
            return End::Stopped;
        }
        // The last sender: the request stream ends after the report.
        drop(tx);
        let started = Instant::now();
        let closed = tokio::time::timeout(FAREWELL_FLUSH, async {
            while let Ok(Some(_)) = inbound.message().await {}
        })
        .await;
        match closed {
            Ok(()) => tracing::info!(
                cluster = %cluster,
                hub = %hub,
                waited_ms = started.elapsed().as_millis(),
                "last report delivered; hub session closed"
            ),
            Err(_) => tracing::warn!(
                cluster = %cluster,
                hub = %hub,
                waited_ms = FAREWELL_FLUSH.as_millis(),
                "the hub did not close the session after the last report; closing it"
            ),
        }
        End::Stopped
    }

    /// How to authenticate the next connection: the token (without `joinTokenFile`), the
    /// stored client certificate, or a new one obtained with the join token.
    async fn credential(&mut self, hub: &str) -> Result<Credential, End> {
        let Some(join_file) = self.settings.join_token_file.clone() else {
            return self
                .settings
                .token()
                .map(Credential::Token)
                .map_err(|error| End::Failed(error_chain(&error)));
        };
        let files = IdentityFiles::new(&self.settings.state_dir);
        let stored = files.load().map_err(End::Failed)?;
        let now = unix_now();
        if self.certificate == Presented::Previous {
            match files.load_previous() {
                Some(previous) if !previous.meta.expired(now) => {
                    tracing::warn!(cluster = %self.settings.cluster, hub = %hub, fingerprint = %previous.meta.fingerprint, "the renewed client certificate was refused; presenting the previous one");
                    return Ok(Credential::Certificate(previous, Presented::Previous));
                }
                _ => self.certificate = Presented::Neither,
            }
        }
        let problem = match &stored {
            Some(identity)
                if !identity.meta.expired(now) && self.certificate == Presented::Current =>
            {
                return Ok(Credential::Certificate(
                    identity.clone(),
                    Presented::Current,
                ));
            }
            Some(identity) if identity.meta.expired(now) => format!(
                "the client certificate expired (notAfter {} Unix seconds) without renewal",
                identity.meta.not_after
            ),
            Some(_) => "the hub refused the client certificate".to_owned(),
            None => "no client certificate yet".to_owned(),
        };
        let join_token = std::fs::read_to_string(&join_file)
            .map(|text| text.trim().to_owned())
            .unwrap_or_default();
        let id = token_id(&join_token);
        if id.is_empty() || (stored.is_some() && id == files.used_join_token()) {
            return Err(End::Refused(tonic::Status::unauthenticated(format!(
                "{problem}, and {} holds no unused join token: issue one (fedctl token create CLUSTER --join) and write it there",
                join_file.display()
            ))));
        }
        tracing::info!(cluster = %self.settings.cluster, hub = %hub, reason = %problem, "joining with the join token");
        let identity = self.join(hub, &join_token, &files).await?;
        files.drop_previous();
        self.certificate = Presented::Current;
        Ok(Credential::Certificate(identity, Presented::Current))
    }

    /// `Join`: a fresh key, a CSR and the join token buy a client certificate.
    async fn join(
        &self,
        hub: &str,
        join_token: &str,
        files: &IdentityFiles,
    ) -> Result<ClientIdentity, End> {
        let endpoint = self
            .settings
            .endpoint(hub)
            .map_err(|error| End::Failed(error_chain(&error)))?;
        let channel = match tokio::time::timeout(CONNECT_TIMEOUT, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => return Err(End::Failed(error_chain(&error))),
            Err(_) => {
                return Err(End::Failed(format!(
                    "connecting took longer than {CONNECT_TIMEOUT:?}"
                )));
            }
        };
        let (key_pem, csr_pem) = new_key_and_csr(&self.settings.cluster).map_err(End::Failed)?;
        let request = fedingress_proto::JoinRequest {
            cluster: self.settings.cluster.clone(),
            join_token: join_token.to_owned(),
            csr_pem,
            member: self.settings.member.name().to_owned(),
        };
        let mut client = AgentGatewayClient::new(channel);
        let answer = tokio::time::timeout(
            ANSWER_TIMEOUT,
            client.join(fedingress_proto::convert::join_to_pb(&request)),
        )
        .await
        .map_err(|_| End::Failed(format!("Join not answered within {ANSWER_TIMEOUT:?}")))?;
        let issued = match answer {
            Ok(response) => fedingress_proto::convert::issued_from_pb(response.into_inner())
                .map_err(|e| End::Failed(e.to_string()))?,
            Err(status) => return Err(status_end(status)),
        };
        let identity = files
            .store(&key_pem, &issued, unix_now(), token_id(join_token))
            .map_err(End::Failed)?;
        tracing::info!(
            cluster = %self.settings.cluster,
            fingerprint = %issued.fingerprint,
            not_after = issued.not_after_unix,
            cert = %files.cert_path().display(),
            "joined: client certificate stored"
        );
        Ok(identity)
    }

    /// `Renew` over the current connection: a certificate for a fresh key, stored for
    /// the next connection.
    async fn renew(
        &mut self,
        client: &mut AgentGatewayClient<tonic::transport::Channel>,
    ) -> Result<ClientIdentity, String> {
        let files = IdentityFiles::new(&self.settings.state_dir);
        let (key_pem, csr_pem) = new_key_and_csr(&self.settings.cluster)?;
        let request = fedingress_proto::RenewRequest {
            cluster: self.settings.cluster.clone(),
            csr_pem,
            member: self.settings.member.name().to_owned(),
        };
        let answer = tokio::time::timeout(
            ANSWER_TIMEOUT,
            client.renew(fedingress_proto::convert::renew_to_pb(&request)),
        )
        .await
        .map_err(|_| format!("Renew not answered within {ANSWER_TIMEOUT:?}"))?
        .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?;
        let issued = fedingress_proto::convert::issued_from_pb(answer.into_inner())
            .map_err(|e| e.to_string())?;
        // Keep the certificate that works until the new one has worked once (when the
        // previous one is in use, it is the one that works).
        if self.certificate == Presented::Current {
            files.keep_previous()?;
        }
        let identity = files.store(&key_pem, &issued, unix_now(), &files.used_join_token())?;
        self.certificate = Presented::Current;
        tracing::info!(
            cluster = %self.settings.cluster,
            fingerprint = %issued.fingerprint,
            not_after = issued.not_after_unix,
            "client certificate renewed; used from the next connection on"
        );
        Ok(identity)
    }

    /// Handles one hub message; `Ok(true)` when a report should follow.
    async fn handle(
        &mut self,
        message: HubToAgent,
        tx: &mpsc::Sender<pb::AgentMessage>,
        heartbeat_period: &watch::Sender<Duration>,
    ) -> Result<bool, End> {
        let cluster = self.settings.cluster.clone();
        match message {
            HubToAgent::Welcome {
                heartbeat_interval_ms,
                lease_ms,
                provider,
                cordoned,
            } => {
                tracing::info!(
                    cluster = %cluster,
                    version = self.applied_version(),
                    heartbeat_interval_ms,
                    lease_ms,
                    cordoned,
                    provider = provider.map(|p| p.as_str()).unwrap_or(""),
                    "hub welcomed the agent"
                );
                self.driver.set_cordoned(cordoned);
                if heartbeat_interval_ms > 0 {
                    heartbeat_period
                        .send_replace(Duration::from_millis(heartbeat_interval_ms.into()));
                }
                if self.driver.set_provider(provider) {
                    // The Hello told the hub less (or more) than the driver serves now:
                    // say it again. Happens once, the first time the provider is heard.
                    tracing::info!(
                        cluster = %cluster,
                        capabilities = ?self.driver.capabilities(),
                        "capabilities changed with the cluster's provider; reconnecting to announce them"
                    );
                    return Err(End::Renegotiate);
                }
                // Report at once: the hub learns addresses and health on (re)connect
                // even when the plan it has is current and nothing is applied.
                Ok(true)
            }
            HubToAgent::Ping => {
                send(tx, AgentToHub::Heartbeat).await?;
                Ok(false)
            }
            HubToAgent::Snapshot {
                version,
                digest,
                plan,
            } => {
                tracing::debug!(
                    cluster = %cluster,
                    version,
                    ingresses = plan.ingresses.len(),
                    "snapshot"
                );
                let rule_errors = match self.already_serving(&digest, &plan) {
                    Some(rule_errors) => {
                        // Never apply a plan twice: another replica, or the same one
                        // after a restart, may resend what the agent serves.
                        tracing::info!(
                            cluster = %cluster,
                            version,
                            applied_version = self.applied_version(),
                            "snapshot equals the applied plan; acknowledged without applying"
                        );
                        self.adopt_version(version).await;
                        rule_errors
                    }
                    None => self.apply(version, digest, plan).await,
                };
                send(tx, ack(version, self.driver.plan_error(), rule_errors)).await?;
                Ok(true)
            }
            HubToAgent::Delta {
                version,
                digest,
                base_version,
                delta,
            } => {
                let applied_version = self.applied_version();
                if base_version != applied_version {
                    tracing::warn!(
                        cluster = %cluster,
                        version,
                        base_version,
                        applied_version,
                        "delta is not based on the applied plan; reconnecting for a snapshot"
                    );
                    return Err(End::Resync);
                }
                let mut plan = self
                    .current
                    .as_ref()
                    .map(|c| c.plan.clone())
                    .unwrap_or_default();
                plan.apply(&delta);
                if !digest.is_empty() && plan.digest() != digest {
                    tracing::warn!(
                        cluster = %cluster,
                        version,
                        base_version,
                        error = "digest mismatch",
                        "delta does not give the hub's plan; reconnecting for a snapshot"
                    );
                    return Err(End::Resync);
                }
                let rule_errors = self.apply(version, digest, plan).await;
                send(tx, ack(version, self.driver.plan_error(), rule_errors)).await?;
                Ok(true)
            }
        }
    }
}

/// Completes once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Applies the persisted plan, then follows the hub until `shutdown` completes
/// (see [`Agent::run`]).
pub async fn run(
    settings: HubSettings,
    driver: Arc<dyn Driver>,
    shutdown: impl Future<Output = ()>,
) {
    Agent::new(settings, driver).run(shutdown).await;
}

/// `Ack`, or `Nack` with the driver's [`Driver::plan_error`] and the rule errors.
fn ack(version: u64, error: Option<String>, rule_errors: Vec<RuleError>) -> AgentToHub {
    if rule_errors.is_empty() && error.is_none() {
        AgentToHub::Ack { version }
    } else {
        AgentToHub::Nack {
            version,
            error: error.unwrap_or_default(),
            rule_errors,
        }
    }
}

fn status_end(status: tonic::Status) -> End {
    match status.code() {
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => End::Refused(status),
        code => End::Failed(format!("{code:?}: {}", status.message())),
    }
}

async fn send(tx: &mpsc::Sender<pb::AgentMessage>, message: AgentToHub) -> Result<(), End> {
    tx.send(agent_to_pb(&message))
        .await
        .map_err(|_| End::Failed("hub stream closed".to_owned()))
}

/// Sends a heartbeat every period until the stream closes.
async fn heartbeats(tx: mpsc::Sender<pb::AgentMessage>, mut period: watch::Receiver<Duration>) {
    let heartbeat = agent_to_pb(&AgentToHub::Heartbeat);
    let mut every = *period.borrow_and_update();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {
                if tx.send(heartbeat.clone()).await.is_err() {
                    return;
                }
            }
            changed = period.changed() => {
                if changed.is_err() {
                    return;
                }
                every = *period.borrow_and_update();
            }
        }
    }
}

/// Aborts a task when dropped (the heartbeat task of a connection that ended).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn backoff_doubles_to_its_cap_with_full_jitter() {
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let cap = Duration::from_secs(5);
        let ceilings: Vec<u128> = (0..10)
            .map(|_| {
                let c = backoff.ceiling(cap).as_millis();
                backoff.attempt += 1;
                c
            })
            .collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );

        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let mut delays = Vec::new();
        for _ in 0..200 {
            let ceiling = backoff.ceiling(cap);
            let delay = backoff.next_delay(cap, &mut rng);
            assert!(delay <= ceiling, "{delay:?} > {ceiling:?}");
            delays.push(delay);
        }
        // Full jitter: late delays spread over [0, cap], not bunched at the cap.
        let late = &delays[20..];
        assert!(late.iter().any(|d| *d < Duration::from_secs(1)));
        assert!(late.iter().any(|d| *d > Duration::from_secs(4)));
        assert_eq!(backoff.ceiling(cap), cap, "the ceiling stays at the cap");
        assert_eq!(
            backoff.ceiling(Duration::from_secs(30)),
            Duration::from_secs(30),
            "a refused Hello climbs further"
        );
        backoff.reset();
        assert_eq!(backoff.ceiling(cap), Duration::from_millis(100));
    }

    #[test]
    fn backoff_never_overflows() {
        let mut backoff = Backoff::new(Duration::from_secs(1));
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let delay = backoff.next_delay(Duration::MAX, &mut rng);
            assert!(delay <= Duration::from_nanos(u64::MAX));
        }
    }

    fn settings(address: &str, ca: Option<PathBuf>) -> HubSettings {
        HubSettings {
            addresses: vec![address.to_owned()],
            first_address: None,
            ca_file: ca,
            cluster: "eu-west".to_owned(),
            member: MemberConfig::default(),
            token_file: PathBuf::from("token"),
            join_token_file: None,
            state_dir: PathBuf::from("state"),
            plan_file: PathBuf::from("plan.json"),
            report_interval: Duration::from_secs(5),
            backoff: BackoffPolicy::default(),
        }
    }

    #[test]
    fn endpoints_check_the_ca_file() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        settings("http://127.0.0.1:6444", None).endpoints().unwrap();
        settings("https://[::1]:6444", None).endpoints().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = settings("https://hub:1", Some(missing))
            .endpoints()
            .unwrap_err();
        assert!(matches!(err, HubError::ReadCa { .. }), "{err:?}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let err = settings("https://hub:1", Some(junk))
            .endpoints()
            .unwrap_err();
        assert!(matches!(err, HubError::EmptyCa { .. }), "{err:?}");
    }

    #[test]
    fn every_hub_address_is_checked() {
        let mut s = settings("http://a:6444", None);
        s.addresses.push("http://b:6444".to_owned());
        assert_eq!(s.endpoints().unwrap().len(), 2);
        s.addresses.push("http://bad host".to_owned());
        let err = s.endpoints().unwrap_err();
        assert!(
            matches!(&err, HubError::Address { address, .. } if address == "http://bad host"),
            "{err:?}"
        );
        s.addresses.clear();
        assert!(matches!(s.endpoints(), Err(HubError::NoAddress)));
    }

    /// Delays the rotation asks for over `outcomes` (`(lasted, refused)` per ended
    /// session), with the address tried after each.
    fn rotate(rotation: &mut Rotation, outcomes: &[(bool, bool)]) -> Vec<(usize, Duration)> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let policy = BackoffPolicy::default();
        outcomes
            .iter()
            .map(|&(lasted, refused)| {
                let delay = rotation.ended(lasted, refused, &policy, &mut rng);
                (rotation.current(), delay)
            })
            .collect()
    }

    #[test]
    fn rotation_tries_every_address_before_backing_off() {
        let policy = BackoffPolicy::default();
        // Three replicas, starting at the second; none answers.
        let mut rotation = Rotation::new(3, 1, policy.initial);
        assert_eq!(rotation.current(), 1);
        let steps = rotate(&mut rotation, &[(false, false); 9]);
        let order: Vec<usize> = steps.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, [2, 0, 1, 2, 0, 1, 2, 0, 1], "round robin");
        for (n, (_, delay)) in steps.iter().enumerate() {
            if n % 3 == 2 {
                // The end of a round: a backoff delay under the round's ceiling.
                let ceiling = policy.initial * (1 << (n / 3));
                assert!(*delay <= ceiling, "round {}: {delay:?}", n / 3);
            } else {
                assert_eq!(*delay, Duration::ZERO, "step {n}: within a round");
            }
        }
        assert_eq!(
            rotation.backoff.ceiling(policy.max),
            policy.initial * 8,
            "the backoff grew once per round, not once per address"
        );
    }

    #[test]
    fn a_lost_replica_costs_no_delay_and_is_tried_last() {
        let policy = BackoffPolicy::default();
        let mut rotation = Rotation::new(3, 0, policy.initial);
        // Two failed rounds first: the backoff has grown.
        rotate(&mut rotation, &[(false, false); 6]);
        assert_eq!(rotation.backoff.ceiling(policy.max), policy.initial * 4);
        // Then a session on replica 0 lasts, and replica 0 dies: replica 1 at once,
        // then replica 2 at once; only when both fail too does the agent wait, with
        // the backoff started over. Replica 0 is not tried before 1 and 2.
        let steps = rotate(
            &mut rotation,
            &[(true, false), (false, false), (false, false)],
        );
        assert_eq!(steps[0], (1, Duration::ZERO));
        assert_eq!(steps[1], (2, Duration::ZERO));
        assert_eq!(steps[2].0, 0);
        assert!(steps[2].1 <= policy.initial, "{:?}", steps[2].1);

        // A session that did not last counts in its round: replica 1 answers and
        // closes at once, over and over. The agent backs off every round.
        let mut rotation = Rotation::new(2, 1, policy.initial);
        let steps = rotate(&mut rotation, &[(false, false); 4]);
        assert_eq!(steps[0].1, Duration::ZERO);
        assert_eq!(steps[2].1, Duration::ZERO);
        assert_eq!(rotation.backoff.ceiling(policy.max), policy.initial * 4);
    }

    #[test]
    fn one_address_backs_off_after_every_session_and_refusals_climb_higher() {
        let policy = BackoffPolicy::default();
        let mut rotation = Rotation::new(1, 0, policy.initial);
        let steps = rotate(&mut rotation, &[(false, false); 12]);
        assert!(steps.iter().all(|(i, d)| *i == 0 && *d <= policy.max));
        assert_eq!(rotation.backoff.ceiling(policy.max), policy.max);
        assert_eq!(
            rotation.backoff.ceiling(policy.refused_max),
            policy.refused_max,
            "a refused Hello may wait up to refused_max"
        );
        // A round with a refusal may wait longer than max; one without may not.
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut rotation = Rotation::new(2, 0, policy.max);
        let delays: Vec<Duration> = (0..40)
            .map(|_| {
                rotation.ended(false, false, &policy, &mut rng);
                rotation.ended(false, true, &policy, &mut rng)
            })
            .collect();
        assert!(delays.iter().any(|d| *d > policy.max), "{delays:?}");
        let delays: Vec<Duration> = (0..40)
            .map(|_| {
                rotation.ended(false, false, &policy, &mut rng);
                rotation.ended(false, false, &policy, &mut rng)
            })
            .collect();
        assert!(delays.iter().all(|d| *d <= policy.max), "{delays:?}");
    }

    #[test]
    fn rotation_starts_where_told_and_survives_no_addresses() {
        let rotation = Rotation::new(3, 7, Duration::from_millis(1));
        assert_eq!(rotation.current(), 1);
        let mut rotation = Rotation::new(0, 0, Duration::from_millis(1));
        assert_eq!(rotation.current(), 0);
        rotate(&mut rotation, &[(false, false)]);
        assert_eq!(rotation.current(), 0);
    }

    #[test]
    fn token_is_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings("http://hub:1", None);
        s.token_file = dir.path().join("token");
        assert!(matches!(s.token(), Err(HubError::ReadToken { .. })));
        std::fs::write(&s.token_file, " \n").unwrap();
        assert!(matches!(s.token(), Err(HubError::EmptyToken { .. })));
        std::fs::write(&s.token_file, "s3cret\n").unwrap();
        assert_eq!(s.token().unwrap(), "s3cret");
    }
}
