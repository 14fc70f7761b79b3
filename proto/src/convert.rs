//! The one boundary between generated protobuf types and domain types. Everything that
//! arrives is checked here: a message that does not make sense is a [`ConvertError`]
//! naming the field, never a panic.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use fedingress_api::cluster::{Address, Provider};
use fedingress_api::ingress::{
    Backend, ClusterOverride, HttpPath, IngressRule, IngressTls, PathType, Protocol, TlsMode,
};
use fedingress_api::plan::{
    AgentReport, AnycastRoute, BackendHealth, ClusterPlan, IngressKey, IngressReport, IngressShare,
    ListenerLoad, PlanDelta, PoolAssignment, PoolPeer, PoolPlan, PoolProvision, RuleAddresses,
    RuleError, SpeakerReport, VrrpReport,
};

use crate::{AgentToHub, Hello, HubToAgent, IssuedCertificate, JoinRequest, RenewRequest, pb};

/// A protobuf message that does not convert into the domain.
#[derive(Debug, thiserror::Error)]
#[error("invalid {field}: {problem}")]
pub struct ConvertError {
    pub field: String,
    pub problem: String,
}

impl ConvertError {
    fn new(field: &str, problem: impl Into<String>) -> Self {
        Self {
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}

impl From<ConvertError> for tonic::Status {
    fn from(error: ConvertError) -> Self {
        tonic::Status::invalid_argument(error.to_string())
    }
}

fn required<T>(value: Option<T>, field: &str) -> Result<T, ConvertError> {
    value.ok_or_else(|| ConvertError::new(field, "missing"))
}

// --- keys, rules, shares ---------------------------------------------------------------

fn key_to_pb(key: &IngressKey) -> pb::IngressKey {
    pb::IngressKey {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

fn key_from_pb(key: Option<pb::IngressKey>, field: &str) -> Result<IngressKey, ConvertError> {
    let key = required(key, field)?;
    if key.name.is_empty() {
        return Err(ConvertError::new(&format!("{field}.name"), "empty"));
    }
    Ok(IngressKey::new(key.namespace, key.name))
}

fn protocol_to_pb(protocol: Protocol) -> pb::Protocol {
    match protocol {
        Protocol::Http => pb::Protocol::Http,
        Protocol::Https => pb::Protocol::Https,
        Protocol::Tls => pb::Protocol::Tls,
        Protocol::Tcp => pb::Protocol::Tcp,
        Protocol::Udp => pb::Protocol::Udp,
    }
}

fn protocol_from_pb(value: i32, field: &str) -> Result<Protocol, ConvertError> {
    match pb::Protocol::try_from(value) {
        Ok(pb::Protocol::Http) => Ok(Protocol::Http),
        Ok(pb::Protocol::Https) => Ok(Protocol::Https),
        Ok(pb::Protocol::Tls) => Ok(Protocol::Tls),
        Ok(pb::Protocol::Tcp) => Ok(Protocol::Tcp),
        Ok(pb::Protocol::Udp) => Ok(Protocol::Udp),
        _ => Err(ConvertError::new(
            field,
            format!("unknown protocol {value}"),
        )),
    }
}

fn backend_to_pb(backend: &Backend) -> pb::Backend {
    pb::Backend {
        service: backend.service.clone(),
        port: backend.port,
    }
}

fn backend_from_pb(backend: pb::Backend) -> Backend {
    Backend::new(backend.service, backend.port)
}

fn rule_to_pb(rule: &IngressRule) -> pb::Rule {
    pb::Rule {
        protocol: protocol_to_pb(rule.protocol) as i32,
        host: rule.host.clone(),
        port: rule.port,
        name: rule.name.clone(),
        paths: rule
            .paths
            .iter()
            .map(|p| pb::HttpPath {
                path: p.path.clone(),
                path_type: match p.path_type {
                    PathType::Prefix => pb::PathType::Prefix,
                    PathType::Exact => pb::PathType::Exact,
                } as i32,
                backend: Some(backend_to_pb(&p.backend)),
            })
            .collect(),
        tls_mode: match rule.tls_mode {
            None => pb::TlsMode::Unspecified,
            Some(TlsMode::Terminate) => pb::TlsMode::Terminate,
            Some(TlsMode::Passthrough) => pb::TlsMode::Passthrough,
        } as i32,
        backend: rule.backend.as_ref().map(backend_to_pb),
    }
}

fn rule_from_pb(rule: pb::Rule, field: &str) -> Result<IngressRule, ConvertError> {
    let mut out = IngressRule::new(protocol_from_pb(
        rule.protocol,
        &format!("{field}.protocol"),
    )?);
    out.host = rule.host;
    out.port = rule.port;
    out.name = rule.name;
    out.tls_mode = match pb::TlsMode::try_from(rule.tls_mode) {
        Ok(pb::TlsMode::Unspecified) => None,
        Ok(pb::TlsMode::Terminate) => Some(TlsMode::Terminate),
        Ok(pb::TlsMode::Passthrough) => Some(TlsMode::Passthrough),
        Err(_) => {
            return Err(ConvertError::new(
                &format!("{field}.tlsMode"),
                format!("unknown TLS mode {}", rule.tls_mode),
            ));
        }
    };
    out.backend = rule.backend.map(backend_from_pb);
    for (i, path) in rule.paths.into_iter().enumerate() {
        let path_type = match pb::PathType::try_from(path.path_type) {
            Ok(pb::PathType::Prefix | pb::PathType::Unspecified) => PathType::Prefix,
            Ok(pb::PathType::Exact) => PathType::Exact,
            Err(_) => {
                return Err(ConvertError::new(
                    &format!("{field}.paths[{i}].pathType"),
                    format!("unknown path type {}", path.path_type),
                ));
            }
        };
        out.paths.push(HttpPath {
            path: path.path,
            path_type,
            backend: backend_from_pb(required(
                path.backend,
                &format!("{field}.paths[{i}].backend"),
            )?),
        });
    }
    Ok(out)
}

fn share_to_pb(share: &IngressShare) -> pb::IngressShare {
    pb::IngressShare {
        key: Some(key_to_pb(&share.key)),
        uid: share.uid.clone(),
        generation: share.generation,
        rules: share.rules.iter().map(rule_to_pb).collect(),
        tls: share
            .tls
            .iter()
            .map(|t| pb::Tls {
                hosts: t.hosts.clone(),
                secret_name: t.secret_name.clone(),
            })
            .collect(),
        r#override: share.cluster_override.as_ref().map(|o| pb::Override {
            cluster: o.cluster.clone(),
            ingress_class_name: o.ingress_class_name.clone(),
            annotations: o.annotations.clone().into_iter().collect(),
        }),
        anycast_addresses: share
            .anycast_addresses
            .iter()
            .map(ToString::to_string)
            .collect(),
    }
}

fn share_from_pb(share: pb::IngressShare, field: &str) -> Result<IngressShare, ConvertError> {
    let key = key_from_pb(share.key, &format!("{field}.key"))?;
    let rules = share
        .rules
        .into_iter()
        .enumerate()
        .map(|(i, rule)| rule_from_pb(rule, &format!("{field}.rules[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IngressShare {
        key,
        uid: share.uid,
        generation: share.generation,
        rules,
        tls: share
            .tls
            .into_iter()
            .map(|t| IngressTls {
                hosts: t.hosts,
                secret_name: t.secret_name,
            })
            .collect(),
        cluster_override: share.r#override.map(|o| ClusterOverride {
            cluster: o.cluster,
            ingress_class_name: o.ingress_class_name,
            annotations: o.annotations.into_iter().collect(),
            pool_selector: None,
        }),
        anycast_addresses: ips_from_pb(
            share.anycast_addresses,
            &format!("{field}.anycastAddresses"),
        )?,
    })
}

fn ips_from_pb(ips: Vec<String>, field: &str) -> Result<Vec<IpAddr>, ConvertError> {
    ips.into_iter()
        .enumerate()
        .map(|(i, ip)| {
            ip.parse().map_err(|_| {
                ConvertError::new(
                    &format!("{field}[{i}]"),
                    format!("{ip:?} is not an IP address"),
                )
            })
        })
        .collect()
}

fn shares_from_pb(
    shares: Vec<pb::IngressShare>,
    field: &str,
) -> Result<Vec<IngressShare>, ConvertError> {
    shares
        .into_iter()
        .enumerate()
        .map(|(i, s)| share_from_pb(s, &format!("{field}[{i}]")))
        .collect()
}

// --- reports ---------------------------------------------------------------------------

fn address_to_pb(address: &Address) -> pb::Address {
    let kind = match (&address.ip, &address.hostname) {
        (Some(ip), _) => Some(pb::address::Kind::Ip(ip.to_string())),
        (None, Some(host)) => Some(pb::address::Kind::Hostname(host.clone())),
        (None, None) => None,
    };
    pb::Address { kind }
}

fn address_from_pb(address: pb::Address, field: &str) -> Result<Address, ConvertError> {
    match address.kind {
        Some(pb::address::Kind::Ip(ip)) => ip
            .parse::<IpAddr>()
            .map(Address::ip)
            .map_err(|_| ConvertError::new(field, format!("{ip:?} is not an IP address"))),
        Some(pb::address::Kind::Hostname(host)) if !host.is_empty() => Ok(Address::hostname(host)),
        _ => Err(ConvertError::new(field, "neither an IP nor a hostname")),
    }
}

fn addresses_from_pb(
    addresses: Vec<pb::Address>,
    field: &str,
) -> Result<Vec<Address>, ConvertError> {
    addresses
        .into_iter()
        .enumerate()
        .map(|(i, a)| address_from_pb(a, &format!("{field}[{i}]")))
        .collect()
}

fn rule_error_to_pb(error: &RuleError) -> pb::RuleError {
    pb::RuleError {
        ingress: Some(key_to_pb(&error.ingress)),
        rule: error.rule,
        message: error.message.clone(),
    }
}

fn rule_errors_from_pb(
    errors: Vec<pb::RuleError>,
    field: &str,
) -> Result<Vec<RuleError>, ConvertError> {
    errors
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            Ok(RuleError {
                ingress: key_from_pb(e.ingress, &format!("{field}[{i}].ingress"))?,
                rule: e.rule,
                message: e.message,
            })
        })
        .collect()
}

