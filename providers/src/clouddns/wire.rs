//! The one place where `google-cloud-dns-v1`'s generated types meet this provider's
//! own ([`Rrset`]): conversions both ways, and the client's errors classified as
//! [`ProviderError`]s.
//!
//! Why a module of its own: the generated types are `#[non_exhaustive]`, carry fields
//! this provider never writes (`kind`, `signatureRrdatas`, unknown fields kept for
//! round trips) and may grow with every release; the mapping and the sync only see
//! [`Rrset`], so a new client version touches this file alone.

use google_cloud_dns_v1::model::{
    RRSetRoutingPolicy, RRSetRoutingPolicyGeoPolicy, RRSetRoutingPolicyGeoPolicyGeoPolicyItem,
    RRSetRoutingPolicyHealthCheckTargets, RRSetRoutingPolicyPrimaryBackupPolicy,
    RRSetRoutingPolicyWrrPolicy, RRSetRoutingPolicyWrrPolicyWrrPolicyItem, ResourceRecordSet,
};
use google_cloud_gax::error::rpc::{Code, StatusDetails};

use crate::publish::ProviderError;

use super::mapping::{Data, GeoItem, Rrset, WrrItem};

/// [`Rrset`] → the generated record set sent in `changes.create` additions.
pub fn to_model(rrset: &Rrset) -> ResourceRecordSet {
    let mut out = ResourceRecordSet::new();
    out.name = Some(format!("{}.", rrset.name));
    out.r#type = Some(rrset.type_.clone());
    out.ttl = Some(i32::try_from(rrset.ttl).unwrap_or(i32::MAX));
    let mut policy = RRSetRoutingPolicy::new();
    match &rrset.data {
        Data::Plain(rrdatas) => {
            out.rrdatas = rrdatas.clone();
            return out;
        }
        Data::Geo {
            items,
            health_check,
        } => {
            policy.geo = Some(geo_policy(items));
            policy.health_check = health_check.clone();
        }
        Data::Wrr {
            items,
            health_check,
        } => {
            let mut wrr = RRSetRoutingPolicyWrrPolicy::new();
            wrr.items = items
                .iter()
                .map(|item| {
                    let mut out = RRSetRoutingPolicyWrrPolicyWrrPolicyItem::new();
                    out.weight = Some(item.weight);
                    out.rrdatas = item.rrdatas.clone();
                    out.health_checked_targets = targets(&item.health_checked);
                    out
                })
                .collect();
            policy.wrr = Some(wrr);
            policy.health_check = health_check.clone();
        }
        Data::PrimaryBackup {
            primary,
            backup,
            trickle_traffic,
            health_check,
        } => {
            let mut pb = RRSetRoutingPolicyPrimaryBackupPolicy::new();
            pb.primary_targets = targets(primary);
            pb.backup_geo_targets = Some(geo_policy(backup));
            pb.trickle_traffic = Some(*trickle_traffic);
            policy.primary_backup = Some(pb);
            policy.health_check = health_check.clone();
        }
        // Never desired: an `Other` record set is only ever deleted, as listed.
        Data::Other(_) => {}
    }
    out.routing_policy = Some(policy);
    out
}

fn geo_policy(items: &[GeoItem]) -> RRSetRoutingPolicyGeoPolicy {
    let mut geo = RRSetRoutingPolicyGeoPolicy::new();
    geo.items = items
        .iter()
        .map(|item| {
            let mut out = RRSetRoutingPolicyGeoPolicyGeoPolicyItem::new();
            out.location = Some(item.location.clone());
            out.rrdatas = item.rrdatas.clone();
            out.health_checked_targets = targets(&item.health_checked);
            out
        })
        .collect();
    geo
}

/// `healthCheckedTargets` with external endpoints, absent when there are none.
fn targets(endpoints: &[String]) -> Option<RRSetRoutingPolicyHealthCheckTargets> {
    (!endpoints.is_empty()).then(|| {
        let mut t = RRSetRoutingPolicyHealthCheckTargets::new();
        t.external_endpoints = endpoints.to_vec();
        t
    })
}

/// A listed record set → [`Rrset`]. Whatever this provider does not write makes it
/// [`Data::Other`] (so it never compares equal to a desired record set).
pub fn from_model(rrset: &ResourceRecordSet) -> Rrset {
    let name = crate::config::normalize(rrset.name.as_deref().unwrap_or_default());
    let type_ = rrset.r#type.clone().unwrap_or_default();
    let ttl = rrset.ttl.and_then(|t| u32::try_from(t).ok()).unwrap_or(0);
    let data = data(rrset);
    Rrset {
        name,
        type_,
        ttl,
        data,
    }
    .normalised()
}

fn data(rrset: &ResourceRecordSet) -> Data {
    let Some(policy) = &rrset.routing_policy else {
        return Data::Plain(rrset.rrdatas.clone());
    };
    if !rrset.rrdatas.is_empty() {
        return Data::Other("rrdatas and a routing policy".into());
    }
    let health_check = policy.health_check.clone();
    match (&policy.geo, &policy.wrr, &policy.primary_backup) {
        (Some(geo), None, None) => match geo_items(geo) {
            Ok(items) => Data::Geo {
                items,
                health_check,
            },
            Err(what) => Data::Other(what),
        },
        (None, Some(wrr), None) => {
            let mut items = Vec::new();
            for item in &wrr.items {
                let Ok(health_checked) = endpoints(item.health_checked_targets.as_ref()) else {
                    return Data::Other("internal load balancer targets".into());
                };
                items.push(WrrItem {
                    weight: item.weight.unwrap_or(0.0),
                    rrdatas: item.rrdatas.clone(),
                    health_checked,
                });
            }
            Data::Wrr {
                items,
                health_check,
            }
        }
        (None, None, Some(pb)) => {
            let Ok(primary) = endpoints(pb.primary_targets.as_ref()) else {
                return Data::Other("internal load balancer targets".into());
            };
            let backup = match pb.backup_geo_targets.as_ref().map(geo_items) {
                Some(Ok(items)) => items,
                Some(Err(what)) => return Data::Other(what),
                None => Vec::new(),
            };
            Data::PrimaryBackup {
                primary,
                backup,
                trickle_traffic: pb.trickle_traffic.unwrap_or(0.0),
                health_check,
            }
        }
        _ => Data::Other("a routing policy of another kind".into()),
    }
}

