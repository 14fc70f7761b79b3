//! Agent tokens: issued per cluster through the Cluster `token` subresource, returned
//! once, stored only as a SHA-256 hash. A token authenticates the agent gateway for its
//! one cluster and nothing else (the REST API never looks here).

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use fedingress_api::Time;
use fedingress_store::{Precondition, Store};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use fedingress_apiserver::status::ApiError;

/// What is stored of a token.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    pub id: String,
    pub cluster: String,
    pub sha256: String,
    pub created_at: Time,
    /// The Cluster's `metadata.uid` when the token was issued. Records written before
    /// tokens were uid-bound have none: the first use binds them (see [`TokenStore::verify`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// What is stored of a join token: single use, short-lived, bound to the Cluster's uid.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinTokenRecord {
    pub id: String,
    pub cluster: String,
    pub uid: String,
    pub sha256: String,
    pub created_at: Time,
    pub expires_at: Time,
}

/// What is stored of a client certificate the agent CA issued (its revocation entry:
/// deleting it revokes the certificate).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertRecord {
    /// SHA-256 of the DER, hex.
    pub fingerprint: String,
    pub cluster: String,
    pub uid: String,
    pub serial: String,
    pub created_at: Time,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// The member of the cluster the certificate names (its URI SAN ends in
    /// `/members/<member>`); empty for a certificate of the whole cluster (an agent from
    /// before members, and records written before members).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub member: String,
}

/// One credential of a cluster, as the `token` subresource lists it.
#[derive(Clone, Debug)]
pub struct CredentialSummary {
    pub id: String,
    /// `token`, `join` or `certificate`.
    pub kind: &'static str,
    pub created_at: Time,
    /// Join tokens and certificates expire.
    pub expires_at: Option<Time>,
}

impl CredentialSummary {
    pub fn token(record: &TokenRecord) -> Self {
        Self {
            id: record.id.clone(),
            kind: "token",
            created_at: record.created_at,
            expires_at: None,
        }
    }

    pub fn join(record: &JoinTokenRecord) -> Self {
        Self {
            id: record.id.clone(),
            kind: "join",
            created_at: record.created_at,
            expires_at: Some(record.expires_at),
        }
    }
}

/// The longest join token lifetime a request may ask for.
pub const MAX_JOIN_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// What `POST .../token` issues: `?type=token` (the default) or `?type=join` with an
/// optional `ttlSeconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueQuery {
    Token,
    Join { ttl: std::time::Duration },
}

impl IssueQuery {
    /// Parses the query string; `default_ttl` when a join asks for none.
    ///
    /// # Errors
    /// An unknown parameter or type, or a ttl outside 1 s ..= 7 days.
    pub fn parse(query: Option<&str>, default_ttl: std::time::Duration) -> Result<Self, String> {
        let mut kind = "token";
        let mut ttl = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "type" => {
                    kind = if value == "join" {
                        "join"
                    } else if value == "token" {
                        "token"
                    } else {
                        return Err(format!(
                            "type: unknown credential type {value:?} (token or join)"
                        ));
                    }
                }
                "ttlSeconds" => {
                    let seconds: u64 = value
                        .parse()
                        .map_err(|_| format!("ttlSeconds: not a number: {value:?}"))?;
                    let asked = std::time::Duration::from_secs(seconds);
                    if seconds == 0 || asked > MAX_JOIN_TTL {
                        return Err(format!(
                            "ttlSeconds: must be between 1 and {} (7 days)",
                            MAX_JOIN_TTL.as_secs()
                        ));
                    }
                    ttl = Some(asked);
                }
                other => return Err(format!("unknown parameter {other:?} (type, ttlSeconds)")),
            }
        }
        match (kind, ttl) {
            ("join", ttl) => Ok(Self::Join {
                ttl: ttl.unwrap_or(default_ttl),
            }),
            (_, Some(_)) => Err("ttlSeconds: only for type=join (tokens do not expire)".into()),
            _ => Ok(Self::Token),
        }
    }
}

