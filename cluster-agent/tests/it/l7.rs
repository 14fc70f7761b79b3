//! The standalone L7 data plane over real loopback sockets: HTTP routing, HTTPS and TLS
//! termination, TLS passthrough, health, drain, certificate reload, reports and metrics.
//!
//! Listeners come from rule ports, so they are fixed: each test binds its own address
//! 127.0.78.N (this file's block) and ports 30000 + 10·N + k. Backends bind port 0 on
//! 127.0.0.1. Waits are `eventually`-style with generous bounds, never fixed sleeps.

#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fedingress_agent::{Config, Standalone};
use fedingress_api::ingress::{
    Backend, HttpPath, IngressRule, IngressTls, PathType, Protocol, TlsMode,
};
use fedingress_api::plan::{ClusterPlan, IngressKey, IngressShare};
use fedingress_testsupport::echo::Echo;
use fedingress_testsupport::eventually_async;
use fedingress_testsupport::tls::{Ca, TlsEcho};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_rustls::TlsConnector;

const WAIT: Duration = Duration::from_secs(10);
const IO: Duration = Duration::from_secs(5);

fn test_ip(test: u8) -> IpAddr {
    IpAddr::from([127, 0, 78, test])
}

fn test_port(test: u8, k: u16) -> u16 {
    30000 + u16::from(test) * 10 + k
}

fn provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

// ---------------------------------------------------------------------------------------
// An HTTP backend that says who it is and what it received.

#[derive(Clone)]
struct WebState {
    name: Arc<str>,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    /// Status of `/healthz`.
    health: Arc<AtomicU16>,
    /// When non-zero, every other request gets this status.
    fail: Arc<AtomicU16>,
}

struct Web {
    addr: SocketAddr,
    state: WebState,
    tasks: JoinSet<()>,
}

impl Web {
    async fn start(name: &str) -> Web {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Web::serve(listener, name)
    }

    async fn start_at(addr: SocketAddr, name: &str) -> Web {
        let listener = TcpListener::bind(addr).await.unwrap();
        Web::serve(listener, name)
    }

    fn serve(listener: TcpListener, name: &str) -> Web {
        let addr = listener.local_addr().unwrap();
        let state = WebState {
            name: name.into(),
            connections: Arc::default(),
            requests: Arc::default(),
            in_flight: Arc::default(),
            health: Arc::new(AtomicU16::new(200)),
            fail: Arc::default(),
        };
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_web(listener, state.clone()));
        Web { addr, state, tasks }
    }

    fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Stops the backend: its socket and every connection close.
    async fn kill(mut self) {
        self.tasks.shutdown().await;
    }
}

async fn accept_web(listener: TcpListener, state: WebState) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        state.connections.fetch_add(1, Ordering::SeqCst);
        let state = state.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| answer(request, state.clone()));
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn answer(
    request: Request<Incoming>,
    state: WebState,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let respond = |status: u16, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
        Ok(response)
    };
    if path == "/healthz" {
        return respond(state.health.load(Ordering::SeqCst), "health".into());
    }
    state.requests.fetch_add(1, Ordering::SeqCst);
    let fail = state.fail.load(Ordering::SeqCst);
    if fail != 0 {
        return respond(fail, format!("{} failing", state.name));
    }
    if let Some(ms) = path.strip_prefix("/slow/") {
        /// Counts a slow request until it ends, answered or dropped.
        struct InFlight(Arc<AtomicUsize>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        state.in_flight.fetch_add(1, Ordering::SeqCst);
        let _in_flight = InFlight(Arc::clone(&state.in_flight));
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
        return respond(200, "slow done".to_owned());
    }
    let header = |name: &str| {
        request
            .headers()
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let body = serde_json::json!({
        "backend": &*state.name,
        "path": request.uri().path_and_query().map(|p| p.as_str()).unwrap_or_default(),
        "version": format!("{:?}", request.version()),
        "host": header("host"),
        "xff": header("x-forwarded-for"),
        "xfp": header("x-forwarded-proto"),
        "xfh": header("x-forwarded-host"),
        "forwarded": header("forwarded"),
        "connection": header("connection"),
    });
    respond(200, body.to_string())
}

// ---------------------------------------------------------------------------------------
// The test CA and the TLS echo backend are testsupport's (`tls`); a leaf as a Secret:

/// Writes a leaf of `ca` for `names` as `<dir>/<secret>.crt` and `.key`; returns the
/// config entry.
fn secret(ca: &Ca, dir: &Path, secret: &str, names: &[&str]) -> String {
    let (cert, key) = ca.leaf(names);
    write_pair(dir, secret, &cert, &key);
    format!(
        "  {secret}: {{certFile: '{}', keyFile: '{}'}}\n",
        dir.join(format!("{secret}.crt")).display(),
        dir.join(format!("{secret}.key")).display()
    )
}

fn write_pair(dir: &Path, secret: &str, cert: &str, key: &str) {
    std::fs::write(dir.join(format!("{secret}.crt")), cert).unwrap();
    std::fs::write(dir.join(format!("{secret}.key")), key).unwrap();
}

fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Accepts any certificate and records the leaves it was shown.
#[derive(Debug, Default)]
struct Recording {
    seen: Mutex<Vec<Vec<u8>>>,
}

impl rustls::client::danger::ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.seen.lock().unwrap().push(end_entity.to_vec());
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn connector_trusting(ca_pem: &str, alpn: &[&[u8]]) -> TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

fn connector_recording(recording: Arc<Recording>) -> TlsConnector {
    let config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(recording)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    connector: &TlsConnector,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = match name.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(name.to_owned()).unwrap(),
    };
    timeout(IO, connector.connect(name, tcp)).await?
}

