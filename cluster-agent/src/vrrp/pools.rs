//! `pools:` (issue 24): the agent runs VRRP for the IngressPools of the hub's plan, as
//! `vrrp:` does for one group typed in by hand, with nothing typed in but the interface
//! and the timers.
//!
//! [`Pools`] is a [`Driver`] around the data plane (the standalone driver, with or
//! without anycast): every plan it applies is applied by the data plane first, then its
//! pools ([`fedingress_api::plan::PoolPlan::pools`], the member's view) are rendered
//! ([`super::render::render_pools`]) and loaded into the keepalived the agent runs
//! ([`Keepalived::reload`]: checked, written atomically, SIGHUP); a config equal to the
//! running one is not loaded again. Its report carries each pool's VRRP state
//! (`AgentReport.vrrp`), and its change channel fires with every state change, so the
//! hub hears a new master at once.
//!
//! # Guarantees
//! - A plan whose pools cannot all be run is applied as far as it can be, and
//!   [`Driver::plan_error`] says what was not: a pool with values keepalived cannot run
//!   is left out (the others run), and a config keepalived refuses is not loaded at all
//!   (keepalived runs on with the pools it had). The agent Nacks the plan with that
//!   error.
//! - A reload keeps every pool whose instance did not change as it is: a VIP stays on
//!   the member holding it. A pool whose priorities changed is re-elected (preemption
//!   on: the highest ready priority takes the VIP); a pool gone is given up (priority
//!   0, so its peers take over at once).
//!
//! What does not belong here: the config text ([`super::render`]), running keepalived
//! ([`super::keepalived`]), the data plane.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use fedingress_api::cluster::Provider;
use fedingress_api::plan::{AgentReport, ClusterPlan, PoolAssignment, RuleError, VrrpReport};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::keepalived::{Desired, Keepalived};
use super::render::{self, Member};
use crate::config::{Config, PoolsConfig};
use crate::driver::Driver;

/// Who this agent is and how it renders, from the config.
#[derive(Clone, Debug)]
pub struct PoolsSettings {
    pub pools: PoolsConfig,
    pub cluster: String,
    /// `member.name`.
    pub member: String,
    /// `member.address`.
    pub address: Option<std::net::IpAddr>,
    /// This program, keepalived's track script.
    pub program: PathBuf,
    /// The admin endpoint the track script asks.
    pub admin: SocketAddr,
}

impl PoolsSettings {
    /// The settings of `config`'s `pools:` section (`None` without one), with this
    /// program as the track script.
    ///
    /// # Errors
    /// This program's path cannot be read.
    pub fn from_config(config: &Config) -> std::io::Result<Option<Self>> {
        let Some(pools) = &config.pools else {
            return Ok(None);
        };
        Ok(Some(PoolsSettings {
            pools: pools.clone(),
            cluster: config.cluster.clone(),
            member: config.member.name().to_owned(),
            address: config.member.address,
            program: std::env::current_exe()?,
            admin: config.admin,
        }))
    }

    /// The keepalived config for `pools` (see [`render::render_pools`]).
    ///
    /// # Errors
    /// As [`render::render_pools`] (not with settings from a checked config).
    pub fn render(
        &self,
        pools: &[PoolAssignment],
    ) -> Result<render::PoolsRender, render::RenderError> {
        let member = Member {
            cluster: &self.cluster,
            name: &self.member,
            address: self.address,
        };
        render::render_pools(&self.pools, &member, pools, &self.program, self.admin)
    }
}

/// The data plane with VRRP for the plan's pools (see the module docs).
pub struct Pools {
    inner: Arc<dyn Driver>,
    keepalived: Arc<Keepalived>,
    settings: PoolsSettings,
    /// What the last apply could not do with the pools.
    error: Mutex<Option<String>>,
    changes: Arc<watch::Sender<u64>>,
    forward: JoinHandle<()>,
}

impl Drop for Pools {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

impl Pools {
    /// `inner` with VRRP for the plan's pools run by `keepalived` (started with
    /// [`super::keepalived::prepare_pools`]'s settings). Needs a tokio runtime.
    pub fn new(
        inner: Arc<dyn Driver>,
        keepalived: Arc<Keepalived>,
        settings: PoolsSettings,
    ) -> Arc<Pools> {
        let changes = Arc::new(watch::Sender::new(0u64));
        let forward = tokio::spawn(forward_changes(
            inner.subscribe(),
            keepalived.subscribe(),
            Arc::clone(&changes),
        ));
        Arc::new(Pools {
            inner,
            keepalived,
            settings,
            error: Mutex::new(None),
            changes,
            forward,
        })
    }

