//! The configured DNS providers (`dns.providers`: Route53, Cloud DNS) as the controller
//! runs them: built from config on every replica (the explain endpoint asks them which
//! record a client would get), synced by the leader only.
//!
//! # How the leader runs them
//! - Each time a DNS serial completes (the leader stored a batch of routed ingresses and
//!   rebuilt the embedded server's snapshot), [`ProviderSet::publish`] derives each
//!   provider's [`Desired`] from the same routed ingresses, plus the delegation records
//!   of the embedded zones that provider delegates (its `delegate` list), and hands it
//!   to that provider's syncer through a `watch` channel: a syncer that is behind only
//!   ever sees the newest serial.
//! - The syncers ([`fedingress_providers::publish::sync`]) run while this replica leads and
//!   are dropped when it stops leading: a follower never writes to a provider. They are
//!   spawned on the first serial published after taking the lead, never with an empty
//!   desired state (which would delete every owned record set).
//! - Every state a syncer reports is turned into per-ingress status entries
//!   ([`ProviderNameStatus`]); the ingresses whose entry changed are marked dirty so
//!   that the controller rewrites their status, and a provider that starts or stops
//!   rejecting an ingress's name is recorded as an Event ([`ProviderEvent`]).
//!
//! # Guarantees
//! - A provider failure changes only that provider's entries: the embedded server keeps
//!   serving, the other providers keep syncing.
//! - An entry's `lastSyncTime` and `observedSerial` are those of the sync that last
//!   changed what the entry says (synced, message, records), so a periodic resync that
//!   changes nothing rewrites no status.
//! - After a restart or a change of leader, an ingress unchanged since keeps its stored
//!   entries until the provider's first sync reports: no `DNSReady` blip, no status
//!   rewrite when the provider still holds what it held.
//!
//! - Metrics ([`ProviderMetrics`]) are read at scrape time from what the core keeps: each
//!   syncer's [`ProviderState`] and each connected provider's call policy counters
//!   ([`CallStats`]); they never go back within a process, as the totals of syncers
//!   stopped when this replica stops leading are kept.
//!
//! What does not belong here: what to publish and how to diff and retry
//! ([`fedingress_providers::publish`]), the clouds ([`fedingress_providers`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use fedingress_api::Time;
use fedingress_api::ingress::{DnsProviderRecord, DnsProviderStatus};
use fedingress_api::plan::IngressKey;
use fedingress_dns::Location;
use fedingress_dns::RoutedIngress;
use fedingress_dns::zone::ZoneConfig;
use fedingress_providers::config::{ProviderConfig, normalize};
use fedingress_providers::publish::call::CallStats;
use fedingress_providers::publish::sync::{ProviderState, SyncHandle, SyncSettings};
use fedingress_providers::publish::{
    Desired, DnsProvider, NameResult, Owner, PolicyRecordSet, ProviderError, PublishedRecord,
    SyncOptions, SyncReport,
};
use tokio::sync::{mpsc, watch};

mod metrics;

pub use metrics::{ProviderSample, SyncTotals, render_providers};

/// Answer-relevant changes within this window make one sync.
const SYNC_DEBOUNCE: Duration = Duration::from_millis(500);

/// Where one provider stands for one ingress's DNS name, for `DNSReady`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderReadiness {
    /// The provider holds the records of this name's latest change.
    Synced,
    /// It has not caught up with this name's latest change yet (why, in words).
    Syncing(String),
    /// Its last sync failed for this name (the provider's words).
    Failed(String),
    /// It plans without changing anything: not counted for `DNSReady`.
    DryRun,
}

/// One provider's entry in an ingress's `status.dns.providers`, with its readiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderNameStatus {
    pub status: DnsProviderStatus,
    pub readiness: ProviderReadiness,
}

impl ProviderNameStatus {
    /// Equal but for when the provider last synced (see the module's guarantees).
    fn same_but_times(&self, other: &Self) -> bool {
        let strip = |s: &Self| {
            let mut s = s.clone();
            s.status.last_sync_time = None;
            s.status.observed_serial = None;
            s
        };
        strip(self) == strip(other)
    }
}

/// A provider started or stopped rejecting an ingress's name: recorded as an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderEvent {
    pub ingress: IngressKey,
    /// `Warning` or `Normal`.
    pub type_: &'static str,
    /// `DNSProviderRejected` or `DNSProviderSynced`.
    pub reason: &'static str,
    pub message: String,
}

/// Event reason: a provider refused (or failed to hold) an ingress's records.
pub const REASON_REJECTED: &str = "DNSProviderRejected";
/// Event reason: a provider that had failed holds an ingress's records again.
pub const REASON_RECOVERED: &str = "DNSProviderSynced";

/// What the syncers reported since the last call of [`ProviderSet::take_changes`].
#[derive(Debug, Default)]
pub struct ProviderChanges {
    /// Ingresses whose provider entries changed: their status is to be rewritten.
    pub dirty: BTreeSet<IngressKey>,
    pub events: Vec<ProviderEvent>,
}

/// One configured provider.
struct Configured {
    config: ProviderConfig,
    provider: Arc<dyn DnsProvider>,
    /// The embedded zones this provider delegates (`delegate`), from `dns.zones`.
    delegated: Vec<ZoneConfig>,
}

