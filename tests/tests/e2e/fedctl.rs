//! fedctl end to end: the real binary against a real federation-apiserver, agents and
//! DNS server (`dig`), and `fedctl dev up` with every command it suggests run exactly
//! as printed, alone and with `--ha` (etcd and three replicas, one killed). Own loopback
//! blocks 127.0.41.x–127.0.47.x (port 0 elsewhere).

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use fedingress_tests::echo::Echo;
use fedingress_tests::fedctl::{Fedctl, Suggestion, golden, normalize_ages, suggestions};
use fedingress_tests::federation::{
    ClusterSpec, HubProcess, agent_config, create_cluster, curl_json, get_json, issue_token,
    kubectl, start_agent, start_hub_with,
};
use fedingress_tests::{Kubectl, Process, TestPki, binary, eventually};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// Three client regions: 10.1/16 Europe, 10.2/16 US east, 10.3/16 India.
fn dns_config(block: u8) -> String {
    format!(
        "dns:
  listen: 127.0.{block}.1:0
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
  locations:
    default: {{region: europe-west1, latitude: 50.0, longitude: 4.0}}
    table:
    - {{cidr: 10.1.0.0/16, region: europe-west1, latitude: 50.8, longitude: 4.3}}
    - {{cidr: 10.2.0.0/16, region: us-east1, latitude: 40.7, longitude: -74.0}}
    - {{cidr: 10.3.0.0/16, region: asia-south1, latitude: 19.0, longitude: 72.8}}
"
    )
}

fn three_regions(block: u8) -> Vec<ClusterSpec> {
    vec![
        ClusterSpec::numbered(block, 1, "europe-west1", 50.4, 3.8),
        ClusterSpec::numbered(block, 2, "us-east1", 39.0, -77.5),
        ClusterSpec::numbered(block, 3, "asia-south1", 19.1, 72.9),
    ]
}

/// A federation with DNS: hub, clusters (objects created with kubectl), agents, echo
/// backends, and fedctl with a kubeconfig for the hub.
struct Fed {
    hub: HubProcess,
    k: Kubectl,
    fedctl: Fedctl,
    /// The hub's DNS server.
    dns: SocketAddr,
    agents: Vec<Option<Process>>,
    echoes: Vec<Option<Echo>>,
    specs: Vec<ClusterSpec>,
}

fn start(dir: &Path, block: u8, specs: Vec<ClusterSpec>) -> Fed {
    let hub = start_hub_with(dir, block, &dns_config(block));
    let dns: SocketAddr = hub.process.addr("dns").parse().unwrap();
    let k = kubectl(dir, &hub.api);
    let fedctl = Fedctl::new(&k.kubeconfig);
    let mut agents = Vec::new();
    let mut echoes = Vec::new();
    for spec in &specs {
        echoes.push(Some(Echo::start(spec.backend).unwrap()));
        create_cluster(&k, dir, spec);
        let (_, token) = issue_token(&hub.api, &spec.name).unwrap();
        agents.push(Some(start_agent(
            &agent_config(dir, &hub.agent, spec, &token),
            &spec.name,
        )));
    }
    Fed {
        hub,
        k,
        fedctl,
        dns,
        agents,
        echoes,
        specs,
    }
}

impl Fed {
    fn ip(&self, n: usize) -> String {
        self.specs[n].bind.to_string()
    }

    /// `dig +short` answers, sorted.
    fn dig(&self, args: &[&str]) -> Vec<String> {
        let mut lines = fedingress_testsupport::dns::dig_short(self.dns, args);
        lines.sort();
        lines
    }

    /// Applies a TCP+UDP FederatedIngress.
    fn apply(&self, dir: &Path, namespace: &str, name: &str, port: u16, extra: &str) {
        let text = format!(
            "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  rules:\n  - protocol: TCP\n    port: {port}\n    name: echo\n    backend: {{service: echo, port: 9000}}\n  - protocol: UDP\n    port: {port}\n    backend: {{service: echo, port: 9000}}\n{extra}"
        );
        let path = dir.join(format!("{namespace}-{name}.yaml"));
        std::fs::write(&path, text).unwrap();
        self.k.create_namespace(namespace);
        self.k.ok(&["apply", "-f", &path.display().to_string()]);
    }

