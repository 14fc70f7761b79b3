//! fedingress-apiserver: a REST server in the Kubernetes API conventions, well enough
//! that unmodified `kubectl` and kube-rs are comfortable clients, over a
//! [`fedingress_store::Store`].
//!
//! Entry point: [`endpoints::router`] (the whole HTTP surface) over an
//! [`endpoints::AppState`]. Layers, top down: [`endpoints`] (routes, verbs, the
//! metrics/audit, authentication and store-availability layers, content negotiation) →
//! [`registry`] (Kubernetes object semantics, generic over kinds: CRUD, watch, lists,
//! server-side apply and managedFields, Namespaces) → the store. Beside them: [`auth`]
//! (token and OIDC authentication, the RBAC authorizer, the audit log), the codecs
//! ([`codec`], [`protobuf`], [`table`]), [`discovery`] and the OpenAPI documents,
//! [`watch`], [`status`] (Kubernetes Status errors), [`health`] (`/livez`, `/readyz`:
//! the store answers and commits), [`events`] (Event recording) and [`metrics`]
//! (request metrics with labels from fixed sets).
//!
//! What does not belong here: anything about agents, DNS, placement or the process that
//! runs the server. The hub (`fedingress-hub`) adds its subresources (explain, cluster
//! tokens) and its metrics through [`endpoints::extensions`]; the composition root
//! (`federation-apiserver`) binds listeners and builds the [`endpoints::AppState`].
//! `scripts/check-deps` refuses a dependency on the hub, DNS, the agent protocol or
//! tonic. Resource types and validation live in `fedingress-api`: nothing here defines
//! what a valid FederatedIngress is.

pub mod auth;
pub mod codec;
pub mod discovery;
pub mod endpoints;
pub mod events;
pub mod health;
pub mod metrics;
pub mod openapi;
pub mod openapi_v2;
pub mod protobuf;
pub mod registry;
pub mod status;
pub mod table;
pub mod watch;
