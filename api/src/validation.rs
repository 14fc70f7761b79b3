//! Field-path validation errors, shaped and printed like Kubernetes' `field.Error`.
//!
//! Validation in this crate never stops at the first problem: every validator returns a
//! `Vec<FieldError>`, each error naming the field it is about with a [`FieldPath`]
//! (`spec.rules[2].port`). The API server turns them into a `Status` of reason `Invalid`
//! whose `details.causes` come from [`FieldError::to_status_cause`], and whose message
//! comes from [`aggregate_message`].
//!
//! ```
//! use fedingress_api::validation::{FieldError, FieldPath};
//!
//! let path = FieldPath::new("spec").child("rules").index(2).child("port");
//! let err = FieldError::invalid(path, 70000, "must be between 1 and 65535");
//! assert_eq!(err.to_string(), "spec.rules[2].port: Invalid value: 70000: must be between 1 and 65535");
//! ```

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// The path of a field inside an object, e.g. `spec.rules[2].port` or
/// `spec.traffic.strategy.weights[eu-west]`.
///
/// Built from a root with [`child`](Self::child) (struct fields), [`index`](Self::index)
/// (list items) and [`key`](Self::key) (map entries). Every builder method returns a new
/// path and leaves `self` untouched, so a parent path can be reused for many children.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path starting at the field `root` (e.g. `"spec"` or `"metadata"`). An empty root
    /// gives an empty path whose first [`child`](Self::child) has no leading dot.
    pub fn new(root: impl Into<String>) -> Self {
        FieldPath(root.into())
    }

    /// The struct field `name` below this path: `spec` → `spec.rules`.
    #[must_use]
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            FieldPath(name.to_owned())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    /// The list item `index` below this path: `spec.rules` → `spec.rules[2]`.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        FieldPath(format!("{}[{index}]", self.0))
    }

    /// The map entry `key` below this path: `weights` → `weights[eu-west]`.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the empty path.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for FieldPath {
    fn from(path: &str) -> Self {
        FieldPath(path.to_owned())
    }
}

impl From<String> for FieldPath {
    fn from(path: String) -> Self {
        FieldPath(path)
    }
}

/// What is wrong with a field; mirrors Kubernetes' `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    /// A required field is missing or empty.
    Required,
    /// The value is malformed or out of range.
    Invalid,
    /// The value repeats one that must be unique.
    Duplicate,
    /// The value is not one of a fixed set of supported values.
    NotSupported,
    /// The field may not be set here (or in this combination).
    Forbidden,
    /// The value is longer than allowed.
    TooLong,
}

impl FieldErrorKind {
    /// The `reason` of a Kubernetes `StatusCause`, e.g. `FieldValueInvalid`.
    pub const fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
        }
    }

    /// The human-readable type as printed in messages, e.g. `Invalid value`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "Too long",
        }
    }

    /// Whether the offending value is part of the message (as in Kubernetes: not for
    /// Required, Forbidden and TooLong).
    const fn shows_value(self) -> bool {
        matches!(
            self,
            FieldErrorKind::Invalid | FieldErrorKind::Duplicate | FieldErrorKind::NotSupported
        )
    }
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validation problem: which field, what kind of problem, the offending value and a
/// detail for the user.
///
/// `Display` prints it exactly like Kubernetes' `field.Error`:
/// `spec.rules[0].protocol: Unsupported value: "SCTP": supported values: "HTTP", "TCP"`.
/// Values print as JSON (strings quoted, numbers bare).
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// The field the problem is about.
    pub path: FieldPath,
    /// What kind of problem it is.
    pub kind: FieldErrorKind,
    /// The offending value, when it helps the user (not printed for Required, Forbidden
    /// and TooLong).
    pub value: Option<Value>,
    /// What is wrong or what would be right; may be empty.
    pub detail: String,
}

impl FieldError {
    /// A malformed or out-of-range `value`.
    pub fn invalid(path: FieldPath, value: impl Serialize, detail: impl Into<String>) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Invalid,
            value: serde_json::to_value(value).ok(),
            detail: detail.into(),
        }
    }

    /// A missing required field.
    pub fn required(path: FieldPath, detail: impl Into<String>) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Required,
            value: None,
            detail: detail.into(),
        }
    }

    /// A `value` that repeats one that must be unique.
    pub fn duplicate(path: FieldPath, value: impl Serialize) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Duplicate,
            value: serde_json::to_value(value).ok(),
            detail: String::new(),
        }
    }

    /// A `value` outside the fixed set `supported`.
    pub fn not_supported(path: FieldPath, value: impl Serialize, supported: &[&str]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", quote_list(supported))
        };
        FieldError {
            path,
            kind: FieldErrorKind::NotSupported,
            value: serde_json::to_value(value).ok(),
            detail,
        }
    }

    /// A field that may not be set here.
    pub fn forbidden(path: FieldPath, detail: impl Into<String>) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::Forbidden,
            value: None,
            detail: detail.into(),
        }
    }

    /// A value longer than `max_len` bytes.
    pub fn too_long(path: FieldPath, max_len: usize) -> Self {
        FieldError {
            path,
            kind: FieldErrorKind::TooLong,
            value: None,
            detail: format!("may not be more than {max_len} bytes"),
        }
    }

    /// The path of the field, e.g. `spec.rules[2].port` (a `StatusCause`'s `field`).
    pub fn field(&self) -> String {
        self.path.to_string()
    }

    /// Everything after the path, e.g. `Invalid value: 70000: must be between 1 and 65535`
    /// (a `StatusCause`'s `message`; Kubernetes' `ErrorBody`).
    pub fn message(&self) -> String {
        let mut body = self.kind.as_str().to_owned();
        if self.kind.shows_value() {
            body.push_str(": ");
            match &self.value {
                Some(value) => body.push_str(&value.to_string()),
                None => body.push_str("null"),
            }
        }
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }

    /// The error as a Kubernetes `StatusCause`: `{"reason", "message", "field"}`.
    pub fn to_status_cause(&self) -> Value {
        serde_json::json!({
            "reason": self.kind.reason(),
            "message": self.message(),
            "field": self.field(),
        })
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message())
        } else {
            write!(f, "{}: {}", self.path, self.message())
        }
    }
}

