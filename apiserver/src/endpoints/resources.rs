//! The object routes: one per group-version, `{*rest}` below it parsed once into a
//! [`TargetPath`] (kube's URL grammar is ambiguous to a router: `namespaces/{name}/status`
//! is a Namespace's subresource, `namespaces/{ns}/events` a namespaced kind; and a
//! malformed path's 404 names the path below the group-version), then the kind, then the
//! verb ([`verbs`](super::verbs)). Extension subresources are served by their handlers.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::routing::any;
use axum::{Extension, Router};
use fedingress_api::event::Event;
use fedingress_api::namespace::Namespace;
use fedingress_api::rbac::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use fedingress_api::{Cluster, FederatedIngress, IngressClaim, IngressPool, Resource};
use http::{Method, StatusCode};

use super::extensions::SubresourceRequest;
use super::layers::{Reply, requested_uri};
use super::request::{TargetPath, content_type, parse_params, parse_target, read_body};
use super::verbs::{self, Verb};
use super::{AppState, json_response, namespaces};
use crate::auth::User;
use crate::codec::{self, BodyFormat};
use crate::status::ApiError;
use crate::table::Printable;

const CORE: &str = "/api/v1/";
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1/";
const FEDINGRESS: &str = "/apis/fedingress.io/v1alpha1/";
const REVIEW: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const RULES_REVIEW: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";

/// The object routes (authenticated, the store answering), any method.
pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(&format!("{CORE}{{*rest}}"), any(core))
        .route(&format!("{RBAC}{{*rest}}"), any(rbac))
        .route(&format!("{FEDINGRESS}{{*rest}}"), any(fedingress))
        .route(REVIEW, any(review))
        .route(RULES_REVIEW, any(rules_review))
}

/// The path below `prefix`, parsed; `None` with the reply when it does not parse.
fn target_of(state: &AppState, request: &Request, prefix: &str) -> Result<TargetPath, Reply> {
    let rest = request
        .uri()
        .path()
        .strip_prefix(prefix)
        .unwrap_or_default();
    parse_target(rest, |sub| state.extensions.is_named(sub)).map_err(Reply::refused)
}

fn no_route(request: &Request) -> Reply {
    Reply::refused(ApiError::no_route(request.uri().path()))
}

/// `/api/v1/`: Namespaces and Events.
async fn core(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Reply {
    let rest = request.uri().path().strip_prefix(CORE).unwrap_or_default();
    if let Some(target) = namespaces::target(rest) {
        return match namespaces::refuse_or_finalize(&state, &user, &target, request).await {
            Ok(reply) => reply,
            Err(request) => serve::<Namespace>(&state, &user, target, request).await,
        };
    }
    let target = match target_of(&state, &request, CORE) {
        Ok(target) => target,
        Err(reply) => return reply,
    };
    if target.plural != Event::PLURAL || target.subresource.is_some() {
        return no_route(&request);
    }
    serve::<Event>(&state, &user, target, request).await
}

/// `/apis/rbac.authorization.k8s.io/v1/`: Roles, ClusterRoles and their bindings.
async fn rbac(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Reply {
    let target = match target_of(&state, &request, RBAC) {
        Ok(target) => target,
        Err(reply) => return reply,
    };
    if target.subresource.is_some() {
        return no_route(&request);
    }
    match target.plural.as_str() {
        p if p == Role::PLURAL => serve::<Role>(&state, &user, target, request).await,
        p if p == ClusterRole::PLURAL => serve::<ClusterRole>(&state, &user, target, request).await,
        p if p == RoleBinding::PLURAL => serve::<RoleBinding>(&state, &user, target, request).await,
        p if p == ClusterRoleBinding::PLURAL => {
            serve::<ClusterRoleBinding>(&state, &user, target, request).await
        }
        _ => no_route(&request),
    }
}

/// `/apis/fedingress.io/v1alpha1/`: FederatedIngresses, Clusters, IngressPools,
/// IngressClaims and the extensions' subresources.
async fn fedingress(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Reply {
    let target = match target_of(&state, &request, FEDINGRESS) {
        Ok(target) => target,
        Err(reply) => return reply,
    };
    if let Some(subresource) = state.extensions.find(fedingress_api::GROUP, &target) {
        let resource = format!("{}/{}", subresource.plural, subresource.name);
        let served = subresource
            .serve(SubresourceRequest {
                state: state.clone(),
                user,
                target,
                method: request.method().clone(),
                uri: requested_uri(&request),
            })
            .await;
        return Reply::new(served.verb, resource, served.result);
    }
    match target.plural.as_str() {
        p if p == FederatedIngress::PLURAL => {
            serve::<FederatedIngress>(&state, &user, target, request).await
        }
        p if p == Cluster::PLURAL => serve::<Cluster>(&state, &user, target, request).await,
        p if p == IngressPool::PLURAL => serve::<IngressPool>(&state, &user, target, request).await,
        p if p == IngressClaim::PLURAL => {
            serve::<IngressClaim>(&state, &user, target, request).await
        }
        _ => no_route(&request),
    }
}

/// Serves one request on kind `R`: its query and verb, then the verb's handler.
pub(super) async fn serve<R: Printable>(
    state: &AppState,
    user: &User,
    target: TargetPath,
    request: Request,
) -> Reply {
    let resource = match &target.subresource {
        Some(sub) => format!("{}/{sub}", R::PLURAL),
        None => R::PLURAL.to_string(),
    };
    let params = match parse_params(request.uri()) {
        Ok(params) => params,
        Err(e) => return Reply::new("", resource, Err(e)),
    };
    let verb = match Verb::of(request.method(), &target, &params) {
        Ok(verb) => verb,
        Err(e) => return Reply::new("", resource, Err(e)),
    };
    let result = verbs::serve::<R>(state, user, &target, verb, params, request).await;
    Reply::new(verb.name(), resource, result)
}

/// `selfsubjectaccessreviews` (POST only): may the user do this?
async fn review(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Reply {
    serve_review(
        "selfsubjectaccessreviews",
        request,
        crate::protobuf::decode_access_review,
        |body| crate::auth::review::answer(&state.authorizer, &user, body),
    )
    .await
}

/// `selfsubjectrulesreviews` (POST only): what may the user do in a namespace?
async fn rules_review(
    State(state): State<Arc<AppState>>,
    Extension(user): Extension<User>,
    request: Request,
) -> Reply {
    serve_review(
        "selfsubjectrulesreviews",
        request,
        crate::protobuf::decode_rules_review,
        |body| crate::auth::review::rules(&state.authorizer, &user, body),
    )
    .await
}

/// A review: created (POST) only, its body JSON, YAML or (from kubectl's typed client)
/// protobuf, answered as JSON.
async fn serve_review(
    resource: &'static str,
    request: Request,
    decode_protobuf: fn(&[u8]) -> Result<serde_json::Value, ApiError>,
    answer: impl FnOnce(serde_json::Value) -> Result<serde_json::Value, ApiError>,
) -> Reply {
    if request.method() != Method::POST {
        return Reply::new(
            "",
            resource,
            Err(ApiError::method_not_allowed("only POST (create) is served")),
        );
    }
    let answer = async {
        let (headers, body) = read_body(request).await?;
        let value = if codec::media_type(content_type(&headers)) == crate::protobuf::MEDIA_TYPE {
            decode_protobuf(&body)
        } else {
            BodyFormat::from_content_type(content_type(&headers))
                .and_then(|format| codec::parse_body(&body, format))
        }?;
        Ok(json_response(StatusCode::CREATED, &answer(value)?))
    };
    Reply::new("create", resource, answer.await)
}
