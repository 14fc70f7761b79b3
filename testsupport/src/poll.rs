//! Waiting until a condition holds, instead of sleeping a fixed time: the one polling
//! loop of the workspace's tests and benchmarks.
//!
//! A check returns a [`Probe`]: `bool`, `Option<T>` or `Result<T, String>`. It is called
//! until it holds (`true`, `Some`, `Ok`), every [`EVERY`] unless told otherwise, and the
//! wait fails once its timeout has passed, naming what it waited for and the last thing
//! the check saw (the `Err` text, `None` or `false`).
//!
//! [`eventually`] (blocking) and [`eventually_async`] panic on timeout, as a failed
//! assertion does; [`Poll`] sets another interval and has the same two waits returning
//! [`Timeout`] instead ([`Poll::try_sync`], [`Poll::try_async`]), for callers that
//! report errors rather than panic (the benchmarks). The async waits measure time with
//! tokio's clock, so they follow paused time (`start_paused`) like the code under test.

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// How often a wait checks again unless told otherwise ([`Poll::every`]).
pub const EVERY: Duration = Duration::from_millis(20);

/// What a check returns: whether the condition holds and, if so, its value; if not,
/// what was seen instead (printed when the wait times out).
pub trait Probe {
    /// What the wait returns once the check holds.
    type Value;
    /// `Ok(value)` when the condition holds, else `Err(what was seen)`.
    fn into_result(self) -> Result<Self::Value, String>;
}

impl Probe for bool {
    type Value = ();
    fn into_result(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("false".into()) }
    }
}

impl<T> Probe for Option<T> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "None".into())
    }
}

/// The `Err` says what the check saw instead. `String` only (not any error type), so a
/// closure's `Err(format!(..))`, `.into()` and `?` need no type annotation.
impl<T> Probe for Result<T, String> {
    type Value = T;
    fn into_result(self) -> Result<T, String> {
        self
    }
}

/// Calls `check` until it holds, every [`EVERY`]; returns its value.
///
/// # Panics
/// When `timeout` passes first, with `what` and the last thing `check` saw.
#[track_caller]
pub fn eventually<P: Probe>(timeout: Duration, what: &str, check: impl FnMut() -> P) -> P::Value {
    Poll::new(timeout).eventually(what, check)
}

/// Awaits `check()` until it holds, every [`EVERY`] (tokio's clock); returns its value.
///
/// # Panics
/// When `timeout` passes first, with `what` and the last thing `check` saw.
pub async fn eventually_async<P, F, Fut>(timeout: Duration, what: &str, check: F) -> P::Value
where
    P: Probe,
    F: FnMut() -> Fut,
    Fut: Future<Output = P>,
{
    Poll::new(timeout).eventually_async(what, check).await
}

/// A wait: how long at most, and how often to check.
#[derive(Clone, Copy, Debug)]
pub struct Poll {
    timeout: Duration,
    every: Duration,
}

impl Poll {
    /// A wait of at most `timeout`, checking every [`EVERY`].
    pub const fn new(timeout: Duration) -> Poll {
        Poll {
            timeout,
            every: EVERY,
        }
    }

    /// The same wait, checking every `every` instead.
    pub const fn every(self, every: Duration) -> Poll {
        Poll {
            timeout: self.timeout,
            every,
        }
    }

