//! Authentication (bearer tokens from a token file, OIDC ID tokens, anonymous admin in
//! dev mode on loopback), authorization ([`rbac`]: the `rbac.authorization.k8s.io/v1`
//! objects, evaluated from a cache) and the audit log of writes ([`audit`]).
//!
//! The two static groups keep their meaning through bootstrap bindings:
//! `fedingress:admins` → ClusterRole `cluster-admin`, `fedingress:viewers` → `view`.

pub mod audit;
pub mod config;
pub mod escalation;
pub mod oidc;
pub mod rbac;
pub mod review;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use fedingress_api::rbac::{AUTHENTICATED_GROUP, Attributes};

use crate::status::{ApiError, Target};

/// Group whose members may do everything.
pub const ADMINS: &str = "fedingress:admins";
/// Group whose members may get, list and watch.
pub const VIEWERS: &str = "fedingress:viewers";

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl User {
    /// Adds `system:authenticated`, as kube-apiserver does for every authenticated user.
    pub fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }

    fn dev_admin() -> Self {
        Self {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec![ADMINS.into()],
        }
    }
}

impl User {
    /// The authorizer's view of this user doing `verb` on a resource.
    pub fn resource_attributes(
        &self,
        verb: &str,
        api_group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user: self.name.clone(),
            groups: self.groups.clone(),
            verb: verb.into(),
            resource_request: true,
            api_group: api_group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    /// The authorizer's view of this user doing `verb` on a non-resource path.
    pub fn path_attributes(&self, verb: &str, path: &str) -> Attributes {
        Attributes {
            user: self.name.clone(),
            groups: self.groups.clone(),
            verb: verb.into(),
            path: path.into(),
            ..Attributes::default()
        }
    }
}

/// kube-apiserver's 403 text for a denied request (`responsewriters.forbiddenMessage`
/// wrapped by `apierrors.NewForbidden`), with `details` naming the object.
pub fn forbidden(attrs: &Attributes, reason: &str) -> ApiError {
    let what = if !attrs.resource_request {
        format!(
            "User {:?} cannot {} path {:?}",
            attrs.user, attrs.verb, attrs.path
        )
    } else {
        let resource = attrs.combined_resource();
        let scope = if attrs.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", attrs.namespace)
        };
        format!(
            "User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
            attrs.user, attrs.verb, attrs.api_group
        )
    };
    let what = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    if !attrs.resource_request {
        return ApiError::forbidden(format!("forbidden: {what}"), None);
    }
    let qualified = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    let message = if attrs.name.is_empty() {
        format!("{qualified} is forbidden: {what}")
    } else {
        format!("{qualified} {:?} is forbidden: {what}", attrs.name)
    };
    ApiError::forbidden(
        message,
        Some(Target {
            group: static_group(&attrs.api_group),
            kind: attrs.resource.clone(),
            name: attrs.name.clone(),
        }),
    )
}

/// `Target.group` is `&'static str`: the groups we serve.
fn static_group(group: &str) -> &'static str {
    match group {
        fedingress_api::GROUP => fedingress_api::GROUP,
        fedingress_api::rbac::GROUP => fedingress_api::rbac::GROUP,
        _ => "",
    }
}

/// Authorizes `attrs`: `Ok` with the reason, 403 in kube's words, or 503 while the
/// RBAC cache is not loaded.
pub fn authorize(authorizer: &rbac::Authorizer, attrs: &Attributes) -> Result<String, ApiError> {
    match authorizer.authorize(attrs) {
        rbac::Decision::Allow(reason) => Ok(reason),
        rbac::Decision::Deny => Err(forbidden(attrs, "")),
        rbac::Decision::NotReady => Err(ApiError::unavailable(
            "the authorizer has not loaded the RBAC objects from the store yet",
        )),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("reading token file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("token file {path} line {line}: {problem}")]
    Line {
        path: String,
        line: usize,
        problem: String,
    },
}

/// How requests are authenticated. Its `Debug` shows how many tokens it knows, never
/// the tokens.
#[derive(Clone, Default)]
pub struct Authenticator {
    /// Token-file users by the SHA-256 of their token: a lookup compares digests, never
    /// the secret, so its timing tells nothing about a stored token.
    tokens: HashMap<[u8; 32], User>,
    /// Dev mode: requests without a token from a loopback peer are an admin.
    dev: bool,
    /// OIDC ID tokens of one issuer, tried when the token file does not know a token.
    oidc: Option<Arc<oidc::OidcAuthenticator>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.tokens.len())
            .field("dev", &self.dev)
            .field("oidc", &self.oidc)
            .finish()
    }
}

impl Authenticator {
    pub fn new(dev: bool) -> Self {
        Self {
            tokens: HashMap::new(),
            dev,
            oidc: None,
        }
    }

