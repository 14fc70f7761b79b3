//! Server-side apply (SMD `Updater.Apply` under kube's manager chain): merge the
//! configuration, prune what the applier stopped applying, detect conflicts, move
//! ownership.

use crate::compare::compare_values;
use crate::conflict::{Conflicts, RawConflict, print_manager};
use crate::last_applied::{
    allowed_conflicts, build_last_applied, has_last_applied, set_last_applied,
};
use crate::managed::{Entry, Managed, Operation};
use crate::merge::merge_values;
use crate::remove::remove_items;
use crate::request::Request;
use crate::schema::Schema;
use crate::scope::{Scope, strip_set, without_managed_fields};
use crate::set::FieldSet;
use crate::time::normalize;
use crate::tofieldset::ensure_named_fields_are_members;
use crate::update::track_update;
use crate::value::value_eq;
use crate::walk::WalkError;
use serde_json::{Map, Value};

/// The result of a successful apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The new object, with `metadata.managedFields` set to `managed` (absent when
    /// there are no managers) and the last-applied annotation updated for kubectl.
    pub object: Value,
    /// The managers to store.
    pub managed: Managed,
    /// False when the apply left the object as it was (then only managers may change).
    pub changed: bool,
}

/// Why an apply was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// Fields other managers own with other values (409 Conflict in kube).
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The configuration (or the live object) is not valid for the schema.
    #[error("{0}")]
    Invalid(String),
}

impl From<WalkError> for ApplyError {
    fn from(e: WalkError) -> ApplyError {
        ApplyError::Invalid(e.0)
    }
}

const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Server-side apply of `config` onto `live` (None = create).
///
/// # Guarantees
/// - The object is `live` merged with `config` (outside the ignored fields, see
///   `scope`), minus what the applier applied before and no longer applies and nobody
///   else owns.
/// - The applier's Apply entry owns exactly what `config` sets; its time is
///   `request.now` when the object changed. Other managers lose the fields the apply
///   removed and (with `force`) the ones it took from them.
/// - For manager `kubectl`, conflicts on fields in the live object's last-applied
///   annotation are forced, and an existing annotation is set to `config`.
///
/// # Errors
/// `Conflicts` when another manager owns a field the apply changes and `force` is off;
/// `Invalid` for a configuration that is not an object, is in another apiVersion,
/// carries managedFields, or has a list item without its keys or duplicated.
pub fn apply(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    managed: Managed,
    request: &Request,
    force: bool,
) -> Result<Applied, ApplyError> {
    validate_config(config, request)?;
    let result = match apply_tracked(schema, live, config, managed.clone(), request, force) {
        Err(Refused::Conflicts(conflicts)) if request.manager == "kubectl" => {
            match live.and_then(|l| allowed_conflicts(schema, l, request.api_version)) {
                None => Err(Refused::Conflicts(conflicts)),
                Some(allowed) => {
                    let rest: Vec<RawConflict> = conflicts
                        .into_iter()
                        .filter(|c| !allowed.has(&c.path))
                        .collect();
                    if rest.is_empty() {
                        apply_tracked(schema, live, config, managed, request, true)
                    } else {
                        Err(Refused::Conflicts(rest))
                    }
                }
            }
        }
        other => other,
    };
    let (mut object, managed, changed) = match result {
        Ok(done) => done,
        Err(Refused::Conflicts(raw)) => {
            return Err(ApplyError::Conflicts(Conflicts::from_raw(raw)));
        }
        Err(Refused::Invalid(e)) => return Err(e),
    };
    if request.manager == "kubectl" && has_last_applied(&object) {
        set_last_applied(&mut object, build_last_applied(config));
    }
    set_managed_fields(&mut object, &managed);
    Ok(Applied {
        object,
        managed,
        changed,
    })
}

fn validate_config(config: &Value, request: &Request) -> Result<(), ApplyError> {
    if !config.is_object() {
        return Err(ApplyError::Invalid(
            "the applied configuration must be a JSON object".into(),
        ));
    }
    let version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if version != request.api_version {
        return Err(ApplyError::Invalid(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {}",
            request.api_version
        )));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    Ok(())
}

enum Refused {
    Conflicts(Vec<RawConflict>),
    Invalid(ApplyError),
}

impl From<WalkError> for Refused {
    fn from(e: WalkError) -> Refused {
        Refused::Invalid(e.into())
    }
}

