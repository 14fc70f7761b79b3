//! The standalone driver's L4 data plane: the agent itself serves its cluster's share on
//! the configured listen addresses, proxying TCP and UDP rules to service endpoints from
//! the config, with active health checks, passive ejection and load counters.
//!
//! Entry type: [`Standalone`]. [`Standalone::apply`] reconciles the running listeners
//! with a [`ClusterPlan`]; [`Standalone::report`] says how it is going;
//! [`Standalone::subscribe`] signals every change worth a report.
//!
//! Modules: `desired` (plan → listeners, pure), `endpoint` (health state machine and
//! round-robin pool), `health` (active checks), `tcp` and `udp` (the proxies), `load`
//! (counters).
//!
//! Not served yet: HTTP, HTTPS and TLS rules (each gets a [`RuleError`] saying so).

mod desired;
mod endpoint;
mod health;
mod load;
mod tcp;
mod udp;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fedingress_api::cluster::Address;
use fedingress_api::ingress::Protocol;
use fedingress_api::plan::{
    AgentReport, BackendHealth, ClusterPlan, IngressKey, IngressReport, ListenerLoad, RuleError,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::config::{Config, ServiceEndpoint};
use desired::{BackendKey, DesiredShare, ListenerKey};
use endpoint::{Endpoint, Pool, Thresholds};
use health::CheckSettings;
use load::LoadCounters;

/// Where a listener sends its traffic; swapped atomically on apply.
#[derive(Debug)]
pub(crate) struct Route {
    pub ingress: IngressKey,
    pub rule: u32,
    pub pool: Arc<Pool>,
}

/// A listener bound on one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ListenerId {
    protocol: Protocol,
    port: u16,
    bind: IpAddr,
}

impl ListenerId {
    fn key(&self) -> ListenerKey {
        (self.protocol, self.port)
    }

    fn label(&self) -> String {
        format!(
            "{} {}",
            self.protocol,
            SocketAddr::new(self.bind, self.port)
        )
    }
}

struct Running {
    routes: watch::Sender<Arc<Route>>,
    load: Arc<LoadCounters>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

struct Checked {
    endpoint: Arc<Endpoint>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct State {
    listeners: BTreeMap<ListenerId, Running>,
    endpoints: BTreeMap<(String, SocketAddr), Checked>,
    pools: BTreeMap<BackendKey, Arc<Pool>>,
    shares: BTreeMap<IngressKey, DesiredShare>,
}

impl Drop for State {
    fn drop(&mut self) {
        for checked in self.endpoints.values() {
            checked.task.abort();
        }
        // Listeners stop on their own: their stop senders are dropped with them.
    }
}

/// The standalone driver: TCP and UDP proxies on every configured bind address.
///
/// Create it with [`Standalone::new`] (binds nothing), then call [`Standalone::apply`]
/// inside a tokio runtime. Dropping it closes its listeners and stops its checks;
/// [`Standalone::shutdown`] does the same and waits until the sockets are closed.
pub struct Standalone {
    binds: Vec<IpAddr>,
    addresses: Vec<Address>,
    services: BTreeMap<String, Vec<ServiceEndpoint>>,
    checks: Arc<CheckSettings>,
    thresholds: Thresholds,
    connect_timeout: Duration,
    udp_idle_timeout: Duration,
    changes: Arc<watch::Sender<u64>>,
    /// Serialises apply and shutdown, which await between their steps.
    applying: tokio::sync::Mutex<()>,
    state: Mutex<State>,
}

impl Standalone {
    /// A driver for `config`'s listen addresses, services and health check settings.
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
            udp_idle_timeout: config.udp_idle_timeout(),
            changes: Arc::new(changes),
            applying: tokio::sync::Mutex::new(()),
            state: Mutex::new(State::default()),
        }
    }

