//! provider-bench: the Route53 provider's `sync` at realistic scale, against moto's
//! emulator (`moto_server` on loopback, started here and killed by PID), with a minimal
//! writer through the SDK measured in the same run as the peer.
//!
//! Workload: `--ingresses` FederatedIngresses (default 1,000) over 6 clusters in 3 AWS
//! regions (two clusters per region, four public IPv4 load balancer addresses each), the
//! strategies in turn: Geo (all 6 clusters), Weighted (one cluster per region, weights
//! 5/3/2), Failover with 2 tiers (half of them one cluster per tier, half two), RoundRobin
//! (4 clusters in 2 regions), Latency (all 6: two clusters per region share one latency
//! record). Every ingress has a TCP health port, so every record carries the Route53
//! health check of its endpoint (24 endpoints). The desired record sets come from
//! `fedingress_providers::publish::desired::desired`, as the hub derives them.
//!
//! Phases, each with the provider's real `sync` (not dry run, default batch size 100
//! unless `--batch-size`, health checks on, `--rps` requests per second):
//!
//! 1. first sync into an empty hosted zone;
//! 2. a resync with nothing changed (drift repair's steady cost);
//! 3. one cluster (`euw1-a`) unhealthy, then 3b. healthy again;
//! 4. `--drift` records edited by hand (values replaced, one SDK request), then a resync.
//!
//! After phases 3, 3b and 4 a second sync checks that the first converged (its changes
//! are printed; not timed). What each phase costs is the time of `sync`, the provider's
//! call-policy counters (requests sent, retries, throttled) and, from moto's request log,
//! the requests per API operation.
//!
//! The peer, in a second hosted zone of the same moto: the SDK client alone, sending the
//! record sets the provider's zone holds after the phase (markers left out), as the
//! difference from what it held before: `ChangeResourceRecordSets` as full as Route53's
//! quotas allow (1,000 ResourceRecord elements and 32,000 characters of values per
//! request, an UPSERT's counted twice: 500 one-address UPSERTs), UPSERT (DELETE where a record set went away or changed
//! its routing kind), no listing, no ownership markers, no health-check calls (it reuses
//! the provider's health checks): the floor of API work for the same result. For the
//! resyncs (2 and 4) a second peer, "blind", UPSERTs every record set again (what a
//! writer without a diff does to repair drift). After every phase the bench compares
//! the two zones record by record.
//!
//! moto 5.2 differs from Route53 in two ways that would distort these numbers, and the
//! bench patches both in the moto process it starts (unless `--stock-moto`): a `DELETE`
//! with a `SetIdentifier` deletes every record set of the zone with that identifier,
//! whatever its name and type, and `GeoProximityLocation` is accepted and dropped (so
//! every geoproximity record would differ from the desired one on every resync). The
//! patched moto deletes only the named record set and keeps the location, as the
//! Route53 API reference says.
//!
//! Run: `cargo build --release -p fedingress-bench --bin provider-bench &&
//! target/release/provider-bench` (see docs/benchmarks.md). It prints numbers; it asserts
//! nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_route53::Client;
use aws_sdk_route53::config::{Credentials, SharedCredentialsProvider};
use aws_sdk_route53::types::{
    AliasTarget, Change, ChangeAction, ChangeBatch, ResourceRecord, ResourceRecordSet, RrType,
};
use clap::Parser;
use fedingress_api::cluster::Provider as Cloud;
use fedingress_api::ingress::{Strategy, StrategyType, Traffic};
use fedingress_bench::today;
use fedingress_dns::routing::FailoverState;
use fedingress_dns::{ClusterView, Location, RoutedIngress};
use fedingress_providers::clouddns::{Auth, CloudDnsProvider};
use fedingress_providers::config::ProviderConfig;
use fedingress_providers::publish::desired::desired;
use fedingress_providers::publish::{DnsProvider, Owner, PolicyRecordSet, SyncOptions, SyncReport};
use fedingress_providers::route53::Route53Provider;
use fedingress_tests::clouddns_fake::CloudDnsFake;
use serde_json::json;

const APEX: &str = "example.com";
/// The cluster that turns unhealthy in phase 3.
const FAILING: &str = "euw1-a";
/// Route53's default limit: requests per second per account.
const ROUTE53_RPS: f64 = 5.0;
/// Route53's quotas of one `ChangeResourceRecordSets`: ResourceRecord elements, and
/// characters of their values (an UPSERT's counted twice in both).
const MAX_RECORDS: usize = 1000;
const MAX_CHARS: usize = 32_000;

