//! RBAC, OIDC and the audit log, driven by the real kubectl over TLS.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fedingress_tests::oidc::{Issuer, SigningKey, mint};
use fedingress_tests::{Kubectl, Process, TestPki, binary, eventually, write_kubeconfig};
use serde_json::Value;

const START: Duration = Duration::from_secs(30);
/// The authorizer sees a new binding through a store watch: allow it time.
const PROPAGATE: Duration = Duration::from_secs(20);

const ECHO: &str = "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata:
  name: echo
spec:
  rules:
  - protocol: TCP
    port: 7777
    backend: {service: echo, port: 7777}
  traffic:
    dnsName: echo.fedingress.test
";

struct Server {
    process: Process,
    dir: PathBuf,
    ca: PathBuf,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Self {
        let (ca, cert, key) = TestPki::generate().write(dir);
        let tokens = dir.join("tokens.csv");
        std::fs::write(
            &tokens,
            "admin-token,alice,1,\"fedingress:admins\"\ndave-token,dave,2\n",
        )
        .unwrap();
        let mut command = Command::new(binary("federation-apiserver"));
        command
            .args(["--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-private-key-file")
            .arg(&key)
            .arg("--token-auth-file")
            .arg(&tokens)
            .args(extra);
        Self {
            process: Process::start(command, "federation-apiserver", START).unwrap(),
            dir: dir.to_path_buf(),
            ca,
        }
    }

    fn url(&self) -> String {
        format!("https://{}", self.process.addr("api"))
    }

    fn kubectl(&self, name: &str, token: &str) -> Kubectl {
        let path = self.dir.join(format!("kubeconfig-{name}"));
        write_kubeconfig(&path, &self.url(), Some(&self.ca), Some(token));
        Kubectl::new(None, path)
    }

    /// GET with curl: (HTTP code, body as JSON or a string).
    fn curl(&self, path: &str, token: &str) -> (u16, Value) {
        self.curl_with(path, token, &[])
    }

    /// curl with extra arguments (`-X POST`, `-d`, ...).
    fn curl_with(&self, path: &str, token: &str, extra: &[&str]) -> (u16, Value) {
        let out = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", "--cacert"])
            .arg(&self.ca)
            .args(extra)
            .args(["-H", &format!("Authorization: Bearer {token}")])
            .arg(format!("{}{path}", self.url()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        let value = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.into()));
        (code.trim().parse().unwrap(), value)
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_rolebinding_to_edit_scopes_a_user_to_one_namespace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let audit = dir.join("audit.log");
    let server = Server::start(dir, &["--audit-log-path", audit.to_str().unwrap()]);
    let admin = server.kubectl("admin", "admin-token");
    let dave = server.kubectl("dave", "dave-token");
    let echo = write(dir, "echo.yaml", ECHO);
    admin.create_namespace("shop");
    admin.create_namespace("team");

    // The bootstrap roles are there; the existing group is cluster-admin.
    let roles = admin.ok(&["get", "clusterroles"]);
    let header: Vec<&str> = roles.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CREATED", "AT"], "{roles}");
    for name in ["cluster-admin", "admin", "edit", "view"] {
        assert!(
            roles.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{roles}"
        );
    }
    let bindings = admin.ok(&["get", "clusterrolebindings"]);
    assert!(
        bindings.contains("fedingress:admins") && bindings.contains("ClusterRole/cluster-admin"),
        "{bindings}"
    );

    // dave holds nothing yet: kube's exact words.
    let err = dave.fails(&["create", "-n", "shop", "-f", &echo]);
    assert!(
        err.contains("federatedingresses.fedingress.io is forbidden: User \"dave\" cannot create resource \"federatedingresses\" in API group \"fedingress.io\" in the namespace \"shop\""),
        "{err}"
    );

    let out = admin.ok(&[
        "create",
        "rolebinding",
        "dave-edit",
        "--clusterrole=edit",
        "--user=dave",
        "-n",
        "shop",
    ]);
    assert_eq!(
        out.trim(),
        "rolebinding.rbac.authorization.k8s.io/dave-edit created"
    );
    let listed = admin.ok(&["get", "rolebindings", "-n", "shop"]);
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "ROLE", "AGE"], "{listed}");
    assert!(listed.contains("ClusterRole/edit"), "{listed}");
    let wide = admin.ok(&["get", "rolebindings", "-n", "shop", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{wide}"
    );
    assert!(
        wide.lines()
            .any(|l| l.starts_with("dave-edit") && l.contains("dave")),
        "{wide}"
    );

    eventually(PROPAGATE, "dave may create in shop", || {
        let out = dave.run(&["apply", "-n", "shop", "-f", &echo]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    assert!(dave.ok(&["get", "fing", "-n", "shop"]).contains("echo"));
    // kubectl auth can-i asks the same evaluation.
    let can_i = |args: &[&str]| {
        let out = dave.run(&[&["auth", "can-i"], args].concat());
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(
        can_i(&["create", "federatedingresses", "-n", "shop"]),
        "yes"
    );
    assert_eq!(
        can_i(&["create", "federatedingresses", "-n", "default"]),
        "no"
    );
    assert_eq!(can_i(&["list", "clusters"]), "no");
    assert_eq!(can_i(&["get", "/metrics"]), "no");

    // Elsewhere: refused, with the verb, resource, group and namespace.
    let err = dave.fails(&["create", "-n", "default", "-f", &echo]);
    assert!(
        err.contains("Error from server (Forbidden)")
            && err.contains("federatedingresses.fedingress.io is forbidden: User \"dave\" cannot create resource \"federatedingresses\" in API group \"fedingress.io\" in the namespace \"default\""),
        "{err}"
    );
    let err = dave.fails(&["get", "clusters"]);
    assert!(
        err.contains("clusters.fedingress.io is forbidden: User \"dave\" cannot list resource \"clusters\" in API group \"fedingress.io\" at the cluster scope"),
        "{err}"
    );
    let err = dave.fails(&["delete", "fing", "echo", "-n", "default"]);
    assert!(
        err.contains("federatedingresses.fedingress.io \"echo\" is forbidden: User \"dave\" cannot delete resource \"federatedingresses\" in API group \"fedingress.io\" in the namespace \"default\""),
        "{err}"
    );
    // edit grants no RBAC: dave cannot hand himself more.
    let err = dave.fails(&[
        "create",
        "rolebinding",
        "more",
        "--clusterrole=admin",
        "--user=dave",
        "-n",
        "shop",
    ]);
    assert!(
        err.contains("User \"dave\" cannot create resource \"rolebindings\" in API group \"rbac.authorization.k8s.io\" in the namespace \"shop\""),
        "{err}"
    );
    // A namespace admin may hand out what they hold there, and no more.
    admin.ok(&[
        "create",
        "rolebinding",
        "dave-admin",
        "--clusterrole=admin",
        "--user=dave",
        "-n",
        "team",
    ]);
    let described = admin.ok(&["describe", "rolebinding", "dave-admin", "-n", "team"]);
    assert!(
        described.contains("ClusterRole")
            && described.contains("admin")
            && described.contains("dave"),
        "{described}"
    );
    eventually(PROPAGATE, "dave may bind edit in team", || {
        let out = dave.run(&[
            "create",
            "rolebinding",
            "erin-edit",
            "--clusterrole=edit",
            "--user=erin",
            "-n",
            "team",
        ]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    let err = dave.fails(&[
        "create",
        "rolebinding",
        "erin-root",
        "--clusterrole=cluster-admin",
        "--user=erin",
        "-n",
        "team",
    ]);
    assert!(
        err.contains("rolebindings.rbac.authorization.k8s.io \"erin-root\" is forbidden: user \"dave\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    // Server-side apply is a write like the others: no escalation through it either,
    // creating or updating (it once skipped the check).
    let root = write(
        dir,
        "erin-root.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: erin-root, namespace: team}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: erin}]\n",
    );
    let err = dave.fails(&["apply", "--server-side", "-f", &root]);
    assert!(
        err.contains("is attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    let role = write(
        dir,
        "erin-role.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: erin-role, namespace: team}\nrules: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]\n",
    );
    let err = dave.fails(&["apply", "--server-side", "-f", &role]);
    assert!(
        err.contains("is attempting to grant RBAC permissions not currently held"),
        "{err}"
    );
    let (code, status) = server.curl("/metrics", "dave-token");
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "forbidden: User \"dave\" cannot get path \"/metrics\""
    );
    let (code, status) = server.curl("/metrics", "not-a-token");
    assert_eq!(
        (code, status["reason"].as_str()),
        (401, Some("Unauthorized"))
    );

    // Roles: create, get, describe, apply (create, then configured), delete.
    let out = admin.ok(&[
        "create",
        "role",
        "fi-reader",
        "--verb=get,list,watch",
        "--resource=federatedingresses.fedingress.io",
        "-n",
        "shop",
    ]);
    assert_eq!(
        out.trim(),
        "role.rbac.authorization.k8s.io/fi-reader created"
    );
    let explained = admin.ok(&["explain", "role.rules.verbs"]);
    assert!(explained.contains("Verbs this rule allows"), "{explained}");
    let described = admin.ok(&["describe", "role", "fi-reader", "-n", "shop"]);
    assert!(
        described.contains("federatedingresses.fedingress.io")
            && described.contains("[get list watch]"),
        "{described}"
    );
    let role = "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: cluster-watcher
  namespace: shop
rules:
- apiGroups: [fedingress.io]
  resources: [federatedingresses]
  verbs: [VERBS]
";
    let path = write(dir, "role.yaml", &role.replace("VERBS", "get"));
    assert_eq!(
        admin.ok(&["apply", "-f", &path]).trim(),
        "role.rbac.authorization.k8s.io/cluster-watcher created"
    );
    let path = write(dir, "role.yaml", &role.replace("VERBS", "get, list"));
    assert_eq!(
        admin.ok(&["apply", "-f", &path]).trim(),
        "role.rbac.authorization.k8s.io/cluster-watcher configured"
    );
    assert_eq!(
        admin.ok(&[
            "get",
            "role",
            "cluster-watcher",
            "-n",
            "shop",
            "-o",
            "jsonpath={.rules[0].verbs}"
        ]),
        "[\"get\",\"list\"]"
    );
    // Validation with field paths.
    let bad = write(
        dir,
        "bad.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: bad, namespace: shop}\nrules:\n- verbs: [get]\n  nonResourceURLs: [/metrics]\n",
    );
    let err = admin.fails(&["create", "-f", &bad]);
    assert!(
        err.contains("rules[0].nonResourceURLs")
            && err.contains("namespaced rules cannot apply to non-resource URLs"),
        "{err}"
    );
    assert!(
        admin
            .ok(&["delete", "role", "cluster-watcher", "-n", "shop"])
            .contains("deleted")
    );
    let out = admin.ok(&[
        "create",
        "clusterrole",
        "cluster-reader",
        "--verb=get,list",
        "--resource=clusters.fedingress.io",
    ]);
    assert!(out.contains("created"), "{out}");
    let out = admin.ok(&[
        "create",
        "clusterrolebinding",
        "dave-clusters",
        "--clusterrole=cluster-reader",
        "--user=dave",
    ]);
    assert!(out.contains("created"), "{out}");
    eventually(PROPAGATE, "dave may list clusters", || {
        dave.run(&["get", "clusters"])
            .status
            .success()
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });
    assert!(
        admin
            .ok(&["delete", "clusterrolebinding", "dave-clusters"])
            .contains("deleted")
    );
    eventually(PROPAGATE, "dave may no longer list clusters", || {
        (!dave.run(&["get", "clusters"]).status.success())
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });

    // The audit log: one line per write, refused ones too, no tokens.
    // Refused writes are audited too: a bad token (401) and a duplicate (409).
    let (code, _) = server.curl_with(
        "/apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings",
        "not-a-token",
        // HTTP/1.1: over h2 the server answers 401 before reading the body and then
        // resets the stream (NO_ERROR), which curl sometimes reports as a framing error.
        &[
            "--http1.1",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            "{}",
        ],
    );
    assert_eq!(code, 401);
    let err = admin.fails(&[
        "create",
        "rolebinding",
        "dave-edit",
        "--clusterrole=edit",
        "--user=dave",
        "-n",
        "shop",
    ]);
    assert!(
        err.contains("AlreadyExists") || err.contains("already exists"),
        "{err}"
    );
    let text = eventually(PROPAGATE, "audit lines", || {
        let text = std::fs::read_to_string(&audit).map_err(|e| e.to_string())?;
        if text.contains("\"code\":409") {
            Ok(text)
        } else {
            Err(text)
        }
    });
    assert!(
        !text.contains("admin-token")
            && !text.contains("dave-token")
            && !text.contains("not-a-token")
    );
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.iter().all(|e| e["apiVersion"] == "audit.k8s.io/v1"
        && e["level"] == "Metadata"
        && e["stage"] == "ResponseComplete"
        && e["auditID"].is_string()
        && e["requestReceivedTimestamp"].is_string()
        && e["stageTimestamp"].is_string()));
    let created = events
        .iter()
        .find(|e| {
            e["objectRef"]["name"] == "dave-edit"
                && e["objectRef"]["resource"] == "rolebindings"
                && e["responseStatus"]["code"] == 201
        })
        .unwrap_or_else(|| panic!("no rolebinding create in {text}"));
    assert_eq!(created["verb"], "create");
    assert_eq!(created["user"]["username"], "alice");
    assert_eq!(created["objectRef"]["namespace"], "shop");
    assert_eq!(
        created["objectRef"]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
    assert_eq!(created["sourceIPs"][0], "127.0.0.1");
    assert!(
        created["userAgent"]
            .as_str()
            .unwrap()
            .starts_with("kubectl")
    );
    let refused = events
        .iter()
        .find(|e| {
            e["user"]["username"] == "dave"
                && e["responseStatus"]["code"] == 403
                && e["objectRef"]["namespace"] == "default"
        })
        .unwrap_or_else(|| panic!("no refused create in {text}"));
    assert_eq!(refused["verb"], "create");
    assert!(
        refused["responseStatus"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot create resource")
    );
    assert!(
        events
            .iter()
            .any(|e| e["verb"] == "delete" && e["objectRef"]["name"] == "cluster-watcher")
    );
    assert!(
        events
            .iter()
            .all(|e| e["verb"] != "get" && e["verb"] != "list")
    );
    let unauthorized = events
        .iter()
        .find(|e| e["responseStatus"]["code"] == 401)
        .unwrap_or_else(|| panic!("no 401 in {text}"));
    assert_eq!(unauthorized["verb"], "create");
    assert!(unauthorized["user"]["username"].is_null());
    assert_eq!(unauthorized["objectRef"]["resource"], "rolebindings");
    assert!(
        events
            .iter()
            .any(|e| e["responseStatus"]["code"] == 409 && e["user"]["username"] == "alice"),
        "no 409 in {text}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&audit).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// `kubectl auth can-i --list` failed for every user: SelfSubjectRulesReview was not
/// served (issue 23). An admin sees `*.*`; a user sees a RoleBinding's rules in its
/// namespace only.
#[test]
fn kubectl_auth_can_i_list_shows_each_users_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let server = Server::start(dir, &[]);
    let admin = server.kubectl("admin", "admin-token");
    let dave = server.kubectl("dave", "dave-token");
    admin.create_namespace("shop");
    admin.create_namespace("team");
    // Each row as its words: resources, non-resource URLs, names, verbs.
    let rows = |kubectl: &Kubectl, namespace: &str| -> Vec<Vec<String>> {
        let out = kubectl.ok(&["auth", "can-i", "--list", "-n", namespace]);
        let mut lines = out.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            [
                "Resources",
                "Non-Resource",
                "URLs",
                "Resource",
                "Names",
                "Verbs"
            ],
            "{out}"
        );
        lines
            .map(|l| l.split_whitespace().map(String::from).collect())
            .collect()
    };

    let all = rows(&admin, "default");
    assert!(
        all.contains(&vec!["*.*".into(), "[]".into(), "[]".into(), "[*]".into()]),
        "{all:?}"
    );
    assert!(
        all.contains(&vec!["[*]".into(), "[]".into(), "[*]".into()]),
        "{all:?}"
    );

    let fed = |rows: &[Vec<String>]| {
        rows.iter()
            .filter(|r| r[0].ends_with(".fedingress.io"))
            .map(|r| r.join(" "))
            .collect::<Vec<_>>()
    };
    let before = rows(&dave, "shop");
    assert_eq!(fed(&before), Vec::<String>::new(), "{before:?}");
    assert!(
        before.iter().any(|r| r[0] == "[/api/*]"),
        "every user may read discovery: {before:?}"
    );

    admin.ok(&[
        "create",
        "rolebinding",
        "dave-view",
        "--clusterrole=view",
        "--user=dave",
        "-n",
        "shop",
    ]);
    eventually(PROPAGATE, "dave's list shows view in shop", || {
        let shop = rows(&dave, "shop");
        let fed = fed(&shop);
        if fed
            .iter()
            .any(|r| r == "federatedingresses.fedingress.io [] [] [get list watch]")
        {
            Ok(())
        } else {
            Err(format!("{shop:?}"))
        }
    });
    let team = rows(&dave, "team");
    assert_eq!(fed(&team), Vec::<String>::new(), "{team:?}");
}

#[test]
fn oidc_tokens_authenticate_users() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let issuer = Issuer::start().unwrap();
    let ca = dir.join("oidc-ca.crt");
    std::fs::write(&ca, &issuer.ca_pem).unwrap();
    let config = dir.join("apiserver.yaml");
    std::fs::write(&config, "oidc:\n  minKeyRefreshSeconds: 1\n").unwrap();
    let url = issuer.url();
    let server = Server::start(
        dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "--oidc-issuer-url",
            &url,
            "--oidc-client-id",
            "fedingress",
            "--oidc-username-claim",
            "email",
            "--oidc-groups-claim",
            "groups",
            "--oidc-groups-prefix",
            "oidc:",
            "--oidc-ca-file",
            ca.to_str().unwrap(),
        ],
    );
    let admin = server.kubectl("admin", "admin-token");
    admin.ok(&[
        "create",
        "clusterrolebinding",
        "oidc-readers",
        "--clusterrole=view",
        "--group=oidc:readers",
    ]);
    let reads = |name: &str, token: &str| {
        server
            .kubectl(name, token)
            .run(&["get", "fing", "-A"])
            .status
            .success()
    };

    let rsa = issuer.token(
        "rsa-1",
        &issuer.claims("fedingress", "ann@example.com", &["readers"]),
    );
    eventually(PROPAGATE, "ann reads with an RS256 token", || {
        reads("ann", &rsa)
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });
    let ec = issuer.token(
        "ec-1",
        &issuer.claims("fedingress", "ann@example.com", &["readers"]),
    );
    assert!(reads("ann-ec", &ec), "ES256");

    // A valid token of a user without a binding: authenticated, then refused by name.
    let bob = issuer.token(
        "rsa-1",
        &issuer.claims("fedingress", "bob@example.com", &["other"]),
    );
    let err = server
        .kubectl("bob", &bob)
        .fails(&["get", "fing", "-n", "shop"]);
    assert!(
        err.contains("User \"bob@example.com\" cannot list resource \"federatedingresses\" in API group \"fedingress.io\" in the namespace \"shop\""),
        "{err}"
    );

    let refused = |name: &str, token: &str| {
        let (code, status) = server.curl("/apis/fedingress.io/v1alpha1/federatedingresses", token);
        assert_eq!(
            (code, status["reason"].as_str()),
            (401, Some("Unauthorized")),
            "{name}: {status}"
        );
    };
    let mut claims = issuer.claims("fedingress", "ann@example.com", &["readers"]);
    claims["exp"] = (chrono::Utc::now().timestamp() - 600).into();
    refused("expired", &issuer.token("rsa-1", &claims));
    refused(
        "wrong audience",
        &issuer.token(
            "rsa-1",
            &issuer.claims("someone-else", "ann@example.com", &["readers"]),
        ),
    );
    let mut claims = issuer.claims("fedingress", "ann@example.com", &["readers"]);
    claims["iss"] = "https://127.0.0.1:1".into();
    refused("wrong issuer", &issuer.token("rsa-1", &claims));
    let rogue = SigningKey::rs256();
    refused(
        "unknown key",
        &mint(
            &rogue,
            "rsa-1",
            &issuer.claims("fedingress", "ann@example.com", &["readers"]),
        ),
    );
    refused(
        "unknown kid",
        &issuer.token(
            "nobody",
            &issuer.claims("fedingress", "ann@example.com", &["readers"]),
        ),
    );
    let mut claims = issuer.claims("fedingress", "ann@example.com", &["readers"]);
    claims["email_verified"] = false.into();
    refused("email not verified", &issuer.token("rsa-1", &claims));

    // Key rotation: a new kid is fetched on first sight; a removed key stops working
    // once the keys are fetched again.
    let fetches = issuer.jwks_fetches();
    issuer.add_key("rsa-2", SigningKey::rs256());
    let rotated = issuer.token(
        "rsa-2",
        &issuer.claims("fedingress", "ann@example.com", &["readers"]),
    );
    eventually(PROPAGATE, "the rotated key is accepted", || {
        reads("ann-rotated", &rotated)
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });
    assert!(issuer.jwks_fetches() > fetches);
    issuer.remove_key("ec-1");
    issuer.add_key("ec-2", SigningKey::es256());
    let newer = issuer.token(
        "ec-2",
        &issuer.claims("fedingress", "ann@example.com", &["readers"]),
    );
    eventually(PROPAGATE, "ec-2 is accepted", || {
        reads("ann-ec2", &newer)
            .then_some(())
            .ok_or_else(|| "not yet".to_string())
    });
    refused("a removed key", &ec);

    let (code, metrics) = server.curl("/metrics", "admin-token");
    assert_eq!(code, 200);
    let metrics = metrics.as_str().unwrap().to_string();
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in {metrics}"))
    };
    assert!(value("fedingress_oidc_tokens_total{result=\"accepted\"}") >= 4);
    assert!(value("fedingress_oidc_tokens_total{result=\"rejected\"}") >= 6);
    assert!(value("fedingress_oidc_key_fetches_total{result=\"ok\"}") >= 2);
    assert!(value("fedingress_authorization_decisions_total{decision=\"deny\"}") >= 1);
    assert_eq!(value("fedingress_authorization_synced"), 1);
}

#[test]
fn bad_oidc_and_audit_settings_exit_64() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--oidc-issuer-url",
                "http://issuer.example",
                "--oidc-client-id",
                "c",
            ],
            "https",
        ),
        (
            &["--oidc-issuer-url", "https://issuer.example"],
            "--oidc-client-id",
        ),
        (
            &[
                "--oidc-issuer-url",
                "https://issuer.example",
                "--oidc-client-id",
                "c",
                "--oidc-ca-file",
                "/nonexistent/ca.crt",
            ],
            "--oidc-ca-file",
        ),
        (
            &["--audit-log-path", "/nonexistent/dir/audit.log"],
            "--audit-log-path",
        ),
    ];
    for (args, needle) in cases {
        let out = Command::new(binary("federation-apiserver"))
            .args([
                "--dev",
                "--listen",
                "127.0.0.1:0",
                "--agent-listen",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(&data)
            .args(*args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn older_and_newer_kubectl_manage_rbac_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let server = Server::start(dir, &[]);
    for version in ["1.27", "1.33"] {
        let path = dir.join(format!("kubeconfig-{version}"));
        write_kubeconfig(&path, &server.url(), Some(&server.ca), Some("admin-token"));
        let k = Kubectl::new(Some(version), path);
        let ns = format!("v{}", version.replace('.', "-"));
        k.create_namespace(&ns);
        let out = k.ok(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=federatedingresses.fedingress.io",
            "-n",
            &ns,
        ]);
        assert!(out.contains("created"), "{version}: {out}");
        let out = k.ok(&[
            "create",
            "rolebinding",
            "reader",
            "--role=reader",
            "--user=dave",
            "-n",
            &ns,
        ]);
        assert!(out.contains("created"), "{version}: {out}");
        let role = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: applied, namespace: {ns}}}\nrules:\n- {{apiGroups: [fedingress.io], resources: [clusters], verbs: [VERB]}}\n"
        );
        let file = write(
            dir,
            &format!("role-{version}.yaml"),
            &role.replace("VERB", "get"),
        );
        assert!(
            k.ok(&["apply", "-f", &file]).contains("created"),
            "{version}"
        );
        let file = write(
            dir,
            &format!("role-{version}.yaml"),
            &role.replace("VERB", "list"),
        );
        assert!(
            k.ok(&["apply", "-f", &file]).contains("configured"),
            "{version}"
        );
        let roles = k.ok(&["get", "roles", "-n", &ns]);
        assert!(
            roles.contains("reader") && roles.contains("applied"),
            "{version}: {roles}"
        );
        assert!(
            k.ok(&["describe", "rolebinding", "reader", "-n", &ns])
                .contains("dave"),
            "{version}"
        );
        assert!(
            k.ok(&["delete", "rolebinding", "reader", "-n", &ns])
                .contains("deleted")
        );
    }
}
