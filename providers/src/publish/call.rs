//! Every provider API call goes through one [`CallPolicy`]: a rate limit shared by all
//! calls of one provider, and retries with exponential backoff on throttling and
//! transient errors.
//!
//! Why: cloud DNS APIs limit requests per account (Route53: 5 requests per second per
//! account, and `PriorRequestNotComplete` while a change is pending; Cloud DNS: per
//! project quotas, HTTP 429). A hub that hammers the API on every health flap would
//! throttle itself and every other tool of the account, so calls are paced before they
//! are sent, and a throttled call waits at least what the provider asked for.
//!
//! - Rate limit: a token bucket, `requests_per_second` tokens per second, holding at
//!   most one second's worth (at least one), so a burst after a quiet time is bounded.
//! - Retries: only errors [`ProviderError::is_retryable`] says are worth it (throttled,
//!   transient), at most `max_attempts` attempts in all; the wait before attempt `n + 1`
//!   is "full jitter" (uniform in `[0, min(max_backoff, base_backoff × 2^(n-1))]`, so
//!   that many hubs throttled together do not retry together), and never less than the
//!   provider's `retry_after`.
//! - Observability: a `provider_call` span per attempt (provider, operation, attempt),
//!   and counters ([`CallStats`]) for metrics.
//!
//! Time is tokio's, so tests run with paused time.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::ProviderError;

/// How calls of one provider are paced and retried.
#[derive(Clone, Debug, PartialEq)]
pub struct CallSettings {
    /// Calls per second at most; not a positive finite number means no limit.
    pub requests_per_second: f64,
    /// Attempts per call, the first one included (at least 1).
    pub max_attempts: u32,
    /// The backoff ceiling of the first retry.
    pub base_backoff: Duration,
    /// The backoff ceiling never grows beyond it.
    pub max_backoff: Duration,
}

impl Default for CallSettings {
    /// Route53's per-account limit (5 per second), 6 attempts (the `maxAttempts` default),
    /// 200 ms doubling to 20 s.
    fn default() -> Self {
        CallSettings {
            requests_per_second: 5.0,
            max_attempts: 6,
            base_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(20),
        }
    }
}

/// Counters of one [`CallPolicy`] since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Attempts sent (retries included).
    pub calls: u64,
    /// Attempts that were retries.
    pub retries: u64,
    /// Retries after a throttled attempt (part of `retries`).
    pub throttled_retries: u64,
    /// Retries after a transient error (part of `retries`).
    pub transient_retries: u64,
    /// Attempts the provider throttled.
    pub throttled: u64,
    /// Calls that failed in the end (not retryable, or out of attempts).
    pub failed: u64,
}

/// The rate limit and retry policy of one provider; clones share the limit and the
/// counters.
#[derive(Clone, Debug)]
pub struct CallPolicy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    provider: String,
    settings: CallSettings,
    bucket: Mutex<Bucket>,
    calls: AtomicU64,
    retries: AtomicU64,
    throttled_retries: AtomicU64,
    transient_retries: AtomicU64,
    throttled: AtomicU64,
    failed: AtomicU64,
}

/// Tokens may go below zero: each caller reserves its token and sleeps until it is due,
/// so callers are served in arrival order without holding the lock while waiting.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl CallPolicy {
    /// A policy for the provider named `provider` (for spans and logs).
    pub fn new(provider: impl Into<String>, settings: CallSettings) -> Self {
        let burst = burst(&settings);
        CallPolicy {
            inner: Arc::new(Inner {
                provider: provider.into(),
                settings,
                bucket: Mutex::new(Bucket {
                    tokens: burst,
                    updated: Instant::now(),
                }),
                calls: AtomicU64::new(0),
                retries: AtomicU64::new(0),
                throttled_retries: AtomicU64::new(0),
                transient_retries: AtomicU64::new(0),
                throttled: AtomicU64::new(0),
                failed: AtomicU64::new(0),
            }),
        }
    }

    pub fn settings(&self) -> &CallSettings {
        &self.inner.settings
    }

    pub fn stats(&self) -> CallStats {
        CallStats {
            calls: self.inner.calls.load(Ordering::Relaxed),
            retries: self.inner.retries.load(Ordering::Relaxed),
            throttled_retries: self.inner.throttled_retries.load(Ordering::Relaxed),
            transient_retries: self.inner.transient_retries.load(Ordering::Relaxed),
            throttled: self.inner.throttled.load(Ordering::Relaxed),
            failed: self.inner.failed.load(Ordering::Relaxed),
        }
    }

    /// Runs `attempt` (one API request per call) under the rate limit, retrying
    /// retryable errors; returns the first success or the last error.
    pub async fn call<T, F, Fut>(&self, operation: &str, mut attempt: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let max_attempts = self.inner.settings.max_attempts.max(1);
        let mut n = 1;
        // Why the previous attempt is retried (throttled?), counted when the retry is sent.
        let mut retrying: Option<bool> = None;
        loop {
            self.acquire().await;
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            if let Some(throttled) = retrying {
                self.inner.retries.fetch_add(1, Ordering::Relaxed);
                let by_reason = if throttled {
                    &self.inner.throttled_retries
                } else {
                    &self.inner.transient_retries
                };
                by_reason.fetch_add(1, Ordering::Relaxed);
            }
            let span = info_span!(
                "provider_call",
                provider = %self.inner.provider,
                operation,
                attempt = n
            );
            let result = attempt().instrument(span).await;
            let error = match result {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let retry_after = match &error {
                ProviderError::Throttled { retry_after, .. } => {
                    self.inner.throttled.fetch_add(1, Ordering::Relaxed);
                    *retry_after
                }
                _ => None,
            };
            if !error.is_retryable() || n >= max_attempts {
                self.inner.failed.fetch_add(1, Ordering::Relaxed);
                debug!(provider = %self.inner.provider, operation, attempts = n, %error, "provider call failed");
                return Err(error);
            }
            let wait = self.backoff(n).max(retry_after.unwrap_or_default());
            warn!(
                provider = %self.inner.provider,
                operation,
                attempt = n,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                %error,
                "provider call failed; retrying"
            );
            retrying = Some(matches!(error, ProviderError::Throttled { .. }));
            tokio::time::sleep(wait).await;
            n += 1;
        }
    }

    /// The full-jitter wait after failed attempt `n` (1 for the first).
    fn backoff(&self, n: u32) -> Duration {
        let settings = &self.inner.settings;
        let factor = 2u32.saturating_pow(n.saturating_sub(1));
        let ceiling = settings
            .base_backoff
            .saturating_mul(factor)
            .min(settings.max_backoff);
        ceiling.mul_f64(rand::random_range(0.0..=1.0))
    }

    /// Waits for this call's token.
    async fn acquire(&self) {
        let rate = self.inner.settings.requests_per_second;
        if !(rate.is_finite() && rate > 0.0) {
            return;
        }
        let wait = {
            let mut bucket = self
                .inner
                .bucket
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            let elapsed = now.duration_since(bucket.updated).as_secs_f64();
            bucket.tokens = (bucket.tokens + elapsed * rate).min(burst(&self.inner.settings));
            bucket.updated = now;
            bucket.tokens -= 1.0;
            if bucket.tokens >= 0.0 {
                None
            } else {
                Some(Duration::from_secs_f64(-bucket.tokens / rate))
            }
        };
        if let Some(wait) = wait {
            debug!(provider = %self.inner.provider, wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX), "rate limit: waiting");
            tokio::time::sleep(wait).await;
        }
    }
}

