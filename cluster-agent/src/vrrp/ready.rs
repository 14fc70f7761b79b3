//! `cluster-agent ready --admin ADDR`: keepalived's track script. Asks the agent's
//! `/readyz` over plain HTTP/1.1 with one deadline for connect, request and response,
//! so a stopped (SIGSTOP) or wedged agent fails the check as surely as a dead one.
//! Blocking std sockets, no runtime: keepalived runs it every track interval.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Why the agent is not ready, as the check saw it.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("connecting to the admin endpoint {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("asking {addr}/readyz")]
    Io {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}/readyz gave no answer within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
    #[error("{addr}/readyz answered {status}: {body}")]
    Status {
        addr: SocketAddr,
        status: String,
        body: String,
    },
}

/// Answers at most this long are read (`/readyz` says one line).
const MAX_RESPONSE: usize = 16 * 1024;

/// `GET /readyz` at `admin`; `Ok` with the agent's one-line answer iff it is 200 and
/// arrives within `timeout` (connect included).
///
/// # Errors
/// [`NotReady`]: no connection, no answer in time, or another status than 200.
pub fn check(admin: SocketAddr, timeout: Duration) -> Result<String, NotReady> {
    let deadline = Instant::now() + timeout;
    let timed_out = || NotReady::Timeout {
        addr: admin,
        timeout,
    };
    let mut stream = TcpStream::connect_timeout(&admin, timeout).map_err(|source| {
        if source.kind() == std::io::ErrorKind::TimedOut {
            timed_out()
        } else {
            NotReady::Connect {
                addr: admin,
                source,
            }
        }
    })?;
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => timed_out(),
        _ => NotReady::Io {
            addr: admin,
            source,
        },
    };
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    stream
        .set_write_timeout(Some(left().ok_or_else(timed_out)?))
        .map_err(io)?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        stream
            .set_read_timeout(Some(left().ok_or_else(timed_out)?))
            .map_err(io)?;
        let n = stream.read(&mut buffer).map_err(io)?;
        if n == 0 || response.len() >= MAX_RESPONSE {
            break;
        }
        response.extend_from_slice(&buffer[..n]);
    }
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("no status")
        .to_owned();
    let body = body.lines().next().unwrap_or_default().trim().to_owned();
    if status == "200" {
        Ok(body)
    } else {
        Err(NotReady::Status {
            addr: admin,
            status,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server answering `response` to the first request.
    fn serve(response: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer);
                let _ = stream.write_all(response.as_bytes());
            }
        });
        addr
    }

    #[test]
    fn ready_only_on_200() {
        let addr = serve("HTTP/1.1 200 OK\r\ncontent-length: 22\r\n\r\nok: plan version 3\n");
        assert_eq!(
            check(addr, Duration::from_secs(2)).unwrap(),
            "ok: plan version 3"
        );
        let addr = serve("HTTP/1.1 503 Service Unavailable\r\n\r\nno plan applied yet\n");
        let err = check(addr, Duration::from_secs(2)).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("answered 503: no plan applied yet"),
            "{err}"
        );
    }

    #[test]
    fn a_silent_or_absent_agent_is_not_ready() {
        // Accepts (the kernel does, into the backlog) but never answers: a stopped agent.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let err = check(addr, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, NotReady::Timeout { .. }), "{err:?}");
        drop(listener);
        let err = check(addr, Duration::from_millis(200)).unwrap_err();
        assert!(matches!(err, NotReady::Connect { .. }), "{err:?}");
    }
}
