//! Amazon Route53 through `aws-sdk-route53`: the federation's record sets with Route53's
//! native routing policies and health checks, so that AWS keeps steering when the hub is
//! down.
//!
//! - [`records`]: the mapping of each policy to Route53 record sets (the decisions, for
//!   docs/providers.md, are in its module docs);
//! - [`health`]: health checks per cluster endpoint, their ownership and life cycle;
//! - [`alias`]: AWS load balancer host names → alias targets;
//! - [`regions`]: AWS regions and their coordinates (latency records, `explain`);
//! - [`api`]: one function per Route53 request, errors classified for the call policy.
//!
//! # A sync
//!
//! 1. List the hosted zone's record sets and this federation's health checks.
//! 2. Derive the native record sets of the desired ones ([`records::native`]).
//! 3. Create the missing health checks (and update changed thresholds), so that the
//!    records can refer to them: only those of record sets that will be written. A
//!    (name, type) in conflict ([`plan::conflicting`]) is never written, so it gets none
//!    (they are billed), and a name that became a conflict loses its checks in step 5.
//! 4. Diff against the zone with [`crate::publish::plan`], limited to the record
//!    sets this federation owns, and apply the changes one `ChangeResourceRecordSets` per
//!    batch. A rejected batch is retried one DNS name at a time, so one bad name never
//!    blocks the others; each name's outcome is in the report.
//! 5. Delete the health checks no record set refers to any more.
//!
//! Every request goes through [`crate::publish::call::CallPolicy`] (rate limit,
//! retries with backoff on throttling and transient errors); the SDK's own retries are
//! off. A dry run lists and plans, changes nothing, and reports the planned changes.
//!
//! # Credentials
//!
//! [`Route53Provider::from_env`] uses the standard AWS chain (environment, shared
//! config and credentials files, web identity, ECS and EC2 instance roles) through
//! `aws_config::defaults`; [`Route53Provider::new`] takes any `SdkConfig` (tests pass
//! static credentials). `endpointUrl` points the client at an emulator (moto).

pub mod alias;
pub mod api;
pub mod health;
pub mod records;
pub mod regions;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::publish::call::{CallPolicy, CallSettings, CallStats};
use crate::publish::plan::{self, Change, NativeRecordSet, Wanted as WantedRecord};
use crate::publish::{
    DnsProvider, HealthEndpoint, NameResult, Owner, PolicyRecordSet, ProviderError,
    PublishedRecord, SyncOptions, SyncReport,
};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_route53::Client;
use aws_sdk_route53::config::retry::RetryConfig;
use aws_sdk_route53::config::timeout::TimeoutConfig;
use fedingress_dns::Location;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::config::{ProviderConfig, normalize};
use api::Action;
use records::{Routing, Rrset};

/// Route53's region for the SDK when none is configured (Route53 itself is global).
const DEFAULT_REGION: &str = "us-east-1";

impl NativeRecordSet for Rrset {
    fn name(&self) -> &str {
        &self.name
    }
    fn type_(&self) -> &str {
        &self.type_
    }
    fn set_identifier(&self) -> Option<&str> {
        self.set_identifier.as_deref()
    }
    fn txt_values(&self) -> Vec<String> {
        if self.type_ == "TXT" {
            self.values.clone()
        } else {
            Vec::new()
        }
    }
    fn marker(name: &str, value: &str) -> Self {
        Rrset {
            name: name.to_string(),
            type_: "TXT".into(),
            set_identifier: None,
            routing: Routing::Simple,
            ttl: Some(i64::from(plan::MARKER_TTL)),
            values: vec![value.to_string()],
            alias: None,
            health_check_id: None,
        }
    }
}

/// A hosted zone in Route53, as one `dns.providers` entry.
pub struct Route53Provider {
    name: String,
    config: ProviderConfig,
    client: Client,
    /// Without `/hostedzone/`.
    zone_id: String,
    /// The hosted zone's name, lower case, without the trailing dot.
    apex: String,
    calls: CallPolicy,
}

/// `Z123` from `Z123` or `/hostedzone/Z123`.
pub fn normalize_zone_id(zone: &str) -> String {
    zone.trim()
        .trim_start_matches('/')
        .trim_start_matches("hostedzone/")
        .to_string()
}

