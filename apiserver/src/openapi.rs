//! OpenAPI v3 documents (`/openapi/v3` and the group-version document) built from the
//! Rust types' schemas, so `kubectl apply` validates on the server (fieldValidation)
//! and `kubectl explain` prints the field docs.

use std::sync::LazyLock;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use fedingress_api::rbac;
use fedingress_api::{Cluster, FederatedIngress, IngressClaim, IngressPool, Namespace, Resource};
use http::{StatusCode, header};
use serde_json::{Map, Value, json};

/// The documents, encoded once (when the router is built).
static GROUP_DOCUMENT: LazyLock<Bytes> =
    LazyLock::new(|| Bytes::from(group_version_document().to_string()));
static RBAC_DOCUMENT: LazyLock<Bytes> = LazyLock::new(|| Bytes::from(rbac_document().to_string()));

/// `/openapi/v3` (GET): the index and the group-version documents.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    LazyLock::force(&GROUP_DOCUMENT);
    LazyLock::force(&RBAC_DOCUMENT);
    Router::new()
        .route(
            "/openapi/v3",
            get(|| async {
                let index = index(
                    &content_hash(&GROUP_DOCUMENT),
                    &content_hash(&RBAC_DOCUMENT),
                );
                crate::codec::json_response(StatusCode::OK, &index)
            }),
        )
        .route(
            &format!("/openapi/v3/{CORE_GROUP_VERSION_PATH}"),
            get(|| async { immutable(core_document_bytes()) }),
        )
        .route(
            &format!("/openapi/v3/{RBAC_GROUP_VERSION_PATH}"),
            get(|| async { immutable(&RBAC_DOCUMENT) }),
        )
        .route(
            &format!("/openapi/v3/{GROUP_VERSION_PATH}"),
            get(|| async { immutable(&GROUP_DOCUMENT) }),
        )
}

/// A group-version document: addressed by its hash, so cached for good.
fn immutable(document: &Bytes) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "public, immutable"),
        ],
        document.clone(),
    )
        .into_response()
}

/// Path of the group-version document, relative to `/openapi/v3/`.
pub const GROUP_VERSION_PATH: &str = "apis/fedingress.io/v1alpha1";

/// Path of the RBAC group-version document, relative to `/openapi/v3/`.
pub const RBAC_GROUP_VERSION_PATH: &str = "apis/rbac.authorization.k8s.io/v1";

/// Path of the core group's document (Namespaces), relative to `/openapi/v3/`.
pub const CORE_GROUP_VERSION_PATH: &str = "api/v1";

/// Whether `kind` (or its list) is a core/v1 kind described here (Namespace).
fn is_core(kind: &str) -> bool {
    kind.strip_prefix(Namespace::KIND)
        .is_some_and(|rest| rest.is_empty() || rest == "List")
}

/// Whether `kind` (or its list) is one of the `rbac.authorization.k8s.io` kinds: kind
/// names are unique across the groups we serve.
fn is_rbac(kind: &str) -> bool {
    [
        rbac::Role::KIND,
        rbac::ClusterRole::KIND,
        rbac::RoleBinding::KIND,
        rbac::ClusterRoleBinding::KIND,
    ]
    .iter()
    .any(|k| {
        kind.strip_prefix(k)
            .is_some_and(|rest| rest.is_empty() || rest == "List")
    })
}

fn schema_name(kind: &str) -> String {
    if is_core(kind) {
        format!("io.k8s.api.core.v1.{kind}")
    } else if is_rbac(kind) {
        format!("io.k8s.api.rbac.v1.{kind}")
    } else {
        format!("io.fedingress.{}.{kind}", fedingress_api::VERSION)
    }
}

fn schema_ref(kind: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{}", schema_name(kind))})
}

fn gvk(kind: &str) -> Value {
    if is_core(kind) {
        json!({"group": "", "version": "v1", "kind": kind})
    } else if is_rbac(kind) {
        json!({"group": rbac::GROUP, "version": rbac::VERSION, "kind": kind})
    } else {
        json!({"group": fedingress_api::GROUP, "version": fedingress_api::VERSION, "kind": kind})
    }
}

/// The schema of a kind, every subschema inlined (kubectl's explain walks properties).
pub(crate) fn kind_schema<R: Resource>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<R>().to_value();
    unwrap_descriptions(&mut schema);
    drop_null_from_enums(&mut schema);
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
        object.remove("components");
        object.remove("$defs");
        object.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([gvk(R::KIND)]),
        );
    }
    schema
}

