//! Load counters of one bound listener: active connections (TCP connections, UDP
//! sessions) and new ones per second over a sliding window of [`WINDOW`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How far back `connections_per_second` looks.
pub(crate) const WINDOW: Duration = Duration::from_secs(5);
const BUCKET: Duration = Duration::from_millis(250);
const BUCKETS: usize = 20; // WINDOW / BUCKET

#[derive(Debug)]
pub(crate) struct LoadCounters {
    active: AtomicU64,
    rate: Mutex<RateWindow>,
}

/// Holds one active connection or session; dropping it ends it.
#[derive(Debug)]
pub(crate) struct Active(Arc<LoadCounters>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl LoadCounters {
    pub fn new() -> Arc<Self> {
        Arc::new(LoadCounters {
            active: AtomicU64::new(0),
            rate: Mutex::new(RateWindow::new(Instant::now())),
        })
    }

    /// Counts a new connection or session, active until the guard drops.
    pub fn opened(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .count(Instant::now());
        Active(Arc::clone(self))
    }

    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// New connections per second over the last [`WINDOW`] (or the listener's life, if
    /// shorter, but at least one second).
    pub fn per_second(&self, now: Instant) -> f64 {
        self.rate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .per_second(now)
    }
}

#[derive(Debug)]
struct RateWindow {
    start: Instant,
    buckets: [u64; BUCKETS],
    /// Absolute index (since `start`) of the newest bucket in `buckets`.
    newest: u64,
}

impl RateWindow {
    fn new(start: Instant) -> Self {
        RateWindow {
            start,
            buckets: [0; BUCKETS],
            newest: 0,
        }
    }

    fn index(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.start);
        u64::try_from(since.as_millis() / BUCKET.as_millis()).unwrap_or(u64::MAX)
    }

    fn slot(index: u64) -> usize {
        // BUCKETS is small: the remainder always fits.
        usize::try_from(index % BUCKETS as u64).unwrap_or(0)
    }

    /// Moves the window to `now`, clearing buckets that fell out of it.
    fn advance(&mut self, now: Instant) -> u64 {
        let index = self.index(now);
        if index > self.newest {
            let stale = (index - self.newest).min(BUCKETS as u64);
            for i in 1..=stale {
                self.buckets[Self::slot(self.newest + i)] = 0;
            }
            self.newest = index;
        }
        self.newest
    }

    fn count(&mut self, now: Instant) {
        let index = self.advance(now);
        let slot = Self::slot(index);
        self.buckets[slot] = self.buckets[slot].saturating_add(1);
    }

    fn per_second(&mut self, now: Instant) -> f64 {
        self.advance(now);
        let total: u64 = self.buckets.iter().sum();
        let span = now
            .saturating_duration_since(self.start)
            .clamp(Duration::from_secs(1), WINDOW);
        total as f64 / span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_slides_and_active_follows_guards() {
        let start = Instant::now();
        let mut window = RateWindow::new(start);
        for _ in 0..10 {
            window.count(start);
        }
        // Young listener: divided by at least one second.
        assert!((window.per_second(start) - 10.0).abs() < 1e-9);
        let later = start + Duration::from_secs(2);
        assert!((window.per_second(later) - 5.0).abs() < 1e-9);
        window.count(later);
        let full = start + WINDOW;
        // The first ten fell out of the window once WINDOW has passed.
        assert!((window.per_second(full) - 1.0 / 5.0).abs() < 1e-9);
        assert_eq!(window.per_second(full + WINDOW * 3), 0.0);

        let load = LoadCounters::new();
        let a = load.opened();
        let b = load.opened();
        assert_eq!(load.active(), 2);
        drop(a);
        assert_eq!(load.active(), 1);
        drop(b);
        assert_eq!(load.active(), 0);
        assert!(load.per_second(Instant::now()) > 0.0);
    }
}
