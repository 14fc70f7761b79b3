//! GSLB over the wire: the apiserver's embedded DNS server asked with the real `dig`,
//! real agents reporting health and load, events and explain. Own loopback blocks.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_tests::echo::Echo;
use fedingress_tests::federation::{
    ClusterSpec, HubProcess, agent_config, create_cluster, curl_json, get_json, issue_token,
    kubectl, start_agent, start_hub_with,
};
use fedingress_tests::{Kubectl, Process, eventually};
use fedingress_testsupport::dns::{dig, dig_short};

const WAIT: Duration = Duration::from_secs(30);

/// The location table: 10.1/16 Europe, 10.2/16 US east, 10.3/16 India; default Europe.
const DNS_CONFIG: &str = "dns:
  listen: 127.0.0.1:0
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
    soa: {mname: ns1.fedingress.test, rname: hostmaster.fedingress.test, refresh: 3600, retry: 600, expire: 86400, minimum: 30}
  locations:
    default: {region: europe-west1, latitude: 50.0, longitude: 4.0}
    table:
    - {cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}
    - {cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}
    - {cidr: 10.3.0.0/16, region: asia-south1, latitude: 19.0, longitude: 72.8}
";

struct Gslb {
    hub: HubProcess,
    k: Kubectl,
    dns_port: String,
    _agents: Vec<Process>,
    echoes: Vec<Option<Echo>>,
    specs: Vec<ClusterSpec>,
}

fn three_regions(block: u8) -> Vec<ClusterSpec> {
    vec![
        ClusterSpec::numbered(block, 1, "europe-west1", 50.4, 3.8),
        ClusterSpec::numbered(block, 2, "us-east1", 39.0, -77.5),
        ClusterSpec::numbered(block, 3, "asia-south1", 19.1, 72.9),
    ]
}

fn start(dir: &Path, block: u8, specs: Vec<ClusterSpec>) -> Gslb {
    let hub = start_hub_with(dir, block, DNS_CONFIG);
    let dns_port = hub
        .process
        .addr("dns")
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let k = kubectl(dir, &hub.api);
    let mut agents = Vec::new();
    let mut echoes = Vec::new();
    for spec in &specs {
        echoes.push(Some(Echo::start(spec.backend).unwrap()));
        create_cluster(&k, dir, spec);
        let (_, token) = issue_token(&hub.api, &spec.name).unwrap();
        agents.push(start_agent(
            &agent_config(dir, &hub.agent, spec, &token),
            &spec.name,
        ));
    }
    Gslb {
        hub,
        k,
        dns_port,
        _agents: agents,
        echoes,
        specs,
    }
}

/// Applies a FederatedIngress with TCP and UDP rules on `port` (each object its own).
fn apply_ingress(dir: &Path, k: &Kubectl, name: &str, port: u16, traffic: &str) {
    let text = format!(
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: {name}\nspec:\n  rules:\n  - protocol: TCP\n    port: {port}\n    name: echo\n    backend: {{service: echo, port: 9000}}\n  - protocol: UDP\n    port: {port}\n    name: echo\n    backend: {{service: echo, port: 9000}}\n  traffic:\n    dnsName: {name}.fedingress.test\n    ttl: 5\n{traffic}"
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    k.ok(&["apply", "-f", &path.display().to_string()]);
}

impl Gslb {
    /// `dig +short` answers.
    fn dig(&self, args: &[&str]) -> Vec<String> {
        dig_short(self.dns(), args)
    }

    fn dig_full(&self, args: &[&str]) -> String {
        dig(self.dns(), args)
    }

    /// The DNS server's address (127.0.0.1 and its port).
    fn dns(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.dns_port.parse().unwrap()))
    }

    fn wait_answer(&self, what: &str, args: &[&str], expect: &[&str]) {
        eventually(WAIT, what, || {
            let mut got = self.dig(args);
            got.sort();
            let mut want: Vec<String> = expect.iter().map(|s| s.to_string()).collect();
            want.sort();
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        });
    }

    fn ip(&self, n: usize) -> String {
        self.specs[n].bind.to_string()
    }

    fn wait_ready(&self, ingress: &str) {
        eventually(WAIT, "Ready and DNSReady", || {
            let object = get_json(&self.k, &["federatedingress", ingress]);
            let ok = |t: &str| {
                object["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            if ok("Ready") && ok("DNSReady") {
                Ok(())
            } else {
                Err(object["status"].to_string())
            }
        });
    }
}

