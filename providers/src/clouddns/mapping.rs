//! Provider-neutral record sets → Cloud DNS record sets (pure), what they look like in
//! status, and which record a client gets.
//!
//! [`Rrset`] is this provider's own model of a Cloud DNS `ResourceRecordSet`: the
//! shapes it writes and nothing else. The generated `google-cloud-dns-v1` types stay in
//! [`super::wire`]; a record set listed from Cloud DNS in a shape this model does not
//! hold (internal load balancer targets, geo fencing, both rrdatas and a policy) becomes
//! [`Data::Other`], which never equals a desired one, so it is replaced when owned.
//!
//! The mapping decisions are documented on [`super`] (the module docs), in one table.

use std::collections::BTreeMap;

use crate::publish::plan::{MARKER_TTL, NativeRecordSet};
use crate::publish::{Policy, PolicyRecordSet, PublishedRecord, Target};
use fedingress_api::cluster::Provider as Cloud;
use fedingress_api::ingress::RecordType;
use fedingress_dns::Location;
use fedingress_dns::routing::distance_km;

use super::regions;

/// A Cloud DNS resource record set as this provider writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Rrset {
    /// Fully qualified, lower case, without the trailing dot (as `plan` wants names;
    /// [`super::wire`] adds the dot Cloud DNS stores).
    pub name: String,
    /// `A`, `AAAA`, `CNAME`, `NS`, `TXT`, …
    pub type_: String,
    pub ttl: u32,
    pub data: Data,
}

/// What a record set answers: static `rrdatas` or one routing policy (Cloud DNS allows
/// one or the other, never both).
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// `rrdatas`: the same answer for everyone.
    Plain(Vec<String>),
    /// `routingPolicy.geo`: the item of the Google Cloud region nearest the client.
    Geo {
        items: Vec<GeoItem>,
        health_check: Option<String>,
    },
    /// `routingPolicy.wrr`: an item at random in proportion to its weight.
    Wrr {
        items: Vec<WrrItem>,
        health_check: Option<String>,
    },
    /// `routingPolicy.primaryBackup`: the primary targets while any passes its health
    /// check, else the backup geo items.
    PrimaryBackup {
        primary: Vec<String>,
        backup: Vec<GeoItem>,
        trickle_traffic: f64,
        health_check: Option<String>,
    },
    /// Listed from Cloud DNS in a shape this provider does not write.
    Other(String),
}

impl Rrset {
    /// Record data sorted within each list and geo items by location: Cloud DNS keeps
    /// sets of record data, so a record set read back in another order is the same one
    /// (deletions still send the listed form, untouched).
    pub fn normalised(mut self) -> Self {
        let sort = |v: &mut Vec<String>| v.sort();
        match &mut self.data {
            Data::Plain(rrdatas) => sort(rrdatas),
            Data::Geo { items, .. } => sort_geo(items),
            Data::Wrr { items, .. } => {
                for item in items {
                    sort(&mut item.rrdatas);
                    sort(&mut item.health_checked);
                }
            }
            Data::PrimaryBackup {
                primary, backup, ..
            } => {
                sort(primary);
                sort_geo(backup);
            }
            Data::Other(_) => {}
        }
        self
    }
}

fn sort_geo(items: &mut [GeoItem]) {
    for item in items.iter_mut() {
        item.rrdatas.sort();
        item.health_checked.sort();
    }
    items.sort_by(|a, b| a.location.cmp(&b.location));
}

impl NativeRecordSet for Rrset {
    fn name(&self) -> &str {
        &self.name
    }

    fn type_(&self) -> &str {
        &self.type_
    }

    fn txt_values(&self) -> Vec<String> {
        match &self.data {
            Data::Plain(rrdatas) if self.type_ == "TXT" => rrdatas.clone(),
            _ => Vec::new(),
        }
    }

    fn marker(name: &str, value: &str) -> Self {
        Rrset {
            name: name.to_string(),
            type_: "TXT".into(),
            ttl: MARKER_TTL,
            data: Data::Plain(vec![value.to_string()]),
        }
    }
}

/// One `geo.items[]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct GeoItem {
    /// A Google Cloud region.
    pub location: String,
    /// Returned whatever their health.
    pub rrdatas: Vec<String>,
    /// `healthCheckedTargets.externalEndpoints`: returned while healthy.
    pub health_checked: Vec<String>,
}

