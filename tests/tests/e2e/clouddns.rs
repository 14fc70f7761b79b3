//! The Google Cloud DNS provider against the local Cloud DNS fake
//! ([`fedingress_tests::clouddns_fake`]), through the real `google-cloud-dns-v1` client:
//! every strategy's mapping (with golden request bodies under `tests/golden/clouddns/`,
//! rewritten with `FEDINGRESS_UPDATE_GOLDEN=1`), idempotence, ownership, drift repair,
//! throttling, dry run, per-name isolation of a rejected change, paging and deletion.
//!
//! `real_cloud_dns` runs against real Cloud DNS only when
//! `FEDINGRESS_REAL_CLOUDDNS_PROJECT`, `FEDINGRESS_REAL_CLOUDDNS_ZONE` and Application
//! Default Credentials are present; otherwise it says it skipped.

#![allow(clippy::unwrap_used)]

use fedingress_api::cluster::Provider as Cloud;
use fedingress_api::ingress::RecordType;
use fedingress_dns::Location;
use fedingress_providers::clouddns::{Auth, CloudDnsProvider};
use fedingress_providers::config::ProviderConfig;
use fedingress_providers::publish::{
    DnsProvider, HealthEndpoint, HealthProtocol, Owner, Policy, PolicyRecordSet, SyncOptions,
    SyncReport, Target,
};
use fedingress_tests::clouddns_fake::CloudDnsFake;
use fedingress_tests::fedctl::golden;
use serde_json::{Value, json};

const PROJECT: &str = "fedingress-test";
const ZONE: &str = "example-com";
const HEALTH_CHECK: &str = "projects/fedingress-test/global/healthChecks/clusters";
const HEALTH_CHECK_URL: &str =
    "https://www.googleapis.com/compute/v1/projects/fedingress-test/global/healthChecks/clusters";

fn config(endpoint: &str, health_check: Option<&str>) -> ProviderConfig {
    let mut config = json!({
        "name": "gcp",
        "type": "clouddns",
        "zone": ZONE,
        "project": PROJECT,
        "endpointUrl": endpoint,
        "domains": ["example.com"],
        "requestsPerSecond": 1000.0,
    });
    if let Some(hc) = health_check {
        config["healthCheck"] = json!(hc);
    }
    serde_json::from_value(config).unwrap()
}

async fn start(health_check: Option<&str>) -> (CloudDnsFake, CloudDnsProvider) {
    let fake = CloudDnsFake::start(PROJECT, ZONE, "example.com").await;
    let config = config(&fake.endpoint(), health_check);
    assert_eq!(Auth::for_config(&config), Auth::Anonymous);
    let provider = CloudDnsProvider::connect(&config, Auth::for_config(&config))
        .await
        .expect("connecting to the Cloud DNS fake");
    (fake, provider)
}

fn options(dry_run: bool) -> SyncOptions {
    SyncOptions {
        owner: Owner { id: "hub-1".into() },
        dry_run,
        batch_size: 100,
    }
}

/// Three clusters: on AWS in Frankfurt, on GKE in us-east4, on premises in Singapore.
fn cluster(name: &str) -> Target {
    let (cloud, region, lat, lon, v4) = match name {
        "eu-aws" => (Cloud::Aws, "eu-central-1", 50.11, 8.68, "192.0.2.10"),
        "us-gke" => (Cloud::Gcp, "us-east4", 39.04, -77.49, "192.0.2.20"),
        _ => (Cloud::OnPrem, "sg-dc1", 1.35, 103.82, "192.0.2.30"),
    };
    Target {
        cluster: name.into(),
        values: vec![v4.into()],
        hostname: None,
        weight: 1,
        tier: 0,
        location: Location {
            region: region.into(),
            latitude: lat,
            longitude: lon,
        },
        cloud,
        health: Some(HealthEndpoint {
            ip: v4.parse().ok(),
            hostname: None,
            port: 443,
            protocol: HealthProtocol::Tcp,
            path: None,
            host: None,
        }),
    }
}

/// The cluster with its IPv6 address (2001:db8::<last octet of its IPv4>).
fn v6(mut target: Target) -> Target {
    let last = target.values[0].rsplit('.').next().unwrap().to_string();
    target.values = vec![format!("2001:db8::{last}")];
    target
}

