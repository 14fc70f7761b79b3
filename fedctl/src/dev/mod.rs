//! `fedctl dev`: a complete local federation in one command, for trying fedingress out.
//!
//! `dev up` finds `federation-apiserver` and `cluster-agent` next to its own executable
//! and starts, in a state dir (default `.fedingress/dev`, wiped at each start):
//! - three echo backends (fedctl itself, `dev echo`) on 127.0.N.21-23;
//! - a federation-apiserver in dev mode with the embedded store and the embedded DNS
//!   server (127.0.N.1: API 6443, agents 6444, DNS 5353), with a location table of
//!   three client regions (10.1/16 Europe, 10.2/16 US east, 10.3/16 India);
//! - three clusters in those regions serving on 127.0.N.11-13: Cluster objects, agent
//!   tokens, agent configs and standalone agents;
//!
//! then writes a kubeconfig, applies `deploy/examples/echo.yaml` (built in), waits until
//! DNS steers each region to its nearest cluster, prints commands to try (each one is run
//! by the tests exactly as printed), and keeps running until SIGINT/SIGTERM, when it
//! stops every process it started, by PID. `dev down` stops a federation whose `dev up`
//! is gone (or asks the running one to stop); `dev backend stop|start CLUSTER` stops or
//! restarts one cluster's backend and waits until DNS has moved.
//!
//! `dev up --ha` starts one etcd member (`etcd` from PATH) instead of the embedded store,
//! and three apiserver replicas on it, r1-r3 on 127.0.N.1-3 (the same ports on each), all
//! serving the API, the agent gateway and DNS; the zone lists ns1-ns3, one per replica,
//! the agents know every replica's gateway, the kubeconfig has a context per replica, and
//! the commands to try end with killing r1 and watching nothing change.

mod echo;
mod etcd;
mod pki;
mod process;
mod state;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fedingress_api::{Cluster, FederatedIngress};
use serde_json::{Value, json};

use self::process::{Proc, Started};
use self::state::{Replica, State};
use crate::Ctx;
use crate::cli::{BackendCommand, DevCommand, DevUpArgs};
use crate::client::{Api, cluster_path, decode, ingress_path, token_path};
use crate::files::write_private;
use crate::kubeconfig;
use crate::progress::{Step, Stream};

/// The FederatedIngresses `dev up` applies.
const ECHO_YAML: &str = include_str!("../../../deploy/examples/echo.yaml");
/// Port of the echo service (TCP and UDP) on every cluster, from `echo.yaml`.
const ECHO_PORT: u16 = 7777;
/// Port of the HTTP rule, from `echo.yaml`.
const HTTP_PORT: u16 = 8080;
const HTTP_HOST: &str = "web.fedingress.test";
const ECHO_DNS_NAME: &str = "echo.fedingress.test";
/// Ports of every backend: TCP+UDP echo and HTTP.
const BACKEND_PORT: u16 = 9000;
const BACKEND_HTTP_PORT: u16 = 9080;
const DEFAULT_STATE_DIR: &str = ".fedingress/dev";

/// A dev cluster and the client region it is nearest to.
struct Member {
    name: &'static str,
    region: &'static str,
    latitude: f64,
    longitude: f64,
    provider: &'static str,
    /// Second octet of the region's client subnet in the location table (10.X/16).
    subnet: u8,
}

const MEMBERS: [Member; 3] = [
    Member {
        name: "eu-west",
        region: "europe-west1",
        latitude: 50.45,
        longitude: 3.82,
        provider: "gcp",
        subnet: 1,
    },
    Member {
        name: "us-east",
        region: "us-east1",
        latitude: 39.04,
        longitude: -77.49,
        provider: "aws",
        subnet: 2,
    },
    Member {
        name: "ap-south",
        region: "asia-south1",
        latitude: 19.07,
        longitude: 72.87,
        provider: "azure",
        subnet: 3,
    },
];

fn member(name: &str) -> anyhow::Result<(usize, &'static Member)> {
    MEMBERS
        .iter()
        .enumerate()
        .find(|(_, m)| m.name == name)
        .ok_or_else(|| {
            crate::UsageError(format!(
                "{name:?} is not a dev cluster (eu-west, us-east, ap-south)"
            ))
            .into()
        })
}

/// The address of apiserver replica `index` (0 for the only one).
fn replica_ip(block: u8, index: usize) -> String {
    format!("127.0.{block}.{}", 1 + index)
}

/// The order processes stop in: the agents, the apiservers, etcd (once nothing uses
/// it), the backends.
const STOP_ORDER: [&str; 4] = ["agent", "apiserver", "etcd", "backend"];

/// An apiserver replica `dev up` starts: `apiserver` (context `fedingress-dev`), or
/// r1-r3 with `--ha` (contexts named after them).
struct Planned {
    index: usize,
    name: &'static str,
    context: &'static str,
    ip: String,
}

const HA_REPLICAS: [&str; 3] = ["r1", "r2", "r3"];

fn planned_replicas(args: &DevUpArgs) -> Vec<Planned> {
    if !args.ha {
        return vec![Planned {
            index: 0,
            name: "apiserver",
            context: "fedingress-dev",
            ip: replica_ip(args.block, 0),
        }];
    }
    HA_REPLICAS
        .iter()
        .enumerate()
        .map(|(index, name)| Planned {
            index,
            name,
            context: name,
            ip: replica_ip(args.block, index),
        })
        .collect()
}

fn cluster_ip(block: u8, index: usize) -> String {
    format!("127.0.{block}.{}", 11 + index)
}

fn backend_ip(block: u8, index: usize) -> String {
    format!("127.0.{block}.{}", 21 + index)
}

/// A client address in the member's region (for explain).
fn region_client(m: &Member) -> String {
    format!("10.{}.0.1", m.subnet)
}

pub async fn run(_ctx: &Ctx, command: DevCommand) -> anyhow::Result<()> {
    match command {
        DevCommand::Up(args) => up(args).await,
        DevCommand::Down(arg) => down(&arg.state_dir).await,
        DevCommand::Backend(BackendCommand::Stop(args)) => {
            backend(&args.state.state_dir, &args.cluster, false).await
        }
        DevCommand::Backend(BackendCommand::Start(args)) => {
            backend(&args.state.state_dir, &args.cluster, true).await
        }
        DevCommand::Echo(args) => echo::run(args).await,
    }
}

/// How a path is shown in commands: relative to the current directory when under it.
fn shown(path: &Path) -> String {
    if let Ok(cwd) = std::env::current_dir()
        && let Ok(relative) = path.strip_prefix(&cwd)
    {
        return relative.display().to_string();
    }
    path.display().to_string()
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .context("reading the current directory")?
            .join(path)
    })
}

/// How to run this fedctl in printed commands: `fedctl` when that is the one on PATH,
/// else its path (relative to the current directory when under it).
fn fedctl_command(exe: &Path) -> String {
    let on_path = std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            dir.join("fedctl")
                .canonicalize()
                .is_ok_and(|p| exe.canonicalize().is_ok_and(|e| e == p))
        })
    });
    if on_path { "fedctl".into() } else { shown(exe) }
}

/// Our own command line, so that `dev down` can tell it is still us.
fn own_proc() -> Proc {
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let mut argv = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned());
    Proc {
        role: "fedctl".into(),
        name: "dev up".into(),
        pid: Some(std::process::id()),
        exe: PathBuf::from(argv.next().unwrap_or_default()),
        args: argv.collect(),
        log: PathBuf::new(),
    }
}

