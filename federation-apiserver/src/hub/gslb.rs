//! The hub's GSLB step: turns placed, health-checked FederatedIngresses into a DNS
//! snapshot for the embedded server, keeps the failover memory (delayed failback),
//! and says which clusters entered or left an ingress's answers (the controller
//! records those as Events).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fedingress_api::ingress::StrategyType;
use fedingress_dns::location::{LocationEntry, Locator, RttRow, RttTable};
use fedingress_dns::routing::{self, ClientInfo, FailoverState};
use fedingress_dns::server::DnsServer;
use fedingress_dns::zone::{Snapshot, ZoneConfig};
use fedingress_dns::{Location, RoutedIngress};

use crate::config::DnsConfig;

/// A cluster entering or leaving an ingress's answers.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerChange {
    pub ingress: String,
    pub cluster: String,
    pub joined: bool,
    pub detail: String,
}

/// What one GSLB step produced for the controller.
#[derive(Default)]
pub struct GslbStep {
    /// Problems per ingress (`namespace/name`): DNSReady=False with these.
    pub problems: HashMap<String, Vec<String>>,
    pub changes: Vec<AnswerChange>,
    /// When a pending failback becomes due.
    pub wake_in: Option<Duration>,
}

pub struct Gslb {
    zones: Vec<ZoneConfig>,
    locator: Arc<Locator>,
    server: Arc<DnsServer>,
    failover: HashMap<String, FailoverState>,
    /// Per ingress: clusters in any answer, with why.
    answers: HashMap<String, BTreeMap<String, String>>,
    last_input: Option<Vec<RoutedIngress>>,
    last_problems: HashMap<String, Vec<String>>,
    serial: u32,
}

/// The DNS server, bound and ready to serve.
pub struct Bound {
    pub gslb: Gslb,
    pub server: Arc<DnsServer>,
    pub udp: tokio::net::UdpSocket,
    pub tcp: tokio::net::TcpListener,
    pub address: SocketAddr,
}

impl Gslb {
    /// Builds the locator from config and binds UDP and TCP on one port.
    pub async fn bind(config: &DnsConfig, listen: SocketAddr) -> anyhow::Result<Bound> {
        let table = config
            .locations
            .table
            .iter()
            .map(|e| LocationEntry {
                cidr: e.cidr,
                location: Location {
                    region: e.region.clone(),
                    latitude: e.latitude,
                    longitude: e.longitude,
                },
            })
            .collect();
        let default = &config.locations.default;
        let default = Location {
            region: default.region.clone(),
            latitude: default.latitude,
            longitude: default.longitude,
        };
        let rtt = RttTable::new(
            config
                .latency
                .iter()
                .map(|row| RttRow {
                    cidr: row.cidr,
                    rtt_ms: row.rtt_ms.clone(),
                })
                .collect(),
        )
        .context("dns.latency")?;
        let locator = Arc::new(
            Locator::new(table, default, config.mmdb.as_deref())
                .context("dns.locations")?
                .with_rtt(rtt),
        );
        let zones = config.zones.clone();
        fedingress_dns::zone::validate_zones(&zones).context("dns.zones")?;
        let (snapshot, _) = Snapshot::build(&zones, 1, &[], locator.clone());
        let server = Arc::new(DnsServer::new(Arc::new(snapshot)));
        let (udp, tcp) = bind_pair(listen).await?;
        let address = udp.local_addr().context("reading the DNS address")?;
        Ok(Bound {
            gslb: Self {
                zones,
                locator,
                server: server.clone(),
                failover: HashMap::new(),
                answers: HashMap::new(),
                last_input: None,
                last_problems: HashMap::new(),
                serial: 1,
            },
            server,
            udp,
            tcp,
            address,
        })
    }

