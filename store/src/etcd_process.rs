//! Real etcd servers for tests (cargo feature `etcd-process`): [`EtcdProcess`] runs one
//! member, [`EtcdCluster`] a cluster of several, all on loopback with free ports and
//! data in a temporary directory, killed by PID on drop. [`EtcdOptions`] says how many
//! members, with what TLS, and under what command prefix (to run them in a network
//! namespace of a test's own, say).
//!
//! The binary is Debian's `etcd-server` (`etcd` on `PATH`, or the path in
//! `FEDINGRESS_ETCD`); when it is missing, starting panics and says how to install it
//! (`scripts/test` does). Nothing is skipped.
//!
//! Health and leadership are read over plain HTTP from each member's metrics listener
//! (`/health`, `/metrics`), a Unix socket in the cluster's directory: this module needs
//! no etcd client, works the same for members that serve clients over TLS, and reaches
//! members whose loopback is not ours (a socket file is seen from every network
//! namespace). Everything here blocks (std processes and sockets): call it from tests,
//! before or beside the async code under test.

#![allow(
    clippy::unwrap_used,
    reason = "test support: a failure is a failed test, reported with context"
)]

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a member (or a cluster) may take to become healthy.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts to start on fresh ports when a port picked as free got taken meanwhile.
const START_ATTEMPTS: usize = 3;

/// TLS for a member's client URL: the server certificate, and optionally a CA whose
/// client certificates the member then requires.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// PEM certificate chain for `127.0.0.1`.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca_file: Option<PathBuf>,
}

/// How to start an [`EtcdCluster`]: the number of members, TLS for their client URLs,
/// and a command prefix they run under. [`EtcdCluster::start`] takes the first two;
/// [`EtcdCluster::start_with`] all three.
///
/// ```no_run
/// # use fedingress_store::etcd_process::{EtcdCluster, EtcdOptions};
/// // One member in the network namespace `fedingress-zm-1234`: its client URL is on
/// // that namespace's loopback, for clients that run there too.
/// let etcd = EtcdCluster::start_with(
///     EtcdOptions::members(1).wrapper(["ip", "netns", "exec", "fedingress-zm-1234"]),
/// );
/// ```
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    size: usize,
    tls: Option<ServerTls>,
    wrapper: Vec<OsString>,
}

impl EtcdOptions {
    /// `size` members (at least one), plain HTTP, `etcd` run directly.
    pub fn members(size: usize) -> Self {
        Self {
            size,
            tls: None,
            wrapper: Vec::new(),
        }
    }

    /// Members serve clients over TLS as `tls` says.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Every member runs as `WRAPPER… etcd ARGS…`, e.g. `ip netns exec NAME` to put it
    /// in that network namespace. The wrapper must exec etcd (as `ip netns exec` and
    /// `nice` do) rather than run it as a child: the member's PID is then etcd's own,
    /// and kill, restart and drop stop etcd itself. Ports are picked free in the
    /// caller's namespace; in a namespace of the test's own every port is free anyway.
    pub fn wrapper<I, S>(mut self, wrapper: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }
}

/// The etcd binary: `FEDINGRESS_ETCD`, else `etcd` on `PATH`. Panics when there is none.
pub fn etcd_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("FEDINGRESS_ETCD") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "FEDINGRESS_ETCD={} is not a file",
            path.display()
        );
        return path;
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "the etcd tests need a real etcd and there is no `etcd` on PATH: run scripts/test \
             (it installs Debian's etcd-server), or `apt-get install etcd-server`"
        )
    })
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap()
}

/// Where test data goes: `/dev/shm` when there is one (etcd fsyncs every write; tests
/// need no durability across reboots), else the temporary directory.
fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(shm)
    {
        return dir;
    }
    builder.tempdir().unwrap()
}

/// The ports and paths of one member, and how it is run.
#[derive(Clone, Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    /// The cluster's directory: the member's working directory, holding its data, log
    /// and metrics socket.
    dir: PathBuf,
    data_dir: PathBuf,
    log_file: PathBuf,
    tls: Option<ServerTls>,
    wrapper: Vec<OsString>,
}

impl Member {
    fn new(dir: &Path, index: usize, options: &EtcdOptions) -> Self {
        let name = format!("m{index}");
        Self {
            client_port: free_port(),
            peer_port: free_port(),
            dir: dir.to_path_buf(),
            data_dir: dir.join(&name),
            log_file: dir.join(format!("{name}.log")),
            name,
            tls: options.tls.clone(),
            wrapper: options.wrapper.clone(),
        }
    }

    fn client_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// The metrics listener's socket file, `<name>.metrics:0` in the working directory:
    /// etcd wants `unix://HOST:PORT` and creates the socket named `HOST:PORT`, relative
    /// to its working directory (which keeps the path short, too).
    fn metrics_socket_name(&self) -> String {
        format!("{}.metrics:0", self.name)
    }

    fn metrics_socket(&self) -> PathBuf {
        self.dir.join(self.metrics_socket_name())
    }

    fn spawn(&self, initial_cluster: &str) -> Child {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log_file)
            .unwrap();
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(etcd_binary());
                command
            }
            None => Command::new(etcd_binary()),
        };
        command
            .current_dir(&self.dir)
            .arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &self.client_url()])
            .args(["--advertise-client-urls", &self.client_url()])
            .args(["--listen-peer-urls", &self.peer_url()])
            .args(["--initial-advertise-peer-urls", &self.peer_url()])
            .args([
                "--listen-metrics-urls",
                &format!("unix://{}", self.metrics_socket_name()),
            ])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "fedingress-test"])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert_file)
                .arg("--key-file")
                .arg(&tls.key_file);
            if let Some(ca) = &tls.client_ca_file {
                command
                    .arg("--trusted-ca-file")
                    .arg(ca)
                    .arg("--client-cert-auth");
            }
        }
        command
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd member {}: {e}", self.name))
    }

    /// The last lines of the member's log, for failure messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// `GET path` over plain HTTP on a Unix socket; the body of a 200, or `None` when
