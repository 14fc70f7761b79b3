//! Google Cloud DNS through the official `google-cloud-dns-v1` client: the hub's
//! routing decisions as Cloud DNS routing policies (`RRSetRoutingPolicy` geo, wrr and
//! primaryBackup), with Cloud DNS health-checked targets where the API allows, and
//! plain record sets that the hub keeps current itself everywhere else.
//!
//! - [`mapping`]: [`PolicyRecordSet`] → this provider's own model of a record set
//!   ([`mapping::Rrset`]), status records and `explain` (pure);
//! - [`regions`]: Google Cloud regions and their coordinates;
//! - [`wire`]: the only place that touches the generated types, and error
//!   classification.
//!
//! # Strategy → Cloud DNS
//!
//! | strategy (`Policy`)         | Cloud DNS record set                                         |
//! |-----------------------------|--------------------------------------------------------------|
//! | Weighted (`Weighted`)       | `routingPolicy.wrr`: an item per cluster, `weight` = the cluster's weight |
//! | Failover (`Failover`)       | with `healthCheck`: `routingPolicy.primaryBackup`, the first tier present = `primaryTargets`, later tiers = `backupGeoTargets` (each cluster at its region), `trickleTraffic` 0; without: plain record set of the active tier |
//! | Geo, Overflow (`Geo`)       | `routingPolicy.geo`: an item per Google Cloud region           |
//! | Latency (`Latency`)         | `routingPolicy.geo`, as Geo (Cloud DNS has no latency policy; the nearest region is its closest measure) |
//! | RoundRobin (`Multivalue`)   | plain record set (`rrdatas`) of the clusters the hub sees healthy |
//! | Anycast, delegation (`Simple`) | plain record set                                          |
//!
//! # Decisions
//!
//! - **Regions.** A geo item's `location` must be a Google Cloud region. A cluster on
//!   `gcp` is placed at its `spec.region`; any other cluster at the Google Cloud region
//!   nearest its coordinates ([`regions::GCP_REGIONS`]), so an AWS cluster in Frankfurt is
//!   the `europe-west3` item. Clusters that land in the same region share one item (the
//!   API refuses two items with one location).
//! - **Health.** The desired record sets hold only the clusters the hub sees healthy, so
//!   every record set is kept current by the hub while it runs. When
//!   `dns.providers[].healthCheck` names a Compute Engine health check, the cluster IPs of
//!   A/AAAA routing policies are `healthCheckedTargets.externalEndpoints` (the form the
//!   API allows for public zones) with `routingPolicy.healthCheck` set, and Cloud DNS
//!   also steers around a cluster that fails while the hub is down. Without it, the IPs
//!   are `rrdatas`, returned whatever their health: the hub is the only health check.
//! - **RoundRobin** stays a plain record set even with a `healthCheck`: a wrr policy
//!   answers one item per query, and RoundRobin's answer is every healthy cluster.
//! - **Failover.** `primaryBackup` requires health-checked primary targets, so without a
//!   `healthCheck` a Failover ingress is a plain record set of its active tier (the
//!   lowest tier with a healthy cluster), which the hub moves on failover and failback;
//!   the sync report says so. With a `healthCheck` and a single tier, the backup geo targets are the
//!   same clusters unchecked: when every primary fails its check, clients still get them
//!   (fail open, as the embedded server's `whenAllUnhealthy: ServeAll`). Cloud DNS's
//!   backup is one geo policy, so tiers after the second are not ordered among
//!   themselves: when the primary tier fails, the backup region nearest the client
//!   answers, whichever tier its cluster was in.
//! - **Host names.** A CNAME record set (clusters with only load-balancer host names)
//!   is a plain record set of one name (a CNAME holds one), or a wrr/geo policy with the
//!   host name as each item's one `rrdatas` entry; host names cannot be health-checked
//!   targets. A host name-only cluster inside an A record set is left out and reported:
//!   Cloud DNS has no alias records.
//! - **Deletions** must match the stored record set exactly, so a deletion (and the
//!   deletion half of a replacement) is always the record set as `rrsets.list` returned
//!   it, never one rebuilt from the desired state.
//! - **Changes** go through `changes.create` in the batches [`plan`] makes (per DNS name,
//!   atomic in Cloud DNS). A rejected batch is retried one DNS name at a time, so one bad
//!   name never blocks the others; per-name results are in the [`SyncReport`].
//! - **Retries.** The client's own retry loop is off ([`NeverRetry`]); every call goes
//!   through [`CallPolicy`] (rate limit, backoff on 429/`rateLimitExceeded` and 5xx).
//! - **Credentials.** Application Default Credentials, except for a plain `http://`
//!   `endpointUrl` (a local fake or emulator), which gets anonymous credentials: no token
//!   is ever sent in clear text.
//! - **Health checks** are not created by this provider: `healthCheck` names one the
//!   user made (a Compute Engine health check probes every external endpoint with its
//!   own port and protocol; the per-cluster [`HealthEndpoint`]s are Route53's), so [`SyncReport::health_checks_changed`] stays 0.
//!
//! # Permissions
//!
//! `dns.managedZones.get`, `dns.resourceRecordSets.list` and `dns.changes.create`, plus
//! the record set permissions `changes.create` checks per addition and deletion
//! (`dns.resourceRecordSets.create`, `dns.resourceRecordSets.delete`); all are in
//! `roles/dns.admin`. Referencing a health check in a routing policy may need read
//! access to it in Compute Engine (not verified against real Cloud DNS here).
//!
//! # What Cloud DNS cannot express
//!
//! Overflow's load spill (geo instead), Latency measured per client (nearest region
//! instead), aliases to load balancer names in A record sets (left out), more than one
//! CNAME target per plain record set or geo region (the first cluster's), health checks
//! of host names.

