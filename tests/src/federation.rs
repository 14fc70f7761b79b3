//! A whole local federation for end-to-end tests: a federation-apiserver on its own
//! loopback block, Clusters created with kubectl, agent tokens issued through the REST
//! API, and standalone cluster agents serving on their own loopback addresses.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{Kubectl, Process, binary, write_kubeconfig};

const START: Duration = Duration::from_secs(30);

/// A federation-apiserver on `127.0.<block>.1`, fixed ports (so agents find it again
/// after a restart), dev mode, a short agent lease.
pub struct HubProcess {
    pub process: Process,
    pub api: String,
    pub agent: String,
}

pub fn hub_config(dir: &Path, block: u8) -> PathBuf {
    hub_config_with(dir, block, "")
}

/// The hub config plus `extra` YAML (e.g. a `dns:` section).
pub fn hub_config_with(dir: &Path, block: u8, extra: &str) -> PathBuf {
    hub_config_opts(dir, block, &HubOptions::with_extra(extra))
}

/// Settings of a test hub beyond its loopback block.
#[derive(Clone, Copy, Debug)]
pub struct HubOptions<'a> {
    /// `agents.heartbeatIntervalMs`.
    pub heartbeat_ms: u32,
    /// `agents.leaseMs`.
    pub lease_ms: u32,
    /// Extra YAML appended to the config (e.g. a `dns:` section).
    pub extra: &'a str,
}

impl<'a> HubOptions<'a> {
    /// The default short lease (heartbeat 300 ms, lease 1.5 s) plus `extra`.
    pub fn with_extra(extra: &'a str) -> Self {
        Self {
            heartbeat_ms: 300,
            lease_ms: 1500,
            extra,
        }
    }
}

/// Writes the hub config for `options`; returns its path.
pub fn hub_config_opts(dir: &Path, block: u8, options: &HubOptions<'_>) -> PathBuf {
    let path = dir.join("apiserver.yaml");
    let text = format!(
        "listen: 127.0.{block}.1:16443\nagentListen: 127.0.{block}.1:16444\ndataDir: {}\ndev: true\nagents:\n  heartbeatIntervalMs: {}\n  leaseMs: {}\n{}",
        dir.join("hub-data").display(),
        options.heartbeat_ms,
        options.lease_ms,
        options.extra,
    );
    std::fs::write(&path, text).expect("writing apiserver config");
    path
}

pub fn start_hub(dir: &Path, block: u8) -> HubProcess {
    start_hub_with(dir, block, "")
}

/// Starts the hub with extra config (see [`hub_config_with`]).
pub fn start_hub_with(dir: &Path, block: u8, extra: &str) -> HubProcess {
    start_hub_opts(dir, block, &HubOptions::with_extra(extra))
}

/// Starts the hub with `options` (see [`hub_config_opts`]). The same `dir` and
/// `block` give the same data dir and ports: that is how tests restart a hub.
pub fn start_hub_opts(dir: &Path, block: u8, options: &HubOptions<'_>) -> HubProcess {
    let config = hub_config_opts(dir, block, options);
    let mut command = Command::new(binary("federation-apiserver"));
    command.arg("--config").arg(&config);
    let process = Process::start(command, "federation-apiserver", START).expect("apiserver starts");
    HubProcess {
        api: format!("http://{}", process.addr("api")),
        agent: format!("http://{}", process.addr("agent")),
        process,
    }
}

/// kubectl with a kubeconfig for the hub.
pub fn kubectl(dir: &Path, api: &str) -> Kubectl {
    let path = dir.join("kubeconfig");
    write_kubeconfig(&path, api, None, None);
    Kubectl::new(None, path)
}

