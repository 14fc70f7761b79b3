//! Routing tables of the L7 listeners, built on every apply and swapped atomically:
//! [`HttpTable`] (Host, then path) for HTTP and HTTPS, [`TlsTable`] (SNI) for the TLS
//! port listeners that carry HTTPS and TLS rules.
//!
//! # Matching
//! - Hosts: an exact name first, then a `*.example.com` wildcard (one extra leftmost
//!   label: `a.example.com`, not `example.com` nor `a.b.example.com`), then the rules
//!   without a host. The first host entry that matches decides: its paths are the only
//!   candidates (no fallback to a wider host when no path matches), as in Kubernetes
//!   Ingress.
//! - Paths: longest first; at equal length `Exact` before `Prefix`. `Prefix` matches
//!   element-wise (`/api` matches `/api` and `/api/v1`, not `/apis`; a trailing `/` in
//!   the rule is ignored); `Exact` matches the path exactly. Query strings are ignored.
//! - SNI: an exact name, then a wildcard, across passthrough, terminated TLS and HTTPS
//!   rules (exact beats wildcard whatever the rule kind); then HTTPS rules without a
//!   host; otherwise the connection gets no certificate.
//! - Certificates come from the `spec.tls` of the ingress that owns the matched rule:
//!   an entry naming the host, then one whose wildcard covers it, and for rules without
//!   a host an entry without hosts. Several ingresses sharing an HTTPS host (different
//!   paths): the first in key order with a covering entry.

use std::collections::HashMap;
use std::sync::Arc;

use fedingress_api::ingress::{IngressTls, PathType};
use fedingress_api::plan::IngressKey;

use super::endpoint::Pool;
use super::load::LoadCounters;

/// Where traffic matched by one rule (or one path of a rule) goes.
#[derive(Debug)]
pub(crate) struct Target {
    pub ingress: IngressKey,
    pub rule: u32,
    pub service: String,
    pub pool: Arc<Pool>,
    /// Load of this ingress on this listener (connections attributed to it).
    pub load: Arc<LoadCounters>,
}

/// The `spec.tls` of one ingress.
#[derive(Clone, Debug)]
pub(crate) struct CertSource {
    pub ingress: IngressKey,
    pub tls: Arc<Vec<IngressTls>>,
}

/// The secret `sources` give a TLS connection for `name` (the SNI, or the Host when a
/// request is checked against its connection), on a rule with or without a host.
pub(crate) fn choose_secret<'a>(
    sources: &'a [CertSource],
    name: Option<&str>,
    hostless_rule: bool,
) -> Option<&'a str> {
    for source in sources {
        if let Some(name) = name {
            let exact = source
                .tls
                .iter()
                .find(|t| t.hosts.iter().any(|h| h.eq_ignore_ascii_case(name)));
            let wildcard = || {
                source.tls.iter().find(|t| {
                    t.hosts
                        .iter()
                        .any(|h| h.starts_with("*.") && wildcard_matches(&h[2..], name))
                })
            };
            if let Some(entry) = exact.or_else(wildcard) {
                return Some(&entry.secret_name);
            }
        }
        if hostless_rule && let Some(entry) = source.tls.iter().find(|t| t.hosts.is_empty()) {
            return Some(&entry.secret_name);
        }
    }
    None
}

/// Whether `host` is one label followed by `.suffix`.
fn wildcard_matches(suffix: &str, host: &str) -> bool {
    match host.split_once('.') {
        Some((first, rest)) => !first.is_empty() && rest.eq_ignore_ascii_case(suffix),
        None => false,
    }
}

/// How a host matched a [`HostMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostMatch {
    Exact,
    Wildcard,
    /// The entry of rules without a host.
    Any,
}

/// Entries by host: exact names, wildcard suffixes, and one for rules without a host.
#[derive(Debug)]
pub(crate) struct HostMap<T> {
    exact: HashMap<String, T>,
    /// Keyed by the suffix after `*.`.
    wildcard: HashMap<String, T>,
    any: Option<T>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        HostMap {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            any: None,
        }
    }
}