/// schemars lets an `Option` of an enum also be `null` by adding `null` to its `enum`
/// (beside `nullable: true`); kube's schemas never list it, and `kubectl explain` shows it
/// as `<no value>`. An absent optional field is what `nullable` already says.
fn drop_null_from_enums(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    Value::Array(items) if key == "enum" => items.retain(|item| !item.is_null()),
                    _ => drop_null_from_enums(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null_from_enums),
        _ => {}
    }
}

/// Doc comments arrive hard-wrapped: join wrapped lines so kubectl can wrap them itself,
/// keeping paragraph breaks and list items.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    Value::String(text) if key == "description" => *text = unwrap_text(text),
                    _ => unwrap_descriptions(child),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

fn unwrap_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        out.push_str(line.trim_end());
        if let Some(next) = lines.peek() {
            let next = next.trim_start();
            let keep_break = line.trim().is_empty() || next.is_empty() || next.starts_with("- ");
            out.push(if keep_break { '\n' } else { ' ' });
        }
    }
    out
}

fn list_schema<R: Resource>() -> Value {
    json!({
        "description": format!("{} is a list of {}.", R::LIST_KIND, R::KIND),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
            "metadata": {"type": "object", "description": "Standard list metadata: resourceVersion and continue."},
            "items": {"type": "array", "items": schema_ref(R::KIND)},
        },
        "x-kubernetes-group-version-kind": [gvk(R::LIST_KIND)],
    })
}

fn query(name: &str, description: &str, kind: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": kind, "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        query(
            "dryRun",
            "When present (All), the request is validated but not persisted.",
            "string",
        ),
        query(
            "fieldManager",
            "A name for the actor making the change.",
            "string",
        ),
        query(
            "fieldValidation",
            "How unknown fields in the body are handled: Ignore, Warn (default) or Strict.",
            "string",
        ),
    ]
}

fn list_params() -> Vec<Value> {
    vec![
        query(
            "allowWatchBookmarks",
            "Ask for BOOKMARK events in a watch.",
            "boolean",
        ),
        query(
            "continue",
            "The continue token of the previous page.",
            "string",
        ),
        query(
            "fieldSelector",
            "metadata.name and metadata.namespace, with =, == or !=.",
            "string",
        ),
        query("labelSelector", "A Kubernetes label selector.", "string"),
        query("limit", "Maximum number of items in one page.", "integer"),
        query(
            "resourceVersion",
            "List: unset = most recent, 0 = any, N = not older than N (or exactly N, see resourceVersionMatch). Watch: changes after N.",
            "string",
        ),
        query(
            "resourceVersionMatch",
            "How resourceVersion applies to a list: Exact or NotOlderThan; NotOlderThan with sendInitialEvents for a watch-list.",
            "string",
        ),
        query(
            "sendInitialEvents",
            "Watch-list: ADDED events for the current state, then a BOOKMARK annotated k8s.io/initial-events-end (needs resourceVersionMatch=NotOlderThan and allowWatchBookmarks).",
            "boolean",
        ),
        query(
            "timeoutSeconds",
            "Timeout of a list or watch call.",
            "integer",
        ),
        query("watch", "Stream changes instead of listing.", "boolean"),
    ]
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn response(schema: Value) -> Value {
    json!({"description": "OK", "content": {"application/json": {"schema": schema}}})
}

fn operation(
    action: &str,
    verb_id: &str,
    kind: &str,
    description: String,
    params: Vec<Value>,
    body: Option<Value>,
    result: Value,
) -> Value {
    let (infix, tag) = if is_core(kind) {
        ("CoreV1", "core_v1")
    } else if is_rbac(kind) {
        ("RbacAuthorizationV1", "rbacAuthorization_v1")
    } else {
        ("FedingressIoV1alpha1", "fedingressIo_v1alpha1")
    };
    let mut op = json!({
        "operationId": format!("{verb_id}{infix}{kind}"),
        "description": description,
        "tags": [tag],
        "parameters": params,
        "responses": {"200": response(result)},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(kind),
    });
    if let Some(body) = body {
        op["requestBody"] = body;
    }
    op
}

fn json_body(kind: &str) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": schema_ref(kind)}, "application/yaml": {"schema": schema_ref(kind)}}})
}

fn patch_body() -> Value {
    // No strategic merge patch: kubectl apply then falls back to JSON merge patch, as
    // it does for custom resources.
    json!({"required": true, "content": {
        "application/json-patch+json": {"schema": {"type": "object"}},
        "application/merge-patch+json": {"schema": {"type": "object"}},
    }})
}

