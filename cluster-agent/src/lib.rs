//! fedingress_agent: the cluster agent's library. Each member cluster runs one agent; it
//! connects out to the hub, receives the cluster's share of every FederatedIngress (a
//! [`ClusterPlan`](fedingress_api::plan::ClusterPlan)), serves or renders it through a
//! driver, and reports health and load back.
//!
//! Entry types:
//! - [`Config`] ([`config`]): the strict YAML config file, loaded and fully checked
//!   before anything binds ([`Config::load`]).
//! - [`Standalone`] ([`standalone`]): the built-in data plane — HTTP host/path routing,
//!   HTTPS and TLS termination, TLS passthrough, TCP and UDP proxies on the configured
//!   addresses with active health checks, passive ejection, load counters and graceful
//!   drain. `apply(plan)` → rule errors, `report(plan)` → an
//!   [`AgentReport`](fedingress_api::plan::AgentReport), `subscribe()` → a change
//!   signal, `metrics()` → Prometheus text.
//! - [`anycast`]: the standalone driver with BGP anycast routes
//!   ([`Anycast`](anycast::Anycast)): announces each placed anycast address through a
//!   GoBGP speaker while its share is applied, healthy and not cordoned or draining.
//! - [`load`]: the CPU of the agent process and of the host, and byte rates, between
//!   two reports.
//! - [`vrrp`]: virtual addresses shared with other hosts' agents through keepalived
//!   (the rendered config, the readiness check keepalived runs, the supervised process).
//!
//! What does not belong here: the hub's wire types (they stop at `fedingress-proto`),
//! placement or routing decisions (the hub makes them; the agent only serves what it is
//! given and measures), and process concerns (flags, exit codes, the `READY` line), which
//! live in the binary.

pub mod admin;
pub mod anycast;
pub mod config;
pub mod driver;
pub mod hub;
pub mod identity;
pub mod kubernetes;
pub mod load;
pub mod run;
pub mod standalone;
pub mod state;
pub mod vrrp;

pub use config::{Config, ConfigError};
pub use standalone::Standalone;
