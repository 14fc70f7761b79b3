//! Secrets never reach the logs (docs/security.md "Files and secrets"): a hub and two
//! agents run at debug level for every crate while the credentials they handle are
//! issued, used, refused and renewed — the REST admin token, a wrong token, a join
//! token, a bearer agent token, the agent's private key, the hub's TLS key — and then
//! no log line and no audit line holds any of them.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_tests::echo::Echo;
use fedingress_tests::federation::{ClusterSpec, create_cluster, https_agent_config};
use fedingress_tests::{Kubectl, Process, TestPki, binary, eventually, write_kubeconfig};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const ADMIN: &str = "admin-secret-4f7a2c";
const WRONG: &str = "wrong-secret-9d1e3b";
/// Every crate at debug level: what an operator chasing a problem would turn on.
const LOG_LEVEL: &str = "debug";

fn curl(ca: &Path, token: &str, method: &str, url: &str) -> Value {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-H",
            &format!("Authorization: Bearer {token}"),
            "--cacert",
        ])
        .arg(ca)
        .args(["-X", method, url])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn start_logged(binary_name: &str, args: &[&std::ffi::OsStr], log: &Path) -> Process {
    let mut command = Command::new(binary(binary_name));
    command.args(args).env("FEDINGRESS_LOG", LOG_LEVEL);
    Process::start_logging_to(command, binary_name, WAIT, log).unwrap()
}

/// The base64 body lines of every PEM private key in `path` (a file or a directory).
fn private_key_lines(path: &Path, out: &mut Vec<String>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            private_key_lines(&entry.unwrap().path(), out);
        }
        return;
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let mut inside = false;
    for line in text.lines() {
        if line.starts_with("-----BEGIN") && line.contains("PRIVATE KEY") {
            inside = true;
        } else if line.starts_with("-----END") {
            inside = false;
        } else if inside && line.len() >= 16 {
            out.push(line.to_string());
        }
    }
}

#[test]
fn no_credential_reaches_a_log_or_the_audit_log() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (ca, cert, key) = TestPki::generate().write(dir);
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{ADMIN},alice,1,\"fedingress:admins\"\n"),
    )
    .unwrap();
    let config = dir.join("apiserver.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nagentListen: 127.0.0.1:0\ndataDir: {data}\ntokenFile: {tokens}\ntls: {{certFile: {cert}, keyFile: {key}}}\naudit: {{logPath: {audit}}}\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\n  certificateValiditySeconds: 20\n",
            data = dir.join("hub-data").display(),
            tokens = dir.join("tokens.csv").display(),
            cert = cert.display(),
            key = key.display(),
            audit = dir.join("audit.log").display(),
        ),
    )
    .unwrap();
    let hub_log = dir.join("apiserver.log");
    let hub = start_logged(
        "federation-apiserver",
        &["--config".as_ref(), config.as_os_str()],
        &hub_log,
    );
    let api = format!("https://{}", hub.addr("api"));
    let gateway = format!("https://{}", hub.addr("agent"));
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &api, Some(&ca), Some(ADMIN));
    let kubectl = Kubectl::new(None, kubeconfig);

    // A refused token, then two clusters: one joins with a join token (and renews its
    // certificate), one uses a bearer agent token.
    let refused = curl(
        &ca,
        WRONG,
        "GET",
        &format!("{api}/apis/fedingress.io/v1alpha1/clusters"),
    );
    assert_eq!(refused["code"], 401, "{refused}");
    let joining = ClusterSpec::numbered(93, 1, "europe-west1", 10.0, 20.0);
    let bearer = ClusterSpec::numbered(93, 2, "us-east1", 40.0, -70.0);
    let _echo = (
        Echo::start(joining.backend).unwrap(),
        Echo::start(bearer.backend).unwrap(),
    );
    create_cluster(&kubectl, dir, &joining);
    create_cluster(&kubectl, dir, &bearer);
    let token_url = |cluster: &str, query: &str| {
        format!("{api}/apis/fedingress.io/v1alpha1/clusters/{cluster}/token{query}")
    };
    let join = curl(
        &ca,
        ADMIN,
        "POST",
        &token_url(&joining.name, "?type=join&ttlSeconds=600"),
    )["token"]
        .as_str()
        .unwrap()
        .to_string();
    let agent_token = curl(&ca, ADMIN, "POST", &token_url(&bearer.name, ""))["token"]
        .as_str()
        .unwrap()
        .to_string();
    let join_config = https_agent_config(dir, &gateway, &ca, &joining, &join, true);
    let bearer_config = https_agent_config(dir, &gateway, &ca, &bearer, &agent_token, false);
    let joined = start_logged(
        "cluster-agent",
        &["--config".as_ref(), join_config.as_os_str()],
        &dir.join("agent-join.log"),
    );
    let tokened = start_logged(
        "cluster-agent",
        &["--config".as_ref(), bearer_config.as_os_str()],
        &dir.join("agent-bearer.log"),
    );
    let state = join_config.parent().unwrap().join("state");
    eventually(WAIT, "the joining agent holds a certificate", || {
        if state.join("agent.key").exists() {
            Ok(())
        } else {
            Err("no key yet".into())
        }
    });
    // A bit of running: sessions, reports, a renewal at 70-80 % of 20 s.
    std::thread::sleep(Duration::from_secs(17));
    drop((joined, tokened, hub));

    let mut secrets = vec![
        ADMIN.to_string(),
        WRONG.to_string(),
        join.clone(),
        agent_token.clone(),
    ];
    // The token's secret half too, should something log it alone.
    for token in [&join, &agent_token] {
        if let Some((_, secret)) = token.split_once('.') {
            secrets.push(secret.to_string());
        }
    }
    let before_keys = secrets.len();
    private_key_lines(&state, &mut secrets);
    private_key_lines(&key, &mut secrets);
    private_key_lines(&dir.join("hub-data"), &mut secrets);
    assert!(
        secrets.len() > before_keys + 1,
        "the agent's and the hub's keys were found"
    );
    let logs = [
        hub_log,
        dir.join("agent-join.log"),
        dir.join("agent-bearer.log"),
        dir.join("audit.log"),
    ];
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            !text.is_empty(),
            "{} is empty: the test would prove nothing",
            log.display()
        );
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{} holds a secret ({}…)",
                log.display(),
                &secret[..6]
            );
        }
    }
}
