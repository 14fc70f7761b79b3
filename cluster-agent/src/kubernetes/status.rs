//! Pure: the report for the hub, from what was applied and what the watches see.
//!
//! - Addresses per rule come from `status.loadBalancer.ingress` (IPs and host names) of
//!   the object that serves the rule ([`super::render::RuleTarget`]). The share's
//!   addresses are those of its first rule (spec order) that has any; rules served
//!   elsewhere (a split UDP load balancer, an Ingress next to a TCP Service) are listed
//!   per rule, so DNS gives each its own targets.
//! - Backend health: the EndpointSlices of every backend Service (ready endpoints,
//!   terminating ones not ready). Data-path health: the ingress controller's own
//!   Service endpoints, reported as the backend `<namespace>/<name>` (port 0) of every
//!   share it carries traffic for.
//! - Rule errors: rendering and apply errors, a `SyncLoadBalancerFailed` event about the
//!   rule's Service (the cloud's message), a load balancer still without an address
//!   after the pending limit, and failing watches (on every rule: what the agent
//!   reports can no longer be trusted).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use fedingress_api::cluster::Address;
use fedingress_api::ingress::Protocol;
use fedingress_api::plan::{
    AgentReport, BackendHealth, ClusterPlan, IngressKey, IngressReport, IngressShare,
    RuleAddresses, RuleError,
};
use tokio::time::Instant;

use super::render::{Kind, ObjectRef, RuleTarget};
use super::world::{EndpointCounts, World};
use crate::config::kubernetes::ObjectName;

/// What the last apply left for one share.
#[derive(Clone, Debug, Default)]
pub struct ShareState {
    /// The generation whose objects were written (0: none yet).
    pub generation: i64,
    pub targets: Vec<RuleTarget>,
    /// Rendering and apply errors.
    pub errors: Vec<RuleError>,
}

/// Inputs of a report besides the plan.
pub struct ReportInput<'a> {
    pub world: &'a World,
    pub shares: &'a BTreeMap<IngressKey, ShareState>,
    /// When each object was first applied (for the pending limit).
    pub applied_at: &'a BTreeMap<ObjectRef, Instant>,
    pub ingress_controller: Option<&'a ObjectName>,
    pub pending_limit: Duration,
    pub now: Instant,
}

/// The report for `plan`.
pub fn report(plan: &ClusterPlan, input: &ReportInput<'_>) -> AgentReport {
    let problems = input.world.problems();
    let endpoints = input.world.endpoint_counts();
    let ingresses: Vec<IngressReport> = plan
        .ingresses
        .iter()
        .map(|(key, share)| match input.shares.get(key) {
            Some(state) => share_report(share, state, input, &problems, &endpoints),
            None => IngressReport {
                key: key.clone(),
                ..IngressReport::default()
            },
        })
        .collect();
    let mut addresses: Vec<Address> = match input.ingress_controller {
        Some(controller) => addresses_of(
            input.world,
            &ObjectRef {
                kind: Kind::Service,
                namespace: controller.namespace.clone(),
                name: controller.name.clone(),
            },
        ),
        None => Vec::new(),
    };
    for report in &ingresses {
        for address in &report.addresses {
            if !addresses.contains(address) {
                addresses.push(address.clone());
            }
        }
    }
    AgentReport {
        ingresses,
        addresses,
        // The cluster's own load balancers carry the traffic: no counters here.
        requests_per_second: 0.0,
        active_connections: 0,
        speaker: None,
        ..AgentReport::default()
    }
}

fn share_report(
    share: &IngressShare,
    state: &ShareState,
    input: &ReportInput<'_>,
    problems: &[String],
    endpoints: &EndpointCounts,
) -> IngressReport {
    let key = &share.key;
    let mut errors = state.errors.clone();
    let failed: Vec<u32> = errors.iter().map(|e| e.rule).collect();
    let mut per_rule: Vec<(u32, Vec<Address>)> = Vec::new();
    for target in &state.targets {
        if failed.contains(&target.rule) {
            continue;
        }
        let addresses = addresses_of(input.world, &target.object);
        if addresses.is_empty()
            && let Some(message) = load_balancer_problem(&target.object, input)
        {
            errors.push(RuleError {
                ingress: key.clone(),
                rule: target.rule,
                message,
            });
            continue;
        }
        per_rule.push((target.rule, addresses));
    }
    per_rule.sort_by_key(|(rule, _)| *rule);
    let addresses = per_rule
        .iter()
        .find(|(_, a)| !a.is_empty())
        .map(|(_, a)| a.clone())
        .unwrap_or_default();
    let rules = per_rule
        .into_iter()
        .filter(|(_, a)| *a != addresses)
        .map(|(rule, addresses)| RuleAddresses { rule, addresses })
        .collect();
    for problem in problems {
        for rule in 0..share.rules.len() {
            errors.push(RuleError {
                ingress: key.clone(),
                rule: u32::try_from(rule).unwrap_or(u32::MAX),
                message: format!("member cluster API: {problem}"),
            });
        }
    }
    errors.sort_by(|a, b| a.rule.cmp(&b.rule).then_with(|| a.message.cmp(&b.message)));
    errors.dedup();
    IngressReport {
        key: key.clone(),
        applied_generation: state.generation,
        addresses,
        backends: backends(share, input, endpoints),
        listeners: Vec::new(),
        rule_errors: errors,
        rules,
        anycast: Vec::new(),
    }
}

