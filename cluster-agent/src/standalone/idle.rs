//! The idle HTTP/1.1 connections of one endpoint, kept for its next requests:
//! [`IdlePool`]. Every [`Endpoint`](super::endpoint::Endpoint) holds one, so an
//! endpoint that leaves the plan takes its connections with it; [`super::upstream`]
//! takes connections out for requests and puts them back when a response is read.
//!
//! The most recently used connection is taken first. Idle connections are kept for at
//! most [`IDLE_TIMEOUT`], [`MAX_IDLE`] per endpoint (the oldest go first).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::client::conn::http1::SendRequest;

use super::body::RequestBody;

/// How long an idle pooled connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per endpoint.
pub(crate) const MAX_IDLE: usize = 512;

struct Idle {
    sender: SendRequest<RequestBody>,
    since: Instant,
}

/// The idle connections of one endpoint, the most recently used last.
#[derive(Default)]
pub(crate) struct IdlePool(Mutex<Vec<Idle>>);

impl std::fmt::Debug for IdlePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdlePool({})", self.len())
    }
}

impl IdlePool {
    /// The most recently used idle connection that is still open.
    pub(super) fn checkout(&self) -> Option<SendRequest<RequestBody>> {
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(entry) = idle.pop() {
            if !entry.sender.is_closed() && entry.since.elapsed() < IDLE_TIMEOUT {
                return Some(entry.sender);
            }
        }
        None
    }

    pub(super) fn put(&self, sender: SendRequest<RequestBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() >= MAX_IDLE {
            // The oldest go first.
            idle.remove(0);
        }
        if idle
            .first()
            .is_some_and(|oldest| oldest.since.elapsed() >= IDLE_TIMEOUT)
        {
            idle.retain(|e| e.since.elapsed() < IDLE_TIMEOUT && !e.sender.is_closed());
        }
        idle.push(Idle {
            sender,
            since: Instant::now(),
        });
    }

    /// Idle connections now.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}
