//! Kubernetes `Status` errors: every failed request answers with one, so kubectl prints
//! our errors the way it prints kube-apiserver's.

use axum::response::{IntoResponse, Response};
use fedingress_api::FieldError;
use http::StatusCode;
use serde_json::{Value, json};

/// The resource an error is about, as `details` carries it.
#[derive(Clone, Debug, Default)]
pub struct Target {
    pub group: &'static str,
    /// Plural resource name (kube-apiserver puts the resource in `details.kind`).
    pub kind: String,
    pub name: String,
}

/// A failed API request, rendered as a `Status` object.
#[derive(Debug)]
pub struct ApiError {
    pub code: StatusCode,
    pub reason: &'static str,
    pub message: String,
    pub target: Option<Box<Target>>,
    pub causes: Vec<Value>,
    /// `details.retryAfterSeconds`, when the client should retry.
    pub retry_after: Option<u32>,
    /// `metadata.continue`: the token a 410 on a paged list offers to continue with.
    pub list_continue: Option<String>,
}

impl ApiError {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            target: None,
            causes: Vec::new(),
            retry_after: None,
            list_continue: None,
        }
    }

    fn with_target(mut self, target: Target) -> Self {
        self.target = Some(Box::new(target));
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    pub fn not_found(group_resource: &str, target: Target) -> Self {
        let message = format!("{group_resource} \"{}\" not found", target.name);
        Self::new(StatusCode::NOT_FOUND, "NotFound", message).with_target(target)
    }

    /// A path or resource that does not exist at all (not an object).
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn already_exists(group_resource: &str, target: Target) -> Self {
        let message = format!("{group_resource} \"{}\" already exists", target.name);
        Self::new(StatusCode::CONFLICT, "AlreadyExists", message).with_target(target)
    }

    /// Optimistic concurrency failure, worded as kube-apiserver words it.
    pub fn conflict(group_resource: &str, target: Target, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {group_resource} \"{}\": {why}",
            target.name
        );
        Self::new(StatusCode::CONFLICT, "Conflict", message).with_target(target)
    }

    /// A server-side apply that would change fields other managers own (kube's
    /// NewApplyConflict: the causes name each field and manager).
    pub fn apply_conflict(message: String) -> Self {
        Self::new(StatusCode::CONFLICT, "Conflict", message)
    }

    pub fn stale(group_resource: &str, target: Target) -> Self {
        Self::conflict(
            group_resource,
            target,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `422 Invalid` with one cause per field error.
    pub fn invalid(kind: &str, group: &'static str, name: &str, errors: &[FieldError]) -> Self {
        let list = errors.iter().map(ToString::to_string).collect::<Vec<_>>();
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let kind_group = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = format!("{kind_group} \"{name}\" is invalid: {joined}");
        let mut error = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message);
        error.target = Some(Box::new(Target {
            group,
            kind: kind.to_string(),
            name: name.to_string(),
        }));
        error.causes = errors
            .iter()
            .map(|e| json!({"reason": e.kind.reason(), "message": e.message(), "field": e.field()}))
            .collect();
        error
    }

    /// A JSON patch that cannot be applied to the object (kube-apiserver: 422).
    pub fn invalid_patch(why: String) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("the patch could not be applied: {why}"),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: String, target: Option<Target>) -> Self {
        let mut error = Self::new(StatusCode::FORBIDDEN, "Forbidden", message);
        error.target = target.map(Box::new);
        error
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            message,
        )
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_ACCEPTABLE, "NotAcceptable", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    }

    /// `429 Too Many Requests` with `Retry-After`: a serving limit (in-flight requests,
    /// watches) is reached; the client retries later.
    pub fn too_many_requests(message: impl Into<String>, retry_after: u32) -> Self {
        let mut error = Self::new(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", message);
        error.retry_after = Some(retry_after);
        error
    }

    /// `504 Gateway Timeout`: the request did not complete in time, as kube-apiserver
    /// answers past `--request-timeout`.
    pub fn timeout(message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::GATEWAY_TIMEOUT, "Timeout", message);
        error.retry_after = Some(1);
        error
    }

    /// `410 Gone`: a resourceVersion or continue token older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(StatusCode::GONE, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message);
        error.retry_after = Some(1);
        error
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        let mut error = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            message,
        );
        error.retry_after = Some(1);
        error
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if let Some(token) = &self.list_continue {
            status["metadata"] = json!({"continue": token});
        }
        let mut details = serde_json::Map::new();
        if let Some(target) = &self.target {
            if !target.name.is_empty() {
                details.insert("name".into(), json!(target.name));
            }
            if !target.group.is_empty() {
                details.insert("group".into(), json!(target.group));
            }
            if !target.kind.is_empty() {
                details.insert("kind".into(), json!(target.kind));
            }
        }
        if !self.causes.is_empty() {
            details.insert("causes".into(), json!(self.causes));
        }
        if let Some(seconds) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(seconds));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code.as_u16())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.to_status().to_string();
        let mut response = (
            self.code,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Some(seconds) = self.retry_after
            && let Ok(value) = http::HeaderValue::from_str(&seconds.to_string())
        {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, value);
        }
        response
    }
}

/// Success `Status`, e.g. for deleting a token.
pub fn success(message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "message": message, "code": 200})
}
