//! A site of two hosts sharing a virtual IP through keepalived (VRRPv3), and a client,
//! on one LAN of network namespaces ([`crate::netns::Lan`]): what the VRRP test
//! (`tests/tests/e2e/vrrp.rs`) and the failover benchmark (`bench/src/bin/vrrp-bench.rs`)
//! run against.
//!
//! - LAN `10.0.0.0/24`: `host-a` (.1, priority 150), `host-b` (.2, priority 100),
//!   `client` (.3); the shared address [`VIP`] `10.0.0.100`, TCP port [`PORT`] 7000.
//! - [`Mode::Agent`]: each host runs an echo backend (`fedctl dev echo --name host-x`,
//!   on 127.0.0.1:9001 inside) and a standalone `cluster-agent` with no hub, serving a
//!   persisted plan (TCP 7000 → the backend) on the wildcard address, with a `vrrp:`
//!   section: the agent renders, checks and runs keepalived, whose track script is the
//!   agent's readiness (admin 127.0.0.1:9901 inside).
//! - [`Mode::KeepalivedAlone`]: the peer to compare with: plain keepalived with the
//!   same VRRP settings and no track script, and the echo backend on `0.0.0.0:7000`.
//! - [`Site::probe`]: one connection from the client to the VIP, one line echoed:
//!   which host answered. [`Site::kill_host`]: the host dies (its cable out, every
//!   process inside SIGKILLed); [`Site::revive_host`] plugs it back and starts it again.
//!
//! Needs root, iproute2 and keepalived ([`Site::unavailable`] says why not). Every
//! process inside the hosts (keepalived too: `ip netns pids`) and every namespace goes
//! on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::netns::{Lan, NetNs};
use crate::{Process, binary};

/// The shared address.
pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);
/// The service's port on the VIP.
pub const PORT: u16 = 7000;
/// The echo backend's address inside each host (agent mode).
const BACKEND: &str = "127.0.0.1:9001";
/// The agent's admin address inside each host.
pub const ADMIN: &str = "127.0.0.1:9901";
/// The VRRP group.
const VRID: u8 = 51;
/// The hosts: name, address, priority.
pub const HOSTS: [(&str, &str, u8); 2] = [
    ("host-a", "10.0.0.1/24", 150),
    ("host-b", "10.0.0.2/24", 100),
];
const CLIENT: (&str, &str) = ("client", "10.0.0.3/24");
const START: Duration = Duration::from_secs(30);
/// How long one probe may wait to connect, and then for the answer: far above a LAN's
/// round trip, and the resolution of a measured failover.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(50);

/// The workspace programs a site runs.
#[derive(Clone, Debug)]
pub struct Programs {
    pub cluster_agent: PathBuf,
    pub fedctl: PathBuf,
}

impl Programs {
    /// The test build's ([`crate::binary`]: `FEDINGRESS_TEST_BIN_DIR` or built).
    pub fn built() -> Self {
        Programs {
            cluster_agent: binary("cluster-agent"),
            fedctl: binary("fedctl"),
        }
    }

    /// Those in `dir` (a benchmark's release build).
    pub fn in_dir(dir: &Path) -> Self {
        Programs {
            cluster_agent: dir.join("cluster-agent"),
            fedctl: dir.join("fedctl"),
        }
    }
}

/// What shares the VIP on each host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// cluster-agent with `vrrp:` (keepalived managed by the agent, readiness tracked).
    Agent,
    /// keepalived alone, no track script, the echo backend serving the VIP directly.
    KeepalivedAlone,
}

/// The processes of one host.
struct Host {
    name: &'static str,
    priority: u8,
    dir: PathBuf,
    echo: Option<Process>,
    agent: Option<Process>,
    keepalived: Option<Process>,
}

/// The LAN, its hosts and the client (see the module docs).
pub struct Site {
    mode: Mode,
    advert_interval_ms: u32,
    keepalived: PathBuf,
    programs: Programs,
    hosts: Vec<Host>,
    // Dropped after the processes (fields drop in order): namespaces last.
    lan: Lan,
    _dir: tempfile::TempDir,
}

/// The keepalived program, if installed (`/usr/sbin` is not on every user's PATH).
pub fn keepalived() -> Option<PathBuf> {
    ["keepalived", "/usr/sbin/keepalived"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("--version").output().is_ok())
}

