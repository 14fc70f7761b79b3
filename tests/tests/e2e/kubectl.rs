//! The federation-apiserver driven by the real, unmodified kubectl.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use fedingress_tests::{
    Kubectl, TestPki, dev_kubectl, eventually, repo_path, start_apiserver, write_kubeconfig,
};

const SLOW: Duration = Duration::from_secs(20);

fn example(name: &str) -> String {
    repo_path(&format!("deploy/examples/{name}"))
        .display()
        .to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const ECHO: &str = "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: echo
spec:
  rules:
  - protocol: TCP
    port: 7777
    name: echo
    backend: {service: echo, port: 7777}
  - protocol: UDP
    port: 7777
    backend: {service: echo, port: 7777}
  traffic:
    dnsName: echo.fedingress.test
    ttl: TTL
";

#[test]
fn kubectl_drives_the_whole_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);

    // apply: create, then configured, then unchanged.
    for cluster in [
        "cluster-eu-west.yaml",
        "cluster-us-east.yaml",
        "cluster-ap-south.yaml",
    ] {
        assert!(
            k.ok(&["apply", "-f", &example(cluster)])
                .contains("created")
        );
    }
    let out = k.ok(&["apply", "-f", &example("federatedingress-shop.yaml")]);
    assert_eq!(out.trim(), "federatedingress.fedingress.io/shop created");
    let echo = write(dir.path(), "echo.yaml", &ECHO.replace("TTL", "30"));
    assert!(k.ok(&["apply", "-f", &echo]).contains("echo created"));
    // Enums are case-insensitive on input and written back canonical.
    let lower = write(
        dir.path(),
        "lower.yaml",
        &ECHO
            .replace("TTL", "30")
            .replace("name: echo\nspec", "name: lower\nspec")
            .replace("protocol: TCP", "protocol: tcp"),
    );
    k.ok(&["create", "-f", &lower]);
    assert_eq!(
        k.ok(&[
            "get",
            "fing",
            "lower",
            "-o",
            "jsonpath={.spec.rules[0].protocol}"
        ]),
        "TCP"
    );
    k.ok(&["delete", "fing", "lower"]);
    let echo = write(dir.path(), "echo.yaml", &ECHO.replace("TTL", "60"));
    assert_eq!(
        k.ok(&["apply", "-f", &echo]).trim(),
        "federatedingress.fedingress.io/echo configured"
    );
    assert_eq!(
        k.ok(&["apply", "-f", &echo]).trim(),
        "federatedingress.fedingress.io/echo unchanged"
    );

    // get as a table, by short name, as yaml.
    let table = k.ok(&["get", "federatedingresses"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "HOSTS", "PORTS", "CLUSTERS", "READY", "AGE"]
    );
    assert!(table.contains("7777/TCP,7777/UDP"), "{table}");
    let clusters = k.ok(&["get", "clusters"]);
    let header: Vec<&str> = clusters
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "REGION", "CONNECTED", "READY", "AGE"]);
    assert_eq!(clusters.lines().count(), 4, "{clusters}");
    let yaml = k.ok(&["get", "fing", "echo", "-o", "yaml"]);
    assert!(
        yaml.contains("protocol: TCP") && yaml.contains("protocol: UDP"),
        "{yaml}"
    );
    assert!(yaml.contains("generation: 2"), "{yaml}");
    let categories = k.ok(&["get", "fedingress"]);
    assert!(
        categories.contains("federatedingress.fedingress.io/shop"),
        "{categories}"
    );
    assert!(
        categories.contains("cluster.fedingress.io/eu-west"),
        "{categories}"
    );

    // label, selectors, merge and JSON patches.
    assert!(
        k.ok(&["label", "fing", "echo", "tier=gold"])
            .contains("labeled")
    );
    let selected = k.ok(&["get", "fing", "-l", "tier=gold", "-o", "name"]);
    assert_eq!(selected.trim(), "federatedingress.fedingress.io/echo");
    let out = k.ok(&[
        "patch",
        "fing",
        "echo",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"traffic":{"ttl":120}}}"#,
    ]);
    assert!(out.contains("patched"), "{out}");
    let out = k.ok(&[
        "patch",
        "fing",
        "echo",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/traffic/ttl","value":90}]"#,
    ]);
    assert!(out.contains("patched"), "{out}");
    assert_eq!(
        k.ok(&["get", "fing", "echo", "-o", "jsonpath={.spec.traffic.ttl}"]),
        "90"
    );
    let smp = k.fails(&[
        "patch",
        "fing",
        "echo",
        "-p",
        r#"{"metadata":{"labels":{"a":"b"}}}"#,
    ]);
    assert!(
        smp.contains("UnsupportedMediaType") || smp.contains("unknown format"),
        "{smp}"
    );

    // get -w receives a change.
    let mut watcher = k
        .command(&["get", "fing", "--watch", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    eventually(SLOW, "the watch's first listing", || {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("echo") => Ok(()),
            Ok(line) => Err(line),
            Err(e) => Err(e.to_string()),
        }
    });
    k.ok(&["label", "fing", "echo", "watched=yes"]);
    eventually(SLOW, "a MODIFIED event in kubectl get -w", || {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.starts_with("MODIFIED") && line.contains("echo") => Ok(()),
            Ok(line) => Err(line),
            Err(e) => Err(e.to_string()),
        }
    });
    let _ = watcher.kill();
    let _ = watcher.wait();

    // A stale update is a Conflict.
    let stale = write(
        dir.path(),
        "stale.json",
        &k.ok(&["get", "fing", "echo", "-o", "json"]),
    );
    k.ok(&["label", "fing", "echo", "bump=1"]);
    let err = k.fails(&["replace", "-f", &stale]);
    assert!(err.contains("the object has been modified"), "{err}");

    // Invalid objects: kubectl shows the field errors.
    let bad = write(
        dir.path(),
        "bad.yaml",
        &ECHO
            .replace("port: 7777\n    name", "port: 70000\n    name")
            .replace("TTL", "0"),
    );
    let err = k.fails(&["apply", "-f", &bad]);
    assert!(
        err.contains("spec.rules[0].port: Invalid value: 70000: must be between 1 and 65535"),
        "{err}"
    );
    assert!(err.contains("spec.traffic.ttl"), "{err}");

    // Unknown fields: rejected under kubectl's default strict validation, warned otherwise.
    let unknown = write(
        dir.path(),
        "unknown.yaml",
        &ECHO
            .replace("TTL", "30")
            .replace("name: echo\nspec:", "name: extra\nspec:\n  bogus: 1"),
    );
    let err = k.fails(&["apply", "-f", &unknown]);
    assert!(err.contains("unknown field \"spec.bogus\""), "{err}");
    let out = k.run(&["apply", "--validate=warn", "-f", &unknown]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field \"spec.bogus\""));

    // explain prints the field docs from our OpenAPI.
    let explain = k.ok(&["explain", "federatedingress.spec.rules"]);
    assert!(
        explain.contains("protocol") && explain.contains("FIELD"),
        "{explain}"
    );

    // Finalizers hold a deletion until they are removed.
    k.ok(&[
        "patch",
        "fing",
        "extra",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    k.ok(&["delete", "fing", "extra", "--wait=false"]);
    let held = k.ok(&[
        "get",
        "fing",
        "extra",
        "-o",
        "jsonpath={.metadata.deletionTimestamp}",
    ]);
    assert!(!held.is_empty(), "deletionTimestamp must be set");
    k.ok(&[
        "patch",
        "fing",
        "extra",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    let gone = k.fails(&["get", "fing", "extra"]);
    assert!(
        gone.contains("NotFound") || gone.contains("not found"),
        "{gone}"
    );

    // delete.
    assert!(k.ok(&["delete", "-f", &echo]).contains("deleted"));
    let err = k.fails(&["get", "fing", "echo"]);
    assert!(
        err.contains("federatedingresses.fedingress.io \"echo\" not found"),
        "{err}"
    );
}

/// `kubectl diff --server-side` shows nothing for an unchanged object and only the change
/// for a changed one: a dry-run update kept no resourceVersion, so every diff showed a
/// spurious `-  resourceVersion: "N"` (issue 23). And `kubectl explain` lists an
/// optional enum's values without `<no value>`.
#[test]
fn diff_server_side_and_explain_show_only_what_is_there() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    let echo = write(dir.path(), "echo.yaml", &ECHO.replace("TTL", "30"));
    k.ok(&["apply", "--server-side", "-f", &echo]);

    let diff = k.run(&["diff", "--server-side", "-f", &echo]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr),
    );
    assert_eq!(
        diff.status.code(),
        Some(0),
        "an unchanged object differs:\n{stdout}{stderr}"
    );
    assert_eq!(stdout.trim(), "", "{stderr}");

    let changed = write(dir.path(), "changed.yaml", &ECHO.replace("TTL", "45"));
    let diff = k.run(&["diff", "--server-side", "-f", &changed]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr),
    );
    assert_eq!(diff.status.code(), Some(1), "{stdout}{stderr}");
    // The changed lines of the unified diff, indentation dropped.
    let changes: Vec<String> = stdout
        .lines()
        .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
        .filter_map(|l| {
            let sign = l.chars().next().filter(|c| *c == '-' || *c == '+')?;
            Some(format!("{sign}{}", l[1..].trim()))
        })
        .collect();
    // The generation counts the spec change, as kube's does; nothing else differs.
    assert_eq!(
        changes,
        ["-generation: 1", "+generation: 2", "-ttl: 30", "+ttl: 45"],
        "{stdout}"
    );
    assert_eq!(
        k.ok(&["get", "fing", "echo", "-o", "jsonpath={.spec.traffic.ttl}"]),
        "30",
        "a diff writes nothing"
    );

    let explain = k.ok(&["explain", "federatedingress.spec.rules.tlsMode"]);
    assert!(
        explain.contains("Terminate") && explain.contains("Passthrough"),
        "{explain}"
    );
    assert!(!explain.contains("<no value>"), "{explain}");
}

