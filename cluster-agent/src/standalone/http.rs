//! The HTTP reverse proxy behind HTTP listeners and the HTTPS side of TLS listeners.
//!
//! One connection is served by hyper (HTTP/1.1 with keep-alive, or HTTP/2: prior
//! knowledge `h2c` on plain listeners, ALPN `h2` on TLS); every request is routed by Host
//! and path ([`super::routes`]) and forwarded over HTTP/1.1 to an endpoint of the route's
//! backend through a shared client that pools upstream connections per endpoint.
//!
//! Limits: HTTP/1.1 request heads must arrive within the header-read timeout (hyper
//! starts it whenever the connection waits for a request, so it also bounds the wait
//! between keep-alive requests); a connection, HTTP/1.1 or HTTP/2, with no bytes either
//! way for the idle timeout is shut down gracefully (a request in flight finishes).
//!
//! # Answers of the agent itself
//! - `404` no rule of this listener matches the host and path;
//! - `421` (HTTPS) the Host is served with another certificate than the connection's;
//! - `503` the backend has no healthy endpoint, or a new upstream connection would
//!   exceed the agent's descriptor budget;
//! - `502` connecting to the endpoint or the exchange with it failed.
//!
//! Bodies are one short `text/plain` line saying which of these happened.
//!
//! # Forwarding
//! Hop-by-hop headers (`Connection` and the headers it names, `Keep-Alive`, `TE`,
//! `Trailer`, `Transfer-Encoding`, `Upgrade`, `Proxy-Connection`, `Expect`) are dropped
//! both ways. The request keeps its `Host` (HTTP/2 requests get one from
//! `:authority`); `X-Forwarded-For` gets the client address appended, `X-Forwarded-Proto`
//! and `X-Forwarded-Host` are set (the agent is the edge and knows them), and a
//! `Forwarded` element (RFC 7239) `for=…;proto=…;host="…"` is appended.
//!
//! # Passive ejection
//! A failed connect or exchange, or a `5xx` from the endpoint, counts as a failure of
//! the endpoint; any other answer as a success. A request without a body whose connect
//! fails is retried once per other endpoint of the backend.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::body::RequestBody;
use super::drain::{Phase, reached};
use super::endpoint::Endpoint;
use super::limits::{Activity, Limits, Refusal, Timeout, Watched};
use super::load::{Active, LoadCounters};
use super::routes::{HttpTable, Target, TlsTable, request_host};
use super::tcp::{Accepted, Handler};
use super::upstream::{self, PooledBody};

/// Concurrent streams per HTTP/2 client connection.
const MAX_CONCURRENT_STREAMS: u32 = 256;

