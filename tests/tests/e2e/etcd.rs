//! The federation-apiserver binary on a real etcd (Debian's etcd-server, started here):
//! objects written through kubectl live in etcd and outlive the apiserver process;
//! TLS with client certificates works; an unreachable etcd or bad certificates exit 64
//! with one line.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_store::etcd_process::{EtcdCluster, ServerTls};
use fedingress_tests::{Kubectl, Process, TestPki, binary, repo_path, write_kubeconfig};

const START: Duration = Duration::from_secs(30);

fn apiserver_command(data_dir: &Path, etcd: &[&str]) -> Command {
    let mut command = Command::new(binary("federation-apiserver"));
    command
        .args([
            "--dev",
            "--listen",
            "127.0.0.1:0",
            "--agent-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .args(etcd);
    command
}

fn kubectl(dir: &Path, server: &Process) -> Kubectl {
    let kubeconfig = dir.join(format!("kubeconfig-{}", server.pid()));
    write_kubeconfig(
        &kubeconfig,
        &format!("http://{}", server.addr("api")),
        None,
        None,
    );
    Kubectl::new(None, kubeconfig)
}

fn example(name: &str) -> String {
    repo_path(&format!("deploy/examples/{name}"))
        .display()
        .to_string()
}

/// Runs the apiserver expecting it to refuse to start; returns its stderr.
fn exits_64(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(64), "stderr: {stderr}");
    assert!(
        output.stdout.is_empty(),
        "nothing bound, no READY line: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    stderr
}

#[test]
fn objects_outlive_the_apiserver_in_etcd() {
    let etcd = EtcdCluster::single();
    let servers = etcd.endpoints().join(",");
    let flags = ["--etcd-servers", servers.as_str(), "--etcd-prefix", "/e2e"];
    let dir = tempfile::tempdir().unwrap();

    let first = Process::start(
        apiserver_command(&dir.path().join("data-1"), &flags),
        "federation-apiserver",
        START,
    )
    .unwrap();
    let k = kubectl(dir.path(), &first);
    assert!(
        k.ok(&["apply", "-f", &example("cluster-eu-west.yaml")])
            .contains("created")
    );
    assert_eq!(
        k.ok(&["apply", "-f", &example("federatedingress-shop.yaml")])
            .trim(),
        "federatedingress.fedingress.io/shop created"
    );
    let uid = k.ok(&["get", "fing", "shop", "-o", "jsonpath={.metadata.uid}"]);
    assert!(!uid.trim().is_empty());
    first.terminate(Duration::from_secs(10));
    assert!(
        !dir.path().join("data-1").exists(),
        "with etcd nothing is written to the data dir"
    );

    // Another process with another (empty) data dir: the objects can only come from etcd.
    let second = Process::start(
        apiserver_command(&dir.path().join("data-2"), &flags),
        "federation-apiserver",
        START,
    )
    .unwrap();
    let k = kubectl(dir.path(), &second);
    let names = k.ok(&["get", "fing", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(names.trim(), "shop");
    let clusters = k.ok(&[
        "get",
        "clusters",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert!(clusters.contains("eu-west"), "{clusters}");
    let now = k.ok(&[
        "get",
        "fing",
        "shop",
        "-o",
        "jsonpath={.metadata.uid} {.metadata.generation}",
    ]);
    assert_eq!(
        now,
        format!("{} 1", uid.trim()),
        "the same object, as written"
    );

    // A second apiserver under another prefix shares the etcd but not the objects.
    let other = Process::start(
        apiserver_command(
            &dir.path().join("data-3"),
            &[
                "--etcd-servers",
                servers.as_str(),
                "--etcd-prefix",
                "/other",
            ],
        ),
        "federation-apiserver",
        START,
    )
    .unwrap();
    let k = kubectl(dir.path(), &other);
    let names = k.ok(&["get", "fing", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(names.trim(), "", "nothing under /other");
}

#[test]
fn tls_with_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = TestPki::generate().write(dir.path());
    let etcd = EtcdCluster::start(
        1,
        Some(ServerTls {
            cert_file: cert.clone(),
            key_file: key.clone(),
            client_ca_file: Some(ca.clone()),
        }),
    );
    let servers = etcd.endpoints().join(",");
    assert!(servers.starts_with("https://"));
    let (ca, cert, key) = (
        ca.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );

    let server = Process::start(
        apiserver_command(
            &dir.path().join("data"),
            &[
                "--etcd-servers",
                &servers,
                "--etcd-cafile",
                ca,
                "--etcd-certfile",
                cert,
                "--etcd-keyfile",
                key,
            ],
        ),
        "federation-apiserver",
        START,
    )
    .unwrap();
    let k = kubectl(dir.path(), &server);
    assert!(
        k.ok(&["apply", "-f", &example("cluster-eu-west.yaml")])
            .contains("created")
    );
    drop(server);

    // Without a client certificate etcd refuses the connection: exit 64, one line.
    let stderr = exits_64(&mut apiserver_command(
        &dir.path().join("data"),
        &["--etcd-servers", &servers, "--etcd-cafile", ca],
    ));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("etcd"), "{stderr}");

    // A CA that did not sign etcd's certificate: exit 64 too.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (other_ca, ..) = TestPki::generate().write(&other);
    let stderr = exits_64(&mut apiserver_command(
        &dir.path().join("data"),
        &[
            "--etcd-servers",
            &servers,
            "--etcd-cafile",
            other_ca.to_str().unwrap(),
            "--etcd-certfile",
            cert,
            "--etcd-keyfile",
            key,
        ],
    ));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

#[test]
fn unreachable_etcd_and_bad_certificate_files_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let port = fedingress_testsupport::free_port([127, 0, 0, 1]);
    let unreachable = format!("http://127.0.0.1:{port}");
    let stderr = exits_64(&mut apiserver_command(
        &dir.path().join("data"),
        &["--etcd-servers", &unreachable],
    ));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("connecting to etcd") && stderr.contains(&unreachable),
        "{stderr}"
    );

    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    let stderr = exits_64(&mut apiserver_command(
        &dir.path().join("data"),
        &[
            "--etcd-servers",
            "https://127.0.0.1:2379",
            "--etcd-cafile",
            garbage.to_str().unwrap(),
        ],
    ));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("garbage.pem"), "{stderr}");
}
