//! federation-apiserver: the hub process, the composition root of the REST server
//! (`fedingress-apiserver`) and the hub (`fedingress-hub`).
//!
//! Entry points: [`run::main`] (the binary), [`config::load`] (flags + strict YAML into
//! checked [`config::Settings`]) and [`app::App`] (`bind` → addresses → `serve`, also
//! used in-process by tests). The app opens the store ([`storage`]), binds the listeners
//! ([`listener`]), has the hub ([`hub`]) and the REST surface ([`rest`]) built, each
//! returning what it runs as named [`tasks`], and spawns every task itself. [`limits`]
//! holds the `limits:` block and [`connections`] serves one REST connection within
//! them.
//!
//! What does not belong here: Kubernetes API semantics (`fedingress-apiserver`),
//! placement, agents, DNS state or provider syncs (`fedingress-hub`). This crate only
//! reads config, wires the parts together and runs them.

pub mod app;
pub mod config;
pub mod connections;
pub mod hub;
pub mod limits;
pub mod listener;
pub mod rest;
pub mod run;
pub mod storage;
pub mod tasks;
