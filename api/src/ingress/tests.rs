//! Unit tests of FederatedIngress decoding, defaulting and validation.

use super::*;

const SHOP: &str = r#"
apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {name: shop, namespace: default}
spec:
  rules:
  - protocol: http
    host: shop.example.com
    paths:
    - {path: /, pathType: prefix, backend: {service: web, port: 8080}}
  - protocol: HTTPS
    host: shop.example.com
    paths: [{path: /api, pathType: Prefix, backend: {service: api, port: 8443}}]
  - protocol: tls
    host: db.example.com
    port: 5433
    tlsMode: passthrough
    backend: {service: pg, port: 5432}
  - protocol: TCP
    port: 3306
    name: mysql
    backend: {service: mysql, port: 3306}
  - protocol: Udp
    port: 3306
    backend: {service: mysql, port: 3306}
  tls:
  - {hosts: [shop.example.com], secretName: shop-tls}
  placement:
    clusters: [eu-west, us-east]
    clusterSelector: {matchLabels: {env: prod}}
    maxClusters: 3
  overrides:
  - cluster: eu-west
    ingressClassName: nginx
    annotations: {example.com/tier: gold}
  traffic:
    dnsName: shop.example.com
    ttl: 30
    strategy:
      type: geo
    whenAllUnhealthy: servEALL
    failbackDelaySeconds: 30
"#;

fn shop() -> FederatedIngress {
    yaml_serde::from_str(SHOP).unwrap()
}

fn strings(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// Errors of the shop example after `edit` and defaulting.
fn shop_errors(edit: impl FnOnce(&mut FederatedIngressSpec)) -> Vec<String> {
    let mut fi = shop();
    edit(&mut fi.spec);
    fi.apply_defaults();
    strings(&fi.validate())
}

fn tcp(port: i32) -> IngressRule {
    IngressRule {
        port: Some(port),
        backend: Some(Backend::new("svc", port)),
        ..IngressRule::new(Protocol::Tcp)
    }
}

fn udp(port: i32) -> IngressRule {
    IngressRule {
        protocol: Protocol::Udp,
        ..tcp(port)
    }
}

fn http(host: Option<&str>, path: &str) -> IngressRule {
    IngressRule {
        host: host.map(str::to_owned),
        paths: vec![HttpPath {
            path: path.to_owned(),
            path_type: PathType::Prefix,
            backend: Backend::new("web", 8080),
        }],
        ..IngressRule::new(Protocol::Http)
    }
}

fn tls_rule(host: &str, mode: Option<TlsMode>) -> IngressRule {
    IngressRule {
        host: Some(host.to_owned()),
        tls_mode: mode,
        backend: Some(Backend::new("pg", 5432)),
        ..IngressRule::new(Protocol::Tls)
    }
}

#[test]
fn design_example_decodes_case_insensitively_and_writes_canonical() {
    let fi = shop();
    assert_eq!(fi.spec.rules[0].protocol, Protocol::Http);
    assert_eq!(fi.spec.rules[0].paths[0].path_type, PathType::Prefix);
    assert_eq!(fi.spec.rules[2].tls_mode, Some(TlsMode::Passthrough));
    assert_eq!(fi.spec.rules[4].protocol, Protocol::Udp);
    assert_eq!(fi.spec.traffic.strategy.type_, StrategyType::Geo);
    assert_eq!(
        fi.spec.traffic.when_all_unhealthy,
        WhenAllUnhealthy::ServeAll
    );
    assert!(fi.validate().is_empty(), "{:?}", strings(&fi.validate()));

    let json = serde_json::to_value(&fi).unwrap();
    let protocols: Vec<&str> = json["spec"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(protocols, vec!["HTTP", "HTTPS", "TLS", "TCP", "UDP"]);
    assert_eq!(json["spec"]["rules"][0]["paths"][0]["pathType"], "Prefix");
    assert_eq!(json["spec"]["rules"][2]["tlsMode"], "Passthrough");
    assert_eq!(json["spec"]["traffic"]["strategy"]["type"], "Geo");
    assert_eq!(json["spec"]["traffic"]["whenAllUnhealthy"], "ServeAll");
    assert_eq!(
        json["spec"]["placement"]["clusterSelector"]["matchLabels"]["env"],
        "prod"
    );
    assert_eq!(json["spec"]["tls"][0]["secretName"], "shop-tls");
    assert_eq!(
        json["metadata"],
        serde_json::json!({"name": "shop", "namespace": "default"})
    );
    // Absent optionals stay absent.
    assert!(json["spec"]["rules"][3].get("host").is_none());
    assert!(json.get("status").is_none());

    let back: FederatedIngress = serde_json::from_value(json).unwrap();
    assert_eq!(back, fi);
}

#[test]
fn unknown_enum_value_reads_like_a_field_error() {
    let err =
        serde_json::from_value::<IngressRule>(serde_json::json!({"protocol": "SCTP"})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Unsupported value: \"SCTP\": supported values: \"HTTP\", \"HTTPS\", \"TLS\", \"TCP\", \"UDP\""
    );
    assert!(serde_json::from_value::<IngressRule>(serde_json::json!({"protocol": 6})).is_err());
    for (text, want) in [
        ("roundrobin", StrategyType::RoundRobin),
        ("WEIGHTED", StrategyType::Weighted),
        ("failover", StrategyType::Failover),
        ("latency", StrategyType::Latency),
        ("Overflow", StrategyType::Overflow),
        ("anycast", StrategyType::Anycast),
    ] {
        assert_eq!(text.parse::<StrategyType>().unwrap(), want);
        assert_eq!(want.to_string().parse::<StrategyType>().unwrap(), want);
    }
    assert_eq!(
        "nodata".parse::<WhenAllUnhealthy>().unwrap(),
        WhenAllUnhealthy::NoData
    );
    assert_eq!("exact".parse::<PathType>().unwrap(), PathType::Exact);
    assert_eq!("aaaa".parse::<RecordType>().unwrap().as_str(), "AAAA");
    assert_eq!(
        "applied".parse::<ClusterPhase>().unwrap(),
        ClusterPhase::Applied
    );
    assert_eq!(Protocol::VALUES, &["HTTP", "HTTPS", "TLS", "TCP", "UDP"]);
    assert_eq!(Protocol::ALL.len(), 5);
}

#[test]
fn decoding_fills_unconditional_defaults() {
    let fi: FederatedIngress = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {"rules": [{"protocol": "HTTP", "paths": [{"backend": {"service": "web", "port": 80}}]}]},
    }))
    .unwrap();
    let path = &fi.spec.rules[0].paths[0];
    assert_eq!(path.path, "/");
    assert_eq!(path.path_type, PathType::Prefix);
    assert_eq!(fi.spec.traffic, Traffic::default());
    assert_eq!(fi.spec.traffic.ttl, 30);
    assert_eq!(fi.spec.traffic.strategy.type_, StrategyType::RoundRobin);
    assert_eq!(fi.spec.traffic.failback_delay_seconds, 30);
    // An object without spec decodes, and validation says what is missing.
    let empty: FederatedIngress =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "a", "namespace": "n"}}))
            .unwrap();
    assert_eq!(
        strings(&empty.validate()),
        vec![
            "spec.rules: Required value: at least one rule is required",
            "spec.traffic.dnsName: Required value: required when rules do not name exactly one host",
        ]
    );
}

