//! Discovery documents: `/version`, `/api`, `/apis`, our group and its resource list, and
//! `rbac.authorization.k8s.io/v1`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, State};
use axum::response::Response;
use axum::routing::{any, get};
use fedingress_api::rbac::{self, ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use fedingress_api::{Cluster, FederatedIngress, IngressClaim, IngressPool, Namespace, Resource};
use http::StatusCode;
use serde_json::{Value, json};

use crate::codec::json_response;

/// The entries our group's resource list adds for the subresources of the REST layer's
/// extensions, in a router's state (`FromRef`).
#[derive(Clone)]
pub struct ExtensionEntries(pub Arc<[Value]>);

/// `/version`, for any method and without authentication.
pub fn version_routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/version", any(|| document(version)))
}

/// The discovery documents (GET): `/api`, `/api/v1`, `/apis` and every group's.
pub fn routes<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    ExtensionEntries: FromRef<S>,
{
    let resources = |State(ExtensionEntries(entries)): State<ExtensionEntries>| async move {
        json_response(StatusCode::OK, &group_resources(entries.to_vec()))
    };
    Router::new()
        .route("/api", get(|| document(core_versions)))
        .route("/api/v1", get(|| document(core_resources)))
        .route("/apis", get(|| document(groups)))
        .route("/apis/fedingress.io", get(|| document(group_document)))
        .route("/apis/fedingress.io/v1alpha1", get(resources))
        .route(
            "/apis/rbac.authorization.k8s.io",
            get(|| document(rbac_group)),
        )
        .route(
            "/apis/rbac.authorization.k8s.io/v1",
            get(|| document(rbac_resources)),
        )
        .route(
            "/apis/authorization.k8s.io",
            get(|| document(authorization_group)),
        )
        .route(
            "/apis/authorization.k8s.io/v1",
            get(|| document(authorization_resources)),
        )
}

async fn document(build: fn() -> Value) -> Response {
    json_response(StatusCode::OK, &build())
}

/// The Kubernetes version we report. kubectl's dispatcher picks the kubectl binary that
/// matches `major.minor`; 1.32 is the newest our conventions follow.
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "32";

/// Verbs every served kind supports.
const VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
/// The verbs of the kinds that also serve deletecollection (all but Namespaces, as in
/// kube).
const COLLECTION_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];
/// `kubectl get fedingress` lists every kind of ours.
pub const CATEGORY: &str = "fedingress";

pub fn version() -> Value {
    json!({
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-fedingress.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
}

/// The core group: Events (the history of routing changes) and Namespaces, with the
/// verbs, short names and subresources kube-apiserver lists for them.
pub fn core_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "events",
                "singularName": "event",
                "namespaced": true,
                "kind": "Event",
                "verbs": COLLECTION_VERBS,
                "shortNames": ["ev"],
            },
            {
                "name": Namespace::PLURAL,
                "singularName": Namespace::SINGULAR,
                "namespaced": false,
                "kind": Namespace::KIND,
                "verbs": VERBS,
                "shortNames": Namespace::SHORT_NAMES,
            },
            {
                "name": "namespaces/finalize",
                "singularName": "",
                "namespaced": false,
                "kind": Namespace::KIND,
                "verbs": ["update"],
            },
            {
                "name": "namespaces/status",
                "singularName": "",
                "namespaced": false,
                "kind": Namespace::KIND,
                "verbs": STATUS_VERBS,
            },
        ],
    })
}

fn group() -> Value {
    let gv =
        json!({"groupVersion": fedingress_api::API_VERSION, "version": fedingress_api::VERSION});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": fedingress_api::GROUP,
        "versions": [gv.clone()],
        "preferredVersion": gv,
    })
}

pub fn groups() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group(), rbac_group(), authorization_group()]})
}

/// `authorization.k8s.io`: only SelfSubjectAccessReview (`kubectl auth can-i`) and
/// SelfSubjectRulesReview (`kubectl auth can-i --list`).
pub fn authorization_group() -> Value {
    let gv = json!({"groupVersion": "authorization.k8s.io/v1", "version": "v1"});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "authorization.k8s.io",
        "versions": [gv.clone()],
        "preferredVersion": gv,
    })
}

pub fn authorization_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "authorization.k8s.io/v1",
        "resources": [{
            "name": "selfsubjectaccessreviews",
            "singularName": "selfsubjectaccessreview",
            "namespaced": false,
            "kind": "SelfSubjectAccessReview",
            "verbs": ["create"],
        }, {
            "name": "selfsubjectrulesreviews",
            "singularName": "selfsubjectrulesreview",
            "namespaced": false,
            "kind": "SelfSubjectRulesReview",
            "verbs": ["create"],
        }],
    })
}

/// `rbac.authorization.k8s.io`: Roles, ClusterRoles and their bindings.
pub fn rbac_group() -> Value {
    let gv = json!({"groupVersion": format!("{}/{}", rbac::GROUP, rbac::VERSION), "version": rbac::VERSION});
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": rbac::GROUP,
        "versions": [gv.clone()],
        "preferredVersion": gv,
    })
}

fn rbac_entry<R: Resource>() -> Value {
    json!({
        "name": R::PLURAL,
        "singularName": R::SINGULAR,
        "namespaced": R::NAMESPACED,
        "kind": R::KIND,
        "verbs": COLLECTION_VERBS,
    })
}

pub fn rbac_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{}/{}", rbac::GROUP, rbac::VERSION),
        "resources": [
            rbac_entry::<ClusterRoleBinding>(),
            rbac_entry::<ClusterRole>(),
            rbac_entry::<RoleBinding>(),
            rbac_entry::<Role>(),
        ],
    })
}

pub fn group_document() -> Value {
    group()
}

fn resource_entries<R: Resource>() -> [Value; 2] {
    [
        json!({
            "name": R::PLURAL,
            "singularName": R::SINGULAR,
            "namespaced": R::NAMESPACED,
            "kind": R::KIND,
            "verbs": COLLECTION_VERBS,
            "shortNames": R::SHORT_NAMES,
            "categories": [CATEGORY],
        }),
        json!({
            "name": format!("{}/status", R::PLURAL),
            "singularName": "",
            "namespaced": R::NAMESPACED,
            "kind": R::KIND,
            "verbs": STATUS_VERBS,
        }),
    ]
}

/// The group's resources, then `extensions` (the entries of subresources served by the
/// REST layer's extensions).
pub fn group_resources(extensions: Vec<Value>) -> Value {
    let mut resources = Vec::new();
    resources.extend(resource_entries::<FederatedIngress>());
    resources.extend(resource_entries::<Cluster>());
    resources.extend(resource_entries::<IngressPool>());
    resources.extend(resource_entries::<IngressClaim>());
    resources.extend(extensions);
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": fedingress_api::API_VERSION,
        "resources": resources,
    })
}
