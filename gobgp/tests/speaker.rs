//! The typed client against real gobgpd processes (Debian's gobgpd 3.10.0) on loopback:
//! two speakers peer over iBGP on 127.0.0.2 and 127.0.0.3 (a free high port, no root
//! needed), one announces a /32 and a /128 with communities and the other sees them,
//! then sees them withdrawn; `start` is idempotent and refuses another AS; gobgpd that
//! is missing, exits early or loses its parent is a clear error or goes away.
//!
//! Skipped, with a message, when gobgpd is not installed (scripts/test installs it).

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use fedingress_gobgp::{
    Community, Global, Gobgpd, GobgpdCommand, Peer, RibEntry, Route, SessionState, Speaker,
    SpeakerError,
};
use fedingress_testsupport::{Poll, free_port};

/// Generous: GoBGP connects out every 5-10 s at best.
const DEADLINE: Duration = Duration::from_secs(90);
/// The waits: GoBGP's state changes in seconds, so every 200 ms is often enough.
const POLL: Poll = Poll::new(DEADLINE).every(Duration::from_millis(200));
const ASN: u32 = 65000;

fn gobgpd_installed() -> bool {
    let found = std::process::Command::new("gobgpd")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        eprintln!("SKIPPED: gobgpd is not installed (apt-get install gobgpd; scripts/test does)");
    }
    found
}

fn api_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port([127, 0, 0, 1])))
}

async fn run_gobgpd() -> (Gobgpd, Speaker) {
    let mut gobgpd = Gobgpd::start(api_address(), &[]).unwrap();
    let speaker = gobgpd.wait_ready(Duration::from_secs(20)).await.unwrap();
    (gobgpd, speaker)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn learned<'a>(rib: &'a [RibEntry], route: &Route) -> Option<&'a RibEntry> {
    rib.iter()
        .find(|e| e.prefix == route.prefix && e.neighbor.is_some())
}

