//! federation-apiserver: the hub process, the composition root of the REST server
//! (`fedingress-apiserver`) and the hub (`fedingress-hub`).
//!
//! Entry points: [`run::main`] (the binary), [`config::load`] (flags + strict YAML into
//! checked [`config::Settings`]) and [`server::Server`] (`bind` → addresses → `serve`,
//! also used in-process by tests). [`server`] builds the store, the REST state with the
//! hub's extensions, the hub's subsystems and their listeners; [`limits`] holds the
//! `limits:` block and [`connections`] the connection cap and timeouts of every
//! listener.
//!
//! What does not belong here: Kubernetes API semantics (`fedingress-apiserver`),
//! placement, agents, DNS state or provider syncs (`fedingress-hub`). This crate only
//! reads config, wires the parts together and runs them.

pub mod config;
pub mod connections;
pub mod limits;
pub mod run;
pub mod server;