    /// Renders `pools` and loads them into keepalived; what could not be done.
    async fn apply_pools(&self, pools: &[PoolAssignment]) -> Option<String> {
        let rendered = match self.settings.render(pools) {
            Ok(rendered) => rendered,
            Err(error) => {
                tracing::error!(error = %error, "rendering keepalived's config for the plan's pools failed");
                return Some(format!("pools: rendering keepalived's config: {error}"));
            }
        };
        for note in &rendered.notes {
            tracing::warn!(note = %note, "pools: left out of keepalived's config");
        }
        let instances = rendered.instances.len();
        let desired = Desired {
            text: rendered.text,
            instances: rendered.instances,
            addresses: rendered.addresses,
        };
        let mut problems = Vec::new();
        match self.keepalived.reload(desired).await {
            Ok(()) => tracing::info!(
                pools = pools.len(),
                instances,
                "keepalived runs the plan's pools"
            ),
            Err(error) => {
                let error = crate::state::error_chain(&error);
                tracing::error!(error = %error, "keepalived did not take the config of the plan's pools; it runs the pools it had");
                problems.push(format!(
                    "keepalived did not take the config rendered from the plan's pools, and runs the pools it had: {error}"
                ));
            }
        }
        if !rendered.errors.is_empty() {
            tracing::error!(errors = %rendered.errors.join("; "), "pools of the plan that keepalived cannot run are left out");
            problems.push(format!(
                "left out, keepalived cannot run them: {}",
                rendered.errors.join("; ")
            ));
        }
        (!problems.is_empty()).then(|| format!("pools: {}", problems.join("; ")))
    }

    /// Each pool's VRRP state, as keepalived last logged it.
    fn vrrp_report(&self) -> Vec<VrrpReport> {
        self.keepalived
            .pool_states()
            .into_iter()
            .map(|(pool, state)| VrrpReport { pool, state })
            .collect()
    }
}

/// Bumps `changes` whenever the data plane's or keepalived's channel changes.
async fn forward_changes(
    mut inner: watch::Receiver<u64>,
    mut keepalived: watch::Receiver<u64>,
    changes: Arc<watch::Sender<u64>>,
) {
    let (mut inner_open, mut keepalived_open) = (true, true);
    while inner_open || keepalived_open {
        tokio::select! {
            changed = inner.changed(), if inner_open => inner_open = changed.is_ok(),
            changed = keepalived.changed(), if keepalived_open => keepalived_open = changed.is_ok(),
        }
        changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

#[async_trait]
impl Driver for Pools {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Vec<String> {
        self.inner.capabilities()
    }

    async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        let rule_errors = self.inner.apply(plan).await;
        let error = self.apply_pools(&plan.pools.pools).await;
        *self.error.lock().unwrap_or_else(PoisonError::into_inner) = error;
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        rule_errors
    }

    fn plan_error(&self) -> Option<String> {
        let own = self
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match (self.inner.plan_error(), own) {
            (Some(inner), Some(own)) => Some(format!("{inner}; {own}")),
            (inner, own) => inner.or(own),
        }
    }

    fn report(&self, plan: &ClusterPlan) -> AgentReport {
        let mut report = self.inner.report(plan);
        report.vrrp = self.vrrp_report();
        report
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn begin_shutdown(&self) {
        self.inner.begin_shutdown().await;
    }

    async fn shutdown(&self) {
        self.inner.shutdown().await;
    }

    fn metrics(&self) -> String {
        self.inner.metrics()
    }

    fn is_draining(&self) -> bool {
        self.inner.is_draining()
    }

    fn set_provider(&self, provider: Option<Provider>) -> bool {
        self.inner.set_provider(provider)
    }

    fn set_cordoned(&self, cordoned: bool) {
        self.inner.set_cordoned(cordoned);
    }

    fn readiness(&self) -> Result<(), String> {
        self.inner.readiness()
    }
}
