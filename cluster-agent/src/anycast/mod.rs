//! Anycast through BGP (issue 15): the agent announces each anycast address of the
//! shares placed on its cluster through its BGP speaker (GoBGP, driven with
//! `fedingress-gobgp`) while the share is applied and healthy and the agent is neither
//! draining nor cordoned, and withdraws it as soon as one of these stops being true.
//!
//! Entry points: [`connect`] (at start, before anything binds: a missing or misconfigured
//! speaker is a config error) and [`Anycast`], a [`Driver`] around the
//! [`Standalone`] data plane that fills `IngressReport.anycast` and `AgentReport.speaker`,
//! takes the cordon from the hub's `Welcome` ([`Driver::set_cordoned`]) and, on shutdown, withdraws
//! every route and waits `withdrawDelayMs` before the listeners drain.
//!
//! Modules: `decide` (what to announce and why, pure), `speaker` (the speaker
//! connection: start, configure, announce, withdraw, poll), `interface` (the addresses
//! on `anycast.interface`). The loop here observes, decides, applies, publishes.
//!
//! # Guarantees
//! - The loop re-decides at once when the data plane's report may have changed (every
//!   endpoint health flip bumps [`Standalone::subscribe`] when it happens, see
//!   `standalone/endpoint.rs`), when a plan is applied, on cordon and on drain; and polls
//!   the speaker every [`POLL`]. Withdrawals go out before announcements.
//! - A speaker that fails a call, stops answering or (managed) exits is down: its routes
//!   count as withdrawn, the report says `speaker down: …`, and the agent restarts a
//!   managed gobgpd / reconnects to an external one with backoff, then configures it
//!   again from scratch (BGP, peers, no routes) and announces what is wanted.
//!
//! What does not belong here: where anycast addresses come from (the hub's plan), the
//! listeners on them (the standalone driver binds them), BGP policy.

