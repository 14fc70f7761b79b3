//! The `dns` section of the config file: the embedded DNS server, its zones, where
//! clients are, and the DNS providers ([`DnsConfig`]), parsed strictly (unknown keys are
//! refused) and checked as a whole ([`DnsConfig::check`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// A `dns` section that cannot run: the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DnsConfigError(pub String);

/// The GSLB: the embedded DNS server, its zones, and where clients are.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsConfig {
    /// UDP+TCP listen address of the embedded server; no address: no server.
    pub listen: Option<SocketAddr>,
    #[serde(default)]
    pub zones: Vec<fedingress_dns::zone::ZoneConfig>,
    #[serde(default)]
    pub locations: LocationsFile,
    /// A MaxMind (GeoIP2/GeoLite2 City format) database consulted when the table has no
    /// entry for a client.
    pub mmdb: Option<PathBuf>,
    /// RTTs per client subnet that the operator supplies (measured elsewhere), for the
    /// Latency strategy; read at startup, the hub measures nothing.
    #[serde(default)]
    pub latency: Vec<LatencyFile>,
    /// Clients allowed to AXFR the zones (none by default).
    #[serde(default)]
    pub allow_transfer: Vec<ipnet::IpNet>,
    /// Response-rate limiting of UDP answers (docs/security.md, "DNS").
    #[serde(default)]
    pub rrl: fedingress_dns::server::config::RrlConfig,
    /// Whose EDNS Client Subnet option steers answers.
    #[serde(default)]
    pub ecs: fedingress_dns::server::config::EcsConfig,
    /// Limits of the TCP listener.
    #[serde(default)]
    pub tcp: fedingress_dns::server::config::TcpConfig,
    /// This federation's id in the ownership records it leaves in providers' zones
    /// (required with `providers`; two federations sharing a zone need different ids).
    pub owner_id: Option<String>,
    /// Cloud DNS services the leader publishes the routing decisions to (Route53, Cloud
    /// DNS), checked as a whole at start (docs/providers.md).
    #[serde(default)]
    pub providers: Vec<fedingress_providers::config::ProviderConfig>,
}

impl DnsConfig {
    /// Checks the section (coordinates, zones, server limits, providers, the mmdb file)
    /// so that a bad one exits 64 before anything binds.
    pub fn check(&self) -> Result<(), DnsConfigError> {
        let dns = self;
        let place = |what: &str, lat: f64, lon: f64| {
            if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
                Err(DnsConfigError(format!(
                    "dns.locations {what}: latitude must be in [-90, 90] and longitude in [-180, 180]"
                )))
            } else {
                Ok(())
            }
        };
        place(
            "default",
            dns.locations.default.latitude,
            dns.locations.default.longitude,
        )?;
        for entry in &dns.locations.table {
            place(&entry.cidr.to_string(), entry.latitude, entry.longitude)?;
        }
        fedingress_dns::zone::validate_zones(&dns.zones).map_err(|e| {
            if e.names_field() {
                DnsConfigError(format!("dns.{e}"))
            } else {
                DnsConfigError(format!("dns.zones: {e}"))
            }
        })?;
        dns.server_config().validate().map_err(DnsConfigError)?;
        let apexes: Vec<String> = dns.zones.iter().map(|z| z.name.clone()).collect();
        fedingress_providers::config::validate(dns.owner_id.as_deref(), &dns.providers, &apexes)
            .map_err(DnsConfigError)?;
        if let Some(path) = &dns.mmdb {
            if !path.is_file() {
                return Err(DnsConfigError(format!(
                    "dns.mmdb: {} is not a readable file",
                    path.display()
                )));
            }
            // The layout too (records with location/latitude and location/longitude), so
            // that another vendor's database exits 64 instead of silently placing every
            // client at the default location.
            if let Err(error) = fedingress_dns::location::check_mmdb(path) {
                let mut message = format!("dns.mmdb: {error}");
                let mut source = std::error::Error::source(&error);
                while let Some(cause) = source {
                    message.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                return Err(DnsConfigError(message));
            }
        }
        Ok(())
    }

    /// What the embedded server runs with besides its zones.
    pub fn server_config(&self) -> fedingress_dns::server::config::ServerConfig {
        fedingress_dns::server::config::ServerConfig {
            rrl: self.rrl.clone(),
            ecs: self.ecs.clone(),
            tcp: self.tcp.clone(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlaceFile {
    pub region: String,
    pub latitude: f64,
    pub longitude: f64,
}

impl Default for PlaceFile {
    fn default() -> Self {
        Self {
            region: "default".into(),
            latitude: 0.0,
            longitude: 0.0,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocationsFile {
    /// Where clients the table does not know are.
    #[serde(default)]
    pub default: PlaceFile,
    #[serde(default)]
    pub table: Vec<TableEntryFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TableEntryFile {
    pub cidr: ipnet::IpNet,
    pub region: String,
    pub latitude: f64,
    pub longitude: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyFile {
    pub cidr: ipnet::IpNet,
    /// Cluster name → round-trip time in milliseconds.
    pub rtt_ms: std::collections::BTreeMap<String, f64>,
}