impl Site {
    /// Why a site cannot run here (not root, no `ip netns`, no keepalived), or `None`.
    pub fn unavailable() -> Option<String> {
        if let Some(why) = NetNs::unavailable() {
            return Some(why);
        }
        if keepalived().is_none() {
            return Some("keepalived is not installed (Debian: apt-get install keepalived)".into());
        }
        None
    }

    /// Creates the LAN (namespaces `fedingress-<tag>-*`) and starts host-a, waits until
    /// it holds the VIP, then starts host-b. `advert_interval_ms` is VRRP's
    /// advertisement interval on both.
    pub fn start(
        tag: &str,
        mode: Mode,
        advert_interval_ms: u32,
        programs: Programs,
    ) -> anyhow::Result<Site> {
        let keepalived = keepalived().context("keepalived is not installed")?;
        let mut names: Vec<(&str, &str)> = HOSTS.iter().map(|(n, a, _)| (*n, *a)).collect();
        names.push(CLIENT);
        let lan = Lan::create(tag, &names)?;
        let dir = tempfile::tempdir()?;
        let hosts = HOSTS
            .iter()
            .map(|(name, _, priority)| Host {
                name,
                priority: *priority,
                dir: dir.path().join(name),
                echo: None,
                agent: None,
                keepalived: None,
            })
            .collect();
        let mut site = Site {
            mode,
            advert_interval_ms,
            keepalived,
            programs,
            hosts,
            lan,
            _dir: dir,
        };
        site.start_host("host-a")?;
        site.wait_for_holder("host-a", START)?;
        site.start_host("host-b")?;
        if mode == Mode::Agent {
            site.wait_for_vrrp_state("host-b", "backup", START)?;
        }
        Ok(site)
    }

    /// The namespace of `host` (`host-a`, `host-b`, `client`).
    pub fn ns(&self, host: &str) -> &NetNs {
        self.lan.host(host)
    }

    fn host_mut(&mut self, name: &str) -> &mut Host {
        self.hosts
            .iter_mut()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    /// The agent process of `host` (agent mode, while it runs).
    pub fn agent(&mut self, host: &str) -> Option<&mut Process> {
        self.host_mut(host).agent.as_mut()
    }

    /// `host`'s directory: its agent config (`agent.yaml`), state and logs.
    pub fn dir(&self, host: &str) -> PathBuf {
        self.hosts
            .iter()
            .find(|h| h.name == host)
            .map(|h| h.dir.clone())
            .unwrap_or_default()
    }

    /// Starts `host`'s processes (its files written afresh).
    pub fn start_host(&mut self, name: &str) -> anyhow::Result<()> {
        let mode = self.mode;
        let advert = self.advert_interval_ms;
        let keepalived = self.keepalived.clone();
        let ns_name = self.lan.host(name).name().to_owned();
        let ns = self.lan.host(name);
        let echo_listen = match mode {
            Mode::Agent => BACKEND.to_owned(),
            Mode::KeepalivedAlone => format!("0.0.0.0:{PORT}"),
        };
        let mut command = ns.command(&self.programs.fedctl);
        command.args(["dev", "echo", "--name", name, "--listen", &echo_listen]);
        let echo = Process::start(command, &format!("echo {name}"), START)?;
        let host = self
            .hosts
            .iter()
            .find(|h| h.name == name)
            .context("no such host")?;
        let (dir, priority) = (host.dir.clone(), host.priority);
        std::fs::create_dir_all(&dir)?;
        let (agent, keepalived) = match mode {
            Mode::Agent => {
                let config = write_agent_files(&dir, priority, advert, &keepalived)?;
                let mut command = ns.command(&self.programs.cluster_agent);
                command.arg("--config").arg(&config);
                let agent = Process::start_logging_to(
                    command,
                    &format!("cluster-agent {name}"),
                    START,
                    &dir.join("agent.log"),
                )
                .with_context(|| format!("{name}: {}", tail(&dir.join("agent.log"))))?;
                (Some(agent), None)
            }
            Mode::KeepalivedAlone => {
                let config = dir.join("keepalived.conf");
                std::fs::write(&config, alone_config(name, priority, advert))?;
                let mut command = ns.command(&keepalived);
                // No -l: nothing to log anywhere (-G: no syslog).
                command
                    .args(["-n", "-G", "-P", "-f"])
                    .arg(&config)
                    .arg("-p")
                    .arg(dir.join("keepalived.pid"))
                    .arg("-r")
                    .arg(dir.join("keepalived-vrrp.pid"));
                (
                    None,
                    Some(Process::spawn(
                        command,
                        &format!("keepalived {name} ({ns_name})"),
                    )?),
                )
            }
        };
        let host = self.host_mut(name);
        host.echo = Some(echo);
        host.agent = agent;
        host.keepalived = keepalived;
        Ok(())
    }

    /// Which host holds the VIP right now (none, or the first if both do).
    pub fn holder(&self) -> Option<&'static str> {
        HOSTS
            .iter()
            .map(|(name, _, _)| *name)
            .find(|name| self.lan.host(name).has_address(IpAddr::V4(VIP)))
    }

