//! Rendering one routing decision for one ingress: the records of its A, AAAA and SRV
//! answers (IPs win over host names, CNAMEs only off the apex, rotations of a record set,
//! one response per cluster by weight, RFC 2782 SRV weights, target addresses as
//! additional records), planned and then encoded into [`Rendered`].
//!
//! What does not belong here: the routing decision itself (see [`crate::routing`]),
//! which decisions get rendered (see `answers`), the wire encoding (see `encode`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::{A, AAAA, CNAME, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::MAX_ROTATIONS;
use super::contents::Zone;
use super::encode::{Encoded, Prepared, Rendered};
use super::names::parse_name;
use crate::routing::Answer;
use crate::{ClusterView, RoutedIngress};

/// One response's records.
#[derive(Clone, Debug, Default)]
pub(super) struct Section {
    answers: Vec<Record>,
    additional: Vec<Record>,
}

/// What to answer to one (name, type) under one decision, before encoding.
pub(super) enum Plan {
    NoData,
    Fixed(Section),
    Rotate(Vec<Section>),
    Weighted(Vec<(Section, f64)>),
}

/// A or AAAA records (by `rtype`) for the addresses of that family.
pub(super) fn address_records(
    owner: &Name,
    ttl: u32,
    ips: &[IpAddr],
    rtype: RecordType,
) -> Vec<Record> {
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

pub(super) fn fixed_or_nodata(answers: Vec<Record>) -> Plan {
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

pub(super) struct RenderCtx<'a> {
    pub(super) routed: &'a RoutedIngress,
    pub(super) name: &'a Name,
    pub(super) ttl: u32,
    pub(super) zone: &'a Zone,
    pub(super) cname_allowed: bool,
    pub(super) srv_names: &'a [Option<Name>],
    pub(super) target_names: &'a BTreeMap<String, Name>,
    pub(super) rule_targets: &'a [BTreeMap<String, Name>],
    /// Render only this SRV service (a [`ServiceView`](super::contents::ServiceView)):
    /// everything else is NODATA, never served from this rendering.
    pub(super) only_service: Option<usize>,
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

    pub(super) fn render(&self, answer: Answer) -> Rendered {
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

    pub(super) fn encode(&self, qname: &Name, qtype: RecordType, plan: Plan) -> Prepared {
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
