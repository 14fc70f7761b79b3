//! Server-side apply, managedFields and collection operations (chunked lists, delete by
//! label and --all) driven by the real, unmodified kubectl (1.27-1.33). Namespaces with
//! kubectl: `namespaces.rs`.
//!
//! What is expected is what kube-apiserver does and documents:
//! <https://kubernetes.io/docs/reference/using-api/server-side-apply/> (sections "Field
//! management", "Conflicts", "Merge strategy", "Upgrading from client-side apply to
//! server-side apply"). FederatedIngress's list types come from its OpenAPI schema
//! (`api/src/ingress.rs`): `spec.rules` and `spec.tls` atomic, `spec.overrides` a map
//! keyed by `cluster`, `spec.placement.clusters` a set.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_tests::{Kubectl, dev_kubectl, eventually, repo_path, start_apiserver};
use serde_json::Value;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A FederatedIngress with one TCP rule; `NAME`, `TTL` and `PORT` are replaced.
const INGRESS: &str = "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: NAME
spec:
  rules:
  - protocol: TCP
    port: PORT
    backend: {service: svc, port: PORT}
  traffic:
    dnsName: NAME.fedingress.test
    ttl: TTL
";

fn ingress(name: &str, port: u16, ttl: u32) -> String {
    INGRESS
        .replace("NAME", name)
        .replace("PORT", &port.to_string())
        .replace("TTL", &ttl.to_string())
}

/// The object as JSON, managedFields included.
fn get_json(k: &Kubectl, kind: &str, name: &str) -> Value {
    serde_json::from_str(&k.ok(&["get", kind, name, "-o", "json", "--show-managed-fields"]))
        .unwrap()
}

/// The fields `manager` owns through `operation` on the main resource (`subresource`
/// None) or a subresource.
fn owned(
    object: &Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
) -> Option<Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| {
            e["manager"] == manager
                && e["operation"] == operation
                && e["subresource"].as_str().filter(|s| !s.is_empty()) == subresource
        })
        .map(|e| e["fieldsV1"].clone())
}

fn apply_entry(object: &Value, manager: &str) -> Value {
    owned(object, manager, "Apply", None).unwrap_or_else(|| {
        panic!(
            "no Apply entry for {manager}: {}",
            object["metadata"]["managedFields"]
        )
    })
}

/// Whether a FieldsV1 set holds `path`, e.g. `["f:spec", "f:traffic", "f:ttl"]`.
fn holds(fields: &Value, path: &[&str]) -> bool {
    path.iter()
        .try_fold(fields, |at, key| at.get(*key))
        .is_some()
}

const TTL: [&str; 3] = ["f:spec", "f:traffic", "f:ttl"];

