//! Writing to the member cluster: server-side apply of the rendered objects (field
//! manager [`FIELD_MANAGER`], `force`, as controllers do), an ownership check before
//! every write, and garbage collection of owned objects the plan no longer holds.
//!
//! # Guarantees
//!
//! - An object that exists without `app.kubernetes.io/managed-by=fedingress` is never
//!   written or deleted: the clash is an [`ApplyError::Foreign`] naming it.
//! - Deletes carry the owned object's uid as a precondition, so an object re-created
//!   by someone else under the same name in between is left alone.
//! - Garbage collection runs only when the stores of owned kinds have listed once, so a
//!   watch that never worked cannot make the driver forget what it owns. It deletes the
//!   owned objects of the stores the plan no longer holds, and (the driver adds them)
//!   objects it applied itself that the watches have not delivered yet, so that a plan
//!   dropping what the one before added leaves nothing behind.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::render::{
    Desired, FIELD_MANAGER, Kind, MANAGED_BY, MANAGED_BY_LABEL, OWNER_LABEL, ObjectRef,
};
use super::world::{World, describe_kube_error};

/// Why one object could not be written or deleted.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "{kind} {namespace}/{name} exists and is not this agent's (no label {MANAGED_BY_LABEL}={MANAGED_BY}, or another {OWNER_LABEL}); rename or remove it"
    )]
    Foreign {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("{verb} {kind} {namespace}/{name}: {message}")]
    Api {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        message: String,
    },
}

impl ApplyError {
    fn api(verb: &'static str, object: &ObjectRef, error: &kube::Error) -> Self {
        ApplyError::Api {
            verb,
            kind: object.kind.as_str(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            message: describe_kube_error(error),
        }
    }
}

/// Writes objects to the member cluster.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    world: Arc<World>,
    /// The `fedingress.io/owner` value of this agent's objects.
    owner: Option<String>,
}

impl Applier {
    pub fn new(client: Client, world: Arc<World>, owner: Option<String>) -> Self {
        Applier {
            client,
            world,
            owner,
        }
    }

    fn owns(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        is_owned(labels, self.owner.as_deref())
    }

    /// Server-side applies `desired` unless an object of that name exists that
    /// fedingress does not manage.
    pub async fn apply(&self, desired: &Desired) -> Result<(), ApplyError> {
        match desired {
            Desired::Ingress(object) => self.apply_one(desired.object_ref(), object).await,
            Desired::Service(object) => self.apply_one(desired.object_ref(), object).await,
            Desired::ConfigMap(object) => self.apply_one(desired.object_ref(), object).await,
            Desired::Deployment(object) => self.apply_one(desired.object_ref(), object).await,
            Desired::PodDisruptionBudget(object) => {
                self.apply_one(desired.object_ref(), object).await
            }
        }
    }

