//! Edge cases of rendering; whole renderings per profile are golden files
//! (`cluster-agent/tests/it/kubernetes_golden.rs`).

use std::collections::BTreeMap;

use fedingress_api::ingress::{ClusterOverride, IngressRule, IngressTls};
use fedingress_api::plan::{ClusterPlan, IngressKey, IngressShare};
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

const NS: &str = "shop";

fn rules(yaml: &str) -> Vec<IngressRule> {
    yaml_serde::from_str(yaml).unwrap()
}

fn share(name: &str, yaml: &str) -> IngressShare {
    IngressShare {
        key: IngressKey::new(NS, name),
        uid: format!("uid-{name}"),
        generation: 1,
        rules: rules(yaml),
        tls: Vec::new(),
        cluster_override: None,
        anycast_addresses: Vec::new(),
    }
}

fn port(protocol: &str, port: i32, target: Option<IntOrString>) -> ServicePort {
    ServicePort {
        name: Some(format!("{}-{port}", protocol.to_lowercase())),
        protocol: Some(protocol.to_owned()),
        port,
        target_port: target,
        ..ServicePort::default()
    }
}

fn selector(app: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([("app".to_owned(), app.to_owned())]))
}

/// mysql: TCP 3306 → named port `mysql`; dns: TCP and UDP 53 → 5353; web: 8080 without
/// a targetPort; manual: no selector; the ingress-nginx controller: TCP 80, 443, 3306.
fn facts() -> BTreeMap<ObjectName, ServiceFacts> {
    BTreeMap::from([
        (
            ObjectName::new(NS, "mysql"),
            ServiceFacts {
                selector: selector("mysql"),
                ports: vec![port("TCP", 3306, Some(IntOrString::String("mysql".into())))],
            },
        ),
        (
            ObjectName::new(NS, "dns"),
            ServiceFacts {
                selector: selector("dns"),
                ports: vec![
                    port("TCP", 53, Some(IntOrString::Int(5353))),
                    port("UDP", 53, Some(IntOrString::Int(5353))),
                ],
            },
        ),
        (
            ObjectName::new(NS, "web"),
            ServiceFacts {
                selector: selector("web"),
                ports: vec![ServicePort {
                    port: 8080,
                    ..ServicePort::default()
                }],
            },
        ),
        (
            ObjectName::new(NS, "manual"),
            ServiceFacts {
                selector: None,
                ports: vec![port("TCP", 9000, None)],
            },
        ),
        (
            ObjectName::new("ingress-nginx", "controller"),
            ServiceFacts {
                selector: selector("ingress-nginx"),
                ports: vec![
                    port("TCP", 80, None),
                    port("TCP", 443, None),
                    port("TCP", 3306, None),
                ],
            },
        ),
    ])
}

fn render(shares: Vec<IngressShare>, settings: &RenderSettings) -> PlanRender {
    render_plan(&ClusterPlan::from(shares), settings, &facts())
}

fn one(share: IngressShare, settings: &RenderSettings) -> ShareRender {
    let key = share.key.clone();
    let mut out = render(vec![share], settings);
    out.shares.remove(&key).unwrap()
}

fn errors(render: &ShareRender) -> Vec<(u32, String)> {
    render
        .errors
        .iter()
        .map(|e| (e.rule, e.message.clone()))
        .collect()
}

