//! The federation-apiserver's REST API as fedctl uses it: the Cluster and
//! FederatedIngress resources, the Cluster `token` subresource, core/v1 Events and the
//! FederatedIngress `explain` subresource.
//!
//! Answers are JSON values: `-o json|yaml` prints them as the server sent them, tables
//! decode them into the `fedingress-api` types. Failures are [`ApiError`]s that say in
//! one line what went wrong: the server's `Status` message, or why the server could not
//! be reached.

use std::time::Duration;

use anyhow::Context as _;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::kubeconfig::Connection;

/// Path prefix of the fedingress.io group.
pub const GROUP_PATH: &str = "/apis/fedingress.io/v1alpha1";

/// A failed request.
#[derive(Debug)]
pub enum ApiError {
    /// No answer: connection refused, DNS, TLS, timeout.
    Unreachable { server: String, cause: String },
    /// The server answered with an error `Status`.
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// The answer was not what the API promises.
    Decode { what: String, cause: String },
}

impl std::error::Error for ApiError {}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Unreachable { server, cause } => {
                write!(
                    f,
                    "cannot reach the federation-apiserver at {server}: {cause}"
                )
            }
            ApiError::Status {
                code: 401, message, ..
            } => write!(
                f,
                "the federation-apiserver refused the kubeconfig's credentials (401 Unauthorized): {message}"
            ),
            ApiError::Status { message, .. } => f.write_str(message),
            ApiError::Decode { what, cause } => write!(f, "unexpected answer to {what}: {cause}"),
        }
    }
}

impl ApiError {
    /// Whether the server said NotFound.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Status { code: 404, .. })
    }

    /// Whether the server said AlreadyExists.
    pub fn is_already_exists(&self) -> bool {
        matches!(self, ApiError::Status { code: 409, reason, .. } if reason == "AlreadyExists")
    }
}

/// Whether a bearer token may be sent to `server`: over https, or over http to
/// `localhost` or a loopback IP (the dev federation).
pub fn keeps_token_private(server: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(server) else {
        // Not a URL: the request fails later with that error, and sends nothing.
        return true;
    };
    if url.scheme() == "https" {
        return true;
    }
    let host = url.host_str().unwrap_or_default();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    url.scheme() == "http"
        && (host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()))
}

/// A REST client for one federation-apiserver.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    server: String,
    token: Option<String>,
}

impl Api {
    /// A client for the kubeconfig's server and credentials.
    ///
    /// # Errors
    /// A token with a plain `http://` server that is not on loopback (the token would
    /// cross the network in the clear), or a certificate authority that is not PEM.
    pub fn new(connection: &Connection) -> anyhow::Result<Self> {
        if connection.token.is_some() && !keeps_token_private(&connection.server) {
            anyhow::bail!(
                "refusing to send the kubeconfig's token to {} over plain http:// (not loopback): \
                 use the server's https:// address with its certificate-authority",
                connection.server
            );
        }
        let mut builder = reqwest::Client::builder()
            // A redirect must not carry the token to another scheme or host.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("fedctl/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &connection.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .context("the kubeconfig's certificate authority is not PEM")?;
            builder = builder.tls_certs_only(certs);
        }
        if connection.insecure_skip_tls_verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        Ok(Self {
            http: builder.build().context("building the HTTP client")?,
            server: connection.server.clone(),
            token: connection.token.clone(),
        })
    }

    /// The server's base URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<Value, ApiError> {
        let text = format!("{}{path}", self.server);
        let parsed = if query.is_empty() {
            reqwest::Url::parse(&text)
        } else {
            reqwest::Url::parse_with_params(&text, query)
        };
        let url = parsed.map_err(|e| ApiError::Unreachable {
            server: self.server.clone(),
            cause: format!("invalid URL {text:?}: {e}"),
        })?;
        let mut request = self
            .http
            .request(method.clone(), url)
            .header("Accept", "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some((content_type, bytes)) = body {
            request = request.header("Content-Type", content_type).body(bytes);
        }
        let response = request.send().await.map_err(|e| ApiError::Unreachable {
            server: self.server.clone(),
            cause: root_cause(&e),
        })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| ApiError::Unreachable {
            server: self.server.clone(),
            cause: root_cause(&e),
        })?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&bytes).trim().to_string())
            })
        };
        if status.is_success() {
            return Ok(value);
        }
        Err(status_error(status, &value, &method, path))
    }

    /// GET a JSON document.
    pub async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, ApiError> {
        self.send(Method::GET, path, query, None).await
    }

    /// POST a JSON document.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ApiError> {
        self.send(
            Method::POST,
            path,
            &[],
            Some(("application/json", body.to_string().into_bytes())),
        )
        .await
    }

    /// POST with no body (token issue).
    pub async fn post_empty(&self, path: &str) -> Result<Value, ApiError> {
        self.send(Method::POST, path, &[], None).await
    }

    /// PATCH with a JSON merge patch.
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> Result<Value, ApiError> {
        self.send(
            Method::PATCH,
            path,
            &[],
            Some((
                "application/merge-patch+json",
                patch.to_string().into_bytes(),
            )),
        )
        .await
    }

    /// DELETE.
    pub async fn delete(&self, path: &str) -> Result<Value, ApiError> {
        self.send(Method::DELETE, path, &[], None).await
    }

    /// GET and decode into `T`.
    pub async fn get_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(T, Value), ApiError> {
        let value = self.get(path, query).await?;
        let typed = decode(&value, path)?;
        Ok((typed, value))
    }
}

