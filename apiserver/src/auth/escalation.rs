//! Privilege-escalation prevention on RBAC writes, as kube-apiserver does it:
//!
//! - a Role or ClusterRole may be created or updated only by a user who already holds
//!   every permission in it (in the Role's namespace; cluster-wide for a ClusterRole),
//!   or who may `escalate` roles/clusterroles;
//! - a RoleBinding or ClusterRoleBinding only by a user who holds every permission of
//!   the referenced role (in the binding's namespace; cluster-wide for a
//!   ClusterRoleBinding), or who may `bind` that role (`resourceNames` honoured);
//! - a binding's `roleRef` never changes.
//!
//! kube's `system:masters` bypass does not exist here: `cluster-admin` holds `*` and
//! passes the coverage check anyway.

use std::any::Any;

use fedingress_api::rbac::{
    self, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
};
use fedingress_api::{FieldError, Resource};

use super::User;
use super::rbac::{Authorizer, Decision};
use crate::status::{ApiError, Target};

/// Checks a write of `new` (replacing `current` on update) by `user`.
pub fn check<R: Resource>(
    authorizer: &Authorizer,
    user: &User,
    namespace: Option<&str>,
    current: Option<&R>,
    new: &R,
) -> Result<(), ApiError> {
    let any = new as &dyn Any;
    let old = current.map(|c| c as &dyn Any);
    let ns = namespace.unwrap_or_default();
    let name = new.metadata().name.clone().unwrap_or_default();
    if let Some(role) = any.downcast_ref::<Role>() {
        return check_role(authorizer, user, ns, "roles", &name, &role.rules);
    }
    if let Some(role) = any.downcast_ref::<ClusterRole>() {
        return check_role(authorizer, user, "", "clusterroles", &name, &role.rules);
    }
    if let Some(binding) = any.downcast_ref::<RoleBinding>() {
        if let Some(old) = old.and_then(|o| o.downcast_ref::<RoleBinding>()) {
            unchanged::<RoleBinding>(&old.role_ref, &binding.role_ref, &name)?;
        }
        return check_binding(
            authorizer,
            user,
            ns,
            "rolebindings",
            &name,
            &binding.role_ref,
        );
    }
    if let Some(binding) = any.downcast_ref::<ClusterRoleBinding>() {
        if let Some(old) = old.and_then(|o| o.downcast_ref::<ClusterRoleBinding>()) {
            unchanged::<ClusterRoleBinding>(&old.role_ref, &binding.role_ref, &name)?;
        }
        return check_binding(
            authorizer,
            user,
            "",
            "clusterrolebindings",
            &name,
            &binding.role_ref,
        );
    }
    Ok(())
}

fn unchanged<R: Resource>(old: &RoleRef, new: &RoleRef, name: &str) -> Result<(), ApiError> {
    let errors: Vec<FieldError> = rbac::validate_role_ref_unchanged(old, new);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(R::KIND, rbac::GROUP, name, &errors))
    }
}

fn allowed(
    authorizer: &Authorizer,
    user: &User,
    verb: &str,
    resource: &str,
    ns: &str,
    name: &str,
) -> bool {
    let attrs = user.resource_attributes(verb, rbac::GROUP, resource, "", ns, name);
    matches!(authorizer.authorize(&attrs), Decision::Allow(_))
}

fn refuse(user: &User, resource: &str, name: &str, why: String) -> ApiError {
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    ApiError::forbidden(
        format!(
            "{resource}.{} {name:?} is forbidden: user {:?} (groups=[{}]) {why}",
            rbac::GROUP,
            user.name,
            groups.join(" ")
        ),
        Some(Target {
            group: rbac::GROUP,
            kind: resource.to_string(),
            name: name.to_string(),
        }),
    )
}

fn not_held(missing: &[PolicyRule]) -> String {
    let rules: Vec<String> = missing.iter().map(PolicyRule::compact).collect();
    format!(
        "is attempting to grant RBAC permissions not currently held:\n{}",
        rules.join("\n")
    )
}

fn check_role(
    authorizer: &Authorizer,
    user: &User,
    ns: &str,
    resource: &str,
    name: &str,
    rules: &[PolicyRule],
) -> Result<(), ApiError> {
    if allowed(authorizer, user, "escalate", resource, ns, name) {
        return Ok(());
    }
    let owner = authorizer.rules_for(&user.name, &user.groups, ns);
    let missing = rbac::covers(&owner, rules);
    if missing.is_empty() {
        return Ok(());
    }
    Err(refuse(user, resource, name, not_held(&missing)))
}

