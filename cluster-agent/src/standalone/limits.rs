//! What the data plane may take from its clients, and how it counts what it refused.
//!
//! - [`Limits`]: the configured caps and timeouts (`limits:`, `udpIdleTimeoutMs`) and the
//!   process-wide [`FdBudget`], shared by every listener.
//! - [`FdBudget`]: client sockets, their upstream connections and UDP session sockets
//!   each hold an [`FdPermit`]; together they stay below `RLIMIT_NOFILE` minus
//!   `limits.reservedFileDescriptors`, so a flood never takes the descriptors the hub
//!   session, the health checks and the listeners need.
//! - [`GuardCounters`]: per listener, what was refused (and why), evicted and timed out,
//!   for `/metrics`.
//! - [`Activity`] and [`Watched`]: when a stream last moved a byte either way, for idle
//!   timeouts.
//!
//! What does not belong here: the decisions at each limit, which live with each proxy
//! (`udp`, `tcp`, `tls`, `http`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::Config;

/// The caps and timeouts of every listener, and the shared descriptor budget.
#[derive(Debug)]
pub(crate) struct Limits {
    pub udp_sessions_per_listener: usize,
    pub udp_sessions_per_source: usize,
    pub udp_idle: Duration,
    pub connections_per_listener: u64,
    pub stream_idle: Duration,
    pub http_idle: Duration,
    pub http_header_read: Duration,
    pub tls_handshake: Duration,
    pub fds: FdBudget,
}

impl Limits {
    /// The limits of `config`, with a descriptor budget below the process's current
    /// `RLIMIT_NOFILE` (soft limit).
    pub fn new(config: &Config) -> Self {
        let limits = &config.limits;
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let budget = fd_budget(soft, u64::from(limits.reserved_file_descriptors));
        let to_usize = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        Limits {
            udp_sessions_per_listener: to_usize(limits.udp_sessions_per_listener),
            udp_sessions_per_source: to_usize(limits.udp_sessions_per_source),
            udp_idle: config.udp_idle_timeout(),
            connections_per_listener: u64::from(limits.connections_per_listener),
            stream_idle: limits.stream_idle_timeout(),
            http_idle: limits.http_idle_timeout(),
            http_header_read: limits.http_header_read_timeout(),
            tls_handshake: limits.tls_handshake_timeout(),
            fds: FdBudget::new(usize::try_from(budget).unwrap_or(usize::MAX)),
        }
    }
}

/// The descriptors the data plane may hold: the soft `RLIMIT_NOFILE` less `reserve`,
/// but at least half of the limit (a reserve larger than the limit itself must not
/// leave nothing); no limit (`None`) gives no budget either.
pub(crate) fn fd_budget(soft: Option<u64>, reserve: u64) -> u64 {
    match soft {
        None => u64::MAX,
        Some(soft) => soft.saturating_sub(reserve).max(soft / 2),
    }
}

/// A count of descriptors held against a fixed budget.
#[derive(Debug)]
pub(crate) struct FdBudget {
    limit: usize,
    used: AtomicUsize,
}

/// One descriptor of the budget; dropping it gives it back.
#[derive(Debug)]
pub(crate) struct FdPermit(Arc<Limits>);

impl Drop for FdPermit {
    fn drop(&mut self) {
        self.0.fds.used.fetch_sub(1, Ordering::AcqRel);
    }
}

impl FdBudget {
    pub fn new(limit: usize) -> Self {
        FdBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// One descriptor of `limits`' budget, or `None` when it is spent.
pub(crate) fn take_fd(limits: &Arc<Limits>) -> Option<FdPermit> {
    let budget = &limits.fds;
    let mut used = budget.used.load(Ordering::Acquire);
    loop {
        if used >= budget.limit {
            return None;
        }
        match budget
            .used
            .compare_exchange_weak(used, used + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(FdPermit(Arc::clone(limits))),
            Err(now) => used = now,
        }
    }
}

/// Why a connection or UDP session was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The listener holds its maximum of connections or sessions.
    ListenerLimit,
    /// The client's address holds its maximum of UDP sessions on the listener.
    SourceLimit,
    /// The descriptor budget is spent.
    FdBudget,
}

impl Refusal {
    pub const ALL: [Refusal; 3] = [
        Refusal::ListenerLimit,
        Refusal::SourceLimit,
        Refusal::FdBudget,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::ListenerLimit => "listener_limit",
            Refusal::SourceLimit => "source_limit",
            Refusal::FdBudget => "fd_budget",
        }
    }
}

