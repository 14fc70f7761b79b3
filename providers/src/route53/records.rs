//! Route53 record sets: the native model ([`Rrset`]), its conversion from and to the
//! SDK's `ResourceRecordSet`, and the mapping of a provider-neutral [`PolicyRecordSet`] to
//! the record sets Route53 should hold for it.
//!
//! # The mapping (copied into docs/providers.md)
//!
//! Every routed record set carries the cluster's name as its `SetIdentifier` and, when
//! health checks are enabled and the cluster has an endpoint to probe, the Route53 health
//! check of that endpoint ([`super::health`]).
//!
//! - **Simple** (Anycast, delegation): one plain record set with every target's values.
//!   Several load-balancer host names cannot share a CNAME: they become weighted records
//!   of equal weight, as for RoundRobin.
//! - **Weighted** → weighted records. Route53 weights are 0 to 255: weights are kept as
//!   they are when the largest is at most 255, otherwise scaled to 255 for the largest,
//!   rounding, and never below 1 for a weight above 0, so the ratios stay within
//!   rounding. Weight 0 stays 0 (Route53 then answers it only when all weights are 0).
//! - **RoundRobin** (`Multivalue`) → multivalue answer records, one per cluster. Route53
//!   answers with up to eight healthy records: with more than eight clusters each
//!   resolver gets a subset. CNAME and alias records cannot be multivalue: those become
//!   weighted records of equal weight (one healthy cluster per answer, chosen at random).
//! - **Failover** → `PRIMARY`/`SECONDARY`. Route53 has only two roles, our tiers are any
//!   number of groups. Two tiers of one cluster each are a PRIMARY and a SECONDARY record
//!   at the name itself. Otherwise the tiers are chained with alias records in the same
//!   zone (`EvaluateTargetHealth`): at the name, PRIMARY is tier 0 and SECONDARY an alias
//!   to `_f1.<name>`, where PRIMARY is tier 1 and SECONDARY the rest, and so on; a tier of
//!   several clusters is an alias to `_t<i>.<name>`, which holds the tier's clusters as
//!   multivalue (or equal-weight) records with their health checks. A single tier is not a
//!   failover at all: its clusters are published as for RoundRobin.
//! - **Latency** → latency records with `Region` = the cluster's `spec.region` when the
//!   cluster runs on AWS (and the region is one Route53 knows), otherwise the AWS region
//!   nearest to the cluster's coordinates ([`super::regions`]). Clusters that map to the
//!   same region share one latency record (Route53 allows one latency record set per
//!   region: API reference of `ResourceRecordSet.Region`), an alias to
//!   `_<region>.<name>` holding them as multivalue records, each with its health check
//!   (so that a region answers with every healthy cluster in it, and counts as healthy
//!   while one is).
//! - **Geo** → geoproximity records with the cluster's coordinates (two decimals, which
//!   is what Route53 accepts) and bias 0. Our Geo is "the nearest healthy cluster by
//!   great-circle distance", and geoproximity with bias 0 routes to the nearest record
//!   and, when its health check fails, to the next nearest: the same rule, with no table
//!   to keep. Geolocation would need a country/continent per cluster and a default
//!   record, and a client in a country without a record would not get its nearest cluster.
//! - **Host names**: an AWS load balancer's host name (`*.<region>.elb.amazonaws.com`,
//!   `*.elb.<region>.amazonaws.com`) becomes an `A` alias record to the load balancer
//!   ([`super::alias`]), with `EvaluateTargetHealth`, when every target of the record set
//!   is one; any other host name makes the record set a CNAME (a CNAME cannot share its
//!   name with an `A` alias). In an `A` record set (clusters with addresses and clusters
//!   with only a host name), a load balancer joins as an alias record of the set's
//!   policy; another host name cannot join (no CNAME beside `A` records) and is left
//!   out, which the sync report says. Multivalue records cannot be aliases: a group with
//!   one becomes equal weights.
//! - TXT values are quoted as Route53 requires; values are kept sorted so that comparing
//!   what Route53 holds with what we want is exact.

use std::collections::BTreeMap;
use std::fmt;

