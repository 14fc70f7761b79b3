//! VIP failover inside a cluster (issue 15): two hosts, each with an echo backend and a
//! standalone cluster-agent (no hub: each serves its persisted plan) whose `vrrp:`
//! section makes it run keepalived with the agent's readiness as the track script, and
//! a client, on one LAN of network namespaces (`fedingress_tests::vrrp::Site`).
//!
//! `vip_moves_with_readiness_keepalived_and_host_death`, in order:
//! 1. host-a (priority 150) holds the VIP; the client's connections to it are answered
//!    by host-a; `cluster-agent ready` passes on both hosts.
//! 2. host-a's agent is frozen (SIGSTOP: its `/readyz` stops answering, which is what
//!    the track script asks, since readiness does not depend on backends): the VIP
//!    moves to host-b; resumed, host-a takes it back (preemption).
//! 3. host-a's keepalived is killed: the agent reports it (not ready, `/metrics`),
//!    starts it again, and host-a holds the VIP again.
//! 4. host-a dies (cable out, every process SIGKILLed): the VIP is on host-b and the
//!    client reconnects to it; the time from the kill to the first answer is printed
//!    (informational: no timing is asserted).
//!
//! `keepalived_problems_are_config_errors`: a keepalived that is not there, or that
//! refuses the rendered config, makes the agent exit 64 with one line at start;
//! `keepalived render` prints the config.
//!
//! Needs root, iproute2 and keepalived (skips otherwise, saying why).

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use fedingress_tests::binary;
use fedingress_tests::vrrp::{ADMIN, Mode, Programs, Site, keepalived};

const MOVE: Duration = Duration::from_secs(20);

/// `cluster-agent ready --admin ADMIN` inside `host`: whether it exits 0.
fn ready(site: &Site, host: &str) -> bool {
    site.ns(host)
        .command(binary("cluster-agent"))
        .args(["ready", "--admin", ADMIN, "--timeout-ms", "500"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn metric(site: &Site, host: &str, name: &str) -> Option<f64> {
    let (_, body) = site.admin_get(host, "/metrics").ok()?;
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn vip_moves_with_readiness_keepalived_and_host_death() {
    if let Some(why) = Site::unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let mut site = Site::start("vrrp", Mode::Agent, 100, Programs::built()).unwrap();

    // 1. host-a serves the VIP.
    site.wait_for_holder("host-a", MOVE).unwrap();
    assert_eq!(site.probe(Duration::from_secs(1)).unwrap(), "host-a");
    assert!(ready(&site, "host-a") && ready(&site, "host-b"));
    assert_eq!(
        metric(&site, "host-a", "fedingress_agent_keepalived_up"),
        Some(1.0)
    );

    // 2. An unready agent gives the VIP up; ready again, it takes it back.
    site.agent("host-a").unwrap().pause();
    assert!(!ready(&site, "host-a"), "a stopped agent is not ready");
    let since = Instant::now();
    site.until_answered_by("host-b", since, MOVE).unwrap();
    site.wait_for_holder("host-b", MOVE).unwrap();
    eprintln!("unready host-a → host-b answers: {:?}", since.elapsed());
    site.agent("host-a").unwrap().resume();
    site.wait_for_holder("host-a", MOVE).unwrap();
    site.until_answered_by("host-a", Instant::now(), MOVE)
        .unwrap();

    // 3. keepalived dies: reported, restarted, and the VIP comes back.
    let pid_file = site.dir("host-a").join("state/keepalived.pid");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let status = Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(status.success());
    fedingress_tests::eventually(MOVE, "host-a's agent counts the restart", || {
        match metric(
            &site,
            "host-a",
            "fedingress_agent_keepalived_restarts_total",
        ) {
            Some(n) if n >= 1.0 => Ok(()),
            other => Err(format!("restarts_total {other:?}")),
        }
    });
    site.wait_for_holder("host-a", MOVE).unwrap();
    let (status, body) = site.admin_get("host-a", "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        metric(&site, "host-a", "fedingress_agent_keepalived_up"),
        Some(1.0)
    );
    let log = std::fs::read_to_string(site.dir("host-a").join("agent.log")).unwrap();
    assert!(log.contains("keepalived died"), "the death is logged");
    site.until_answered_by("host-a", Instant::now(), MOVE)
        .unwrap();

    // 4. host-a dies; the client reconnects to host-b.
    let since = Instant::now();
    site.kill_host("host-a").unwrap();
    let took = site.until_answered_by("host-b", since, MOVE).unwrap();
    assert!(
        site.ns("host-b")
            .has_address(fedingress_tests::vrrp::VIP.into())
    );
    eprintln!("host-a died → client reconnected to host-b after {took:?}");
}

#[test]
fn keepalived_problems_are_config_errors() {
    let Some(keepalived) = keepalived() else {
        eprintln!("skipping: keepalived is not installed (Debian: apt-get install keepalived)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t0ken\n").unwrap();
    let config = |vrrp_extra: &str| {
        let path = dir.path().join("agent.yaml");
        std::fs::write(
            &path,
            format!(
                "\
hub: {{address: 'http://127.0.0.1:1'}}
cluster: site
tokenFile: token
driver: standalone
listen: [{{bind: 127.0.0.1}}]
stateDir: state
admin: 127.0.0.1:9901
vrrp:
  interface: nosuch0
  virtualRouterId: 51
  priority: 100
  virtualAddresses: ['10.0.0.100/24']
{vrrp_extra}"
            ),
        )
        .unwrap();
        path
    };
    let run = |args: &[&str]| {
        let out = Command::new(binary("cluster-agent"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // keepalived missing.
    let path = config("  keepalived: {command: /nonexistent/keepalived}\n");
    let (code, _, stderr) = run(&["--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(64), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("/nonexistent/keepalived not found"),
        "{stderr}"
    );

    // keepalived refuses the rendered config (no such interface here).
    let path = config(&format!(
        "  keepalived: {{command: '{}'}}\n",
        keepalived.display()
    ));
    let (code, _, stderr) = run(&["--config", path.to_str().unwrap()]);
    assert_eq!(code, Some(64), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("keepalived --config-test refused") && stderr.contains("nosuch0"),
        "{stderr}"
    );

    // render prints what the agent would run, whatever the interface.
    let (code, stdout, stderr) = run(&["keepalived", "render", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let program = binary("cluster-agent");
    for expected in [
        "vrrp_instance fedingress_51 {".to_owned(),
        "    interface nosuch0".to_owned(),
        format!(
            "    script \"{} ready --admin 127.0.0.1:9901 --timeout-ms 500\"",
            program.display()
        ),
    ] {
        assert!(
            stdout.contains(&expected),
            "{expected:?} missing in:\n{stdout}"
        );
    }
    // A config without vrrp: has nothing to render.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.find("vrrp:").unwrap()]).unwrap();
    let (code, _, stderr) = run(&["keepalived", "render", "-c", path.to_str().unwrap()]);
    assert_eq!(code, Some(64));
    assert!(stderr.contains("has no vrrp: section"), "{stderr}");
}
