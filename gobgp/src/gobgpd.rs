//! [`Gobgpd`]: a gobgpd child process (Debian's `gobgpd`, GoBGP 3.10.0) with its API on
//! a given address, no config file (everything goes through the API), no pprof, and
//! its log lines forwarded to `tracing`. Used by the agent to run a managed speaker and
//! by tests.
//!
//! # Guarantees
//! The child is killed when the [`Gobgpd`] is dropped and, on Linux, when this process
//! dies (`PR_SET_PDEATHSIG` = `SIGKILL`), so no gobgpd outlives its user.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::error::{SpeakerError, chain};
use crate::speaker::Speaker;

/// How many of gobgpd's last log lines an exit error quotes.
const KEPT_LINES: usize = 5;

/// How to start gobgpd: `gobgpd --api-hosts API --pprof-disable -l warn -p` then the
/// extra arguments.
#[derive(Clone, Debug)]
pub struct GobgpdCommand {
    program: PathBuf,
    api: SocketAddr,
    args: Vec<OsString>,
}

impl GobgpdCommand {
    /// `gobgpd` from `PATH` with its API on `api` (give a loopback address: the API
    /// has no authentication).
    pub fn new(api: SocketAddr) -> GobgpdCommand {
        GobgpdCommand {
            program: PathBuf::from("gobgpd"),
            api,
            args: Vec::new(),
        }
    }

    /// Another binary (a path, or a name looked up on `PATH`).
    pub fn program(mut self, program: impl Into<PathBuf>) -> GobgpdCommand {
        self.program = program.into();
        self
    }

    /// Arguments after the built-in ones (a later `-l debug` overrides `-l warn`).
    pub fn args<I, S>(mut self, args: I) -> GobgpdCommand
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts gobgpd. Its API is not up yet: see [`Gobgpd::wait_ready`].
    ///
    /// # Assumptions
    /// Called on a thread that lives as long as the child should (a tokio worker or the
    /// main thread, not a `spawn_blocking` thread): Linux sends the parent-death signal
    /// when the *thread* that started the child exits. Needs a tokio runtime (the log
    /// forwarding runs as tasks).
    ///
    /// # Errors
    /// [`SpeakerError::ApiAddress`] when the API address is in use or not local,
    /// [`SpeakerError::NotInstalled`] when the program does not exist,
    /// [`SpeakerError::Spawn`] when it cannot be started.
    pub fn spawn(self) -> Result<Gobgpd, SpeakerError> {
        // gobgpd would exit on an address in use, but only after a client may have
        // reached the other process listening there: refuse it up front.
        if let Err(e) = std::net::TcpListener::bind(self.api) {
            let reason = match e.kind() {
                std::io::ErrorKind::AddrInUse => "it is in use (another gobgpd?)".to_string(),
                _ => chain(&e),
            };
            return Err(SpeakerError::ApiAddress {
                api: self.api,
                reason,
            });
        }
        let mut command = Command::new(&self.program);
        command
            .arg("--api-hosts")
            .arg(self.api.to_string())
            .arg("--pprof-disable")
            .args(["-l", "warn", "-p"])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SpeakerError::NotInstalled {
                program: self.program.clone(),
            },
            _ => SpeakerError::Spawn {
                program: self.program.clone(),
                reason: chain(&e),
            },
        })?;
        let pid = child.id();
        tracing::info!(program = %self.program.display(), api = %self.api, pid, "gobgpd started");
        let last_lines = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(forward(stdout, self.api, Arc::clone(&last_lines)));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward(stderr, self.api, Arc::clone(&last_lines)));
        }
        Ok(Gobgpd {
            child,
            program: self.program,
            api: self.api,
            last_lines,
        })
    }
}

/// Asks Linux to SIGKILL the child when this process's spawning thread dies.
#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "Command::pre_exec is unsafe; see the SAFETY comment"
)]
fn die_with_parent(command: &mut Command) {
    let parent = rustix::process::getpid();
    // SAFETY: `pre_exec` runs the closure in the forked child before `exec`, where only
    // async-signal-safe work is allowed. The closure makes two raw system calls through
    // rustix (prctl(PR_SET_PDEATHSIG), getppid), allocates nothing, takes no lock, and its
    // errors are plain errnos (an `io::Error` from a raw OS error does not allocate).
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent died between fork and prctl: no signal would ever come.
            if rustix::process::getppid() != Some(parent) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
}

