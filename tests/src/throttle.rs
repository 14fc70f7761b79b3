//! An HTTP proxy in front of moto that throttles like Route53: the first `n`
//! `ChangeResourceRecordSets` requests get Route53's `400 Throttling` answer, everything
//! else is forwarded. It also keeps the bodies of the change requests it forwards, so a
//! test can see what the provider sent (moto drops some fields it does not model).
//!
//! Runs as a task in the test's runtime, on a loopback port; stopped on drop.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

/// Route53's answer when an account sends more than five requests per second
/// (`<ErrorResponse>` with `Type` Sender and `Code` Throttling, HTTP 400).
pub const THROTTLING_BODY: &str = "<?xml version=\"1.0\"?>\n<ErrorResponse xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>5f1c5d3b-throttle-test</RequestId></ErrorResponse>";

#[derive(Default)]
struct State {
    /// Change requests still to be throttled.
    remaining: AtomicUsize,
    throttled: AtomicUsize,
    forwarded_changes: Mutex<Vec<String>>,
}

/// The proxy; see the module docs.
pub struct ThrottleProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl ThrottleProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`, throttling the
    /// first `throttle_changes` change requests.
    pub async fn start(upstream: SocketAddr, throttle_changes: usize) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the throttling proxy")?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::default());
        state.remaining.store(throttle_changes, Ordering::SeqCst);
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(req, upstream, state.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// `http://127.0.0.1:<port>`, for the SDK's `endpoint_url`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Change requests answered with Throttling so far.
    pub fn throttled(&self) -> usize {
        self.state.throttled.load(Ordering::SeqCst)
    }

    /// Throttles the next `n` change requests.
    pub fn throttle_next(&self, n: usize) {
        self.state.remaining.store(n, Ordering::SeqCst);
    }

    /// The XML bodies of the change requests forwarded to moto, in order.
    pub fn forwarded_changes(&self) -> Vec<String> {
        self.state
            .forwarded_changes
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }
}

impl Drop for ThrottleProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `POST /2013-04-01/hostedzone/<id>/rrset` (with or without the trailing slash).
fn is_change(req: &Request<Incoming>) -> bool {
    req.method() == http::Method::POST && req.uri().path().trim_end_matches('/').ends_with("/rrset")
}

async fn handle(
    req: Request<Incoming>,
    upstream: SocketAddr,
    state: Arc<State>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let change = is_change(&req);
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    if change {
        let throttle = state
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if throttle {
            state.throttled.fetch_add(1, Ordering::SeqCst);
            let mut resp = Response::new(Full::new(Bytes::from_static(THROTTLING_BODY.as_bytes())));
            *resp.status_mut() = StatusCode::BAD_REQUEST;
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/xml"),
            );
            resp.headers_mut().insert(
                "x-amzn-requestid",
                http::HeaderValue::from_static("5f1c5d3b-throttle-test"),
            );
            return Ok(resp);
        }
        if let Ok(mut v) = state.forwarded_changes.lock() {
            v.push(String::from_utf8_lossy(&body).into_owned());
        }
    }
    Ok(forward(parts, body, upstream).await.unwrap_or_else(|e| {
        let mut resp = Response::new(Full::new(Bytes::from(format!(
            "throttling proxy: forwarding to {upstream}: {e:#}"
        ))));
        *resp.status_mut() = StatusCode::BAD_GATEWAY;
        resp
    }))
}

async fn forward(
    parts: http::request::Parts,
    body: Bytes,
    upstream: SocketAddr,
) -> anyhow::Result<Response<Full<Bytes>>> {
    let stream = TcpStream::connect(upstream).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::from_parts(parts, Full::new(body));
    let resp = sender.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Response::from_parts(parts, Full::new(body)))
}
