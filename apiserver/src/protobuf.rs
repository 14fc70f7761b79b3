//! Kubernetes protobuf request bodies of the RBAC kinds, decoded into their JSON form.
//!
//! kubectl's typed clients (`kubectl create role/clusterrole/rolebinding/
//! clusterrolebinding`) send built-in kinds as `application/vnd.kubernetes.protobuf`:
//! the `k8s\0` magic, then a `runtime.Unknown` (typeMeta, raw) whose raw bytes are the
//! object in the field numbers of `k8s.io/api/rbac/v1/generated.proto` (and a Namespace's,
//! `kubectl create namespace`, in those of `k8s.io/api/core/v1/generated.proto`). Responses are
//! always JSON, which those clients accept. Only what the four kinds carry is decoded;
//! `metadata.ownerReferences` and `managedFields` are dropped.

use serde_json::{Map, Value, json};

use crate::status::ApiError;

/// The media type kubectl's typed clients send.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

/// One field of a message: its number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn bad(why: &str) -> ApiError {
    ApiError::bad_request(format!("invalid protobuf body: {why}"))
}

fn varint(input: &mut &[u8]) -> Result<u64, ApiError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first().ok_or_else(|| bad("truncated varint"))?;
        *input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(bad("varint too long"))
}

/// Every field of one message, in order.
fn fields(mut input: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ApiError> {
    let mut out = Vec::new();
    while !input.is_empty() {
        let key = varint(&mut input)?;
        let number = key >> 3;
        match key & 7 {
            0 => out.push((number, Field::Varint(varint(&mut input)?))),
            2 => {
                let len = usize::try_from(varint(&mut input)?).map_err(|_| bad("length"))?;
                if len > input.len() {
                    return Err(bad("truncated field"));
                }
                let (bytes, rest) = input.split_at(len);
                input = rest;
                out.push((number, Field::Bytes(bytes)));
            }
            1 => input = input.get(8..).ok_or_else(|| bad("truncated fixed64"))?,
            5 => input = input.get(4..).ok_or_else(|| bad("truncated fixed32"))?,
            other => return Err(bad(&format!("unsupported wire type {other}"))),
        }
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| bad("a string is not UTF-8"))
}

/// A message of string fields (and repeated strings) named by `names[number - 1]`.
fn strings(bytes: &[u8], names: &[&str], repeated: bool) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    for (number, field) in fields(bytes)? {
        let (Some(name), Field::Bytes(b)) = (names.get(number as usize - 1), field) else {
            continue;
        };
        let value = Value::String(text(b)?);
        if repeated {
            match out
                .entry(name.to_string())
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                Value::Array(items) => items.push(value),
                _ => return Err(bad("mixed field")),
            }
        } else {
            out.insert(name.to_string(), value);
        }
    }
    Ok(out)
}

fn string_map(entries: &[&[u8]]) -> Result<Value, ApiError> {
    let mut out = Map::new();
    for entry in entries {
        let entry = strings(entry, &["key", "value"], false)?;
        let key = entry.get("key").and_then(Value::as_str).unwrap_or_default();
        out.insert(
            key.to_string(),
            entry.get("value").cloned().unwrap_or_else(|| json!("")),
        );
    }
    Ok(Value::Object(out))
}

fn time(bytes: &[u8]) -> Result<Value, ApiError> {
    let mut seconds = 0i64;
    for (number, field) in fields(bytes)? {
        if let (1, Field::Varint(v)) = (number, field) {
            seconds = v as i64;
        }
    }
    Ok(chrono::DateTime::from_timestamp(seconds, 0)
        .map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
        .unwrap_or(Value::Null))
}