    /// Loads a kube-apiserver style static token file: `token,user,uid,"group1,group2"`.
    pub fn load_token_file(&mut self, path: &Path) -> Result<(), TokenFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: shown.clone(),
            source,
        })?;
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let problem = |problem: &str| TokenFileError::Line {
                path: shown.clone(),
                line: index + 1,
                problem: problem.to_string(),
            };
            let fields = split_csv(line).map_err(&problem)?;
            if fields.len() < 3 {
                return Err(problem("expected token,user,uid[,\"group1,group2\"]"));
            }
            if fields[0].is_empty() || fields[1].is_empty() {
                return Err(problem("token and user must not be empty"));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            // `system:authenticated` added once here, not on every request.
            let user = User {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
            }
            .authenticated();
            if self.tokens.insert(token_digest(&fields[0]), user).is_some() {
                return Err(problem("duplicate token"));
            }
        }
        Ok(())
    }

    /// Accepts the ID tokens of an OIDC issuer too.
    pub fn with_oidc(mut self, oidc: Arc<oidc::OidcAuthenticator>) -> Self {
        self.oidc = Some(oidc);
        self
    }

    /// The OIDC authenticator, to warm its key cache at start.
    pub fn oidc(&self) -> Option<&Arc<oidc::OidcAuthenticator>> {
        self.oidc.as_ref()
    }

    /// Whether any bearer token can be accepted (token file or OIDC).
    pub fn has_authenticator(&self) -> bool {
        !self.tokens.is_empty() || self.oidc.is_some()
    }

    /// The user behind a request, or `None` (401): the token file, then OIDC.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
        peer: Option<SocketAddr>,
    ) -> Option<User> {
        match authorization {
            Some(header) => {
                let token = header.strip_prefix("Bearer ")?.trim();
                if let Some(user) = self.tokens.get(&token_digest(token)) {
                    return Some(user.clone());
                }
                let oidc = self.oidc.as_ref()?;
                match oidc.authenticate(token).await {
                    Ok(user) => user.map(User::authenticated),
                    Err(error) => {
                        tracing::debug!(issuer = oidc.issuer(), %error, "OIDC token refused");
                        None
                    }
                }
            }
            None if self.dev && peer.is_some_and(|p| p.ip().is_loopback()) => {
                Some(User::dev_admin().authenticated())
            }
            None => None,
        }
    }
}

fn token_digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Splits one CSV line, honouring double quotes (`""` inside quotes is a quote).
fn split_csv(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if field.is_empty() => quoted = true,
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => {
                quoted = false;
                if !matches!(chars.peek(), None | Some(',')) {
                    return Err("unexpected text after a closing quote");
                }
            }
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote");
    }
    fields.push(field);
    Ok(fields.into_iter().map(|f| f.trim().to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn parses_token_file_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(
            &path,
            "# comment\nadmintoken,alice,1,\"fedingress:admins,other\"\nviewtoken,bob,2,fedingress:viewers\nnogroup,carol,3\n",
        )
        .unwrap();
        let mut auth = Authenticator::new(false);
        auth.load_token_file(&path).unwrap();
        let alice = auth
            .authenticate(Some("Bearer admintoken"), None)
            .await
            .unwrap();
        assert_eq!(
            alice.groups,
            vec!["fedingress:admins", "other", AUTHENTICATED_GROUP]
        );
        let bob = auth
            .authenticate(Some("Bearer viewtoken"), None)
            .await
            .unwrap();
        assert_eq!(bob.groups, vec!["fedingress:viewers", AUTHENTICATED_GROUP]);
        let carol = auth
            .authenticate(Some("Bearer nogroup"), None)
            .await
            .unwrap();
        assert_eq!(carol.groups, vec![AUTHENTICATED_GROUP]);
        assert!(
            auth.authenticate(Some("Bearer wrong"), None)
                .await
                .is_none()
        );
        assert!(auth.authenticate(None, None).await.is_none());
    }

    #[test]
    fn debug_output_has_no_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "s3cr3t-token,alice,1\n").unwrap();
        let mut auth = Authenticator::new(false);
        auth.load_token_file(&path).unwrap();
        let shown = format!("{auth:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("tokens: 1"), "{shown}");
    }

    #[test]
    fn rejects_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "tok,alice\n").unwrap();
        let err = Authenticator::new(false)
            .load_token_file(&path)
            .unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
        std::fs::write(&path, "tok,alice,1,\"unterminated\n").unwrap();
        assert!(Authenticator::new(false).load_token_file(&path).is_err());
    }

    #[tokio::test]
    async fn dev_mode_is_admin_on_loopback_only() {
        let auth = Authenticator::new(true);
        let local: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let remote: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let admin = auth.authenticate(None, Some(local)).await.unwrap();
        assert!(admin.groups.iter().any(|g| g == ADMINS));
        assert!(auth.authenticate(None, Some(remote)).await.is_none());
    }
}
