//! `authorization.k8s.io/v1` SelfSubjectAccessReview: "may I?", answered by the same
//! RBAC evaluation as real requests, so `kubectl auth can-i` works. Any authenticated
//! user may ask about themselves (kube's `system:basic-user`).

use fedingress_api::rbac::Attributes;
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

#[cfg(test)]
mod tests {
    use super::*;

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
