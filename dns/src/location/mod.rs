//! Where a DNS client is: the location, the ECS scope and the cache bucket of an address.
//!
//! The address is the EDNS Client Subnet when the query carries one, else the resolver's
//! own address; the server decides which and passes it to [`Locator::locate`]. Sources,
//! in order:
//!
//! 1. the CIDR → location table of the apiserver config ([`LocationEntry`]), longest
//!    prefix first, in O(log n) (`prefix.rs`: sorted elementary intervals);
//! 2. a MaxMind `.mmdb` file (City-style records, checked when opened: [`check_mmdb`])
//!    when one is configured;
//! 3. the configured default location.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`), in queries and in table entries, are
//! treated as the IPv4 address.
//!
//! An optional [`RttTable`] (configured round-trip times per client subnet, for the
//! Latency strategy) rides along: the row a client matches is part of its [`Bucket`].
//!
//! # Buckets and ECS scope
//!
//! A [`Bucket`] names every client that gets the same answers, so the server caches and
//! pre-encodes answers per (name, type, bucket). It is the pair ([`Place`], RTT row):
//! routing depends on the client's location and, for Latency, on its RTT row, and the
//! two tables need not line up (one RTT row may span several table entries), so neither
//! may stand for the other. Places are a table entry, the default location, or, for
//! mmdb hits, a point rounded to 0.01° (about 1.1 km; [`Located::location`] then carries
//! the rounded coordinates, so every client of the bucket is routed from the same point).
//!
//! [`Located::prefix_len`] is the ECS scope: the matched network's prefix length,
//! lengthened where a more specific table entry or RTT row lies inside it, so that every
//! address within the scope lands in the same bucket. (A client that matches nothing
//! gets the shortest prefix that reaches no entry, not 0, which would tell resolvers
//! that the default answer holds for the whole address space.)
//!
//! What does not belong here: routing (see [`crate::routing`]), DNS wire handling, and
//! reading config files (the apiserver deserialises [`LocationEntry`] and [`RttRow`]).

mod mmdb;
mod prefix;
mod rtt;
#[cfg(any(test, feature = "test-mmdb"))]
pub mod test_mmdb;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::Location;
use mmdb::Mmdb;
pub use mmdb::check_mmdb;
use prefix::PrefixTable;
pub use rtt::RttTable;

/// One row of the config's client location table: clients in `cidr` are at `location`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocationEntry {
    pub cidr: IpNet,
    pub location: Location,
}

/// One row of the configured RTT table: from clients in `cidr`, the round-trip time to
/// each cluster in milliseconds (clusters not listed have no RTT).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RttRow {
    pub cidr: IpNet,
    pub rtt_ms: BTreeMap<String, f64>,
}

/// An error building a [`Locator`] or an [`RttTable`] from config.
#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    /// The `.mmdb` file could not be read or is not a MaxMind database.
    #[error("cannot read MaxMind database {}", .path.display())]
    ReadMmdb {
        path: PathBuf,
        #[source]
        source: maxminddb::MaxMindDbError,
    },
    /// The `.mmdb` file is a MaxMind database, but its records lack a field the locator
    /// reads (see [`check_mmdb`]).
    #[error(
        "MaxMind database {} has no {field} in its records (a City-style database is needed; country-only databases are not supported)",
        .path.display()
    )]
    MmdbLayout {
        path: PathBuf,
        /// `location/latitude` or `location/longitude`.
        field: &'static str,
    },
    /// Latitude outside -90..=90 or longitude outside -180..=180 (or not a number).
    #[error(
        "{what}: latitude must be within -90..=90 and longitude within -180..=180, got {latitude}, {longitude}"
    )]
    InvalidCoordinates {
        /// `default location` or `location of <cidr>`.
        what: String,
        latitude: f64,
        longitude: f64,
    },
    /// Two rows of one table name the same network.
    #[error("{table}: network {cidr} is listed twice")]
    DuplicateCidr { table: &'static str, cidr: IpNet },
    /// A configured RTT that is negative or not a number.
    #[error("RTT table row {cidr}: rtt of cluster {cluster} must be a number >= 0, got {rtt_ms}")]
    InvalidRtt {
        cidr: IpNet,
        cluster: String,
        rtt_ms: f64,
    },
}

/// Where a client's location came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum LocationSource {
    /// A row of the config table (its normalised CIDR).
    Table { cidr: IpNet },
    /// The `.mmdb` file; `network` is the database's network holding the address.
    Mmdb { network: IpNet },
    /// Nothing matched: the configured default location.
    Default,
}

/// The location part of a [`Bucket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Place {
    /// Row `index` of [`Locator::table`].
    Table(usize),
    /// The default location.
    Default,
    /// An mmdb hit, in hundredths of a degree (rounded to the nearest 0.01°).
    Point { lat_e2: i32, lon_e2: i32 },
}

/// A key naming every client that gets the same answers (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bucket {
    pub place: Place,
    /// Index of the matched row of [`Locator::rtt`], if any.
    pub rtt_row: Option<usize>,
}

