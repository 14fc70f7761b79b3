//! The hub: what connects the API objects to the cluster agents.
//!
//! - [`controller`] places FederatedIngresses on clusters, resolves conflicts, builds
//!   each cluster's plan, decides DNS routing from serving state and writes Cluster and
//!   FederatedIngress status (observe → decide → apply);
//! - [`routing_state`] is what routing remembers per (ingress, cluster), persisted so
//!   that DNS answers right from the first packet after a restart;
//! - [`gateway`] is the agents' gRPC endpoint: one stream per connected cluster, plans
//!   pushed as snapshots and deltas, acks, reports and heartbeats received;
//! - [`providers`] publishes the routing decisions to the configured cloud DNS
//!   providers (`dns.providers`) while leading, and turns their syncs into status;
//! - [`tokens`] issues, lists and revokes agent tokens;
//! - [`endpoints`] adds the hub's subresources (`explain`, `token`) and metrics to the
//!   REST surface, through its extensions;
//! - [`claims`] provisions or binds an IngressPool per placed cluster for each
//!   IngressClaim and applies its reclaim policy (leader only);
//! - [`namespaces`] deletes the content of Namespaces being deleted (leader only) and
//!   creates the bootstrap namespaces at start;
//! - with several replicas on one etcd: [`replication`] keeps the replica's lease and
//!   elects the leader that runs the controller's writes, [`directory`] shares what
//!   each replica's agents say, [`dns_state`] carries what DNS serves from the leader to
//!   every replica;
//! - [`sessions`] is the shared state between them: the published plan of every
//!   cluster and what each connected agent has said ([`Sessions`]).
//!
//! What does not belong here: Kubernetes API semantics, HTTP routing, authentication
//! and codecs (`fedingress-apiserver`, which this crate extends through its endpoint
//! extensions); routing strategies, zone snapshots and the DNS server itself
//! (`fedingress-dns`); cloud SDK calls (`fedingress-providers`); reading config and
//! binding listeners (`federation-apiserver`, the process).

pub mod admission;
pub mod claims;
pub mod controller;
pub mod credentials;
pub mod directory;
pub mod dns_state;
pub mod endpoints;
pub mod gateway;
pub mod gslb;
pub mod metrics;
pub mod namespaces;
pub mod pki;
pub mod providers;
pub mod replication;
pub mod routing_state;
pub mod sessions;
pub mod tokens;

pub use sessions::{AgentState, MemberInfo, Published, SessionSettings, Sessions, member_id};
