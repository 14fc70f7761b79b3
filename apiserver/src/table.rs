//! Server-side printing: `meta.k8s.io/v1` Table responses, the columns `kubectl get` shows.

use fedingress_api::event::Event;
use fedingress_api::rbac;
use fedingress_api::{
    Cluster, FederatedIngress, IngressClaim, IngressPool, ObjectMeta, Resource, Time,
};
use serde_json::{Value, json};

/// What `includeObject` asked to embed in each row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(value: Option<&str>) -> Result<Self, crate::status::ApiError> {
        match value {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(crate::status::ApiError::bad_request(format!(
                "includeObject: Unsupported value: \"{other}\": supported values: \"None\", \"Metadata\", \"Object\""
            ))),
        }
    }
}

/// A kind's columns and cells.
pub trait Printable: Resource {
    /// (name, type, description) of each column after NAME, before AGE.
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)];
    /// Whether NAME leads and AGE ends the columns (Events have their own).
    const NAME_AND_AGE: bool = true;
    /// Columns `kubectl get` shows only with `-o wide` (priority 1). With NAME and AGE,
    /// they follow AGE, as kube prints a Pod's IP and NODE.
    const WIDE: &'static [&'static str] = &[];
    fn cells(&self, now: &Time) -> Vec<Value>;
}

impl Printable for Event {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        ("Last Seen", "string", "Time since the event last happened"),
        ("Type", "string", "Normal or Warning"),
        ("Reason", "string", "Why the event happened"),
        ("Object", "string", "The object the event is about"),
        ("Message", "string", "What happened"),
    ];
    const NAME_AND_AGE: bool = false;

    fn cells(&self, now: &Time) -> Vec<Value> {
        let last = self
            .last_timestamp
            .or(self.first_timestamp)
            .or(self.metadata.creation_timestamp);
        let seen = last
            .map(|t| human_duration((now.0 - t.0).num_seconds()))
            .unwrap_or_else(|| "<unknown>".into());
        let o = &self.involved_object;
        vec![
            json!(seen),
            json!(self.type_),
            json!(self.reason),
            json!(format!("{}/{}", o.kind.to_ascii_lowercase(), o.name)),
            json!(self.message),
        ]
    }
}

impl Printable for FederatedIngress {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        ("Hosts", "string", "Hosts the rules serve, or the DNS name"),
        ("Ports", "string", "Listeners as port/protocol"),
        ("Clusters", "string", "Clusters the ingress is placed on"),
        (
            "Ready",
            "string",
            "Placed clusters that are applied and healthy",
        ),
    ];

    fn cells(&self, _now: &Time) -> Vec<Value> {
        let mut hosts = self.hosts();
        if hosts.is_empty()
            && let Some(name) = self.spec.traffic.dns_name.clone()
        {
            hosts.push(name);
        }
        let clusters = self
            .status
            .as_ref()
            .map(|s| s.clusters.as_slice())
            .unwrap_or_default();
        let ready = clusters
            .iter()
            .filter(|c| c.healthy && c.phase == fedingress_api::ingress::ClusterPhase::Applied)
            .count();
        let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        vec![
            json!(join_or_none(&hosts)),
            json!(join_or_none(&self.listener_summary())),
            json!(if names.is_empty() {
                "<none>".to_string()
            } else {
                names.join(",")
            }),
            json!(format!("{ready}/{}", clusters.len())),
        ]
    }
}

impl Printable for Cluster {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        ("Region", "string", "Region of the cluster"),
        (
            "Connected",
            "string",
            "Whether the cluster's agent is connected",
        ),
        ("Ready", "string", "Whether the cluster can take traffic"),
    ];

    fn cells(&self, _now: &Time) -> Vec<Value> {
        let status = self.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.as_str())
            .unwrap_or("Unknown");
        let ready = if self.spec.unschedulable {
            format!("{ready},SchedulingDisabled")
        } else {
            ready.to_string()
        };
        vec![
            json!(self.spec.region),
            json!(if status.connected { "True" } else { "False" }),
            json!(ready),
        ]
    }
}