impl<T> HostMap<T> {
    /// The entry for a rule host (`None`: the rule has no host), created by `make`.
    pub fn entry(&mut self, host: Option<&str>, make: impl FnOnce() -> T) -> &mut T {
        match host {
            None => self.any.get_or_insert_with(make),
            Some(host) => {
                let host = host.to_ascii_lowercase();
                match host.strip_prefix("*.") {
                    Some(suffix) => self.wildcard.entry(suffix.to_owned()).or_insert_with(make),
                    None => self.exact.entry(host).or_insert_with(make),
                }
            }
        }
    }

    /// Sets the entry for a rule host (`None`: the rule has no host).
    pub fn insert(&mut self, host: Option<&str>, value: T) {
        match host {
            None => self.any = Some(value),
            Some(host) => {
                let host = host.to_ascii_lowercase();
                match host.strip_prefix("*.") {
                    Some(suffix) => {
                        self.wildcard.insert(suffix.to_owned(), value);
                    }
                    None => {
                        self.exact.insert(host, value);
                    }
                }
            }
        }
    }

    /// The entry for `host` (already lower-case, without port and trailing dot): exact,
    /// then wildcard, then the host-less entry.
    pub fn lookup(&self, host: &str) -> Option<(&T, HostMatch)> {
        self.lookup_named(host)
            .or_else(|| self.any.as_ref().map(|t| (t, HostMatch::Any)))
    }

    /// Like [`HostMap::lookup`] without the host-less entry.
    pub fn lookup_named(&self, host: &str) -> Option<(&T, HostMatch)> {
        if host.is_empty() {
            return None;
        }
        if let Some(t) = self.exact.get(host) {
            return Some((t, HostMatch::Exact));
        }
        let (first, rest) = host.split_once('.')?;
        if first.is_empty() {
            return None;
        }
        self.wildcard.get(rest).map(|t| (t, HostMatch::Wildcard))
    }

    pub fn any(&self) -> Option<&T> {
        self.any.as_ref()
    }
}

/// One path of an HTTP or HTTPS rule.
#[derive(Debug)]
pub(crate) struct PathRoute {
    /// As written; for `Prefix` without a trailing `/` (except `/` itself).
    pub path: String,
    pub path_type: PathType,
    pub target: Arc<Target>,
}

impl PathRoute {
    pub fn new(path: &str, path_type: PathType, target: Arc<Target>) -> Self {
        let path = match path_type {
            PathType::Prefix if path.len() > 1 => path.trim_end_matches('/'),
            _ => path,
        };
        let path = if path.is_empty() { "/" } else { path };
        PathRoute {
            path: path.to_owned(),
            path_type,
            target,
        }
    }

    pub fn matches(&self, request: &str) -> bool {
        match self.path_type {
            PathType::Exact => request == self.path,
            PathType::Prefix => {
                self.path == "/"
                    || request
                        .strip_prefix(self.path.as_str())
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
        }
    }
}

/// The paths of one host on one listener, with the certificates for it (HTTPS).
#[derive(Debug, Default)]
pub(crate) struct HostRoutes {
    /// Longest first, `Exact` before `Prefix` at equal length.
    pub paths: Vec<PathRoute>,
    pub certs: Vec<CertSource>,
}

impl HostRoutes {
    pub fn add(&mut self, route: PathRoute) {
        self.paths.push(route);
        self.paths.sort_by(|a, b| {
            b.path.len().cmp(&a.path.len()).then_with(|| {
                let rank = |t: PathType| u8::from(t != PathType::Exact);
                rank(a.path_type).cmp(&rank(b.path_type))
            })
        });
    }

    pub fn add_certs(&mut self, source: &CertSource) {
        if !self.certs.iter().any(|c| c.ingress == source.ingress) {
            self.certs.push(source.clone());
        }
    }