/// A response body towards the client: the endpoint's, streamed, or the agent's own.
#[derive(Debug)]
pub(crate) enum ResponseBody {
    Upstream(PooledBody),
    Local(Option<Bytes>),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ResponseBody::Upstream(body) => Pin::new(body).poll_frame(cx),
            ResponseBody::Local(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Upstream(body) => body.is_end_stream(),
            ResponseBody::Local(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Upstream(body) => body.size_hint(),
            ResponseBody::Local(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

/// Where a listener's HTTP routes come from.
#[derive(Clone, Debug)]
pub(crate) enum Tables {
    /// An HTTP listener.
    Plain(Arc<ArcSwap<HttpTable>>),
    /// The HTTPS side of a TLS listener.
    Tls(Arc<ArcSwap<TlsTable>>),
}

impl Tables {
    /// The target of the route for `host` and `path`, if any.
    fn route(&self, host: &str, path: &str) -> Option<Arc<Target>> {
        let find = |table: &HttpTable| {
            table
                .lookup(host)
                .and_then(|(routes, _)| routes.route(path))
                .map(|route| Arc::clone(&route.target))
        };
        match self {
            Tables::Plain(table) => find(&table.load()),
            Tables::Tls(table) => find(&table.load().https),
        }
    }

    /// Whether a request for `host` may use a connection terminated with `secret`.
    fn same_certificate(&self, host: &str, secret: &str) -> bool {
        match self {
            Tables::Plain(_) => true,
            Tables::Tls(table) => table.load().https_secret(host) == Some(secret),
        }
    }
}

/// What every connection of one bound HTTP(S) listener shares.
#[derive(Debug)]
pub(crate) struct HttpListener {
    pub label: Arc<str>,
    pub tables: Tables,
    /// How long connecting to an endpoint may take.
    pub connect_timeout: Duration,
    pub load: Arc<LoadCounters>,
    /// The header-read and idle timeouts, the descriptor budget of upstream connections.
    pub limits: Arc<Limits>,
}

/// The TLS side of an HTTPS connection.
#[derive(Clone, Debug)]
pub(crate) struct TlsInfo {
    pub sni: Option<String>,
    /// The secret whose certificate the connection was terminated with.
    pub secret: String,
}

struct Conn {
    listener: Arc<HttpListener>,
    peer: SocketAddr,
    tls: Option<TlsInfo>,
    /// The connection counts for the ingress of its first routed request.
    attributed: OnceLock<Active>,
    /// The client address for `X-Forwarded-For`.
    client_ip: String,
    /// `for=…;proto=…` of this connection's `Forwarded` elements.
    forwarded: String,
}

/// The handler of an HTTP listener.
pub(crate) fn handler(listener: Arc<HttpListener>) -> Handler {
    Arc::new(move |accepted: Accepted| {
        let listener = Arc::clone(&listener);
        tokio::spawn(async move {
            let Accepted {
                stream,
                peer,
                active: _active,
                tracked: _tracked,
                phase,
                fd: _fd,
            } = accepted;
            serve(stream, listener, peer, None, phase).await;
        });
    })
}

/// Serves one client connection until it ends or its listener's drain closes it.
pub(crate) async fn serve<I>(
    io: I,
    listener: Arc<HttpListener>,
    peer: SocketAddr,
    tls: Option<TlsInfo>,
    mut phase: watch::Receiver<Phase>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let label = Arc::clone(&listener.label);
    let (client_ip, forwarded) = forwarded_for(peer, tls.is_some());
    let conn = Arc::new(Conn {
        listener,
        peer,
        tls,
        attributed: OnceLock::new(),
        client_ip,
        forwarded,
    });
    let limits = Arc::clone(&conn.listener.limits);
    let load = Arc::clone(&conn.listener.load);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper starts the header-read timer whenever the connection waits for a request
    // head, so it also bounds the keep-alive wait for the next request.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_read)
        .keep_alive(true)
        .writev(false);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let activity = Activity::new();
    let io = Watched::new(io, activity.clone()).counting(Arc::clone(&load));
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), ProxyService(conn));
    tokio::pin!(connection);
    let mut draining = false;
    let mut idle_closing = false;
    loop {
        let next = if draining {
            Phase::Closing
        } else {
            Phase::Draining
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    if error
                        .downcast_ref::<hyper::Error>()
                        .is_some_and(hyper::Error::is_timeout)
                    {
                        load.guard.timed_out(Timeout::Header);
                    }
                    tracing::debug!(listener = %label, client = %peer, %error, "HTTP connection ended with an error");
                }
                return;
            }
            () = activity.idle_for(limits.http_idle), if !idle_closing && !draining => {
                // No bytes either way: a keep-alive or HTTP/2 connection with nothing in
                // flight. A request in flight still finishes.
                idle_closing = true;
                load.guard.timed_out(Timeout::Idle);
                tracing::debug!(listener = %label, client = %peer, "HTTP connection idle; closing");
                connection.as_mut().graceful_shutdown();
            }
            () = reached(&mut phase, next) => {
                if draining || *phase.borrow() == Phase::Closing {
                    tracing::debug!(listener = %label, client = %peer, "HTTP connection closed at the end of the drain");
                    return;
                }
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

#[derive(Clone)]
struct ProxyService(Arc<Conn>);

impl hyper::service::Service<Request<Incoming>> for ProxyService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let conn = Arc::clone(&self.0);
        Box::pin(async move {
            let response = handle(&conn, request).await;
            conn.listener.load.responded(response.status().as_u16());
            Ok(response)
        })
    }
}

/// A short `text/plain` answer of the agent itself.
fn local(status: StatusCode, message: String) -> Response<ResponseBody> {
    let mut text = String::with_capacity(message.len() + 40);
    text.push_str(status.as_str());
    text.push(' ');
    text.push_str(status.canonical_reason().unwrap_or(""));
    text.push_str(": ");
    text.push_str(&message);
    text.push('\n');
    let mut response = Response::new(ResponseBody::Local(Some(Bytes::from(text))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn handle(conn: &Conn, mut request: Request<Incoming>) -> Response<ResponseBody> {
    let target: Arc<Target> = {
        let host = request_host(&request);
        let path = request.uri().path();
        let Some(target) = conn.listener.tables.route(&host, path) else {
            return local(
                StatusCode::NOT_FOUND,
                format!("no rule of this listener matches host {host:?} path {path:?}"),
            );
        };
        if let Some(tls) = &conn.tls
            && tls.sni.as_deref() != Some(host.as_ref())
            && !conn.listener.tables.same_certificate(&host, &tls.secret)
        {
            return local(
                StatusCode::MISDIRECTED_REQUEST,
                format!("host {host:?} is not served with this connection's certificate"),
            );
        }
        target
    };
    conn.attributed.get_or_init(|| target.load.opened());
    let Some(first) = target.pool.pick() else {
        tracing::debug!(
            ingress = %target.ingress,
            rule = target.rule,
            listener = %conn.listener.label,
            service = %target.service,
            "no healthy endpoint; answering 503"
        );
        return local(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no healthy endpoint for service {:?}", target.service),
        );
    };

    prepare_headers(
        &mut request,
        &conn.client_ip,
        &conn.forwarded,
        conn.tls.is_some(),
    );
    let retryable = request.body().is_end_stream();
    let (mut parts, body) = request.into_parts();
    // Origin form towards the endpoint (HTTP/2 requests carry scheme and authority).
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        parts.uri = Uri::from(
            parts
                .uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
        );
    }
    parts.version = Version::HTTP_11;
    parts.extensions.clear();
    // Kept for retries: only requests without a body, only with somewhere else to go.
    let spare = (retryable && target.pool.len() > 1).then(|| {
        (
            parts.method.clone(),
            parts.uri.clone(),
            parts.headers.clone(),
        )
    });
    let body = if retryable {
        RequestBody::Empty
    } else {
        RequestBody::Stream(body)
    };

    let mut endpoint = first;
    let mut next = Request::from_parts(parts, body);
    let mut others: Option<std::vec::IntoIter<Arc<Endpoint>>> = None;
    loop {
        match upstream::send(
            &endpoint,
            next,
            conn.listener.connect_timeout,
            &conn.listener.limits,
        )
        .await
        {
            Ok(response) => {
                endpoint.record(!response.status().is_server_error(), "proxy");
                let (mut parts, body) = response.into_parts();
                remove_hop_by_hop(&mut parts.headers);
                return Response::from_parts(parts, ResponseBody::Upstream(body));
            }
            Err(upstream::UpstreamError::FdBudget) => {
                // The agent's own limit: no endpoint is to blame.
                if conn.listener.load.guard.refused(Refusal::FdBudget) {
                    tracing::warn!(listener = %conn.listener.label, "no file descriptor left in the budget for upstream connections; answering 503 (counted in fedingress_agent_listener_refused_total)");
                }
                return local(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the agent is at its connection limit".into(),
                );
            }
            Err(error) => {
                endpoint.record(false, "proxy");
                let connect = error.is_connect();
                tracing::debug!(
                    ingress = %target.ingress,
                    listener = %conn.listener.label,
                    endpoint = %endpoint.addr,
                    client = %conn.peer,
                    error = %crate::state::error_chain(&error),
                    "forwarding a request failed"
                );
                if connect && let Some((method, uri, headers)) = &spare {
                    let failed = Arc::clone(&endpoint);
                    let rest = others.get_or_insert_with(|| {
                        target
                            .pool
                            .candidates()
                            .into_iter()
                            .filter(|e| !Arc::ptr_eq(e, &failed))
                            .collect::<Vec<_>>()
                            .into_iter()
                    });
                    if let Some(other) = rest.next() {
                        endpoint = other;
                        next = retry_request(method, uri, headers);
                        continue;
                    }
                }
                let what = if connect {
                    "connecting to"
                } else {
                    "the exchange with"
                };
                return local(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "{what} endpoint {} of service {:?} failed",
                        endpoint.addr, target.service
                    ),
                );
            }
        }
    }
}

/// A copy of a request without a body, for another endpoint.
fn retry_request(method: &Method, uri: &Uri, headers: &HeaderMap) -> Request<RequestBody> {
    let mut request = Request::new(RequestBody::Empty);
    *request.method_mut() = method.clone();
    *request.uri_mut() = uri.clone();
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers.clone();
    request
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The hop-by-hop headers dropped besides those `Connection` names.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::EXPECT,
];

/// Drops hop-by-hop headers (RFC 9110 7.6.1) and `Expect` (hyper answers
/// `100-continue` itself). One pass over the names first: most messages have none, and
/// removing a name that is not there still costs a hash lookup.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
            .filter(|name| name != header::HOST)
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The client's address as it should appear in forwarding headers (IPv4-mapped IPv6
/// addresses as IPv4).
fn client_ip(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        ip => ip,
    }
}

/// Sets the forwarding headers and drops hop-by-hop ones (see the module docs).
/// `client_ip` is the client's address as text, `forwarded` the `for=…;proto=…` start
/// of this connection's `Forwarded` element.
fn prepare_headers<B>(request: &mut Request<B>, client_ip: &str, forwarded: &str, https: bool) {
    let authority = request
        .uri()
        .authority()
        .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
    let headers = request.headers_mut();
    remove_hop_by_hop(headers);
    if !headers.contains_key(header::HOST)
        && let Some(authority) = authority
    {
        headers.insert(header::HOST, authority);
    }
    let forwarded_for = if headers.contains_key(&X_FORWARDED_FOR) {
        let mut joined: Vec<&str> = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        joined.push(client_ip);
        HeaderValue::from_str(&joined.join(", ")).ok()
    } else {
        HeaderValue::from_str(client_ip).ok()
    };
    if let Some(value) = forwarded_for {
        headers.insert(X_FORWARDED_FOR, value);
    }
    let proto = if https { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    let host = headers.get(header::HOST).cloned();
    let mut element = String::with_capacity(forwarded.len() + 48);
    element.push_str(forwarded);
    if let Some(host) = host {
        if let Ok(text) = host.to_str()
            && !text.contains(['"', '\\'])
        {
            element.push_str(";host=\"");
            element.push_str(text);
            element.push('"');
        }
        headers.insert(X_FORWARDED_HOST, host);
    }
    if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(element)) {
        headers.append(header::FORWARDED, value);
    }
}

/// The client address as text and `for=…;proto=…` for a client's connection (IPv6
/// quoted, as RFC 7239 wants).
fn forwarded_for(peer: SocketAddr, https: bool) -> (String, String) {
    let ip = client_ip(peer);
    let proto = if https { "https" } else { "http" };
    let element = match ip {
        IpAddr::V6(_) => format!("for=\"[{ip}]\";proto={proto}"),
        IpAddr::V4(_) => format!("for={ip};proto={proto}"),
    };
    (ip.to_string(), element)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarding_headers_are_set_and_hop_by_hop_ones_dropped() {
        let mut request = Request::get("/x")
            .header("host", "shop.example.com:8080")
            .header("x-forwarded-for", "203.0.113.9")
            .header("x-forwarded-proto", "gopher")
            .header("connection", "keep-alive, X-Secret")
            .header("x-secret", "1")
            .header("te", "trailers")
            .header("upgrade", "websocket")
            .header("forwarded", "for=203.0.113.9")
            .body(())
            .unwrap();
        let (ip, forwarded) = forwarded_for("10.1.2.3:5555".parse().unwrap(), true);
        prepare_headers(&mut request, &ip, &forwarded, true);
        let h = request.headers();
        assert_eq!(h["x-forwarded-for"], "203.0.113.9, 10.1.2.3");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "shop.example.com:8080");
        assert_eq!(h["host"], "shop.example.com:8080");
        let forwarded: Vec<&str> = h
            .get_all("forwarded")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(
            forwarded,
            [
                "for=203.0.113.9",
                "for=10.1.2.3;proto=https;host=\"shop.example.com:8080\""
            ]
        );
        for gone in ["connection", "x-secret", "te", "upgrade"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn http2_requests_get_a_host_and_ipv6_clients_are_quoted() {
        let mut request = Request::get("https://api.example.com/v1").body(()).unwrap();
        let (ip, forwarded) = forwarded_for("[::ffff:10.0.0.1]:1".parse().unwrap(), false);
        prepare_headers(&mut request, &ip, &forwarded, false);
        assert_eq!(request.headers()["host"], "api.example.com");
        assert_eq!(request.headers()["x-forwarded-for"], "10.0.0.1");
        let mut request = Request::get("/").body(()).unwrap();
        let (ip, forwarded) = forwarded_for("[2001:db8::7]:1".parse().unwrap(), false);
        prepare_headers(&mut request, &ip, &forwarded, false);
        assert_eq!(
            request.headers()["forwarded"],
            "for=\"[2001:db8::7]\";proto=http"
        );
        assert!(!request.headers().contains_key("x-forwarded-host"));
    }

    #[test]
    fn local_answers_are_short_plain_text() {
        let response = local(
            StatusCode::SERVICE_UNAVAILABLE,
            "no healthy endpoint".into(),
        );
        assert_eq!(response.status(), 503);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; charset=utf-8"
        );
        let ResponseBody::Local(Some(body)) = response.body() else {
            panic!("local body");
        };
        assert_eq!(&body[..], b"503 Service Unavailable: no healthy endpoint\n");
    }
}