async fn tls_echo(stream: &mut tokio_rustls::client::TlsStream<TcpStream>, text: &str) -> String {
    stream.write_all(text.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    let mut buf = vec![0u8; text.len()];
    timeout(IO, stream.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(buf).unwrap()
}

// ---------------------------------------------------------------------------------------
// Config, plans, clients.

fn config(ip: IpAddr, services: &[(&str, &[SocketAddr])], tls: &str, extra: &str) -> Config {
    let mut yaml = format!(
        "hub: {{address: 'http://127.0.0.1:6444'}}\ncluster: test\ntokenFile: token\ndriver: standalone\nstateDir: state\nlisten: [{{bind: '{ip}'}}]\nservices:\n"
    );
    for (name, endpoints) in services {
        let list: Vec<String> = endpoints.iter().map(|e| format!("'{e}'")).collect();
        yaml.push_str(&format!("  {name}: [{}]\n", list.join(", ")));
    }
    if !tls.is_empty() {
        yaml.push_str("tlsSecrets:\n");
        yaml.push_str(tls);
    }
    if !extra.contains("healthCheck") {
        yaml.push_str(
            "healthCheck: {intervalMs: 100, timeoutMs: 500, healthyThreshold: 1, unhealthyThreshold: 2, http: {path: /healthz}}\n",
        );
    }
    yaml.push_str(extra);
    Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e:?}\n{yaml}"))
}

fn web_rule(
    protocol: Protocol,
    port: u16,
    host: Option<&str>,
    paths: &[(&str, PathType, &str)],
) -> IngressRule {
    let mut rule = IngressRule::new(protocol);
    rule.port = Some(i32::from(port));
    rule.host = host.map(str::to_owned);
    rule.paths = paths
        .iter()
        .map(|(path, path_type, service)| HttpPath {
            path: (*path).to_owned(),
            path_type: *path_type,
            backend: Backend::new(*service, 80),
        })
        .collect();
    rule
}

fn tls_rule(port: u16, host: &str, mode: TlsMode, service: &str) -> IngressRule {
    let mut rule = IngressRule::new(Protocol::Tls);
    rule.port = Some(i32::from(port));
    rule.host = Some(host.to_owned());
    rule.tls_mode = Some(mode);
    rule.backend = Some(Backend::new(service, 443));
    rule
}

fn share(
    name: &str,
    generation: i64,
    rules: Vec<IngressRule>,
    tls: &[(&[&str], &str)],
) -> IngressShare {
    IngressShare {
        key: IngressKey::new("default", name),
        uid: format!("uid-{name}"),
        generation,
        rules,
        tls: tls
            .iter()
            .map(|(hosts, secret)| IngressTls {
                hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
                secret_name: (*secret).to_owned(),
            })
            .collect(),
        cluster_override: None,
        anycast_addresses: Vec::new(),
    }
}

fn client(resolve: &[&str], addr: SocketAddr) -> reqwest::ClientBuilder {
    provider();
    let mut builder = reqwest::Client::builder().no_proxy().timeout(IO);
    for host in resolve {
        builder = builder.resolve(host, addr);
    }
    builder
}

fn with_ca(builder: reqwest::ClientBuilder, ca_pem: &str) -> reqwest::ClientBuilder {
    builder.tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
}

/// GET → (status, version, body).
async fn get(client: &reqwest::Client, url: &str) -> (u16, reqwest::Version, String) {
    let response = client
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e:?}"));
    let status = response.status().as_u16();
    let version = response.version();
    (status, version, response.text().await.unwrap())
}

