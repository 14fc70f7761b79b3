//! Builds the hub ([`Hub::build`]) from the settings and the store: agent sessions,
//! the agent gateway, the controller (its first pass run), replication and the agent
//! directory on a shared store, the namespace and claim controllers, the DNS providers
//! and the DNS server. It spawns nothing: what runs is returned as [`Tasks`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fedingress_apiserver::endpoints::extensions::Extensions;
use fedingress_apiserver::registry::Registry;
use fedingress_hub::Sessions;
use fedingress_hub::admission::AdmissionLayer;
use fedingress_hub::controller::{Controller, Parts};
use fedingress_hub::credentials::Revocations;
use fedingress_hub::directory::{AgentDirectory, AgentPublisher};
use fedingress_hub::gateway::Gateway;
use fedingress_hub::gateway::incoming::Connections;
use fedingress_hub::gslb::Bound;
use fedingress_hub::metrics::{HubMetrics, report_role};
use fedingress_hub::pki::AgentCa;
use fedingress_hub::providers::ProviderSet;
use fedingress_hub::replication::{Replication, Role};
use fedingress_hub::tokens::TokenStore;
use fedingress_store::SharedStore;
use tokio::sync::watch;

use crate::config::Settings;
use crate::listener::{AgentListener, HANDSHAKE_TIMEOUT};
use crate::storage::Storage;
use crate::tasks::Tasks;

/// The built hub: its REST extensions, and what runs it.
pub struct Hub {
    /// The hub's REST endpoints (tokens, DNS, explain), for the REST server.
    pub extensions: Extensions,
    /// Started at once, before the controller's first pass: they follow the store
    /// (revocations, agent records, roles, namespaces, claims).
    pub background: Tasks,
    /// Started when serving: the agent gateway and DNS.
    pub serving: Tasks,
    /// Ends this replica's part in the election on shutdown.
    pub replica: Replica,
    /// The controller, to start once the background tasks run.
    pub controller: PendingController,
}

/// What the controller starts from.
pub struct PendingController(Parts);

impl PendingController {
    /// Runs the controller's first pass (plans published, DNS snapshot built from
    /// persisted routing state) and returns the task that runs it from then on.
    pub async fn start(self) -> anyhow::Result<Tasks> {
        let controller = Controller::start(self.0)
            .await
            .context("starting the controller")?;
        let mut tasks = Tasks::default();
        tasks.add("controller", controller.run());
        Ok(tasks)
    }
}

/// This replica's part in leader election.
pub enum Replica {
    /// One replica (redb): always the leader; the role's sender is kept for as long as
    /// the process serves.
    Alone(watch::Sender<Role>),
    /// Several (etcd): the election and the shared store its lease lives in.
    Elected(Replication, Arc<dyn SharedStore>),
}

impl Replica {
    /// Steps down: another replica leads, and this one's agent records go, without
    /// waiting for the lease to expire.
    pub async fn stop(self) {
        if let Replica::Elected(replication, shared) = self {
            replication.stop(&*shared).await;
        }
    }
}

/// Who holds which agents: the sessions on this replica, the agents the controller
/// sees (a mirror of every replica's, on a shared store) and this replica's role.
struct Roles {
    agents: Arc<Sessions>,
    role: watch::Receiver<Role>,
    replica: Replica,
    tasks: Tasks,
}

impl Hub {
    /// Builds the hub on `storage`, serving agents on `agent` and DNS from `dns` (when
    /// bound); the controller is started by [`PendingController::start`].
    pub async fn build(
        settings: &Settings,
        storage: &Storage,
        registry: &Registry,
        agent: AgentListener,
        dns: Option<Bound>,
    ) -> anyhow::Result<Hub> {
        let store = storage.store();
        let mut background = Tasks::default();
        let mut serving = Tasks::default();
        let agent_ca = agent_ca(settings, storage)?;
        let revocations = Revocations::default();
        background.add("revocations", revocations.clone().follow(store.clone()));
        let sessions = Sessions::new(settings.hub);
        let metrics = Arc::new(HubMetrics::default());
        let roles = roles(settings, storage, &sessions, &metrics).await?;
        background.append(roles.tasks);
        // Every replica builds the providers (explain asks them); only the leader's
        // controller syncs them.
        let providers = providers(settings, &metrics);
        background.add(
            "namespaces",
            fedingress_hub::namespaces::NamespaceController::new(
                registry.clone(),
                roles.role.clone(),
            )
            .run(),
        );
        background.add(
            "claims",
            fedingress_hub::claims::ClaimController::new(registry.clone(), roles.role.clone())
                .run(),
        );
        let (gslb, dns_server) = match dns {
            Some(bound) => {
                let server = bound.server.clone();
                let allow = settings.dns.allow_transfer.clone();
                serving.add("dns", server.clone().serve(bound.udp, bound.tcp, allow));
                (Some(bound.gslb), Some(server))
            }
            None => (None, None),
        };
        let dns_providers = providers
            .as_ref()
            .map(ProviderSet::providers)
            .unwrap_or_default();
        let controller = Parts {
            registry: registry.clone(),
            sessions: sessions.clone(),
            agents: roles.agents,
            role: roles.role,
            gslb,
            providers,
            metrics: metrics.clone(),
        };
        let tokens = TokenStore::new(store).with_join_ttl(settings.join_token_ttl);
        let extensions = extensions(fedingress_hub::endpoints::Endpoints {
            tokens: tokens.clone(),
            dns: dns_server,
            dns_providers,
            hub: sessions.clone(),
            metrics: metrics.clone(),
        });
        let identity = fedingress_hub::gateway::Identity {
            certificate_validity: settings.certificate_validity,
            tls: settings.tls_pem.is_some(),
            revocations,
            ca: agent_ca.clone(),
        };
        let gateway =
            gateway(settings, agent_ca.as_deref(), &agent.connections, &metrics)?.add_service(
                Gateway::server(sessions, tokens, registry.clone(), identity),
            );
        serving.add("agent-gateway", agent.serve(gateway, metrics));
        Ok(Hub {
            extensions,
            background,
            serving,
            replica: roles.replica,
            controller: PendingController(controller),
        })
    }
}

