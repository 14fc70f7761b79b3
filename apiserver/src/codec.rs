//! Request body decoding: JSON or YAML into typed objects, unknown fields handled per the
//! `fieldValidation` parameter, decode errors with the field path that failed.

use fedingress_api::Resource;
use serde_json::Value;

use crate::status::ApiError;

/// What to do with fields the schema does not know (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and tell the client in a `Warning` header (kube-apiserver's default).
    #[default]
    Warn,
    /// Reject the request.
    Strict,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Warn") => Ok(Self::Warn),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
            ))),
        }
    }
}

/// The body formats a write accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Json,
    Yaml,
}

impl BodyFormat {
    /// From a `Content-Type` header (missing means JSON, as kube-apiserver assumes).
    pub fn from_content_type(content_type: Option<&str>) -> Result<Self, ApiError> {
        match media_type(content_type).as_str() {
            "" | "application/json" | "*/*" => Ok(Self::Json),
            "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(Self::Yaml),
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format ({other}) - accepted media types include: application/json, application/yaml"
            ))),
        }
    }
}

/// The lower-case media type of a `Content-Type` header, without parameters.
/// A JSON response with `code`.
pub fn json_response(code: http::StatusCode, value: &Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

pub fn media_type(content_type: Option<&str>) -> String {
    content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Deepest YAML nesting accepted (serde_json's own limit for JSON is 128).
pub const MAX_YAML_NESTING: usize = 128;

/// Whether a YAML text nests flow collections (`[`, `{`) or compact block sequences
/// (`- - -` on one line) deeper than `limit`: an O(n) scan, before the parser.
/// Indentation-nested blocks need a column per level and stay within the body cap.
fn yaml_nesting_exceeds(body: &[u8], limit: usize) -> bool {
    let mut flow = 0usize;
    let mut quote: Option<u8> = None;
    for line in body.split(|b| *b == b'\n') {
        let mut dashes = 0usize;
        let mut rest = line;
        loop {
            let trimmed = rest.trim_ascii_start();
            match trimmed {
                [b'-', b' ' | b'\t', tail @ ..] => {
                    dashes += 1;
                    rest = tail;
                }
                _ => break,
            }
        }
        if dashes > limit {
            return true;
        }
        for &byte in line {
            match (quote, byte) {
                (Some(q), b) if b == q => quote = None,
                (Some(_), _) => {}
                (None, b'"' | b'\'') => quote = Some(byte),
                (None, b'#') if flow == 0 => break,
                (None, b'[' | b'{') => {
                    flow += 1;
                    if flow > limit {
                        return true;
                    }
                }
                (None, b']' | b'}') => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
    }
    false
}

/// Parses a request body into a JSON value.
pub fn parse_body(body: &[u8], format: BodyFormat) -> Result<Value, ApiError> {
    let value: Value = match format {
        BodyFormat::Json => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode request body as JSON: {e}"))
        })?,
        BodyFormat::Yaml => {
            // The YAML parser reads every event before the deserializer's recursion
            // limit applies: 100,000 nested `[` cost seconds of CPU on an executor thread.
            if yaml_nesting_exceeds(body, MAX_YAML_NESTING) {
                return Err(ApiError::bad_request(format!(
                    "couldn't decode request body as YAML: nested deeper than {MAX_YAML_NESTING} levels"
                )));
            }
            yaml_serde::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("couldn't decode request body as YAML: {e}"))
            })?
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be an object (a JSON or YAML mapping)",
        ));
    }
    Ok(value)
}

/// Checks `apiVersion` and `kind` of a body (filling them in when absent).
fn check_type<R: Resource>(value: &mut Value) -> Result<(), ApiError> {
    let Some(object) = value.as_object_mut() else {
        return Err(ApiError::bad_request("the request body must be an object"));
    };
    match object.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != R::api_version() => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                R::api_version()
            )));
        }
        _ => {}
    }
    match object.get("kind").and_then(Value::as_str) {
        Some(k) if k != R::KIND => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                R::KIND
            )));
        }
        _ => {}
    }
    object.insert("apiVersion".into(), Value::from(R::api_version()));
    object.insert("kind".into(), Value::from(R::KIND));
    Ok(())
}