/// The header of a `kubectl get` table, as words.
fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

/// IngressPools and IngressClaims with the real kubectl: the shipped examples applied,
/// tables (and `-o wide`) by plural and short name, the category, describe, explain,
/// a field selector, edit, server-side apply, a watch, admission's refusals with their
/// field paths, delete (issue 24).
#[test]
fn kubectl_drives_pools_and_claims() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);

    k.ok(&["apply", "-f", &example("cluster-eu-west.yaml")]);
    assert_eq!(
        k.ok(&["apply", "-f", &example("ingresspool-eu-west.yaml")])
            .trim(),
        "ingresspool.fedingress.io/eu-west-edge created"
    );
    assert_eq!(
        k.ok(&["apply", "-f", &example("ingressclaim-shop.yaml")])
            .trim(),
        "ingressclaim.fedingress.io/shop created"
    );
    let other = write(
        dir.path(),
        "other.yaml",
        "apiVersion: fedingress.io/v1alpha1
kind: IngressPool
metadata:
  name: us-east-edge
spec:
  cluster: us-east
  vipCIDR: 10.0.0.96/28
",
    );
    k.ok(&["create", "-f", &other]);

    let pools = k.ok(&["get", "ingresspools"]);
    assert_eq!(
        header(&pools),
        [
            "NAME",
            "CLUSTER",
            "VIPS",
            "READY",
            "MEMBERS",
            "SHARES",
            "UTILIZATION",
            "AGE"
        ],
        "{pools}"
    );
    assert_eq!(pools.lines().count(), 3, "{pools}");
    let wide = k.ok(&["get", "ipool", "eu-west-edge", "-o", "wide"]);
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "CLUSTER",
            "VIPS",
            "READY",
            "MEMBERS",
            "SHARES",
            "UTILIZATION",
            "AGE",
            "VIP",
            "HOLDER",
            "CIDR",
            "VRID",
            "SELECTOR"
        ],
        "{wide}"
    );
    assert!(
        wide.contains("10.0.0.96/28") && wide.contains("pool=edge"),
        "{wide}"
    );
    let claims = k.ok(&["get", "iclaim"]);
    assert_eq!(
        header(&claims),
        ["NAME", "PHASE", "INGRESSES", "POOLS", "RECLAIM", "AGE"],
        "{claims}"
    );
    assert!(claims.contains("Retain"), "{claims}");
    let wide = k.ok(&["get", "ingressclaims", "-o", "wide"]);
    assert_eq!(header(&wide)[6..], ["REPLICAS", "PENDING"], "{wide}");
    let all = k.ok(&["get", "fedingress", "-o", "name"]);
    for name in [
        "ingresspool.fedingress.io/eu-west-edge",
        "ingressclaim.fedingress.io/shop",
    ] {
        assert!(all.contains(name), "{name} in {all}");
    }
    let selected = k.ok(&[
        "get",
        "ipool",
        "--field-selector",
        "spec.cluster=us-east",
        "-o",
        "name",
    ]);
    assert_eq!(selected.trim(), "ingresspool.fedingress.io/us-east-edge");
    let described = k.ok(&["describe", "ipool", "eu-west-edge"]);
    assert!(
        described.contains("IngressPool") && described.contains("Member Selector"),
        "{described}"
    );
    let described = k.ok(&["describe", "iclaim", "shop"]);
    assert!(
        described.contains("Reclaim Policy") && described.contains("Retain"),
        "{described}"
    );
    let explain = k.ok(&["explain", "ingresspool.spec.vipCIDR"]);
    assert!(
        explain.contains("The CIDR the pool's VIPs come from"),
        "{explain}"
    );
    let explain = k.ok(&["explain", "ingressclaim.spec.reclaimPolicy"]);
    assert!(
        explain.contains("Retain") && explain.contains("Recycle"),
        "{explain}"
    );

    // get -w sees an edit made with kubectl edit.
    let mut watcher = k
        .command(&["get", "ipool", "--watch", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    eventually(SLOW, "the watch's first listing", || {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("eu-west-edge") => Ok(()),
            Ok(line) => Err(line),
            Err(e) => Err(e.to_string()),
        }
    });
    let edited = k
        .command(&["edit", "ipool", "eu-west-edge"])
        .env("KUBE_EDITOR", "sed -i s/rps:\\ 5000/rps:\\ 6000/")
        .output()
        .unwrap();
    assert!(
        edited.status.success(),
        "{}",
        String::from_utf8_lossy(&edited.stderr)
    );
    assert_eq!(
        k.ok(&[
            "get",
            "ipool",
            "eu-west-edge",
            "-o",
            "jsonpath={.spec.capacity.rps}"
        ]),
        "6000"
    );
    eventually(SLOW, "a MODIFIED event in kubectl get -w", || {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.starts_with("MODIFIED") && line.contains("eu-west-edge") => Ok(()),
            Ok(line) => Err(line),
            Err(e) => Err(e.to_string()),
        }
    });
    let _ = watcher.kill();
    let _ = watcher.wait();

    // Server-side apply, then admission's refusals with their field paths.
    // The example with a group id: the configuration kubectl's upgrade from client-side
    // apply compares with keeps every other field.
    let text = std::fs::read_to_string(example("ingresspool-eu-west.yaml")).unwrap();
    let applied = write(
        dir.path(),
        "applied.yaml",
        &format!("{text}  virtualRouterId: 21\n"),
    );
    let out = k.ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &applied,
    ]);
    assert!(out.contains("serverside-applied"), "{out}");
    let clash = write(
        dir.path(),
        "clash.yaml",
        "apiVersion: fedingress.io/v1alpha1
kind: IngressPool
metadata:
  name: clash
spec:
  cluster: eu-west
  vipCIDR: 10.0.0.96/29
  virtualRouterId: 21
",
    );
    let err = k.fails(&["apply", "--server-side", "-f", &clash]);
    assert!(
        err.contains("spec.vipCIDR: Invalid value: \"10.0.0.96/29\": overlaps the vipCIDR of IngressPool \"eu-west-edge\""),
        "{err}"
    );
    assert!(
        err.contains(
            "spec.virtualRouterId: Invalid value: 21: is used by IngressPool \"eu-west-edge\""
        ),
        "{err}"
    );
    let err = k.fails(&[
        "patch",
        "ipool",
        "eu-west-edge",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"cluster":"us-east"}}"#,
    ]);
    assert!(
        err.contains("spec.cluster: Invalid value: \"us-east\": field is immutable"),
        "{err}"
    );
    let err = k.fails(&[
        "patch",
        "fcl",
        "eu-west",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"vipCIDR":"10.0.0.0/24"}}"#,
    ]);
    assert!(
        err.contains("spec.vipCIDR: Invalid value: \"10.0.0.0/24\": overlaps the vipCIDR of IngressPool \"eu-west-edge\""),
        "{err}"
    );

    assert!(
        k.ok(&["delete", "-f", &example("ingressclaim-shop.yaml")])
            .contains("deleted")
    );
    assert!(
        k.ok(&["delete", "ipool", "us-east-edge"])
            .contains("deleted")
    );
    let err = k.fails(&["get", "iclaim", "shop"]);
    assert!(
        err.contains("ingressclaims.fedingress.io \"shop\" not found"),
        "{err}"
    );
}

