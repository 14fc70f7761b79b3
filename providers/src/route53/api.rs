//! The Route53 requests this provider makes, one function per request, each returning a
//! classified [`ProviderError`] so that the call policy (rate limit, retries with backoff)
//! can wrap every one of them.
//!
//! # Errors
//!
//! `Throttling`, `PriorRequestNotComplete`, `RequestLimitExceeded` and HTTP 429 are
//! [`ProviderError::Throttled`]; a 5xx, a timeout, a connection or a response that could
//! not be read are [`ProviderError::Transient`]; everything else the service says
//! (`InvalidChangeBatch`, `InvalidInput`, `AccessDenied`, `NoSuchHostedZone`,
//! `HealthCheckInUse`, …) is [`ProviderError::Rejected`] with the service's code and
//! message. No credentials at all, or a credentials configuration that cannot work, is
//! [`ProviderError::Misconfigured`]: one line, not retried (another try finds the same).
//! The SDK's own retries are off (see [`super::client_config`]): a retry is the call
//! policy's decision, counted and logged in one place.

use crate::publish::ProviderError;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_route53::Client;
use aws_sdk_route53::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_route53::types::{
    Change, ChangeAction, ChangeBatch, HealthCheck, ResourceRecordSet, RrType, TagResourceType,
};

use super::health::{self, Wanted};
use super::records::Rrset;

/// Classifies an SDK error of `operation`.
pub fn classify<E>(operation: &str, err: SdkError<E>) -> ProviderError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    let operation = operation.to_string();
    if let Some(message) = missing_credentials(&err) {
        return ProviderError::Misconfigured { operation, message };
    }
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or_default().to_string();
            let message = match (code.as_str(), e.message()) {
                ("", Some(m)) => m.to_string(),
                (c, Some(m)) => format!("{c}: {m}"),
                (c, None) if !c.is_empty() => c.to_string(),
                _ => format!("HTTP {}", status.unwrap_or_default()),
            };
            if matches!(
                code.as_str(),
                "Throttling"
                    | "ThrottlingException"
                    | "PriorRequestNotComplete"
                    | "RequestLimitExceeded"
            ) || status == Some(429)
            {
                ProviderError::Throttled {
                    operation,
                    message,
                    retry_after: None,
                }
            } else if status.is_some_and(|s| s >= 500) {
                ProviderError::Transient { operation, message }
            } else {
                ProviderError::Rejected { operation, message }
            }
        }
        SdkError::ConstructionFailure(_) => ProviderError::Rejected {
            operation,
            message: DisplayErrorContext(&err).to_string(),
        },
        // Timeouts, connection failures, unreadable responses (and any kind a later SDK
        // adds): worth another try.
        _ => {
            if status == Some(429) {
                ProviderError::Throttled {
                    operation,
                    message: DisplayErrorContext(&err).to_string(),
                    retry_after: None,
                }
            } else {
                ProviderError::Transient {
                    operation,
                    message: DisplayErrorContext(&err).to_string(),
                }
            }
        }
    }
}

