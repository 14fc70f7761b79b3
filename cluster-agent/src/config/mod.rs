//! The agent's config file: strict YAML (unknown keys are errors), parsed and checked in
//! full — token file read, CA file read, every endpoint parsed — before anything binds, so
//! a bad config exits 64 without side effects.
//!
//! ```yaml
//! hub:
//!   addresses: ["https://hub-a.example.com:6444", "https://hub-b.example.com:6444"]
//!   caFile: ca.pem
//! cluster: eu-west
//! tokenFile: agent-token
//! driver: standalone
//! listen: [{bind: 127.0.0.11, advertise: 203.0.113.7}, {bind: "::1"}]
//! services: {echo: ["127.0.0.1:9001", "[::1]:9001", "10.0.0.5"]}
//! tlsSecrets: {shop-tls: {certFile: shop.crt, keyFile: shop.key}}
//! stateDir: state
//! member: {name: web-1, labels: {zone: a}, address: 192.0.2.11}
//! ```
//!
//! Decisions:
//! - `hub.addresses` lists the agent gateway of every federation-apiserver replica (they
//!   share one store); the agent holds one session and moves to the next address when
//!   it goes away (see [`crate::hub`]). `hub.address: URL` is the same as
//!   `hub.addresses: [URL]`; exactly one of the two is given. All addresses use one
//!   scheme, and `hub.caFile` verifies every one of them (each address's host is its
//!   TLS server name).
//! - `cluster` is the cluster's name as a plain string (a DNS-1123 label).
//! - Relative paths (`tokenFile`, `stateDir`, `hub.caFile`) are resolved against the
//!   directory of the config file, as kubeconfig does, so a config and its files move
//!   together. [`Config::from_yaml`] leaves them as written.
//! - Service endpoints are IP addresses (like a Kubernetes EndpointSlice), each with its
//!   own port (`10.0.0.5:8080`, `[fd00::5]:8080`) or without one (`10.0.0.5`, `fd00::5`).
//!   A rule's backend `{service, port}` selects the service; `backend.port` is the port
//!   of endpoints written without one and is otherwise only a label in reports.
//! - `listen[].advertise` is what the hub publishes in DNS: an IP address or a DNS name
//!   (e.g. a cloud load balancer in front of the agent); it defaults to `bind`, which
//!   then must not be the unspecified address.
//! - `tlsSecrets` maps the `secretName` of a FederatedIngress's `spec.tls` entries to PEM
//!   files (a certificate chain, leaf first, and its private key), like a cluster's
//!   `kubernetes.io/tls` Secrets. [`Config::load`] reads and checks every pair (the key
//!   must match the certificate); the running agent reloads a pair when its files change.
//! - `member` says which of the cluster's agents this is (see [`member`]): its name
//!   defaults to the host name, filled in by [`Config::load`] (a host name that is not a
//!   DNS-1123 label is refused: set `member.name`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use fedingress_api::cluster::Address;
use fedingress_api::names;
use serde::Deserialize;

pub mod anycast;
pub mod kubernetes;
pub mod limits;
pub mod member;
pub mod pools;
pub mod vrrp;

pub use anycast::AnycastConfig;
pub use kubernetes::{KubernetesConfig, ProfileSetting};
pub use limits::LimitsConfig;
pub use member::MemberConfig;
pub use pools::PoolsConfig;
pub use vrrp::VrrpConfig;

/// The whole config file. Build it with [`Config::load`] (file, fully checked) or
/// [`Config::from_yaml`] (text, every check that needs no file system).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Where the hub's agent gateway is.
    pub hub: HubConfig,
    /// This cluster's name as registered at the hub (a DNS-1123 label).
    pub cluster: String,
    /// File holding the agent token issued by the hub (`POST .../clusters/{name}/token`):
    /// the compatibility path. Exactly one of `tokenFile` and `joinTokenFile` is given.
    #[serde(default)]
    pub token_file: PathBuf,
    /// File holding a join token (`fedctl join`; single use, short-lived). The agent
    /// generates its key, obtains a client certificate with the token (key and
    /// certificate kept in `stateDir`, the key 0600), authenticates with it (mTLS) from
    /// then on and renews it at 70-80 % of its lifetime. Needs an `https://` hub. A new
    /// join token in this file is used when the certificate has expired or was refused.
    #[serde(default)]
    pub join_token_file: Option<PathBuf>,
    /// How the cluster's share is served.
    pub driver: Driver,
    /// Addresses the standalone driver serves on, IPv4 and IPv6; at least one.
    #[serde(default)]
    pub listen: Vec<ListenAddress>,
    /// Backend services: service name → endpoints.
    #[serde(default)]
    pub services: BTreeMap<String, Vec<ServiceEndpoint>>,
    /// Active health checks of service endpoints.
    #[serde(default)]
    pub health_check: HealthCheckConfig,
    /// The kubernetes driver's settings (driver `kubernetes` only; defaults when absent).
    #[serde(default)]
    pub kubernetes: Option<KubernetesConfig>,
    /// How long a proxied UDP session lives without traffic in either direction.
    #[serde(default = "default_udp_idle_timeout_ms")]
    pub udp_idle_timeout_ms: u64,
    /// How long a proxied TCP connection may take to connect to an endpoint.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Certificates for HTTPS and terminated TLS rules: `spec.tls[].secretName` → files.
    #[serde(default)]
    pub tls_secrets: BTreeMap<String, TlsSecretFiles>,
    /// How long connections of a removed listener (and of every listener on SIGTERM) may
    /// take to finish before they are closed; 0 closes them at once.
    #[serde(default = "default_drain_timeout_ms")]
    pub drain_timeout_ms: u64,
    /// Directory of the agent's state (the last applied plan, so the agent fails static).
    pub state_dir: PathBuf,
    /// Listen address of the admin endpoint (`/healthz`); port 0 picks one.
    #[serde(default = "default_admin")]
    pub admin: SocketAddr,
    /// How often a report is sent even when nothing changed.
    #[serde(default = "default_report_interval_ms")]
    pub report_interval_ms: u64,
    /// The BGP speaker announcing the anycast addresses of placed shares (standalone
    /// driver); none when absent.
    #[serde(default)]
    pub anycast: Option<AnycastConfig>,
    /// How much the standalone data plane may take from its clients (sessions,
    /// connections, idle and handshake timeouts, file descriptors); defaults when absent.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// A virtual address shared with other hosts' agents through keepalived (VRRP);
    /// none when absent.
    #[serde(default)]
    pub vrrp: Option<VrrpConfig>,
    /// VRRP (keepalived) for the IngressPools of the hub's plan (see [`pools`]); none
    /// when absent. Excludes `vrrp`.
    #[serde(default)]
    pub pools: Option<PoolsConfig>,
    /// Who this agent is among its cluster's members: name (default the host name),
    /// labels and address (see [`member`]).
    #[serde(default)]
    pub member: MemberConfig,
}