fn object_meta(bytes: &[u8]) -> Result<Value, ApiError> {
    let mut meta = Map::new();
    let mut labels = Vec::new();
    let mut annotations = Vec::new();
    let mut finalizers = Vec::new();
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => drop(meta.insert("name".into(), json!(text(b)?))),
            (2, Field::Bytes(b)) => drop(meta.insert("generateName".into(), json!(text(b)?))),
            (3, Field::Bytes(b)) => drop(meta.insert("namespace".into(), json!(text(b)?))),
            (5, Field::Bytes(b)) => drop(meta.insert("uid".into(), json!(text(b)?))),
            (6, Field::Bytes(b)) => drop(meta.insert("resourceVersion".into(), json!(text(b)?))),
            (8, Field::Bytes(b)) => drop(meta.insert("creationTimestamp".into(), time(b)?)),
            (11, Field::Bytes(b)) => labels.push(b),
            (12, Field::Bytes(b)) => annotations.push(b),
            (14, Field::Bytes(b)) => finalizers.push(json!(text(b)?)),
            _ => {}
        }
    }
    meta.retain(|_, v| v.as_str() != Some(""));
    if !labels.is_empty() {
        meta.insert("labels".into(), string_map(&labels)?);
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), string_map(&annotations)?);
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(meta))
}

const RULE: &[&str] = &[
    "verbs",
    "apiGroups",
    "resources",
    "resourceNames",
    "nonResourceURLs",
];
const SUBJECT: &[&str] = &["kind", "apiGroup", "name", "namespace"];
const ROLE_REF: &[&str] = &["apiGroup", "kind", "name"];

/// Decodes one RBAC object: the JSON form the JSON path would have parsed.
pub fn decode_rbac(body: &[u8]) -> Result<Value, ApiError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("no k8s protobuf envelope"))?;
    let mut type_meta = Map::new();
    let mut raw: &[u8] = &[];
    for (number, field) in fields(envelope)? {
        match (number, field) {
            (1, Field::Bytes(b)) => type_meta = strings(b, &["apiVersion", "kind"], false)?,
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let kind = type_meta
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut object = type_meta;
    let mut rules = Vec::new();
    let mut subjects = Vec::new();
    for (number, field) in fields(raw)? {
        let Field::Bytes(b) = field else { continue };
        match (kind.as_str(), number) {
            (_, 1) => drop(object.insert("metadata".into(), object_meta(b)?)),
            ("Role" | "ClusterRole", 2) => rules.push(Value::Object(strings(b, RULE, true)?)),
            ("ClusterRole", 3) => {
                // AggregationRule: kept present (selectors are not decoded).
                object.insert(
                    "aggregationRule".into(),
                    json!({"clusterRoleSelectors": []}),
                );
            }
            ("RoleBinding" | "ClusterRoleBinding", 2) => {
                subjects.push(Value::Object(strings(b, SUBJECT, false)?));
            }
            ("Namespace", 2) => {
                object.insert(
                    "spec".into(),
                    Value::Object(strings(b, &["finalizers"], true)?),
                );
            }
            ("RoleBinding" | "ClusterRoleBinding", 3) => {
                object.insert(
                    "roleRef".into(),
                    Value::Object(strings(b, ROLE_REF, false)?),
                );
            }
            _ => {}
        }
    }
    match kind.as_str() {
        "Role" | "ClusterRole" => {
            object.insert("rules".into(), Value::Array(rules));
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            object.insert("subjects".into(), Value::Array(subjects));
        }
        "Namespace" => {}
        other => return Err(bad(&format!("kind {other:?} is not served as protobuf"))),
    }
    Ok(Value::Object(object))
}

const RESOURCE_ATTRIBUTES: &[&str] = &[
    "namespace",
    "verb",
    "group",
    "version",
    "resource",
    "subresource",
    "name",
];
const NON_RESOURCE_ATTRIBUTES: &[&str] = &["path", "verb"];

/// The object's bytes in a `runtime.Unknown` envelope (its `raw`, field 2).
fn raw_object(body: &[u8]) -> Result<&[u8], ApiError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("no k8s protobuf envelope"))?;
    let mut raw: &[u8] = &[];
    for (number, field) in fields(envelope)? {
        if let (2, Field::Bytes(b)) = (number, field) {
            raw = b;
        }
    }
    Ok(raw)
}

