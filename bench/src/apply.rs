//! Server-side apply at scale, for `apiserver-bench --apply`: what `PATCH
//! application/apply-patch+yaml` and `metadata.managedFields` cost on the REST API, each
//! phase against the write a client without server-side apply would send, measured in
//! the same run on the same apiserver.
//!
//! One release `federation-apiserver` (redb, loopback, `--dev`) and `--objects` realistic
//! FederatedIngresses ([`config`]: three rules, placement and overrides for three
//! clusters, labels) in namespace `default`, written by `--clients` concurrent clients:
//!
//! 1. **create**: POST of set `p…` (peer) vs an apply that creates set `a…`;
//! 2. **change one field** (`spec.traffic.ttl`): a JSON merge patch on `p…` vs an apply
//!    of the whole changed configuration on `a…` (what Flux and Argo CD send);
//! 3. **resync, nothing changed**: a no-op merge patch vs the same apply again (the
//!    bench counts the objects whose resourceVersion moved: none should for the apply);
//! 4. **a second manager**: `team-b` applies an override for a fourth cluster (map-list
//!    merge by `cluster`) vs a merge patch carrying all four overrides; the size of
//!    `metadata.managedFields` per object before and after;
//! 5. **status writes**: a merge patch to `/status` (manager `bench-status`, one more
//!    condition) on objects with their managedFields vs on objects whose managedFields
//!    were cleared with `[{}]` (kube then leaves them untracked, so the write does no
//!    field management at all).
//!
//! Between phases it waits until the apiserver is idle (the controller's status writes
//! after creates and spec changes done). Each phase also reports the apiserver's CPU per
//! write (its controller's follow-up work included). A micro-measure times the field
//! manager in-process on one object, to tell what dominates. It prints numbers; it
//! asserts nothing.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fedingress_api::FederatedIngress;
use fedingress_fieldmanager::{self as fieldmanager, Managed, Schema};
use serde_json::{Value, json};

use crate::{Api, Apiserver, CpuWindow, GROUP_PATH, HubTiming, load_average, ms, percentile};

const NAMESPACE: &str = "default";
const API_VERSION: &str = "fedingress.io/v1alpha1";
const APPLY_MANAGER: &str = "bench-apply";
const MERGE_MANAGER: &str = "bench-merge";
const SECOND_MANAGER: &str = "team-b";
const STATUS_MANAGER: &str = "bench-status";
const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
/// The clusters every object places and overrides, and the one `team-b` adds.
const CLUSTERS: [&str; 3] = ["eu-west", "us-east", "ap-south"];
const SECOND_CLUSTER: &str = "sa-east";
/// `spec.traffic.ttl` before and after phase 2.
const TTL: i32 = 30;
const CHANGED_TTL: i32 = 60;

fn collection() -> String {
    format!("{GROUP_PATH}/namespaces/{NAMESPACE}/federatedingresses")
}

fn object_path(name: &str) -> String {
    format!("{}/{name}", collection())
}

/// The configuration a GitOps tool keeps for object `name`: three rules (TCP, UDP and
/// HTTP with two paths), placement and an override for three clusters, four labels.
/// With `defaults`, it also spells out what the server defaults inside the atomic
/// `rules` list (the HTTP rule's port 80, each path's `pathType: Prefix`).
pub fn config(name: &str, ttl: i32, defaults: bool) -> Value {
    let overrides: Vec<Value> = CLUSTERS
        .iter()
        .map(|cluster| {
            json!({
                "cluster": cluster,
                "ingressClassName": "nginx",
                "annotations": {"example.com/tier": "gold", "example.com/cluster": cluster}
            })
        })
        .collect();
    let mut config = json!({
        "apiVersion": API_VERSION,
        "kind": "FederatedIngress",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": name, "team": "a", "tier": "web", "env": "prod"}
        },
        "spec": {
            "rules": [
                {"protocol": "TCP", "port": 7777, "name": "echo", "backend": {"service": "echo", "port": 7777}},
                {"protocol": "UDP", "port": 7777, "backend": {"service": "echo", "port": 7777}},
                {"protocol": "HTTP", "host": format!("{name}.shop.test"), "paths": [
                    {"path": "/", "backend": {"service": "web", "port": 8080}},
                    {"path": "/api", "backend": {"service": "api", "port": 8081}}
                ]}
            ],
            "placement": {"clusters": CLUSTERS},
            "overrides": overrides,
            "traffic": {"dnsName": format!("{name}.shop.test"), "ttl": ttl, "strategy": {"type": "Geo"}}
        }
    });
    if defaults && let Some(http) = config.pointer_mut("/spec/rules/2") {
        http["port"] = json!(80);
        for path in http["paths"].as_array_mut().into_iter().flatten() {
            path["pathType"] = json!("Prefix");
        }
    }
    config
}