#[test]
fn geo_answers_failover_events_and_explain() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut g = start(dir, 21, three_regions(21));
    apply_ingress(
        dir,
        &g.k,
        "geo",
        7000,
        "    strategy: {type: Geo}\n    failbackDelaySeconds: 5\n",
    );
    g.wait_ready("geo");

    // Each region's clients get their nearest cluster, with the ECS scope of the table.
    let (eu, us, ap) = (g.ip(0), g.ip(1), g.ip(2));
    g.wait_answer(
        "eu answer",
        &["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"],
        &[&eu],
    );
    g.wait_answer(
        "us answer",
        &["geo.fedingress.test", "A", "+subnet=10.2.2.0/24"],
        &[&us],
    );
    g.wait_answer(
        "ap answer",
        &["geo.fedingress.test", "A", "+subnet=10.3.2.0/24"],
        &[&ap],
    );
    let full = g.dig_full(&["geo.fedingress.test", "A", "+subnet=10.2.2.0/24"]);
    assert!(full.contains("CLIENT-SUBNET: 10.2.2.0/24/16"), "{full}");
    assert!(full.contains("flags: qr aa"), "{full}");

    // SRV for the named TCP and UDP rules, with per-cluster targets.
    let srv = g.dig(&[
        "_echo._tcp.geo.fedingress.test",
        "SRV",
        "+subnet=10.1.2.0/24",
    ]);
    assert_eq!(srv.len(), 1, "{srv:?}");
    assert!(srv[0].ends_with("7000 c1.geo.fedingress.test."), "{srv:?}");
    assert_eq!(g.dig(&["c1.geo.fedingress.test", "A"]), vec![eu.clone()]);
    assert_eq!(
        g.dig(&[
            "_echo._udp.geo.fedingress.test",
            "SRV",
            "+subnet=10.1.2.0/24"
        ])
        .len(),
        1
    );

    // explain agrees with the DNS answer.
    let explain = curl_json(&[&format!("{}/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/geo/explain?client=10.2.3.4", g.hub.api)]).unwrap();
    assert_eq!(explain["answer"]["clusters"][0], "c2", "{explain}");
    assert!(explain.to_string().contains("us-east1"), "{explain}");

    // c1's backends die: European clients go to the next nearest; an Event says so.
    g.echoes[0] = None;
    g.wait_answer(
        "eu moved to us",
        &["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"],
        &[&us],
    );
    eventually(WAIT, "an event about c1 leaving", || {
        let events = g.k.ok(&["get", "events"]);
        if events.contains("c1") && events.contains("federatedingress/geo") {
            Ok(())
        } else {
            Err(events)
        }
    });
    let described = g.k.ok(&["describe", "federatedingress", "geo"]);
    assert!(
        described.contains("Events:") && described.contains("c1"),
        "{described}"
    );
    // Back: only after it has been healthy for failbackDelaySeconds (5 s).
    g.echoes[0] = Some(Echo::start(g.specs[0].backend).unwrap());
    eventually(WAIT, "c1 healthy again in status", || {
        let out = g.k.ok(&["get", "federatedingress", "geo", "-o", "json"]);
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        let healthy = value["status"]["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == "c1" && c["healthy"] == true);
        if healthy { Ok(()) } else { Err(out) }
    });
    assert_eq!(
        g.dig(&["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"]),
        std::slice::from_ref(&us),
        "held out of answers until the failback delay has passed"
    );
    g.wait_answer(
        "eu back on c1",
        &["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"],
        &[&eu],
    );

    // Cordon takes a cluster out of every answer.
    g.k.ok(&[
        "patch",
        "cluster",
        "c1",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"unschedulable":true}}"#,
    ]);
    g.wait_answer(
        "cordoned c1 out",
        &["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"],
        &[&us],
    );
    g.k.ok(&[
        "patch",
        "cluster",
        "c1",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"unschedulable":false}}"#,
    ]);
    g.wait_answer(
        "uncordoned c1 back",
        &["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"],
        &[&eu],
    );

    // Outside the zone: REFUSED; a name in the zone that does not exist: NXDOMAIN;
    // a type it does not have: NODATA; ANY: RFC 8482; AXFR: refused.
    assert!(
        g.dig_full(&["example.com", "A"])
            .contains("status: REFUSED")
    );
    assert!(
        g.dig_full(&["nope.fedingress.test", "A"])
            .contains("status: NXDOMAIN")
    );
    let nodata = g.dig_full(&["geo.fedingress.test", "TXT"]);
    assert!(
        nodata.contains("status: NOERROR") && nodata.contains("ANSWER: 0"),
        "{nodata}"
    );
    assert!(
        g.dig_full(&["geo.fedingress.test", "ANY"])
            .contains("RFC8482")
    );
    let axfr = g.dig_full(&["fedingress.test", "AXFR"]);
    assert!(
        axfr.contains("Transfer failed") || axfr.contains("REFUSED"),
        "{axfr}"
    );
    let soa = g.dig(&["fedingress.test", "SOA"]);
    assert!(
        soa[0].starts_with("ns1.fedingress.test. hostmaster.fedingress.test."),
        "{soa:?}"
    );
    // The in-zone nameserver is not lame: with no addresses in the config it answers
    // the DNS listen IP, and NS answers carry it as glue.
    assert_eq!(g.dig(&["ns1.fedingress.test", "A"]), vec!["127.0.0.1"]);
    let ns = g.dig_full(&["fedingress.test", "NS", "+norec"]);
    assert!(
        ns.contains("flags: qr aa") && ns.contains("ADDITIONAL SECTION"),
        "{ns}"
    );
    assert!(
        ns.lines().any(|l| l.starts_with("ns1.fedingress.test.")
            && l.ends_with("127.0.0.1")
            && l.contains("\tA\t")),
        "{ns}"
    );
}

