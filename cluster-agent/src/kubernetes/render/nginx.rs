//! Profile `nginx-configmap`: TCP, UDP and TLS passthrough rules → entries of
//! ingress-nginx's `tcp-services` and `udp-services` ConfigMaps, the mechanism the seed
//! L4 proposal describes (<https://kubernetes.github.io/ingress-nginx/user-guide/exposing-tcp-udp-services/>).
//!
//! - The agent owns both ConfigMaps whole (`kubernetes.nginx.tcpServicesConfigMap` and
//!   `udpServicesConfigMap`), in their own namespace (the controller's, not the
//!   FederatedIngress's): they are rendered from the whole plan into
//!   [`super::PlanRender::shared`], empty when no rule uses them, so entries of removed
//!   rules go away. Data: key = the external port, value =
//!   `<namespace>/<service>:<port>` (the backend Service and its port).
//! - ingress-nginx must be started with `--tcp-services-configmap` and
//!   `--udp-services-configmap` naming them, and its own Service must expose each port
//!   (the Helm chart's `tcp:`/`udp:` values add ports to it, but they also make the chart
//!   render ConfigMaps of its own: point the flags at the agent's). A port the
//!   controller Service does not expose is a rule error saying which port to add. The
//!   rule's addresses are that Service's ([`super::RuleTarget`]).
//! - One controller serves every share: a protocol and port serve one rule in the whole
//!   cluster (the first share in key order keeps it), and TCP ports 80 and 443 are the
//!   controller's own HTTP and HTTPS ports. TLS passthrough rules are TCP ports (nginx's
//!   stream proxy does not route by SNI here); TLS termination is a rule error, as in
//!   every profile.
//! - The backend Service must exist and have the port (ingress-nginx resolves its
//!   endpoints itself, so it needs no selector).

use std::collections::BTreeMap;

use fedingress_api::plan::IngressKey;
use k8s_openapi::api::core::v1::ConfigMap;

use super::l4::{self, Transport};
use super::{
    Desired, ObjectRef, RenderSettings, RuleTarget, ShareContext, ShareRender, rule_index,
    shared_metadata,
};
use crate::config::kubernetes::ObjectName;

/// The data of both ConfigMaps, filled share by share.
#[derive(Default)]
pub(super) struct ServicesMaps {
    /// (transport, external port) → (the entry's value, who holds it).
    entries: BTreeMap<(Transport, i32), (String, IngressKey, usize)>,
}

impl ServicesMaps {
    /// The ConfigMaps the settings name, with their entries.
    pub(super) fn into_objects(self, settings: &RenderSettings) -> Vec<Desired> {
        let mut objects = Vec::new();
        for (transport, name) in [
            (Transport::Tcp, &settings.nginx_tcp_services),
            (Transport::Udp, &settings.nginx_udp_services),
        ] {
            let Some(name) = name else { continue };
            let data: BTreeMap<String, String> = self
                .entries
                .iter()
                .filter(|((t, _), _)| *t == transport)
                .map(|((_, port), (value, _, _))| (port.to_string(), value.clone()))
                .collect();
            objects.push(Desired::ConfigMap(ConfigMap {
                metadata: shared_metadata(name, settings),
                data: Some(data),
                ..ConfigMap::default()
            }));
        }
        objects
    }
}

/// The settings key naming the ConfigMap of `transport`.
fn setting(transport: Transport) -> &'static str {
    match transport {
        Transport::Tcp => "kubernetes.nginx.tcpServicesConfigMap",
        Transport::Udp => "kubernetes.nginx.udpServicesConfigMap",
    }
}

/// Renders the share's L4 rules as ConfigMap entries.
pub(super) fn render(ctx: &ShareContext<'_>, maps: &mut ServicesMaps, out: &mut ShareRender) {
    let settings = ctx.settings;
    let rules = l4::collect(ctx, "an ingress-nginx TCP port", out);
    let controller: Option<(&ObjectName, Option<_>)> = settings
        .ingress_controller
        .as_ref()
        .map(|c| (c, ctx.facts.service(&c.namespace, &c.name)));
    for l4 in rules {
        let error = |message: String| ctx.error(l4.rule, message);
        let proto = l4.transport.as_str();
        let port = l4.port;
        let configured = match l4.transport {
            Transport::Tcp => settings.nginx_tcp_services.is_some(),
            Transport::Udp => settings.nginx_udp_services.is_some(),
        };
        if !configured {
            out.errors.push(error(format!(
                "profile nginx-configmap has no {proto} services ConfigMap ({} is not set)",
                setting(l4.transport)
            )));
            continue;
        }
        if l4.transport == Transport::Tcp && (port == 80 || port == 443) {
            out.errors.push(error(format!(
                "TCP port {port} is the ingress controller's own HTTP(S) port"
            )));
            continue;
        }
        let Some((controller, controller_facts)) = &controller else {
            out.errors.push(error(
                "profile nginx-configmap needs kubernetes.ingressController.service: its Service carries the ports"
                    .to_owned(),
            ));
            continue;
        };
        let Some(controller_facts) = controller_facts else {
            out.errors.push(error(format!(
                "ingress controller Service {controller} does not exist in this cluster"
            )));
            continue;
        };
        let service = &l4.backend.service;
        let value = format!("{}/{service}:{}", ctx.namespace(), l4.backend.port);
        let described = format!("ingress controller Service {controller}");
        if l4::service_port(controller_facts, &described, l4.transport, port).is_err() {
            out.errors.push(error(format!(
                "{described} does not expose {proto} port {port}: add it to that Service (ingress-nginx Helm values: {}: {{\"{port}\": \"{value}\"}})",
                l4.transport.lower()
            )));
            continue;
        }
        let backend = format!("backend Service {}/{service}", ctx.namespace());
        let Some(backend_facts) = ctx.facts.service(ctx.namespace(), service) else {
            out.errors
                .push(error(format!("{backend} does not exist in this cluster")));
            continue;
        };
        if let Err(message) =
            l4::service_port(&backend_facts, &backend, l4.transport, l4.backend.port)
        {
            out.errors.push(error(message));
            continue;
        }
        if let Some((_, holder, rule)) = maps.entries.get(&(l4.transport, port)) {
            out.errors.push(error(format!(
                "{proto} port {port} of the ingress controller is already used by {holder} (rule {rule})"
            )));
            continue;
        }
        maps.entries.insert(
            (l4.transport, port),
            (value, ctx.share.key.clone(), l4.rule),
        );
        out.targets.push(RuleTarget {
            rule: rule_index(l4.rule),
            object: ObjectRef::service(controller),
        });
    }
}