fn report_to_pb(report: &AgentReport) -> pb::Report {
    pb::Report {
        ingresses: report
            .ingresses
            .iter()
            .map(|r| pb::IngressReport {
                key: Some(key_to_pb(&r.key)),
                applied_generation: r.applied_generation,
                addresses: r.addresses.iter().map(address_to_pb).collect(),
                backends: r
                    .backends
                    .iter()
                    .map(|b| pb::BackendHealth {
                        service: b.service.clone(),
                        port: b.port,
                        ready: b.ready,
                        total: b.total,
                    })
                    .collect(),
                listeners: r
                    .listeners
                    .iter()
                    .map(|l| pb::ListenerLoad {
                        protocol: l.protocol.clone(),
                        port: u32::from(l.port),
                        connections_per_second: l.connections_per_second,
                        active_connections: l.active_connections,
                    })
                    .collect(),
                rule_errors: r.rule_errors.iter().map(rule_error_to_pb).collect(),
                rules: r
                    .rules
                    .iter()
                    .map(|rule| pb::RuleAddresses {
                        rule: rule.rule,
                        addresses: rule.addresses.iter().map(address_to_pb).collect(),
                    })
                    .collect(),
                anycast: r
                    .anycast
                    .iter()
                    .map(|a| pb::AnycastRoute {
                        address: a.address.to_string(),
                        announced: a.announced,
                        reason: a.reason.clone(),
                    })
                    .collect(),
            })
            .collect(),
        addresses: report.addresses.iter().map(address_to_pb).collect(),
        requests_per_second: report.requests_per_second,
        active_connections: report.active_connections,
        speaker: report.speaker.as_ref().map(|s| pb::SpeakerReport {
            up: s.up,
            peers: s.peers,
            established_peers: s.established_peers,
            message: s.message.clone(),
        }),
        process_cpu: report.process_cpu,
        host_cpu: report.host_cpu,
        bytes_per_second: report.bytes_per_second,
        vrrp: report
            .vrrp
            .iter()
            .map(|v| pb::VrrpReport {
                pool: v.pool.clone(),
                state: v.state.clone(),
            })
            .collect(),
    }
}

