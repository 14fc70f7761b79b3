//! Records core/v1 Events (the hub's routing changes about FederatedIngresses, the
//! store-health probe's outages), so `kubectl get events` and `kubectl describe` show
//! the history. A repeat of the same
//! event on the same object bumps its count instead of adding an event; events older
//! than [`EVENT_TTL`] are pruned, as kube-apiserver does (one hour).

use std::collections::HashMap;
use std::time::Duration;

use fedingress_api::event::{Event, EventSource, ObjectReference};
use fedingress_api::{ObjectMeta, Resource, Time};

use crate::registry::{Filter, Registry, Scope};

/// How long events are kept.
pub const EVENT_TTL: Duration = Duration::from_secs(3600);
/// The `source.component` of events the hub records.
pub const COMPONENT: &str = "fedingress-gslb";

/// Identifies "the same event": object (kind, name, uid), reason, message.
type EventKey = (String, String, String);

pub struct Recorder {
    registry: Registry,
    /// Event names of recent events, to bump counts.
    recent: HashMap<EventKey, String>,
}

impl Recorder {
    pub fn new(registry: Registry) -> Self {
        Self {
            registry,
            recent: HashMap::new(),
        }
    }

    /// Records an event about `object`.
    pub async fn record<R: Resource>(
        &mut self,
        object: &R,
        type_: &str,
        reason: &str,
        message: &str,
        now: Time,
    ) {
        let meta = object.metadata();
        let about = ObjectReference {
            api_version: R::api_version(),
            kind: R::KIND.into(),
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        };
        self.record_about(about, type_, reason, message, now).await;
    }

    /// Records an event about the object `about` names (stored in its namespace).
    pub async fn record_about(
        &mut self,
        about: ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
        now: Time,
    ) {
        let namespace = about.namespace.clone();
        let key = (
            format!("{}/{}/{}", about.kind, about.name, about.uid),
            reason.to_string(),
            message.to_string(),
        );
        if let Some(name) = self.recent.get(&key).cloned() {
            let bumped = self
                .registry
                .update::<Event>(Some(&namespace), &name, Scope::Main, false, |current| {
                    let mut next = current.clone();
                    next.count += 1;
                    next.last_timestamp = Some(now);
                    next.metadata.resource_version = None;
                    Ok(next)
                })
                .await;
            if bumped.is_ok() {
                return;
            }
            self.recent.remove(&key);
        }
        // Time plus a random part: several events of one object in one pass get
        // distinct names.
        let suffix = format!(
            "{:x}{:04x}",
            now.0.timestamp_nanos_opt().unwrap_or_default(),
            rand::random::<u16>()
        );
        let name = format!("{}.{suffix}", about.name);
        let kind = about.kind.clone();
        let event = Event {
            api_version: "v1".into(),
            kind: "Event".into(),
            metadata: ObjectMeta::namespaced(namespace.clone(), name.clone()),
            involved_object: about,
            reason: reason.into(),
            message: message.into(),
            source: EventSource {
                component: COMPONENT.into(),
            },
            first_timestamp: Some(now),
            last_timestamp: Some(now),
            count: 1,
            type_: type_.into(),
            reporting_component: COMPONENT.into(),
        };
        match self
            .registry
            .create(Some(&namespace), event, now, false)
            .await
        {
            Ok(_) => {
                tracing::info!(kind = %kind, name = %name, reason, message, "event recorded");
                self.recent.insert(key, name);
            }
            // Namespace lifecycle: no new Events in a namespace being deleted.
            Err(e) if e.code == http::StatusCode::FORBIDDEN => {
                tracing::debug!(reason, error = %e, "event not recorded: its namespace is being deleted");
            }
            Err(e) => tracing::warn!(reason, error = %e, "recording an event failed"),
        }
    }

    /// Deletes events whose last occurrence is older than [`EVENT_TTL`].
    pub async fn prune(&mut self, now: Time) {
        let Ok(page) = self
            .registry
            .list::<Event>(None, &Filter::default(), 0, None)
            .await
        else {
            return;
        };
        let ttl =
            chrono::Duration::from_std(EVENT_TTL).unwrap_or_else(|_| chrono::Duration::hours(1));
        let mut pruned = Vec::new();
        for event in page.items {
            let last = event.last_timestamp.or(event.metadata.creation_timestamp);
            if last.is_some_and(|t| now.0 - t.0 > ttl) {
                let meta = &event.metadata;
                let name = meta.name.clone().unwrap_or_default();
                let deleted = self
                    .registry
                    .delete::<Event>(
                        meta.namespace.as_deref(),
                        &name,
                        &Default::default(),
                        now,
                        false,
                    )
                    .await;
                if deleted.is_ok() {
                    pruned.push(name);
                }
            }
        }
        self.recent.retain(|_, name| !pruned.contains(name));
    }
}
