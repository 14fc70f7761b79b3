//! What `FederatedIngress.status.dns.records` shows: [`Snapshot::records_for_status`],
//! the records served for a dnsName per distinct answer, with the regions that get each
//! and the share of weighted answers.
//!
//! What does not belong here: answering queries (see `lookup`), writing the status (the
//! API server does).

use std::collections::BTreeSet;

use fedingress_api::ingress::{DnsRecordStatus, RecordType as ApiRecordType};
use hickory_proto::rr::rdata::CNAME;
use hickory_proto::rr::{RData, Record, RecordType};

use super::contents::{IngressEntry, Snapshot, View};
use super::encode::{Prepared, RenderedRef};
use super::names::{display, normalize_text};

impl Snapshot {
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
