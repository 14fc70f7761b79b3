//! `authorization.k8s.io/v1` SelfSubjectAccessReview: "may I?", answered by the same
//! RBAC evaluation as real requests, so `kubectl auth can-i` works; and
//! SelfSubjectRulesReview: "what may I do in this namespace?", the rules of the bindings
//! that apply (`kubectl auth can-i --list`). Any authenticated user may ask about
//! themselves (kube's `system:basic-user`).

use fedingress_api::rbac::{Attributes, PolicyRule};
use serde::Deserialize;
use serde_json::{Value, json};

use super::User;
use super::rbac::{Authorizer, Decision};
use crate::status::ApiError;

/// The group and version served.
pub const GROUP_VERSION: &str = "authorization.k8s.io/v1";

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    spec: Spec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    resource_attributes: Option<ResourceAttributes>,
    non_resource_attributes: Option<NonResourceAttributes>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ResourceAttributes {
    namespace: String,
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NonResourceAttributes {
    path: String,
    verb: String,
}

/// Answers a review (the request's JSON form) for `user`.
pub fn answer(authorizer: &Authorizer, user: &User, body: Value) -> Result<Value, ApiError> {
    let spec_json = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let review: Review = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("invalid SelfSubjectAccessReview: {e}")))?;
    let attrs: Attributes = match (
        review.spec.resource_attributes,
        review.spec.non_resource_attributes,
    ) {
        (Some(r), None) => user.resource_attributes(
            &r.verb,
            &r.group,
            &r.resource,
            &r.subresource,
            &r.namespace,
            &r.name,
        ),
        (None, Some(n)) => user.path_attributes(&n.verb, &n.path),
        _ => {
            let errors = [fedingress_api::FieldError::invalid(
                fedingress_api::FieldPath::new("spec"),
                "",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )];
            return Err(ApiError::invalid(
                "SelfSubjectAccessReview",
                "authorization.k8s.io",
                "",
                &errors,
            ));
        }
    };
    let status = match authorizer.authorize(&attrs) {
        Decision::Allow(reason) => {
            json!({"allowed": true, "reason": format!("RBAC: allowed by {reason}")})
        }
        Decision::Deny => json!({"allowed": false}),
        Decision::NotReady => json!({
            "allowed": false,
            "evaluationError": "the authorizer has not loaded the RBAC objects yet",
        }),
    };
    Ok(json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": GROUP_VERSION,
        "metadata": {"creationTimestamp": null},
        "spec": spec_json,
        "status": status,
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RulesReview {
    #[serde(default)]
    spec: RulesSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RulesSpec {
    namespace: String,
}

/// Answers a SelfSubjectRulesReview (the request's JSON form) for `user`, as kube's RBAC
/// authorizer does (`RulesFor`): the rules of every ClusterRoleBinding and of the
/// RoleBindings of `spec.namespace` that name the user or one of their groups, each
/// rule with resources as a resource rule and each with URLs as a non-resource rule.
/// RBAC is the only authorizer, so the list is complete (`incomplete: false`) once the
/// policy is loaded.
///
/// # Errors
/// 400 when the body does not decode or names no namespace (kube's "no namespace on
/// request").
pub fn rules(authorizer: &Authorizer, user: &User, body: Value) -> Result<Value, ApiError> {
    let review: RulesReview = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("invalid SelfSubjectRulesReview: {e}")))?;
    let namespace = review.spec.namespace;
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let status = if authorizer.is_synced() {
        let mut rules = authorizer.rules_for(&user.name, &user.groups, &namespace);
        rules.sort_by_key(PolicyRule::compact);
        rules.dedup();
        let resource_rules: Vec<Value> = rules
            .iter()
            .filter(|rule| !rule.resources.is_empty())
            .map(|rule| {
                let mut out = json!({"verbs": rule.verbs});
                for (key, items) in [
                    ("apiGroups", &rule.api_groups),
                    ("resources", &rule.resources),
                    ("resourceNames", &rule.resource_names),
                ] {
                    if !items.is_empty() {
                        out[key] = json!(items);
                    }
                }
                out
            })
            .collect();
        let non_resource_rules: Vec<Value> = rules
            .iter()
            .filter(|rule| !rule.non_resource_urls.is_empty())
            .map(|rule| json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}))
            .collect();
        json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": false,
        })
    } else {
        json!({
            "resourceRules": [],
            "nonResourceRules": [],
            "incomplete": true,
            "evaluationError": "the authorizer has not loaded the RBAC objects yet",
        })
    };
    Ok(json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": GROUP_VERSION,
        "metadata": {"creationTimestamp": null},
        "spec": {"namespace": namespace},
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bootstrap_authorizer() -> Authorizer {
        let (roles, bindings) = fedingress_api::rbac::bootstrap();
        let mut policy = fedingress_api::rbac::Policy::default();
        for role in roles {
            policy
                .cluster_roles
                .insert(role.metadata.name.clone().unwrap_or_default(), role.rules);
        }
        for binding in bindings {
            policy.cluster_role_bindings.insert(
                binding.metadata.name.clone().unwrap_or_default(),
                fedingress_api::rbac::Grant {
                    subjects: binding.subjects,
                    role_ref: binding.role_ref,
                },
            );
        }
        Authorizer::with_policy(policy)
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
        .authenticated()
    }

    /// `kubectl auth can-i --list` failed for every user: the review was not served
    /// (issue 23).
    #[test]
    fn rules_review_lists_the_rules_that_apply() {
        let authorizer = bootstrap_authorizer();
        let ask = |namespace: &str| json!({"spec": {"namespace": namespace}});

        let admin = rules(
            &authorizer,
            &user("alice", &["fedingress:admins"]),
            ask("shop"),
        )
        .unwrap();
        assert_eq!(admin["kind"], "SelfSubjectRulesReview");
        assert_eq!(admin["spec"]["namespace"], "shop");
        let status = &admin["status"];
        assert_eq!(status["incomplete"], false);
        assert!(
            status["resourceRules"]
                .as_array()
                .unwrap()
                .contains(&json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})),
            "{status}"
        );
        assert!(
            status["nonResourceRules"]
                .as_array()
                .unwrap()
                .contains(&json!({"verbs": ["*"], "nonResourceURLs": ["*"]})),
            "{status}"
        );

        // A user with no binding holds only what every authenticated user holds: no
        // resource rule on fedingress.io, discovery's URLs.
        let dave = rules(&authorizer, &user("dave", &[]), ask("shop")).unwrap();
        let status = &dave["status"];
        assert_eq!(status["incomplete"], false);
        assert!(
            !status.to_string().contains("fedingress.io") && !status.to_string().contains("\"*\""),
            "{status}"
        );
        assert!(
            !status["nonResourceRules"].as_array().unwrap().is_empty(),
            "{status}"
        );

        // A RoleBinding counts in its namespace only.
        let mut policy = fedingress_api::rbac::Policy::default();
        policy.roles.insert(
            ("shop".into(), "reader".into()),
            vec![PolicyRule {
                verbs: vec!["get".into()],
                api_groups: vec!["fedingress.io".into()],
                resources: vec!["federatedingresses".into()],
                resource_names: vec!["web".into()],
                ..PolicyRule::default()
            }],
        );
        policy.insert_role_binding(
            "shop",
            "dave-reader",
            fedingress_api::rbac::Grant {
                subjects: vec![fedingress_api::rbac::Subject {
                    kind: "User".into(),
                    name: "dave".into(),
                    ..Default::default()
                }],
                role_ref: fedingress_api::rbac::RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: "reader".into(),
                },
            },
        );
        let authorizer = Authorizer::with_policy(policy);
        let dave = user("dave", &[]);
        assert_eq!(
            rules(&authorizer, &dave, ask("shop")).unwrap()["status"]["resourceRules"],
            json!([{"verbs": ["get"], "apiGroups": ["fedingress.io"], "resources": ["federatedingresses"], "resourceNames": ["web"]}])
        );
        assert_eq!(
            rules(&authorizer, &dave, ask("team")).unwrap()["status"]["resourceRules"],
            json!([])
        );

        // kube's words for a review without a namespace; an unloaded policy says so.
        let err = rules(&authorizer, &dave, json!({"spec": {}})).unwrap_err();
        assert_eq!(err.code, http::StatusCode::BAD_REQUEST);
        let loading = rules(&Authorizer::default(), &dave, ask("shop")).unwrap();
        assert_eq!(loading["status"]["incomplete"], true);
    }

    #[test]
    fn answers_with_rbac() {
        let (roles, bindings) = fedingress_api::rbac::bootstrap();
        let mut policy = fedingress_api::rbac::Policy::default();
        for role in roles {
            policy
                .cluster_roles
                .insert(role.metadata.name.clone().unwrap_or_default(), role.rules);
        }
        for binding in bindings {
            policy.cluster_role_bindings.insert(
                binding.metadata.name.clone().unwrap_or_default(),
                fedingress_api::rbac::Grant {
                    subjects: binding.subjects,
                    role_ref: binding.role_ref,
                },
            );
        }
        let authorizer = Authorizer::with_policy(policy);
        let viewer = User {
            name: "v".into(),
            uid: String::new(),
            groups: vec!["fedingress:viewers".into()],
        };
        let ask = |verb: &str| json!({"spec": {"resourceAttributes": {"verb": verb, "group": "fedingress.io", "resource": "federatedingresses", "namespace": "shop"}}});
        let yes = answer(&authorizer, &viewer, ask("list")).unwrap();
        assert_eq!(yes["status"]["allowed"], true);
        let no = answer(&authorizer, &viewer, ask("delete")).unwrap();
        assert_eq!(no["status"]["allowed"], false);
        let path = json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/metrics"}}});
        assert_eq!(
            answer(&authorizer, &viewer, path).unwrap()["status"]["allowed"],
            true
        );
        assert!(answer(&authorizer, &viewer, json!({"spec": {}})).is_err());
    }
}
