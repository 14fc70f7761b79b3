//! One cluster with two IngressPools on a LAN of network namespaces, run by the real hub
//! (issue 24): what the pools end-to-end test (`tests/tests/e2e/pools_hub.rs`) and the
//! pool benchmarks (`bench/src/bin/pool-move-bench.rs`) run against.
//!
//! ```text
//!   h1 10.0.0.1 rack=r1 ┐                 pool gold   (memberSelector rack=r1, tier=gold)
//!   h2 10.0.0.2 rack=r1 ┤                 pool silver (memberSelector rack=r2, tier=silver)
//!   h3 10.0.0.3 rack=r2 ┼── br0 ──┬ hub 10.0.0.10 (federation-apiserver: API on its
//!   h4 10.0.0.4 rack=r2 ┘         │     127.0.0.1:16443, agent gateway :16444 and DNS :5353
//!                                 │     on 10.0.0.10, TLS with a test CA)
//!                                 └ client 10.0.0.20 (DNS lookups, load, probes)
//! ```
//!
//! - The hub: the client is exempt from DNS response-rate limiting (it resolves many
//!   times a second, as a resolver serving many clients would); Cluster `eu` with `spec.vipCIDR` [`VIP_CIDR`]; the IngressPools `gold` and
//!   `silver` (created in that order, so gold gets [`GOLD_VIP`] and silver
//!   [`SILVER_VIP`]) with [`Options::capacity_connections`]; one agent token per member
//!   (`POST .../clusters/eu/token`).
//! - Each host runs `fedctl dev echo --name hN` (TCP 127.0.0.1:9001, HTTP
//!   127.0.0.1:9080, every answer names the host) and a standalone cluster-agent with
//!   `member: {name, address, labels: {rack}}` and `pools:` (keepalived from the hub's
//!   plan, advertisement [`Options::advert_interval_ms`]), listening on the wildcard.
//! - Ingresses ([`PoolSite::create_ingress`]): HTTP on [`HTTP_PORT`], host and DNS name
//!   `<name>.pools.test`, path `/` → the echo's HTTP, DNS TTL [`Options::ttl`], an
//!   optional `poolSelector`.
//! - REST through curl inside the hub's namespace ([`PoolSite::get`],
//!   [`PoolSite::post`]); DNS ([`PoolSite::resolve`]) and HTTP ([`http_get`]) from the
//!   client; "a host dies" ([`PoolSite::kill_host`]) and "a member freezes"
//!   ([`PoolSite::pause_agent`]).
//!
//! Needs root, iproute2, keepalived and curl ([`PoolSite::unavailable`]). Every process
//! inside every namespace, and the namespaces, go on drop (logs are kept when the test
//! panicked). What does not belong here: assertions.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::netns::{Lan, NetNs};
use crate::{Process, binary};

/// The hosts: name, address, rack label.
pub const HOSTS: [(&str, Ipv4Addr, &str); 4] = [
    ("h1", Ipv4Addr::new(10, 0, 0, 1), "r1"),
    ("h2", Ipv4Addr::new(10, 0, 0, 2), "r1"),
    ("h3", Ipv4Addr::new(10, 0, 0, 3), "r2"),
    ("h4", Ipv4Addr::new(10, 0, 0, 4), "r2"),
];
pub const HUB_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 10);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 20);
/// The hub's DNS server.
pub const DNS: SocketAddr = SocketAddr::new(IpAddr::V4(HUB_IP), 5353);
pub const CLUSTER: &str = "eu";
pub const VIP_CIDR: &str = "10.0.0.96/28";
/// The first free address of [`VIP_CIDR`]: gold's (the older pool).
pub const GOLD_VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 97);
pub const SILVER_VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 98);
/// The ingresses' HTTP port on every member.
pub const HTTP_PORT: u16 = 8080;
pub const ZONE: &str = "pools.test";
const API: &str = "127.0.0.1:16443";
const GROUP: &str = "/apis/fedingress.io/v1alpha1";
const ADMIN_TOKEN: &str = "pools-lab-admin";
const START: Duration = Duration::from_secs(30);

/// The programs a site runs.
#[derive(Clone, Debug)]
pub struct Programs {
    pub apiserver: PathBuf,
    pub cluster_agent: PathBuf,
    pub fedctl: PathBuf,
}

impl Programs {
    /// The test build's ([`crate::binary`]).
    pub fn built() -> Self {
        Programs {
            apiserver: binary("federation-apiserver"),
            cluster_agent: binary("cluster-agent"),
            fedctl: binary("fedctl"),
        }
    }

