//! A local fake of the Google Cloud DNS REST API (v1), for the Cloud DNS provider's
//! tests through the real `google-cloud-dns-v1` client. Google ships no Cloud DNS
//! emulator, so this one is written from Google's public reference:
//!
//! - resources and fields: <https://cloud.google.com/dns/docs/reference/rest/v1/resourceRecordSets>
//!   (ResourceRecordSet, RRSetRoutingPolicy with `geo`, `wrr`, `primaryBackup`,
//!   GeoPolicyItem, WrrPolicyItem, PrimaryBackupPolicy, HealthCheckTargets);
//! - `rrsets.list` (`maxResults`, `pageToken`, `name`, `type`):
//!   <https://cloud.google.com/dns/docs/reference/rest/v1/resourceRecordSets/list>;
//! - `changes.create` ("atomically updates the ResourceRecordSet collection"; deletions
//!   "must match existing data exactly") and `changes.get`:
//!   <https://cloud.google.com/dns/docs/reference/rest/v1/changes>;
//! - `managedZones.get`: <https://cloud.google.com/dns/docs/reference/rest/v1/managedZones/get>;
//! - routing policies and health checks (WRR and geo cannot be combined; external
//!   endpoints are health-checked with a health check named in the policy; geo items are
//!   Google Cloud regions): <https://cloud.google.com/dns/docs/routing-policies-overview>;
//! - the error body (`{"error": {"code", "message", "status", "errors": [{"domain",
//!   "reason", "message"}]}}`, `rateLimitExceeded` with 429):
//!   <https://cloud.google.com/apis/design/errors> and
//!   <https://cloud.google.com/dns/docs/troubleshooting>.
//!
//! # Rules the fake enforces on `changes.create`
//!
//! The change is atomic: either every deletion and addition applies, or none. Deletions
//! apply first, then additions, so a replacement is a deletion and an addition of the
//! same name and type in one change.
//! - A deletion must equal the stored record set exactly (name, type, ttl, rrdatas,
//!   routing policy): otherwise 412 `conditionNotMet`.
//! - An addition must not exist (after the deletions): otherwise 409 `alreadyExists`.
//! - A record set has `rrdatas` or a `routingPolicy`, never both nor neither (400
//!   `invalid`); a routing policy holds exactly one of `geo`, `wrr`, `primaryBackup`.
//! - Geo items need a `location`, unique within the policy; wrr items a `weight` ≥ 0;
//!   every item needs `rrdatas` or `healthCheckedTargets`; `primaryBackup` needs
//!   `primaryTargets` and `backupGeoTargets`; `trickleTraffic` is within 0..=1.
//! - `healthCheckedTargets` only for A and AAAA; external endpoints need the policy's
//!   `healthCheck` (a public zone checks them with that health check).
//! - A/AAAA data must be IPv4/IPv6 addresses; a CNAME holds one rrdata and shares its
//!   name with no other type (`cnameResourceRecordSetConflict`); names end in the zone's
//!   `dnsName`; no duplicate (name, type) within additions or within deletions.
//!
//! # Test hooks
//!
//! Every request is recorded with its JSON body ([`CloudDnsFake::requests`]);
//! [`CloudDnsFake::throttle`] answers the next N requests with 429
//! `rateLimitExceeded`, [`CloudDnsFake::unavailable`] the next N with 503
//! `backendError`; [`CloudDnsFake::refuse_name`] answers 403 `forbidden` to every
//! change touching a name (as an IAM condition on record names would); [`put_rrset`]
//! and [`delete_rrset`] edit the zone behind the provider's back (drift).
//!
//! [`put_rrset`]: CloudDnsFake::put_rrset
//! [`delete_rrset`]: CloudDnsFake::delete_rrset

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// The JSON body, if any.
    pub body: Option<Value>,
}

struct Zone {
    project: String,
    name: String,
    /// Fully qualified, with the trailing dot.
    dns_name: String,
    /// (name, type) → the record set as stored (its JSON).
    rrsets: BTreeMap<(String, String), Value>,
    changes: Vec<Value>,
}

struct State {
    zone: Zone,
    requests: Vec<Recorded>,
    throttle: usize,
    unavailable: usize,
    refused: BTreeSet<String>,
    page_size: usize,
}

