//! The dev federation's processes: started detached (own process group, output to a log
//! file, so Ctrl-C reaches only `fedctl dev up`, which then stops them in order, and a
//! crash of fedctl leaves nothing writing to a closed pipe), waited for by their `READY`
//! line (or another readiness probe: etcd prints none), and stopped by PID — after
//! checking that the PID still runs the command that was started, so a recycled PID is
//! never signalled.

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rustix::process::{Pid, Signal, kill_process};
use serde::{Deserialize, Serialize};

/// One process of the dev federation, as the state file records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proc {
    /// `apiserver`, `etcd`, `agent` or `backend`.
    pub role: String,
    /// Which one: the cluster's name for agents and backends, the replica's (`r1`) for
    /// the apiservers of `dev up --ha` (`apiserver` for the only one).
    pub name: String,
    /// `None` once stopped on purpose (a backend stopped with `dev backend stop`).
    pub pid: Option<u32>,
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub log: PathBuf,
}

impl Proc {
    pub fn label(&self) -> String {
        match self.role.as_str() {
            "apiserver" if self.name == "apiserver" => "federation-apiserver".into(),
            "apiserver" => format!("federation-apiserver {}", self.name),
            "etcd" => "etcd".into(),
            _ => format!("{} {}", self.role, self.name),
        }
    }
}

/// A started process: its record, and the `Child` when this process is its parent
/// (so it can be reaped).
pub struct Started {
    pub proc: Proc,
    pub child: Option<Child>,
    pub ready: serde_json::Value,
}

/// Starts `exe args` detached, logging to `log` (appended), and waits up to `timeout`
/// for its `READY {json}` line.
pub fn start(
    role: &str,
    name: &str,
    exe: &Path,
    args: Vec<String>,
    log: &Path,
    timeout: Duration,
) -> anyhow::Result<Started> {
    start_with(role, name, exe, args, log, timeout, |log, offset| {
        ready_line(log, offset)
    })
}

/// Starts `exe args` like [`start`], and waits up to `timeout` until `probe` (given the
/// log and where this start's output begins in it) returns the JSON text of what the
/// process is ready with.
pub fn start_with(
    role: &str,
    name: &str,
    exe: &Path,
    args: Vec<String>,
    log: &Path,
    timeout: Duration,
    mut probe: impl FnMut(&Path, u64) -> Option<String>,
) -> anyhow::Result<Started> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    let offset = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut child = Command::new(exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let proc = Proc {
        role: role.into(),
        name: name.into(),
        pid: Some(child.id()),
        exe: exe.to_path_buf(),
        args,
        log: log.to_path_buf(),
    };
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(line) = probe(log, offset) {
            let ready = serde_json::from_str(&line)
                .with_context(|| format!("{} printed a bad READY line", proc.label()))?;
            return Ok(Started {
                proc,
                child: Some(child),
                ready,
            });
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!(
                "{} exited ({status}) before it was ready: {}",
                proc.label(),
                last_line(log, offset)
            );
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} was not ready within {}s (log: {})",
                proc.label(),
                timeout.as_secs(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn log_tail(log: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        use std::io::Seek as _;
        if file.seek(std::io::SeekFrom::Start(offset)).is_ok() {
            let _ = file.read_to_string(&mut text);
        }
    }
    text
}

fn ready_line(log: &Path, offset: u64) -> Option<String> {
    log_tail(log, offset)
        .lines()
        .find_map(|l| l.strip_prefix("READY ").map(str::to_string))
}

/// The last non-empty line a process logged (its error, usually), without colours.
pub fn last_line(log: &Path, offset: u64) -> String {
    log_tail(log, offset)
        .lines()
        .rev()
        .map(strip_ansi)
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| format!("see {}", log.display()))
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Whether `proc` still runs: its PID is alive, not a zombie, and runs the command that
/// was started (a recycled PID does not count).
pub fn alive(proc: &Proc) -> bool {
    let Some(pid) = proc.pid else {
        return false;
    };
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let expected: Vec<String> = std::iter::once(proc.exe.display().to_string())
        .chain(proc.args.iter().cloned())
        .collect();
    if argv != expected {
        return false;
    }
    // Field 3 of /proc/PID/stat is the state; `Z` is a zombie (dead, not reaped).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

/// Sends `signal` to `proc` if it is still the process that was started.
pub fn signal(proc: &Proc, signal: Signal) -> bool {
    let Some(pid) = proc.pid.and_then(|p| Pid::from_raw(p as i32)) else {
        return false;
    };
    alive(proc) && kill_process(pid, signal).is_ok()
}

/// Stops `proc`: SIGTERM, then SIGKILL after `grace`. `child` is reaped when given.
/// Returns whether it was running.
pub fn stop(proc: &Proc, child: Option<&mut Child>, grace: Duration) -> bool {
    if !signal(proc, Signal::TERM) {
        if let Some(child) = child {
            let _ = child.try_wait();
        }
        return false;
    }
    let deadline = Instant::now() + grace;
    let mut child = child;
    loop {
        if let Some(child) = child.as_deref_mut() {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
        } else if !alive(proc) {
            return true;
        }
        if Instant::now() >= deadline {
            signal(proc, Signal::KILL);
            if let Some(child) = child.as_deref_mut() {
                let _ = child.wait();
            }
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colours() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m failed"),
            "2026  WARN failed"
        );
    }
}
