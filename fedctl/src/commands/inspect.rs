//! Views of the federation: `get clusters|ingresses`, `describe cluster|ingress NAME`
//! and `status`. Fetching is separate from rendering: the `*_table`/`describe_*`
//! functions are pure (objects and `now` in, text out) and pinned by golden tests.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use fedingress_api::cluster::{MemberStatus, SpeakerStatus};
use fedingress_api::event::Event;
use fedingress_api::ingress::{IngressRule, Protocol, StrategyType};
use fedingress_api::{
    Cluster, Condition, FederatedIngress, FederatedIngressSpec, FederatedIngressStatus,
};
use serde_json::{Value, json};

use crate::Ctx;
use crate::cli::{DescribeArgs, GetArgs, Kind, Output};
use crate::client::{Api, cluster_path, decode, events_path, ingress_path, token_path};
use crate::commands::{address_texts, cluster_state, labels_text};
use crate::render::{Table, age, list_or_none, print_value, rate};

pub async fn get(ctx: &Ctx, args: GetArgs) -> anyhow::Result<()> {
    let api = ctx.api()?;
    let mut query: Vec<(&str, &str)> = Vec::new();
    if let Some(selector) = &args.selector {
        query.push(("labelSelector", selector));
    }
    let now = Utc::now();
    match args.kind {
        Kind::Clusters => {
            let value = api.get(&cluster_path(args.name.as_deref()), &query).await?;
            let clusters: Vec<Cluster> = items(&value, args.name.is_some())?;
            match ctx.global.output {
                Output::Table => print!("{}", clusters_table(&clusters, now)),
                output => print_value(output, &value)?,
            }
        }
        Kind::Ingresses => {
            let namespace = ctx.namespace();
            let path = if args.all_namespaces && args.name.is_none() {
                ingress_path(None, None)
            } else {
                ingress_path(Some(&namespace), args.name.as_deref())
            };
            let value = api.get(&path, &query).await?;
            let ingresses: Vec<FederatedIngress> = items(&value, args.name.is_some())?;
            match ctx.global.output {
                Output::Table => {
                    print!("{}", ingresses_table(&ingresses, args.all_namespaces, now))
                }
                output => print_value(output, &value)?,
            }
        }
    }
    Ok(())
}

