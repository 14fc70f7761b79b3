//! `fedctl`: the fedingress command line. Parses flags (usage errors exit 2 with one
//! line), loads the kubeconfig, runs one command against the federation-apiserver's REST
//! API, and exits 0 on success and 1 on failure with one line on stderr.
//!
//! Layout: `cli` (flags), `kubeconfig` (which server, which credentials), `client` (the
//! REST API), `render` (tables, YAML, JSON), `progress` (spinners), `commands` (one
//! module per group of commands), `dev` (the local federation of `fedctl dev up`).
//!
//! What does not belong here: any decision the hub makes (fedctl shows what the API
//! reports: placement, routing and explain come from the hub's subresources) and any
//! dependency on the hub's or the agent's crates (`scripts/check-deps`: api and proto
//! only; `dev up` runs their binaries).

mod cli;
mod client;
mod commands;
mod dev;
mod files;
mod kubeconfig;
mod progress;
mod render;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, Global};

/// Exit code of a failed command.
const EXIT_FAILURE: u8 = 1;
/// Exit code of a command line that makes no sense (clap uses 2 too).
const EXIT_USAGE: u8 = 2;

/// An error in how fedctl was called (exit 2), found after parsing.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// What every command needs: the global flags and, once asked for, the API client.
pub struct Ctx {
    pub global: Global,
}

impl Ctx {
    /// The kubeconfig context's connection.
    pub fn connection(&self) -> anyhow::Result<kubeconfig::Connection> {
        let files = kubeconfig::files(self.global.kubeconfig.as_deref());
        kubeconfig::load(&files, self.global.context.as_deref())
    }

    /// A client for the federation-apiserver of the kubeconfig context.
    pub fn api(&self) -> anyhow::Result<client::Api> {
        client::Api::new(&self.connection()?)
    }

    /// The namespace of FederatedIngresses: `-n`, else the context's, else `default`.
    pub fn namespace(&self) -> String {
        if let Some(ns) = &self.global.namespace {
            return ns.clone();
        }
        self.connection()
            .ok()
            .and_then(|c| c.namespace)
            .unwrap_or_else(|| "default".into())
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    // Both rustls providers may be compiled in once features unify: pick one.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fedctl: starting the runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let result = runtime.block_on(run(cli));
    // Waits (spinners, children) end with the command; nothing may keep fedctl alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let text = format!("{e:#}").replace('\n', " ");
            eprintln!("fedctl: {text}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let ctx = Ctx {
        global: cli.global.clone(),
    };
    match cli.command {
        Command::Join(args) => commands::cluster::join(&ctx, args).await,
        Command::Unjoin(args) => commands::cluster::unjoin(&ctx, args).await,
        Command::Cordon(args) => commands::cluster::cordon(&ctx, &args.name, true).await,
        Command::Uncordon(args) => commands::cluster::cordon(&ctx, &args.name, false).await,
        Command::Token(command) => commands::token::run(&ctx, command).await,
        Command::Get(args) => commands::inspect::get(&ctx, args).await,
        Command::Describe(args) => commands::inspect::describe(&ctx, args).await,
        Command::Explain(args) => commands::explain::run(&ctx, args).await,
        Command::Status => commands::inspect::status(&ctx).await,
        Command::Dev(command) => dev::run(&ctx, command).await,
    }
}

/// Prints a clap error as one line (help and version as they are) and picks the exit
/// code: 0 for help and version, 2 for usage errors.
fn clap_exit(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            eprintln!("fedctl: {}", one_line(&error.render().to_string()));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// clap's error text (`error: ...`, indented details, a blank line, usage, a tip) as one
/// line: the message and its details, then where to get help.
fn one_line(text: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            break;
        }
        parts.push(line.trim_start_matches("error: ").to_string());
    }
    let mut message = parts.first().cloned().unwrap_or_default();
    let details: Vec<&String> = parts.iter().skip(1).collect();
    if !details.is_empty() {
        message = format!(
            "{} {}",
            message.trim_end_matches(':').to_string() + ":",
            details
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let help = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("For more information, try "))
        .map(|h| h.trim_end_matches('.').to_string());
    match help {
        Some(help) => format!("{message} (try {help})"),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        let error = Cli::try_parse_from(["fedctl", "get", "clusters", "--bogus"]).unwrap_err();
        let line = one_line(&error.render().to_string());
        assert_eq!(line, "unexpected argument '--bogus' found (try '--help')");
        let error = Cli::try_parse_from(["fedctl", "join", "x"]).unwrap_err();
        let line = one_line(&error.render().to_string());
        assert!(
            line.starts_with("the following required arguments were not provided: --region <REGION>, --location <LAT,LON>"),
            "{line}"
        );
        let error = Cli::try_parse_from([
            "fedctl",
            "join",
            "x",
            "--region",
            "r",
            "--location",
            "north",
        ])
        .unwrap_err();
        let line = one_line(&error.render().to_string());
        assert!(line.contains("is not LATITUDE,LONGITUDE"), "{line}");
        assert!(!line.contains('\n'));
    }
}
