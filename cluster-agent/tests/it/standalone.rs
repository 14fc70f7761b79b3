//! The standalone data plane over real loopback sockets.
//!
//! Listeners come from rule ports, so they are fixed: each test binds its own address
//! 127.0.77.N (this crate's block) and ports 20000 + 10·N + k. Backends bind port 0;
//! UDP clients that need addresses of their own (the per-source cap) use 127.0.78.x.
//! Waits are `eventually`-style with generous bounds, never fixed sleeps.

// Test helpers panic on failure by design (clippy exempts only `#[test]` bodies).
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fedingress_agent::{Config, Standalone};
use fedingress_api::cluster::Address;
use fedingress_api::ingress::{Backend, HttpPath, IngressRule, Protocol, TlsMode};
use fedingress_api::plan::{AgentReport, ClusterPlan, IngressKey, IngressReport, IngressShare};
use fedingress_testsupport::echo::Echo;
use fedingress_testsupport::eventually_async;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);
const IO: Duration = Duration::from_secs(5);

/// 127.0.77.`test`: one loopback address per test.
fn test_ip(test: u8) -> IpAddr {
    IpAddr::from([127, 0, 77, test])
}

/// A fixed port for listener `k` of test `test`, in 20000-29999.
fn test_port(test: u8, k: u16) -> u16 {
    20000 + u16::from(test) * 10 + k
}

// ---------------------------------------------------------------------------------------
// Config, plans, clients, waits.

struct Setup<'a> {
    binds: Vec<String>,
    services: Vec<(&'a str, Vec<SocketAddr>)>,
    extra: &'a str,
}

fn config(setup: Setup<'_>) -> Config {
    let mut yaml = String::from(
        "hub: {address: 'http://127.0.0.1:6444'}\n\
         cluster: test\n\
         tokenFile: token\n\
         driver: standalone\n\
         stateDir: state\n",
    );
    yaml.push_str("listen:\n");
    for bind in &setup.binds {
        yaml.push_str(&format!("- {bind}\n"));
    }
    yaml.push_str("services:\n");
    for (name, endpoints) in &setup.services {
        let list: Vec<String> = endpoints.iter().map(|e| format!("'{e}'")).collect();
        yaml.push_str(&format!("  {name}: [{}]\n", list.join(", ")));
    }
    if !setup.extra.contains("healthCheck") {
        yaml.push_str(
            "healthCheck: {intervalMs: 100, timeoutMs: 200, healthyThreshold: 2, \
             unhealthyThreshold: 2, udp: {send: ping, expect: PING}}\n",
        );
    }
    yaml.push_str(setup.extra);
    Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e:?}\n{yaml}"))
}

fn bind(ip: IpAddr) -> String {
    format!("{{bind: '{ip}'}}")
}

fn rule(protocol: Protocol, port: u16, service: &str, backend_port: i32) -> IngressRule {
    let mut rule = IngressRule::new(protocol);
    rule.port = Some(i32::from(port));
    rule.backend = Some(Backend::new(service, backend_port));
    rule
}

fn share(name: &str, generation: i64, rules: Vec<IngressRule>) -> IngressShare {
    IngressShare {
        key: IngressKey::new("default", name),
        uid: format!("uid-{name}"),
        generation,
        rules,
        tls: Vec::new(),
        cluster_override: None,
        anycast_addresses: Vec::new(),
    }
}

fn ingress<'a>(report: &'a AgentReport, name: &str) -> &'a IngressReport {
    report
        .ingresses
        .iter()
        .find(|i| i.key.name == name)
        .unwrap_or_else(|| panic!("no report for {name}: {report:?}"))
}

fn ready(report: &AgentReport, name: &str) -> (u32, u32) {
    let backends = &ingress(report, name).backends;
    (
        backends.iter().map(|b| b.ready).sum(),
        backends.iter().map(|b| b.total).sum(),
    )
}

fn listener_active(report: &AgentReport, name: &str, protocol: &str) -> u64 {
    ingress(report, name)
        .listeners
        .iter()
        .filter(|l| l.protocol == protocol)
        .map(|l| l.active_connections)
        .sum()
}

/// One TCP request/response through a fresh connection.
async fn tcp_echo(addr: SocketAddr, text: &str) -> String {
    let mut stream = timeout(IO, TcpStream::connect(addr))
        .await
        .unwrap()
        .unwrap();
    exchange(&mut stream, text).await
}

