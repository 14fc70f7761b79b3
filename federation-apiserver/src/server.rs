//! Running the server: open the store, bind, serve HTTP/1.1 and h2 (plain or TLS),
//! print the READY line, compact history periodically, stop on SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fedingress_store::{RedbOptions, RedbStore, Store};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::api::{self, ApiSettings, AppState, Peer};
use crate::config::Settings;
use crate::hub::Hub;
use crate::hub::controller::Controller;
use crate::hub::gateway::Gateway;
use crate::hub::tokens::TokenStore;
use crate::registry::Registry;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the API server until SIGTERM or SIGINT.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    std::fs::create_dir_all(&settings.data_dir)
        .with_context(|| format!("creating data dir {}", settings.data_dir.display()))?;
    let store_path = settings.data_dir.join("store.redb");
    let store: Arc<dyn Store> = Arc::new(
        RedbStore::open(
            &store_path,
            RedbOptions {
                cache_size_bytes: settings.cache_size_bytes,
                ..RedbOptions::default()
            },
        )
        .with_context(|| format!("opening store {}", store_path.display()))?,
    );
    let listener = TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("binding {}", settings.listen))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    let agent_listener = TcpListener::bind(settings.agent_listen)
        .await
        .with_context(|| format!("binding the agent gateway on {}", settings.agent_listen))?;
    let agent_bound = agent_listener
        .local_addr()
        .context("reading the agent gateway address")?;
    let registry = Registry::new(store.clone());
    let tokens = TokenStore::new(store.clone());
    let state_dns = Arc::new(std::sync::OnceLock::new());
    let state = Arc::new(AppState::new(
        registry.clone(),
        settings.auth,
        tokens.clone(),
        state_dns.clone(),
        ApiSettings {
            bookmark_interval: settings.bookmark_interval,
            ..ApiSettings::default()
        },
    ));
    let router = api::router(state);
    tokio::spawn(compact_periodically(
        store.clone(),
        settings.compaction_interval,
    ));

    // The embedded DNS server, when configured.
    let (gslb, dns_server, dns_bound) = match settings.dns_listen {
        Some(listen) => {
            let bound = crate::hub::gslb::Gslb::bind(&settings.dns, listen).await?;
            let server = bound.server.clone();
            let allow = settings.dns.allow_transfer.clone();
            let serving = bound.server.clone().serve(bound.udp, bound.tcp, allow);
            tokio::spawn(async move {
                if let Err(e) = serving.await {
                    tracing::error!(error = %e, "DNS server stopped");
                }
            });
            (Some(bound.gslb), Some(server), Some(bound.address))
        }
        None => (None, None, None),
    };
    let _ = state_dns.set(dns_server);

    let hub = Hub::new(settings.hub);
    tokio::spawn(Controller::new(registry.clone(), hub.clone(), tokens.clone(), gslb).run());
    let mut gateway = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .tcp_nodelay(true);
    if let Some((cert, key)) = &settings.tls_pem {
        let identity = tonic::transport::Identity::from_pem(cert, key);
        gateway = gateway
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .context("configuring the agent gateway's TLS")?;
    }
    let gateway = gateway
        .add_service(Gateway::server(hub, tokens, registry))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(
            agent_listener,
        ));
    tokio::spawn(async move {
        if let Err(e) = gateway.await {
            tracing::error!(error = %e, "agent gateway stopped");
        }
    });

    let tls = settings.tls.map(tokio_rustls::TlsAcceptor::from);
    tracing::info!(address = %bound, agent_address = %agent_bound, tls = tls.is_some(), data_dir = %settings.data_dir.display(), "serving");
    ready_line(bound, agent_bound, dns_bound);
    let shutdown = shutdown_signal();
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
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, peer, router).await,
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => serve_connection(stream, peer, router).await,
            }
        });
    }
    tracing::info!("shutting down");
    Ok(())
}

async fn serve_connection<S>(stream: S, peer: SocketAddr, router: axum::Router)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(Peer(peer));
            router.clone().oneshot(request)
        });
    if let Err(e) = auto::Builder::new(TokioExecutor::new())
        .serve_connection_with_upgrades(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Prints the one line tests and tools wait for.
fn ready_line(api: SocketAddr, agent: SocketAddr, dns: Option<SocketAddr>) {
    use std::io::Write;
    let mut line = serde_json::json!({"api": api.to_string(), "agent": agent.to_string()});
    if let Some(dns) = dns {
        line["dns"] = serde_json::json!(dns.to_string());
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "READY {line}");
    let _ = stdout.flush();
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

async fn shutdown_signal() {
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