    /// Waits until `host` alone holds the VIP.
    pub fn wait_for_holder(&self, host: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let holders: Vec<&str> = HOSTS
                .iter()
                .map(|(name, _, _)| *name)
                .filter(|name| self.lan.host(name).has_address(IpAddr::V4(VIP)))
                .collect();
            if holders == [host] {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{host} does not hold {VIP} alone after {timeout:?} (holders: {holders:?}){}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `host`'s agent reports VRRP state `state` (`master`, `backup`,
    /// `fault`) in its metrics (agent mode).
    pub fn wait_for_vrrp_state(
        &self,
        host: &str,
        state: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let line = format!("fedingress_agent_vrrp_state{{state=\"{state}\"}} 1");
        let deadline = Instant::now() + timeout;
        loop {
            if self
                .admin_get(host, "/metrics")
                .is_ok_and(|(_, body)| body.contains(&line))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{host} is not in VRRP state {state} after {timeout:?}{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET path` at `host`'s agent admin endpoint: status code and body.
    pub fn admin_get(&self, host: &str, path: &str) -> anyhow::Result<(u16, String)> {
        let admin: SocketAddr = ADMIN.parse()?;
        let path = path.to_owned();
        self.lan
            .host(host)
            .run_inside(move || -> anyhow::Result<(u16, String)> {
                let mut stream = TcpStream::connect_timeout(&admin, Duration::from_secs(1))?;
                stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                write!(
                    stream,
                    "GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
                )?;
                let mut response = String::new();
                stream.read_to_string(&mut response)?;
                let status = response
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .context("no status line")?;
                let body = response
                    .split_once("\r\n\r\n")
                    .map(|(_, b)| b)
                    .unwrap_or_default();
                Ok((status, body.to_owned()))
            })?
    }

    /// One connection from the client to the VIP, one line: the name of the host that
    /// answered, or why there was no answer within `timeout` (connect and answer each).
    pub fn probe(&self, timeout: Duration) -> Result<String, String> {
        self.lan
            .host("client")
            .run_inside(move || -> Result<String, String> {
                let vip = SocketAddr::new(IpAddr::V4(VIP), PORT);
                let mut stream = TcpStream::connect_timeout(&vip, timeout)
                    .map_err(|e| format!("connect: {e}"))?;
                stream
                    .set_read_timeout(Some(timeout))
                    .map_err(|e| e.to_string())?;
                stream
                    .write_all(b"hello\n")
                    .map_err(|e| format!("write: {e}"))?;
                let mut line = String::new();
                BufReader::new(stream)
                    .read_line(&mut line)
                    .map_err(|e| format!("read: {e}"))?;
                // "host-a: hello"
                line.split_once(": ")
                    .map(|(host, _)| host.to_owned())
                    .ok_or_else(|| format!("unexpected answer {line:?}"))
            })
            .map_err(|e| format!("{e:#}"))?
    }

    /// Probes until `host` answers (a reconnect after each failure, `interval` apart);
    /// the time from `since` to that answer.
    pub fn until_answered_by(
        &self,
        host: &str,
        since: Instant,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        let mut last = String::new();
        while since.elapsed() < timeout {
            match self.probe(PROBE_TIMEOUT) {
                Ok(answer) if answer == host => return Ok(since.elapsed()),
                Ok(answer) => last = format!("answered by {answer}"),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        bail!(
            "{host} did not answer within {timeout:?} (last: {last}){}",
            self.logs()
        )
    }

    /// The host dies: its cable out (nothing in or out from now on), then every process
    /// inside SIGKILLed (the VIP it held stays configured, unreachable, as on a host
    /// whose power went).
    pub fn kill_host(&mut self, name: &str) -> anyhow::Result<()> {
        self.lan.unplug(name, true)?;
        self.lan.host(name).kill_all()?;
        let host = self.host_mut(name);
        // Reap the dead.
        host.echo = None;
        host.agent = None;
        host.keepalived = None;
        Ok(())
    }

    /// Brings a dead host back: the VIP it still had and plain keepalived's pid files
    /// removed (as a reboot would; the agent clears its own), cable in, processes
    /// started.
    pub fn revive_host(&mut self, name: &str) -> anyhow::Result<()> {
        if self.mode == Mode::KeepalivedAlone {
            let dir = self.dir(name);
            for file in ["keepalived.pid", "keepalived-vrrp.pid"] {
                let _ = std::fs::remove_file(dir.join(file));
            }
        }
        let ns = self.lan.host(name);
        if ns.has_address(IpAddr::V4(VIP)) {
            ns.ip(&["addr", "del", &format!("{VIP}/24"), "dev", Lan::HOST_DEV])?;
        }
        self.lan.unplug(name, false)?;
        self.start_host(name)
    }

    /// The last lines of each host's agent log, for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for host in &self.hosts {
            let log = host.dir.join("agent.log");
            if log.exists() {
                text.push_str(&format!(
                    "\n--- {} agent log (end):\n{}",
                    host.name,
                    tail(&log)
                ));
            }
        }
        text
    }
}

impl Drop for Site {
    /// Every process inside every host goes, keepalived too (an agent killed by its
    /// `Process` handle cannot stop the keepalived it runs).
    fn drop(&mut self) {
        for (name, _, _) in HOSTS {
            if let Err(error) = self.lan.host(name).kill_all() {
                eprintln!("stopping the processes of {name}: {error:#}");
            }
        }
    }
}

/// The last 30 lines of a file.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Writes the token, the persisted plan (TCP 7000 → echo) and the agent config of a
/// host; returns the config's path.
fn write_agent_files(
    dir: &Path,
    priority: u8,
    advert_interval_ms: u32,
    keepalived: &Path,
) -> anyhow::Result<PathBuf> {
    std::fs::write(dir.join("token"), "t0ken\n")?;
    let state = dir.join("state");
    std::fs::create_dir_all(&state)?;
    // The agent's persisted plan (`state::PersistedPlan`): one share, TCP 7000 → echo.
    // No hub ever sees it, so its digest is only a label.
    let persisted = serde_json::json!({
        "version": 1,
        "digest": "static",
        "plan": [{
            "key": {"namespace": "default", "name": "echo"},
            "uid": "uid-echo",
            "generation": 1,
            "rules": [{"protocol": "TCP", "port": PORT, "backend": {"service": "echo", "port": 9001}}],
            "tls": [],
        }],
    });
    std::fs::write(state.join("plan.json"), serde_json::to_vec(&persisted)?)?;
    let config = dir.join("agent.yaml");
    std::fs::write(
        &config,
        format!(
            "\
# No hub: the agent serves its persisted plan (fail static) and keeps retrying.
hub: {{address: 'http://127.0.0.1:1'}}
cluster: site
tokenFile: token
driver: standalone
listen: [{{bind: 0.0.0.0, advertise: {VIP}}}]
services: {{echo: ['{BACKEND}']}}
stateDir: state
admin: {ADMIN}
vrrp:
  interface: {dev}
  virtualRouterId: {VRID}
  priority: {priority}
  virtualAddresses: ['{VIP}/24']
  advertIntervalMs: {advert_interval_ms}
  keepalived: {{command: '{keepalived}'}}
",
            dev = Lan::HOST_DEV,
            keepalived = keepalived.display(),
        ),
    )?;
    Ok(config)
}

/// keepalived's config for [`Mode::KeepalivedAlone`]: the agent's VRRP settings
/// without a track script.
fn alone_config(name: &str, priority: u8, advert_interval_ms: u32) -> String {
    format!(
        "\
global_defs {{
    router_id {name}
    vrrp_version 3
}}

vrrp_instance alone_{VRID} {{
    state BACKUP
    interface {dev}
    virtual_router_id {VRID}
    priority {priority}
    advert_int {advert}
    virtual_ipaddress {{
        {VIP}/24
    }}
}}
",
        dev = Lan::HOST_DEV,
        advert = f64::from(advert_interval_ms) / 1000.0,
    )
}
