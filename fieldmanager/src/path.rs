//! Path elements and paths, as SMD's `fieldpath.PathElement` and `fieldpath.Path`:
//! a struct field or map key, a list-map item's keys, a set item's value, or a list
//! index. Elements are totally ordered (fields, then keys, then values, then indexes),
//! which is the order `FieldSet` stores and serializes them in.

use crate::value::{go_json, smd_to_string, value_cmp};
use serde_json::Value;
use std::cmp::Ordering;
use std::fmt;

/// One step into a value.
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A struct field or a map key (`f:name`, printed `.name`).
    Field(String),
    /// A list-map item, by its key fields sorted by name (`k:{"name":"a"}`, printed
    /// `[name="a"]`).
    Key(Vec<(String, Value)>),
    /// A set item, by value (`v:"a"`, printed `[="a"]`).
    Value(Value),
    /// A list item by position (`i:3`, printed `[3]`); kube never produces these for
    /// its own schemas, but decodes them.
    Index(usize),
}

impl PathElement {
    /// A key element whose fields are sorted by name, as `fieldpath.KeyByFields` does.
    pub fn key(mut fields: Vec<(String, Value)>) -> PathElement {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields)
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The element as a fieldsV1 key: `f:name`, `k:{"name":"a"}`, `v:"a"`, `i:3`.
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{}:{}", go_json(&Value::String(k.clone())), go_json(v)))
                    .collect();
                format!("k:{{{}}}", parts.join(","))
            }
            PathElement::Value(v) => format!("v:{}", go_json(v)),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }
}

fn key_cmp(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for ((an, av), (bn, bv)) in a.iter().zip(b.iter()) {
        let c = an.cmp(bn);
        if c != Ordering::Equal {
            return c;
        }
        let c = value_cmp(av, bv);
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => key_cmp(a, b),
            (PathElement::Value(a), PathElement::Value(b)) => value_cmp(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", smd_to_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", smd_to_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the root of an object; displays as SMD prints it
/// (`.spec.rules[name="a"].port`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// A path of struct fields / map keys, e.g. `Path::fields(["spec", "replicas"])`.
    pub fn fields<I, S>(names: I) -> Path
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Path(
            names
                .into_iter()
                .map(|n| PathElement::Field(n.into()))
                .collect(),
        )
    }

    /// This path with one more element.
    pub fn child(&self, pe: PathElement) -> Path {
        let mut elements = self.0.clone();
        elements.push(pe);
        Path(elements)
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in &self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn displays_like_smd() {
        let p = Path(vec![
            PathElement::Field("spec".into()),
            PathElement::Field("rules".into()),
            PathElement::key(vec![("name".into(), json!("a"))]),
            PathElement::Field("port".into()),
        ]);
        assert_eq!(p.to_string(), r#".spec.rules[name="a"].port"#);
        assert_eq!(
            Path::fields(["metadata", "labels", "app"]).to_string(),
            ".metadata.labels.app"
        );
        assert_eq!(PathElement::Value(json!("v")).to_string(), r#"[="v"]"#);
        assert_eq!(PathElement::Index(3).to_string(), "[3]");
        let two = PathElement::key(vec![
            ("protocol".into(), json!("TCP")),
            ("port".into(), json!(80)),
        ]);
        assert_eq!(two.to_string(), r#"[port=80,protocol="TCP"]"#);
        assert_eq!(two.to_fields_v1_key(), r#"k:{"port":80,"protocol":"TCP"}"#);
    }

    #[test]
    fn orders_fields_then_keys_then_values_then_indexes() {
        let mut v = [
            PathElement::Index(0),
            PathElement::Value(json!("x")),
            PathElement::key(vec![("name".into(), json!("a"))]),
            PathElement::Field("z".into()),
            PathElement::Field("a".into()),
        ];
        v.sort();
        let keys: Vec<String> = v.iter().map(|p| p.to_fields_v1_key()).collect();
        assert_eq!(keys, ["f:a", "f:z", r#"k:{"name":"a"}"#, r#"v:"x""#, "i:0"]);
    }
}