    /// Calls `check` until it holds (blocking the thread in between).
    ///
    /// # Errors
    /// [`Timeout`] when the timeout passes first.
    pub fn try_sync<P: Probe>(
        &self,
        what: &str,
        mut check: impl FnMut() -> P,
    ) -> Result<P::Value, Timeout> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            let last = match check().into_result() {
                Ok(value) => return Ok(value),
                Err(last) => last,
            };
            if std::time::Instant::now() >= deadline {
                return Err(self.timed_out(what, last));
            }
            std::thread::sleep(self.every);
        }
    }

    /// Awaits `check()` until it holds, sleeping on tokio's clock in between.
    ///
    /// # Errors
    /// [`Timeout`] when the timeout passes first.
    pub async fn try_async<P, F, Fut>(&self, what: &str, mut check: F) -> Result<P::Value, Timeout>
    where
        P: Probe,
        F: FnMut() -> Fut,
        Fut: Future<Output = P>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let last = match check().await.into_result() {
                Ok(value) => return Ok(value),
                Err(last) => last,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(self.timed_out(what, last));
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// [`Poll::try_sync`], panicking on timeout.
    ///
    /// # Panics
    /// When the timeout passes first, with `what` and the last thing `check` saw.
    #[track_caller]
    pub fn eventually<P: Probe>(&self, what: &str, check: impl FnMut() -> P) -> P::Value {
        match self.try_sync(what, check) {
            Ok(value) => value,
            Err(timeout) => panic!("{timeout}"),
        }
    }

    /// [`Poll::try_async`], panicking on timeout.
    ///
    /// # Panics
    /// When the timeout passes first, with `what` and the last thing `check` saw.
    pub async fn eventually_async<P, F, Fut>(&self, what: &str, check: F) -> P::Value
    where
        P: Probe,
        F: FnMut() -> Fut,
        Fut: Future<Output = P>,
    {
        match self.try_async(what, check).await {
            Ok(value) => value,
            Err(timeout) => panic!("{timeout}"),
        }
    }

    fn timed_out(&self, what: &str, last: String) -> Timeout {
        Timeout {
            what: what.to_owned(),
            after: self.timeout,
            last,
        }
    }
}

/// A wait whose condition did not hold in time.
#[derive(Clone, Debug)]
pub struct Timeout {
    /// What was waited for.
    pub what: String,
    /// The wait's timeout.
    pub after: Duration,
    /// What the check saw the last time.
    pub last: String,
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: not within {:?}; last seen: {}",
            self.what, self.after, self.last
        )
    }
}

impl std::error::Error for Timeout {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn returns_the_value_once_the_check_holds() {
        let calls = Cell::new(0);
        let value = eventually(Duration::from_secs(5), "the third call", || {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err(format!("call {}", calls.get()))
            } else {
                Ok(calls.get())
            }
        });
        assert_eq!(value, 3);
        let mut left = 2;
        eventually(Duration::from_secs(5), "a bool", || {
            left -= 1;
            left == 0
        });
        let found = eventually(Duration::from_secs(5), "an option", || Some("x"));
        assert_eq!(found, "x");
        // `?` and `.into()` in a check need no annotation: the error type is `String`.
        let parsed = eventually(Duration::from_secs(5), "a number", || {
            if calls.get() == 0 {
                return Err("never".into());
            }
            let n: u32 = "7"
                .parse()
                .map_err(|e: std::num::ParseIntError| e.to_string())?;
            Ok(n)
        });
        assert_eq!(parsed, 7);
    }

    #[test]
    fn a_timeout_names_the_wait_and_the_last_value() {
        let mut n = 0;
        let timeout = Poll::new(Duration::from_millis(30))
            .every(Duration::from_millis(1))
            .try_sync("n to reach 1000", || {
                n += 1;
                if n >= 1000 {
                    Ok(())
                } else {
                    Err(format!("n = {n}"))
                }
            })
            .unwrap_err();
        assert_eq!(timeout.what, "n to reach 1000");
        assert_eq!(timeout.last, format!("n = {n}"));
        let text = timeout.to_string();
        assert!(text.starts_with("n to reach 1000: not within 30ms; last seen: n = "));
    }

    #[test]
    #[should_panic(expected = "never: not within 0ns; last seen: None")]
    fn eventually_panics_with_the_timeout() {
        eventually(Duration::ZERO, "never", || None::<()>);
    }

    #[tokio::test(start_paused = true)]
    async fn the_async_wait_follows_paused_time() {
        let started = tokio::time::Instant::now();
        let timeout = Poll::new(Duration::from_secs(3600))
            .try_async("an hour", || async { false })
            .await
            .unwrap_err();
        assert_eq!(timeout.last, "false");
        assert!(started.elapsed() >= Duration::from_secs(3600));
        let value = eventually_async(Duration::from_secs(1), "a result", || async {
            let n: u32 = "7"
                .parse()
                .map_err(|e: std::num::ParseIntError| e.to_string())?;
            Ok(n)
        })
        .await;
        assert_eq!(value, 7);
    }
}
