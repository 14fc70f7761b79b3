//! The standalone driver's data plane: the agent itself serves its cluster's share on
//! the configured listen addresses — HTTP host/path routing, HTTPS and TLS termination
//! with rustls, TLS passthrough by SNI, TCP and UDP proxies — to service endpoints from
//! the config, with active health checks, passive ejection, load counters and graceful
//! drain.
//!
//! Entry type: [`Standalone`]. [`Standalone::apply`] reconciles the running listeners
//! with a [`ClusterPlan`]; [`Standalone::report`] says how it is going;
//! [`Standalone::subscribe`] signals every change worth a report;
//! [`Standalone::metrics`] renders the counters for `/metrics`.
//!
//! Modules: `desired` (plan → listeners, pure), `routes` (routing tables, pure),
//! `endpoint` (health state machine and round-robin pool), `health` (active checks),
//! `tcp`, `udp`, `http` and `tls` (the proxies), `upstream` (HTTP/1.1 requests to
//! endpoints over pooled connections), `idle` (each endpoint's idle connections), `body`
//! (the request body sent to endpoints), `clienthello` (SNI without decrypting), `certs`
//! (TLS secrets and their reload), `drain` (graceful drain), `load` (counters), `limits`
//! (caps, timeouts, the descriptor budget and what was refused at them).

mod body;
mod certs;
mod clienthello;
mod desired;
mod drain;
mod endpoint;
mod health;
mod http;
mod idle;
mod limits;
mod load;
mod routes;
mod tcp;
mod tls;
mod udp;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use fedingress_api::cluster::Address;
use fedingress_api::plan::{
    AgentReport, BackendHealth, ClusterPlan, IngressKey, IngressReport, ListenerLoad, RuleError,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ServiceEndpoint};
use crate::driver::Driver;
use crate::load::RateMeter;
use certs::CertStore;
use desired::{BackendKey, DesiredListener, DesiredShare, Kind, ListenerKey, PathSpec, SniSpec};
use drain::Tracker;
use endpoint::{Endpoint, Health, Pool, Thresholds};
use health::CheckSettings;
use limits::Limits;
use load::LoadCounters;
use routes::{CertSource, HostRoutes, HttpTable, PathRoute, SniRoute, Target, TlsTable};

/// How often the TLS secret files are checked for changes.
const CERT_POLL: Duration = Duration::from_secs(1);

/// Where a TCP or UDP listener sends its traffic; swapped atomically on apply.
#[derive(Debug)]
pub(crate) struct Route {
    pub ingress: IngressKey,
    pub rule: u32,
    pub pool: Arc<Pool>,
}

/// A listener bound on one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ListenerId {
    kind: Kind,
    port: u16,
    bind: IpAddr,
}

impl ListenerId {
    fn key(&self) -> ListenerKey {
        (self.kind, self.port)
    }

    fn label(&self) -> String {
        format!("{} {}", self.kind, SocketAddr::new(self.bind, self.port))
    }
}

/// The routes of one listener, as built on apply.
#[derive(Clone)]
enum Seed {
    L4(Arc<Route>),
    Http(Arc<HttpTable>),
    Tls(Arc<TlsTable>),
}

/// Where a running listener takes its routes from.
enum Routing {
    L4(watch::Sender<Arc<Route>>),
    Http(Arc<ArcSwap<HttpTable>>),
    Tls(Arc<ArcSwap<TlsTable>>),
}

impl Routing {
    fn update(&self, seed: Seed) {
        match (self, seed) {
            (Routing::L4(routes), Seed::L4(route)) => {
                routes.send_replace(route);
            }
            (Routing::Http(table), Seed::Http(new)) => table.store(new),
            (Routing::Tls(table), Seed::Tls(new)) => table.store(new),
            // The listener id includes its kind, so seeds always fit.
            _ => tracing::error!("routes of another listener kind; not applied"),
        }
    }
}

