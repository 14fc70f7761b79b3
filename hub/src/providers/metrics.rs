//! The DNS providers' metrics: what one provider's syncs and API calls add up to
//! ([`ProviderSample`], [`SyncTotals`]) and their Prometheus text ([`render_providers`]).
//! A provider's labels are its configured name and type: bounded by the config.

use std::fmt::Write;
use std::time::SystemTime;

use fedingress_providers::publish::call::CallStats;

use fedingress_apiserver::metrics::escape;

/// Sync outcomes of one DNS provider, summed over this process's syncers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncTotals {
    /// Syncs that returned a report.
    pub ok: u64,
    /// Syncs that failed as a whole (zone unreadable, out of retries, a panic).
    pub failed: u64,
    /// Record changes applied (planned, on a dry run).
    pub changes: u64,
    /// Health checks created, updated or deleted (planned, on a dry run).
    pub health_checks_changed: u64,
}

impl std::ops::Add for SyncTotals {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        SyncTotals {
            ok: self.ok.saturating_add(other.ok),
            failed: self.failed.saturating_add(other.failed),
            changes: self.changes.saturating_add(other.changes),
            health_checks_changed: self
                .health_checks_changed
                .saturating_add(other.health_checks_changed),
        }
    }
}

/// One DNS provider as a scrape sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderSample {
    /// The configured name (`dns.providers[].name`).
    pub name: String,
    /// `route53` or `clouddns`.
    pub kind: &'static str,
    pub dry_run: bool,
    pub totals: SyncTotals,
    /// Names of the latest successful sync the provider does not hold (all of them when
    /// the sync after it failed); `None` until this replica has synced.
    pub names_not_synced: Option<u64>,
    pub last_sync_time: Option<SystemTime>,
    pub observed_serial: Option<u32>,
    /// The call policy's counters since the provider connected.
    pub calls: CallStats,
}

/// One metric family of the DNS providers: name, help, type, and a provider's samples as
/// (extra label, value); a `None` value leaves the sample out.
type ProviderFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ProviderSample) -> Vec<(&'static str, Option<String>)>,
);

const PROVIDER_FAMILIES: &[ProviderFamily] = &[
    (
        "fedingress_dns_provider_syncs_total",
        "DNS provider syncs by result: ok (a report, per-name failures included) or failed (nothing could be done).",
        "counter",
        |s| {
            vec![
                ("result=\"ok\"", Some(s.totals.ok.to_string())),
                ("result=\"failed\"", Some(s.totals.failed.to_string())),
            ]
        },
    ),
    (
        "fedingress_dns_provider_record_changes_total",
        "Record changes a DNS provider applied (planned, on a dry run).",
        "counter",
        |s| vec![("", Some(s.totals.changes.to_string()))],
    ),
    (
        "fedingress_dns_provider_health_check_changes_total",
        "Cloud health checks a DNS provider created, updated or deleted (planned, on a dry run).",
        "counter",
        |s| vec![("", Some(s.totals.health_checks_changed.to_string()))],
    ),
    (
        "fedingress_dns_provider_names_not_synced",
        "DNS names the provider does not hold as desired after its latest sync (absent until this replica synced).",
        "gauge",
        |s| vec![("", s.names_not_synced.map(|n| n.to_string()))],
    ),
    (
        "fedingress_dns_provider_last_sync_timestamp_seconds",
        "When the DNS provider's latest successful sync ended (unix seconds).",
        "gauge",
        |s| {
            let secs = s.last_sync_time.map(|at| {
                let secs = at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs_f64();
                format!("{secs:.3}")
            });
            vec![("", secs)]
        },
    ),
    (
        "fedingress_dns_provider_observed_serial",
        "DNS serial of the provider's latest successful sync.",
        "gauge",
        |s| vec![("", s.observed_serial.map(|n| n.to_string()))],
    ),
    (
        "fedingress_dns_provider_api_calls_total",
        "Requests sent to the DNS provider's API (retries included).",
        "counter",
        |s| vec![("", Some(s.calls.calls.to_string()))],
    ),
    (
        "fedingress_dns_provider_api_retries_total",
        "DNS provider API requests retried, by the reason of the failed attempt.",
        "counter",
        |s| {
            vec![
                (
                    "reason=\"throttled\"",
                    Some(s.calls.throttled_retries.to_string()),
                ),
                (
                    "reason=\"transient\"",
                    Some(s.calls.transient_retries.to_string()),
                ),
            ]
        },
    ),
    (
        "fedingress_dns_provider_dry_run",
        "Whether the DNS provider only plans (dryRun: true).",
        "gauge",
        |s| vec![("", Some(u8::from(s.dry_run).to_string()))],
    ),
];

