//! The agent's side of the agent protocol: one outbound gRPC stream to the hub
//! (`AgentGateway.Connect`), kept up for the agent's whole life.
//!
//! Entry points: [`Agent`] ([`Agent::new`], [`Agent::applied`] for readiness,
//! [`Agent::run`]) and the shorthand [`run`]. [`HubSettings`] says where the hub is and
//! who the agent is ([`HubSettings::from_config`]); [`Backoff`] paces reconnects.
//!
//! # Guarantees
//!
//! - Fail static: at start the persisted plan ([`crate::state`]) is applied before the
//!   hub is contacted, so the agent serves its last plan with the hub unreachable, also
//!   after a restart. Nothing is ever un-applied because the hub is gone.
//! - Every applied plan is persisted before it is acknowledged (`Ack`, or `Nack` with
//!   the rules that could not be applied while the rest is served).
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
//! - Reconnects use full-jitter exponential backoff ([`BackoffPolicy`]); a refused
//!   `Hello` (`Unauthenticated`, `PermissionDenied`) is logged at error level with the
//!   hub's message and retried on the same backoff with a higher cap.
//!
//! What does not belong here: serving traffic (drivers), the config file
//! ([`crate::config`]), the admin endpoint.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::plan::{ClusterPlan, RuleError};
use fedingress_proto::convert::{agent_to_pb, hub_from_pb};
use fedingress_proto::pb::agent_gateway_client::AgentGatewayClient;
use fedingress_proto::{AgentToHub, Hello, HubToAgent, pb};
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

use crate::config::Config;
use crate::driver::Driver;
use crate::state::{PersistedPlan, PlanStore, error_chain};

/// At most one report per this long when the driver signals changes in a burst.
pub const REPORT_COALESCE: Duration = Duration::from_millis(50);

/// Heartbeat interval until the hub's `Welcome` says otherwise (the design's default).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(2);

/// How long connecting to the hub (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// HTTP/2 keepalive: a hub that stops answering PINGs is detected within about
/// `interval + timeout`, even when it sends nothing else.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Messages queued towards the hub before senders wait.
const OUTBOUND_QUEUE: usize = 64;

