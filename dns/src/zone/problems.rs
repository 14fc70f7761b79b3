//! [`Problem`]: why an ingress's DNS name, or a zone, is not (fully) served; the API
//! server reports it as `DNSReady=False`.
//!
//! What does not belong here: finding problems (see `build`), checking the zone config
//! before a build (see `config`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why (part of) an ingress's DNS name is not served. The API server reports it as
/// `DNSReady=False`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// `namespace/name` of the FederatedIngress (empty for zone problems).
    pub ingress: String,
    /// The name concerned (the ingress's dnsName, or a zone).
    pub dns_name: String,
    /// For people, e.g. `dnsName shop.example.com is outside every configured zone`.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ingress.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.ingress, self.message)
        }
    }
}
