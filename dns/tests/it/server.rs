//! The embedded DNS server over real loopback sockets, queried with `dig` (dnsutils),
//! hickory-resolver and raw packets.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fedingress_api::ingress::StrategyType;
use fedingress_dns::zone::Snapshot;
use fedingress_testsupport::dns::{Edns, Query};
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};
use rand::{Rng, SeedableRng};
use tokio::net::UdpSocket;

fn resolver(addr: SocketAddr) -> TokioResolver {
    let mut udp = ConnectionConfig::udp();
    udp.port = addr.port();
    let mut tcp = ConnectionConfig::tcp();
    tcp.port = addr.port();
    let server = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
    let config = ResolverConfig::from_parts(None, vec![], vec![server]);
    let mut builder = Resolver::builder_with_config(config, TokioRuntimeProvider::default());
    builder.options_mut().cache_size = 0;
    builder.build().unwrap()
}

async fn running() -> Running {
    let (snapshot, problems) = snapshot();
    assert!(problems.is_empty(), "{problems:?}");
    start(snapshot, vec![]).await
}

#[tokio::test]
async fn geo_answers_depend_on_the_client_subnet_with_its_scope() {
    let dns = running().await;
    let eu = dig(
        dns.addr,
        &[&format!("geo.{ZONE}"), "A", &format!("+subnet={EU_SUBNET}")],
    )
    .await;
    assert_eq!(
        answers(&eu),
        vec![("A".to_owned(), "192.0.2.1".to_owned())],
        "{eu}"
    );
    assert!(eu.contains("CLIENT-SUBNET: 203.0.113.0/24/24"), "{eu}");
    assert!(eu.contains("flags: qr aa rd;"), "{eu}");

    let us = dig(
        dns.addr,
        &[&format!("geo.{ZONE}"), "A", &format!("+subnet={US_SUBNET}")],
    )
    .await;
    assert_eq!(
        answers(&us),
        vec![("A".to_owned(), "192.0.2.2".to_owned())],
        "{us}"
    );
    assert!(us.contains("CLIENT-SUBNET: 198.51.100.0/24/24"), "{us}");

    // A longer source prefix inside the subnet: same bucket, scope still the table's /24.
    let host = dig(
        dns.addr,
        &[&format!("geo.{ZONE}"), "A", "+subnet=198.51.100.77/32"],
    )
    .await;
    assert_eq!(
        answers(&host),
        vec![("A".to_owned(), "192.0.2.2".to_owned())],
        "{host}"
    );
    assert!(
        host.contains("CLIENT-SUBNET: 198.51.100.77/32/24"),
        "{host}"
    );

    // Source prefix 0: the resolver's own address (loopback: default, Europe), scope 0.
    let zero = dig(
        dns.addr,
        &[&format!("geo.{ZONE}"), "A", "+subnet=0.0.0.0/0"],
    )
    .await;
    assert_eq!(
        answers(&zero),
        vec![("A".to_owned(), "192.0.2.1".to_owned())],
        "{zero}"
    );
    assert!(zero.contains("CLIENT-SUBNET: 0.0.0.0/0/0"), "{zero}");

    // Over TCP: the same answers.
    let tcp = dig(
        dns.addr,
        &[
            "+tcp",
            &format!("geo.{ZONE}"),
            "A",
            &format!("+subnet={US_SUBNET}"),
        ],
    )
    .await;
    assert_eq!(
        answers(&tcp),
        vec![("A".to_owned(), "192.0.2.2".to_owned())],
        "{tcp}"
    );
    assert!(tcp.contains("CLIENT-SUBNET: 198.51.100.0/24/24"), "{tcp}");

    // Location-independent answers have scope 0.
    let rr = dig(
        dns.addr,
        &[
            &format!("v4only.{ZONE}"),
            "A",
            &format!("+subnet={US_SUBNET}"),
        ],
    )
    .await;
    assert!(rr.contains("CLIENT-SUBNET: 198.51.100.0/24/0"), "{rr}");
    assert!(dns.server.stats().fast >= 5, "{:?}", dns.server.stats());
}

/// Sends `packet` from `client` to `server`; the response and the address it came from.
async fn ask_from(client: &UdpSocket, server: SocketAddr, packet: &[u8]) -> (Vec<u8>, SocketAddr) {
    client.send_to(packet, server).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let (len, from) = tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("no response to a query sent to {server}"))
        .unwrap();
    buf.truncate(len);
    (buf, from)
}

