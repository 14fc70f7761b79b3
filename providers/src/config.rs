//! `dns.providers` in the apiserver's config file: typed and strict (unknown fields are
//! refused), checked as a whole by [`validate`] before anything starts, with the field
//! path in every error.
//!
//! ```yaml
//! dns:
//!   ownerId: prod-federation
//!   providers:
//!   - name: aws
//!     type: route53
//!     zone: Z0123456789ABCDEFGHIJ      # hosted zone id
//!     domains: [shop.example.com, apps.example.com, gslb.example.com]
//!     healthChecks: {requestIntervalSeconds: 10, failureThreshold: 2}
//!     delegate: [gslb.example.com]     # an embedded zone (in domains too): NS + glue kept in this zone
//!   - name: gcp
//!     type: clouddns
//!     project: my-project
//!     zone: example-com                # managed zone name
//!     domains: [example.com]
//! ```

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

/// Which cloud.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum ProviderType {
    #[serde(rename = "route53")]
    Route53,
    #[serde(rename = "clouddns")]
    CloudDns,
}

impl ProviderType {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderType::Route53 => "route53",
            ProviderType::CloudDns => "clouddns",
        }
    }
}

/// One entry of `dns.providers`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// Unique among the providers; shown in status (`status.dns.providers[].name`).
    pub name: String,
    #[serde(rename = "type")]
    pub type_: ProviderType,
    /// Route53: the hosted zone id (`Z…`, with or without `/hostedzone/`). Cloud DNS: the
    /// managed zone's name.
    pub zone: String,
    /// Names this provider may manage: each entry matches itself and every name under it
    /// (as ExternalDNS's `--domain-filter`). Empty: every name inside the zone.
    #[serde(default)]
    pub domains: Vec<String>,
    /// An emulator or private endpoint (moto, a fake), e.g. `http://127.0.0.1:5000`.
    pub endpoint_url: Option<String>,
    /// Route53: the SDK region (Route53 is global; default `us-east-1`).
    pub region: Option<String>,
    /// Cloud DNS: the project that owns the managed zone. Required for `clouddns`.
    pub project: Option<String>,
    /// Plan and report every change without making it. Default false.
    #[serde(default)]
    pub dry_run: bool,
    /// Changes per request, 1 to 300. Default 100. Route53 allows 1,000 elements per
    /// ChangeBatch and counts an UPSERT twice; a change of a record set's routing policy
    /// is sent as a DELETE and an UPSERT (three), so 300 keeps a batch of single-value
    /// changes inside that limit.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Provider API requests per second, at most. Default 5 (Route53's per-account
    /// limit).
    #[serde(default = "default_requests_per_second")]
    pub requests_per_second: f64,
    /// Attempts per request when throttled or on a transient error. Default 6.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// A full resync that repairs drift, every this many seconds. Default 300.
    #[serde(default = "default_resync_seconds")]
    pub resync_interval_seconds: u64,
    /// Route53 health checks for each cluster endpoint.
    #[serde(default)]
    pub health_checks: HealthCheckConfig,
    /// Cloud DNS: a health check resource
    /// (`projects/P/global/healthChecks/NAME` or its URL) for the routing policies'
    /// external endpoints. Without it, the hub keeps the record sets to the clusters it
    /// sees healthy itself.
    #[serde(default, deserialize_with = "health_check_resource")]
    pub health_check: Option<String>,
    /// Zones of the embedded DNS server (`dns.zones[].name`) whose delegation this
    /// provider maintains: NS records at the zone's apex and glue for in-zone
    /// nameservers, in this provider's zone.
    #[serde(default)]
    pub delegate: Vec<String>,
}

/// Route53 health checks of cluster endpoints.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Create them. Default true (they are billed: docs/providers.md).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// 10 or 30 (Route53's only choices). Default 30.
    #[serde(default = "default_request_interval")]
    pub request_interval_seconds: u32,
    /// Consecutive failures before unhealthy, 1 to 10. Default 3.
    #[serde(default = "default_failure_threshold")]
    pub failure_threshold: u32,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            request_interval_seconds: default_request_interval(),
            failure_threshold: default_failure_threshold(),
        }
    }
}

/// `healthCheck`, Cloud DNS's health check resource: a string. A map there is Route53's
/// settings under the singular name, which serde alone answers with "invalid type: map,
/// expected a string": the error says where they go instead (issue 23).
fn health_check_resource<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    struct Resource;
    impl<'de> Visitor<'de> for Resource {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a Cloud DNS health check resource (projects/P/global/healthChecks/NAME)")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
            inner.deserialize_any(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(de::Error::custom(
                "Route53's health check settings are `healthChecks` (plural); `healthCheck` is \
                 Cloud DNS's health check resource, a string (projects/P/global/healthChecks/NAME)",
            ))
        }
    }
    deserializer.deserialize_option(Resource)
}

