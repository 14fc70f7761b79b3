//! The `dns.zones` config: [`ZoneConfig`] (apex, nameservers, SOA fields, TTL), its
//! checks ([`ZoneConfig::validate`], [`validate_zones`], [`ZoneConfigError`]), the listen
//! IP as the default address of in-zone nameservers ([`default_nameserver_addresses`]),
//! and `ResolvedZone`, the parsed form the builder makes a zone's records from.
//!
//! What does not belong here: the records themselves (SOA, NS, glue: see `build`), name
//! syntax (see `names`), anything about ingresses.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use hickory_proto::rr::Name;
use hickory_proto::rr::rdata::SOA;
use serde::{Deserialize, Serialize};

use super::names::{display, key_in_zone, name_key, normalize_text, parse_name};

/// One zone served by the embedded DNS server (an entry of `dns.zones` in the API
/// server's config).
///
/// ```yaml
/// name: fedingress.test
/// nameservers:
/// - {name: ns1.fedingress.test, addresses: [192.0.2.53, "2001:db8::53"]}
/// - ns.other-provider.example
/// soa: {rname: hostmaster.fedingress.test, minimum: 30}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZoneConfig {
    /// The zone apex, e.g. `fedingress.test` (a trailing dot is accepted).
    pub name: String,
    /// The zone's nameservers (NS records at the apex); at least one.
    pub nameservers: Vec<NameserverConfig>,
    /// SOA fields; every one has a default.
    #[serde(default)]
    pub soa: SoaConfig,
    /// TTL of the SOA and NS records, in seconds. Default 3600.
    #[serde(default = "default_zone_ttl")]
    pub ttl: u32,
}

/// One nameserver of a zone: a name (`ns1.fedingress.test`) or a name with addresses
/// (`{name: ns1.fedingress.test, addresses: [127.0.0.1, "::1"]}`).
///
/// A nameserver at or under the zone apex (*in-zone*) must have addresses: the server
/// answers A/AAAA for its name and adds them as glue to NS answers, so that the
/// delegation is not lame. When none are given, [`default_nameserver_addresses`] gives
/// it the DNS server's listen IP if that is a specific address. A nameserver outside the
/// zone is resolved elsewhere: it takes no addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameserverConfig {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

impl From<&str> for NameserverConfig {
    fn from(name: &str) -> Self {
        NameserverConfig {
            name: name.to_owned(),
            addresses: Vec::new(),
        }
    }
}

impl From<String> for NameserverConfig {
    fn from(name: String) -> Self {
        NameserverConfig {
            name,
            addresses: Vec::new(),
        }
    }
}

/// The map form of [`NameserverConfig`].
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NameserverMap {
    name: String,
    #[serde(default)]
    addresses: Vec<IpAddr>,
}

impl Serialize for NameserverConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.addresses.is_empty() {
            serializer.serialize_str(&self.name)
        } else {
            NameserverMap {
                name: self.name.clone(),
                addresses: self.addresses.clone(),
            }
            .serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for NameserverConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NameserverConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a nameserver name or {name, addresses}")
            }

            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Self::Value, E> {
                Ok(NameserverConfig::from(name))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let map =
                    NameserverMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(NameserverConfig {
                    name: map.name,
                    addresses: map.addresses,
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The SOA record's fields (RFC 1035 §3.3.13).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SoaConfig {
    /// Primary nameserver. Default: the first of `nameservers`.
    pub mname: Option<String>,
    /// Mailbox of the person responsible, as a name (`hostmaster.example.com`) or an
    /// address (`hostmaster@example.com`). Default: `hostmaster.<zone>`.
    pub rname: Option<String>,
    /// Seconds. Default 3600.
    pub refresh: u32,
    /// Seconds. Default 600.
    pub retry: u32,
    /// Seconds. Default 604800 (a week).
    pub expire: u32,
    /// Negative caching TTL in seconds (RFC 2308). Default 30.
    pub minimum: u32,
}

impl Default for SoaConfig {
    fn default() -> Self {
        SoaConfig {
            mname: None,
            rname: None,
            refresh: 3600,
            retry: 600,
            expire: 604_800,
            minimum: 30,
        }
    }
}

fn default_zone_ttl() -> u32 {
    3600
}

/// A zone config that cannot be served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneConfigError {
    /// A name field is not a valid domain name.
    #[error("zone {zone}: {field} {value:?} is not a valid domain name: {reason}")]
    InvalidName {
        zone: String,
        field: &'static str,
        value: String,
        reason: String,
    },
    /// `nameservers` is empty.
    #[error("zone {zone}: at least one nameserver is required")]
    NoNameservers { zone: String },
    /// A SOA timer beyond 2^31 - 1 seconds.
    #[error("zone {zone}: soa.{field} must be at most 2147483647")]
    TimerOutOfRange { zone: String, field: &'static str },
    /// The same zone twice.
    #[error("zone {zone} is listed twice")]
    Duplicate { zone: String },
    /// An in-zone nameserver without addresses and no specific listen IP to default to.
    #[error(
        "zones[{zone_index}].nameservers[{index}]: {name} is inside zone {zone} and needs \
         addresses (its A/AAAA records and glue): give addresses, or listen on a specific IP \
         (not an unspecified one) for them to default to"
    )]
    NameserverWithoutAddresses {
        zone: String,
        /// Position in `dns.zones` (0 when one zone is validated alone).
        zone_index: usize,
        /// Position in the zone's `nameservers`.
        index: usize,
        name: String,
    },
    /// Addresses for a nameserver outside the zone (never served: not glue).
    #[error(
        "zones[{zone_index}].nameservers[{index}]: {name} is outside zone {zone}: its \
         addresses would never be served; remove them"
    )]
    AddressesOutsideZone {
        zone: String,
        zone_index: usize,
        index: usize,
        name: String,
    },
}

