//! Configuration: a strict YAML file for behaviour, flags for runtime knobs (flags win).
//! Everything is parsed and checked — files read, certificates loaded — before any port
//! is bound, so a bad config exits 64 without side effects.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use fedingress_apiserver::auth::Authenticator;
use fedingress_hub::gslb::DnsConfig;

/// Command-line flags of `federation-apiserver`.
#[derive(Debug, Parser)]
#[command(
    name = "federation-apiserver",
    version,
    about = "fedingress federation API server"
)]
pub struct Cli {
    /// YAML config file (see deploy/config/apiserver.yaml).
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
    /// Directory of the embedded store (unused with --etcd-servers).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// etcd v3 client URLs (`http://` or `https://`), comma-separated: store objects in
    /// etcd instead of the embedded redb file, so several replicas can share them.
    #[arg(long, value_delimiter = ',', value_name = "URL[,URL...]")]
    pub etcd_servers: Vec<String>,
    /// PEM CA bundle that signs the etcd servers' certificates (required for https).
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// PEM client certificate presented to etcd.
    #[arg(long)]
    pub etcd_certfile: Option<PathBuf>,
    /// PEM private key of --etcd-certfile.
    #[arg(long)]
    pub etcd_keyfile: Option<PathBuf>,
    /// Prepended to every etcd key (default: none; keys start with `/registry/fedingress.io/`
    /// and `/fedingress/`).
    #[arg(long)]
    pub etcd_prefix: Option<String>,
    /// This replica's name among the replicas sharing one etcd (leader election, agent
    /// records). Default: `<hostname>-<pid>`. Only with --etcd-servers.
    #[arg(long)]
    pub replica_name: Option<String>,
    /// How long a replica's etcd lease lives without renewal: a dead leader is replaced,
    /// and a dead replica's agent records vanish, within it (whole seconds, at least 2).
    #[arg(long, value_name = "SECONDS")]
    pub leader_elect_lease_duration: Option<u64>,
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
    /// PEM CA certificate that signs agents' client certificates (joins, renewals) and
    /// verifies them on the agent gateway (config `agentCa.certFile`). Without it and
    /// --agent-ca-key-file, a hub on the embedded store generates one into its data dir;
    /// replicas on etcd must all be given the same pair.
    #[arg(long, value_name = "FILE")]
    pub agent_ca_cert_file: Option<PathBuf>,
    /// PEM private key of --agent-ca-cert-file (config `agentCa.keyFile`).
    #[arg(long, value_name = "FILE")]
    pub agent_ca_key_file: Option<PathBuf>,
    /// Serve the REST API and the agent gateway without TLS on a non-loopback address
    /// (tokens then cross the network in the clear). Without it, such an address needs
    /// --tls-cert-file and --tls-private-key-file.
    #[arg(long)]
    pub insecure_allow_plaintext: bool,
    /// Non-mutating requests in flight (watches excepted); more are answered 429
    /// (config `limits.maxRequestsInflight`, default 400).
    #[arg(long, value_name = "N")]
    pub max_requests_inflight: Option<usize>,
    /// Mutating requests in flight; more are answered 429 (config
    /// `limits.maxMutatingRequestsInflight`, default 200).
    #[arg(long, value_name = "N")]
    pub max_mutating_requests_inflight: Option<usize>,
    /// A watch without timeoutSeconds lasts a random time between this and twice this
    /// (config `limits.minRequestTimeoutSeconds`, default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub min_request_timeout: Option<u64>,
    /// OIDC and audit log flags.
    #[command(flatten)]
    pub auth: fedingress_apiserver::auth::config::AuthFlags,
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
    /// The agent CA's files (`--agent-ca-cert-file`, `--agent-ca-key-file`).
    pub agent_ca: Option<TlsFiles>,
    /// The agent gateway's own serving certificate; without it the gateway serves the
    /// API's (`tls`). Lets the gateway speak TLS (and so mTLS) while the API does not.
    pub agent_tls: Option<TlsFiles>,
    /// The file form of `--insecure-allow-plaintext`.
    #[serde(default)]
    pub insecure_allow_plaintext: bool,
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub watch: WatchConfig,
    /// Serving limits of the REST API and the agent gateway (docs/security.md).
    #[serde(default)]
    pub limits: crate::limits::LimitsConfig,
    /// OIDC ID tokens as bearer tokens (the `--oidc-*` flags).
    #[serde(default)]
    pub oidc: fedingress_apiserver::auth::config::OidcFile,
    /// The audit log of writes (`--audit-log-*`).
    #[serde(default)]
    pub audit: fedingress_apiserver::auth::config::AuditFile,
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
    /// How often `/readyz` checks that the store commits (a tiny write when nothing
    /// else committed meanwhile; see `health.rs`).
    #[serde(default = "default_commit_probe_seconds")]
    pub commit_probe_interval_seconds: u64,
    /// Store in etcd instead of redb (the `--etcd-*` flags win over these keys).
    pub etcd: Option<EtcdFileConfig>,
}