/// A provider's syncer, while leading.
struct Running {
    desired: watch::Sender<Arc<Desired>>,
    /// Dropping it stops the syncer.
    handle: SyncHandle,
    /// Forwards the syncer's state changes to [`ProviderSet::changed`].
    forward: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

/// The configured providers and, while leading, their syncers.
pub struct ProviderSet {
    configured: Vec<Configured>,
    owner: Owner,
    leading: bool,
    /// One per configured provider while leading and after the first publication.
    running: Vec<Running>,
    /// Each provider's latest reported state (same order as `configured`).
    states: Vec<Option<ProviderState>>,
    /// The DNS serial at which each routed ingress last changed, while leading.
    changed_at: HashMap<IngressKey, u32>,
    /// Status entries as last reported, per (provider index, ingress).
    entries: HashMap<(usize, IngressKey), ProviderNameStatus>,
    /// Failures already recorded as an Event, per (provider index, ingress).
    failing: HashMap<(usize, IngressKey), String>,
    /// The serial last published.
    serial: Option<u32>,
    notify_tx: mpsc::UnboundedSender<usize>,
    notify_rx: mpsc::UnboundedReceiver<usize>,
    /// Providers that reported since the last [`ProviderSet::take_changes`].
    reported: BTreeSet<usize>,
    /// Ingresses unchanged since this replica took the lead: until a provider's first
    /// sync reports, their stored entries stand (a restart or a new leader makes no
    /// `DNSReady` blip and rewrites no status when nothing changed).
    carried: HashSet<IngressKey>,
    /// What `/metrics` reads (same order as `configured`).
    metrics: Arc<ProviderMetrics>,
}

/// The providers' metrics as `/metrics` reads them, shared by the [`ProviderSet`] (which
/// hands over each syncer it starts and stops) and
/// [`HubMetrics`](crate::metrics::HubMetrics). Nothing is counted here: a scrape reads
/// the running syncers' [`ProviderState`] and the connected providers' [`CallStats`].
pub struct ProviderMetrics {
    providers: Vec<ProviderSeries>,
}

/// One configured provider's sources.
struct ProviderSeries {
    name: String,
    kind: &'static str,
    dry_run: bool,
    /// Where the API call counters are, once connected (`None`: providers built
    /// elsewhere, in tests).
    calls: Option<Arc<Connecting>>,
    /// The running syncer's state, while leading.
    syncer: Mutex<Option<watch::Receiver<ProviderState>>>,
    /// The totals of this replica's syncers that stopped (it stopped leading).
    retired: Mutex<SyncTotals>,
}

impl ProviderMetrics {
    /// Every configured provider's sample, in config order.
    pub fn samples(&self) -> Vec<ProviderSample> {
        self.providers
            .iter()
            .map(|series| {
                let retired = *series
                    .retired
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let syncer = series.syncer.lock().unwrap_or_else(PoisonError::into_inner);
                let state = syncer.as_ref().map(|rx| rx.borrow().clone());
                drop(syncer);
                let mut sample = ProviderSample {
                    name: series.name.clone(),
                    kind: series.kind,
                    dry_run: series.dry_run,
                    totals: retired,
                    calls: series
                        .calls
                        .as_ref()
                        .and_then(|c| c.call_stats())
                        .unwrap_or_default(),
                    ..ProviderSample::default()
                };
                if let Some(state) = state {
                    sample.totals = retired + totals_of(&state);
                    // Gauges of the latest successful sync, once there is one.
                    if state.observed_serial.is_some() {
                        let names = &state.report.names;
                        let unsynced = if state.error.is_some() {
                            // The last sync failed as a whole: none of its names is.
                            names.len()
                        } else {
                            names.values().filter(|n| !n.synced).count()
                        };
                        sample.names_not_synced = Some(u64::try_from(unsynced).unwrap_or(u64::MAX));
                    }
                    sample.last_sync_time = state.last_sync_time;
                    sample.observed_serial = state.observed_serial;
                }
                sample
            })
            .collect()
    }

    /// Provider `index`'s syncer started.
    fn started(&self, index: usize, state: watch::Receiver<ProviderState>) {
        if let Some(series) = self.providers.get(index) {
            *series.syncer.lock().unwrap_or_else(PoisonError::into_inner) = Some(state);
        }
    }

    /// The syncers stopped: their totals are kept, their latest sync is forgotten.
    fn stopped(&self) {
        for series in &self.providers {
            let state = series
                .syncer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(state) = state {
                let totals = totals_of(&state.borrow());
                let mut retired = series
                    .retired
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                *retired = *retired + totals;
            }
        }
    }
}

/// A syncer's totals since it started.
fn totals_of(state: &ProviderState) -> SyncTotals {
    SyncTotals {
        ok: state.syncs.saturating_sub(state.failed_syncs),
        failed: state.failed_syncs,
        changes: state.changes_total,
        health_checks_changed: state.health_checks_changed_total,
    }
}

/// A configured provider as the hub holds it: connected to its cloud on first use, and
/// again at every sync until that works, so that a provider whose cloud cannot be
/// reached at start (a missing zone, no credentials, a network problem) only fails
/// that provider, in status and Events, never the apiserver.
///
/// Until it is connected it claims the names of its `domains` (every name when it has
/// none: a superset, so that the first sync after connecting never starts from a
/// desired state filtered too narrowly, which would delete owned record sets); once
/// connected, the cloud provider's own [`DnsProvider::manages`] decides, and the
/// desired record sets are filtered with it again.
pub struct Connecting {
    config: ProviderConfig,
    connected: std::sync::OnceLock<Arc<dyn DnsProvider>>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
}

impl Connecting {
    pub fn new(config: ProviderConfig) -> Self {
        Self {
            config,
            connected: std::sync::OnceLock::new(),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// The cloud provider, connecting first if need be.
    pub async fn connect(&self) -> Result<Arc<dyn DnsProvider>, ProviderError> {
        if let Some(connected) = self.connected.get() {
            return Ok(connected.clone());
        }
        let _one = self.connecting.lock().await;
        if let Some(connected) = self.connected.get() {
            return Ok(connected.clone());
        }
        match fedingress_providers::build(&self.config).await {
            Ok(connected) => {
                tracing::info!(provider = %self.config.name, kind = self.config.type_.as_str(), zone = %self.config.zone, "DNS provider connected");
                Ok(self.connected.get_or_init(|| connected).clone())
            }
            Err(error) => {
                tracing::warn!(provider = %self.config.name, kind = self.config.type_.as_str(), zone = %self.config.zone, error = %error, "connecting to the DNS provider failed");
                Err(error)
            }
        }
    }

    /// The call policy's counters since the provider connected; `None` before.
    pub fn call_stats(&self) -> Option<CallStats> {
        self.connected.get().map(|c| c.call_stats())
    }
}

#[async_trait::async_trait]
impl DnsProvider for Connecting {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn kind(&self) -> &'static str {
        self.config.type_.as_str()
    }

    fn manages(&self, name: &str) -> bool {
        match self.connected.get() {
            Some(connected) => connected.manages(name),
            None => self.config.in_domains(name),
        }
    }

    async fn sync(
        &self,
        desired: &[&PolicyRecordSet],
        options: &SyncOptions,
    ) -> Result<SyncReport, ProviderError> {
        let provider = self.connect().await?;
        let desired: Vec<&PolicyRecordSet> = desired
            .iter()
            .copied()
            .filter(|r| provider.manages(&r.name))
            .collect();
        provider.sync(&desired, options).await
    }

    fn explain(&self, records: &[PublishedRecord], client: &Location) -> String {
        match self.connected.get() {
            Some(connected) => connected.explain(records, client),
            None => "not connected to the provider yet".to_string(),
        }
    }
}

impl ProviderSet {
    /// Wraps every provider of `configs` (checked already: `config::load`) in
    /// [`Connecting`] and starts connecting them in the background (every replica: the
    /// explain endpoint asks them). Nothing is synced: that starts when the replica
    /// leads. A provider that cannot connect is retried at every sync.
    pub fn build(configs: &[ProviderConfig], owner_id: &str, zones: &[ZoneConfig]) -> Self {
        let connecting: Vec<Arc<Connecting>> = configs
            .iter()
            .map(|config| {
                let provider = Arc::new(Connecting::new(config.clone()));
                let connecting = provider.clone();
                tokio::spawn(async move {
                    let _ = connecting.connect().await;
                });
                provider
            })
            .collect();
        let built = configs
            .iter()
            .cloned()
            .zip(connecting.iter().map(|c| c.clone() as Arc<dyn DnsProvider>))
            .collect();
        Self::assemble(
            built,
            connecting.into_iter().map(Some).collect(),
            owner_id,
            zones,
        )
    }