    fn wait_ready(&self, namespace: &str, name: &str) {
        eventually(WAIT, "ingress Ready", || {
            let object = get_json(&self.k, &["-n", namespace, "federatedingress", name]);
            let ready = object["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if ready {
                Ok(())
            } else {
                Err(object["status"].to_string())
            }
        });
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn tables_match_golden_output() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let block = 41;
    let f = start(dir, block, three_regions(block));
    // c3 is cordoned before anything is placed, so it carries nothing.
    assert!(
        f.fedctl
            .ok(&["cordon", "c3"])
            .contains("cluster/c3 cordoned")
    );
    f.apply(
        dir,
        "default",
        "geo",
        7000,
        "  traffic:\n    dnsName: geo.fedingress.test\n    ttl: 5\n    strategy: {type: Geo}\n",
    );
    f.apply(
        dir,
        "shop",
        "rr",
        7001,
        "  placement:\n    clusters: [c1, c2]\n  traffic:\n    dnsName: rr.fedingress.test\n    strategy: {type: RoundRobin}\n",
    );
    f.wait_ready("default", "geo");
    f.wait_ready("shop", "rr");
    eventually(WAIT, "c3 cordoned and every agent's load reported", || {
        let list = json(&f.fedctl.ok(&["get", "clusters", "-o", "json"]));
        let items = list["items"].as_array().unwrap();
        let reported = items
            .iter()
            .all(|c| c["status"]["connected"] == true && c["status"]["load"].is_object());
        let cordoned = items.iter().any(|c| {
            c["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "Cordoned"))
        });
        if reported && cordoned {
            Ok(())
        } else {
            Err(list.to_string())
        }
    });

    golden(
        "fedctl-get-clusters.txt",
        &normalize_ages(&f.fedctl.ok(&["get", "clusters"])),
    );
    golden(
        "fedctl-get-ingresses-all-namespaces.txt",
        &normalize_ages(&f.fedctl.ok(&["get", "ingresses", "-A"])),
    );
    golden(
        "fedctl-get-ingresses.txt",
        &normalize_ages(&f.fedctl.ok(&["get", "fing"])),
    );
    let status = f.fedctl.ok(&["status"]);
    golden(
        "fedctl-status.txt",
        &status.replace(&f.hub.api, "http://HUB"),
    );
    golden(
        "fedctl-explain.txt",
        &f.fedctl.ok(&["explain", "geo", "--client", "10.2.3.4"]),
    );

    // The same data as JSON and YAML.
    let list = json(&f.fedctl.ok(&["get", "clusters", "-o", "json"]));
    assert_eq!(list["kind"], "ClusterList");
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    let one = json(&f.fedctl.ok(&["get", "cluster", "c1", "-o", "json"]));
    assert_eq!(one["spec"]["region"], "europe-west1");
    let yaml = f
        .fedctl
        .ok(&["get", "ingresses", "-n", "shop", "-o", "yaml"]);
    assert!(yaml.contains("kind: FederatedIngressList"), "{yaml}");
    assert!(yaml.contains("name: rr"), "{yaml}");
    let status = json(&f.fedctl.ok(&["status", "-o", "json"]));
    assert_eq!(status["clusters"].as_array().unwrap().len(), 3);
    assert_eq!(status["ingresses"][0]["ready"], true);
    // Label selectors.
    let selected = f.fedctl.ok(&["get", "clusters", "-l", "env=test"]);
    assert_eq!(selected.lines().count(), 4, "{selected}");
    assert_eq!(
        f.fedctl.ok(&["get", "clusters", "-l", "env=prod"]),
        "No clusters.\n"
    );
    // Uncordon puts c3 back.
    assert!(f.fedctl.ok(&["uncordon", "c3"]).contains("uncordoned"));
    let c3 = json(&f.fedctl.ok(&["get", "cluster", "c3", "-o", "json"]));
    assert!(c3["spec"]["unschedulable"].is_null(), "{c3}");
}

#[test]
fn join_emits_an_agent_config_and_waits_for_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let block = 42;
    let hub = start_hub_with(dir, block, "");
    // A kubeconfig that names the agent gateway (as `fedctl dev up` writes it).
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fed\n  cluster:\n    server: {}\n    extensions:\n    - name: fedingress.io/agent-gateway\n      extension: {{address: \"{}\"}}\nusers:\n- name: me\n  user: {{}}\ncontexts:\n- name: fed\n  context: {{cluster: fed, user: me}}\ncurrent-context: fed\n",
            hub.api, hub.agent
        ),
    )
    .unwrap();
    let fedctl = Fedctl::new(&kubeconfig);
    let backend = Echo::start(format!("127.0.{block}.21:9000").parse().unwrap()).unwrap();
    let token_file = dir.join("c1.token");
    // A fixed admin address, as keepalived's track script needs (issue 23): the port is
    // picked free here and handed over.
    let admin = std::net::TcpListener::bind(format!("127.0.{block}.11:0"))
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();

    let mut join = fedctl.command(&[
        "join",
        "c1",
        "--region",
        "europe-west1",
        "--location",
        "50.4,3.8",
        "--label",
        "env=test",
        "--provider",
        "GCP",
        "--capacity-rps",
        "100",
        "--emit",
        "standalone",
        "--token-file",
        token_file.to_str().unwrap(),
        "--listen",
        &format!("127.0.{block}.11"),
        "--service",
        &format!("echo={}", backend.addr),
        "--admin-address",
        &admin,
        "--wait",
        "--timeout",
        "60s",
    ]);
    join.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut join = join.spawn().unwrap();
    // The config comes first on stdout (its last key is reportIntervalMs), then join
    // waits for the agent.
    let mut config = String::new();
    let mut lines = BufReader::new(join.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        config.push_str(&line);
        config.push('\n');
        if line.starts_with("reportIntervalMs:") {
            break;
        }
    }
    assert!(
        config.contains(&format!("address: \"{}\"", hub.agent)),
        "{config}"
    );
    assert!(!config.contains("REPLACE"), "{config}");
    assert!(
        config.contains(&format!("admin: \"{admin}\"\n")),
        "{config}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(
        std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .contains('.')
    );
    // Still waiting: no agent yet.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        join.try_wait().unwrap().is_none(),
        "join --wait returned before the agent connected"
    );
    let config_path = dir.join("agent.yaml");
    std::fs::write(&config_path, &config).unwrap();
    let _agent = start_agent(&config_path, "c1");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = join.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "join --wait did not return");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut join.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("connected: agent 0.1.0 (standalone)"),
        "{stderr}"
    );
    // The track script's question, at the address given.
    eventually(WAIT, "cluster-agent ready at --admin-address", || {
        let ready = Command::new(binary("cluster-agent"))
            .args(["ready", "--admin", &admin])
            .output()
            .unwrap();
        if ready.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&ready.stderr).into_owned())
        }
    });
    let cluster = json(&fedctl.ok(&["get", "cluster", "c1", "-o", "json"]));
    assert_eq!(cluster["metadata"]["labels"]["env"], "test");
    assert_eq!(cluster["spec"]["provider"], "gcp");
    assert_eq!(cluster["spec"]["capacity"]["rps"], 100);
    assert_eq!(cluster["status"]["connected"], true);

    // Joining it again: one clear line.
    let line = fedctl.fails(
        &[
            "join",
            "c1",
            "--region",
            "europe-west1",
            "--location",
            "50.4,3.8",
        ],
        1,
    );
    assert!(line.contains("already exists"), "{line}");

    // Without listen addresses and services the config has marked placeholders, which
    // the agent refuses (exit 64) until they are filled in.
    let placeholder = fedctl.run(&[
        "join",
        "c2",
        "--region",
        "us-east1",
        "--location",
        "39,-77.5",
        "--emit",
        "standalone",
        "--token-file",
        dir.join("c2.token").to_str().unwrap(),
    ]);
    assert_eq!(placeholder.code, 0, "{}", placeholder.stderr);
    assert!(
        placeholder.stdout.contains("REPLACE"),
        "{}",
        placeholder.stdout
    );
    let c2_config = dir.join("c2.yaml");
    std::fs::write(&c2_config, &placeholder.stdout).unwrap();
    let rejected = Command::new(binary("cluster-agent"))
        .arg("--config")
        .arg(&c2_config)
        .output()
        .unwrap();
    assert_eq!(rejected.status.code(), Some(64));

    // --wait without an agent times out with exit 1.
    let out = fedctl.run(&[
        "join",
        "c3",
        "--region",
        "asia-south1",
        "--location",
        "19,72.8",
        "--wait",
        "--timeout",
        "1s",
    ]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .lines()
            .last()
            .unwrap()
            .starts_with("fedctl: timed out after 1s waiting for the agent of c3"),
        "{}",
        out.stderr
    );
    // Without --emit: the token on stdout (shown once), or both objects as JSON.
    assert!(out.stdout.contains("cluster/c3 created"), "{}", out.stdout);
    // A cluster that never connected and carries nothing unjoins at once.
    let unjoined = fedctl.ok(&["unjoin", "c3"]);
    assert!(
        unjoined.contains("carries no ingress: nothing to drain"),
        "{unjoined}"
    );
    assert!(
        unjoined.contains("cluster/c3 deleted (1 agent token revoked)"),
        "{unjoined}"
    );
    let joined = json(&fedctl.ok(&[
        "join",
        "c4",
        "--region",
        "asia-south1",
        "--location",
        "19,72.8",
        "-o",
        "json",
    ]));
    assert_eq!(joined["cluster"]["metadata"]["name"], "c4");
    assert!(joined["token"]["token"].as_str().unwrap().contains('.'));

    // Tokens: create, list, revoke.
    let token = fedctl.ok(&["token", "create", "c4"]);
    assert_eq!(token.lines().count(), 1);
    let id = token.trim().split('.').next().unwrap().to_string();
    let listed = fedctl.ok(&["token", "list", "c4"]);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(listed.starts_with("ID "), "{listed}");
    assert!(listed.contains(&id), "{listed}");
    assert!(
        fedctl
            .ok(&["token", "revoke", "c4", &id])
            .contains("revoked")
    );
    let listed = json(&fedctl.ok(&["token", "list", "c4", "-o", "json"]));
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    let line = fedctl.fails(&["token", "list", "nope"], 1);
    assert!(line.contains("not found"), "{line}");

    // --emit kubernetes: the member cluster's manifests on stdout, the token in their
    // Secret (the hub here is http: no CA). The YAML itself is checked by fedctl's unit
    // tests; standalone-only flags are usage errors before anything is created.
    let line = fedctl.fails(
        &[
            "join",
            "c6",
            "--region",
            "us-east1",
            "--location",
            "39,-77.5",
            "--emit",
            "kubernetes",
            "--listen",
            "127.0.0.1",
        ],
        2,
    );
    assert!(
        line.contains("--listen is for --emit standalone, not --emit kubernetes"),
        "{line}"
    );
    fedctl.fails(&["get", "cluster", "c6"], 1);
    let out = fedctl.run(&[
        "join",
        "c5",
        "--region",
        "us-east1",
        "--location",
        "39,-77.5",
        "--provider",
        "aws",
        "--emit",
        "kubernetes",
        "--image",
        "registry.example.com/agent:dev",
        "--agent-namespace",
        "fed",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let manifests = out.stdout;
    assert!(
        out.stderr
            .contains("is in the Secret fed/fedingress-agent-token above"),
        "{}",
        out.stderr
    );
    for expected in [
        "kind: Namespace\nmetadata:\n  name: fed\n",
        "kind: Deployment\n",
        "image: \"registry.example.com/agent:dev\"\n",
        "cluster: c5 ",
        "driver: kubernetes\n",
        &format!("address: \"{}\"", hub.agent),
    ] {
        assert!(manifests.contains(expected), "{expected:?} in\n{manifests}");
    }
    assert!(!manifests.contains("REPLACE"), "{manifests}");
    assert!(!manifests.contains("caFile:"), "{manifests}");
    // The Secret's token is the one the hub issued for c5.
    let token = manifests
        .split("stringData:\n  token: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let id = token.split('.').next().unwrap();
    assert!(fedctl.ok(&["token", "list", "c5"]).contains(id));
}

#[test]
fn unjoin_drains_before_deleting() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let block = 43;
    let mut specs = three_regions(block);
    specs.truncate(2);
    let mut f = start(dir, block, specs);
    f.apply(
        dir,
        "default",
        "drain",
        7100,
        "  traffic:\n    dnsName: drain.fedingress.test\n    ttl: 3\n    strategy: {type: Geo}\n",
    );
    f.wait_ready("default", "drain");
    let europe = ["drain.fedingress.test", "A", "+subnet=10.1.2.0/24"];
    let (c1, c2) = (f.ip(0), f.ip(1));
    eventually(WAIT, "Europe on c1", || {
        let got = f.dig(&europe);
        if got == vec![c1.clone()] {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });

    let started = Instant::now();
    let mut unjoin = f.fedctl.command(&["unjoin", "c1"]);
    unjoin.stdout(Stdio::piped()).stderr(Stdio::piped());
    let unjoin = unjoin.spawn().unwrap();
    let cluster_url = format!("{}/apis/fedingress.io/v1alpha1/clusters/c1", f.hub.api);
    let mut cordoned_at = None;
    let mut moved_at = None;
    let gone_at;
    loop {
        // DNS first, then the cluster: read the other way round, a cordon made between
        // the two reads looked like DNS moving before it.
        let at = started.elapsed();
        let moved = f.dig(&europe) == vec![c2.clone()];
        let cluster = curl_json(&[&cluster_url]).unwrap();
        let exists = cluster["kind"] == "Cluster";
        if !exists {
            assert_eq!(cluster["reason"], "NotFound", "{cluster}");
            gone_at = started.elapsed();
            break;
        }
        if cordoned_at.is_none() && cluster["spec"]["unschedulable"] == true {
            cordoned_at = Some(at);
        }
        if moved_at.is_none() && moved {
            moved_at = Some(at);
        }
        assert!(started.elapsed() < WAIT, "unjoin did not delete c1");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = unjoin.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cordoned_at = cordoned_at.expect("c1 was cordoned while it still existed");
    let moved_at = moved_at.expect("DNS moved Europe to c2 while c1 still existed");
    assert!(cordoned_at <= moved_at);
    // One DNS TTL (3 s) passes between leaving the answers and the deletion.
    assert!(
        gone_at >= moved_at + Duration::from_millis(2500),
        "deleted {:?} after DNS moved",
        gone_at - moved_at
    );
    assert!(stdout.contains("cluster/c1 cordoned"), "{stdout}");
    assert!(stdout.contains("cluster/c1 drained (3s)"), "{stdout}");
    assert!(
        stdout.contains("cluster/c1 deleted (1 agent token revoked)"),
        "{stdout}"
    );
    // Gone, with its tokens; c2 serves everyone.
    let line = f.fedctl.fails(&["token", "list", "c1"], 1);
    assert!(line.contains("not found"), "{line}");
    assert_eq!(f.dig(&europe), vec![c2.clone()]);
    let line = f.fedctl.fails(&["unjoin", "c1"], 1);
    assert!(line.contains("not found"), "{line}");
    f.agents[0] = None;
    f.echoes[0] = None;
}

/// The records `fedctl explain` says a client in region `subnet` gets, sorted.
fn explained(f: &Fed, subnet: u8) -> Vec<String> {
    let value = json(&f.fedctl.ok(&[
        "explain",
        "geo",
        "--client",
        &format!("10.{subnet}.2.3"),
        "-o",
        "json",
    ]));
    let mut records: Vec<String> = value["answer"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    records.sort();
    records
}

/// Waits until, for every region, explain and the DNS server (dig) agree.
fn agree(f: &Fed, what: &str) {
    eventually(WAIT, what, || {
        for subnet in 1..=3u8 {
            let served = f.dig(&[
                "geo.fedingress.test",
                "A",
                &format!("+subnet=10.{subnet}.2.0/24"),
            ]);
            let explained = explained(f, subnet);
            if served.is_empty() || served != explained {
                return Err(format!(
                    "region {subnet}: dig {served:?}, explain {explained:?}"
                ));
            }
        }
        Ok(())
    });
}

#[test]
fn explain_agrees_with_the_dns_answers_served() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let block = 44;
    let mut f = start(dir, block, three_regions(block));
    f.apply(
        dir,
        "default",
        "geo",
        7200,
        "  traffic:\n    dnsName: geo.fedingress.test\n    ttl: 5\n    strategy: {type: Geo}\n",
    );
    f.wait_ready("default", "geo");
    agree(&f, "explain and dig agree");
    assert_eq!(explained(&f, 1), vec![f.ip(0)]);
    assert_eq!(explained(&f, 2), vec![f.ip(1)]);
    assert_eq!(explained(&f, 3), vec![f.ip(2)]);

    // c1's backend dies: Europe moves to the next nearest, and explain says why.
    f.echoes[0] = None;
    eventually(WAIT, "Europe moved", || {
        let got = f.dig(&["geo.fedingress.test", "A", "+subnet=10.1.2.0/24"]);
        if got == vec![f.ip(1)] {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    agree(&f, "explain and dig agree after the move");
    let text = f.fedctl.ok(&["explain", "geo", "--client", "10.1.2.3"]);
    assert!(
        text.contains(&format!("Answer:   c2 → {}", f.ip(1))),
        "{text}"
    );
    let c1_row = text.lines().find(|l| l.starts_with("c1 ")).unwrap();
    assert!(c1_row.contains(" no "), "{text}");
    assert!(c1_row.contains("unhealthy"), "{text}");

    // describe shows the per-cluster state, the answers per region and the events.
    let described = f.fedctl.ok(&["describe", "ingress", "geo"]);
    for needle in [
        "DNS name:     geo.fedingress.test (TTL 5s)",
        "Clusters:",
        "echo:9000 0/1",
        "DNS answers:",
        "Events:",
        "ClusterLeftAnswers",
        "Conditions:",
    ] {
        assert!(described.contains(needle), "{needle:?} in\n{described}");
    }
    let europe_row = described
        .lines()
        .find(|l| l.trim_start().starts_with("europe-west1") && l.contains(" A "))
        .unwrap();
    assert!(europe_row.ends_with(&f.ip(1)), "{described}");
    let cluster = f.fedctl.ok(&["describe", "cluster", "c1"]);
    for needle in [
        "Region:       europe-west1",
        "Status:       Ready",
        "default/geo",
        "has no ready endpoint",
        "Agent tokens:",
    ] {
        assert!(cluster.contains(needle), "{needle:?} in\n{cluster}");
    }
    let as_json = json(&f.fedctl.ok(&["describe", "ingress", "geo", "-o", "json"]));
    assert_eq!(as_json["ingress"]["metadata"]["name"], "geo");
    assert!(!as_json["events"].as_array().unwrap().is_empty());
    let line = f
        .fedctl
        .fails(&["explain", "nope", "--client", "10.1.2.3"], 1);
    assert!(line.contains("not found"), "{line}");
    let _ = &f.agents;
}

#[test]
fn usage_errors_and_unreachable_servers_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    fedingress_tests::write_kubeconfig(&kubeconfig, "http://127.0.46.1:1", None, None);
    let fedctl = Fedctl::new(&kubeconfig);
    let usage = [
        vec!["get", "clusters", "--bogus"],
        vec!["get", "nodes"],
        vec!["status", "-o", "xml"],
        vec!["join", "x", "--region", "r"],
        vec!["join", "x", "--region", "r", "--location", "north"],
        vec!["join", "x", "--region", "r", "--location", "91,0"],
        vec![
            "join",
            "x",
            "--region",
            "r",
            "--location",
            "1,2",
            "--label",
            "novalue",
        ],
        vec![
            "join",
            "x",
            "--region",
            "r",
            "--location",
            "1,2",
            "--token-file",
            "t",
        ],
        vec!["explain", "echo", "--client", "not-an-ip"],
        vec!["unjoin", "x", "--drain", "soon"],
        vec!["dev", "backend", "stop", "mars"],
    ];
    for args in usage {
        let line = fedctl.fails(&args, 2);
        assert!(!line.contains("Usage:"), "{line}");
    }
    assert!(
        fedctl
            .fails(&["get", "clusters", "--bogus"], 2)
            .contains("unexpected argument '--bogus'")
    );
    assert!(
        fedctl
            .fails(&["dev", "backend", "stop", "mars"], 2)
            .contains("\"mars\" is not a dev cluster")
    );
    // No subcommand: the help, exit 2.
    assert_eq!(fedctl.run(&[]).code, 2);
    assert_eq!(fedctl.run(&["--help"]).code, 0);

    // Unreachable server.
    for args in [
        vec!["get", "clusters"],
        vec!["status"],
        vec!["cordon", "c1"],
        vec!["join", "x", "--region", "r", "--location", "1,2"],
    ] {
        let line = fedctl.fails(&args, 1);
        assert!(
            line.starts_with(
                "fedctl: cannot reach the federation-apiserver at http://127.0.46.1:1: "
            ) && line.to_lowercase().contains("connection refused"),
            "{line}"
        );
    }
    // kubeconfig problems.
    let missing = Fedctl::new(&dir.path().join("missing"));
    let line = missing.fails(&["get", "clusters"], 1);
    assert!(line.contains("No such file or directory"), "{line}");
    let line = fedctl.fails(&["--context", "nope", "get", "clusters"], 1);
    assert_eq!(line, "fedctl: context \"nope\" is not in the kubeconfig");
    // $KUBECONFIG is read when --kubeconfig is absent.
    let mut command = Fedctl { kubeconfig: None }.command(&["get", "clusters"]);
    command.env("KUBECONFIG", &kubeconfig);
    let out = fedingress_tests::fedctl::run(command);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("127.0.46.1:1"), "{}", out.stderr);
}

#[test]
fn kubeconfig_tls_tokens_and_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let pki = TestPki::generate();
    let (ca, cert, key) = pki.write(dir);
    std::fs::write(
        dir.join("tokens.csv"),
        "admin-token,alice,1,\"fedingress:admins\"\nviewer-token,bob,2,fedingress:viewers\n",
    )
    .unwrap();
    std::fs::write(dir.join("viewer.token"), "viewer-token\n").unwrap();
    let config = dir.join("apiserver.yaml");
    std::fs::write(
        &config,
        format!(
            "listen: 127.0.0.1:0\nagentListen: 127.0.0.1:0\ndataDir: {}\ntokenFile: {}\ntls:\n  certFile: {}\n  keyFile: {}\n",
            dir.join("data").display(),
            dir.join("tokens.csv").display(),
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let mut command = Command::new(binary("federation-apiserver"));
    command.arg("--config").arg(&config);
    let hub = Process::start(command, "federation-apiserver", WAIT).unwrap();
    // Port 0 on 127.0.0.1: the test certificate names 127.0.0.1.
    let server = format!("https://{}", hub.addr("api"));
    let ca_data = base64::engine::general_purpose::STANDARD.encode(&pki.ca_pem);
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: inline\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca_data}\n- name: file\n  cluster:\n    server: {server}\n    certificate-authority: ca.crt\n- name: untrusted\n  cluster:\n    server: {server}\nusers:\n- name: admin\n  user: {{token: admin-token}}\n- name: viewer\n  user: {{tokenFile: viewer.token}}\n- name: wrong\n  user: {{token: not-a-token}}\ncontexts:\n- name: admin\n  context: {{cluster: inline, user: admin}}\n- name: viewer\n  context: {{cluster: file, user: viewer}}\n- name: wrong\n  context: {{cluster: inline, user: wrong}}\n- name: untrusted\n  context: {{cluster: untrusted, user: admin}}\ncurrent-context: admin\n"
        ),
    )
    .unwrap();
    assert!(ca.is_file());
    let fedctl = Fedctl::new(&kubeconfig);
    let tls_ok = fedctl.run(&["get", "clusters"]);
    assert_eq!(tls_ok.code, 0, "{}", tls_ok.stderr);
    assert_eq!(tls_ok.stdout, "No clusters.\n");
    assert!(
        fedctl
            .ok(&[
                "join",
                "c1",
                "--region",
                "europe-west1",
                "--location",
                "50,4"
            ])
            .contains("cluster/c1 created")
    );
    // The viewer may read, not write.
    assert!(
        fedctl
            .ok(&["--context", "viewer", "get", "clusters"])
            .contains("c1")
    );
    let line = fedctl.fails(&["--context", "viewer", "cordon", "c1"], 1);
    assert!(line.contains("forbidden") && line.contains("bob"), "{line}");
    let line = fedctl.fails(&["--context", "wrong", "get", "clusters"], 1);
    assert!(line.contains("401 Unauthorized"), "{line}");
    let line = fedctl.fails(&["--context", "untrusted", "get", "clusters"], 1);
    assert!(
        line.starts_with(&format!(
            "fedctl: cannot reach the federation-apiserver at {server}: "
        )) && line.contains("certificate"),
        "{line}"
    );
    // $KUBECONFIG with two files: the first current-context wins, entries merge.
    let first = dir.join("first");
    std::fs::write(&first, "current-context: viewer\n").unwrap();
    let mut command = Fedctl { kubeconfig: None }.command(&["cordon", "c1"]);
    command.env(
        "KUBECONFIG",
        format!("{}:{}", first.display(), kubeconfig.display()),
    );
    let out = fedingress_tests::fedctl::run(command);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("bob"), "{}", out.stderr);
}

/// Collects a child's stdout lines on a thread.
struct Lines {
    rx: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Lines {
    fn new(stdout: std::process::ChildStdout) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            rx,
            seen: String::new(),
        }
    }

    /// Reads until a line starting with `prefix`; returns everything read so far.
    fn until(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.starts_with(prefix) {
                        return self.seen.clone();
                    }
                }
                Err(_) => panic!(
                    "no line starting with {prefix:?}; output so far:\n{}",
                    self.seen
                ),
            }
        }
    }
}