/// How long the hub may take to answer `Connect` (it reads the Hello first, and gives
/// an agent 10 s to send it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// Stand-in for "never" where a configured interval does not fit an `Instant`.
const FAR_FUTURE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where the hub is, who this agent is, and how it paces itself.
#[derive(Clone, Debug)]
pub struct HubSettings {
    /// `https://host:port` or `http://host:port`.
    pub address: String,
    /// PEM CA bundle the hub's certificate must chain to (https only). Without it the
    /// roots compiled into tonic are used (none unless a `tls-*-roots` feature is on).
    pub ca_file: Option<PathBuf>,
    /// This cluster's name at the hub.
    pub cluster: String,
    /// File holding the agent token; read (and trimmed) at every connect, so a rotated
    /// token is picked up without a restart.
    pub token_file: PathBuf,
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
            address: config.hub.address.clone(),
            ca_file: config.hub.ca_file.clone(),
            cluster: config.cluster.clone(),
            token_file: config.token_file.clone(),
            plan_file: config.plan_file(),
            report_interval: config.report_interval(),
            backoff: BackoffPolicy::default(),
        }
    }

    /// The gRPC endpoint of the hub: TLS with the CA file and the address's host as
    /// server name for `https://`, plain HTTP/2 for `http://`. Reads the CA file, so
    /// `main` calls it once before binding anything to refuse a bad one early.
    ///
    /// # Errors
    /// An address that is not a URI, an unreadable CA file or one without certificates.
    pub fn endpoint(&self) -> Result<Endpoint, HubError> {
        let address_error = |source| HubError::Address {
            address: self.address.clone(),
            source,
        };
        let endpoint = Endpoint::from_shared(self.address.clone())
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
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        tokio::select! {
            biased;
            () = &mut shutdown => return,
            () = self.apply_persisted() => {}
        }
        let policy = self.settings.backoff;
        let mut backoff = Backoff::new(policy.initial);
        loop {
            let mut connected_at = None;
            let end = tokio::select! {
                biased;
                () = &mut shutdown => return,
                end = self.session(&mut connected_at) => end,
            };
            if connected_at.is_some_and(|at: Instant| at.elapsed() > policy.reset_after) {
                backoff.reset();
            }
            let cluster = &self.settings.cluster;
            let version = self.applied_version();
            let cap = match &end {
                End::Refused(status) => {
                    tracing::error!(
                        cluster = %cluster,
                        version,
                        code = ?status.code(),
                        error = status.message(),
                        "hub refused the agent; check the token and the cluster name"
                    );
                    policy.refused_max
                }
                End::Failed(error) => {
                    tracing::warn!(cluster = %cluster, version, error = %error, "hub connection failed");
                    policy.max
                }
                End::Closed => {
                    tracing::info!(cluster = %cluster, version, "hub closed the stream");
                    policy.max
                }
                End::Resync => policy.max,
                End::Renegotiate => continue,
            };
            let delay = backoff.next_delay(cap, &mut rand::rng());
            tracing::debug!(cluster = %cluster, delay_ms = delay.as_millis(), "reconnecting");
            tokio::select! {
                biased;
                () = &mut shutdown => return,
                () = tokio::time::sleep(delay) => {}
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

    /// Applies `plan`, persists it, publishes it; returns the rule errors.
    async fn apply(&mut self, version: u64, digest: String, plan: ClusterPlan) -> Vec<RuleError> {
        let cluster = &self.settings.cluster;
        let rule_errors = self.driver.apply(&plan).await;
        let persisted = PersistedPlan {
            version,
            digest,
            plan,
        };
        let store = self.store.clone();
        let copy = persisted.clone();
        match tokio::task::spawn_blocking(move || store.save(&copy)).await {
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

    /// One connection: Hello, then follow the hub until the stream ends.
    async fn session(&mut self, connected_at: &mut Option<Instant>) -> End {
        let cluster = self.settings.cluster.clone();
        let endpoint = match self.settings.endpoint() {
            Ok(endpoint) => endpoint,
            Err(error) => return End::Failed(error_chain(&error)),
        };
        let token = match self.settings.token() {
            Ok(token) => token,
            Err(error) => return End::Failed(error_chain(&error)),
        };
        let channel = match endpoint.connect().await {
            Ok(channel) => channel,
            Err(error) => return End::Failed(error_chain(&error)),
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
        });
        if tx.send(agent_to_pb(&hello)).await.is_err() {
            return End::Failed("outbound stream closed".to_owned());
        }
        let mut client = AgentGatewayClient::new(channel);
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, client.connect(ReceiverStream::new(rx)));
        let mut inbound = match answer.await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => return status_end(status),
            Err(_) => return End::Failed(format!("hub did not answer within {ANSWER_TIMEOUT:?}")),
        };
        *connected_at = Some(Instant::now());
        tracing::info!(
            cluster = %cluster,
            version = self.applied_version(),
            hub = %self.settings.address,
            "connected to the hub"
        );

        let (period_tx, period_rx) = watch::channel(DEFAULT_HEARTBEAT);
        let _heartbeats = AbortOnDrop(tokio::spawn(heartbeats(tx.clone(), period_rx)));
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
            };
            if send_report {
                changes.borrow_and_update();
                report_pending = false;
                last_report = Instant::now();
                let plan = self.current.as_ref().map(|c| &c.plan);
                let report = match plan {
                    Some(plan) => self.driver.report(plan),
                    None => self.driver.report(&ClusterPlan::default()),
                };
                if let Err(end) = send(&tx, AgentToHub::Report(report)).await {
                    return end;
                }
            }
        }
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
            } => {
                tracing::info!(
                    cluster = %cluster,
                    version = self.applied_version(),
                    heartbeat_interval_ms,
                    lease_ms,
                    provider = provider.map(|p| p.as_str()).unwrap_or(""),
                    "hub welcomed the agent"
                );
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
                let rule_errors = self.apply(version, digest, plan).await;
                send(tx, ack(version, rule_errors)).await?;
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
                send(tx, ack(version, rule_errors)).await?;
                Ok(true)
            }
        }
    }
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

fn ack(version: u64, rule_errors: Vec<RuleError>) -> AgentToHub {
    if rule_errors.is_empty() {
        AgentToHub::Ack { version }
    } else {
        AgentToHub::Nack {
            version,
            error: String::new(),
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
            address: address.to_owned(),
            ca_file: ca,
            cluster: "eu-west".to_owned(),
            token_file: PathBuf::from("token"),
            plan_file: PathBuf::from("plan.json"),
            report_interval: Duration::from_secs(5),
            backoff: BackoffPolicy::default(),
        }
    }

    #[test]
    fn endpoints_check_the_ca_file() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        settings("http://127.0.0.1:6444", None).endpoint().unwrap();
        settings("https://[::1]:6444", None).endpoint().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = settings("https://hub:1", Some(missing))
            .endpoint()
            .unwrap_err();
        assert!(matches!(err, HubError::ReadCa { .. }), "{err:?}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let err = settings("https://hub:1", Some(junk))
            .endpoint()
            .unwrap_err();
        assert!(matches!(err, HubError::EmptyCa { .. }), "{err:?}");
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