#[test]
fn apply_defaults_fills_dependent_fields_and_is_idempotent() {
    let mut fi = FederatedIngress::new(
        "default",
        "shop",
        FederatedIngressSpec {
            rules: vec![
                http(Some("shop.example.com"), "/"),
                IngressRule {
                    protocol: Protocol::Https,
                    ..http(Some("shop.example.com"), "/api")
                },
                tls_rule("shop.example.com", None),
                tcp(3306),
            ],
            traffic: Traffic {
                strategy: Strategy {
                    type_: StrategyType::Overflow,
                    ..Strategy::default()
                },
                ..Traffic::default()
            },
            ..FederatedIngressSpec::default()
        },
    );
    fi.apply_defaults();
    let ports: Vec<Option<i32>> = fi.spec.rules.iter().map(|r| r.port).collect();
    assert_eq!(ports, vec![Some(80), Some(443), Some(443), Some(3306)]);
    assert_eq!(fi.spec.rules[2].tls_mode, Some(TlsMode::Terminate));
    assert_eq!(fi.spec.rules[0].tls_mode, None);
    assert_eq!(fi.spec.traffic.strategy.overflow_threshold, Some(0.8));
    assert_eq!(
        fi.spec.traffic.dns_name.as_deref(),
        Some("shop.example.com")
    );

    let once = fi.clone();
    fi.apply_defaults();
    assert_eq!(fi, once);
    // Defaults survive a round trip through JSON unchanged.
    let mut back: FederatedIngress =
        serde_json::from_value(serde_json::to_value(&fi).unwrap()).unwrap();
    back.apply_defaults();
    assert_eq!(back, once);

    // The shop example is idempotent too.
    let mut shop = shop();
    shop.apply_defaults();
    let once = shop.clone();
    shop.apply_defaults();
    assert_eq!(shop, once);
    assert_eq!(shop.spec.rules[0].port, Some(80));
    assert_eq!(shop.spec.rules[2].tls_mode, Some(TlsMode::Passthrough));
    assert_eq!(shop.spec.traffic.strategy.overflow_threshold, None);
}

#[test]
fn dns_name_defaults_only_from_one_non_wildcard_host() {
    let defaulted = |rules: Vec<IngressRule>| {
        let mut spec = FederatedIngressSpec {
            rules,
            ..FederatedIngressSpec::default()
        };
        spec.apply_defaults();
        spec.traffic.dns_name
    };
    assert_eq!(
        defaulted(vec![
            http(Some("a.example.com"), "/"),
            http(Some("a.example.com"), "/x"),
            tcp(1)
        ]),
        Some("a.example.com".to_owned())
    );
    assert_eq!(
        defaulted(vec![
            http(Some("a.example.com"), "/"),
            http(Some("b.example.com"), "/")
        ]),
        None
    );
    assert_eq!(defaulted(vec![http(Some("*.example.com"), "/")]), None);
    assert_eq!(defaulted(vec![tcp(1), udp(1)]), None);
    assert_eq!(defaulted(vec![http(None, "/")]), None);
    // An explicit name is kept.
    let mut spec = FederatedIngressSpec {
        rules: vec![http(Some("a.example.com"), "/")],
        ..FederatedIngressSpec::default()
    };
    spec.traffic.dns_name = Some("b.example.com".into());
    spec.apply_defaults();
    assert_eq!(spec.traffic.dns_name.as_deref(), Some("b.example.com"));
}