/// When `err` comes from the credentials chain finding no credentials (or a
/// configuration it cannot use), a one-line message saying so: the SDK reports it as a
/// dispatch failure, which would otherwise be retried as transient and logged with the
/// SDK's debug dump at every try (issue 23). A provider that timed out or failed (STS, the
/// instance metadata service) stays transient.
fn missing_credentials(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source = Some(err);
    while let Some(error) = source {
        if let Some(credentials) = error.downcast_ref::<CredentialsError>() {
            if !matches!(
                credentials,
                CredentialsError::CredentialsNotLoaded(_)
                    | CredentialsError::InvalidConfiguration(_)
            ) {
                return None;
            }
            let mut message = String::from(
                "no usable AWS credentials (looked in the environment, the shared config and \
                 credentials files, web identity, the ECS and EC2 instance roles)",
            );
            let mut cause = Some(credentials as &(dyn std::error::Error + 'static));
            while let Some(error) = cause {
                message.push_str(": ");
                push_one_line(&mut message, &error.to_string());
                cause = error.source();
            }
            return Some(message);
        }
        source = error.source();
    }
    None
}

/// Appends `text` on one line: the chain lists what it tried on lines of their own
/// (`Attempted:\n  Environment: …\n  Profile: …`), which become `Attempted: Environment:
/// …; Profile: …`.
fn push_one_line(out: &mut String, text: &str) {
    let mut first = true;
    for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
        if !first {
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(line);
        first = false;
    }
}

fn rejected(operation: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::Rejected {
        operation: operation.to_string(),
        message: message.into(),
    }
}

/// The hosted zone's name: lower case, without the trailing dot.
pub async fn hosted_zone_name(client: &Client, zone_id: &str) -> Result<String, ProviderError> {
    let out = client
        .get_hosted_zone()
        .id(zone_id)
        .send()
        .await
        .map_err(|e| classify("GetHostedZone", e))?;
    let zone = out.hosted_zone().ok_or_else(|| {
        rejected(
            "GetHostedZone",
            format!("no hosted zone in the answer for {zone_id}"),
        )
    })?;
    Ok(zone.name().trim_end_matches('.').to_ascii_lowercase())
}

/// Where the next page of `ListResourceRecordSets` starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RrsetCursor {
    pub name: Option<String>,
    pub type_: Option<String>,
    pub identifier: Option<String>,
}

/// One page of the zone's record sets, and where the next starts (`None`: last page).
pub async fn list_rrsets_page(
    client: &Client,
    zone_id: &str,
    from: &RrsetCursor,
) -> Result<(Vec<ResourceRecordSet>, Option<RrsetCursor>), ProviderError> {
    let out = client
        .list_resource_record_sets()
        .hosted_zone_id(zone_id)
        .set_start_record_name(from.name.clone())
        .set_start_record_type(from.type_.as_deref().map(RrType::from))
        .set_start_record_identifier(from.identifier.clone())
        .max_items(300)
        .send()
        .await
        .map_err(|e| classify("ListResourceRecordSets", e))?;
    let next = out.is_truncated().then(|| RrsetCursor {
        name: out.next_record_name().map(str::to_string),
        type_: out.next_record_type().map(|t| t.as_str().to_string()),
        identifier: out.next_record_identifier().map(str::to_string),
    });
    Ok((out.resource_record_sets().to_vec(), next))
}

/// One page of the account's health checks, and the marker of the next.
pub async fn list_health_checks_page(
    client: &Client,
    marker: Option<String>,
) -> Result<(Vec<HealthCheck>, Option<String>), ProviderError> {
    let out = client
        .list_health_checks()
        .set_marker(marker)
        .max_items(1000)
        .send()
        .await
        .map_err(|e| classify("ListHealthChecks", e))?;
    let next = out
        .is_truncated()
        .then(|| out.next_marker().map(str::to_string))
        .flatten();
    Ok((out.health_checks().to_vec(), next))
}

/// Creates the health check `w` with `caller_reference`; returns its id. Route53 returns
/// the existing check for a caller reference it has seen with the same settings, so a
/// retry after a lost answer creates nothing twice.
pub async fn create_health_check(
    client: &Client,
    caller_reference: &str,
    w: &Wanted,
) -> Result<String, ProviderError> {
    let config = health::config(w).map_err(|m| rejected("CreateHealthCheck", m))?;
    let out = client
        .create_health_check()
        .caller_reference(caller_reference)
        .health_check_config(config)
        .send()
        .await
        .map_err(|e| classify("CreateHealthCheck", e))?;
    out.health_check()
        .map(|h| h.id().to_string())
        .ok_or_else(|| rejected("CreateHealthCheck", "no health check in the answer"))
}

/// Tags a health check (`Name`, owner, endpoint).
pub async fn tag_health_check(
    client: &Client,
    id: &str,
    tags: Vec<aws_sdk_route53::types::Tag>,
) -> Result<(), ProviderError> {
    client
        .change_tags_for_resource()
        .resource_type(TagResourceType::Healthcheck)
        .resource_id(id)
        .set_add_tags(Some(tags))
        .send()
        .await
        .map_err(|e| classify("ChangeTagsForResource", e))?;
    Ok(())
}

/// Sets a health check's failure threshold (the one setting we change in place).
pub async fn update_health_check(
    client: &Client,
    id: &str,
    failure_threshold: i32,
) -> Result<(), ProviderError> {
    client
        .update_health_check()
        .health_check_id(id)
        .failure_threshold(failure_threshold)
        .send()
        .await
        .map_err(|e| classify("UpdateHealthCheck", e))?;
    Ok(())
}

/// Deletes a health check.
pub async fn delete_health_check(client: &Client, id: &str) -> Result<(), ProviderError> {
    client
        .delete_health_check()
        .health_check_id(id)
        .send()
        .await
        .map_err(|e| classify("DeleteHealthCheck", e))?;
    Ok(())
}

/// A record change: create or replace (UPSERT), or delete one record set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Upsert,
    Delete,
}