/// Runs curl and parses the JSON answer.
pub fn curl_json(args: &[&str]) -> anyhow::Result<Value> {
    let out = Command::new("curl")
        .arg("-sS")
        .args(args)
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "curl {args:?} answered {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Issues an agent token for `cluster`.
pub fn issue_token(api: &str, cluster: &str) -> anyhow::Result<(String, String)> {
    let body = curl_json(&[
        "-X",
        "POST",
        &format!("{api}/apis/fedingress.io/v1alpha1/clusters/{cluster}/token"),
    ])?;
    let token = body["token"]
        .as_str()
        .context("token in the answer")?
        .to_string();
    let id = body["metadata"]["name"]
        .as_str()
        .context("token id")?
        .to_string();
    Ok((id, token))
}

/// One member cluster of a test federation.
pub struct ClusterSpec {
    pub name: String,
    pub region: String,
    pub latitude: f64,
    pub longitude: f64,
    /// Where the agent serves listeners.
    pub bind: IpAddr,
    /// The `echo` service's endpoint.
    pub backend: std::net::SocketAddr,
    /// `advertise` of the listen address (an IP or a load balancer host name).
    pub advertise: Option<String>,
    /// `spec.capacity.rps` of the Cluster.
    pub capacity_rps: Option<u32>,
}

impl ClusterSpec {
    /// Cluster `c<n>` of a test's loopback block `127.0.<block>.x`: it serves on
    /// `.1<n>` and its echo backend listens on `.2<n>:9000`.
    pub fn numbered(block: u8, n: u8, region: &str, latitude: f64, longitude: f64) -> Self {
        ClusterSpec {
            name: format!("c{n}"),
            region: region.into(),
            latitude,
            longitude,
            bind: format!("127.0.{block}.{}", 10 + n).parse().unwrap(),
            backend: format!("127.0.{block}.{}:9000", 20 + n).parse().unwrap(),
            advertise: None,
            capacity_rps: None,
        }
    }
}

/// Creates the Cluster object (with kubectl).
pub fn create_cluster(k: &Kubectl, dir: &Path, spec: &ClusterSpec) {
    let path = dir.join(format!("cluster-{}.yaml", spec.name));
    let text = format!(
        "apiVersion: fedingress.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: {}\n  labels: {{env: test}}\nspec:\n  region: {}\n  location: {{latitude: {}, longitude: {}}}\n{}",
        spec.name,
        spec.region,
        spec.latitude,
        spec.longitude,
        spec.capacity_rps
            .map(|c| format!("  capacity: {{rps: {c}}}\n"))
            .unwrap_or_default()
    );
    std::fs::write(&path, text).expect("writing cluster yaml");
    k.ok(&["apply", "-f", &path.display().to_string()]);
}

/// Writes the agent's config and token file; returns the config path.
pub fn agent_config(dir: &Path, hub_agent: &str, spec: &ClusterSpec, token: &str) -> PathBuf {
    let agent_dir = dir.join(format!("agent-{}", spec.name));
    std::fs::create_dir_all(&agent_dir).expect("agent dir");
    std::fs::write(agent_dir.join("token"), token).expect("token file");
    let bind = spec.bind.to_string();
    let advertise = spec
        .advertise
        .as_ref()
        .map(|a| format!("  advertise: \"{a}\"\n"))
        .unwrap_or_default();
    let text = format!(
        "hub:\n  address: {hub_agent}\ncluster: {name}\ntokenFile: token\ndriver: standalone\nlisten:\n- bind: \"{bind}\"\n{advertise}services:\n  echo: [\"{backend}\"]\nhealthCheck:\n  intervalMs: 200\n  timeoutMs: 200\n  healthyThreshold: 1\n  unhealthyThreshold: 2\nudpIdleTimeoutMs: 5000\nstateDir: state\nadmin: 127.0.0.1:0\nreportIntervalMs: 1000\n",
        name = spec.name,
        backend = spec.backend,
    );
    let path = agent_dir.join("agent.yaml");
    std::fs::write(&path, text).expect("agent config");
    path
}

/// [`agent_config`] for a hub whose agent gateway is `https://` (verified with `ca`):
/// with `join`, `secret` is a join token (`joinTokenFile`) instead of a token.
pub fn https_agent_config(
    dir: &Path,
    gateway: &str,
    ca: &Path,
    spec: &ClusterSpec,
    secret: &str,
    join: bool,
) -> PathBuf {
    let config = agent_config(dir, gateway, spec, secret);
    let agent_dir = config.parent().expect("agent dir").to_path_buf();
    let mut text = std::fs::read_to_string(&config)
        .expect("agent config")
        .replace(
            &format!("  address: {gateway}\n"),
            &format!("  address: {gateway}\n  caFile: {}\n", ca.display()),
        );
    if join {
        std::fs::write(agent_dir.join("join-token"), secret).expect("join token file");
        text = text.replace("tokenFile: token\n", "joinTokenFile: join-token\n");
    }
    std::fs::write(&config, text).expect("agent config");
    config
}

pub fn start_agent(config: &Path, name: &str) -> Process {
    let mut command = Command::new(binary("cluster-agent"));
    command.arg("--config").arg(config);
    Process::start(command, &format!("cluster-agent {name}"), START).expect("agent starts")
}

/// `kubectl get KIND NAME -o json`, parsed.
pub fn get_json(k: &Kubectl, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = k.run(&all);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The status entry of `cluster` in a FederatedIngress.
pub fn cluster_entry(ingress: &Value, cluster: &str) -> Value {
    ingress["status"]["clusters"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["name"] == cluster))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The status of condition `type_` ("True"/"False"/"") of an object.
pub fn condition(object: &Value, type_: &str) -> (String, String, String) {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .unwrap_or_default()
}
