//! The Route53 provider against moto's emulator (`moto_server` on loopback, started per
//! test), through the real `aws-sdk-route53`: every policy, the health-check life cycle,
//! ownership, drift repair, throttling, dry run and idempotence. What the tests read back
//! is read with the SDK directly, not through the provider.
//!
//! moto's quirks that shape these tests (moto 5.2):
//! - it accepts `GeoProximityLocation` and drops it: a geoproximity record comes back
//!   with its set identifier and no routing policy. The Geo test checks what was sent
//!   (through the proxy) and does not check idempotence;
//! - a `DELETE` with a `SetIdentifier` deletes every record set of the zone with that
//!   set identifier, whatever its name: tests that delete keep one DNS name per cluster
//!   name in a zone, and foreign record sets have no set identifier;
//! - a `CREATE` identical to an earlier one (a record set deleted by hand and put back)
//!   is refused as "already exists" (moto checks its change journal); real Route53 takes
//!   it. The provider writes with `UPSERT`, for its own reasons (see `to_actions`);
//! - health checks are always healthy and nothing answers DNS.
//!
//! Plus [`real_route53`], against the real service, only when
//! `FEDINGRESS_REAL_ROUTE53_ZONE` and AWS credentials are in the environment.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_route53::Client;
use aws_sdk_route53::config::{Credentials, SharedCredentialsProvider};
use aws_sdk_route53::types::{
    Change, ChangeAction, ChangeBatch, HealthCheckConfig, HealthCheckType, ResourceRecord,
    ResourceRecordSet, RrType,
};
use fedingress_api::cluster::Provider as Cloud;
use fedingress_api::ingress::RecordType;
use fedingress_dns::Location;
use fedingress_providers::config::ProviderConfig;
use fedingress_providers::publish::{
    DnsProvider, HealthEndpoint, HealthProtocol, Owner, Policy, PolicyRecordSet, SyncOptions,
    SyncReport, Target,
};
use fedingress_providers::route53::Route53Provider;
use fedingress_tests::moto::Moto;
use fedingress_tests::throttle::ThrottleProxy;
use serde_json::json;

const APEX: &str = "example.com";

fn sdk(endpoint: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDFEDINGRESSTEST",
            "test-secret",
            None,
            None,
            "fedingress-tests",
        )))
        .endpoint_url(endpoint)
        .build()
}

/// A moto with one hosted zone, and an SDK client straight to it (not through the
/// provider) to read and to edit by hand.
struct Zone {
    moto: Moto,
    client: Client,
    id: String,
}

async fn zone() -> Zone {
    let moto = tokio::task::spawn_blocking(Moto::start)
        .await
        .unwrap()
        .expect("starting moto_server");
    let client = Client::new(&sdk(&moto.endpoint()));
    let out = client
        .create_hosted_zone()
        .name(APEX)
        .caller_reference(format!("zone-{}", moto.pid()))
        .send()
        .await
        .expect("CreateHostedZone on moto");
    let id = out
        .hosted_zone()
        .unwrap()
        .id()
        .trim_start_matches("/hostedzone/")
        .to_string();
    Zone { moto, client, id }
}

impl Zone {
    fn config(&self, endpoint: &str, extra: serde_json::Value) -> ProviderConfig {
        let mut c = json!({
            "name": "aws",
            "type": "route53",
            "zone": format!("/hostedzone/{}", self.id),
            "endpointUrl": endpoint,
            // Fast tests: the rate limit is the call policy's (tested in fedingress-dns).
            "requestsPerSecond": 1000.0,
        });
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                c.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(c).unwrap()
    }

    async fn provider(&self, extra: serde_json::Value) -> Route53Provider {
        let endpoint = self.moto.endpoint();
        Route53Provider::new(&self.config(&endpoint, extra), &sdk(&endpoint))
            .await
            .expect("Route53Provider on moto")
    }

