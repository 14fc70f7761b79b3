//! Self-test of the scripted Kubernetes API server (`fedingress_tests::kubeapi`): the
//! real kube-rs 5 client, from a kubeconfig, against it over loopback HTTP.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fedingress_tests::kubeapi::{DEFAULT_USER, FakeKubeApi, TOKEN};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config, ResourceExt};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

/// A kube client built the way the agent builds one: from a kubeconfig file.
async fn client_with(api: &FakeKubeApi, retry: bool) -> Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    api.write_kubeconfig(&path);
    let kubeconfig = Kubeconfig::read_from(&path).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.default_retry = retry;
    Client::try_from(config).unwrap()
}

async fn client(api: &FakeKubeApi) -> Client {
    client_with(api, true).await
}

fn web_service(labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "labels": labels},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    })
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn server_side_apply_get_and_list_by_label() {
    let api = FakeKubeApi::start().await;
    let client = client(&api).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let params = PatchParams::apply("fedingress-agent").force();

    let applied = services
        .patch(
            "web",
            &params,
            &Patch::Apply(web_service(json!({"app": "web", "old": "x"}))),
        )
        .await
        .unwrap();
    assert!(applied.metadata.uid.is_some());
    assert_eq!(applied.metadata.generation, Some(1));
    let managed = applied.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("fedingress-agent"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));

    let request = api.wait_for_request(|r| r.is_apply(), WAIT).await.unwrap();
    assert_eq!(request.path, "/api/v1/namespaces/default/services/web");
    assert_eq!(
        request.param("fieldManager").as_deref(),
        Some("fedingress-agent")
    );
    assert_eq!(request.param("force").as_deref(), Some("true"));
    assert_eq!(request.bearer_token.as_deref(), Some(TOKEN));
    assert_eq!(request.body_json().unwrap()["spec"]["type"], "LoadBalancer");

    // Re-applying the same object is a no-op; dropping a label removes it.
    let again = services
        .patch(
            "web",
            &params,
            &Patch::Apply(web_service(json!({"app": "web", "old": "x"}))),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), applied.resource_version());
    let mut changed = web_service(json!({"app": "web"}));
    changed["spec"]["type"] = json!("ClusterIP");
    let changed = services
        .patch("web", &params, &Patch::Apply(changed))
        .await
        .unwrap();
    assert_eq!(changed.labels().get("old"), None);
    assert_eq!(changed.metadata.generation, Some(2));
    assert_ne!(changed.resource_version(), applied.resource_version());

    let got = services.get("web").await.unwrap();
    assert_eq!(got.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        api.get("services", "default", "web").unwrap()["metadata"]["uid"],
        json!(got.metadata.uid)
    );

    api.put(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": "default", "labels": {"app": "db"}}, "spec": {}}));
    api.put(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "other", "labels": {"app": "web"}}, "spec": {}}));
    let names = |list: kube::core::ObjectList<Service>| -> Vec<String> {
        list.items.iter().map(|s| s.name_any()).collect()
    };
    assert_eq!(
        names(
            services
                .list(&ListParams::default().labels("app=web"))
                .await
                .unwrap()
        ),
        ["web"]
    );
    assert_eq!(
        names(
            services
                .list(&ListParams::default().labels("app!=web"))
                .await
                .unwrap()
        ),
        ["db"]
    );
    assert_eq!(
        names(
            services
                .list(&ListParams::default().labels("app in (db,web),!old"))
                .await
                .unwrap()
        ),
        ["db", "web"]
    );
    let everywhere: Api<Service> = Api::all(client.clone());
    let all = everywhere
        .list(&ListParams::default().labels("app==web"))
        .await
        .unwrap();
    let keys: Vec<String> = all
        .items
        .iter()
        .map(|s| format!("{}/{}", s.namespace().unwrap(), s.name_any()))
        .collect();
    assert_eq!(keys, ["default/web", "other/web"]);
    assert_eq!(
        all.metadata.resource_version,
        Some(api.resource_version().to_string())
    );

    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "33")
    );

    let missing = api_error(services.get("nope").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "services \"nope\" not found");
}

