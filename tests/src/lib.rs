//! fedingress-tests: the harness for end-to-end tests that run the workspace's real
//! binaries and real peers (kubectl).
//!
//! Entry points: [`binary`] (build the workspace's binaries once, then locate one; Cargo
//! sets `CARGO_BIN_EXE_*` only inside the package that owns a binary), [`Process`]
//! (a child started on port 0 that prints a `READY {json}` line, killed by PID on drop),
//! [`Kubectl`], [`TestPki`] and [`eventually`]; [`dnsprobe`] records a steady stream of
//! DNS queries and judges every answer against the steady state; [`replicas`] runs
//! federation-apiserver replicas on etcd with agents, for the HA tests; [`flood`] sends UDP
//! from very many spoofed loopback sources through a few sockets; [`kubeapi`] is a
//! scripted Kubernetes API server for kube-rs clients; [`netns`] gives a test a network
//! namespace of its own (only loopback) for programs that must reach nothing else;
//! [`bgp`] runs BIRD 2 as a router and reads its RIB; [`anycast`] is an anycast
//! network in namespaces (router, two sites with agents, a client);
//! [`vrrp`] is two hosts sharing a virtual IP through keepalived, with agents or alone;
//! [`pools`] is one cluster with two IngressPools of two hosts each, run by the real hub;
//! [`oidc`] is an OIDC issuer (discovery and JWKS over HTTPS) that mints tokens;
//! [`docs`] reads the examples of `docs/*.md` for tests that run them as written. The
//! tests themselves live in `tests/`. What does not belong here: product logic. Tests
//! talk to the product only through its binaries and network APIs.

#![allow(clippy::unwrap_used)]

pub mod anycast;
pub mod bgp;
pub mod clouddns_fake;
pub mod dnsprobe;
pub mod docs;
pub mod fedctl;
pub mod federation;
pub mod flood;
pub mod kubeapi;
pub mod moto;
pub mod netns;
pub mod oidc;
pub mod pools;
pub mod replicas;
pub mod soak;
pub mod throttle;
pub mod vrrp;
pub mod web;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
/// The workspace's one echo backend and polling helper (`fedingress_testsupport`), here
/// for the tests that import them from the harness.
pub use fedingress_testsupport::{echo, eventually};

/// The directory holding the workspace's binaries for this build profile.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// The binaries the end-to-end tests run: the product's, never the benchmarks'.
pub const PRODUCT_BINARIES: [&str; 3] = ["federation-apiserver", "cluster-agent", "fedctl"];

/// Builds the product's binaries once per test process, then returns the path of
/// `name`. The build includes the tests (`--tests`, as scripts/test builds): with them,
/// cargo resolves the tests' feature set for the binaries too, so the binaries and the
/// tests share one build of every dependency.
///
/// With `FEDINGRESS_TEST_BIN_DIR` set, nothing is built and the binaries are taken from
/// that directory instead (to run the tests against binaries built elsewhere, e.g. a
/// baseline to show that a test detects a bug).
pub fn binary(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("FEDINGRESS_TEST_BIN_DIR") {
        let path = PathBuf::from(dir).join(name);
        assert!(path.exists(), "binary {} does not exist", path.display());
        return path;
    }
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = bin_dir();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut command = Command::new(cargo);
        command.args(["build", "--workspace", "--tests", "--quiet"]);
        command.args(PRODUCT_BINARIES.iter().flat_map(|name| ["--bin", name]));
        if release {
            command.arg("--release");
        }
        if let Some(target) = dir.parent() {
            command.env("CARGO_TARGET_DIR", target);
        }
        let status = command
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .status()
            .expect("running cargo build");
        assert!(
            status.success(),
            "cargo build --workspace --tests (and the product binaries) failed"
        );
    });
    let path = bin_dir().join(name);
    assert!(path.exists(), "binary {} was not built", path.display());
    path
}

/// A child process that announced itself with `READY {json}`; killed (by PID) on drop.
pub struct Process {
    pub child: Child,
    pub ready: serde_json::Value,
    pub name: String,
}

impl Process {
    /// Starts `command` and waits up to `timeout` for its READY line.
    pub fn start(command: Command, name: &str, timeout: Duration) -> anyhow::Result<Self> {
        Self::start_with_stderr(command, name, timeout, Stdio::inherit())
    }

    /// [`Process::start`] with the child's stderr (its log) written to `log`.
    pub fn start_logging_to(
        command: Command,
        name: &str,
        timeout: Duration,
        log: &std::path::Path,
    ) -> anyhow::Result<Self> {
        let file = std::fs::File::create(log)
            .with_context(|| format!("creating log file {}", log.display()))?;
        Self::start_with_stderr(command, name, timeout, Stdio::from(file))
    }