    /// Every record set but the zone's own NS and SOA, in words, with the raw SDK fields.
    async fn records(&self) -> Vec<String> {
        let out = self
            .client
            .list_resource_record_sets()
            .hosted_zone_id(&self.id)
            .max_items(300)
            .send()
            .await
            .unwrap();
        assert!(!out.is_truncated(), "more than one page in a test zone");
        let mut v: Vec<String> = out
            .resource_record_sets()
            .iter()
            .filter(|r| !matches!(r.r#type(), RrType::Ns | RrType::Soa))
            .map(describe)
            .collect();
        v.sort();
        v
    }

    /// The records without the ownership markers.
    async fn routed(&self) -> Vec<String> {
        self.records()
            .await
            .into_iter()
            .filter(|r| !r.starts_with("_fedingress-"))
            .collect()
    }

    /// (id, caller reference, config) of every health check in the account.
    async fn health_checks(&self) -> Vec<(String, String, HealthCheckConfig)> {
        let out = self.client.list_health_checks().send().await.unwrap();
        out.health_checks()
            .iter()
            .map(|h| {
                (
                    h.id().to_string(),
                    h.caller_reference().to_string(),
                    h.health_check_config().unwrap().clone(),
                )
            })
            .collect()
    }

    async fn change(&self, action: ChangeAction, set: ResourceRecordSet) {
        self.client
            .change_resource_record_sets()
            .hosted_zone_id(&self.id)
            .change_batch(
                ChangeBatch::builder()
                    .changes(
                        Change::builder()
                            .action(action)
                            .resource_record_set(set)
                            .build()
                            .unwrap(),
                    )
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }

    /// The record set (name, type, set identifier) as the SDK returns it.
    async fn get(&self, name: &str, type_: &str, id: Option<&str>) -> ResourceRecordSet {
        let out = self
            .client
            .list_resource_record_sets()
            .hosted_zone_id(&self.id)
            .send()
            .await
            .unwrap();
        out.resource_record_sets()
            .iter()
            .find(|r| {
                r.name().trim_end_matches('.') == name
                    && r.r#type().as_str() == type_
                    && r.set_identifier() == id
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {name} {type_} {id:?} in the zone"))
    }
}

/// `name TYPE [set id] policy values hc` from the SDK's fields.
fn describe(r: &ResourceRecordSet) -> String {
    let mut s = format!("{} {}", r.name().trim_end_matches('.'), r.r#type().as_str());
    if let Some(id) = r.set_identifier() {
        s.push_str(&format!(" [{id}]"));
    }
    if let Some(w) = r.weight() {
        s.push_str(&format!(" weighted {w}"));
    }
    if r.multi_value_answer() == Some(true) {
        s.push_str(" multivalue");
    }
    if let Some(f) = r.failover() {
        s.push_str(&format!(" failover {}", f.as_str()));
    }
    if let Some(region) = r.region() {
        s.push_str(&format!(" latency {}", region.as_str()));
    }
    if let Some(a) = r.alias_target() {
        s.push_str(&format!(
            " alias {} {}{}",
            a.hosted_zone_id(),
            a.dns_name().trim_end_matches('.'),
            if a.evaluate_target_health() {
                " evaluate"
            } else {
                ""
            }
        ));
    }
    let mut values: Vec<&str> = r.resource_records().iter().map(|v| v.value()).collect();
    values.sort();
    if !values.is_empty() {
        s.push_str(&format!(" {}", values.join(" ")));
    }
    if r.health_check_id().is_some() {
        s.push_str(" hc");
    }
    s
}

fn location(region: &str, latitude: f64, longitude: f64) -> Location {
    Location {
        region: region.into(),
        latitude,
        longitude,
    }
}

fn target(cluster: &str, ip: &str, at: Location) -> Target {
    Target {
        cluster: cluster.into(),
        values: vec![ip.into()],
        hostname: None,
        weight: 1,
        tier: 0,
        location: at,
        cloud: Cloud::Aws,
        health: Some(HealthEndpoint {
            ip: Some(ip.parse().unwrap()),
            hostname: None,
            port: 443,
            protocol: HealthProtocol::Tcp,
            path: None,
            host: None,
        }),
    }
}

fn eu() -> Location {
    location("eu-west-1", 53.35, -6.26)
}
fn us() -> Location {
    location("us-east-1", 39.04, -77.49)
}
fn ap() -> Location {
    location("ap-south-1", 19.08, 72.88)
}

fn set(name: &str, policy: Policy, targets: Vec<Target>) -> PolicyRecordSet {
    PolicyRecordSet {
        name: name.into(),
        type_: RecordType::A,
        ttl: 30,
        owner_ref: format!("default/{}", name.split('.').next().unwrap()),
        dns_name: name.into(),
        policy,
        targets,
    }
}

fn options() -> SyncOptions {
    SyncOptions {
        owner: Owner::new("test-federation"),
        dry_run: false,
        batch_size: 100,
    }
}

async fn sync(p: &Route53Provider, sets: &[PolicyRecordSet]) -> SyncReport {
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = p.sync(&refs, &options()).await.expect("sync");
    for (name, r) in &report.names {
        assert!(r.synced, "{name} not synced: {}", r.message);
    }
    report
}

/// A second sync of the same record sets changes nothing.
async fn assert_idempotent(p: &Route53Provider, sets: &[PolicyRecordSet]) {
    let again = sync(p, sets).await;
    assert_eq!(
        (again.changes, again.health_checks_changed),
        (0, 0),
        "second sync: {again:#?}"
    );
}

#[tokio::test]
async fn weighted_records_with_health_checks_and_markers() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    assert_eq!(p.apex(), APEX);
    assert!(p.manages("shop.example.com") && !p.manages("shop.example.org"));
    let mut a = target("eu", "192.0.2.1", eu());
    a.weight = 3;
    let b = target("us", "192.0.2.2", us());
    let sets = [set("shop.example.com", Policy::Weighted, vec![a, b])];
    let report = sync(&p, &sets).await;
    assert_eq!(report.health_checks_changed, 2);
    assert_eq!(
        z.records().await,
        [
            "_fedingress-a.shop.example.com TXT \"heritage=fedingress,fedingress/owner=test-federation,fedingress/resource=default/shop\"",
            "shop.example.com A [eu] weighted 3 192.0.2.1 hc",
            "shop.example.com A [us] weighted 1 192.0.2.2 hc",
        ]
    );
    let published = &report.names["shop.example.com"].records;
    let policies: Vec<&str> = published.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(policies, ["weighted 3", "weighted 1"]);
    // The health checks: TCP to each cluster's IP and port, the configured settings.
    let checks = z.health_checks().await;
    let mut probed: Vec<String> = checks
        .iter()
        .map(|(_, reference, c)| {
            assert!(reference.starts_with("fedingress-"), "{reference}");
            assert_eq!(c.r#type(), &HealthCheckType::Tcp);
            assert_eq!(
                (c.request_interval(), c.failure_threshold()),
                (Some(30), Some(3))
            );
            format!("{}:{}", c.ip_address().unwrap(), c.port().unwrap())
        })
        .collect();
    probed.sort();
    assert_eq!(probed, ["192.0.2.1:443", "192.0.2.2:443"]);
    // Each record refers to the check of its own endpoint.
    let record = z.get("shop.example.com", "A", Some("eu")).await;
    let (_, _, c) = checks
        .iter()
        .find(|(id, ..)| Some(id.as_str()) == record.health_check_id())
        .expect("the eu record's health check exists");
    assert_eq!(c.ip_address(), Some("192.0.2.1"));
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn weights_above_255_are_scaled_keeping_ratios() {
    let z = zone().await;
    let p = z
        .provider(json!({"healthChecks": {"enabled": false}}))
        .await;
    let mut a = target("eu", "192.0.2.1", eu());
    a.weight = 1000;
    let mut b = target("us", "192.0.2.2", us());
    b.weight = 500;
    let sets = [set("shop.example.com", Policy::Weighted, vec![a, b])];
    sync(&p, &sets).await;
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [eu] weighted 255 192.0.2.1",
            "shop.example.com A [us] weighted 128 192.0.2.2",
        ]
    );
    assert!(
        z.health_checks().await.is_empty(),
        "health checks are disabled"
    );
}

#[tokio::test]
async fn round_robin_is_multivalue() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let sets = [set(
        "shop.example.com",
        Policy::Multivalue,
        vec![
            target("ap", "192.0.2.3", ap()),
            target("eu", "192.0.2.1", eu()),
            target("us", "192.0.2.2", us()),
        ],
    )];
    sync(&p, &sets).await;
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [ap] multivalue 192.0.2.3 hc",
            "shop.example.com A [eu] multivalue 192.0.2.1 hc",
            "shop.example.com A [us] multivalue 192.0.2.2 hc",
        ]
    );
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn failover_with_two_tiers_is_primary_and_secondary() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut b = target("us", "192.0.2.2", us());
    b.tier = 1;
    let sets = [set(
        "shop.example.com",
        Policy::Failover,
        vec![target("eu", "192.0.2.1", eu()), b],
    )];
    let report = sync(&p, &sets).await;
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [eu] failover PRIMARY 192.0.2.1 hc",
            "shop.example.com A [us] failover SECONDARY 192.0.2.2 hc",
        ]
    );
    let client = location("client", 50.0, 8.0);
    let explained = p.explain(&report.names["shop.example.com"].records, &client);
    assert!(
        explained.contains("PRIMARY eu (192.0.2.1)") && explained.contains("SECONDARY us"),
        "{explained}"
    );
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn failover_with_three_tiers_chains_aliases_in_the_zone() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut b = target("eu2", "192.0.2.4", eu());
    b.tier = 0;
    let mut c = target("us", "192.0.2.2", us());
    c.tier = 1;
    let mut d = target("ap", "192.0.2.3", ap());
    d.tier = 2;
    let sets = [set(
        "shop.example.com",
        Policy::Failover,
        vec![target("eu", "192.0.2.1", eu()), b, c, d],
    )];
    sync(&p, &sets).await;
    let zone_id = &z.id;
    assert_eq!(
        z.routed().await,
        [
            "_f1.shop.example.com A [ap] failover SECONDARY 192.0.2.3 hc".to_string(),
            "_f1.shop.example.com A [us] failover PRIMARY 192.0.2.2 hc".to_string(),
            "_t0.shop.example.com A [eu2] multivalue 192.0.2.4 hc".to_string(),
            "_t0.shop.example.com A [eu] multivalue 192.0.2.1 hc".to_string(),
            format!(
                "shop.example.com A [tier-0] failover PRIMARY alias {zone_id} _t0.shop.example.com evaluate"
            ),
            format!(
                "shop.example.com A [tiers-1+] failover SECONDARY alias {zone_id} _f1.shop.example.com evaluate"
            ),
        ]
    );
    // The helper names are owned like any other (name, type): each has its marker.
    let markers: Vec<String> = z
        .records()
        .await
        .into_iter()
        .filter(|r| r.starts_with("_fedingress-"))
        .map(|r| r.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(
        markers,
        [
            "_fedingress-a._f1.shop.example.com",
            "_fedingress-a._t0.shop.example.com",
            "_fedingress-a.shop.example.com",
        ]
    );
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn a_strategy_change_replaces_the_record_sets() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut b = target("us", "192.0.2.2", us());
    b.tier = 1;
    let failover = [set(
        "shop.example.com",
        Policy::Failover,
        vec![target("eu", "192.0.2.1", eu()), b.clone()],
    )];
    sync(&p, &failover).await;
    // Same clusters, now weighted: Route53 cannot turn a failover record into a weighted
    // one in place, so each is deleted and written anew in one batch.
    b.tier = 0;
    let weighted = [set(
        "shop.example.com",
        Policy::Weighted,
        vec![target("eu", "192.0.2.1", eu()), b],
    )];
    let report = sync(&p, &weighted).await;
    assert_eq!(report.changes, 2, "{report:#?}");
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [eu] weighted 1 192.0.2.1 hc",
            "shop.example.com A [us] weighted 1 192.0.2.2 hc",
        ]
    );
    assert_idempotent(&p, &weighted).await;
}