/// Tokens the bucket holds at most: one second's worth, at least one.
fn burst(settings: &CallSettings) -> f64 {
    settings.requests_per_second.max(1.0)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    fn settings(rps: f64, attempts: u32) -> CallSettings {
        CallSettings {
            requests_per_second: rps,
            max_attempts: attempts,
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }

    fn transient() -> ProviderError {
        ProviderError::Transient {
            operation: "ListResourceRecordSets".into(),
            message: "connection reset".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_errors_until_success() {
        let policy = CallPolicy::new("test", settings(0.0, 5));
        let tries = AtomicU32::new(0);
        let result = policy
            .call("op", || async {
                if tries.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(transient())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(
            policy.stats(),
            CallStats {
                calls: 3,
                retries: 2,
                throttled_retries: 0,
                transient_retries: 2,
                throttled: 0,
                failed: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn rejected_is_not_retried_and_attempts_are_bounded() {
        let policy = CallPolicy::new("test", settings(0.0, 3));
        let result: Result<(), _> = policy
            .call("op", || async {
                Err(ProviderError::Rejected {
                    operation: "ChangeResourceRecordSets".into(),
                    message: "InvalidChangeBatch".into(),
                })
            })
            .await;
        assert!(matches!(result, Err(ProviderError::Rejected { .. })));
        assert_eq!(policy.stats().calls, 1);

        let result: Result<(), _> = policy.call("op", || async { Err(transient()) }).await;
        assert!(matches!(result, Err(ProviderError::Transient { .. })));
        let stats = policy.stats();
        assert_eq!((stats.calls, stats.retries, stats.failed), (4, 2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_waits_at_least_retry_after() {
        let policy = CallPolicy::new("test", settings(0.0, 2));
        let tries = AtomicU32::new(0);
        let start = Instant::now();
        let result = policy
            .call("op", || async {
                if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(ProviderError::Throttled {
                        operation: "op".into(),
                        message: "Rate exceeded".into(),
                        retry_after: Some(Duration::from_secs(30)),
                    })
                } else {
                    Ok(())
                }
            })
            .await;
        assert!(result.is_ok());
        // Virtual time: the retry came no earlier than the provider asked.
        assert!(start.elapsed() >= Duration::from_secs(30));
        let stats = policy.stats();
        assert_eq!((stats.throttled, stats.retries), (1, 1));
        assert_eq!((stats.throttled_retries, stats.transient_retries), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_ceiling_doubles_up_to_the_maximum() {
        let policy = CallPolicy::new("test", settings(0.0, 10));
        for n in 1..10 {
            let wait = policy.backoff(n);
            let ceiling = Duration::from_millis(100 * 2u64.pow(n - 1)).min(Duration::from_secs(2));
            assert!(wait <= ceiling, "attempt {n}: {wait:?} > {ceiling:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_is_shared_by_clones() {
        let policy = CallPolicy::new("test", settings(2.0, 1));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let policy = policy.clone();
            tasks.push(tokio::spawn(async move {
                policy
                    .call("op", || async { Ok::<_, ProviderError>(Instant::now()) })
                    .await
                    .unwrap()
            }));
        }
        let mut times = Vec::new();
        for task in tasks {
            times.push(task.await.unwrap().duration_since(start));
        }
        times.sort();
        // A burst of 2, then one every 0.5 s (virtual time).
        assert_eq!(times[1], Duration::ZERO);
        assert!(times[5] >= Duration::from_secs(2), "{times:?}");
        assert_eq!(policy.stats().calls, 6);
    }
}
