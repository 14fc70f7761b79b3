//! Response patching and limits, through [`DnsServer::respond`] (no sockets).

use std::net::IpAddr;
use std::sync::Arc;

use fedingress_api::ingress::{Strategy, StrategyType, Traffic};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{RData, RecordType};

use super::wire::{CLASS_IN, TYPE_A, TYPE_OPT, TYPE_SRV};
use super::{DnsServer, Transport};
use crate::location::{LocationEntry, Locator};
use crate::routing::FailoverState;
use crate::zone::{NameserverConfig, Snapshot, ZoneConfig};
use crate::{ClusterView, Location, RoutedIngress, SrvService};

fn location(region: &str, latitude: f64, longitude: f64) -> Location {
    Location {
        region: region.to_owned(),
        latitude,
        longitude,
    }
}

fn cluster(name: &str, at: Location, ips: &[String]) -> ClusterView {
    ClusterView {
        name: name.to_owned(),
        location: at,
        healthy: true,
        cordoned: false,
        ips: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        hostnames: Vec::new(),
        load: 0.0,
        capacity: None,
        cloud: Default::default(),
        anycast: Vec::new(),
    }
}

fn routed(
    dns_name: &str,
    type_: StrategyType,
    clusters: Vec<ClusterView>,
    srv: Vec<SrvService>,
) -> RoutedIngress {
    RoutedIngress {
        ingress: format!("default/{dns_name}"),
        dns_name: dns_name.to_owned(),
        traffic: Traffic {
            dns_name: Some(dns_name.to_owned()),
            strategy: Strategy {
                type_,
                ..Strategy::default()
            },
            ..Traffic::default()
        },
        clusters,
        srv,
        failover: FailoverState::default(),
        health_port: None,
    }
}

fn server() -> DnsServer {
    let locator = Locator::new(
        vec![LocationEntry {
            cidr: "203.0.113.0/24".parse().unwrap(),
            location: location("us", 39.0, -77.0),
        }],
        location("eu", 50.0, 4.0),
        None,
    )
    .unwrap();
    let zones = vec![ZoneConfig {
        name: "test".to_owned(),
        nameservers: vec![NameserverConfig {
            name: "ns.test".to_owned(),
            addresses: vec!["192.0.2.53".parse().unwrap()],
        }],
        soa: Default::default(),
        ttl: 3600,
    }];
    let eu = || cluster("eu", location("eu", 50.0, 4.0), &["192.0.2.1".to_owned()]);
    let us = || cluster("us", location("us", 39.0, -77.0), &["192.0.2.2".to_owned()]);
    let many: Vec<String> = (0..60).map(|i| format!("10.0.0.{i}")).collect();
    let srv_clusters: Vec<ClusterView> = (0..6)
        .map(|i| {
            cluster(
                &format!("c{i}"),
                location("x", 0.0, 0.0),
                &[format!("2001:db8::{i}:1"), format!("2001:db8::{i}:2")],
            )
        })
        .collect();
    let ingresses = vec![
        routed("geo.test", StrategyType::Geo, vec![eu(), us()], vec![]),
        routed(
            "big.test",
            StrategyType::RoundRobin,
            vec![cluster("big", location("x", 0.0, 0.0), &many)],
            vec![],
        ),
        routed(
            "srv.test",
            StrategyType::RoundRobin,
            srv_clusters,
            vec![SrvService::new("x", "udp", 53)],
        ),
    ];
    let (snapshot, problems) = Snapshot::build(&zones, 1, &ingresses, Arc::new(locator));
    assert!(problems.is_empty(), "{problems:?}");
    DnsServer::new(Arc::new(snapshot))
}

/// ECS option fields: family, source prefix, address octets.
type EcsFields = (u16, u8, Vec<u8>);