pub mod mapping;
pub mod regions;
pub mod wire;

use std::collections::BTreeMap;

use google_cloud_dns_v1::client::{Changes, ManagedZones, ResourceRecordSets};
use google_cloud_dns_v1::model::{Change, ResourceRecordSet};
use google_cloud_gax::retry_policy::NeverRetry;
use tracing::{Instrument, debug, info, info_span, warn};

#[cfg(doc)]
use crate::publish::HealthEndpoint;
use crate::publish::call::{CallPolicy, CallSettings, CallStats};
use crate::publish::plan::{self, Wanted};
use crate::publish::{
    DnsProvider, NameResult, Owner, PolicyRecordSet, ProviderError, PublishedRecord, SyncOptions,
    SyncReport,
};
use fedingress_dns::Location;

use crate::config::{ProviderConfig, normalize};

use mapping::Rrset;

/// Which credentials the client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
    /// user credentials, or the metadata server on Google Cloud).
    ApplicationDefault,
    /// No credentials: for a local fake or emulator.
    Anonymous,
}

impl Auth {
    /// Anonymous for a plain `http://` endpoint (nothing real listens there, and a token
    /// must not travel in clear text), Application Default Credentials otherwise.
    pub fn for_config(config: &ProviderConfig) -> Self {
        match &config.endpoint_url {
            Some(url) if url.starts_with("http://") => Auth::Anonymous,
            _ => Auth::ApplicationDefault,
        }
    }
}

/// One Cloud DNS managed zone the hub publishes to.
pub struct CloudDnsProvider {
    config: ProviderConfig,
    project: String,
    /// The managed zone's `dnsName`, lower case, without the trailing dot.
    dns_name: String,
    health_check: Option<String>,
    rrsets: ResourceRecordSets,
    changes: Changes,
    call: CallPolicy,
}

impl std::fmt::Debug for CloudDnsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudDnsProvider")
            .field("name", &self.config.name)
            .field("project", &self.project)
            .field("zone", &self.config.zone)
            .field("dns_name", &self.dns_name)
            .finish_non_exhaustive()
    }
}

/// A client builder with the endpoint, credentials and retry policy of `config`.
macro_rules! client {
    ($client:ty, $config:expr, $auth:expr) => {{
        let mut builder = <$client>::builder().with_retry_policy(NeverRetry);
        if let Some(url) = &$config.endpoint_url {
            builder = builder.with_endpoint(url.trim_end_matches('/'));
        }
        if $auth == Auth::Anonymous {
            builder = builder.with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
        }
        builder.build().await.map_err(|e| ProviderError::Rejected {
            operation: format!("building the Cloud DNS {} client", stringify!($client)),
            message: e.to_string(),
        })?
    }};
}

