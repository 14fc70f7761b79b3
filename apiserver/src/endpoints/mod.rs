//! The HTTP surface: one router for `main` and the tests ([`router`]), its layers
//! ([`layers`]: metrics and audit, authentication, the store check), the object routes
//! ([`resources`], parsed once: [`request`]) and their verbs ([`verbs`]), with content
//! negotiation (objects or Tables). The health, discovery, OpenAPI and `/metrics` routes
//! are declared beside their documents (`health`, `discovery`, `openapi*`, `metrics`).
//! What the hub adds comes through [`extensions`].

// Errors here are rendered into one HTTP response each: their size does not matter.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use futures_util::future::BoxFuture;
use tower::ServiceExt;

use self::extensions::Extensions;
use crate::auth::{Authenticator, User};
use crate::metrics::{Exposition, Metrics};
use crate::registry::Registry;
use crate::status::ApiError;
use crate::{discovery, health, openapi, openapi_v2};

mod apply;
mod collection;
pub mod extensions;
mod layers;
mod lists;
mod namespaces;
mod read_options;
mod request;
mod resources;
mod verbs;

pub use self::request::TargetPath;
pub use crate::codec::json_response;

/// Request bodies larger than this are refused (kube-apiserver allows 3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The client's address, put into request extensions by the listener.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// Knobs of the API surface.
#[derive(Clone, Debug)]
pub struct ApiSettings {
    pub bookmark_interval: Duration,
    /// Watch caps and durations (`limits:`).
    pub watch: crate::watch::WatchLimits,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            bookmark_interval: Duration::from_secs(10),
            watch: crate::watch::WatchLimits::default(),
        }
    }
}

/// Everything a request handler needs.
pub struct AppState {
    pub registry: Registry,
    pub auth: Authenticator,
    /// What the composition root added: subresources and `/metrics` text.
    extensions: Extensions,
    pub metrics: Arc<Metrics>,
    pub settings: ApiSettings,
    /// Whether the store answers (`/readyz`; writes refused while it does not).
    pub health: Arc<crate::health::StoreHealth>,
    /// RBAC decisions from the cached Roles and bindings.
    pub authorizer: Arc<crate::auth::rbac::Authorizer>,
    /// The audit log of writes, when configured.
    pub audit: Option<crate::auth::audit::AuditLog>,
}

impl AppState {
    pub fn new(
        registry: Registry,
        auth: Authenticator,
        settings: ApiSettings,
        extensions: Extensions,
    ) -> Self {
        Self {
            registry,
            auth,
            metrics: Arc::new(Metrics::with_subresources(&extensions.subresource_names())),
            extensions,
            settings,
            health: crate::health::StoreHealth::new("the store"),
            authorizer: Arc::new(crate::auth::rbac::Authorizer::default()),
            audit: None,
        }
    }
}

/// The API server's router, used by `main` and by tests. A request passes
/// [`layers::observe`], has its trailing slashes dropped, then is routed: the health
/// probes and `/version` as they are, everything else authenticated first.
pub fn router(state: Arc<AppState>) -> Router {
    let routed = Router::new()
        .merge(health::routes())
        .merge(discovery::version_routes())
        .fallback_service(authenticated(state.clone()))
        .with_state(state.clone());
    Router::new()
        .fallback_service(routed.map_request(layers::normalize))
        .layer(axum::middleware::from_fn_with_state(state, layers::observe))
}

/// Every route behind authentication: the documents and `/metrics` (GET only), the
/// objects and unknown paths (the store must answer).
fn authenticated(state: Arc<AppState>) -> Router {
    use axum::middleware::from_fn_with_state;
    let documents = Router::new()
        .merge(discovery::routes())
        .merge(openapi::routes())
        .merge(openapi_v2::routes())
        .merge(crate::metrics::routes())
        .route_layer(from_fn_with_state(state.clone(), layers::get_only));
    let objects = resources::routes()
        .fallback(layers::unknown)
        .layer(from_fn_with_state(state.clone(), layers::require_store));
    documents
        .merge(objects)
        .layer(from_fn_with_state(state.clone(), layers::authenticate))
        .with_state(state)
}

impl FromRef<Arc<AppState>> for health::Probes {
    fn from_ref(state: &Arc<AppState>) -> Self {
        Self(state.health.clone())
    }
}

impl FromRef<Arc<AppState>> for discovery::ExtensionEntries {
    fn from_ref(state: &Arc<AppState>) -> Self {
        Self(
            state
                .extensions
                .discovery_entries(fedingress_api::GROUP)
                .into(),
        )
    }
}

impl Exposition for Arc<AppState> {
    fn render(&self, user: User) -> BoxFuture<'_, Result<String, ApiError>> {
        Box::pin(async move {
            crate::auth::authorize(&self.authorizer, &user.path_attributes("get", "/metrics"))?;
            // A store that does not answer must not stall the scrape.
            let revision =
                tokio::time::timeout(Duration::from_millis(500), self.registry.store().revision())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default();
            let mut text = self.metrics.render(revision);
            self.authorizer.write_prometheus(&mut text);
            if let Some(oidc) = self.auth.oidc() {
                oidc.write_prometheus(&mut text);
            }
            if let Some(audit) = &self.audit {
                audit.write_prometheus(&mut text);
            }
            self.extensions.write_metrics(&mut text);
            Ok(text)
        })
    }
}
