//! fedingress-testsupport: the one home of the helpers that tests in several crates (and
//! the benchmarks) need alike.
//!
//! - [`poll`]: waiting until a condition holds ([`eventually`], [`eventually_async`],
//!   and [`Poll`] for another interval or a `Result` instead of a panic).
//! - [`echo`]: the echo backend ([`echo::Echo`]: TCP and UDP on one address, on a thread
//!   of its own) and its clients.
//! - `gateway` (feature `gateway`): the fake hub of the agent's tests (`FakeHub`, a real
//!   `AgentGateway` server; interactive or scripted).
//!
//! What belongs here: small, product-independent helpers that more than one crate's
//! tests would otherwise copy. What does not: anything a product binary links (this crate
//! is a dev-dependency, or a dependency of the test harness and the benchmarks only:
//! `scripts/check-deps` refuses it as a product crate's normal dependency), fixtures of
//! one crate (they stay in that crate's `tests/`), and harnesses that need the product's
//! crates (the in-process hub stays in `federation-apiserver/tests`, the labs in
//! `tests/`).

pub mod echo;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod poll;

pub use poll::{Poll, Probe, Timeout, eventually, eventually_async};
