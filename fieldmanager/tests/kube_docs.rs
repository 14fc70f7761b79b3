//! Golden sequences from the Kubernetes documentation page "Server-Side Apply"
//! (https://kubernetes.io/docs/reference/using-api/server-side-apply/), replayed through
//! the field manager. Each test names the section it reproduces; the expected objects
//! and managedFields are in `tests/golden/`, written from the page's examples with the
//! times fixed by each `Request`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use fedingress_fieldmanager::{Applied, ApplyError, Managed, Request, Schema, apply, update};
use serde_json::{Value, json};

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn golden(name: &str) -> Value {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

/// Equal as JSON and in key order (managedFields order and FieldsV1 order matter).
fn assert_golden(name: &str, actual: &Value) {
    let expected = golden(name);
    assert_eq!(
        serde_json::to_string_pretty(actual).unwrap(),
        serde_json::to_string_pretty(&expected).unwrap(),
        "golden {name}"
    );
}

fn metadata_schema() -> Value {
    json!({"type": "object", "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"}, "uid": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}})
}

/// A ConfigMap's merge schema, as kube's OpenAPI has it.
fn configmap() -> Schema {
    Schema::from_openapi(&json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": metadata_schema(),
        "data": {"type": "object", "additionalProperties": {"type": "string"}}}}))
    .unwrap()
}

/// A Deployment's merge schema, reduced to the fields of the page's example. The
/// selector is atomic as in kube's LabelSelector; container ports are keyed by
/// containerPort only (kube also keys them by protocol, whose default this crate does
/// not apply to keys).
fn deployment() -> Schema {
    let ports = json!({"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["containerPort"],
        "items": {"type": "object", "properties": {
            "containerPort": {"type": "integer"}, "protocol": {"type": "string"}}}});
    let containers = json!({"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "image": {"type": "string"}, "ports": ports}}});
    let template = json!({"type": "object", "properties": {
        "metadata": metadata_schema(),
        "spec": {"type": "object", "properties": {"containers": containers}}}});
    let spec = json!({"type": "object", "properties": {
        "replicas": {"type": "integer"},
        "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "template": template}});
    Schema::from_openapi(&json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": metadata_schema(),
        "spec": spec,
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}))
    .unwrap()
}

fn req<'a>(manager: &'a str, api_version: &'a str, now: &'a str) -> Request<'a> {
    Request {
        manager,
        api_version,
        subresource: None,
        now,
    }
}

/// The stored object after a write: what the server keeps (with a uid, as a created
/// object has).
fn stored(applied: &Applied) -> Value {
    let mut o = applied.object.clone();
    o["metadata"]["uid"] = json!("7d2f0c1e");
    o
}

fn managed_of(object: &Value) -> Managed {
    Managed::decode(&object["metadata"]["managedFields"]).unwrap()
}

/// The page's ConfigMap (section "Field management").
fn test_cm(key: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
           "data": {"key": key}})
}

/// Section "Field management": applying the example ConfigMap with kubectl gives the
/// managedFields the page shows (fieldsV1 `f:metadata.f:labels.f:test-label` and
/// `f:data.f:key`), in kube's encoding order.
#[test]
fn field_management_configmap_example() {
    let out = apply(
        &configmap(),
        None,
        &test_cm("some value"),
        Managed::default(),
        &req("kubectl", "v1", "2010-10-10T00:00:00Z"),
        false,
    )
    .unwrap();
    assert!(out.changed);
    assert_golden("configmap_field_management.json", &out.object);
}

