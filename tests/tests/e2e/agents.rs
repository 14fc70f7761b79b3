//! The hub and real cluster agents end to end: placement, propagation over gRPC, TCP
//! and UDP on one port through every cluster, health, leases, fail-static, tokens,
//! cordon and conflicts. Each test has its own loopback block (127.0.N.x).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use fedingress_tests::echo::{Echo, tcp_roundtrip, udp_roundtrip};
use fedingress_tests::federation::{
    ClusterSpec, HubProcess, agent_config, cluster_entry, condition, create_cluster, curl_json,
    get_json, issue_token, kubectl, start_agent, start_hub,
};
use fedingress_tests::{Kubectl, Process, eventually};

/// Generous: timing is measured by the benchmarks, not here.
const WAIT: Duration = Duration::from_secs(30);

struct Member {
    spec: ClusterSpec,
    config: std::path::PathBuf,
    agent: Option<Process>,
    echo: Option<Echo>,
}

/// Starts clusters: echo backend, Cluster object, token, agent.
fn members(dir: &Path, hub: &HubProcess, k: &Kubectl, specs: Vec<ClusterSpec>) -> Vec<Member> {
    specs
        .into_iter()
        .map(|spec| {
            let echo = Echo::start(spec.backend).unwrap();
            create_cluster(k, dir, &spec);
            let (_, token) = issue_token(&hub.api, &spec.name).unwrap();
            let config = agent_config(dir, &hub.agent, &spec, &token);
            let agent = start_agent(&config, &spec.name);
            Member {
                spec,
                config,
                agent: Some(agent),
                echo: Some(echo),
            }
        })
        .collect()
}