/// Per-rule addresses: each rule listed once, with at least one address (a rule served
/// on the share's addresses is simply not listed).
fn rule_addresses_from_pb(
    rules: Vec<pb::RuleAddresses>,
    field: &str,
) -> Result<Vec<RuleAddresses>, ConvertError> {
    let mut out: Vec<RuleAddresses> = Vec::with_capacity(rules.len());
    for (j, rule) in rules.into_iter().enumerate() {
        let at = format!("{field}[{j}]");
        if out.iter().any(|r| r.rule == rule.rule) {
            return Err(ConvertError::new(
                &format!("{at}.rule"),
                format!("rule {} is listed twice", rule.rule),
            ));
        }
        if rule.addresses.is_empty() {
            return Err(ConvertError::new(&format!("{at}.addresses"), "empty"));
        }
        out.push(RuleAddresses {
            rule: rule.rule,
            addresses: addresses_from_pb(rule.addresses, &format!("{at}.addresses"))?,
        });
    }
    Ok(out)
}

fn report_from_pb(report: pb::Report) -> Result<AgentReport, ConvertError> {
    let mut ingresses = Vec::with_capacity(report.ingresses.len());
    for (i, r) in report.ingresses.into_iter().enumerate() {
        let field = format!("report.ingresses[{i}]");
        let listeners = r
            .listeners
            .into_iter()
            .enumerate()
            .map(|(j, l)| {
                let port = u16::try_from(l.port).map_err(|_| {
                    ConvertError::new(
                        &format!("{field}.listeners[{j}].port"),
                        format!("{} is not a port", l.port),
                    )
                })?;
                Ok(ListenerLoad {
                    protocol: l.protocol,
                    port,
                    connections_per_second: l.connections_per_second,
                    active_connections: l.active_connections,
                })
            })
            .collect::<Result<Vec<_>, ConvertError>>()?;
        ingresses.push(IngressReport {
            key: key_from_pb(r.key, &format!("{field}.key"))?,
            applied_generation: r.applied_generation,
            addresses: addresses_from_pb(r.addresses, &format!("{field}.addresses"))?,
            backends: r
                .backends
                .into_iter()
                .map(|b| BackendHealth {
                    service: b.service,
                    port: b.port,
                    ready: b.ready,
                    total: b.total,
                })
                .collect(),
            listeners,
            rule_errors: rule_errors_from_pb(r.rule_errors, &format!("{field}.ruleErrors"))?,
            rules: rule_addresses_from_pb(r.rules, &format!("{field}.rules"))?,
            anycast: anycast_from_pb(r.anycast, &format!("{field}.anycast"))?,
        });
    }
    for (field, value) in [
        ("report.requestsPerSecond", report.requests_per_second),
        ("report.processCpu", report.process_cpu),
        ("report.hostCpu", report.host_cpu),
        ("report.bytesPerSecond", report.bytes_per_second),
    ] {
        if !value.is_finite() || value < 0.0 {
            return Err(ConvertError::new(field, "must be a finite number ≥ 0"));
        }
    }
    Ok(AgentReport {
        ingresses,
        addresses: addresses_from_pb(report.addresses, "report.addresses")?,
        requests_per_second: report.requests_per_second,
        active_connections: report.active_connections,
        speaker: report.speaker.map(|s| SpeakerReport {
            up: s.up,
            peers: s.peers,
            established_peers: s.established_peers,
            message: s.message,
        }),
        process_cpu: report.process_cpu,
        host_cpu: report.host_cpu,
        bytes_per_second: report.bytes_per_second,
        vrrp: report
            .vrrp
            .into_iter()
            .map(|v| VrrpReport {
                pool: v.pool,
                state: v.state,
            })
            .collect(),
    })
}