    /// The route for a request path.
    pub fn route(&self, path: &str) -> Option<&PathRoute> {
        self.paths.iter().find(|p| p.matches(path))
    }
}

/// Host and path routes of one HTTP or HTTPS port.
pub(crate) type HttpTable = HostMap<HostRoutes>;

/// A TLS rule on a TLS port.
#[derive(Debug)]
pub(crate) struct SniRoute {
    pub target: Arc<Target>,
    /// `Some` for `tlsMode: Terminate`.
    pub certs: Option<CertSource>,
}

/// What a TLS port does with a connection, by its SNI.
#[derive(Debug)]
pub(crate) enum TlsDecision<'a> {
    /// Forward the encrypted stream to the target.
    Passthrough(&'a Arc<Target>),
    /// Terminate with `secret`, forward the plain stream.
    Terminate {
        target: &'a Arc<Target>,
        secret: &'a str,
    },
    /// Terminate with `secret` and serve HTTP from the HTTPS routes.
    Https { secret: &'a str },
    /// No rule or no certificate for this name.
    Reject,
}

/// The routes of one TLS port: TLS rules by SNI, HTTPS rules by Host.
#[derive(Debug, Default)]
pub(crate) struct TlsTable {
    pub sni: HostMap<SniRoute>,
    pub https: Arc<HttpTable>,
}

impl TlsTable {
    /// What to do with a connection whose ClientHello named `sni`.
    pub fn decide(&self, sni: Option<&str>) -> TlsDecision<'_> {
        if let Some(name) = sni {
            let tls = self.sni.lookup_named(name);
            let https = self.https.lookup_named(name);
            // Exact beats wildcard across both kinds; at the same level, TLS rules.
            let tls_first = match (&tls, &https) {
                (Some((_, a)), Some((_, b))) => {
                    !(*a == HostMatch::Wildcard && *b == HostMatch::Exact)
                }
                _ => true,
            };
            if tls_first && let Some((route, _)) = tls {
                return match &route.certs {
                    None => TlsDecision::Passthrough(&route.target),
                    Some(certs) => match choose_secret(std::slice::from_ref(certs), sni, false) {
                        Some(secret) => TlsDecision::Terminate {
                            target: &route.target,
                            secret,
                        },
                        None => TlsDecision::Reject,
                    },
                };
            }
            if let Some((routes, _)) = https {
                return match choose_secret(&routes.certs, sni, false) {
                    Some(secret) => TlsDecision::Https { secret },
                    None => TlsDecision::Reject,
                };
            }
        }
        match self.https.any() {
            Some(routes) => match choose_secret(&routes.certs, sni, true) {
                Some(secret) => TlsDecision::Https { secret },
                None => TlsDecision::Reject,
            },
            None => TlsDecision::Reject,
        }
    }

    /// The secret a connection for `host` would have been given, if it is served as
    /// HTTPS here: a request whose Host differs from its connection's SNI must map to
    /// the same certificate, or it is misdirected.
    pub fn https_secret(&self, host: &str) -> Option<&str> {
        match self.decide(Some(host)) {
            TlsDecision::Https { secret } => Some(secret),
            _ => None,
        }
    }
}

/// The host of a request: the `:authority` (HTTP/2) or `Host` header, without port and
/// trailing dot, lower-cased (borrowed when it already is).
pub(crate) fn request_host<B>(request: &http::Request<B>) -> std::borrow::Cow<'_, str> {
    let raw = request
        .uri()
        .authority()
        .map(http::uri::Authority::as_str)
        .or_else(|| {
            request
                .headers()
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
        })
        .unwrap_or("");
    normalize_host(raw)
}