fn add_paths<R: Resource>(paths: &mut Map<String, Value>) {
    let kind = R::KIND;
    let base = api_base::<R>();
    let (collection, mut scope_params) = if R::NAMESPACED {
        (
            format!("{base}/namespaces/{{namespace}}/{}", R::PLURAL),
            vec![path_param("namespace")],
        )
    } else {
        (format!("{base}/{}", R::PLURAL), Vec::new())
    };
    let list = format!("list {} objects", kind);
    let mut collection_item = json!({
        "get": operation("list", "list", kind, list.clone(), list_params(), None, schema_ref(R::LIST_KIND)),
        "post": operation("post", "create", kind, format!("create a {kind}"), write_params(), Some(json_body(kind)), schema_ref(kind)),
        "parameters": scope_params.clone(),
    });
    if let Some(p) = collection_item["parameters"].as_array_mut() {
        p.extend(write_params());
    }
    // Every kind but Namespace serves deletecollection, as in kube.
    if kind != "Namespace" {
        let mut params = list_params();
        params.retain(|p| matches!(p["name"].as_str(), Some("labelSelector" | "fieldSelector")));
        collection_item["delete"] = operation(
            "deletecollection",
            "deleteCollection",
            kind,
            format!("delete collection of {kind}"),
            params,
            None,
            schema_ref(R::LIST_KIND),
        );
    }
    paths.insert(collection.clone(), collection_item);
    if R::NAMESPACED {
        paths.insert(
            format!("{base}/{}", R::PLURAL),
            json!({"get": operation("list", "listAllNamespaces", kind, list, list_params(), None, schema_ref(R::LIST_KIND)), "parameters": []}),
        );
    }
    scope_params.push(path_param("name"));
    let mut item_params = scope_params.clone();
    item_params.extend(write_params());
    let delete_params = vec![query(
        "dryRun",
        "When present (All), nothing is deleted.",
        "string",
    )];
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({
            "get": operation("get", "read", kind, format!("read the specified {kind}"), vec![], None, schema_ref(kind)),
            "put": operation("put", "replace", kind, format!("replace the specified {kind}"), write_params(), Some(json_body(kind)), schema_ref(kind)),
            "patch": operation("patch", "patch", kind, format!("partially update the specified {kind}"), write_params(), Some(patch_body()), schema_ref(kind)),
            "delete": operation("delete", "delete", kind, format!("delete a {kind}"), delete_params, None, schema_ref(kind)),
            "parameters": item_params.clone(),
        }),
    );
    if is_rbac(kind) {
        return;
    }
    paths.insert(
        format!("{collection}/{{name}}/status"),
        json!({
            "get": operation("get", "readStatus", kind, format!("read status of the specified {kind}"), vec![], None, schema_ref(kind)),
            "put": operation("put", "replaceStatus", kind, format!("replace status of the specified {kind}"), write_params(), Some(json_body(kind)), schema_ref(kind)),
            "patch": operation("patch", "patchStatus", kind, format!("partially update status of the specified {kind}"), write_params(), Some(patch_body()), schema_ref(kind)),
            "parameters": item_params,
        }),
    );
}

/// Where a kind's group-version is served: `/api/v1` for the core group, else
/// `/apis/{group}/{version}`.
pub(crate) fn api_base<R: Resource>() -> String {
    if R::GROUP.is_empty() {
        format!("/api/{}", R::VERSION)
    } else {
        format!("/apis/{}", R::api_version())
    }
}

