//! `/api/v1/namespaces[/{name}[/status|/finalize]]`: Namespaces are served by the
//! generic verbs, with what kube-apiserver adds for them: the `finalize` subresource
//! (PUT: only `spec.finalizers` is taken from the body), and the refusal to delete the
//! immortal namespaces (NamespaceLifecycle admission: `default`, `kube-system`,
//! `kube-public`).

use axum::extract::Request;
use fedingress_api::namespace::Namespace;
use fedingress_api::{Resource, Time};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::layers::Reply;
use super::request::{Params, TargetPath, content_type, parse_dry_run, read_body, with_warnings};
use super::{AppState, json_response};
use crate::auth::User;
use crate::codec::{self, BodyFormat, FieldValidation};
use crate::registry::{self, Scope};
use crate::status::ApiError;
use crate::table::Printable;

/// The target of a namespaces URL below `/api/v1/`, or `None` for other resources
/// (`namespaces/{ns}/events...`). `namespaces/{name}/status` and `.../finalize` are
/// the Namespace's subresources, never a namespaced kind named `status`.
pub(super) fn target(rest: &str) -> Option<TargetPath> {
    let parts: Vec<&str> = rest.split('/').collect();
    let (name, subresource) = match parts.as_slice() {
        ["namespaces"] => (None, None),
        ["namespaces", name] if !name.is_empty() => (Some(*name), None),
        ["namespaces", name, sub @ ("status" | "finalize")] if !name.is_empty() => {
            (Some(*name), Some(*sub))
        }
        _ => return None,
    };
    Some(TargetPath {
        namespace: None,
        plural: Namespace::PLURAL.to_string(),
        name: name.map(String::from),
        subresource: subresource.map(String::from),
        subname: None,
    })
}

/// What only Namespaces have: `finalize`, and the refusal to delete the immortal
/// ones. Any other request is given back, for the generic verbs.
pub(super) async fn refuse_or_finalize(
    state: &AppState,
    user: &User,
    target: &TargetPath,
    request: Request,
) -> Result<Reply, Request> {
    let name = target.name.clone().unwrap_or_default();
    if target.subresource.as_deref() == Some("finalize") {
        let resource = format!("{}/finalize", Namespace::PLURAL);
        if request.method() != Method::PUT {
            return Ok(Reply::new(
                "",
                resource,
                Err(ApiError::method_not_allowed(
                    "only PUT (update) is served on finalize",
                )),
            ));
        }
        let result = finalize(state, user, &name, request).await;
        return Ok(Reply::new("update", resource, result));
    }
    if request.method() == Method::DELETE
        && target.subresource.is_none()
        && Namespace::is_immortal(&name)
    {
        // Admission runs after authorization: who may not delete it hears that first.
        let refused = authorize(state, user, "delete", "", &name).and_then(|()| {
            Err(ApiError::forbidden(
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
                Some(registry::target::<Namespace>(&name)),
            ))
        });
        return Ok(Reply::new("delete", Namespace::PLURAL, refused));
    }
    Err(request)
}

fn authorize(
    state: &AppState,
    user: &User,
    verb: &str,
    subresource: &str,
    name: &str,
) -> Result<(), ApiError> {
    crate::auth::authorize(
        &state.authorizer,
        &user.resource_attributes(verb, "", Namespace::PLURAL, subresource, "", name),
    )
    .map(|_| ())
}

/// PUT `namespaces/{name}/finalize`: `spec.finalizers` from the body, everything else
/// as stored (kube's finalize strategy). A resourceVersion in the body is a
/// precondition. While the namespace is not being deleted the `kubernetes` finalizer
/// stays (defaulting puts it back); once it is, removing the last finalizer removes the
/// namespace.
async fn finalize(
    state: &AppState,
    user: &User,
    name: &str,
    request: Request,
) -> Result<axum::response::Response, ApiError> {
    authorize(state, user, "update", "finalize", name)?;
    let params: Params = axum::extract::Query::<Params>::try_from_uri(request.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let dry_run = parse_dry_run(&params.dry_run)?;
    let validation = FieldValidation::parse(params.field_validation.as_deref())?;
    let (headers, body) = read_body(request).await?;
    let format = BodyFormat::from_content_type(content_type(&headers))?;
    let (wanted, warnings) =
        codec::decode::<Namespace>(codec::parse_body(&body, format)?, validation)?;
    if let Some(body_name) = wanted.metadata.name.as_deref()
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let updated = state
        .registry
        .update::<Namespace>(None, name, Scope::Main, dry_run, |current| {
            let mut next = current.clone();
            next.spec.finalizers = wanted.spec.finalizers.clone();
            next.metadata.resource_version = wanted.metadata.resource_version.clone();
            Ok(next)
        })
        .await?;
    tracing::info!(namespace = name, user = %user.name, finalizers = ?updated.spec.finalizers, "namespace finalize");
    Ok(with_warnings(
        json_response(
            StatusCode::OK,
            &serde_json::to_value(&updated).unwrap_or_default(),
        ),
        &warnings,
    ))
}

impl Printable for Namespace {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] =
        &[("Status", "string", "The status of the namespace")];

    fn cells(&self, _now: &Time) -> Vec<Value> {
        vec![json!(self.phase().as_str())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_urls_and_their_subresources() {
        let t = target("namespaces").unwrap();
        assert_eq!((t.name, t.subresource), (None, None));
        let t = target("namespaces/shop").unwrap();
        assert_eq!(t.name.as_deref(), Some("shop"));
        let t = target("namespaces/shop/finalize").unwrap();
        assert_eq!(t.subresource.as_deref(), Some("finalize"));
        let t = target("namespaces/shop/status").unwrap();
        assert_eq!(t.subresource.as_deref(), Some("status"));
        assert!(target("namespaces/shop/events").is_none());
        assert!(target("namespaces/shop/events/e1").is_none());
        assert!(target("namespaces//status").is_none());
        assert!(target("events").is_none());
    }

    #[test]
    fn only_namespace_is_the_namespace_kind() {
        use super::super::request::is_namespace;
        assert!(is_namespace::<Namespace>());
        assert!(!is_namespace::<fedingress_api::event::Event>());
        assert!(!is_namespace::<fedingress_api::Cluster>());
    }
}
