//! An anycast network in namespaces, for the BGP end-to-end test (`tests/anycast.rs`) and
//! `anycast-bench`: a router, two sites and a client, each a network namespace of its
//! own, with the real binaries.
//!
//! ```text
//!   site-a 10.0.1.2 ──veth── 10.0.1.1 ┐
//!   (echo, agent+gobgpd)              │ router: BIRD or FRR (route reflector + FIB),
//!   site-b 10.0.2.2 ──veth── 10.0.2.1 ┤ federation-apiserver (API 127.0.0.1:16443,
//!   (echo, agent+gobgpd)              │ agent gateway and DNS on 10.0.9.1; TLS)
//!   client 10.0.3.2 ──veth── 10.0.3.1 ┘
//! ```
//!
//! - The router runs BIRD 2 ([`AnycastLab::start`]) or FRR 8
//!   ([`AnycastLab::start_with`], [`RouterKind::Frr`]: docs/anycast.md's iBGP config
//!   block, [`frr_config`]) in iBGP AS 65000 with both sites as route reflector clients
//!   and puts the best path into its FIB (BIRD's `protocol kernel`, FRR's zebra), so
//!   the client's packets to the anycast address [`ANYCAST`] go where BGP says. It
//!   prefers site-a (local_pref 200 on import from site-a): in a real network "nearest"
//!   is the router's preference, as an IGP metric would give it; here it is configured. BIRD reflects each site's path
//!   to the other ([`LabOptions::reflect`], on by default); FRR runs the docs' config,
//!   which sends the sites nothing.
//! - Each site runs `fedctl dev echo` (every answer names the site) on 127.0.0.1:9000
//!   and a standalone cluster-agent whose `anycast:` section runs a managed gobgpd
//!   that listens on [`AGENT_BGP_PORT`] for the router, which connects within a second
//!   (docs/anycast.md, "Router configuration"; the gobgpd also connects out), puts the
//!   anycast address on `lo` and announces it with the site's community while the
//!   share is healthy; health checks every 200 ms.
//! - The hub serves one FederatedIngress `anycast` (TCP [`PORT`], strategy Anycast)
//!   placed on both sites and, with [`LabOptions::unicast`], `unicast` (TCP
//!   [`UNICAST_PORT`], Failover site-a then site-b, name [`UNICAST_NAME`]) on the same
//!   backends, for comparing DNS with BGP.
//!
//! Everything is removed on drop, also when a test fails: every process inside every
//! namespace is killed, then the namespaces go (configs and logs stay when it failed). What
//! does not belong here: the routers themselves (`crate::bgp`), assertions.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::bgp::{Bird, BirdConfig, BirdNeighbor, Frr, RibPath, RibReader, Router, RouterKind};
use crate::netns::NetNs;
use crate::{Process, binary, kubectl_path};

/// The anycast address of the `anycast` ingress.
pub const ANYCAST: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 10);
/// Its host route, as the routers name it.
pub const ANYCAST_PREFIX: &str = "10.255.0.10/32";
/// TCP port of the `anycast` ingress.
pub const PORT: u16 = 7777;
/// TCP port of the `unicast` ingress.
pub const UNICAST_PORT: u16 = 7778;
/// DNS name of the `unicast` ingress.
pub const UNICAST_NAME: &str = "uni.fedingress.test";
/// The hub's agent gateway and DNS server address (on the router's `lo`).
pub const HUB_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 9, 1);
/// The hub's DNS server.
pub const DNS: SocketAddr = SocketAddr::new(IpAddr::V4(HUB_IP), 5353);
const ASN: u32 = 65000;
/// The port the agents' gobgpd listen on for the router (`anycast.listenPort`: a high
/// port needs no privilege).
pub const AGENT_BGP_PORT: u16 = 1790;
const API: &str = "127.0.0.1:16443";
/// The bearer token of the hub's admin (kubectl, curl).
const ADMIN_TOKEN: &str = "anycast-lab-admin";
const START: Duration = Duration::from_secs(30);

