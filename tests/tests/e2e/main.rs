//! The end-to-end tests: one test binary (one link of the whole graph instead of one per
//! file), a module per area. Run one area with `cargo nextest run -p fedingress-tests
//! --test e2e <module>::` (e.g. `route53::`); nextest still runs every test in a process
//! of its own.

#![allow(clippy::unwrap_used)]

mod agents;
mod anycast;
mod api;
mod apply;
mod clouddns;
mod continuity;
mod dns_soak;
mod durability;
mod etcd;
mod faults;
mod fedctl;
mod flood;
mod gslb;
mod ha;
mod identity;
mod kubeapi;
mod kubectl;
mod kubernetes;
mod l7;
mod listeners;
mod lists;
mod namespaces;
mod netns;
mod pools;
mod pools_hub;
mod providers;
mod rbac;
mod route53;
mod secrets;
mod soak_api;
mod soak_gateway;
mod soak_tls;
mod transport;
mod vrrp;
mod zonemaster;
