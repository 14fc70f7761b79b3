//! The HTTP surface: one router for `main` and the tests, request parsing, authn/authz,
//! content negotiation (objects or Tables), and the verbs wired to the [`Registry`].

// Errors here are rendered into one HTTP response each: their size does not matter.
#![allow(clippy::result_large_err)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use fedingress_api::event::Event;
use fedingress_api::{Cluster, FederatedIngress, Resource, Time};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};

use self::extensions::{Extensions, Subresource, SubresourceRequest};
use crate::auth::{Authenticator, User};
use crate::codec::{self, BodyFormat, FieldValidation};
use crate::metrics::Metrics;
use crate::registry::{DeletePreconditions, Filter, Registry, Scope};
use crate::status::ApiError;
use crate::table::{self, IncludeObject, Printable};
use crate::{discovery, openapi, openapi_v2, watch};

mod apply;
mod collection;
pub mod extensions;
mod lists;
mod namespaces;
mod read_options;

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
    openapi_document: Bytes,
    rbac_openapi_document: Bytes,
    openapi_hash: String,
    openapi_v2: Bytes,
}

impl AppState {
    pub fn new(
        registry: Registry,
        auth: Authenticator,
        settings: ApiSettings,
        extensions: Extensions,
    ) -> Self {
        let document = openapi::group_version_document().to_string();
        let openapi_hash = openapi::content_hash(document.as_bytes());
        Self {
            registry,
            auth,
            metrics: Arc::new(Metrics::with_subresources(&extensions.subresource_names())),
            extensions,
            settings,
            health: crate::health::StoreHealth::new("the store"),
            authorizer: Arc::new(crate::auth::rbac::Authorizer::default()),
            audit: None,
            openapi_document: Bytes::from(document),
            rbac_openapi_document: Bytes::from(openapi::rbac_document().to_string()),
            openapi_hash,
            openapi_v2: Bytes::from(openapi_v2::document()),
        }
    }
}

/// The API server's router, used by `main` and by tests.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

async fn handle(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let audit = state.audit.as_ref().and_then(|_| AuditStart::of(&request));
    let mut who = None;
    let mut failure = None;
    let (verb, resource, response) = match dispatch(&state, request, &mut who).await {
        Ok((verb, resource, response)) => (verb, resource, response),
        Err((verb, resource, error)) => {
            failure = Some(error.message.clone());
            (verb, resource, error.into_response())
        }
    };
    let code = response.status().as_u16();
    if let (Some(log), Some(start)) = (&state.audit, audit) {
        let mut record = start.finish(verb, who.as_ref(), code, failure);
        if let (Some(object), Some(created)) = (
            record.object_ref.as_mut(),
            response
                .extensions()
                .get::<crate::auth::audit::CreatedName>(),
        ) && object.name.is_empty()
        {
            object.name = created.0.clone();
        }
        log.record(&record);
    }
    state
        .metrics
        .observe(verb, &resource, code, started.elapsed());
    tracing::debug!(%method, path, verb, code, elapsed_ms = started.elapsed().as_millis() as u64, "request");
    response
}

type Outcome = Result<(&'static str, String, Response), (&'static str, String, ApiError)>;