/// The SDK client's configuration: `sdk` with the configured endpoint and region, the
/// SDK's retries off (the call policy retries, counted and rate-limited) and timeouts, so
/// that a request that hangs becomes a transient error instead of a stuck sync.
pub fn client_config(config: &ProviderConfig, sdk: &SdkConfig) -> aws_sdk_route53::Config {
    let mut b = aws_sdk_route53::config::Builder::from(sdk)
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(10))
                .operation_attempt_timeout(Duration::from_secs(60))
                .build(),
        );
    if let Some(region) = &config.region {
        b = b.region(Region::new(region.clone()));
    } else if sdk.region().is_none() {
        b = b.region(Region::new(DEFAULT_REGION));
    }
    if let Some(url) = &config.endpoint_url {
        b = b.endpoint_url(url);
    }
    b.build()
}

impl Route53Provider {
    /// With the standard AWS credential chain (environment, shared files, web identity,
    /// container and instance roles).
    pub async fn from_env(config: &ProviderConfig) -> Result<Self, ProviderError> {
        let region = config
            .region
            .clone()
            .unwrap_or_else(|| DEFAULT_REGION.to_string());
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region))
            .load()
            .await;
        Self::new(config, &sdk).await
    }

    /// With the credentials and settings of `sdk`; reads the hosted zone's name once
    /// (`GetHostedZone`), which also proves the zone exists and may be read.
    ///
    /// # Errors
    ///
    /// The zone cannot be read (unknown, no permission, no network after the retries).
    pub async fn new(config: &ProviderConfig, sdk: &SdkConfig) -> Result<Self, ProviderError> {
        let client = Client::from_conf(client_config(config, sdk));
        let zone_id = normalize_zone_id(&config.zone);
        let calls = CallPolicy::new(
            config.name.clone(),
            CallSettings {
                requests_per_second: config.requests_per_second,
                max_attempts: config.max_attempts,
                ..CallSettings::default()
            },
        );
        let mut provider = Route53Provider {
            name: config.name.clone(),
            config: config.clone(),
            client,
            zone_id,
            apex: String::new(),
            calls,
        };
        let apex = provider
            .call("GetHostedZone", || {
                api::hosted_zone_name(&provider.client, &provider.zone_id)
            })
            .await?;
        info!(provider = %provider.name, zone = %provider.zone_id, apex = %apex, "route53 hosted zone");
        provider.apex = apex;
        Ok(provider)
    }

    /// The hosted zone's id (without `/hostedzone/`).
    pub fn zone_id(&self) -> &str {
        &self.zone_id
    }

    /// The hosted zone's name.
    pub fn apex(&self) -> &str {
        &self.apex
    }

    /// The SDK client (tests and tools read the zone with it).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One Route53 request through the call policy.
    async fn call<T, F, Fut>(&self, operation: &str, f: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        self.calls.call(operation, f).await
    }

    /// Every record set of the zone, normalised.
    async fn list_rrsets(&self) -> Result<Vec<Rrset>, ProviderError> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let mut cursor = api::RrsetCursor::default();
        loop {
            let (page, next) = self
                .call("ListResourceRecordSets", || {
                    api::list_rrsets_page(&self.client, &self.zone_id, &cursor)
                })
                .await?;
            let mut progress = false;
            for r in &page {
                let r = Rrset::from_sdk(r);
                if seen.insert(r.key()) {
                    out.push(r);
                    progress = true;
                }
            }
            match next {
                // A page without anything new would repeat forever (an emulator that
                // pages by name and type only, e.g. moto): stop.
                Some(next) if progress && next != cursor => cursor = next,
                _ => break,
            }
        }
        Ok(out)
    }

    /// This federation's health checks.
    async fn list_owned_health_checks(
        &self,
        owner: &Owner,
    ) -> Result<Vec<health::Owned>, ProviderError> {
        let mut all = Vec::new();
        let mut marker = None;
        loop {
            let (page, next) = self
                .call("ListHealthChecks", || {
                    api::list_health_checks_page(&self.client, marker.clone())
                })
                .await?;
            all.extend(page);
            match next {
                Some(next) if Some(&next) != marker.as_ref() => marker = Some(next),
                _ => break,
            }
        }
        Ok(health::owned(owner, &all))
    }

    fn wanted_health(&self, endpoint: &HealthEndpoint) -> health::Wanted {
        let hc = &self.config.health_checks;
        health::Wanted {
            endpoint: endpoint.clone(),
            request_interval: i32::try_from(hc.request_interval_seconds).unwrap_or(30),
            failure_threshold: i32::try_from(hc.failure_threshold).unwrap_or(3),
        }
    }

    /// Creates and updates health checks as `hplan` says; returns the id of each wanted
    /// endpoint (a placeholder on a dry run), the endpoints whose check could not be
    /// created (with why), and the number of changes.
    async fn ensure_health_checks(
        &self,
        hplan: &health::HealthPlan,
        owner: &Owner,
        dry_run: bool,
    ) -> (
        BTreeMap<HealthEndpoint, String>,
        BTreeMap<HealthEndpoint, ProviderError>,
        usize,
    ) {
        let mut ids = hplan.existing.clone();
        let mut failed = BTreeMap::new();
        let mut changed = 0;
        for w in &hplan.create {
            changed += 1;
            if dry_run {
                ids.insert(
                    w.endpoint.clone(),
                    format!("(new: {})", health::endpoint_key(&w.endpoint)),
                );
                continue;
            }
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default();
            let reference = health::caller_reference(owner, w, now);
            let created = self
                .call("CreateHealthCheck", || {
                    api::create_health_check(&self.client, &reference, w)
                })
                .await;
            match created {
                Ok(id) => {
                    info!(provider = %self.name, health_check = %id, endpoint = %health::endpoint_key(&w.endpoint), "route53 health check created");
                    let tags = health::tags(owner, w);
                    if let Err(e) = self
                        .call("ChangeTagsForResource", || {
                            api::tag_health_check(&self.client, &id, tags.clone())
                        })
                        .await
                    {
                        // Ownership is the caller reference's: the tags are for people.
                        warn!(provider = %self.name, health_check = %id, error = %e, "route53 health check not tagged");
                    }
                    ids.insert(w.endpoint.clone(), id);
                }
                Err(e) => {
                    warn!(provider = %self.name, endpoint = %health::endpoint_key(&w.endpoint), error = %e, "route53 health check not created");
                    failed.insert(w.endpoint.clone(), e);
                }
            }
        }
        for (id, w) in &hplan.update {
            changed += 1;
            if dry_run {
                continue;
            }
            if let Err(e) = self
                .call("UpdateHealthCheck", || {
                    api::update_health_check(&self.client, id, w.failure_threshold)
                })
                .await
            {
                // The old threshold stays: the check still works.
                warn!(provider = %self.name, health_check = %id, error = %e, "route53 health check not updated");
            }
        }
        (ids, failed, changed)
    }

    /// Applies one batch as one change request; returns the error if Route53 refused it.
    async fn apply(&self, changes: &[Change<Rrset>]) -> Result<(), ProviderError> {
        let native: Vec<(Action, Rrset)> = changes.iter().flat_map(to_actions).collect();
        let comment = format!("fedingress {}: {} changes", self.name, native.len());
        self.call("ChangeResourceRecordSets", || {
            api::change_batch(&self.client, &self.zone_id, &comment, &native)
        })
        .await
    }
}

