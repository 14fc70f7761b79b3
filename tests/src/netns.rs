//! Network namespaces of a test's own: for programs that must not reach anything but
//! loopback (`ip netns add` with only `lo` up inside, so a zone checker that asks the
//! root servers gets "network unreachable" at once and no packet leaves the machine),
//! and for tests of several "hosts" on a network of their own (VRRP, BGP).
//!
//! Entry points: [`NetNs::create`] (needs root and iproute2; [`NetNs::unavailable`]
//! says why a test should skip) and [`NetNs::command`] (a program run inside with
//! `ip netns exec`, which execs it: the child's PID is the program's own, so
//! [`crate::Process`] kills the program itself; [`NetNs::exec_prefix`] is that prefix
//! for commands built elsewhere, such as etcd members). The namespace is removed on
//! drop, also when the test fails; one left behind by a killed test run is removed by
//! the next [`NetNs::create`].
//!
//! Wiring: [`NetNs::veth`] connects two namespaces with a veth pair,
//! [`NetNs::add_address`] and [`NetNs::ip`] configure one, and [`Lan`] is N host
//! namespaces on one Ethernet segment (a bridge in a namespace of its own). "A host
//! dies": [`NetNs::kill_all`] (every process inside, `ip netns pids`) and
//! [`Lan::unplug`] (its cable out). What does not belong here: the programs run inside.

use std::ffi::OsStr;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// Prefix of every namespace the tests create: `fedingress-<tag>-<pid>`.
const PREFIX: &str = "fedingress-";

