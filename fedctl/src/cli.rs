//! The command line: every subcommand, flag and value parser of `fedctl`.
//!
//! Parsing only: what a command does lives in `commands/` and `dev/`. Values that clap
//! cannot check alone (a location, a label, a duration) are parsed here too, so a bad
//! value is a usage error (exit 2) before anything talks to a server.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// fedctl: the fedingress command line.
#[derive(Debug, Parser)]
#[command(
    name = "fedctl",
    version,
    about = "Register member clusters, inspect and explain routing, run a local federation",
    long_about = "fedctl talks to the federation-apiserver's REST API with the server and \
                  credentials of a kubeconfig file (--kubeconfig, else $KUBECONFIG, else \
                  ~/.kube/config), so one file serves kubectl and fedctl.\n\n\
                  Exit codes: 0 ok, 1 failure, 2 usage."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(Debug, Clone, Args)]
pub struct Global {
    /// kubeconfig file (default: $KUBECONFIG, a list separated by ':', else ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// kubeconfig context to use (default: its current-context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace of FederatedIngresses (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns and text for people.
    Table,
    /// The API objects as YAML.
    Yaml,
    /// The API objects as JSON.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register a member cluster (create its Cluster object and issue its agent token),
    /// or with --member add an agent to an existing cluster.
    Join(Box<JoinArgs>),
    /// Remove a member cluster: cordon, wait one DNS TTL, revoke its tokens, delete it.
    Unjoin(UnjoinArgs),
    /// Take a cluster out of routing and placement (its listeners keep serving).
    Cordon(NameArg),
    /// Put a cordoned cluster back into routing and placement.
    Uncordon(NameArg),
    /// Issue, list and revoke a cluster's agent tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// List clusters or ingresses.
    Get(GetArgs),
    /// Show one cluster or ingress in detail: placement, health, DNS answers, events.
    Describe(DescribeArgs),
    /// Which cluster a client gets for an ingress, and why.
    Explain(ExplainArgs),
    /// The whole federation at a glance: clusters, health, traffic share, ingresses.
    Status,
    /// A complete local federation for trying fedingress out.
    #[command(subcommand)]
    Dev(DevCommand),
}

#[derive(Debug, Args)]
pub struct NameArg {
    /// Cluster name.
    pub name: String,
}

/// Where an emitted agent config is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Emit {
    /// A `cluster-agent` config for the built-in (standalone) data plane.
    Standalone,
    /// The member cluster's manifests for an agent with driver kubernetes (Namespace,
    /// RBAC, ConfigMap with the agent config, Secret with the token, Deployment), as
    /// one multi-document YAML.
    Kubernetes,
}

