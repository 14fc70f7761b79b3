//! Zone transfers: every record of a zone between two SOAs, with one static view of each
//! answer (the default location's, a round-robin set's first rotation, the union of a
//! weighted address answer).
//!
//! What does not belong here: the AXFR messages and who may ask (see `crate::server`).

use std::collections::BTreeSet;

use hickory_proto::rr::{Name, Record, RecordType};

use super::contents::{Node, Owner, Snapshot};
use super::encode::Prepared;

impl Snapshot {
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
