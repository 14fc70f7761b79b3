//! Agent identity end to end with real binaries (issue 12): a join token buys a client
//! certificate and an mTLS session; a join token works once; the agent renews its
//! certificate before it expires without losing its session; revoking the certificate
//! (or a token) ends the live session at once (the time is printed); a re-created
//! cluster refuses the old token and the old certificate; a certificate from another CA
//! is refused. Each test has its own loopback block (127.0.N.x) for its agents; the hub
//! listens on 127.0.0.1 (the test certificate's address) on port 0.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fedingress_tests::echo::Echo;
use fedingress_tests::fedctl::Fedctl;
use fedingress_tests::federation::{ClusterSpec, create_cluster, https_agent_config, start_agent};
use fedingress_tests::{Kubectl, Process, TestPki, binary, eventually, write_kubeconfig};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// The REST API's admin token (the agent gateway never accepts it).
const ADMIN: &str = "admin-token";

/// A hub serving TLS (the test PKI) with a short certificate validity.
struct Hub {
    process: Process,
    api: String,
    agent: String,
    ca: PathBuf,
    kubectl: Kubectl,
}

impl Hub {
    fn start(dir: &Path, certificate_validity_seconds: u64) -> Self {
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
                "listen: 127.0.0.1:0\nagentListen: 127.0.0.1:0\ndataDir: {}\ntokenFile: {}\ntls: {{certFile: {}, keyFile: {}}}\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\n  certificateValiditySeconds: {certificate_validity_seconds}\n",
                dir.join("hub-data").display(),
                dir.join("tokens.csv").display(),
                cert.display(),
                key.display(),
            ),
        )
        .unwrap();
        let mut command = Command::new(binary("federation-apiserver"));
        command.arg("--config").arg(&config);
        let process = Process::start(command, "federation-apiserver", WAIT).unwrap();
        let api = format!("https://{}", process.addr("api"));
        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &api, Some(&ca), Some(ADMIN));
        Hub {
            agent: format!("https://{}", process.addr("agent")),
            api,
            ca,
            kubectl: Kubectl::new(None, kubeconfig),
            process,
        }
    }

    fn curl(&self, method: &str, path: &str) -> Value {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-H",
                &format!("Authorization: Bearer {ADMIN}"),
                "--cacert",
            ])
            .arg(&self.ca)
            .args(["-X", method, &format!("{}{path}", self.api)])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }

    fn issue(&self, cluster: &str, query: &str) -> (String, String) {
        let body = self.curl(
            "POST",
            &format!("/apis/fedingress.io/v1alpha1/clusters/{cluster}/token{query}"),
        );
        (
            body["metadata"]["name"].as_str().unwrap().to_string(),
            body["token"].as_str().unwrap().to_string(),
        )
    }

    fn credentials(&self, cluster: &str) -> Vec<Value> {
        self.curl(
            "GET",
            &format!("/apis/fedingress.io/v1alpha1/clusters/{cluster}/token"),
        )["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn revoke(&self, cluster: &str, id: &str) {
        let status = self.curl(
            "DELETE",
            &format!("/apis/fedingress.io/v1alpha1/clusters/{cluster}/token/{id}"),
        );
        assert_eq!(status["status"], "Success", "{status}");
    }

    /// The hub's /metrics text.
    fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-H",
                &format!("Authorization: Bearer {ADMIN}"),
                "--cacert",
            ])
            .arg(&self.ca)
            .arg(format!("{}/metrics", self.api))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `fedingress_agents_connected` from /metrics.
    fn connected_agents(&self) -> u64 {
        self.metric("fedingress_agents_connected")
    }

    /// Sessions ended by a revocation so far (`fedingress_agent_sessions_revoked_total`).
    fn sessions_revoked(&self) -> u64 {
        self.metric("fedingress_agent_sessions_revoked_total")
    }

    /// The value of the unlabelled metric `name` (0 when absent).
    fn metric(&self, name: &str) -> u64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    fn wait_connected(&self, n: u64, what: &str) {
        eventually(WAIT, what, || {
            let now = self.connected_agents();
            if now == n {
                Ok(())
            } else {
                Err(format!("{now} agents connected"))
            }
        });
    }
}

