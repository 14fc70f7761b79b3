//! `rbac.authorization.k8s.io/v1`: [`Role`], [`ClusterRole`], [`RoleBinding`] and
//! [`ClusterRoleBinding`], their validation, and the pure evaluation of them with
//! Kubernetes semantics ([`Policy::authorize`]), the privilege-escalation check
//! ([`covers`]) and the bootstrap roles and bindings ([`bootstrap`]).
//!
//! The shapes are kube's, so `kubectl create role/rolebinding/...` and `kubectl apply`
//! work unchanged. What is not implemented: ClusterRole aggregation (`aggregationRule`
//! is stored and shown but does not fill `rules`).

use std::collections::{BTreeMap, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{ObjectMeta, validate_object_meta};
use crate::validation::{FieldError, FieldPath};

/// The API group of the RBAC kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";
/// Its one served version.
pub const VERSION: &str = "v1";
/// `*`: every verb, group, resource or URL.
pub const ALL: &str = "*";
/// kube's annotation on bootstrap objects: `"true"` lets the server add missing rules
/// and subjects at every start; anything else leaves the object as the operator left it.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// One rule: verbs on resources (or on non-resource URLs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs this rule allows (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`, `bind`, `escalate`, ...), or `*`.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups of the resources (`""` is the core group), or `*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources (`federatedingresses`, `clusters/status`, `*/status`, `*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Names the rule is limited to; empty means every name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// Paths that are not resources (`/metrics`, `/healthz/*`); only in ClusterRoles.
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    fn resource(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Self {
        let owned = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Self {
            verbs: owned(verbs),
            api_groups: owned(groups),
            resources: owned(resources),
            ..Self::default()
        }
    }

    fn urls(verbs: &[&str], urls: &[&str]) -> Self {
        let owned = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Self {
            verbs: owned(verbs),
            non_resource_urls: owned(urls),
            ..Self::default()
        }
    }

    /// A compact form for messages, close to kube's (`{APIGroups:[...], ...}`).
    pub fn compact(&self) -> String {
        let list = |items: &[String]| {
            items
                .iter()
                .map(|i| format!("{i:?}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() || !self.resources.is_empty() {
            parts.push(format!("APIGroups:[{}]", list(&self.api_groups)));
            parts.push(format!("Resources:[{}]", list(&self.resources)));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!("ResourceNames:[{}]", list(&self.resource_names)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!(
                "NonResourceURLs:[{}]",
                list(&self.non_resource_urls)
            ));
        }
        parts.push(format!("Verbs:[{}]", list(&self.verbs)));
        format!("{{{}}}", parts.join(", "))
    }
}

/// Who a binding grants to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    #[serde(default)]
    pub kind: String,
    /// `rbac.authorization.k8s.io` for User and Group (the default), `""` for
    /// ServiceAccount.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The user, group or service account name.
    #[serde(default)]
    pub name: String,
    /// The service account's namespace (defaults to the RoleBinding's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// The role a binding grants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    /// Always `rbac.authorization.k8s.io`.
    #[serde(default)]
    pub api_group: String,
    /// `Role` (RoleBinding only) or `ClusterRole`.
    #[serde(default)]
    pub kind: String,
    /// The role's name.
    #[serde(default)]
    pub name: String,
}

/// Label selectors whose ClusterRoles' rules would be aggregated (stored, not applied).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AggregationRule {
    /// Label selectors of the ClusterRoles to aggregate.
    #[serde(default)]
    pub cluster_role_selectors: Vec<serde_json::Value>,
}

/// Rules in one namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Role {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the role allows.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
}

/// Rules cluster-wide (or in a namespace, through a RoleBinding).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRole {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the role allows.
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Stored and shown; aggregation itself is not implemented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation_rule: Option<AggregationRule>,
}

/// Grants a Role or ClusterRole to subjects within one namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleBinding {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Who is granted the role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<Subject>,
    /// The role granted (immutable).
    #[serde(default)]
    pub role_ref: RoleRef,
}

/// Grants a ClusterRole to subjects cluster-wide.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRoleBinding {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Who is granted the role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<Subject>,
    /// The ClusterRole granted (immutable).
    #[serde(default)]
    pub role_ref: RoleRef,
}

// --- Resource impls -------------------------------------------------------------------