/// Route53's limits of one ChangeResourceRecordSets request: 1,000 `ResourceRecord`
/// elements and 32,000 characters of `Value` elements, an UPSERT counting twice
/// (<https://docs.aws.amazon.com/Route53/latest/DeveloperGuide/DNSLimitations.html>). A
/// request over them is refused as a whole, and the per-name fallback then costs one
/// request per name: measured by provider-bench, 1,057 requests instead of 125 for a
/// first sync of 1,000 ingresses.
const MAX_RECORDS_PER_REQUEST: usize = 1000;
const MAX_VALUE_CHARS_PER_REQUEST: usize = 32_000;

/// Whether `changes` go in one request: at most `batch_size` changes (the config's
/// `batchSize`) and within Route53's limits. An alias record counts as one element.
fn fits_one_request(changes: &[Change<Rrset>], batch_size: usize) -> bool {
    if changes.len() > batch_size {
        return false;
    }
    let (mut records, mut chars) = (0usize, 0usize);
    for (action, r) in changes.iter().flat_map(to_actions) {
        let times = match action {
            Action::Upsert => 2,
            Action::Delete => 1,
        };
        records += times * r.values.len().max(1);
        chars += times * r.values.iter().map(String::len).sum::<usize>();
    }
    records <= MAX_RECORDS_PER_REQUEST && chars <= MAX_VALUE_CHARS_PER_REQUEST
}

