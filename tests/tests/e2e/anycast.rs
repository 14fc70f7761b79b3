//! Anycast through BGP, end to end in network namespaces (`fedingress_tests::anycast`):
//! BIRD as route reflector and router, two sites each with a standalone cluster-agent
//! driving its own gobgpd, a client whose packets follow the router's FIB, and the hub.
//!
//! Proves: both sites' paths reach the router with their next hops and communities; the
//! client gets the preferred site; the hub's status shows both announcing; a dead
//! backend withdraws its site's route (status says why) and the client's next
//! connection lands on the other site; a restored backend brings it back; SIGTERM
//! withdraws before the agent's listeners stop. It prints the measured backend death →
//! route withdrawn at the router time (no assertion on it).
//!
//! Needs root, `ip netns`, BIRD 2 and gobgpd (skips otherwise, saying why).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fedingress_tests::anycast::{
    ANYCAST, ANYCAST_PREFIX, AnycastLab, Binaries, LabOptions, PORT, line_roundtrip, unavailable,
};
use fedingress_tests::bgp::{BirdConfig, BirdNeighbor};
use fedingress_tests::eventually;
use fedingress_tests::federation::cluster_entry;

const WAIT: Duration = Duration::from_secs(20);

/// `(announced, reason)` of the anycast route in `cluster`'s status entry of the
/// `anycast` ingress; `None` while it has none.
fn anycast_status(lab: &AnycastLab, cluster: &str) -> Result<(bool, String), String> {
    let ingress = lab.ingress("anycast").map_err(|e| format!("{e:#}"))?;
    let entry = cluster_entry(&ingress, cluster);
    let routes = entry["anycast"].as_array().cloned().unwrap_or_default();
    match routes.as_slice() {
        [route] if route["address"].as_str() == Some(&ANYCAST.to_string()) => Ok((
            route["announced"].as_bool().unwrap_or(false),
            route["reason"].as_str().unwrap_or_default().to_owned(),
        )),
        _ => Err(format!("{cluster}'s status entry: {entry}")),
    }
}

fn wait_announced(lab: &AnycastLab, cluster: &str, announced: bool) -> String {
    eventually(
        WAIT,
        &format!("{cluster} reported announced={announced}"),
        || match anycast_status(lab, cluster)? {
            (now, reason) if now == announced => Ok(reason),
            other => Err(format!("{other:?}")),
        },
    )
}

fn wait_client_gets(lab: &AnycastLab, site: &str) {
    eventually(WAIT, &format!("the client reaches {site}"), || {
        match lab.client_roundtrip("hello") {
            Ok(answer) if answer == format!("{site}: hello") => Ok(()),
            Ok(answer) => Err(answer),
            Err(e) => Err(format!("{e:#}")),
        }
    });
}

