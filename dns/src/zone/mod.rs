//! The zones the embedded server is authoritative for, and an immutable [`Snapshot`] of
//! everything it answers.
//!
//! Entry types: [`ZoneConfig`] (the `dns.zones` entries of the API server's config),
//! [`Snapshot`] (built by [`Snapshot::build`] from the routed ingresses, swapped into
//! the server atomically), [`Lookup`] (the semantic answer to one question) and
//! [`Problem`] (why an ingress's name is not, or not fully, served).
//!
//! # What a snapshot serves
//!
//! Per zone: SOA (serial = the snapshot's serial) and NS at the apex, the NS answer
//! with the addresses of the in-zone nameservers as glue; those nameserver names
//! answer A/AAAA (pre-encoded, the zone's TTL) and are claimed before any ingress. Per
//! [`RoutedIngress`], under its `dnsName` (the record table of the bare TCP/UDP ingress
//! blog):
//!
//! | cluster address          | name        | records                                     |
//! |--------------------------|-------------|---------------------------------------------|
//! | IP                       | `dnsName`   | A / AAAA                                    |
//! | host name                | `dnsName`   | CNAME                                       |
//! | IP                       | SRV service | SRV → `<cluster>.<dnsName>` (A / AAAA)      |
//! | host name                | SRV service | SRV → the host name                         |
//! | rule's own IP            | SRV service | SRV → `<cluster>.<transport>-<name>.<dnsName>` (A / AAAA) |
//! | rule's own host name     | SRV service | SRV → that host name                        |
//!
//! SRV services are `_<name>._<tcp|udp>.<dnsName>` (RFC 2782: priority 0, weight,
//! port, target); the per-cluster target names `<cluster>.<dnsName>` exist only when
//! the ingress has SRV services, hold all of that cluster's IPs (no steering), and are
//! returned as additional records with the SRV answer. A cluster that serves one rule
//! on addresses of its own ([`crate::SrvService::addresses`]: a UDP load balancer split
//! from the TCP one) gets a target name per rule, `<cluster>.<transport>-<name>.<dnsName>`
//! (e.g. `eu-west.udp-dns.shop.example.com`), holding that rule's IPs, so `_dns._udp`
//! never points at the TCP load balancer. A service some clusters cannot serve
//! ([`crate::SrvService::excluded`]) is routed among the others: its SRV answers have
//! renderings of their own (a *service view*), while the dnsName's A/AAAA answers keep
//! every cluster. Every record has the ingress's `traffic.ttl`.
//!
//! # Routing and pre-encoding
//!
//! Answers follow [`routing::decide`]. The strategies that do not depend on the client
//! (RoundRobin, Weighted, Failover, Anycast) get one decision, ECS scope prefix 0. For
//! location-dependent ones (Geo, Latency, Overflow) the answer depends on the client only
//! through its [`RouteKey`] ([`PointRouter`]), so renderings are kept per key, never per
//! client:
//!
//! - Geo and Latency: one rendering per eligible cluster, made when the snapshot is
//!   built (no lock on the query path);
//! - Overflow: a map from distance order to rendering, filled at build time and on
//!   first use, at most [`MAX_ORDER_RENDERINGS`] entries;
//! - the enumerable buckets of the [`Locator`] ([`Locator::buckets`]: table entries and
//!   the default, up to [`PRECOMPUTED_BUCKETS`]) are mapped to their rendering at build
//!   time; mmdb points (and buckets of larger tables) compute their key per query.
//!
//! Renderings with the same [`Answer`] share one `Arc`, so the memory of a snapshot is
//! bounded by its names and clusters, never by the number of distinct clients.
//!
//! Every (name, type A/AAAA/SRV, decision) has its complete response pre-encoded (header,
//! question, answer, authority and additional sections, names compressed); the server
//! only patches the ID, flags, counts and letter case and appends an OPT record. Per
//! query:
//!
//! - [`Answer::All`]: the rotations of the record set are pre-encoded (at most
//!   [`MAX_ROTATIONS`]) and picked round robin (an atomic counter);
//! - [`Answer::Weighted`]: one response per cluster, picked at random by weight (for
//!   SRV, one response with every cluster and RFC 2782 weights instead, so that the
//!   client does the weighting);
//! - [`Answer::Addresses`] (Anycast): fixed.
//!
//! # Rebuilding per changed name
//!
//! [`Snapshot::rebuild`] builds the next snapshot from the one being served: a name
//! whose [`RoutedIngress`], zone and taken names are unchanged keeps its encoded answers
//! (shared, not copied), so a change costs in proportion to the names it touches. The
//! only snapshot-wide value inside encoded answers, the SOA serial of negative answers,
//! is written by the server per query (`Encoded::serial_at`), so reused answers never
//! carry an old serial.
//!
//! # Host names and IPs
//!
//! When the clusters of an answer report both IPs and load balancer host names, the
//! IPs win: clusters with only host names are left out of that answer (a name cannot
//! hold a CNAME and A records together, and address records save clients a lookup).
//! Only when no chosen cluster has an IP is the answer a CNAME, to one host name per
//! response (a cluster's first), rotated or weighted like addresses. A name at a zone
//! apex cannot be a CNAME (it holds SOA and NS): such answers become NODATA and the
//! ingress gets a [`Problem`].
//!
//! # Negative answers
//!
//! A name that exists without the asked type: NODATA (NOERROR, SOA in authority, TTL =
//! min(SOA TTL, SOA minimum), RFC 2308). A name in a zone that does not exist (not even
//! as an empty non-terminal, RFC 8020): NXDOMAIN. A name outside every zone: REFUSED,
//! not authoritative.
//!
//! What does not belong here: sockets and the query wire format (see
//! [`crate::server`]), routing decisions themselves (see [`crate::routing`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use fedingress_api::ingress::{DnsRecordStatus, RecordType as ApiRecordType, StrategyType};
use hickory_proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, HINFO, NS, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use crate::location::{Bucket, Located, Locator};
use crate::routing::{self, Answer, ClientInfo, ClusterOrder, Decision, PointRouter, RouteKey};
use crate::{ClusterView, RoutedIngress};

/// Most rotations pre-encoded for a round-robin answer: beyond that, larger record
/// sets rotate through evenly spaced starting points.
pub const MAX_ROTATIONS: usize = 16;

/// Most renderings an Overflow ingress keeps for client orders found at query time
/// (see [`RouteKey::Order`]); beyond it, answers for new orders are rendered per query
/// and not kept. Orders of 6 or fewer eligible clusters (720) always fit.
pub const MAX_ORDER_RENDERINGS: usize = 1024;

/// Most enumerable buckets (location table entries and RTT combinations, plus the
/// default) whose rendering is looked up per ingress in a precomputed array; with more
/// buckets, every query computes its [`RouteKey`] instead (a few distance
/// computations), so that memory does not grow with table size × names.
pub const PRECOMPUTED_BUCKETS: usize = 1024;

/// Longest domain name on the wire, root label included.
const MAX_WIRE_NAME: usize = 255;

// ---------------------------------------------------------------------------------------
// Config

/// One zone served by the embedded DNS server (an entry of `dns.zones` in the API
/// server's config).
///
/// ```yaml
/// name: fedingress.test
/// nameservers:
/// - {name: ns1.fedingress.test, addresses: [192.0.2.53, "2001:db8::53"]}
/// - ns.other-provider.example
/// soa: {rname: hostmaster.fedingress.test, minimum: 30}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZoneConfig {
    /// The zone apex, e.g. `fedingress.test` (a trailing dot is accepted).
    pub name: String,
    /// The zone's nameservers (NS records at the apex); at least one.
    pub nameservers: Vec<NameserverConfig>,
    /// SOA fields; every one has a default.
    #[serde(default)]
    pub soa: SoaConfig,
    /// TTL of the SOA and NS records, in seconds. Default 3600.
    #[serde(default = "default_zone_ttl")]
    pub ttl: u32,
}

/// One nameserver of a zone: a name (`ns1.fedingress.test`) or a name with addresses
/// (`{name: ns1.fedingress.test, addresses: [127.0.0.1, "::1"]}`).
///
/// A nameserver at or under the zone apex (*in-zone*) must have addresses: the server
/// answers A/AAAA for its name and adds them as glue to NS answers, so that the
/// delegation is not lame. When none are given, [`default_nameserver_addresses`] gives
/// it the DNS server's listen IP if that is a specific address. A nameserver outside the
/// zone is resolved elsewhere: it takes no addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameserverConfig {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

impl From<&str> for NameserverConfig {
    fn from(name: &str) -> Self {
        NameserverConfig {
            name: name.to_owned(),
            addresses: Vec::new(),
        }
    }
}

impl From<String> for NameserverConfig {
    fn from(name: String) -> Self {
        NameserverConfig {
            name,
            addresses: Vec::new(),
        }
    }
}

/// The map form of [`NameserverConfig`].
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NameserverMap {
    name: String,
    #[serde(default)]
    addresses: Vec<IpAddr>,
}

impl Serialize for NameserverConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.addresses.is_empty() {
            serializer.serialize_str(&self.name)
        } else {
            NameserverMap {
                name: self.name.clone(),
                addresses: self.addresses.clone(),
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for NameserverConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NameserverConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a nameserver name or {name, addresses}")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(NameserverConfig::from(name))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let map =
                    NameserverMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(NameserverConfig {
                    name: map.name,
                    addresses: map.addresses,
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The SOA record's fields (RFC 1035 §3.3.13).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SoaConfig {
    /// Primary nameserver. Default: the first of `nameservers`.
    pub mname: Option<String>,
    /// Mailbox of the person responsible, as a name (`hostmaster.example.com`) or an
    /// address (`hostmaster@example.com`). Default: `hostmaster.<zone>`.
    pub rname: Option<String>,
    /// Seconds. Default 3600.
    pub refresh: u32,
    /// Seconds. Default 600.
    pub retry: u32,
    /// Seconds. Default 604800 (a week).
    pub expire: u32,
    /// Negative caching TTL in seconds (RFC 2308). Default 30.
    pub minimum: u32,
}

impl Default for SoaConfig {
    fn default() -> Self {
        SoaConfig {
            mname: None,
            rname: None,
            refresh: 3600,
            retry: 600,
            expire: 604_800,
            minimum: 30,
        }
    }
}

fn default_zone_ttl() -> u32 {
    3600
}

/// A zone config that cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneConfigError {
    /// A name field is not a valid domain name.
    #[error("zone {zone}: {field} {value:?} is not a valid domain name: {reason}")]
    InvalidName {
        zone: String,
        field: &'static str,
        value: String,
        reason: String,
    },
    /// `nameservers` is empty.
    #[error("zone {zone}: at least one nameserver is required")]
    NoNameservers { zone: String },
    /// A SOA timer beyond 2^31 - 1 seconds.
    #[error("zone {zone}: soa.{field} must be at most 2147483647")]
    TimerOutOfRange { zone: String, field: &'static str },
    /// The same zone twice.
    #[error("zone {zone} is listed twice")]
    Duplicate { zone: String },
    /// An in-zone nameserver without addresses and no specific listen IP to default to.
    #[error(
        "zones[{zone_index}].nameservers[{index}]: {name} is inside zone {zone} and needs \
         addresses (its A/AAAA records and glue): give addresses, or listen on a specific IP \
         (not an unspecified one) for them to default to"
    )]
    NameserverWithoutAddresses {
        zone: String,
        /// Position in `dns.zones` (0 when one zone is validated alone).
        zone_index: usize,
        /// Position in the zone's `nameservers`.
        index: usize,
        name: String,
    },
    /// Addresses for a nameserver outside the zone (never served: not glue).
    #[error(
        "zones[{zone_index}].nameservers[{index}]: {name} is outside zone {zone}: its \
         addresses would never be served; remove them"
    )]
    AddressesOutsideZone {
        zone: String,
        zone_index: usize,
        index: usize,
        name: String,
    },
}

impl ZoneConfigError {
    /// The same error for the zone at `zone_index` of the list.
    fn at(mut self, position: usize) -> Self {
        if let ZoneConfigError::NameserverWithoutAddresses { zone_index, .. }
        | ZoneConfigError::AddressesOutsideZone { zone_index, .. } = &mut self
        {
            *zone_index = position;
        }
        self
    }

    /// Whether the message starts with the config path (`zones[i]…`) rather than the zone.
    pub fn names_field(&self) -> bool {
        matches!(
            self,
            ZoneConfigError::NameserverWithoutAddresses { .. }
                | ZoneConfigError::AddressesOutsideZone { .. }
        )
    }
}

impl ZoneConfig {
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// The first problem found (see [`ZoneConfigError`]).
    pub fn validate(&self) -> Result<(), ZoneConfigError> {
        self.resolve().map(|_| ())
    }

    /// The apex, lower case, without the trailing dot.
    pub fn apex(&self) -> String {
        normalize_text(&self.name)
    }