    async fn apply_one<K>(&self, target: ObjectRef, object: &K) -> Result<(), ApplyError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Serialize + Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &target.namespace);
        if !self.owned_or_absent(&target, &api).await? {
            return Err(ApplyError::Foreign {
                kind: target.kind.as_str(),
                namespace: target.namespace.clone(),
                name: target.name.clone(),
            });
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&target.name, &params, &Patch::Apply(object))
            .await
            .map(|_| ())
            .map_err(|e| ApplyError::api("applying", &target, &e))
    }

    /// Whether the object is absent or carries the managed-by label: from the watch
    /// store when it has the object, else from a GET (the stores of every kind but
    /// Services only hold managed objects).
    async fn owned_or_absent<K>(&self, target: &ObjectRef, api: &Api<K>) -> Result<bool, ApplyError>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        if let Some(labels) = self.stored_labels(target) {
            return Ok(self.owns(labels.as_ref()));
        }
        match api.get_opt(&target.name).await {
            Ok(None) => Ok(true),
            Ok(Some(existing)) => Ok(self.owns(existing.meta().labels.as_ref())),
            Err(e) => Err(ApplyError::api("reading", target, &e)),
        }
    }

    /// Whether the watches have delivered `target` (in the stores).
    pub fn stored(&self, target: &ObjectRef) -> bool {
        self.stored_labels(target).is_some()
    }

    fn stored_labels(
        &self,
        target: &ObjectRef,
    ) -> Option<Option<std::collections::BTreeMap<String, String>>> {
        let (namespace, name) = (&target.namespace, &target.name);
        match target.kind {
            Kind::Service => self
                .world
                .service(namespace, name)
                .map(|o| o.metadata.labels.clone()),
            Kind::Ingress => self
                .world
                .ingress(namespace, name)
                .map(|o| o.metadata.labels.clone()),
            Kind::ConfigMap => self
                .world
                .config_map(namespace, name)
                .map(|o| o.metadata.labels.clone()),
            Kind::Deployment => self
                .world
                .deployment(namespace, name)
                .map(|o| o.metadata.labels.clone()),
            Kind::PodDisruptionBudget => self
                .world
                .disruption_budget(namespace, name)
                .map(|o| o.metadata.labels.clone()),
        }
    }

    /// Owned objects in the stores that `keep` does not hold, sorted.
    pub fn garbage(&self, keep: &BTreeSet<ObjectRef>) -> Vec<(ObjectRef, Option<String>)> {
        let mut out = Vec::new();
        let mut consider = |kind: Kind, meta: &kube::api::ObjectMeta| {
            if !self.owns(meta.labels.as_ref()) {
                return;
            }
            let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
                return;
            };
            let object = ObjectRef {
                kind,
                namespace: namespace.clone(),
                name: name.clone(),
            };
            if !keep.contains(&object) && meta.deletion_timestamp.is_none() {
                out.push((object, meta.uid.clone()));
            }
        };
        for o in self.world.services.state() {
            consider(Kind::Service, &o.metadata);
        }
        for o in self.world.ingresses.state() {
            consider(Kind::Ingress, &o.metadata);
        }
        for o in self.world.config_maps.state() {
            consider(Kind::ConfigMap, &o.metadata);
        }
        for o in self.world.deployments.state() {
            consider(Kind::Deployment, &o.metadata);
        }
        for o in self.world.disruption_budgets.state() {
            consider(Kind::PodDisruptionBudget, &o.metadata);
        }
        out.sort();
        out
    }

    /// Deletes an owned object (uid precondition); an object already gone is fine.
    pub async fn delete(&self, object: &ObjectRef, uid: Option<String>) -> Result<(), ApplyError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let result = match object.kind {
            Kind::Service => self.delete_one::<Service>(object, &params).await,
            Kind::Ingress => self.delete_one::<Ingress>(object, &params).await,
            Kind::ConfigMap => self.delete_one::<ConfigMap>(object, &params).await,
            Kind::Deployment => self.delete_one::<Deployment>(object, &params).await,
            Kind::PodDisruptionBudget => {
                self.delete_one::<PodDisruptionBudget>(object, &params)
                    .await
            }
        };
        match result {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(ApplyError::api("deleting", object, &e)),
        }
    }
}

impl Applier {
    async fn delete_one<K>(&self, object: &ObjectRef, params: &DeleteParams) -> kube::Result<()>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + Debug,
        K::DynamicType: Default,
    {
        Api::<K>::namespaced(self.client.clone(), &object.namespace)
            .delete(&object.name, params)
            .await
            .map(|_| ())
    }
}

/// Whether labels say this agent owns the object: managed by fedingress, and the
/// owner label is `owner` — or absent (objects written before the label existed are
/// adopted, and get it with the next apply).
pub fn is_owned(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    owner: Option<&str>,
) -> bool {
    let Some(labels) = labels else {
        return false;
    };
    labels
        .get(MANAGED_BY_LABEL)
        .is_some_and(|v| v == MANAGED_BY)
        && match (owner, labels.get(OWNER_LABEL)) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => true,
        }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn ownership_needs_the_managed_by_label_and_our_owner_or_none() {
        let managed = (MANAGED_BY_LABEL, MANAGED_BY);
        let ours = Some("eu-west");
        assert!(is_owned(
            Some(&labels(&[managed, (OWNER_LABEL, "eu-west")])),
            ours
        ));
        // Written before the owner label existed: adopted.
        assert!(is_owned(Some(&labels(&[managed])), ours));
        assert!(!is_owned(
            Some(&labels(&[managed, (OWNER_LABEL, "us-east")])),
            ours
        ));
        assert!(!is_owned(Some(&labels(&[(OWNER_LABEL, "eu-west")])), ours));
        assert!(!is_owned(
            Some(&labels(&[(MANAGED_BY_LABEL, "helm")])),
            ours
        ));
        assert!(!is_owned(None, ours));
    }
}
