//! DNS providers end to end: the real apiserver binary with `dns.providers` pointing at
//! a real `moto_server` (Route53), two standalone agents, kubectl, dig and fedctl.
//! Route53 is read back over its REST API (what the SDK sends), so the test sees what a
//! resolver on AWS would be given; Cloud DNS through the local fake of its REST API. Own
//! loopback blocks (101, 102); moto and the fake on 127.0.0.1.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_tests::clouddns_fake::CloudDnsFake;
use fedingress_tests::docs::{code_block, substitute};
use fedingress_tests::echo::Echo;
use fedingress_tests::fedctl::Fedctl;
use fedingress_tests::federation::{
    ClusterSpec, HubOptions, agent_config, condition, create_cluster, get_json, hub_config_opts,
    issue_token, kubectl, start_agent,
};
use fedingress_tests::moto::{Moto, aws_test_environment};
use fedingress_tests::{Kubectl, Process, binary, eventually};
use fedingress_testsupport::dns::dig_short;
use serde_json::Value;

const BLOCK: u8 = 101;
const CLOUDDNS_BLOCK: u8 = 102;
const WAIT: Duration = Duration::from_secs(60);

/// Route53's REST API on moto, as the SDK speaks it (moto routes a request to Route53
/// by the SigV4 credential scope of its Authorization header; the signature is not
/// checked).
struct Route53 {
    endpoint: String,
}

/// One record set as Route53 lists it.
#[derive(Debug, Clone)]
struct RecordSet {
    name: String,
    type_: String,
    set_identifier: String,
    values: Vec<String>,
}