impl ZoneConfigError {
    /// The same error for the zone at `zone_index` of the list.
    fn at(mut self, position: usize) -> Self {
        if let ZoneConfigError::NameserverWithoutAddresses { zone_index, .. }
        | ZoneConfigError::AddressesOutsideZone { zone_index, .. } = &mut self
        {
            *zone_index = position;
        }
        self
    }

    /// Whether the message starts with the config path (`zones[i]…`) rather than the zone.
    pub fn names_field(&self) -> bool {
        matches!(
            self,
            ZoneConfigError::NameserverWithoutAddresses { .. }
                | ZoneConfigError::AddressesOutsideZone { .. }
        )
    }
}

impl ZoneConfig {
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// The first problem found (see [`ZoneConfigError`]).
    pub fn validate(&self) -> Result<(), ZoneConfigError> {
        self.resolve().map(|_| ())
    }

    /// The apex, lower case, without the trailing dot.
    pub fn apex(&self) -> String {
        normalize_text(&self.name)
    }

    pub(super) fn resolve(&self) -> Result<ResolvedZone, ZoneConfigError> {
        let zone = self.apex();
        let invalid =
            |field: &'static str, value: &str, reason: String| ZoneConfigError::InvalidName {
                zone: zone.clone(),
                field,
                value: value.to_owned(),
                reason,
            };
        let origin =
            parse_name(&self.name).map_err(|reason| invalid("name", &self.name, reason))?;
        if self.nameservers.is_empty() {
            return Err(ZoneConfigError::NoNameservers { zone });
        }
        let origin_key = name_key(&origin);
        let mut nameservers = Vec::new();
        for (index, ns) in self.nameservers.iter().enumerate() {
            let name =
                parse_name(&ns.name).map_err(|reason| invalid("nameserver", &ns.name, reason))?;
            let in_zone = key_in_zone(&name_key(&name), &origin_key);
            if in_zone && ns.addresses.is_empty() {
                return Err(ZoneConfigError::NameserverWithoutAddresses {
                    zone,
                    zone_index: 0,
                    index,
                    name: display(&name),
                });
            }
            if !in_zone && !ns.addresses.is_empty() {
                return Err(ZoneConfigError::AddressesOutsideZone {
                    zone,
                    zone_index: 0,
                    index,
                    name: display(&name),
                });
            }
            nameservers.push((name, ns.addresses.clone()));
        }
        let mname = match &self.soa.mname {
            Some(mname) => {
                parse_name(mname).map_err(|reason| invalid("soa.mname", mname, reason))?
            }
            None => nameservers[0].0.clone(),
        };
        let rname = match &self.soa.rname {
            Some(rname) => {
                let text = match rname.split_once('@') {
                    Some((local, domain)) if !local.contains('.') => format!("{local}.{domain}"),
                    Some(_) => {
                        return Err(invalid(
                            "soa.rname",
                            rname,
                            "the mailbox's local part may not contain a dot".to_owned(),
                        ));
                    }
                    None => rname.clone(),
                };
                parse_name(&text).map_err(|reason| invalid("soa.rname", rname, reason))?
            }
            None => parse_name(&format!("hostmaster.{zone}"))
                .map_err(|reason| invalid("soa.rname", "hostmaster", reason))?,
        };
        let timer = |field: &'static str, value: u32| {
            i32::try_from(value).map_err(|_| ZoneConfigError::TimerOutOfRange {
                zone: zone.clone(),
                field,
            })
        };
        let soa = SOA::new(
            mname,
            rname,
            0,
            timer("refresh", self.soa.refresh)?,
            timer("retry", self.soa.retry)?,
            timer("expire", self.soa.expire)?,
            self.soa.minimum,
        );
        Ok(ResolvedZone {
            text: zone,
            origin,
            nameservers,
            soa,
            ttl: self.ttl,
            negative_ttl: self.ttl.min(self.soa.minimum),
        })
    }
}

/// Checks every zone and that no zone is listed twice.
///
/// # Errors
///
/// The first problem found.
pub fn validate_zones(zones: &[ZoneConfig]) -> Result<(), ZoneConfigError> {
    let mut seen = BTreeSet::new();
    for (i, zone) in zones.iter().enumerate() {
        zone.validate().map_err(|e| e.at(i))?;
        if !seen.insert(zone.apex()) {
            return Err(ZoneConfigError::Duplicate { zone: zone.apex() });
        }
    }
    Ok(())
}

/// Gives every in-zone nameserver without addresses the DNS server's listen IP, when
/// that is a specific address (not `0.0.0.0` or `::`); others are left for
/// [`validate_zones`] to report.
pub fn default_nameserver_addresses(zones: &mut [ZoneConfig], listen: Option<IpAddr>) {
    let Some(listen) = listen.filter(|ip| !ip.is_unspecified()) else {
        return;
    };
    for zone in zones {
        let Ok(origin) = parse_name(&zone.name) else {
            continue;
        };
        let origin_key = name_key(&origin);
        for ns in &mut zone.nameservers {
            let in_zone =
                parse_name(&ns.name).is_ok_and(|name| key_in_zone(&name_key(&name), &origin_key));
            if in_zone && ns.addresses.is_empty() {
                ns.addresses.push(listen);
            }
        }
    }
}

/// A [`ZoneConfig`] parsed and checked: what the builder makes the zone's records from.
pub(super) struct ResolvedZone {
    pub(super) text: String,
    pub(super) origin: Name,
    /// With their addresses (in-zone nameservers only).
    pub(super) nameservers: Vec<(Name, Vec<IpAddr>)>,
    pub(super) soa: SOA,
    pub(super) ttl: u32,
    pub(super) negative_ttl: u32,
}