/// One listener on the wildcard address serves several nameserver addresses: every
/// reply leaves from the address its query was sent to (resolvers drop replies from any
/// other; before packet info, the kernel sent them all from 127.0.0.1). Fast path (A)
/// and slow path (SOA), IPv4 and, on a dual-stack `::` socket, IPv4-mapped and IPv6.
#[tokio::test]
async fn on_a_wildcard_address_replies_leave_from_the_address_asked() {
    let dns = start_at("0.0.0.0".parse().unwrap(), snapshot().0, vec![]).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for (i, asked) in ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        .into_iter()
        .enumerate()
    {
        let server = SocketAddr::new(asked.parse().unwrap(), dns.addr.port());
        let id = i as u16;
        let (response, from) = ask_from(
            &client,
            server,
            &Query::new(id, &format!("geo.{ZONE}"), 1)
                .recursion_desired()
                .encode(),
        )
        .await;
        assert_eq!(from, server);
        assert_eq!(
            a_records(&response),
            vec!["192.0.2.1".parse::<IpAddr>().unwrap()]
        );
        let (response, from) = ask_from(
            &client,
            server,
            &Query::new(id + 10, ZONE, 6)
                .recursion_desired()
                .edns(Edns::Opt)
                .encode(),
        )
        .await;
        assert_eq!(from, server);
        assert_eq!(response[..2], (id + 10).to_be_bytes());
    }
    // dig checks the source address too ("reply from unexpected source").
    let soa = dig(
        SocketAddr::new("127.0.0.2".parse().unwrap(), dns.addr.port()),
        &["+norec", ZONE, "SOA"],
    )
    .await;
    assert!(soa.contains("status: NOERROR"), "{soa}");

    let Ok(probe) = std::net::UdpSocket::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here: the dual-stack part is skipped");
        return;
    };
    drop(probe);
    let dns = start_at("::".parse().unwrap(), snapshot().0, vec![]).await;
    for (client, asked) in [("127.0.0.1:0", "127.0.0.2"), ("[::1]:0", "::1")] {
        let client = UdpSocket::bind(client).await.unwrap();
        let server = SocketAddr::new(asked.parse().unwrap(), dns.addr.port());
        let (response, from) = ask_from(
            &client,
            server,
            &Query::new(3, &format!("geo.{ZONE}"), 1)
                .recursion_desired()
                .encode(),
        )
        .await;
        assert_eq!(from, server);
        assert_eq!(
            a_records(&response),
            vec!["192.0.2.1".parse::<IpAddr>().unwrap()]
        );
    }
}

#[tokio::test]
async fn aaaa_and_plain_queries_through_hickory_resolver() {
    let dns = running().await;
    let resolver = resolver(dns.addr);
    // Loopback has no table entry: the default location (Paris) is nearest eu-west.
    let aaaa = resolver
        .lookup(format!("geo.{ZONE}."), RecordType::AAAA)
        .await
        .unwrap();
    let ips: Vec<String> = aaaa.answers().iter().map(|r| r.data.to_string()).collect();
    assert_eq!(ips, vec!["2001:db8::1"]);
    let a = resolver
        .lookup(format!("GEO.{ZONE}."), RecordType::A)
        .await
        .unwrap();
    let ips: Vec<String> = a.answers().iter().map(|r| r.data.to_string()).collect();
    assert_eq!(ips, vec!["192.0.2.1"]);
    assert_eq!(a.answers()[0].ttl, 30);
    // NODATA: the name has no IPv6 address.
    let error = resolver
        .lookup(format!("v4only.{ZONE}."), RecordType::AAAA)
        .await
        .unwrap_err();
    assert!(error.is_no_records_found(), "{error:?}");
}