/// `team-b`'s configuration: only its own cluster's override.
fn second_manager_config(name: &str) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "FederatedIngress",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"overrides": [second_override()]}
    })
}

fn second_override() -> Value {
    json!({"cluster": SECOND_CLUSTER, "ingressClassName": "nginx-b", "annotations": {"example.com/team": "b"}})
}

/// The condition the status writer adds.
fn probe_condition() -> Value {
    json!({"type": "BenchProbe", "status": "True", "reason": "Probed", "message": "written by apiserver-bench"})
}

/// One HTTP write.
struct Op {
    method: reqwest::Method,
    path: String,
    content_type: &'static str,
    body: String,
}

impl Op {
    fn post(body: &Value) -> Self {
        Self {
            method: reqwest::Method::POST,
            path: format!("{}?fieldManager=bench-create", collection()),
            content_type: "application/json",
            body: body.to_string(),
        }
    }

    fn apply(name: &str, manager: &str, body: &Value) -> Self {
        Self {
            method: reqwest::Method::PATCH,
            path: format!("{}?fieldManager={manager}", object_path(name)),
            content_type: APPLY,
            body: body.to_string(),
        }
    }

    /// A JSON merge patch of the object (`subresource` "" or "/status").
    fn merge(name: &str, subresource: &str, manager: &str, body: &Value) -> Self {
        Self {
            method: reqwest::Method::PATCH,
            path: format!("{}{subresource}?fieldManager={manager}", object_path(name)),
            content_type: MERGE,
            body: body.to_string(),
        }
    }
}

/// What one side of a phase measured.
struct Side {
    label: &'static str,
    elapsed: Duration,
    /// Sorted.
    latencies: Vec<Duration>,
    /// apiserver CPU (all threads) over the phase ÷ writes, µs.
    cpu_us: f64,
    /// resourceVersion of each answer, in the order of the ops.
    versions: Vec<String>,
}

impl Side {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn p(&self, q: f64) -> Duration {
        percentile(&self.latencies, q)
    }

    fn line(&self) -> String {
        format!(
            "{}: {} in {:.2} s = {:.0}/s, p50 {}, p99 {}, apiserver CPU {:.0} µs per write",
            self.label,
            self.latencies.len(),
            self.elapsed.as_secs_f64(),
            self.rate(),
            ms(self.p(0.5)),
            ms(self.p(0.99)),
            self.cpu_us
        )
    }
}

/// A phase: the peer's side and the server-side-apply (or managedFields) side.
struct Pair {
    what: &'static str,
    peer: Side,
    apply: Side,
}

/// Runs `ops` from `clients` concurrent tasks; every answer must be 200 or 201.
async fn run_ops(
    api: &Api,
    pid: u32,
    label: &'static str,
    ops: Vec<Op>,
    clients: usize,
) -> anyhow::Result<Side> {
    let ops = Arc::new(ops);
    let next = Arc::new(AtomicUsize::new(0));
    let cpu = CpuWindow::start(&[pid]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (api, ops, next) = (api.clone(), ops.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(op) = ops.get(i) else {
                    return Ok::<_, anyhow::Error>(done);
                };
                let t = Instant::now();
                let response = api
                    .client
                    .request(op.method.clone(), format!("{}{}", api.base, op.path))
                    .header("content-type", op.content_type)
                    .body(op.body.clone())
                    .send()
                    .await?;
                let status = response.status();
                let body = response.bytes().await?;
                let latency = t.elapsed();
                if !status.is_success() {
                    bail!(
                        "{} {}: {status} {}",
                        op.method,
                        op.path,
                        String::from_utf8_lossy(&body)
                    );
                }
                let answer: Value = serde_json::from_slice(&body)
                    .with_context(|| format!("{} {}: answer is not JSON", op.method, op.path))?;
                let version = answer["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                done.push((i, latency, version));
            }
        }));
    }
    let mut results = Vec::with_capacity(ops.len());
    for task in tasks {
        results.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let cpu_share = cpu.finish().first().copied().unwrap_or_default() / 100.0;
    results.sort_by_key(|(i, _, _)| *i);
    let mut latencies: Vec<Duration> = results.iter().map(|(_, l, _)| *l).collect();
    latencies.sort();
    let side = Side {
        label,
        elapsed,
        cpu_us: cpu_share * elapsed.as_secs_f64() / ops.len().max(1) as f64 * 1e6,
        latencies,
        versions: results.into_iter().map(|(_, _, v)| v).collect(),
    };
    println!("  {}", side.line());
    Ok(side)
}

