//! Service endpoints with their health state, and the round-robin pool a listener picks
//! endpoints from.
//!
//! # Health states
//! An endpoint starts [`Health::Unknown`] and its first result decides: one success makes
//! it [`Health::Healthy`], one failure [`Health::Unhealthy`] (there is no earlier state
//! to protect with hysteresis). After that it turns unhealthy after `unhealthyThreshold`
//! consecutive failures (failed active checks and failed proxy attempts — connects, HTTP
//! exchanges, `5xx` answers — add up) and healthy again after `healthyThreshold`
//! consecutive successful active checks. A successful check clears every failure; a
//! successful proxy attempt clears only the proxy failures, so that an endpoint that
//! serves traffic but fails its health check still turns unhealthy. Every flip bumps the
//! driver's change counter at once.
//!
//! Traffic goes round-robin to healthy endpoints; while none is healthy yet but some are
//! still unknown (the first checks are in flight right after an apply), to the unknown
//! ones, so a new listener does not refuse its first clients; never to unhealthy ones.
//! Reports count only healthy endpoints as ready.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// What the agent knows about an endpoint's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// No check has finished yet.
    Unknown,
    Healthy,
    Unhealthy,
}

impl Health {
    const fn to_u8(self) -> u8 {
        match self {
            Health::Unknown => 0,
            Health::Healthy => 1,
            Health::Unhealthy => 2,
        }
    }

    const fn from_u8(value: u8) -> Self {
        match value {
            1 => Health::Healthy,
            2 => Health::Unhealthy,
            _ => Health::Unknown,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        }
    }
}

/// Consecutive-result thresholds of the health state machine.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Thresholds {
    pub healthy: u32,
    pub unhealthy: u32,
}

#[derive(Debug)]
struct Streak {
    health: Health,
    /// Consecutive successful checks.
    successes: u32,
    /// Failed checks since the last successful one.
    check_failures: u32,
    /// Consecutive failed proxy attempts.
    proxy_failures: u32,
}

/// One endpoint of one service, shared by its health checker and every listener whose
/// backend includes it.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub service: String,
    pub addr: SocketAddr,
    thresholds: Thresholds,
    streak: Mutex<Streak>,
    /// `streak.health`, readable without the lock (the proxies read it per request).
    health: AtomicU8,
    /// Healthy with no failure in the current streak: a success changes nothing, so
    /// proxies skip the lock.
    clean: AtomicBool,
    changes: Arc<watch::Sender<u64>>,
    /// The endpoint is behind a TCP or TLS listener (set on every apply).
    pub behind_tcp: AtomicBool,
    /// The endpoint is behind a UDP listener (set on every apply).
    pub behind_udp: AtomicBool,
    /// The endpoint is behind an HTTP or HTTPS route (set on every apply).
    pub behind_http: AtomicBool,
    /// Idle HTTP/1.1 connections to the endpoint.
    pub idle: super::idle::IdlePool,
}

impl Endpoint {
    pub fn new(
        service: String,
        addr: SocketAddr,
        thresholds: Thresholds,
        changes: Arc<watch::Sender<u64>>,
    ) -> Self {
        Endpoint {
            service,
            addr,
            thresholds,
            streak: Mutex::new(Streak {
                health: Health::Unknown,
                successes: 0,
                check_failures: 0,
                proxy_failures: 0,
            }),
            health: AtomicU8::new(Health::Unknown.to_u8()),
            clean: AtomicBool::new(false),
            changes,
            behind_tcp: AtomicBool::new(false),
            behind_udp: AtomicBool::new(false),
            behind_http: AtomicBool::new(false),
            idle: super::idle::IdlePool::default(),
        }
    }

    pub fn health(&self) -> Health {
        Health::from_u8(self.health.load(Ordering::Relaxed))
    }

