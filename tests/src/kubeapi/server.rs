//! The HTTP side: accepts connections, records every request, applies the injected
//! faults (503, 403), maps method + path + query to a verb on the store and streams
//! watches as newline-delimited JSON.

use std::collections::{BTreeSet, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::resources::ApiPath;
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{PatchType, Selection, Store, WriteOptions};
use super::{RbacAttributes, RecordedRequest};

pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// kube-apiserver's default for a watch without `timeoutSeconds` is 30-60 minutes.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Injected faults.
pub struct Faults {
    /// (group, resource, verb) triples answered with 403; `*` matches any resource or verb.
    pub denied: BTreeSet<(String, String, String)>,
    /// The user named in 403 messages.
    pub user: String,
    pub bookmark_interval: Duration,
}

/// Everything the server and the script share.
pub struct Shared {
    pub store: Mutex<Store>,
    pub requests: Mutex<Vec<RecordedRequest>>,
    /// The number of recorded requests, to wait on.
    pub request_count: watch::Sender<usize>,
    pub faults: Mutex<Faults>,
    pub unavailable: watch::Sender<bool>,
}

/// Locks, ignoring poisoning: a panicking test thread must not hide the state from the
/// server (or the other way round).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serves until the task is aborted; aborting drops every connection (and watch).
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = Arc::clone(&shared);
                        async move { Ok::<_, Infallible>(handle(shared, request).await) }
                    });
                    let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// `a=1&b=x%20y` → [("a","1"), ("b","x y")].
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// The RBAC verb kube-apiserver's authorizer sees for a request.
pub fn verb_of(
    method: &Method,
    path: &ApiPath,
    query: &[(String, String)],
) -> Option<&'static str> {
    let named = path.name.is_some();
    let watch = matches!(param(query, "watch"), Some("true" | "1"));
    Some(match *method {
        Method::GET if named => "get",
        Method::GET if watch => "watch",
        Method::GET => "list",
        Method::POST if !named => "create",
        Method::PUT if named => "update",
        Method::PATCH if named => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => return None,
    })
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut text = body.to_string();
    text.push('\n');
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(text)).boxed_unsync())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed_unsync()))
}

fn error_response(error: &ApiError) -> Response<Body> {
    json_response(error.code, &error.to_status())
}

fn header_str(parts: &http::request::Parts, name: header::HeaderName) -> Option<String> {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().unwrap_or_default().to_string();
    let query = parse_query(&raw_query);
    let api_path = ApiPath::parse(&path, &lock(&shared.store).resources);
    let rbac = api_path.as_ref().and_then(|api| {
        Some(RbacAttributes {
            group: api.resource.group.clone(),
            resource: api.rbac_resource(),
            verb: verb_of(&parts.method, api, &query)?.to_string(),
            namespace: api.namespace.clone(),
            name: api.name.clone(),
        })
    });
    let content_type = header_str(&parts, header::CONTENT_TYPE);
    let user_agent = header_str(&parts, header::USER_AGENT);
    let request = RequestParts {
        query: &query,
        content_type: content_type.as_deref(),
        user_agent: user_agent.as_deref(),
        body: &body,
    };
    let response = respond(&shared, &path, api_path, rbac.as_ref(), &request);
    let mut requests = lock(&shared.requests);
    let recorded = RecordedRequest {
        seq: requests.len(),
        method: parts.method.to_string(),
        path,
        query: raw_query,
        content_type,
        body: String::from_utf8_lossy(&body).into_owned(),
        status: response.status().as_u16(),
        rbac,
        user_agent,
        bearer_token: header_str(&parts, header::AUTHORIZATION)
            .and_then(|v| v.strip_prefix("Bearer ").map(str::to_string)),
    };
    requests.push(recorded);
    shared.request_count.send_replace(requests.len());
    drop(requests);
    response
}

/// The parts of a request the verbs read.
struct RequestParts<'a> {
    query: &'a [(String, String)],
    content_type: Option<&'a str>,
    user_agent: Option<&'a str>,
    body: &'a [u8],
}