/// PIDs of the processes a dev federation's state file lists.
fn dev_pids(state_dir: &Path) -> Vec<(u32, String)> {
    let state: Value =
        serde_json::from_slice(&std::fs::read(state_dir.join("state.json")).unwrap()).unwrap();
    state["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["pid"].as_u64()? as u32, p["exe"].as_str()?.to_string())))
        .collect()
}

/// Whether `pid` still runs `exe` (not a zombie).
fn running(pid: u32, exe: &str) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    cmdline.starts_with(exe.as_bytes()) && !zombie
}

/// `dev up`'s own block and ports in the test without `--ha`.
const DEV_UP: [&str; 8] = [
    "--block",
    "45",
    "--dns-port",
    "15345",
    "--api-port",
    "16445",
    "--agent-port",
    "16446",
];

fn dev_up(cwd: &Path, state_dir: &Path, args: &[&str]) -> (std::process::Child, Lines) {
    let mut command = Command::new(binary("fedctl"));
    command
        .args(["dev", "up", "--state-dir"])
        .arg(state_dir)
        .args(args)
        .current_dir(cwd)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = command.spawn().unwrap();
    let lines = Lines::new(child.stdout.take().unwrap());
    (child, lines)
}

/// Whether `tool` is on PATH.
fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .unwrap()
        .status
        .success()
}

