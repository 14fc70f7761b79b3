//! `PATCH` with `application/apply-patch+yaml`: server-side apply over HTTP. The request
//! is checked here (as kube-apiserver checks it); the merge, ownership and conflicts are
//! [`Registry::apply`]'s.

use axum::response::Response;
use fedingress_api::{Resource, Time};
use http::StatusCode;
use serde_json::Value;

use super::json_response;
use super::request::{Params, content_type, flag, parse_dry_run, with_warnings};
use crate::codec::{self, BodyFormat, FieldValidation};
use crate::registry::{Apply, Registry, Scope};
use crate::status::ApiError;

/// The media types of a server-side apply.
pub const APPLY_YAML: &str = "application/apply-patch+yaml";
const APPLY_CBOR: &str = "application/apply-patch+cbor";

/// Whether a PATCH is a server-side apply.
pub fn is_apply(headers: &http::HeaderMap) -> bool {
    let media = codec::media_type(content_type(headers));
    media == APPLY_YAML || media == APPLY_CBOR
}

/// Serves one apply on `name` by `registry`'s manager.
#[allow(clippy::too_many_arguments, clippy::result_large_err)]
pub async fn serve<R: Resource>(
    registry: &Registry,
    namespace: Option<&str>,
    name: &str,
    scope: Scope,
    params: &Params,
    headers: &http::HeaderMap,
    body: &[u8],
    now: Time,
    check: impl Fn(Option<&R>, &R) -> Result<(), ApiError>,
) -> Result<Response, ApiError> {
    if codec::media_type(content_type(headers)) == APPLY_CBOR {
        return Err(ApiError::unsupported_media_type(format!(
            "{APPLY_CBOR} is not supported; send the configuration as {APPLY_YAML} (YAML or JSON)"
        )));
    }
    let config = codec::parse_body(body, BodyFormat::Yaml)?;
    check_config::<R>(&config, namespace, name)?;
    let applied = registry
        .apply_checked::<R>(
            Apply {
                namespace,
                name,
                scope,
                config,
                force: flag(&params.force),
                validation: FieldValidation::parse(params.field_validation.as_deref())?,
                dry_run: parse_dry_run(&params.dry_run)?,
                now,
            },
            check,
        )
        .await?;
    let code = if applied.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(with_warnings(
        json_response(
            code,
            &serde_json::to_value(&applied.object).unwrap_or_default(),
        ),
        &applied.warnings,
    ))
}

/// What kube-apiserver requires of an applied configuration: an object of this kind and
/// version, named as the URL names it, without managedFields.
#[allow(clippy::result_large_err)]
fn check_config<R: Resource>(
    config: &Value,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    let Some(object) = config.as_object() else {
        return Err(ApiError::bad_request(
            "an applied configuration must be an object",
        ));
    };
    let text = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    if text("apiVersion").is_empty() || text("kind").is_empty() {
        return Err(ApiError::bad_request(format!(
            "an applied configuration must set apiVersion and kind ({} and {})",
            R::api_version(),
            R::KIND
        )));
    }
    let meta = |field: &str| config.pointer(&format!("/metadata/{field}"));
    if meta("managedFields").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    if let Some(body_name) = meta("name").and_then(Value::as_str)
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if let (Some(body), Some(url)) = (meta("namespace").and_then(Value::as_str), namespace)
        && body != url
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::FederatedIngress;
    use serde_json::json;

    #[test]
    fn configurations_are_checked_like_kube() {
        let ok = json!({"apiVersion": "fedingress.io/v1alpha1", "kind": "FederatedIngress", "metadata": {"name": "a"}});
        assert!(check_config::<FederatedIngress>(&ok, Some("default"), "a").is_ok());
        let mut managed = ok.clone();
        managed["metadata"]["managedFields"] = json!([]);
        let error = check_config::<FederatedIngress>(&managed, Some("default"), "a").unwrap_err();
        assert_eq!(error.message, "metadata.managedFields must be nil");
        let error = check_config::<FederatedIngress>(&ok, Some("default"), "b").unwrap_err();
        assert!(error.message.contains("does not match the name on the URL"));
        let error =
            check_config::<FederatedIngress>(&json!({"metadata": {}}), None, "a").unwrap_err();
        assert!(error.message.contains("apiVersion and kind"));
    }
}
