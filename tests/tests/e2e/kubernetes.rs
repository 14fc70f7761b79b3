//! End to end with a kubernetes-driver agent: the real hub, the real `cluster-agent`
//! binary with `driver: kubernetes`, the real kubectl and dig, and a scripted
//! Kubernetes API server over real HTTP on loopback standing in for the member
//! cluster (no Kubernetes API server can be installed on these machines; see
//! `fedingress_tests::kubeapi`). The script plays the cloud and the kubelet: it writes
//! load-balancer addresses and EndpointSlices. Loopback block 127.0.71.x. The pools
//! test takes its plan from a scripted hub on 127.0.0.1 (`FakeHub`).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fedingress_tests::federation::{HubProcess, get_json, issue_token, kubectl, start_hub_with};
use fedingress_tests::kubeapi::FakeKubeApi;
use fedingress_tests::{Kubectl, Process, binary, eventually, repo_path};
use serde_json::{Value, json};

const BLOCK: u8 = 71;
/// The RBAC / API-down test's block.
const FAULTS_BLOCK: u8 = 72;
/// The leader election test's block.
const REPLICAS_BLOCK: u8 = 73;
const WAIT: Duration = Duration::from_secs(30);

const DNS_CONFIG: &str = "dns:
  listen: 127.0.0.1:0
  zones:
  - name: fedingress.test
    nameservers: [ns1.fedingress.test]
    soa: {mname: ns1.fedingress.test, rname: hostmaster.fedingress.test, refresh: 3600, retry: 600, expire: 86400, minimum: 30}
  locations:
    default: {region: europe-west1, latitude: 50.0, longitude: 4.0}
";

const CLUSTER: &str = "apiVersion: fedingress.io/v1alpha1
kind: Cluster
metadata: {name: k1}
spec:
  region: europe-west1
  location: {latitude: 50.4, longitude: 3.8}
  provider: gcp
";

const INGRESS: &str = "apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {name: echo, namespace: default}
spec:
  rules:
  - {protocol: TCP, port: 7777, name: echo, backend: {service: echo, port: 9000}}
  - {protocol: UDP, port: 7777, name: echo, backend: {service: echo, port: 9000}}
  - {protocol: HTTP, host: echo.fedingress.test, paths: [{path: /, backend: {service: echo, port: 9000}}]}
  placement: {clusters: [k1]}
  traffic: {dnsName: echo.fedingress.test, ttl: 5, strategy: {type: RoundRobin}}
";

struct Dns {
    port: String,
}

impl Dns {
    fn of(hub: &HubProcess) -> Self {
        let addr = hub.process.addr("dns");
        Dns {
            port: addr.rsplit(':').next().unwrap().to_owned(),
        }
    }