/// Processes started by `dev up`, with their `Child`s for reaping.
struct Supervisor {
    dir: PathBuf,
    state: State,
    children: HashMap<u32, Child>,
}

impl Supervisor {
    fn add(&mut self, started: Started) -> anyhow::Result<Value> {
        if let (Some(pid), Some(child)) = (started.proc.pid, started.child) {
            self.children.insert(pid, child);
        }
        self.state.processes.push(started.proc);
        self.state.save(&self.dir)?;
        Ok(started.ready)
    }

    /// Stops every process in [`STOP_ORDER`], including backends restarted by `dev
    /// backend start` since; returns what was stopped.
    fn stop_all(&mut self) -> Vec<String> {
        if let Ok(Some(on_disk)) = State::load(&self.dir) {
            for proc in on_disk.processes {
                if !self.state.processes.contains(&proc) {
                    self.state.processes.push(proc);
                }
            }
        }
        let mut stopped = Vec::new();
        for role in STOP_ORDER {
            for proc in self.state.processes.iter().filter(|p| p.role == role) {
                let child = proc.pid.and_then(|pid| self.children.get_mut(&pid));
                if process::stop(proc, child, Duration::from_secs(5)) {
                    stopped.push(format!(
                        "{} ({})",
                        proc.label(),
                        proc.pid.unwrap_or_default()
                    ));
                }
            }
        }
        State::remove(&self.dir);
        stopped
    }

    /// Processes (not backends: those are stopped on purpose) that died, with how
    /// (a signal, else the last line they logged).
    fn dead(&mut self) -> Vec<(Proc, String)> {
        use std::os::unix::process::ExitStatusExt as _;
        let mut dead = Vec::new();
        for proc in &self.state.processes {
            let Some(pid) = proc.pid else { continue };
            if proc.role == "backend" {
                // Stopped on purpose by `dev backend stop`: reap, do not report.
                if let Some(child) = self.children.get_mut(&pid) {
                    let _ = child.try_wait();
                }
                continue;
            }
            let how = match self.children.get_mut(&pid) {
                Some(child) => match child.try_wait() {
                    Ok(None) => None,
                    Ok(Some(status)) => Some(match status.signal() {
                        Some(signal) => format!("killed by signal {signal}"),
                        None => process::last_line(&proc.log, 0),
                    }),
                    Err(_) => Some(process::last_line(&proc.log, 0)),
                },
                None => (!process::alive(proc)).then(|| process::last_line(&proc.log, 0)),
            };
            if let Some(how) = how {
                dead.push((proc.clone(), how));
            }
        }
        dead
    }

    /// The apiserver replicas that still run, by name.
    fn live_replicas(&self) -> Vec<String> {
        self.state
            .processes
            .iter()
            .filter(|p| p.role == "apiserver" && process::alive(p))
            .map(|p| p.name.clone())
            .collect()
    }
}

/// Set by SIGINT/SIGTERM.
#[derive(Clone, Default)]
struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    fn check(&self) -> anyhow::Result<()> {
        if self.0.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok(())
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

async fn start_process(
    role: &str,
    name: &str,
    exe: &Path,
    args: Vec<String>,
    log: &Path,
) -> anyhow::Result<Started> {
    let (role, name, exe, log) = (
        role.to_string(),
        name.to_string(),
        exe.to_path_buf(),
        log.to_path_buf(),
    );
    tokio::task::spawn_blocking(move || {
        process::start(&role, &name, &exe, args, &log, Duration::from_secs(30))
    })
    .await
    .context("starting a process")?
}

async fn up(args: DevUpArgs) -> anyhow::Result<()> {
    // Before touching anything: `--ha` needs etcd.
    let etcd = if args.ha { Some(etcd::find()?) } else { None };
    let shown_dir = args.state.state_dir.display().to_string();
    let dir = absolute(&args.state.state_dir)?;
    create_state_dir(&dir)?;
    stop_earlier_run(&dir, &shown_dir, &args.state.state_dir)?;
    let binaries = locate_binaries(etcd)?;
    clear_run_dirs(&dir)?;
    let (interrupt, notify) = watch_signals()?;

    let mut supervisor = Supervisor {
        dir: dir.clone(),
        state: State {
            supervisor: Some(own_proc()),
            block: args.block,
            kubeconfig: dir.join("kubeconfig"),
            ..State::default()
        },
        children: HashMap::new(),
    };
    supervisor.state.save(&dir)?;
    println!("fedctl dev up: a local federation in {shown_dir}");
    let started = Instant::now();
    let result = start_all(&args, &dir, &binaries, &mut supervisor, &interrupt).await;
    let http_served = match result {
        Ok(http_served) => http_served,
        Err(e) => {
            let stopped = supervisor.stop_all();
            if interrupt.is_set() {
                println!("Interrupted: stopped {} processes.", stopped.len());
                return Ok(());
            }
            return Err(e.context(format!(
                "the dev federation did not come up (logs: {}/logs; stopped {} processes)",
                shown_dir,
                stopped.len()
            )));
        }
    };
    let replicas = if args.ha {
        replica_steps(&supervisor.state)
    } else {
        Vec::new()
    };
    print!(
        "{}",
        next_steps(&NextSteps {
            fedctl: fedctl_command(&binaries.fedctl),
            state_dir: args.state.state_dir.clone(),
            kubeconfig: format!("{}/kubeconfig", shown_dir.trim_end_matches('/')),
            block: args.block,
            dns: supervisor.state.dns.clone(),
            http_served,
            started_in: started.elapsed(),
            replicas,
        })
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();

    report_deaths_until_interrupted(&mut supervisor, &interrupt, &notify, args.ha).await;
    println!();
    println!("Stopping the dev federation…");
    let stopped = supervisor.stop_all();
    println!(
        "Stopped {} processes: {}.",
        stopped.len(),
        stopped.join(", ")
    );
    Ok(())
}

/// Creates the state directory. Tokens, keys and the kubeconfig live below: owner only.
fn create_state_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("restricting {} to its owner", dir.display()))?;
    Ok(())
}

/// Refuses while an earlier `dev up` from `dir` still runs; otherwise stops the
/// processes a dead one left and forgets its state.
fn stop_earlier_run(dir: &Path, shown_dir: &str, state_dir: &Path) -> anyhow::Result<()> {
    if let Some(state) = State::load(dir)? {
        if state.supervisor.as_ref().is_some_and(process::alive) {
            bail!(
                "a dev federation is already running from {shown_dir} (fedctl PID {}): stop it with Ctrl-C there, or `fedctl dev down{}`",
                state.supervisor.and_then(|s| s.pid).unwrap_or_default(),
                state_flag(state_dir)
            );
        }
        let mut leftovers = 0;
        for proc in &state.processes {
            if process::stop(proc, None, Duration::from_secs(5)) {
                leftovers += 1;
            }
        }
        if leftovers > 0 {
            println!("Stopped {leftovers} processes left by an earlier `fedctl dev up`.");
        }
        State::remove(dir);
    }
    Ok(())
}

/// The binaries to run: the hub's and the agent's next to fedctl's own (both must be
/// there), and etcd with `--ha`.
fn locate_binaries(etcd: Option<PathBuf>) -> anyhow::Result<Binaries> {
    let exe = std::env::current_exe().context("locating fedctl's own executable")?;
    let bin_dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let binaries = Binaries {
        apiserver: bin_dir.join("federation-apiserver"),
        agent: bin_dir.join("cluster-agent"),
        fedctl: exe,
        etcd,
    };
    for binary in [&binaries.apiserver, &binaries.agent] {
        if !binary.is_file() {
            bail!(
                "{} not found next to fedctl: build every binary first (cargo build --release --bins)",
                binary.display()
            );
        }
    }
    Ok(binaries)
}

