//! Golden files of the kubernetes driver's rendering: every profile × every rule kind.
//!
//! `tests/golden/kubernetes/<profile>/<case>.yaml` holds what [`render_plan`] makes of
//! the case's plan, as multi-document YAML: every object (the shares' objects in key
//! order, then the shared ones), then one last document that is not an object — it has
//! no `kind` — with `targets` (which object serves each rule) and `errors` (the rule
//! errors), each line `<namespace>/<name> rule <index>: ...`.
//!
//! `UPDATE_GOLDEN=1 cargo nextest run -p cluster-agent -E 'test(golden)'` rewrites the
//! files; otherwise they are compared. Either way each object document is also read
//! back into its k8s-openapi type (`Ingress`, `Service`, `ConfigMap` by `kind`), failing
//! on any field the type does not know (`serde_ignored`) and on any field it would not
//! write back, so the files are objects the API server accepts as written.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fedingress_agent::config::kubernetes::{ObjectName, Profile};
use fedingress_agent::kubernetes::render::{PlanRender, RenderSettings, ServiceFacts, render_plan};
use fedingress_api::plan::ClusterPlan;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The cases: a plan (a list of shares, as the agent's `plan.json` has them) each.
const CASES: &[(&str, &str)] = &[
    (
        "http",
        "
- key: {namespace: shop, name: web}
  uid: 6f1c2a4e-0001-4000-8000-000000000001
  generation: 3
  rules:
  - protocol: HTTP
    host: shop.example.com
    paths:
    - {path: /, pathType: Prefix, backend: {service: web, port: 8080}}
    - {path: /healthz, pathType: Exact, backend: {service: web, port: 8080}}
  - protocol: HTTP
    host: www.example.com
    paths: [{path: /, pathType: Prefix, backend: {service: web, port: 8080}}]
  - protocol: HTTP
    port: 8080
    paths: [{path: /, pathType: Prefix, backend: {service: web, port: 8080}}]
  tls: []
",
    ),
    (
        "https",
        "
- key: {namespace: shop, name: web}
  uid: 6f1c2a4e-0002-4000-8000-000000000002
  generation: 1
  rules:
  - protocol: HTTPS
    host: shop.example.com
    paths: [{path: /api, pathType: Prefix, backend: {service: api, port: 8443}}]
  - protocol: HTTP
    host: shop.example.com
    paths: [{path: /, pathType: Prefix, backend: {service: web, port: 8080}}]
  - protocol: HTTPS
    host: admin.example.com
    port: 8443
    paths: [{path: /, pathType: Prefix, backend: {service: api, port: 8443}}]
  tls:
  - {hosts: [shop.example.com], secretName: shop-tls}
  - {hosts: [admin.example.com], secretName: admin-tls}
",
    ),
    (
        "tcp",
        "
- key: {namespace: shop, name: db}
  uid: 6f1c2a4e-0003-4000-8000-000000000003
  generation: 1
  rules:
  - {protocol: TCP, port: 3306, name: mysql, backend: {service: mysql, port: 3306}}
  - {protocol: TCP, port: 5432, backend: {service: pg, port: 5432}}
  tls: []
",
    ),
    (
        "udp",
        "
- key: {namespace: shop, name: dns}
  uid: 6f1c2a4e-0004-4000-8000-000000000004
  generation: 1
  rules:
  - {protocol: UDP, port: 53, name: domain, backend: {service: dns, port: 53}}
  tls: []
",
    ),
    (
        "tcp-udp-same-port",
        "
- key: {namespace: shop, name: dns}
  uid: 6f1c2a4e-0005-4000-8000-000000000005
  generation: 1
  rules:
  - {protocol: TCP, port: 53, name: domain, backend: {service: dns, port: 53}}
  - {protocol: UDP, port: 53, name: domain, backend: {service: dns, port: 53}}
  tls: []
",
    ),
    (
        "tls-passthrough",
        "
- key: {namespace: shop, name: pg}
  uid: 6f1c2a4e-0006-4000-8000-000000000006
  generation: 1
  rules:
  - {protocol: TLS, host: db.example.com, port: 5433, tlsMode: Passthrough, backend: {service: pg, port: 5432}}
  - {protocol: TLS, host: replica.example.com, port: 5433, tlsMode: Passthrough, backend: {service: pg, port: 5432}}
  tls: []
",
    ),
    (
        "tls-terminate",
        "
- key: {namespace: shop, name: pg}
  uid: 6f1c2a4e-0007-4000-8000-000000000007
  generation: 1
  rules:
  - {protocol: TLS, host: db.example.com, port: 5433, tlsMode: Terminate, backend: {service: pg, port: 5432}}
  tls:
  - {hosts: [db.example.com], secretName: db-tls}
",
    ),
    (
        "override",
        "
- key: {namespace: shop, name: shop}
  uid: 6f1c2a4e-0008-4000-8000-000000000008
  generation: 7
  rules:
  - protocol: HTTP
    host: shop.example.com
    paths: [{path: /, pathType: Prefix, backend: {service: web, port: 8080}}]
  - {protocol: TCP, port: 53, backend: {service: dns, port: 53}}
  - {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
  tls: []
  cluster_override:
    cluster: eu-west
    ingressClassName: haproxy
    annotations: {example.com/tier: gold}
",
    ),
];

/// The settings of each profile: what a cluster of that kind would configure.
fn settings(profile: Profile) -> RenderSettings {
    let mut settings = RenderSettings::new(profile);
    match profile {
        Profile::Mixed => {}
        Profile::Aws => {
            settings.service_annotations = BTreeMap::from([(
                "service.beta.kubernetes.io/aws-load-balancer-attributes".to_owned(),
                "load_balancing.cross_zone.enabled=true".to_owned(),
            )]);
        }
        Profile::Gcp => settings.load_balancer_ip = Some("203.0.113.7".parse().unwrap()),
        Profile::Azure => settings.load_balancer_ip = Some("198.51.100.7".parse().unwrap()),
        Profile::Metallb => settings.load_balancer_ip = Some("192.0.2.10".parse().unwrap()),
        Profile::NginxConfigmap => {
            settings.ingress_class_name = Some("nginx".to_owned());
            settings.nginx_tcp_services = Some(name("ingress-nginx/fedingress-tcp"));
            settings.nginx_udp_services = Some(name("ingress-nginx/fedingress-udp"));
            settings.ingress_controller = Some(name("ingress-nginx/ingress-nginx-controller"));
        }
    }
    settings
}

fn name(text: &str) -> ObjectName {
    text.parse().unwrap()
}

fn port(protocol: &str, number: i32, target: Option<IntOrString>) -> ServicePort {
    ServicePort {
        name: Some(format!("{}-{number}", protocol.to_lowercase())),
        protocol: Some(protocol.to_owned()),
        port: number,
        target_port: target,
        ..ServicePort::default()
    }
}

fn facts_of(app: &str, ports: Vec<ServicePort>) -> ServiceFacts {
    ServiceFacts {
        selector: Some(BTreeMap::from([(
            "app.kubernetes.io/name".to_owned(),
            app.to_owned(),
        )])),
        ports,
    }
}

/// The member cluster: the backends, and ingress-nginx's controller exposing TCP 80,
/// 443, 53, 3306 and 5432 but not 5433 or UDP 53 (so the nginx files show both).
fn facts() -> BTreeMap<ObjectName, ServiceFacts> {
    BTreeMap::from([
        (
            name("shop/web"),
            facts_of(
                "web",
                vec![port("TCP", 8080, Some(IntOrString::String("http".into())))],
            ),
        ),
        (
            name("shop/api"),
            facts_of("api", vec![port("TCP", 8443, None)]),
        ),
        (
            name("shop/mysql"),
            facts_of(
                "mysql",
                vec![port("TCP", 3306, Some(IntOrString::String("mysql".into())))],
            ),
        ),
        (
            name("shop/pg"),
            facts_of("pg", vec![port("TCP", 5432, Some(IntOrString::Int(5432)))]),
        ),
        (
            name("shop/dns"),
            facts_of(
                "dns",
                vec![
                    port("TCP", 53, Some(IntOrString::Int(5353))),
                    port("UDP", 53, Some(IntOrString::Int(5353))),
                ],
            ),
        ),
        (
            name("ingress-nginx/ingress-nginx-controller"),
            facts_of(
                "ingress-nginx",
                [80, 443, 53, 3306, 5432]
                    .into_iter()
                    .map(|p| port("TCP", p, None))
                    .collect(),
            ),
        ),
    ])
}

/// The last document: where each rule is served, and why not.
#[derive(Serialize)]
struct Summary {
    targets: Vec<String>,
    errors: Vec<String>,
}

/// The golden text of one rendering.
fn golden_text(profile: Profile, case: &str, render: &PlanRender) -> String {
    let mut out = format!(
        "# Profile {profile}, case {case}: written by cluster-agent/tests/it/kubernetes_golden.rs\n# (UPDATE_GOLDEN=1 rewrites it). The last document is not an object.\n"
    );
    for object in render.objects() {
        out.push_str("---\n");
        out.push_str(&object.to_yaml().unwrap());
    }
    let mut summary = Summary {
        targets: Vec::new(),
        errors: Vec::new(),
    };
    for (key, share) in &render.shares {
        for target in &share.targets {
            summary
                .targets
                .push(format!("{key} rule {}: {}", target.rule, target.object));
        }
        for error in &share.errors {
            summary
                .errors
                .push(format!("{key} rule {}: {}", error.rule, error.message));
        }
    }
    out.push_str("---\n");
    out.push_str(&yaml_serde::to_string(&summary).unwrap());
    out
}

/// Reads `doc` as a `T`, failing on fields `T` ignores or would not write back.
fn strict<T: DeserializeOwned + Serialize>(doc: &yaml_serde::Value, what: &str) {
    let mut ignored = Vec::new();
    let typed: T = serde_ignored::deserialize(doc.clone(), |path| ignored.push(path.to_string()))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(ignored.is_empty(), "{what}: unknown fields {ignored:?}");
    let back = yaml_serde::to_value(&typed).unwrap();
    assert_eq!(&back, doc, "{what}: does not read back as written");
}

/// Every object document of `text` is its k8s-openapi type, strictly; returns the number
/// of objects.
pub(crate) fn check_objects(text: &str, what: &str) -> usize {
    let mut objects = 0;
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let doc: yaml_serde::Value = serde::Deserialize::deserialize(document).unwrap();
        let what = format!("{what} document {index}");
        match doc.get("kind").and_then(yaml_serde::Value::as_str) {
            Some("Ingress") => strict::<Ingress>(&doc, &what),
            Some("Service") => strict::<Service>(&doc, &what),
            Some("ConfigMap") => strict::<ConfigMap>(&doc, &what),
            Some("Deployment") => strict::<Deployment>(&doc, &what),
            Some("PodDisruptionBudget") => strict::<PodDisruptionBudget>(&doc, &what),
            Some(other) => panic!("{what}: unexpected kind {other}"),
            None => {
                assert!(
                    doc.get("targets").is_some() && doc.get("errors").is_some(),
                    "{what}: neither an object nor the summary"
                );
                continue;
            }
        }
        objects += 1;
    }
    objects
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/kubernetes")
}

#[test]
fn golden_renderings_of_every_profile_and_rule_kind() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let facts = facts();
    let mut mismatched = Vec::new();
    for profile in Profile::ALL {
        let dir = golden_dir().join(profile.as_str());
        if update {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (case, plan) in CASES {
            let plan: ClusterPlan = yaml_serde::from_str(plan).unwrap();
            let render = render_plan(&plan, &settings(profile), &facts);
            let text = golden_text(profile, case, &render);
            let objects = check_objects(&text, &format!("{profile}/{case}"));
            assert_eq!(objects, render.objects().count());
            let path = dir.join(format!("{case}.yaml"));
            if update {
                std::fs::write(&path, &text).unwrap();
                continue;
            }
            let expected = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
            if expected != text {
                eprintln!(
                    "--- {} (expected)\n{expected}\n+++ rendered\n{text}",
                    path.display()
                );
                mismatched.push(path.display().to_string());
            }
        }
    }
    assert!(
        mismatched.is_empty(),
        "golden files differ (UPDATE_GOLDEN=1 rewrites them): {mismatched:?}"
    );
}

/// No golden file is left over from a case or profile that no longer exists, and each
/// one (as committed) still holds strictly valid objects.
#[test]
fn golden_files_are_exactly_the_cases() {
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        return; // the other test is rewriting them
    }
    let mut expected: Vec<String> = Profile::ALL
        .iter()
        .flat_map(|p| {
            CASES
                .iter()
                .map(move |(case, _)| format!("{}/{case}.yaml", p.as_str()))
        })
        .collect();
    expected.sort();
    let mut found = Vec::new();
    for profile in std::fs::read_dir(golden_dir()).unwrap() {
        let profile = profile.unwrap().path();
        for file in std::fs::read_dir(&profile).unwrap() {
            let file = file.unwrap().path();
            let text = std::fs::read_to_string(&file).unwrap();
            check_objects(&text, &file.display().to_string());
            found.push(format!(
                "{}/{}",
                profile.file_name().unwrap().to_string_lossy(),
                file.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    found.sort();
    assert_eq!(found, expected);
}