/// Decodes a `SelfSubjectAccessReview` (`kubectl auth can-i`) into its JSON form.
pub fn decode_access_review(body: &[u8]) -> Result<Value, ApiError> {
    let raw = raw_object(body)?;
    let mut spec = Map::new();
    for (number, field) in fields(raw)? {
        let (2, Field::Bytes(b)) = (number, field) else {
            continue;
        };
        for (number, field) in fields(b)? {
            match (number, field) {
                (1, Field::Bytes(b)) => {
                    spec.insert(
                        "resourceAttributes".into(),
                        Value::Object(strings(b, RESOURCE_ATTRIBUTES, false)?),
                    );
                }
                (2, Field::Bytes(b)) => {
                    spec.insert(
                        "nonResourceAttributes".into(),
                        Value::Object(strings(b, NON_RESOURCE_ATTRIBUTES, false)?),
                    );
                }
                _ => {}
            }
        }
    }
    Ok(json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": spec,
    }))
}

/// Decodes a `SelfSubjectRulesReview` (`kubectl auth can-i --list`) into its JSON form:
/// its spec holds only `namespace` (field 1).
pub fn decode_rules_review(body: &[u8]) -> Result<Value, ApiError> {
    let raw = raw_object(body)?;
    let mut spec = Map::new();
    for (number, field) in fields(raw)? {
        if let (2, Field::Bytes(b)) = (number, field) {
            spec = strings(b, &["namespace"], false)?;
        }
    }
    Ok(json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn decodes_a_rolebinding_like_kubectl_sends_it() {
        let meta = [
            field(1, b"dave-edit"),
            field(3, b"shop"),
            field(11, &[field(1, b"a"), field(2, b"b")].concat()),
        ]
        .concat();
        let subject = [
            field(1, b"User"),
            field(2, b"rbac.authorization.k8s.io"),
            field(3, b"dave"),
        ]
        .concat();
        let role_ref = [
            field(1, b"rbac.authorization.k8s.io"),
            field(2, b"ClusterRole"),
            field(3, b"edit"),
        ]
        .concat();
        let raw = [field(1, &meta), field(2, &subject), field(3, &role_ref)].concat();
        let type_meta = [
            field(1, b"rbac.authorization.k8s.io/v1"),
            field(2, b"RoleBinding"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let value = decode_rbac(&body).unwrap();
        assert_eq!(
            value,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "dave-edit", "namespace": "shop", "labels": {"a": "b"}},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "dave"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            })
        );
        let rule = [
            field(1, b"get"),
            field(1, b"list"),
            field(2, b"fedingress.io"),
            field(3, b"clusters"),
        ]
        .concat();
        let raw = [field(1, &field(1, b"r")), field(2, &rule)].concat();
        let type_meta = [
            field(1, b"rbac.authorization.k8s.io/v1"),
            field(2, b"ClusterRole"),
        ]
        .concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        assert_eq!(
            decode_rbac(&body).unwrap()["rules"],
            json!([{"verbs": ["get", "list"], "apiGroups": ["fedingress.io"], "resources": ["clusters"]}])
        );
        assert!(decode_rbac(b"{}").is_err());
        let attributes = [
            field(1, b"shop"),
            field(2, b"create"),
            field(3, b"fedingress.io"),
            field(5, b"federatedingresses"),
        ]
        .concat();
        let raw = [field(1, &[]), field(2, &field(1, &attributes))].concat();
        let body = [MAGIC.to_vec(), field(2, &raw)].concat();
        assert_eq!(
            decode_access_review(&body).unwrap()["spec"]["resourceAttributes"],
            json!({"namespace": "shop", "verb": "create", "group": "fedingress.io", "resource": "federatedingresses"})
        );
        assert!(
            decode_rbac(&[MAGIC, &[0x0a, 0x40]].concat()).is_err(),
            "truncated"
        );
    }

    #[test]
    fn decodes_a_rules_review_like_kubectl_sends_it() {
        let type_meta = [
            field(1, b"authorization.k8s.io/v1"),
            field(2, b"SelfSubjectRulesReview"),
        ]
        .concat();
        let raw = [field(1, &[]), field(2, &field(1, b"shop")), field(3, &[])].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        assert_eq!(
            decode_rules_review(&body).unwrap(),
            json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                "spec": {"namespace": "shop"},
            })
        );
        assert!(decode_rules_review(b"{}").is_err());
    }
}