fn set(name: &str, type_: RecordType, policy: Policy, targets: Vec<Target>) -> PolicyRecordSet {
    PolicyRecordSet {
        name: name.into(),
        type_,
        ttl: 30,
        owner_ref: format!("default/{}", name.split('.').next().unwrap()),
        dns_name: name.into(),
        policy,
        targets,
    }
}

fn all() -> Vec<Target> {
    vec![cluster("eu-aws"), cluster("us-gke"), cluster("ap-onprem")]
}

async fn sync(provider: &CloudDnsProvider, sets: &[PolicyRecordSet], dry_run: bool) -> SyncReport {
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    provider
        .sync(&refs, &options(dry_run))
        .await
        .expect("sync against the Cloud DNS fake")
}

/// Keys sorted at every level, pretty: the request bodies as a golden file.
fn normalised(bodies: &[Value]) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let sorted: std::collections::BTreeMap<&String, Value> =
                    o.iter().map(|(k, v)| (k, sort(v))).collect();
                serde_json::to_value(sorted).unwrap()
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    let mut out = String::new();
    for body in bodies {
        out.push_str("POST /dns/v1/projects/fedingress-test/managedZones/example-com/changes\n");
        out.push_str(&serde_json::to_string_pretty(&sort(body)).unwrap());
        out.push('\n');
    }
    out
}

fn assert_synced(report: &SyncReport) {
    for (name, result) in &report.names {
        assert!(result.synced, "{name} not synced: {}", result.message);
    }
}

/// One representative sync per strategy and health-check setting: the request bodies
/// the client sent match the golden files, the fake accepted them under Google's rules,
/// and a second sync changes nothing.
#[tokio::test]
async fn every_strategy_maps_to_its_cloud_dns_shape() {
    let weighted = || {
        let mut t = all();
        t[0].weight = 3;
        t[2].weight = 0;
        t.truncate(2);
        set("weighted.example.com", RecordType::A, Policy::Weighted, t)
    };
    let failover = || {
        let mut t = all();
        t[1].tier = 1;
        t[2].tier = 2;
        set("failover.example.com", RecordType::A, Policy::Failover, t)
    };
    let cname = || {
        let t = all()
            .into_iter()
            .map(|mut t| {
                t.hostname = Some(format!("lb.{}.example.net", t.cluster));
                t.values.clear();
                t.health = None;
                t
            })
            .collect();
        set("app.example.com", RecordType::Cname, Policy::Geo, t)
    };
    let delegation = || {
        let only = |values: Vec<&str>| Target {
            cluster: String::new(),
            values: values.into_iter().map(String::from).collect(),
            hostname: None,
            weight: 1,
            tier: 0,
            location: Location {
                region: String::new(),
                latitude: 0.0,
                longitude: 0.0,
            },
            cloud: Cloud::Other,
            health: None,
        };
        let mut ns = set(
            "gslb.example.com",
            RecordType::Ns,
            Policy::Simple,
            vec![only(vec!["ns1.gslb.example.com."])],
        );
        ns.owner_ref = "zone/gslb.example.com".into();
        let mut glue = set(
            "ns1.gslb.example.com",
            RecordType::A,
            Policy::Simple,
            vec![only(vec!["198.51.100.53"])],
        );
        glue.owner_ref = "zone/gslb.example.com".into();
        glue.dns_name = "gslb.example.com".into();
        vec![ns, glue]
    };
    let cases: Vec<(&str, Option<&str>, Vec<PolicyRecordSet>)> = vec![
        ("wrr-health-checked", Some(HEALTH_CHECK), vec![weighted()]),
        ("wrr", None, vec![weighted()]),
        ("primary-backup", Some(HEALTH_CHECK), vec![failover()]),
        ("failover-unchecked", None, vec![failover()]),
        (
            "geo-health-checked",
            Some(HEALTH_CHECK),
            vec![set("geo.example.com", RecordType::A, Policy::Geo, all())],
        ),
        (
            "latency-aaaa",
            None,
            vec![set(
                "latency.example.com",
                RecordType::Aaaa,
                Policy::Latency,
                all().into_iter().map(v6).collect(),
            )],
        ),
        (
            "multivalue",
            Some(HEALTH_CHECK),
            vec![set(
                "rr.example.com",
                RecordType::A,
                Policy::Multivalue,
                all(),
            )],
        ),
        ("cname-geo", Some(HEALTH_CHECK), vec![cname()]),
        ("delegation", None, delegation()),
    ];
    for (case, health_check, sets) in cases {
        let (fake, provider) = start(health_check).await;
        let report = sync(&provider, &sets, false).await;
        assert_synced(&report);
        assert!(report.changes > 0, "{case}: nothing changed");
        golden(
            &format!("clouddns/{case}.txt"),
            &normalised(&fake.change_bodies()),
        );
        fake.clear_requests();
        let again = sync(&provider, &sets, false).await;
        assert_synced(&again);
        assert_eq!(
            again.changes, 0,
            "{case}: the second sync changed {again:?}"
        );
        assert!(
            fake.change_bodies().is_empty(),
            "{case}: a sync in step sent changes"
        );
    }
}