/// Waits until the apiserver used under 5 % of a core over 300 ms (its controller done
/// with the status writes the last phase caused), at most 60 s.
/// Phase 3: a GitOps resync, the same writes again: a no-op merge patch (peer) vs the
/// unchanged configuration applied again, with or without the server's defaults spelled
/// out; counts the objects whose resourceVersion moved.
struct Resync<'a> {
    api: &'a Api,
    pid: u32,
    peers: &'a [String],
    appliers: &'a [String],
    peer_patch: &'a Value,
    clients: usize,
}

impl Resync<'_> {
    /// The pair measured, and the objects as they were before it.
    async fn run(&self, defaults: bool) -> anyhow::Result<(Pair, HashMap<String, Value>)> {
        settle(self.pid).await;
        let before = list(self.api).await?;
        let peer = run_ops(
            self.api,
            self.pid,
            "no-op merge patch",
            self.peers
                .iter()
                .map(|n| Op::merge(n, "", MERGE_MANAGER, self.peer_patch))
                .collect(),
            self.clients,
        )
        .await?;
        settle(self.pid).await;
        let (label, what, by) = if defaults {
            (
                "apply unchanged, defaults spelled out",
                "resync, defaults spelled out",
                "the apply with defaults",
            )
        } else {
            (
                "apply unchanged",
                "resync, nothing changed",
                "the unchanged apply",
            )
        };
        let apply = run_ops(
            self.api,
            self.pid,
            label,
            self.appliers
                .iter()
                .map(|n| Op::apply(n, APPLY_MANAGER, &config(n, CHANGED_TTL, defaults)))
                .collect(),
            self.clients,
        )
        .await?;
        let objects = self.peers.len();
        println!(
            "  resourceVersion moved: {} of {objects} by the no-op merge patch, {} of {} by {by}",
            moved(&before, self.peers, &peer),
            moved(&before, self.appliers, &apply),
            self.appliers.len(),
        );
        Ok((Pair { what, peer, apply }, before))
    }
}

async fn settle(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let window = CpuWindow::start(&[pid]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        if window.finish().first().copied().unwrap_or_default() < 5.0 {
            return;
        }
    }
    println!("  (the apiserver was still busy after 60 s; measuring anyway)");
}

/// How many of `names` answered (`side.versions`, in the same order) with another
/// resourceVersion than in `before`.
fn moved(before: &HashMap<String, Value>, names: &[String], side: &Side) -> usize {
    names
        .iter()
        .zip(&side.versions)
        .filter(|(name, version)| {
            before
                .get(*name)
                .and_then(|o| o["metadata"]["resourceVersion"].as_str())
                != Some(version.as_str())
        })
        .count()
}

/// The namespace's objects by name.
async fn list(api: &Api) -> anyhow::Result<HashMap<String, Value>> {
    let list = api.get(&collection()).await?;
    Ok(list["items"]
        .as_array()
        .context("items in the list")?
        .iter()
        .filter_map(|item| Some((item["metadata"]["name"].as_str()?.to_string(), item.clone())))
        .collect())
}

/// Mean bytes of `metadata.managedFields` (compact JSON), mean entries and mean bytes
/// of the whole object, over `names`.
fn managed_size(objects: &HashMap<String, Value>, names: &[String]) -> (f64, f64, f64) {
    let (mut bytes, mut entries, mut whole, mut n) = (0usize, 0usize, 0usize, 0usize);
    for name in names {
        let Some(object) = objects.get(name) else {
            continue;
        };
        let managed = &object["metadata"]["managedFields"];
        if !managed.is_null() {
            bytes += managed.to_string().len();
        }
        entries += managed.as_array().map(Vec::len).unwrap_or(0);
        whole += object.to_string().len();
        n += 1;
    }
    let n = n.max(1) as f64;
    (bytes as f64 / n, entries as f64 / n, whole as f64 / n)
}

