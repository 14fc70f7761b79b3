//! Shared fixture of the DNS tests: a zone, a location table with two regions, routed
//! ingresses of every kind the server answers, and a running server on loopback.

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::ingress::{Strategy, StrategyType, Traffic};
use fedingress_dns::location::{LocationEntry, Locator};
use fedingress_dns::routing::FailoverState;
use fedingress_dns::server::DnsServer;
use fedingress_dns::zone::{NameserverConfig, Problem, Snapshot, ZoneConfig};
use fedingress_dns::{ClusterView, Location, RoutedIngress, SrvService};
use ipnet::IpNet;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

pub const ZONE: &str = "fedingress.test";
/// Clients here are in Europe.
pub const EU_SUBNET: &str = "203.0.113.0/24";
/// Clients here are in the US.
pub const US_SUBNET: &str = "198.51.100.0/24";

pub fn location(region: &str, latitude: f64, longitude: f64) -> Location {
    Location {
        region: region.to_owned(),
        latitude,
        longitude,
    }
}

pub fn eu() -> Location {
    location("eu", 50.0, 4.0)
}

pub fn us() -> Location {
    location("us", 39.0, -77.0)
}

/// EU and US subnets; everyone else defaults to Europe.
pub fn locator() -> Arc<Locator> {
    let table = vec![
        LocationEntry {
            cidr: EU_SUBNET.parse().unwrap(),
            location: eu(),
        },
        LocationEntry {
            cidr: US_SUBNET.parse().unwrap(),
            location: us(),
        },
    ];
    Arc::new(Locator::new(table, location("default", 48.0, 2.0), None).unwrap())
}

pub fn zones() -> Vec<ZoneConfig> {
    vec![ZoneConfig {
        name: ZONE.to_owned(),
        nameservers: vec![NameserverConfig {
            name: format!("ns1.{ZONE}"),
            addresses: vec![
                "192.0.2.53".parse().unwrap(),
                "2001:db8::53".parse().unwrap(),
            ],
        }],
        soa: Default::default(),
        ttl: 3600,
    }]
}

pub fn cluster(name: &str, at: Location, ips: &[&str], hostnames: &[&str]) -> ClusterView {
    ClusterView {
        name: name.to_owned(),
        location: at,
        healthy: true,
        cordoned: false,
        ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        hostnames: hostnames.iter().map(|h| (*h).to_owned()).collect(),
        load: 0.0,
        capacity: None,
        cloud: Default::default(),
        anycast: Vec::new(),
    }
}

pub fn strategy(type_: StrategyType) -> Strategy {
    Strategy {
        type_,
        ..Strategy::default()
    }
}

pub fn ingress(
    name: &str,
    dns_name: &str,
    strategy: Strategy,
    clusters: Vec<ClusterView>,
    srv: Vec<SrvService>,
) -> RoutedIngress {
    RoutedIngress {
        ingress: format!("default/{name}"),
        dns_name: dns_name.to_owned(),
        traffic: Traffic {
            dns_name: Some(dns_name.to_owned()),
            ttl: 30,
            strategy,
            ..Traffic::default()
        },
        clusters,
        srv,
        failover: FailoverState::default(),
        health_port: None,
    }
}

pub fn eu_west() -> ClusterView {
    cluster(
        "eu-west",
        location("europe-west1", 50.45, 3.82),
        &["192.0.2.1", "2001:db8::1"],
        &[],
    )
}

pub fn us_east() -> ClusterView {
    cluster(
        "us-east",
        location("us-east1", 33.2, -80.0),
        &["192.0.2.2", "2001:db8::2"],
        &[],
    )
}

