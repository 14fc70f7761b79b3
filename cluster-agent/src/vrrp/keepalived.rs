//! The keepalived the agent runs (`vrrp.keepalived.manage: true`): checked before the
//! agent serves, then supervised until the agent exits.
//!
//! - [`prepare`] (synchronous, at start): renders the config, writes it, and runs
//!   `keepalived --config-test` on it; a missing keepalived or a refused config is an
//!   error the binary turns into exit 64.
//! - [`Keepalived::start`]: first stops a keepalived left behind by an earlier agent
//!   (its pid file names it; keepalived itself would refuse to start next to it) and
//!   removes pid files naming no running keepalived (before every start), then
//!   runs `keepalived -n -l -D -G -P -f <config> -p <pid> -r <vrrp pid>` in a process
//!   group of its own, logs its lines (and the VRRP state they announce), and when it
//!   dies: logs an error, counts the restart, stops what is left of its group, removes
//!   the virtual addresses it may have left on the interface (the host stops claiming
//!   them; the peer takes over), and starts it again after a backoff (0.5 s doubling
//!   to 30 s; back to 0.5 s after a minute of running). While it is down the agent is
//!   not ready ([`crate::admin::Component`]).
//! - [`Keepalived::stop`] (on agent exit, before the drain): SIGTERM to the group, so
//!   keepalived sends priority 0 and the peer takes over at once, SIGKILL after 5 s.
//!
//! What does not belong here: the config text ([`super::render`]).

use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

use super::render::{self, RenderError};
use crate::config::vrrp::{KeepalivedFiles, VirtualAddress};
use crate::config::{Config, VrrpConfig};

/// The first restart delay; it doubles per death up to [`MAX_RESTART_DELAY`].
const FIRST_RESTART_DELAY: Duration = Duration::from_millis(500);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
/// A keepalived that ran this long before dying restarts after the first delay again.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How long keepalived may take to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What the supervisor needs, from the config.
#[derive(Clone, Debug)]
pub struct Settings {
    pub command: PathBuf,
    pub files: KeepalivedFiles,
    pub interface: String,
    pub virtual_addresses: Vec<VirtualAddress>,
}

/// Why keepalived cannot be run with this config.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("vrrp: rendering keepalived's config")]
    Render(#[source] RenderError),
    #[error("vrrp: the agent's own program path")]
    Program(#[source] std::io::Error),
    #[error("vrrp.keepalived.configPath: writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "vrrp.keepalived.command: {} not found (Debian: apt-get install keepalived)",
        command.display()
    )]
    NotFound { command: PathBuf },
    #[error("vrrp.keepalived.command: running {}", command.display())]
    Run {
        command: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("vrrp: keepalived --config-test refused {}: {output}", path.display())]
    ConfigTest { path: PathBuf, output: String },
}

/// Renders `vrrp`'s keepalived config for this agent (its own program as the track
/// script), writes it to its path (directories created, written whole or not at all),
/// and runs `keepalived --config-test` on it.
///
/// # Errors
/// [`PrepareError`]: the config does not render or cannot be written, keepalived is
/// not there, or it refuses the config (its messages on one line).
pub fn prepare(config: &Config, vrrp: &VrrpConfig) -> Result<Settings, PrepareError> {
    let program = std::env::current_exe().map_err(PrepareError::Program)?;
    let text = render::render(vrrp, &config.cluster, &program, config.admin)
        .map_err(PrepareError::Render)?;
    let files = vrrp.files(&config.state_dir);
    write_atomically(&files.config, &text).map_err(|source| PrepareError::Write {
        path: files.config.clone(),
        source,
    })?;
    let command = vrrp.keepalived.command.clone();
    let output = std::process::Command::new(&command)
        .arg("--config-test")
        .arg("-f")
        .arg(&files.config)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => PrepareError::NotFound {
                command: command.clone(),
            },
            _ => PrepareError::Run {
                command: command.clone(),
                source,
            },
        })?;
    if !output.status.success() {
        let mut lines: Vec<String> = String::from_utf8_lossy(&output.stderr)
            .lines()
            .chain(String::from_utf8_lossy(&output.stdout).lines())
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            lines.push(format!("{}", output.status));
        }
        return Err(PrepareError::ConfigTest {
            path: files.config,
            output: lines.join("; "),
        });
    }
    Ok(Settings {
        command,
        files,
        interface: vrrp.interface.clone(),
        virtual_addresses: vrrp.virtual_addresses.clone(),
    })
}