fn pool_plan_to_pb(plan: &PoolPlan) -> pb::PoolPlan {
    pb::PoolPlan {
        pools: plan
            .pools
            .iter()
            .map(|p| pb::PoolAssignment {
                name: p.name.clone(),
                vips: p.vips.iter().map(ToString::to_string).collect(),
                prefix_len: u32::from(p.prefix_len),
                virtual_router_id: u32::from(p.virtual_router_id),
                members: p
                    .members
                    .iter()
                    .map(|m| pb::PoolPeer {
                        name: m.name.clone(),
                        address: m.address.map(|a| a.to_string()).unwrap_or_default(),
                        priority: u32::from(m.priority),
                    })
                    .collect(),
            })
            .collect(),
        bindings: plan
            .bindings
            .iter()
            .map(|(key, pools)| pb::PoolBinding {
                key: Some(key_to_pb(key)),
                pools: pools.clone(),
            })
            .collect(),
        provisions: plan
            .provisions
            .iter()
            .map(|p| pb::PoolProvision {
                name: p.name.clone(),
                replicas: p.replicas,
                member_labels: p.member_labels.clone().into_iter().collect(),
                requests: p.requests.clone().into_iter().collect(),
                limits: p.limits.clone().into_iter().collect(),
            })
            .collect(),
    }
}

fn small(value: u32, max: u32, field: &str) -> Result<u8, ConvertError> {
    u8::try_from(value)
        .ok()
        .filter(|v| u32::from(*v) <= max)
        .ok_or_else(|| ConvertError::new(field, format!("{value} is more than {max}")))
}

fn pool_plan_from_pb(plan: pb::PoolPlan, field: &str) -> Result<PoolPlan, ConvertError> {
    let mut pools = Vec::with_capacity(plan.pools.len());
    for (i, p) in plan.pools.into_iter().enumerate() {
        let at = format!("{field}.pools[{i}]");
        let mut members = Vec::with_capacity(p.members.len());
        for (j, m) in p.members.into_iter().enumerate() {
            let at = format!("{at}.members[{j}]");
            members.push(PoolPeer {
                address: match m.address.as_str() {
                    "" => None,
                    a => Some(a.parse().map_err(|_| {
                        ConvertError::new(&format!("{at}.address"), format!("{a:?} is not an IP"))
                    })?),
                },
                priority: small(m.priority, 254, &format!("{at}.priority"))?,
                name: m.name,
            });
        }
        pools.push(PoolAssignment {
            vips: ips_from_pb(p.vips, &format!("{at}.vips"))?,
            prefix_len: small(p.prefix_len, 128, &format!("{at}.prefixLen"))?,
            virtual_router_id: small(p.virtual_router_id, 255, &format!("{at}.virtualRouterId"))?,
            name: p.name,
            members,
        });
    }
    let mut bindings = BTreeMap::new();
    for (i, b) in plan.bindings.into_iter().enumerate() {
        let key = key_from_pb(b.key, &format!("{field}.bindings[{i}].key"))?;
        bindings.insert(key, b.pools);
    }
    Ok(PoolPlan {
        pools,
        bindings,
        provisions: plan
            .provisions
            .into_iter()
            .map(|p| PoolProvision {
                name: p.name,
                replicas: p.replicas,
                member_labels: p.member_labels.into_iter().collect(),
                requests: p.requests.into_iter().collect(),
                limits: p.limits.into_iter().collect(),
            })
            .collect(),
    })
}

fn anycast_from_pb(
    routes: Vec<pb::AnycastRoute>,
    field: &str,
) -> Result<Vec<AnycastRoute>, ConvertError> {
    routes
        .into_iter()
        .enumerate()
        .map(|(i, route)| {
            let address = route.address.parse().map_err(|_| {
                ConvertError::new(
                    &format!("{field}[{i}].address"),
                    format!("{:?} is not an IP address", route.address),
                )
            })?;
            Ok(AnycastRoute {
                address,
                announced: route.announced,
                reason: route.reason,
            })
        })
        .collect()
}

// --- whole messages --------------------------------------------------------------------