/// The shapes themselves, field by field, so a reader need not open the golden files.
#[tokio::test]
async fn routing_policies_hold_what_the_strategies_mean() {
    let (fake, provider) = start(Some(HEALTH_CHECK)).await;
    let mut weighted = all();
    weighted[0].weight = 3;
    let mut failover = all();
    failover[1].tier = 1;
    failover[2].tier = 1;
    let sets = [
        set("w.example.com", RecordType::A, Policy::Weighted, weighted),
        set("f.example.com", RecordType::A, Policy::Failover, failover),
        set("g.example.com", RecordType::A, Policy::Geo, all()),
        set("r.example.com", RecordType::A, Policy::Multivalue, all()),
    ];
    let report = sync(&provider, &sets, false).await;
    assert_synced(&report);

    let w = fake.rrset("w.example.com", "A").unwrap();
    assert!(w.get("rrdatas").is_none(), "{w}");
    assert_eq!(w["routingPolicy"]["healthCheck"], HEALTH_CHECK_URL);
    let items = w["routingPolicy"]["wrr"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["weight"], 3.0);
    assert_eq!(
        items[0]["healthCheckedTargets"]["externalEndpoints"],
        json!(["192.0.2.10"])
    );

    let f = fake.rrset("f.example.com", "A").unwrap();
    let pb = &f["routingPolicy"]["primaryBackup"];
    assert_eq!(
        pb["primaryTargets"]["externalEndpoints"],
        json!(["192.0.2.10"])
    );
    assert_eq!(pb["trickleTraffic"], 0.0);
    let backups: Vec<&str> = pb["backupGeoTargets"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["location"].as_str().unwrap())
        .collect();
    // us-gke on GCP keeps its own region; the Singapore data centre lands in the
    // nearest Google Cloud region.
    assert_eq!(backups, ["asia-southeast1", "us-east4"]);

    let g = fake.rrset("g.example.com", "A").unwrap();
    let locations: Vec<&str> = g["routingPolicy"]["geo"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["location"].as_str().unwrap())
        .collect();
    assert_eq!(locations, ["asia-southeast1", "europe-west3", "us-east4"]);

    let r = fake.rrset("r.example.com", "A").unwrap();
    assert_eq!(
        r["rrdatas"],
        json!(["192.0.2.10", "192.0.2.20", "192.0.2.30"])
    );
    assert!(r.get("routingPolicy").is_none());

    // Every record set carries this federation's marker.
    let marker = fake.rrset("_fedingress-a.w.example.com", "TXT").unwrap();
    assert!(
        marker["rrdatas"][0]
            .as_str()
            .unwrap()
            .contains("fedingress/owner=hub-1,fedingress/resource=default/w"),
        "{marker}"
    );

    // Status and explain.
    let w_records = &report.names["w.example.com"].records;
    let policies: Vec<&str> = w_records.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(policies, ["wrr 3", "wrr 1", "wrr 1"]);
    assert_eq!(w_records[0].set_identifier, "eu-aws");
    assert_eq!(w_records[0].health_check, HEALTH_CHECK_URL);
    let f_records = &report.names["f.example.com"].records;
    assert_eq!(f_records[0].policy, "primaryBackup primary");
    assert_eq!(f_records[1].policy, "primaryBackup backup asia-southeast1");
    let paris = Location {
        region: "paris".into(),
        latitude: 48.86,
        longitude: 2.35,
    };
    let g_records = &report.names["g.example.com"].records;
    let said = provider.explain(g_records, &paris);
    assert!(said.contains("192.0.2.10 (geo europe-west3)"), "{said}");
    let said = provider.explain(w_records, &paris);
    assert!(said.contains("192.0.2.10 60 %"), "{said}");
    let singapore = Location {
        region: "sg".into(),
        latitude: 1.3,
        longitude: 103.8,
    };
    let said = provider.explain(f_records, &singapore);
    assert!(
        said.contains("primary targets 192.0.2.10")
            && said.contains("192.0.2.30 (geo asia-southeast1)"),
        "{said}"
    );
}

