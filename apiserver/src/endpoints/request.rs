//! What a resource request says: its URL ([`TargetPath`]), its query ([`Params`]) and
//! its body (read with a size cap, decoded by media type), parsed once for the verbs.

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use fedingress_api::Resource;
use http::{HeaderMap, HeaderValue, header};
use serde::Deserialize;

use super::MAX_BODY_BYTES;
use crate::codec::{self, BodyFormat, FieldValidation};
use crate::registry::DeletePreconditions;
use crate::status::ApiError;

/// Whether `R` is the Namespace kind (kubectl treats it as built-in: its typed client
/// sends protobuf, its client-side apply a strategic merge patch).
pub(super) fn is_namespace<R: Resource>() -> bool {
    R::GROUP.is_empty() && R::KIND == fedingress_api::namespace::Namespace::KIND
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

/// Parses the path below a group-version; `named` says which subresources have names of
/// their own.
pub(super) fn parse_target(
    rest: &str,
    named: impl Fn(&str) -> bool,
) -> Result<TargetPath, ApiError> {
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
        [plural, name, sub, id] if named(sub) => (
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
pub(super) struct Params {
    pub(super) field_manager: Option<String>,
    pub(super) force: Option<String>,
    pub(super) label_selector: Option<String>,
    pub(super) field_selector: Option<String>,
    pub(super) limit: Option<String>,
    #[serde(rename = "continue")]
    pub(super) continue_token: Option<String>,
    pub(super) resource_version: Option<String>,
    pub(super) resource_version_match: Option<String>,
    pub(super) send_initial_events: Option<String>,
    pub(super) watch: Option<String>,
    pub(super) allow_watch_bookmarks: Option<String>,
    pub(super) timeout_seconds: Option<String>,
    pub(super) field_validation: Option<String>,
    pub(super) dry_run: Option<String>,
    pub(super) include_object: Option<String>,
}

/// The query parameters of a resource request. A parameter given twice counts once, by
/// its first value (Go's `url.Values.Get`, as kube-apiserver reads them); a query that
/// still does not parse is a 400, never ignored: a deletecollection whose selectors were
/// dropped would delete everything.
pub(super) fn parse_params(uri: &http::Uri) -> Result<Params, ApiError> {
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

pub(super) fn flag(value: &Option<String>) -> bool {
    matches!(value.as_deref(), Some("true" | "1"))
}

pub(super) fn parse_dry_run(value: &Option<String>) -> Result<bool, ApiError> {
    match value.as_deref() {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
        ))),
    }
}

/// Whether the client asked for a `meta.k8s.io` Table.
pub(super) fn wants_table(headers: &HeaderMap) -> bool {
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

/// Bodies up to this size are read to the end even when too large, so the client gets
/// the 413 instead of a broken pipe; past it the connection is dropped.
const DRAIN_LIMIT: usize = 64 * 1024 * 1024;

pub(super) async fn read_body(request: Request) -> Result<(HeaderMap, Bytes), ApiError> {
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

pub(super) fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
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

/// The field manager of a write: `fieldManager`, required for apply, otherwise the
/// User-Agent's product (kube's defaults and checks).
pub(super) fn write_manager(
    params: &Params,
    headers: &HeaderMap,
    applying: bool,
) -> Result<String, ApiError> {
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
pub(super) async fn decode_write<R: Resource>(
    params: &Params,
    request: Request,
) -> Result<(R, Vec<String>, bool), ApiError> {
    let dry_run = parse_dry_run(&params.dry_run)?;
    let validation = FieldValidation::parse(params.field_validation.as_deref())?;
    let (headers, body) = read_body(request).await?;
    // kubectl's typed clients send the RBAC kinds as protobuf.
    let value = if (R::GROUP == fedingress_api::rbac::GROUP || is_namespace::<R>())
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
pub(super) async fn read_delete_options(
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
pub(super) struct DeleteOptions {
    pub(super) preconditions: Option<DeletePreconditions>,
    #[serde(default)]
    pub(super) dry_run: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn parses_resource_paths() {
        let parse_target = |rest| parse_target(rest, |_| false);
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
}
