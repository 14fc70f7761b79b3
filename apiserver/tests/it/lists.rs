//! Lists, resourceVersion semantics, watch-list and deletecollection, through the
//! router in-process (`router().oneshot`) on a redb store the test can compact.

#![allow(
    clippy::unwrap_used,
    reason = "a test: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use fedingress_api::rbac::{Grant, Policy};
use fedingress_apiserver::auth::Authenticator;
use fedingress_apiserver::auth::rbac::Authorizer;
use fedingress_apiserver::endpoints::extensions::Extensions;
use fedingress_apiserver::endpoints::{ApiSettings, AppState, Peer, router};
use fedingress_apiserver::registry::Registry;
use fedingress_store::{RedbOptions, RedbStore, Store};
use futures_util::StreamExt;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

const INGRESSES: &str = "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses";
const CLUSTERS: &str = "/apis/fedingress.io/v1alpha1/clusters";
const WAIT: Duration = Duration::from_secs(10);

pub(crate) struct App {
    pub(crate) router: Router,
    pub(crate) store: Arc<RedbStore>,
    _dir: tempfile::TempDir,
}

impl App {
    pub(crate) async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            RedbStore::open(&dir.path().join("store.redb"), RedbOptions::default()).unwrap(),
        );
        let shared: Arc<dyn Store> = store.clone();
        let mut state = AppState::new(
            Registry::new(shared),
            Authenticator::new(true),
            ApiSettings::default(),
            Extensions::default(),
        );
        state.authorizer = Arc::new(Authorizer::with_policy(bootstrap_policy()));
        let app = Self {
            router: router(Arc::new(state)),
            store,
            _dir: dir,
        };
        // Namespaces may need to exist (NamespaceLifecycle): make sure `default` does,
        // whether or not this server serves Namespaces yet.
        let _ = app
            .call(
                Method::POST,
                "/api/v1/namespaces",
                Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})),
            )
            .await;
        app
    }

    pub(crate) fn request(method: Method, uri: &str, body: Option<Value>) -> Request<Body> {
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        request.extensions_mut().insert(Peer(peer));
        request
    }

    pub(crate) async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let response = tokio::time::timeout(
            WAIT,
            self.router
                .clone()
                .oneshot(Self::request(method, uri, body)),
        )
        .await
        .unwrap()
        .unwrap();
        let code = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (code, value)
    }

    async fn ok(&self, method: Method, uri: &str, body: Option<Value>) -> Value {
        let (code, value) = self.call(method.clone(), uri, body).await;
        assert!(code.is_success(), "{method} {uri}: {code} {value}");
        value
    }

    async fn create(&self, name: &str, labels: Value) -> Value {
        self.ok(Method::POST, INGRESSES, Some(ingress(name, labels)))
            .await
    }

    /// A watch's first `count` events.
    async fn watch_events(&self, uri: &str, count: usize) -> Vec<Value> {
        let response = self
            .router
            .clone()
            .oneshot(Self::request(Method::GET, uri, None))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        Events::of(response.into_body()).next(count).await
    }
}

/// The bootstrap roles and bindings (dev mode's user is in `fedingress:admins`, bound
/// to cluster-admin), as the authorizer's cache holds them once loaded.
fn bootstrap_policy() -> Policy {
    let (roles, bindings) = fedingress_api::rbac::bootstrap();
    let mut policy = Policy::default();
    for role in roles {
        let name = role.metadata.name.clone().unwrap_or_default();
        policy.cluster_roles.insert(name, role.rules.clone());
    }
    for binding in bindings {
        let name = binding.metadata.name.clone().unwrap_or_default();
        policy.cluster_role_bindings.insert(
            name,
            Grant {
                subjects: binding.subjects.clone(),
                role_ref: binding.role_ref.clone(),
            },
        );
    }
    policy
}

/// A watch response body, read event by event.
struct Events {
    stream: axum::body::BodyDataStream,
    buffer: Vec<u8>,
}

impl Events {
    fn of(body: Body) -> Self {
        Self {
            stream: body.into_data_stream(),
            buffer: Vec::new(),
        }
    }