#[tokio::test]
async fn srv_points_at_per_cluster_targets_with_addresses() {
    let dns = running().await;
    let srv_name = format!("_mysql._tcp.svc.{ZONE}");
    let eu = dig(
        dns.addr,
        &[&srv_name, "SRV", &format!("+subnet={EU_SUBNET}")],
    )
    .await;
    assert_eq!(
        answers(&eu),
        vec![("SRV".to_owned(), format!("0 1 3306 eu-west.svc.{ZONE}."))],
        "{eu}"
    );
    let additional = section(&eu, ";; ADDITIONAL SECTION:");
    assert!(
        additional.contains(&("A".to_owned(), "192.0.2.1".to_owned())),
        "{eu}"
    );
    assert!(
        additional.contains(&("AAAA".to_owned(), "2001:db8::1".to_owned())),
        "{eu}"
    );
    assert!(eu.contains("CLIENT-SUBNET: 203.0.113.0/24/24"), "{eu}");

    let us = dig(
        dns.addr,
        &[&srv_name, "SRV", &format!("+subnet={US_SUBNET}")],
    )
    .await;
    assert_eq!(
        answers(&us),
        vec![("SRV".to_owned(), format!("0 1 3306 us-east.svc.{ZONE}."))],
        "{us}"
    );

    // The targets resolve to all of their cluster's addresses, for everyone.
    let resolver = resolver(dns.addr);
    let target = resolver
        .lookup(format!("us-east.svc.{ZONE}."), RecordType::A)
        .await
        .unwrap();
    let ips: Vec<String> = target
        .answers()
        .iter()
        .map(|r| r.data.to_string())
        .collect();
    assert_eq!(ips, vec!["192.0.2.2"]);
    let srv = resolver
        .lookup(srv_name.clone() + ".", RecordType::SRV)
        .await
        .unwrap();
    match &srv.answers()[0].data {
        RData::SRV(srv) => {
            assert_eq!(srv.port, 3306);
            assert_eq!(srv.target.to_ascii(), format!("eu-west.svc.{ZONE}."));
        }
        other => panic!("not SRV: {other:?}"),
    }
    // The empty non-terminal between the SRV name and the dnsName exists: NODATA.
    let ent = dig(dns.addr, &[&format!("_tcp.svc.{ZONE}"), "A"]).await;
    assert!(ent.contains("status: NOERROR"), "{ent}");
    assert!(ent.contains("ANSWER: 0"), "{ent}");
}

#[tokio::test]
async fn host_name_addresses_are_cnames_and_ips_win_when_mixed() {
    let dns = running().await;
    let cname = dig(dns.addr, &[&format!("cname.{ZONE}"), "A"]).await;
    assert_eq!(
        answers(&cname),
        vec![(
            "CNAME".to_owned(),
            "a473cf621de6b49d.us-east-2.elb.amazonaws.com.".to_owned()
        )],
        "{cname}"
    );
    // Every type gets the CNAME.
    let txt = dig(dns.addr, &[&format!("cname.{ZONE}"), "TXT"]).await;
    assert_eq!(
        answers(&txt).first().map(|(t, _)| t.as_str()),
        Some("CNAME"),
        "{txt}"
    );
    let mixed = dig(dns.addr, &[&format!("mixed.{ZONE}"), "A"]).await;
    assert_eq!(
        answers(&mixed),
        vec![("A".to_owned(), "192.0.2.30".to_owned())],
        "{mixed}"
    );
}

#[tokio::test]
async fn nxdomain_nodata_refused_any_and_apex() {
    let dns = running().await;
    let nx = dig(dns.addr, &[&format!("nope.{ZONE}"), "A"]).await;
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
    assert!(nx.contains("flags: qr aa rd;"), "{nx}");
    let authority = section(&nx, ";; AUTHORITY SECTION:");
    assert_eq!(
        authority.first().map(|(t, _)| t.as_str()),
        Some("SOA"),
        "{nx}"
    );

    let nodata = dig(dns.addr, &[&format!("geo.{ZONE}"), "TXT"]).await;
    assert!(nodata.contains("status: NOERROR"), "{nodata}");
    assert!(nodata.contains("ANSWER: 0, AUTHORITY: 1"), "{nodata}");
    let nodata_aaaa = dig(dns.addr, &[&format!("v4only.{ZONE}"), "AAAA"]).await;
    assert!(
        nodata_aaaa.contains("ANSWER: 0, AUTHORITY: 1"),
        "{nodata_aaaa}"
    );
    // Negative TTL: min(SOA TTL 3600, minimum 30).
    assert!(
        nodata_aaaa.contains(&format!("{ZONE}.\t30\tIN\tSOA")),
        "{nodata_aaaa}"
    );

    let refused = dig(dns.addr, &["shop.example.com", "A"]).await;
    assert!(refused.contains("status: REFUSED"), "{refused}");
    assert!(!refused.contains(" aa"), "{refused}");

    let any = dig(dns.addr, &[&format!("geo.{ZONE}"), "ANY"]).await;
    assert_eq!(
        answers(&any),
        vec![("HINFO".to_owned(), "\"RFC8482\" \"\"".to_owned())],
        "{any}"
    );

    let soa = dig(dns.addr, &[ZONE, "SOA"]).await;
    let soa = answers(&soa);
    assert_eq!(soa.len(), 1);
    assert!(
        soa[0]
            .1
            .starts_with(&format!("ns1.{ZONE}. hostmaster.{ZONE}. 7 ")),
        "{soa:?}"
    );
    let ns = dig(dns.addr, &[ZONE, "NS"]).await;
    assert_eq!(
        answers(&ns),
        vec![("NS".to_owned(), format!("ns1.{ZONE}."))]
    );
}

