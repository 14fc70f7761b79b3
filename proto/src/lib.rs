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

/// What an agent says when it connects.
#[derive(Clone, Debug, PartialEq, Eq)]
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
