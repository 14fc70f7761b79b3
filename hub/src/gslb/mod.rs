//! The hub's GSLB step: turns the routed FederatedIngresses (serving clusters, routing
//! health, failover memory: decided by the controller) into a DNS snapshot for the
//! embedded server, and says which clusters entered or left an ingress's answers and,
//! for Anycast, which clusters announced or withdrew an anycast address (the controller
//! records those as Events).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use fedingress_api::ingress::StrategyType;
use fedingress_dns::location::{LocationEntry, Locator, RttRow, RttTable};
use fedingress_dns::routing::{self, ClientInfo};
use fedingress_dns::server::DnsServer;
use fedingress_dns::zone::{Snapshot, ZoneConfig};
use fedingress_dns::{Location, RoutedIngress};

mod config;

pub use config::{
    DnsConfig, DnsConfigError, LatencyFile, LocationsFile, PlaceFile, TableEntryFile,
};

/// A cluster entering or leaving an ingress's answers, or (Anycast) starting or
/// stopping to announce one of its anycast addresses.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswerChange {
    pub ingress: String,
    pub cluster: String,
    pub joined: bool,
    /// Why; for an anycast change the rest of the sentence after the cluster's name
    /// (`withdrew 192.0.2.10: backend echo:9000 has no ready endpoint`).
    pub detail: String,
    /// Anycast: the address whose route on the cluster changed (`joined`: it is now
    /// announced); `None` for a change of the DNS answers.
    pub anycast: Option<IpAddr>,
}

/// One anycast address on one cluster, as the events follow it.
#[derive(Clone, Debug, PartialEq)]
struct RouteState {
    /// Announced, as the agent reports it (or, when it reports no BGP state, as
    /// routing counts it from the cluster's health).
    announced: bool,
    /// The agent reports the route.
    reported: bool,
    /// The agent's reason, or the cluster's routing detail when it reports none.
    why: String,
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
    /// Per Anycast ingress: each (cluster, anycast address) route.
    routes: HashMap<String, BTreeMap<(String, IpAddr), RouteState>>,
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
                routes: HashMap::new(),
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
            // Anycast: the route events below say who announces; the answers only switch
            // between the anycast addresses and (none announcing) the clusters' own, which
            // is no cluster joining or leaving (issue 23: a Warning when a site recovered).
            let anycast = ingress.traffic.strategy.type_ == StrategyType::Anycast;
            if !first && !anycast {
                let empty = BTreeMap::new();
                let before = before.unwrap_or(&empty);
                for (cluster, detail) in &now_in {
                    if !before.contains_key(cluster) {
                        changes.push(AnswerChange {
                            ingress: ingress.ingress.clone(),
                            cluster: cluster.clone(),
                            joined: true,
                            detail: detail.clone(),
                            anycast: None,
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
                        anycast: None,
                    });
                }
            }
            self.answers.insert(ingress.ingress.clone(), now_in);
            let routes = self.anycast_routes(ingress);
            if !first {
                let empty = BTreeMap::new();
                let before = self.routes.get(&ingress.ingress).unwrap_or(&empty);
                changes.extend(route_changes(ingress, before, &routes));
            }
            if routes.is_empty() {
                self.routes.remove(&ingress.ingress);
            } else {
                self.routes.insert(ingress.ingress.clone(), routes);
            }
        }
        // Ingresses no longer served leave no memory.
        let served: BTreeSet<&str> = routed.iter().map(|r| r.ingress.as_str()).collect();
        self.answers.retain(|k, _| served.contains(k.as_str()));
        self.routes.retain(|k, _| served.contains(k.as_str()));
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
        self.default_decision(ingress)
            .reasons
            .iter()
            .find(|r| r.cluster == cluster)
            .map(|r| r.detail.clone())
            .unwrap_or_default()
    }

    /// The decision for a client at the default location.
    fn default_decision(&self, ingress: &RoutedIngress) -> routing::Decision {
        let located = self.locator.locate(IpAddr::from([0, 0, 0, 0]));
        let client = ClientInfo::from_located(None, &located);
        routing::decide(
            &ingress.traffic,
            &ingress.clusters,
            &client,
            &ingress.failover,
        )
    }

    /// Anycast: every (cluster, anycast address) route of `ingress` (none for other
    /// strategies). Anycast does not depend on the client: one decision says it all.
    fn anycast_routes(&self, ingress: &RoutedIngress) -> BTreeMap<(String, IpAddr), RouteState> {
        if ingress.traffic.strategy.type_ != StrategyType::Anycast {
            return BTreeMap::new();
        }
        route_states(&self.default_decision(ingress))
    }
}