/// `kubernetes.profile` of an emitted agent config.
pub const PROFILES: [&str; 7] = [
    "auto",
    "mixed",
    "aws",
    "gcp",
    "azure",
    "metallb",
    "nginx-configmap",
];

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// Cluster name (a DNS-1123 label such as `eu-west`).
    pub name: String,
    /// Region the cluster runs in, e.g. `europe-west1` (needed to create the cluster).
    #[arg(long, required_unless_present = "member")]
    pub region: Option<String>,
    /// Position of the cluster, `LATITUDE,LONGITUDE` in degrees (e.g. `50.45,3.82`;
    /// needed to create the cluster).
    #[arg(long, value_name = "LAT,LON", value_parser = parse_location, allow_hyphen_values = true, required_unless_present = "member")]
    pub location: Option<(f64, f64)>,
    /// Join an agent as member NAME of the cluster (a DNS-1123 label; issue 24, ingress
    /// pools): when the cluster exists, only a join token for it is issued (the cluster
    /// is created as without --member otherwise), and `--emit standalone` writes
    /// `member: {name: NAME}`, `CLUSTER-NAME.join-token` and `CLUSTER-NAME-state`.
    #[arg(long, value_name = "NAME")]
    pub member: Option<String>,
    /// Zone within the region.
    #[arg(long)]
    pub zone: Option<String>,
    /// A label `key=value` (repeatable); placement selectors match labels.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Requests plus new connections per second the cluster can take: the Overflow limit
    /// (compared with status.load.rps).
    #[arg(long, value_name = "N")]
    pub capacity_rps: Option<u32>,
    /// Concurrent connections the cluster can hold (informational: no strategy reads
    /// it).
    #[arg(long, value_name = "N")]
    pub capacity_connections: Option<u32>,
    /// Infrastructure: aws, gcp, azure, onprem or other.
    #[arg(long, value_parser = ["aws", "gcp", "azure", "onprem", "other"], ignore_case = true)]
    pub provider: Option<String>,
    /// Print a ready agent config on stdout: `standalone` (the token goes to
    /// --token-file) or `kubernetes` (manifests for the member cluster, the token in
    /// their Secret).
    #[arg(long, value_enum)]
    pub emit: Option<Emit>,
    /// Issue a long-lived agent token (the compatibility path) instead of a single-use
    /// join token. Without it a join token is issued when the agent gateway is https
    /// (the agent then obtains a client certificate and uses mTLS), a token otherwise.
    #[arg(long)]
    pub token: bool,
    /// Lifetime of the join token in seconds (default: the hub's
    /// `agents.joinTokenTtlSeconds`, 3600).
    #[arg(long, value_name = "SECONDS", conflicts_with = "token")]
    pub join_token_ttl: Option<u64>,
    /// With --emit standalone: where the agent token (or join token) is written (default
    /// `NAME.token`, or `NAME.join-token`; mode 0600).
    #[arg(long, value_name = "FILE", requires = "emit")]
    pub token_file: Option<PathBuf>,
    /// With --emit: the hub's agent gateway as agents reach it (default: from the
    /// kubeconfig's fedingress.io/agent-gateway extension, else the API host, port 6444).
    /// Repeatable: one per federation-apiserver replica, all of one scheme; the agent
    /// moves to the next when its replica goes away.
    #[arg(long = "hub-address", value_name = "URL", requires = "emit")]
    pub hub_addresses: Vec<String>,
    /// With --emit: CA bundle the agent verifies an https hub with (default: the
    /// kubeconfig's certificate-authority).
    #[arg(long, value_name = "FILE", requires = "emit")]
    pub hub_ca: Option<PathBuf>,
    /// With --emit standalone: an address the agent serves on, `BIND[=ADVERTISE]`
    /// (repeatable).
    #[arg(long = "listen", value_name = "BIND[=ADVERTISE]", value_parser = parse_listen, requires = "emit")]
    pub listens: Vec<(IpAddr, Option<String>)>,
    /// With --emit standalone: a backend service, `NAME=ENDPOINT[,ENDPOINT...]`
    /// (repeatable).
    #[arg(long = "service", value_name = "NAME=ENDPOINTS", value_parser = parse_service, requires = "emit")]
    pub services: Vec<(String, Vec<String>)>,
    /// With --emit standalone: the agent's admin endpoint, `IP:PORT` (default
    /// `127.0.0.1:0`, a port picked at start). Give a fixed one for `cluster-agent ready`,
    /// keepalived's track script (`vrrp:`) and probes.
    #[arg(long = "admin-address", value_name = "IP:PORT", requires = "emit")]
    pub admin_address: Option<std::net::SocketAddr>,
    /// With --emit kubernetes: the agent's image, built from deploy/kubernetes/Dockerfile
    /// (default `fedingress/cluster-agent:VERSION`, this fedctl's version).
    #[arg(long, value_name = "IMAGE", requires = "emit")]
    pub image: Option<String>,
    /// With --emit kubernetes: the member cluster's namespace for the agent (default
    /// `fedingress-system`).
    #[arg(long, value_name = "NS", requires = "emit")]
    pub agent_namespace: Option<String>,
    /// With --emit kubernetes: how the agent renders L4 rules (default `auto`: from the
    /// Cluster's provider).
    #[arg(long, value_name = "PROFILE", requires = "emit", value_parser = PROFILES)]
    pub profile: Option<String>,
    /// Wait (with a spinner on a terminal) until the cluster's agent connects.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits, e.g. `90s`, `5m`.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct UnjoinArgs {
    /// Cluster name.
    pub name: String,
    /// How long to wait after cordoning before deleting (default: the longest DNS TTL
    /// of the ingresses placed on the cluster), e.g. `0s` to skip draining.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain: Option<Duration>,
    /// How long to wait for the cordon to take effect and the deletion to finish.
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a new agent token (shown once).
    Create {
        /// Cluster name.
        cluster: String,
        /// A single-use join token instead (for an agent with `joinTokenFile`: it buys a
        /// client certificate; use it to re-join after the certificate expired or was
        /// revoked).
        #[arg(long)]
        join: bool,
        /// With --join: its lifetime in seconds (default: the hub's, 3600).
        #[arg(long, value_name = "SECONDS", requires = "join")]
        ttl_seconds: Option<u64>,
    },
    /// List a cluster's agent tokens (ids and creation times).
    List {
        /// Cluster name.
        cluster: String,
    },
    /// Revoke one credential: an agent token, a join token or a client certificate (by
    /// the id `fedctl token list` shows). The session it authenticated ends at once.
    Revoke {
        /// Cluster name.
        cluster: String,
        /// Token id (as `fedctl token list` shows it).
        id: String,
    },
}