/// The programs the lab runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub apiserver: PathBuf,
    pub agent: PathBuf,
    pub fedctl: PathBuf,
    pub kubectl: PathBuf,
}

impl Binaries {
    /// The workspace's binaries as the tests find them ([`crate::binary`]) and kubectl
    /// from `PATH`.
    pub fn of_tests() -> Binaries {
        Binaries {
            apiserver: binary("federation-apiserver"),
            agent: binary("cluster-agent"),
            fedctl: binary("fedctl"),
            kubectl: kubectl_path(None),
        }
    }
}

/// What the lab sets up beyond the `anycast` ingress.
#[derive(Clone, Copy, Debug)]
pub struct LabOptions {
    /// Also the `unicast` ingress (Failover, DNS) on the same backends.
    pub unicast: bool,
    /// The agents' `healthCheck.intervalMs` (and `timeoutMs`).
    pub health_interval_ms: u64,
    /// The agents' `anycast.withdrawDelayMs`.
    pub withdraw_delay_ms: u64,
    /// The router reflects each site's path to the other site (BIRD `export all`), as
    /// a real route reflector does; otherwise it sends the sites nothing. On by
    /// default: it proves the agent's speaker is announce-only (`reject_imports`).
    /// Without that, site-a's reflected path (local_pref 200) would become site-b's
    /// best path for the same prefix and site-b's gobgpd would withdraw its own route
    /// (a speaker advertises only its best path, and not an iBGP-learnt one to iBGP).
    pub reflect: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            unicast: false,
            health_interval_ms: 200,
            withdraw_delay_ms: 1000,
            reflect: true,
        }
    }
}

/// Why the lab cannot run here with BIRD (not root, no `ip netns`, no bird, gobgpd or
/// kubectl), or `None`.
pub fn unavailable() -> Option<String> {
    unavailable_with(RouterKind::Bird)
}

/// [`unavailable`] with `router` as the router.
pub fn unavailable_with(router: RouterKind) -> Option<String> {
    if let Some(why) = NetNs::unavailable() {
        return Some(why);
    }
    if let Some(why) = router.unavailable() {
        return Some(why);
    }
    if Command::new("gobgpd").arg("--version").output().is_err() {
        return Some("gobgpd is not installed (Debian: apt-get install gobgpd)".into());
    }
    None
}

/// One site: its namespace, echo backend and agent.
pub struct Site {
    /// The cluster's name, `site-a`.
    pub name: String,
    /// The router's name for its session, as in [`RibPath::protocol`]: BIRD's protocol
    /// (`site_a`), FRR's neighbor address (`10.0.1.2`).
    pub protocol: String,
    /// Its address on the link to the router: the agent's listen address and its
    /// routes' next hop.
    pub address: Ipv4Addr,
    /// The community its agent puts on its routes.
    pub community: String,
    agent: Option<Process>,
    backend: Option<Process>,
    config: PathBuf,
    log: PathBuf,
    /// Last: dropped after the processes in it.
    pub ns: NetNs,
}

impl Site {
    /// Whether the agent process runs.
    pub fn agent_running(&mut self) -> bool {
        self.agent.as_mut().is_some_and(Process::is_running)
    }
}

/// The running lab (see the module docs).
pub struct AnycastLab {
    pub sites: Vec<Site>,
    hub: Process,
    router_daemon: Router,
    bins: Binaries,
    kubeconfig: PathBuf,
    pub router: NetNs,
    pub client: NetNs,
    dir: tempfile::TempDir,
}

impl AnycastLab {
    /// Builds the network, starts BIRD, the hub, the backends and the agents, applies
    /// the ingresses, and returns once both sites' paths are in the router's RIB.
    pub fn start(bins: Binaries, options: LabOptions) -> anyhow::Result<AnycastLab> {
        AnycastLab::start_with(bins, options, RouterKind::Bird)
    }

