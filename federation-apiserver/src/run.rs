//! The `federation-apiserver` process ([`main`]): parse flags and config (exit 64 when
//! they are bad, before binding anything), open the store (exit 64 when etcd is
//! unreachable or refuses the TLS material), bind, print the READY line, then serve
//! until SIGTERM/SIGINT.
//!
//! It lives in the library, and `src/main.rs` only calls it: the composition root is
//! library code that tests and tools can reach.

use std::process::ExitCode;

use clap::Parser;

use crate::app::{Addresses, App};
use crate::{config, storage};

/// EX_USAGE: bad flags or config.
const EXIT_CONFIG: u8 = 64;

/// Runs the process; the exit code says how it ended.
pub fn main() -> ExitCode {
    let cli = match config::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    // Both rustls providers may be compiled in once features unify: pick one.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let settings = match config::load(&cli) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("federation-apiserver: {e}");
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
    for (flag, address) in settings.plaintext_off_loopback() {
        tracing::warn!(
            flag,
            %address,
            "serving plain text off loopback (--insecure-allow-plaintext): bearer and agent tokens cross the network in the clear"
        );
    }
    raise_open_files_limit(&settings.limits);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("federation-apiserver: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // An unreachable etcd, or one that refuses our certificates, is a configuration
    // error like a bad flag: exit 64 with one line, before binding anything.
    let store = match runtime.block_on(storage::open_store(&settings)) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("federation-apiserver: {e:#}");
            return if settings.etcd.is_some() {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::FAILURE
            };
        }
    };
    let served = runtime.block_on(async {
        let app = App::bind_with_store(settings, store).await?;
        print_ready(&app.addresses());
        app.serve(shutdown_signal()).await
    });
    // Served and stepped down: the process ends now. Dropping the runtime would cancel
    // background tasks (etcd watches, lease keep-alives) that may be mid-poll on another
    // worker and panic on a timer of a runtime being shut down; nothing they hold needs
    // a destructor (the lease was revoked, the store's writes are acknowledged).
    std::mem::forget(runtime);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("federation-apiserver: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The most open files asked for when raising the soft limit.
const MAX_OPEN_FILES: u64 = 1 << 20;

/// Raises the soft limit on open files to the hard limit, as Go's runtime and nginx's
/// `worker_rlimit_nofile` do: the connection caps assume descriptors, and the common
/// default soft limit (1024) would cap them far below their defaults. Warns when even
/// the raised limit is below what the caps allow (plus a reserve for the store, DNS and
/// agents' streams), so that the caps, not `EMFILE`, refuse connections.
fn raise_open_files_limit(limits: &crate::limits::Limits) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    const RESERVE: u64 = 512;
    let limit = getrlimit(Resource::Nofile);
    let target = limit
        .maximum
        .map_or(MAX_OPEN_FILES, |hard| hard.min(MAX_OPEN_FILES));
    let mut now = limit.current;
    if let Some(soft) = limit.current.filter(|soft| *soft < target) {
        let raised = Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::info!(from = soft, to = target, "raised the open files limit");
                now = Some(target);
            }
            Err(e) => {
                tracing::warn!(soft, target, error = %e, "raising the open files limit failed")
            }
        }
    }
    let needed = (limits.max_connections + limits.gateway.max_connections) as u64 + RESERVE;
    if let Some(now) = now.filter(|now| *now < needed) {
        tracing::warn!(
            open_files = now,
            needed,
            "the open files limit is below limits.maxConnections + limits.gateway.maxConnections + {RESERVE}: raise it (LimitNOFILE, ulimit -n) or lower the caps"
        );
    }
}

/// Prints the one line tests and tools wait for.
pub fn print_ready(addresses: &Addresses) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", addresses.ready_line());
    let _ = stdout.flush();
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
