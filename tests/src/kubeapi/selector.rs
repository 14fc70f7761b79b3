//! Label and field selectors, parsed from the `labelSelector` and `fieldSelector`
//! query parameters and matched against stored objects.
//!
//! Label selectors follow `k8s.io/apimachinery/pkg/labels`: `k=v`, `k==v`, `k!=v`,
//! `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, joined by commas. Field selectors accept
//! any dotted path into the object (`metadata.name`, `type`, `involvedObject.name`) with
//! `=`, `==` and `!=`; kube-apiserver allows only a few fields per type and rejects the
//! rest, this fake allows every path and compares its value as a string (a missing field
//! reads as the empty string).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelRequirement>);

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_top_level(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_label_term(term)?);
        }
        Ok(Self(requirements))
    }

    /// Matches against an object's `metadata.labels`.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::NotExists(k) => get(k).is_none(),
            LabelRequirement::In(k, values) => {
                get(k).is_some_and(|v| values.iter().any(|x| x == v))
            }
            LabelRequirement::NotIn(k, values) => {
                !get(k).is_some_and(|v| values.iter().any(|x| x == v))
            }
        })
    }
}

/// Splits at commas outside parentheses (`a in (x,y),b` → `a in (x,y)`, `b`).
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_label_term(term: &str) -> Result<LabelRequirement, String> {
    let invalid = || format!("unable to parse requirement: {term:?}");
    if let Some(key) = term.strip_prefix('!') {
        return Ok(LabelRequirement::NotExists(
            label_key(key.trim()).ok_or_else(invalid)?,
        ));
    }
    if let Some((key, value)) = term.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            label_key(key.trim()).ok_or_else(invalid)?,
            value.trim().to_string(),
        ));
    }
    if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            label_key(key.trim()).ok_or_else(invalid)?,
            value.trim().to_string(),
        ));
    }
    if let Some(open) = term.find('(') {
        let close = term.rfind(')').filter(|&c| c > open).ok_or_else(invalid)?;
        if !term[close + 1..].trim().is_empty() {
            return Err(invalid());
        }
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        let mut head = term[..open].split_whitespace();
        let (Some(key), Some(op), None) = (head.next(), head.next(), head.next()) else {
            return Err(invalid());
        };
        let key = label_key(key).ok_or_else(invalid)?;
        return match op {
            "in" => Ok(LabelRequirement::In(key, values)),
            "notin" => Ok(LabelRequirement::NotIn(key, values)),
            _ => Err(invalid()),
        };
    }
    Ok(LabelRequirement::Exists(
        label_key(term).ok_or_else(invalid)?,
    ))
}

fn label_key(key: &str) -> Option<String> {
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    valid.then(|| key.to_string())
}

/// A parsed field selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_unescaped(text, ',') {
            if term.trim().is_empty() {
                continue;
            }
            let (path, equal, value) = split_field_term(&term)
                .ok_or_else(|| format!("invalid selector: '{text}'; can't understand '{term}'"))?;
            requirements.push((path.trim().to_string(), equal, unescape(value.trim())));
        }
        Ok(Self(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let actual = path
                .split('.')
                .try_fold(object, |v, key| v.get(key))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                })
                .unwrap_or_default();
            (actual == *value) == *equal
        })
    }
}

/// Splits `text` at `sep` not preceded by a backslash; escapes are kept.
fn split_unescaped(text: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in text.chars() {
        if !escaped && c == sep {
            parts.push(String::new());
            continue;
        }
        escaped = !escaped && c == '\\';
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

/// `path!=value` → (path, false, value); `path==value`, `path=value` → (path, true, value).
fn split_field_term(term: &str) -> Option<(&str, bool, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], false, &term[i + 2..]));
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], true, &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], true, &term[i + 1..])),
            _ => {}
        }
        i += 1;
    }
    None
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled() -> Value {
        json!({"metadata": {"name": "web", "namespace": "default",
               "labels": {"app": "web", "tier": "front"}},
               "type": "Warning", "involvedObject": {"name": "web", "kind": "Service"},
               "count": 3})
    }

    fn labels(text: &str) -> bool {
        LabelSelector::parse(text).unwrap().matches(&labelled())
    }

    fn fields(text: &str) -> bool {
        FieldSelector::parse(text).unwrap().matches(&labelled())
    }

    #[test]
    fn label_equality_and_existence() {
        assert!(labels(""));
        assert!(labels("app=web"));
        assert!(labels("app==web,tier"));
        assert!(!labels("app=db"));
        assert!(labels("app!=db"));
        assert!(labels("missing!=x"), "!= matches when the label is absent");
        assert!(labels("!missing"));
        assert!(!labels("!app"));
        assert!(labels(" app = web , tier=front "));
    }

    #[test]
    fn label_sets() {
        assert!(labels("app in (db,web)"));
        assert!(labels("app in (db, web),tier"));
        assert!(!labels("app notin (db,web)"));
        assert!(labels("missing notin (x)"));
        assert!(!labels("missing in (x)"));
    }

    #[test]
    fn label_errors() {
        assert!(LabelSelector::parse("app in db").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
        assert!(LabelSelector::parse("app in (x) y").is_err());
    }

    #[test]
    fn field_paths() {
        assert!(fields("metadata.name=web"));
        assert!(fields("metadata.name==web,metadata.namespace=default"));
        assert!(!fields("metadata.name!=web"));
        assert!(fields("type=Warning,involvedObject.name=web"));
        assert!(fields("count=3"));
        assert!(fields("spec.nodeName="), "missing reads as empty");
        assert!(FieldSelector::parse("metadata.name").is_err());
    }

    #[test]
    fn field_escapes() {
        let object = json!({"metadata": {"name": "a,b=c"}});
        assert!(
            FieldSelector::parse(r"metadata.name=a\,b\=c")
                .unwrap()
                .matches(&object)
        );
    }
}
