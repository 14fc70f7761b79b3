//! The process as one [`App`]: [`App::bind`] (or [`App::bind_with_store`]) opens the
//! store, binds every listener, builds the hub ([`crate::hub`]) and the REST surface
//! ([`crate::rest`]) and runs the controller's first pass; [`App::serve`] runs them
//! until told to stop or until one fails. Every long-running task of the process is
//! spawned here, by [`App::spawn`], under a span with its name (the shape of
//! linkerd2-proxy's `linkerd/app/src/lib.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use fedingress_apiserver::metrics::Metrics;
use fedingress_apiserver::registry::Registry;
use tokio::task::{Id, JoinSet};
use tracing::Instrument;

use crate::config::Settings;
use crate::hub::{Hub, Replica};
pub use crate::listener::Addresses;
use crate::listener::Listeners;
use crate::rest::Rest;
use crate::storage::{self, Storage};
use crate::tasks::{Task, Tasks};

/// A bound process: the store is open, every socket bound, the controller has run its
/// first pass (plans published, DNS snapshot built from persisted routing state), the
/// tasks that follow the store are running, nothing served yet. Needs tokio's
/// multi-threaded runtime (the controller's CPU-bound steps run in `block_in_place`).
pub struct App {
    addresses: Addresses,
    running: JoinSet<anyhow::Result<()>>,
    names: HashMap<Id, &'static str>,
    /// Spawned by [`App::serve`]: the API, the agent gateway, DNS, the controller and
    /// compaction.
    serving: Tasks,
    replica: Replica,
}

impl App {
    /// Opens the store and binds every address of `settings`; see [`App`].
    pub async fn bind(settings: Settings) -> anyhow::Result<App> {
        let storage = storage::open_store(&settings).await?;
        Self::bind_with_store(settings, storage).await
    }

    /// Binds every address of `settings` and serves objects from `storage` (opened by
    /// [`storage::open_store`]).
    pub async fn bind_with_store(settings: Settings, storage: Storage) -> anyhow::Result<App> {
        let Listeners {
            api,
            agent,
            dns,
            addresses,
        } = Listeners::bind(&settings).await?;
        let registry = Registry::new(storage.store());
        let Hub {
            extensions,
            background,
            serving,
            replica,
            controller,
        } = Hub::build(&settings, &storage, &registry, agent, dns).await?;
        let mut app = App {
            addresses,
            running: JoinSet::new(),
            names: HashMap::new(),
            serving,
            replica,
        };
        app.spawn_all(background);
        app.serving.append(controller.start().await?);
        let health = storage::health(&settings);
        let rest = Rest::build(&settings, &registry, extensions, health.clone())?;
        let (metrics, router) = app.load(rest).await;
        app.spawn_all(storage.probes(&settings, &health, &registry));
        app.serving.append(storage.compaction(&settings));
        app.serving.add("api", api.serve(router, metrics));
        app.log_bound(&settings, &storage);
        Ok(app)
    }

    pub fn addresses(&self) -> Addresses {
        self.addresses
    }

    /// Starts the REST surface's bootstraps and waits (a while) for them: RBAC, then
    /// the bootstrap namespaces.
    async fn load(&mut self, mut rest: Rest) -> (Arc<Metrics>, axum::Router) {
        self.spawn_all(std::mem::take(&mut rest.rbac));
        rest.wait_for_rbac().await;
        self.spawn_all(std::mem::take(&mut rest.namespaces));
        rest.wait_for_namespaces().await
    }

    fn log_bound(&self, settings: &Settings, storage: &Storage) {
        let replica = match storage {
            Storage::Shared(_) => Some(settings.replica.name.clone()),
            Storage::Embedded(_) => None,
        };
        let Addresses { api, agent, dns } = self.addresses;
        tracing::info!(address = %api, agent_address = %agent, dns_address = ?dns, tls = settings.tls.is_some(), storage = Storage::describe(settings), replica, "bound");
    }

    /// Spawns `future` as the task `name`, under a span with its name.
    pub fn spawn<F>(&mut self, name: &'static str, future: F)
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let span = tracing::info_span!("task", name);
        let handle = self.running.spawn(future.instrument(span));
        self.names.insert(handle.id(), name);
    }

    fn spawn_all(&mut self, tasks: Tasks) {
        for Task { name, future } in tasks {
            self.spawn(name, future);
        }
    }

    /// Serves the API, the agent gateway and DNS until `shutdown` completes or a task
    /// fails; then steps down (with several replicas) and ends every task.
    ///
    /// # Errors
    /// A task failed (or panicked): the error names it.
    pub async fn serve(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let serving = std::mem::take(&mut self.serving);
        self.spawn_all(serving);
        tracing::info!("serving");
        tokio::pin!(shutdown);
        let failed = tokio::select! {
            failed = self.first_failure() => Some(failed),
            () = &mut shutdown => None,
        };
        tracing::info!("shutting down");
        // Nothing is accepted or served from here on; the tasks end at their next await.
        self.running.abort_all();
        self.replica.stop().await;
        match failed {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Completes with the first task that fails or panics (a task that completes is
    /// done: bootstraps and warm-ups do).
    async fn first_failure(&mut self) -> anyhow::Error {
        loop {
            let Some(joined) = self.running.join_next_with_id().await else {
                // Nothing left running: only the shutdown signal ends serving.
                return std::future::pending().await;
            };
            let (id, failure) = match joined {
                Ok((id, Ok(()))) => {
                    tracing::debug!(task = self.name(id), "task completed");
                    continue;
                }
                Ok((id, Err(error))) => (id, error),
                Err(join) => (join.id(), anyhow::anyhow!("{join}")),
            };
            let name = self.name(id);
            tracing::error!(task = name, error = format!("{failure:#}"), "task failed");
            return failure.context(format!("the {name} task failed"));
        }
    }

    fn name(&self, id: Id) -> &'static str {
        self.names.get(&id).copied().unwrap_or("unnamed")
    }
}
