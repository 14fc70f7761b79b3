//! DNS queries on the wire for the tests and benchmarks that talk to a DNS server over
//! UDP or TCP without a resolver: [`Query`] encodes one question, with or without an OPT
//! record ([`Edns`]) and an EDNS Client Subnet (RFC 7871). And `dig` for the tests that
//! ask as an operator would: [`dig`] (its output) and [`dig_short`] (the answers).
//!
//! Parsing answers stays with each user: they read different things of a response.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

/// Type A.
pub const TYPE_A: u16 = 1;
/// Type SOA.
pub const TYPE_SOA: u16 = 6;
const TYPE_OPT: u16 = 41;
const OPTION_ECS: u16 = 8;
/// The UDP payload size an OPT record advertises.
const PAYLOAD: u16 = 1232;

/// The additional section of a [`Query`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edns {
    /// No OPT record.
    None,
    /// An OPT record (payload 1232) with no options.
    Opt,
    /// An OPT record (payload 1232) carrying an EDNS Client Subnet option for this
    /// address's /24 (source prefix 24, scope 0, three address bytes).
    Ecs(Ipv4Addr),
}

impl From<Option<Ipv4Addr>> for Edns {
    /// `Some(subnet)`: [`Edns::Ecs`]; `None`: no OPT record.
    fn from(ecs: Option<Ipv4Addr>) -> Self {
        ecs.map_or(Edns::None, Edns::Ecs)
    }
}

/// One question (class IN) to encode: recursion not desired and no OPT record unless
/// asked for.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    id: u16,
    name: &'a str,
    qtype: u16,
    recursion_desired: bool,
    edns: Edns,
}

impl<'a> Query<'a> {
    /// A standard query `id` for `name` (a trailing dot or none) and `qtype`.
    pub fn new(id: u16, name: &'a str, qtype: u16) -> Self {
        Self {
            id,
            name,
            qtype,
            recursion_desired: false,
            edns: Edns::None,
        }
    }

    /// Sets the RD flag.
    #[must_use]
    pub fn recursion_desired(mut self) -> Self {
        self.recursion_desired = true;
        self
    }

    /// The additional section: an OPT record or none.
    #[must_use]
    pub fn edns(mut self, edns: impl Into<Edns>) -> Self {
        self.edns = edns.into();
        self
    }

    /// The message, as it goes in a UDP datagram (TCP adds a length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let mut packet = Vec::with_capacity(64);
        packet.extend_from_slice(&self.id.to_be_bytes());
        // Flags: a standard query, RD as asked.
        packet.extend_from_slice(&[u8::from(self.recursion_desired), 0]);
        packet.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
        packet.extend_from_slice(&[0, 0, 0, 0]); // ANCOUNT, NSCOUNT
        let additional = u16::from(self.edns != Edns::None);
        packet.extend_from_slice(&additional.to_be_bytes()); // ARCOUNT
        for label in self.name.trim_end_matches('.').split('.') {
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
        packet.push(0);
        packet.extend_from_slice(&self.qtype.to_be_bytes());
        packet.extend_from_slice(&1u16.to_be_bytes()); // IN
        if self.edns == Edns::None {
            return packet;
        }
        packet.push(0); // root
        packet.extend_from_slice(&TYPE_OPT.to_be_bytes());
        packet.extend_from_slice(&PAYLOAD.to_be_bytes());
        packet.extend_from_slice(&[0, 0, 0, 0]); // extended rcode, version 0, flags
        match self.edns {
            Edns::Ecs(subnet) => {
                let octets = subnet.octets();
                packet.extend_from_slice(&11u16.to_be_bytes()); // RDLENGTH
                packet.extend_from_slice(&OPTION_ECS.to_be_bytes());
                packet.extend_from_slice(&7u16.to_be_bytes()); // option length
                packet.extend_from_slice(&1u16.to_be_bytes()); // family IPv4
                packet.push(24); // source prefix
                packet.push(0); // scope prefix
                packet.extend_from_slice(&octets[..3]);
            }
            _ => packet.extend_from_slice(&0u16.to_be_bytes()), // RDLENGTH
        }
        packet
    }
}

/// Runs `dig @SERVER -p PORT +time=2 +tries=1 ARGS` and returns its standard output
/// (dig's answer, or its complaint when the server did not answer).
///
/// # Panics
///
/// When `dig` cannot be run (the Debian package dnsutils provides it; `scripts/test`
/// installs it).
pub fn dig(server: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), "+time=2", "+tries=1"])
        .args(args)
        .output();
    match output {
        Ok(output) => String::from_utf8_lossy(&output.stdout).into_owned(),
        Err(error) => panic!("dig is installed (scripts/test installs dnsutils): {error}"),
    }
}

/// [`dig`] with `+short`: the non-empty lines of its output, in dig's order.
///
/// # Panics
///
/// As [`dig`].
pub fn dig_short(server: SocketAddr, args: &[&str]) -> Vec<String> {
    dig(server, &[&["+short"], args].concat())
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::{Edns, Query, TYPE_A, TYPE_SOA};

    #[test]
    fn a_plain_query_has_one_question_and_no_additional_record() {
        let packet = Query::new(0x1234, "geo.test.", TYPE_A).encode();
        assert_eq!(
            packet,
            [
                0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'g', b'e', b'o', 4, b't', b'e', b's',
                b't', 0, 0, 1, 0, 1
            ]
        );
    }

    #[test]
    fn rd_and_an_empty_opt_record() {
        let packet = Query::new(7, "test", TYPE_SOA)
            .recursion_desired()
            .edns(Edns::Opt)
            .encode();
        assert_eq!(&packet[2..4], &[1, 0]);
        assert_eq!(&packet[10..12], &[0, 1]);
        assert_eq!(
            &packet[packet.len() - 11..],
            &[0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn an_ecs_option_carries_the_slash_24() {
        let packet = Query::new(1, "a.test", TYPE_A)
            .edns(Some(Ipv4Addr::new(10, 1, 2, 3)))
            .encode();
        assert_eq!(
            &packet[packet.len() - 22..],
            &[
                0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0, 0, 11, 0, 8, 0, 7, 0, 1, 24, 0, 10, 1, 2
            ]
        );
    }
}