/// A JSON response with `code`.
pub fn json_response(code: StatusCode, value: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// What the audit log needs from a write request, taken before it is consumed.
struct AuditStart {
    method: Method,
    uri: String,
    source_ip: Option<std::net::IpAddr>,
    user_agent: Option<String>,
    received: chrono::DateTime<chrono::Utc>,
}

impl AuditStart {
    fn of(request: &Request) -> Option<Self> {
        crate::auth::audit::write_verb(request.method())?;
        Some(Self {
            method: request.method().clone(),
            // Origin form, as kube logs it (HTTP/2 requests carry an absolute URI).
            uri: request.uri().path_and_query().map_or_else(
                || request.uri().path().to_string(),
                |p| p.as_str().to_string(),
            ),
            source_ip: request.extensions().get::<Peer>().map(|p| p.0.ip()),
            user_agent: request
                .headers()
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(String::from),
            received: chrono::Utc::now(),
        })
    }

    fn finish(
        self,
        verb: &str,
        user: Option<&User>,
        code: u16,
        message: Option<String>,
    ) -> crate::auth::audit::Record {
        let path = self.uri.split('?').next().unwrap_or_default();
        let verb = if verb.is_empty() {
            crate::auth::audit::write_verb(&self.method).unwrap_or_default()
        } else {
            verb
        };
        crate::auth::audit::Record {
            object_ref: crate::auth::audit::ObjectRef::from_path(path),
            request_uri: self.uri,
            verb: verb.to_string(),
            user: user.map(|u| crate::auth::audit::AuditUser {
                username: u.name.clone(),
                uid: u.uid.clone(),
                groups: u.groups.clone(),
            }),
            source_ip: self.source_ip,
            user_agent: self.user_agent,
            code,
            message,
            received: self.received,
            finished: chrono::Utc::now(),
        }
    }
}

async fn dispatch(state: &Arc<AppState>, request: Request, who: &mut Option<User>) -> Outcome {
    let path = request.uri().path().trim_end_matches('/').to_string();
    let path = if path.is_empty() {
        "/".to_string()
    } else {
        path
    };
    let nonresource =
        |value: Value| Ok(("get", String::new(), json_response(StatusCode::OK, &value)));
    match path.as_str() {
        "/livez" => {
            return Ok(("get", String::new(), (StatusCode::OK, "ok").into_response()));
        }
        "/healthz" | "/readyz" => {
            let (ok, body) = state.health.readyz();
            let code = if ok {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let verbose = request.uri().query().is_some_and(|q| q.contains("verbose"));
            let body = if ok && !verbose {
                "ok".to_string()
            } else {
                body
            };
            return Ok(("get", String::new(), (code, body).into_response()));
        }
        "/version" => return nonresource(discovery::version()),
        _ => {}
    }
    let peer = request.extensions().get::<Peer>().map(|p| p.0);
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(user) = state.auth.authenticate(authorization, peer).await else {
        return Err(("", String::new(), ApiError::unauthorized()));
    };
    *who = Some(user.clone());
    if request.method() == Method::GET {
        match path.as_str() {
            "/api" => return nonresource(discovery::core_versions()),
            "/api/v1" => return nonresource(discovery::core_resources()),
            "/apis" => return nonresource(discovery::groups()),
            "/apis/fedingress.io" => return nonresource(discovery::group_document()),
            "/apis/fedingress.io/v1alpha1" => {
                return nonresource(discovery::group_resources(
                    state.extensions.discovery_entries(fedingress_api::GROUP),
                ));
            }
            "/apis/rbac.authorization.k8s.io" => return nonresource(discovery::rbac_group()),
            "/apis/authorization.k8s.io" => return nonresource(discovery::authorization_group()),
            "/apis/authorization.k8s.io/v1" => {
                return nonresource(discovery::authorization_resources());
            }
            "/apis/rbac.authorization.k8s.io/v1" => {
                return nonresource(discovery::rbac_resources());
            }
            "/openapi/v3" => {
                return nonresource(openapi::index(
                    &state.openapi_hash,
                    &openapi::content_hash(&state.rbac_openapi_document),
                ));
            }
            "/openapi/v2" => {
                let response = (
                    [(header::CONTENT_TYPE, openapi_v2::MEDIA_TYPE)],
                    state.openapi_v2.clone(),
                )
                    .into_response();
                return Ok(("get", String::new(), response));
            }
            "/metrics" => {
                crate::auth::authorize(&state.authorizer, &user.path_attributes("get", "/metrics"))
                    .map_err(|e| ("get", String::new(), e))?;
                // A store that does not answer must not stall the scrape.
                let revision = tokio::time::timeout(
                    Duration::from_millis(500),
                    state.registry.store().revision(),
                )
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
                let mut text = state.metrics.render(revision);
                state.authorizer.write_prometheus(&mut text);
                if let Some(oidc) = state.auth.oidc() {
                    oidc.write_prometheus(&mut text);
                }
                if let Some(audit) = &state.audit {
                    audit.write_prometheus(&mut text);
                }
                state.extensions.write_metrics(&mut text);
                return Ok((
                    "get",
                    String::new(),
                    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
                ));
            }
            p if p == format!("/openapi/v3/{}", openapi::CORE_GROUP_VERSION_PATH) => {
                let response = (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "public, immutable"),
                    ],
                    openapi::core_document_bytes().clone(),
                )
                    .into_response();
                return Ok(("get", String::new(), response));
            }
            p if p == format!("/openapi/v3/{}", openapi::RBAC_GROUP_VERSION_PATH) => {
                let response = (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "public, immutable"),
                    ],
                    state.rbac_openapi_document.clone(),
                )
                    .into_response();
                return Ok(("get", String::new(), response));
            }
            p if p == format!("/openapi/v3/{}", openapi::GROUP_VERSION_PATH) => {
                let response = (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "public, immutable"),
                    ],
                    state.openapi_document.clone(),
                )
                    .into_response();
                return Ok(("get", String::new(), response));
            }
            _ => {}
        }
    }
    // Objects live in the store: while it does not answer, fail at once with why
    // (discovery, OpenAPI, metrics and health above need no store).
    let write = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if let Some(reason) = state.health.unavailable_reason(write) {
        return Err(("", String::new(), ApiError::unavailable(reason)));
    }
    if let Some(rest) = path.strip_prefix("/api/v1/") {
        if let Some(target) = namespaces::target(rest) {
            return namespaces::serve(state, &user, target, request).await;
        }
        let target = parse_target(rest, &state.extensions).map_err(|e| ("", String::new(), e))?;
        if target.plural != Event::PLURAL || target.subresource.is_some() {
            return Err(("", String::new(), ApiError::no_route(&path)));
        }
        return serve::<Event>(state, &user, target, request).await;
    }
    if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" {
        let resource = "selfsubjectaccessreviews".to_string();
        if request.method() != Method::POST {
            return Err((
                "",
                resource,
                ApiError::method_not_allowed("only POST (create) is served"),
            ));
        }
        let (headers, body) = read_body(request)
            .await
            .map_err(|e| ("create", resource.clone(), e))?;
        let value = if codec::media_type(content_type(&headers)) == crate::protobuf::MEDIA_TYPE {
            crate::protobuf::decode_access_review(&body)
        } else {
            BodyFormat::from_content_type(content_type(&headers))
                .and_then(|format| codec::parse_body(&body, format))
        }
        .map_err(|e| ("create", resource.clone(), e))?;
        return match crate::auth::review::answer(&state.authorizer, &user, value) {
            Ok(answer) => Ok((
                "create",
                resource,
                json_response(StatusCode::CREATED, &answer),
            )),
            Err(e) => Err(("create", resource, e)),
        };
    }
    if let Some(rest) = path.strip_prefix("/apis/rbac.authorization.k8s.io/v1/") {
        use fedingress_api::rbac::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
        let target = parse_target(rest, &state.extensions).map_err(|e| ("", String::new(), e))?;
        if target.subresource.is_some() {
            return Err(("", String::new(), ApiError::no_route(&path)));
        }
        return match target.plural.as_str() {
            p if p == Role::PLURAL => serve::<Role>(state, &user, target, request).await,
            p if p == ClusterRole::PLURAL => {
                serve::<ClusterRole>(state, &user, target, request).await
            }
            p if p == RoleBinding::PLURAL => {
                serve::<RoleBinding>(state, &user, target, request).await
            }
            p if p == ClusterRoleBinding::PLURAL => {
                serve::<ClusterRoleBinding>(state, &user, target, request).await
            }
            _ => Err(("", String::new(), ApiError::no_route(&path))),
        };
    }
    let Some(rest) = path.strip_prefix("/apis/fedingress.io/v1alpha1/") else {
        return Err(("", String::new(), ApiError::no_route(&path)));
    };
    let target = parse_target(rest, &state.extensions).map_err(|e| ("", String::new(), e))?;
    if let Some(subresource) = state.extensions.find(fedingress_api::GROUP, &target) {
        return serve_extension(state, subresource, user, target, request).await;
    }
    match target.plural.as_str() {
        p if p == FederatedIngress::PLURAL => {
            serve::<FederatedIngress>(state, &user, target, request).await
        }
        p if p == Cluster::PLURAL => serve::<Cluster>(state, &user, target, request).await,
        _ => Err(("", String::new(), ApiError::no_route(&path))),
    }
}

