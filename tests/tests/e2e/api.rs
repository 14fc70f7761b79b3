//! The REST API over the wire: Kubernetes semantics kubectl does not exercise, and bad
//! input that must get a clear error without harming the store.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use fedingress_tests::{Process, binary};
use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

struct Api {
    _dir: tempfile::TempDir,
    _server: Process,
    base: String,
    client: reqwest::Client,
}

fn start(config: &str) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("apiserver.yaml");
    std::fs::write(&config_path, config).unwrap();
    let mut command = Command::new(binary("federation-apiserver"));
    command
        .args([
            "--dev",
            "--listen",
            "127.0.0.1:0",
            "--agent-listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.path().join("data"));
    let server = Process::start(command, "federation-apiserver", Duration::from_secs(30)).unwrap();
    let base = format!("http://{}", server.addr("api"));
    Api {
        _dir: dir,
        _server: server,
        base,
        client: reqwest::Client::new(),
    }
}

const NS: &str = "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses";

fn ingress(name: &str, port: i64) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name, "labels": {"app": "echo", "n": name}},
        "spec": {
            "rules": [{"protocol": "TCP", "port": port, "backend": {"service": "echo", "port": 7000}}],
            "traffic": {"dnsName": format!("{name}.fedingress.test")}
        }
    })
}

impl Api {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let response = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::GET, path, "application/json", Vec::new())
            .await
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(
            reqwest::Method::POST,
            path,
            "application/json",
            body.to_string().into_bytes(),
        )
        .await
    }
}

#[tokio::test]
async fn discovery_documents() {
    let api = start("");
    let (code, version) = api.get("/version").await;
    assert_eq!(
        (code, version["major"].clone(), version["minor"].clone()),
        (StatusCode::OK, json!("1"), json!("32"))
    );
    let (_, groups) = api.get("/apis").await;
    assert_eq!(groups["groups"][0]["name"], "fedingress.io");
    let (_, resources) = api.get("/apis/fedingress.io/v1alpha1").await;
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"federatedingresses") && names.contains(&"clusters/status"),
        "{names:?}"
    );
    let (_, index) = api.get("/openapi/v3").await;
    let url = index["paths"]["apis/fedingress.io/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, doc) = api.get(&url).await;
    assert_eq!(code, StatusCode::OK);
    assert!(doc["components"]["schemas"]["io.fedingress.v1alpha1.FederatedIngress"].is_object());
    for path in ["/healthz", "/readyz"] {
        assert_eq!(api.get(path).await.0, StatusCode::OK);
    }
    let (code, _) = api.get("/apis/other.io/v1").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn semantics_of_writes() {
    let api = start("");
    let (code, created) = api.post(NS, &ingress("a", 7000)).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(
        created["metadata"]["uid"].is_string()
            && created["metadata"]["creationTimestamp"].is_string()
    );
    let (code, again) = api.post(NS, &ingress("a", 7000)).await;
    assert_eq!(
        (code, again["reason"].clone()),
        (StatusCode::CONFLICT, json!("AlreadyExists"))
    );

    // Labels do not move the generation; spec changes do.
    let merge = |patch: Value| patch.to_string().into_bytes();
    let (code, patched) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a"),
            "application/merge-patch+json",
            merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await;
    assert_eq!(
        (code, patched["metadata"]["generation"].clone()),
        (StatusCode::OK, json!(1))
    );
    let (_, patched) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a"),
            "application/merge-patch+json",
            merge(json!({"spec": {"traffic": {"ttl": 99}}})),
        )
        .await;
    assert_eq!(patched["metadata"]["generation"], 2);

    // Status goes through the status subresource only.
    let status = json!({"status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}});
    let (code, _) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a"),
            "application/merge-patch+json",
            merge(status.clone()),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert!(api.get(&format!("{NS}/a")).await.1["status"]["observedGeneration"].is_null());
    let (code, with_status) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a/status"),
            "application/merge-patch+json",
            merge(json!({"status": {"observedGeneration": 2}, "spec": {"traffic": {"ttl": 5}}})),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{with_status}");
    assert_eq!(with_status["status"]["observedGeneration"], 2);
    assert_eq!(
        with_status["spec"]["traffic"]["ttl"], 99,
        "spec changes are ignored on status"
    );

    // Optimistic concurrency: a stale resourceVersion is a Conflict.
    let mut stale = api.get(&format!("{NS}/a")).await.1;
    api.send(
        reqwest::Method::PATCH,
        &format!("{NS}/a"),
        "application/merge-patch+json",
        merge(json!({"metadata": {"labels": {"z": "1"}}})),
    )
    .await;
    stale["spec"]["traffic"]["ttl"] = json!(7);
    let (code, conflict) = api
        .send(
            reqwest::Method::PUT,
            &format!("{NS}/a"),
            "application/json",
            stale.to_string().into_bytes(),
        )
        .await;
    assert_eq!(
        (code, conflict["reason"].clone()),
        (StatusCode::CONFLICT, json!("Conflict"))
    );

    // Field errors carry their paths.
    let (code, invalid) = api.post(NS, &ingress("b", 70000)).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        invalid["details"]["causes"][0]["field"],
        "spec.rules[0].port"
    );

    // Patch types.
    let (code, _) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a"),
            "application/strategic-merge-patch+json",
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (code, ssa) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a"),
            "application/apply-patch+yaml",
            b"{}".to_vec(),
        )
        .await;
    // Server-side apply is served; without a fieldManager it is refused as kube does.
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(
        ssa["message"],
        "fieldManager is required for apply requests"
    );
    let (code, _) = api
        .send(
            reqwest::Method::PATCH,
            &format!("{NS}/a"),
            "application/json-patch+json",
            br#"[{"op":"test","path":"/spec/traffic/ttl","value":1}]"#.to_vec(),
        )
        .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);

    // A YAML body works; a cluster-scoped kind under a namespace does not exist.
    let yaml = b"apiVersion: fedingress.io/v1alpha1\nkind: Cluster\nmetadata: {name: eu}\nspec: {region: eu, location: {latitude: 1, longitude: 2}}\n".to_vec();
    let (code, _) = api
        .send(
            reqwest::Method::POST,
            "/apis/fedingress.io/v1alpha1/clusters",
            "application/yaml",
            yaml,
        )
        .await;
    assert_eq!(code, StatusCode::CREATED);
    assert_eq!(
        api.get("/apis/fedingress.io/v1alpha1/namespaces/default/clusters")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    // DELETE on the collection is deletecollection: the list of what it deleted.
    let (code, deleted) = api
        .send(reqwest::Method::DELETE, NS, "application/json", Vec::new())
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(deleted["kind"], "FederatedIngressList");
}

