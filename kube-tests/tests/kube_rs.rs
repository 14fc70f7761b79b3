//! kube-rs against the real federation-apiserver: server-side apply (create, update,
//! conflicts, force, managedFields) on FederatedIngress, Cluster and the status
//! subresource; deletecollection; consistent paged lists; watch-list (streaming lists)
//! through a raw watch and through kube-runtime's watcher; Namespace objects;
//! IngressPools and IngressClaims (create, get, list, watch, apply, admission).
//!
//! Expected behaviour is kube-apiserver's, as kube-rs controllers rely on it:
//! <https://kubernetes.io/docs/reference/using-api/server-side-apply/>,
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/>.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fedingress_kube_tests::{
    ApiServer, clusters, federated_ingresses, ingress_claims, ingress_pools, tcp_ingress,
};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::Status;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

/// Bound on any one wait for an event in these tests (not a timing assertion).
const WAIT: Duration = Duration::from_secs(20);

fn ingresses(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &federated_ingresses())
}

/// The fields `manager` owns on the main resource (not a subresource) through
/// `operation`, as FieldsV1 JSON.
fn owned(object: &DynamicObject, manager: &str, operation: &str) -> Option<serde_json::Value> {
    owned_on(object, manager, operation, None)
}

fn owned_on(
    object: &DynamicObject,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
) -> Option<serde_json::Value> {
    object
        .managed_fields()
        .iter()
        .find(|entry| {
            entry.manager.as_deref() == Some(manager)
                && entry.operation.as_deref() == Some(operation)
                && entry.subresource.as_deref().filter(|s| !s.is_empty()) == subresource
        })
        .map(|entry| {
            entry
                .fields_v1
                .as_ref()
                .map(|f| f.0.clone())
                .unwrap_or_default()
        })
}

/// Whether a FieldsV1 set holds `path` (e.g. `["f:spec", "f:traffic", "f:ttl"]`).
fn holds(fields: &serde_json::Value, path: &[&str]) -> bool {
    path.iter()
        .try_fold(fields, |at, key| at.get(*key))
        .is_some()
}