impl Action {
    fn sdk(self) -> ChangeAction {
        match self {
            Action::Upsert => ChangeAction::Upsert,
            Action::Delete => ChangeAction::Delete,
        }
    }
}

/// Applies `changes` as one `ChangeResourceRecordSets` (all or nothing, as Route53 does).
pub async fn change_batch(
    client: &Client,
    zone_id: &str,
    comment: &str,
    changes: &[(Action, Rrset)],
) -> Result<(), ProviderError> {
    const OP: &str = "ChangeResourceRecordSets";
    let mut batch = ChangeBatch::builder().comment(comment);
    for (action, r) in changes {
        let set = r.to_sdk().map_err(|m| rejected(OP, m))?;
        batch = batch.changes(
            Change::builder()
                .action(action.sdk())
                .resource_record_set(set)
                .build()
                .map_err(|e| rejected(OP, e.to_string()))?,
        );
    }
    let batch = batch.build().map_err(|e| rejected(OP, e.to_string()))?;
    client
        .change_resource_record_sets()
        .hosted_zone_id(zone_id)
        .change_batch(batch)
        .send()
        .await
        .map_err(|e| classify(OP, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use aws_config::{BehaviorVersion, Region, SdkConfig};
    use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
    use aws_sdk_route53::config::retry::RetryConfig;

    use super::*;

    /// A credentials chain that fails as `fail` says.
    #[derive(Debug)]
    struct Chain(fn() -> CredentialsError);

    impl ProvideCredentials for Chain {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            future::ProvideCredentials::ready(Err((self.0)()))
        }
    }

    /// `GetHostedZone` with credentials from `chain`. Nothing listens at the endpoint:
    /// the credentials fail before anything is sent.
    async fn get_hosted_zone(chain: Chain) -> ProviderError {
        let sdk = SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(chain))
            .endpoint_url("http://127.0.0.1:9")
            .build();
        let client = Client::from_conf(
            aws_sdk_route53::config::Builder::from(&sdk)
                .retry_config(RetryConfig::disabled())
                .build(),
        );
        hosted_zone_name(&client, "Z1").await.unwrap_err()
    }

    /// Missing credentials were retried six times as transient, each try logging the
    /// SDK's debug dump (issue 23): a configuration error, said in one line, not retried.
    #[tokio::test]
    async fn missing_credentials_are_a_configuration_error() {
        // The words of aws-config's default chain.
        let error = get_hosted_zone(Chain(|| {
            CredentialsError::not_loaded(
                "no credentials found in chain. Attempted:\n  Environment: the credential provider was not enabled: environment variable not set\n  Profile: the credential provider was not enabled\n",
            )
        }))
        .await;
        assert!(
            matches!(error, ProviderError::Misconfigured { .. }),
            "{error:?}"
        );
        assert!(!error.is_retryable());
        let text = error.to_string();
        assert!(
            text.starts_with("GetHostedZone: configuration error: no usable AWS credentials"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "the credential provider was not enabled: no credentials found in chain. Attempted: Environment: the credential provider was not enabled: environment variable not set; Profile: the credential provider was not enabled"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("DispatchFailure"), "{text}");

        let error = get_hosted_zone(Chain(|| {
            CredentialsError::invalid_configuration("profile \"x\" has no region")
        }))
        .await;
        assert!(
            matches!(error, ProviderError::Misconfigured { .. }),
            "{error:?}"
        );

        // A chain that failed (STS or the instance metadata service down) may succeed
        // on another try.
        let error = get_hosted_zone(Chain(|| {
            CredentialsError::provider_error("the instance metadata service did not answer")
        }))
        .await;
        assert!(
            matches!(error, ProviderError::Transient { .. }),
            "{error:?}"
        );
    }
}