/// Serves a subresource of the extensions.
async fn serve_extension(
    state: &Arc<AppState>,
    subresource: &Subresource,
    user: User,
    target: TargetPath,
    request: Request,
) -> Outcome {
    let resource = format!("{}/{}", subresource.plural, subresource.name);
    let served = subresource
        .serve(SubresourceRequest {
            state: state.clone(),
            user,
            target,
            method: request.method().clone(),
            uri: request.uri().clone(),
        })
        .await;
    match served.result {
        Ok(response) => Ok((served.verb, resource, response)),
        Err(e) => Err((served.verb, resource, e)),
    }
}

/// A resource URL: `[namespaces/{ns}/]{plural}[/{name}[/{subresource}[/{subname}]]]`.
#[derive(Debug, PartialEq, Eq)]
pub struct TargetPath {
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The name within a subresource that has names of its own
    /// ([`Subresource::named`]: `clusters/{name}/token/{id}`).
    pub subname: Option<String>,
}

fn parse_target(rest: &str, extensions: &Extensions) -> Result<TargetPath, ApiError> {
    let parts: Vec<&str> = rest.split('/').collect();
    let (namespace, parts) = match parts.as_slice() {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail.to_vec()),
        _ => (None, parts),
    };
    let missing = || ApiError::no_route(rest);
    let owned = |s: &&str| s.to_string();
    let (plural, name, subresource, subname) = match parts.as_slice() {
        [plural] => (plural.to_string(), None, None, None),
        [plural, name] => (plural.to_string(), Some(owned(name)), None, None),
        [plural, name, sub] => (
            plural.to_string(),
            Some(owned(name)),
            Some(owned(sub)),
            None,
        ),
        [plural, name, sub, id] if extensions.is_named(sub) => (
            plural.to_string(),
            Some(owned(name)),
            Some(owned(sub)),
            Some(owned(id)),
        ),
        _ => return Err(missing()),
    };
    let empty = |v: &Option<String>| v.as_deref() == Some("");
    if plural.is_empty() || empty(&name) || empty(&namespace) || empty(&subname) {
        return Err(missing());
    }
    Ok(TargetPath {
        namespace,
        plural,
        name,
        subresource,
        subname,
    })
}