#[test]
fn routes_follow_backend_health_and_sigterm_withdraws_before_listeners_stop() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let mut lab = AnycastLab::start(Binaries::of_tests(), LabOptions::default()).unwrap();

    // Both paths at the router: next hop = the site's address, its community, and
    // site-a preferred (local_pref 200).
    let routes = lab.routes().unwrap();
    for site in &lab.sites {
        let path = routes
            .iter()
            .find(|r| r.protocol == site.protocol)
            .unwrap_or_else(|| panic!("no path from {}: {routes:?}", site.name));
        assert_eq!(path.next_hop, Some(site.address.into()), "{path:?}");
        assert_eq!(path.via, Some(site.address.into()), "{path:?}");
        assert_eq!(
            path.communities,
            std::slice::from_ref(&site.community),
            "{path:?}"
        );
        assert_eq!(path.best, site.name == "site-a", "{routes:?}");
    }
    assert_eq!(routes.len(), 2, "{routes:?}");

    wait_client_gets(&lab, "site-a");
    for cluster in ["site-a", "site-b"] {
        wait_announced(&lab, cluster, true);
    }

    // site-a's backend dies: its route leaves the RIB, the client moves to site-b.
    let died = Instant::now();
    lab.kill_backend(0);
    // Polled every 10 ms on one control connection (`eventually` polls every 50 ms).
    let mut bird = lab.bird().control().unwrap();
    let withdrawn = loop {
        let routes = bird.routes(ANYCAST_PREFIX).unwrap();
        if !routes.iter().any(|r| r.protocol == "site_a") {
            break died.elapsed();
        }
        assert!(
            died.elapsed() < WAIT,
            "site-a's path is still there: {routes:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!(
        "backend death → route withdrawn at the router: {:.1} ms (checks every 200 ms, unhealthy after 2)",
        withdrawn.as_secs_f64() * 1000.0
    );
    let routes = lab.routes().unwrap();
    assert!(
        routes.len() == 1 && routes[0].protocol == "site_b" && routes[0].best,
        "{routes:?}"
    );
    wait_client_gets(&lab, "site-b");
    let reason = wait_announced(&lab, "site-a", false);
    assert!(!reason.is_empty(), "a withdrawn route says why");
    eprintln!("site-a's status while withdrawn: {reason}");
    assert!(anycast_status(&lab, "site-b").unwrap().0);

    // Restored: site-a is back and preferred again.
    lab.start_backend(0).unwrap();
    lab.wait_for_paths(&[true, true], WAIT).unwrap();
    wait_client_gets(&lab, "site-a");
    wait_announced(&lab, "site-a", true);

    // SIGTERM of site-b's agent: its route goes (by an UPDATE: the session stays up)
    // while its listener on the anycast address still serves.
    let control = lab.bird().socket().to_owned();
    let anycast = SocketAddr::new(ANYCAST.into(), PORT);
    let agent = lab.sigterm_agent(1).unwrap();
    let order = lab.sites[1]
        .ns
        .run_inside(move || {
            let started = Instant::now();
            let mut bird = fedingress_tests::bgp::BirdControl::connect(&control).unwrap();
            let (mut route_gone, mut listener_gone, mut session) = (None, None, String::new());
            while started.elapsed() < WAIT && (route_gone.is_none() || listener_gone.is_none()) {
                if route_gone.is_none() {
                    let routes = bird.routes(ANYCAST_PREFIX).unwrap();
                    if !routes.iter().any(|r| r.protocol == "site_b") {
                        route_gone = Some(started.elapsed());
                        session = bird.protocol_info("site_b").unwrap();
                    }
                }
                if listener_gone.is_none()
                    && line_roundtrip(anycast, "ping").ok().as_deref() != Some("site-b: ping")
                {
                    listener_gone = Some(started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            (route_gone, listener_gone, session)
        })
        .unwrap();
    let (Some(route_gone), Some(listener_gone), session) = order else {
        panic!("after SIGTERM: {order:?}");
    };
    eprintln!(
        "SIGTERM → route withdrawn {:.1} ms, listener stopped {:.1} ms",
        route_gone.as_secs_f64() * 1000.0,
        listener_gone.as_secs_f64() * 1000.0
    );
    assert!(
        route_gone < listener_gone,
        "the route ({route_gone:?}) went before the listener ({listener_gone:?})"
    );
    assert_eq!(
        session, "Established",
        "withdrawn by an UPDATE, not a session end"
    );
    let status = agent.terminate(WAIT).unwrap();
    assert!(
        status.success(),
        "the agent exits cleanly on SIGTERM: {status}"
    );
    // site-a still serves.
    wait_client_gets(&lab, "site-a");
}

#[test]
fn bird_accepts_the_rendered_router_config() {
    if let Some(why) = fedingress_tests::bgp::unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = BirdConfig {
        router_id: "10.0.9.1".parse().unwrap(),
        asn: 65000,
        neighbors: vec![
            BirdNeighbor {
                name: "site_a".into(),
                address: "10.0.1.2".parse().unwrap(),
                asn: 65000,
                local_address: "10.0.1.1".parse().unwrap(),
                rr_client: true,
                local_pref: Some(200),
                passive: true,
                hold_time_seconds: 9,
                keepalive_seconds: 3,
                export: false,
            },
            BirdNeighbor {
                name: "ebgp_peer".into(),
                address: "10.0.2.2".parse().unwrap(),
                asn: 65010,
                local_address: "10.0.2.1".parse().unwrap(),
                rr_client: false,
                local_pref: None,
                passive: false,
                hold_time_seconds: 90,
                keepalive_seconds: 30,
                export: true,
            },
        ],
        log: dir.path().join("bird.log"),
    };
    let path = dir.path().join("bird.conf");
    std::fs::write(&path, config.render()).unwrap();
    // `bird -p`: parse the configuration and exit.
    let out = std::process::Command::new("bird")
        .arg("-p")
        .arg("-c")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bird -p rejected:\n{}\n{}",
        config.render(),
        String::from_utf8_lossy(&out.stderr)
    );
}
