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
