//! The keepalived the agent runs (`vrrp.keepalived.manage: true`, and always with
//! `pools:`): checked before the agent serves, then supervised until the agent exits.
//!
//! - [`prepare`] and [`prepare_pools`] (synchronous, at start): render the config
//!   (`pools:`: the one without a pool), write it, and run `keepalived --config-test` on
//!   it; a missing keepalived or a refused config is an error the binary turns into
//!   exit 64.
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
//! - [`Keepalived::reload`] (`pools:`, whenever the plan's pools change): the new config
//!   is checked (`keepalived --config-test`; a refused one changes nothing and is the
//!   caller's error), written in place of the old one, and keepalived is sent SIGHUP,
//!   once its pid file names it (a SIGHUP before keepalived set up its handlers would
//!   kill it). keepalived keeps every instance whose settings did not change as it was
//!   (a VIP stays where it is), adds the new ones and removes the others (priority 0:
//!   the peers take over at once).
//! - Each instance's VRRP state, from the lines keepalived logs (`(fedingress_gold)
//!   Entering MASTER STATE`), by instance ([`Keepalived::instance_states`]); a reload
//!   forgets the instances it removed, and a death all of them. [`Keepalived::subscribe`]
//!   changes with every state change, so the agent reports it at once.
//! - [`Keepalived::stop`] (on agent exit, before the drain): SIGTERM to the group, so
//!   keepalived sends priority 0 and the peer takes over at once, SIGKILL after 5 s.
//!
//! What does not belong here: the config text ([`super::render`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

use super::render::{self, Member, RenderError};
use crate::config::vrrp::{KeepalivedFiles, VirtualAddress, VrrpHost};
use crate::config::{Config, PoolsConfig, VrrpConfig};

/// The first restart delay; it doubles per death up to [`MAX_RESTART_DELAY`].
const FIRST_RESTART_DELAY: Duration = Duration::from_millis(500);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(30);
/// A keepalived that ran this long before dying restarts after the first delay again.
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// How long keepalived may take to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `keepalived --config-test` may take.
const CONFIG_TEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a pending reload looks for keepalived's pid file.
const RELOAD_POLL: Duration = Duration::from_millis(20);

/// What the supervisor needs, from the config.
#[derive(Clone, Debug)]
pub struct Settings {
    pub command: PathBuf,
    pub files: KeepalivedFiles,
    pub interface: String,
    /// The config written at start, and its virtual addresses.
    pub text: String,
    pub virtual_addresses: Vec<VirtualAddress>,
    /// `pools:`: the config follows the plan ([`Keepalived::reload`]), and the VRRP state
    /// metric has a `pool` label.
    pub pools: bool,
}

/// A config for [`Keepalived::reload`], from [`render::render_pools`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    pub text: String,
    /// Instance name → pool name.
    pub instances: BTreeMap<String, String>,
    pub addresses: Vec<VirtualAddress>,
}

/// Why a new config was not loaded (keepalived runs on with the one it has).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("running {} --config-test", command.display())]
    Run {
        command: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("keepalived --config-test took longer than {CONFIG_TEST_TIMEOUT:?}")]
    Timeout,
    #[error("keepalived --config-test refused it: {0}")]
    Refused(String),
}

/// Why keepalived cannot be run with this config; `section` is `vrrp` or `pools`.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("{section}: rendering keepalived's config")]
    Render {
        section: &'static str,
        #[source]
        source: RenderError,
    },
    #[error("{section}: the agent's own program path")]
    Program {
        section: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{section}.keepalived.configPath: writing {}", path.display())]
    Write {
        section: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{section}.keepalived.command: {} not found (Debian: apt-get install keepalived)",
        command.display()
    )]
    NotFound {
        section: &'static str,
        command: PathBuf,
    },
    #[error("{section}.keepalived.command: running {}", command.display())]
    Run {
        section: &'static str,
        command: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{section}: keepalived --config-test refused {}: {output}", path.display())]
    ConfigTest {
        section: &'static str,
        path: PathBuf,
        output: String,
    },
}

