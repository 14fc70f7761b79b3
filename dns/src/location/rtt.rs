//! The configured RTT table of the Latency strategy (`dns.latency`, supplied by the
//! operator): round-trip times from client subnets to clusters, matched by longest
//! prefix ([`super::prefix::PrefixTable`]).

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use super::prefix::PrefixTable;
use super::{LocationError, RttRow, canonical_ip, canonical_net};

/// Configured round-trip times per client subnet (for the Latency strategy), matched by
/// longest prefix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RttTable {
    rows: Vec<RttRow>,
    index: PrefixTable,
}

impl RttTable {
    /// A table of `rows` (CIDRs normalised as in [`super::Locator`]).
    ///
    /// # Errors
    ///
    /// [`LocationError::DuplicateCidr`] when two rows name one network,
    /// [`LocationError::InvalidRtt`] for a negative or non-numeric RTT.
    pub fn new(rows: Vec<RttRow>) -> Result<Self, LocationError> {
        let mut normalised: Vec<RttRow> = Vec::with_capacity(rows.len());
        let mut seen = HashSet::with_capacity(rows.len());
        for row in rows {
            let cidr = canonical_net(row.cidr);
            if !seen.insert(cidr) {
                return Err(LocationError::DuplicateCidr {
                    table: "RTT table",
                    cidr,
                });
            }
            if let Some((cluster, rtt)) = row
                .rtt_ms
                .iter()
                .find(|(_, rtt)| rtt.is_nan() || **rtt < 0.0)
            {
                return Err(LocationError::InvalidRtt {
                    cidr,
                    cluster: cluster.clone(),
                    rtt_ms: *rtt,
                });
            }
            normalised.push(RttRow {
                cidr,
                rtt_ms: row.rtt_ms,
            });
        }
        let nets: Vec<_> = normalised.iter().map(|r| r.cidr).collect();
        Ok(RttTable {
            index: PrefixTable::new(&nets),
            rows: normalised,
        })
    }

    /// The rows, normalised, in config order ([`super::Bucket::rtt_row`] indexes them).
    pub fn rows(&self) -> &[RttRow] {
        &self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The index of the longest-prefix row holding `ip`.
    pub fn lookup_row(&self, ip: IpAddr) -> Option<usize> {
        self.index.lookup(canonical_ip(ip)).0
    }

    /// The row index and ECS scope of a canonical `ip` (see [`PrefixTable::lookup`]).
    pub(crate) fn lookup_scoped(&self, ip: IpAddr) -> (Option<usize>, u8) {
        if self.rows.is_empty() {
            // The common case: no RTT table, nothing to search.
            return (None, 0);
        }
        self.index.lookup(ip)
    }

    /// The RTTs (cluster → ms) of the longest-prefix row holding `ip`.
    pub fn lookup(&self, ip: IpAddr) -> Option<&BTreeMap<String, f64>> {
        self.lookup_row(ip)
            .and_then(|row| self.rows.get(row))
            .map(|row| &row.rtt_ms)
    }
}
