//! The L7 data plane end to end: a real hub and real standalone agents serving HTTP,
//! HTTPS (a test CA), TLS passthrough, TCP and UDP of one FederatedIngress, checked with
//! curl (`--resolve` for Host and SNI, HTTP/1.1 and h2), rustls and reqwest;
//! longest-prefix routing; 503 when backends are down and recovery; drain of in-flight
//! requests through a plan change and on SIGTERM; no certificate for a wrong SNI.
//! Each test has its own loopback block (127.0.31.x - 127.0.33.x).

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fedingress_tests::echo::{Echo, tcp_roundtrip, udp_roundtrip};
use fedingress_tests::federation::{
    ClusterSpec, HubProcess, cluster_entry, create_cluster, get_json, issue_token, kubectl,
    start_agent, start_hub,
};
use fedingress_tests::web::{Curl, Web, curl, tls_roundtrip};
use fedingress_tests::{Kubectl, Process, eventually};
use fedingress_testsupport::tls::{Ca, TlsEcho};

/// Generous: timing is measured by the benchmarks, not here.
const WAIT: Duration = Duration::from_secs(30);

fn ip(block: u8, host: u8) -> IpAddr {
    IpAddr::from([127, 0, block, host])
}

/// Creates the Cluster, issues a token, writes the agent config; returns its path.
#[allow(clippy::too_many_arguments)]
fn agent(
    dir: &Path,
    hub: &HubProcess,
    k: &Kubectl,
    name: &str,
    bind: IpAddr,
    services: &[(&str, SocketAddr)],
    extra: &str,
) -> PathBuf {
    create_cluster(
        k,
        dir,
        &ClusterSpec {
            name: name.to_string(),
            region: format!("region-{name}"),
            latitude: 10.0,
            longitude: 20.0,
            bind,
            backend: services[0].1,
            advertise: None,
            capacity_rps: None,
        },
    );
    let (_, token) = issue_token(&hub.api, name).unwrap();
    let agent_dir = dir.join(format!("agent-{name}"));
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(agent_dir.join("token"), token).unwrap();
    let services: String = services
        .iter()
        .map(|(service, addr)| format!("  {service}: [\"{addr}\"]\n"))
        .collect();
    let text = format!(
        "hub:\n  address: {hub}\ncluster: {name}\ntokenFile: token\ndriver: standalone\nlisten:\n- bind: \"{bind}\"\nservices:\n{services}healthCheck:\n  intervalMs: 200\n  timeoutMs: 500\n  healthyThreshold: 1\n  unhealthyThreshold: 2\n  http: {{path: /healthz}}\nudpIdleTimeoutMs: 5000\nstateDir: state\nadmin: 127.0.0.1:0\nreportIntervalMs: 1000\n{extra}",
        hub = hub.agent,
    );
    let path = agent_dir.join("agent.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn apply(k: &Kubectl, dir: &Path, name: &str, yaml: &str) {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    k.ok(&["apply", "-f", &path.display().to_string()]);
}

/// Waits until every named cluster applied the ingress and reports it healthy.
fn wait_healthy(k: &Kubectl, ingress: &str, clusters: &[&str]) {
    eventually(WAIT, "every cluster applied and healthy", || {
        let object = get_json(k, &["federatedingress", ingress]);
        for cluster in clusters {
            let entry = cluster_entry(&object, cluster);
            if entry["phase"] != "Applied" || entry["healthy"] != true {
                return Err(format!("{cluster}: {entry}"));
            }
        }
        Ok(())
    });
}

/// The JSON a [`Web`] backend answered, or why not.
fn json(result: &Curl) -> Result<serde_json::Value, String> {
    if !result.ok {
        return Err(result.stderr.clone());
    }
    let body = result.stdout.lines().next().unwrap_or_default();
    serde_json::from_str(body).map_err(|_| format!("not JSON: {}", result.stdout))
}

const EXAMPLE: &str = "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: shop
spec:
  rules:
  - protocol: HTTP
    host: shop.example.com
    port: 18080
    paths:
    - {path: /, pathType: Prefix, backend: {service: web, port: 9080}}
    - {path: /api, pathType: Prefix, backend: {service: api, port: 9081}}
  - protocol: HTTPS
    host: shop.example.com
    port: 18443
    paths:
    - {path: /api, pathType: Prefix, backend: {service: api, port: 9081}}
    - {path: /, pathType: Prefix, backend: {service: web, port: 9080}}
  - protocol: TLS
    host: db.example.com
    port: 18443
    tlsMode: Passthrough
    backend: {service: pg, port: 9443}
  - protocol: TCP
    port: 13306
    name: mysql
    backend: {service: echo, port: 9000}
  - protocol: UDP
    port: 13306
    backend: {service: echo, port: 9000}
  tls:
  - {hosts: [shop.example.com], secretName: shop-tls}
  traffic:
    dnsName: shop.example.com
";

struct Member {
    name: String,
    bind: IpAddr,
    web: Option<Web>,
    _api: Web,
    _pg: TlsEcho,
    _echo: Echo,
    _agent: Process,
}

#[test]
fn the_example_ingress_serves_every_protocol_through_three_agents() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 31);
    let k = kubectl(dir, &hub.api);
    let ca = Ca::new("fedingress e2e CA");
    let (cert, key) = ca.leaf(&["shop.example.com"]);
    std::fs::write(dir.join("shop.crt"), cert).unwrap();
    std::fs::write(dir.join("shop.key"), key).unwrap();
    std::fs::write(dir.join("ca.crt"), &ca.pem).unwrap();
    let ca_file = dir.join("ca.crt").display().to_string();
    let db_ca = Ca::new("database CA");
    let (db_cert, db_key) = db_ca.leaf(&["db.example.com"]);
    let tls = format!(
        "tlsSecrets:\n  shop-tls: {{certFile: '{0}/shop.crt', keyFile: '{0}/shop.key'}}\n",
        dir.display()
    );

    let mut members: Vec<Member> = (1..=3u8)
        .map(|n| {
            let name = format!("c{n}");
            let backend = ip(31, 20 + n);
            let web = SocketAddr::new(backend, 9080);
            let api = SocketAddr::new(backend, 9081);
            let pg = SocketAddr::new(backend, 9443);
            let echo = SocketAddr::new(backend, 9000);
            let bind = ip(31, 10 + n);
            let config = agent(
                dir,
                &hub,
                &k,
                &name,
                bind,
                &[("web", web), ("api", api), ("pg", pg), ("echo", echo)],
                &tls,
            );
            Member {
                web: Some(Web::start(web, &format!("web-{name}")).unwrap()),
                _api: Web::start(api, &format!("api-{name}")).unwrap(),
                _pg: TlsEcho::start(pg, &db_cert, &db_key).unwrap(),
                _echo: Echo::start(echo).unwrap(),
                _agent: start_agent(&config, &name),
                name,
                bind,
            }
        })
        .collect();
    apply(&k, dir, "shop", EXAMPLE);
    wait_healthy(&k, "shop", &["c1", "c2", "c3"]);

    for member in &members {
        let bind = member.bind;
        let name = &member.name;
        let http = format!("shop.example.com:18080:{bind}");
        let https = format!("shop.example.com:18443:{bind}");
        // HTTP/1.1: Host routing, longest prefix, forwarding headers.
        let seen = eventually(WAIT, "HTTP through the agent", || {
            json(&curl(&[
                "--resolve",
                &http,
                "http://shop.example.com:18080/cart",
            ]))
        });
        assert_eq!(seen["backend"], format!("web-{name}"), "{seen}");
        assert_eq!(seen["host"], "shop.example.com:18080");
        assert_eq!(seen["xfp"], "http");
        assert_eq!(seen["xfh"], "shop.example.com:18080");
        assert!(
            seen["forwarded"]
                .as_str()
                .unwrap()
                .ends_with(";proto=http;host=\"shop.example.com:18080\""),
            "{seen}"
        );
        assert!(!seen["xff"].as_str().unwrap().is_empty(), "{seen}");
        let seen = json(&curl(&[
            "--resolve",
            &http,
            "http://shop.example.com:18080/api/v1/items",
        ]))
        .unwrap();
        assert_eq!(seen["backend"], format!("api-{name}"));
        let seen = json(&curl(&[
            "--resolve",
            &http,
            "http://shop.example.com:18080/apis",
        ]))
        .unwrap();
        assert_eq!(
            seen["backend"],
            format!("web-{name}"),
            "/apis is not under /api"
        );
        // h2c with prior knowledge.
        let h2c = curl(&[
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_version}",
            "--resolve",
            &http,
            "http://shop.example.com:18080/api",
        ]);
        assert!(h2c.ok, "{h2c:?}");
        assert_eq!(h2c.stdout.lines().last(), Some("2"), "{h2c:?}");
        assert_eq!(json(&h2c).unwrap()["backend"], format!("api-{name}"));
        // No rule for this host: 404 with a clear body.
        let missing = curl(&[
            "--resolve",
            &format!("other.example.com:18080:{bind}"),
            "http://other.example.com:18080/",
        ]);
        assert!(
            missing.stdout.starts_with(
                "404 Not Found: no rule of this listener matches host \"other.example.com\""
            ),
            "{missing:?}"
        );

        // HTTPS: the shop certificate (checked against the test CA), h2 by ALPN, HTTP/1.1.
        for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
            let result = curl(&[
                flag,
                "--cacert",
                &ca_file,
                "-w",
                "\n%{http_version}",
                "--resolve",
                &https,
                "https://shop.example.com:18443/api/x",
            ]);
            assert!(result.ok, "{result:?}");
            assert_eq!(result.stdout.lines().last(), Some(version), "{result:?}");
            let seen = json(&result).unwrap();
            assert_eq!(seen["backend"], format!("api-{name}"));
            assert_eq!(seen["xfp"], "https");
        }
        let seen = json(&curl(&[
            "--cacert",
            &ca_file,
            "--resolve",
            &https,
            "https://shop.example.com:18443/",
        ]))
        .unwrap();
        assert_eq!(seen["backend"], format!("web-{name}"));

        // TLS passthrough on the same port: the backend's own certificate.
        let listener = SocketAddr::new(bind, 18443);
        assert_eq!(
            tls_roundtrip(listener, "db.example.com", &db_ca.pem, "select 1").unwrap(),
            "SELECT 1"
        );
        assert!(tls_roundtrip(listener, "db.example.com", &ca.pem, "x").is_err());

        // A wrong SNI gets no certificate at all: a fatal alert instead.
        let wrong = curl(&[
            "-vk",
            "--resolve",
            &format!("evil.test:18443:{bind}"),
            "https://evil.test:18443/",
        ]);
        assert!(!wrong.ok, "{wrong:?}");
        assert!(wrong.stderr.contains("unrecognized name"), "{wrong:?}");
        assert!(!wrong.stderr.contains("Server certificate"), "{wrong:?}");
        let right = curl(&[
            "-vk",
            "--resolve",
            &https,
            "https://shop.example.com:18443/",
        ]);
        assert!(right.stderr.contains("Server certificate"), "{right:?}");

        // TCP and UDP on one port.
        let l4 = SocketAddr::new(bind, 13306);
        assert_eq!(tcp_roundtrip(l4, "hello tcp\n").unwrap(), "HELLO TCP\n");
        assert_eq!(udp_roundtrip(l4, "hello udp").unwrap(), "HELLO UDP");
    }

    // A second ingress shares the HTTP port with another host.
    apply(
        &k,
        dir,
        "blog",
        "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: blog
spec:
  rules:
  - protocol: HTTP
    host: blog.example.com
    port: 18080
    paths: [{path: /, pathType: Prefix, backend: {service: api, port: 9081}}]
",
    );
    wait_healthy(&k, "blog", &["c1", "c2", "c3"]);
    for member in &members {
        let blog = format!("blog.example.com:18080:{}", member.bind);
        let seen = json(&curl(&[
            "--resolve",
            &blog,
            "http://blog.example.com:18080/post",
        ]))
        .unwrap();
        assert_eq!(seen["backend"], format!("api-{}", member.name));
        let shop = format!("shop.example.com:18080:{}", member.bind);
        let seen = json(&curl(&[
            "--resolve",
            &shop,
            "http://shop.example.com:18080/post",
        ]))
        .unwrap();
        assert_eq!(seen["backend"], format!("web-{}", member.name));
    }

    // A Rust client (reqwest over rustls) with --resolve-like pinning: h2 by ALPN.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (version, body) = runtime.block_on(async {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let client = reqwest::Client::builder()
            .no_proxy()
            .resolve("shop.example.com", SocketAddr::new(members[1].bind, 18443))
            .tls_certs_only([reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap()])
            .build()
            .unwrap();
        let response = client
            .get("https://shop.example.com:18443/api/rust")
            .send()
            .await
            .unwrap();
        (response.version(), response.text().await.unwrap())
    });
    assert_eq!(version, reqwest::Version::HTTP_2);
    assert!(body.contains("\"api-c2\""), "{body}");

    // Load reaches the hub: the cluster's requests per second.
    let http = format!("shop.example.com:18080:{}", members[0].bind);
    eventually(WAIT, "c1 reports HTTP requests per second", || {
        for _ in 0..20 {
            curl(&["--resolve", &http, "http://shop.example.com:18080/"]);
        }
        let cluster = get_json(&k, &["cluster", "c1"]);
        let rps = cluster["status"]["load"]["rps"].as_f64().unwrap_or(0.0);
        if rps > 0.0 {
            Ok(())
        } else {
            Err(format!("{}", cluster["status"]))
        }
    });

    // c1's web backend dies: 503 there (the api path still works), the hub sees it;
    // the backend returns: 200 again.
    members[0].web = None;
    eventually(WAIT, "503 from c1", || {
        let result = curl(&["--resolve", &http, "http://shop.example.com:18080/"]);
        if result.stdout == "503 Service Unavailable: no healthy endpoint for service \"web\"\n" {
            Ok(())
        } else {
            Err(format!("{result:?}"))
        }
    });
    let seen = json(&curl(&[
        "--resolve",
        &http,
        "http://shop.example.com:18080/api",
    ]))
    .unwrap();
    assert_eq!(seen["backend"], "api-c1");
    eventually(WAIT, "the hub sees c1's web backend down", || {
        let entry = cluster_entry(&get_json(&k, &["federatedingress", "shop"]), "c1");
        let web = entry["backends"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["service"] == "web").cloned())
            .unwrap_or_default();
        if web["ready"] == 0 {
            Ok(())
        } else {
            Err(format!("{entry}"))
        }
    });
    members[0].web = Some(Web::start(SocketAddr::new(ip(31, 21), 9080), "web-c1").unwrap());
    eventually(WAIT, "c1 serves again", || {
        json(&curl(&[
            "--resolve",
            &http,
            "http://shop.example.com:18080/",
        ]))
        .and_then(|seen| {
            if seen["backend"] == "web-c1" {
                Ok(())
            } else {
                Err(format!("{seen}"))
            }
        })
    });
    wait_healthy(&k, "shop", &["c1", "c2", "c3"]);
}

