//! The name of one FederatedIngress everywhere past its own object: [`IngressKey`]
//! (namespace and name).
//!
//! Conflicts ([`crate::conflict`]) and plans ([`crate::plan`]) are keyed by it, so it
//! sits below both; the agent protocol's users import it as `plan::IngressKey`.

use serde::{Deserialize, Serialize};

use crate::ingress::FederatedIngress;

/// Identifies a FederatedIngress.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct IngressKey {
    pub namespace: String,
    pub name: String,
}

impl IngressKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of `ingress` (empty namespace or name when unset).
    pub fn of(ingress: &FederatedIngress) -> Self {
        Self::new(
            ingress.metadata.namespace_str(),
            ingress.metadata.name_str(),
        )
    }
}

impl std::fmt::Display for IngressKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
