//! The audit log of writes: one `audit.k8s.io/v1` Event per create, update, patch and
//! delete (refused ones too), at level Metadata, as JSON lines.
//!
//! # Guarantees
//! - Never the request body, never a token: only who, what, where from and the result.
//! - Requests never wait on the disk: events go through a bounded queue to a writer
//!   thread (kube's `--audit-log-mode=batch`). A full queue drops the event and counts
//!   it (`fedingress_audit_events_dropped_total`); a failing write (a full disk) is
//!   logged, counted (`fedingress_audit_write_errors_total`) and the writer goes on
//!   with the next event. The API keeps serving either way: there is no
//!   `blocking-strict` mode.
//! - The file is created 0600 (opened for append, never truncated). `-` writes to
//!   stdout.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use serde::Serialize;

/// `user` of an audit event.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditUser {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// `objectRef` of an audit event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Empty for the core group, as kube writes it (the key is then left out).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
}

impl ObjectRef {
    /// Parses a resource URL (`/apis/{g}/{v}/...` or `/api/v1/...`); `None` for
    /// non-resource paths.
    pub fn from_path(path: &str) -> Option<Self> {
        let (api_group, api_version, rest) = if let Some(rest) = path.strip_prefix("/api/") {
            let (version, rest) = rest.split_once('/')?;
            (String::new(), version.to_string(), rest)
        } else {
            let rest = path.strip_prefix("/apis/")?;
            let mut parts = rest.splitn(3, '/');
            let group = parts.next()?;
            let version = parts.next()?;
            (group.to_string(), version.to_string(), parts.next()?)
        };
        let parts: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
        let (namespace, parts) = match parts.as_slice() {
            ["namespaces", ns, tail @ ..] if !tail.is_empty() => (ns.to_string(), tail.to_vec()),
            ["namespaces", ns] => {
                return Some(Self {
                    resource: "namespaces".into(),
                    name: ns.to_string(),
                    api_group,
                    api_version,
                    ..Self::default()
                });
            }
            _ => (String::new(), parts),
        };
        let get = |i: usize| parts.get(i).map(|s| s.to_string()).unwrap_or_default();
        Some(Self {
            resource: get(0),
            name: get(1),
            subresource: get(2),
            namespace,
            api_group,
            api_version,
        })
    }
}

/// The name of an object a create made, put into the response's extensions for the
/// audit log (a create's URL has no name).
#[derive(Clone, Debug)]
pub struct CreatedName(pub String);

/// One finished write, as the API layer hands it over.
#[derive(Clone, Debug)]
pub struct Record {
    pub request_uri: String,
    pub verb: String,
    pub user: Option<AuditUser>,
    pub source_ip: Option<IpAddr>,
    pub user_agent: Option<String>,
    pub object_ref: Option<ObjectRef>,
    pub code: u16,
    /// The Status message when the request failed.
    pub message: Option<String>,
    pub received: chrono::DateTime<chrono::Utc>,
    pub finished: chrono::DateTime<chrono::Utc>,
}

/// The verb kube's audit log names a write method with (`None`: not a write).
pub fn write_verb(method: &http::Method) -> Option<&'static str> {
    Some(match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => return None,
    })
}

fn timestamp(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl Record {
    /// The `audit.k8s.io/v1` Event, one JSON line (with its newline).
    pub fn to_line(&self) -> String {
        let mut status = serde_json::json!({"metadata": {}, "code": self.code});
        if self.code >= 400 {
            status["status"] = "Failure".into();
            if let Some(message) = &self.message {
                status["message"] = message.clone().into();
            }
        }
        let mut event = serde_json::json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": uuid::Uuid::new_v4().to_string(),
            "stage": "ResponseComplete",
            "requestURI": self.request_uri,
            "verb": self.verb,
            "user": self.user.clone().unwrap_or_default(),
            "sourceIPs": self.source_ip.map(|ip| vec![ip.to_string()]).unwrap_or_default(),
            "responseStatus": status,
            "requestReceivedTimestamp": timestamp(&self.received),
            "stageTimestamp": timestamp(&self.finished),
        });
        if let Some(agent) = &self.user_agent {
            event["userAgent"] = agent.clone().into();
        }
        if let Some(object) = &self.object_ref {
            event["objectRef"] = serde_json::to_value(object).unwrap_or_default();
        }
        let mut line = event.to_string();
        line.push('\n');
        line
    }
}