/// `storage.etcd`: the same settings as the `--etcd-*` flags.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdFileConfig {
    /// Client URLs, like `--etcd-servers`.
    #[serde(default)]
    pub servers: Vec<String>,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub prefix: Option<String>,
}

fn default_cache_mib() -> usize {
    64
}

fn default_compaction_seconds() -> u64 {
    300
}

fn default_commit_probe_seconds() -> u64 {
    fedingress_apiserver::health::DEFAULT_COMMIT_PROBE_INTERVAL.as_secs()
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            cache_size_mib: default_cache_mib(),
            compaction_interval_seconds: default_compaction_seconds(),
            commit_probe_interval_seconds: default_commit_probe_seconds(),
            etcd: None,
        }
    }
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
    /// Validity of the client certificates the agent CA issues (agents renew at 70-80 %).
    #[serde(default = "default_certificate_validity_seconds")]
    pub certificate_validity_seconds: u64,
    /// Default lifetime of a join token (`POST .../token?type=join`).
    #[serde(default = "default_join_token_ttl_seconds")]
    pub join_token_ttl_seconds: u64,
}

fn default_certificate_validity_seconds() -> u64 {
    24 * 3600
}

fn default_join_token_ttl_seconds() -> u64 {
    3600
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
            certificate_validity_seconds: default_certificate_validity_seconds(),
            join_token_ttl_seconds: default_join_token_ttl_seconds(),
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
    pub hub: fedingress_hub::SessionSettings,
    /// PEM certificate and key, for the agent gateway's TLS.
    pub tls_pem: Option<(Vec<u8>, Vec<u8>)>,
    pub data_dir: PathBuf,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub auth: Authenticator,
    pub cache_size_bytes: usize,
    /// Store in etcd (with these options) instead of redb under `data_dir`.
    pub etcd: Option<fedingress_store::EtcdOptions>,
    /// With etcd: this replica's name and lease.
    pub replica: fedingress_hub::replication::ReplicaSettings,
    pub compaction_interval: Duration,
    /// How often commits are checked for `/readyz` (`storage.commitProbeIntervalSeconds`).
    pub commit_probe_interval: Duration,
    pub bookmark_interval: Duration,
    /// Serving limits (`limits:` and the kube-apiserver flags over it).
    pub limits: crate::limits::Limits,
    /// The agent CA from files, loaded; `None`: generated into the data dir (embedded
    /// store) or none (etcd: agents use tokens only).
    pub agent_ca: Option<Arc<fedingress_hub::pki::AgentCa>>,
    pub certificate_validity: Duration,
    pub join_token_ttl: Duration,
    /// The audit log of writes, when configured.
    pub audit: Option<fedingress_apiserver::auth::config::AuditSettings>,
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
    Tokens(#[from] fedingress_apiserver::auth::TokenFileError),
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
    let mut file = read_file(cli)?;
    let dev = cli.dev || file.dev;
    let serving = serving(cli, &mut file, dev)?;
    let data_dir = cli
        .data_dir
        .clone()
        .or(file.data_dir.take())
        .unwrap_or_else(|| PathBuf::from("fedingress-data"));
    let agents = agent_settings(cli, &mut file)?;
    let dns_listen = dns_settings(cli, &mut file.dns, dev)?;
    let auth = authenticator(cli, &mut file, dev)?;
    let audit = fedingress_apiserver::auth::config::audit_settings(&cli.auth, &file.audit)
        .map_err(ConfigError::Invalid)?;
    check_storage(&file.storage)?;
    let etcd = etcd_options(cli, file.storage.etcd.as_ref())?;
    let replica = replica_settings(cli, etcd.is_some())?;
    if file.watch.bookmark_interval_seconds == 0 {
        return Err(ConfigError::Invalid(
            "watch.bookmarkIntervalSeconds must be positive".into(),
        ));
    }
    let limits = file
        .limits
        .check(&crate::limits::LimitFlags {
            max_requests_inflight: cli.max_requests_inflight,
            max_mutating_requests_inflight: cli.max_mutating_requests_inflight,
            min_request_timeout: cli.min_request_timeout,
        })
        .map_err(ConfigError::Invalid)?;
    Ok(Settings {
        listen: serving.listen,
        dns_listen,
        dns: file.dns,
        agent_listen: serving.agent_listen,
        hub: agents.hub,
        tls_pem: serving.tls_pem,
        data_dir,
        tls: serving.tls,
        auth,
        cache_size_bytes: file.storage.cache_size_mib * 1024 * 1024,
        etcd,
        replica,
        compaction_interval: Duration::from_secs(file.storage.compaction_interval_seconds),
        commit_probe_interval: Duration::from_secs(file.storage.commit_probe_interval_seconds),
        bookmark_interval: Duration::from_secs(file.watch.bookmark_interval_seconds),
        limits,
        agent_ca: agents.ca,
        certificate_validity: agents.certificate_validity,
        join_token_ttl: agents.join_token_ttl,
        audit,
    })
}

/// The config file of `--config`, parsed; without it, the defaults.
fn read_file(cli: &Cli) -> Result<FileConfig, ConfigError> {
    let Some(path) = &cli.config else {
        return Ok(FileConfig::default());
    };
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    parse_file(&text, &shown)
}

/// Where and how the REST API and the agent gateway serve.
struct Serving {
    listen: SocketAddr,
    agent_listen: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The agent gateway's PEM certificate and key.
    tls_pem: Option<PemPair>,
}

/// The listen addresses and their TLS, checked: loopback only in dev mode, and plain
/// text only on loopback unless allowed.
fn serving(cli: &Cli, file: &mut FileConfig, dev: bool) -> Result<Serving, ConfigError> {
    let listen = cli
        .listen
        .or(file.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 6443)));
    if dev && !listen.ip().is_loopback() {
        return Err(ConfigError::Invalid(format!(
            "--dev serves anonymous admin access and may only listen on loopback, not {listen}"
        )));
    }
    let (tls, tls_pem) = serving_tls(cli, file)?;
    let agent_listen = cli
        .agent_listen
        .or(file.agent_listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 6444)));
    if dev && !agent_listen.ip().is_loopback() {
        return Err(ConfigError::Invalid(format!(
            "--dev may only listen on loopback, not {agent_listen}"
        )));
    }
    check_plaintext(
        &[
            ("--listen", listen, tls.is_some()),
            ("--agent-listen", agent_listen, tls_pem.is_some()),
        ],
        cli.insecure_allow_plaintext || file.insecure_allow_plaintext,
    )?;
    Ok(Serving {
        listen,
        agent_listen,
        tls,
        tls_pem,
    })
}