    /// [`AnycastLab::start`] with `router_kind` as the router: BIRD on the rendered
    /// [`BirdConfig`], or FRR on docs/anycast.md's iBGP block ([`frr_config`]; it
    /// ignores [`LabOptions::reflect`]).
    pub fn start_with(
        bins: Binaries,
        options: LabOptions,
        router_kind: RouterKind,
    ) -> anyhow::Result<AnycastLab> {
        let dir = tempfile::Builder::new()
            .prefix("fedingress-anycast-")
            .tempdir()?;
        let router = NetNs::create("bgp-router")?;
        let client = NetNs::create("bgp-client")?;
        router.add_address("lo", &format!("{HUB_IP}/32"))?;
        let sysctl = router
            .command("sysctl")
            .args(["-qw", "net.ipv4.ip_forward=1"])
            .status()
            .context("running sysctl")?;
        if !sysctl.success() {
            bail!("sysctl net.ipv4.ip_forward=1 in the router failed");
        }
        router.veth("c0", &client, "eth0")?;
        router.add_address("c0", "10.0.3.1/30")?;
        client.add_address("eth0", "10.0.3.2/30")?;
        client.ip(&["route", "add", "default", "via", "10.0.3.1"])?;

        let mut sites = Vec::new();
        for (i, letter) in ["a", "b"].into_iter().enumerate() {
            let n = i + 1;
            let ns = NetNs::create(&format!("bgp-site-{letter}"))?;
            let dev = format!("{letter}0");
            router.veth(&dev, &ns, "eth0")?;
            router.add_address(&dev, &format!("10.0.{n}.1/30"))?;
            ns.add_address("eth0", &format!("10.0.{n}.2/30"))?;
            ns.ip(&["route", "add", "default", "via", &format!("10.0.{n}.1")])?;
            let name = format!("site-{letter}");
            sites.push(Site {
                config: dir.path().join(&name).join("agent.yaml"),
                log: dir.path().join(format!("{name}.log")),
                name,
                protocol: match router_kind {
                    RouterKind::Bird => format!("site_{letter}"),
                    RouterKind::Frr => format!("10.0.{n}.2"),
                },
                address: Ipv4Addr::new(10, 0, n as u8, 2),
                community: format!("{ASN}:{}", 100 + n),
                agent: None,
                backend: None,
                ns,
            });
        }

        let router_daemon = match router_kind {
            RouterKind::Bird => Router::Bird(Bird::start(
                &router,
                dir.path(),
                &bird_config(dir.path(), &sites, options.reflect),
            )?),
            RouterKind::Frr => Router::Frr(Frr::start(
                &router,
                dir.path(),
                &frr_config(
                    docs_frr_configs()?
                        .first()
                        .context("docs/anycast.md has no FRR config block")?,
                    &sites,
                )?,
            )?),
        };
        let hub = start_hub(&router, dir.path(), &bins)?;
        let kubeconfig = dir.path().join("kubeconfig");
        crate::write_kubeconfig(
            &kubeconfig,
            &format!("https://{API}"),
            Some(&dir.path().join("ca.crt")),
            Some(ADMIN_TOKEN),
        );
        let mut lab = AnycastLab {
            sites,
            hub,
            router_daemon,
            bins,
            kubeconfig,
            router,
            client,
            dir,
        };
        match lab.populate(&options) {
            Ok(()) => Ok(lab),
            Err(error) => {
                lab.dir.disable_cleanup(true);
                let kept = lab.dir.path().display().to_string();
                Err(error.context(format!("starting the anycast lab (logs kept in {kept})")))
            }
        }
    }

    /// Clusters and ingresses, then per site its token, config, backend and agent; until
    /// both sites' paths are in the RIB.
    fn populate(&mut self, options: &LabOptions) -> anyhow::Result<()> {
        for i in 0..self.sites.len() {
            self.apply(&cluster_yaml(&self.sites[i].name), &format!("cluster-{i}"))?;
        }
        self.apply(&ingress_yaml(options.unicast), "ingresses")?;
        for i in 0..self.sites.len() {
            let token = self.issue_token(&self.sites[i].name)?;
            write_agent_config(
                &self.sites[i],
                &token,
                &self.dir.path().join("ca.crt"),
                options,
            )?;
            self.start_backend(i)?;
            self.start_agent(i)?;
        }
        self.wait_for_paths(&[true, true], START)
    }