fn yes() -> bool {
    true
}
fn default_batch_size() -> usize {
    100
}
fn default_requests_per_second() -> f64 {
    5.0
}
fn default_max_attempts() -> u32 {
    6
}
fn default_resync_seconds() -> u64 {
    300
}
fn default_request_interval() -> u32 {
    30
}
fn default_failure_threshold() -> u32 {
    3
}

impl ProviderConfig {
    /// Whether `name` (lower case, no trailing dot) is one this provider may manage,
    /// before the zone's own apex is considered.
    pub fn in_domains(&self, name: &str) -> bool {
        self.domains.is_empty()
            || self.domains.iter().any(|d| {
                let d = normalize(d);
                name == d || name.ends_with(&format!(".{d}"))
            })
    }
}

/// Lower case, without the trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Checks `dns.providers` as a whole: `embedded_zones` are the apexes of `dns.zones`.
/// The error names the field, e.g. `dns.providers[1].zone: required`.
pub fn validate(
    owner_id: Option<&str>,
    providers: &[ProviderConfig],
    embedded_zones: &[String],
) -> Result<(), String> {
    if providers.is_empty() {
        return Ok(());
    }
    match owner_id {
        None => {
            return Err(
                "dns.ownerId: required with dns.providers (the id this federation's ownership \
                 records carry; two federations must not share one)"
                    .into(),
            );
        }
        Some(id) if !valid_owner_id(id) => {
            return Err(format!(
                "dns.ownerId: {id:?} must be 1 to 63 characters of a-z, 0-9, '-' and '.'"
            ));
        }
        Some(_) => {}
    }
    let mut names = BTreeSet::new();
    for (i, p) in providers.iter().enumerate() {
        let at = |field: &str| format!("dns.providers[{i}].{field}");
        if p.name.is_empty()
            || !p
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(format!(
                "{}: {:?} must be lower-case letters, digits and '-'",
                at("name"),
                p.name
            ));
        }
        if p.name == "embedded" {
            return Err(format!(
                "{}: \"embedded\" is the embedded DNS server's name in status",
                at("name")
            ));
        }
        if !names.insert(p.name.as_str()) {
            return Err(format!("{}: {:?} is used twice", at("name"), p.name));
        }
        if p.zone.trim().is_empty() {
            return Err(format!("{}: required", at("zone")));
        }
        for (j, d) in p.domains.iter().enumerate() {
            let d = normalize(d);
            if d.is_empty() || d.contains(char::is_whitespace) || d.contains("..") {
                return Err(format!(
                    "{}: {:?} is not a domain name",
                    at(&format!("domains[{j}]")),
                    p.domains[j]
                ));
            }
        }
        if let Some(url) = &p.endpoint_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "{}: {url:?} must start with http:// or https://",
                at("endpointUrl")
            ));
        }
        if p.batch_size == 0 || p.batch_size > 300 {
            return Err(format!(
                "{}: {} must be between 1 and 300",
                at("batchSize"),
                p.batch_size
            ));
        }
        if !(p.requests_per_second.is_finite() && p.requests_per_second > 0.0) {
            return Err(format!(
                "{}: {} must be above 0",
                at("requestsPerSecond"),
                p.requests_per_second
            ));
        }
        if p.max_attempts == 0 {
            return Err(format!("{}: must be at least 1", at("maxAttempts")));
        }
        if p.resync_interval_seconds == 0 {
            return Err(format!(
                "{}: must be at least 1",
                at("resyncIntervalSeconds")
            ));
        }
        match p.type_ {
            ProviderType::Route53 => {
                let hc = &p.health_checks;
                if ![10, 30].contains(&hc.request_interval_seconds) {
                    return Err(format!(
                        "{}: {} must be 10 or 30 (Route53's choices)",
                        at("healthChecks.requestIntervalSeconds"),
                        hc.request_interval_seconds
                    ));
                }
                if !(1..=10).contains(&hc.failure_threshold) {
                    return Err(format!(
                        "{}: {} must be between 1 and 10",
                        at("healthChecks.failureThreshold"),
                        hc.failure_threshold
                    ));
                }
                if p.project.is_some() {
                    return Err(format!("{}: only for type clouddns", at("project")));
                }
                if p.health_check.is_some() {
                    return Err(format!(
                        "{}: only for type clouddns (Route53 uses healthChecks)",
                        at("healthCheck")
                    ));
                }
            }
            ProviderType::CloudDns => {
                if p.project.as_deref().is_none_or(str::is_empty) {
                    return Err(format!("{}: required for type clouddns", at("project")));
                }
                if p.region.is_some() {
                    return Err(format!("{}: only for type route53", at("region")));
                }
            }
        }
        for (j, zone) in p.delegate.iter().enumerate() {
            let zone = normalize(zone);
            if !embedded_zones.iter().any(|z| normalize(z) == zone) {
                return Err(format!(
                    "{}: {zone:?} is not one of dns.zones",
                    at(&format!("delegate[{j}]"))
                ));
            }
            // The provider writes only names in its domains: a delegation outside them
            // would never be written (issue 23 item 4: the docs' example did this).
            if !p.in_domains(&zone) {
                return Err(format!(
                    "{}: {zone:?} lies outside domains ({}), so its NS and glue would never be written: add it to domains",
                    at(&format!("delegate[{j}]")),
                    p.domains.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn valid_owner_id(id: &str) -> bool {
    (1..=63).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Vec<ProviderConfig> {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn a_route53_and_a_clouddns_provider_pass() {
        let p = parse(
            "- {name: aws, type: route53, zone: Z1, domains: [shop.example.com]}\n\
             - {name: gcp, type: clouddns, zone: example-com, project: p}\n",
        );
        assert_eq!(p[0].health_checks, HealthCheckConfig::default());
        validate(Some("prod"), &p, &[]).unwrap();
        assert!(p[0].in_domains("shop.example.com"));
        assert!(p[0].in_domains("a.shop.example.com"));
        assert!(!p[0].in_domains("xshop.example.com"));
        assert!(p[1].in_domains("anything.example.org"));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "- {name: aws, type: route53, zone: Z1}",
                None,
                "dns.ownerId: required",
            ),
            (
                "- {name: aws, type: route53, zone: ''}",
                Some("p"),
                "dns.providers[0].zone: required",
            ),
            (
                "- {name: g, type: clouddns, zone: z}",
                Some("p"),
                "dns.providers[0].project: required",
            ),
            (
                "- {name: a, type: route53, zone: z, healthChecks: {requestIntervalSeconds: 20}}",
                Some("p"),
                "dns.providers[0].healthChecks.requestIntervalSeconds",
            ),
            (
                "- {name: a, type: route53, zone: z}\n- {name: a, type: route53, zone: y}",
                Some("p"),
                "dns.providers[1].name: \"a\" is used twice",
            ),
            (
                "- {name: a, type: route53, zone: z, delegate: [gslb.example.com]}",
                Some("p"),
                "dns.providers[0].delegate[0]",
            ),
        ];
        for (yaml, owner, want) in cases {
            let err = validate(owner, &parse(yaml), &[]).unwrap_err();
            assert!(err.starts_with(want), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_delegated_zone_must_lie_in_the_domains() {
        let embedded = ["gslb.example.com".to_string()];
        let narrow = "- {name: a, type: route53, zone: z, domains: [shop.example.com], delegate: [gslb.example.com]}";
        let err = validate(Some("p"), &parse(narrow), &embedded).unwrap_err();
        assert!(
            err.starts_with("dns.providers[0].delegate[0]: \"gslb.example.com\" lies outside domains (shop.example.com)"),
            "{err}"
        );
        for ok in [
            "- {name: a, type: route53, zone: z, domains: [shop.example.com, gslb.example.com], delegate: [gslb.example.com]}",
            "- {name: a, type: route53, zone: z, domains: [example.com], delegate: [gslb.example.com]}",
            "- {name: a, type: route53, zone: z, delegate: [gslb.example.com]}",
        ] {
            validate(Some("p"), &parse(ok), &embedded).unwrap();
        }
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        assert!(
            yaml_serde::from_str::<Vec<ProviderConfig>>(
                "- {name: a, type: route53, zone: z, zonee: 1}"
            )
            .is_err()
        );
        assert!(
            yaml_serde::from_str::<Vec<ProviderConfig>>("- {name: a, type: azure, zone: z}")
                .is_err()
        );
    }

    /// Route53's settings written as `healthCheck` (Cloud DNS's string field) said only
    /// "invalid type: map, expected a string" (issue 23): the error names the field and
    /// points to `healthChecks`.
    #[test]
    fn route53_settings_under_health_check_point_to_health_checks() {
        let err = yaml_serde::from_str::<Vec<ProviderConfig>>(
            "- name: a\n  type: route53\n  zone: z\n  healthCheck: {requestIntervalSeconds: 10}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("[0].healthCheck: Route53"), "{err}");
        assert!(err.contains("`healthChecks` (plural)"), "{err}");
        assert!(!err.contains("expected a string"), "{err}");
        let p = parse(
            "- {name: g, type: clouddns, zone: z, project: p, healthCheck: projects/p/global/healthChecks/c}\n\
             - {name: h, type: clouddns, zone: z, project: p, healthCheck: null}\n",
        );
        assert_eq!(
            p[0].health_check.as_deref(),
            Some("projects/p/global/healthChecks/c")
        );
        assert_eq!(p[1].health_check, None);
        let err = yaml_serde::from_str::<Vec<ProviderConfig>>(
            "- {name: g, type: clouddns, zone: z, healthCheck: [a]}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("expected a Cloud DNS health check resource"),
            "{err}"
        );
    }
}
