//! deletecollection: every object of a kind (in a namespace) matching a filter, deleted
//! one by one with the same rules as a single delete (finalizers, preconditions, dry
//! run), as kube-apiserver's generic registry does.

use fedingress_api::{Resource, Time};
use fedingress_store::Revision;
use http::StatusCode;

use super::{DeletePreconditions, Filter, Registry};
use crate::status::ApiError;

/// What a deletecollection did.
pub struct DeletedCollection<R> {
    /// The objects deleted, or (those with finalizers) marked for deletion, in key
    /// order; each as [`Registry::delete`] returned it.
    pub items: Vec<R>,
    /// The revision of the list the matching objects were taken from.
    pub resource_version: Revision,
}

impl Registry {
    /// Deletes every object of kind `R` in `namespace` (all of a cluster-scoped kind)
    /// that matches `filter` at the moment of the call.
    ///
    /// # Guarantees
    /// Each object goes through [`Registry::delete`]: with finalizers left it only gets
    /// a deletionTimestamp; `preconditions` and `dry_run` apply to each. An object
    /// deleted by someone else meanwhile is skipped, not an error (kube does the same).
    /// Objects created after the list are not deleted.
    ///
    /// # Errors
    /// The first failed delete stops the call (objects deleted before it stay
    /// deleted), as kube's DeleteCollection does.
    pub async fn delete_collection<R: Resource>(
        &self,
        namespace: Option<&str>,
        filter: &Filter,
        preconditions: &DeletePreconditions,
        now: Time,
        dry_run: bool,
    ) -> Result<DeletedCollection<R>, ApiError> {
        let page = self.list::<R>(namespace, filter, 0, None).await?;
        let mut items = Vec::with_capacity(page.items.len());
        for object in page.items {
            let meta = object.metadata();
            let name = meta.name.clone().unwrap_or_default();
            let object_namespace = meta.namespace.clone();
            match self
                .delete::<R>(
                    object_namespace.as_deref(),
                    &name,
                    preconditions,
                    now,
                    dry_run,
                )
                .await
            {
                Ok(deleted) => items.push(deleted),
                Err(error) if error.code == StatusCode::NOT_FOUND => {}
                Err(error) => return Err(error),
            }
        }
        tracing::debug!(
            resource = R::PLURAL,
            namespace = namespace.unwrap_or_default(),
            deleted = items.len(),
            dry_run,
            "collection deleted"
        );
        Ok(DeletedCollection {
            items,
            resource_version: page.resource_version,
        })
    }
}