/// A query: `flags` is header bytes 2 and 3; `edns` = (payload, version, ECS).
fn query(
    id: u16,
    flags: [u8; 2],
    name: &str,
    qtype: u16,
    edns: Option<(u16, u8, Option<EcsFields>)>,
) -> Vec<u8> {
    let mut out = id.to_be_bytes().to_vec();
    out.extend_from_slice(&flags);
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for label in name.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    if let Some((payload, version, ecs)) = edns {
        out.push(0);
        out.extend_from_slice(&TYPE_OPT.to_be_bytes());
        out.extend_from_slice(&payload.to_be_bytes());
        out.extend_from_slice(&[0, version, 0, 0]);
        match ecs {
            Some((family, source, address)) => {
                let len = 4 + address.len();
                out.extend_from_slice(&((len + 4) as u16).to_be_bytes());
                out.extend_from_slice(&8u16.to_be_bytes());
                out.extend_from_slice(&(len as u16).to_be_bytes());
                out.extend_from_slice(&family.to_be_bytes());
                out.push(source);
                out.push(0);
                out.extend_from_slice(&address);
            }
            None => out.extend_from_slice(&[0, 0]),
        }
    }
    out
}

fn peer() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn one(server: &DnsServer, packet: &[u8], transport: Transport) -> Vec<u8> {
    let mut responses = server.respond(packet, peer(), transport, &[]);
    assert_eq!(responses.len(), 1);
    responses.remove(0)
}

fn ecs_scope(message: &Message) -> Option<(u8, u8)> {
    match message.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(subnet) => Some((subnet.source_prefix(), subnet.scope_prefix())),
        _ => None,
    }
}

#[test]
fn patches_id_flags_and_letter_case() {
    let server = server();
    // RD and CD set, AD set (not copied), mixed case.
    let packet = query(0xBEEF, [0x01, 0x30], "GeO.TeSt", TYPE_A, None);
    let response = one(&server, &packet, Transport::Udp);
    assert_eq!(&response[..2], &[0xBE, 0xEF]);
    assert_eq!(response[2], 0x85, "QR, AA, RD");
    assert_eq!(response[3], 0x10, "CD copied, AD and RA clear, NOERROR");
    assert_eq!(
        &response[12..12 + 10],
        &packet[12..12 + 10],
        "question in the client's case"
    );
    let message = Message::from_vec(&response).unwrap();
    assert_eq!(message.answers.len(), 1);
    assert_eq!(
        message.answers[0].data,
        RData::A("192.0.2.1".parse().unwrap())
    );
    assert!(message.edns.is_none(), "no OPT without EDNS in the query");
    assert_eq!(server.stats().fast, 1);
}

