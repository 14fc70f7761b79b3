//! Load counters of one bound listener: active connections (TCP connections, UDP
//! sessions) and new ones per second over a sliding window of [`WINDOW`]; for HTTP
//! listeners also requests per second and totals by status class; bytes from and to the
//! clients. The same type counts the connections attributed to one ingress on a shared
//! HTTP or TLS listener (without bytes).
//!
//! Bytes are counted on the client's side of each connection, per read or write of a
//! copy chunk (one relaxed atomic add on the listener's counter and one on the data
//! plane's total; see [`super::limits::Watched`]), and per datagram for UDP: `in` is what
//! clients sent, `out` what they were sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::limits::{ByteCounter, GuardCounters};

/// How far back `connections_per_second` looks.
pub(crate) const WINDOW: Duration = Duration::from_secs(5);
const BUCKET: Duration = Duration::from_millis(250);
const BUCKETS: usize = 20; // WINDOW / BUCKET

#[derive(Debug)]
pub(crate) struct LoadCounters {
    active: AtomicU64,
    rate: RateWindow,
    connections_total: AtomicU64,
    requests: RateWindow,
    /// Responses by status class: index 0 for 1xx ... 4 for 5xx.
    responses: [AtomicU64; 5],
    /// Refusals, evictions and timeouts at the listener's limits.
    pub guard: GuardCounters,
    /// Bytes from the clients, and to them.
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// The data plane's bytes both ways, over every listener (also those removed since).
    total: Option<Arc<AtomicU64>>,
}

/// Holds one active connection or session; dropping it ends it.
#[derive(Debug)]
pub(crate) struct Active(Arc<LoadCounters>);

impl Active {
    /// The counters this connection counts in.
    pub fn counters(&self) -> &Arc<LoadCounters> {
        &self.0
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl LoadCounters {
    pub fn new() -> Arc<Self> {
        Self::with_total(None)
    }

    /// A listener's counters, whose bytes also count in `total`.
    pub fn counting_into(total: Arc<AtomicU64>) -> Arc<Self> {
        Self::with_total(Some(total))
    }

    fn with_total(total: Option<Arc<AtomicU64>>) -> Arc<Self> {
        let now = Instant::now();
        Arc::new(LoadCounters {
            active: AtomicU64::new(0),
            rate: RateWindow::new(now),
            connections_total: AtomicU64::new(0),
            requests: RateWindow::new(now),
            responses: Default::default(),
            guard: GuardCounters::default(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            total,
        })
    }

    /// Counts `n` bytes a client sent.
    pub fn received(&self, n: usize) {
        self.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(total) = &self.total {
            total.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Counts `n` bytes sent to a client.
    pub fn sent(&self, n: usize) {
        self.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(total) = &self.total {
            total.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Bytes from the clients and to them since the listener started.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed),
        )
    }

    /// Counts a new connection or session, active until the guard drops.
    pub fn opened(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
        self.rate.count(Instant::now());
        Active(Arc::clone(self))
    }

    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Connections or sessions opened since the listener started.
    pub fn connections_total(&self) -> u64 {
        self.connections_total.load(Ordering::Relaxed)
    }

    /// Counts one HTTP response (proxied or answered by the agent) with `status`.
    pub fn responded(&self, status: u16) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[class].fetch_add(1, Ordering::Relaxed);
        self.requests.count(Instant::now());
    }

    /// HTTP responses per second over the last [`WINDOW`].
    pub fn requests_per_second(&self, now: Instant) -> f64 {
        self.requests.per_second(now)
    }

    /// HTTP responses since the listener started, by class (`1xx` ... `5xx`).
    pub fn responses(&self) -> [(&'static str, u64); 5] {
        let n = |i: usize| self.responses[i].load(Ordering::Relaxed);
        [
            ("1xx", n(0)),
            ("2xx", n(1)),
            ("3xx", n(2)),
            ("4xx", n(3)),
            ("5xx", n(4)),
        ]
    }

    /// New connections per second over the last [`WINDOW`] (or the listener's life, if
    /// shorter, but at least one second).
    pub fn per_second(&self, now: Instant) -> f64 {
        self.rate.per_second(now)
    }
}

/// Events per bucket over the last [`BUCKETS`] buckets. Counting is one atomic add (the
/// proxies count every request); moving the window to a new bucket takes a lock, at most
/// once per bucket.
#[derive(Debug)]
struct RateWindow {
    start: Instant,
    buckets: [AtomicU64; BUCKETS],
    /// Absolute index (since `start`) of the newest bucket in `buckets`.
    newest: AtomicU64,
    advancing: Mutex<()>,
}

impl RateWindow {
    fn new(start: Instant) -> Self {
        RateWindow {
            start,
            buckets: Default::default(),
            newest: AtomicU64::new(0),
            advancing: Mutex::new(()),
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
    fn advance(&self, now: Instant) -> u64 {
        let index = self.index(now);
        if index <= self.newest.load(Ordering::Acquire) {
            return index;
        }
        let _advancing = self
            .advancing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let newest = self.newest.load(Ordering::Acquire);
        if index > newest {
            let stale = (index - newest).min(BUCKETS as u64);
            for i in 1..=stale {
                self.buckets[Self::slot(newest + i)].store(0, Ordering::Relaxed);
            }
            self.newest.store(index, Ordering::Release);
        }
        index
    }

    fn count(&self, now: Instant) {
        let index = self.advance(now);
        self.buckets[Self::slot(index)].fetch_add(1, Ordering::Relaxed);
    }

    fn per_second(&self, now: Instant) -> f64 {
        self.advance(now);
        let total: u64 = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum();
        let span = now
            .saturating_duration_since(self.start)
            .clamp(Duration::from_secs(1), WINDOW);
        total as f64 / span.as_secs_f64()
    }
}

impl ByteCounter for LoadCounters {
    fn received(&self, n: usize) {
        LoadCounters::received(self, n);
    }

    fn sent(&self, n: usize) {
        LoadCounters::sent(self, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_slides_and_active_follows_guards() {
        let start = Instant::now();
        let window = RateWindow::new(start);
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
        assert_eq!(load.connections_total(), 2);
        load.responded(200);
        load.responded(204);
        load.responded(503);
        load.responded(0);
        let responses = load.responses();
        assert_eq!(responses[0], ("1xx", 1));
        assert_eq!(responses[1], ("2xx", 2));
        assert_eq!(responses[4], ("5xx", 1));
        assert!(load.requests_per_second(Instant::now()) >= 4.0 / 5.0);

        let total = Arc::new(AtomicU64::new(0));
        let listener = LoadCounters::counting_into(Arc::clone(&total));
        listener.received(100);
        listener.sent(40);
        assert_eq!(listener.bytes(), (100, 40));
        assert_eq!(total.load(Ordering::Relaxed), 140);
        assert_eq!(load.bytes(), (0, 0));
    }
}