impl Printable for IngressPool {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        (
            "Cluster",
            "string",
            "The Cluster whose members serve in the pool",
        ),
        ("VIPs", "string", "The VIPs allocated to the pool"),
        ("Ready", "string", "Whether a ready member holds the VIPs"),
        ("Members", "string", "Ready members / members in the pool"),
        (
            "Shares",
            "integer",
            "Shares (ingress, cluster) bound to the pool",
        ),
        (
            "Utilization",
            "string",
            "Load against capacity (the highest ratio), as a percentage",
        ),
        (
            "VIP Holder",
            "string",
            "The member holding the VIPs (VRRP master)",
        ),
        ("CIDR", "string", "The CIDR the VIPs come from"),
        ("VRID", "string", "The VRRP virtual router id"),
        (
            "Selector",
            "string",
            "Which members of the cluster are in the pool",
        ),
    ];
    const WIDE: &'static [&'static str] = &["VIP Holder", "CIDR", "VRID", "Selector"];

    fn cells(&self, _now: &Time) -> Vec<Value> {
        let status = self.status.clone().unwrap_or_default();
        let vips: Vec<String> = status.vips.iter().map(ToString::to_string).collect();
        let utilization = status.load.map_or_else(
            || "<unknown>".to_string(),
            |load| format!("{:.0}%", load.utilization * 100.0),
        );
        let cidr = status
            .vip_cidr
            .clone()
            .or_else(|| self.spec.vip_cidr.clone())
            .unwrap_or_else(|| "<none>".into());
        let vrid = status
            .virtual_router_id
            .or(self.spec.virtual_router_id)
            .map_or_else(|| "<none>".into(), |id| id.to_string());
        let selector = self
            .spec
            .member_selector
            .as_ref()
            .map(|s| s.to_requirements().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "<all>".into());
        vec![
            json!(self.spec.cluster),
            json!(join_or_none(&vips)),
            json!(condition(
                &status.conditions,
                fedingress_api::pool::CONDITION_READY
            )),
            json!(format!("{}/{}", status.ready_members, status.member_count)),
            json!(status.bound_shares),
            json!(utilization),
            json!(status.vip_holder.unwrap_or_else(|| "<none>".into())),
            json!(cidr),
            json!(vrid),
            json!(selector),
        ]
    }
}

impl Printable for IngressClaim {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = &[
        ("Phase", "string", "Pending, Bound or Released"),
        (
            "Ingresses",
            "string",
            "The FederatedIngresses the claim names",
        ),
        ("Pools", "string", "The bound pools as cluster/pool"),
        (
            "Reclaim",
            "string",
            "The reclaim policy: Retain, Recycle or Delete",
        ),
        ("Replicas", "integer", "Members of each provisioned pool"),
        ("Pending", "string", "Placed clusters without a pool yet"),
    ];
    const WIDE: &'static [&'static str] = &["Replicas", "Pending"];

    fn cells(&self, _now: &Time) -> Vec<Value> {
        let status = self.status.clone().unwrap_or_default();
        let (bound, pending): (Vec<_>, Vec<_>) =
            status.clusters.iter().partition(|c| c.pool.is_some());
        let pools: Vec<String> = bound
            .iter()
            .map(|c| format!("{}/{}", c.cluster, c.pool.as_deref().unwrap_or_default()))
            .collect();
        let pending: Vec<String> = pending.iter().map(|c| c.cluster.clone()).collect();
        vec![
            json!(status.phase.as_str()),
            json!(join_or_none(&self.spec.ingresses)),
            json!(join_or_none(&pools)),
            json!(self.spec.reclaim_policy.as_str()),
            json!(self.replicas()),
            json!(join_or_none(&pending)),
        ]
    }
}

/// The status of condition `type_`, `Unknown` when absent.
fn condition(conditions: &[fedingress_api::Condition], type_: &str) -> String {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map_or_else(|| "Unknown".to_string(), |c| c.status.as_str().to_string())
}

/// Roles and ClusterRoles: NAME and CREATED AT, as kube-apiserver prints them.
const ROLE_COLUMNS: &[(&str, &str, &str)] = &[
    ("Name", "string", "Name must be unique within a namespace."),
    ("Created At", "date", "Time when the role was created."),
];

fn role_cells(meta: &ObjectMeta) -> Vec<Value> {
    vec![
        json!(meta.name.clone().unwrap_or_default()),
        json!(
            meta.creation_timestamp
                .map(|t| t.0.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default()
        ),
    ]
}

impl Printable for rbac::Role {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = ROLE_COLUMNS;
    const NAME_AND_AGE: bool = false;
    fn cells(&self, _now: &Time) -> Vec<Value> {
        role_cells(&self.metadata)
    }
}

impl Printable for rbac::ClusterRole {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = ROLE_COLUMNS;
    const NAME_AND_AGE: bool = false;
    fn cells(&self, _now: &Time) -> Vec<Value> {
        role_cells(&self.metadata)
    }
}

/// Bindings: NAME, ROLE (`Kind/name`), AGE, then who (shown with `-o wide`), as kube
/// prints them.
const BINDING_COLUMNS: &[(&str, &str, &str)] = &[
    ("Name", "string", "Name must be unique within a namespace."),
    ("Role", "string", "The role granted, as Kind/name."),
    ("Age", "date", "Time since the object was created."),
    ("Users", "string", "Users granted the role."),
    ("Groups", "string", "Groups granted the role."),
    (
        "ServiceAccounts",
        "string",
        "Service accounts granted the role, as namespace/name.",
    ),
];

const BINDING_WIDE: &[&str] = &["Users", "Groups", "ServiceAccounts"];

fn binding_cells(
    meta: &ObjectMeta,
    now: &Time,
    role_ref: &rbac::RoleRef,
    subjects: &[rbac::Subject],
) -> Vec<Value> {
    let of = |kind: &str| {
        subjects
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| {
                if kind == "ServiceAccount" {
                    format!("{}/{}", s.namespace, s.name)
                } else {
                    s.name.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        json!(meta.name.clone().unwrap_or_default()),
        json!(format!("{}/{}", role_ref.kind, role_ref.name)),
        json!(age(meta, now)),
        json!(of("User")),
        json!(of("Group")),
        json!(of("ServiceAccount")),
    ]
}

impl Printable for rbac::RoleBinding {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = BINDING_COLUMNS;
    const NAME_AND_AGE: bool = false;
    const WIDE: &'static [&'static str] = BINDING_WIDE;
    fn cells(&self, now: &Time) -> Vec<Value> {
        binding_cells(&self.metadata, now, &self.role_ref, &self.subjects)
    }
}

impl Printable for rbac::ClusterRoleBinding {
    const COLUMNS: &'static [(&'static str, &'static str, &'static str)] = BINDING_COLUMNS;
    const NAME_AND_AGE: bool = false;
    const WIDE: &'static [&'static str] = BINDING_WIDE;
    fn cells(&self, now: &Time) -> Vec<Value> {
        binding_cells(&self.metadata, now, &self.role_ref, &self.subjects)
    }
}

