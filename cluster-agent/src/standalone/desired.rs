//! What a plan asks of the standalone data plane, worked out without touching a socket:
//! the listeners `(kind, port)` with their routes, the backends and their endpoints, and
//! per share the rules (or paths) that cannot be served and why.
//!
//! Listener kinds: HTTP rules make an HTTP listener; HTTPS and TLS rules share a TLS
//! listener per port (SNI tells them apart); TCP and UDP rules make one listener each.
//! HTTP, TLS and TCP listeners all need the TCP port, so only one of them can have a
//! given port; UDP lives apart. Within a listener, HTTP paths are keyed by
//! (host, path, pathType) and TLS names by host: the first share (in key order) and rule
//! keeps a key, a later one gets a rule error naming it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use fedingress_api::ingress::{HttpPath, IngressRule, IngressTls, PathType, Protocol, TlsMode};
use fedingress_api::names;
use fedingress_api::plan::{ClusterPlan, IngressKey, IngressShare, RuleError};

use crate::config::ServiceEndpoint;

/// The kind of a bound listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// HTTP rules: host and path routing.
    Http,
    /// HTTPS and TLS rules: SNI routing, termination or passthrough.
    Tls,
    Tcp,
    Udp,
}

impl Kind {
    fn of(protocol: Protocol) -> Kind {
        match protocol {
            Protocol::Http => Kind::Http,
            Protocol::Https | Protocol::Tls => Kind::Tls,
            Protocol::Tcp => Kind::Tcp,
            Protocol::Udp => Kind::Udp,
        }
    }

    /// Whether the listener takes the TCP port (everything but UDP).
    fn on_tcp(self) -> bool {
        self != Kind::Udp
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Http => "HTTP",
            Kind::Tls => "TLS",
            Kind::Tcp => "TCP",
            Kind::Udp => "UDP",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A listener's identity before it is bound on each address.
pub(crate) type ListenerKey = (Kind, u16);

/// A backend `{service, port}`.
pub(crate) type BackendKey = (String, u16);

/// Which rule a route comes from and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RouteSpec {
    pub ingress: IngressKey,
    /// Index of the rule in the share.
    pub rule: u32,
    pub backend: BackendKey,
}

/// One path of an HTTP or HTTPS rule.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PathSpec {
    /// Lower-case; `None` for rules without a host.
    pub host: Option<String>,
    pub path: String,
    pub path_type: PathType,
    pub route: RouteSpec,
    /// HTTPS: the `spec.tls` of the share.
    pub tls: Option<Arc<Vec<IngressTls>>>,
}

/// One TLS rule.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SniSpec {
    /// Lower-case.
    pub host: String,
    pub route: RouteSpec,
    /// `Some` (the share's `spec.tls`) for `tlsMode: Terminate`, `None` for passthrough.
    pub tls: Option<Arc<Vec<IngressTls>>>,
}

/// One listener the plan asks for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum DesiredListener {
    /// TCP or UDP: the whole port to one backend.
    L4(RouteSpec),
    Http(Vec<PathSpec>),
    Tls {
        sni: Vec<SniSpec>,
        https: Vec<PathSpec>,
    },
}

/// How endpoints of a backend are checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Probes {
    /// Behind a TCP or TLS listener: TCP connect.
    pub tcp: bool,
    /// Behind a UDP listener.
    pub udp: bool,
    /// Behind an HTTP or HTTPS route: HTTP GET.
    pub http: bool,
}

/// The endpoints of one backend in use, in config order, without duplicates.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DesiredBackend {
    pub endpoints: Vec<SocketAddr>,
    pub probes: Probes,
}

