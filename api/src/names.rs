//! Pure validators for names: DNS-1123 labels and subdomains, rule hostnames (with
//! wildcards), qualified names (label keys), label values, RFC 6335 service names and IP
//! addresses.
//!
//! Each validator returns the list of problems as human-readable messages worded like
//! Kubernetes' `k8s.io/apimachinery/pkg/util/validation`; an empty list means valid.
//! Callers wrap each message in a [`FieldError`](crate::FieldError) with the field's path.
//! Written by hand (no regex engine): each pattern is small and documented on its function.

use std::net::IpAddr;

/// Longest DNS-1123 label (and longest cluster name).
pub const DNS1123_LABEL_MAX_LEN: usize = 63;
/// Longest DNS-1123 subdomain (and longest namespaced object name).
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;
/// Longest name part of a qualified name (label key).
pub const QUALIFIED_NAME_MAX_LEN: usize = 63;
/// Longest label value.
pub const LABEL_VALUE_MAX_LEN: usize = 63;
/// Longest RFC 6335 service name (`name` of a TCP/UDP rule).
pub const SERVICE_NAME_MAX_LEN: usize = 15;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const WILDCARD_SUBDOMAIN_MSG: &str = "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `must be no more than N characters`.
fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// `msg (e.g. 'a',  or 'b')`, joined exactly like Kubernetes' `RegexError` (without the
/// regex, which would mean nothing to a user here).
fn with_examples(msg: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    // Drop the trailing ", " Kubernetes would follow with the regex.
    out.truncate(out.len() - 2);
    out.push(')');
    out
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn is_label_syntax(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// `label(\.label)*`
fn is_subdomain_syntax(value: &str) -> bool {
    value.split('.').all(is_label_syntax)
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
fn is_qualified_name_syntax(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A DNS-1123 label: at most 63 characters, `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
/// Used for cluster names, namespaces and backend service names.
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LEN {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LEN));
    }
    if !is_label_syntax(value) {
        if is_subdomain_syntax(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(with_examples(DNS1123_LABEL_MSG, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels.
/// Used for namespaced object names and secret names.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LEN));
    }
    if !is_subdomain_syntax(value) {
        errs.push(with_examples(DNS1123_SUBDOMAIN_MSG, &["example.com"]));
    }
    errs
}

/// A wildcard DNS-1123 subdomain: `*.` followed by a DNS-1123 subdomain, at most 253
/// characters in all (`*.example.com`).
pub fn wildcard_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LEN {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LEN));
    }
    let ok = value.strip_prefix("*.").is_some_and(is_subdomain_syntax);
    if !ok {
        errs.push(with_examples(WILDCARD_SUBDOMAIN_MSG, &["*.example.com"]));
    }
    errs
}

/// Whether `value` parses as an IPv4 or IPv6 address.
pub fn is_ip_address(value: &str) -> bool {
    value.parse::<IpAddr>().is_ok()
}

/// A host of a rule or a TLS entry: a lower-case DNS-1123 subdomain whose labels are at
/// most 63 characters, not an IP address. A wildcard is allowed only as the whole leftmost
/// label (`*.example.com`); `*`, `*foo.com` and `foo.*.com` are invalid.
pub fn hostname(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if is_ip_address(value) {
        errs.push("must be a DNS name, not an IP address".to_owned());
    }
    if value.contains('*') {
        errs.extend(wildcard_dns1123_subdomain(value));
    } else {
        errs.extend(dns1123_subdomain(value));
    }
    if errs.is_empty()
        && value
            .split('.')
            .any(|label| label.len() > DNS1123_LABEL_MAX_LEN)
    {
        errs.push(format!(
            "each dot-separated part must be no more than {DNS1123_LABEL_MAX_LEN} characters"
        ));
    }
    errs
}

/// A host that a DNS record can be published for: like [`hostname`] but without a
/// wildcard (used for `traffic.dnsName`).
pub fn non_wildcard_hostname(value: &str) -> Vec<String> {
    if value.contains('*') {
        let mut errs = vec!["must not be a wildcard".to_owned()];
        // Still report other problems of the name, as if without the wildcard.
        let rest = value.trim_start_matches("*.");
        if !rest.contains('*') {
            errs.extend(hostname(rest));
        }
        errs
    } else {
        hostname(value)
    }
}

/// Whether a certificate host `pattern` (exact, or a `*.` wildcard for one leftmost
/// label) covers the rule host `host`. A wildcard rule host is covered only by the same
/// wildcard. Comparison ignores ASCII case.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    if pattern.eq_ignore_ascii_case(host) {
        return true;
    }
    match (pattern.strip_prefix("*."), host.split_once('.')) {
        (Some(suffix), Some((first, rest))) => {
            !first.is_empty() && first != "*" && rest.eq_ignore_ascii_case(suffix)
        }
        _ => false,
    }
}

/// A qualified name, as used for label keys, annotation keys and finalizers: an optional
/// DNS-1123 subdomain prefix and `/`, then a name of at most 63 characters matching
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?` (`example.com/MyName`, `app`).
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let examples = ["MyName", "my.name", "123-abc"];
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|msg| format!("prefix part {msg}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                with_examples(QUALIFIED_NAME_MSG, &examples)
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX_LEN {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LEN)
        ));
    }
    if !is_qualified_name_syntax(name) {
        errs.push(format!(
            "name part {}",
            with_examples(QUALIFIED_NAME_MSG, &examples)
        ));
    }
    errs
}

/// A label value: empty, or at most 63 characters matching
/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LEN {
        errs.push(max_len_error(LABEL_VALUE_MAX_LEN));
    }
    if !value.is_empty() && !is_qualified_name_syntax(value) {
        errs.push(with_examples(
            LABEL_VALUE_MSG,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// An RFC 6335 service name (the `name` of a TCP/UDP rule, used in SRV records
/// `_<name>._tcp.<dnsName>`): at most 15 characters, lower-case letters, digits and
/// `-`, at least one letter, no `--`, no leading or trailing `-`. This is a DNS-1123
/// label of at most 15 characters with the IANA restrictions on top.
pub fn service_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > SERVICE_NAME_MAX_LEN {
        errs.push(max_len_error(SERVICE_NAME_MAX_LEN));
    }
    if value.is_empty()
        || !value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if !value.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_owned());
    }
    if value.contains("--") {
        errs.push("must not contain consecutive hyphens".to_owned());
    }
    if value.starts_with('-') || value.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_owned());
    }
    errs
}