impl Route53 {
    fn curl(&self, args: &[&str]) -> String {
        let out = Command::new("curl")
            .args(["-sS", "-H", "Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/route53/aws4_request, SignedHeaders=host, Signature=00"])
            .args(args)
            .output()
            .expect("curl is installed");
        assert!(
            out.status.success(),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates a hosted zone; returns its id (without `/hostedzone/`).
    fn create_zone(&self, name: &str) -> String {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><CreateHostedZoneRequest xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><Name>{name}</Name><CallerReference>e2e-{name}</CallerReference></CreateHostedZoneRequest>"
        );
        let answer = self.curl(&[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/xml",
            &format!("{}/2013-04-01/hostedzone", self.endpoint),
            "--data-binary",
            &body,
        ]);
        let id = between(&answer, "<Id>/hostedzone/", "</Id>")
            .unwrap_or_else(|| panic!("no hosted zone id in {answer}"));
        id.to_string()
    }

    /// Every record set of the zone.
    fn record_sets(&self, zone: &str) -> Vec<RecordSet> {
        let answer = self.curl(&[&format!(
            "{}/2013-04-01/hostedzone/{zone}/rrset",
            self.endpoint
        )]);
        answer
            .split("<ResourceRecordSet>")
            .skip(1)
            .map(|set| RecordSet {
                name: between(set, "<Name>", "</Name>")
                    .unwrap_or_default()
                    .to_string(),
                type_: between(set, "<Type>", "</Type>")
                    .unwrap_or_default()
                    .to_string(),
                set_identifier: between(set, "<SetIdentifier>", "</SetIdentifier>")
                    .unwrap_or_default()
                    .to_string(),
                values: set
                    .split("<Value>")
                    .skip(1)
                    .filter_map(|v| v.split_once("</Value>").map(|(v, _)| v.to_string()))
                    .collect(),
            })
            .collect()
    }

    /// The values of every `type_` record set named `name` (all set identifiers).
    fn values(&self, zone: &str, name: &str, type_: &str) -> Vec<String> {
        let mut values: Vec<String> = self
            .record_sets(zone)
            .into_iter()
            .filter(|r| r.name == name && r.type_ == type_)
            .flat_map(|r| r.values)
            .collect();
        values.sort();
        values
    }
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(start)?;
    Some(rest.split_once(end)?.0)
}

/// The hub with its providers, the two clusters and their echo backends.
struct Federation {
    _hub: Process,
    /// The apiserver's REST address (`http://…`).
    api: String,
    k: Kubectl,
    fedctl: Fedctl,
    /// The embedded DNS server: (IP, port).
    dns: (String, String),
    echoes: Vec<Option<Echo>>,
    specs: Vec<ClusterSpec>,
    _agents: Vec<Process>,
}

/// The hub on `block` with `providers` (YAML list items under `dns.providers`), two
/// clusters and the `shop` and `bad` ingresses' backends.
fn start(dir: &Path, block: u8, providers: &str) -> Federation {
    let dns = format!(
        "dns:
  listen: 127.0.{block}.1:0
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
    table:
    - {{cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}}
    - {{cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}}
  ownerId: e2e-federation
  providers:
{providers}"
    );
    start_with_dns(dir, block, &dns)
}

/// The hub on `block` with the `dns:` section `dns` (its listener on `127.0.<block>.1`),
/// two clusters and their echo backends.
fn start_with_dns(dir: &Path, block: u8, dns: &str) -> Federation {
    let config = hub_config_opts(dir, block, &HubOptions::with_extra(dns));
    let mut command = Command::new(binary("federation-apiserver"));
    command.arg("--config").arg(&config);
    aws_test_environment(&mut command, dir);
    let hub = Process::start(command, "federation-apiserver", Duration::from_secs(30))
        .expect("apiserver starts with dns.providers");
    let api = format!("http://{}", hub.addr("api"));
    let agent = format!("http://{}", hub.addr("agent"));
    let dns = hub.addr("dns");
    let (dns_ip, dns_port) = dns.rsplit_once(':').unwrap();
    let dns = (dns_ip.to_string(), dns_port.to_string());
    let k = kubectl(dir, &api);
    let specs = vec![
        ClusterSpec::numbered(block, 1, "europe-west1", 50.4, 3.8),
        ClusterSpec::numbered(block, 2, "us-east1", 39.0, -77.5),
    ];
    let mut agents = Vec::new();
    let mut echoes = Vec::new();
    for spec in &specs {
        echoes.push(Some(Echo::start(spec.backend).unwrap()));
        create_cluster(&k, dir, spec);
        let (_, token) = issue_token(&api, &spec.name).unwrap();
        agents.push(start_agent(
            &agent_config(dir, &agent, spec, &token),
            &spec.name,
        ));
    }
    Federation {
        _hub: hub,
        api,
        k,
        fedctl: Fedctl::new(&dir.join("kubeconfig")),
        dns,
        echoes,
        specs,
        _agents: agents,
    }
}

impl Federation {
    /// A FederatedIngress `name` (`<name>.fedingress.test`) on `port`, steered by
    /// `strategy` (YAML flow mapping).
    fn apply(&self, dir: &Path, name: &str, port: u16, strategy: &str) {
        self.apply_named(
            dir,
            name,
            &format!("{name}.fedingress.test"),
            port,
            strategy,
        );
    }

    /// A FederatedIngress `name` serving `dns_name` on `port`, steered by `strategy`.
    fn apply_named(&self, dir: &Path, name: &str, dns_name: &str, port: u16, strategy: &str) {
        let text = format!(
            "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: {name}\nspec:\n  rules:\n  - protocol: TCP\n    port: {port}\n    backend: {{service: echo, port: 9000}}\n  traffic:\n    dnsName: {dns_name}\n    ttl: 5\n    strategy: {strategy}\n"
        );
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        self.k.ok(&["apply", "-f", &path.display().to_string()]);
    }

    /// The apiserver's `/metrics` text.
    fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5", &format!("{}/metrics", self.api)])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn ingress(&self, name: &str) -> Value {
        get_json(&self.k, &["federatedingress", name])
    }

    fn ip(&self, n: usize) -> String {
        self.specs[n].bind.to_string()
    }

    fn dig(&self, name: &str) -> Vec<String> {
        let server = format!("{}:{}", self.dns.0, self.dns.1);
        let mut answers = dig_short(server.parse().unwrap(), &[name, "A"]);
        answers.sort();
        answers
    }
}