/// Section "Conflicts" (and "Managers"): a second applier changing a field kubectl owns
/// gets a conflict; with force it takes the field over, and then kubectl conflicts.
#[test]
fn conflicts_between_two_appliers_and_force() {
    let s = configmap();
    let first = apply(
        &s,
        None,
        &test_cm("some value"),
        Managed::default(),
        &req("kubectl", "v1", "2010-10-10T00:00:00Z"),
        false,
    )
    .unwrap();
    let live = stored(&first);
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm", "namespace": "default"}, "data": {"key": "other value"}});
    let r = req("other-applier", "v1", "2010-10-10T00:05:00Z");
    let Err(ApplyError::Conflicts(conflicts)) =
        apply(&s, Some(&live), &other, managed_of(&live), &r, false)
    else {
        panic!("expected a conflict");
    };
    let forced = apply(&s, Some(&live), &other, managed_of(&live), &r, true).unwrap();
    let live = stored(&forced);
    let Err(ApplyError::Conflicts(back)) = apply(
        &s,
        Some(&live),
        &test_cm("some value"),
        managed_of(&live),
        &req("kubectl", "v1", "2010-10-10T00:10:00Z"),
        false,
    ) else {
        panic!("expected a conflict");
    };
    assert_golden(
        "conflicts.json",
        &json!({"conflict": conflicts.message(), "forced": forced.object, "kubectl_after_force": back.message()}),
    );
}

/// Section "Transferring ownership": kubectl applies nginx-deployment with replicas 3,
/// the temporary manager `handover-to-hpa` applies only `replicas: 3` (shared, no change,
/// so kube records no time for it), kubectl applies the manifest without replicas (the
/// field stays: handover-to-hpa still owns it), then the HPA controller sets replicas
/// through the scale subresource and the temporary manager, owning nothing, disappears.
#[test]
fn transferring_ownership_to_an_autoscaler() {
    let s = deployment();
    let manifest = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}]}}}});
    let created = apply(
        &s,
        None,
        &manifest,
        Managed::default(),
        &req("kubectl", "apps/v1", "2026-11-24T11:00:00Z"),
        false,
    )
    .unwrap();
    let live = stored(&created);

    let replicas_only = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx-deployment"}, "spec": {"replicas": 3}});
    let handover = apply(
        &s,
        Some(&live),
        &replicas_only,
        managed_of(&live),
        &req("handover-to-hpa", "apps/v1", "2026-11-24T11:01:00Z"),
        false,
    )
    .unwrap();
    assert!(!handover.changed);
    let live = stored(&handover);

    let mut no_replicas = manifest.clone();
    no_replicas["spec"]
        .as_object_mut()
        .unwrap()
        .shift_remove("replicas");
    let dropped = apply(
        &s,
        Some(&live),
        &no_replicas,
        managed_of(&live),
        &req("kubectl", "apps/v1", "2026-11-24T11:02:00Z"),
        false,
    )
    .unwrap();
    assert_eq!(dropped.object["spec"]["replicas"], json!(3));
    let live = stored(&dropped);

    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(5);
    let hpa = Request {
        subresource: Some("scale"),
        ..req("kube-controller-manager", "apps/v1", "2026-11-24T11:03:00Z")
    };
    let managed = update(&s, Some(&live), &scaled, managed_of(&live), &hpa);
    assert_golden(
        "transferring_ownership.json",
        &json!({"after_handover": handover.object["metadata"]["managedFields"],
                "after_kubectl_drops_replicas": dropped.object["metadata"]["managedFields"],
                "after_hpa_scales": managed.encode()}),
    );
}

/// Section "Merge strategy"/"Managers": two appliers setting a field to the same value
/// share it without conflict; any later change by one of them conflicts with the other.
#[test]
fn shared_ownership_of_the_same_value() {
    let s = configmap();
    let first = apply(
        &s,
        None,
        &test_cm("some value"),
        Managed::default(),
        &req("kubectl", "v1", "2010-10-10T00:00:00Z"),
        false,
    )
    .unwrap();
    let live = stored(&first);
    let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm", "namespace": "default"}, "data": {"key": "some value"}});
    let shared = apply(
        &s,
        Some(&live),
        &same,
        managed_of(&live),
        &req("other-applier", "v1", "2010-10-10T00:05:00Z"),
        false,
    )
    .unwrap();
    assert!(!shared.changed);
    let live = stored(&shared);
    let Err(ApplyError::Conflicts(c)) = apply(
        &s,
        Some(&live),
        &test_cm("changed"),
        managed_of(&live),
        &req("kubectl", "v1", "2010-10-10T00:10:00Z"),
        false,
    ) else {
        panic!("expected a conflict");
    };
    assert_golden(
        "shared_ownership.json",
        &json!({"managedFields": shared.object["metadata"]["managedFields"], "kubectl_changes_it": c.message()}),
    );
}