#[tokio::test]
async fn apply_conflicts_without_force_and_keeps_status() {
    let api = FakeKubeApi::start().await;
    let services: Api<Service> = Api::namespaced(client(&api).await, "default");
    services
        .patch(
            "web",
            &PatchParams::apply("fedingress-agent").force(),
            &Patch::Apply(web_service(json!({}))),
        )
        .await
        .unwrap();
    api.set_status(
        "v1",
        "Service",
        "default",
        "web",
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}),
    );

    let mut other = web_service(json!({}));
    other["spec"]["type"] = json!("NodePort");
    let conflict = api_error(
        services
            .patch(
                "web",
                &PatchParams::apply("someone-else"),
                &Patch::Apply(other.clone()),
            )
            .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict
            .message
            .contains("conflict with \"fedingress-agent\": .spec.type"),
        "{}",
        conflict.message
    );

    let forced = services
        .patch(
            "web",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(other),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().type_.as_deref(), Some("NodePort"));
    let ip = forced
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap()[0]
        .ip
        .clone();
    assert_eq!(ip.as_deref(), Some("192.0.2.7"), "apply keeps the status");

    // The status subresource takes a merge patch and leaves the spec alone.
    let patched = services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}, "spec": {"type": "ClusterIP"}})))
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().type_.as_deref(), Some("NodePort"));
    let ingress = patched
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    assert_eq!(ingress[0].hostname.as_deref(), Some("lb.example"));

    let missing_manager = api_error(
        services
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Apply(web_service(json!({}))),
            )
            .await,
    );
    assert_eq!(missing_manager.code, 400);
    let strategic = api_error(
        services
            .patch("web", &PatchParams::default(), &Patch::Strategic(json!({})))
            .await,
    );
    assert_eq!(strategic.code, 415);
}

#[tokio::test]
async fn watcher_sees_status_written_by_the_script() {
    let api = FakeKubeApi::start().await;
    // No bookmarks: the watcher must not learn of writes outside its selection.
    api.set_bookmark_interval(Duration::from_secs(3600));
    let services: Api<Service> = Api::namespaced(client(&api).await, "default");
    api.put(web_service(json!({"app": "web"})));
    api.put(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": "default", "labels": {"app": "db"}}, "spec": {}}));

    // Driven all along, as a controller drives it (a watcher only requests when polled).
    let mut stream = watcher(services, watcher::Config::default().labels("app=web")).boxed();
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            if tx.send(event).is_err() {
                return;
            }
        }
    });
    let mut next = async || {
        tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("a watcher event in time")
            .expect("the watcher runs")
            .unwrap()
    };
    assert!(matches!(next().await, watcher::Event::Init));
    match next().await {
        watcher::Event::InitApply(service) => assert_eq!(service.name_any(), "web"),
        other => panic!("expected the web service, got {other:?}"),
    }
    assert!(matches!(next().await, watcher::Event::InitDone));
    let list = api
        .wait_for_request(|r| r.verb() == Some("list"), WAIT)
        .await
        .unwrap();
    assert_eq!(list.param("limit").as_deref(), Some("500"));
    assert_eq!(list.param("labelSelector").as_deref(), Some("app=web"));
    let listed_at = api.resource_version().to_string();

    // Changes to objects outside the selection are not seen; the status write is.
    api.set_status(
        "v1",
        "services",
        "default",
        "db",
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}),
    );
    api.set_status(
        "v1",
        "services",
        "default",
        "web",
        json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}),
    );
    match next().await {
        watcher::Event::Apply(service) => {
            assert_eq!(service.name_any(), "web");
            let ingress = service
                .status
                .unwrap()
                .load_balancer
                .unwrap()
                .ingress
                .unwrap();
            assert_eq!(ingress[0].ip.as_deref(), Some("192.0.2.10"));
        }
        other => panic!("expected the status change, got {other:?}"),
    }
    // The watcher watches (lazily) from the list's resourceVersion.
    let watch = api
        .wait_for_request(|r| r.verb() == Some("watch"), WAIT)
        .await
        .unwrap();
    assert_eq!(watch.param("allowWatchBookmarks").as_deref(), Some("true"));
    assert_eq!(watch.param("timeoutSeconds").as_deref(), Some("290"));
    assert_eq!(watch.param("resourceVersion"), Some(listed_at));

    api.delete("services", "default", "web");
    assert!(matches!(next().await, watcher::Event::Delete(s) if s.name_any() == "web"));

    // History gone past the watcher's resourceVersion while its watch is down: the
    // watcher gets 410 and lists again.
    api.set_status("v1", "services", "default", "db", json!({}));
    api.compact();
    api.set_unavailable(true);
    api.wait_for_request(|r| r.status == 503, WAIT)
        .await
        .unwrap();
    api.put(web_service(json!({"app": "web"})));
    api.set_unavailable(false);
    let mut expired = false;
    loop {
        match tokio::time::timeout(WAIT, events.recv())
            .await
            .expect("the watcher recovers")
        {
            Some(Ok(watcher::Event::InitApply(service))) => {
                assert_eq!(service.name_any(), "web");
                break;
            }
            Some(Err(watcher::Error::WatchError(status))) => {
                assert_eq!(status.code, 410);
                expired = true;
            }
            Some(_) => {}
            None => panic!("the watcher ended"),
        }
    }
    assert!(expired, "the watcher re-listed after a 410");
}

