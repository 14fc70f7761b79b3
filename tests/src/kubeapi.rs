//! A scripted Kubernetes API server over real HTTP on loopback, for end-to-end tests of
//! code that talks to Kubernetes through an unmodified kube-rs client.
//!
//! No real kube-apiserver can run on the test machines, and kube-rs's own
//! `tower_test::mock` stops short of the wire. [`FakeKubeApi`] speaks the wire protocol
//! kube-rs 5 uses: typed `Api<T>` get, list, create, replace, patch (server-side apply,
//! merge patch, JSON patch), delete and delete-collection, and `kube::runtime::watcher`
//! (paged initial list, then `watch=true&resourceVersion=N` streams of newline-delimited
//! `{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}`). Errors are
//! `Status` objects with kube-apiserver's reasons and message shapes. The test scripts
//! the cluster's side in-process: [`FakeKubeApi::put`] and [`FakeKubeApi::set_status`]
//! write as controllers would (EndpointSlices, Events, load-balancer status),
//! [`FakeKubeApi::requests`] and [`FakeKubeApi::verbs_used`] show what the client did,
//! [`FakeKubeApi::deny`] and [`FakeKubeApi::set_unavailable`] inject faults.
//!
//! # What it models
//! - Paths `/api/v1/...` and `/apis/{group}/{version}/...`, namespaced
//!   (`/namespaces/{ns}/{plural}[/{name}[/status]]`) and cluster-wide (`/{plural}`), for
//!   the types in [`resources::builtin`] plus any added with [`FakeKubeApi::add_resource`];
//!   an unknown path is a 404 `Status`. `GET /version` answers 1.33.
//! - One global resourceVersion: every write takes the next one; a write that changes
//!   nothing is a no-op (no new resourceVersion, no watch event). Create sets `uid` and
//!   `creationTimestamp`; `generation` starts at 1 and grows when `spec` changes.
//! - Optimistic concurrency: a PUT, merge patch or apply carrying a stale
//!   `metadata.resourceVersion` is a 409 Conflict; create of an existing name is a 409
//!   AlreadyExists; DELETE honours `preconditions`.
//! - Status subresources: for types that have one (Service, Ingress, ...), writes to the
//!   object keep the stored `status` and writes to `/status` change only `status`.
//! - Label selectors (equality and set based) and field selectors (any dotted path) on
//!   lists, watches and delete-collection; see [`selector`].
//! - Lists page with `limit`/`continue`; watches start at a resourceVersion (unset or `0`:
//!   the current objects as ADDED), send MODIFIED/DELETED for every later change (an
//!   object leaving the selection is DELETED, one entering it ADDED), BOOKMARKs when
//!   `allowWatchBookmarks=true` (every [`FakeKubeApi::set_bookmark_interval`], default
//!   1 s, when the watch moved past what the client knows, and at the end), the
//!   `sendInitialEvents` streaming list, and end after `timeoutSeconds`. A
//!   resourceVersion older than the kept history (1000 changes,
//!   [`FakeKubeApi::set_history_limit`], or everything before
//!   [`FakeKubeApi::compact`]) gets an `ERROR` event with a 410 Expired `Status`, as
//!   kube-apiserver sends it: inside a 200 stream.
//! - Server-side apply (`application/apply-patch+yaml`, `fieldManager` required, `force`)
//!   with a simplified field ownership in `managedFields`, one entry per manager and
//!   operation; see [`ownership`]: maps merge per key, lists are atomic, fields a
//!   manager stops applying are removed, conflicts with other managers are 409 unless
//!   forced. Updates (PUT, merge and JSON patch) move the fields they change to their
//!   manager (`fieldManager`, else the user agent's product name).
//! - Finalizers: deleting an object with finalizers sets `deletionTimestamp`; it is gone
//!   when a write empties `finalizers`. An immediate delete answers a `Status` Success.
//! - RBAC denial per (group, resource, verb), with kube-apiserver's 403 message, and a
//!   whole-server outage (503 `ServiceUnavailable`, open watches end).
//!
//! # What it does not model
//! Real structured-merge-diff (list merge keys, schema-driven atomicity), admission,
//! validation and defaulting (no `clusterIP` is assigned, any JSON is accepted), strategic
//! merge patch (415, as kube-apiserver answers for custom resources), authentication (the
//! kubeconfig's token is recorded, not checked), namespace existence and lifecycle,
//! garbage collection of owned objects, discovery (`/api`, `/apis`, OpenAPI), protobuf,
//! consistent snapshots for paged lists (a continued list shows the current objects),
//! and the kube-apiserver's per-type field-selector allow-lists.
//!
//! Note for tests of failure handling: kube-rs 5's default client retries 429, 503 and
//! 504 up to 15 times with exponential backoff from 5 ms (`Config::default_retry`), so
//! a request made while [`FakeKubeApi::set_unavailable`] is on returns the error only
//! after minutes unless the client turned retries off; with retries on, it succeeds
//! once the server is back.