#[tokio::test]
async fn failover_without_a_health_check_is_the_active_tier_and_says_so() {
    let (fake, provider) = start(None).await;
    let mut targets = all();
    targets[0].tier = 1;
    let report = sync(
        &provider,
        &[set(
            "f.example.com",
            RecordType::A,
            Policy::Failover,
            targets,
        )],
        false,
    )
    .await;
    assert_synced(&report);
    let f = fake.rrset("f.example.com", "A").unwrap();
    assert_eq!(f["rrdatas"], json!(["192.0.2.20", "192.0.2.30"]));
    let message = &report.names["f.example.com"].message;
    assert!(message.contains("active tier only"), "{message}");
}

#[tokio::test]
async fn a_foreign_record_set_is_never_touched() {
    let (fake, provider) = start(None).await;
    let foreign =
        json!({"name": "shop.example.com.", "type": "A", "ttl": 300, "rrdatas": ["203.0.113.7"]});
    fake.put_rrset(foreign.clone());
    let report = sync(
        &provider,
        &[
            set("shop.example.com", RecordType::A, Policy::Multivalue, all()),
            set("mine.example.com", RecordType::A, Policy::Multivalue, all()),
        ],
        false,
    )
    .await;
    let shop = &report.names["shop.example.com"];
    assert!(!shop.synced);
    assert!(
        shop.message
            .contains("without this federation's ownership marker"),
        "{}",
        shop.message
    );
    assert!(report.names["mine.example.com"].synced);
    let mut stored = fake.rrset("shop.example.com", "A").unwrap();
    stored.as_object_mut().unwrap().remove("kind");
    assert_eq!(stored, foreign);
    for body in fake.change_bodies() {
        assert!(
            !body.to_string().contains("\"shop.example.com.\""),
            "{body}"
        );
    }
    // Nor is it deleted when nothing is desired.
    let _ = sync(&provider, &[], false).await;
    assert!(fake.rrset("shop.example.com", "A").is_some());
    assert!(fake.rrset("mine.example.com", "A").is_none());
    assert!(fake.rrset("example.com", "SOA").is_some());
}