impl Bucket {
    /// The bucket of clients at the default location without an RTT row.
    pub const DEFAULT: Bucket = Bucket {
        place: Place::Default,
        rtt_row: None,
    };

    /// Whether [`Locator::buckets`] lists this kind of bucket (table entries and the
    /// default), so that its answers can be pre-encoded. Mmdb points are not listed:
    /// answers for them are found by route key ([`crate::routing::PointRouter`]).
    pub fn is_enumerable(&self) -> bool {
        !matches!(self.place, Place::Point { .. })
    }
}

/// The result of [`Locator::locate`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Located {
    /// Where the client is (for mmdb hits: rounded to the bucket's point).
    pub location: Location,
    pub source: LocationSource,
    /// The ECS scope prefix length for answers to this client (see the module docs).
    pub prefix_len: u8,
    pub bucket: Bucket,
    /// The client's row of the RTT table, if it matched one: cluster → ms.
    pub rtt: Option<BTreeMap<String, f64>>,
}

// ---------------------------------------------------------------------------------------
// Address arithmetic

/// IPv4-mapped IPv6 addresses become IPv4.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// Host bits cleared, and `::ffff:a.b.c.d/96+n` turned into `a.b.c.d/n`.
fn canonical_net(net: IpNet) -> IpNet {
    let net = net.trunc();
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.network().to_ipv4_mapped()
        && let Ok(mapped) = IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96)
    {
        return mapped;
    }
    net
}

/// Whether two canonical networks share an address (prefixes nest or are disjoint).
fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn check_coordinates(
    what: impl FnOnce() -> String,
    location: &Location,
) -> Result<(), LocationError> {
    let ok = (-90.0..=90.0).contains(&location.latitude)
        && (-180.0..=180.0).contains(&location.longitude);
    if ok {
        Ok(())
    } else {
        Err(LocationError::InvalidCoordinates {
            what: what(),
            latitude: location.latitude,
            longitude: location.longitude,
        })
    }
}

/// Degrees to hundredths of a degree, rounded to nearest (saturating; coordinates are
/// checked to be within ±180 before).
fn e2(degrees: f64) -> i32 {
    // `as` saturates and maps NaN to 0; the value is at most 18000 in magnitude.
    #[allow(clippy::cast_possible_truncation)]
    let value = (degrees * 100.0).round() as i32;
    value
}

// ---------------------------------------------------------------------------------------
// Locator

/// Turns client addresses into locations, ECS scopes and cache buckets. Immutable; share
/// it behind an `Arc`.
pub struct Locator {
    table: Vec<LocationEntry>,
    /// Longest-prefix index over `table`'s CIDRs.
    index: PrefixTable,
    default: Location,
    mmdb: Option<Mmdb>,
    rtt: RttTable,
}

impl fmt::Debug for Locator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locator")
            .field("table", &self.table)
            .field("default", &self.default)
            .field("mmdb", &self.mmdb.as_ref().map(|m| &m.path))
            .field("rtt", &self.rtt)
            .finish()
    }
}

impl Locator {
    /// A locator over the config `table`, falling back to the `.mmdb` file at `mmdb`
    /// (read whole into memory now) and then to `default`. Table CIDRs are normalised
    /// (host bits cleared, IPv4-mapped IPv6 turned into IPv4).
    ///
    /// # Errors
    ///
    /// [`LocationError::ReadMmdb`] when the file cannot be read or parsed,
    /// [`LocationError::MmdbLayout`] when its records lack coordinates ([`check_mmdb`]),
    /// [`LocationError::InvalidCoordinates`] for a location off the globe,
    /// [`LocationError::DuplicateCidr`] when two entries name one network.
    pub fn new(
        table: Vec<LocationEntry>,
        default: Location,
        mmdb: Option<&Path>,
    ) -> Result<Self, LocationError> {
        check_coordinates(|| "default location".to_owned(), &default)?;
        let mut normalised: Vec<LocationEntry> = Vec::with_capacity(table.len());
        let mut seen = HashSet::with_capacity(table.len());
        for entry in table {
            let cidr = canonical_net(entry.cidr);
            check_coordinates(|| format!("location of {cidr}"), &entry.location)?;
            if !seen.insert(cidr) {
                return Err(LocationError::DuplicateCidr {
                    table: "location table",
                    cidr,
                });
            }
            normalised.push(LocationEntry {
                cidr,
                location: entry.location,
            });
        }
        let mmdb = mmdb.map(Mmdb::open).transpose()?;
        let nets: Vec<IpNet> = normalised.iter().map(|e| e.cidr).collect();
        Ok(Locator {
            index: PrefixTable::new(&nets),
            table: normalised,
            default,
            mmdb,
            rtt: RttTable::default(),
        })
    }

    /// The same locator with an RTT table (replacing any previous one).
    #[must_use]
    pub fn with_rtt(mut self, rtt: RttTable) -> Self {
        self.rtt = rtt;
        self
    }

    /// The table, normalised, in config order ([`Place::Table`] indexes it).
    pub fn table(&self) -> &[LocationEntry] {
        &self.table
    }

