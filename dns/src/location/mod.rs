//! Where a DNS client is: the location, the ECS scope and the cache bucket of an address.
//!
//! The address is the EDNS Client Subnet when the query carries one, else the resolver's
//! own address; the server decides which and passes it to [`Locator::locate`]. Sources,
//! in order:
//!
//! 1. the CIDR → location table of the apiserver config ([`LocationEntry`]), longest
//!    prefix first;
//! 2. a MaxMind `.mmdb` file (City-style records) when one is configured;
//! 3. the configured default location.
//!
//! IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`), in queries and in table entries, are
//! treated as the IPv4 address.
//!
//! An optional [`RttTable`] (measured round-trip times per client subnet, for the Latency
//! strategy) rides along: the row a client matches is part of its [`Bucket`].
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

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::Location;

/// One row of the config's client location table: clients in `cidr` are at `location`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocationEntry {
    pub cidr: IpNet,
    pub location: Location,
}

/// One row of a measured RTT table: from clients in `cidr`, the round-trip time to each
/// cluster in milliseconds (clusters not listed were not measured).
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
    /// A measured RTT that is negative or not a number.
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
    /// compute and cache them on first use.
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

/// The address as (is IPv4, bits left-aligned in a u128, number of bits).
fn bits(ip: IpAddr) -> (bool, u128, u8) {
    match ip {
        IpAddr::V4(v4) => (true, u128::from(u32::from(v4)) << 96, 32),
        IpAddr::V6(v6) => (false, u128::from(v6), 128),
    }
}

/// Length of the common prefix of two addresses of one family (`None` across families).
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

fn contains(net: &IpNet, ip: IpAddr) -> bool {
    common_prefix(net.network(), ip).is_some_and(|len| len >= net.prefix_len())
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    contains(a, b.network()) || contains(b, a.network())
}

/// Longest-prefix match of `ip` among `nets` (canonical), and the shortest prefix length
/// around `ip` (at least the match's) within which every address has the same match.
fn longest_match<'a>(ip: IpAddr, nets: impl Iterator<Item = &'a IpNet>) -> (Option<usize>, u8) {
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
// RTT table

/// Measured round-trip times per client subnet (for the Latency strategy), matched by
/// longest prefix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RttTable {
    rows: Vec<RttRow>,
}

