//! Anycast through BGP, end to end in network namespaces (`fedingress_tests::anycast`):
//! a route reflector and router (BIRD 2, and FRR 8 on docs/anycast.md's config), two
//! sites each with a standalone cluster-agent driving its own gobgpd, a client whose
//! packets follow the router's FIB, and the hub.
//!
//! Proves, with each router: both sites' paths reach the router with their next hops,
//! communities and preference; the client gets the preferred site; the hub's status
//! equals the router's RIB after every step; a dead backend withdraws its site's route
//! (status says why) and the client's next connection lands on the other site; a
//! restored backend brings it back; SIGTERM withdraws before the agent's listeners stop;
//! a killed speaker's route is back within seconds. With BIRD: a rolling restart waiting
//! for `/readyz` loses no connection. It prints the measured times (no assertion on
//! them but the speaker's return).
//!
//! Needs root, `ip netns`, gobgpd, and BIRD 2 or FRR (each test skips otherwise, saying
//! why).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fedingress_tests::anycast::{
    ANYCAST, ANYCAST_PREFIX, AnycastLab, Binaries, LabOptions, PORT, docs_frr_configs,
    line_roundtrip, unavailable, unavailable_with,
};
use fedingress_tests::bgp::{BirdConfig, BirdNeighbor, FRR_BGPD, RouterKind};
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

/// The same steps with BIRD and with FRR as the router.
#[test]
fn bird_routes_follow_backend_health_sigterm_and_speaker_restart() {
    routes_follow_backend_health_sigterm_and_speaker_restart(RouterKind::Bird);
}

/// FRR on docs/anycast.md's iBGP config block (only its example addresses, prefix and
/// community replaced by the lab's), peering with the agents' listening gobgpd on port
/// 1790: issue 23 item 5.
#[test]
fn frr_routes_follow_backend_health_sigterm_and_speaker_restart() {
    routes_follow_backend_health_sigterm_and_speaker_restart(RouterKind::Frr);
}

