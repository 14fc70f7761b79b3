//! The agent's admin HTTP endpoint: `GET /healthz` (the process is alive: always
//! 200 `ok`) and `GET /readyz` (200 once a plan, persisted or from the hub, is applied;
//! 503 before). [`router`] is used by `main` and by tests alike.
//!
//! What does not belong here: anything that changes the agent (the admin endpoint is
//! read-only), metrics of the data plane (they travel to the hub in reports).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;

use crate::hub::Applied;

/// The admin routes; readiness follows `applied` ([`crate::hub::Agent::applied`]).
pub fn router(applied: watch::Receiver<Option<Applied>>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(applied)
}

async fn readyz(State(applied): State<watch::Receiver<Option<Applied>>>) -> (StatusCode, String) {
    match applied.borrow().as_ref() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn status(app: &Router, path: &str) -> StatusCode {
        let request = Request::get(path).body(Body::empty()).unwrap();
        app.clone().oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn ready_once_a_plan_is_applied() {
        let (tx, rx) = watch::channel(None);
        let app = router(rx);
        assert_eq!(status(&app, "/healthz").await, StatusCode::OK);
        assert_eq!(
            status(&app, "/readyz").await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        tx.send_replace(Some(Applied {
            version: 3,
            digest: String::new(),
            rule_errors: Vec::new(),
        }));
        assert_eq!(status(&app, "/readyz").await, StatusCode::OK);
        assert_eq!(status(&app, "/nope").await, StatusCode::NOT_FOUND);
    }
}