/// Whether a credential is accepted: the store key it lives under (the session ends when
/// that key is deleted), or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Valid { key: String },
    Refused(String),
}

/// Everything under this prefix is a Cluster or one of its credentials: one store watch
/// on it sees every revocation (see `hub::credentials`).
pub fn credentials_watch_prefix() -> String {
    format!("/registry/{}/cluster", fedingress_api::GROUP)
}

pub fn token_key(cluster: &str, id: &str) -> String {
    format!("{}{id}", prefix(cluster))
}

pub fn join_key(cluster: &str, id: &str) -> String {
    format!("{}{id}", join_prefix(cluster))
}

pub fn cert_key(cluster: &str, fingerprint: &str) -> String {
    format!("{}{fingerprint}", cert_prefix(cluster))
}

fn join_prefix(cluster: &str) -> String {
    format!(
        "/registry/{}/clusterjointokens/{cluster}/",
        fedingress_api::GROUP
    )
}

fn cert_prefix(cluster: &str) -> String {
    format!(
        "/registry/{}/clustercerts/{cluster}/",
        fedingress_api::GROUP
    )
}

/// The id of a token (the part before the dot; `""` when there is none): it names the
/// token's store key and is not secret.
pub fn token_id(token: &str) -> &str {
    token.split_once('.').map_or("", |(id, _)| id)
}

fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn new_secret() -> (String, String) {
    use rand::RngCore;
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let id = random_id();
    let token = format!(
        "{id}.{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    (id, token)
}

#[derive(Clone)]
pub struct TokenStore {
    store: Arc<dyn Store>,
    /// Lifetime of a join token unless the request says otherwise.
    pub join_ttl: std::time::Duration,
}

fn prefix(cluster: &str) -> String {
    format!(
        "/registry/{}/clustertokens/{cluster}/",
        fedingress_api::GROUP
    )
}

fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn random_id() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..10)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn storage_error(e: fedingress_store::StoreError) -> ApiError {
    tracing::error!(error = %e, "token store request failed");
    ApiError::internal(format!("storage error: {e}"))
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl TokenStore {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            join_ttl: std::time::Duration::from_secs(3600),
        }
    }

    /// The default lifetime of join tokens (`agents.joinTokenTtlSeconds`).
    pub fn with_join_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.join_ttl = ttl;
        self
    }

    /// Issues a token for `cluster` (of `uid`): the record, and the token itself (shown
    /// once).
    pub async fn issue(
        &self,
        cluster: &str,
        uid: &str,
        now: Time,
    ) -> Result<(TokenRecord, String), ApiError> {
        let (id, token) = new_secret();
        let record = TokenRecord {
            id: id.clone(),
            cluster: cluster.to_string(),
            sha256: hash(&token),
            created_at: now,
            uid: Some(uid.to_string()),
        };
        self.create(&token_key(cluster, &id), &record).await?;
        Ok((record, token))
    }

    pub async fn list(&self, cluster: &str) -> Result<Vec<TokenRecord>, ApiError> {
        self.list_under(&prefix(cluster)).await
    }

    /// Issues a join token for `cluster` of `uid`, live for `ttl`: the record and the
    /// token (shown once).
    pub async fn issue_join(
        &self,
        cluster: &str,
        uid: &str,
        ttl: std::time::Duration,
        now: Time,
    ) -> Result<(JoinTokenRecord, String), ApiError> {
        let (id, token) = new_secret();
        let expires =
            now.0 + chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::hours(1));
        let record = JoinTokenRecord {
            id: id.clone(),
            cluster: cluster.to_string(),
            uid: uid.to_string(),
            sha256: hash(&token),
            created_at: now,
            expires_at: Time(expires),
        };
        self.create(&join_key(cluster, &id), &record).await?;
        Ok((record, token))
    }

    /// Checks a join token of `cluster` (of `uid`) and consumes it: deleted under a
    /// compare-and-swap on its revision, so of two racing joins only one wins.
    pub async fn consume_join(
        &self,
        cluster: &str,
        uid: &str,
        token: &str,
        now: Time,
    ) -> Result<Verdict, ApiError> {
        let refused = |why: &str| Ok(Verdict::Refused(why.to_string()));
        let id = token_id(token);
        if !valid_id(id) {
            return refused("malformed join token");
        }
        let key = join_key(cluster, id);
        let Some(kv) = self.store.get(&key).await.map_err(storage_error)? else {
            return refused("unknown, used or revoked join token");
        };
        let Ok(record) = serde_json::from_slice::<JoinTokenRecord>(&kv.value) else {
            return refused("unreadable join token record");
        };
        if !same(&record.sha256, &hash(token)) || record.cluster != cluster {
            return refused("unknown, used or revoked join token");
        }
        if record.uid != uid {
            return refused(
                "the join token was issued for an earlier cluster of this name (its uid differs): issue a new one",
            );
        }
        if record.expires_at.0 <= now.0 {
            return refused("the join token has expired: issue a new one (fedctl join)");
        }
        match self
            .store
            .delete(&key, Precondition::ModRevision(kv.mod_revision))
            .await
        {
            Ok(_) => Ok(Verdict::Valid { key }),
            Err(
                fedingress_store::StoreError::PreconditionFailed { .. }
                | fedingress_store::StoreError::NotFound { .. },
            ) => refused("the join token was used already"),
            Err(e) => Err(storage_error(e)),
        }
    }

    /// Records a certificate the agent CA issued; drops the cluster's expired records.
    pub async fn record_cert(&self, record: &CertRecord, now_unix: i64) -> Result<(), ApiError> {
        for old in self.list_certs(&record.cluster).await? {
            if old.not_after < now_unix {
                let _ = self
                    .store
                    .delete(
                        &cert_key(&old.cluster, &old.fingerprint),
                        Precondition::None,
                    )
                    .await;
            }
        }
        self.create(&cert_key(&record.cluster, &record.fingerprint), record)
            .await
    }

    /// Whether the certificate with this fingerprint is a live (recorded, unexpired)
    /// certificate of `cluster` of `uid`.
    pub async fn verify_cert(
        &self,
        cluster: &str,
        uid: &str,
        fingerprint: &str,
        now_unix: i64,
    ) -> Result<Verdict, ApiError> {
        Ok(self
            .verify_cert_record(cluster, uid, fingerprint, now_unix)
            .await?
            .0)
    }

    /// [`TokenStore::verify_cert`], with the certificate's record when it is valid (its
    /// `member` is the member the certificate names).
    pub async fn verify_cert_record(
        &self,
        cluster: &str,
        uid: &str,
        fingerprint: &str,
        now_unix: i64,
    ) -> Result<(Verdict, Option<CertRecord>), ApiError> {
        let refused = |why: String| Ok((Verdict::Refused(why), None));
        let key = cert_key(cluster, fingerprint);
        let Some(kv) = self.store.get(&key).await.map_err(storage_error)? else {
            return refused(format!(
                "client certificate {} is not a live certificate of cluster {cluster:?} (revoked, or issued for another cluster)",
                short(fingerprint)
            ));
        };
        let Ok(record) = serde_json::from_slice::<CertRecord>(&kv.value) else {
            return refused("unreadable certificate record".into());
        };
        if record.uid != uid {
            return refused(
                "the client certificate was issued for an earlier cluster of this name (its uid differs): join again with a new join token".into(),
            );
        }
        if record.not_after < now_unix {
            return refused(
                "the client certificate has expired: join again with a new join token".into(),
            );
        }
        Ok((Verdict::Valid { key }, Some(record)))
    }

    /// The certificate `fingerprint` of `cluster` works: certificates of the same member
    /// of the cluster issued before it are revoked (their records deleted), so revoking
    /// the newest certificate is final once it has been used. Other members'
    /// certificates stay (each member renews its own). Returns how many.
    pub async fn retire_older_certs(
        &self,
        cluster: &str,
        fingerprint: &str,
    ) -> Result<usize, ApiError> {
        let certs = self.list_certs(cluster).await?;
        let Some(used) = certs.iter().find(|c| c.fingerprint == fingerprint) else {
            return Ok(0);
        };
        let mut retired = 0;
        for old in certs
            .iter()
            .filter(|c| c.member == used.member && c.created_at.0 < used.created_at.0)
        {
            if self
                .store
                .delete(&cert_key(cluster, &old.fingerprint), Precondition::None)
                .await
                .is_ok()
            {
                retired += 1;
            }
        }
        Ok(retired)
    }

    pub async fn list_join(&self, cluster: &str) -> Result<Vec<JoinTokenRecord>, ApiError> {
        self.list_under(&join_prefix(cluster)).await
    }

    pub async fn list_certs(&self, cluster: &str) -> Result<Vec<CertRecord>, ApiError> {
        self.list_under(&cert_prefix(cluster)).await
    }

    /// Every credential of `cluster`: tokens, join tokens and certificates.
    pub async fn list_all(&self, cluster: &str) -> Result<Vec<CredentialSummary>, ApiError> {
        let mut all: Vec<CredentialSummary> = self
            .list(cluster)
            .await?
            .iter()
            .map(CredentialSummary::token)
            .collect();
        all.extend(
            self.list_join(cluster)
                .await?
                .iter()
                .map(CredentialSummary::join),
        );
        all.extend(
            self.list_certs(cluster)
                .await?
                .into_iter()
                .map(|r| CredentialSummary {
                    id: r.fingerprint,
                    kind: "certificate",
                    created_at: r.created_at,
                    expires_at: chrono::DateTime::from_timestamp(r.not_after, 0).map(Time),
                }),
        );
        Ok(all)
    }

    async fn list_under<T: serde::de::DeserializeOwned>(
        &self,
        prefix: &str,
    ) -> Result<Vec<T>, ApiError> {
        let range = self
            .store
            .range(prefix, None, 0)
            .await
            .map_err(storage_error)?;
        Ok(range
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect())
    }

    async fn create<T: Serialize>(&self, key: &str, record: &T) -> Result<(), ApiError> {
        let value = serde_json::to_vec(record)
            .map_err(|e| ApiError::internal(format!("encoding credential record: {e}")))?;
        self.store
            .put(key, Bytes::from(value), Precondition::Absent)
            .await
            .map_err(storage_error)?;
        Ok(())
    }

    /// Revokes the credential `id` of `cluster`: a token, a join token or a certificate
    /// (by fingerprint).
    pub async fn revoke(&self, cluster: &str, id: &str) -> Result<(), ApiError> {
        let not_found = || {
            ApiError::not_found(
                "clusters.fedingress.io/token",
                fedingress_apiserver::status::Target {
                    group: fedingress_api::GROUP,
                    kind: "clusters/token".into(),
                    name: id.to_string(),
                },
            )
        };
        if !valid_id(id) {
            return Err(not_found());
        }
        for key in [
            token_key(cluster, id),
            join_key(cluster, id),
            cert_key(cluster, id),
        ] {
            match self.store.delete(&key, Precondition::None).await {
                Ok(_) => return Ok(()),
                Err(fedingress_store::StoreError::NotFound { .. }) => {}
                Err(e) => return Err(storage_error(e)),
            }
        }
        Err(not_found())
    }

    /// Revokes every credential of a cluster — tokens, join tokens, certificates — (when
    /// the Cluster is deleted). Returns how many were deleted.
    pub async fn revoke_all(&self, cluster: &str) -> Result<usize, ApiError> {
        let mut keys: Vec<String> = (self.list(cluster).await?.iter())
            .map(|r| token_key(cluster, &r.id))
            .collect();
        keys.extend((self.list_join(cluster).await?.iter()).map(|r| join_key(cluster, &r.id)));
        keys.extend(
            (self.list_certs(cluster).await?.iter()).map(|r| cert_key(cluster, &r.fingerprint)),
        );
        let mut n = 0;
        for key in &keys {
            n += usize::from(self.store.delete(key, Precondition::None).await.is_ok());
        }
        Ok(n)
    }

    /// Whether `token` is a live token of `cluster` of `uid`.
    ///
    /// A record without a uid (issued before tokens were uid-bound) is bound to `uid` on
    /// its first use: the controller revokes a deleted cluster's tokens, so a stored
    /// token without a uid belongs to the cluster of that name now; refusing them would
    /// cut off every agent of an upgraded hub at once.
    pub async fn verify(&self, cluster: &str, uid: &str, token: &str) -> Result<Verdict, ApiError> {
        let invalid = || {
            Ok(Verdict::Refused(format!(
                "invalid or revoked token for cluster {cluster:?}"
            )))
        };
        let id = token_id(token);
        if !valid_id(id) {
            return invalid();
        }
        let key = token_key(cluster, id);
        let Some(kv) = self.store.get(&key).await.map_err(storage_error)? else {
            return invalid();
        };
        let Ok(mut record) = serde_json::from_slice::<TokenRecord>(&kv.value) else {
            return invalid();
        };
        if record.cluster != cluster || !same(&record.sha256, &hash(token)) {
            return invalid();
        }
        match record.uid.as_deref() {
            Some(bound) if bound == uid => Ok(Verdict::Valid { key }),
            Some(_) => Ok(Verdict::Refused(format!(
                "the token was issued for an earlier cluster named {cluster:?} (deleted; its uid differs from the current one): issue a new token"
            ))),
            None => {
                record.uid = Some(uid.to_string());
                let value = serde_json::to_vec(&record)
                    .map_err(|e| ApiError::internal(format!("encoding token record: {e}")))?;
                match self
                    .store
                    .put(
                        &key,
                        Bytes::from(value),
                        Precondition::ModRevision(kv.mod_revision),
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(cluster, token_id = %id, uid, "token without a uid bound to the cluster on first use");
                        Ok(Verdict::Valid { key })
                    }
                    // Bound (or revoked) meanwhile: judge it again as it is now.
                    Err(fedingress_store::StoreError::PreconditionFailed { .. }) => {
                        Box::pin(self.verify(cluster, uid, token)).await
                    }
                    Err(e) => Err(storage_error(e)),
                }
            }
        }
    }
}