/// The core group's document: Namespaces (`kubectl explain ns`).
pub fn core_document() -> Value {
    let mut paths = Map::new();
    add_paths::<Namespace>(&mut paths);
    let mut schemas = Map::new();
    schemas.insert(schema_name(Namespace::KIND), kind_schema::<Namespace>());
    schemas.insert(
        schema_name(Namespace::LIST_KIND),
        list_schema::<Namespace>(),
    );
    json!({
        "openapi": "3.0.0",
        "info": {"title": "fedingress", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// [`core_document`], encoded once.
pub fn core_document_bytes() -> &'static bytes::Bytes {
    static DOCUMENT: std::sync::LazyLock<bytes::Bytes> =
        std::sync::LazyLock::new(|| bytes::Bytes::from(core_document().to_string()));
    &DOCUMENT
}

/// The group-version document.
pub fn group_version_document() -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    fn add<R: Resource>(paths: &mut Map<String, Value>, schemas: &mut Map<String, Value>) {
        add_paths::<R>(paths);
        schemas.insert(schema_name(R::KIND), kind_schema::<R>());
        schemas.insert(schema_name(R::LIST_KIND), list_schema::<R>());
    }
    add::<FederatedIngress>(&mut paths, &mut schemas);
    add::<Cluster>(&mut paths, &mut schemas);
    add::<IngressPool>(&mut paths, &mut schemas);
    add::<IngressClaim>(&mut paths, &mut schemas);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "fedingress", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// The `rbac.authorization.k8s.io/v1` group-version document.
pub fn rbac_document() -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    fn add<R: Resource>(paths: &mut Map<String, Value>, schemas: &mut Map<String, Value>) {
        add_paths::<R>(paths);
        schemas.insert(schema_name(R::KIND), kind_schema::<R>());
        schemas.insert(schema_name(R::LIST_KIND), list_schema::<R>());
    }
    add::<rbac::Role>(&mut paths, &mut schemas);
    add::<rbac::ClusterRole>(&mut paths, &mut schemas);
    add::<rbac::RoleBinding>(&mut paths, &mut schemas);
    add::<rbac::ClusterRoleBinding>(&mut paths, &mut schemas);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "fedingress", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// The `/openapi/v3` index; `hash` and `rbac_hash` are the group-version documents'
/// content hashes.
pub fn index(hash: &str, rbac_hash: &str) -> Value {
    json!({"paths": {
        GROUP_VERSION_PATH: {"serverRelativeURL": format!("/openapi/v3/{GROUP_VERSION_PATH}?hash={hash}")},
        RBAC_GROUP_VERSION_PATH: {"serverRelativeURL": format!("/openapi/v3/{RBAC_GROUP_VERSION_PATH}?hash={rbac_hash}")},
        CORE_GROUP_VERSION_PATH: {"serverRelativeURL": format!("/openapi/v3/{CORE_GROUP_VERSION_PATH}?hash={}", content_hash(core_document_bytes()))},
    }})
}

/// A stable content hash (FNV-1a, hex) for the index's cache-busting parameter.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016X}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_patch_operation_carries_field_validation_and_gvk() {
        let doc = group_version_document();
        let mut patches = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            if let Some(patch) = item.get("patch") {
                patches += 1;
                assert!(
                    patch["x-kubernetes-group-version-kind"]["kind"].is_string(),
                    "{path}"
                );
                let names: Vec<&str> = patch["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["name"].as_str().unwrap())
                    .collect();
                assert!(names.contains(&"fieldValidation"), "{path}");
                assert!(
                    patch["requestBody"]["content"]
                        .get("application/strategic-merge-patch+json")
                        .is_none()
                );
            }
        }
        // Each kind's object and status: FederatedIngress, Cluster, IngressPool,
        // IngressClaim.
        assert_eq!(patches, 8);
    }

    /// Every `enum` in every published schema, with its JSON pointer.
    fn enums<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a Vec<Value>)>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    match child {
                        Value::Array(items) if key == "enum" => out.push((at.clone(), items)),
                        _ => enums(child, format!("{at}/{key}"), out),
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    enums(item, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    /// `kubectl explain federatedingress.spec.rules.tlsMode` showed `enum: Terminate,
    /// Passthrough, <no value>`: an optional enum's schema listed `null` (issue 23).
    #[test]
    fn no_published_enum_lists_null() {
        let mut found = Vec::new();
        let documents = [core_document(), group_version_document(), rbac_document()];
        for document in &documents {
            enums(document, String::new(), &mut found);
        }
        let tls_mode = "/components/schemas/io.fedingress.v1alpha1.FederatedIngress/properties/spec/properties/rules/items/properties/tlsMode";
        let (_, values) = found
            .iter()
            .find(|(at, _)| at == tls_mode)
            .unwrap_or_else(|| panic!("no enum at {tls_mode}"));
        assert_eq!(**values, [json!("Terminate"), json!("Passthrough")]);
        for (at, values) in &found {
            assert!(!values.iter().any(Value::is_null), "{at}: {values:?}");
        }
    }

    #[test]
    fn schemas_are_inline_and_carry_gvk() {
        let doc = group_version_document();
        let schema = &doc["components"]["schemas"]["io.fedingress.v1alpha1.FederatedIngress"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            "FederatedIngress"
        );
        let text = schema.to_string();
        assert!(!text.contains("$ref"), "subschemas must be inlined");
        assert!(schema["properties"]["spec"]["properties"]["rules"]["description"].is_string());
    }
}