/// A PEM certificate chain and its private key.
type PemPair = (Vec<u8>, Vec<u8>);

/// The API's TLS config, and the agent gateway's PEM certificate and key: its own
/// (`agentTls`), else the API's.
fn serving_tls(
    cli: &Cli,
    file: &mut FileConfig,
) -> Result<(Option<Arc<rustls::ServerConfig>>, Option<PemPair>), ConfigError> {
    let tls_files = file_pair(
        &cli.tls_cert_file,
        &cli.tls_private_key_file,
        file.tls.take(),
        "--tls-cert-file and --tls-private-key-file go together",
    )?;
    let tls = tls_files.as_ref().map(load_tls).transpose()?;
    let tls_pem = tls_files
        .map(|files| read_pem_pair(&files, "TLS certificate", "TLS key"))
        .transpose()?;
    // The agent gateway's own certificate, else the API's.
    let tls_pem = match file.agent_tls.take() {
        Some(files) => Some(read_pem_pair(
            &files,
            "agentTls.certFile",
            "agentTls.keyFile",
        )?),
        None => tls_pem,
    };
    Ok((tls, tls_pem))
}

/// A certificate and key given by two flags, which go together, else by the file.
fn file_pair(
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
    file: Option<TlsFiles>,
    together: &str,
) -> Result<Option<TlsFiles>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert_file: cert.clone(),
            key_file: key.clone(),
        })),
        (None, None) => Ok(file),
        _ => Err(ConfigError::Invalid(together.into())),
    }
}

/// Reads a certificate and a key file; errors name each by `cert_name` or `key_name`.
fn read_pem_pair(
    files: &TlsFiles,
    cert_name: &str,
    key_name: &str,
) -> Result<PemPair, ConfigError> {
    let read = |name: &str, path: &Path| {
        std::fs::read(path)
            .map_err(|e| ConfigError::Invalid(format!("{name} {}: {e}", path.display())))
    };
    Ok((
        read(cert_name, &files.cert_file)?,
        read(key_name, &files.key_file)?,
    ))
}

/// What the hub needs for agent sessions and certificates.
struct AgentSettings {
    hub: fedingress_hub::SessionSettings,
    ca: Option<Arc<fedingress_hub::pki::AgentCa>>,
    certificate_validity: Duration,
    join_token_ttl: Duration,
}

/// `agents:` checked, and the agent CA from files, loaded.
fn agent_settings(cli: &Cli, file: &mut FileConfig) -> Result<AgentSettings, ConfigError> {
    let agents = &file.agents;
    if agents.heartbeat_interval_ms == 0 || agents.lease_ms <= agents.heartbeat_interval_ms {
        return Err(ConfigError::Invalid(
            "agents.leaseMs must be longer than agents.heartbeatIntervalMs (> 0)".into(),
        ));
    }
    if agents.certificate_validity_seconds < 10 || agents.join_token_ttl_seconds == 0 {
        return Err(ConfigError::Invalid(
            "agents.certificateValiditySeconds must be at least 10 and agents.joinTokenTtlSeconds positive".into(),
        ));
    }
    let agent_ca_files = file_pair(
        &cli.agent_ca_cert_file,
        &cli.agent_ca_key_file,
        file.agent_ca.take(),
        "--agent-ca-cert-file and --agent-ca-key-file go together",
    )?;
    let ca = agent_ca_files
        .map(|files| fedingress_hub::pki::AgentCa::load(&files.cert_file, &files.key_file))
        .transpose()
        .map_err(ConfigError::Invalid)?
        .map(Arc::new);
    let agents = &file.agents;
    Ok(AgentSettings {
        hub: fedingress_hub::SessionSettings {
            heartbeat_interval: Duration::from_millis(agents.heartbeat_interval_ms),
            lease: Duration::from_millis(agents.lease_ms),
        },
        ca,
        certificate_validity: Duration::from_secs(agents.certificate_validity_seconds),
        join_token_ttl: Duration::from_secs(agents.join_token_ttl_seconds),
    })
}