/// An IPv4 or IPv6 address in its usual text form (`192.0.2.10`, `2001:db8::1`).
pub fn ip_address(value: &str) -> Vec<String> {
    if is_ip_address(value) {
        Vec::new()
    } else {
        vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_owned()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "my-name", "123-abc", "eu-west", &"a".repeat(63)] {
            assert!(dns1123_label(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            dns1123_label("My_Name"),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')"
            ]
        );
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        for bad in ["", "-a", "a-", "A", "a_b", "a b"] {
            assert_eq!(dns1123_label(bad).len(), 1, "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        for ok in ["a", "example.com", "shop-tls", "a.b-c.d1"] {
            assert!(dns1123_subdomain(ok).is_empty(), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "A.com", "a_b.com", "-a.com"] {
            assert_eq!(
                dns1123_subdomain(bad),
                vec![
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
                ],
                "{bad}"
            );
        }
        let long = format!("{}com", "a.".repeat(126));
        assert_eq!(
            dns1123_subdomain(&long),
            vec!["must be no more than 253 characters"]
        );
    }

    #[test]
    fn hostnames() {
        for ok in ["shop.example.com", "*.example.com", "localhost", "a-1.b"] {
            assert!(hostname(ok).is_empty(), "{ok}");
        }
        for bad in [
            "*",
            "*foo.com",
            "foo.*.com",
            "*.*.com",
            "Shop.example.com",
            "a..b",
            "",
        ] {
            assert!(!hostname(bad).is_empty(), "{bad}");
        }
        assert_eq!(
            hostname("*foo.com"),
            vec![
                "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com')"
            ]
        );
        assert_eq!(
            hostname("10.0.0.1"),
            vec!["must be a DNS name, not an IP address"]
        );
        assert_eq!(hostname("::1").len(), 2);
        let long_label = format!("{}.com", "a".repeat(64));
        assert_eq!(
            hostname(&long_label),
            vec!["each dot-separated part must be no more than 63 characters"]
        );
        assert_eq!(
            non_wildcard_hostname("*.example.com"),
            vec!["must not be a wildcard"]
        );
        assert!(non_wildcard_hostname("example.com").is_empty());
    }

    #[test]
    fn wildcard_matching() {
        assert!(host_matches("shop.example.com", "shop.example.com"));
        assert!(host_matches("*.example.com", "shop.example.com"));
        assert!(host_matches("*.example.com", "*.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "a.shop.example.com"));
        assert!(!host_matches("shop.example.com", "*.example.com"));
        assert!(!host_matches("*.example.com", "*.shop.example.com"));
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "app",
            "MyName",
            "my.name",
            "example.com/MyName",
            "kubernetes.io/os",
            "a_b",
        ] {
            assert!(qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(qualified_name("/a"), vec!["prefix part must be non-empty"]);
        assert_eq!(
            qualified_name("a/"),
            vec![
                "name part must be non-empty",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc')"
            ]
        );
        assert!(qualified_name("Ex.com/a")[0].starts_with("prefix part a lowercase"));
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert_eq!(
            qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
    }

    #[test]
    fn label_values() {
        for ok in ["", "prod", "MyValue", "my_value", "12345", "a.b-c"] {
            assert!(label_value(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            label_value("-x"),
            vec![
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345')"
            ]
        );
        assert_eq!(
            label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn service_names() {
        for ok in ["mysql", "echo", "http-alt", "x1", "a23456789012345"] {
            assert!(service_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            service_name("a234567890123456"),
            vec!["must be no more than 15 characters"]
        );
        assert_eq!(
            service_name("123"),
            vec!["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            service_name("a--b"),
            vec!["must not contain consecutive hyphens"]
        );
        assert_eq!(
            service_name("-ab"),
            vec!["must not begin or end with a hyphen"]
        );
        assert_eq!(
            service_name("My_SQL"),
            vec!["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]
        );
    }

    #[test]
    fn ip_addresses() {
        assert!(ip_address("192.0.2.10").is_empty());
        assert!(ip_address("2001:db8::1").is_empty());
        assert_eq!(ip_address("192.0.2").len(), 1);
        assert_eq!(ip_address("example.com").len(), 1);
    }
}
