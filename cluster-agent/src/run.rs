//! The `cluster-agent` process ([`main`]). `cluster-agent --config FILE`: parse flags and config (exit 64 with one line on
//! stderr when they are bad, before binding anything; for the kubernetes driver also
//! when no member cluster client can be built), build the driver, bind the admin
//! endpoint, print `READY {"admin":"ADDR"}`, with leader election wait for the Lease as
//! a ready standby, follow the hub until SIGTERM/SIGINT (then release the Lease) or
//! until the Lease is lost (then exit 1, as client-go's controllers do), then
//! shut the driver down — listeners close, connections drain for at most
//! `drainTimeoutMs` (a second signal skips the rest of the drain) — and exit 0.
//! With `vrrp.keepalived.manage`, or with `pools:`, keepalived's config is rendered and
//! checked before anything binds (exit 64 when keepalived is missing or refuses it),
//! keepalived runs under the agent's supervision and is stopped before the drain; with
//! `pools:` the driver loads every plan's pools into it ([`crate::vrrp::Pools`]).
//! With `anycast:`, the BGP speaker is started (managed) or reached and configured
//! before anything binds (exit 64 when gobgpd is missing, does not answer or refuses
//! the config); on SIGTERM every anycast route is withdrawn and `withdrawDelayMs`
//! waited out before the drain.
//!
//! `cluster-agent ready --admin ADDR` (keepalived's track script) exits 0 iff that
//! agent is ready; `cluster-agent keepalived render -c FILE` prints the keepalived
//! config of FILE's `vrrp:` section (`pools:`: of the pools of the persisted plan).
//!
//! It lives in the library, and `src/main.rs` only calls it: the composition root is
//! library code that tests and tools can reach.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tokio::sync::watch;

use crate::admin::Role;
use crate::anycast::{self, Anycast};
use crate::config::{self, KubernetesConfig};
use crate::driver::Driver;
use crate::hub::{Agent, HubSettings};
use crate::kubernetes::lease::{self, LeaderElector, LeaseSettings};
use crate::kubernetes::{self, KubernetesDriver};
use crate::vrrp::{self, Keepalived, Pools};
use crate::{Config, Standalone, admin};

/// EX_USAGE: bad flags or config.
const EXIT_CONFIG: u8 = 64;

/// fedingress cluster agent: connects out to the hub, serves this cluster's share of
/// every FederatedIngress, and reports health and load back.
#[derive(Debug, Parser)]
#[command(
    name = "cluster-agent",
    version,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The agent's config file (YAML).
    #[arg(long, value_name = "FILE", required = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Exit 0 iff the agent's admin endpoint answers /readyz with 200 in time, else 1
    /// (keepalived's track script).
    Ready {
        /// The agent's admin address.
        #[arg(long, value_name = "ADDR")]
        admin: SocketAddr,
        /// How long connecting, asking and the answer may take together.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        timeout_ms: u64,
    },
    /// keepalived (VRRP) for the agent's virtual addresses.
    #[command(subcommand)]
    Keepalived(KeepalivedCommand),
}

#[derive(Debug, Subcommand)]
enum KeepalivedCommand {
    /// Print the keepalived config rendered from the config's vrrp: section (pools:
    /// the pools of the plan the agent applied last).
    Render {
        /// The agent's config file (YAML).
        #[arg(short = 'c', long, value_name = "FILE")]
        config: PathBuf,
    },
}