impl CloudDnsProvider {
    /// Builds the clients and reads the managed zone once (`managedZones.get`) for its
    /// DNS name, which [`DnsProvider::manages`] needs.
    ///
    /// # Errors
    /// The config is not a `clouddns` one with a project, the clients cannot be built
    /// (no Application Default Credentials), or the zone cannot be read.
    pub async fn connect(config: &ProviderConfig, auth: Auth) -> Result<Self, ProviderError> {
        let project = config
            .project
            .clone()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| ProviderError::Rejected {
                operation: "connecting to Cloud DNS".into(),
                message: format!("dns.providers {:?}: project is required", config.name),
            })?;
        let call = CallPolicy::new(
            config.name.clone(),
            CallSettings {
                requests_per_second: config.requests_per_second,
                max_attempts: config.max_attempts,
                ..CallSettings::default()
            },
        );
        let zones = client!(ManagedZones, config, auth);
        let rrsets = client!(ResourceRecordSets, config, auth);
        let changes = client!(Changes, config, auth);
        let zone = call
            .call("managedZones.get", || {
                let zones = zones.clone();
                let project = project.clone();
                let zone = config.zone.clone();
                async move {
                    zones
                        .get()
                        .set_project(project)
                        .set_managed_zone(zone)
                        .send()
                        .await
                        .map_err(|e| wire::error("managedZones.get", &e))
                }
            })
            .await?;
        let dns_name = normalize(zone.dns_name.as_deref().unwrap_or_default());
        if dns_name.is_empty() {
            return Err(ProviderError::Rejected {
                operation: "managedZones.get".into(),
                message: format!("managed zone {:?} has no dnsName", config.zone),
            });
        }
        info!(provider = %config.name, project = %project, zone = %config.zone, dns_name = %dns_name, "Cloud DNS zone read");
        Ok(Self {
            health_check: config.health_check.clone().filter(|h| !h.is_empty()),
            config: config.clone(),
            project,
            dns_name,
            rrsets,
            changes,
            call,
        })
    }

    /// The managed zone's DNS name (lower case, no trailing dot).
    pub fn dns_name(&self) -> &str {
        &self.dns_name
    }

    /// Every record set in the zone, page by page (`rrsets.list`), each page one call
    /// through the [`CallPolicy`].
    async fn list(&self) -> Result<Vec<ResourceRecordSet>, ProviderError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call
                .call("rrsets.list", || {
                    let mut request = self
                        .rrsets
                        .list()
                        .set_project(self.project.clone())
                        .set_managed_zone(self.config.zone.clone());
                    if let Some(t) = &token {
                        request = request.set_page_token(t.clone());
                    }
                    async move {
                        request
                            .send()
                            .await
                            .map_err(|e| wire::error("rrsets.list", &e))
                    }
                })
                .await?;
            out.extend(page.rrsets);
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// One `changes.create` (atomic in Cloud DNS).
    async fn create(
        &self,
        additions: Vec<ResourceRecordSet>,
        deletions: Vec<ResourceRecordSet>,
    ) -> Result<Change, ProviderError> {
        let mut change = Change::new();
        change.additions = additions;
        change.deletions = deletions;
        self.call
            .call("changes.create", || {
                let request = self
                    .changes
                    .create()
                    .set_project(self.project.clone())
                    .set_managed_zone(self.config.zone.clone())
                    .set_body(change.clone());
                async move {
                    request
                        .send()
                        .await
                        .map_err(|e| wire::error("changes.create", &e))
                }
            })
            .await
    }
}

#[async_trait::async_trait]
impl DnsProvider for CloudDnsProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn kind(&self) -> &'static str {
        "clouddns"
    }

    fn manages(&self, name: &str) -> bool {
        let name = normalize(name);
        let in_zone = name == self.dns_name || name.ends_with(&format!(".{}", self.dns_name));
        in_zone && self.config.in_domains(&name)
    }

    async fn sync(
        &self,
        desired: &[&PolicyRecordSet],
        options: &SyncOptions,
    ) -> Result<SyncReport, ProviderError> {
        let span = info_span!("clouddns_sync", provider = %self.config.name, zone = %self.config.zone, dry_run = options.dry_run, desired = desired.len());
        self.sync_inner(desired, options).instrument(span).await
    }

    fn explain(&self, records: &[PublishedRecord], client: &Location) -> String {
        mapping::explain(records, client)
    }

    fn call_stats(&self) -> CallStats {
        self.call.stats()
    }
}