#[tokio::test]
async fn lists_select_and_page() {
    let api = start("");
    for n in 0..25 {
        assert_eq!(
            api.post(NS, &ingress(&format!("i{n:02}"), 7000)).await.0,
            StatusCode::CREATED
        );
    }
    let other = "/apis/fedingress.io/v1alpha1/namespaces/other/federatedingresses";
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}});
    assert_eq!(
        api.post("/api/v1/namespaces", &namespace).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post(other, &ingress("elsewhere", 7000)).await.0,
        StatusCode::CREATED
    );

    let mut names = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let (code, page) = api.get(&format!("{NS}?limit=10&continue={token}")).await;
        assert_eq!(code, StatusCode::OK, "{page}");
        pages += 1;
        names.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string()),
        );
        match page["metadata"]["continue"].as_str() {
            Some(next) => token = next.to_string(),
            None => break,
        }
    }
    assert_eq!((pages, names.len()), (3, 25));
    let (_, all) = api
        .get("/apis/fedingress.io/v1alpha1/federatedingresses")
        .await;
    assert_eq!(all["items"].as_array().unwrap().len(), 26);
    let (_, selected) = api
        .get(&format!("{NS}?labelSelector=n%20in%20(i01,i02)"))
        .await;
    assert_eq!(selected["items"].as_array().unwrap().len(), 2);
    let (_, by_name) = api.get("/apis/fedingress.io/v1alpha1/federatedingresses?fieldSelector=metadata.namespace%3Dother").await;
    assert_eq!(by_name["items"][0]["metadata"]["name"], "elsewhere");

    for bad in [
        "?labelSelector=a%20in%20(",
        "?fieldSelector=spec.x%3D1",
        "?limit=abc",
        "?continue=garbage",
        "?resourceVersion=abc&watch=true",
    ] {
        let (code, status) = api.get(&format!("{NS}{bad}")).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}: {status}");
        assert_eq!(status["kind"], "Status");
    }
}