use crate::publish::{HealthEndpoint, Policy, PolicyRecordSet, PublishedRecord, Target};
use aws_sdk_route53::types::{
    AliasTarget, Coordinates, GeoProximityLocation, ResourceRecord, ResourceRecordSet,
    ResourceRecordSetFailover, ResourceRecordSetRegion, RrType,
};
use fedingress_api::cluster::Provider as Cloud;
use fedingress_dns::Location;
use fedingress_dns::routing::distance_km;

use super::{alias, regions};

/// A record set's routing policy, as Route53 holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Routing {
    Simple,
    Weighted(i64),
    Multivalue,
    Failover(Role),
    /// The AWS region.
    Latency(String),
    /// Coordinates as Route53 holds them (two decimals), and the bias.
    GeoProximity {
        latitude: String,
        longitude: String,
        bias: i32,
    },
    /// A policy this provider never writes (geolocation, CIDR, geoproximity by region),
    /// described in words: only ever seen on record sets someone else made.
    Other(String),
}

/// A failover record's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    Primary,
    Secondary,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "PRIMARY",
            Role::Secondary => "SECONDARY",
        }
    }
}

/// An alias record's target.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Alias {
    pub hosted_zone_id: String,
    /// Lower case, without the trailing dot.
    pub dns_name: String,
    pub evaluate_target_health: bool,
}

/// One Route53 resource record set, normalised so that equal means "Route53 holds what
/// we want": names lower case without the trailing dot, values sorted, no TTL on aliases.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rrset {
    pub name: String,
    /// `A`, `AAAA`, `CNAME`, `TXT`, `SRV`, `NS`, …
    pub type_: String,
    pub set_identifier: Option<String>,
    pub routing: Routing,
    /// `None` on alias records.
    pub ttl: Option<i64>,
    pub values: Vec<String>,
    pub alias: Option<Alias>,
    pub health_check_id: Option<String>,
}

/// What identifies a record set in a zone: Route53 allows one per (name, type, set
/// identifier).
pub type RrsetKey = (String, String, Option<String>);

impl Rrset {
    pub fn key(&self) -> RrsetKey {
        (
            self.name.clone(),
            self.type_.clone(),
            self.set_identifier.clone(),
        )
    }

    /// Reads what Route53 returned. Record types are kept as strings, so that a foreign
    /// record set of a type we never write still round-trips for a delete.
    pub fn from_sdk(r: &ResourceRecordSet) -> Self {
        let routing = if let Some(w) = r.weight() {
            Routing::Weighted(w)
        } else if r.multi_value_answer() == Some(true) {
            Routing::Multivalue
        } else if let Some(f) = r.failover() {
            match f {
                ResourceRecordSetFailover::Primary => Routing::Failover(Role::Primary),
                ResourceRecordSetFailover::Secondary => Routing::Failover(Role::Secondary),
                other => Routing::Other(format!("failover {}", other.as_str())),
            }
        } else if let Some(region) = r.region() {
            Routing::Latency(region.as_str().to_string())
        } else if let Some(g) = r.geo_proximity_location() {
            match g.coordinates() {
                Some(c) => Routing::GeoProximity {
                    latitude: two_decimals_str(c.latitude()),
                    longitude: two_decimals_str(c.longitude()),
                    bias: g.bias().unwrap_or(0),
                },
                None => Routing::Other(format!(
                    "geoproximity {}",
                    g.aws_region().or(g.local_zone_group()).unwrap_or("?")
                )),
            }
        } else if let Some(g) = r.geo_location() {
            Routing::Other(format!(
                "geolocation {}",
                [g.continent_code(), g.country_code(), g.subdivision_code()]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join("-")
            ))
        } else if r.cidr_routing_config().is_some() {
            Routing::Other("cidr".into())
        } else {
            Routing::Simple
        };
        let alias = r.alias_target().map(|a| Alias {
            hosted_zone_id: a.hosted_zone_id().to_string(),
            dns_name: normalize_name(a.dns_name()),
            evaluate_target_health: a.evaluate_target_health(),
        });
        let mut values: Vec<String> = r
            .resource_records()
            .iter()
            .map(|v| v.value().to_string())
            .collect();
        values.sort();
        Rrset {
            name: normalize_name(r.name()),
            type_: r.r#type().as_str().to_string(),
            set_identifier: r.set_identifier().map(str::to_string),
            routing,
            ttl: if alias.is_some() { None } else { r.ttl() },
            values,
            alias,
            health_check_id: r.health_check_id().map(str::to_string),
        }
    }