pub mod ownership;
pub mod resources;
pub mod selector;
mod server;
pub mod status;
mod store;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use serde_json::Value;
use tokio::sync::watch;

pub use resources::ResourceType;
use server::{Faults, Shared, lock};
use store::{ObjectKey, Store};

/// The bearer token in the kubeconfig [`FakeKubeApi::write_kubeconfig`] writes.
pub const TOKEN: &str = "fedingress-fake-kube-token";

/// The user named in 403 messages unless [`FakeKubeApi::set_user`] says otherwise.
pub const DEFAULT_USER: &str = "system:serviceaccount:fedingress-system:fedingress-agent";

/// What kube-apiserver's authorizer would check for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacAttributes {
    /// API group; empty for the core group.
    pub group: String,
    /// `services`, or `services/status` for the subresource.
    pub resource: String,
    /// get, list, watch, create, update, patch, delete or deletecollection.
    pub verb: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// One HTTP request the server answered.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// Arrival order, from 0: `r.seq >= n` selects requests after the first `n`.
    pub seq: usize,
    pub method: String,
    /// The URL path, without the query.
    pub path: String,
    /// The raw (percent-encoded) query string; see [`RecordedRequest::param`].
    pub query: String,
    pub content_type: Option<String>,
    /// The request body as text (JSON, or YAML for an apply).
    pub body: String,
    /// The HTTP status answered (200 for a watch, whose errors come inside the stream).
    pub status: u16,
    /// `None` for paths that name no resource (and `/version`).
    pub rbac: Option<RbacAttributes>,
    pub user_agent: Option<String>,
    pub bearer_token: Option<String>,
}

impl RecordedRequest {
    /// A decoded query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        server::parse_query(&self.query)
            .into_iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value)
    }

    /// The body parsed as JSON.
    pub fn body_json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// The RBAC verb, if the request named a resource.
    pub fn verb(&self) -> Option<&str> {
        self.rbac.as_ref().map(|r| r.verb.as_str())
    }

    /// Whether this is a server-side apply.
    pub fn is_apply(&self) -> bool {
        self.method == "PATCH"
            && self
                .content_type
                .as_deref()
                .is_some_and(|c| c.starts_with("application/apply-patch+yaml"))
    }
}

