//! The MaxMind `.mmdb` source of client locations: City-style records
//! (`location/latitude`, `location/longitude`, country and subdivision codes for the
//! region), and [`check_mmdb`], the layout check run when a database is opened (and by
//! the API server's config loader, so that a wrong file exits 64 before anything binds).
//!
//! Lookups are the `maxminddb` crate's: a walk down the database's binary tree, at most
//! 128 steps, so O(prefix length) whatever the database's size.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;

use super::{LocationError, canonical_net, e2};

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
pub(super) struct MmdbHit {
    /// The database network holding the address, in the address's family.
    pub(super) network: IpNet,
    /// Rounded coordinates, when the record has them.
    pub(super) point: Option<(i32, i32)>,
    /// Region, when asked for and the record has coordinates.
    pub(super) region: String,
}

/// The coordinates of a City-style record, and nothing else (the hot path's decode).
#[derive(Debug, Deserialize)]
struct CoordinatesRecord {
    #[serde(default)]
    location: Option<Coordinates>,
}

#[derive(Debug, Deserialize)]
struct Coordinates {
    #[serde(default)]
    latitude: Option<f64>,
    #[serde(default)]
    longitude: Option<f64>,
}

/// How many networks [`check_layout`] samples.
const LAYOUT_SAMPLE: usize = 4096;

/// Checks that `path` is a MaxMind database whose records carry what the locator reads
/// (`location/latitude` and `location/longitude`, as in GeoIP2/GeoLite2 City).
///
/// The first [`LAYOUT_SAMPLE`] networks with data (in tree order) are sampled: at least
/// one must carry both coordinates. Some City records lack them (networks known only
/// to a country), so a partial sample is fine; a sample without any means another
/// layout (a Country database, or another vendor's flat `latitude`/`country_code`
/// records), which would silently place every client at the default location.
///
/// # Errors
///
/// [`LocationError::ReadMmdb`] when the file cannot be read or is not a MaxMind
/// database, [`LocationError::MmdbLayout`] naming the missing field otherwise.
pub fn check_mmdb(path: &Path) -> Result<(), LocationError> {
    Mmdb::open(path).map(|_| ())
}

/// The layout check of [`check_mmdb`] on an open reader.
fn check_layout(path: &Path, reader: &maxminddb::Reader<Vec<u8>>) -> Result<(), LocationError> {
    let layout = |field: &'static str| LocationError::MmdbLayout {
        path: path.to_owned(),
        field,
    };
    let networks = reader
        .networks(maxminddb::WithinOptions::default())
        .map_err(|source| LocationError::ReadMmdb {
            path: path.to_owned(),
            source,
        })?;
    let mut latitude = false;
    for result in networks.take(LAYOUT_SAMPLE) {
        let result = result.map_err(|source| LocationError::ReadMmdb {
            path: path.to_owned(),
            source,
        })?;
        // A record of another shape (say `location` is not a map) is not a City
        // record: the same as missing coordinates.
        if let Ok(Some(CoordinatesRecord {
            location: Some(coordinates),
        })) = result.decode::<CoordinatesRecord>()
        {
            latitude |= coordinates.latitude.is_some();
            if coordinates.latitude.is_some() && coordinates.longitude.is_some() {
                return Ok(());
            }
        }
    }
    Err(layout(if latitude {
        "location/longitude"
    } else {
        "location/latitude"
    }))
}

pub(super) struct Mmdb {
    pub(super) path: PathBuf,
    reader: maxminddb::Reader<Vec<u8>>,
}

impl Mmdb {
    /// Reads the whole file and checks its layout ([`check_mmdb`]).
    pub(super) fn open(path: &Path) -> Result<Self, LocationError> {
        let reader =
            maxminddb::Reader::open_readfile(path).map_err(|source| LocationError::ReadMmdb {
                path: path.to_owned(),
                source,
            })?;
        check_layout(path, &reader)?;
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

    pub(super) fn lookup(&self, ip: IpAddr, want_region: bool) -> MmdbHit {
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
        // Only the coordinates in both modes (one pass over the record, nothing
        // allocated), so that `locate` and `bucket` agree.
        if let Ok(Some(CoordinatesRecord {
            location:
                Some(Coordinates {
                    latitude: Some(lat),
                    longitude: Some(lon),
                }),
        })) = result.decode::<CoordinatesRecord>()
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