impl CloudDnsProvider {
    /// Whether a listed record set is this provider's business: inside its domains, or
    /// the ownership marker of a name that is.
    fn in_scope(&self, rrset: &Rrset) -> bool {
        if self.manages(&rrset.name) {
            return true;
        }
        rrset.type_ == "TXT"
            && Owner::parse_marker_name(&rrset.name).is_some_and(|(name, _)| self.manages(&name))
    }

    async fn sync_inner(
        &self,
        desired: &[&PolicyRecordSet],
        options: &SyncOptions,
    ) -> Result<SyncReport, ProviderError> {
        let listed = self.list().await?;
        // Deletions must match what Cloud DNS holds exactly: keep each listed record set
        // as it came, by (name, type) (one record set per pair in Cloud DNS).
        let mut raw: BTreeMap<(String, String), ResourceRecordSet> = BTreeMap::new();
        let mut current = Vec::new();
        for model in listed {
            let rrset = wire::from_model(&model);
            if self.in_scope(&rrset) {
                raw.insert((rrset.name.clone(), rrset.type_.clone()), model);
                current.push(rrset);
            }
        }
        debug!(current = current.len(), "record sets listed");

        // Desired, in Cloud DNS terms, with what could not be expressed per DNS name.
        let mut names: BTreeMap<String, NameState> = BTreeMap::new();
        let mut wanted = Vec::new();
        for set in desired.iter().copied().filter(|s| self.manages(&s.name)) {
            let mapped = mapping::map(set, self.health_check.as_deref());
            let state = names.entry(set.dns_name.clone()).or_default();
            state.notes.extend(mapped.notes.iter().cloned());
            match mapped.rrset {
                Some(rrset) => {
                    state.keys.push((rrset.name.clone(), rrset.type_.clone()));
                    state
                        .labelled
                        .push((rrset.clone(), mapped.item_clusters.clone()));
                    wanted.push(Wanted::new(rrset, set));
                }
                None => state
                    .keys
                    .push((normalize(&set.name), set.type_.as_str().to_string())),
            }
        }
        let planned = plan::diff(&wanted, &current, &options.owner);
        for (dns_name, name_plan) in &planned.names {
            let state = names.entry(dns_name.clone()).or_default();
            state.planned = name_plan.len();
            state
                .notes
                .extend(name_plan.conflicts.iter().map(|c| c.message.clone()));
            state.conflicted = !name_plan.conflicts.is_empty();
            for change in name_plan.changes() {
                let r = change.record();
                state.keys.push((r.name.clone(), r.type_.clone()));
            }
        }
        for conflict in planned.conflicts() {
            warn!(name = %conflict.name, type_ = %conflict.type_, other_owner = ?conflict.other_owner, "record set owned by someone else: left untouched");
        }

        let mut report = SyncReport {
            dry_run: options.dry_run,
            ..SyncReport::default()
        };
        let after = if options.dry_run {
            report.changes = planned.len();
            for state in names.values_mut() {
                state.applied = state.planned;
            }
            info!(changes = planned.len(), "dry run: nothing changed");
            planned.apply(&current)
        } else {
            self.apply(&planned, &raw, &current, options, &mut names, &mut report)
                .await
        };

        for (dns_name, state) in names {
            let records = state.records(&after);
            let mut message = state.notes.join("; ");
            if let Some(error) = &state.error {
                message = if message.is_empty() {
                    error.clone()
                } else {
                    format!("{error}; {message}")
                };
            }
            if options.dry_run && state.planned > 0 {
                let would = format!("dry run: {} change(s) planned, none made", state.planned);
                message = if message.is_empty() {
                    would
                } else {
                    format!("{would}; {message}")
                };
            }
            let synced = !state.conflicted
                && if options.dry_run {
                    state.planned == 0
                } else {
                    state.error.is_none()
                };
            report.names.insert(
                dns_name,
                NameResult {
                    synced,
                    message,
                    records,
                    changes: state.applied,
                },
            );
        }
        Ok(report)
    }

