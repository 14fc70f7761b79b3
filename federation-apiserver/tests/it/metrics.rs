//! The Grafana dashboard in `deploy/grafana/` queries only metrics the hub exports.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;

/// Metric names in a PromQL expression: identifiers of our families.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        if ident(bytes[i]) && (i == 0 || !ident(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && ident(bytes[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            if word.starts_with("fedingress_") || word.starts_with("apiserver_") {
                names.insert(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_queries_is_exported() {
    let dashboard: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/fedingress-hub.json"
    )))
    .unwrap();
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queried.extend(metric_names(target["expr"].as_str().unwrap()));
        }
    }
    assert!(queried.len() >= 8, "{queried:?}");

    let hub = support::TestHub::start().await;
    let text = hub.get_text("/metrics").await;
    // Families are declared with `# TYPE` even before they have a sample.
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let family = |name: &str| {
        ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| exported.contains(*base))
            .unwrap_or(name)
            .to_string()
    };
    let missing: Vec<&String> = queried
        .iter()
        .filter(|name| !exported.contains(&family(name)))
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}\n{text}");
    hub.stop().await;
}
