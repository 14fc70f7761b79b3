//! The namespace helpers multi-host tests build on (`fedingress_tests::netns`): a LAN of
//! three hosts on one bridge reaches each other over TCP, an address added later is
//! reachable and seen by `has_address`, a veth pair connects two namespaces, "the host
//! dies" (`kill_all`) leaves no process inside, and an unplugged host is unreachable
//! until plugged back in. Needs root for `ip netns` (skips otherwise, saying why).

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fedingress_tests::netns::{Lan, NetNs};
use fedingress_tests::{Process, eventually};

/// Whether `nc` inside `from` connects to `to` within a second (`nc -z`).
fn connects(from: &NetNs, to: SocketAddr) -> bool {
    from.command("nc")
        .args([
            "-z",
            "-w",
            "1",
            &to.ip().to_string(),
            &to.port().to_string(),
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// A listener inside `ns` on `addr` (OpenBSD netcat, `-k`: keeps listening).
fn listen(ns: &NetNs, addr: SocketAddr) -> Process {
    let mut command = ns.command("nc");
    command.args(["-k", "-l", &addr.ip().to_string(), &addr.port().to_string()]);
    Process::spawn(command, "nc -l").unwrap()
}

fn skip() -> bool {
    if let Some(why) = NetNs::unavailable() {
        eprintln!("skipping: {why}");
        return true;
    }
    if std::process::Command::new("nc").arg("-h").output().is_err() {
        eprintln!("skipping: nc is not installed (Debian: netcat-openbsd)");
        return true;
    }
    false
}

#[test]
fn lan_hosts_reach_each_other_until_one_dies_or_is_unplugged() {
    if skip() {
        return;
    }
    let lan = Lan::create(
        "nslan",
        &[
            ("a", "10.9.0.1/24"),
            ("b", "10.9.0.2/24"),
            ("c", "10.9.0.3/24"),
        ],
    )
    .unwrap();
    let (a, b, c) = (lan.host("a"), lan.host("b"), lan.host("c"));
    let b_addr: SocketAddr = "10.9.0.2:7000".parse().unwrap();
    let _listener = listen(b, b_addr);
    eventually(Duration::from_secs(5), "a connects to b", || {
        connects(a, b_addr).then_some(()).ok_or("no".to_string())
    });
    assert!(connects(c, b_addr));

    // A second address (as a VIP would be).
    let vip: IpAddr = "10.9.0.100".parse().unwrap();
    assert!(!b.has_address(vip));
    b.add_address(Lan::HOST_DEV, "10.9.0.100/24").unwrap();
    assert!(b.has_address(vip));
    let _vip_listener = listen(b, SocketAddr::new(vip, 7001));
    eventually(Duration::from_secs(5), "a connects to the VIP", || {
        connects(a, SocketAddr::new(vip, 7001))
            .then_some(())
            .ok_or("no".to_string())
    });

    lan.unplug("b", true).unwrap();
    assert!(!connects(a, b_addr), "b is unplugged");
    lan.unplug("b", false).unwrap();
    eventually(Duration::from_secs(5), "b is back", || {
        connects(a, b_addr).then_some(()).ok_or("no".to_string())
    });

    assert!(!b.pids().unwrap().is_empty());
    assert!(b.kill_all().unwrap() >= 2, "both listeners were killed");
    assert!(b.pids().unwrap().is_empty());
    assert!(!connects(a, b_addr), "nothing listens on b any more");
}

#[test]
fn veth_pair_connects_two_namespaces() {
    if skip() {
        return;
    }
    let left = NetNs::create("nsveth-l").unwrap();
    let right = NetNs::create("nsveth-r").unwrap();
    left.veth("v0", &right, "v1").unwrap();
    left.add_address("v0", "10.9.1.1/30").unwrap();
    right.add_address("v1", "10.9.1.2/30").unwrap();
    let addr: SocketAddr = "10.9.1.2:7000".parse().unwrap();
    let _listener = listen(&right, addr);
    eventually(Duration::from_secs(5), "left connects to right", || {
        connects(&left, addr).then_some(()).ok_or("no".to_string())
    });
}