#[test]
fn listener_summary_and_hosts() {
    let fi = shop();
    assert_eq!(
        fi.listener_summary(),
        vec!["80/HTTP", "443/HTTPS", "5433/TLS", "3306/TCP", "3306/UDP"]
    );
    assert_eq!(fi.hosts(), vec!["shop.example.com", "db.example.com"]);
    let mut fi = fi;
    fi.spec.rules.push(http(Some("shop.example.com"), "/more"));
    fi.spec.rules.push(IngressRule::new(Protocol::Tcp));
    assert_eq!(fi.listener_summary().len(), 5);
    assert_eq!(fi.hosts().len(), 2);
}

#[test]
fn metadata_is_validated() {
    let mut fi = shop();
    fi.metadata.name = Some("Shop".into());
    fi.metadata.namespace = None;
    let errs = strings(&fi.validate());
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs[0]
            .starts_with("metadata.name: Invalid value: \"Shop\": a lowercase RFC 1123 subdomain")
    );
    assert_eq!(errs[1], "metadata.namespace: Required value");
    // Subdomains (dots) are fine for ingress names.
    fi.metadata = ObjectMeta::namespaced("default", "shop.v2");
    assert!(fi.validate().is_empty());
}

#[test]
fn rule_ports_and_hosts() {
    assert_eq!(
        shop_errors(|s| s.rules[2].port = Some(70000)),
        vec!["spec.rules[2].port: Invalid value: 70000: must be between 1 and 65535"]
    );
    assert_eq!(
        shop_errors(|s| s.rules[3].port = Some(0)),
        vec!["spec.rules[3].port: Invalid value: 0: must be between 1 and 65535"]
    );
    for bad in ["*", "foo.*.com", "*foo.com", "Shop.example.com", "10.0.0.1"] {
        let errs = shop_errors(|s| s.rules[0].host = Some(bad.to_owned()));
        assert!(!errs.is_empty(), "{bad}");
        assert!(
            errs[0].starts_with(&format!("spec.rules[0].host: Invalid value: \"{bad}\": ")),
            "{bad}: {errs:?}"
        );
    }
    assert_eq!(
        shop_errors(|s| s.rules[0].host = Some("10.0.0.1".into())),
        vec![
            "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address"
        ]
    );
    // A wildcard host is fine on HTTP.
    assert!(shop_errors(|s| s.rules[0].host = Some("*.example.com".into())).is_empty());
}

#[test]
fn http_rules() {
    assert_eq!(
        shop_errors(|s| {
            s.rules[0].paths.clear();
            s.rules[0].backend = Some(Backend::new("web", 80));
            s.rules[1].paths[0].path = "api".into();
            s.rules[1].paths[0].backend = Backend::new("", 0);
        }),
        vec![
            "spec.rules[0].paths: Required value: at least one path is required on HTTP and HTTPS rules",
            "spec.rules[0].backend: Forbidden: not allowed on HTTP and HTTPS rules: give each path a backend",
            "spec.rules[1].paths[0].path: Invalid value: \"api\": must start with '/'",
            "spec.rules[1].paths[0].backend.service: Required value",
            "spec.rules[1].paths[0].backend.port: Invalid value: 0: must be between 1 and 65535",
        ]
    );
    let errs = shop_errors(|s| s.rules[0].paths[0].backend.service = "Web_1".into());
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with(
        "spec.rules[0].paths[0].backend.service: Invalid value: \"Web_1\": a lowercase RFC 1123 label"
    ));
    // Exact and Prefix on the same path are different routes.
    assert!(
        shop_errors(|s| {
            let mut exact = s.rules[0].paths[0].clone();
            exact.path_type = PathType::Exact;
            s.rules[0].paths.push(exact);
        })
        .is_empty()
    );
}

#[test]
fn tls_rules() {
    assert_eq!(
        shop_errors(|s| {
            s.rules[2].host = None;
            s.rules[2].backend = None;
            s.rules[2].paths = vec![HttpPath::default()];
            s.rules[2].name = Some("pg".into());
        }),
        vec![
            "spec.rules[2].host: Required value: required on TLS rules: they are routed by SNI host name",
            "spec.rules[2].backend: Required value: required on TLS rules",
            "spec.rules[2].paths: Forbidden: only allowed on HTTP and HTTPS rules",
            "spec.rules[2].name: Forbidden: only allowed on TCP and UDP rules (it names their SRV records)",
        ]
    );
    assert_eq!(
        shop_errors(|s| s.rules[0].tls_mode = Some(TlsMode::Terminate)),
        vec!["spec.rules[0].tlsMode: Forbidden: only allowed on TLS rules"]
    );
}

