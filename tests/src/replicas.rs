//! Federation-apiserver replicas on etcd as real processes, for the HA tests
//! (`tests/tests/e2e/ha.rs`, `faults.rs`): a replica's process and addresses, a
//! federation of replicas with two standalone agents that know every replica, and the
//! checks that every live replica answers alike.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fedingress_testsupport::dns::dig_short;

use crate::dnsprobe::{Prober, Target, judge};
use crate::echo::Echo;
use crate::federation::{ClusterSpec, agent_config, create_cluster, start_agent};
use crate::{Kubectl, Process, binary, eventually, write_kubeconfig};

/// How long the HA tests wait for anything.
pub const WAIT: Duration = Duration::from_secs(30);
/// The name the federation's ingress is answered under.
pub const NAME: &str = "echo.ha.test";

/// The replicas' config: dev mode, fast agent heartbeats, zone `ha.test` served by
/// ns1-ns3 on the replicas' addresses.
pub fn config(dir: &Path, block: u8) -> PathBuf {
    let path = dir.join("apiserver.yaml");
    let nameservers: String = (1..=3)
        .map(|i| format!("    - {{name: ns{i}.ha.test, addresses: [127.0.{block}.{i}]}}\n"))
        .collect();
    let text = format!(
        "dev: true\nagents:\n  heartbeatIntervalMs: 300\n  leaseMs: 3000\ndns:\n  zones:\n  - name: ha.test\n    nameservers:\n{nameservers}    soa: {{mname: ns1.ha.test, rname: hostmaster.ha.test, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}\n  locations:\n    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// One replica: its process (`None` once killed) and addresses.
pub struct Replica {
    pub name: String,
    pub process: Option<Process>,
    pub api: String,
    pub agent: String,
    pub dns: SocketAddr,
    pub prober: Option<Prober>,
    /// Its stderr: the log.
    pub log: PathBuf,
}

impl Replica {
    /// Replica `r{i}` on 127.0.`block`.`i`, with a replica lease of `lease` seconds.
    pub fn start(dir: &Path, block: u8, i: u8, etcd: &str, lease: u64) -> Self {
        let ip = format!("127.0.{block}.{i}");
        let mut command = Command::new(binary("federation-apiserver"));
        command
            .arg("--config")
            .arg(config(dir, block))
            .args(["--etcd-servers", etcd, "--etcd-prefix", "/ha"])
            .args(["--replica-name", &format!("r{i}")])
            .args(["--leader-elect-lease-duration", &lease.to_string()])
            .args(["--listen", &format!("{ip}:16443")])
            .args(["--agent-listen", &format!("{ip}:16444")])
            .args(["--dns-listen", &format!("{ip}:5353")])
            .arg("--data-dir")
            .arg(dir.join(format!("unused-{i}")));
        let log = dir.join(format!("r{i}.log"));
        let process =
            Process::start_logging_to(command, &format!("replica r{i}"), WAIT, &log).unwrap();
        Replica {
            name: format!("r{i}"),
            api: format!("http://{}", process.addr("api")),
            agent: format!("http://{}", process.addr("agent")),
            dns: process.addr("dns").parse().unwrap(),
            process: Some(process),
            prober: None,
            log,
        }
    }

    /// The log's lines that contain `text`.
    pub fn logged(&self, text: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(text))
            .map(str::to_string)
            .collect()
    }

    pub fn alive(&self) -> bool {
        self.process.is_some()
    }

    /// A gauge or counter of this replica's `/metrics` (`None` when unreachable).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "2", &format!("{}/metrics", self.api)])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    pub fn is_leader(&self) -> bool {
        self.metric("fedingress_controller_leader") == Some(1.0)
    }

    pub fn agents(&self) -> usize {
        self.metric("fedingress_agents_connected").unwrap_or(0.0) as usize
    }

    pub fn dig(&self, args: &[&str]) -> Vec<String> {
        let mut lines = dig_short(self.dns, args);
        lines.sort();
        lines
    }

    pub fn serial(&self) -> Option<String> {
        self.dig(&["SOA", "ha.test"])
            .first()
            .and_then(|soa| soa.split_whitespace().nth(2).map(str::to_string))
    }

    pub fn kubectl(&self, dir: &Path) -> Kubectl {
        let path = dir.join(format!("kubeconfig-{}", self.name));
        write_kubeconfig(&path, &self.api, None, None);
        Kubectl::new(None, path)
    }

    pub fn kill9(&mut self) -> Instant {
        if let Some(prober) = self.prober.take() {
            prober.stop();
        }
        self.process.take().unwrap().kill9();
        Instant::now()
    }
}