/// What one share gets.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DesiredShare {
    pub generation: i64,
    /// Listeners this share has routes on (each once), with the protocol of its first
    /// rule there.
    pub listeners: Vec<(Protocol, ListenerKey)>,
    /// Backends of its rules that are served or miss only their service.
    pub backends: Vec<BackendKey>,
    pub errors: Vec<RuleError>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Desired {
    pub listeners: BTreeMap<ListenerKey, DesiredListener>,
    pub backends: BTreeMap<BackendKey, DesiredBackend>,
    pub shares: BTreeMap<IngressKey, DesiredShare>,
}

/// Who holds something first.
#[derive(Clone, Debug)]
struct Owner {
    ingress: IngressKey,
    rule: u32,
}

impl Owner {
    fn describe(&self, asking: &IngressKey) -> String {
        if self.ingress == *asking {
            format!("rule {} of this ingress", self.rule)
        } else {
            format!("ingress {} (rule {})", self.ingress, self.rule)
        }
    }
}

/// Book-keeping while computing.
#[derive(Default)]
struct Claims {
    /// TCP port → the kind holding it and the first rule that made it.
    tcp_ports: BTreeMap<u16, (Kind, Owner)>,
    udp_ports: BTreeMap<u16, Owner>,
    /// (kind, port, host or "", path, pathType)
    paths: BTreeMap<(Kind, u16, String, String, PathType), Owner>,
    /// (port, host) of TLS rules and HTTPS hosts (the SNI names of a TLS port).
    sni: BTreeMap<(u16, String), (Protocol, Owner)>,
}

struct Ctx<'a> {
    services: &'a BTreeMap<String, Vec<ServiceEndpoint>>,
    secrets: &'a dyn Fn(&str) -> bool,
}

/// Works out the listeners of `plan`. Shares are taken in key order, rules in order; a
/// port, path or SNI name already taken by an earlier share or rule makes the later
/// rule an error. `secret_known` says whether a TLS secret is in the agent's config.
pub(crate) fn compute(
    plan: &ClusterPlan,
    services: &BTreeMap<String, Vec<ServiceEndpoint>>,
    secret_known: &dyn Fn(&str) -> bool,
) -> Desired {
    let ctx = Ctx {
        services,
        secrets: secret_known,
    };
    let mut desired = Desired::default();
    let mut claims = Claims::default();
    for (key, share) in &plan.ingresses {
        let mut out = DesiredShare {
            generation: share.generation,
            ..DesiredShare::default()
        };
        let tls = Arc::new(share.tls.clone());
        for (index, rule) in share.rules.iter().enumerate() {
            let rule_index = u32::try_from(index).unwrap_or(u32::MAX);
            let errors = AddRule {
                ctx: &ctx,
                desired: &mut desired,
                claims: &mut claims,
                out: &mut out,
                key,
                share,
                tls: &tls,
                rule,
                index: rule_index,
                errors: Vec::new(),
            }
            .run();
            out.errors
                .extend(errors.into_iter().map(|message| RuleError {
                    ingress: key.clone(),
                    rule: rule_index,
                    message,
                }));
        }
        desired.shares.insert(key.clone(), out);
    }
    desired
}

fn backend_port(port: i32) -> Option<u16> {
    u16::try_from(port).ok().filter(|p| *p != 0)
}

/// The endpoints of a backend, or the error when its service is unknown.
fn endpoints(ctx: &Ctx<'_>, service: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let Some(endpoints) = ctx.services.get(service) else {
        return Err(format!(
            "backend service {service:?} is not among the agent's configured services"
        ));
    };
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for endpoint in endpoints {
        let addr = endpoint.socket_addr(port);
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    Ok(addrs)
}