#[tokio::test]
async fn latency_regions_from_aws_clusters_or_the_nearest_region() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut onprem = target("fra", "192.0.2.9", location("frankfurt-dc", 50.11, 8.68));
    onprem.cloud = Cloud::OnPrem;
    let sets = [set(
        "shop.example.com",
        Policy::Latency,
        vec![
            target("eu", "192.0.2.1", eu()),
            onprem,
            target("us-a", "192.0.2.2", us()),
            target("us-b", "192.0.2.3", us()),
        ],
    )];
    let report = sync(&p, &sets).await;
    // Two clusters in one region: one latency record (Route53 allows one per region),
    // an alias to their multivalue records.
    assert_eq!(
        z.routed().await,
        [
            "_us-east-1.shop.example.com A [us-a] multivalue 192.0.2.2 hc".to_string(),
            "_us-east-1.shop.example.com A [us-b] multivalue 192.0.2.3 hc".to_string(),
            "shop.example.com A [eu] latency eu-west-1 192.0.2.1 hc".to_string(),
            "shop.example.com A [fra] latency eu-central-1 192.0.2.9 hc".to_string(),
            format!(
                "shop.example.com A [us-east-1] latency us-east-1 alias {} _us-east-1.shop.example.com evaluate",
                z.id
            ),
        ]
    );
    let munich = location("client", 48.14, 11.58);
    let explained = p.explain(&report.names["shop.example.com"].records, &munich);
    assert!(
        explained.contains("fra (192.0.2.9), in eu-central-1"),
        "{explained}"
    );
    assert_idempotent(&p, &sets).await;
}