/// An agent config of `spec` for the hub over https; with `join`, a join token file
/// instead of a token file.
fn https_agent(dir: &Path, hub: &Hub, spec: &ClusterSpec, secret: &str, join: bool) -> PathBuf {
    https_agent_config(dir, &hub.agent, &hub.ca, spec, secret, join)
}

/// Whether the client certificate of the agent of `config` (in its `stateDir`) holds
/// `text` (its URI SAN is in the DER as written).
fn cert_holds(config: &Path, text: &str) -> bool {
    use base64::Engine as _;
    let yaml: Value = yaml_serde::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    let state = yaml["stateDir"].as_str().unwrap_or("state");
    let pem = std::fs::read_to_string(config.parent().unwrap().join(state).join("agent.crt"))
        .unwrap_or_default();
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap_or_default();
    der.windows(text.len()).any(|w| w == text.as_bytes())
}

fn cert_meta(config: &Path) -> Value {
    let path = config.parent().unwrap().join("state/agent-cert.json");
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// Time from the revoking request to the hub ending the live session it authenticated
/// (`fedingress_agent_sessions_revoked_total` counts it). Not "no agent connected": an
/// agent that still holds a newer credential is back within milliseconds, faster than
/// a poll of /metrics on a loaded machine.
fn measure_revocation(hub: &Hub, cluster: &str, id: &str) -> Duration {
    let before = hub.sessions_revoked();
    let started = Instant::now();
    hub.revoke(cluster, id);
    while hub.sessions_revoked() == before {
        assert!(
            started.elapsed() < WAIT,
            "the session outlived its revoked credential"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    started.elapsed()
}

#[test]
fn join_token_buys_an_mtls_session_that_renews_and_is_revoked_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // Renewal at 70-80 % of 30 s.
    let hub = Hub::start(dir, 30);
    let spec = ClusterSpec::numbered(96, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    create_cluster(&hub.kubectl, dir, &spec);

    let (join_id, join) = hub.issue("c1", "?type=join&ttlSeconds=600");
    let listed = hub.credentials("c1");
    assert!(
        listed
            .iter()
            .any(|c| c["metadata"]["name"] == join_id.as_str() && c["type"] == "join"),
        "{listed:?}"
    );
    assert!(!serde_json::to_string(&listed).unwrap().contains(&join));
    let config = https_agent(dir, &hub, &spec, &join, true);
    // Issue 24: the agent joins as a named member; its certificate names it.
    let mut yaml = std::fs::read_to_string(&config).unwrap();
    yaml.push_str("member: {name: web-1, labels: {zone: a}}\n");
    std::fs::write(&config, yaml).unwrap();
    let agent = start_agent(&config, "c1");
    hub.wait_connected(1, "c1 connected with its new client certificate");
    assert!(
        cert_holds(&config, "fedingress://clusters/c1/") && cert_holds(&config, "/members/web-1"),
        "the joined certificate names member web-1"
    );
    let state = config.parent().unwrap().join("state");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join("agent.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the agent's key is private");
    }
    let first = cert_meta(&config)["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let kinds: Vec<String> = hub
        .credentials("c1")
        .iter()
        .map(|c| c["type"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["certificate"], "the join token is spent");

    // The same join token again (another agent, no certificate yet): refused.
    let mut twin_spec = ClusterSpec::numbered(96, 2, "europe-west1", 10.0, 20.0);
    twin_spec.name = "c1".into();
    let twin_dir = dir.join("twin");
    std::fs::create_dir_all(&twin_dir).unwrap();
    let twin_config = https_agent(&twin_dir, &hub, &twin_spec, &join, true);
    let twin = start_agent(&twin_config, "c1 twin");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        cert_meta(&twin_config),
        Value::Null,
        "a used join token bought a certificate"
    );
    assert_eq!(hub.connected_agents(), 1);
    drop(twin);

    // Rotation before expiry, the session kept meanwhile.
    let rotated_at = Instant::now();
    let mut lowest = u64::MAX;
    eventually(WAIT, "the certificate renewed", || {
        lowest = lowest.min(hub.connected_agents());
        let now = cert_meta(&config)["fingerprint"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if now != first && !now.is_empty() {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    println!(
        "certificate renewed after {:?} of 30 s validity (waited from the first connect)",
        rotated_at.elapsed()
    );
    assert_eq!(lowest, 1, "the session was lost during rotation");
    let renewed = cert_meta(&config)["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        cert_holds(&config, "/members/web-1"),
        "the renewal keeps the member"
    );

    // The renewed certificate refused before it was ever used: the agent keeps the one
    // that works (kubelet's rotation) and presents it on its next connection.
    hub.revoke("c1", &renewed);
    drop(agent);
    hub.wait_connected(0, "c1 gone after its agent stopped");
    let agent = start_agent(&config, "c1");
    hub.wait_connected(1, "c1 back with its previous certificate");

    // Back on the previous certificate, already past 70 % of its life, the agent renews
    // at once: wait for that third certificate, so what follows does not race it.
    let mut third = String::new();
    eventually(WAIT, "the fallback certificate renewed", || {
        third = cert_meta(&config)["fingerprint"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !third.is_empty() && third != first && third != renewed {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });

    // Revoking the certificate in use ends the live session at once; the agent comes
    // back with its newer certificate (revoking an old one does not lock it out).
    let took = measure_revocation(&hub, "c1", &first);
    println!("certificate revoked: live session ended {took:?} after the DELETE was sent");
    assert!(took < Duration::from_secs(10), "{took:?}");
    hub.wait_connected(1, "c1 back with its newest certificate");
    // Revoking that one too: the session ends, and no certificate is left to come back.
    let took = measure_revocation(&hub, "c1", &third);
    println!("newest certificate revoked: live session ended {took:?} after the DELETE");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        hub.connected_agents(),
        0,
        "a revoked certificate reconnected"
    );
    drop(agent);

    // A bearer token (the compatibility path) over the same TLS gateway: revoked, the
    // session ends at once too.
    let (token_id, token) = hub.issue("c1", "");
    let token_config = https_agent(&dir.join("token-agent"), &hub, &spec, &token, false);
    let _token_agent = start_agent(&token_config, "c1 token");
    hub.wait_connected(1, "c1 connected with a token");
    let took = measure_revocation(&hub, "c1", &token_id);
    println!("token revoked: live session ended {took:?} after the DELETE was sent");
    let metrics = hub.metrics();
    for line in [
        "fedingress_agent_certificates_issued_total{rpc=\"join\"} 1",
        "fedingress_agent_certificates_issued_total{rpc=\"renew\"} 2",
        "fedingress_agent_sessions_revoked_total 3",
    ] {
        assert!(metrics.contains(line), "{line} not in {metrics}");
    }
    assert!(
        !metrics.contains("fedingress_agent_auth_refused_total{kind=\"join\"} 0"),
        "the twin's refused joins are counted"
    );
    drop(hub.process);
}

#[test]
fn a_recreated_cluster_and_a_foreign_ca_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = Hub::start(dir, 3600);
    let spec = ClusterSpec::numbered(97, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    create_cluster(&hub.kubectl, dir, &spec);

    let (_, token) = hub.issue("c1", "");
    let (_, join) = hub.issue("c1", "?type=join");
    let cert_config = https_agent(dir, &hub, &spec, &join, true);
    let cert_agent = start_agent(&cert_config, "c1 cert");
    hub.wait_connected(1, "c1 connected with a certificate");
    drop(cert_agent);
    hub.wait_connected(0, "c1 gone");
    let token_dir = dir.join("token-agent");
    std::fs::create_dir_all(&token_dir).unwrap();
    let token_config = https_agent(&token_dir, &hub, &spec, &token, false);
    let token_agent = start_agent(&token_config, "c1 token");
    hub.wait_connected(1, "c1 connected with a token");

    // Deleting the Cluster ends the session; created again (a new uid) it refuses both.
    let started = Instant::now();
    hub.kubectl.ok(&["delete", "cluster", "c1"]);
    hub.wait_connected(0, "c1's session ended with its Cluster");
    println!(
        "cluster deleted: session ended within {:?}",
        started.elapsed()
    );
    drop(token_agent);
    create_cluster(&hub.kubectl, dir, &spec);
    let _token_agent = start_agent(&token_config, "c1 old token");
    let _cert_agent = start_agent(&cert_config, "c1 old certificate");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        hub.connected_agents(),
        0,
        "the old token or certificate of a deleted cluster was accepted"
    );
    drop(_token_agent);
    drop(_cert_agent);

    // A certificate from another CA with the right name: the TLS handshake refuses it.
    let foreign_dir = dir.join("foreign");
    std::fs::create_dir_all(foreign_dir.join("agent-c1/state")).unwrap();
    let (fresh_id, fresh_join) = hub.issue("c1", "?type=join");
    let foreign_config = https_agent(&foreign_dir, &hub, &spec, &fresh_join, true);
    let state = foreign_config.parent().unwrap().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let (cert, key) = foreign_client_certificate("c1");
    std::fs::write(state.join("agent.crt"), cert).unwrap();
    std::fs::write(state.join("agent.key"), key).unwrap();
    let far = chrono::Utc::now().timestamp() + 3600;
    std::fs::write(
        state.join("agent-cert.json"),
        format!(
            "{{\"issuedAt\": {}, \"notAfter\": {far}, \"fingerprint\": \"x\", \"joinTokenId\": \"{fresh_id}\"}}",
            far - 7200
        ),
    )
    .unwrap();
    // Only the certificate counts: its metadata marks the join token in the file used.
    let _foreign = start_agent(&foreign_config, "c1 foreign");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        hub.connected_agents(),
        0,
        "a certificate of another CA was accepted"
    );
    drop(hub.process);
}

/// A client certificate for `cluster` signed by a CA the hub does not know.
fn foreign_client_certificate(cluster: &str) -> (String, String) {
    use rcgen::{CertificateParams, DnType};
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cluster);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    fedingress_testsupport::tls::Ca::new("not the hub").sign(params)
}

#[test]
fn fedctl_join_emits_an_agent_that_joins_with_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = Hub::start(dir, 3600);
    let spec = ClusterSpec::numbered(98, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    let fedctl = Fedctl::new(&dir.join("kubeconfig"));
    let agent_dir = dir.join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let join_file = agent_dir.join("c1.join-token");
    let run = fedctl.run(&[
        "join",
        "c1",
        "--region",
        "europe-west1",
        "--location",
        "10,20",
        "--emit",
        "standalone",
        "--hub-address",
        &hub.agent,
        "--hub-ca",
        &hub.ca.display().to_string(),
        "--token-file",
        &join_file.display().to_string(),
        "--listen",
        &spec.bind.to_string(),
        "--service",
        &format!("echo={}", spec.backend),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("joinTokenFile:"), "{}", run.stdout);
    assert!(!run.stdout.contains("\ntokenFile:"), "{}", run.stdout);
    assert!(run.stderr.contains("join token"), "{}", run.stderr);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&join_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the join token file is private");
    }
    let config = agent_dir.join("agent.yaml");
    std::fs::write(&config, &run.stdout).unwrap();
    let _agent = start_agent(&config, "c1");
    hub.wait_connected(1, "the emitted agent joined and connected");
    let kinds: Vec<String> = hub
        .credentials("c1")
        .iter()
        .map(|c| c["type"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["certificate"], "the join token is spent");

    // Issue 24: a second agent of the same cluster, as member web-2: a join token for the
    // existing cluster (no --region, --location), the member and its own state dir in
    // the config; both agents hold a session.
    let member_spec = ClusterSpec::numbered(98, 2, "europe-west1", 10.0, 20.0);
    let member_dir = dir.join("agent-web-2");
    std::fs::create_dir_all(&member_dir).unwrap();
    let member_join_file = member_dir.join("c1-web-2.join-token");
    let run = fedctl.run(&[
        "join",
        "c1",
        "--member",
        "web-2",
        "--emit",
        "standalone",
        "--hub-address",
        &hub.agent,
        "--hub-ca",
        &hub.ca.display().to_string(),
        "--token-file",
        &member_join_file.display().to_string(),
        "--listen",
        &member_spec.bind.to_string(),
        "--service",
        &format!("echo={}", spec.backend),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("member web-2 of cluster/c1"),
        "{}",
        run.stderr
    );
    let emitted: Value = yaml_serde::from_str(&run.stdout).unwrap();
    assert_eq!(emitted["member"]["name"], "web-2", "{}", run.stdout);
    assert_eq!(emitted["stateDir"], "c1-web-2-state", "{}", run.stdout);
    let member_config = member_dir.join("agent.yaml");
    std::fs::write(&member_config, &run.stdout).unwrap();
    let _member_agent = start_agent(&member_config, "c1 web-2");
    hub.wait_connected(2, "both members of c1 connected");
    assert!(cert_holds(&member_config, "/members/web-2"));
    let run = fedctl.run(&["join", "c9", "--member", "web-1"]);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("give --region and --location"),
        "{}",
        run.stderr
    );

    // The compatibility path on request.
    let run = fedctl.run(&[
        "join",
        "c2",
        "--region",
        "us-east1",
        "--location",
        "20,40",
        "--token",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("agent token"), "{}", run.stdout);
    let kinds: Vec<String> = hub
        .credentials("c2")
        .iter()
        .map(|c| c["type"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds, ["token"]);
    drop(hub.process);
}

/// Two replicas on one etcd, sharing the agent CA files: a certificate revoked through
/// one replica's API ends the session the other replica holds.
#[test]
fn revocation_through_one_replica_ends_the_session_on_another() {
    use fedingress_store::etcd_process::EtcdCluster;
    let etcd = EtcdCluster::single();
    let endpoints = etcd.endpoints().join(",");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (ca, cert, key) = TestPki::generate().write(dir);
    let agent_ca = foreign_ca("shared agent CA");
    std::fs::write(dir.join("agent-ca.crt"), &agent_ca.0).unwrap();
    std::fs::write(dir.join("agent-ca.key"), &agent_ca.1).unwrap();
    let config = dir.join("apiserver.yaml");
    std::fs::write(
        &config,
        format!(
            "dev: true\nlisten: 127.0.0.1:0\nagentListen: 127.0.0.1:0\nagentTls: {{certFile: {}, keyFile: {}}}\nagentCa: {{certFile: {}, keyFile: {}}}\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 1500\n",
            cert.display(),
            key.display(),
            dir.join("agent-ca.crt").display(),
            dir.join("agent-ca.key").display(),
        ),
    )
    .unwrap();
    let replicas: Vec<(Process, String)> = (1..=2)
        .map(|i| {
            let mut command = Command::new(binary("federation-apiserver"));
            command
                .arg("--config")
                .arg(&config)
                .args(["--etcd-servers", &endpoints, "--etcd-prefix", "/identity"])
                .args(["--replica-name", &format!("r{i}")])
                .arg("--data-dir")
                .arg(dir.join(format!("unused-{i}")));
            let process = Process::start(command, &format!("replica r{i}"), WAIT).unwrap();
            let api = format!("http://{}", process.addr("api"));
            (process, api)
        })
        .collect();
    let (r1, r2) = (&replicas[0], &replicas[1]);
    let agents = |api: &str| -> u64 {
        let out = Command::new("curl")
            .args(["-sS", &format!("{api}/metrics")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("fedingress_agents_connected "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &r2.1, None, None);
    let spec = ClusterSpec::numbered(99, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    create_cluster(&Kubectl::new(None, kubeconfig), dir, &spec);
    let curl = |method: &str, url: &str| -> Value {
        let out = Command::new("curl")
            .args(["-sS", "-X", method, url])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    // Issued through r2, used on r1.
    let join = curl(
        "POST",
        &format!(
            "{}/apis/fedingress.io/v1alpha1/clusters/c1/token?type=join",
            r2.1
        ),
    )["token"]
        .as_str()
        .unwrap()
        .to_string();
    let agent_config = https_agent_config(
        dir,
        &format!("https://{}", r1.0.addr("agent")),
        &ca,
        &spec,
        &join,
        true,
    );
    let _agent = start_agent(&agent_config, "c1");
    eventually(WAIT, "c1 connected to r1 with a certificate", || {
        if agents(&r1.1) == 1 {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    let fingerprint = cert_meta(&agent_config)["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let status = curl(
        "DELETE",
        &format!(
            "{}/apis/fedingress.io/v1alpha1/clusters/c1/token/{fingerprint}",
            r2.1
        ),
    );
    assert_eq!(status["status"], "Success", "{status}");
    while agents(&r1.1) != 0 {
        assert!(started.elapsed() < WAIT, "r1 kept the revoked session");
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "certificate revoked through r2: r1's session ended {:?} after the DELETE was sent",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(agents(&r1.1), 0, "the revoked certificate reconnected");
}

/// A self-signed CA: its certificate and key, PEM.
fn foreign_ca(name: &str) -> (String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A certificate that expired while its agent was down: the agent says it needs a new
/// join token and stays out; with one it joins again.
#[test]
fn an_expired_certificate_needs_a_new_join_token() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // The shortest validity the hub allows.
    let hub = Hub::start(dir, 10);
    let spec = ClusterSpec::numbered(95, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    create_cluster(&hub.kubectl, dir, &spec);
    let (_, join) = hub.issue("c1", "?type=join");
    let config = https_agent(dir, &hub, &spec, &join, true);
    let agent = start_agent(&config, "c1");
    hub.wait_connected(1, "c1 connected with its certificate");
    let first = cert_meta(&config)["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    eventually(WAIT, "the certificate renewed", || {
        match cert_meta(&config)["fingerprint"].as_str() {
            Some(now) if now != first => Ok(()),
            _ => Err("not yet".into()),
        }
    });
    // The renewed certificate works on a new connection, and then the older one is
    // retired at the hub.
    drop(agent);
    hub.wait_connected(0, "c1 gone after its agent stopped");
    let agent = start_agent(&config, "c1 renewed");
    hub.wait_connected(1, "c1 back with its renewed certificate");
    eventually(WAIT, "the older certificate retired", || {
        let listed = hub.credentials("c1");
        if listed.len() == 1 && listed[0]["metadata"]["name"] != first.as_str() {
            Ok(())
        } else {
            Err(format!("{listed:?}"))
        }
    });
    drop(agent);
    hub.wait_connected(0, "c1 gone");
    let not_after = cert_meta(&config)["notAfter"].as_i64().unwrap();
    while chrono::Utc::now().timestamp() <= not_after {
        std::thread::sleep(Duration::from_millis(200));
    }
    let agent = start_agent(&config, "c1 expired");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        hub.connected_agents(),
        0,
        "an expired certificate connected"
    );
    drop(agent);
    let (_, fresh) = hub.issue("c1", "?type=join");
    std::fs::write(config.parent().unwrap().join("join-token"), fresh).unwrap();
    let _agent = start_agent(&config, "c1 re-joined");
    hub.wait_connected(1, "c1 joined again with a new join token");
    assert!(cert_meta(&config)["notAfter"].as_i64().unwrap() > not_after);
    drop(hub.process);
}