#[tokio::test]
async fn weighted_answers_split_by_weight_over_ten_thousand_queries() {
    let dns = running().await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let name = format!("weighted.{ZONE}");
    let mut counts: BTreeMap<IpAddr, u32> = BTreeMap::new();
    const N: u16 = 10_000;
    // Pipelined: batches of 100 in flight.
    let mut buf = vec![0u8; 2048];
    for batch in 0..N / 100 {
        for i in 0..100 {
            let id = batch * 100 + i;
            socket
                .send_to(
                    &Query::new(id, &name, 1).recursion_desired().encode(),
                    dns.addr,
                )
                .await
                .unwrap();
        }
        for _ in 0..100 {
            let (len, _) = tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buf))
                .await
                .expect("answer within 5 s")
                .unwrap();
            let ips = a_records(&buf[..len]);
            assert_eq!(ips.len(), 1, "one cluster per weighted answer");
            *counts.entry(ips[0]).or_default() += 1;
        }
    }
    let a = f64::from(
        counts
            .get(&"192.0.2.20".parse::<IpAddr>().unwrap())
            .copied()
            .unwrap_or(0),
    );
    let share = a / f64::from(N);
    assert!(
        (share - 0.75).abs() <= 0.03,
        "share of a = {share} ({counts:?})"
    );
    assert_eq!(counts.values().sum::<u32>(), u32::from(N));
}