/// The hub's REST endpoints, as extensions of the REST server.
fn extensions(endpoints: fedingress_hub::endpoints::Endpoints) -> Extensions {
    let mut extensions = Extensions::default();
    fedingress_hub::endpoints::register(&mut extensions, endpoints);
    extensions
}

/// The agent CA: from files, else generated once into the data dir of the embedded
/// store; replicas on etcd share no data dir, so without files they have none (tokens
/// only).
fn agent_ca(settings: &Settings, storage: &Storage) -> anyhow::Result<Option<Arc<AgentCa>>> {
    Ok(match (&settings.agent_ca, storage) {
        (Some(ca), _) => Some(ca.clone()),
        (None, Storage::Embedded(_)) => Some(Arc::new(
            AgentCa::load_or_generate(&settings.data_dir)
                .map_err(anyhow::Error::msg)
                .context("the agent CA")?
                .0,
        )),
        (None, Storage::Shared(_)) => {
            tracing::warn!(
                "no --agent-ca-cert-file/--agent-ca-key-file: agents cannot join with certificates, only tokens"
            );
            None
        }
    })
}

/// One replica on an embedded store leads with `sessions` for agents; several on a
/// shared store elect a leader, publish their sessions and mirror everyone's.
async fn roles(
    settings: &Settings,
    storage: &Storage,
    sessions: &Arc<Sessions>,
    metrics: &Arc<HubMetrics>,
) -> anyhow::Result<Roles> {
    let mut tasks = Tasks::default();
    let shared = match storage {
        Storage::Embedded(store) => {
            let (role_tx, role) = watch::channel(Role::Leader(store.clone()));
            return Ok(Roles {
                agents: sessions.clone(),
                role,
                replica: Replica::Alone(role_tx),
                tasks,
            });
        }
        Storage::Shared(shared) => shared,
    };
    let replication = Replication::start(shared.clone(), settings.replica.clone())
        .await
        .context("granting the replica's etcd lease")?;
    let mirror = Sessions::new(settings.hub);
    let publisher = AgentPublisher {
        hub: sessions.clone(),
        store: shared.clone(),
        replica: settings.replica.name.clone(),
        lease: replication.lease.clone(),
    };
    tasks.add("agent-publisher", publisher.run());
    let directory = AgentDirectory {
        store: storage.store(),
        mirror: mirror.clone(),
    };
    tasks.add("agent-directory", directory.run());
    let role = replication.role.clone();
    tasks.add("report-role", report_role(role.clone(), metrics.clone()));
    Ok(Roles {
        agents: mirror,
        role,
        replica: Replica::Elected(replication, shared.clone()),
        tasks,
    })
}

/// The DNS providers, when an owner id and providers are configured; their metrics
/// are reported with the hub's.
fn providers(settings: &Settings, metrics: &HubMetrics) -> Option<ProviderSet> {
    let owner_id = settings.dns.owner_id.as_ref()?;
    if settings.dns.providers.is_empty() {
        return None;
    }
    let providers = ProviderSet::build(&settings.dns.providers, owner_id, &settings.dns.zones);
    metrics.set_providers(providers.metrics());
    Some(providers)
}

/// The gateway server's layers: admission.
type Admitted = tower::layer::util::Stack<AdmissionLayer, tower::layer::util::Identity>;

/// The agent gateway's gRPC server, behind admission, with TLS when the API has it
/// (client certificates of the agent CA optional, so token agents still connect).
fn gateway(
    settings: &Settings,
    agent_ca: Option<&AgentCa>,
    connections: &Arc<Connections>,
    metrics: &Arc<HubMetrics>,
) -> anyhow::Result<tonic::transport::Server<Admitted>> {
    let mut gateway = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .max_concurrent_streams(settings.limits.gateway.max_streams_per_connection)
        .tcp_nodelay(true)
        .layer(AdmissionLayer::new(
            settings.limits.gateway.clone(),
            metrics.clone(),
            connections.clone(),
        ));
    let Some((cert, key)) = &settings.tls_pem else {
        return Ok(gateway);
    };
    let identity = tonic::transport::Identity::from_pem(cert, key);
    // The handshake has its own timeout (the live-stream deadline of the connection
    // bounds it too, at limits.gateway.helloTimeoutSeconds).
    let mut tls = tonic::transport::ServerTlsConfig::new()
        .identity(identity)
        .timeout(HANDSHAKE_TIMEOUT)
        // The server's order of cipher suites (strongest first), not the client's.
        .ignore_client_order(true);
    if let Some(ca) = agent_ca {
        tls = tls
            .client_ca_root(tonic::transport::Certificate::from_pem(ca.cert_pem()))
            .client_auth_optional(true);
    }
    gateway = gateway
        .tls_config(tls)
        .context("configuring the agent gateway's TLS")?;
    Ok(gateway)
}
