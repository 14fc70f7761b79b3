//! fedingress-testsupport: the one home of the helpers that tests in several crates (and
//! the benchmarks) need alike.
//!
//! - [`poll`]: waiting until a condition holds ([`eventually`], [`eventually_async`],
//!   and [`Poll`] for another interval or a `Result` instead of a panic).
//! - [`echo`]: the echo backend ([`echo::Echo`]: TCP and UDP on one address, on a thread
//!   of its own) and its clients.
//! - [`dns`]: DNS queries on the wire ([`dns::Query`], with or without EDNS and ECS) and
//!   through `dig` ([`dns::dig`], [`dns::dig_short`]).
//! - [`ports`]: [`free_port`], a port to name before anything listens on it.
//! - `tls` (feature `tls`): test PKI (`Ca`: a CA that signs leaves for any names) and a
//!   TLS echo backend (`TlsEcho`).
//! - `gateway` (feature `gateway`): the fake hub of the agent's tests (`FakeHub`, a real
//!   `AgentGateway` server; interactive or scripted).
//!
//! What belongs here: helpers that the tests of more than one crate (or the benchmarks)
//! would otherwise each copy, light to build: tokio only, rcgen and rustls only behind
//! the `tls` feature, and the protocol crates (`fedingress-api`, `fedingress-proto`)
//! only behind the `gateway` feature. What does
//! not: anything a product binary links (`scripts/check-deps` refuses this crate as a
//! product crate's normal dependency: it is a dev-dependency there, and a dependency of
//! the e2e harness and the benchmarks only); the fixtures of one crate (they stay in its
//! `tests/`); harnesses built on a product crate's implementation (the in-process hub
//! stays in `federation-apiserver/tests/it/support`, the network-namespace labs and the
//! third-party fakes in `tests/src`); TLS and HTTP stacks without a feature of their own.

pub mod dns;
pub mod echo;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod poll;
pub mod ports;
#[cfg(feature = "tls")]
pub mod tls;

pub use poll::{Poll, Probe, Timeout, eventually, eventually_async};
pub use ports::free_port;