    /// A counter that moves on every endpoint health change and every apply: the hub
    /// connection sends a report when it changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Makes the running listeners match `plan` and returns every rule that is not
    /// served, with the reason.
    ///
    /// # Guarantees
    /// - TCP and UDP rules become listeners `(protocol, port)` on every bind address;
    ///   a TCP and a UDP listener on one address and port coexist.
    /// - A listener whose protocol, port and bind address are unchanged keeps running,
    ///   connections and sessions untouched; only its backend is swapped, atomically.
    /// - Removed listeners are closed before this returns (established TCP connections
    ///   may finish; UDP sessions end with their listener).
    /// - Health state of endpoints that stay in use is kept.
    ///
    /// # Errors
    /// As [`RuleError`]s, in share key order: HTTP, HTTPS and TLS rules (not served
    /// yet), a backend service missing from the config, a `(protocol, port)` an earlier
    /// share or rule already has, and bind failures (per address; the rule is still
    /// served on the addresses that bound, and a later apply retries the others).
    pub async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError> {
        let _applying = self.applying.lock().await;
        let (errors, closing) = self.reconcile(plan);
        for task in closing {
            let _ = task.await;
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        errors
    }

    fn reconcile(&self, plan: &ClusterPlan) -> (Vec<RuleError>, Vec<JoinHandle<()>>) {
        let mut desired = desired::compute(plan, &self.services);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);

        // Endpoints: keep (with their health) those still in use, check new ones.
        let mut wanted: BTreeMap<(String, SocketAddr), (bool, bool)> = BTreeMap::new();
        for ((protocol, _), listener) in &desired.listeners {
            for addr in &listener.endpoints {
                let flags = wanted
                    .entry((listener.backend.0.clone(), *addr))
                    .or_default();
                match protocol {
                    Protocol::Udp => flags.1 = true,
                    _ => flags.0 = true,
                }
            }
        }
        state.endpoints.retain(|key, checked| {
            let keep = wanted.contains_key(key);
            if !keep {
                checked.task.abort();
            }
            keep
        });
        for ((service, addr), (tcp, udp)) in wanted {
            let key = (service, addr);
            if let Some(checked) = state.endpoints.get(&key) {
                checked.endpoint.behind_tcp.store(tcp, Ordering::Relaxed);
                checked.endpoint.behind_udp.store(udp, Ordering::Relaxed);
                continue;
            }
            let endpoint = Arc::new(Endpoint::new(
                key.0.clone(),
                addr,
                self.thresholds,
                Arc::clone(&self.changes),
            ));
            // Set before the first probe runs.
            endpoint.behind_tcp.store(tcp, Ordering::Relaxed);
            endpoint.behind_udp.store(udp, Ordering::Relaxed);
            let task = health::spawn(Arc::clone(&endpoint), Arc::clone(&self.checks));
            state.endpoints.insert(key, Checked { endpoint, task });
        }

        // Pools, one per backend {service, port}.
        let mut pools: BTreeMap<BackendKey, Arc<Pool>> = BTreeMap::new();
        for listener in desired.listeners.values() {
            pools.entry(listener.backend.clone()).or_insert_with(|| {
                let endpoints = listener
                    .endpoints
                    .iter()
                    .filter_map(|addr| {
                        state
                            .endpoints
                            .get(&(listener.backend.0.clone(), *addr))
                            .map(|c| Arc::clone(&c.endpoint))
                    })
                    .collect();
                Arc::new(Pool::new(endpoints))
            });
        }

        // Listeners: close the ones no longer wanted, re-route the kept, bind the new.
        let wanted: BTreeSet<ListenerId> = desired
            .listeners
            .keys()
            .flat_map(|(protocol, port)| {
                self.binds.iter().map(|bind| ListenerId {
                    protocol: *protocol,
                    port: *port,
                    bind: *bind,
                })
            })
            .collect();
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
                closing.push(running.task);
            }
        }
        for id in wanted {
            let Some(listener) = desired.listeners.get(&id.key()) else {
                continue;
            };
            let Some(pool) = pools.get(&listener.backend) else {
                continue;
            };
            let route = Arc::new(Route {
                ingress: listener.ingress.clone(),
                rule: listener.rule,
                pool: Arc::clone(pool),
            });
            if let Some(running) = state.listeners.get(&id) {
                running.routes.send_replace(route);
                continue;
            }
            match self.start(id, route) {
                Ok(running) => {
                    tracing::info!(ingress = %listener.ingress, listener = %id.label(), "listening");
                    state.listeners.insert(id, running);
                }
                Err(error) => {
                    tracing::warn!(
                        ingress = %listener.ingress,
                        listener = %id.label(),
                        %error,
                        "binding listener failed"
                    );
                    let ingress = listener.ingress.clone();
                    let rule = listener.rule;
                    if let Some(share) = desired.shares.get_mut(&ingress) {
                        share.errors.push(RuleError {
                            ingress,
                            rule,
                            message: format!("binding {}: {error}", id.label()),
                        });
                    }
                }
            }
        }

        let errors = desired
            .shares
            .values_mut()
            .flat_map(|share| {
                share.errors.sort_by_key(|e| e.rule);
                share.errors.clone()
            })
            .collect();
        for share in desired.shares.values() {
            for error in &share.errors {
                tracing::warn!(
                    ingress = %error.ingress,
                    rule = error.rule,
                    error = %error.message,
                    "rule not served"
                );
            }
        }
        state.pools = pools;
        state.shares = desired.shares;
        (errors, closing)
    }

    fn start(&self, id: ListenerId, route: Arc<Route>) -> std::io::Result<Running> {
        let addr = SocketAddr::new(id.bind, id.port);
        let (routes, routes_rx) = watch::channel(route);
        let load = LoadCounters::new();
        let (stop, stop_rx) = oneshot::channel();
        let task = match id.protocol {
            Protocol::Udp => {
                let socket = udp::bind(addr)?;
                tokio::spawn(udp::serve(
                    socket,
                    id.label(),
                    routes_rx,
                    Arc::clone(&load),
                    self.udp_idle_timeout,
                    stop_rx,
                ))
            }
            _ => {
                let listener = tcp::bind(addr)?;
                tokio::spawn(tcp::serve(
                    listener,
                    id.label(),
                    routes_rx,
                    Arc::clone(&load),
                    self.connect_timeout,
                    stop_rx,
                ))
            }
        };
        Ok(Running {
            routes,
            load,
            stop,
            task,
        })
    }

    /// How the shares of `plan` are served, from the state of the last apply: per share
    /// the generation applied (0 if the share was not part of it), the advertised
    /// addresses, ready/total endpoints per backend, load per bound listener (summed over
    /// bind addresses) and the rule errors; plus the cluster's addresses and active
    /// connections. `requests_per_second` stays 0 until HTTP is served.
    pub fn report(&self, plan: &ClusterPlan) -> AgentReport {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut loads: BTreeMap<ListenerKey, ListenerLoad> = BTreeMap::new();
        for (id, running) in &state.listeners {
            let load = loads.entry(id.key()).or_insert_with(|| ListenerLoad {
                protocol: id.protocol.as_str().to_owned(),
                port: id.port,
                ..ListenerLoad::default()
            });
            load.active_connections += running.load.active();
            load.connections_per_second += running.load.per_second(now);
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
                        .filter_map(|listener| loads.get(listener).cloned())
                        .collect(),
                    rule_errors: share.errors.clone(),
                },
            })
            .collect();
        AgentReport {
            ingresses,
            addresses: self.addresses.clone(),
            requests_per_second: 0.0,
            active_connections: loads.values().map(|l| l.active_connections).sum(),
        }
    }

    /// Closes every listener (established TCP connections may finish) and stops the
    /// health checks; returns when the sockets are closed. A later apply starts over.
    pub async fn shutdown(&self) {
        let _applying = self.applying.lock().await;
        let closing: Vec<JoinHandle<()>> = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let listeners = std::mem::take(&mut state.listeners);
            for checked in std::mem::take(&mut state.endpoints).into_values() {
                checked.task.abort();
            }
            state.pools.clear();
            state.shares.clear();
            listeners
                .into_iter()
                .map(|(id, running)| {
                    tracing::info!(listener = %id.label(), "closing listener");
                    let _ = running.stop.send(());
                    running.task
                })
                .collect()
        };
        for task in closing {
            let _ = task.await;
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}
