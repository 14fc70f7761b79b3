//! `DELETE` on a collection URL (verb `deletecollection`): the matching objects
//! (labelSelector, fieldSelector) deleted one by one; the answer is the list kind of the
//! deleted objects, as kube-apiserver's.

use axum::extract::Request;
use axum::response::Response;
use fedingress_api::Time;
use http::StatusCode;
use serde_json::json;

use super::{DeleteOptions, Params, content_type, json_response, parse_dry_run, read_body};
use crate::codec::{self, BodyFormat};
use crate::registry::{Filter, Registry};
use crate::status::ApiError;
use crate::table::Printable;

/// Serves a deletecollection of kind `R` in `namespace` (`None` for a cluster-scoped
/// kind); the caller has authorized the verb. Namespaces: 405, as kube.
pub(super) async fn serve<R: Printable>(
    registry: &Registry,
    namespace: Option<&str>,
    params: &Params,
    request: Request,
    now: Time,
) -> Result<Response, ApiError> {
    // kube serves no deletecollection on Namespaces (deleting every namespace, and so
    // everything in them, is one request too easy to send).
    if R::KIND == "Namespace" {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource (DELETE)",
        ));
    }
    let filter = Filter::parse::<R>(
        params.label_selector.as_deref(),
        params.field_selector.as_deref(),
    )?;
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
    let deleted = registry
        .delete_collection::<R>(
            namespace,
            &filter,
            &options.preconditions.unwrap_or_default(),
            now,
            dry_run,
        )
        .await?;
    let body = json!({
        "kind": R::LIST_KIND,
        "apiVersion": R::api_version(),
        "metadata": {"resourceVersion": deleted.resource_version.to_string()},
        "items": deleted.items,
    });
    Ok(json_response(StatusCode::OK, &body))
}