#[test]
fn echoes_ecs_with_the_located_scope() {
    let server = server();
    let packet = query(
        1,
        [0x01, 0],
        "geo.test",
        TYPE_A,
        Some((1232, 0, Some((1, 24, vec![203, 0, 113])))),
    );
    let message = Message::from_vec(&one(&server, &packet, Transport::Udp)).unwrap();
    assert_eq!(
        message.answers[0].data,
        RData::A("192.0.2.2".parse().unwrap())
    );
    assert_eq!(ecs_scope(&message), Some((24, 24)));

    // A /16 that holds the table's /24 but whose address (203.0.0.0) is outside it: the
    // default bucket, and a scope longer than the source (RFC 7871 §7.2.1: ask again
    // with a longer prefix).
    let packet = query(
        2,
        [0, 0],
        "geo.test",
        TYPE_A,
        Some((1232, 0, Some((1, 16, vec![203, 0])))),
    );
    let message = Message::from_vec(&one(&server, &packet, Transport::Udp)).unwrap();
    assert_eq!(
        message.answers[0].data,
        RData::A("192.0.2.1".parse().unwrap())
    );
    assert_eq!(ecs_scope(&message), Some((16, 18)));

    // NXDOMAIN still echoes ECS, scope 0.
    let packet = query(
        3,
        [0, 0],
        "nope.test",
        TYPE_A,
        Some((1232, 0, Some((1, 24, vec![203, 0, 113])))),
    );
    let message = Message::from_vec(&one(&server, &packet, Transport::Udp)).unwrap();
    assert_eq!(message.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(ecs_scope(&message), Some((24, 0)));

    // An invalid option: FORMERR.
    let packet = query(
        4,
        [0, 0],
        "geo.test",
        TYPE_A,
        Some((1232, 0, Some((1, 24, vec![203, 0, 113, 1])))),
    );
    let response = one(&server, &packet, Transport::Udp);
    assert_eq!(response[3] & 0x0F, 1);
}

#[test]
fn truncates_to_the_client_payload_and_never_over_tcp() {
    let server = server();
    // 60 A records: about 1000 octets.
    let plain = query(1, [0, 0], "big.test", TYPE_A, None);
    let response = one(&server, &plain, Transport::Udp);
    let message = Message::from_vec(&response).unwrap();
    assert!(message.metadata.truncation);
    assert!(message.answers.is_empty());
    assert_eq!(message.queries.len(), 1);

    let edns = query(2, [0, 0], "big.test", TYPE_A, Some((4096, 0, None)));
    let response = one(&server, &edns, Transport::Udp);
    assert!(response.len() <= 1232);
    let message = Message::from_vec(&response).unwrap();
    assert!(!message.metadata.truncation, "fits in 1232");
    assert_eq!(message.answers.len(), 60);
    assert_eq!(message.edns.as_ref().unwrap().max_payload(), 1232);

    let response = one(&server, &plain, Transport::Tcp);
    let message = Message::from_vec(&response).unwrap();
    assert!(!message.metadata.truncation);
    assert_eq!(message.answers.len(), 60);
    assert_eq!(server.stats().truncated, 1);
}

#[test]
fn drops_the_additional_section_before_truncating() {
    let server = server();
    let packet = query(1, [0, 0], "_x._udp.srv.test", TYPE_SRV, None);
    let full = Message::from_vec(&one(&server, &packet, Transport::Tcp)).unwrap();
    assert_eq!(full.answers.len(), 6);
    assert_eq!(full.additionals.len(), 12);
    let response = one(&server, &packet, Transport::Udp);
    assert!(response.len() <= 512);
    let message = Message::from_vec(&response).unwrap();
    assert!(!message.metadata.truncation);
    assert_eq!(message.answers.len(), 6);
    assert!(message.additionals.is_empty());
}

#[test]
fn error_responses() {
    let server = server();
    // EDNS version 1: BADVERS (16), no answer.
    let packet = query(1, [0, 0], "geo.test", TYPE_A, Some((1232, 1, None)));
    let message = Message::from_vec(&one(&server, &packet, Transport::Udp)).unwrap();
    // 16 is both BADVERS and BADSIG; hickory names it BADSIG.
    assert_eq!(u16::from(message.metadata.response_code), 16);
    assert!(message.answers.is_empty());
    // Opcode STATUS (2): NOTIMP.
    let packet = query(2, [0x10, 0], "geo.test", TYPE_A, None);
    let response = one(&server, &packet, Transport::Udp);
    assert_eq!(response[3] & 0x0F, 4);
    assert_eq!(response[2] & 0x78, 0x10, "opcode copied");
    // Chaos class: REFUSED.
    let mut packet = query(3, [0, 0], "version.bind", 16, None);
    let len = packet.len();
    packet[len - 1] = 3;
    let response = one(&server, &packet, Transport::Udp);
    assert_eq!(response[3] & 0x0F, 5);
    // A response is never answered.
    let packet = query(4, [0x80, 0], "geo.test", TYPE_A, None);
    assert!(
        server
            .respond(&packet, peer(), Transport::Udp, &[])
            .is_empty()
    );
    assert_eq!(server.stats().dropped, 1);
}

#[test]
fn any_gets_the_rfc8482_answer() {
    let server = server();
    let packet = query(1, [0, 0], "geo.test", 255, None);
    let message = Message::from_vec(&one(&server, &packet, Transport::Udp)).unwrap();
    assert_eq!(message.answers.len(), 1);
    assert_eq!(message.answers[0].record_type(), RecordType::HINFO);
    assert!(message.metadata.authoritative);
}

#[test]
fn queries_are_counted_by_transport_path_type_and_rcode() {
    let server = server();
    let udp = |packet: &[u8]| server.respond(packet, peer(), Transport::Udp, &[]);
    for id in 0..3 {
        udp(&query(id, [0, 0], "geo.test", TYPE_A, None));
    }
    udp(&query(3, [0, 0], "nothing.test", TYPE_A, None));
    udp(&query(4, [0, 0], "test", 6, None));
    udp(&query(5, [0, 0], "geo.test", TYPE_A, Some((1232, 1, None))));
    udp(&query(6, [0x10, 0], "geo.test", TYPE_A, None));
    udp(&query(7, [0, 0], "big.test", TYPE_A, None));
    udp(&query(8, [0x80, 0], "geo.test", TYPE_A, None));
    udp(&[1, 2, 3]);
    server.respond(
        &query(9, [0, 0], "outside.example", 16, None),
        peer(),
        Transport::Tcp,
        &[],
    );
    let mut text = String::new();
    server.write_prometheus(&mut text);
    let line = |series: &str| {
        text.lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .map(|l| l[series.len() + 1..].to_owned())
    };
    let q = |t: &str, p: &str, qtype: &str, rcode: &str| {
        line(&format!(
            "fedingress_dns_queries_total{{transport=\"{t}\",path=\"{p}\",qtype=\"{qtype}\",rcode=\"{rcode}\"}}"
        ))
    };
    assert_eq!(
        q("udp", "fast", "A", "NOERROR").as_deref(),
        Some("4"),
        "{text}"
    );
    assert_eq!(q("udp", "slow", "A", "NXDOMAIN").as_deref(), Some("1"));
    assert_eq!(q("udp", "slow", "SOA", "NOERROR").as_deref(), Some("1"));
    assert_eq!(
        q("udp", "slow", "A", "other").as_deref(),
        Some("1"),
        "BADVERS"
    );
    assert_eq!(q("udp", "slow", "A", "NOTIMP").as_deref(), Some("1"));
    assert_eq!(q("tcp", "slow", "other", "REFUSED").as_deref(), Some("1"));
    // Zero series are left out.
    assert_eq!(q("tcp", "fast", "A", "NOERROR"), None);
    assert_eq!(
        line("fedingress_dns_truncated_total{transport=\"udp\"}").as_deref(),
        Some("1")
    );
    assert_eq!(
        line("fedingress_dns_dropped_total{transport=\"udp\"}").as_deref(),
        Some("2")
    );
    assert_eq!(
        line("fedingress_dns_dropped_total{transport=\"tcp\"}").as_deref(),
        Some("0")
    );
    for family in [
        "fedingress_dns_queries_total",
        "fedingress_dns_truncated_total",
        "fedingress_dns_dropped_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} counter\n")),
            "{family}"
        );
        assert!(text.contains(&format!("# HELP {family} ")), "{family}");
    }
    let stats = server.stats();
    assert_eq!(
        (stats.fast, stats.slow, stats.truncated, stats.dropped),
        (4, 5, 1, 2)
    );
}