    fn resolve(&self) -> Result<ResolvedZone, ZoneConfigError> {
        let zone = self.apex();
        let invalid =
            |field: &'static str, value: &str, reason: String| ZoneConfigError::InvalidName {
                zone: zone.clone(),
                field,
                value: value.to_owned(),
                reason,
            };
        let origin =
            parse_name(&self.name).map_err(|reason| invalid("name", &self.name, reason))?;
        if self.nameservers.is_empty() {
            return Err(ZoneConfigError::NoNameservers { zone });
        }
        let origin_key = name_key(&origin);
        let mut nameservers = Vec::new();
        for (index, ns) in self.nameservers.iter().enumerate() {
            let name =
                parse_name(&ns.name).map_err(|reason| invalid("nameserver", &ns.name, reason))?;
            let in_zone = key_in_zone(&name_key(&name), &origin_key);
            if in_zone && ns.addresses.is_empty() {
                return Err(ZoneConfigError::NameserverWithoutAddresses {
                    zone,
                    zone_index: 0,
                    index,
                    name: display(&name),
                });
            }
            if !in_zone && !ns.addresses.is_empty() {
                return Err(ZoneConfigError::AddressesOutsideZone {
                    zone,
                    zone_index: 0,
                    index,
                    name: display(&name),
                });
            }
            nameservers.push((name, ns.addresses.clone()));
        }
        let mname = match &self.soa.mname {
            Some(mname) => {
                parse_name(mname).map_err(|reason| invalid("soa.mname", mname, reason))?
            }
            None => nameservers[0].0.clone(),
        };
        let rname = match &self.soa.rname {
            Some(rname) => {
                let text = match rname.split_once('@') {
                    Some((local, domain)) if !local.contains('.') => format!("{local}.{domain}"),
                    Some(_) => {
                        return Err(invalid(
                            "soa.rname",
                            rname,
                            "the mailbox's local part may not contain a dot".to_owned(),
                        ));
                    }
                    None => rname.clone(),
                };
                parse_name(&text).map_err(|reason| invalid("soa.rname", rname, reason))?
            }
            None => parse_name(&format!("hostmaster.{zone}"))
                .map_err(|reason| invalid("soa.rname", "hostmaster", reason))?,
        };
        let timer = |field: &'static str, value: u32| {
            i32::try_from(value).map_err(|_| ZoneConfigError::TimerOutOfRange {
                zone: zone.clone(),
                field,
            })
        };
        let soa = SOA::new(
            mname,
            rname,
            0,
            timer("refresh", self.soa.refresh)?,
            timer("retry", self.soa.retry)?,
            timer("expire", self.soa.expire)?,
            self.soa.minimum,
        );
        Ok(ResolvedZone {
            text: zone,
            origin,
            nameservers,
            soa,
            ttl: self.ttl,
            negative_ttl: self.ttl.min(self.soa.minimum),
        })
    }
}

/// Checks every zone and that no zone is listed twice.
///
/// # Errors
///
/// The first problem found.
pub fn validate_zones(zones: &[ZoneConfig]) -> Result<(), ZoneConfigError> {
    let mut seen = BTreeSet::new();
    for (i, zone) in zones.iter().enumerate() {
        zone.validate().map_err(|e| e.at(i))?;
        if !seen.insert(zone.apex()) {
            return Err(ZoneConfigError::Duplicate { zone: zone.apex() });
        }
    }
    Ok(())
}

/// Gives every in-zone nameserver without addresses the DNS server's listen IP, when
/// that is a specific address (not `0.0.0.0` or `::`); others are left for
/// [`validate_zones`] to report.
pub fn default_nameserver_addresses(zones: &mut [ZoneConfig], listen: Option<IpAddr>) {
    let Some(listen) = listen.filter(|ip| !ip.is_unspecified()) else {
        return;
    };
    for zone in zones {
        let Ok(origin) = parse_name(&zone.name) else {
            continue;
        };
        let origin_key = name_key(&origin);
        for ns in &mut zone.nameservers {
            let in_zone =
                parse_name(&ns.name).is_ok_and(|name| key_in_zone(&name_key(&name), &origin_key));
            if in_zone && ns.addresses.is_empty() {
                ns.addresses.push(listen);
            }
        }
    }
}

struct ResolvedZone {
    text: String,
    origin: Name,
    /// With their addresses (in-zone nameservers only).
    nameservers: Vec<(Name, Vec<IpAddr>)>,
    soa: SOA,
    ttl: u32,
    negative_ttl: u32,
}

// ---------------------------------------------------------------------------------------
// Names

/// Lower case, surrounding whitespace and one trailing dot removed.
fn normalize_text(text: &str) -> String {
    let text = text.trim();
    text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase()
}

/// A fully qualified, lower-case [`Name`] from presentation text; labels of letters,
/// digits, `-` and `_`, at most 63 octets each and 255 in all.
fn parse_name(text: &str) -> Result<Name, String> {
    let text = normalize_text(text);
    if text.is_empty() {
        return Err("empty name (the root zone cannot be served)".to_owned());
    }
    let mut wire_len = 1;
    for label in text.split('.') {
        if label.is_empty() {
            return Err("empty label".to_owned());
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is longer than 63 octets"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!("label {label:?} contains {c:?}"));
        }
        wire_len += label.len() + 1;
    }
    if wire_len > MAX_WIRE_NAME {
        return Err("name longer than 255 octets".to_owned());
    }
    Name::from_ascii(format!("{text}.")).map_err(|e| e.to_string())
}

/// The lower-case wire form of a name: the key of the name table.
pub(crate) fn name_key(name: &Name) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 2);
    for label in name.iter() {
        key.push(u8::try_from(label.len()).unwrap_or(63));
        key.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    key.push(0);
    key
}

/// Presentation text of a wire-format name (for logs).
pub(crate) fn wire_to_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 {
            break;
        }
        let label = wire.get(pos + 1..pos + 1 + usize::from(len)).unwrap_or(&[]);
        for &b in label {
            if b.is_ascii_graphic() && b != b'.' && b != b'\\' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("\\{b:03}"));
            }
        }
        out.push('.');
        pos += 1 + usize::from(len);
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

/// Whether `key` (a wire name) is `zone` or below it.
fn key_in_zone(key: &[u8], zone: &[u8]) -> bool {
    let mut pos = 0;
    loop {
        if key.get(pos..) == Some(zone) {
            return true;
        }
        match key.get(pos) {
            Some(&len) if len != 0 => pos += 1 + usize::from(len),
            _ => return false,
        }
    }
}

/// The parent of a wire name (`None` for the root).
fn parent_key(key: &[u8]) -> Option<&[u8]> {
    let len = *key.first()?;
    if len == 0 {
        return None;
    }
    key.get(1 + usize::from(len)..)
}

/// Presentation text without the trailing dot.
fn display(name: &Name) -> String {
    let text = name.to_ascii();
    text.strip_suffix('.').map(str::to_owned).unwrap_or(text)
}

// ---------------------------------------------------------------------------------------
// Problems

/// Why (part of) an ingress's DNS name is not served. The API server reports it as
/// `DNSReady=False`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// `namespace/name` of the FederatedIngress (empty for zone problems).
    pub ingress: String,
    /// The name concerned (the ingress's dnsName, or a zone).
    pub dns_name: String,
    /// For people, e.g. `dnsName shop.example.com is outside every configured zone`.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ingress.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.ingress, self.message)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Pre-encoded responses

/// A complete response, pre-encoded with ID 0 and the question in lower case; the
/// server patches the ID, flags, ARCOUNT and letter case and appends OPT.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub(crate) wire: Box<[u8]>,
    /// Length of the response without its additional section.
    pub(crate) answer_end: usize,
    pub(crate) additional_count: u16,
    /// RCODE (low 4 bits).
    pub(crate) rcode: u8,
    pub(crate) answers: Vec<Record>,
    pub(crate) authority: Vec<Record>,
    pub(crate) additional: Vec<Record>,
    /// Offset in `wire` of the SOA serial when the authority section ends with the
    /// zone's SOA (negative answers): the server writes the current serial there, so
    /// answers reused across snapshots ([`Snapshot::rebuild`]) never carry an old one.
    pub(crate) serial_at: Option<usize>,
}

impl Encoded {
    /// Encodes a response to (`qname`, `qtype`) with these sections.
    fn new(
        qname: &Name,
        qtype: RecordType,
        rcode: ResponseCode,
        answers: Vec<Record>,
        authority: Vec<Record>,
        additional: Vec<Record>,
    ) -> Self {
        let mut message = Message::response(0, OpCode::Query);
        message.metadata.authoritative = true;
        message.metadata.response_code = rcode;
        message.add_query(Query::query(qname.clone(), qtype));
        message.add_answers(answers.iter().cloned());
        message.add_authorities(authority.iter().cloned());
        let short = message.to_vec();
        message.add_additionals(additional.iter().cloned());
        let full = message.to_vec();
        match (short, full, u16::try_from(additional.len())) {
            (Ok(short), Ok(full), Ok(additional_count)) if full.len() <= usize::from(u16::MAX) => {
                // An SOA's RDATA ends with serial, refresh, retry, expire, minimum.
                let serial_at = authority
                    .last()
                    .filter(|r| r.record_type() == RecordType::SOA)
                    .and_then(|_| short.len().checked_sub(20));
                Encoded {
                    serial_at,
                    answer_end: short.len(),
                    wire: full.into_boxed_slice(),
                    additional_count,
                    rcode: rcode.low(),
                    answers,
                    authority,
                    additional,
                }
            }
            (short, full, _) => {
                warn!(
                    name = %qname,
                    qtype = %qtype,
                    error = ?short.err().or(full.err()),
                    "cannot encode response; answering SERVFAIL"
                );
                Encoded::servfail(qname, qtype)
            }
        }
    }

    /// SERVFAIL with the question only, encoded by hand (cannot fail).
    fn servfail(qname: &Name, qtype: RecordType) -> Self {
        let mut wire = vec![0, 0, 0x84, 0x02, 0, 1, 0, 0, 0, 0, 0, 0];
        wire.extend_from_slice(&name_key(qname));
        wire.extend_from_slice(&u16::from(qtype).to_be_bytes());
        wire.extend_from_slice(&1u16.to_be_bytes());
        Encoded {
            serial_at: None,
            answer_end: wire.len(),
            wire: wire.into_boxed_slice(),
            additional_count: 0,
            rcode: 2,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
        }
    }
}

/// The pre-encoded responses to one (name, type, decision), and how one is picked per
/// query.
#[derive(Debug)]
pub(crate) enum Prepared {
    Fixed(Box<Encoded>),
    /// Rotations of one record set, picked round robin.
    Rotate {
        options: Vec<Encoded>,
        next: AtomicUsize,
    },
    /// One response per cluster, picked at random by weight (`cumulative` is the
    /// running sum of the weights, parallel to `options`).
    Weighted {
        options: Vec<Encoded>,
        cumulative: Vec<f64>,
    },
}

impl Prepared {
    /// The response for this query.
    pub(crate) fn pick(&self) -> &Encoded {
        match self {
            Prepared::Fixed(encoded) => encoded,
            Prepared::Rotate { options, next } => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                &options[n % options.len()]
            }
            Prepared::Weighted {
                options,
                cumulative,
            } => {
                let total = cumulative.last().copied().unwrap_or(0.0);
                let x = rand::random::<f64>() * total;
                let index = cumulative.partition_point(|&c| c <= x);
                &options[index.min(options.len() - 1)]
            }
        }
    }

    /// Every possible response with its share of queries (`None` when all are served
    /// to everyone, i.e. rotations of one set).
    fn variants(&self) -> Vec<(&Encoded, Option<f64>)> {
        match self {
            Prepared::Fixed(encoded) => vec![(encoded.as_ref(), None)],
            Prepared::Rotate { options, .. } => {
                let first = options.first().map(|e| (e, None));
                if options.first().is_some_and(|e| {
                    e.answers
                        .first()
                        .is_some_and(|r| r.record_type() == RecordType::CNAME)
                }) {
                    // Rotating CNAMEs: each response has one target; all are served.
                    let share = 1.0 / options.len() as f64;
                    options.iter().map(|e| (e, Some(share))).collect()
                } else {
                    first.into_iter().collect()
                }
            }
            Prepared::Weighted {
                options,
                cumulative,
            } => {
                let total = cumulative.last().copied().unwrap_or(0.0);
                let mut previous = 0.0;
                options
                    .iter()
                    .zip(cumulative)
                    .map(|(e, &c)| {
                        let share = if total > 0.0 {
                            (c - previous) / total
                        } else {
                            0.0
                        };
                        previous = c;
                        (e, Some(share))
                    })
                    .collect()
            }
        }
    }
}

/// One response's records.
#[derive(Clone, Debug, Default)]
struct Section {
    answers: Vec<Record>,
    additional: Vec<Record>,
}

/// What to answer to one (name, type) under one decision, before encoding.
enum Plan {
    NoData,
    Fixed(Section),
    Rotate(Vec<Section>),
    Weighted(Vec<(Section, f64)>),
}

/// A rendering borrowed from the snapshot (no reference counting on the query path) or
/// shared from an Overflow ingress's map of orders.
enum RenderedRef<'a> {
    Borrowed(&'a Rendered),
    Shared(Arc<Rendered>),
}

