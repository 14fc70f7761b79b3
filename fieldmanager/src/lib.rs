//! Server-side apply field management for fedingress: Kubernetes' structured-merge-diff
//! (SMD) over `serde_json` values, with the semantics kube-apiserver layers on top of it.
//!
//! # What it implements
//! - [`Schema`]: the merge schema of a kind, read from its OpenAPI v3 schema
//!   (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`).
//! - [`FieldSet`] and [`Path`]: SMD's `fieldpath.Set`, its FieldsV1 encoding (byte for
//!   byte as kube writes it) and its path printing.
//! - [`Managed`]: `metadata.managedFields` decoding, encoding (kube's order) and
//!   `decodeLiveOrNew` ([`Managed::for_write`]).
//! - [`update`]: a non-apply write (SMD `Updater.Update` with kube's
//!   managedFieldsUpdater, stripMetaManager, capManagersManager, skipNonAppliedManager).
//! - [`apply`]: server-side apply (SMD `Updater.Apply`: merge, prune, conflicts, force)
//!   with kube's lastAppliedManager/lastAppliedUpdater for kubectl's client-side
//!   annotation, and `before-first-apply` for objects without managers.
//! - Reset fields: a main-resource write ignores `status`; a `status` write touches only
//!   `status`; identity and server-set metadata are never owned.
//!
//! # What is left out, and why
//! - Version conversion: fedingress serves one version per kind, so every manager's set
//!   is read as if in the request's version (SMD converts to each manager's version).
//! - `reconcileManagedFieldsWithSchemaChanges` (re-reading sets after a field turned
//!   atomic or granular): our schemas change only with a new version.
//! - Defaulting of list-map keys from the schema (SMD accepts a missing key with a
//!   default); a missing key is an error here.
//! - Objects emptied by pruning: SMD leaves `null` where a map or list lost its last
//!   entry; here the field is dropped, as kube-apiserver's null pruning of structural
//!   objects ends up doing.
//!
//! Nothing here does I/O, logs or knows about HTTP: the API server decodes requests,
//! calls [`update`] or [`apply`], and stores the result.

pub mod apply;
mod cap;
mod compare;
mod conflict;
mod fields_v1;
mod last_applied;
pub mod managed;
mod merge;
pub mod path;
mod remove;
mod request;
pub mod schema;
mod scope;
pub mod set;
mod time;
mod tofieldset;
pub mod update;
mod value;
mod walk;

pub use apply::{Applied, ApplyError, apply};
pub use compare::Comparison;
pub use conflict::{Conflict, Conflicts};
pub use fields_v1::DecodeError;
pub use last_applied::LAST_APPLIED_ANNOTATION;
pub use managed::{Entry, Managed, Operation};
pub use path::{Path, PathElement};
pub use request::Request;
pub use schema::{ListType, Schema, SchemaError};
pub use set::FieldSet;
pub use update::update;