/// Every (cluster, anycast address) route of an Anycast `decision`: as the agent reports
/// it, or as routing counts it where the agent reports no BGP state.
fn route_states(decision: &routing::Decision) -> BTreeMap<(String, IpAddr), RouteState> {
    let mut out = BTreeMap::new();
    for reason in &decision.reasons {
        for route in &reason.anycast {
            let state = match route.reported {
                Some(announced) => RouteState {
                    announced,
                    reported: true,
                    why: if route.reason.is_empty() {
                        "no reason given".to_owned()
                    } else {
                        route.reason.clone()
                    },
                },
                None => RouteState {
                    announced: route.announcing,
                    reported: false,
                    why: reason.detail.clone(),
                },
            };
            out.insert((reason.cluster.clone(), route.address), state);
        }
    }
    out
}

/// What changed between two sets of anycast routes of `ingress`, in words: what the
/// agents reported (`eu-west withdrew 192.0.2.10: …`), or, for a cluster whose agent
/// reports no BGP state, whether routing still counts it as announcing.
///
/// # Guarantees
/// - One change per (cluster, address) whose announced state differs; a route first
///   seen withdrawn is no change.
/// - A route that was announced and is gone (the cluster stopped serving the ingress,
///   or the address left the spec) is a change to "not announcing".
fn route_changes(
    ingress: &RoutedIngress,
    before: &BTreeMap<(String, IpAddr), RouteState>,
    now: &BTreeMap<(String, IpAddr), RouteState>,
) -> Vec<AnswerChange> {
    let change = |cluster: &str, address: IpAddr, joined: bool, detail: String| AnswerChange {
        ingress: ingress.ingress.clone(),
        cluster: cluster.to_owned(),
        joined,
        detail,
        anycast: Some(address),
    };
    let mut out = Vec::new();
    for ((cluster, address), state) in now {
        let was = before.get(&(cluster.clone(), *address));
        if was.map_or(!state.announced, |w| w.announced == state.announced) {
            continue;
        }
        // The agent's reason repeats what the sentence says first.
        let why = state
            .why
            .strip_prefix("announced: ")
            .or_else(|| state.why.strip_prefix("withdrawn: "))
            .unwrap_or(&state.why);
        let detail = match (state.reported, state.announced) {
            (true, true) => format!("announced {address}: {why}"),
            (true, false) => format!("withdrew {address}: {why}"),
            (false, true) => format!(
                "counts as announcing {address} (its agent reports no BGP state): {}",
                state.why
            ),
            (false, false) => format!(
                "no longer counts as announcing {address} (its agent reports no BGP state): {}",
                state.why
            ),
        };
        out.push(change(cluster, *address, state.announced, detail));
    }
    for ((cluster, address), state) in before {
        if !state.announced || now.contains_key(&(cluster.clone(), *address)) {
            continue;
        }
        let why = if ingress.clusters.iter().any(|c| &c.name == cluster) {
            "no longer one of the ingress's anycast addresses"
        } else {
            "no longer serving this ingress"
        };
        out.push(change(
            cluster,
            *address,
            false,
            format!("no longer counts as announcing {address}: {why}"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use fedingress_api::ingress::{AnycastRouteStatus, Strategy, Traffic};
    use fedingress_dns::ClusterView;
    use fedingress_dns::routing::FailoverState;

    use super::*;

    fn view(name: &str, healthy: bool, routes: &[(bool, &str)]) -> ClusterView {
        ClusterView {
            name: name.into(),
            location: Location {
                region: String::new(),
                latitude: 0.0,
                longitude: 0.0,
            },
            healthy,
            cordoned: false,
            ips: Vec::new(),
            hostnames: Vec::new(),
            load: 0.0,
            capacity: None,
            cloud: Default::default(),
            anycast: routes
                .iter()
                .map(|(announced, reason)| AnycastRouteStatus {
                    address: "192.0.2.10".parse().unwrap(),
                    announced: *announced,
                    reason: (*reason).into(),
                })
                .collect(),
        }
    }

    fn routed(clusters: Vec<ClusterView>) -> RoutedIngress {
        RoutedIngress {
            ingress: "default/vip".into(),
            dns_name: "vip.fedingress.test".into(),
            traffic: Traffic {
                strategy: Strategy {
                    type_: StrategyType::Anycast,
                    anycast_addresses: Some(vec!["192.0.2.10".into()]),
                    ..Strategy::default()
                },
                ..Traffic::default()
            },
            clusters,
            srv: Vec::new(),
            failover: FailoverState::default(),
            health_port: None,
        }
    }

    fn states(ingress: &RoutedIngress) -> BTreeMap<(String, IpAddr), RouteState> {
        let client = ClientInfo {
            address: None,
            location: Location {
                region: String::new(),
                latitude: 0.0,
                longitude: 0.0,
            },
            rtt: None,
        };
        route_states(&routing::decide(
            &ingress.traffic,
            &ingress.clusters,
            &client,
            &ingress.failover,
        ))
    }

    fn messages(changes: &[AnswerChange]) -> Vec<String> {
        changes
            .iter()
            .map(|c| format!("{} {} {}", c.joined, c.cluster, c.detail))
            .collect()
    }

    #[test]
    fn route_changes_say_what_the_agents_reported() {
        // ap-south announces throughout (no failing open).
        let before = routed(vec![
            view("ap-south", true, &[(true, "healthy")]),
            view("eu-west", true, &[(true, "healthy")]),
            view("us-east", true, &[]),
        ]);
        let after = routed(vec![
            view("ap-south", true, &[(true, "healthy")]),
            view(
                "eu-west",
                false,
                &[(false, "backend echo:9000 has no ready endpoint")],
            ),
            view("us-east", false, &[]),
        ]);
        let changes = route_changes(&after, &states(&before), &states(&after));
        assert_eq!(
            messages(&changes),
            [
                "false eu-west withdrew 192.0.2.10: backend echo:9000 has no ready endpoint",
                "false us-east no longer counts as announcing 192.0.2.10 (its agent reports no BGP state): unhealthy",
            ]
        );
        assert!(changes.iter().all(|c| c.anycast.is_some()));
        // And back: announced again, in the agent's words; nothing while unchanged.
        let back = route_changes(&before, &states(&after), &states(&before));
        assert_eq!(
            messages(&back),
            [
                "true eu-west announced 192.0.2.10: healthy",
                "true us-east counts as announcing 192.0.2.10 (its agent reports no BGP state): healthy; the agent reports no BGP announcement",
            ]
        );
        assert!(route_changes(&before, &states(&before), &states(&before)).is_empty());
    }

    #[tokio::test]
    async fn a_site_that_starts_announcing_is_one_route_event_and_no_cluster_leaving() {
        let bound = Gslb::bind(&DnsConfig::default(), SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let mut gslb = bound.gslb;
        let starting = "withdrawn: no BGP session established (0 of 1 peers)";
        // Nobody announces: the answers fail open to the clusters themselves.
        let none = routed(vec![
            view("eu-west", true, &[(false, starting)]),
            view("us-east", true, &[(false, starting)]),
        ]);
        let changed = BTreeSet::from(["default/vip".to_owned()]);
        gslb.step(&[&none], &changed, 2, true);
        let one = routed(vec![
            view("eu-west", true, &[(true, "announced: applied and healthy")]),
            view("us-east", true, &[(false, starting)]),
        ]);
        let step = gslb.step(&[&one], &changed, 3, false);
        assert_eq!(
            messages(&step.changes),
            ["true eu-west announced 192.0.2.10: applied and healthy"],
            "no ClusterLeftAnswers for the sites the fail-open answer named"
        );
        let step = gslb.step(&[&none], &changed, 4, false);
        assert_eq!(
            messages(&step.changes),
            [format!(
                "false eu-west withdrew 192.0.2.10: {}",
                starting.trim_start_matches("withdrawn: ")
            )]
        );
    }

    #[test]
    fn a_cluster_that_stops_serving_no_longer_counts() {
        let before = routed(vec![view("eu-west", true, &[(true, "healthy")])]);
        let after = routed(Vec::new());
        let changes = route_changes(&after, &states(&before), &states(&after));
        assert_eq!(
            messages(&changes),
            [
                "false eu-west no longer counts as announcing 192.0.2.10: no longer serving this ingress"
            ]
        );
        // A route first seen withdrawn is no change.
        let withdrawn = routed(vec![view("eu-west", true, &[(false, "starting")])]);
        assert!(route_changes(&withdrawn, &BTreeMap::new(), &states(&withdrawn)).is_empty());
    }
}