/// Query parameters of the resource endpoints (unknown ones are ignored, as kube does).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Params {
    field_manager: Option<String>,
    force: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    limit: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    send_initial_events: Option<String>,
    watch: Option<String>,
    allow_watch_bookmarks: Option<String>,
    timeout_seconds: Option<String>,
    field_validation: Option<String>,
    dry_run: Option<String>,
    include_object: Option<String>,
}

/// The query parameters of a resource request. A parameter given twice counts once, by
/// its first value (Go's `url.Values.Get`, as kube-apiserver reads them); a query that
/// still does not parse is a 400, never ignored: a deletecollection whose selectors were
/// dropped would delete everything.
fn parse_params(uri: &http::Uri) -> Result<Params, ApiError> {
    let mut seen = std::collections::HashSet::new();
    let query: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|part| !part.is_empty())
        .filter(|part| seen.insert(part.split('=').next().unwrap_or_default()))
        .collect();
    let uri = http::Uri::builder()
        .path_and_query(format!("/?{}", query.join("&")))
        .build()
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
    axum::extract::Query::<Params>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("invalid query: {}", e.body_text())))
}

fn flag(value: &Option<String>) -> bool {
    matches!(value.as_deref(), Some("true" | "1"))
}

fn parse_dry_run(value: &Option<String>) -> Result<bool, ApiError> {
    match value.as_deref() {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
        ))),
    }
}

/// Whether the client asked for a `meta.k8s.io` Table.
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
        })
}

fn verb_of(
    method: &Method,
    target: &TargetPath,
    params: &Params,
) -> Result<&'static str, ApiError> {
    let named = target.name.is_some();
    Ok(match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if flag(&params.watch) => "watch",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        (m, _) => {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({m})"
            )));
        }
    })
}

/// Bodies up to this size are read to the end even when too large, so the client gets
/// the 413 instead of a broken pipe; past it the connection is dropped.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