fn services(render: &ShareRender) -> Vec<&Service> {
    render
        .objects
        .iter()
        .filter_map(|o| match o {
            Desired::Service(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn ingress(render: &ShareRender) -> &Ingress {
    render
        .objects
        .iter()
        .find_map(|o| match o {
            Desired::Ingress(i) => Some(i),
            _ => None,
        })
        .unwrap()
}

fn annotations(service: &Service) -> &BTreeMap<String, String> {
    service.metadata.annotations.as_ref().unwrap()
}

fn ports(service: &Service) -> Vec<(String, String, i32, IntOrString)> {
    service
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| {
            (
                p.name.clone().unwrap(),
                p.protocol.clone().unwrap(),
                p.port,
                p.target_port.clone().unwrap(),
            )
        })
        .collect()
}

#[test]
fn http_rules_of_one_host_merge_into_one_ingress() {
    let mut share = share(
        "web",
        "
- {protocol: HTTP, host: shop.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: HTTPS, host: shop.example.com, paths: [{path: /api, pathType: Exact, backend: {service: api, port: 8443}}]}
- {protocol: HTTP, paths: [{path: /, backend: {service: web, port: 8080}}]}
",
    );
    share.tls = vec![
        IngressTls {
            hosts: vec!["*.example.com".into()],
            secret_name: "wild".into(),
        },
        IngressTls {
            hosts: vec!["other.example.org".into()],
            secret_name: "unused".into(),
        },
    ];
    let out = one(share, &RenderSettings::new(Profile::Mixed));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.objects.len(), 1);
    let ingress = ingress(&out);
    assert_eq!(ingress.metadata.name.as_deref(), Some("web"));
    assert_eq!(ingress.metadata.namespace.as_deref(), Some(NS));
    let spec = ingress.spec.as_ref().unwrap();
    assert_eq!(spec.ingress_class_name, None);
    let rules = spec.rules.as_ref().unwrap();
    // The hostless rule first, then hosts in order; paths sorted.
    assert_eq!(rules[0].host, None);
    assert_eq!(rules[1].host.as_deref(), Some("shop.example.com"));
    let paths = &rules[1].http.as_ref().unwrap().paths;
    assert_eq!(paths.len(), 2);
    assert_eq!(paths[0].path.as_deref(), Some("/"));
    assert_eq!(paths[1].path.as_deref(), Some("/api"));
    assert_eq!(paths[1].path_type, "Exact");
    let backend = paths[1].backend.service.as_ref().unwrap();
    assert_eq!(backend.name, "api");
    assert_eq!(backend.port.as_ref().unwrap().number, Some(8443));
    // Only the certificate covering an HTTPS host.
    let tls = spec.tls.as_ref().unwrap();
    assert_eq!(tls.len(), 1);
    assert_eq!(tls[0].secret_name.as_deref(), Some("wild"));
    assert_eq!(
        tls[0].hosts.as_deref(),
        Some(&["*.example.com".to_owned()][..])
    );
    let targets: Vec<u32> = out.targets.iter().map(|t| t.rule).collect();
    assert_eq!(targets, [0, 1, 2]);
    assert!(out.targets.iter().all(|t| t.object.kind == Kind::Ingress));
}

#[test]
fn http_ports_an_ingress_cannot_express_are_rule_errors() {
    let out = one(
        share(
            "odd",
            "
- {protocol: HTTP, port: 8080, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: HTTPS, port: 8443, host: a.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: HTTPS, host: a.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
",
        ),
        &RenderSettings::new(Profile::Mixed),
    );
    let errors = errors(&out);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].0, 0);
    assert!(
        errors[0]
            .1
            .starts_with("a networking.k8s.io/v1 Ingress serves HTTP on port 80 only: port 8080"),
        "{}",
        errors[0].1
    );
    assert_eq!(errors[1].0, 1);
    assert!(
        errors[1].1.contains("HTTPS on port 443 only"),
        "{}",
        errors[1].1
    );
    assert_eq!(out.targets.len(), 1);
    assert_eq!(out.targets[0].rule, 2);
}

#[test]
fn a_path_routed_apart_on_http_and_https_keeps_the_first_and_the_rest_renders() {
    let out = one(
        share(
            "split",
            "
- {protocol: HTTP, host: a.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: HTTPS, host: a.example.com, paths: [{path: /, backend: {service: secure, port: 8443}}, {path: /x, backend: {service: web, port: 8080}}]}
",
        ),
        &RenderSettings::new(Profile::Mixed),
    );
    let errors = errors(&out);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, 1);
    assert_eq!(
        errors[0].1,
        "path / (Prefix) of host a.example.com already goes to web:8080 (rule 0): an Ingress serves a host's paths on HTTP and HTTPS alike"
    );
    // Rule 1 still serves /x.
    assert_eq!(out.targets.len(), 2);
    let paths = &ingress(&out).spec.as_ref().unwrap().rules.as_ref().unwrap()[0]
        .http
        .as_ref()
        .unwrap()
        .paths;
    assert_eq!(paths.len(), 2);
}