fn api_error(result: kube::Result<DynamicObject>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn server_side_apply_creates_updates_conflicts_and_forces() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let api = ingresses(&client, "default");
    let ttl = ["f:spec", "f:traffic", "f:ttl"];

    // Apply creates the object; the applier owns exactly what it sent.
    let created = api
        .patch(
            "ssa",
            &PatchParams::apply("mgr"),
            &Patch::Apply(tcp_ingress("ssa", 7000, 30)),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["traffic"]["ttl"], 30);
    let mine = owned(&created, "mgr", "Apply").expect("an Apply entry for mgr");
    assert!(holds(&mine, &ttl), "{mine}");
    assert!(holds(&mine, &["f:spec", "f:rules"]), "{mine}");
    assert!(
        !holds(&mine, &["f:metadata", "f:name"]),
        "name is not a managed field: {mine}"
    );

    // Apply again with a change updates it.
    let updated = api
        .patch(
            "ssa",
            &PatchParams::apply("mgr"),
            &Patch::Apply(tcp_ingress("ssa", 7000, 40)),
        )
        .await
        .unwrap();
    assert_eq!(updated.data["spec"]["traffic"]["ttl"], 40);
    assert_eq!(updated.metadata.generation, Some(2));

    // A second manager setting the same field to another value: 409 Conflict, with
    // one FieldManagerConflict cause naming the field and its owner.
    let status = api_error(
        api.patch(
            "ssa",
            &PatchParams::apply("other"),
            &Patch::Apply(tcp_ingress("ssa", 7000, 50)),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("conflict with \"mgr\"")
            && status.message.contains(".spec.traffic.ttl"),
        "{status:?}"
    );
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    let cause = causes
        .iter()
        .find(|c| c.field == ".spec.traffic.ttl")
        .unwrap_or_else(|| panic!("no cause for .spec.traffic.ttl: {status:?}"));
    assert_eq!(cause.reason, "FieldManagerConflict", "{status:?}");
    assert_eq!(cause.message, "conflict with \"mgr\"", "{status:?}");
    let unchanged = api.get("ssa").await.unwrap();
    assert_eq!(unchanged.data["spec"]["traffic"]["ttl"], 40);

    // force: the value is written and ownership of the field moves.
    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("other").force(),
            &Patch::Apply(tcp_ingress("ssa", 7000, 50)),
        )
        .await
        .unwrap();
    assert_eq!(forced.data["spec"]["traffic"]["ttl"], 50);
    let theirs = owned(&forced, "other", "Apply").expect("an Apply entry for other");
    let mine = owned(&forced, "mgr", "Apply").expect("mgr keeps its other fields");
    assert!(holds(&theirs, &ttl), "{theirs}");
    assert!(!holds(&mine, &ttl), "mgr must lose ttl: {mine}");
    // Same rules, same value: both own the (atomic) list.
    assert!(holds(&mine, &["f:spec", "f:rules"]), "{mine}");
    assert!(holds(&theirs, &["f:spec", "f:rules"]), "{theirs}");

    // The same on a cluster-scoped kind.
    let cluster_api: Api<DynamicObject> = Api::all_with(client.clone(), &clusters());
    let cluster = |region: &str| {
        Patch::Apply(json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "ssa-cluster"},
            "spec": {"region": region, "location": {"latitude": 50.45, "longitude": 3.82}},
        }))
    };
    let created = cluster_api
        .patch("ssa-cluster", &PatchParams::apply("mgr"), &cluster("r1"))
        .await
        .unwrap();
    assert!(
        holds(
            &owned(&created, "mgr", "Apply").unwrap(),
            &["f:spec", "f:region"]
        ),
        "{:?}",
        created.managed_fields()
    );
    let status = api_error(
        cluster_api
            .patch("ssa-cluster", &PatchParams::apply("other"), &cluster("r2"))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(status.message.contains(".spec.region"), "{status:?}");
    let forced = cluster_api
        .patch(
            "ssa-cluster",
            &PatchParams::apply("other").force(),
            &cluster("r2"),
        )
        .await
        .unwrap();
    assert_eq!(forced.data["spec"]["region"], "r2");
    assert!(!holds(
        &owned(&forced, "mgr", "Apply").unwrap_or_default(),
        &["f:spec", "f:region"]
    ));

    // fieldManager is required for apply: kube-rs sends it, a raw request without it
    // is a 400 (kube-apiserver: "PATCH ... is not allowed without a field manager").
    let request = apply_without_field_manager("ssa");
    let status = client
        .request::<serde_json::Value>(request)
        .await
        .map(|v| panic!("apply without fieldManager succeeded: {v}"))
        .unwrap_err();
    match status {
        kube::Error::Api(status) => assert_eq!(status.code, 400, "{status:?}"),
        other => panic!("expected a 400 Status, got {other:?}"),
    }
}

/// An apply PATCH of `name` with no `fieldManager` parameter.
fn apply_without_field_manager(name: &str) -> http::Request<Vec<u8>> {
    http::Request::patch(format!(
        "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/{name}"
    ))
    .header("content-type", "application/apply-patch+yaml")
    .body(serde_json::to_vec(&tcp_ingress(name, 7000, 50)).unwrap())
    .unwrap()
}

