//! The speaker's domain types: what BGP is started with, peers, routes and what the
//! RIB holds. Pure values: no generated types, no I/O (the conversions are in
//! `convert`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use ipnet::IpNet;

/// BGP's global settings (GoBGP's `StartBgp`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Global {
    pub asn: u32,
    pub router_id: Ipv4Addr,
    /// TCP port BGP listens on: `-1` does not listen (the speaker only connects out),
    /// `0` is GoBGP's default, 179.
    pub listen_port: i32,
    /// Addresses BGP listens on; empty is GoBGP's default, `0.0.0.0` and `::`.
    pub listen_addresses: Vec<IpAddr>,
}

/// GoBGP's default listen port, used when `listen_port` is 0.
pub const BGP_PORT: i32 = 179;

impl Global {
    /// What differs between this configuration and `running` (a speaker's current
    /// one), as a short phrase per difference; empty when `running` is this one after
    /// GoBGP's defaults (port 0 → 179, no addresses → `0.0.0.0` and `::`).
    pub fn differences(&self, running: &Global) -> Vec<String> {
        let mut out = Vec::new();
        if self.asn != running.asn {
            out.push(format!("AS {} (wanted {})", running.asn, self.asn));
        }
        if self.router_id != running.router_id {
            out.push(format!(
                "router id {} (wanted {})",
                running.router_id, self.router_id
            ));
        }
        let (port, running_port) = (self.effective_port(), running.effective_port());
        if port != running_port {
            out.push(format!("listen port {running_port} (wanted {port})"));
        }
        let (mut addresses, mut running_addresses) =
            (self.effective_addresses(), running.effective_addresses());
        addresses.sort();
        running_addresses.sort();
        // Addresses only matter when BGP listens.
        if port > 0 && addresses != running_addresses {
            out.push(format!(
                "listen addresses {} (wanted {})",
                join(&running_addresses),
                join(&addresses)
            ));
        }
        out
    }

    fn effective_port(&self) -> i32 {
        if self.listen_port == 0 {
            BGP_PORT
        } else {
            self.listen_port
        }
    }

    fn effective_addresses(&self) -> Vec<IpAddr> {
        if self.listen_addresses.is_empty() {
            vec![IpAddr::from([0, 0, 0, 0]), IpAddr::from([0u16; 8])]
        } else {
            self.listen_addresses.clone()
        }
    }
}

fn join(addresses: &[IpAddr]) -> String {
    let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    list.join(",")
}

/// A BGP neighbor. The session carries IPv4 and IPv6 unicast whatever the address
/// family of `address`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub address: IpAddr,
    /// The neighbor's AS; the same as the speaker's makes an iBGP session.
    pub asn: u32,
    /// The neighbor's TCP port when it is not 179.
    pub port: Option<u16>,
    /// The address the session is opened from (and accepted on).
    pub local_address: Option<IpAddr>,
    /// Wait for the neighbor to connect, never connect out.
    pub passive: bool,
    pub route_reflector_client: bool,
    /// GoBGP's defaults when `None`: hold 90 s, keepalive 30 s, connect retry 120 s
    /// (GoBGP 3 waits 5-9 s before its first connect and never retries faster than
    /// every 5-10 s: a peer that connects to a listening speaker is faster).
    pub hold_time_seconds: Option<u32>,
    pub keepalive_seconds: Option<u32>,
    pub connect_retry_seconds: Option<u32>,
    /// How long the session stays idle (refusing the neighbor's connections too) after
    /// it went down; GoBGP's default when `None` is 30 s.
    pub idle_hold_after_reset_seconds: Option<u32>,
}

impl Peer {
    /// A peer with GoBGP's defaults for everything but its address and AS.
    pub fn new(address: IpAddr, asn: u32) -> Peer {
        Peer {
            address,
            asn,
            port: None,
            local_address: None,
            passive: false,
            route_reflector_client: false,
            hold_time_seconds: None,
            keepalive_seconds: None,
            connect_retry_seconds: None,
            idle_hold_after_reset_seconds: None,
        }
    }
}

/// A route this speaker originates (origin IGP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub prefix: IpNet,
    pub next_hop: IpAddr,
    pub communities: Vec<Community>,
}

impl Route {
    /// Why a peer would drop this route, if it would: GoBGP (like RFC 4271 §6.3 asks)
    /// treats an UPDATE whose next hop is a loopback or multicast address as a
    /// withdrawal, so such a route would sit in the local RIB and reach no one. The
    /// unspecified address is fine: it means "this session's local address".
    pub fn unannounceable(&self) -> Option<String> {
        let next_hop = self.next_hop;
        if next_hop.is_loopback() {
            Some(format!(
                "next hop {next_hop} is a loopback address, which BGP peers drop (RFC 4271 §6.3)"
            ))
        } else if match next_hop {
            // Classes D and E, as GoBGP checks (multicast, reserved, broadcast).
            IpAddr::V4(v4) => v4.octets()[0] >= 224,
            IpAddr::V6(v6) => v6.is_multicast(),
        } {
            Some(format!(
                "next hop {next_hop} is not a host address, which BGP peers drop"
            ))
        } else {
            None
        }
    }
}