/// The tools the commands `dev up` suggests use.
fn require_suggestion_tools() {
    for tool in ["nc", "dig", "kubectl", "curl"] {
        assert!(
            installed(tool),
            "the dev up test runs the suggested commands: it needs {tool} (nc: apt-get install netcat-openbsd)"
        );
    }
}

/// Runs one suggested command exactly as printed, from `cwd`: it must succeed, print
/// something, and print what its comment says. Returns its output.
fn run_suggestion(cwd: &Path, s: &Suggestion) -> String {
    let out = Command::new("bash")
        .args(["-c", &s.command])
        .current_dir(cwd)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success(),
        "{:?} failed: {}\n{stdout}",
        s.command,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.is_empty(), "{:?} printed nothing", s.command);
    if let Some(expect) = &s.expect {
        assert!(
            expect.starts_with(&stdout),
            "{:?} printed {stdout:?}, the comment says {expect:?}",
            s.command
        );
    }
    stdout
}

/// Sends SIGINT to `dev up`, waits until it exits, and returns what it printed last.
fn interrupt(up: &mut std::process::Child, lines: &mut Lines) -> String {
    Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()
        .unwrap();
    let text = lines.until("Stopped ", WAIT);
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = up.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "dev up did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{text}");
    text
}

#[test]
fn dev_up_comes_up_and_every_suggested_command_works() {
    require_suggestion_tools();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let state_dir: PathBuf = cwd.join("dev");
    let (mut up, mut lines) = dev_up(cwd, &state_dir, &DEV_UP);
    let text = lines.until("Logs:", Duration::from_secs(120));
    for step in [
        "✓ echo backends",
        "✓ apiserver",
        "✓ clusters",
        "✓ agents",
        "✓ sample service",
        "✓ DNS steering",
    ] {
        assert!(text.contains(step), "{step:?} in\n{text}");
    }
    // The agents serve HTTP: echo-http is up on every cluster.
    assert!(text.contains("✓ HTTP"), "{text}");

    // A second dev up on the same state dir refuses.
    let second = Command::new(binary("fedctl"))
        .args(["dev", "up", "--state-dir"])
        .arg(&state_dir)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("already running"));

    // Every suggested command, in order, exactly as printed.
    let suggested = suggestions(&text);
    assert!(suggested.len() >= 12, "{suggested:?}");
    assert!(suggested.iter().any(|s| s.command.starts_with("kubectl ")));
    assert!(suggested.iter().any(|s| s.command.contains("nc -u ")));
    assert!(
        suggested
            .iter()
            .filter(|s| s.command.starts_with("dig "))
            .count()
            >= 4
    );
    assert!(!text.contains("kill -9"), "{text}");
    for s in &suggested {
        run_suggestion(cwd, s);
    }

    // Ctrl-C stops every process it started.
    let pids = dev_pids(&state_dir);
    assert_eq!(pids.len(), 7, "{pids:?}");
    assert!(pids.iter().all(|(pid, exe)| running(*pid, exe)));
    let text = interrupt(&mut up, &mut lines);
    assert!(text.contains("Stopped 7 processes"), "{text}");
    for (pid, exe) in &pids {
        assert!(!running(*pid, exe), "{exe} ({pid}) still runs");
    }
    assert!(!state_dir.join("state.json").exists());

    // A dev up that dies leaves its processes; dev down stops them.
    let (mut up, mut lines) = dev_up(cwd, &state_dir, &DEV_UP);
    lines.until("Logs:", Duration::from_secs(120));
    let pids = dev_pids(&state_dir);
    up.kill().unwrap();
    up.wait().unwrap();
    assert!(pids.iter().all(|(pid, exe)| running(*pid, exe)));
    let down = Command::new(binary("fedctl"))
        .args(["dev", "down", "--state-dir"])
        .arg(&state_dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&down.stdout);
    assert!(down.status.success(), "{said}");
    assert!(said.contains("Stopped 7 processes"), "{said}");
    for (pid, exe) in &pids {
        assert!(!running(*pid, exe), "{exe} ({pid}) still runs");
    }
    let again = Command::new(binary("fedctl"))
        .args(["dev", "down", "--state-dir"])
        .arg(&state_dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to stop"));
}

