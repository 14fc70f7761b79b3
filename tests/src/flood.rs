//! Floods for the data plane's limits: UDP datagrams from very many distinct source
//! addresses, sent from a few sockets.
//!
//! Linux routes all of 127.0.0.0/8 to the loopback interface, and a socket may name any
//! local address as the source of one datagram (`IP_PKTINFO`'s `ipi_spec_dst` on
//! `sendmsg`). So a handful of sockets bound to `127.0.0.1` send as `127.x.y.z` from
//! their own ports: 100,000 distinct sources cost the test a few descriptors, not
//! 100,000. Replies to those sources find no socket and are dropped by the kernel, as
//! replies to spoofed addresses are. [`metric`] reads one series of a `/metrics` page.

use std::io::{self, IoSlice};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

use nix::libc;
use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrIn, sendmsg};

/// A UDP socket on `127.0.0.1` that sends as any loopback address, from its own port.
pub struct SpoofingSender {
    socket: UdpSocket,
}

impl SpoofingSender {
    pub fn bind() -> io::Result<Self> {
        Ok(Self {
            socket: UdpSocket::bind("127.0.0.1:0")?,
        })
    }

    /// Sends `payload` to `to` as if from `source` (a loopback address) and this
    /// socket's port.
    pub fn send_as(&self, source: Ipv4Addr, to: SocketAddrV4, payload: &[u8]) -> io::Result<()> {
        let info = libc::in_pktinfo {
            ipi_ifindex: 0,
            ipi_spec_dst: libc::in_addr {
                // Network byte order: the octets as they lie in memory.
                s_addr: u32::from_ne_bytes(source.octets()),
            },
            ipi_addr: libc::in_addr { s_addr: 0 },
        };
        sendmsg(
            self.socket.as_raw_fd(),
            &[IoSlice::new(payload)],
            &[ControlMessage::Ipv4PacketInfo(&info)],
            MsgFlags::empty(),
            Some(&SockaddrIn::from(to)),
        )
        .map(|_| ())
        .map_err(io::Error::from)
    }
}

/// Source address `n` (from 0) of a flood: `127.<first>.0.1`, `127.<first>.0.2`, … on
/// through the following second octets (every address is on loopback).
pub fn source_address(first: u8, n: u32) -> Ipv4Addr {
    let n = n + 1;
    let [_, a, b, c] = n.to_be_bytes();
    Ipv4Addr::new(127, first.wrapping_add(a), b, c)
}

/// Sends one datagram to `target` from each of `count` distinct sources: every address
/// of [`source_address`]`(first, ..)` from the port of each of `senders` in turn, so
/// `senders.len()` sources share an address. After every `batch` datagrams `pace` runs
/// (a round trip through the target, say, so that the flood does not outrun the
/// receiver's socket buffer and every datagram is really handled). Returns how many
/// sends failed.
pub fn flood(
    target: SocketAddrV4,
    senders: &[SpoofingSender],
    first: u8,
    count: u32,
    batch: u32,
    mut pace: impl FnMut(),
) -> u32 {
    let ports = u32::try_from(senders.len().max(1)).unwrap_or(1);
    let mut failed = 0;
    for i in 0..count {
        let Some(sender) = senders.get((i % ports) as usize) else {
            break;
        };
        let source = source_address(first, i / ports);
        if sender.send_as(source, target, b"flood").is_err() {
            failed += 1;
        }
        if batch > 0 && (i + 1) % batch == 0 {
            pace();
        }
    }
    failed
}

/// The value of the first series of `text` (Prometheus text format) whose name is
/// `name` and whose labels contain every one of `labels` (`key="value"`).
pub fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (series_name == name && labels.iter().all(|l| series_labels.contains(l)))
                .then(|| value.parse().ok())
                .flatten()
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_distinct_loopback_addresses() {
        assert_eq!(source_address(200, 0), Ipv4Addr::new(127, 200, 0, 1));
        assert_eq!(source_address(200, 255), Ipv4Addr::new(127, 200, 1, 0));
        assert_eq!(
            source_address(200, 70_000),
            Ipv4Addr::new(127, 201, 17, 113)
        );
    }

    #[test]
    fn a_datagram_arrives_from_the_address_it_names() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let std::net::SocketAddr::V4(to) = receiver.local_addr().unwrap() else {
            panic!("IPv4");
        };
        let sender = SpoofingSender::bind().unwrap();
        let source = Ipv4Addr::new(127, 203, 4, 5);
        sender.send_as(source, to, b"hi").unwrap();
        let mut buf = [0u8; 8];
        let (n, from) = receiver.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi");
        assert_eq!(from.ip(), source);
        assert_eq!(from.port(), sender.socket.local_addr().unwrap().port());
    }

    #[test]
    fn metric_finds_a_series_by_name_and_labels() {
        let text = "# TYPE x counter\nx{kind=\"UDP\",reason=\"a\"} 3\nx{kind=\"UDP\",reason=\"b\"} 7\ny 2.5\n";
        assert_eq!(metric(text, "x", &["reason=\"b\""]), Some(7.0));
        assert_eq!(metric(text, "y", &[]), Some(2.5));
        assert_eq!(metric(text, "x", &["reason=\"c\""]), None);
    }
}
