//! The reads of get, list and watch at the resourceVersion a request asks for: the
//! options decided by [`read_options`](super::read_options), the waiting ("not older
//! than" a revision the store has not reached yet) and the store reads.

use fedingress_api::Resource;
use fedingress_store::Revision;

use super::read_options::{self, Read, ReadOptions, WatchStart};
use super::request::{Params, flag};
use crate::registry::{self, Filter, Page, ReadAt, Registry};
use crate::status::ApiError;

/// The read options of a request's query.
pub(super) fn options(params: &Params) -> ReadOptions<'_> {
    fn text(value: &Option<String>) -> &str {
        value.as_deref().unwrap_or_default()
    }
    ReadOptions {
        resource_version: text(&params.resource_version),
        resource_version_match: text(&params.resource_version_match),
        continue_token: text(&params.continue_token),
        limit_set: params
            .limit
            .as_deref()
            .is_some_and(|l| !l.is_empty() && l != "0"),
        send_initial_events: params
            .send_initial_events
            .as_deref()
            .map(|v| matches!(v, "true" | "1")),
        allow_watch_bookmarks: flag(&params.allow_watch_bookmarks),
    }
}

/// Waits until the store is at least at `revision` (504 after
/// [`registry::REVISION_WAIT`]); returns its revision.
async fn not_older_than(registry: &Registry, revision: Revision) -> Result<Revision, ApiError> {
    registry::wait_for_revision(registry.store().as_ref(), revision, registry::REVISION_WAIT).await
}

/// A get at the resourceVersion asked for: unset or "0" = the current object, N = the
/// current object once the store has reached N.
pub(super) async fn get<R: Resource>(
    registry: &Registry,
    namespace: Option<&str>,
    name: &str,
    params: &Params,
) -> Result<R, ApiError> {
    if let Read::NotOlderThan(revision) = read_options::get(&options(params))? {
        not_older_than(registry, revision).await?;
    }
    registry.get::<R>(namespace, name).await
}

/// A list (or a page of one) at the resourceVersion and match asked for.
pub(super) async fn list<R: Resource>(
    registry: &Registry,
    namespace: Option<&str>,
    filter: &Filter,
    limit: usize,
    params: &Params,
) -> Result<Page<R>, ApiError> {
    let at = match read_options::list(&options(params))? {
        Read::Latest | Read::Continue => ReadAt::Latest,
        Read::NotOlderThan(revision) => {
            not_older_than(registry, revision).await?;
            ReadAt::Latest
        }
        Read::Exact(revision) => ReadAt::Exact(revision),
    };
    registry
        .list_at::<R>(
            namespace,
            filter,
            limit,
            params.continue_token.as_deref(),
            at,
        )
        .await
}

/// Where a watch starts: the revision its events follow (`None`: ADDED events for the
/// current state first) and whether a watch-list's initial-events-end BOOKMARK follows
/// those.
pub(super) async fn watch_start(
    registry: &Registry,
    params: &Params,
) -> Result<(Option<Revision>, bool), ApiError> {
    Ok(match read_options::watch(&options(params))? {
        WatchStart::CurrentState => (None, false),
        WatchStart::After(revision) => (Some(revision), false),
        WatchStart::InitialEvents { min } => {
            if min > 0 {
                not_older_than(registry, min).await?;
            }
            (None, true)
        }
        WatchStart::NoInitialEvents { min } => (Some(not_older_than(registry, min).await?), false),
    })
}