impl std::ops::Deref for RenderedRef<'_> {
    type Target = Rendered;

    fn deref(&self) -> &Rendered {
        match self {
            RenderedRef::Borrowed(r) => r,
            RenderedRef::Shared(r) => r,
        }
    }
}

/// The encoded answers of one ingress under one decision.
#[derive(Debug)]
pub(crate) struct Rendered {
    answer: Answer,
    a: Prepared,
    aaaa: Prepared,
    /// Parallel to the ingress's SRV services.
    srv: Vec<Prepared>,
}

// ---------------------------------------------------------------------------------------
// Snapshot contents

#[derive(Debug)]
struct Zone {
    text: String,
    origin: Name,
    key: Vec<u8>,
    soa: Record,
    negative_soa: Record,
    ns: Vec<Record>,
    /// A/AAAA of the in-zone nameservers: the additional section of NS answers.
    glue: Vec<Record>,
    /// A/AAAA answers per in-zone nameserver ([`Owner::Nameserver`]).
    nameservers: Vec<Target>,
    ttl: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// The apex or an empty non-terminal: exists, holds nothing of its own.
    Empty,
    Ingress(usize),
    /// (ingress, SRV service)
    Srv(usize, usize),
    /// (ingress, target)
    Target(usize, usize),
    /// (zone, in-zone nameserver): its A/AAAA.
    Nameserver(usize, usize),
}

#[derive(Debug)]
struct Node {
    zone: usize,
    name: Name,
    owner: Owner,
    apex: bool,
}

#[derive(Debug)]
struct Target {
    a: Prepared,
    aaaa: Prepared,
}

/// The SRV answers of one service routed among the clusters that can serve it (the
/// ingress's clusters minus [`crate::SrvService::excluded`]).
#[derive(Debug)]
struct ServiceView {
    /// The ingress with only those clusters.
    routed: RoutedIngress,
    /// Renderings of this service's SRV answer only (`targets` is empty: target names
    /// belong to the ingress's own [`Answers`]).
    answers: Arc<Answers>,
}

/// What a lookup renders from: the ingress's own answers, or a service view's.
#[derive(Clone, Copy)]
struct View<'a> {
    routed: &'a RoutedIngress,
    answers: &'a Answers,
    /// A service view renders only this service.
    only_service: Option<usize>,
}

#[derive(Debug)]
struct IngressEntry {
    routed: RoutedIngress,
    name: Name,
    zone: usize,
    ttl: u32,
    location_dependent: bool,
    /// Whether answers may be a CNAME (not at a zone apex).
    cname_allowed: bool,
    /// Parallel to `routed.srv`; `None` where the name was taken by another ingress.
    srv_names: Vec<Option<Name>>,
    /// Target name per cluster name (clusters with IPs, not cordoned).
    target_names: BTreeMap<String, Name>,
    /// Parallel to `routed.srv`: target name per cluster that serves that rule on IPs of
    /// its own ([`crate::SrvService::addresses`]).
    rule_targets: Vec<BTreeMap<String, Name>>,
    /// The encoded answers: shared with the next snapshot when nothing they depend on
    /// changed ([`Snapshot::rebuild`]).
    answers: Arc<Answers>,
    /// Parallel to `routed.srv`: the service's own routing when some clusters cannot
    /// serve it; `None`: it follows `answers`. Shared like `answers`.
    services: Vec<Option<Arc<ServiceView>>>,
}

impl IngressEntry {
    fn view(&self) -> View<'_> {
        View {
            routed: &self.routed,
            answers: &self.answers,
            only_service: None,
        }
    }

    /// What SRV service `k` is answered from.
    fn service_view(&self, k: usize) -> View<'_> {
        match self.services.get(k) {
            Some(Some(service)) => View {
                routed: &service.routed,
                answers: &service.answers,
                only_service: Some(k),
            },
            _ => self.view(),
        }
    }
}

/// Everything encoded for one ingress.
#[derive(Debug)]
struct Answers {
    targets: Vec<Target>,
    /// Distinct renderings made at build time (one per distinct [`Answer`]; index 0
    /// is everyone's when the answer does not depend on the client).
    rendered: Vec<Arc<Rendered>>,
    /// Location-dependent only: `rendered` index of enumerable bucket `i`; empty when
    /// the locator has more than [`PRECOMPUTED_BUCKETS`] buckets (keys per query then).
    per_bucket: Vec<u32>,
    /// Location-dependent only: renderings per [`RouteKey`].
    keyed: Option<Keyed>,
}

/// The renderings of a location-dependent ingress per [`RouteKey`]. Memory depends on
/// the clusters only: one rendering per eligible cluster (Geo, Latency), at most
/// [`MAX_ORDER_RENDERINGS`] orders (Overflow), never on the number of clients.
#[derive(Debug)]
struct Keyed {
    router: PointRouter,
    /// `rendered` index for [`RouteKey::Same`] (no eligible cluster).
    same: Option<u32>,
    /// `rendered` index per [`RouteKey::Cluster`] (by sorted cluster index), made at
    /// build time for every eligible cluster: no lock on the query path.
    by_cluster: Vec<Option<u32>>,
    /// Overflow: renderings per order, filled at build time from the enumerable
    /// buckets and at query time for new orders (at most [`MAX_ORDER_RENDERINGS`]).
    orders: RwLock<HashMap<ClusterOrder, Arc<Rendered>>>,
}

/// The semantic answer to one question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    pub rcode: ResponseCode,
    /// False only for REFUSED (outside every zone).
    pub authoritative: bool,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    /// The ECS scope prefix length the answer holds for: the located prefix length for
    /// location-dependent answers, 0 otherwise.
    pub scope_prefix: u8,
}

impl Lookup {
    fn refused() -> Self {
        Lookup {
            rcode: ResponseCode::Refused,
            authoritative: false,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            scope_prefix: 0,
        }
    }

    fn from_encoded(encoded: &Encoded, scope_prefix: u8, serial: u32) -> Self {
        let authority = encoded
            .authority
            .iter()
            .map(|record| match &record.data {
                RData::SOA(soa) if soa.serial != serial => {
                    let mut soa = soa.clone();
                    soa.serial = serial;
                    Record::from_rdata(record.name.clone(), record.ttl, RData::SOA(soa))
                }
                _ => record.clone(),
            })
            .collect();
        Lookup {
            rcode: ResponseCode::from_low(encoded.rcode),
            authoritative: true,
            answers: encoded.answers.clone(),
            authority,
            additional: encoded.additional.clone(),
            scope_prefix,
        }
    }
}

/// Everything the DNS server answers, immutable once built (apart from the bounded map
/// of Overflow renderings per distance order). Share it as `Arc<Snapshot>`.
pub struct Snapshot {
    serial: u32,
    zones: Vec<Zone>,
    names: HashMap<Vec<u8>, Node>,
    ingresses: Vec<IngressEntry>,
    by_dns_name: HashMap<String, usize>,
    locator: Arc<Locator>,
    buckets: Vec<Located>,
    bucket_index: HashMap<Bucket, usize>,
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("serial", &self.serial)
            .field(
                "zones",
                &self.zones.iter().map(|z| &z.text).collect::<Vec<_>>(),
            )
            .field("names", &self.names.len())
            .field("ingresses", &self.ingresses.len())
            .field("buckets", &self.buckets.len())
            .finish()
    }
}

/// Whether a strategy's answer depends on where the client is.
pub fn is_location_dependent(strategy: StrategyType) -> bool {
    matches!(
        strategy,
        StrategyType::Geo | StrategyType::Latency | StrategyType::Overflow
    )
}

// ---------------------------------------------------------------------------------------
// Building

struct Builder<'a> {
    /// The snapshot this one replaces: unchanged names reuse its encoded answers.
    previous: Option<&'a Snapshot>,
    zones: Vec<Zone>,
    names: HashMap<Vec<u8>, Node>,
    problems: Vec<Problem>,
    locator: &'a Arc<Locator>,
    buckets: Vec<Located>,
}

impl Snapshot {
    /// Builds the snapshot for `zones` (invalid or duplicate zones are skipped with a
    /// [`Problem`]; validate the config first with [`validate_zones`]) and `ingresses`.
    ///
    /// # Assumptions
    ///
    /// `ingresses` are in priority order (oldest first): when two claim the same name,
    /// the first keeps it and the other gets a [`Problem`]. Each `dns_name` is lower
    /// case without a trailing dot (others are normalised).
    ///
    /// # Guarantees
    ///
    /// Never panics; every ingress that is not (fully) served has at least one
    /// [`Problem`].
    pub fn build(
        zones: &[ZoneConfig],
        serial: u32,
        ingresses: &[RoutedIngress],
        locator: Arc<Locator>,
    ) -> (Snapshot, Vec<Problem>) {
        Self::build_from(None, zones, serial, ingresses, locator)
    }

    /// [`Snapshot::build`] for the snapshot that replaces this one: the names whose
    /// inputs did not change (routed ingress, zone, names taken) keep their encoded
    /// answers, so a change costs in proportion to the names it touches.
    ///
    /// # Guarantees
    ///
    /// Answers the same as [`Snapshot::build`] with the same arguments would.
    pub fn rebuild(
        &self,
        zones: &[ZoneConfig],
        serial: u32,
        ingresses: &[RoutedIngress],
    ) -> (Snapshot, Vec<Problem>) {
        Self::build_from(Some(self), zones, serial, ingresses, self.locator.clone())
    }

    fn build_from(
        previous: Option<&Snapshot>,
        zones: &[ZoneConfig],
        serial: u32,
        ingresses: &[RoutedIngress],
        locator: Arc<Locator>,
    ) -> (Snapshot, Vec<Problem>) {
        let mut builder = Builder {
            previous,
            zones: Vec::new(),
            names: HashMap::new(),
            problems: Vec::new(),
            locator: &locator,
            buckets: locator.buckets(),
        };
        for config in zones {
            builder.add_zone(config, serial);
        }
        let mut entries = Vec::new();
        let mut by_dns_name = HashMap::new();
        for routed in ingresses {
            let index = entries.len();
            if let Some(entry) = builder.add_ingress(routed, index) {
                by_dns_name.insert(display(&entry.name), index);
                entries.push(entry);
            }
        }
        let bucket_index = builder
            .buckets
            .iter()
            .enumerate()
            .map(|(i, located)| (located.bucket, i))
            .collect();
        debug!(
            serial,
            zones = builder.zones.len(),
            names = builder.names.len(),
            ingresses = entries.len(),
            buckets = builder.buckets.len(),
            problems = builder.problems.len(),
            "built DNS snapshot"
        );
        let snapshot = Snapshot {
            serial,
            zones: builder.zones,
            names: builder.names,
            ingresses: entries,
            by_dns_name,
            locator: locator.clone(),
            buckets: builder.buckets,
            bucket_index,
        };
        (snapshot, builder.problems)
    }
}