fn ingress_yaml(dir: &Path, name: &str, ports: &[u16], extra: &str) -> String {
    let mut rules = String::new();
    for port in ports {
        for protocol in ["TCP", "UDP"] {
            rules.push_str(&format!(
                "  - protocol: {protocol}\n    port: {port}\n    backend: {{service: echo, port: 9000}}\n"
            ));
        }
    }
    let text = format!(
        "apiVersion: fedingress.io/v1alpha1\nkind: FederatedIngress\nmetadata:\n  name: {name}\nspec:\n  rules:\n{rules}  traffic:\n    dnsName: {name}.fedingress.test\n{extra}"
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn at(member: &Member, port: u16) -> SocketAddr {
    SocketAddr::new(member.spec.bind, port)
}

/// Waits until every named cluster's entry satisfies `check`.
fn wait_entries(
    k: &Kubectl,
    ingress: &str,
    clusters: &[&str],
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) {
    eventually(WAIT, what, || {
        let object = get_json(k, &["federatedingress", ingress]);
        for cluster in clusters {
            let entry = cluster_entry(&object, cluster);
            if !check(&entry) {
                return Err(format!("{cluster}: {entry}"));
            }
        }
        Ok(())
    });
}

fn applied_and_healthy(entry: &serde_json::Value) -> bool {
    entry["phase"] == "Applied" && entry["healthy"] == true
}

fn serves(member: &Member, port: u16) -> Result<(), String> {
    let tcp = tcp_roundtrip(at(member, port), "hello tcp\n")?;
    let udp = udp_roundtrip(at(member, port), "hello udp")?;
    if tcp == "HELLO TCP\n" && udp == "HELLO UDP" {
        Ok(())
    } else {
        Err(format!("unexpected answers {tcp:?} {udp:?}"))
    }
}

#[test]
fn ingresses_reach_every_cluster_and_follow_health_changes_and_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 11);
    let k = kubectl(dir, &hub.api);
    let mut specs = vec![
        ClusterSpec::numbered(11, 1, "europe-west1", 10.0, 20.0),
        ClusterSpec::numbered(11, 2, "us-east1", 20.0, 40.0),
        ClusterSpec::numbered(11, 3, "asia-south1", 30.0, 60.0),
    ];
    specs.push(ClusterSpec {
        name: "c4".into(),
        region: "europe-north1".into(),
        latitude: 60.0,
        longitude: 25.0,
        bind: "::1".parse().unwrap(),
        backend: "[::1]:19111".parse().unwrap(),
        advertise: None,
        capacity_rps: None,
    });
    let mut members = members(dir, &hub, &k, specs);
    let names = ["c1", "c2", "c3", "c4"];

    // TCP and UDP on one port, through every cluster, IPv4 and IPv6.
    let echo = ingress_yaml(dir, "echo", &[17011], "");
    assert!(k.ok(&["apply", "-f", &echo]).contains("created"));
    wait_entries(
        &k,
        "echo",
        &names,
        "every cluster applied and healthy",
        applied_and_healthy,
    );
    for member in &members {
        eventually(WAIT, "TCP and UDP through the agent", || {
            serves(member, 17011)
        });
    }
    eventually(WAIT, "Ready", || {
        let object = get_json(&k, &["federatedingress", "echo"]);
        match condition(&object, "Ready") {
            (s, _, _) if s == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let entry = cluster_entry(&get_json(&k, &["federatedingress", "echo"]), "c1");
    assert_eq!(entry["backends"][0]["ready"], 1, "{entry}");
    assert_eq!(entry["addresses"][0]["ip"], "127.0.11.11", "{entry}");
    let table = k.ok(&["get", "fing", "echo"]);
    assert!(table.contains("4/4"), "{table}");

    // Cluster 2's backends stop: it turns unhealthy, and back when they return.
    members[1].echo = None;
    wait_entries(&k, "echo", &["c2"], "c2 unhealthy", |e| {
        e["phase"] == "Applied" && e["healthy"] == false
    });
    wait_entries(
        &k,
        "echo",
        &["c1", "c3", "c4"],
        "others healthy",
        applied_and_healthy,
    );
    members[1].echo = Some(Echo::start(members[1].spec.backend).unwrap());
    wait_entries(&k, "echo", &["c2"], "c2 healthy again", applied_and_healthy);

    // A change reaches every cluster.
    let changed = ingress_yaml(dir, "echo", &[17011, 17012], "");
    assert!(k.ok(&["apply", "-f", &changed]).contains("configured"));
    for member in &members {
        eventually(WAIT, "the new port through the agent", || {
            serves(member, 17012)
        });
    }
    wait_entries(
        &k,
        "echo",
        &names,
        "generation 2 applied",
        applied_and_healthy,
    );

    // Deletion closes the listeners everywhere.
    k.ok(&["delete", "federatedingress", "echo"]);
    for member in &members {
        eventually(WAIT, "listener closed", || {
            match tcp_roundtrip(at(member, 17011), "x") {
                Err(e) if e.contains("refused") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }
    for member in &mut members {
        if let Some(agent) = member.agent.take() {
            let status = agent.terminate(Duration::from_secs(10));
            assert!(
                status.is_some_and(|s| s.success()),
                "agent exits cleanly on SIGTERM: {status:?}"
            );
        }
    }
}

#[test]
fn agents_fail_static_and_leases_mark_clusters_offline() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 12);
    let k = kubectl(dir, &hub.api);
    let specs = vec![
        ClusterSpec::numbered(12, 1, "europe-west1", 10.0, 20.0),
        ClusterSpec::numbered(12, 2, "us-east1", 20.0, 40.0),
        ClusterSpec::numbered(12, 3, "asia-south1", 30.0, 60.0),
    ];
    let mut members = members(dir, &hub, &k, specs);
    let names = ["c1", "c2", "c3"];
    let echo = ingress_yaml(dir, "echo", &[17021], "");
    k.ok(&["apply", "-f", &echo]);
    wait_entries(
        &k,
        "echo",
        &names,
        "applied and healthy",
        applied_and_healthy,
    );

    // SIGKILL agent 3: Offline after the lease, back when it restarts.
    members[2].agent.take().unwrap().kill9();
    eventually(WAIT, "c3 Offline", || {
        let cluster = get_json(&k, &["cluster", "c3"]);
        let entry = cluster_entry(&get_json(&k, &["federatedingress", "echo"]), "c3");
        if cluster["status"]["connected"] == false && entry["phase"] == "Offline" {
            Ok(())
        } else {
            Err(format!("{} / {entry}", cluster["status"]))
        }
    });
    assert_eq!(
        condition(&get_json(&k, &["cluster", "c3"]), "Ready").1,
        "Offline"
    );
    members[2].agent = Some(start_agent(&members[2].config, "c3"));
    eventually(WAIT, "c3 connected again", || {
        let cluster = get_json(&k, &["cluster", "c3"]);
        if cluster["status"]["connected"] == true {
            Ok(())
        } else {
            Err(cluster["status"].to_string())
        }
    });
    wait_entries(
        &k,
        "echo",
        &names,
        "applied and healthy again",
        applied_and_healthy,
    );

    // The hub goes away: agents keep serving, also one restarted meanwhile.
    let mut held = std::net::TcpStream::connect(at(&members[0], 17021)).unwrap();
    hub.process.kill9();
    for member in &members {
        serves(member, 17021).unwrap();
    }
    members[1].agent.take().unwrap().kill9();
    members[1].agent = Some(start_agent(&members[1].config, "c2"));
    eventually(WAIT, "restarted agent serves its persisted plan", || {
        serves(&members[1], 17021)
    });

    // The hub comes back: agents reconnect, nothing lost; an open connection survives.
    let hub = start_hub(dir, 12);
    let k = kubectl(dir, &hub.api);
    eventually(WAIT, "every cluster connected", || {
        for name in names {
            let cluster = get_json(&k, &["cluster", name]);
            if cluster["status"]["connected"] != true {
                return Err(format!("{name}: {}", cluster["status"]));
            }
        }
        Ok(())
    });
    wait_entries(
        &k,
        "echo",
        &names,
        "applied and healthy after the hub restart",
        applied_and_healthy,
    );
    {
        use std::io::{Read, Write};
        held.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        held.write_all(b"still here\n").unwrap();
        let mut answer = [0u8; 11];
        held.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"STILL HERE\n");
    }
    for member in &members {
        serves(member, 17021).unwrap();
    }
}

#[test]
fn agent_tokens_are_checked_and_revocable() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 13);
    let k = kubectl(dir, &hub.api);
    let spec = ClusterSpec::numbered(13, 1, "europe-west1", 10.0, 20.0);
    let _echo = Echo::start(spec.backend).unwrap();
    create_cluster(&k, dir, &spec);
    let connected = || get_json(&k, &["cluster", "c1"])["status"]["connected"] == true;

    // A wrong token is refused.
    let config = agent_config(dir, &hub.agent, &spec, "bogus.token");
    let agent = start_agent(&config, "c1");
    std::thread::sleep(Duration::from_secs(2));
    assert!(!connected(), "an agent with a wrong token must not connect");
    drop(agent);

    // A real token works; the list shows ids, never the token.
    let (id, token) = issue_token(&hub.api, "c1").unwrap();
    let config = agent_config(dir, &hub.agent, &spec, &token);
    let agent = start_agent(&config, "c1");
    eventually(WAIT, "connected with a valid token", || {
        if connected() {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    let list = curl_json(&[&format!(
        "{}/apis/fedingress.io/v1alpha1/clusters/c1/token",
        hub.api
    )])
    .unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], id.as_str());
    assert!(!list.to_string().contains(&token));

    // An agent token is no good on the REST API.
    let status = curl_json(&[
        "-H",
        &format!("Authorization: Bearer {token}"),
        &format!("{}/apis/fedingress.io/v1alpha1/clusters", hub.api),
    ])
    .unwrap();
    assert_eq!(status["code"], 401, "{status}");

    // Revoked: the agent cannot connect again.
    let revoked = curl_json(&[
        "-X",
        "DELETE",
        &format!(
            "{}/apis/fedingress.io/v1alpha1/clusters/c1/token/{id}",
            hub.api
        ),
    ])
    .unwrap();
    assert_eq!(revoked["status"], "Success", "{revoked}");
    agent.kill9();
    eventually(WAIT, "c1 offline after its agent died", || {
        if connected() {
            Err("still connected".into())
        } else {
            Ok(())
        }
    });
    let _agent = start_agent(&config, "c1");
    std::thread::sleep(Duration::from_secs(2));
    assert!(!connected(), "a revoked token must not connect");
    let err = curl_json(&[
        "-X",
        "POST",
        &format!(
            "{}/apis/fedingress.io/v1alpha1/clusters/nope/token",
            hub.api
        ),
    ])
    .unwrap();
    assert_eq!(err["code"], 404);
}

#[test]
fn cordon_and_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hub = start_hub(dir, 14);
    let k = kubectl(dir, &hub.api);
    let members = members(
        dir,
        &hub,
        &k,
        vec![
            ClusterSpec::numbered(14, 1, "europe-west1", 10.0, 20.0),
            ClusterSpec::numbered(14, 2, "us-east1", 20.0, 40.0),
        ],
    );
    let first = ingress_yaml(dir, "first", &[17041], "");
    k.ok(&["apply", "-f", &first]);
    wait_entries(&k, "first", &["c1", "c2"], "applied", applied_and_healthy);

    // Cordon c2: out of routing, no new placement, its listeners keep serving.
    k.ok(&[
        "patch",
        "cluster",
        "c2",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"unschedulable":true}}"#,
    ]);
    eventually(WAIT, "c2 cordoned", || {
        match condition(&get_json(&k, &["cluster", "c2"]), "Ready") {
            (s, r, _) if s == "False" && r == "Cordoned" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    wait_entries(&k, "first", &["c2"], "cordon message", |e| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("cordoned"))
    });
    serves(&members[1], 17041).unwrap();
    let second = ingress_yaml(dir, "second", &[17042], "");
    k.ok(&["apply", "-f", &second]);
    wait_entries(
        &k,
        "second",
        &["c1"],
        "second placed on c1",
        applied_and_healthy,
    );
    let placed = get_json(&k, &["federatedingress", "second"]);
    assert_eq!(
        placed["status"]["clusters"].as_array().unwrap().len(),
        1,
        "{}",
        placed["status"]
    );
    assert!(
        tcp_roundtrip(at(&members[1], 17042), "x").is_err(),
        "nothing new on a cordoned cluster"
    );

    // A newer object wanting the same port conflicts, and nothing of it is applied.
    let third = ingress_yaml(dir, "third", &[17041], "");
    k.ok(&["apply", "-f", &third]);
    eventually(WAIT, "Conflict condition", || {
        match condition(&get_json(&k, &["federatedingress", "third"]), "Placed") {
            (s, r, m) if s == "False" && r == "Conflict" && m.contains("default/first") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    wait_entries(&k, "third", &["c1"], "conflict entry", |e| {
        e["phase"] == "Failed"
    });
    serves(&members[0], 17041).unwrap();
    wait_entries(&k, "first", &["c1", "c2"], "first untouched", |e| {
        e["phase"] == "Applied"
    });
}
