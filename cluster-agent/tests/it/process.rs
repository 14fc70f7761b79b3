//! The `cluster-agent` binary as a process: exit 64 on bad flags and config, the READY
//! line, `/healthz` and `/readyz`, fail static from the persisted plan with no hub
//! reachable, and exit 0 on SIGTERM. Uses loopback block 127.0.77.x.

// Test helpers outside #[test] functions unwrap too: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fedingress_agent::state::{PersistedPlan, PlanStore};
use fedingress_api::ingress::{Backend, IngressRule, Protocol};
use fedingress_api::plan::{ClusterPlan, IngressKey, IngressShare};
use fedingress_testsupport::{eventually, free_port};

const DEADLINE: Duration = Duration::from_secs(20);
const BIN: &str = env!("CARGO_BIN_EXE_cluster-agent");

/// Kills the child if the test fails before it exits.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Agent {
    fn start(config: &Path) -> (Agent, SocketAddr) {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let agent = Agent(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(DEADLINE).expect("no READY line");
        let json = line
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("not a READY line: {line:?}"));
        let ready: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        let admin = ready["admin"].as_str().unwrap().parse().unwrap();
        (agent, admin)
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "the agent did not exit on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn get(addr: SocketAddr, path: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

fn write_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("token"), "t0k3n\n").unwrap();
    // Nothing listens on port 1: the hub stays unreachable.
    let text = format!(
        "hub: {{address: 'http://127.0.0.1:1'}}
cluster: eu-west
tokenFile: token
driver: standalone
listen: [{{bind: 127.0.77.1}}]
services: {{echo: ['127.0.0.1:7']}}
stateDir: state
admin: 127.0.0.1:0
{extra}"
    );
    let path = dir.join("agent.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn exit_code_and_stderr(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(BIN).args(args).output().unwrap();
    assert!(output.stdout.is_empty(), "nothing on stdout before READY");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_and_config_exit_64_with_one_line() {
    let (code, _) = exit_code_and_stderr(&["--bogus"]);
    assert_eq!(code, Some(64));
    let (code, _) = exit_code_and_stderr(&[]);
    assert_eq!(code, Some(64), "--config is required");

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "bogus: 1\n");
    let (code, stderr) = exit_code_and_stderr(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(64));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("cluster-agent: "), "{stderr}");
    assert!(stderr.contains("bogus"), "{stderr}");

    let missing = dir.path().join("missing.yaml");
    let (code, stderr) = exit_code_and_stderr(&["--config", missing.to_str().unwrap()]);
    assert_eq!(code, Some(64));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    // A CA file without a certificate is a config error too, not a retry loop.
    std::fs::write(dir.path().join("ca.pem"), "junk").unwrap();
    let config = write_config(dir.path(), "");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "'http://127.0.0.1:1'",
        "'https://127.0.0.1:1', caFile: ca.pem",
    );
    std::fs::write(&config, text).unwrap();
    let (code, stderr) = exit_code_and_stderr(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(64));
    assert!(stderr.contains("no PEM certificate"), "{stderr}");
}

#[test]
fn ready_line_health_and_fail_static_without_a_hub() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");

    // No persisted plan, no hub: alive but not ready.
    let (agent, admin) = Agent::start(&config);
    assert_eq!(get(admin, "/healthz"), 200);
    assert_eq!(get(admin, "/readyz"), 503);
    assert_eq!(agent.terminate().code(), Some(0));

    // A plan persisted by an earlier run: served at once with the hub unreachable.
    let port = free_port([127, 0, 77, 1]);
    let mut rule = IngressRule::new(Protocol::Tcp);
    rule.port = Some(i32::from(port));
    rule.backend = Some(Backend::new("echo", 7));
    let plan = ClusterPlan::from(vec![IngressShare {
        key: IngressKey::new("default", "echo"),
        uid: "uid-echo".into(),
        generation: 1,
        rules: vec![rule],
        tls: Vec::new(),
        cluster_override: None,
        anycast_addresses: Vec::new(),
    }]);
    PlanStore::new(dir.path().join("state/plan.json"))
        .save(&PersistedPlan {
            version: 4,
            digest: plan.digest(),
            plan,
        })
        .unwrap();
    let (agent, admin) = Agent::start(&config);
    eventually(DEADLINE, "ready on the persisted plan", || {
        get(admin, "/readyz") == 200
    });
    let listener: SocketAddr = format!("127.0.77.1:{port}").parse().unwrap();
    eventually(DEADLINE, "the persisted plan's listener is bound", || {
        TcpStream::connect(listener).is_ok()
    });
    assert_eq!(agent.terminate().code(), Some(0));
    assert!(
        TcpStream::connect(listener).is_err(),
        "the listener is closed on shutdown"
    );
}