/// Clears what an earlier run left in `dir` (hub data, etcd, clusters, logs) and creates
/// the logs and clusters directories afresh.
fn clear_run_dirs(dir: &Path) -> anyhow::Result<()> {
    for sub in ["hub-data", "etcd", "clusters", "logs"] {
        let path = dir.join(sub);
        if path.exists() {
            std::fs::remove_dir_all(&path)
                .with_context(|| format!("clearing {}", path.display()))?;
        }
    }
    std::fs::create_dir_all(dir.join("logs"))?;
    std::fs::create_dir_all(dir.join("clusters"))?;
    Ok(())
}

/// An [`Interrupt`] set, and a notification sent, on SIGTERM or SIGINT.
fn watch_signals() -> anyhow::Result<(Interrupt, Arc<tokio::sync::Notify>)> {
    let interrupt = Interrupt::default();
    let notify = Arc::new(tokio::sync::Notify::new());
    {
        let interrupt = interrupt.clone();
        let notify = notify.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            interrupt.0.store(true, Ordering::Relaxed);
            notify.notify_waiters();
            notify.notify_one();
        });
    }
    Ok((interrupt, notify))
}

/// Each hub replica's name, DNS address and PID, for the next steps.
fn replica_steps(state: &State) -> Vec<ReplicaStep> {
    state
        .replicas
        .iter()
        .map(|r| ReplicaStep {
            name: r.name.clone(),
            dns: r.dns.clone(),
            pid: state
                .processes
                .iter()
                .find(|p| p.role == "apiserver" && p.name == r.name)
                .and_then(|p| p.pid)
                .unwrap_or_default(),
        })
        .collect()
}

/// Runs until interrupted, reporting processes that die (once each) and, with `--ha`,
/// which hub replicas still serve.
async fn report_deaths_until_interrupted(
    supervisor: &mut Supervisor,
    interrupt: &Interrupt,
    notify: &tokio::sync::Notify,
    ha: bool,
) {
    let mut reported: Vec<u32> = Vec::new();
    while !interrupt.is_set() {
        tokio::select! {
            _ = notify.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        for (proc, how) in supervisor.dead() {
            let pid = proc.pid.unwrap_or_default();
            if !reported.contains(&pid) {
                reported.push(pid);
                let live = supervisor.live_replicas();
                let others = if proc.role == "apiserver" && ha && !live.is_empty() {
                    let verb = if live.len() == 1 { "serves" } else { "serve" };
                    format!("; {} still {verb}", live.join(" and "))
                } else {
                    String::new()
                };
                println!("! {} (PID {pid}) exited: {how}{others}", proc.label());
            }
        }
    }
}

fn state_flag(dir: &Path) -> String {
    if dir == Path::new(DEFAULT_STATE_DIR) {
        String::new()
    } else {
        format!(" --state-dir {}", dir.display())
    }
}

fn label(text: &str) -> String {
    format!("{text:<15}")
}

/// The executables `dev up` runs.
struct Binaries {
    fedctl: PathBuf,
    apiserver: PathBuf,
    agent: PathBuf,
    /// With `--ha`.
    etcd: Option<PathBuf>,
}

/// Starts everything; returns whether the HTTP sample is served.
async fn start_all(
    args: &DevUpArgs,
    dir: &Path,
    binaries: &Binaries,
    supervisor: &mut Supervisor,
    interrupt: &Interrupt,
) -> anyhow::Result<bool> {
    let mut up = BringUp {
        args,
        dir,
        binaries,
        supervisor,
        interrupt,
        deadline: Instant::now() + args.timeout,
    };
    up.echo_backends().await?;
    let etcd_url = up.etcd().await?;
    let federation = up.apiservers(etcd_url.as_deref()).await?;
    let api = Api::new(&kubeconfig::load(
        std::slice::from_ref(&federation.kubeconfig),
        None,
    )?)?;
    up.clusters(&api, &federation).await?;
    up.agents(&api).await?;
    up.sample_service(&api).await?;
    up.dns_steering(&federation).await?;
    up.http(&api).await
}

/// `dev up`'s bring-up, one method per step, in the order [`start_all`] runs them; each
/// step prints its own progress line.
struct BringUp<'a> {
    args: &'a DevUpArgs,
    dir: &'a Path,
    binaries: &'a Binaries,
    supervisor: &'a mut Supervisor,
    interrupt: &'a Interrupt,
    /// For everything the bring-up waits on.
    deadline: Instant,
}

/// What the apiserver step leaves for the later steps.
struct Federation {
    /// In start order; the first is the default.
    replicas: Vec<Replica>,
    /// Every replica's agent gateway, as the agents are told.
    gateways: Vec<String>,
    kubeconfig: PathBuf,
    pki: pki::DevPki,
}

