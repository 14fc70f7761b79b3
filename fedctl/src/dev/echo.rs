//! The dev federation's sample backend, built into fedctl so nothing else needs
//! installing: `fedctl dev echo --name eu-west --listen ADDR [--http ADDR]`.
//!
//! - TCP and UDP on one address and port (the mixed-protocol service of the seed blog):
//!   every line (TCP) or datagram (UDP) comes back prefixed with the cluster's name,
//!   `eu-west: hello`, so a client sees which cluster served it. The agent's UDP health
//!   probe sends `ping` and expects `eu-west: ping`.
//! - HTTP (optional): every request is answered `eu-west: GET /path (host NAME)`.
//!
//! Prints `READY {"tcp":…,"udp":…,"http":…}` once bound; SIGTERM/SIGINT stop it.

use std::convert::Infallible;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UdpSocket};

use crate::cli::EchoArgs;

/// The reply to one line or datagram.
pub fn reply(name: &str, data: &[u8]) -> Vec<u8> {
    let mut out = format!("{name}: ").into_bytes();
    out.extend_from_slice(data);
    out
}

pub async fn run(args: EchoArgs) -> anyhow::Result<()> {
    let tcp = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding TCP {}", args.listen))?;
    let udp = UdpSocket::bind(tcp.local_addr()?)
        .await
        .with_context(|| format!("binding UDP {}", args.listen))?;
    let http = match args.http {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding HTTP {addr}"))?,
        ),
        None => None,
    };
    let ready = json!({
        "tcp": tcp.local_addr()?.to_string(),
        "udp": udp.local_addr()?.to_string(),
        "http": http.as_ref().and_then(|h| h.local_addr().ok()).map(|a| a.to_string()),
    });
    println!("READY {ready}");
    let name = args.name;
    let tcp_task = tokio::spawn(serve_tcp(tcp, name.clone()));
    let udp_task = tokio::spawn(serve_udp(udp, name.clone()));
    let http_task = http.map(|listener| tokio::spawn(serve_http(listener, name.clone())));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tcp_task.abort();
    udp_task.abort();
    if let Some(task) = http_task {
        task.abort();
    }
    Ok(())
}

async fn serve_tcp(listener: TcpListener, name: String) {
    while let Ok((stream, _)) = listener.accept().await {
        let name = name.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut reader = BufReader::new(read);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if write.write_all(&reply(&name, &line)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
}

async fn serve_udp(socket: UdpSocket, name: String) {
    let mut buffer = vec![0u8; 65536];
    while let Ok((n, from)) = socket.recv_from(&mut buffer).await {
        let _ = socket.send_to(&reply(&name, &buffer[..n]), from).await;
    }
}

async fn serve_http(listener: TcpListener, name: String) {
    while let Ok((stream, _)) = listener.accept().await {
        let name = name.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let name = name.clone();
                async move { Ok::<_, Infallible>(http_reply(&name, &request)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn http_reply<B>(name: &str, request: &Request<B>) -> Response<Full<Bytes>> {
    let host = request
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("-");
    let body = format!(
        "{name}: {} {} (host {host})\n",
        request.method(),
        request.uri().path()
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn replies_name_the_cluster() {
        assert_eq!(reply("eu-west", b"hello\n"), b"eu-west: hello\n");
        let request = Request::builder()
            .uri("/x")
            .header("host", "web.fedingress.test")
            .body(())
            .unwrap();
        let response = http_reply("us-east", &request);
        assert_eq!(response.status(), 200);
    }
}