    /// The next `count` events (each within [`WAIT`]).
    async fn next(&mut self, count: usize) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            while events.len() < count
                && let Some(end) = self.buffer.iter().position(|b| *b == b'\n')
            {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                events.push(serde_json::from_slice(&line).unwrap());
            }
            if events.len() == count {
                return events;
            }
            let chunk = tokio::time::timeout(WAIT, self.stream.next())
                .await
                .expect("a watch event in time")
                .expect("the watch went on")
                .unwrap();
            self.buffer.extend_from_slice(&chunk);
        }
    }
}

fn ingress(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "rules": [{"protocol": "TCP", "port": 7000, "backend": {"service": "echo", "port": 7000}}],
            "traffic": {"dnsName": format!("{name}.fedingress.test")}
        }
    })
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Every page after the first reads the first page's snapshot: objects created,
/// modified or deleted between pages change nothing in later pages.
#[tokio::test]
async fn pages_are_one_snapshot_across_concurrent_writes() {
    let app = App::start().await;
    for i in 0..7 {
        app.create(&format!("i{i}"), json!({"app": "echo"})).await;
    }
    let first = app
        .ok(Method::GET, &format!("{INGRESSES}?limit=2"), None)
        .await;
    assert_eq!(names(&first), ["i0", "i1"]);
    let snapshot = rv(&first);
    // Between pages: delete one not yet listed, create one that would sort in the
    // middle, relabel one.
    app.ok(Method::DELETE, &format!("{INGRESSES}/i3"), None)
        .await;
    app.create("i25", json!({"app": "echo"})).await;
    app.ok(
        Method::PATCH,
        &format!("{INGRESSES}/i5"),
        Some(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await;
    let mut seen = names(&first);
    let mut token = first["metadata"]["continue"].as_str().unwrap().to_string();
    loop {
        let page = app
            .ok(
                Method::GET,
                &format!("{INGRESSES}?limit=2&continue={token}"),
                None,
            )
            .await;
        assert_eq!(rv(&page), snapshot, "every page reports the snapshot");
        for item in page["items"].as_array().unwrap() {
            if item["metadata"]["name"] == "i5" {
                assert_eq!(item["metadata"]["labels"]["app"], "echo", "i5 as it was");
            }
        }
        seen.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(next) if !next.is_empty() => token = next.to_string(),
            _ => break,
        }
    }
    assert_eq!(seen, ["i0", "i1", "i2", "i3", "i4", "i5", "i6"]);

    // With a label selector the snapshot holds too: i5 still matches there.
    let selected = app
        .ok(Method::GET, &format!("{INGRESSES}?labelSelector=app%3Decho&resourceVersion={snapshot}&resourceVersionMatch=Exact"), None)
        .await;
    assert_eq!(names(&selected), ["i0", "i1", "i2", "i3", "i4", "i5", "i6"]);
    let now = app
        .ok(
            Method::GET,
            &format!("{INGRESSES}?labelSelector=app%3Decho"),
            None,
        )
        .await;
    assert_eq!(names(&now), ["i0", "i1", "i2", "i25", "i4", "i6"]);
}

/// Once compaction overtakes a paged list's snapshot, the next page is 410 Expired with
/// kube's message and a token that continues (inconsistently) at the current revision.
#[tokio::test]
async fn compaction_under_a_paged_list_is_410_with_an_inconsistent_token() {
    let app = App::start().await;
    for i in 0..5 {
        app.create(&format!("c{i}"), json!({})).await;
    }
    let first = app
        .ok(Method::GET, &format!("{INGRESSES}?limit=2"), None)
        .await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    app.create("c9", json!({})).await;
    let now = app.store.revision().await.unwrap();
    app.store.compact(now).await.unwrap();

    let (code, status) = app
        .call(
            Method::GET,
            &format!("{INGRESSES}?limit=2&continue={token}"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::GONE, "{status}");
    assert_eq!(status["reason"], "Expired");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response"),
        "{status}"
    );
    let inconsistent = status["metadata"]["continue"].as_str().unwrap();
    let mut rest = Vec::new();
    let mut next = inconsistent.to_string();
    loop {
        let page = app
            .ok(
                Method::GET,
                &format!("{INGRESSES}?limit=2&continue={next}"),
                None,
            )
            .await;
        assert!(
            rv(&page) >= now,
            "an inconsistent continuation reads the current state"
        );
        rest.extend(names(&page));
        match page["metadata"]["continue"].as_str() {
            Some(n) if !n.is_empty() => next = n.to_string(),
            _ => break,
        }
    }
    assert_eq!(
        rest,
        ["c2", "c3", "c4", "c9"],
        "c9 shows up: the list is inconsistent"
    );

    // A first page at a compacted revision is kube's plain 410.
    let (code, status) = app
        .call(
            Method::GET,
            &format!(
                "{INGRESSES}?resourceVersion={}&resourceVersionMatch=Exact",
                rv(&first)
            ),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::GONE);
    assert_eq!(
        status["message"],
        "The resourceVersion for the provided list is too old."
    );
    assert!(status["metadata"].get("continue").is_none());
}

/// resourceVersion and resourceVersionMatch on list and get, as kube's table says.
#[tokio::test]
async fn resource_version_match_on_list_and_get() {
    let app = App::start().await;
    let a = app.create("a", json!({})).await;
    let at_a = rv(&a);
    app.create("b", json!({})).await;

    let exact = app
        .ok(
            Method::GET,
            &format!("{INGRESSES}?resourceVersion={at_a}&resourceVersionMatch=Exact"),
            None,
        )
        .await;
    assert_eq!(names(&exact), ["a"]);
    assert_eq!(rv(&exact), at_a);
    // Legacy: a paged list at N without a match is Exact.
    let legacy = app
        .ok(
            Method::GET,
            &format!("{INGRESSES}?resourceVersion={at_a}&limit=5"),
            None,
        )
        .await;
    assert_eq!(names(&legacy), ["a"]);
    // NotOlderThan (and the default without limit) serve the current state.
    for query in [
        format!("resourceVersion={at_a}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={at_a}"),
        "resourceVersion=0".to_string(),
        String::new(),
    ] {
        let list = app
            .ok(Method::GET, &format!("{INGRESSES}?{query}"), None)
            .await;
        assert_eq!(names(&list), ["a", "b"], "{query}");
    }
    // Ahead of the store: kube's 504 after a short wait.
    let ahead = app.store.revision().await.unwrap() + 100;
    for uri in [
        format!("{INGRESSES}?resourceVersion={ahead}"),
        format!("{INGRESSES}/a?resourceVersion={ahead}"),
    ] {
        let (code, status) = app.call(Method::GET, &uri, None).await;
        assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{uri}: {status}");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("Too large resource version: {ahead}, current: ")),
            "{status}"
        );
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
    }
    // A get at an older N serves the current object.
    let got = app
        .ok(
            Method::GET,
            &format!("{INGRESSES}/a?resourceVersion={at_a}"),
            None,
        )
        .await;
    assert_eq!(rv(&got), at_a);

    // Invalid combinations: kube's 422 on ListOptions, and its 400 for rv with continue.
    let invalid = [
        (
            "resourceVersionMatch=Exact",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersion=0&resourceVersionMatch=Exact",
            "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ),
        (
            "resourceVersion=3&resourceVersionMatch=Latest",
            "resourceVersionMatch: Unsupported value: \"Latest\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
        ),
        (
            "sendInitialEvents=true",
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
    ];
    for (query, message) in invalid {
        let (code, status) = app
            .call(Method::GET, &format!("{INGRESSES}?{query}"), None)
            .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {status}");
        assert_eq!(
            status["message"],
            format!("ListOptions.meta.k8s.io \"\" is invalid: {message}"),
            "{query}"
        );
    }
    let first = app
        .ok(Method::GET, &format!("{INGRESSES}?limit=1"), None)
        .await;
    let token = first["metadata"]["continue"].as_str().unwrap();
    let (code, status) = app
        .call(
            Method::GET,
            &format!("{INGRESSES}?limit=1&continue={token}&resourceVersion={at_a}"),
            None,
        )
        .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(
        status["message"],
        "specifying resource version is not allowed when using continue"
    );
}

/// A watch-list sends ADDED for every matching object of one snapshot, then a BOOKMARK
/// at that snapshot annotated `k8s.io/initial-events-end`, then live events after it;
/// with kube-rs's and client-go's exact parameters.
#[tokio::test]
async fn watch_list_sends_initial_events_then_the_end_bookmark_then_changes() {
    let app = App::start().await;
    app.create("w1", json!({"app": "echo"})).await;
    app.create("w2", json!({"app": "other"})).await;
    let w3 = app.create("w3", json!({"app": "echo"})).await;
    for rv_param in [
        "",
        "&resourceVersion=0",
        &format!("&resourceVersion={}", rv(&w3)),
    ] {
        let uri = format!(
            "{INGRESSES}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&labelSelector=app%3Decho&timeoutSeconds=30{rv_param}"
        );
        let events = app.watch_events(&uri, 3).await;
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["ADDED", "ADDED", "BOOKMARK"],
            "{rv_param}: {events:?}"
        );
        assert_eq!(events[0]["object"]["metadata"]["name"], "w1");
        assert_eq!(events[1]["object"]["metadata"]["name"], "w3");
        let bookmark = &events[2]["object"];
        assert_eq!(
            bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        assert!(rv(bookmark) >= rv(&w3));
    }

    // Live events follow the bookmark.
    let uri = format!(
        "{INGRESSES}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30"
    );
    let response = app
        .router
        .clone()
        .oneshot(App::request(Method::GET, &uri, None))
        .await
        .unwrap();
    let mut events = Events::of(response.into_body());
    let initial = events.next(4).await;
    let kinds: Vec<&str> = initial
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["ADDED", "ADDED", "ADDED", "BOOKMARK"],
        "{initial:?}"
    );
    let w4 = app.create("w4", json!({})).await;
    let live = events.next(1).await;
    assert_eq!(live[0]["type"], "ADDED");
    assert_eq!(live[0]["object"]["metadata"]["name"], "w4");
    assert_eq!(rv(&live[0]["object"]), rv(&w4));
    assert!(rv(&initial[3]["object"]) < rv(&w4));

    // kube's validation errors.
    let cases = [
        (
            "watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ),
        (
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
        ),
        (
            "watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=5",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ),
    ];
    for (query, message) in cases {
        let (code, status) = app
            .call(Method::GET, &format!("{INGRESSES}?{query}"), None)
            .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {status}");
        assert_eq!(
            status["message"],
            format!("ListOptions.meta.k8s.io \"\" is invalid: {message}")
        );
    }
}

/// deletecollection deletes exactly what the selectors match, honours finalizers and
/// dryRun, and answers with the list kind of what it deleted.
#[tokio::test]
async fn deletecollection_with_selectors_finalizers_and_dry_run() {
    let app = App::start().await;
    app.create("keep", json!({"app": "keep"})).await;
    app.create("d1", json!({"app": "gone"})).await;
    app.create("d2", json!({"app": "gone"})).await;
    let mut held = ingress("held", json!({"app": "gone"}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    app.ok(Method::POST, INGRESSES, Some(held)).await;

    let dry = app
        .ok(
            Method::DELETE,
            &format!("{INGRESSES}?labelSelector=app%3Dgone&dryRun=All"),
            None,
        )
        .await;
    assert_eq!(names(&dry), ["d1", "d2", "held"]);
    assert_eq!(
        names(&app.ok(Method::GET, INGRESSES, None).await),
        ["d1", "d2", "held", "keep"]
    );

    let deleted = app
        .ok(
            Method::DELETE,
            &format!("{INGRESSES}?labelSelector=app%3Dgone"),
            None,
        )
        .await;
    assert_eq!(deleted["kind"], "FederatedIngressList");
    assert_eq!(deleted["apiVersion"], "fedingress.io/v1alpha1");
    assert_eq!(names(&deleted), ["d1", "d2", "held"]);
    let held = &deleted["items"][2];
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    let left = app.ok(Method::GET, INGRESSES, None).await;
    assert_eq!(
        names(&left),
        ["held", "keep"],
        "held waits for its finalizer"
    );

    // Removing the finalizer lets it go; a field selector picks by name.
    app.ok(
        Method::PATCH,
        &format!("{INGRESSES}/held"),
        Some(json!({"metadata": {"finalizers": null}})),
    )
    .await;
    let by_name = app
        .ok(
            Method::DELETE,
            &format!("{INGRESSES}?fieldSelector=metadata.name%3Dkeep"),
            Some(json!({"kind": "DeleteOptions", "apiVersion": "v1"})),
        )
        .await;
    assert_eq!(names(&by_name), ["keep"]);
    assert!(names(&app.ok(Method::GET, INGRESSES, None).await).is_empty());

    // Cluster-scoped kinds too.
    app.ok(
        Method::POST,
        CLUSTERS,
        Some(json!({"apiVersion": "fedingress.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "eu"}, "spec": {"region": "europe-west1", "location": {"latitude": 50.45, "longitude": 3.82}}})),
    )
    .await;
    let clusters = app.ok(Method::DELETE, CLUSTERS, None).await;
    assert_eq!(clusters["kind"], "ClusterList");
    assert_eq!(names(&clusters), ["eu"]);

    // Discovery says so.
    let discovery = app
        .ok(Method::GET, "/apis/fedingress.io/v1alpha1", None)
        .await;
    let ingresses = discovery["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "federatedingresses")
        .unwrap();
    assert!(
        ingresses["verbs"]
            .as_array()
            .unwrap()
            .contains(&json!("deletecollection"))
    );
}

/// A dry-run update answers the stored object's resourceVersion, as kube-apiserver does:
/// `kubectl diff --server-side` showed a spurious `-  resourceVersion: "N"` for every
/// object (issue 23). Merge patch, apply patch and a changing PUT, each with dryRun=All,
/// and nothing is written.
#[tokio::test]
async fn dry_run_updates_answer_the_stored_resource_version() {
    let app = App::start().await;
    let created = app.create("web", json!({"app": "web"})).await;
    let stored = rv(&created);
    let one = format!("{INGRESSES}/web");
    let dry = format!("{one}?dryRun=All");

    let patched = app
        .ok(
            Method::PATCH,
            &dry,
            Some(json!({"metadata": {"labels": {"app": "shop"}}})),
        )
        .await;
    assert_eq!(patched["metadata"]["labels"]["app"], "shop", "{patched}");
    assert_eq!(rv(&patched), stored, "merge patch: {patched}");

    let mut changed = created.clone();
    changed["metadata"]["labels"]["app"] = json!("shop");
    let put = app.ok(Method::PUT, &dry, Some(changed)).await;
    assert_eq!(put["metadata"]["labels"]["app"], "shop", "{put}");
    assert_eq!(rv(&put), stored, "PUT: {put}");

    for labels in [json!({"app": "web"}), json!({"app": "shop"})] {
        let mut config = ingress("web", labels.clone());
        config["metadata"]["namespace"] = json!("default");
        let mut request = App::request(
            Method::PATCH,
            &format!("{dry}&fieldManager=kubectl&force=true"),
            None,
        );
        *request.body_mut() = Body::from(config.to_string());
        request.headers_mut().insert(
            "content-type",
            http::HeaderValue::from_static("application/apply-patch+yaml"),
        );
        let response = app.router.clone().oneshot(request).await.unwrap();
        let code = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let applied: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(code, StatusCode::OK, "{applied}");
        assert_eq!(applied["metadata"]["labels"], labels, "{applied}");
        assert_eq!(rv(&applied), stored, "apply of {labels}: {applied}");
    }

    let after = app.ok(Method::GET, &one, None).await;
    assert_eq!(after["metadata"]["labels"]["app"], "web", "{after}");
    assert_eq!(rv(&after), stored, "a dry run writes nothing");
}