/// Forwards gobgpd's log lines to `tracing` at their own level (gobgpd runs at
/// `-l warn`; it still says "gobgpd started" at info) and keeps the last few for exit
/// errors.
async fn forward(
    output: impl AsyncRead + Unpin,
    api: SocketAddr,
    last_lines: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = BufReader::new(output).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        // Plain format: `time="…" level=warning msg="…" Key=…`.
        match line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("level="))
        {
            Some("debug" | "trace") => tracing::debug!(api = %api, line = %line, "gobgpd"),
            Some("info") => tracing::info!(api = %api, line = %line, "gobgpd"),
            Some("error" | "fatal" | "panic") => {
                tracing::error!(api = %api, line = %line, "gobgpd")
            }
            _ => tracing::warn!(api = %api, line = %line, "gobgpd"),
        }
        if let Ok(mut last) = last_lines.lock() {
            if last.len() == KEPT_LINES {
                last.pop_front();
            }
            last.push_back(line);
        }
    }
}

/// A running gobgpd child process, killed on drop.
#[derive(Debug)]
pub struct Gobgpd {
    child: Child,
    program: PathBuf,
    api: SocketAddr,
    last_lines: Arc<Mutex<VecDeque<String>>>,
}

impl Gobgpd {
    /// `gobgpd` from `PATH` with its API on `api` and `extra_args` after the built-in
    /// ones ([`GobgpdCommand`] for more).
    pub fn start(api: SocketAddr, extra_args: &[&str]) -> Result<Gobgpd, SpeakerError> {
        GobgpdCommand::new(api).args(extra_args).spawn()
    }

    /// The API address.
    pub fn api(&self) -> SocketAddr {
        self.api
    }

    /// The process id, while it runs.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until the API answers, and returns a client whose calls time out after
    /// `timeout`.
    ///
    /// # Errors
    /// [`SpeakerError::Exited`] (with gobgpd's last log lines) when gobgpd exits first,
    /// [`SpeakerError::NotReady`] when `timeout` passes.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<Speaker, SpeakerError> {
        let started = Instant::now();
        let deadline = started + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                // Let the forwarders read what it printed last.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(self.exited(&status));
            }
            let attempt = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(1));
            let last = match Speaker::connect(self.api, attempt).await {
                Ok(mut speaker) => match speaker.global().await {
                    Ok(_) => return Speaker::connect(self.api, timeout).await,
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(SpeakerError::NotReady {
                    api: self.api,
                    waited: started.elapsed(),
                    last,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `Some(description)` once gobgpd has exited (its status and last log lines).
    pub fn try_exited(&mut self) -> Option<String> {
        self.exit_status().map(|status| self.describe_exit(&status))
    }

    /// Waits until gobgpd exits and describes how (for a supervisor: a speaker that
    /// dies at run time stops every announcement).
    pub async fn wait_exited(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.describe_exit(&format!("{status}"))
            }
            Err(e) => format!("cannot wait for gobgpd: {}", chain(&e)),
        }
    }

    /// `Some(status)` once gobgpd has exited (`signal: 9 (SIGKILL)`), without its log
    /// lines ([`Gobgpd::last_output`] has them).
    pub fn try_exit_status(&mut self) -> Option<String> {
        self.exit_status()
    }

    /// Waits until gobgpd exits and returns its status alone (see
    /// [`Gobgpd::try_exit_status`]).
    pub async fn wait_exit_status(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => {
                // Let the forwarders read what it printed last.
                tokio::time::sleep(Duration::from_millis(50)).await;
                status.to_string()
            }
            Err(e) => format!("cannot wait for gobgpd: {}", chain(&e)),
        }
    }

    /// gobgpd's last few log lines, `|`-separated (for logs, not for status texts).
    pub fn last_output(&self) -> String {
        match self.last_lines.lock() {
            Ok(last) => last.iter().cloned().collect::<Vec<_>>().join(" | "),
            Err(_) => String::new(),
        }
    }

    /// Kills gobgpd and waits until it is gone.
    pub async fn stop(mut self) {
        if let Err(e) = self.child.kill().await {
            tracing::warn!(api = %self.api, error = %chain(&e), "cannot stop gobgpd");
        }
    }

    fn exit_status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait for it: {}", chain(&e))),
        }
    }

    fn exited(&self, status: &str) -> SpeakerError {
        SpeakerError::Exited {
            program: self.program.clone(),
            api: self.api,
            status: self.describe_exit(status),
        }
    }

    fn describe_exit(&self, status: &str) -> String {
        let lines: Vec<String> = match self.last_lines.lock() {
            Ok(last) => last.iter().cloned().collect(),
            Err(_) => Vec::new(),
        };
        if lines.is_empty() {
            status.to_string()
        } else {
            format!("{status}; it said: {}", lines.join(" | "))
        }
    }
}