/// The hub's agent gateway: `address` or `addresses`, exactly one of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HubConfig {
    /// `https://host:port` (or `http://` for local development): one hub.
    #[serde(default)]
    pub address: Option<String>,
    /// The agent gateway of every federation-apiserver replica, in the same form.
    #[serde(default)]
    pub addresses: Option<Vec<String>>,
    /// PEM CA bundle to verify the hub with (https only), whichever address the agent
    /// is on; the system roots when absent.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Allow `http://` to a hub that is not on loopback (the agent's credentials then
    /// cross the network in the clear). Without it such an address is refused.
    #[serde(default)]
    pub insecure_allow_plaintext: bool,
}

impl HubConfig {
    /// The hub's addresses: `addresses`, or `address` as a one-element list.
    pub fn address_list(&self) -> Vec<String> {
        match (&self.address, &self.addresses) {
            (_, Some(addresses)) => addresses.clone(),
            (Some(address), None) => vec![address.clone()],
            (None, None) => Vec::new(),
        }
    }

    /// Every problem of the section, each naming its field.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let listed: Vec<(String, &str)> = match (&self.address, &self.addresses) {
            (Some(_), Some(_)) => {
                problems.push(
                    "hub: give address or addresses, not both (address is the one-element addresses)"
                        .to_owned(),
                );
                return problems;
            }
            (None, None) => {
                problems.push("hub.addresses: required (or hub.address)".to_owned());
                return problems;
            }
            (Some(address), None) => vec![("hub.address".to_owned(), address.as_str())],
            (None, Some(addresses)) => {
                if addresses.is_empty() {
                    problems.push("hub.addresses: at least one address is required".to_owned());
                }
                addresses
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (format!("hub.addresses[{i}]"), a.as_str()))
                    .collect()
            }
        };
        // Address (normalized) → the field that gave it first.
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (field, address) in &listed {
            if let Err(message) = check_hub_address(address) {
                problems.push(format!("{field}: {message}"));
                continue;
            }
            if !self.insecure_allow_plaintext && !secure_hub_address(address) {
                problems.push(format!(
                    "{field}: {address} is plain http:// to a host that is not loopback, so \
                     the agent's credentials would cross the network in the clear: use \
                     https:// (with hub.caFile), or set hub.insecureAllowPlaintext: true"
                ));
            }
            let key = address.trim_end_matches('/').to_ascii_lowercase();
            match seen.get(&key) {
                Some(first) => {
                    problems.push(format!("{field}: {address} is listed twice (as {first})"));
                }
                None => {
                    seen.insert(key, field);
                }
            }
        }
        let https = |a: &str| a.starts_with("https://");
        if let Some((_, first)) = listed.first() {
            for (field, address) in listed.iter().skip(1) {
                if check_hub_address(address).is_ok() && https(address) != https(first) {
                    problems.push(format!(
                        "{field}: every hub address must use the scheme of the first ({})",
                        if https(first) { "https://" } else { "http://" }
                    ));
                }
            }
        }
        if self.ca_file.is_some() && !listed.iter().any(|(_, a)| https(a)) {
            problems.push("hub.caFile: only used with an https:// hub address".to_owned());
        }
        problems
    }
}

/// The agent's driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    /// The agent serves the plan itself (see [`crate::standalone`]).
    Standalone,
    /// The agent renders Kubernetes objects in its member cluster (see
    /// [`crate::kubernetes`]).
    Kubernetes,
}

impl Driver {
    /// The name as written in the config.
    pub const fn as_str(self) -> &'static str {
        match self {
            Driver::Standalone => "standalone",
            Driver::Kubernetes => "kubernetes",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One address the data plane binds every rule's port on.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListenAddress {
    /// Local IPv4 or IPv6 address to bind.
    pub bind: IpAddr,
    /// Address reported to the hub (IP address or DNS name); default `bind`.
    #[serde(default)]
    pub advertise: Option<String>,
}

impl ListenAddress {
    /// The address reported to the hub for this bind address.
    pub fn advertised(&self) -> Address {
        match self.advertise.as_deref() {
            None => Address::ip(self.bind),
            Some(text) => match text.parse::<IpAddr>() {
                Ok(ip) => Address::ip(ip),
                Err(_) => Address::hostname(text),
            },
        }
    }
}

/// One endpoint of a service: an IP address with an optional port. Written `10.0.0.5:80`,
/// `[fd00::5]:80`, `10.0.0.5`, `fd00::5` or `[fd00::5]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct ServiceEndpoint {
    pub ip: IpAddr,
    /// The endpoint's port; `None` takes the rule backend's port.
    pub port: Option<u16>,
}

impl ServiceEndpoint {
    /// The socket address traffic for a backend on `backend_port` goes to.
    pub fn socket_addr(&self, backend_port: u16) -> SocketAddr {
        SocketAddr::new(self.ip, self.port.unwrap_or(backend_port))
    }
}

/// An endpoint that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "endpoint {0:?} must be an IP address with an optional port (10.0.0.5:8080, [fd00::5]:8080, 10.0.0.5), port 1-65535"
)]
pub struct InvalidEndpoint(String);

impl FromStr for ServiceEndpoint {
    type Err = InvalidEndpoint;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidEndpoint(text.to_owned());
        if let Ok(addr) = text.parse::<SocketAddr>() {
            if addr.port() == 0 {
                return Err(invalid());
            }
            return Ok(ServiceEndpoint {
                ip: addr.ip(),
                port: Some(addr.port()),
            });
        }
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        match bare.parse::<IpAddr>() {
            // `[1.2.3.4]` is not a thing.
            Ok(IpAddr::V4(_)) if bare.len() != text.len() => Err(invalid()),
            Ok(ip) => Ok(ServiceEndpoint { ip, port: None }),
            Err(_) => Err(invalid()),
        }
    }
}

impl TryFrom<String> for ServiceEndpoint {
    type Error = InvalidEndpoint;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for ServiceEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.ip, self.port) {
            (ip, Some(port)) => SocketAddr::new(ip, port).fmt(f),
            (IpAddr::V6(ip), None) => write!(f, "[{ip}]"),
            (IpAddr::V4(ip), None) => ip.fmt(f),
        }
    }
}

/// Active health checks of service endpoints (see [`crate::standalone`] for the states).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheckConfig {
    /// Time between two checks of one endpoint.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// How long one check may take.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Consecutive successes that turn an unhealthy endpoint healthy.
    #[serde(default = "default_threshold")]
    pub healthy_threshold: u32,
    /// Consecutive failures (checks or failed proxy connects) that turn a healthy
    /// endpoint unhealthy.
    #[serde(default = "default_threshold")]
    pub unhealthy_threshold: u32,
    /// A UDP probe for endpoints behind UDP listeners: send `send`, expect a reply that
    /// starts with `expect`. Without it those endpoints get the TCP connect check.
    #[serde(default)]
    pub udp: Option<UdpProbe>,
    /// The HTTP probe of endpoints behind HTTP and HTTPS rules (always on; these are its
    /// settings).
    #[serde(default)]
    pub http: HttpProbe,
}