#[tokio::test]
async fn drift_by_hand_is_repaired_with_exact_deletions() {
    let (fake, provider) = start(Some(HEALTH_CHECK)).await;
    let sets = [
        set("geo.example.com", RecordType::A, Policy::Geo, all()),
        set("rr.example.com", RecordType::A, Policy::Multivalue, all()),
    ];
    assert_synced(&sync(&provider, &sets, false).await);
    let wanted = fake.rrset("geo.example.com", "A").unwrap();
    // Someone edits one record set (a geo item dropped, an unknown field added) and
    // deletes another.
    let mut drifted = wanted.clone();
    drifted["routingPolicy"]["geo"]["items"]
        .as_array_mut()
        .unwrap()
        .pop();
    drifted["ttl"] = json!(600);
    fake.put_rrset(drifted.clone());
    fake.delete_rrset("rr.example.com", "A");
    fake.clear_requests();

    let report = sync(&provider, &sets, false).await;
    assert_synced(&report);
    assert_eq!(report.changes, 2);
    assert_eq!(fake.rrset("geo.example.com", "A").unwrap(), wanted);
    assert!(fake.rrset("rr.example.com", "A").is_some());
    // The deletion was the drifted record set exactly as listed.
    let bodies = fake.change_bodies();
    let deletions: Vec<&Value> = bodies
        .iter()
        .flat_map(|b| b["deletions"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(deletions.len(), 1, "{bodies:?}");
    let mut deleted = deletions[0].clone();
    deleted["kind"] = json!("dns#resourceRecordSet");
    assert_eq!(deleted, drifted);

    // Record data listed back in another order is the same record set.
    let mut reordered = fake.rrset("rr.example.com", "A").unwrap();
    reordered["rrdatas"].as_array_mut().unwrap().reverse();
    fake.put_rrset(reordered);
    fake.clear_requests();
    let report = sync(&provider, &sets, false).await;
    assert_eq!(report.changes, 0, "{report:?}");
    assert!(fake.change_bodies().is_empty());
}

#[tokio::test]
async fn throttling_is_retried_with_backoff() {
    let (fake, provider) = start(None).await;
    fake.throttle(3);
    let report = sync(
        &provider,
        &[set(
            "rr.example.com",
            RecordType::A,
            Policy::Multivalue,
            all(),
        )],
        false,
    )
    .await;
    assert_synced(&report);
    let stats = provider.call_stats();
    assert_eq!(stats.throttled, 3, "{stats:?}");
    assert_eq!(stats.retries, 3, "{stats:?}");
    assert!(fake.rrset("rr.example.com", "A").is_some());
}

#[tokio::test]
async fn a_backend_error_is_retried() {
    let (fake, provider) = start(None).await;
    fake.unavailable(2);
    let report = sync(
        &provider,
        &[set(
            "rr.example.com",
            RecordType::A,
            Policy::Multivalue,
            all(),
        )],
        false,
    )
    .await;
    assert_synced(&report);
    let stats = provider.call_stats();
    assert_eq!((stats.retries, stats.throttled), (2, 0), "{stats:?}");
}

#[tokio::test]
async fn throttling_beyond_the_attempts_is_an_error_for_the_sync() {
    let (fake, provider) = start(None).await;
    fake.throttle(100);
    let refs: Vec<&PolicyRecordSet> = Vec::new();
    let error = provider.sync(&refs, &options(false)).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("rrsets.list") && text.contains("rateLimitExceeded"),
        "{text}"
    );
}

#[tokio::test]
async fn a_dry_run_lists_and_plans_only() {
    let (fake, provider) = start(None).await;
    let sets = [set(
        "rr.example.com",
        RecordType::A,
        Policy::Multivalue,
        all(),
    )];
    let report = sync(&provider, &sets, true).await;
    assert!(report.dry_run);
    assert_eq!(
        report.changes, 2,
        "the record set and its marker: {report:?}"
    );
    let name = &report.names["rr.example.com"];
    assert!(!name.synced);
    assert!(name.message.contains("dry run"), "{}", name.message);
    assert_eq!(name.records[0].values.len(), 3, "what it would hold");
    assert!(fake.change_bodies().is_empty());
    assert!(fake.rrset("rr.example.com", "A").is_none());
    assert!(
        fake.requests().iter().all(|r| r.method == "GET"),
        "a dry run only reads"
    );
}

#[tokio::test]
async fn a_rejected_name_does_not_block_the_others() {
    let (fake, provider) = start(None).await;
    fake.refuse_name("bad.example.com");
    let report = sync(
        &provider,
        &[
            set("bad.example.com", RecordType::A, Policy::Multivalue, all()),
            set("good.example.com", RecordType::A, Policy::Multivalue, all()),
        ],
        false,
    )
    .await;
    let bad = &report.names["bad.example.com"];
    assert!(!bad.synced);
    assert!(
        bad.message.contains("rejected by the provider") && bad.message.contains("forbidden"),
        "{}",
        bad.message
    );
    assert!(report.names["good.example.com"].synced);
    assert!(fake.rrset("good.example.com", "A").is_some());
    // One batch with both names, then each name alone.
    assert_eq!(fake.change_bodies().len(), 3);
}

#[tokio::test]
async fn every_page_is_read() {
    let (fake, provider) = start(None).await;
    fake.set_page_size(2);
    let sets: Vec<PolicyRecordSet> = (0..5)
        .map(|i| {
            set(
                &format!("n{i}.example.com"),
                RecordType::A,
                Policy::Multivalue,
                all(),
            )
        })
        .collect();
    assert_synced(&sync(&provider, &sets, false).await);
    fake.clear_requests();
    let again = sync(&provider, &sets, false).await;
    assert_eq!(again.changes, 0, "{again:?}");
    let tokens: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/rrsets"))
        .map(|r| {
            r.query
                .iter()
                .find(|(k, _)| k == "pageToken")
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect();
    // 5 record sets, 5 markers, NS and SOA: 12 record sets in 6 pages.
    assert_eq!(tokens.len(), 6, "{tokens:?}");
    assert_eq!(tokens[0], "");
    assert_eq!(tokens[1], "page-2");
}

#[tokio::test]
async fn manages_names_inside_the_zone_and_its_domains() {
    let fake = CloudDnsFake::start(PROJECT, ZONE, "example.com").await;
    let mut config = config(&fake.endpoint(), None);
    config.domains = vec!["shop.example.com".into()];
    let provider = CloudDnsProvider::connect(&config, Auth::Anonymous)
        .await
        .unwrap();
    assert_eq!(provider.dns_name(), "example.com");
    assert!(provider.manages("shop.example.com"));
    assert!(provider.manages("eu.shop.example.com"));
    assert!(!provider.manages("other.example.com"));
    assert!(!provider.manages("shop.example.org"));
    assert_eq!(provider.kind(), "clouddns");

    let mut wrong = config.clone();
    wrong.zone = "nope".into();
    let error = CloudDnsProvider::connect(&wrong, Auth::Anonymous)
        .await
        .unwrap_err();
    assert!(
        !error.is_retryable() && error.to_string().contains("'nope' does not exist"),
        "{error}"
    );
}

/// Opt-in: real Cloud DNS. Needs `FEDINGRESS_REAL_CLOUDDNS_PROJECT`,
/// `FEDINGRESS_REAL_CLOUDDNS_ZONE` (a public managed zone) and Application Default
/// Credentials; creates and deletes `fedingress-test-<pid>.<zone>` (a wrr record set and
/// its marker).
#[tokio::test]
async fn real_cloud_dns() {
    let project = std::env::var("FEDINGRESS_REAL_CLOUDDNS_PROJECT").ok();
    let zone = std::env::var("FEDINGRESS_REAL_CLOUDDNS_ZONE").ok();
    let adc = std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").is_some()
        || std::env::var_os("HOME").is_some_and(|home| {
            std::path::Path::new(&home)
                .join(".config/gcloud/application_default_credentials.json")
                .exists()
        });
    let (Some(project), Some(zone), true) = (project, zone, adc) else {
        eprintln!(
            "skipped: real Cloud DNS needs FEDINGRESS_REAL_CLOUDDNS_PROJECT, FEDINGRESS_REAL_CLOUDDNS_ZONE and Application Default Credentials"
        );
        return;
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let config: ProviderConfig = serde_json::from_value(json!({
        "name": "gcp-real", "type": "clouddns", "zone": zone, "project": project,
    }))
    .unwrap();
    let provider = CloudDnsProvider::connect(&config, Auth::for_config(&config))
        .await
        .expect("connecting to real Cloud DNS");
    let name = format!(
        "fedingress-test-{}.{}",
        std::process::id(),
        provider.dns_name()
    );
    let mut weighted = all();
    weighted[0].weight = 3;
    let sets = [set(&name, RecordType::A, Policy::Weighted, weighted)];
    let owner = SyncOptions {
        owner: Owner {
            id: "fedingress-real-test".into(),
        },
        dry_run: false,
        batch_size: 100,
    };
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = provider.sync(&refs, &owner).await.unwrap();
    assert!(report.names[&name].synced, "{report:?}");
    let again = provider.sync(&refs, &owner).await.unwrap();
    assert_eq!(again.changes, 0, "{again:?}");
    let cleanup = provider.sync(&[], &owner).await.unwrap();
    assert!(cleanup.changes >= 2, "{cleanup:?}");
}

/// The fake refuses what Google's reference says Cloud DNS refuses, so a change it
/// accepts in the tests above is one of the shapes the API allows.
#[tokio::test]
async fn the_fake_enforces_the_reference_rules() {
    let fake = CloudDnsFake::start(PROJECT, ZONE, "example.com").await;
    let url = format!(
        "{}/dns/v1/projects/{PROJECT}/managedZones/{ZONE}/changes",
        fake.endpoint()
    );
    let client = reqwest::Client::new();
    let post = |body: Value| {
        let request = client.post(&url).json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (status, body)
        }
    };
    let a = |name: &str, ip: &str| json!({"name": name, "type": "A", "ttl": 30, "rrdatas": [ip]});
    let hc = HEALTH_CHECK_URL;
    let cases = [
        (
            "rrdatas and a routing policy",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "rrdatas": ["192.0.2.1"],
                   "routingPolicy": {"wrr": {"items": [{"weight": 1, "rrdatas": ["192.0.2.1"]}]}}}]}),
            400,
            "invalid",
        ),
        (
            "two routing policies",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "routingPolicy": {
                   "wrr": {"items": [{"weight": 1, "rrdatas": ["192.0.2.1"]}]},
                   "geo": {"items": [{"location": "us-east1", "rrdatas": ["192.0.2.1"]}]}}}]}),
            400,
            "invalid",
        ),
        (
            "a negative weight",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "routingPolicy": {
                   "wrr": {"items": [{"weight": -1, "rrdatas": ["192.0.2.1"]}]}}}]}),
            400,
            "invalid",
        ),
        (
            "a geo item without a location",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "routingPolicy": {
                   "geo": {"items": [{"rrdatas": ["192.0.2.1"]}]}}}]}),
            400,
            "invalid",
        ),
        (
            "two geo items at one location",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "routingPolicy": {
                   "geo": {"items": [{"location": "us-east1", "rrdatas": ["192.0.2.1"]},
                                     {"location": "us-east1", "rrdatas": ["192.0.2.2"]}]}}}]}),
            400,
            "invalid",
        ),
        (
            "primaryBackup without primary targets",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "routingPolicy": {
                   "healthCheck": hc,
                   "primaryBackup": {"backupGeoTargets": {"items": [{"location": "us-east1", "rrdatas": ["192.0.2.1"]}]}}}}]}),
            400,
            "invalid",
        ),
        (
            "external endpoints without a health check",
            json!({"additions": [{"name": "x.example.com.", "type": "A", "ttl": 30, "routingPolicy": {
                   "wrr": {"items": [{"weight": 1, "healthCheckedTargets": {"externalEndpoints": ["192.0.2.1"]}}]}}}]}),
            400,
            "invalid",
        ),
        (
            "health-checked targets in a CNAME",
            json!({"additions": [{"name": "x.example.com.", "type": "CNAME", "ttl": 30, "routingPolicy": {
                   "healthCheck": hc,
                   "wrr": {"items": [{"weight": 1, "healthCheckedTargets": {"externalEndpoints": ["192.0.2.1"]}}]}}}]}),
            400,
            "invalid",
        ),
        (
            "a name outside the zone",
            json!({"additions": [a("x.example.org.", "192.0.2.1")]}),
            400,
            "invalid",
        ),
        (
            "a deletion that matches nothing",
            json!({"deletions": [a("x.example.com.", "192.0.2.1")]}),
            412,
            "conditionNotMet",
        ),
    ];
    for (what, body, status, reason) in cases {
        let (got, answer) = post(body).await;
        assert_eq!(got, status, "{what}: {answer}");
        assert_eq!(
            answer["error"]["errors"][0]["reason"], reason,
            "{what}: {answer}"
        );
        assert_eq!(answer["error"]["code"], status, "{what}: {answer}");
    }
    // An addition that exists: 409; a deletion must match exactly (ttl included); the
    // change is atomic (the valid addition beside a failing deletion is not applied).
    assert_eq!(
        post(json!({"additions": [a("x.example.com.", "192.0.2.1")]}))
            .await
            .0,
        200
    );
    let (got, answer) = post(json!({"additions": [a("x.example.com.", "192.0.2.9")]})).await;
    assert_eq!(
        (got, answer["error"]["errors"][0]["reason"].clone()),
        (409, json!("alreadyExists"))
    );
    let mut other_ttl = a("x.example.com.", "192.0.2.1");
    other_ttl["ttl"] = json!(60);
    let (got, _) =
        post(json!({"deletions": [other_ttl], "additions": [a("y.example.com.", "192.0.2.2")]}))
            .await;
    assert_eq!(got, 412);
    assert!(fake.rrset("y.example.com", "A").is_none(), "not atomic");
    let (got, answer) = post(json!({"additions": [{"name": "x.example.com.", "type": "CNAME", "ttl": 30, "rrdatas": ["lb.example.net."]}]})).await;
    assert_eq!(
        (got, answer["error"]["errors"][0]["reason"].clone()),
        (400, json!("cnameResourceRecordSetConflict"))
    );
    // Replacement in one change: the exact deletion and the new addition.
    let (got, change) = post(json!({"deletions": [a("x.example.com.", "192.0.2.1")], "additions": [a("x.example.com.", "192.0.2.7")]})).await;
    assert_eq!(got, 200, "{change}");
    assert_eq!(change["status"], "pending");
    let id = change["id"].as_str().unwrap();
    let done: Value = client
        .get(format!("{url}/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["status"], "done");
    assert_eq!(
        fake.rrset("x.example.com", "A").unwrap()["rrdatas"],
        json!(["192.0.2.7"])
    );
}