/// kube's `ValidatePathSegmentName`: RBAC names may hold `:` (`system:monitoring`).
pub fn path_segment_name(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name == "." || name == ".." {
        errs.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

macro_rules! rbac_resource {
    ($ty:ty, $kind:literal, $list:literal, $plural:literal, $singular:literal, $namespaced:literal, $validate:ident) => {
        impl crate::Resource for $ty {
            const KIND: &'static str = $kind;
            const LIST_KIND: &'static str = $list;
            const PLURAL: &'static str = $plural;
            const SINGULAR: &'static str = $singular;
            const SHORT_NAMES: &'static [&'static str] = &[];
            const NAMESPACED: bool = $namespaced;
            const GROUP: &'static str = GROUP;
            const VERSION: &'static str = VERSION;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }

            fn spec_value(&self) -> serde_json::Value {
                // No spec: everything but metadata is the content.
                let mut value = serde_json::to_value(self).unwrap_or_default();
                if let Some(object) = value.as_object_mut() {
                    object.remove("metadata");
                }
                value
            }

            fn copy_status_from(&mut self, _other: &Self) {}

            fn clear_status(&mut self) {}

            fn apply_defaults(&mut self) {
                self.defaults();
            }

            fn validate(&self) -> Vec<FieldError> {
                let mut errors = validate_object_meta(
                    &self.metadata,
                    $namespaced,
                    path_segment_name,
                    &FieldPath::new("metadata"),
                );
                errors.extend($validate(self));
                errors
            }
        }
    };
}

rbac_resource!(
    Role,
    "Role",
    "RoleList",
    "roles",
    "role",
    true,
    validate_role
);
rbac_resource!(
    ClusterRole,
    "ClusterRole",
    "ClusterRoleList",
    "clusterroles",
    "clusterrole",
    false,
    validate_cluster_role
);
rbac_resource!(
    RoleBinding,
    "RoleBinding",
    "RoleBindingList",
    "rolebindings",
    "rolebinding",
    true,
    validate_role_binding
);
rbac_resource!(
    ClusterRoleBinding,
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "clusterrolebindings",
    "clusterrolebinding",
    false,
    validate_cluster_role_binding
);

impl Role {
    fn defaults(&mut self) {}
}

impl ClusterRole {
    fn defaults(&mut self) {}
}

fn default_subjects(subjects: &mut [Subject]) {
    for subject in subjects {
        if subject.api_group.is_empty() && matches!(subject.kind.as_str(), "User" | "Group") {
            subject.api_group = GROUP.into();
        }
    }
}

impl RoleBinding {
    fn defaults(&mut self) {
        default_subjects(&mut self.subjects);
    }
}

impl ClusterRoleBinding {
    fn defaults(&mut self) {
        default_subjects(&mut self.subjects);
    }
}

// --- Validation -----------------------------------------------------------------------

fn validate_rules(rules: &[PolicyRule], namespaced: bool, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let path = path.index(i);
        if rule.verbs.is_empty() {
            errs.push(FieldError::required(
                path.child("verbs"),
                "verbs must contain at least one value",
            ));
        }
        if !rule.non_resource_urls.is_empty() {
            if namespaced {
                errs.push(FieldError::invalid(
                    path.child("nonResourceURLs"),
                    &rule.non_resource_urls,
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !rule.api_groups.is_empty() || !rule.resources.is_empty() {
                errs.push(FieldError::invalid(
                    path.child("nonResourceURLs"),
                    &rule.non_resource_urls,
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            for (j, url) in rule.non_resource_urls.iter().enumerate() {
                if !url.starts_with('/') && url != ALL {
                    errs.push(FieldError::invalid(
                        path.child("nonResourceURLs").index(j),
                        url,
                        "must start with '/' or be '*'",
                    ));
                }
            }
            continue;
        }
        if rule.api_groups.is_empty() {
            errs.push(FieldError::required(
                path.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if rule.resources.is_empty() {
            errs.push(FieldError::required(
                path.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
    errs
}

fn validate_role(role: &Role) -> Vec<FieldError> {
    validate_rules(&role.rules, true, &FieldPath::new("rules"))
}

fn validate_cluster_role(role: &ClusterRole) -> Vec<FieldError> {
    validate_rules(&role.rules, false, &FieldPath::new("rules"))
}

fn validate_binding(role_ref: &RoleRef, subjects: &[Subject], namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let path = FieldPath::new("roleRef");
    if role_ref.api_group != GROUP {
        errs.push(FieldError::not_supported(
            path.child("apiGroup"),
            &role_ref.api_group,
            &[GROUP],
        ));
    }
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported(
            path.child("kind"),
            &role_ref.kind,
            kinds,
        ));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    } else {
        for msg in path_segment_name(&role_ref.name) {
            errs.push(FieldError::invalid(path.child("name"), &role_ref.name, msg));
        }
    }
    for (i, subject) in subjects.iter().enumerate() {
        let path = FieldPath::new("subjects").index(i);
        if subject.name.is_empty() {
            errs.push(FieldError::required(path.child("name"), ""));
        }
        match subject.kind.as_str() {
            "ServiceAccount" => {
                if !subject.api_group.is_empty() {
                    errs.push(FieldError::not_supported(
                        path.child("apiGroup"),
                        &subject.api_group,
                        &[""],
                    ));
                }
                if !namespaced && subject.namespace.is_empty() {
                    errs.push(FieldError::required(path.child("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if subject.api_group != GROUP {
                    errs.push(FieldError::not_supported(
                        path.child("apiGroup"),
                        &subject.api_group,
                        &[GROUP],
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                path.child("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
    errs
}

fn validate_role_binding(binding: &RoleBinding) -> Vec<FieldError> {
    validate_binding(&binding.role_ref, &binding.subjects, true)
}

fn validate_cluster_role_binding(binding: &ClusterRoleBinding) -> Vec<FieldError> {
    validate_binding(&binding.role_ref, &binding.subjects, false)
}

/// kube refuses to change a binding's roleRef: delete and re-create instead.
pub fn validate_role_ref_unchanged(old: &RoleRef, new: &RoleRef) -> Vec<FieldError> {
    if old == new {
        return Vec::new();
    }
    vec![FieldError::invalid(
        FieldPath::new("roleRef"),
        new,
        "cannot change roleRef",
    )]
}

// --- Evaluation -----------------------------------------------------------------------

/// What a request asks to do, as the authorizer sees it (kube's `authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    /// A resource request (else a non-resource `path`).
    pub resource_request: bool,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub path: String,
}

impl Attributes {
    /// `resource` or `resource/subresource`, as rules name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

fn has(items: &[String], value: &str) -> bool {
    items.iter().any(|i| i == value)
}

fn verb_matches(rule: &PolicyRule, verb: &str) -> bool {
    has(&rule.verbs, ALL) || has(&rule.verbs, verb)
}

/// Whether `rule` names `resource` (with `subresource`, as `resource/subresource`).
/// Compared in place: this runs for every rule of every request.
fn resource_matches(rule: &PolicyRule, resource: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        if r == ALL {
            return true;
        }
        if subresource.is_empty() {
            return r == resource;
        }
        r.strip_prefix("*/") == Some(subresource)
            || r.strip_prefix(resource).and_then(|s| s.strip_prefix('/')) == Some(subresource)
    })
}

fn non_resource_url_matches(pattern: &str, path: &str) -> bool {
    pattern == ALL
        || pattern == path
        || pattern
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// Whether one rule allows the request (kube's `RuleAllows`).
pub fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !verb_matches(rule, &attrs.verb) {
        return false;
    }
    if attrs.resource_request {
        (has(&rule.api_groups, ALL) || has(&rule.api_groups, &attrs.api_group))
            && resource_matches(rule, &attrs.resource, &attrs.subresource)
            && (rule.resource_names.is_empty() || has(&rule.resource_names, &attrs.name))
    } else {
        rule.non_resource_urls
            .iter()
            .any(|u| non_resource_url_matches(u, &attrs.path))
    }
}

fn subject_matches(subject: &Subject, user: &str, groups: &[String], namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user,
        "Group" => has(groups, &subject.name),
        "ServiceAccount" => {
            let ns = if subject.namespace.is_empty() {
                namespace
            } else {
                &subject.namespace
            };
            // `system:serviceaccount:{ns}:{name}`, compared without building it.
            user.strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.strip_prefix(ns))
                .and_then(|rest| rest.strip_prefix(':'))
                == Some(subject.name.as_str())
        }
        _ => false,
    }
}

/// One binding, reduced to what evaluation needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub subjects: Vec<Subject>,
    pub role_ref: RoleRef,
}

/// Every Role, ClusterRole and binding, as evaluation needs them: the authorizer's
/// in-memory view (kept current by the API server from a store watch).
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// (namespace, name) → rules.
    pub roles: HashMap<(String, String), Vec<PolicyRule>>,
    /// name → rules.
    pub cluster_roles: HashMap<String, Vec<PolicyRule>>,
    /// namespace → name → grant (a request looks at its own namespace only).
    pub role_bindings: HashMap<String, HashMap<String, Grant>>,
    /// name → grant.
    pub cluster_role_bindings: HashMap<String, Grant>,
}

/// The binding a rule came from (its reason is only formatted when a rule allows).
struct Source<'a> {
    /// `""` for a ClusterRoleBinding.
    namespace: &'a str,
    name: &'a str,
    grant: &'a Grant,
    subject: &'a Subject,
}

impl Source<'_> {
    fn reason(&self) -> String {
        let binding = if self.namespace.is_empty() {
            format!("ClusterRoleBinding {:?}", self.name)
        } else {
            format!("RoleBinding \"{}/{}\"", self.namespace, self.name)
        };
        let role = &self.grant.role_ref;
        format!(
            "{binding} of {} {:?} to {} {:?}",
            role.kind, role.name, self.subject.kind, self.subject.name
        )
    }
}

/// Why a request was allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// e.g. `RoleBinding "edit-alice" of ClusterRole "edit" to User "alice"`.
    pub reason: String,
}

impl Policy {
    /// The rules a role reference points at (`None` if it does not exist).
    pub fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Option<&[PolicyRule]> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(&(namespace.to_string(), role_ref.name.clone()))
                .map(Vec::as_slice),
            "ClusterRole" => self.cluster_roles.get(&role_ref.name).map(Vec::as_slice),
            _ => None,
        }
    }

    /// Adds or replaces a RoleBinding.
    pub fn insert_role_binding(&mut self, namespace: &str, name: &str, grant: Grant) {
        self.role_bindings
            .entry(namespace.to_string())
            .or_default()
            .insert(name.to_string(), grant);
    }

    /// Removes a RoleBinding.
    pub fn remove_role_binding(&mut self, namespace: &str, name: &str) {
        if let Some(bindings) = self.role_bindings.get_mut(namespace) {
            bindings.remove(name);
            if bindings.is_empty() {
                self.role_bindings.remove(namespace);
            }
        }
    }

    /// How many RoleBindings there are.
    pub fn role_binding_count(&self) -> usize {
        self.role_bindings.values().map(HashMap::len).sum()
    }

    /// Visits the rules that apply to `user`/`groups` in `namespace` ("" = cluster scope
    /// only): ClusterRoleBindings everywhere, RoleBindings of that namespace. Stops when
    /// `visit` returns false.
    fn visit_rules(
        &self,
        user: &str,
        groups: &[String],
        namespace: &str,
        mut visit: impl FnMut(&Source<'_>, &PolicyRule) -> bool,
    ) {
        let cluster = self
            .cluster_role_bindings
            .iter()
            .map(|(name, grant)| ("", name, grant));
        let namespaced = self
            .role_bindings
            .get(namespace)
            .filter(|_| !namespace.is_empty())
            .into_iter()
            .flat_map(|bindings| {
                bindings
                    .iter()
                    .map(|(name, grant)| (namespace, name, grant))
            });
        for (binding_ns, name, grant) in cluster.chain(namespaced) {
            let Some(subject) = grant
                .subjects
                .iter()
                .find(|s| subject_matches(s, user, groups, binding_ns))
            else {
                continue;
            };
            let Some(rules) = self.role_rules(&grant.role_ref, binding_ns) else {
                continue;
            };
            let source = Source {
                namespace: binding_ns,
                name,
                grant,
                subject,
            };
            for rule in rules {
                // A namespaced grant never gives non-resource URLs.
                if !binding_ns.is_empty() && !rule.non_resource_urls.is_empty() {
                    continue;
                }
                if !visit(&source, rule) {
                    return;
                }
            }
        }
    }

    /// Allowed, with the binding that allowed it, or `None` (denied: RBAC only allows).
    pub fn authorize(&self, attrs: &Attributes) -> Option<Allowed> {
        let mut allowed = None;
        let namespace = if attrs.resource_request {
            attrs.namespace.as_str()
        } else {
            ""
        };
        self.visit_rules(&attrs.user, &attrs.groups, namespace, |source, rule| {
            if rule_allows(rule, attrs) {
                allowed = Some(Allowed {
                    reason: source.reason(),
                });
                false
            } else {
                true
            }
        });
        allowed
    }

    /// Every rule `user` holds in `namespace` ("" = cluster-wide grants only): the owner
    /// side of the escalation check.
    pub fn rules_for(&self, user: &str, groups: &[String], namespace: &str) -> Vec<PolicyRule> {
        let mut rules = Vec::new();
        self.visit_rules(user, groups, namespace, |_, rule| {
            rules.push(rule.clone());
            true
        });
        rules
    }
}

// --- Escalation check -----------------------------------------------------------------

/// One verb on one (group, resource, name) or one URL.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for group in &rule.api_groups {
            for resource in &rule.resources {
                if rule.resource_names.is_empty() {
                    out.push(PolicyRule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        ..PolicyRule::default()
                    });
                }
                for name in &rule.resource_names {
                    out.push(PolicyRule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        resource_names: one(name),
                        ..PolicyRule::default()
                    });
                }
            }
        }
        for url in &rule.non_resource_urls {
            out.push(PolicyRule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..PolicyRule::default()
            });
        }
    }
    out
}

fn has_all(owner: &[String], servant: &[String]) -> bool {
    servant.iter().all(|s| has(owner, s))
}

fn resources_cover(owner: &[String], servant: &[String]) -> bool {
    if has(owner, ALL) {
        return true;
    }
    servant.iter().all(|s| {
        if has(owner, s) {
            return true;
        }
        match s.split_once('/') {
            Some((resource, sub)) => {
                has(owner, &format!("{resource}/*")) || has(owner, &format!("*/{sub}"))
            }
            None => false,
        }
    })
}

fn urls_cover(owner: &[String], servant: &[String]) -> bool {
    if has(owner, ALL) {
        return true;
    }
    servant
        .iter()
        .all(|s| owner.iter().any(|o| non_resource_url_matches(o, s)))
}

fn rule_covers(owner: &PolicyRule, servant: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &servant.verbs);
    let groups = has(&owner.api_groups, ALL) || has_all(&owner.api_groups, &servant.api_groups);
    let names = if servant.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &servant.resource_names)
    };
    verbs
        && groups
        && resources_cover(&owner.resources, &servant.resources)
        && urls_cover(&owner.non_resource_urls, &servant.non_resource_urls)
        && names
}

/// kube's `validation.Covers`: whether `owner` holds everything `servant` grants. The
/// answer lists the atomic rules not covered (empty: covered).
pub fn covers(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    servant
        .iter()
        .flat_map(breakdown)
        .filter(|atomic| !owner.iter().any(|o| rule_covers(o, atomic)))
        .collect()
}

// --- Bootstrap ------------------------------------------------------------------------

/// The bootstrap objects: kube's `cluster-admin`, `admin`, `edit`, `view`, plus
/// `system:monitoring` (`/metrics` and health) and `system:discovery`, and bindings that
/// keep the static groups working: `fedingress:admins` → cluster-admin,
/// `fedingress:viewers` → view and system:monitoring, every authenticated user →
/// system:discovery.
pub fn bootstrap() -> (Vec<ClusterRole>, Vec<ClusterRoleBinding>) {
    let fed = crate::GROUP;
    let read = ["get", "list", "watch"];
    let write = ["create", "update", "patch", "delete", "deletecollection"];
    let view = vec![
        PolicyRule::resource(
            &read,
            &[fed],
            &[
                "federatedingresses",
                "federatedingresses/status",
                "federatedingresses/explain",
                "clusters",
                "clusters/status",
                "ingresspools",
                "ingresspools/status",
                "ingressclaims",
                "ingressclaims/status",
            ],
        ),
        // kube's view (and so edit and admin) reads namespaces; only cluster-admin writes them.
        PolicyRule::resource(&read, &[""], &["events", "namespaces", "namespaces/status"]),
    ];
    let mut edit = view.clone();
    edit.push(PolicyRule::resource(
        &write,
        &[fed],
        &[
            "federatedingresses",
            "clusters",
            "ingresspools",
            "ingressclaims",
        ],
    ));
    let mut admin = edit.clone();
    admin.push(PolicyRule::resource(
        &["create", "list", "delete"],
        &[fed],
        &["clusters/token"],
    ));
    let all_read_write: Vec<&str> = read.iter().chain(write.iter()).copied().collect();
    admin.push(PolicyRule::resource(
        &all_read_write,
        &[GROUP],
        &["roles", "rolebindings"],
    ));
    let cluster_admin = vec![
        PolicyRule::resource(&[ALL], &[ALL], &[ALL]),
        PolicyRule::urls(&[ALL], &[ALL]),
    ];
    let monitoring = vec![PolicyRule::urls(
        &["get"],
        &["/metrics", "/livez", "/readyz", "/healthz"],
    )];
    let discovery = vec![PolicyRule::urls(
        &["get"],
        &[
            "/api",
            "/api/*",
            "/apis",
            "/apis/*",
            "/openapi",
            "/openapi/*",
            "/version",
        ],
    )];
    let annotations = BTreeMap::from([(AUTOUPDATE_ANNOTATION.to_string(), "true".to_string())]);
    let labels = BTreeMap::from([(
        "kubernetes.io/bootstrapping".to_string(),
        "rbac-defaults".to_string(),
    )]);
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        annotations: annotations.clone(),
        labels: labels.clone(),
        ..ObjectMeta::default()
    };
    let role = |name: &str, rules: Vec<PolicyRule>| ClusterRole {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "ClusterRole".into(),
        metadata: meta(name),
        rules,
        aggregation_rule: None,
    };
    let binding = |name: &str, role: &str, kind: &str, subject: &str| ClusterRoleBinding {
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "ClusterRoleBinding".into(),
        metadata: meta(name),
        subjects: vec![Subject {
            kind: kind.into(),
            api_group: GROUP.into(),
            name: subject.into(),
            namespace: String::new(),
        }],
        role_ref: RoleRef {
            api_group: GROUP.into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
    };
    (
        vec![
            role("cluster-admin", cluster_admin),
            role("admin", admin),
            role("edit", edit),
            role("view", view),
            role("system:monitoring", monitoring),
            role("system:discovery", discovery),
        ],
        vec![
            binding(
                "fedingress:admins",
                "cluster-admin",
                "Group",
                "fedingress:admins",
            ),
            binding("fedingress:viewers", "view", "Group", "fedingress:viewers"),
            binding(
                "fedingress:viewers:monitoring",
                "system:monitoring",
                "Group",
                "fedingress:viewers",
            ),
            binding(
                "system:discovery",
                "system:discovery",
                "Group",
                AUTHENTICATED_GROUP,
            ),
        ],
    )
}

/// Reconciles a stored bootstrap object with the default one, kube-style: with the
/// autoupdate annotation `"true"` missing rules are added; otherwise it is left alone.
/// `None` when nothing changes.
pub fn reconcile_rules(stored: &ClusterRole, default: &ClusterRole) -> Option<ClusterRole> {
    if stored
        .metadata
        .annotations
        .get(AUTOUPDATE_ANNOTATION)
        .map(String::as_str)
        != Some("true")
    {
        return None;
    }
    let missing: Vec<PolicyRule> = default
        .rules
        .iter()
        .filter(|rule| !covers(&stored.rules, std::slice::from_ref(rule)).is_empty())
        .cloned()
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut updated = stored.clone();
    updated.rules.extend(missing);
    Some(updated)
}

/// Same for a bootstrap binding: missing subjects are added (roleRef never changes).
pub fn reconcile_subjects(
    stored: &ClusterRoleBinding,
    default: &ClusterRoleBinding,
) -> Option<ClusterRoleBinding> {
    if stored
        .metadata
        .annotations
        .get(AUTOUPDATE_ANNOTATION)
        .map(String::as_str)
        != Some("true")
    {
        return None;
    }
    let missing: Vec<Subject> = default
        .subjects
        .iter()
        .filter(|s| !stored.subjects.contains(s))
        .cloned()
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut updated = stored.clone();
    updated.subjects.extend(missing);
    Some(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Resource;

    fn grant(kind: &str, role: &str, subjects: Vec<Subject>) -> Grant {
        Grant {
            subjects,
            role_ref: RoleRef {
                api_group: GROUP.into(),
                kind: kind.into(),
                name: role.into(),
            },
        }
    }

    fn user(name: &str) -> Subject {
        Subject {
            kind: "User".into(),
            api_group: GROUP.into(),
            name: name.into(),
            namespace: String::new(),
        }
    }

    fn attrs(user: &str, verb: &str, resource: &str, namespace: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            user: user.into(),
            groups: vec![AUTHENTICATED_GROUP.into()],
            verb: verb.into(),
            resource_request: true,
            api_group: crate::GROUP.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: String::new(),
            path: String::new(),
        }
    }

    fn policy() -> Policy {
        let (roles, bindings) = bootstrap();
        let mut policy = Policy::default();
        for role in roles {
            policy
                .cluster_roles
                .insert(role.metadata.name.clone().unwrap(), role.rules);
        }
        for binding in bindings {
            policy.cluster_role_bindings.insert(
                binding.metadata.name.clone().unwrap(),
                Grant {
                    subjects: binding.subjects,
                    role_ref: binding.role_ref,
                },
            );
        }
        policy.insert_role_binding(
            "shop",
            "alice-edit",
            grant("ClusterRole", "edit", vec![user("alice")]),
        );
        policy
    }

    #[test]
    fn rolebinding_to_clusterrole_is_limited_to_its_namespace() {
        let policy = policy();
        let allowed = policy
            .authorize(&attrs("alice", "create", "federatedingresses", "shop"))
            .unwrap();
        assert!(allowed.reason.contains("shop/alice-edit"), "{allowed:?}");
        assert!(
            policy
                .authorize(&attrs("alice", "create", "federatedingresses", "default"))
                .is_none()
        );
        // Cluster-scoped requests are never granted by a RoleBinding.
        assert!(
            policy
                .authorize(&attrs("alice", "list", "clusters", ""))
                .is_none()
        );
        assert!(
            policy
                .authorize(&attrs("bob", "get", "federatedingresses", "shop"))
                .is_none()
        );
    }

    #[test]
    fn groups_keep_working() {
        let policy = policy();
        let mut admin = attrs("root", "delete", "clusters", "");
        admin.groups.push("fedingress:admins".into());
        assert!(policy.authorize(&admin).is_some());
        let mut viewer = attrs("v", "watch", "federatedingresses", "any");
        viewer.groups.push("fedingress:viewers".into());
        assert!(policy.authorize(&viewer).is_some());
        viewer.verb = "create".into();
        assert!(policy.authorize(&viewer).is_none());
        let metrics = Attributes {
            verb: "get".into(),
            resource_request: false,
            path: "/metrics".into(),
            ..viewer.clone()
        };
        assert!(policy.authorize(&metrics).is_some());
        let metrics = Attributes {
            groups: vec![AUTHENTICATED_GROUP.into()],
            ..metrics
        };
        assert!(policy.authorize(&metrics).is_none());
    }

    /// view reads pools and claims (and their status); edit, bound in a namespace,
    /// writes claims there; neither writes a status.
    #[test]
    fn view_and_edit_cover_pools_and_claims() {
        let policy = policy();
        for (verb, resource, namespace) in [
            ("list", "ingresspools", ""),
            ("get", "ingresspools/status", ""),
            ("watch", "ingressclaims", "any"),
            ("get", "ingressclaims/status", "any"),
        ] {
            let mut viewer = attrs("v", verb, resource, namespace);
            viewer.groups.push("fedingress:viewers".into());
            assert!(policy.authorize(&viewer).is_some(), "{verb} {resource}");
            viewer.verb = "create".into();
            assert!(policy.authorize(&viewer).is_none(), "create {resource}");
        }
        for verb in ["create", "patch", "delete", "deletecollection"] {
            assert!(
                policy
                    .authorize(&attrs("alice", verb, "ingressclaims", "shop"))
                    .is_some(),
                "{verb}"
            );
        }
        assert!(
            policy
                .authorize(&attrs("alice", "update", "ingressclaims/status", "shop"))
                .is_none()
        );
        let (roles, _) = bootstrap();
        let edit = roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some("edit"));
        let mut a = attrs("u", "create", "ingresspools", "");
        assert!(edit.unwrap().rules.iter().any(|rule| rule_allows(rule, &a)));
        a.subresource = "status".into();
        assert!(!edit.unwrap().rules.iter().any(|rule| rule_allows(rule, &a)));
    }

    #[test]
    fn rule_matching_follows_kube() {
        let rule = PolicyRule {
            verbs: vec!["get".into()],
            api_groups: vec![crate::GROUP.into()],
            resources: vec!["clusters".into(), "*/status".into()],
            resource_names: vec!["eu".into()],
            non_resource_urls: vec![],
        };
        let mut a = attrs("u", "get", "clusters", "");
        assert!(!rule_allows(&rule, &a), "resourceNames need a name");
        a.name = "eu".into();
        assert!(rule_allows(&rule, &a));
        a.subresource = "status".into();
        assert!(rule_allows(&rule, &a), "*/status");
        a.subresource = "token".into();
        assert!(
            !rule_allows(&rule, &a),
            "clusters does not cover clusters/token"
        );
        let token = PolicyRule {
            resources: vec!["clusters/token".into()],
            ..rule.clone()
        };
        assert!(rule_allows(&token, &a), "clusters/token");
        a.resource = "cluster".into();
        assert!(
            !rule_allows(&token, &a),
            "cluster/token is another resource"
        );
        a.resource = "clusters".into();
        a.subresource.clear();
        assert!(
            !rule_allows(&token, &a),
            "clusters/token does not cover clusters"
        );
        a.verb = "list".into();
        assert!(!rule_allows(&rule, &a));
        a.verb = "get".into();
        a.api_group = "".into();
        assert!(!rule_allows(&rule, &a));
        let url = PolicyRule::urls(&["get"], &["/healthz/*", "/metrics"]);
        let path = |p: &str| Attributes {
            verb: "get".into(),
            path: p.into(),
            ..Attributes::default()
        };
        assert!(rule_allows(&url, &path("/metrics")));
        assert!(rule_allows(&url, &path("/healthz/etcd")));
        assert!(!rule_allows(&url, &path("/metricsx")));
    }

    #[test]
    fn service_accounts_default_to_the_binding_namespace() {
        let mut policy = policy();
        policy.insert_role_binding(
            "shop",
            "sa",
            grant(
                "ClusterRole",
                "view",
                vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "robot".into(),
                    ..Subject::default()
                }],
            ),
        );
        let a = attrs(
            "system:serviceaccount:shop:robot",
            "get",
            "federatedingresses",
            "shop",
        );
        assert!(policy.authorize(&a).is_some());
        for other in [
            "system:serviceaccount:shop:robot2",
            "system:serviceaccount:shop:",
            "system:serviceaccount:shop",
            "robot",
        ] {
            let mut b = a.clone();
            b.user = other.into();
            assert!(policy.authorize(&b).is_none(), "{other}");
        }
    }

    #[test]
    fn namespaced_grants_never_give_urls() {
        let mut policy = policy();
        policy.insert_role_binding(
            "shop",
            "admin",
            grant("ClusterRole", "cluster-admin", vec![user("eve")]),
        );
        let mut a = attrs("eve", "delete", "federatedingresses", "shop");
        assert!(policy.authorize(&a).is_some());
        a.resource_request = false;
        a.verb = "get".into();
        a.path = "/metrics".into();
        assert!(policy.authorize(&a).is_none());
    }

    #[test]
    fn escalation_check_covers() {
        let (roles, _) = bootstrap();
        let by_name = |n: &str| {
            roles
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(n))
                .unwrap()
                .rules
                .clone()
        };
        assert!(covers(&by_name("cluster-admin"), &by_name("admin")).is_empty());
        assert!(covers(&by_name("admin"), &by_name("edit")).is_empty());
        assert!(covers(&by_name("edit"), &by_name("view")).is_empty());
        let missing = covers(&by_name("edit"), &by_name("admin"));
        assert!(!missing.is_empty());
        assert!(missing.iter().any(|r| r.resources == ["roles"]));
        // owner/* and */sub cover subresources; a named owner rule does not cover all names.
        let owner = vec![PolicyRule::resource(&["get"], &["g"], &["things/*"])];
        let servant = vec![PolicyRule::resource(&["get"], &["g"], &["things/status"])];
        assert!(covers(&owner, &servant).is_empty());
        let mut named = owner[0].clone();
        named.resource_names = vec!["a".into()];
        assert!(!covers(&[named], &servant).is_empty());
    }

    #[test]
    fn validation_has_field_paths() {
        let role = Role {
            metadata: ObjectMeta {
                name: Some("r".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            rules: vec![
                PolicyRule {
                    verbs: vec![],
                    ..PolicyRule::default()
                },
                PolicyRule::urls(&["get"], &["/metrics"]),
            ],
            ..Role::default()
        };
        let fields: Vec<String> = role.validate().iter().map(|e| e.field()).collect();
        assert!(fields.contains(&"rules[0].verbs".to_string()), "{fields:?}");
        assert!(
            fields.contains(&"rules[0].apiGroups".to_string()),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"rules[1].nonResourceURLs".to_string()),
            "{fields:?}"
        );
        let mut binding = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some("system:b".into()),
                ..ObjectMeta::default()
            },
            subjects: vec![
                Subject {
                    kind: "User".into(),
                    name: "a".into(),
                    ..Subject::default()
                },
                Subject {
                    kind: "Robot".into(),
                    name: "x".into(),
                    ..Subject::default()
                },
            ],
            role_ref: RoleRef {
                api_group: GROUP.into(),
                kind: "Role".into(),
                name: "r".into(),
            },
            ..ClusterRoleBinding::default()
        };
        binding.apply_defaults();
        assert_eq!(binding.subjects[0].api_group, GROUP);
        let fields: Vec<String> = binding.validate().iter().map(|e| e.field()).collect();
        assert_eq!(fields, vec!["roleRef.kind", "subjects[1].kind"]);
    }

    /// Not a test: how long one decision takes with many objects. Run with
    /// `cargo test -p fedingress-api --release rbac::tests::decision_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement"]
    fn decision_cost() {
        let mut policy = policy();
        for ns in 0..100 {
            for b in 0..100 {
                policy.insert_role_binding(
                    &format!("ns{ns}"),
                    &format!("b{b}"),
                    grant("ClusterRole", "edit", vec![user(&format!("u{ns}-{b}"))]),
                );
            }
        }
        for b in 0..100 {
            policy.cluster_role_bindings.insert(
                format!("crb{b}"),
                grant("ClusterRole", "view", vec![user(&format!("c{b}"))]),
            );
        }
        let allowed = attrs("u50-99", "create", "federatedingresses", "ns50");
        let denied = attrs("nobody", "create", "federatedingresses", "ns50");
        for (what, a) in [("allowed", &allowed), ("denied", &denied)] {
            let n = 20_000;
            let start = std::time::Instant::now();
            for _ in 0..n {
                std::hint::black_box(policy.authorize(std::hint::black_box(a)));
            }
            let per = start.elapsed() / n;
            println!(
                "{what}: {per:?} per decision (10,000 RoleBindings in 100 namespaces, 104 ClusterRoleBindings)"
            );
        }
    }

    #[test]
    fn reconcile_adds_missing_only_with_autoupdate() {
        let (roles, bindings) = bootstrap();
        let view = roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some("view"))
            .unwrap();
        let mut trimmed = view.clone();
        trimmed.rules.truncate(1);
        let updated = reconcile_rules(&trimmed, view).unwrap();
        assert_eq!(updated.rules.len(), view.rules.len());
        assert!(reconcile_rules(view, view).is_none());
        trimmed
            .metadata
            .annotations
            .insert(AUTOUPDATE_ANNOTATION.into(), "false".into());
        assert!(reconcile_rules(&trimmed, view).is_none());
        let mut binding = bindings[0].clone();
        binding.subjects.clear();
        assert_eq!(
            reconcile_subjects(&binding, &bindings[0]).unwrap().subjects,
            bindings[0].subjects
        );
    }
}
