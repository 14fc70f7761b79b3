//! The seam between the hub connection ([`crate::hub`]) and a data plane: a [`Driver`]
//! applies the cluster's plan, reports how it is doing and says when that changed.
//!
//! Implementations: [`crate::standalone::Standalone`] (the agent serves the plan
//! itself) and [`crate::kubernetes::KubernetesDriver`] (the member cluster serves it). The hub loop only ever sees `Arc<dyn Driver>`, so tests drive it with a
//! fake. What does not belong here: protocol handling, persistence, retries.

use async_trait::async_trait;
use fedingress_api::cluster::Provider;
use fedingress_api::plan::{AgentReport, ClusterPlan, RuleError};
use tokio::sync::watch;

/// A data plane that serves one cluster's plan.
///
/// # Guarantees expected of implementations
///
/// - [`Driver::apply`] is idempotent and converges on `plan` as a whole: what the plan
///   no longer holds is removed, what it holds is served, except for the rules it
///   returns as errors (the rest is still applied).
/// - [`Driver::subscribe`]'s value changes whenever a later [`Driver::report`] could
///   differ (health change, apply, load bucket change); the value itself means nothing.
#[async_trait]
pub trait Driver: Send + Sync {
    /// The driver's name as sent in `Hello` (`standalone`, `kubernetes`).
    fn name(&self) -> &'static str;

    /// Rule kinds the driver serves (`TCP`, `UDP`, ...), as sent in `Hello`.
    fn capabilities(&self) -> Vec<String>;

    /// Makes the data plane serve `plan`; returns the rules that could not be applied.
    async fn apply(&self, plan: &ClusterPlan) -> Vec<RuleError>;

    /// Why a part of the plan applied last that is no rule could not be applied (the
    /// pools' VRRP, say: [`crate::vrrp::pools`]), or `None`. The agent Nacks the plan
    /// with it. Default: `None`.
    fn plan_error(&self) -> Option<String> {
        None
    }

    /// How `plan` (the one applied last) is doing right now.
    fn report(&self, plan: &ClusterPlan) -> AgentReport;

    /// A channel whose value changes whenever the report may have changed.
    fn subscribe(&self) -> watch::Receiver<u64>;

    /// SIGTERM, while the hub session is still open: stops what the hub must hear
    /// about before the session closes (anycast routes are withdrawn), so that the
    /// agent's last report says so. [`Driver::shutdown`] follows. Default: nothing.
    async fn begin_shutdown(&self) {}

    /// Stops serving: closes listeners and drains connections.
    async fn shutdown(&self);

    /// The data plane's metrics in the Prometheus text format (empty when it has none).
    fn metrics(&self) -> String {
        String::new()
    }

    /// Whether the driver is shutting down (readiness turns false).
    fn is_draining(&self) -> bool {
        false
    }

    /// The hub said which provider the cluster runs on (`Welcome`). Returns true when
    /// that changed [`Driver::capabilities`]: the agent then reconnects, so that its
    /// `Hello` tells the hub what it can serve.
    fn set_provider(&self, _provider: Option<Provider>) -> bool {
        false
    }

    /// The hub said whether the cluster is cordoned (`Welcome`; a cordon change ends the
    /// session, so each one comes with a new `Welcome`). The last value stands while the
    /// hub is unreachable. Anycast routes are withdrawn while it is true.
    fn set_cordoned(&self, _cordoned: bool) {}

    /// Whether the data plane can do its work; `Err` says what is wrong (the member
    /// cluster's API refuses the agent, say). `/readyz` fails with it.
    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }
}