    /// Those in `dir` (a benchmark's release build).
    pub fn in_dir(dir: &Path) -> Self {
        Programs {
            apiserver: dir.join("federation-apiserver"),
            cluster_agent: dir.join("cluster-agent"),
            fedctl: dir.join("fedctl"),
        }
    }
}

/// Settings of a site.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Both pools' `spec.capacity.connections` (`None`: no capacity).
    pub capacity_connections: Option<u32>,
    /// The members' `pools.advertIntervalMs`.
    pub advert_interval_ms: u32,
    /// The ingresses' `traffic.ttl` (seconds).
    pub ttl: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            capacity_connections: Some(20),
            advert_interval_ms: 100,
            ttl: 1,
        }
    }
}

/// The LAN, the hub and the hosts (see the module docs).
pub struct PoolSite {
    programs: Programs,
    options: Options,
    keepalived: PathBuf,
    hub: Option<Process>,
    agents: BTreeMap<String, Option<Process>>,
    echoes: BTreeMap<String, Option<Process>>,
    // Dropped after the processes: namespaces last.
    lan: Lan,
    dir: tempfile::TempDir,
}

impl PoolSite {
    /// Why a site cannot run here, or `None`.
    pub fn unavailable() -> Option<String> {
        if let Some(why) = crate::vrrp::Site::unavailable() {
            return Some(why);
        }
        if Command::new("curl").arg("--version").output().is_err() {
            return Some("curl is not installed".into());
        }
        None
    }

    /// Creates the LAN (namespaces `fedingress-<tag>-*`), starts the hub, creates the
    /// Cluster and both pools, and starts every host; returns once every member is
    /// connected and each pool's VIP is held by its first member.
    pub fn start(tag: &str, programs: Programs, options: Options) -> anyhow::Result<PoolSite> {
        let keepalived = crate::vrrp::keepalived().context("keepalived is not installed")?;
        let hub_cidr = format!("{HUB_IP}/24");
        let client_cidr = format!("{CLIENT_IP}/24");
        let host_cidrs: Vec<String> = HOSTS.iter().map(|(_, a, _)| format!("{a}/24")).collect();
        let mut names: Vec<(&str, &str)> = HOSTS
            .iter()
            .zip(&host_cidrs)
            .map(|((n, _, _), c)| (*n, c.as_str()))
            .collect();
        names.push(("hub", &hub_cidr));
        names.push(("client", &client_cidr));
        let lan = Lan::create(tag, &names)?;
        let dir = tempfile::Builder::new()
            .prefix("fedingress-pools-")
            .tempdir()?;
        let mut site = PoolSite {
            programs,
            options,
            keepalived,
            hub: None,
            agents: BTreeMap::new(),
            echoes: BTreeMap::new(),
            lan,
            dir,
        };
        match site.populate() {
            Ok(()) => Ok(site),
            Err(error) => {
                site.dir.disable_cleanup(true);
                let kept = site.dir.path().display().to_string();
                Err(error.context(format!(
                    "starting the pools site (logs kept in {kept}){}",
                    site.logs()
                )))
            }
        }
    }