/// kubectl's output (stdout and stderr) and exit code.
fn run(k: &Kubectl, args: &[&str]) -> (Option<i32>, String) {
    let out = k.run(args);
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn server_side_apply_creates_updates_and_leaves_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);

    let file = write(dir.path(), "ssa.yaml", &ingress("ssa", 7000, 30));
    let out = k.ok(&["apply", "--server-side", "-f", &file]);
    assert_eq!(
        out.trim(),
        "federatedingress.fedingress.io/ssa serverside-applied"
    );
    let created = get_json(&k, "fing", "ssa");
    assert_eq!(created["metadata"]["generation"], 1);

    let file = write(dir.path(), "ssa.yaml", &ingress("ssa", 7000, 60));
    k.ok(&["apply", "--server-side", "-f", &file]);
    let updated = get_json(&k, "fing", "ssa");
    assert_eq!(updated["spec"]["traffic"]["ttl"], 60);
    assert_eq!(updated["metadata"]["generation"], 2);

    // Unchanged: nothing is written (same resourceVersion and generation). The hub's
    // controller writes the status for generation 2 first; wait for that write.
    let updated = eventually(Duration::from_secs(20), "status for generation 2", || {
        let object = get_json(&k, "fing", "ssa");
        let conditions = object["status"]["conditions"].as_array().cloned();
        match conditions {
            Some(c) if !c.is_empty() && c.iter().all(|c| c["observedGeneration"] == 2) => {
                Ok(object)
            }
            _ => Err(format!("{}", object["status"])),
        }
    });
    k.ok(&["apply", "--server-side", "-f", &file]);
    let unchanged = get_json(&k, "fing", "ssa");
    assert_eq!(
        unchanged["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );
    assert_eq!(unchanged["metadata"]["generation"], 2);

    // "Field management": kubectl's default manager is `kubectl`, operation Apply,
    // owning the fields of the applied configuration.
    let yaml = k.ok(&["get", "fing", "ssa", "-o", "yaml", "--show-managed-fields"]);
    for line in [
        "manager: kubectl",
        "operation: Apply",
        "fieldsType: FieldsV1",
        "f:ttl: {}",
        "f:dnsName: {}",
        "f:rules: {}",
    ] {
        assert!(yaml.contains(line), "{line:?} missing in:\n{yaml}");
    }
    let fields = apply_entry(&unchanged, "kubectl");
    assert!(holds(&fields, &TTL), "{fields}");
    assert!(holds(&fields, &["f:spec", "f:rules"]), "{fields}");
    // Without --show-managed-fields kubectl hides them.
    let plain = k.ok(&["get", "fing", "ssa", "-o", "yaml"]);
    assert!(!plain.contains("managedFields"), "{plain}");
}

#[test]
fn non_apply_writes_record_update_entries() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    let file = write(dir.path(), "up.yaml", &ingress("up", 7000, 30));
    // kubectl create/label/patch send fieldManager=kubectl-create, -label, -patch.
    k.ok(&["create", "-f", &file]);
    let created = get_json(&k, "fing", "up");
    let fields = owned(&created, "kubectl-create", "Update", None)
        .unwrap_or_else(|| panic!("{}", created["metadata"]["managedFields"]));
    assert!(holds(&fields, &TTL), "{fields}");
    k.ok(&["label", "fing", "up", "tier=gold"]);
    k.ok(&[
        "patch",
        "fing",
        "up",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"traffic":{"ttl":45}}}"#,
    ]);
    let patched = get_json(&k, "fing", "up");
    let label = owned(&patched, "kubectl-label", "Update", None)
        .unwrap_or_else(|| panic!("{}", patched["metadata"]["managedFields"]));
    assert!(
        holds(&label, &["f:metadata", "f:labels", "f:tier"]),
        "{label}"
    );
    let patch = owned(&patched, "kubectl-patch", "Update", None)
        .unwrap_or_else(|| panic!("{}", patched["metadata"]["managedFields"]));
    assert!(holds(&patch, &TTL), "{patch}");
    // "Field management": a changed value moves ownership to the manager making the change.
    let create = owned(&patched, "kubectl-create", "Update", None).unwrap();
    assert!(
        !holds(&create, &TTL),
        "kubectl-create must lose ttl: {create}"
    );

    // Without fieldManager the manager is the User-Agent's product name.
    let url = format!(
        "http://{}/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses/up",
        server.addr("api")
    );
    let out = Command::new("curl")
        .args([
            "-s",
            "-X",
            "PATCH",
            "-H",
            "Content-Type: application/merge-patch+json",
            "-A",
            "my-tool/1.2.3 (linux)",
            "-d",
            r#"{"metadata":{"labels":{"by":"curl"}}}"#,
            &url,
        ])
        .output()
        .unwrap();
    let object: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tool = owned(&object, "my-tool", "Update", None)
        .unwrap_or_else(|| panic!("{}", object["metadata"]["managedFields"]));
    assert!(holds(&tool, &["f:metadata", "f:labels", "f:by"]), "{tool}");
}

