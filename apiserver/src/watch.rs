//! Watch: store events turned into Kubernetes watch events (ADDED, MODIFIED, DELETED,
//! BOOKMARK, ERROR), filtered by namespace and selectors, streamed as JSON lines.

use std::time::Duration;

use bytes::Bytes;
use fedingress_api::Resource;
use fedingress_store::{Event, EventKind, Revision};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::registry::{Filter, Registry, prefix};
use crate::status::ApiError;

/// How many watches may be open and how long one lasts (`limits:`); checked by the
/// config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchLimits {
    /// Open watches on this server (`limits.maxWatches`).
    pub max_watches: usize,
    /// Open watches of one user (`limits.maxWatchesPerUser`).
    pub max_watches_per_user: usize,
    /// A watch without `timeoutSeconds` lasts a random time between this and twice this
    /// (`--min-request-timeout`).
    pub min_request_timeout: Duration,
    /// The longest a watch lasts (`limits.maxWatchTimeoutSeconds`).
    pub max_watch_timeout: Duration,
}

impl Default for WatchLimits {
    /// kube-apiserver's `--min-request-timeout` (1800 s) and our caps.
    fn default() -> Self {
        Self {
            max_watches: 2048,
            max_watches_per_user: 256,
            min_request_timeout: Duration::from_secs(1800),
            max_watch_timeout: Duration::from_secs(3600),
        }
    }
}

/// How long a watch lasts: `timeoutSeconds` when given (lowered to the cap; the bool
/// says whether it was), else a random time in [min, 2 × min] capped the same way.
///
/// # Errors
/// `timeoutSeconds` is not a non-negative integer (the message is for a 400).
pub fn watch_timeout(
    requested: Option<&str>,
    limits: &WatchLimits,
    random: impl FnOnce(u64, u64) -> u64,
) -> Result<(Duration, bool), String> {
    let wanted = match requested {
        None | Some("") | Some("0") => {
            let min = limits.min_request_timeout.as_secs();
            Duration::from_secs(random(min, min.saturating_mul(2)))
        }
        Some(text) => Duration::from_secs(
            text.parse::<u64>()
                .map_err(|_| format!("invalid timeoutSeconds: {text:?}"))?,
        ),
    };
    if wanted > limits.max_watch_timeout {
        let capped = requested.is_some_and(|t| !matches!(t, "" | "0"));
        Ok((limits.max_watch_timeout, capped))
    } else {
        Ok((wanted, false))
    }
}

/// A random number of seconds in [low, high], for [`watch_timeout`].
pub fn random_between(low: u64, high: u64) -> u64 {
    use rand::Rng;
    if high <= low {
        return low;
    }
    rand::rng().random_range(low..=high)
}

/// The 429 for a watch a cap refused (`limits.maxWatches`, `limits.maxWatchesPerUser`).
pub fn refused(refused: crate::metrics::WatchRefused) -> ApiError {
    let message = match refused {
        crate::metrics::WatchRefused::Total(cap) => format!(
            "too many watches: {cap} are open on this server (limits.maxWatches); retry later"
        ),
        crate::metrics::WatchRefused::User(cap) => format!(
            "too many watches: this user has {cap} open (limits.maxWatchesPerUser); close some or retry later"
        ),
    };
    ApiError::too_many_requests(message, 1)
}

/// Turns an object into what the client asked for (the object itself, or a Table).
pub type Render<R> = Box<dyn Fn(&R) -> Value + Send + Sync>;

pub struct WatchRequest<R> {
    pub namespace: Option<String>,
    pub filter: Filter,
    /// Events after this revision; `None` starts with the current state as ADDED events.
    pub after: Option<Revision>,
    /// Watch-list (`sendInitialEvents=true`): after the ADDED events of the current
    /// state, a BOOKMARK at their revision annotated `k8s.io/initial-events-end`.
    pub initial_events_end: bool,
    pub bookmarks: bool,
    pub bookmark_interval: Duration,
    pub timeout: Duration,
    pub render: Render<R>,
}

