//! The sync loop of one provider: a task that brings the provider to the latest
//! [`Desired`] and reports how it went.
//!
//! When it syncs:
//!
//! - at start;
//! - after `desired` changes, debounced: the first change opens a window of
//!   [`SyncSettings::debounce`], every change within it joins the same sync (a health
//!   flap touching many names is one sync, not one per name);
//! - every [`SyncSettings::resync_interval`] after the last successful sync, to repair
//!   drift someone introduced by hand (the diff restores owned record sets);
//! - after a failed sync (the provider returned `Err`: nothing could be done, e.g. the
//!   zone was unreadable), again after a backoff doubling from [`RETRY_BASE`] up to
//!   [`RETRY_MAX`] (or the resync interval, if shorter);
//! - on [`SyncHandle::resync_now`].
//!
//! Per-name failures are not sync failures: they are in [`ProviderState::report`], and
//! are retried on the next change or resync (the call policy already retried throttling
//! and transient errors within the sync).
//!
//! Each provider has its own task, and the provider's `sync` runs in a task of its own
//! again, so a provider that fails, hangs or panics never delays the embedded server or
//! another provider; a panic is reported as that provider's error.
//!
//! Status readers watch [`SyncHandle::state`]; it changes after every sync.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, info, info_span, warn};

use super::{Desired, DnsProvider, PolicyRecordSet, SyncOptions, SyncReport};

/// The first wait after a failed sync.
pub const RETRY_BASE: Duration = Duration::from_secs(5);
/// The longest wait after failed syncs.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// How one provider's loop runs.
#[derive(Clone, Debug)]
pub struct SyncSettings {
    pub options: SyncOptions,
    /// The window after a change of `desired` during which further changes join the
    /// same sync.
    pub debounce: Duration,
    /// Time between successful syncs without changes (drift repair).
    pub resync_interval: Duration,
}

/// What one provider's loop last did, for status and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderState {
    /// [`DnsProvider::name`].
    pub name: String,
    /// [`DnsProvider::kind`].
    pub kind: &'static str,
    pub dry_run: bool,
    /// The [`Desired::serial`] of the last sync that returned `Ok`.
    pub observed_serial: Option<u32>,
    /// When the last sync that returned `Ok` ended.
    pub last_sync_time: Option<SystemTime>,
    /// Why the last sync failed as a whole; `None` after one that returned `Ok`.
    pub error: Option<String>,
    /// The last successful sync's report (kept through later failed syncs).
    pub report: SyncReport,
    /// Syncs run, failed ones included.
    pub syncs: u64,
    /// Syncs that failed as a whole (part of `syncs`).
    pub failed_syncs: u64,
    /// Failed syncs in a row.
    pub consecutive_failures: u32,
    /// Record changes of all successful syncs ([`SyncReport::changes`]: planned ones, on
    /// a dry run).
    pub changes_total: u64,
    /// Health-check changes of all successful syncs
    /// ([`SyncReport::health_checks_changed`]).
    pub health_checks_changed_total: u64,
}

/// A running loop; dropping it stops the loop (and a sync in flight).
#[derive(Debug)]
pub struct SyncHandle {
    pub state: watch::Receiver<ProviderState>,
    resync: Arc<Notify>,
    task: JoinHandle<()>,
}

impl SyncHandle {
    /// Sync as soon as the current sync (if any) is done, without waiting for a change
    /// or the resync interval.
    pub fn resync_now(&self) {
        self.resync.notify_one();
    }
}