#[test]
fn two_managers_conflict_force_share_and_release() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    let alice = write(dir.path(), "alice.yaml", &ingress("shared", 7000, 30));
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=alice",
        "-f",
        &alice,
    ]);

    // "Conflicts": another value for a field alice owns fails, naming owner and field.
    let bob = write(dir.path(), "bob.yaml", &ingress("shared", 7000, 90));
    let (code, out) = run(
        &k,
        &["apply", "--server-side", "--field-manager=bob", "-f", &bob],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("Apply failed with 1 conflict: conflict with \"alice\": .spec.traffic.ttl"),
        "{out}"
    );
    assert!(out.contains("--force-conflicts"), "kubectl's advice: {out}");
    assert_eq!(get_json(&k, "fing", "shared")["spec"]["traffic"]["ttl"], 30);

    // --force-conflicts: bob's value, bob's field; alice's entry loses it.
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=bob",
        "--force-conflicts",
        "-f",
        &bob,
    ]);
    let forced = get_json(&k, "fing", "shared");
    assert_eq!(forced["spec"]["traffic"]["ttl"], 90);
    assert!(holds(&apply_entry(&forced, "bob"), &TTL));
    assert!(!holds(&apply_entry(&forced, "alice"), &TTL));
    // The rest both applied with the same values: shared ("Field management").
    for path in [
        ["f:spec", "f:rules"].as_slice(),
        &["f:spec", "f:traffic", "f:dnsName"],
    ] {
        assert!(holds(&apply_entry(&forced, "alice"), path), "{path:?}");
        assert!(holds(&apply_entry(&forced, "bob"), path), "{path:?}");
    }

    // Same value from two managers: both own it, no conflict.
    let carol_text = ingress("shared", 7000, 90).replace(
        "metadata:\n  name: shared\n",
        "metadata:\n  name: shared\n  labels: {tier: gold}\n",
    );
    let carol = write(dir.path(), "carol.yaml", &carol_text);
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=carol",
        "-f",
        &carol,
    ]);
    let dave = write(
        dir.path(),
        "dave.yaml",
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: shared\n  labels: {tier: gold}\n",
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=dave",
        "-f",
        &dave,
    ]);
    let both = get_json(&k, "fing", "shared");
    let tier = ["f:metadata", "f:labels", "f:tier"];
    assert!(holds(&apply_entry(&both, "carol"), &tier));
    assert!(holds(&apply_entry(&both, "dave"), &tier));

    // A manager that stops applying a field: removed only when nobody else owns it.
    // dave drops the label carol also owns: it stays.
    let dave = write(
        dir.path(),
        "dave.yaml",
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: shared\n  labels: {dave: yes-really}\n",
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=dave",
        "-f",
        &dave,
    ]);
    let after = get_json(&k, "fing", "shared");
    assert_eq!(after["metadata"]["labels"]["tier"], "gold", "{after}");
    assert!(!holds(&apply_entry(&after, "dave"), &tier));
    // dave drops his own label, nobody else owns it: removed.
    let dave = write(
        dir.path(),
        "dave.yaml",
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: shared\n  labels: {tier: gold}\n",
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=dave",
        "-f",
        &dave,
    ]);
    let after = get_json(&k, "fing", "shared");
    assert!(after["metadata"]["labels"].get("dave").is_none(), "{after}");
    // carol and dave co-own tier; both drop it: removed.
    let carol = write(dir.path(), "carol.yaml", &ingress("shared", 7000, 90));
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=carol",
        "-f",
        &carol,
    ]);
    assert_eq!(
        get_json(&k, "fing", "shared")["metadata"]["labels"]["tier"],
        "gold"
    );
    let dave = write(
        dir.path(),
        "dave.yaml",
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: shared\n  labels: {other: x}\n",
    );
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=dave",
        "-f",
        &dave,
    ]);
    let after = get_json(&k, "fing", "shared");
    assert!(after["metadata"]["labels"].get("tier").is_none(), "{after}");
}

