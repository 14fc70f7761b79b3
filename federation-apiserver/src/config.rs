//! Configuration: a strict YAML file for behaviour, flags for runtime knobs (flags win).
//! Everything is parsed and checked — files read, certificates loaded — before any port
//! is bound, so a bad config exits 64 without side effects.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use crate::auth::Authenticator;

/// Command-line flags of `federation-apiserver`.
#[derive(Debug, Parser)]
#[command(
    name = "federation-apiserver",
    version,
    about = "fedingress federation API server"
)]
pub struct Cli {
    /// YAML config file (see deploy/examples/apiserver.yaml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// REST API listen address (https when a certificate is configured). Port 0 picks one.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Agent gateway (gRPC) listen address; TLS with the same certificate as the API.
    #[arg(long)]
    pub agent_listen: Option<SocketAddr>,
    /// Embedded authoritative DNS server (UDP and TCP on one port).
    #[arg(long)]
    pub dns_listen: Option<SocketAddr>,
    /// Directory of the embedded store.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Development mode: anonymous requests from loopback are admin; loopback listen only.
    #[arg(long)]
    pub dev: bool,
    /// PEM certificate chain for serving TLS.
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key for serving TLS.
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Static token file: `token,user,uid,"group1,group2"` per line.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
}

/// The config file. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub agent_listen: Option<SocketAddr>,
    #[serde(default)]
    pub agents: AgentsConfig,
    #[serde(default)]
    pub dns: DnsConfig,
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub dev: bool,
    pub tls: Option<TlsFiles>,
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub watch: WatchConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageConfig {
    /// redb page cache bound.
    #[serde(default = "default_cache_mib")]
    pub cache_size_mib: usize,
    /// How often history older than one interval is compacted.
    #[serde(default = "default_compaction_seconds")]
    pub compaction_interval_seconds: u64,
}

fn default_cache_mib() -> usize {
    64
}

fn default_compaction_seconds() -> u64 {
    300
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            cache_size_mib: default_cache_mib(),
            compaction_interval_seconds: default_compaction_seconds(),
        }
    }
}

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
    /// Measured RTTs per client subnet, for the Latency strategy.
    #[serde(default)]
    pub latency: Vec<LatencyFile>,
    /// Clients allowed to AXFR the zones (none by default).
    #[serde(default)]
    pub allow_transfer: Vec<ipnet::IpNet>,
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

/// Agent sessions: how often agents send heartbeats, and how long the hub waits for
/// any message before it marks a cluster Offline.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentsConfig {
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_interval_ms: u64,
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
}

fn default_heartbeat_ms() -> u64 {
    2000
}

fn default_lease_ms() -> u64 {
    6000
}

impl Default for AgentsConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: default_heartbeat_ms(),
            lease_ms: default_lease_ms(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchConfig {
    #[serde(default = "default_bookmark_seconds")]
    pub bookmark_interval_seconds: u64,
}

fn default_bookmark_seconds() -> u64 {
    10
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            bookmark_interval_seconds: default_bookmark_seconds(),
        }
    }
}

/// What the server runs with, fully checked.
pub struct Settings {
    pub listen: SocketAddr,
    /// The embedded DNS server's address, when it runs.
    pub dns_listen: Option<SocketAddr>,
    pub dns: DnsConfig,
    pub agent_listen: SocketAddr,
    pub hub: crate::hub::HubSettings,
    /// PEM certificate and key, for the agent gateway's TLS.
    pub tls_pem: Option<(Vec<u8>, Vec<u8>)>,
    pub data_dir: PathBuf,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Authenticator,
    pub cache_size_bytes: usize,
    pub compaction_interval: Duration,
    pub bookmark_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Tokens(#[from] crate::auth::TokenFileError),
}

/// Parses the config file text (strict YAML).
pub fn parse_file(text: &str, path: &str) -> Result<FileConfig, ConfigError> {
    if text.trim().is_empty() {
        return Ok(FileConfig::default());
    }
    yaml_serde::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_string(),
        message: e.to_string(),
    })
}