#[tokio::test]
async fn bad_input_never_harms_the_store() {
    let api = start("");
    assert_eq!(
        api.post(NS, &ingress("keep", 7000)).await.0,
        StatusCode::CREATED
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("application/json", b"{not json".to_vec()),
        ("application/json", b"[1, 2, 3]".to_vec()),
        ("application/yaml", b"kind: [".to_vec()),
        ("application/json", json!({"apiVersion": "apps/v1", "kind": "FederatedIngress", "metadata": {"name": "x"}}).to_string().into_bytes()),
        ("application/json", json!({"apiVersion": "fedingress.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "x"}}).to_string().into_bytes()),
        ("application/json", json!({"metadata": {"name": "x"}, "spec": {"rules": "nope"}}).to_string().into_bytes()),
    ];
    for (content_type, body) in cases {
        let (code, status) = api
            .send(reqwest::Method::POST, NS, content_type, body.clone())
            .await;
        assert_eq!(
            code,
            StatusCode::BAD_REQUEST,
            "{}: {status}",
            String::from_utf8_lossy(&body)
        );
        assert!(status["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let (code, _) = api
        .send(
            reqwest::Method::POST,
            NS,
            "application/vnd.kubernetes.protobuf",
            b"\x00".to_vec(),
        )
        .await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let huge = vec![b' '; 4 * 1024 * 1024];
    let (code, _) = api
        .send(reqwest::Method::POST, NS, "application/json", huge)
        .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let (code, keep) = api.get(&format!("{NS}/keep")).await;
    assert_eq!(
        (code, keep["metadata"]["name"].clone()),
        (StatusCode::OK, json!("keep"))
    );
    let (code, metrics) = api.get("/metrics").await;
    assert_eq!(code, StatusCode::OK);
    let text = metrics.as_str().unwrap().to_string();
    assert!(
        text.contains(
            "apiserver_request_total{verb=\"create\",resource=\"federatedingresses\",code=\"400\"}"
        ),
        "{text}"
    );
    assert!(text.contains("apiserver_storage_revision"));
}

#[tokio::test]
async fn watch_events_bookmarks_and_gone() {
    let api =
        start("storage:\n  compactionIntervalSeconds: 1\nwatch:\n  bookmarkIntervalSeconds: 1\n");
    let (_, created) = api.post(NS, &ingress("w", 7000)).await;
    let rv: i64 = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let url = format!(
        "{}{NS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&labelSelector=app%3Decho",
        api.base
    );
    let response = api.client.get(&url).send().await.unwrap();
    let mut stream = response.bytes_stream();
    // Relabelling out of the selector is a DELETED event, back in is ADDED.
    let merge = |labels: Value| {
        json!({"metadata": {"labels": labels}})
            .to_string()
            .into_bytes()
    };
    api.send(
        reqwest::Method::PATCH,
        &format!("{NS}/w"),
        "application/merge-patch+json",
        merge(json!({"x": "1"})),
    )
    .await;
    api.send(
        reqwest::Method::PATCH,
        &format!("{NS}/w"),
        "application/merge-patch+json",
        merge(json!({"app": "other"})),
    )
    .await;
    api.send(
        reqwest::Method::PATCH,
        &format!("{NS}/w"),
        "application/merge-patch+json",
        merge(json!({"app": "echo"})),
    )
    .await;
    api.send(
        reqwest::Method::DELETE,
        &format!("{NS}/w"),
        "application/json",
        Vec::new(),
    )
    .await;
    let mut seen = Vec::new();
    let mut buffer = Vec::new();
    while !seen.contains(&"BOOKMARK".to_string())
        || seen.iter().filter(|t| *t == "DELETED").count() < 2
    {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            seen.push(event["type"].as_str().unwrap().to_string());
        }
    }
    // The hub's controller may write status in between (more MODIFIED events); the
    // selector transitions are what must be there, in order.
    let changes: Vec<&String> = seen.iter().filter(|t| *t != "BOOKMARK").collect();
    assert_eq!(changes[0], "MODIFIED", "{changes:?}");
    let transitions: Vec<&&String> = changes.iter().filter(|t| **t != "MODIFIED").collect();
    assert_eq!(
        transitions,
        [&"DELETED", &"ADDED", &"DELETED"],
        "{changes:?}"
    );

    // Once history is compacted, a watch from the old revision gets 410 Gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let body = api
            .client
            .get(format!("{}{NS}?watch=true&resourceVersion={rv}", api.base))
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap_or_default();
        if body.contains("\"code\":410") {
            assert!(body.contains("\"type\":\"ERROR\""), "{body}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no 410 Gone after compaction: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