impl Builder<'_> {
    fn add_zone(&mut self, config: &ZoneConfig, serial: u32) {
        let resolved = match config.resolve() {
            Ok(resolved) => resolved,
            Err(error) => {
                self.problems.push(Problem {
                    ingress: String::new(),
                    dns_name: config.apex(),
                    message: error.to_string(),
                });
                return;
            }
        };
        let key = name_key(&resolved.origin);
        if self.zones.iter().any(|z| z.key == key) {
            self.problems.push(Problem {
                ingress: String::new(),
                dns_name: resolved.text.clone(),
                message: format!("zone {} is listed twice", resolved.text),
            });
            return;
        }
        let mut soa = resolved.soa.clone();
        soa.serial = serial;
        let soa_record = Record::from_rdata(resolved.origin.clone(), resolved.ttl, RData::SOA(soa));
        let mut negative_soa = soa_record.clone();
        negative_soa.ttl = resolved.negative_ttl;
        let ns = resolved
            .nameservers
            .iter()
            .map(|(n, _)| {
                Record::from_rdata(
                    resolved.origin.clone(),
                    resolved.ttl,
                    RData::NS(NS(n.clone())),
                )
            })
            .collect();
        // In-zone nameservers (the only ones with addresses): their A/AAAA answers,
        // pre-encoded like an SRV target's, and the glue of NS answers.
        let ttl = resolved.ttl;
        let mut glue = Vec::new();
        let mut nameservers = Vec::new();
        let mut claims = Vec::new();
        for (name, ips) in resolved
            .nameservers
            .iter()
            .filter(|(_, ips)| !ips.is_empty())
        {
            let a = address_records(name, ttl, ips, RecordType::A);
            let aaaa = address_records(name, ttl, ips, RecordType::AAAA);
            glue.extend(a.iter().cloned());
            glue.extend(aaaa.iter().cloned());
            let encode = |rtype: RecordType, answers: Vec<Record>| {
                let authority = if answers.is_empty() {
                    vec![negative_soa.clone()]
                } else {
                    Vec::new()
                };
                Prepared::Fixed(Box::new(Encoded::new(
                    name,
                    rtype,
                    ResponseCode::NoError,
                    answers,
                    authority,
                    Vec::new(),
                )))
            };
            claims.push((name_key(name), name.clone(), nameservers.len()));
            nameservers.push(Target {
                a: encode(RecordType::A, a),
                aaaa: encode(RecordType::AAAA, aaaa),
            });
        }
        let zone = self.zones.len();
        self.zones.push(Zone {
            text: resolved.text,
            origin: resolved.origin.clone(),
            key: key.clone(),
            soa: soa_record,
            negative_soa,
            ns,
            glue,
            nameservers,
            ttl,
        });
        self.names.insert(
            key,
            Node {
                zone,
                name: resolved.origin,
                owner: Owner::Empty,
                apex: true,
            },
        );
        for (key, name, j) in claims {
            // The same name listed twice keeps its first entry.
            if self.holder(&key).is_none() {
                self.claim(key, name, zone, Owner::Nameserver(zone, j));
            }
        }
    }

    /// The innermost zone holding `key`.
    fn zone_of(&self, key: &[u8]) -> Option<usize> {
        self.zones
            .iter()
            .enumerate()
            .filter(|(_, z)| key_in_zone(key, &z.key))
            .max_by_key(|(_, z)| z.key.len())
            .map(|(i, _)| i)
    }

    fn problem(&mut self, routed: &RoutedIngress, message: String) {
        debug!(ingress = %routed.ingress, dns_name = %routed.dns_name, %message, "DNS problem");
        self.problems.push(Problem {
            ingress: routed.ingress.clone(),
            dns_name: routed.dns_name.clone(),
            message,
        });
    }

    /// Who holds `key` now, if anyone other than an empty non-terminal.
    fn holder(&self, key: &[u8]) -> Option<Owner> {
        self.names
            .get(key)
            .map(|n| n.owner)
            .filter(|o| *o != Owner::Empty)
    }

    /// Claims `key` for `owner` and adds the empty non-terminals up to the apex.
    fn claim(&mut self, key: Vec<u8>, name: Name, zone: usize, owner: Owner) {
        let zone_key = self
            .zones
            .get(zone)
            .map(|z| z.key.clone())
            .unwrap_or_default();
        let mut parent = parent_key(&key).map(<[u8]>::to_vec);
        while let Some(p) = parent {
            if p.len() < zone_key.len() || self.names.contains_key(&p) {
                break;
            }
            let next = parent_key(&p).map(<[u8]>::to_vec);
            let parent_name = name.base_name_of_key(&p);
            self.names.insert(
                p,
                Node {
                    zone,
                    name: parent_name,
                    owner: Owner::Empty,
                    apex: false,
                },
            );
            parent = next;
        }
        match self.names.get_mut(&key) {
            Some(node) => node.owner = owner,
            None => {
                self.names.insert(
                    key,
                    Node {
                        zone,
                        name,
                        owner,
                        apex: false,
                    },
                );
            }
        }
    }

    /// Parses and claims an SRV target name for `owner`; `None`, with a problem
    /// recorded, when the name is invalid or already served.
    fn claim_target(
        &mut self,
        routed: &RoutedIngress,
        text: &str,
        zone: usize,
        owner: Owner,
    ) -> Option<Name> {
        let target = match parse_name(text) {
            Ok(n) => n,
            Err(reason) => {
                self.problem(
                    routed,
                    format!("SRV target name {text} is not valid: {reason}"),
                );
                return None;
            }
        };
        let key = name_key(&target);
        if let Some(holder) = self.holder(&key) {
            let what = Self::describe_holder(holder);
            self.problem(
                routed,
                format!("SRV target name {text} is already served as {what}"),
            );
            return None;
        }
        self.claim(key, target.clone(), zone, owner);
        Some(target)
    }

    fn describe_holder(owner: Owner) -> &'static str {
        match owner {
            Owner::Ingress(_) => "another ingress's dnsName",
            Owner::Srv(..) => "an SRV name",
            Owner::Target(..) => "an SRV target name",
            Owner::Nameserver(..) => "a nameserver of the zone",
            Owner::Empty => "an empty name",
        }
    }

    fn add_ingress(&mut self, routed: &RoutedIngress, index: usize) -> Option<IngressEntry> {
        let name = match parse_name(&routed.dns_name) {
            Ok(name) => name,
            Err(reason) => {
                self.problem(
                    routed,
                    format!(
                        "dnsName {} is not a valid domain name: {reason}",
                        routed.dns_name
                    ),
                );
                return None;
            }
        };
        let key = name_key(&name);
        let Some(zone) = self.zone_of(&key) else {
            self.problem(
                routed,
                format!(
                    "dnsName {} is outside every configured zone",
                    display(&name)
                ),
            );
            return None;
        };
        if let Some(owner) = self.holder(&key) {
            let what = Self::describe_holder(owner);
            self.problem(
                routed,
                format!("dnsName {} is already served as {what}", display(&name)),
            );
            return None;
        }
        let apex = self.zones.get(zone).is_some_and(|z| z.key == key);
        self.claim(key, name.clone(), zone, Owner::Ingress(index));

        let ttl = u32::try_from(routed.traffic.ttl).unwrap_or(0);
        let location_dependent = is_location_dependent(routed.traffic.strategy.type_);

        // CNAME targets: host names must be valid names.
        for cluster in &routed.clusters {
            for hostname in &cluster.hostnames {
                if let Err(reason) = parse_name(hostname) {
                    self.problem(
                        routed,
                        format!(
                            "cluster {} reports host name {hostname:?}, which is not a valid domain name ({reason}); it is not served",
                            cluster.name
                        ),
                    );
                }
            }
            if apex && !cluster.cordoned && cluster.ips.is_empty() && !cluster.hostnames.is_empty()
            {
                self.problem(
                    routed,
                    format!(
                        "dnsName {} is a zone apex, which cannot hold a CNAME: cluster {} has only host names and is left out of A/AAAA answers",
                        display(&name),
                        cluster.name
                    ),
                );
            }
        }

        // SRV names.
        let mut srv_names = Vec::new();
        for (k, service) in routed.srv.iter().enumerate() {
            let text = format!(
                "_{}._{}.{}",
                service.name,
                service.transport,
                display(&name)
            );
            let srv_name = match parse_name(&text) {
                Ok(n) => n,
                Err(reason) => {
                    self.problem(routed, format!("SRV name {text} is not valid: {reason}"));
                    srv_names.push(None);
                    continue;
                }
            };
            let srv_key = name_key(&srv_name);
            if let Some(owner) = self.holder(&srv_key) {
                let what = Self::describe_holder(owner);
                self.problem(
                    routed,
                    format!("SRV name {text} is already served as {what}"),
                );
                srv_names.push(None);
                continue;
            }
            self.claim(srv_key, srv_name.clone(), zone, Owner::Srv(index, k));
            srv_names.push(Some(srv_name));
        }

        // SRV target names: one per cluster with IPs.
        let mut target_names = BTreeMap::new();
        let mut target_clusters = Vec::new();
        if srv_names.iter().any(Option::is_some) {
            for cluster in &routed.clusters {
                if cluster.cordoned || cluster.ips.is_empty() {
                    continue;
                }
                let text = format!("{}.{}", cluster.name, display(&name));
                let owner = Owner::Target(index, target_clusters.len());
                let Some(target) = self.claim_target(routed, &text, zone, owner) else {
                    continue;
                };
                target_names.insert(cluster.name.clone(), target.clone());
                target_clusters.push((cluster.ips.clone(), target));
            }
        }

        // Per-rule target names: clusters that serve a rule on IPs of its own.
        let mut rule_targets = vec![BTreeMap::new(); routed.srv.len()];
        for (k, service) in routed.srv.iter().enumerate() {
            if srv_names.get(k).is_none_or(Option::is_none) {
                continue;
            }
            for (cluster_name, own) in &service.addresses {
                let serves = routed
                    .clusters
                    .iter()
                    .any(|c| &c.name == cluster_name && !c.cordoned);
                if !serves || own.ips.is_empty() || service.excluded.contains(cluster_name) {
                    continue;
                }
                let text = format!(
                    "{cluster_name}.{}-{}.{}",
                    service.transport,
                    service.name,
                    display(&name)
                );
                let owner = Owner::Target(index, target_clusters.len());
                let Some(target) = self.claim_target(routed, &text, zone, owner) else {
                    continue;
                };
                if let Some(names) = rule_targets.get_mut(k) {
                    names.insert(cluster_name.clone(), target.clone());
                }
                target_clusters.push((own.ips.clone(), target));
            }
        }

        let cname_allowed = !apex;
        let reused = self.reusable(
            routed,
            zone,
            cname_allowed,
            &srv_names,
            &target_names,
            &rule_targets,
        );
        let (answers, services) = match reused {
            Some(reused) => reused,
            None => {
                let ctx = RenderCtx {
                    routed,
                    name: &name,
                    ttl,
                    zone: self.zones.get(zone)?,
                    cname_allowed,
                    srv_names: &srv_names,
                    target_names: &target_names,
                    rule_targets: &rule_targets,
                    only_service: None,
                };
                let answers =
                    Arc::new(self.encode_answers(&ctx, &target_clusters, location_dependent));
                let services = self.encode_services(&ctx, location_dependent);
                (answers, services)
            }
        };
        Some(IngressEntry {
            routed: routed.clone(),
            name,
            zone,
            ttl,
            location_dependent,
            cname_allowed,
            srv_names,
            target_names,
            rule_targets,
            answers,
            services,
        })
    }

    /// The previous snapshot's encoded answers for this name, when everything they
    /// were encoded from is the same (the routed ingress, the zone, the names taken).
    /// Negative answers carry the zone's SOA, whose serial the server patches per query,
    /// so they stay right in the new snapshot.
    #[allow(clippy::type_complexity)]
    fn reusable(
        &self,
        routed: &RoutedIngress,
        zone: usize,
        cname_allowed: bool,
        srv_names: &[Option<Name>],
        target_names: &BTreeMap<String, Name>,
        rule_targets: &[BTreeMap<String, Name>],
    ) -> Option<(Arc<Answers>, Vec<Option<Arc<ServiceView>>>)> {
        let previous = self.previous?;
        if !Arc::ptr_eq(&previous.locator, self.locator) {
            return None;
        }
        let entry = previous
            .by_dns_name
            .get(&routed.dns_name)
            .and_then(|&i| previous.ingresses.get(i))?;
        let same_zone = match (previous.zones.get(entry.zone), self.zones.get(zone)) {
            (Some(before), Some(now)) => {
                before.key == now.key
                    && before.ttl == now.ttl
                    && before.ns == now.ns
                    && before.negative_soa.ttl == now.negative_soa.ttl
            }
            _ => false,
        };
        (same_zone
            && entry.routed == *routed
            && entry.cname_allowed == cname_allowed
            && entry.srv_names == srv_names
            && entry.target_names == *target_names
            && entry.rule_targets == rule_targets)
            .then(|| (entry.answers.clone(), entry.services.clone()))
    }

    /// Encodes every answer of one ingress (`ctx.routed`) and of its SRV target names
    /// (`targets`: the IPs each holds).
    fn encode_answers(
        &self,
        ctx: &RenderCtx<'_>,
        targets: &[(Vec<IpAddr>, Name)],
        location_dependent: bool,
    ) -> Answers {
        let ttl = ctx.ttl;
        let targets = targets
            .iter()
            .map(|(ips, target)| Target {
                a: ctx.encode(
                    target,
                    RecordType::A,
                    fixed_or_nodata(address_records(target, ttl, ips, RecordType::A)),
                ),
                aaaa: ctx.encode(
                    target,
                    RecordType::AAAA,
                    fixed_or_nodata(address_records(target, ttl, ips, RecordType::AAAA)),
                ),
            })
            .collect();
        let (rendered, per_bucket, keyed) = if location_dependent {
            self.render_keyed(ctx.routed, ctx)
        } else {
            // One decision for everyone (the default location's).
            let decision = decide(ctx.routed, None, &self.default_located());
            (
                vec![Arc::new(ctx.render(decision.answer))],
                Vec::new(),
                None,
            )
        };
        Answers {
            targets,
            rendered,
            per_bucket,
            keyed,
        }
    }

    /// The service views of the SRV services some clusters cannot serve (see
    /// [`ServiceView`]); `None` for the others.
    fn encode_services(
        &self,
        ctx: &RenderCtx<'_>,
        location_dependent: bool,
    ) -> Vec<Option<Arc<ServiceView>>> {
        ctx.routed
            .srv
            .iter()
            .enumerate()
            .map(|(k, service)| {
                let claimed = ctx.srv_names.get(k).is_some_and(Option::is_some);
                if !claimed || service.excluded.is_empty() {
                    return None;
                }
                let mut routed = ctx.routed.clone();
                routed
                    .clusters
                    .retain(|c| !service.excluded.contains(&c.name));
                let view_ctx = RenderCtx {
                    routed: &routed,
                    only_service: Some(k),
                    ..*ctx
                };
                let answers = Arc::new(self.encode_answers(&view_ctx, &[], location_dependent));
                Some(Arc::new(ServiceView { routed, answers }))
            })
            .collect()
    }

    /// The default bucket's client (always among the locator's buckets).
    fn default_located(&self) -> Located {
        self.buckets
            .iter()
            .find(|l| l.bucket == Bucket::DEFAULT)
            .cloned()
            .unwrap_or_else(|| self.locator.locate(IpAddr::from([0u8, 0, 0, 0])))
    }

    /// The renderings of a location-dependent ingress: one per eligible cluster (Geo,
    /// Latency), one per answer of the enumerable buckets, and the bucket → rendering
    /// array (see [`IngressEntry`]).
    fn render_keyed(
        &self,
        routed: &RoutedIngress,
        ctx: &RenderCtx<'_>,
    ) -> (Vec<Arc<Rendered>>, Vec<u32>, Option<Keyed>) {
        let router = PointRouter::new(&routed.traffic, &routed.clusters);
        let mut rendered: Vec<Arc<Rendered>> = Vec::new();
        // Renderings with an equal answer share one Arc.
        let mut intern = |answer: Answer| -> u32 {
            let slot = match rendered.iter().position(|r| r.answer == answer) {
                Some(slot) => slot,
                None => {
                    rendered.push(Arc::new(ctx.render(answer)));
                    rendered.len() - 1
                }
            };
            u32::try_from(slot).unwrap_or(u32::MAX)
        };
        let mut by_cluster = vec![None; routed.clusters.len()];
        for key in router.cluster_keys() {
            if let (RouteKey::Cluster(index), Some(answer)) = (&key, router.answer(&key))
                && let Some(slot) = by_cluster.get_mut(*index as usize)
            {
                *slot = Some(intern(answer));
            }
        }
        let mut same = None;
        let mut orders: HashMap<ClusterOrder, u32> = HashMap::new();
        let mut slot_of = |located: &Located, intern: &mut dyn FnMut(Answer) -> u32| {
            let key = router.key(
                located.location.latitude,
                located.location.longitude,
                located.rtt.as_ref(),
            );
            let known = match &key {
                RouteKey::Cluster(index) => by_cluster.get(*index as usize).copied().flatten(),
                RouteKey::Same => same,
                RouteKey::Order(order) => orders.get(order).copied(),
            };
            if let Some(slot) = known {
                return slot;
            }
            let slot = intern(decide(routed, None, located).answer);
            match key {
                RouteKey::Same => same = Some(slot),
                RouteKey::Order(order) => {
                    orders.insert(order, slot);
                }
                RouteKey::Cluster(_) => {}
            }
            slot
        };
        let default = self.default_located();
        slot_of(&default, &mut intern);
        let per_bucket = if self.buckets.len() <= PRECOMPUTED_BUCKETS {
            self.buckets
                .iter()
                .map(|located| slot_of(located, &mut intern))
                .collect()
        } else {
            Vec::new()
        };
        let orders = orders
            .into_iter()
            .filter_map(|(order, slot)| Some((order, rendered.get(slot as usize)?.clone())))
            .collect();
        let keyed = Keyed {
            router,
            same,
            by_cluster,
            orders: RwLock::new(orders),
        };
        (rendered, per_bucket, Some(keyed))
    }
}

