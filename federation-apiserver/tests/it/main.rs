//! federation-apiserver's integration tests: one test binary, a module per area (run one
//! with `cargo nextest run -p federation-apiserver --test it <module>::`); `support` is
//! their shared harness (the in-process server, scripted agents, DNS queries).

#![allow(clippy::unwrap_used)]

mod support;

mod anycast;
mod claims;
mod controller;
mod gateway;
mod metrics;
mod pools;
mod process;
mod rules;
