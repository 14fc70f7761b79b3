//! The etcd member of `fedctl dev up --ha`: found on PATH (Debian's `etcd-server`),
//! started as a one-member cluster on loopback with free client and peer ports and its
//! data under the state dir, and ready once its client URL answers `/health`.
//!
//! Durability is etcd's default (fsync on every commit): a dev federation writes little,
//! and a member that starts in about a second needs no `--unsafe-no-fsync`.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::process::{self, Started};

/// How `dev up --ha` says etcd is missing (one line; `dev up` exits 1).
pub const NOT_INSTALLED: &str = "dev up --ha needs etcd and there is no `etcd` on PATH: install it (Debian, Ubuntu: apt-get install etcd-server) and run it again";

/// `etcd` on PATH.
pub fn find() -> anyhow::Result<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("etcd"))
                .find(|candidate| candidate.is_file())
        })
        .ok_or_else(|| anyhow::anyhow!(NOT_INSTALLED))
}

/// A port of `ip` that was free a moment ago.
fn free_port(ip: &str) -> anyhow::Result<u16> {
    let listener =
        TcpListener::bind((ip, 0)).with_context(|| format!("finding a free port on {ip}"))?;
    Ok(listener.local_addr()?.port())
}

/// Where the member listens.
pub struct Member {
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub data_dir: PathBuf,
}

impl Member {
    /// A member on free ports of `ip`, its data in `data_dir`.
    pub fn on(ip: &str, data_dir: &Path) -> anyhow::Result<Self> {
        let address = |port| {
            format!("{ip}:{port}")
                .parse::<SocketAddr>()
                .with_context(|| format!("{ip} is not an IP address"))
        };
        let client = address(free_port(ip)?)?;
        let mut peer = address(free_port(ip)?)?;
        while peer == client {
            peer = address(free_port(ip)?)?;
        }
        Ok(Self {
            client,
            peer,
            data_dir: data_dir.to_path_buf(),
        })
    }

    /// What the apiservers' `--etcd-servers` takes.
    pub fn client_url(&self) -> String {
        format!("http://{}", self.client)
    }

    /// etcd's flags: a new one-member cluster named `dev`.
    pub fn args(&self) -> Vec<String> {
        let client = self.client_url();
        let peer = format!("http://{}", self.peer);
        [
            "--name",
            "dev",
            "--data-dir",
            &self.data_dir.display().to_string(),
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &format!("dev={peer}"),
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            "fedingress-dev",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
        ]
        .map(str::to_string)
        .to_vec()
    }

    /// Starts etcd (detached, logging to `log`) and waits up to `timeout` until it
    /// answers `/health` healthy (it has elected itself and serves requests).
    pub fn start(&self, exe: &Path, log: &Path, timeout: Duration) -> anyhow::Result<Started> {
        let client = self.client;
        let url = self.client_url();
        process::start_with("etcd", "etcd", exe, self.args(), log, timeout, |_, _| {
            healthy(client).then(|| serde_json::json!({ "client": url }).to_string())
        })
    }
}

/// Whether etcd at `client` answers `GET /health` with `"health":"true"`.
fn healthy(client: SocketAddr) -> bool {
    health(client).is_ok_and(|body| body.contains("\"health\":\"true\""))
}

/// The body of `GET /health` (plain HTTP/1.0, so no client library is needed).
fn health(client: SocketAddr) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect_timeout(&client, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET /health HTTP/1.0\r\nHost: {client}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        bail!("no HTTP response");
    };
    if !head.lines().next().is_some_and(|l| l.contains(" 200")) {
        bail!("{}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_member_cluster_on_the_given_ports() {
        let member = Member {
            client: "127.0.3.1:40001".parse().unwrap(),
            peer: "127.0.3.1:40002".parse().unwrap(),
            data_dir: PathBuf::from("/tmp/dev/etcd"),
        };
        let args = member.args().join(" ");
        assert_eq!(member.client_url(), "http://127.0.3.1:40001");
        assert!(
            args.contains("--listen-client-urls http://127.0.3.1:40001 --advertise-client-urls http://127.0.3.1:40001"),
            "{args}"
        );
        assert!(
            args.contains(
                "--initial-cluster dev=http://127.0.3.1:40002 --initial-cluster-state new"
            ),
            "{args}"
        );
        assert!(args.contains("--data-dir /tmp/dev/etcd"), "{args}");
    }
}
