//! The store the process runs on ([`Storage`], opened by [`open_store`]: etcd or redb)
//! and what belongs to it: its health ([`health`], probed by [`Storage::probes`]) and the
//! periodic compaction of its history ([`Storage::compaction`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fedingress_apiserver::health::{Meanwhile, StoreHealth, commit_probe_key};
use fedingress_apiserver::registry::Registry;
use fedingress_store::{EtcdStore, RedbOptions, RedbStore, SharedStore, Store};

use crate::config::Settings;
use crate::tasks::Tasks;

/// The store a server runs on.
pub enum Storage {
    /// One process's (redb): one replica, always the leader.
    Embedded(Arc<dyn Store>),
    /// Shared by replicas (etcd): leader election, agent records, fenced writes.
    Shared(Arc<dyn SharedStore>),
}

impl Storage {
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Storage::Embedded(store) => store.clone(),
            Storage::Shared(store) => store.clone(),
        }
    }

    /// The name this process's probes and Events go by: the replica's on a shared
    /// store.
    pub fn replica_name(&self, settings: &Settings) -> String {
        match self {
            Storage::Shared(_) => settings.replica.name.clone(),
            Storage::Embedded(_) => "federation-apiserver".to_string(),
        }
    }

    /// The tasks that keep `health` current: the read probe and the commit probe.
    pub fn probes(
        &self,
        settings: &Settings,
        health: &Arc<StoreHealth>,
        registry: &Registry,
    ) -> Tasks {
        let store = self.store();
        let replica = self.replica_name(settings);
        let mut tasks = Tasks::default();
        tasks.add(
            "store-commit-probe",
            health.clone().probe_commits(
                store.clone(),
                commit_probe_key(&replica),
                settings.commit_probe_interval,
            ),
        );
        tasks.add(
            "store-probe",
            health.clone().probe(store, registry.clone(), replica),
        );
        tasks
    }

    /// The task that compacts history every `settings.compaction_interval`.
    pub fn compaction(&self, settings: &Settings) -> Tasks {
        let mut tasks = Tasks::default();
        tasks.add(
            "store-compaction",
            compact_periodically(self.store(), settings.compaction_interval),
        );
        tasks
    }

    /// What the `bound` log line says the store is.
    pub fn describe(settings: &Settings) -> String {
        match &settings.etcd {
            Some(etcd) => format!("etcd {}", etcd.endpoints.join(",")),
            None => format!("redb {}", settings.data_dir.display()),
        }
    }
}

/// Opens the store `settings` name: etcd when `--etcd-servers` is given (connecting and
/// checking that etcd answers), else the redb file under the data dir.
///
/// # Errors
/// etcd unreachable or refusing the TLS material (`main` exits 64: a configuration
/// error); the data dir or the redb file unusable.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Storage> {
    if let Some(options) = &settings.etcd {
        let store = EtcdStore::connect(options.clone())
            .await
            .with_context(|| format!("connecting to etcd at {}", options.endpoints.join(",")))?;
        return Ok(Storage::Shared(Arc::new(store)));
    }
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("creating data dir {}", settings.data_dir.display()))?;
    // The store holds token hashes and credentials' records: owner only.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&settings.data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| {
                format!(
                    "restricting data dir {} to its owner",
                    settings.data_dir.display()
                )
            })?;
    }
    let store_path = settings.data_dir.join("store.redb");
    let store = RedbStore::open(
        &store_path,
        RedbOptions {
            cache_size_bytes: settings.cache_size_bytes,
            ..RedbOptions::default()
        },
    )
    .with_context(|| format!("opening store {}", store_path.display()))?;
    Ok(Storage::Embedded(Arc::new(store)))
}

/// The store's health as `/readyz` reports it, with what the hub does meanwhile.
pub fn health(settings: &Settings) -> Arc<StoreHealth> {
    StoreHealth::with_meanwhile(
        if settings.etcd.is_some() {
            "etcd"
        } else {
            "the store"
        },
        Meanwhile {
            unavailable: "DNS and agents keep their last state",
            recovered: " and served DNS from its last state",
            logged: ", DNS serves its last state",
        },
    )
}

/// Every interval, discards history older than the previous tick (so watchers and
/// paged lists keep at least one interval).
async fn compact_periodically(store: Arc<dyn Store>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.tick().await;
    let mut previous = None;
    loop {
        ticker.tick().await;
        let current = match store.revision().await {
            Ok(revision) => revision,
            Err(e) => {
                tracing::warn!(error = %e, "reading revision for compaction failed");
                continue;
            }
        };
        if let Some(revision) = previous {
            match store.compact(revision).await {
                Ok(()) => tracing::debug!(revision, "compacted history"),
                Err(e) => tracing::warn!(revision, error = %e, "compaction failed"),
            }
        }
        previous = Some(current);
    }
}
