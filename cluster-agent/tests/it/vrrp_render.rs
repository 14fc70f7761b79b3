//! Golden files of the keepalived config rendered from the `vrrp:` section
//! (`fedingress_agent::vrrp::render`), and keepalived's own opinion of them.
//!
//! `tests/golden/vrrp/<case>.conf` holds what the case's agent config renders to, with
//! the track script's program `/usr/bin/cluster-agent` and the config's admin address.
//! `UPDATE_GOLDEN=1 cargo nextest run -p cluster-agent -E 'test(golden)'` rewrites the
//! files; otherwise they are compared.
//!
//! With keepalived installed, every case is also rendered with this build's
//! `cluster-agent` as the program and the host's first interface other than `lo` (the
//! golden `eth0` may not exist here) and must pass `keepalived --config-test`; a broken
//! config (an interface that does not exist) must fail it, so the check can fail.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use fedingress_agent::Config;
use fedingress_agent::vrrp::render::render;

/// The agent config every case extends with its `vrrp:` section.
const BASE: &str = "\
hub: {address: http://127.0.0.1:6444}
cluster: eu-west
tokenFile: token
driver: standalone
listen: [{bind: 0.0.0.0, advertise: 10.0.0.100}]
stateDir: state
admin: 0.0.0.0:9901
";

/// The cases: a `vrrp:` section each.
const CASES: &[(&str, &str)] = &[
    (
        "multicast-defaults",
        "
vrrp:
  interface: eth0
  virtualRouterId: 51
  priority: 150
  virtualAddresses: ['10.0.0.100/24']
",
    ),
    (
        "unicast-nopreempt",
        "
vrrp:
  interface: eth0
  virtualRouterId: 52
  priority: 100
  virtualAddresses: ['10.0.0.100/24', '10.0.0.101']
  advertIntervalMs: 100
  unicastPeers: ['10.0.0.1', '10.0.0.3']
  trackIntervalMs: 2000
  trackFall: 1
  trackRise: 3
  nopreempt: true
  keepalived: {manage: false}
",
    ),
    (
        "ipv6-preempt-delay",
        "
vrrp:
  interface: eth1
  virtualRouterId: 7
  priority: 254
  virtualAddresses: ['fd00::100/64']
  advertIntervalMs: 1250
  preemptDelayMs: 1500
  routerId: eu-west-a
",
    ),
];

const PROGRAM: &str = "/usr/bin/cluster-agent";

fn config(section: &str) -> Config {
    Config::from_yaml(&format!("{BASE}{section}")).unwrap()
}

fn rendered(section: &str, program: &Path) -> String {
    let config = config(section);
    render(
        config.vrrp.as_ref().unwrap(),
        &config.cluster,
        program,
        config.admin,
    )
    .unwrap()
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/vrrp")
}

#[test]
fn golden_keepalived_configs() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let dir = golden_dir();
    for (name, section) in CASES {
        let text = rendered(section, Path::new(PROGRAM));
        assert_eq!(
            text,
            rendered(section, Path::new(PROGRAM)),
            "{name}: renders the same twice"
        );
        let path = dir.join(format!("{name}.conf"));
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        assert_eq!(
            text,
            golden,
            "{name} differs from {} (UPDATE_GOLDEN=1 rewrites it)",
            path.display()
        );
    }
}

/// keepalived, or why the test cannot use it.
fn keepalived() -> Option<PathBuf> {
    ["keepalived", "/usr/sbin/keepalived"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("--version").output().is_ok())
}

/// `keepalived --config-test -f FILE`: its exit status and messages.
fn config_test(keepalived: &Path, text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keepalived.conf");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(keepalived)
        .arg("--config-test")
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    let messages = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), messages)
}

#[test]
fn keepalived_accepts_every_rendered_config() {
    let Some(keepalived) = keepalived() else {
        eprintln!("skipping: keepalived is not installed (Debian: apt-get install keepalived)");
        return;
    };
    // keepalived checks that the interface exists and refuses loopback.
    let Some(interface) = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|name| name != "lo" && supports_multicast(name))
    else {
        eprintln!("skipping: this host has no multicast network interface but lo");
        return;
    };
    let program = PathBuf::from(env!("CARGO_BIN_EXE_cluster-agent"));
    for (name, section) in CASES {
        let section = section
            .replace("interface: eth0", &format!("interface: {interface}"))
            .replace("interface: eth1", &format!("interface: {interface}"));
        let text = rendered(&section, &program);
        let (ok, messages) = config_test(&keepalived, &text);
        assert!(
            ok,
            "{name}: keepalived --config-test refused:\n{messages}\n{text}"
        );
    }
    let broken = rendered(
        &CASES[0].1.replace("interface: eth0", "interface: nosuch0"),
        &program,
    );
    let (ok, messages) = config_test(&keepalived, &broken);
    assert!(
        !ok,
        "an unknown interface passed --config-test:\n{messages}"
    );
    assert!(messages.contains("nosuch0"), "{messages}");
}

#[test]
fn render_refuses_what_keepalived_cannot_run() {
    let config = config(CASES[0].1);
    let vrrp = config.vrrp.as_ref().unwrap();
    for program in ["/opt/my agent/cluster-agent", "relative/cluster-agent"] {
        let err = render(vrrp, "eu-west", Path::new(program), config.admin).unwrap_err();
        assert!(err.to_string().contains("program path"), "{program}: {err}");
    }
    let err = render(
        vrrp,
        "eu-west",
        Path::new(PROGRAM),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("port 0"), "{err}");
}

/// Whether the interface has IFF_MULTICAST (VRRP's default adverts are multicast; an ifb
/// or a tunnel device has no multicast, and keepalived refuses a config on it).
fn supports_multicast(name: &str) -> bool {
    const IFF_MULTICAST: u32 = 0x1000;
    std::fs::read_to_string(format!("/sys/class/net/{name}/flags"))
        .ok()
        .and_then(|flags| u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).ok())
        .is_some_and(|flags| flags & IFF_MULTICAST != 0)
}