impl Drop for SyncHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Aborts a task when dropped (the loop's sync in flight, when the loop is aborted).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts `provider`'s loop over the [`Desired`] values of `desired`.
pub fn spawn(
    provider: Arc<dyn DnsProvider>,
    settings: SyncSettings,
    desired: watch::Receiver<Arc<Desired>>,
) -> SyncHandle {
    let initial = ProviderState {
        name: provider.name().to_owned(),
        kind: provider.kind(),
        dry_run: settings.options.dry_run,
        ..ProviderState::default()
    };
    let (state_tx, state) = watch::channel(initial);
    let resync = Arc::new(Notify::new());
    let task = tokio::spawn(run(provider, settings, desired, state_tx, resync.clone()));
    SyncHandle {
        state,
        resync,
        task,
    }
}

async fn run(
    provider: Arc<dyn DnsProvider>,
    settings: SyncSettings,
    mut desired: watch::Receiver<Arc<Desired>>,
    state: watch::Sender<ProviderState>,
    resync: Arc<Notify>,
) {
    let mut next = Instant::now();
    let mut failures: u32 = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = resync.notified() => {}
            changed = desired.changed() => {
                if changed.is_err() {
                    info!(provider = provider.name(), "desired DNS state closed: provider sync loop stops");
                    return;
                }
                // Debounce: every change within the window joins this sync.
                let window = tokio::time::sleep(settings.debounce);
                tokio::pin!(window);
                loop {
                    tokio::select! {
                        () = &mut window => break,
                        changed = desired.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
        let current = desired.borrow_and_update().clone();
        let result = sync_once(&provider, &settings.options, current.clone()).await;
        let now = Instant::now();
        match result {
            Ok(report) => {
                failures = 0;
                next = now + settings.resync_interval;
                state.send_modify(|s| {
                    s.observed_serial = Some(current.serial);
                    s.last_sync_time = Some(SystemTime::now());
                    s.error = None;
                    s.changes_total += u64::try_from(report.changes).unwrap_or(u64::MAX);
                    s.health_checks_changed_total +=
                        u64::try_from(report.health_checks_changed).unwrap_or(u64::MAX);
                    s.report = report;
                    s.syncs += 1;
                    s.consecutive_failures = 0;
                });
            }
            Err(error) => {
                failures = failures.saturating_add(1);
                let wait = retry_wait(failures, settings.resync_interval);
                warn!(provider = provider.name(), serial = current.serial, failures, retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), %error, "DNS provider sync failed");
                next = now + wait;
                state.send_modify(|s| {
                    s.error = Some(error);
                    s.syncs += 1;
                    s.failed_syncs += 1;
                    s.consecutive_failures = failures;
                });
            }
        }
    }
}

/// One sync in a task of its own (a panic becomes an error).
async fn sync_once(
    provider: &Arc<dyn DnsProvider>,
    options: &SyncOptions,
    desired: Arc<Desired>,
) -> Result<SyncReport, String> {
    let span = info_span!(
        "dns_provider_sync",
        provider = provider.name(),
        kind = provider.kind(),
        serial = desired.serial,
        dry_run = options.dry_run
    );
    let task = {
        let provider = provider.clone();
        let options = options.clone();
        tokio::spawn(
            async move {
                let records: Vec<&PolicyRecordSet> = desired.for_provider(&*provider).collect();
                provider.sync(&records, &options).await
            }
            .instrument(span.clone()),
        )
    };
    let mut task = AbortOnDrop(task);
    let result = match (&mut task.0).await {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(error)) => Err(error.to_string()),
        Err(join) => Err(format!(
            "the {} provider's sync {}",
            provider.kind(),
            if join.is_panic() {
                "panicked"
            } else {
                "was cancelled"
            }
        )),
    };
    if let Ok(report) = &result {
        let unsynced = report.names.values().filter(|n| !n.synced).count();
        span.in_scope(|| {
            info!(
                changes = report.changes,
                health_checks_changed = report.health_checks_changed,
                names = report.names.len(),
                unsynced,
                "DNS provider synced"
            );
        });
    }
    result
}

/// The wait after `failures` failed syncs in a row.
fn retry_wait(failures: u32, resync_interval: Duration) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    RETRY_BASE
        .saturating_mul(factor)
        .min(RETRY_MAX)
        .min(resync_interval.max(Duration::from_millis(1)))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use fedingress_api::ingress::RecordType;

    use super::*;
    use crate::publish::{NameResult, Owner, Policy, ProviderError, PublishedRecord, Target};
    use fedingress_dns::Location;

    /// A test double of the trait: remembers what each sync was asked, fails while told
    /// to.
    struct Memory {
        name: String,
        suffix: String,
        /// (serial-less) names of the record sets each sync got.
        seen: Mutex<Vec<Vec<String>>>,
        fail: Mutex<u32>,
        panic: bool,
    }

    impl Memory {
        fn new(name: &str, suffix: &str) -> Arc<Self> {
            Arc::new(Memory {
                name: name.to_owned(),
                suffix: suffix.to_owned(),
                seen: Mutex::new(Vec::new()),
                fail: Mutex::new(0),
                panic: false,
            })
        }

        fn syncs(&self) -> usize {
            self.seen.lock().unwrap().len()
        }
    }

    #[async_trait::async_trait]
    impl DnsProvider for Memory {
        fn name(&self) -> &str {
            &self.name
        }
        fn kind(&self) -> &'static str {
            "memory"
        }
        fn manages(&self, name: &str) -> bool {
            name.ends_with(&self.suffix)
        }
        async fn sync(
            &self,
            desired: &[&PolicyRecordSet],
            options: &SyncOptions,
        ) -> Result<SyncReport, ProviderError> {
            assert!(!self.panic, "provider bug");
            self.seen
                .lock()
                .unwrap()
                .push(desired.iter().map(|r| r.name.clone()).collect());
            {
                let mut fail = self.fail.lock().unwrap();
                if *fail > 0 {
                    *fail -= 1;
                    return Err(ProviderError::Transient {
                        operation: "ListResourceRecordSets".into(),
                        message: "zone unreadable".into(),
                    });
                }
            }
            let mut report = SyncReport {
                dry_run: options.dry_run,
                ..SyncReport::default()
            };
            for r in desired {
                report.names.insert(
                    r.dns_name.clone(),
                    NameResult {
                        synced: true,
                        message: String::new(),
                        records: vec![PublishedRecord {
                            name: r.name.clone(),
                            type_: r.type_.to_string(),
                            policy: "simple".into(),
                            ..PublishedRecord::default()
                        }],
                        changes: 1,
                    },
                );
            }
            Ok(report)
        }
        fn explain(&self, _: &[PublishedRecord], _: &Location) -> String {
            String::new()
        }
    }

    fn set(name: &str) -> PolicyRecordSet {
        PolicyRecordSet {
            name: name.to_owned(),
            type_: RecordType::A,
            ttl: 30,
            owner_ref: "ns/x".to_owned(),
            dns_name: name.to_owned(),
            policy: Policy::Simple,
            targets: vec![Target {
                cluster: "a".to_owned(),
                values: vec!["192.0.2.1".to_owned()],
                hostname: None,
                weight: 1,
                tier: 0,
                location: Location {
                    region: String::new(),
                    latitude: 0.0,
                    longitude: 0.0,
                },
                cloud: Default::default(),
                health: None,
            }],
        }
    }

    fn desired(serial: u32, names: &[&str]) -> Arc<Desired> {
        Arc::new(Desired {
            serial,
            record_sets: names.iter().map(|n| set(n)).collect(),
        })
    }

    fn settings(resync: Duration) -> SyncSettings {
        SyncSettings {
            options: SyncOptions {
                owner: Owner::new("hub-1"),
                dry_run: false,
                batch_size: 100,
            },
            debounce: Duration::from_millis(500),
            resync_interval: resync,
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    async fn wait_for(handle: &SyncHandle, what: impl Fn(&ProviderState) -> bool) -> ProviderState {
        let mut state = handle.state.clone();
        state.wait_for(|s| what(s)).await.unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn syncs_at_start_only_what_the_provider_manages() {
        let provider = Memory::new("aws", "example.com");
        let (_tx, rx) = tokio::sync::watch::channel(desired(3, &["a.example.com", "b.other.org"]));
        let handle = spawn(provider.clone(), settings(HOUR), rx);
        let state = wait_for(&handle, |s| s.syncs == 1).await;
        assert_eq!((state.name.as_str(), state.kind), ("aws", "memory"));
        assert_eq!(state.observed_serial, Some(3));
        assert!(state.last_sync_time.is_some() && state.error.is_none());
        assert!(state.report.names["a.example.com"].synced);
        assert_eq!(
            *provider.seen.lock().unwrap(),
            vec![vec!["a.example.com".to_owned()]]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_one_sync() {
        let provider = Memory::new("aws", "example.com");
        let (tx, rx) = tokio::sync::watch::channel(desired(1, &["a.example.com"]));
        let handle = spawn(provider.clone(), settings(HOUR), rx);
        wait_for(&handle, |s| s.syncs == 1).await;
        for serial in 2..=6 {
            tx.send_replace(desired(serial, &["a.example.com", "b.example.com"]));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let state = wait_for(&handle, |s| s.observed_serial == Some(6)).await;
        assert_eq!(state.syncs, 2);
        assert_eq!(provider.syncs(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn resyncs_periodically_and_on_demand() {
        let provider = Memory::new("aws", "example.com");
        let (_tx, rx) = tokio::sync::watch::channel(desired(1, &["a.example.com"]));
        let handle = spawn(provider.clone(), settings(Duration::from_secs(60)), rx);
        wait_for(&handle, |s| s.syncs == 1).await;
        let start = Instant::now();
        wait_for(&handle, |s| s.syncs == 3).await;
        // Virtual time: two resync intervals.
        assert!(start.elapsed() >= Duration::from_secs(120));

        drop(handle);

        let (_tx, rx) = tokio::sync::watch::channel(desired(1, &["a.example.com"]));
        let handle = spawn(provider, settings(HOUR), rx);
        wait_for(&handle, |s| s.syncs == 1).await;
        let start = Instant::now();
        handle.resync_now();
        wait_for(&handle, |s| s.syncs == 2).await;
        assert!(start.elapsed() < HOUR);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sync_is_retried_with_backoff_and_keeps_the_last_good_state() {
        let provider = Memory::new("aws", "example.com");
        let (tx, rx) = tokio::sync::watch::channel(desired(1, &["a.example.com"]));
        let handle = spawn(provider.clone(), settings(HOUR), rx);
        wait_for(&handle, |s| s.syncs == 1).await;
        *provider.fail.lock().unwrap() = 2;
        tx.send_replace(desired(2, &["a.example.com"]));
        let failed = wait_for(&handle, |s| s.consecutive_failures == 1).await;
        assert!(failed.error.as_deref().unwrap().contains("zone unreadable"));
        assert_eq!(failed.observed_serial, Some(1));
        let first_failure = Instant::now();
        let state = wait_for(&handle, |s| s.observed_serial == Some(2)).await;
        // Two retries: RETRY_BASE, then twice that (virtual time).
        assert!(first_failure.elapsed() >= RETRY_BASE * 3);
        assert_eq!((state.syncs, state.consecutive_failures), (4, 0));
        assert_eq!(state.failed_syncs, 2, "the totals outlive the streak");
        assert!(state.error.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn one_providers_failure_or_panic_does_not_affect_another() {
        let broken = Arc::new(Memory {
            panic: true,
            ..Arc::into_inner(Memory::new("broken", "example.com")).unwrap()
        });
        let failing = Memory::new("failing", "example.com");
        *failing.fail.lock().unwrap() = u32::MAX;
        let good = Memory::new("good", "example.com");
        let (tx, rx) = tokio::sync::watch::channel(desired(1, &["a.example.com"]));
        let broken = spawn(broken, settings(HOUR), rx.clone());
        let failing = spawn(failing, settings(HOUR), rx.clone());
        let good = spawn(good, settings(HOUR), rx);
        let state = wait_for(&broken, |s| s.error.is_some()).await;
        assert_eq!(
            state.error.as_deref(),
            Some("the memory provider's sync panicked")
        );
        wait_for(&failing, |s| s.consecutive_failures >= 3).await;
        tx.send_replace(desired(2, &["a.example.com"]));
        wait_for(&good, |s| s.observed_serial == Some(2)).await;
        // The broken one keeps running (and failing), too.
        wait_for(&broken, |s| s.consecutive_failures >= 2).await;
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_handle_stops_the_loop() {
        let provider = Memory::new("aws", "example.com");
        let (tx, rx) = tokio::sync::watch::channel(desired(1, &["a.example.com"]));
        let handle = spawn(provider.clone(), settings(Duration::from_secs(60)), rx);
        wait_for(&handle, |s| s.syncs == 1).await;
        drop(handle);
        tx.send_replace(desired(2, &["a.example.com"]));
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(provider.syncs(), 1);
    }

    #[test]
    fn retry_waits_double_up_to_the_cap() {
        assert_eq!(retry_wait(1, HOUR), RETRY_BASE);
        assert_eq!(retry_wait(2, HOUR), RETRY_BASE * 2);
        assert_eq!(retry_wait(30, HOUR), RETRY_MAX);
        assert_eq!(
            retry_wait(30, Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }
}
