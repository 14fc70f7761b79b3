//! Every listener of the apiserver bounds each phase of a connection (issue 23, item 6),
//! measured over real sockets against a real process: a silent TCP connection, a TLS
//! handshake left unfinished, a TLS connection that says nothing after its handshake,
//! an HTTP/2 preface without a stream; on the REST API (TLS), the agent gateway (TLS)
//! and the DNS TCP listener. Each is closed near its documented timeout
//! (docs/security.md, "Serving limits"), here shortened through `limits:` where the
//! timeout is a key. And connections that finish TLS and say nothing cannot keep an
//! agent out of a gateway at `limits.gateway.maxConnections`. Last, REST responses carry
//! the security headers, HSTS over TLS only (item 8).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fedingress_tests::federation::{ClusterSpec, create_cluster, https_agent_config, start_agent};
use fedingress_tests::soak::{metric, start_apiserver};
use fedingress_tests::{Kubectl, Process, eventually, write_kubeconfig};
use fedingress_testsupport::tls::Ca;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// This test's loopback block (127.0.67.x) for the agent's listener.
const BLOCK: u8 = 67;
const ADMIN_TOKEN: &str = "listeners-admin-token-0123456789";
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The TLS handshake's fixed timeout (REST API and agent gateway).
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A CA and a certificate for localhost and 127.0.0.1 in `dir` (ca.crt, tls.crt,
/// tls.key), with an admin token file (tokens.csv); the CA's PEM.
fn write_pki(dir: &Path) -> String {
    use rcgen::{CertificateParams, SanType};
    let ca = Ca::new("listeners test CA");
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let (cert, key) = ca.sign(params);
    for (name, pem) in [("ca.crt", &ca.pem), ("tls.crt", &cert), ("tls.key", &key)] {
        std::fs::write(dir.join(name), pem).unwrap();
    }
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{ADMIN_TOKEN},listeners-admin,1,\"fedingress:admins\"\n"),
    )
    .unwrap();
    ca.pem
}

/// A TLS apiserver on loopback with `extra` config.
fn start_tls_apiserver(dir: &Path, extra: &str) -> Process {
    start_apiserver(
        dir,
        &format!(
            "tls: {{certFile: '{0}/tls.crt', keyFile: '{0}/tls.key'}}\ntokenFile: '{0}/tokens.csv'\n{extra}",
            dir.display()
        ),
        &[],
    )
}

fn client_config(ca_pem: &str, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// A TCP connection to `addr` with a TLS handshake completed (ALPN `alpn`), then
/// `then` sent through TLS; the socket, which sends nothing more.
fn tls_then(addr: SocketAddr, ca_pem: &str, alpn: &[u8], then: &[u8]) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = rustls::ClientConnection::new(client_config(ca_pem, alpn), name).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).unwrap();
    }
    assert_eq!(tls.alpn_protocol(), Some(alpn), "ALPN");
    if !then.is_empty() {
        tls.writer().write_all(then).unwrap();
        while tls.wants_write() {
            tls.write_tls(&mut tcp).unwrap();
        }
    }
    tcp
}

/// How long after `since` the server closes `stream` (reading whatever it sends and
/// never answering); `None` if it is still open after `limit`.
fn closed_after(mut stream: TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    let mut buffer = [0u8; 4096];
    loop {
        let left = limit.checked_sub(since.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return Some(since.elapsed()),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(since.elapsed()),
        }
    }
}