/// One `wrr.items[]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct WrrItem {
    pub weight: f64,
    pub rrdatas: Vec<String>,
    pub health_checked: Vec<String>,
}

/// One desired record set in Cloud DNS terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Mapped {
    /// `None`: the record set should not exist (nothing Cloud DNS can hold is left).
    pub rrset: Option<Rrset>,
    /// Clusters behind each item (geo, wrr, primaryBackup: primary first, then each
    /// backup item), for status; Cloud DNS items carry no label of their own.
    pub item_clusters: Vec<Vec<String>>,
    /// What could not be expressed and was left out, for people.
    pub notes: Vec<String>,
}

/// The managed zone's fully qualified form of `name` (trailing dot, lower case).
pub fn fqdn(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.').to_ascii_lowercase())
}

/// The Compute Engine URL of a health check given as `projects/P/global/healthChecks/N`
/// or already as a URL: the form the API documents for `routingPolicy.healthCheck`, so
/// that what is written compares equal with what is listed back.
pub fn health_check_url(health_check: &str) -> String {
    if health_check.starts_with("https://") || health_check.starts_with("http://") {
        health_check.to_string()
    } else {
        format!(
            "https://www.googleapis.com/compute/v1/{}",
            health_check.trim_start_matches('/')
        )
    }
}

/// The Google Cloud region a cluster's geo item sits in: its own `spec.region` on
/// `gcp` (when it is one), else the region nearest its coordinates.
pub fn region_of(target: &Target) -> String {
    if target.cloud == Cloud::Gcp
        && regions::GCP_REGIONS
            .location(&target.location.region)
            .is_some()
    {
        return target.location.region.clone();
    }
    regions::GCP_REGIONS.nearest(&target.location).to_string()
}

/// A target's record data for a record set of `type_`: its values, or its host name
/// (with the trailing dot) for CNAME; TXT values quoted as Cloud DNS's `rrdatas` want.
fn rrdatas_of(type_: RecordType, target: &Target) -> Vec<String> {
    match type_ {
        RecordType::Cname => target.hostname.iter().map(|h| fqdn(h)).collect(),
        RecordType::Txt => target.values.iter().map(|v| quote_txt(v)).collect(),
        _ => target.values.clone(),
    }
}