    /// The set of already built providers, with their config.
    pub fn new(
        built: Vec<(ProviderConfig, Arc<dyn DnsProvider>)>,
        owner_id: &str,
        zones: &[ZoneConfig],
    ) -> Self {
        let calls = vec![None; built.len()];
        Self::assemble(built, calls, owner_id, zones)
    }

    /// [`ProviderSet::new`], with where each provider's call counters are.
    fn assemble(
        built: Vec<(ProviderConfig, Arc<dyn DnsProvider>)>,
        calls: Vec<Option<Arc<Connecting>>>,
        owner_id: &str,
        zones: &[ZoneConfig],
    ) -> Self {
        let metrics = Arc::new(ProviderMetrics {
            providers: built
                .iter()
                .zip(calls)
                .map(|((config, provider), calls)| ProviderSeries {
                    name: config.name.clone(),
                    kind: provider.kind(),
                    dry_run: config.dry_run,
                    calls,
                    syncer: Mutex::new(None),
                    retired: Mutex::new(SyncTotals::default()),
                })
                .collect(),
        });
        let mut configured = Vec::with_capacity(built.len());
        for (config, provider) in built {
            let delegated = zones
                .iter()
                .filter(|z| {
                    config
                        .delegate
                        .iter()
                        .any(|d| normalize(d) == normalize(&z.name))
                })
                .cloned()
                .collect();
            configured.push(Configured {
                config,
                provider,
                delegated,
            });
        }
        let (notify_tx, notify_rx) = mpsc::unbounded_channel();
        Self {
            states: vec![None; configured.len()],
            configured,
            owner: Owner {
                id: owner_id.to_string(),
            },
            leading: false,
            running: Vec::new(),
            changed_at: HashMap::new(),
            entries: HashMap::new(),
            failing: HashMap::new(),
            serial: None,
            notify_tx,
            notify_rx,
            reported: BTreeSet::new(),
            carried: HashSet::new(),
            metrics,
        }
    }

    /// What `/metrics` reads about the providers.
    pub fn metrics(&self) -> Arc<ProviderMetrics> {
        self.metrics.clone()
    }

    /// The providers, for the explain endpoint.
    pub fn providers(&self) -> Vec<Arc<dyn DnsProvider>> {
        self.configured.iter().map(|c| c.provider.clone()).collect()
    }

    /// This replica leads: the syncers start with the next published serial, and every
    /// routed ingress counts as changed at it (what the providers hold is unknown).
    pub fn lead(&mut self) {
        if self.leading {
            return;
        }
        tracing::info!(
            providers = self.configured.len(),
            "leading: DNS providers sync from the next serial"
        );
        self.leading = true;
    }

    /// This replica no longer leads: the syncers stop, and what they reported is
    /// forgotten (the new leader reports its own).
    pub fn follow(&mut self) {
        if !self.leading {
            return;
        }
        tracing::info!("following: DNS provider syncers stopped");
        self.leading = false;
        self.running.clear();
        self.metrics.stopped();
        self.states = vec![None; self.configured.len()];
        self.changed_at.clear();
        self.entries.clear();
        self.failing.clear();
        self.serial = None;
        self.reported.clear();
        self.carried.clear();
        while self.notify_rx.try_recv().is_ok() {}
    }

    /// A DNS serial completed with `routed` (every routed ingress) after `changed`
    /// changed: each provider is handed its desired state for it. Returns nothing;
    /// the changed ingresses' entries now say `Syncing`.
    pub fn publish(
        &mut self,
        serial: u32,
        routed: &BTreeMap<IngressKey, RoutedIngress>,
        changed: &BTreeSet<IngressKey>,
    ) {
        if !self.leading {
            return;
        }
        let first = self.running.is_empty();
        self.serial = Some(serial);
        if first {
            self.changed_at = routed.keys().map(|k| (k.clone(), serial)).collect();
            self.carried = routed
                .keys()
                .filter(|k| !changed.contains(*k))
                .cloned()
                .collect();
        } else {
            for key in changed {
                if routed.contains_key(key) {
                    self.changed_at.insert(key.clone(), serial);
                } else {
                    self.changed_at.remove(key);
                }
            }
        }
        let desired: Vec<Arc<Desired>> = self
            .configured
            .iter()
            .map(|c| {
                Arc::new(fedingress_providers::publish::desired::desired(
                    serial,
                    routed.values(),
                    &c.delegated,
                ))
            })
            .collect();
        if first {
            self.spawn(desired);
        } else {
            for (running, desired) in self.running.iter().zip(desired) {
                running.desired.send_replace(desired);
            }
        }
        // The changed ingresses are Syncing now (or gone).
        for key in changed {
            self.carried.remove(key);
            for index in 0..self.configured.len() {
                self.entries.remove(&(index, key.clone()));
            }
        }
    }

    fn spawn(&mut self, desired: Vec<Arc<Desired>>) {
        for (index, (configured, desired)) in self.configured.iter().zip(desired).enumerate() {
            let config = &configured.config;
            let (tx, rx) = watch::channel(desired);
            let settings = SyncSettings {
                options: SyncOptions {
                    owner: self.owner.clone(),
                    dry_run: config.dry_run,
                    batch_size: config.batch_size,
                },
                debounce: SYNC_DEBOUNCE,
                resync_interval: Duration::from_secs(config.resync_interval_seconds),
            };
            let handle = fedingress_providers::publish::sync::spawn(
                configured.provider.clone(),
                settings,
                rx,
            );
            self.metrics.started(index, handle.state.clone());
            let mut state = handle.state.clone();
            let notify = self.notify_tx.clone();
            let forward = tokio::spawn(async move {
                while state.changed().await.is_ok() {
                    if notify.send(index).is_err() {
                        break;
                    }
                }
            });
            tracing::info!(provider = %config.name, kind = config.type_.as_str(), dry_run = config.dry_run, "DNS provider syncer started");
            self.running.push(Running {
                desired: tx,
                handle,
                forward,
            });
        }
    }

    /// Waits until a syncer reports (forever while none runs).
    pub async fn changed(&mut self) {
        match self.notify_rx.recv().await {
            Some(index) => {
                self.reported.insert(index);
            }
            None => std::future::pending::<()>().await,
        }
    }