    fn populate(&mut self) -> anyhow::Result<()> {
        self.start_hub()?;
        self.post(
            &format!("{GROUP}/clusters"),
            &json!({
                "apiVersion": "fedingress.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": CLUSTER},
                "spec": {"region": "europe-west1", "location": {"latitude": 50.45, "longitude": 3.82},
                         "vipCIDR": VIP_CIDR},
            }),
        )?;
        let capacity = self
            .options
            .capacity_connections
            .map(|c| json!({"connections": c}));
        for (pool, rack) in [("gold", "r1"), ("silver", "r2")] {
            let mut spec =
                json!({"cluster": CLUSTER, "memberSelector": {"matchLabels": {"rack": rack}}});
            if let Some(capacity) = &capacity {
                spec["capacity"] = capacity.clone();
            }
            self.post(
                &format!("{GROUP}/ingresspools"),
                &json!({
                    "apiVersion": "fedingress.io/v1alpha1",
                    "kind": "IngressPool",
                    "metadata": {"name": pool, "labels": {"tier": pool}},
                    "spec": spec,
                }),
            )?;
        }
        for (name, address, rack) in HOSTS {
            let token = self.post(&format!("{GROUP}/clusters/{CLUSTER}/token"), &json!({}))?;
            let token = token["token"]
                .as_str()
                .with_context(|| format!("no token in {token}"))?
                .to_owned();
            self.write_agent_files(name, address, rack, &token)?;
            self.start_echo(name)?;
            self.start_agent(name)?;
        }
        let deadline = Instant::now() + START;
        loop {
            let gold = self.holders(GOLD_VIP);
            let silver = self.holders(SILVER_VIP);
            let ready = self.get(&format!("{GROUP}/clusters/{CLUSTER}"))?["status"]["readyMembers"]
                .as_u64();
            if gold == ["h1"] && silver == ["h3"] && ready == Some(4) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "after {START:?}: gold's VIP on {gold:?}, silver's on {silver:?}, ready members {ready:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn start_hub(&mut self) -> anyhow::Result<()> {
        let dir = self.dir.path();
        let tokens = dir.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!("{ADMIN_TOKEN},admin,1,\"fedingress:admins\"\n"),
        )?;
        crate::TestPki::generate_with_ips(&[HUB_IP.into()]).write(dir);
        let config = dir.join("apiserver.yaml");
        std::fs::write(
            &config,
            format!(
                "listen: {API}\nagentListen: {HUB_IP}:16444\ntls: {{certFile: {cert}, keyFile: {key}}}\ndataDir: {data}\ntokenFile: {tokens}\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\ndns:\n  listen: {DNS}\n  zones:\n  - name: {ZONE}\n    nameservers: [ns1.{ZONE}]\n    soa: {{mname: ns1.{ZONE}, rname: hostmaster.{ZONE}, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}\n  locations:\n    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}\n  rrl: {{exempt: ['{CLIENT_IP}/32']}}\n",
                data = dir.join("hub-data").display(),
                tokens = tokens.display(),
                cert = dir.join("tls.crt").display(),
                key = dir.join("tls.key").display(),
            ),
        )?;
        let mut command = self.lan.host("hub").command(&self.programs.apiserver);
        command.arg("--config").arg(&config);
        let log = self.hub_log_path();
        self.hub = Some(
            Process::start_logging_to(command, "federation-apiserver", START, &log)
                .with_context(|| format!("its log ends:\n{}", tail(&log, 20)))?,
        );
        Ok(())
    }

    fn write_agent_files(
        &self,
        name: &str,
        address: Ipv4Addr,
        rack: &str,
        token: &str,
    ) -> anyhow::Result<()> {
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("token"), token)?;
        std::fs::write(
            dir.join("agent.yaml"),
            format!(
                "\
hub: {{address: 'https://{HUB_IP}:16444', caFile: '{ca}'}}
cluster: {CLUSTER}
tokenFile: token
driver: standalone
listen: [{{bind: 0.0.0.0, advertise: {address}}}]
services: {{web: ['127.0.0.1:9080']}}
healthCheck: {{intervalMs: 200, timeoutMs: 500, healthyThreshold: 1, unhealthyThreshold: 2, http: {{path: /healthz}}}}
stateDir: state
admin: 127.0.0.1:9901
reportIntervalMs: 1000
member: {{name: {name}, address: {address}, labels: {{rack: {rack}}}}}
pools:
  interface: {dev}
  advertIntervalMs: {advert}
  keepalived: {{command: '{keepalived}'}}
",
                ca = self.dir.path().join("ca.crt").display(),
                dev = Lan::HOST_DEV,
                advert = self.options.advert_interval_ms,
                keepalived = self.keepalived.display(),
            ),
        )?;
        Ok(())
    }

    fn start_echo(&mut self, name: &str) -> anyhow::Result<()> {
        let mut command = self.lan.host(name).command(&self.programs.fedctl);
        command.args([
            "dev",
            "echo",
            "--name",
            name,
            "--listen",
            "127.0.0.1:9001",
            "--http",
            "127.0.0.1:9080",
        ]);
        let echo = Process::start(command, &format!("echo {name}"), START)?;
        self.echoes.insert(name.to_owned(), Some(echo));
        Ok(())
    }

    /// Starts `name`'s agent (again, with its files as they are).
    pub fn start_agent(&mut self, name: &str) -> anyhow::Result<()> {
        let dir = self.dir.path().join(name);
        let mut command = self.lan.host(name).command(&self.programs.cluster_agent);
        command.arg("--config").arg(dir.join("agent.yaml"));
        let log = dir.join("agent.log");
        let agent =
            Process::start_logging_to(command, &format!("cluster-agent {name}"), START, &log)
                .with_context(|| format!("{name}: {}", tail(&log, 20)))?;
        self.agents.insert(name.to_owned(), Some(agent));
        Ok(())
    }

    /// The namespace of a host, `hub` or `client`.
    pub fn ns(&self, name: &str) -> &NetNs {
        self.lan.host(name)
    }

    /// The site's directory: configs, logs (`hub.log`, `hN/agent.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn hub_log_path(&self) -> PathBuf {
        self.dir.path().join("hub.log")
    }

    /// The hub's log so far.
    pub fn hub_log(&self) -> String {
        std::fs::read_to_string(self.hub_log_path()).unwrap_or_default()
    }

    /// The agent process of `name`, while it runs.
    pub fn agent(&self, name: &str) -> Option<&Process> {
        self.agents.get(name).and_then(Option::as_ref)
    }

    /// Which hosts hold `vip` now.
    pub fn holders(&self, vip: Ipv4Addr) -> Vec<&'static str> {
        HOSTS
            .iter()
            .map(|(name, _, _)| *name)
            .filter(|name| self.lan.host(name).has_address(IpAddr::V4(vip)))
            .collect()
    }

    /// curl inside the hub's namespace: `method path` with `body`; the parsed answer.
    fn curl(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let mut command = self.lan.host("hub").command("curl");
        command.args([
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            &self.dir.path().join("ca.crt").display().to_string(),
            "-H",
            &format!("Authorization: Bearer {ADMIN_TOKEN}"),
            "-X",
            method,
        ]);
        if let Some(body) = body {
            command.args([
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &body.to_string(),
            ]);
        }
        command.arg(format!("https://{API}{path}"));
        let out = command.output().context("running curl")?;
        if !out.status.success() {
            bail!(
                "curl {method} {path}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "curl {method} {path} answered {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `GET path` (e.g. `/apis/fedingress.io/v1alpha1/ingresspools/gold`).
    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.curl("GET", path, None)
    }

    /// `POST path` with `body`; fails on a Status other than success.
    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let answer = self.curl("POST", path, Some(body))?;
        if answer["kind"] == "Status" && answer["status"] == "Failure" {
            bail!("POST {path}: {answer}");
        }
        Ok(answer)
    }

    /// The IngressPool `name`.
    pub fn pool(&self, name: &str) -> anyhow::Result<Value> {
        self.get(&format!("{GROUP}/ingresspools/{name}"))
    }

    /// The Cluster `eu`.
    pub fn cluster(&self) -> anyhow::Result<Value> {
        self.get(&format!("{GROUP}/clusters/{CLUSTER}"))
    }

    /// The FederatedIngress `default/<name>`.
    pub fn ingress(&self, name: &str) -> anyhow::Result<Value> {
        self.get(&format!(
            "{GROUP}/namespaces/default/federatedingresses/{name}"
        ))
    }

    /// Creates the HTTP ingress `name` (host and DNS name [`dns_name`]) with `selector`
    /// as its `poolSelector.matchLabels` (`None`: any pool).
    pub fn create_ingress(&self, name: &str, selector: Option<(&str, &str)>) -> anyhow::Result<()> {
        let mut spec = json!({
            "rules": [{"protocol": "HTTP", "host": dns_name(name), "port": HTTP_PORT,
                       "paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": "web", "port": 9080}}]}],
            "traffic": {"dnsName": dns_name(name), "ttl": self.options.ttl},
        });
        if let Some((key, value)) = selector {
            spec["placement"] = json!({"poolSelector": {"matchLabels": {key: value}}});
        }
        self.post(
            &format!("{GROUP}/namespaces/default/federatedingresses"),
            &json!({
                "apiVersion": "fedingress.io/v1alpha1",
                "kind": "FederatedIngress",
                "metadata": {"name": name, "namespace": "default"},
                "spec": spec,
            }),
        )?;
        Ok(())
    }

    /// The A records the hub's DNS answers for `name` now, asked from the client.
    pub fn resolve(&self, name: &str) -> anyhow::Result<Vec<IpAddr>> {
        let name = name.to_owned();
        self.lan
            .host("client")
            .run_inside(move || resolve_a(DNS, &name, Duration::from_secs(1)))?
    }

    /// The host kills: its cable out, then every process inside SIGKILLed.
    pub fn kill_host(&mut self, name: &str) -> anyhow::Result<()> {
        self.lan.unplug(name, true)?;
        self.lan.host(name).kill_all()?;
        self.agents.insert(name.to_owned(), None);
        self.echoes.insert(name.to_owned(), None);
        Ok(())
    }

    /// Brings a dead host back: VIPs it still had removed (as a reboot would), cable
    /// in, echo and agent started.
    pub fn revive_host(&mut self, name: &str) -> anyhow::Result<()> {
        let ns = self.lan.host(name);
        for vip in [GOLD_VIP, SILVER_VIP] {
            if ns.has_address(IpAddr::V4(vip)) {
                ns.ip(&["addr", "del", &format!("{vip}/28"), "dev", Lan::HOST_DEV])?;
            }
        }
        self.lan.unplug(name, false)?;
        self.start_echo(name)?;
        self.start_agent(name)
    }

    /// SIGSTOP `name`'s agent (keepalived runs on; its track script fails).
    pub fn pause_agent(&self, name: &str) {
        if let Some(agent) = self.agent(name) {
            agent.pause();
        }
    }

    /// SIGCONT after [`PoolSite::pause_agent`].
    pub fn resume_agent(&self, name: &str) {
        if let Some(agent) = self.agent(name) {
            agent.resume();
        }
    }

    /// The last lines of the hub's and every agent's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut text = format!("\n--- hub log (end):\n{}", tail(&self.hub_log_path(), 30));
        for (name, _, _) in HOSTS {
            let log = self.dir.path().join(name).join("agent.log");
            if log.exists() {
                text.push_str(&format!(
                    "\n--- {name} agent log (end):\n{}",
                    tail(&log, 15)
                ));
            }
        }
        text
    }
}