/// skipNonAppliedManager, then the apply itself: returns the object, the managers and
/// whether the object changed.
fn apply_tracked(
    schema: &Schema,
    live: Option<&Value>,
    config: &Value,
    mut managed: Managed,
    request: &Request,
    force: bool,
) -> Result<(Value, Managed, bool), Refused> {
    let live = live.map(without_managed_fields);
    if managed.entries.is_empty()
        && let Some(live) = &live
    {
        let mut empty = Map::new();
        for key in ["apiVersion", "kind"] {
            if let Some(v) = config.get(key) {
                empty.insert(key.into(), v.clone());
            }
        }
        managed = track_update(
            schema,
            &Value::Object(empty),
            live,
            managed,
            request,
            BEFORE_FIRST_APPLY,
        )?;
    }
    let scope = Scope::of(request.subresource);
    let create = live.is_none();
    let live = live.unwrap_or_else(|| Value::Object(Map::new()));

    // The whole configuration must be valid, including what is not merged.
    merge_values(schema, &Value::Object(Map::new()), config)?;
    let mut merged = merge_values(schema, &live, &scope.project_config(config, create))?;

    let applier = Entry {
        manager: request.manager.to_string(),
        operation: Operation::Apply,
        api_version: request.api_version.to_string(),
        time: None,
        subresource: request.subresource.unwrap_or_default().to_string(),
        fields: scope.filter(&FieldSet::from_value(schema, config)),
    };
    let applier_id = applier.identifier();
    let previous = managed.remove(&applier_id);
    let last_set = previous
        .as_ref()
        .map(|p| p.fields.clone())
        .unwrap_or_default();
    managed.put(Entry {
        time: previous.and_then(|p| p.time),
        ..applier
    });

    let owned = managed
        .entries
        .iter()
        .fold(FieldSet::new(), |acc, e| acc.union(&e.fields));
    merged = prune(schema, &merged, &owned, &last_set);

    let cmp = compare_values(schema, &live, &merged)?.filtered(|s| scope.filter(s));
    let changed_fields = cmp.modified.union(&cmp.added);
    let mut conflicts = Vec::new();
    for entry in managed
        .entries
        .iter()
        .filter(|e| e.identifier() != applier_id)
    {
        let mine = entry.fields.intersection(&changed_fields);
        conflicts.extend(mine.paths().into_iter().map(|path| RawConflict {
            identifier: entry.identifier(),
            manager: print_manager(entry),
            path,
        }));
    }
    if !force && !conflicts.is_empty() {
        return Err(Refused::Conflicts(conflicts));
    }
    for entry in managed
        .entries
        .iter_mut()
        .filter(|e| e.identifier() != applier_id)
    {
        entry.fields = entry
            .fields
            .difference(&changed_fields)
            .difference(&cmp.removed);
    }
    let changed = !value_eq(&live, &merged);
    if let Some(entry) = managed.get_mut(&applier_id) {
        entry.fields = entry.fields.difference(&strip_set());
        if changed {
            entry.time = Some(normalize(request.now));
        }
    }
    managed.drop_empty();
    Ok((if changed { merged } else { live }, managed, changed))
}

/// SMD's prune: removes from `merged` what the applier applied last time (`last`) and
/// no longer applies, unless some manager (`owned`, the applier's new set included)
/// still owns it. Named struct fields count as owned when something under them is.
fn prune(schema: &Schema, merged: &Value, owned: &FieldSet, last: &FieldSet) -> Value {
    if last.is_empty() {
        return merged.clone();
    }
    let named = |s: &FieldSet| ensure_named_fields_are_members(schema, s);
    let last = named(last);
    let merged_set = named(&FieldSet::from_value(schema, merged));
    // Remove everything the applier applied last time...
    let pruned = remove_items(schema, merged, &last);
    // ...add back whatever someone owns...
    let pruned_set = named(&FieldSet::from_value(schema, &pruned));
    let pruned = remove_items(
        schema,
        merged,
        &merged_set.difference(&pruned_set.union(&named(owned))),
    );
    // ...and anything removed on the way that the applier never applied.
    let pruned_set = named(&FieldSet::from_value(schema, &pruned));
    remove_items(
        schema,
        merged,
        &merged_set.difference(&pruned_set).intersection(&last),
    )
}

fn set_managed_fields(object: &mut Value, managed: &Managed) {
    let Value::Object(root) = object else { return };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if managed.entries.is_empty() {
        meta.shift_remove("managedFields");
    } else {
        meta.insert("managedFields".into(), managed.encode());
    }
}