#[test]
fn in_zone_nameserver_addresses_on_the_fast_path_and_glue_with_ns() {
    let server = server();
    let packet = query(7, [0x01, 0x00], "NS.test", TYPE_A, None);
    let message = Message::from_vec(&one(&server, &packet, Transport::Udp)).unwrap();
    assert!(message.metadata.authoritative);
    assert_eq!(message.answers.len(), 1);
    assert_eq!(message.answers[0].ttl, 3600, "the zone's NS TTL");
    assert_eq!(
        message.answers[0].data,
        RData::A("192.0.2.53".parse().unwrap())
    );
    assert_eq!(server.stats().fast, 1, "pre-encoded like other names");

    let ns = query(8, [0x01, 0x00], "test", u16::from(RecordType::NS), None);
    let message = Message::from_vec(&one(&server, &ns, Transport::Udp)).unwrap();
    assert_eq!(message.answers.len(), 1);
    assert_eq!(message.additionals.len(), 1, "glue");
    assert_eq!(message.additionals[0].name.to_ascii(), "ns.test.");
    assert_eq!(
        message.additionals[0].data,
        RData::A("192.0.2.53".parse().unwrap())
    );

    // IPv4 only: AAAA is NODATA with the SOA.
    let aaaa = query(
        9,
        [0x01, 0x00],
        "ns.test",
        u16::from(RecordType::AAAA),
        None,
    );
    let message = Message::from_vec(&one(&server, &aaaa, Transport::Udp)).unwrap();
    assert_eq!(message.metadata.response_code, ResponseCode::NoError);
    assert!(message.answers.is_empty());
    assert_eq!(message.authorities.len(), 1);
}