/// One phase of one listener: what the client does, and when it must be closed.
struct Phase {
    name: &'static str,
    documented: Duration,
    open: Box<dyn FnOnce() -> TcpStream + Send>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_closes_each_phase_near_its_documented_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_pki(dir.path());
    let header_read = Duration::from_secs(3);
    let idle = Duration::from_secs(8);
    let hello = Duration::from_secs(4);
    let dns_idle = Duration::from_secs(2);
    let server = start_tls_apiserver(
        dir.path(),
        &format!(
            "limits:\n  headerReadTimeoutSeconds: {}\n  idleTimeoutSeconds: {}\n  gateway: {{helloTimeoutSeconds: {}}}\ndns:\n  listen: 127.0.0.1:0\n  tcp: {{idleTimeoutSeconds: {}}}\n  zones:\n  - name: listeners.test\n    nameservers:\n    - {{name: ns1.listeners.test, addresses: [127.0.0.1]}}\n",
            header_read.as_secs(),
            idle.as_secs(),
            hello.as_secs(),
            dns_idle.as_secs(),
        ),
    );
    let api: SocketAddr = server.addr("api").parse().unwrap();
    let gateway: SocketAddr = server.addr("agent").parse().unwrap();
    let dns: SocketAddr = server.addr("dns").parse().unwrap();
    let connect = |addr: SocketAddr| move || TcpStream::connect(addr).unwrap();
    let hello_only = |addr: SocketAddr| {
        move || {
            // The first bytes of a ClientHello (a record header), then nothing.
            let mut tcp = TcpStream::connect(addr).unwrap();
            tcp.write_all(&[22, 3, 1, 0, 200, 1]).unwrap();
            tcp
        }
    };
    let tls = |addr: SocketAddr, alpn: &'static [u8], then: &'static [u8]| {
        let ca = ca.clone();
        move || tls_then(addr, &ca, alpn, then)
    };
    let phases: Vec<Phase> = vec![
        Phase {
            name: "REST: TLS handshake never finished",
            documented: HANDSHAKE,
            open: Box::new(hello_only(api)),
        },
        Phase {
            name: "REST: TLS (ALPN http/1.1), then no request",
            documented: header_read,
            open: Box::new(tls(api, b"http/1.1", b"")),
        },
        Phase {
            name: "REST: TLS (ALPN h2), then no preface",
            documented: header_read,
            open: Box::new(tls(api, b"h2", b"")),
        },
        Phase {
            name: "REST: TLS (ALPN h2), a partial preface",
            documented: header_read,
            open: Box::new(tls(api, b"h2", b"PRI * HTTP/2.0")),
        },
        Phase {
            name: "REST: TLS (ALPN h2), the preface, no stream",
            documented: idle,
            open: Box::new(tls(api, b"h2", PREFACE)),
        },
        Phase {
            name: "gateway: silent TCP",
            documented: hello,
            open: Box::new(connect(gateway)),
        },
        Phase {
            name: "gateway: TLS handshake never finished",
            documented: hello.min(HANDSHAKE),
            open: Box::new(hello_only(gateway)),
        },
        Phase {
            name: "gateway: TLS (ALPN h2), then no preface",
            documented: hello,
            open: Box::new(tls(gateway, b"h2", b"")),
        },
        Phase {
            name: "gateway: TLS (ALPN h2), the preface, no stream",
            documented: hello,
            open: Box::new(tls(gateway, b"h2", PREFACE)),
        },
        Phase {
            name: "DNS TCP: silent",
            documented: dns_idle,
            open: Box::new(connect(dns)),
        },
        Phase {
            name: "DNS TCP: half a message",
            documented: dns_idle,
            open: Box::new(move || {
                let mut tcp = TcpStream::connect(dns).unwrap();
                tcp.write_all(&[0, 40, 0x12, 0x34]).unwrap();
                tcp
            }),
        },
    ];
    // All at once: the test lasts as long as the longest phase.
    let measured: Vec<(&str, Duration, Option<Duration>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = phases
            .into_iter()
            .map(|phase| {
                scope.spawn(move || {
                    let since = Instant::now();
                    let stream = (phase.open)();
                    let limit = phase.documented * 2 + Duration::from_secs(5);
                    (
                        phase.name,
                        phase.documented,
                        closed_after(stream, since, limit),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut wrong = Vec::new();
    for (name, documented, closed) in &measured {
        eprintln!("listeners: {name}: documented {documented:?}, closed after {closed:?}");
        // Not before the timeout (less timer slack), and within 2 s after it.
        let near = closed.is_some_and(|closed| {
            closed + Duration::from_millis(300) >= *documented
                && closed <= *documented + Duration::from_secs(2)
        });
        if !near {
            wrong.push(format!(
                "{name}: documented {documented:?}, closed after {closed:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "phases not closed on time: {wrong:#?}");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tls_connections_at_the_gateway_cap_do_not_keep_an_agent_out() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write_pki(dir.path());
    let cap = 8;
    // A long Hello deadline: the idle connections stay open while the agent connects.
    let server = start_tls_apiserver(
        dir.path(),
        &format!(
            "limits:\n  gateway: {{maxConnections: {cap}, helloTimeoutSeconds: 60}}\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\n"
        ),
    );
    let api: SocketAddr = server.addr("api").parse().unwrap();
    let gateway: SocketAddr = server.addr("agent").parse().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let ca_file = dir.path().join("ca.crt");
    write_kubeconfig(
        &kubeconfig,
        &format!("https://{api}"),
        Some(&ca_file),
        Some(ADMIN_TOKEN),
    );
    let k = Kubectl::new(None, kubeconfig);
    let spec = ClusterSpec::numbered(BLOCK, 1, "eu", 50.1, 8.6);
    create_cluster(&k, dir.path(), &spec);
    let curl = |args: &[&str]| -> Vec<String> {
        let mut all = vec![
            "--cacert".to_string(),
            ca_file.display().to_string(),
            "-H".to_string(),
            format!("Authorization: Bearer {ADMIN_TOKEN}"),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        all
    };
    let token = {
        let args = curl(&[
            "-X",
            "POST",
            &format!(
                "https://{api}/apis/fedingress.io/v1alpha1/clusters/{}/token",
                spec.name
            ),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let body = fedingress_tests::federation::curl_json(&args).unwrap();
        body["token"].as_str().unwrap().to_string()
    };
    let metrics = || {
        let args = curl(&["-sS", &format!("https://{api}/metrics")]);
        let out = std::process::Command::new("curl")
            .args(&args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };

    // The cap's worth of connections that finish TLS (ALPN h2) and say nothing.
    let held: Vec<TcpStream> = (0..cap)
        .map(|_| tls_then(gateway, &ca, b"h2", b""))
        .collect();
    let opened = Instant::now();
    eventually(Duration::from_secs(10), "the cap is full", || {
        let text = metrics();
        (metric(&text, "fedingress_gateway_connections") == Some(cap as f64))
            .then_some(())
            .ok_or(text)
    });

    // An agent connects while they are held.
    let config = https_agent_config(
        dir.path(),
        &format!("https://{gateway}"),
        &ca_file,
        &spec,
        &token,
        false,
    );
    let _agent = start_agent(&config, &spec.name);
    eventually(Duration::from_secs(20), "the agent's session is up", || {
        let text = metrics();
        (metric(&text, "fedingress_agents_connected") == Some(1.0))
            .then_some(())
            .ok_or(text)
    });
    assert!(
        opened.elapsed() < Duration::from_secs(50),
        "the idle connections were still held"
    );
    let text = metrics();
    let refused = metric(&text, "fedingress_gateway_connections_refused_total");
    let evicted = metric(
        &text,
        "fedingress_gateway_connections_closed_total{reason=\"evicted\"}",
    );
    eprintln!(
        "listeners: {cap} idle TLS connections held; agent connected after {:?}, refused {refused:?}, evicted {evicted:?}",
        opened.elapsed()
    );
    assert_eq!(refused, Some(0.0), "no gateway connection refused");
    assert!(
        evicted.unwrap_or(0.0) >= 1.0,
        "an idle connection made room"
    );
    drop(held);
}

/// The response headers of `url` (curl with `args`), names lowercased.
fn headers(url: &str, args: &[&str]) -> Vec<(String, String)> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "/dev/null"])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_string()))
        .collect()
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_responses_carry_security_headers_and_hsts_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    write_pki(dir.path());
    let server = start_tls_apiserver(dir.path(), "");
    let api = server.addr("api");
    let ca_file = dir.path().join("ca.crt").display().to_string();
    let auth = format!("Authorization: Bearer {ADMIN_TOKEN}");
    for path in [
        "/readyz",
        "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses",
        "/no/such/path",
    ] {
        let got = headers(
            &format!("https://{api}{path}"),
            &["--cacert", &ca_file, "-H", &auth],
        );
        eprintln!("listeners: TLS {path}: {got:?}");
        assert_eq!(
            header(&got, "x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(
            header(&got, "cache-control"),
            Some("no-cache, private"),
            "{path}"
        );
        assert_eq!(
            header(&got, "strict-transport-security"),
            Some("max-age=31536000"),
            "{path}"
        );
    }
    drop(server);
    // Plain text (loopback, dev): the same, without HSTS.
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = start_apiserver(plain_dir.path(), "", &[]);
    let got = headers(&format!("http://{}/readyz", plain.addr("api")), &[]);
    assert_eq!(header(&got, "x-content-type-options"), Some("nosniff"));
    assert_eq!(header(&got, "strict-transport-security"), None);
}
