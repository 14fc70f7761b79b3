//! capManagersManager: at most ten Update managers; the oldest are merged, per API
//! version, into one `ancient-changes` manager.

use crate::managed::{Entry, Managed, Operation};
use std::collections::BTreeMap;

/// kube's DefaultMaxUpdateManagers.
pub(crate) const MAX_UPDATE_MANAGERS: usize = 10;

const OLD_UPDATES_MANAGER: &str = "ancient-changes";

/// Merges the oldest Update managers into `ancient-changes` until at most `max` are left.
pub(crate) fn cap_update_managers(managed: &mut Managed, max: usize) {
    let mut updaters: Vec<(i64, String)> = managed
        .entries
        .iter()
        .filter(|e| e.operation == Operation::Update)
        .map(|e| (e.seconds(), e.identifier()))
        .collect();
    if updaters.len() <= max {
        return;
    }
    updaters.sort();
    let mut length = updaters.len();
    let mut first_of_version: BTreeMap<String, String> = BTreeMap::new();
    for (_, id) in updaters {
        if length <= max {
            break;
        }
        let Some(entry) = managed.get(&id).cloned() else {
            continue;
        };
        let bucket = Entry {
            manager: OLD_UPDATES_MANAGER.into(),
            operation: Operation::Update,
            api_version: entry.api_version.clone(),
            time: None,
            subresource: String::new(),
            fields: Default::default(),
        };
        let bucket_id = bucket.identifier();
        if id == bucket_id {
            first_of_version
                .entry(entry.api_version.clone())
                .or_insert(id);
            continue;
        }
        let Some(first) = first_of_version.get(&entry.api_version).cloned() else {
            first_of_version.insert(entry.api_version.clone(), id);
            continue;
        };
        if managed.get(&bucket_id).is_none()
            && let Some(first_entry) = managed.remove(&first)
        {
            managed.put(Entry {
                time: first_entry.time,
                fields: first_entry.fields,
                ..bucket
            });
        }
        if let Some(b) = managed.get_mut(&bucket_id) {
            b.fields = entry.fields.union(&b.fields);
            b.time = entry.time.clone();
        }
        managed.remove(&id);
        length -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Path;
    use crate::set::FieldSet;

    #[test]
    fn merges_the_oldest_update_managers() {
        let mut managed = Managed::default();
        for i in 0..12 {
            let mut fields = FieldSet::new();
            fields.insert(&Path::fields(["spec", &format!("f{i:02}")]));
            managed.entries.push(Entry {
                manager: format!("m{i:02}"),
                operation: Operation::Update,
                api_version: "v1".into(),
                time: Some(format!("2026-11-24T11:00:{i:02}Z")),
                subresource: String::new(),
                fields,
            });
        }
        managed.entries.push(Entry {
            manager: "applier".into(),
            operation: Operation::Apply,
            api_version: "v1".into(),
            time: None,
            subresource: String::new(),
            fields: FieldSet::new(),
        });
        cap_update_managers(&mut managed, MAX_UPDATE_MANAGERS);
        let updates: Vec<&Entry> = managed
            .entries
            .iter()
            .filter(|e| e.operation == Operation::Update)
            .collect();
        assert_eq!(updates.len(), 10);
        let ancient = managed
            .entries
            .iter()
            .find(|e| e.manager == "ancient-changes")
            .unwrap();
        let paths: Vec<String> = ancient
            .fields
            .paths()
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(paths, [".spec.f00", ".spec.f01", ".spec.f02"]);
        assert_eq!(ancient.time.as_deref(), Some("2026-11-24T11:00:02Z"));
        assert!(managed.entries.iter().any(|e| e.manager == "applier"));
        assert!(!managed.entries.iter().any(|e| e.manager == "m02"));
    }
}
