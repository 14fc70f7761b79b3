//! Paged lists and collection deletes with the real, unmodified kubectl: `get
//! --chunk-size` while another writer churns returns every object once; `delete --all`,
//! `delete -l` and a raw deletecollection (`delete --raw`) remove exactly what they
//! name. Namespace `default` only (bootstrapped by the server).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use fedingress_tests::{Kubectl, Process, start_apiserver, write_kubeconfig};

const STABLE: usize = 7;

fn kubectl(dir: &Path, server: &Process) -> Kubectl {
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(
        &kubeconfig,
        &format!("http://{}", server.addr("api")),
        None,
        None,
    );
    Kubectl::new(None, kubeconfig)
}

/// A FederatedIngress manifest named `name` labelled `app: <app>`.
fn manifest(dir: &Path, name: &str, app: &str) -> String {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: {name}
  namespace: default
  labels: {{app: {app}}}
spec:
  rules:
  - protocol: TCP
    port: 7000
    backend: {{service: echo, port: 7000}}
  traffic:
    dnsName: {name}.fedingress.test
"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// `kubectl get -o name` output as a name → count map.
fn counted(out: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let name = line.rsplit('/').next().unwrap().to_string();
        *counts.entry(name).or_default() += 1;
    }
    counts
}

fn names(k: &Kubectl, args: &[&str]) -> Vec<String> {
    counted(&k.ok(args)).into_keys().collect()
}

#[test]
fn chunked_get_while_writing_and_collection_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = Arc::new(kubectl(dir.path(), &server));
    for i in 0..STABLE {
        k.ok(&[
            "create",
            "-f",
            &manifest(dir.path(), &format!("obj-{i}"), "list"),
        ]);
    }

    // Another writer creates, relabels and deletes objects that sort between the
    // stable ones while kubectl pages through them two at a time.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (k, stop, dir) = (Arc::clone(&k), Arc::clone(&stop), dir.path().to_owned());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("obj-{}x{n}", n % STABLE);
                k.ok(&["create", "-f", &manifest(&dir, &name, "churn")]);
                k.ok(&[
                    "label",
                    "--overwrite",
                    "-n",
                    "default",
                    "fing",
                    &format!("obj-{}", n % STABLE),
                    &format!("round={n}"),
                ]);
                k.ok(&["delete", "-n", "default", "fing", &name]);
                n += 1;
            }
            n
        })
    };
    for _ in 0..5 {
        let out = k.ok(&[
            "get",
            "federatedingresses",
            "-n",
            "default",
            "--chunk-size=2",
            "-o",
            "name",
        ]);
        let counts = counted(&out);
        for i in 0..STABLE {
            assert_eq!(
                counts.get(&format!("obj-{i}")),
                Some(&1),
                "obj-{i} once in: {out}"
            );
        }
        assert!(
            counts.values().all(|c| *c == 1),
            "an object listed twice: {out}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds > 0, "the writer wrote while kubectl listed");

    // delete -l: only the labelled ones.
    for i in 0..3 {
        k.ok(&[
            "create",
            "-f",
            &manifest(dir.path(), &format!("tmp-{i}"), "tmp"),
        ]);
    }
    k.ok(&[
        "delete",
        "federatedingresses",
        "-n",
        "default",
        "-l",
        "app=tmp",
    ]);
    let left = names(&k, &["get", "fing", "-n", "default", "-o", "name"]);
    assert_eq!(left.len(), STABLE, "{left:?}");
    assert!(left.iter().all(|n| n.starts_with("obj-")), "{left:?}");

    // A raw deletecollection with a selector (kubectl's own delete lists and deletes one
    // by one; --raw sends the collection DELETE itself).
    k.ok(&["label", "-n", "default", "fing", "obj-0", "raw=yes"]);
    let raw = k.ok(&[
        "delete",
        "--raw",
        "/apis/fedingress.io/v1alpha1/namespaces/default/federatedingresses?labelSelector=app%3Dlist,raw%3Dyes",
    ]);
    assert!(raw.contains("\"kind\":\"FederatedIngressList\""), "{raw}");
    assert!(raw.contains("\"name\":\"obj-0\""), "{raw}");
    let left = names(&k, &["get", "fing", "-n", "default", "-o", "name"]);
    assert_eq!(left.len(), STABLE - 1, "{left:?}");
    assert!(!left.contains(&"obj-0".to_string()));

    // delete --all: nothing left.
    k.ok(&["delete", "federatedingresses", "--all", "-n", "default"]);
    let out = k.ok(&["get", "fing", "-n", "default", "-o", "name"]);
    assert!(out.trim().is_empty(), "{out}");
}