impl std::error::Error for FieldError {}

/// Joins errors the way Kubernetes' aggregate error prints them: the one error alone, or
/// `[first, second, ...]`. The API server's `Invalid` message is
/// `<Kind>.<group> "<name>" is invalid: <aggregate_message>`.
pub fn aggregate_message(errors: &[FieldError]) -> String {
    match errors {
        [] => String::new(),
        [one] => one.to_string(),
        many => {
            let parts: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

/// `"a", "b", "c"`: each value JSON-quoted, comma separated.
pub(crate) fn quote_list(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| Value::from(*v).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_builder() {
        let spec = FieldPath::new("spec");
        assert_eq!(
            spec.child("rules").index(2).child("port").to_string(),
            "spec.rules[2].port"
        );
        assert_eq!(
            spec.child("traffic")
                .child("strategy")
                .child("weights")
                .key("eu-west")
                .to_string(),
            "spec.traffic.strategy.weights[eu-west]"
        );
        assert_eq!(
            spec.child("failoverOrder").index(1).index(0).as_str(),
            "spec.failoverOrder[1][0]"
        );
        assert_eq!(FieldPath::new("").child("spec").as_str(), "spec");
        // The parent is untouched.
        assert_eq!(spec.as_str(), "spec");
    }

    #[test]
    fn display_like_kubernetes() {
        let rules = FieldPath::new("spec").child("rules");
        assert_eq!(
            FieldError::invalid(
                rules.index(2).child("port"),
                70000,
                "must be between 1 and 65535"
            )
            .to_string(),
            "spec.rules[2].port: Invalid value: 70000: must be between 1 and 65535"
        );
        assert_eq!(
            FieldError::required(
                FieldPath::new("spec").child("traffic").child("dnsName"),
                "required when rules do not name exactly one host"
            )
            .to_string(),
            "spec.traffic.dnsName: Required value: required when rules do not name exactly one host"
        );
        assert_eq!(
            FieldError::duplicate(rules.index(3), "TCP/3306").to_string(),
            "spec.rules[3]: Duplicate value: \"TCP/3306\""
        );
        assert_eq!(
            FieldError::not_supported(
                rules.index(0).child("protocol"),
                "SCTP",
                &["HTTP", "HTTPS", "TLS", "TCP", "UDP"]
            )
            .to_string(),
            "spec.rules[0].protocol: Unsupported value: \"SCTP\": supported values: \"HTTP\", \"HTTPS\", \"TLS\", \"TCP\", \"UDP\""
        );
        assert_eq!(
            FieldError::forbidden(rules.index(1).child("backend"), "not allowed on HTTP rules")
                .to_string(),
            "spec.rules[1].backend: Forbidden: not allowed on HTTP rules"
        );
        assert_eq!(
            FieldError::too_long(FieldPath::new("metadata").child("annotations"), 262144)
                .to_string(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
    }

    #[test]
    fn field_message_and_cause() {
        let err = FieldError::invalid(FieldPath::new("spec").child("ttl"), 0, "must be positive");
        assert_eq!(err.field(), "spec.ttl");
        assert_eq!(err.message(), "Invalid value: 0: must be positive");
        assert_eq!(
            err.to_status_cause(),
            serde_json::json!({
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0: must be positive",
                "field": "spec.ttl",
            })
        );
        assert_eq!(FieldErrorKind::Required.reason(), "FieldValueRequired");
        assert_eq!(FieldErrorKind::Duplicate.reason(), "FieldValueDuplicate");
        assert_eq!(
            FieldErrorKind::NotSupported.reason(),
            "FieldValueNotSupported"
        );
        assert_eq!(FieldErrorKind::Forbidden.reason(), "FieldValueForbidden");
        assert_eq!(FieldErrorKind::TooLong.reason(), "FieldValueTooLong");
    }

    #[test]
    fn aggregate() {
        let a = FieldError::required(FieldPath::new("a"), "");
        let b = FieldError::invalid(FieldPath::new("b"), "x", "bad");
        assert_eq!(aggregate_message(&[]), "");
        assert_eq!(
            aggregate_message(std::slice::from_ref(&a)),
            "a: Required value"
        );
        assert_eq!(
            aggregate_message(&[a, b]),
            "[a: Required value, b: Invalid value: \"x\": bad]"
        );
    }
}
