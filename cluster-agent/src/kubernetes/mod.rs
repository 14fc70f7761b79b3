//! The `kubernetes` driver: renders the cluster's plan as Kubernetes objects in the
//! member cluster (server-side apply), reads their load-balancer status and the
//! backends' EndpointSlices back through watches, and elects one active agent among
//! replicas.
//!
//! - [`render`]: pure: plan → desired Ingress / Service / ConfigMap objects per
//!   rendering profile, plus rule errors.
//! - [`apply`]: server-side apply with ownership checks, garbage collection.
//! - [`world`]: reflectors over the member cluster (watch, not polling).
//! - [`status`]: pure: the report from what was applied and what the watches see.
//! - [`lease`]: leader election with a `coordination.k8s.io/v1` Lease.
//! - [`pools`]: what the plan's pool provisions need from the agent's own Pod and
//!   config; [`render::pool`] renders each as a workload, applied and collected like
//!   every other object.
//!
//! [`KubernetesDriver`] ties them together behind [`crate::driver::Driver`]. Decisions:
//! - The FederatedIngress namespace is the member cluster namespace; the driver never
//!   creates namespaces (a missing one is a rule error from the API server).
//! - A failed apply is retried every [`RETRY_AFTER_ERRORS`], and the plan is applied
//!   again every [`RESYNC`] so that hand edits and deletions of owned objects are
//!   repaired. Nothing is deleted when the agent stops or loses the hub: the member cluster keeps
//!   serving the last plan (fail static). Only a plan that no longer holds an object
//!   deletes it.
//! - The rendering profile is the config's, or (`auto`) follows the hub's
//!   `Cluster.spec.provider` from `Welcome`, persisted in `<stateDir>/provider` so a
//!   restarted agent renders its persisted plan the same way before the hub answers.
//! - A pool provision whose objects cannot be written (or whose settings cannot be
//!   gathered) makes the agent not ready, with the reason, and is retried like any
//!   failed apply; the report has no field for provisions yet.

pub mod apply;
pub mod lease;
pub mod pools;
pub mod render;
pub mod status;
pub mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fedingress_api::cluster::Provider;
use fedingress_api::ingress::Protocol;
use fedingress_api::plan::{AgentReport, ClusterPlan, IngressKey, RuleError};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::kubernetes::Profile;
use crate::config::{KubernetesConfig, ProfileSetting};
use crate::driver::Driver;
use apply::{Applier, ApplyError};
use pools::PoolSource;
use render::pool::PoolSettings;
use render::{Kind, ObjectRef, RenderSettings};
use status::{ReportInput, ShareState};
use world::World;