/// `"text"` with `"` and `\` escaped (RFC 1035 character-string), unless already
/// quoted.
pub fn quote_txt(text: &str) -> String {
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        return text.to_string();
    }
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// Maps one desired record set. `health_check`: `dns.providers[].healthCheck`, whose
/// presence turns the cluster IPs of A/AAAA routing policies into health-checked
/// external endpoints.
pub fn map(set: &PolicyRecordSet, health_check: Option<&str>) -> Mapped {
    let mut notes = Vec::new();
    // Targets Cloud DNS can hold: a host name-only cluster in an A/AAAA record set
    // cannot be aliased (Cloud DNS has no alias to a load balancer name).
    let targets: Vec<&Target> = set
        .targets
        .iter()
        .filter(|t| {
            let usable = match set.type_ {
                RecordType::Cname => t.hostname.is_some(),
                _ => !t.values.is_empty(),
            };
            if !usable {
                notes.push(format!(
                    "cluster {} has only the host name {} and Cloud DNS cannot alias it in \
                     a {} record set: left out",
                    t.cluster,
                    t.hostname.as_deref().unwrap_or("-"),
                    set.type_.as_str()
                ));
            }
            usable
        })
        .collect();
    let empty = Mapped {
        rrset: None,
        item_clusters: Vec::new(),
        notes: notes.clone(),
    };
    if targets.is_empty() {
        return empty;
    }
    let checked = health_check
        .filter(|_| matches!(set.type_, RecordType::A | RecordType::Aaaa))
        .map(health_check_url);
    let rrset = |data: Data| Rrset {
        name: crate::config::normalize(&set.name),
        type_: set.type_.as_str().to_string(),
        ttl: set.ttl,
        data,
    };
    let cname = set.type_ == RecordType::Cname;
    let mut item_clusters = Vec::new();
    let data = match set.policy {
        Policy::Simple | Policy::Multivalue => plain(set.type_, &targets, &mut notes),
        Policy::Weighted => {
            let items = targets
                .iter()
                .map(|t| {
                    item_clusters.push(vec![t.cluster.clone()]);
                    let (rrdatas, health_checked) = split(set.type_, t, checked.is_some());
                    WrrItem {
                        weight: f64::from(t.weight),
                        rrdatas,
                        health_checked,
                    }
                })
                .collect();
            Data::Wrr {
                items,
                health_check: checked.clone(),
            }
        }
        Policy::Geo | Policy::Latency => {
            let (items, clusters) = geo_items(set.type_, &targets, checked.is_some(), &mut notes);
            item_clusters = clusters;
            Data::Geo {
                items,
                health_check: checked.clone(),
            }
        }
        Policy::Failover => {
            let first = targets.iter().map(|t| t.tier).min().unwrap_or(0);
            let (active, later): (Vec<&Target>, Vec<&Target>) =
                targets.iter().partition(|t| t.tier == first);
            match &checked {
                Some(_) if !cname => {
                    let primary: Vec<String> =
                        dedup(active.iter().flat_map(|t| t.values.iter().cloned()));
                    item_clusters.push(active.iter().map(|t| t.cluster.clone()).collect());
                    // Without a later tier, the backup is the primary tier itself,
                    // unchecked: when every primary fails its check clients still get
                    // them (fail open, as the embedded server's ServeAll).
                    let (backup, clusters) = if later.is_empty() {
                        geo_items(set.type_, &active, false, &mut notes)
                    } else {
                        geo_items(set.type_, &later, true, &mut notes)
                    };
                    item_clusters.extend(clusters);
                    Data::PrimaryBackup {
                        primary,
                        backup,
                        trickle_traffic: 0.0,
                        health_check: checked.clone(),
                    }
                }
                _ => {
                    if later.is_empty() {
                        plain(set.type_, &active, &mut notes)
                    } else {
                        notes.push(format!(
                            "failover without a Cloud DNS health check (dns.providers[].healthCheck) \
                             is published as the active tier only ({}); the hub moves it",
                            active
                                .iter()
                                .map(|t| t.cluster.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                        plain(set.type_, &active, &mut notes)
                    }
                }
            }
        }
    };
    Mapped {
        rrset: Some(rrset(data).normalised()),
        item_clusters,
        notes,
    }
}

/// The targets' record data as one plain record set (a CNAME holds one name: the
/// first target's).
fn plain(type_: RecordType, targets: &[&Target], notes: &mut Vec<String>) -> Data {
    let mut rrdatas = dedup(targets.iter().flat_map(|t| rrdatas_of(type_, t)));
    if type_ == RecordType::Cname && rrdatas.len() > 1 {
        notes.push(format!(
            "a CNAME holds one name: {} published, {} left out",
            rrdatas[0],
            rrdatas[1..].join(", ")
        ));
        rrdatas.truncate(1);
    }
    Data::Plain(rrdatas)
}

/// A target's (rrdatas, healthCheckedTargets.externalEndpoints): its IPs go to the
/// latter when a health check guards the record set.
fn split(type_: RecordType, target: &Target, checked: bool) -> (Vec<String>, Vec<String>) {
    if checked {
        (Vec::new(), target.values.clone())
    } else {
        (rrdatas_of(type_, target), Vec::new())
    }
}

/// Geo items, one per Google Cloud region (the API refuses two items with the same
/// location): the clusters of a region together, regions sorted by name.
fn geo_items(
    type_: RecordType,
    targets: &[&Target],
    checked: bool,
    notes: &mut Vec<String>,
) -> (Vec<GeoItem>, Vec<Vec<String>>) {
    let mut by_region: BTreeMap<String, (GeoItem, Vec<String>)> = BTreeMap::new();
    for target in targets {
        let location = region_of(target);
        let (item, clusters) = by_region.entry(location.clone()).or_insert_with(|| {
            (
                GeoItem {
                    location,
                    rrdatas: Vec::new(),
                    health_checked: Vec::new(),
                },
                Vec::new(),
            )
        });
        let (rrdatas, health_checked) = split(type_, target, checked);
        if type_ == RecordType::Cname && !item.rrdatas.is_empty() {
            notes.push(format!(
                "a CNAME geo item holds one name: cluster {} shares {} with {} and is left out",
                target.cluster,
                item.location,
                clusters.join(", ")
            ));
            continue;
        }
        clusters.push(target.cluster.clone());
        item.rrdatas = dedup(item.rrdatas.drain(..).chain(rrdatas));
        item.health_checked = dedup(item.health_checked.drain(..).chain(health_checked));
    }
    by_region.into_values().unzip()
}

/// In first-seen order, without repeats.
fn dedup(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// How a record set looks in status and `fedctl describe`: one [`PublishedRecord`] per
/// item. `item_clusters` (from [`Mapped`]) labels the items when known.
pub fn published(rrset: &Rrset, item_clusters: &[Vec<String>]) -> Vec<PublishedRecord> {
    let name = rrset.name.clone();
    let label = |i: usize| {
        item_clusters
            .get(i)
            .map(|c| c.join(","))
            .unwrap_or_default()
    };
    let record =
        |i: usize, policy: String, values: Vec<String>, hc: &Option<String>| PublishedRecord {
            name: name.clone(),
            type_: rrset.type_.clone(),
            set_identifier: label(i),
            policy,
            values,
            health_check: hc.clone().unwrap_or_default(),
        };
    // A policy item: what it returns whatever their health, then its health-checked
    // targets, which the policy's health check guards.
    let item =
        |i: usize, policy: String, rrdatas: &[String], checked: &[String], hc: &Option<String>| {
            let hc = if checked.is_empty() { &None } else { hc };
            record(
                i,
                policy,
                rrdatas.iter().chain(checked).cloned().collect(),
                hc,
            )
        };
    match &rrset.data {
        Data::Plain(rrdatas) => vec![record(usize::MAX, "simple".into(), rrdatas.clone(), &None)],
        Data::Geo {
            items,
            health_check,
        } => items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                item(
                    i,
                    format!("geo {}", it.location),
                    &it.rrdatas,
                    &it.health_checked,
                    health_check,
                )
            })
            .collect(),
        Data::Wrr {
            items,
            health_check,
        } => items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                item(
                    i,
                    format!("wrr {}", it.weight),
                    &it.rrdatas,
                    &it.health_checked,
                    health_check,
                )
            })
            .collect(),
        Data::PrimaryBackup {
            primary,
            backup,
            health_check,
            ..
        } => std::iter::once(record(
            0,
            "primaryBackup primary".into(),
            primary.clone(),
            health_check,
        ))
        .chain(backup.iter().enumerate().map(|(i, it)| {
            item(
                i + 1,
                format!("primaryBackup backup {}", it.location),
                &it.rrdatas,
                &it.health_checked,
                health_check,
            )
        }))
        .collect(),
        Data::Other(what) => vec![record(
            usize::MAX,
            format!("other ({what})"),
            Vec::new(),
            &None,
        )],
    }
}