fn server_with(config: super::config::ServerConfig) -> DnsServer {
    DnsServer::with_config(server().snapshot(), config)
}

fn metric(server: &DnsServer, series: &str) -> u64 {
    let mut text = String::new();
    server.write_prometheus(&mut text);
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

#[test]
fn rrl_drops_and_slips_over_the_limit_over_udp_only_and_spares_exempt_sources() {
    let mut config = super::config::ServerConfig::default();
    config.rrl.responses_per_second = 2;
    config.rrl.slip = 2;
    config.rrl.exempt = vec!["192.0.2.0/24".parse().unwrap()];
    let server = server_with(config);
    let attacked: IpAddr = "198.51.100.7".parse().unwrap();
    let ecs = Some((1232, 0, Some((1, 24, vec![203, 0, 113]))));
    let packet = query(7, [0, 0], "geo.test", TYPE_A, ecs);
    let udp: Vec<Vec<Vec<u8>>> = (0..6)
        .map(|_| server.respond(&packet, attacked, Transport::Udp, &[]))
        .collect();
    let kinds: Vec<&str> = udp
        .iter()
        .map(|r| match r.as_slice() {
            [] => "drop",
            [one] if one[2] & 0x02 != 0 => "slip",
            [_] => "answer",
            _ => "several",
        })
        .collect();
    assert_eq!(kinds, ["answer", "answer", "drop", "slip", "drop", "slip"]);
    // The slip: TC, the question and the OPT record (ECS echoed), no records.
    let slip = Message::from_vec(&udp[3][0]).unwrap();
    assert!(slip.metadata.truncation);
    assert_eq!(slip.queries.len(), 1);
    assert!(slip.answers.is_empty() && slip.authorities.is_empty());
    assert!(slip.edns.is_some());
    // Another name is another bucket; TCP and exempt sources are never limited.
    let other = query(8, [0, 0], "big.test", TYPE_A, None);
    assert_eq!(
        server.respond(&other, attacked, Transport::Udp, &[]).len(),
        1
    );
    for _ in 0..10 {
        let tcp = server.respond(&packet, attacked, Transport::Tcp, &[]);
        assert_eq!(tcp.len(), 1);
        assert_eq!(tcp[0][2] & 0x02, 0);
        let exempt = server.respond(&packet, "192.0.2.9".parse().unwrap(), Transport::Udp, &[]);
        assert_eq!(exempt.len(), 1);
        assert_eq!(exempt[0][2] & 0x02, 0);
    }
    assert_eq!(
        metric(
            &server,
            "fedingress_dns_rrl_responses_total{class=\"positive\",action=\"dropped\"}"
        ),
        2
    );
    assert_eq!(
        metric(
            &server,
            "fedingress_dns_rrl_responses_total{class=\"positive\",action=\"slipped\"}"
        ),
        2
    );
    // NXDOMAIN is charged per zone: different missing names share one bucket.
    for (i, name) in ["a.test", "b.test", "c.test"].iter().enumerate() {
        let answered = server.respond(
            &query(i as u16, [0, 0], name, TYPE_A, None),
            attacked,
            Transport::Udp,
            &[],
        );
        assert_eq!(answered.len(), usize::from(i < 2), "{name}");
    }
    assert_eq!(
        metric(
            &server,
            "fedingress_dns_rrl_responses_total{class=\"nxdomain\",action=\"dropped\"}"
        ),
        1
    );
}

#[test]
fn rrl_disabled_sends_everything() {
    let mut config = super::config::ServerConfig::default();
    config.rrl.enabled = false;
    config.rrl.responses_per_second = 1;
    config.rrl.exempt.clear();
    let server = server_with(config);
    let packet = query(7, [0, 0], "geo.test", TYPE_A, None);
    for _ in 0..20 {
        let answered = server.respond(
            &packet,
            "198.51.100.7".parse().unwrap(),
            Transport::Udp,
            &[],
        );
        assert_eq!(answered.len(), 1);
    }
    assert_eq!(metric(&server, "fedingress_dns_rrl_enabled"), 0);
}

#[test]
fn ecs_steers_only_from_trusted_resolvers() {
    let server = server();
    let ecs = Some((1232, 0, Some((1, 24, vec![203, 0, 113]))));
    let packet = query(7, [0, 0], "geo.test", TYPE_A, ecs);
    let ask = |from: &str| {
        let responses = server.respond(&packet, from.parse().unwrap(), Transport::Udp, &[]);
        let message = Message::from_vec(&responses[0]).unwrap();
        let answer = match message.answers[0].data {
            RData::A(a) => a.0.to_string(),
            ref other => panic!("{other:?}"),
        };
        (answer, ecs_scope(&message))
    };
    // Loopback is trusted by default: the ECS address (203.0.113.0/24: us) steers.
    assert_eq!(ask("127.0.0.1"), ("192.0.2.2".to_owned(), Some((24, 24))));
    // Anyone else: the source (unknown: the default location, eu) steers, scope 0.
    assert_eq!(ask("198.51.100.7"), ("192.0.2.1".to_owned(), Some((24, 0))));
    assert_eq!(
        metric(
            &server,
            "fedingress_dns_ecs_untrusted_total{transport=\"udp\"}"
        ),
        1
    );
    // An explicit list replaces the default.
    let mut config = super::config::ServerConfig::default();
    config.ecs.trusted_resolvers = vec!["198.51.100.0/24".parse().unwrap()];
    let trusting = server_with(config);
    let responses = trusting.respond(
        &packet,
        "198.51.100.7".parse().unwrap(),
        Transport::Udp,
        &[],
    );
    let message = Message::from_vec(&responses[0]).unwrap();
    assert_eq!(
        message.answers[0].data,
        RData::A("192.0.2.2".parse().unwrap())
    );
    assert_eq!(
        metric(
            &trusting,
            "fedingress_dns_ecs_untrusted_total{transport=\"udp\"}"
        ),
        0
    );
}

#[tokio::test]
async fn tcp_connections_are_capped_and_idle_ones_closed_and_counted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = super::config::ServerConfig::default();
    config.tcp.max_connections = 2;
    config.tcp.idle_timeout_seconds = 1;
    let server = Arc::new(server_with(config));
    let (udp, tcp) = super::bind_udp_and_tcp("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let address = udp.local_addr().unwrap();
    let serving = tokio::spawn(server.clone().serve(udp, tcp, Vec::new()));
    // Two connections held open (one proves it is served), then a third: closed at once.
    let mut first = tokio::net::TcpStream::connect(address).await.unwrap();
    let packet = query(9, [0, 0], "geo.test", TYPE_A, None);
    let mut framed = (packet.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&packet);
    first.write_all(&framed).await.unwrap();
    let mut len = [0u8; 2];
    first.read_exact(&mut len).await.unwrap();
    let _second = tokio::net::TcpStream::connect(address).await.unwrap();
    let wait = std::time::Duration::from_secs(30);
    let deadline = tokio::time::Instant::now() + wait;
    while metric(&server, "fedingress_dns_tcp_connections") < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "two connections open"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut third = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(wait, third.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert_eq!(metric(&server, "fedingress_dns_tcp_refused_total"), 1);
    // The idle ones are closed after a second, and counted.
    let read = tokio::time::timeout(wait, first.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(_)) | Ok(Err(_))), "{read:?}");
    while metric(&server, "fedingress_dns_tcp_idle_closed_total") < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle connections closed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(metric(&server, "fedingress_dns_tcp_connections"), 0);
    assert_eq!(metric(&server, "fedingress_dns_tcp_max_connections"), 2);
    serving.abort();
}
