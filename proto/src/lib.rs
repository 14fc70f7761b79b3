//! fedingress-proto: the agent protocol (`fedingress/v1/agent.proto`).
//!
//! Entry points: [`AgentToHub`] and [`HubToAgent`], the protocol's messages as domain
//! types built on `fedingress_api::plan`, and [`convert`], the one module that turns
//! them into generated protobuf types and back (an invalid message is a
//! [`convert::ConvertError`], which becomes gRPC `InvalidArgument`). The generated code
//! is in [`pb`], checked in (no protoc needed to build; `tests/bootstrap.rs`
//! regenerates it and fails on drift); outside this crate only the tonic client/server
//! plumbing in `pb` is used.
//!
//! What does not belong here: connection handling, retries, placement, data planes.

pub mod convert;

/// Generated code (prost + tonic). Domain code uses [`AgentToHub`]/[`HubToAgent`].
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    include!("generated/fedingress.v1.rs");
}

use fedingress_api::cluster::Provider;
use fedingress_api::plan::{AgentReport, ClusterPlan, PlanDelta, RuleError};

/// What an agent says when it connects. `Debug` leaves the token out.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hello {
    pub cluster: String,
    pub token: String,
    pub agent_version: String,
    pub driver: String,
    /// Rule kinds the driver serves (see `fedingress_api::capability`); empty: not said.
    pub capabilities: Vec<String>,
    /// Version and digest of the plan applied last (0 and "" when none).
    pub applied_version: u64,
    pub applied_digest: String,
    /// The member name ("" from agents before members; the hub names it after the
    /// cluster).
    pub member: String,
    /// The member's labels, which IngressPools select.
    pub member_labels: std::collections::BTreeMap<String, String>,
    /// The member's real address, which its VRRP peers reach.
    pub member_address: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("cluster", &self.cluster)
            .field("token", &Redacted(&self.token))
            .field("agent_version", &self.agent_version)
            .field("driver", &self.driver)
            .field("capabilities", &self.capabilities)
            .field("applied_version", &self.applied_version)
            .field("applied_digest", &self.applied_digest)
            .field("member", &self.member)
            .field("member_labels", &self.member_labels)
            .field("member_address", &self.member_address)
            .finish()
    }
}

/// Shows whether a secret is set, never the secret.
pub struct Redacted<'a>(pub &'a str);

impl std::fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str("<redacted>")
        }
    }
}

/// `Join`: a join token and a CSR for a key the agent generated. `Debug` leaves the
/// token out.
#[derive(Clone, PartialEq, Eq)]
pub struct JoinRequest {
    pub cluster: String,
    pub join_token: String,
    pub csr_pem: String,
    /// The member joining ("" for a cluster's only agent of old).
    pub member: String,
}

impl std::fmt::Debug for JoinRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinRequest")
            .field("cluster", &self.cluster)
            .field("join_token", &Redacted(&self.join_token))
            .field("csr_pem", &self.csr_pem)
            .field("member", &self.member)
            .finish()
    }
}

/// `Renew`: a CSR for a fresh key, sent with the current client certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenewRequest {
    pub cluster: String,
    pub csr_pem: String,
    /// The member renewing ("" for a cluster's only agent of old).
    pub member: String,
}

/// The answer to `Join` and `Renew`: a client certificate (no key: the agent keeps it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedCertificate {
    pub certificate_pem: String,
    pub ca_pem: String,
    /// notAfter, Unix seconds.
    pub not_after_unix: i64,
    /// SHA-256 of the DER, hex.
    pub fingerprint: String,
}

/// Messages from an agent to the hub.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentToHub {
    Hello(Hello),
    /// The plan of this version is applied.
    Ack {
        version: u64,
    },
    /// The plan of this version is applied except for `rule_errors`, or not at all
    /// (`error`).
    Nack {
        version: u64,
        error: String,
        rule_errors: Vec<RuleError>,
    },
    Report(AgentReport),
    Heartbeat,
}

/// Messages from the hub to an agent.
#[derive(Clone, Debug, PartialEq)]
pub enum HubToAgent {
    Welcome {
        heartbeat_interval_ms: u32,
        lease_ms: u32,
        /// The Cluster's `spec.provider`; `None` when the hub does not know it, or sent a
        /// value this build does not know (forward compatible: a newer hub may know more
        /// clouds). A change of the Cluster's provider ends the session, so the agent
        /// learns the new value on its next connection.
        provider: Option<Provider>,
        /// The Cluster's `spec.cordoned` when the session started (a change ends the
        /// session, like a provider change): a cordoned cluster withdraws its anycast
        /// routes.
        cordoned: bool,
    },
    /// The whole plan.
    Snapshot {
        version: u64,
        digest: String,
        plan: ClusterPlan,
    },
    /// The change from the plan of `base_version` to the plan of `version`.
    Delta {
        version: u64,
        digest: String,
        base_version: u64,
        delta: PlanDelta,
    },
    Ping,
}