/// Which of `records` (one name's, as [`published`] made them) a client at `client`
/// gets, as Cloud DNS chooses, in one sentence per record type.
pub fn explain(records: &[PublishedRecord], client: &Location) -> String {
    if records.is_empty() {
        return "Cloud DNS holds no record for this name: clients get NXDOMAIN or NODATA".into();
    }
    let mut by_type: BTreeMap<&str, Vec<&PublishedRecord>> = BTreeMap::new();
    for r in records {
        by_type.entry(r.type_.as_str()).or_default().push(r);
    }
    let client_region = regions::GCP_REGIONS.nearest(client);
    by_type
        .into_iter()
        .map(|(type_, records)| explain_type(type_, &records, client, client_region))
        .collect::<Vec<_>>()
        .join("; ")
}

fn explain_type(
    type_: &str,
    records: &[&PublishedRecord],
    client: &Location,
    client_region: &str,
) -> String {
    let values = |r: &PublishedRecord| r.values.join(" ");
    let nearest_geo = |geo: &[&&PublishedRecord], prefix: &str| -> Option<String> {
        geo.iter()
            .filter_map(|r| {
                let region = r.policy.strip_prefix(prefix)?;
                let at = regions::GCP_REGIONS.location(region)?;
                Some((distance_km(client, &at), region.to_string(), values(r)))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, region, values)| format!("{values} (geo {region})"))
    };
    let first = records[0];
    if first.policy.starts_with("geo ") {
        let all: Vec<&&PublishedRecord> = records.iter().collect();
        return match nearest_geo(&all, "geo ") {
            Some(answer) => format!(
                "{type_}: a client near {client_region} gets {answer}, the item of the Google \
                 Cloud region nearest to it (the next nearest while its health-checked \
                 targets all fail)"
            ),
            None => format!("{type_}: geo items without a known Google Cloud region"),
        };
    }
    if first.policy.starts_with("wrr ") {
        let weights: Vec<(f64, &PublishedRecord)> = records
            .iter()
            .map(|r| {
                let w = r
                    .policy
                    .strip_prefix("wrr ")
                    .and_then(|w| w.parse::<f64>().ok())
                    .unwrap_or(0.0);
                (w, *r)
            })
            .collect();
        let total: f64 = weights.iter().map(|(w, _)| w).sum();
        let shares = weights
            .iter()
            .map(|(w, r)| {
                let share = if total > 0.0 { w / total * 100.0 } else { 0.0 };
                format!("{} {share:.0} %", values(r))
            })
            .collect::<Vec<_>>()
            .join(", ");
        return format!(
            "{type_}: every client, wherever it is, gets one item at random by weight: {shares}"
        );
    }
    if first.policy.starts_with("primaryBackup") {
        let primary = records
            .iter()
            .find(|r| r.policy == "primaryBackup primary")
            .map(|r| values(r))
            .unwrap_or_default();
        let backups: Vec<&&PublishedRecord> = records
            .iter()
            .filter(|r| r.policy.starts_with("primaryBackup backup "))
            .collect();
        let backup =
            nearest_geo(&backups, "primaryBackup backup ").unwrap_or_else(|| "nothing".into());
        return format!(
            "{type_}: every client gets the primary targets {primary} while any passes its \
             health check; when all fail, a client near {client_region} gets the backup {backup}"
        );
    }
    let all = records
        .iter()
        .map(|r| values(r))
        .collect::<Vec<_>>()
        .join(" ");
    format!("{type_}: every client gets {all} (a plain record set)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::{HealthEndpoint, HealthProtocol};

    fn target(
        cluster: &str,
        ips: &[&str],
        cloud: Cloud,
        region: &str,
        lat: f64,
        lon: f64,
    ) -> Target {
        Target {
            cluster: cluster.into(),
            values: ips.iter().map(|s| s.to_string()).collect(),
            hostname: None,
            weight: 1,
            tier: 0,
            location: Location {
                region: region.into(),
                latitude: lat,
                longitude: lon,
            },
            cloud,
            health: Some(HealthEndpoint {
                ip: ips.first().and_then(|ip| ip.parse().ok()),
                hostname: None,
                port: 443,
                protocol: HealthProtocol::Tcp,
                path: None,
                host: None,
            }),
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

    fn eu_us() -> Vec<Target> {
        vec![
            target(
                "eu",
                &["192.0.2.1"],
                Cloud::Aws,
                "eu-central-1",
                50.11,
                8.68,
            ),
            target(
                "gke",
                &["192.0.2.2"],
                Cloud::Gcp,
                "us-central1",
                41.0,
                -95.0,
            ),
        ]
    }

    #[test]
    fn geo_places_each_cluster_at_a_google_cloud_region() {
        let m = map(&set(Policy::Geo, eu_us()), None);
        let Some(Rrset {
            data:
                Data::Geo {
                    items,
                    health_check: None,
                },
            ..
        }) = m.rrset
        else {
            panic!("{m:?}")
        };
        let locations: Vec<&str> = items.iter().map(|i| i.location.as_str()).collect();
        assert_eq!(locations, ["europe-west3", "us-central1"]);
        assert_eq!(items[0].rrdatas, ["192.0.2.1"]);
        assert!(items[0].health_checked.is_empty());
        assert_eq!(
            m.item_clusters,
            [vec!["eu".to_string()], vec!["gke".to_string()]]
        );
    }

    #[test]
    fn clusters_of_one_region_share_an_item() {
        let mut targets = eu_us();
        targets.push(target(
            "eu2",
            &["192.0.2.3"],
            Cloud::OnPrem,
            "fra",
            50.1,
            8.7,
        ));
        let m = map(
            &set(Policy::Latency, targets),
            Some("projects/p/global/healthChecks/hc"),
        );
        let Some(Rrset {
            data: Data::Geo {
                items,
                health_check,
            },
            ..
        }) = m.rrset
        else {
            panic!("{m:?}")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].health_checked, ["192.0.2.1", "192.0.2.3"]);
        assert!(items[0].rrdatas.is_empty());
        assert_eq!(
            health_check.as_deref(),
            Some("https://www.googleapis.com/compute/v1/projects/p/global/healthChecks/hc")
        );
    }

    #[test]
    fn failover_is_primary_backup_with_a_health_check_and_the_active_tier_without() {
        let mut targets = eu_us();
        targets[1].tier = 1;
        let checked = map(
            &set(Policy::Failover, targets.clone()),
            Some("projects/p/global/healthChecks/hc"),
        );
        let Some(Rrset {
            data:
                Data::PrimaryBackup {
                    primary,
                    backup,
                    trickle_traffic,
                    ..
                },
            ..
        }) = checked.rrset
        else {
            panic!("{checked:?}")
        };
        assert_eq!(primary, ["192.0.2.1"]);
        assert_eq!(backup.len(), 1);
        assert_eq!(backup[0].location, "us-central1");
        assert_eq!(backup[0].health_checked, ["192.0.2.2"]);
        assert_eq!(trickle_traffic, 0.0);

        let plain = map(&set(Policy::Failover, targets), None);
        assert_eq!(
            plain.rrset.map(|r| r.data),
            Some(Data::Plain(vec!["192.0.2.1".into()]))
        );
        assert_eq!(plain.notes.len(), 1, "{:?}", plain.notes);
    }

    #[test]
    fn weighted_is_wrr_per_cluster() {
        let mut targets = eu_us();
        targets[0].weight = 3;
        let m = map(&set(Policy::Weighted, targets), None);
        let Some(Rrset {
            data: Data::Wrr { items, .. },
            ..
        }) = &m.rrset
        else {
            panic!("{m:?}")
        };
        assert_eq!(items[0].weight, 3.0);
        assert_eq!(items[1].rrdatas, ["192.0.2.2"]);
        let published = published(m.rrset.as_ref().unwrap(), &m.item_clusters);
        assert_eq!(published[0].policy, "wrr 3");
        assert_eq!(published[0].set_identifier, "eu");
        let client = Location {
            region: "x".into(),
            latitude: 0.0,
            longitude: 0.0,
        };
        assert!(
            explain(&published, &client).contains("192.0.2.1 75 %"),
            "{}",
            explain(&published, &client)
        );
    }

    #[test]
    fn host_names_only_in_an_address_record_set_are_left_out_and_said() {
        let mut targets = eu_us();
        targets[0].values.clear();
        targets[0].hostname = Some("lb.eu.example.net".into());
        let m = map(&set(Policy::Multivalue, targets), None);
        assert_eq!(
            m.rrset.map(|r| r.data),
            Some(Data::Plain(vec!["192.0.2.2".into()]))
        );
        assert!(m.notes[0].contains("lb.eu.example.net"), "{:?}", m.notes);
    }

    #[test]
    fn explain_geo_picks_the_nearest_region() {
        let m = map(&set(Policy::Geo, eu_us()), None);
        let published = published(m.rrset.as_ref().unwrap(), &m.item_clusters);
        let paris = Location {
            region: "paris".into(),
            latitude: 48.86,
            longitude: 2.35,
        };
        let text = explain(&published, &paris);
        assert!(text.contains("192.0.2.1 (geo europe-west3)"), "{text}");
    }

    #[test]
    fn txt_values_are_quoted_once() {
        assert_eq!(quote_txt("a \"b\""), "\"a \\\"b\\\"\"");
        assert_eq!(quote_txt("\"x\""), "\"x\"");
    }

    #[test]
    fn a_cname_holds_one_name_per_record_set_and_per_geo_region() {
        let cnames: Vec<Target> = eu_us()
            .into_iter()
            .chain([target("eu2", &[], Cloud::Aws, "eu-central-1", 50.1, 8.7)])
            .map(|mut t| {
                t.hostname = Some(format!("lb.{}.example.net", t.cluster));
                t.values.clear();
                t
            })
            .collect();
        let mut plain = set(Policy::Multivalue, cnames.clone());
        plain.type_ = RecordType::Cname;
        let m = map(&plain, Some("projects/p/global/healthChecks/hc"));
        assert_eq!(
            m.rrset.map(|r| r.data),
            Some(Data::Plain(vec!["lb.eu.example.net.".into()]))
        );
        assert!(
            m.notes[0].starts_with("a CNAME holds one name"),
            "{:?}",
            m.notes
        );

        let mut geo = set(Policy::Geo, cnames);
        geo.type_ = RecordType::Cname;
        let m = map(&geo, Some("projects/p/global/healthChecks/hc"));
        let Some(Rrset {
            data:
                Data::Geo {
                    items,
                    health_check: None,
                },
            ..
        }) = m.rrset
        else {
            panic!("{m:?}")
        };
        assert_eq!(items[0].rrdatas, ["lb.eu.example.net."]);
        assert!(items[0].health_checked.is_empty());
        assert!(m.notes[0].contains("cluster eu2"), "{:?}", m.notes);
    }
}
