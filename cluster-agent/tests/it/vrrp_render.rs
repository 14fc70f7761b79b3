//! Golden files of the keepalived config rendered from the `vrrp:` section, and from
//! the pools of a plan with the `pools:` section (`fedingress_agent::vrrp::render`), and
//! keepalived's own opinion of them.
//!
//! `tests/golden/vrrp/<case>.conf` holds what the case's agent config (and plan, for
//! `pools-*`) renders to, with the track script's program `/usr/bin/cluster-agent` and
//! the config's admin address.
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
use fedingress_agent::vrrp::render::{Member, render, render_pools};
use fedingress_api::plan::{PoolAssignment, PoolPeer};

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

/// The `pools:` cases: the member and pools sections, and the plan's pools.
fn pool_cases() -> Vec<(&'static str, &'static str, Vec<PoolAssignment>)> {
    let peer = |name: &str, priority: u8, address: Option<&str>| PoolPeer {
        name: name.into(),
        address: address.map(|a| a.parse().unwrap()),
        priority,
    };
    let pool = |name: &str, id: u8, vips: &[&str], prefix_len: u8, members: Vec<PoolPeer>| {
        PoolAssignment {
            name: name.into(),
            vips: vips.iter().map(|v| v.parse().unwrap()).collect(),
            prefix_len,
            virtual_router_id: id,
            members,
        }
    };
    vec![
        (
            "pools-none",
            "
member: {name: edge-a, address: 10.0.0.1}
pools:
  interface: eth0
",
            Vec::new(),
        ),
        (
            "pools-two",
            "
member: {name: edge-a, address: 10.0.0.1}
pools:
  interface: eth0
  advertIntervalMs: 100
  trackIntervalMs: 2000
  trackFall: 1
  trackRise: 3
  nopreempt: true
",
            vec![
                // Sorted by name in the output; a pool without VIPs has no instance.
                pool(
                    "silver",
                    8,
                    &["10.0.1.100"],
                    0,
                    vec![
                        peer("edge-a", 140, Some("10.0.0.1")),
                        peer("edge-b", 150, Some("10.0.0.2")),
                    ],
                ),
                pool(
                    "gold",
                    7,
                    &["10.0.0.100", "10.0.0.101"],
                    24,
                    vec![
                        peer("edge-a", 150, Some("10.0.0.1")),
                        peer("edge-b", 140, Some("10.0.0.2")),
                        peer("edge-c", 130, None),
                        peer("edge-d", 120, Some("10.0.0.4")),
                    ],
                ),
                pool(
                    "bronze",
                    9,
                    &[],
                    24,
                    vec![peer("edge-a", 150, Some("10.0.0.1"))],
                ),
            ],
        ),
        (
            "pools-ipv6-alone",
            "
member: {name: edge-a, address: 'fd00::1'}
pools:
  interface: eth1
  preemptDelayMs: 1500
  routerId: eu-west-a
",
            vec![pool(
                "v6.gold",
                200,
                &["fd00::100"],
                64,
                vec![peer("edge-a", 150, Some("fd00::1"))],
            )],
        ),
    ]
}

fn rendered_pools(section: &str, plan: &[PoolAssignment], program: &Path) -> String {
    let config = config(section);
    let member = Member {
        cluster: &config.cluster,
        name: config.member.name(),
        address: config.member.address,
    };
    let out = render_pools(
        config.pools.as_ref().unwrap(),
        &member,
        plan,
        program,
        config.admin,
    )
    .unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    out.text
}

/// Every case's name and text, rendered with `program` and interfaces renamed by `dev`.
fn every_case(program: &Path, dev: &dyn Fn(&str) -> String) -> Vec<(String, String)> {
    let mut cases: Vec<(String, String)> = CASES
        .iter()
        .map(|(name, section)| ((*name).to_owned(), rendered(&dev(section), program)))
        .collect();
    for (name, section, plan) in pool_cases() {
        cases.push((
            name.to_owned(),
            rendered_pools(&dev(section), &plan, program),
        ));
    }
    cases
}

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
    let same = |section: &str| section.to_owned();
    let again = every_case(Path::new(PROGRAM), &same);
    for (i, (name, text)) in every_case(Path::new(PROGRAM), &same)
        .into_iter()
        .enumerate()
    {
        assert_eq!(text, again[i].1, "{name}: renders the same twice");
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
    let dev = |section: &str| {
        section
            .replace("interface: eth0", &format!("interface: {interface}"))
            .replace("interface: eth1", &format!("interface: {interface}"))
    };
    for (name, text) in every_case(&program, &dev) {
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