#[derive(Parser)]
#[command(about = "Route53 provider sync at scale against moto, with a minimal SDK writer as peer")]
struct Args {
    /// FederatedIngresses.
    #[arg(long, default_value_t = 1000)]
    ingresses: usize,
    /// The provider's requests per second, one full run each (5 is the default and
    /// Route53's per-account limit).
    #[arg(long, value_delimiter = ',', default_value = "1000,5")]
    rps: Vec<f64>,
    /// The provider's `batchSize` (changes per request; default: the config's default).
    /// Not validated: above the config's cap of 300 it shows what Route53 does with them.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Records edited by hand in phase 4.
    #[arg(long, default_value_t = 50)]
    drift: usize,
    /// Run moto as installed, without the two patches (see the module docs).
    #[arg(long)]
    stock_moto: bool,
    /// The Python that has moto installed.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Skip the Cloud DNS run (the provider against the local Cloud DNS fake).
    #[arg(long)]
    no_clouddns: bool,
}

/// moto's server with Route53's semantics for DELETE with a SetIdentifier and for
/// GeoProximityLocation (both wrong in moto 5.2, see the module docs).
const MOTO_PATCH: &str = r#"
import sys, threading
from moto.route53 import models as m
from moto.server import main

if sys.argv[1] == "patched":
    pending = threading.local()
    orig_change = m.Route53Backend.change_resource_record_sets
    orig_delete_by_id = m.FakeZone.delete_rrset_by_id
    orig_init = m.RecordSet.__init__

    def change(self, zoneid, change_list):
        pending.deletes = [
            (c["ResourceRecordSet"]["Name"].rstrip(".") + ".",
             c["ResourceRecordSet"].get("Type"),
             c["ResourceRecordSet"]["SetIdentifier"])
            for c in change_list
            if c.get("Action") == "DELETE" and "SetIdentifier" in c["ResourceRecordSet"]
        ]
        try:
            return orig_change(self, zoneid, change_list)
        finally:
            pending.deletes = []

    def delete_by_id(self, set_identifier):
        deletes = getattr(pending, "deletes", [])
        for i, (name, type_, sid) in enumerate(deletes):
            if sid == set_identifier:
                del deletes[i]
                self.rrsets = [r for r in self.rrsets
                               if not (r.name == name and r.type == type_ and r.set_identifier == sid)]
                return
        orig_delete_by_id(self, set_identifier)

    def init(self, kwargs):
        orig_init(self, kwargs)
        self.geo_proximity_location = kwargs.get("GeoProximityLocation")

    m.Route53Backend.change_resource_record_sets = change
    m.FakeZone.delete_rrset_by_id = delete_by_id
    m.RecordSet.__init__ = init

main(sys.argv[2:])
"#;

