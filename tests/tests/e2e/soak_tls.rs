//! Hostile-input soak of the TLS listeners (issue 12): a real ClientHello captured from a
//! rustls client, mutated structurally (record and handshake lengths, session id, cipher
//! suites, extension lengths, the SNI name) and byte-wise (flips, truncation), sent to
//! the apiserver's TLS listener, the agent gateway's TLS listener and a standalone
//! agent's TLS (terminating) listener. Afterwards real TLS clients still complete
//! handshakes with all three, and each picks the cipher suite in its own order.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use fedingress_tests::federation::{
    ClusterSpec, agent_config, cluster_entry, create_cluster, get_json, issue_token, start_agent,
};
use fedingress_tests::soak::{Rng, exchange, mutate_some, scaled, start_apiserver};
use fedingress_tests::{Kubectl, eventually, write_kubeconfig};
use fedingress_testsupport::tls::Ca;
use futures_util::StreamExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

const WAIT: Duration = Duration::from_secs(90);
/// This test's loopback block (127.0.63.x) for the agent's listener.
const BLOCK: u8 = 63;
const HOST: &str = "soak.example.com";
const ADMIN_TOKEN: &str = "soak-admin-token-0123456789";

/// A CA and a leaf for `names` (PEM: CA, leaf certificate, leaf key).
fn pki(names: &[&str]) -> (String, String, String) {
    use rcgen::{CertificateParams, SanType};
    let ca = Ca::new("soak test CA");
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0]);
    let (cert, key) = ca.sign(params);
    (ca.pem, cert, key)
}

fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
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
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// The first flight of a real rustls client: a ClientHello record.
fn captured_hello(config: Arc<rustls::ClientConfig>, name: &str) -> Vec<u8> {
    let mut connection =
        rustls::ClientConnection::new(config, ServerName::try_from(name.to_string()).unwrap())
            .unwrap();
    let mut hello = Vec::new();
    while connection.wants_write() {
        connection.write_tls(&mut hello).unwrap();
    }
    hello
}

/// A full handshake with `addr` (blocking); the negotiated ALPN protocol.
fn handshake(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    name: &str,
) -> Result<Option<Vec<u8>>, String> {
    let mut tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut connection =
        rustls::ClientConnection::new(config, ServerName::try_from(name.to_string()).unwrap())
            .unwrap();
    while connection.is_handshaking() {
        connection
            .complete_io(&mut tcp)
            .map_err(|e| e.to_string())?;
    }
    let alpn = connection.alpn_protocol().map(<[u8]>::to_vec);
    connection.send_close_notify();
    let _ = connection.complete_io(&mut tcp);
    let _ = tcp.flush();
    Ok(alpn)
}

/// The cipher suite `addr` picks for a client that prefers AES-128 to AES-256, speaking
/// only `version` (blocking).
fn suite_chosen(
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
    name: &str,
    version: &'static rustls::SupportedProtocolVersion,
) -> rustls::CipherSuite {
    use rustls::crypto::aws_lc_rs::cipher_suite::*;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites = vec![
        TLS13_AES_128_GCM_SHA256,
        TLS13_AES_256_GCM_SHA384,
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ];
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut connection = rustls::ClientConnection::new(
        Arc::new(config),
        ServerName::try_from(name.to_string()).unwrap(),
    )
    .unwrap();
    while connection.is_handshaking() {
        connection.complete_io(&mut tcp).unwrap();
    }
    connection.negotiated_cipher_suite().unwrap().suite()
}

/// Offsets of a ClientHello's variable-length fields, for structural mutations.
struct Layout {
    /// Where each length field starts and how wide it is (bytes).
    lengths: Vec<(usize, usize)>,
    /// The SNI host name bytes.
    sni: Option<(usize, usize)>,
}

fn layout(hello: &[u8]) -> Layout {
    let mut lengths = vec![(3, 2), (6, 3)]; // record length, handshake length
    let mut at = 5 + 4 + 2 + 32; // record, handshake header, version, random
    let mut sni = None;
    let get = |at: usize, width: usize| -> usize {
        hello[at..at + width]
            .iter()
            .fold(0usize, |n, b| n << 8 | *b as usize)
    };
    lengths.push((at, 1));
    at += 1 + get(at, 1); // session id
    lengths.push((at, 2));
    at += 2 + get(at, 2); // cipher suites
    lengths.push((at, 1));
    at += 1 + get(at, 1); // compression
    lengths.push((at, 2));
    let end = at + 2 + get(at, 2);
    at += 2;
    while at + 4 <= end.min(hello.len()) {
        let kind = get(at, 2);
        let len = get(at + 2, 2);
        lengths.push((at + 2, 2));
        if kind == 0 && at + 9 <= hello.len() {
            // server_name: list length, type, name length, name
            lengths.push((at + 4, 2));
            lengths.push((at + 7, 2));
            sni = Some((at + 9, get(at + 7, 2)));
        }
        at += 4 + len;
    }
    Layout { lengths, sni }
}

