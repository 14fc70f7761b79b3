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
//! # Layout
//!
//! This file is the facade: it names the parts, re-exports their public items and holds
//! the three public limits ([`MAX_ROTATIONS`], [`MAX_ORDER_RENDERINGS`],
//! [`PRECOMPUTED_BUCKETS`]). Each part is a private submodule:
//!
//! - `config`: the `dns.zones` config ([`ZoneConfig`], [`NameserverConfig`],
//!   [`SoaConfig`]), its validation ([`validate_zones`], [`ZoneConfigError`]) and
//!   [`default_nameserver_addresses`];
//! - `names`: domain names as text and as lower-case wire keys (parsing, the name
//!   table's keys, zone membership, parents);
//! - `problems`: [`Problem`], why an ingress's name is not (fully) served;
//! - `contents`: what a [`Snapshot`] holds (zones, the name table, each ingress's
//!   encoded answers and its renderings per location key) and its accessors;
//! - `build`: [`Snapshot::build`] and [`Snapshot::rebuild`]: the zones with their SOA,
//!   NS and nameservers, the names each ingress claims, the problems found;
//! - `answers`: what the builder encodes per ingress: reuse of the previous snapshot's
//!   answers, the SRV target names, one rendering for everyone or the renderings per
//!   location key and bucket, service views;
//! - `render`: one routing decision → the records of an ingress's A, AAAA and SRV
//!   questions (IPs over host names, rotations, weights), encoded;
//! - `encode`: pre-encoded responses and how one is picked per query;
//! - `lookup`: answering: [`Snapshot::lookup`] and [`Lookup`], the server's fast path,
//!   renderings found per client, [`Snapshot::explain`];
//! - `status`: [`Snapshot::records_for_status`] (`status.dns.records`);
//! - `transfer`: a zone's records for a zone transfer;
//! - `tests`: unit tests that look inside a snapshot (its behaviour through the public
//!   API is tested in `dns/tests/it/zone.rs`).
//!
//! What does not belong here: sockets and the query wire format (see
//! [`crate::server`]), routing decisions themselves (see [`crate::routing`]).
//!
//! [`RoutedIngress`]: crate::RoutedIngress
//! [`routing::decide`]: crate::routing::decide
//! [`RouteKey`]: crate::routing::RouteKey
//! [`PointRouter`]: crate::routing::PointRouter
//! [`Locator`]: crate::location::Locator
//! [`Locator::buckets`]: crate::location::Locator::buckets
//! [`Answer`]: crate::routing::Answer
//! [`Answer::All`]: crate::routing::Answer::All
//! [`Answer::Weighted`]: crate::routing::Answer::Weighted
//! [`Answer::Addresses`]: crate::routing::Answer::Addresses

mod answers;
mod build;
mod config;
mod contents;
mod encode;
mod lookup;
mod names;
mod problems;
mod render;
mod status;
#[cfg(test)]
mod tests;
mod transfer;

pub use build::is_location_dependent;
pub use config::{
    NameserverConfig, SoaConfig, ZoneConfig, ZoneConfigError, default_nameserver_addresses,
    validate_zones,
};
pub use contents::Snapshot;
pub(crate) use encode::Encoded;
pub use lookup::Lookup;
pub(crate) use names::wire_to_text;
pub use problems::Problem;

/// Most rotations pre-encoded for a round-robin answer: beyond that, larger record
/// sets rotate through evenly spaced starting points.
pub const MAX_ROTATIONS: usize = 16;

/// Most renderings an Overflow ingress keeps for client orders found at query time
/// (see [`RouteKey::Order`](crate::routing::RouteKey::Order)); beyond it, answers for
/// new orders are rendered per query and not kept. Orders of 6 or fewer eligible
/// clusters (720) always fit.
pub const MAX_ORDER_RENDERINGS: usize = 1024;

/// Most enumerable buckets (location table entries and RTT combinations, plus the
/// default) whose rendering is looked up per ingress in a precomputed array; with more
/// buckets, every query computes its [`RouteKey`](crate::routing::RouteKey) instead (a
/// few distance computations), so that memory does not grow with table size × names.
pub const PRECOMPUTED_BUCKETS: usize = 1024;