    /// The SDK's record set, for a change. Fails only on an [`Routing::Other`] record set
    /// (which this provider never builds and never changes).
    pub fn to_sdk(&self) -> Result<ResourceRecordSet, String> {
        let mut b = ResourceRecordSet::builder()
            .name(&self.name)
            .r#type(RrType::from(self.type_.as_str()))
            .set_set_identifier(self.set_identifier.clone())
            .set_health_check_id(self.health_check_id.clone());
        b = match &self.routing {
            Routing::Simple => b,
            Routing::Weighted(w) => b.weight(*w),
            Routing::Multivalue => b.multi_value_answer(true),
            Routing::Failover(Role::Primary) => b.failover(ResourceRecordSetFailover::Primary),
            Routing::Failover(Role::Secondary) => b.failover(ResourceRecordSetFailover::Secondary),
            Routing::Latency(region) => b.region(ResourceRecordSetRegion::from(region.as_str())),
            Routing::GeoProximity {
                latitude,
                longitude,
                bias,
            } => b.geo_proximity_location(
                GeoProximityLocation::builder()
                    .coordinates(
                        Coordinates::builder()
                            .latitude(latitude)
                            .longitude(longitude)
                            .build()
                            .map_err(|e| e.to_string())?,
                    )
                    .bias(*bias)
                    .build(),
            ),
            Routing::Other(what) => {
                return Err(format!(
                    "{} {}: a {what} record set is not one this provider writes",
                    self.name, self.type_
                ));
            }
        };
        if let Some(a) = &self.alias {
            b = b.alias_target(
                AliasTarget::builder()
                    .hosted_zone_id(&a.hosted_zone_id)
                    .dns_name(&a.dns_name)
                    .evaluate_target_health(a.evaluate_target_health)
                    .build()
                    .map_err(|e| e.to_string())?,
            );
        } else {
            b = b.set_ttl(self.ttl);
            for v in &self.values {
                b = b.resource_records(
                    ResourceRecord::builder()
                        .value(v)
                        .build()
                        .map_err(|e| e.to_string())?,
                );
            }
        }
        b.build().map_err(|e| e.to_string())
    }

    /// The policy in words, as status and `fedctl describe` show it: `weighted 3`,
    /// `failover PRIMARY`, `latency eu-west-1`, `geoproximity 50.11,8.68`, `multivalue`,
    /// `alias` (a plain alias record), `simple`.
    pub fn policy_words(&self) -> String {
        match &self.routing {
            Routing::Simple if self.alias.is_some() => "alias".into(),
            Routing::Simple => "simple".into(),
            Routing::Weighted(w) => format!("weighted {w}"),
            Routing::Multivalue => "multivalue".into(),
            Routing::Failover(role) => format!("failover {}", role.as_str()),
            Routing::Latency(region) => format!("latency {region}"),
            Routing::GeoProximity {
                latitude,
                longitude,
                bias,
            } if *bias == 0 => format!("geoproximity {latitude},{longitude}"),
            Routing::GeoProximity {
                latitude,
                longitude,
                bias,
            } => format!("geoproximity {latitude},{longitude} bias {bias}"),
            Routing::Other(what) => what.clone(),
        }
    }

    /// As status shows it: alias records list their target (`alias:<name>`).
    pub fn published(&self) -> PublishedRecord {
        PublishedRecord {
            name: self.name.clone(),
            type_: self.type_.clone(),
            set_identifier: self.set_identifier.clone().unwrap_or_default(),
            policy: self.policy_words(),
            values: match &self.alias {
                Some(a) => vec![format!("alias:{}", a.dns_name)],
                None => self.values.clone(),
            },
            health_check: self.health_check_id.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for Rrset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.type_)?;
        if let Some(id) = &self.set_identifier {
            write!(f, " [{id}]")?;
        }
        write!(f, " ({})", self.policy_words())
    }
}

/// Lower case, without the trailing dot, with Route53's `\052` escape for `*` undone.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.')
        .replace("\\052", "*")
        .to_ascii_lowercase()
}

fn two_decimals(x: f64) -> String {
    format!("{x:.2}")
}

/// A coordinate Route53 returned, in the form we write it (it may drop trailing zeros).
fn two_decimals_str(s: &str) -> String {
    s.parse::<f64>()
        .map(two_decimals)
        .unwrap_or_else(|_| s.to_string())
}