    fn short(&self, args: &[&str]) -> Vec<String> {
        let out = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &self.port,
                "+time=2",
                "+tries=1",
                "+short",
            ])
            .args(args)
            .output()
            .expect("dig is installed (scripts/test installs dnsutils)");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    /// The A records of the SRV targets of `name`.
    fn srv_addresses(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for line in self.short(&["SRV", name]) {
            let target = line.rsplit(' ').next().unwrap_or_default().to_owned();
            out.extend(self.short(&["A", &target]));
        }
        out.sort();
        out
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn start_agent(dir: &Path, hub: &HubProcess, member: &FakeKubeApi, extra: &str) -> Process {
    start_replica(dir, hub, member, extra, "agent-k1")
}

/// One agent replica with its own state dir (`name`), sharing the cluster's Lease.
fn start_replica(
    dir: &Path,
    hub: &HubProcess,
    member: &FakeKubeApi,
    extra: &str,
    name: &str,
) -> Process {
    let agent_dir = dir.join(name);
    std::fs::create_dir_all(&agent_dir).unwrap();
    member.write_kubeconfig(&agent_dir.join("member.kubeconfig"));
    let (_, token) = issue_token(&hub.api, "k1").unwrap();
    std::fs::write(agent_dir.join("token"), token).unwrap();
    let config = format!(
        "hub: {{address: {}}}
cluster: k1
tokenFile: token
driver: kubernetes
kubernetes:
  kubeconfig: member.kubeconfig
  leaderElection: {{namespace: fedingress-system, leaseDurationSeconds: 3}}
{extra}stateDir: state
admin: 127.0.0.1:0
reportIntervalMs: 1000
",
        hub.agent
    );
    let path = write(&agent_dir, "agent.yaml", &config);
    let mut command = Command::new(binary("cluster-agent"));
    command.arg("--config").arg(path).env("POD_NAME", name);
    Process::start(command, &format!("cluster-agent k1 ({name})"), WAIT).unwrap()
}

/// The managed Services the agent applied, by name.
fn applied_services(member: &FakeKubeApi) -> Vec<Value> {
    member
        .list("services")
        .into_iter()
        .filter(|s| s["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "fedingress")
        .collect()
}

#[test]
fn a_federated_ingress_reaches_a_kubernetes_member_cluster_and_its_load_balancers_reach_dns() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let member = runtime.block_on(FakeKubeApi::start());
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();

    // The member cluster has the backend Service (the agent copies its selector).
    member.put(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "default", "name": "echo"},
        "spec": {"selector": {"app": "echo"}, "ports": [
            {"name": "tcp", "protocol": "TCP", "port": 9000, "targetPort": 9000},
            {"name": "udp", "protocol": "UDP", "port": 9000, "targetPort": 9000}]}
    }));

    let hub = start_hub_with(dir, BLOCK, DNS_CONFIG);
    let dns = Dns::of(&hub);
    let k: Kubectl = kubectl(dir, &hub.api);
    k.ok(&["apply", "-f", &write(dir, "cluster.yaml", CLUSTER)]);
    let agent = start_agent(dir, &hub, &member, "");

    // The agent leads (the Lease) and reaches the hub.
    let lease = runtime
        .block_on(member.wait_for_object(
            "leases",
            "fedingress-system",
            "fedingress-agent",
            |l| l["spec"]["holderIdentity"].is_string(),
            WAIT,
        ))
        .unwrap();
    assert!(lease["spec"]["leaseDurationSeconds"] == 3, "{lease}");
    eventually(
        WAIT,
        "the cluster connected with the gcp profile's capabilities",
        || {
            let cluster = get_json(&k, &["cluster", "k1"]);
            (cluster["status"]["driver"] == "kubernetes")
                .then_some(())
                .ok_or(cluster.to_string())
        },
    );

    // kubectl apply on the hub → server-side apply at the member cluster.
    k.ok(&["apply", "-f", &write(dir, "ingress.yaml", INGRESS)]);
    let apply = runtime
        .block_on(member.wait_for_request(|r| r.is_apply() && r.path.contains("/services/"), WAIT))
        .unwrap();
    assert_eq!(
        apply.param("fieldManager").as_deref(),
        Some("fedingress-agent")
    );
    eventually(WAIT, "split TCP and UDP Services (profile gcp)", || {
        let services = applied_services(&member);
        (services.len() == 2)
            .then_some(())
            .ok_or(format!("{services:?}"))
    });
    let services = applied_services(&member);
    for service in &services {
        assert_eq!(service["spec"]["type"], "LoadBalancer");
        assert_eq!(service["spec"]["selector"]["app"], "echo");
        assert_eq!(
            service["metadata"]["labels"]["fedingress.io/ingress"],
            "default.echo"
        );
        assert_eq!(service["metadata"]["labels"]["fedingress.io/owner"], "k1");
    }

    // The cloud provisions one load balancer per protocol; the kubelet makes the
    // backend ready.
    let written = std::time::Instant::now();
    for service in &services {
        let name = service["metadata"]["name"].as_str().unwrap();
        let protocol = service["spec"]["ports"][0]["protocol"].as_str().unwrap();
        let ip = if protocol == "UDP" {
            "203.0.113.11"
        } else {
            "203.0.113.10"
        };
        member.set_status(
            "v1",
            "services",
            "default",
            name,
            json!({"loadBalancer": {"ingress": [{"ip": ip}]}}),
        );
    }
    // The ingress controller gives the Ingress a host name.
    runtime
        .block_on(member.wait_for_object("ingresses", "default", "echo", |_| true, WAIT))
        .unwrap();
    member.set_status(
        "networking.k8s.io/v1",
        "ingresses",
        "default",
        "echo",
        json!({"loadBalancer": {"ingress": [{"hostname": "lb-7.example.net"}]}}),
    );
    member.put(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "default", "name": "echo-x1", "labels": {"kubernetes.io/service-name": "echo"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.8.0.5"], "conditions": {"ready": true}}],
        "ports": [{"name": "tcp", "protocol": "TCP", "port": 9000}]
    }));

    // Served in DNS, and the cluster reported healthy.
    eventually(WAIT, "the TCP load balancer answers the name", || {
        let got = dns.short(&["A", "echo.fedingress.test"]);
        (got == ["203.0.113.10"])
            .then_some(())
            .ok_or(format!("{got:?}"))
    });
    eprintln!(
        "load-balancer status written → answered in DNS after {:?}",
        written.elapsed()
    );
    eventually(WAIT, "_udp points at the UDP load balancer", || {
        let got = dns.srv_addresses("_echo._udp.echo.fedingress.test");
        (got == ["203.0.113.11"])
            .then_some(())
            .ok_or(format!("{got:?}"))
    });
    assert_eq!(
        dns.srv_addresses("_echo._tcp.echo.fedingress.test"),
        ["203.0.113.10"]
    );
    eventually(WAIT, "the cluster is Applied and healthy", || {
        let ingress = get_json(&k, &["federatedingress", "echo"]);
        let entry = fedingress_tests::federation::cluster_entry(&ingress, "k1");
        (entry["phase"] == "Applied" && entry["healthy"] == true)
            .then_some(())
            .ok_or(entry.to_string())
    });

    // The backend loses its endpoints: the cluster turns unhealthy at the hub.
    member.put(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"namespace": "default", "name": "echo-x1", "labels": {"kubernetes.io/service-name": "echo"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.8.0.5"], "conditions": {"ready": false, "terminating": true}}],
    }));
    eventually(WAIT, "the cluster is unhealthy", || {
        let ingress = get_json(&k, &["federatedingress", "echo"]);
        let entry = fedingress_tests::federation::cluster_entry(&ingress, "k1");
        (entry["healthy"] == false)
            .then_some(())
            .ok_or(entry.to_string())
    });

    // Deleting the FederatedIngress deletes what the agent owns, and nothing else.
    k.ok(&["delete", "federatedingress", "echo"]);
    eventually(WAIT, "owned Services deleted", || {
        let services = applied_services(&member);
        services
            .is_empty()
            .then_some(())
            .ok_or(format!("{services:?}"))
    });
    assert!(member.get("services", "default", "echo").is_some());
    eventually(WAIT, "the owned Ingress deleted", || {
        member
            .get("ingresses", "default", "echo")
            .map_or(Ok(()), |i| Err(i.to_string()))
    });
    assert!(
        agent.terminate(WAIT).is_some_and(|s| s.success()),
        "the agent exits 0 on SIGTERM"
    );

    // The nginx-configmap profile (the seed L4 proposal): the agent owns the
    // ConfigMaps ingress-nginx reads, and the controller's Service carries the port.
    member.put(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "ingress-nginx", "name": "ingress-nginx-controller"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "ingress-nginx"}, "ports": [
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "echo", "protocol": "TCP", "port": 7777}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.50"}]}}
    }));
    let agent = start_agent(
        dir,
        &hub,
        &member,
        "  profile: nginx-configmap
  nginx: {tcpServicesConfigMap: ingress-nginx/fedingress-tcp, udpServicesConfigMap: ingress-nginx/fedingress-udp}
  ingressController: {service: ingress-nginx/ingress-nginx-controller}
",
    );
    k.ok(&[
        "apply",
        "-f",
        &write(
            dir,
            "tcp-only.yaml",
            &INGRESS
                .lines()
                .filter(|l| !l.contains("UDP") && !l.contains("HTTP"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    ]);
    let tcp = runtime
        .block_on(member.wait_for_object(
            "configmaps",
            "ingress-nginx",
            "fedingress-tcp",
            |c| c["data"]["7777"].is_string(),
            WAIT,
        ))
        .unwrap();
    assert_eq!(tcp["data"]["7777"], "default/echo:9000");
    eventually(
        WAIT,
        "the controller's load balancer answers the name",
        || {
            let got = dns.short(&["A", "echo.fedingress.test"]);
            (got == ["203.0.113.50"])
                .then_some(())
                .ok_or(format!("{got:?}"))
        },
    );
    k.ok(&["delete", "federatedingress", "echo"]);
    eventually(
        WAIT,
        "the owned ConfigMap emptied or deleted",
        || match member.get("configmaps", "ingress-nginx", "fedingress-tcp") {
            None => Ok(()),
            Some(c) if c["data"].as_object().is_none_or(|d| d.is_empty()) => Ok(()),
            Some(c) => Err(c.to_string()),
        },
    );
    assert!(agent.terminate(WAIT).is_some_and(|s| s.success()));

    // Back on the cluster's own profile (gcp), the ConfigMaps are no longer the
    // agent's to keep: garbage collection deletes them.
    let agent = start_agent(dir, &hub, &member, "");
    eventually(WAIT, "the nginx ConfigMaps deleted", || {
        let left: Vec<Value> = member
            .list("configmaps")
            .into_iter()
            .filter(|c| c["metadata"]["namespace"] == "ingress-nginx")
            .collect();
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    });

    // Every verb the agent used is granted by the deploy manifests, and every verb
    // granted was used (least privilege).
    let used: BTreeSet<(String, String, String)> = member
        .requests()
        .into_iter()
        .filter_map(|r| {
            let rbac = r.rbac.clone()?;
            // Server-side apply that creates an object is also authorized as create.
            let verb = if r.is_apply() && r.status == 201 {
                "create".to_owned()
            } else {
                rbac.verb
            };
            Some((rbac.group, rbac.resource, verb))
        })
        .chain(member.verbs_used())
        .collect();
    // Pools' grants are used only with pool provisions: the pools test checks them.
    let granted: BTreeSet<_> = granted().difference(&pool_grants()).cloned().collect();
    assert_eq!(
        used, granted,
        "verbs used by the agent vs deploy/kubernetes RBAC"
    );
    drop(agent);
}

/// (group, resource, verb) granted by the ClusterRole and the Role in deploy/kubernetes.
fn granted() -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for file in ["clusterrole.yaml", "role.yaml"] {
        let text =
            std::fs::read_to_string(repo_path(&format!("deploy/kubernetes/{file}"))).unwrap();
        let role: Value = yaml_serde::from_str(&text).unwrap();
        for rule in role["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        out.insert((
                            group.as_str().unwrap().to_owned(),
                            resource.as_str().unwrap().to_owned(),
                            verb.as_str().unwrap().to_owned(),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The member cluster set up as the first test has it: the backend Service, and a hub
/// with the Cluster `k1` (provider gcp).
fn member_and_hub(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    block: u8,
) -> (FakeKubeApi, HubProcess, Kubectl) {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let member = runtime.block_on(FakeKubeApi::start());
    member.put(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": "default", "name": "echo"},
        "spec": {"selector": {"app": "echo"}, "ports": [
            {"name": "tcp", "protocol": "TCP", "port": 9000, "targetPort": 9000},
            {"name": "udp", "protocol": "UDP", "port": 9000, "targetPort": 9000}]}
    }));
    let hub = start_hub_with(dir, block, DNS_CONFIG);
    let k = kubectl(dir, &hub.api);
    k.ok(&["apply", "-f", &write(dir, "cluster.yaml", CLUSTER)]);
    (member, hub, k)
}

fn readyz(agent: &Process) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-w",
            "\n%{http_code}",
            &format!("http://{}/readyz", agent.addr("admin")),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or((&text, "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

fn cluster_message(k: &Kubectl) -> Value {
    let ingress = get_json(k, &["federatedingress", "echo"]);
    fedingress_tests::federation::cluster_entry(&ingress, "k1")
}

#[test]
fn rbac_denied_and_an_unreachable_member_api_are_rule_errors_and_the_hub_session_stays() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (member, hub, k) = member_and_hub(&runtime, dir, FAULTS_BLOCK);
    member.deny("", "services", "patch");
    let agent = start_agent(dir, &hub, &member, "");
    k.ok(&["apply", "-f", &write(dir, "ingress.yaml", INGRESS)]);

    // Per rule at the hub, with the API server's words; the agent is not ready.
    eventually(WAIT, "the forbidden rules reported at the hub", || {
        let entry = cluster_message(&k);
        let text = entry.to_string();
        (text.contains("forbidden") && text.contains("clusterrole.yaml"))
            .then_some(())
            .ok_or(text)
    });
    let (code, body) = readyz(&agent);
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cannot patch resource"), "{body}");
    let cluster = get_json(&k, &["cluster", "k1"]);
    assert_eq!(cluster["status"]["connected"], true, "{cluster}");

    // Granted: the agent retries by itself and applies.
    member.allow("", "services", "patch");
    eventually(WAIT, "the Services applied after the grant", || {
        let services = applied_services(&member);
        (services.len() == 2)
            .then_some(())
            .ok_or(format!("{services:?}"))
    });
    eventually(WAIT, "the agent ready again", || {
        let (code, body) = readyz(&agent);
        (code == 200).then_some(()).ok_or(body)
    });

    // The member API goes away: the agent stays up, the hub session too.
    member.set_unavailable(true);
    k.ok(&[
        "patch",
        "federatedingress",
        "echo",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"traffic":{"ttl":7}}}"#,
    ]);
    eventually(WAIT, "the unreachable API reported", || {
        let (code, body) = readyz(&agent);
        (code == 503).then_some(()).ok_or(body)
    });
    let cluster = get_json(&k, &["cluster", "k1"]);
    assert_eq!(cluster["status"]["connected"], true, "{cluster}");
    member.set_unavailable(false);
    eventually(WAIT, "the agent ready once the API is back", || {
        let (code, body) = readyz(&agent);
        (code == 200).then_some(()).ok_or(body)
    });
    assert!(agent.terminate(WAIT).is_some_and(|s| s.success()));
}

#[test]
fn a_standby_replica_takes_over_within_the_lease() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (member, hub, k) = member_and_hub(&runtime, dir, REPLICAS_BLOCK);
    let first = start_replica(dir, &hub, &member, "", "replica-a");
    runtime
        .block_on(member.wait_for_object(
            "leases",
            "fedingress-system",
            "fedingress-agent",
            |l| l["spec"]["holderIdentity"] == "replica-a",
            WAIT,
        ))
        .unwrap();
    let second = start_replica(dir, &hub, &member, "", "replica-b");
    eventually(WAIT, "the second replica is a ready standby", || {
        let (code, body) = readyz(&second);
        (code == 200 && body.contains("standby: replica-a leads"))
            .then_some(())
            .ok_or(body)
    });
    k.ok(&["apply", "-f", &write(dir, "ingress.yaml", INGRESS)]);
    eventually(WAIT, "the leader applied", || {
        let services = applied_services(&member);
        (services.len() == 2)
            .then_some(())
            .ok_or(format!("{services:?}"))
    });
    // Only the leader writes.
    let writers: BTreeSet<String> = member
        .requests()
        .iter()
        .filter(|r| r.is_apply())
        .filter_map(|r| r.user_agent.clone())
        .collect();
    assert!(writers.len() <= 1, "{writers:?}");

    // The leader dies without releasing the Lease: the standby takes over within the
    // lease (3 s) and carries the cluster at the hub.
    let killed_at = std::time::Instant::now();
    first.kill9();
    runtime
        .block_on(member.wait_for_object(
            "leases",
            "fedingress-system",
            "fedingress-agent",
            |l| l["spec"]["holderIdentity"] == "replica-b",
            WAIT,
        ))
        .unwrap();
    let took = killed_at.elapsed();
    eprintln!("standby took over {took:?} after kill -9 of the leader (lease 3 s)");
    assert!(
        took < Duration::from_secs(3) + Duration::from_millis(1500),
        "took over after {took:?}"
    );
    k.ok(&["patch", "federatedingress", "echo", "--type", "merge", "-p", r#"{"spec":{"rules":[{"protocol":"TCP","port":7777,"name":"echo","backend":{"service":"echo","port":9000}}]}}"#]);
    eventually(
        WAIT,
        "the new leader applies the next plan (the UDP Service goes)",
        || {
            let services = applied_services(&member);
            (services.len() == 1)
                .then_some(())
                .ok_or(format!("{services:?}"))
        },
    );
    assert!(second.terminate(WAIT).is_some_and(|s| s.success()));
}

/// RBAC the agent uses only when the plan holds pool provisions: the pools' Deployments
/// and PodDisruptionBudgets written and collected, and its own Pod read (image, token
/// Secret). Their list and watch are used always.
fn pool_grants() -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for (group, resource) in [("apps", "deployments"), ("policy", "poddisruptionbudgets")] {
        for verb in ["get", "create", "patch", "delete"] {
            out.insert((group.to_owned(), resource.to_owned(), verb.to_owned()));
        }
    }
    out.insert((String::new(), "pods".to_owned(), "get".to_owned()));
    out
}

/// The managed objects of pool `web` in `fedingress-system`, by resource.
fn pool_objects(member: &FakeKubeApi) -> BTreeSet<String> {
    ["configmaps", "deployments", "poddisruptionbudgets"]
        .into_iter()
        .filter(|resource| {
            member
                .get(resource, "fedingress-system", "fedingress-pool-web")
                .is_some()
        })
        .map(str::to_owned)
        .collect()
}

/// A pool provision in the hub's plan becomes the pool's workload at the member cluster
/// (the real agent binary, server-side apply over HTTP), and goes when the plan drops
/// it. The plan comes from a scripted hub: claims are what put provisions in the real
/// hub's plans.
#[test]
fn a_pool_provision_becomes_a_workload_and_leaves_with_the_plan() {
    use fedingress_api::plan::{ClusterPlan, PoolPlan, PoolProvision};
    use fedingress_proto::HubToAgent;
    use fedingress_testsupport::gateway::FakeHub;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let member = runtime.block_on(FakeKubeApi::start());
    let mut hub = runtime.block_on(FakeHub::start(std::net::SocketAddr::from((
        [127, 0, 0, 1],
        0,
    ))));
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("agent-0");
    std::fs::create_dir_all(&agent_dir).unwrap();
    member.write_kubeconfig(&agent_dir.join("member.kubeconfig"));
    std::fs::write(agent_dir.join("token"), "agent-token").unwrap();
    // The agent's own Pod: its image, and the token Secret mounted where tokenFile is.
    member.put(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "fedingress-system", "name": "fedingress-agent-0"},
        "spec": {
            "containers": [{"name": "agent", "image": "registry.example.com/fedingress/cluster-agent:0.2.0",
                            "volumeMounts": [{"name": "token", "mountPath": agent_dir.display().to_string()}]}],
            "volumes": [{"name": "token", "secret": {"secretName": "fedingress-agent-token"}}]
        }
    }));
    let config = format!(
        "hub: {{address: http://{}}}
cluster: k1
tokenFile: token
driver: kubernetes
kubernetes:
  kubeconfig: member.kubeconfig
  profile: mixed
  leaderElection: {{namespace: fedingress-system, leaseDurationSeconds: 3}}
stateDir: state
admin: 127.0.0.1:0
reportIntervalMs: 1000
",
        hub.addr
    );
    let path = write(&agent_dir, "agent.yaml", &config);
    let mut command = Command::new(binary("cluster-agent"));
    command
        .arg("--config")
        .arg(path)
        .env("POD_NAME", "fedingress-agent-0")
        .env("POD_NAMESPACE", "fedingress-system");
    let agent = Process::start(command, "cluster-agent k1 (pools)", WAIT).unwrap();

    let plan = |provisions: Vec<PoolProvision>| ClusterPlan {
        ingresses: Default::default(),
        pools: std::sync::Arc::new(PoolPlan {
            provisions,
            ..PoolPlan::default()
        }),
    };
    let web = PoolProvision {
        name: "web".to_owned(),
        replicas: 3,
        member_labels: [("tier".to_owned(), "edge".to_owned())].into(),
        requests: [("cpu".to_owned(), "250m".to_owned())].into(),
        limits: [("memory".to_owned(), "256Mi".to_owned())].into(),
    };
    let mut conn = runtime.block_on(hub.next_conn());
    conn.send(HubToAgent::Welcome {
        heartbeat_interval_ms: 1000,
        lease_ms: 10_000,
        provider: None,
        cordoned: false,
    });
    let with_pool = plan(vec![web]);
    conn.send(HubToAgent::Snapshot {
        version: 1,
        digest: with_pool.digest(),
        plan: with_pool,
    });
    assert_eq!(runtime.block_on(conn.expect_ack()), 1);
    eventually(WAIT, "the pool's ConfigMap, Deployment and budget", || {
        let found = pool_objects(&member);
        (found.len() == 3).then_some(()).ok_or(format!("{found:?}"))
    });
    let deployment = member
        .get("deployments", "fedingress-system", "fedingress-pool-web")
        .unwrap();
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example.com/fedingress/cluster-agent:0.2.0"
    );
    assert_eq!(
        pod["containers"][0]["resources"]["limits"]["memory"],
        "256Mi"
    );
    assert_eq!(
        pod["volumes"][1]["secret"]["secretName"],
        "fedingress-agent-token"
    );
    for resource in ["configmaps", "deployments", "poddisruptionbudgets"] {
        let object = member
            .get(resource, "fedingress-system", "fedingress-pool-web")
            .unwrap();
        let labels = &object["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/managed-by"], "fedingress",
            "{resource}"
        );
        assert_eq!(labels["fedingress.io/owner"], "k1", "{resource}");
        let managers = object["metadata"]["managedFields"].to_string();
        assert!(
            managers.contains("fedingress-agent"),
            "{resource}: {managers}"
        );
    }
    let config_map = member
        .get("configmaps", "fedingress-system", "fedingress-pool-web")
        .unwrap();
    let members_config = config_map["data"]["agent.yaml"].as_str().unwrap();
    assert!(members_config.contains("tier: edge"), "{members_config}");
    assert!(
        members_config.contains(&format!("http://{}", hub.addr)),
        "{members_config}"
    );

    // The provision leaves the plan: its objects are deleted.
    let without = plan(Vec::new());
    conn.send(HubToAgent::Snapshot {
        version: 2,
        digest: without.digest(),
        plan: without,
    });
    assert_eq!(runtime.block_on(conn.expect_ack()), 2);
    eventually(WAIT, "the pool's objects deleted", || {
        let found = pool_objects(&member);
        found.is_empty().then_some(()).ok_or(format!("{found:?}"))
    });
    let (status, body) = readyz(&agent);
    assert_eq!(status, 200, "{body}");

    // Every pool-only grant of deploy/kubernetes was used, and nothing else was.
    let used: BTreeSet<(String, String, String)> = member
        .requests()
        .into_iter()
        .filter_map(|r| {
            let rbac = r.rbac.clone()?;
            let verb = if r.is_apply() && r.status == 201 {
                "create".to_owned()
            } else {
                rbac.verb
            };
            Some((rbac.group, rbac.resource, verb))
        })
        .chain(member.verbs_used())
        .collect();
    let missing: Vec<_> = pool_grants().difference(&used).cloned().collect();
    assert!(missing.is_empty(), "pool grants not used: {missing:?}");
    let ungranted: Vec<_> = used.difference(&granted()).cloned().collect();
    assert!(ungranted.is_empty(), "used without a grant: {ungranted:?}");
    drop(agent);
}