/// moto drops `GeoProximityLocation` (see the module docs): what the provider sent is
/// read from the proxy, what moto kept from the zone.
#[tokio::test]
async fn geo_is_geoproximity_with_the_cluster_coordinates() {
    let z = zone().await;
    let proxy = ThrottleProxy::start(z.moto.addr, 0).await.unwrap();
    let endpoint = proxy.endpoint();
    let p = Route53Provider::new(&z.config(&endpoint, json!({})), &sdk(&endpoint))
        .await
        .unwrap();
    let sets = [set(
        "shop.example.com",
        Policy::Geo,
        vec![
            target("eu", "192.0.2.1", location("eu-central-1", 50.1109, 8.6821)),
            target("us", "192.0.2.2", us()),
        ],
    )];
    let report = sync(&p, &sets).await;
    let sent = proxy.forwarded_changes().join("\n");
    assert!(
        sent.contains(
            "<GeoProximityLocation><Coordinates><Latitude>50.11</Latitude><Longitude>8.68</Longitude></Coordinates><Bias>0</Bias></GeoProximityLocation>"
        ),
        "{sent}"
    );
    assert!(
        sent.contains("<Latitude>39.04</Latitude><Longitude>-77.49</Longitude>"),
        "{sent}"
    );
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [eu] 192.0.2.1 hc",
            "shop.example.com A [us] 192.0.2.2 hc",
        ]
    );
    let records = &report.names["shop.example.com"].records;
    let policies: Vec<&str> = records.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(
        policies,
        ["geoproximity 50.11,8.68", "geoproximity 39.04,-77.49"]
    );
    let explained = p.explain(records, &location("client", 48.86, 2.35));
    assert!(
        explained.contains("nearest record, eu (192.0.2.1)"),
        "{explained}"
    );
}