/// The Prometheus text of the DNS providers' metrics: every family is declared, with a
/// sample per provider (none without providers).
pub fn render_providers(out: &mut String, samples: &[ProviderSample]) {
    let labels: Vec<String> = samples
        .iter()
        .map(|s| {
            format!(
                "provider=\"{}\",type=\"{}\"",
                escape(&s.name),
                escape(s.kind)
            )
        })
        .collect();
    for (name, help, kind, values) in PROVIDER_FAMILIES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (sample, labels) in samples.iter().zip(&labels) {
            for (extra, value) in values(sample) {
                let Some(value) = value else { continue };
                let sep = if extra.is_empty() { "" } else { "," };
                let _ = writeln!(out, "{name}{{{labels}{sep}{extra}}} {value}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn renders_each_providers_series_with_bounded_labels() {
        let synced = ProviderSample {
            name: "aws-prod".into(),
            kind: "route53",
            dry_run: false,
            totals: SyncTotals {
                ok: 4,
                failed: 1,
                changes: 12,
                health_checks_changed: 3,
            },
            names_not_synced: Some(2),
            last_sync_time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_500)),
            observed_serial: Some(42),
            calls: CallStats {
                calls: 20,
                retries: 5,
                throttled_retries: 3,
                transient_retries: 2,
                throttled: 4,
                failed: 1,
            },
        };
        let never = ProviderSample {
            name: "gcp\"x".into(),
            kind: "clouddns",
            dry_run: true,
            ..ProviderSample::default()
        };
        let mut text = String::new();
        render_providers(&mut text, &[synced, never]);
        let aws = "provider=\"aws-prod\",type=\"route53\"";
        for line in [
            format!("fedingress_dns_provider_syncs_total{{{aws},result=\"ok\"}} 4"),
            format!("fedingress_dns_provider_syncs_total{{{aws},result=\"failed\"}} 1"),
            format!("fedingress_dns_provider_record_changes_total{{{aws}}} 12"),
            format!("fedingress_dns_provider_health_check_changes_total{{{aws}}} 3"),
            format!("fedingress_dns_provider_names_not_synced{{{aws}}} 2"),
            format!("fedingress_dns_provider_last_sync_timestamp_seconds{{{aws}}} 1700000000.500"),
            format!("fedingress_dns_provider_observed_serial{{{aws}}} 42"),
            format!("fedingress_dns_provider_api_calls_total{{{aws}}} 20"),
            format!("fedingress_dns_provider_api_retries_total{{{aws},reason=\"throttled\"}} 3"),
            format!("fedingress_dns_provider_api_retries_total{{{aws},reason=\"transient\"}} 2"),
            format!("fedingress_dns_provider_dry_run{{{aws}}} 0"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // A provider that has not synced here: counters at 0, no gauges of a sync.
        let gcp = "provider=\"gcp\\\"x\",type=\"clouddns\"";
        assert!(
            text.contains(&format!(
                "fedingress_dns_provider_syncs_total{{{gcp},result=\"ok\"}} 0"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("fedingress_dns_provider_dry_run{{{gcp}}} 1")));
        for gauge in [
            "names_not_synced",
            "last_sync_timestamp_seconds",
            "observed_serial",
        ] {
            assert!(
                !text.contains(&format!("fedingress_dns_provider_{gauge}{{{gcp}}}")),
                "{text}"
            );
        }
        // One HELP and TYPE per metric, however many providers.
        assert_eq!(
            text.matches("# TYPE fedingress_dns_provider_syncs_total counter")
                .count(),
            1
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("# TYPE")).count(), 9);
        // Without providers the families are declared, with no samples.
        let mut none = String::new();
        render_providers(&mut none, &[]);
        assert_eq!(none.lines().filter(|l| l.starts_with("# TYPE")).count(), 9);
        assert!(none.lines().all(|l| l.starts_with('#')), "{none}");
    }
}