async fn read_body(request: Request) -> Result<(HeaderMap, Bytes), ApiError> {
    use http_body_util::BodyExt;
    let (parts, mut body) = request.into_parts();
    let mut buffer = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            total += data.len();
            if total > DRAIN_LIMIT {
                break;
            }
            if total <= MAX_BODY_BYTES {
                buffer.extend_from_slice(&data);
            }
        }
    }
    if total > MAX_BODY_BYTES {
        return Err(ApiError::too_large(MAX_BODY_BYTES));
    }
    Ok((parts.headers, buffer.freeze()))
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!(
            "299 - \"{}\"",
            warning.replace('\\', "\\\\").replace('"', "\\\"")
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// Serves one request on kind `R`.
async fn serve<R: Printable>(
    state: &AppState,
    user: &User,
    target: TargetPath,
    request: Request,
) -> Outcome {
    let resource = match &target.subresource {
        Some(sub) => format!("{}/{sub}", R::PLURAL),
        None => R::PLURAL.to_string(),
    };
    let params = match parse_params(request.uri()) {
        Ok(params) => params,
        Err(e) => return Err(("", resource, e)),
    };
    let verb = match verb_of(request.method(), &target, &params) {
        Ok(verb) => verb,
        Err(e) => return Err(("", resource, e)),
    };
    match serve_verb::<R>(state, user, &target, verb, params, request).await {
        Ok(response) => Ok((verb, resource, response)),
        Err(e) => Err((verb, resource, e)),
    }
}

async fn serve_verb<R: Printable>(
    state: &AppState,
    user: &User,
    target: &TargetPath,
    verb: &'static str,
    params: Params,
    request: Request,
) -> Result<Response, ApiError> {
    // The shape of the URL must fit the kind.
    let namespace = target.namespace.as_deref();
    if R::NAMESPACED && namespace.is_none() && !matches!(verb, "list" | "watch") {
        return Err(ApiError::no_route(request.uri().path()));
    }
    if !R::NAMESPACED && namespace.is_some() {
        return Err(ApiError::no_route(request.uri().path()));
    }
    let scope = match target.subresource.as_deref() {
        None => Scope::Main,
        Some("status") if matches!(verb, "get" | "update" | "patch") => Scope::Status,
        Some(_) => return Err(ApiError::no_route(request.uri().path())),
    };
    let name = target.name.clone().unwrap_or_default();
    crate::auth::authorize(
        &state.authorizer,
        &user.resource_attributes(
            verb,
            R::GROUP,
            R::PLURAL,
            target.subresource.as_deref().unwrap_or_default(),
            namespace.unwrap_or_default(),
            &name,
        ),
    )?;
    let table = wants_table(request.headers());
    let include = IncludeObject::parse(params.include_object.as_deref())?;
    let now = Time(chrono::Utc::now());
    let applying = verb == "patch" && apply::is_apply(request.headers());
    if params.force.is_some() && !applying {
        return Err(ApiError::bad_request(
            "force: Invalid value: true: may not be specified for non-apply patch",
        ));
    }
    let registry =
        &state
            .registry
            .managed_by(&write_manager(&params, request.headers(), applying)?);
    let render_one = |object: &R| -> Value {
        if table {
            table::table(
                std::slice::from_ref(object),
                include,
                &now,
                json!({"resourceVersion": object.metadata().resource_version}),
            )
        } else {
            serde_json::to_value(object).unwrap_or_default()
        }
    };
    match verb {
        "get" => {
            let object = lists::get::<R>(registry, namespace, &name, &params).await?;
            Ok(json_response(StatusCode::OK, &render_one(&object)))
        }
        "list" => {
            let filter = Filter::parse::<R>(
                params.label_selector.as_deref(),
                params.field_selector.as_deref(),
            )?;
            let limit = match params.limit.as_deref() {
                None | Some("") => 0,
                Some(l) => l
                    .parse::<i64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?
                    .max(0) as usize,
            };
            let page = lists::list::<R>(registry, namespace, &filter, limit, &params).await?;
            let mut list_meta = json!({"resourceVersion": page.resource_version.to_string()});
            if let Some(token) = &page.continue_token {
                list_meta["continue"] = json!(token);
            }
            let body = if table {
                table::table(&page.items, include, &now, list_meta)
            } else {
                json!({
                    "kind": R::LIST_KIND,
                    "apiVersion": R::api_version(),
                    "metadata": list_meta,
                    "items": page.items,
                })
            };
            Ok(json_response(StatusCode::OK, &body))
        }
        "watch" => {
            let filter = Filter::parse::<R>(
                params.label_selector.as_deref(),
                params.field_selector.as_deref(),
            )?;
            let (after, initial_events_end) = lists::watch_start(registry, &params).await?;
            let limits = &state.settings.watch;
            let (timeout, capped) = crate::watch::watch_timeout(
                params.timeout_seconds.as_deref(),
                limits,
                crate::watch::random_between,
            )
            .map_err(ApiError::bad_request)?;
            if capped {
                crate::metrics::LimitCounters::count(&state.metrics.limits.watch_timeouts_capped);
            }
            let guard = state
                .metrics
                .try_start_watch(&user.name, limits.max_watches, limits.max_watches_per_user)
                .map_err(watch::refused)?;
            let render: watch::Render<R> = if table {
                Box::new(move |object: &R| {
                    table::table(
                        std::slice::from_ref(object),
                        include,
                        &Time(chrono::Utc::now()),
                        json!({"resourceVersion": object.metadata().resource_version}),
                    )
                })
            } else {
                Box::new(|object: &R| serde_json::to_value(object).unwrap_or_default())
            };
            let receiver = watch::start::<R>(
                registry,
                watch::WatchRequest {
                    namespace: namespace.map(String::from),
                    filter,
                    after,
                    initial_events_end,
                    bookmarks: flag(&params.allow_watch_bookmarks),
                    bookmark_interval: state.settings.bookmark_interval,
                    timeout,
                    render,
                },
            )
            .await;
            let receiver = match receiver {
                Ok(receiver) => receiver,
                // kube-apiserver answers a too-old watch with 200 and an ERROR event.
                Err(e) if e.code == StatusCode::GONE => {
                    let mut line = json!({"type": "ERROR", "object": e.to_status()}).to_string();
                    line.push('\n');
                    return Ok(([(header::CONTENT_TYPE, "application/json")], line).into_response());
                }
                Err(e) => return Err(e),
            };
            let stream = futures_util::stream::unfold(
                (receiver, guard),
                |(mut receiver, guard)| async move {
                    receiver
                        .recv()
                        .await
                        .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), (receiver, guard)))
                },
            );
            Ok((
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (header::CACHE_CONTROL, "no-cache, private"),
                ],
                Body::from_stream(stream),
            )
                .into_response())
        }
        "create" => {
            let (object, warnings, dry_run) = decode_write::<R>(&params, request).await?;
            crate::auth::escalation::check::<R>(&state.authorizer, user, namespace, None, &object)?;
            let created = registry.create(namespace, object, now, dry_run).await?;
            let mut response = with_warnings(
                json_response(
                    StatusCode::CREATED,
                    &serde_json::to_value(&created).unwrap_or_default(),
                ),
                &warnings,
            );
            // The audit log names the created object, as kube's does.
            response
                .extensions_mut()
                .insert(crate::auth::audit::CreatedName(
                    created.metadata().name.clone().unwrap_or_default(),
                ));
            Ok(response)
        }
        "update" => {
            let (object, warnings, dry_run) = decode_write::<R>(&params, request).await?;
            if object.metadata().name.as_deref().is_some_and(|n| n != name)
                || object.metadata().name.is_none()
            {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    object.metadata().name.clone().unwrap_or_default()
                )));
            }
            let updated = registry
                .update::<R>(namespace, &name, scope, dry_run, |current| {
                    crate::auth::escalation::check::<R>(
                        &state.authorizer,
                        user,
                        namespace,
                        Some(current),
                        &object,
                    )?;
                    Ok(object.clone())
                })
                .await?;
            Ok(with_warnings(
                json_response(
                    StatusCode::OK,
                    &serde_json::to_value(&updated).unwrap_or_default(),
                ),
                &warnings,
            ))
        }
        "patch" => {
            let dry_run = parse_dry_run(&params.dry_run)?;
            let validation = FieldValidation::parse(params.field_validation.as_deref())?;
            let (headers, body) = read_body(request).await?;
            if applying {
                return apply::serve::<R>(
                    registry, namespace, &name, scope, &params, &headers, &body, now,
                )
                .await;
            }
            let patch = if (R::GROUP == fedingress_api::rbac::GROUP
                || namespaces::is_namespace::<R>())
                && codec::media_type(content_type(&headers))
                    == "application/strategic-merge-patch+json"
            {
                Patch::strategic(&body)?
            } else {
                Patch::parse(content_type(&headers), &body)?
            };
            let mut warnings = Vec::new();
            let updated = registry
                .update::<R>(namespace, &name, scope, dry_run, |current| {
                    let mut document = serde_json::to_value(current)
                        .map_err(|e| ApiError::internal(format!("encoding current object: {e}")))?;
                    // The patch sees the current resourceVersion (kubectl's managedFields
                    // upgrade replaces it as a precondition); only one the patch changed
                    // is a precondition, so an unrelated race is retried.
                    patch.apply(&mut document)?;
                    let current_rv = current.metadata().resource_version.as_deref();
                    if let Some(meta) = document.get_mut("metadata").and_then(Value::as_object_mut)
                        && meta.get("resourceVersion").and_then(Value::as_str) == current_rv
                    {
                        meta.remove("resourceVersion");
                    }
                    let (object, found) = codec::decode::<R>(document, validation)?;
                    warnings = found;
                    crate::auth::escalation::check::<R>(
                        &state.authorizer,
                        user,
                        namespace,
                        Some(current),
                        &object,
                    )?;
                    Ok(object)
                })
                .await?;
            Ok(with_warnings(
                json_response(
                    StatusCode::OK,
                    &serde_json::to_value(&updated).unwrap_or_default(),
                ),
                &warnings,
            ))
        }
        "delete" => {
            let (options, dry_run) = read_delete_options(&params, request).await?;
            let deleted = registry
                .delete::<R>(
                    namespace,
                    &name,
                    &options.preconditions.unwrap_or_default(),
                    now,
                    dry_run,
                )
                .await?;
            Ok(json_response(
                StatusCode::OK,
                &serde_json::to_value(&deleted).unwrap_or_default(),
            ))
        }
        "deletecollection" => {
            collection::serve::<R>(registry, namespace, &params, request, now).await
        }
        _ => Err(ApiError::method_not_allowed("unsupported verb")),
    }
}