/// nothing answers (or something else does).
fn http_get(socket: &Path, path: &str) -> Option<String> {
    let mut stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.")
        .then(|| body.to_string())
        .filter(|_| head.lines().next().is_some_and(|l| l.contains(" 200")))
}

/// One running etcd member; killed (SIGKILL, by PID) on drop.
pub struct EtcdProcess {
    member: Member,
    initial_cluster: String,
    child: Option<Child>,
}

impl EtcdProcess {
    fn spawn(member: Member, initial_cluster: String) -> Self {
        let child = member.spawn(&initial_cluster);
        Self {
            member,
            initial_cluster,
            child: Some(child),
        }
    }

    /// The member's client URL, e.g. `http://127.0.0.1:41234`.
    pub fn client_url(&self) -> String {
        self.member.client_url()
    }

    /// The member's name in the cluster (`m0`, `m1`, …).
    pub fn name(&self) -> &str {
        &self.member.name
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (not killed, not exited).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// SIGKILL, and reap: the member stops at once, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the member again on the same ports and data (after [`Self::kill`]).
    pub fn restart(&mut self) {
        self.kill();
        self.child = Some(self.member.spawn(&self.initial_cluster));
    }

    /// Whether `/health` answers healthy (the member has a leader and serves reads).
    pub fn is_healthy(&self) -> bool {
        http_get(&self.member.metrics_socket(), "/health")
            .is_some_and(|body| body.contains("\"health\":\"true\""))
    }

    /// Whether the member is the raft leader now (its `etcd_server_is_leader` metric).
    pub fn is_leader(&self) -> bool {
        http_get(&self.member.metrics_socket(), "/metrics").is_some_and(|body| {
            body.lines()
                .any(|line| line.trim() == "etcd_server_is_leader 1")
        })
    }

    /// The member's log so far (the last lines), for failure messages.
    pub fn log_tail(&self) -> String {
        self.member.log_tail()
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An etcd cluster on loopback: every member's process and the directory of their data;
/// a single member is a cluster of one. Dropping it kills the members, then removes
/// the data.
pub struct EtcdCluster {
    // Drop order: the members before the directory holding their data.
    members: Vec<EtcdProcess>,
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// One member, healthy. Panics (with the member's log) when it does not come up.
    pub fn single() -> Self {
        Self::start(1, None)
    }

    /// Three members, healthy with an elected leader.
    pub fn three() -> Self {
        Self::start(3, None)
    }

    /// `size` members, serving clients over TLS when `tls` is given, all healthy.
    pub fn start(size: usize, tls: Option<ServerTls>) -> Self {
        let options = EtcdOptions::members(size);
        Self::start_with(match tls {
            Some(tls) => options.tls(tls),
            None => options,
        })
    }

    /// Members as `options` say, all healthy. Panics (with a member's log) when they do
    /// not come up.
    pub fn start_with(options: EtcdOptions) -> Self {
        assert!(options.size > 0, "a cluster has at least one member");
        let binary = etcd_binary();
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = scratch_dir("fedingress-etcd-");
            let members: Vec<Member> = (0..options.size)
                .map(|i| Member::new(dir.path(), i, &options))
                .collect();
            let initial_cluster = members
                .iter()
                .map(|m| format!("{}={}", m.name, m.peer_url()))
                .collect::<Vec<_>>()
                .join(",");
            let mut cluster = Self {
                members: members
                    .into_iter()
                    .map(|m| EtcdProcess::spawn(m, initial_cluster.clone()))
                    .collect(),
                dir,
            };
            match cluster.wait_healthy(START_TIMEOUT) {
                Ok(()) => return cluster,
                Err(failure) => last_failure = failure,
            }
        }
        panic!(
            "etcd ({}) did not become healthy in {START_ATTEMPTS} attempts: {last_failure}",
            binary.display()
        )
    }

    /// Waits until every running member is healthy; the reason (with logs) otherwise.
    pub fn wait_healthy(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut waiting = None;
            for member in &mut self.members {
                if member.child.is_none() {
                    continue;
                }
                if !member.is_running() {
                    return Err(format!(
                        "member {} exited; its log:\n{}",
                        member.name(),
                        member.log_tail()
                    ));
                }
                if !member.is_healthy() {
                    waiting = Some(member.name().to_string());
                }
            }
            let Some(name) = waiting else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                let member = self.members.iter().find(|m| m.name() == name).unwrap();
                return Err(format!(
                    "member {name} not healthy within {timeout:?}; its log:\n{}",
                    member.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every member's client URL (what `--etcd-servers` takes, comma-joined).
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(EtcdProcess::client_url).collect()
    }

    /// The members, in order.
    pub fn members(&self) -> &[EtcdProcess] {
        &self.members
    }

    /// One member, to kill or restart.
    pub fn member_mut(&mut self, index: usize) -> &mut EtcdProcess {
        &mut self.members[index]
    }

    /// The index of the member that is leader now, if one is.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(EtcdProcess::is_leader)
    }

    /// Waits for a leader among the running members; panics after `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader() {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no etcd leader within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The directory holding the members' data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