/// The embedded DNS server's address (loopback only in dev mode), and `dns:` checked,
/// its in-zone nameservers without addresses given the server's own.
fn dns_settings(
    cli: &Cli,
    dns: &mut DnsConfig,
    dev: bool,
) -> Result<Option<SocketAddr>, ConfigError> {
    let dns_listen = cli.dns_listen.or(dns.listen);
    if let Some(addr) = dns_listen
        && dev
        && !addr.ip().is_loopback()
    {
        return Err(ConfigError::Invalid(format!(
            "--dev may only listen on loopback, not {addr}"
        )));
    }
    // In-zone nameservers without addresses answer with the server's own IP.
    fedingress_dns::zone::default_nameserver_addresses(
        &mut dns.zones,
        dns_listen.map(|addr| addr.ip()),
    );
    dns.check()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if !dns.providers.is_empty() && dns_listen.is_none() {
        return Err(ConfigError::Invalid(
            "dns.providers: needs the embedded DNS server (dns.listen or --dns-listen): \
             providers publish its routing decisions and delegate its zones"
                .into(),
        ));
    }
    Ok(dns_listen)
}

/// Client authentication: static tokens, OIDC, dev mode's anonymous admin; at least one.
fn authenticator(
    cli: &Cli,
    file: &mut FileConfig,
    dev: bool,
) -> Result<Authenticator, ConfigError> {
    let mut auth = Authenticator::new(dev);
    let token_file = cli.token_auth_file.clone().or(file.token_file.take());
    if let Some(path) = &token_file {
        auth.load_token_file(path)?;
    }
    let oidc = fedingress_apiserver::auth::config::oidc_settings(&cli.auth, &file.oidc)
        .map_err(ConfigError::Invalid)?;
    if let Some(oidc) = oidc {
        let oidc = fedingress_apiserver::auth::oidc::OidcAuthenticator::new(oidc)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        auth = auth.with_oidc(oidc);
    }
    if token_file.is_none() && auth.oidc().is_none() && !dev {
        return Err(ConfigError::Invalid(
            "no way to authenticate clients: give --token-auth-file (tokenFile), --oidc-issuer-url (oidc.issuerUrl) or --dev".into(),
        ));
    }
    Ok(auth)
}

/// `storage:`'s sizes and intervals are positive.
fn check_storage(storage: &StorageConfig) -> Result<(), ConfigError> {
    if storage.commit_probe_interval_seconds == 0 {
        return Err(ConfigError::Invalid(
            "storage.commitProbeIntervalSeconds must be positive".into(),
        ));
    }
    if storage.cache_size_mib == 0 || storage.compaction_interval_seconds == 0 {
        return Err(ConfigError::Invalid(
            "storage.cacheSizeMib and storage.compactionIntervalSeconds must be positive".into(),
        ));
    }
    Ok(())
}

impl Settings {
    /// The listeners that serve plain text off loopback (which only
    /// `--insecure-allow-plaintext` allows), by flag: the start warns about each.
    pub fn plaintext_off_loopback(&self) -> Vec<(&'static str, SocketAddr)> {
        plaintext_off_loopback(&[
            ("--listen", self.listen, self.tls.is_some()),
            ("--agent-listen", self.agent_listen, self.tls_pem.is_some()),
        ])
    }
}