/// The entry of provider `name` in `status.dns.providers`.
fn provider(ingress: &Value, name: &str) -> Value {
    ingress["status"]["dns"]["providers"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["name"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The sorted values of the provider entry's records named `name`.
fn status_values(entry: &Value, name: &str) -> Vec<String> {
    let mut values: Vec<String> = entry["records"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["name"]
                .as_str()
                .is_some_and(|n| n.trim_end_matches('.') == name)
        })
        .flat_map(|r| r["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    values.sort();
    values
}

#[test]
fn route53_holds_what_the_hub_routes_and_a_rejecting_provider_stays_apart() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let moto = Moto::start().unwrap();
    let route53 = Route53 {
        endpoint: moto.endpoint(),
    };
    let zone = route53.create_zone("fedingress.test.");
    let parent = route53.create_zone("test.");
    let endpoint = moto.endpoint();
    let mut f = start(
        dir,
        BLOCK,
        &format!(
            "  - {{name: aws, type: route53, zone: {zone}, endpointUrl: '{endpoint}', domains: [shop.fedingress.test]}}
  - {{name: parent, type: route53, zone: {parent}, endpointUrl: '{endpoint}', domains: [fedingress.test], delegate: [fedingress.test]}}
  - {{name: broken, type: route53, zone: ZNOSUCHZONE00000000, endpointUrl: '{endpoint}', domains: [bad.fedingress.test]}}
"
        ),
    );
    f.apply(dir, "shop", 7100, "{type: RoundRobin}");
    f.apply(dir, "bad", 7101, "{type: RoundRobin}");
    let (c1, c2) = (f.ip(0), f.ip(1));
    let both = {
        let mut both = vec![c1.clone(), c2.clone()];
        both.sort();
        both
    };

    // Route53 holds both clusters' records of shop, and status says the provider synced.
    eventually(WAIT, "shop's A records in Route53", || {
        let values = route53.values(&zone, "shop.fedingress.test.", "A");
        if values == both {
            Ok(())
        } else {
            Err(format!("{values:?}; {}", moto.log_tail()))
        }
    });
    let first_serial = eventually(WAIT, "aws synced in shop's status, DNSReady True", || {
        let shop = f.ingress("shop");
        let aws = provider(&shop, "aws");
        let (ready, reason, message) = condition(&shop, "DNSReady");
        if aws["synced"] == true
            && status_values(&aws, "shop.fedingress.test") == both
            && ready == "True"
        {
            Ok(aws["observedSerial"].as_i64().unwrap())
        } else {
            Err(format!("DNSReady {ready} {reason}: {message}; {aws}"))
        }
    });
    let shop = f.ingress("shop");
    let providers = shop["status"]["dns"]["providers"].as_array().unwrap();
    assert_eq!(providers[0]["name"], "embedded", "{shop}");
    assert_eq!(providers.len(), 2, "only aws manages shop: {shop}");
    assert_eq!(providers[1]["type"], "route53");
    assert!(providers[1]["lastSyncTime"].is_string(), "{shop}");
    let (_, _, message) = condition(&shop, "DNSReady");
    assert!(message.contains("synced to aws"), "{message}");
    // Each record set carries its owner's TXT marker; the cluster is the set identifier.
    let sets = route53.record_sets(&zone);
    let identifiers: Vec<&str> = sets
        .iter()
        .filter(|r| r.name == "shop.fedingress.test." && r.type_ == "A")
        .map(|r| r.set_identifier.as_str())
        .collect();
    assert!(
        identifiers.contains(&"c1") && identifiers.contains(&"c2"),
        "{sets:?}"
    );
    assert!(
        sets.iter()
            .any(|r| r.type_ == "TXT" && r.values.iter().any(|v| v.contains("e2e-federation"))),
        "an ownership record: {sets:?}"
    );

    // The parent zone delegates the embedded zone to the embedded server, with glue.
    eventually(
        WAIT,
        "NS and glue of fedingress.test in the parent zone",
        || {
            let ns = route53.values(&parent, "fedingress.test.", "NS");
            let glue = route53.values(&parent, "ns1.fedingress.test.", "A");
            if ns
                .iter()
                .any(|v| v.trim_end_matches('.') == "ns1.fedingress.test")
                && glue == [format!("127.0.{BLOCK}.1")]
            {
                Ok(())
            } else {
                Err(format!("NS {ns:?}, glue {glue:?}"))
            }
        },
    );

    // The provider with an unknown hosted zone: bad's status and an Event say so, its
    // DNSReady is False, and the embedded server answers bad all the same.
    let (_, _, bad_message) = eventually(
        WAIT,
        "bad's DNSReady False from the broken provider",
        || {
            let bad = f.ingress("bad");
            let broken = provider(&bad, "broken");
            let (ready, reason, message) = condition(&bad, "DNSReady");
            if ready == "False" && reason == "ProviderNotSynced" && broken["synced"] == false {
                Ok((ready, reason, message))
            } else {
                Err(format!("DNSReady {ready} {reason}: {message}; {broken}"))
            }
        },
    );
    assert!(
        bad_message.contains("provider broken") && bad_message.contains("NoSuchHostedZone"),
        "{bad_message}"
    );
    let broken = provider(&f.ingress("bad"), "broken");
    assert!(
        broken["message"]
            .as_str()
            .unwrap()
            .contains("NoSuchHostedZone"),
        "{broken}"
    );
    eventually(WAIT, "a DNSProviderRejected event on bad", || {
        let events = get_json(&f.k, &["events"]);
        let found = events["items"].as_array().into_iter().flatten().any(|e| {
            e["reason"] == "DNSProviderRejected"
                && e["involvedObject"]["name"] == "bad"
                && e["message"].as_str().is_some_and(|m| m.contains("broken"))
        });
        if found {
            Ok(())
        } else {
            Err(events.to_string())
        }
    });
    assert_eq!(
        f.dig("bad.fedingress.test"),
        both,
        "the embedded server still answers"
    );
    assert_eq!(f.dig("shop.fedingress.test"), both);
    // The failing provider does not hold shop back.
    assert_eq!(condition(&f.ingress("shop"), "DNSReady").0, "True");

    // fedctl shows the provider's records and what a client would get from them.
    let described = f.fedctl.ok(&["describe", "ingress", "shop"]);
    let section = described
        .split("DNS providers:")
        .nth(1)
        .unwrap_or_else(|| panic!("no DNS providers section:\n{described}"));
    assert!(
        section.contains("aws") && section.contains("route53"),
        "{described}"
    );
    let records = described
        .split("Records in aws (route53):")
        .nth(1)
        .unwrap_or_else(|| panic!("no records of aws:\n{described}"));
    assert!(
        records.contains(&c1) && records.contains(&c2) && records.contains("shop.fedingress.test"),
        "{described}"
    );
    let explained = f.fedctl.ok(&["explain", "shop", "--client", "10.1.0.1"]);
    let line = explained
        .lines()
        .find(|l| l.starts_with("Provider:"))
        .unwrap_or_else(|| panic!("no provider line:\n{explained}"));
    assert!(
        line.contains("aws (route53)") && !line.contains("not synced"),
        "{explained}"
    );
    let explained = f.fedctl.ok(&["explain", "bad", "--client", "10.1.0.1"]);
    assert!(
        explained.lines().any(|l| l.starts_with("Provider:")
            && l.contains("broken")
            && l.contains("not synced")),
        "{explained}"
    );

    // c1's backend dies: the hub takes it out of its answers, and Route53 follows.
    f.echoes[0] = None;
    eventually(WAIT, "c1 out of Route53's records of shop", || {
        let values = route53.values(&zone, "shop.fedingress.test.", "A");
        if values == [c2.clone()] {
            Ok(())
        } else {
            Err(format!("{values:?}"))
        }
    });
    eventually(WAIT, "shop's status at a later serial, synced", || {
        let shop = f.ingress("shop");
        let aws = provider(&shop, "aws");
        let serial = aws["observedSerial"].as_i64().unwrap_or_default();
        if aws["synced"] == true
            && serial > first_serial
            && status_values(&aws, "shop.fedingress.test") == [c2.clone()]
        {
            Ok(())
        } else {
            Err(aws.to_string())
        }
    });
    assert_eq!(f.dig("shop.fedingress.test"), [c2]);

    // /metrics counts what the syncers did: the status above was written from these
    // syncs' reports, so the counters have moved already.
    let text = f.metrics();
    let value = |metric: &str, provider: &str, extra: &str| {
        let series = format!(
            "fedingress_dns_provider_{metric}{{provider=\"{provider}\",type=\"route53\"{extra}}}"
        );
        sample(&text, &series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert!(
        value("syncs_total", "aws", ",result=\"ok\"") >= 2.0,
        "{text}"
    );
    assert!(value("record_changes_total", "aws", "") >= 1.0, "{text}");
    // Route53 cannot probe loopback targets: no health checks here.
    assert_eq!(
        value("health_check_changes_total", "aws", ""),
        0.0,
        "{text}"
    );
    assert!(value("api_calls_total", "aws", "") >= 2.0, "{text}");
    assert_eq!(value("names_not_synced", "aws", ""), 0.0, "{text}");
    assert!(
        value("observed_serial", "aws", "") > first_serial as f64,
        "{text}"
    );
    assert!(
        value("last_sync_timestamp_seconds", "aws", "") > 1.7e9,
        "{text}"
    );
    assert_eq!(value("dry_run", "aws", ""), 0.0, "{text}");
    for reason in ["throttled", "transient"] {
        value("api_retries_total", "aws", &format!(",reason=\"{reason}\""));
    }
    // The provider with an unknown hosted zone never synced successfully.
    assert!(
        value("syncs_total", "broken", ",result=\"failed\"") >= 1.0,
        "{text}"
    );
    assert_eq!(
        value("syncs_total", "broken", ",result=\"ok\""),
        0.0,
        "{text}"
    );
    assert!(
        !text.contains("fedingress_dns_provider_observed_serial{provider=\"broken\""),
        "{text}"
    );
}

#[test]
fn clouddns_holds_the_weighted_split_as_a_wrr_policy() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // The fake serves on this runtime's threads while the test drives the processes.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(CloudDnsFake::start(
        "e2e-project",
        "fedingress-test",
        "fedingress.test",
    ));
    let endpoint = fake.endpoint();
    let f = start(
        dir,
        CLOUDDNS_BLOCK,
        &format!(
            "  - {{name: gcp, type: clouddns, project: e2e-project, zone: fedingress-test, endpointUrl: '{endpoint}'}}\n"
        ),
    );
    f.apply(
        dir,
        "shop",
        7200,
        "{type: Weighted, weights: {c1: 3, c2: 1}}",
    );
    let (c1, c2) = (f.ip(0), f.ip(1));

    // The managed zone holds a wrr policy: c1 at weight 3, c2 at 1.
    let rrset = eventually(WAIT, "shop's A record set in Cloud DNS", || {
        fake.rrset("shop.fedingress.test.", "A")
            .ok_or_else(|| format!("{:?}", fake.rrsets()))
    });
    let items = rrset["routingPolicy"]["wrr"]["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a wrr policy: {rrset}"));
    let weight_of = |ip: &str| {
        items
            .iter()
            .find(|i| {
                i["rrdatas"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|v| v == ip))
            })
            .map(|i| i["weight"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no item for {ip}: {rrset}"))
    };
    assert_eq!(weight_of(&c1), 3.0, "{rrset}");
    assert_eq!(weight_of(&c2), 1.0, "{rrset}");

    // Status and fedctl say the same.
    eventually(WAIT, "gcp synced in shop's status, DNSReady True", || {
        let shop = f.ingress("shop");
        let gcp = provider(&shop, "gcp");
        let (ready, reason, message) = condition(&shop, "DNSReady");
        if gcp["synced"] == true && gcp["type"] == "clouddns" && ready == "True" {
            Ok(())
        } else {
            Err(format!("DNSReady {ready} {reason}: {message}; {gcp}"))
        }
    });
    let described = f.fedctl.ok(&["describe", "ingress", "shop"]);
    let records = described
        .split("Records in gcp (clouddns):")
        .nth(1)
        .unwrap_or_else(|| panic!("no records of gcp:\n{described}"));
    assert!(
        records.contains(&c1) && records.contains(&c2),
        "{described}"
    );
    let explained = f.fedctl.ok(&["explain", "shop", "--client", "10.2.0.1"]);
    assert!(
        explained
            .lines()
            .any(|l| l.starts_with("Provider: gcp (clouddns):") && !l.contains("not synced")),
        "{explained}"
    );
    drop(fake);
}

/// docs/providers.md's configuration example as written, but for what only a test knows
/// (the DNS listener's address, moto's hosted zone id and both clouds' endpoints): an
/// ingress named inside `aws-prod`'s `domains` and outside the embedded zone is published
/// to Route53 and becomes Ready; `gcp-prod`, a dry run, changes nothing; the embedded
/// zone is delegated with NS and glue (issue 23, item 4).
#[test]
fn the_documented_configuration_example_publishes_and_becomes_ready() {
    const DOCS_BLOCK: u8 = 104;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let moto = Moto::start().unwrap();
    let route53 = Route53 {
        endpoint: moto.endpoint(),
    };
    let zone = route53.create_zone("example.com.");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(CloudDnsFake::start(
        "my-project",
        "example-com",
        "example.com",
    ));
    let example = code_block("providers.md", "## Configuration", "yaml");
    let listen = format!("listen: 127.0.{DOCS_BLOCK}.1:0");
    let aws = format!(
        "  - name: aws-prod\n    endpointUrl: '{}'\n",
        moto.endpoint()
    );
    let gcp = format!(
        "  - name: gcp-prod\n    endpointUrl: '{}'\n",
        fake.endpoint()
    );
    let dns = substitute(
        &example,
        &[
            ("listen: 192.0.2.53:53", listen.as_str()),
            ("Z0123456789ABCDEFGHIJ", zone.as_str()),
            ("  - name: aws-prod\n", aws.as_str()),
            ("  - name: gcp-prod\n", gcp.as_str()),
        ],
    );
    let f = start_with_dns(dir, DOCS_BLOCK, &dns);
    f.apply_named(dir, "x", "x.shop.example.com", 7400, "{type: RoundRobin}");
    let mut both = vec![f.ip(0), f.ip(1)];
    both.sort();

    eventually(WAIT, "x's A records in Route53", || {
        let values = route53.values(&zone, "x.shop.example.com.", "A");
        if values == both {
            Ok(())
        } else {
            Err(format!("{values:?}; {}", moto.log_tail()))
        }
    });
    let x = eventually(WAIT, "x Ready, DNSReady from aws-prod", || {
        let x = f.ingress("x");
        let (dns_ready, reason, message) = condition(&x, "DNSReady");
        let (ready, ..) = condition(&x, "Ready");
        if ready == "True" && dns_ready == "True" {
            Ok(x)
        } else {
            Err(format!(
                "Ready {ready}, DNSReady {dns_ready} {reason}: {message}"
            ))
        }
    });
    let (_, reason, message) = condition(&x, "DNSReady");
    assert_eq!(reason, "Served", "{message}");
    assert!(message.contains("published by aws-prod"), "{message}");
    // The providers that manage the name; the embedded server does not serve it.
    let listed: Vec<&str> = x["status"]["dns"]["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["aws-prod", "gcp-prod"], "{x}");
    let aws = provider(&x, "aws-prod");
    assert_eq!(aws["synced"], true, "{aws}");
    assert_eq!(status_values(&aws, "x.shop.example.com"), both, "{aws}");
    assert_eq!(provider(&x, "gcp-prod")["dryRun"], true, "{x}");
    // explain has no embedded answer for it, and says why rather than "not served yet".
    let explained = f.fedctl.run(&["explain", "x", "--client", "10.1.0.1"]);
    assert!(
        explained
            .stderr
            .contains("outside the embedded DNS server's zones"),
        "{explained:?}"
    );
    assert!(
        fake.rrset("x.shop.example.com.", "A").is_none(),
        "the dry run changed nothing: {:?}",
        fake.rrsets()
    );
    // `delegate`: the embedded zone's NS and glue in the hosted zone.
    eventually(WAIT, "NS and glue of gslb.example.com in Route53", || {
        let ns = route53.values(&zone, "gslb.example.com.", "NS");
        let glue = route53.values(&zone, "ns1.gslb.example.com.", "A");
        if ns
            .iter()
            .any(|v| v.trim_end_matches('.') == "ns1.gslb.example.com")
            && glue == ["192.0.2.53"]
        {
            Ok(())
        } else {
            Err(format!("NS {ns:?}, glue {glue:?}"))
        }
    });
    drop(fake);
}

/// The value of the series `series` (name and labels, exactly as exposed) in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// `fedingress_controller_leader` of the replica serving `api`.
fn is_leader(api: &str) -> bool {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "2", &format!("{api}/metrics")])
        .output();
    out.is_ok_and(|out| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == "fedingress_controller_leader 1")
    })
}

