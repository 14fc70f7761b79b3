//! The resource types the fake API server knows (plural → kind, group, version, scope)
//! and the parsing of request paths into a resource, namespace, name and subresource.

/// One resource type, as API discovery would describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    pub version: String,
    /// Lower-case plural used in paths and RBAC rules, e.g. `endpointslices`.
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Whether the type has a `status` subresource: writes to the main resource then keep
    /// the stored status and writes to `/status` change only the status.
    pub has_status: bool,
}

impl ResourceType {
    pub fn new(
        api_version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        has_status: bool,
    ) -> Self {
        let (group, version) = split_api_version(api_version);
        Self {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            kind: kind.to_string(),
            namespaced,
            has_status,
        }
    }

    /// `v1` or `networking.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `services` or `leases.coordination.k8s.io`, as kube-apiserver names a resource in
    /// error messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `name` names this type: its plural, `plural.group`, or its kind
    /// (case-insensitive).
    pub fn is_named(&self, name: &str) -> bool {
        name == self.plural
            || name == self.qualified_plural()
            || name.eq_ignore_ascii_case(&self.kind)
    }
}

/// `networking.k8s.io/v1` → (`networking.k8s.io`, `v1`); `v1` → (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

/// The built-in table: what the cluster agent reads and writes, and a few neighbours.
pub fn builtin() -> Vec<ResourceType> {
    let table: &[(&str, &str, &str, bool, bool)] = &[
        ("v1", "Service", "services", true, true),
        ("v1", "ConfigMap", "configmaps", true, false),
        ("v1", "Event", "events", true, false),
        ("v1", "Namespace", "namespaces", false, true),
        ("v1", "Secret", "secrets", true, false),
        ("v1", "Endpoints", "endpoints", true, false),
        ("v1", "Pod", "pods", true, true),
        ("v1", "Node", "nodes", false, true),
        ("v1", "ServiceAccount", "serviceaccounts", true, false),
        ("networking.k8s.io/v1", "Ingress", "ingresses", true, true),
        (
            "networking.k8s.io/v1",
            "IngressClass",
            "ingressclasses",
            false,
            false,
        ),
        (
            "discovery.k8s.io/v1",
            "EndpointSlice",
            "endpointslices",
            true,
            false,
        ),
        ("coordination.k8s.io/v1", "Lease", "leases", true, false),
        ("apps/v1", "Deployment", "deployments", true, true),
        (
            "policy/v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
        ),
    ];
    table
        .iter()
        .map(|&(api_version, kind, plural, namespaced, has_status)| {
            ResourceType::new(api_version, kind, plural, namespaced, has_status)
        })
        .collect()
}

/// A request path resolved against the table.
#[derive(Clone, Debug)]
pub struct ApiPath {
    pub resource: ResourceType,
    /// `None` for cluster-scoped types and for lists/watches across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// Only `status` is served.
    pub subresource: Option<String>,
}

impl ApiPath {
    /// Resolves `/api/v1/...` and `/apis/{group}/{version}/...`; `None` when the path
    /// names no known resource (kube-apiserver answers 404 then).
    pub fn parse(path: &str, table: &[ResourceType]) -> Option<Self> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return None,
        };
        let find = |plural: &str| {
            table
                .iter()
                .find(|r| r.group == group && r.version == version && r.plural == plural)
        };
        if rest.iter().any(|s| s.is_empty()) {
            return None;
        }
        let (namespace, plural, tail) = match rest {
            ["namespaces", namespace, plural, tail @ ..]
                if find(plural).is_some_and(|r| r.namespaced) =>
            {
                (Some((*namespace).to_string()), *plural, tail)
            }
            [plural, tail @ ..] => (None, *plural, tail),
            [] => return None,
        };
        let resource = find(plural)?.clone();
        let (name, subresource) = match tail {
            [] => (None, None),
            [name] => (Some((*name).to_string()), None),
            [name, "status"] => (Some((*name).to_string()), Some("status".to_string())),
            _ => return None,
        };
        // A namespaced type's single object needs its namespace; a cluster-scoped type
        // never has one.
        if resource.namespaced && namespace.is_none() && name.is_some() {
            return None;
        }
        if subresource.is_some() && !resource.has_status {
            return None;
        }
        Some(Self {
            resource,
            namespace,
            name,
            subresource,
        })
    }

    /// The RBAC resource: `services` or `services/status`.
    pub fn rbac_resource(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource.plural),
            None => self.resource.plural.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str) -> Option<ApiPath> {
        ApiPath::parse(path, &builtin())
    }

    #[test]
    fn core_and_grouped_paths() {
        let p = parse("/api/v1/namespaces/default/services/web").unwrap();
        assert_eq!(p.resource.kind, "Service");
        assert_eq!(p.namespace.as_deref(), Some("default"));
        assert_eq!(p.name.as_deref(), Some("web"));
        let p = parse("/apis/coordination.k8s.io/v1/namespaces/x/leases/l/").unwrap();
        assert_eq!(p.resource.api_version(), "coordination.k8s.io/v1");
        assert_eq!(p.name.as_deref(), Some("l"));
        let p = parse("/apis/networking.k8s.io/v1/ingresses").unwrap();
        assert!(p.namespace.is_none() && p.name.is_none());
        let p = parse("/api/v1/namespaces/default/services/web/status").unwrap();
        assert_eq!(p.rbac_resource(), "services/status");
    }

    #[test]
    fn namespaces_are_cluster_scoped() {
        let p = parse("/api/v1/namespaces/default").unwrap();
        assert_eq!(p.resource.kind, "Namespace");
        assert_eq!(p.name.as_deref(), Some("default"));
        let p = parse("/api/v1/namespaces/default/status").unwrap();
        assert_eq!(p.resource.kind, "Namespace");
        assert_eq!(p.subresource.as_deref(), Some("status"));
    }

    #[test]
    fn unknown_paths() {
        assert!(parse("/api/v1/widgets").is_none());
        assert!(parse("/api/v1/ingresses").is_none(), "wrong group");
        assert!(
            parse("/api/v1/services/web").is_none(),
            "namespaced name without namespace"
        );
        assert!(parse("/api/v1/namespaces/d/configmaps/c/status").is_none());
        assert!(parse("/api/v1/namespaces/d/services/web/scale").is_none());
        assert!(parse("/healthz").is_none());
    }
}
