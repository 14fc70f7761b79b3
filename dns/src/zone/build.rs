//! Building a [`Snapshot`]: [`Snapshot::build`] and [`Snapshot::rebuild`], the
//! `Builder` that adds each zone (SOA, NS, the nameservers' answers and glue) and each
//! routed ingress (its dnsName, SRV names and SRV target names claimed in the name table,
//! with the empty non-terminals above them), and the [`Problem`]s found on the way.
//!
//! What does not belong here: encoding an ingress's answers (see `answers` and
//! `render`), checking the config before a build (see `config`), answering (see
//! `lookup`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use fedingress_api::ingress::StrategyType;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::NS;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tracing::debug;

use super::config::ZoneConfig;
use super::contents::{IngressEntry, Node, Owner, Snapshot, Target, Zone};
use super::encode::{Encoded, Prepared};
use super::names::{NameExt, display, key_in_zone, name_key, parent_key, parse_name};
use super::problems::Problem;
use super::render::{RenderCtx, address_records};
use crate::RoutedIngress;
use crate::location::{Located, Locator};

/// Whether a strategy's answer depends on where the client is.
pub fn is_location_dependent(strategy: StrategyType) -> bool {
    matches!(
        strategy,
        StrategyType::Geo | StrategyType::Latency | StrategyType::Overflow
    )
}

pub(super) struct Builder<'a> {
    /// The snapshot this one replaces: unchanged names reuse its encoded answers.
    pub(super) previous: Option<&'a Snapshot>,
    pub(super) zones: Vec<Zone>,
    names: HashMap<Vec<u8>, Node>,
    problems: Vec<Problem>,
    pub(super) locator: &'a Arc<Locator>,
    pub(super) buckets: Vec<Located>,
}

impl Snapshot {
    /// Builds the snapshot for `zones` (invalid or duplicate zones are skipped with a
    /// [`Problem`]; validate the config first with
    /// [`validate_zones`](super::validate_zones)) and `ingresses`.
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

    /// Adds routed ingress `index`: claims its dnsName, SRV names and SRV target names,
    /// then encodes its answers (or reuses the previous snapshot's); `None` when its
    /// dnsName is not served.
    fn add_ingress(&mut self, routed: &RoutedIngress, index: usize) -> Option<IngressEntry> {
        let (name, zone, apex) = self.claim_dns_name(routed, index)?;
        let ttl = u32::try_from(routed.traffic.ttl).unwrap_or(0);
        let location_dependent = is_location_dependent(routed.traffic.strategy.type_);
        self.check_host_names(routed, &name, apex);
        let srv_names = self.claim_srv_names(routed, &name, zone, index);
        let mut target_clusters = Vec::new();
        let target_names = self.claim_cluster_targets(
            routed,
            &name,
            zone,
            index,
            &srv_names,
            &mut target_clusters,
        );
        let rule_targets =
            self.claim_rule_targets(routed, &name, zone, index, &srv_names, &mut target_clusters);

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

    /// Claims the ingress's dnsName for ingress `index`; returns the name, its zone and
    /// whether it is the zone's apex. `None`, with a problem recorded, when the name is
    /// invalid, outside every zone or already served.
    fn claim_dns_name(
        &mut self,
        routed: &RoutedIngress,
        index: usize,
    ) -> Option<(Name, usize, bool)> {
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
        Some((name, zone, apex))
    }

    /// CNAME targets: records a problem for every cluster host name that is not a valid
    /// name, and at a zone apex (no CNAME there) for every cluster with only host names.
    fn check_host_names(&mut self, routed: &RoutedIngress, name: &Name, apex: bool) {
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
                        display(name),
                        cluster.name
                    ),
                );
            }
        }
    }

    /// Claims the SRV name of each service of ingress `index`; `None` in the place of
    /// one that is invalid or already served (with a problem recorded).
    fn claim_srv_names(
        &mut self,
        routed: &RoutedIngress,
        name: &Name,
        zone: usize,
        index: usize,
    ) -> Vec<Option<Name>> {
        let mut srv_names = Vec::new();
        for (k, service) in routed.srv.iter().enumerate() {
            let text = format!("_{}._{}.{}", service.name, service.transport, display(name));
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
        srv_names
    }

    /// SRV target names of ingress `index`, when an SRV name was claimed: one per
    /// cluster with IPs, by cluster name. Each is added with its IPs to `target_clusters`.
    fn claim_cluster_targets(
        &mut self,
        routed: &RoutedIngress,
        name: &Name,
        zone: usize,
        index: usize,
        srv_names: &[Option<Name>],
        target_clusters: &mut Vec<(Vec<IpAddr>, Name)>,
    ) -> BTreeMap<String, Name> {
        let mut target_names = BTreeMap::new();
        if srv_names.iter().any(Option::is_some) {
            for cluster in &routed.clusters {
                if cluster.cordoned || cluster.ips.is_empty() {
                    continue;
                }
                let text = format!("{}.{}", cluster.name, display(name));
                let owner = Owner::Target(index, target_clusters.len());
                let Some(target) = self.claim_target(routed, &text, zone, owner) else {
                    continue;
                };
                target_names.insert(cluster.name.clone(), target.clone());
                target_clusters.push((cluster.ips.clone(), target));
            }
        }
        target_names
    }

    /// Per-rule target names of ingress `index`: clusters that serve a rule on IPs of
    /// its own, by cluster name, one map per service (empty when its SRV name was not
    /// claimed). Each is added with its IPs to `target_clusters`.
    fn claim_rule_targets(
        &mut self,
        routed: &RoutedIngress,
        name: &Name,
        zone: usize,
        index: usize,
        srv_names: &[Option<Name>],
        target_clusters: &mut Vec<(Vec<IpAddr>, Name)>,
    ) -> Vec<BTreeMap<String, Name>> {
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
                    display(name)
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
        rule_targets
    }
}