    /// Takes what the syncers reported: the ingresses whose entries changed, and the
    /// Events to record. `routed`: every routed ingress.
    pub fn take_changes(
        &mut self,
        routed: &BTreeMap<IngressKey, RoutedIngress>,
    ) -> ProviderChanges {
        let mut reported = std::mem::take(&mut self.reported);
        while let Ok(index) = self.notify_rx.try_recv() {
            reported.insert(index);
        }
        let mut changes = ProviderChanges::default();
        for index in reported {
            let Some(running) = self.running.get(index) else {
                continue;
            };
            let state = running.handle.state.borrow().clone();
            self.absorb(index, state, routed, &mut changes);
        }
        // Ingresses no longer routed leave nothing behind.
        self.entries.retain(|(_, key), _| routed.contains_key(key));
        self.failing.retain(|(_, key), _| routed.contains_key(key));
        changes
    }

    /// Provider `index` reported `state`: its entries for the routed ingresses are
    /// updated, the changed ones and the Events to record added to `changes`.
    fn absorb(
        &mut self,
        index: usize,
        state: ProviderState,
        routed: &BTreeMap<IngressKey, RoutedIngress>,
        changes: &mut ProviderChanges,
    ) {
        let name = self.configured[index].config.name.clone();
        tracing::debug!(provider = %name, serial = ?state.observed_serial, error = ?state.error, changes = state.report.changes, "DNS provider reported");
        self.states[index] = Some(state);
        for (key, ingress) in routed {
            let slot = (index, key.clone());
            let Some(fresh) = self.entry(index, key, &ingress.dns_name) else {
                // Not (or no longer: the provider connected and knows its zone) its name.
                if self.entries.remove(&slot).is_some() {
                    changes.dirty.insert(key.clone());
                }
                self.failing.remove(&slot);
                continue;
            };
            if self
                .entries
                .get(&slot)
                .is_none_or(|old| !old.same_but_times(&fresh))
            {
                changes.dirty.insert(key.clone());
                self.entries.insert(slot.clone(), fresh.clone());
            }
            // Events on the transitions into and out of failing.
            let kind = self.configured[index].provider.kind();
            match (&fresh.readiness, self.failing.get(&slot)) {
                (ProviderReadiness::Failed(why), before) if before != Some(why) => {
                    changes.events.push(ProviderEvent {
                        ingress: key.clone(),
                        type_: "Warning",
                        reason: REASON_REJECTED,
                        message: format!(
                            "DNS provider {name} ({kind}) did not take the records of {}: {why}",
                            ingress.dns_name
                        ),
                    });
                    self.failing.insert(slot, why.clone());
                }
                (ProviderReadiness::Failed(_), _) => {}
                (ProviderReadiness::Syncing(_), _) => {}
                (_, Some(_)) => {
                    changes.events.push(ProviderEvent {
                        ingress: key.clone(),
                        type_: "Normal",
                        reason: REASON_RECOVERED,
                        message: format!(
                            "DNS provider {name} ({kind}) holds the records of {} again",
                            ingress.dns_name
                        ),
                    });
                    self.failing.remove(&slot);
                }
                _ => {}
            }
        }
    }

    /// The configured providers' entries for the ingress `key` serving `dns_name`, in
    /// config order (only providers that manage the name). `stored`: the ingress's
    /// stored `status.dns.providers`, carried over for an ingress unchanged since this
    /// replica took the lead until the provider's first sync reports.
    pub fn name_statuses(
        &mut self,
        key: &IngressKey,
        dns_name: &str,
        stored: &[DnsProviderStatus],
    ) -> Vec<ProviderNameStatus> {
        let mut out = Vec::new();
        for index in 0..self.configured.len() {
            let slot = (index, key.clone());
            if let Some(entry) = self.entries.get(&slot) {
                out.push(entry.clone());
            } else if let Some(entry) = self.entry(index, key, dns_name) {
                let entry = self.carried_over(index, key, stored).unwrap_or(entry);
                self.entries.insert(slot, entry.clone());
                out.push(entry);
            }
        }
        out
    }

    /// Provider `index`'s stored entry for `key`, when it stands (see `carried`).
    fn carried_over(
        &self,
        index: usize,
        key: &IngressKey,
        stored: &[DnsProviderStatus],
    ) -> Option<ProviderNameStatus> {
        if self.states[index].is_some() || !self.carried.contains(key) {
            return None;
        }
        let configured = &self.configured[index];
        let status = stored
            .iter()
            .find(|s| s.name == configured.config.name && s.type_ == configured.provider.kind())?
            .clone();
        let readiness = if status.dry_run {
            ProviderReadiness::DryRun
        } else if status.synced {
            ProviderReadiness::Synced
        } else if !status.message.is_empty() {
            ProviderReadiness::Failed(status.message.clone())
        } else {
            ProviderReadiness::Syncing("no sync has finished yet".into())
        };
        Some(ProviderNameStatus { status, readiness })
    }