    /// One step: failover memory, snapshot (rebuilt only when its input changed),
    /// answer changes. `routed` is in priority order (oldest ingress first).
    pub fn step(&mut self, mut routed: Vec<RoutedIngress>, revision: i64, now_ms: u64) -> GslbStep {
        let mut wake_ms: Option<u64> = None;
        let mut failover = HashMap::new();
        for ingress in &mut routed {
            if ingress.traffic.strategy.type_ == StrategyType::Failover {
                let previous = self
                    .failover
                    .get(&ingress.ingress)
                    .cloned()
                    .unwrap_or_default();
                let next =
                    routing::failover_step(&ingress.traffic, &ingress.clusters, &previous, now_ms);
                if let Some(at) = routing::next_failover_change_ms(&ingress.traffic, &next) {
                    wake_ms = Some(wake_ms.map_or(at, |w| w.min(at)));
                }
                ingress.failover = next.clone();
                failover.insert(ingress.ingress.clone(), next);
            }
        }
        self.failover = failover;
        let wake_in = wake_ms.map(|at| Duration::from_millis(at.saturating_sub(now_ms)));
        if self.last_input.as_ref() == Some(&routed) {
            return GslbStep {
                problems: self.last_problems.clone(),
                changes: Vec::new(),
                wake_in,
            };
        }
        self.serial = self
            .serial
            .wrapping_add(1)
            .max(u32::try_from(revision.rem_euclid(1 << 31)).unwrap_or(0));
        let (snapshot, problems) =
            Snapshot::build(&self.zones, self.serial, &routed, self.locator.clone());
        self.server.swap(Arc::new(snapshot));
        let mut by_ingress: HashMap<String, Vec<String>> = HashMap::new();
        for problem in problems {
            by_ingress
                .entry(problem.ingress.clone())
                .or_default()
                .push(problem.message.clone());
        }
        let first = self.last_input.is_none();
        let mut changes = Vec::new();
        let mut answers = HashMap::new();
        for ingress in &routed {
            let now_in = self.answering(ingress);
            let before = self.answers.get(&ingress.ingress);
            if !first {
                let empty = BTreeMap::new();
                let before = before.unwrap_or(&empty);
                for (cluster, detail) in &now_in {
                    if !before.contains_key(cluster) {
                        changes.push(AnswerChange {
                            ingress: ingress.ingress.clone(),
                            cluster: cluster.clone(),
                            joined: true,
                            detail: detail.clone(),
                        });
                    }
                }
                for cluster in before.keys().filter(|c| !now_in.contains_key(*c)) {
                    let why = self.why_not(ingress, cluster);
                    changes.push(AnswerChange {
                        ingress: ingress.ingress.clone(),
                        cluster: cluster.clone(),
                        joined: false,
                        detail: why,
                    });
                }
            }
            answers.insert(ingress.ingress.clone(), now_in);
        }
        self.answers = answers;
        self.last_input = Some(routed);
        self.last_problems = by_ingress.clone();
        GslbStep {
            problems: by_ingress,
            changes,
            wake_in,
        }
    }

    /// The snapshot being served.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.server.snapshot()
    }

    /// Clusters in the answers of any client location bucket, with a reason.
    fn answering(&self, ingress: &RoutedIngress) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for located in self.locator.buckets() {
            let client = ClientInfo::from_located(None, &located);
            let decision = routing::decide(
                &ingress.traffic,
                &ingress.clusters,
                &client,
                &ingress.failover,
            );
            for cluster in decision.answer.clusters() {
                let detail = decision
                    .reasons
                    .iter()
                    .find(|r| r.cluster == cluster)
                    .map(|r| r.detail.clone())
                    .unwrap_or_default();
                out.entry(cluster.to_string()).or_insert(detail);
            }
        }
        out
    }

    /// Why a cluster is in no answer (from the default location's decision).
    fn why_not(&self, ingress: &RoutedIngress, cluster: &str) -> String {
        if !ingress.clusters.iter().any(|c| c.name == cluster) {
            return "no longer placed".into();
        }
        let located = self.locator.locate(std::net::IpAddr::from([0, 0, 0, 0]));
        let client = ClientInfo::from_located(None, &located);
        let decision = routing::decide(
            &ingress.traffic,
            &ingress.clusters,
            &client,
            &ingress.failover,
        );
        decision
            .reasons
            .iter()
            .find(|r| r.cluster == cluster)
            .map(|r| r.detail.clone())
            .unwrap_or_default()
    }
}

/// Binds UDP and TCP on the same address and port (port 0: a free port for both).
async fn bind_pair(
    listen: SocketAddr,
) -> anyhow::Result<(tokio::net::UdpSocket, tokio::net::TcpListener)> {
    for _ in 0..20 {
        let udp = tokio::net::UdpSocket::bind(listen)
            .await
            .with_context(|| format!("binding DNS (UDP) on {listen}"))?;
        let address = udp.local_addr().context("reading the DNS address")?;
        match tokio::net::TcpListener::bind(address).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if listen.port() != 0 => {
                return Err(e).with_context(|| format!("binding DNS (TCP) on {address}"));
            }
            Err(_) => continue,
        }
    }
    anyhow::bail!("no port free for both UDP and TCP DNS on {}", listen.ip())
}