struct Running {
    routing: Routing,
    load: Arc<LoadCounters>,
    tracker: Arc<Tracker>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

struct Checked {
    endpoint: Arc<Endpoint>,
    task: JoinHandle<()>,
}

/// A removed listener whose connections are finishing.
struct Draining {
    label: String,
    tracker: Arc<Tracker>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    listeners: BTreeMap<ListenerId, Running>,
    endpoints: BTreeMap<(String, SocketAddr), Checked>,
    pools: BTreeMap<BackendKey, Arc<Pool>>,
    shares: BTreeMap<IngressKey, DesiredShare>,
    /// Connections attributed to one ingress on one shared L7 listener (all addresses).
    share_loads: BTreeMap<(ListenerKey, IngressKey), Arc<LoadCounters>>,
    draining: Vec<Draining>,
    cert_watch: Option<JoinHandle<()>>,
}

impl Drop for State {
    fn drop(&mut self) {
        for checked in self.endpoints.values() {
            checked.task.abort();
        }
        if let Some(task) = &self.cert_watch {
            task.abort();
        }
        // Listeners stop on their own: their stop senders are dropped with them.
    }
}

/// What reconciling leaves for after the removed listeners are closed.
struct Pending {
    start: Vec<(ListenerId, Seed)>,
    /// Who uses each listener, for bind errors.
    users: BTreeMap<ListenerKey, Vec<(IngressKey, u32)>>,
    shares: BTreeMap<IngressKey, DesiredShare>,
}

/// The standalone driver: every rule kind on every configured bind address.
///
/// Create it with [`Standalone::new`] (binds nothing), then call [`Standalone::apply`]
/// inside a tokio runtime. Dropping it closes its listeners and stops its checks;
/// [`Standalone::shutdown`] closes the listeners, drains their connections (bounded by
/// `drainTimeoutMs`) and waits until they are done.
pub struct Standalone {
    binds: Vec<IpAddr>,
    addresses: Vec<Address>,
    services: BTreeMap<String, Vec<ServiceEndpoint>>,
    checks: Arc<CheckSettings>,
    thresholds: Thresholds,
    connect_timeout: Duration,
    limits: Arc<Limits>,
    drain_timeout: Duration,
    certs: Arc<CertStore>,
    changes: Arc<watch::Sender<u64>>,
    draining: AtomicBool,
    /// Serialises apply and shutdown, which await between their steps.
    applying: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    /// Bytes from and to clients over every listener since the start (also the removed
    /// ones'), and its rate between two reports.
    bytes: Arc<AtomicU64>,
    byte_rate: RateMeter,
}

impl Standalone {
    /// A driver for `config`'s listen addresses, services, TLS secrets (loaded now) and
    /// health check settings.
    pub fn new(config: &Config) -> Self {
        let (changes, _) = watch::channel(0);
        Standalone {
            binds: config.listen.iter().map(|l| l.bind).collect(),
            addresses: config.advertised_addresses(),
            services: config.services.clone(),
            checks: Arc::new(CheckSettings::from(&config.health_check)),
            thresholds: Thresholds {
                healthy: config.health_check.healthy_threshold.max(1),
                unhealthy: config.health_check.unhealthy_threshold.max(1),
            },
            connect_timeout: config.connect_timeout(),
            limits: Arc::new(Limits::new(config)),
            drain_timeout: config.drain_timeout(),
            certs: Arc::new(CertStore::new(&config.tls_secrets)),
            changes: Arc::new(changes),
            draining: AtomicBool::new(false),
            applying: tokio::sync::Mutex::new(()),
            state: Mutex::new(State::default()),
            bytes: Arc::new(AtomicU64::new(0)),
            byte_rate: RateMeter::default(),
        }
    }

    /// A counter that moves on every endpoint health change and every apply: the hub
    /// connection sends a report when it changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether [`Standalone::shutdown`] has begun (readiness turns false).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Makes the running listeners match `plan` and returns every rule (or path) that is
    /// not served, with the reason.
    ///
    /// # Guarantees
    /// - Every rule becomes a listener on every bind address: HTTP rules an HTTP
    ///   listener per port (shared by every ingress with HTTP rules there), HTTPS and TLS
    ///   rules a TLS listener per port, TCP and UDP rules one listener each. A TCP and a
    ///   UDP listener on one address and port coexist.
    /// - The listeners of a share with anycast addresses are bound on those addresses
    ///   too (`IP_FREEBIND`: the address need not be on an interface yet).
    /// - A listener whose kind, port and bind address are unchanged keeps running,
    ///   connections and requests in flight untouched; only its routes are swapped,
    ///   atomically. In-flight requests finish on the route they started on.
    /// - Removed listeners stop accepting and release their port before this returns;
    ///   their connections drain in the background (HTTP connections finish the request
    ///   in flight, raw streams keep flowing) for at most `drainTimeoutMs`.
    /// - Health state of endpoints that stay in use is kept.
    ///
    /// # Errors
    /// As [`RuleError`]s, in share key order: a backend service or TLS secret missing
    /// from the config, a port, path or SNI name an earlier share or rule already has,
    /// and bind failures (per address; the rule is still served on the addresses that
    /// bound, and a later apply retries the others).
    pub async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        let _applying = self.applying.lock().await;
        self.draining.store(false, Ordering::Relaxed);
        let (pending, closing) = self.reconcile(plan);
        // The ports of removed listeners are free once their accept loops are gone.
        let mut removed = Vec::new();
        for (label, tracker, task) in closing {
            let _ = task.await;
            removed.push((label, tracker));
        }
        let errors = self.start_pending(pending, removed);
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        errors
    }

    /// Brings the endpoints, pools and routes in line with `plan`, closes the listeners
    /// it no longer wants and re-routes the kept ones; returns what is left to start and
    /// the closing listeners to wait for.
    fn reconcile(&self, plan: &ClusterPlan) -> (Pending, Vec<Closing>) {
        let certs = Arc::clone(&self.certs);
        let desired = desired::compute(plan, &self.services, &|s| certs.contains(s));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.cert_watch.is_none() && !self.certs.is_empty() {
            state.cert_watch = Some(tokio::spawn(watch_certs(Arc::clone(&self.certs))));
        }
        self.sync_endpoints(&mut state, wanted_endpoints(&desired));
        let pools = pools_of(&desired, &state.endpoints);
        let mut seeder = Seeder {
            pools: &pools,
            empty: Arc::new(Pool::new(Vec::new())),
            old_loads: std::mem::take(&mut state.share_loads),
            kept_loads: BTreeMap::new(),
        };
        let seeds = seeder.seeds(&desired);
        state.share_loads = seeder.kept_loads;
        let wanted = self.listener_ids(plan, &desired, &seeds);
        let closing = close_unwanted(&mut state, &wanted);
        let (start, users) = reroute(&state, wanted, seeds);
        state.pools = pools;
        (
            Pending {
                start,
                users,
                shares: desired.shares,
            },
            closing,
        )
    }