#[test]
fn ingress_class_comes_from_the_override_then_the_settings() {
    let yaml = "[{protocol: HTTP, paths: [{path: /, backend: {service: web, port: 8080}}]}]";
    let mut settings = RenderSettings::new(Profile::Mixed);
    settings.ingress_class_name = Some("nginx".into());
    let class = |out: &ShareRender| {
        ingress(out)
            .spec
            .as_ref()
            .unwrap()
            .ingress_class_name
            .clone()
    };
    assert_eq!(
        class(&one(share("a", yaml), &settings)).as_deref(),
        Some("nginx")
    );
    let mut overridden = share("a", yaml);
    overridden.cluster_override = Some(ClusterOverride {
        cluster: "eu".into(),
        ingress_class_name: Some("haproxy".into()),
        annotations: BTreeMap::from([("example.com/tier".into(), "gold".into())]),
        pool_selector: None,
    });
    let out = one(overridden, &settings);
    assert_eq!(class(&out).as_deref(), Some("haproxy"));
    let meta = &ingress(&out).metadata;
    let annotations = meta.annotations.as_ref().unwrap();
    assert_eq!(annotations["example.com/tier"], "gold");
    assert_eq!(annotations[UID_ANNOTATION], "uid-a");
    let labels = meta.labels.as_ref().unwrap();
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(labels[INGRESS_LABEL], "shop.a");
}

#[test]
fn load_balancer_services_copy_selector_and_target_ports_from_the_backend() {
    let out = one(
        share(
            "db",
            "
- {protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
- {protocol: TCP, port: 53, backend: {service: dns, port: 53}}
- {protocol: TCP, port: 8080, backend: {service: web, port: 8080}}
",
        ),
        &RenderSettings::new(Profile::Mixed),
    );
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let services = services(&out);
    let names: Vec<_> = services
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "fedingress-db-dns",
            "fedingress-db-mysql",
            "fedingress-db-web"
        ]
    );
    let dns = services[0];
    let spec = dns.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(spec.selector, selector("dns"));
    assert_eq!(
        ports(dns),
        [
            ("tcp-53".into(), "TCP".into(), 53, IntOrString::Int(5353)),
            ("udp-53".into(), "UDP".into(), 53, IntOrString::Int(5353)),
        ]
    );
    // A named target port is copied; a backend port without one targets its number.
    assert_eq!(ports(services[1])[0].3, IntOrString::String("mysql".into()));
    assert_eq!(ports(services[2])[0].3, IntOrString::Int(8080));
    let target = |rule: u32| {
        out.targets
            .iter()
            .find(|t| t.rule == rule)
            .map(|t| t.object.name.clone())
    };
    assert_eq!(target(0).as_deref(), Some("fedingress-db-mysql"));
    assert_eq!(target(1).as_deref(), Some("fedingress-db-dns"));
    assert_eq!(target(2).as_deref(), Some("fedingress-db-dns"));
}

#[test]
fn backends_that_cannot_be_selected_are_rule_errors_naming_the_service() {
    let out = one(
        share(
            "bad",
            "
- {protocol: TCP, port: 1, backend: {service: gone, port: 1}}
- {protocol: TCP, port: 2, backend: {service: manual, port: 9000}}
- {protocol: TCP, port: 3, backend: {service: mysql, port: 3307}}
- {protocol: UDP, port: 4, backend: {service: mysql, port: 3306}}
",
        ),
        &RenderSettings::new(Profile::Mixed),
    );
    assert!(out.objects.is_empty());
    assert_eq!(
        errors(&out),
        [
            (0, "backend Service shop/gone does not exist in this cluster".to_owned()),
            (
                1,
                "backend Service shop/manual has no selector: a LoadBalancer Service can only forward to the pods it selects"
                    .to_owned()
            ),
            (2, "backend Service shop/mysql has no port 3307".to_owned()),
            (
                3,
                "backend Service shop/mysql has no UDP port 3306 (only TCP)".to_owned()
            ),
        ]
    );
}

