//! The one module that meets GoBGP's generated types: the domain types of `types`
//! to GoBGP API messages and back. Pure: no I/O.
//!
//! Path attributes and NLRI are `google.protobuf.Any` in GoBGP 3, packed as GoBGP's own
//! CLI packs them (`cmd/gobgp/global.go`, `pkg/apiutil`): NLRI `IPAddressPrefix`;
//! `OriginAttribute`; an IPv4 route with an IPv4 next hop carries `NextHopAttribute`,
//! any other `MpReachNLRIAttribute` with the NLRI inside; `CommunitiesAttribute` when
//! there are communities.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use prost::Message;
use prost_types::Any;

use crate::pb;
use crate::types::{Community, Global, Peer, PeerState, RibEntry, Route, SessionState};

/// Type URLs of the GoBGP messages packed in `Any` (package `apipb`).
pub mod type_url {
    pub const IP_ADDRESS_PREFIX: &str = "type.googleapis.com/apipb.IPAddressPrefix";
    pub const ORIGIN: &str = "type.googleapis.com/apipb.OriginAttribute";
    pub const NEXT_HOP: &str = "type.googleapis.com/apipb.NextHopAttribute";
    pub const MP_REACH_NLRI: &str = "type.googleapis.com/apipb.MpReachNLRIAttribute";
    pub const COMMUNITIES: &str = "type.googleapis.com/apipb.CommunitiesAttribute";
    pub const AS_PATH: &str = "type.googleapis.com/apipb.AsPathAttribute";
}

/// ORIGIN IGP (RFC 4271 §5.1.1): the route is this network's own.
const ORIGIN_IGP: u32 = 0;