#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
    write_errors: AtomicU64,
}

/// Where audit events go.
#[derive(Clone, Debug)]
pub struct AuditLog {
    queue: SyncSender<String>,
    counters: Arc<Counters>,
}

#[derive(Debug, thiserror::Error)]
#[error("opening the audit log {path}")]
pub struct OpenError {
    path: String,
    #[source]
    source: std::io::Error,
}

impl AuditLog {
    /// Opens `path` (`-` = stdout) and starts the writer thread; at most `queue` events
    /// wait for it.
    pub fn open(path: &Path, queue: usize) -> Result<Self, OpenError> {
        let sink: Box<dyn Write + Send> = if path == Path::new("-") {
            Box::new(std::io::stdout())
        } else {
            Box::new(open_private(path).map_err(|source| OpenError {
                path: path.display().to_string(),
                source,
            })?)
        };
        Self::start(sink, queue, path).map_err(|source| OpenError {
            path: path.display().to_string(),
            source,
        })
    }

    /// Starts the writer thread on `sink`; `path` only names it in logs.
    fn start(sink: Box<dyn Write + Send>, queue: usize, path: &Path) -> std::io::Result<Self> {
        let (queue, receiver) = std::sync::mpsc::sync_channel(queue.max(1));
        let counters = Arc::new(Counters::default());
        let writer_counters = counters.clone();
        let shown = path.to_path_buf();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || write_loop(sink, receiver, writer_counters, shown))?;
        Ok(Self { queue, counters })
    }

    /// Queues one event; never waits.
    pub fn record(&self, record: &Record) {
        match self.queue.try_send(record.to_line()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                let dropped = self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped = dropped + 1,
                        "audit queue full: audit events dropped"
                    );
                }
            }
        }
    }

    pub fn write_prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.counters;
        let _ = writeln!(
            out,
            "# HELP fedingress_audit_events_total Audit events written.\n# TYPE fedingress_audit_events_total counter\nfedingress_audit_events_total {}",
            c.written.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP fedingress_audit_events_dropped_total Audit events dropped because the queue was full.\n# TYPE fedingress_audit_events_dropped_total counter\nfedingress_audit_events_dropped_total {}",
            c.dropped.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP fedingress_audit_write_errors_total Audit events lost to write errors (e.g. a full disk).\n# TYPE fedingress_audit_write_errors_total counter\nfedingress_audit_write_errors_total {}",
            c.write_errors.load(Ordering::Relaxed)
        );
    }
}

/// Creates (0600) or appends to the log file.
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

