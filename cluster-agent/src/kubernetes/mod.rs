//! The `kubernetes` driver: renders the cluster's plan as Kubernetes objects in the
//! member cluster (server-side apply), reads their load-balancer status and the
//! backends' EndpointSlices back, and elects one active agent among replicas.
//!
//! - [`render`]: pure: plan share → desired Ingress / Service / ConfigMap objects per
//!   rendering profile, plus rule errors.
//! - [`lease`]: leader election with a `coordination.k8s.io/v1` Lease.

pub mod lease;
pub mod render;
