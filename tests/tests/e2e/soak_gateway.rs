//! Hostile-input soak of the agent gateway (issue 12): gRPC streams over HTTP/2 carrying
//! random bytes and mutated valid `AgentMessage`s (Hello, Ack, Nack, Heartbeat, hand
//! encoded), in the wrong order, with huge fields, lying length prefixes, the compressed
//! flag, truncated frames, streams left open without a Hello, to every RPC and to made-up
//! ones. Afterwards the hub is alive, its unauthenticated-stream limits counted what they
//! refused, and a real cluster-agent still connects and gets its plan applied.

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use fedingress_tests::eventually;
use fedingress_tests::federation::{
    ClusterSpec, agent_config, cluster_entry, create_cluster, get_json, issue_token, kubectl,
    start_agent,
};
use fedingress_tests::soak::{Rng, curl_text, metric, mutate_some, scaled, start_apiserver};
use futures_util::StreamExt;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Frame;

const WAIT: Duration = Duration::from_secs(90);
/// This test's loopback block (127.0.62.x) for the real agent's listener.
const BLOCK: u8 = 62;

// ---- protobuf, by hand (field numbers from proto/fedingress/v1/agent.proto) ----------

fn varint(mut value: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn field_bytes(number: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint(number << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn field_varint(number: u64, value: u64, out: &mut Vec<u8>) {
    varint(number << 3, out);
    varint(value, out);
}

/// `AgentMessage { hello: Hello { … } }`.
fn hello(cluster: &[u8], token: &[u8], capabilities: &[&str], applied: u64) -> Vec<u8> {
    let mut inner = Vec::new();
    field_bytes(1, cluster, &mut inner);
    field_bytes(2, token, &mut inner);
    field_bytes(3, b"soak/0.0", &mut inner);
    field_bytes(4, b"standalone", &mut inner);
    for capability in capabilities {
        field_bytes(5, capability.as_bytes(), &mut inner);
    }
    field_varint(6, applied, &mut inner);
    field_bytes(7, b"digest", &mut inner);
    let mut message = Vec::new();
    field_bytes(1, &inner, &mut message);
    message
}

fn ack(version: u64) -> Vec<u8> {
    let mut inner = Vec::new();
    field_varint(1, version, &mut inner);
    let mut message = Vec::new();
    field_bytes(2, &inner, &mut message);
    message
}

fn nack(version: u64, error: &[u8]) -> Vec<u8> {
    let mut inner = Vec::new();
    field_varint(1, version, &mut inner);
    field_bytes(2, error, &mut inner);
    let mut message = Vec::new();
    field_bytes(3, &inner, &mut message);
    message
}

fn heartbeat() -> Vec<u8> {
    let mut message = Vec::new();
    field_bytes(5, &[], &mut message);
    message
}

// ---- what the generator builds -------------------------------------------------------

#[derive(Arbitrary, Debug)]
enum Rpc {
    Connect,
    Join,
    Renew,
    Unknown(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
enum Message {
    Hello {
        cluster: Vec<u8>,
        token: Vec<u8>,
        applied: u64,
    },
    /// A valid Hello, then mutated.
    MutatedHello(u8),
    Ack(u64),
    Nack(u64, Vec<u8>),
    Heartbeat,
    Raw(Vec<u8>),
    /// A Hello whose cluster name is this many KiB (up to ~5 MiB: over the 4 MiB cap).
    Huge(u16),
}

#[derive(Arbitrary, Debug)]
enum Framing {
    Honest,
    LengthLie(i32),
    Compressed,
    /// Declares a 4 GiB message.
    HugeDeclared,
    Truncated(u8),
    NoPrefix,
}

#[derive(Arbitrary, Debug)]
enum ContentType {
    Grpc,
    GrpcProto,
    Json,
    Missing,
}

#[derive(Arbitrary, Debug)]
struct StreamPlan {
    rpc: Rpc,
    content_type: ContentType,
    messages: Vec<(Message, Framing)>,
    /// Leave the stream open after the messages (the hub must end it).
    stall: bool,
}

fn encode(rng: &mut Rng, message: &Message) -> Vec<u8> {
    match message {
        Message::Hello {
            cluster,
            token,
            applied,
        } => hello(cluster, token, &["TCP", "UDP"], *applied),
        Message::MutatedHello(n) => {
            let mut bytes = hello(b"soak-cluster", b"not-a-token", &["TCP"], 3);
            mutate_some(rng, &mut bytes, *n as usize % 6);
            bytes
        }
        Message::Ack(version) => ack(*version),
        Message::Nack(version, error) => nack(*version, error),
        Message::Heartbeat => heartbeat(),
        Message::Raw(bytes) => bytes.clone(),
        Message::Huge(kib) => {
            let kib = if kib.is_multiple_of(16) {
                4 * 1024 + (*kib as usize % 1024)
            } else {
                *kib as usize % 256
            };
            hello(&vec![b'c'; kib * 1024], b"t", &[], 0)
        }
    }
}

fn frame(message: Vec<u8>, framing: &Framing) -> Vec<u8> {
    let mut out = Vec::new();
    let length = message.len() as u32;
    match framing {
        Framing::NoPrefix => return message,
        Framing::Compressed => out.push(1),
        _ => out.push(0),
    }
    let declared = match framing {
        Framing::LengthLie(delta) => length.wrapping_add(*delta as u32),
        Framing::HugeDeclared => u32::MAX,
        _ => length,
    };
    out.extend_from_slice(&declared.to_be_bytes());
    out.extend_from_slice(&message);
    if let Framing::Truncated(cut) = framing {
        let keep = out.len().saturating_sub(1 + *cut as usize % 16);
        out.truncate(keep);
    }
    out
}

type Body = BoxBody<Bytes, Infallible>;

/// Sends one stream on a new connection; true when the hub answered (headers or a
/// reset), false when nothing came back within the bound.
async fn send(
    addr: SocketAddr,
    path: String,
    content_type: Option<&str>,
    data: Vec<u8>,
    stall: bool,
) -> bool {
    let Ok(stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let Ok(Ok((mut sender, connection))) = tokio::time::timeout(
        Duration::from_secs(5),
        hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        ),
    )
    .await
    else {
        return false;
    };
    let connection = tokio::spawn(connection);
    let first = futures_util::stream::iter([Ok::<_, Infallible>(Frame::data(Bytes::from(data)))]);
    let body: Body = if stall {
        BoxBody::new(http_body_util::StreamBody::new(
            first.chain(futures_util::stream::pending()),
        ))
    } else {
        BoxBody::new(http_body_util::StreamBody::new(first))
    };
    let mut request = http::Request::post(format!("http://{addr}{path}")).header("te", "trailers");
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let request = request.body(body).unwrap();
    let answered = match tokio::time::timeout(Duration::from_secs(5), sender.send_request(request))
        .await
    {
        Ok(Ok(response)) => {
            // Read to the trailers (or the hub's reset), bounded.
            let _ =
                tokio::time::timeout(Duration::from_secs(5), response.into_body().collect()).await;
            true
        }
        Ok(Err(_)) => true,
        Err(_) => false,
    };
    connection.abort();
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_gateway_survives_random_and_mutated_streams() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(
        dir.path(),
        "agents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\nlimits:\n  gateway:\n    helloTimeoutSeconds: 1\n    maxPendingHellos: 32\n",
        &[],
    );
    let agent_addr: SocketAddr = server.addr("agent").parse().unwrap();
    let api = format!("http://{}", server.addr("api"));

    let mut rng = Rng::from_env("soak_gateway", 0x5eed_0002);
    let count = scaled(5000);
    let mut streams = Vec::new();
    for _ in 0..count {
        let mut plan: StreamPlan = rng.arbitrary();
        // Most streams go to Connect with gRPC's content type; stalls are one in twenty-five.
        if rng.chance(70) {
            plan.rpc = Rpc::Connect;
            plan.content_type = ContentType::Grpc;
        }
        plan.stall = plan.stall && rng.chance(8);
        let path = match &plan.rpc {
            Rpc::Connect => "/fedingress.v1.AgentGateway/Connect".to_string(),
            Rpc::Join => "/fedingress.v1.AgentGateway/Join".to_string(),
            Rpc::Renew => "/fedingress.v1.AgentGateway/Renew".to_string(),
            Rpc::Unknown(bytes) => format!(
                "/{}",
                bytes
                    .iter()
                    .filter(|b| b.is_ascii_alphanumeric() || **b == b'/' || **b == b'.')
                    .map(|b| *b as char)
                    .collect::<String>()
            ),
        };
        let content_type = match plan.content_type {
            ContentType::Grpc => Some("application/grpc"),
            ContentType::GrpcProto => Some("application/grpc+proto"),
            ContentType::Json => Some("application/json"),
            ContentType::Missing => None,
        };
        let mut data = Vec::new();
        for (message, framing) in plan.messages.iter().take(6) {
            let bytes = encode(&mut rng, message);
            data.extend(frame(bytes, framing));
        }
        streams.push((path, content_type, data, plan.stall));
    }
    let started = Instant::now();
    let answered: Vec<bool> = futures_util::stream::iter(streams.into_iter().map(
        |(path, content_type, data, stall)| send(agent_addr, path, content_type, data, stall),
    ))
    .buffer_unordered(16)
    .collect()
    .await;
    let unanswered = answered.iter().filter(|a| !**a).count();
    eprintln!(
        "soak_gateway: {count} streams in {:?}; {unanswered} without an answer within 5 s",
        started.elapsed()
    );

    // Alive; what the limits refused is counted.
    let metrics = curl_text(&format!("{api}/metrics"));
    eprintln!(
        "soak_gateway: hello timeouts {:?}, pending refused {:?}",
        metric(
            &metrics,
            "fedingress_gateway_streams_refused_total{reason=\"hello_timeout\"}"
        ),
        metric(
            &metrics,
            "fedingress_gateway_streams_refused_total{reason=\"pending_cap\"}"
        )
    );
    assert!(
        metric(
            &metrics,
            "fedingress_gateway_streams_refused_total{reason=\"hello_timeout\"}"
        )
        .unwrap()
            >= 1.0,
        "stalled streams end at the Hello deadline"
    );

    // More streams waiting for their Hello than limits.gateway.maxPendingHellos: the
    // ones past the cap are refused at once, and counted.
    let stalled: Vec<bool> = futures_util::stream::iter((0..40).map(|_| {
        send(
            agent_addr,
            "/fedingress.v1.AgentGateway/Connect".into(),
            Some("application/grpc"),
            Vec::new(),
            true,
        )
    }))
    .buffer_unordered(40)
    .collect()
    .await;
    assert!(
        stalled.iter().all(|answered| *answered),
        "every stalled stream is ended"
    );
    let metrics = curl_text(&format!("{api}/metrics"));
    assert!(
        metric(
            &metrics,
            "fedingress_gateway_streams_refused_total{reason=\"pending_cap\"}"
        )
        .unwrap()
            >= 1.0,
        "streams past maxPendingHellos are refused"
    );

    // A real agent still connects and gets its plan.
    let k = kubectl(dir.path(), &api);
    let spec = ClusterSpec::numbered(BLOCK, 1, "eu", 50.1, 8.6);
    create_cluster(&k, dir.path(), &spec);
    let (_, token) = issue_token(&api, &spec.name).unwrap();
    let config = agent_config(dir.path(), &format!("http://{agent_addr}"), &spec, &token);
    let ingress = dir.path().join("echo.yaml");
    std::fs::write(
        &ingress,
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: echo\nspec:\n  rules:\n  - protocol: TCP\n    port: 7301\n    backend: {service: echo, port: 9000}\n  traffic:\n    dnsName: echo.soak.test\n",
    )
    .unwrap();
    k.ok(&["apply", "-f", &ingress.display().to_string()]);
    let _agent = start_agent(&config, &spec.name);
    eventually(WAIT, "the real agent applies its plan", || {
        let object = get_json(&k, &["federatedingress", "echo"]);
        let entry = cluster_entry(&object, &spec.name);
        (entry["phase"] == "Applied")
            .then_some(())
            .ok_or(entry.to_string())
    });
    let metrics = curl_text(&format!("{api}/metrics"));
    assert_eq!(metric(&metrics, "fedingress_agents_connected"), Some(1.0));
}