    /// Endpoints: keeps (with their health) those still in use, stops checking the
    /// others, starts checking new ones; sets what each endpoint is behind.
    fn sync_endpoints(
        &self,
        state: &mut State,
        wanted: BTreeMap<(String, SocketAddr), desired::Probes>,
    ) {
        state.endpoints.retain(|key, checked| {
            let keep = wanted.contains_key(key);
            if !keep {
                checked.task.abort();
            }
            keep
        });
        for (key, probes) in wanted {
            let set = |endpoint: &Endpoint| {
                endpoint.behind_tcp.store(probes.tcp, Ordering::Relaxed);
                endpoint.behind_udp.store(probes.udp, Ordering::Relaxed);
                endpoint.behind_http.store(probes.http, Ordering::Relaxed);
            };
            if let Some(checked) = state.endpoints.get(&key) {
                set(&checked.endpoint);
                continue;
            }
            let endpoint = Arc::new(Endpoint::new(
                key.0.clone(),
                key.1,
                self.thresholds,
                Arc::clone(&self.changes),
            ));
            // Set before the first probe runs.
            set(&endpoint);
            let task = health::spawn(Arc::clone(&endpoint), Arc::clone(&self.checks));
            state.endpoints.insert(key, Checked { endpoint, task });
        }
    }

    /// Every listener the seeds ask for, on every bind address and on the anycast
    /// addresses of the shares with routes on it.
    fn listener_ids(
        &self,
        plan: &ClusterPlan,
        desired: &desired::Desired,
        seeds: &Seeds,
    ) -> BTreeSet<ListenerId> {
        let mut anycast: BTreeMap<ListenerKey, BTreeSet<IpAddr>> = BTreeMap::new();
        for (key, share) in &desired.shares {
            let addresses = plan.ingresses.get(key).map(|s| &s.anycast_addresses);
            for &(_, listener) in &share.listeners {
                anycast
                    .entry(listener)
                    .or_default()
                    .extend(addresses.into_iter().flatten());
            }
        }
        seeds
            .keys()
            .flat_map(|&(kind, port)| {
                let extra = anycast.get(&(kind, port)).into_iter().flatten();
                self.binds
                    .iter()
                    .chain(extra)
                    .map(move |&bind| ListenerId { kind, port, bind })
            })
            .collect()
    }

    /// Binds the new listeners, starts draining the removed ones, records the shares;
    /// returns every rule error.
    fn start_pending(
        &self,
        pending: Pending,
        removed: Vec<(String, Arc<Tracker>)>,
    ) -> Vec<RuleError> {
        let Pending {
            start,
            users,
            mut shares,
        } = pending;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for (label, tracker) in removed {
            let limit = self.drain_timeout;
            let draining = Arc::clone(&tracker);
            let log_label = label.clone();
            let task = tokio::spawn(async move {
                let closed = draining.drain(limit).await;
                if closed > 0 {
                    tracing::info!(listener = %log_label, closed, "drain time is up; closed the remaining connections");
                }
            });
            state.draining.push(Draining {
                label,
                tracker,
                task,
            });
        }
        state.draining.retain(|d| !d.task.is_finished());

        for (id, seed) in start {
            match self.start(id, seed) {
                Ok(running) => {
                    tracing::info!(listener = %id.label(), "listening");
                    state.listeners.insert(id, running);
                }
                Err(error) => {
                    tracing::warn!(listener = %id.label(), %error, "binding listener failed");
                    for (ingress, rule) in users.get(&id.key()).into_iter().flatten() {
                        if let Some(share) = shares.get_mut(ingress) {
                            let message = format!("binding {}: {error}", id.label());
                            if !share
                                .errors
                                .iter()
                                .any(|e| e.rule == *rule && e.message == message)
                            {
                                share.errors.push(RuleError {
                                    ingress: ingress.clone(),
                                    rule: *rule,
                                    message,
                                });
                            }
                        }
                    }
                }
            }
        }

        let errors = shares
            .values_mut()
            .flat_map(|share| {
                share.errors.sort_by_key(|e| e.rule);
                share.errors.clone()
            })
            .collect();
        for share in shares.values() {
            for error in &share.errors {
                tracing::warn!(
                    ingress = %error.ingress,
                    rule = error.rule,
                    error = %error.message,
                    "rule not served"
                );
            }
        }
        state.shares = shares;
        errors
    }