/// The running fake; it stops (closing its connections) when dropped.
pub struct CloudDnsFake {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl CloudDnsFake {
    /// Serves one public managed zone `zone` (`dns_name`, e.g. `example.com`) of
    /// `project` on 127.0.0.1:0, on the current tokio runtime. The zone starts with the
    /// NS and SOA record sets Cloud DNS creates with every zone.
    pub async fn start(project: &str, zone: &str, dns_name: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the Cloud DNS fake on 127.0.0.1:0");
        let addr = listener.local_addr().expect("the Cloud DNS fake's address");
        let dns_name = format!("{}.", dns_name.trim_end_matches('.'));
        let mut rrsets = BTreeMap::new();
        rrsets.insert(
            (dns_name.clone(), "NS".to_string()),
            json!({"kind": "dns#resourceRecordSet", "name": dns_name, "type": "NS", "ttl": 21600,
                   "rrdatas": ["ns-cloud-a1.googledomains.com.", "ns-cloud-a2.googledomains.com."]}),
        );
        rrsets.insert(
            (dns_name.clone(), "SOA".to_string()),
            json!({"kind": "dns#resourceRecordSet", "name": dns_name, "type": "SOA", "ttl": 21600,
                   "rrdatas": ["ns-cloud-a1.googledomains.com. cloud-dns-hostmaster.google.com. 1 21600 3600 259200 300"]}),
        );
        let state = Arc::new(Mutex::new(State {
            zone: Zone {
                project: project.to_string(),
                name: zone.to_string(),
                dns_name,
                rrsets,
                changes: Vec::new(),
            },
            requests: Vec::new(),
            throttle: 0,
            unavailable: 0,
            refused: BTreeSet::new(),
            page_size: 100,
        }));
        let task = tokio::spawn(serve(listener, Arc::clone(&state)));
        Self { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`, for `dns.providers[].endpointUrl`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).requests.clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.state).requests.clear();
    }

    /// The bodies of the `changes.create` requests so far.
    pub fn change_bodies(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/changes"))
            .filter_map(|r| r.body)
            .collect()
    }

    /// Answers the next `n` requests with 429 `rateLimitExceeded`.
    pub fn throttle(&self, n: usize) {
        lock(&self.state).throttle = n;
    }

    /// Answers the next `n` requests with 503 `backendError` (after any throttled ones).
    pub fn unavailable(&self, n: usize) {
        lock(&self.state).unavailable = n;
    }

    /// Answers 403 `forbidden` to every change that adds or deletes a record set named
    /// `name` (fully qualified, with or without the trailing dot).
    pub fn refuse_name(&self, name: &str) {
        let name = format!("{}.", name.trim_end_matches('.'));
        lock(&self.state).refused.insert(name);
    }

    /// At most this many record sets per `rrsets.list` page when the request names no
    /// `maxResults` (Google's own default is larger; small pages exercise paging).
    pub fn set_page_size(&self, n: usize) {
        lock(&self.state).page_size = n.max(1);
    }

    /// Every stored record set, sorted by (name, type).
    pub fn rrsets(&self) -> Vec<Value> {
        lock(&self.state).zone.rrsets.values().cloned().collect()
    }

    /// The stored record set `name` (with or without the trailing dot) of `type_`.
    pub fn rrset(&self, name: &str, type_: &str) -> Option<Value> {
        let name = format!("{}.", name.trim_end_matches('.'));
        lock(&self.state)
            .zone
            .rrsets
            .get(&(name, type_.to_string()))
            .cloned()
    }

    /// Creates or replaces a record set behind the provider's back (drift, or a record
    /// set someone else owns). `rrset` is its JSON; `kind` is added.
    pub fn put_rrset(&self, mut rrset: Value) {
        rrset["kind"] = json!("dns#resourceRecordSet");
        let key = (
            rrset["name"].as_str().unwrap_or_default().to_string(),
            rrset["type"].as_str().unwrap_or_default().to_string(),
        );
        lock(&self.state).zone.rrsets.insert(key, rrset);
    }

    /// Deletes a record set behind the provider's back.
    pub fn delete_rrset(&self, name: &str, type_: &str) -> Option<Value> {
        let name = format!("{}.", name.trim_end_matches('.'));
        lock(&self.state)
            .zone
            .rrsets
            .remove(&(name, type_.to_string()))
    }
}

impl Drop for CloudDnsFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let state = Arc::clone(&state);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = Arc::clone(&state);
                        async move { Ok::<_, Infallible>(handle(&state, request).await) }
                    });
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let _ = builder
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

type Answer = Response<Full<Bytes>>;

fn answer(status: StatusCode, body: &Value) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    response
}

/// Google's error body: `{"error": {"code", "message", "errors": [..], "status"}}`.
fn error(status: StatusCode, reason: &str, message: &str) -> Answer {
    let grpc = match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ALREADY_EXISTS",
        412 => "FAILED_PRECONDITION",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    let domain = if reason == "rateLimitExceeded" {
        "usageLimits"
    } else {
        "global"
    };
    answer(
        status,
        &json!({"error": {
            "code": status.as_u16(),
            "message": message,
            "errors": [{"message": message, "domain": domain, "reason": reason}],
            "status": grpc,
        }}),
    )
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(state: &Mutex<State>, request: Request<hyper::body::Incoming>) -> Answer {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let query = parse_query(request.uri().query().unwrap_or_default());
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid", &format!("body: {e}")),
    };
    let body: Option<Value> = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => Some(v),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "parseError",
                    &format!("Invalid JSON payload received. {e}"),
                );
            }
        }
    };
    let mut state = lock(state);
    state.requests.push(Recorded {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        body: body.clone(),
    });
    if state.throttle > 0 {
        state.throttle -= 1;
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "rateLimitExceeded",
            "Rate Limit Exceeded",
        );
    }
    if state.unavailable > 0 {
        state.unavailable -= 1;
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "backendError",
            "Backend Error",
        );
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (project, zone, rest) = match segments.as_slice() {
        [
            "dns",
            "v1",
            "projects",
            project,
            "managedZones",
            zone,
            rest @ ..,
        ] => (*project, *zone, rest),
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                "notFound",
                &format!("The requested URL {path} was not found on this server."),
            );
        }
    };
    if project != state.zone.project {
        return error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("The 'parameters.project' resource named '{project}' does not exist."),
        );
    }
    if zone != state.zone.name {
        return error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("The 'parameters.managedZone' resource named '{zone}' does not exist."),
        );
    }
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    match (method.as_str(), rest) {
        ("GET", []) => answer(
            StatusCode::OK,
            &json!({
                "kind": "dns#managedZone",
                "name": state.zone.name,
                "dnsName": state.zone.dns_name,
                "id": "4242",
                "description": "fedingress test zone",
                "visibility": "public",
                "nameServers": ["ns-cloud-a1.googledomains.com.", "ns-cloud-a2.googledomains.com."],
            }),
        ),
        ("GET", ["rrsets"]) => list(
            &state,
            param("maxResults"),
            param("pageToken"),
            param("name"),
            param("type"),
        ),
        ("POST", ["changes"]) => create(&mut state, body),
        ("GET", ["changes", id]) => match state.zone.changes.iter().find(|c| c["id"] == *id) {
            Some(change) => {
                let mut change = change.clone();
                change["status"] = json!("done");
                answer(StatusCode::OK, &change)
            }
            None => error(
                StatusCode::NOT_FOUND,
                "notFound",
                &format!("The 'parameters.changeId' resource named '{id}' does not exist."),
            ),
        },
        _ => error(
            StatusCode::NOT_FOUND,
            "notFound",
            &format!("The requested URL {method} {path} was not found on this server."),
        ),
    }
}

fn list(
    state: &State,
    max_results: Option<String>,
    page_token: Option<String>,
    name: Option<String>,
    type_: Option<String>,
) -> Answer {
    let size = match max_results.map(|m| m.parse::<usize>()) {
        None => state.page_size,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid",
                "Invalid value for 'parameters.maxResults'",
            );
        }
    };
    let start = match page_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(token) => match token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => n,
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    &format!("Invalid value for 'parameters.pageToken': '{token}'"),
                );
            }
        },
    };
    if type_.is_some() && name.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "The 'parameters.type' parameter requires 'parameters.name'",
        );
    }
    let matching: Vec<&Value> = state
        .zone
        .rrsets
        .iter()
        .filter(|((n, t), _)| {
            name.as_deref().is_none_or(|want| n == want)
                && type_.as_deref().is_none_or(|want| t == want)
        })
        .map(|(_, v)| v)
        .collect();
    let page: Vec<&Value> = matching.iter().skip(start).take(size).copied().collect();
    let mut body = json!({"kind": "dns#resourceRecordSetsListResponse", "rrsets": page});
    if start + size < matching.len() {
        body["nextPageToken"] = json!(format!("page-{}", start + size));
    }
    answer(StatusCode::OK, &body)
}

fn create(state: &mut State, body: Option<Value>) -> Answer {
    let Some(change) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "required",
            "The 'entity.change' parameter is required but was missing.",
        );
    };
    let field = |name: &str| -> Vec<Value> { change[name].as_array().cloned().unwrap_or_default() };
    let additions = field("additions");
    let deletions = field("deletions");
    if additions.is_empty() && deletions.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "required",
            "The 'entity.change' parameter is required but was missing.",
        );
    }
    for (what, list) in [("deletions", &deletions), ("additions", &additions)] {
        let mut seen = BTreeSet::new();
        for (i, rrset) in list.iter().enumerate() {
            let at = format!("entity.change.{what}[{i}]");
            if let Err(message) = validate(&state.zone.dns_name, rrset, &at) {
                return error(StatusCode::BAD_REQUEST, "invalid", &message);
            }
            let key = key(rrset);
            if state.refused.contains(&key.0) {
                return error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    &format!(
                        "Forbidden: the caller may not change '{}' ({}) in managed zone '{}'",
                        key.0, key.1, state.zone.name
                    ),
                );
            }
            if !seen.insert(key.clone()) {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    &format!(
                        "The resource '{at}' named '{} ({})' appears twice",
                        key.0, key.1
                    ),
                );
            }
        }
    }
    // Atomic: work on a copy, commit only if everything applies.
    let mut rrsets = state.zone.rrsets.clone();
    for (i, deletion) in deletions.iter().enumerate() {
        let key = key(deletion);
        let matches = rrsets
            .get(&key)
            .is_some_and(|stored| same(stored, deletion));
        if !matches {
            return error(
                StatusCode::PRECONDITION_FAILED,
                "conditionNotMet",
                &format!("Precondition not met for 'entity.change.deletions[{i}]'"),
            );
        }
        rrsets.remove(&key);
    }
    for (i, addition) in additions.iter().enumerate() {
        let key = key(addition);
        if rrsets.contains_key(&key) {
            return error(
                StatusCode::CONFLICT,
                "alreadyExists",
                &format!(
                    "The resource 'entity.change.additions[{i}]' named '{} ({})' already exists",
                    key.0, key.1
                ),
            );
        }
        let cname_conflict = rrsets
            .keys()
            .any(|(n, t)| n == &key.0 && (key.1 == "CNAME" || t == "CNAME"));
        if cname_conflict {
            return error(
                StatusCode::BAD_REQUEST,
                "cnameResourceRecordSetConflict",
                &format!(
                    "The resource 'entity.change.additions[{i}]' named '{} ({})' cannot be \
                     created because a CNAME resource record set and another record set share \
                     that name",
                    key.0, key.1
                ),
            );
        }
        let mut stored = addition.clone();
        stored["kind"] = json!("dns#resourceRecordSet");
        rrsets.insert(key, stored);
    }
    state.zone.rrsets = rrsets;
    let id = (state.zone.changes.len() + 1).to_string();
    let mut recorded = json!({
        "kind": "dns#change",
        "id": id,
        "startTime": "2026-01-01T00:00:00.000Z",
        "status": "pending",
    });
    if !additions.is_empty() {
        recorded["additions"] = json!(additions);
    }
    if !deletions.is_empty() {
        recorded["deletions"] = json!(deletions);
    }
    state.zone.changes.push(recorded.clone());
    answer(StatusCode::OK, &recorded)
}

fn key(rrset: &Value) -> (String, String) {
    (
        rrset["name"].as_str().unwrap_or_default().to_string(),
        rrset["type"].as_str().unwrap_or_default().to_string(),
    )
}

/// Equal as record sets: every field but `kind` (output only).
fn same(stored: &Value, given: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("kind");
        }
        strip_kinds(&mut v);
        v
    };
    strip(stored) == strip(given)
}

fn strip_kinds(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("kind");
            for v in o.values_mut() {
                strip_kinds(v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_kinds),
        _ => {}
    }
}

/// The shape rules of one record set (see the module docs); `at` names it in errors.
fn validate(dns_name: &str, rrset: &Value, at: &str) -> Result<(), String> {
    let invalid = |field: &str, why: &str| Err(format!("Invalid value for '{at}.{field}': {why}"));
    let Some(name) = rrset["name"].as_str() else {
        return invalid("name", "required");
    };
    if !name.ends_with('.') {
        return invalid(
            "name",
            &format!("'{name}' is not fully qualified (no trailing dot)"),
        );
    }
    if name != dns_name && !name.ends_with(&format!(".{dns_name}")) {
        return invalid(
            "name",
            &format!("'{name}' is not within the zone '{dns_name}'"),
        );
    }
    let Some(type_) = rrset["type"].as_str() else {
        return invalid("type", "required");
    };
    match rrset.get("ttl") {
        None => {}
        Some(ttl) if ttl.as_i64().is_some_and(|t| t >= 0) => {}
        Some(ttl) => return invalid("ttl", &format!("{ttl} is not a non-negative integer")),
    }
    let rrdatas = strings(&rrset["rrdatas"]);
    let policy = rrset.get("routingPolicy");
    match (rrdatas.is_empty(), policy) {
        (false, Some(_)) => {
            return invalid(
                "routingPolicy",
                "a record set has either rrdatas or a routingPolicy, not both",
            );
        }
        (true, None) => return invalid("rrdatas", "a record set needs rrdatas or a routingPolicy"),
        (false, None) => {
            check_rrdatas(type_, &rrdatas, &format!("{at}.rrdatas"))?;
            if type_ == "CNAME" && rrdatas.len() > 1 {
                return invalid("rrdatas", "a CNAME record set holds one rrdata");
            }
        }
        (true, Some(policy)) => check_policy(type_, policy, &format!("{at}.routingPolicy"))?,
    }
    Ok(())
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn check_rrdatas(type_: &str, rrdatas: &[String], at: &str) -> Result<(), String> {
    for (i, data) in rrdatas.iter().enumerate() {
        let ok = match type_ {
            "A" => data.parse::<Ipv4Addr>().is_ok(),
            "AAAA" => data.parse::<Ipv6Addr>().is_ok(),
            "CNAME" | "NS" => data.ends_with('.'),
            "TXT" => data.starts_with('"') && data.ends_with('"') || !data.contains(' '),
            _ => !data.is_empty(),
        };
        if !ok {
            return Err(format!(
                "Invalid value for '{at}[{i}]': '{data}' is not valid {type_} data"
            ));
        }
    }
    Ok(())
}

fn check_policy(type_: &str, policy: &Value, at: &str) -> Result<(), String> {
    let kinds: Vec<&str> = ["geo", "wrr", "primaryBackup"]
        .into_iter()
        .filter(|k| policy.get(*k).is_some())
        .collect();
    if kinds.len() != 1 {
        return Err(format!(
            "Invalid value for '{at}': exactly one of geo, wrr and primaryBackup must be set (found {})",
            if kinds.is_empty() {
                "none".to_string()
            } else {
                kinds.join(", ")
            }
        ));
    }
    let health_check = policy["healthCheck"].as_str();
    if let Some(url) = health_check
        && !(url.contains("/projects/") && url.contains("/healthChecks/"))
    {
        return Err(format!(
            "Invalid value for '{at}.healthCheck': '{url}' is not a health check URL"
        ));
    }
    let ctx = ItemCtx {
        type_,
        health_check: health_check.is_some(),
    };
    match kinds[0] {
        "geo" => ctx.geo(&policy["geo"], &format!("{at}.geo"))?,
        "wrr" => {
            let items = policy["wrr"]["items"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if items.is_empty() {
                return Err(format!("Invalid value for '{at}.wrr.items': required"));
            }
            for (i, item) in items.iter().enumerate() {
                let at = format!("{at}.wrr.items[{i}]");
                match item["weight"].as_f64() {
                    Some(w) if w >= 0.0 => {}
                    _ => {
                        return Err(format!(
                            "Invalid value for '{at}.weight': a weight must be a number >= 0"
                        ));
                    }
                }
                ctx.item(item, &at)?;
            }
        }
        _ => {
            let pb = &policy["primaryBackup"];
            let at = format!("{at}.primaryBackup");
            let primary = &pb["primaryTargets"];
            if primary.is_null() {
                return Err(format!("Invalid value for '{at}.primaryTargets': required"));
            }
            ctx.targets(primary, &format!("{at}.primaryTargets"))?;
            if strings(&primary["externalEndpoints"]).is_empty()
                && primary["internalLoadBalancers"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            {
                return Err(format!(
                    "Invalid value for '{at}.primaryTargets': needs at least one target"
                ));
            }
            if pb["backupGeoTargets"].is_null() {
                return Err(format!(
                    "Invalid value for '{at}.backupGeoTargets': required"
                ));
            }
            ctx.geo(&pb["backupGeoTargets"], &format!("{at}.backupGeoTargets"))?;
            if let Some(t) = pb.get("trickleTraffic")
                && !t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t))
            {
                return Err(format!(
                    "Invalid value for '{at}.trickleTraffic': {t} is not within [0, 1]"
                ));
            }
        }
    }
    Ok(())
}

struct ItemCtx<'a> {
    type_: &'a str,
    health_check: bool,
}

impl ItemCtx<'_> {
    fn geo(&self, geo: &Value, at: &str) -> Result<(), String> {
        let items = geo["items"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            return Err(format!("Invalid value for '{at}.items': required"));
        }
        let mut locations = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{at}.items[{i}]");
            let Some(location) = item["location"].as_str().filter(|l| !l.is_empty()) else {
                return Err(format!("Invalid value for '{at}.location': required"));
            };
            if !locations.insert(location.to_string()) {
                return Err(format!(
                    "Invalid value for '{at}.location': '{location}' appears in two items"
                ));
            }
            self.item(item, &at)?;
        }
        Ok(())
    }

    fn item(&self, item: &Value, at: &str) -> Result<(), String> {
        let rrdatas = strings(&item["rrdatas"]);
        let targets = &item["healthCheckedTargets"];
        if rrdatas.is_empty() && targets.is_null() {
            return Err(format!(
                "Invalid value for '{at}': an item needs rrdatas or healthCheckedTargets"
            ));
        }
        check_rrdatas(self.type_, &rrdatas, &format!("{at}.rrdatas"))?;
        if self.type_ == "CNAME" && rrdatas.len() > 1 {
            return Err(format!(
                "Invalid value for '{at}.rrdatas': a CNAME item holds one rrdata"
            ));
        }
        if !targets.is_null() {
            self.targets(targets, &format!("{at}.healthCheckedTargets"))?;
        }
        Ok(())
    }

    fn targets(&self, targets: &Value, at: &str) -> Result<(), String> {
        if !matches!(self.type_, "A" | "AAAA") {
            return Err(format!(
                "Invalid value for '{at}': health-checked targets are for A and AAAA record sets only"
            ));
        }
        let external = strings(&targets["externalEndpoints"]);
        if !external.is_empty() && !self.health_check {
            return Err(format!(
                "Invalid value for '{at}.externalEndpoints': external endpoints need the routing \
                 policy's healthCheck"
            ));
        }
        for (i, ip) in external.iter().enumerate() {
            let ok = match self.type_ {
                "A" => ip.parse::<Ipv4Addr>().is_ok(),
                _ => ip.parse::<Ipv6Addr>().is_ok(),
            };
            if !ok || ip.parse::<IpAddr>().is_err() {
                return Err(format!(
                    "Invalid value for '{at}.externalEndpoints[{i}]': '{ip}' is not an {} address",
                    self.type_
                ));
            }
        }
        Ok(())
    }
}