/// Whether the share can terminate TLS for `host` (`None`: a rule without a host), or
/// why not.
fn check_certificate(
    ctx: &Ctx<'_>,
    share: &IngressShare,
    protocol: Protocol,
    host: Option<&str>,
) -> Result<(), String> {
    let needs = match protocol {
        Protocol::Https => "HTTPS rules need a certificate",
        _ => "TLS rules with tlsMode Terminate need a certificate",
    };
    let relevant: Vec<&IngressTls> = match host {
        Some(host) => share
            .tls
            .iter()
            .filter(|t| t.hosts.iter().any(|p| names::host_matches(p, host)))
            .collect(),
        None => share.tls.iter().collect(),
    };
    let Some(first) = relevant.first() else {
        return Err(match host {
            Some(host) => format!("no spec.tls entry covers host {host} ({needs})"),
            None => format!("spec.tls is empty ({needs})"),
        });
    };
    let unknown: Vec<&str> = match host {
        Some(_) => vec![first.secret_name.as_str()],
        None => relevant.iter().map(|t| t.secret_name.as_str()).collect(),
    }
    .into_iter()
    .filter(|s| !(ctx.secrets)(s))
    .collect();
    match unknown.first() {
        Some(secret) => Err(format!(
            "TLS secret {secret:?} is not among the agent's configured tlsSecrets"
        )),
        None => Ok(()),
    }
}

/// One rule of a share on its way into [`Desired`]: what it reads and what it writes.
/// [`AddRule::run`] checks the rule's port, then hands over to the method for its
/// protocol; each method stops at the first error that keeps the rule (or a path) out.
struct AddRule<'a> {
    ctx: &'a Ctx<'a>,
    desired: &'a mut Desired,
    claims: &'a mut Claims,
    out: &'a mut DesiredShare,
    key: &'a IngressKey,
    share: &'a IngressShare,
    tls: &'a Arc<Vec<IngressTls>>,
    rule: &'a IngressRule,
    /// Index of the rule in the share.
    index: u32,
    /// The rule's errors, in the order they were found.
    errors: Vec<String>,
}