#[test]
fn l4_rules() {
    assert_eq!(
        shop_errors(|s| {
            s.rules[3].port = None;
            s.rules[3].backend = None;
            s.rules[3].host = Some("db.example.com".into());
            s.rules[4].paths = vec![HttpPath::default()];
            s.rules[4].tls_mode = Some(TlsMode::Passthrough);
        }),
        vec![
            "spec.rules[3].port: Required value: required on TCP and UDP rules",
            "spec.rules[3].backend: Required value: required on TCP and UDP rules",
            "spec.rules[3].host: Forbidden: not allowed on TCP and UDP rules: they match on the port alone",
            "spec.rules[4].paths: Forbidden: only allowed on HTTP and HTTPS rules",
            "spec.rules[4].tlsMode: Forbidden: only allowed on TLS rules",
        ]
    );
    assert_eq!(
        shop_errors(|s| s.rules[3].backend = Some(Backend::new("mysql", 99999))),
        vec!["spec.rules[3].backend.port: Invalid value: 99999: must be between 1 and 65535"]
    );
}

#[test]
fn l4_service_names() {
    assert!(shop_errors(|s| s.rules[4].name = Some("mysql".into())).is_empty());
    assert_eq!(
        shop_errors(|s| s.rules[3].name = Some("a-very-long-service".into())),
        vec![
            "spec.rules[3].name: Invalid value: \"a-very-long-service\": must be no more than 15 characters"
        ]
    );
    assert_eq!(
        shop_errors(|s| s.rules[3].name = Some("MySQL".into())),
        vec![
            "spec.rules[3].name: Invalid value: \"MySQL\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
        ]
    );
    assert_eq!(
        shop_errors(|s| s.rules[0].name = Some("web".into())),
        vec![
            "spec.rules[0].name: Forbidden: only allowed on TCP and UDP rules (it names their SRV records)"
        ]
    );
}

#[test]
fn certificates_must_cover_terminated_hosts() {
    // HTTPS host without a certificate.
    assert_eq!(
        shop_errors(|s| s.tls.clear()),
        vec![
            "spec.rules[1].host: Invalid value: \"shop.example.com\": no spec.tls entry covers this host (HTTPS rules need a certificate)"
        ]
    );
    // TLS Terminate needs one too; Passthrough does not.
    assert_eq!(
        shop_errors(|s| s.rules[2].tls_mode = None),
        vec![
            "spec.rules[2].host: Invalid value: \"db.example.com\": no spec.tls entry covers this host (TLS rules with tlsMode Terminate need a certificate)"
        ]
    );
    // A wildcard certificate covers one label.
    assert!(
        shop_errors(|s| {
            s.rules[2].tls_mode = Some(TlsMode::Terminate);
            s.tls[0].hosts = vec!["*.example.com".into()];
        })
        .is_empty()
    );
    assert_eq!(
        shop_errors(|s| {
            s.rules[1].host = Some("a.shop.example.com".into());
            s.tls[0].hosts = vec!["*.example.com".into()];
        }),
        vec![
            "spec.rules[1].host: Invalid value: \"a.shop.example.com\": no spec.tls entry covers this host (HTTPS rules need a certificate)"
        ]
    );
    // A hostless HTTPS rule needs some certificate.
    assert_eq!(
        shop_errors(|s| {
            s.rules[1].host = None;
            s.tls.clear();
        }),
        vec![
            "spec.tls: Required value: spec.rules[1] has no host and HTTPS rules need a certificate: add a spec.tls entry"
        ]
    );
    assert!(shop_errors(|s| s.rules[1].host = None).is_empty());
}

#[test]
fn duplicate_l4_rules() {
    assert_eq!(
        shop_errors(|s| s.rules.push(tcp(3306))),
        vec!["spec.rules[5]: Duplicate value: \"TCP/3306\""]
    );
    assert_eq!(
        shop_errors(|s| s.rules.push(udp(3306))),
        vec!["spec.rules[5]: Duplicate value: \"UDP/3306\""]
    );
    // TCP and UDP on one port: mixed protocol, allowed.
    assert!(
        shop_errors(|s| {
            s.rules.push(tcp(7777));
            s.rules.push(udp(7777));
        })
        .is_empty()
    );
}

#[test]
fn duplicate_http_paths() {
    assert_eq!(
        shop_errors(|s| s.rules.push(http(Some("shop.example.com"), "/"))),
        vec!["spec.rules[5].paths[0]: Duplicate value: \"shop.example.com:80/ (Prefix)\""]
    );
    // Same path on another host, or another port, is a different route.
    assert!(shop_errors(|s| s.rules.push(http(Some("db.example.com"), "/"))).is_empty());
    assert!(
        shop_errors(|s| {
            let mut other_port = http(Some("shop.example.com"), "/");
            other_port.port = Some(8080);
            s.rules.push(other_port);
        })
        .is_empty()
    );
    // Within one rule too.
    assert_eq!(
        shop_errors(|s| {
            let first = s.rules[1].paths[0].clone();
            s.rules[1].paths.push(first);
        }),
        vec!["spec.rules[1].paths[1]: Duplicate value: \"shop.example.com:443/api (Prefix)\""]
    );
}

