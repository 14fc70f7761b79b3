//! Hostile-input soak of the REST API (issue 12): random and mutated bodies (valid
//! FederatedIngress and Cluster JSON and YAML, mutated: wrong types, deep nesting, huge
//! strings, invalid UTF-8), headers (content types, Content-Length lies, huge headers)
//! and query strings (selectors, limit, continue, resourceVersion, timeoutSeconds
//! garbage) against a real federation-apiserver over raw HTTP/1.1. Afterwards: it is
//! alive and ready, the objects it held are unchanged, well-formed requests are
//! answered correctly, and `/metrics` labels stayed in their fixed set.
//!
//! The serving limits are checked here too, each against a server configured with a
//! small limit: header-read timeout (slowloris), connection cap, watch caps,
//! `timeoutSeconds` cap, mutating in-flight cap, HTTP/2 idle timeout.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use fedingress_tests::soak::{
    Rng, exchange, label_values, metric, mutate_some, scaled, start_apiserver,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GROUP: &str = "/apis/fedingress.io/v1alpha1";
const INGRESSES: &str = "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses";
const CLUSTERS: &str = "/apis/fedingress.io/v1alpha1/clusters";
/// Generous bound for anything the test waits for (a shared, noisy machine).
const WAIT: Duration = Duration::from_secs(60);

fn ingress(name: &str, port: i64) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name, "labels": {"app": "echo"}},
        "spec": {
            "rules": [{"protocol": "TCP", "port": port, "backend": {"service": "echo", "port": 7000}}],
            "traffic": {"dnsName": format!("{name}.fedingress.test")}
        }
    })
}

fn cluster(name: &str) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "labels": {"env": "soak"}},
        "spec": {"region": "eu", "location": {"latitude": 50.1, "longitude": 8.6}}
    })
}

/// A raw HTTP/1.1 request: the answer's status code (0: none) and body.
async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let answer = exchange(addr, request, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&answer).to_string();
    let code = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (code, body)
}

/// A well-formed request with a JSON body (or none).
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: soak\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (code, text) = raw(addr, request.as_bytes()).await;
    // Chunked answers (watches): keep the JSON lines only.
    let value = serde_json::from_str(&text).unwrap_or_else(|_| {
        Value::Array(
            text.lines()
                .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                .filter(Value::is_object)
                .collect(),
        )
    });
    (code, value)
}

async fn metrics_text(addr: SocketAddr) -> String {
    let request = "GET /metrics HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n";
    raw(addr, request.as_bytes()).await.1
}

// ---- what the generator builds -------------------------------------------------------