impl AddRule<'_> {
    /// Adds the rule; returns its errors.
    fn run(mut self) -> Vec<String> {
        let protocol = self.rule.protocol;
        let kind = Kind::of(protocol);
        let Some(port) = self
            .rule
            .effective_port()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            self.errors
                .push(format!("{protocol} rule needs a port 1-65535"));
            return self.errors;
        };

        // The port: one TCP-port kind per port; UDP apart.
        if kind.on_tcp()
            && let Some((held, owner)) = self.claims.tcp_ports.get(&port)
            && *held != kind
        {
            self.errors.push(format!(
                "port {port} is already served by the {held} listener of {}",
                owner.describe(self.key)
            ));
            return self.errors;
        }

        let host = self.rule.host().map(str::to_ascii_lowercase);
        match protocol {
            Protocol::Tcp | Protocol::Udp => self.l4(protocol, kind, port),
            Protocol::Tls => self.tls_rule(kind, port, host),
            Protocol::Http | Protocol::Https => self.http(protocol, kind, port, host),
        }
        self.errors
    }

    /// This rule, as the holder of a claim.
    fn me(&self) -> Owner {
        Owner {
            ingress: self.key.clone(),
            rule: self.index,
        }
    }

    fn route(&self, backend: &BackendKey) -> RouteSpec {
        RouteSpec {
            ingress: self.key.clone(),
            rule: self.index,
            backend: backend.clone(),
        }
    }

    /// A TCP or UDP rule: the whole port to its backend.
    fn l4(&mut self, protocol: Protocol, kind: Kind, port: u16) {
        let Some(backend) = &self.rule.backend else {
            self.errors.push(format!("{protocol} rule has no backend"));
            return;
        };
        let Some(bport) = backend_port(backend.port) else {
            self.errors
                .push(format!("backend port {} is not 1-65535", backend.port));
            return;
        };
        let backend_key = (backend.service.clone(), bport);
        let addrs = match endpoints(self.ctx, &backend.service, bport) {
            Ok(addrs) => addrs,
            Err(message) => {
                self.errors.push(message);
                add_backend(self.out, &backend_key);
                return;
            }
        };
        let taken = match protocol {
            Protocol::Udp => self.claims.udp_ports.get(&port),
            _ => self.claims.tcp_ports.get(&port).map(|(_, owner)| owner),
        };
        if let Some(owner) = taken {
            self.errors.push(format!(
                "{protocol} port {port} is already served by {}",
                owner.describe(self.key)
            ));
            return;
        }
        let me = self.me();
        match protocol {
            Protocol::Udp => {
                self.claims.udp_ports.insert(port, me);
            }
            _ => {
                self.claims.tcp_ports.insert(port, (kind, me));
            }
        }
        let route = self.route(&backend_key);
        self.desired
            .listeners
            .insert((kind, port), DesiredListener::L4(route));
        use_backend(self.desired, &backend_key, addrs, |p| match protocol {
            Protocol::Udp => p.udp = true,
            _ => p.tcp = true,
        });
        self.out.listeners.push((protocol, (kind, port)));
        add_backend(self.out, &backend_key);
    }

    /// A TLS rule: its host's SNI name on the port's TLS listener, terminated or passed
    /// through.
    fn tls_rule(&mut self, kind: Kind, port: u16, host: Option<String>) {
        let protocol = Protocol::Tls;
        let Some(host) = host else {
            self.errors
                .push("TLS rule needs a host (the SNI name it routes)".to_owned());
            return;
        };
        let Some(backend) = &self.rule.backend else {
            self.errors.push("TLS rule has no backend".to_owned());
            return;
        };
        let Some(bport) = backend_port(backend.port) else {
            self.errors
                .push(format!("backend port {} is not 1-65535", backend.port));
            return;
        };
        let backend_key = (backend.service.clone(), bport);
        let terminate = self.rule.effective_tls_mode() != Some(TlsMode::Passthrough);
        if terminate
            && let Err(message) = check_certificate(self.ctx, self.share, protocol, Some(&host))
        {
            self.errors.push(message);
            add_backend(self.out, &backend_key);
            return;
        }
        let addrs = match endpoints(self.ctx, &backend.service, bport) {
            Ok(addrs) => addrs,
            Err(message) => {
                self.errors.push(message);
                add_backend(self.out, &backend_key);
                return;
            }
        };
        if let Some((other, owner)) = self.claims.sni.get(&(port, host.clone())) {
            self.errors.push(format!(
                "TLS host {host} on port {port} is already served by {} ({other})",
                owner.describe(self.key)
            ));
            return;
        }
        let me = self.me();
        self.claims
            .sni
            .insert((port, host.clone()), (protocol, me.clone()));
        self.claims.tcp_ports.entry(port).or_insert((kind, me));
        let spec = SniSpec {
            host,
            route: self.route(&backend_key),
            tls: terminate.then(|| Arc::clone(self.tls)),
        };
        match self
            .desired
            .listeners
            .entry((kind, port))
            .or_insert_with(|| DesiredListener::Tls {
                sni: Vec::new(),
                https: Vec::new(),
            }) {
            DesiredListener::Tls { sni, .. } => sni.push(spec),
            _ => unreachable_listener(),
        }
        use_backend(self.desired, &backend_key, addrs, |p| p.tcp = true);
        push_listener(self.out, protocol, (kind, port));
        add_backend(self.out, &backend_key);
    }

    /// An HTTP or HTTPS rule: each of its paths on the port's listener; the port (and
    /// an HTTPS host's SNI name) is claimed once a path is served.
    fn http(&mut self, protocol: Protocol, kind: Kind, port: u16, host: Option<String>) {
        if self.rule.paths.is_empty() {
            self.errors.push(format!("{protocol} rule has no paths"));
            return;
        }
        if protocol == Protocol::Https && !self.https_allowed(port, host.as_deref()) {
            return;
        }
        let rule = self.rule;
        let mut served = 0usize;
        for (j, path) in rule.paths.iter().enumerate() {
            if self.http_path(protocol, kind, port, host.as_ref(), j, path) {
                served += 1;
            }
        }
        if served > 0 {
            let me = self.me();
            self.claims
                .tcp_ports
                .entry(port)
                .or_insert((kind, me.clone()));
            if protocol == Protocol::Https
                && let Some(host) = &host
            {
                self.claims
                    .sni
                    .entry((port, host.clone()))
                    .or_insert((protocol, me));
            }
            push_listener(self.out, protocol, (kind, port));
        }
    }

    /// Whether an HTTPS rule can be served at all: a certificate for its host, and its
    /// host not a TLS rule's SNI name on the port. When not, the error is recorded (and
    /// for a missing certificate, the backends of its paths).
    fn https_allowed(&mut self, port: u16, host: Option<&str>) -> bool {
        if let Err(message) = check_certificate(self.ctx, self.share, Protocol::Https, host) {
            self.errors.push(message);
            for path in &self.rule.paths {
                if let Some(bport) = backend_port(path.backend.port) {
                    add_backend(self.out, &(path.backend.service.clone(), bport));
                }
            }
            return false;
        }
        if let Some(host) = host
            && let Some((Protocol::Tls, owner)) = self.claims.sni.get(&(port, host.to_owned()))
        {
            self.errors.push(format!(
                "TLS host {host} on port {port} is already served by {} (TLS)",
                owner.describe(self.key)
            ));
            return false;
        }
        true
    }

    /// Path `j` of an HTTP or HTTPS rule; returns whether it is served.
    fn http_path(
        &mut self,
        protocol: Protocol,
        kind: Kind,
        port: u16,
        host: Option<&String>,
        j: usize,
        path: &HttpPath,
    ) -> bool {
        let at = format!("paths[{j}] ({} {})", path.path, path.path_type);
        let Some(bport) = backend_port(path.backend.port) else {
            self.errors.push(format!(
                "{at}: backend port {} is not 1-65535",
                path.backend.port
            ));
            return false;
        };
        if !path.path.starts_with('/') {
            self.errors.push(format!("{at}: path must start with /"));
            return false;
        }
        let backend_key = (path.backend.service.clone(), bport);
        add_backend(self.out, &backend_key);
        let addrs = match endpoints(self.ctx, &path.backend.service, bport) {
            Ok(addrs) => addrs,
            Err(message) => {
                self.errors.push(format!("{at}: {message}"));
                return false;
            }
        };
        let path_key = (
            kind,
            port,
            host.cloned().unwrap_or_default(),
            path.path.clone(),
            path.path_type,
        );
        if let Some(owner) = self.claims.paths.get(&path_key) {
            self.errors.push(format!(
                "{at}: {protocol} host {} path {} ({}) on port {port} is already served by {}",
                host.map_or("*", String::as_str),
                path.path,
                path.path_type,
                owner.describe(self.key)
            ));
            return false;
        }
        self.claims.paths.insert(path_key, self.me());
        let spec = PathSpec {
            host: host.cloned(),
            path: path.path.clone(),
            path_type: path.path_type,
            route: self.route(&backend_key),
            tls: (protocol == Protocol::Https).then(|| Arc::clone(self.tls)),
        };
        let listener = self
            .desired
            .listeners
            .entry((kind, port))
            .or_insert_with(|| match kind {
                Kind::Http => DesiredListener::Http(Vec::new()),
                _ => DesiredListener::Tls {
                    sni: Vec::new(),
                    https: Vec::new(),
                },
            });
        match listener {
            DesiredListener::Http(paths) | DesiredListener::Tls { https: paths, .. } => {
                paths.push(spec);
            }
            DesiredListener::L4(_) => unreachable_listener(),
        }
        use_backend(self.desired, &backend_key, addrs, |p| p.http = true);
        true
    }
}