#[test]
fn failover_with_delayed_failback_and_unhealthy_policies() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut g = start(dir, 22, three_regions(22));
    apply_ingress(
        dir,
        &g.k,
        "fo",
        7001,
        "    strategy: {type: Failover, failoverOrder: [[c1], [c2]]}\n    failbackDelaySeconds: 3\n",
    );
    apply_ingress(
        dir,
        &g.k,
        "open",
        7002,
        "    strategy: {type: RoundRobin}\n    whenAllUnhealthy: ServeAll\n",
    );
    apply_ingress(
        dir,
        &g.k,
        "closed",
        7003,
        "    strategy: {type: RoundRobin}\n    whenAllUnhealthy: NoData\n",
    );
    g.wait_ready("fo");
    let (c1, c2, c3) = (g.ip(0), g.ip(1), g.ip(2));
    g.wait_answer("primary tier", &["fo.fedingress.test", "A"], &[&c1]);

    // Primary dies: at once to the second tier. Back: only after the failback delay.
    g.echoes[0] = None;
    g.wait_answer("second tier", &["fo.fedingress.test", "A"], &[&c2]);
    g.echoes[0] = Some(Echo::start(g.specs[0].backend).unwrap());
    eventually(WAIT, "c1 healthy again", || {
        let entry = fedingress_tests::federation::cluster_entry(
            &get_json(&g.k, &["federatedingress", "fo"]),
            "c1",
        );
        if entry["healthy"] == true {
            Ok(())
        } else {
            Err(entry.to_string())
        }
    });
    let healthy_at = std::time::Instant::now();
    assert_eq!(
        g.dig(&["fo.fedingress.test", "A"]),
        vec![c2.clone()],
        "no failback before the delay"
    );
    g.wait_answer(
        "failback after the delay",
        &["fo.fedingress.test", "A"],
        &[&c1],
    );
    assert!(
        healthy_at.elapsed() >= Duration::from_secs(2),
        "failed back after {:?}",
        healthy_at.elapsed()
    );

    // Every backend down: fail open serves all, fail closed serves nothing.
    for echo in &mut g.echoes {
        *echo = None;
    }
    g.wait_answer(
        "fail open",
        &["open.fedingress.test", "A"],
        &[&c1, &c2, &c3],
    );
    eventually(WAIT, "fail closed", || {
        let full = g.dig_full(&["closed.fedingress.test", "A"]);
        if full.contains("status: NOERROR") && full.contains("ANSWER: 0") {
            Ok(())
        } else {
            Err(full)
        }
    });
}

