//! Authorization at scale (issue 12), for `apiserver-bench --authz`: what RBAC, the
//! token authenticators and the serving limits cost on the REST API with a realistic
//! multi-tenant policy, as ratios within one run.
//!
//! One `federation-apiserver` (redb, loopback, no `--dev`: every request carries a
//! bearer token) holds [`Tenancy`]: `--namespaces` namespaces, each with a Role whose
//! rule names one object (`resourceNames`) and `--bindings ÷ --namespaces`
//! RoleBindings — its owner bound to ClusterRole `edit`, others to `view` or to that
//! Role — for `--users` token-file users. The same request mix ([`Op`]: create, get,
//! list and watch FederatedIngresses, a get allowed only by `resourceNames`, and 20 %
//! that the users may not do) then runs as [`Workload`]s, interleaved round by round so
//! a noisy neighbour hits them alike:
//!
//! - `baseline`: the admin token (`fedingress:admins` → `cluster-admin`);
//! - `policy`: the users' static tokens, each request as a user in its own namespaces
//!   (the denied share answers 403);
//! - OIDC RS256 and ES256 (with `--oidc`): the same users with OIDC ID tokens from
//!   the test issuer ([`fedingress_tests::oidc`]), verified on every request.
//!
//! Also measured: the apiserver's RSS and its start-up time (spawn → `READY`, which
//! waits for the RBAC cache, and `fedingress_authorization_synced` in `/metrics`) with
//! and without the policy, and how fast the policy can be written.
//!
//! The serving limits cannot be switched off: every workload pays for them, so the
//! ratios show authentication and authorization on top of them. It prints numbers; it
//! asserts nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use crate::{
    CpuWindow, GROUP_PATH, Proc, load_average, ms, percentile, print_ratio_table, rss_mib,
};

/// `apiserver-bench --authz` options.
#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Tenant namespaces.
    #[arg(long, default_value_t = 1_000)]
    pub namespaces: usize,
    /// RoleBindings, spread evenly over the namespaces.
    #[arg(long, default_value_t = 10_000)]
    pub bindings: usize,
    /// Token-file users (and OIDC users with `--oidc`).
    #[arg(long, default_value_t = 200)]
    pub users: usize,
    /// Measured rounds; each runs every workload once (after one warm-up round).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Requests per workload and round.
    #[arg(long, default_value_t = 4_000)]
    pub ops: usize,
    /// Also run the users with OIDC ID tokens (RS256 and ES256).
    #[arg(long)]
    pub oidc: bool,
}

/// Bindings of one namespace: index 0 is the owner's `edit`; 1..=VIEWERS are `view`;
/// the rest bind the namespace's `seed-reader` Role (`resourceNames: [seed]`).
const VIEWERS: usize = 4;
const ADMIN_TOKEN: &str = "bench-admin-token";
const ADMIN: &str = "bench-admin";
const CLIENT_ID: &str = "fedingress";
const RBAC_PATH: &str = "/apis/rbac.authorization.k8s.io/v1";

/// The generated policy and, per user, where it may do what.
pub struct Tenancy {
    namespaces: Vec<String>,
    per_namespace: usize,
    users: Vec<TenantUser>,
}

struct TenantUser {
    name: String,
    token: String,
    /// Namespaces where it is bound to `edit`.
    owned: Vec<usize>,
    /// Namespaces where it may only get `seed` (the Role with `resourceNames`).
    named: Vec<usize>,
    /// Namespaces where it has no binding at all.
    foreign: Vec<usize>,
}

impl Tenancy {
    pub fn new(options: &Options) -> anyhow::Result<Self> {
        let (ns_count, users) = (options.namespaces, options.users);
        if ns_count == 0 || users == 0 || options.bindings < ns_count {
            bail!("need at least one namespace, one user and one binding per namespace");
        }
        let per_namespace = options.bindings / ns_count;
        if per_namespace * ns_count != options.bindings {
            bail!("--bindings must be a multiple of --namespaces");
        }
        let namespaces: Vec<String> = (0..ns_count).map(|n| format!("tenant-{n:04}")).collect();
        let mut tenants: Vec<TenantUser> = (0..users)
            .map(|u| TenantUser {
                name: format!("u{u:03}@tenants.test"),
                token: format!("bench-user-token-{u:03}"),
                owned: Vec::new(),
                named: Vec::new(),
                foreign: Vec::new(),
            })
            .collect();
        let mut bound = vec![std::collections::HashSet::new(); users];
        for n in 0..ns_count {
            for j in 0..per_namespace {
                let u = Self::subject(n, j, users);
                bound[u].insert(n);
                if j == 0 {
                    tenants[u].owned.push(n);
                } else if j > VIEWERS {
                    tenants[u].named.push(n);
                }
            }
        }
        for (u, tenant) in tenants.iter_mut().enumerate() {
            tenant.foreign = (0..ns_count)
                .filter(|n| !bound[u].contains(n))
                .take(8)
                .collect();
            if tenant.owned.is_empty() || tenant.named.is_empty() || tenant.foreign.is_empty() {
                bail!(
                    "user {} needs an own, a named-only and a foreign namespace: use more namespaces or bindings than users",
                    tenant.name
                );
            }
        }
        Ok(Self {
            namespaces,
            per_namespace,
            users: tenants,
        })
    }