/// Writes `text` to `path` through a temporary file and a rename.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // 0700 like the state dir the plan store creates (this is usually it).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The delay before restart number `deaths` (1 = after the first death) in a row.
pub fn restart_delay(deaths: u32) -> Duration {
    let factor = 1u32
        .checked_shl(deaths.saturating_sub(1))
        .unwrap_or(u32::MAX);
    FIRST_RESTART_DELAY
        .saturating_mul(factor)
        .min(MAX_RESTART_DELAY)
}

/// What keepalived is doing, as the supervisor knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Status {
    Starting,
    Running { pid: u32 },
    Down { reason: String, retry_in: Duration },
    Stopped,
}

#[derive(Debug)]
struct Shared {
    status: Mutex<Status>,
    /// The VRRP state keepalived last logged (`MASTER`, `BACKUP`, `FAULT`), if any.
    vrrp_state: Mutex<Option<String>>,
    restarts: AtomicU64,
}

impl Shared {
    fn set(&self, status: Status) {
        if let Ok(mut current) = self.status.lock() {
            *current = status;
        }
    }

    fn set_vrrp_state(&self, state: Option<String>) {
        if let Ok(mut current) = self.vrrp_state.lock() {
            *current = state;
        }
    }
}

/// A supervised keepalived (see the module docs).
#[derive(Debug)]
pub struct Keepalived {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Keepalived {
    /// Starts supervising keepalived with `settings` (from [`prepare`]) on the current
    /// runtime.
    pub fn start(settings: Settings) -> Arc<Self> {
        let shared = Arc::new(Shared {
            status: Mutex::new(Status::Starting),
            vrrp_state: Mutex::new(None),
            restarts: AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(supervise(settings, Arc::clone(&shared), stopped));
        Arc::new(Keepalived {
            shared,
            stop,
            task: tokio::sync::Mutex::new(Some(task)),
        })
    }

    /// Stops keepalived (SIGTERM to its group: it gives the addresses up and sends
    /// priority 0; SIGKILL after 5 s) and the supervision. Idempotent.
    pub async fn stop(&self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.lock().await.take() {
            let _ = task.await;
        }
    }

    /// The VRRP state keepalived last logged (`MASTER`, `BACKUP`, `FAULT`).
    pub fn vrrp_state(&self) -> Option<String> {
        self.shared.vrrp_state.lock().ok().and_then(|s| s.clone())
    }

    fn status(&self) -> Status {
        self.shared
            .status
            .lock()
            .map(|s| s.clone())
            .unwrap_or(Status::Starting)
    }
}

impl crate::admin::Component for Keepalived {
    fn readiness(&self) -> Result<(), String> {
        match self.status() {
            Status::Running { .. } => Ok(()),
            Status::Starting => Err("keepalived: starting".to_owned()),
            Status::Down { reason, retry_in } => {
                Err(format!("keepalived: {reason}; restarting in {retry_in:?}"))
            }
            Status::Stopped => Err("keepalived: stopped".to_owned()),
        }
    }

    fn metrics(&self) -> String {
        let up = u8::from(matches!(self.status(), Status::Running { .. }));
        let restarts = self.shared.restarts.load(Ordering::Relaxed);
        let state = self.vrrp_state();
        let mut text = format!(
            "# HELP fedingress_agent_keepalived_up Whether the keepalived the agent runs is running.\n\
             # TYPE fedingress_agent_keepalived_up gauge\n\
             fedingress_agent_keepalived_up {up}\n\
             # HELP fedingress_agent_keepalived_restarts_total Times keepalived was started again after it died.\n\
             # TYPE fedingress_agent_keepalived_restarts_total counter\n\
             fedingress_agent_keepalived_restarts_total {restarts}\n\
             # HELP fedingress_agent_vrrp_state The VRRP state keepalived last logged (1 for the current one).\n\
             # TYPE fedingress_agent_vrrp_state gauge\n"
        );
        for name in ["MASTER", "BACKUP", "FAULT"] {
            let value = u8::from(state.as_deref() == Some(name));
            text.push_str(&format!(
                "fedingress_agent_vrrp_state{{state=\"{}\"}} {value}\n",
                name.to_ascii_lowercase()
            ));
        }
        text
    }
}

/// The supervision loop: run, wait, clean up, back off, run again, until `stop`.
async fn supervise(settings: Settings, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut deaths = 0u32;
    loop {
        stop_stale(&settings.files).await;
        let started = Instant::now();
        let reason = match spawn(&settings) {
            Err(error) => {
                tracing::error!(
                    command = %settings.command.display(),
                    error = %error,
                    "starting keepalived failed"
                );
                format!("starting it failed: {error}")
            }
            Ok(mut child) => {
                let pid = child.id().unwrap_or_default();
                shared.set(Status::Running { pid });
                forward_output(&mut child, pid, &shared);
                tracing::info!(pid, config = %settings.files.config.display(), "keepalived started");
                tokio::select! {
                    status = child.wait() => {
                        let reason = match status {
                            Ok(status) => describe(status),
                            Err(error) => format!("waiting for it failed: {error}"),
                        };
                        shared.restarts.fetch_add(1, Ordering::Relaxed);
                        shared.set_vrrp_state(None);
                        tracing::error!(
                            pid,
                            reason = %reason,
                            "keepalived died; the virtual addresses go to the peer until it runs again"
                        );
                        stop_group(pid).await;
                        release_addresses(&settings).await;
                        reason
                    }
                    () = stopped(&mut stop) => {
                        terminate(&mut child, pid).await;
                        shared.set(Status::Stopped);
                        shared.set_vrrp_state(None);
                        return;
                    }
                }
            }
        };
        deaths = if started.elapsed() >= STABLE_AFTER {
            1
        } else {
            deaths.saturating_add(1)
        };
        let delay = restart_delay(deaths);
        shared.set(Status::Down {
            reason,
            retry_in: delay,
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stopped(&mut stop) => {
                shared.set(Status::Stopped);
                return;
            }
        }
    }
}

/// Completes once `stop` says true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// `keepalived -n -l -D -G -P -f CONFIG -p PID -r VRRP_PID` in a process group of its
/// own (so that its children can be signalled with it), output piped.
fn spawn(settings: &Settings) -> std::io::Result<tokio::process::Child> {
    let files = &settings.files;
    tokio::process::Command::new(&settings.command)
        // In the foreground, log to the console with detail, not to syslog, VRRP only.
        .args(["-n", "-l", "-D", "-G", "-P"])
        .arg("-f")
        .arg(&files.config)
        .arg("-p")
        .arg(&files.pid)
        .arg("-r")
        .arg(&files.vrrp_pid)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Logs keepalived's output line by line and follows the VRRP state it announces.
fn forward_output(child: &mut tokio::process::Child, pid: u32, shared: &Arc<Shared>) {
    fn follow(stream: impl AsyncRead + Unpin + Send + 'static, pid: u32, shared: Arc<Shared>) {
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line = strip_timestamp(&line);
                if let Some(state) = announced_state(line) {
                    shared.set_vrrp_state(Some(state.to_owned()));
                    tracing::info!(pid, state, "vrrp state");
                }
                tracing::info!(pid, line, "keepalived");
            }
        });
    }
    if let Some(stdout) = child.stdout.take() {
        follow(stdout, pid, Arc::clone(shared));
    }
    if let Some(stderr) = child.stderr.take() {
        follow(stderr, pid, Arc::clone(shared));
    }
}

/// A console log line without keepalived's `Tue Nov 24 14:01:55 2026: ` prefix.
fn strip_timestamp(line: &str) -> &str {
    match line.split_once(": ") {
        Some((stamp, rest))
            if stamp.split_whitespace().count() == 5
                && stamp.rsplit(' ').next().is_some_and(|year| {
                    year.len() == 4 && year.bytes().all(|b| b.is_ascii_digit())
                }) =>
        {
            rest
        }
        _ => line,
    }
}

/// The state in `(fedingress_51) Entering MASTER STATE`, if the line says one.
fn announced_state(line: &str) -> Option<&str> {
    let rest = line.split_once("Entering ")?.1;
    let (state, tail) = rest.split_once(' ')?;
    (tail.starts_with("STATE") && ["MASTER", "BACKUP", "FAULT"].contains(&state)).then_some(state)
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "exited".to_owned(),
    }
}

fn group_signal(pid: u32, signal: rustix::process::Signal) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    rustix::process::kill_process_group(pid, signal).is_ok()
}