impl Drop for PoolSite {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "--- configs and logs kept in {} ---",
                self.dir.path().display()
            );
        }
        // Every process inside (keepalived too), before the namespaces go.
        for name in HOSTS.iter().map(|(n, _, _)| *n).chain(["hub", "client"]) {
            if let Err(error) = self.lan.host(name).kill_all() {
                eprintln!("stopping the processes of {name}: {error:#}");
            }
        }
    }
}

/// The DNS name (and HTTP host) of ingress `name`.
pub fn dns_name(name: &str) -> String {
    format!("{name}.{ZONE}")
}

/// One A query for `name` to `server` over UDP: the addresses answered (sorted).
pub fn resolve_a(server: SocketAddr, name: &str, timeout: Duration) -> anyhow::Result<Vec<IpAddr>> {
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.set_read_timeout(Some(timeout))?;
    let id: u16 = rand_id();
    let mut query = Vec::with_capacity(64);
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len()).context("label too long")?;
        query.push(len);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&query, server)?;
    let mut buf = [0u8; 1500];
    loop {
        let (n, _) = socket
            .recv_from(&mut buf)
            .with_context(|| format!("no answer from {server} for {name}"))?;
        let (answer_id, outcome) =
            crate::dnsprobe::parse_response(&buf[..n]).map_err(anyhow::Error::msg)?;
        if answer_id != id {
            continue;
        }
        return match outcome {
            crate::dnsprobe::Outcome::Response {
                rcode: 0,
                truncated: false,
                addresses,
                ..
            } => Ok(addresses),
            other => bail!("{name}: {other:?}"),
        };
    }
}

fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    (nanos ^ (nanos >> 16)) as u16
}

/// `GET /` with `Host: host` to `addr` over a new connection (HTTP/1.1, close; each
/// step within `timeout`): the body's first line (`h1: GET / (host ...)`).
pub fn http_get(addr: SocketAddr, host: &str, timeout: Duration) -> Result<String, String> {
    let stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    http_on(stream, addr, host, timeout)
}

/// [`http_get`] on a connected `stream`.
fn http_on(
    mut stream: TcpStream,
    addr: SocketAddr,
    host: &str,
    timeout: Duration,
) -> Result<String, String> {
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .map_err(|e| format!("write {addr}: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read {addr}: {e}"))?;
    let status = response.lines().next().unwrap_or_default().to_owned();
    if !status.contains(" 200 ") {
        return Err(format!("{addr} answered {status:?}"));
    }
    response
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| body.lines().next())
        .map(str::to_owned)
        .ok_or_else(|| format!("{addr}: no body"))
}

/// The last `lines` lines of a file.
fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What a [`ClientLoop`] saw.
#[derive(Clone, Debug, Default)]
pub struct ClientReport {
    /// Requests answered 200.
    pub ok: usize,
    /// Failed lookups and requests: when (since the start) and why.
    pub failures: Vec<String>,
    /// The addresses DNS answered, each change once, in order.
    pub answers: Vec<IpAddr>,
    /// Every TCP connect's duration.
    pub connect_times: Vec<Duration>,
}

