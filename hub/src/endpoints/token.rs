//! The Cluster `token` subresource: POST issues a token (returned once; with
//! `?type=join[&ttlSeconds=N]` a single-use join token for `fedctl join`'s certificate
//! flow), GET lists every credential (tokens, join tokens, client certificates by
//! fingerprint), DELETE `token/{id}` revokes one (and ends the session it
//! authenticated).

use std::sync::Arc;

use axum::response::Response;
use fedingress_api::{Cluster, Resource, Time};
use http::StatusCode;
use serde_json::{Value, json};

use crate::tokens::{CredentialSummary, IssueQuery, TokenStore};
use fedingress_apiserver::auth::User;
use fedingress_apiserver::endpoints::extensions::{Served, Subresource, SubresourceRequest};
use fedingress_apiserver::endpoints::json_response;
use fedingress_apiserver::status::ApiError;

/// The `token` subresource, served from `tokens`.
pub fn subresource(tokens: TokenStore) -> Subresource {
    let tokens = Arc::new(tokens);
    Subresource::new(
        fedingress_api::GROUP,
        Cluster::PLURAL,
        "token",
        move |request| {
            let tokens = tokens.clone();
            async move { serve(&tokens, request).await }
        },
    )
    .cluster_scoped()
    .named()
    .discovered(json!({
        "name": "clusters/token",
        "singularName": "",
        "namespaced": false,
        "kind": "ClusterToken",
        "verbs": ["create", "get", "delete"],
    }))
}

async fn serve(tokens: &TokenStore, request: SubresourceRequest) -> Served {
    let SubresourceRequest {
        state,
        user,
        target,
        method,
        uri,
    } = request;
    let cluster = target.name.clone().unwrap_or_default();
    let verb = match (method.as_str(), target.subname.is_some()) {
        ("POST", false) => "create",
        ("GET", false) => "list",
        ("DELETE", true) => "delete",
        (m, _) => {
            return Served {
                verb: "",
                result: Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                ))),
            };
        }
    };
    let result = async {
        fedingress_apiserver::auth::authorize(
            &state.authorizer,
            &user.resource_attributes(
                verb,
                fedingress_api::GROUP,
                Cluster::PLURAL,
                "token",
                "",
                &cluster,
            ),
        )?;
        let object = state.registry.get::<Cluster>(None, &cluster).await?;
        let uid = object.metadata.uid.clone().unwrap_or_default();
        match verb {
            "create" => issue(tokens, &user, &cluster, &uid, uri.query()).await,
            "list" => list(tokens, &cluster).await,
            _ => {
                let id = target.subname.clone().unwrap_or_default();
                revoke(tokens, &user, &cluster, &id).await
            }
        }
    }
    .await;
    Served { verb, result }
}

/// A credential as the API shows it (never the secret).
fn token_object(cluster: &str, c: &CredentialSummary) -> Value {
    let mut body = json!({
        "kind": "ClusterToken",
        "apiVersion": fedingress_api::API_VERSION,
        "metadata": {"name": c.id, "creationTimestamp": c.created_at},
        "cluster": cluster,
        "type": c.kind,
    });
    if let Some(expires) = &c.expires_at {
        body["expirationTimestamp"] = json!(expires);
    }
    body
}

/// POST: a token or a join token, returned once.
async fn issue(
    tokens: &TokenStore,
    user: &User,
    cluster: &str,
    uid: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let query = IssueQuery::parse(query, tokens.join_ttl).map_err(ApiError::bad_request)?;
    let now = Time(chrono::Utc::now());
    let (summary, token) = match query {
        IssueQuery::Token => {
            let (record, token) = tokens.issue(cluster, uid, now).await?;
            tracing::info!(cluster, token_id = %record.id, user = %user.name, "agent token issued");
            (CredentialSummary::token(&record), token)
        }
        IssueQuery::Join { ttl } => {
            let (record, token) = tokens.issue_join(cluster, uid, ttl, now).await?;
            tracing::info!(cluster, token_id = %record.id, user = %user.name, expires = %record.expires_at.0, "join token issued");
            (CredentialSummary::join(&record), token)
        }
    };
    let mut body = token_object(cluster, &summary);
    body["token"] = json!(token);
    Ok(json_response(StatusCode::CREATED, &body))
}

/// GET: every credential of the cluster.
async fn list(tokens: &TokenStore, cluster: &str) -> Result<Response, ApiError> {
    let records = tokens.list_all(cluster).await?;
    let body = json!({
        "kind": "ClusterTokenList",
        "apiVersion": fedingress_api::API_VERSION,
        "metadata": {},
        "items": records.iter().map(|c| token_object(cluster, c)).collect::<Vec<_>>(),
    });
    Ok(json_response(StatusCode::OK, &body))
}

/// DELETE `token/{id}`: revokes one credential.
async fn revoke(
    tokens: &TokenStore,
    user: &User,
    cluster: &str,
    id: &str,
) -> Result<Response, ApiError> {
    tokens.revoke(cluster, id).await?;
    tracing::info!(cluster, credential = %id, user = %user.name, "agent credential revoked");
    Ok(json_response(
        StatusCode::OK,
        &fedingress_apiserver::status::success(&format!(
            "credential {id} of cluster {cluster} revoked"
        )),
    ))
}
