//! The layers a request passes once, outermost first: [`observe`] (request metrics and
//! the audit log), [`normalize`] (trailing slashes, before routing), then, on every
//! route but the health probes and `/version`, [`authenticate`]; on the object routes
//! (and unknown paths) [`require_store`]; on the other routes [`get_only`].
//!
//! Handlers say what they served through their response's extensions ([`Reply`]:
//! verb, resource, failure); a response that says nothing was a non-resource `get`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{Method, header};

use super::{AppState, Peer};
use crate::auth::User;
use crate::status::ApiError;

/// What a handler served, for the request metrics and the audit log.
#[derive(Clone, Debug)]
struct Observed {
    /// `""` when refused before a verb was known.
    verb: &'static str,
    /// `plural[/subresource]`, `""` for non-resource paths.
    resource: String,
    /// The error's message, when the answer is one.
    failure: Option<String>,
}

/// A handler's answer and what it served.
pub(super) struct Reply {
    verb: &'static str,
    resource: String,
    result: Result<Response, ApiError>,
}

impl Reply {
    pub(super) fn new(
        verb: &'static str,
        resource: impl Into<String>,
        result: Result<Response, ApiError>,
    ) -> Self {
        Self {
            verb,
            resource: resource.into(),
            result,
        }
    }

    /// Refused before the verb and resource were known.
    pub(super) fn refused(error: ApiError) -> Self {
        Self::new("", "", Err(error))
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let (mut response, failure) = match self.result {
            Ok(response) => (response, None),
            Err(error) => {
                let failure = Some(error.message.clone());
                (error.into_response(), failure)
            }
        };
        response.extensions_mut().insert(Observed {
            verb: self.verb,
            resource: self.resource,
            failure,
        });
        response
    }
}

/// The authenticated user, in the response's extensions for the audit log.
#[derive(Clone)]
struct Authenticated(User);

/// The path the client sent, when [`normalize`] changed it (errors name it as sent).
#[derive(Clone)]
struct RequestedPath(String);

/// The path as the client sent it.
pub(super) fn requested_path(request: &Request) -> String {
    request.extensions().get::<RequestedPath>().map_or_else(
        || request.uri().path().to_string(),
        |requested| requested.0.clone(),
    )
}

/// The URI as the client sent it (path and query).
pub(super) fn requested_uri(request: &Request) -> http::Uri {
    let Some(RequestedPath(path)) = request.extensions().get::<RequestedPath>() else {
        return request.uri().clone();
    };
    let with_query = match request.uri().query() {
        Some(query) => format!("{path}?{query}"),
        None => path.clone(),
    };
    with_query.parse().unwrap_or_else(|_| request.uri().clone())
}

/// Counts the request (verb, resource, code, latency) and writes its audit record.
pub(super) async fn observe(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let audit = state.audit.as_ref().and_then(|_| AuditStart::of(&request));
    let response = next.run(request).await;
    let Observed {
        verb,
        resource,
        failure,
    } = response
        .extensions()
        .get::<Observed>()
        .cloned()
        .unwrap_or(Observed {
            verb: "get",
            resource: String::new(),
            failure: None,
        });
    let code = response.status().as_u16();
    if let (Some(log), Some(start)) = (&state.audit, audit) {
        let who = response.extensions().get::<Authenticated>().map(|a| &a.0);
        let mut record = start.finish(verb, who, code, failure);
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

/// Trailing slashes are not part of a path (`/api/v1/` is `/api/v1`; `/` stays).
pub(super) fn normalize(mut request: Request) -> Request {
    let path = request.uri().path();
    let trimmed = match path.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    if trimmed == path {
        return request;
    }
    let requested = RequestedPath(path.to_string());
    let mut parts = request.uri().clone().into_parts();
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{trimmed}?{query}"),
        None => trimmed.to_string(),
    };
    let Ok(path_and_query) = path_and_query.parse() else {
        return request;
    };
    parts.path_and_query = Some(path_and_query);
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
        request.extensions_mut().insert(requested);
    }
    request
}

/// Finds the user (401 without one) and puts them into the request's extensions.
pub(super) async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<Peer>().map(|p| p.0);
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(user) = state.auth.authenticate(authorization, peer).await else {
        return Reply::refused(ApiError::unauthorized()).into_response();
    };
    request.extensions_mut().insert(user.clone());
    let mut response = next.run(request).await;
    response.extensions_mut().insert(Authenticated(user));
    response
}

/// Objects live in the store: while it does not answer, fail at once with why.
pub(super) async fn require_store(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    match store_refusal(&state, request.method()) {
        Some(refused) => refused.into_response(),
        None => next.run(request).await,
    }
}

fn store_refusal(state: &AppState, method: &Method) -> Option<Reply> {
    let write = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let reason = state.health.unavailable_reason(write)?;
    Some(Reply::refused(ApiError::unavailable(reason)))
}

/// The discovery, OpenAPI and metrics routes answer GET only; any other method is an
/// unknown path (as [`unknown`] answers it).
pub(super) async fn get_only(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() == Method::GET {
        return next.run(request).await;
    }
    match store_refusal(&state, request.method()) {
        Some(refused) => refused.into_response(),
        None => unknown(request).await.into_response(),
    }
}

/// No route: 404 naming the path.
pub(super) async fn unknown(request: Request) -> Reply {
    Reply::refused(ApiError::no_route(request.uri().path()))
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