#[tokio::test]
async fn anycast_is_one_simple_record_set() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut anycast = target("", "198.51.100.7", location("", 0.0, 0.0));
    anycast.values.push("198.51.100.8".into());
    anycast.health = None;
    let sets = [set("shop.example.com", Policy::Simple, vec![anycast])];
    let report = sync(&p, &sets).await;
    assert_eq!(
        z.routed().await,
        ["shop.example.com A 198.51.100.7 198.51.100.8"]
    );
    assert_eq!(report.names["shop.example.com"].records[0].policy, "simple");
    assert!(z.health_checks().await.is_empty());
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn host_names_are_cnames_and_aws_load_balancers_aliases() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let lb = |cluster: &str, host: &str| {
        let mut t = target(cluster, "192.0.2.1", eu());
        t.values.clear();
        t.hostname = Some(host.into());
        t.health = None;
        t
    };
    let mut cname = set(
        "web.example.com",
        Policy::Weighted,
        vec![lb("eu", "lb-eu.example.net"), lb("us", "lb-us.example.net")],
    );
    cname.type_ = RecordType::Cname;
    let mut elb = set(
        "shop.example.com",
        Policy::Weighted,
        vec![
            lb("eu", "k8s-shop-1234567890.eu-west-1.elb.amazonaws.com"),
            lb("us", "k8s-shop-0abc.elb.us-east-2.amazonaws.com"),
        ],
    );
    elb.type_ = RecordType::Cname;
    let sets = [elb, cname];
    let report = sync(&p, &sets).await;
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [eu] weighted 1 alias Z32O12XQLNTSW2 k8s-shop-1234567890.eu-west-1.elb.amazonaws.com evaluate",
            "shop.example.com A [us] weighted 1 alias ZLMOA37VPKANP k8s-shop-0abc.elb.us-east-2.amazonaws.com evaluate",
            "web.example.com CNAME [eu] weighted 1 lb-eu.example.net",
            "web.example.com CNAME [us] weighted 1 lb-us.example.net",
        ]
    );
    assert_eq!(report.names.len(), 2);
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn health_check_life_cycle() {
    let z = zone().await;
    // Someone else's health check in the same account: never touched.
    z.client
        .create_health_check()
        .caller_reference("someone-else-1")
        .health_check_config(
            HealthCheckConfig::builder()
                .r#type(HealthCheckType::Tcp)
                .ip_address("203.0.113.1")
                .port(443)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let ids = |checks: &[(String, String, HealthCheckConfig)]| -> BTreeMap<String, String> {
        checks
            .iter()
            .filter(|(_, r, _)| r.starts_with("fedingress-"))
            .map(|(id, _, c)| (c.ip_address().unwrap().to_string(), id.clone()))
            .collect()
    };
    let two = [set(
        "shop.example.com",
        Policy::Multivalue,
        vec![
            target("eu", "192.0.2.1", eu()),
            target("us", "192.0.2.2", us()),
        ],
    )];
    let p = z.provider(json!({})).await;
    sync(&p, &two).await;
    let created = ids(&z.health_checks().await);
    assert_eq!(created.len(), 2);

    // A cluster leaves: its record set and then its health check go.
    let one = [set(
        "shop.example.com",
        Policy::Multivalue,
        vec![target("eu", "192.0.2.1", eu())],
    )];
    let report = sync(&p, &one).await;
    assert_eq!(report.health_checks_changed, 1);
    let left = ids(&z.health_checks().await);
    assert_eq!(
        left,
        BTreeMap::from([("192.0.2.1".to_string(), created["192.0.2.1"].clone())])
    );
    assert_eq!(
        z.routed().await,
        ["shop.example.com A [eu] multivalue 192.0.2.1 hc"]
    );

    // The request interval cannot change in place: a new check, the record moves to it,
    // the old one goes.
    let p10 = z
        .provider(json!({"healthChecks": {"requestIntervalSeconds": 10}}))
        .await;
    let report = sync(&p10, &one).await;
    assert_eq!(report.health_checks_changed, 2, "one created, one deleted");
    let checks = z.health_checks().await;
    let now = ids(&checks);
    assert_eq!(now.len(), 1);
    assert_ne!(now["192.0.2.1"], created["192.0.2.1"]);
    let (_, _, c) = checks
        .iter()
        .find(|(id, ..)| *id == now["192.0.2.1"])
        .unwrap();
    assert_eq!(c.request_interval(), Some(10));
    let record = z.get("shop.example.com", "A", Some("eu")).await;
    assert_eq!(record.health_check_id(), Some(now["192.0.2.1"].as_str()));
    assert_idempotent(&p10, &one).await;

    // Disabled: the records lose their checks, the checks go.
    let off = z
        .provider(json!({"healthChecks": {"enabled": false}}))
        .await;
    sync(&off, &one).await;
    assert!(ids(&z.health_checks().await).is_empty());
    assert_eq!(
        z.routed().await,
        ["shop.example.com A [eu] multivalue 192.0.2.1"]
    );
    let all = z.health_checks().await;
    assert_eq!(all.len(), 1, "someone else's health check is still there");
    assert_eq!(all[0].1, "someone-else-1");
}

#[tokio::test]
async fn private_addresses_go_without_a_health_check_and_the_report_says_so() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let sets = [set(
        "shop.example.com",
        Policy::Multivalue,
        vec![
            target("eu", "192.0.2.1", eu()),
            target("lab", "10.0.0.7", us()),
        ],
    )];
    let report = sync(&p, &sets).await;
    assert_eq!(
        z.routed().await,
        [
            "shop.example.com A [eu] multivalue 192.0.2.1 hc",
            "shop.example.com A [lab] multivalue 10.0.0.7",
        ]
    );
    let message = &report.names["shop.example.com"].message;
    assert!(
        message.contains("no health check for tcp 10.0.0.7:443"),
        "{message}"
    );
    assert_eq!(z.health_checks().await.len(), 1);
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn foreign_record_sets_are_never_touched_and_the_conflict_is_reported() {
    let z = zone().await;
    let foreign = |name: &str, ip: &str| {
        ResourceRecordSet::builder()
            .name(name)
            .r#type(RrType::A)
            .ttl(300)
            .resource_records(ResourceRecord::builder().value(ip).build().unwrap())
            .build()
            .unwrap()
    };
    // At a name we want, and elsewhere.
    z.change(
        ChangeAction::Create,
        foreign("shop.example.com", "203.0.113.1"),
    )
    .await;
    z.change(
        ChangeAction::Create,
        foreign("mail.example.com", "203.0.113.2"),
    )
    .await;
    let before = z.records().await;
    let p = z.provider(json!({})).await;
    let sets = [
        set(
            "shop.example.com",
            Policy::Weighted,
            vec![target("eu", "192.0.2.1", eu())],
        ),
        set(
            "web.example.com",
            Policy::Weighted,
            vec![target("us", "192.0.2.2", us())],
        ),
    ];
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = p.sync(&refs, &options()).await.unwrap();
    let shop = &report.names["shop.example.com"];
    assert!(!shop.synced);
    assert!(
        shop.message
            .contains("without this federation's ownership marker"),
        "{}",
        shop.message
    );
    assert!(
        report.names["web.example.com"].synced,
        "the other name is published"
    );
    let after = z.records().await;
    for r in &before {
        assert!(after.contains(r), "{r} was touched: {after:#?}");
    }
    assert!(after.contains(&"web.example.com A [us] weighted 1 192.0.2.2 hc".to_string()));
    assert!(
        !after.iter().any(|r| r.starts_with("_fedingress-a.shop.")),
        "{after:#?}"
    );
}

/// A name in conflict is never published, so it gets no health checks (they are
/// billed): none while someone else holds it, its checks once the conflict is gone, and
/// none again once someone else takes it over (issue 23, item 3).
#[tokio::test]
async fn a_conflicting_name_has_no_health_checks() {
    let z = zone().await;
    let foreign = |ip: &str| {
        ResourceRecordSet::builder()
            .name("shop.example.com")
            .r#type(RrType::A)
            .ttl(300)
            .resource_records(ResourceRecord::builder().value(ip).build().unwrap())
            .build()
            .unwrap()
    };
    // Our health checks, by the address they probe.
    let probed = || async {
        let mut ips: Vec<String> = z
            .health_checks()
            .await
            .iter()
            .filter(|(_, reference, _)| reference.starts_with("fedingress-"))
            .map(|(_, _, c)| c.ip_address().unwrap().to_string())
            .collect();
        ips.sort();
        ips
    };
    z.change(ChangeAction::Create, foreign("203.0.113.1")).await;
    let p = z.provider(json!({})).await;
    // shop's three endpoints; web (another name, own endpoint) is published meanwhile.
    let sets = [
        set(
            "shop.example.com",
            Policy::Multivalue,
            vec![
                target("eu", "192.0.2.1", eu()),
                target("us", "192.0.2.2", us()),
                target("ap", "192.0.2.3", ap()),
            ],
        ),
        set(
            "web.example.com",
            Policy::Multivalue,
            vec![target("lab", "192.0.2.4", eu())],
        ),
    ];
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = p.sync(&refs, &options()).await.unwrap();
    assert!(!report.names["shop.example.com"].synced, "{report:#?}");
    assert!(report.names["web.example.com"].synced, "{report:#?}");
    assert_eq!(report.health_checks_changed, 1, "web's only: {report:#?}");
    assert_eq!(
        probed().await,
        ["192.0.2.4"],
        "no check for the conflicting name"
    );
    // A resync changes nothing: still no check for shop.
    let again = p.sync(&refs, &options()).await.unwrap();
    assert_eq!(again.health_checks_changed, 0, "{again:#?}");
    assert_eq!(probed().await, ["192.0.2.4"]);

    // The conflict is gone: shop is published, with a check per endpoint.
    z.change(ChangeAction::Delete, foreign("203.0.113.1")).await;
    let report = sync(&p, &sets).await;
    assert_eq!(report.health_checks_changed, 3, "{report:#?}");
    assert_eq!(
        probed().await,
        ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"]
    );
    let shop: Vec<String> = z
        .routed()
        .await
        .into_iter()
        .filter(|r| r.starts_with("shop."))
        .collect();
    assert_eq!(
        shop,
        [
            "shop.example.com A [ap] multivalue 192.0.2.3 hc",
            "shop.example.com A [eu] multivalue 192.0.2.1 hc",
            "shop.example.com A [us] multivalue 192.0.2.2 hc",
        ]
    );

    // Someone else takes shop over (replaces our record sets and marker with their
    // own): it is a conflict again, and its checks go.
    for id in ["eu", "us", "ap"] {
        let ours = z.get("shop.example.com", "A", Some(id)).await;
        z.change(ChangeAction::Delete, ours).await;
    }
    let marker = z.get("_fedingress-a.shop.example.com", "TXT", None).await;
    z.change(ChangeAction::Delete, marker).await;
    z.change(ChangeAction::Create, foreign("203.0.113.2")).await;
    let report = p.sync(&refs, &options()).await.unwrap();
    assert!(!report.names["shop.example.com"].synced, "{report:#?}");
    assert_eq!(report.health_checks_changed, 3, "{report:#?}");
    assert_eq!(probed().await, ["192.0.2.4"], "shop's checks are deleted");
    assert!(
        z.records()
            .await
            .contains(&"shop.example.com A 203.0.113.2".to_string()),
        "the other holder's record set is untouched"
    );
}

#[tokio::test]
async fn drift_by_hand_is_repaired_by_the_next_sync() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut a = target("eu", "192.0.2.1", eu());
    a.weight = 3;
    let sets = [set(
        "shop.example.com",
        Policy::Weighted,
        vec![a, target("us", "192.0.2.2", us())],
    )];
    sync(&p, &sets).await;
    let want = z.routed().await;
    // Someone changes a weight and deletes the other record set by hand.
    let mut eu_record = z.get("shop.example.com", "A", Some("eu")).await;
    eu_record.weight = Some(7);
    z.change(ChangeAction::Upsert, eu_record).await;
    let us_record = z.get("shop.example.com", "A", Some("us")).await;
    z.change(ChangeAction::Delete, us_record).await;
    assert_ne!(z.routed().await, want);
    let report = sync(&p, &sets).await;
    assert_eq!(report.changes, 2, "{report:#?}");
    assert_eq!(z.routed().await, want);
    assert_idempotent(&p, &sets).await;
}