impl BringUp<'_> {
    /// Step 1: the echo backends.
    async fn echo_backends(&mut self) -> anyhow::Result<()> {
        let block = self.args.block;
        let step = Step::start(Stream::Stdout, label("echo backends"), false);
        for (i, m) in MEMBERS.iter().enumerate() {
            self.interrupt.check()?;
            let ip = backend_ip(block, i);
            let started = start_process(
                "backend",
                m.name,
                &self.binaries.fedctl,
                vec![
                    "dev".into(),
                    "echo".into(),
                    "--name".into(),
                    m.name.into(),
                    "--listen".into(),
                    format!("{ip}:{BACKEND_PORT}"),
                    "--http".into(),
                    format!("{ip}:{BACKEND_HTTP_PORT}"),
                ],
                &self
                    .dir
                    .join("logs")
                    .join(format!("backend-{}.log", m.name)),
            )
            .await;
            match started {
                Ok(started) => {
                    self.supervisor.add(started)?;
                }
                Err(e) => {
                    step.fail("");
                    return Err(e);
                }
            }
        }
        step.done(&format!(
            "{} (TCP+UDP :{BACKEND_PORT}, HTTP :{BACKEND_HTTP_PORT})",
            MEMBERS
                .iter()
                .enumerate()
                .map(|(i, m)| format!("{} {}", m.name, backend_ip(block, i)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        Ok(())
    }

    /// Step 2: with --ha, etcd: one member on loopback, its data in the state dir. Returns its
    /// client URL.
    async fn etcd(&mut self) -> anyhow::Result<Option<String>> {
        let Some(exe) = &self.binaries.etcd else {
            return Ok(None);
        };
        let dir = self.dir;
        self.interrupt.check()?;
        let step = Step::start(Stream::Stdout, label("etcd"), false);
        let member = etcd::Member::on(&replica_ip(self.args.block, 0), &dir.join("etcd"))?;
        let exe = exe.clone();
        let log = dir.join("logs").join("etcd.log");
        let started =
            tokio::task::spawn_blocking(move || member.start(&exe, &log, Duration::from_secs(30)))
                .await
                .context("starting etcd")?;
        let started = match started {
            Ok(started) => started,
            Err(e) => {
                step.fail("");
                return Err(e);
            }
        };
        let ready = self.supervisor.add(started)?;
        let url = ready["client"].as_str().unwrap_or_default().to_string();
        self.supervisor.state.etcd = Some(url.clone());
        self.supervisor.state.save(dir)?;
        step.done(&format!("{url} (data {}/etcd)", shown(dir)));
        Ok(Some(url))
    }

    /// Step 3: the apiserver(s) with the embedded DNS server: the embedded store, or etcd at
    /// `etcd_url`. Then the kubeconfig, a context per replica.
    async fn apiservers(&mut self, etcd_url: Option<&str>) -> anyhow::Result<Federation> {
        let (args, dir) = (self.args, self.dir);
        let planned = planned_replicas(args);
        // The agent gateway speaks TLS (the agents authenticate with client certificates);
        // the API stays plain HTTP on loopback.
        let pki = pki::generate(
            dir,
            &planned.iter().map(|r| r.ip.clone()).collect::<Vec<_>>(),
        )?;
        let step = Step::start(
            Stream::Stdout,
            label(if args.ha { "apiservers" } else { "apiserver" }),
            false,
        );
        for replica in &planned {
            self.interrupt.check()?;
            let (command, log) = self.write_apiserver_config(replica, etcd_url, &pki)?;
            let started = match start_process(
                "apiserver",
                replica.name,
                &self.binaries.apiserver,
                command,
                &log,
            )
            .await
            {
                Ok(started) => started,
                Err(e) => {
                    step.fail("");
                    return Err(e);
                }
            };
            self.record_replica(replica, started)?;
        }
        let replicas = self.supervisor.state.replicas.clone();
        let Some(first) = replicas.first() else {
            bail!("no apiserver replica started");
        };
        let state = &mut self.supervisor.state;
        state.api = first.api.clone();
        state.agent_gateway = first.agent_gateway.clone();
        state.dns = first.dns.clone();
        state.save(dir)?;
        let gateways: Vec<String> = replicas.iter().map(|r| r.agent_gateway.clone()).collect();
        let kubeconfig = write_kubeconfig(dir, &replicas, &gateways)?;
        step.done(&apiservers_summary(args.ha, &replicas, dir));
        Ok(Federation {
            replicas,
            gateways,
            kubeconfig,
            pki,
        })
    }

    /// Writes `replica`'s config file; returns its command line and its log file.
    fn write_apiserver_config(
        &self,
        replica: &Planned,
        etcd_url: Option<&str>,
        pki: &pki::DevPki,
    ) -> anyhow::Result<(Vec<String>, PathBuf)> {
        let (args, dir) = (self.args, self.dir);
        let (config, log) = if args.ha {
            (
                dir.join(format!("apiserver-{}.yaml", replica.name)),
                dir.join("logs")
                    .join(format!("apiserver-{}.log", replica.name)),
            )
        } else {
            (
                dir.join("apiserver.yaml"),
                dir.join("logs").join("apiserver.log"),
            )
        };
        std::fs::write(
            &config,
            apiserver_config(args, dir, replica.index, etcd_url) + &gateway_tls_config(pki),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        let mut command = vec!["--config".to_string(), config.display().to_string()];
        if args.ha {
            // Its name in leader election and in the agent records the replicas share.
            command.extend(["--replica-name".to_string(), replica.name.to_string()]);
        }
        Ok((command, log))
    }

    /// Supervises a started apiserver and records where it serves.
    fn record_replica(&mut self, replica: &Planned, started: Started) -> anyhow::Result<()> {
        let ready = self.supervisor.add(started)?;
        let text = |key: &str| ready[key].as_str().unwrap_or_default().to_string();
        self.supervisor.state.replicas.push(Replica {
            name: replica.name.to_string(),
            context: replica.context.to_string(),
            api: format!("http://{}", text("api")),
            agent_gateway: format!("https://{}", text("agent")),
            dns: text("dns"),
        });
        self.supervisor.state.save(self.dir)
    }

    /// Step 4: the clusters: objects, tokens and agent configs.
    async fn clusters(&mut self, api: &Api, federation: &Federation) -> anyhow::Result<()> {
        let (block, dir) = (self.args.block, self.dir);
        let step = Step::start(Stream::Stdout, label("clusters"), false);
        for (i, m) in MEMBERS.iter().enumerate() {
            self.interrupt.check()?;
            let body = json!({
                "apiVersion": fedingress_api::API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": m.name, "labels": {"env": "dev", "provider": m.provider}},
                "spec": {
                    "region": m.region,
                    "location": {"latitude": m.latitude, "longitude": m.longitude},
                    "provider": m.provider,
                    "capacity": {"rps": 1000, "connections": 10000},
                },
            });
            api.post(&cluster_path(None), &body).await?;
            // A join token: the agent trades it for a client certificate (mTLS).
            let token = api
                .post_empty(&format!("{}?type=join", token_path(m.name, None)))
                .await?;
            let cluster_dir = dir.join("clusters").join(m.name);
            std::fs::create_dir_all(&cluster_dir)?;
            write_private(
                &cluster_dir.join("join-token"),
                format!("{}\n", token["token"].as_str().unwrap_or_default()).as_bytes(),
            )?;
            std::fs::write(
                cluster_dir.join("agent.yaml"),
                certificate_agent_config(
                    &agent_config(m, i, block, &federation.gateways),
                    &federation.pki.ca,
                ),
            )?;
        }
        step.done(
            &MEMBERS
                .iter()
                .enumerate()
                .map(|(i, m)| format!("{} ({}) {}", m.name, m.region, cluster_ip(block, i)))
                .collect::<Vec<_>>()
                .join(", "),
        );
        Ok(())
    }

    /// Step 4 (cont.): the agents, until every one is connected.
    async fn agents(&mut self, api: &Api) -> anyhow::Result<()> {
        let step = Step::start(Stream::Stdout, label("agents"), false);
        for m in &MEMBERS {
            self.interrupt.check()?;
            let config = self.dir.join("clusters").join(m.name).join("agent.yaml");
            let started = match start_process(
                "agent",
                m.name,
                &self.binaries.agent,
                vec!["--config".into(), config.display().to_string()],
                &self.dir.join("logs").join(format!("agent-{}.log", m.name)),
            )
            .await
            {
                Ok(started) => started,
                Err(e) => {
                    step.fail("");
                    return Err(e);
                }
            };
            self.supervisor.add(started)?;
        }
        loop {
            self.interrupt.check()?;
            let clusters = api.get(&cluster_path(None), &[]).await?;
            let connected = clusters["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["status"]["connected"] == true)
                .count();
            if connected == MEMBERS.len() {
                break;
            }
            if Instant::now() >= self.deadline {
                step.fail("");
                bail!(
                    "only {connected} of {} agents connected in time",
                    MEMBERS.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        step.done(&format!("{} connected", MEMBERS.len()));
        Ok(())
    }

    /// Step 5: the sample service.
    async fn sample_service(&mut self, api: &Api) -> anyhow::Result<()> {
        self.interrupt.check()?;
        let step = Step::start(Stream::Stdout, label("sample service"), false);
        let applied = apply(api, ECHO_YAML).await?;
        step.done(&format!(
            "deploy/examples/echo.yaml: {}",
            applied.join(", ")
        ));
        Ok(())
    }

    /// Step 6, routing: every region gets its nearest cluster, from every replica.
    /// Explain answers from the snapshot each replica's DNS server serves.
    async fn dns_steering(&mut self, federation: &Federation) -> anyhow::Result<()> {
        let mut replica_apis = Vec::new();
        for replica in &federation.replicas {
            let connection = kubeconfig::load(
                std::slice::from_ref(&federation.kubeconfig),
                Some(&replica.context),
            )?;
            replica_apis.push((replica.name.clone(), Api::new(&connection)?));
        }
        let step = Step::start(Stream::Stdout, label("DNS steering"), false);
        loop {
            self.interrupt.check()?;
            let Some(pending) =
                steering_pending(&replica_apis, self.args.block, self.args.ha).await
            else {
                break;
            };
            if Instant::now() >= self.deadline {
                step.fail("");
                bail!("DNS did not steer every region to its nearest cluster in time: {pending}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        step.done(&steering_summary(self.args.ha, &federation.replicas));
        Ok(())
    }

    /// Step 7, HTTP: echo-http on every cluster. Returns whether it is served.
    async fn http(&mut self, api: &Api) -> anyhow::Result<bool> {
        let step = Step::start(Stream::Stdout, label("HTTP"), false);
        let settle = Instant::now() + Duration::from_secs(10);
        loop {
            self.interrupt.check()?;
            let value = api
                .get(&ingress_path(Some("default"), Some("echo-http")), &[])
                .await?;
            let ingress: FederatedIngress = decode(&value, "echo-http")?;
            let entries = ingress
                .status
                .as_ref()
                .map(|s| s.clusters.clone())
                .unwrap_or_default();
            let healthy = entries.len() == MEMBERS.len()
                && entries
                    .iter()
                    .all(|e| e.phase.as_str() == "Applied" && e.healthy);
            if healthy {
                step.done(&format!(
                    "echo-http: {HTTP_HOST} on port {HTTP_PORT} of every cluster"
                ));
                return Ok(true);
            }
            let failed = entries.iter().find(|e| e.phase.as_str() == "Failed");
            if let Some(failed) = failed.filter(|_| Instant::now() >= settle) {
                step.warn(&format!(
                    "echo-http is not served: {} reports \"{}\"; TCP and UDP are unaffected",
                    failed.name, failed.message
                ));
                return Ok(false);
            }
            if Instant::now() >= self.deadline {
                step.warn("echo-http is not served yet (see `fedctl describe ingress echo-http`); TCP and UDP are unaffected");
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Writes the kubeconfig, a context per replica, each knowing every agent gateway;
/// returns its path.
fn write_kubeconfig(
    dir: &Path,
    replicas: &[Replica],
    gateways: &[String],
) -> anyhow::Result<PathBuf> {
    let path = dir.join("kubeconfig");
    let contexts: Vec<kubeconfig::RenderContext<'_>> = replicas
        .iter()
        .map(|r| kubeconfig::RenderContext {
            name: &r.context,
            server: &r.api,
            agent_gateways: gateways,
        })
        .collect();
    write_private(&path, kubeconfig::render(&contexts, "default").as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The apiserver step's line: where the replicas serve.
fn apiservers_summary(ha: bool, replicas: &[Replica], dir: &Path) -> String {
    let Some(first) = replicas.first() else {
        return String::new();
    };
    if ha {
        format!(
            "{} (agent gateways :{}, DNS :{}, store etcd)",
            replicas
                .iter()
                .map(|r| format!("{} {}", r.name, r.api))
                .collect::<Vec<_>>()
                .join(", "),
            port_of(&first.agent_gateway),
            port_of(&first.dns),
        )
    } else {
        format!(
            "{} (agent gateway {}, DNS {}, store {}/hub-data)",
            first.api,
            first.agent_gateway.trim_start_matches("https://"),
            first.dns,
            shown(dir)
        )
    }
}

/// The DNS steering step's line: which cluster each region gets, and from which replicas.
fn steering_summary(ha: bool, replicas: &[Replica]) -> String {
    format!(
        "{ECHO_DNS_NAME}: {}{}",
        MEMBERS
            .iter()
            .map(|m| format!("{} → {}", m.region, m.name))
            .collect::<Vec<_>>()
            .join(", "),
        if ha {
            format!(
                " (the same from {})",
                replicas
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        }
    )
}

/// What still keeps DNS from sending every region's clients to their nearest cluster,
/// on the first replica that does not yet (`None`: every replica does).
async fn steering_pending(apis: &[(String, Api)], block: u8, ha: bool) -> Option<String> {
    for (replica, api) in apis {
        for (i, m) in MEMBERS.iter().enumerate() {
            let answer = explain_records(api, "echo", &region_client(m)).await;
            if answer.as_ref().ok() == Some(&vec![cluster_ip(block, i)]) {
                continue;
            }
            let answer = match answer {
                Ok(records) => format!("{records:?}"),
                Err(e) => e.to_string(),
            };
            return Some(if ha {
                format!("on {replica}, {} clients get {answer}", m.region)
            } else {
                format!("{} clients get {answer}", m.region)
            });
        }
    }
    None
}

/// The A/AAAA records the DNS server serves `client` for ingress `name`.
async fn explain_records(api: &Api, name: &str, client: &str) -> anyhow::Result<Vec<String>> {
    let path = format!("{}/explain", ingress_path(Some("default"), Some(name)));
    let value = api.get(&path, &[("client", client)]).await?;
    Ok(value["answer"]["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect())
}

/// Creates (or updates the spec of) every document of a multi-document YAML file.
async fn apply(api: &Api, yaml: &str) -> anyhow::Result<Vec<String>> {
    use serde::Deserialize as _;
    let mut applied = Vec::new();
    for document in yaml_serde::Deserializer::from_str(yaml) {
        let value = yaml_serde::Value::deserialize(document).context("parsing echo.yaml")?;
        let value: Value = serde_json::to_value(value)?;
        if value.is_null() {
            continue;
        }
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let namespace = value["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        match api
            .post(&ingress_path(Some(&namespace), None), &value)
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_already_exists() => {
                api.merge_patch(
                    &ingress_path(Some(&namespace), Some(&name)),
                    &json!({"spec": value["spec"]}),
                )
                .await?;
            }
            Err(e) => return Err(e.into()),
        }
        applied.push(format!("federatedingress/{name}"));
    }
    Ok(applied)
}

/// The config of apiserver replica `replica`: on the embedded store in `hub-data/`, or
/// with `--ha` on the etcd at `etcd`, where the zone lists one nameserver per replica
/// (ns1-ns3, each answered with its replica's address).
fn apiserver_config(args: &DevUpArgs, dir: &Path, replica: usize, etcd: Option<&str>) -> String {
    let hub = replica_ip(args.block, replica);
    let mut table = String::new();
    for m in &MEMBERS {
        table.push_str(&format!(
            "    - {{cidr: 10.{}.0.0/16, region: {}, latitude: {}, longitude: {}}}\n",
            m.subnet, m.region, m.latitude, m.longitude
        ));
    }
    let planned = planned_replicas(args);
    let nameservers = planned
        .iter()
        .map(|r| {
            format!(
                "{{name: ns{}.fedingress.test, addresses: [{}]}}",
                r.index + 1,
                r.ip
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (title, storage) = match etcd {
        Some(url) => (
            format!(
                "replica {} of {}, on etcd",
                planned.get(replica).map(|r| r.name).unwrap_or_default(),
                planned.len()
            ),
            format!("storage:\n  etcd:\n    servers: [\"{url}\"]\n"),
        ),
        None => (
            "embedded store".to_string(),
            format!("dataDir: {}\n", dir.join("hub-data").display()),
        ),
    };
    let europe = &MEMBERS[0];
    format!(
        "# Written by `fedctl dev up`: a local federation-apiserver in dev mode ({title}).\n\
         listen: {hub}:{api}\n\
         agentListen: {hub}:{agent}\n\
         {storage}\
         dev: true\n\
         agents:\n  heartbeatIntervalMs: 1000\n  leaseMs: 3000\n\
         dns:\n  listen: {hub}:{dns}\n  zones:\n  - name: fedingress.test\n    nameservers: [{nameservers}]\n  locations:\n    default: {{region: {region}, latitude: {lat}, longitude: {lon}}}\n    table:\n{table}",
        api = args.api_port,
        agent = args.agent_port,
        dns = args.dns_port,
        region = europe.region,
        lat = europe.latitude,
        lon = europe.longitude,
    )
}

/// The apiserver's agent gateway TLS (its own certificate; the API stays plain HTTP)
/// and the agent CA every replica shares.
fn gateway_tls_config(pki: &pki::DevPki) -> String {
    format!(
        "agentTls: {{certFile: {}, keyFile: {}}}\nagentCa: {{certFile: {}, keyFile: {}}}\n",
        pki.gateway_cert.display(),
        pki.gateway_key.display(),
        pki.agent_ca_cert.display(),
        pki.agent_ca_key.display()
    )
}

/// An agent config (from [`agent_config`]) that joins with a join token and then
/// authenticates with its client certificate, verifying the gateway with `ca`.
fn certificate_agent_config(text: &str, ca: &Path) -> String {
    text.replacen(
        "tokenFile: token\n",
        "joinTokenFile: join-token   # single use: buys the agent's client certificate (state/agent.crt)\n",
        1,
    )
    .replacen(
        "cluster: ",
        &format!("  caFile: {}\ncluster: ", ca.display()),
        1,
    )
}

/// The config of `m`'s agent: it knows the agent gateway of every replica.
fn agent_config(m: &Member, index: usize, block: u8, gateways: &[String]) -> String {
    let backend = backend_ip(block, index);
    let hub = match gateways {
        [gateway] => format!("hub:\n  address: {gateway}\n"),
        gateways => format!("hub:\n  addresses: [{}]\n", gateways.join(", ")),
    };
    format!(
        "# Written by `fedctl dev up`: the agent of dev cluster {name}.\n\
         {hub}\
         cluster: {name}\n\
         tokenFile: token\n\
         driver: standalone\n\
         listen:\n- bind: {bind}\n\
         services:\n  echo: [\"{backend}:{BACKEND_PORT}\"]\n  web: [\"{backend}:{BACKEND_HTTP_PORT}\"]\n\
         healthCheck:\n  intervalMs: 500\n  timeoutMs: 300\n  healthyThreshold: 1\n  unhealthyThreshold: 2\n  udp: {{send: ping, expect: \"{name}: ping\"}}\n\
         udpIdleTimeoutMs: 10000\n\
         stateDir: state\n\
         admin: 127.0.0.1:0\n\
         reportIntervalMs: 2000\n",
        name = m.name,
        bind = cluster_ip(block, index),
    )
}

/// The port of `host:port` (or of a URL ending in one).
fn port_of(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(_, port)| port)
}

struct NextSteps {
    fedctl: String,
    state_dir: PathBuf,
    kubeconfig: String,
    block: u8,
    dns: String,
    http_served: bool,
    started_in: Duration,
    /// With `--ha`: every replica, the one to kill first.
    replicas: Vec<ReplicaStep>,
}

/// An apiserver replica in the commands to try.
struct ReplicaStep {
    name: String,
    /// Its DNS server, `ip:port`.
    dns: String,
    pid: u32,
}

/// What to try next: every command works exactly as printed (the tests run them), and
/// its expected output follows as a shell comment.
fn next_steps(n: &NextSteps) -> String {
    let (dns_host, dns_port) = n.dns.rsplit_once(':').unwrap_or((&n.dns, "53"));
    let fed = format!("{} --kubeconfig {}", n.fedctl, n.kubeconfig);
    let dig = |subnet: u8| {
        format!("dig @{dns_host} -p {dns_port} +short +subnet=10.{subnet}.0.0/24 {ECHO_DNS_NAME}")
    };
    let state = state_flag(&n.state_dir);
    let ip = |i: usize| cluster_ip(n.block, i);
    let name = |i: usize| MEMBERS[i].name;
    let mut lines: Vec<String> = vec![
        String::new(),
        format!(
            "The federation is up ({:.1}s). In another terminal, from this directory, try:",
            n.started_in.as_secs_f64()
        ),
        String::new(),
        if n.replicas.is_empty() {
            "  Look at it (kubectl and fedctl read the same kubeconfig):".into()
        } else {
            format!(
                "  Look at it (kubectl and fedctl read the same kubeconfig; it has a context per replica, {}, and {} is current):",
                n.replicas
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                n.replicas[0].name
            )
        },
        format!("    kubectl --kubeconfig {} get fing,clusters", n.kubeconfig),
        format!("    {fed} status"),
        format!("    {fed} describe ingress echo"),
        String::new(),
        "  Ask the DNS server as a client in Europe and as one in the US east (EDNS client subnet):".into(),
        format!("    {}    # {} ({})", dig(1), ip(0), name(0)),
        format!("    {}    # {} ({})", dig(2), ip(1), name(1)),
        format!("    {fed} explain echo --client 10.2.0.1"),
        String::new(),
        "  Talk to the echo service, TCP and UDP on one port (each reply names its cluster):".into(),
        format!("    echo hello | nc -N {} {ECHO_PORT}    # {}: hello", ip(0), name(0)),
        format!("    echo hello | nc -u -w1 {} {ECHO_PORT}    # {}: hello", ip(1), name(1)),
        format!(
            "    echo hello | nc -N $({}) {ECHO_PORT}    # {}: hello",
            dig(3),
            name(2)
        ),
    ];
    if n.http_served {
        lines.push(format!(
            "    curl -s -H 'Host: {HTTP_HOST}' http://{}:{HTTP_PORT}/    # {}: GET / (host {HTTP_HOST})",
            ip(2),
            name(2)
        ));
    }
    lines.extend([
        String::new(),
        format!(
            "  Stop {}'s backend: European clients move to {} (the command waits until DNS has moved); then bring it back:",
            name(0),
            name(1)
        ),
        format!("    {} dev backend stop {}{state}", n.fedctl, name(0)),
        format!("    {}    # {} ({})", dig(1), ip(1), name(1)),
        format!("    {} dev backend start {}{state}", n.fedctl, name(0)),
        format!("    {}    # {} ({})", dig(1), ip(0), name(0)),
    ]);
    if let [killed, survivors @ ..] = n.replicas.as_slice()
        && let Some(watched) = survivors.first()
    {
        let dig_at = |dns: &str| {
            let (host, port) = dns.rsplit_once(':').unwrap_or((dns, "53"));
            format!("dig @{host} -p {port} +short +subnet=10.1.0.0/24 {ECHO_DNS_NAME}")
        };
        let host = |dns: &str| dns.rsplit_once(':').map_or(dns, |(h, _)| h).to_string();
        lines.extend([
            String::new(),
            format!(
                "  Kill a replica and watch nothing happen. {} federation-apiservers share one etcd, and each serves the API, the agent gateway and DNS (nameservers ns1-ns{}.fedingress.test): {}. In a third terminal, ask {} every second:",
                n.replicas.len(),
                n.replicas.len(),
                n.replicas
                    .iter()
                    .map(|r| format!("{} {} (PID {})", r.name, host(&r.dns), r.pid))
                    .collect::<Vec<_>>()
                    .join(", "),
                watched.name
            ),
            format!("    while sleep 1; do {}; done", dig_at(&watched.dns)),
            format!(
                "  Kill {} (the current context, and most likely the leader, which runs the controllers): {} answer as before, and its agents move to {} within seconds:",
                killed.name,
                survivors
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" and "),
                survivors
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" or "),
            ),
            format!("    kill -9 {}", killed.pid),
        ]);
        for survivor in survivors {
            lines.push(format!(
                "    {}    # {} ({})",
                dig_at(&survivor.dns),
                ip(0),
                name(0)
            ));
        }
        lines.push(format!(
            "    kubectl --kubeconfig {} --context {} get fing,clusters",
            n.kubeconfig, watched.name
        ));
        lines.push(format!("    {fed} --context {} status", watched.name));
    }
    lines.extend([
        String::new(),
        format!(
            "Logs: {}/logs. Press Ctrl-C to stop every process (or run `{} dev down{state}`).",
            n.state_dir.display(),
            n.fedctl
        ),
    ]);
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// `dev down`: asks a running `dev up` to stop, and stops whatever is left.
async fn down(dir: &Path) -> anyhow::Result<()> {
    let dir = absolute(dir)?;
    let Some(state) = State::load(&dir)? else {
        println!("No dev federation in {}: nothing to stop.", dir.display());
        return Ok(());
    };
    if let Some(supervisor) = state.supervisor.as_ref().filter(|s| process::alive(s)) {
        println!(
            "Asking fedctl dev up (PID {}) to stop…",
            supervisor.pid.unwrap_or_default()
        );
        process::signal(supervisor, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while process::alive(supervisor) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut stopped = Vec::new();
    for role in STOP_ORDER {
        for proc in state.processes.iter().filter(|p| p.role == role) {
            if process::stop(proc, None, Duration::from_secs(5)) {
                stopped.push(format!(
                    "{} ({})",
                    proc.label(),
                    proc.pid.unwrap_or_default()
                ));
            }
        }
    }
    State::remove(&dir);
    if stopped.is_empty() {
        println!("The dev federation is stopped.");
    } else {
        println!(
            "Stopped {} processes: {}.",
            stopped.len(),
            stopped.join(", ")
        );
    }
    Ok(())
}

/// `dev backend stop|start CLUSTER`: then waits until DNS has moved that cluster's
/// region away from it (stop) or back to it (start).
async fn backend(dir: &Path, cluster: &str, start: bool) -> anyhow::Result<()> {
    let (index, m) = member(cluster)?;
    let abs = absolute(dir)?;
    let Some(mut state) = State::load(&abs)? else {
        bail!(
            "no dev federation in {} (start one with `fedctl dev up`)",
            dir.display()
        );
    };
    // A replica that still runs (with `--ha`, r1 may have been killed).
    let api = Api::new(&kubeconfig::load(
        std::slice::from_ref(&state.kubeconfig),
        state.live_context().as_deref(),
    )?)?;
    let Some(proc) = state.backend_mut(cluster).cloned() else {
        bail!(
            "the dev federation in {} has no backend for {cluster}",
            dir.display()
        );
    };
    let running = process::alive(&proc);
    if start {
        if running {
            println!(
                "The echo backend of {cluster} is already running (PID {}).",
                proc.pid.unwrap_or_default()
            );
        } else {
            let (exe, args, log) = (proc.exe.clone(), proc.args.clone(), proc.log.clone());
            let started = tokio::task::spawn_blocking(move || {
                process::start(
                    "backend",
                    &proc.name,
                    &exe,
                    args,
                    &log,
                    Duration::from_secs(15),
                )
            })
            .await
            .context("starting the backend")??;
            if let Some(entry) = state.backend_mut(cluster) {
                entry.pid = started.proc.pid;
            }
            state.save(&abs)?;
            // The child lives on after this command: it is the dev federation's now.
            drop(started.child);
            println!(
                "Started the echo backend of {cluster} (PID {}).",
                started.proc.pid.unwrap_or_default()
            );
        }
    } else if running {
        process::stop(&proc, None, Duration::from_secs(5));
        if let Some(entry) = state.backend_mut(cluster) {
            entry.pid = None;
        }
        state.save(&abs)?;
        println!("Stopped the echo backend of {cluster}.");
    } else {
        println!("The echo backend of {cluster} is not running.");
    }

    // Wait until the DNS answers for the cluster's own region reflect it: a recovered
    // cluster comes back only after failbackDelaySeconds.
    let own = cluster_ip(state.block, index);
    let client = region_client(m);
    let delay = if start {
        let value = api
            .get(&ingress_path(Some("default"), Some("echo")), &[])
            .await?;
        let ingress: FederatedIngress = decode(&value, "echo")?;
        let seconds = u64::try_from(ingress.spec.traffic.failback_delay_seconds).unwrap_or(0);
        if seconds > 0 {
            println!(
                "{cluster} is answered again once it has been healthy for failbackDelaySeconds ({seconds} s)."
            );
        }
        Duration::from_secs(seconds)
    } else {
        Duration::ZERO
    };
    let step = Step::start(Stream::Stdout, "DNS:", false);
    let wait = Duration::from_secs(30) + delay;
    let deadline = Instant::now() + wait;
    loop {
        let records = explain_records(&api, "echo", &client)
            .await
            .unwrap_or_default();
        let includes = records.contains(&own);
        if includes == start && !records.is_empty() {
            let clusters = names_for(&api, &records).await;
            step.done(&format!(
                "clients in {} get {}",
                m.region,
                records
                    .iter()
                    .zip(clusters)
                    .map(|(r, c)| format!("{r} ({c})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            return Ok(());
        }
        if Instant::now() >= deadline {
            step.fail("");
            bail!(
                "DNS did not change within {}s (clients in {} get {records:?})",
                wait.as_secs(),
                m.region
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cluster serving each address, for messages.
async fn names_for(api: &Api, records: &[String]) -> Vec<String> {
    let clusters: Vec<Cluster> = match api.get(&cluster_path(None), &[]).await {
        Ok(value) => value["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| decode(c, "cluster").ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    records
        .iter()
        .map(|record| {
            clusters
                .iter()
                .find(|c| {
                    c.status.as_ref().is_some_and(|s| {
                        crate::commands::address_texts(&s.addresses).contains(record)
                    })
                })
                .map(|c| c.name().to_string())
                .unwrap_or_else(|| "?".into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiserver_config_gives_the_nameserver_the_dns_address() {
        use clap::Parser as _;
        let cli = crate::cli::Cli::parse_from(["fedctl", "dev", "up", "--block", "7"]);
        let crate::cli::Command::Dev(crate::cli::DevCommand::Up(args)) = cli.command else {
            panic!("not dev up");
        };
        let text = apiserver_config(&args, Path::new("/tmp/x"), 0, None);
        let config: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(config["dataDir"].as_str(), Some("/tmp/x/hub-data"));
        let zone = &config["dns"]["zones"][0];
        assert_eq!(zone["name"].as_str(), Some("fedingress.test"));
        assert_eq!(
            zone["nameservers"][0]["name"].as_str(),
            Some("ns1.fedingress.test")
        );
        assert_eq!(
            zone["nameservers"][0]["addresses"][0].as_str(),
            Some("127.0.7.1")
        );
        assert_eq!(config["dns"]["listen"].as_str(), Some("127.0.7.1:5353"));
    }

    #[test]
    fn echo_yaml_holds_the_sample_service() {
        use serde::Deserialize as _;
        let mut names = Vec::new();
        for document in yaml_serde::Deserializer::from_str(ECHO_YAML) {
            let value = yaml_serde::Value::deserialize(document).unwrap_or_default();
            let ingress: FederatedIngress = yaml_serde::from_value(value).unwrap_or_default();
            names.push((
                ingress.metadata.name_str().to_string(),
                ingress.listener_summary(),
            ));
        }
        assert_eq!(
            names,
            vec![
                (
                    "echo".to_string(),
                    vec!["7777/TCP".to_string(), "7777/UDP".to_string()]
                ),
                ("echo-http".to_string(), vec!["8080/HTTP".to_string()]),
            ]
        );
    }

    #[test]
    fn next_steps_use_the_real_addresses() {
        let text = next_steps(&NextSteps {
            fedctl: "target/release/fedctl".into(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            kubeconfig: ".fedingress/dev/kubeconfig".into(),
            block: 0,
            dns: "127.0.0.1:5353".into(),
            http_served: false,
            started_in: Duration::from_secs(3),
            replicas: Vec::new(),
        });
        assert!(text.contains(
            "    dig @127.0.0.1 -p 5353 +short +subnet=10.1.0.0/24 echo.fedingress.test    # 127.0.0.11 (eu-west)\n"
        ), "{text}");
        assert!(text.contains("    echo hello | nc -u -w1 127.0.0.12 7777    # us-east: hello\n"));
        assert!(text.contains("    target/release/fedctl dev backend stop eu-west\n"));
        assert!(!text.contains("curl"));
        let text = next_steps(&NextSteps {
            fedctl: "fedctl".into(),
            state_dir: PathBuf::from("/tmp/x"),
            kubeconfig: "/tmp/x/kubeconfig".into(),
            block: 45,
            dns: "127.0.45.1:15353".into(),
            http_served: true,
            started_in: Duration::from_secs(3),
            replicas: Vec::new(),
        });
        assert!(text.contains("fedctl dev backend stop eu-west --state-dir /tmp/x\n"));
        assert!(text.contains("http://127.0.45.13:8080/"));
        assert!(!text.contains("kill"));
    }

    fn ha_args(block: &str) -> DevUpArgs {
        use clap::Parser as _;
        let cli = crate::cli::Cli::parse_from(["fedctl", "dev", "up", "--ha", "--block", block]);
        let crate::cli::Command::Dev(crate::cli::DevCommand::Up(args)) = cli.command else {
            panic!("not dev up");
        };
        args
    }

    #[test]
    fn ha_replicas_share_etcd_and_list_every_nameserver() {
        let args = ha_args("7");
        let text = apiserver_config(
            &args,
            Path::new("/tmp/x"),
            1,
            Some("http://127.0.7.1:40001"),
        );
        let config: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(config["listen"].as_str(), Some("127.0.7.2:6443"));
        assert_eq!(config["agentListen"].as_str(), Some("127.0.7.2:6444"));
        assert_eq!(config["dns"]["listen"].as_str(), Some("127.0.7.2:5353"));
        assert!(config["dataDir"].is_null(), "{text}");
        assert_eq!(
            config["storage"]["etcd"]["servers"][0].as_str(),
            Some("http://127.0.7.1:40001")
        );
        let nameservers = config["dns"]["zones"][0]["nameservers"]
            .as_sequence()
            .unwrap();
        let listed: Vec<(String, String)> = nameservers
            .iter()
            .map(|n| {
                (
                    n["name"].as_str().unwrap().to_string(),
                    n["addresses"][0].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("ns1.fedingress.test", "127.0.7.1"),
                ("ns2.fedingress.test", "127.0.7.2"),
                ("ns3.fedingress.test", "127.0.7.3"),
            ]
            .map(|(n, a)| (n.to_string(), a.to_string()))
        );
        assert!(text.starts_with("# Written by `fedctl dev up`: a local federation-apiserver in dev mode (replica r2 of 3, on etcd).\n"), "{text}");
    }

    #[test]
    fn dev_agents_join_with_a_certificate_over_https() {
        let gateways = vec!["https://127.0.7.1:6444".to_string()];
        let text = certificate_agent_config(
            &agent_config(&MEMBERS[0], 0, 7, &gateways),
            Path::new("/s/pki/ca.crt"),
        );
        let config: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(
            config["hub"]["caFile"].as_str(),
            Some("/s/pki/ca.crt"),
            "{text}"
        );
        assert_eq!(
            config["joinTokenFile"].as_str(),
            Some("join-token"),
            "{text}"
        );
        assert!(config["tokenFile"].is_null(), "{text}");
    }

    #[test]
    fn ha_agents_know_every_gateway() {
        let gateways: Vec<String> = (1..=3)
            .map(|i| format!("http://127.0.7.{i}:6444"))
            .collect();
        let text = agent_config(&MEMBERS[0], 0, 7, &gateways);
        let config: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert!(config["hub"]["address"].is_null(), "{text}");
        assert_eq!(
            config["hub"]["addresses"][2].as_str(),
            Some("http://127.0.7.3:6444")
        );
        let text = agent_config(&MEMBERS[0], 0, 7, &gateways[..1]);
        let config: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(
            config["hub"]["address"].as_str(),
            Some("http://127.0.7.1:6444")
        );
        assert_eq!(ha_args("7").block, 7);
    }

    #[test]
    fn ha_next_steps_kill_the_first_replica_and_ask_the_others() {
        let replicas = (1..=3)
            .map(|i| ReplicaStep {
                name: format!("r{i}"),
                dns: format!("127.0.0.{i}:5353"),
                pid: 100 + i,
            })
            .collect();
        let text = next_steps(&NextSteps {
            fedctl: "target/release/fedctl".into(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            kubeconfig: ".fedingress/dev/kubeconfig".into(),
            block: 0,
            dns: "127.0.0.1:5353".into(),
            http_served: true,
            started_in: Duration::from_secs(3),
            replicas,
        });
        let after_kill = text
            .split("    kill -9 101\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"));
        for line in [
            "    dig @127.0.0.2 -p 5353 +short +subnet=10.1.0.0/24 echo.fedingress.test    # 127.0.0.11 (eu-west)\n",
            "    dig @127.0.0.3 -p 5353 +short +subnet=10.1.0.0/24 echo.fedingress.test    # 127.0.0.11 (eu-west)\n",
            "    kubectl --kubeconfig .fedingress/dev/kubeconfig --context r2 get fing,clusters\n",
            "    target/release/fedctl --kubeconfig .fedingress/dev/kubeconfig --context r2 status\n",
        ] {
            assert!(
                after_kill.contains(line),
                "{line:?} after the kill in\n{text}"
            );
        }
        let before_kill = text.split("    kill -9 101\n").next().unwrap_or_default();
        assert!(before_kill.contains(
            "    while sleep 1; do dig @127.0.0.2 -p 5353 +short +subnet=10.1.0.0/24 echo.fedingress.test; done\n"
        ), "{text}");
        assert!(
            text.contains("r1 127.0.0.1 (PID 101), r2 127.0.0.2 (PID 102), r3 127.0.0.3 (PID 103)"),
            "{text}"
        );
        assert!(
            text.contains("context per replica, r1, r2, r3, and r1 is current"),
            "{text}"
        );
    }
}