/// What `get` and `describe` show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Member clusters.
    #[value(aliases = ["cluster", "fcl", "cl"])]
    Clusters,
    /// FederatedIngresses.
    #[value(aliases = ["ingress", "federatedingress", "federatedingresses", "fing", "ing"])]
    Ingresses,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// `clusters` or `ingresses`.
    #[arg(value_enum)]
    pub kind: Kind,
    /// One object by name.
    pub name: Option<String>,
    /// Label selector, e.g. `env=prod`.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Ingresses of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// `cluster` or `ingress`.
    #[arg(value_enum)]
    pub kind: Kind,
    /// Name of the object.
    pub name: String,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// FederatedIngress name.
    pub ingress: String,
    /// The client's IP address (as the DNS server sees it: ECS subnet or resolver).
    #[arg(long, value_name = "IP")]
    pub client: IpAddr,
}

#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Start a local federation (apiserver, embedded DNS, three clusters with echo
    /// backends) and keep it running until Ctrl-C.
    Up(DevUpArgs),
    /// Stop a local federation left running.
    Down(StateDirArg),
    /// Stop or start the echo backend of one dev cluster (watch DNS move).
    #[command(subcommand)]
    Backend(BackendCommand),
    /// An echo server (TCP+UDP on one address, HTTP on another); used by `dev up`.
    #[command(hide = true)]
    Echo(EchoArgs),
}

#[derive(Debug, Args)]
pub struct StateDirArg {
    /// Directory of the dev federation's state, logs and kubeconfig.
    #[arg(long, value_name = "DIR", default_value = ".fedingress/dev")]
    pub state_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct DevUpArgs {
    #[command(flatten)]
    pub state: StateDirArg,
    /// Port of the embedded DNS server (UDP and TCP).
    #[arg(long, default_value_t = 5353)]
    pub dns_port: u16,
    /// Port of the REST API (kubectl and fedctl); 0 picks a free one.
    #[arg(long, default_value_t = 6443)]
    pub api_port: u16,
    /// Port of the agent gateway; 0 picks a free one.
    #[arg(long, default_value_t = 6444)]
    pub agent_port: u16,
    /// Loopback block: the hub listens on 127.0.N.1, clusters serve on 127.0.N.11-13,
    /// backends on 127.0.N.21-23 (so two dev federations can run side by side).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub block: u8,
    /// How long starting may take.
    #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// High availability: one etcd member (needs `etcd` on PATH) and three apiserver
    /// replicas r1-r3 on 127.0.N.1-3 (same ports), each serving the API, the agent
    /// gateway and DNS; agents know all three.
    #[arg(long)]
    pub ha: bool,
}

#[derive(Debug, Subcommand)]
pub enum BackendCommand {
    /// Stop a cluster's echo backend; waits until DNS has moved its clients elsewhere.
    Stop(BackendArgs),
    /// Start a cluster's echo backend again; waits until DNS answers with it again.
    Start(BackendArgs),
}

#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Dev cluster name: eu-west, us-east or ap-south.
    pub cluster: String,
    #[command(flatten)]
    pub state: StateDirArg,
}

