//! IngressPools and IngressClaims served like Clusters and FederatedIngresses
//! (discovery, CRUD, status, tables, field selectors, server-side apply), and pool
//! admission: each conflict refused with its field path.

use fedingress_store::{Precondition, Store};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::lists::App;

const POOLS: &str = "/apis/fedingress.io/v1alpha1/ingresspools";
const CLAIMS: &str = "/apis/fedingress.io/v1alpha1/namespaces/default/ingressclaims";
const CLUSTERS: &str = "/apis/fedingress.io/v1alpha1/clusters";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn pool(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "IngressPool",
        "metadata": {"name": name, "labels": {"tier": "gold"}},
        "spec": spec,
    })
}

fn cluster(name: &str, vip_cidr: Option<&str>) -> Value {
    let mut cluster = json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {"region": "europe-west1", "location": {"latitude": 50.45, "longitude": 3.82}},
    });
    if let Some(cidr) = vip_cidr {
        cluster["spec"]["vipCIDR"] = json!(cidr);
    }
    cluster
}

fn claim(name: &str, ingresses: &[&str]) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "IngressClaim",
        "metadata": {"name": name},
        "spec": {"ingresses": ingresses, "template": {"labels": {"tier": "gold"}}, "reclaimPolicy": "Retain"},
    })
}

