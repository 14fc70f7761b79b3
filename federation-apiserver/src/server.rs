//! Running the server: [`open_store`] opens the store (etcd or redb), [`Server::bind`]
//! (or [`Server::bind_with_store`]) binds every address and runs
//! the controller's first pass; [`Server::serve`] serves HTTP/1.1 and h2 (plain or
//! TLS), the agent gateway and DNS, compacts history periodically and stops when told.
//! `main` prints the READY line ([`print_ready`]) between the two and stops on
//! [`shutdown_signal`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::response::IntoResponse;
use fedingress_store::{EtcdStore, RedbOptions, RedbStore, SharedStore, Store};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::config::Settings;
use crate::connections::Protocol;
use crate::limits::{InFlight, Limits, RequestKind};
use fedingress_apiserver::endpoints::extensions::Extensions;
use fedingress_apiserver::endpoints::{self, ApiSettings, AppState, Peer};
use fedingress_apiserver::metrics::{LimitCounters, Metrics};
use fedingress_apiserver::registry::Registry;
use fedingress_dns::server::DnsServer;
use fedingress_hub::Sessions;
use fedingress_hub::controller::{Controller, Parts};
use fedingress_hub::directory::{AgentDirectory, AgentPublisher};
use fedingress_hub::gateway::Gateway;
use fedingress_hub::metrics::{HubMetrics, report_role};
use fedingress_hub::replication::{Replication, Role};
use fedingress_hub::tokens::TokenStore;

/// How long a client has to finish its TLS handshake (REST API and agent gateway).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The addresses a [`Server`] is bound to (port 0 resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addresses {
    pub api: SocketAddr,
    pub agent: SocketAddr,
    pub dns: Option<SocketAddr>,
}

impl Addresses {
    /// The `READY {json}` line tests and tools wait for.
    pub fn ready_line(&self) -> String {
        let mut line =
            serde_json::json!({"api": self.api.to_string(), "agent": self.agent.to_string()});
        if let Some(dns) = self.dns {
            line["dns"] = serde_json::json!(dns.to_string());
        }
        format!("READY {line}")
    }
}

/// A bound API server: the store is open, every socket bound, the controller has run
/// its first pass (plans published, DNS snapshot built from persisted routing state),
/// nothing served yet. Needs tokio's multi-threaded runtime (the controller's CPU-bound
/// steps run in `block_in_place`).
pub struct Server {
    addresses: Addresses,
    listener: TcpListener,
    agent_listener: TcpListener,
    dns: Option<(
        Arc<DnsServer>,
        tokio::net::UdpSocket,
        TcpListener,
        Vec<ipnet::IpNet>,
    )>,
    router: axum::Router,
    store: Arc<dyn Store>,
    /// With several replicas: the election (stopped on shutdown) and the shared store.
    replication: Option<(Replication, Arc<dyn SharedStore>)>,
    /// With one replica: the constant leader role.
    _role: Option<tokio::sync::watch::Sender<Role>>,
    compaction_interval: Duration,
    controller: Controller,
    gateway: tonic::transport::server::Router<
        tower::layer::util::Stack<
            fedingress_hub::admission::AdmissionLayer,
            tower::layer::util::Identity,
        >,
    >,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Arc<Limits>,
    metrics: Arc<Metrics>,
    hub_metrics: Arc<HubMetrics>,
}

impl Server {
    /// Opens the store and binds every address of `settings`; see [`Server`].
    pub async fn bind(settings: Settings) -> anyhow::Result<Server> {
        let store = open_store(&settings).await?;
        Self::bind_with_store(settings, store).await
    }