#[derive(Debug, Args)]
pub struct EchoArgs {
    /// Name put in front of every reply.
    #[arg(long)]
    pub name: String,
    /// TCP and UDP address (one port, both protocols).
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    /// HTTP address.
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
}

/// `LAT,LON` in degrees, each in range.
pub fn parse_location(text: &str) -> Result<(f64, f64), String> {
    let (lat, lon) = text
        .split_once(',')
        .ok_or_else(|| format!("{text:?} is not LATITUDE,LONGITUDE (e.g. 50.45,3.82)"))?;
    let number = |s: &str, what: &str, limit: f64| -> Result<f64, String> {
        let value: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("{what} {:?} is not a number", s.trim()))?;
        if !value.is_finite() || value.abs() > limit {
            return Err(format!(
                "{what} {value} is not between -{limit} and {limit}"
            ));
        }
        Ok(value)
    };
    Ok((
        number(lat, "latitude", 90.0)?,
        number(lon, "longitude", 180.0)?,
    ))
}

/// `key=value`.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// `BIND[=ADVERTISE]`.
pub fn parse_listen(text: &str) -> Result<(IpAddr, Option<String>), String> {
    let (bind, advertise) = match text.split_once('=') {
        Some((bind, advertise)) => (bind, Some(advertise.to_string())),
        None => (text, None),
    };
    let bind = bind
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| format!("{bind:?} is not an IP address"))?;
    Ok((bind, advertise.filter(|a| !a.is_empty())))
}

/// `NAME=EP[,EP...]`.
pub fn parse_service(text: &str) -> Result<(String, Vec<String>), String> {
    let (name, endpoints) = text
        .split_once('=')
        .filter(|(name, endpoints)| !name.is_empty() && !endpoints.is_empty())
        .ok_or_else(|| {
            format!("{text:?} is not NAME=ENDPOINT[,ENDPOINT...] (e.g. web=10.0.0.5:8080)")
        })?;
    Ok((
        name.to_string(),
        endpoints.split(',').map(|e| e.trim().to_string()).collect(),
    ))
}

/// `90s`, `5m`, `1h`, `250ms` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || format!("{text:?} is not a duration (e.g. 30s, 5m, 1h)");
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(bad()),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse_location("50.45,3.82").unwrap(), (50.45, 3.82));
        assert_eq!(parse_location("-33.9, -70.6").unwrap(), (-33.9, -70.6));
        assert!(parse_location("91,0").is_err());
        assert!(parse_location("abc").is_err());
        assert_eq!(
            parse_label("env=prod").unwrap(),
            ("env".into(), "prod".into())
        );
        assert!(parse_label("=x").is_err());
        assert_eq!(
            parse_listen("0.0.0.0=203.0.113.7").unwrap(),
            ("0.0.0.0".parse().unwrap(), Some("203.0.113.7".into()))
        );
        assert_eq!(
            parse_listen("[::1]").unwrap().0,
            "::1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            parse_service("web=10.0.0.5:80,10.0.0.6").unwrap().1,
            vec!["10.0.0.5:80", "10.0.0.6"]
        );
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