#[test]
fn duplicate_sni_routes() {
    assert_eq!(
        shop_errors(|s| {
            let mut again = s.rules[2].clone();
            again.backend = Some(Backend::new("other", 1));
            s.rules.push(again);
        }),
        vec!["spec.rules[5].host: Duplicate value: \"db.example.com:5433\""]
    );
    // HTTPS and TLS on one port with different hosts share the SNI listener.
    assert!(shop_errors(|s| s.rules[2].port = Some(443)).is_empty());
    // ... but not with the same host.
    assert_eq!(
        shop_errors(|s| {
            s.rules[2].port = Some(443);
            s.rules[2].host = Some("shop.example.com".into());
        }),
        vec!["spec.rules[2].host: Duplicate value: \"shop.example.com:443\""]
    );
    // Several HTTPS rules for one host and port merge their paths.
    assert!(
        shop_errors(|s| {
            let mut more = s.rules[1].clone();
            more.paths[0].path = "/v2".into();
            s.rules.push(more);
        })
        .is_empty()
    );
}

#[test]
fn port_shared_by_incompatible_listeners() {
    assert_eq!(
        shop_errors(|s| {
            let mut web = http(Some("shop.example.com"), "/alt");
            web.port = Some(8080);
            s.rules.push(web);
            s.rules.push(tcp(8080));
        }),
        vec![
            "spec.rules[6].port: Invalid value: 8080: port 8080 is used by both HTTP and TCP rules"
        ]
    );
    assert_eq!(
        shop_errors(|s| s.rules.push(tcp(443))),
        vec![
            "spec.rules[5].port: Invalid value: 443: port 443 is used by both HTTPS and TCP rules"
        ]
    );
    assert_eq!(
        shop_errors(|s| s.rules[1].port = Some(80)),
        vec!["spec.rules[1].port: Invalid value: 80: port 80 is used by both HTTP and HTTPS rules"]
    );
    assert_eq!(
        shop_errors(|s| s.rules[2].port = Some(80)),
        vec!["spec.rules[2].port: Invalid value: 80: port 80 is used by both HTTP and TLS rules"]
    );
    // UDP shares a port with anything TCP-based.
    assert!(shop_errors(|s| s.rules.push(udp(80))).is_empty());
    assert!(shop_errors(|s| s.rules.push(udp(443))).is_empty());
    // Reported once per pair of listener kinds.
    assert_eq!(
        shop_errors(|s| {
            s.rules.push(tcp(80));
            s.rules.push(http(Some("x.example.com"), "/"));
        })
        .len(),
        1
    );
}

#[test]
fn tls_entries() {
    assert_eq!(
        shop_errors(|s| {
            s.tls.push(IngressTls {
                hosts: vec!["shop.example.com".into(), "*.*.example.com".into()],
                secret_name: String::new(),
            });
            s.tls.push(IngressTls {
                hosts: vec![],
                secret_name: "Bad_Secret".into(),
            });
        })
        .iter()
        .map(|e| e.split(": ").take(2).collect::<Vec<_>>().join(": "))
        .collect::<Vec<_>>(),
        vec![
            "spec.tls[1].secretName: Required value",
            "spec.tls[1].hosts[0]: Duplicate value",
            "spec.tls[1].hosts[1]: Invalid value",
            "spec.tls[2].secretName: Invalid value",
        ]
    );
}

#[test]
fn placement() {
    assert_eq!(
        shop_errors(|s| {
            s.placement.clusters.push("eu-west".into());
            s.placement.clusters.push("EU".into());
            s.placement.max_clusters = Some(0);
            s.placement.cluster_selector = Some(LabelSelector {
                match_expressions: vec![crate::selector::LabelSelectorRequirement {
                    key: "env".into(),
                    operator: crate::selector::LabelSelectorOperator::In,
                    values: vec![],
                }],
                ..LabelSelector::default()
            });
        }),
        vec![
            "spec.placement.clusters[2]: Duplicate value: \"eu-west\"",
            "spec.placement.clusters[3]: Invalid value: \"EU\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')",
            "spec.placement.clusterSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
            "spec.placement.maxClusters: Invalid value: 0: must be greater than or equal to 1",
        ]
    );
    // An empty placement is valid (every schedulable cluster) and is not written out.
    let mut fi = shop();
    fi.spec.placement = Placement::default();
    assert!(fi.validate().is_empty());
    assert!(
        serde_json::to_value(&fi).unwrap()["spec"]
            .get("placement")
            .is_none()
    );
}

#[test]
fn overrides() {
    let errs = shop_errors(|s| {
        s.overrides.push(ClusterOverride {
            cluster: "eu-west".into(),
            ..ClusterOverride::default()
        });
        s.overrides.push(ClusterOverride::default());
        s.overrides.push(ClusterOverride {
            cluster: "us-east".into(),
            ingress_class_name: Some("Nginx".into()),
            annotations: [("a/b/c".to_owned(), String::new())].into(),
            ..ClusterOverride::default()
        });
    });
    let fields: Vec<&str> = errs.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.overrides[1].cluster",
            "spec.overrides[2].cluster",
            "spec.overrides[3].ingressClassName",
            "spec.overrides[3].annotations",
        ]
    );
    assert_eq!(
        errs[0],
        "spec.overrides[1].cluster: Duplicate value: \"eu-west\""
    );
    assert_eq!(errs[1], "spec.overrides[2].cluster: Required value");
}