#[tokio::test]
async fn two_speakers_exchange_announcements_and_withdrawals() {
    if !gobgpd_installed() {
        return;
    }
    let bgp_port = free_port([127, 0, 0, 3]);
    // A: the agent's shape (connects out, does not listen). B: a route reflector
    // listening on 127.0.0.3 only.
    let (_a, mut site) = run_gobgpd().await;
    let (_b, mut reflector) = run_gobgpd().await;
    site.start(&Global {
        asn: ASN,
        router_id: Ipv4Addr::new(192, 0, 2, 2),
        listen_port: -1,
        listen_addresses: vec![],
    })
    .await
    .unwrap();
    reflector
        .start(&Global {
            asn: ASN,
            router_id: Ipv4Addr::new(192, 0, 2, 3),
            listen_port: i32::from(bgp_port),
            listen_addresses: vec![ip("127.0.0.3")],
        })
        .await
        .unwrap();
    reflector
        .add_peer(&Peer {
            local_address: Some(ip("127.0.0.3")),
            passive: true,
            route_reflector_client: true,
            ..Peer::new(ip("127.0.0.2"), ASN)
        })
        .await
        .unwrap();
    site.add_peer(&Peer {
        port: Some(bgp_port),
        local_address: Some(ip("127.0.0.2")),
        hold_time_seconds: Some(9),
        keepalive_seconds: Some(3),
        connect_retry_seconds: Some(5),
        ..Peer::new(ip("127.0.0.3"), ASN)
    })
    .await
    .unwrap();

    for (speaker, neighbor) in [(&site, "127.0.0.3"), (&reflector, "127.0.0.2")] {
        POLL.eventually_async(
            &format!("{} sees {neighbor} established", speaker.endpoint()),
            || {
                let mut speaker = speaker.clone();
                async move {
                    let peers = speaker.peers().await.map_err(|e| e.to_string())?;
                    match peers.as_slice() {
                        [p] if p.address == ip(neighbor)
                            && p.asn == ASN
                            && p.state == SessionState::Established =>
                        {
                            Ok(())
                        }
                        _ => Err(format!("{peers:?}")),
                    }
                }
            },
        )
        .await;
    }

    let communities: Vec<Community> = ["65000:100", "65000:200"]
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    let v4 = Route {
        prefix: "198.51.100.10/32".parse().unwrap(),
        // Not the site's loopback address: peers drop loopback next hops.
        next_hop: ip("192.0.2.2"),
        communities: communities.clone(),
    };
    let v6 = Route {
        prefix: "2001:db8:100::10/128".parse().unwrap(),
        next_hop: ip("fd00::2"),
        communities: vec!["65000:300".parse().unwrap()],
    };
    site.announce(&v4).await.unwrap();
    site.announce(&v6).await.unwrap();

    // The site's own RIB holds them as local paths.
    let local = site.rib().await.unwrap();
    for route in [&v4, &v6] {
        let entry = local.iter().find(|e| e.prefix == route.prefix).unwrap();
        assert_eq!((entry.next_hop, entry.neighbor), (route.next_hop, None));
        assert_eq!(entry.communities, route.communities);
        assert!(entry.best);
    }

    POLL.eventually_async("the reflector learns both routes from the site", || {
        let mut reflector = reflector.clone();
        let (v4, v6) = (v4.clone(), v6.clone());
        async move {
            let rib = reflector.rib().await.map_err(|e| e.to_string())?;
            for route in [&v4, &v6] {
                let Some(entry) = learned(&rib, route) else {
                    return Err(format!("{} missing in {rib:?}", route.prefix));
                };
                let want = RibEntry {
                    prefix: route.prefix,
                    next_hop: route.next_hop,
                    communities: route.communities.clone(),
                    best: true,
                    neighbor: Some(ip("127.0.0.2")),
                    as_path: vec![],
                };
                if *entry != want {
                    return Err(format!("{entry:?}, want {want:?}"));
                }
            }
            Ok(())
        }
    })
    .await;

    // What the site sent the reflector (its Adj-RIB-Out for it): both routes.
    let mut sent = site.advertised(ip("127.0.0.3")).await.unwrap();
    sent.sort();
    let mut want = vec![v4.prefix, v6.prefix];
    want.sort();
    assert_eq!(sent, want);

    site.withdraw(&v4).await.unwrap();
    assert_eq!(
        site.advertised(ip("127.0.0.3")).await.unwrap(),
        [v6.prefix],
        "a withdrawn route leaves the Adj-RIB-Out at once"
    );
    site.withdraw(&v6).await.unwrap();
    assert!(site.advertised(ip("127.0.0.3")).await.unwrap().is_empty());
    // Withdrawing again is not an error.
    site.withdraw(&v4).await.unwrap();
    assert!(site.rib().await.unwrap().is_empty());
    POLL.eventually_async("the reflector drops both routes", || {
        let mut reflector = reflector.clone();
        async move {
            let rib = reflector.rib().await.map_err(|e| e.to_string())?;
            if rib.is_empty() {
                Ok(())
            } else {
                Err(format!("{rib:?}"))
            }
        }
    })
    .await;

    // withdraw_all clears whatever the speaker originates.
    site.announce(&v4).await.unwrap();
    site.announce(&v6).await.unwrap();
    assert_eq!(site.rib().await.unwrap().len(), 2);
    site.withdraw_all().await.unwrap();
    assert!(site.rib().await.unwrap().is_empty());

    site.delete_peer(ip("127.0.0.3")).await.unwrap();
    assert!(site.peers().await.unwrap().is_empty());
}