/// Route53 actions for a planned change. Creates and updates are `UPSERT`s, so that a
/// change batch the call policy retries after a lost answer (a timeout after Route53
/// applied it) does not fail on what it already did; ownership was checked against the
/// listing just before. A routing policy that changes kind (weighted → failover, say)
/// cannot be changed in place: the old record set is deleted and the new one written,
/// in the same batch.
fn to_actions(change: &Change<Rrset>) -> Vec<(Action, Rrset)> {
    match change {
        Change::Create(r) => vec![(Action::Upsert, r.clone())],
        Change::Delete(r) => vec![(Action::Delete, r.clone())],
        Change::Update { old, new } => {
            if std::mem::discriminant(&old.routing) == std::mem::discriminant(&new.routing)
                && old.alias.is_some() == new.alias.is_some()
            {
                vec![(Action::Upsert, new.clone())]
            } else {
                vec![(Action::Delete, old.clone()), (Action::Upsert, new.clone())]
            }
        }
    }
}

/// The DNS name a plan's name belongs to: a helper name (`_t0.<name>`, `_f1.<name>`, …)
/// that is no longer desired reports to the DNS name it was made for.
fn report_name(name: &str, known: &BTreeSet<String>) -> String {
    if known.contains(name) || !name.starts_with('_') {
        return name.to_string();
    }
    known
        .iter()
        .filter(|k| name.ends_with(&format!(".{k}")))
        .max_by_key(|k| k.len())
        .cloned()
        .unwrap_or_else(|| name.to_string())
}

#[async_trait::async_trait]
impl DnsProvider for Route53Provider {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "route53"
    }

    fn manages(&self, name: &str) -> bool {
        let name = normalize(name);
        (name == self.apex || name.ends_with(&format!(".{}", self.apex)))
            && self.config.in_domains(&name)
    }

    async fn sync(
        &self,
        desired: &[&PolicyRecordSet],
        options: &SyncOptions,
    ) -> Result<SyncReport, ProviderError> {
        let dry_run = options.dry_run || self.config.dry_run;
        let span = info_span!("route53_sync", provider = %self.name, zone = %self.zone_id, dry_run);
        self.sync_inner(desired, options).instrument(span).await
    }

    fn explain(&self, records: &[PublishedRecord], client: &Location) -> String {
        records::explain(records, client)
    }

    fn call_stats(&self) -> CallStats {
        self.calls.stats()
    }
}