/// Every live replica answers `steady` for the name, with one SOA serial among them.
pub fn converged(replicas: &[Replica], steady: &[String]) -> Result<String, String> {
    let mut serials = BTreeSet::new();
    for replica in replicas.iter().filter(|r| r.alive()) {
        let answer = replica.dig(&["A", NAME]);
        if answer != steady {
            return Err(format!("{} answers {answer:?}", replica.name));
        }
        serials.insert(replica.serial().unwrap_or_default());
    }
    match serials.len() {
        1 => Ok(serials.into_iter().next().unwrap()),
        _ => Err(format!("serials differ: {serials:?}")),
    }
}

/// The one live replica that says it leads.
pub fn leader(replicas: &[Replica]) -> Result<usize, String> {
    let leaders: Vec<usize> = (0..replicas.len())
        .filter(|&i| replicas[i].alive() && replicas[i].is_leader())
        .collect();
    match leaders.as_slice() {
        [one] => Ok(*one),
        other => Err(format!("leaders: {other:?}")),
    }
}

/// Replicas, two clusters with agents that know every replica, and a RoundRobin
/// ingress answered with both clusters' addresses.
pub struct Federation {
    pub replicas: Vec<Replica>,
    pub _agents: Vec<Process>,
    pub echoes: Vec<Option<Echo>>,
    pub specs: [ClusterSpec; 2],
    pub steady_ips: Vec<IpAddr>,
    pub steady: Vec<String>,
}

/// `replicas` replicas on `etcd` (block 127.0.`block`.x, replica lease `lease` s), two clusters with agents
/// that know every replica, and a RoundRobin ingress [`NAME`] answered with both
/// clusters' addresses.
pub fn federation(dir: &Path, block: u8, replicas: u8, etcd: &str, lease: u64) -> Federation {
    let replicas: Vec<Replica> = (1..=replicas)
        .map(|i| Replica::start(dir, block, i, etcd, lease))
        .collect();
    eventually(WAIT, "one elected leader", || leader(&replicas));
    let k = replicas[0].kubectl(dir);
    k.create_namespace("load");
    let gateways = replicas
        .iter()
        .map(|r| r.agent.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let mut echoes = Vec::new();
    let mut agents = Vec::new();
    let specs = [
        ClusterSpec::numbered(block, 1, "europe-west1", 50.4, 3.8),
        ClusterSpec::numbered(block, 2, "us-east1", 39.0, -77.5),
    ];
    for spec in &specs {
        echoes.push(Some(Echo::start(spec.backend).unwrap()));
        create_cluster(&k, dir, spec);
        let token = crate::federation::issue_token(&replicas[0].api, &spec.name)
            .unwrap()
            .1;
        let config = agent_config(dir, &replicas[0].agent, spec, &token);
        let text = std::fs::read_to_string(&config).unwrap().replace(
            &format!("  address: {}\n", replicas[0].agent),
            &format!("  addresses: [{gateways}]\n"),
        );
        std::fs::write(&config, text).unwrap();
        agents.push(start_agent(&config, &spec.name));
    }
    let ingress = dir.join("echo.yaml");
    std::fs::write(
        &ingress,
        format!("apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: echo\nspec:\n  rules:\n  - protocol: TCP\n    port: 7000\n    backend: {{service: echo, port: 9000}}\n  traffic:\n    dnsName: {NAME}\n    ttl: 5\n    strategy: {{type: RoundRobin}}\n"),
    )
    .unwrap();
    k.ok(&["apply", "-f", &ingress.display().to_string()]);
    let steady_ips: Vec<IpAddr> = specs.iter().map(|s| s.bind).collect();
    let mut steady: Vec<String> = steady_ips.iter().map(ToString::to_string).collect();
    steady.sort();
    Federation {
        replicas,
        _agents: agents,
        echoes,
        specs,
        steady_ips,
        steady,
    }
}

impl Federation {
    /// Starts a prober on every live replica.
    pub fn probe(&mut self) {
        for replica in self.replicas.iter_mut().filter(|r| r.alive()) {
            replica.prober = Some(Prober::start(
                replica.dns,
                vec![Target::steady(
                    "any",
                    NAME,
                    "10.1.0.0".parse().unwrap(),
                    self.steady_ips.clone(),
                )],
                Duration::from_millis(10),
            ));
        }
    }

    /// Stops the probers; asserts no replica answered anything but the steady state.
    pub fn judge(&mut self, since: Instant) {
        for replica in &mut self.replicas {
            let Some(prober) = replica.prober.take() else {
                continue;
            };
            let targets = prober.targets.clone();
            let started = prober.started;
            let samples = prober.stop();
            let verdict = judge(&targets, started, &samples, since, &[], 5);
            eprintln!("{}: {}", replica.name, verdict.report);
            assert!(
                verdict.passed(),
                "{} deviated:\n{}",
                replica.name,
                verdict.report
            );
        }
    }
}