    fn start(&self, id: ListenerId, seed: Seed) -> std::io::Result<Running> {
        let addr = SocketAddr::new(id.bind, id.port);
        // An anycast address may not be on an interface yet (or ever, behind a router
        // that delivers it): bind it anyway.
        let freebind = !self.binds.contains(&id.bind);
        let label = id.label();
        let load = LoadCounters::counting_into(Arc::clone(&self.bytes));
        let tracker = Tracker::new();
        let (stop, stop_rx) = oneshot::channel();
        let (routing, task) = match seed {
            Seed::L4(route) if id.kind == Kind::Udp => {
                let socket = udp::bind(addr, freebind)?;
                let (routes, routes_rx) = watch::channel(route);
                let task = tokio::spawn(udp::serve(
                    socket,
                    label,
                    routes_rx,
                    Arc::clone(&load),
                    Arc::clone(&self.limits),
                    stop_rx,
                ));
                (Routing::L4(routes), task)
            }
            Seed::L4(route) => {
                let listener = tcp::bind(addr, freebind)?;
                let (routes, routes_rx) = watch::channel(route);
                let handler = tcp::l4_handler(
                    routes_rx,
                    self.connect_timeout,
                    Arc::clone(&self.limits),
                    label.clone(),
                );
                let task = tokio::spawn(tcp::accept_loop(
                    listener,
                    label,
                    Arc::clone(&load),
                    Arc::clone(&self.limits),
                    Arc::clone(&tracker),
                    handler,
                    stop_rx,
                ));
                (Routing::L4(routes), task)
            }
            Seed::Http(table) => {
                let listener = tcp::bind(addr, freebind)?;
                let table = Arc::new(ArcSwap::new(table));
                let shared = Arc::new(http::HttpListener {
                    label: label.clone().into(),
                    tables: http::Tables::Plain(Arc::clone(&table)),
                    connect_timeout: self.connect_timeout,
                    load: Arc::clone(&load),
                    limits: Arc::clone(&self.limits),
                });
                let task = tokio::spawn(tcp::accept_loop(
                    listener,
                    label,
                    Arc::clone(&load),
                    Arc::clone(&self.limits),
                    Arc::clone(&tracker),
                    http::handler(shared),
                    stop_rx,
                ));
                (Routing::Http(table), task)
            }
            Seed::Tls(table) => {
                let listener = tcp::bind(addr, freebind)?;
                let table = Arc::new(ArcSwap::new(table));
                let shared: Arc<str> = label.clone().into();
                let tls_listener = Arc::new(tls::TlsListener {
                    label: Arc::clone(&shared),
                    table: Arc::clone(&table),
                    certs: Arc::clone(&self.certs),
                    http: Arc::new(http::HttpListener {
                        label: shared,
                        tables: http::Tables::Tls(Arc::clone(&table)),
                        connect_timeout: self.connect_timeout,
                        load: Arc::clone(&load),
                        limits: Arc::clone(&self.limits),
                    }),
                    connect_timeout: self.connect_timeout,
                    limits: Arc::clone(&self.limits),
                });
                let task = tokio::spawn(tcp::accept_loop(
                    listener,
                    label,
                    Arc::clone(&load),
                    Arc::clone(&self.limits),
                    Arc::clone(&tracker),
                    tls::handler(tls_listener),
                    stop_rx,
                ));
                (Routing::Tls(table), task)
            }
        };
        Ok(Running {
            routing,
            load,
            tracker,
            stop,
            task,
        })
    }

    /// How the shares of `plan` are served, from the state of the last apply: per share
    /// the generation applied (0 if the share was not part of it), the advertised
    /// addresses, ready/total endpoints per backend, load per listener and the rule
    /// errors; plus the cluster's addresses, HTTP requests per second and active
    /// connections.
    ///
    /// Listener load per share: for TCP and UDP listeners (one share each) the
    /// listener's connections (sessions), summed over bind addresses; for the shared
    /// HTTP and TLS listeners the connections attributed to that share (a connection
    /// counts for the ingress of its first routed request, or of its SNI route), so
    /// summing over shares counts each connection once.
    ///
    /// `bytes_per_second`: the bytes from and to clients over every listener per second
    /// since the report before (see [`crate::load::RateMeter`]). The CPU figures are the
    /// agent's ([`crate::hub`] adds them).
    pub fn report(&self, plan: &ClusterPlan) -> AgentReport {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut by_key: BTreeMap<ListenerKey, (u64, f64)> = BTreeMap::new();
        let mut requests_per_second = 0.0;
        let mut active_connections = 0;
        for (id, running) in &state.listeners {
            let entry = by_key.entry(id.key()).or_default();
            entry.0 += running.load.active();
            entry.1 += running.load.per_second(now);
            active_connections += running.load.active();
            if matches!(id.kind, Kind::Http | Kind::Tls) {
                requests_per_second += running.load.requests_per_second(now);
            }
        }
        let ingresses = plan
            .ingresses
            .keys()
            .map(|key| match state.shares.get(key) {
                None => IngressReport {
                    key: key.clone(),
                    ..IngressReport::default()
                },
                Some(share) => IngressReport {
                    key: key.clone(),
                    applied_generation: share.generation,
                    addresses: self.addresses.clone(),
                    backends: share
                        .backends
                        .iter()
                        .map(|backend| {
                            let (ready, total) = state
                                .pools
                                .get(backend)
                                .map_or((0, 0), |pool| pool.counts());
                            BackendHealth {
                                service: backend.0.clone(),
                                port: i32::from(backend.1),
                                ready,
                                total,
                            }
                        })
                        .collect(),
                    listeners: share
                        .listeners
                        .iter()
                        .filter_map(|(protocol, listener)| {
                            let (active, per_second) = match listener.0 {
                                Kind::Tcp | Kind::Udp => *by_key.get(listener)?,
                                Kind::Http | Kind::Tls => {
                                    by_key.get(listener)?;
                                    let load = state.share_loads.get(&(*listener, key.clone()))?;
                                    (load.active(), load.per_second(now))
                                }
                            };
                            Some(ListenerLoad {
                                protocol: protocol.as_str().to_owned(),
                                port: listener.1,
                                connections_per_second: per_second,
                                active_connections: active,
                            })
                        })
                        .collect(),
                    rule_errors: share.errors.clone(),
                    // Every rule is served on the agent's own addresses.
                    rules: Vec::new(),
                    anycast: Vec::new(),
                },
            })
            .collect();
        AgentReport {
            ingresses,
            addresses: self.addresses.clone(),
            requests_per_second,
            active_connections,
            speaker: None,
            bytes_per_second: self
                .byte_rate
                .sample(self.bytes.load(Ordering::Relaxed), now),
            ..AgentReport::default()
        }
    }