mod decide;
mod interface;
mod speaker;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fedingress_api::cluster::Address;
use fedingress_api::plan::{
    AgentReport, AnycastRoute, ClusterPlan, IngressKey, RuleError, SpeakerReport,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::anycast::{AnycastConfig, NextHops};
use crate::driver::Driver;
use crate::standalone::Standalone;
use decide::{Decision, Inputs, Sessions, SpeakerState};
use interface::Interface;
use speaker::{PeerCounts, SpeakerSettings};

pub use speaker::{Connection, StartError};

/// How often a settled speaker is polled (liveness, peer sessions, what its peers hold).
pub const POLL: Duration = Duration::from_secs(1);
/// How often it is polled while a route it carries has reached no established peer yet
/// (or no session is established): the report and `/readyz` follow within this.
const FAST_POLL: Duration = Duration::from_millis(100);
/// First and longest wait between attempts to bring a dead speaker back.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long shutdown waits for the loop to withdraw every route.
const WITHDRAW_WAIT: Duration = Duration::from_secs(10);

/// Starts (managed) or reaches (external) the speaker of `config` and configures it.
///
/// # Errors
/// See [`StartError`]: the message names the config field.
pub async fn connect(config: &AnycastConfig) -> Result<Connection, StartError> {
    speaker::open(&SpeakerSettings::from_config(config)).await
}

/// What the loop last decided and did, for reports and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
struct Published {
    routes: BTreeMap<IngressKey, Vec<AnycastRoute>>,
    speaker: SpeakerReport,
    /// Routes the speaker carries now.
    announced: usize,
    /// Why the routers may not have what the agent wants them to have; `None` once an
    /// established peer holds every carried route (see [`Driver::readiness`]).
    unready: Option<String>,
    /// The loop has seen the drain (and withdrawn what it could).
    draining: bool,
}

#[derive(Debug, Default)]
struct Counters {
    announces: AtomicU64,
    withdraws: AtomicU64,
}

/// The standalone driver with anycast routes (see the module docs).
pub struct Anycast {
    inner: Arc<Standalone>,
    plan: watch::Sender<Arc<ClusterPlan>>,
    cordoned: watch::Sender<bool>,
    draining: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    published: watch::Receiver<Published>,
    changes: Arc<watch::Sender<u64>>,
    counters: Arc<Counters>,
    withdraw_delay: Duration,
    /// When SIGTERM's withdrawal was confirmed, and whether routes were announced
    /// before it; `None` until it happened.
    withdrawn: tokio::sync::Mutex<Option<(Instant, bool)>>,
    main: Mutex<Option<JoinHandle<()>>>,
    helpers: Mutex<Vec<JoinHandle<()>>>,
}

impl Anycast {
    /// Starts the anycast loop over `inner` with the speaker `connection` (from
    /// [`connect`]) of `anycast`; `advertised` are the agent's advertised addresses (the
    /// default next hops). Needs a tokio runtime.
    pub fn start(
        inner: Arc<Standalone>,
        anycast: &AnycastConfig,
        advertised: &[Address],
        connection: Connection,
    ) -> Arc<Anycast> {
        let (plan, plan_rx) = watch::channel(Arc::new(ClusterPlan::default()));
        let (cordoned, cordoned_rx) = watch::channel(false);
        let (draining, draining_rx) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        let (published_tx, published) = watch::channel(Published {
            unready: Some("the BGP speaker's sessions are not polled yet".to_owned()),
            ..Published::default()
        });
        let (changes, _) = watch::channel(0u64);
        let changes = Arc::new(changes);
        let counters = Arc::new(Counters::default());
        let worker = Loop {
            inner: Arc::clone(&inner),
            settings: SpeakerSettings::from_config(anycast),
            connection: Some(connection),
            down: None,
            retry_at: Instant::now(),
            backoff: RETRY_FIRST,
            counts: PeerCounts::default(),
            announced: BTreeMap::new(),
            next_hops: anycast.next_hops(advertised),
            interface: anycast.interface.clone().map(Interface::new),
            plan: plan_rx,
            cordoned: cordoned_rx,
            draining: draining_rx,
            stop: stop_rx,
            published: published_tx,
            changes: Arc::clone(&changes),
            counters: Arc::clone(&counters),
        };
        let main = tokio::spawn(worker.run());
        // The data plane's changes are the driver's changes too.
        let mut inner_changes = inner.subscribe();
        let forward = Arc::clone(&changes);
        let forwarder = tokio::spawn(async move {
            while inner_changes.changed().await.is_ok() {
                forward.send_modify(|n| *n = n.wrapping_add(1));
            }
        });
        Arc::new(Anycast {
            inner,
            plan,
            cordoned,
            draining,
            stop,
            published,
            changes,
            counters,
            withdraw_delay: anycast.withdraw_delay(),
            withdrawn: tokio::sync::Mutex::new(None),
            main: Mutex::new(Some(main)),
            helpers: Mutex::new(vec![forwarder]),
        })
    }

    fn anycast_metrics(&self) -> String {
        let published = self.published.borrow().clone();
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        };
        family(
            "fedingress_agent_anycast_routes_announced",
            "gauge",
            "Anycast routes the BGP speaker carries now.",
            published.announced.to_string(),
        );
        family(
            "fedingress_agent_anycast_announces_total",
            "counter",
            "Anycast routes announced (each announce call, also after a speaker restart).",
            self.counters.announces.load(Ordering::Relaxed).to_string(),
        );
        family(
            "fedingress_agent_anycast_withdraws_total",
            "counter",
            "Anycast routes withdrawn (each withdraw call).",
            self.counters.withdraws.load(Ordering::Relaxed).to_string(),
        );
        family(
            "fedingress_agent_bgp_speaker_up",
            "gauge",
            "1 when the BGP speaker answers its API and is configured.",
            u8::from(published.speaker.up).to_string(),
        );
        family(
            "fedingress_agent_bgp_peers",
            "gauge",
            "BGP neighbors configured on the speaker.",
            published.speaker.peers.to_string(),
        );
        family(
            "fedingress_agent_bgp_peers_established",
            "gauge",
            "BGP neighbors whose session is established.",
            published.speaker.established_peers.to_string(),
        );
        out
    }
}