/// `Shop.Example.com.:8080` → `shop.example.com`; `[::1]:80` → `[::1]`.
pub(crate) fn normalize_host(raw: &str) -> std::borrow::Cow<'_, str> {
    let raw = raw.trim();
    let without_port = if raw.starts_with('[') {
        raw.find(']').map_or(raw, |end| &raw[..=end])
    } else {
        raw.rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(raw, |(host, _)| host)
    };
    let host = without_port.strip_suffix('.').unwrap_or(without_port);
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn target(name: &str, rule: u32) -> Arc<Target> {
        Arc::new(Target {
            ingress: IngressKey::new("default", name),
            rule,
            service: name.to_owned(),
            pool: Arc::new(Pool::new(Vec::new())),
            load: LoadCounters::new(),
        })
    }

    fn tls(entries: &[(&[&str], &str)]) -> Arc<Vec<IngressTls>> {
        Arc::new(
            entries
                .iter()
                .map(|(hosts, secret)| IngressTls {
                    hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
                    secret_name: (*secret).to_owned(),
                })
                .collect(),
        )
    }

    fn source(name: &str, entries: &[(&[&str], &str)]) -> CertSource {
        CertSource {
            ingress: IngressKey::new("default", name),
            tls: tls(entries),
        }
    }

    fn service_of<'a>(table: &'a HttpTable, host: &str, path: &str) -> Option<&'a str> {
        let (routes, _) = table.lookup(host)?;
        routes.route(path).map(|r| r.target.service.as_str())
    }

    #[test]
    fn hosts_exact_then_wildcard_then_any_and_longest_path_first() {
        let mut table = HttpTable::default();
        let mut add = |host: Option<&str>, path: &str, t: PathType, service: &str| {
            table
                .entry(host, HostRoutes::default)
                .add(PathRoute::new(path, t, target(service, 0)));
        };
        add(Some("shop.example.com"), "/", PathType::Prefix, "web");
        add(Some("shop.example.com"), "/api/", PathType::Prefix, "api");
        add(
            Some("shop.example.com"),
            "/api/v2",
            PathType::Prefix,
            "api2",
        );
        add(
            Some("shop.example.com"),
            "/api/v2",
            PathType::Exact,
            "exact",
        );
        add(Some("*.example.com"), "/", PathType::Prefix, "wild");
        add(None, "/only", PathType::Exact, "default");

        assert_eq!(service_of(&table, "shop.example.com", "/"), Some("web"));
        assert_eq!(service_of(&table, "shop.example.com", "/apis"), Some("web"));
        assert_eq!(service_of(&table, "shop.example.com", "/api"), Some("api"));
        assert_eq!(
            service_of(&table, "shop.example.com", "/api/x"),
            Some("api")
        );
        assert_eq!(
            service_of(&table, "shop.example.com", "/api/v2"),
            Some("exact")
        );
        assert_eq!(
            service_of(&table, "shop.example.com", "/api/v2/"),
            Some("api2")
        );
        assert_eq!(
            service_of(&table, "shop.example.com", "/api/v20"),
            Some("api")
        );
        assert_eq!(service_of(&table, "a.example.com", "/x"), Some("wild"));
        // One label only, and not the bare domain.
        assert_eq!(
            service_of(&table, "a.b.example.com", "/only"),
            Some("default")
        );
        assert_eq!(service_of(&table, "example.com", "/only"), Some("default"));
        assert_eq!(service_of(&table, "example.com", "/other"), None);
        assert_eq!(service_of(&table, "", "/only"), Some("default"));
        // A matching host without a matching path does not fall back.
        table
            .entry(Some("API.example.com"), HostRoutes::default)
            .add(PathRoute::new("/v1", PathType::Exact, target("v1", 0)));
        let (routes, how) = table.lookup("api.example.com").unwrap();
        assert_eq!(how, HostMatch::Exact);
        assert!(routes.route("/only").is_none());
        assert_eq!(service_of(&table, "api.example.com", "/v1"), Some("v1"));
    }

    #[test]
    fn hosts_are_normalised() {
        assert_eq!(normalize_host("Shop.Example.COM:8080"), "shop.example.com");
        assert_eq!(normalize_host("shop.example.com."), "shop.example.com");
        assert_eq!(normalize_host("[::1]:443"), "[::1]");
        assert_eq!(normalize_host("127.0.0.1"), "127.0.0.1");
        assert!(matches!(
            normalize_host("shop.example.com"),
            std::borrow::Cow::Borrowed(_)
        ));
        let request = http::Request::get("https://A.example.com:8443/x")
            .body(())
            .unwrap();
        assert_eq!(request_host(&request), "a.example.com");
        let request = http::Request::get("/x")
            .header("host", "b.example.com:80")
            .body(())
            .unwrap();
        assert_eq!(request_host(&request), "b.example.com");
    }

    #[test]
    fn certificates_come_from_the_owning_ingress() {
        let sources = [
            source(
                "a",
                &[
                    (&["shop.example.com"], "a-exact"),
                    (&["*.example.com"], "a-wild"),
                ],
            ),
            source("b", &[(&[], "b-default")]),
        ];
        assert_eq!(
            choose_secret(&sources, Some("shop.example.com"), false),
            Some("a-exact")
        );
        assert_eq!(
            choose_secret(&sources, Some("x.example.com"), false),
            Some("a-wild")
        );
        assert_eq!(choose_secret(&sources, Some("other.test"), false), None);
        assert_eq!(
            choose_secret(&sources, Some("other.test"), true),
            Some("b-default")
        );
        assert_eq!(choose_secret(&sources, None, true), Some("b-default"));
        assert_eq!(choose_secret(&sources[..1], None, true), None);
    }

    #[test]
    fn sni_decides_passthrough_termination_https_or_nothing() {
        let mut table = TlsTable::default();
        table.sni.entry(Some("db.example.com"), || SniRoute {
            target: target("pg", 0),
            certs: None,
        });
        table.sni.entry(Some("*.tcp.example.com"), || SniRoute {
            target: target("raw", 1),
            certs: Some(source("raw", &[(&["*.tcp.example.com"], "raw-tls")])),
        });
        let mut https = HttpTable::default();
        let shop = https.entry(Some("shop.example.com"), HostRoutes::default);
        shop.add(PathRoute::new("/", PathType::Prefix, target("web", 2)));
        shop.add_certs(&source("shop", &[(&["shop.example.com"], "shop-tls")]));
        // An exact HTTPS host under a TLS wildcard wins.
        let exact = https.entry(Some("x.tcp.example.com"), HostRoutes::default);
        exact.add(PathRoute::new("/", PathType::Prefix, target("web", 3)));
        exact.add_certs(&source("x", &[(&["x.tcp.example.com"], "x-tls")]));
        table.https = Arc::new(https);

        assert!(matches!(
            table.decide(Some("db.example.com")),
            TlsDecision::Passthrough(t) if t.service == "pg"
        ));
        assert!(matches!(
            table.decide(Some("a.tcp.example.com")),
            TlsDecision::Terminate {
                secret: "raw-tls",
                ..
            }
        ));
        assert!(matches!(
            table.decide(Some("x.tcp.example.com")),
            TlsDecision::Https { secret: "x-tls" }
        ));
        assert!(matches!(
            table.decide(Some("shop.example.com")),
            TlsDecision::Https { secret: "shop-tls" }
        ));
        // Unknown names and no SNI: no default certificate without a host-less entry.
        assert!(matches!(
            table.decide(Some("evil.test")),
            TlsDecision::Reject
        ));
        assert!(matches!(table.decide(None), TlsDecision::Reject));
        assert_eq!(table.https_secret("shop.example.com"), Some("shop-tls"));
        assert_eq!(table.https_secret("db.example.com"), None);

        // A host-less HTTPS rule with a host-less tls entry is the default.
        let mut https = HttpTable::default();
        let any = https.entry(None, HostRoutes::default);
        any.add(PathRoute::new("/", PathType::Prefix, target("web", 0)));
        any.add_certs(&source("d", &[(&[], "default-tls")]));
        table.https = Arc::new(https);
        assert!(matches!(
            table.decide(Some("evil.test")),
            TlsDecision::Https {
                secret: "default-tls"
            }
        ));
        assert!(matches!(
            table.decide(None),
            TlsDecision::Https {
                secret: "default-tls"
            }
        ));
    }
}