    /// Binds every address of `settings` and serves objects from `storage` (opened by
    /// [`open_store`]).
    pub async fn bind_with_store(settings: Settings, storage: Storage) -> anyhow::Result<Server> {
        let store = storage.store();
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let api = listener.local_addr().context("reading the bound address")?;
        let agent_listener = TcpListener::bind(settings.agent_listen)
            .await
            .with_context(|| format!("binding the agent gateway on {}", settings.agent_listen))?;
        let agent = agent_listener
            .local_addr()
            .context("reading the agent gateway address")?;
        let (gslb, dns) = match settings.dns_listen {
            Some(listen) => {
                let bound = fedingress_hub::gslb::Gslb::bind(&settings.dns, listen).await?;
                let allow = settings.dns.allow_transfer.clone();
                (
                    Some(bound.gslb),
                    Some((bound.server, bound.udp, bound.tcp, allow)),
                )
            }
            None => (None, None),
        };
        let addresses = Addresses {
            api,
            agent,
            dns: match &dns {
                Some((_, udp, _, _)) => Some(udp.local_addr().context("reading the DNS address")?),
                None => None,
            },
        };

        let registry = Registry::new(store.clone());
        let tokens = TokenStore::new(store.clone()).with_join_ttl(settings.join_token_ttl);
        // The agent CA: from files, else generated once into the data dir of the
        // embedded store; replicas on etcd share no data dir, so without files they
        // have none (tokens only).
        let agent_ca = match (&settings.agent_ca, &storage) {
            (Some(ca), _) => Some(ca.clone()),
            (None, Storage::Embedded(_)) => Some(Arc::new(
                fedingress_hub::pki::AgentCa::load_or_generate(&settings.data_dir)
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
        };
        let revocations = fedingress_hub::credentials::Revocations::default();
        tokio::spawn(revocations.clone().follow(store.clone()));
        let hub = Sessions::new(settings.hub);
        let hub_metrics = Arc::new(HubMetrics::default());
        let (agents, role, replication, constant_role) = match &storage {
            Storage::Embedded(_) => {
                let (role_tx, role) = tokio::sync::watch::channel(Role::Leader(store.clone()));
                (hub.clone(), role, None, Some(role_tx))
            }
            Storage::Shared(shared) => {
                let replication = Replication::start(shared.clone(), settings.replica.clone())
                    .await
                    .context("granting the replica's etcd lease")?;
                let mirror = Sessions::new(settings.hub);
                tokio::spawn(
                    AgentPublisher {
                        hub: hub.clone(),
                        store: shared.clone(),
                        replica: settings.replica.name.clone(),
                        lease: replication.lease.clone(),
                    }
                    .run(),
                );
                tokio::spawn(
                    AgentDirectory {
                        store: store.clone(),
                        mirror: mirror.clone(),
                    }
                    .run(),
                );
                let role = replication.role.clone();
                tokio::spawn(report_role(role.clone(), hub_metrics.clone()));
                (mirror, role, Some((replication, shared.clone())), None)
            }
        };
        // Every replica builds the providers (explain asks them); only the leader's
        // controller syncs them.
        let providers = match (&settings.dns.owner_id, settings.dns.providers.is_empty()) {
            (Some(owner_id), false) => Some(fedingress_hub::providers::ProviderSet::build(
                &settings.dns.providers,
                owner_id,
                &settings.dns.zones,
            )),
            _ => None,
        };
        if let Some(providers) = &providers {
            hub_metrics.set_providers(providers.metrics());
        }
        let dns_providers = providers
            .as_ref()
            .map(|p| p.providers())
            .unwrap_or_default();
        tokio::spawn(
            fedingress_hub::namespaces::NamespaceController::new(registry.clone(), role.clone())
                .run(),
        );
        let controller = Controller::start(Parts {
            registry: registry.clone(),
            sessions: hub.clone(),
            agents,
            role,
            gslb,
            providers,
            metrics: hub_metrics.clone(),
        })
        .await
        .context("starting the controller")?;
        let mut extensions = Extensions::default();
        fedingress_hub::endpoints::register(
            &mut extensions,
            fedingress_hub::endpoints::Endpoints {
                tokens: tokens.clone(),
                dns: dns.as_ref().map(|(server, ..)| server.clone()),
                dns_providers,
                hub: hub.clone(),
                metrics: hub_metrics.clone(),
            },
        );
        let mut state = AppState::new(
            registry.clone(),
            settings.auth,
            ApiSettings {
                bookmark_interval: settings.bookmark_interval,
                watch: settings.limits.watch(),
            },
            extensions,
        );
        let metrics = state.metrics.clone();
        let health = fedingress_apiserver::health::StoreHealth::with_meanwhile(
            if settings.etcd.is_some() {
                "etcd"
            } else {
                "the store"
            },
            fedingress_apiserver::health::Meanwhile {
                unavailable: "DNS and agents keep their last state",
                recovered: " and served DNS from its last state",
                logged: ", DNS serves its last state",
            },
        );
        state.health = health.clone();
        // RBAC: bootstrap roles and bindings, then the authorizer's cache. Requests are
        // answered 503 until it is loaded; waiting here keeps that window out of sight.
        let bootstrap = tokio::spawn(fedingress_apiserver::auth::rbac::bootstrap_until_done(
            registry.clone(),
        ));
        tokio::spawn(state.authorizer.clone().run(store.clone()));
        if tokio::time::timeout(Duration::from_secs(10), bootstrap)
            .await
            .is_err()
            || !state
                .authorizer
                .wait_bootstrapped(Duration::from_secs(10))
                .await
        {
            tracing::warn!("RBAC not loaded yet: requests are answered 503 until it is");
        }
        // Namespaces: kube's and those already holding objects, before anything is
        // served (creates are admitted only in namespaces that exist).
        let namespaces = tokio::spawn(
            fedingress_apiserver::registry::namespaces::bootstrap_until_done(registry.clone()),
        );
        if tokio::time::timeout(Duration::from_secs(10), namespaces)
            .await
            .is_err()
        {
            tracing::warn!(
                "bootstrap namespaces not created yet: creates in them are refused until they are"
            );
        }
        if let Some(oidc) = state.auth.oidc() {
            tokio::spawn(oidc.clone().warm_up());
        }
        if let Some(audit) = &settings.audit {
            state.audit = Some(
                fedingress_apiserver::auth::audit::AuditLog::open(
                    &audit.path,
                    audit.batch_buffer_size,
                )
                .context("opening the audit log")?,
            );
        }
        let state = Arc::new(state);
        let replica_name = match &storage {
            Storage::Shared(_) => settings.replica.name.clone(),
            Storage::Embedded(_) => "federation-apiserver".to_string(),
        };
        tokio::spawn(health.clone().probe_commits(
            store.clone(),
            fedingress_apiserver::health::commit_probe_key(&replica_name),
            settings.commit_probe_interval,
        ));
        tokio::spawn(health.probe(store.clone(), registry.clone(), replica_name));
        let mut gateway = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .max_concurrent_streams(settings.limits.gateway.max_streams_per_connection)
            .tcp_nodelay(true)
            .layer(fedingress_hub::admission::AdmissionLayer::new(
                settings.limits.gateway.clone(),
                hub_metrics.clone(),
            ));
        if let Some((cert, key)) = &settings.tls_pem {
            let identity = tonic::transport::Identity::from_pem(cert, key);
            // Without a handshake timeout, a peer that sends a few bytes (ending the
            // first-bytes deadline) and stalls would hold a gateway connection slot.
            let mut tls = tonic::transport::ServerTlsConfig::new()
                .identity(identity)
                .timeout(HANDSHAKE_TIMEOUT);
            // Client certificates of the agent CA; optional, so token agents still connect.
            if let Some(ca) = &agent_ca {
                tls = tls
                    .client_ca_root(tonic::transport::Certificate::from_pem(ca.cert_pem()))
                    .client_auth_optional(true);
            }
            gateway = gateway
                .tls_config(tls)
                .context("configuring the agent gateway's TLS")?;
        }
        let identity = fedingress_hub::gateway::Identity {
            ca: agent_ca,
            certificate_validity: settings.certificate_validity,
            tls: settings.tls_pem.is_some(),
            revocations,
        };
        let gateway = gateway.add_service(Gateway::server(hub, tokens, registry, identity));
        let storage = match &settings.etcd {
            Some(etcd) => format!("etcd {}", etcd.endpoints.join(",")),
            None => format!("redb {}", settings.data_dir.display()),
        };
        let replica = replication.as_ref().map(|_| settings.replica.name.clone());
        tracing::info!(address = %api, agent_address = %agent, dns_address = ?addresses.dns, tls = settings.tls.is_some(), storage, replica, "bound");
        Ok(Server {
            addresses,
            listener,
            agent_listener,
            dns,
            router: endpoints::router(state),
            store,
            replication,
            _role: constant_role,
            compaction_interval: settings.compaction_interval,
            controller,
            gateway,
            tls: settings.tls.map(tokio_rustls::TlsAcceptor::from),
            limits: Arc::new(settings.limits),
            metrics,
            hub_metrics,
        })
    }

    pub fn addresses(&self) -> Addresses {
        self.addresses
    }

    /// Serves DNS, the agent gateway and the API until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        let Server {
            listener,
            agent_listener,
            dns,
            router,
            store,
            replication,
            compaction_interval,
            controller,
            gateway,
            tls,
            _role,
            limits,
            metrics,
            hub_metrics,
            ..
        } = self;
        if let Some((server, udp, tcp, allow)) = dns {
            let serving = server.serve(udp, tcp, allow);
            tokio::spawn(async move {
                if let Err(e) = serving.await {
                    tracing::error!(error = %e, "DNS server stopped");
                }
            });
        }
        tokio::spawn(compact_periodically(store, compaction_interval));
        tokio::spawn(controller.run());
        let gateway =
            gateway.serve_with_incoming(fedingress_hub::gateway::incoming::capped_incoming(
                agent_listener,
                limits.gateway.max_connections,
                limits.gateway.hello_timeout,
                hub_metrics,
            ));
        tokio::spawn(async move {
            if let Err(e) = gateway.await {
                tracing::error!(error = %e, "agent gateway stopped");
            }
        });
        tracing::info!("serving");
        let serving = Serving {
            router,
            in_flight: Arc::new(InFlight::new(&limits)),
            limits: limits.clone(),
            metrics: metrics.clone(),
        };
        let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            // Over the cap: close at once (no handshake, no buffers), and count it.
            let Some(open) = crate::connections::Open::try_new(&connections, &metrics) else {
                LimitCounters::count(&metrics.limits.connections_refused);
                tracing::debug!(%peer, max_connections = limits.max_connections, "connection refused: limits.maxConnections open");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let serving = serving.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let _open = open;
                match tls {
                    Some(acceptor) => {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                        {
                            Ok(Ok(stream)) => {
                                let protocol = if stream.get_ref().1.alpn_protocol()
                                    == Some(b"h2".as_slice())
                                {
                                    Protocol::Http2
                                } else {
                                    Protocol::Http1
                                };
                                serve_connection(stream, peer, serving, protocol).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                    None => {
                        match crate::connections::sniff(&stream, serving.limits.header_read_timeout)
                            .await
                        {
                            Some(protocol) => {
                                serve_connection(stream, peer, serving, protocol).await
                            }
                            None => {
                                LimitCounters::count(&serving.metrics.limits.header_timeouts);
                                tracing::debug!(%peer, "no request within limits.headerReadTimeoutSeconds");
                            }
                        }
                    }
                }
            });
        }
        tracing::info!("shutting down");
        if let Some((replication, shared)) = replication {
            // Another replica leads, and this one's agent records go, without waiting for
            // the lease to expire.
            replication.stop(&*shared).await;
        }
        Ok(())
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
}

/// Prints the one line tests and tools wait for.
pub fn print_ready(addresses: &Addresses) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", addresses.ready_line());
    let _ = stdout.flush();
}

/// What every REST connection is served with.
#[derive(Clone)]
struct Serving {
    router: axum::Router,
    limits: Arc<Limits>,
    in_flight: Arc<InFlight>,
    metrics: Arc<Metrics>,
}

/// Serves one connection with the serving limits: HTTP/1 header-read timeout, HTTP/2
/// stream cap and keep-alive PINGs, the in-flight caps (429), and the idle timeout.
async fn serve_connection<S>(stream: S, peer: SocketAddr, serving: Serving, protocol: Protocol)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Serving {
        router,
        limits,
        in_flight,
        metrics,
    } = serving;
    let activity = Arc::new(crate::connections::Activity::default());
    let service = {
        let activity = activity.clone();
        let metrics = metrics.clone();
        let limits = limits.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(Peer(peer));
            let busy = activity.start();
            let kind = RequestKind::of(
                request.method(),
                request.uri().path(),
                request.uri().query(),
            );
            let admitted = in_flight.admit(kind);
            let router = router.clone();
            let metrics = metrics.clone();
            let limits = limits.clone();
            async move {
                let permit = match admitted {
                    Ok(permit) => permit,
                    Err(kind) => {
                        let (counter, key, cap) = match kind {
                            RequestKind::Mutating => (
                                &metrics.limits.inflight_refused_mutating,
                                "limits.maxMutatingRequestsInflight",
                                limits.max_mutating_requests_inflight,
                            ),
                            _ => (
                                &metrics.limits.inflight_refused_readonly,
                                "limits.maxRequestsInflight",
                                limits.max_requests_inflight,
                            ),
                        };
                        LimitCounters::count(counter);
                        let error = fedingress_apiserver::status::ApiError::too_many_requests(
                            format!(
                                "Too many requests, please try again later ({cap} in flight: {key})"
                            ),
                            1,
                        );
                        return Ok::<_, std::convert::Infallible>(error.into_response());
                    }
                };
                // Watches are long-running: their own duration applies.
                let response = if kind == RequestKind::Exempt {
                    router.oneshot(request).await?
                } else {
                    match tokio::time::timeout(limits.request_timeout, router.oneshot(request))
                        .await
                    {
                        Ok(response) => response?,
                        Err(_) => {
                            LimitCounters::count(&metrics.limits.request_timeouts);
                            tracing::debug!(%peer, "request timed out: limits.requestTimeoutSeconds");
                            return Ok(fedingress_apiserver::status::ApiError::timeout(format!(
                                "Timeout: request did not complete within {}s (limits.requestTimeoutSeconds)",
                                limits.request_timeout.as_secs()
                            ))
                            .into_response());
                        }
                    }
                };
                // The connection is busy until the body is sent (a watch streams for long).
                Ok(response.map(|body| {
                    axum::body::Body::new(crate::connections::HeldBody::new(body, (busy, permit)))
                }))
            }
        })
    };
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(crate::limits::HTTP2_KEEP_ALIVE_TIMEOUT);
    let builder = match protocol {
        Protocol::Http1 => builder.http1_only(),
        Protocol::Http2 => builder.http2_only(),
    };
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = activity.idle_for(limits.idle_timeout) => {
            LimitCounters::count(&metrics.limits.idle_closed);
            tracing::debug!(%peer, "connection idle for limits.idleTimeoutSeconds: closing");
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(limits.idle_timeout, connection.as_mut()).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            }
        }
    };
    if let Err(e) = result {
        let header_timeout = e
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout);
        if header_timeout {
            LimitCounters::count(&metrics.limits.header_timeouts);
            tracing::debug!(%peer, "request headers not received within limits.headerReadTimeoutSeconds");
        } else {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
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

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