    pub fn default_location(&self) -> &Location {
        &self.default
    }

    pub fn rtt(&self) -> &RttTable {
        &self.rtt
    }

    /// The `.mmdb` file in use, if any.
    pub fn mmdb_path(&self) -> Option<&Path> {
        self.mmdb.as_ref().map(|m| m.path.as_path())
    }

    /// Where `ip` is, with the ECS scope and bucket of answers for it.
    pub fn locate(&self, ip: IpAddr) -> Located {
        let ip = canonical_ip(ip);
        let (place, source, scope, mmdb_region) = self.place(ip, true);
        let (rtt_row, rtt_scope) = self.rtt.lookup_scoped(ip);
        let location = match place {
            Place::Table(index) => self
                .table
                .get(index)
                .map_or_else(|| self.default.clone(), |e| e.location.clone()),
            Place::Default => self.default.clone(),
            Place::Point { lat_e2, lon_e2 } => Location {
                region: mmdb_region,
                latitude: f64::from(lat_e2) / 100.0,
                longitude: f64::from(lon_e2) / 100.0,
            },
        };
        Located {
            location,
            source,
            prefix_len: scope.max(rtt_scope),
            bucket: Bucket { place, rtt_row },
            rtt: rtt_row
                .and_then(|row| self.rtt.rows().get(row))
                .map(|row| row.rtt_ms.clone()),
        }
    }

    /// The coordinates (latitude, longitude) clients of `place` are routed from: the
    /// same values as [`Located::location`] of [`Locator::locate`] for them.
    pub fn point(&self, place: Place) -> (f64, f64) {
        match place {
            Place::Table(index) => self
                .table
                .get(index)
                .map_or(&self.default, |e| &e.location)
                .coordinates(),
            Place::Default => self.default.coordinates(),
            Place::Point { lat_e2, lon_e2 } => {
                (f64::from(lat_e2) / 100.0, f64::from(lon_e2) / 100.0)
            }
        }
    }

    /// Only the bucket and ECS scope of `ip` (no allocation for table hits, and mmdb
    /// hits decode only the coordinates): the query hot path's lookup.
    pub fn bucket(&self, ip: IpAddr) -> (Bucket, u8) {
        let ip = canonical_ip(ip);
        let (place, _, scope, _) = self.place(ip, false);
        let (rtt_row, rtt_scope) = self.rtt.lookup_scoped(ip);
        (Bucket { place, rtt_row }, scope.max(rtt_scope))
    }

    /// The place of a canonical `ip`, where it came from, its scope, and (when
    /// `want_region`) the region of an mmdb hit.
    fn place(&self, ip: IpAddr, want_region: bool) -> (Place, LocationSource, u8, String) {
        let (matched, table_scope) = self.index.lookup(ip);
        if let Some(index) = matched
            && let Some(entry) = self.table.get(index)
        {
            return (
                Place::Table(index),
                LocationSource::Table { cidr: entry.cidr },
                table_scope,
                String::new(),
            );
        }
        if let Some(mmdb) = &self.mmdb {
            let hit = mmdb.lookup(ip, want_region);
            let scope = table_scope.max(hit.network.prefix_len());
            if let Some((lat_e2, lon_e2)) = hit.point {
                return (
                    Place::Point { lat_e2, lon_e2 },
                    LocationSource::Mmdb {
                        network: hit.network,
                    },
                    scope,
                    hit.region,
                );
            }
            return (
                Place::Default,
                LocationSource::Default,
                scope,
                String::new(),
            );
        }
        (
            Place::Default,
            LocationSource::Default,
            table_scope,
            String::new(),
        )
    }

    /// One representative [`Located`] per enumerable bucket, to pre-encode answers for:
    /// every table entry and the default, each without an RTT row and with every RTT row
    /// that may overlap it (a superset of the combinations that occur). `prefix_len` is
    /// the entry's own prefix length (0 for the default); the real scope comes from
    /// [`Locator::locate`] per query.
    pub fn buckets(&self) -> Vec<Located> {
        let mut out = Vec::new();
        let places = self
            .table
            .iter()
            .enumerate()
            .map(|(index, entry)| {
                (
                    Place::Table(index),
                    entry.location.clone(),
                    LocationSource::Table { cidr: entry.cidr },
                    Some(entry.cidr),
                )
            })
            .chain(std::iter::once((
                Place::Default,
                self.default.clone(),
                LocationSource::Default,
                None,
            )));
        for (place, location, source, cidr) in places {
            let prefix_len = cidr.map_or(0, |c| c.prefix_len());
            out.push(Located {
                location: location.clone(),
                source: source.clone(),
                prefix_len,
                bucket: Bucket {
                    place,
                    rtt_row: None,
                },
                rtt: None,
            });
            for (row_index, row) in self.rtt.rows().iter().enumerate() {
                if cidr.is_some_and(|c| !overlaps(&c, &row.cidr)) {
                    continue;
                }
                out.push(Located {
                    location: location.clone(),
                    source: source.clone(),
                    prefix_len,
                    bucket: Bucket {
                        place,
                        rtt_row: Some(row_index),
                    },
                    rtt: Some(row.rtt_ms.clone()),
                });
            }
        }
        out
    }
}