/// Resolves flags over the file into checked [`Settings`].
pub fn load(cli: &Cli) -> Result<Settings, ConfigError> {
    let file = match &cli.config {
        Some(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: shown.clone(),
                source,
            })?;
            parse_file(&text, &shown)?
        }
        None => FileConfig::default(),
    };
    let listen = cli
        .listen
        .or(file.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 6443)));
    let dev = cli.dev || file.dev;
    if dev && !listen.ip().is_loopback() {
        return Err(ConfigError::Invalid(format!(
            "--dev serves anonymous admin access and may only listen on loopback, not {listen}"
        )));
    }
    let data_dir = cli
        .data_dir
        .clone()
        .or(file.data_dir)
        .unwrap_or_else(|| PathBuf::from("fedingress-data"));
    let tls_files = match (&cli.tls_cert_file, &cli.tls_private_key_file) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert_file: cert.clone(),
            key_file: key.clone(),
        }),
        (None, None) => file.tls,
        _ => {
            return Err(ConfigError::Invalid(
                "--tls-cert-file and --tls-private-key-file go together".into(),
            ));
        }
    };
    let tls = tls_files.as_ref().map(load_tls).transpose()?;
    let tls_pem = match &tls_files {
        Some(files) => Some((
            std::fs::read(&files.cert_file).map_err(|e| {
                ConfigError::Invalid(format!(
                    "TLS certificate {}: {e}",
                    files.cert_file.display()
                ))
            })?,
            std::fs::read(&files.key_file).map_err(|e| {
                ConfigError::Invalid(format!("TLS key {}: {e}", files.key_file.display()))
            })?,
        )),
        None => None,
    };
    let agent_listen = cli
        .agent_listen
        .or(file.agent_listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 6444)));
    if dev && !agent_listen.ip().is_loopback() {
        return Err(ConfigError::Invalid(format!(
            "--dev may only listen on loopback, not {agent_listen}"
        )));
    }
    let agents = &file.agents;
    if agents.heartbeat_interval_ms == 0 || agents.lease_ms <= agents.heartbeat_interval_ms {
        return Err(ConfigError::Invalid(
            "agents.leaseMs must be longer than agents.heartbeatIntervalMs (> 0)".into(),
        ));
    }
    let dns_listen = cli.dns_listen.or(file.dns.listen);
    if let Some(addr) = dns_listen
        && dev
        && !addr.ip().is_loopback()
    {
        return Err(ConfigError::Invalid(format!(
            "--dev may only listen on loopback, not {addr}"
        )));
    }
    check_dns(&file.dns)?;
    let hub = crate::hub::HubSettings {
        heartbeat_interval: Duration::from_millis(agents.heartbeat_interval_ms),
        lease: Duration::from_millis(agents.lease_ms),
    };
    let mut auth = Authenticator::new(dev);
    let token_file = cli.token_auth_file.clone().or(file.token_file);
    if let Some(path) = &token_file {
        auth.load_token_file(path)?;
    }
    if token_file.is_none() && !dev {
        return Err(ConfigError::Invalid(
            "no way to authenticate clients: give --token-auth-file (tokenFile) or --dev".into(),
        ));
    }
    if file.storage.cache_size_mib == 0 || file.storage.compaction_interval_seconds == 0 {
        return Err(ConfigError::Invalid(
            "storage.cacheSizeMib and storage.compactionIntervalSeconds must be positive".into(),
        ));
    }
    if file.watch.bookmark_interval_seconds == 0 {
        return Err(ConfigError::Invalid(
            "watch.bookmarkIntervalSeconds must be positive".into(),
        ));
    }
    Ok(Settings {
        listen,
        dns_listen,
        dns: file.dns,
        agent_listen,
        hub,
        tls_pem,
        data_dir,
        tls,
        auth,
        cache_size_bytes: file.storage.cache_size_mib * 1024 * 1024,
        compaction_interval: Duration::from_secs(file.storage.compaction_interval_seconds),
        bookmark_interval: Duration::from_secs(file.watch.bookmark_interval_seconds),
    })
}

/// Checks the DNS section (coordinates, zone names) so a bad one exits 64.
fn check_dns(dns: &DnsConfig) -> Result<(), ConfigError> {
    let place = |what: &str, lat: f64, lon: f64| {
        if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
            Err(ConfigError::Invalid(format!(
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
    fedingress_dns::zone::validate_zones(&dns.zones)
        .map_err(|e| ConfigError::Invalid(format!("dns.zones: {e}")))?;
    if let Some(path) = &dns.mmdb {
        if !path.is_file() {
            return Err(ConfigError::Invalid(format!(
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
            return Err(ConfigError::Invalid(message));
        }
    }
    Ok(())
}

fn load_tls(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let shown = |p: &Path| p.display().to_string();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert_file)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            ConfigError::Invalid(format!("TLS certificate {}: {e}", shown(&files.cert_file)))
        })?;
    if certs.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "TLS certificate {}: no certificate in the file",
            shown(&files.cert_file)
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .map_err(|e| ConfigError::Invalid(format!("TLS key {}: {e}", shown(&files.key_file))))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ConfigError::Invalid(format!("TLS certificate and key do not fit: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/config/apiserver.yaml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let config = parse_file(&text, path).unwrap();
        assert!(config.dev);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = parse_file("listen: 127.0.0.1:0\nbogus: 1\n", "x.yaml").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn dev_needs_loopback_and_auth_is_required() {
        let cli = Cli::parse_from(["federation-apiserver", "--dev", "--listen", "0.0.0.0:0"]);
        assert!(load(&cli).is_err());
        let cli = Cli::parse_from(["federation-apiserver", "--listen", "127.0.0.1:0"]);
        assert!(
            load(&cli)
                .err()
                .unwrap()
                .to_string()
                .contains("authenticate")
        );
        let cli = Cli::parse_from(["federation-apiserver", "--tls-cert-file", "x.pem"]);
        assert!(load(&cli).is_err());
    }
}
