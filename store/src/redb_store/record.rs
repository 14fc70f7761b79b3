//! The on-disk encoding of current key-values and history events.
//!
//! Hand-rolled little-endian records rather than a serde format: values are opaque bytes
//! (a self-describing format would bloat or copy them) and every decode must turn bad
//! bytes into [`StoreError::Corrupt`] instead of panicking.
//!
//! Current table value: `create_rev i64 | mod_rev i64 | value bytes (rest)`.
//!
//! History table value (the key of the table is the event's revision):
//! `kind u8 (1 put, 2 delete) | key_len u64 | key | create_rev i64 | value_len u64 | value |
//! prev_tag u8 (0 none, 1 some) | [prev_create i64 | prev_mod i64 | prev_len u64 | prev_value]`.
//! For a delete, `value` is the deleted value; the event's kv has mod_revision = the
//! event's revision.

use bytes::Bytes;

use crate::{Event, EventKind, KeyValue, Revision, StoreError};

const KIND_PUT: u8 = 1;
const KIND_DELETE: u8 = 2;
const PREV_NONE: u8 = 0;
const PREV_SOME: u8 = 1;

/// Encodes the current-table value of `kv`.
pub(super) fn encode_current(kv: &KeyValue) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + kv.value.len());
    out.extend_from_slice(&kv.create_revision.to_le_bytes());
    out.extend_from_slice(&kv.mod_revision.to_le_bytes());
    out.extend_from_slice(&kv.value);
    out
}

/// Decodes a current-table value stored under `key`.
pub(super) fn decode_current(key: &str, bytes: &[u8]) -> Result<KeyValue, StoreError> {
    let mut reader = Reader::new(bytes, || format!("current value of key {key:?}"));
    let create_revision = reader.i64()?;
    let mod_revision = reader.i64()?;
    let value = Bytes::copy_from_slice(reader.rest());
    Ok(KeyValue {
        key: key.to_owned(),
        value,
        create_revision,
        mod_revision,
    })
}

/// Encodes the history-table value of `event` (whose revision is the table key).
pub(super) fn encode_event(event: &Event) -> Vec<u8> {
    let prev_len = event.prev.as_ref().map_or(0, |p| 24 + p.value.len());
    let mut out =
        Vec::with_capacity(1 + 8 + event.kv.key.len() + 16 + event.kv.value.len() + 1 + prev_len);
    out.push(match event.kind {
        EventKind::Put => KIND_PUT,
        EventKind::Delete => KIND_DELETE,
    });
    out.extend_from_slice(&(event.kv.key.len() as u64).to_le_bytes());
    out.extend_from_slice(event.kv.key.as_bytes());
    out.extend_from_slice(&event.kv.create_revision.to_le_bytes());
    out.extend_from_slice(&(event.kv.value.len() as u64).to_le_bytes());
    out.extend_from_slice(&event.kv.value);
    match &event.prev {
        None => out.push(PREV_NONE),
        Some(prev) => {
            out.push(PREV_SOME);
            out.extend_from_slice(&prev.create_revision.to_le_bytes());
            out.extend_from_slice(&prev.mod_revision.to_le_bytes());
            out.extend_from_slice(&(prev.value.len() as u64).to_le_bytes());
            out.extend_from_slice(&prev.value);
        }
    }
    out
}

/// Decodes the history-table value stored at `revision`.
pub(super) fn decode_event(revision: Revision, bytes: &[u8]) -> Result<Event, StoreError> {
    let mut reader = Reader::new(bytes, || format!("history record at revision {revision}"));
    let kind = match reader.u8()? {
        KIND_PUT => EventKind::Put,
        KIND_DELETE => EventKind::Delete,
        other => return Err(reader.corrupt(&format!("unknown event kind {other}"))),
    };
    let key = reader.slice()?;
    let key = std::str::from_utf8(key)
        .map_err(|_| reader.corrupt("key is not UTF-8"))?
        .to_owned();
    let create_revision = reader.i64()?;
    let value = reader.bytes()?;
    let prev = match reader.u8()? {
        PREV_NONE => None,
        PREV_SOME => {
            let create_revision = reader.i64()?;
            let mod_revision = reader.i64()?;
            let value = reader.bytes()?;
            Some(KeyValue {
                key: key.clone(),
                value,
                create_revision,
                mod_revision,
            })
        }
        other => return Err(reader.corrupt(&format!("unknown prev tag {other}"))),
    };
    if !reader.rest().is_empty() {
        return Err(reader.corrupt("trailing bytes"));
    }
    Ok(Event {
        revision,
        kind,
        kv: KeyValue {
            key,
            value,
            create_revision,
            mod_revision: revision,
        },
        prev,
    })
}

/// A bounds-checked cursor over a record.
struct Reader<'a, F> {
    bytes: &'a [u8],
    what: F,
}

impl<'a, F: Fn() -> String> Reader<'a, F> {
    fn new(bytes: &'a [u8], what: F) -> Self {
        Self { bytes, what }
    }

    fn corrupt(&self, problem: &str) -> StoreError {
        StoreError::Corrupt {
            detail: format!("{}: {problem}", (self.what)()),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if n > self.bytes.len() {
            return Err(self.corrupt("truncated"));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.array::<1>()?[0])
    }

    fn i64(&mut self) -> Result<i64, StoreError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A length-prefixed (u64) slice.
    fn slice(&mut self) -> Result<&'a [u8], StoreError> {
        let len = u64::from_le_bytes(self.array()?);
        self.take(usize::try_from(len).unwrap_or(usize::MAX))
    }

    fn bytes(&mut self) -> Result<Bytes, StoreError> {
        Ok(Bytes::copy_from_slice(self.slice()?))
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create: Revision, modified: Revision) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: create,
            mod_revision: modified,
        }
    }

    #[test]
    fn current_round_trips() {
        let original = kv("/a/b", "hello", 3, 7);
        let decoded = decode_current("/a/b", &encode_current(&original)).unwrap();
        assert_eq!(decoded, original);
    }

    #[test]
    fn events_round_trip() {
        let put = Event {
            revision: 9,
            kind: EventKind::Put,
            kv: kv("/k", "new", 4, 9),
            prev: Some(kv("/k", "old", 4, 6)),
        };
        let delete = Event {
            revision: 10,
            kind: EventKind::Delete,
            kv: kv("/k", "new", 4, 10),
            prev: Some(kv("/k", "new", 4, 9)),
        };
        let create = Event {
            revision: 2,
            kind: EventKind::Put,
            kv: kv("/ü", "", 2, 2),
            prev: None,
        };
        for event in [put, delete, create] {
            let decoded = decode_event(event.revision, &encode_event(&event)).unwrap();
            assert_eq!(decoded.kind, event.kind);
            assert_eq!(decoded.kv, event.kv);
            assert_eq!(decoded.prev, event.prev);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let event = Event {
            revision: 9,
            kind: EventKind::Put,
            kv: kv("/k", "new", 4, 9),
            prev: Some(kv("/k", "old", 4, 6)),
        };
        let good = encode_event(&event);
        // Every truncation and every single-byte corruption must decode or fail cleanly.
        for len in 0..good.len() {
            assert!(decode_event(9, &good[..len]).is_err());
        }
        for i in 0..good.len() {
            for byte in [0u8, 0x7f, 0xff] {
                let mut bad = good.clone();
                bad[i] = byte;
                let _ = decode_event(9, &bad);
            }
        }
        assert!(decode_current("k", &[1, 2, 3]).is_err());
        assert!(decode_event(1, &[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