#[tokio::test]
async fn server_side_apply_on_the_status_subresource() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let api: Api<DynamicObject> = Api::all_with(client, &clusters());
    api.patch(
        "status-apply",
        &PatchParams::apply("spec-writer"),
        &Patch::Apply(json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "status-apply"},
            "spec": {"region": "europe-west1", "location": {"latitude": 50.45, "longitude": 3.82}},
        })),
    )
    .await
    .unwrap();
    let patched = api
        .patch_status(
            "status-apply",
            &PatchParams::apply("status-writer"),
            &Patch::Apply(json!({
                "apiVersion": "fedingress.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "status-apply"},
                "status": {"agentVersion": "9.9.9"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["agentVersion"], "9.9.9");
    // The spec is not written through the status subresource.
    assert_eq!(patched.data["spec"]["region"], "europe-west1");
    let status_fields = owned_on(&patched, "status-writer", "Apply", Some("status"))
        .unwrap_or_else(|| {
            panic!(
                "no Apply entry with subresource status for status-writer: {:?}",
                patched.managed_fields()
            )
        });
    assert!(
        holds(&status_fields, &["f:status", "f:agentVersion"]),
        "{status_fields}"
    );
    assert!(
        owned(&patched, "status-writer", "Apply").is_none(),
        "a status apply is recorded with subresource status only: {:?}",
        patched.managed_fields()
    );
    let spec_fields = owned(&patched, "spec-writer", "Apply").unwrap();
    assert!(
        holds(&spec_fields, &["f:spec", "f:region"]),
        "{spec_fields}"
    );
    assert!(!holds(&spec_fields, &["f:status"]), "{spec_fields}");
}

#[tokio::test]
async fn delete_collection_with_a_label_selector() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let api = ingresses(&client, "default");
    for (i, group) in ["x", "x", "y", "x", "y"].iter().enumerate() {
        let mut object = tcp_ingress(&format!("dc-{i}"), 7000 + i as u16, 30);
        object["metadata"]["labels"] = json!({"group": group});
        api.create(
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(object).unwrap(),
        )
        .await
        .unwrap();
    }
    let deleted = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("group=x"),
        )
        .await
        .unwrap();
    if let Some(list) = deleted.left() {
        let names: BTreeSet<String> = list.items.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, names_of(&["dc-0", "dc-1", "dc-3"]));
    }
    let left: BTreeSet<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(left, names_of(&["dc-2", "dc-4"]));
}

fn names_of(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[tokio::test]
async fn paged_lists_are_one_consistent_snapshot() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let api = ingresses(&client, "default");
    let initial: Vec<String> = (0..7).map(|i| format!("page-{i}")).collect();
    for (i, name) in initial.iter().enumerate() {
        api.create(
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(tcp_ingress(name, 7000 + i as u16, 30))
                .unwrap(),
        )
        .await
        .unwrap();
    }

    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(2);
    let mut snapshot_rv = None;
    let mut page = 0;
    loop {
        let list = api.list(&params).await.unwrap();
        let rv = list.metadata.resource_version.clone();
        assert!(rv.is_some(), "a list carries its resourceVersion");
        match &snapshot_rv {
            None => snapshot_rv = rv,
            Some(first) => assert_eq!(
                Some(first),
                rv.as_ref(),
                "every page reports the snapshot's resourceVersion"
            ),
        }
        assert!(list.items.len() <= 2, "limit 2 gave {}", list.items.len());
        seen.extend(list.items.iter().map(ResourceExt::name_any));
        // Writes between pages: a new object sorting first and last, an update of an
        // object not yet listed, and a delete of another one not yet listed.
        page += 1;
        let new = serde_json::from_value::<DynamicObject>(tcp_ingress(
            &format!("page-{page}-new"),
            8000 + page,
            30,
        ))
        .unwrap();
        api.create(&PostParams::default(), &new).await.unwrap();
        api.create(
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(tcp_ingress(
                &format!("a-page-{page}"),
                9000 + page,
                30,
            ))
            .unwrap(),
        )
        .await
        .unwrap();
        if page == 1 {
            api.patch(
                "page-6",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
            )
            .await
            .unwrap();
            api.delete("page-5", &DeleteParams::default())
                .await
                .unwrap();
        }
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
        assert!(page < 20, "paging does not end");
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "an object listed twice: {seen:?}");
    assert_eq!(
        sorted, initial,
        "a paged list is the snapshot of its first page (api-concepts: retrieving large results sets in chunks)"
    );
}