/// Renders `vrrp`'s keepalived config for this agent (its own program as the track
/// script), writes it to its path (directories created, written whole or not at all),
/// and runs `keepalived --config-test` on it.
///
/// # Errors
/// [`PrepareError`]: the config does not render or cannot be written, keepalived is
/// not there, or it refuses the config (its messages on one line).
pub fn prepare(config: &Config, vrrp: &VrrpConfig) -> Result<Settings, PrepareError> {
    let section = "vrrp";
    let program =
        std::env::current_exe().map_err(|source| PrepareError::Program { section, source })?;
    let text = render::render(vrrp, &config.cluster, &program, config.admin)
        .map_err(|source| PrepareError::Render { section, source })?;
    let mut settings = check(config, section, &vrrp.host, &text)?;
    settings
        .virtual_addresses
        .clone_from(&vrrp.virtual_addresses);
    Ok(settings)
}

/// [`prepare`] for `pools:`: the config of no pool (keepalived runs with nothing to do
/// until [`Keepalived::reload`] gives it the plan's pools).
///
/// # Errors
/// As [`prepare`].
pub fn prepare_pools(config: &Config, pools: &PoolsConfig) -> Result<Settings, PrepareError> {
    let section = "pools";
    let program =
        std::env::current_exe().map_err(|source| PrepareError::Program { section, source })?;
    let member = Member {
        cluster: &config.cluster,
        name: config.member.name(),
        address: config.member.address,
    };
    let rendered = render::render_pools(pools, &member, &[], &program, config.admin)
        .map_err(|source| PrepareError::Render { section, source })?;
    let mut settings = check(config, section, &pools.host, &rendered.text)?;
    settings.pools = true;
    Ok(settings)
}

/// Writes `text` to the config path of `host` (of `section`) and runs
/// `keepalived --config-test` on it.
fn check(
    config: &Config,
    section: &'static str,
    host: &VrrpHost,
    text: &str,
) -> Result<Settings, PrepareError> {
    let files = host.files(&config.state_dir);
    write_atomically(&files.config, text).map_err(|source| PrepareError::Write {
        section,
        path: files.config.clone(),
        source,
    })?;
    let command = host.keepalived.command.clone();
    let output = std::process::Command::new(&command)
        .arg("--config-test")
        .arg("-f")
        .arg(&files.config)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => PrepareError::NotFound {
                section,
                command: command.clone(),
            },
            _ => PrepareError::Run {
                section,
                command: command.clone(),
                source,
            },
        })?;
    if !output.status.success() {
        return Err(PrepareError::ConfigTest {
            section,
            path: files.config,
            output: messages(&output),
        });
    }
    Ok(Settings {
        command,
        files,
        interface: host.interface.clone(),
        text: text.to_owned(),
        virtual_addresses: Vec::new(),
        pools: false,
    })
}

/// keepalived's messages (stderr, then stdout) on one line, or its exit status.
fn messages(output: &std::process::Output) -> String {
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&output.stdout).lines())
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        lines.push(format!("{}", output.status));
    }
    lines.join("; ")
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
    /// The VRRP state keepalived last logged per instance (`MASTER`, `BACKUP`, `FAULT`).
    states: Mutex<BTreeMap<String, String>>,
    /// The config's instances → pools (`pools:`; empty otherwise).
    instances: Mutex<BTreeMap<String, String>>,
    /// The virtual addresses keepalived may hold (removed when it dies).
    addresses: Mutex<Addresses>,
    restarts: AtomicU64,
    /// Bumped whenever a state, the instances or the status changed.
    changes: watch::Sender<u64>,
}