#[derive(Arbitrary, Debug)]
enum HelloMutation {
    /// A length field set to an interesting value.
    Length { which: u8, value: u8 },
    /// The SNI name replaced (garbage, huge, empty, with a NUL).
    Sni(SniChoice),
    /// Bytes chosen at random.
    Bytes(u8),
    /// Cut short.
    Truncate(u16),
    /// Split into many tiny records.
    Fragment(u8),
    /// Another record type or version in the header.
    RecordHeader(u8, u8),
}

#[derive(Arbitrary, Debug)]
enum SniChoice {
    Garbage(Vec<u8>),
    Long(u16),
    Empty,
    Nul,
}

fn mutate_hello(
    rng: &mut Rng,
    original: &[u8],
    layout: &Layout,
    mutation: &HelloMutation,
) -> Vec<u8> {
    let mut hello = original.to_vec();
    match mutation {
        HelloMutation::Length { which, value } => {
            let (at, width) = layout.lengths[*which as usize % layout.lengths.len()];
            let values: [u64; 6] = [0, 1, 0xff, 0xffff, 0xff_ffff, rng.next_u64()];
            let value = values[*value as usize % values.len()];
            for i in 0..width {
                hello[at + i] = (value >> (8 * (width - 1 - i))) as u8;
            }
        }
        HelloMutation::Sni(choice) => {
            if let Some((at, len)) = layout.sni {
                let name: Vec<u8> = match choice {
                    SniChoice::Garbage(bytes) => bytes.clone(),
                    SniChoice::Long(n) => vec![b'a'; *n as usize % 70_000],
                    SniChoice::Empty => Vec::new(),
                    SniChoice::Nul => b"soak.example.com\0.evil".to_vec(),
                };
                // The lengths around it are left as they were: they now lie.
                hello.splice(at..(at + len).min(hello.len()), name);
            }
        }
        HelloMutation::Bytes(n) => mutate_some(rng, &mut hello, *n as usize % 8),
        HelloMutation::Truncate(n) => hello.truncate(*n as usize % hello.len()),
        HelloMutation::Fragment(size) => {
            let size = (*size as usize % 40).max(1);
            let body = hello[5..].to_vec();
            hello = Vec::new();
            for piece in body.chunks(size) {
                hello.extend_from_slice(&[22, 3, 1]);
                hello.extend_from_slice(&(piece.len() as u16).to_be_bytes());
                hello.extend_from_slice(piece);
            }
        }
        HelloMutation::RecordHeader(kind, version) => {
            hello[0] = *kind;
            hello[1] = *version;
        }
    }
    hello
}