impl Route53Provider {
    async fn sync_inner(
        &self,
        desired: &[&PolicyRecordSet],
        options: &SyncOptions,
    ) -> Result<SyncReport, ProviderError> {
        let owner = &options.owner;
        let dry_run = options.dry_run || self.config.dry_run;
        let mut report = SyncReport {
            dry_run,
            ..SyncReport::default()
        };

        // 1. What the zone holds within this provider's domains (the rest of the zone,
        // this federation's records outside `domains` included, is not ours to change),
        // and our health checks.
        let mut current = self.list_rrsets().await?;
        current.retain(|r| self.manages(&r.name));
        let owned_checks = self.list_owned_health_checks(owner).await?;

        // 2. What it should hold.
        let mut natives: Vec<(&PolicyRecordSet, records::Native)> = desired
            .iter()
            .filter(|s| self.manages(&s.name))
            .map(|s| (*s, records::native(s, &self.zone_id)))
            .collect();

        // 3. Health checks before the records that refer to them, only for the record
        // sets that will be written: none for a (name, type) in conflict. Route53 cannot
        // probe a private or loopback address: such targets go without.
        let blocked = plan::conflicting(
            natives.iter().flat_map(|(_, native)| {
                native
                    .rrsets
                    .iter()
                    .map(|r| (r.name.as_str(), r.type_.as_str()))
            }),
            &current,
            owner,
        );
        unguard(&mut natives, &blocked);
        let (wanted, mut notes) = self.wanted_health_checks(&natives);
        let hplan = health::plan(&wanted, &owned_checks);
        let (ids, failed_checks, hc_changes) =
            self.ensure_health_checks(&hplan, owner, dry_run).await;
        report.health_checks_changed += hc_changes;
        let skipped = resolve_health_checks(&mut natives, &ids, &failed_checks, &mut notes);
        let wanted_records = wanted_records(&natives, &skipped, &current);

        // 4. The diff, limited to what we own, applied in batches.
        let the_plan = plan::diff(&wanted_records, &current, owner);
        let known: BTreeSet<String> = natives.iter().map(|(s, _)| s.dns_name.clone()).collect();
        let mut results = self.planned_results(&natives, &notes, &skipped, &the_plan, &known);
        report.changes = the_plan.len();
        let failed_names = if dry_run {
            BTreeMap::new()
        } else {
            self.apply_batches(&the_plan, options.batch_size).await
        };
        mark_failed(&mut results, &failed_names, &known);
        if dry_run {
            mark_dry_run(&mut results);
        }
        let partial = !failed_names.is_empty() || !skipped.is_empty();
        let after = self
            .records_after(&the_plan, &current, dry_run, partial)
            .await;
        add_published_records(&mut results, &natives, &after);

        // 5. Health checks no record set refers to any more.
        if !hplan.unused.is_empty() {
            report.health_checks_changed += self
                .delete_unused_checks(&hplan.unused, || the_plan.apply(&current), dry_run)
                .await;
        }

        sort_records(&mut results);
        report.names = results;
        info!(
            provider = %self.name,
            changes = report.changes,
            health_checks_changed = report.health_checks_changed,
            failed = report.names.values().filter(|n| !n.synced).count(),
            "route53 sync"
        );
        Ok(report)
    }

    /// What each name holds now (or would hold, on a dry run): desired where synced,
    /// the zone's where not. `partial`: some names were skipped or failed, so the zone is
    /// listed again (the plan applied to `current` if that fails).
    async fn records_after(
        &self,
        the_plan: &plan::Plan<Rrset>,
        current: &[Rrset],
        dry_run: bool,
        partial: bool,
    ) -> Vec<Rrset> {
        if dry_run || partial {
            if dry_run {
                the_plan.apply(current)
            } else {
                self.list_rrsets()
                    .await
                    .unwrap_or_else(|_| the_plan.apply(current))
            }
        } else {
            the_plan.apply(current)
        }
    }

    /// The health checks the desired record sets need (none when health checks are
    /// disabled), and per DNS name the notes on targets that go without one: Route53
    /// cannot probe a private or loopback address.
    fn wanted_health_checks(
        &self,
        natives: &[(&PolicyRecordSet, records::Native)],
    ) -> (BTreeSet<health::Wanted>, BTreeMap<String, Vec<String>>) {
        let mut notes: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut wanted: BTreeSet<health::Wanted> = BTreeSet::new();
        if self.config.health_checks.enabled {
            for (set, native) in natives {
                for e in native.health.iter().flatten() {
                    if health::probeable(e) {
                        wanted.insert(self.wanted_health(e));
                    } else {
                        let note = format!(
                            "no health check for {}: Route53 cannot probe a private or loopback address",
                            health::endpoint_key(e)
                        );
                        add_note(&mut notes, &set.dns_name, note);
                    }
                }
            }
        }
        (wanted, notes)
    }