#[test]
fn older_and_newer_kubectl_work_too() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    for version in ["1.27", "1.33"] {
        let k = dev_kubectl(dir.path(), &server, Some(version));
        // kubectl 1.27 finds fieldValidation support in the protobuf OpenAPI v2
        // document, 1.33 in OpenAPI v3: both leave validation to the server.
        let validate = "--validate=strict";
        let unknown = write(
            dir.path(),
            "unknown.yaml",
            &ECHO
                .replace("TTL", "30")
                .replace("spec:\n", "spec:\n  bogus: 1\n"),
        );
        let err = k.fails(&["apply", "-f", &unknown]);
        assert!(
            err.contains("unknown field \"spec.bogus\""),
            "kubectl {version}: {err}"
        );
        let echo = write(dir.path(), "echo.yaml", &ECHO.replace("TTL", "30"));
        assert!(
            k.ok(&["apply", validate, "-f", &echo])
                .contains("echo created"),
            "kubectl {version}"
        );
        let table = k.ok(&["get", "fing"]);
        assert!(table.starts_with("NAME"), "kubectl {version}: {table}");
        let echo = write(dir.path(), "echo.yaml", &ECHO.replace("TTL", "45"));
        assert!(
            k.ok(&["apply", validate, "-f", &echo])
                .contains("configured"),
            "kubectl {version}"
        );
        k.ok(&[
            "patch",
            "fing",
            "echo",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"v":"x"}}}"#,
        ]);
        let explain = k.ok(&["explain", "federatedingress.spec.traffic"]);
        assert!(explain.contains("dnsName"), "kubectl {version}: {explain}");
        let bad = write(dir.path(), "bad.yaml", &ECHO.replace("TTL", "0"));
        let err = k.fails(&["apply", validate, "-f", &bad]);
        assert!(err.contains("spec.traffic.ttl"), "kubectl {version}: {err}");
        assert!(
            k.ok(&["delete", "fing", "echo"]).contains("deleted"),
            "kubectl {version}"
        );
        // IngressPools too: 1.27 finds their PATCH operations in OpenAPI v2.
        let pool = example("ingresspool-eu-west.yaml");
        assert!(
            k.ok(&["apply", validate, "-f", &pool]).contains("created"),
            "kubectl {version}"
        );
        let table = k.ok(&["get", "ipool", "-o", "wide"]);
        assert!(
            table.starts_with("NAME") && table.contains("SELECTOR"),
            "kubectl {version}: {table}"
        );
        assert!(
            k.ok(&["delete", "-f", &pool]).contains("deleted"),
            "kubectl {version}"
        );
    }
}

