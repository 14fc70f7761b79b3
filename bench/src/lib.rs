//! Shared plumbing of the fedingress benchmarks: starting the release binaries (found
//! next to the bench executable) and stopping them by PID, a small REST client, and the
//! statistics and `/proc` readings the benches print. The echo backend and the waits are
//! `fedingress_testsupport`'s.
//!
//! Benchmarks print numbers; they assert nothing about timing. What does not belong
//! here: tests (assertions go in the crates' tests and `tests/`) and helpers the tests
//! share (`fedingress-testsupport`).
//!
//! Modules: [`sim_agent`], a simulated cluster agent on the real protocol; [`etcd`], real
//! etcd members and what they wrote; [`replicas`], several apiserver replicas on one
//! etcd (or one on redb), to kill and restart; [`authz`], authorization at scale
//! (`apiserver-bench --authz`); [`apply`], server-side apply and managedFields
//! (`apiserver-bench --apply`); [`dnscommon`], what the DNS benches share. The benches
//! themselves are the binaries in `src/bin/`.

pub mod apply;
pub mod authz;
pub mod dnscommon;
pub mod etcd;
pub mod replicas;
pub mod sim_agent;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

pub const GROUP_PATH: &str = "/apis/fedingress.io/v1alpha1";

/// A sibling binary of this executable (`target/release/<name>`), unless `given`.
pub fn sibling(given: Option<PathBuf>, name: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        return Ok(path);
    }
    let path = std::env::current_exe()?
        .parent()
        .context("bench binary has a directory")?
        .join(name);
    if !path.exists() {
        bail!(
            "{} not found: run `cargo build --release --workspace --bins` first (or pass its path)",
            path.display()
        );
    }
    Ok(path)
}

/// A child process started by a bench; stopped by PID ([`Proc::stop`]), and SIGKILLed
/// on drop if still running (error paths).
pub struct Proc {
    pub child: tokio::process::Child,
    pub pid: u32,
    pub name: String,
    /// The JSON of its `READY` line (Null for processes without one).
    pub ready: Value,
}

impl Proc {
    /// Starts `command` and waits up to 30 s for its `READY {json}` line on stdout; the
    /// rest of stdout is drained in the background. stderr is inherited.
    pub async fn start_ready(command: Command, name: &str) -> anyhow::Result<Self> {
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id().context("child pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(json) = line.strip_prefix("READY ") {
                    return Ok::<_, anyhow::Error>(Some(json.to_string()));
                }
            }
            Ok(None)
        })
        .await;
        let json = match first {
            Ok(Ok(Some(json))) => json,
            other => {
                let _ = child.kill().await;
                bail!("{name} printed no READY line within 30 s ({other:?})");
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            pid,
            name: name.to_string(),
            ready: serde_json::from_str(&json).context("parsing the READY line")?,
        })
    }

    /// Starts `command` with stdout and stdin closed (no READY line expected).
    pub fn start_plain(command: Command, name: &str) -> anyhow::Result<Self> {
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id().context("child pid")?;
        Ok(Self {
            child,
            pid,
            name: name.to_string(),
            ready: Value::Null,
        })
    }

    /// An address of the READY line, e.g. `addr("api")`.
    pub fn addr(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap_or_default().to_string()
    }

    /// SIGKILL to its PID (a crash: nothing is cleaned up); reaps it.
    pub async fn kill9(mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.pid.to_string()])
            .status();
        let _ = self.child.wait().await;
    }

    /// SIGTERM to its PID, wait up to 10 s, then SIGKILL; reaps it.
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
            Ok(Ok(status)) if !status.success() => {
                eprintln!(
                    "{} (pid {}) exited after SIGTERM with {status}",
                    self.name, self.pid
                );
            }
            Ok(_) => {}
            Err(_) => {
                eprintln!(
                    "{} (pid {}) ignored SIGTERM for 10 s: SIGKILL",
                    self.name, self.pid
                );
                let _ = self.child.kill().await;
            }
        }
    }
}

/// Agent session settings of the hub.
#[derive(Clone, Copy, Debug)]
pub struct HubTiming {
    pub heartbeat_ms: u64,
    pub lease_ms: u64,
}

/// The release `federation-apiserver`: `--dev`, a fresh temp data dir, a config file
/// with both listeners on `ip`:0 and the given agent timing.
pub struct Apiserver {
    pub proc: Proc,
    /// `http://ip:port` of the REST API.
    pub api: String,
    /// `host:port` of the agent gateway.
    pub agent: String,
    _dir: tempfile::TempDir,
}