/// A network namespace with only loopback up; deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Why namespaces cannot be made here (not root, no `ip`), or `None`.
    pub fn unavailable() -> Option<String> {
        let uid = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Some("network namespaces need root (ip netns add)".into());
        }
        let ip = Command::new("ip")
            .args(["netns", "list"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !ip.is_ok_and(|s| s.success()) {
            return Some("`ip netns` is not available (Debian: iproute2)".into());
        }
        None
    }

    /// Creates `fedingress-<tag>-<pid>` with loopback up, after removing namespaces of
    /// earlier test processes that no longer run (killed before their drop ran).
    pub fn create(tag: &str) -> anyhow::Result<Self> {
        remove_stale();
        let name = format!("{PREFIX}{tag}-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let ns = NetNs { name };
        // From here on, drop removes the namespace.
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `program` run inside the namespace (`ip netns exec NAME program`); add its
    /// arguments to the returned command.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let [ip, args @ ..] = self.exec_prefix();
        let mut command = Command::new(ip);
        command.args(args).arg(program).stdin(Stdio::null());
        command
    }

    /// The command prefix that runs a program inside (`ip netns exec NAME`), for
    /// harnesses that build their own commands, e.g.
    /// `fedingress_store::etcd_process::EtcdOptions::wrapper`. It execs the program.
    pub fn exec_prefix(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// Runs `f` on a thread of its own that has entered the namespace (`setns`), and
    /// returns what it returns: a client inside without a process of its own. Sockets
    /// `f` creates belong to the namespace for good (usable from any thread later).
    pub fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                        .with_context(|| format!("setns into {path}"))?;
                    Ok(f())
                })
                .join()
                .map_err(|_| anyhow::anyhow!("a thread inside {} panicked", self.name))?
        })
    }

    /// [`NetNs::run_inside`] without waiting: `f` runs on a thread of its own inside
    /// the namespace while the caller goes on; join the handle for its result.
    pub fn spawn_inside<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<T>>> {
        let path = format!("/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        Ok(std::thread::spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .with_context(|| format!("setns into {path}"))?;
            Ok(f())
        }))
    }

    /// Runs `ip -n NAME ARGS` (e.g. `["route", "add", "10.1.0.0/16", "via", "10.0.0.1"]`);
    /// an error carries its stderr.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Adds `cidr` (`"10.0.0.1/24"`, `"fd00::1/64"`) to `dev` inside.
    pub fn add_address(&self, dev: &str, cidr: &str) -> anyhow::Result<()> {
        self.ip(&["addr", "add", cidr, "dev", dev])
    }

    /// Sets `dev` inside up or down.
    pub fn set_link(&self, dev: &str, up: bool) -> anyhow::Result<()> {
        self.ip(&["link", "set", dev, if up { "up" } else { "down" }])
    }

    /// Whether `address` is configured on any interface inside (e.g. whether this host
    /// holds a VIP right now). False when `ip` fails.
    pub fn has_address(&self, address: IpAddr) -> bool {
        let Ok(out) = Command::new("ip")
            .args(["-n", &self.name, "-o", "addr", "show"])
            .stdin(Stdio::null())
            .output()
        else {
            return false;
        };
        // "2: eth0    inet 10.0.0.1/24 brd ... scope global eth0\ ..."
        String::from_utf8_lossy(&out.stdout).lines().any(|line| {
            let mut words = line.split_whitespace();
            words.any(|w| w == "inet" || w == "inet6")
                && words
                    .next()
                    .and_then(|cidr| cidr.split('/').next())
                    .and_then(|a| a.parse::<IpAddr>().ok())
                    == Some(address)
        })
    }

    /// Connects `self` and `peer` with a veth pair, `dev` here and `peer_dev` there,
    /// both up and without addresses ([`NetNs::add_address`] adds them). The pair goes
    /// away with either namespace.
    pub fn veth(&self, dev: &str, peer: &NetNs, peer_dev: &str) -> anyhow::Result<()> {
        // Created inside `self` under the peer's final name too, so no interface
        // ever exists in the root namespace (where names could collide).
        self.ip(&["link", "add", dev, "type", "veth", "peer", "name", peer_dev])?;
        self.ip(&["link", "set", peer_dev, "netns", &peer.name])?;
        self.set_link(dev, true)?;
        peer.set_link(peer_dev, true)
    }

    /// The PIDs of every process inside (`ip netns pids`).
    pub fn pids(&self) -> anyhow::Result<Vec<u32>> {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .stdin(Stdio::null())
            .output()
            .context("running ip netns pids")?;
        if !out.status.success() {
            bail!(
                "ip netns pids {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect())
    }

    /// SIGKILLs every process inside until none is left (children forked meanwhile
    /// too), as when the host loses power; returns how many were killed. Fails when
    /// processes are still there after 5 s. The caller's [`crate::Process`] handles
    /// stay valid (dropping them reaps the dead children).
    pub fn kill_all(&self) -> anyhow::Result<usize> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut killed = std::collections::BTreeSet::new();
        loop {
            let pids = self.pids()?;
            if pids.is_empty() {
                return Ok(killed.len());
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "processes {pids:?} still run in {} after SIGKILL",
                    self.name
                );
            }
            for pid in pids {
                killed.insert(pid);
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// N host namespaces on one Ethernet segment: a bridge `br0` in a namespace of its own,
/// each host attached by a veth pair whose host end is `eth0` (up, with the host's
/// address) and whose bridge end is `port<i>`. Multicast (VRRP's 224.0.0.18) and
/// broadcast (ARP) reach every host. Every namespace is removed on drop.
#[derive(Debug)]
pub struct Lan {
    bridge: NetNs,
    hosts: Vec<(String, NetNs)>,
}

impl Lan {
    /// The host end of every attachment.
    pub const HOST_DEV: &str = "eth0";

    /// Creates the bridge namespace `fedingress-<tag>-br-<pid>` and, per `(host, cidr)`
    /// of `hosts`, the namespace `fedingress-<tag>-<host>-<pid>` with `cidr` (e.g.
    /// `("a", "10.0.0.1/24")`) on its `eth0`. Tags must differ between tests of one
    /// process.
    pub fn create(tag: &str, hosts: &[(&str, &str)]) -> anyhow::Result<Self> {
        let bridge = NetNs::create(&format!("{tag}-br"))?;
        bridge.ip(&["link", "add", "br0", "type", "bridge"])?;
        bridge.set_link("br0", true)?;
        let mut lan = Lan {
            bridge,
            hosts: Vec::new(),
        };
        for (i, (host, cidr)) in hosts.iter().enumerate() {
            let ns = NetNs::create(&format!("{tag}-{host}"))?;
            let port = format!("port{i}");
            ns.veth(Self::HOST_DEV, &lan.bridge, &port)
                .with_context(|| format!("attaching host {host} to the LAN"))?;
            lan.hosts.push((host.to_string(), ns));
            lan.bridge.ip(&["link", "set", &port, "master", "br0"])?;
            lan.host(host).add_address(Self::HOST_DEV, cidr)?;
        }
        Ok(lan)
    }

    /// The namespace of `host` (as named in [`Lan::create`]). Panics for an unknown name.
    pub fn host(&self, host: &str) -> &NetNs {
        self.hosts
            .iter()
            .find(|(name, _)| name == host)
            .map(|(_, ns)| ns)
            .unwrap_or_else(|| panic!("no host {host} on this LAN"))
    }

    /// The namespace holding the bridge `br0`.
    pub fn bridge(&self) -> &NetNs {
        &self.bridge
    }

    /// Pulls `host`'s cable (its bridge port down: nothing goes in or out, the host's
    /// own `eth0` stays up), or plugs it back in.
    pub fn unplug(&self, host: &str, unplugged: bool) -> anyhow::Result<()> {
        let i = self
            .hosts
            .iter()
            .position(|(name, _)| name == host)
            .with_context(|| format!("no host {host} on this LAN"))?;
        self.bridge.set_link(&format!("port{i}"), !unplugged)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        if let Err(error) = ip(&["netns", "del", &self.name]) {
            eprintln!("removing network namespace {}: {error:#}", self.name);
        }
    }
}

/// Runs `ip ARGS`; an error carries its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Deletes `fedingress-*-<pid>` namespaces whose process is gone.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "NAME" or "NAME (id: N)"
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.rsplit('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}