#[test]
fn weighted_split_aaaa_cname_and_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut specs = three_regions(23);
    specs[2].bind = "::1".parse().unwrap();
    specs[2].backend = "[::1]:19123".parse().unwrap();
    specs.push(ClusterSpec {
        advertise: Some("lb.c4.example.net".into()),
        ..ClusterSpec::numbered(23, 4, "europe-west1", 51.0, 4.0)
    });
    let g = start(dir, 23, specs);
    apply_ingress(
        dir,
        &g.k,
        "w",
        7004,
        "    strategy: {type: Weighted, weights: {c1: 3, c2: 1}}\n  placement:\n    clusters: [c1, c2]\n",
    );
    apply_ingress(dir, &g.k, "v6", 7005, "  placement:\n    clusters: [c3]\n");
    apply_ingress(dir, &g.k, "lb", 7006, "  placement:\n    clusters: [c4]\n");
    g.wait_ready("w");
    g.wait_ready("v6");
    g.wait_ready("lb");

    // 10,000 queries: one address per response, split 75/25 within ±3 points.
    let queries = dir.join("queries.txt");
    std::fs::write(&queries, "w.fedingress.test A\n".repeat(10_000)).unwrap();
    let out = Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &g.dns_port,
            "+short",
            "+time=2",
            "+tries=1",
            "-f",
        ])
        .arg(&queries)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let c1 = text.lines().filter(|l| *l == g.ip(0)).count() as f64;
    let c2 = text.lines().filter(|l| *l == g.ip(1)).count() as f64;
    assert_eq!(c1 + c2, 10_000.0, "every query answered with one address");
    let share = c1 / (c1 + c2);
    assert!((share - 0.75).abs() <= 0.03, "c1 share {share}");

    // IPv6 cluster: AAAA; a load balancer host name: CNAME.
    g.wait_answer("AAAA", &["v6.fedingress.test", "AAAA"], &["::1"]);
    assert!(g.dig(&["v6.fedingress.test", "A"]).is_empty());
    g.wait_answer(
        "CNAME",
        &["lb.fedingress.test", "A"],
        &["lb.c4.example.net."],
    );

    // Overflow: c1 (capacity 20 connections/s, threshold 0.5) gets more than 10/s, so
    // a share of European clients spills to the next nearest cluster (c4's region is
    // Europe too, but it is not placed: c2).
    g.k.ok(&[
        "patch",
        "cluster",
        "c1",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"capacity":{"rps":20}}}"#,
    ]);
    apply_ingress(
        dir,
        &g.k,
        "ov",
        7007,
        "    strategy: {type: Overflow, overflowThreshold: 0.5}\n  placement:\n    clusters: [c1, c2]\n",
    );
    g.wait_ready("ov");
    let target = std::net::SocketAddr::new(g.specs[0].bind, 7007);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200));
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    eventually(WAIT, "European clients partly spill to c2", || {
        let answers = (0..40)
            .map(|_| {
                g.dig(&["ov.fedingress.test", "A", "+subnet=10.1.2.0/24"])
                    .join(",")
            })
            .collect::<Vec<_>>();
        let spilled = answers.iter().filter(|a| **a == g.ip(1)).count();
        let kept = answers.iter().filter(|a| **a == g.ip(0)).count();
        if spilled > 0 && kept > 0 {
            Ok(())
        } else {
            Err(format!("kept {kept}, spilled {spilled}"))
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = load.join();
}
