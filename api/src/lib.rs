//! fedingress-api: the resource types of the `fedingress.io/v1alpha1` API group and the
//! pure logic that goes with them.
//!
//! Entry types: [`Cluster`] and [`FederatedIngress`] (the contract of `docs/design.md`),
//! the [`Resource`] trait the API server is generic over, [`ObjectMeta`] and friends in
//! [`meta`], field-path validation errors in [`validation`], label and field selectors
//! in [`selector`], the name and hostname validators behind them in [`names`], and
//! [`IngressKey`](ingress_key::IngressKey), the namespace/name that conflicts, plans and
//! reports name an ingress by.
//! The hub's pure decisions live here too: which clusters carry an ingress
//! ([`placement::place`]), which ingresses contest a listener or DNS name
//! ([`conflict::find_conflicts`]), and what each cluster's agent serves
//! ([`plan::cluster_plans`], [`plan::ClusterPlan`]), and which rules an agent's driver
//! can serve ([`capability::missing`]). The `rbac.authorization.k8s.io/v1` kinds and their
//! evaluation live in [`rbac`]; core/v1 [`Namespace`]s in [`namespace`].
//!
//! Decoding is lenient where Kubernetes is (unknown fields are ignored; strict field
//! validation is the API server's job), and every enum accepts any capitalisation and is
//! written back canonical. A write goes: decode, [`Resource::apply_defaults`], then
//! [`Resource::validate`] (every problem with its field path, never just the first).
//!
//! What does not belong here: anything that touches a socket, a file or a clock of its
//! own (callers pass `now`), and anything async. This crate never depends on tokio,
//! tonic, hyper or kube-client; CI checks that.

pub mod capability;
pub mod cidr;
pub mod claim;
pub mod cluster;
pub mod conflict;
pub mod event;
pub mod ingress;
pub mod ingress_key;
pub mod meta;
pub mod names;
pub mod namespace;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod rbac;
pub mod selector;
pub mod validation;

pub use claim::IngressClaim;
pub use cluster::{Cluster, ClusterSpec, ClusterStatus};
pub use ingress::{FederatedIngress, FederatedIngressSpec, FederatedIngressStatus};
pub use meta::{Condition, ManagedFieldsEntry, ObjectMeta, Time};
pub use namespace::Namespace;
pub use pool::IngressPool;
pub use validation::{FieldError, FieldErrorKind, FieldPath};

/// The API group every fedingress resource belongs to.
pub const GROUP: &str = "fedingress.io";
/// The one served version of [`GROUP`].
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in objects.
pub const API_VERSION: &str = "fedingress.io/v1alpha1";

/// What the API server needs to know about a kind to store and serve it generically.
///
/// Implemented by [`Cluster`] (cluster-scoped) and [`FederatedIngress`] (namespaced).
pub trait Resource:
    serde::Serialize
    + serde::de::DeserializeOwned
    + schemars::JsonSchema
    + Clone
    + Send
    + Sync
    + 'static
{
    /// `kind`, e.g. `FederatedIngress`.
    const KIND: &'static str;
    /// `kind` of the list type, e.g. `FederatedIngressList`.
    const LIST_KIND: &'static str;
    /// Lower-case plural resource name used in URLs, e.g. `federatedingresses`.
    const PLURAL: &'static str;
    /// Lower-case singular name, e.g. `federatedingress`.
    const SINGULAR: &'static str;
    /// Short names for kubectl, e.g. `["fing"]`.
    const SHORT_NAMES: &'static [&'static str];
    /// Whether objects live in a namespace.
    const NAMESPACED: bool;
    /// API group (`""` for the core group, e.g. Events).
    const GROUP: &'static str = GROUP;
    /// Version within the group.
    const VERSION: &'static str = VERSION;
    /// Fields a field selector may use besides `metadata.name` and `metadata.namespace`.
    const SELECTABLE_FIELDS: &'static [&'static str] = &[];

    /// `apiVersion` of objects of this kind.
    fn api_version() -> String {
        if Self::GROUP.is_empty() {
            Self::VERSION.to_string()
        } else {
            format!("{}/{}", Self::GROUP, Self::VERSION)
        }
    }

    /// The value of one of [`Self::SELECTABLE_FIELDS`].
    fn selectable_field(&self, _field: &str) -> Option<String> {
        None
    }

    fn metadata(&self) -> &ObjectMeta;
    fn metadata_mut(&mut self) -> &mut ObjectMeta;

    /// The spec as JSON, compared to decide whether `metadata.generation` moves.
    fn spec_value(&self) -> serde_json::Value;

    /// Replaces this object's status with `other`'s (the status subresource writes only
    /// status; the main resource keeps the stored status).
    fn copy_status_from(&mut self, other: &Self);

    /// Clears the status (on create, status from the client is ignored).
    fn clear_status(&mut self);

    /// Fills in defaults (ports of HTTP/HTTPS rules, TTL, strategy, ...). Idempotent.
    fn apply_defaults(&mut self);

    /// Validates the whole object, metadata included; every problem with its field path.
    fn validate(&self) -> Vec<FieldError>;

    /// Whether something besides `metadata.finalizers` keeps a deleted object stored (a
    /// Namespace's `spec.finalizers`). Default: nothing does.
    fn holds_deletion(&self) -> bool {
        false
    }

    /// Marks an object whose deletion has begun (a Namespace turns `Terminating`).
    /// Default: nothing changes.
    fn begin_deletion(&mut self) {}
}