/// The address as (is IPv4, bits left-aligned in a u128, number of bits).
#[cfg(test)]
fn bits(ip: IpAddr) -> (bool, u128, u8) {
    match ip {
        IpAddr::V4(v4) => (true, u128::from(u32::from(v4)) << 96, 32),
        IpAddr::V6(v6) => (false, u128::from(v6), 128),
    }
}

/// Length of the common prefix of two addresses of one family (`None` across families).
#[cfg(test)]
fn common_prefix(a: IpAddr, b: IpAddr) -> Option<u8> {
    let (a4, a_bits, max) = bits(a);
    let (b4, b_bits, _) = bits(b);
    if a4 != b4 {
        return None;
    }
    let len = (a_bits ^ b_bits).leading_zeros().min(u32::from(max));
    // At most 128, so it fits.
    Some(u8::try_from(len).unwrap_or(max))
}

/// Longest-prefix match of `ip` among `nets` (canonical), and the shortest prefix length
/// around `ip` (at least the match's) within which every address has the same match: the
/// definition, by linear scan, that [`PrefixTable`] must agree with.
#[cfg(test)]
fn longest_match_linear<'a>(
    ip: IpAddr,
    nets: impl Iterator<Item = &'a IpNet>,
) -> (Option<usize>, u8) {
    let mut best: Option<(usize, u8)> = None;
    let mut scope = 0;
    for (index, net) in nets.enumerate() {
        let Some(common) = common_prefix(net.network(), ip) else {
            continue;
        };
        if common >= net.prefix_len() {
            if best.is_none_or(|(_, len)| net.prefix_len() > len) {
                best = Some((index, net.prefix_len()));
            }
            scope = scope.max(net.prefix_len());
        } else {
            // `ip/(common+1)` is the longest network around ip that `net` does not
            // reach; anything shorter would include `net`.
            scope = scope.max(common + 1);
        }
    }
    (best.map(|(index, _)| index), scope)
}

#[cfg(test)]
mod tests {
    use super::test_mmdb::{CityNetwork, FlatNetwork, city_db, flat_db, ip, net};
    use super::*;

