//! Names of rendered objects and label values.
//!
//! A LoadBalancer Service is named `fedingress-<ingress>-<backend>` (plus `-tcp` or
//! `-udp` in the profiles that split protocols), so it never collides with a user's own
//! Services and says what it serves. Service names are DNS-1035 labels of at most 63
//! characters. The readable name is used as is only when it is unambiguous: both parts
//! free of `-` and `.` (then the name splits back into its parts) and short enough.
//! Otherwise a stable hash of the parts is appended after the readable part, shortened
//! to fit: `fedingress-web-shop-my-sql-tcp-c6c5a6da`. Without that rule, ingress `a-b`
//! with backend `c` and ingress `a` with backend `b-c` would share one name.
//!
//! Names never depend on anything but their own parts, so they are stable across plans:
//! a renamed Service would be a new load balancer with a new address.

use fedingress_api::plan::IngressKey;

/// Longest DNS label, and longest label value.
const MAX_LABEL: usize = 63;
/// Prefix of every generated Service name.
const PREFIX: &str = "fedingress";

/// FNV-1a 64 over the parts separated by NUL bytes, as 8 hex digits. Implemented here,
/// not taken from a library, so names stay the same across versions and machines.
pub fn short_hash(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        let separator: &[u8] = if i == 0 { &[] } else { &[0] };
        for byte in separator.iter().chain(part.as_bytes()) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{:08x}", hash >> 32)
}

/// `head` cut to at most `max` bytes without a trailing `-` or `.` (the input is
/// ASCII: names and label values are).
fn cut(head: &str, max: usize) -> &str {
    let mut end = head.len().min(max);
    while !head.is_char_boundary(end) {
        end -= 1;
    }
    head[..end].trim_end_matches(['-', '.'])
}

/// The [`super::INGRESS_LABEL`] value of `key`: `<namespace>.<name>`, or when that is
/// longer than a label value may be (63), its first characters and a hash of the whole.
pub fn ingress_label_value(key: &IngressKey) -> String {
    let value = format!("{}.{}", key.namespace, key.name);
    if value.len() <= MAX_LABEL {
        return value;
    }
    let hash = short_hash(&[&key.namespace, &key.name]);
    format!("{}-{hash}", cut(&value, MAX_LABEL - hash.len() - 1))
}

/// The LoadBalancer Service serving `backend`'s ports for ingress `ingress`;
/// `protocol` (`tcp`, `udp`) when the profile splits protocols. See the module docs.
pub fn service_name(ingress: &str, backend: &str, protocol: Option<&str>) -> String {
    let suffix = protocol.map(|p| format!("-{p}")).unwrap_or_default();
    let plain = |part: &str| !part.contains(['-', '.']);
    let readable = format!("{PREFIX}-{ingress}-{backend}{suffix}");
    if plain(ingress) && plain(backend) && readable.len() <= MAX_LABEL {
        return readable;
    }
    let hash = short_hash(&[ingress, backend, protocol.unwrap_or("")]);
    let tail = format!("{suffix}-{hash}");
    let head = format!("{PREFIX}-{ingress}-{backend}").replace('.', "-");
    format!("{}{tail}", cut(&head, MAX_LABEL - tail.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns1035(name: &str) -> bool {
        name.len() <= MAX_LABEL
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    #[test]
    fn plain_names_stay_readable() {
        assert_eq!(service_name("shop", "mysql", None), "fedingress-shop-mysql");
        assert_eq!(
            service_name("shop", "dns", Some("udp")),
            "fedingress-shop-dns-udp"
        );
    }

    #[test]
    fn names_with_dashes_get_a_hash_so_they_cannot_collide() {
        let a = service_name("a-b", "c", None);
        let b = service_name("a", "b-c", None);
        assert_ne!(a, b);
        assert!(a.starts_with("fedingress-a-b-c-"), "{a}");
        assert!(dns1035(&a) && dns1035(&b), "{a} {b}");
        // Stable: the same parts give the same name.
        assert_eq!(a, service_name("a-b", "c", None));
        assert_eq!(short_hash(&["a-b", "c", ""]), "57c892b0");
        let tcp = service_name("web-shop", "my-sql", Some("tcp"));
        assert!(tcp.starts_with("fedingress-web-shop-my-sql-tcp-"), "{tcp}");
        assert_ne!(tcp, service_name("web-shop", "my-sql", Some("udp")));
    }

    #[test]
    fn long_and_dotted_names_are_shortened_to_dns_1035_labels() {
        let ingress = "a".repeat(70);
        let long = service_name(&ingress, "mysql", Some("tcp"));
        assert_eq!(long.len(), 63, "{long}");
        assert!(dns1035(&long), "{long}");
        assert!(long.contains("-tcp-"), "{long}");
        assert_ne!(
            long,
            service_name(&format!("{ingress}b"), "mysql", Some("tcp"))
        );
        let dotted = service_name("shop.v2", "db", None);
        assert!(dns1035(&dotted), "{dotted}");
        assert!(dotted.starts_with("fedingress-shop-v2-db-"), "{dotted}");
        // A cut that ends on a dash drops it.
        let cut_at_dash = service_name(&format!("{}-x", "b".repeat(40)), "y", None);
        assert!(dns1035(&cut_at_dash), "{cut_at_dash}");
    }

    #[test]
    fn ingress_label_values_fit_in_63_characters() {
        assert_eq!(
            ingress_label_value(&IngressKey::new("default", "shop")),
            "default.shop"
        );
        let long = IngressKey::new("team-payments", "x".repeat(80));
        let value = ingress_label_value(&long);
        assert_eq!(value.len(), 63, "{value}");
        assert!(value.starts_with("team-payments.xxx"), "{value}");
        assert_ne!(
            value,
            ingress_label_value(&IngressKey::new("team-payments", "x".repeat(81)))
        );
    }
}