#[derive(Arbitrary, Debug)]
enum MethodChoice {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
    Options,
    Garbage(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum PathChoice {
    Ingresses,
    IngressesAllNamespaces,
    Ingress(u8),
    IngressSub(u8, Vec<u8>),
    Clusters,
    Cluster(u8),
    ClusterStatus(u8),
    ClusterToken(u8),
    Explain(u8),
    Events,
    Discovery(u8),
    /// Random segments under the group.
    Random(Vec<Vec<u8>>),
    /// Very many segments.
    Deep(u16),
    Traversal,
}

#[derive(Arbitrary, Debug)]
enum QueryPart {
    LabelSelector(Selector),
    FieldSelector(Selector),
    Limit(i64),
    LimitText(Vec<u8>),
    Continue(Vec<u8>),
    ResourceVersion(i64),
    ResourceVersionText(Vec<u8>),
    TimeoutSeconds(i64),
    TimeoutText(Vec<u8>),
    Watch(bool),
    DryRun(bool),
    FieldValidation(u8),
    Raw(Vec<u8>, Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Selector {
    Valid(u8),
    Garbage(Vec<u8>),
    Long(u16),
}

#[derive(Arbitrary, Debug)]
enum BodyChoice {
    None,
    /// A valid object (ingress or cluster), JSON, then mutated.
    MutatedJson {
        cluster: bool,
        mutations: u8,
    },
    /// The same as YAML, mutated.
    MutatedYaml {
        cluster: bool,
        mutations: u8,
    },
    /// Valid structure, wrong types in chosen places.
    WrongTypes(u8),
    /// `[[[[…]]]]` or `{"a":{"a":…}}` this deep.
    Deep {
        depth: u16,
        yaml: bool,
    },
    /// A name or label this long (KiB).
    Huge {
        kib: u16,
    },
    InvalidUtf8,
    /// YAML anchors that expand exponentially ("billion laughs").
    AliasBomb(u8),
    Random(Vec<u8>),
    MergePatch(Vec<u8>),
    JsonPatch(u8),
}

#[derive(Arbitrary, Debug)]
enum ContentType {
    Json,
    Yaml,
    MergePatch,
    JsonPatch,
    ApplyPatch,
    StrategicMerge,
    Missing,
    Garbage(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Framing {
    Honest,
    /// Content-Length off by this much (more or less than sent).
    LengthLie(i16),
    LengthGarbage(Vec<u8>),
    TwoLengths,
    Chunked,
    BrokenChunks,
    /// One header this long (KiB).
    HugeHeader(u16),
    /// This many headers.
    ManyHeaders(u16),
    Http10,
    BadVersion,
}

#[derive(Arbitrary, Debug)]
struct Plan {
    method: MethodChoice,
    path: PathChoice,
    query: Vec<QueryPart>,
    accept_table: bool,
    content_type: ContentType,
    body: BodyChoice,
    framing: Framing,
}

fn percent(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~=,!()".contains(b) {
                (*b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Writes only ever go to names in `soak-*`: the `keep-*` objects must not change.
fn soak_name(n: u8) -> String {
    format!("soak-{}", n % 8)
}

fn selector(s: &Selector) -> String {
    match s {
        Selector::Valid(n) => [
            "app=echo",
            "app!=echo",
            "app in (echo,x)",
            "!app",
            "metadata.name=keep-a",
            "env notin (soak)",
        ][*n as usize % 6]
            .to_string(),
        Selector::Garbage(bytes) => percent(bytes),
        Selector::Long(n) => "a=".to_string() + &"b".repeat(*n as usize % 20_000),
    }
}

fn body_bytes(rng: &mut Rng, body: &BodyChoice) -> Vec<u8> {
    let object = |rng: &mut Rng, cluster_kind: bool| {
        let name = soak_name(rng.below(256) as u8);
        if cluster_kind {
            cluster(&name)
        } else {
            ingress(&name, 1000 + rng.below(5000) as i64)
        }
    };
    match body {
        BodyChoice::None => Vec::new(),
        BodyChoice::MutatedJson { cluster, mutations } => {
            let mut bytes = object(rng, *cluster).to_string().into_bytes();
            if !mutations.is_multiple_of(4) {
                mutate_some(rng, &mut bytes, *mutations as usize % 8);
            }
            bytes
        }
        BodyChoice::MutatedYaml { cluster, mutations } => {
            let mut bytes = yaml_serde::to_string(&object(rng, *cluster))
                .unwrap()
                .into_bytes();
            if !mutations.is_multiple_of(4) {
                mutate_some(rng, &mut bytes, *mutations as usize % 8);
            }
            bytes
        }
        BodyChoice::WrongTypes(which) => {
            let mut value = object(rng, which.is_multiple_of(2));
            let wrong = [
                json!(null),
                json!(42),
                json!("text"),
                json!([1, 2]),
                json!({"x": 1}),
                json!(1e308),
                json!(-1),
                json!(true),
            ][*which as usize % 8]
                .clone();
            let field = match which / 8 % 6 {
                0 => "/metadata",
                1 => "/metadata/name",
                2 => "/spec",
                3 => "/metadata/labels",
                4 => "/apiVersion",
                _ => "/kind",
            };
            if let Some(slot) = value.pointer_mut(field) {
                *slot = wrong;
            }
            if let Some(rules) = value.pointer_mut("/spec/rules/0/port") {
                *rules = json!(["port"]);
            }
            value.to_string().into_bytes()
        }
        BodyChoice::Deep { depth, yaml } => {
            let depth = *depth as usize % 100_000;
            if *yaml && depth.is_multiple_of(2) {
                "[".repeat(depth).into_bytes()
            } else if *yaml {
                "- ".repeat(depth).into_bytes()
            } else {
                let mut text = "{\"a\":".repeat(depth);
                text.push('1');
                text.push_str(&"}".repeat(depth));
                text.into_bytes()
            }
        }
        BodyChoice::Huge { kib } => {
            // Mostly under the 3 MiB body cap, one in eight over it.
            let kib = if kib.is_multiple_of(8) {
                3 * 1024 + (*kib as usize % 1024)
            } else {
                *kib as usize % 512
            };
            let mut value = object(rng, false);
            value["metadata"]["labels"]["big"] = json!("BIG");
            value
                .to_string()
                .replacen("BIG", &"x".repeat(kib * 1024), 1)
                .into_bytes()
        }
        BodyChoice::InvalidUtf8 => {
            let mut bytes = object(rng, false).to_string().into_bytes();
            let at = rng.below(bytes.len());
            bytes.splice(at..at, [0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80]);
            bytes
        }
        BodyChoice::AliasBomb(levels) => {
            let mut text = String::from(
                "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
            );
            let mut previous = "a".to_string();
            for level in 0..(*levels % 12) {
                let name = format!("l{level}");
                let refs = vec![format!("*{previous}"); 9].join(",");
                text.push_str(&format!("{name}: &{name} [{refs}]\n"));
                previous = name;
            }
            text.into_bytes()
        }
        BodyChoice::Random(bytes) => bytes.clone(),
        BodyChoice::MergePatch(bytes) => {
            let mut patch = json!({"metadata": {"labels": {"soak": percent(bytes)}}})
                .to_string()
                .into_bytes();
            mutate_some(rng, &mut patch, 2);
            patch
        }
        BodyChoice::JsonPatch(n) => {
            let ops = [
                json!([{"op": "replace", "path": "/spec/rules/0/port", "value": 8080}]),
                json!([{"op": "remove", "path": "/spec"}]),
                json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}]),
                json!([{"op": "test", "path": "/nope", "value": 1}]),
                json!([{"op": "move", "from": "/spec", "path": "/spec/rules"}]),
                json!([{"op": "copy", "from": "/metadata", "path": "/metadata/x/y/z"}]),
            ];
            ops[*n as usize % ops.len()].to_string().into_bytes()
        }
    }
}

/// Renders a plan into the raw bytes of one request.
fn render(rng: &mut Rng, plan: &Plan) -> Vec<u8> {
    let method: Vec<u8> = match &plan.method {
        MethodChoice::Get => b"GET".to_vec(),
        MethodChoice::Post => b"POST".to_vec(),
        MethodChoice::Put => b"PUT".to_vec(),
        MethodChoice::Patch => b"PATCH".to_vec(),
        MethodChoice::Delete => b"DELETE".to_vec(),
        MethodChoice::Head => b"HEAD".to_vec(),
        MethodChoice::Options => b"OPTIONS".to_vec(),
        MethodChoice::Garbage(bytes) => bytes.iter().take(16).copied().collect(),
    };
    let path = match &plan.path {
        PathChoice::Ingresses => INGRESSES.to_string(),
        PathChoice::IngressesAllNamespaces => format!("{GROUP}/federatedingresses"),
        PathChoice::Ingress(n) => format!("{INGRESSES}/{}", soak_name(*n)),
        PathChoice::IngressSub(n, sub) => {
            format!("{INGRESSES}/{}/{}", soak_name(*n), percent(sub))
        }
        PathChoice::Clusters => CLUSTERS.to_string(),
        PathChoice::Cluster(n) => format!("{CLUSTERS}/{}", soak_name(*n)),
        PathChoice::ClusterStatus(n) => format!("{CLUSTERS}/{}/status", soak_name(*n)),
        PathChoice::ClusterToken(n) => format!("{CLUSTERS}/{}/token", soak_name(*n)),
        PathChoice::Explain(n) => format!("{INGRESSES}/{}/explain", soak_name(*n)),
        PathChoice::Events => "/api/v1/namespaces/default/events".to_string(),
        PathChoice::Discovery(n) => [
            "/api",
            "/apis",
            "/api/v1",
            GROUP,
            "/openapi/v3",
            "/openapi/v2",
            "/version",
            "/metrics",
            "/readyz?verbose",
        ][*n as usize % 9]
            .to_string(),
        PathChoice::Random(segments) => {
            let mut path = GROUP.to_string();
            for segment in segments.iter().take(12) {
                path.push('/');
                path.push_str(&percent(segment));
            }
            path
        }
        PathChoice::Deep(n) => format!("{GROUP}{}", "/x".repeat(*n as usize % 4000)),
        PathChoice::Traversal => format!("{GROUP}/../../../etc/passwd"),
    };
    let mut query = Vec::new();
    // A DELETE on a collection is a deletecollection: it is soaked too, limited to the
    // objects the soak labelled (`soak`, set by its merge patches on soak-* names), so the
    // kept objects stay. The first value of a parameter wins, so later selectors cannot
    // widen it.
    let collection = matches!(
        plan.path,
        PathChoice::Ingresses | PathChoice::Clusters | PathChoice::Events
    );
    if matches!(plan.method, MethodChoice::Delete) && collection {
        query.push("labelSelector=soak".to_string());
    }
    for part in plan.query.iter().take(8) {
        query.push(match part {
            QueryPart::LabelSelector(s) => {
                format!("labelSelector={}", percent(selector(s).as_bytes()))
            }
            QueryPart::FieldSelector(s) => {
                format!("fieldSelector={}", percent(selector(s).as_bytes()))
            }
            QueryPart::Limit(n) => format!("limit={n}"),
            QueryPart::LimitText(b) => format!("limit={}", percent(b)),
            QueryPart::Continue(b) => format!("continue={}", percent(b)),
            QueryPart::ResourceVersion(n) => format!("resourceVersion={n}"),
            QueryPart::ResourceVersionText(b) => format!("resourceVersion={}", percent(b)),
            // Watches end at once (timeoutSeconds=1) unless the generator says otherwise.
            QueryPart::TimeoutSeconds(n) => format!("timeoutSeconds={}", n.rem_euclid(3)),
            QueryPart::TimeoutText(b) => format!("timeoutSeconds={}", percent(b)),
            QueryPart::Watch(w) => format!("watch={w}&timeoutSeconds=1"),
            QueryPart::DryRun(all) => format!("dryRun={}", if *all { "All" } else { "Some" }),
            QueryPart::FieldValidation(n) => format!(
                "fieldValidation={}",
                ["Strict", "Warn", "Ignore", "strict", ""][*n as usize % 5]
            ),
            QueryPart::Raw(k, v) => format!("{}={}", percent(k), percent(v)),
        });
    }
    let mut target = path;
    if !query.is_empty() {
        target.push('?');
        target.push_str(&query.join("&"));
    }
    let body = body_bytes(rng, &plan.body);
    let content_type: Option<Vec<u8>> = match &plan.content_type {
        ContentType::Json => Some(b"application/json".to_vec()),
        ContentType::Yaml => Some(b"application/yaml".to_vec()),
        ContentType::MergePatch => Some(b"application/merge-patch+json".to_vec()),
        ContentType::JsonPatch => Some(b"application/json-patch+json".to_vec()),
        ContentType::ApplyPatch => Some(b"application/apply-patch+yaml".to_vec()),
        ContentType::StrategicMerge => Some(b"application/strategic-merge-patch+json".to_vec()),
        ContentType::Missing => None,
        ContentType::Garbage(bytes) => Some(
            bytes
                .iter()
                .filter(|b| **b != b'\r' && **b != b'\n')
                .take(200)
                .copied()
                .collect(),
        ),
    };
    let version: &[u8] = match plan.framing {
        Framing::Http10 => b"HTTP/1.0",
        Framing::BadVersion => b"HTTP/9.9",
        _ => b"HTTP/1.1",
    };
    let mut out = Vec::new();
    out.extend_from_slice(&method);
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.push(b' ');
    out.extend_from_slice(version);
    out.extend_from_slice(b"\r\nHost: soak\r\nConnection: close\r\n");
    if plan.accept_table {
        out.extend_from_slice(b"Accept: application/json;as=Table;v=v1;g=meta.k8s.io\r\n");
    }
    if let Some(content_type) = content_type {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(&content_type);
        out.extend_from_slice(b"\r\n");
    }
    let length = |out: &mut Vec<u8>, n: i64| {
        out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
    };
    match &plan.framing {
        Framing::Honest | Framing::Http10 | Framing::BadVersion => {
            length(&mut out, body.len() as i64)
        }
        Framing::LengthLie(delta) => length(&mut out, (body.len() as i64 + *delta as i64).max(0)),
        Framing::LengthGarbage(bytes) => {
            out.extend_from_slice(b"Content-Length: ");
            out.extend(
                bytes
                    .iter()
                    .filter(|b| **b != b'\r' && **b != b'\n')
                    .take(30),
            );
            out.extend_from_slice(b"\r\n");
        }
        Framing::TwoLengths => {
            length(&mut out, body.len() as i64);
            length(&mut out, body.len() as i64 / 2);
        }
        Framing::Chunked | Framing::BrokenChunks => {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n")
        }
        Framing::HugeHeader(kib) => {
            length(&mut out, body.len() as i64);
            out.extend_from_slice(b"X-Huge: ");
            out.resize(out.len() + (*kib as usize % 2048) * 1024, b'h');
            out.extend_from_slice(b"\r\n");
        }
        Framing::ManyHeaders(n) => {
            length(&mut out, body.len() as i64);
            for i in 0..(*n as usize % 2000) {
                out.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
            }
        }
    }
    out.extend_from_slice(b"\r\n");
    match &plan.framing {
        Framing::Chunked => {
            for chunk in body.chunks(100) {
                out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        Framing::BrokenChunks => {
            out.extend_from_slice(b"fffffffffffffffff\r\n");
            out.extend_from_slice(&body);
        }
        _ => out.extend_from_slice(&body),
    }
    out
}

// ---- the soak -----------------------------------------------------------------------

/// The parts of an object a stray write would change.
fn identity(object: &Value) -> Value {
    json!({
        "uid": object["metadata"]["uid"],
        "name": object["metadata"]["name"],
        "generation": object["metadata"]["generation"],
        "labels": object["metadata"]["labels"],
        "annotations": object["metadata"]["annotations"],
        "spec": object["spec"],
    })
}

async fn kept(addr: SocketAddr) -> Vec<Value> {
    let mut objects = Vec::new();
    for path in [
        format!("{INGRESSES}/keep-a"),
        format!("{INGRESSES}/keep-b"),
        format!("{CLUSTERS}/keep-c"),
    ] {
        let (code, object) = call(addr, "GET", &path, None).await;
        assert_eq!(code, 200, "{path}: {object}");
        objects.push(identity(&object));
    }
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_api_survives_random_and_mutated_requests() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    // Watches the generator opens end within 2 s.
    let server = start_apiserver(
        dir.path(),
        "limits:\n  maxWatchTimeoutSeconds: 2\n",
        &["--min-request-timeout", "1"],
    );
    let addr: SocketAddr = server.addr("api").parse().unwrap();
    for (path, object) in [
        (INGRESSES, ingress("keep-a", 7001)),
        (INGRESSES, ingress("keep-b", 7002)),
        (CLUSTERS, cluster("keep-c")),
    ] {
        let (code, answer) = call(addr, "POST", path, Some(&object)).await;
        assert_eq!(code, 201, "{answer}");
    }
    let before = kept(addr).await;
    eprintln!("soak_api: seeded at {:?}", t0.elapsed());

    let mut rng = Rng::from_env("soak_api", 0x5eed_0001);
    let count = scaled(10_000);
    let plans: Vec<Vec<u8>> = (0..count)
        .map(|_| {
            let mut plan: Plan = rng.arbitrary();
            // One in three: well framed, so the body reaches decoding and validation.
            if rng.chance(33) {
                plan.framing = Framing::Honest;
                let cluster_kind = rng.chance(50);
                let yaml = rng.chance(30);
                plan.method = MethodChoice::Post;
                plan.path = if cluster_kind {
                    PathChoice::Clusters
                } else {
                    PathChoice::Ingresses
                };
                plan.query.retain(|q| !matches!(q, QueryPart::Watch(_)));
                plan.content_type = if yaml {
                    ContentType::Yaml
                } else {
                    ContentType::Json
                };
                let mutations = rng.below(6) as u8;
                plan.body = match rng.below(4) {
                    0 | 1 if yaml => BodyChoice::MutatedYaml {
                        cluster: cluster_kind,
                        mutations,
                    },
                    0 | 1 => BodyChoice::MutatedJson {
                        cluster: cluster_kind,
                        mutations,
                    },
                    _ => std::mem::replace(&mut plan.body, BodyChoice::None),
                };
            }
            render(&mut rng, &plan)
        })
        .collect();
    eprintln!("soak_api: generated at {:?}", t0.elapsed());
    let started = Instant::now();
    let codes = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        u16,
        usize,
    >::new()));
    let requests = futures_util::stream::iter(plans.into_iter().map(|request| {
        let codes = codes.clone();
        async move {
            let one = Instant::now();
            let answer = exchange(addr, &request, Duration::from_secs(15)).await;
            if one.elapsed() > Duration::from_secs(3) {
                eprintln!(
                    "soak_api: slow ({:?}): {:?} -> {:?}",
                    one.elapsed(),
                    String::from_utf8_lossy(&request[..request.len().min(300)]),
                    String::from_utf8_lossy(&answer[..answer.len().min(200)])
                );
            }
            let code = answer
                .strip_prefix(b"HTTP/1.1 ")
                .and_then(|rest| rest.get(..3))
                .and_then(|code| std::str::from_utf8(code).ok()?.parse().ok())
                .unwrap_or(0u16);
            *codes.lock().unwrap().entry(code).or_default() += 1;
        }
    }));
    use futures_util::StreamExt;
    requests.buffer_unordered(16).collect::<Vec<()>>().await;
    eprintln!(
        "soak_api: {count} requests in {:?}; answers by code (0: connection closed without one): {:?}",
        started.elapsed(),
        codes.lock().unwrap()
    );
    let codes = codes.lock().unwrap().clone();
    assert!(
        !codes.contains_key(&500),
        "no request may end in an internal error: {codes:?}"
    );

    let checks = Instant::now();
    // Alive and ready, the kept objects unchanged.
    assert_eq!(
        raw(
            addr,
            b"GET /livez HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"
        )
        .await
        .0,
        200
    );
    assert_eq!(
        raw(
            addr,
            b"GET /readyz HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"
        )
        .await
        .0,
        200
    );
    assert_eq!(kept(addr).await, before, "a stored object changed");

    // Well-formed requests are answered correctly.
    let (code, created) = call(addr, "POST", INGRESSES, Some(&ingress("after", 7100))).await;
    assert_eq!(code, 201, "{created}");
    let (code, got) = call(addr, "GET", &format!("{INGRESSES}/after"), None).await;
    assert_eq!((code, &got["spec"]), (200, &created["spec"]));
    let (code, list) = call(
        addr,
        "GET",
        &format!("{INGRESSES}?labelSelector=app%3Decho"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    let names: BTreeSet<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert!(
        names.contains("keep-a") && names.contains("keep-b") && names.contains("after"),
        "{names:?}"
    );
    let (code, invalid) = call(addr, "POST", INGRESSES, Some(&ingress("bad", 70_000))).await;
    assert_eq!(code, 422, "{invalid}");
    assert!(
        invalid["message"]
            .as_str()
            .unwrap()
            .contains("spec.rules[0].port"),
        "{invalid}"
    );
    let (code, events) = call(
        addr,
        "GET",
        &format!("{INGRESSES}?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dkeep-a"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(events[0]["type"], "ADDED", "{events}");
    assert_eq!(events[0]["object"]["metadata"]["name"], "keep-a");
    let patch = "{\"metadata\":{\"labels\":{\"after\":\"yes\"}}}";
    let (code, _) = raw(
        addr,
        format!(
            "PATCH {INGRESSES}/after HTTP/1.1\r\nHost: s\r\nConnection: close\r\nContent-Type: application/merge-patch+json\r\nContent-Length: {}\r\n\r\n{patch}",
            patch.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        call(addr, "DELETE", &format!("{INGRESSES}/after"), None)
            .await
            .0,
        200
    );

    eprintln!(
        "soak_api: checks after the soak took {:?}",
        checks.elapsed()
    );
    // The label sets of request metrics stayed within their fixed sets.
    let text = metrics_text(addr).await;
    let resources = label_values(&text, "apiserver_request_total", "resource");
    let mut known: BTreeSet<String> = ["", "other"].iter().map(|s| s.to_string()).collect();
    for plural in [
        "federatedingresses",
        "clusters",
        "events",
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
    ] {
        known.insert(plural.to_string());
        for sub in ["status", "explain", "token"] {
            known.insert(format!("{plural}/{sub}"));
        }
    }
    let unknown: Vec<&String> = resources.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "resource labels outside the fixed set: {unknown:?}"
    );
    let verbs = label_values(&text, "apiserver_request_total", "verb");
    let known_verbs: BTreeSet<&str> = [
        "",
        "other",
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ]
    .into();
    assert!(
        verbs.iter().all(|v| known_verbs.contains(v.as_str())),
        "verb labels outside the fixed set: {verbs:?}"
    );
    let series = text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .count();
    assert!(
        series < 400,
        "{series} request series after {count} random requests"
    );
}

// ---- the limits ---------------------------------------------------------------------

/// Reads until the peer closes (true) or `WAIT` passes (false).
async fn closed_by_peer(stream: &mut tokio::net::TcpStream) -> bool {
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

async fn eventually_metric(addr: SocketAddr, series: &str, at_least: f64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = metrics_text(addr).await;
        let value = metric(&text, series).unwrap_or(-1.0);
        if value >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} = {value}, wanted >= {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(
        dir.path(),
        "limits:\n  headerReadTimeoutSeconds: 1\n  idleTimeoutSeconds: 1\n",
        &[],
    );
    let addr: SocketAddr = server.addr("api").parse().unwrap();
    // Slowloris: part of a request line, then nothing.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert!(closed_by_peer(&mut slow).await, "a slow request is closed");
    // A silent connection.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_peer(&mut silent).await,
        "a silent connection is closed"
    );
    eventually_metric(
        addr,
        "apiserver_connections_closed_total{reason=\"header_timeout\"}",
        2.0,
    )
    .await;

    // HTTP/2 (prior knowledge): one request, then idle until the server says GOAWAY.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(connection);
    let request = http::Request::get(format!("http://{addr}/livez"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    tokio::time::timeout(WAIT, connection)
        .await
        .expect("the idle HTTP/2 connection is closed")
        .unwrap()
        .ok();
    eventually_metric(
        addr,
        "apiserver_connections_closed_total{reason=\"idle\"}",
        1.0,
    )
    .await;
    // Well-formed requests still work.
    assert_eq!(
        raw(
            addr,
            b"GET /livez HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"
        )
        .await
        .0,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_watch_and_in_flight_caps_refuse_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(
        dir.path(),
        "limits:\n  maxConnections: 6\n  maxWatches: 10\n  maxWatchesPerUser: 2\n  maxWatchTimeoutSeconds: 2\n",
        &[
            "--min-request-timeout",
            "1",
            "--max-mutating-requests-inflight",
            "1",
        ],
    );
    let addr: SocketAddr = server.addr("api").parse().unwrap();

    // Watches: two per user; the third is a 429 saying which limit.
    let watch = format!("GET {INGRESSES}?watch=true HTTP/1.1\r\nHost: s\r\n\r\n");
    let mut watches = Vec::new();
    // `Connection: close`: the connection ends with the watch.
    let closing_watch =
        format!("GET {INGRESSES}?watch=true HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n");
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(closing_watch.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        watches.push(stream);
    }
    let (code, body) = raw(addr, format!("GET {INGRESSES}?watch=true&timeoutSeconds=5 HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n").as_bytes()).await;
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("limits.maxWatchesPerUser"), "{body}");
    eventually_metric(addr, "apiserver_watches_refused_total{limit=\"user\"}", 1.0).await;
    // Without timeoutSeconds a watch lasts [1, 2] s here, and a larger timeoutSeconds is
    // lowered to maxWatchTimeoutSeconds (2): all of them end on their own.
    for mut stream in watches {
        assert!(closed_by_peer(&mut stream).await, "the watch ends");
    }
    let (code, _) = call(
        addr,
        "GET",
        &format!("{INGRESSES}?watch=true&timeoutSeconds=100000"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    eventually_metric(addr, "apiserver_watch_timeouts_capped_total", 1.0).await;

    // Mutating in flight: one POST waits for its body; the next is a 429.
    let mut waiting = tokio::net::TcpStream::connect(addr).await.unwrap();
    waiting
        .write_all(format!("POST {INGRESSES} HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{").as_bytes())
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let (code, body) = call(addr, "POST", INGRESSES, Some(&ingress("second", 7200))).await;
        if code == 429 {
            assert!(
                body["message"]
                    .as_str()
                    .unwrap()
                    .contains("limits.maxMutatingRequestsInflight"),
                "{body}"
            );
            break;
        }
        // The waiting POST may not have been read yet: it is a 409 once "second" exists.
        assert!(
            Instant::now() < deadline,
            "no 429 while a POST is in flight: {code} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = call(addr, "DELETE", &format!("{INGRESSES}/second"), None).await;
    }
    eventually_metric(
        addr,
        "apiserver_dropped_requests_total{request_kind=\"mutating\"}",
        1.0,
    )
    .await;
    drop(waiting);

    // Connections: hold the cap open; one more is closed at once and counted.
    let mut held = Vec::new();
    for _ in 0..6 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(watch.as_bytes()).await.unwrap();
        held.push(stream);
    }
    let deadline = Instant::now() + WAIT;
    loop {
        let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = extra
            .write_all(b"GET /livez HTTP/1.1\r\nHost: s\r\n\r\n")
            .await;
        let mut buffer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), extra.read_to_end(&mut buffer)).await;
        if buffer.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a connection past the cap was served"
        );
    }
    drop(held);
    // `/metrics` needs a free slot: the held watches end within 2 s.
    eventually_metric(addr, "apiserver_connections_refused_total", 1.0).await;
    assert_eq!(
        raw(
            addr,
            b"GET /livez HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n"
        )
        .await
        .0,
        200
    );
}