    /// Bytes from and to clients over every listener since the start.
    pub fn bytes_total(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The data plane's counters in the Prometheus text format (version 0.0.4).
    pub fn metrics(&self) -> String {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut out = Exposition::default();
        self.listener_metrics(&mut out, &state, now);
        fd_budget_metrics(&mut out, &self.limits);
        http_metrics(&mut out, &state, now);
        self.backend_metrics(&mut out, &state);
        for d in &state.draining {
            tracing::trace!(listener = %d.label, open = d.tracker.open(), "draining");
        }
        out.0
    }

    /// The families of every bound listener: connections, limits, and what was refused,
    /// evicted or timed out.
    fn listener_metrics(&self, out: &mut Exposition, state: &State, now: Instant) {
        let per_listener = |f: &dyn Fn(&Running) -> String| {
            state
                .listeners
                .iter()
                .map(|(id, running)| (listener_labels(id), f(running)))
                .collect::<Vec<_>>()
        };
        out.family(
            "fedingress_agent_listener_active_connections",
            "gauge",
            "Open connections (TCP, HTTP, TLS) or sessions (UDP) of a bound listener.",
            per_listener(&|r| r.load.active().to_string()),
        );
        out.family(
            "fedingress_agent_listener_connections_total",
            "counter",
            "Connections or sessions a bound listener accepted since it started.",
            per_listener(&|r| r.load.connections_total().to_string()),
        );
        out.family(
            "fedingress_agent_listener_connections_per_second",
            "gauge",
            "New connections or sessions per second over the last 5 s.",
            per_listener(&|r| format!("{:.3}", r.load.per_second(now))),
        );
        out.family(
            "fedingress_agent_listener_bytes_total",
            "counter",
            "Bytes a bound listener received from its clients (direction in) and sent to them (out) since it started.",
            state
                .listeners
                .iter()
                .flat_map(|(id, running)| {
                    let (received, sent) = running.load.bytes();
                    let labels = listener_labels(id);
                    [
                        (format!("{labels},direction=\"in\""), received.to_string()),
                        (format!("{labels},direction=\"out\""), sent.to_string()),
                    ]
                })
                .collect(),
        );
        out.family(
            "fedingress_agent_listener_limit",
            "gauge",
            "Most connections (TCP, HTTP, TLS) or sessions (UDP) a bound listener holds (limits.connectionsPerListener, limits.udpSessionsPerListener).",
            state
                .listeners
                .keys()
                .map(|id| {
                    let limit = match id.kind {
                        Kind::Udp => self.limits.udp_sessions_per_listener as u64,
                        _ => self.limits.connections_per_listener,
                    };
                    (listener_labels(id), limit.to_string())
                })
                .collect(),
        );
        listener_guard_metrics(out, state);
    }

    /// The families of the backends: endpoint health, connections still draining, idle
    /// upstream connections, TLS secrets.
    fn backend_metrics(&self, out: &mut Exposition, state: &State) {
        out.family(
            "fedingress_agent_endpoint_healthy",
            "gauge",
            "1 when a backend endpoint passes its health checks, 0 when unhealthy or not checked yet.",
            state
                .endpoints
                .iter()
                .map(|((service, addr), checked)| {
                    let healthy = checked.endpoint.health() == Health::Healthy;
                    (
                        format!("service=\"{}\",endpoint=\"{addr}\"", escape(service)),
                        u8::from(healthy).to_string(),
                    )
                })
                .collect(),
        );
        out.family(
            "fedingress_agent_draining_connections",
            "gauge",
            "Connections of removed listeners that are still finishing.",
            vec![(
                String::new(),
                state
                    .draining
                    .iter()
                    .map(|d| d.tracker.open())
                    .sum::<usize>()
                    .to_string(),
            )],
        );
        out.family(
            "fedingress_agent_upstream_idle_connections",
            "gauge",
            "Idle pooled HTTP/1.1 connections to endpoints.",
            vec![(
                String::new(),
                state
                    .endpoints
                    .values()
                    .map(|c| c.endpoint.idle.len())
                    .sum::<usize>()
                    .to_string(),
            )],
        );
        out.family(
            "fedingress_agent_tls_secret_loaded",
            "gauge",
            "1 when a configured TLS secret's certificate and key are loaded.",
            self.certs
                .loaded()
                .into_iter()
                .map(|(name, loaded)| {
                    (
                        format!("secret=\"{}\"", escape(&name)),
                        u8::from(loaded).to_string(),
                    )
                })
                .collect(),
        );
    }

    /// Closes every listener, drains their connections (for at most `drainTimeoutMs`;
    /// HTTP connections finish the request in flight) and stops the health checks;
    /// returns when every connection is done. A later apply starts over.
    pub async fn shutdown(&self) {
        let _applying = self.applying.lock().await;
        self.draining.store(true, Ordering::Relaxed);
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        let (closing, earlier) = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let listeners = std::mem::take(&mut state.listeners);
            let earlier = std::mem::take(&mut state.draining);
            let closing: Vec<(String, Arc<Tracker>, JoinHandle<()>)> = listeners
                .into_iter()
                .map(|(id, running)| {
                    tracing::info!(listener = %id.label(), "closing listener");
                    let _ = running.stop.send(());
                    (id.label(), running.tracker, running.task)
                })
                .collect();
            (closing, earlier)
        };
        let mut trackers = Vec::new();
        for (label, tracker, task) in closing {
            let _ = task.await;
            trackers.push((label, tracker));
        }
        let limit = self.drain_timeout;
        let drains = trackers.iter().map(|(label, tracker)| async move {
            let closed = tracker.drain(limit).await;
            if closed > 0 {
                tracing::info!(listener = %label, closed, "drain time is up; closed the remaining connections");
            }
        });
        futures_util::future::join_all(drains).await;
        for draining in earlier {
            let _ = draining.task.await;
        }
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            for checked in std::mem::take(&mut state.endpoints).into_values() {
                checked.task.abort();
            }
            state.pools.clear();
            state.shares.clear();
            state.share_loads.clear();
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The built-in data plane: HTTP, HTTPS, TLS, TCP and UDP on the configured addresses.
#[async_trait]
impl Driver for Standalone {
    fn name(&self) -> &'static str {
        "standalone"
    }

    fn capabilities(&self) -> Vec<String> {
        ["HTTP", "HTTPS", "TLS", "TCP", "UDP"]
            .map(str::to_owned)
            .to_vec()
    }

    async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        Standalone::apply(self, plan).await
    }