/// The field manager of a write: `fieldManager`, required for apply, otherwise the
/// User-Agent's product (kube's defaults and checks).
fn write_manager(params: &Params, headers: &HeaderMap, applying: bool) -> Result<String, ApiError> {
    match params.field_manager.as_deref().filter(|m| !m.is_empty()) {
        Some(manager) => {
            crate::registry::fields::validate_manager(manager)?;
            Ok(manager.to_string())
        }
        None if applying => Err(ApiError::bad_request(
            "fieldManager is required for apply requests",
        )),
        None => Ok(crate::registry::fields::manager_from_user_agent(
            headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok()),
        )),
    }
}

/// Reads and decodes the body of a create or update: the object, the warnings for the
/// client, and whether it is a dry run.
async fn decode_write<R: Resource>(
    params: &Params,
    request: Request,
) -> Result<(R, Vec<String>, bool), ApiError> {
    let dry_run = parse_dry_run(&params.dry_run)?;
    let validation = FieldValidation::parse(params.field_validation.as_deref())?;
    let (headers, body) = read_body(request).await?;
    // kubectl's typed clients send the RBAC kinds as protobuf.
    let value = if (R::GROUP == fedingress_api::rbac::GROUP || namespaces::is_namespace::<R>())
        && codec::media_type(content_type(&headers)) == crate::protobuf::MEDIA_TYPE
    {
        crate::protobuf::decode_rbac(&body)?
    } else {
        let format = BodyFormat::from_content_type(content_type(&headers))?;
        codec::parse_body(&body, format)?
    };
    let (object, warnings) = codec::decode::<R>(value, validation)?;
    Ok((object, warnings, dry_run))
}