/// Of `listeners` (flag, address, with TLS), those serving plain text off loopback.
fn plaintext_off_loopback(
    listeners: &[(&'static str, SocketAddr, bool)],
) -> Vec<(&'static str, SocketAddr)> {
    listeners
        .iter()
        .filter(|(_, addr, tls)| !tls && !addr.ip().is_loopback())
        .map(|(flag, addr, _)| (*flag, *addr))
        .collect()
}

/// TLS by default: the REST API and the agent gateway carry bearer and agent tokens, so
/// without a certificate they listen on loopback only, unless the operator opts out.
fn check_plaintext(
    listeners: &[(&'static str, SocketAddr, bool)],
    allow_plaintext: bool,
) -> Result<(), ConfigError> {
    if allow_plaintext {
        return Ok(());
    }
    match plaintext_off_loopback(listeners).first() {
        None => Ok(()),
        Some((flag, addr)) => Err(ConfigError::Invalid(format!(
            "{flag} {addr} is not a loopback address and no TLS certificate is configured: \
             give --tls-cert-file and --tls-private-key-file (config tls:; agentTls: for the \
             agent gateway alone), or \
             --insecure-allow-plaintext to send tokens in the clear"
        ))),
    }
}

/// Default time to live of a replica's lease.
pub const DEFAULT_REPLICA_LEASE: Duration = Duration::from_secs(3);

/// `--replica-name` and `--leader-elect-lease-duration`, checked.
fn replica_settings(
    cli: &Cli,
    etcd: bool,
) -> Result<fedingress_hub::replication::ReplicaSettings, ConfigError> {
    if !etcd && (cli.replica_name.is_some() || cli.leader_elect_lease_duration.is_some()) {
        return Err(ConfigError::Invalid(
            "--replica-name and --leader-elect-lease-duration need --etcd-servers (replicas share an etcd)".into(),
        ));
    }
    let name = match &cli.replica_name {
        Some(name) => {
            let valid = !name.is_empty()
                && name.len() <= 253
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
            if !valid {
                return Err(ConfigError::Invalid(format!(
                    "--replica-name {name:?}: use 1-253 letters, digits, '-', '.' or '_'"
                )));
            }
            name.clone()
        }
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default();
            let host = if host.is_empty() {
                "replica".into()
            } else {
                host
            };
            format!("{host}-{}", std::process::id())
        }
    };
    let lease = match cli.leader_elect_lease_duration {
        Some(seconds) if seconds < 2 => {
            return Err(ConfigError::Invalid(format!(
                "--leader-elect-lease-duration {seconds}: at least 2 seconds (etcd's lease granularity is a second)"
            )));
        }
        Some(seconds) => Duration::from_secs(seconds),
        None => DEFAULT_REPLICA_LEASE,
    };
    Ok(fedingress_hub::replication::ReplicaSettings { name, lease })
}

/// How long one etcd request (and the connection check at start) may take.
const ETCD_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The etcd settings from the `--etcd-*` flags over `storage.etcd`, checked and with
/// their certificate files read; `None` when no etcd server is given (redb).
fn etcd_options(
    cli: &Cli,
    file: Option<&EtcdFileConfig>,
) -> Result<Option<fedingress_store::EtcdOptions>, ConfigError> {
    let empty = EtcdFileConfig::default();
    let file = file.unwrap_or(&empty);
    let servers = if cli.etcd_servers.is_empty() {
        file.servers.clone()
    } else {
        cli.etcd_servers.clone()
    };
    let servers: Vec<String> = servers
        .iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let ca_file = cli.etcd_cafile.clone().or_else(|| file.ca_file.clone());
    let cert_file = cli.etcd_certfile.clone().or_else(|| file.cert_file.clone());
    let key_file = cli.etcd_keyfile.clone().or_else(|| file.key_file.clone());
    let prefix = cli.etcd_prefix.clone().or_else(|| file.prefix.clone());
    if servers.is_empty() {
        if ca_file.is_some() || cert_file.is_some() || key_file.is_some() || prefix.is_some() {
            return Err(ConfigError::Invalid(
                "--etcd-cafile, --etcd-certfile, --etcd-keyfile and --etcd-prefix need --etcd-servers"
                    .into(),
            ));
        }
        return Ok(None);
    }
    let https = count_https(&servers)?;
    let tls = etcd_tls(https != 0, ca_file, cert_file, key_file)?;
    Ok(Some(fedingress_store::EtcdOptions {
        endpoints: servers,
        key_prefix: prefix.unwrap_or_default(),
        tls,
        request_timeout: ETCD_REQUEST_TIMEOUT,
    }))
}

/// How many of the etcd `servers` are https:// URLs: all or none.
fn count_https(servers: &[String]) -> Result<usize, ConfigError> {
    let mut https = 0;
    for server in servers {
        let rest = if let Some(rest) = server.strip_prefix("https://") {
            https += 1;
            rest
        } else if let Some(rest) = server.strip_prefix("http://") {
            rest
        } else {
            return Err(ConfigError::Invalid(format!(
                "--etcd-servers: {server:?} is not an http:// or https:// URL"
            )));
        };
        if rest.is_empty() || rest.parse::<http::Uri>().is_err() {
            return Err(ConfigError::Invalid(format!(
                "--etcd-servers: {server:?} is not a valid URL"
            )));
        }
    }
    if https != 0 && https != servers.len() {
        return Err(ConfigError::Invalid(
            "--etcd-servers: use https:// for every server or for none".into(),
        ));
    }
    Ok(https)
}

/// The TLS material for etcd: `https` servers need the CA file, and the client
/// certificate and key go together; plain http:// servers take none.
fn etcd_tls(
    https: bool,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
) -> Result<Option<fedingress_store::EtcdTls>, ConfigError> {
    Ok(if !https {
        if ca_file.is_some() || cert_file.is_some() || key_file.is_some() {
            return Err(ConfigError::Invalid(
                "--etcd-cafile, --etcd-certfile and --etcd-keyfile need https:// etcd servers"
                    .into(),
            ));
        }
        None
    } else {
        let ca_file = ca_file.ok_or_else(|| {
            ConfigError::Invalid("https:// etcd servers need --etcd-cafile".into())
        })?;
        let identity = match (cert_file, key_file) {
            (Some(cert), Some(key)) => Some((read_certificates(&cert)?, read_key(&key)?)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Invalid(
                    "--etcd-certfile and --etcd-keyfile go together".into(),
                ));
            }
        };
        Some(fedingress_store::EtcdTls {
            ca_pem: read_certificates(&ca_file)?,
            identity,
        })
    })
}

/// Reads a PEM file that must hold at least one certificate.
fn read_certificates(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let invalid = |detail: String| {
        ConfigError::Invalid(format!("etcd certificate {}: {detail}", path.display()))
    };
    let pem = std::fs::read(path).map_err(|e| invalid(e.to_string()))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.to_string()))?;
    if certificates.is_empty() {
        return Err(invalid("no certificate in the file".into()));
    }
    Ok(pem)
}