    /// Provider `index`'s entry for `key` from its latest state; `None` when it does
    /// not manage `dns_name`.
    fn entry(&self, index: usize, key: &IngressKey, dns_name: &str) -> Option<ProviderNameStatus> {
        let configured = &self.configured[index];
        if dns_name.is_empty() || !configured.provider.manages(dns_name) {
            return None;
        }
        // Names inside a zone it delegates are the embedded server's, not its own.
        let delegated = configured.delegated.iter().any(|zone| {
            let apex = normalize(&zone.name);
            dns_name == apex || dns_name.ends_with(&format!(".{apex}"))
        });
        if delegated {
            return None;
        }
        Some(name_status(
            &configured.config,
            configured.provider.kind(),
            self.states[index].as_ref(),
            dns_name,
            self.changed_at.get(key).copied().or(self.serial),
        ))
    }
}

/// One provider's entry for one name, from its latest state: `changed_at` is the DNS
/// serial of the name's latest change (`None`: nothing published yet).
pub fn name_status(
    config: &ProviderConfig,
    kind: &str,
    state: Option<&ProviderState>,
    dns_name: &str,
    changed_at: Option<u32>,
) -> ProviderNameStatus {
    let mut status = DnsProviderStatus {
        name: config.name.clone(),
        type_: kind.to_string(),
        dry_run: config.dry_run,
        ..DnsProviderStatus::default()
    };
    let Some(state) = state else {
        return ProviderNameStatus {
            status,
            readiness: if config.dry_run {
                ProviderReadiness::DryRun
            } else {
                ProviderReadiness::Syncing("no sync has finished yet".into())
            },
        };
    };
    status.last_sync_time = state.last_sync_time.map(time_of);
    status.observed_serial = state.observed_serial.map(i64::from);
    let result: Option<&NameResult> = state.report.names.get(dns_name);
    if let Some(result) = result {
        status.records = result
            .records
            .iter()
            .map(|r| DnsProviderRecord {
                name: r.name.clone(),
                type_: r.type_.clone(),
                set_identifier: r.set_identifier.clone(),
                policy: r.policy.clone(),
                values: r.values.clone(),
                health_check: r.health_check.clone(),
            })
            .collect();
    }
    let covered = match (state.observed_serial, changed_at) {
        (Some(observed), Some(changed)) => serial_at_least(observed, changed),
        (Some(_), None) => true,
        (None, _) => false,
    };
    let failure = state.error.clone().or_else(|| {
        result
            .filter(|r| !r.synced && !r.message.is_empty())
            .map(|r| r.message.clone())
    });
    let readiness = if config.dry_run {
        // A dry run changes nothing, so nothing it reports holds DNSReady back (nor
        // makes a DNSProviderRejected Event): its own report of planned changes is no
        // failure, and a real one is only shown.
        let planned = result.map(|r| r.changes).unwrap_or_default();
        if let Some(why) = &state.error {
            status.message = why.clone();
        } else if covered && planned > 0 {
            status.message = format!("dry run: {planned} changes planned");
        } else if let Some(why) = failure.filter(|_| covered) {
            status.message = why;
        }
        status.synced = covered && status.message.is_empty();
        ProviderReadiness::DryRun
    } else if let Some(why) = failure {
        status.message = why.clone();
        ProviderReadiness::Failed(why)
    } else if !covered {
        let why = match (state.observed_serial, changed_at) {
            (Some(observed), Some(changed)) => {
                format!("has synced serial {observed}, not yet {changed}")
            }
            _ => "no sync has finished yet".to_string(),
        };
        ProviderReadiness::Syncing(why)
    } else {
        status.synced = result.is_none_or(|r| r.synced);
        if status.synced {
            ProviderReadiness::Synced
        } else {
            ProviderReadiness::Syncing("changes pending".into())
        }
    };
    ProviderNameStatus { status, readiness }
}

/// RFC 1982 serial arithmetic: `a` is `b` or after it.
fn serial_at_least(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) < (1 << 31)
}

/// Whole seconds, as stored: a status computed again compares equal to the stored one.
fn time_of(at: SystemTime) -> Time {
    Time::new(chrono::DateTime::<chrono::Utc>::from(at))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::IpAddr;

    use fedingress_api::ingress::{
        CONDITION_DNS_READY, FederatedIngressStatus, Strategy, StrategyType, Traffic,
    };
    use fedingress_dns::location::Locator;
    use fedingress_dns::zone::{NameserverConfig, Snapshot, SoaConfig};
    use fedingress_dns::{ClusterView, Location};
    use fedingress_providers::publish::PublishedRecord;

    use super::*;
    use crate::controller::decide::dns_status;

    fn config(yaml: &str) -> ProviderConfig {
        yaml_serde::from_str(yaml).unwrap()
    }

    fn aws() -> ProviderConfig {
        config("{name: aws, type: route53, zone: Z1}")
    }

    fn state(serial: u32, names: &[(&str, NameResult)], error: Option<&str>) -> ProviderState {
        ProviderState {
            name: "aws".into(),
            kind: "route53",
            dry_run: false,
            observed_serial: Some(serial),
            last_sync_time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
            error: error.map(str::to_string),
            report: fedingress_providers::publish::SyncReport {
                names: names
                    .iter()
                    .map(|(n, r)| (n.to_string(), r.clone()))
                    .collect(),
                ..Default::default()
            },
            ..ProviderState::default()
        }
    }

    fn synced_result() -> NameResult {
        NameResult {
            synced: true,
            message: String::new(),
            records: vec![PublishedRecord {
                name: "shop.test".into(),
                type_: "A".into(),
                set_identifier: "eu".into(),
                policy: "weighted 1".into(),
                values: vec!["192.0.2.1".into()],
                health_check: "hc-1".into(),
            }],
            changes: 1,
        }
    }

    /// A snapshot serving `shop.test` from one healthy cluster.
    fn served() -> Snapshot {
        let place = Location {
            region: "eu".into(),
            latitude: 50.0,
            longitude: 8.0,
        };
        let zones = vec![ZoneConfig {
            name: "test".into(),
            nameservers: vec![NameserverConfig {
                name: "ns.test".into(),
                addresses: vec!["192.0.2.53".parse().unwrap()],
            }],
            soa: SoaConfig::default(),
            ttl: 3600,
        }];
        let routed = served_routed();
        let locator = Locator::new(Vec::new(), place, None).unwrap();
        Snapshot::build(&zones, 7, &[routed], Arc::new(locator)).0
    }

    fn served_routed() -> RoutedIngress {
        let place = Location {
            region: "eu".into(),
            latitude: 50.0,
            longitude: 8.0,
        };
        RoutedIngress {
            ingress: "default/shop".into(),
            dns_name: "shop.test".into(),
            traffic: Traffic {
                strategy: Strategy {
                    type_: StrategyType::RoundRobin,
                    ..Strategy::default()
                },
                ..Traffic::default()
            },
            clusters: vec![ClusterView {
                name: "eu".into(),
                location: place.clone(),
                healthy: true,
                cordoned: false,
                ips: vec!["192.0.2.1".parse::<IpAddr>().unwrap()],
                hostnames: Vec::new(),
                load: 0.0,
                capacity: None,
                cloud: Default::default(),
                anycast: Vec::new(),
            }],
            srv: Vec::new(),
            failover: Default::default(),
            health_port: None,
        }
    }

    fn dns_ready(providers: &[ProviderNameStatus]) -> (FederatedIngressStatus, String, String) {
        let mut status = FederatedIngressStatus::default();
        let now = Time::new(chrono::Utc::now());
        dns_status(&mut status, "shop.test", None, &served(), providers, 1, now);
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_DNS_READY)
            .unwrap();
        let (reason, message) = (ready.reason.clone(), ready.message.clone());
        (status, reason, message)
    }

    #[test]
    fn a_sync_that_covers_the_change_is_synced_with_its_records() {
        let entry = name_status(
            &aws(),
            "route53",
            Some(&state(9, &[("shop.test", synced_result())], None)),
            "shop.test",
            Some(8),
        );
        assert_eq!(entry.readiness, ProviderReadiness::Synced);
        assert!(entry.status.synced);
        assert_eq!(entry.status.observed_serial, Some(9));
        assert_eq!(entry.status.type_, "route53");
        assert_eq!(entry.status.records[0].set_identifier, "eu");
        assert_eq!(entry.status.records[0].health_check, "hc-1");
        assert!(entry.status.last_sync_time.is_some());

        let (status, reason, message) = dns_ready(&[entry]);
        assert_eq!(reason, "Served", "{message}");
        assert!(message.contains("synced to aws"), "{message}");
        let providers = &status.dns.unwrap().providers;
        assert_eq!(providers[0].name, "embedded");
        assert!(providers[0].synced);
        assert_eq!(providers[1].name, "aws");
    }