/// Decodes an answer into a typed value.
pub fn decode<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> Result<T, ApiError> {
    serde_json::from_value(value.clone()).map_err(|e| ApiError::Decode {
        what: what.to_string(),
        cause: e.to_string(),
    })
}

/// The path of one Cluster, or of all.
pub fn cluster_path(name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{GROUP_PATH}/clusters/{name}"),
        None => format!("{GROUP_PATH}/clusters"),
    }
}

/// The path of one FederatedIngress, of a namespace's, or (no namespace) of all.
pub fn ingress_path(namespace: Option<&str>, name: Option<&str>) -> String {
    match (namespace, name) {
        (Some(ns), Some(name)) => format!("{GROUP_PATH}/namespaces/{ns}/federatedingresses/{name}"),
        (Some(ns), None) => format!("{GROUP_PATH}/namespaces/{ns}/federatedingresses"),
        (None, _) => format!("{GROUP_PATH}/federatedingresses"),
    }
}

/// The `token` subresource of a Cluster (and one token by id).
pub fn token_path(cluster: &str, id: Option<&str>) -> String {
    match id {
        Some(id) => format!("{GROUP_PATH}/clusters/{cluster}/token/{id}"),
        None => format!("{GROUP_PATH}/clusters/{cluster}/token"),
    }
}

/// The core/v1 Events of a namespace.
pub fn events_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/events")
}

fn status_error(status: StatusCode, body: &Value, method: &Method, path: &str) -> ApiError {
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| body.as_str().map(str::to_string))
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| format!("{method} {path}: {status}"));
    let reason = body
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    ApiError::Status {
        code: status.as_u16(),
        reason,
        message: message.replace('\n', " "),
    }
}

/// The innermost cause of a transport error, as a short phrase ("Connection refused").
fn root_cause(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out".into();
    }
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_go_over_https_or_to_loopback_only() {
        for ok in [
            "https://hub.example:6443",
            "http://127.0.0.1:6443",
            "http://127.9.9.9:1",
            "http://[::1]:6443",
            "http://localhost:6443",
        ] {
            assert!(keeps_token_private(ok), "{ok}");
        }
        for bad in [
            "http://hub.example:6443",
            "http://10.0.0.1:6443",
            "http://[2001:db8::1]:6443",
        ] {
            assert!(!keeps_token_private(bad), "{bad}");
        }
    }
}