trait NameExt {
    /// The ancestor of `self` whose wire form is `key` (a suffix of self's).
    fn base_name_of_key(&self, key: &[u8]) -> Name;
}

impl NameExt for Name {
    fn base_name_of_key(&self, key: &[u8]) -> Name {
        let mut labels = 0usize;
        let mut pos = 0;
        while let Some(&len) = key.get(pos) {
            if len == 0 {
                break;
            }
            labels += 1;
            pos += 1 + usize::from(len);
        }
        self.trim_to(labels)
    }
}

fn decide(routed: &RoutedIngress, address: Option<IpAddr>, located: &Located) -> Decision {
    let client = ClientInfo::from_located(address, located);
    routing::decide(&routed.traffic, &routed.clusters, &client, &routed.failover)
}

/// A or AAAA records (by `rtype`) for the addresses of that family.
fn address_records(owner: &Name, ttl: u32, ips: &[IpAddr], rtype: RecordType) -> Vec<Record> {
    let mut seen = BTreeSet::new();
    ips.iter()
        .filter(|ip| seen.insert(**ip))
        .filter_map(|ip| match (ip, rtype) {
            (IpAddr::V4(v4), RecordType::A) => Some(RData::A(A(*v4))),
            (IpAddr::V6(v6), RecordType::AAAA) => Some(RData::AAAA(AAAA(*v6))),
            _ => None,
        })
        .map(|rdata| Record::from_rdata(owner.clone(), ttl, rdata))
        .collect()
}

fn fixed_or_nodata(answers: Vec<Record>) -> Plan {
    if answers.is_empty() {
        Plan::NoData
    } else {
        Plan::Fixed(Section {
            answers,
            additional: Vec::new(),
        })
    }
}

/// The rotations of a record set (at most [`MAX_ROTATIONS`], evenly spaced).
fn rotations(records: Vec<Record>) -> Plan {
    let n = records.len();
    match n {
        0 => Plan::NoData,
        1 => fixed_or_nodata(records),
        _ => {
            let count = n.min(MAX_ROTATIONS);
            let mut starts: Vec<usize> = (0..count).map(|i| i * n / count).collect();
            starts.dedup();
            Plan::Rotate(
                starts
                    .into_iter()
                    .map(|start| Section {
                        answers: records[start..]
                            .iter()
                            .chain(&records[..start])
                            .cloned()
                            .collect(),
                        additional: Vec::new(),
                    })
                    .collect(),
            )
        }
    }
}

/// Which records an answer's clusters give: IPs win over host names.
enum Mode<'c> {
    /// Clusters with IPs (with their weight).
    Ips(Vec<(&'c ClusterView, f64)>),
    /// Clusters with only host names: the first valid one each (with its weight).
    Hostnames(Vec<(&'c ClusterView, Name, f64)>),
    Nothing,
}

struct RenderCtx<'a> {
    routed: &'a RoutedIngress,
    name: &'a Name,
    ttl: u32,
    zone: &'a Zone,
    cname_allowed: bool,
    srv_names: &'a [Option<Name>],
    target_names: &'a BTreeMap<String, Name>,
    rule_targets: &'a [BTreeMap<String, Name>],
    /// Render only this SRV service (a [`ServiceView`]): everything else is NODATA,
    /// never served from this rendering.
    only_service: Option<usize>,
}

/// Where one chosen cluster serves one SRV service.
struct ServiceTarget<'c> {
    ips: &'c [IpAddr],
    hostnames: &'c [String],
    /// The target name holding `ips`: the rule's own or the cluster's.
    target: Option<&'c Name>,
    weight: f64,
}

impl RenderCtx<'_> {
    fn cluster(&self, name: &str) -> Option<&ClusterView> {
        self.routed.clusters.iter().find(|c| c.name == name)
    }

    /// The chosen clusters of `answer` with their weights (1 for `All`).
    fn chosen(&self, answer: &Answer) -> Vec<(&ClusterView, f64)> {
        match answer {
            Answer::All(names) => names
                .iter()
                .filter_map(|n| self.cluster(n))
                .map(|c| (c, 1.0))
                .collect(),
            Answer::Weighted(shares) => shares
                .iter()
                .filter(|(_, w)| w.is_finite() && *w > 0.0)
                .filter_map(|(n, w)| self.cluster(n).map(|c| (c, *w)))
                .collect(),
            Answer::Addresses(_) | Answer::NoData => Vec::new(),
        }
    }

    fn mode<'c>(&self, chosen: Vec<(&'c ClusterView, f64)>) -> Mode<'c> {
        if chosen.iter().any(|(c, _)| !c.ips.is_empty()) {
            return Mode::Ips(
                chosen
                    .into_iter()
                    .filter(|(c, _)| !c.ips.is_empty())
                    .collect(),
            );
        }
        let hostnames: Vec<_> = chosen
            .into_iter()
            .filter_map(|(c, w)| {
                c.hostnames
                    .iter()
                    .find_map(|h| parse_name(h).ok())
                    .map(|h| (c, h, w))
            })
            .collect();
        if hostnames.is_empty() {
            Mode::Nothing
        } else {
            Mode::Hostnames(hostnames)
        }
    }

    fn cname(&self, target: &Name) -> Record {
        Record::from_rdata(
            self.name.clone(),
            self.ttl,
            RData::CNAME(CNAME(target.clone())),
        )
    }

    /// The plan for an A or AAAA question at the dnsName.
    fn address_plan(&self, answer: &Answer, rtype: RecordType) -> Plan {
        let weighted = matches!(answer, Answer::Weighted(_));
        match answer {
            Answer::NoData => return Plan::NoData,
            Answer::Addresses(ips) => {
                return fixed_or_nodata(address_records(self.name, self.ttl, ips, rtype));
            }
            Answer::All(_) | Answer::Weighted(_) => {}
        }
        match self.mode(self.chosen(answer)) {
            Mode::Nothing => Plan::NoData,
            Mode::Ips(clusters) if weighted => {
                let options: Vec<(Section, f64)> = clusters
                    .iter()
                    .map(|(c, w)| (address_records(self.name, self.ttl, &c.ips, rtype), *w))
                    .filter(|(records, _)| !records.is_empty())
                    .map(|(answers, w)| {
                        (
                            Section {
                                answers,
                                additional: Vec::new(),
                            },
                            w,
                        )
                    })
                    .collect();
                weighted_plan(options)
            }
            Mode::Ips(clusters) => {
                let ips: Vec<IpAddr> = clusters
                    .iter()
                    .flat_map(|(c, _)| c.ips.iter().copied())
                    .collect();
                rotations(address_records(self.name, self.ttl, &ips, rtype))
            }
            Mode::Hostnames(_) if !self.cname_allowed => Plan::NoData,
            Mode::Hostnames(hosts) => {
                let mut seen = BTreeSet::new();
                let options: Vec<(Section, f64)> = hosts
                    .iter()
                    .filter(|(_, h, _)| weighted || seen.insert(h.clone()))
                    .map(|(_, h, w)| {
                        (
                            Section {
                                answers: vec![self.cname(h)],
                                additional: Vec::new(),
                            },
                            *w,
                        )
                    })
                    .collect();
                if weighted {
                    weighted_plan(options)
                } else {
                    match options.len() {
                        0 => Plan::NoData,
                        1 => options
                            .into_iter()
                            .next()
                            .map_or(Plan::NoData, |(s, _)| Plan::Fixed(s)),
                        _ => Plan::Rotate(options.into_iter().map(|(s, _)| s).collect()),
                    }
                }
            }
        }
    }

    /// Where `cluster` serves SRV service `k`: the rule's own addresses and target name
    /// when it has some, else the cluster's.
    fn service_target<'c>(
        &'c self,
        k: usize,
        cluster: &'c ClusterView,
        weight: f64,
    ) -> ServiceTarget<'c> {
        let own = self
            .routed
            .srv
            .get(k)
            .and_then(|service| service.addresses.get(&cluster.name));
        match own {
            Some(own) => ServiceTarget {
                ips: &own.ips,
                hostnames: &own.hostnames,
                target: self.rule_targets.get(k).and_then(|t| t.get(&cluster.name)),
                weight,
            },
            None => ServiceTarget {
                ips: &cluster.ips,
                hostnames: &cluster.hostnames,
                target: self.target_names.get(&cluster.name),
                weight,
            },
        }
    }

    /// The plan for the SRV question of service `k`: one record per chosen cluster that
    /// can serve it, pointing where that cluster serves this rule. As for A/AAAA, IPs
    /// win: when some chosen cluster serves it on IPs, the clusters that serve it only on
    /// host names are left out.
    fn srv_plan(&self, answer: &Answer, k: usize) -> Plan {
        let (Some(Some(owner)), Some(service)) = (self.srv_names.get(k), self.routed.srv.get(k))
        else {
            return Plan::NoData;
        };
        let srv = |weight: u16, target: &Name| {
            Record::from_rdata(
                owner.clone(),
                self.ttl,
                RData::SRV(SRV::new(0, weight, service.port, target.clone())),
            )
        };
        let mut section = Section::default();
        match answer {
            Answer::NoData => return Plan::NoData,
            Answer::Addresses(ips) => {
                if ips.is_empty() {
                    return Plan::NoData;
                }
                section.answers.push(srv(1, self.name));
                section
                    .additional
                    .extend(address_records(self.name, self.ttl, ips, RecordType::A));
                section.additional.extend(address_records(
                    self.name,
                    self.ttl,
                    ips,
                    RecordType::AAAA,
                ));
            }
            Answer::All(_) | Answer::Weighted(_) => {
                let weighted = matches!(answer, Answer::Weighted(_));
                let chosen: Vec<ServiceTarget<'_>> = self
                    .chosen(answer)
                    .into_iter()
                    .filter(|(c, _)| !service.excluded.contains(&c.name))
                    .map(|(c, w)| self.service_target(k, c, w))
                    .collect();
                let with_ips = chosen.iter().any(|t| !t.ips.is_empty());
                let chosen: Vec<(&ServiceTarget<'_>, Option<Name>)> = chosen
                    .iter()
                    .filter_map(|t| {
                        if with_ips {
                            (!t.ips.is_empty()).then_some((t, None))
                        } else {
                            let host = t.hostnames.iter().find_map(|h| parse_name(h).ok())?;
                            Some((t, Some(host)))
                        }
                    })
                    .collect();
                let total: f64 = chosen.iter().map(|(t, _)| t.weight).sum();
                let weight = |w: f64| -> u16 {
                    if !weighted || total <= 0.0 {
                        return 1;
                    }
                    // RFC 2782 weights: shares scaled to 10000, at least 1.
                    let scaled = (w / total * 10_000.0).round();
                    if scaled >= 1.0 {
                        scaled.min(65_535.0) as u16
                    } else {
                        1
                    }
                };
                let mut seen = BTreeSet::new();
                for (t, host) in chosen {
                    match host {
                        Some(host) => {
                            if seen.insert(host.clone()) {
                                section.answers.push(srv(weight(t.weight), &host));
                            }
                        }
                        None => {
                            let Some(target) = t.target else {
                                continue;
                            };
                            section.answers.push(srv(weight(t.weight), target));
                            section.additional.extend(address_records(
                                target,
                                self.ttl,
                                t.ips,
                                RecordType::A,
                            ));
                            section.additional.extend(address_records(
                                target,
                                self.ttl,
                                t.ips,
                                RecordType::AAAA,
                            ));
                        }
                    }
                }
            }
        }
        if section.answers.is_empty() {
            Plan::NoData
        } else {
            Plan::Fixed(section)
        }
    }

    fn render(&self, answer: Answer) -> Rendered {
        let addresses = |rtype| match self.only_service {
            Some(_) => Plan::NoData,
            None => self.address_plan(&answer, rtype),
        };
        let a = self.encode(self.name, RecordType::A, addresses(RecordType::A));
        let aaaa = self.encode(self.name, RecordType::AAAA, addresses(RecordType::AAAA));
        let srv = (0..self.routed.srv.len())
            .map(|k| {
                let rendered = self.only_service.is_none_or(|only| only == k);
                match self.srv_names.get(k) {
                    Some(Some(owner)) if rendered => {
                        self.encode(owner, RecordType::SRV, self.srv_plan(&answer, k))
                    }
                    Some(Some(owner)) => self.encode(owner, RecordType::SRV, Plan::NoData),
                    _ => self.encode(self.name, RecordType::SRV, Plan::NoData),
                }
            })
            .collect();
        Rendered {
            answer,
            a,
            aaaa,
            srv,
        }
    }

    fn encode(&self, qname: &Name, qtype: RecordType, plan: Plan) -> Prepared {
        let one = |section: Section| {
            Encoded::new(
                qname,
                qtype,
                ResponseCode::NoError,
                section.answers,
                Vec::new(),
                section.additional,
            )
        };
        match plan {
            Plan::NoData => Prepared::Fixed(Box::new(Encoded::new(
                qname,
                qtype,
                ResponseCode::NoError,
                Vec::new(),
                vec![self.zone.negative_soa.clone()],
                Vec::new(),
            ))),
            Plan::Fixed(section) => Prepared::Fixed(Box::new(one(section))),
            Plan::Rotate(sections) => Prepared::Rotate {
                options: sections.into_iter().map(one).collect(),
                next: AtomicUsize::new(0),
            },
            Plan::Weighted(options) => {
                let mut running = 0.0;
                let mut cumulative = Vec::new();
                let mut encoded = Vec::new();
                for (section, w) in options {
                    running += w;
                    cumulative.push(running);
                    encoded.push(one(section));
                }
                Prepared::Weighted {
                    options: encoded,
                    cumulative,
                }
            }
        }
    }
}

