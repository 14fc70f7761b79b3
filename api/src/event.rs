//! Kubernetes core/v1 `Event`s: the history of routing changes on a FederatedIngress
//! (a cluster entering or leaving its DNS answers, and why), as `kubectl get events`
//! and `kubectl describe` show them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{ObjectMeta, Time, validate_object_meta};
use crate::names;
use crate::validation::{FieldError, FieldPath};

/// The object an event is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// Who reported an event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventSource {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub component: String,
}

/// A core/v1 Event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The object this event is about.
    #[serde(default)]
    pub involved_object: ObjectReference,
    /// Short, machine-readable reason in PascalCase, e.g. `ClusterLeftAnswers`.
    #[serde(default)]
    pub reason: String,
    /// What happened, for a human.
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub source: EventSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_timestamp: Option<Time>,
    /// How often this event happened (repeats bump it instead of adding events).
    #[serde(default)]
    pub count: i32,
    /// `Normal` or `Warning`.
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reporting_component: String,
}

impl crate::Resource for Event {
    const KIND: &'static str = "Event";
    const LIST_KIND: &'static str = "EventList";
    const PLURAL: &'static str = "events";
    const SINGULAR: &'static str = "event";
    const SHORT_NAMES: &'static [&'static str] = &["ev"];
    const NAMESPACED: bool = true;
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const SELECTABLE_FIELDS: &'static [&'static str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "reason",
        "type",
        "source",
    ];

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn spec_value(&self) -> serde_json::Value {
        // Events have no spec: everything but metadata is their content.
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.remove("metadata");
        }
        value
    }

    fn copy_status_from(&mut self, _other: &Self) {}

    fn clear_status(&mut self) {}

    fn apply_defaults(&mut self) {
        if self.type_.is_empty() {
            self.type_ = "Normal".into();
        }
        if self.count == 0 {
            self.count = 1;
        }
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_meta(
            &self.metadata,
            true,
            names::dns1123_subdomain,
            &FieldPath::new("metadata"),
        );
        if self.involved_object.name.is_empty() {
            errors.push(FieldError::required(
                FieldPath::new("involvedObject").child("name"),
                "",
            ));
        }
        if !matches!(self.type_.as_str(), "Normal" | "Warning") {
            errors.push(FieldError::not_supported(
                FieldPath::new("type"),
                &self.type_,
                &["Normal", "Warning"],
            ));
        }
        errors
    }

    fn selectable_field(&self, field: &str) -> Option<String> {
        let o = &self.involved_object;
        Some(match field {
            "involvedObject.kind" => o.kind.clone(),
            "involvedObject.namespace" => o.namespace.clone(),
            "involvedObject.name" => o.name.clone(),
            "involvedObject.uid" => o.uid.clone(),
            "involvedObject.apiVersion" => o.api_version.clone(),
            "reason" => self.reason.clone(),
            "type" => self.type_.clone(),
            "source" => self.source.component.clone(),
            _ => return None,
        })
    }
}