/// The first 16 hex digits of a fingerprint, for messages.
pub fn short(fingerprint: &str) -> &str {
    fingerprint.get(..16).unwrap_or(fingerprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tokens_verify_for_their_cluster_until_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            fedingress_store::RedbStore::open(&dir.path().join("s.redb"), Default::default())
                .unwrap();
        let tokens = TokenStore::new(Arc::new(store));
        let now = Time(chrono::Utc::now());
        let (record, token) = tokens.issue("eu", "u1", now).await.unwrap();
        let valid = |v: Verdict| matches!(v, Verdict::Valid { .. });
        assert!(valid(tokens.verify("eu", "u1", &token).await.unwrap()));
        assert!(!valid(tokens.verify("us", "u1", &token).await.unwrap()));
        assert!(!valid(tokens.verify("eu", "u1", "garbage").await.unwrap()));
        assert!(!valid(
            tokens
                .verify("eu", "u1", &format!("{}.wrong", record.id))
                .await
                .unwrap()
        ));
        // The cluster deleted and created again under its name: a new uid.
        let Verdict::Refused(why) = tokens.verify("eu", "u2", &token).await.unwrap() else {
            panic!("a token of an earlier cluster of the name was accepted");
        };
        assert!(why.contains("earlier cluster"), "{why}");
        assert_eq!(tokens.list("eu").await.unwrap().len(), 1);
        tokens.revoke("eu", &record.id).await.unwrap();
        assert!(!valid(tokens.verify("eu", "u1", &token).await.unwrap()));
        assert!(tokens.revoke("eu", &record.id).await.is_err());
    }

    fn store() -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store =
            fedingress_store::RedbStore::open(&dir.path().join("s.redb"), Default::default())
                .unwrap();
        (dir, Arc::new(store))
    }

    #[test]
    fn issue_queries_parse() {
        let hour = std::time::Duration::from_secs(3600);
        assert_eq!(IssueQuery::parse(None, hour), Ok(IssueQuery::Token));
        assert_eq!(
            IssueQuery::parse(Some("type=join"), hour),
            Ok(IssueQuery::Join { ttl: hour })
        );
        assert_eq!(
            IssueQuery::parse(Some("type=join&ttlSeconds=60"), hour),
            Ok(IssueQuery::Join {
                ttl: std::time::Duration::from_secs(60)
            })
        );
        assert!(IssueQuery::parse(Some("type=join&ttlSeconds=0"), hour).is_err());
        assert!(IssueQuery::parse(Some("ttlSeconds=60"), hour).is_err());
        assert!(IssueQuery::parse(Some("type=cert"), hour).is_err());
        assert!(IssueQuery::parse(Some("x=1"), hour).is_err());
    }

    #[tokio::test]
    async fn a_token_without_a_uid_is_bound_on_first_use() {
        let (_dir, store) = store();
        let tokens = TokenStore::new(store.clone());
        let now = Time(chrono::Utc::now());
        let (mut record, token) = tokens.issue("eu", "u1", now).await.unwrap();
        record.uid = None;
        store
            .put(
                &token_key("eu", &record.id),
                Bytes::from(serde_json::to_vec(&record).unwrap()),
                Precondition::None,
            )
            .await
            .unwrap();
        assert!(matches!(
            tokens.verify("eu", "u7", &token).await.unwrap(),
            Verdict::Valid { .. }
        ));
        assert!(matches!(
            tokens.verify("eu", "u8", &token).await.unwrap(),
            Verdict::Refused(_)
        ));
    }

    #[tokio::test]
    async fn join_tokens_are_single_use_short_lived_and_uid_bound() {
        let (_dir, store) = store();
        let tokens = TokenStore::new(store);
        let now = Time(chrono::Utc::now());
        let hour = std::time::Duration::from_secs(3600);
        let (_, join) = tokens.issue_join("eu", "u1", hour, now).await.unwrap();
        let refused = |v: Verdict| match v {
            Verdict::Refused(why) => why,
            Verdict::Valid { .. } => panic!("accepted"),
        };
        assert!(
            refused(tokens.consume_join("eu", "u2", &join, now).await.unwrap())
                .contains("earlier cluster")
        );
        assert!(
            refused(tokens.consume_join("us", "u1", &join, now).await.unwrap()).contains("unknown")
        );
        let later = Time(now.0 + chrono::Duration::hours(2));
        assert!(
            refused(tokens.consume_join("eu", "u1", &join, later).await.unwrap())
                .contains("expired")
        );
        assert!(matches!(
            tokens.consume_join("eu", "u1", &join, now).await.unwrap(),
            Verdict::Valid { .. }
        ));
        assert!(
            refused(tokens.consume_join("eu", "u1", &join, now).await.unwrap()).contains("used")
        );
        // Two racing joins with one token: exactly one wins.
        let (_, join) = tokens.issue_join("eu", "u1", hour, now).await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let tokens = tokens.clone();
            let join = join.clone();
            tasks.push(tokio::spawn(async move {
                tokens.consume_join("eu", "u1", &join, now).await.unwrap()
            }));
        }
        let mut won = 0;
        for task in tasks {
            won += usize::from(matches!(task.await.unwrap(), Verdict::Valid { .. }));
        }
        assert_eq!(won, 1);
        assert!(tokens.list_join("eu").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn certificates_verify_until_revoked_expired_or_the_uid_changes() {
        let (_dir, store) = store();
        let tokens = TokenStore::new(store);
        let now = Time(chrono::Utc::now());
        let record = CertRecord {
            fingerprint: "ab".repeat(32),
            cluster: "eu".into(),
            uid: "u1".into(),
            serial: "01".into(),
            created_at: now,
            not_after: 1000,
            member: String::new(),
        };
        tokens.record_cert(&record, 0).await.unwrap();
        let fp = record.fingerprint.clone();
        assert!(matches!(
            tokens.verify_cert("eu", "u1", &fp, 999).await.unwrap(),
            Verdict::Valid { .. }
        ));
        assert!(matches!(
            tokens.verify_cert("eu", "u2", &fp, 999).await.unwrap(),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            tokens.verify_cert("eu", "u1", &fp, 1001).await.unwrap(),
            Verdict::Refused(_)
        ));
        assert!(matches!(
            tokens.verify_cert("us", "u1", &fp, 999).await.unwrap(),
            Verdict::Refused(_)
        ));
        assert_eq!(tokens.list_all("eu").await.unwrap()[0].kind, "certificate");
        // A newer certificate used: the older one is retired.
        let newer = CertRecord {
            fingerprint: "cd".repeat(32),
            created_at: Time(now.0 + chrono::Duration::seconds(1)),
            ..record.clone()
        };
        tokens.record_cert(&newer, 0).await.unwrap();
        assert_eq!(
            tokens
                .retire_older_certs("eu", &newer.fingerprint)
                .await
                .unwrap(),
            1
        );
        assert!(matches!(
            tokens.verify_cert("eu", "u1", &fp, 999).await.unwrap(),
            Verdict::Refused(_)
        ));
        tokens.record_cert(&record, 0).await.unwrap();
        tokens.revoke("eu", &fp).await.unwrap();
        assert!(matches!(
            tokens.verify_cert("eu", "u1", &fp, 999).await.unwrap(),
            Verdict::Refused(_)
        ));
    }
    /// Issue 24: each member of a cluster renews its own certificate; one member's newer
    /// certificate must not revoke another member's.
    #[tokio::test]
    async fn a_members_newer_certificate_retires_only_that_members_older_ones() {
        let (_dir, store) = store();
        let tokens = TokenStore::new(store);
        let now = Time(chrono::Utc::now());
        let cert = |fingerprint: &str, member: &str, seconds: i64| CertRecord {
            fingerprint: fingerprint.repeat(32),
            cluster: "eu".into(),
            uid: "u1".into(),
            serial: "01".into(),
            created_at: Time(now.0 + chrono::Duration::seconds(seconds)),
            not_after: 1000,
            member: member.into(),
        };
        let a_old = cert("a1", "web-a", 0);
        let b_old = cert("b1", "web-b", 1);
        let a_new = cert("a2", "web-a", 2);
        for record in [&a_old, &b_old, &a_new] {
            tokens.record_cert(record, 0).await.unwrap();
        }
        let (verdict, record) = tokens
            .verify_cert_record("eu", "u1", &a_new.fingerprint, 999)
            .await
            .unwrap();
        assert!(matches!(verdict, Verdict::Valid { .. }));
        assert_eq!(record.unwrap().member, "web-a");
        assert_eq!(
            tokens
                .retire_older_certs("eu", &a_new.fingerprint)
                .await
                .unwrap(),
            1,
            "web-a's older certificate only"
        );
        let valid = |verdict: Verdict| matches!(verdict, Verdict::Valid { .. });
        assert!(!valid(
            tokens
                .verify_cert("eu", "u1", &a_old.fingerprint, 999)
                .await
                .unwrap()
        ));
        assert!(valid(
            tokens
                .verify_cert("eu", "u1", &b_old.fingerprint, 999)
                .await
                .unwrap()
        ));
        // A record from before members reads as the whole cluster's.
        let legacy = br#"{"fingerprint":"x","cluster":"eu","uid":"u1","serial":"01","createdAt":"2026-01-01T00:00:00Z","notAfter":5}"#;
        let parsed: CertRecord = serde_json::from_slice(legacy).unwrap();
        assert_eq!(parsed.member, "");
    }
}