#[tokio::test]
async fn throttled_changes_are_retried_until_they_pass() {
    let z = zone().await;
    let proxy = ThrottleProxy::start(z.moto.addr, 2).await.unwrap();
    let endpoint = proxy.endpoint();
    let p = Route53Provider::new(&z.config(&endpoint, json!({})), &sdk(&endpoint))
        .await
        .unwrap();
    let sets = [set(
        "shop.example.com",
        Policy::Weighted,
        vec![target("eu", "192.0.2.1", eu())],
    )];
    let before = p.call_stats();
    sync(&p, &sets).await;
    let stats = p.call_stats();
    assert_eq!(proxy.throttled(), 2);
    assert_eq!(stats.throttled - before.throttled, 2, "{stats:?}");
    assert_eq!(stats.retries - before.retries, 2, "{stats:?}");
    assert_eq!(
        z.routed().await,
        ["shop.example.com A [eu] weighted 1 192.0.2.1 hc"]
    );
}

#[tokio::test]
async fn a_dry_run_changes_nothing_and_reports_the_changes() {
    let z = zone().await;
    let p = z.provider(json!({"dryRun": true})).await;
    let sets = [set(
        "shop.example.com",
        Policy::Weighted,
        vec![
            target("eu", "192.0.2.1", eu()),
            target("us", "192.0.2.2", us()),
        ],
    )];
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = p.sync(&refs, &options()).await.unwrap();
    assert!(report.dry_run);
    // Two record sets and their marker; two health checks.
    assert_eq!((report.changes, report.health_checks_changed), (3, 2));
    let shop = &report.names["shop.example.com"];
    assert_eq!(shop.changes, 3);
    let planned: Vec<String> = shop
        .records
        .iter()
        .map(|r| format!("{} [{}] {}", r.name, r.set_identifier, r.policy))
        .collect();
    assert_eq!(
        planned,
        [
            "shop.example.com [eu] weighted 1",
            "shop.example.com [us] weighted 1"
        ]
    );
    assert!(z.records().await.is_empty(), "the zone is unchanged");
    assert!(
        z.health_checks().await.is_empty(),
        "no health check was created"
    );
}