#[tokio::test]
async fn watch_list_sends_initial_objects_then_the_initial_events_end_bookmark() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let api = ingresses(&client, "default");
    let initial = names_of(&["wl-0", "wl-1", "wl-2"]);
    for (i, name) in initial.iter().enumerate() {
        api.create(
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(tcp_ingress(name, 7000 + i as u16, 30))
                .unwrap(),
        )
        .await
        .unwrap();
    }

    // Raw: sendInitialEvents=true, resourceVersionMatch=NotOlderThan, bookmarks.
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "0")
        .await
        .unwrap()
        .boxed();
    let mut added = BTreeSet::new();
    loop {
        let event = tokio::time::timeout(WAIT, stream.try_next())
            .await
            .expect("an event within the wait")
            .unwrap()
            .expect("the watch stays open");
        match event {
            WatchEvent::Added(object) => {
                assert!(added.insert(object.name_any()), "ADDED twice");
            }
            WatchEvent::Bookmark(bookmark) => {
                assert_eq!(
                    bookmark
                        .metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true"),
                    "the first bookmark ends the initial events: {:?}",
                    bookmark.metadata.annotations
                );
                assert!(!bookmark.metadata.resource_version.is_empty());
                break;
            }
            other => panic!("unexpected event before the initial-events-end bookmark: {other:?}"),
        }
    }
    assert_eq!(added, initial);
    drop(stream);

    // kube-runtime's watcher in streaming-list mode: Init, InitApply per object,
    // InitDone (from the bookmark), then live events.
    let mut events = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init_applied = BTreeSet::new();
    let mut phase = Vec::new();
    loop {
        let event = tokio::time::timeout(WAIT, events.try_next())
            .await
            .expect("a watcher event within the wait")
            .unwrap()
            .expect("the watcher stream stays open");
        match event {
            watcher::Event::Init => phase.push("Init"),
            watcher::Event::InitApply(object) => {
                init_applied.insert(object.name_any());
            }
            watcher::Event::InitDone => {
                phase.push("InitDone");
                break;
            }
            other => panic!("unexpected watcher event before InitDone: {other:?}"),
        }
    }
    assert_eq!(phase, ["Init", "InitDone"]);
    assert_eq!(init_applied, initial);
    api.create(
        &PostParams::default(),
        &serde_json::from_value::<DynamicObject>(tcp_ingress("wl-live", 7100, 30)).unwrap(),
    )
    .await
    .unwrap();
    loop {
        let event = tokio::time::timeout(WAIT, events.try_next())
            .await
            .expect("the live event within the wait")
            .unwrap()
            .expect("the watcher stream stays open");
        // The initial objects may change meanwhile (the controller writes their
        // status): those are live events too. The new object's must come.
        if let watcher::Event::Apply(object) = event {
            let name = object.name_any();
            assert!(name == "wl-live" || initial.contains(&name), "{name}");
            if name == "wl-live" {
                break;
            }
        }
    }
}