    /// Records one result (`source` says where it came from: `check` for active checks,
    /// anything else — `proxy` — for traffic) and flips the state when a threshold is
    /// reached.
    pub fn record(&self, ok: bool, source: &'static str) {
        if ok && self.clean.load(Ordering::Relaxed) {
            return;
        }
        let check = source == "check";
        let (from, to) = {
            let mut streak = self.streak.lock().unwrap_or_else(PoisonError::into_inner);
            let from = streak.health;
            if ok {
                streak.proxy_failures = 0;
                if check {
                    streak.check_failures = 0;
                    streak.successes = streak.successes.saturating_add(1);
                }
                if from == Health::Unknown
                    || (from == Health::Unhealthy
                        && check
                        && streak.successes >= self.thresholds.healthy)
                {
                    streak.health = Health::Healthy;
                }
            } else {
                streak.successes = 0;
                if check {
                    streak.check_failures = streak.check_failures.saturating_add(1);
                } else {
                    streak.proxy_failures = streak.proxy_failures.saturating_add(1);
                }
                let failures = streak.check_failures.saturating_add(streak.proxy_failures);
                if from == Health::Unknown
                    || (from == Health::Healthy && failures >= self.thresholds.unhealthy)
                {
                    streak.health = Health::Unhealthy;
                }
            }
            self.health.store(streak.health.to_u8(), Ordering::Relaxed);
            self.clean.store(
                streak.health == Health::Healthy
                    && streak.check_failures == 0
                    && streak.proxy_failures == 0,
                Ordering::Relaxed,
            );
            (from, streak.health)
        };
        if from == to {
            return;
        }
        if to == Health::Unhealthy {
            tracing::warn!(
                service = %self.service,
                endpoint = %self.addr,
                from = from.as_str(),
                source,
                "endpoint unhealthy"
            );
        } else {
            tracing::info!(
                service = %self.service,
                endpoint = %self.addr,
                from = from.as_str(),
                source,
                "endpoint healthy"
            );
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The endpoints of one backend `{service, port}`, picked round-robin.
#[derive(Debug)]
pub(crate) struct Pool {
    endpoints: Vec<Arc<Endpoint>>,
    next: AtomicUsize,
}

impl Pool {
    pub fn new(endpoints: Vec<Arc<Endpoint>>) -> Self {
        Pool {
            endpoints,
            next: AtomicUsize::new(0),
        }
    }

    /// The endpoints to try for one new connection or session, in order: the healthy
    /// ones starting at the next round-robin position; with none healthy, the unknown
    /// ones likewise; never unhealthy ones.
    pub fn candidates(&self) -> Vec<Arc<Endpoint>> {
        let mut eligible: Vec<&Arc<Endpoint>> = self
            .endpoints
            .iter()
            .filter(|e| e.health() == Health::Healthy)
            .collect();
        if eligible.is_empty() {
            eligible = self
                .endpoints
                .iter()
                .filter(|e| e.health() == Health::Unknown)
                .collect();
        }
        if eligible.is_empty() {
            return Vec::new();
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % eligible.len();
        eligible
            .iter()
            .cycle()
            .skip(start)
            .take(eligible.len())
            .map(|e| Arc::clone(e))
            .collect()
    }

    /// The endpoint for one new request or connection, without allocating: the next
    /// healthy one round-robin; with none healthy, the next unknown one; never an
    /// unhealthy one.
    pub fn pick(&self) -> Option<Arc<Endpoint>> {
        for wanted in [Health::Healthy, Health::Unknown] {
            let eligible = self
                .endpoints
                .iter()
                .filter(|e| e.health() == wanted)
                .count();
            if eligible == 0 {
                continue;
            }
            let nth = self.next.fetch_add(1, Ordering::Relaxed) % eligible;
            return self
                .endpoints
                .iter()
                .filter(|e| e.health() == wanted)
                .nth(nth)
                .cloned();
        }
        None
    }

    /// How many endpoints the pool has, in any state.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// (healthy, all) endpoints.
    pub fn counts(&self) -> (u32, u32) {
        let ready = self
            .endpoints
            .iter()
            .filter(|e| e.health() == Health::Healthy)
            .count();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (count(ready), count(self.endpoints.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(port: u16, healthy: u32, unhealthy: u32) -> (Arc<Endpoint>, watch::Receiver<u64>) {
        let (tx, rx) = watch::channel(0);
        let endpoint = Endpoint::new(
            "echo".into(),
            SocketAddr::from(([127, 0, 0, 1], port)),
            Thresholds { healthy, unhealthy },
            Arc::new(tx),
        );
        (Arc::new(endpoint), rx)
    }

    #[test]
    fn first_result_decides_then_thresholds_apply() {
        let (e, rx) = endpoint(1, 2, 3);
        assert_eq!(e.health(), Health::Unknown);
        e.record(true, "check");
        assert_eq!(e.health(), Health::Healthy);
        assert_eq!(*rx.borrow(), 1);
        e.record(false, "check");
        e.record(false, "proxy");
        assert_eq!(e.health(), Health::Healthy);
        e.record(true, "check"); // a success breaks the streak
        e.record(false, "check");
        e.record(false, "check");
        assert_eq!(e.health(), Health::Healthy);
        e.record(false, "proxy");
        assert_eq!(e.health(), Health::Unhealthy);
        assert_eq!(*rx.borrow(), 2);
        e.record(true, "check");
        assert_eq!(e.health(), Health::Unhealthy);
        e.record(true, "check");
        assert_eq!(e.health(), Health::Healthy);
        assert_eq!(*rx.borrow(), 3);

        let (e, _rx) = endpoint(2, 2, 2);
        e.record(false, "check");
        assert_eq!(e.health(), Health::Unhealthy);
    }

    #[test]
    fn pool_round_robins_over_healthy_then_unknown() {
        let (a, _) = endpoint(1, 1, 1);
        let (b, _) = endpoint(2, 1, 1);
        let (c, _) = endpoint(3, 1, 1);
        let pool = Pool::new(vec![a.clone(), b.clone(), c.clone()]);
        // All unknown: all eligible, rotating.
        let firsts: Vec<u16> = (0..3).map(|_| pool.candidates()[0].addr.port()).collect();
        assert_eq!(firsts, [1, 2, 3]);
        assert_eq!(pool.counts(), (0, 3));
        a.record(true, "check");
        c.record(true, "check");
        b.record(false, "check");
        assert_eq!(pool.counts(), (2, 3));
        let mut seen: Vec<u16> = (0..4).map(|_| pool.candidates()[0].addr.port()).collect();
        assert!(!seen.contains(&2));
        seen.sort_unstable();
        assert_eq!(seen, [1, 1, 3, 3]);
        assert_eq!(pool.candidates().len(), 2);
        a.record(false, "check");
        c.record(false, "check");
        assert!(pool.candidates().is_empty());
        assert!(pool.pick().is_none());
    }

    #[test]
    fn pick_rotates_over_healthy_endpoints_only() {
        let (a, _) = endpoint(1, 1, 1);
        let (b, _) = endpoint(2, 1, 1);
        let (c, _) = endpoint(3, 1, 1);
        let pool = Pool::new(vec![a.clone(), b.clone(), c.clone()]);
        let mut seen: Vec<u16> = (0..3).map(|_| pool.pick().unwrap().addr.port()).collect();
        seen.sort_unstable();
        assert_eq!(seen, [1, 2, 3], "unknown endpoints rotate");
        a.record(true, "check");
        b.record(false, "check");
        // Only the healthy one, although c is unknown.
        assert!((0..4).all(|_| pool.pick().unwrap().addr.port() == 1));
        c.record(true, "check");
        let mut seen: Vec<u16> = (0..4).map(|_| pool.pick().unwrap().addr.port()).collect();
        seen.sort_unstable();
        assert_eq!(seen, [1, 1, 3, 3]);
        assert_eq!(pool.len(), 3);
    }

    #[test]
    fn successes_of_a_clean_endpoint_skip_the_lock_but_failures_count() {
        let (e, rx) = endpoint(1, 1, 2);
        e.record(true, "proxy");
        assert_eq!(e.health(), Health::Healthy);
        for _ in 0..5 {
            e.record(true, "proxy");
        }
        e.record(false, "proxy");
        assert_eq!(e.health(), Health::Healthy);
        e.record(true, "proxy"); // resets the streak
        e.record(false, "proxy");
        assert_eq!(e.health(), Health::Healthy);
        e.record(false, "proxy");
        assert_eq!(e.health(), Health::Unhealthy);
        assert_eq!(*rx.borrow(), 2);
        // Traffic does not make an unhealthy endpoint healthy; checks do.
        e.record(true, "proxy");
        assert_eq!(e.health(), Health::Unhealthy);
        e.record(true, "check");
        assert_eq!(e.health(), Health::Healthy);
    }

    #[test]
    fn successful_traffic_does_not_hide_failing_checks() {
        let (e, _rx) = endpoint(1, 1, 2);
        e.record(true, "check");
        e.record(false, "check");
        e.record(true, "proxy");
        e.record(false, "check");
        assert_eq!(e.health(), Health::Unhealthy);
    }
}