async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    let (status, _, body) = get(client, url).await;
    assert_eq!(status, 200, "GET {url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|_| panic!("GET {url}: not JSON: {body}"))
}

async fn backend_of(client: &reqwest::Client, url: &str) -> String {
    get_json(client, url).await["backend"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits until every endpoint of every backend of `plan` is healthy.
async fn all_healthy(standalone: &Standalone, plan: &ClusterPlan) {
    eventually_async(WAIT, "every endpoint is healthy", || async {
        let report = standalone.report(plan);
        for ingress in &report.ingresses {
            for backend in &ingress.backends {
                if backend.ready != backend.total || backend.total == 0 {
                    return Err(format!("{report:?}"));
                }
            }
        }
        Ok(())
    })
    .await;
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_routes_by_host_then_longest_path_with_forwarding_headers() {
    let ip = test_ip(1);
    let port = test_port(1, 0);
    let web = Web::start("web").await;
    let api = Web::start("api").await;
    let exact = Web::start("exact").await;
    let wild = Web::start("wild").await;
    let fallback = Web::start("fallback").await;
    let standalone = Standalone::new(&config(
        ip,
        &[
            ("web", &[web.addr]),
            ("api", &[api.addr]),
            ("exact", &[exact.addr]),
            ("wild", &[wild.addr]),
            ("fallback", &[fallback.addr]),
        ],
        "",
        "",
    ));
    let plan = ClusterPlan::from(vec![
        share(
            "shop",
            1,
            vec![web_rule(
                Protocol::Http,
                port,
                Some("shop.example.com"),
                &[
                    ("/", PathType::Prefix, "web"),
                    ("/api/", PathType::Prefix, "api"),
                    ("/api/v1", PathType::Exact, "exact"),
                ],
            )],
            &[],
        ),
        share(
            "other",
            1,
            vec![
                web_rule(
                    Protocol::Http,
                    port,
                    Some("*.example.com"),
                    &[("/", PathType::Prefix, "wild")],
                ),
                web_rule(
                    Protocol::Http,
                    port,
                    None,
                    &[("/only", PathType::Exact, "fallback")],
                ),
            ],
            &[],
        ),
    ]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    let addr = SocketAddr::new(ip, port);
    let http1 = client(
        &[
            "shop.example.com",
            "a.example.com",
            "a.b.example.com",
            "plain.test",
        ],
        addr,
    )
    .http1_only()
    .build()
    .unwrap();
    let base = |host: &str| format!("http://{host}:{port}");
    let shop = base("shop.example.com");
    assert_eq!(backend_of(&http1, &format!("{shop}/")).await, "web");
    assert_eq!(backend_of(&http1, &format!("{shop}/apis")).await, "web");
    assert_eq!(backend_of(&http1, &format!("{shop}/api")).await, "api");
    assert_eq!(backend_of(&http1, &format!("{shop}/api/v1/x")).await, "api");
    assert_eq!(backend_of(&http1, &format!("{shop}/api/v1")).await, "exact");
    assert_eq!(
        backend_of(&http1, &format!("{shop}/api/v1?q=1")).await,
        "exact"
    );
    assert_eq!(
        backend_of(&http1, &format!("{}/x", base("a.example.com"))).await,
        "wild"
    );
    assert_eq!(
        backend_of(&http1, &format!("{}/only", base("a.b.example.com"))).await,
        "fallback"
    );
    let (status, _, body) = get(&http1, &format!("{}/other", base("plain.test"))).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        "404 Not Found: no rule of this listener matches host \"plain.test\" path \"/other\"\n"
    );

    // Forwarding headers: appended X-Forwarded-For, set proto and host, a Forwarded element.
    let seen = http1
        .get(format!("{shop}/headers?x=1"))
        .header("x-forwarded-for", "203.0.113.1")
        .header("x-forwarded-proto", "gopher")
        .header("connection", "keep-alive, x-drop-me")
        .header("x-drop-me", "1")
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(seen["path"], "/headers?x=1");
    assert_eq!(seen["host"], format!("shop.example.com:{port}"));
    let xff = seen["xff"].as_str().unwrap();
    let (first, client_ip) = xff.split_once(", ").unwrap();
    assert_eq!(first, "203.0.113.1");
    assert!(client_ip.parse::<IpAddr>().unwrap().is_loopback(), "{xff}");
    assert_eq!(seen["xfp"], "http");
    assert_eq!(seen["xfh"], format!("shop.example.com:{port}"));
    assert_eq!(
        seen["forwarded"],
        format!("for={client_ip};proto=http;host=\"shop.example.com:{port}\"")
    );
    assert_eq!(seen["version"], "HTTP/1.1");

    // h2c with prior knowledge; the backend still gets HTTP/1.1 with a Host.
    let h2c = client(&["shop.example.com"], addr)
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let (status, version, body) = get(&h2c, &format!("{shop}/api/x")).await;
    assert_eq!((status, version), (200, reqwest::Version::HTTP_2), "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(seen["backend"], "api");
    assert_eq!(seen["version"], "HTTP/1.1");
    assert_eq!(seen["host"], format!("shop.example.com:{port}"));

    // Keep-alive towards the client and pooled connections towards the backend.
    let before = web.connections();
    for _ in 0..20 {
        assert_eq!(backend_of(&http1, &format!("{shop}/")).await, "web");
    }
    assert!(
        web.connections() - before <= 1,
        "{} new upstream connections",
        web.connections() - before
    );
    let report = standalone.report(&plan);
    assert!(report.requests_per_second > 0.0, "{report:?}");
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_the_sni_certificate_over_h2_and_http1_and_no_certificate_to_unknown_names() {
    provider();
    let ip = test_ip(2);
    let port = test_port(2, 0);
    let dir = tempfile::tempdir().unwrap();
    let pki = Ca::new("agent test CA");
    let shop_leaf = pki.leaf(&["shop.example.com"]);
    write_pair(dir.path(), "shop-tls", &shop_leaf.0, &shop_leaf.1);
    let mut secrets = format!(
        "  shop-tls: {{certFile: '{0}/shop-tls.crt', keyFile: '{0}/shop-tls.key'}}\n",
        dir.path().display()
    );
    secrets.push_str(&secret(&pki, dir.path(), "wild-tls", &["*.example.com"]));
    let web = Web::start("web").await;
    let wild = Web::start("wild").await;
    let standalone = Standalone::new(&config(
        ip,
        &[("web", &[web.addr]), ("wild", &[wild.addr])],
        &secrets,
        "",
    ));
    let plan = ClusterPlan::from(vec![
        share(
            "shop",
            1,
            vec![web_rule(
                Protocol::Https,
                port,
                Some("shop.example.com"),
                &[("/", PathType::Prefix, "web")],
            )],
            &[(&["shop.example.com"], "shop-tls")],
        ),
        share(
            "wild",
            1,
            vec![web_rule(
                Protocol::Https,
                port,
                Some("*.example.com"),
                &[("/", PathType::Prefix, "wild")],
            )],
            &[(&["*.example.com"], "wild-tls")],
        ),
    ]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    let addr = SocketAddr::new(ip, port);
    let hosts = ["shop.example.com", "a.example.com"];
    let h2 = with_ca(client(&hosts, addr), &pki.pem).build().unwrap();
    let (status, version, body) = get(&h2, &format!("https://shop.example.com:{port}/x")).await;
    assert_eq!((status, version), (200, reqwest::Version::HTTP_2), "{body}");
    let seen: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(seen["backend"], "web");
    assert_eq!(seen["xfp"], "https");
    assert!(
        seen["forwarded"]
            .as_str()
            .unwrap()
            .contains(";proto=https;")
    );
    let http1 = with_ca(client(&hosts, addr), &pki.pem)
        .http1_only()
        .build()
        .unwrap();
    let (status, version, body) = get(&http1, &format!("https://a.example.com:{port}/")).await;
    assert_eq!(
        (status, version),
        (200, reqwest::Version::HTTP_11),
        "{body}"
    );
    assert!(body.contains("\"wild\""), "{body}");

    // The certificate shown is the one of the name.
    let recording = Arc::new(Recording::default());
    let connector = connector_recording(Arc::clone(&recording));
    tls_connect(&connector, addr, "shop.example.com")
        .await
        .unwrap();
    assert_eq!(
        recording.seen.lock().unwrap().last().unwrap(),
        &der_of(&shop_leaf.0)
    );

    // A name no rule serves, or no name at all: no certificate, an alert.
    for name in ["evil.test", "example.com", "127.0.78.2"] {
        let recording = Arc::new(Recording::default());
        let connector = connector_recording(Arc::clone(&recording));
        let err = tls_connect(&connector, addr, name).await.unwrap_err();
        assert!(
            err.to_string().to_lowercase().contains("unrecognisedname")
                || err.to_string().to_lowercase().contains("unrecognized"),
            "{name}: {err}"
        );
        assert!(
            recording.seen.lock().unwrap().is_empty(),
            "{name} was shown a certificate"
        );
    }

    // A request for another host over a connection with shop's certificate: 421.
    let connector = connector_trusting(&pki.pem, &[b"http/1.1"]);
    let stream = tls_connect(&connector, addr, "shop.example.com")
        .await
        .unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::get("/")
        .header("host", "a.example.com")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 421);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("not served with this connection's certificate")
    );
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_passthrough_termination_and_https_share_one_port() {
    provider();
    let ip = test_ip(3);
    let port = test_port(3, 0);
    let dir = tempfile::tempdir().unwrap();
    let agent_pki = Ca::new("agent CA");
    let backend_pki = Ca::new("database CA");
    let (db_cert, db_key) = backend_pki.leaf(&["db.example.com"]);
    let db_backend = TlsEcho::start(([127, 0, 0, 1], 0).into(), &db_cert, &db_key).unwrap();
    let db_addr = db_backend.addr;
    let raw = Echo::builder()
        .udp(false)
        .start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .unwrap();
    let raw_addr = raw.addr;
    let web = Web::start("web").await;
    let mut secrets = secret(&agent_pki, dir.path(), "raw-tls", &["raw.example.com"]);
    secrets.push_str(&secret(
        &agent_pki,
        dir.path(),
        "shop-tls",
        &["shop.example.com"],
    ));
    let standalone = Standalone::new(&config(
        ip,
        &[
            ("pg", &[db_addr]),
            ("raw", &[raw_addr]),
            ("web", &[web.addr]),
        ],
        &secrets,
        "",
    ));
    let plan = ClusterPlan::from(vec![share(
        "mixed",
        1,
        vec![
            tls_rule(port, "db.example.com", TlsMode::Passthrough, "pg"),
            tls_rule(port, "raw.example.com", TlsMode::Terminate, "raw"),
            web_rule(
                Protocol::Https,
                port,
                Some("shop.example.com"),
                &[("/", PathType::Prefix, "web")],
            ),
        ],
        &[
            (&["raw.example.com"], "raw-tls"),
            (&["shop.example.com"], "shop-tls"),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let addr = SocketAddr::new(ip, port);

    // Passthrough: the client completes its handshake with the backend's certificate.
    let to_db = connector_trusting(&backend_pki.pem, &[]);
    let mut db = tls_connect(&to_db, addr, "db.example.com").await.unwrap();
    assert_eq!(tls_echo(&mut db, "select 1").await, "SELECT 1");
    // ... and the agent's CA does not fit it.
    let to_agent = connector_trusting(&agent_pki.pem, &[]);
    assert!(
        tls_connect(&to_agent, addr, "db.example.com")
            .await
            .is_err()
    );

    // Termination: the agent's certificate, plain bytes to the backend.
    let mut raw = tls_connect(&to_agent, addr, "raw.example.com")
        .await
        .unwrap();
    assert_eq!(tls_echo(&mut raw, "hello").await, "HELLO");

    // HTTPS on the same port.
    all_healthy(&standalone, &plan).await;
    let https = with_ca(client(&["shop.example.com"], addr), &agent_pki.pem)
        .build()
        .unwrap();
    assert_eq!(
        backend_of(&https, &format!("https://shop.example.com:{port}/")).await,
        "web"
    );

    let report = standalone.report(&plan);
    let listeners = &report.ingresses[0].listeners;
    let protocols: Vec<&str> = listeners.iter().map(|l| l.protocol.as_str()).collect();
    // One listener: labelled by the share's first rule there.
    assert_eq!(protocols, ["TLS"], "{listeners:?}");
    assert!(listeners[0].active_connections >= 2, "{listeners:?}");
    // Shutdown drains raw TLS streams until they end (or the drain time is up).
    drop((db, raw));
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_healthy_endpoint_is_503_and_traffic_recovers() {
    let ip = test_ip(4);
    let port = test_port(4, 0);
    let web = Web::start("web").await;
    let web_addr = web.addr;
    let standalone = Standalone::new(&config(ip, &[("web", &[web.addr])], "", ""));
    let plan = ClusterPlan::from(vec![share(
        "shop",
        1,
        vec![web_rule(
            Protocol::Http,
            port,
            Some("shop.example.com"),
            &[("/", PathType::Prefix, "web")],
        )],
        &[],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    let addr = SocketAddr::new(ip, port);
    let http = client(&["shop.example.com"], addr).build().unwrap();
    let url = format!("http://shop.example.com:{port}/");
    assert_eq!(backend_of(&http, &url).await, "web");

    // The backend dies: 503 once it is unhealthy (502 while a request races the checks).
    web.kill().await;
    eventually_async(WAIT, "503 with a clear body", || async {
        match get(&http, &url).await {
            (503, _, body)
                if body == "503 Service Unavailable: no healthy endpoint for service \"web\"\n" =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // It returns: traffic flows again.
    let web = Web::start_at(web_addr, "web").await;
    eventually_async(WAIT, "200 again", || async {
        match get(&http, &url).await {
            (200, _, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // The HTTP health check fails on status: unhealthy, 503; passes again: back.
    web.state.health.store(500, Ordering::SeqCst);
    eventually_async(WAIT, "503 on a failing health check", || async {
        match get(&http, &url).await {
            (503, _, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    web.state.health.store(204, Ordering::SeqCst);
    eventually_async(WAIT, "200 once the check passes", || async {
        match get(&http, &url).await {
            (200, _, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_answering_5xx_are_ejected_passively() {
    let ip = test_ip(5);
    let port = test_port(5, 0);
    let good = Web::start("good").await;
    let bad = Web::start("bad").await;
    // Checks are rare: only passive ejection can take `bad` out.
    let standalone = Standalone::new(&config(
        ip,
        &[("web", &[good.addr, bad.addr])],
        "",
        "healthCheck: {intervalMs: 60000, timeoutMs: 500, healthyThreshold: 1, unhealthyThreshold: 2, http: {path: /healthz}}\n",
    ));
    let plan = ClusterPlan::from(vec![share(
        "shop",
        1,
        vec![web_rule(
            Protocol::Http,
            port,
            None,
            &[("/", PathType::Prefix, "web")],
        )],
        &[],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    bad.state.fail.store(500, Ordering::SeqCst);
    let http = client(&[], SocketAddr::new(ip, port)).build().unwrap();
    let url = format!("http://{ip}:{port}/");
    let mut failures = 0;
    for _ in 0..10 {
        let (status, _, _) = get(&http, &url).await;
        if status == 500 {
            failures += 1;
        }
    }
    assert_eq!(failures, 2, "two 5xx answers eject the endpoint");
    assert_eq!(standalone.report(&plan).ingresses[0].backends[0].ready, 1);
    let before = bad.requests();
    for _ in 0..10 {
        assert_eq!(backend_of(&http, &url).await, "good");
    }
    assert_eq!(bad.requests(), before);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_survive_route_changes_and_listener_removal() {
    let ip = test_ip(6);
    let port = test_port(6, 0);
    let slow = Web::start("slow").await;
    let other = Web::start("other").await;
    let standalone = Arc::new(Standalone::new(&config(
        ip,
        &[("slow", &[slow.addr]), ("other", &[other.addr])],
        "",
        "drainTimeoutMs: 10000\n",
    )));
    let rule = |service: &str| {
        web_rule(
            Protocol::Http,
            port,
            Some("shop.example.com"),
            &[("/", PathType::Prefix, service)],
        )
    };
    let first = ClusterPlan::from(vec![share("shop", 1, vec![rule("slow")], &[])]);
    assert_eq!(standalone.apply(&first).await, vec![]);
    all_healthy(&standalone, &first).await;
    let addr = SocketAddr::new(ip, port);
    let http = client(&["shop.example.com"], addr).build().unwrap();
    let base = format!("http://shop.example.com:{port}");

    // A slow request is in flight while the route changes: it finishes where it began.
    let in_flight = {
        let (http, url) = (http.clone(), format!("{base}/slow/1500"));
        tokio::spawn(async move { get(&http, &url).await })
    };
    eventually_async(WAIT, "the slow request reached the backend", || async {
        (slow.state.in_flight.load(Ordering::SeqCst) == 1)
            .then_some(())
            .ok_or_else(String::new)
    })
    .await;
    let second = ClusterPlan::from(vec![share("shop", 2, vec![rule("other")], &[])]);
    assert_eq!(standalone.apply(&second).await, vec![]);
    all_healthy(&standalone, &second).await;
    assert_eq!(backend_of(&http, &format!("{base}/")).await, "other");
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "slow done"));

    // A slow request is in flight while its listener is removed: the port closes at
    // once, the request completes.
    let third = ClusterPlan::from(vec![share("shop", 3, vec![rule("slow")], &[])]);
    assert_eq!(standalone.apply(&third).await, vec![]);
    all_healthy(&standalone, &third).await;
    let in_flight = {
        let (http, url) = (http.clone(), format!("{base}/slow/1500"));
        tokio::spawn(async move { get(&http, &url).await })
    };
    eventually_async(
        WAIT,
        "the second slow request reached the backend",
        || async {
            (slow.state.in_flight.load(Ordering::SeqCst) == 1)
                .then_some(())
                .ok_or_else(String::new)
        },
    )
    .await;
    let gone = ClusterPlan::from(vec![share("shop", 4, Vec::new(), &[])]);
    assert_eq!(standalone.apply(&gone).await, vec![]);
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
    // Idle keep-alive connections close at once; the busy one finishes its request.
    eventually_async(
        WAIT,
        "only the busy connection is left draining",
        || async {
            let metrics = standalone.metrics();
            metrics
                .contains("fedingress_agent_draining_connections 1\n")
                .then_some(())
                .ok_or(metrics)
        },
    )
    .await;
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "slow done"));
    eventually_async(WAIT, "the drain is over", || async {
        let metrics = standalone.metrics();
        metrics
            .contains("fedingress_agent_draining_connections 0\n")
            .then_some(())
            .ok_or(metrics)
    })
    .await;
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_is_bounded_and_shutdown_waits_for_requests_in_flight() {
    let ip = test_ip(7);
    let port = test_port(7, 0);
    let slow = Web::start("slow").await;
    let standalone = Arc::new(Standalone::new(&config(
        ip,
        &[("slow", &[slow.addr])],
        "",
        "drainTimeoutMs: 300\n",
    )));
    let plan = ClusterPlan::from(vec![share(
        "shop",
        1,
        vec![web_rule(
            Protocol::Http,
            port,
            None,
            &[("/", PathType::Prefix, "slow")],
        )],
        &[],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    let http = client(&[], SocketAddr::new(ip, port)).build().unwrap();

    // Longer than the drain time: the connection is closed when it is up.
    let too_slow = {
        let http = http.clone();
        let url = format!("http://{ip}:{port}/slow/5000");
        tokio::spawn(async move { http.get(url).send().await.map(|r| r.status()) })
    };
    eventually_async(WAIT, "the request reached the backend", || async {
        (slow.state.in_flight.load(Ordering::SeqCst) == 1)
            .then_some(())
            .ok_or_else(String::new)
    })
    .await;
    let started = Instant::now();
    assert_eq!(standalone.apply(&ClusterPlan::default()).await, vec![]);
    let result = too_slow.await.unwrap();
    assert!(result.is_err(), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // Shutdown: a request shorter than the drain time completes before it returns.
    let standalone = Arc::new(Standalone::new(&config(
        ip,
        &[("slow", &[slow.addr])],
        "",
        "drainTimeoutMs: 5000\n",
    )));
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    let in_flight = {
        let http = http.clone();
        let url = format!("http://{ip}:{port}/slow/700");
        tokio::spawn(async move { get(&http, &url).await })
    };
    eventually_async(WAIT, "the request reached the backend", || async {
        (slow.state.in_flight.load(Ordering::SeqCst) >= 1)
            .then_some(())
            .ok_or_else(String::new)
    })
    .await;
    standalone.shutdown().await;
    // The connection closed only after the whole answer went out.
    assert_eq!(
        slow.state.in_flight.load(Ordering::SeqCst),
        0,
        "shutdown returned early"
    );
    let (status, _, body) = timeout(IO, in_flight).await.unwrap().unwrap();
    assert_eq!((status, body.as_str()), (200, "slow done"));
    assert!(standalone.is_draining());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_reloaded_when_their_files_change() {
    provider();
    let ip = test_ip(8);
    let port = test_port(8, 0);
    let dir = tempfile::tempdir().unwrap();
    let pki = Ca::new("reload CA");
    let secrets = secret(&pki, dir.path(), "shop-tls", &["shop.example.com"]);
    let first = std::fs::read_to_string(dir.path().join("shop-tls.crt")).unwrap();
    let web = Web::start("web").await;
    let standalone = Standalone::new(&config(ip, &[("web", &[web.addr])], &secrets, ""));
    let plan = ClusterPlan::from(vec![share(
        "shop",
        1,
        vec![web_rule(
            Protocol::Https,
            port,
            Some("shop.example.com"),
            &[("/", PathType::Prefix, "web")],
        )],
        &[(&["shop.example.com"], "shop-tls")],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let addr = SocketAddr::new(ip, port);
    let shown = || async {
        let recording = Arc::new(Recording::default());
        let connector = connector_recording(Arc::clone(&recording));
        tls_connect(&connector, addr, "shop.example.com")
            .await
            .unwrap();
        recording.seen.lock().unwrap().last().cloned().unwrap()
    };
    assert_eq!(shown().await, der_of(&first));
    let (cert, key) = pki.leaf(&["shop.example.com", "www.shop.example.com"]);
    write_pair(dir.path(), "shop-tls", &cert, &key);
    eventually_async(WAIT, "the new certificate is served", || async {
        (shown().await == der_of(&cert))
            .then_some(())
            .ok_or_else(String::new)
    })
    .await;
    // A broken pair keeps the last good one.
    std::fs::write(dir.path().join("shop-tls.key"), "garbage").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(shown().await, der_of(&cert));
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_attribute_connections_per_ingress_and_metrics_count_responses() {
    let ip = test_ip(9);
    let port = test_port(9, 0);
    let web = Web::start("web").await;
    let standalone = Standalone::new(&config(ip, &[("web", &[web.addr])], "", ""));
    let plan = ClusterPlan::from(vec![
        share(
            "a",
            1,
            vec![web_rule(
                Protocol::Http,
                port,
                Some("a.example.com"),
                &[("/", PathType::Prefix, "web")],
            )],
            &[],
        ),
        share(
            "b",
            1,
            vec![web_rule(
                Protocol::Http,
                port,
                Some("b.example.com"),
                &[("/", PathType::Prefix, "web")],
            )],
            &[],
        ),
    ]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    all_healthy(&standalone, &plan).await;
    let addr = SocketAddr::new(ip, port);
    // Two keep-alive clients for a, one for b.
    let mut clients = Vec::new();
    for host in ["a.example.com", "a.example.com", "b.example.com"] {
        let http = client(&[host], addr).http1_only().build().unwrap();
        assert_eq!(
            backend_of(&http, &format!("http://{host}:{port}/")).await,
            "web"
        );
        clients.push(http);
    }
    let nowhere = client(&["c.example.com"], addr).build().unwrap();
    assert_eq!(
        get(&nowhere, &format!("http://c.example.com:{port}/"))
            .await
            .0,
        404
    );
    let report = standalone.report(&plan);
    let load = |name: &str| {
        let ingress = report
            .ingresses
            .iter()
            .find(|i| i.key.name == name)
            .unwrap();
        assert_eq!(ingress.listeners.len(), 1, "{ingress:?}");
        assert_eq!(ingress.listeners[0].protocol, "HTTP");
        assert_eq!(ingress.listeners[0].port, port);
        ingress.listeners[0].clone()
    };
    assert_eq!(load("a").active_connections, 2);
    assert_eq!(load("b").active_connections, 1);
    assert!(load("a").connections_per_second > load("b").connections_per_second);
    assert!(report.active_connections >= 3, "{report:?}");
    assert!(report.requests_per_second > 0.0);
    let metrics = standalone.metrics();
    let address = format!("address=\"{addr}\"");
    for line in [
        format!("fedingress_agent_http_responses_total{{kind=\"HTTP\",{address},code=\"2xx\"}} 3"),
        format!("fedingress_agent_http_responses_total{{kind=\"HTTP\",{address},code=\"4xx\"}} 1"),
        format!("fedingress_agent_listener_active_connections{{kind=\"HTTP\",{address}}} 4"),
        format!(
            "fedingress_agent_endpoint_healthy{{service=\"web\",endpoint=\"{}\"}} 1",
            web.addr
        ),
    ] {
        assert!(metrics.contains(&line), "{line} missing in\n{metrics}");
    }
    drop(clients);
    standalone.shutdown().await;
}