#[async_trait]
impl Driver for Anycast {
    fn name(&self) -> &'static str {
        Driver::name(&*self.inner)
    }

    fn capabilities(&self) -> Vec<String> {
        Driver::capabilities(&*self.inner)
    }

    async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        let errors = self.inner.apply(plan).await;
        self.plan.send_replace(Arc::new(plan.clone()));
        errors
    }

    fn report(&self, plan: &ClusterPlan) -> AgentReport {
        let mut report = self.inner.report(plan);
        let published = self.published.borrow();
        for ingress in &mut report.ingresses {
            if let Some(routes) = published.routes.get(&ingress.key) {
                ingress.anycast = routes.clone();
            }
        }
        report.speaker = Some(published.speaker.clone());
        report
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Withdraws every route (at most [`WITHDRAW_WAIT`] for the speaker to confirm), so
    /// that the agent's last report to the hub says so.
    async fn begin_shutdown(&self) {
        self.withdraw_all().await;
    }

    /// Withdraws every route (unless [`Driver::begin_shutdown`] did), waits
    /// `withdrawDelayMs` from the withdrawal (when something was announced) so that
    /// peers stop sending traffic, then drains the listeners, removes the interface
    /// addresses and stops a managed speaker.
    async fn shutdown(&self) {
        let (withdrawn_at, had_routes) = self.withdraw_all().await;
        if had_routes && !self.withdraw_delay.is_zero() {
            tracing::info!(
                withdraw_delay_ms = self.withdraw_delay.as_millis(),
                "anycast routes withdrawn; waiting for peers to converge before draining"
            );
            tokio::time::sleep_until(withdrawn_at + self.withdraw_delay).await;
        }
        self.inner.shutdown().await;
        self.stop.send_replace(true);
        let main = self
            .main
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(main) = main {
            let _ = main.await;
        }
        for task in self
            .helpers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }

    fn metrics(&self) -> String {
        let mut text = self.inner.metrics();
        text.push_str(&self.anycast_metrics());
        text
    }

    fn is_draining(&self) -> bool {
        self.inner.is_draining() || *self.draining.borrow()
    }

    /// Ready once the speaker is up and an established peer holds every route it
    /// carries: a router has what the report says is announced.
    fn readiness(&self) -> Result<(), String> {
        self.inner.readiness()?;
        match &self.published.borrow().unready {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    fn set_cordoned(&self, cordoned: bool) {
        self.cordoned.send_if_modified(|current| {
            let changed = *current != cordoned;
            *current = cordoned;
            changed
        });
    }
}

impl Anycast {
    /// Withdraws every route once (later calls return the first one's result): when the
    /// withdrawal was confirmed (or given up on) and whether routes were announced
    /// before it.
    async fn withdraw_all(&self) -> (Instant, bool) {
        let mut withdrawn = self.withdrawn.lock().await;
        if let Some(done) = *withdrawn {
            return done;
        }
        let had_routes = self.published.borrow().announced > 0;
        self.draining.send_replace(true);
        let mut published = self.published.clone();
        let confirmed = tokio::time::timeout(
            WITHDRAW_WAIT,
            published.wait_for(|p| p.draining && p.announced == 0),
        )
        .await
        .is_ok_and(|seen| seen.is_ok());
        if !confirmed {
            tracing::warn!(
                waited_ms = WITHDRAW_WAIT.as_millis(),
                "anycast routes not confirmed withdrawn; draining anyway"
            );
        }
        let done = (Instant::now(), had_routes);
        *withdrawn = Some(done);
        done
    }
}

impl Drop for Anycast {
    fn drop(&mut self) {
        // Without a shutdown: the loop ends (a managed gobgpd is killed with it).
        self.stop.send_replace(true);
        for task in self
            .helpers
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

/// The anycast loop's state: observe, decide, apply, publish; then wait for a change.
struct Loop {
    inner: Arc<Standalone>,
    settings: SpeakerSettings,
    /// `None` while the speaker is down.
    connection: Option<Connection>,
    /// Why the speaker is down.
    down: Option<String>,
    retry_at: Instant,
    backoff: Duration,
    counts: PeerCounts,
    /// Address → next hop, as the speaker carries them.
    announced: BTreeMap<IpAddr, IpAddr>,
    next_hops: NextHops,
    interface: Option<Interface>,
    plan: watch::Receiver<Arc<ClusterPlan>>,
    cordoned: watch::Receiver<bool>,
    draining: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    published: watch::Sender<Published>,
    changes: Arc<watch::Sender<u64>>,
    counters: Arc<Counters>,
}

/// Completes when a managed gobgpd exits; never otherwise.
async fn exited(connection: &mut Option<Connection>) -> String {
    match connection {
        Some(connection) => connection.exited().await,
        None => std::future::pending().await,
    }
}

impl Loop {
    async fn run(mut self) {
        let mut inner_changes = self.inner.subscribe();
        let mut next_poll = Instant::now();
        loop {
            let span = tracing::info_span!(
                "anycast",
                cordoned = *self.cordoned.borrow(),
                draining = *self.draining.borrow(),
                speaker_up = self.connection.is_some(),
            );
            self.round().instrument(span).await;
            let open = tokio::select! {
                changed = self.stop.changed() => changed.is_ok() && !*self.stop.borrow(),
                changed = inner_changes.changed() => changed.is_ok(),
                changed = self.plan.changed() => changed.is_ok(),
                changed = self.cordoned.changed() => changed.is_ok(),
                changed = self.draining.changed() => changed.is_ok(),
                why = exited(&mut self.connection) => {
                    self.lose(why);
                    // The restart is due after the first backoff, not at the next poll.
                    next_poll = self.retry_at;
                    true
                }
                () = tokio::time::sleep_until(next_poll) => {
                    self.poll().await;
                    next_poll = Instant::now() + self.poll_interval();
                    true
                }
            };
            if !open {
                break;
            }
        }
        if let Some(interface) = &mut self.interface {
            interface.clear().await;
        }
        if let Some(connection) = self.connection.take() {
            connection.close().await;
        }
        tracing::debug!("anycast loop stopped");
    }

    /// One pass: decide from what is observed now and make the speaker carry it;
    /// decides again (at most a few times) when the interface or the speaker failed.
    async fn round(&mut self) {
        for _ in 0..3 {
            let plan = Arc::clone(&self.plan.borrow_and_update());
            let cordoned = *self.cordoned.borrow_and_update();
            let draining = *self.draining.borrow_and_update();
            let report = self.inner.report(&plan);
            let speaker = match (&self.connection, &self.down) {
                (Some(_), _) => SpeakerState::Up,
                (None, why) => SpeakerState::Down(why.clone().unwrap_or_default()),
            };
            let no_errors = BTreeMap::new();
            let decision = decide::decide(&Inputs {
                plan: &plan,
                report: &report,
                draining,
                cordoned,
                speaker: &speaker,
                sessions: Sessions {
                    peers: self.counts.peers,
                    established: self.counts.established,
                },
                sent: &self.counts.sent,
                next_hops: self.next_hops,
                interface_errors: self.interface.as_ref().map_or(&no_errors, |i| &i.errors),
            });
            if let Some(interface) = &mut self.interface
                && interface.sync(&decision.local).await
            {
                continue;
            }
            if let Err(why) = self.carry(&decision).await {
                self.lose(why);
                continue;
            }
            self.publish(decision, draining);
            return;
        }
    }

    /// Withdraws, then announces, what differs between the speaker and `decision`.
    async fn carry(&mut self, decision: &Decision) -> Result<(), String> {
        let Some(connection) = &mut self.connection else {
            return Ok(());
        };
        let changes = decide::changes(&decision.announce, &self.announced);
        if changes.is_empty() {
            return Ok(());
        }
        for address in changes.withdraw {
            let Some(&next_hop) = self.announced.get(&address) else {
                continue;
            };
            let route = self.settings.route(address, next_hop);
            connection
                .withdraw(&route)
                .await
                .map_err(|e| e.to_string())?;
            self.announced.remove(&address);
            self.counters.withdraws.fetch_add(1, Ordering::Relaxed);
            tracing::info!(address = %address, reason = %reason_of(decision, address), "anycast route withdrawn");
        }
        for (address, next_hop) in changes.announce {
            let route = self.settings.route(address, next_hop);
            connection
                .announce(&route)
                .await
                .map_err(|e| e.to_string())?;
            self.announced.insert(address, next_hop);
            self.counters.announces.fetch_add(1, Ordering::Relaxed);
            tracing::info!(address = %address, next_hop = %next_hop, reason = %reason_of(decision, address), "anycast route announced");
        }
        Ok(())
    }

    fn publish(&mut self, decision: Decision, draining: bool) {
        let up = self.connection.is_some();
        let message = match (&self.down, up) {
            (Some(why), false) => why.clone(),
            _ if self.counts.established < self.counts.peers => format!(
                "{} of {} peer sessions established",
                self.counts.established, self.counts.peers
            ),
            _ => String::new(),
        };
        let unready = match (&self.down, up) {
            (Some(why), false) => Some(format!("the BGP speaker is down: {why}")),
            (None, false) => Some("the BGP speaker is down".to_owned()),
            _ if draining => None,
            _ if self.counts.established == 0 => Some(format!(
                "no BGP session established ({} of {} peers)",
                self.counts.established, self.counts.peers
            )),
            _ if !decision.unsent.is_empty() => Some(format!(
                "{} anycast route(s) not yet sent to an established BGP peer",
                decision.unsent.len()
            )),
            _ => None,
        };
        let published = Published {
            unready,
            routes: decision.routes,
            speaker: SpeakerReport {
                up,
                peers: if up { self.counts.peers } else { 0 },
                established_peers: if up { self.counts.established } else { 0 },
                message,
            },
            announced: self.announced.len(),
            draining,
        };
        let changed = self.published.send_if_modified(|current| {
            let changed = *current != published;
            *current = published;
            changed
        });
        if changed {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// [`FAST_POLL`] while the routers may lack what the report is waiting to call
    /// announced (or the speaker is down and due for a retry), [`POLL`] otherwise.
    fn poll_interval(&self) -> Duration {
        let published = self.published.borrow();
        match &self.connection {
            None => self
                .retry_at
                .saturating_duration_since(Instant::now())
                .clamp(FAST_POLL, POLL),
            Some(_) if published.unready.is_some() && !published.draining => FAST_POLL,
            Some(_) => POLL,
        }
    }

    /// The speaker failed: its routes count as withdrawn until it is back.
    fn lose(&mut self, why: String) {
        if let Some(connection) = self.connection.take() {
            tracing::error!(error = %why, routes = self.announced.len(), "BGP speaker down; its routes count as withdrawn");
            // A managed gobgpd that still runs is killed with its connection.
            drop(connection);
            self.backoff = RETRY_FIRST;
        }
        self.announced.clear();
        self.counts = PeerCounts::default();
        self.down = Some(why);
        self.retry_at = Instant::now() + self.backoff;
    }

    /// Polls a live speaker; tries to bring a dead one back when its backoff is over.
    async fn poll(&mut self) {
        if let Some(connection) = &mut self.connection {
            match connection.poll().await {
                Ok(counts) => self.counts = counts,
                Err(why) => self.lose(why),
            }
            return;
        }
        if Instant::now() < self.retry_at || *self.draining.borrow() {
            return;
        }
        match speaker::open(&self.settings).await {
            Ok(connection) => {
                tracing::info!(api = %self.settings.api, "BGP speaker back");
                self.connection = Some(connection);
                self.down = None;
                self.backoff = RETRY_FIRST;
                // Counted at the next poll.
                self.counts = PeerCounts::default();
            }
            Err(error) => {
                self.backoff = (self.backoff * 2).min(RETRY_MAX);
                tracing::warn!(error = %error, retry_in_ms = self.backoff.as_millis(), "BGP speaker still down");
                self.down = Some(error.message);
                self.retry_at = Instant::now() + self.backoff;
            }
        }
    }
}

/// The reason of the first share route for `address` (for logs).
fn reason_of(decision: &Decision, address: IpAddr) -> String {
    decision
        .routes
        .values()
        .flatten()
        .find(|r| r.address == address)
        .map_or_else(
            || "no share has the address".to_owned(),
            |r| r.reason.clone(),
        )
}