    fn report(&self, plan: &ClusterPlan) -> AgentReport {
        Standalone::report(self, plan)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        Standalone::subscribe(self)
    }

    async fn shutdown(&self) {
        Standalone::shutdown(self).await;
    }

    fn metrics(&self) -> String {
        Standalone::metrics(self)
    }

    fn is_draining(&self) -> bool {
        Standalone::is_draining(self)
    }
}

/// A removed listener on its way out: its label, its connections, its accept loop.
type Closing = (String, Arc<Tracker>, JoinHandle<()>);

/// The routes of each listener key, with the rules that use the listener.
type Seeds = BTreeMap<ListenerKey, (Seed, Vec<(IngressKey, u32)>)>;

/// Every endpoint in use, with the probes of every backend it is behind.
fn wanted_endpoints(desired: &desired::Desired) -> BTreeMap<(String, SocketAddr), desired::Probes> {
    let mut wanted: BTreeMap<(String, SocketAddr), desired::Probes> = BTreeMap::new();
    for ((service, _), backend) in &desired.backends {
        for addr in &backend.endpoints {
            let probes = wanted.entry((service.clone(), *addr)).or_default();
            probes.tcp |= backend.probes.tcp;
            probes.udp |= backend.probes.udp;
            probes.http |= backend.probes.http;
        }
    }
    wanted
}

/// Pools, one per backend {service, port}, of its checked endpoints.
fn pools_of(
    desired: &desired::Desired,
    endpoints: &BTreeMap<(String, SocketAddr), Checked>,
) -> BTreeMap<BackendKey, Arc<Pool>> {
    desired
        .backends
        .iter()
        .map(|(key, backend)| {
            let endpoints = backend
                .endpoints
                .iter()
                .filter_map(|addr| {
                    endpoints
                        .get(&(key.0.clone(), *addr))
                        .map(|c| Arc::clone(&c.endpoint))
                })
                .collect();
            (key.clone(), Arc::new(Pool::new(endpoints)))
        })
        .collect()
}

