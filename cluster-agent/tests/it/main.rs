//! cluster-agent's integration tests: one test binary, a module per area (run one with
//! `cargo nextest run -p cluster-agent --test it <module>::`); their shared harness (the
//! fake hub, the echo backend, the waits) is `fedingress_testsupport`.

#![allow(clippy::unwrap_used)]

mod anycast;
mod deploy_kubernetes;
mod hub;
mod kubernetes_golden;
mod kubernetes_mock;
mod kubernetes_pool_golden;
mod l7;
mod pools;
mod process;
mod standalone;
mod vrrp_render;