/// Encodes an agent message.
pub fn join_to_pb(request: &JoinRequest) -> pb::JoinRequest {
    pb::JoinRequest {
        cluster: request.cluster.clone(),
        join_token: request.join_token.clone(),
        csr_pem: request.csr_pem.clone(),
        member: request.member.clone(),
    }
}

pub fn join_from_pb(request: pb::JoinRequest) -> Result<JoinRequest, ConvertError> {
    for (field, value) in [
        ("cluster", &request.cluster),
        ("join_token", &request.join_token),
        ("csr_pem", &request.csr_pem),
    ] {
        if value.is_empty() {
            return Err(ConvertError::new(field, "required"));
        }
    }
    Ok(JoinRequest {
        cluster: request.cluster,
        join_token: request.join_token,
        csr_pem: request.csr_pem,
        member: request.member,
    })
}

pub fn renew_to_pb(request: &RenewRequest) -> pb::RenewRequest {
    pb::RenewRequest {
        cluster: request.cluster.clone(),
        csr_pem: request.csr_pem.clone(),
        member: request.member.clone(),
    }
}

pub fn renew_from_pb(request: pb::RenewRequest) -> Result<RenewRequest, ConvertError> {
    for (field, value) in [("cluster", &request.cluster), ("csr_pem", &request.csr_pem)] {
        if value.is_empty() {
            return Err(ConvertError::new(field, "required"));
        }
    }
    Ok(RenewRequest {
        cluster: request.cluster,
        csr_pem: request.csr_pem,
        member: request.member,
    })
}

pub fn issued_to_pb(issued: &IssuedCertificate) -> pb::IssuedCertificate {
    pb::IssuedCertificate {
        certificate_pem: issued.certificate_pem.clone(),
        ca_pem: issued.ca_pem.clone(),
        not_after_unix: issued.not_after_unix,
        fingerprint: issued.fingerprint.clone(),
    }
}

pub fn issued_from_pb(issued: pb::IssuedCertificate) -> Result<IssuedCertificate, ConvertError> {
    Ok(IssuedCertificate {
        certificate_pem: issued.certificate_pem,
        ca_pem: issued.ca_pem,
        not_after_unix: issued.not_after_unix,
        fingerprint: issued.fingerprint,
    })
}

pub fn agent_to_pb(message: &AgentToHub) -> pb::AgentMessage {
    use pb::agent_message::Kind;
    let kind = match message {
        AgentToHub::Hello(hello) => Kind::Hello(pb::Hello {
            cluster: hello.cluster.clone(),
            token: hello.token.clone(),
            agent_version: hello.agent_version.clone(),
            driver: hello.driver.clone(),
            capabilities: hello.capabilities.clone(),
            applied_version: hello.applied_version,
            applied_digest: hello.applied_digest.clone(),
            member: hello.member.clone(),
            member_labels: hello.member_labels.clone().into_iter().collect(),
            member_address: hello
                .member_address
                .map(|a| a.to_string())
                .unwrap_or_default(),
        }),
        AgentToHub::Ack { version } => Kind::Ack(pb::Ack { version: *version }),
        AgentToHub::Nack {
            version,
            error,
            rule_errors,
        } => Kind::Nack(pb::Nack {
            version: *version,
            error: error.clone(),
            rule_errors: rule_errors.iter().map(rule_error_to_pb).collect(),
        }),
        AgentToHub::Report(report) => Kind::Report(report_to_pb(report)),
        AgentToHub::Heartbeat => Kind::Heartbeat(pb::Heartbeat {}),
    };
    pb::AgentMessage { kind: Some(kind) }
}

/// Decodes an agent message.
pub fn agent_from_pb(message: pb::AgentMessage) -> Result<AgentToHub, ConvertError> {
    use pb::agent_message::Kind;
    Ok(match required(message.kind, "message")? {
        Kind::Hello(hello) => {
            if hello.cluster.is_empty() {
                return Err(ConvertError::new("hello.cluster", "empty"));
            }
            AgentToHub::Hello(Hello {
                cluster: hello.cluster,
                token: hello.token,
                agent_version: hello.agent_version,
                driver: hello.driver,
                capabilities: hello.capabilities,
                applied_version: hello.applied_version,
                applied_digest: hello.applied_digest,
                member: hello.member,
                member_labels: hello.member_labels.into_iter().collect(),
                member_address: match hello.member_address.as_str() {
                    "" => None,
                    address => Some(address.parse().map_err(|_| {
                        ConvertError::new(
                            "hello.memberAddress",
                            format!("{address:?} is not an IP address"),
                        )
                    })?),
                },
            })
        }
        Kind::Ack(ack) => AgentToHub::Ack {
            version: ack.version,
        },
        Kind::Nack(nack) => AgentToHub::Nack {
            version: nack.version,
            error: nack.error,
            rule_errors: rule_errors_from_pb(nack.rule_errors, "nack.ruleErrors")?,
        },
        Kind::Report(report) => AgentToHub::Report(report_from_pb(report)?),
        Kind::Heartbeat(_) => AgentToHub::Heartbeat,
    })
}

