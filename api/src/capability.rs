//! What an agent's driver can serve: the capability strings agents send in `Hello`
//! (`capabilities`) and which one each rule needs.
//!
//! The vocabulary, one string per rule kind:
//!
//! | capability        | rules it covers                                  |
//! |-------------------|--------------------------------------------------|
//! | `HTTP`            | `protocol: HTTP`                                 |
//! | `HTTPS`           | `protocol: HTTPS`                                |
//! | `TCP`             | `protocol: TCP`                                  |
//! | `UDP`             | `protocol: UDP`                                  |
//! | `TLS`             | `protocol: TLS` in both modes                    |
//! | `TLS/Passthrough` | `protocol: TLS`, `tlsMode: Passthrough`          |
//! | `TLS/Terminate`   | `protocol: TLS`, `tlsMode: Terminate` (default)  |
//!
//! The standalone driver offers `HTTP, HTTPS, TLS, TCP, UDP`; the kubernetes driver what
//! its profile renders (e.g. `HTTP, HTTPS, TCP, UDP, TLS/Passthrough`). Strings are
//! compared ignoring ASCII case; unknown strings are ignored (a newer agent may offer
//! more). An empty list means the agent did not say (agents older than the vocabulary):
//! nothing is taken to be missing.
//!
//! The hub uses [`missing`] to set the FederatedIngress condition `Servable` and to leave
//! a cluster out of the SRV answers of rules it cannot serve; the plan sent to the agent
//! is not changed (the agent still reports its own rule errors).

use crate::ingress::{IngressRule, Protocol, TlsMode};

/// Plain HTTP rules.
pub const HTTP: &str = "HTTP";
/// HTTPS rules (TLS terminated by the ingress).
pub const HTTPS: &str = "HTTPS";
/// Bare TCP rules.
pub const TCP: &str = "TCP";
/// Bare UDP rules.
pub const UDP: &str = "UDP";
/// TLS rules in both modes.
pub const TLS: &str = "TLS";
/// TLS rules with `tlsMode: Passthrough` (SNI routing, no termination).
pub const TLS_PASSTHROUGH: &str = "TLS/Passthrough";
/// TLS rules with `tlsMode: Terminate`.
pub const TLS_TERMINATE: &str = "TLS/Terminate";

/// Every capability string, in the order of the table above.
pub const ALL: &[&str] = &[HTTP, HTTPS, TCP, UDP, TLS, TLS_PASSTHROUGH, TLS_TERMINATE];

/// The capability `rule` needs, in its most specific spelling (`TLS/Terminate` or
/// `TLS/Passthrough` for TLS rules; a TLS rule without `tlsMode` terminates).
pub fn needed(rule: &IngressRule) -> &'static str {
    match rule.protocol {
        Protocol::Http => HTTP,
        Protocol::Https => HTTPS,
        Protocol::Tcp => TCP,
        Protocol::Udp => UDP,
        Protocol::Tls => match rule.effective_tls_mode() {
            Some(TlsMode::Passthrough) => TLS_PASSTHROUGH,
            _ => TLS_TERMINATE,
        },
    }
}

/// The capability `rule` needs that `capabilities` does not offer, e.g.
/// `Some("TLS/Terminate")`; `None` when the rule can be served, or when `capabilities`
/// is empty (unknown: nothing is taken to be missing).
pub fn missing(rule: &IngressRule, capabilities: &[String]) -> Option<&'static str> {
    if capabilities.is_empty() {
        return None;
    }
    let offered = |name: &str| capabilities.iter().any(|c| c.eq_ignore_ascii_case(name));
    let needed = needed(rule);
    let served = match needed {
        TLS_TERMINATE | TLS_PASSTHROUGH => offered(needed) || offered(TLS),
        other => offered(other),
    };
    (!served).then_some(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(protocol: Protocol, tls_mode: Option<TlsMode>) -> IngressRule {
        let mut rule = IngressRule::new(protocol);
        rule.tls_mode = tls_mode;
        rule
    }

    fn caps(list: &[&str]) -> Vec<String> {
        list.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn each_rule_kind_needs_its_capability() {
        let kubernetes = caps(&["HTTP", "HTTPS", "TCP", "UDP", "TLS/Passthrough"]);
        let cases = [
            (rule(Protocol::Http, None), None),
            (rule(Protocol::Https, None), None),
            (rule(Protocol::Tcp, None), None),
            (rule(Protocol::Udp, None), None),
            (rule(Protocol::Tls, Some(TlsMode::Passthrough)), None),
            (
                rule(Protocol::Tls, Some(TlsMode::Terminate)),
                Some("TLS/Terminate"),
            ),
            // No tlsMode: Terminate, the default.
            (rule(Protocol::Tls, None), Some("TLS/Terminate")),
        ];
        for (rule, expected) in cases {
            assert_eq!(missing(&rule, &kubernetes), expected, "{rule:?}");
        }
        let l4_only = caps(&["TCP"]);
        assert_eq!(missing(&rule(Protocol::Udp, None), &l4_only), Some("UDP"));
        assert_eq!(missing(&rule(Protocol::Http, None), &l4_only), Some("HTTP"));
        assert_eq!(
            missing(&rule(Protocol::Https, None), &l4_only),
            Some("HTTPS")
        );
        assert_eq!(
            missing(&rule(Protocol::Tls, Some(TlsMode::Passthrough)), &l4_only),
            Some("TLS/Passthrough")
        );
    }

    #[test]
    fn tls_covers_both_modes() {
        let standalone = caps(&["HTTP", "HTTPS", "TLS", "TCP", "UDP"]);
        for mode in [None, Some(TlsMode::Terminate), Some(TlsMode::Passthrough)] {
            assert_eq!(missing(&rule(Protocol::Tls, mode), &standalone), None);
        }
        let terminate_only = caps(&["TLS/Terminate"]);
        assert_eq!(
            missing(
                &rule(Protocol::Tls, Some(TlsMode::Passthrough)),
                &terminate_only
            ),
            Some("TLS/Passthrough")
        );
        assert_eq!(missing(&rule(Protocol::Tls, None), &terminate_only), None);
    }

    #[test]
    fn an_empty_list_is_unknown_and_case_and_strangers_do_not_matter() {
        for protocol in Protocol::ALL {
            assert_eq!(missing(&rule(*protocol, None), &[]), None);
        }
        let odd = caps(&["tcp", "Tls/passthrough", "QUIC"]);
        assert_eq!(missing(&rule(Protocol::Tcp, None), &odd), None);
        assert_eq!(
            missing(&rule(Protocol::Tls, Some(TlsMode::Passthrough)), &odd),
            None
        );
        assert_eq!(missing(&rule(Protocol::Udp, None), &odd), Some("UDP"));
    }

    #[test]
    fn needed_names_the_most_specific_capability() {
        assert_eq!(needed(&rule(Protocol::Tls, None)), TLS_TERMINATE);
        assert_eq!(
            needed(&rule(Protocol::Tls, Some(TlsMode::Passthrough))),
            TLS_PASSTHROUGH
        );
        assert!(ALL.contains(&needed(&rule(Protocol::Udp, None))));
    }
}