fn write_loop(
    sink: Box<dyn Write + Send>,
    receiver: Receiver<String>,
    counters: Arc<Counters>,
    path: PathBuf,
) {
    let mut out = std::io::BufWriter::new(sink);
    let mut failing = false;
    while let Ok(line) = receiver.recv() {
        let mut batch = vec![line];
        while let Ok(more) = receiver.try_recv() {
            batch.push(more);
            if batch.len() >= 1024 {
                break;
            }
        }
        let n = batch.len() as u64;
        let result = batch
            .iter()
            .try_for_each(|line| out.write_all(line.as_bytes()))
            .and_then(|()| out.flush());
        match result {
            Ok(()) => {
                counters.written.fetch_add(n, Ordering::Relaxed);
                if failing {
                    tracing::info!(path = %path.display(), "audit log writable again");
                    failing = false;
                }
            }
            Err(error) => {
                counters.write_errors.fetch_add(n, Ordering::Relaxed);
                if !failing {
                    tracing::error!(path = %path.display(), %error, "writing the audit log failed: events are being lost");
                    failing = true;
                }
                // Start afresh: a partly written buffer is discarded, not retried.
                out = std::io::BufWriter::new(out.into_parts().0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_refs_from_paths() {
        let r = ObjectRef::from_path(
            "/apis/fedingress.io/v1alpha1/namespaces/shop/federatedingresses/web/status",
        )
        .unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.resource.as_str(), r.name.as_str()),
            ("shop", "federatedingresses", "web")
        );
        assert_eq!(
            (r.subresource.as_str(), r.api_group.as_str()),
            ("status", "fedingress.io")
        );
        let r = ObjectRef::from_path("/api/v1/namespaces/default/events").unwrap();
        assert_eq!((r.api_group.as_str(), r.api_version.as_str()), ("", "v1"));
        assert_eq!(r.resource, "events");
        assert!(r.name.is_empty());
        assert!(ObjectRef::from_path("/metrics").is_none());
    }

    fn record() -> Record {
        let now = chrono::Utc::now();
        Record {
            request_uri: "/apis/fedingress.io/v1alpha1/clusters".into(),
            verb: "create".into(),
            user: None,
            source_ip: None,
            user_agent: None,
            object_ref: None,
            code: 201,
            message: None,
            received: now,
            finished: now,
        }
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_full_disk_loses_events_counts_them_and_never_blocks() {
        if !Path::new("/dev/full").exists() {
            return;
        }
        let log = AuditLog::open(Path::new("/dev/full"), 4).unwrap();
        for _ in 0..1000 {
            log.record(&record());
        }
        // Every event is either dropped at the queue or lost to the write error, and
        // counted as such: how the two split depends on how fast the writer runs.
        let c = log.counters.clone();
        wait_for("every event counted as dropped or failed", || {
            c.dropped.load(Ordering::Relaxed) + c.write_errors.load(Ordering::Relaxed) == 1000
        });
        assert!(c.write_errors.load(Ordering::Relaxed) > 0);
        assert_eq!(c.written.load(Ordering::Relaxed), 0);
        let mut text = String::new();
        log.write_prometheus(&mut text);
        assert!(
            text.contains("fedingress_audit_write_errors_total"),
            "{text}"
        );
    }

    /// A sink whose first write waits until the test lets it go: a disk that hangs.
    struct Stuck {
        started: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    }

    impl Write for Stuck {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.started.send(());
            let _ = self.release.recv();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_hung_disk_drops_what_the_queue_cannot_hold_and_never_blocks() {
        let (started, on_start) = std::sync::mpsc::channel();
        let (release, on_release) = std::sync::mpsc::channel();
        let sink = Stuck {
            started,
            release: on_release,
        };
        // A line far larger than BufWriter's buffer goes straight to the sink.
        let mut big = record();
        big.request_uri = "/".repeat(64 * 1024);
        let log = AuditLog::start(Box::new(sink), 4, Path::new("stuck")).unwrap();
        log.record(&big);
        on_start.recv().unwrap();
        // The writer is inside the sink: the queue takes 4 and drops the rest.
        for _ in 0..100 {
            log.record(&record());
        }
        assert_eq!(log.counters.dropped.load(Ordering::Relaxed), 96);
        drop(release);
        let c = log.counters.clone();
        wait_for("the queued events written", || {
            c.written.load(Ordering::Relaxed) == 5
        });
    }

    #[test]
    fn lines_have_kube_shape_and_no_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path, 16).unwrap();
        let now = chrono::Utc::now();
        log.record(&Record {
            request_uri: "/apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings?fieldManager=kubectl-create".into(),
            verb: "create".into(),
            user: Some(AuditUser {
                username: "alice".into(),
                uid: "1".into(),
                groups: vec!["system:authenticated".into()],
            }),
            source_ip: Some("127.0.0.1".parse().unwrap()),
            user_agent: Some("kubectl/v1.32".into()),
            object_ref: ObjectRef::from_path("/apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings"),
            code: 403,
            message: Some("forbidden".into()),
            received: now,
            finished: now,
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let text = loop {
            let text = std::fs::read_to_string(&path).unwrap();
            if !text.is_empty() {
                break text;
            }
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let event: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(event["stage"], "ResponseComplete");
        assert_eq!(event["user"]["username"], "alice");
        assert_eq!(event["objectRef"]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(event["objectRef"]["namespace"], "shop");
        assert_eq!(event["responseStatus"]["code"], 403);
        assert_eq!(event["sourceIPs"][0], "127.0.0.1");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
