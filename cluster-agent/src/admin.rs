//! The agent's admin HTTP endpoint: `GET /healthz` (the process is alive: always
//! 200 `ok`), `GET /readyz` (200 once a plan, persisted or from the hub, is applied; 503
//! before, while the driver reports a problem — the member cluster's API refusing the
//! agent, say — and again while the data plane drains on shutdown) and `GET /metrics` (the
//! data plane's counters and the applied plan version, Prometheus text format 0.0.4).
//! [`router`] and [`router_with_driver`] are used by `main` and by tests alike;
//! [`with_components`] adds parts of the agent besides the driver (the keepalived it
//! runs) whose trouble makes it unready and whose metrics it shows.
//!
//! What does not belong here: anything that changes the agent (the admin endpoint is
//! read-only).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use crate::driver::Driver;
use crate::hub::Applied;

#[derive(Clone)]
struct Admin {
    applied: watch::Receiver<Option<Applied>>,
    driver: Option<Arc<dyn Driver>>,
    role: Option<watch::Receiver<Role>>,
    components: Vec<Arc<dyn Component>>,
}

/// A part of the agent besides the driver: `/readyz` fails while it says so, and
/// `/metrics` shows its metrics.
pub trait Component: Send + Sync {
    /// `Err` says what is wrong (one line).
    fn readiness(&self) -> Result<(), String>;

    /// Metrics in the Prometheus text format, each line ending in `\n`.
    fn metrics(&self) -> String;
}

/// An agent replica's part in leader election (the kubernetes driver's replicas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Applies the plan and holds the hub session.
    Leader,
    /// Waits to take over; `holder` leads as last observed.
    Standby { holder: Option<String> },
}

/// The admin routes; readiness follows `applied` ([`crate::hub::Agent::applied`]).
pub fn router(applied: watch::Receiver<Option<Applied>>) -> Router {
    app(Admin {
        applied,
        driver: None,
        role: None,
        components: Vec::new(),
    })
}

/// The admin routes with the driver's drain state and metrics.
pub fn router_with_driver(
    applied: watch::Receiver<Option<Applied>>,
    driver: Arc<dyn Driver>,
) -> Router {
    app(Admin {
        applied,
        driver: Some(driver),
        role: None,
        components: Vec::new(),
    })
}

/// The admin routes of a replica taking part in leader election: a standby replica is
/// ready (it is healthy and waits to take over), so rollouts and disruption budgets
/// count it; its `/readyz` says who leads.
pub fn router_with_role(
    applied: watch::Receiver<Option<Applied>>,
    driver: Arc<dyn Driver>,
    role: watch::Receiver<Role>,
) -> Router {
    app(Admin {
        applied,
        driver: Some(driver),
        role: Some(role),
        components: Vec::new(),
    })
}

/// The admin routes of [`router_with_driver`] (or [`router_with_role`] with `role`),
/// with `components`.
pub fn with_components(
    applied: watch::Receiver<Option<Applied>>,
    driver: Arc<dyn Driver>,
    role: Option<watch::Receiver<Role>>,
    components: Vec<Arc<dyn Component>>,
) -> Router {
    app(Admin {
        applied,
        driver: Some(driver),
        role,
        components,
    })
}

fn app(admin: Admin) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(admin)
}

async fn readyz(State(admin): State<Admin>) -> (StatusCode, String) {
    if admin.driver.as_ref().is_some_and(|d| d.is_draining()) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "draining: the agent is shutting down\n".to_owned(),
        );
    }
    if let Some(Role::Standby { holder }) = admin.role.as_ref().map(|r| r.borrow().clone()) {
        return (
            StatusCode::OK,
            format!(
                "standby: {} leads\n",
                holder.as_deref().unwrap_or("no replica yet")
            ),
        );
    }
    if let Some(Err(problem)) = admin.driver.as_ref().map(|d| d.readiness()) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {problem}\n"),
        );
    }
    if let Some(Err(problem)) = admin
        .components
        .iter()
        .map(|c| c.readiness())
        .find(Result::is_err)
    {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {problem}\n"),
        );
    }
    match admin.applied.borrow().as_ref() {
        Some(applied) => (
            StatusCode::OK,
            format!("ok: plan version {}\n", applied.version),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no plan applied yet\n".to_owned(),
        ),
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    let mut text = String::new();
    let (version, errors) = admin
        .applied
        .borrow()
        .as_ref()
        .map_or((0, 0), |a| (a.version, a.rule_errors.len()));
    let _ = writeln!(
        text,
        "# HELP fedingress_agent_plan_version Version of the applied plan (0: none yet).\n\
         # TYPE fedingress_agent_plan_version gauge\n\
         fedingress_agent_plan_version {version}\n\
         # HELP fedingress_agent_rule_errors Rules of the applied plan that are not served.\n\
         # TYPE fedingress_agent_rule_errors gauge\n\
         fedingress_agent_rule_errors {errors}"
    );
    if let Some(driver) = &admin.driver {
        text.push_str(&driver.metrics());
    }
    for component in &admin.components {
        text.push_str(&component.metrics());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get_text(app: &Router, path: &str) -> (StatusCode, String) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn ready_once_a_plan_is_applied() {
        let (tx, rx) = watch::channel(None);
        let app = router(rx);
        assert_eq!(get_text(&app, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get_text(&app, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        tx.send_replace(Some(Applied {
            version: 3,
            digest: String::new(),
            rule_errors: Vec::new(),
        }));
        assert_eq!(get_text(&app, "/readyz").await.0, StatusCode::OK);
        assert_eq!(get_text(&app, "/nope").await.0, StatusCode::NOT_FOUND);
        let (status, text) = get_text(&app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("fedingress_agent_plan_version 3\n"), "{text}");
    }
}
