//! Lists: filtered, paged reads of one kind, each list one store snapshot.
//!
//! The first page reads the store at its current revision (or at the revision asked for
//! with `resourceVersionMatch=Exact`); its `continue` token carries that revision, and
//! every later page reads the store *at* it ([`Store::range_at`]), so objects created,
//! modified or deleted between pages never show up in later pages, as with
//! kube-apiserver on etcd. When compaction has overtaken the snapshot, a page answers
//! 410 Expired exactly as kube's `storage/etcd3` GetList does: with a token (revision
//! -1) that continues inconsistently at the current revision.
//!
//! [`Store::range_at`]: fedingress_store::Store::range_at

use std::time::Duration;

use base64::Engine;
use fedingress_api::Resource;
use fedingress_store::{Revision, Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Filter, Registry, prefix, store_error};
use crate::status::ApiError;

/// kube's `expired` (storage/etcd3): a list at a compacted resourceVersion.
const EXPIRED: &str = "The resourceVersion for the provided list is too old.";
/// kube's `inconsistentContinue`: a continue token whose snapshot was compacted.
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// How long a read waits for the store to reach a resourceVersion it asked for (kube's
/// watch cache waits 3 s) before answering 504 "Too large resource version".
pub const REVISION_WAIT: Duration = Duration::from_secs(3);
/// How often the store's revision is checked while waiting for it.
const REVISION_POLL: Duration = Duration::from_millis(25);

/// The revision a continue token carries to continue at the latest revision (kube's
/// `-1`: not 0, so that a bad token with no revision stays an error).
const LATEST: Revision = -1;

/// Which state of the store a list reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAt {
    /// The most recent state: a snapshot at the current revision.
    Latest,
    /// Exactly the state at this revision (410 Expired when it was compacted).
    Exact(Revision),
}

/// The opaque `continue` token of a paged list.
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    /// Revision of the list's snapshot (reported as its resourceVersion); [`LATEST`]
    /// continues at the current revision.
    rv: Revision,
    /// Last key returned; the next page starts after it.
    start: String,
}

impl ContinueToken {
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(token: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::bad_request("continue key is not valid: malformed token");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| bad())?;
        let token: Self = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        if token.rv == 0 || token.rv < LATEST {
            return Err(ApiError::bad_request(format!(
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1): {}",
                token.rv
            )));
        }
        Ok(token)
    }
}

/// One page of a list.
pub struct Page<R> {
    pub items: Vec<R>,
    /// The revision of the list's snapshot.
    pub resource_version: Revision,
    pub continue_token: Option<String>,
}