fn print_sizes(when: &str, objects: &HashMap<String, Value>, sets: &[(&str, &[String])]) {
    for (set, names) in sets {
        let (bytes, entries, whole) = managed_size(objects, names);
        println!(
            "  managedFields {when}, {set}: {bytes:.0} bytes per object ({entries:.1} entries) of {whole:.0} bytes per object"
        );
    }
}

/// Runs every phase against a fresh apiserver and prints the table.
pub async fn run(binary: &Path, objects: usize, clients: usize) -> anyhow::Result<()> {
    let Apiserver {
        proc, api: base, ..
    } = Apiserver::start(
        binary,
        "127.0.0.1",
        HubTiming {
            heartbeat_ms: 2000,
            lease_ms: 6000,
        },
    )
    .await?;
    let pid = proc.pid;
    let api = Api::new(&base)?;
    let result = measure(&api, pid, objects, clients).await;
    proc.stop().await;
    result
}

async fn measure(api: &Api, pid: u32, objects: usize, clients: usize) -> anyhow::Result<()> {
    api.create_namespace(NAMESPACE).await?;
    println!(
        "federation-apiserver pid {pid} at {}; {objects} FederatedIngresses per set (p: merge patches, a: server-side apply) in namespace {NAMESPACE}, {clients} clients; load average {}",
        api.base,
        load_average()
    );
    let peers: Vec<String> = (0..objects).map(|n| format!("p{n:05}")).collect();
    let appliers: Vec<String> = (0..objects).map(|n| format!("a{n:05}")).collect();
    let mut pairs = Vec::new();

    println!("1. create");
    settle(pid).await;
    let peer = run_ops(
        api,
        pid,
        "POST",
        peers
            .iter()
            .map(|n| Op::post(&config(n, TTL, false)))
            .collect(),
        clients,
    )
    .await?;
    settle(pid).await;
    let apply = run_ops(
        api,
        pid,
        "apply (creates)",
        appliers
            .iter()
            .map(|n| Op::apply(n, APPLY_MANAGER, &config(n, TTL, false)))
            .collect(),
        clients,
    )
    .await?;
    pairs.push(Pair {
        what: "create",
        peer,
        apply,
    });

    println!("2. change spec.traffic.ttl on every object");
    let ttl_patch = json!({"spec": {"traffic": {"ttl": CHANGED_TTL}}});
    settle(pid).await;
    let peer = run_ops(
        api,
        pid,
        "merge patch",
        peers
            .iter()
            .map(|n| Op::merge(n, "", MERGE_MANAGER, &ttl_patch))
            .collect(),
        clients,
    )
    .await?;
    settle(pid).await;
    let apply = run_ops(
        api,
        pid,
        "apply of the full changed configuration",
        appliers
            .iter()
            .map(|n| Op::apply(n, APPLY_MANAGER, &config(n, CHANGED_TTL, false)))
            .collect(),
        clients,
    )
    .await?;
    pairs.push(Pair {
        what: "change one field",
        peer,
        apply,
    });

    println!("3. resync: the same again (nothing changes)");
    let resync = Resync {
        api,
        pid,
        peers: &peers,
        appliers: &appliers,
        peer_patch: &ttl_patch,
        clients,
    };
    let (pair, _) = resync.run(false).await?;
    pairs.push(pair);
    println!("3b. resync with the server's defaults spelled out in the configuration");
    let (pair, before) = resync.run(true).await?;
    pairs.push(pair);

    println!("4. a second manager adds an override for {SECOND_CLUSTER}");
    print_sizes(
        "before",
        &before,
        &[("merge-patched (p)", &peers), ("applied (a)", &appliers)],
    );
    let mut all_overrides = config("x", TTL, false)["spec"]["overrides"].clone();
    if let Some(list) = all_overrides.as_array_mut() {
        list.push(second_override());
    }
    let overrides_patch = json!({"spec": {"overrides": all_overrides}});
    settle(pid).await;
    let peer = run_ops(
        api,
        pid,
        "merge patch with all four overrides",
        peers
            .iter()
            .map(|n| Op::merge(n, "", SECOND_MANAGER, &overrides_patch))
            .collect(),
        clients,
    )
    .await?;
    settle(pid).await;
    let apply = run_ops(
        api,
        pid,
        "apply by team-b of its override",
        appliers
            .iter()
            .map(|n| Op::apply(n, SECOND_MANAGER, &second_manager_config(n)))
            .collect(),
        clients,
    )
    .await?;
    pairs.push(Pair {
        what: "second manager adds an override",
        peer,
        apply,
    });
    settle(pid).await;
    let after = list(api).await?;
    print_sizes(
        "after",
        &after,
        &[("merge-patched (p)", &peers), ("applied (a)", &appliers)],
    );
    if let Some(sample) = after.get(&appliers[0]) {
        let managers: Vec<String> = sample["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "{} {}{}",
                    e["manager"].as_str().unwrap_or_default(),
                    e["operation"].as_str().unwrap_or_default(),
                    e["subresource"]
                        .as_str()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        println!("  managers of {}: {}", appliers[0], managers.join(", "));
    }

    println!("5. status writes (merge patch to /status by {STATUS_MANAGER})");
    let status_ops = |names: &[String], objects: &HashMap<String, Value>| -> Vec<Op> {
        names
            .iter()
            .map(|name| {
                let mut conditions = objects
                    .get(name)
                    .and_then(|o| o["status"]["conditions"].as_array().cloned())
                    .unwrap_or_default();
                conditions.retain(|c| c["type"] != "BenchProbe");
                conditions.push(probe_condition());
                let body = json!({"status": {"conditions": conditions}});
                Op::merge(name, "/status", STATUS_MANAGER, &body)
            })
            .collect()
    };
    let apply = run_ops(
        api,
        pid,
        "status write, objects with managedFields (a)",
        status_ops(&appliers, &after),
        clients,
    )
    .await?;
    settle(pid).await;
    let clear = json!({"metadata": {"managedFields": [{}]}});
    run_ops(
        api,
        pid,
        "(clearing managedFields of p)",
        peers
            .iter()
            .map(|n| Op::merge(n, "", MERGE_MANAGER, &clear))
            .collect(),
        clients,
    )
    .await?;
    settle(pid).await;
    let cleared = list(api).await?;
    print_sizes("cleared", &cleared, &[("merge-patched (p)", &peers)]);
    let peer = run_ops(
        api,
        pid,
        "status write, objects with managedFields cleared (p)",
        status_ops(&peers, &cleared),
        clients,
    )
    .await?;
    settle(pid).await;
    let last = list(api).await?;
    print_sizes(
        "after the status writes",
        &last,
        &[("cleared (p)", &peers), ("applied (a)", &appliers)],
    );
    pairs.push(Pair {
        what: "status write",
        peer,
        apply,
    });

    println!(
        "in-process field manager on {} (mean of 2,000 runs each):",
        appliers[0]
    );
    let schema_doc = api.get("/openapi/v3/apis/fedingress.io/v1alpha1").await?;
    let live = api.get(&object_path(&appliers[0])).await?;
    micro(&schema_doc, &live, &appliers[0])?;

    print_table(&pairs);
    Ok(())
}

/// Mean time of `f` over `runs` (after `runs / 10` warm-up runs).
fn mean<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    for _ in 0..runs / 10 {
        black_box(f());
    }
    let started = Instant::now();
    for _ in 0..runs {
        black_box(f());
    }
    started.elapsed() / runs as u32
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Times, in this process, what the apiserver's field management does for one write
/// of `live` (an object as served, with its managedFields), with the merge schema read
/// from the served OpenAPI document: apply of a changed and of an unchanged
/// configuration, the Update tracking of a status write, decoding and encoding the
/// managedFields, and the typed round trip the registry does around them.
fn micro(schema_doc: &Value, live: &Value, name: &str) -> anyhow::Result<()> {
    let kind_schema =
        &schema_doc["components"]["schemas"]["io.fedingress.v1alpha1.FederatedIngress"];
    if kind_schema.is_null() {
        bail!("no FederatedIngress schema in the OpenAPI v3 document");
    }
    let schema = Schema::from_openapi(kind_schema).context("reading the merge schema")?;
    let managed = Managed::decode(&live["metadata"]["managedFields"])
        .context("decoding the live managedFields")?;
    let now = "2026-11-24T12:00:00Z";
    let request = fieldmanager::Request {
        manager: APPLY_MANAGER,
        api_version: API_VERSION,
        subresource: None,
        now,
    };
    let status_request = fieldmanager::Request {
        manager: STATUS_MANAGER,
        subresource: Some("status"),
        ..request
    };
    let changed = config(name, CHANGED_TTL + 1, false);
    let unchanged = config(name, CHANGED_TTL, false);
    let spelled = config(name, CHANGED_TTL, true);
    let mut with_status = live.clone();
    if let Some(conditions) = with_status["status"]["conditions"].as_array_mut() {
        conditions.push(json!({"type": "Other", "status": "True"}));
    }
    let runs = 2_000;
    let spelled_check = fieldmanager::apply(
        &schema,
        Some(live),
        &spelled,
        managed.clone(),
        &request,
        false,
    )
    .context("applying the configuration with defaults in-process")?;
    let check = fieldmanager::apply(
        &schema,
        Some(live),
        &unchanged,
        managed.clone(),
        &request,
        false,
    )
    .context("applying the unchanged configuration in-process")?;
    let apply_changed = mean(runs, || {
        fieldmanager::apply(
            &schema,
            Some(live),
            &changed,
            managed.clone(),
            &request,
            false,
        )
    });
    let apply_unchanged = mean(runs, || {
        fieldmanager::apply(
            &schema,
            Some(live),
            &unchanged,
            managed.clone(),
            &request,
            false,
        )
    });
    let status_update = mean(runs, || {
        fieldmanager::update(
            &schema,
            Some(live),
            &with_status,
            managed.clone(),
            &status_request,
        )
    });
    let decode_encode = mean(runs, || {
        Managed::decode(&live["metadata"]["managedFields"]).map(|m| m.encode())
    });
    let typed: FederatedIngress = serde_json::from_value(live.clone())
        .context("decoding the object as a FederatedIngress")?;
    let round_trip = mean(runs, || {
        serde_json::to_value(&typed)
            .ok()
            .and_then(|v| serde_json::from_value::<FederatedIngress>(v).ok())
    });
    let apply_spelled = mean(runs, || {
        fieldmanager::apply(
            &schema,
            Some(live),
            &spelled,
            managed.clone(),
            &request,
            false,
        )
    });
    println!("  apply of a changed configuration: {}", us(apply_changed));
    println!(
        "  apply of the unchanged configuration: {} (the field manager says changed = {})",
        us(apply_unchanged),
        check.changed
    );
    println!(
        "  apply of the unchanged configuration with the defaults spelled out: {} (changed = {})",
        us(apply_spelled),
        spelled_check.changed
    );
    println!("  Update tracking of a status write: {}", us(status_update));
    println!("  managedFields decode + encode: {}", us(decode_encode));
    println!(
        "  typed object -> JSON -> typed object (the registry does it around each step): {}",
        us(round_trip)
    );
    Ok(())
}

fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}×", value / base)
    } else {
        "—".into()
    }
}

