//! Ranges at a past revision: the current table, corrected by the history written since.
//!
//! A key's value at revision R is its current value unless it was written after R; then
//! it is the `prev` of its first event after R (no `prev`: the key did not exist at R).
//! So one read transaction scans the history `(R, current]` once, keeping the first
//! event of each key in the range, and merges those corrections into a scan of the
//! current table: the cost is the page plus the writes since R, never the whole table.

use std::collections::BTreeMap;
use std::ops::Bound;

use redb::ReadTransaction;

use super::{HISTORY, KV, META, META_COMPACTED, META_REVISION, backend, read_meta, record};
use crate::{KeyValue, RangeResult, Revision, StoreError};

/// The range of keys `prefix*` after `start_after` as they were at `revision`, at most
/// `limit` (0 = all), read from one transaction.
///
/// # Errors
/// [`StoreError::Compacted`] when `revision` < the compacted revision,
/// [`StoreError::FutureRevision`] when it is beyond the current one.
pub(super) fn range_at(
    txn: &ReadTransaction,
    prefix: &str,
    start_after: Option<&str>,
    limit: usize,
    revision: Revision,
) -> Result<RangeResult, StoreError> {
    let meta = txn
        .open_table(META)
        .map_err(backend("open the meta table"))?;
    let current = read_meta(&meta, META_REVISION)?;
    let compacted = read_meta(&meta, META_COMPACTED)?;
    if revision < compacted {
        return Err(StoreError::Compacted {
            requested: revision,
            compacted,
        });
    }
    if revision > current {
        return Err(StoreError::FutureRevision {
            requested: revision,
            current,
        });
    }
    let lower = match start_after {
        Some(after) if after >= prefix => Bound::Excluded(after),
        _ => Bound::Included(prefix),
    };
    let in_range = |key: &str| {
        key.starts_with(prefix)
            && match lower {
                Bound::Excluded(after) => key > after,
                _ => true,
            }
    };

    // The state at `revision` of every key in the range written since.
    let history = txn
        .open_table(HISTORY)
        .map_err(backend("open the history table"))?;
    let mut corrections: BTreeMap<String, Option<KeyValue>> = BTreeMap::new();
    let rows = history
        .range(revision.saturating_add(1)..)
        .map_err(backend("scan the history"))?;
    for row in rows {
        let (at, value) = row.map_err(backend("scan the history"))?;
        let event = record::decode_event(at.value(), value.value())?;
        if in_range(&event.kv.key) && !corrections.contains_key(&event.kv.key) {
            corrections.insert(event.kv.key, event.prev);
        }
    }

    let kv = txn.open_table(KV).map_err(backend("open the key table"))?;
    let scan = kv
        .range::<&str>((lower, Bound::Unbounded))
        .map_err(backend("scan keys"))?;
    let current = scan
        .map(|entry| {
            let (key, value) = entry.map_err(backend("scan keys"))?;
            record::decode_current(key.value(), value.value())
        })
        .take_while(|kv| kv.as_ref().map_or(true, |kv| kv.key.starts_with(prefix)));
    let (kvs, more) = merge(current, corrections, limit)?;
    Ok(RangeResult {
        kvs,
        more,
        revision,
    })
}

/// Merges the current keys (in key order) with the corrections: a corrected key takes
/// its corrected value (or is left out when it did not exist), others stay as they are.
/// Returns at most `limit` (0 = all) key-values and whether more followed.
fn merge(
    current: impl Iterator<Item = Result<KeyValue, StoreError>>,
    corrections: BTreeMap<String, Option<KeyValue>>,
    limit: usize,
) -> Result<(Vec<KeyValue>, bool), StoreError> {
    let mut current = current.peekable();
    let mut corrections = corrections.into_iter().peekable();
    let mut out = Vec::new();
    loop {
        let take_current = match (current.peek(), corrections.peek()) {
            (None, None) => return Ok((out, false)),
            (Some(Err(_)), _) => {
                return Err(current
                    .next()
                    .and_then(Result::err)
                    .unwrap_or(StoreError::Closed));
            }
            (Some(Ok(kv)), Some((key, _))) => kv.key < *key,
            (Some(Ok(_)), None) => true,
            (None, Some(_)) => false,
        };
        let next = if take_current {
            current.next().and_then(Result::ok)
        } else {
            let (key, value) = corrections.next().unwrap_or_default();
            // The current value of a corrected key, if any, is not what was at revision.
            if let Some(Ok(kv)) = current.peek()
                && kv.key == key
            {
                current.next();
            }
            value
        };
        if let Some(kv) = next {
            if limit != 0 && out.len() == limit {
                return Ok((out, true));
            }
            out.push(kv);
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn kv(key: &str, rev: Revision) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Bytes::from(format!("{key}@{rev}")),
            create_revision: rev,
            mod_revision: rev,
        }
    }

    fn keys(kvs: &[KeyValue]) -> Vec<String> {
        kvs.iter()
            .map(|kv| format!("{}@{}", kv.key, kv.mod_revision))
            .collect()
    }

    #[test]
    fn corrections_replace_remove_and_restore_keys() {
        // Now: a@2, b@9 (modified since), d@8 (created since). Then: b@3, c@4 (deleted
        // since), no d.
        let current = vec![kv("a", 2), kv("b", 9), kv("d", 8)];
        let corrections = BTreeMap::from([
            ("b".to_owned(), Some(kv("b", 3))),
            ("c".to_owned(), Some(kv("c", 4))),
            ("d".to_owned(), None),
        ]);
        let (all, more) =
            merge(current.clone().into_iter().map(Ok), corrections.clone(), 0).unwrap();
        assert_eq!(keys(&all), ["a@2", "b@3", "c@4"]);
        assert!(!more);
        let (page, more) = merge(current.into_iter().map(Ok), corrections, 2).unwrap();
        assert_eq!(keys(&page), ["a@2", "b@3"]);
        assert!(more);
    }

    #[test]
    fn a_limit_reached_exactly_is_not_more() {
        let current = vec![kv("a", 2), kv("b", 3)];
        let corrections = BTreeMap::from([("c".to_owned(), None)]);
        let (page, more) = merge(current.into_iter().map(Ok), corrections, 2).unwrap();
        assert_eq!(keys(&page), ["a@2", "b@3"]);
        assert!(!more);
    }
}