/// Builds the routes of every listener key from the pools; share loads of L7 listeners
/// keep the counters of (listener, ingress) pairs still in use.
struct Seeder<'a> {
    pools: &'a BTreeMap<BackendKey, Arc<Pool>>,
    /// The pool of a backend without one.
    empty: Arc<Pool>,
    /// The share loads before this apply; those still in use move to `kept_loads`.
    old_loads: BTreeMap<(ListenerKey, IngressKey), Arc<LoadCounters>>,
    kept_loads: BTreeMap<(ListenerKey, IngressKey), Arc<LoadCounters>>,
}

impl Seeder<'_> {
    /// Routes per listener key, with the rules that use each listener.
    fn seeds(&mut self, desired: &desired::Desired) -> Seeds {
        let mut seeds = BTreeMap::new();
        for (&key, listener) in &desired.listeners {
            seeds.insert(key, self.seed(key, listener));
        }
        seeds
    }

    fn seed(
        &mut self,
        key: ListenerKey,
        listener: &DesiredListener,
    ) -> (Seed, Vec<(IngressKey, u32)>) {
        match listener {
            DesiredListener::L4(spec) => (
                Seed::L4(Arc::new(Route {
                    ingress: spec.ingress.clone(),
                    rule: spec.rule,
                    pool: self.pool_of(&spec.backend),
                })),
                vec![(spec.ingress.clone(), spec.rule)],
            ),
            DesiredListener::Http(paths) => {
                let table = http_table(paths, |spec| self.target(key, spec));
                (Seed::Http(Arc::new(table)), users_of(paths, &[]))
            }
            DesiredListener::Tls { sni, https } => {
                let mut table = TlsTable {
                    https: Arc::new(http_table(https, |spec| self.target(key, spec))),
                    ..TlsTable::default()
                };
                for spec in sni {
                    let route = SniRoute {
                        target: self.target(key, &spec.route),
                        certs: spec.tls.as_ref().map(|tls| CertSource {
                            ingress: spec.route.ingress.clone(),
                            tls: Arc::clone(tls),
                        }),
                    };
                    table.sni.insert(Some(&spec.host), route);
                }
                (Seed::Tls(Arc::new(table)), users_of(https, sni))
            }
        }
    }

    fn pool_of(&self, key: &BackendKey) -> Arc<Pool> {
        Arc::clone(self.pools.get(key).unwrap_or(&self.empty))
    }

    /// The target of an L7 route on `listener`, counting on its share's load.
    fn target(&mut self, listener: ListenerKey, spec: &desired::RouteSpec) -> Arc<Target> {
        let load = self.share_load(listener, &spec.ingress);
        Arc::new(Target {
            ingress: spec.ingress.clone(),
            rule: spec.rule,
            service: spec.backend.0.clone(),
            pool: self.pool_of(&spec.backend),
            load,
        })
    }

    fn share_load(&mut self, listener: ListenerKey, ingress: &IngressKey) -> Arc<LoadCounters> {
        let key = (listener, ingress.clone());
        let load = self
            .old_loads
            .remove(&key)
            .or_else(|| self.kept_loads.get(&key).cloned())
            .unwrap_or_else(LoadCounters::new);
        self.kept_loads.insert(key, Arc::clone(&load));
        load
    }
}

/// Stops the running listeners not in `wanted`; returns them, to wait for.
fn close_unwanted(state: &mut State, wanted: &BTreeSet<ListenerId>) -> Vec<Closing> {
    let mut closing = Vec::new();
    let removed: Vec<ListenerId> = state
        .listeners
        .keys()
        .filter(|id| !wanted.contains(id))
        .copied()
        .collect();
    for id in removed {
        if let Some(running) = state.listeners.remove(&id) {
            tracing::info!(listener = %id.label(), "closing listener");
            let _ = running.stop.send(());
            closing.push((id.label(), running.tracker, running.task));
        }
    }
    closing
}

/// Swaps the routes of the running listeners in `wanted`; returns the ones to start,
/// with their routes, and who uses each listener key.
#[allow(clippy::type_complexity)]
fn reroute(
    state: &State,
    wanted: BTreeSet<ListenerId>,
    seeds: Seeds,
) -> (
    Vec<(ListenerId, Seed)>,
    BTreeMap<ListenerKey, Vec<(IngressKey, u32)>>,
) {
    let mut start = Vec::new();
    let mut users = BTreeMap::new();
    let mut seeds_by_key: BTreeMap<ListenerKey, Seed> = BTreeMap::new();
    for (key, (seed, who)) in seeds {
        users.insert(key, who);
        seeds_by_key.insert(key, seed);
    }
    for id in wanted {
        let Some(seed) = seeds_by_key.get(&id.key()) else {
            continue;
        };
        let seed = seed.clone();
        match state.listeners.get(&id) {
            Some(running) => running.routing.update(seed),
            None => start.push((id, seed)),
        }
    }
    (start, users)
}

/// Metric families in the Prometheus text format, as they are written.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    /// Writes one family: its help, its type and a sample per `(labels, value)` row.
    fn family(&mut self, name: &str, kind: &str, help: &str, rows: Vec<(String, String)>) {
        let out = &mut self.0;
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in rows {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {value}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        }
    }
}

