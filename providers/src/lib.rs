//! fedingress-providers: the cloud DNS services the hub publishes to, each behind
//! [`fedingress_dns::provider::DnsProvider`].
//!
//! - [`config`]: `dns.providers` in the apiserver's config, typed and checked;
//! - [`route53`]: Amazon Route53 through `aws-sdk-route53` (the standard credential chain);
//! - `clouddns`: Google Cloud DNS through `google-cloud-dns-v1`.
//!
//! What does not belong here: deriving what to publish, diffing and retrying
//! ([`fedingress_dns::provider`]), scheduling syncs and writing status (the apiserver).

pub mod clouddns;
pub mod config;
pub mod route53;