impl HealthCheckConfig {
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            interval_ms: default_interval_ms(),
            timeout_ms: default_timeout_ms(),
            healthy_threshold: default_threshold(),
            unhealthy_threshold: default_threshold(),
            udp: None,
            http: HttpProbe::default(),
        }
    }
}

/// The HTTP health probe: `GET path` over HTTP/1.1 to the endpoint, passing when the
/// status is in `expectStatus`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpProbe {
    /// Request path (with an optional query); default `/`.
    #[serde(default = "default_probe_path")]
    pub path: String,
    /// Accepted status: a code (`200`) or an inclusive range (`"200-399"`, the default).
    #[serde(default)]
    pub expect_status: StatusRange,
    /// `Host` header of the probe; default the endpoint's `ip:port`.
    #[serde(default)]
    pub host: Option<String>,
}

impl Default for HttpProbe {
    fn default() -> Self {
        HttpProbe {
            path: default_probe_path(),
            expect_status: StatusRange::default(),
            host: None,
        }
    }
}

/// An inclusive range of HTTP status codes, written `200` or `"200-399"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "StatusSpec")]
pub struct StatusRange {
    pub min: u16,
    pub max: u16,
}

impl StatusRange {
    pub fn contains(&self, status: u16) -> bool {
        (self.min..=self.max).contains(&status)
    }
}

impl Default for StatusRange {
    fn default() -> Self {
        StatusRange { min: 200, max: 399 }
    }
}

impl fmt::Display for StatusRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum StatusSpec {
    Code(u16),
    Text(String),
}

/// A status range that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("expectStatus {0:?} must be a status code 100-599 or a range like \"200-399\"")]
pub struct InvalidStatusRange(String);

impl TryFrom<StatusSpec> for StatusRange {
    type Error = InvalidStatusRange;

    fn try_from(spec: StatusSpec) -> Result<Self, Self::Error> {
        let text = match spec {
            StatusSpec::Code(code) => code.to_string(),
            StatusSpec::Text(text) => text,
        };
        let invalid = || InvalidStatusRange(text.clone());
        let code = |t: &str| {
            t.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
        };
        let (min, max) = match text.split_once('-') {
            Some((a, b)) => (code(a).ok_or_else(invalid)?, code(b).ok_or_else(invalid)?),
            None => {
                let c = code(&text).ok_or_else(invalid)?;
                (c, c)
            }
        };
        if min > max {
            return Err(invalid());
        }
        Ok(StatusRange { min, max })
    }
}

/// The files of one TLS secret.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSecretFiles {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key_file: PathBuf,
}

/// A parsed certificate chain and its key, checked to belong together.
#[derive(Debug)]
pub struct TlsMaterial {
    pub certified: std::sync::Arc<rustls::sign::CertifiedKey>,
}

/// Why a TLS secret's files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    #[error("{} holds no PEM certificate", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: the key does not fit the certificate or is of an unsupported type", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

impl TlsSecretFiles {
    /// Reads both files and checks that the key is usable and matches the leaf.
    ///
    /// # Errors
    /// Unreadable files, no certificate, no key, or a key that does not fit.
    pub fn load(&self) -> Result<TlsMaterial, TlsFileError> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert_file)
            .and_then(Iterator::collect)
            .map_err(|source| TlsFileError::Read {
                path: self.cert_file.clone(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsFileError::NoCertificate {
                path: self.cert_file.clone(),
            });
        }
        let key =
            PrivateKeyDer::from_pem_file(&self.key_file).map_err(|source| TlsFileError::Read {
                path: self.key_file.clone(),
                source,
            })?;
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let certified =
            rustls::sign::CertifiedKey::from_der(certs, key, &provider).map_err(|source| {
                TlsFileError::Key {
                    path: self.key_file.clone(),
                    source,
                }
            })?;
        Ok(TlsMaterial {
            certified: std::sync::Arc::new(certified),
        })
    }
}

/// A UDP request/response health probe.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UdpProbe {
    /// Payload sent to the endpoint.
    pub send: String,
    /// Prefix the endpoint's reply must start with.
    pub expect: String,
}

