//! Domain names as the zone module handles them: presentation text normalised and
//! checked ([`parse_name`]), the lower-case wire form that keys the name table
//! ([`name_key`]), zone membership and parents of wire keys, and text for messages and
//! logs.
//!
//! What does not belong here: which names a snapshot serves (see `build`), parsing names
//! out of queries (see `crate::server`'s wire module).

use hickory_proto::rr::Name;

/// Longest domain name on the wire, root label included.
const MAX_WIRE_NAME: usize = 255;

/// Lower case, surrounding whitespace and one trailing dot removed.
pub(super) fn normalize_text(text: &str) -> String {
    let text = text.trim();
    text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase()
}

/// A fully qualified, lower-case [`Name`] from presentation text; labels of letters,
/// digits, `-` and `_`, at most 63 octets each and 255 in all.
pub(super) fn parse_name(text: &str) -> Result<Name, String> {
    let text = normalize_text(text);
    if text.is_empty() {
        return Err("empty name (the root zone cannot be served)".to_owned());
    }
    let mut wire_len = 1;
    for label in text.split('.') {
        if label.is_empty() {
            return Err("empty label".to_owned());
        }
        if label.len() > 63 {
            return Err(format!("label {label:?} is longer than 63 octets"));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!("label {label:?} contains {c:?}"));
        }
        wire_len += label.len() + 1;
    }
    if wire_len > MAX_WIRE_NAME {
        return Err("name longer than 255 octets".to_owned());
    }
    Name::from_ascii(format!("{text}.")).map_err(|e| e.to_string())
}

/// The lower-case wire form of a name: the key of the name table.
pub(super) fn name_key(name: &Name) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 2);
    for label in name.iter() {
        key.push(u8::try_from(label.len()).unwrap_or(63));
        key.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    key.push(0);
    key
}

/// Presentation text of a wire-format name (for logs).
pub(crate) fn wire_to_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 {
            break;
        }
        let label = wire.get(pos + 1..pos + 1 + usize::from(len)).unwrap_or(&[]);
        for &b in label {
            if b.is_ascii_graphic() && b != b'.' && b != b'\\' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("\\{b:03}"));
            }
        }
        out.push('.');
        pos += 1 + usize::from(len);
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

/// Whether `key` (a wire name) is `zone` or below it.
pub(super) fn key_in_zone(key: &[u8], zone: &[u8]) -> bool {
    let mut pos = 0;
    loop {
        if key.get(pos..) == Some(zone) {
            return true;
        }
        match key.get(pos) {
            Some(&len) if len != 0 => pos += 1 + usize::from(len),
            _ => return false,
        }
    }
}

/// The parent of a wire name (`None` for the root).
pub(super) fn parent_key(key: &[u8]) -> Option<&[u8]> {
    let len = *key.first()?;
    if len == 0 {
        return None;
    }
    key.get(1 + usize::from(len)..)
}

/// Presentation text without the trailing dot.
pub(super) fn display(name: &Name) -> String {
    let text = name.to_ascii();
    text.strip_suffix('.').map(str::to_owned).unwrap_or(text)
}

pub(super) trait NameExt {
    /// The ancestor of `self` whose wire form is `key` (a suffix of self's).
    fn base_name_of_key(&self, key: &[u8]) -> Name;
}

impl NameExt for Name {
    fn base_name_of_key(&self, key: &[u8]) -> Name {
        let mut labels = 0usize;
        let mut pos = 0;
        while let Some(&len) = key.get(pos) {
            if len == 0 {
                break;
            }
            labels += 1;
            pos += 1 + usize::from(len);
        }
        self.trim_to(labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_helpers() {
        let key = name_key(&parse_name("A.b.Test.").unwrap());
        assert_eq!(key, b"\x01a\x01b\x04test\x00");
        assert_eq!(wire_to_text(&key), "a.b.test.");
        assert!(key_in_zone(&key, b"\x04test\x00"));
        assert!(!key_in_zone(&key, b"\x03est\x00"));
        assert_eq!(parent_key(&key), Some(&b"\x01b\x04test\x00"[..]));
        assert!(parse_name("a..b").is_err());
        assert!(parse_name(&"a".repeat(64)).is_err());
    }
}
