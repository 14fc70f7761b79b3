//! Kubernetes core/v1 `Namespace`s: the scope every namespaced object lives in, with
//! kube's lifecycle (`Active`, then `Terminating` while its content is deleted, then
//! gone) and the names the API server creates at start.
//!
//! Only the types, their defaults and validation, and the lifecycle's vocabulary live
//! here; admission is the API server's (`registry::namespaces`), the deletion of the
//! content the hub's (`hub::namespaces`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, ObjectMeta, string_enum, validate_object_meta};
use crate::names;
use crate::validation::{FieldError, FieldPath};

/// The finalizer in `spec.finalizers` that the namespace controller removes once the
/// namespace's content is gone (kube's `FinalizerKubernetes`).
pub const FINALIZER_KUBERNETES: &str = "kubernetes";

/// Namespaces that can never be deleted (kube's NamespaceLifecycle immortal set).
pub const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

/// Namespaces the API server creates at start, as kube-apiserver does.
pub const BOOTSTRAP: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Finalizer names that need no domain prefix (kube's `IsStandardFinalizerName`).
const STANDARD_FINALIZERS: [&str; 3] = [FINALIZER_KUBERNETES, "orphan", "foregroundDeletion"];

/// Condition types the namespace controller sets while it deletes the content, in kube's
/// order (`NamespaceConditionType`).
pub const CONDITION_TYPES: [&str; 5] = [
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
    "NamespaceDeletionContentFailure",
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
];

string_enum! {
    /// Where a namespace is in its lifecycle.
    pub enum NamespacePhase {
        /// Objects may be created in it.
        Active => "Active",
        /// It is being deleted: its content goes, nothing new may be created in it.
        Terminating => "Terminating",
    }
}

/// `spec` of a Namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSpec {
    /// Finalizers that must be empty before the namespace is removed from storage:
    /// `kubernetes` (set on create) goes once the namespace controller has deleted
    /// everything in it. Changed through the `finalize` subresource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

/// `status` of a Namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceStatus {
    /// `Active`, or `Terminating` once it is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<NamespacePhase>,
    /// What the deletion of the namespace's content is waiting for (kube's
    /// `NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A core/v1 Namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NamespaceSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NamespaceStatus>,
}

impl Namespace {
    /// A new Namespace named `name`, as a client would send it.
    pub fn named(name: &str) -> Self {
        Self {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            metadata: ObjectMeta::named(name),
            ..Self::default()
        }
    }

    /// The phase, `Active` when none is stored yet.
    pub fn phase(&self) -> NamespacePhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(NamespacePhase::Active)
    }

    /// Whether the namespace is being deleted (new content is refused).
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some() || self.phase() == NamespacePhase::Terminating
    }

    /// Whether `name` is one of the namespaces that can never be deleted.
    pub fn is_immortal(name: &str) -> bool {
        IMMORTAL.contains(&name)
    }
}

impl crate::Resource for Namespace {
    const KIND: &'static str = "Namespace";
    const LIST_KIND: &'static str = "NamespaceList";
    const PLURAL: &'static str = "namespaces";
    const SINGULAR: &'static str = "namespace";
    const SHORT_NAMES: &'static [&'static str] = &["ns"];
    const NAMESPACED: bool = false;
    const GROUP: &'static str = "";
    const VERSION: &'static str = "v1";
    const SELECTABLE_FIELDS: &'static [&'static str] = &["status.phase"];

    fn selectable_field(&self, field: &str) -> Option<String> {
        (field == "status.phase").then(|| self.phase().as_str().to_string())
    }

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn spec_value(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }

    fn copy_status_from(&mut self, other: &Self) {
        self.status = other.status.clone();
    }

    fn clear_status(&mut self) {
        self.status = None;
    }

    /// A new namespace (no status yet) is `Active` with the `kubernetes` finalizer; a
    /// namespace not being deleted keeps that finalizer (kube lets only the namespace
    /// controller remove it, once deletion has begun).
    fn apply_defaults(&mut self) {
        if self.metadata.deletion_timestamp.is_none()
            && !self
                .spec
                .finalizers
                .iter()
                .any(|f| f == FINALIZER_KUBERNETES)
        {
            self.spec.finalizers.insert(0, FINALIZER_KUBERNETES.into());
        }
        let status = self.status.get_or_insert_with(NamespaceStatus::default);
        status.phase.get_or_insert(NamespacePhase::Active);
    }

    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_meta(
            &self.metadata,
            false,
            names::dns1123_label,
            &FieldPath::new("metadata"),
        );
        let path = FieldPath::new("spec").child("finalizers");
        for (i, finalizer) in self.spec.finalizers.iter().enumerate() {
            let at = path.index(i);
            let problems = names::qualified_name(finalizer);
            if !problems.is_empty() {
                errors.extend(
                    problems
                        .into_iter()
                        .map(|msg| FieldError::invalid(at.clone(), finalizer, msg)),
                );
            } else if !finalizer.contains('/') && !STANDARD_FINALIZERS.contains(&finalizer.as_str())
            {
                errors.push(FieldError::invalid(
                    at,
                    finalizer,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
        errors
    }

    fn holds_deletion(&self) -> bool {
        !self.spec.finalizers.is_empty()
    }

    fn begin_deletion(&mut self) {
        self.status
            .get_or_insert_with(NamespaceStatus::default)
            .phase = Some(NamespacePhase::Terminating);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Resource;

    #[test]
    fn a_new_namespace_is_active_with_the_kubernetes_finalizer() {
        let mut ns = Namespace::named("shop");
        ns.apply_defaults();
        assert_eq!(ns.spec.finalizers, ["kubernetes"]);
        assert_eq!(ns.phase(), NamespacePhase::Active);
        assert!(ns.validate().is_empty());
        let again = {
            let mut n = ns.clone();
            n.apply_defaults();
            n
        };
        assert_eq!(again, ns, "defaults are idempotent");
    }

    #[test]
    fn a_namespace_being_deleted_may_lose_the_finalizer() {
        let mut ns = Namespace::named("shop");
        ns.apply_defaults();
        ns.metadata.deletion_timestamp = Some(crate::Time(chrono::Utc::now()));
        ns.begin_deletion();
        ns.spec.finalizers.clear();
        ns.apply_defaults();
        assert!(ns.spec.finalizers.is_empty());
        assert!(!ns.holds_deletion());
        assert!(ns.is_terminating());
        assert_eq!(ns.phase(), NamespacePhase::Terminating);
    }

    #[test]
    fn names_are_dns1123_labels() {
        let long = "a".repeat(64);
        for bad in ["Shop", "a.b", "-a", long.as_str()] {
            let ns = Namespace::named(bad);
            let errors = ns.validate();
            assert!(
                errors.iter().any(|e| e.path.to_string() == "metadata.name"),
                "{bad}: {errors:?}"
            );
        }
        assert!(Namespace::named(&"a".repeat(63)).validate().is_empty());
    }

    #[test]
    fn finalizers_are_standard_or_qualified() {
        let mut ns = Namespace::named("shop");
        ns.spec.finalizers = vec!["kubernetes".into(), "example.com/x".into(), "mine".into()];
        let errors = ns.validate();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path.to_string(), "spec.finalizers[2]");
    }

    #[test]
    fn phase_decodes_any_capitalisation_and_selects() {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"}, "status": {"phase": "terminating"}
        }))
        .unwrap();
        assert!(ns.is_terminating());
        assert_eq!(
            ns.selectable_field("status.phase").as_deref(),
            Some("Terminating")
        );
        assert!(Namespace::is_immortal("default"));
        assert!(!Namespace::is_immortal("kube-node-lease"));
    }
}