    /// The user of binding `j` in namespace `n`.
    fn subject(n: usize, j: usize, users: usize) -> usize {
        (n + j * 17) % users
    }

    /// kube-apiserver's token file: the admin and every user.
    fn token_file(&self) -> String {
        let mut text = format!("{ADMIN_TOKEN},{ADMIN},0,\"fedingress:admins\"\n");
        for (u, user) in self.users.iter().enumerate() {
            text.push_str(&format!("{},{},{},\n", user.token, user.name, u + 1));
        }
        text
    }

    fn role(&self, n: usize) -> (String, Value) {
        let namespace = &self.namespaces[n];
        (
            format!("{RBAC_PATH}/namespaces/{namespace}/roles"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "seed-reader", "namespace": namespace},
                "rules": [{"apiGroups": ["fedingress.io"], "resources": ["federatedingresses"],
                           "resourceNames": ["seed"], "verbs": ["get"]}],
            }),
        )
    }

    fn binding(&self, n: usize, j: usize) -> (String, Value) {
        let namespace = &self.namespaces[n];
        let user = &self.users[Self::subject(n, j, self.users.len())].name;
        let (kind, role) = match j {
            0 => ("ClusterRole", "edit"),
            j if j <= VIEWERS => ("ClusterRole", "view"),
            _ => ("Role", "seed-reader"),
        };
        (
            format!("{RBAC_PATH}/namespaces/{namespace}/rolebindings"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": format!("b{j:02}-{role}"), "namespace": namespace},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            }),
        )
    }
}

fn ingress_path(namespace: &str) -> String {
    format!("{GROUP_PATH}/namespaces/{namespace}/federatedingresses")
}

fn ingress(name: &str) -> Value {
    json!({
        "apiVersion": "fedingress.io/v1alpha1",
        "kind": "FederatedIngress",
        "metadata": {"name": name, "labels": {"bench": "authz"}},
        "spec": {
            "rules": [
                {"protocol": "TCP", "port": 7777, "name": "echo", "backend": {"service": "echo", "port": 7777}},
                {"protocol": "HTTP", "host": format!("{name}.authz.test"), "paths": [{"path": "/", "backend": {"service": "web", "port": 8080}}]}
            ],
            "traffic": {"dnsName": format!("{name}.authz.test"), "strategy": {"type": "Geo"}}
        }
    })
}

/// One request of the mix. Every workload sends the same sequence of URLs; only the
/// token differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    /// POST in an own namespace (20 %).
    Create,
    /// GET `seed` in an own namespace (20 %).
    Get,
    /// LIST an own namespace (15 %).
    List,
    /// WATCH an own namespace: time to the response head (10 %).
    Watch,
    /// GET `seed` where only the Role with `resourceNames` allows it (15 %).
    NamedGet,
    /// GET `seed` in a namespace the user has no binding in (10 %): 403 for users.
    DeniedGet,
    /// LIST a namespace the user has no binding in (5 %): 403 for users.
    DeniedList,
    /// GET `other` where only `seed` is named (5 %): 403 for users.
    DeniedName,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::Create,
        Op::Get,
        Op::List,
        Op::Watch,
        Op::NamedGet,
        Op::DeniedGet,
        Op::DeniedList,
        Op::DeniedName,
    ];

    /// Out of 20 requests: 4 creates, 4 gets, 3 lists, 2 watches, 3 named gets, 4 denied.
    fn of(i: usize) -> Op {
        match i % 20 {
            0..=3 => Op::Create,
            4..=7 => Op::Get,
            8..=10 => Op::List,
            11..=12 => Op::Watch,
            13..=15 => Op::NamedGet,
            16..=17 => Op::DeniedGet,
            18 => Op::DeniedList,
            _ => Op::DeniedName,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Op::Create => "create (own namespace)",
            Op::Get => "get (own namespace)",
            Op::List => "list (own namespace)",
            Op::Watch => "watch, to the response head",
            Op::NamedGet => "get allowed by resourceNames",
            Op::DeniedGet => "get, no binding (403)",
            Op::DeniedList => "list, no binding (403)",
            Op::DeniedName => "get, name not in resourceNames (403)",
        }
    }

    fn denied(self) -> bool {
        matches!(self, Op::DeniedGet | Op::DeniedList | Op::DeniedName)
    }
}