async fn soak(rng: &mut Rng, target: &str, addr: SocketAddr, hello: &[u8], count: usize) {
    let layout = layout(hello);
    let hellos: Vec<Vec<u8>> = (0..count)
        .map(|_| {
            let mutation: HelloMutation = rng.arbitrary();
            mutate_hello(rng, hello, &layout, &mutation)
        })
        .collect();
    let started = Instant::now();
    let answered: Vec<usize> = futures_util::stream::iter(
        hellos
            .iter()
            .map(|hello| async move { exchange(addr, hello, Duration::from_secs(5)).await.len() }),
    )
    .buffer_unordered(64)
    .collect()
    .await;
    eprintln!(
        "soak_tls: {target}: {count} mutated ClientHellos in {:?}, {} answered with bytes (alerts or a ServerHello)",
        started.elapsed(),
        answered.iter().filter(|n| **n > 0).count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_listeners_survive_mutated_client_hellos() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki(&["localhost", HOST]);
    for (name, pem) in [("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)] {
        std::fs::write(dir.path().join(name), pem).unwrap();
    }
    std::fs::write(
        dir.path().join("tokens.csv"),
        format!("{ADMIN_TOKEN},soak-admin,1,\"fedingress:admins\"\n"),
    )
    .unwrap();
    let server = start_apiserver(
        dir.path(),
        &format!(
            "tls: {{certFile: '{0}/tls.crt', keyFile: '{0}/tls.key'}}\ntokenFile: '{0}/tokens.csv'\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\n",
            dir.path().display()
        ),
        &[],
    );
    let api: SocketAddr = server.addr("api").parse().unwrap();
    let gateway: SocketAddr = server.addr("agent").parse().unwrap();

    // A standalone agent terminating TLS for HOST.
    let kubeconfig = dir.path().join("kubeconfig");
    write_kubeconfig(
        &kubeconfig,
        &format!("https://{api}"),
        Some(&dir.path().join("ca.crt")),
        Some(ADMIN_TOKEN),
    );
    let k = Kubectl::new(None, kubeconfig);
    let spec = ClusterSpec::numbered(BLOCK, 1, "eu", 50.1, 8.6);
    create_cluster(&k, dir.path(), &spec);
    let token = {
        let body = fedingress_tests::federation::curl_json(&[
            "--cacert",
            &dir.path().join("ca.crt").display().to_string(),
            "-H",
            &format!("Authorization: Bearer {ADMIN_TOKEN}"),
            "-X",
            "POST",
            &format!(
                "https://{api}/apis/fedingress.io/v1alpha1/clusters/{}/token",
                spec.name
            ),
        ])
        .unwrap();
        body["token"].as_str().unwrap().to_string()
    };
    let _ = issue_token; // the plain-HTTP helper does not fit a TLS hub
    let config = agent_config(dir.path(), &format!("https://{gateway}"), &spec, &token);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace(
        "hub:\n",
        &format!(
            "hub:\n  caFile: '{}'\n",
            dir.path().join("ca.crt").display()
        ),
    );
    text.push_str(&format!(
        "tlsSecrets:\n  soak-tls: {{certFile: '{0}/tls.crt', keyFile: '{0}/tls.key'}}\n",
        dir.path().display()
    ));
    std::fs::write(&config, text).unwrap();
    let ingress = dir.path().join("tls.yaml");
    std::fs::write(
        &ingress,
        format!("apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: tls\nspec:\n  rules:\n  - protocol: TLS\n    host: {HOST}\n    port: 7443\n    tlsMode: Terminate\n    backend: {{service: echo, port: 9000}}\n  tls:\n  - {{hosts: [{HOST}], secretName: soak-tls}}\n  traffic:\n    dnsName: {HOST}\n"),
    )
    .unwrap();
    k.ok(&["apply", "-f", &ingress.display().to_string()]);
    let _agent = start_agent(&config, &spec.name);
    eventually(WAIT, "the agent applies the TLS rule", || {
        let object = get_json(&k, &["federatedingress", "tls"]);
        let entry = cluster_entry(&object, &spec.name);
        (entry["phase"] == "Applied")
            .then_some(())
            .ok_or(entry.to_string())
    });
    let listener = SocketAddr::new(spec.bind, 7443);

    let h2_and_h1: &[&[u8]] = &[b"h2", b"http/1.1"];
    let h2: &[&[u8]] = &[b"h2"];
    let targets = [
        ("apiserver", api, client_config(&ca, h2_and_h1), "localhost"),
        (
            "agent gateway",
            gateway,
            client_config(&ca, h2),
            "localhost",
        ),
        (
            "agent TLS listener",
            listener,
            client_config(&ca, &[]),
            HOST,
        ),
    ];
    let mut rng = Rng::from_env("soak_tls", 0x5eed_0003);
    let count = scaled(1500);
    for (target, addr, config, name) in &targets {
        let hello = captured_hello(config.clone(), name);
        soak(&mut rng, target, *addr, &hello, count).await;
    }
    // Every listener picks the suite in its own order (strongest first), not in the
    // client's: a client preferring AES-128 gets AES-256 (issue 23, item 8).
    let mut clients_choice = Vec::new();
    for (target, addr, _, name) in &targets {
        let alpn: &[&[u8]] = if *target == "agent TLS listener" {
            &[]
        } else {
            h2
        };
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let chosen = suite_chosen(*addr, &ca, alpn, name, version);
            eprintln!("soak_tls: {target}: {version:?} suite {chosen:?}");
            if !format!("{chosen:?}").contains("AES_256_GCM") {
                clients_choice.push(format!("{target} ({version:?}): {chosen:?}"));
            }
        }
    }
    assert!(
        clients_choice.is_empty(),
        "listeners that took the client's first choice, not their own: {clients_choice:#?}"
    );
    // Real clients still complete handshakes with every listener.
    for (target, addr, config, name) in targets {
        let alpn = tokio::task::spawn_blocking(move || handshake(addr, config, name))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{target}: handshake after the soak: {e}"));
        eprintln!("soak_tls: {target}: handshake completes (ALPN {alpn:?})");
    }
    // And the API answers over TLS.
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--cacert",
            &dir.path().join("ca.crt").display().to_string(),
            &format!("https://{api}/readyz"),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
}