/// A standard BGP community (RFC 1997), written `ASN:VALUE` (`65000:100`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Community(pub u32);

impl Community {
    pub fn new(asn: u16, value: u16) -> Community {
        Community((u32::from(asn) << 16) | u32::from(value))
    }
}

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.0 >> 16, self.0 & 0xffff)
    }
}

/// A community that does not read as `ASN:VALUE` with both parts in 0..=65535.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid BGP community {0:?}: want ASN:VALUE, both 0-65535 (e.g. 65000:100)")]
pub struct InvalidCommunity(pub String);

impl FromStr for Community {
    type Err = InvalidCommunity;

    fn from_str(s: &str) -> Result<Community, InvalidCommunity> {
        let invalid = || InvalidCommunity(s.to_string());
        let (asn, value) = s.split_once(':').ok_or_else(invalid)?;
        let asn = asn.parse::<u16>().map_err(|_| invalid())?;
        let value = value.parse::<u16>().map_err(|_| invalid())?;
        Ok(Community::new(asn, value))
    }
}

/// A neighbor and the state of its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerState {
    pub address: IpAddr,
    pub asn: u32,
    pub state: SessionState,
}

/// The BGP finite state machine's states (RFC 4271 §8.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionState {
    Unknown,
    Idle,
    Connect,
    Active,
    OpenSent,
    OpenConfirm,
    Established,
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SessionState::Unknown => "unknown",
            SessionState::Idle => "idle",
            SessionState::Connect => "connect",
            SessionState::Active => "active",
            SessionState::OpenSent => "opensent",
            SessionState::OpenConfirm => "openconfirm",
            SessionState::Established => "established",
        })
    }
}

/// One path of the global RIB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RibEntry {
    pub prefix: IpNet,
    pub next_hop: IpAddr,
    pub communities: Vec<Community>,
    /// The best path for its prefix.
    pub best: bool,
    /// The peer it was learned from; `None` for a path this speaker originates.
    pub neighbor: Option<IpAddr>,
    /// The AS path, segments flattened in order (empty for local and iBGP-learned
    /// paths).
    pub as_path: Vec<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn community_reads_and_writes_asn_colon_value() {
        let c: Community = "65000:100".parse().unwrap();
        assert_eq!(c, Community((65000 << 16) | 100));
        assert_eq!(c.to_string(), "65000:100");
        assert_eq!("0:0".parse::<Community>().unwrap(), Community(0));
        assert_eq!(
            "65535:65535".parse::<Community>().unwrap(),
            Community(u32::MAX)
        );
        for bad in [
            "65000", "65536:1", "1:65536", "a:b", ":1", "1:", "-1:2", "1:2:3",
        ] {
            let err = bad.parse::<Community>().unwrap_err();
            assert!(err.to_string().contains("ASN:VALUE"), "{bad}: {err}");
        }
    }

    #[test]
    fn loopback_and_multicast_next_hops_are_unannounceable() {
        let route = |next_hop: &str| Route {
            prefix: "192.0.2.10/32".parse().unwrap(),
            next_hop: next_hop.parse().unwrap(),
            communities: vec![],
        };
        for bad in [
            "127.0.0.2",
            "::1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "ff02::1",
        ] {
            assert!(route(bad).unannounceable().is_some(), "{bad}");
        }
        for good in ["192.0.2.1", "0.0.0.0", "2001:db8::1", "::", "10.0.0.1"] {
            assert_eq!(route(good).unannounceable(), None, "{good}");
        }
        assert!(
            route("127.0.0.2")
                .unannounceable()
                .unwrap()
                .contains("loopback")
        );
    }

    fn global(asn: u32, router_id: [u8; 4], port: i32, addresses: &[&str]) -> Global {
        Global {
            asn,
            router_id: Ipv4Addr::from(router_id),
            listen_port: port,
            listen_addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn differences_apply_gobgp_defaults_first() {
        let wanted = global(65000, [10, 0, 0, 1], 0, &[]);
        let running = global(65000, [10, 0, 0, 1], 179, &["::", "0.0.0.0"]);
        assert!(wanted.differences(&running).is_empty());
        // Not listening: the addresses do not matter.
        let wanted = global(65000, [10, 0, 0, 1], -1, &["127.0.0.2"]);
        let running = global(65000, [10, 0, 0, 1], -1, &["0.0.0.0", "::"]);
        assert!(wanted.differences(&running).is_empty());
    }

    #[test]
    fn differences_name_what_differs() {
        let wanted = global(65000, [10, 0, 0, 1], 1790, &["127.0.0.2"]);
        let running = global(65001, [10, 0, 0, 2], 179, &["127.0.0.3"]);
        assert_eq!(
            wanted.differences(&running),
            [
                "AS 65001 (wanted 65000)",
                "router id 10.0.0.2 (wanted 10.0.0.1)",
                "listen port 179 (wanted 1790)",
                "listen addresses 127.0.0.3 (wanted 127.0.0.2)",
            ]
        );
    }
}