/// Why a rule's load balancer has no address, when that is an error yet.
fn load_balancer_problem(object: &ObjectRef, input: &ReportInput<'_>) -> Option<String> {
    let kind = object.kind.as_str();
    if object.kind == Kind::Service
        && let Some(service) = input.world.service(&object.namespace, &object.name)
        && let Some(uid) = service.metadata.uid.as_deref()
        && let Some(message) = input.world.load_balancer_failure(uid)
    {
        return Some(format!(
            "load balancer of {kind} {}/{} failed: {message}",
            object.namespace, object.name
        ));
    }
    let since = input.applied_at.get(object)?;
    let waited = input.now.saturating_duration_since(*since);
    (waited >= input.pending_limit).then(|| {
        format!(
            "load balancer of {kind} {}/{} has no address after {} s (status.loadBalancer.ingress is empty)",
            object.namespace,
            object.name,
            waited.as_secs()
        )
    })
}

/// `status.loadBalancer.ingress` of a Service or Ingress, as addresses.
pub fn addresses_of(world: &World, object: &ObjectRef) -> Vec<Address> {
    let entries: Vec<(Option<String>, Option<String>)> = match object.kind {
        Kind::Service => world
            .service(&object.namespace, &object.name)
            .and_then(|s| s.status.clone())
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .unwrap_or_default()
            .into_iter()
            .map(|i| (i.ip, i.hostname))
            .collect(),
        Kind::Ingress => world
            .ingress(&object.namespace, &object.name)
            .and_then(|s| s.status.clone())
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .unwrap_or_default()
            .into_iter()
            .map(|i| (i.ip, i.hostname))
            .collect(),
        Kind::ConfigMap | Kind::Deployment | Kind::PodDisruptionBudget => Vec::new(),
    };
    let mut out = Vec::new();
    for (ip, hostname) in entries {
        let address = match (ip.and_then(|ip| ip.parse::<IpAddr>().ok()), hostname) {
            (Some(ip), _) => Address::ip(ip),
            (None, Some(hostname)) if !hostname.is_empty() => Address::hostname(hostname),
            _ => continue,
        };
        if !out.contains(&address) {
            out.push(address);
        }
    }
    out
}

/// Backend health of every backend Service of the share, plus the ingress
/// controller's when it carries the share's traffic.
fn backends(
    share: &IngressShare,
    input: &ReportInput<'_>,
    endpoints: &EndpointCounts,
) -> Vec<BackendHealth> {
    let namespace = &share.key.namespace;
    let mut seen: Vec<(String, i32)> = Vec::new();
    let mut through_controller = false;
    for rule in &share.rules {
        match rule.protocol {
            Protocol::Http | Protocol::Https => {
                through_controller = true;
                for path in &rule.paths {
                    seen.push((path.backend.service.clone(), path.backend.port));
                }
            }
            _ => {
                if let Some(backend) = &rule.backend {
                    seen.push((backend.service.clone(), backend.port));
                }
            }
        }
    }
    seen.sort();
    seen.dedup();
    let mut out: Vec<BackendHealth> = seen
        .into_iter()
        .map(|(service, port)| {
            let (ready, total) = endpoints.get(namespace, &service);
            BackendHealth {
                service,
                port,
                ready,
                total,
            }
        })
        .collect();
    let controller_targeted = input.ingress_controller.is_some_and(|c| {
        input.shares.get(&share.key).is_some_and(|s| {
            s.targets.iter().any(|t| {
                t.object.kind == Kind::Service
                    && t.object.namespace == c.namespace
                    && t.object.name == c.name
            })
        })
    });
    if let Some(controller) = input.ingress_controller
        && (through_controller || controller_targeted)
    {
        let (ready, total) = endpoints.get(&controller.namespace, &controller.name);
        out.push(BackendHealth {
            service: controller.to_string(),
            port: 0,
            ready,
            total,
        });
    }
    out
}