/// A markdown table: per phase, each side's writes/s, p50 / p99 and CPU per write, and
/// the ratios SSA side ÷ peer (writes/s below 1× is fewer; latency and CPU above 1×
/// cost more).
fn print_table(pairs: &[Pair]) {
    let ms2 = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
    println!();
    println!(
        "| phase | peer | SSA side | peer writes/s | SSA writes/s | ratio | peer p50 / p99 ms | SSA p50 / p99 ms | ratio p50 / p99 | CPU µs/write peer / SSA | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for Pair { what, peer, apply } in pairs {
        let latency_ratio = |q: f64| ratio(apply.p(q).as_secs_f64(), peer.p(q).as_secs_f64());
        println!(
            "| {what} | {} | {} | {:.0} | {:.0} | {} | {} / {} | {} / {} | {} / {} | {:.0} / {:.0} | {} |",
            peer.label,
            apply.label,
            peer.rate(),
            apply.rate(),
            ratio(apply.rate(), peer.rate()),
            ms2(peer.p(0.5)),
            ms2(peer.p(0.99)),
            ms2(apply.p(0.5)),
            ms2(apply.p(0.99)),
            latency_ratio(0.5),
            latency_ratio(0.99),
            peer.cpu_us,
            apply.cpu_us,
            ratio(apply.cpu_us, peer.cpu_us)
        );
    }
}