    /// Each DNS name's result from the plan, before it is applied: synced unless
    /// skipped or in conflict with someone else's record sets, with its planned changes,
    /// what was left out and the notes. Logs each conflict.
    fn planned_results(
        &self,
        natives: &[(&PolicyRecordSet, records::Native)],
        notes: &BTreeMap<String, Vec<String>>,
        skipped: &BTreeMap<String, String>,
        the_plan: &plan::Plan<Rrset>,
        known: &BTreeSet<String>,
    ) -> BTreeMap<String, NameResult> {
        let mut results: BTreeMap<String, NameResult> = BTreeMap::new();
        for (set, native) in natives {
            let r = results.entry(set.dns_name.clone()).or_default();
            r.synced = true;
            if !native.left_out.is_empty() {
                r.message = format!("left out: {}", native.left_out.join("; "));
            }
            if let Some(n) = notes.get(&set.dns_name) {
                r.message = join_message(&r.message, &n.join("; "));
            }
        }
        for (name, why) in skipped {
            let r = results.entry(name.clone()).or_default();
            r.synced = false;
            r.message = why.clone();
        }
        for (name, name_plan) in &the_plan.names {
            let r = results.entry(report_name(name, known)).or_default();
            r.changes += name_plan.len();
            if !name_plan.conflicts.is_empty() {
                r.synced = false;
                let conflicts: Vec<&str> = name_plan
                    .conflicts
                    .iter()
                    .map(|c| c.message.as_str())
                    .collect();
                r.message = join_message(&r.message, &conflicts.join("; "));
                for c in &name_plan.conflicts {
                    warn!(provider = %self.name, name = %c.name, type_ = %c.type_, other_owner = ?c.other_owner, "route53 record set owned by someone else: left untouched");
                }
            }
        }
        results
    }

    /// Applies `plan`'s batches, one change request each, each within `batch_size`
    /// changes and Route53's own limits ([`fits_one_request`]); a rejected batch of several
    /// DNS names is retried one name at a time. Returns the names that failed, with why.
    async fn apply_batches(
        &self,
        plan: &plan::Plan<Rrset>,
        batch_size: usize,
    ) -> BTreeMap<String, String> {
        let mut failed = BTreeMap::new();
        for batch in plan::batches_by(plan, |changes| fits_one_request(changes, batch_size)) {
            match self.apply(&batch.changes).await {
                Ok(()) => {
                    debug!(provider = %self.name, names = ?batch.names, changes = batch.changes.len(), "route53 batch applied");
                }
                Err(e) if batch.names.len() > 1 && !e.is_retryable() => {
                    // One bad name must not block the others: each name on its own.
                    warn!(provider = %self.name, names = ?batch.names, error = %e, "route53 batch rejected: applying its names one by one");
                    for name in &batch.names {
                        let Some(name_plan) = plan.names.get(name) else {
                            continue;
                        };
                        if let Err(e) = self.apply(&name_plan.changes()).await {
                            warn!(provider = %self.name, name = %name, error = %e, "route53 changes rejected");
                            failed.insert(name.clone(), e.to_string());
                        }
                    }
                }
                Err(e) => {
                    warn!(provider = %self.name, names = ?batch.names, error = %e, "route53 changes failed");
                    for name in &batch.names {
                        failed.insert(name.clone(), e.to_string());
                    }
                }
            }
        }
        failed
    }

    /// Deletes the health checks of `unused` that no record set of the zone refers to
    /// (listed again after the record changes; on a dry run, the zone as it would be).
    /// Returns how many were (or would be) deleted.
    async fn delete_unused_checks(
        &self,
        unused: &BTreeSet<String>,
        would_be: impl FnOnce() -> Vec<Rrset>,
        dry_run: bool,
    ) -> usize {
        let referenced: BTreeSet<String> = if dry_run {
            would_be()
                .iter()
                .filter_map(|r| r.health_check_id.clone())
                .collect()
        } else {
            match self.list_rrsets().await {
                Ok(now) => now
                    .iter()
                    .filter_map(|r| r.health_check_id.clone())
                    .collect(),
                Err(e) => {
                    warn!(provider = %self.name, error = %e, "route53 zone not listed: unused health checks kept until the next sync");
                    return 0;
                }
            }
        };
        let mut deleted = 0;
        for id in unused {
            if referenced.contains(id) {
                debug!(provider = %self.name, health_check = %id, "route53 health check still referred to: kept");
                continue;
            }
            if dry_run {
                deleted += 1;
                continue;
            }
            match self
                .call("DeleteHealthCheck", || {
                    api::delete_health_check(&self.client, id)
                })
                .await
            {
                Ok(()) => {
                    deleted += 1;
                    info!(provider = %self.name, health_check = %id, "route53 health check deleted");
                }
                Err(e) => {
                    warn!(provider = %self.name, health_check = %id, error = %e, "route53 health check not deleted");
                }
            }
        }
        deleted
    }
}