fn default_interval_ms() -> u64 {
    1000
}
fn default_timeout_ms() -> u64 {
    500
}
fn default_threshold() -> u32 {
    2
}
fn default_udp_idle_timeout_ms() -> u64 {
    30_000
}
fn default_connect_timeout_ms() -> u64 {
    5000
}
fn default_report_interval_ms() -> u64 {
    5000
}
fn default_drain_timeout_ms() -> u64 {
    15_000
}
fn default_probe_path() -> String {
    "/".to_owned()
}
fn default_admin() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Why a config was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing the agent config")]
    Parse(#[source] yaml_serde::Error),
    #[error("invalid agent config: {}", problems.join("; "))]
    Invalid { problems: Vec<String> },
    #[error("{field}: reading {}", path.display())]
    ReadFile {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{field}: {} {message}", path.display())]
    BadFile {
        field: &'static str,
        path: PathBuf,
        message: &'static str,
    },
    #[error("kubernetes.kubeconfig: {}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("kubernetes.context: context {context:?} is not in {}", path.display())]
    KubeContext { path: PathBuf, context: String },
    #[error("tlsSecrets.{secret}")]
    TlsSecret {
        secret: String,
        #[source]
        source: TlsFileError,
    },
}

impl Config {
    /// Reads, parses and checks the config file at `path`: every check of
    /// [`Config::from_yaml`], relative paths resolved against the file's directory, the
    /// token file readable and not empty, the CA file readable, `stateDir` a directory
    /// if it exists. Binds nothing and writes nothing.
    ///
    /// # Errors
    /// The first file problem, or every problem of the text at once.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Config::from_yaml(&text)?;
        config
            .member
            .default_name()
            .map_err(|problem| ConfigError::Invalid {
                problems: vec![problem],
            })?;
        let base = path.parent().unwrap_or(Path::new(""));
        if !config.token_file.as_os_str().is_empty() {
            config.token_file = base.join(&config.token_file);
        }
        if let Some(join) = &mut config.join_token_file {
            *join = base.join(&*join);
        }
        config.state_dir = base.join(&config.state_dir);
        if let Some(ca) = &mut config.hub.ca_file {
            *ca = base.join(&*ca);
        }
        if let Some(anycast) = &mut config.anycast {
            anycast.resolve_paths(base);
        }
        if let Some(vrrp) = &mut config.vrrp {
            vrrp.resolve_paths(base);
        }
        if let Some(pools) = &mut config.pools {
            pools.resolve_paths(base);
        }
        for files in config.tls_secrets.values_mut() {
            files.cert_file = base.join(&files.cert_file);
            files.key_file = base.join(&files.key_file);
        }
        if let Some(path) = config
            .kubernetes
            .as_mut()
            .and_then(|k| k.kubeconfig.as_mut())
        {
            *path = base.join(&*path);
        }
        if config.join_token_file.is_none() {
            config.read_token()?;
        }
        config.check_kubeconfig()?;
        for (secret, files) in &config.tls_secrets {
            files.load().map_err(|source| ConfigError::TlsSecret {
                secret: secret.clone(),
                source,
            })?;
        }
        if let Some(ca) = &config.hub.ca_file {
            std::fs::read(ca).map_err(|source| ConfigError::ReadFile {
                field: "hub.caFile",
                path: ca.clone(),
                source,
            })?;
        }
        match std::fs::metadata(&config.state_dir) {
            Ok(meta) if !meta.is_dir() => {
                return Err(ConfigError::BadFile {
                    field: "stateDir",
                    path: config.state_dir.clone(),
                    message: "is not a directory",
                });
            }
            _ => {}
        }
        Ok(config)
    }

    /// Parses config text and runs every check that needs no file system.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] for YAML that does not fit (unknown keys, bad endpoints),
    /// or [`ConfigError::Invalid`] with every problem.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = yaml_serde::from_str(text).map_err(ConfigError::Parse)?;
        if config.driver == Driver::Kubernetes && config.kubernetes.is_none() {
            config.kubernetes = Some(KubernetesConfig::default());
        }
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid { problems })
        }
    }

    /// The kubernetes section (defaults when the file has none).
    pub fn kubernetes(&self) -> KubernetesConfig {
        self.kubernetes.clone().unwrap_or_default()
    }

    /// A given kubeconfig must parse and hold the named context.
    fn check_kubeconfig(&self) -> Result<(), ConfigError> {
        let Some(settings) = &self.kubernetes else {
            return Ok(());
        };
        let Some(path) = &settings.kubeconfig else {
            return Ok(());
        };
        let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| {
            ConfigError::Kubeconfig {
                path: path.clone(),
                source,
            }
        })?;
        if let Some(context) = &settings.context
            && !kubeconfig.contexts.iter().any(|c| &c.name == context)
        {
            return Err(ConfigError::KubeContext {
                path: path.clone(),
                context: context.clone(),
            });
        }
        Ok(())
    }

    /// Reads the agent token (trimmed).
    ///
    /// # Errors
    /// The token file cannot be read or is empty.
    pub fn read_token(&self) -> Result<String, ConfigError> {
        let text =
            std::fs::read_to_string(&self.token_file).map_err(|source| ConfigError::ReadFile {
                field: "tokenFile",
                path: self.token_file.clone(),
                source,
            })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(ConfigError::BadFile {
                field: "tokenFile",
                path: self.token_file.clone(),
                message: "is empty",
            });
        }
        Ok(token.to_owned())
    }

    /// Where the last applied plan is persisted.
    pub fn plan_file(&self) -> PathBuf {
        self.state_dir.join("plan.json")
    }

    pub fn udp_idle_timeout(&self) -> Duration {
        Duration::from_millis(self.udp_idle_timeout_ms)
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn report_interval(&self) -> Duration {
        Duration::from_millis(self.report_interval_ms)
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_millis(self.drain_timeout_ms)
    }

    /// The addresses reported to the hub, one per listen address, without duplicates.
    pub fn advertised_addresses(&self) -> Vec<Address> {
        let mut out: Vec<Address> = Vec::new();
        for listen in &self.listen {
            let address = listen.advertised();
            if !out.contains(&address) {
                out.push(address);
            }
        }
        out
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = self.hub.problems();
        for message in names::dns1123_label(&self.cluster) {
            problems.push(format!("cluster: {message}"));
        }
        match (
            self.token_file.as_os_str().is_empty(),
            &self.join_token_file,
        ) {
            (true, None) => {
                problems.push("tokenFile: required (or joinTokenFile)".to_owned());
            }
            (false, Some(_)) => {
                problems.push("joinTokenFile: give tokenFile or joinTokenFile, not both".to_owned())
            }
            (true, Some(path)) if path.as_os_str().is_empty() => {
                problems.push("joinTokenFile: must not be empty".to_owned());
            }
            (true, Some(_)) => {
                if self
                    .hub
                    .address_list()
                    .iter()
                    .any(|a| !a.to_ascii_lowercase().starts_with("https://"))
                {
                    problems.push(
                        "joinTokenFile: client certificates need https:// hub addresses".to_owned(),
                    );
                }
            }
            (false, None) => {}
        }
        if self.state_dir.as_os_str().is_empty() {
            problems.push("stateDir: required".to_owned());
        }
        match self.driver {
            Driver::Standalone => {
                if self.listen.is_empty() {
                    problems.push("listen: at least one listen address is required".to_owned());
                }
                if self.kubernetes.is_some() {
                    problems.push("kubernetes: only used with driver kubernetes".to_owned());
                }
            }
            Driver::Kubernetes => {
                // The member cluster's load balancers and Services take the place of
                // listeners, endpoints and certificate files.
                for (field, given) in [
                    ("listen", !self.listen.is_empty()),
                    ("services", !self.services.is_empty()),
                    ("tlsSecrets", !self.tls_secrets.is_empty()),
                ] {
                    if given {
                        problems.push(format!("{field}: only used with driver standalone"));
                    }
                }
                if let Some(settings) = &self.kubernetes {
                    problems.extend(settings.problems());
                }
            }
        }
        let mut binds = BTreeSet::new();
        for (i, listen) in self.listen.iter().enumerate() {
            if !binds.insert(listen.bind) {
                problems.push(format!("listen[{i}].bind: {} is listed twice", listen.bind));
            }
            match listen.advertise.as_deref() {
                None if listen.bind.is_unspecified() => problems.push(format!(
                    "listen[{i}].advertise: required when bind is the unspecified address {}",
                    listen.bind
                )),
                None => {}
                Some(text) => {
                    let bad_ip = text.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
                    if bad_ip {
                        problems.push(format!(
                            "listen[{i}].advertise: must not be the unspecified address"
                        ));
                    } else if text.parse::<IpAddr>().is_err() {
                        for message in names::non_wildcard_hostname(text) {
                            problems.push(format!(
                                "listen[{i}].advertise: must be an IP address or a DNS name: {message}"
                            ));
                        }
                    }
                }
            }
        }
        for (name, endpoints) in &self.services {
            for message in names::dns1123_label(name) {
                problems.push(format!("services.{name}: {message}"));
            }
            let mut seen = BTreeSet::new();
            for (i, endpoint) in endpoints.iter().enumerate() {
                if !seen.insert(endpoint) {
                    problems.push(format!("services.{name}[{i}]: {endpoint} is listed twice"));
                }
            }
        }
        let hc = &self.health_check;
        if hc.interval_ms == 0 {
            problems.push("healthCheck.intervalMs: must be positive".to_owned());
        }
        if hc.timeout_ms == 0 {
            problems.push("healthCheck.timeoutMs: must be positive".to_owned());
        }
        if hc.healthy_threshold == 0 {
            problems.push("healthCheck.healthyThreshold: must be at least 1".to_owned());
        }
        if hc.unhealthy_threshold == 0 {
            problems.push("healthCheck.unhealthyThreshold: must be at least 1".to_owned());
        }
        if let Some(udp) = &hc.udp
            && udp.send.is_empty()
        {
            problems.push("healthCheck.udp.send: must not be empty".to_owned());
        }
        if !hc.http.path.starts_with('/') {
            problems.push("healthCheck.http.path: must start with /".to_owned());
        }
        if hc
            .http
            .path
            .contains(|c: char| c.is_ascii_whitespace() || c.is_ascii_control())
        {
            problems.push(
                "healthCheck.http.path: must not contain spaces or control characters".to_owned(),
            );
        }
        if let Some(host) = &hc.http.host
            && (host.is_empty()
                || host.contains(|c: char| c.is_ascii_whitespace() || c.is_ascii_control()))
        {
            problems
                .push("healthCheck.http.host: must be a non-empty host without spaces".to_owned());
        }
        for (name, files) in &self.tls_secrets {
            for message in names::dns1123_subdomain(name) {
                problems.push(format!("tlsSecrets.{name}: {message}"));
            }
            if files.cert_file.as_os_str().is_empty() {
                problems.push(format!("tlsSecrets.{name}.certFile: required"));
            }
            if files.key_file.as_os_str().is_empty() {
                problems.push(format!("tlsSecrets.{name}.keyFile: required"));
            }
        }
        problems.extend(self.limits.problems());
        problems.extend(self.member.problems());
        if let Some(anycast) = &self.anycast {
            if self.driver != Driver::Standalone {
                problems.push("anycast: only used with driver standalone".to_owned());
            }
            problems.extend(anycast.problems(&self.advertised_addresses()));
        }
        if let Some(vrrp) = &self.vrrp {
            problems.extend(vrrp.problems(self.driver, self.admin, &self.listen));
        }
        if let Some(pools) = &self.pools {
            if self.vrrp.is_some() {
                problems.push(
                    "pools: vrrp: and pools: exclude each other (one keepalived per agent): \
                     vrrp: is one VRRP group typed in by hand, pools: the groups of the hub's \
                     plan"
                        .to_owned(),
                );
            }
            problems.extend(pools.problems(self.driver, self.admin, self.member.address));
        }
        for (field, value) in [
            ("udpIdleTimeoutMs", self.udp_idle_timeout_ms),
            ("connectTimeoutMs", self.connect_timeout_ms),
            ("reportIntervalMs", self.report_interval_ms),
        ] {
            if value == 0 {
                problems.push(format!("{field}: must be positive"));
            }
        }
        problems
    }
}

