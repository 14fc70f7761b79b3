//! DNS continuity with real processes: a federation-apiserver (embedded DNS server, a
//! location table of three regions), three standalone agents (one cluster per region,
//! each with a working echo backend) and a Geo FederatedIngress serving TCP. A prober
//! ([`fedingress_tests::dnsprobe`]) asks for the name on behalf of each region's clients
//! every few milliseconds for the whole test and records every answer. Across each
//! scenario no answer may differ from the steady state (each region's nearest cluster):
//! no NODATA, NXDOMAIN, SERVFAIL, REFUSED or other address set; only queries in flight
//! while the apiserver process is down may go unanswered.
//!
//! Scenarios (issue 9, item 3), each under `whenAllUnhealthy: ServeAll` and `NoData`:
//! - spec edits that do not change routing (TTL six times, a label, a new port);
//! - `kill -9` of the apiserver and a restart on the same data dir and ports, the agents
//!   frozen meanwhile (so the hub answers from persisted state alone), then back;
//! - a second FederatedIngress created while probing (one agent frozen meanwhile, so
//!   one cluster serves it late): the first never deviates and the second is never
//!   answered with an address that does not accept TCP on its port yet.
//!
//! Loopback blocks 127.0.51.x to 127.0.56.x, one per test.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use fedingress_tests::dnsprobe::{Down, Prober, Sample, Target, judge};
use fedingress_tests::echo::Echo;
use fedingress_tests::federation::{
    ClusterSpec, HubOptions, HubProcess, agent_config, cluster_entry, condition, create_cluster,
    get_json, issue_token, kubectl, start_agent, start_hub_opts,
};
use fedingress_tests::{Kubectl, Process, eventually};

/// Generous: timing is measured by the benchmarks, not here.
const WAIT: Duration = Duration::from_secs(30);

/// One query per region (per name) this often.
const PROBE_INTERVAL: Duration = Duration::from_millis(5);

/// Samples per target to keep probing once a scenario has settled.
const SETTLED_SAMPLES: usize = 200;

/// Port of the first ingress's TCP rule, of the rule the edits add, of the second
/// ingress.
const PORT: u16 = 7100;
const ADDED_PORT: u16 = 7101;
const SECOND_PORT: u16 = 7200;

/// The DNS server's fixed port (fixed so the prober keeps asking the restarted hub).
const DNS_PORT: u16 = 15353;

/// Regions: (label, cluster region, cluster latitude, longitude, client subnet).
const REGIONS: [(&str, &str, f64, f64, [u8; 4]); 3] = [
    ("eu", "europe-west1", 50.4, 3.8, [10, 1, 2, 0]),
    ("us", "us-east1", 39.0, -77.5, [10, 2, 2, 0]),
    ("ap", "asia-south1", 19.1, 72.9, [10, 3, 2, 0]),
];

#[derive(Clone, Copy, Debug)]
enum Policy {
    ServeAll,
    NoData,
}

fn dns_config(block: u8) -> String {
    format!(
        "dns:
  listen: 127.0.{block}.1:{DNS_PORT}
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
    soa: {{mname: ns1.fedingress.test, rname: hostmaster.fedingress.test, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}
  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
    table:
    - {{cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}}
    - {{cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}}
    - {{cidr: 10.3.0.0/16, region: asia-south1, latitude: 19.0, longitude: 72.8}}
"
    )
}

/// A federation of one hub and three clusters, one per region.
struct Federation {
    block: u8,
    policy: Policy,
    dns_config: String,
    hub: Option<HubProcess>,
    k: Kubectl,
    specs: Vec<ClusterSpec>,
    agents: Vec<Process>,
    _echoes: Vec<Echo>,
}

/// Heartbeat 500 ms, lease 10 s: longer than an agent's reconnect backoff after a hub
/// restart, so every agent is back within its lease and the steady state is well
/// defined; no lease expires by accident on a loaded machine either.
fn hub_options(dns_config: &str) -> HubOptions<'_> {
    HubOptions {
        heartbeat_ms: 500,
        lease_ms: 10_000,
        extra: dns_config,
    }
}

impl Federation {
    /// Starts the hub, the clusters and their agents, applies the `geo` ingress and
    /// waits until it is Ready everywhere.
    fn start(dir: &Path, block: u8, policy: Policy) -> Self {
        let specs: Vec<ClusterSpec> = REGIONS
            .iter()
            .zip(1u8..)
            .map(|(&(_, region, latitude, longitude, _), n)| {
                ClusterSpec::numbered(block, n, region, latitude, longitude)
            })
            .collect();
        let dns_config = dns_config(block);
        let hub = start_hub_opts(dir, block, &hub_options(&dns_config));
        let k = kubectl(dir, &hub.api);
        let mut agents = Vec::new();
        let mut echoes = Vec::new();
        for spec in &specs {
            echoes.push(Echo::start(spec.backend).unwrap());
            create_cluster(&k, dir, spec);
            let (_, token) = issue_token(&hub.api, &spec.name).unwrap();
            let config = agent_config(dir, &hub.agent, spec, &token);
            agents.push(start_agent(&config, &spec.name));
        }
        let federation = Self {
            block,
            policy,
            dns_config,
            hub: Some(hub),
            k,
            specs,
            agents,
            _echoes: echoes,
        };
        federation.apply_ingress(dir, "geo", &[PORT], 5, "");
        federation.wait_settled("geo", &[PORT]);
        federation
    }