#[test]
fn map_lists_merge_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    let base = ingress("merged", 7000, 30);
    let with = |cluster: &str, class: &str| {
        format!(
            "{base}  overrides:\n  - cluster: {cluster}\n    ingressClassName: {class}\n  placement:\n    clusters: [{cluster}]\n"
        )
    };
    let alice = write(dir.path(), "alice.yaml", &with("a", "nginx"));
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=alice",
        "-f",
        &alice,
    ]);
    let bob = write(dir.path(), "bob.yaml", &with("b", "haproxy"));
    k.ok(&["apply", "--server-side", "--field-manager=bob", "-f", &bob]);
    let object = get_json(&k, "fing", "merged");
    let mut overrides: Vec<(String, String)> = object["spec"]["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["cluster"].as_str().unwrap().to_string(),
                o["ingressClassName"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    overrides.sort();
    assert_eq!(
        overrides,
        [("a".into(), "nginx".into()), ("b".into(), "haproxy".into())]
    );
    let mut placed: Vec<&str> = object["spec"]["placement"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    placed.sort();
    assert_eq!(placed, ["a", "b"]);
    assert!(holds(
        &apply_entry(&object, "alice"),
        &[
            "f:spec",
            "f:overrides",
            r#"k:{"cluster":"a"}"#,
            "f:ingressClassName"
        ]
    ));
    assert!(holds(
        &apply_entry(&object, "bob"),
        &["f:spec", "f:placement", "f:clusters", r#"v:"b""#]
    ));
    // Atomic rules: bob's different rules conflict with alice's whole list.
    let bob_rules = write(
        dir.path(),
        "bob-rules.yaml",
        &with("b", "haproxy").replace("port: 7000", "port: 7001"),
    );
    let (code, out) = run(
        &k,
        &[
            "apply",
            "--server-side",
            "--field-manager=bob",
            "-f",
            &bob_rules,
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(".spec.rules"), "{out}");
}

#[test]
fn client_side_apply_migrates_to_server_side_apply() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    migrate(&k, dir.path(), "migrated");
}

/// kubectl apply (client-side), then `kubectl apply --server-side` of the same file:
/// kubectl (1.26+) first rewrites managedFields with a JSON patch (csaupgrade), so the
/// fields of `kubectl-client-side-apply` become the `kubectl` Apply entry's, and a later
/// change through server-side apply does not conflict. Kubernetes docs: "Upgrading from
/// client-side apply to server-side apply".
fn migrate(k: &Kubectl, dir: &Path, name: &str) {
    let file = write(dir, &format!("{name}.yaml"), &ingress(name, 7000, 30));
    k.ok(&["apply", "-f", &file]);
    let before = get_json(k, "fing", name);
    assert!(
        owned(&before, "kubectl-client-side-apply", "Update", None).is_some(),
        "client-side apply writes as kubectl-client-side-apply: {}",
        before["metadata"]["managedFields"]
    );
    let (code, out) = run(k, &["apply", "--server-side", "-f", &file]);
    assert_eq!(code, Some(0), "{out}");
    let after = get_json(k, "fing", name);
    let entries = after["metadata"]["managedFields"].as_array().unwrap();
    assert!(
        !entries
            .iter()
            .any(|e| e["manager"] == "kubectl-client-side-apply"),
        "{entries:?}"
    );
    let fields = apply_entry(&after, "kubectl");
    assert!(holds(&fields, &TTL), "{fields}");
    assert!(holds(&fields, &["f:spec", "f:rules"]), "{fields}");

    let changed = write(dir, &format!("{name}.yaml"), &ingress(name, 7000, 75));
    let (code, out) = run(k, &["apply", "--server-side", "-f", &changed]);
    assert_eq!(code, Some(0), "{out}");
    let object = get_json(k, "fing", name);
    assert_eq!(object["spec"]["traffic"]["ttl"], 75);
    // kube-apiserver keeps the client-side annotation in step for manager `kubectl`
    // (its last-applied updater), so a later client-side apply still diffs right.
    let annotation =
        object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap_or_else(|| panic!("last-applied annotation gone: {}", object["metadata"]));
    let last: Value = serde_json::from_str(annotation).unwrap();
    assert_eq!(last["spec"]["traffic"]["ttl"], 75, "{annotation}");
}

#[test]
fn apply_to_the_status_subresource() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    // --subresource for apply exists from kubectl 1.32 (1.27-1.31: unknown flag).
    for version in ["1.32", "1.33"] {
        let k = dev_kubectl(dir.path(), &server, Some(version));
        let name = format!("status-{}", version.replace('.', "-"));
        let cluster = write(
            dir.path(),
            "cluster.yaml",
            &format!(
                "apiVersion: fedingress.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  region: europe-west1\n  location: {{latitude: 50.45, longitude: 3.82}}\n"
            ),
        );
        k.ok(&["apply", "--server-side", "-f", &cluster]);
        let status = write(
            dir.path(),
            "status.yaml",
            &format!(
                "apiVersion: fedingress.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\nstatus:\n  agentVersion: 9.9.9\n"
            ),
        );
        let (code, out) = run(
            &k,
            &[
                "apply",
                "--server-side",
                "--subresource=status",
                "--field-manager=status-writer",
                "-f",
                &status,
            ],
        );
        assert_eq!(code, Some(0), "kubectl {version}: {out}");
        let object = get_json(&k, "fcl", &name);
        let fields =
            owned(&object, "status-writer", "Apply", Some("status")).unwrap_or_else(|| {
                panic!(
                    "kubectl {version}: no status Apply entry: {}",
                    object["metadata"]["managedFields"]
                )
            });
        assert!(holds(&fields, &["f:status", "f:agentVersion"]), "{fields}");
        // Spec fields stay with the main resource's applier.
        assert!(holds(
            &apply_entry(&object, "kubectl"),
            &["f:spec", "f:region"]
        ));
    }
}

#[test]
fn invalid_applied_objects_get_the_field_errors_of_create() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    let bad = write(
        dir.path(),
        "bad.yaml",
        &ingress("bad", 7000, 30).replace("    port: 7000\n", ""),
    );
    let create = k.fails(&["create", "-f", &bad]);
    let apply = k.fails(&["apply", "--server-side", "-f", &bad]);
    let errors = |text: &str| -> String {
        text.split_once("is invalid: ")
            .map(|(_, errors)| errors.trim().to_string())
            .unwrap_or_else(|| panic!("no field errors in {text}"))
    };
    assert!(create.contains("spec.rules[0].port"), "{create}");
    assert_eq!(errors(&apply), errors(&create));
    assert!(k.fails(&["get", "fing", "bad"]).contains("not found"));

    // An apply that makes an existing object invalid: the same errors, nothing written.
    let good = write(dir.path(), "good.yaml", &ingress("bad", 7000, 30));
    k.ok(&["apply", "--server-side", "-f", &good]);
    let apply = k.fails(&["apply", "--server-side", "-f", &bad]);
    assert_eq!(errors(&apply), errors(&create));
    assert_eq!(
        get_json(&k, "fing", "bad")["spec"]["rules"][0]["port"],
        7000
    );
}

#[test]
fn every_kubectl_version_applies_server_side() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    for version in ["1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"] {
        let k = dev_kubectl(dir.path(), &server, Some(version));
        let tag = version.replace('.', "-");
        let name = format!("core-{tag}");
        let alice = write(dir.path(), "alice.yaml", &ingress(&name, 7000, 30));
        let out = k.ok(&[
            "apply",
            "--server-side",
            "--field-manager=alice",
            "-f",
            &alice,
        ]);
        assert!(
            out.contains("serverside-applied"),
            "kubectl {version}: {out}"
        );
        let bob = write(dir.path(), "bob.yaml", &ingress(&name, 7000, 45));
        let (code, out) = run(
            &k,
            &["apply", "--server-side", "--field-manager=bob", "-f", &bob],
        );
        assert_eq!(code, Some(1), "kubectl {version}: {out}");
        assert!(
            out.contains("conflict with \"alice\"") && out.contains(".spec.traffic.ttl"),
            "kubectl {version}: {out}"
        );
        k.ok(&[
            "apply",
            "--server-side",
            "--field-manager=bob",
            "--force-conflicts",
            "-f",
            &bob,
        ]);
        let object = get_json(&k, "fing", &name);
        assert_eq!(object["spec"]["traffic"]["ttl"], 45, "kubectl {version}");
        assert!(
            holds(&apply_entry(&object, "bob"), &TTL),
            "kubectl {version}"
        );
        assert!(
            !holds(&apply_entry(&object, "alice"), &TTL),
            "kubectl {version}"
        );
        migrate(&k, dir.path(), &format!("mig-{tag}"));
    }
}

