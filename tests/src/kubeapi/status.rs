//! `Status` objects: the error (and delete-success) bodies kube-apiserver sends, with the
//! reasons, codes and message shapes kube-rs and client-go look at.

use serde_json::{Value, json};

use super::resources::ResourceType;

/// A failed request: HTTP code, `reason` and `message`, sent as a `Status` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, resource: &ResourceType, name: &str) -> Self {
        self.details = Some(details(resource, name));
        self
    }

    /// `services "web" not found`.
    pub fn not_found(resource: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.qualified_plural()),
        )
        .with_details(resource, name)
    }

    /// A path that names no known resource.
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// `services "web" already exists`.
    pub fn already_exists(resource: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", resource.qualified_plural()),
        )
        .with_details(resource, name)
    }

    /// The optimistic-concurrency failure of an update with a stale `resourceVersion`.
    pub fn conflict(resource: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                resource.qualified_plural()
            ),
        )
        .with_details(resource, name)
    }

    /// A server-side apply that would take fields another manager owns, without `force`.
    pub fn apply_conflict(
        resource: &ResourceType,
        name: &str,
        conflicts: &[(String, String)],
    ) -> Self {
        let list: Vec<String> = conflicts
            .iter()
            .map(|(manager, path)| format!("conflict with \"{manager}\": {path}"))
            .collect();
        let message = match list.as_slice() {
            [one] => format!("Apply failed with 1 conflict: {one}"),
            many => format!(
                "Apply failed with {} conflicts: {}",
                many.len(),
                many.join("\n")
            ),
        };
        Self::new(409, "Conflict", message).with_details(resource, name)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(resource: &ResourceType, name: &str, message: impl Into<String>) -> Self {
        Self::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {}",
                resource.qualified_plural(),
                message.into()
            ),
        )
        .with_details(resource, name)
    }

    /// 410 for a watch or continue token older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            ),
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn unavailable() -> Self {
        Self::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
    }

    /// kube-apiserver's RBAC denial, word for word.
    pub fn forbidden(
        resource: &ResourceType,
        rbac_resource: &str,
        verb: &str,
        user: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Self {
        let subject = match name {
            Some(name) => format!("{} \"{name}\"", resource.qualified_plural()),
            None => resource.qualified_plural(),
        };
        let scope = match namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        let mut error = Self::new(
            403,
            "Forbidden",
            format!(
                "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{rbac_resource}\" in API group \"{}\" {scope}",
                resource.group
            ),
        );
        error.details = Some(details(resource, name.unwrap_or_default()));
        error
    }

    /// The `Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

fn details(resource: &ResourceType, name: &str) -> Value {
    let mut details = json!({"kind": resource.plural});
    if !name.is_empty() {
        details["name"] = json!(name);
    }
    if !resource.group.is_empty() {
        details["group"] = json!(resource.group);
    }
    details
}

/// The `Status` a delete answers with when the object is gone at once.
pub fn delete_success(resource: &ResourceType, name: &str, uid: &Value) -> Value {
    let mut details = details(resource, name);
    details["uid"] = uid.clone();
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}
