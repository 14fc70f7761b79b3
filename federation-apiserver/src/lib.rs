//! federation-apiserver: the fedingress hub's REST API, speaking the Kubernetes API
//! conventions well enough that unmodified `kubectl` is a comfortable client.
//!
//! Entry points: [`api::router`] (the whole HTTP surface, used by `main` and tests),
//! [`config::load`] (flags + strict YAML into checked [`config::Settings`]) and
//! [`server::Server`] (`bind` → addresses → `serve`, also used in-process by tests). Layers, top down: [`api`] (URLs, verbs, auth, negotiation) →
//! [`registry`] (Kubernetes object semantics, generic over kinds) → a
//! [`fedingress_store::Store`]. Resource types and validation live in `fedingress-api`;
//! nothing here defines what a valid FederatedIngress is.
//!
//! The REST modules ([`api`], [`auth`], [`registry`], [`codec`], [`discovery`], the
//! OpenAPI documents, [`protobuf`], [`table`], [`watch`], [`status`], [`health`],
//! [`events`], [`metrics`]) know nothing of the hub, DNS or the process around them
//! (`scripts/check-deps` refuses it): the hub's subresources and metrics are added by
//! [`server`] through [`api::extensions`] ([`hub::endpoints`]).

pub mod api;
pub mod auth;
pub mod codec;
pub mod config;
pub mod connections;
pub mod discovery;
pub mod events;
pub mod health;
pub mod hub;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod openapi_v2;
pub mod protobuf;
pub mod registry;
pub mod run;
pub mod server;
pub mod status;
pub mod table;
pub mod watch;