#[test]
fn only_the_leader_syncs_and_a_new_leader_takes_over() {
    const HA_BLOCK: u8 = 103;
    let etcd = fedingress_store::etcd_process::EtcdCluster::single();
    let endpoints = etcd.endpoints().join(",");
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let moto = Moto::start().unwrap();
    let route53 = Route53 {
        endpoint: moto.endpoint(),
    };
    let zone = route53.create_zone("fedingress.test.");
    let endpoint = moto.endpoint();
    let config = dir.join("apiserver.yaml");
    std::fs::write(
        &config,
        format!(
            "dev: true
agents: {{heartbeatIntervalMs: 300, leaseMs: 3000}}
dns:
  zones:
  - name: fedingress.test
    nameservers:
    - {{name: ns1.fedingress.test, addresses: [127.0.{HA_BLOCK}.1]}}
    - {{name: ns2.fedingress.test, addresses: [127.0.{HA_BLOCK}.2]}}
  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
  ownerId: e2e-ha
  providers:
  - {{name: aws, type: route53, zone: {zone}, endpointUrl: '{endpoint}', domains: [shop.fedingress.test]}}
"
        ),
    )
    .unwrap();
    // Two replicas on one etcd, each logging to a file of its own.
    let start_replica = |i: u8| {
        let ip = format!("127.0.{HA_BLOCK}.{i}");
        let mut command = Command::new(binary("federation-apiserver"));
        command
            .arg("--config")
            .arg(&config)
            .args(["--etcd-servers", &endpoints, "--etcd-prefix", "/providers"])
            .args(["--replica-name", &format!("r{i}")])
            .args(["--leader-elect-lease-duration", "2"])
            .args(["--listen", &format!("{ip}:16443")])
            .args(["--agent-listen", &format!("{ip}:16444")])
            .args(["--dns-listen", &format!("{ip}:5353")])
            .arg("--data-dir")
            .arg(dir.join(format!("unused-{i}")));
        aws_test_environment(&mut command, dir);
        let log = dir.join(format!("r{i}.log"));
        let process = Process::start_logging_to(command, &format!("replica r{i}"), WAIT, &log)
            .expect("replica starts");
        let api = format!("http://{}", process.addr("api"));
        let agent = format!("http://{}", process.addr("agent"));
        (process, api, agent, log)
    };
    let mut replicas = [Some(start_replica(1)), Some(start_replica(2))];
    let apis: Vec<String> = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().1.clone())
        .collect();
    let logs: Vec<std::path::PathBuf> = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().3.clone())
        .collect();
    let leading = eventually(WAIT, "one elected leader", || {
        let leaders: Vec<usize> = (0..2).filter(|&i| is_leader(&apis[i])).collect();
        match leaders.as_slice() {
            [one] => Ok(*one),
            other => Err(format!("leaders {other:?}")),
        }
    });
    let following = 1 - leading;
    let k = kubectl(dir, &apis[following]);
    let gateways = replicas
        .iter()
        .map(|r| r.as_ref().unwrap().2.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let specs = [
        ClusterSpec::numbered(HA_BLOCK, 1, "europe-west1", 50.4, 3.8),
        ClusterSpec::numbered(HA_BLOCK, 2, "us-east1", 39.0, -77.5),
    ];
    let mut echoes = Vec::new();
    let mut agents = Vec::new();
    for spec in &specs {
        echoes.push(Some(Echo::start(spec.backend).unwrap()));
        create_cluster(&k, dir, spec);
        let (_, token) = issue_token(&apis[following], &spec.name).unwrap();
        let gateway = &replicas[following].as_ref().unwrap().2;
        let config = agent_config(dir, gateway, spec, &token);
        let text = std::fs::read_to_string(&config).unwrap().replace(
            &format!("  address: {gateway}\n"),
            &format!("  addresses: [{gateways}]\n"),
        );
        std::fs::write(&config, text).unwrap();
        agents.push(start_agent(&config, &spec.name));
    }
    let ingress = dir.join("shop.yaml");
    std::fs::write(
        &ingress,
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: shop\nspec:\n  rules:\n  - protocol: TCP\n    port: 7300\n    backend: {service: echo, port: 9000}\n  traffic:\n    dnsName: shop.fedingress.test\n    ttl: 5\n    strategy: {type: RoundRobin}\n",
    )
    .unwrap();
    k.ok(&["apply", "-f", &ingress.display().to_string()]);
    let (c1, c2) = (specs[0].bind.to_string(), specs[1].bind.to_string());
    let mut both = vec![c1.clone(), c2.clone()];
    both.sort();
    eventually(WAIT, "shop's records in Route53", || {
        let values = route53.values(&zone, "shop.fedingress.test.", "A");
        if values == both {
            Ok(())
        } else {
            Err(format!("{values:?}"))
        }
    });
    let synced = |k: &Kubectl, want: &[String]| {
        eventually(WAIT, "aws synced in shop's status", || {
            let shop = get_json(k, &["federatedingress", "shop"]);
            let aws = provider(&shop, "aws");
            if aws["synced"] == true && status_values(&aws, "shop.fedingress.test") == want {
                Ok(())
            } else {
                Err(aws.to_string())
            }
        })
    };
    synced(&k, &both);
    // Only the leader runs a syncer; the follower only connected (for explain).
    let log = |i: usize| std::fs::read_to_string(&logs[i]).unwrap();
    assert!(
        log(leading).contains("DNS provider syncer started"),
        "{}",
        log(leading)
    );
    assert!(
        !log(following).contains("DNS provider syncer started"),
        "{}",
        log(following)
    );
    // The follower answers explain with the provider it built (and connected) itself.
    let fedctl = Fedctl::new(&dir.join("kubeconfig"));
    eventually(WAIT, "the follower's explain line for aws", || {
        let explained = fedctl.ok(&["explain", "shop", "--client", "10.1.0.1"]);
        let ok = explained.lines().any(|l| {
            l.starts_with("Provider: aws (route53):")
                && !l.contains("not connected")
                && !l.contains("not synced")
        });
        if ok { Ok(()) } else { Err(explained) }
    });

    // The leader dies: the follower leads, starts its syncer, and Route53 follows the
    // hub's answers again when a backend dies.
    replicas[leading].take().unwrap().0.kill9();
    eventually(WAIT, "the follower leads", || {
        if is_leader(&apis[following]) {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    });
    echoes[0] = None;
    eventually(WAIT, "c1 out of Route53 after the takeover", || {
        let values = route53.values(&zone, "shop.fedingress.test.", "A");
        if values == [c2.clone()] {
            Ok(())
        } else {
            Err(format!("{values:?}"))
        }
    });
    synced(&k, std::slice::from_ref(&c2));
    assert!(log(following).contains("DNS provider syncer started"));
    drop(agents);
}