    /// Kills the hub with SIGKILL and starts it again on the same data dir and ports;
    /// returns the window in which it was down.
    fn restart_hub(&mut self, dir: &Path) -> Down {
        let from = Instant::now();
        if let Some(hub) = self.hub.take() {
            hub.process.kill9();
        }
        let hub = start_hub_opts(dir, self.block, &hub_options(&self.dns_config));
        let until = Instant::now();
        self.hub = Some(hub);
        Down { from, until }
    }

    fn dns(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, self.block, 1], DNS_PORT))
    }

    fn policy_yaml(&self) -> &'static str {
        match self.policy {
            Policy::ServeAll => "ServeAll",
            Policy::NoData => "NoData",
        }
    }

    /// Applies a Geo FederatedIngress `name` (dnsName `name.fedingress.test`) with one
    /// TCP rule per port and this federation's `whenAllUnhealthy`. The failback delay is
    /// short: whether a cluster that starts serving late (scenario c) waits for it is the
    /// hub's call, and either way the test stays short.
    fn apply_ingress(&self, dir: &Path, name: &str, ports: &[u16], ttl: u32, labels: &str) {
        let rules: String = ports
            .iter()
            .map(|port| {
                format!(
                    "  - protocol: TCP\n    port: {port}\n    backend: {{service: echo, port: 9000}}\n"
                )
            })
            .collect();
        let text = format!(
            "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: {name}\n{labels}spec:\n  rules:\n{rules}  traffic:\n    dnsName: {name}.fedingress.test\n    ttl: {ttl}\n    strategy: {{type: Geo}}\n    whenAllUnhealthy: {}\n    failbackDelaySeconds: 1\n",
            self.policy_yaml()
        );
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        self.k.ok(&["apply", "-f", &path.display().to_string()]);
    }

    /// Waits until the ingress's latest generation is observed, Applied and healthy on
    /// every cluster, Ready and DNSReady, and every cluster accepts TCP on `ports`.
    fn wait_settled(&self, ingress: &str, ports: &[u16]) {
        self.wait_serving(ingress, &[0, 1, 2], ports);
        eventually(WAIT, &format!("{ingress} settled"), || {
            let object = get_json(&self.k, &["federatedingress", ingress]);
            let generation = &object["metadata"]["generation"];
            if object["status"]["observedGeneration"] != *generation {
                return Err(format!("generation {generation}: {}", object["status"]));
            }
            for spec in &self.specs {
                let entry = cluster_entry(&object, &spec.name);
                if entry["phase"] != "Applied" || entry["healthy"] != true {
                    return Err(format!("{}: {entry}", spec.name));
                }
            }
            for type_ in ["Ready", "DNSReady"] {
                let (status, reason, message) = condition(&object, type_);
                if status != "True" {
                    return Err(format!("{type_} {status} {reason} {message}"));
                }
            }
            Ok(())
        });
    }

    /// Waits until the ingress is Applied and healthy on the clusters with these indexes
    /// and they accept TCP on `ports`.
    fn wait_serving(&self, ingress: &str, clusters: &[usize], ports: &[u16]) {
        eventually(WAIT, &format!("{ingress} serving on {clusters:?}"), || {
            let object = get_json(&self.k, &["federatedingress", ingress]);
            for spec in clusters.iter().map(|i| &self.specs[*i]) {
                let entry = cluster_entry(&object, &spec.name);
                if entry["phase"] != "Applied" || entry["healthy"] != true {
                    return Err(format!("{}: {entry}", spec.name));
                }
                for port in ports {
                    let at = SocketAddr::new(spec.bind, *port);
                    TcpStream::connect_timeout(&at, Duration::from_secs(1))
                        .map_err(|e| format!("{at}: {e}"))?;
                }
            }
            Ok(())
        });
    }

    /// One target per region for `name`, whose steady state is the region's cluster.
    fn targets(&self, name: &str, created_on_port: Option<u16>) -> Vec<Target> {
        REGIONS
            .iter()
            .zip(&self.specs)
            .map(|(&(label, _, _, _, subnet), spec)| {
                let name = format!("{name}.fedingress.test");
                let subnet = Ipv4Addr::from(subnet);
                let steady: Vec<IpAddr> = vec![spec.bind];
                match created_on_port {
                    None => Target::steady(label, &name, subnet, steady),
                    Some(port) => Target::created(label, &name, subnet, steady, port),
                }
            })
            .collect()
    }
}