/// Reads a PEM file that must hold a private key.
fn read_key(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;
    let pem = std::fs::read(path)
        .map_err(|e| ConfigError::Invalid(format!("etcd key {}: {e}", path.display())))?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| ConfigError::Invalid(format!("etcd key {}: {e}", path.display())))?;
    Ok(pem)
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
    // The server's order of cipher suites (strongest first), not the client's.
    config.ignore_client_order = true;
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
    fn replica_flags_are_checked() {
        let error = |args: &[&str]| {
            let mut all = vec!["federation-apiserver", "--dev", "--listen", "127.0.0.1:0"];
            all.extend_from_slice(args);
            load(&Cli::parse_from(all)).err().map(|e| e.to_string())
        };
        assert!(
            error(&["--replica-name", "r1"])
                .unwrap()
                .contains("need --etcd-servers")
        );
        let etcd = ["--etcd-servers", "http://127.0.0.1:1"];
        assert!(
            error(&[&etcd[..], &["--replica-name", "r 1"]].concat())
                .unwrap()
                .contains("--replica-name \"r 1\"")
        );
        assert!(
            error(&[&etcd[..], &["--leader-elect-lease-duration", "1"]].concat())
                .unwrap()
                .contains("at least 2 seconds")
        );
        let settings = load(&Cli::parse_from(
            [
                &["federation-apiserver", "--dev", "--listen", "127.0.0.1:0"][..],
                &etcd[..],
                &["--replica-name", "r1", "--leader-elect-lease-duration", "5"],
            ]
            .concat(),
        ))
        .unwrap();
        assert_eq!(settings.replica.name, "r1");
        assert_eq!(settings.replica.lease, Duration::from_secs(5));
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

    #[test]
    fn plaintext_off_loopback_needs_tls_or_the_explicit_escape() {
        for args in [
            &["federation-apiserver", "--listen", "0.0.0.0:0"][..],
            &["federation-apiserver", "--agent-listen", "[::]:0"][..],
        ] {
            let message = load(&Cli::parse_from(args)).err().unwrap().to_string();
            assert!(
                message.contains("not a loopback address")
                    && message.contains("--tls-cert-file")
                    && message.contains("--insecure-allow-plaintext"),
                "{message}"
            );
        }
        // With the escape the check passes (and the next one, authentication, fails).
        let cli = Cli::parse_from([
            "federation-apiserver",
            "--listen",
            "0.0.0.0:0",
            "--insecure-allow-plaintext",
        ]);
        let message = load(&cli).err().unwrap().to_string();
        assert!(message.contains("authenticate"), "{message}");
        let file = parse_file("insecureAllowPlaintext: true\n", "c.yaml").unwrap();
        assert!(file.insecure_allow_plaintext);
    }

    #[test]
    fn plaintext_off_loopback_allowed_is_named_for_the_start_to_warn() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, "t0123456789,admin,1,\"system:masters\"\n").unwrap();
        let tokens = tokens.display().to_string();
        let settings = |args: &[&str]| {
            let mut all = vec!["federation-apiserver", "--token-auth-file", &tokens];
            all.extend_from_slice(args);
            load(&Cli::parse_from(all)).unwrap()
        };
        let open = settings(&[
            "--listen",
            "0.0.0.0:6443",
            "--agent-listen",
            "[::]:6444",
            "--insecure-allow-plaintext",
        ]);
        assert_eq!(
            open.plaintext_off_loopback(),
            vec![
                ("--listen", "0.0.0.0:6443".parse().unwrap()),
                ("--agent-listen", "[::]:6444".parse().unwrap()),
            ]
        );
        // Loopback, or allowed but on loopback: nothing to warn about.
        assert!(settings(&[]).plaintext_off_loopback().is_empty());
        assert!(
            settings(&["--insecure-allow-plaintext"])
                .plaintext_off_loopback()
                .is_empty()
        );
    }

    fn dev_with(args: &[&str]) -> Result<Settings, ConfigError> {
        let mut all = vec!["federation-apiserver", "--dev"];
        all.extend_from_slice(args);
        load(&Cli::parse_from(all))
    }

    #[test]
    fn agent_ca_files_go_together_and_are_loaded_before_anything_binds() {
        let message = dev_with(&["--agent-ca-cert-file", "ca.pem"])
            .err()
            .unwrap()
            .to_string();
        assert!(message.contains("go together"), "{message}");
        let dir = tempfile::tempdir().unwrap();
        let (ca, key) = fedingress_hub::pki::AgentCa::generate("test").unwrap();
        let cert_path = dir.path().join("ca.crt");
        let key_path = dir.path().join("ca.key");
        std::fs::write(&cert_path, ca.cert_pem()).unwrap();
        std::fs::write(&key_path, "not a key").unwrap();
        let (cert, bad_key) = (cert_path.to_str().unwrap(), key_path.to_str().unwrap());
        let message = dev_with(&["--agent-ca-cert-file", cert, "--agent-ca-key-file", bad_key])
            .err()
            .unwrap()
            .to_string();
        assert!(message.contains("private key"), "{message}");
        std::fs::write(&key_path, key).unwrap();
        let settings =
            dev_with(&["--agent-ca-cert-file", cert, "--agent-ca-key-file", bad_key]).unwrap();
        assert!(settings.agent_ca.is_some());
        assert_eq!(settings.certificate_validity, Duration::from_secs(86400));
        assert_eq!(settings.join_token_ttl, Duration::from_secs(3600));
        let path = dir.path().join("short.yaml");
        std::fs::write(
            &path,
            "dev: true\nagents: {certificateValiditySeconds: 5}\n",
        )
        .unwrap();
        let message = load(&Cli::parse_from([
            "federation-apiserver",
            "--config",
            path.to_str().unwrap(),
        ]))
        .err()
        .unwrap()
        .to_string();
        assert!(message.contains("certificateValiditySeconds"), "{message}");
    }

    #[test]
    fn etcd_flags_select_etcd() {
        let settings = dev_with(&[
            "--etcd-servers",
            "http://127.0.0.1:2379,http://127.0.0.2:2379",
            "--etcd-prefix",
            "/fed",
        ])
        .unwrap();
        let etcd = settings.etcd.expect("etcd selected");
        assert_eq!(
            etcd.endpoints,
            ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
        );
        assert_eq!(etcd.key_prefix, "/fed");
        assert!(etcd.tls.is_none());
        assert!(dev_with(&[]).unwrap().etcd.is_none(), "redb is the default");
    }

    #[test]
    fn bad_etcd_settings_are_config_errors() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let garbage = garbage.to_str().unwrap();
        let cases: &[(&[&str], &str)] = &[
            (&["--etcd-servers", "127.0.0.1:2379"], "not an http"),
            (
                &["--etcd-servers", "https://127.0.0.1:2379"],
                "--etcd-cafile",
            ),
            (
                &["--etcd-servers", "https://a:1,http://b:2"],
                "every server or for none",
            ),
            (
                &["--etcd-servers", "http://a:1", "--etcd-cafile", garbage],
                "need https",
            ),
            (&["--etcd-prefix", "/x"], "need --etcd-servers"),
            (
                &["--etcd-servers", "https://a:1", "--etcd-cafile", garbage],
                "no certificate",
            ),
            (
                &[
                    "--etcd-servers",
                    "https://a:1",
                    "--etcd-cafile",
                    "/nonexistent.pem",
                ],
                "/nonexistent.pem",
            ),
        ];
        for (args, expected) in cases {
            let error = dev_with(args).err().unwrap().to_string();
            assert!(error.contains(expected), "{args:?}: {error}");
        }
    }

    #[test]
    fn dns_limits_are_parsed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apiserver.yaml");
        let path_str = path.to_str().unwrap().to_owned();
        let load_dns = |dns: &str| {
            std::fs::write(&path, format!("dev: true\ndns:\n{dns}")).unwrap();
            load(&Cli::parse_from([
                "federation-apiserver",
                "--config",
                &path_str,
            ]))
            .map(|settings| settings.dns.server_config())
            .map_err(|e| e.to_string())
        };
        let defaults = load_dns("  zones: []\n").unwrap();
        assert!(defaults.rrl.enabled);
        assert_eq!(defaults.rrl.responses_per_second, 100);
        assert_eq!(defaults.ecs.trusted_resolvers.len(), 2, "loopback");
        let set = load_dns(
            "  rrl: {responsesPerSecond: 5, slip: 0, ipv4PrefixLength: 32, exempt: []}\n  ecs: {trustedResolvers: [8.8.8.0/24]}\n  tcp: {maxConnections: 10, idleTimeoutSeconds: 3}\n",
        )
        .unwrap();
        assert_eq!(set.rrl.responses_per_second, 5);
        assert!(set.rrl.exempt.is_empty());
        assert_eq!(
            set.ecs.trusted_resolvers,
            vec!["8.8.8.0/24".parse().unwrap()]
        );
        assert_eq!(set.tcp.max_connections, 10);
        for (dns, expected) in [
            ("  rrl: {slip: 11}\n", "dns.rrl.slip: must be in 0..=10"),
            (
                "  rrl: {responsesPerSecond: 0}\n",
                "dns.rrl.responsesPerSecond",
            ),
            (
                "  rrl: {ipv6PrefixLength: 129}\n",
                "dns.rrl.ipv6PrefixLength",
            ),
            ("  tcp: {maxConnections: 0}\n", "dns.tcp.maxConnections"),
            (
                "  tcp: {idleTimeoutSeconds: 0}\n",
                "dns.tcp.idleTimeoutSeconds",
            ),
            ("  rrl: {rate: 5}\n", "unknown field `rate`"),
            ("  ecs: {trusted: []}\n", "unknown field `trusted`"),
            (
                "  ecs: {trustedResolvers: [8.8.8.8/33]}\n",
                "trustedResolvers",
            ),
        ] {
            let error = load_dns(dns).unwrap_err();
            assert!(error.contains(expected), "{dns}: {error}");
        }
    }

    #[test]
    fn in_zone_nameservers_default_to_the_dns_listen_ip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apiserver.yaml");
        std::fs::write(
            &path,
            "dev: true\ndns:\n  zones:\n  - name: fedingress.test\n    nameservers: [ns.elsewhere.example, ns1.fedingress.test]\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let error = load(&Cli::parse_from(["federation-apiserver", "--config", path]))
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.starts_with(
                "dns.zones[0].nameservers[1]: ns1.fedingress.test is inside zone fedingress.test"
            ),
            "{error}"
        );
        let settings = load(&Cli::parse_from([
            "federation-apiserver",
            "--config",
            path,
            "--dns-listen",
            "127.0.0.2:0",
        ]))
        .unwrap();
        let nameservers = &settings.dns.zones[0].nameservers;
        assert!(nameservers[0].addresses.is_empty(), "out of zone");
        assert_eq!(
            nameservers[1].addresses,
            ["127.0.0.2".parse::<std::net::IpAddr>().unwrap()]
        );
    }

    #[test]
    fn dns_providers_are_checked_with_the_field_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apiserver.yaml");
        let path_str = path.to_str().unwrap().to_owned();
        let zones = "  zones: [{name: gslb.example.com, nameservers: [ns.elsewhere.example]}]\n";
        let load_dns = |dns: &str, dns_listen: bool| {
            std::fs::write(&path, format!("dev: true\ndns:\n{zones}{dns}")).unwrap();
            let mut args = vec!["federation-apiserver", "--config", &path_str];
            if dns_listen {
                args.extend(["--dns-listen", "127.0.0.1:0"]);
            }
            load(&Cli::parse_from(args))
                .map(|settings| settings.dns)
                .map_err(|e| e.to_string())
        };
        let good = "  ownerId: prod\n  providers:\n  - {name: aws, type: route53, zone: Z1, endpointUrl: 'http://127.0.0.1:5000', delegate: [gslb.example.com]}\n";
        let dns = load_dns(good, true).unwrap();
        assert_eq!(dns.owner_id.as_deref(), Some("prod"));
        assert_eq!(dns.providers[0].name, "aws");
        assert_eq!(dns.providers[0].delegate, ["gslb.example.com"]);
        assert!(
            load_dns(good, false)
                .unwrap_err()
                .starts_with("dns.providers: needs the embedded DNS server")
        );
        for (dns, expected) in [
            (
                "  providers: [{name: aws, type: route53, zone: Z1}]\n",
                "dns.ownerId: required",
            ),
            (
                "  ownerId: p\n  providers: [{name: aws, type: route53, zone: ''}]\n",
                "dns.providers[0].zone: required",
            ),
            (
                "  ownerId: p\n  providers: [{name: aws, type: route53, zone: Z, delegate: [other.example.com]}]\n",
                "dns.providers[0].delegate[0]: \"other.example.com\" is not one of dns.zones",
            ),
            (
                "  ownerId: p\n  providers: [{name: g, type: clouddns, zone: z}]\n",
                "dns.providers[0].project: required",
            ),
        ] {
            let error = load_dns(dns, true).unwrap_err();
            assert!(error.starts_with(expected), "{dns}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
        let error = load_dns(
            "  ownerId: p\n  providers: [{name: aws, type: route53, zone: Z, hostedZone: Z}]\n",
            true,
        )
        .unwrap_err();
        assert!(error.contains("unknown field `hostedZone`"), "{error}");
    }

    #[test]
    fn etcd_file_keys_parse_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apiserver.yaml");
        std::fs::write(
            &path,
            "dev: true\nstorage:\n  etcd:\n    servers: [\"http://127.0.0.1:2379\"]\n    prefix: /from-file\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let cli = Cli::parse_from(["federation-apiserver", "--config", path]);
        let etcd = load(&cli).unwrap().etcd.unwrap();
        assert_eq!(etcd.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(etcd.key_prefix, "/from-file");
        let cli = Cli::parse_from([
            "federation-apiserver",
            "--config",
            path,
            "--etcd-servers",
            "http://127.0.0.9:2379",
        ]);
        let etcd = load(&cli).unwrap().etcd.unwrap();
        assert_eq!(etcd.endpoints, ["http://127.0.0.9:2379"]);
        assert_eq!(etcd.key_prefix, "/from-file");
        let error = parse_file("storage:\n  etcd:\n    endpoints: []\n", "x.yaml")
            .unwrap_err()
            .to_string();
        assert!(error.contains("endpoints"), "{error}");
    }
}