#[tokio::test]
async fn a_rejected_name_does_not_block_the_others() {
    let z = zone().await;
    let p = z.provider(json!({})).await;
    let mut bad = set(
        "bad name.example.com",
        Policy::Simple,
        vec![target("eu", "192.0.2.9", eu())],
    );
    bad.targets[0].health = None;
    let sets = [
        bad,
        set(
            "shop.example.com",
            Policy::Weighted,
            vec![target("eu", "192.0.2.1", eu())],
        ),
    ];
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = p.sync(&refs, &options()).await.unwrap();
    let bad = &report.names["bad name.example.com"];
    assert!(!bad.synced);
    assert!(
        bad.message.contains("rejected by the provider"),
        "{}",
        bad.message
    );
    assert!(report.names["shop.example.com"].synced);
    assert_eq!(
        z.routed().await,
        ["shop.example.com A [eu] weighted 1 192.0.2.1 hc"]
    );
}

/// Against the real Route53, only with `FEDINGRESS_REAL_ROUTE53_ZONE` (a hosted zone id
/// of a zone made for this, e.g. `test.example.com`) and AWS credentials. Publishes a
/// weighted record set with health checks at `fedingress-test-<pid>.<zone>`, checks
/// it, then deletes it (and the health checks) again.
#[tokio::test]
async fn real_route53() {
    let Ok(zone) = std::env::var("FEDINGRESS_REAL_ROUTE53_ZONE") else {
        eprintln!(
            "skipped: FEDINGRESS_REAL_ROUTE53_ZONE is not set (a Route53 hosted zone id to test against)"
        );
        return;
    };
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .load()
        .await;
    let Some(credentials) = sdk.credentials_provider() else {
        eprintln!("skipped: no AWS credentials provider in the environment");
        return;
    };
    if let Err(e) =
        aws_sdk_route53::config::ProvideCredentials::provide_credentials(&credentials).await
    {
        eprintln!("skipped: no AWS credentials in the environment ({e})");
        return;
    }
    let config: ProviderConfig = serde_json::from_value(json!({
        "name": "aws-real",
        "type": "route53",
        "zone": zone,
        "healthChecks": {"requestIntervalSeconds": 30, "failureThreshold": 3},
    }))
    .unwrap();
    let p = Route53Provider::new(&config, &sdk)
        .await
        .expect("the real hosted zone");
    let name = format!("fedingress-test-{}.{}", std::process::id(), p.apex());
    let owner = Owner::new(format!("fedingress-test-{}", std::process::id()));
    let opts = SyncOptions {
        owner,
        dry_run: false,
        batch_size: 100,
    };
    // Two addresses in one weighted record: the API reference says "one ResourceRecord per
    // weighted resource record set", which moto does not enforce; this run settles it.
    let mut a = target("eu", "192.0.2.1", eu());
    a.weight = 3;
    a.values.push("192.0.2.3".into());
    let sets = [set(
        &name,
        Policy::Weighted,
        vec![a, target("us", "192.0.2.2", us())],
    )];
    let refs: Vec<&PolicyRecordSet> = sets.iter().collect();
    let report = p.sync(&refs, &opts).await.expect("sync to Route53");
    let result = &report.names[&name];
    assert!(result.synced, "{}", result.message);
    let again = p.sync(&refs, &opts).await.expect("second sync");
    // Clean up before asserting on the second sync, so a failure leaves nothing behind.
    let empty = set(&name, Policy::Weighted, Vec::new());
    let cleanup = p.sync(&[&empty], &opts).await.expect("cleanup sync");
    assert!(cleanup.names.values().all(|n| n.synced), "{cleanup:#?}");
    assert_eq!(
        (again.changes, again.health_checks_changed),
        (0, 0),
        "{again:#?}"
    );
}
