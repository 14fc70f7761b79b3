//! The listeners of the process ([`Listeners`]), bound before anything is served, and
//! their [`Addresses`]: the REST API's
//! ([`ApiListener`]: TLS or plain text, the open-connection cap, the handshake and
//! first-request deadlines) and the agent gateway's ([`AgentListener`]: its connection
//! cap and live-stream deadline). DNS's sockets are bound by `fedingress_hub::gslb`.
//! Serving one REST connection is [`crate::connections::serve`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fedingress_apiserver::metrics::{LimitCounters, Metrics};
use fedingress_hub::admission::{AdmissionLayer, GatewayLimits};
use fedingress_hub::gateway::incoming::{Connections, capped_incoming};
use fedingress_hub::gslb::{Bound, Gslb};
use fedingress_hub::metrics::HubMetrics;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::config::Settings;
use crate::connections::{Open, Protocol, Serving};
use crate::limits::{InFlight, Limits};

/// The addresses the process is bound to (port 0 resolved).
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

/// Every listener of the process, bound.
pub struct Listeners {
    pub api: ApiListener,
    pub agent: AgentListener,
    /// DNS, when `--dns-listen` is given: the server and its sockets, with the GSLB
    /// state the controller publishes to.
    pub dns: Option<Bound>,
    pub addresses: Addresses,
}

impl Listeners {
    /// Binds the API, the agent gateway and DNS, in that order.
    pub async fn bind(settings: &Settings) -> anyhow::Result<Listeners> {
        let api = ApiListener::bind(settings).await?;
        let agent = AgentListener::bind(settings).await?;
        let dns = match settings.dns_listen {
            Some(listen) => Some(Gslb::bind(&settings.dns, listen).await?),
            None => None,
        };
        let addresses = Addresses {
            api: api.address,
            agent: agent.address,
            dns: match &dns {
                Some(bound) => Some(bound.udp.local_addr().context("reading the DNS address")?),
                None => None,
            },
        };
        Ok(Listeners {
            api,
            agent,
            dns,
            addresses,
        })
    }
}

/// How long a client has to finish its TLS handshake (REST API and agent gateway).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The REST API's bound listener, with its TLS and limits.
pub struct ApiListener {
    listener: TcpListener,
    pub address: SocketAddr,
    tls: Option<TlsAcceptor>,
    limits: Arc<Limits>,
}

impl ApiListener {
    /// Binds `settings.listen`.
    pub async fn bind(settings: &Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("binding {}", settings.listen))?;
        let address = listener.local_addr().context("reading the bound address")?;
        Ok(Self {
            listener,
            address,
            tls: settings.tls.clone().map(TlsAcceptor::from),
            limits: Arc::new(settings.limits.clone()),
        })
    }

    /// Accepts connections until dropped and serves each with `router` on a task of
    /// its own; over `limits.maxConnections` open, a connection is closed at once.
    pub async fn serve(self, router: axum::Router, metrics: Arc<Metrics>) {
        let limits = self.limits;
        let serving = Serving {
            router,
            in_flight: Arc::new(InFlight::new(&limits)),
            limits: limits.clone(),
            metrics: metrics.clone(),
            tls: self.tls.is_some(),
        };
        let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Over the cap: close at once (no handshake, no buffers), and count it.
            let Some(open) = Open::try_new(&connections, &metrics) else {
                LimitCounters::count(&metrics.limits.connections_refused);
                tracing::debug!(%peer, max_connections = limits.max_connections, "connection refused: limits.maxConnections open");
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            // One task per connection, ended with it: the accept loop's, not the app's.
            tokio::spawn(accept(
                stream,
                peer,
                self.tls.clone(),
                serving.clone(),
                open,
            ));
        }
    }
}

/// Completes one accepted connection's handshake (TLS within [`HANDSHAKE_TIMEOUT`]) and
/// serves it once its first bytes decide HTTP/1 or HTTP/2, within the header-read
/// timeout (with TLS its plain text's, else the socket's).
async fn accept(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    serving: Serving,
    _open: Open,
) {
    match tls {
        Some(acceptor) => {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let protocol = if stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice()) {
                        Protocol::Http2
                    } else {
                        Protocol::Http1
                    };
                    let stream = crate::connections::Deciding::new(
                        stream,
                        serving.limits.header_read_timeout,
                        serving.metrics.clone(),
                    );
                    crate::connections::serve(stream, peer, serving, protocol).await
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        }
        None => {
            match crate::connections::sniff(&stream, serving.limits.header_read_timeout).await {
                Some(protocol) => crate::connections::serve(stream, peer, serving, protocol).await,
                None => {
                    LimitCounters::count(&serving.metrics.limits.header_timeouts);
                    tracing::debug!(%peer, "no request within limits.headerReadTimeoutSeconds");
                }
            }
        }
    }
}

/// The agent gateway's gRPC server, its services added, behind admission.
pub type Gateway = tonic::transport::server::Router<
    tower::layer::util::Stack<AdmissionLayer, tower::layer::util::Identity>,
>;

/// The agent gateway's bound listener, with its limits.
pub struct AgentListener {
    listener: TcpListener,
    pub address: SocketAddr,
    limits: GatewayLimits,
    /// Its open connections, which admission marks live.
    pub connections: Arc<Connections>,
}

impl AgentListener {
    /// Binds `settings.agent_listen`.
    pub async fn bind(settings: &Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.agent_listen)
            .await
            .with_context(|| format!("binding the agent gateway on {}", settings.agent_listen))?;
        let address = listener
            .local_addr()
            .context("reading the agent gateway address")?;
        Ok(Self {
            listener,
            address,
            limits: settings.limits.gateway.clone(),
            connections: Arc::new(Connections::default()),
        })
    }

    /// Serves `gateway` (its admission built on [`AgentListener::connections`]) on the
    /// accepted connections: at most `limits.gateway.maxConnections` open, each closed
    /// once it has carried no live stream for `limits.gateway.helloTimeout` (from
    /// accept: its first bytes, TLS handshake, HTTP/2 preface and Hello), and at the
    /// cap the one without a live stream longest closed for a new one.
    pub async fn serve(
        self,
        gateway: Gateway,
        metrics: Arc<HubMetrics>,
    ) -> Result<(), tonic::transport::Error> {
        let incoming = capped_incoming(
            self.listener,
            self.limits.max_connections,
            self.limits.hello_timeout,
            self.connections,
            metrics,
        );
        gateway.serve_with_incoming(incoming).await
    }
}
