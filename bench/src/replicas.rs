//! Several release `federation-apiserver` replicas on one etcd, as the issue runs them
//! (each serving the REST API, the agent gateway and, with a zone, DNS), or one
//! replica on its embedded redb file: the peer the replicas are compared with.
//!
//! [`Replicas::start`] starts etcd when the store is etcd ([`crate::etcd::Etcd`]) and
//! then replica `rN` on 127.0.<block>.N with fixed ports ([`API_PORT`], [`AGENT_PORT`],
//! [`DNS_PORT`]), so a replica killed with [`Replicas::kill9`] comes back on the same
//! addresses ([`Replicas::restart`]) and agents configured with every gateway find it.
//! Every replica reads the same config file; a `dns:` section, when asked for, lists
//! every replica as a nameserver of the zone. [`Replicas::stop`] stops the replicas by
//! PID (SIGTERM), then etcd (SIGKILL, by PID).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::etcd::{Etcd, StoreKind, etcd_binary};
use crate::{HubTiming, Proc};

pub const API_PORT: u16 = 16443;
pub const AGENT_PORT: u16 = 16444;
pub const DNS_PORT: u16 = 15353;

/// The flags of a bench that runs the hub as replicas.
#[derive(clap::Args, Clone, Debug)]
pub struct ReplicaFlags {
    /// federation-apiserver replicas (more than one: on etcd).
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Store of the replicas (default: redb for one replica, etcd3 for several).
    #[arg(long, value_enum)]
    pub store: Option<StoreKind>,
    /// `--leader-elect-lease-duration` of the replicas, seconds (the apiserver's default
    /// is 3).
    #[arg(long, default_value_t = 3)]
    pub leader_elect_lease_duration: u64,
    /// etcd binary (default: `FEDINGRESS_ETCD`, else `etcd`).
    #[arg(long)]
    pub etcd: Option<PathBuf>,
}

impl ReplicaFlags {
    /// `--store`, else redb for one replica and etcd3 for several.
    pub fn store(&self) -> StoreKind {
        match self.store {
            Some(store) => store,
            None if self.replicas > 1 => StoreKind::Etcd3,
            None => StoreKind::Redb,
        }
    }

    /// What to run: with `compare`, one replica on redb and then `--replicas` (at least
    /// 2; default 3) on `--store` (default etcd3); else `--replicas` on [`Self::store`].
    pub fn setups(&self, compare: bool) -> Vec<(usize, StoreKind)> {
        if compare {
            vec![
                (1, StoreKind::Redb),
                (self.replicas.max(3), self.store.unwrap_or(StoreKind::Etcd3)),
            ]
        } else {
            vec![(self.replicas, self.store())]
        }
    }

    /// Settings for `count` replicas on `store` (the flags' lease and etcd binary),
    /// logging warnings.
    pub fn settings<'a>(
        &self,
        count: usize,
        store: StoreKind,
        block: u8,
        timing: HubTiming,
        dns: Option<(&'a str, &'a str)>,
    ) -> ReplicaSettings<'a> {
        ReplicaSettings {
            count,
            store,
            etcd: etcd_binary(self.etcd.clone()),
            lease_seconds: self.leader_elect_lease_duration,
            block,
            timing,
            dns,
            log: "warn",
        }
    }
}

/// What to start.
pub struct ReplicaSettings<'a> {
    /// Replicas (more than one needs etcd).
    pub count: usize,
    pub store: StoreKind,
    /// The etcd binary (see [`crate::etcd::etcd_binary`]).
    pub etcd: PathBuf,
    /// `--leader-elect-lease-duration`, seconds (etcd only).
    pub lease_seconds: u64,
    /// Replica `rN` listens on 127.0.<block>.N.
    pub block: u8,
    pub timing: HubTiming,
    /// With a zone name: DNS on every replica (`--dns-listen`), the zone's nameservers
    /// `ns1…nsN.<zone>` at the replicas' addresses, and this text (e.g. `locations:`,
    /// indented by two spaces) appended to the `dns:` section.
    pub dns: Option<(&'a str, &'a str)>,
    /// `FEDINGRESS_LOG` of the replicas.
    pub log: &'a str,
}

/// One replica; `proc` is `None` while it is killed.
pub struct Replica {
    pub name: String,
    pub ip: Ipv4Addr,
    /// `http://ip:port` of the REST API.
    pub api: String,
    /// `host:port` of the agent gateway.
    pub agent: String,
    pub dns: Option<SocketAddr>,
    pub proc: Option<Proc>,
}

impl Replica {
    pub fn alive(&self) -> bool {
        self.proc.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid)
    }
}

