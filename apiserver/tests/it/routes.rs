//! The router's answers that clients see beyond the verbs: unknown paths, methods a
//! route does not serve, trailing slashes, and what bypasses authentication.

use std::net::SocketAddr;

use fedingress_apiserver::endpoints::Peer;
use http::{Method, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use crate::lists::App;

/// The status code and the Status message of a request.
async fn answer(app: &App, method: Method, uri: &str) -> (StatusCode, String) {
    let (code, body) = app.call(method, uri, None).await;
    (
        code,
        body["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn unknown_paths_and_methods_are_404_naming_the_path() {
    let app = App::start().await;
    let not_found = |path: &str| {
        (
            StatusCode::NOT_FOUND,
            format!("the server could not find the requested resource ({path})"),
        )
    };
    assert_eq!(
        answer(&app, Method::GET, "/nope/").await,
        not_found("/nope")
    );
    assert_eq!(answer(&app, Method::GET, "/").await, not_found("/"));
    // The documents answer GET only (HEAD too is an unknown path, never axum's 405).
    assert_eq!(answer(&app, Method::POST, "/api").await, not_found("/api"));
    assert_eq!(
        answer(&app, Method::HEAD, "/apis").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        answer(&app, Method::PUT, "/metrics").await,
        not_found("/metrics")
    );
    // A malformed object path names the part below the group-version.
    assert_eq!(
        answer(
            &app,
            Method::GET,
            "/apis/fedingress.io/v1alpha1/namespaces/default/a/b/c/d"
        )
        .await,
        not_found("namespaces/default/a/b/c/d")
    );
    assert_eq!(
        answer(&app, Method::GET, "/apis/fedingress.io/v1alpha1/things").await,
        not_found("/apis/fedingress.io/v1alpha1/things")
    );
    // A kind on the wrong scope names the path as sent.
    assert_eq!(
        answer(
            &app,
            Method::GET,
            "/apis/fedingress.io/v1alpha1/federatedingresses/a/"
        )
        .await,
        not_found("/apis/fedingress.io/v1alpha1/federatedingresses/a/")
    );
    let (code, message) = answer(
        &app,
        Method::POST,
        "/apis/fedingress.io/v1alpha1/clusters/a",
    )
    .await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        message,
        "the server does not allow this method on the requested resource (POST)"
    );
    let (code, message) = answer(
        &app,
        Method::GET,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    )
    .await;
    assert_eq!(
        (code, message.as_str()),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "only POST (create) is served"
        )
    );
}

#[tokio::test]
async fn trailing_slashes_and_the_health_routes() {
    let app = App::start().await;
    let (code, body) = app.call(Method::GET, "/api/v1/", None).await;
    assert_eq!(
        (code, body["kind"].as_str()),
        (StatusCode::OK, Some("APIResourceList"))
    );
    let (code, body) = app
        .call(Method::GET, "/apis/fedingress.io/v1alpha1/clusters/", None)
        .await;
    assert_eq!(
        (code, body["kind"].as_str()),
        (StatusCode::OK, Some("ClusterList"))
    );
    let (code, body) = app.call(Method::POST, "/version/", None).await;
    assert_eq!((code, body["major"].as_str()), (StatusCode::OK, Some("1")));
}

#[tokio::test]
async fn only_the_health_routes_and_version_bypass_authentication() {
    let app = App::start().await;
    let remote: SocketAddr = "192.0.2.1:1".parse().unwrap();
    for (path, code) in [
        ("/livez", StatusCode::OK),
        ("/readyz?verbose", StatusCode::OK),
        ("/version", StatusCode::OK),
        ("/api", StatusCode::UNAUTHORIZED),
        ("/metrics", StatusCode::UNAUTHORIZED),
        ("/nope", StatusCode::UNAUTHORIZED),
        (
            "/apis/fedingress.io/v1alpha1/clusters",
            StatusCode::UNAUTHORIZED,
        ),
    ] {
        let mut request = App::request(Method::GET, path, None::<Value>);
        request.extensions_mut().insert(Peer(remote));
        let response = app.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), code, "{path}");
    }
}