    /// kubectl (in the router, where the API listens) with `args`.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.router
            .command(&self.bins.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", self.dir.path())
            .env_remove("KUBECONFIG")
            .output()
            .context("running kubectl")
    }

    /// `kubectl get federatedingress NAME -o json`, parsed.
    pub fn ingress(&self, name: &str) -> anyhow::Result<Value> {
        let out = self.kubectl(&["get", "federatedingress", name, "-o", "json"])?;
        if !out.status.success() {
            bail!(
                "kubectl get federatedingress {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(serde_json::from_slice(&out.stdout)?)
    }

    fn apply(&self, yaml: &str, file: &str) -> anyhow::Result<()> {
        let path = self.dir.path().join(format!("{file}.yaml"));
        std::fs::write(&path, yaml)?;
        let deadline = Instant::now() + START;
        loop {
            let out = self.kubectl(&["apply", "-f", &path.display().to_string()])?;
            if out.status.success() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "kubectl apply -f {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn issue_token(&self, cluster: &str) -> anyhow::Result<String> {
        let out = self
            .router
            .command("curl")
            .args([
                "-sS",
                "--cacert",
                &self.dir.path().join("ca.crt").display().to_string(),
                "-H",
                &format!("Authorization: Bearer {ADMIN_TOKEN}"),
                "-X",
                "POST",
                &format!("https://{API}/apis/fedingress.io/v1alpha1/clusters/{cluster}/token"),
            ])
            .output()
            .context("running curl")?;
        let body: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "token for {cluster}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        body["token"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no token in {body}"))
    }

    /// Starts site `i`'s echo backend (again).
    pub fn start_backend(&mut self, i: usize) -> anyhow::Result<()> {
        let site = &mut self.sites[i];
        let mut command = site.ns.command(&self.bins.fedctl);
        command.args([
            "dev",
            "echo",
            "--name",
            &site.name,
            "--listen",
            "127.0.0.1:9000",
        ]);
        site.backend = Some(Process::start(
            command,
            &format!("echo {}", site.name),
            START,
        )?);
        Ok(())
    }

    /// SIGKILLs site `i`'s echo backend (its listener and connections go at once).
    pub fn kill_backend(&mut self, i: usize) {
        if let Some(backend) = self.sites[i].backend.take() {
            backend.kill9();
        }
    }

    /// Starts site `i`'s agent (again), once it printed its READY line (not yet ready:
    /// see [`AnycastLab::agent_ready`]).
    pub fn start_agent(&mut self, i: usize) -> anyhow::Result<()> {
        let site = &mut self.sites[i];
        let mut command = site.ns.command(&self.bins.agent);
        command.arg("--config").arg(&site.config);
        site.agent = Some(
            Process::start_logging_to(
                command,
                &format!("cluster-agent {}", site.name),
                START,
                &site.log,
            )
            .with_context(|| format!("its log ends:\n{}", tail(&site.log, 20)))?,
        );
        Ok(())
    }

    /// Sends SIGTERM to site `i`'s agent without waiting; returns its process to wait on.
    pub fn sigterm_agent(&mut self, i: usize) -> anyhow::Result<Process> {
        let agent = self.sites[i]
            .agent
            .take()
            .with_context(|| format!("{} has no agent", self.sites[i].name))?;
        let status = Command::new("kill")
            .args(["-TERM", &agent.pid().to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -TERM {}", agent.pid());
        }
        Ok(agent)
    }

    /// Site `i`'s agent's `GET /readyz`: `Ok(body)` on 200, `Err(why)` otherwise (also
    /// when it does not answer or there is no agent).
    pub fn agent_ready(&self, i: usize) -> Result<String, String> {
        let site = &self.sites[i];
        let admin: SocketAddr = site
            .agent
            .as_ref()
            .ok_or_else(|| format!("{} has no agent", site.name))?
            .addr("admin")
            .parse()
            .map_err(|e| format!("{}'s admin address: {e}", site.name))?;
        let text = site
            .ns
            .run_inside(move || http_get(admin, "/readyz"))
            .map_err(|e| format!("{e:#}"))?
            .map_err(|e| format!("{e:#}"))?;
        let body = text
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .trim()
            .to_owned();
        if text.starts_with("HTTP/1.1 200") {
            Ok(body)
        } else {
            Err(body)
        }
    }

    /// SIGKILLs site `i`'s managed gobgpd (the agent's child); returns its pid.
    pub fn kill_speaker(&self, i: usize) -> anyhow::Result<u32> {
        let site = &self.sites[i];
        let pid = site
            .ns
            .pids()?
            .into_iter()
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "gobgpd")
            })
            .with_context(|| format!("no gobgpd runs in {}", site.name))?;
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()?;
        if !status.success() {
            bail!("kill -KILL {pid}");
        }
        Ok(pid)
    }

    /// The paths of [`ANYCAST_PREFIX`] in the router's RIB.
    pub fn routes(&self) -> anyhow::Result<Vec<RibPath>> {
        self.rib()?.routes(ANYCAST_PREFIX)
    }

    /// A new reader of the router's RIB and sessions (for any thread and namespace).
    pub fn rib(&self) -> anyhow::Result<RibReader> {
        self.router_daemon.reader()
    }

    /// The BIRD of a lab started with it.
    ///
    /// # Panics
    /// When the lab's router is FRR.
    pub fn bird(&self) -> &Bird {
        match &self.router_daemon {
            Router::Bird(bird) => bird,
            Router::Frr(_) => panic!("the lab's router is FRR, not BIRD"),
        }
    }

    /// The router (its log: [`Router::log`]).
    pub fn router_daemon(&self) -> &Router {
        &self.router_daemon
    }

    /// The federation-apiserver (its log is `dir()/hub.log`).
    pub fn hub(&self) -> &Process {
        &self.hub
    }

    /// Waits until site `i`'s path is in the RIB exactly when `present[i]`.
    pub fn wait_for_paths(&self, present: &[bool], timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let routes = self.routes()?;
            let now: Vec<bool> = self
                .sites
                .iter()
                .map(|s| routes.iter().any(|r| r.protocol == s.protocol))
                .collect();
            if now == present {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "after {timeout:?} the RIB has paths {now:?}, wanted {present:?}: {routes:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client connects to the anycast address, sends `text` and returns the answer
    /// (`site-a: text`).
    pub fn client_roundtrip(&self, text: &str) -> anyhow::Result<String> {
        self.client
            .run_inside(|| line_roundtrip(SocketAddr::new(ANYCAST.into(), PORT), text))?
    }

    /// The tail of site `i`'s agent log.
    pub fn agent_log(&self, i: usize) -> String {
        tail(&self.sites[i].log, 40)
    }

    /// The directory holding configs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for AnycastLab {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Keep configs and logs for a look.
            self.dir.disable_cleanup(true);
            eprintln!(
                "--- configs and logs kept in {} ---",
                self.dir.path().display()
            );
            for (i, site) in self.sites.iter().enumerate() {
                eprintln!(
                    "--- {} agent log (tail) ---\n{}",
                    site.name,
                    self.agent_log(i)
                );
            }
            eprintln!(
                "--- router log (tail) ---\n{}",
                self.router_daemon
                    .log()
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            eprintln!(
                "--- hub log (tail) ---\n{}",
                tail(&self.dir.path().join("hub.log"), 30)
            );
        }
        // Every process inside (gobgpd too, were it orphaned), before the namespaces go.
        for site in &self.sites {
            let _ = site.ns.kill_all();
        }
        let _ = self.client.kill_all();
        let _ = self.router.kill_all();
    }
}