async fn exchange(stream: &mut TcpStream, text: &str) -> String {
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; text.len()];
    timeout(IO, stream.read_exact(&mut buf))
        .await
        .expect("reply in time")
        .expect("reply");
    String::from_utf8(buf).unwrap()
}

/// A UDP client connected to `addr`, from the loopback address of the same family.
async fn udp_client(addr: SocketAddr) -> UdpSocket {
    let local: SocketAddr = if addr.is_ipv6() {
        "[::1]:0".parse().unwrap()
    } else {
        "127.0.0.1:0".parse().unwrap()
    };
    let socket = UdpSocket::bind(local).await.unwrap();
    socket.connect(addr).await.unwrap();
    socket
}

async fn udp_exchange(socket: &UdpSocket, text: &str) -> String {
    let mut buf = vec![0u8; 65_535];
    socket.send(text.as_bytes()).await.unwrap();
    let n = timeout(IO, socket.recv(&mut buf))
        .await
        .expect("UDP reply in time")
        .expect("UDP reply");
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_share_one_port_and_address() {
    let ip = test_ip(1);
    let port = test_port(1, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let backend_port = i32::from(echo.addr.port());
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", backend_port),
            rule(Protocol::Udp, port, "echo", backend_port),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let listener = SocketAddr::new(ip, port);
    assert_eq!(tcp_echo(listener, "hello\n").await, "HELLO\n");
    let client = udp_client(listener).await;
    assert_eq!(udp_exchange(&client, "hello udp").await, "HELLO UDP");
    assert_eq!(udp_exchange(&client, "again").await, "AGAIN");
    assert_eq!(echo.tcp_served(), 1);
    assert_eq!(echo.udp_served(), 2);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_across_two_endpoints() {
    let ip = test_ip(2);
    let port = test_port(2, 0);
    let a = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let b = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![a.addr, b.addr])],
        extra: "",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", 1),
            rule(Protocol::Udp, port, "echo", 1),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    eventually_async(WAIT, "both endpoints are healthy", || async {
        ready(&standalone.report(&plan), "echo") == (2, 2)
    })
    .await;
    let listener = SocketAddr::new(ip, port);
    for i in 0..10 {
        assert_eq!(
            tcp_echo(listener, &format!("tcp {i}")).await,
            format!("TCP {i}")
        );
    }
    assert_eq!((a.tcp_served(), b.tcp_served()), (5, 5));
    // UDP sessions are per client: four clients spread two and two.
    for i in 0..4 {
        let client = udp_client(listener).await;
        assert_eq!(
            udp_exchange(&client, &format!("udp {i}")).await,
            format!("UDP {i}")
        );
    }
    assert_eq!((a.udp_served(), b.udp_served()), (2, 2));
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_turns_unhealthy_and_traffic_moves_to_the_other() {
    let ip = test_ip(3);
    let port = test_port(3, 0);
    let a = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let b = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![a.addr, b.addr])],
        extra: "",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", 1),
            rule(Protocol::Udp, port, "echo", 1),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    eventually_async(WAIT, "both endpoints are healthy", || async {
        ready(&standalone.report(&plan), "echo") == (2, 2)
    })
    .await;
    let listener = SocketAddr::new(ip, port);
    // A UDP client whose session may be pinned to the endpoint about to die.
    let udp = udp_client(listener).await;
    assert_eq!(udp_exchange(&udp, "before").await, "BEFORE");

    let mut changes = standalone.subscribe();
    changes.borrow_and_update();
    let killed = Instant::now();
    drop(a);
    eventually_async(WAIT, "the killed endpoint is unhealthy", || async {
        ready(&standalone.report(&plan), "echo") == (1, 2)
    })
    .await;
    // Two failed checks 100 ms apart (plus timeouts and slack).
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(3), "ejection took {took:?}");
    assert!(
        changes.has_changed().unwrap(),
        "health change was signalled"
    );

    let before = b.tcp_served();
    for i in 0..6 {
        assert_eq!(
            tcp_echo(listener, &format!("after {i}")).await,
            format!("AFTER {i}")
        );
    }
    assert_eq!(b.tcp_served(), before + 6);
    // The same UDP client gets a new session to the healthy endpoint.
    assert_eq!(udp_exchange(&udp, "after").await, "AFTER");

    // With no endpoint left, clients are closed.
    drop(b);
    eventually_async(WAIT, "no endpoint is healthy", || async {
        ready(&standalone.report(&plan), "echo") == (0, 2)
    })
    .await;
    let mut stream = TcpStream::connect(listener).await.unwrap();
    let mut buf = [0u8; 16];
    let read = timeout(IO, stream.read(&mut buf))
        .await
        .expect("closed in time");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_connects_eject_an_endpoint_between_checks() {
    let ip = test_ip(4);
    let port = test_port(4, 0);
    let a = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let b = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    // One check at apply, the next a minute later: only passive ejection can act.
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![a.addr, b.addr])],
        extra: "healthCheck: {intervalMs: 60000, timeoutMs: 500, healthyThreshold: 1, unhealthyThreshold: 2}\n",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![rule(Protocol::Tcp, port, "echo", 1)],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    eventually_async(WAIT, "both endpoints are healthy", || async {
        ready(&standalone.report(&plan), "echo") == (2, 2)
    })
    .await;
    drop(a);
    let listener = SocketAddr::new(ip, port);
    let mut connections = 0;
    while ready(&standalone.report(&plan), "echo") != (1, 2) {
        connections += 1;
        assert!(connections <= 10, "not ejected after 10 connections");
        // Every client is served: a failed connect moves on to the next endpoint.
        assert_eq!(tcp_echo(listener, "retry").await, "RETRY");
    }
    assert!(connections >= 2, "ejected after {connections} connections");
    assert_eq!(b.tcp_served(), connections);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_counts_connections_sessions_and_endpoints() {
    let ip = test_ip(5);
    let port = test_port(5, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![format!("{{bind: '{ip}', advertise: 203.0.113.7}}")],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let backend_port = echo.addr.port();
    let plan = ClusterPlan::from(vec![share(
        "echo",
        7,
        vec![
            rule(Protocol::Tcp, port, "echo", i32::from(backend_port)),
            rule(Protocol::Udp, port, "echo", i32::from(backend_port)),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let listener = SocketAddr::new(ip, port);
    let mut streams = Vec::new();
    for i in 0..3 {
        let mut stream = TcpStream::connect(listener).await.unwrap();
        assert_eq!(
            exchange(&mut stream, &format!("c{i}")).await,
            format!("C{i}")
        );
        streams.push(stream);
    }
    let mut clients = Vec::new();
    for i in 0..2 {
        let client = udp_client(listener).await;
        assert_eq!(
            udp_exchange(&client, &format!("s{i}")).await,
            format!("S{i}")
        );
        clients.push(client);
    }
    eventually_async(WAIT, "the endpoint is healthy", || async {
        ready(&standalone.report(&plan), "echo") == (1, 1)
    })
    .await;
    let report = standalone.report(&plan);
    let advertised = vec![Address::ip("203.0.113.7".parse().unwrap())];
    assert_eq!(report.addresses, advertised);
    assert_eq!(report.active_connections, 5);
    let share = ingress(&report, "echo");
    assert_eq!(share.applied_generation, 7);
    assert_eq!(share.addresses, advertised);
    assert!(share.rule_errors.is_empty());
    assert_eq!(share.backends.len(), 1);
    assert_eq!(share.backends[0].service, "echo");
    assert_eq!(share.backends[0].port, i32::from(backend_port));
    assert_eq!(share.listeners.len(), 2);
    for load in &share.listeners {
        assert_eq!(load.port, port);
        let expected = if load.protocol == "TCP" { 3 } else { 2 };
        assert_eq!(load.active_connections, expected, "{load:?}");
        assert!(load.connections_per_second > 0.0, "{load:?}");
    }
    drop(streams);
    eventually_async(
        WAIT,
        "closed TCP connections are no longer active",
        || async { listener_active(&standalone.report(&plan), "echo", "TCP") == 0 },
    )
    .await;
    assert_eq!(listener_active(&standalone.report(&plan), "echo", "UDP"), 2);
    // A share the driver has not applied is reported as such.
    let mut newer = plan.clone();
    let other = self::share("other", 1, vec![]);
    newer.ingresses.insert(other.key.clone(), other);
    let report = standalone.report(&newer);
    assert_eq!(ingress(&report, "other").applied_generation, 0);
    standalone.shutdown().await;
}

/// Issue 24: the bytes a TCP and a UDP listener carry both ways are in `/metrics` per
/// listener and, per second, in the report's `bytes_per_second`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxied_bytes_count_in_metrics_and_in_bytes_per_second() {
    let ip = test_ip(30);
    let port = test_port(30, 0);
    let started = Instant::now();
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let backend_port = i32::from(echo.addr.port());
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", backend_port),
            rule(Protocol::Udp, port, "echo", backend_port),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    eventually_async(WAIT, "the endpoint is healthy", || async {
        ready(&standalone.report(&plan), "echo") == (1, 1)
    })
    .await;
    assert_eq!(standalone.bytes_total(), 0, "health checks are not proxied");
    let listener = SocketAddr::new(ip, port);
    // N bytes up and the same N back (the echo upper-cases them).
    const N: usize = 256 * 1024;
    let text = "x".repeat(N);
    let mut stream = TcpStream::connect(listener).await.unwrap();
    let (mut read, mut write) = stream.split();
    let sending = async { write.write_all(text.as_bytes()).await.unwrap() };
    let mut back = vec![0u8; N];
    let receiving = async {
        timeout(IO, read.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap()
    };
    tokio::join!(sending, receiving);
    assert!(back.iter().all(|b| *b == b'X'));
    let client = udp_client(listener).await;
    for i in 0..3 {
        let datagram = format!("{i}").repeat(100);
        assert_eq!(udp_exchange(&client, &datagram).await.len(), 100);
    }
    let total = 2 * N as u64 + 600;
    eventually_async(WAIT, "every byte counted", || async {
        standalone.bytes_total() == total
    })
    .await;
    let tcp = format!("kind=\"TCP\",address=\"{listener}\"");
    let udp = format!("kind=\"UDP\",address=\"{listener}\"");
    let bytes = |labels: &str, direction: &str| {
        metric(
            &standalone,
            "fedingress_agent_listener_bytes_total",
            &[labels, &format!("direction=\"{direction}\"")],
        )
    };
    assert_eq!(bytes(&tcp, "in"), N as f64);
    assert_eq!(bytes(&tcp, "out"), N as f64);
    assert_eq!(bytes(&udp, "in"), 300.0);
    assert_eq!(bytes(&udp, "out"), 300.0);
    // The rate is measured between two reports at least a second apart: the last one
    // before the transfer (total 0) and the first one a second after it.
    let rate = eventually_async(WAIT, "the transfer is in bytes_per_second", || async {
        Some(standalone.report(&plan).bytes_per_second).filter(|rate| *rate > 0.0)
    })
    .await;
    let longest = started.elapsed().as_secs_f64();
    assert!(
        rate <= total as f64 && rate * longest >= total as f64,
        "{rate} B/s is not {total} B over 1 s to {longest} s"
    );
    drop(stream);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_plan_keeps_unaffected_listeners_and_closes_removed_ones() {
    let ip = test_ip(6);
    let kept = test_port(6, 0);
    let removed = test_port(6, 1);
    let a = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let b = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("one", vec![a.addr]), ("two", vec![b.addr])],
        extra: "",
    }));
    let first = ClusterPlan::from(vec![
        share("keep", 1, vec![rule(Protocol::Tcp, kept, "one", 1)]),
        share(
            "gone",
            1,
            vec![
                rule(Protocol::Tcp, removed, "one", 1),
                rule(Protocol::Udp, removed, "one", 1),
            ],
        ),
    ]);
    assert_eq!(standalone.apply(&first).await, vec![]);
    let mut established = TcpStream::connect(SocketAddr::new(ip, kept)).await.unwrap();
    assert_eq!(exchange(&mut established, "one").await, "ONE");
    assert_eq!(tcp_echo(SocketAddr::new(ip, removed), "x").await, "X");
    let mut changes = standalone.subscribe();
    changes.borrow_and_update();

    // The kept listener now goes to another service; the other share is gone.
    let second = ClusterPlan::from(vec![share(
        "keep",
        2,
        vec![rule(Protocol::Tcp, kept, "two", 1)],
    )]);
    assert_eq!(standalone.apply(&second).await, vec![]);
    assert!(changes.has_changed().unwrap(), "apply was signalled");
    // The established connection still talks to its endpoint.
    assert_eq!(exchange(&mut established, "still").await, "STILL");
    assert_eq!(a.tcp_served(), 2);
    // New connections take the new backend.
    assert_eq!(tcp_echo(SocketAddr::new(ip, kept), "new").await, "NEW");
    assert_eq!(b.tcp_served(), 1);
    // The removed listeners are closed: TCP refuses, and both ports can be bound again.
    let refused = TcpStream::connect(SocketAddr::new(ip, removed)).await;
    assert!(refused.is_err(), "{refused:?}");
    drop(
        TcpListener::bind(SocketAddr::new(ip, removed))
            .await
            .unwrap(),
    );
    drop(UdpSocket::bind(SocketAddr::new(ip, removed)).await.unwrap());
    let report = standalone.report(&second);
    assert_eq!(report.ingresses.len(), 1);
    assert_eq!(ingress(&report, "keep").applied_generation, 2);
    assert_eq!(ingress(&report, "keep").backends[0].service, "two");
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_services_are_rule_errors_and_the_rest_is_served() {
    let ip = test_ip(7);
    let port = test_port(7, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let mut http = IngressRule::new(Protocol::Http);
    http.host = Some("shop.example.com".into());
    http.port = Some(i32::from(test_port(7, 1)));
    http.paths = vec![HttpPath {
        backend: Backend::new("web-gone", 8080),
        ..HttpPath::default()
    }];
    let plan = ClusterPlan::from(vec![share(
        "mixed",
        1,
        vec![
            http,
            rule(Protocol::Tcp, port, "echo", i32::from(echo.addr.port())),
            rule(Protocol::Udp, port, "nowhere", 53),
        ],
    )]);
    let errors = standalone.apply(&plan).await;
    let messages: Vec<(u32, &str)> = errors
        .iter()
        .map(|e| (e.rule, e.message.as_str()))
        .collect();
    assert_eq!(
        messages,
        vec![
            (
                0,
                "paths[0] (/ Prefix): backend service \"web-gone\" is not among the agent's configured services"
            ),
            (
                2,
                "backend service \"nowhere\" is not among the agent's configured services"
            ),
        ]
    );
    assert!(
        errors
            .iter()
            .all(|e| e.ingress == IngressKey::new("default", "mixed"))
    );
    // The TCP rule is served all the same.
    assert_eq!(tcp_echo(SocketAddr::new(ip, port), "ok").await, "OK");
    let report = standalone.report(&plan);
    let share = ingress(&report, "mixed");
    assert_eq!(share.rule_errors, errors);
    let nowhere = share
        .backends
        .iter()
        .find(|b| b.service == "nowhere")
        .unwrap();
    assert_eq!((nowhere.ready, nowhere.total), (0, 0));
    assert_eq!(share.listeners.len(), 1);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_sessions_expire_when_idle() {
    let ip = test_ip(8);
    let port = test_port(8, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "udpIdleTimeoutMs: 300\n",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![rule(
            Protocol::Udp,
            port,
            "echo",
            i32::from(echo.addr.port()),
        )],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let client = udp_client(SocketAddr::new(ip, port)).await;
    assert_eq!(udp_exchange(&client, "one").await, "ONE");
    assert_eq!(listener_active(&standalone.report(&plan), "echo", "UDP"), 1);
    let sent = Instant::now();
    eventually_async(WAIT, "the idle session expired", || async {
        listener_active(&standalone.report(&plan), "echo", "UDP") == 0
    })
    .await;
    assert!(
        sent.elapsed() >= Duration::from_millis(300),
        "expired too early"
    );
    // The same client gets a new session.
    assert_eq!(udp_exchange(&client, "two").await, "TWO");
    assert_eq!(listener_active(&standalone.report(&plan), "echo", "UDP"), 1);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_and_ipv4_listeners_side_by_side() {
    let v4 = test_ip(9);
    let v6: IpAddr = "::1".parse().unwrap();
    let port = test_port(9, 0);
    let echo = Echo::start(SocketAddr::new(v6, 0)).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(v4), bind(v6)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", 1),
            rule(Protocol::Udp, port, "echo", 1),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    for ip in [v6, v4] {
        let listener = SocketAddr::new(ip, port);
        assert_eq!(tcp_echo(listener, "six\n").await, "SIX\n");
        let client = udp_client(listener).await;
        assert_eq!(udp_exchange(&client, "six").await, "SIX");
    }
    eventually_async(WAIT, "the IPv6 endpoint is healthy", || async {
        ready(&standalone.report(&plan), "echo") == (1, 1)
    })
    .await;
    let report = standalone.report(&plan);
    assert_eq!(report.addresses, vec![Address::ip(v4), Address::ip(v6)]);
    // Loads are summed over both bind addresses.
    let tcp = ingress(&report, "echo")
        .listeners
        .iter()
        .find(|l| l.protocol == "TCP")
        .unwrap();
    assert!(tcp.connections_per_second > 0.0);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_bind_failures_are_rule_errors_and_binds_are_retried() {
    let ip = test_ip(10);
    let shared = test_port(10, 0);
    let taken = test_port(10, 1);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let blocker = std::net::TcpListener::bind(SocketAddr::new(ip, taken)).unwrap();
    let backend_port = i32::from(echo.addr.port());
    let plan = ClusterPlan::from(vec![
        share(
            "a",
            1,
            vec![rule(Protocol::Tcp, shared, "echo", backend_port)],
        ),
        share(
            "b",
            1,
            vec![
                rule(Protocol::Tcp, shared, "echo", backend_port),
                rule(Protocol::Tcp, taken, "echo", backend_port),
            ],
        ),
    ]);
    let errors = standalone.apply(&plan).await;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].ingress, IngressKey::new("default", "b"));
    assert_eq!(errors[0].rule, 0);
    assert_eq!(
        errors[0].message,
        format!("TCP port {shared} is already served by ingress default/a (rule 0)")
    );
    assert_eq!(errors[1].rule, 1);
    assert!(
        errors[1]
            .message
            .starts_with(&format!("binding TCP {ip}:{taken}: ")),
        "{}",
        errors[1].message
    );
    assert_eq!(tcp_echo(SocketAddr::new(ip, shared), "a").await, "A");
    // Once the port is free, applying the same plan binds it.
    drop(blocker);
    let errors = standalone.apply(&plan).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(tcp_echo(SocketAddr::new(ip, taken), "b").await, "B");
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_every_listener() {
    let ip = test_ip(11);
    let port = test_port(11, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", 1),
            rule(Protocol::Udp, port, "echo", 1),
        ],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let client = udp_client(SocketAddr::new(ip, port)).await;
    assert_eq!(udp_exchange(&client, "x").await, "X");
    standalone.shutdown().await;
    assert!(TcpStream::connect(SocketAddr::new(ip, port)).await.is_err());
    drop(UdpSocket::bind(SocketAddr::new(ip, port)).await.unwrap());
    assert_eq!(standalone.report(&plan).active_connections, 0);
}

/// A share's anycast addresses are served like the bind addresses (issue 15), also one
/// that is on no interface (IP_FREEBIND); other shares are not served there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anycast_addresses_of_a_share_are_bound_too() {
    let ip = test_ip(25);
    let anycast = IpAddr::from([127, 0, 77, 125]);
    // TEST-NET-1: on no interface of this host.
    let elsewhere = IpAddr::from([192, 0, 2, 125]);
    let port = test_port(25, 0);
    let other_port = test_port(25, 1);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "",
    }));
    let mut anycast_share = share(
        "echo",
        1,
        vec![
            rule(Protocol::Tcp, port, "echo", 1),
            rule(Protocol::Udp, port, "echo", 1),
        ],
    );
    anycast_share.anycast_addresses = vec![anycast, elsewhere];
    let plain = share("plain", 1, vec![rule(Protocol::Tcp, other_port, "echo", 1)]);
    let plan = ClusterPlan::from(vec![anycast_share, plain]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    for addr in [ip, anycast] {
        let listener = SocketAddr::new(addr, port);
        assert_eq!(tcp_echo(listener, "hello\n").await, "HELLO\n", "{listener}");
        let client = udp_client(listener).await;
        assert_eq!(udp_exchange(&client, "hi").await, "HI", "{listener}");
    }
    let labels = [format!("address=\"{elsewhere}:{port}\"")];
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_active_connections",
            &labels
        ),
        0.0,
        "the address on no interface is bound (freebind)"
    );
    tcp_echo(SocketAddr::new(ip, other_port), "x").await;
    assert!(
        TcpStream::connect(SocketAddr::new(anycast, other_port))
            .await
            .is_err(),
        "a share without anycast addresses is not served on another's"
    );
    // Without the anycast addresses the listeners there close.
    let plan = ClusterPlan::from(vec![share(
        "echo",
        2,
        vec![rule(Protocol::Tcp, port, "echo", 1)],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    assert!(
        TcpStream::connect(SocketAddr::new(anycast, port))
            .await
            .is_err()
    );
    tcp_echo(SocketAddr::new(ip, port), "x").await;
    standalone.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Limits (issue 12): caps, evictions and timeouts, as counted in `/metrics`.

/// The value of the series `name` whose labels contain every one of `labels`.
fn metric(standalone: &Standalone, name: &str, labels: &[&str]) -> f64 {
    let text = standalone.metrics();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            (series_name == name && labels.iter().all(|l| series_labels.contains(l)))
                .then(|| value.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"))
}

/// A UDP client on its own loopback address (the per-source cap counts addresses).
async fn udp_client_from(source: IpAddr, addr: SocketAddr) -> UdpSocket {
    let socket = UdpSocket::bind(SocketAddr::new(source, 0)).await.unwrap();
    socket.connect(addr).await.unwrap();
    socket
}

/// Whether the peer closed `stream` (EOF or reset) within the I/O bound.
async fn closed_by_peer(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(timeout(IO, stream.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_listener_cap_are_closed_and_counted() {
    let ip = test_ip(20);
    let port = test_port(20, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "limits: {connectionsPerListener: 2}\n",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![rule(Protocol::Tcp, port, "echo", 1)],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let addr = SocketAddr::new(ip, port);
    let mut first = TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(&mut first, "one").await, "ONE");
    let mut second = TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(&mut second, "two").await, "TWO");
    let labels = ["kind=\"TCP\"", "reason=\"listener_limit\""];
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_by_peer(&mut third).await,
        "the third is closed at once"
    );
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_refused_total",
            &labels
        ),
        1.0
    );
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_limit",
            &["kind=\"TCP\""]
        ),
        2.0
    );
    // The two keep working; once one closes, a new one is taken.
    assert_eq!(exchange(&mut first, "still").await, "STILL");
    drop(second);
    eventually_async(WAIT, "a connection slot is free again", || async {
        listener_active(&standalone.report(&plan), "echo", "TCP") < 2
    })
    .await;
    assert_eq!(tcp_echo(addr, "four").await, "FOUR");
    assert!(metric(&standalone, "fedingress_agent_fd_budget", &[]) > 0.0);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_spliced_connections_are_closed_on_both_sides() {
    let ip = test_ip(21);
    let port = test_port(21, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "limits: {streamIdleTimeoutMs: 300}\n",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![rule(Protocol::Tcp, port, "echo", 1)],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let mut stream = TcpStream::connect(SocketAddr::new(ip, port)).await.unwrap();
    assert_eq!(exchange(&mut stream, "hello").await, "HELLO");
    assert!(
        closed_by_peer(&mut stream).await,
        "idle: closed by the agent"
    );
    let labels = ["kind=\"TCP\"", "reason=\"idle\""];
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_timed_out_total",
            &labels
        ),
        1.0
    );
    eventually_async(WAIT, "the connection is gone from the counts", || async {
        listener_active(&standalone.report(&plan), "echo", "TCP") == 0
    })
    .await;
    assert_eq!(
        metric(&standalone, "fedingress_agent_fd_budget_used", &[]),
        0.0
    );
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_udp_listener_evicts_unassured_sessions_and_refuses_past_assured_ones() {
    let ip = test_ip(22);
    let port = test_port(22, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "limits: {udpSessionsPerListener: 2, udpSessionsPerSource: 1}\n",
    }));
    let plan = ClusterPlan::from(vec![share(
        "echo",
        1,
        vec![rule(Protocol::Udp, port, "echo", 1)],
    )]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let addr = SocketAddr::new(ip, port);
    let source = |n: u8| IpAddr::from([127, 0, 78, n]);
    let count = |name: &str, reason: Option<&str>| {
        let reason = reason.map(|r| format!("reason=\"{r}\""));
        let mut labels = vec!["kind=\"UDP\""];
        labels.extend(reason.as_deref());
        metric(&standalone, name, &labels)
    };

    // A answers a reply (assured); B sends once (not assured).
    let a = udp_client_from(source(1), addr).await;
    assert_eq!(udp_exchange(&a, "a1").await, "A1");
    assert_eq!(udp_exchange(&a, "a2").await, "A2");
    let b = udp_client_from(source(2), addr).await;
    assert_eq!(udp_exchange(&b, "b1").await, "B1");
    // C finds the listener full: B's session makes room.
    let c = udp_client_from(source(3), addr).await;
    assert_eq!(udp_exchange(&c, "c1").await, "C1");
    assert_eq!(count("fedingress_agent_listener_evicted_total", None), 1.0);
    assert_eq!(udp_exchange(&a, "a3").await, "A3", "A kept its session");
    assert_eq!(udp_exchange(&c, "c2").await, "C2");
    // Both sessions assured now: D is refused.
    let d = udp_client_from(source(4), addr).await;
    d.send(b"d1").await.unwrap();
    eventually_async(WAIT, "D is refused", || async {
        count(
            "fedingress_agent_listener_refused_total",
            Some("listener_limit"),
        ) == 1.0
    })
    .await;
    // A second port of A's address is over the per-source cap.
    let a_again = udp_client_from(source(1), addr).await;
    a_again.send(b"a-other-port").await.unwrap();
    eventually_async(
        WAIT,
        "the second port of A's address is refused",
        || async {
            count(
                "fedingress_agent_listener_refused_total",
                Some("source_limit"),
            ) == 1.0
        },
    )
    .await;
    assert_eq!(count("fedingress_agent_listener_evicted_total", None), 1.0);
    assert_eq!(udp_exchange(&a, "a4").await, "A4");
    assert_eq!(listener_active(&standalone.report(&plan), "echo", "UDP"), 2);
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connections_time_out_on_slow_headers_and_when_idle() {
    let ip = test_ip(23);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let mut http = IngressRule::new(Protocol::Http);
    http.port = Some(i32::from(test_port(23, 0)));
    http.paths = vec![HttpPath {
        backend: Backend::new("echo", 80),
        ..HttpPath::default()
    }];
    let plan = ClusterPlan::from(vec![share("web", 1, vec![http])]);
    let addr = SocketAddr::new(ip, test_port(23, 0));

    // A request head that never completes.
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "limits: {httpHeaderReadTimeoutMs: 300}\n",
    }));
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n")
        .await
        .unwrap();
    assert!(closed_by_peer(&mut slow).await, "slow headers: closed");
    let header = ["kind=\"HTTP\"", "reason=\"header\""];
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_timed_out_total",
            &header
        ),
        1.0
    );
    standalone.shutdown().await;

    // A connection that sends nothing at all (HTTP/1.1 keep-alive or HTTP/2 alike).
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "limits: {httpIdleTimeoutMs: 300}\n",
    }));
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_peer(&mut idle).await, "idle: closed");
    let labels = ["kind=\"HTTP\"", "reason=\"idle\""];
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_timed_out_total",
            &labels
        ),
        1.0
    );
    standalone.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_client_hello_in_time_is_closed_and_counted() {
    let ip = test_ip(24);
    let port = test_port(24, 0);
    let echo = Echo::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let standalone = Standalone::new(&config(Setup {
        binds: vec![bind(ip)],
        services: vec![("echo", vec![echo.addr])],
        extra: "limits: {tlsHandshakeTimeoutMs: 300}\n",
    }));
    let mut tls = rule(Protocol::Tls, port, "echo", 1);
    tls.host = Some("db.example.com".into());
    tls.tls_mode = Some(TlsMode::Passthrough);
    let plan = ClusterPlan::from(vec![share("db", 1, vec![tls])]);
    assert_eq!(standalone.apply(&plan).await, vec![]);
    let mut silent = TcpStream::connect(SocketAddr::new(ip, port)).await.unwrap();
    // Half a record header, then nothing.
    silent.write_all(&[0x16, 0x03]).await.unwrap();
    assert!(closed_by_peer(&mut silent).await, "no ClientHello: closed");
    let labels = ["kind=\"TLS\"", "reason=\"handshake\""];
    assert_eq!(
        metric(
            &standalone,
            "fedingress_agent_listener_timed_out_total",
            &labels
        ),
        1.0
    );
    standalone.shutdown().await;
}