    /// A small deterministic generator (xorshift64*), so that failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn u128(&mut self) -> u128 {
            (u128::from(self.next()) << 64) | u128::from(self.next())
        }
    }

    /// A random network of one of three kinds: IPv4, IPv6 (clustered under a few /16s
    /// so that networks nest), IPv4-mapped IPv6 (normalised to IPv4, as tables are).
    fn random_net(rng: &mut Rng) -> IpNet {
        let net = match rng.below(3) {
            0 => {
                // Clustered under 10/8 and 192.168/16 so that many networks nest.
                let base: u32 = if rng.below(2) == 0 {
                    0x0A00_0000
                } else {
                    0xC0A8_0000
                };
                let addr = base | (rng.next() as u32 & 0x00FF_FFFF);
                let len = rng.below(33) as u8;
                IpNet::new(IpAddr::from(addr.to_be_bytes()), len).unwrap()
            }
            1 => {
                let high: u128 = [0x2001_0db8u128, 0x2a00_1450, 0xfe80_0000][rng.below(3) as usize];
                let addr = (high << 96) | (rng.u128() >> 32);
                let len = rng.below(129) as u8;
                IpNet::new(IpAddr::from(addr.to_be_bytes()), len).unwrap()
            }
            _ => {
                let v4 = 0x0A00_0000u32 | (rng.next() as u32 & 0x00FF_FFFF);
                let mapped = std::net::Ipv4Addr::from(v4).to_ipv6_mapped();
                let len = 96 + rng.below(33) as u8;
                IpNet::new(IpAddr::V6(mapped), len).unwrap()
            }
        };
        canonical_net(net)
    }

    /// Addresses worth probing: random ones near the table's networks, their edges and
    /// the addresses just outside, in both forms for IPv4 (plain and mapped).
    fn probes(rng: &mut Rng, nets: &[IpNet], count: usize) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for net in nets.iter().take(count) {
            let (network, broadcast) = (net.network(), net.broadcast());
            out.push(network);
            out.push(broadcast);
            match (network, broadcast) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    let (a, b) = (u32::from(a), u32::from(b));
                    for x in [
                        a.wrapping_sub(1),
                        b.wrapping_add(1),
                        a | (rng.next() as u32 & !(a ^ b) ^ (rng.next() as u32 & (a ^ b))),
                    ] {
                        out.push(IpAddr::from(x.to_be_bytes()));
                        out.push(IpAddr::V6(std::net::Ipv4Addr::from(x).to_ipv6_mapped()));
                    }
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => {
                    let (a, b) = (u128::from(a), u128::from(b));
                    for x in [
                        a.wrapping_sub(1),
                        b.wrapping_add(1),
                        a | (rng.u128() & (a ^ b)),
                    ] {
                        out.push(IpAddr::from(x.to_be_bytes()));
                    }
                }
                _ => {}
            }
        }
        for _ in 0..count {
            out.push(IpAddr::from((rng.next() as u32).to_be_bytes()));
            out.push(IpAddr::from(
                (0x0A00_0000 | (rng.next() as u32 & 0x00FF_FFFF)).to_be_bytes(),
            ));
            out.push(IpAddr::from(rng.u128().to_be_bytes()));
            out.push(IpAddr::from(
                ((0x2001_0db8u128 << 96) | (rng.u128() >> 32)).to_be_bytes(),
            ));
        }
        out
    }

    #[test]
    fn prefix_table_agrees_with_the_linear_definition() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..300 {
            let size = [0, 1, 2, 3, 5, 10, 40][round % 7] + rng.below(4) as usize;
            let mut nets: Vec<IpNet> = (0..size).map(|_| random_net(&mut rng)).collect();
            if round % 5 == 0 && !nets.is_empty() {
                // The whole address space and a duplicate: the first listing wins.
                nets.push(canonical_net(net("0.0.0.0/0")));
                nets.push(canonical_net(net("::/0")));
                nets.push(nets[0]);
            }
            let table = PrefixTable::new(&nets);
            for probe in probes(&mut rng, &nets, 60) {
                let ip = canonical_ip(probe);
                assert_eq!(
                    table.lookup(ip),
                    longest_match_linear(ip, nets.iter()),
                    "round {round}: {probe} in {nets:?}"
                );
            }
        }
    }

    #[test]
    fn a_table_of_100000_entries() {
        let mut rng = Rng(42);
        let mut seen = HashSet::new();
        let mut table = Vec::new();
        // /24s and some /16s and /20s around them (nesting), IPv4 and IPv6.
        while table.len() < 100_000 {
            let net = match rng.below(10) {
                0 => IpNet::new(IpAddr::from((rng.next() as u32).to_be_bytes()), 16).unwrap(),
                1 => IpNet::new(IpAddr::from((rng.next() as u32).to_be_bytes()), 20).unwrap(),
                2 => IpNet::new(IpAddr::from(rng.u128().to_be_bytes()), 48).unwrap(),
                _ => IpNet::new(IpAddr::from((rng.next() as u32).to_be_bytes()), 24).unwrap(),
            }
            .trunc();
            if seen.insert(net) {
                let latitude = rng.below(170) as f64 - 85.0;
                let longitude = rng.below(360) as f64 - 180.0;
                table.push(LocationEntry {
                    cidr: net,
                    location: loc(&format!("r{}", table.len()), latitude, longitude),
                });
            }
        }
        let nets: Vec<IpNet> = table.iter().map(|e| e.cidr).collect();
        let locator = Locator::new(table, default_loc(), None).unwrap();
        assert!(locator.index.intervals() >= 100_000);
        // Every entry's own addresses find the entry (or a more specific one inside it),
        // and random addresses agree with the linear definition.
        for (index, net) in nets.iter().enumerate().step_by(97) {
            let located = locator.locate(net.network());
            let Place::Table(found) = located.bucket.place else {
                panic!("{net} not found");
            };
            let found_net = nets[found];
            assert!(
                found == index || (net.contains(&found_net) && found_net != *net),
                "{net}"
            );
            assert!(located.prefix_len >= found_net.prefix_len());
        }
        for probe in probes(&mut rng, &nets[..50], 50) {
            let ip = canonical_ip(probe);
            assert_eq!(
                locator.index.lookup(ip),
                longest_match_linear(ip, nets.iter()),
                "{probe}"
            );
        }
    }

    #[test]
    fn a_database_without_city_coordinates_is_rejected() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            file.path(),
            flat_db(&[FlatNetwork {
                network: net("81.2.69.0/24"),
                latitude: 51.5,
                longitude: -0.09,
                country_code: "GB",
            }]),
        )
        .unwrap();
        let err = check_mmdb(file.path()).unwrap_err();
        assert!(matches!(
            err,
            LocationError::MmdbLayout {
                field: "location/latitude",
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            format!(
                "MaxMind database {} has no location/latitude in its records (a City-style database is needed; country-only databases are not supported)",
                file.path().display()
            )
        );
        // The locator refuses it too.
        let err = Locator::new(vec![], default_loc(), Some(file.path())).unwrap_err();
        assert!(matches!(err, LocationError::MmdbLayout { .. }));

        // A country-only City-shaped database (no coordinates anywhere).
        let country = write_db(&[CityNetwork {
            network: net("198.51.100.0/24"),
            latitude: None,
            longitude: None,
            country: Some("US"),
            subdivision: None,
        }]);
        assert!(matches!(
            check_mmdb(country.path()),
            Err(LocationError::MmdbLayout {
                field: "location/latitude",
                ..
            })
        ));
        // Latitudes without longitudes name the other field.
        let half = write_db(&[CityNetwork {
            network: net("198.51.100.0/24"),
            latitude: Some(1.0),
            longitude: None,
            country: Some("US"),
            subdivision: None,
        }]);
        assert!(matches!(
            check_mmdb(half.path()),
            Err(LocationError::MmdbLayout {
                field: "location/longitude",
                ..
            })
        ));
        // A City database where some records lack coordinates is fine.
        check_mmdb(sample_db().path()).unwrap();
        // Not a database at all.
        assert!(matches!(
            check_mmdb(Path::new("/nonexistent/x.mmdb")),
            Err(LocationError::ReadMmdb { .. })
        ));
    }

    fn loc(region: &str, latitude: f64, longitude: f64) -> Location {
        Location {
            region: region.to_owned(),
            latitude,
            longitude,
        }
    }

    fn entry(cidr: &str, region: &str, latitude: f64, longitude: f64) -> LocationEntry {
        LocationEntry {
            cidr: net(cidr),
            location: loc(region, latitude, longitude),
        }
    }

    fn default_loc() -> Location {
        loc("default", 0.0, 0.0)
    }

    fn table_locator() -> Locator {
        Locator::new(
            vec![
                entry("10.0.0.0/8", "eu", 50.0, 4.0),
                entry("10.1.0.0/16", "us", 40.0, -74.0),
                entry("10.1.2.0/24", "asia", 1.3, 103.8),
                entry("2001:db8::/32", "eu6", 48.8, 2.3),
                entry("2001:db8:1::/48", "us6", 37.0, -122.0),
            ],
            default_loc(),
            None,
        )
        .unwrap()
    }

    #[test]
    fn longest_prefix_wins() {
        let locator = table_locator();
        let l = locator.locate(ip("10.9.9.9"));
        assert_eq!(l.location.region, "eu");
        assert_eq!(l.bucket.place, Place::Table(0));
        assert_eq!(
            l.source,
            LocationSource::Table {
                cidr: net("10.0.0.0/8")
            }
        );
        assert_eq!(locator.locate(ip("10.1.9.9")).location.region, "us");
        let asia = locator.locate(ip("10.1.2.3"));
        assert_eq!(asia.location.region, "asia");
        assert_eq!(
            asia.bucket,
            Bucket {
                place: Place::Table(2),
                rtt_row: None
            }
        );
        assert_eq!(asia.prefix_len, 24);
    }

    #[test]
    fn scope_never_reaches_a_more_specific_entry() {
        let locator = table_locator();
        // 10.9.9.9 matches /8, but 10.0.0.0/12 would still not contain 10.1/16: the
        // common prefix of 10.9.9.9 and 10.1.0.0 is 12 bits (0000_1010.0000_1001 vs
        // 0000_1010.0000_0001), so the scope is /13.
        let l = locator.locate(ip("10.9.9.9"));
        assert_eq!(l.prefix_len, 13);
        // Inside 10.1/16 but outside 10.1.2/24: common prefix with 10.1.2.0 is 22 bits
        // for 10.1.0.1 → scope 23.
        assert_eq!(locator.locate(ip("10.1.0.1")).prefix_len, 23);
        // Far away from everything: default, with a scope that reaches no entry.
        let d = locator.locate(ip("192.0.2.1"));
        assert_eq!(d.source, LocationSource::Default);
        assert_eq!(d.bucket, Bucket::DEFAULT);
        assert_eq!(d.location, default_loc());
        assert_eq!(d.prefix_len, 1);
        // 11.0.0.1 shares 7 bits with 10.0.0.0 → scope 8 (11.0.0.0/8 holds no entry).
        assert_eq!(locator.locate(ip("11.0.0.1")).prefix_len, 8);
        // The scope is consistent: every address inside it locates to the same bucket.
        for probe in [
            "10.9.9.9",
            "10.1.0.1",
            "11.0.0.1",
            "192.0.2.1",
            "10.1.2.200",
        ] {
            let located = locator.locate(ip(probe));
            let scope = IpNet::new(ip(probe), located.prefix_len).unwrap().trunc();
            for other in [scope.network(), scope.broadcast()] {
                assert_eq!(
                    locator.locate(other).bucket,
                    located.bucket,
                    "{probe} vs {other}"
                );
            }
        }
    }

    #[test]
    fn ipv6_and_mapped_ipv4() {
        let locator = table_locator();
        assert_eq!(locator.locate(ip("2001:db8::1")).location.region, "eu6");
        let us6 = locator.locate(ip("2001:db8:1::1"));
        assert_eq!(us6.location.region, "us6");
        assert_eq!(us6.prefix_len, 48);
        assert_eq!(
            locator.locate(ip("2001:db9::1")).source,
            LocationSource::Default
        );
        // IPv4-mapped IPv6 is the IPv4 address.
        let mapped = locator.locate(ip("::ffff:10.1.2.3"));
        assert_eq!(mapped.location.region, "asia");
        assert_eq!(mapped.prefix_len, 24);
        // IPv4 entries never match IPv6 addresses of other shapes and vice versa.
        assert_eq!(
            locator.locate(ip("::a01:203")).source,
            LocationSource::Default
        );
    }

    #[test]
    fn table_entries_are_normalised() {
        let locator = Locator::new(
            vec![
                entry("::ffff:10.0.0.0/104", "mapped", 1.0, 2.0),
                entry("192.168.1.7/24", "h", 0.0, 0.0),
            ],
            default_loc(),
            None,
        )
        .unwrap();
        assert_eq!(locator.table()[0].cidr, net("10.0.0.0/8"));
        assert_eq!(locator.table()[1].cidr, net("192.168.1.0/24"));
        assert_eq!(locator.locate(ip("10.2.3.4")).location.region, "mapped");
        assert_eq!(locator.locate(ip("192.168.1.99")).location.region, "h");
    }

    #[test]
    fn invalid_tables_are_rejected() {
        let dup = Locator::new(
            vec![
                entry("10.0.0.0/8", "a", 0.0, 0.0),
                entry("10.0.0.1/8", "b", 0.0, 0.0),
            ],
            default_loc(),
            None,
        );
        assert!(matches!(dup, Err(LocationError::DuplicateCidr { .. })));
        let off = Locator::new(
            vec![entry("10.0.0.0/8", "a", 91.0, 0.0)],
            default_loc(),
            None,
        );
        assert!(matches!(off, Err(LocationError::InvalidCoordinates { .. })));
        let nan = Locator::new(vec![], loc("x", f64::NAN, 0.0), None);
        assert!(matches!(nan, Err(LocationError::InvalidCoordinates { .. })));
        let missing = Locator::new(
            vec![],
            default_loc(),
            Some(Path::new("/nonexistent/x.mmdb")),
        );
        let err = missing.unwrap_err();
        assert!(matches!(err, LocationError::ReadMmdb { .. }));
        assert_eq!(
            err.to_string(),
            "cannot read MaxMind database /nonexistent/x.mmdb"
        );
        let rtt = RttTable::new(vec![RttRow {
            cidr: net("10.0.0.0/8"),
            rtt_ms: BTreeMap::from([("a".to_owned(), -1.0)]),
        }]);
        assert!(matches!(rtt, Err(LocationError::InvalidRtt { .. })));
    }

    #[test]
    fn entries_parse_from_config_and_reject_unknown_keys() {
        let parsed: LocationEntry = serde_json::from_str(
            r#"{"cidr":"10.0.0.0/8","location":{"region":"eu","latitude":50.0,"longitude":4.0}}"#,
        )
        .unwrap();
        assert_eq!(parsed, entry("10.0.0.0/8", "eu", 50.0, 4.0));
        assert!(
            serde_json::from_str::<LocationEntry>(
                r#"{"cidr":"10.0.0.0/8","location":{"region":"eu","latitude":1,"longitude":1},"x":1}"#
            )
            .is_err()
        );
        let row: RttRow =
            serde_json::from_str(r#"{"cidr":"10.0.0.0/8","rttMs":{"eu-west":12.5}}"#).unwrap();
        assert_eq!(row.rtt_ms["eu-west"], 12.5);
    }

    fn write_db(networks: &[CityNetwork]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), city_db(networks)).unwrap();
        file
    }

    fn sample_db() -> tempfile::NamedTempFile {
        write_db(&[
            CityNetwork {
                network: net("81.2.69.0/24"),
                latitude: Some(51.5142),
                longitude: Some(-0.0931),
                country: Some("GB"),
                subdivision: Some("ENG"),
            },
            CityNetwork {
                network: net("2001:218::/32"),
                latitude: Some(35.685),
                longitude: Some(139.7514),
                country: Some("JP"),
                subdivision: None,
            },
            CityNetwork {
                network: net("198.51.100.0/24"),
                latitude: None,
                longitude: None,
                country: Some("US"),
                subdivision: None,
            },
        ])
    }

    #[test]
    fn the_test_writer_produces_a_valid_database() {
        let file = sample_db();
        let reader = maxminddb::Reader::open_readfile(file.path()).unwrap();
        reader.verify().unwrap();
        assert_eq!(reader.metadata().ip_version, 6);
        let result = reader.lookup(ip("81.2.69.160")).unwrap();
        let city: maxminddb::geoip2::City = result.decode().unwrap().unwrap();
        assert_eq!(city.country.iso_code, Some("GB"));
        assert_eq!(city.location.latitude, Some(51.5142));
        assert_eq!(result.network().unwrap().prefix(), 24);
    }

    #[test]
    fn mmdb_locations() {
        let file = sample_db();
        let locator = Locator::new(
            vec![entry("10.0.0.0/8", "table", 50.0, 4.0)],
            default_loc(),
            Some(file.path()),
        )
        .unwrap();
        assert_eq!(locator.mmdb_path(), Some(file.path()));

        let london = locator.locate(ip("81.2.69.160"));
        assert_eq!(london.location, loc("GB-ENG", 51.51, -0.09));
        assert_eq!(
            london.source,
            LocationSource::Mmdb {
                network: net("81.2.69.0/24")
            }
        );
        assert_eq!(london.prefix_len, 24);
        assert_eq!(
            london.bucket.place,
            Place::Point {
                lat_e2: 5151,
                lon_e2: -9
            }
        );
        assert!(!london.bucket.is_enumerable());
        // The hot-path lookup agrees.
        assert_eq!(locator.bucket(ip("81.2.69.1")), (london.bucket, 24));
        // Also through IPv4-mapped IPv6.
        assert_eq!(locator.locate(ip("::ffff:81.2.69.1")).bucket, london.bucket);

        let tokyo = locator.locate(ip("2001:218:1::1"));
        assert_eq!(tokyo.location, loc("JP", 35.69, 139.75));
        assert_eq!(tokyo.prefix_len, 32);

        // The table wins over the mmdb.
        assert_eq!(locator.locate(ip("10.1.1.1")).location.region, "table");

        // A record without coordinates, and an address without a record: default, with
        // the database network as the scope.
        let no_coords = locator.locate(ip("198.51.100.7"));
        assert_eq!(no_coords.source, LocationSource::Default);
        assert_eq!(no_coords.location, default_loc());
        assert_eq!(no_coords.prefix_len, 24);
        let nothing = locator.locate(ip("203.0.113.1"));
        assert_eq!(nothing.bucket, Bucket::DEFAULT);
        assert!(nothing.prefix_len > 0);
    }

    #[test]
    fn garbage_is_not_a_database() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), b"not a database").unwrap();
        let err = Locator::new(vec![], default_loc(), Some(file.path())).unwrap_err();
        assert!(matches!(err, LocationError::ReadMmdb { .. }));
    }

    fn rtt_table() -> RttTable {
        RttTable::new(vec![
            RttRow {
                cidr: net("10.0.0.0/8"),
                rtt_ms: BTreeMap::from([("eu".to_owned(), 10.0), ("us".to_owned(), 90.0)]),
            },
            RttRow {
                cidr: net("10.1.0.0/16"),
                rtt_ms: BTreeMap::from([("eu".to_owned(), 80.0), ("us".to_owned(), 5.0)]),
            },
            RttRow {
                cidr: net("2001:db8::/32"),
                rtt_ms: BTreeMap::from([("eu".to_owned(), 1.0)]),
            },
        ])
        .unwrap()
    }

    #[test]
    fn rtt_table_longest_prefix() {
        let rtt = rtt_table();
        assert_eq!(rtt.lookup(ip("10.2.3.4")).unwrap()["eu"], 10.0);
        assert_eq!(rtt.lookup(ip("10.1.3.4")).unwrap()["us"], 5.0);
        assert_eq!(rtt.lookup_row(ip("10.1.3.4")), Some(1));
        assert_eq!(rtt.lookup(ip("::ffff:10.1.3.4")).unwrap()["us"], 5.0);
        assert_eq!(rtt.lookup(ip("2001:db8::5")).unwrap()["eu"], 1.0);
        assert!(rtt.lookup(ip("192.0.2.1")).is_none());
    }

    #[test]
    fn rtt_rows_split_buckets() {
        let locator = Locator::new(
            vec![entry("10.0.0.0/8", "eu", 50.0, 4.0)],
            default_loc(),
            None,
        )
        .unwrap()
        .with_rtt(rtt_table());
        let a = locator.locate(ip("10.2.0.1"));
        let b = locator.locate(ip("10.1.0.1"));
        assert_eq!(a.bucket.place, b.bucket.place);
        assert_ne!(a.bucket, b.bucket);
        assert_eq!(b.bucket.rtt_row, Some(1));
        assert_eq!(b.rtt.as_ref().unwrap()["us"], 5.0);
        assert_eq!(b.prefix_len, 16);
        // 10.2.0.1 matches the /8 row, but must not be scoped over 10.1/16.
        assert_eq!(a.prefix_len, 15);
        assert_eq!(locator.bucket(ip("10.1.0.1")), (b.bucket, 16));

        let buckets = locator.buckets();
        let keys: Vec<Bucket> = buckets.iter().map(|l| l.bucket).collect();
        assert!(keys.contains(&a.bucket));
        assert!(keys.contains(&b.bucket));
        assert!(keys.contains(&Bucket::DEFAULT));
        // The IPv6 row does not overlap the IPv4 table entry.
        assert!(!keys.contains(&Bucket {
            place: Place::Table(0),
            rtt_row: Some(2)
        }));
        assert!(keys.contains(&Bucket {
            place: Place::Default,
            rtt_row: Some(2)
        }));
        assert!(buckets.iter().all(|l| l.bucket.is_enumerable()));
        let with_row = buckets.iter().find(|l| l.bucket == b.bucket).unwrap();
        assert_eq!(with_row.rtt, b.rtt);
        assert_eq!(with_row.location.region, "eu");
    }

    #[test]
    fn buckets_without_rtt() {
        let locator = table_locator();
        let buckets = locator.buckets();
        assert_eq!(buckets.len(), locator.table().len() + 1);
        assert_eq!(buckets[1].location.region, "us");
        assert_eq!(buckets[1].bucket.place, Place::Table(1));
        assert_eq!(buckets.last().unwrap().bucket, Bucket::DEFAULT);
    }
}