/// The labels of a bound listener's samples.
fn listener_labels(id: &ListenerId) -> String {
    format!(
        "kind=\"{}\",address=\"{}\"",
        id.kind,
        SocketAddr::new(id.bind, id.port)
    )
}

/// What the listeners' guards counted: refusals at a limit, UDP evictions, timeouts.
fn listener_guard_metrics(out: &mut Exposition, state: &State) {
    out.family(
        "fedingress_agent_listener_refused_total",
        "counter",
        "New connections or UDP sessions refused at a limit: listener_limit, source_limit (UDP sessions of one client address), fd_budget (file descriptors; for HTTP a 503 instead of an upstream connection).",
        state
            .listeners
            .iter()
            .flat_map(|(id, r)| {
                r.load.guard.refusals().into_iter().map(move |(reason, n)| {
                    (
                        format!("{},reason=\"{reason}\"", listener_labels(id)),
                        n.to_string(),
                    )
                })
            })
            .collect(),
    );
    out.family(
        "fedingress_agent_listener_evicted_total",
        "counter",
        "UDP sessions ended to make room for a new one (the oldest session whose client never answered a reply).",
        state
            .listeners
            .iter()
            .filter(|(id, _)| id.kind == Kind::Udp)
            .map(|(id, r)| (listener_labels(id), r.load.guard.evictions().to_string()))
            .collect(),
    );
    out.family(
        "fedingress_agent_listener_timed_out_total",
        "counter",
        "Connections or UDP sessions closed by a timer: idle (no bytes or datagrams either way), handshake (TLS), header (HTTP/1.1 request head).",
        state
            .listeners
            .iter()
            .flat_map(|(id, r)| {
                r.load.guard.timeouts().into_iter().map(move |(reason, n)| {
                    (
                        format!("{},reason=\"{reason}\"", listener_labels(id)),
                        n.to_string(),
                    )
                })
            })
            .collect(),
    );
}

/// The file descriptor budget and how much of it is held.
fn fd_budget_metrics(out: &mut Exposition, limits: &Limits) {
    out.family(
        "fedingress_agent_fd_budget",
        "gauge",
        "File descriptors the data plane may hold for client connections, upstream connections and UDP sessions: RLIMIT_NOFILE less limits.reservedFileDescriptors.",
        vec![(String::new(), limits.fds.limit().to_string())],
    );
    out.family(
        "fedingress_agent_fd_budget_used",
        "gauge",
        "File descriptors of the budget held now.",
        vec![(String::new(), limits.fds.used().to_string())],
    );
}

/// The HTTP(S) listeners' request rates and responses by status class.
fn http_metrics(out: &mut Exposition, state: &State, now: Instant) {
    let l7: Vec<(&ListenerId, &Running)> = state
        .listeners
        .iter()
        .filter(|(id, _)| matches!(id.kind, Kind::Http | Kind::Tls))
        .collect();
    out.family(
        "fedingress_agent_http_requests_per_second",
        "gauge",
        "HTTP requests answered per second over the last 5 s, per HTTP(S) listener.",
        l7.iter()
            .map(|(id, r)| {
                (
                    listener_labels(id),
                    format!("{:.3}", r.load.requests_per_second(now)),
                )
            })
            .collect(),
    );
    out.family(
        "fedingress_agent_http_responses_total",
        "counter",
        "HTTP responses (proxied or the agent's own) by status class.",
        l7.iter()
            .flat_map(|(id, r)| {
                r.load.responses().into_iter().map(move |(class, n)| {
                    (
                        format!("{},code=\"{class}\"", listener_labels(id)),
                        n.to_string(),
                    )
                })
            })
            .collect(),
    );
}

/// The HTTP table of `paths`, with targets made by `target`.
fn http_table(
    paths: &[PathSpec],
    mut target: impl FnMut(&desired::RouteSpec) -> Arc<Target>,
) -> HttpTable {
    let mut table = HttpTable::default();
    for spec in paths {
        let routes = table.entry(spec.host.as_deref(), HostRoutes::default);
        routes.add(PathRoute::new(
            &spec.path,
            spec.path_type,
            target(&spec.route),
        ));
        if let Some(tls) = &spec.tls {
            routes.add_certs(&CertSource {
                ingress: spec.route.ingress.clone(),
                tls: Arc::clone(tls),
            });
        }
    }
    table
}

fn users_of(paths: &[PathSpec], sni: &[SniSpec]) -> Vec<(IngressKey, u32)> {
    let mut users: Vec<(IngressKey, u32)> = Vec::new();
    for route in paths
        .iter()
        .map(|p| &p.route)
        .chain(sni.iter().map(|s| &s.route))
    {
        let user = (route.ingress.clone(), route.rule);
        if !users.contains(&user) {
            users.push(user);
        }
    }
    users
}

/// Prometheus label value escaping.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Reloads changed TLS secrets every [`CERT_POLL`].
async fn watch_certs(certs: Arc<CertStore>) {
    let mut ticks = tokio::time::interval(CERT_POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let store = Arc::clone(&certs);
        // File system calls off the runtime's worker threads.
        let _ = tokio::task::spawn_blocking(move || store.reload_changed()).await;
    }
}
