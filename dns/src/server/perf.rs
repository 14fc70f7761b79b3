//! In-process throughput of [`DnsServer::respond`] (no sockets), for before/after
//! comparisons of the query path. Ignored by default; run with
//! `cargo test --release -p fedingress-dns --lib perf -- --ignored --nocapture`.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use fedingress_api::ingress::{Strategy, StrategyType, Traffic};

use super::wire::{CLASS_IN, TYPE_A, TYPE_OPT};
use super::{DnsServer, Transport};
use crate::location::test_mmdb::{CityNetwork, city_db};
use crate::location::{LocationEntry, Locator};
use crate::routing::FailoverState;
use crate::zone::{NameserverConfig, Snapshot, ZoneConfig};
use crate::{ClusterView, Location, RoutedIngress};

fn location(region: &str, latitude: f64, longitude: f64) -> Location {
    Location {
        region: region.to_owned(),
        latitude,
        longitude,
    }
}

fn clusters() -> Vec<ClusterView> {
    [
        ("c1", 50.45, 3.82, "127.0.91.11"),
        ("c2", 33.2, -80.0, "127.0.91.12"),
        ("c3", 19.0, 72.8, "127.0.91.13"),
    ]
    .into_iter()
    .map(|(name, lat, lon, ip)| ClusterView {
        name: name.to_owned(),
        location: location(name, lat, lon),
        healthy: true,
        cordoned: false,
        ips: vec![ip.parse().unwrap()],
        hostnames: Vec::new(),
        load: 0.0,
        capacity: None,
        cloud: Default::default(),
        anycast: Vec::new(),
    })
    .collect()
}

fn ingresses(count: usize) -> Vec<RoutedIngress> {
    (0..count)
        .map(|i| {
            let dns_name = format!("g{i:04}.fedingress.test");
            RoutedIngress {
                ingress: format!("default/g{i:04}"),
                dns_name: dns_name.clone(),
                traffic: Traffic {
                    dns_name: Some(dns_name),
                    ttl: 30,
                    strategy: Strategy {
                        type_: StrategyType::Geo,
                        ..Strategy::default()
                    },
                    ..Traffic::default()
                },
                clusters: clusters(),
                srv: Vec::new(),
                failover: FailoverState::default(),
                health_port: None,
            }
        })
        .collect()
}

fn zones() -> Vec<ZoneConfig> {
    vec![ZoneConfig {
        name: "fedingress.test".to_owned(),
        nameservers: vec![NameserverConfig {
            name: "ns1.fedingress.test".to_owned(),
            addresses: vec!["127.0.0.1".parse().unwrap()],
        }],
        soa: Default::default(),
        ttl: 3600,
    }]
}

/// An A query with an ECS option for `subnet`/24.
fn query(name: &str, subnet: Ipv4Addr) -> Vec<u8> {
    let mut out = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&TYPE_A.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out.push(0);
    out.extend_from_slice(&TYPE_OPT.to_be_bytes());
    out.extend_from_slice(&1232u16.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&11u16.to_be_bytes());
    out.extend_from_slice(&8u16.to_be_bytes());
    out.extend_from_slice(&7u16.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.push(24);
    out.push(0);
    out.extend_from_slice(&subnet.octets()[..3]);
    out
}

fn run(label: &str, server: &DnsServer, packets: &[Vec<u8>], rounds: usize) {
    let peer = IpAddr::from([127, 0, 0, 1]);
    // Warm up.
    for packet in packets {
        assert_eq!(server.respond(packet, peer, Transport::Udp, &[]).len(), 1);
    }
    let start = Instant::now();
    let mut n = 0u64;
    for _ in 0..rounds {
        for packet in packets {
            n += server.respond(packet, peer, Transport::Udp, &[]).len() as u64;
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{label}: {n} queries, {:.0} ns/query ({:.0} k queries/s on one core)",
        elapsed.as_nanos() as f64 / n as f64,
        n as f64 / elapsed.as_secs_f64() / 1000.0
    );
}

#[test]
#[ignore = "a measurement, run by hand in release"]
fn perf_best_case_one_name_three_entry_table() {
    let table = vec![
        LocationEntry {
            cidr: "10.1.0.0/16".parse().unwrap(),
            location: location("europe-west1", 50.45, 3.82),
        },
        LocationEntry {
            cidr: "10.2.0.0/16".parse().unwrap(),
            location: location("us-east1", 33.2, -80.0),
        },
        LocationEntry {
            cidr: "10.3.0.0/16".parse().unwrap(),
            location: location("asia-south1", 19.0, 72.8),
        },
    ];
    let locator = Locator::new(table, location("default", 50.0, 4.0), None).unwrap();
    let (snapshot, _) = Snapshot::build(&zones(), 1, &ingresses(1), Arc::new(locator));
    let server = DnsServer::new(Arc::new(snapshot));
    let packets: Vec<Vec<u8>> = (0..3u8)
        .map(|r| query("g0000.fedingress.test", Ipv4Addr::new(10, r + 1, 7, 0)))
        .collect();
    run(
        "best case (1 name, 3-entry table, ECS)",
        &server,
        &packets,
        300_000,
    );
}

#[test]
#[ignore = "a measurement, run by hand in release"]
fn perf_mmdb_distinct_subnets() {
    // 20,000 /24s with pseudo-random coordinates.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let networks: Vec<CityNetwork> = (0..20_000u32)
        .map(|i| {
            let lat = (next() % 17_000) as f64 / 100.0 - 85.0;
            let lon = (next() % 36_000) as f64 / 100.0 - 180.0;
            CityNetwork {
                network: format!("{}.{}.{}.0/24", 20 + i / 65_536, (i / 256) % 256, i % 256)
                    .parse()
                    .unwrap(),
                latitude: Some(lat),
                longitude: Some(lon),
                country: Some("XX"),
                subdivision: None,
            }
        })
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), city_db(&networks)).unwrap();
    let locator = Locator::new(
        Vec::new(),
        location("default", 50.0, 4.0),
        Some(file.path()),
    )
    .unwrap();
    let (snapshot, _) = Snapshot::build(&zones(), 1, &ingresses(1000), Arc::new(locator));
    let server = DnsServer::new(Arc::new(snapshot));
    let packets: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| {
            query(
                &format!("g{:04}.fedingress.test", (i * 7) % 1000),
                Ipv4Addr::new(
                    (20 + i / 65_536) as u8,
                    ((i / 256) % 256) as u8,
                    (i % 256) as u8,
                    0,
                ),
            )
        })
        .collect();
    run(
        "mmdb, 20,000 subnets x 1,000 names (first pass)",
        &server,
        &packets,
        1,
    );
    run("mmdb, 20,000 subnets x 1,000 names", &server, &packets, 20);
}

