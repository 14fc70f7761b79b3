//! What the composition root adds to the REST surface: subresources served by code
//! outside the REST layer (the hub's `federatedingresses/{name}/explain` and
//! `clusters/{name}/token`) and more text for `/metrics` (the hub's and the DNS
//! server's counters). The REST layer mounts them behind the same authentication,
//! store check, request metrics and audit as its own routes, and knows nothing else of
//! them: no agents, no DNS here.
//!
//! Registered once, before the router is built: the request-metric labels of these
//! subresources are fixed then, so the label set stays bounded.

use std::sync::Arc;

use axum::response::Response;
use futures_util::future::BoxFuture;
use http::{Method, Uri};
use serde_json::Value;

use super::AppState;
use super::request::TargetPath;
use crate::auth::User;
use crate::status::ApiError;

/// An authenticated request for an extension subresource (the store answers). The
/// handler authorizes it ([`crate::auth::authorize`]).
pub struct SubresourceRequest {
    pub state: Arc<AppState>,
    pub user: User,
    pub target: TargetPath,
    pub method: Method,
    pub uri: Uri,
}

/// What a subresource handler answers: the verb it served (the `verb` of metrics and
/// audit; `""` when refused before one was known) and the response or the error.
pub struct Served {
    pub verb: &'static str,
    pub result: Result<Response, ApiError>,
}

type Handler = Arc<dyn Fn(SubresourceRequest) -> BoxFuture<'static, Served> + Send + Sync>;

/// A subresource of one of the REST layer's kinds, served by a handler of its own.
#[derive(Clone)]
pub struct Subresource {
    /// The group and plural of the kind (`fedingress.io`, `clusters`).
    pub group: &'static str,
    pub plural: &'static str,
    /// The subresource (`token`): also a value of the request metrics' `resource` label.
    pub name: &'static str,
    /// Whether it is served on cluster-scoped URLs only (a namespaced URL is then the
    /// kind's own, and refused as such).
    pub cluster_scoped: bool,
    /// Whether it has names of its own (`clusters/{name}/token/{id}`).
    pub named: bool,
    /// Its entry in the group's discovery document, if listed there.
    pub discovery: Option<Value>,
    handler: Handler,
}

impl Subresource {
    /// A subresource `name` of `group`'s `plural`, served by `handler`.
    pub fn new<F, Fut>(
        group: &'static str,
        plural: &'static str,
        name: &'static str,
        handler: F,
    ) -> Self
    where
        F: Fn(SubresourceRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Served> + Send + 'static,
    {
        Self {
            group,
            plural,
            name,
            cluster_scoped: false,
            named: false,
            discovery: None,
            handler: Arc::new(move |request| Box::pin(handler(request))),
        }
    }

    /// Served on cluster-scoped URLs only.
    #[must_use]
    pub fn cluster_scoped(mut self) -> Self {
        self.cluster_scoped = true;
        self
    }

    /// With names of its own: `{plural}/{name}/{subresource}/{id}`.
    #[must_use]
    pub fn named(mut self) -> Self {
        self.named = true;
        self
    }

    /// Listed in the group's discovery document with `entry` (an APIResource).
    #[must_use]
    pub fn discovered(mut self, entry: Value) -> Self {
        self.discovery = Some(entry);
        self
    }

    pub(super) fn serve(&self, request: SubresourceRequest) -> BoxFuture<'static, Served> {
        (self.handler)(request)
    }
}

type MetricsWriter = Box<dyn Fn(&mut String) + Send + Sync>;

/// The extensions of one REST surface; see the module docs.
#[derive(Default)]
pub struct Extensions {
    subresources: Vec<Subresource>,
    metrics: Vec<MetricsWriter>,
}

impl Extensions {
    /// Serves `subresource` (the first registered wins for a group, plural and name).
    pub fn subresource(&mut self, subresource: Subresource) -> &mut Self {
        self.subresources.push(subresource);
        self
    }

    /// Appends what `writer` writes (Prometheus text) to `/metrics`, in registration
    /// order after the REST layer's own.
    pub fn metrics(&mut self, writer: impl Fn(&mut String) + Send + Sync + 'static) -> &mut Self {
        self.metrics.push(Box::new(writer));
        self
    }

    /// The subresource served for a request to `group` on `target`, if any.
    pub(super) fn find(&self, group: &str, target: &TargetPath) -> Option<&Subresource> {
        let name = target.subresource.as_deref()?;
        self.subresources.iter().find(|s| {
            s.group == group
                && s.plural == target.plural
                && s.name == name
                && !(s.cluster_scoped && target.namespace.is_some())
        })
    }

    /// Whether a subresource named `name` has names of its own (any kind).
    pub(super) fn is_named(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s.named && s.name == name)
    }

    /// The names of the subresources, for the request metrics' labels.
    pub(crate) fn subresource_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self.subresources.iter().map(|s| s.name).collect();
        names.dedup();
        names
    }

    /// The discovery entries of `group`'s extension subresources, in registration order.
    pub(crate) fn discovery_entries(&self, group: &str) -> Vec<Value> {
        self.subresources
            .iter()
            .filter(|s| s.group == group)
            .filter_map(|s| s.discovery.clone())
            .collect()
    }

    /// Appends every registered writer's text to `out`.
    pub(crate) fn write_metrics(&self, out: &mut String) {
        for writer in &self.metrics {
            writer(out);
        }
    }
}