/// Encodes a hub message.
pub fn hub_to_pb(message: &HubToAgent) -> pb::HubMessage {
    use pb::hub_message::Kind;
    let kind = match message {
        HubToAgent::Welcome {
            heartbeat_interval_ms,
            lease_ms,
            provider,
            cordoned,
        } => Kind::Welcome(pb::Welcome {
            heartbeat_interval_ms: *heartbeat_interval_ms,
            lease_ms: *lease_ms,
            provider: provider
                .map(Provider::as_str)
                .unwrap_or_default()
                .to_owned(),
            cordoned: *cordoned,
        }),
        HubToAgent::Snapshot {
            version,
            digest,
            plan,
        } => Kind::Snapshot(pb::Snapshot {
            version: *version,
            digest: digest.clone(),
            ingresses: plan.ingresses.values().map(|s| share_to_pb(s)).collect(),
            pools: (!plan.pools.is_empty()).then(|| pool_plan_to_pb(&plan.pools)),
        }),
        HubToAgent::Delta {
            version,
            digest,
            base_version,
            delta,
        } => Kind::Delta(pb::Delta {
            version: *version,
            digest: digest.clone(),
            base_version: *base_version,
            upserts: delta.upserts.iter().map(|s| share_to_pb(s)).collect(),
            deletes: delta.deletes.iter().map(key_to_pb).collect(),
            pools: delta.pools.as_deref().map(pool_plan_to_pb),
        }),
        HubToAgent::Ping => Kind::Ping(pb::Ping {}),
    };
    pb::HubMessage { kind: Some(kind) }
}