/// The running fake; the server stops when this is dropped (or [`FakeKubeApi::stop`]).
pub struct FakeKubeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeKubeApi {
    /// Binds 127.0.0.1:0 (plain HTTP) and serves on the current tokio runtime.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake Kubernetes API on 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("the fake Kubernetes API's address");
        let store = Store::new(resources::builtin());
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            requests: Mutex::new(Vec::new()),
            request_count: watch::channel(0).0,
            faults: Mutex::new(Faults {
                denied: BTreeSet::new(),
                user: DEFAULT_USER.to_string(),
                bookmark_interval: Duration::from_secs(1),
            }),
            unavailable: watch::channel(false).0,
        });
        let task = tokio::spawn(server::serve(listener, Arc::clone(&shared)));
        Self { addr, shared, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig (cluster at [`FakeKubeApi::url`], a user with [`TOKEN`],
    /// current context with namespace `default`).
    pub fn write_kubeconfig(&self, path: &Path) {
        crate::write_kubeconfig(path, &self.url(), None, Some(TOKEN));
    }

    /// Stops serving and closes every connection (open watches end).
    pub fn stop(self) {
        drop(self);
    }

    fn resource(&self, name: &str) -> ResourceType {
        lock(&self.shared.store)
            .resource_named(name)
            .unwrap_or_else(|| panic!("the fake Kubernetes API knows no resource {name:?}"))
    }

    /// Adds a resource type (e.g. a custom resource) to serve.
    pub fn add_resource(&self, resource: ResourceType) {
        lock(&self.shared.store).resources.push(resource);
    }

    // ---- script: the cluster's side ------------------------------------------------

    /// Creates or replaces `object` (apiVersion, kind and metadata.name required;
    /// metadata.namespace for namespaced types) as a controller would, and returns the
    /// stored object. A replace keeps uid, creationTimestamp and managedFields, and keeps
    /// the stored `status` when `object` has none. Panics on an unknown kind.
    pub fn put(&self, object: Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let mut store = lock(&self.shared.store);
        let resource = store.resource_of(api_version, kind).unwrap_or_else(|| {
            panic!("put: the fake Kubernetes API knows no {api_version} {kind}")
        });
        store.put(&resource, object)
    }

    /// Replaces the status of an existing object (e.g. `{"loadBalancer":{"ingress":[..]}}`
    /// on a Service), as the controller owning it would; returns the stored object.
    /// `resource` is a kind or plural; `namespace` is empty for cluster-scoped types.
    /// Panics when the object does not exist.
    pub fn set_status(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
        status: Value,
    ) -> Value {
        let mut store = lock(&self.shared.store);
        let (group, _) = resources::split_api_version(api_version);
        let resource_type = store
            .resources
            .iter()
            .find(|r| r.group == group && r.is_named(resource))
            .cloned()
            .unwrap_or_else(|| {
                panic!("set_status: the fake Kubernetes API knows no {api_version} {resource}")
            });
        let key = ObjectKey::new(&resource_type, Some(namespace), name);
        store
            .set_status(&key, status)
            .unwrap_or_else(|| panic!("set_status: {resource} {namespace}/{name} does not exist"))
    }

    /// The stored object; `resource` is a plural, `plural.group` or kind.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = self.resource(resource);
        let key = ObjectKey::new(&resource, Some(namespace), name);
        lock(&self.shared.store).object(&key).cloned()
    }

    /// Every stored object of a type, across namespaces, ordered by namespace and name.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        let resource = self.resource(resource);
        lock(&self.shared.store).objects_of(&resource)
    }

    /// Deletes at once (finalizers are not waited for); returns the deleted object.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let resource = self.resource(resource);
        let key = ObjectKey::new(&resource, Some(namespace), name);
        lock(&self.shared.store).remove(&key)
    }

    /// The current (last written) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.store).resource_version()
    }

    /// Forgets the change history: watches and continue tokens from before now get 410
    /// Expired, and kube-rs's watcher re-lists.
    pub fn compact(&self) {
        lock(&self.shared.store).compact();
    }

    /// How many changes are kept for watches (default 1000).
    pub fn set_history_limit(&self, changes: usize) {
        lock(&self.shared.store).history_limit = changes.max(1);
    }

    /// How often an idle watch with bookmarks sends one (default 1 s; applies to watches
    /// opened afterwards).
    pub fn set_bookmark_interval(&self, interval: Duration) {
        lock(&self.shared.faults).bookmark_interval = interval;
    }

    /// Waits until `object` of `resource` exists and satisfies `predicate`.
    pub async fn wait_for_object(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        predicate: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let mut changes = lock(&self.shared.store).subscribe();
        let wait = async {
            loop {
                if let Some(object) = self.get(resource, namespace, name).filter(|o| predicate(o)) {
                    return object;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(object) => Ok(object),
            Err(_) => bail!(
                "timed out after {timeout:?} waiting for {resource} {namespace}/{name}; it is: {:?}",
                self.get(resource, namespace, name)
            ),
        }
    }

    // ---- what the client did -------------------------------------------------------

    /// Every request seen so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The (group, resource, verb) triples of every request that named a resource, to
    /// compare with a ClusterRole's rules. Resource is `plural` or `plural/status`.
    /// Requests that failed (403, 404, 503, ...) count too: they are what the client
    /// needs permission for.
    pub fn verbs_used(&self) -> BTreeSet<(String, String, String)> {
        lock(&self.shared.requests)
            .iter()
            .filter_map(|r| r.rbac.as_ref())
            .map(|r| (r.group.clone(), r.resource.clone(), r.verb.clone()))
            .collect()
    }

    /// The first request (already seen or arriving within `timeout`) that satisfies
    /// `predicate`.
    pub async fn wait_for_request(
        &self,
        predicate: impl Fn(&RecordedRequest) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<RecordedRequest> {
        let mut count = self.shared.request_count.subscribe();
        let wait = async {
            loop {
                if let Some(found) = lock(&self.shared.requests).iter().find(|r| predicate(r)) {
                    return found.clone();
                }
                if count.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(found) => Ok(found),
            Err(_) => {
                let seen: Vec<String> = self
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}?{} -> {}", r.method, r.path, r.query, r.status))
                    .collect();
                bail!(
                    "no matching request within {timeout:?}; seen:\n{}",
                    seen.join("\n")
                )
            }
        }
    }

    // ---- faults --------------------------------------------------------------------

    /// Answers `verb` on `resource` (`services`, `services/status`, `*`) in `group`
    /// (empty for core) with 403 Forbidden from now on. `verb` may be `*`.
    pub fn deny(&self, group: &str, resource: &str, verb: &str) {
        lock(&self.shared.faults)
            .denied
            .insert((group.into(), resource.into(), verb.into()));
    }

    /// Undoes [`FakeKubeApi::deny`].
    pub fn allow(&self, group: &str, resource: &str, verb: &str) {
        lock(&self.shared.faults)
            .denied
            .remove(&(group.into(), resource.into(), verb.into()));
    }

    /// The user named in 403 messages.
    pub fn set_user(&self, user: &str) {
        lock(&self.shared.faults).user = user.to_string();
    }

    /// While on, every request gets 503 ServiceUnavailable and open watches end.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.unavailable.send_replace(unavailable);
    }
}

impl Drop for FakeKubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}
