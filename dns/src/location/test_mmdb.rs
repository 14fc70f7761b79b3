//! Writes small City-style MaxMind databases for tests (nothing can be downloaded).
//! Compiled for this crate's tests and, with the `test-mmdb` feature, for other crates'
//! tests (the apiserver's process tests write bad databases with it).
//!
//! The format (MaxMind DB 2.0): a binary search tree over the address bits (here IPv6,
//! IPv4 networks under `::/96`, 24-bit records), 16 zero bytes, the data section, then
//! `\xAB\xCD\xEFMaxMind.com` and the metadata map.

use std::net::IpAddr;

use ipnet::IpNet;

/// One network of a test database.
pub struct CityNetwork {
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
pub fn city_db(networks: &[CityNetwork]) -> Vec<u8> {
    let records: Vec<(IpNet, Value)> = networks.iter().map(|n| (n.network, record(n))).collect();
    database(records, "fedingress-Test-City")
}

/// One network of a database in another vendor's flat layout (as the npm
/// `@ip-location-db/*-mmdb` files have it): `latitude`, `longitude` and
/// `country_code` at the top level of the record, no `location` map.
pub struct FlatNetwork {
    pub network: IpNet,
    pub latitude: f64,
    pub longitude: f64,
    pub country_code: &'static str,
}

/// A flat-layout IPv6 database holding `networks`.
pub fn flat_db(networks: &[FlatNetwork]) -> Vec<u8> {
    let records: Vec<(IpNet, Value)> = networks
        .iter()
        .map(|n| {
            (
                n.network,
                Value::Map(vec![
                    ("country_code", Value::Str(n.country_code.to_owned())),
                    ("latitude", Value::Double(n.latitude)),
                    ("longitude", Value::Double(n.longitude)),
                ]),
            )
        })
        .collect();
    database(records, "fedingress-Test-Flat")
}

/// An IPv6 database of (network, record) pairs.
fn database(mut records: Vec<(IpNet, Value)>, database_type: &str) -> Vec<u8> {
    let mut data = Vec::new();
    let mut nodes: Vec<[Rec; 2]> = vec![[Rec::Empty, Rec::Empty]];
    // Less specific first, so that a more specific network splits it.
    records.sort_by_key(|(network, _)| network.prefix_len());
    for (network, value) in &records {
        let offset = data.len();
        encode(value, &mut data);
        let (bits, prefix) = match network.trunc() {
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
        ("database_type", Value::Str(database_type.to_owned())),
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
pub fn net(text: &str) -> IpNet {
    text.parse().expect("test network")
}

/// Convenience: an address from text.
pub fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address")
}