#[tokio::test]
async fn raw_watch_bookmarks_timeout_and_expiry() {
    let api = FakeKubeApi::start().await;
    api.set_bookmark_interval(Duration::from_millis(100));
    let configmaps: Api<ConfigMap> = Api::namespaced(client(&api).await, "default");
    api.put(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "before", "namespace": "default"}}));
    let start = api.resource_version().to_string();
    api.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "1"}}));
    api.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "2"}}));
    // A write elsewhere moves the resourceVersion on: a bookmark tells the watch.
    api.put(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"}}));

    let params = WatchParams::default().timeout(2);
    let events: Vec<WatchEvent<ConfigMap>> = tokio::time::timeout(
        WAIT,
        configmaps
            .watch(&params, &start)
            .await
            .unwrap()
            .try_collect(),
    )
    .await
    .expect("the watch ends after timeoutSeconds")
    .unwrap();
    let kinds: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
    assert_eq!(kinds[..2], ["Added event", "Modified event"]);
    match events.last().unwrap() {
        WatchEvent::Bookmark(bookmark) => {
            assert_eq!(
                bookmark.metadata.resource_version,
                api.resource_version().to_string()
            );
            assert_eq!(bookmark.types.kind, "ConfigMap");
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }

    api.compact();
    let stale: Vec<WatchEvent<ConfigMap>> = configmaps
        .watch(&params, &start)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    match stale.as_slice() {
        [WatchEvent::Error(status)] => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn lease_replace_conflicts_on_a_stale_resource_version() {
    let api = FakeKubeApi::start().await;
    let leases: Api<Lease> = Api::namespaced(client(&api).await, "fedingress-system");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "agent-leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    assert_eq!(
        created.metadata.namespace.as_deref(),
        Some("fedingress-system")
    );
    let exists = api_error(leases.create(&PostParams::default(), &lease).await);
    assert_eq!(
        (exists.code, exists.reason.as_str()),
        (409, "AlreadyExists")
    );

    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let replaced = leases
        .replace("agent-leader", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_ne!(replaced.resource_version(), created.resource_version());

    // `created` carries the old resourceVersion now.
    let conflict = api_error(
        leases
            .replace("agent-leader", &PostParams::default(), &created)
            .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict
            .message
            .contains("leases.coordination.k8s.io \"agent-leader\""),
        "{}",
        conflict.message
    );
    assert_eq!(
        api.get("leases", "fedingress-system", "agent-leader")
            .unwrap()["spec"]["holderIdentity"],
        "b"
    );
}

#[tokio::test]
async fn denied_verbs_are_forbidden() {
    let api = FakeKubeApi::start().await;
    let client = client(&api).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    api.deny("", "services", "patch");
    let denied = api_error(
        services
            .patch(
                "web",
                &PatchParams::apply("fedingress-agent").force(),
                &Patch::Apply(web_service(json!({}))),
            )
            .await,
    );
    assert_eq!((denied.code, denied.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        denied.message,
        format!(
            "services \"web\" is forbidden: User \"{DEFAULT_USER}\" cannot patch resource \"services\" in API group \"\" in the namespace \"default\""
        )
    );
    api.set_user("system:serviceaccount:fedingress:agent");
    api.deny("coordination.k8s.io", "leases", "list");
    let all: Api<Lease> = Api::all(client);
    let denied = api_error(all.list(&ListParams::default()).await);
    assert_eq!(
        denied.message,
        "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:fedingress:agent\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" at the cluster scope"
    );
    api.allow("", "services", "patch");
    services
        .patch(
            "web",
            &PatchParams::apply("fedingress-agent").force(),
            &Patch::Apply(web_service(json!({}))),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn unavailable_server_fails_requests_until_it_is_back() {
    let api = FakeKubeApi::start().await;
    api.put(web_service(json!({})));
    api.set_unavailable(true);
    let no_retry: Api<Service> = Api::namespaced(client_with(&api, false).await, "default");
    let error = api_error(no_retry.get("web").await);
    assert_eq!(
        (error.code, error.reason.as_str()),
        (503, "ServiceUnavailable")
    );

    // kube's default client retries 503: the request succeeds once the server is back.
    let retrying: Api<Service> = Api::namespaced(client(&api).await, "default");
    let before = api.requests().len();
    let pending = tokio::spawn(async move { retrying.get("web").await });
    // Two refusals: the first try and a retry.
    api.wait_for_request(|r| r.seq > before && r.status == 503, WAIT)
        .await
        .unwrap();
    api.set_unavailable(false);
    let service = tokio::time::timeout(WAIT, pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(service.name_any(), "web");
    assert_eq!(api.requests().last().unwrap().status, 200);
}

#[tokio::test]
async fn verbs_used_names_every_rbac_verb() {
    let api = FakeKubeApi::start().await;
    let client = client(&api).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");

    services
        .patch(
            "web",
            &PatchParams::apply("fedingress-agent").force(),
            &Patch::Apply(web_service(json!({}))),
        )
        .await
        .unwrap();
    services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {}})),
        )
        .await
        .unwrap();
    services.get("web").await.unwrap();
    let deleted = services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_right(), "an immediate delete answers a Status");
    let gone = api_error(services.delete("web", &DeleteParams::default()).await);
    assert_eq!(gone.code, 404);

    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "c", "labels": {"x": "1"}}, "data": {"a": "b"}}),
    )
    .unwrap();
    let cm = configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    configmaps
        .replace("c", &PostParams::default(), &cm)
        .await
        .unwrap();
    configmaps
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("x=1"),
        )
        .await
        .unwrap();
    assert!(api.list("configmaps").is_empty());

    api.put(json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Service", "name": "web"}, "reason": "Sync", "type": "Warning"}));
    api.put(json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e2", "namespace": "default"},
        "involvedObject": {"kind": "Service", "name": "db"}, "reason": "Sync", "type": "Normal"}));
    let warnings = events
        .list(&ListParams::default().fields("involvedObject.name=web,type!=Normal"))
        .await
        .unwrap();
    assert_eq!(warnings.items.len(), 1);
    assert_eq!(warnings.items[0].reason.as_deref(), Some("Sync"));

    let mut stream = events
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        stream.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));
    drop(stream);

    let used = api.verbs_used();
    let expected: BTreeSet<(String, String, String)> = [
        ("", "services", "patch"),
        ("", "services/status", "patch"),
        ("", "services", "get"),
        ("", "services", "delete"),
        ("", "configmaps", "create"),
        ("", "configmaps", "update"),
        ("", "configmaps", "deletecollection"),
        ("", "events", "list"),
        ("", "events", "watch"),
    ]
    .into_iter()
    .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
    .collect();
    assert_eq!(used, expected);
}

#[tokio::test]
async fn watcher_pages_the_initial_list() {
    let api = FakeKubeApi::start().await;
    for i in 0..5 {
        api.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}"), "namespace": "default"}}));
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(client(&api).await, "default");
    let page = configmaps
        .list(&ListParams::default().limit(2))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(page.metadata.continue_.is_some());
    assert_eq!(page.metadata.remaining_item_count, Some(3));

    let mut stream = watcher(configmaps, watcher::Config::default().page_size(2)).boxed();
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::InitApply(cm) => seen.push(cm.name_any()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(seen, ["c0", "c1", "c2", "c3", "c4"]);
    let lists = api
        .requests()
        .into_iter()
        .filter(|r| r.verb() == Some("list"))
        .count();
    assert_eq!(lists, 1 + 3, "one direct list, three pages");
}

#[tokio::test]
async fn stop_ends_watches_and_refuses_connections() {
    let api = FakeKubeApi::start().await;
    let client = client_with(&api, false).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut stream = configmaps
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    api.stop();
    let end = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the watch ends when the server stops");
    assert!(end.as_ref().is_none_or(|event| event.is_err()), "{end:?}");
    assert!(configmaps.get("c").await.is_err());
}
