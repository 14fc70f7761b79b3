//! The `federation-apiserver` binary as a process: bad config exits 64 before binding
//! anything, with one line naming what is wrong.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use fedingress_dns::location::test_mmdb::{FlatNetwork, flat_db, net};

#[test]
fn a_maxmind_database_without_coordinates_exits_64_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    // Another vendor's flat layout: latitude at the top level, no `location` map.
    let mmdb = dir.path().join("flat.mmdb");
    std::fs::write(
        &mmdb,
        flat_db(&[FlatNetwork {
            network: net("2001:db8::/32"),
            latitude: 50.0,
            longitude: 4.0,
            country_code: "BE",
        }]),
    )
    .unwrap();
    // A port that must stay free: binding it would mean the check came too late.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let config = dir.path().join("apiserver.yaml");
    std::fs::write(
        &config,
        format!(
            "dev: true\ndns:\n  zones: [{{name: fedingress.test, nameservers: [ns1.fedingress.test]}}]\n  locations:\n    default: {{region: eu, latitude: 50.0, longitude: 4.0}}\n  mmdb: {}\n",
            mmdb.display()
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_federation-apiserver"))
        .args(["--config", config.to_str().unwrap()])
        .args(["--data-dir", dir.path().join("data").to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--agent-listen",
            "127.0.0.1:0",
            "--dns-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(&mmdb.display().to_string()) && stderr.contains("location/latitude"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(output.stdout.is_empty(), "no READY line");
    assert!(!dir.path().join("data").exists(), "nothing opened");
}

#[test]
fn a_bad_dns_provider_exits_64_with_the_field_path_before_binding() {
    let dir = tempfile::tempdir().unwrap();
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let config = dir.path().join("apiserver.yaml");
    for (providers, expected) in [
        (
            "  ownerId: prod\n  providers:\n  - {name: aws, type: route53, zone: Z1}\n  - {name: gcp, type: clouddns, zone: example-com}\n",
            "federation-apiserver: dns.providers[1].project: required for type clouddns",
        ),
        (
            "  providers:\n  - {name: aws, type: route53, zone: Z1}\n",
            "federation-apiserver: dns.ownerId: required with dns.providers",
        ),
        (
            "  ownerId: prod\n  providers:\n  - {name: aws, type: route53, zone: Z1, delegate: [other.test]}\n",
            "federation-apiserver: dns.providers[0].delegate[0]: \"other.test\" is not one of dns.zones",
        ),
        // Route53's settings under Cloud DNS's singular field (issue 23).
        (
            "  ownerId: prod\n  providers:\n  - {name: aws, type: route53, zone: Z1, healthCheck: {failureThreshold: 2}}\n",
            &format!(
                "federation-apiserver: config file {}: dns.providers[0].healthCheck: Route53's health check settings are `healthChecks` (plural)",
                config.display()
            ),
        ),
    ] {
        std::fs::write(
            &config,
            format!(
                "dev: true\ndns:\n  zones: [{{name: fedingress.test, nameservers: [ns1.fedingress.test]}}]\n{providers}"
            ),
        )
        .unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_federation-apiserver"))
            .args(["--config", config.to_str().unwrap()])
            .args(["--data-dir", dir.path().join("data").to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--agent-listen",
                "127.0.0.1:0",
                "--dns-listen",
                "127.0.0.1:0",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with(expected), "{stderr}");
        assert!(output.stdout.is_empty(), "no READY line");
        assert!(!dir.path().join("data").exists(), "nothing opened");
    }
}

/// `--help` named `deploy/examples/apiserver.yaml`, which does not exist (issue 23): every
/// repository path the help names is there.
#[test]
fn help_names_only_files_that_exist() {
    let output = Command::new(env!("CARGO_BIN_EXE_federation-apiserver"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let paths: Vec<&str> = help
        .split(|c: char| c.is_whitespace() || "()`,;'\"".contains(c))
        .filter(|word| word.starts_with("deploy/") || word.starts_with("docs/"))
        .map(|word| word.trim_end_matches(['.', ':']))
        .collect();
    assert!(paths.contains(&"deploy/config/apiserver.yaml"), "{help}");
    for path in paths {
        assert!(
            root.join(path).exists(),
            "--help names {path}, which does not exist"
        );
    }
}