#[test]
fn tls_passthrough_is_a_tcp_port_with_one_host_and_termination_is_an_error() {
    let out = one(
        share(
            "tls",
            "
- {protocol: TLS, host: db.example.com, port: 5433, tlsMode: Passthrough, backend: {service: mysql, port: 3306}}
- {protocol: TLS, host: other.example.com, port: 5433, tlsMode: Passthrough, backend: {service: mysql, port: 3306}}
- {protocol: TLS, host: term.example.com, port: 5434, backend: {service: mysql, port: 3306}}
",
        ),
        &RenderSettings::new(Profile::Mixed),
    );
    let errors = errors(&out);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(
        errors[0],
        (
            1,
            "a LoadBalancer Service cannot route by SNI: port 5433 already passes db.example.com through (rule 0); give other.example.com a port of its own"
                .to_owned()
        )
    );
    assert_eq!(errors[1].0, 2);
    assert!(
        errors[1].1.starts_with("TLS termination is not available"),
        "{}",
        errors[1].1
    );
    let services = services(&out);
    assert_eq!(services.len(), 1);
    assert_eq!(
        ports(services[0]),
        [(
            "tcp-5433".into(),
            "TCP".into(),
            5433,
            IntOrString::String("mysql".into())
        )]
    );
}

#[test]
fn split_profiles_name_services_per_protocol_and_share_the_ip() {
    let yaml = "
- {protocol: TCP, port: 53, backend: {service: dns, port: 53}}
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
";
    let mut gcp = RenderSettings::new(Profile::Gcp);
    gcp.load_balancer_ip = Some("203.0.113.7".parse().unwrap());
    let out = one(share("dns", yaml), &gcp);
    let split = services(&out);
    let names: Vec<_> = split
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["fedingress-dns-dns-tcp", "fedingress-dns-dns-udp"]);
    for service in &split {
        let spec = service.spec.as_ref().unwrap();
        assert_eq!(spec.load_balancer_ip.as_deref(), Some("203.0.113.7"));
        assert_eq!(spec.ports.as_ref().unwrap().len(), 1);
    }

    let mut metallb = RenderSettings::new(Profile::Metallb);
    let out = one(share("dns", yaml), &metallb);
    let split = services(&out);
    assert_eq!(split.len(), 2);
    for service in &split {
        assert_eq!(
            annotations(service)["metallb.io/allow-shared-ip"],
            "fedingress:shop/dns"
        );
        assert!(!annotations(service).contains_key("metallb.io/loadBalancerIPs"));
        assert_eq!(
            service
                .spec
                .as_ref()
                .unwrap()
                .external_traffic_policy
                .as_deref(),
            Some("Cluster")
        );
    }
    metallb.load_balancer_ip = Some("192.0.2.10".parse().unwrap());
    let out = one(share("dns", yaml), &metallb);
    for service in services(&out) {
        assert_eq!(
            annotations(service)["metallb.io/allow-shared-ip"],
            "fedingress"
        );
        assert_eq!(
            annotations(service)["metallb.io/loadBalancerIPs"],
            "192.0.2.10"
        );
    }
    metallb.metallb_sharing_key = Some("lab".into());
    let out = one(share("dns", yaml), &metallb);
    assert_eq!(
        annotations(services(&out)[0])["metallb.io/allow-shared-ip"],
        "lab"
    );
}

#[test]
fn a_cluster_wide_ip_gives_each_port_to_the_first_share() {
    let mut settings = RenderSettings::new(Profile::Gcp);
    settings.load_balancer_ip = Some("203.0.113.7".parse().unwrap());
    let tcp = "[{protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}]";
    let out = render(vec![share("b", tcp), share("a", tcp)], &settings);
    let a = &out.shares[&IngressKey::new(NS, "a")];
    let b = &out.shares[&IngressKey::new(NS, "b")];
    assert!(a.errors.is_empty());
    assert_eq!(
        errors(b),
        [(
            0,
            "port 3306/TCP of the cluster's load balancer IP 203.0.113.7 is already used by shop/a (rule 0)"
                .to_owned()
        )]
    );
    assert!(b.objects.is_empty());
    // Without the IP every share gets its own load balancer.
    let out = render(
        vec![share("b", tcp), share("a", tcp)],
        &RenderSettings::new(Profile::Gcp),
    );
    assert!(out.shares.values().all(|s| s.errors.is_empty()));
}