/// Decodes a hub message.
pub fn hub_from_pb(message: pb::HubMessage) -> Result<HubToAgent, ConvertError> {
    use pb::hub_message::Kind;
    Ok(match required(message.kind, "message")? {
        Kind::Welcome(welcome) => {
            if welcome.heartbeat_interval_ms == 0 || welcome.lease_ms == 0 {
                return Err(ConvertError::new(
                    "welcome",
                    "heartbeat interval and lease must be positive",
                ));
            }
            HubToAgent::Welcome {
                heartbeat_interval_ms: welcome.heartbeat_interval_ms,
                lease_ms: welcome.lease_ms,
                // "" (not known) and values of a newer hub this build does not know are
                // both `None`: never an error, so a new cloud never breaks old agents.
                provider: welcome.provider.parse().ok(),
                cordoned: welcome.cordoned,
            }
        }
        Kind::Snapshot(snapshot) => HubToAgent::Snapshot {
            version: snapshot.version,
            digest: snapshot.digest,
            plan: ClusterPlan {
                pools: Arc::new(match snapshot.pools {
                    Some(pools) => pool_plan_from_pb(pools, "snapshot.pools")?,
                    None => PoolPlan::default(),
                }),
                ..ClusterPlan::from(shares_from_pb(snapshot.ingresses, "snapshot.ingresses")?)
            },
        },
        Kind::Delta(delta) => HubToAgent::Delta {
            version: delta.version,
            digest: delta.digest,
            base_version: delta.base_version,
            delta: PlanDelta {
                upserts: shares_from_pb(delta.upserts, "delta.upserts")?
                    .into_iter()
                    .map(Arc::new)
                    .collect(),
                deletes: delta
                    .deletes
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| key_from_pb(Some(k), &format!("delta.deletes[{i}]")))
                    .collect::<Result<Vec<_>, _>>()?,
                pools: match delta.pools {
                    Some(pools) => Some(Arc::new(pool_plan_from_pb(pools, "delta.pools")?)),
                    None => None,
                },
            },
        },
        Kind::Ping(_) => HubToAgent::Ping,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let hello = Hello {
            cluster: "eu".into(),
            token: "abc.s3cretvalue".into(),
            agent_version: String::new(),
            driver: String::new(),
            capabilities: Vec::new(),
            applied_version: 0,
            applied_digest: String::new(),
            ..Hello::default()
        };
        let join = JoinRequest {
            cluster: "eu".into(),
            join_token: "j.s3cretvalue".into(),
            csr_pem: "csr".into(),
            member: "host-a".into(),
        };
        for text in [
            format!("{hello:?}"),
            format!("{:?}", AgentToHub::Hello(hello.clone())),
            format!("{join:?}"),
        ] {
            assert!(!text.contains("s3cret"), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
        let back = join_from_pb(join_to_pb(&join)).unwrap();
        assert_eq!(back, join);
        let missing = join_from_pb(pb::JoinRequest::default()).unwrap_err();
        assert_eq!(missing.field, "cluster");
    }

    fn share() -> IngressShare {
        let mut tcp = IngressRule::new(Protocol::Tcp);
        tcp.port = Some(3306);
        tcp.name = Some("mysql".into());
        tcp.backend = Some(Backend::new("mysql", 3306));
        let mut http = IngressRule::new(Protocol::Http);
        http.host = Some("shop.example.com".into());
        http.port = Some(80);
        http.paths = vec![HttpPath {
            path: "/api".into(),
            path_type: PathType::Exact,
            backend: Backend::new("api", 8080),
        }];
        let mut tls = IngressRule::new(Protocol::Tls);
        tls.tls_mode = Some(TlsMode::Passthrough);
        IngressShare {
            key: IngressKey::new("default", "shop"),
            uid: "u1".into(),
            generation: 3,
            rules: vec![tcp, http, tls],
            tls: vec![IngressTls {
                hosts: vec!["shop.example.com".into()],
                secret_name: "shop-tls".into(),
            }],
            cluster_override: Some(ClusterOverride {
                cluster: "eu".into(),
                ingress_class_name: Some("nginx".into()),
                annotations: [("a".to_string(), "b".to_string())].into(),
                pool_selector: None,
            }),
            anycast_addresses: vec![
                "192.0.2.100".parse().unwrap(),
                "2001:db8::100".parse().unwrap(),
            ],
        }
    }

    #[test]
    fn hub_messages_round_trip() {
        let plan = ClusterPlan::from(vec![share()]);
        for message in [
            HubToAgent::Welcome {
                heartbeat_interval_ms: 2000,
                lease_ms: 6000,
                provider: Some(Provider::Gcp),
                cordoned: true,
            },
            HubToAgent::Welcome {
                heartbeat_interval_ms: 2000,
                lease_ms: 6000,
                provider: None,
                cordoned: false,
            },
            HubToAgent::Snapshot {
                version: 7,
                digest: plan.digest(),
                plan: plan.clone(),
            },
            HubToAgent::Delta {
                version: 8,
                digest: "d".into(),
                base_version: 7,
                delta: PlanDelta {
                    upserts: vec![Arc::new(share())],
                    deletes: vec![IngressKey::new("default", "old")],
                    pools: None,
                },
            },
            HubToAgent::Delta {
                version: 9,
                digest: "e".into(),
                base_version: 8,
                delta: PlanDelta {
                    pools: Some(Arc::new(pools())),
                    ..PlanDelta::default()
                },
            },
            HubToAgent::Snapshot {
                version: 10,
                digest: "f".into(),
                plan: ClusterPlan {
                    pools: Arc::new(pools()),
                    ..plan.clone()
                },
            },
            HubToAgent::Ping,
        ] {
            assert_eq!(hub_from_pb(hub_to_pb(&message)).unwrap(), message);
        }
    }

    fn pools() -> PoolPlan {
        PoolPlan {
            pools: vec![PoolAssignment {
                name: "gold".into(),
                vips: vec!["10.0.0.100".parse().unwrap(), "fd00::64".parse().unwrap()],
                prefix_len: 24,
                virtual_router_id: 51,
                members: vec![
                    PoolPeer {
                        name: "h1".into(),
                        address: Some("10.0.0.1".parse().unwrap()),
                        priority: 150,
                    },
                    PoolPeer {
                        name: "h2".into(),
                        address: None,
                        priority: 140,
                    },
                ],
            }],
            bindings: [(IngressKey::new("default", "shop"), vec!["gold".to_owned()])].into(),
            provisions: vec![PoolProvision {
                name: "claimed".into(),
                replicas: 3,
                member_labels: [("pool".to_owned(), "claimed".to_owned())].into(),
                requests: [("cpu".to_owned(), "500m".to_owned())].into(),
                limits: BTreeMap::new(),
            }],
        }
    }

    #[test]
    fn agent_messages_round_trip() {
        let report = AgentReport {
            ingresses: vec![IngressReport {
                key: IngressKey::new("default", "shop"),
                applied_generation: 3,
                addresses: vec![
                    Address::ip("127.0.0.11".parse().unwrap()),
                    Address::ip("::1".parse().unwrap()),
                ],
                backends: vec![BackendHealth {
                    service: "mysql".into(),
                    port: 3306,
                    ready: 1,
                    total: 2,
                }],
                listeners: vec![ListenerLoad {
                    protocol: "TCP".into(),
                    port: 3306,
                    connections_per_second: 1.5,
                    active_connections: 4,
                }],
                rule_errors: vec![RuleError {
                    ingress: IngressKey::new("default", "shop"),
                    rule: 1,
                    message: "HTTP is not served yet".into(),
                }],
                // The UDP rule (index 2) behind its own load balancer.
                rules: vec![
                    RuleAddresses {
                        rule: 2,
                        addresses: vec![Address::hostname("udp-lb.example.com")],
                    },
                    RuleAddresses {
                        rule: 0,
                        addresses: vec![
                            Address::ip("192.0.2.7".parse().unwrap()),
                            Address::ip("2001:db8::7".parse().unwrap()),
                        ],
                    },
                ],
                anycast: vec![AnycastRoute {
                    address: "192.0.2.100".parse().unwrap(),
                    announced: false,
                    reason: "draining".into(),
                }],
            }],
            addresses: vec![Address::hostname("lb.example.com")],
            requests_per_second: 3.0,
            active_connections: 4,
            speaker: Some(SpeakerReport {
                up: true,
                peers: 2,
                established_peers: 1,
                message: String::new(),
            }),
            process_cpu: 0.25,
            host_cpu: 0.5,
            bytes_per_second: 1e6,
            vrrp: vec![VrrpReport {
                pool: "gold".into(),
                state: "MASTER".into(),
            }],
        };
        for message in [
            AgentToHub::Hello(Hello {
                cluster: "eu".into(),
                token: "t".into(),
                agent_version: "0.1.0".into(),
                driver: "standalone".into(),
                capabilities: vec!["TCP".into()],
                applied_version: 5,
                applied_digest: "abc".into(),
                member: "host-a".into(),
                member_labels: [("rack".to_owned(), "r1".to_owned())].into(),
                member_address: Some("10.0.0.1".parse().unwrap()),
            }),
            AgentToHub::Ack { version: 5 },
            AgentToHub::Nack {
                version: 5,
                error: String::new(),
                rule_errors: report.ingresses[0].rule_errors.clone(),
            },
            AgentToHub::Report(report.clone()),
            AgentToHub::Heartbeat,
        ] {
            assert_eq!(agent_from_pb(agent_to_pb(&message)).unwrap(), message);
        }
    }

    #[test]
    fn invalid_messages_are_errors_not_panics() {
        assert!(agent_from_pb(pb::AgentMessage { kind: None }).is_err());
        let hello = pb::AgentMessage {
            kind: Some(pb::agent_message::Kind::Hello(pb::Hello::default())),
        };
        assert!(agent_from_pb(hello).is_err());
        let bad_ip = pb::Report {
            addresses: vec![pb::Address {
                kind: Some(pb::address::Kind::Ip("not-an-ip".into())),
            }],
            ..Default::default()
        };
        let err = agent_from_pb(pb::AgentMessage {
            kind: Some(pb::agent_message::Kind::Report(bad_ip)),
        })
        .unwrap_err();
        assert!(err.to_string().contains("report.addresses[0]"), "{err}");
        let bad_rule = pb::Snapshot {
            ingresses: vec![pb::IngressShare {
                key: Some(pb::IngressKey {
                    namespace: "d".into(),
                    name: "x".into(),
                }),
                rules: vec![pb::Rule {
                    protocol: 99,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let err = hub_from_pb(pb::HubMessage {
            kind: Some(pb::hub_message::Kind::Snapshot(bad_rule)),
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("snapshot.ingresses[0].rules[0].protocol"),
            "{err}"
        );
        let status: tonic::Status = err.into();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }

    fn report_with_rules(rules: Vec<pb::RuleAddresses>) -> pb::AgentMessage {
        pb::AgentMessage {
            kind: Some(pb::agent_message::Kind::Report(pb::Report {
                ingresses: vec![pb::IngressReport {
                    key: Some(pb::IngressKey {
                        namespace: "d".into(),
                        name: "x".into(),
                    }),
                    rules,
                    ..Default::default()
                }],
                ..Default::default()
            })),
        }
    }

    #[test]
    fn invalid_rule_addresses_are_errors_with_their_field() {
        let ip = |text: &str| pb::Address {
            kind: Some(pb::address::Kind::Ip(text.into())),
        };
        let cases = [
            (
                vec![pb::RuleAddresses {
                    rule: 1,
                    addresses: vec![ip("192.0.2.1"), ip("no")],
                }],
                "report.ingresses[0].rules[0].addresses[1]",
            ),
            (
                vec![pb::RuleAddresses {
                    rule: 1,
                    addresses: Vec::new(),
                }],
                "report.ingresses[0].rules[0].addresses",
            ),
            (
                vec![
                    pb::RuleAddresses {
                        rule: 1,
                        addresses: vec![ip("192.0.2.1")],
                    },
                    pb::RuleAddresses {
                        rule: 1,
                        addresses: vec![ip("192.0.2.2")],
                    },
                ],
                "report.ingresses[0].rules[1].rule",
            ),
        ];
        for (rules, field) in cases {
            let err = agent_from_pb(report_with_rules(rules)).unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn an_unknown_provider_is_none_not_an_error() {
        for (text, expected) in [
            ("aws", Some(Provider::Aws)),
            ("onprem", Some(Provider::OnPrem)),
            ("GCP", Some(Provider::Gcp)),
            ("", None),
            ("alibaba", None),
        ] {
            let welcome = pb::HubMessage {
                kind: Some(pb::hub_message::Kind::Welcome(pb::Welcome {
                    heartbeat_interval_ms: 1,
                    lease_ms: 3,
                    provider: text.into(),
                    cordoned: false,
                })),
            };
            match hub_from_pb(welcome).unwrap() {
                HubToAgent::Welcome { provider, .. } => assert_eq!(provider, expected, "{text}"),
                other => panic!("{other:?}"),
            }
        }
        let sent = hub_to_pb(&HubToAgent::Welcome {
            heartbeat_interval_ms: 1,
            lease_ms: 3,
            provider: Some(Provider::OnPrem),
            cordoned: false,
        });
        match sent.kind {
            Some(pb::hub_message::Kind::Welcome(w)) => assert_eq!(w.provider, "onprem"),
            other => panic!("{other:?}"),
        }
    }
}
