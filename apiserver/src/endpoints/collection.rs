//! `DELETE` on a collection URL (verb `deletecollection`): the matching objects
//! (labelSelector, fieldSelector) deleted one by one; the answer is the list kind of the
//! deleted objects, as kube-apiserver's.

use axum::extract::Request;
use axum::response::Response;
use fedingress_api::Time;
use http::StatusCode;
use serde_json::json;

use super::json_response;
use super::request::{Params, read_delete_options};
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
    let (options, dry_run) = read_delete_options(params, request).await?;
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