#[test]
fn aws_asks_for_a_tcp_udp_listener_only_where_a_port_has_both() {
    let settings = RenderSettings::new(Profile::Aws);
    let both = one(
        share(
            "dns",
            "
- {protocol: TCP, port: 53, backend: {service: dns, port: 53}}
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
",
        ),
        &settings,
    );
    let service = services(&both)[0];
    let spec = service.spec.as_ref().unwrap();
    assert_eq!(
        spec.load_balancer_class.as_deref(),
        Some("service.k8s.aws/nlb")
    );
    let own = annotations(service);
    assert_eq!(
        own["service.beta.kubernetes.io/aws-load-balancer-enable-tcp-udp-listener"],
        "true"
    );
    assert_eq!(
        own["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"],
        "ip"
    );
    let tcp_only = one(
        share(
            "db",
            "[{protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}]",
        ),
        &settings,
    );
    assert!(
        !annotations(services(&tcp_only)[0])
            .contains_key("service.beta.kubernetes.io/aws-load-balancer-enable-tcp-udp-listener")
    );
}

#[test]
fn annotations_rise_from_profile_to_settings_to_override_to_ownership() {
    let mut settings = RenderSettings::new(Profile::Aws);
    settings.service_annotations = BTreeMap::from([
        (
            "service.beta.kubernetes.io/aws-load-balancer-scheme".into(),
            "internal".into(),
        ),
        ("example.com/team".into(), "net".into()),
    ]);
    let mut share = share(
        "db",
        "[{protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}]",
    );
    share.cluster_override = Some(ClusterOverride {
        cluster: "eu".into(),
        ingress_class_name: None,
        annotations: BTreeMap::from([
            ("example.com/team".into(), "db".into()),
            (UID_ANNOTATION.into(), "forged".into()),
        ]),
        pool_selector: None,
    });
    let out = one(share, &settings);
    let annotations = annotations(services(&out)[0]);
    assert_eq!(
        annotations["service.beta.kubernetes.io/aws-load-balancer-scheme"],
        "internal"
    );
    assert_eq!(annotations["example.com/team"], "db");
    assert_eq!(annotations[UID_ANNOTATION], "uid-db");
}

#[test]
fn azure_shares_its_public_ip_through_the_address_annotation() {
    let mut settings = RenderSettings::new(Profile::Azure);
    settings.load_balancer_ip = Some("2001:db8::7".parse().unwrap());
    let out = one(
        share(
            "dns",
            "
- {protocol: TCP, port: 53, backend: {service: dns, port: 53}}
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
",
        ),
        &settings,
    );
    let services = services(&out);
    assert_eq!(services.len(), 1);
    assert_eq!(
        annotations(services[0])["service.beta.kubernetes.io/azure-load-balancer-ipv6"],
        "2001:db8::7"
    );
    assert_eq!(services[0].spec.as_ref().unwrap().load_balancer_ip, None);
}

fn nginx_settings() -> RenderSettings {
    let mut settings = RenderSettings::new(Profile::NginxConfigmap);
    settings.nginx_tcp_services = Some(ObjectName::new("ingress-nginx", "tcp-services"));
    settings.nginx_udp_services = Some(ObjectName::new("ingress-nginx", "udp-services"));
    settings.ingress_controller = Some(ObjectName::new("ingress-nginx", "controller"));
    settings
}

fn config_map_data(out: &PlanRender, name: &str) -> BTreeMap<String, String> {
    out.shared
        .iter()
        .find_map(|o| match o {
            Desired::ConfigMap(c) if c.metadata.name.as_deref() == Some(name) => c.data.clone(),
            _ => None,
        })
        .unwrap()
}