impl RttTable {
    /// A table of `rows` (CIDRs normalised as in [`Locator`]).
    ///
    /// # Errors
    ///
    /// [`LocationError::DuplicateCidr`] when two rows name one network,
    /// [`LocationError::InvalidRtt`] for a negative or non-numeric RTT.
    pub fn new(rows: Vec<RttRow>) -> Result<Self, LocationError> {
        let mut normalised: Vec<RttRow> = Vec::with_capacity(rows.len());
        for row in rows {
            let cidr = canonical_net(row.cidr);
            if normalised.iter().any(|r| r.cidr == cidr) {
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
        Ok(RttTable { rows: normalised })
    }

    /// The rows, normalised, in config order ([`Bucket::rtt_row`] indexes them).
    pub fn rows(&self) -> &[RttRow] {
        &self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The index of the longest-prefix row holding `ip`.
    pub fn lookup_row(&self, ip: IpAddr) -> Option<usize> {
        longest_match(canonical_ip(ip), self.rows.iter().map(|r| &r.cidr)).0
    }

    /// The RTTs (cluster → ms) of the longest-prefix row holding `ip`.
    pub fn lookup(&self, ip: IpAddr) -> Option<&BTreeMap<String, f64>> {
        self.lookup_row(ip)
            .and_then(|row| self.rows.get(row))
            .map(|row| &row.rtt_ms)
    }
}

// ---------------------------------------------------------------------------------------
// MaxMind database

/// The region parts of a City-style (GeoIP2/GeoLite2 City) record (the coordinates are
/// read by path).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MmdbRecord {
    country: MmdbCode,
    subdivisions: Vec<MmdbCode>,
    continent: MmdbCode,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MmdbCode {
    iso_code: Option<String>,
    /// Continents have a `code` instead of an `iso_code`.
    code: Option<String>,
}

impl MmdbRecord {
    /// `US-CA` (country and first subdivision), else the country code, else the
    /// continent code, else empty.
    fn region(&self) -> String {
        let country = self.country.iso_code.as_deref();
        let subdivision = self
            .subdivisions
            .first()
            .and_then(|s| s.iso_code.as_deref());
        match (country, subdivision) {
            (Some(country), Some(subdivision)) => format!("{country}-{subdivision}"),
            (Some(country), None) => country.to_owned(),
            (None, Some(subdivision)) => subdivision.to_owned(),
            (None, None) => self.continent.code.clone().unwrap_or_default(),
        }
    }
}

/// What the mmdb says about one address.
struct MmdbHit {
    /// The database network holding the address, in the address's family.
    network: IpNet,
    /// Rounded coordinates, when the record has them.
    point: Option<(i32, i32)>,
    /// Region, when asked for and the record has coordinates.
    region: String,
}

struct Mmdb {
    path: PathBuf,
    reader: maxminddb::Reader<Vec<u8>>,
}

impl Mmdb {
    fn open(path: &Path) -> Result<Self, LocationError> {
        let reader =
            maxminddb::Reader::open_readfile(path).map_err(|source| LocationError::ReadMmdb {
                path: path.to_owned(),
                source,
            })?;
        Ok(Mmdb {
            path: path.to_owned(),
            reader,
        })
    }

    /// The whole address family as one network.
    fn everything(ip: IpAddr) -> IpNet {
        match ip {
            IpAddr::V4(_) => IpNet::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            IpAddr::V6(_) => IpNet::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        }
        .unwrap_or_default()
    }

    /// The single address as a network (the conservative scope when lookup fails).
    fn single(ip: IpAddr) -> IpNet {
        IpNet::from(ip)
    }

    fn lookup(&self, ip: IpAddr, want_region: bool) -> MmdbHit {
        if ip.is_ipv6() && self.reader.metadata().ip_version == 4 {
            // An IPv4-only database says nothing about any IPv6 address.
            return MmdbHit {
                network: Self::everything(ip),
                point: None,
                region: String::new(),
            };
        }
        let result = match self.reader.lookup(ip) {
            Ok(result) => result,
            Err(error) => {
                tracing::debug!(path = %self.path.display(), address = %ip, error = %error, "mmdb lookup failed");
                return MmdbHit {
                    network: Self::single(ip),
                    point: None,
                    region: String::new(),
                };
            }
        };
        let network = match result.network() {
            Ok(network) => {
                let prefix = network.prefix();
                match (network.network(), ip) {
                    (IpAddr::V6(_), IpAddr::V4(_)) => {
                        // Matched above the IPv4 subtree: the record covers all of IPv4.
                        if prefix <= 96 {
                            Self::everything(ip)
                        } else {
                            Self::single(ip)
                        }
                    }
                    (net, _) => IpNet::new(net, prefix)
                        .map(canonical_net)
                        .unwrap_or_else(|_| Self::single(ip)),
                }
            }
            Err(_) => Self::single(ip),
        };
        let mut hit = MmdbHit {
            network,
            point: None,
            region: String::new(),
        };
        // Coordinates by path in both modes, so that `locate` and `bucket` agree.
        let coordinate = |key| {
            result.decode_path::<f64>(&[
                maxminddb::PathElement::Key("location"),
                maxminddb::PathElement::Key(key),
            ])
        };
        if let (Ok(Some(lat)), Ok(Some(lon))) = (coordinate("latitude"), coordinate("longitude"))
            && (-90.0..=90.0).contains(&lat)
            && (-180.0..=180.0).contains(&lon)
        {
            hit.point = Some((e2(lat), e2(lon)));
            if want_region {
                match result.decode::<MmdbRecord>() {
                    Ok(Some(record)) => hit.region = record.region(),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::debug!(path = %self.path.display(), address = %ip, error = %error, "mmdb record not decodable");
                    }
                }
            }
        }
        hit
    }
}

// ---------------------------------------------------------------------------------------
// Locator

/// Turns client addresses into locations, ECS scopes and cache buckets. Immutable; share
/// it behind an `Arc`.
pub struct Locator {
    table: Vec<LocationEntry>,
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
    /// [`LocationError::InvalidCoordinates`] for a location off the globe,
    /// [`LocationError::DuplicateCidr`] when two entries name one network.
    pub fn new(
        table: Vec<LocationEntry>,
        default: Location,
        mmdb: Option<&Path>,
    ) -> Result<Self, LocationError> {
        check_coordinates(|| "default location".to_owned(), &default)?;
        let mut normalised: Vec<LocationEntry> = Vec::with_capacity(table.len());
        for entry in table {
            let cidr = canonical_net(entry.cidr);
            check_coordinates(|| format!("location of {cidr}"), &entry.location)?;
            if normalised.iter().any(|e| e.cidr == cidr) {
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
        Ok(Locator {
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
        let (rtt_row, rtt_scope) = longest_match(ip, self.rtt.rows.iter().map(|r| &r.cidr));
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
                .and_then(|row| self.rtt.rows.get(row))
                .map(|row| row.rtt_ms.clone()),
        }
    }

    /// Only the bucket and ECS scope of `ip` (no allocation for table hits, and mmdb
    /// hits decode only the coordinates): the query hot path's lookup.
    pub fn bucket(&self, ip: IpAddr) -> (Bucket, u8) {
        let ip = canonical_ip(ip);
        let (place, _, scope, _) = self.place(ip, false);
        let (rtt_row, rtt_scope) = longest_match(ip, self.rtt.rows.iter().map(|r| &r.cidr));
        (Bucket { place, rtt_row }, scope.max(rtt_scope))
    }

    /// The place of a canonical `ip`, where it came from, its scope, and (when
    /// `want_region`) the region of an mmdb hit.
    fn place(&self, ip: IpAddr, want_region: bool) -> (Place, LocationSource, u8, String) {
        let (matched, table_scope) = longest_match(ip, self.table.iter().map(|e| &e.cidr));
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
            for (row_index, row) in self.rtt.rows.iter().enumerate() {
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

// ---------------------------------------------------------------------------------------
// Test support: a tiny MaxMind DB writer

/// Writes small City-style MaxMind databases for tests (nothing can be downloaded).
///
/// The format (MaxMind DB 2.0): a binary search tree over the address bits (here IPv6,
/// IPv4 networks under `::/96`, 24-bit records), 16 zero bytes, the data section, then
/// `\xAB\xCD\xEFMaxMind.com` and the metadata map.
#[cfg(test)]
pub(crate) mod test_mmdb {
    use std::net::IpAddr;

    use ipnet::IpNet;

    /// One network of a test database.
    pub(crate) struct CityNetwork {
        pub network: IpNet,
        pub latitude: Option<f64>,
        pub longitude: Option<f64>,
        pub country: Option<&'static str>,
        pub subdivision: Option<&'static str>,
    }

    enum Value {
        Str(String),
        Double(f64),
        Uint(u8, u64),
        Map(Vec<(&'static str, Value)>),
        Array(Vec<Value>),
    }

    fn control(out: &mut Vec<u8>, type_: u8, size: usize) {
        let (five, extra): (u8, Vec<u8>) = if size < 29 {
            (size as u8, vec![])
        } else if size < 285 {
            (29, vec![(size - 29) as u8])
        } else if size < 65_821 {
            (30, ((size - 285) as u16).to_be_bytes().to_vec())
        } else {
            (31, ((size - 65_821) as u32).to_be_bytes()[1..].to_vec())
        };
        if type_ <= 7 {
            out.push((type_ << 5) | five);
        } else {
            out.push(five);
            out.push(type_ - 7);
        }
        out.extend(extra);
    }

    fn encode(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Str(s) => {
                control(out, 2, s.len());
                out.extend(s.as_bytes());
            }
            Value::Double(d) => {
                control(out, 3, 8);
                out.extend(d.to_be_bytes());
            }
            Value::Uint(type_, n) => {
                let bytes = n.to_be_bytes();
                let skip = bytes.iter().take_while(|b| **b == 0).count();
                control(out, *type_, 8 - skip);
                out.extend(&bytes[skip..]);
            }
            Value::Map(pairs) => {
                control(out, 7, pairs.len());
                for (key, value) in pairs {
                    encode(&Value::Str((*key).to_owned()), out);
                    encode(value, out);
                }
            }
            Value::Array(items) => {
                control(out, 11, items.len());
                for item in items {
                    encode(item, out);
                }
            }
        }
    }

    fn record(network: &CityNetwork) -> Value {
        let mut pairs = Vec::new();
        let mut location = Vec::new();
        if let Some(lat) = network.latitude {
            location.push(("latitude", Value::Double(lat)));
        }
        if let Some(lon) = network.longitude {
            location.push(("longitude", Value::Double(lon)));
        }
        location.push(("accuracy_radius", Value::Uint(5, 50)));
        pairs.push(("location", Value::Map(location)));
        if let Some(country) = network.country {
            pairs.push((
                "country",
                Value::Map(vec![("iso_code", Value::Str(country.to_owned()))]),
            ));
        }
        if let Some(subdivision) = network.subdivision {
            pairs.push((
                "subdivisions",
                Value::Array(vec![Value::Map(vec![
                    ("iso_code", Value::Str(subdivision.to_owned())),
                    (
                        "names",
                        Value::Map(vec![("en", Value::Str(format!("{subdivision} land")))]),
                    ),
                ])]),
            ));
        }
        Value::Map(pairs)
    }

    #[derive(Clone, Copy)]
    enum Rec {
        Empty,
        Node(usize),
        Data(usize),
    }

    /// A City-style IPv6 database holding `networks`.
    pub(crate) fn city_db(networks: &[CityNetwork]) -> Vec<u8> {
        let mut data = Vec::new();
        let mut nodes: Vec<[Rec; 2]> = vec![[Rec::Empty, Rec::Empty]];
        let mut order: Vec<&CityNetwork> = networks.iter().collect();
        // Less specific first, so that a more specific network splits it.
        order.sort_by_key(|n| n.network.prefix_len());
        for network in order {
            let offset = data.len();
            encode(&record(network), &mut data);
            let (bits, prefix) = match network.network.trunc() {
                IpNet::V4(v4) => (
                    u128::from(u32::from(v4.network())),
                    96 + usize::from(v4.prefix_len()),
                ),
                IpNet::V6(v6) => (u128::from(v6.network()), usize::from(v6.prefix_len())),
            };
            assert!(prefix > 0, "a network of prefix 0 is not supported");
            let mut node = 0;
            for depth in 0..prefix {
                let bit = ((bits >> (127 - depth)) & 1) as usize;
                if depth == prefix - 1 {
                    nodes[node][bit] = Rec::Data(offset);
                    break;
                }
                match nodes[node][bit] {
                    Rec::Node(next) => node = next,
                    inherited => {
                        let next = nodes.len();
                        nodes.push([inherited, inherited]);
                        nodes[node][bit] = Rec::Node(next);
                        node = next;
                    }
                }
            }
        }
        let node_count = nodes.len();
        let mut out = Vec::new();
        for node in &nodes {
            for rec in node {
                let value = match *rec {
                    Rec::Empty => node_count,
                    Rec::Node(n) => n,
                    Rec::Data(offset) => node_count + 16 + offset,
                };
                assert!(
                    value < 1 << 24,
                    "test database too large for 24-bit records"
                );
                out.extend(&(value as u32).to_be_bytes()[1..]);
            }
        }
        out.extend([0u8; 16]);
        out.extend(&data);
        out.extend(b"\xAB\xCD\xEFMaxMind.com");
        let metadata = Value::Map(vec![
            ("binary_format_major_version", Value::Uint(5, 2)),
            ("binary_format_minor_version", Value::Uint(5, 0)),
            ("build_epoch", Value::Uint(9, 1_700_000_000)),
            (
                "database_type",
                Value::Str("fedingress-Test-City".to_owned()),
            ),
            (
                "description",
                Value::Map(vec![(
                    "en",
                    Value::Str("fedingress test database".to_owned()),
                )]),
            ),
            ("ip_version", Value::Uint(5, 6)),
            ("languages", Value::Array(vec![Value::Str("en".to_owned())])),
            ("node_count", Value::Uint(6, node_count as u64)),
            ("record_size", Value::Uint(5, 24)),
        ]);
        encode(&metadata, &mut out);
        out
    }

    /// Convenience: a network from text.
    pub(crate) fn net(text: &str) -> IpNet {
        text.parse().expect("test network")
    }

    /// Convenience: an address from text.
    pub(crate) fn ip(text: &str) -> IpAddr {
        text.parse().expect("test address")
    }
}

#[cfg(test)]
mod tests {
    use super::test_mmdb::{CityNetwork, city_db, ip, net};
    use super::*;

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
