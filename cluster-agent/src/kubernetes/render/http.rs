//! HTTP and HTTPS rules → one `networking.k8s.io/v1` Ingress per FederatedIngress,
//! named like it, in every profile.
//!
//! - Rules of one host merge into one Ingress rule (hosts sorted, the hostless rule
//!   first); paths keep their `pathType` (`Prefix`, `Exact`) and go to the backend
//!   Service's port number. `spec.tls` holds the share's `tls` entries that cover an
//!   HTTPS rule's host (hosts and `secretName` as written).
//! - `ingressClassName`: the cluster override's, else the agent config's, else omitted
//!   (the cluster's default IngressClass).
//! - An Ingress serves HTTP on port 80 and HTTPS on 443 only: an HTTP rule on another
//!   port, or an HTTPS rule not on 443, is a rule error.
//! - An Ingress cannot route HTTP and HTTPS apart: a host's paths are served on both
//!   (HTTPS where `spec.tls` covers the host). The same path of one host in an HTTP and
//!   an HTTPS rule is fine when both name the same backend; with different backends the
//!   later rule gets a rule error for that path and its other paths still render.

use std::collections::{BTreeMap, BTreeSet};

use fedingress_api::ingress::{Backend, IngressTls, Protocol};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};

use super::{Desired, Kind, ObjectRef, RuleTarget, ShareContext, ShareRender, rule_index};

/// A routed path: which backend, and the first rule that asked for it.
struct Route<'a> {
    backend: &'a Backend,
    rule: usize,
}

/// Renders the share's HTTP and HTTPS rules into `out`.
pub(super) fn render(ctx: &ShareContext<'_>, out: &mut ShareRender) {
    // host ("" for none) → (path, pathType) → route
    let mut hosts: BTreeMap<&str, BTreeMap<(&str, &str), Route<'_>>> = BTreeMap::new();
    let mut https_hosts: BTreeSet<&str> = BTreeSet::new();
    let mut rendered: Vec<usize> = Vec::new();
    for (index, rule) in ctx.share.rules.iter().enumerate() {
        let (protocol, expected) = match rule.protocol {
            Protocol::Http => ("HTTP", 80),
            Protocol::Https => ("HTTPS", 443),
            _ => continue,
        };
        let port = rule.effective_port().unwrap_or(expected);
        if port != expected {
            out.errors.push(ctx.error(
                index,
                format!(
                    "a networking.k8s.io/v1 Ingress serves {protocol} on port {expected} only: port {port} cannot be expressed (use port {expected}, a TCP rule, or the standalone driver)"
                ),
            ));
            continue;
        }
        if rule.paths.is_empty() {
            out.errors
                .push(ctx.error(index, format!("the {protocol} rule has no paths")));
            continue;
        }
        let host = rule.host().unwrap_or("");
        let routes = hosts.entry(host).or_default();
        let mut any = false;
        for path in &rule.paths {
            let key = (path.path.as_str(), path.path_type.as_str());
            match routes.get(&key) {
                None => {
                    routes.insert(
                        key,
                        Route {
                            backend: &path.backend,
                            rule: index,
                        },
                    );
                    any = true;
                }
                Some(route) if route.backend == &path.backend => any = true,
                Some(route) => out.errors.push(ctx.error(
                    index,
                    format!(
                        "path {} ({}) of {} already goes to {}:{} (rule {}): an Ingress serves a host's paths on HTTP and HTTPS alike",
                        path.path,
                        path.path_type,
                        describe_host(host),
                        route.backend.service,
                        route.backend.port,
                        route.rule
                    ),
                )),
            }
        }
        if any {
            rendered.push(index);
            if rule.protocol == Protocol::Https {
                https_hosts.insert(host);
            }
        }
    }
    if rendered.is_empty() {
        return;
    }
    let name = ctx.share.key.name.clone();
    let object = ObjectRef::new(Kind::Ingress, ctx.namespace(), &name);
    out.targets
        .extend(rendered.into_iter().map(|rule| RuleTarget {
            rule: rule_index(rule),
            object: object.clone(),
        }));
    let rules = hosts
        .into_iter()
        .filter(|(_, routes)| !routes.is_empty())
        .map(|(host, routes)| IngressRule {
            host: (!host.is_empty()).then(|| host.to_owned()),
            http: Some(HTTPIngressRuleValue {
                paths: routes
                    .into_iter()
                    .map(|((path, path_type), route)| ingress_path(path, path_type, route.backend))
                    .collect(),
            }),
        })
        .collect();
    let tls: Vec<IngressTLS> = ctx
        .share
        .tls
        .iter()
        .filter(|entry| https_hosts.iter().any(|host| covers(entry, host)))
        .map(|entry| IngressTLS {
            hosts: (!entry.hosts.is_empty()).then(|| entry.hosts.clone()),
            secret_name: Some(entry.secret_name.clone()),
        })
        .collect();
    let class = ctx
        .share
        .cluster_override
        .as_ref()
        .and_then(|o| o.ingress_class_name.clone())
        .or_else(|| ctx.settings.ingress_class_name.clone());
    out.objects.push(Desired::Ingress(Ingress {
        metadata: ctx.metadata(name, BTreeMap::new(), false),
        spec: Some(IngressSpec {
            ingress_class_name: class,
            rules: Some(rules),
            tls: (!tls.is_empty()).then_some(tls),
            ..IngressSpec::default()
        }),
        status: None,
    }));
}

fn ingress_path(path: &str, path_type: &str, backend: &Backend) -> HTTPIngressPath {
    HTTPIngressPath {
        path: Some(path.to_owned()),
        path_type: path_type.to_owned(),
        backend: IngressBackend {
            service: Some(IngressServiceBackend {
                name: backend.service.clone(),
                port: Some(ServiceBackendPort {
                    number: Some(backend.port),
                    name: None,
                }),
            }),
            resource: None,
        },
    }
}

fn describe_host(host: &str) -> String {
    if host.is_empty() {
        "the rules without a host".to_owned()
    } else {
        format!("host {host}")
    }
}

/// Whether `entry` serves `host` ("" for rules without a host, which only an entry
/// without hosts serves): the name itself or a `*.` wildcard one label above it.
fn covers(entry: &IngressTls, host: &str) -> bool {
    if host.is_empty() {
        return entry.hosts.is_empty();
    }
    entry.hosts.iter().any(|name| {
        name == host
            || name.strip_prefix("*.").is_some_and(|parent| {
                host.split_once('.')
                    .is_some_and(|(label, rest)| !label.is_empty() && rest == parent)
            })
    })
}