#[tokio::test]
async fn namespaces_are_objects_and_their_deletion_cascades() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: BTreeSet<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(
        names.contains("default"),
        "default is bootstrapped: {names:?}"
    );

    // NamespaceLifecycle: no objects in a namespace that does not exist.
    let status = api_error(
        ingresses(&client, "team-a")
            .create(
                &PostParams::default(),
                &serde_json::from_value::<DynamicObject>(tcp_ingress("in-a", 7000, 30)).unwrap(),
            )
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (404, "NotFound"),
        "{status:?}"
    );
    assert!(
        status.message.contains("namespaces \"team-a\" not found"),
        "{status:?}"
    );

    let mut namespace = Namespace::default();
    namespace.metadata.name = Some("team-a".into());
    let created = namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    let team = ingresses(&client, "team-a");
    for (i, name) in ["in-a", "in-a-2"].iter().enumerate() {
        team.create(
            &PostParams::default(),
            &serde_json::from_value::<DynamicObject>(tcp_ingress(name, 7000 + i as u16, 30))
                .unwrap(),
        )
        .await
        .unwrap();
    }
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    // The namespace goes once its objects are gone (finalizer `kubernetes`).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let gone = namespaces.get_opt("team-a").await.unwrap().is_none();
        let left = team
            .list(&ListParams::default())
            .await
            .map(|l| l.items.len());
        if gone && matches!(left, Ok(0) | Err(_)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "namespace team-a not gone (objects left: {left:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// IngressPools (cluster-scoped) and IngressClaims (namespaced) through kube-rs as a
/// controller would drive them: a watcher sees a pool created, get and a field-selected
/// list read it, server-side apply updates it and records the manager, admission
/// refuses a conflicting pool with the field path; a claim naming an ingress that does
/// not exist is created by apply and seen by a raw watch.
#[tokio::test]
async fn pools_and_claims_are_created_read_listed_watched_and_applied() {
    let server = ApiServer::start().unwrap();
    let client = server.client().unwrap();
    let pools: Api<DynamicObject> = Api::all_with(client.clone(), &ingress_pools());
    let claims: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ingress_claims());
    let pool = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "IngressPool",
            "metadata": {"name": name, "labels": {"tier": "gold"}},
            "spec": spec,
        }))
        .unwrap()
    };

    let mut events = watcher(pools.clone(), watcher::Config::default()).boxed();
    loop {
        let event = tokio::time::timeout(WAIT, events.try_next())
            .await
            .expect("a watcher event within the wait")
            .unwrap()
            .expect("the watcher stream stays open");
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }

    let created = pools
        .create(
            &PostParams::default(),
            &pool(
                "kr-a",
                json!({"cluster": "eu-west", "vipCIDR": "10.9.0.0/28", "virtualRouterId": 11}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["vipCount"], 1, "defaulted");
    assert_eq!(
        pools.get("kr-a").await.unwrap().data["spec"]["cluster"],
        "eu-west"
    );
    pools
        .create(
            &PostParams::default(),
            &pool("kr-elsewhere", json!({"cluster": "us-east"})),
        )
        .await
        .unwrap();
    let selected = pools
        .list(&ListParams::default().fields("spec.cluster=eu-west"))
        .await
        .unwrap();
    let names: Vec<String> = selected.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["kr-a"]);
    loop {
        let event = tokio::time::timeout(WAIT, events.try_next())
            .await
            .expect("the pool's event within the wait")
            .unwrap()
            .expect("the watcher stream stays open");
        if let watcher::Event::Apply(object) = event
            && object.name_any() == "kr-a"
        {
            break;
        }
    }

    let applied = pools
        .patch(
            "kr-a",
            &PatchParams::apply("kube-tests"),
            &Patch::Apply(json!({
                "apiVersion": "fedingress.io/v1alpha1",
                "kind": "IngressPool",
                "metadata": {"name": "kr-a"},
                "spec": {"cluster": "eu-west", "capacity": {"rps": 2000}},
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.data["spec"]["capacity"]["rps"], 2000);
    let fields = owned(&applied, "kube-tests", "Apply").expect("the applier's fields");
    assert!(
        holds(&fields, &["f:spec", "f:capacity", "f:rps"]),
        "{fields}"
    );

    let status = api_error(
        pools
            .patch(
                "kr-b",
                &PatchParams::apply("kube-tests"),
                &Patch::Apply(json!({
                    "apiVersion": "fedingress.io/v1alpha1",
                    "kind": "IngressPool",
                    "metadata": {"name": "kr-b"},
                    "spec": {"cluster": "eu-west", "virtualRouterId": 11},
                })),
            )
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    let causes = status.details.unwrap().causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].field, "spec.virtualRouterId");

    let mut claim_events = claims
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let claim = claims
        .patch(
            "kr-shop",
            &PatchParams::apply("kube-tests"),
            &Patch::Apply(json!({
                "apiVersion": "fedingress.io/v1alpha1",
                "kind": "IngressClaim",
                "metadata": {"name": "kr-shop"},
                "spec": {"ingresses": ["not-yet"], "reclaimPolicy": "Recycle"},
            })),
        )
        .await
        .unwrap();
    assert_eq!(claim.namespace().as_deref(), Some("default"));
    assert_eq!(claim.data["spec"]["template"]["replicas"], 2, "defaulted");
    loop {
        let event = tokio::time::timeout(WAIT, claim_events.try_next())
            .await
            .expect("the claim's event within the wait")
            .unwrap()
            .expect("the watch stays open");
        if let WatchEvent::Added(object) = event {
            assert_eq!(object.name_any(), "kr-shop");
            break;
        }
    }
    let listed = claims.list(&ListParams::default()).await.unwrap();
    assert!(listed.items.iter().any(|c| c.name_any() == "kr-shop"));
    claims
        .delete("kr-shop", &DeleteParams::default())
        .await
        .unwrap();
    pools
        .delete("kr-a", &DeleteParams::default())
        .await
        .unwrap();
}