/// The running replicas and their etcd; see the module docs.
pub struct Replicas {
    pub replicas: Vec<Replica>,
    pub etcd: Option<Etcd>,
    pub store: StoreKind,
    binary: PathBuf,
    lease_seconds: u64,
    log: String,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

impl Replicas {
    pub async fn start(binary: &Path, settings: &ReplicaSettings<'_>) -> anyhow::Result<Self> {
        if settings.count == 0 || settings.count > 250 {
            bail!("1 to 250 replicas");
        }
        if settings.count > 1 && settings.store == StoreKind::Redb {
            bail!("several replicas share an etcd: use --store etcd or etcd3");
        }
        let etcd = match settings.store {
            StoreKind::Redb => None,
            kind => Some(Etcd::start(&settings.etcd, kind.members()).await?),
        };
        let dir = tempfile::Builder::new()
            .prefix("fedingress-bench-replicas-")
            .tempdir()?;
        let ips: Vec<Ipv4Addr> = (1..=settings.count)
            .map(|i| Ipv4Addr::new(127, 0, settings.block, i as u8))
            .collect();
        let mut config = format!(
            "agents:\n  heartbeatIntervalMs: {}\n  leaseMs: {}\n",
            settings.timing.heartbeat_ms, settings.timing.lease_ms
        );
        if let Some((zone, extra)) = settings.dns {
            let nameservers: String = ips
                .iter()
                .enumerate()
                .map(|(i, ip)| format!("    - {{name: ns{}.{zone}, addresses: [{ip}]}}\n", i + 1))
                .collect();
            config.push_str(&format!(
                "dns:\n  zones:\n  - name: {zone}\n    nameservers:\n{nameservers}    soa: {{mname: ns1.{zone}, rname: hostmaster.{zone}, refresh: 3600, retry: 600, expire: 86400, minimum: 30}}\n{extra}"
            ));
        }
        std::fs::write(dir.path().join("apiserver.yaml"), config)?;
        let mut replicas = Self {
            replicas: ips
                .iter()
                .enumerate()
                .map(|(i, ip)| Replica {
                    name: format!("r{}", i + 1),
                    ip: *ip,
                    api: format!("http://{ip}:{API_PORT}"),
                    agent: format!("{ip}:{AGENT_PORT}"),
                    dns: settings
                        .dns
                        .map(|_| SocketAddr::new((*ip).into(), DNS_PORT)),
                    proc: None,
                })
                .collect(),
            etcd,
            store: settings.store,
            binary: binary.to_path_buf(),
            lease_seconds: settings.lease_seconds,
            log: settings.log.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
            dir,
        };
        for i in 0..replicas.replicas.len() {
            replicas.restart(i).await?;
        }
        if replicas.etcd.is_some() {
            replicas.wait_leader(Duration::from_secs(30)).await?;
        }
        Ok(replicas)
    }

    /// "1 replica on redb", "3 replicas on etcd (3 members)".
    pub fn label(&self) -> String {
        let n = self.replicas.len();
        format!(
            "{n} replica{} on {}",
            if n == 1 { "" } else { "s" },
            self.store.label()
        )
    }

    /// Starts replica `i` (again, on the same addresses and store) and waits for its
    /// READY line.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let replica = &self.replicas[i];
        if replica.alive() {
            bail!("{} is running", replica.name);
        }
        let mut command = Command::new(&self.binary);
        command
            .arg("--config")
            .arg(self.dir.path().join("apiserver.yaml"))
            .arg("--dev")
            .args(["--listen", &format!("{}:{API_PORT}", replica.ip)])
            .args(["--agent-listen", &replica.agent])
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("data-{}", replica.name)))
            .env("FEDINGRESS_LOG", &self.log);
        if let Some(dns) = replica.dns {
            command.args(["--dns-listen", &dns.to_string()]);
        }
        if let Some(etcd) = &self.etcd {
            command
                .args(["--etcd-servers", &etcd.servers()])
                .args(["--replica-name", &replica.name])
                .args([
                    "--leader-elect-lease-duration",
                    &self.lease_seconds.to_string(),
                ]);
        }
        let proc = Proc::start_ready(command, &format!("replica {}", replica.name)).await?;
        self.replicas[i].proc = Some(proc);
        Ok(())
    }

    /// SIGKILL to replica `i`'s PID; the instant it was sent.
    pub async fn kill9(&mut self, i: usize) -> anyhow::Result<Instant> {
        let proc = self.replicas[i]
            .proc
            .take()
            .with_context(|| format!("{} is not running", self.replicas[i].name))?;
        let at = Instant::now();
        proc.kill9().await;
        Ok(at)
    }

    /// Indices of the running replicas.
    pub fn live(&self) -> Vec<usize> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].alive())
            .collect()
    }

    /// Every replica's agent gateway (`host:port`), for the agents' `hub.addresses`.
    pub fn gateways(&self) -> Vec<String> {
        self.replicas.iter().map(|r| r.agent.clone()).collect()
    }

    /// PIDs of the running replicas.
    pub fn pids(&self) -> Vec<u32> {
        self.replicas.iter().filter_map(Replica::pid).collect()
    }

    /// A gauge or counter without labels from replica `i`'s `/metrics` (`None` when it
    /// does not answer).
    pub async fn metric(&self, i: usize, name: &str) -> Option<f64> {
        let text = self
            .http
            .get(format!("{}/metrics", self.replicas[i].api))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    /// The one running replica whose `fedingress_controller_leader` is 1 (`None` while
    /// there is none, or more than one says so).
    pub async fn leader(&self) -> Option<usize> {
        let mut leaders = Vec::new();
        for i in self.live() {
            if self.metric(i, "fedingress_controller_leader").await == Some(1.0) {
                leaders.push(i);
            }
        }
        match leaders.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    /// Polls every 10 ms until exactly one replica leads.
    pub async fn wait_leader(&self, timeout: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!("no single leader among the replicas within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Agent sessions held by the running replicas (`fedingress_agents_connected`).
    pub async fn agents_connected(&self) -> usize {
        let mut total = 0.0;
        for i in self.live() {
            total += self
                .metric(i, "fedingress_agents_connected")
                .await
                .unwrap_or_default();
        }
        total as usize
    }

    /// SIGTERM to every running replica (by PID), then etcd goes (killed by PID).
    pub async fn stop(mut self) {
        for replica in &mut self.replicas {
            if let Some(proc) = replica.proc.take() {
                proc.stop().await;
            }
        }
        drop(self.etcd.take());
    }
}