#[tokio::test]
async fn start_is_idempotent_and_refuses_another_configuration() {
    if !gobgpd_installed() {
        return;
    }
    let (_gobgpd, mut speaker) = run_gobgpd().await;
    assert_eq!(speaker.global().await.unwrap(), None);
    let global = Global {
        asn: ASN,
        router_id: Ipv4Addr::new(192, 0, 2, 9),
        listen_port: -1,
        listen_addresses: vec![],
    };
    speaker.start(&global).await.unwrap();
    speaker.start(&global).await.unwrap();
    let running = speaker.global().await.unwrap().unwrap();
    assert_eq!(
        (running.asn, running.router_id, running.listen_port),
        (ASN, global.router_id, -1)
    );

    let other = Global {
        asn: 65001,
        router_id: Ipv4Addr::new(192, 0, 2, 10),
        ..global.clone()
    };
    let err = speaker.start(&other).await.unwrap_err();
    assert!(
        matches!(err, SpeakerError::AlreadyStarted { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    let endpoint = speaker.endpoint().to_string();
    for part in [
        endpoint.as_str(),
        "already started",
        "AS 65000 (wanted 65001)",
        "router id 192.0.2.9 (wanted 192.0.2.10)",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    // Nothing changed.
    assert_eq!(speaker.global().await.unwrap().unwrap().asn, ASN);

    let err = speaker
        .start(&Global { asn: 0, ..global })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("AS 0"), "{err}");
}

#[tokio::test]
async fn bad_routes_and_calls_before_start_fail_naming_the_call_and_endpoint() {
    if !gobgpd_installed() {
        return;
    }
    let (_gobgpd, mut speaker) = run_gobgpd().await;
    let route = Route {
        prefix: "198.51.100.10/32".parse().unwrap(),
        next_hop: ip("127.0.0.2"),
        communities: vec![],
    };
    let err = speaker.announce(&route).await.unwrap_err();
    assert!(matches!(err, SpeakerError::Invalid { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("next hop 127.0.0.2 is a loopback address"),
        "{err}"
    );
    let route = Route {
        next_hop: ip("192.0.2.2"),
        ..route
    };
    let message = speaker.announce(&route).await.unwrap_err().to_string();
    let endpoint = speaker.endpoint().to_string();
    assert!(message.contains("GoBGP AddPath at"), "{message}");
    assert!(message.contains(&endpoint), "{message}");
    assert!(message.contains("hasn't started"), "{message}");
}

#[tokio::test]
async fn connecting_to_nothing_names_the_endpoint() {
    let endpoint = api_address();
    let err = Speaker::connect(endpoint, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(err, SpeakerError::Connect { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("cannot connect to the GoBGP API at {endpoint}: ")));
}

#[tokio::test]
async fn a_missing_gobgpd_is_a_clear_error() {
    let err = GobgpdCommand::new(api_address())
        .program("gobgpd-not-installed-fedingress-test")
        .spawn()
        .unwrap_err();
    assert!(matches!(err, SpeakerError::NotInstalled { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "gobgpd-not-installed-fedingress-test not found on PATH: install Debian's gobgpd, or \
         set anycast.speaker.api to an external speaker"
    );
}

#[tokio::test]
async fn gobgpd_that_exits_early_says_why() {
    if !gobgpd_installed() {
        return;
    }
    let mut gobgpd = Gobgpd::start(
        api_address(),
        &["--config-file", "/nonexistent/gobgpd.toml"],
    )
    .unwrap();
    let err = gobgpd
        .wait_ready(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(matches!(err, SpeakerError::Exited { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("exited before its API answered: exit status: 1"),
        "{message}"
    );
    assert!(message.contains("/nonexistent/gobgpd.toml"), "{message}");
}

#[tokio::test]
async fn an_api_address_in_use_is_refused_before_starting() {
    if !gobgpd_installed() {
        return;
    }
    let (first, _speaker) = run_gobgpd().await;
    let err = Gobgpd::start(first.api(), &[]).unwrap_err();
    assert!(matches!(err, SpeakerError::ApiAddress { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot use {} for gobgpd's API: it is in use (another gobgpd?)",
            first.api()
        )
    );
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[tokio::test]
async fn gobgpd_is_killed_on_drop() {
    if !gobgpd_installed() {
        return;
    }
    let (gobgpd, _speaker) = run_gobgpd().await;
    let pid = gobgpd.id().unwrap();
    assert!(!gone(pid));
    drop(gobgpd);
    POLL.eventually_async("gobgpd is gone after drop", || async move {
        if gone(pid) {
            Ok(())
        } else {
            Err(format!("pid {pid} still runs"))
        }
    })
    .await;
}

const ORPHAN_ENV: &str = "FEDINGRESS_GOBGPD_ORPHAN_HELPER";

/// Not a test on its own: with `FEDINGRESS_GOBGPD_ORPHAN_HELPER` set it is the parent
/// process `gobgpd_dies_with_its_parent` kills (it starts gobgpd, prints its pid, then
/// waits to be killed, so no destructor runs).
#[tokio::test]
async fn orphan_helper() {
    if std::env::var_os(ORPHAN_ENV).is_none() {
        return;
    }
    let gobgpd = Gobgpd::start(api_address(), &[]).unwrap();
    println!("GOBGPD_PID={}", gobgpd.id().unwrap());
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn gobgpd_dies_with_its_parent() {
    use tokio::io::AsyncBufReadExt;

    if !gobgpd_installed() {
        return;
    }
    let mut helper = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "orphan_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ORPHAN_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(helper.stdout.take().unwrap()).lines();
    let pid: u32 = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // libtest may print "test orphan_helper ... " first on the same line.
            if let Some((_, pid)) = line.split_once("GOBGPD_PID=") {
                return pid.parse().unwrap();
            }
        }
        panic!("the helper ended without starting gobgpd");
    })
    .await
    .unwrap();
    assert!(!gone(pid));
    // SIGKILL: the helper's destructors never run; only the parent-death signal is left.
    helper.kill().await.unwrap();
    POLL.eventually_async("gobgpd dies with its parent", || async move {
        if gone(pid) {
            Ok(())
        } else {
            Err(format!("pid {pid} still runs"))
        }
    })
    .await;
}

/// `reject_imports` makes a speaker announce-only: a route its peer sends (here the
/// reflector's own path for the very prefix the site announces) never enters its RIB,
/// while a speaker without it (the control) learns that route.
#[tokio::test]
async fn an_announce_only_speaker_learns_nothing_from_its_peers() {
    if !gobgpd_installed() {
        return;
    }
    let bgp_port = free_port([127, 0, 0, 6]);
    let (_r, mut reflector) = run_gobgpd().await;
    reflector
        .start(&Global {
            asn: ASN,
            router_id: Ipv4Addr::new(192, 0, 2, 6),
            listen_port: i32::from(bgp_port),
            listen_addresses: vec![ip("127.0.0.6")],
        })
        .await
        .unwrap();
    let mut sites = Vec::new();
    for (n, reject) in [(4u8, true), (5, false)] {
        let (process, mut site) = run_gobgpd().await;
        site.start(&Global {
            asn: ASN,
            router_id: Ipv4Addr::new(192, 0, 2, n),
            listen_port: -1,
            listen_addresses: vec![],
        })
        .await
        .unwrap();
        if reject {
            site.reject_imports().await.unwrap();
            // Idempotent.
            site.reject_imports().await.unwrap();
        }
        let address = ip(&format!("127.0.0.{n}"));
        reflector
            .add_peer(&Peer {
                local_address: Some(ip("127.0.0.6")),
                passive: true,
                route_reflector_client: true,
                ..Peer::new(address, ASN)
            })
            .await
            .unwrap();
        site.add_peer(&Peer {
            port: Some(bgp_port),
            local_address: Some(address),
            connect_retry_seconds: Some(5),
            ..Peer::new(ip("127.0.0.6"), ASN)
        })
        .await
        .unwrap();
        sites.push((process, site));
    }
    let own = Route {
        prefix: "198.51.100.20/32".parse().unwrap(),
        next_hop: ip("192.0.2.4"),
        communities: vec![],
    };
    let reflected = Route {
        next_hop: ip("192.0.2.6"),
        ..own.clone()
    };
    sites[0].1.announce(&own).await.unwrap();
    reflector.announce(&reflected).await.unwrap();

    let control = sites[1].1.clone();
    POLL.eventually_async("the control site learns the reflector's path", || {
        let mut control = control.clone();
        let reflected = reflected.clone();
        async move {
            let rib = control.rib().await.map_err(|e| e.to_string())?;
            rib.iter()
                .any(|e| e.prefix == reflected.prefix && e.neighbor.is_some())
                .then_some(())
                .ok_or(format!("{rib:?}"))
        }
    })
    .await;
    // Both sites' sessions got the same updates; give the announce-only one a moment
    // longer, then its RIB must still hold its own path only.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rib = sites[0].1.rib().await.unwrap();
    assert_eq!(rib.len(), 1, "{rib:?}");
    assert_eq!(
        (rib[0].next_hop, rib[0].neighbor, rib[0].best),
        (own.next_hop, None, true)
    );
}