fn check_binding(
    authorizer: &Authorizer,
    user: &User,
    ns: &str,
    resource: &str,
    name: &str,
    role_ref: &RoleRef,
) -> Result<(), ApiError> {
    let role_resource = match role_ref.kind.as_str() {
        "Role" => "roles",
        _ => "clusterroles",
    };
    if allowed(authorizer, user, "bind", role_resource, ns, &role_ref.name) {
        return Ok(());
    }
    let Some(rules) = authorizer.role_rules(role_ref, ns) else {
        return Err(refuse(
            user,
            resource,
            name,
            format!(
                "may not bind a role that does not exist: {role_resource}.{} {:?} not found",
                rbac::GROUP,
                role_ref.name
            ),
        ));
    };
    let owner = authorizer.rules_for(&user.name, &user.groups, ns);
    let missing = rbac::covers(&owner, &rules);
    if missing.is_empty() {
        return Ok(());
    }
    Err(refuse(user, resource, name, not_held(&missing)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::rbac::{Grant, Policy, Subject};

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            uid: String::new(),
            groups: vec![rbac::AUTHENTICATED_GROUP.into()],
        }
    }

    fn authorizer() -> Authorizer {
        let (roles, _) = rbac::bootstrap();
        let mut policy = Policy::default();
        for role in roles {
            policy
                .cluster_roles
                .insert(role.metadata.name.clone().unwrap_or_default(), role.rules);
        }
        let grant = |role: &str, who: &str| Grant {
            subjects: vec![Subject {
                kind: "User".into(),
                api_group: rbac::GROUP.into(),
                name: who.into(),
                namespace: String::new(),
            }],
            role_ref: RoleRef {
                api_group: rbac::GROUP.into(),
                kind: "ClusterRole".into(),
                name: role.into(),
            },
        };
        policy.insert_role_binding("shop", "a", grant("admin", "ann"));
        policy.insert_role_binding("shop", "e", grant("edit", "ed"));
        Authorizer::with_policy(policy)
    }

    fn binding(ns: &str, role: &str) -> RoleBinding {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "b", "namespace": ns},
            "subjects": [{"kind": "User", "apiGroup": rbac::GROUP, "name": "x"}],
            "roleRef": {"apiGroup": rbac::GROUP, "kind": "ClusterRole", "name": role},
        }))
        .unwrap()
    }

    #[test]
    fn namespace_admin_may_grant_what_they_hold_there_only() {
        let authz = authorizer();
        let ann = user("ann");
        check(&authz, &ann, Some("shop"), None, &binding("shop", "edit")).unwrap();
        let err = check(
            &authz,
            &ann,
            Some("shop"),
            None,
            &binding("shop", "cluster-admin"),
        )
        .unwrap_err();
        assert_eq!(err.code, http::StatusCode::FORBIDDEN);
        assert!(
            err.message.starts_with(
                "rolebindings.rbac.authorization.k8s.io \"b\" is forbidden: user \"ann\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"
            ),
            "{}",
            err.message
        );
        assert!(check(&authz, &ann, Some("other"), None, &binding("other", "edit")).is_err());
        // An editor holds no rbac permissions: may not hand out admin.
        assert!(
            check(
                &authz,
                &user("ed"),
                Some("shop"),
                None,
                &binding("shop", "admin")
            )
            .is_err()
        );
        assert!(
            check(
                &authz,
                &user("ed"),
                Some("shop"),
                None,
                &binding("shop", "view")
            )
            .is_ok()
        );
    }

    #[test]
    fn role_ref_is_immutable() {
        let authz = authorizer();
        let old = binding("shop", "view");
        let err = check(
            &authz,
            &user("ann"),
            Some("shop"),
            Some(&old),
            &binding("shop", "edit"),
        )
        .unwrap_err();
        assert_eq!(err.code, http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            err.message.contains("cannot change roleRef"),
            "{}",
            err.message
        );
    }

    #[test]
    fn roles_need_held_permissions() {
        let authz = authorizer();
        let role: Role = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r", "namespace": "shop"},
            "rules": [{"verbs": ["list"], "apiGroups": ["fedingress.io"], "resources": ["clusters/token"]}],
        }))
        .unwrap();
        assert!(check(&authz, &user("ann"), Some("shop"), None, &role).is_ok());
        assert!(check(&authz, &user("ed"), Some("shop"), None, &role).is_err());
    }
}