    fn start_with_stderr(
        mut command: Command,
        name: &str,
        timeout: Duration,
        stderr: Stdio,
    ) -> anyhow::Result<Self> {
        command
            .stdout(Stdio::piped())
            .stderr(stderr)
            .stdin(Stdio::null());
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let stdout = child.stdout.take().context("child stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut sent = false;
            while let Some(Ok(line)) = lines.next() {
                if let Some(json) = line.strip_prefix("READY ").filter(|_| !sent) {
                    let _ = tx.send(json.to_string());
                    sent = true;
                }
            }
        });
        match rx.recv_timeout(timeout) {
            Ok(json) => Ok(Self {
                child,
                ready: serde_json::from_str(&json).context("parsing READY line")?,
                name: name.to_string(),
            }),
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                bail!("{name} printed no READY line within {timeout:?} (exit: {status:?})")
            }
        }
    }

    /// Starts `command`, a peer that prints no READY line (e.g. `knotd`): the caller
    /// waits for it to serve. Its stdout is discarded, its stderr inherited.
    pub fn spawn(mut command: Command, name: &str) -> anyhow::Result<Self> {
        command
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null());
        let child = command
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            child,
            ready: serde_json::Value::Null,
            name: name.to_string(),
        })
    }

    /// An address from the READY line, e.g. `addr("api")`.
    pub fn addr(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap_or_default().to_string()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGSTOP: the process freezes (its sockets stay open, nothing is served or sent)
    /// until [`Process::resume`]. Dropping a stopped process still kills it.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT after [`Process::pause`].
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "kill -{name} {}: {status:?}",
            self.name
        );
    }

    /// SIGKILL, and reap.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for the exit status (SIGKILL after `timeout`).
    pub fn terminate(mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where the real kubectl binaries are: the dispatcher on PATH and the versioned ones.
pub fn kubectl_path(version: Option<&str>) -> PathBuf {
    let name = match version {
        Some(v) => format!("kubectl.{v}"),
        None => "kubectl".into(),
    };
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(PathBuf::from("/usr/lib/google-cloud-sdk/bin"));
    for dir in dirs {
        let candidate = dir.join(&name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "{name} not found on PATH or in /usr/lib/google-cloud-sdk/bin: these tests need the real kubectl (1.27+; Debian's 1.20 is too old)"
    );
}

/// kubectl against one server through its own kubeconfig.
pub struct Kubectl {
    pub binary: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn new(version: Option<&str>, kubeconfig: PathBuf) -> Self {
        Self {
            binary: kubectl_path(version),
            kubeconfig,
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env(
                "HOME",
                self.kubeconfig.parent().unwrap_or(Path::new("/tmp")),
            )
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running kubectl")
    }

    /// Runs and requires success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates namespace `name` with `kubectl create namespace` (the API server refuses
    /// objects in a namespace that does not exist); one that exists already is fine.
    pub fn create_namespace(&self, name: &str) {
        let out = self.run(&["create", "namespace", name]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("AlreadyExists"),
            "kubectl create namespace {name}: {stderr}"
        );
    }

    /// Runs and requires failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} should have failed but printed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// A federation-apiserver on loopback ports (API and agent gateway on port 0) with its
/// data in `data_dir` and `extra` arguments (e.g. `--dev`), started and ready.
pub fn start_apiserver(data_dir: &Path, extra: &[&str]) -> Process {
    let mut command = Command::new(binary("federation-apiserver"));
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--agent-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(data_dir)
        .args(extra);
    Process::start(command, "federation-apiserver", Duration::from_secs(30))
        .expect("the federation-apiserver starts")
}

/// kubectl `version` (`None`: the default one) on a `--dev` apiserver (no credentials),
/// its kubeconfig written into `dir`.
pub fn dev_kubectl(dir: &Path, server: &Process, version: Option<&str>) -> Kubectl {
    let kubeconfig = dir.join(format!("kubeconfig-{}", version.unwrap_or("default")));
    write_kubeconfig(
        &kubeconfig,
        &format!("http://{}", server.addr("api")),
        None,
        None,
    );
    Kubectl::new(version, kubeconfig)
}

/// Writes a kubeconfig for `server` (with a CA and a token when given).
pub fn write_kubeconfig(path: &Path, server: &str, ca: Option<&Path>, token: Option<&str>) {
    let cluster = match ca {
        Some(ca) => format!(
            "    server: {server}\n    certificate-authority: {}\n",
            ca.display()
        ),
        None => format!("    server: {server}\n"),
    };
    let user = match token {
        Some(token) => format!("    token: {token}\n"),
        None => "    {}\n".into(),
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fed\n  cluster:\n{cluster}users:\n- name: me\n  user:\n{user}contexts:\n- name: fed\n  context:\n    cluster: fed\n    user: me\n    namespace: default\ncurrent-context: fed\n"
    );
    std::fs::write(path, text).expect("writing kubeconfig");
}

/// A throwaway CA and a server certificate for 127.0.0.1 / ::1 / localhost.
pub struct TestPki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestPki {
    pub fn generate() -> Self {
        Self::generate_with_ips(&[])
    }

    /// [`TestPki::generate`] with `ips` in the server certificate too (a server
    /// reached off loopback, e.g. inside a test's network namespaces).
    pub fn generate_with_ips(ips: &[std::net::IpAddr]) -> Self {
        let ca = fedingress_testsupport::tls::Ca::new("fedingress test CA");
        let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
        let mut names = vec!["localhost", "127.0.0.1", "::1"];
        names.extend(ips.iter().map(String::as_str));
        let (cert_pem, key_pem) = ca.leaf(&names);
        Self {
            ca_pem: ca.pem,
            cert_pem,
            key_pem,
        }
    }

    /// Writes ca.crt, tls.crt and tls.key into `dir`.
    pub fn write(&self, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let paths = (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&paths.0, &self.ca_pem).unwrap();
        std::fs::write(&paths.1, &self.cert_pem).unwrap();
        std::fs::write(&paths.2, &self.key_pem).unwrap();
        paths
    }
}

/// Path of a file under the repository root.
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}