/// `dig @ip -p port +short ...`: the answer's lines (or dig's complaint).
fn dig_short(ip: &str, port: &str, args: &[&str]) -> Vec<String> {
    let out = Command::new("dig")
        .args([
            &format!("@{ip}"),
            "-p",
            port,
            "+short",
            "+tries=1",
            "+time=2",
        ])
        .args(args)
        .output()
        .unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// The example name as every region's clients get it from one DNS server.
fn steering(ip: &str, port: &str) -> Vec<Vec<String>> {
    (1..=3)
        .map(|subnet| {
            dig_short(
                ip,
                port,
                &[
                    &format!("+subnet=10.{subnet}.0.0/24"),
                    "echo.fedingress.test",
                ],
            )
        })
        .collect()
}

/// `dev up --ha`: etcd and three replicas answer the same; `kill -9` of r1, as the
/// printed commands do it, changes no answer of r2 and r3 (not even while it happens:
/// the printed watch loop runs throughout), r2's context still lists the objects and the
/// agents are connected again; Ctrl-C stops everything, etcd included.
#[test]
fn dev_up_ha_survives_a_killed_replica() {
    if !installed("etcd") {
        eprintln!(
            "SKIPPED dev_up_ha_survives_a_killed_replica: no etcd on PATH (apt-get install etcd-server; scripts/test installs it)"
        );
        return;
    }
    require_suggestion_tools();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let state_dir: PathBuf = cwd.join("dev");
    let dns_port = "15347";
    let (mut up, mut lines) = dev_up(
        cwd,
        &state_dir,
        &[
            "--ha",
            "--block",
            "47",
            "--dns-port",
            dns_port,
            "--api-port",
            "16447",
            "--agent-port",
            "16448",
        ],
    );
    let text = lines.until("Logs:", Duration::from_secs(150));
    for step in [
        "✓ echo backends",
        "✓ etcd",
        "✓ apiservers",
        "✓ clusters",
        "✓ agents",
        "✓ sample service",
        "✓ DNS steering",
        "✓ HTTP",
    ] {
        assert!(text.contains(step), "{step:?} in\n{text}");
    }
    let replicas = ["127.0.47.1", "127.0.47.2", "127.0.47.3"];
    let pids = dev_pids(&state_dir);
    assert_eq!(
        pids.len(),
        10,
        "3 backends, etcd, 3 apiservers, 3 agents: {pids:?}"
    );
    assert!(pids.iter().all(|(pid, exe)| running(*pid, exe)));
    let state: Value =
        serde_json::from_slice(&std::fs::read(state_dir.join("state.json")).unwrap()).unwrap();
    let r1_pid = state["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["role"] == "apiserver" && p["name"] == "r1")
        .and_then(|p| p["pid"].as_u64())
        .unwrap();

    // Every replica answers the same: each region its nearest cluster, and the zone
    // names one nameserver per replica.
    let steady: Vec<Vec<String>> = (11..=13).map(|i| vec![format!("127.0.47.{i}")]).collect();
    for ip in replicas {
        assert_eq!(steering(ip, dns_port), steady, "DNS of {ip}");
        assert_eq!(
            dig_short(ip, dns_port, &["NS", "fedingress.test"]),
            [
                "ns1.fedingress.test.",
                "ns2.fedingress.test.",
                "ns3.fedingress.test."
            ],
            "NS from {ip}"
        );
        assert_eq!(
            dig_short(ip, dns_port, &["ns2.fedingress.test"]),
            ["127.0.47.2"],
            "ns2 from {ip}"
        );
    }

    // Every suggested command, in order, as printed: the watch loop runs in the
    // background from where it is printed, `kill -9` kills r1.
    let suggested = suggestions(&text);
    let mut watch = None;
    let mut killed = None;
    for s in &suggested {
        if s.command.starts_with("while ") {
            watch = Some(
                Command::new("bash")
                    .args(["-c", &s.command])
                    .current_dir(cwd)
                    .process_group(0)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            );
            // A few answers before the kill.
            std::thread::sleep(Duration::from_secs(3));
        } else if let Some(pid) = s.command.strip_prefix("kill -9 ") {
            assert_eq!(pid, r1_pid.to_string(), "the printed kill is r1's PID");
            let status = Command::new("bash")
                .args(["-c", &s.command])
                .status()
                .unwrap();
            assert!(status.success());
            killed = Some(Instant::now());
        } else {
            let stdout = run_suggestion(cwd, s);
            if killed.is_some() && s.command.starts_with("kubectl ") {
                assert!(s.command.contains("--context r2"), "{s:?}");
                for name in ["echo ", "echo-http ", "eu-west ", "us-east ", "ap-south "] {
                    assert!(stdout.contains(name), "{name:?} in\n{stdout}");
                }
            }
        }
    }
    let killed = killed.expect("dev up --ha prints a kill -9 of r1");
    let mut watch = watch.expect("dev up --ha prints a watch loop");
    let (_, apiserver_exe) = pids.iter().find(|(p, _)| u64::from(*p) == r1_pid).unwrap();
    assert!(!running(r1_pid as u32, apiserver_exe), "r1 still runs");

    // The agents connected to r1 are connected again, through r2 or r3.
    let kubeconfig = state_dir.join("kubeconfig");
    eventually(
        Duration::from_secs(15),
        "every agent connected after the kill",
        || {
            let out = Command::new(fedingress_tests::kubectl_path(None))
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--context", "r2", "get", "clusters", "-o", "json"])
                .output()
                .unwrap();
            let list: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
            let connected = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["status"]["connected"] == true)
                .count();
            (connected == 3)
                .then_some(())
                .ok_or_else(|| format!("{connected} of 3 connected"))
        },
    );
    // Nothing happened: the survivors answer as before, for every region.
    while killed.elapsed() < Duration::from_secs(6) {
        std::thread::sleep(Duration::from_millis(200));
    }
    for ip in &replicas[1..] {
        assert_eq!(steering(ip, dns_port), steady, "DNS of {ip} after the kill");
    }
    Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", watch.id())])
        .status()
        .unwrap();
    let mut watched = String::new();
    std::io::Read::read_to_string(&mut watch.stdout.take().unwrap(), &mut watched).unwrap();
    watch.wait().unwrap();
    let answers: Vec<&str> = watched.lines().collect();
    assert!(answers.len() >= 7, "the watch loop answered {answers:?}");
    assert!(
        answers.iter().all(|a| *a == "127.0.47.11"),
        "an answer changed while r1 was killed: {answers:?}"
    );

    // dev up saw r1 go; Ctrl-C stops the rest, etcd included.
    let text = interrupt(&mut up, &mut lines);
    assert!(
        text.contains(&format!(
            "! federation-apiserver r1 (PID {r1_pid}) exited: killed by signal 9; r2 and r3 still serve"
        )),
        "{text}"
    );
    assert!(text.contains("Stopped 9 processes"), "{text}");
    assert!(text.contains("etcd ("), "{text}");
    for (pid, exe) in &pids {
        assert!(!running(*pid, exe), "{exe} ({pid}) still runs");
    }
    assert!(!state_dir.join("state.json").exists());
}

#[test]
fn dev_up_ha_without_etcd_says_how_to_install_it() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("dev");
    let mut command = Fedctl { kubeconfig: None }.command(&["dev", "up", "--ha", "--state-dir"]);
    command.arg(&state_dir).env("PATH", dir.path());
    let out = fedingress_tests::fedctl::run(command);
    assert_eq!(out.code, 1, "{}\n{}", out.stderr, out.stdout);
    assert_eq!(
        out.stderr,
        "fedctl: dev up --ha needs etcd and there is no `etcd` on PATH: install it (Debian, Ubuntu: apt-get install etcd-server) and run it again\n"
    );
    assert!(!state_dir.exists(), "nothing is started or written");
}