/// Clients in the client's namespace that resolve an ingress through the hub's DNS and
/// fetch `/` from what it answers, continuously, one new connection per request, each
/// on a thread of its own; with `keep_for` above zero a thread reuses an answer that
/// long (a caching resolver honouring the TTL).
pub struct ClientLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answers: std::sync::Arc<std::sync::Mutex<Vec<IpAddr>>>,
    threads: Vec<std::thread::JoinHandle<anyhow::Result<ClientReport>>>,
}

impl ClientLoop {
    /// Starts `threads` clients of ingress `name`.
    pub fn start(
        site: &PoolSite,
        name: &str,
        threads: usize,
        keep_for: Duration,
    ) -> anyhow::Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for _ in 0..threads {
            let (flag, seen) = (stop.clone(), answers.clone());
            let host = dns_name(name);
            handles.push(site.ns("client").spawn_inside(move || {
                let mut report = ClientReport::default();
                let since = Instant::now();
                let mut cached: Option<(Instant, IpAddr)> = None;
                while !flag.load(Ordering::Relaxed) {
                    let ip = match cached {
                        Some((at, ip)) if at.elapsed() < keep_for => ip,
                        _ => match resolve_a(DNS, &host, Duration::from_secs(1)) {
                            Ok(ips) if !ips.is_empty() => {
                                let ip = ips[0];
                                cached = Some((Instant::now(), ip));
                                if let Ok(mut seen) = seen.lock()
                                    && seen.last() != Some(&ip)
                                {
                                    seen.push(ip);
                                }
                                ip
                            }
                            other => {
                                let why = match other {
                                    Ok(_) => "no address".to_owned(),
                                    Err(e) => format!("{e:#}"),
                                };
                                report
                                    .failures
                                    .push(format!("{:?}: DNS {why}", since.elapsed()));
                                std::thread::sleep(Duration::from_millis(20));
                                continue;
                            }
                        },
                    };
                    let addr = SocketAddr::new(ip, HTTP_PORT);
                    let started = Instant::now();
                    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                        Ok(stream) => {
                            report.connect_times.push(started.elapsed());
                            match http_on(stream, addr, &host, Duration::from_secs(2)) {
                                Ok(_) => report.ok += 1,
                                Err(e) => {
                                    report.failures.push(format!("{:?}: {e}", since.elapsed()))
                                }
                            }
                        }
                        Err(e) => report
                            .failures
                            .push(format!("{:?}: connect {addr}: {e}", since.elapsed())),
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                report
            })?);
        }
        Ok(ClientLoop {
            stop,
            answers,
            threads: handles,
        })
    }

    /// The addresses DNS answered so far (each change once, over all threads).
    pub fn answers(&self) -> Vec<IpAddr> {
        self.answers.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Stops every thread; what they saw, together (connect times unsorted).
    pub fn finish(self) -> anyhow::Result<ClientReport> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all = ClientReport::default();
        for thread in self.threads {
            let report = thread
                .join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
            all.ok += report.ok;
            all.failures.extend(report.failures);
            all.connect_times.extend(report.connect_times);
        }
        all.answers = self.answers.lock().map(|a| a.clone()).unwrap_or_default();
        Ok(all)
    }
}

/// `wrk` in the client's namespace: `connections` keep-alive connections on one thread
/// for up to `seconds`, `GET /` with the Host of ingress `name`, at `vip`.
pub fn wrk(
    site: &PoolSite,
    name: &str,
    connections: u32,
    vip: Ipv4Addr,
    seconds: u32,
) -> anyhow::Result<Process> {
    let mut command = site.ns("client").command("wrk");
    command.args([
        "-t1",
        &format!("-c{connections}"),
        &format!("-d{seconds}s"),
        "--timeout",
        "5s",
        "-H",
        &format!("Host: {}", dns_name(name)),
        &format!("http://{vip}:{HTTP_PORT}/"),
    ]);
    Process::spawn(command, &format!("wrk {name}"))
}

/// Whether `wrk` is installed (Debian: wrk).
pub fn wrk_installed() -> bool {
    Command::new("wrk").arg("--version").output().is_ok()
}