/// Keeps probing for a while after the scenario settled, stops the prober and fails
/// with the judgement's report when any answer deviated.
fn finish(scenario: &str, prober: Prober, since: Instant, down: &[Down]) {
    let settled = Instant::now();
    prober.wait_samples(settled, SETTLED_SAMPLES, WAIT);
    let targets = prober.targets.clone();
    let started = prober.started;
    let samples: Vec<Sample> = prober.stop();
    let judgement = judge(&targets, started, &samples, since, down, 8);
    eprintln!("--- {scenario}\n{}", judgement.report);
    assert!(
        judgement.passed(),
        "{scenario}: {} answers differ from the steady state\n{}",
        judgement.deviations,
        judgement.report
    );
}

// ---------------------------------------------------------------------------
// (a) spec edits that do not change routing

fn spec_edits(block: u8, policy: Policy) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let f = Federation::start(dir, block, policy);
    let prober = Prober::start(f.dns(), f.targets("geo", None), PROBE_INTERVAL);
    let since = prober.wait_steady(WAIT, false);

    // Six TTL changes in a row: six new generations, routing unchanged.
    for ttl in 6..=11 {
        f.k.ok(&[
            "patch",
            "federatedingress",
            "geo",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec":{{"traffic":{{"ttl":{ttl}}}}}}}"#),
        ]);
    }
    // A label (metadata only) and a second TCP port (a new generation that every
    // agent must apply; the addresses stay the same).
    f.k.ok(&["label", "federatedingress", "geo", "continuity=edited"]);
    f.apply_ingress(
        dir,
        "geo",
        &[PORT, ADDED_PORT],
        11,
        "  labels: {continuity: edited}\n",
    );
    f.wait_settled("geo", &[PORT, ADDED_PORT]);
    finish(&format!("spec edits under {policy:?}"), prober, since, &[]);
}

#[test]
fn spec_edits_keep_answers_steady_serve_all() {
    spec_edits(51, Policy::ServeAll);
}

#[test]
fn spec_edits_keep_answers_steady_no_data() {
    spec_edits(52, Policy::NoData);
}

// ---------------------------------------------------------------------------
// (b) kill -9 of the apiserver, restart on the same data dir and ports

fn hub_restart(block: u8, policy: Policy) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut f = Federation::start(dir, block, policy);
    let prober = Prober::start(f.dns(), f.targets("geo", None), PROBE_INTERVAL);
    let since = prober.wait_steady(WAIT, false);

    // The agents are frozen across the restart, as if their reconnect backoff (up to
    // 5 s) were long: the restarted hub must answer from its persisted routing state
    // alone, from its first packet, and keep doing so until they are back.
    for agent in &f.agents {
        agent.pause();
    }
    let down = f.restart_hub(dir);
    prober.wait_samples(Instant::now(), SETTLED_SAMPLES, WAIT);
    for agent in &f.agents {
        agent.resume();
    }

    // They reconnect (well within their lease) and report again. Proof that every
    // one is back: a new generation (a routing-neutral TTL change) is applied
    // everywhere.
    f.k.ok(&[
        "patch",
        "federatedingress",
        "geo",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"traffic":{"ttl":6}}}"#,
    ]);
    f.wait_settled("geo", &[PORT]);
    finish(
        &format!("hub restart under {policy:?}"),
        prober,
        since,
        &[down],
    );
}

#[test]
fn hub_restart_keeps_answers_steady_serve_all() {
    hub_restart(53, Policy::ServeAll);
}

#[test]
fn hub_restart_keeps_answers_steady_no_data() {
    hub_restart(54, Policy::NoData);
}

// ---------------------------------------------------------------------------
// (c) a second ingress created while probing

fn second_ingress(block: u8, policy: Policy) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let f = Federation::start(dir, block, policy);
    let mut targets = f.targets("geo", None);
    targets.extend(f.targets("second", Some(SECOND_PORT)));
    let prober = Prober::start(f.dns(), targets, PROBE_INTERVAL);
    let since = prober.wait_steady(WAIT, false);

    // c3's agent is frozen while the second ingress is created, so c3 serves it only
    // late (its listener for `geo` stays open; its lease is far longer than the freeze):
    // the window in which a hub could answer a cluster that does not serve yet is wide,
    // not a race against the agents.
    f.agents[2].pause();
    f.apply_ingress(dir, "second", &[SECOND_PORT], 5, "");
    f.wait_serving("second", &[0, 1], &[SECOND_PORT]);
    prober.wait_samples(Instant::now(), SETTLED_SAMPLES, WAIT);
    f.agents[2].resume();
    f.wait_settled("second", &[SECOND_PORT]);
    prober.wait_steady(WAIT, true);
    finish(
        &format!("second ingress under {policy:?}"),
        prober,
        since,
        &[],
    );
}

#[test]
fn second_ingress_is_answered_only_once_served_serve_all() {
    second_ingress(55, Policy::ServeAll);
}

#[test]
fn second_ingress_is_answered_only_once_served_no_data() {
    second_ingress(56, Policy::NoData);
}