fn line(event_type: &str, object: Value) -> Bytes {
    let mut text = json!({"type": event_type, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// The Kubernetes event for one store event, if the client should see one.
///
/// A change that makes an object start (stop) matching the filter is an ADDED (DELETED)
/// event, as kube-apiserver sends them.
fn translate<R: Resource>(
    event: &Event,
    filter: &Filter,
) -> Result<Option<(&'static str, R)>, ApiError> {
    let previous = event
        .prev
        .as_ref()
        .map(Registry::decode_stored::<R>)
        .transpose()?
        .filter(|p| filter.matches(p));
    let mut object: R = Registry::decode_stored(&event.kv)?;
    object.metadata_mut().resource_version = Some(event.revision.to_string());
    let matches = filter.matches(&object);
    Ok(match event.kind {
        EventKind::Delete => matches.then_some(("DELETED", object)),
        EventKind::Put => match (previous.is_some(), matches) {
            (true, true) => Some(("MODIFIED", object)),
            (false, true) => Some(("ADDED", object)),
            (true, false) => Some(("DELETED", object)),
            (false, false) => None,
        },
    })
}

/// The BOOKMARK that ends a watch-list's initial events: the snapshot's revision,
/// annotated `k8s.io/initial-events-end: "true"` (what client-go's reflector and
/// kube-rs's watcher wait for).
fn initial_events_end<R: Resource>(revision: Revision) -> Value {
    json!({
        "kind": R::KIND,
        "apiVersion": R::api_version(),
        "metadata": {
            "resourceVersion": revision.to_string(),
            "annotations": {"k8s.io/initial-events-end": "true"},
        },
    })
}

/// Starts a watch; the returned channel yields the response body's lines.
///
/// Fails before anything is streamed when the start revision was compacted (410) or the
/// store is unavailable; a compaction that overtakes a slow watcher ends the stream with
/// an ERROR event carrying 410 Gone, so the client relists.
pub async fn start<R: Resource>(
    registry: &Registry,
    request: WatchRequest<R>,
) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let store = registry.store().clone();
    let prefix = prefix::<R>(request.namespace.as_deref());
    let (initial, after) = match request.after {
        Some(after) => (Vec::new(), after),
        None => {
            let page = registry
                .list::<R>(request.namespace.as_deref(), &request.filter, 0, None)
                .await?;
            (page.items, page.resource_version)
        }
    };
    let mut events = store
        .watch(&prefix, after)
        .await
        .map_err(|e| crate::registry::store_error::<R>("", e))?;
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let WatchRequest {
            filter,
            bookmarks,
            bookmark_interval,
            timeout,
            render,
            initial_events_end: end_initial_events,
            ..
        } = request;
        for object in &initial {
            if tx.send(line("ADDED", render(object))).await.is_err() {
                return;
            }
        }
        if end_initial_events
            && tx
                .send(line("BOOKMARK", initial_events_end::<R>(after)))
                .await
                .is_err()
        {
            return;
        }
        let mut last_revision = after;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                next = events.next() => {
                    let event = match next {
                        Some(Ok(event)) => event,
                        Some(Err(e)) => {
                            let error = crate::registry::store_error::<R>("", e);
                            let _ = tx.send(line("ERROR", error.to_status())).await;
                            return;
                        }
                        None => return,
                    };
                    last_revision = event.revision;
                    match translate::<R>(&event, &filter) {
                        Ok(Some((kind, object))) => {
                            if tx.send(line(kind, render(&object))).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(error) => {
                            tracing::error!(key = %event.kv.key, revision = event.revision, "watch event does not decode");
                            let _ = tx.send(line("ERROR", error.to_status())).await;
                            return;
                        }
                    }
                }
                _ = ticker.tick(), if bookmarks => {
                    let bookmark = json!({
                        "kind": R::KIND,
                        "apiVersion": R::api_version(),
                        "metadata": {"resourceVersion": last_revision.to_string()},
                    });
                    if tx.send(line("BOOKMARK", bookmark)).await.is_err() {
                        return;
                    }
                }
                () = &mut deadline => return,
                () = tx.closed() => return,
            }
        }
    });
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_timeouts_are_random_without_timeout_seconds_and_capped() {
        let limits = WatchLimits::default();
        let (timeout, capped) = watch_timeout(None, &limits, |low, high| {
            assert_eq!((low, high), (1800, 3600));
            2000
        })
        .unwrap();
        assert_eq!((timeout, capped), (Duration::from_secs(2000), false));
        let (timeout, capped) = watch_timeout(Some("5"), &limits, |_, _| 0).unwrap();
        assert_eq!((timeout, capped), (Duration::from_secs(5), false));
        let (timeout, capped) = watch_timeout(Some("99999999999"), &limits, |_, _| 0).unwrap();
        assert_eq!((timeout, capped), (Duration::from_secs(3600), true));
        assert_eq!(
            watch_timeout(Some("-1"), &limits, |_, _| 0).unwrap_err(),
            "invalid timeoutSeconds: \"-1\""
        );
        for _ in 0..100 {
            let seconds = random_between(1800, 3600);
            assert!((1800..=3600).contains(&seconds));
        }
    }
}