fn weighted_plan(options: Vec<(Section, f64)>) -> Plan {
    match options.len() {
        0 => Plan::NoData,
        1 => options
            .into_iter()
            .next()
            .map_or(Plan::NoData, |(s, _)| Plan::Fixed(s)),
        _ => Plan::Weighted(options),
    }
}

// ---------------------------------------------------------------------------------------
// Answering

impl Snapshot {
    /// The serial of the zones' SOA records.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// The zones served (apex names, lower case, no trailing dot).
    pub fn zones(&self) -> Vec<&str> {
        self.zones.iter().map(|z| z.text.as_str()).collect()
    }

    /// The locator answers are routed with.
    pub fn locator(&self) -> &Arc<Locator> {
        &self.locator
    }

    /// The rendering of ingress `index` for a client at `client` (`None`: the default
    /// location), with the ECS scope prefix it holds for.
    fn rendered(&self, index: usize, client: Option<IpAddr>) -> Option<(RenderedRef<'_>, u8)> {
        let entry = self.ingresses.get(index)?;
        self.rendered_in(entry, entry.view(), client)
    }

    /// [`Snapshot::rendered`] for the SRV answer of service `k` of ingress `index` (its
    /// service view when it has one).
    fn rendered_service(
        &self,
        index: usize,
        k: usize,
        client: Option<IpAddr>,
    ) -> Option<(RenderedRef<'_>, u8)> {
        let entry = self.ingresses.get(index)?;
        self.rendered_in(entry, entry.service_view(k), client)
    }