    #[test]
    fn a_provider_behind_the_change_is_syncing() {
        let entry = name_status(
            &aws(),
            "route53",
            Some(&state(7, &[("shop.test", synced_result())], None)),
            "shop.test",
            Some(8),
        );
        assert!(matches!(entry.readiness, ProviderReadiness::Syncing(_)));
        assert!(!entry.status.synced);
        let (_, reason, message) = dns_ready(&[entry]);
        assert_eq!(reason, "Syncing");
        assert!(
            message.contains("provider aws: has synced serial 7, not yet 8"),
            "{message}"
        );
        // Nothing finished yet.
        let entry = name_status(&aws(), "route53", None, "shop.test", Some(8));
        assert_eq!(dns_ready(&[entry]).1, "Syncing");
        // Serial arithmetic across the wrap.
        let entry = name_status(
            &aws(),
            "route53",
            Some(&state(3, &[("shop.test", synced_result())], None)),
            "shop.test",
            Some(u32::MAX - 1),
        );
        assert_eq!(entry.readiness, ProviderReadiness::Synced);
    }

    #[test]
    fn a_rejection_is_not_synced_and_names_the_provider() {
        let rejected = NameResult {
            synced: false,
            message: "ChangeResourceRecordSets: rejected by the provider: InvalidChangeBatch"
                .into(),
            ..NameResult::default()
        };
        let entry = name_status(
            &aws(),
            "route53",
            Some(&state(9, &[("shop.test", rejected)], None)),
            "shop.test",
            Some(9),
        );
        assert!(!entry.status.synced);
        assert!(entry.status.message.contains("InvalidChangeBatch"));
        let (status, reason, message) = dns_ready(&[entry]);
        assert_eq!(reason, "ProviderNotSynced");
        assert!(
            message.contains("served by the embedded DNS server")
                && message.contains("provider aws: ChangeResourceRecordSets"),
            "{message}"
        );
        // The embedded server's answers are still in status.
        assert!(!status.dns.unwrap().records.is_empty());
        // A whole-sync error (an unknown hosted zone) fails every name it manages.
        let entry = name_status(
            &aws(),
            "route53",
            Some(&state(
                9,
                &[],
                Some("ListResourceRecordSets: NoSuchHostedZone"),
            )),
            "shop.test",
            Some(9),
        );
        assert_eq!(
            entry.readiness,
            ProviderReadiness::Failed("ListResourceRecordSets: NoSuchHostedZone".into())
        );
        assert_eq!(dns_ready(&[entry]).1, "ProviderNotSynced");
    }

    #[test]
    fn a_failure_wins_over_syncing_and_dry_runs_do_not_hold_dns_ready() {
        let failed = name_status(
            &config("{name: gcp, type: clouddns, zone: z, project: p}"),
            "clouddns",
            Some(&state(9, &[], Some("forbidden"))),
            "shop.test",
            Some(9),
        );
        let syncing = name_status(&aws(), "route53", None, "shop.test", Some(9));
        let (_, reason, message) = dns_ready(&[syncing, failed]);
        assert_eq!(reason, "ProviderNotSynced");
        assert!(message.contains("provider gcp: forbidden"), "{message}");

        // A dry run's report, as the providers write it (mark_dry_run): not synced, with
        // its planned changes as the message. No failure: it never holds DNSReady back.
        let dry = config("{name: aws, type: route53, zone: Z1, dryRun: true}");
        let mut result = synced_result();
        result.synced = false;
        result.changes = 3;
        result.message = "dry run: 3 change(s) planned, none made".into();
        let entry = name_status(
            &dry,
            "route53",
            Some(&state(9, &[("shop.test", result)], None)),
            "shop.test",
            Some(9),
        );
        assert_eq!(entry.readiness, ProviderReadiness::DryRun);
        assert!(entry.status.dry_run && !entry.status.synced);
        assert_eq!(entry.status.message, "dry run: 3 changes planned");
        assert_eq!(dns_ready(&[entry]).1, "Served");
        // Nothing planned: in sync. A whole-sync failure is shown, and still not counted.
        let mut result = synced_result();
        result.changes = 0;
        let entry = name_status(
            &dry,
            "route53",
            Some(&state(9, &[("shop.test", result)], None)),
            "shop.test",
            Some(9),
        );
        assert!(entry.status.synced && entry.status.message.is_empty());
        let entry = name_status(
            &dry,
            "route53",
            Some(&state(9, &[], Some("NoSuchHostedZone"))),
            "shop.test",
            Some(9),
        );
        assert_eq!(entry.readiness, ProviderReadiness::DryRun);
        assert_eq!(entry.status.message, "NoSuchHostedZone");
        assert_eq!(dns_ready(&[entry]).1, "Served");
    }

    #[test]
    fn without_providers_status_is_the_embedded_server_alone() {
        let (status, reason, message) = dns_ready(&[]);
        assert_eq!(reason, "Served");
        assert_eq!(message, "shop.test is served by the embedded DNS server");
        assert_eq!(status.dns.unwrap().providers.len(), 1);
    }