/// The claim test's block.
const CLAIM_BLOCK: u8 = 74;

/// The whole chain with the real hub: an IngressClaim on a kubernetes cluster makes the
/// hub's claim controller provision a pool, the hub's plan carries it to the real
/// kubernetes agent, which writes the pool's workload at the member cluster; deleting the
/// claim's ingress (reclaim Delete) deletes the pool, and the agent the workload.
#[test]
fn an_ingress_claim_on_a_kubernetes_cluster_is_run_as_a_workload_until_reclaimed() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (member, hub, k) = member_and_hub(&runtime, dir, CLAIM_BLOCK);
    let agent_dir = dir.join("agent-k1");
    std::fs::create_dir_all(&agent_dir).unwrap();
    member.write_kubeconfig(&agent_dir.join("member.kubeconfig"));
    let (_, token) = issue_token(&hub.api, "k1").unwrap();
    std::fs::write(agent_dir.join("token"), token).unwrap();
    member.put(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "fedingress-system", "name": "fedingress-agent-0"},
        "spec": {
            "containers": [{"name": "agent", "image": "registry.example.com/fedingress/cluster-agent:0.2.0",
                            "volumeMounts": [{"name": "token", "mountPath": agent_dir.display().to_string()}]}],
            "volumes": [{"name": "token", "secret": {"secretName": "fedingress-agent-token"}}]
        }
    }));
    let config = format!(
        "hub: {{address: {}}}
cluster: k1
tokenFile: token
driver: kubernetes
kubernetes:
  kubeconfig: member.kubeconfig
  leaderElection: {{namespace: fedingress-system, leaseDurationSeconds: 3}}
stateDir: state
admin: 127.0.0.1:0
reportIntervalMs: 1000
",
        hub.agent
    );
    let path = write(&agent_dir, "agent.yaml", &config);
    let mut command = Command::new(binary("cluster-agent"));
    command
        .arg("--config")
        .arg(path)
        .env("POD_NAME", "fedingress-agent-0")
        .env("POD_NAMESPACE", "fedingress-system");
    let agent = Process::start(command, "cluster-agent k1 (claim)", WAIT).unwrap();
    eventually(WAIT, "the kubernetes agent connected", || {
        let cluster = get_json(&k, &["cluster", "k1"]);
        (cluster["status"]["driver"] == "kubernetes")
            .then_some(())
            .ok_or(cluster.to_string())
    });

    k.ok(&["apply", "-f", &write(dir, "ingress.yaml", INGRESS)]);
    let claim = "apiVersion: fedingress.io/v1alpha1
