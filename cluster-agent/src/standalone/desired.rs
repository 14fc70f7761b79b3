//! What a plan asks of the standalone data plane, worked out without touching a socket:
//! the listeners `(protocol, port)` with their backends, and per share the rules that
//! cannot be served and why.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use fedingress_api::ingress::Protocol;
use fedingress_api::plan::{ClusterPlan, IngressKey, RuleError};

use crate::config::ServiceEndpoint;

/// A listener's identity before it is bound on each address.
pub(crate) type ListenerKey = (Protocol, u16);

/// A backend `{service, port}`.
pub(crate) type BackendKey = (String, u16);

/// One listener the plan asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DesiredListener {
    pub ingress: IngressKey,
    /// Index of the rule in the share.
    pub rule: u32,
    pub backend: BackendKey,
    /// The backend's endpoints, in config order, without duplicates.
    pub endpoints: Vec<SocketAddr>,
}

/// What one share gets.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DesiredShare {
    pub generation: i64,
    /// Listeners this share owns.
    pub listeners: Vec<ListenerKey>,
    /// Backends of its L4 rules that are served or miss only their service.
    pub backends: Vec<BackendKey>,
    pub errors: Vec<RuleError>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Desired {
    pub listeners: BTreeMap<ListenerKey, DesiredListener>,
    pub shares: BTreeMap<IngressKey, DesiredShare>,
}