    /// `DNSReady` and the provider list of `shop.example.com`, outside the snapshot's
    /// zone `test`, with the embedded server's problem for it.
    fn outside_ready(providers: &[ProviderNameStatus]) -> (Vec<String>, String, String) {
        let mut status = FederatedIngressStatus::default();
        let now = Time::new(chrono::Utc::now());
        let problems = vec!["dnsName shop.example.com is outside every configured zone".into()];
        let name = "shop.example.com";
        dns_status(
            &mut status,
            name,
            Some(&problems),
            &served(),
            providers,
            1,
            now,
        );
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_DNS_READY)
            .unwrap();
        let listed = status.dns.as_ref().unwrap().providers.iter();
        let listed = listed.map(|p| p.name.clone()).collect();
        (listed, ready.reason.clone(), ready.message.clone())
    }

    #[test]
    fn a_name_outside_the_embedded_zones_is_ready_once_its_providers_hold_it() {
        let name = "shop.example.com";
        let mut result = synced_result();
        result.records[0].name = name.into();
        let synced = name_status(
            &aws(),
            "route53",
            Some(&state(9, &[(name, result)], None)),
            name,
            Some(9),
        );
        let (listed, reason, message) = outside_ready(std::slice::from_ref(&synced));
        assert_eq!(listed, ["aws"], "the embedded server does not serve it");
        assert_eq!(reason, "Served", "{message}");
        assert!(
            message.contains("published by aws") && message.contains("outside"),
            "{message}"
        );
        // A dry run beside it does not count.
        let dry = config("{name: gcp, type: clouddns, zone: z, project: p, dryRun: true}");
        let dry = name_status(&dry, "clouddns", None, name, Some(9));
        assert_eq!(outside_ready(&[synced, dry.clone()]).1, "Served");
        // Not caught up yet, or failed: not ready.
        let behind = name_status(&aws(), "route53", None, name, Some(9));
        assert_eq!(outside_ready(&[behind]).1, "Syncing");
        let failed = name_status(
            &aws(),
            "route53",
            Some(&state(9, &[], Some("denied"))),
            name,
            Some(9),
        );
        let (_, reason, message) = outside_ready(&[failed]);
        assert_eq!(reason, "ProviderNotSynced");
        assert!(message.contains("provider aws: denied"), "{message}");
        // Synced, holding nothing (no cluster answers): not served.
        let nothing = name_status(&aws(), "route53", Some(&state(9, &[], None)), name, Some(9));
        assert_eq!(outside_ready(&[nothing]).1, "NotServed");
        // Only a dry run manages it: nobody publishes it, the embedded server's words.
        let (listed, reason, message) = outside_ready(&[dry]);
        assert_eq!(listed, ["embedded", "gcp"]);
        assert_eq!(reason, "NotServed");
        assert!(
            message.contains("outside every configured zone"),
            "{message}"
        );
    }

    /// A provider that manages `*.test` and is never synced here.
    struct Named;

    #[async_trait::async_trait]
    impl DnsProvider for Named {
        fn name(&self) -> &str {
            "aws"
        }
        fn kind(&self) -> &'static str {
            "route53"
        }
        fn manages(&self, name: &str) -> bool {
            name.ends_with(".test")
        }
        async fn sync(
            &self,
            _desired: &[&fedingress_providers::publish::PolicyRecordSet],
            _options: &SyncOptions,
        ) -> Result<
            fedingress_providers::publish::SyncReport,
            fedingress_providers::publish::ProviderError,
        > {
            unreachable!("not synced in these tests")
        }
        fn explain(&self, _records: &[PublishedRecord], _client: &Location) -> String {
            String::new()
        }
    }

    #[test]
    fn rejections_and_recoveries_are_events_once_and_mark_the_ingress_dirty() {
        let mut set = ProviderSet::new(vec![(aws(), Arc::new(Named))], "prod", &[]);
        let key = IngressKey::new("default", "shop");
        let other = IngressKey::new("default", "elsewhere");
        let mut routed = BTreeMap::new();
        let mut shop = served_routed();
        shop.dns_name = "shop.test".into();
        routed.insert(key.clone(), shop.clone());
        let mut foreign = shop.clone();
        foreign.dns_name = "shop.example.org".into();
        routed.insert(other.clone(), foreign);
        set.changed_at.insert(key.clone(), 9);
        set.serial = Some(9);

        let mut changes = ProviderChanges::default();
        set.absorb(
            0,
            state(9, &[], Some("NoSuchHostedZone")),
            &routed,
            &mut changes,
        );
        assert_eq!(
            changes.dirty,
            BTreeSet::from([key.clone()]),
            "only the managed name"
        );
        assert_eq!(changes.events.len(), 1);
        assert_eq!(changes.events[0].reason, REASON_REJECTED);
        assert_eq!(changes.events[0].type_, "Warning");
        assert!(
            changes.events[0].message.contains(
                "DNS provider aws (route53) did not take the records of shop.test: NoSuchHostedZone"
            ),
            "{}",
            changes.events[0].message
        );
        assert!(
            set.name_statuses(&other, "shop.example.org", &[])
                .is_empty()
        );

        // The same failure again (a resync): no new event, status unchanged.
        let mut changes = ProviderChanges::default();
        set.absorb(
            0,
            state(10, &[], Some("NoSuchHostedZone")),
            &routed,
            &mut changes,
        );
        assert!(
            changes.events.is_empty() && changes.dirty.is_empty(),
            "{changes:?}"
        );

        // Recovered.
        let mut changes = ProviderChanges::default();
        set.absorb(
            0,
            state(11, &[("shop.test", synced_result())], None),
            &routed,
            &mut changes,
        );
        assert_eq!(changes.dirty, BTreeSet::from([key.clone()]));
        assert_eq!(changes.events.len(), 1);
        assert_eq!(changes.events[0].reason, REASON_RECOVERED);
        let entries = set.name_statuses(&key, "shop.test", &[]);
        assert_eq!(entries.len(), 1);
        assert!(entries[0].status.synced);
        assert_eq!(entries[0].status.observed_serial, Some(11));

        // A resync that changes nothing: the entry keeps the serial that made it.
        let mut changes = ProviderChanges::default();
        set.absorb(
            0,
            state(15, &[("shop.test", synced_result())], None),
            &routed,
            &mut changes,
        );
        assert!(changes.dirty.is_empty() && changes.events.is_empty());
        assert_eq!(
            set.name_statuses(&key, "shop.test", &[])[0]
                .status
                .observed_serial,
            Some(11)
        );

        // Losing the lead forgets everything the syncers said.
        set.leading = true;
        set.follow();
        assert!(matches!(
            set.name_statuses(&key, "shop.test", &[])[0].readiness,
            ProviderReadiness::Syncing(_)
        ));
    }

    /// A provider that holds whatever it is asked to, and remembers what that was.
    #[derive(Default)]
    struct Recording {
        name: &'static str,
        synced: std::sync::Mutex<Vec<Vec<(String, fedingress_api::ingress::RecordType)>>>,
    }

    #[async_trait::async_trait]
    impl DnsProvider for Recording {
        fn name(&self) -> &str {
            self.name
        }
        fn kind(&self) -> &'static str {
            "route53"
        }
        fn manages(&self, _name: &str) -> bool {
            true
        }
        async fn sync(
            &self,
            desired: &[&PolicyRecordSet],
            _options: &SyncOptions,
        ) -> Result<SyncReport, ProviderError> {
            self.synced
                .lock()
                .unwrap()
                .push(desired.iter().map(|r| (r.name.clone(), r.type_)).collect());
            let mut report = SyncReport::default();
            for set in desired {
                report.names.insert(
                    set.dns_name.clone(),
                    NameResult {
                        synced: true,
                        ..NameResult::default()
                    },
                );
            }
            Ok(report)
        }
        fn explain(&self, _records: &[PublishedRecord], _client: &Location) -> String {
            String::new()
        }
    }

    /// Waits for the next report of a syncer (a hang guard, not a timing assertion).
    async fn next_report(set: &mut ProviderSet) {
        tokio::time::timeout(Duration::from_secs(30), set.changed())
            .await
            .expect("a syncer reports");
    }

    #[tokio::test]
    async fn only_a_leader_syncs_and_each_provider_gets_its_own_delegations() {
        let zone = ZoneConfig {
            name: "gslb.test".into(),
            nameservers: vec![NameserverConfig {
                name: "ns1.gslb.test".into(),
                addresses: vec!["192.0.2.53".parse().unwrap()],
            }],
            soa: SoaConfig::default(),
            ttl: 3600,
        };
        let delegating = Arc::new(Recording {
            name: "parent",
            ..Recording::default()
        });
        let plain = Arc::new(Recording {
            name: "aws",
            ..Recording::default()
        });
        let mut parent_config =
            config("{name: parent, type: route53, zone: Z2, delegate: [gslb.test]}");
        parent_config.resync_interval_seconds = 3600;
        let mut aws_config = aws();
        aws_config.resync_interval_seconds = 3600;
        let mut set = ProviderSet::new(
            vec![
                (parent_config, delegating.clone() as Arc<dyn DnsProvider>),
                (aws_config, plain.clone() as Arc<dyn DnsProvider>),
            ],
            "prod",
            std::slice::from_ref(&zone),
        );
        let key = IngressKey::new("default", "shop");
        let routed = BTreeMap::from([(key.clone(), served_routed())]);
        let changed = BTreeSet::from([key.clone()]);

        // A follower publishes nothing and runs no syncer.
        set.publish(5, &routed, &changed);
        assert!(set.running.is_empty());

        set.lead();
        set.publish(6, &routed, &changed);
        assert_eq!(set.running.len(), 2);
        let entries = set.name_statuses(&key, "shop.test", &[]);
        assert!(
            entries
                .iter()
                .all(|e| matches!(e.readiness, ProviderReadiness::Syncing(_))),
            "{entries:?}"
        );
        // Both syncers report (in either order).
        let mut changes = ProviderChanges::default();
        while set.states.iter().any(Option::is_none) {
            next_report(&mut set).await;
            let more = set.take_changes(&routed);
            changes.dirty.extend(more.dirty);
        }
        assert_eq!(changes.dirty, BTreeSet::from([key.clone()]));
        let entries = set.name_statuses(&key, "shop.test", &[]);
        assert_eq!(entries.len(), 2, "{entries:?}");
        for entry in &entries {
            assert_eq!(entry.readiness, ProviderReadiness::Synced, "{entry:?}");
            assert_eq!(entry.status.observed_serial, Some(6));
        }
        use fedingress_api::ingress::RecordType;
        let parent_got = delegating.synced.lock().unwrap().last().cloned().unwrap();
        assert!(
            parent_got.contains(&("gslb.test".to_string(), RecordType::Ns))
                && parent_got.contains(&("ns1.gslb.test".to_string(), RecordType::A)),
            "the delegation of its zone, with glue: {parent_got:?}"
        );
        let plain_got = plain.synced.lock().unwrap().last().cloned().unwrap();
        assert!(
            plain_got.iter().all(|(_, t)| *t != RecordType::Ns),
            "no delegation it was not given: {plain_got:?}"
        );
        assert!(plain_got.contains(&("shop.test".to_string(), RecordType::A)));

        // Metrics read the syncers' states.
        let metrics = set.metrics();
        let samples = metrics.samples();
        assert_eq!(samples.len(), 2);
        for sample in &samples {
            assert_eq!(
                (sample.totals.ok, sample.totals.failed),
                (1, 0),
                "{sample:?}"
            );
            assert_eq!(sample.observed_serial, Some(6));
            assert_eq!(sample.names_not_synced, Some(0));
            assert!(sample.last_sync_time.is_some());
        }
        assert_eq!(
            (samples[0].name.as_str(), samples[0].kind),
            ("parent", "route53")
        );

        // Losing the lead stops the syncers; publishing then does nothing.
        set.follow();
        assert!(set.running.is_empty());
        set.publish(7, &routed, &changed);
        assert!(set.running.is_empty());
        // The counters keep what the stopped syncers did; their latest sync is forgotten.
        for sample in metrics.samples() {
            assert_eq!(sample.totals.ok, 1, "{sample:?}");
            assert_eq!(
                (sample.observed_serial, sample.names_not_synced),
                (None, None)
            );
        }
    }

    #[tokio::test]
    async fn a_new_leader_keeps_the_stored_entries_until_its_first_sync() {
        let provider = Arc::new(Recording {
            name: "aws",
            ..Recording::default()
        });
        let mut set =
            ProviderSet::new(vec![(aws(), provider as Arc<dyn DnsProvider>)], "prod", &[]);
        let key = IngressKey::new("default", "shop");
        let routed = BTreeMap::from([(key.clone(), served_routed())]);
        let stored = vec![
            DnsProviderStatus {
                name: "embedded".into(),
                synced: true,
                ..DnsProviderStatus::default()
            },
            DnsProviderStatus {
                name: "aws".into(),
                type_: "route53".into(),
                synced: true,
                observed_serial: Some(3),
                ..DnsProviderStatus::default()
            },
        ];
        set.lead();
        // Nothing changed in the first pass: what the predecessor wrote stands.
        set.publish(6, &routed, &BTreeSet::new());
        let entries = set.name_statuses(&key, "shop.test", &stored);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].readiness, ProviderReadiness::Synced);
        assert_eq!(entries[0].status.observed_serial, Some(3));
        // The first sync finds the same: no status to rewrite.
        next_report(&mut set).await;
        let changes = set.take_changes(&routed);
        assert!(changes.dirty.is_empty(), "{changes:?}");
        assert_eq!(
            set.name_statuses(&key, "shop.test", &stored)[0]
                .status
                .observed_serial,
            Some(3)
        );
        // A changed ingress does not carry its old entry.
        let mut other = ProviderSet::new(
            vec![(aws(), Arc::new(Named) as Arc<dyn DnsProvider>)],
            "prod",
            &[],
        );
        other.lead();
        other.carried.clear();
        let entries = other.name_statuses(&key, "shop.test", &stored);
        assert!(matches!(
            entries[0].readiness,
            ProviderReadiness::Syncing(_)
        ));
    }

    #[test]
    fn resyncs_that_change_nothing_leave_the_entry_as_it_was() {
        let a = name_status(
            &aws(),
            "route53",
            Some(&state(9, &[("shop.test", synced_result())], None)),
            "shop.test",
            Some(9),
        );
        let mut later = state(12, &[("shop.test", synced_result())], None);
        later.last_sync_time = Some(SystemTime::now());
        let b = name_status(&aws(), "route53", Some(&later), "shop.test", Some(9));
        assert_ne!(a, b);
        assert!(a.same_but_times(&b));
    }
}
