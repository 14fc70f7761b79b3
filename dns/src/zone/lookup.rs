//! Answering from a [`Snapshot`]: [`Snapshot::lookup`] (the semantic [`Lookup`] of one
//! question, NXDOMAIN, NODATA and REFUSED included), the server's fast path to a
//! pre-encoded response, the rendering a client gets (precomputed per bucket, or found
//! by route key, Overflow orders added on first use), and [`Snapshot::explain`].
//!
//! What does not belong here: the wire format of queries and responses (see
//! `crate::server`), making renderings at build time (see `answers` and `render`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::HINFO;
use hickory_proto::rr::{RData, Record, RecordType};

use super::MAX_ORDER_RENDERINGS;
use super::answers::decide;
use super::contents::{IngressEntry, Owner, Snapshot, View};
use super::encode::{Encoded, RenderedRef};
use super::names::{key_in_zone, name_key, normalize_text, parse_name};
use super::render::RenderCtx;
use crate::location::{Bucket, Located};
use crate::routing::{self, ClientInfo, Decision, RouteKey};

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

impl Snapshot {
    /// The rendering of ingress `index` for a client at `client` (`None`: the default
    /// location), with the ECS scope prefix it holds for.
    pub(super) fn rendered(
        &self,
        index: usize,
        client: Option<IpAddr>,
    ) -> Option<(RenderedRef<'_>, u8)> {
        let entry = self.ingresses.get(index)?;
        self.rendered_in(entry, entry.view(), client)
    }

    /// [`Snapshot::rendered`] for the SRV answer of service `k` of ingress `index` (its
    /// service view when it has one).
    pub(super) fn rendered_service(
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
    pub(super) fn rendered_for_key<'a>(
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
}