/// managedFields of the entries of `managers`, sorted by manager, with `time` replaced
/// by `TIME` (kube orders entries by operation, then time in seconds, then manager:
/// the order depends on the clock, the content does not).
fn managed_fields_of(object: &Value, managers: &[&str]) -> Value {
    let mut entries: Vec<Value> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| managers.iter().any(|m| e["manager"] == *m))
        .cloned()
        .collect();
    for entry in &mut entries {
        assert!(entry["time"].is_string(), "every entry has a time: {entry}");
        entry["time"] = Value::from("TIME");
    }
    entries.sort_by_key(|e| e["manager"].as_str().unwrap_or_default().to_string());
    Value::Array(entries)
}

fn golden(step: &str) -> Value {
    let path = repo_path(&format!("tests/golden/apply/{step}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn assert_golden(k: &Kubectl, step: &str) -> Value {
    let object = get_json(k, "fing", "golden");
    let actual = managed_fields_of(&object, &["alice", "bob"]);
    assert!(
        actual == golden(step),
        "managedFields after {step} differ from tests/golden/apply/{step}.yaml; the server wrote:\n{}",
        yaml_serde::to_string(&actual).unwrap()
    );
    object
}

/// A sequence of applies by alice and bob; after each, alice's and bob's managedFields
/// entries are compared with `tests/golden/apply/step*.yaml`, written from the
/// Kubernetes server-side apply documentation (each file says why).
#[test]
fn golden_managed_fields_of_two_appliers() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    let step = |manager: &str, file: &str, extra: &[&str]| {
        let path = repo_path(&format!("tests/golden/apply/{file}"))
            .display()
            .to_string();
        let mut args = vec![
            "apply".to_string(),
            "--server-side".into(),
            format!("--field-manager={manager}"),
            "-f".into(),
            path,
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&k, &args)
    };

    let (code, out) = step("alice", "alice-1.input.yaml", &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_golden(&k, "step1");

    let (code, out) = step("bob", "bob-2.input.yaml", &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_golden(&k, "step2");

    // bob changes ttl, which alice owns: a conflict that changes nothing.
    let (code, out) = step("bob", "bob-3.input.yaml", &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("conflict with \"alice\": .spec.traffic.ttl"),
        "{out}"
    );
    assert_golden(&k, "step2");
    let (code, out) = step("bob", "bob-3.input.yaml", &["--force-conflicts"]);
    assert_eq!(code, Some(0), "{out}");
    assert_golden(&k, "step3");

    let (code, out) = step("alice", "alice-4.input.yaml", &[]);
    assert_eq!(code, Some(0), "{out}");
    let object = assert_golden(&k, "step4");
    // What alice alone owned is gone; what bob co-owned or owns stays.
    assert_eq!(
        object["metadata"]["labels"],
        serde_json::json!({"owner": "b"})
    );
    let overrides = object["spec"]["overrides"].as_array().unwrap();
    assert_eq!(overrides.len(), 1, "{overrides:?}");
    assert_eq!(overrides[0]["cluster"], "us-east");
    assert_eq!(object["spec"]["rules"][0]["port"], 7000);
    assert_eq!(object["spec"]["traffic"]["ttl"], 60);
    let mut placed: Vec<&str> = object["spec"]["placement"]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    placed.sort();
    assert_eq!(placed, ["eu-west", "us-east"]);

    // Besides alice and bob, only the hub's controller writes: the status, as an
    // Update entry of manager fedingress-controller with subresource status.
    eventually(
        Duration::from_secs(20),
        "the controller's status entry",
        || {
            let object = get_json(&k, "fing", "golden");
            let entries = object["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .clone();
            let others: Vec<&Value> = entries
                .iter()
                .filter(|e| e["manager"] != "alice" && e["manager"] != "bob")
                .collect();
            for entry in &others {
                assert_eq!(
                    (
                        &entry["manager"],
                        &entry["operation"],
                        &entry["subresource"]
                    ),
                    (
                        &Value::from("fedingress-controller"),
                        &Value::from("Update"),
                        &Value::from("status")
                    ),
                    "{entry}"
                );
            }
            match owned(&object, "fedingress-controller", "Update", Some("status")) {
                Some(fields) if holds(&fields, &["f:status", "f:conditions"]) => Ok(()),
                _ => Err(format!("{entries:?}")),
            }
        },
    );
}

#[test]
fn chunked_lists_and_deletes_by_label_and_all() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);

    // Seven objects, listed in chunks of two (kubectl follows the continue tokens).
    for i in 0..7 {
        let mut text = ingress(&format!("chunk-{i}"), 7000 + i, 30);
        if i % 2 == 0 {
            text = text.replace("  name: chunk", "  labels: {even: \"yes\"}\n  name: chunk");
        }
        let file = write(dir.path(), "chunk.yaml", &text);
        k.ok(&["create", "-f", &file]);
    }
    let out = k.run(&["get", "fing", "--chunk-size=2", "-o", "name", "-v=6"]);
    assert!(out.status.success());
    let names = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> = names.lines().collect();
    let expected: Vec<String> = (0..7)
        .map(|i| format!("federatedingress.fedingress.io/chunk-{i}"))
        .collect();
    assert_eq!(listed, expected);
    let log = String::from_utf8_lossy(&out.stderr);
    let pages = log.lines().filter(|l| l.contains("limit=2")).count();
    assert_eq!(pages, 4, "7 objects in pages of 2: {log}");
    let table = k.ok(&["get", "fing", "--chunk-size=2"]);
    assert_eq!(
        table.lines().count(),
        8,
        "one header and seven rows: {table}"
    );

    // delete -l, then --all.
    let out = k.ok(&["delete", "federatedingresses", "-l", "even=yes"]);
    assert_eq!(out.lines().count(), 4, "{out}");
    let left = k.ok(&["get", "fing", "-o", "name"]);
    assert_eq!(left.lines().count(), 3, "{left}");
    let out = k.ok(&["delete", "federatedingresses", "--all"]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let none = k.run(&["get", "fing"]);
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("No resources found"),
        "{none:?}"
    );
}