kind: IngressClaim
metadata: {name: shop, namespace: default}
spec:
  ingresses: [echo]
  template:
    replicas: 3
    memberLabels: {pool: shop}
    resources:
      requests: {cpu: 500m}
      limits: {memory: 512Mi}
  reclaimPolicy: Delete
";
    k.ok(&["apply", "-f", &write(dir, "claim.yaml", claim)]);
    let deployment = runtime
        .block_on(member.wait_for_object(
            "deployments",
            "fedingress-system",
            "fedingress-pool-shop-k1",
            |_| true,
            WAIT,
        ))
        .unwrap();
    assert_eq!(deployment["spec"]["replicas"], 3, "{deployment}");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/fedingress/cluster-agent:0.2.0"
    );
    assert_eq!(container["resources"]["requests"]["cpu"], "500m");
    let config_map = member
        .get("configmaps", "fedingress-system", "fedingress-pool-shop-k1")
        .unwrap();
    let members_config: Value =
        yaml_serde::from_str(config_map["data"]["agent.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(members_config["cluster"], "k1");
    assert_eq!(members_config["hub"]["addresses"][0], hub.agent);
    // The members carry the claim's labels, which the provisioned pool selects.
    let pool = get_json(&k, &["ingresspool", "shop-k1"]);
    for (key, value) in pool["spec"]["memberSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&members_config["member"]["labels"][key], value, "{pool}");
    }
    assert!(
        member
            .get(
                "poddisruptionbudgets",
                "fedingress-system",
                "fedingress-pool-shop-k1"
            )
            .is_some()
    );

    // Reclaim Delete: the ingress goes, the pool goes, the workload goes.
    k.ok(&["delete", "federatedingress", "echo"]);
    eventually(WAIT, "the pool's workload deleted", || {
        let left: Vec<&str> = ["configmaps", "deployments", "poddisruptionbudgets"]
            .into_iter()
            .filter(|r| {
                member
                    .get(r, "fedingress-system", "fedingress-pool-shop-k1")
                    .is_some()
            })
            .collect();
        left.is_empty().then_some(()).ok_or(format!("{left:?}"))
    });
    drop(agent);
}
