//! DNS clients for the hub's embedded server: one A query over UDP, the question built
//! by hand, the answer parsed with hickory-proto ([`query_a`]); and the real `dig` for
//! everything else ([`dig`]).

use std::net::{Ipv4Addr, SocketAddr};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RData;
use tokio::net::UdpSocket;

use super::DEADLINE;

/// What the server answered to an A query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub rcode: ResponseCode,
    /// The A records, sorted.
    pub ips: Vec<Ipv4Addr>,
}

/// The wire form of an A query for `name` with id `id` (RD set, no EDNS).
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut packet = Vec::with_capacity(64);
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        packet.push(u8::try_from(label.len()).unwrap());
        packet.extend_from_slice(label.as_bytes());
    }
    packet.extend_from_slice(&[0, 0, 1, 0, 1]);
    packet
}

/// Sends one A query for `name` to `server` and waits (within [`DEADLINE`]) for its
/// answer. A lost datagram on loopback fails the test.
pub async fn query_a(server: SocketAddr, name: &str) -> Answer {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let id: u16 = rand_id();
    socket.send_to(&query(id, name), server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let receive = async {
        loop {
            let (n, from) = socket.recv_from(&mut buf).await.unwrap();
            if from == server && n >= 2 && buf[..2] == id.to_be_bytes() {
                return n;
            }
        }
    };
    let n = tokio::time::timeout(DEADLINE, receive)
        .await
        .unwrap_or_else(|_| panic!("no DNS answer for {name} within {DEADLINE:?}"));
    let message = Message::from_vec(&buf[..n]).unwrap();
    let mut ips: Vec<Ipv4Addr> = message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    ips.sort();
    Answer {
        rcode: message.metadata.response_code,
        ips,
    }
}

fn rand_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0x1234);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `dig +short @server NAME QTYPE` (UDP), the answer lines sorted. Fails the test when
/// `dig` is missing (scripts/test installs dnsutils) or does not answer in time.
pub async fn dig(server: SocketAddr, name: &str, qtype: &str) -> Vec<String> {
    let output = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new("dig")
            .arg(format!("@{}", server.ip()))
            .args([
                "-p",
                &server.port().to_string(),
                "+short",
                "+time=2",
                "+tries=1",
            ])
            .args([name, qtype])
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("dig {name} {qtype} did not end within {DEADLINE:?}"))
    .expect("dig is installed (scripts/test installs dnsutils)");
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}
