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

use crate::status::ApiError;

/// What is stored of a token.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    pub id: String,
    pub cluster: String,
    pub sha256: String,
    pub created_at: Time,
}

#[derive(Clone)]
pub struct TokenStore {
    store: Arc<dyn Store>,
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
        Self { store }
    }

    /// Issues a token for `cluster`: the record, and the token itself (shown once).
    pub async fn issue(&self, cluster: &str, now: Time) -> Result<(TokenRecord, String), ApiError> {
        use rand::RngCore;
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let id = random_id();
        let token = format!(
            "{id}.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let record = TokenRecord {
            id: id.clone(),
            cluster: cluster.to_string(),
            sha256: hash(&token),
            created_at: now,
        };
        let value = serde_json::to_vec(&record)
            .map_err(|e| ApiError::internal(format!("encoding token record: {e}")))?;
        self.store
            .put(
                &format!("{}{id}", prefix(cluster)),
                Bytes::from(value),
                Precondition::Absent,
            )
            .await
            .map_err(storage_error)?;
        Ok((record, token))
    }

    pub async fn list(&self, cluster: &str) -> Result<Vec<TokenRecord>, ApiError> {
        let range = self
            .store
            .range(&prefix(cluster), None, 0)
            .await
            .map_err(storage_error)?;
        Ok(range
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect())
    }

    pub async fn revoke(&self, cluster: &str, id: &str) -> Result<(), ApiError> {
        match self
            .store
            .delete(&format!("{}{id}", prefix(cluster)), Precondition::None)
            .await
        {
            Ok(_) => Ok(()),
            Err(fedingress_store::StoreError::NotFound { .. }) => Err(ApiError::not_found(
                "clusters.fedingress.io/token",
                crate::status::Target {
                    group: fedingress_api::GROUP,
                    kind: "clusters/token".into(),
                    name: id.to_string(),
                },
            )),
            Err(e) => Err(storage_error(e)),
        }
    }

    /// Revokes every token of a cluster (when the Cluster is deleted).
    pub async fn revoke_all(&self, cluster: &str) -> Result<usize, ApiError> {
        let records = self.list(cluster).await?;
        for record in &records {
            let _ = self.revoke(cluster, &record.id).await;
        }
        Ok(records.len())
    }

    /// Whether `token` is a live token of `cluster`.
    pub async fn verify(&self, cluster: &str, token: &str) -> Result<bool, ApiError> {
        let Some((id, _)) = token.split_once('.') else {
            return Ok(false);
        };
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Ok(false);
        }
        let Some(kv) = self
            .store
            .get(&format!("{}{id}", prefix(cluster)))
            .await
            .map_err(storage_error)?
        else {
            return Ok(false);
        };
        let Ok(record) = serde_json::from_slice::<TokenRecord>(&kv.value) else {
            return Ok(false);
        };
        Ok(record.cluster == cluster && same(&record.sha256, &hash(token)))
    }
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
        let (record, token) = tokens.issue("eu", now).await.unwrap();
        assert!(tokens.verify("eu", &token).await.unwrap());
        assert!(!tokens.verify("us", &token).await.unwrap());
        assert!(!tokens.verify("eu", "garbage").await.unwrap());
        assert!(
            !tokens
                .verify("eu", &format!("{}.wrong", record.id))
                .await
                .unwrap()
        );
        assert_eq!(tokens.list("eu").await.unwrap().len(), 1);
        tokens.revoke("eu", &record.id).await.unwrap();
        assert!(!tokens.verify("eu", &token).await.unwrap());
        assert!(tokens.revoke("eu", &record.id).await.is_err());
    }
}