    fn rendered_in<'a>(
        &'a self,
        entry: &'a IngressEntry,
        view: View<'a>,
        client: Option<IpAddr>,
    ) -> Option<(RenderedRef<'a>, u8)> {
        if !entry.location_dependent {
            return view
                .answers
                .rendered
                .first()
                .map(|r| (RenderedRef::Borrowed(r), 0));
        }
        let (bucket, scope) = match client {
            Some(ip) => self.locator.bucket(ip),
            None => (Bucket::DEFAULT, 0),
        };
        // Table entries and the default: precomputed.
        if bucket.is_enumerable()
            && !view.answers.per_bucket.is_empty()
            && let Some(&b) = self.bucket_index.get(&bucket)
            && let Some(r) = view
                .answers
                .per_bucket
                .get(b)
                .and_then(|&slot| view.answers.rendered.get(slot as usize))
        {
            return Some((RenderedRef::Borrowed(r), scope));
        }
        // Mmdb points (and buckets of large tables): by route key.
        let (latitude, longitude) = self.locator.point(bucket.place);
        let rtt = bucket
            .rtt_row
            .and_then(|row| self.locator.rtt().rows().get(row))
            .map(|row| &row.rtt_ms);
        let rendered = self.rendered_for_key(entry, view, client, latitude, longitude, rtt)?;
        Some((rendered, scope))
    }

    /// The rendering of a location-dependent `entry` (in `view`) for a client at
    /// (`latitude`, `longitude`) with RTT row `rtt`.
    fn rendered_for_key<'a>(
        &'a self,
        entry: &'a IngressEntry,
        view: View<'a>,
        client: Option<IpAddr>,
        latitude: f64,
        longitude: f64,
        rtt: Option<&BTreeMap<String, f64>>,
    ) -> Option<RenderedRef<'a>> {
        let keyed = view.answers.keyed.as_ref()?;
        let key = keyed.router.key(latitude, longitude, rtt);
        let known = match &key {
            RouteKey::Cluster(index) => keyed.by_cluster.get(*index as usize).copied().flatten(),
            RouteKey::Same => keyed.same,
            RouteKey::Order(order) => {
                let orders = keyed
                    .orders
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(r) = orders.get(order) {
                    return Some(RenderedRef::Shared(r.clone()));
                }
                None
            }
        };
        if let Some(r) = known.and_then(|slot| view.answers.rendered.get(slot as usize)) {
            return Some(RenderedRef::Borrowed(r));
        }
        // A new Overflow order (or a key the build did not foresee): decide for this
        // client, share an equal rendering if there is one.
        let located_client = ClientInfo {
            address: client,
            location: crate::Location {
                region: String::new(),
                latitude,
                longitude,
            },
            rtt: rtt.cloned(),
        };
        let routed = view.routed;
        let decision = routing::decide(
            &routed.traffic,
            &routed.clusters,
            &located_client,
            &routed.failover,
        );
        let mut orders = keyed
            .orders
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let existing = view
            .answers
            .rendered
            .iter()
            .chain(orders.values())
            .find(|r| r.answer == decision.answer)
            .cloned();
        let rendered = match existing {
            Some(r) => r,
            None => {
                let zone = self.zones.get(entry.zone)?;
                let ctx = RenderCtx {
                    routed,
                    name: &entry.name,
                    ttl: entry.ttl,
                    zone,
                    cname_allowed: entry.cname_allowed,
                    srv_names: &entry.srv_names,
                    target_names: &entry.target_names,
                    rule_targets: &entry.rule_targets,
                    only_service: view.only_service,
                };
                Arc::new(ctx.render(decision.answer))
            }
        };
        if let RouteKey::Order(order) = key
            && orders.len() < MAX_ORDER_RENDERINGS
        {
            orders.insert(order, rendered.clone());
        }
        Some(RenderedRef::Shared(rendered))
    }

    /// The fast path: the pre-encoded response to an A, AAAA or SRV question for
    /// `key` (a lower-case wire name) from `client`, handed to `f` with the ECS scope
    /// prefix. `None` when the question needs the slow path (unknown name, other types,
    /// NXDOMAIN).
    pub(crate) fn with_fast_answer<R>(
        &self,
        key: &[u8],
        qtype: RecordType,
        client: IpAddr,
        f: impl FnOnce(&Encoded, u8) -> R,
    ) -> Option<R> {
        let node = self.names.get(key)?;
        match (node.owner, qtype) {
            (Owner::Ingress(i), RecordType::A | RecordType::AAAA) => {
                let (rendered, scope) = self.rendered(i, Some(client))?;
                let prepared = if qtype == RecordType::A {
                    &rendered.a
                } else {
                    &rendered.aaaa
                };
                Some(f(prepared.pick(), scope))
            }
            (Owner::Srv(i, k), RecordType::SRV) => {
                let (rendered, scope) = self.rendered_service(i, k, Some(client))?;
                Some(f(rendered.srv.get(k)?.pick(), scope))
            }
            (Owner::Target(i, t), RecordType::A | RecordType::AAAA) => {
                let target = self.ingresses.get(i)?.answers.targets.get(t)?;
                let prepared = if qtype == RecordType::A {
                    &target.a
                } else {
                    &target.aaaa
                };
                Some(f(prepared.pick(), 0))
            }
            (Owner::Nameserver(z, j), RecordType::A | RecordType::AAAA) => {
                let target = self.zones.get(z)?.nameservers.get(j)?;
                let prepared = if qtype == RecordType::A {
                    &target.a
                } else {
                    &target.aaaa
                };
                Some(f(prepared.pick(), 0))
            }
            _ => None,
        }
    }

    /// The answer to (`name`, `qtype`) for a client at `client` (the ECS address or the
    /// resolver's; `None` for the default location). Picks like a query does: round
    /// robin answers advance, weighted ones are drawn at random. `ANY` gets the RFC 8482
    /// HINFO answer.
    pub fn lookup(&self, name: &str, qtype: RecordType, client: Option<IpAddr>) -> Lookup {
        match parse_name(name) {
            Ok(name) => self.lookup_key(&name_key(&name), qtype, client),
            Err(_) => Lookup::refused(),
        }
    }

    /// [`Snapshot::lookup`] by lower-case wire name.
    pub(crate) fn lookup_key(
        &self,
        key: &[u8],
        qtype: RecordType,
        client: Option<IpAddr>,
    ) -> Lookup {
        let Some(node) = self.names.get(key) else {
            let Some(zone) = self
                .zones
                .iter()
                .filter(|z| key_in_zone(key, &z.key))
                .max_by_key(|z| z.key.len())
            else {
                return Lookup::refused();
            };
            return Lookup {
                rcode: ResponseCode::NXDomain,
                authoritative: true,
                answers: Vec::new(),
                authority: vec![zone.negative_soa.clone()],
                additional: Vec::new(),
                scope_prefix: 0,
            };
        };
        let Some(zone) = self.zones.get(node.zone) else {
            return Lookup::refused();
        };
        let nodata = |scope_prefix: u8| Lookup {
            rcode: ResponseCode::NoError,
            authoritative: true,
            answers: Vec::new(),
            authority: vec![zone.negative_soa.clone()],
            additional: Vec::new(),
            scope_prefix,
        };
        let positive = |answers: Vec<Record>| Lookup {
            rcode: ResponseCode::NoError,
            authoritative: true,
            answers,
            authority: Vec::new(),
            additional: Vec::new(),
            scope_prefix: 0,
        };
        if qtype == RecordType::ANY {
            return positive(vec![Record::from_rdata(
                node.name.clone(),
                zone.ttl,
                RData::HINFO(HINFO::new("RFC8482".to_owned(), String::new())),
            )]);
        }
        if node.apex {
            match qtype {
                RecordType::SOA => return positive(vec![zone.soa.clone()]),
                RecordType::NS => {
                    let mut lookup = positive(zone.ns.clone());
                    lookup.additional = zone.glue.clone();
                    return lookup;
                }
                _ => {}
            }
        }
        match node.owner {
            Owner::Empty => nodata(0),
            Owner::Ingress(i) => {
                let Some((rendered, scope)) = self.rendered(i, client) else {
                    return nodata(0);
                };
                match qtype {
                    RecordType::A => Lookup::from_encoded(rendered.a.pick(), scope, self.serial),
                    RecordType::AAAA => {
                        Lookup::from_encoded(rendered.aaaa.pick(), scope, self.serial)
                    }
                    _ => {
                        // A CNAME answers every type (RFC 1034 §3.6.2).
                        let picked = rendered.a.pick();
                        let is_cname = picked
                            .answers
                            .first()
                            .is_some_and(|r| r.record_type() == RecordType::CNAME);
                        if is_cname {
                            let mut lookup = Lookup::from_encoded(picked, scope, self.serial);
                            lookup.additional.clear();
                            lookup
                        } else {
                            nodata(scope)
                        }
                    }
                }
            }
            Owner::Srv(i, k) => {
                if qtype != RecordType::SRV {
                    return nodata(0);
                }
                match self.rendered_service(i, k, client) {
                    Some((rendered, scope)) => match rendered.srv.get(k) {
                        Some(prepared) => Lookup::from_encoded(prepared.pick(), scope, self.serial),
                        None => nodata(0),
                    },
                    None => nodata(0),
                }
            }
            Owner::Target(i, t) => {
                let Some(target) = self.ingresses.get(i).and_then(|e| e.answers.targets.get(t))
                else {
                    return nodata(0);
                };
                match qtype {
                    RecordType::A => Lookup::from_encoded(target.a.pick(), 0, self.serial),
                    RecordType::AAAA => Lookup::from_encoded(target.aaaa.pick(), 0, self.serial),
                    _ => nodata(0),
                }
            }
            Owner::Nameserver(z, j) => {
                let Some(target) = self.zones.get(z).and_then(|z| z.nameservers.get(j)) else {
                    return nodata(0);
                };
                match qtype {
                    RecordType::A => Lookup::from_encoded(target.a.pick(), 0, self.serial),
                    RecordType::AAAA => Lookup::from_encoded(target.aaaa.pick(), 0, self.serial),
                    _ => nodata(0),
                }
            }
        }
    }

    /// Whether `key` is in a served zone (including names that do not exist).
    pub(crate) fn in_zone(&self, key: &[u8]) -> bool {
        self.zones.iter().any(|z| key_in_zone(key, &z.key))
    }

    /// Whether `key` is the apex of a served zone.
    pub(crate) fn is_apex(&self, key: &[u8]) -> bool {
        self.zones.iter().any(|z| z.key == key)
    }

    /// The routing decision for `dns_name` and a client at `client` (`None`: the default
    /// location), with where the client was located: what "why did client X get
    /// cluster Y" shows.
    pub fn explain(&self, dns_name: &str, client: Option<IpAddr>) -> Option<(Located, Decision)> {
        let entry = self
            .ingresses
            .get(*self.by_dns_name.get(&normalize_text(dns_name))?)?;
        let located = match client {
            Some(ip) => self.locator.locate(ip),
            None => self
                .buckets
                .iter()
                .find(|l| l.bucket == Bucket::DEFAULT)?
                .clone(),
        };
        let decision = decide(&entry.routed, client, &located);
        Some((located, decision))
    }

    /// The records served for `dns_name`, as `FederatedIngress.status.dns.records`
    /// shows them: per distinct answer, which clients get it (`scope`: the regions of
    /// the location buckets for location-dependent strategies, empty for everyone) and,
    /// for answers picked per query by weight, the share (`weight 75%`). SRV records
    /// and their target names' addresses are included. Empty when the name is not
    /// served.
    pub fn records_for_status(&self, dns_name: &str) -> Vec<DnsRecordStatus> {
        let Some(entry) = self
            .by_dns_name
            .get(&normalize_text(dns_name))
            .and_then(|&i| self.ingresses.get(i))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let push = |out: &mut Vec<DnsRecordStatus>, prepared: &Prepared, scope: &str| {
            for (encoded, share) in prepared.variants() {
                if let Some(status) = status_record(&encoded.answers, scope, share) {
                    out.push(status);
                }
            }
        };
        for (rendered, scope) in &self.status_groups(entry, entry.view()) {
            push(&mut out, &rendered.a, scope);
            // A CNAME answers AAAA as well: do not list it twice.
            let a_is_cname = rendered
                .a
                .pick_first()
                .answers
                .first()
                .is_some_and(|r| r.record_type() == RecordType::CNAME);
            if !a_is_cname {
                push(&mut out, &rendered.aaaa, scope);
            }
            for (k, prepared) in rendered.srv.iter().enumerate() {
                if entry.services.get(k).is_none_or(Option::is_none) {
                    push(&mut out, prepared, scope);
                }
            }
        }
        // Services routed among the clusters that can serve them.
        for (k, service) in entry.services.iter().enumerate() {
            if service.is_none() {
                continue;
            }
            for (rendered, scope) in &self.status_groups(entry, entry.service_view(k)) {
                if let Some(prepared) = rendered.srv.get(k) {
                    push(&mut out, prepared, scope);
                }
            }
        }
        for target in &entry.answers.targets {
            for prepared in [&target.a, &target.aaaa] {
                if let Some(status) = status_record(&prepared.pick_first().answers, "", None) {
                    out.push(status);
                }
            }
        }
        out
    }

    /// The renderings of `view` that the enumerable buckets get, in order of first
    /// appearance, with the regions that get each (`scope`: empty for everyone).
    fn status_groups<'a>(
        &'a self,
        entry: &'a IngressEntry,
        view: View<'a>,
    ) -> Vec<(RenderedRef<'a>, String)> {
        let mut groups: Vec<(RenderedRef<'_>, BTreeSet<String>)> = Vec::new();
        if entry.location_dependent {
            for (b, located) in self.buckets.iter().enumerate() {
                let rendered = match view
                    .answers
                    .per_bucket
                    .get(b)
                    .and_then(|&slot| view.answers.rendered.get(slot as usize))
                {
                    Some(r) => RenderedRef::Borrowed(r),
                    None => match self.rendered_for_key(
                        entry,
                        view,
                        None,
                        located.location.latitude,
                        located.location.longitude,
                        located.rtt.as_ref(),
                    ) {
                        Some(r) => r,
                        None => continue,
                    },
                };
                let region = if located.location.region.is_empty() {
                    "default".to_owned()
                } else {
                    located.location.region.clone()
                };
                match groups.iter_mut().find(|(r, _)| r.answer == rendered.answer) {
                    Some((_, regions)) => {
                        regions.insert(region);
                    }
                    None => groups.push((rendered, BTreeSet::from([region]))),
                }
            }
        } else if let Some(r) = view.answers.rendered.first() {
            groups.push((RenderedRef::Borrowed(r), BTreeSet::new()));
        }
        groups
            .into_iter()
            .map(|(rendered, regions)| {
                let scope = regions.into_iter().collect::<Vec<_>>().join(", ");
                (rendered, scope)
            })
            .collect()
    }

    /// Every record of the zone with apex `key` for a zone transfer, between two SOAs.
    /// Location-dependent names give the default location's answer; round-robin sets
    /// their first rotation; weighted address answers the union of all clusters
    /// (weighted CNAMEs the heaviest).
    pub(crate) fn transfer(&self, key: &[u8]) -> Option<Vec<Record>> {
        let zone_index = self.zones.iter().position(|z| z.key == key)?;
        let zone = self.zones.get(zone_index)?;
        let mut records = vec![zone.soa.clone()];
        records.extend(zone.ns.iter().cloned());
        let mut nodes: Vec<&Node> = self
            .names
            .values()
            .filter(|n| n.zone == zone_index)
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        for node in nodes {
            match node.owner {
                Owner::Empty => {}
                Owner::Ingress(i) => {
                    if let Some((rendered, _)) = self.rendered(i, None) {
                        let a = transfer_view(&rendered.a);
                        let cname = a
                            .first()
                            .is_some_and(|r| r.record_type() == RecordType::CNAME);
                        records.extend(a);
                        if !cname {
                            records.extend(transfer_view(&rendered.aaaa));
                        }
                    }
                }
                Owner::Srv(i, k) => {
                    if let Some((rendered, _)) = self.rendered_service(i, k, None)
                        && let Some(prepared) = rendered.srv.get(k)
                    {
                        records.extend(transfer_view(prepared));
                    }
                }
                Owner::Target(i, t) => {
                    if let Some(target) =
                        self.ingresses.get(i).and_then(|e| e.answers.targets.get(t))
                    {
                        records.extend(target.a.pick_first().answers.iter().cloned());
                        records.extend(target.aaaa.pick_first().answers.iter().cloned());
                    }
                }
                Owner::Nameserver(z, j) => {
                    if let Some(target) = self.zones.get(z).and_then(|z| z.nameservers.get(j)) {
                        records.extend(target.a.pick_first().answers.iter().cloned());
                        records.extend(target.aaaa.pick_first().answers.iter().cloned());
                    }
                }
            }
        }
        records.push(zone.soa.clone());
        Some(records)
    }

    /// The zone record (for the AXFR answer's question checks).
    pub(crate) fn zone_origin(&self, key: &[u8]) -> Option<&Name> {
        self.zones.iter().find(|z| z.key == key).map(|z| &z.origin)
    }
}

impl Prepared {
    /// The first response, without advancing anything.
    fn pick_first(&self) -> &Encoded {
        match self {
            Prepared::Fixed(encoded) => encoded,
            Prepared::Rotate { options, .. } | Prepared::Weighted { options, .. } => &options[0],
        }
    }
}

/// The static view of a prepared answer for zone transfers.
fn transfer_view(prepared: &Prepared) -> Vec<Record> {
    match prepared {
        Prepared::Fixed(encoded) => encoded.answers.clone(),
        Prepared::Rotate { options, .. } => options
            .first()
            .map(|e| e.answers.clone())
            .unwrap_or_default(),
        Prepared::Weighted {
            options,
            cumulative,
        } => {
            let cname = options
                .first()
                .and_then(|e| e.answers.first())
                .is_some_and(|r| r.record_type() == RecordType::CNAME);
            if cname {
                let mut best = (0, f64::MIN);
                let mut previous = 0.0;
                for (i, &c) in cumulative.iter().enumerate() {
                    if c - previous > best.1 {
                        best = (i, c - previous);
                    }
                    previous = c;
                }
                options
                    .get(best.0)
                    .map(|e| e.answers.clone())
                    .unwrap_or_default()
            } else {
                let mut seen = BTreeSet::new();
                options
                    .iter()
                    .flat_map(|e| e.answers.iter())
                    .filter(|r| seen.insert(r.data.to_string()))
                    .cloned()
                    .collect()
            }
        }
    }
}

/// One status record from an answer's records (`None` for NODATA).
fn status_record(answers: &[Record], scope: &str, share: Option<f64>) -> Option<DnsRecordStatus> {
    let first = answers.first()?;
    let type_ = match first.record_type() {
        RecordType::A => ApiRecordType::A,
        RecordType::AAAA => ApiRecordType::Aaaa,
        RecordType::CNAME => ApiRecordType::Cname,
        RecordType::SRV => ApiRecordType::Srv,
        _ => return None,
    };
    let mut values: Vec<String> = answers
        .iter()
        .map(|r| match &r.data {
            RData::CNAME(CNAME(target)) => display(target),
            RData::SRV(srv) => format!(
                "{} {} {} {}",
                srv.priority,
                srv.weight,
                srv.port,
                display(&srv.target)
            ),
            other => other.to_string(),
        })
        .collect();
    values.sort();
    let scope = match share {
        Some(share) => {
            let percent = format!("weight {:.0}%", share * 100.0);
            if scope.is_empty() {
                percent
            } else {
                format!("{scope}, {percent}")
            }
        }
        None => scope.to_owned(),
    };
    Some(DnsRecordStatus {
        name: display(&first.name),
        type_,
        values,
        scope,
    })
}

#[cfg(test)]
mod tests {
    use fedingress_api::ingress::{Strategy, Traffic};

    use super::*;
    use crate::Location;
    use crate::location::test_mmdb::{CityNetwork, city_db, ip, net};
    use crate::routing::FailoverState;

    fn location(region: &str, latitude: f64, longitude: f64) -> Location {
        Location {
            region: region.to_owned(),
            latitude,
            longitude,
        }
    }

    fn cluster(name: &str, at: Location, ips: &[IpAddr]) -> ClusterView {
        ClusterView {
            name: name.to_owned(),
            location: at,
            healthy: true,
            cordoned: false,
            ips: ips.to_vec(),
            hostnames: Vec::new(),
            load: 0.0,
            capacity: None,
            cloud: Default::default(),
            anycast: Vec::new(),
        }
    }

    fn routed(type_: StrategyType, clusters: Vec<ClusterView>) -> RoutedIngress {
        RoutedIngress {
            ingress: "default/x".to_owned(),
            dns_name: "x.test".to_owned(),
            traffic: Traffic {
                strategy: Strategy {
                    type_,
                    ..Strategy::default()
                },
                ..Traffic::default()
            },
            clusters,
            srv: Vec::new(),
            failover: FailoverState::default(),
            health_port: None,
        }
    }

