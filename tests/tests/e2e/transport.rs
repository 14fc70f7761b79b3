//! TLS by default (docs/security.md "Transport"): the real binaries refuse to carry
//! credentials in the clear off loopback, before binding anything.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use fedingress_tests::binary;

/// Runs a binary expecting it to refuse its configuration: exit 64, nothing on stdout
/// (no READY line), one line on stderr; returns that line.
fn refused(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    assert_eq!(output.status.code(), Some(64), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "nothing bound, no READY line");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn the_apiserver_refuses_plaintext_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "t0ken,alice,1,fedingress:admins\n").unwrap();
    for (flag, address) in [("--listen", "0.0.0.0:0"), ("--agent-listen", "[::]:0")] {
        let line = refused(
            Command::new(binary("federation-apiserver"))
                .args([flag, address, "--token-auth-file"])
                .arg(&tokens)
                .arg("--data-dir")
                .arg(dir.path().join("data")),
        );
        for needed in [flag, "--tls-cert-file", "--insecure-allow-plaintext"] {
            assert!(line.contains(needed), "{needed} in {line}");
        }
    }
    assert!(
        !dir.path().join("data").exists(),
        "refused before the store"
    );
}

#[test]
fn the_agent_refuses_a_plaintext_hub_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "abc.def\n").unwrap();
    let config = dir.path().join("agent.yaml");
    std::fs::write(
        &config,
        "hub: {addresses: [http://127.0.0.1:6444, http://hub.example:6444]}\ncluster: eu-west\ntokenFile: token\ndriver: standalone\nlisten: [{bind: 127.0.0.1}]\nstateDir: state\n",
    )
    .unwrap();
    let line = refused(
        Command::new(binary("cluster-agent"))
            .arg("--config")
            .arg(&config),
    );
    assert!(
        line.contains("hub.addresses[1]") && line.contains("hub.insecureAllowPlaintext"),
        "{line}"
    );
    assert!(
        !dir.path().join("state").exists(),
        "refused before the state dir"
    );
}