impl Apiserver {
    pub async fn start(binary: &Path, ip: &str, timing: HubTiming) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("apiserver.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: {ip}:0\nagentListen: {ip}:0\ndev: true\nagents:\n  heartbeatIntervalMs: {}\n  leaseMs: {}\n",
                timing.heartbeat_ms, timing.lease_ms
            ),
        )?;
        let mut command = Command::new(binary);
        command
            .arg("--config")
            .arg(&config)
            .arg("--dev")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("FEDINGRESS_LOG", "warn");
        let proc = Proc::start_ready(command, "federation-apiserver").await?;
        Ok(Self {
            api: format!("http://{}", proc.addr("api")),
            agent: proc.addr("agent"),
            proc,
            _dir: dir,
        })
    }
}

/// The body that creates core/v1 Namespace `name`.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A small JSON REST client for the apiserver.
#[derive(Clone)]
pub struct Api {
    pub client: reqwest::Client,
    pub base: String,
}

impl Api {
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        Ok(Self {
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(256)
                .build()?,
            base: base.to_string(),
        })
    }

    /// Sends `method path` (with `build` adding a body); the answer when it is a
    /// success, its status and text as the error otherwise.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> anyhow::Result<reqwest::Response> {
        let request = self
            .client
            .request(method.clone(), format!("{}{path}", self.base));
        let response = build(request).send().await?;
        let status = response.status();
        if !status.is_success() {
            bail!("{method} {path}: {status} {}", response.text().await?);
        }
        Ok(response)
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self.call(reqwest::Method::GET, path, |r| r).await?;
        Ok(response.json().await?)
    }

    pub async fn post(&self, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let response = self
            .call(reqwest::Method::POST, path, |r| match body {
                Some(body) => r.json(body),
                None => r,
            })
            .await?;
        Ok(response.json().await?)
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<()> {
        self.call(reqwest::Method::DELETE, path, |r| r).await?;
        Ok(())
    }

    /// A JSON merge patch.
    pub async fn merge_patch(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .call(reqwest::Method::PATCH, path, |r| {
                r.header("content-type", "application/merge-patch+json")
                    .body(body.to_string())
            })
            .await?;
        Ok(response.json().await?)
    }

    /// Creates namespace `name` (the apiserver refuses objects in a namespace that does
    /// not exist); one that exists already is fine.
    pub async fn create_namespace(&self, name: &str) -> anyhow::Result<()> {
        let body = namespace(name);
        let response = self
            .client
            .post(format!("{}/api/v1/namespaces", self.base))
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() && status != reqwest::StatusCode::CONFLICT {
            bail!(
                "creating namespace {name}: {status} {}",
                response.text().await?
            );
        }
        Ok(())
    }

    /// Creates a Cluster.
    pub async fn create_cluster(
        &self,
        name: &str,
        region: &str,
        lat: f64,
        lon: f64,
    ) -> anyhow::Result<()> {
        let body = json!({
            "apiVersion": "fedingress.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "labels": {"bench": "yes"}},
            "spec": {"region": region, "location": {"latitude": lat, "longitude": lon}}
        });
        self.post(&format!("{GROUP_PATH}/clusters"), Some(&body))
            .await?;
        Ok(())
    }

    /// Issues an agent token for a cluster.
    pub async fn issue_token(&self, cluster: &str) -> anyhow::Result<String> {
        let answer = self
            .post(&format!("{GROUP_PATH}/clusters/{cluster}/token"), None)
            .await?;
        Ok(answer["token"]
            .as_str()
            .context("token in the answer")?
            .to_string())
    }
}

/// The release `cluster-agent` (standalone driver) for one cluster.
pub struct AgentSpec<'a> {
    pub cluster: &'a str,
    pub token: &'a str,
    /// `host:port` of the hub's agent gateway, one per replica (`hub.addresses`).
    pub hubs: &'a [String],
    pub bind: &'a str,
    /// Endpoints of the `echo` service.
    pub echo: &'a [SocketAddr],
    /// Extra YAML appended to the config (e.g. a `healthCheck` block).
    pub extra: &'a str,
}

pub struct Agent {
    pub proc: Proc,
    /// Config, token and state; remove it only after the agent stopped.
    pub dir: tempfile::TempDir,
}