/// What ended a connection or session on a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timeout {
    /// No bytes (UDP: no datagrams) either way for the idle timeout.
    Idle,
    /// No complete TLS handshake in time.
    Handshake,
    /// No complete HTTP/1.1 request head in time.
    Header,
}

impl Timeout {
    pub const ALL: [Timeout; 3] = [Timeout::Idle, Timeout::Handshake, Timeout::Header];

    pub fn as_str(self) -> &'static str {
        match self {
            Timeout::Idle => "idle",
            Timeout::Handshake => "handshake",
            Timeout::Header => "header",
        }
    }
}

/// How often a listener logs that it is refusing (each refusal is a debug event).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Refusals, evictions and timeouts of one bound listener.
#[derive(Debug)]
pub(crate) struct GuardCounters {
    refused: [AtomicU64; 3],
    evicted: AtomicU64,
    timed_out: [AtomicU64; 3],
    start: Instant,
    /// Milliseconds after `start` of the last refusal warning, plus one (0: none yet).
    warned_ms: AtomicU64,
}

impl Default for GuardCounters {
    fn default() -> Self {
        GuardCounters {
            refused: Default::default(),
            evicted: AtomicU64::new(0),
            timed_out: Default::default(),
            start: Instant::now(),
            warned_ms: AtomicU64::new(0),
        }
    }
}