/// Serves 1,000 Geo names on three loopback ports at once, for `dnsperf` from another
/// shell: `rrl-off` (RRL disabled), `rrl-charged` (RRL on, nothing exempt, a rate no
/// run reaches: every response is hashed and charged, none dropped) and `rrl-default`
/// (the default config: RRL on, loopback exempt). Prints `label port` lines and serves
/// for `PERF_SERVE_SECONDS` (default 300). See docs/security.md ("DNS") for the
/// dnsperf commands and the numbers.
#[test]
#[ignore = "a measurement server for dnsperf, run by hand in release"]
fn perf_serve_for_dnsperf() {
    use super::config::ServerConfig;
    let seconds: u64 = std::env::var("PERF_SERVE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let table = vec![LocationEntry {
        cidr: "10.1.0.0/16".parse().unwrap(),
        location: location("europe-west1", 50.8, 4.3),
    }];
    let locator = Locator::new(table, location("default", 50.0, 4.0), None).unwrap();
    let (snapshot, _) = Snapshot::build(&zones(), 1, &ingresses(1000), Arc::new(locator));
    let snapshot = Arc::new(snapshot);
    let off = ServerConfig {
        rrl: super::config::RrlConfig {
            enabled: false,
            ..Default::default()
        },
        ..ServerConfig::default()
    };
    let charged = ServerConfig {
        rrl: super::config::RrlConfig {
            responses_per_second: 1_000_000,
            exempt: Vec::new(),
            ..Default::default()
        },
        ..ServerConfig::default()
    };
    if std::env::var_os("PERF_IN_PROCESS").is_some() {
        // The same three configs through respond() on one core, rounds interleaved.
        let packets: Vec<Vec<u8>> = (0..1000u32)
            .map(|i| {
                query(
                    &format!("g{i:04}.fedingress.test"),
                    Ipv4Addr::new(10, 1, 7, 0),
                )
            })
            .collect();
        let servers = [
            (
                "rrl-off",
                DnsServer::with_config(snapshot.clone(), off.clone()),
            ),
            (
                "rrl-charged",
                DnsServer::with_config(snapshot.clone(), charged.clone()),
            ),
            ("rrl-default", DnsServer::new(snapshot.clone())),
        ];
        for _ in 0..3 {
            for (label, server) in &servers {
                run(label, server, &packets, 1000);
            }
        }
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for (label, config) in [
            ("rrl-off", off),
            ("rrl-charged", charged),
            ("rrl-default", ServerConfig::default()),
        ] {
            let (udp, tcp) = super::bind_udp_and_tcp("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            let port = udp.local_addr().unwrap().port();
            let server = Arc::new(DnsServer::with_config(snapshot.clone(), config));
            tokio::spawn(server.serve(udp, tcp, Vec::new()));
            println!("{label} {port}");
        }
        tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    });
}