/// The record sets for one [`PolicyRecordSet`], and the health endpoints their
/// records refer to. Health check ids are filled in by the caller with
/// [`Native::resolve_health_checks`] once the checks exist.
#[derive(Clone, Debug, Default)]
pub struct Native {
    pub rrsets: Vec<Rrset>,
    /// Per record set (same index as `rrsets`), the endpoint whose health check guards it.
    pub health: Vec<Option<HealthEndpoint>>,
    /// Targets left out, for the sync report (a host name in an `A` record set that is
    /// not an AWS load balancer: Route53 cannot mix a CNAME into it).
    pub left_out: Vec<String>,
}

impl Native {
    /// Sets each record's `HealthCheckId` from `id_of` (the health check of an endpoint;
    /// `None`: no check, e.g. health checks are disabled).
    pub fn resolve_health_checks(&mut self, id_of: impl Fn(&HealthEndpoint) -> Option<String>) {
        for (r, h) in self.rrsets.iter_mut().zip(&self.health) {
            r.health_check_id = h.as_ref().and_then(&id_of);
        }
    }
}

/// What one target answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    /// Its values, in records of the record set's type.
    Values(Vec<String>),
    /// An alias record to an AWS load balancer.
    Elb(Alias),
    /// A CNAME to its host name.
    Cname(String),
}

struct Builder<'a> {
    set: &'a PolicyRecordSet,
    hosted_zone_id: &'a str,
    /// A CNAME record set whose host names are all AWS load balancers: `A` aliases.
    cname_as_alias: bool,
    out: Native,
}

type Members<'a> = Vec<(&'a Target, Answer)>;