fn group_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
}

/// What is left of a dead keepalived's group (its VRRP child gives the addresses up
/// and exits by itself when the parent dies; this makes sure): SIGTERM, SIGKILL after
/// [`STOP_TIMEOUT`].
async fn stop_group(pid: u32) {
    if !group_signal(pid, rustix::process::Signal::TERM) {
        return;
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while group_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if group_signal(pid, rustix::process::Signal::KILL) {
        tracing::warn!(pid, "keepalived's processes ignored SIGTERM; killed");
    }
}

/// SIGTERM to keepalived's group, wait for the parent, SIGKILL after [`STOP_TIMEOUT`].
async fn terminate(child: &mut tokio::process::Child, pid: u32) {
    group_signal(pid, rustix::process::Signal::TERM);
    match tokio::time::timeout(STOP_TIMEOUT, child.wait()).await {
        Ok(status) => {
            tracing::info!(pid, status = ?status.ok(), "keepalived stopped");
        }
        Err(_) => {
            tracing::warn!(
                pid,
                "keepalived did not stop within 5 s of SIGTERM; killing it"
            );
            group_signal(pid, rustix::process::Signal::KILL);
            let _ = child.wait().await;
        }
    }
    // The VRRP child may outlive the parent by a moment.
    stop_group(pid).await;
}

/// Clears the way for a new keepalived: one still running from an earlier agent (killed
/// before it could stop it) is stopped — SIGTERM, SIGKILL after [`STOP_TIMEOUT`] — and
/// pid files naming no running keepalived are removed (keepalived refuses to start while
/// its VRRP pid file names a process that exists, even a zombie nobody reaped). Only a
/// process named `keepalived` is signalled.
async fn stop_stale(files: &KeepalivedFiles) {
    for pid_file in [&files.pid, &files.vrrp_pid] {
        let Ok(text) = tokio::fs::read_to_string(pid_file).await else {
            continue;
        };
        if let Some(pid) = text
            .trim()
            .parse::<i32>()
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .filter(|pid| running_keepalived(pid.as_raw_nonzero().get()))
        {
            tracing::warn!(
                pid = pid.as_raw_nonzero().get(),
                pid_file = %pid_file.display(),
                "stopping the keepalived an earlier agent left running"
            );
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + STOP_TIMEOUT;
            while running_keepalived(pid.as_raw_nonzero().get()) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        if let Err(error) = tokio::fs::remove_file(pid_file).await
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pid_file = %pid_file.display(), error = %error, "removing a stale keepalived pid file failed");
        }
    }
}