/// A listener key maps to one kind of listener: the port claims above guarantee it, so
/// this only logs should that ever break.
fn unreachable_listener() {
    tracing::error!("a listener of another kind holds this port; the rule is skipped");
}

fn add_backend(out: &mut DesiredShare, backend: &BackendKey) {
    if !out.backends.contains(backend) {
        out.backends.push(backend.clone());
    }
}

/// Records that the share has routes on `key`, once per listener (an HTTPS and a TLS rule
/// of one share on one port are one listener, labelled with the first rule's protocol).
fn push_listener(out: &mut DesiredShare, protocol: Protocol, key: ListenerKey) {
    if !out.listeners.iter().any(|(_, k)| *k == key) {
        out.listeners.push((protocol, key));
    }
}

fn use_backend(
    desired: &mut Desired,
    backend: &BackendKey,
    addrs: Vec<SocketAddr>,
    probe: impl FnOnce(&mut Probes),
) {
    let entry = desired
        .backends
        .entry(backend.clone())
        .or_insert_with(|| DesiredBackend {
            endpoints: addrs,
            probes: Probes::default(),
        });
    probe(&mut entry.probes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::ingress::{Backend, HttpPath};

    fn l4(protocol: Protocol, port: i32, service: &str) -> IngressRule {
        let mut rule = IngressRule::new(protocol);
        rule.port = Some(port);
        rule.backend = Some(Backend::new(service, 7000));
        rule
    }

    fn web(
        protocol: Protocol,
        host: Option<&str>,
        paths: &[(&str, PathType, &str)],
    ) -> IngressRule {
        let mut rule = IngressRule::new(protocol);
        rule.host = host.map(str::to_owned);
        rule.port = Some(if protocol == Protocol::Http {
            8080
        } else {
            8443
        });
        rule.paths = paths
            .iter()
            .map(|(path, path_type, service)| HttpPath {
                path: (*path).to_owned(),
                path_type: *path_type,
                backend: Backend::new(*service, 7000),
            })
            .collect();
        rule
    }

    fn sni(host: &str, mode: TlsMode) -> IngressRule {
        let mut rule = IngressRule::new(Protocol::Tls);
        rule.host = Some(host.to_owned());
        rule.port = Some(8443);
        rule.tls_mode = Some(mode);
        rule.backend = Some(Backend::new("echo", 5432));
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
            anycast_addresses: Vec::new(),
        }
    }

    fn with_tls(mut share: IngressShare, entries: &[(&[&str], &str)]) -> IngressShare {
        share.tls = entries
            .iter()
            .map(|(hosts, secret)| IngressTls {
                hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
                secret_name: (*secret).to_owned(),
            })
            .collect();
        share
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
        BTreeMap::from([
            ("echo".to_owned(), endpoints),
            ("web".to_owned(), vec!["127.0.0.3:80".parse().unwrap()]),
        ])
    }

    fn known(secret: &str) -> bool {
        secret.ends_with("-tls")
    }

    fn messages(desired: &Desired, name: &str) -> Vec<(u32, String)> {
        desired.shares[&IngressKey::new("default", name)]
            .errors
            .iter()
            .map(|e| (e.rule, e.message.clone()))
            .collect()
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
        let desired = compute(&plan, &services(), &known);
        assert_eq!(desired.listeners.len(), 2);
        let backend = &desired.backends[&("echo".to_owned(), 7000)];
        assert_eq!(
            backend.endpoints,
            ["127.0.0.1:9001", "127.0.0.2:7000", "[::1]:9001"]
                .map(|a| a.parse::<SocketAddr>().unwrap())
        );
        assert_eq!(
            backend.probes,
            Probes {
                tcp: true,
                udp: true,
                http: false
            }
        );
        let share = &desired.shares[&IngressKey::new("default", "echo")];
        assert_eq!(share.generation, 3);
        assert!(share.errors.is_empty());
        assert_eq!(share.backends, vec![("echo".to_owned(), 7000)]);
        assert_eq!(
            share.listeners,
            vec![
                (Protocol::Tcp, (Kind::Tcp, 7777)),
                (Protocol::Udp, (Kind::Udp, 7777))
            ]
        );
    }

    #[test]
    fn every_rule_kind_coexists_and_https_and_tls_share_a_port() {
        let plan = ClusterPlan::from(vec![
            with_tls(
                share(
                    "shop",
                    vec![
                        web(
                            Protocol::Http,
                            Some("Shop.example.com"),
                            &[("/", PathType::Prefix, "web")],
                        ),
                        web(
                            Protocol::Https,
                            Some("shop.example.com"),
                            &[("/api", PathType::Prefix, "echo")],
                        ),
                        sni("db.example.com", TlsMode::Passthrough),
                        l4(Protocol::Tcp, 3306, "echo"),
                        l4(Protocol::Udp, 3306, "echo"),
                    ],
                ),
                &[(&["shop.example.com"], "shop-tls")],
            ),
            share(
                "other",
                vec![web(
                    Protocol::Http,
                    Some("other.example.com"),
                    &[("/", PathType::Prefix, "web")],
                )],
            ),
        ]);
        let desired = compute(&plan, &services(), &known);
        assert!(
            messages(&desired, "shop").is_empty(),
            "{:?}",
            messages(&desired, "shop")
        );
        assert!(messages(&desired, "other").is_empty());
        let keys: Vec<ListenerKey> = desired.listeners.keys().copied().collect();
        assert_eq!(
            keys,
            vec![
                (Kind::Http, 8080),
                (Kind::Tls, 8443),
                (Kind::Tcp, 3306),
                (Kind::Udp, 3306)
            ]
        );
        let DesiredListener::Http(paths) = &desired.listeners[&(Kind::Http, 8080)] else {
            panic!("HTTP listener");
        };
        assert_eq!(paths.len(), 2, "two ingresses share port 8080");
        assert_eq!(paths[1].host.as_deref(), Some("shop.example.com"));
        let DesiredListener::Tls { sni, https } = &desired.listeners[&(Kind::Tls, 8443)] else {
            panic!("TLS listener");
        };
        assert_eq!(sni.len(), 1);
        assert!(sni[0].tls.is_none(), "passthrough");
        assert_eq!(https.len(), 1);
        assert!(https[0].tls.is_some());
        assert!(desired.backends[&("web".to_owned(), 7000)].probes.http);
        let shop = &desired.shares[&IngressKey::new("default", "shop")];
        // HTTPS and TLS on 8443 are one listener.
        assert_eq!(shop.listeners.len(), 4);
    }

    #[test]
    fn unserved_rules_and_paths_are_errors_not_silently_dropped() {
        let mut no_port = l4(Protocol::Tcp, 1, "echo");
        no_port.port = None;
        let mut no_host = sni("x.example.com", TlsMode::Passthrough);
        no_host.host = None;
        let plan = ClusterPlan::from(vec![with_tls(
            share(
                "web",
                vec![
                    web(
                        Protocol::Http,
                        None,
                        &[
                            ("/", PathType::Prefix, "web"),
                            ("/gone", PathType::Prefix, "missing"),
                        ],
                    ),
                    web(
                        Protocol::Https,
                        Some("nocert.example.com"),
                        &[("/", PathType::Prefix, "web")],
                    ),
                    web(
                        Protocol::Https,
                        Some("shop.example.com"),
                        &[("/", PathType::Prefix, "web")],
                    ),
                    sni("db.example.com", TlsMode::Terminate),
                    l4(Protocol::Tcp, 8000, "missing"),
                    no_port,
                    no_host,
                    l4(Protocol::Udp, 8001, "echo"),
                    web(Protocol::Http, None, &[]),
                ],
            ),
            &[
                (&["shop.example.com"], "unknown-secret"),
                (&["db.example.com"], "db-tls"),
            ],
        )]);
        let desired = compute(&plan, &services(), &known);
        let got = messages(&desired, "web");
        let expected: Vec<(u32, &str)> = vec![
            (
                0,
                "paths[1] (/gone Prefix): backend service \"missing\" is not among the agent's configured services",
            ),
            (
                1,
                "no spec.tls entry covers host nocert.example.com (HTTPS rules need a certificate)",
            ),
            (
                2,
                "TLS secret \"unknown-secret\" is not among the agent's configured tlsSecrets",
            ),
            (
                4,
                "backend service \"missing\" is not among the agent's configured services",
            ),
            (5, "TCP rule needs a port 1-65535"),
            (6, "TLS rule needs a host (the SNI name it routes)"),
            (8, "HTTP rule has no paths"),
        ];
        assert_eq!(
            got,
            expected
                .into_iter()
                .map(|(i, m)| (i, m.to_owned()))
                .collect::<Vec<_>>()
        );
        // The served path, the terminated TLS rule and the UDP rule are listeners.
        assert_eq!(desired.listeners.len(), 3);
        let share = &desired.shares[&IngressKey::new("default", "web")];
        assert!(share.backends.contains(&("missing".to_owned(), 7000)));
    }

    #[test]
    fn the_later_share_loses_ports_paths_and_names() {
        let plan = ClusterPlan::from(vec![
            share("b", vec![l4(Protocol::Tcp, 7777, "echo")]),
            share(
                "a",
                vec![
                    l4(Protocol::Tcp, 7777, "echo"),
                    l4(Protocol::Tcp, 7777, "echo"),
                ],
            ),
            share(
                "c",
                vec![
                    web(
                        Protocol::Http,
                        Some("x.example.com"),
                        &[("/", PathType::Prefix, "web")],
                    ),
                    sni("db.example.com", TlsMode::Passthrough),
                ],
            ),
            share(
                "d",
                vec![
                    // Same host and path: lost. Same host, other path: fine.
                    web(
                        Protocol::Http,
                        Some("x.example.com"),
                        &[
                            ("/", PathType::Prefix, "web"),
                            ("/", PathType::Exact, "web"),
                        ],
                    ),
                    sni("db.example.com", TlsMode::Passthrough),
                    // An HTTP listener holds 8080: no TCP there.
                    l4(Protocol::Tcp, 8080, "echo"),
                    // A TLS listener holds 8443: no HTTP there.
                    {
                        let mut rule = web(Protocol::Http, None, &[("/", PathType::Prefix, "web")]);
                        rule.port = Some(8443);
                        rule
                    },
                ],
            ),
        ]);
        let desired = compute(&plan, &services(), &known);
        assert_eq!(
            messages(&desired, "a"),
            vec![(
                1,
                "TCP port 7777 is already served by rule 0 of this ingress".to_owned()
            )]
        );
        assert_eq!(
            messages(&desired, "b"),
            vec![(
                0,
                "TCP port 7777 is already served by ingress default/a (rule 0)".to_owned()
            )]
        );
        assert_eq!(
            messages(&desired, "d"),
            vec![
                (
                    0,
                    "paths[0] (/ Prefix): HTTP host x.example.com path / (Prefix) on port 8080 is already served by ingress default/c (rule 0)".to_owned()
                ),
                (
                    1,
                    "TLS host db.example.com on port 8443 is already served by ingress default/c (rule 1) (TLS)".to_owned()
                ),
                (
                    2,
                    "port 8080 is already served by the HTTP listener of ingress default/c (rule 0)".to_owned()
                ),
                (
                    3,
                    "port 8443 is already served by the TLS listener of ingress default/c (rule 1)".to_owned()
                ),
            ]
        );
        let d = &desired.shares[&IngressKey::new("default", "d")];
        assert_eq!(d.listeners, vec![(Protocol::Http, (Kind::Http, 8080))]);
        let b = &desired.shares[&IngressKey::new("default", "b")];
        assert!(b.listeners.is_empty());
        assert!(b.backends.is_empty());
    }
}