    fn zones() -> Vec<ZoneConfig> {
        vec![ZoneConfig {
            name: "test".to_owned(),
            nameservers: vec![NameserverConfig {
                name: "ns.test".to_owned(),
                addresses: vec!["192.0.2.53".parse().unwrap()],
            }],
            soa: SoaConfig::default(),
            ttl: 3600,
        }]
    }

    fn a_values(lookup: &Lookup) -> Vec<String> {
        lookup.answers.iter().map(|r| r.data.to_string()).collect()
    }

    #[test]
    fn mmdb_points_are_answered_by_route_key_without_a_cache() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            city_db(&[CityNetwork {
                network: net("2001:218::/32"),
                latitude: Some(35.685),
                longitude: Some(139.7514),
                country: Some("JP"),
                subdivision: None,
            }]),
        )
        .unwrap();
        let locator =
            Locator::new(Vec::new(), location("eu", 50.0, 4.0), Some(file.path())).unwrap();
        let ingress = routed(
            StrategyType::Geo,
            vec![
                cluster("eu", location("eu", 50.0, 4.0), &[ip("192.0.2.1")]),
                cluster("jp", location("jp", 35.0, 139.0), &[ip("192.0.2.2")]),
            ],
        );
        let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], Arc::new(locator));
        assert!(problems.is_empty(), "{problems:?}");
        let tokyo = snapshot.lookup("x.test", RecordType::A, Some(ip("2001:218::1")));
        assert_eq!(a_values(&tokyo), vec!["192.0.2.2"]);
        assert_eq!(tokyo.scope_prefix, 32);
        // Both clusters were rendered at build time, nothing is added per client.
        assert_eq!(snapshot.ingresses[0].answers.rendered.len(), 2);
        let again = snapshot.lookup("x.test", RecordType::A, Some(ip("2001:218:ffff::1")));
        assert_eq!(a_values(&again), vec!["192.0.2.2"]);
        assert_eq!(snapshot.ingresses[0].answers.rendered.len(), 2);
        // Elsewhere: the default (Europe), pre-encoded.
        let other = snapshot.lookup("x.test", RecordType::A, Some(ip("192.0.2.200")));
        assert_eq!(a_values(&other), vec!["192.0.2.1"]);
        // The fast path takes the same route.
        let key = name_key(&parse_name("x.test").unwrap());
        let fast = snapshot
            .with_fast_answer(&key, RecordType::A, ip("2001:218::2"), |e, scope| {
                (e.answers[0].data.to_string(), scope)
            })
            .unwrap();
        assert_eq!(fast, ("192.0.2.2".to_owned(), 32));
    }

    #[test]
    fn rebuild_reuses_unchanged_names_and_answers_like_a_fresh_build() {
        let locator = Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap());
        let eu = cluster("eu", location("eu", 50.0, 4.0), &[ip("192.0.2.1")]);
        let us = cluster("us", location("us", 39.0, -77.0), &[ip("192.0.2.2")]);
        let named = |name: &str, clusters: Vec<ClusterView>| {
            let mut r = routed(StrategyType::Geo, clusters);
            r.ingress = format!("default/{name}");
            r.dns_name = format!("{name}.test");
            r
        };
        let first = vec![
            named("a", vec![eu.clone(), us.clone()]),
            named("b", vec![eu.clone(), us.clone()]),
        ];
        let (before, _) = Snapshot::build(&zones(), 1, &first, locator.clone());
        // b's eu cluster goes unhealthy; a is untouched.
        let mut second = first.clone();
        second[1].clusters[0].healthy = false;
        let (after, problems) = before.rebuild(&zones(), 2, &second);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(Arc::ptr_eq(
            &before.ingresses[0].answers,
            &after.ingresses[0].answers
        ));
        assert!(!Arc::ptr_eq(
            &before.ingresses[1].answers,
            &after.ingresses[1].answers
        ));
        let (fresh, _) = Snapshot::build(&zones(), 2, &second, locator);
        for name in ["a.test", "b.test"] {
            for rtype in [RecordType::A, RecordType::AAAA] {
                assert_eq!(
                    after.lookup(name, rtype, None),
                    fresh.lookup(name, rtype, None),
                    "{name} {rtype}"
                );
            }
        }
        // A reused negative answer (AAAA of an IPv4-only name) carries the new serial,
        // on the slow path and on the fast path.
        let nodata = after.lookup("a.test", RecordType::AAAA, None);
        match &nodata.authority[0].data {
            RData::SOA(soa) => assert_eq!(soa.serial, 2),
            other => panic!("{other:?}"),
        }
        let key = name_key(&parse_name("a.test").unwrap());
        let at = after
            .with_fast_answer(&key, RecordType::AAAA, ip("192.0.2.9"), |e, _| e.serial_at)
            .unwrap()
            .unwrap();
        let wire = after
            .with_fast_answer(&key, RecordType::AAAA, ip("192.0.2.9"), |e, _| {
                e.wire.clone()
            })
            .unwrap();
        let message = Message::from_vec(&wire).unwrap();
        match &message.authorities[0].data {
            RData::SOA(soa) => assert_eq!(soa.serial, 1, "the stored bytes are the old ones"),
            other => panic!("{other:?}"),
        }
        assert_eq!(&wire[at..at + 4], &1u32.to_be_bytes());
    }

    #[test]
    fn service_views_are_served_on_the_fast_path_and_reused_by_rebuild() {
        let locator = Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap());
        let eu = cluster("eu", location("eu", 50.0, 4.0), &[ip("192.0.2.1")]);
        let us = cluster("us", location("us", 39.0, -77.0), &[ip("192.0.2.2")]);
        let mut udp = crate::SrvService::new("dns", "udp", 53);
        udp.excluded.insert("eu".to_owned());
        let mut ingress = routed(StrategyType::Geo, vec![eu, us]);
        ingress.srv = vec![crate::SrvService::new("dns", "tcp", 53), udp];
        let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress.clone()], locator);
        assert!(problems.is_empty(), "{problems:?}");
        let entry = &snapshot.ingresses[0];
        assert!(entry.services[0].is_none());
        assert!(entry.services[1].is_some());
        let target = |key: &[u8]| {
            snapshot
                .with_fast_answer(key, RecordType::SRV, ip("192.0.2.9"), |e, _| {
                    match &e.answers[0].data {
                        RData::SRV(srv) => srv.target.to_ascii(),
                        other => panic!("{other:?}"),
                    }
                })
                .unwrap()
        };
        let udp_key = name_key(&parse_name("_dns._udp.x.test").unwrap());
        let tcp_key = name_key(&parse_name("_dns._tcp.x.test").unwrap());
        assert_eq!(target(&udp_key), "us.x.test.");
        assert_eq!(target(&tcp_key), "eu.x.test.");
        // Unchanged: the service view is shared with the next snapshot.
        let (next, _) = snapshot.rebuild(&zones(), 2, &[ingress]);
        match (
            &snapshot.ingresses[0].services[1],
            &next.ingresses[0].services[1],
        ) {
            (Some(a), Some(b)) => assert!(Arc::ptr_eq(a, b)),
            other => panic!("{other:?}"),
        }
        // A zone transfer lists the service view's answer.
        let zone = name_key(&parse_name("test").unwrap());
        let records = next.transfer(&zone).unwrap();
        let udp: Vec<String> = records
            .iter()
            .filter(|r| {
                r.record_type() == RecordType::SRV && r.name.to_ascii().starts_with("_dns._udp")
            })
            .map(|r| r.data.to_string())
            .collect();
        assert_eq!(udp.len(), 1, "{udp:?}");
        assert!(udp[0].ends_with("us.x.test."), "{udp:?}");
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn unit(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn distinct_client_points_leave_memory_bounded() {
        let spots = [
            ("a", 50.0, 4.0),
            ("b", 39.0, -77.0),
            ("c", 1.3, 103.8),
            ("d", -33.9, 151.2),
            ("e", 35.7, 139.7),
        ];
        let clusters: Vec<ClusterView> = spots
            .iter()
            .enumerate()
            .map(|(i, (name, lat, lon))| {
                let mut c = cluster(
                    name,
                    location(name, *lat, *lon),
                    &[IpAddr::from([192, 0, 2, i as u8 + 1])],
                );
                // Overflow: some clusters spill over, one has room for everything.
                c.capacity = Some(100.0);
                c.load = [50.0, 300.0, 500.0, 90.0, 1000.0][i];
                c
            })
            .collect();
        let locator = Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap());
        let mut rng = Rng(7);
        for type_ in [
            StrategyType::Geo,
            StrategyType::Latency,
            StrategyType::Overflow,
        ] {
            let ingress = routed(type_, clusters.clone());
            let (snapshot, problems) = Snapshot::build(&zones(), 1, &[ingress], locator.clone());
            assert!(problems.is_empty(), "{problems:?}");
            let entry = &snapshot.ingresses[0];
            let built = entry.answers.rendered.len();
            let mut answers = BTreeSet::new();
            for _ in 0..100_000 {
                let latitude = rng.unit() * 180.0 - 90.0;
                let longitude = rng.unit() * 360.0 - 180.0;
                let rendered = snapshot
                    .rendered_for_key(entry, entry.view(), None, latitude, longitude, None)
                    .unwrap();
                answers.insert(format!("{:?}", rendered.answer));
            }
            let orders = entry.answers.keyed.as_ref().unwrap().orders.read().unwrap();
            match type_ {
                // One rendering per eligible cluster, made at build time.
                StrategyType::Geo | StrategyType::Latency => {
                    assert_eq!(built, 5, "{type_:?}");
                    assert_eq!(entry.answers.rendered.len(), 5);
                    assert!(orders.is_empty());
                    assert_eq!(answers.len(), 5);
                }
                // At most one per distance order (5! = 120), cut after the first
                // cluster with room for everything; equal answers share one Arc.
                _ => {
                    assert!(orders.len() <= 120, "{}", orders.len());
                    assert!(orders.len() >= answers.len());
                    let mut distinct: Vec<&Arc<Rendered>> = Vec::new();
                    for r in orders.values() {
                        match distinct.iter().find(|d| d.answer == r.answer) {
                            Some(d) => assert!(Arc::ptr_eq(d, r)),
                            None => distinct.push(r),
                        }
                    }
                    assert_eq!(distinct.len(), answers.len());
                }
            }
        }
    }

    #[test]
    fn answers_are_pre_encoded_with_compressed_owner_names() {
        let ingress = routed(
            StrategyType::RoundRobin,
            vec![cluster("a", location("a", 0.0, 0.0), &[ip("192.0.2.1")])],
        );
        let (snapshot, _) = Snapshot::build(
            &zones(),
            1,
            &[ingress],
            Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap()),
        );
        let key = name_key(&parse_name("x.test").unwrap());
        let wire = snapshot
            .with_fast_answer(&key, RecordType::A, ip("127.0.0.1"), |e, _| e.wire.to_vec())
            .unwrap();
        // Header, question (x.test: 8 octets + type + class), then the answer whose owner
        // is a pointer to the question name at offset 12.
        assert_eq!(&wire[4..12], &[0, 1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&wire[12..20], b"\x01x\x04test\x00");
        assert_eq!(&wire[24..26], &[0xC0, 12]);
        assert_eq!(wire.len(), 24 + 16);
    }

    #[test]
    fn rotations_are_capped_and_start_at_different_records() {
        let ips: Vec<IpAddr> = (1..=40).map(|i| IpAddr::from([10, 0, 0, i])).collect();
        let ingress = routed(
            StrategyType::RoundRobin,
            vec![cluster("a", location("a", 0.0, 0.0), &ips)],
        );
        let (snapshot, _) = Snapshot::build(
            &zones(),
            1,
            &[ingress],
            Arc::new(Locator::new(Vec::new(), location("eu", 50.0, 4.0), None).unwrap()),
        );
        let Prepared::Rotate { options, .. } = &snapshot.ingresses[0].answers.rendered[0].a else {
            panic!("not rotated");
        };
        assert_eq!(options.len(), MAX_ROTATIONS);
        let mut firsts: Vec<String> = options
            .iter()
            .map(|e| e.answers[0].data.to_string())
            .collect();
        firsts.sort();
        firsts.dedup();
        assert_eq!(firsts.len(), MAX_ROTATIONS);
        assert!(options.iter().all(|e| e.answers.len() == 40));
    }

    #[test]
    fn key_helpers() {
        let key = name_key(&parse_name("A.b.Test.").unwrap());
        assert_eq!(key, b"\x01a\x01b\x04test\x00");
        assert_eq!(wire_to_text(&key), "a.b.test.");
        assert!(key_in_zone(&key, b"\x04test\x00"));
        assert!(!key_in_zone(&key, b"\x03est\x00"));
        assert_eq!(parent_key(&key), Some(&b"\x01b\x04test\x00"[..]));
        assert!(parse_name("a..b").is_err());
        assert!(parse_name(&"a".repeat(64)).is_err());
    }
}