#[test]
fn nginx_entries_need_the_controller_port_and_go_to_the_first_share() {
    let out = render(
        vec![
            share(
                "a",
                "
- {protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
- {protocol: TCP, port: 443, backend: {service: mysql, port: 3306}}
",
            ),
            share(
                "b",
                "[{protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}]",
            ),
        ],
        &nginx_settings(),
    );
    let a = &out.shares[&IngressKey::new(NS, "a")];
    assert!(a.objects.is_empty());
    assert_eq!(
        errors(a),
        [
            (
                1,
                "ingress controller Service ingress-nginx/controller does not expose UDP port 53: add it to that Service (ingress-nginx Helm values: udp: {\"53\": \"shop/dns:53\"})"
                    .to_owned()
            ),
            (
                2,
                "TCP port 443 is the ingress controller's own HTTP(S) port".to_owned()
            ),
        ]
    );
    assert_eq!(
        a.targets,
        [RuleTarget {
            rule: 0,
            object: ObjectRef::new(Kind::Service, "ingress-nginx", "controller"),
        }]
    );
    let b = &out.shares[&IngressKey::new(NS, "b")];
    assert_eq!(
        errors(b),
        [(
            0,
            "TCP port 3306 of the ingress controller is already used by shop/a (rule 0)".to_owned()
        )]
    );
    assert_eq!(
        config_map_data(&out, "tcp-services"),
        BTreeMap::from([("3306".to_owned(), "shop/mysql:3306".to_owned())])
    );
    // Owned whole: rendered (empty) even with no entry.
    assert!(config_map_data(&out, "udp-services").is_empty());
    let labels = out.shared[0].metadata().labels.clone().unwrap();
    assert_eq!(labels.len(), 1);
    assert_eq!(out.shared[0].object_ref().namespace, "ingress-nginx");
}

#[test]
fn nginx_without_its_settings_says_what_is_missing() {
    let mut settings = nginx_settings();
    settings.nginx_udp_services = None;
    settings.ingress_controller = Some(ObjectName::new("ingress-nginx", "gone"));
    let out = one(
        share(
            "a",
            "
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
- {protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}
",
        ),
        &settings,
    );
    assert_eq!(
        errors(&out),
        [
            (
                0,
                "profile nginx-configmap has no UDP services ConfigMap (kubernetes.nginx.udpServicesConfigMap is not set)"
                    .to_owned()
            ),
            (
                1,
                "ingress controller Service ingress-nginx/gone does not exist in this cluster".to_owned()
            ),
        ]
    );
    settings.ingress_controller = None;
    let out = one(
        share(
            "a",
            "[{protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}]",
        ),
        &settings,
    );
    assert!(
        out.errors[0]
            .message
            .contains("kubernetes.ingressController.service")
    );
}

/// The guarantee: every rule renders (a target) or says why not (an error), in every
/// profile, and rendering twice gives the same objects.
#[test]
fn every_rule_renders_or_has_an_error_in_every_profile() {
    let yaml = "
- {protocol: HTTP, host: a.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: HTTP, port: 81, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: HTTPS, host: a.example.com, paths: [{path: /, backend: {service: web, port: 8080}}]}
- {protocol: TCP, port: 3306, backend: {service: mysql, port: 3306}}
- {protocol: UDP, port: 53, backend: {service: dns, port: 53}}
- {protocol: TCP, port: 53, backend: {service: dns, port: 53}}
- {protocol: TCP, port: 9000, backend: {service: manual, port: 9000}}
- {protocol: TLS, host: db.example.com, port: 5433, tlsMode: Passthrough, backend: {service: mysql, port: 3306}}
- {protocol: TLS, host: x.example.com, port: 5434, backend: {service: mysql, port: 3306}}
";
    for profile in Profile::ALL {
        let mut settings = nginx_settings();
        settings.profile = profile;
        let out = one(share("all", yaml), &settings);
        let count = rules(yaml).len();
        for rule in 0..count {
            let rule = rule_index(rule);
            let served = out.targets.iter().any(|t| t.rule == rule);
            let failed = out.errors.iter().any(|e| e.rule == rule);
            assert!(served || failed, "{profile}: rule {rule} vanished");
        }
        assert_eq!(out, one(share("all", yaml), &settings), "{profile}");
        for object in &out.objects {
            assert_eq!(object.object_ref().namespace, NS);
            let labels = object.metadata().labels.clone().unwrap();
            assert_eq!(labels[INGRESS_LABEL], "shop.all");
        }
    }
}