/// Whether `pid` is a running (not zombie) process named `keepalived`.
fn running_keepalived(pid: i32) -> bool {
    // "PID (comm) STATE ...": comm may hold spaces and parentheses; the state follows
    // the last ')'.
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let comm = stat
        .split_once('(')
        .and_then(|(_, rest)| rest.rsplit_once(')'))
        .map(|(comm, _)| comm);
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    comm == Some("keepalived") && !matches!(state, Some("Z" | "X"))
}

/// Removes the virtual addresses from the interface (`ip addr del`), where a keepalived
/// that died without cleaning up left them: this host stops answering for them.
async fn release_addresses(settings: &Settings) {
    for address in &settings.virtual_addresses {
        let shown = address.to_string();
        let output = tokio::process::Command::new("ip")
            .args(["addr", "del", &shown, "dev", &settings.interface])
            .stdin(Stdio::null())
            .output()
            .await;
        match output {
            Ok(output) if output.status.success() => {
                tracing::warn!(address = %shown, interface = %settings.interface, "removed a virtual address keepalived left behind");
            }
            // Not there: keepalived had given it up (or never held it).
            Ok(_) => {}
            Err(error) => {
                tracing::error!(address = %shown, error = %error, "removing a virtual address failed (ip addr del)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off() {
        assert_eq!(restart_delay(1), Duration::from_millis(500));
        assert_eq!(restart_delay(2), Duration::from_secs(1));
        assert_eq!(restart_delay(4), Duration::from_secs(4));
        assert_eq!(restart_delay(7), Duration::from_secs(30));
        assert_eq!(restart_delay(100), Duration::from_secs(30));
    }

    #[test]
    fn only_a_running_keepalived_counts() {
        assert!(!running_keepalived(
            i32::try_from(std::process::id()).unwrap()
        ));
        assert!(!running_keepalived(i32::MAX));
    }

    #[test]
    fn log_lines() {
        let line =
            strip_timestamp("Tue Nov 24 14:01:55 2026: (fedingress_51) Entering MASTER STATE");
        assert_eq!(line, "(fedingress_51) Entering MASTER STATE");
        assert_eq!(announced_state(line), Some("MASTER"));
        assert_eq!(
            announced_state("(fedingress_51) Entering BACKUP STATE (init)"),
            Some("BACKUP")
        );
        assert_eq!(
            announced_state("(fedingress_51) Entering FAULT STATE"),
            Some("FAULT")
        );
        assert_eq!(announced_state("Entering MASTER mode"), None);
        assert_eq!(strip_timestamp("no stamp: here"), "no stamp: here");
        assert_eq!(
            strip_timestamp("Tue Nov  4 14:01:55 2026: x"),
            "x",
            "a padded day of the month"
        );
    }
}