fn respond(
    shared: &Arc<Shared>,
    path: &str,
    api_path: Option<ApiPath>,
    rbac: Option<&RbacAttributes>,
    request: &RequestParts<'_>,
) -> Response<Body> {
    if *shared.unavailable.borrow() {
        return error_response(&ApiError::unavailable());
    }
    if path == "/version" {
        return json_response(200, &version());
    }
    let Some(api) = api_path else {
        return error_response(&ApiError::unknown_path());
    };
    let Some(rbac) = rbac else {
        return error_response(&ApiError::method_not_allowed());
    };
    {
        let faults = lock(&shared.faults);
        let denied = faults.denied.iter().any(|(group, resource, verb)| {
            *group == rbac.group
                && (resource == "*" || *resource == rbac.resource)
                && (verb == "*" || *verb == rbac.verb)
        });
        if denied {
            return error_response(&ApiError::forbidden(
                &api.resource,
                &rbac.resource,
                &rbac.verb,
                &faults.user,
                api.namespace.as_deref(),
                api.name.as_deref(),
            ));
        }
    }
    match verb(shared, &api, &rbac.verb, request) {
        Ok(response) => response,
        Err(error) => error_response(&error),
    }
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-fedingress-fake",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn selection(api: &ApiPath, query: &[(String, String)]) -> Result<Selection, ApiError> {
    Ok(Selection {
        resource: api.resource.clone(),
        namespace: api.namespace.clone(),
        labels: LabelSelector::parse(param(query, "labelSelector").unwrap_or_default())
            .map_err(ApiError::bad_request)?,
        fields: FieldSelector::parse(param(query, "fieldSelector").unwrap_or_default())
            .map_err(ApiError::bad_request)?,
    })
}

fn parse_body(body: &[u8], yaml: bool) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    match serde_json::from_slice(body) {
        Ok(value) => Ok(value),
        Err(_) if yaml => yaml_serde::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
        Err(e) => Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {e}"
        ))),
    }
}

fn verb(
    shared: &Arc<Shared>,
    api: &ApiPath,
    verb: &str,
    request: &RequestParts<'_>,
) -> Result<Response<Body>, ApiError> {
    let query = request.query;
    let namespace = api.namespace.as_deref();
    let name = api.name.as_deref().unwrap_or_default();
    let status_subresource = api.subresource.is_some();
    let options = WriteOptions {
        manager: param(query, "fieldManager")
            .map(str::to_string)
            .or_else(|| {
                // kube-apiserver names an update's manager after the user agent.
                let agent = request.user_agent?.split('/').next()?;
                (verb != "patch" || request.content_type != Some("application/apply-patch+yaml"))
                    .then(|| agent.to_string())
            }),
        force: param(query, "force") == Some("true"),
        dry_run: param(query, "dryRun").is_some_and(|v| !v.is_empty()),
    };
    let mut store = lock(&shared.store);
    let (code, body) = match verb {
        "get" => (200, store.get(&api.resource, namespace, name)?),
        "list" => {
            let limit = param(query, "limit")
                .map(str::parse)
                .transpose()
                .map_err(|_| ApiError::bad_request("limit must be a number"))?
                .unwrap_or(0);
            let selection = selection(api, query)?;
            (
                200,
                store.list(
                    &selection,
                    limit,
                    param(query, "continue").filter(|c| !c.is_empty()),
                )?,
            )
        }
        "watch" => {
            let selection = selection(api, query)?;
            return watch_response(shared, &store, selection, query);
        }
        "create" => {
            let body = parse_body(request.body, false)?;
            (201, store.create(&api.resource, namespace, body, &options)?)
        }
        "update" => {
            let body = parse_body(request.body, false)?;
            (
                200,
                store.replace(
                    &api.resource,
                    namespace,
                    name,
                    status_subresource,
                    body,
                    &options,
                )?,
            )
        }
        "patch" => {
            let content_type = request.content_type.unwrap_or_default();
            let media = content_type.split(';').next().unwrap_or_default().trim();
            let patch_type = match media {
                "application/apply-patch+yaml" => PatchType::Apply,
                "application/merge-patch+json" => PatchType::Merge,
                "application/json-patch+json" => PatchType::Json,
                _ => return Err(ApiError::unsupported_media_type(content_type)),
            };
            let body = parse_body(request.body, patch_type == PatchType::Apply)?;
            let existed = store.get(&api.resource, namespace, name).is_ok();
            let object = store.patch(
                &api.resource,
                namespace,
                name,
                status_subresource,
                patch_type,
                body,
                &options,
            )?;
            (if existed { 200 } else { 201 }, object)
        }
        "delete" => {
            let body = parse_body(request.body, false)?;
            (
                200,
                store.delete(&api.resource, namespace, name, &body, options.dry_run)?,
            )
        }
        "deletecollection" => {
            let selection = selection(api, query)?;
            (200, store.delete_collection(&selection, options.dry_run)?)
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    Ok(json_response(code, &body))
}

fn watch_response(
    shared: &Arc<Shared>,
    store: &Store,
    selection: Selection,
    query: &[(String, String)],
) -> Result<Response<Body>, ApiError> {
    let rv =
        match param(query, "resourceVersion").filter(|v| !v.is_empty()) {
            None => None,
            Some(text) => Some(text.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {text:?}"))
            })?),
        };
    let timeout = param(query, "timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_WATCH_TIMEOUT);
    let bookmarks = param(query, "allowWatchBookmarks") == Some("true");
    let initial_events = param(query, "sendInitialEvents") == Some("true");
    let mut state = WatchState {
        shared: Arc::clone(shared),
        pending: VecDeque::new(),
        rv: 0,
        reported: 0,
        bookmarks,
        deadline: tokio::time::Instant::now() + timeout,
        changes: store.subscribe(),
        unavailable: shared.unavailable.subscribe(),
        interval: lock(&shared.faults).bookmark_interval,
        done: false,
        selection,
    };
    let from = if initial_events { None } else { rv };
    match store.watch_start(&state.selection, from) {
        Ok((events, rv)) => {
            state.reported = from.unwrap_or(0);
            state.push_events(events);
            state.rv = rv;
            if initial_events {
                let mut end = state.selection.bookmark(rv);
                end["object"]["metadata"]["annotations"] =
                    json!({"k8s.io/initial-events-end": "true"});
                state.pending.push_back(end);
            }
        }
        Err(error) => {
            // kube-apiserver answers a too-old resourceVersion inside the stream.
            state
                .pending
                .push_back(json!({"type": "ERROR", "object": error.to_status()}));
            state.done = true;
        }
    }
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        let line = state.next_line().await?;
        Some((Ok::<_, Infallible>(Frame::data(line)), state))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(BodyExt::boxed_unsync(StreamBody::new(stream)))
        .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))
}