/// Who sends the mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    Baseline,
    Policy,
    OidcRs256,
    OidcEs256,
}

impl Workload {
    fn label(self) -> &'static str {
        match self {
            Workload::Baseline => "baseline (admin)",
            Workload::Policy => "policy (200 users)",
            Workload::OidcRs256 => "OIDC RS256",
            Workload::OidcEs256 => "OIDC ES256",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Workload::Baseline => "base",
            Workload::Policy => "pol",
            Workload::OidcRs256 => "rs",
            Workload::OidcEs256 => "es",
        }
    }
}

/// What one workload measured over all rounds.
#[derive(Default)]
struct Measured {
    /// Requests per second of each round.
    rates: Vec<f64>,
    /// apiserver CPU per request of each round, µs.
    cpu_us: Vec<f64>,
    latencies: BTreeMap<Op, Vec<Duration>>,
    all: Vec<Duration>,
    /// Answers other than the expected one, by `op status`.
    unexpected: BTreeMap<String, usize>,
}

/// The apiserver under test and how to restart it on the same data.
struct Server {
    binary: PathBuf,
    dir: PathBuf,
    extra: Vec<String>,
    proc: Option<Proc>,
    api: String,
}

impl Server {
    /// Starts it; returns spawn → READY.
    async fn start(&mut self) -> anyhow::Result<Duration> {
        let mut command = Command::new(&self.binary);
        command
            .arg("--config")
            .arg(self.dir.join("apiserver.yaml"))
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--token-auth-file")
            .arg(self.dir.join("tokens.csv"))
            .args(&self.extra)
            .env("FEDINGRESS_LOG", "warn");
        let started = Instant::now();
        let proc = Proc::start_ready(command, "federation-apiserver").await?;
        let ready = started.elapsed();
        self.api = format!("http://{}", proc.addr("api"));
        self.proc = Some(proc);
        Ok(ready)
    }

    fn pid(&self) -> u32 {
        self.proc.as_ref().map(|p| p.pid).unwrap_or_default()
    }

    async fn stop(&mut self) {
        if let Some(proc) = self.proc.take() {
            proc.stop().await;
        }
    }
}

