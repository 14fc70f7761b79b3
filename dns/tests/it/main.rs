//! fedingress-dns's integration tests: one test binary, a module per area (run one with
//! `cargo nextest run -p fedingress-dns --test it <module>::`); `common` is their shared
//! harness.

#![allow(clippy::unwrap_used)]

mod common;

mod routing;
mod server;
mod zone;