/// One open watch.
struct WatchState {
    shared: Arc<Shared>,
    selection: Selection,
    pending: VecDeque<Value>,
    /// The watch has seen every change up to here.
    rv: u64,
    /// The resourceVersion the client last learnt (through an event or a bookmark).
    reported: u64,
    bookmarks: bool,
    deadline: tokio::time::Instant,
    changes: watch::Receiver<u64>,
    unavailable: watch::Receiver<bool>,
    interval: Duration,
    done: bool,
}

enum Wake {
    Changed,
    Closed,
    Deadline,
    Tick,
}

impl WatchState {
    async fn next_line(&mut self) -> Option<Bytes> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                let mut line = event.to_string();
                line.push('\n');
                return Some(Bytes::from(line));
            }
            if self.done {
                return None;
            }
            let wake = tokio::select! {
                changed = self.changes.changed() => if changed.is_ok() { Wake::Changed } else { Wake::Closed },
                _ = tokio::time::sleep_until(self.deadline) => Wake::Deadline,
                _ = tokio::time::sleep(self.interval) => Wake::Tick,
                _ = async { let _ = self.unavailable.wait_for(|down| *down).await; } => Wake::Closed,
            };
            match wake {
                Wake::Changed => self.catch_up(),
                Wake::Closed => self.done = true,
                Wake::Deadline => {
                    self.catch_up();
                    self.bookmark();
                    self.done = true;
                }
                Wake::Tick => {
                    self.catch_up();
                    self.bookmark();
                }
            }
        }
    }

    fn catch_up(&mut self) {
        let result = lock(&self.shared.store).events_since(&self.selection, self.rv);
        match result {
            Ok((events, rv)) => {
                self.push_events(events);
                self.rv = rv;
            }
            Err(error) => {
                self.pending
                    .push_back(json!({"type": "ERROR", "object": error.to_status()}));
                self.done = true;
            }
        }
    }

    /// Queues events; the client learns the resourceVersion of the last one.
    fn push_events(&mut self, events: Vec<Value>) {
        let last = events.last().and_then(|event| {
            event["object"]["metadata"]["resourceVersion"]
                .as_str()?
                .parse::<u64>()
                .ok()
        });
        if let Some(rv) = last {
            self.reported = self.reported.max(rv);
        }
        self.pending.extend(events);
    }

    /// A BOOKMARK when the watch has moved past what the client knows.
    fn bookmark(&mut self) {
        if self.bookmarks && !self.done && self.rv > self.reported {
            self.pending.push_back(self.selection.bookmark(self.rv));
            self.reported = self.rv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = parse_query(
            "labelSelector=app%3Dweb%2Ctier%21%3Dx&watch=true&fieldSelector=metadata.name%3Da+b&x",
        );
        assert_eq!(param(&q, "labelSelector"), Some("app=web,tier!=x"));
        assert_eq!(param(&q, "watch"), Some("true"));
        assert_eq!(param(&q, "fieldSelector"), Some("metadata.name=a b"));
        assert_eq!(param(&q, "x"), Some(""));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