/// Adds `note` to `dns_name`'s notes, once.
fn add_note(notes: &mut BTreeMap<String, Vec<String>>, dns_name: &str, note: String) {
    let n = notes.entry(dns_name.to_string()).or_default();
    if !n.contains(&note) {
        n.push(note);
    }
}

/// Takes the health check off every record set in `blocked` (in conflict: it is never
/// written, so a check for it would be billed for nothing).
fn unguard(
    natives: &mut [(&PolicyRecordSet, records::Native)],
    blocked: &BTreeSet<(String, String)>,
) {
    if blocked.is_empty() {
        return;
    }
    for (_, native) in natives {
        for (r, health) in native.rrsets.iter().zip(native.health.iter_mut()) {
            if blocked.contains(&(r.name.clone(), r.type_.clone())) {
                *health = None;
            }
        }
    }
}

/// Sets the records' health check ids and returns the DNS names skipped, with why.
///
/// A health check Route53 refused (an address it will not probe): the records go out
/// without it, and the notes say so. One that failed for a passing reason (throttled,
/// unreachable, after the retries): the DNS name keeps what the zone holds until the
/// next sync, rather than going out unguarded.
fn resolve_health_checks(
    natives: &mut [(&PolicyRecordSet, records::Native)],
    ids: &BTreeMap<HealthEndpoint, String>,
    failed_checks: &BTreeMap<HealthEndpoint, ProviderError>,
    notes: &mut BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, String> {
    let mut skipped: BTreeMap<String, String> = BTreeMap::new();
    for (set, native) in natives {
        native.resolve_health_checks(|e| ids.get(e).cloned());
        for e in native.health.iter().flatten() {
            match failed_checks.get(e) {
                Some(err) if err.is_retryable() => {
                    skipped
                        .entry(set.dns_name.clone())
                        .or_insert_with(|| format!("health check not created: {err}"));
                }
                Some(err) => {
                    let note = format!("published without a health check: {err}");
                    add_note(notes, &set.dns_name, note);
                }
                None => {}
            }
        }
    }
    skipped
}

/// The record sets to diff the zone against: each DNS name's native record sets, or
/// for a skipped name exactly what the zone holds at it and at its helper names
/// (`_t0.<name>`, …), in the record types it would publish.
fn wanted_records(
    natives: &[(&PolicyRecordSet, records::Native)],
    skipped: &BTreeMap<String, String>,
    current: &[Rrset],
) -> Vec<WantedRecord<Rrset>> {
    let mut wanted_records: Vec<WantedRecord<Rrset>> = Vec::new();
    for (set, native) in natives {
        if skipped.contains_key(&set.dns_name) {
            let types: BTreeSet<&str> = native.rrsets.iter().map(|r| r.type_.as_str()).collect();
            let helper_suffix = format!(".{}", set.name);
            wanted_records.extend(
                current
                    .iter()
                    .filter(|c| {
                        (c.name == set.name
                            || (c.name.starts_with('_')
                                && !c.name.starts_with(plan::MARKER_PREFIX)
                                && c.name.ends_with(&helper_suffix)))
                            && types.contains(c.type_.as_str())
                    })
                    .map(|c| WantedRecord::new(c.clone(), set)),
            );
        } else {
            wanted_records.extend(
                native
                    .rrsets
                    .iter()
                    .map(|r| WantedRecord::new(r.clone(), set)),
            );
        }
    }
    wanted_records
}

/// Marks the DNS names whose changes Route53 rejected.
fn mark_failed(
    results: &mut BTreeMap<String, NameResult>,
    failed_names: &BTreeMap<String, String>,
    known: &BTreeSet<String>,
) {
    for (name, why) in failed_names {
        let r = results.entry(report_name(name, known)).or_default();
        r.synced = false;
        r.message = join_message(&r.message, why);
    }
}

/// As Cloud DNS reports it: a dry-run name is in sync only when nothing is planned for
/// it.
fn mark_dry_run(results: &mut BTreeMap<String, NameResult>) {
    for r in results.values_mut().filter(|r| r.changes > 0) {
        r.synced = false;
        let would = format!("dry run: {} change(s) planned, none made", r.changes);
        r.message = join_message(&would, &r.message);
    }
}

/// Adds to each DNS name's result what it holds now (or would hold, on a dry run):
/// `after`'s record sets at its names and in its types.
fn add_published_records(
    results: &mut BTreeMap<String, NameResult>,
    natives: &[(&PolicyRecordSet, records::Native)],
    after: &[Rrset],
) {
    for (set, native) in natives {
        let mut names: BTreeSet<&str> = native.rrsets.iter().map(|r| r.name.as_str()).collect();
        names.insert(set.name.as_str());
        let mut types: BTreeSet<&str> = native.rrsets.iter().map(|r| r.type_.as_str()).collect();
        types.insert(set.type_.as_str());
        let r = results.entry(set.dns_name.clone()).or_default();
        for rec in after
            .iter()
            .filter(|x| names.contains(x.name.as_str()) && types.contains(x.type_.as_str()))
        {
            let published = rec.published();
            if !r.records.contains(&published) {
                r.records.push(published);
            }
        }
    }
}

/// Each result's records in (name, type, set identifier) order.
fn sort_records(results: &mut BTreeMap<String, NameResult>) {
    for r in results.values_mut() {
        r.records.sort_by(|a, b| {
            (&a.name, &a.type_, &a.set_identifier).cmp(&(&b.name, &b.type_, &b.set_identifier))
        });
    }
}

fn join_message(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}; {b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrset(routing: Routing) -> Rrset {
        Rrset {
            name: "shop.example.com".into(),
            type_: "A".into(),
            set_identifier: Some("eu".into()),
            routing,
            ttl: Some(30),
            values: vec!["192.0.2.1".into()],
            alias: None,
            health_check_id: None,
        }
    }

    #[test]
    fn a_request_stays_within_route53s_element_and_character_limits() {
        let txt = |n: usize| Rrset {
            type_: "TXT".into(),
            values: vec![format!("\"{}\"", "x".repeat(n))],
            ..rrset(Routing::Simple)
        };
        let creates = |count: usize, r: &Rrset| vec![Change::Create(r.clone()); count];
        // 500 one-value UPSERTs are 1,000 elements: the limit; 501 are over it.
        let a = rrset(Routing::Simple);
        assert!(fits_one_request(&creates(500, &a), 1000));
        assert!(!fits_one_request(&creates(501, &a), 1000));
        // 90-character markers: 177 UPSERTs are 31,860 characters, 178 are over 32,000.
        let marker = txt(88);
        assert!(fits_one_request(&creates(177, &marker), 300));
        assert!(!fits_one_request(&creates(178, &marker), 300));
        // Deletes count once; the configured batch size caps the count of changes.
        let deletes = vec![Change::Delete(a.clone()); 300];
        assert!(fits_one_request(&deletes, 300));
        assert!(!fits_one_request(&deletes, 299));
    }

    #[test]
    fn updates_are_upserts_unless_the_policy_changes_kind() {
        let weighted = rrset(Routing::Weighted(1));
        let heavier = rrset(Routing::Weighted(3));
        let failover = rrset(Routing::Failover(records::Role::Primary));
        let actions = |c: Change<Rrset>| {
            to_actions(&c)
                .into_iter()
                .map(|(a, _)| a)
                .collect::<Vec<_>>()
        };
        assert_eq!(actions(Change::Create(weighted.clone())), [Action::Upsert]);
        assert_eq!(
            actions(Change::Update {
                old: weighted.clone(),
                new: heavier
            }),
            [Action::Upsert]
        );
        assert_eq!(
            actions(Change::Update {
                old: weighted.clone(),
                new: failover
            }),
            [Action::Delete, Action::Upsert]
        );
        assert_eq!(actions(Change::Delete(weighted)), [Action::Delete]);
    }

    #[test]
    fn helper_names_report_to_their_dns_name() {
        let known: BTreeSet<String> = ["shop.example.com".to_string()].into();
        assert_eq!(
            report_name("_t0.shop.example.com", &known),
            "shop.example.com"
        );
        assert_eq!(
            report_name("_f1.shop.example.com", &known),
            "shop.example.com"
        );
        assert_eq!(report_name("web.example.com", &known), "web.example.com");
        assert_eq!(normalize_zone_id("/hostedzone/Z123"), "Z123");
        assert_eq!(normalize_zone_id("Z123"), "Z123");
    }
}