/// The record sets Route53 should hold for `set` in the hosted zone `hosted_zone_id`
/// (the alias target of the helper names). Empty targets: nothing (the record sets go).
pub fn native(set: &PolicyRecordSet, hosted_zone_id: &str) -> Native {
    let is_cname = set.type_.as_str() == "CNAME";
    let cname_as_alias = is_cname
        && !set.targets.is_empty()
        && set
            .targets
            .iter()
            .all(|t| hostname_of(t).is_some_and(|h| alias::elb_target(h).is_some()));
    let mut b = Builder {
        set,
        hosted_zone_id,
        cname_as_alias,
        out: Native::default(),
    };
    let mut targets: Members<'_> = Vec::new();
    for t in &set.targets {
        match b.answer(t) {
            Some(a) => targets.push((t, a)),
            None => b.out.left_out.push(format!(
                "{}: host name {} is not an AWS load balancer, and a CNAME cannot join \
                 the {} record set",
                t.cluster,
                t.hostname.as_deref().unwrap_or("(none)"),
                set.type_.as_str()
            )),
        }
    }
    if targets.is_empty() {
        return b.out;
    }
    let name = set.name.as_str();
    match set.policy {
        Policy::Simple => b.simple(name, &targets),
        Policy::Weighted => {
            let weights = scale_weights(&targets.iter().map(|(t, _)| t.weight).collect::<Vec<_>>());
            for ((t, a), w) in targets.iter().zip(weights) {
                b.direct(name, t, a, Routing::Weighted(w));
            }
        }
        Policy::Multivalue => b.group(name, &targets),
        Policy::Failover => {
            let mut tiers: BTreeMap<u32, Members<'_>> = BTreeMap::new();
            for (t, a) in &targets {
                tiers.entry(t.tier).or_default().push((t, a.clone()));
            }
            let tiers: Vec<(u32, Members<'_>)> = tiers.into_iter().collect();
            if tiers.len() == 1 {
                b.group(name, &tiers[0].1);
            } else {
                b.failover_level(name, &tiers);
            }
        }
        Policy::Latency => {
            let mut by_region: BTreeMap<String, Members<'_>> = BTreeMap::new();
            for (t, a) in &targets {
                by_region
                    .entry(latency_region(t))
                    .or_default()
                    .push((t, a.clone()));
            }
            for (region, members) in by_region {
                let routing = Routing::Latency(region.clone());
                if let [(t, a)] = members.as_slice() {
                    b.direct(name, t, a, routing);
                } else {
                    let helper = format!("_{region}.{name}");
                    b.alias_to(name, &helper, region.clone(), routing);
                    b.group(&helper, &members);
                }
            }
        }
        Policy::Geo => {
            for (t, a) in &targets {
                let routing = Routing::GeoProximity {
                    latitude: two_decimals(t.location.latitude),
                    longitude: two_decimals(t.location.longitude),
                    bias: 0,
                };
                b.direct(name, t, a, routing);
            }
        }
    }
    b.out
}

fn hostname_of(t: &Target) -> Option<&str> {
    t.hostname
        .as_deref()
        .or_else(|| t.values.first().map(String::as_str))
}

/// The AWS region of a latency record for `t`.
pub fn latency_region(t: &Target) -> String {
    if t.cloud == Cloud::Aws && regions::REGIONS.contains(&t.location.region) {
        t.location.region.clone()
    } else {
        regions::REGIONS.nearest(&t.location).to_string()
    }
}

/// Route53 weights (0..=255) keeping the ratios of `weights` (see the module docs).
pub fn scale_weights(weights: &[u32]) -> Vec<i64> {
    let max = weights.iter().copied().max().unwrap_or(0);
    if max <= 255 {
        return weights.iter().map(|&w| i64::from(w)).collect();
    }
    weights
        .iter()
        .map(|&w| {
            if w == 0 {
                0
            } else {
                ((f64::from(w) * 255.0 / f64::from(max)).round() as i64).clamp(1, 255)
            }
        })
        .collect()
}

impl Builder<'_> {
    fn answer(&self, t: &Target) -> Option<Answer> {
        if self.set.type_.as_str() == "CNAME" {
            let host = hostname_of(t)?;
            return Some(if self.cname_as_alias {
                Answer::Elb(elb_alias(host)?)
            } else {
                Answer::Cname(normalize_name(host))
            });
        }
        if !t.values.is_empty() {
            let mut v: Vec<String> = t.values.iter().map(|v| self.value(v)).collect();
            v.sort();
            v.dedup();
            return Some(Answer::Values(v));
        }
        t.hostname.as_deref().and_then(elb_alias).map(Answer::Elb)
    }

    /// TXT values must be quoted strings in Route53.
    fn value(&self, v: &str) -> String {
        if self.set.type_.as_str() == "TXT" && !v.starts_with('"') {
            format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
        } else {
            v.to_string()
        }
    }

    /// The record type of aliases: a CNAME record set of load balancers is `A` aliases.
    fn alias_type(&self) -> String {
        if self.set.type_.as_str() == "CNAME" {
            "A".to_string()
        } else {
            self.set.type_.as_str().to_string()
        }
    }

    fn record(&self, name: &str, id: Option<String>, answer: &Answer, routing: Routing) -> Rrset {
        let (type_, ttl, values, alias) = match answer {
            Answer::Values(v) => (
                self.set.type_.as_str().to_string(),
                Some(i64::from(self.set.ttl)),
                v.clone(),
                None,
            ),
            Answer::Elb(a) => (self.alias_type(), None, Vec::new(), Some(a.clone())),
            Answer::Cname(h) => (
                "CNAME".to_string(),
                Some(i64::from(self.set.ttl)),
                vec![h.clone()],
                None,
            ),
        };
        Rrset {
            name: name.to_string(),
            type_,
            set_identifier: id,
            routing,
            ttl,
            values,
            alias,
            health_check_id: None,
        }
    }

    fn push(&mut self, r: Rrset, health: Option<HealthEndpoint>) {
        self.out.rrsets.push(r);
        self.out.health.push(health);
    }

    /// One plain record set: every target's values together. A record set of aliases or
    /// CNAMEs holds one: several become equal weights.
    fn simple(&mut self, name: &str, targets: &[(&Target, Answer)]) {
        let mut values: Vec<String> = targets
            .iter()
            .filter_map(|(_, a)| match a {
                Answer::Values(v) => Some(v.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        values.sort();
        values.dedup();
        if !values.is_empty() {
            let r = self.record(name, None, &Answer::Values(values), Routing::Simple);
            self.push(r, None);
        } else if let [(_, a)] = targets {
            let r = self.record(name, None, a, Routing::Simple);
            self.push(r, None);
        } else {
            self.equal_weights(name, targets);
        }
    }

    /// One record set for target `t` at `name`, with its health check. An alias to an
    /// AWS load balancer has none: `EvaluateTargetHealth` already follows the load
    /// balancer's own target health, and a Route53 health check on top would be billed
    /// and add nothing.
    fn direct(&mut self, name: &str, t: &Target, answer: &Answer, routing: Routing) {
        let r = self.record(name, Some(t.cluster.clone()), answer, routing);
        let health = match answer {
            Answer::Elb(_) => None,
            Answer::Values(_) | Answer::Cname(_) => t.health.clone(),
        };
        self.push(r, health);
    }

    /// The targets as a group that answers with every healthy one: multivalue records,
    /// or equal weights where multivalue is not allowed (CNAME, alias).
    fn group(&mut self, name: &str, targets: &[(&Target, Answer)]) {
        if targets.iter().all(|(_, a)| matches!(a, Answer::Values(_))) {
            for (t, a) in targets {
                self.direct(name, t, a, Routing::Multivalue);
            }
        } else {
            self.equal_weights(name, targets);
        }
    }

    fn equal_weights(&mut self, name: &str, targets: &[(&Target, Answer)]) {
        for (t, a) in targets {
            self.direct(name, t, a, Routing::Weighted(1));
        }
    }

    /// An alias at `name` (set identifier `id`) to the record sets at `helper` in this
    /// zone, healthy while one of them is.
    fn alias_to(&mut self, name: &str, helper: &str, id: String, routing: Routing) {
        let r = Rrset {
            name: name.to_string(),
            type_: self.alias_type(),
            set_identifier: Some(id),
            routing,
            ttl: None,
            values: Vec::new(),
            alias: Some(Alias {
                hosted_zone_id: self.hosted_zone_id.to_string(),
                dns_name: helper.to_string(),
                evaluate_target_health: true,
            }),
            health_check_id: None,
        };
        self.push(r, None);
    }

    /// PRIMARY = `tiers[0]` and SECONDARY = the rest, at `name`; the rest recursively at
    /// `_f<tier>.<set name>` when it is more than one tier.
    fn failover_level(&mut self, name: &str, tiers: &[(u32, Members<'_>)]) {
        self.tier_entry(name, &tiers[0], Role::Primary);
        if tiers.len() == 2 {
            self.tier_entry(name, &tiers[1], Role::Secondary);
        } else {
            let next = format!("_f{}.{}", tiers[1].0, self.set.name);
            self.alias_to(
                name,
                &next,
                format!("tiers-{}+", tiers[1].0),
                Routing::Failover(Role::Secondary),
            );
            self.failover_level(&next, &tiers[1..]);
        }
    }

    fn tier_entry(&mut self, name: &str, (tier, members): &(u32, Members<'_>), role: Role) {
        if let [(t, a)] = members.as_slice() {
            self.direct(name, t, a, Routing::Failover(role));
        } else {
            let helper = format!("_t{tier}.{}", self.set.name);
            self.alias_to(
                name,
                &helper,
                format!("tier-{tier}"),
                Routing::Failover(role),
            );
            self.group(&helper, members);
        }
    }
}

fn elb_alias(hostname: &str) -> Option<Alias> {
    alias::elb_target(hostname).map(|t| Alias {
        hosted_zone_id: t.hosted_zone_id.to_string(),
        dns_name: normalize_name(hostname),
        evaluate_target_health: true,
    })
}

/// Which of `records` (one DNS name's, as [`Rrset::published`] made them) a client at
/// `client` gets, as Route53 chooses, in one sentence. Route53 measures latency and we
/// cannot: for latency records the nearest region stands in for the lowest latency.
pub fn explain(records: &[PublishedRecord], client: &Location) -> String {
    let Some(top_name) = records
        .iter()
        .map(|r| r.name.as_str())
        .min_by_key(|n| (n.starts_with('_'), n.len()))
    else {
        return "Route53 holds no record for this name".into();
    };
    let top: Vec<&PublishedRecord> = records.iter().filter(|r| r.name == top_name).collect();
    let label = |r: &PublishedRecord| {
        if r.set_identifier.is_empty() {
            r.values.join(" ")
        } else {
            format!("{} ({})", r.set_identifier, r.values.join(" "))
        }
    };
    let kind = top[0].policy.split(' ').next().unwrap_or_default();
    match kind {
        "geoproximity" => {
            let mut best: Option<(f64, &PublishedRecord)> = None;
            for r in &top {
                let Some(at) = r.policy.split(' ').nth(1).and_then(parse_coordinates) else {
                    continue;
                };
                let km = distance_km(client, &at);
                if best.is_none_or(|(b, _)| km < b) {
                    best = Some((km, r));
                }
            }
            match best {
                Some((km, r)) => format!(
                    "geoproximity: the nearest record, {} at {:.0} km; the next nearest if \
                     its health check fails",
                    label(r),
                    km
                ),
                None => "geoproximity: no record with coordinates".into(),
            }
        }
        "latency" => {
            let mut best: Option<(f64, &PublishedRecord)> = None;
            for r in &top {
                let Some(region) = r.policy.split(' ').nth(1) else {
                    continue;
                };
                let Some(at) = regions::REGIONS.location(region) else {
                    continue;
                };
                let km = distance_km(client, &at);
                if best.is_none_or(|(b, _)| km < b) {
                    best = Some((km, r));
                }
            }
            match best {
                Some((_, r)) => format!(
                    "latency: {}, in {}, the region nearest to the client (Route53 \
                     measures latency; distance stands in for it here)",
                    label(r),
                    r.policy.trim_start_matches("latency ")
                ),
                None => "latency: no record with a known region".into(),
            }
        }
        "failover" => {
            let role = |role: &str| top.iter().find(|r| r.policy == format!("failover {role}"));
            match (role("PRIMARY"), role("SECONDARY")) {
                (Some(p), Some(s)) => format!(
                    "failover: PRIMARY {} while it is healthy, otherwise SECONDARY {}",
                    label(p),
                    label(s)
                ),
                (Some(p), None) => format!("failover: PRIMARY {}", label(p)),
                (None, Some(s)) => format!("failover: SECONDARY {} (no primary)", label(s)),
                (None, None) => "failover: no record".into(),
            }
        }
        "weighted" => {
            let weights: Vec<(i64, &PublishedRecord)> = top
                .iter()
                .map(|r| {
                    let w = r
                        .policy
                        .split(' ')
                        .nth(1)
                        .and_then(|w| w.parse().ok())
                        .unwrap_or(0);
                    (w, *r)
                })
                .collect();
            let total: i64 = weights.iter().map(|(w, _)| w).sum();
            let shares: Vec<String> = weights
                .iter()
                .map(|(w, r)| {
                    let share = if total == 0 {
                        100.0 / weights.len() as f64
                    } else {
                        *w as f64 * 100.0 / total as f64
                    };
                    format!("{} {share:.0}%", label(r))
                })
                .collect();
            format!(
                "weighted: one healthy record per query, at random by weight: {}",
                shares.join(", ")
            )
        }
        "multivalue" => format!(
            "multivalue: every healthy record (up to eight): {}",
            top.iter().map(|r| label(r)).collect::<Vec<_>>().join(", ")
        ),
        _ => format!(
            "{}: everyone gets {}",
            top[0].policy,
            top.iter().map(|r| label(r)).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn parse_coordinates(s: &str) -> Option<Location> {
    let (lat, lon) = s.split_once(',')?;
    Some(Location {
        region: String::new(),
        latitude: lat.parse().ok()?,
        longitude: lon.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::ingress::RecordType;

    fn target(
        cluster: &str,
        ip: &str,
        tier: u32,
        weight: u32,
        at: (f64, f64),
        region: &str,
    ) -> Target {
        Target {
            cluster: cluster.into(),
            values: vec![ip.into()],
            hostname: None,
            weight,
            tier,
            location: Location {
                region: region.into(),
                latitude: at.0,
                longitude: at.1,
            },
            cloud: Cloud::Aws,
            health: None,
        }
    }

    fn set(policy: Policy, targets: Vec<Target>) -> PolicyRecordSet {
        PolicyRecordSet {
            name: "shop.example.com".into(),
            type_: RecordType::A,
            ttl: 30,
            owner_ref: "default/shop".into(),
            dns_name: "shop.example.com".into(),
            policy,
            targets,
        }
    }

    #[test]
    fn weights_keep_their_ratios_within_255() {
        assert_eq!(scale_weights(&[3, 1]), vec![3, 1]);
        assert_eq!(scale_weights(&[1000, 500, 1, 0]), vec![255, 128, 1, 0]);
    }

    #[test]
    fn three_tiers_chain_through_helper_names() {
        let s = set(
            Policy::Failover,
            vec![
                target("a", "192.0.2.1", 0, 1, (0.0, 0.0), "eu-west-1"),
                target("b", "192.0.2.2", 0, 1, (0.0, 0.0), "eu-west-1"),
                target("c", "192.0.2.3", 1, 1, (0.0, 0.0), "eu-west-1"),
                target("d", "192.0.2.4", 2, 1, (0.0, 0.0), "eu-west-1"),
            ],
        );
        let n = native(&s, "ZONE");
        let got: Vec<String> = n.rrsets.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            got,
            [
                "shop.example.com A [tier-0] (failover PRIMARY)",
                "_t0.shop.example.com A [a] (multivalue)",
                "_t0.shop.example.com A [b] (multivalue)",
                "shop.example.com A [tiers-1+] (failover SECONDARY)",
                "_f1.shop.example.com A [c] (failover PRIMARY)",
                "_f1.shop.example.com A [d] (failover SECONDARY)",
            ]
        );
        assert_eq!(
            n.rrsets[0].alias.as_ref().unwrap().dns_name,
            "_t0.shop.example.com"
        );
        assert_eq!(n.rrsets[3].alias.as_ref().unwrap().hosted_zone_id, "ZONE");
    }

    #[test]
    fn latency_regions_from_aws_clusters_or_the_nearest() {
        let mut onprem = target("dc", "192.0.2.9", 0, 1, (50.11, 8.68), "frankfurt");
        onprem.cloud = Cloud::OnPrem;
        let aws = target("aws", "192.0.2.8", 0, 1, (0.0, 0.0), "us-west-2");
        let n = native(&set(Policy::Latency, vec![aws, onprem]), "Z");
        let got: Vec<String> = n.rrsets.iter().map(|r| r.policy_words()).collect();
        assert_eq!(got, ["latency eu-central-1", "latency us-west-2"]);
    }

    #[test]
    fn elb_host_names_become_aliases_and_others_cnames() {
        let mut t = target("eu", "", 0, 1, (0.0, 0.0), "eu-west-1");
        t.values.clear();
        t.hostname = Some("lb-1.eu-west-1.elb.amazonaws.com".into());
        let mut s = set(Policy::Weighted, vec![t.clone()]);
        s.type_ = RecordType::Cname;
        let n = native(&s, "Z");
        assert_eq!(n.rrsets[0].type_, "A");
        assert_eq!(
            n.rrsets[0].alias.as_ref().unwrap().hosted_zone_id,
            "Z32O12XQLNTSW2"
        );
        let mut other = t.clone();
        other.cluster = "us".into();
        other.hostname = Some("lb.example.net".into());
        s.targets.push(other);
        let n = native(&s, "Z");
        assert!(
            n.rrsets
                .iter()
                .all(|r| r.type_ == "CNAME" && r.alias.is_none())
        );
    }

    #[test]
    fn explain_picks_as_route53_would() {
        let frankfurt = Location {
            region: "client".into(),
            latitude: 50.0,
            longitude: 8.0,
        };
        let s = set(
            Policy::Geo,
            vec![
                target("eu", "192.0.2.1", 0, 1, (50.11, 8.68), "eu-central-1"),
                target("us", "192.0.2.2", 0, 1, (39.04, -77.49), "us-east-1"),
            ],
        );
        let records: Vec<PublishedRecord> = native(&s, "Z")
            .rrsets
            .iter()
            .map(Rrset::published)
            .collect();
        assert_eq!(records[0].policy, "geoproximity 50.11,8.68");
        assert!(explain(&records, &frankfurt).contains("eu (192.0.2.1)"));
        let s = set(
            Policy::Weighted,
            vec![
                target("eu", "192.0.2.1", 0, 3, (0.0, 0.0), "x"),
                target("us", "192.0.2.2", 0, 1, (0.0, 0.0), "x"),
            ],
        );
        let records: Vec<PublishedRecord> = native(&s, "Z")
            .rrsets
            .iter()
            .map(Rrset::published)
            .collect();
        assert!(explain(&records, &frankfurt).contains("eu (192.0.2.1) 75%, us (192.0.2.2) 25%"));
    }
}
