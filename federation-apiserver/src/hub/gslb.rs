//! The hub's GSLB step: turns the routed FederatedIngresses (serving clusters, routing
//! health, failover memory: decided by the controller) into a DNS snapshot for the
//! embedded server, and says which clusters entered or left an ingress's answers (the
//! controller records those as Events).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use fedingress_dns::location::{LocationEntry, Locator, RttRow, RttTable};
use fedingress_dns::routing::{self, ClientInfo};
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
    /// Problems per changed ingress (`namespace/name`): DNSReady=False with these.
    pub problems: HashMap<String, Vec<String>>,
    pub changes: Vec<AnswerChange>,
    /// How long building the snapshot took (`None`: nothing was rebuilt).
    pub build_time: Option<Duration>,
}

pub struct Gslb {
    zones: Vec<ZoneConfig>,
    locator: Arc<Locator>,
    server: Arc<DnsServer>,
    /// Per ingress: clusters in any answer, with why.
    answers: HashMap<String, BTreeMap<String, String>>,
    serial: u32,
}

/// The DNS server, bound (not yet serving).
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
        let server = Arc::new(DnsServer::with_config(
            Arc::new(snapshot),
            config.server_config(),
        ));
        let (udp, tcp) = fedingress_dns::server::bind_udp_and_tcp(listen).await?;
        let address = udp.local_addr().context("reading the DNS address")?;
        Ok(Bound {
            gslb: Self {
                zones,
                locator,
                server: server.clone(),
                answers: HashMap::new(),
                serial: 1,
            },
            server,
            udp,
            tcp,
            address,
        })
    }

    /// Rebuilds the snapshot from `routed` (every served ingress, in priority order:
    /// oldest first) with SOA `serial` and says which clusters entered or left the
    /// answers of the `changed` ingresses (`namespace/name`). `first`: no events (a
    /// start, not a change).
    pub fn step(
        &mut self,
        routed: &[&RoutedIngress],
        changed: &BTreeSet<String>,
        serial: u32,
        first: bool,
    ) -> GslbStep {
        let started = Instant::now();
        self.serial = serial;
        let owned: Vec<RoutedIngress> = routed.iter().map(|r| (*r).clone()).collect();
        // Names whose routed ingress did not change keep their encoded answers.
        let (snapshot, problems) = self
            .server
            .snapshot()
            .rebuild(&self.zones, self.serial, &owned);
        self.server.swap(Arc::new(snapshot));
        let build_time = started.elapsed();
        tracing::debug!(
            serial = self.serial,
            ingresses = routed.len(),
            changed = changed.len(),
            build_ms = build_time.as_secs_f64() * 1000.0,
            "DNS snapshot rebuilt"
        );
        let mut by_ingress: HashMap<String, Vec<String>> = HashMap::new();
        for problem in problems {
            by_ingress
                .entry(problem.ingress.clone())
                .or_default()
                .push(problem.message.clone());
        }
        let mut changes = Vec::new();
        for ingress in routed.iter().filter(|r| changed.contains(&r.ingress)) {
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
            self.answers.insert(ingress.ingress.clone(), now_in);
        }
        // Ingresses no longer served leave no memory.
        let served: BTreeSet<&str> = routed.iter().map(|r| r.ingress.as_str()).collect();
        self.answers.retain(|k, _| served.contains(k.as_str()));
        GslbStep {
            problems: by_ingress,
            changes,
            build_time: Some(build_time),
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
            return "no longer serving this ingress".into();
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