/// Works out the listeners of `plan`. Shares are taken in key order, rules in order; a
/// listener already taken by an earlier share or rule makes the later rule an error.
pub(crate) fn compute(
    plan: &ClusterPlan,
    services: &BTreeMap<String, Vec<ServiceEndpoint>>,
) -> Desired {
    let mut desired = Desired::default();
    for (key, share) in &plan.ingresses {
        let mut out = DesiredShare {
            generation: share.generation,
            ..DesiredShare::default()
        };
        for (index, rule) in share.rules.iter().enumerate() {
            let rule_index = u32::try_from(index).unwrap_or(u32::MAX);
            let mut fail = |message: String| {
                out.errors.push(RuleError {
                    ingress: key.clone(),
                    rule: rule_index,
                    message,
                });
            };
            let protocol = rule.protocol;
            if !protocol.is_l4() {
                fail(format!(
                    "{protocol} rules are not served by the standalone driver yet"
                ));
                continue;
            }
            let Some(port) = rule
                .port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
            else {
                fail(format!("{protocol} rule needs a port 1-65535"));
                continue;
            };
            let Some(backend) = &rule.backend else {
                fail(format!("{protocol} rule has no backend"));
                continue;
            };
            let Some(backend_port) = u16::try_from(backend.port).ok().filter(|p| *p != 0) else {
                fail(format!("backend port {} is not 1-65535", backend.port));
                continue;
            };
            let backend_key = (backend.service.clone(), backend_port);
            let Some(endpoints) = services.get(&backend.service) else {
                fail(format!(
                    "backend service {:?} is not among the agent's configured services",
                    backend.service
                ));
                if !out.backends.contains(&backend_key) {
                    out.backends.push(backend_key);
                }
                continue;
            };
            let listener = (protocol, port);
            if let Some(owner) = desired.listeners.get(&listener) {
                let whom = if owner.ingress == *key {
                    format!("rule {} of this ingress", owner.rule)
                } else {
                    format!("ingress {} (rule {})", owner.ingress, owner.rule)
                };
                fail(format!(
                    "{protocol} port {port} is already served by {whom}"
                ));
                continue;
            }
            let mut addrs: Vec<SocketAddr> = Vec::new();
            for endpoint in endpoints {
                let addr = endpoint.socket_addr(backend_port);
                if !addrs.contains(&addr) {
                    addrs.push(addr);
                }
            }
            desired.listeners.insert(
                listener,
                DesiredListener {
                    ingress: key.clone(),
                    rule: rule_index,
                    backend: backend_key.clone(),
                    endpoints: addrs,
                },
            );
            out.listeners.push(listener);
            if !out.backends.contains(&backend_key) {
                out.backends.push(backend_key);
            }
        }
        desired.shares.insert(key.clone(), out);
    }
    desired
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::ingress::{Backend, HttpPath, IngressRule};
    use fedingress_api::plan::IngressShare;

    fn l4(protocol: Protocol, port: i32, service: &str) -> IngressRule {
        let mut rule = IngressRule::new(protocol);
        rule.port = Some(port);
        rule.backend = Some(Backend::new(service, 7000));
        rule
    }

    fn share(name: &str, rules: Vec<IngressRule>) -> IngressShare {
        IngressShare {
            key: IngressKey::new("default", name),
            uid: format!("uid-{name}"),
            generation: 3,
            rules,
            tls: Vec::new(),
            cluster_override: None,
        }
    }

    fn services() -> BTreeMap<String, Vec<ServiceEndpoint>> {
        let endpoints = [
            "127.0.0.1:9001",
            "127.0.0.2",
            "127.0.0.2:7000",
            "[::1]:9001",
        ]
        .iter()
        .map(|e| e.parse().unwrap())
        .collect();
        BTreeMap::from([("echo".to_owned(), endpoints)])
    }

    #[test]
    fn tcp_and_udp_share_a_port_and_endpoints_take_the_backend_port() {
        let plan = ClusterPlan::from(vec![share(
            "echo",
            vec![
                l4(Protocol::Tcp, 7777, "echo"),
                l4(Protocol::Udp, 7777, "echo"),
            ],
        )]);
        let desired = compute(&plan, &services());
        assert_eq!(desired.listeners.len(), 2);
        let tcp = &desired.listeners[&(Protocol::Tcp, 7777)];
        assert_eq!(
            tcp.endpoints,
            ["127.0.0.1:9001", "127.0.0.2:7000", "[::1]:9001"]
                .map(|a| a.parse::<SocketAddr>().unwrap())
        );
        let share = &desired.shares[&IngressKey::new("default", "echo")];
        assert_eq!(share.generation, 3);
        assert!(share.errors.is_empty());
        assert_eq!(share.backends, vec![("echo".to_owned(), 7000)]);
        assert_eq!(
            share.listeners,
            vec![(Protocol::Tcp, 7777), (Protocol::Udp, 7777)]
        );
    }

    #[test]
    fn unserved_rules_are_errors_not_silently_dropped() {
        let mut http = IngressRule::new(Protocol::Http);
        http.paths = vec![HttpPath::default()];
        let mut https = http.clone();
        https.protocol = Protocol::Https;
        let mut tls = IngressRule::new(Protocol::Tls);
        tls.backend = Some(Backend::new("echo", 1));
        let mut no_port = l4(Protocol::Tcp, 1, "echo");
        no_port.port = None;
        let plan = ClusterPlan::from(vec![share(
            "web",
            vec![
                http,
                https,
                tls,
                l4(Protocol::Tcp, 8000, "missing"),
                no_port,
                l4(Protocol::Udp, 8001, "echo"),
            ],
        )]);
        let desired = compute(&plan, &services());
        let share = &desired.shares[&IngressKey::new("default", "web")];
        let messages: Vec<(u32, &str)> = share
            .errors
            .iter()
            .map(|e| (e.rule, e.message.as_str()))
            .collect();
        assert_eq!(
            messages,
            vec![
                (0, "HTTP rules are not served by the standalone driver yet"),
                (1, "HTTPS rules are not served by the standalone driver yet"),
                (2, "TLS rules are not served by the standalone driver yet"),
                (
                    3,
                    "backend service \"missing\" is not among the agent's configured services"
                ),
                (4, "TCP rule needs a port 1-65535"),
            ]
        );
        assert_eq!(desired.listeners.len(), 1);
        assert_eq!(
            share.backends,
            vec![("missing".to_owned(), 7000), ("echo".to_owned(), 7000)]
        );
    }

    #[test]
    fn the_later_share_loses_a_listener_conflict() {
        let plan = ClusterPlan::from(vec![
            share("b", vec![l4(Protocol::Tcp, 7777, "echo")]),
            share(
                "a",
                vec![
                    l4(Protocol::Tcp, 7777, "echo"),
                    l4(Protocol::Tcp, 7777, "echo"),
                ],
            ),
        ]);
        let desired = compute(&plan, &services());
        assert_eq!(
            desired.listeners[&(Protocol::Tcp, 7777)].ingress,
            IngressKey::new("default", "a")
        );
        let a = &desired.shares[&IngressKey::new("default", "a")];
        assert_eq!(a.errors.len(), 1);
        assert_eq!(
            a.errors[0].message,
            "TCP port 7777 is already served by rule 0 of this ingress"
        );
        let b = &desired.shares[&IngressKey::new("default", "b")];
        assert_eq!(b.errors[0].rule, 0);
        assert_eq!(
            b.errors[0].message,
            "TCP port 7777 is already served by ingress default/a (rule 0)"
        );
        assert!(b.listeners.is_empty());
        assert!(b.backends.is_empty());
    }
}