#[test]
fn tls_tokens_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = TestPki::generate().write(dir.path());
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "admin-token,alice,1,\"fedingress:admins\"\nviewer-token,bob,2,fedingress:viewers\nnobody-token,carol,3\n",
    )
    .unwrap();
    let server = start_apiserver(
        &dir.path().join("data"),
        &[
            "--tls-cert-file",
            cert.to_str().unwrap(),
            "--tls-private-key-file",
            key.to_str().unwrap(),
            "--token-auth-file",
            tokens.to_str().unwrap(),
        ],
    );
    let url = format!("https://{}", server.addr("api"));
    let as_user = |name: &str, token: Option<&str>| {
        let path = dir.path().join(format!("kubeconfig-{name}"));
        write_kubeconfig(&path, &url, Some(&ca), token);
        Kubectl::new(None, path)
    };
    let admin = as_user("admin", Some("admin-token"));
    let echo = write(dir.path(), "echo.yaml", &ECHO.replace("TTL", "30"));
    assert!(admin.ok(&["apply", "-f", &echo]).contains("created"));

    let viewer = as_user("viewer", Some("viewer-token"));
    assert!(viewer.ok(&["get", "fing"]).contains("echo"));
    let err = viewer.fails(&["delete", "fing", "echo"]);
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
    assert!(err.contains("User \"bob\" cannot delete"), "{err}");

    let nobody = as_user("nobody", Some("nobody-token"));
    let err = nobody.fails(&["get", "fing"]);
    assert!(
        err.contains("forbidden") || err.contains("Forbidden"),
        "{err}"
    );

    let err = as_user("wrong", Some("not-a-token")).fails(&["get", "fing"]);
    assert!(
        err.contains("Unauthorized") || err.contains("logged in"),
        "{err}"
    );
    // Without any credentials kubectl prompts for a password, so ask with curl.
    let out = Command::new("curl")
        .args([
            "-s",
            "--cacert",
            ca.to_str().unwrap(),
            &format!("{url}/apis/fedingress.io/v1alpha1/clusters"),
        ])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (status["code"].as_i64(), status["reason"].as_str()),
        (Some(401), Some("Unauthorized"))
    );
}