/// A metric's value in the `/metrics` text (the first sample whose name and labels
/// start with `prefix`).
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn metrics(client: &reqwest::Client, api: &str) -> anyhow::Result<String> {
    let response = client
        .get(format!("{api}/metrics"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("/metrics: {}", response.status());
    }
    Ok(response.text().await?)
}

/// Polls `/metrics` until `fedingress_authorization_synced 1`: the time from `since`.
async fn synced_after(
    client: &reqwest::Client,
    api: &str,
    since: Instant,
) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = metrics(client, api).await
            && metric(&text, "fedingress_authorization_synced") == Some(1.0)
        {
            return Ok(since.elapsed());
        }
        if Instant::now() > deadline {
            bail!("the RBAC cache did not sync within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `requests` (path, body) as POSTs with the admin token from `clients` tasks;
/// returns the time taken.
async fn post_all(
    client: &reqwest::Client,
    api: &str,
    requests: Vec<(String, Value)>,
    clients: usize,
) -> anyhow::Result<Duration> {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (client, api, requests, next) = (
            client.clone(),
            api.to_string(),
            requests.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((path, body)) = requests.get(i) else {
                    return Ok::<_, anyhow::Error>(());
                };
                let response = client
                    .post(format!("{api}{path}"))
                    .bearer_auth(ADMIN_TOKEN)
                    .json(body)
                    .send()
                    .await?;
                if response.status() != 201 {
                    bail!(
                        "POST {path}: {} {}",
                        response.status(),
                        response.text().await?
                    );
                }
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// Runs the whole measurement and prints it.
pub async fn run(binary: &Path, options: &Options, clients: usize) -> anyhow::Result<()> {
    let tenancy = Arc::new(Tenancy::new(options)?);
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("tokens.csv"), tenancy.token_file())?;
    // The admin baseline opens all its watches as one user: at 10 % of some thousand
    // requests/s, each open up to its 1 s, more than the default per-user cap (256).
    std::fs::write(
        dir.path().join("apiserver.yaml"),
        "listen: 127.0.0.1:0\nagentListen: 127.0.0.1:0\nlimits:\n  maxWatchesPerUser: 2048\n",
    )?;
    let issuer = if options.oidc {
        let issuer = fedingress_tests::oidc::Issuer::start()?;
        std::fs::write(dir.path().join("oidc-ca.crt"), &issuer.ca_pem)?;
        Some(issuer)
    } else {
        None
    };
    let mut extra = Vec::new();
    if let Some(issuer) = &issuer {
        extra.extend([
            "--oidc-issuer-url".to_string(),
            issuer.url(),
            "--oidc-client-id".into(),
            CLIENT_ID.into(),
            "--oidc-username-claim".into(),
            "email".into(),
            "--oidc-ca-file".into(),
            dir.path().join("oidc-ca.crt").display().to_string(),
        ]);
    }
    let mut server = Server {
        binary: binary.to_path_buf(),
        dir: dir.path().to_path_buf(),
        extra,
        proc: None,
        api: String::new(),
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    println!(
        "authorization at scale: {} namespaces, {} RoleBindings ({} per namespace), {} Roles with resourceNames, {} users; {} rounds × {} requests per workload, {clients} clients; load {}",
        options.namespaces,
        options.bindings,
        tenancy.per_namespace,
        options.namespaces,
        options.users,
        options.rounds,
        options.ops,
        load_average()
    );

    // 1. An empty store: start-up, then the objects the mix reads.
    let spawned = Instant::now();
    let ready_empty = server.start().await?;
    let synced_empty = synced_after(&client, &server.api, spawned).await?;
    println!(
        "start, empty store: READY after {}, synced after {}; rss {:.1} MiB",
        ms(ready_empty),
        ms(synced_empty),
        rss_mib(server.pid())?
    );
    let namespaces = tenancy
        .namespaces
        .iter()
        .map(|n| ("/api/v1/namespaces".to_string(), crate::namespace(n)))
        .collect();
    post_all(&client, &server.api, namespaces, clients).await?;
    let mut seeds = Vec::new();
    for namespace in &tenancy.namespaces {
        for name in ["seed", "other"] {
            seeds.push((ingress_path(namespace), ingress(name)));
        }
    }
    let count = seeds.len();
    let took = post_all(&client, &server.api, seeds, clients).await?;
    println!(
        "{count} FederatedIngresses (seed and other per namespace) in {:.2} s",
        took.as_secs_f64()
    );

    // 2. Restart without the policy: the reference start-up and RSS.
    server.stop().await;
    let spawned = Instant::now();
    let ready_plain = server.start().await?;
    let synced_plain = synced_after(&client, &server.api, spawned).await?;
    let rss_plain = rss_mib(server.pid())?;
    println!(
        "restart without the policy: READY after {}, synced after {}; rss {rss_plain:.1} MiB",
        ms(ready_plain),
        ms(synced_plain)
    );

    // 3. Write the policy: the Roles, then the bindings.
    let roles: Vec<_> = (0..options.namespaces).map(|n| tenancy.role(n)).collect();
    let took_roles = post_all(&client, &server.api, roles, clients).await?;
    let bindings: Vec<_> = (0..options.namespaces)
        .flat_map(|n| (0..tenancy.per_namespace).map(move |j| (n, j)))
        .map(|(n, j)| tenancy.binding(n, j))
        .collect();
    let took_bindings = post_all(&client, &server.api, bindings, clients).await?;
    let acked = Instant::now();
    let deadline = acked + Duration::from_secs(120);
    let cached = loop {
        let text = metrics(&client, &server.api).await?;
        let count = metric(
            &text,
            "fedingress_authorization_policy_objects{kind=\"rolebindings\"}",
        )
        .unwrap_or_default();
        if count as usize >= options.bindings {
            break acked.elapsed();
        }
        if Instant::now() > deadline {
            bail!("only {count} RoleBindings in the authorizer's cache after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "policy written: {} Roles in {:.2} s ({:.0}/s), {} RoleBindings in {:.2} s ({:.0}/s); the last in the authorizer's cache {} after its 201; rss {:.1} MiB",
        options.namespaces,
        took_roles.as_secs_f64(),
        options.namespaces as f64 / took_roles.as_secs_f64(),
        options.bindings,
        took_bindings.as_secs_f64(),
        options.bindings as f64 / took_bindings.as_secs_f64(),
        ms(cached),
        rss_mib(server.pid())?
    );

    // 4. Restart with the policy: start-up to policy sync, and RSS.
    server.stop().await;
    let spawned = Instant::now();
    let ready_policy = server.start().await?;
    let synced_policy = synced_after(&client, &server.api, spawned).await?;
    let rss_policy = rss_mib(server.pid())?;
    println!(
        "restart with the policy: READY after {}, synced after {}; rss {rss_policy:.1} MiB",
        ms(ready_policy),
        ms(synced_policy)
    );

    // 5. The workloads, interleaved.
    let mut workloads = vec![Workload::Baseline, Workload::Policy];
    let mut tokens: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    tokens.insert(
        Workload::Baseline.short(),
        vec![ADMIN_TOKEN.to_string(); options.users],
    );
    tokens.insert(
        Workload::Policy.short(),
        tenancy.users.iter().map(|u| u.token.clone()).collect(),
    );
    if let Some(issuer) = &issuer {
        let now = unix_now();
        for (workload, kid) in [
            (Workload::OidcRs256, "rsa-1"),
            (Workload::OidcEs256, "ec-1"),
        ] {
            workloads.push(workload);
            let minted = tenancy
                .users
                .iter()
                .map(|u| {
                    let claims = json!({
                        "iss": issuer.url(), "aud": CLIENT_ID, "sub": format!("sub-{}", u.name),
                        "email": u.name, "email_verified": true,
                        "iat": now, "nbf": now - 5, "exp": now + 4 * 3600,
                    });
                    issuer.token(kid, &claims)
                })
                .collect();
            tokens.insert(workload.short(), minted);
        }
    }
    let mix = Mix {
        client: client.clone(),
        api: server.api.clone(),
        tenancy: tenancy.clone(),
        tokens: Arc::new(tokens),
        ops: options.ops,
        clients,
    };
    let mut measured: Vec<Measured> = workloads.iter().map(|_| Measured::default()).collect();
    let mut loads = Vec::new();
    for round in 0..=options.rounds {
        let mut line = format!(
            "round {round}{}:",
            if round == 0 { " (warm-up)" } else { "" }
        );
        for (w, workload) in workloads.iter().enumerate() {
            let load = load_average();
            loads.push(load.clone());
            let cpu = CpuWindow::start(&[server.pid()]);
            let started = Instant::now();
            let results = mix.round(*workload, round).await?;
            let elapsed = started.elapsed();
            let cpu_percent = cpu.finish()[0];
            let rate = options.ops as f64 / elapsed.as_secs_f64();
            let cpu_us = cpu_percent / 100.0 * elapsed.as_secs_f64() * 1e6 / options.ops as f64;
            line.push_str(&format!(
                " {} {rate:.0}/s {cpu_us:.0} µs CPU/req (load {load});",
                workload.short()
            ));
            if round == 0 {
                continue;
            }
            let m = &mut measured[w];
            m.rates.push(rate);
            m.cpu_us.push(cpu_us);
            for (op, status, latency) in results {
                m.all.push(latency);
                m.latencies.entry(op).or_default().push(latency);
                let expected = match (op, *workload) {
                    (Op::Create, _) => 201,
                    (op, w) if op.denied() && w != Workload::Baseline => 403,
                    _ => 200,
                };
                if status != expected {
                    *m.unexpected.entry(format!("{op:?} {status}")).or_default() += 1;
                }
            }
        }
        line.push_str(&format!(" rss {:.1} MiB", rss_mib(server.pid())?));
        println!("{line}");
    }
    let rss_after = rss_mib(server.pid())?;
    let text = metrics(&client, &server.api).await?;
    let decisions = |d: &str| {
        metric(
            &text,
            &format!("fedingress_authorization_decisions_total{{decision=\"{d}\"}}"),
        )
        .unwrap_or_default()
    };
    println!(
        "after the workloads: rss {rss_after:.1} MiB; decisions allow {:.0}, deny {:.0}, not_ready {:.0}; OIDC tokens accepted {:.0}; open connections {:.0}, open watches {:.0}",
        decisions("allow"),
        decisions("deny"),
        decisions("not_ready"),
        metric(&text, "fedingress_oidc_tokens_total{result=\"accepted\"}").unwrap_or_default(),
        metric(&text, "apiserver_connections ").unwrap_or(-1.0),
        metric(&text, "apiserver_watches ").unwrap_or(-1.0)
    );
    server.stop().await;
    drop(issuer);

    // 6. The report.
    for (workload, m) in workloads.iter().zip(&measured) {
        if !m.unexpected.is_empty() {
            println!(
                "{}: unexpected answers {:?}",
                workload.label(),
                m.unexpected
            );
        }
    }
    let labels: Vec<String> = workloads.iter().map(|w| w.label().to_string()).collect();
    let median = |values: &[f64]| {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or_default()
    };
    let spread = |values: &[f64]| {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(0.0, f64::max);
        format!("{min:.0}–{max:.0}")
    };
    let base = &measured[0];
    println!();
    println!(
        "| what | {} |",
        labels
            .iter()
            .enumerate()
            .map(|(i, l)| if i == 0 {
                l.clone()
            } else {
                format!("{l} | ratio")
            })
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|{}", "---|".repeat(labels.len() * 2 - 1));
    for (name, get, unit) in [
        (
            "requests/s, median of rounds (range)",
            (|m: &Measured| m.rates.clone()) as fn(&Measured) -> Vec<f64>,
            "/s",
        ),
        (
            "apiserver CPU per request, median of rounds (range)",
            |m: &Measured| m.cpu_us.clone(),
            " µs",
        ),
    ] {
        let mut line = format!("| {name} |");
        for (i, m) in measured.iter().enumerate() {
            let values = get(m);
            line.push_str(&format!(
                " {:.0}{unit} ({}) |",
                median(&values),
                spread(&values)
            ));
            if i > 0 {
                line.push_str(&format!(
                    " {:.2}× |",
                    median(&values) / median(&get(base)).max(f64::MIN_POSITIVE)
                ));
            }
        }
        println!("{line}");
    }
    // Per round, each workload's rate against the baseline of the same round.
    for (i, m) in measured.iter().enumerate().skip(1) {
        let ratios: Vec<String> = m
            .rates
            .iter()
            .zip(&base.rates)
            .map(|(r, b)| format!("{:.2}", r / b))
            .collect();
        println!(
            "{} ÷ baseline requests/s per round: {}",
            labels[i],
            ratios.join(", ")
        );
    }
    // The users' denied share is answered without reading the store, the admin's is
    // not: the allowed requests are the same work in every workload.
    let allowed: Vec<Vec<Duration>> = measured
        .iter()
        .map(|m| {
            m.latencies
                .iter()
                .filter(|(op, _)| !op.denied())
                .flat_map(|(_, values)| values.iter().copied())
                .collect()
        })
        .collect();
    let mut rows: Vec<(&str, Vec<&[Duration]>)> = vec![
        (
            "all requests",
            measured.iter().map(|m| m.all.as_slice()).collect(),
        ),
        (
            "allowed requests (80 %; the same work in every workload)",
            allowed.iter().map(Vec::as_slice).collect(),
        ),
    ];
    for op in Op::ALL {
        rows.push((
            op.label(),
            measured
                .iter()
                .map(|m| m.latencies.get(&op).map(Vec::as_slice).unwrap_or_default())
                .collect(),
        ));
    }
    print_ratio_table(&labels, &rows);
    let p90 = |values: &[Duration]| {
        let mut sorted = values.to_vec();
        sorted.sort();
        ms(percentile(&sorted, 0.9))
    };
    println!();
    for (label, m) in labels.iter().zip(&measured) {
        println!("{label}: all requests p90 {}", p90(&m.all));
    }
    println!();
    println!("| apiserver | without the policy | with the policy | difference |");
    println!("|---|---|---|---|");
    println!(
        "| RSS after a restart (idle) | {rss_plain:.1} MiB | {rss_policy:.1} MiB | {:+.1} MiB |",
        rss_policy - rss_plain
    );
    println!(
        "| spawn → READY (waits for the RBAC cache) | {} | {} | {:+.1} ms |",
        ms(ready_plain),
        ms(ready_policy),
        (ready_policy.as_secs_f64() - ready_plain.as_secs_f64()) * 1e3
    );
    println!(
        "| spawn → fedingress_authorization_synced 1 in /metrics | {} | {} | {:+.1} ms |",
        ms(synced_plain),
        ms(synced_policy),
        (synced_policy.as_secs_f64() - synced_plain.as_secs_f64()) * 1e3
    );
    println!(
        "(empty store: READY {}, synced {}; RSS after the workloads {rss_after:.1} MiB; load averages while measuring: {})",
        ms(ready_empty),
        ms(synced_empty),
        loads.join(" ")
    );
    Ok(())
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// What every round of every workload shares.
#[derive(Clone)]
struct Mix {
    client: reqwest::Client,
    api: String,
    tenancy: Arc<Tenancy>,
    /// Per workload ([`Workload::short`]), the token of each user (index = user).
    tokens: Arc<BTreeMap<&'static str, Vec<String>>>,
    ops: usize,
    clients: usize,
}

impl Mix {
    /// One round of one workload: `ops` requests of the mix from `clients` tasks; each
    /// request's op, status and latency.
    async fn round(
        &self,
        workload: Workload,
        round: usize,
    ) -> anyhow::Result<Vec<(Op, u16, Duration)>> {
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..self.clients {
            let (mix, next) = (self.clone(), next.clone());
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= mix.ops {
                        return Ok::<_, anyhow::Error>(out);
                    }
                    out.push(mix.one(workload, round, i).await?);
                }
            }));
        }
        let mut all = Vec::with_capacity(self.ops);
        for task in tasks {
            all.extend(task.await??);
        }
        Ok(all)
    }

    /// Request `i` of the mix.
    async fn one(
        &self,
        workload: Workload,
        round: usize,
        i: usize,
    ) -> anyhow::Result<(Op, u16, Duration)> {
        let (client, api, tenancy) = (&self.client, &self.api, &self.tenancy);
        let op = Op::of(i);
        // Users in turn, so every user sends every kind of request.
        let u = (i / 20 + i * 7) % tenancy.users.len();
        let user = &tenancy.users[u];
        let pick = |list: &[usize]| ingress_path(&tenancy.namespaces[list[(i / 20) % list.len()]]);
        let request = match op {
            Op::Create => client
                .post(format!("{api}{}", pick(&user.owned)))
                .json(&ingress(&format!("{}-r{round}-{i}", workload.short()))),
            Op::Get => client.get(format!("{api}{}/seed", pick(&user.owned))),
            Op::List => client.get(format!("{api}{}", pick(&user.owned))),
            Op::Watch => client.get(format!(
                "{api}{}?watch=true&timeoutSeconds=1",
                pick(&user.owned)
            )),
            Op::NamedGet => client.get(format!("{api}{}/seed", pick(&user.named))),
            Op::DeniedGet => client.get(format!("{api}{}/seed", pick(&user.foreign))),
            Op::DeniedList => client.get(format!("{api}{}", pick(&user.foreign))),
            Op::DeniedName => client.get(format!("{api}{}/other", pick(&user.named))),
        };
        let token = &self.tokens[workload.short()][u];
        let started = Instant::now();
        let response = request.bearer_auth(token).send().await?;
        let status = response.status().as_u16();
        if op != Op::Watch {
            // The whole answer, as a client reads it.
            response.bytes().await?;
        }
        Ok((op, status, started.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            namespaces: 1_000,
            bindings: 10_000,
            users: 200,
            rounds: 1,
            ops: 20,
            oidc: false,
        }
    }

    #[test]
    fn every_user_has_each_kind_of_namespace() {
        let tenancy = Tenancy::new(&options()).unwrap();
        assert_eq!(tenancy.per_namespace, 10);
        for user in &tenancy.users {
            assert_eq!(user.owned.len(), 5, "{}", user.name);
            assert!(!user.named.is_empty() && !user.foreign.is_empty());
            for n in &user.foreign {
                assert!(!user.owned.contains(n) && !user.named.contains(n));
            }
        }
        let (_, binding) = tenancy.binding(7, 0);
        assert_eq!(binding["subjects"][0]["name"], "u007@tenants.test");
        assert_eq!(binding["roleRef"]["name"], "edit");
    }

    #[test]
    fn the_mix_has_a_fifth_denied() {
        let denied = (0..20).filter(|i| Op::of(*i).denied()).count();
        assert_eq!(denied, 4);
    }
}