impl GuardCounters {
    /// Counts a refusal; true when the listener should log a warning about it (at most
    /// once every [`WARN_EVERY`]).
    pub fn refused(&self, why: Refusal) -> bool {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.warned_ms.load(Ordering::Relaxed);
        let every = u64::try_from(WARN_EVERY.as_millis()).unwrap_or(u64::MAX);
        (last == 0 || now.saturating_sub(last) >= every)
            && self
                .warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    pub fn evicted(&self) {
        self.evicted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn timed_out(&self, why: Timeout) {
        self.timed_out[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn refusals(&self) -> [(&'static str, u64); 3] {
        Refusal::ALL.map(|r| (r.as_str(), self.refused[r as usize].load(Ordering::Relaxed)))
    }

    pub fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    pub fn timeouts(&self) -> [(&'static str, u64); 3] {
        Timeout::ALL.map(|t| {
            (
                t.as_str(),
                self.timed_out[t as usize].load(Ordering::Relaxed),
            )
        })
    }
}

/// When a stream last moved a byte either way (milliseconds after its start).
#[derive(Clone, Debug)]
pub(crate) struct Activity {
    /// tokio's clock, so that tests with paused time see idle timeouts pass.
    start: tokio::time::Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    pub fn new() -> Self {
        Activity {
            start: tokio::time::Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn deadline(&self, idle: Duration) -> tokio::time::Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)) + idle
    }

    /// Completes once nothing has moved for `idle`.
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let deadline = self.deadline(idle);
            tokio::time::sleep_until(deadline).await;
            if tokio::time::Instant::now() >= self.deadline(idle) {
                return;
            }
        }
    }
}

/// Where a [`Watched`] stream counts its bytes: a listener's load counters
/// (`super::load::LoadCounters`).
pub(crate) trait ByteCounter: Send + Sync {
    /// `n` bytes the client sent.
    fn received(&self, n: usize);
    /// `n` bytes sent to the client.
    fn sent(&self, n: usize);
}

/// A stream that records every byte read or written in an [`Activity`], and, when
/// [`Watched::counting`], in a listener's byte counters (read: from the client; written:
/// to it).
pub(crate) struct Watched<S> {
    inner: S,
    activity: Activity,
    bytes: Option<Arc<dyn ByteCounter>>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, activity: Activity) -> Self {
        Watched {
            inner,
            activity,
            bytes: None,
        }
    }

    /// Counts the bytes read and written in `counters` too (`inner` is the client side).
    pub fn counting(mut self, counters: Arc<impl ByteCounter + 'static>) -> Self {
        self.bytes = Some(counters);
        self
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if matches!(polled, Poll::Ready(Ok(()))) && read > 0 {
            this.activity.touch();
            if let Some(bytes) = &this.bytes {
                bytes.received(read);
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            this.activity.touch();
            if let Some(bytes) = &this.bytes {
                bytes.sent(n);
            }
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled
            && n > 0
        {
            this.activity.touch();
            if let Some(bytes) = &this.bytes {
                bytes.sent(n);
            }
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits(fds: usize) -> Arc<Limits> {
        Arc::new(Limits {
            udp_sessions_per_listener: 4,
            udp_sessions_per_source: 2,
            udp_idle: Duration::from_secs(30),
            connections_per_listener: 4,
            stream_idle: Duration::from_secs(1),
            http_idle: Duration::from_secs(1),
            http_header_read: Duration::from_secs(1),
            tls_handshake: Duration::from_secs(1),
            fds: FdBudget::new(fds),
        })
    }

    #[test]
    fn the_budget_keeps_a_reserve_below_the_descriptor_limit() {
        assert_eq!(fd_budget(Some(1024), 256), 768);
        assert_eq!(fd_budget(Some(20_000), 256), 19_744);
        assert_eq!(fd_budget(Some(300), 256), 150, "at least half");
        assert_eq!(fd_budget(None, 256), u64::MAX);

        let limits = limits(2);
        let a = take_fd(&limits).unwrap();
        let b = take_fd(&limits).unwrap();
        assert!(take_fd(&limits).is_none(), "spent");
        assert_eq!(limits.fds.used(), 2);
        drop(a);
        let c = take_fd(&limits).unwrap();
        drop((b, c));
        assert_eq!(limits.fds.used(), 0);
    }

    #[test]
    fn counters_count_and_warn_once_in_a_while() {
        let counters = GuardCounters::default();
        assert!(counters.refused(Refusal::FdBudget), "the first one warns");
        assert!(!counters.refused(Refusal::FdBudget), "then not for a while");
        counters.refused(Refusal::SourceLimit);
        counters.evicted();
        counters.timed_out(Timeout::Header);
        assert_eq!(
            counters.refusals(),
            [("listener_limit", 0), ("source_limit", 1), ("fd_budget", 2)]
        );
        assert_eq!(counters.evictions(), 1);
        assert_eq!(counters.timeouts()[2], ("header", 1));
    }

    #[tokio::test(start_paused = true)]
    async fn activity_moves_the_idle_deadline() {
        let activity = Activity::new();
        let (a, mut b) = tokio::io::duplex(64);
        let mut watched = Watched::new(a, activity.clone());
        let idle = Duration::from_secs(10);
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle_for(idle).await }
        });
        tokio::time::sleep(Duration::from_secs(6)).await;
        watched.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        b.read_exact(&mut one).await.unwrap();
        waiting.await.unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(16),
            "the write at 6 s moved the deadline to 16 s: {:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_counting_stream_counts_the_bytes_either_way() {
        use std::sync::atomic::AtomicU64;
        #[derive(Default)]
        struct Counted(AtomicU64, AtomicU64);
        impl ByteCounter for Counted {
            fn received(&self, n: usize) {
                self.0.fetch_add(n as u64, Ordering::Relaxed);
            }
            fn sent(&self, n: usize) {
                self.1.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        let counters = Arc::new(Counted::default());
        let (client, mut peer) = tokio::io::duplex(64);
        let mut watched = Watched::new(client, Activity::new()).counting(Arc::clone(&counters));
        peer.write_all(b"hello world").await.unwrap();
        let mut buf = [0u8; 11];
        watched.read_exact(&mut buf).await.unwrap();
        watched.write_all(b"abc").await.unwrap();
        let counted = (
            counters.0.load(Ordering::Relaxed),
            counters.1.load(Ordering::Relaxed),
        );
        assert_eq!(counted, (11, 3), "(from the client, to it)");
    }
}