#[test]
fn dns_name() {
    assert_eq!(
        shop_errors(|s| s.traffic.dns_name = None),
        vec![
            "spec.traffic.dnsName: Required value: required when rules do not name exactly one host"
        ]
    );
    assert_eq!(
        shop_errors(|s| s.traffic.dns_name = Some("*.example.com".into())),
        vec!["spec.traffic.dnsName: Invalid value: \"*.example.com\": must not be a wildcard"]
    );
    let errs = shop_errors(|s| s.traffic.dns_name = Some("Shop".into()));
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with(
        "spec.traffic.dnsName: Invalid value: \"Shop\": a lowercase RFC 1123 subdomain"
    ));
    // One wildcard host: no default, so it is required.
    let mut fi = FederatedIngress::new(
        "default",
        "w",
        FederatedIngressSpec {
            rules: vec![http(Some("*.example.com"), "/")],
            ..FederatedIngressSpec::default()
        },
    );
    fi.apply_defaults();
    assert_eq!(
        strings(&fi.validate()),
        vec![
            "spec.traffic.dnsName: Required value: required when the only host of the rules is a wildcard"
        ]
    );
    // Hostless L4 rules beside one host: defaults from that host.
    let mut fi = FederatedIngress::new(
        "default",
        "m",
        FederatedIngressSpec {
            rules: vec![http(Some("m.example.com"), "/"), tcp(5000)],
            ..FederatedIngressSpec::default()
        },
    );
    assert!(
        fi.validate().is_empty(),
        "validation accepts what defaulting will fill"
    );
    fi.apply_defaults();
    assert!(fi.validate().is_empty());
}

#[test]
fn ttl_and_failback() {
    assert_eq!(
        shop_errors(|s| {
            s.traffic.ttl = 0;
            s.traffic.failback_delay_seconds = -1;
        }),
        vec![
            "spec.traffic.ttl: Invalid value: 0: must be between 1 and 86400",
            "spec.traffic.failbackDelaySeconds: Invalid value: -1: must be between 0 and 86400",
        ]
    );
    assert!(
        shop_errors(|s| {
            s.traffic.ttl = 86400;
            s.traffic.failback_delay_seconds = 0;
        })
        .is_empty()
    );
    assert_eq!(
        shop_errors(|s| s.traffic.ttl = 86401),
        vec!["spec.traffic.ttl: Invalid value: 86401: must be between 1 and 86400"]
    );
}

fn strategy_errors(strategy: Strategy) -> Vec<String> {
    shop_errors(|s| s.traffic.strategy = strategy)
}

#[test]
fn strategy_parameters_belong_to_their_type() {
    assert_eq!(
        strategy_errors(Strategy {
            type_: StrategyType::Geo,
            weights: Some([("eu-west".to_owned(), 1)].into()),
            failover_order: Some(vec![vec!["eu-west".into()]]),
            overflow_threshold: Some(0.5),
            anycast_addresses: Some(vec!["192.0.2.10".into()]),
        }),
        vec![
            "spec.traffic.strategy.weights: Forbidden: only allowed when type is Weighted",
            "spec.traffic.strategy.failoverOrder: Forbidden: only allowed when type is Failover",
            "spec.traffic.strategy.overflowThreshold: Forbidden: only allowed when type is Overflow",
            "spec.traffic.strategy.anycastAddresses: Forbidden: only allowed when type is Anycast",
        ]
    );
    for (type_, field) in [
        (StrategyType::Weighted, "weights"),
        (StrategyType::Failover, "failoverOrder"),
        (StrategyType::Anycast, "anycastAddresses"),
    ] {
        assert_eq!(
            strategy_errors(Strategy {
                type_,
                ..Strategy::default()
            }),
            vec![format!(
                "spec.traffic.strategy.{field}: Required value: required when type is {type_}"
            )]
        );
    }
    // Overflow's threshold defaults; the other types need nothing.
    for type_ in [
        StrategyType::Overflow,
        StrategyType::RoundRobin,
        StrategyType::Geo,
        StrategyType::Latency,
    ] {
        assert!(
            strategy_errors(Strategy {
                type_,
                ..Strategy::default()
            })
            .is_empty(),
            "{type_}"
        );
    }
}

#[test]
fn weighted() {
    let weighted = |weights: &[(&str, i32)]| {
        strategy_errors(Strategy {
            type_: StrategyType::Weighted,
            weights: Some(weights.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()),
            ..Strategy::default()
        })
    };
    assert!(weighted(&[("eu-west", 3), ("us-east", 1)]).is_empty());
    assert!(weighted(&[("eu-west", 0), ("us-east", 1)]).is_empty());
    assert_eq!(
        weighted(&[("eu-west", -1), ("us-east", 0)]),
        vec![
            "spec.traffic.strategy.weights[eu-west]: Invalid value: -1: must be greater than or equal to 0",
            "spec.traffic.strategy.weights: Invalid value: {\"eu-west\":-1,\"us-east\":0}: at least one weight must be greater than 0",
        ]
    );
    assert_eq!(
        weighted(&[]),
        vec![
            "spec.traffic.strategy.weights: Invalid value: {}: at least one weight must be greater than 0"
        ]
    );
    let errs = weighted(&[("EU", 1)]);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with(
        "spec.traffic.strategy.weights: Invalid value: \"EU\": a lowercase RFC 1123 label"
    ));
}