/// A moto server started by this bench; killed by PID on [`Moto::stop`] (and on drop).
struct Moto {
    child: tokio::process::Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Moto {
    async fn start(python: &str, patched: bool) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("moto_server.py");
        std::fs::write(&script, MOTO_PATCH)?;
        let log = dir.path().join("moto.log");
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let file = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(python)
            .arg("-u")
            .arg(&script)
            .arg(if patched { "patched" } else { "stock" })
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting moto with {python} (pip install 'moto[server]')"))?;
        let moto = Moto {
            child,
            addr,
            log,
            _dir: dir,
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = http
                .get(format!("{}/moto-api/data.json", moto.endpoint()))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return Ok(moto);
            }
            if Instant::now() > deadline {
                bail!(
                    "moto did not answer on {addr}: {}",
                    std::fs::read_to_string(&moto.log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Requests moto has logged so far, per Route53 operation.
    fn ops(&self) -> BTreeMap<String, u64> {
        count_ops(&self.log)
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// Counts the requests in moto's (werkzeug's) access log by operation.
fn count_ops(log: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(request) = line.split('"').nth(1) else {
            continue;
        };
        let mut parts = request.split(' ');
        let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !path.starts_with("/2013-04-01/") {
            continue;
        }
        let op = if path.contains("/rrset") {
            match method {
                "GET" => "ListResourceRecordSets",
                _ => "ChangeResourceRecordSets",
            }
        } else if path.starts_with("/2013-04-01/tags/") {
            "ChangeTagsForResource"
        } else if path.starts_with("/2013-04-01/healthcheck") {
            match method {
                "GET" => "ListHealthChecks",
                "POST" if path.trim_end_matches('/') == "/2013-04-01/healthcheck" => {
                    "CreateHealthCheck"
                }
                "POST" => "UpdateHealthCheck",
                "DELETE" => "DeleteHealthCheck",
                _ => "other healthcheck",
            }
        } else if path.starts_with("/2013-04-01/hostedzone") {
            match method {
                "GET" => "GetHostedZone",
                _ => "other hostedzone",
            }
        } else {
            "other"
        };
        *out.entry(op.to_string()).or_default() += 1;
    }
    out
}

fn ops_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> String {
    let mut parts = Vec::new();
    for (op, n) in after {
        let d = n - before.get(op).copied().unwrap_or(0);
        if d > 0 {
            parts.push(format!("{op} {d}"));
        }
    }
    parts.join(", ")
}

// ---------------------------------------------------------------------------------------
// Workload

struct ClusterDef {
    name: &'static str,
    region: &'static str,
    latitude: f64,
    longitude: f64,
    /// The first three octets of its load balancer addresses.
    net: [u8; 3],
    host: u8,
}

const CLUSTERS: [ClusterDef; 6] = [
    ClusterDef {
        name: "use1-a",
        region: "us-east-1",
        latitude: 38.13,
        longitude: -78.45,
        net: [192, 0, 2],
        host: 10,
    },
    ClusterDef {
        name: "use1-b",
        region: "us-east-1",
        latitude: 39.04,
        longitude: -77.49,
        net: [192, 0, 2],
        host: 20,
    },
    ClusterDef {
        name: "euw1-a",
        region: "eu-west-1",
        latitude: 53.35,
        longitude: -6.26,
        net: [198, 51, 100],
        host: 10,
    },
    ClusterDef {
        name: "euw1-b",
        region: "eu-west-1",
        latitude: 53.41,
        longitude: -6.44,
        net: [198, 51, 100],
        host: 20,
    },
    ClusterDef {
        name: "apse1-a",
        region: "ap-southeast-1",
        latitude: 1.35,
        longitude: 103.82,
        net: [203, 0, 113],
        host: 10,
    },
    ClusterDef {
        name: "apse1-b",
        region: "ap-southeast-1",
        latitude: 1.29,
        longitude: 103.85,
        net: [203, 0, 113],
        host: 20,
    },
];

/// Clusters 2r and 2r+1 are region r's.
fn region_clusters(region: usize) -> [usize; 2] {
    [2 * (region % 3), 2 * (region % 3) + 1]
}

fn view(c: usize, ingress: usize, unhealthy: &str) -> ClusterView {
    let d = &CLUSTERS[c];
    // Four load balancers per cluster, the ingresses spread over them.
    let lb = u8::try_from(ingress % 4).unwrap_or(0);
    ClusterView {
        name: d.name.to_string(),
        location: Location {
            region: d.region.to_string(),
            latitude: d.latitude,
            longitude: d.longitude,
        },
        healthy: d.name != unhealthy,
        cordoned: false,
        ips: vec![IpAddr::V4(Ipv4Addr::new(
            d.net[0],
            d.net[1],
            d.net[2],
            d.host + lb,
        ))],
        hostnames: Vec::new(),
        load: 0.0,
        capacity: None,
        cloud: Cloud::Aws,
        anycast: Vec::new(),
    }
}

/// The routed ingresses, with cluster `unhealthy` (or none) unhealthy.
fn workload(n: usize, unhealthy: &str) -> Vec<RoutedIngress> {
    (0..n)
        .map(|i| {
            let home = (i / 5) % 3;
            let mut strategy = Strategy::default();
            let placed: Vec<usize> = match i % 5 {
                0 => {
                    strategy.type_ = StrategyType::Geo;
                    (0..6).collect()
                }
                1 => {
                    strategy.type_ = StrategyType::Weighted;
                    let side = (i / 5) % 2;
                    let placed: Vec<usize> = (0..3).map(|r| 2 * r + side).collect();
                    strategy.weights = Some(
                        placed
                            .iter()
                            .zip([5, 3, 2])
                            .map(|(c, w)| (CLUSTERS[*c].name.to_string(), w))
                            .collect(),
                    );
                    placed
                }
                2 => {
                    strategy.type_ = StrategyType::Failover;
                    let [a, b] = region_clusters(home);
                    let [c, d] = region_clusters(home + 1);
                    let name = |c: usize| CLUSTERS[c].name.to_string();
                    if (i / 5) % 2 == 0 {
                        strategy.failover_order = Some(vec![vec![name(a)], vec![name(c)]]);
                        vec![a, c]
                    } else {
                        strategy.failover_order =
                            Some(vec![vec![name(a), name(b)], vec![name(c), name(d)]]);
                        vec![a, b, c, d]
                    }
                }
                3 => {
                    strategy.type_ = StrategyType::RoundRobin;
                    let mut v = region_clusters(home).to_vec();
                    v.extend(region_clusters(home + 1));
                    v
                }
                _ => {
                    strategy.type_ = StrategyType::Latency;
                    (0..6).collect()
                }
            };
            let name = format!("app{i:04}.team{:02}.{APEX}", i % 20);
            RoutedIngress {
                ingress: format!("team{:02}/app{i:04}", i % 20),
                dns_name: name,
                traffic: Traffic {
                    strategy,
                    ttl: if i % 2 == 0 { 30 } else { 60 },
                    ..Traffic::default()
                },
                clusters: placed.iter().map(|c| view(*c, i, unhealthy)).collect(),
                srv: Vec::new(),
                failover: FailoverState::default(),
                health_port: Some(443),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The zones, read and written with the SDK directly

fn sdk(endpoint: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDFEDINGRESSBENCH",
            "bench-secret",
            None,
            None,
            "fedingress-bench",
        )))
        .endpoint_url(endpoint)
        .build()
}

async fn create_zone(client: &Client, reference: &str) -> anyhow::Result<String> {
    let out = client
        .create_hosted_zone()
        .name(APEX)
        .caller_reference(reference)
        .send()
        .await
        .context("CreateHostedZone")?;
    Ok(out
        .hosted_zone()
        .context("no hosted zone")?
        .id()
        .trim_start_matches("/hostedzone/")
        .to_string())
}

type Key = (String, String, Option<String>);

fn key(r: &ResourceRecordSet) -> Key {
    (
        r.name().trim_end_matches('.').to_string(),
        r.r#type().as_str().to_string(),
        r.set_identifier().map(str::to_string),
    )
}

/// The zone's record sets but its NS and SOA and (unless `markers`) the ownership
/// markers, by key. moto pages by name and type only (it ignores the identifier): a
/// page may repeat the start of a group, hence the key.
async fn zone_records(
    client: &Client,
    zone: &str,
    markers: bool,
) -> anyhow::Result<BTreeMap<Key, ResourceRecordSet>> {
    let mut out = BTreeMap::new();
    let mut start: Option<(String, RrType)> = None;
    loop {
        let page = client
            .list_resource_record_sets()
            .hosted_zone_id(zone)
            .set_start_record_name(start.as_ref().map(|s| s.0.clone()))
            .set_start_record_type(start.as_ref().map(|s| s.1.clone()))
            .max_items(300)
            .send()
            .await
            .context("ListResourceRecordSets")?;
        let mut progress = false;
        for r in page.resource_record_sets() {
            if matches!(r.r#type(), RrType::Ns | RrType::Soa) {
                continue;
            }
            if !markers && r.name().starts_with("_fedingress-") {
                continue;
            }
            progress |= out.insert(key(r), r.clone()).is_none();
        }
        let next = page
            .next_record_name()
            .zip(page.next_record_type())
            .map(|(n, t)| (n.to_string(), t.clone()));
        match next {
            Some(next) if page.is_truncated() && (progress || start.is_none()) => {
                start = Some(next);
            }
            _ => break,
        }
    }
    Ok(out)
}

/// The record set with alias targets in `from` pointing to `to` instead, and optionally
/// other values.
fn rebuild(
    r: &ResourceRecordSet,
    from: &str,
    to: &str,
    values: Option<&[&str]>,
) -> anyhow::Result<ResourceRecordSet> {
    let alias = match r.alias_target() {
        Some(a) => Some(
            AliasTarget::builder()
                .hosted_zone_id(
                    if a.hosted_zone_id().trim_start_matches("/hostedzone/") == from {
                        to
                    } else {
                        a.hosted_zone_id()
                    },
                )
                .dns_name(a.dns_name())
                .evaluate_target_health(a.evaluate_target_health())
                .build()?,
        ),
        None => None,
    };
    let records: Vec<ResourceRecord> = match values {
        Some(v) => v
            .iter()
            .map(|v| ResourceRecord::builder().value(*v).build())
            .collect::<Result<_, _>>()?,
        None => r.resource_records().to_vec(),
    };
    // Without the trailing dot, as the provider writes names: moto checks a DELETE
    // against the earlier writes of the same name as written.
    Ok(ResourceRecordSet::builder()
        .name(r.name().trim_end_matches('.'))
        .r#type(r.r#type().clone())
        .set_set_identifier(r.set_identifier().map(str::to_string))
        .set_weight(r.weight())
        .set_region(r.region().cloned())
        .set_failover(r.failover().cloned())
        .set_multi_value_answer(r.multi_value_answer())
        .set_geo_location(r.geo_location().cloned())
        .set_geo_proximity_location(r.geo_proximity_location().cloned())
        // moto lists alias records with a TTL of 0; Route53 takes none on them.
        .set_ttl(r.ttl().filter(|_| r.alias_target().is_none()))
        .set_resource_records((!records.is_empty()).then_some(records))
        .set_alias_target(alias)
        .set_health_check_id(r.health_check_id().map(str::to_string))
        .build()?)
}

/// The record set in words, alias targets in the zone itself written as `ZONE`, to
/// compare two zones.
fn describe(r: &ResourceRecordSet, zone: &str) -> String {
    let mut values: Vec<&str> = r.resource_records().iter().map(|v| v.value()).collect();
    values.sort_unstable();
    let alias = r.alias_target().map(|a| {
        let z = a.hosted_zone_id().trim_start_matches("/hostedzone/");
        format!(
            "{} {} {}",
            if z == zone { "ZONE" } else { z },
            a.dns_name().trim_end_matches('.'),
            a.evaluate_target_health()
        )
    });
    format!(
        "{:?} w={:?} r={:?} f={:?} mv={:?} g={:?} ttl={:?} {values:?} alias={alias:?} hc={:?}",
        key(r),
        r.weight(),
        r.region(),
        r.failover(),
        r.multi_value_answer(),
        r.geo_proximity_location(),
        r.ttl(),
        r.health_check_id()
    )
}

/// The routing kind, which Route53 cannot change in place (and alias or not).
fn kind(r: &ResourceRecordSet) -> (bool, u8) {
    let policy = if r.weight().is_some() {
        1
    } else if r.failover().is_some() {
        2
    } else if r.region().is_some() {
        3
    } else if r.geo_proximity_location().is_some() {
        4
    } else if r.multi_value_answer() == Some(true) {
        5
    } else {
        0
    };
    (r.alias_target().is_some(), policy)
}

/// The changes that turn `before` into `after` (the provider's zone), for the peer's
/// zone: deletions first, then upserts; a record set that changes its routing kind is
/// deleted and upserted.
fn delta(
    before: &BTreeMap<Key, ResourceRecordSet>,
    after: &BTreeMap<Key, ResourceRecordSet>,
    ours: &str,
    peer: &str,
) -> anyhow::Result<Vec<Change>> {
    let mut deletes = Vec::new();
    let mut upserts = Vec::new();
    for (k, old) in before {
        match after.get(k) {
            None => deletes.push(old),
            Some(new) if describe(new, ours) != describe(old, ours) && kind(new) != kind(old) => {
                deletes.push(old);
            }
            _ => {}
        }
    }
    for (k, new) in after {
        if before
            .get(k)
            .is_none_or(|old| describe(old, ours) != describe(new, ours))
        {
            upserts.push(new);
        }
    }
    let mut out = Vec::new();
    for (action, r) in deletes
        .into_iter()
        .map(|r| (ChangeAction::Delete, r))
        .chain(upserts.into_iter().map(|r| (ChangeAction::Upsert, r)))
    {
        out.push(
            Change::builder()
                .action(action)
                .resource_record_set(rebuild(r, ours, peer, None)?)
                .build()?,
        );
    }
    Ok(out)
}

/// Route53's weight of one change in a request's quotas: (ResourceRecord elements,
/// characters of their values), an UPSERT's counted twice.
fn weight(c: &Change) -> (usize, usize) {
    let values = c
        .resource_record_set()
        .map(|r| r.resource_records())
        .unwrap_or_default();
    let n = if *c.action() == ChangeAction::Upsert {
        2
    } else {
        1
    };
    (
        n * values.len(),
        n * values.iter().map(|v| v.value().len()).sum::<usize>(),
    )
}

/// The peer writer: `changes` in as few requests as Route53's quotas allow (at most
/// [`MAX_RECORDS`] ResourceRecord elements and [`MAX_CHARS`] characters of values per
/// request, an UPSERT's counted twice); its time and requests.
async fn peer_write(
    client: &Client,
    zone: &str,
    changes: Vec<Change>,
) -> anyhow::Result<(Duration, u64)> {
    let mut requests: Vec<Vec<Change>> = Vec::new();
    let mut current: Vec<Change> = Vec::new();
    let (mut records, mut chars) = (0, 0);
    for c in changes {
        let (r, ch) = weight(&c);
        if !current.is_empty() && (records + r > MAX_RECORDS || chars + ch > MAX_CHARS) {
            requests.push(std::mem::take(&mut current));
            (records, chars) = (0, 0);
        }
        records += r;
        chars += ch;
        current.push(c);
    }
    if !current.is_empty() {
        requests.push(current);
    }
    let start = Instant::now();
    let n = requests.len() as u64;
    for batch in requests {
        client
            .change_resource_record_sets()
            .hosted_zone_id(zone)
            .change_batch(ChangeBatch::builder().set_changes(Some(batch)).build()?)
            .send()
            .await
            .context("peer ChangeResourceRecordSets")?;
    }
    Ok((start.elapsed(), n))
}

/// UPSERTs of every record set of `records` (the blind peer).
fn upsert_all(
    records: &BTreeMap<Key, ResourceRecordSet>,
    ours: &str,
    peer: &str,
) -> anyhow::Result<Vec<Change>> {
    records
        .values()
        .map(|r| {
            Ok(Change::builder()
                .action(ChangeAction::Upsert)
                .resource_record_set(rebuild(r, ours, peer, None)?)
                .build()?)
        })
        .collect()
}

/// How many record sets of the two zones differ (0: the peer holds what we hold).
fn differences(
    ours: &BTreeMap<Key, ResourceRecordSet>,
    ours_id: &str,
    peer: &BTreeMap<Key, ResourceRecordSet>,
    peer_id: &str,
) -> usize {
    let a: BTreeSet<String> = ours.values().map(|r| describe(r, ours_id)).collect();
    let b: BTreeSet<String> = peer.values().map(|r| describe(r, peer_id)).collect();
    a.symmetric_difference(&b).count()
}

// ---------------------------------------------------------------------------------------
// Phases

#[derive(Default)]
struct Row {
    phase: String,
    time: Duration,
    requests: u64,
    retries: u64,
    throttled: u64,
    changes: usize,
    health_checks: usize,
    unsynced: usize,
    ops: String,
    /// Changes of the second sync (after 3, 3b, 4), which should be 0.
    check: Option<usize>,
    peer_time: Duration,
    peer_requests: u64,
    peer_changes: usize,
    blind: Option<(Duration, u64)>,
    zones_differ: usize,
}

struct Bench {
    moto: Moto,
    client: Client,
    provider: Route53Provider,
    ours: String,
    peer: String,
    options: SyncOptions,
}

impl Bench {
    async fn sync(&self, sets: &[PolicyRecordSet]) -> anyhow::Result<SyncReport> {
        let refs: Vec<&PolicyRecordSet> = sets
            .iter()
            .filter(|s| self.provider.manages(&s.name))
            .collect();
        Ok(self.provider.sync(&refs, &self.options).await?)
    }

    /// One phase: our sync of `sets`, then the peer's writes for the same result.
    async fn phase(
        &self,
        name: &str,
        sets: &[PolicyRecordSet],
        blind: bool,
        check: bool,
    ) -> anyhow::Result<Row> {
        let before = zone_records(&self.client, &self.ours, false).await?;
        let stats = self.provider.call_stats();
        let ops = self.moto.ops();
        let start = Instant::now();
        let report = self.sync(sets).await?;
        let time = start.elapsed();
        let after_stats = self.provider.call_stats();
        let ops = ops_delta(&ops, &self.moto.ops());
        let unsynced: Vec<(&String, &String)> = report
            .names
            .iter()
            .filter(|(_, r)| !r.synced)
            .map(|(n, r)| (n, &r.message))
            .collect();
        if let Some((n, why)) = unsynced.first() {
            eprintln!(
                "  {name}: {} names not synced, e.g. {n}: {why}",
                unsynced.len()
            );
        }
        let check = if check {
            Some(self.sync(sets).await?.changes)
        } else {
            None
        };
        let after = zone_records(&self.client, &self.ours, false).await?;
        let changes = delta(&before, &after, &self.ours, &self.peer)?;
        let peer_changes = changes.len();
        let (peer_time, peer_requests) = peer_write(&self.client, &self.peer, changes).await?;
        let blind = if blind {
            Some(
                peer_write(
                    &self.client,
                    &self.peer,
                    upsert_all(&after, &self.ours, &self.peer)?,
                )
                .await?,
            )
        } else {
            None
        };
        let peer_now = zone_records(&self.client, &self.peer, false).await?;
        Ok(Row {
            phase: name.to_string(),
            time,
            requests: after_stats.calls - stats.calls,
            retries: after_stats.retries - stats.retries,
            throttled: after_stats.throttled - stats.throttled,
            changes: report.changes,
            health_checks: report.health_checks_changed,
            unsynced: unsynced.len(),
            ops,
            check,
            peer_time,
            peer_requests,
            peer_changes,
            blind,
            zones_differ: differences(&after, &self.ours, &peer_now, &self.peer),
        })
    }

    /// `n` owned records (not markers, not aliases) edited by hand in both zones.
    async fn drift(&self, n: usize) -> anyhow::Result<()> {
        let ours = zone_records(&self.client, &self.ours, false).await?;
        let candidates: Vec<&ResourceRecordSet> = ours
            .values()
            .filter(|r| r.alias_target().is_none() && *r.r#type() == RrType::A)
            .collect();
        let step = (candidates.len() / n.max(1)).max(1);
        let picked: Vec<&ResourceRecordSet> =
            candidates.iter().step_by(step).take(n).copied().collect();
        for (zone, from, to) in [
            (&self.ours, &self.ours, &self.ours),
            (&self.peer, &self.ours, &self.peer),
        ] {
            let changes = picked
                .iter()
                .map(|r| {
                    Ok(Change::builder()
                        .action(ChangeAction::Upsert)
                        .resource_record_set(rebuild(r, from, to, Some(&["192.0.2.254"]))?)
                        .build()?)
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            peer_write(&self.client, zone, changes).await?;
        }
        Ok(())
    }
}

async fn run(args: &Args, rps: f64) -> anyhow::Result<(Vec<Row>, usize, usize)> {
    let moto = Moto::start(&args.python, !args.stock_moto).await?;
    eprintln!(
        "moto on {} (pid {:?}, {}), provider at {rps} requests/s",
        moto.addr,
        moto.pid(),
        if args.stock_moto { "stock" } else { "patched" }
    );
    let endpoint = moto.endpoint();
    let client = Client::new(&sdk(&endpoint));
    let ours = create_zone(&client, "bench-ours").await?;
    let peer = create_zone(&client, "bench-peer").await?;
    let config: ProviderConfig = serde_json::from_value(json!({
        "name": "aws",
        "type": "route53",
        "zone": ours,
        "endpointUrl": endpoint,
        "requestsPerSecond": rps,
    }))?;
    let config = ProviderConfig {
        batch_size: args.batch_size.unwrap_or(config.batch_size),
        ..config
    };
    let provider = Route53Provider::new(&config, &sdk(&endpoint)).await?;
    let bench = Bench {
        moto,
        client,
        provider,
        ours,
        peer,
        options: SyncOptions {
            owner: Owner::new("bench-federation"),
            dry_run: false,
            batch_size: config.batch_size,
        },
    };
    let healthy = desired(1, workload(args.ingresses, "").iter(), &[]).record_sets;
    let failing = desired(2, workload(args.ingresses, FAILING).iter(), &[]).record_sets;
    let mut rows = Vec::new();
    let result = async {
        rows.push(
            bench
                .phase("1. first sync, empty zone", &healthy, false, false)
                .await?,
        );
        rows.push(
            bench
                .phase("2. resync, nothing changed", &healthy, true, false)
                .await?,
        );
        rows.push(
            bench
                .phase(&format!("3. {FAILING} unhealthy"), &failing, false, true)
                .await?,
        );
        rows.push(
            bench
                .phase(
                    &format!("3b. {FAILING} healthy again"),
                    &healthy,
                    false,
                    true,
                )
                .await?,
        );
        bench.drift(args.drift).await?;
        rows.push(
            bench
                .phase(
                    &format!("4. resync after {} hand edits", args.drift),
                    &healthy,
                    true,
                    true,
                )
                .await?,
        );
        anyhow::Ok(())
    }
    .await;
    let records = zone_records(&bench.client, &bench.ours, true)
        .await
        .map(|r| r.len());
    let routed = zone_records(&bench.client, &bench.ours, false)
        .await
        .map(|r| r.len());
    if result.is_err() {
        let log = std::fs::read_to_string(&bench.moto.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        eprintln!(
            "moto's log, last lines:\n{}",
            lines[lines.len().saturating_sub(30)..].join("\n")
        );
    }
    bench.moto.stop().await;
    result?;
    Ok((rows, records?, routed?))
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "—".into()
    } else {
        format!("{:.1}×", a / b)
    }
}

fn print(rps: f64, rows: &[Row]) {
    println!();
    println!("#### provider at {rps} requests/s");
    println!();
    println!(
        "| phase | sync time | requests | changes | health checks changed | per request | peer time | peer requests (changes) | time ÷ peer | requests ÷ peer | at 5 req/s: ours / peer |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.1} | {} | {} ({}) | {} | {} | {} / {} |",
            r.phase,
            secs(r.time),
            r.requests,
            r.changes,
            r.health_checks,
            if r.requests == 0 {
                0.0
            } else {
                r.changes as f64 / r.requests as f64
            },
            secs(r.peer_time),
            r.peer_requests,
            r.peer_changes,
            if r.peer_requests == 0 {
                "—".into()
            } else {
                ratio(r.time.as_secs_f64(), r.peer_time.as_secs_f64())
            },
            ratio(r.requests as f64, r.peer_requests as f64),
            secs(Duration::from_secs_f64(r.requests as f64 / ROUTE53_RPS)),
            secs(Duration::from_secs_f64(
                r.peer_requests as f64 / ROUTE53_RPS
            )),
        );
    }
    println!();
    for r in rows {
        println!("- {}: {}", r.phase, r.ops);
        if r.retries + r.throttled > 0 || r.unsynced > 0 {
            println!(
                "  retries {}, throttled {}, names not synced {}",
                r.retries, r.throttled, r.unsynced
            );
        }
        if let Some(c) = r.check {
            println!("  a second sync right after: {c} changes");
        }
        if let Some((t, n)) = r.blind {
            println!(
                "  blind peer (UPSERT everything, no listing): {} in {n} requests; ours ÷ blind: time {}, requests {}",
                secs(t),
                ratio(r.time.as_secs_f64(), t.as_secs_f64()),
                ratio(r.requests as f64, n as f64)
            );
        }
        println!(
            "  peer zone differs from ours in {} record sets",
            r.zones_differ
        );
    }
}

// ---------------------------------------------------------------------------------------
// Cloud DNS, against the local fake (tests/src/clouddns_fake.rs): the provider alone

struct CloudRow {
    phase: String,
    time: Duration,
    requests: u64,
    changes: usize,
    ops: String,
    check: Option<usize>,
}

/// Requests the fake recorded, by method and the path's last segment.
fn fake_ops(fake: &CloudDnsFake, from: usize) -> (String, usize) {
    let requests = fake.requests();
    let mut ops: BTreeMap<String, u64> = BTreeMap::new();
    for r in requests.iter().skip(from) {
        let last = r.path.rsplit('/').next().unwrap_or_default();
        *ops.entry(format!("{} {last}", r.method)).or_default() += 1;
    }
    let text = ops
        .iter()
        .map(|(op, n)| format!("{op} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    (text, requests.len())
}

async fn run_clouddns(args: &Args, rps: f64) -> anyhow::Result<(Vec<CloudRow>, usize)> {
    let fake = CloudDnsFake::start("bench-project", "example-com", APEX).await;
    let config: ProviderConfig = serde_json::from_value(json!({
        "name": "gcp",
        "type": "clouddns",
        "zone": "example-com",
        "project": "bench-project",
        "endpointUrl": fake.endpoint(),
        "healthCheck": "projects/bench-project/global/healthChecks/clusters",
        "requestsPerSecond": rps,
    }))?;
    let provider = CloudDnsProvider::connect(&config, Auth::for_config(&config)).await?;
    let options = SyncOptions {
        owner: Owner::new("bench-federation"),
        dry_run: false,
        batch_size: config.batch_size,
    };
    let healthy = desired(1, workload(args.ingresses, "").iter(), &[]).record_sets;
    let failing = desired(2, workload(args.ingresses, FAILING).iter(), &[]).record_sets;
    let sync = async |sets: &[PolicyRecordSet]| -> anyhow::Result<SyncReport> {
        let refs: Vec<&PolicyRecordSet> =
            sets.iter().filter(|s| provider.manages(&s.name)).collect();
        Ok(provider.sync(&refs, &options).await?)
    };
    let mut rows = Vec::new();
    let phases: [(String, &[PolicyRecordSet], bool, bool); 5] = [
        (
            "1. first sync, empty zone".into(),
            healthy.as_slice(),
            false,
            false,
        ),
        (
            "2. resync, nothing changed".into(),
            healthy.as_slice(),
            false,
            false,
        ),
        (
            format!("3. {FAILING} unhealthy"),
            failing.as_slice(),
            false,
            true,
        ),
        (
            format!("3b. {FAILING} healthy again"),
            healthy.as_slice(),
            false,
            true,
        ),
        (
            format!("4. resync after {} hand edits", args.drift),
            healthy.as_slice(),
            true,
            true,
        ),
    ];
    for (name, sets, drift, check) in phases {
        if drift {
            // Hand edits: the TTL of `--drift` owned record sets.
            let owned: Vec<serde_json::Value> = fake
                .rrsets()
                .into_iter()
                .filter(|r| {
                    let n = r["name"].as_str().unwrap_or_default();
                    n != format!("{APEX}.") && !n.starts_with("_fedingress-")
                })
                .collect();
            let step = (owned.len() / args.drift.max(1)).max(1);
            for mut r in owned.into_iter().step_by(step).take(args.drift) {
                r["ttl"] = json!(1234);
                fake.put_rrset(r);
            }
        }
        let (_, from) = fake_ops(&fake, 0);
        let stats = provider.call_stats();
        let start = Instant::now();
        let report = sync(sets).await?;
        let time = start.elapsed();
        let requests = provider.call_stats().calls - stats.calls;
        let (ops, _) = fake_ops(&fake, from);
        let unsynced = report.names.values().filter(|r| !r.synced).count();
        if unsynced > 0 {
            eprintln!("  clouddns {name}: {unsynced} names not synced");
        }
        let check = if check {
            Some(sync(sets).await?.changes)
        } else {
            None
        };
        rows.push(CloudRow {
            phase: name,
            time,
            requests,
            changes: report.changes,
            ops,
            check,
        });
    }
    Ok((rows, fake.rrsets().len()))
}

fn print_clouddns(rps: f64, rows: &[CloudRow], rrsets: usize) {
    println!();
    println!(
        "#### Cloud DNS fake, provider at {rps} requests/s ({rrsets} record sets in the zone at the end, NS and SOA included)"
    );
    println!();
    println!("| phase | sync time | requests | changes | per request | requests |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {:.1} | {} |",
            r.phase,
            secs(r.time),
            r.requests,
            r.changes,
            if r.requests == 0 {
                0.0
            } else {
                r.changes as f64 / r.requests as f64
            },
            r.ops
        );
    }
    for r in rows {
        if let Some(c) = r.check {
            println!("- {}: a second sync right after: {c} changes", r.phase);
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut kinds = BTreeMap::new();
    for s in desired(1, workload(args.ingresses, "").iter(), &[]).record_sets {
        *kinds.entry(format!("{:?}", s.policy)).or_insert(0usize) += 1;
    }
    println!(
        "provider-bench {}: {} ingresses, 6 clusters in 3 regions, desired record sets by policy {kinds:?}",
        today(),
        args.ingresses
    );
    for rps in &args.rps {
        let (rows, records, routed) = run(&args, *rps).await?;
        println!(
            "zone after the run: {records} record sets ({routed} routed, {} ownership markers)",
            records - routed
        );
        print(*rps, &rows);
    }
    if !args.no_clouddns {
        for rps in &args.rps {
            let (rows, rrsets) = run_clouddns(&args, *rps).await?;
            print_clouddns(*rps, &rows, rrsets);
        }
    }
    Ok(())
}