/// A request with its content type and accept header.
async fn send(
    app: &App,
    method: Method,
    uri: &str,
    content_type: &str,
    accept: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = App::request(method, uri, body);
    let headers = request.headers_mut();
    headers.insert("content-type", content_type.parse().unwrap());
    headers.insert("accept", accept.parse().unwrap());
    let response = app.router.clone().oneshot(request).await.unwrap();
    let code = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn created(app: &App, uri: &str, body: Value) -> Value {
    let (code, value) = app.call(Method::POST, uri, Some(body)).await;
    assert_eq!(code, StatusCode::CREATED, "POST {uri}: {value}");
    value
}

/// The `(field, message)` of each cause of a 422.
fn causes(code: StatusCode, status: &Value) -> Vec<(String, String)> {
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{status}");
    assert_eq!(status["reason"], "Invalid", "{status}");
    status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The causes of refusing to create pool `name` with `spec`.
async fn refused(app: &App, name: &str, spec: Value) -> Vec<(String, String)> {
    let (code, status) = app.call(Method::POST, POOLS, Some(pool(name, spec))).await;
    causes(code, &status)
}

fn header_of(table: &Value) -> Vec<(String, i64)> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn discovery_lists_both_kinds_with_short_names_and_status() {
    let app = App::start().await;
    let (code, list) = app
        .call(Method::GET, "/apis/fedingress.io/v1alpha1", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    let entry = |name: &str| -> Value {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {list}"))
            .clone()
    };
    let pools = entry("ingresspools");
    assert_eq!(
        (&pools["kind"], &pools["namespaced"], &pools["shortNames"]),
        (&json!("IngressPool"), &json!(false), &json!(["ipool"]))
    );
    assert_eq!(pools["categories"], json!(["fedingress"]));
    let claims = entry("ingressclaims");
    assert_eq!(
        (
            &claims["kind"],
            &claims["namespaced"],
            &claims["shortNames"]
        ),
        (&json!("IngressClaim"), &json!(true), &json!(["iclaim"]))
    );
    assert_eq!(
        entry("ingresspools/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    assert_eq!(
        entry("ingressclaims/status")["verbs"],
        json!(["get", "patch", "update"])
    );
    // The OpenAPI v3 document describes both (kubectl explain and fieldValidation).
    let (code, doc) = app
        .call(Method::GET, "/openapi/v3/apis/fedingress.io/v1alpha1", None)
        .await;
    assert_eq!(code, StatusCode::OK);
    let schemas = &doc["components"]["schemas"];
    assert!(
        schemas["io.fedingress.v1alpha1.IngressPool"]["properties"]["spec"]["properties"]["vipCIDR"]
            ["description"]
            .is_string()
    );
    assert!(schemas["io.fedingress.v1alpha1.IngressClaimList"].is_object());
    assert!(
        doc["paths"]["/apis/fedingress.io/v1alpha1/namespaces/{namespace}/ingressclaims/{name}/status"]
            ["patch"]
            .is_object()
    );
}

#[tokio::test]
async fn pools_are_created_read_listed_selected_printed_and_deleted() {
    let app = App::start().await;
    created(&app, CLUSTERS, cluster("eu-west", Some("10.0.0.0/24"))).await;
    let a = created(
        &app,
        POOLS,
        pool(
            "a",
            json!({"cluster": "eu-west", "memberSelector": {"matchLabels": {"rack": "r1"}}}),
        ),
    )
    .await;
    assert_eq!(a["spec"]["vipCount"], 1, "defaulted: {a}");
    assert_eq!(a["metadata"]["generation"], 1);
    // A pool whose Cluster does not exist yet is accepted.
    created(&app, POOLS, pool("later", json!({"cluster": "us-east"}))).await;

    let (code, got) = app.call(Method::GET, &format!("{POOLS}/a"), None).await;
    assert_eq!(
        (code, &got["spec"]["cluster"]),
        (StatusCode::OK, &json!("eu-west"))
    );
    let (_, list) = app.call(Method::GET, POOLS, None).await;
    assert_eq!(list["kind"], "IngressPoolList");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let (code, selected) = app
        .call(
            Method::GET,
            &format!("{POOLS}?fieldSelector=spec.cluster%3Dus-east"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{selected}");
    let names: Vec<&str> = selected["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["later"]);

    // The hub writes status through the subresource; the main resource keeps it.
    let mut status = got.clone();
    status["status"] = json!({
        "phase": "Available", "vips": ["10.0.0.1"], "vipCIDR": "10.0.0.0/24",
        "virtualRouterId": 3, "memberCount": 2, "readyMembers": 1, "vipHolder": "m1",
        "boundShares": 4, "load": {"utilization": 0.25},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Held", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    });
    let (code, written) = app
        .call(Method::PUT, &format!("{POOLS}/a/status"), Some(status))
        .await;
    assert_eq!(code, StatusCode::OK, "{written}");
    assert_eq!(written["status"]["vips"], json!(["10.0.0.1"]));
    assert_eq!(written["metadata"]["generation"], 1, "status is not spec");

    let (code, table) = send(&app, Method::GET, POOLS, "application/json", TABLE, None).await;
    assert_eq!(code, StatusCode::OK, "{table}");
    let header = header_of(&table);
    let columns: Vec<(&str, i64)> = header.iter().map(|(n, p)| (n.as_str(), *p)).collect();
    assert_eq!(
        columns,
        [
            ("Name", 0),
            ("Cluster", 0),
            ("VIPs", 0),
            ("Ready", 0),
            ("Members", 0),
            ("Shares", 0),
            ("Utilization", 0),
            ("Age", 0),
            ("VIP Holder", 1),
            ("CIDR", 1),
            ("VRID", 1),
            ("Selector", 1),
        ]
    );
    let row = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(
        row[..7],
        json!(["a", "eu-west", "10.0.0.1", "True", "1/2", 4, "25%"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(
        row[8..],
        json!(["m1", "10.0.0.0/24", "3", "rack=r1"])
            .as_array()
            .unwrap()[..]
    );
    let later = table["rows"][1]["cells"].as_array().unwrap();
    assert_eq!(
        later[..7],
        json!([
            "later",
            "us-east",
            "<none>",
            "Unknown",
            "0/0",
            0,
            "<unknown>"
        ])
        .as_array()
        .unwrap()[..]
    );
    assert_eq!(
        later[8..],
        json!(["<none>", "<none>", "<none>", "<all>"])
            .as_array()
            .unwrap()[..]
    );

    let (code, _) = app.call(Method::DELETE, &format!("{POOLS}/a"), None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = app.call(Method::GET, &format!("{POOLS}/a"), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn claims_are_namespaced_may_name_absent_ingresses_and_print() {
    let app = App::start().await;
    // `web` does not exist: a claim may come before its ingresses.
    let shop = created(&app, CLAIMS, claim("shop", &["web"])).await;
    assert_eq!(shop["metadata"]["namespace"], "default");
    assert_eq!(shop["spec"]["template"]["replicas"], 2, "defaulted: {shop}");
    let (code, status) = app
        .call(Method::POST, CLAIMS, Some(claim("empty", &[])))
        .await;
    let found = causes(code, &status);
    assert_eq!(found[0].0, "spec.ingresses", "{found:?}");
    // Cluster-scoped URLs do not serve a namespaced kind's objects.
    let (code, _) = app
        .call(
            Method::GET,
            "/apis/fedingress.io/v1alpha1/ingressclaims/shop",
            None,
        )
        .await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, all) = app
        .call(
            Method::GET,
            "/apis/fedingress.io/v1alpha1/ingressclaims",
            None,
        )
        .await;
    assert_eq!(
        (code, all["items"].as_array().unwrap().len()),
        (StatusCode::OK, 1)
    );

    let mut bound = shop.clone();
    bound["status"] = json!({"phase": "Bound", "clusters": [
        {"cluster": "eu-west", "pool": "shop-eu-west", "provisioned": true},
        {"cluster": "us-east", "message": "no free pool labelled tier=gold"},
    ]});
    let (code, written) = app
        .call(Method::PUT, &format!("{CLAIMS}/shop/status"), Some(bound))
        .await;
    assert_eq!(code, StatusCode::OK, "{written}");
    let (code, table) = send(&app, Method::GET, CLAIMS, "application/json", TABLE, None).await;
    assert_eq!(code, StatusCode::OK, "{table}");
    let header: Vec<String> = header_of(&table).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        header,
        [
            "Name",
            "Phase",
            "Ingresses",
            "Pools",
            "Reclaim",
            "Age",
            "Replicas",
            "Pending"
        ]
    );
    let row = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(
        row[..5],
        json!(["shop", "Bound", "web", "eu-west/shop-eu-west", "Retain"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(row[6..], json!([2, "us-east"]).as_array().unwrap()[..]);
}

#[tokio::test]
async fn server_side_apply_creates_and_updates_a_pool() {
    let app = App::start().await;
    let uri = format!("{POOLS}/applied?fieldManager=test");
    let config = pool("applied", json!({"cluster": "eu-west", "vipCount": 2}));
    let apply = "application/apply-patch+yaml";
    let (code, first) = send(
        &app,
        Method::PATCH,
        &uri,
        apply,
        "application/json",
        Some(config.clone()),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{first}");
    let mut changed = config;
    changed["spec"]["virtualRouterId"] = json!(9);
    let (code, second) = send(
        &app,
        Method::PATCH,
        &uri,
        apply,
        "application/json",
        Some(changed.clone()),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{second}");
    assert_eq!(second["spec"]["virtualRouterId"], 9);
    assert_eq!(second["metadata"]["managedFields"][0]["manager"], "test");
    // Apply goes through pool admission too.
    changed["spec"]["cluster"] = json!("us-east");
    let (code, status) = send(
        &app,
        Method::PATCH,
        &uri,
        apply,
        "application/json",
        Some(changed),
    )
    .await;
    assert_eq!(
        causes(code, &status),
        [(
            "spec.cluster".to_string(),
            "Invalid value: \"us-east\": field is immutable".to_string()
        )]
    );
}

#[tokio::test]
async fn pool_admission_refuses_each_conflict_with_its_field_path() {
    let app = App::start().await;
    created(&app, CLUSTERS, cluster("eu-west", Some("10.0.0.0/24"))).await;
    created(
        &app,
        POOLS,
        pool(
            "a",
            json!({"cluster": "eu-west", "vipCIDR": "10.1.0.0/28", "vips": ["10.1.0.5"], "virtualRouterId": 7}),
        ),
    )
    .await;
    // An explicit CIDR overlapping another pool's.
    let found = refused(
        &app,
        "b",
        json!({"cluster": "eu-west", "vipCIDR": "10.1.0.0/29"}),
    )
    .await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "spec.vipCIDR");
    assert!(found[0].1.contains("IngressPool \"a\""), "{found:?}");
    // An explicit CIDR overlapping the Cluster's.
    let found = refused(
        &app,
        "c",
        json!({"cluster": "eu-west", "vipCIDR": "10.0.0.128/25"}),
    )
    .await;
    assert_eq!(found[0].0, "spec.vipCIDR");
    assert!(found[0].1.contains("Cluster \"eu-west\""), "{found:?}");
    // A VIP another pool wants.
    let found = refused(
        &app,
        "d",
        json!({"cluster": "eu-west", "vips": ["10.1.0.5"]}),
    )
    .await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "spec.vips[0]");
    assert!(
        found[0].1.contains("is taken by IngressPool \"a\""),
        "{found:?}"
    );
    // A VRRP group id in use in the same cluster.
    let found = refused(
        &app,
        "e",
        json!({"cluster": "eu-west", "virtualRouterId": 7}),
    )
    .await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "spec.virtualRouterId");
    // A dry run is admitted the same way.
    let (code, status) = app
        .call(
            Method::POST,
            &format!("{POOLS}?dryRun=All"),
            Some(pool(
                "e",
                json!({"cluster": "eu-west", "virtualRouterId": 7}),
            )),
        )
        .await;
    assert_eq!(causes(code, &status)[0].0, "spec.virtualRouterId");
    // The same id, VIP and CIDR in another cluster (here one that does not exist yet)
    // conflict with nothing.
    created(
        &app,
        POOLS,
        pool(
            "elsewhere",
            json!({"cluster": "us-east", "vipCIDR": "10.1.0.0/28", "vips": ["10.1.0.5"], "virtualRouterId": 7}),
        ),
    )
    .await;
    // A pool that does not conflict.
    created(
        &app,
        POOLS,
        pool(
            "b",
            json!({"cluster": "eu-west", "vipCIDR": "10.1.0.16/28", "virtualRouterId": 8}),
        ),
    )
    .await;

    // Updates: spec.cluster is immutable; a patch into a conflict is refused.
    let (code, status) = app
        .call(
            Method::PATCH,
            &format!("{POOLS}/b"),
            Some(json!({"spec": {"cluster": "us-east"}})),
        )
        .await;
    assert_eq!(
        causes(code, &status),
        [(
            "spec.cluster".to_string(),
            "Invalid value: \"us-east\": field is immutable".to_string()
        )]
    );
    let (code, status) = app
        .call(
            Method::PATCH,
            &format!("{POOLS}/b"),
            Some(json!({"spec": {"virtualRouterId": 7}})),
        )
        .await;
    assert_eq!(causes(code, &status)[0].0, "spec.virtualRouterId");

    // A Cluster's vipCIDR may not overlap a pool's own, on create or update.
    let (code, status) = app
        .call(
            Method::PATCH,
            &format!("{CLUSTERS}/eu-west"),
            Some(json!({"spec": {"vipCIDR": "10.1.0.0/16"}})),
        )
        .await;
    let found = causes(code, &status);
    assert_eq!(found.len(), 2, "a and b: {found:?}");
    assert!(
        found.iter().all(|(field, _)| field == "spec.vipCIDR"),
        "{found:?}"
    );
    assert!(
        found[0].1.contains("IngressPool \"a\" (10.1.0.0/28)"),
        "{found:?}"
    );
    let (code, status) = app
        .call(
            Method::POST,
            CLUSTERS,
            Some(cluster("us-east", Some("10.1.0.0/24"))),
        )
        .await;
    let found = causes(code, &status);
    assert!(
        found[0].1.contains("IngressPool \"elsewhere\""),
        "{found:?}"
    );
    // A CIDR clear of them is fine.
    let (code, body) = app
        .call(
            Method::PATCH,
            &format!("{CLUSTERS}/eu-west"),
            Some(json!({"spec": {"vipCIDR": "10.2.0.0/24"}})),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

/// Two pools that conflict (written at once, each admitted before the other was
/// stored): either can still be updated in ways that add no conflict, e.g. its labels
/// or its finalizers; a change that adds one is refused.
#[tokio::test]
async fn an_update_is_refused_only_for_a_conflict_it_adds() {
    let app = App::start().await;
    created(
        &app,
        POOLS,
        pool(
            "a",
            json!({"cluster": "eu-west", "virtualRouterId": 7, "vipCIDR": "10.0.0.0/28"}),
        ),
    )
    .await;
    // b as a racing create would have stored it: the same group id as a.
    let mut b = pool(
        "b",
        json!({"cluster": "eu-west", "virtualRouterId": 7, "vipCount": 1}),
    );
    b["metadata"]["uid"] = json!("b-uid");
    b["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    b["metadata"]["generation"] = json!(1);
    app.store
        .put(
            "/registry/fedingress.io/ingresspools/b",
            b.to_string().into_bytes().into(),
            Precondition::Absent,
        )
        .await
        .unwrap();
    let (code, body) = app
        .call(
            Method::PATCH,
            &format!("{POOLS}/b"),
            Some(json!({"metadata": {"labels": {"tier": "silver"}}})),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let (code, status) = app
        .call(
            Method::PATCH,
            &format!("{POOLS}/b"),
            Some(json!({"spec": {"vipCIDR": "10.0.0.0/29"}})),
        )
        .await;
    // Only the overlap is new; the shared group id was there before.
    let found = causes(code, &status);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "spec.vipCIDR");
}