impl Shared {
    fn set(&self, status: Status) {
        if let Ok(mut current) = self.status.lock() {
            *current = status;
        }
        self.changed();
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// `instance` entered `state`.
    fn set_state(&self, instance: &str, state: &str) {
        if let Ok(mut states) = self.states.lock() {
            states.insert(instance.to_owned(), state.to_owned());
        }
        self.changed();
    }

    /// Every state forgotten (keepalived died or stopped).
    fn clear_states(&self) {
        if let Ok(mut states) = self.states.lock() {
            states.clear();
        }
        self.changed();
    }
}

/// The virtual addresses of keepalived's configs.
#[derive(Debug, Default)]
struct Addresses {
    /// Of the config in place: what a keepalived started now holds.
    config: Vec<VirtualAddress>,
    /// Of the config keepalived was started with and of every one loaded since.
    held: Vec<VirtualAddress>,
}

/// A supervised keepalived (see the module docs).
#[derive(Debug)]
pub struct Keepalived {
    shared: Arc<Shared>,
    command: PathBuf,
    files: KeepalivedFiles,
    pools: bool,
    stop: watch::Sender<bool>,
    /// Bumped by [`Keepalived::reload`] once the new config is in place.
    reload: watch::Sender<u64>,
    /// The config text written last; held through a reload, so reloads run one at a time.
    written: tokio::sync::Mutex<Option<String>>,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Keepalived {
    /// Starts supervising keepalived with `settings` (from [`prepare`] or
    /// [`prepare_pools`]) on the current runtime.
    pub fn start(settings: Settings) -> Arc<Self> {
        let shared = Arc::new(Shared {
            status: Mutex::new(Status::Starting),
            states: Mutex::new(BTreeMap::new()),
            instances: Mutex::new(BTreeMap::new()),
            addresses: Mutex::new(Addresses {
                config: settings.virtual_addresses.clone(),
                held: Vec::new(),
            }),
            restarts: AtomicU64::new(0),
            changes: watch::Sender::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let (reload, reloads) = watch::channel(0u64);
        let (command, files, pools, text) = (
            settings.command.clone(),
            settings.files.clone(),
            settings.pools,
            settings.text.clone(),
        );
        let task = tokio::spawn(supervise(settings, Arc::clone(&shared), stopped, reloads));
        Arc::new(Keepalived {
            shared,
            command,
            files,
            pools,
            stop,
            reload,
            written: tokio::sync::Mutex::new(Some(text)),
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

    /// Makes keepalived run `desired` (see the module docs): checked, written in place of
    /// the running config, and loaded (SIGHUP) as soon as keepalived can take it. A
    /// config equal to the one written last changes nothing.
    ///
    /// # Errors
    /// [`ReloadError`]: it cannot be written, or keepalived refuses it (the running
    /// config stays, and so does the config file).
    pub async fn reload(&self, desired: Desired) -> Result<(), ReloadError> {
        let mut written = self.written.lock().await;
        if written.as_deref() == Some(desired.text.as_str()) {
            self.set_instances(&desired);
            return Ok(());
        }
        let mut candidate = self.files.config.as_os_str().to_owned();
        candidate.push(".new");
        let candidate = PathBuf::from(candidate);
        let text = desired.text.clone();
        let path = candidate.clone();
        tokio::task::spawn_blocking(move || write_atomically(&path, &text))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|written| written)
            .map_err(|source| ReloadError::Write {
                path: candidate.clone(),
                source,
            })?;
        let test = tokio::process::Command::new(&self.command)
            .arg("--config-test")
            .arg("-f")
            .arg(&candidate)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let tested = match tokio::time::timeout(CONFIG_TEST_TIMEOUT, test).await {
            Err(_) => Err(ReloadError::Timeout),
            Ok(Err(source)) => Err(ReloadError::Run {
                command: self.command.clone(),
                source,
            }),
            Ok(Ok(output)) if !output.status.success() => {
                Err(ReloadError::Refused(messages(&output)))
            }
            Ok(Ok(_)) => Ok(()),
        };
        if let Err(error) = tested {
            let _ = tokio::fs::remove_file(&candidate).await;
            return Err(error);
        }
        tokio::fs::rename(&candidate, &self.files.config)
            .await
            .map_err(|source| ReloadError::Write {
                path: self.files.config.clone(),
                source,
            })?;
        *written = Some(desired.text.clone());
        if let Ok(mut addresses) = self.shared.addresses.lock() {
            addresses.config.clone_from(&desired.addresses);
            for address in &desired.addresses {
                if !addresses.held.contains(address) {
                    addresses.held.push(*address);
                }
            }
        }
        self.set_instances(&desired);
        self.reload.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    /// Records `desired`'s instances, forgetting the states of the others.
    fn set_instances(&self, desired: &Desired) {
        if let Ok(mut states) = self.shared.states.lock() {
            states.retain(|instance, _| desired.instances.contains_key(instance));
        }
        if let Ok(mut instances) = self.shared.instances.lock() {
            if *instances == desired.instances {
                return;
            }
            instances.clone_from(&desired.instances);
        }
        self.shared.changed();
    }

    /// A channel whose value changes whenever a VRRP state, the instances or
    /// keepalived's status changed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    /// The VRRP state keepalived last logged (`MASTER`, `BACKUP`, `FAULT`), of the one
    /// instance of `vrrp:` (the first by name, should there be several).
    pub fn vrrp_state(&self) -> Option<String> {
        self.shared
            .states
            .lock()
            .ok()
            .and_then(|s| s.values().next().cloned())
    }

    /// The VRRP state keepalived last logged per instance.
    pub fn instance_states(&self) -> BTreeMap<String, String> {
        self.shared
            .states
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Per pool of the config loaded last ([`Keepalived::reload`]), its instance's VRRP
    /// state: the one keepalived last logged, `INIT` before it logged one.
    pub fn pool_states(&self) -> BTreeMap<String, String> {
        let instances = self
            .shared
            .instances
            .lock()
            .map(|i| i.clone())
            .unwrap_or_default();
        pool_states(&instances, &self.instance_states())
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
        let states = if self.pools {
            self.pool_states()
                .into_iter()
                .map(|(pool, state)| (Some(pool), Some(state)))
                .collect()
        } else {
            vec![(None, self.vrrp_state())]
        };
        for (pool, state) in states {
            let label = pool.map(|p| format!("pool=\"{p}\",")).unwrap_or_default();
            for name in ["MASTER", "BACKUP", "FAULT"] {
                let value = u8::from(state.as_deref() == Some(name));
                let _ = writeln!(
                    text,
                    "fedingress_agent_vrrp_state{{{label}state=\"{}\"}} {value}",
                    name.to_ascii_lowercase()
                );
            }
        }
        text
    }
}

/// The supervision loop: run, wait, clean up, back off, run again, until `stop`; and
/// while keepalived runs, a reload (SIGHUP) whenever `reloads` changes.
async fn supervise(
    settings: Settings,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    mut reloads: watch::Receiver<u64>,
) {
    let mut deaths = 0u32;
    loop {
        stop_stale(&settings.files).await;
        let started = Instant::now();
        // A keepalived started now reads the config in place now: only a reload from
        // here on needs a SIGHUP, and only that config's addresses are its.
        reloads.borrow_and_update();
        if let Ok(mut addresses) = shared.addresses.lock() {
            addresses.held = addresses.config.clone();
        }
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
                let mut pending_reload = false;
                loop {
                    tokio::select! {
                        status = child.wait() => {
                            let reason = match status {
                                Ok(status) => describe(status),
                                Err(error) => format!("waiting for it failed: {error}"),
                            };
                            shared.restarts.fetch_add(1, Ordering::Relaxed);
                            shared.clear_states();
                            tracing::error!(
                                pid,
                                reason = %reason,
                                "keepalived died; the virtual addresses go to the peer until it runs again"
                            );
                            stop_group(pid).await;
                            release_addresses(&settings.interface, &shared).await;
                            break reason;
                        }
                        () = stopped(&mut stop) => {
                            terminate(&mut child, pid).await;
                            shared.set(Status::Stopped);
                            shared.clear_states();
                            return;
                        }
                        changed = reloads.changed() => {
                            if changed.is_ok() {
                                reloads.borrow_and_update();
                                pending_reload = true;
                            }
                        }
                        () = tokio::time::sleep(RELOAD_POLL), if pending_reload => {
                            // SIGHUP kills a keepalived that has not set up its handlers
                            // yet: wait until it wrote its pid file.
                            if pid_file_names(&settings.files.pid, pid).await {
                                pending_reload = false;
                                signal(pid, rustix::process::Signal::HUP);
                                tracing::info!(pid, config = %settings.files.config.display(), "keepalived reloading its config");
                            }
                        }
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

/// Per pool of `instances` (instance → pool), its instance's state in `states`
/// (instance → state), `INIT` when keepalived has not announced one.
fn pool_states(
    instances: &BTreeMap<String, String>,
    states: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    instances
        .iter()
        .map(|(instance, pool)| {
            let state = states.get(instance).map_or("INIT", String::as_str);
            (pool.clone(), state.to_owned())
        })
        .collect()
}

/// Whether keepalived's pid file names `pid`.
async fn pid_file_names(path: &Path, pid: u32) -> bool {
    tokio::fs::read_to_string(path)
        .await
        .is_ok_and(|text| text.trim().parse::<u32>().ok() == Some(pid))
}

/// Sends `signal` to process `pid` (not its group).
fn signal(pid: u32, signal: rustix::process::Signal) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|pid| rustix::process::kill_process(pid, signal).is_ok())
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

/// Logs keepalived's output line by line and follows the VRRP states it announces.
fn forward_output(child: &mut tokio::process::Child, pid: u32, shared: &Arc<Shared>) {
    fn follow(stream: impl AsyncRead + Unpin + Send + 'static, pid: u32, shared: Arc<Shared>) {
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line = strip_timestamp(&line);
                if let Some((instance, state)) = announced_state(line) {
                    shared.set_state(instance, state);
                    tracing::info!(pid, instance, state, "vrrp state");
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

/// The instance and state in `(fedingress_51) Entering MASTER STATE`, if the line says
/// one.
fn announced_state(line: &str) -> Option<(&str, &str)> {
    let (head, rest) = line.split_once("Entering ")?;
    let (state, tail) = rest.split_once(' ')?;
    if !tail.starts_with("STATE") || !["MASTER", "BACKUP", "FAULT"].contains(&state) {
        return None;
    }
    let instance = head.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some((instance, state))
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

/// Removes the virtual addresses keepalived may have held from `interface` (`ip addr
/// del`), where a keepalived that died without cleaning up left them: this host stops
/// answering for them.
async fn release_addresses(interface: &str, shared: &Shared) {
    let held = shared
        .addresses
        .lock()
        .map(|a| a.held.clone())
        .unwrap_or_default();
    for address in &held {
        let shown = address.to_string();
        let output = tokio::process::Command::new("ip")
            .args(["addr", "del", &shown, "dev", interface])
            .stdin(Stdio::null())
            .output()
            .await;
        match output {
            Ok(output) if output.status.success() => {
                tracing::warn!(address = %shown, interface, "removed a virtual address keepalived left behind");
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
    fn states_map_to_pools_by_instance() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let instances = map(&[
            ("fedingress_gold", "gold"),
            ("fedingress_eu_x", "eu x"),
            ("fedingress_new", "new"),
        ]);
        let mut states = map(&[
            ("fedingress_gold", "MASTER"),
            ("fedingress_eu_x", "BACKUP"),
            // An instance of a config no longer loaded is no pool's.
            ("fedingress_gone", "MASTER"),
        ]);
        let line =
            strip_timestamp("Tue Nov 24 14:01:55 2026: (fedingress_gold) Entering FAULT STATE");
        let (instance, state) = announced_state(line).unwrap();
        states.insert(instance.to_owned(), state.to_owned());
        assert_eq!(
            pool_states(&instances, &states),
            map(&[("gold", "FAULT"), ("eu x", "BACKUP"), ("new", "INIT")])
        );
    }

    #[test]
    fn log_lines() {
        let line =
            strip_timestamp("Tue Nov 24 14:01:55 2026: (fedingress_51) Entering MASTER STATE");
        assert_eq!(line, "(fedingress_51) Entering MASTER STATE");
        assert_eq!(announced_state(line), Some(("fedingress_51", "MASTER")));
        assert_eq!(
            announced_state("(fedingress_51) Entering BACKUP STATE (init)"),
            Some(("fedingress_51", "BACKUP"))
        );
        assert_eq!(
            announced_state("(fedingress_gold-1.eu) Entering FAULT STATE"),
            Some(("fedingress_gold-1.eu", "FAULT"))
        );
        assert_eq!(announced_state("Entering MASTER mode"), None);
        assert_eq!(
            announced_state("Entering MASTER STATE"),
            None,
            "no instance"
        );
        assert_eq!(strip_timestamp("no stamp: here"), "no stamp: here");
        assert_eq!(
            strip_timestamp("Tue Nov  4 14:01:55 2026: x"),
            "x",
            "a padded day of the month"
        );
    }
}