#[tokio::test]
async fn round_robin_rotates_the_record_set() {
    let dns = running().await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let name = format!("rr.{ZONE}");
    let mut firsts = Vec::new();
    for id in 0..3 {
        let response = exchange(
            &socket,
            dns.addr,
            &Query::new(id, &name, 1)
                .recursion_desired()
                .edns(Edns::Opt)
                .encode(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let ips = a_records(&response);
        assert_eq!(ips.len(), 3, "every cluster in each answer");
        firsts.push(ips[0]);
    }
    firsts.sort();
    firsts.dedup();
    assert_eq!(
        firsts.len(),
        3,
        "each query starts with another address: {firsts:?}"
    );
}

#[tokio::test]
async fn large_answers_truncate_over_udp_and_come_whole_over_tcp() {
    let dns = running().await;
    let name = format!("big.{ZONE}");
    let udp = dig(dns.addr, &["+ignore", &name, "A"]).await;
    assert!(udp.contains("flags: qr aa tc rd;"), "{udp}");
    assert!(udp.contains("ANSWER: 0"), "{udp}");
    // dig retries over TCP by itself without +ignore.
    let retried = dig(dns.addr, &[&name, "A"]).await;
    assert_eq!(answers(&retried).len(), 100, "{retried}");
    let tcp = dig(dns.addr, &["+tcp", &name, "A"]).await;
    assert_eq!(answers(&tcp).len(), 100, "{tcp}");

    // Without EDNS the limit is 512 octets.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let response = exchange(
        &socket,
        dns.addr,
        &Query::new(9, &name, 1).recursion_desired().encode(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert!(response.len() <= 512);
    assert_eq!(response[2] & 0x02, 0x02, "TC set");
    assert!(dns.server.stats().truncated >= 2);
}

#[tokio::test]
async fn malformed_packets_are_answered_or_dropped_without_crashing() {
    let dns = running().await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let valid = Query::new(1, &format!("geo.{ZONE}"), 1)
        .recursion_desired()
        .edns(Edns::Opt)
        .encode();
    let mut packets: Vec<Vec<u8>> = Vec::new();
    for _ in 0..2000 {
        let len = rng.random_range(0..600);
        packets.push((0..len).map(|_| rng.random()).collect());
    }
    // Random corruptions of a valid query (flipped bytes, cut short).
    for _ in 0..2000 {
        let mut p = valid.clone();
        let flips = rng.random_range(1..4);
        for _ in 0..flips {
            let at = rng.random_range(0..p.len());
            p[at] = rng.random();
        }
        if rng.random_bool(0.3) {
            p.truncate(rng.random_range(0..p.len()));
        }
        packets.push(p);
    }
    for len in 0..valid.len() {
        packets.push(valid[..len].to_vec());
    }
    // A question with a label of 200 octets, a compression loop, 2 questions, ANY class.
    let mut huge = valid[..12].to_vec();
    huge.push(200);
    huge.extend(std::iter::repeat_n(b'a', 200));
    huge.extend_from_slice(&[0, 0, 1, 0, 1]);
    packets.push(huge.clone());
    let mut looped = valid[..12].to_vec();
    looped.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1]);
    packets.push(looped);
    let mut two = Query::new(3, &format!("geo.{ZONE}"), 1)
        .recursion_desired()
        .encode();
    two[5] = 2;
    let question = two[12..].to_vec();
    two.extend_from_slice(&question);
    packets.push(two.clone());

    for packet in &packets {
        socket.send_to(packet, dns.addr).await.unwrap();
    }
    // Drain whatever came back; then the server must still answer.
    let mut buf = vec![0u8; 65_535];
    while let Ok(Ok(_)) =
        tokio::time::timeout(Duration::from_millis(300), socket.recv_from(&mut buf)).await
    {}

    let response = exchange(&socket, dns.addr, &huge, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(&response[..2], &huge[..2]);
    assert_eq!(response[3] & 0x0F, 1, "FORMERR for an oversized label");
    let response = exchange(&socket, dns.addr, &two, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(response[3] & 0x0F, 1, "FORMERR for two questions");
    let response = exchange(&socket, dns.addr, &[1, 2, 3], Duration::from_millis(300)).await;
    assert!(response.is_none(), "shorter than a header: dropped");

    let response = exchange(&socket, dns.addr, &valid, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        a_records(&response),
        vec!["192.0.2.1".parse::<IpAddr>().unwrap()]
    );
    let ok = dig(dns.addr, &[&format!("geo.{ZONE}"), "A", "+tcp"]).await;
    assert_eq!(answers(&ok).len(), 1, "{ok}");

    // Garbage over TCP: the connection may close, the server keeps serving.
    for packet in packets.iter().take(200) {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(dns.addr).await {
            use tokio::io::AsyncWriteExt;
            let mut framed = (packet.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(packet);
            let _ = stream.write_all(&framed).await;
        }
    }
    let ok = dig(dns.addr, &[&format!("geo.{ZONE}"), "A", "+tcp"]).await;
    assert_eq!(answers(&ok).len(), 1, "{ok}");
}

#[tokio::test]
async fn zone_transfer_is_refused_by_default() {
    let dns = running().await;
    let axfr = dig(dns.addr, &[ZONE, "AXFR"]).await;
    assert!(axfr.contains("Transfer failed"), "{axfr}");
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for qtype in [251, 252] {
        let response = exchange(
            &socket,
            dns.addr,
            &Query::new(1, ZONE, qtype).recursion_desired().encode(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(response[3] & 0x0F, 5, "REFUSED over UDP too");
    }
}

#[tokio::test]
async fn zone_transfer_to_allowed_clients() {
    let (snapshot, _) = snapshot();
    let dns = start(snapshot, vec!["127.0.0.0/8".parse().unwrap()]).await;
    let axfr = dig(dns.addr, &[ZONE, "AXFR"]).await;
    let records: Vec<(String, String)> = axfr
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_owned(), f[3].to_owned())
        })
        .collect();
    assert_eq!(records.first().map(|r| r.1.as_str()), Some("SOA"), "{axfr}");
    assert_eq!(records.last().map(|r| r.1.as_str()), Some("SOA"), "{axfr}");
    assert_eq!(records.iter().filter(|r| r.1 == "SOA").count(), 2);
    assert!(
        records.contains(&(format!("geo.{ZONE}."), "A".to_owned())),
        "{axfr}"
    );
    assert!(
        records.contains(&(format!("_mysql._tcp.svc.{ZONE}."), "SRV".to_owned())),
        "{axfr}"
    );
    assert!(
        records.contains(&(format!("cname.{ZONE}."), "CNAME".to_owned())),
        "{axfr}"
    );
    // The default bucket's answer for Geo (Europe).
    assert!(axfr.contains("192.0.2.1"), "{axfr}");
    assert_eq!(
        records
            .iter()
            .filter(|r| r.0 == format!("big.{ZONE}."))
            .count(),
        100
    );
    // A name below the apex is not a zone.
    let sub = dig(dns.addr, &[&format!("geo.{ZONE}"), "AXFR"]).await;
    assert!(sub.contains("Transfer failed"), "{sub}");
}

#[tokio::test]
async fn a_rebuilt_snapshot_answers_like_a_fresh_one_with_the_new_serial() {
    let dns = running().await;
    let mut ingresses = ingresses();
    let v4only = ingresses
        .iter_mut()
        .find(|i| i.dns_name.starts_with("v4only"))
        .unwrap();
    v4only.clusters[0].ips = vec!["192.0.2.41".parse().unwrap()];
    let (next, _) = dns.server.snapshot().rebuild(&zones(), 9, &ingresses);
    dns.server.swap(Arc::new(next));
    let changed = dig(dns.addr, &["+short", &format!("v4only.{ZONE}"), "A"]).await;
    assert_eq!(changed.trim(), "192.0.2.41");
    // Every other name kept its encoded answers; their negative answers (fast path,
    // UDP, and slow path, TCP) carry the new serial.
    for transport in ["+notcp", "+tcp"] {
        let nodata = dig(dns.addr, &[transport, &format!("rr.{ZONE}"), "AAAA"]).await;
        let authority = section(&nodata, ";; AUTHORITY SECTION:");
        assert!(
            authority
                .first()
                .is_some_and(|(_, data)| data.contains(" 9 ")),
            "{transport}: {nodata}"
        );
    }
}

#[tokio::test]
async fn swapping_the_snapshot_changes_answers() {
    let dns = running().await;
    let resolver = resolver(dns.addr);
    let before = resolver
        .lookup(format!("v4only.{ZONE}."), RecordType::A)
        .await
        .unwrap();
    assert_eq!(before.answers()[0].data.to_string(), "192.0.2.40");

    let mut ingresses = ingresses();
    let v4only = ingresses
        .iter_mut()
        .find(|i| i.dns_name.starts_with("v4only"))
        .unwrap();
    v4only.clusters[0].ips = vec!["192.0.2.41".parse().unwrap()];
    let (next, _) = Snapshot::build(&zones(), 8, &ingresses, locator());
    dns.server.swap(Arc::new(next));

    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let response = exchange(
        &socket,
        dns.addr,
        &Query::new(5, &format!("v4only.{ZONE}"), 1)
            .recursion_desired()
            .encode(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(
        a_records(&response),
        vec!["192.0.2.41".parse::<IpAddr>().unwrap()]
    );
    let soa = dig(dns.addr, &[ZONE, "SOA"]).await;
    assert!(answers(&soa)[0].1.contains(" 8 "), "{soa}");
}

#[tokio::test]
async fn geo_answers_follow_health() {
    let mut ingresses = ingresses();
    let geo = ingresses
        .iter_mut()
        .find(|i| i.dns_name.starts_with("geo."))
        .unwrap();
    geo.clusters
        .iter_mut()
        .find(|c| c.name == "eu-west")
        .unwrap()
        .healthy = false;
    let (snapshot, _) = Snapshot::build(&zones(), 1, &ingresses, locator());
    let dns = start(snapshot, vec![]).await;
    let eu = dig(
        dns.addr,
        &[&format!("geo.{ZONE}"), "A", &format!("+subnet={EU_SUBNET}")],
    )
    .await;
    assert_eq!(
        answers(&eu),
        vec![("A".to_owned(), "192.0.2.2".to_owned())],
        "{eu}"
    );
    assert_eq!(strategy(StrategyType::Geo).type_, StrategyType::Geo);
}