impl Agent {
    pub async fn start(binary: &Path, spec: &AgentSpec<'_>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("token"), spec.token)?;
        let endpoints = spec
            .echo
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let hubs = spec
            .hubs
            .iter()
            .map(|h| format!("http://{h}"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = dir.path().join("agent.yaml");
        std::fs::write(
            &config,
            format!(
                "hub:\n  addresses: [{hubs}]\ncluster: {cluster}\ntokenFile: token\ndriver: standalone\nlisten:\n- bind: \"{bind}\"\nservices:\n  echo: [{endpoints}]\nstateDir: state\nadmin: 127.0.0.1:0\n{extra}",
                cluster = spec.cluster,
                bind = spec.bind,
                extra = spec.extra,
            ),
        )?;
        let mut command = Command::new(binary);
        // error only: the benches make endpoints unhealthy on purpose.
        command
            .arg("--config")
            .arg(&config)
            .env("FEDINGRESS_LOG", "error");
        let proc = Proc::start_ready(command, &format!("cluster-agent {}", spec.cluster)).await?;
        Ok(Self { proc, dir })
    }
}

/// A FederatedIngress with the given `(protocol, port)` rules to service `echo`.
pub fn ingress(name: &str, rules: &[(&str, u16)], backend_port: u16) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|(protocol, port)| {
            json!({"protocol": protocol, "port": port, "backend": {"service": "echo", "port": backend_port}})
        })
        .collect();
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name},
        "spec": {"rules": rules, "traffic": {"dnsName": format!("{name}.bench.test")}}
    })
}

// --- numbers ---------------------------------------------------------------------------

/// The `p` quantile (0..=1, nearest rank) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `p50 X, p99 Y, max Z (n)` of unsorted durations.
pub fn summary(values: &[Duration]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort();
    format!(
        "p50 {}, p99 {}, max {} (n={})",
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.99)),
        ms(percentile(&sorted, 1.0)),
        sorted.len()
    )
}

/// A markdown table of several setups measured in one run: per row, p50 / p99 of each
/// setup's durations and, after the first setup, the ratio against the first (> 1 is
/// slower). `rows` holds a name and one list of durations per setup, in `labels`'
/// order; a row whose first list is empty is left out.
pub fn print_ratio_table(labels: &[String], rows: &[(&str, Vec<&[Duration]>)]) {
    let quantiles = |values: &[Duration]| {
        let mut sorted = values.to_vec();
        sorted.sort();
        (percentile(&sorted, 0.5), percentile(&sorted, 0.99))
    };
    let ratio = |a: Duration, b: Duration| {
        if b.is_zero() {
            "—".to_string()
        } else {
            format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64())
        }
    };
    let mut header = String::from("| what |");
    let mut rule = String::from("|---|");
    for (i, label) in labels.iter().enumerate() {
        header.push_str(&format!(" {label} p50 / p99 |"));
        rule.push_str("---|");
        if i > 0 {
            header.push_str(" ratio p50 / p99 |");
            rule.push_str("---|");
        }
    }
    println!();
    println!("{header}");
    println!("{rule}");
    for (name, setups) in rows {
        let Some(first) = setups.first().filter(|first| !first.is_empty()) else {
            continue;
        };
        let (base50, base99) = quantiles(first);
        let mut line = format!("| {name} |");
        for (i, values) in setups.iter().enumerate() {
            let (p50, p99) = quantiles(values);
            line.push_str(&format!(" {} / {} |", ms(p50), ms(p99)));
            if i > 0 {
                line.push_str(&format!(
                    " {} / {} |",
                    ratio(p50, base50),
                    ratio(p99, base99)
                ));
            }
        }
        println!("{line}");
    }
}

/// VmRSS of a process, MiB.
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS not found")?;
    Ok(kib / 1024.0)
}

/// utime + stime of a process (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime is field 14, stime 15 (1-based): indices 11 and 12 of `rest`.
    let utime: u64 = fields.get(11).context("utime")?.parse()?;
    let stime: u64 = fields.get(12).context("stime")?.parse()?;
    Ok(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 if that fails).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Measures CPU use of processes over a window: start it, do the work, then `finish`.
pub struct CpuWindow {
    pids: Vec<u32>,
    start: Vec<u64>,
    started: Instant,
}

impl CpuWindow {
    pub fn start(pids: &[u32]) -> Self {
        Self {
            pids: pids.to_vec(),
            start: pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).collect(),
            started: Instant::now(),
        }
    }

    /// CPU use of each process as % of one core over the window.
    pub fn finish(&self) -> Vec<f64> {
        let seconds = self.started.elapsed().as_secs_f64();
        let hz = clock_ticks();
        self.pids
            .iter()
            .zip(&self.start)
            .map(|(pid, start)| {
                let end = cpu_ticks(*pid).unwrap_or(*start);
                (end.saturating_sub(*start)) as f64 / hz / seconds * 100.0
            })
            .collect()
    }
}

/// A flag tasks poll to stop.
#[derive(Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The 1-minute load average (`/proc/loadavg`), for the report.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .unwrap_or_default()
}

/// Today's date as the machine says it (`date -u +%F`), for the report.
pub fn today() -> String {
    Command::new("date")
        .args(["-u", "+%F"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
