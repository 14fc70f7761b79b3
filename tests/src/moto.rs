//! moto's AWS emulator (`moto_server`, PyPI `moto[server]`) on a loopback port, for the
//! Route53 provider's tests: started per test, killed by PID on drop.
//!
//! moto stores Route53 record sets and health checks as the real API does for what we
//! use, with the quirks listed in `../shared/DEPENDENCIES.md` and in
//! `tests/tests/e2e/route53.rs`. It answers no DNS and its health checks are always healthy.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::Process;

/// A running `moto_server`.
pub struct Moto {
    process: Process,
    pub addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Gives `command` (a process using the AWS SDK's standard credential chain, e.g. the
/// apiserver with a Route53 provider) moto's test credentials from the environment only:
/// nothing from the developer's `~/.aws` (files pointed at nothing under `dir`), no
/// instance-metadata lookups.
pub fn aws_test_environment(command: &mut Command, dir: &Path) {
    command
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", dir.join("no-aws-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.join("no-aws-credentials"),
        )
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
}

impl Moto {
    /// Starts `moto_server -H 127.0.0.1 -p <free port>` and waits until it answers.
    pub fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("temporary directory for moto's log")?;
        let log = dir.path().join("moto.log");
        // The port is chosen here and handed to moto (it cannot report one it picked):
        // another process could take it in between, so a start that fails is retried on
        // another port.
        let mut last = None;
        for _ in 0..3 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let file = std::fs::File::create(&log)
                .with_context(|| format!("creating {}", log.display()))?;
            let mut command = Command::new("moto_server");
            command
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::from(file.try_clone()?))
                .stderr(Stdio::from(file));
            let child = command.spawn().map_err(|e| {
                anyhow::anyhow!(
                    "starting moto_server: {e} (install it with `pip install 'moto[server]'`; \
                     scripts/test does)"
                )
            })?;
            let mut process = Process {
                child,
                ready: serde_json::Value::Null,
                name: "moto_server".into(),
            };
            match wait_ready(&mut process, addr, Duration::from_secs(30)) {
                Ok(()) => {
                    return Ok(Self {
                        process,
                        addr,
                        log,
                        _dir: dir,
                    });
                }
                Err(e) => last = Some(e.context(read_tail(&log))),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("moto_server did not start")))
    }

    /// `http://127.0.0.1:<port>`, for the SDK's `endpoint_url`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The end of moto's log (its request lines), for failure messages.
    pub fn log_tail(&self) -> String {
        read_tail(&self.log)
    }
}

fn read_tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(20);
    format!(
        "moto log ({}):\n{}",
        log.display(),
        lines[from..].join("\n")
    )
}

/// Polls moto's own API (`GET /moto-api/data.json`) until it answers 200.
fn wait_ready(process: &mut Process, addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if !process.is_running() {
            bail!("moto_server on {addr} exited during start");
        }
        if get_status(addr, "/moto-api/data.json").is_ok_and(|s| s == 200) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("moto_server on {addr} did not answer within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get_status(addr: SocketAddr, path: &str) -> anyhow::Result<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    let line = String::from_utf8_lossy(&head);
    line.get(9..12)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status line")
}