/// Whether a (well-formed) hub address keeps credentials off the network in the clear:
/// `https://`, or `http://` to `localhost` or a loopback IP.
fn secure_hub_address(address: &str) -> bool {
    let Some(rest) = address.strip_prefix("http://") else {
        return true;
    };
    let authority = rest.trim_end_matches('/');
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(ip, _)| ip),
        None => authority
            .split_once(':')
            .map_or(authority, |(host, _)| host),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `http://host[:port]` or `https://host[:port]`, optionally with a trailing `/`.
fn check_hub_address(address: &str) -> Result<(), &'static str> {
    let rest = address
        .strip_prefix("https://")
        .or_else(|| address.strip_prefix("http://"))
        .ok_or("must start with https:// or http://")?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err("has no host");
    }
    if authority.contains(['/', '?', '#', '@', ' ']) {
        return Err("must be scheme://host[:port] without path, query or user");
    }
    // A port, if any, must be a number: `host:port`, `[v6]:port`.
    let port = if let Some(v6) = authority.strip_prefix('[') {
        let (ip, after) = v6.split_once(']').ok_or("has an unclosed [")?;
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return Err("has an invalid IPv6 address");
        }
        match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("has garbage after ]")?),
        }
    } else {
        match authority.split_once(':') {
            Some(("", _)) => return Err("has no host"),
            Some((_, port)) => Some(port),
            None => None,
        }
    };
    if let Some(port) = port
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err("has an invalid port");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "
hub: {address: http://127.0.0.1:6444}
cluster: eu-west
tokenFile: token
driver: standalone
listen: [{bind: 127.0.0.11}]
stateDir: state
";

    fn example_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/agent-standalone.yaml")
    }

    /// A self-signed certificate and its key for `name` (PEM).
    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn example_config_parses() {
        let text = std::fs::read_to_string(example_path()).unwrap();
        let config = Config::from_yaml(&text).unwrap();
        assert_eq!(config.driver, Driver::Standalone);
        assert!(!config.listen.is_empty());
        assert!(config.services.contains_key("echo"));
        assert!(config.health_check.udp.is_some());
        assert!(config.tls_secrets.contains_key("shop-tls"));
        assert_eq!(config.health_check.http.path, "/healthz");
        assert_eq!(config.drain_timeout(), Duration::from_secs(15));
    }

    #[test]
    fn example_config_loads_with_its_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(example_path()).unwrap();
        let config_path = dir.path().join("agent.yaml");
        std::fs::write(&config_path, &text).unwrap();
        let parsed = Config::from_yaml(&text).unwrap();
        assert!(
            parsed.token_file.is_relative(),
            "the example uses relative paths"
        );
        let err = Config::load(&config_path).unwrap_err();
        assert!(err.to_string().contains("tokenFile"), "{err}");
        std::fs::write(dir.path().join(&parsed.token_file), "secret\n").unwrap();
        // The TLS secret's files are read and checked too, relative to the config.
        let err = Config::load(&config_path).unwrap_err();
        assert!(err.to_string().contains("tlsSecrets.shop-tls"), "{err}");
        let files = &parsed.tls_secrets["shop-tls"];
        let (cert, key) = pair("shop.example.com");
        std::fs::create_dir_all(dir.path().join(files.cert_file.parent().unwrap())).unwrap();
        std::fs::write(dir.path().join(&files.cert_file), cert).unwrap();
        std::fs::write(dir.path().join(&files.key_file), key).unwrap();
        let config = Config::load(&config_path).unwrap();
        assert_eq!(
            config.tls_secrets["shop-tls"].cert_file,
            dir.path().join(&files.cert_file)
        );
        assert_eq!(config.token_file, dir.path().join(&parsed.token_file));
        assert_eq!(config.read_token().unwrap(), "secret");
        assert_eq!(
            config.plan_file(),
            dir.path().join(&parsed.state_dir).join("plan.json")
        );
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.health_check, HealthCheckConfig::default());
        assert_eq!(config.health_check.interval(), Duration::from_secs(1));
        assert_eq!(config.udp_idle_timeout(), Duration::from_secs(30));
        assert_eq!(config.report_interval(), Duration::from_secs(5));
        assert_eq!(config.admin, default_admin());
        assert_eq!(config.drain_timeout(), Duration::from_secs(15));
        assert_eq!(config.health_check.http, HttpProbe::default());
        assert_eq!(config.health_check.http.path, "/");
        assert_eq!(
            config.health_check.http.expect_status,
            StatusRange { min: 200, max: 399 }
        );
        assert!(config.tls_secrets.is_empty());
        assert_eq!(
            config.advertised_addresses(),
            vec![Address::ip("127.0.0.11".parse().unwrap())]
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        for extra in ["bogus: 1\n", "healthCheck: {intervalMs: 10, bogus: 1}\n"] {
            let err = Config::from_yaml(&format!("{MINIMAL}{extra}")).unwrap_err();
            assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
            let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
            assert!(chain.contains("bogus"), "{chain}");
        }
        let err = Config::from_yaml(
            &MINIMAL.replace("{bind: 127.0.0.11}", "{bind: 127.0.0.11, port: 1}"),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
    }

    const KUBERNETES: &str = "
hub: {address: http://127.0.0.1:6444}
cluster: eu-west
tokenFile: token
driver: kubernetes
stateDir: state
";

    #[test]
    fn kubernetes_driver_takes_defaults_and_needs_no_listeners() {
        let config = Config::from_yaml(KUBERNETES).unwrap();
        let k = config.kubernetes();
        assert_eq!(k.profile, ProfileSetting::Auto);
        assert!(k.kubeconfig.is_none());
        assert!(k.leader_election.enabled);
        assert_eq!(k.leader_election.lease_name, "fedingress-agent");
        assert!(Config::from_yaml(&MINIMAL.replace("standalone", "magic")).is_err());

        let full = format!(
            "{KUBERNETES}kubernetes:
  kubeconfig: member.kubeconfig
  profile: nginx-configmap
  ingressClassName: nginx
  loadBalancerIP: 203.0.113.7
  nginx: {{tcpServicesConfigMap: ingress-nginx/fi-tcp, udpServicesConfigMap: ingress-nginx/fi-udp}}
  ingressController: {{service: ingress-nginx/ingress-nginx-controller}}
  leaderElection: {{namespace: fedingress-system, leaseDurationSeconds: 20}}
"
        );
        let k = Config::from_yaml(&full).unwrap().kubernetes();
        assert_eq!(
            k.profile,
            ProfileSetting::Fixed(kubernetes::Profile::NginxConfigmap)
        );
        assert_eq!(
            k.ingress_controller.unwrap().service.to_string(),
            "ingress-nginx/ingress-nginx-controller"
        );
        assert_eq!(k.leader_election.lease_duration(), Duration::from_secs(20));
    }

    #[test]
    fn kubernetes_section_problems_name_their_fields() {
        let bad = format!(
            "{KUBERNETES}listen: [{{bind: 127.0.0.11}}]
kubernetes:
  profile: nginx-configmap
  ingressClassName: Not_A_Class
  loadBalancerPendingSeconds: 0
"
        );
        let text = Config::from_yaml(&bad).unwrap_err().to_string();
        for needle in [
            "listen: only used with driver standalone",
            "kubernetes.nginx: required by profile nginx-configmap",
            "kubernetes.ingressController: required",
            "kubernetes.ingressClassName:",
            "kubernetes.loadBalancerPendingSeconds: must be positive",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        let err = Config::from_yaml(&format!("{KUBERNETES}kubernetes: {{profile: openstack}}"))
            .unwrap_err();
        let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(chain.contains("unknown profile \"openstack\""), "{chain}");
        let err = Config::from_yaml(&format!(
            "{KUBERNETES}kubernetes: {{ingressController: {{service: no-namespace}}}}"
        ))
        .unwrap_err();
        assert!(matches!(err, ConfigError::Parse(_)), "{err:?}");
        let standalone_with_section = format!("{MINIMAL}kubernetes: {{}}\n");
        let text = Config::from_yaml(&standalone_with_section)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("kubernetes: only used with driver kubernetes"),
            "{text}"
        );
    }

    #[test]
    fn a_malformed_kubeconfig_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t0ken\n").unwrap();
        std::fs::write(dir.path().join("member.kubeconfig"), "clusters: [garbage\n").unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(
            &path,
            format!("{KUBERNETES}kubernetes: {{kubeconfig: member.kubeconfig}}\n"),
        )
        .unwrap();
        let err = Config::load(&path).unwrap_err();
        assert!(
            err.to_string().starts_with("kubernetes.kubeconfig: ")
                && err.to_string().ends_with("member.kubeconfig"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("member.kubeconfig"),
            "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: [{name: a, context: {cluster: c, user: u}}]\nusers: []\n",
        )
        .unwrap();
        std::fs::write(
            &path,
            format!("{KUBERNETES}kubernetes: {{kubeconfig: member.kubeconfig, context: b}}\n"),
        )
        .unwrap();
        let err = Config::load(&path).unwrap_err();
        assert!(err.to_string().contains("context \"b\" is not in"), "{err}");
    }

    #[test]
    fn every_problem_is_reported() {
        let text = "
hub: {address: ftp://hub, caFile: ca.pem}
cluster: EU_West
tokenFile: token
driver: standalone
listen: []
services: {Echo: ['127.0.0.1:1', '127.0.0.1:1']}
healthCheck: {intervalMs: 0, healthyThreshold: 0}
udpIdleTimeoutMs: 0
stateDir: state
";
        let Err(ConfigError::Invalid { problems }) = Config::from_yaml(text) else {
            panic!("expected Invalid");
        };
        let all = problems.join("\n");
        for field in [
            "hub.address",
            "hub.caFile",
            "cluster:",
            "listen: at least one",
            "services.Echo:",
            "services.Echo[1]",
            "healthCheck.intervalMs",
            "healthCheck.healthyThreshold",
            "udpIdleTimeoutMs",
        ] {
            assert!(all.contains(field), "{field} missing in:\n{all}");
        }
    }

    #[test]
    fn listen_addresses_are_checked() {
        let text = MINIMAL.replace(
            "[{bind: 127.0.0.11}]",
            "[{bind: 0.0.0.0}, {bind: '::1', advertise: 'not a name'}, {bind: '::1'}]",
        );
        let Err(ConfigError::Invalid { problems }) = Config::from_yaml(&text) else {
            panic!("expected Invalid");
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        let text = MINIMAL.replace(
            "[{bind: 127.0.0.11}]",
            "[{bind: 0.0.0.0, advertise: lb.example.com}, {bind: '::', advertise: '2001:db8::1'}]",
        );
        let config = Config::from_yaml(&text).unwrap();
        assert_eq!(
            config.advertised_addresses(),
            vec![
                Address::hostname("lb.example.com"),
                Address::ip("2001:db8::1".parse().unwrap())
            ]
        );
    }

    #[test]
    fn endpoints_parse() {
        let ok = |text: &str, ip: &str, port: Option<u16>| {
            let endpoint: ServiceEndpoint = text.parse().unwrap();
            assert_eq!(endpoint.ip, ip.parse::<IpAddr>().unwrap(), "{text}");
            assert_eq!(endpoint.port, port, "{text}");
            assert_eq!(
                endpoint.to_string().parse::<ServiceEndpoint>().unwrap(),
                endpoint
            );
        };
        ok("127.0.0.1:9001", "127.0.0.1", Some(9001));
        ok("[::1]:9001", "::1", Some(9001));
        ok("10.0.0.5", "10.0.0.5", None);
        ok("fd00::5", "fd00::5", None);
        ok("[fd00::5]", "fd00::5", None);
        for bad in [
            "",
            "echo:80",
            "10.0.0.5:0",
            "10.0.0.5:99999",
            "[10.0.0.5]",
            "::1:80x",
        ] {
            assert!(bad.parse::<ServiceEndpoint>().is_err(), "{bad}");
        }
        let endpoint: ServiceEndpoint = "10.0.0.5".parse().unwrap();
        assert_eq!(endpoint.socket_addr(8080), "10.0.0.5:8080".parse().unwrap());
        let endpoint: ServiceEndpoint = "10.0.0.5:81".parse().unwrap();
        assert_eq!(endpoint.socket_addr(8080), "10.0.0.5:81".parse().unwrap());
        let err = Config::from_yaml(&format!("{MINIMAL}services: {{echo: ['echo.local:80']}}\n"))
            .unwrap_err();
        let source = std::error::Error::source(&err).unwrap().to_string();
        assert!(source.contains("echo.local:80"), "{source}");
    }

    #[test]
    fn hub_addresses() {
        for ok in [
            "https://127.0.0.1:6444",
            "http://hub.example.com",
            "https://[::1]:6444/",
        ] {
            assert_eq!(check_hub_address(ok), Ok(()), "{ok}");
        }
        for bad in [
            "127.0.0.1:6444",
            "https://",
            "https://:80",
            "https://hub:0",
            "https://hub:x",
            "https://hub/path",
            "https://[::1",
            "https://[zz]:1",
        ] {
            assert!(check_hub_address(bad).is_err(), "{bad}");
        }
    }

    /// The problems of MINIMAL with its hub section replaced by `hub`.
    fn hub_problems(hub: &str) -> Vec<String> {
        let text = MINIMAL.replace("hub: {address: http://127.0.0.1:6444}", hub);
        match Config::from_yaml(&text) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { problems }) => problems,
            Err(err) => panic!("{hub}: {err:?}"),
        }
    }

    #[test]
    fn hub_takes_one_address_or_a_list() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.hub.address_list(), ["http://127.0.0.1:6444"]);
        assert_eq!(
            crate::hub::HubSettings::from_config(&config).addresses,
            ["http://127.0.0.1:6444"]
        );
        let text = MINIMAL.replace(
            "hub: {address: http://127.0.0.1:6444}",
            "hub:\n  addresses:\n  - https://hub-a:6444\n  - https://[::1]:6444/\n  caFile: ca.pem",
        );
        let config = Config::from_yaml(&text).unwrap();
        assert_eq!(
            config.hub.address_list(),
            ["https://hub-a:6444", "https://[::1]:6444/"]
        );
        let settings = crate::hub::HubSettings::from_config(&config);
        assert_eq!(settings.addresses, config.hub.address_list());
        assert_eq!(settings.first_address, None, "a random one first");
        assert_eq!(settings.ca_file.as_deref(), Some(Path::new("ca.pem")));
        assert_eq!(
            hub_problems("hub: {addresses: [http://localhost:6444]}"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn hub_address_problems_name_their_fields() {
        let cases: &[(&str, &[&str])] = &[
            (
                "hub: {address: http://localhost:6444, addresses: [http://127.0.0.2:6444]}",
                &["hub: give address or addresses, not both"],
            ),
            ("hub: {caFile: ca.pem}", &["hub.addresses: required"]),
            (
                "hub: {addresses: []}",
                &["hub.addresses: at least one address is required"],
            ),
            (
                "hub: {addresses: [http://localhost:6444, 'a:6444', http://127.0.0.2:0, HTTP://A:6444/]}",
                &[
                    "hub.addresses[1]: must start with https:// or http://",
                    "hub.addresses[2]: has an invalid port",
                    "hub.addresses[3]: must start with https:// or http://",
                ],
            ),
            (
                "hub: {addresses: [http://localhost:6444, http://127.0.0.2:6444, http://LOCALHOST:6444/]}",
                &["hub.addresses[2]: http://LOCALHOST:6444/ is listed twice (as hub.addresses[0])"],
            ),
            (
                "hub: {addresses: [https://a:6444, http://127.0.0.2:6444], caFile: ca.pem}",
                &[
                    "hub.addresses[1]: every hub address must use the scheme of the first (https://)",
                ],
            ),
            (
                "hub: {addresses: [http://localhost:6444, http://127.0.0.2:6444], caFile: ca.pem}",
                &["hub.caFile: only used with an https:// hub address"],
            ),
            (
                "hub: {addresses: [http://127.0.0.1:6444, 'http://[::1]:6444', http://hub.example:6444, 'http://[2001:db8::1]:6444']}",
                &[
                    "hub.addresses[2]: http://hub.example:6444 is plain http:// to a host that is not loopback",
                    "hub.addresses[3]: http://[2001:db8::1]:6444 is plain http:// to a host that is not loopback",
                ],
            ),
            (
                "hub: {addresses: [http://hub.example:6444], insecureAllowPlaintext: true}",
                &[],
            ),
            (
                "hub: {address: 'https://a b'}",
                &["hub.address: must be scheme://host[:port] without path, query or user"],
            ),
        ];
        for (hub, expected) in cases {
            let problems = hub_problems(hub);
            assert_eq!(problems.len(), expected.len(), "{hub}: {problems:?}");
            for (problem, expected) in problems.iter().zip(expected.iter()) {
                assert!(
                    problem.starts_with(expected),
                    "{hub}: {problem:?} is not {expected:?}"
                );
            }
        }
        // Keys the section does not have, and an address that is not a list, are
        // parse errors naming them.
        for hub in [
            "hub: {addresses: [http://a:6444], address2: x}",
            "hub: {addresses: http://a:6444}",
        ] {
            let text = MINIMAL.replace("hub: {address: http://127.0.0.1:6444}", hub);
            let err = Config::from_yaml(&text).unwrap_err();
            assert!(matches!(err, ConfigError::Parse(_)), "{hub}: {err:?}");
            let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
            assert!(chain.contains("hub"), "{chain}");
        }
    }

    #[test]
    fn http_probe_status_is_a_code_or_a_range() {
        let with = |http: &str| {
            Config::from_yaml(&format!("{MINIMAL}healthCheck: {{http: {http}}}\n"))
                .map(|c| c.health_check.http)
        };
        let probe = with("{path: /healthz, expectStatus: 204}").unwrap();
        assert_eq!(probe.expect_status, StatusRange { min: 204, max: 204 });
        assert_eq!(probe.expect_status.to_string(), "204");
        let probe = with("{expectStatus: '200-299', host: shop.example.com}").unwrap();
        assert!(probe.expect_status.contains(250));
        assert!(!probe.expect_status.contains(300));
        assert_eq!(probe.host.as_deref(), Some("shop.example.com"));
        for bad in ["99", "'300-200'", "'2xx'", "600"] {
            let err = with(&format!("{{expectStatus: {bad}}}")).unwrap_err();
            assert!(matches!(err, ConfigError::Parse(_)), "{bad}: {err:?}");
        }
        let Err(ConfigError::Invalid { problems }) = with("{path: healthz}") else {
            panic!("a path without / is refused");
        };
        assert!(
            problems[0].contains("healthCheck.http.path"),
            "{problems:?}"
        );
    }

    #[test]
    fn tls_secrets_must_be_readable_matching_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("agent.yaml");
        std::fs::write(dir.path().join("token"), "t0k3n").unwrap();
        std::fs::write(
            &config_path,
            format!(
                "{MINIMAL}tlsSecrets: {{shop-tls: {{certFile: shop.crt, keyFile: shop.key}}}}\n"
            ),
        )
        .unwrap();
        let err = Config::load(&config_path).unwrap_err();
        assert!(matches!(err, ConfigError::TlsSecret { .. }), "{err:?}");
        let (cert, key) = pair("shop.example.com");
        let (_, other_key) = pair("other.example.com");
        std::fs::write(dir.path().join("shop.crt"), &cert).unwrap();
        std::fs::write(dir.path().join("shop.key"), other_key).unwrap();
        let err = Config::load(&config_path).unwrap_err();
        let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
        assert!(chain.contains("does not fit"), "{chain}");
        std::fs::write(dir.path().join("shop.key"), "no key here").unwrap();
        assert!(Config::load(&config_path).is_err());
        std::fs::write(dir.path().join("shop.key"), key).unwrap();
        let config = Config::load(&config_path).unwrap();
        config.tls_secrets["shop-tls"].load().unwrap();
        let Err(ConfigError::Invalid { problems }) = Config::from_yaml(&format!(
            "{MINIMAL}tlsSecrets: {{Shop_TLS: {{certFile: a, keyFile: ''}}}}\n"
        )) else {
            panic!("expected Invalid");
        };
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn a_join_token_file_replaces_the_token_file_and_needs_https() {
        let with_join = MINIMAL.replace("tokenFile: token", "joinTokenFile: join-token");
        let problems = match Config::from_yaml(&with_join) {
            Err(ConfigError::Invalid { problems }) => problems,
            other => panic!("{other:?}"),
        };
        assert!(
            problems.iter().any(|p| p.contains("need https://")),
            "{problems:?}"
        );
        let both = format!("{MINIMAL}joinTokenFile: j\n");
        let problems = match Config::from_yaml(&both) {
            Err(ConfigError::Invalid { problems }) => problems,
            other => panic!("{other:?}"),
        };
        assert!(
            problems.iter().any(|p| p.contains("not both")),
            "{problems:?}"
        );
        let neither = MINIMAL.replace("tokenFile: token\n", "");
        let problems = match Config::from_yaml(&neither) {
            Err(ConfigError::Invalid { problems }) => problems,
            other => panic!("{other:?}"),
        };
        assert!(
            problems.iter().any(|p| p.contains("tokenFile: required")),
            "{problems:?}"
        );
    }

    #[test]
    fn the_member_section_is_typed_and_strict() {
        let config = Config::from_yaml(&format!(
            "{MINIMAL}member: {{name: web-1, labels: {{zone: a}}, address: 192.0.2.11}}\n"
        ))
        .unwrap();
        assert_eq!(config.member.name(), "web-1");
        assert_eq!(config.member.labels["zone"], "a");
        assert_eq!(config.member.address, Some("192.0.2.11".parse().unwrap()));
        assert!(matches!(
            Config::from_yaml(&format!("{MINIMAL}member: {{nmae: web-1}}\n")),
            Err(ConfigError::Parse(_))
        ));
        let Err(ConfigError::Invalid { problems }) =
            Config::from_yaml(&format!("{MINIMAL}member: {{name: Web.1}}\n"))
        else {
            panic!("an invalid member name parsed");
        };
        assert!(problems[0].starts_with("member.name: "), "{problems:?}");
        assert_eq!(Config::from_yaml(MINIMAL).unwrap().member.name(), "");
    }

    #[test]
    fn load_names_the_member_after_the_host_unless_given() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t").unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, MINIMAL).unwrap();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        match (Config::load(&path), member::name_from_hostname(&host)) {
            (Ok(config), Ok(name)) => assert_eq!(config.member.name(), name),
            (Err(ConfigError::Invalid { problems }), Err(problem)) => {
                assert_eq!(problems, [problem]);
            }
            (loaded, expected) => panic!("{loaded:?} / {expected:?}"),
        }
        std::fs::write(&path, format!("{MINIMAL}member: {{name: edge-a}}\n")).unwrap();
        assert_eq!(Config::load(&path).unwrap().member.name(), "edge-a");
    }

    #[test]
    fn token_file_must_hold_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("agent.yaml");
        std::fs::write(&config_path, MINIMAL).unwrap();
        std::fs::write(dir.path().join("token"), "  \n").unwrap();
        let err = Config::load(&config_path).unwrap_err();
        assert!(err.to_string().contains("is empty"), "{err}");
        std::fs::write(dir.path().join("token"), "t0k3n").unwrap();
        std::fs::write(dir.path().join("state"), "a file").unwrap();
        let err = Config::load(&config_path).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        std::fs::remove_file(dir.path().join("state")).unwrap();
        Config::load(&config_path).unwrap();
        let err = Config::load(&dir.path().join("missing.yaml")).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
    }
}