    /// Applies `planned` batch by batch; a rejected batch of several DNS names is
    /// retried one name at a time. Returns what the zone holds afterwards (as far as
    /// this provider knows: `current` with the applied changes).
    async fn apply(
        &self,
        planned: &plan::Plan<Rrset>,
        raw: &BTreeMap<(String, String), ResourceRecordSet>,
        current: &[Rrset],
        options: &SyncOptions,
        names: &mut BTreeMap<String, NameState>,
        report: &mut SyncReport,
    ) -> Vec<Rrset> {
        let mut after = current.to_vec();
        for batch in plan::batches(planned, options.batch_size) {
            let result = self.create_batch(&batch.changes, raw).await;
            match result {
                Ok(()) => {
                    after = plan::apply(&after, &batch.changes);
                    report.changes += batch.changes.len();
                    for name in &batch.names {
                        let state = names.entry(name.clone()).or_default();
                        state.applied += batch
                            .changes
                            .iter()
                            .filter(|c| state.keys.contains(&key_of(c.record())))
                            .count();
                    }
                }
                Err(ProviderError::Rejected { .. }) if batch.names.len() > 1 => {
                    warn!(
                        names = batch.names.len(),
                        "batch rejected: retrying its DNS names one by one"
                    );
                    for name in &batch.names {
                        let changes = planned
                            .names
                            .get(name)
                            .map(|p| p.changes())
                            .unwrap_or_default();
                        let state = names.entry(name.clone()).or_default();
                        match self.create_batch(&changes, raw).await {
                            Ok(()) => {
                                after = plan::apply(&after, &changes);
                                report.changes += changes.len();
                                state.applied += changes.len();
                            }
                            Err(e) => {
                                warn!(dns_name = %name, error = %e, "change rejected");
                                state.error = Some(e.to_string());
                            }
                        }
                    }
                }
                Err(e) => {
                    warn!(names = ?batch.names, error = %e, "change failed");
                    for name in &batch.names {
                        names.entry(name.clone()).or_default().error = Some(e.to_string());
                    }
                }
            }
        }
        after
    }

    /// One `changes.create` for `changes`: creates and updates' new halves as additions;
    /// deletes and updates' old halves as deletions, each exactly as listed.
    async fn create_batch(
        &self,
        changes: &[plan::Change<Rrset>],
        raw: &BTreeMap<(String, String), ResourceRecordSet>,
    ) -> Result<(), ProviderError> {
        let mut additions = Vec::new();
        let mut deletions = Vec::new();
        let listed = |r: &Rrset| {
            raw.get(&key_of(r))
                .cloned()
                .unwrap_or_else(|| wire::to_model(r))
        };
        for change in changes {
            match change {
                plan::Change::Create(r) => additions.push(wire::to_model(r)),
                plan::Change::Update { old, new } => {
                    deletions.push(listed(old));
                    additions.push(wire::to_model(new));
                }
                plan::Change::Delete(r) => deletions.push(listed(r)),
            }
        }
        if additions.is_empty() && deletions.is_empty() {
            return Ok(());
        }
        let (adds, dels) = (additions.len(), deletions.len());
        let change = self.create(additions, deletions).await?;
        info!(additions = adds, deletions = dels, change_id = change.id.as_deref().unwrap_or(""), status = %change.status.map(|s| s.to_string()).unwrap_or_default(), "changes.create");
        Ok(())
    }
}

fn key_of(r: &Rrset) -> (String, String) {
    (r.name.clone(), r.type_.clone())
}

/// What one DNS name collects during a sync.
#[derive(Default)]
struct NameState {
    /// (name, type)s of its record sets (desired, owned or changed).
    keys: Vec<(String, String)>,
    /// Desired record sets with the clusters of their items.
    labelled: Vec<(Rrset, Vec<Vec<String>>)>,
    notes: Vec<String>,
    conflicted: bool,
    planned: usize,
    applied: usize,
    error: Option<String>,
}

impl NameState {
    /// What the zone holds for this name after the sync (markers left out), labelled
    /// with clusters where it is what was desired.
    fn records(&self, after: &[Rrset]) -> Vec<PublishedRecord> {
        after
            .iter()
            .filter(|r| self.keys.contains(&key_of(r)))
            .filter(|r| !(r.type_ == "TXT" && Owner::parse_marker_name(&r.name).is_some()))
            .flat_map(|r| {
                let labels = self
                    .labelled
                    .iter()
                    .find(|(want, _)| want == r)
                    .map(|(_, labels)| labels.as_slice())
                    .unwrap_or(&[]);
                mapping::published(r, labels)
            })
            .collect()
    }
}
