//! `federation-apiserver`: parse flags and config (exit 64 when they are bad, before
//! binding anything), open the store (exit 64 when etcd is unreachable or refuses the
//! TLS material), bind, print the READY line, then serve until SIGTERM/SIGINT.

use std::process::ExitCode;

use clap::Parser;
use fedingress_apiserver::{config, server};

/// EX_USAGE: bad flags or config.
const EXIT_CONFIG: u8 = 64;

fn main() -> ExitCode {
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
    let store = match runtime.block_on(server::open_store(&settings)) {
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
        let server = server::Server::bind_with_store(settings, store).await?;
        server::print_ready(&server.addresses());
        server.serve(server::shutdown_signal()).await
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