/// One object or a list's items, decoded.
fn items<T: serde::de::DeserializeOwned>(value: &Value, single: bool) -> anyhow::Result<Vec<T>> {
    if single {
        return Ok(vec![decode(value, "object")?]);
    }
    Ok(value["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| decode(item, "list item"))
        .collect::<Result<_, _>>()?)
}

fn created(meta: &fedingress_api::ObjectMeta) -> Option<DateTime<Utc>> {
    meta.creation_timestamp.map(|t| t.0)
}

fn load_cells(cluster: &Cluster) -> (String, String) {
    match cluster.status.as_ref().and_then(|s| s.load) {
        Some(load) if cluster.is_connected() => {
            (rate(load.rps), load.active_connections.to_string())
        }
        _ => ("-".into(), "-".into()),
    }
}

/// `get clusters`: NAME, REGION, PROVIDER, STATUS, AGENT, ADDRESSES, RPS, CONNS, AGE.
pub fn clusters_table(clusters: &[Cluster], now: DateTime<Utc>) -> String {
    if clusters.is_empty() {
        return "No clusters.\n".into();
    }
    let mut table = Table::new(&[
        "NAME",
        "REGION",
        "PROVIDER",
        "STATUS",
        "AGENT",
        "ADDRESSES",
        "RPS",
        "CONNS",
        "AGE",
    ]);
    for cluster in clusters {
        let status = cluster.status.clone().unwrap_or_default();
        let agent = match (&status.agent_version, status.driver) {
            (Some(version), Some(driver)) if status.connected => format!("{version}/{driver}"),
            _ => "-".into(),
        };
        let (rps, conns) = load_cells(cluster);
        table.row(vec![
            cluster.name().to_string(),
            cluster.spec.region.clone(),
            cluster.spec.provider.to_string(),
            cluster_state(cluster).to_string(),
            agent,
            list_or_none(&address_texts(&status.addresses)),
            rps,
            conns,
            age(created(&cluster.metadata), now),
        ]);
    }
    table.render()
}

/// `(healthy, placed)` clusters of an ingress.
fn readiness(ingress: &FederatedIngress) -> (usize, usize) {
    let clusters = ingress
        .status
        .as_ref()
        .map(|s| s.clusters.as_slice())
        .unwrap_or_default();
    let healthy = clusters
        .iter()
        .filter(|c| c.healthy && c.phase.as_str() == "Applied")
        .count();
    (healthy, clusters.len())
}

fn placed_names(ingress: &FederatedIngress) -> Vec<String> {
    ingress
        .status
        .as_ref()
        .map(|s| s.clusters.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// `get ingresses`: [NAMESPACE,] NAME, DNS NAME, PORTS, STRATEGY, CLUSTERS, READY, AGE.
pub fn ingresses_table(
    ingresses: &[FederatedIngress],
    with_namespace: bool,
    now: DateTime<Utc>,
) -> String {
    if ingresses.is_empty() {
        return "No ingresses.\n".into();
    }
    let mut headers = vec![
        "NAME", "DNS NAME", "PORTS", "STRATEGY", "CLUSTERS", "READY", "AGE",
    ];
    if with_namespace {
        headers.insert(0, "NAMESPACE");
    }
    let mut table = Table::new(&headers);
    for ingress in ingresses {
        let (healthy, placed) = readiness(ingress);
        let mut row = vec![
            ingress.metadata.name_str().to_string(),
            ingress
                .spec
                .effective_dns_name()
                .unwrap_or_else(|| "<none>".into()),
            list_or_none(&ingress.listener_summary()),
            ingress.spec.traffic.strategy.type_.to_string(),
            list_or_none(&placed_names(ingress)),
            format!("{healthy}/{placed}"),
            age(created(&ingress.metadata), now),
        ];
        if with_namespace {
            row.insert(0, ingress.metadata.namespace_str().to_string());
        }
        table.row(row);
    }
    table.render()
}

pub async fn describe(ctx: &Ctx, args: DescribeArgs) -> anyhow::Result<()> {
    let api = ctx.api()?;
    let now = Utc::now();
    match args.kind {
        Kind::Clusters => {
            let (cluster, value) = api
                .get_as::<Cluster>(&cluster_path(Some(&args.name)), &[])
                .await?;
            let ingresses = all_ingresses(&api).await?;
            let tokens = api.get(&token_path(&args.name, None), &[]).await?;
            match ctx.global.output {
                Output::Table => print!("{}", describe_cluster(&cluster, &ingresses, &tokens, now)),
                output => print_value(
                    output,
                    &json!({
                        "cluster": value,
                        "ingresses": ingresses_on(&ingresses, &args.name),
                        "tokens": tokens["items"],
                    }),
                )?,
            }
        }
        Kind::Ingresses => {
            let namespace = ctx.namespace();
            let (ingress, value) = api
                .get_as::<FederatedIngress>(&ingress_path(Some(&namespace), Some(&args.name)), &[])
                .await?;
            let clusters: Vec<Cluster> = items(&api.get(&cluster_path(None), &[]).await?, false)?;
            let selector = format!(
                "involvedObject.kind=FederatedIngress,involvedObject.name={}",
                args.name
            );
            let events_value = api
                .get(&events_path(&namespace), &[("fieldSelector", &selector)])
                .await?;
            let events: Vec<Event> = items(&events_value, false)?;
            match ctx.global.output {
                Output::Table => print!("{}", describe_ingress(&ingress, &clusters, &events, now)),
                output => print_value(
                    output,
                    &json!({"ingress": value, "events": events_value["items"]}),
                )?,
            }
        }
    }
    Ok(())
}

async fn all_ingresses(api: &Api) -> anyhow::Result<Vec<FederatedIngress>> {
    items(&api.get(&ingress_path(None, None), &[]).await?, false)
}

fn ingresses_on(ingresses: &[FederatedIngress], cluster: &str) -> Vec<Value> {
    ingresses
        .iter()
        .filter_map(|i| {
            let entry = i
                .status
                .as_ref()?
                .clusters
                .iter()
                .find(|c| c.name == cluster)?;
            Some(json!({
                "ingress": format!("{}/{}", i.metadata.namespace_str(), i.metadata.name_str()),
                "phase": entry.phase,
                "healthy": entry.healthy,
                "message": entry.message,
            }))
        })
        .collect()
}

fn field(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{:<14}{value}", format!("{name}:"));
}

/// A table indented under a section title.
fn section(out: &mut String, title: &str, table: &Table, empty: &str) {
    let _ = writeln!(out, "{title}:");
    if table.is_empty() {
        let _ = writeln!(out, "  {empty}");
        return;
    }
    for line in table.render().lines() {
        let _ = writeln!(out, "  {line}");
    }
}

fn conditions_table(conditions: &[Condition], now: DateTime<Utc>) -> Table {
    let mut table = Table::new(&["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]);
    for c in conditions {
        table.row(vec![
            c.type_.clone(),
            c.status.to_string(),
            c.reason.clone(),
            c.last_transition_time
                .map(|t| age(Some(t.0), now))
                .unwrap_or_else(|| "-".into()),
            c.message.clone(),
        ]);
    }
    table
}

/// `describe cluster NAME`.
pub fn describe_cluster(
    cluster: &Cluster,
    ingresses: &[FederatedIngress],
    tokens: &Value,
    now: DateTime<Utc>,
) -> String {
    let mut out = String::new();
    let spec = &cluster.spec;
    let status = cluster.status.clone().unwrap_or_default();
    field(&mut out, "Name", cluster.name());
    field(&mut out, "Labels", labels_text(&cluster.metadata.labels));
    field(
        &mut out,
        "Region",
        match &spec.zone {
            Some(zone) => format!("{} (zone {zone})", spec.region),
            None => spec.region.clone(),
        },
    );
    if let Some(location) = spec.location {
        field(
            &mut out,
            "Location",
            format!("{}, {}", location.latitude, location.longitude),
        );
    }
    field(&mut out, "Provider", spec.provider);
    if let Some(capacity) = spec.capacity {
        let mut parts = Vec::new();
        if let Some(rps) = capacity.rps {
            parts.push(format!("{rps} rps"));
        }
        if let Some(connections) = capacity.connections {
            parts.push(format!("{connections} connections"));
        }
        field(&mut out, "Capacity", parts.join(", "));
    }
    field(
        &mut out,
        "Status",
        match cluster_state(cluster) {
            "Cordoned" => {
                "Cordoned (no new placement, out of every DNS answer; listeners keep serving)"
                    .to_string()
            }
            "Ready" => "Ready (agent connected, in routing)".to_string(),
            "Offline" => "Offline (agent missed its lease: out of routing)".to_string(),
            _ => "NotConnected (no agent has connected yet)".to_string(),
        },
    );
    let agent = match (&status.agent_version, status.driver) {
        (Some(version), Some(driver)) => format!("{version}, {driver} driver"),
        _ => "-".into(),
    };
    field(&mut out, "Agent", agent);
    if let Some(heartbeat) = status.last_heartbeat_time {
        field(
            &mut out,
            "Heartbeat",
            format!("{heartbeat} ({} ago)", age(Some(heartbeat.0), now)),
        );
    }
    field(
        &mut out,
        "Addresses",
        list_or_none(&address_texts(&status.addresses)).replace(',', ", "),
    );
    if let Some(load) = status.load {
        let mut text = format!(
            "{} rps, {} active connections",
            rate(load.rps),
            load.active_connections
        );
        // Agents before issue 24 report no cpu (it reads 0): shown only once one does.
        if load.cpu > 0.0 || load.host_cpu > 0.0 {
            text.push_str(&format!(
                ", cpu {:.2} (host {:.2})",
                load.cpu, load.host_cpu
            ));
        }
        if load.bytes_per_second > 0.0 {
            text.push_str(&format!(", {}/s", bytes_text(load.bytes_per_second)));
        }
        field(&mut out, "Load", text);
    }
    if let Some(cidr) = &spec.vip_cidr {
        field(&mut out, "VIP CIDR", cidr);
    }
    if let Some(speaker) = &status.speaker {
        field(&mut out, "BGP speaker", speaker_text(speaker));
    }
    if let Some(at) = cluster.metadata.creation_timestamp {
        field(
            &mut out,
            "Created",
            format!("{at} ({} ago)", age(Some(at.0), now)),
        );
    }
    section(
        &mut out,
        "Conditions",
        &conditions_table(&status.conditions, now),
        "<none>",
    );
    if status.member_count > 0 {
        let title = format!(
            "Members ({} of {} connected{})",
            status.ready_members,
            status.member_count,
            if usize::try_from(status.member_count).unwrap_or(0) > status.members.len() {
                format!(", the first {} listed", status.members.len())
            } else {
                String::new()
            }
        );
        section(
            &mut out,
            &title,
            &members_table(&status.members, now),
            "<none>",
        );
    }
    let mut placed = Table::new(&["INGRESS", "PHASE", "HEALTHY", "POOL", "BACKENDS", "MESSAGE"]);
    for ingress in ingresses {
        let Some(entry) = ingress
            .status
            .as_ref()
            .and_then(|s| s.clusters.iter().find(|c| c.name == cluster.name()))
        else {
            continue;
        };
        placed.row(vec![
            format!(
                "{}/{}",
                ingress.metadata.namespace_str(),
                ingress.metadata.name_str()
            ),
            entry.phase.to_string(),
            yes_no(entry.healthy),
            match (&entry.pool, &entry.previous_pool) {
                (Some(pool), Some(from)) => format!("{pool} (from {from})"),
                (Some(pool), None) => pool.clone(),
                (None, _) => "-".into(),
            },
            backends_text(&entry.backends),
            entry.message.clone(),
        ]);
    }
    section(&mut out, "Ingresses", &placed, "<none placed here>");
    let mut token_table = Table::new(&["ID", "CREATED"]);
    for item in tokens["items"].as_array().into_iter().flatten() {
        token_table.row(vec![
            item["metadata"]["name"].as_str().unwrap_or_default().into(),
            item["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .into(),
        ]);
    }
    section(&mut out, "Agent tokens", &token_table, "<none>");
    out
}

/// A cluster's members: connection, address, pools with their VRRP state, load.
fn members_table(members: &[MemberStatus], now: DateTime<Utc>) -> Table {
    let mut table = Table::new(&[
        "MEMBER",
        "CONNECTED",
        "ADDRESS",
        "POOLS",
        "LOAD",
        "AGENT",
        "HEARTBEAT",
    ]);
    for member in members {
        let pools: Vec<String> = member
            .pools
            .iter()
            .map(|pool| match member.vrrp.iter().find(|v| &v.pool == pool) {
                Some(v) => format!("{pool} ({})", v.state),
                None => pool.clone(),
            })
            .collect();
        let load = member.load.map_or_else(
            || "-".to_string(),
            |l| {
                format!(
                    "{} rps, {} conns, cpu {:.2}/{:.2}, {}/s",
                    rate(l.rps),
                    l.active_connections,
                    l.cpu,
                    l.host_cpu,
                    bytes_text(l.bytes_per_second)
                )
            },
        );
        table.row(vec![
            member.name.clone(),
            yes_no(member.connected),
            member
                .address
                .map_or_else(|| "-".to_string(), |a| a.to_string()),
            list_or_none(&pools),
            load,
            match (&member.agent_version, member.driver) {
                (Some(version), Some(driver)) => format!("{version} {driver}"),
                _ => "-".into(),
            },
            member.last_heartbeat_time.map_or_else(
                || "-".to_string(),
                |t| format!("{} ago", age(Some(t.0), now)),
            ),
        ]);
    }
    table
}

/// Bytes in B, kB, MB or GB (powers of 1000, as network rates are).
fn bytes_text(bytes: f64) -> String {
    match bytes {
        b if b >= 1e9 => format!("{:.1} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.1} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.1} kB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

/// The agent's BGP speaker in words: up with its established peers, or down and why.
fn speaker_text(speaker: &SpeakerStatus) -> String {
    if speaker.up {
        let mut text = format!(
            "up, {}/{} peers established",
            speaker.established_peers, speaker.peers
        );
        if !speaker.message.is_empty() {
            let _ = write!(text, " ({})", speaker.message);
        }
        return text;
    }
    let mut text = "down".to_string();
    if !speaker.message.is_empty() {
        let _ = write!(text, ": {}", speaker.message);
    }
    text.push_str(" (no anycast address is announced from here)");
    text
}

/// Each placed cluster's anycast routes (`status.clusters[].anycast`): one row per
/// address, or one saying the agent reports no BGP state.
fn anycast_table(status: &fedingress_api::FederatedIngressStatus) -> Table {
    let mut table = Table::new(&["CLUSTER", "ADDRESS", "ROUTE", "REASON"]);
    for entry in &status.clusters {
        if entry.anycast.is_empty() {
            table.row(vec![
                entry.name.clone(),
                "-".into(),
                "-".into(),
                "the agent reports no BGP state".into(),
            ]);
        }
        for route in &entry.anycast {
            table.row(vec![
                entry.name.clone(),
                route.address.to_string(),
                if route.announced {
                    "announced"
                } else {
                    "withdrawn"
                }
                .into(),
                // The ROUTE column already says it (agents prefix their reasons).
                route
                    .reason
                    .strip_prefix("announced: ")
                    .or_else(|| route.reason.strip_prefix("withdrawn: "))
                    .unwrap_or(&route.reason)
                    .to_owned(),
            ]);
        }
    }
    table
}

fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.into()
}

fn backends_text(backends: &[fedingress_api::ingress::BackendStatus]) -> String {
    if backends.is_empty() {
        return "-".into();
    }
    backends
        .iter()
        .map(|b| format!("{}:{} {}/{}", b.service, b.port, b.ready, b.total))
        .collect::<Vec<_>>()
        .join(", ")
}

fn rule_text(rule: &IngressRule) -> Vec<String> {
    let port = rule
        .effective_port()
        .map(|p| p.to_string())
        .unwrap_or_else(|| "-".into());
    let backend = |b: &fedingress_api::ingress::Backend| format!("{}:{}", b.service, b.port);
    let target = match rule.protocol {
        Protocol::Http | Protocol::Https => rule
            .paths
            .iter()
            .map(|p| format!("{} → {}", p.path, backend(&p.backend)))
            .collect::<Vec<_>>()
            .join(", "),
        _ => rule.backend.as_ref().map(backend).unwrap_or_default(),
    };
    vec![
        rule.protocol.to_string(),
        port,
        rule.host()
            .map(str::to_string)
            .or_else(|| rule.name.as_ref().map(|n| format!("name {n}")))
            .unwrap_or_else(|| "-".into()),
        target,
    ]
}

fn placement_text(ingress: &FederatedIngress) -> String {
    let placement = &ingress.spec.placement;
    let mut parts = Vec::new();
    if !placement.clusters.is_empty() {
        parts.push(format!("clusters {}", placement.clusters.join(", ")));
    }
    if let Some(selector) = &placement.cluster_selector {
        let mut terms: Vec<String> = selector
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        terms.extend(
            selector
                .match_expressions
                .iter()
                .map(|e| format!("{} {} ({})", e.key, e.operator, e.values.join(","))),
        );
        parts.push(format!("selector {}", terms.join(",")));
    }
    if let Some(max) = placement.max_clusters {
        parts.push(format!("at most {max}"));
    }
    if parts.is_empty() {
        "every cluster".into()
    } else {
        parts.join("; ")
    }
}

/// `describe ingress NAME`.
pub fn describe_ingress(
    ingress: &FederatedIngress,
    clusters: &[Cluster],
    events: &[Event],
    now: DateTime<Utc>,
) -> String {
    let mut out = String::new();
    let spec = &ingress.spec;
    let status = ingress.status.clone().unwrap_or_default();
    field(&mut out, "Name", ingress.metadata.name_str());
    field(&mut out, "Namespace", ingress.metadata.namespace_str());
    field(
        &mut out,
        "DNS name",
        match spec.effective_dns_name() {
            Some(name) => format!("{name} (TTL {}s)", spec.traffic.ttl),
            None => "<none>".into(),
        },
    );
    field(&mut out, "Strategy", strategy_text(spec));
    field(&mut out, "Placement", placement_text(ingress));
    if let Some(at) = ingress.metadata.creation_timestamp {
        field(
            &mut out,
            "Created",
            format!("{at} ({} ago)", age(Some(at.0), now)),
        );
    }
    let mut rules = Table::new(&["PROTOCOL", "PORT", "HOST/NAME", "BACKEND"]);
    for rule in &spec.rules {
        rules.row(rule_text(rule));
    }
    section(&mut out, "Rules", &rules, "<none>");

    section(
        &mut out,
        "Clusters",
        &placed_table(&status, clusters),
        "<not placed on any cluster>",
    );
    // Anycast: what each cluster's BGP speaker announces (the network, not DNS, picks
    // the nearest announcing site).
    if spec.traffic.strategy.type_ == StrategyType::Anycast && !status.clusters.is_empty() {
        section(&mut out, "Anycast routes", &anycast_table(&status), "");
    }
    let own = own_addresses_table(spec, &status);
    if !own.is_empty() {
        section(&mut out, "Rules on their own addresses", &own, "");
    }

    section(
        &mut out,
        "DNS answers",
        &dns_answers_table(&status),
        "<not served: see the DNSReady condition>",
    );
    dns_providers(&mut out, &status, now);
    section(
        &mut out,
        "Conditions",
        &conditions_table(&status.conditions, now),
        "<none>",
    );
    section(&mut out, "Events", &events_table(events, now), "<none>");
    out
}

/// The strategy, with its weights, anycast addresses or failover order, and what
/// happens when every cluster is unhealthy.
fn strategy_text(spec: &FederatedIngressSpec) -> String {
    let strategy = &spec.traffic.strategy;
    let mut strategy_text = strategy.type_.to_string();
    if let Some(weights) = &strategy.weights {
        let _ = write!(
            strategy_text,
            " (weights {})",
            weights
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(addresses) = &strategy.anycast_addresses
        && strategy.type_ == StrategyType::Anycast
    {
        let _ = write!(strategy_text, " (addresses {})", addresses.join(", "));
    }
    if let Some(order) = &strategy.failover_order {
        let _ = write!(
            strategy_text,
            " (order {})",
            order
                .iter()
                .map(|tier| tier.join("+"))
                .collect::<Vec<_>>()
                .join(" > ")
        );
    }
    let _ = write!(
        strategy_text,
        "; all unhealthy: {}",
        spec.traffic.when_all_unhealthy
    );
    strategy_text
}

/// The clusters the ingress is placed on: how it is doing there, and their load.
fn placed_table(status: &FederatedIngressStatus, clusters: &[Cluster]) -> Table {
    let by_name: BTreeMap<&str, &Cluster> = clusters.iter().map(|c| (c.name(), c)).collect();
    let mut placed = Table::new(&[
        "CLUSTER",
        "REGION",
        "PHASE",
        "HEALTHY",
        "ADDRESSES",
        "BACKENDS",
        "LOAD",
        "MESSAGE",
    ]);
    for entry in &status.clusters {
        let cluster = by_name.get(entry.name.as_str());
        let load = cluster
            .and_then(|c| c.status.as_ref().and_then(|s| s.load))
            .map(|l| format!("{} rps, {} conns", rate(l.rps), l.active_connections))
            .unwrap_or_else(|| "-".into());
        let mut message = entry.message.clone();
        if cluster.is_some_and(|c| c.spec.unschedulable) && !message.contains("cordon") {
            message = format!("cordoned; {message}")
                .trim_end_matches("; ")
                .to_string();
        }
        placed.row(vec![
            entry.name.clone(),
            cluster
                .map(|c| c.spec.region.clone())
                .unwrap_or_else(|| "-".into()),
            entry.phase.to_string(),
            yes_no(entry.healthy),
            list_or_none(&address_texts(&entry.addresses)),
            backends_text(&entry.backends),
            load,
            message,
        ]);
    }
    placed
}

/// Rules served apart from the cluster's addresses (e.g. UDP behind its own load
/// balancer): what their SRV records point at.
fn own_addresses_table(spec: &FederatedIngressSpec, status: &FederatedIngressStatus) -> Table {
    let mut own = Table::new(&["CLUSTER", "RULE", "ADDRESSES"]);
    for entry in &status.clusters {
        for rule in &entry.rules {
            let listener = usize::try_from(rule.rule)
                .ok()
                .and_then(|i| spec.rules.get(i))
                .map(|r| {
                    let port = r
                        .effective_port()
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "-".into());
                    format!(" ({port}/{})", r.protocol)
                })
                .unwrap_or_default();
            own.row(vec![
                entry.name.clone(),
                format!("{}{listener}", rule.rule),
                list_or_none(&address_texts(&rule.addresses)),
            ]);
        }
    }
    own
}

/// What the DNS server answers, per client scope.
fn dns_answers_table(status: &FederatedIngressStatus) -> Table {
    let mut answers = Table::new(&["CLIENTS", "NAME", "TYPE", "ANSWER"]);
    for record in status
        .dns
        .as_ref()
        .map(|d| d.records.as_slice())
        .unwrap_or_default()
    {
        answers.row(vec![
            if record.scope.is_empty() {
                "everyone".into()
            } else {
                record.scope.clone()
            },
            record.name.clone(),
            record.type_.to_string(),
            if record.values.is_empty() {
                "(no records)".into()
            } else {
                record.values.join(", ")
            },
        ]);
    }
    answers
}

/// The last 15 events, oldest first.
fn events_table(events: &[Event], now: DateTime<Utc>) -> Table {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.last_timestamp.or(e.first_timestamp));
    let skip = events.len().saturating_sub(15);
    let mut event_table = Table::new(&["LAST SEEN", "TYPE", "REASON", "MESSAGE"]);
    for event in events.into_iter().skip(skip) {
        let seen = event
            .last_timestamp
            .or(event.first_timestamp)
            .map(|t| age(Some(t.0), now))
            .unwrap_or_else(|| "-".into());
        let count = if event.count > 1 {
            format!(" (x{})", event.count)
        } else {
            String::new()
        };
        event_table.row(vec![
            seen,
            event.type_.clone(),
            event.reason.clone(),
            format!("{}{count}", event.message),
        ]);
    }
    event_table
}

/// The configured DNS providers' sync state and the records each holds for the
/// ingress (`status.dns.providers`); nothing when only the embedded server serves it.
fn dns_providers(
    out: &mut String,
    status: &fedingress_api::FederatedIngressStatus,
    now: DateTime<Utc>,
) {
    let providers = status
        .dns
        .as_ref()
        .map(|d| d.providers.as_slice())
        .unwrap_or_default();
    if providers.iter().all(|p| p.name == "embedded") {
        return;
    }
    let mut table = Table::new(&[
        "PROVIDER",
        "TYPE",
        "SYNCED",
        "SERIAL",
        "LAST SYNC",
        "MESSAGE",
    ]);
    for provider in providers {
        let mut kind = if provider.type_.is_empty() {
            "-".to_string()
        } else {
            provider.type_.clone()
        };
        if provider.dry_run {
            kind.push_str(" (dry run)");
        }
        table.row(vec![
            provider.name.clone(),
            kind,
            yes_no(provider.synced),
            provider
                .observed_serial
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            provider
                .last_sync_time
                .map(|t| format!("{} ago", age(Some(t.0), now)))
                .unwrap_or_else(|| "-".into()),
            provider.message.clone(),
        ]);
    }
    section(out, "DNS providers", &table, "");
    for provider in providers.iter().filter(|p| p.name != "embedded") {
        let mut records =
            Table::new(&["NAME", "TYPE", "SET ID", "POLICY", "VALUES", "HEALTH CHECK"]);
        for record in &provider.records {
            let dash = |s: &str| {
                if s.is_empty() {
                    "-".to_string()
                } else {
                    s.to_string()
                }
            };
            records.row(vec![
                record.name.clone(),
                record.type_.clone(),
                dash(&record.set_identifier),
                dash(&record.policy),
                dash(&record.values.join(", ")),
                dash(&record.health_check),
            ]);
        }
        section(
            out,
            &format!("Records in {} ({})", provider.name, provider.type_),
            &records,
            "<none>",
        );
    }
}

pub async fn status(ctx: &Ctx) -> anyhow::Result<()> {
    let connection = ctx.connection()?;
    let api = Api::new(&connection)?;
    let clusters: Vec<Cluster> = items(&api.get(&cluster_path(None), &[]).await?, false)?;
    let ingresses = all_ingresses(&api).await?;
    match ctx.global.output {
        Output::Table => print!(
            "{}",
            status_text(
                &format!("{} (context {})", api.server(), connection.context),
                &clusters,
                &ingresses
            )
        ),
        output => print_value(output, &status_value(api.server(), &clusters, &ingresses))?,
    }
    Ok(())
}

/// Each cluster's share of the federation's requests and new connections per second.
fn shares(clusters: &[Cluster]) -> Vec<Option<f64>> {
    let rps = |c: &Cluster| {
        c.status
            .as_ref()
            .filter(|s| s.connected)
            .and_then(|s| s.load)
            .map(|l| l.rps)
            .unwrap_or(0.0)
    };
    let total: f64 = clusters.iter().map(rps).sum();
    clusters
        .iter()
        .map(|c| (total > 0.0).then(|| rps(c) / total))
        .collect()
}

/// `(healthy, placed)` ingresses on a cluster.
fn ingress_counts(ingresses: &[FederatedIngress], cluster: &str) -> (usize, usize) {
    let mut healthy = 0;
    let mut placed = 0;
    for ingress in ingresses {
        if let Some(entry) = ingress
            .status
            .as_ref()
            .and_then(|s| s.clusters.iter().find(|c| c.name == cluster))
        {
            placed += 1;
            if entry.healthy {
                healthy += 1;
            }
        }
    }
    (healthy, placed)
}

/// `status`: the federation at a glance.
pub fn status_text(server: &str, clusters: &[Cluster], ingresses: &[FederatedIngress]) -> String {
    let mut out = String::new();
    let connected = clusters.iter().filter(|c| c.is_connected()).count();
    let cordoned = clusters.iter().filter(|c| c.spec.unschedulable).count();
    let ready = ingresses
        .iter()
        .filter(|i| {
            i.status.as_ref().is_some_and(|s| {
                condition(&s.conditions, "Ready").is_some_and(|c| c.status.as_str() == "True")
            })
        })
        .count();
    field(&mut out, "Federation", server);
    field(
        &mut out,
        "Clusters",
        format!(
            "{} ({connected} connected, {cordoned} cordoned)",
            clusters.len()
        ),
    );
    field(
        &mut out,
        "Ingresses",
        format!("{} ({ready} ready)", ingresses.len()),
    );
    let shares = shares(clusters);
    let mut table = Table::new(&[
        "CLUSTER",
        "REGION",
        "STATUS",
        "ADDRESSES",
        "INGRESSES",
        "RPS",
        "CONNS",
        "SHARE",
    ]);
    for (cluster, share) in clusters.iter().zip(shares) {
        let (healthy, placed) = ingress_counts(ingresses, cluster.name());
        let (rps, conns) = load_cells(cluster);
        table.row(vec![
            cluster.name().to_string(),
            cluster.spec.region.clone(),
            cluster_state(cluster).to_string(),
            list_or_none(&address_texts(
                cluster
                    .status
                    .as_ref()
                    .map(|s| s.addresses.as_slice())
                    .unwrap_or_default(),
            )),
            if placed == 0 {
                "-".into()
            } else {
                format!("{healthy}/{placed} healthy")
            },
            rps,
            conns,
            share
                .map(|s| format!("{:.0}%", s * 100.0))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push('\n');
    if table.is_empty() {
        out.push_str("No clusters: add one with `fedctl join`.\n");
    } else {
        out.push_str(&table.render());
    }
    let mut table = Table::new(&[
        "INGRESS",
        "DNS NAME",
        "STRATEGY",
        "READY",
        "NOT READY BECAUSE",
    ]);
    for ingress in ingresses {
        let (healthy, placed) = readiness(ingress);
        let why = ingress
            .status
            .as_ref()
            .and_then(|s| condition(&s.conditions, "Ready"))
            .filter(|c| c.status.as_str() != "True")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        table.row(vec![
            format!(
                "{}/{}",
                ingress.metadata.namespace_str(),
                ingress.metadata.name_str()
            ),
            ingress
                .spec
                .effective_dns_name()
                .unwrap_or_else(|| "<none>".into()),
            ingress.spec.traffic.strategy.type_.to_string(),
            format!("{healthy}/{placed}"),
            why,
        ]);
    }
    out.push('\n');
    if table.is_empty() {
        out.push_str("No ingresses.\n");
    } else {
        out.push_str(&table.render());
    }
    out
}

fn status_value(server: &str, clusters: &[Cluster], ingresses: &[FederatedIngress]) -> Value {
    let shares = shares(clusters);
    json!({
        "server": server,
        "clusters": clusters.iter().zip(shares).map(|(c, share)| {
            let (healthy, placed) = ingress_counts(ingresses, c.name());
            json!({
                "name": c.name(),
                "region": c.spec.region,
                "status": cluster_state(c),
                "addresses": address_texts(c.status.as_ref().map(|s| s.addresses.as_slice()).unwrap_or_default()),
                "ingresses": {"healthy": healthy, "placed": placed},
                "load": c.status.as_ref().and_then(|s| s.load),
                "share": share,
            })
        }).collect::<Vec<_>>(),
        "ingresses": ingresses.iter().map(|i| {
            let (healthy, placed) = readiness(i);
            json!({
                "name": format!("{}/{}", i.metadata.namespace_str(), i.metadata.name_str()),
                "dnsName": i.spec.effective_dns_name(),
                "strategy": i.spec.traffic.strategy.type_,
                "healthyClusters": healthy,
                "placedClusters": placed,
                "ready": i.status.as_ref().and_then(|s| condition(&s.conditions, "Ready")).is_some_and(|c| c.status.as_str() == "True"),
            })
        }).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn describe_ingress_lists_rules_on_their_own_addresses() {
        let yaml = r#"
apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {name: dns, namespace: default}
spec:
  rules:
  - {protocol: TCP, port: 53, name: dns, backend: {service: dns, port: 53}}
  - {protocol: UDP, port: 53, name: dns, backend: {service: dns, port: 53}}
  traffic: {dnsName: dns.example.com}
status:
  clusters:
  - name: eu-west
    phase: Applied
    healthy: true
    addresses: [{hostname: tcp.elb.example.com}]
    rules: [{rule: 1, addresses: [{hostname: udp.elb.example.com}]}]
  - name: us-east
    phase: Applied
    healthy: true
    addresses: [{ip: 192.0.2.2}]
"#;
        let ingress: FederatedIngress = yaml_serde::from_str(yaml).unwrap();
        let text = describe_ingress(&ingress, &[], &[], Utc::now());
        let section = text
            .split("Rules on their own addresses:")
            .nth(1)
            .unwrap_or_else(|| panic!("no section in\n{text}"));
        let row = section
            .lines()
            .find(|l| l.contains("eu-west"))
            .unwrap_or_else(|| panic!("no eu-west row in\n{text}"));
        assert!(row.contains("1 (53/UDP)"), "{row}");
        assert!(row.contains("udp.elb.example.com"), "{row}");
        assert!(!section.contains("us-east"), "{text}");
        // Nothing apart: no section.
        let mut plain = ingress.clone();
        plain.status.as_mut().unwrap().clusters[0].rules.clear();
        assert!(!describe_ingress(&plain, &[], &[], Utc::now()).contains("own addresses"));
    }

    #[test]
    fn describe_ingress_shows_each_dns_provider_and_its_records() {
        let yaml = r#"
apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {name: shop, namespace: default}
spec:
  rules: [{protocol: TCP, port: 443, backend: {service: shop, port: 443}}]
  traffic: {dnsName: shop.example.com}
status:
  dns:
    providers:
    - {name: embedded, synced: true}
    - name: aws
      type: route53
      synced: true
      observedSerial: 42
      lastSyncTime: "2026-01-01T00:00:00Z"
      records:
      - {name: shop.example.com, type: A, setIdentifier: eu-west, policy: latency eu-west-1, values: [192.0.2.1], healthCheck: hc-1}
      - {name: shop.example.com, type: A, setIdentifier: us-east, policy: latency us-east-1, values: [192.0.2.2]}
    - {name: gcp, type: clouddns, synced: false, message: "rejected: zone not found"}
"#;
        let ingress: FederatedIngress = yaml_serde::from_str(yaml).unwrap();
        let now = "2026-01-01T00:00:05Z".parse().unwrap();
        let text = describe_ingress(&ingress, &[], &[], now);
        let section = text
            .split("DNS providers:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no providers section in\n{text}"));
        let lines: Vec<&str> = section.lines().take(4).collect();
        assert!(
            lines[0].contains("PROVIDER") && lines[0].contains("SERIAL"),
            "{section}"
        );
        assert!(lines[1].trim_start().starts_with("embedded"), "{section}");
        let aws = lines[2].split_whitespace().collect::<Vec<_>>();
        assert_eq!(
            &aws[..5],
            ["aws", "route53", "yes", "42", "5s"],
            "{section}"
        );
        assert!(lines[3].contains("rejected: zone not found"), "{section}");
        let records = text
            .split("Records in aws (route53):\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no records of aws in\n{text}"));
        let row = records.lines().nth(1).unwrap();
        assert!(
            row.contains("eu-west")
                && row.contains("latency eu-west-1")
                && row.contains("192.0.2.1")
                && row.contains("hc-1"),
            "{records}"
        );
        assert!(
            text.contains("Records in gcp (clouddns):\n  <none>"),
            "{text}"
        );
        // Only the embedded server: no section.
        let mut plain = ingress.clone();
        plain
            .status
            .as_mut()
            .unwrap()
            .dns
            .as_mut()
            .unwrap()
            .providers
            .truncate(1);
        assert!(!describe_ingress(&plain, &[], &[], now).contains("DNS providers"));
    }

    #[test]
    fn describe_ingress_shows_each_clusters_anycast_routes() {
        let yaml = r#"
apiVersion: fedingress.io/v1alpha1
kind: FederatedIngress
metadata: {name: vip, namespace: default}
spec:
  rules: [{protocol: TCP, port: 7000, backend: {service: echo, port: 9000}}]
  traffic: {dnsName: vip.example.com, strategy: {type: Anycast, anycastAddresses: [192.0.2.10]}}
status:
  clusters:
  - name: eu-west
    phase: Applied
    healthy: true
    anycast: [{address: 192.0.2.10, announced: true, reason: healthy}]
  - name: us-east
    phase: Applied
    healthy: false
    anycast: [{address: 192.0.2.10, announced: false, reason: "withdrawn: backend echo:9000 has no ready endpoint"}]
  - name: ap-south
    phase: Applied
    healthy: true
"#;
        let ingress: FederatedIngress = yaml_serde::from_str(yaml).unwrap();
        let text = describe_ingress(&ingress, &[], &[], Utc::now());
        assert!(text.contains("Anycast (addresses 192.0.2.10)"), "{text}");
        let section = text
            .split("Anycast routes:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no anycast section in\n{text}"));
        let rows: Vec<Vec<&str>> = section
            .lines()
            .take(4)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["CLUSTER", "ADDRESS", "ROUTE", "REASON"]);
        assert_eq!(rows[1], ["eu-west", "192.0.2.10", "announced", "healthy"]);
        assert_eq!(
            rows[2][..4],
            ["us-east", "192.0.2.10", "withdrawn", "backend"]
        );
        assert_eq!(
            rows[3],
            [
                "ap-south", "-", "-", "the", "agent", "reports", "no", "BGP", "state"
            ]
        );
        // Other strategies: no section.
        let mut geo = ingress.clone();
        geo.spec.traffic.strategy.type_ = StrategyType::Geo;
        assert!(!describe_ingress(&geo, &[], &[], Utc::now()).contains("Anycast routes"));
    }

    #[test]
    fn describe_cluster_shows_the_bgp_speaker() {
        let yaml = r#"
apiVersion: fedingress.io/v1alpha1
kind: Cluster
metadata: {name: eu-west}
spec: {region: europe-west1, location: {latitude: 50.45, longitude: 3.82}}
status:
  connected: true
  speaker: {up: false, peers: 2, establishedPeers: 0, message: "gobgpd does not answer"}
"#;
        let mut cluster: Cluster = yaml_serde::from_str(yaml).unwrap();
        let tokens = json!({"items": []});
        let text = describe_cluster(&cluster, &[], &tokens, Utc::now());
        assert!(
            text.contains(
                "BGP speaker:  down: gobgpd does not answer (no anycast address is announced from here)\n"
            ),
            "{text}"
        );
        cluster.status.as_mut().unwrap().speaker = Some(SpeakerStatus {
            up: true,
            peers: 2,
            established_peers: 1,
            message: String::new(),
        });
        let text = describe_cluster(&cluster, &[], &tokens, Utc::now());
        assert!(
            text.contains("BGP speaker:  up, 1/2 peers established\n"),
            "{text}"
        );
        cluster.status.as_mut().unwrap().speaker = None;
        let text = describe_cluster(&cluster, &[], &tokens, Utc::now());
        assert!(!text.contains("BGP speaker"), "{text}");
    }

    #[test]
    fn describe_cluster_shows_cpu_only_when_reported() {
        let yaml = r#"
apiVersion: fedingress.io/v1alpha1
kind: Cluster
metadata: {name: eu-west}
spec: {region: europe-west1, location: {latitude: 50.45, longitude: 3.82}}
status:
  connected: true
  load: {rps: 12.5, activeConnections: 3, cpu: 0}
"#;
        let mut cluster: Cluster = yaml_serde::from_str(yaml).unwrap();
        let tokens = json!({"items": []});
        let text = describe_cluster(&cluster, &[], &tokens, Utc::now());
        let load = text
            .lines()
            .find(|l| l.starts_with("Load:"))
            .unwrap_or_else(|| panic!("no Load in\n{text}"));
        assert!(load.ends_with(" active connections"), "{load}");
        assert!(load.contains("3 active connections"), "{load}");
        assert!(!load.contains("cpu"), "{load}");
        cluster.status.as_mut().unwrap().load.as_mut().unwrap().cpu = 0.41;
        let text = describe_cluster(&cluster, &[], &tokens, Utc::now());
        assert!(
            text.contains("3 active connections, cpu 0.41 (host 0.00)\n"),
            "{text}"
        );
    }

    #[test]
    fn describe_cluster_lists_its_members_with_their_pools_and_vrrp_state() {
        let yaml = r#"
apiVersion: fedingress.io/v1alpha1
kind: Cluster
metadata: {name: eu-west}
spec: {region: europe-west1, location: {latitude: 50.45, longitude: 3.82}, vipCIDR: 10.0.0.96/28}
status:
  connected: true
  memberCount: 3
  readyMembers: 2
  members:
  - {name: host-a, connected: true, address: 10.0.0.1, pools: [gold], vrrp: [{pool: gold, state: MASTER}],
     agentVersion: 0.1.0, driver: standalone,
     load: {rps: 120, activeConnections: 40, cpu: 0.12, hostCpu: 0.3, bytesPerSecond: 2500000}}
  - {name: host-b, connected: true, address: 10.0.0.2, pools: [gold], vrrp: [{pool: gold, state: BACKUP}]}
"#;
        let cluster: Cluster = yaml_serde::from_str(yaml).unwrap();
        let text = describe_cluster(&cluster, &[], &json!({"items": []}), Utc::now());
        assert!(text.contains("VIP CIDR:"), "{text}");
        assert!(
            text.contains("Members (2 of 3 connected, the first 2 listed)"),
            "{text}"
        );
        let a = text.lines().find(|l| l.contains("host-a")).unwrap();
        assert!(
            a.contains("gold (MASTER)") && a.contains("10.0.0.1") && a.contains("2.5 MB/s"),
            "{a}"
        );
        let b = text.lines().find(|l| l.contains("host-b")).unwrap();
        assert!(b.contains("gold (BACKUP)"), "{b}");
    }
}