/// Every kind of name the tests query.
pub fn ingresses() -> Vec<RoutedIngress> {
    let mut weights = std::collections::BTreeMap::new();
    weights.insert("a".to_owned(), 3);
    weights.insert("b".to_owned(), 1);
    let weighted = Strategy {
        type_: StrategyType::Weighted,
        weights: Some(weights),
        ..Strategy::default()
    };
    let nowhere = location("x", 0.0, 0.0);
    let many: Vec<String> = (1..=100)
        .map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    vec![
        ingress(
            "geo",
            &format!("geo.{ZONE}"),
            strategy(StrategyType::Geo),
            vec![eu_west(), us_east()],
            vec![],
        ),
        ingress(
            "rr",
            &format!("rr.{ZONE}"),
            strategy(StrategyType::RoundRobin),
            vec![
                cluster("a", nowhere.clone(), &["192.0.2.10"], &[]),
                cluster("b", nowhere.clone(), &["192.0.2.11"], &[]),
                cluster("c", nowhere.clone(), &["192.0.2.12"], &[]),
            ],
            vec![],
        ),
        ingress(
            "weighted",
            &format!("weighted.{ZONE}"),
            weighted,
            vec![
                cluster("a", nowhere.clone(), &["192.0.2.20"], &[]),
                cluster("b", nowhere.clone(), &["192.0.2.21"], &[]),
            ],
            vec![],
        ),
        ingress(
            "cname",
            &format!("cname.{ZONE}"),
            strategy(StrategyType::RoundRobin),
            vec![cluster(
                "aws",
                nowhere.clone(),
                &[],
                &["a473cf621de6b49d.us-east-2.elb.amazonaws.com"],
            )],
            vec![],
        ),
        ingress(
            "mixed",
            &format!("mixed.{ZONE}"),
            strategy(StrategyType::RoundRobin),
            vec![
                cluster("aws", nowhere.clone(), &[], &["lb.elb.amazonaws.com"]),
                cluster("gcp", nowhere.clone(), &["192.0.2.30"], &[]),
            ],
            vec![],
        ),
        ingress(
            "svc",
            &format!("svc.{ZONE}"),
            strategy(StrategyType::Geo),
            vec![eu_west(), us_east()],
            vec![SrvService::new("mysql", "tcp", 3306)],
        ),
        ingress(
            "big",
            &format!("big.{ZONE}"),
            strategy(StrategyType::RoundRobin),
            vec![cluster("many", nowhere.clone(), &many, &[])],
            vec![],
        ),
        ingress(
            "v4only",
            &format!("v4only.{ZONE}"),
            strategy(StrategyType::RoundRobin),
            vec![cluster("one", nowhere, &["192.0.2.40"], &[])],
            vec![],
        ),
    ]
}

pub fn snapshot() -> (Snapshot, Vec<Problem>) {
    Snapshot::build(&zones(), 7, &ingresses(), locator())
}

/// A running server, UDP and TCP on the same port; aborted on drop.
pub struct Running {
    pub addr: SocketAddr,
    pub server: Arc<DnsServer>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start(snapshot: Snapshot, allow_transfer: Vec<IpNet>) -> Running {
    start_at("127.0.0.1".parse().unwrap(), snapshot, allow_transfer).await
}

/// A server on `ip` (e.g. the wildcard `0.0.0.0`), UDP and TCP on the same port.
pub async fn start_at(ip: IpAddr, snapshot: Snapshot, allow_transfer: Vec<IpNet>) -> Running {
    let (udp, tcp) = fedingress_dns::server::bind_udp_and_tcp(SocketAddr::new(ip, 0))
        .await
        .unwrap();
    let addr = udp.local_addr().unwrap();
    let server = Arc::new(DnsServer::new(Arc::new(snapshot)));
    let task = tokio::spawn(server.clone().serve(udp, tcp, allow_transfer));
    Running { addr, server, task }
}

/// Runs `dig @127.0.0.1 -p PORT args...` and returns its output.
pub async fn dig(addr: SocketAddr, args: &[&str]) -> String {
    let output = tokio::process::Command::new("dig")
        .arg(format!("@{}", addr.ip()))
        .arg("-p")
        .arg(addr.port().to_string())
        .args(["+time=2", "+tries=2"])
        .args(args)
        .output()
        .await
        .expect("dig is installed (Debian package dnsutils)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "dig {args:?} failed: {text}");
    text
}

/// The data fields of answer-section lines of dig output (`+noall +answer` style
/// lines: name ttl class type data...), as (type, data).
pub fn answers(dig_output: &str) -> Vec<(String, String)> {
    section(dig_output, ";; ANSWER SECTION:")
}

pub fn section(dig_output: &str, header: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in dig_output.lines() {
        if line.starts_with(header) {
            inside = true;
            continue;
        }
        if inside {
            if line.trim().is_empty() || line.starts_with(";;") {
                break;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() >= 5 {
                out.push((fields[3].to_owned(), fields[4..].join(" ")));
            }
        }
    }
    out
}

/// Sends `packet` over UDP and waits for the response (or `None` after `wait`).
pub async fn exchange(
    socket: &UdpSocket,
    server: SocketAddr,
    packet: &[u8],
    wait: Duration,
) -> Option<Vec<u8>> {
    socket.send_to(packet, server).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    match tokio::time::timeout(wait, socket.recv_from(&mut buf)).await {
        Ok(Ok((len, _))) => Some(buf[..len].to_vec()),
        _ => None,
    }
}

/// The A records of a response, in order.
pub fn a_records(response: &[u8]) -> Vec<IpAddr> {
    let message = hickory_proto::op::Message::from_vec(response).unwrap();
    message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            hickory_proto::rr::RData::A(a) => Some(IpAddr::V4(a.0)),
            hickory_proto::rr::RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}