impl Registry {
    /// Lists the objects matching `filter` as they are now, at most `limit` (0 = all),
    /// continuing a paged list; see [`Registry::list_at`].
    pub async fn list<R: Resource>(
        &self,
        namespace: Option<&str>,
        filter: &Filter,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<Page<R>, ApiError> {
        self.list_at(namespace, filter, limit, continue_token, ReadAt::Latest)
            .await
    }

    /// Lists the objects matching `filter`, at most `limit` (0 = all), from one store
    /// snapshot: the one `read` names for a first page, the token's for a later one
    /// (`read` is then ignored).
    ///
    /// # Guarantees
    /// Every page of a paged list reads the first page's snapshot: the pages together
    /// are exactly the matching objects at the resourceVersion they all report, whatever
    /// was written meanwhile. A page is one snapshot even when the filter makes it read
    /// several store batches.
    ///
    /// # Errors
    /// 400 for a malformed token or one of another list; 410 Expired when the snapshot
    /// was compacted (a later page's 410 carries a token continuing at the current
    /// revision, as kube's does); 504 when an Exact revision is beyond the store's.
    pub async fn list_at<R: Resource>(
        &self,
        namespace: Option<&str>,
        filter: &Filter,
        limit: usize,
        continue_token: Option<&str>,
        read: ReadAt,
    ) -> Result<Page<R>, ApiError> {
        let prefix = prefix::<R>(namespace);
        let token = continue_token
            .filter(|t| !t.is_empty())
            .map(ContinueToken::decode)
            .transpose()?;
        if let Some(token) = &token
            && !token.start.starts_with(&prefix)
        {
            return Err(ApiError::bad_request(
                "continue key is not valid: it belongs to another list",
            ));
        }
        let mut snapshot = match (&token, read) {
            (Some(token), _) if token.rv > 0 => Some(token.rv),
            (Some(_), _) | (None, ReadAt::Latest) => None,
            (None, ReadAt::Exact(revision)) => Some(revision),
        };
        // Where a 410 on a later page offers to continue (kube's continueKey).
        let resume = token.as_ref().map(|t| t.start.clone());
        let mut start = resume.clone();
        let mut items = Vec::new();
        loop {
            // Read somewhat more than needed: the filter may drop some.
            let batch = if limit == 0 {
                0
            } else {
                (limit - items.len()).max(16)
            };
            let result = match snapshot {
                Some(at) => {
                    self.store
                        .range_at(&prefix, start.as_deref(), batch, at)
                        .await
                }
                None => self.store.range(&prefix, start.as_deref(), batch).await,
            }
            .map_err(|e| list_error::<R>(e, resume.as_deref()))?;
            let revision = *snapshot.get_or_insert(result.revision);
            let mut last_key = None;
            for kv in &result.kvs {
                last_key = Some(kv.key.clone());
                let object: R = Self::decode_stored(kv)?;
                if filter.matches(&object) {
                    items.push(object);
                    if limit != 0 && items.len() == limit {
                        break;
                    }
                }
            }
            let consumed_all = last_key.as_deref() == result.kvs.last().map(|kv| kv.key.as_str());
            let more = result.more || !consumed_all;
            let full = limit != 0 && items.len() == limit;
            if full || !result.more {
                let continue_token = match (full && more, last_key) {
                    (true, Some(start)) => Some(
                        ContinueToken {
                            rv: revision,
                            start,
                        }
                        .encode(),
                    ),
                    _ => None,
                };
                return Ok(Page {
                    items,
                    resource_version: revision,
                    continue_token,
                });
            }
            start = last_key;
        }
    }
}

/// The API error of a failed list read; `resume` is the key a continued list resumes
/// after.
fn list_error<R: Resource>(error: StoreError, resume: Option<&str>) -> ApiError {
    match (error, resume) {
        (StoreError::Compacted { .. }, Some(start)) => {
            let mut error = ApiError::expired(INCONSISTENT_CONTINUE);
            error.list_continue = Some(
                ContinueToken {
                    rv: LATEST,
                    start: start.to_string(),
                }
                .encode(),
            );
            error
        }
        (StoreError::Compacted { .. }, None) => ApiError::expired(EXPIRED),
        (StoreError::FutureRevision { requested, current }, _) => too_large(requested, current),
        (other, _) => store_error::<R>("", other),
    }
}

/// kube's `NewTooLargeResourceVersionError`: 504 Timeout, retry after 1 s, cause
/// `ResourceVersionTooLarge`.
pub fn too_large(requested: Revision, current: Revision) -> ApiError {
    let mut error = ApiError::timeout(format!(
        "Too large resource version: {requested}, current: {current}"
    ));
    error.causes = vec![json!({
        "reason": "ResourceVersionTooLarge",
        "message": "Too large resource version",
    })];
    error
}

/// Waits up to `wait` for the store to reach `revision` (a read that must be "not
/// older than" it); returns the store's revision then.
///
/// # Errors
/// 504 "Too large resource version" (kube's) when the store is still behind after
/// `wait`; 500 when the store fails.
pub async fn wait_for_revision(
    store: &dyn Store,
    revision: Revision,
    wait: Duration,
) -> Result<Revision, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let current = store
            .revision()
            .await
            .map_err(|e| store_error::<fedingress_api::Cluster>("", e))?;
        if current >= revision {
            return Ok(current);
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::debug!(
                requested = revision,
                current,
                "resourceVersion not reached in time"
            );
            return Err(too_large(revision, current));
        }
        tokio::time::sleep(REVISION_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_reject_revision_zero() {
        let token = ContinueToken {
            rv: 42,
            start: "/registry/x/a".to_string(),
        }
        .encode();
        let decoded = ContinueToken::decode(&token).unwrap();
        assert_eq!((decoded.rv, decoded.start.as_str()), (42, "/registry/x/a"));
        let latest = ContinueToken {
            rv: LATEST,
            start: "/k".to_string(),
        }
        .encode();
        assert_eq!(ContinueToken::decode(&latest).unwrap().rv, LATEST);
        let zero = ContinueToken {
            rv: 0,
            start: "/k".to_string(),
        }
        .encode();
        assert_eq!(
            ContinueToken::decode(&zero).err().unwrap().code,
            http::StatusCode::BAD_REQUEST
        );
        assert!(ContinueToken::decode("not base64!").is_err());
    }

    #[test]
    fn compaction_under_a_continued_list_offers_an_inconsistent_token() {
        let compacted = || StoreError::Compacted {
            requested: 5,
            compacted: 9,
        };
        let error = list_error::<fedingress_api::Cluster>(compacted(), Some("/k/b"));
        assert_eq!(error.code, http::StatusCode::GONE);
        assert_eq!(error.message, INCONSISTENT_CONTINUE);
        let token = ContinueToken::decode(error.list_continue.as_deref().unwrap()).unwrap();
        assert_eq!((token.rv, token.start.as_str()), (LATEST, "/k/b"));
        let status = error.to_status();
        assert_eq!(status["reason"], "Expired");
        assert!(status["metadata"]["continue"].is_string());

        let first = list_error::<fedingress_api::Cluster>(compacted(), None);
        assert_eq!(first.message, EXPIRED);
        assert!(first.list_continue.is_none());
    }

    #[test]
    fn too_large_is_kubes_timeout() {
        let status = too_large(100, 7).to_status();
        assert_eq!(status["code"], 504);
        assert_eq!(status["reason"], "Timeout");
        assert_eq!(
            status["message"],
            "Too large resource version: 100, current: 7"
        );
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
    }
}
