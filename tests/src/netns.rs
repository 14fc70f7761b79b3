//! Network namespaces of a test's own, for programs that must not reach anything but
//! loopback: `ip netns add` with only `lo` up inside, so a zone checker that asks the
//! root servers (or anything else outside) gets "network unreachable" at once and no
//! packet leaves the machine.
//!
//! Entry points: [`NetNs::create`] (needs root and iproute2; [`NetNs::unavailable`]
//! says why a test should skip) and [`NetNs::command`] (a program run inside with
//! `ip netns exec`, which execs it: the child's PID is the program's own, so
//! [`crate::Process`] kills the program itself; [`NetNs::exec_prefix`] is that prefix
//! for commands built elsewhere, such as etcd members). The namespace is removed on
//! drop, also when the test fails; one left behind by a killed test run is removed by
//! the next [`NetNs::create`]. What does not belong here: the programs run inside.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

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
