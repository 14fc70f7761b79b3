//! Builds the REST surface ([`Rest::build`]): the API state with the hub's extensions,
//! RBAC and the bootstrap namespaces loaded (or a warning why not), OIDC warmed up and
//! the audit log opened, and its router. It spawns nothing: what runs is returned as
//! [`Tasks`] for [`crate::app::App`] to start, in two steps the start waits for
//! ([`Rest::wait_for_rbac`], [`Rest::wait_for_namespaces`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fedingress_apiserver::endpoints::extensions::Extensions;
use fedingress_apiserver::endpoints::{self, ApiSettings, AppState};
use fedingress_apiserver::health::StoreHealth;
use fedingress_apiserver::metrics::Metrics;
use fedingress_apiserver::registry::Registry;

use crate::config::Settings;
use crate::tasks::{Finished, Tasks};

/// How long the start waits for each bootstrap before serving anyway.
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(10);

/// The REST surface, built but not loaded yet.
pub struct Rest {
    state: AppState,
    /// RBAC's bootstrap and the authorizer's cache: started first.
    pub rbac: Tasks,
    /// The bootstrap namespaces and OIDC's warm-up: started once RBAC is loaded.
    pub namespaces: Tasks,
    /// Completes when RBAC's bootstrap has (taken by the first wait).
    rbac_bootstrapped: Option<Finished>,
    namespaces_bootstrapped: Finished,
}

impl Rest {
    /// The API state on `registry` with the hub's `extensions` and the store's
    /// `health`, and its audit log opened.
    pub fn build(
        settings: &Settings,
        registry: &Registry,
        extensions: Extensions,
        health: Arc<StoreHealth>,
    ) -> anyhow::Result<Rest> {
        let mut state = AppState::new(
            registry.clone(),
            settings.auth.clone(),
            ApiSettings {
                bookmark_interval: settings.bookmark_interval,
                watch: settings.limits.watch(),
            },
            extensions,
        );
        state.health = health;
        if let Some(audit) = &settings.audit {
            state.audit = Some(
                fedingress_apiserver::auth::audit::AuditLog::open(
                    &audit.path,
                    audit.batch_buffer_size,
                )
                .context("opening the audit log")?,
            );
        }
        let mut rbac = Tasks::default();
        let rbac_done = rbac.add_awaited(
            "rbac-bootstrap",
            fedingress_apiserver::auth::rbac::bootstrap_until_done(registry.clone()),
        );
        rbac.add(
            "authorizer",
            state.authorizer.clone().run(registry.store().clone()),
        );
        let mut namespaces = Tasks::default();
        let namespaces_done = namespaces.add_awaited(
            "namespace-bootstrap",
            fedingress_apiserver::registry::namespaces::bootstrap_until_done(registry.clone()),
        );
        if let Some(oidc) = state.auth.oidc() {
            namespaces.add("oidc-warm-up", oidc.clone().warm_up());
        }
        Ok(Rest {
            state,
            rbac,
            namespaces,
            rbac_bootstrapped: Some(rbac_done),
            namespaces_bootstrapped: namespaces_done,
        })
    }

    /// Waits (a while) until RBAC is loaded: requests are answered 503 until it is;
    /// waiting here keeps that window out of sight. Needs [`Rest::rbac`] running.
    pub async fn wait_for_rbac(&mut self) {
        let bootstrapped = match self.rbac_bootstrapped.take() {
            Some(bootstrapped) => bootstrapped.within(BOOTSTRAP_WAIT).await,
            None => true,
        };
        if !bootstrapped
            || !self
                .state
                .authorizer
                .wait_bootstrapped(BOOTSTRAP_WAIT)
                .await
        {
            tracing::warn!("RBAC not loaded yet: requests are answered 503 until it is");
        }
    }

    /// Waits (a while) until kube's namespaces and those already holding objects exist:
    /// creates are admitted only in namespaces that exist. Needs [`Rest::namespaces`]
    /// running. Returns the metrics and the router to serve.
    pub async fn wait_for_namespaces(self) -> (Arc<Metrics>, axum::Router) {
        if !self.namespaces_bootstrapped.within(BOOTSTRAP_WAIT).await {
            tracing::warn!(
                "bootstrap namespaces not created yet: creates in them are refused until they are"
            );
        }
        let metrics = self.state.metrics.clone();
        (metrics, endpoints::router(Arc::new(self.state)))
    }
}
