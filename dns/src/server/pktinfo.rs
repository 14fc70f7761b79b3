//! UDP on a wildcard address (`0.0.0.0`, `::`): replies leave from the address each
//! query was sent to.
//!
//! A socket bound to an unspecified address receives queries for every address of the
//! host, but a plain `send_to` lets the kernel pick the reply's source address by route
//! (on loopback, 127.0.0.1 for a query sent to 127.0.0.2). Resolvers drop a reply whose
//! source is not the address they asked (`dig`: "reply from unexpected source"), so a
//! host with several nameserver addresses on one wildcard listener would answer on one
//! of them only. As Knot and Unbound do, such a socket turns on `IP_PKTINFO` (IPv4) or
//! `IPV6_RECVPKTINFO` (IPv6, also for IPv4-mapped clients of a dual-stack socket): each
//! datagram comes with the address it was sent to ([`Destination`]), and the reply
//! carries it back as the source (`IP_PKTINFO`/`IPV6_PKTINFO` on `sendmsg`).
//!
//! Sockets bound to a specific address keep plain `recv_from`/`send_to`: their source
//! is already right.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::libc;
use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrIn, SockaddrIn6, SockaddrStorage,
    recvmsg, sendmsg, setsockopt, sockopt,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// The local address a datagram was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Destination {
    V4(Ipv4Addr),
    /// The address (IPv4-mapped for IPv4 clients of a dual-stack socket) and the
    /// interface it came in on (needed for link-local addresses).
    V6(Ipv6Addr, u32),
}

/// Whether replies on a socket bound to `local` need [`Destination`]s: when it is bound
/// to an unspecified address.
pub(crate) fn needed(local: SocketAddr) -> bool {
    local.ip().is_unspecified()
}

/// Asks the kernel for each datagram's destination address on `socket`.
pub(crate) fn enable(socket: &UdpSocket) -> io::Result<()> {
    match socket.local_addr()? {
        SocketAddr::V4(_) => setsockopt(socket, sockopt::Ipv4PacketInfo, &true)?,
        SocketAddr::V6(_) => setsockopt(socket, sockopt::Ipv6RecvPacketInfo, &true)?,
    }
    Ok(())
}

/// Room for one control message of either family.
pub(crate) fn control_buffer() -> Vec<u8> {
    nix::cmsg_space!(libc::in_pktinfo, libc::in6_pktinfo)
}

/// Receives one datagram into `buf`: its length, sender and destination (`None` when
/// the kernel sent none).
pub(crate) async fn recv(
    socket: &UdpSocket,
    buf: &mut [u8],
    control: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<Destination>)> {
    socket
        .async_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(buf)];
            let message = recvmsg::<SockaddrStorage>(
                socket.as_raw_fd(),
                &mut iov,
                Some(control),
                MsgFlags::empty(),
            )?;
            let peer = message
                .address
                .as_ref()
                .and_then(socket_addr)
                .ok_or_else(|| io::Error::other("datagram without a source address"))?;
            let destination = message
                .cmsgs()
                .ok()
                .into_iter()
                .flatten()
                .find_map(destination);
            Ok((message.bytes, peer, destination))
        })
        .await
}

/// Sends `data` to `peer` from `from`.
pub(crate) async fn send(
    socket: &UdpSocket,
    data: &[u8],
    peer: SocketAddr,
    from: Destination,
) -> io::Result<usize> {
    socket
        .async_io(Interest::WRITABLE, || {
            let iov = [IoSlice::new(data)];
            let sent = match (peer, from) {
                (SocketAddr::V4(peer), Destination::V4(source)) => {
                    let info = in_pktinfo(source);
                    sendmsg(
                        socket.as_raw_fd(),
                        &iov,
                        &[ControlMessage::Ipv4PacketInfo(&info)],
                        MsgFlags::empty(),
                        Some(&SockaddrIn::from(peer)),
                    )
                }
                (SocketAddr::V6(peer), Destination::V6(source, interface)) => {
                    let info = in6_pktinfo(source, interface);
                    sendmsg(
                        socket.as_raw_fd(),
                        &iov,
                        &[ControlMessage::Ipv6PacketInfo(&info)],
                        MsgFlags::empty(),
                        Some(&SockaddrIn6::from(peer)),
                    )
                }
                // A family mismatch does not happen on one socket; send as `send_to`.
                (SocketAddr::V4(peer), _) => sendmsg(
                    socket.as_raw_fd(),
                    &iov,
                    &[],
                    MsgFlags::empty(),
                    Some(&SockaddrIn::from(peer)),
                ),
                (SocketAddr::V6(peer), _) => sendmsg(
                    socket.as_raw_fd(),
                    &iov,
                    &[],
                    MsgFlags::empty(),
                    Some(&SockaddrIn6::from(peer)),
                ),
            };
            Ok(sent?)
        })
        .await
}

fn socket_addr(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    address
        .as_sockaddr_in6()
        .map(|v6| SocketAddr::V6(SocketAddrV6::from(*v6)))
}

/// The destination carried by a received control message, if it is packet info.
fn destination(message: ControlMessageOwned) -> Option<Destination> {
    match message {
        ControlMessageOwned::Ipv4PacketInfo(info) => Some(Destination::V4(Ipv4Addr::from(
            info.ipi_addr.s_addr.to_ne_bytes(),
        ))),
        ControlMessageOwned::Ipv6PacketInfo(info) => Some(Destination::V6(
            Ipv6Addr::from(info.ipi6_addr.s6_addr),
            info.ipi6_ifindex,
        )),
        _ => None,
    }
}

/// Packet info for a reply from `source` (`ipi_spec_dst`), any interface.
fn in_pktinfo(source: Ipv4Addr) -> libc::in_pktinfo {
    libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: libc::in_addr {
            // In network byte order: the octets as they lie in memory.
            s_addr: u32::from_ne_bytes(source.octets()),
        },
        ipi_addr: libc::in_addr { s_addr: 0 },
    }
}

/// Packet info for a reply from `source` out of `interface`.
fn in6_pktinfo(source: Ipv6Addr, interface: u32) -> libc::in6_pktinfo {
    libc::in6_pktinfo {
        ipi6_addr: libc::in6_addr {
            s6_addr: source.octets(),
        },
        ipi6_ifindex: interface,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wildcard_sockets_need_destinations() {
        assert!(needed("0.0.0.0:53".parse().unwrap()));
        assert!(needed("[::]:53".parse().unwrap()));
        assert!(!needed("127.0.0.2:53".parse().unwrap()));
        assert!(!needed("[2001:db8::53]:53".parse().unwrap()));
    }

    #[test]
    fn packet_info_round_trips_addresses_in_network_byte_order() {
        let source: Ipv4Addr = "127.0.0.2".parse().unwrap();
        let info = in_pktinfo(source);
        assert_eq!(info.ipi_spec_dst.s_addr.to_ne_bytes(), [127, 0, 0, 2]);
        let received = libc::in_pktinfo {
            ipi_ifindex: 1,
            ipi_spec_dst: info.ipi_spec_dst,
            ipi_addr: info.ipi_spec_dst,
        };
        assert_eq!(
            destination(ControlMessageOwned::Ipv4PacketInfo(received)),
            Some(Destination::V4(source))
        );

        let source: Ipv6Addr = "::ffff:127.0.0.3".parse().unwrap();
        let info = in6_pktinfo(source, 7);
        assert_eq!(
            destination(ControlMessageOwned::Ipv6PacketInfo(info)),
            Some(Destination::V6(source, 7))
        );
    }
}
