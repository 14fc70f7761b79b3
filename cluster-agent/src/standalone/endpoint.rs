//! Service endpoints with their health state, and the round-robin pool a listener picks
//! endpoints from.
//!
//! # Health states
//! An endpoint starts [`Health::Unknown`] and its first result decides: one success makes
//! it [`Health::Healthy`], one failure [`Health::Unhealthy`] (there is no earlier state
//! to protect with hysteresis). After that it flips only after `unhealthyThreshold`
//! consecutive failures (active checks and failed proxy connects alike) or
//! `healthyThreshold` consecutive successes. Every flip bumps the driver's change counter
//! at once.
//!
//! Traffic goes round-robin to healthy endpoints; while none is healthy yet but some are
//! still unknown (the first checks are in flight right after an apply), to the unknown
//! ones, so a new listener does not refuse its first clients; never to unhealthy ones.
//! Reports count only healthy endpoints as ready.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    fn as_str(self) -> &'static str {
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
    successes: u32,
    failures: u32,
}

/// One endpoint of one service, shared by its health checker and every listener whose
/// backend includes it.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub service: String,
    pub addr: SocketAddr,
    thresholds: Thresholds,
    streak: Mutex<Streak>,
    changes: Arc<watch::Sender<u64>>,
    /// The endpoint is behind a TCP listener (set on every apply).
    pub behind_tcp: AtomicBool,
    /// The endpoint is behind a UDP listener (set on every apply).
    pub behind_udp: AtomicBool,
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
                failures: 0,
            }),
            changes,
            behind_tcp: AtomicBool::new(false),
            behind_udp: AtomicBool::new(false),
        }
    }

    pub fn health(&self) -> Health {
        self.streak
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .health
    }

    /// Records one result (`source` says where it came from: `check` or `proxy`) and
    /// flips the state when a threshold is reached.
    pub fn record(&self, ok: bool, source: &'static str) {
        let (from, to) = {
            let mut streak = self.streak.lock().unwrap_or_else(PoisonError::into_inner);
            let from = streak.health;
            if ok {
                streak.failures = 0;
                streak.successes = streak.successes.saturating_add(1);
                if from == Health::Unknown
                    || (from == Health::Unhealthy && streak.successes >= self.thresholds.healthy)
                {
                    streak.health = Health::Healthy;
                }
            } else {
                streak.successes = 0;
                streak.failures = streak.failures.saturating_add(1);
                if from == Health::Unknown
                    || (from == Health::Healthy && streak.failures >= self.thresholds.unhealthy)
                {
                    streak.health = Health::Unhealthy;
                }
            }
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
    }
}
