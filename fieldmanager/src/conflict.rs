//! Apply conflicts and their wording, as apimachinery's `conflict.go` (`printManager`,
//! `getConflictMessage`).

use crate::managed::{Entry, Operation};
use crate::path::Path;
use crate::value::go_quote;

/// One field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The manager as kube prints it: `"kubectl"`, `"ctl" using v1`,
    /// `"ctl" with subresource "status" using v1`.
    pub manager: String,
    /// The field, as a path (`.spec.replicas`).
    pub field: String,
}

/// The conflicts of one apply, sorted by manager identifier, then path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

/// kube's printManager for an entry's identity. The identity has no time (kube's
/// manager identifiers never carry one), so an Update manager prints as
/// `"name" using apiVersion`.
pub(crate) fn print_manager(entry: &Entry) -> String {
    let mut out = go_quote(&entry.manager);
    if !entry.subresource.is_empty() {
        out = format!("{out} with subresource {}", go_quote(&entry.subresource));
    }
    if entry.operation == Operation::Update {
        out = format!("{out} using {}", entry.api_version);
    }
    out
}

/// A conflict before it is printed: the manager's identity, for sorting and for the
/// last-applied check.
#[derive(Clone, Debug)]
pub(crate) struct RawConflict {
    pub identifier: String,
    pub manager: String,
    pub path: Path,
}

impl Conflicts {
    pub(crate) fn from_raw(mut raw: Vec<RawConflict>) -> Conflicts {
        raw.sort_by(|a, b| a.identifier.cmp(&b.identifier));
        Conflicts(
            raw.into_iter()
                .map(|c| Conflict {
                    manager: c.manager,
                    field: c.path.to_string(),
                })
                .collect(),
        )
    }

    /// kube's getConflictMessage: `Apply failed with 1 conflict: conflict with "kubectl":
    /// .spec.x`, or per manager a `conflicts with ...:` line followed by `- path` lines.
    pub fn message(&self) -> String {
        if let [only] = self.0.as_slice() {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                only.manager, only.field
            );
        }
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for c in &self.0 {
            match groups.iter_mut().find(|(m, _)| *m == c.manager) {
                Some((_, paths)) => paths.push(&c.field),
                None => groups.push((&c.manager, vec![&c.field])),
            }
        }
        let mut lines = Vec::new();
        for (manager, paths) in groups {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        format!(
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }
}

impl Conflicts {
    /// The `details.causes` of kube's 409 apply-conflict Status (`NewConflictError`):
    /// one `{"reason":"FieldManagerConflict","message":"conflict with <manager>","field":
    /// "<path>"}` per conflict (a StatusCause's type is serialized as `reason`).
    pub fn status_causes(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.0
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "reason": "FieldManagerConflict",
                        "message": format!("conflict with {}", c.manager),
                        "field": c.field,
                    })
                })
                .collect(),
        )
    }
}

impl std::fmt::Display for Conflicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::set::FieldSet;

    fn entry(manager: &str, op: Operation, sub: &str) -> Entry {
        Entry {
            manager: manager.into(),
            operation: op,
            api_version: "fedingress.io/v1alpha1".into(),
            time: Some("2026-11-24T11:00:00Z".into()),
            subresource: sub.into(),
            fields: FieldSet::new(),
        }
    }

    #[test]
    fn prints_managers_like_kube() {
        assert_eq!(
            print_manager(&entry("kubectl", Operation::Apply, "")),
            r#""kubectl""#
        );
        assert_eq!(
            print_manager(&entry("ctl", Operation::Update, "")),
            r#""ctl" using fedingress.io/v1alpha1"#
        );
        assert_eq!(
            print_manager(&entry("ctl", Operation::Update, "status")),
            r#""ctl" with subresource "status" using fedingress.io/v1alpha1"#
        );
        assert_eq!(
            print_manager(&entry("a", Operation::Apply, "status")),
            r#""a" with subresource "status""#
        );
    }

    #[test]
    fn messages_match_kube() {
        let one = Conflicts(vec![Conflict {
            manager: r#""kubectl""#.into(),
            field: ".spec.x".into(),
        }]);
        assert_eq!(
            one.message(),
            r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.x"#
        );
        let two = Conflicts(vec![
            Conflict {
                manager: r#""a""#.into(),
                field: ".x".into(),
            },
            Conflict {
                manager: r#""a""#.into(),
                field: ".y".into(),
            },
            Conflict {
                manager: r#""b" using v1"#.into(),
                field: ".z".into(),
            },
        ]);
        assert_eq!(
            two.message(),
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .x\n- .y\nconflicts with \"b\" using v1:\n- .z"
        );
    }
}