/// Runs the process; the exit code says how it ended.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(e) => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let path = match cli.command {
        Some(Command::Ready { admin, timeout_ms }) => return ready(admin, timeout_ms),
        Some(Command::Keepalived(KeepalivedCommand::Render { config })) => {
            return render_keepalived(&config);
        }
        None => match cli.config {
            Some(path) => path,
            None => {
                eprintln!("cluster-agent: --config is required");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
    };
    // Both rustls providers may be compiled in once features unify: pick one.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config = match Config::load(&path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("cluster-agent: {}", chain(&e));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let settings = HubSettings::from_config(&config);
    // Reads and checks the CA file, so a bad one is a config error, not a retry loop.
    if let Err(e) = settings.endpoints() {
        eprintln!("cluster-agent: hub: {}", chain(&e));
        return ExitCode::from(EXIT_CONFIG);
    }
    // keepalived missing, or refusing the rendered config, is a config error.
    let prepared = match (
        config.vrrp.as_ref().filter(|v| v.host.keepalived.manage),
        &config.pools,
    ) {
        (Some(settings), _) => vrrp::keepalived::prepare(&config, settings).map(Some),
        (None, Some(pools)) => vrrp::keepalived::prepare_pools(&config, pools).map(Some),
        (None, None) => Ok(None),
    };
    let keepalived = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("cluster-agent: {}", chain(&e));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let pools = match vrrp::pools::PoolsSettings::from_config(&config) {
        Ok(pools) => pools,
        Err(e) => {
            eprintln!("cluster-agent: pools: the agent's own program path: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FEDINGRESS_LOG")
                // rustls warns about every malformed ClientHello: log volume on demand
                // for anyone who can reach a TLS listener.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rustls=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    raise_open_files_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cluster-agent: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A member cluster the agent cannot talk to with this config is a config error.
    let client = match config.driver {
        config::Driver::Standalone => None,
        config::Driver::Kubernetes => {
            match runtime.block_on(kubernetes::client(&config.kubernetes())) {
                Ok(client) => Some(client),
                Err(e) => {
                    eprintln!("cluster-agent: kubernetes: {}", chain(&e));
                    return ExitCode::from(EXIT_CONFIG);
                }
            }
        }
    };
    // A BGP speaker that is missing, unreachable or misconfigured is a config error.
    let speaker = match &config.anycast {
        None => None,
        Some(settings) => match runtime.block_on(anycast::connect(settings)) {
            Ok(connection) => Some(connection),
            Err(e) => {
                eprintln!("cluster-agent: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
    };
    match runtime.block_on(run(config, settings, client, keepalived, pools, speaker)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(
    config: Config,
    settings: HubSettings,
    client: Option<kube::Client>,
    keepalived: Option<vrrp::keepalived::Settings>,
    pools: Option<vrrp::pools::PoolsSettings>,
    speaker: Option<anycast::Connection>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.admin)
        .await
        .with_context(|| format!("binding the admin address {}", config.admin))?;
    let admin_addr = listener.local_addr().context("reading the admin address")?;
    let keepalived = keepalived.map(Keepalived::start);
    let (driver, election) = match client {
        None => {
            let driver = standalone(&config, speaker);
            match (pools, &keepalived) {
                (Some(pools), Some(keepalived)) => (
                    Pools::new(driver, Arc::clone(keepalived), pools) as Arc<dyn Driver>,
                    None,
                ),
                _ => (driver, None),
            }
        }
        Some(client) => {
            let mut k = config.kubernetes();
            k.owner_id.get_or_insert_with(|| config.cluster.clone());
            let election = k
                .leader_election
                .enabled
                .then(|| lease_settings(&k, &client))
                .transpose()?
                .map(|s| Arc::new(LeaderElector::new(client.clone(), s)));
            let pools = pool_source(&config, &k, &client);
            let driver = KubernetesDriver::start(client, k, &config.state_dir, pools);
            (driver as Arc<dyn Driver>, election)
        }
    };
    let agent = Agent::new(settings, Arc::clone(&driver));

    let role = watch::Sender::new(match &election {
        Some(_) => Role::Standby { holder: None },
        None => Role::Leader,
    });
    let components = keepalived
        .iter()
        .map(|k| Arc::clone(k) as Arc<dyn admin::Component>)
        .collect();
    let app = admin::with_components(
        agent.applied(),
        Arc::clone(&driver),
        election.as_ref().map(|_| role.subscribe()),
        components,
    );
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(error = %error, "admin endpoint failed");
        }
    });
    let ready = serde_json::json!({ "admin": admin_addr.to_string() });
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "READY {ready}").context("writing the READY line")?;
    stdout.flush().context("writing the READY line")?;
    drop(stdout);
    tracing::info!(
        cluster = %config.cluster,
        admin = %admin_addr,
        hubs = %config.hub.address_list().join(","),
        driver = driver.name(),
        "agent started"
    );

    let lost = match &election {
        None => {
            agent.run(shutdown_signal()).await;
            false
        }
        Some(elector) => {
            if !lead(elector, &role).await {
                driver.shutdown().await;
                return Ok(());
            }
            role.send_replace(Role::Leader);
            let lost = std::sync::atomic::AtomicBool::new(false);
            let stop = async {
                tokio::select! {
                    () = shutdown_signal() => {}
                    () = elector.hold() => lost.store(true, std::sync::atomic::Ordering::Relaxed),
                }
            };
            agent.run(stop).await;
            lost.load(std::sync::atomic::Ordering::Relaxed)
        }
    };
    if lost {
        // client-go's contract: a replica that lost the lease stops at once; Kubernetes
        // restarts it as a standby. The member cluster's objects stay as they are.
        driver.shutdown().await;
        anyhow::bail!("lost the leader lease; exiting so that the new leader alone applies");
    }
    if let Some(elector) = &election {
        elector.release().await;
    }
    if let Some(keepalived) = &keepalived {
        // First, so that the peer takes the virtual addresses over at once (priority 0).
        tracing::info!(cluster = %config.cluster, "stopping keepalived");
        keepalived.stop().await;
    }
    tracing::info!(
        cluster = %config.cluster,
        drain_timeout_ms = config.drain_timeout_ms,
        "shutting down: closing listeners and draining connections"
    );
    tokio::select! {
        () = driver.shutdown() => {}
        () = shutdown_signal() => {
            tracing::warn!(cluster = %config.cluster, "second signal: exiting without finishing the drain");
        }
    }
    Ok(())
}

/// The standalone driver; with anycast routes when the config has a speaker
/// (withdrawn on SIGTERM before the listeners drain).
fn standalone(config: &Config, speaker: Option<anycast::Connection>) -> Arc<dyn Driver> {
    let standalone = Arc::new(Standalone::new(config));
    match (speaker, &config.anycast) {
        (Some(connection), Some(settings)) => Anycast::start(
            standalone,
            settings,
            &config.advertised_addresses(),
            connection,
        ),
        _ => standalone,
    }
}

/// Waits for the lease as a standby (publishing who leads); false when a signal came
/// first.
async fn lead(elector: &LeaderElector, role: &watch::Sender<Role>) -> bool {
    let publish = async {
        loop {
            role.send_replace(Role::Standby {
                holder: elector.observed_holder(),
            });
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        () = elector.acquire() => true,
        () = publish => false,
        () = shutdown_signal() => false,
    }
}

/// What the kubernetes driver needs to run the plan's pools: the rest of the agent
/// config, and the Pod's environment (`POD_NAMESPACE`, `POD_NAME`,
/// `FEDINGRESS_POOL_INTERFACE`).
fn pool_source(
    config: &Config,
    k: &config::KubernetesConfig,
    client: &kube::Client,
) -> kubernetes::pools::PoolSource {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    kubernetes::pools::PoolSource {
        namespace: env("POD_NAMESPACE").unwrap_or_else(|| client.default_namespace().to_owned()),
        own_pod: env("POD_NAME"),
        cluster: config.cluster.clone(),
        hub_addresses: config.hub.address_list(),
        hub_ca_file: config.hub.ca_file.clone(),
        hub_insecure_allow_plaintext: config.hub.insecure_allow_plaintext,
        token_file: config
            .join_token_file
            .is_none()
            .then(|| config.token_file.clone()),
        interface: env("FEDINGRESS_POOL_INTERFACE")
            .unwrap_or_else(|| kubernetes::pools::DEFAULT_INTERFACE.to_owned()),
        owner: k.owner_id.clone(),
    }
}

/// The election's settings from the config: the Lease's namespace defaults to the
/// client's (the Pod's own, in a cluster); renew deadline and retry period scale
/// with the lease as client-go's defaults do (15 s / 10 s / 2 s).
fn lease_settings(k: &KubernetesConfig, client: &kube::Client) -> anyhow::Result<LeaseSettings> {
    let election = &k.leader_election;
    let namespace = election
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let lease = election.lease_duration();
    let settings = LeaseSettings {
        namespace,
        name: election.lease_name.clone(),
        identity: lease::default_identity(),
        lease_duration: lease,
        renew_deadline: lease * 2 / 3,
        retry_period: lease * 2 / 15,
    };
    settings.validate().context("kubernetes.leaderElection")?;
    Ok(settings)
}

/// `cluster-agent ready`: 0 iff the agent at `admin` is ready, else 1 with why on stderr.
fn ready(admin: SocketAddr, timeout_ms: u64) -> ExitCode {
    match vrrp::ready::check(admin, std::time::Duration::from_millis(timeout_ms)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cluster-agent ready: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `cluster-agent keepalived render -c FILE`: the config on stdout, or exit 64.
fn render_keepalived(path: &Path) -> ExitCode {
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("cluster-agent: {}", chain(&e));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let text = match (&config.vrrp, &config.pools) {
        (Some(settings), _) => {
            std::env::current_exe()
                .map_err(|e| e.to_string())
                .and_then(|program| {
                    vrrp::render::render(settings, &config.cluster, &program, config.admin)
                        .map_err(|e| e.to_string())
                })
        }
        // The pools of the plan the agent applied last (persisted in its state dir).
        (None, Some(_)) => vrrp::pools::PoolsSettings::from_config(&config)
            .map_err(|e| e.to_string())
            .and_then(|settings| {
                let plan = crate::state::PlanStore::new(config.plan_file())
                    .load_or_empty()
                    .map(|persisted| persisted.plan)
                    .unwrap_or_default();
                let pools = settings.map(|s| s.render(&plan.pools.pools));
                match pools {
                    Some(Ok(rendered)) => Ok(rendered.text),
                    Some(Err(e)) => Err(e.to_string()),
                    None => Err("no pools: section".to_owned()),
                }
            }),
        (None, None) => {
            eprintln!(
                "cluster-agent: {} has no vrrp: section (and no pools: section)",
                path.display()
            );
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match text {
        Ok(text) => {
            let mut stdout = std::io::stdout().lock();
            if stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cluster-agent: keepalived render: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => Some(term),
        Err(error) => {
            tracing::warn!(error = %error, "cannot watch SIGTERM; only SIGINT stops the agent");
            None
        }
    };
    let term = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// `error: cause: cause` on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The most open files asked for when raising the soft limit.
const MAX_OPEN_FILES: u64 = 1 << 20;

/// Raises the soft limit on open files to the hard limit, as Go's runtime and nginx's
/// `worker_rlimit_nofile` do: the connection and session caps assume descriptors, and
/// the common default soft limit (1024) would cap them far below their defaults.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let target = limit
        .maximum
        .map_or(MAX_OPEN_FILES, |hard| hard.min(MAX_OPEN_FILES));
    let Some(soft) = limit.current.filter(|soft| *soft < target) else {
        return;
    };
    let raised = Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(from = soft, to = target, "raised the open files limit"),
        Err(e) => tracing::warn!(soft, target, error = %e, "raising the open files limit failed"),
    }
}