fn slow_ingress(port: u16) -> String {
    format!(
        "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: slow
spec:
  rules:
  - protocol: HTTP
    port: {port}
    paths:
    - {{path: /, pathType: Prefix, backend: {{service: web, port: 9080}}}}
  traffic:
    dnsName: slow.example.com
"
    )
}

/// Starts a slow request on a thread; waits until the backend is answering it.
fn slow_request(url: String, web: &Web) -> std::thread::JoinHandle<Curl> {
    let request = std::thread::spawn(move || curl(&["-m", "30", &url]));
    eventually(WAIT, "the slow request reached the backend", || {
        if web.in_flight.load(std::sync::atomic::Ordering::SeqCst) == 1 {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    request
}

#[test]
fn an_in_flight_request_survives_a_plan_change_that_removes_its_listener() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 32);
    let k = kubectl(dir, &hub.api);
    let web = Web::start(SocketAddr::new(ip(32, 21), 9080), "web").unwrap();
    let bind = ip(32, 11);
    let config = agent(
        dir,
        &hub,
        &k,
        "c1",
        bind,
        &[("web", web.addr)],
        "drainTimeoutMs: 20000\n",
    );
    let _agent = start_agent(&config, "c1");
    apply(&k, dir, "slow", &slow_ingress(18081));
    wait_healthy(&k, "slow", &["c1"]);
    eventually(WAIT, "the listener serves", || {
        json(&curl(&[&format!("http://{bind}:18081/")])).map(|_| ())
    });

    let request = slow_request(format!("http://{bind}:18081/slow/4000"), &web);
    // The rule moves to another port: the old listener is removed.
    apply(&k, dir, "slow", &slow_ingress(18082));
    eventually(
        WAIT,
        "the new port serves and the old one is closed",
        || {
            json(&curl(&[&format!("http://{bind}:18082/")]))?;
            match std::net::TcpStream::connect(SocketAddr::new(bind, 18081)) {
                Ok(_) => Err("18081 still accepts".into()),
                Err(_) => Ok(()),
            }
        },
    );
    let result = request.join().unwrap();
    assert!(result.ok, "{result:?}");
    assert_eq!(result.stdout, "slow done");
}

#[test]
fn sigterm_drains_in_flight_requests_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 33);
    let k = kubectl(dir, &hub.api);
    let web = Web::start(SocketAddr::new(ip(33, 21), 9080), "web").unwrap();
    let bind = ip(33, 11);
    let config = agent(
        dir,
        &hub,
        &k,
        "c1",
        bind,
        &[("web", web.addr)],
        "drainTimeoutMs: 20000\n",
    );
    let agent = start_agent(&config, "c1");
    apply(&k, dir, "slow", &slow_ingress(18081));
    wait_healthy(&k, "slow", &["c1"]);
    eventually(WAIT, "the listener serves", || {
        json(&curl(&[&format!("http://{bind}:18081/")])).map(|_| ())
    });
    let request = slow_request(format!("http://{bind}:18081/slow/3000"), &web);
    let started = std::time::Instant::now();
    let status = agent.terminate(Duration::from_secs(30)).unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "exited before the request finished"
    );
    let result = request.join().unwrap();
    assert!(result.ok, "{result:?}");
    assert_eq!(result.stdout, "slow done");
    assert!(std::net::TcpStream::connect(SocketAddr::new(bind, 18081)).is_err());
}
