//! Value helpers with SMD's semantics: a total order (`value.Compare`), equality that
//! compares ints and floats numerically (`value.Equals`), Go-compatible JSON encoding
//! (sorted keys, HTML escaping, as `encoding/json` and jsoniter's standard config write
//! it) and SMD's `value.ToString` used when printing paths.

use serde_json::{Map, Number, Value};
use std::cmp::Ordering;

/// Ranks a value's kind in SMD's `value.Compare` order (numbers, strings, bools, lists,
/// maps, null).
fn kind_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

fn number_cmp(a: &Number, b: &Number) -> Ordering {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => match (a.as_u64(), b.as_u64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let x = a.as_f64().unwrap_or(f64::NAN);
                let y = b.as_f64().unwrap_or(f64::NAN);
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            }
        },
    }
}

/// A total order over values, as SMD's `value.Compare`: ints and floats numerically,
/// lists lexically, maps by their sorted keys then values.
pub fn value_cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_cmp(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y.iter()) {
                let c = value_cmp(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => map_cmp(x, y),
        _ => kind_rank(a).cmp(&kind_rank(b)),
    }
}

fn map_cmp(x: &Map<String, Value>, y: &Map<String, Value>) -> Ordering {
    let mut xk: Vec<&String> = x.keys().collect();
    let mut yk: Vec<&String> = y.keys().collect();
    xk.sort();
    yk.sort();
    for (l, r) in xk.iter().zip(yk.iter()) {
        let c = l.cmp(r);
        if c != Ordering::Equal {
            return c;
        }
        let c = value_cmp(&x[l.as_str()], &y[r.as_str()]);
        if c != Ordering::Equal {
            return c;
        }
    }
    xk.len().cmp(&yk.len())
}

/// Deep equality as SMD's `value.Equals`: numbers compare numerically (`1` equals
/// `1.0`), maps ignore key order.
pub fn value_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_cmp(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(l, r)| value_eq(l, r))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| value_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Encodes a value as Go's `encoding/json` does: object keys sorted, `<`, `>`, `&`,
/// U+2028 and U+2029 escaped, integral floats without a fraction.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(&map[k.as_str()], out);
            }
            out.push('}');
        }
    }
}

fn go_number(n: &Number) -> String {
    if n.is_f64()
        && let Some(f) = n.as_f64()
        && f.fract() == 0.0
        && f.abs() < 1e21
    {
        return format!("{f:.0}");
    }
    n.to_string()
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Quotes a string as Go's `%q` (strconv.Quote) does for the printable strings
/// Kubernetes names hold.
pub fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// SMD's `value.ToString`, used in path element display (`[name="a"]`, `[=80]`).
pub fn smd_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(smd_to_string).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            keys.iter()
                .map(|k| format!("{k}={}", smd_to_string(&map[k.as_str()])))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_compare_numerically_across_int_and_float() {
        assert!(value_eq(&json!(1), &json!(1.0)));
        assert_eq!(value_cmp(&json!(1), &json!(2.5)), Ordering::Less);
        assert_eq!(value_cmp(&json!("a"), &json!(1)), Ordering::Greater);
        assert_eq!(value_cmp(&json!(null), &json!({})), Ordering::Greater);
    }

    #[test]
    fn go_json_sorts_keys_and_escapes_html() {
        let v = json!({"b": "<a&b>", "a": [1, 2.0, true, null]});
        assert_eq!(
            go_json(&v),
            r#"{"a":[1,2,true,null],"b":"\u003ca\u0026b\u003e"}"#
        );
    }

    #[test]
    fn smd_to_string_quotes_strings() {
        assert_eq!(smd_to_string(&json!("a\"b")), r#""a\"b""#);
        assert_eq!(smd_to_string(&json!(80)), "80");
    }
}