/// The DeleteOptions body of a delete or deletecollection (none: defaults) and whether
/// it is a dry run (the query's `dryRun` or the body's).
async fn read_delete_options(
    params: &Params,
    request: Request,
) -> Result<(DeleteOptions, bool), ApiError> {
    let (headers, body) = read_body(request).await?;
    let options: DeleteOptions = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else {
        let value = codec::parse_body(
            &body,
            BodyFormat::from_content_type(content_type(&headers))?,
        )?;
        serde_json::from_value(value)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let dry_run = parse_dry_run(&params.dry_run)? || options.dry_run.iter().any(|d| d == "All");
    Ok((options, dry_run))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    preconditions: Option<DeletePreconditions>,
    #[serde(default)]
    dry_run: Vec<String>,
}

/// A parsed PATCH body.
enum Patch {
    Merge(Value),
    Json(json_patch::Patch),
}

impl Patch {
    fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Self, ApiError> {
        let essence = codec::media_type(content_type);
        let parse = |body: &[u8]| -> Result<Value, ApiError> {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("couldn't decode the patch as JSON: {e}"))
            })
        };
        match essence.as_str() {
            "application/merge-patch+json" => {
                let value = parse(body)?;
                if !value.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                Ok(Self::Merge(value))
            }
            "application/json-patch+json" => {
                let value = parse(body)?;
                serde_json::from_value(value)
                    .map(Self::Json)
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))
            }
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format ({other}) - accepted media types include: application/json-patch+json, application/merge-patch+json"
            ))),
        }
    }

    /// A strategic merge patch on a kind whose lists all replace whole (the RBAC kinds:
    /// `rules` and `subjects` carry no merge key in kube): a JSON merge patch once the
    /// `$` directives kubectl adds are taken out.
    fn strategic(body: &[u8]) -> Result<Self, ApiError> {
        let mut value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the patch as JSON: {e}"))
        })?;
        if !value.is_object() {
            return Err(ApiError::bad_request(
                "a strategic merge patch must be a JSON object",
            ));
        }
        fn strip(value: &mut Value) {
            if let Value::Object(map) = value {
                map.retain(|key, _| !key.starts_with('$'));
                map.values_mut().for_each(strip);
            }
        }
        strip(&mut value);
        Ok(Self::Merge(value))
    }

    fn apply(&self, document: &mut Value) -> Result<(), ApiError> {
        match self {
            Self::Merge(patch) => {
                json_patch::merge(document, patch);
                Ok(())
            }
            Self::Json(patch) => json_patch::patch(document, patch)
                .map_err(|e| ApiError::invalid_patch(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resource_paths() {
        let parse_target = |rest| parse_target(rest, &Extensions::default());
        let t = parse_target("namespaces/default/federatedingresses/shop/status").unwrap();
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.plural, "federatedingresses");
        assert_eq!(t.name.as_deref(), Some("shop"));
        assert_eq!(t.subresource.as_deref(), Some("status"));
        let t = parse_target("clusters").unwrap();
        assert_eq!((t.namespace, t.name), (None, None));
        assert!(parse_target("namespaces/default/a/b/c/d").is_err());
        assert!(parse_target("clusters//status").is_err());
    }

    #[test]
    fn query_parameters_take_the_first_of_duplicates_and_refuse_garbage() {
        let uri: http::Uri = "/x?labelSelector=a%3Db&labelSelector=&limit=5"
            .parse()
            .unwrap();
        let params = parse_params(&uri).unwrap();
        assert_eq!(params.label_selector.as_deref(), Some("a=b"));
        assert_eq!(params.limit.as_deref(), Some("5"));
        // The same key spelled two ways still collides after decoding: refused.
        let uri: http::Uri = "/x?labelSelector=a&label%53elector=b".parse().unwrap();
        assert_eq!(
            parse_params(&uri).unwrap_err().code,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn table_negotiation() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            ),
        );
        assert!(wants_table(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!wants_table(&headers));
    }

    #[test]
    fn patch_types() {
        assert!(Patch::parse(Some("application/merge-patch+json"), b"{\"a\":1}").is_ok());
        assert!(
            Patch::parse(
                Some("application/json-patch+json"),
                b"[{\"op\":\"remove\",\"path\":\"/a\"}]"
            )
            .is_ok()
        );
        let smp = Patch::parse(Some("application/strategic-merge-patch+json"), b"{}")
            .err()
            .unwrap();
        assert_eq!(smp.code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}
