//! Every fedingress resource shipped in `deploy/examples/` decodes, defaults and validates.
//!
//! Documents of other API groups and non-resource files (e.g. the apiserver's config,
//! which has no `apiVersion`) are left to the crates that own them; a document that claims
//! the `fedingress.io` group must be a kind this crate knows.

use std::path::{Path, PathBuf};

use fedingress_api::{
    API_VERSION, Cluster, FederatedIngress, GROUP, IngressClaim, IngressPool, Resource,
};
use serde::Deserialize;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples")
}

/// Decodes `doc` as `T`, defaults it and returns its validation errors as text.
fn check<T: Resource>(doc: yaml_serde::Value) -> Result<(String, Vec<String>), String> {
    let mut object: T = yaml_serde::from_value(doc).map_err(|err| err.to_string())?;
    object.apply_defaults();
    let name = object.metadata().name_str().to_owned();
    let errors = object.validate().iter().map(ToString::to_string).collect();
    Ok((name, errors))
}

#[test]
fn every_example_resource_is_valid() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("deploy/examples exists")
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();

    let mut checked: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable example");
        let file_name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for (i, document) in yaml_serde::Deserializer::from_str(&text).enumerate() {
            let doc = yaml_serde::Value::deserialize(document)
                .unwrap_or_else(|err| panic!("{file_name} document {i}: {err}"));
            let api_version = doc.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
            if !api_version.starts_with(&format!("{GROUP}/")) {
                continue;
            }
            let kind = doc
                .get("kind")
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_owned();
            assert_eq!(api_version, API_VERSION, "{file_name} document {i}");
            let result = match kind.as_str() {
                k if k == Cluster::KIND => check::<Cluster>(doc),
                k if k == FederatedIngress::KIND => check::<FederatedIngress>(doc),
                k if k == IngressPool::KIND => check::<IngressPool>(doc),
                k if k == IngressClaim::KIND => check::<IngressClaim>(doc),
                other => panic!("{file_name} document {i}: unknown kind {other:?}"),
            };
            match result {
                Ok((name, errors)) => {
                    checked.push(format!("{kind}/{name}"));
                    problems.extend(
                        errors
                            .into_iter()
                            .map(|e| format!("{file_name}: {kind}/{name}: {e}")),
                    );
                }
                Err(err) => problems.push(format!("{file_name} document {i}: {err}")),
            }
        }
    }

    assert!(
        problems.is_empty(),
        "invalid examples:\n{}",
        problems.join("\n")
    );
    for expected in [
        "Cluster/eu-west",
        "Cluster/us-east",
        "Cluster/ap-south",
        "FederatedIngress/shop",
        "FederatedIngress/echo",
        "IngressPool/eu-west-edge",
        "IngressClaim/shop",
    ] {
        assert!(
            checked.iter().any(|c| c == expected),
            "{expected} not found in {checked:?}"
        );
    }
}

#[test]
fn shop_example_has_every_listener_kind() {
    let text = std::fs::read_to_string(examples_dir().join("federatedingress-shop.yaml"))
        .expect("shop example");
    let mut shop: FederatedIngress = yaml_serde::from_str(&text).expect("shop decodes");
    shop.apply_defaults();
    assert_eq!(
        shop.listener_summary(),
        vec!["80/HTTP", "443/HTTPS", "5433/TLS", "3306/TCP", "3306/UDP"]
    );
    assert_eq!(shop.hosts(), vec!["shop.example.com", "db.example.com"]);
}

#[test]
fn echo_example_shares_one_port_over_tcp_and_udp() {
    let text = std::fs::read_to_string(examples_dir().join("federatedingress-echo.yaml"))
        .expect("echo example");
    let echo: FederatedIngress = yaml_serde::from_str(&text).expect("echo decodes");
    assert_eq!(echo.listener_summary(), vec!["7777/TCP", "7777/UDP"]);
    assert_eq!(
        echo.spec.effective_dns_name().as_deref(),
        Some("echo.fedingress.test")
    );
    assert!(echo.hosts().is_empty());
}