/// A GoBGP message this crate cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("{field} {value:?} is not an IP address")]
    Address { field: &'static str, value: String },
    #[error("router id {0:?} is not an IPv4 address")]
    RouterId(String),
    #[error("prefix {prefix}/{len} is not an IP prefix")]
    Prefix { prefix: String, len: u32 },
    #[error("{what} is missing")]
    Missing { what: &'static str },
    #[error("NLRI of type {0:?} is not an IP prefix (IPAddressPrefix)")]
    NlriType(String),
    #[error("{type_url} does not decode: {reason}")]
    Decode { type_url: String, reason: String },
    #[error("path for {0} has no next hop")]
    NoNextHop(IpNet),
}

fn pack<M: Message>(type_url: &str, message: &M) -> Any {
    Any {
        type_url: type_url.to_string(),
        value: message.encode_to_vec(),
    }
}

fn unpack<M: Message + Default>(any: &Any) -> Result<M, ConvertError> {
    M::decode(any.value.as_slice()).map_err(|e| ConvertError::Decode {
        type_url: any.type_url.clone(),
        reason: e.to_string(),
    })
}

fn parse_ip(field: &'static str, value: &str) -> Result<IpAddr, ConvertError> {
    value.parse().map_err(|_| ConvertError::Address {
        field,
        value: value.to_string(),
    })
}

/// The `StartBgp` message for `global`.
pub fn global_to_pb(global: &Global) -> pb::Global {
    pb::Global {
        asn: global.asn,
        router_id: global.router_id.to_string(),
        listen_port: global.listen_port,
        listen_addresses: global
            .listen_addresses
            .iter()
            .map(ToString::to_string)
            .collect(),
        ..Default::default()
    }
}

/// The running configuration from `GetBgp`; `None` when BGP is not started (GoBGP
/// answers AS 0 then).
pub fn global_from_pb(global: &pb::Global) -> Result<Option<Global>, ConvertError> {
    if global.asn == 0 {
        return Ok(None);
    }
    let router_id: Ipv4Addr = global
        .router_id
        .parse()
        .map_err(|_| ConvertError::RouterId(global.router_id.clone()))?;
    let listen_addresses = global
        .listen_addresses
        .iter()
        .map(|a| parse_ip("listen address", a))
        .collect::<Result<_, _>>()?;
    Ok(Some(Global {
        asn: global.asn,
        router_id,
        listen_port: global.listen_port,
        listen_addresses,
    }))
}

fn family(afi: pb::family::Afi) -> pb::Family {
    pb::Family {
        afi: afi as i32,
        safi: pb::family::Safi::Unicast as i32,
    }
}

/// IPv4 or IPv6 unicast, after the address family of `address`.
pub fn unicast_family(address: IpAddr) -> pb::Family {
    match address {
        IpAddr::V4(_) => family(pb::family::Afi::Ip),
        IpAddr::V6(_) => family(pb::family::Afi::Ip6),
    }
}

/// The families this crate carries: IPv4 and IPv6 unicast.
pub fn unicast_families() -> [pb::Family; 2] {
    [family(pb::family::Afi::Ip), family(pb::family::Afi::Ip6)]
}

/// The `AddPeer` message for `peer`: IPv4 and IPv6 unicast on one session; `None`
/// fields keep GoBGP's defaults.
pub fn peer_to_pb(peer: &Peer) -> pb::Peer {
    let seconds = |v: Option<u32>| u64::from(v.unwrap_or(0));
    pb::Peer {
        conf: Some(pb::PeerConf {
            neighbor_address: peer.address.to_string(),
            peer_asn: peer.asn,
            ..Default::default()
        }),
        transport: Some(pb::Transport {
            local_address: peer
                .local_address
                .map(|a| a.to_string())
                .unwrap_or_default(),
            remote_port: peer.port.map(u32::from).unwrap_or(0),
            passive_mode: peer.passive,
            ..Default::default()
        }),
        route_reflector: Some(pb::RouteReflector {
            route_reflector_client: peer.route_reflector_client,
            ..Default::default()
        }),
        timers: Some(pb::Timers {
            config: Some(pb::TimersConfig {
                connect_retry: seconds(peer.connect_retry_seconds),
                hold_time: seconds(peer.hold_time_seconds),
                keepalive_interval: seconds(peer.keepalive_seconds),
                idle_hold_time_after_reset: seconds(peer.idle_hold_after_reset_seconds),
                ..Default::default()
            }),
            state: None,
        }),
        afi_safis: unicast_families()
            .into_iter()
            .map(|family| pb::AfiSafi {
                config: Some(pb::AfiSafiConfig {
                    family: Some(family),
                    enabled: true,
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// A neighbor from `ListPeer`.
pub fn peer_state_from_pb(peer: &pb::Peer) -> Result<PeerState, ConvertError> {
    let conf = peer.conf.as_ref();
    let state = peer.state.as_ref();
    let address = match state.map(|s| s.neighbor_address.as_str()) {
        Some(a) if !a.is_empty() => a,
        _ => conf
            .map(|c| c.neighbor_address.as_str())
            .unwrap_or_default(),
    };
    let address = parse_ip("neighbor address", address)?;
    let asn = match state.map(|s| s.peer_asn) {
        Some(asn) if asn != 0 => asn,
        _ => conf.map(|c| c.peer_asn).unwrap_or(0),
    };
    let session = state.map(|s| s.session_state()).unwrap_or_default();
    Ok(PeerState {
        address,
        asn,
        state: session_state(session),
    })
}

fn session_state(state: pb::peer_state::SessionState) -> SessionState {
    use pb::peer_state::SessionState as S;
    match state {
        S::Unknown => SessionState::Unknown,
        S::Idle => SessionState::Idle,
        S::Connect => SessionState::Connect,
        S::Active => SessionState::Active,
        S::Opensent => SessionState::OpenSent,
        S::Openconfirm => SessionState::OpenConfirm,
        S::Established => SessionState::Established,
    }
}

fn nlri(prefix: IpNet) -> Any {
    let prefix = prefix.trunc();
    pack(
        type_url::IP_ADDRESS_PREFIX,
        &pb::IpAddressPrefix {
            prefix_len: u32::from(prefix.prefix_len()),
            prefix: prefix.network().to_string(),
        },
    )
}

/// The path `AddPath` announces and `DeletePath` withdraws for `route` (host bits of
/// the prefix are cleared).
pub fn route_to_path(route: &Route) -> pb::Path {
    let family = unicast_family(route.prefix.addr());
    let mut pattrs = vec![pack(
        type_url::ORIGIN,
        &pb::OriginAttribute { origin: ORIGIN_IGP },
    )];
    match (route.prefix, route.next_hop) {
        (IpNet::V4(_), IpAddr::V4(next_hop)) => pattrs.push(pack(
            type_url::NEXT_HOP,
            &pb::NextHopAttribute {
                next_hop: next_hop.to_string(),
            },
        )),
        (prefix, next_hop) => pattrs.push(pack(
            type_url::MP_REACH_NLRI,
            &pb::MpReachNlriAttribute {
                family: Some(family),
                next_hops: vec![next_hop.to_string()],
                nlris: vec![nlri(prefix)],
            },
        )),
    }
    if !route.communities.is_empty() {
        pattrs.push(pack(
            type_url::COMMUNITIES,
            &pb::CommunitiesAttribute {
                communities: route.communities.iter().map(|c| c.0).collect(),
            },
        ));
    }
    pb::Path {
        nlri: Some(nlri(route.prefix)),
        pattrs,
        family: Some(family),
        ..Default::default()
    }
}

fn prefix_from_nlri(any: &Any) -> Result<IpNet, ConvertError> {
    if any.type_url != type_url::IP_ADDRESS_PREFIX {
        return Err(ConvertError::NlriType(any.type_url.clone()));
    }
    let p: pb::IpAddressPrefix = unpack(any)?;
    let invalid = || ConvertError::Prefix {
        prefix: p.prefix.clone(),
        len: p.prefix_len,
    };
    let address: IpAddr = p.prefix.parse().map_err(|_| invalid())?;
    let len = u8::try_from(p.prefix_len).map_err(|_| invalid())?;
    IpNet::new(address, len).map_err(|_| invalid())
}

/// The paths of one `ListPath` destination (withdrawn paths left out).
pub fn rib_entries(destination: &pb::Destination) -> Result<Vec<RibEntry>, ConvertError> {
    destination
        .paths
        .iter()
        .filter(|p| !p.is_withdraw)
        .map(rib_entry)
        .collect()
}

fn rib_entry(path: &pb::Path) -> Result<RibEntry, ConvertError> {
    let prefix = prefix_from_nlri(
        path.nlri
            .as_ref()
            .ok_or(ConvertError::Missing { what: "NLRI" })?,
    )?;
    let mut next_hop = None;
    let mut communities = Vec::new();
    let mut as_path = Vec::new();
    for attr in &path.pattrs {
        match attr.type_url.as_str() {
            type_url::NEXT_HOP => {
                let a: pb::NextHopAttribute = unpack(attr)?;
                next_hop = Some(parse_ip("next hop", &a.next_hop)?);
            }
            type_url::MP_REACH_NLRI => {
                let a: pb::MpReachNlriAttribute = unpack(attr)?;
                // The global next hop first; a link-local one may follow (RFC 2545).
                if let Some(first) = a.next_hops.first() {
                    next_hop = Some(parse_ip("next hop", first)?);
                }
            }
            type_url::COMMUNITIES => {
                let a: pb::CommunitiesAttribute = unpack(attr)?;
                communities = a.communities.into_iter().map(Community).collect();
            }
            type_url::AS_PATH => {
                let a: pb::AsPathAttribute = unpack(attr)?;
                as_path = a.segments.into_iter().flat_map(|s| s.numbers).collect();
            }
            _ => {}
        }
    }
    let next_hop = next_hop.ok_or(ConvertError::NoNextHop(prefix))?;
    // Local paths have no neighbor: GoBGP writes "<nil>" (Go's nil net.IP) or nothing.
    let neighbor = path.neighbor_ip.parse().ok();
    Ok(RibEntry {
        prefix,
        next_hop,
        communities,
        best: path.best,
        neighbor,
        as_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(prefix: &str, next_hop: &str, communities: &[&str]) -> Route {
        Route {
            prefix: prefix.parse().unwrap(),
            next_hop: next_hop.parse().unwrap(),
            communities: communities.iter().map(|c| c.parse().unwrap()).collect(),
        }
    }

    fn urls(path: &pb::Path) -> Vec<&str> {
        path.pattrs.iter().map(|a| a.type_url.as_str()).collect()
    }

    #[test]
    fn ipv4_route_with_ipv4_next_hop_uses_next_hop_attribute() {
        let path = route_to_path(&route("192.0.2.10/32", "10.0.0.1", &["65000:100"]));
        assert_eq!(
            path.family,
            Some(unicast_family("192.0.2.10".parse().unwrap()))
        );
        assert_eq!(
            urls(&path),
            [type_url::ORIGIN, type_url::NEXT_HOP, type_url::COMMUNITIES]
        );
        let nlri = path.nlri.as_ref().unwrap();
        assert_eq!(nlri.type_url, "type.googleapis.com/apipb.IPAddressPrefix");
        let p: pb::IpAddressPrefix = unpack(nlri).unwrap();
        assert_eq!((p.prefix.as_str(), p.prefix_len), ("192.0.2.10", 32));
        let origin: pb::OriginAttribute = unpack(&path.pattrs[0]).unwrap();
        assert_eq!(origin.origin, 0);
        let nh: pb::NextHopAttribute = unpack(&path.pattrs[1]).unwrap();
        assert_eq!(nh.next_hop, "10.0.0.1");
        let c: pb::CommunitiesAttribute = unpack(&path.pattrs[2]).unwrap();
        assert_eq!(c.communities, [(65000 << 16) | 100]);
    }

    #[test]
    fn ipv6_route_uses_mp_reach_with_the_nlri_inside() {
        let path = route_to_path(&route("2001:db8::10/128", "2001:db8::1", &[]));
        assert_eq!(urls(&path), [type_url::ORIGIN, type_url::MP_REACH_NLRI]);
        let mp: pb::MpReachNlriAttribute = unpack(&path.pattrs[1]).unwrap();
        assert_eq!(mp.family, Some(family(pb::family::Afi::Ip6)));
        assert_eq!(mp.next_hops, ["2001:db8::1"]);
        assert_eq!(mp.nlris, [path.nlri.clone().unwrap()]);
        // An IPv4 prefix with an IPv6 next hop (RFC 8950) goes in MP_REACH too.
        let path = route_to_path(&route("192.0.2.0/24", "2001:db8::1", &[]));
        assert_eq!(urls(&path), [type_url::ORIGIN, type_url::MP_REACH_NLRI]);
    }

    #[test]
    fn host_bits_are_cleared() {
        let path = route_to_path(&route("192.0.2.77/24", "10.0.0.1", &[]));
        let p: pb::IpAddressPrefix = unpack(path.nlri.as_ref().unwrap()).unwrap();
        assert_eq!((p.prefix.as_str(), p.prefix_len), ("192.0.2.0", 24));
    }

    #[test]
    fn a_path_reads_back_as_a_rib_entry() {
        for r in [
            route("192.0.2.10/32", "10.0.0.1", &["65000:100", "65000:200"]),
            route("2001:db8::10/128", "2001:db8::1", &["65000:1"]),
        ] {
            let mut path = route_to_path(&r);
            path.best = true;
            path.neighbor_ip = "127.0.0.2".to_string();
            path.pattrs.push(pack(
                type_url::AS_PATH,
                &pb::AsPathAttribute {
                    segments: vec![pb::AsSegment {
                        r#type: 2,
                        numbers: vec![65001, 65002],
                    }],
                },
            ));
            let destination = pb::Destination {
                prefix: r.prefix.to_string(),
                paths: vec![path],
            };
            let entries = rib_entries(&destination).unwrap();
            assert_eq!(
                entries,
                [RibEntry {
                    prefix: r.prefix,
                    next_hop: r.next_hop,
                    communities: r.communities.clone(),
                    best: true,
                    neighbor: Some("127.0.0.2".parse().unwrap()),
                    as_path: vec![65001, 65002],
                }]
            );
        }
    }

    #[test]
    fn local_paths_have_no_neighbor_and_withdrawn_paths_are_left_out() {
        let mut local = route_to_path(&route("192.0.2.10/32", "10.0.0.1", &[]));
        local.neighbor_ip = "<nil>".to_string();
        let mut withdrawn = local.clone();
        withdrawn.is_withdraw = true;
        let destination = pb::Destination {
            prefix: String::new(),
            paths: vec![local, withdrawn],
        };
        let entries = rib_entries(&destination).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].neighbor, None);
    }

    #[test]
    fn unreadable_paths_are_errors() {
        let mut path = route_to_path(&route("192.0.2.10/32", "10.0.0.1", &[]));
        path.pattrs.retain(|a| a.type_url != type_url::NEXT_HOP);
        let destination = pb::Destination {
            prefix: String::new(),
            paths: vec![path.clone()],
        };
        assert_eq!(
            rib_entries(&destination).unwrap_err().to_string(),
            "path for 192.0.2.10/32 has no next hop"
        );
        path.nlri = Some(Any {
            type_url: "type.googleapis.com/apipb.FlowSpecNLRI".into(),
            value: vec![],
        });
        let destination = pb::Destination {
            prefix: String::new(),
            paths: vec![path],
        };
        assert!(matches!(
            rib_entries(&destination),
            Err(ConvertError::NlriType(_))
        ));
    }

    #[test]
    fn global_round_trips_and_as_zero_is_not_started() {
        let global = Global {
            asn: 65000,
            router_id: "10.0.0.1".parse().unwrap(),
            listen_port: -1,
            listen_addresses: vec!["127.0.0.2".parse().unwrap(), "::1".parse().unwrap()],
        };
        assert_eq!(
            global_from_pb(&global_to_pb(&global)).unwrap(),
            Some(global)
        );
        assert_eq!(global_from_pb(&pb::Global::default()).unwrap(), None);
        let bad = pb::Global {
            asn: 1,
            router_id: "::1".into(),
            ..Default::default()
        };
        assert_eq!(
            global_from_pb(&bad).unwrap_err(),
            ConvertError::RouterId("::1".into())
        );
    }

    #[test]
    fn peer_carries_both_unicast_families_and_its_transport() {
        let peer = Peer {
            port: Some(10179),
            local_address: Some("127.0.0.2".parse().unwrap()),
            passive: true,
            route_reflector_client: true,
            hold_time_seconds: Some(9),
            idle_hold_after_reset_seconds: Some(1),
            ..Peer::new("127.0.0.3".parse().unwrap(), 65000)
        };
        let pb = peer_to_pb(&peer);
        let conf = pb.conf.as_ref().unwrap();
        assert_eq!(
            (conf.neighbor_address.as_str(), conf.peer_asn),
            ("127.0.0.3", 65000)
        );
        let transport = pb.transport.as_ref().unwrap();
        assert_eq!(transport.local_address, "127.0.0.2");
        assert_eq!(transport.remote_port, 10179);
        assert!(transport.passive_mode);
        assert!(pb.route_reflector.as_ref().unwrap().route_reflector_client);
        let timers = pb.timers.as_ref().unwrap().config.as_ref().unwrap();
        assert_eq!(
            (
                timers.hold_time,
                timers.keepalive_interval,
                timers.connect_retry
            ),
            (9, 0, 0)
        );
        assert_eq!(timers.idle_hold_time_after_reset, 1);
        let families: Vec<_> = pb
            .afi_safis
            .iter()
            .map(|a| a.config.as_ref().unwrap().family.unwrap())
            .collect();
        assert_eq!(families, unicast_families());
    }

    #[test]
    fn peer_state_prefers_the_state_and_maps_the_session() {
        let pb = pb::Peer {
            conf: Some(pb::PeerConf {
                neighbor_address: "127.0.0.3".into(),
                peer_asn: 65000,
                ..Default::default()
            }),
            state: Some(pb::PeerState {
                session_state: pb::peer_state::SessionState::Established as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            peer_state_from_pb(&pb).unwrap(),
            PeerState {
                address: "127.0.0.3".parse().unwrap(),
                asn: 65000,
                state: SessionState::Established
            }
        );
    }
}