#[test]
fn failover() {
    let failover = |tiers: Vec<Vec<&str>>| {
        strategy_errors(Strategy {
            type_: StrategyType::Failover,
            failover_order: Some(
                tiers
                    .into_iter()
                    .map(|t| t.into_iter().map(str::to_owned).collect())
                    .collect(),
            ),
            ..Strategy::default()
        })
    };
    assert!(failover(vec![vec!["eu-west"], vec!["us-east", "ap-south"]]).is_empty());
    assert_eq!(
        failover(vec![]),
        vec![
            "spec.traffic.strategy.failoverOrder: Required value: at least one tier is required when type is Failover"
        ]
    );
    assert_eq!(
        failover(vec![
            vec!["eu-west"],
            vec![],
            vec!["us-east", "eu-west"],
            vec!["Bad"]
        ])
        .iter()
        .map(|e| e.split(": ").take(3).collect::<Vec<_>>().join(": "))
        .collect::<Vec<_>>(),
        vec![
            "spec.traffic.strategy.failoverOrder[1]: Required value: a tier must name at least one cluster",
            "spec.traffic.strategy.failoverOrder[2][1]: Duplicate value: \"eu-west\"",
            "spec.traffic.strategy.failoverOrder[3][0]: Invalid value: \"Bad\"",
        ]
    );
}

#[test]
fn overflow() {
    let overflow = |threshold: f64| {
        strategy_errors(Strategy {
            type_: StrategyType::Overflow,
            overflow_threshold: Some(threshold),
            ..Strategy::default()
        })
    };
    assert!(overflow(1.0).is_empty());
    assert!(overflow(0.01).is_empty());
    for bad in [0.0, -0.5, 1.5] {
        assert_eq!(
            overflow(bad),
            vec![format!(
                "spec.traffic.strategy.overflowThreshold: Invalid value: {}: must be greater than 0 and at most 1",
                serde_json::Value::from(bad)
            )]
        );
    }
    assert_eq!(overflow(f64::NAN).len(), 1);
    let mut fi = shop();
    fi.spec.traffic.strategy = Strategy {
        type_: StrategyType::Overflow,
        ..Strategy::default()
    };
    assert_eq!(fi.spec.traffic.strategy.effective_overflow_threshold(), 0.8);
}

#[test]
fn anycast() {
    let anycast = |addresses: &[&str]| {
        strategy_errors(Strategy {
            type_: StrategyType::Anycast,
            anycast_addresses: Some(addresses.iter().map(|a| (*a).to_owned()).collect()),
            ..Strategy::default()
        })
    };
    assert!(anycast(&["192.0.2.10", "2001:db8::10"]).is_empty());
    assert_eq!(
        anycast(&[]),
        vec![
            "spec.traffic.strategy.anycastAddresses: Required value: at least one address is required when type is Anycast"
        ]
    );
    assert_eq!(
        anycast(&["192.0.2.10", "192.0.2.300", "192.0.2.10"]),
        vec![
            "spec.traffic.strategy.anycastAddresses[1]: Invalid value: \"192.0.2.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            "spec.traffic.strategy.anycastAddresses[2]: Duplicate value: \"192.0.2.10\"",
        ]
    );
}

#[test]
fn every_problem_is_reported() {
    let mut fi: FederatedIngress = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "Bad", "namespace": "default"},
        "spec": {
            "rules": [
                {"protocol": "HTTP", "port": 70000, "paths": [{"path": "x", "backend": {"service": "web", "port": 80}}]},
                {"protocol": "TCP", "backend": {"service": "db", "port": 5432}},
                {"protocol": "TCP", "port": 5432, "backend": {"service": "db", "port": 5432}},
                {"protocol": "TCP", "port": 5432, "backend": {"service": "db", "port": 5432}},
            ],
            "traffic": {"ttl": 0, "strategy": {"type": "Weighted"}},
        },
    }))
    .unwrap();
    fi.apply_defaults();
    assert_eq!(
        strings(&fi.validate())
            .iter()
            .map(|e| e.split(": ").next().unwrap().to_owned())
            .collect::<Vec<_>>(),
        vec![
            "metadata.name",
            "spec.rules[0].port",
            "spec.rules[0].paths[0].path",
            "spec.rules[1].port",
            "spec.rules[3]",
            "spec.traffic.dnsName",
            "spec.traffic.ttl",
            "spec.traffic.strategy.weights",
        ]
    );
}

#[test]
fn out_of_range_numbers_reach_validation() {
    // i32 fields decode values that validation then rejects with a field path.
    let fi: FederatedIngress = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {
            "rules": [{"protocol": "TCP", "port": -5, "backend": {"service": "db", "port": 70000}}],
            "traffic": {"dnsName": "a.example.com", "ttl": -1, "failbackDelaySeconds": 100000},
            "placement": {"maxClusters": -2},
        },
    }))
    .unwrap();
    assert_eq!(
        strings(&fi.validate()),
        vec![
            "spec.rules[0].port: Invalid value: -5: must be between 1 and 65535",
            "spec.rules[0].backend.port: Invalid value: 70000: must be between 1 and 65535",
            "spec.placement.maxClusters: Invalid value: -2: must be greater than or equal to 1",
            "spec.traffic.ttl: Invalid value: -1: must be between 1 and 86400",
            "spec.traffic.failbackDelaySeconds: Invalid value: 100000: must be between 0 and 86400",
        ]
    );
}