fn geo_items(geo: &RRSetRoutingPolicyGeoPolicy) -> Result<Vec<GeoItem>, String> {
    if geo.enable_fencing == Some(true) {
        return Err("geo fencing".into());
    }
    geo.items
        .iter()
        .map(|item| {
            Ok(GeoItem {
                location: item.location.clone().unwrap_or_default(),
                rrdatas: item.rrdatas.clone(),
                health_checked: endpoints(item.health_checked_targets.as_ref())
                    .map_err(|()| "internal load balancer targets".to_string())?,
            })
        })
        .collect()
}

/// External endpoints of `healthCheckedTargets`; `Err` when it names internal load
/// balancers (which this provider never writes).
fn endpoints(targets: Option<&RRSetRoutingPolicyHealthCheckTargets>) -> Result<Vec<String>, ()> {
    match targets {
        None => Ok(Vec::new()),
        Some(t) if t.internal_load_balancers.is_empty() => Ok(t.external_endpoints.clone()),
        Some(_) => Err(()),
    }
}

/// A client error as a [`ProviderError`] for `operation` (e.g. `changes.create`):
/// 429 and `rateLimitExceeded`/`RESOURCE_EXHAUSTED` are [`ProviderError::Throttled`];
/// 5xx, timeouts and network errors [`ProviderError::Transient`]; anything else Google
/// answered (400, 403, 404, 409, 412) [`ProviderError::Rejected`] with Google's message.
pub fn error(operation: &str, e: &google_cloud_dns_v1::Error) -> ProviderError {
    let operation = operation.to_string();
    let status = e.status();
    let code = e.http_status_code();
    let reasons: Vec<String> = status
        .map(|s| {
            s.details
                .iter()
                .filter_map(|d| match d {
                    StatusDetails::ErrorInfo(info) => Some(info.reason.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let message = match status {
        Some(s) if !s.message.is_empty() => {
            let reasons = if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            };
            format!(
                "{} {}{reasons}",
                code.map(|c| c.to_string()).unwrap_or_default(),
                s.message
            )
            .trim()
            .to_string()
        }
        _ => e.to_string(),
    };
    let throttled = code == Some(429)
        || status.is_some_and(|s| s.code == Code::ResourceExhausted)
        || reasons
            .iter()
            .any(|r| r == "rateLimitExceeded" || r == "userRateLimitExceeded");
    if throttled {
        let retry_after = e
            .http_headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(std::time::Duration::from_secs);
        return ProviderError::Throttled {
            operation,
            message,
            retry_after,
        };
    }
    let transient = match code {
        Some(c) => c >= 500,
        None => {
            e.is_timeout()
                || e.is_io()
                || e.is_connect()
                || e.is_transport()
                || status.is_some_and(|s| {
                    matches!(
                        s.code,
                        Code::Unavailable | Code::DeadlineExceeded | Code::Internal
                    )
                })
        }
    };
    if transient {
        ProviderError::Transient { operation, message }
    } else {
        ProviderError::Rejected { operation, message }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_survives_a_round_trip() {
        let geo = vec![GeoItem {
            location: "europe-west3".into(),
            rrdatas: vec![],
            health_checked: vec!["192.0.2.1".into()],
        }];
        let shapes = [
            Data::Plain(vec!["192.0.2.1".into()]),
            Data::Geo {
                items: geo.clone(),
                health_check: Some("https://hc".into()),
            },
            Data::Wrr {
                items: vec![WrrItem {
                    weight: 3.0,
                    rrdatas: vec!["192.0.2.1".into()],
                    health_checked: vec![],
                }],
                health_check: None,
            },
            Data::PrimaryBackup {
                primary: vec!["192.0.2.9".into()],
                backup: geo,
                trickle_traffic: 0.0,
                health_check: Some("https://hc".into()),
            },
        ];
        for data in shapes {
            let rrset = Rrset {
                name: "shop.example.com".into(),
                type_: "A".into(),
                ttl: 30,
                data,
            };
            assert_eq!(from_model(&to_model(&rrset)), rrset);
        }
    }

    #[test]
    fn order_and_signatures_do_not_make_a_difference() {
        let mut listed = to_model(&Rrset {
            name: "rr.example.com".into(),
            type_: "A".into(),
            ttl: 30,
            data: Data::Plain(vec!["192.0.2.1".into(), "192.0.2.2".into()]),
        });
        let want = from_model(&listed);
        listed.rrdatas.reverse();
        listed.signature_rrdatas = vec!["A 8 3 30 ...".into()];
        assert_eq!(from_model(&listed), want);
        listed.routing_policy = Some(RRSetRoutingPolicy::new());
        assert!(matches!(from_model(&listed).data, Data::Other(_)));
    }
}