fn join_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "<none>".into()
    } else {
        items.join(",")
    }
}

fn column_definitions<R: Printable>() -> Value {
    if !R::NAME_AND_AGE {
        return Value::Array(
            R::COLUMNS
                .iter()
                .map(|(name, kind, description)| json!({"name": name, "type": kind, "format": if *name == "Name" { "name" } else { "" }, "priority": u8::from(R::WIDE.contains(name)), "description": description}))
                .collect(),
        );
    }
    let mut columns = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace."
    })];
    let column = |(name, kind, description): &(&str, &str, &str)| json!({"name": name, "type": kind, "format": "", "priority": u8::from(R::WIDE.contains(name)), "description": description});
    let (wide, narrow): (Vec<_>, Vec<_>) = R::COLUMNS
        .iter()
        .partition(|(name, _, _)| R::WIDE.contains(name));
    columns.extend(narrow.into_iter().map(column));
    columns.push(json!({
        "name": "Age", "type": "date", "format": "", "priority": 0,
        "description": "Time since the object was created."
    }));
    columns.extend(wide.into_iter().map(column));
    Value::Array(columns)
}

fn row<R: Printable>(object: &R, include: IncludeObject, now: &Time) -> Value {
    let meta = object.metadata();
    let cells = if R::NAME_AND_AGE {
        // NAME, the narrow columns, AGE, then the wide ones (as column_definitions).
        let (wide, narrow): (Vec<_>, Vec<_>) = R::COLUMNS
            .iter()
            .zip(object.cells(now))
            .partition(|((name, _, _), _)| R::WIDE.contains(name));
        let mut cells = vec![json!(meta.name.clone().unwrap_or_default())];
        cells.extend(narrow.into_iter().map(|(_, cell)| cell));
        cells.push(json!(age(meta, now)));
        cells.extend(wide.into_iter().map(|(_, cell)| cell));
        cells
    } else {
        object.cells(now)
    };
    let mut row = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": meta,
            });
        }
        IncludeObject::Object => row["object"] = serde_json::to_value(object).unwrap_or_default(),
    }
    row
}

/// A Table of `objects`.
pub fn table<R: Printable>(
    objects: &[R],
    include: IncludeObject,
    now: &Time,
    list_meta: Value,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_definitions::<R>(),
        "rows": objects.iter().map(|o| row(o, include, now)).collect::<Vec<_>>(),
    })
}

fn age(meta: &ObjectMeta, now: &Time) -> String {
    match &meta.creation_timestamp {
        Some(created) => human_duration((now.0 - created.0).num_seconds()),
        None => "<unknown>".into(),
    }
}

/// kubectl's short human durations: 45s, 3m10s, 5h, 3d4h, 400d.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    if s < 120 {
        return format!("{s}s");
    }
    let m = s / 60;
    if m < 10 {
        let rest = s % 60;
        return if rest == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rest}s")
        };
    }
    if m < 180 {
        return format!("{m}m");
    }
    let h = s / 3600;
    if h < 8 {
        let rest = m % 60;
        return if rest == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rest}m")
        };
    }
    if h < 48 {
        return format!("{h}h");
    }
    let d = h / 24;
    if d < 8 {
        let rest = h % 24;
        return if rest == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rest}h")
        };
    }
    if d < 365 * 2 {
        return format!("{d}d");
    }
    let y = d / 365;
    if y < 8 {
        let rest = d % 365;
        return if rest == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{rest}d")
        };
    }
    format!("{y}y")
}

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn durations_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(190), "3m10s");
        assert_eq!(human_duration(3600 * 5), "5h");
        assert_eq!(human_duration(3600 * 30), "30h");
        assert_eq!(human_duration(86400 * 3 + 3600 * 4), "3d4h");
        assert_eq!(human_duration(86400 * 400), "400d");
    }
}
