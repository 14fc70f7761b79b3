//! Graceful drain of one bound listener's connections.
//!
//! Every connection a listener accepts holds a [`Tracked`] guard of the listener's
//! [`Tracker`] and watches its [`Phase`]. When the listener is removed (or the agent
//! stops), its socket closes at once and [`Tracker::drain`] moves the phase to
//! [`Phase::Draining`]: HTTP connections finish the requests in flight and close
//! (HTTP/1.1 after the current response, HTTP/2 with GOAWAY); raw TCP streams keep
//! flowing. Connections still open when the drain time is up are closed
//! ([`Phase::Closing`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

/// Where a listener's connections are in their life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Serving,
    /// Finish what is in flight, take nothing new.
    Draining,
    /// Close now.
    Closing,
}

/// The connections of one bound listener.
#[derive(Debug)]
pub(crate) struct Tracker {
    phase: watch::Sender<Phase>,
    open: AtomicUsize,
    idle: Notify,
}

/// One open connection; dropping it ends it for the tracker.
#[derive(Debug)]
pub(crate) struct Tracked(Arc<Tracker>);

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.0.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Tracker {
    pub fn new() -> Arc<Self> {
        let (phase, _) = watch::channel(Phase::Serving);
        Arc::new(Tracker {
            phase,
            open: AtomicUsize::new(0),
            idle: Notify::new(),
        })
    }

    /// Counts a new connection until the guard drops.
    pub fn track(self: &Arc<Self>) -> Tracked {
        self.open.fetch_add(1, Ordering::AcqRel);
        Tracked(Arc::clone(self))
    }

    /// The phase, for a connection to watch.
    pub fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Asks every connection to finish, waits until all have or `limit` has passed, then
    /// closes the rest. Returns how many had to be closed.
    pub async fn drain(&self, limit: Duration) -> usize {
        self.phase.send_replace(Phase::Draining);
        let finished = async {
            loop {
                let notified = self.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.open() == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(limit, finished).await.is_ok() {
            return 0;
        }
        let left = self.open();
        self.phase.send_replace(Phase::Closing);
        left
    }
}

/// Completes when `phase` reaches at least `wanted` (or its tracker is gone, which
/// means the same as closing).
pub(crate) async fn reached(phase: &mut watch::Receiver<Phase>, wanted: Phase) {
    let rank = |p: Phase| match p {
        Phase::Serving => 0,
        Phase::Draining => 1,
        Phase::Closing => 2,
    };
    let _ = phase.wait_for(|p| rank(*p) >= rank(wanted)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_connections_then_closes_the_rest() {
        let tracker = Tracker::new();
        assert_eq!(
            tracker.drain(Duration::from_secs(5)).await,
            0,
            "idle: at once"
        );

        let tracker = Tracker::new();
        let a = tracker.track();
        let b = tracker.track();
        assert_eq!(tracker.open(), 2);
        let mut phase = tracker.phase();
        let finishing = tokio::spawn(async move {
            reached(&mut phase, Phase::Draining).await;
            drop(a);
        });
        let mut phase = tracker.phase();
        let stubborn = tokio::spawn(async move {
            reached(&mut phase, Phase::Closing).await;
            drop(b);
        });
        let closed = tracker.drain(Duration::from_millis(200)).await;
        assert_eq!(closed, 1, "b outlived the drain time");
        finishing.await.unwrap();
        stubborn.await.unwrap();
        assert_eq!(tracker.open(), 0);
    }
}