/// Why the member cluster's API cannot be used with this config.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading kubeconfig {}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("no kubernetes.kubeconfig given and not running in a cluster")]
    InCluster(#[source] kube::config::InClusterError),
    #[error("building the member cluster client")]
    Client(#[source] kube::Error),
}

/// A client for the member cluster: the kubeconfig (and context) when given, else the
/// in-cluster service account.
///
/// # Errors
/// The kubeconfig cannot be read or used, or there is no in-cluster config.
pub async fn client(config: &KubernetesConfig) -> Result<Client, ClientError> {
    let mut kube_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
            let options = KubeConfigOptions {
                context: config.context.clone(),
                ..KubeConfigOptions::default()
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::incluster().map_err(ClientError::InCluster)?,
    };
    // kube retries 429/503/504 up to 15 times with backoff, holding an apply for
    // minutes; the driver retries a failed apply itself (RETRY_AFTER_ERRORS).
    kube_config.default_retry = false;
    Client::try_from(kube_config).map_err(ClientError::Client)
}

/// A plan whose apply failed against the API (RBAC, an unreachable server) is applied
/// again this often until it succeeds.
pub const RETRY_AFTER_ERRORS: Duration = Duration::from_secs(5);

/// The applied plan is applied again this often, repairing drift: an owned object
/// deleted or edited by hand comes back (server-side apply with `force` takes its
/// fields back).
pub const RESYNC: Duration = Duration::from_secs(60);

/// The driver. Build with [`KubernetesDriver::start`] (watches the cluster) or
/// [`KubernetesDriver::new`] (a given world, for tests).
pub struct KubernetesDriver {
    client: Client,
    config: KubernetesConfig,
    world: Arc<World>,
    applier: Applier,
    profile: Mutex<Option<Profile>>,
    provider_file: PathBuf,
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    draining: std::sync::atomic::AtomicBool,
    /// Applies run one at a time (the hub's and the resync's).
    applying: tokio::sync::Mutex<()>,
    /// The plan applied last, for retries and resyncs.
    last_plan: Mutex<Option<ClusterPlan>>,
    /// Wakes the resync task: the profile changed, apply the last plan again now.
    resync_now: Arc<tokio::sync::Notify>,
    /// Where the pools' settings come from (none: provisions cannot be run).
    pool_source: Mutex<Option<PoolSource>>,
    /// The pools' settings, once gathered.
    pool_settings: Mutex<Option<PoolSettings>>,
}

#[derive(Default)]
struct State {
    shares: BTreeMap<IngressKey, ShareState>,
    applied_at: BTreeMap<ObjectRef, Instant>,
    /// Problems of the last apply (API errors, garbage collection): readiness fails.
    problems: Vec<String>,
}

impl KubernetesDriver {
    /// A driver on `world` (fed by the caller); nothing is watched.
    pub fn new(
        client: Client,
        world: Arc<World>,
        config: KubernetesConfig,
        state_dir: &Path,
    ) -> Self {
        let provider_file = state_dir.join("provider");
        let profile = match config.profile {
            ProfileSetting::Fixed(profile) => Some(profile),
            ProfileSetting::Auto => read_provider(&provider_file).map(Profile::from_provider),
        };
        KubernetesDriver {
            applier: Applier::new(client.clone(), Arc::clone(&world), config.owner_id.clone()),
            client,
            config,
            world,
            profile: Mutex::new(profile),
            provider_file,
            state: Mutex::new(State::default()),
            changes: watch::Sender::new(0),
            tasks: Mutex::new(Vec::new()),
            draining: std::sync::atomic::AtomicBool::new(false),
            applying: tokio::sync::Mutex::new(()),
            last_plan: Mutex::new(None),
            resync_now: Arc::new(tokio::sync::Notify::new()),
            pool_source: Mutex::new(None),
            pool_settings: Mutex::new(None),
        }
    }

    /// Lets the driver run the plan's pool provisions, with what `source` says.
    pub fn set_pool_source(&self, source: PoolSource) {
        *lock(&self.pool_source) = Some(source);
        *lock(&self.pool_settings) = None;
    }

    /// A driver that watches the member cluster through `client`; it runs pools in
    /// `pools.namespace`.
    pub fn start(
        client: Client,
        config: KubernetesConfig,
        state_dir: &Path,
        pools: PoolSource,
    ) -> Arc<Self> {
        let (world, writers) = World::new();
        let driver = Arc::new(Self::new(
            client.clone(),
            Arc::clone(&world),
            config,
            state_dir,
        ));
        let mut tasks = world.spawn_watches(&client, &pools.namespace, writers, &driver.changes);
        driver.set_pool_source(pools);
        tasks.push(tokio::spawn(resync(
            Arc::downgrade(&driver),
            Arc::clone(&driver.resync_now),
        )));
        *lock(&driver.tasks) = tasks;
        driver
    }

    /// Applies `plan` (one apply at a time), remembers it and signals the change.
    async fn apply_and_signal(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        let _one = self.applying.lock().await;
        *lock(&self.last_plan) = Some(plan.clone());
        let errors = self.apply_plan(plan).await;
        self.bump();
        errors
    }

    /// Applies the last plan again; false when there is none.
    async fn reapply(&self) -> bool {
        let Some(plan) = lock(&self.last_plan).clone() else {
            return false;
        };
        self.apply_and_signal(&plan).await;
        true
    }

    fn last_apply_failed(&self) -> bool {
        !lock(&self.state).problems.is_empty()
    }

    /// The change signal watches bump (for watches started by the caller).
    pub fn changes(&self) -> &watch::Sender<u64> {
        &self.changes
    }

    /// The rendering profile in force (`None`: `auto` and the hub has not said yet).
    pub fn profile(&self) -> Option<Profile> {
        *lock(&self.profile)
    }

    fn settings(&self, profile: Profile) -> RenderSettings {
        let config = &self.config;
        RenderSettings {
            profile,
            ingress_class_name: config.ingress_class_name.clone(),
            load_balancer_ip: config.load_balancer_ip,
            metallb_sharing_key: config.metallb_sharing_key.clone(),
            service_annotations: config.service_annotations.clone(),
            nginx_tcp_services: config
                .nginx
                .as_ref()
                .map(|n| n.tcp_services_config_map.clone()),
            nginx_udp_services: config
                .nginx
                .as_ref()
                .map(|n| n.udp_services_config_map.clone()),
            ingress_controller: config
                .ingress_controller
                .as_ref()
                .map(|c| c.service.clone()),
            owner: config.owner_id.clone(),
        }
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits (bounded) for the first list of the stores garbage collection reads.
    async fn wait_for_owned_stores(&self) {
        let wait = async {
            let _ = self.world.services.wait_until_ready().await;
            let _ = self.world.ingresses.wait_until_ready().await;
            let _ = self.world.config_maps.wait_until_ready().await;
            let _ = self.world.deployments.wait_until_ready().await;
            let _ = self.world.disruption_budgets.wait_until_ready().await;
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), wait).await;
    }

    /// Renders and writes `plan`; returns per share what was applied.
    async fn apply_plan(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        let Some(profile) = self.profile() else {
            let message = "the rendering profile is not known yet: the hub has not sent the cluster's provider (or set kubernetes.profile)";
            let mut state = lock(&self.state);
            state.shares.clear();
            let errors = every_rule(plan, message);
            for error in &errors {
                state
                    .shares
                    .entry(error.ingress.clone())
                    .or_default()
                    .errors
                    .push(error.clone());
            }
            return errors;
        };
        self.wait_for_owned_stores().await;
        let settings = self.settings(profile);
        let rendered = render::render_plan(plan, &settings, self.world.as_ref());

        let mut keep: BTreeSet<ObjectRef> = BTreeSet::new();
        let mut shares: BTreeMap<IngressKey, ShareState> = BTreeMap::new();
        let mut applied: Vec<ObjectRef> = Vec::new();
        // API failures (RBAC, an unreachable server) also make the agent not ready.
        let mut api_problems: Vec<String> = Vec::new();
        for (key, share_render) in &rendered.shares {
            let mut errors = share_render.errors.clone();
            let mut wrote_all = true;
            for desired in &share_render.objects {
                let object = desired.object_ref();
                keep.insert(object.clone());
                match self.applier.apply(desired).await {
                    Ok(()) => applied.push(object),
                    Err(error) => {
                        if matches!(error, ApplyError::Api { .. }) {
                            wrote_all = false;
                            api_problems.push(error.to_string());
                        }
                        errors.extend(errors_for(key, &share_render.targets, &object, &error));
                    }
                }
            }
            let generation = plan.ingresses.get(key).map_or(0, |s| s.generation);
            let previous = lock(&self.state)
                .shares
                .get(key)
                .map_or(0, |s| s.generation);
            shares.insert(
                key.clone(),
                ShareState {
                    generation: if wrote_all { generation } else { previous },
                    targets: share_render.targets.clone(),
                    errors,
                },
            );
        }
        for desired in &rendered.shared {
            let object = desired.object_ref();
            keep.insert(object.clone());
            match self.applier.apply(desired).await {
                Ok(()) => applied.push(object),
                Err(error) => {
                    if matches!(error, ApplyError::Api { .. }) {
                        api_problems.push(error.to_string());
                    }
                    // Shared objects (the nginx ConfigMaps) carry every L4 rule served
                    // through the ingress controller.
                    for (key, share) in &mut shares {
                        let controller = settings.ingress_controller.as_ref();
                        let rules: Vec<u32> = share
                            .targets
                            .iter()
                            .filter(|t| {
                                controller.is_some_and(|c| {
                                    t.object.kind == Kind::Service
                                        && t.object.namespace == c.namespace
                                        && t.object.name == c.name
                                })
                            })
                            .map(|t| t.rule)
                            .collect();
                        for rule in rules {
                            share.errors.push(RuleError {
                                ingress: key.clone(),
                                rule,
                                message: error.to_string(),
                            });
                        }
                    }
                }
            }
        }
        api_problems.extend(self.apply_pools(plan, &mut keep, &mut applied).await);
        let mut problems = api_problems;
        problems.extend(self.collect_garbage(&keep).await);

        let mut state = lock(&self.state);
        let now = Instant::now();
        state.applied_at.retain(|object, _| keep.contains(object));
        for object in applied {
            state.applied_at.entry(object).or_insert(now);
        }
        state.shares = shares;
        state.problems = problems;
        let mut errors: Vec<RuleError> = state
            .shares
            .values()
            .flat_map(|s| s.errors.iter().cloned())
            .collect();
        errors.sort_by(|a, b| {
            (&a.ingress, a.rule, &a.message).cmp(&(&b.ingress, b.rule, &b.message))
        });
        errors
    }

    /// Applies the workload of every pool provision of `plan` (all of them kept from
    /// garbage collection, written or not); returns what failed.
    async fn apply_pools(
        &self,
        plan: &ClusterPlan,
        keep: &mut BTreeSet<ObjectRef>,
        applied: &mut Vec<ObjectRef>,
    ) -> Vec<String> {
        let provisions = &plan.pools.provisions;
        if provisions.is_empty() {
            return Vec::new();
        }
        let source = lock(&self.pool_source).clone();
        let Some(source) = source else {
            return vec![format!(
                "pools {}: this agent cannot run pools (no pool settings)",
                pool_names(plan)
            )];
        };
        for provision in provisions {
            let name = render::pool::object_name(&provision.name);
            for kind in [Kind::ConfigMap, Kind::Deployment, Kind::PodDisruptionBudget] {
                keep.insert(ObjectRef::new(kind, &source.namespace, &name));
            }
        }
        let cached = lock(&self.pool_settings).clone();
        let settings = match cached {
            Some(settings) => settings,
            None => match pools::settings(&self.client, &source).await {
                Ok(settings) => {
                    *lock(&self.pool_settings) = Some(settings.clone());
                    settings
                }
                Err(message) => {
                    tracing::warn!(pools = %pool_names(plan), error = %message, "cannot run the plan's pools");
                    return vec![format!("pools {}: {message}", pool_names(plan))];
                }
            },
        };
        let mut problems = Vec::new();
        for provision in provisions {
            for desired in render::pool::render(provision, &settings) {
                let object = desired.object_ref();
                match self.applier.apply(&desired).await {
                    Ok(()) => applied.push(object),
                    Err(error) => {
                        tracing::warn!(pool = %provision.name, error = %error, "applying a pool's workload failed");
                        problems.push(format!("pool {}: {error}", provision.name));
                    }
                }
            }
        }
        problems
    }

    /// Deletes owned objects the plan no longer holds; returns what failed.
    async fn collect_garbage(&self, keep: &BTreeSet<ObjectRef>) -> Vec<String> {
        if !self.world.owned_stores_synced() {
            let message =
                "garbage collection skipped: the watches of owned objects have not listed yet"
                    .to_owned();
            tracing::warn!(error = %message, "not collecting garbage");
            return vec![message];
        }
        let mut problems = Vec::new();
        let mut garbage = self.applier.garbage(keep);
        // Objects this agent applied that the watches have not delivered yet (a plan
        // that drops what the one before added, within the watch's delay): the stores
        // do not show them, but they are ours and no longer wanted.
        let unseen: Vec<ObjectRef> = lock(&self.state)
            .applied_at
            .keys()
            .filter(|o| !keep.contains(*o) && !self.applier.stored(o))
            .filter(|o| !garbage.iter().any(|(g, _)| g == *o))
            .cloned()
            .collect();
        garbage.extend(unseen.into_iter().map(|o| (o, None)));
        for (object, uid) in garbage {
            match self.applier.delete(&object, uid).await {
                Ok(()) => tracing::info!(
                    kind = object.kind.as_str(),
                    namespace = %object.namespace,
                    name = %object.name,
                    "deleted an object the plan no longer holds"
                ),
                Err(error) => {
                    tracing::warn!(error = %error, "garbage collection failed");
                    problems.push(error.to_string());
                }
            }
        }
        problems
    }
}

/// Re-applies the last plan: [`RETRY_AFTER_ERRORS`] after a failed apply, at once when
/// the profile changed, else every [`RESYNC`]. Ends with the driver.
async fn resync(driver: std::sync::Weak<KubernetesDriver>, wake: Arc<tokio::sync::Notify>) {
    let mut since_full = Duration::ZERO;
    loop {
        since_full += tokio::select! {
            () = tokio::time::sleep(RETRY_AFTER_ERRORS) => RETRY_AFTER_ERRORS,
            // The profile changed: what was applied was rendered for another one.
            () = wake.notified() => RESYNC,
        };
        let Some(driver) = driver.upgrade() else {
            return;
        };
        if driver.is_draining() {
            return;
        }
        if !driver.world.problems().is_empty() {
            let namespace = lock(&driver.pool_source)
                .as_ref()
                .map(|s| s.namespace.clone())
                .unwrap_or_else(|| driver.client.default_namespace().to_owned());
            driver.world.probe_failed(&driver.client, &namespace).await;
            if driver.world.problems().is_empty() {
                driver.bump();
            }
        }
        let failed = driver.last_apply_failed();
        if (failed || since_full >= RESYNC) && driver.reapply().await {
            since_full = Duration::ZERO;
            if failed && !driver.last_apply_failed() {
                tracing::info!("member cluster API works again: the plan is applied");
            }
        }
    }
}

/// Rule errors for an object that could not be written: every rule it serves.
fn errors_for(
    key: &IngressKey,
    targets: &[render::RuleTarget],
    object: &ObjectRef,
    error: &ApplyError,
) -> Vec<RuleError> {
    targets
        .iter()
        .filter(|t| &t.object == object)
        .map(|t| RuleError {
            ingress: key.clone(),
            rule: t.rule,
            message: error.to_string(),
        })
        .collect()
}

/// The plan's provisions' names, `a, b`.
fn pool_names(plan: &ClusterPlan) -> String {
    plan.pools
        .provisions
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn every_rule(plan: &ClusterPlan, message: &str) -> Vec<RuleError> {
    plan.ingresses
        .iter()
        .flat_map(|(key, share)| {
            (0..share.rules.len()).map(move |rule| RuleError {
                ingress: key.clone(),
                rule: u32::try_from(rule).unwrap_or(u32::MAX),
                message: message.to_owned(),
            })
        })
        .collect()
}

fn read_provider(path: &Path) -> Option<Provider> {
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().parse().ok()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Capabilities of a profile; without one only Ingress rules (HTTP, HTTPS) are known
/// to work.
fn capabilities(profile: Option<Profile>) -> Vec<String> {
    match profile {
        Some(profile) => profile.capabilities(),
        None => vec![Protocol::Http.to_string(), Protocol::Https.to_string()],
    }
}

#[async_trait]
impl Driver for KubernetesDriver {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn capabilities(&self) -> Vec<String> {
        capabilities(self.profile())
    }

    async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        self.apply_and_signal(plan).await
    }

    fn report(&self, plan: &ClusterPlan) -> AgentReport {
        let state = lock(&self.state);
        let input = ReportInput {
            world: &self.world,
            shares: &state.shares,
            applied_at: &state.applied_at,
            ingress_controller: self.config.ingress_controller.as_ref().map(|c| &c.service),
            pending_limit: self.config.load_balancer_pending(),
            now: Instant::now(),
        };
        status::report(plan, &input)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn shutdown(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }

    fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn set_provider(&self, provider: Option<Provider>) -> bool {
        if self.config.profile != ProfileSetting::Auto {
            return false;
        }
        let provider = provider.unwrap_or_default();
        let written = self
            .provider_file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&self.provider_file, provider.as_str()));
        if let Err(error) = written {
            tracing::warn!(
                path = %self.provider_file.display(),
                error = %error,
                "persisting the cluster's provider failed; a restart renders after the hub answers"
            );
        }
        let profile = Profile::from_provider(provider);
        let before = lock(&self.profile).replace(profile);
        if before != Some(profile) {
            tracing::info!(
                provider = provider.as_str(),
                profile = profile.as_str(),
                "rendering profile chosen from the cluster's provider"
            );
            self.resync_now.notify_one();
        }
        capabilities(before) != capabilities(Some(profile))
    }

    fn readiness(&self) -> Result<(), String> {
        let mut problems = self.world.problems();
        problems.extend(lock(&self.state).problems.iter().cloned());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}
