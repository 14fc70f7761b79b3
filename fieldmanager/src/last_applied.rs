//! kubectl's `last-applied-configuration` annotation in server-side apply (kube's
//! lastAppliedManager and lastAppliedUpdater): conflicts on fields kubectl applied
//! client-side are forced, and the annotation keeps following the applied configuration.

use crate::compare::compare_values;
use crate::schema::Schema;
use crate::set::FieldSet;
use crate::value::go_json;
use serde_json::{Map, Value};

/// The annotation kubectl's client-side apply keeps.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// kube's TotalAnnotationSizeLimitB.
const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn annotation(obj: &Value) -> Option<&str> {
    obj.get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED_ANNOTATION)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// True when the object has a non-empty last-applied annotation.
pub(crate) fn has_last_applied(obj: &Value) -> bool {
    annotation(obj).is_some()
}

/// The fields a conflict may be forced on: those set in the live object's last-applied
/// configuration (when it is in `api_version`) that still hold the values it set.
pub(crate) fn allowed_conflicts(
    schema: &Schema,
    live: &Value,
    api_version: &str,
) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(annotation(live)?).ok()?;
    if !last.is_object() || last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    let set = FieldSet::from_value(schema, &last);
    let cmp = compare_values(schema, &last, live).ok()?;
    Some(
        set.difference(&cmp.modified)
            .difference(&cmp.added)
            .difference(&cmp.removed),
    )
}

/// The annotation's new value: the applied configuration without the annotation, as
/// Go's json.Encoder writes it (sorted keys, HTML escaped, newline at the end).
pub(crate) fn build_last_applied(config: &Value) -> String {
    let mut config = config.clone();
    if let Some(Value::Object(annotations)) = config.pointer_mut("/metadata/annotations") {
        annotations.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    format!("{}\n", go_json(&config))
}

/// Sets the annotation, or drops it when the annotations would exceed kube's total size
/// limit.
pub(crate) fn set_last_applied(obj: &mut Value, value: String) {
    let Some(Value::Object(root)) = Some(obj) else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(annotations) = annotations else {
        return;
    };
    annotations.insert(LAST_APPLIED_ANNOTATION.into(), Value::String(value));
    let size: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        annotations.shift_remove(LAST_APPLIED_ANNOTATION);
    }
}
