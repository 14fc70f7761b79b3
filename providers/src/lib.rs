//! fedingress-providers: the cloud DNS services the hub publishes to, each behind
//! [`crate::publish::DnsProvider`].
//!
//! - [`config`]: `dns.providers` in the apiserver's config, typed and checked;
//! - [`route53`]: Amazon Route53 through `aws-sdk-route53` (the standard credential chain);
//! - `clouddns`: Google Cloud DNS through `google-cloud-dns-v1`.
//!
//! [`build`] makes the provider a config entry describes.
//!
//! What does not belong here: routing decisions and the embedded DNS server
//! (`fedingress-dns`), scheduling syncs and writing status (the hub's `providers`).

pub mod clouddns;
pub mod config;
pub mod publish;
pub mod regions;
pub mod route53;

use std::sync::Arc;

use crate::publish::{DnsProvider, ProviderError};

use crate::config::{ProviderConfig, ProviderType};

/// The provider `config` describes, connected: Route53 with the standard AWS credential
/// chain reads its hosted zone (`GetHostedZone`), Cloud DNS with Application Default
/// Credentials (anonymous for a plain `http://` endpoint) reads its managed zone. Both
/// need the zone's name to know which names they manage.
///
/// # Errors
/// The zone cannot be read (unknown, no permission, the cloud unreachable after the
/// call policy's retries), or the client cannot be built.
pub async fn build(config: &ProviderConfig) -> Result<Arc<dyn DnsProvider>, ProviderError> {
    Ok(match config.type_ {
        ProviderType::Route53 => Arc::new(route53::Route53Provider::from_env(config).await?),
        ProviderType::CloudDns => Arc::new(
            clouddns::CloudDnsProvider::connect(config, clouddns::Auth::for_config(config)).await?,
        ),
    })
}