#[test]
fn status_round_trip() {
    let status: FederatedIngressStatus = yaml_serde::from_str(
        r#"
observedGeneration: 4
clusters:
- name: eu-west
  phase: applied
  addresses: [{ip: 127.0.0.11}]
  backends: [{service: web, port: 8080, ready: 2, total: 2}]
  anycast:
  - {address: 192.0.2.10, announced: true, reason: healthy}
  - {address: "2001:db8::10", announced: false}
  healthy: true
  message: ""
dns:
  records: [{name: shop.example.com, type: a, values: [127.0.0.11], scope: "eu"}]
  providers: [{name: embedded, synced: true}]
conditions:
- {type: Ready, status: "True", lastTransitionTime: "2026-11-21T10:00:00Z"}
"#,
    )
    .unwrap();
    assert_eq!(status.clusters[0].phase, ClusterPhase::Applied);
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["clusters"][0]["phase"], "Applied");
    assert_eq!(json["dns"]["records"][0]["type"], "A");
    assert!(json["clusters"][0].get("message").is_none());
    assert_eq!(json["clusters"][0]["anycast"][0]["address"], "192.0.2.10");
    assert_eq!(json["clusters"][0]["anycast"][1]["announced"], false);
    assert!(json["clusters"][0]["anycast"][1].get("reason").is_none());
    let back: FederatedIngressStatus = serde_json::from_value(json).unwrap();
    assert_eq!(back, status);

    let mut fi = shop();
    let mut other = shop();
    other.status = Some(status);
    fi.copy_status_from(&other);
    assert!(fi.status.is_some());
    fi.clear_status();
    assert!(fi.status.is_none());
}

#[test]
fn resource_constants_and_spec_value() {
    assert_eq!(FederatedIngress::KIND, "FederatedIngress");
    assert_eq!(FederatedIngress::LIST_KIND, "FederatedIngressList");
    assert_eq!(FederatedIngress::PLURAL, "federatedingresses");
    assert_eq!(FederatedIngress::SINGULAR, "federatedingress");
    assert_eq!(FederatedIngress::SHORT_NAMES, &["fing"]);
    const { assert!(FederatedIngress::NAMESPACED) };
    let fi = shop();
    assert_eq!(fi.spec_value()["rules"][0]["protocol"], "HTTP");
    let mut changed = fi.clone();
    changed.metadata.labels.insert("a".into(), "b".into());
    assert_eq!(
        changed.spec_value(),
        fi.spec_value(),
        "metadata does not move the spec"
    );
    let created = FederatedIngress::new("ns", "n", FederatedIngressSpec::default());
    assert_eq!(created.api_version, "fedingress.io/v1alpha1");
    assert_eq!(created.kind, "FederatedIngress");
}

#[test]
fn schema_carries_docs_defaults_and_enums() {
    let schema = serde_json::to_value(schemars::schema_for!(FederatedIngress)).unwrap();
    let text = schema.to_string();
    assert!(
        text.contains("Protocol of the listener"),
        "field docs become descriptions"
    );
    assert!(
        text.contains("[\"HTTP\",\"HTTPS\",\"TLS\",\"TCP\",\"UDP\"]"),
        "enums are inline"
    );
    assert!(text.contains(
        "[\"RoundRobin\",\"Weighted\",\"Failover\",\"Geo\",\"Latency\",\"Overflow\",\"Anycast\"]"
    ));
    assert!(text.contains("\"format\":\"date-time\""));
    assert!(text.contains("\"default\":30"), "serde defaults are shown");
}

/// A lone `placement.poolSelector` is kept when the object is serialized (as the store
/// does): `Placement::is_empty` ignores it, and serialization used to skip the whole
/// placement on it, so every stored ingress lost its poolSelector (issue 24).
#[test]
fn a_lone_pool_selector_survives_serialization() {
    let fi: FederatedIngress = yaml_serde::from_str(
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata: {name: w, namespace: default}\nspec:\n  rules: [{protocol: TCP, port: 7000, backend: {service: echo, port: 9000}}]\n  placement:\n    poolSelector: {matchLabels: {tier: gold}}\n",
    )
    .unwrap();
    assert!(fi.spec.placement.is_empty());
    let json = serde_json::to_value(&fi).unwrap();
    assert_eq!(
        json["spec"]["placement"],
        serde_json::json!({"poolSelector": {"matchLabels": {"tier": "gold"}}})
    );
    let back: FederatedIngress = serde_json::from_value(json).unwrap();
    assert_eq!(back.pool_selector("eu"), fi.pool_selector("eu"));
    assert!(back.pool_selector("eu").is_some());
    // Nothing set: no placement key at all.
    let mut bare = fi;
    bare.spec.placement = Placement::default();
    assert!(
        serde_json::to_value(&bare).unwrap()["spec"]
            .get("placement")
            .is_none()
    );
}