/// At start, after a backend's death and return, after an agent's SIGTERM and restart,
/// and after its speaker's SIGKILL and restart, the hub's anycast status equals the
/// router's RIB; on the way the routes carry the sites' next hops and communities, the
/// client follows the RIB, and SIGTERM withdraws (by an UPDATE) before the agent's
/// listeners stop.
fn routes_follow_backend_health_sigterm_and_speaker_restart(router: RouterKind) {
    if let Some(why) = unavailable_with(router) {
        eprintln!("skipping: {why}");
        return;
    }
    let mut lab =
        AnycastLab::start_with(Binaries::of_tests(), LabOptions::default(), router).unwrap();
    let (site_a, site_b) = (lab.sites[0].protocol.clone(), lab.sites[1].protocol.clone());

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
        assert_eq!(
            path.local_pref,
            Some(if site.name == "site-a" { 200 } else { 100 }),
            "{path:?}"
        );
    }
    assert_eq!(routes.len(), 2, "{routes:?}");
    wait_status_is_rib(&lab, [true, true]);
    wait_client_gets(&lab, "site-a");

    // site-a's backend dies: its route leaves the RIB, the client moves to site-b.
    let died = Instant::now();
    lab.kill_backend(0);
    let withdrawn = time_until_path(&lab, 0, false, died);
    eprintln!(
        "{router:?}: backend death → route withdrawn at the router: {:.1} ms (checks every 200 ms, unhealthy after 2)",
        withdrawn.as_secs_f64() * 1000.0
    );
    let routes = lab.routes().unwrap();
    assert!(
        routes.len() == 1 && routes[0].protocol == site_b && routes[0].best,
        "{routes:?}"
    );
    wait_client_gets(&lab, "site-b");
    let reason = wait_announced(&lab, "site-a", false);
    assert!(!reason.is_empty(), "a withdrawn route says why");
    eprintln!("site-a's status while withdrawn: {reason}");
    wait_status_is_rib(&lab, [false, true]);

    // Restored: site-a is back and preferred again.
    lab.start_backend(0).unwrap();
    wait_status_is_rib(&lab, [true, true]);
    wait_client_gets(&lab, "site-a");
    assert!(
        lab.routes()
            .unwrap()
            .iter()
            .any(|r| r.protocol == site_a && r.best)
    );

    // SIGTERM of site-b's agent: its route goes (by an UPDATE: the session stays up)
    // while its listener on the anycast address still serves.
    let mut rib = lab.rib().unwrap();
    let anycast = SocketAddr::new(ANYCAST.into(), PORT);
    let agent = lab.sigterm_agent(1).unwrap();
    let order = lab.sites[1]
        .ns
        .run_inside(move || {
            let started = Instant::now();
            let (mut route_gone, mut listener_gone, mut session) = (None, None, String::new());
            while started.elapsed() < WAIT && (route_gone.is_none() || listener_gone.is_none()) {
                if route_gone.is_none() {
                    let routes = rib.routes(ANYCAST_PREFIX).unwrap();
                    if !routes.iter().any(|r| r.protocol == site_b) {
                        route_gone = Some(started.elapsed());
                        session = rib.session_state(&site_b).unwrap();
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
        "{router:?}: SIGTERM → route withdrawn {:.1} ms, listener stopped {:.1} ms",
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
    // The hub heard it before the session closed, and keeps showing it (issue 23).
    let reason = wait_announced(&lab, "site-b", false);
    assert_eq!(reason, "withdrawn: draining (SIGTERM)");
    wait_status_is_rib(&lab, [true, false]);
    // site-a still serves.
    wait_client_gets(&lab, "site-a");

    // site-b's agent starts again: the router connects to its gobgpd and has the route.
    let started = Instant::now();
    lab.start_agent(1).unwrap();
    let back = time_until_path(&lab, 1, true, started);
    eprintln!(
        "{router:?}: agent start → route at the router {:.0} ms",
        back.as_secs_f64() * 1000.0
    );
    wait_status_is_rib(&lab, [true, true]);

    // Its speaker dies: the route leaves at once, the agent restarts gobgpd, the router
    // connects to it and has the route again.
    let killed = Instant::now();
    lab.kill_speaker(1).unwrap();
    let gone = time_until_path(&lab, 1, false, killed);
    let back = time_until_path(&lab, 1, true, killed);
    eprintln!(
        "{router:?}: gobgpd SIGKILL → route gone {:.0} ms, back {:.0} ms",
        gone.as_secs_f64() * 1000.0,
        back.as_secs_f64() * 1000.0
    );
    // GoBGP 3 connecting out itself takes 5-9 s after a restart.
    assert!(
        back < Duration::from_secs(4),
        "the route came back only after {back:?}"
    );
    wait_status_is_rib(&lab, [true, true]);
    wait_client_gets(&lab, "site-a");
}

/// Waits until the router's RIB has exactly the sites' paths of `present` and the hub's
/// status says the same of every site.
fn wait_status_is_rib(lab: &AnycastLab, present: [bool; 2]) {
    lab.wait_for_paths(&present, WAIT).unwrap();
    for (site, announced) in lab.sites.iter().zip(present) {
        wait_announced(lab, &site.name, announced);
    }
}

/// How long until site `i`'s path is in the router's RIB exactly when `present`,
/// polled every 10 ms on one reader (BIRD: one control connection; FRR: a vtysh each).
fn time_until_path(lab: &AnycastLab, i: usize, present: bool, since: Instant) -> Duration {
    let protocol = lab.sites[i].protocol.clone();
    let mut rib = lab.rib().unwrap();
    loop {
        let routes = rib.routes(ANYCAST_PREFIX).unwrap();
        if routes.iter().any(|r| r.protocol == protocol) == present {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < WAIT,
            "{protocol}'s path present={present} not seen: {routes:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue 23: status is what the router holds, `/readyz` waits for the router to have
/// the route, a killed speaker's route is back within about a second (the router
/// connects to the listening gobgpd), and a rolling restart of both agents that waits
/// for `/readyz` loses no client connection.
#[test]
fn status_follows_the_rib_and_a_rolling_restart_waiting_for_readyz_loses_no_connection() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let mut lab = AnycastLab::start(Binaries::of_tests(), LabOptions::default()).unwrap();
    wait_status_is_rib(&lab, [true, true]);
    for i in 0..2 {
        eventually(WAIT, "the agent ready", || lab.agent_ready(i));
    }

    // The speaker dies: its route leaves at once, the agent restarts it, the router
    // connects to it and has the route again.
    let killed = Instant::now();
    lab.kill_speaker(1).unwrap();
    let gone = time_until_path(&lab, 1, false, killed);
    let back = time_until_path(&lab, 1, true, killed);
    eprintln!(
        "gobgpd SIGKILL → route gone {:.0} ms, back {:.0} ms",
        gone.as_secs_f64() * 1000.0,
        back.as_secs_f64() * 1000.0
    );
    // GoBGP 3 connecting out itself takes 5-9 s after a restart.
    assert!(
        back < Duration::from_secs(4),
        "the route came back only after {back:?}"
    );
    wait_status_is_rib(&lab, [true, true]);

    // A client connecting every 20 ms throughout a rolling restart.
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let stop = Arc::clone(&stop);
        let anycast = SocketAddr::new(ANYCAST.into(), PORT);
        lab.client
            .spawn_inside(move || {
                let (mut ok, mut failed) = (0u32, Vec::new());
                let started = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    match line_roundtrip(anycast, "ping") {
                        Ok(answer) if answer.ends_with(": ping") => ok += 1,
                        Ok(answer) => failed.push((started.elapsed(), answer)),
                        Err(e) => failed.push((started.elapsed(), format!("{e:#}"))),
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                (ok, failed)
            })
            .unwrap()
    };
    for i in 0..2 {
        let name = lab.sites[i].name.clone();
        let agent = lab.sigterm_agent(i).unwrap();
        assert!(agent.terminate(WAIT).is_some_and(|s| s.success()));
        let mut present = [true, true];
        present[i] = false;
        wait_status_is_rib(&lab, present);
        assert_eq!(
            anycast_status(&lab, &name).unwrap().1,
            "withdrawn: draining (SIGTERM)"
        );
        let started = Instant::now();
        lab.start_agent(i).unwrap();
        // Not ready before the router has the route.
        let mut routes_when_ready = Vec::new();
        eventually(WAIT, &format!("{name} ready"), || {
            let ready = lab.agent_ready(i);
            if ready.is_ok() {
                routes_when_ready = lab.routes().unwrap();
            }
            ready
        });
        let ready_after = started.elapsed();
        assert!(
            routes_when_ready
                .iter()
                .any(|r| r.protocol == lab.sites[i].protocol),
            "{name} was ready before the router had its route: {routes_when_ready:?}"
        );
        eprintln!(
            "{name} restarted: /readyz 200 {:.0} ms after the start (the route was at the router by then)",
            ready_after.as_secs_f64() * 1000.0
        );
        wait_status_is_rib(&lab, [true, true]);
    }
    stop.store(true, Ordering::SeqCst);
    let (ok, failed) = client.join().unwrap().unwrap();
    eprintln!(
        "rolling restart: {ok} client connections answered, {} failed",
        failed.len()
    );
    assert!(ok > 0);
    assert!(failed.is_empty(), "failed connections: {failed:?}");
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
                port: None,
                connect_seconds: None,
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
                port: Some(1790),
                connect_seconds: Some(1),
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

/// Issue 23: FRR 8.4 refused the docs' eBGP instructions. Runs FRR's bgpd on each FRR
/// config block of docs/anycast.md, on its own pid file, zebra socket and vty socket in
/// a temporary directory (not listening: `-p 0`; no zebra needed to load a config), and
/// fails on any line it refuses. Needs root and FRR (skips otherwise).
#[test]
fn frr_accepts_the_docs_router_configs() {
    if !std::path::Path::new(FRR_BGPD).exists() {
        eprintln!("skipping: FRR is not installed (apt-get install frr)");
        return;
    }
    let id = |args: &[&str]| -> Option<u32> {
        let out = std::process::Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"]) != Some(0) {
        eprintln!("skipping: bgpd drops to the frr user: needs root");
        return;
    }
    let (Some(uid), Some(gid)) = (id(&["-u", "frr"]), id(&["-g", "frr"])) else {
        panic!("FRR is installed but there is no frr user");
    };
    let blocks = docs_frr_configs().unwrap();
    assert_eq!(blocks.len(), 2, "an iBGP and an eBGP block: {blocks:?}");
    for block in blocks {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bgpd.conf");
        std::fs::write(&path, &block).unwrap();
        // bgpd runs as the frr user: it writes its pid file and sockets there.
        for p in [dir.path(), path.as_path()] {
            std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
        }
        let mut child = std::process::Command::new(FRR_BGPD)
            .arg("-f")
            .arg(&path)
            .arg("-i")
            .arg(dir.path().join("bgpd.pid"))
            .arg("-z")
            .arg(dir.path().join("zserv.api"))
            .arg("--vty_socket")
            .arg(dir.path())
            .args(["-p", "0", "-u", "frr", "-g", "frr", "--log", "stdout"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The config is read at start; give it time, then stop it (by its pid).
        std::thread::sleep(Duration::from_secs(2));
        let exited_early = child.try_wait().unwrap();
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            exited_early.is_none(),
            "bgpd exited at once ({exited_early:?}):\n{text}"
        );
        let refused: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with('%') || l.contains("Config Failed") || l.contains("Unknown command")
            })
            .collect();
        assert!(
            refused.is_empty(),
            "FRR refused lines of docs/anycast.md:\n{}\n--- the block ---\n{block}",
            refused.join("\n")
        );
        assert!(text.contains("bgpd 8."), "bgpd did not start:\n{text}");
    }
}