/// Section "Field management" (removing a field from a manifest): a field the applier
/// stops applying is deleted only when no other manager owns it.
#[test]
fn a_manager_stops_applying_fields() {
    let s = configmap();
    let mut cfg = test_cm("some value");
    cfg["data"]["extra"] = json!("x");
    let first = apply(
        &s,
        None,
        &cfg,
        Managed::default(),
        &req("kubectl", "v1", "2010-10-10T00:00:00Z"),
        false,
    )
    .unwrap();
    let live = stored(&first);
    let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm", "namespace": "default"}, "data": {"key": "some value"}});
    let shared = apply(
        &s,
        Some(&live),
        &same,
        managed_of(&live),
        &req("other-applier", "v1", "2010-10-10T00:05:00Z"),
        false,
    )
    .unwrap();
    let live = stored(&shared);
    let without_data = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}}});
    let out = apply(
        &s,
        Some(&live),
        &without_data,
        managed_of(&live),
        &req("kubectl", "v1", "2010-10-10T00:10:00Z"),
        false,
    )
    .unwrap();
    assert_golden("stop_applying.json", &out.object);
}

/// Section "Upgrading from client-side apply to server-side apply": an object created by
/// client-side `kubectl apply` (manager kubectl-client-side-apply, last-applied
/// annotation) is applied server-side by kubectl with a changed value: field management
/// transfers without conflicts, and the annotation follows the new configuration. A
/// field the annotation does not list still conflicts.
#[test]
fn upgrading_from_client_side_apply() {
    let s = configmap();
    let annotation = "{\"apiVersion\":\"v1\",\"data\":{\"key\":\"some value\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{},\"labels\":{\"test-label\":\"test\"},\"name\":\"test-cm\",\"namespace\":\"default\"}}\n";
    let mut created = test_cm("some value");
    created["metadata"]["annotations"] = json!({LAST_APPLIED: annotation});
    let managed = update(
        &s,
        None,
        &created,
        Managed::default(),
        &req("kubectl-client-side-apply", "v1", "2010-10-10T00:00:00Z"),
    );
    let mut live = created.clone();
    live["metadata"]["uid"] = json!("7d2f0c1e");
    live["metadata"]["managedFields"] = managed.encode();

    let out = apply(
        &s,
        Some(&live),
        &test_cm("new value"),
        managed_of(&live),
        &req("kubectl", "v1", "2010-10-10T00:05:00Z"),
        false,
    )
    .unwrap();

    let mut extra = test_cm("some value");
    extra["metadata"]["annotations"] = json!({"note": "new"});
    let mut live_with_note = live.clone();
    live_with_note["metadata"]["annotations"]["note"] = json!("old");
    let mut with_note = managed.clone();
    with_note = update(
        &s,
        Some(&live),
        &live_with_note,
        with_note,
        &req("someone", "v1", "2010-10-10T00:01:00Z"),
    );
    let Err(ApplyError::Conflicts(c)) = apply(
        &s,
        Some(&live_with_note),
        &extra,
        with_note,
        &req("kubectl", "v1", "2010-10-10T00:05:00Z"),
        false,
    ) else {
        panic!("expected a conflict");
    };
    assert_golden(
        "client_side_upgrade.json",
        &json!({"object": out.object, "field_not_in_annotation": c.message()}),
    );
}