/// Decodes `value` into `R`. Returns the object and the warnings to send back.
pub fn decode<R: Resource>(
    mut value: Value,
    validation: FieldValidation,
) -> Result<(R, Vec<String>), ApiError> {
    check_type::<R>(&mut value)?;
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(format_ignored_path(&path));
    let deserializer = serde_ignored::Deserializer::new(value, &mut record);
    let object: R = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." || path.is_empty() {
            String::new()
        } else {
            format!("{path}: ")
        };
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {at}{inner}",
            kind = R::KIND,
            version = R::VERSION,
            inner = e.inner()
        ))
    })?;
    let messages: Vec<String> = unknown
        .iter()
        .map(|field| format!("unknown field \"{field}\""))
        .collect();
    match validation {
        FieldValidation::Strict if !messages.is_empty() => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.join(", ")
        ))),
        FieldValidation::Warn => Ok((object, messages)),
        _ => Ok((object, Vec::new())),
    }
}

/// `spec.rules[0].foo` from serde_ignored's path.
fn format_ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", format_ignored_path(parent)),
        Path::Map { parent, key } => {
            let parent = format_ignored_path(parent);
            if parent.is_empty() {
                key.to_string()
            } else {
                format!("{parent}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => format_ignored_path(parent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::Cluster;
    use serde_json::json;

    fn cluster(extra: Value) -> Value {
        let mut value = json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "eu-west"},
            "spec": {"region": "europe-west1", "location": {"latitude": 50.0, "longitude": 3.0}}
        });
        if let (Some(target), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
            target.extend(extra.clone());
        }
        value
    }

    #[test]
    fn unknown_fields_follow_field_validation() {
        let body = cluster(json!({"bogus": 1}));
        let (_, warnings) = decode::<Cluster>(body.clone(), FieldValidation::Warn).unwrap();
        assert_eq!(warnings, vec!["unknown field \"spec.bogus\""]);
        let (_, warnings) = decode::<Cluster>(body.clone(), FieldValidation::Ignore).unwrap();
        assert!(warnings.is_empty());
        let err = decode::<Cluster>(body, FieldValidation::Strict).unwrap_err();
        assert_eq!(
            err.message,
            "strict decoding error: unknown field \"spec.bogus\""
        );
    }

    #[test]
    fn type_errors_name_the_field() {
        let body = cluster(json!({"location": {"latitude": "north", "longitude": 3.0}}));
        let err = decode::<Cluster>(body, FieldValidation::Strict).unwrap_err();
        assert!(
            err.message.contains("spec.location.latitude"),
            "{}",
            err.message
        );
    }

    #[test]
    fn wrong_kind_or_group_is_rejected() {
        let mut body = cluster(json!({}));
        body["kind"] = json!("FederatedIngress");
        assert!(decode::<Cluster>(body, FieldValidation::Warn).is_err());
        let mut body = cluster(json!({}));
        body["apiVersion"] = json!("apps/v1");
        assert!(decode::<Cluster>(body, FieldValidation::Warn).is_err());
    }

    #[test]
    fn body_formats() {
        assert_eq!(
            BodyFormat::from_content_type(None).unwrap(),
            BodyFormat::Json
        );
        assert_eq!(
            BodyFormat::from_content_type(Some("application/yaml; charset=utf-8")).unwrap(),
            BodyFormat::Yaml
        );
        assert!(
            BodyFormat::from_content_type(Some("application/vnd.kubernetes.protobuf")).is_err()
        );
        assert!(parse_body(b"{not json", BodyFormat::Json).is_err());
        assert!(parse_body(b"[1,2]", BodyFormat::Json).is_err());
        assert!(parse_body(b"a: [", BodyFormat::Yaml).is_err());
        let deep = "[".repeat(100_000);
        let error = parse_body(deep.as_bytes(), BodyFormat::Yaml).unwrap_err();
        assert!(error.message.contains("nested deeper than 128"), "{error}");
        let dashes = "- ".repeat(1000);
        assert!(parse_body(dashes.as_bytes(), BodyFormat::Yaml).is_err());
        let fine = "a: [[1, 2], {b: \"[[[[\"}]\nc:\n- - x\n";
        assert!(parse_body(fine.as_bytes(), BodyFormat::Yaml).is_ok());
        assert!(parse_body(b"a: 1", BodyFormat::Yaml).is_ok());
    }
}