/// docs/pools.md's IngressPool and IngressClaim examples, applied verbatim with kubectl
/// (issue 24): the pool is accepted with its field values, and the same pool again under
/// another name is refused with the field paths the doc lists.
#[test]
fn the_pools_docs_examples_apply_verbatim() {
    use fedingress_tests::docs::code_block;
    let dir = tempfile::tempdir().unwrap();
    let server = start_apiserver(&dir.path().join("data"), &["--dev"]);
    let k = dev_kubectl(dir.path(), &server, None);
    k.ok(&["apply", "-f", &example("cluster-eu-west.yaml")]);
    let pool = code_block("pools.md", "## IngressPool", "yaml");
    let path = write(dir.path(), "pool.yaml", &pool);
    assert_eq!(
        k.ok(&["apply", "-f", &path]).trim(),
        "ingresspool.fedingress.io/gold created"
    );
    let spec = k.ok(&[
        "get",
        "ipool",
        "gold",
        "-o",
        "jsonpath={.spec.vipCIDR} {.spec.vips[0]} {.spec.capacity.bandwidth}",
    ]);
    assert_eq!(spec.trim(), "10.0.0.96/28 10.0.0.100 125000000");
    let twin = write(
        dir.path(),
        "twin.yaml",
        &pool.replace("name: gold", "name: twin"),
    );
    let err = k.fails(&["apply", "-f", &twin]);
    for field in ["spec.vipCIDR", "spec.vips[0]", "spec.virtualRouterId"] {
        assert!(err.contains(field), "{field} in {err}");
    }
    let claim = code_block("pools.md", "## Claims", "yaml");
    let path = write(dir.path(), "claim.yaml", &claim);
    assert_eq!(
        k.ok(&["apply", "-f", &path]).trim(),
        "ingressclaim.fedingress.io/shop created"
    );
}