/// Connects to `addr` (5 s timeout), sends `text` and a newline, and reads one line.
pub fn line_roundtrip(addr: SocketAddr, text: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(format!("{text}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .with_context(|| format!("reading from {addr}"))?;
    if line.is_empty() {
        bail!("{addr} closed the connection without answering");
    }
    Ok(line.trim_end().to_owned())
}

/// `GET path` over HTTP/1.1 to `addr` (2 s timeouts): the whole response.
fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text)?;
    Ok(text)
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn bird_config(dir: &Path, sites: &[Site], reflect: bool) -> BirdConfig {
    BirdConfig {
        router_id: HUB_IP,
        asn: ASN,
        neighbors: sites
            .iter()
            .enumerate()
            .map(|(i, site)| BirdNeighbor {
                name: site.protocol.clone(),
                address: site.address.into(),
                asn: ASN,
                local_address: Ipv4Addr::new(10, 0, i as u8 + 1, 1).into(),
                rr_client: true,
                // "Nearest" is the router's preference (an IGP metric would give it in a
                // real network): site-a.
                local_pref: (i == 0).then_some(200),
                // The agents' gobgpd listen on AGENT_BGP_PORT and the router connects
                // at once (within a second, retried every second): GoBGP 3 itself first
                // connects out 5-9 s after a peer is added, so a router that waits for it
                // has a restarted site's route back only that late.
                passive: false,
                port: Some(AGENT_BGP_PORT),
                connect_seconds: Some(1),
                hold_time_seconds: 9,
                keepalive_seconds: 3,
                export: reflect,
            })
            .collect(),
        log: dir.join("bird.log"),
    }
}

/// The FRR config blocks of docs/anycast.md ("Router configuration", the `text` blocks
/// between `**FRR 8.4**` and `**BIRD 2**`) as written: the iBGP route reflector, then
/// the eBGP router.
pub fn docs_frr_configs() -> anyhow::Result<Vec<String>> {
    let path = crate::repo_path("docs/anycast.md");
    let docs =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let start = docs
        .find("**FRR 8.4**")
        .context("docs/anycast.md has no FRR part (**FRR 8.4**)")?;
    let end = start
        + docs[start..]
            .find("**BIRD 2**")
            .context("docs/anycast.md: no **BIRD 2** after the FRR part")?;
    Ok(docs[start..end]
        .split("```text\n")
        .skip(1)
        .filter_map(|block| block.split("```").next().map(str::to_owned))
        .collect())
}

/// The docs' FRR iBGP config `block` with its example values replaced by the lab's:
/// router id 192.0.2.1 → [`HUB_IP`], sites 192.0.2.10 and 192.0.2.20 → the sites'
/// addresses, prefix list 198.51.100.0/24 → the /24 of [`ANYCAST`], and the community
/// 65000:100 → the sites' communities (one `permit` line each). Nothing else changes.
///
/// # Errors
/// When the block lacks one of those values (the docs changed under the lab).
pub fn frr_config(block: &str, sites: &[Site]) -> anyhow::Result<String> {
    let [a, b] = sites else {
        bail!("the FRR config has two sites, the lab {}", sites.len());
    };
    let [x, y, z, _] = ANYCAST.octets();
    let community_line = "bgp community-list standard FEDINGRESS permit 65000:100";
    let communities = sites
        .iter()
        .map(|s| {
            format!(
                "bgp community-list standard FEDINGRESS permit {}",
                s.community
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    // The site addresses before the router id, which is their prefix.
    let replacements = [
        ("192.0.2.10", a.address.to_string()),
        ("192.0.2.20", b.address.to_string()),
        ("192.0.2.1", HUB_IP.to_string()),
        ("198.51.100.0/24", format!("{x}.{y}.{z}.0/24")),
        (community_line, communities),
    ];
    let mut text = block.to_owned();
    for (from, to) in replacements {
        if !text.contains(from) {
            bail!("docs/anycast.md's FRR block has no {from:?}:\n{block}");
        }
        text = text.replace(from, &to);
    }
    Ok(text)
}

fn start_hub(router: &NetNs, dir: &Path, bins: &Binaries) -> anyhow::Result<Process> {
    let config = dir.join("apiserver.yaml");
    // Not `dev` (anonymous admin, loopback only): an admin token, sent over TLS
    // (kubectl sends no token over plain HTTP). The gateway and DNS listen off loopback:
    // the sites reach them through the router.
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        format!("{ADMIN_TOKEN},admin,1,\"fedingress:admins\"\n"),
    )?;
    crate::TestPki::generate_with_ips(&[HUB_IP.into()]).write(dir);
    let text = format!(
        "listen: {API}\nagentListen: {HUB_IP}:16444\ntls: {{certFile: {cert}, keyFile: {key}}}\ndataDir: {data}\ntokenFile: {tokens}\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\ndns:\n  listen: {DNS}\n  zones:\n  - name: fedingress.test\n    nameservers: [ns1.fedingress.test]\n    soa: {{mname: ns1.fedingress.test, rname: hostmaster.fedingress.test, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}\n  locations:\n    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}\n",
        data = dir.join("hub-data").display(),
        tokens = tokens.display(),
        cert = dir.join("tls.crt").display(),
        key = dir.join("tls.key").display(),
    );
    std::fs::write(&config, text)?;
    let mut command = router.command(&bins.apiserver);
    command.arg("--config").arg(&config);
    let log = dir.join("hub.log");
    Process::start_logging_to(command, "federation-apiserver", START, &log)
        .with_context(|| format!("its log ends:\n{}", tail(&log, 20)))
}

fn cluster_yaml(name: &str) -> String {
    format!(
        "apiVersion: fedingress.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  region: europe-west1\n  location: {{latitude: 50.0, longitude: 4.0}}\n"
    )
}

fn ingress_yaml(unicast: bool) -> String {
    let rule = |port: u16| {
        format!(
            "  rules:\n  - protocol: TCP\n    port: {port}\n    name: echo\n    backend: {{service: echo, port: 9000}}\n"
        )
    };
    let mut text = format!(
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: anycast\n  namespace: default\nspec:\n{}  traffic:\n    dnsName: any.fedingress.test\n    ttl: 5\n    strategy:\n      type: Anycast\n      anycastAddresses: [\"{ANYCAST}\"]\n",
        rule(PORT)
    );
    if unicast {
        text.push_str(&format!(
            "---\napiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: unicast\n  namespace: default\nspec:\n{}  traffic:\n    dnsName: {UNICAST_NAME}\n    ttl: 5\n    failbackDelaySeconds: 0\n    strategy:\n      type: Failover\n      failoverOrder: [[site-a], [site-b]]\n",
            rule(UNICAST_PORT)
        ));
    }
    text
}

fn write_agent_config(
    site: &Site,
    token: &str,
    ca: &Path,
    options: &LabOptions,
) -> anyhow::Result<()> {
    let dir = site.config.parent().context("agent dir")?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("token"), token)?;
    let router_side = Ipv4Addr::from(u32::from(site.address) - 1);
    let text = format!(
        "hub:\n  address: https://{HUB_IP}:16444\n  caFile: {ca}\ncluster: {name}\ntokenFile: token\ndriver: standalone\nlisten:\n- bind: \"{address}\"\nservices:\n  echo: [\"127.0.0.1:9000\"]\nhealthCheck:\n  intervalMs: {interval}\n  timeoutMs: {interval}\n  healthyThreshold: 1\n  unhealthyThreshold: 2\nstateDir: state\nadmin: 127.0.0.1:0\nreportIntervalMs: 1000\nanycast:\n  speaker: {{command: gobgpd, api: \"127.0.0.1:50051\"}}\n  asn: {ASN}\n  routerId: {address}\n  listenPort: {AGENT_BGP_PORT}\n  peers:\n  - {{address: {router_side}, asn: {ASN}, holdTimeSeconds: 9, keepaliveSeconds: 3, connectRetrySeconds: 5}}\n  communities: [\"{community}\"]\n  interface: lo\n  withdrawDelayMs: {delay}\n",
        name = site.name,
        address = site.address,
        interval = options.health_interval_ms,
        community = site.community,
        delay = options.withdraw_delay_ms,
        ca = ca.display(),
    );
    std::fs::write(&site.config, text)?;
    Ok(())
}
