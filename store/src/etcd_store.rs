//! [`EtcdStore`]: the distributed [`Store`], etcd v3 through its gRPC API (cargo
//! feature `etcd`). The client ([`rpc`]) is generated from etcd's own `.proto` files and
//! checked in, so building needs nothing but cargo.
//!
//! How the trait maps onto etcd:
//! - **Revisions** are etcd's own: an empty etcd is at revision 1 and its first write
//!   gets 2, as the trait documents; an etcd that already holds data keeps its
//!   revisions as they are. Every etcd write advances the revision, so other writers of
//!   the same etcd (other keys, another prefix) make the revision jump: only this
//!   store's own writes are guaranteed to advance it by exactly one.
//! - **Keys** are `key_prefix + key`, byte for byte (kube-apiserver's `--etcd-prefix`).
//! - **Preconditions** are etcd transactions: `Absent` compares `create_revision == 0`,
//!   `ModRevision(r)` compares `mod_revision == r` (and `create_revision > 0`, so a
//!   missing key never matches); the failure branch reads the key, so
//!   [`StoreError::PreconditionFailed`] carries the current kv from the same
//!   transaction. Deletes also compare `create_revision > 0` so that a missing key is
//!   [`StoreError::NotFound`] whatever the precondition.
//! - **Range** is one etcd range (a consistent snapshot at the answer's header
//!   revision) from `prefix` or just after `start_after`, with etcd's `limit`/`more`;
//!   **range at a revision** is the same range with etcd's own `revision` field (etcd's
//!   "required revision has been compacted" / "is a future revision" become
//!   [`StoreError::Compacted`] / [`StoreError::FutureRevision`]).
//! - **Watch** is an etcd watch from `after + 1` with `prev_kv`, so deletes carry the
//!   deleted value; see [`watch`] for resuming after a broken stream.
//! - **Compaction** is etcd compaction (logical: the RPC returns once the compacted
//!   revision is in force, etcd frees the space in the background).
//!
//! # The compacted revision
//! etcd does not report its compacted revision through the API, and a marker key
//! written beside each compaction would itself be a write (the trait promises that a
//! compaction writes nothing, and other replicas or an operator's `etcdctl compact`
//! would not update it anyway). So it is read from etcd's own answers: a range *at*
//! revision `r` fails with "required revision has been compacted" exactly when `r` is
//! below the compacted revision. [`Store::compacted_revision`] keeps the highest value
//! known (compaction only grows), checks it with one such range, and only when someone
//! compacted further binary-searches between it and the current revision (about
//! log2(revisions) ranges, once per foreign compaction). A watch that etcd cancels for
//! compaction reports the revision too. etcd cannot tell "never compacted" from
//! "compacted at 1"; both read as 0 unless this process compacted at 1 itself.

mod coordination;
mod rpc;
mod watch;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rpc::pb::etcdserverpb::compare::CompareResult;
use rpc::pb::etcdserverpb::response_op::Response;
use rpc::pb::etcdserverpb::{
    CompactionRequest, Compare, RangeRequest, RangeResponse, RequestOp, ResponseHeader, TxnRequest,
    TxnResponse,
};
use rpc::pb::mvccpb;
use tokio::time::Instant;

use crate::{
    BoxError, Event, EventKind, Fence, KeyValue, Precondition, RangeResult, Revision, Store,
    StoreError, WatchStream,
};

/// gRPC status codes (a stable part of the gRPC spec) that etcd's answers are told
/// apart by.
const GRPC_CANCELLED: i32 = 1;
const GRPC_UNKNOWN: i32 = 2;
const GRPC_DEADLINE_EXCEEDED: i32 = 4;
const GRPC_OUT_OF_RANGE: i32 = 11;
const GRPC_UNAVAILABLE: i32 = 14;
/// First pause before a read is retried after a transient failure; doubles up to
/// [`MAX_RETRY_PAUSE`] while the request's deadline allows.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(20);
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// How to reach etcd; see [`EtcdStore::connect`].
#[derive(Clone, Debug)]
pub struct EtcdOptions {
    /// Client URLs (`http://host:port` or `https://host:port`), e.g. every member's.
    pub endpoints: Vec<String>,
    /// Prepended to every key, byte for byte (kube-apiserver's `--etcd-prefix`). With a
    /// prefix, the store sees only keys under it.
    pub key_prefix: String,
    /// TLS for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// Longest wait for one request (reads retry transient failures within it); also
    /// bounds the connection check of [`EtcdStore::connect`].
    pub request_timeout: Duration,
}

impl EtcdOptions {
    /// Plain-text endpoints, no prefix, 10 s per request.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            key_prefix: String::new(),
            tls: None,
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// TLS material for etcd, as PEM (kube-apiserver's `--etcd-cafile`, `--etcd-certfile`,
/// `--etcd-keyfile`).
#[derive(Clone)]
pub struct EtcdTls {
    /// CA certificate(s) that sign the etcd servers' certificates.
    pub ca_pem: Vec<u8>,
    /// Client certificate chain and private key, when etcd requires client certificates.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// The distributed [`Store`]: etcd v3, for several API server replicas.
///
/// # Guarantees
/// - An `Ok` write was committed by etcd's raft quorum (etcd fsyncs its log before it
///   acknowledges).
/// - Reads are linearizable (no serializable reads).
/// - A watch survives member restarts and leader changes: etcd keeps a watch open across
///   leader elections, and when the stream itself breaks (the member it was served by
///   died) it is opened again from the last revision delivered, on any reachable
///   member, without gaps or duplicates.
///
/// # Assumptions
/// Nobody else writes under the key prefix (other writers elsewhere in the same etcd
/// only make revisions jump). Requests time out after
/// [`EtcdOptions::request_timeout`]. Reads are retried on transient failures (a member
/// down or dying mid-request, no leader); writes when etcd refused them before
/// proposing (no connection, no leader). A conditional write whose reply was lost is
/// sent once more and succeeds when that finds the key holding exactly its value and
/// lease (its precondition keeps it from applying twice); otherwise it fails with
/// [`StoreError::Indeterminate`]. A request that changed nothing fails with
/// [`StoreError::Unavailable`].
///
/// Clones share one channel (a cheap handle).
#[derive(Clone)]
pub struct EtcdStore {
    client: rpc::Client,
    key_prefix: Arc<str>,
    /// The highest compacted revision known (a lower bound of etcd's).
    compacted: Arc<AtomicI64>,
    request_timeout: Duration,
    endpoints: Vec<String>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("key_prefix", &self.key_prefix)
            .field("compacted", &self.compacted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A request that did not succeed: etcd's error, or no answer in time; `read` says
/// whether the request only read (so that failing it changed nothing).
#[derive(Debug)]
enum Failure {
    Etcd { error: rpc::Error, read: bool },
    Timeout { after: Duration, read: bool },
}

impl Failure {
    /// The store's error for a request that did `operation`:
    /// - a transient failure (see [`transient`]) of a read, or of a write that etcd
    ///   refused before proposing it ([`not_proposed`]), is
    ///   [`StoreError::Unavailable`]: nothing changed;
    /// - a transient failure of any other write is [`StoreError::Indeterminate`]: the
    ///   answer was lost, the write may have been applied;
    /// - anything else is [`StoreError::Backend`].
    fn into_store(self, operation: &'static str) -> StoreError {
        let (changed_nothing, transient) = match &self {
            Failure::Etcd { error, read } => (*read || not_proposed(error), transient(error)),
            Failure::Timeout { read, .. } => (*read, true),
        };
        let source: BoxError = match self {
            Failure::Etcd { error, .. } => Box::new(error),
            Failure::Timeout { after, .. } => {
                format!("no answer from etcd within {after:?}").into()
            }
        };
        match (transient, changed_nothing) {
            (true, true) => StoreError::Unavailable { operation, source },
            (true, false) => StoreError::Indeterminate { operation, source },
            (false, _) => StoreError::Backend { operation, source },
        }
    }

    /// etcd's "mvcc: required revision has been compacted".
    fn is_compacted(&self) -> bool {
        self.status_is(GRPC_OUT_OF_RANGE, "required revision has been compacted")
    }

    /// etcd's "mvcc: required revision is a future revision".
    fn is_future_revision(&self) -> bool {
        self.status_is(GRPC_OUT_OF_RANGE, "future revision")
    }

    fn status_is(&self, code: i32, text: &str) -> bool {
        matches!(self, Failure::Etcd { error: rpc::Error::Status(status), .. }
            if i32::from(status.code()) == code && status.message().contains(text))
    }
}

/// Whether a failure may pass: the connection failed or broke (a member died: tonic
/// reports a broken HTTP/2 connection as code Unknown, "h2 protocol error", or as
/// Cancelled), etcd has no leader, or it did not answer in time. etcd's own refusals
/// (a compacted revision, a bad request, a too large one) are not.
fn transient(error: &rpc::Error) -> bool {
    match error {
        rpc::Error::Transport(_) => true,
        rpc::Error::Status(status) => matches!(
            i32::from(status.code()),
            GRPC_CANCELLED | GRPC_UNKNOWN | GRPC_DEADLINE_EXCEEDED | GRPC_UNAVAILABLE
        ),
        rpc::Error::NoTls => false,
    }
}

/// Whether a failure proves that etcd never proposed the request: no connection could
/// be made, or the member had no leader (etcd checks `hasleader` before proposing).
fn not_proposed(error: &rpc::Error) -> bool {
    match error {
        rpc::Error::Transport(_) => true,
        rpc::Error::Status(status) => {
            let message = status.message();
            i32::from(status.code()) == GRPC_UNAVAILABLE
                && (message.contains("no leader")
                    || message.contains("connect error")
                    || message.contains("Connection refused"))
        }
        rpc::Error::NoTls => false,
    }
}

/// Whether a failed request may be sent again: a read after any transient failure, a
/// write only when etcd never proposed it (a retried write that had in fact been
/// applied would fail its own precondition; `put_with` resends writes
/// whose answer was lost).
fn retryable(error: &rpc::Error, read: bool) -> bool {
    not_proposed(error) || (read && transient(error))
}

impl EtcdStore {
    /// Connects to etcd and checks that it answers (one linearizable read, so a quorum
    /// must be up), within [`EtcdOptions::request_timeout`].
    ///
    /// # Errors
    /// [`StoreError::Backend`] (operation "connect to etcd") when the endpoints or the
    /// TLS material are unusable or etcd does not answer in time.
    pub async fn connect(options: EtcdOptions) -> Result<Self, StoreError> {
        let connect_error = |source: BoxError| StoreError::Backend {
            operation: "connect to etcd",
            source,
        };
        if options.endpoints.is_empty() {
            return Err(connect_error("no etcd endpoint given".into()));
        }
        let tls = options.tls.as_ref().map(|tls| rpc::Tls {
            ca_pem: &tls.ca_pem,
            identity: tls
                .identity
                .as_ref()
                .map(|(cert, key)| (cert.as_slice(), key.as_slice())),
        });
        // The channel connects on the first request: the revision read below.
        let client = rpc::Client::new(&options.endpoints, tls, options.request_timeout)
            .map_err(|e| connect_error(Box::new(e)))?;
        let store = Self {
            client,
            key_prefix: options.key_prefix.into(),
            compacted: Arc::new(AtomicI64::new(0)),
            request_timeout: options.request_timeout,
            endpoints: options.endpoints,
        };
        match store.revision().await {
            Ok(_) => Ok(store),
            Err(
                StoreError::Backend { source, .. }
                | StoreError::Unavailable { source, .. }
                | StoreError::Indeterminate { source, .. },
            ) => Err(connect_error(source)),
            Err(other) => Err(other),
        }
    }

    fn full_key(&self, key: &str) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.key_prefix.len() + key.len());
        full.extend_from_slice(self.key_prefix.as_bytes());
        full.extend_from_slice(key.as_bytes());
        full
    }

    /// A key under the prefix that this store never writes (keys are UTF-8, this is
    /// not), for reads that only want a header or a compaction check.
    fn probe_key(&self) -> Vec<u8> {
        let mut key = self.key_prefix.as_bytes().to_vec();
        key.extend_from_slice(b"\xff\xfeprobe");
        key
    }

    /// Runs `request` with the request timeout, retrying as [`retryable`] allows.
    async fn call<T, F, Fut>(&self, read: bool, mut request: F) -> Result<T, Failure>
    where
        F: FnMut(rpc::Client) -> Fut,
        Fut: Future<Output = Result<T, rpc::Error>>,
    {
        let deadline = Instant::now() + self.request_timeout;
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            match tokio::time::timeout_at(deadline, request(self.client.clone())).await {
                Err(_) => {
                    return Err(Failure::Timeout {
                        after: self.request_timeout,
                        read,
                    });
                }
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(error)) if retryable(&error, read) && Instant::now() + pause < deadline => {
                    tracing::debug!(error = %error, "etcd request failed, retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
                Ok(Err(error)) => return Err(Failure::Etcd { error, read }),
            }
        }
    }

    async fn txn(
        &self,
        operation: &'static str,
        txn: TxnRequest,
    ) -> Result<TxnResponse, StoreError> {
        self.call(false, move |mut client| {
            let txn = txn.clone();
            async move { Ok(client.kv.txn(txn).await?.into_inner()) }
        })
        .await
        .map_err(|f| f.into_store(operation))
    }

    /// Whether etcd's compacted revision is above `revision` (a range at `revision`
    /// fails as compacted).
    async fn compacted_above(&self, revision: Revision) -> Result<bool, StoreError> {
        let answer = self.count_probe(Some(revision)).await;
        match answer {
            Ok(_) => Ok(false),
            Err(failure) if failure.is_compacted() => Ok(true),
            Err(failure) if failure.is_future_revision() => Ok(false),
            Err(failure) => Err(failure.into_store("read the compacted revision")),
        }
    }

    /// A count-only read of the probe key (at `revision`, else now): what a read that
    /// only wants a header or a compaction check costs.
    async fn count_probe(&self, revision: Option<Revision>) -> Result<RangeResponse, Failure> {
        let request = RangeRequest {
            key: self.probe_key(),
            count_only: true,
            revision: revision.unwrap_or(0),
            ..RangeRequest::default()
        };
        self.call(true, move |mut client| {
            let request = request.clone();
            async move { Ok(client.kv.range(request).await?.into_inner()) }
        })
        .await
    }

    /// Notes a compacted revision learnt from etcd or done here.
    fn saw_compacted(&self, revision: Revision) {
        self.compacted.fetch_max(revision, Ordering::AcqRel);
    }

    /// The key with the prefix removed, as UTF-8.
    fn strip(&self, key: &[u8]) -> Result<String, StoreError> {
        let rest = key
            .strip_prefix(self.key_prefix.as_bytes())
            .ok_or_else(|| StoreError::Corrupt {
                detail: format!(
                    "etcd returned key {:?} outside the prefix {:?}",
                    String::from_utf8_lossy(key),
                    self.key_prefix
                ),
            })?;
        String::from_utf8(rest.to_vec()).map_err(|_| StoreError::Corrupt {
            detail: format!("etcd key {:?} is not UTF-8", String::from_utf8_lossy(key)),
        })
    }

    fn key_value(&self, kv: &mvccpb::KeyValue) -> Result<KeyValue, StoreError> {
        Ok(KeyValue {
            key: self.strip(&kv.key)?,
            value: Bytes::copy_from_slice(&kv.value),
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
        })
    }

    /// One key as etcd returns it (lease included).
    async fn get_raw(&self, key: &str) -> Result<Option<mvccpb::KeyValue>, StoreError> {
        let request = RangeRequest {
            key: self.full_key(key),
            ..RangeRequest::default()
        };
        let answer = self
            .call(true, move |mut client| {
                let request = request.clone();
                async move { Ok(client.kv.range(request).await?.into_inner()) }
            })
            .await
            .map_err(|f| f.into_store("read a key"))?;
        Ok(answer.kvs.into_iter().next())
    }

    /// Whether the kv read by a transaction's failure branch is attached to `lease`
    /// (0: none).
    fn lease_is(&self, response: &TxnResponse, lease: i64) -> bool {
        reads(response)
            .next()
            .and_then(|get| get.kvs.first())
            .is_some_and(|kv| kv.lease == lease)
    }

    /// The kv read by a transaction's failure branch ([`rpc::get`] of one key).
    fn current_from(&self, response: &TxnResponse) -> Result<Option<KeyValue>, StoreError> {
        match reads(response).next() {
            Some(get) => get.kvs.first().map(|kv| self.key_value(kv)).transpose(),
            None => Ok(None),
        }
    }

    /// A range now (`revision` `None`) or at `revision`, as etcd answers it; see
    /// [`Store::range`] and [`Store::range_at`].
    async fn range_inner(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Option<Revision>,
    ) -> Result<RangeResult, StoreError> {
        let first = self.full_key(prefix);
        let end = prefix_end(&first);
        let start = match start_after {
            Some(after) if after >= prefix => {
                let mut start = self.full_key(after);
                start.push(0);
                start
            }
            // etcd has no empty key: a range from the very start begins at "\0".
            _ if first.is_empty() => vec![0],
            _ => first,
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        if end != [0] && start >= end {
            // Nothing can follow `start_after` inside the prefix; still answer with the
            // revision the (empty) read saw, after checking a past one is readable.
            let revision = match revision {
                None => self.revision().await?,
                Some(at) => {
                    if let Err(failure) = self.count_probe(Some(at)).await {
                        if failure.is_compacted() || failure.is_future_revision() {
                            let future = failure.is_future_revision();
                            return Err(self.past_read_error(future, at).await);
                        }
                        return Err(failure.into_store("read a range"));
                    }
                    at
                }
            };
            return Ok(RangeResult {
                kvs: Vec::new(),
                more: false,
                revision,
            });
        }
        let request = RangeRequest {
            key: start,
            range_end: end,
            limit,
            revision: revision.unwrap_or(0),
            ..RangeRequest::default()
        };
        let answer = self
            .call(true, move |mut client| {
                let request = request.clone();
                async move { Ok(client.kv.range(request).await?.into_inner()) }
            })
            .await;
        let answer = match (answer, revision) {
            (Ok(answer), _) => answer,
            (Err(failure), Some(at)) if failure.is_compacted() || failure.is_future_revision() => {
                let future = failure.is_future_revision();
                return Err(self.past_read_error(future, at).await);
            }
            (Err(failure), _) => return Err(failure.into_store("read a range")),
        };
        // etcd's header carries the current revision; a past read saw `revision`.
        let revision = match revision {
            Some(at) => at,
            None => header_revision(answer.header.as_ref(), "read a range")?,
        };
        let more = answer.more;
        let kvs = answer
            .kvs
            .iter()
            .map(|kv| self.key_value(kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RangeResult {
            kvs,
            more,
            revision,
        })
    }

    /// The error of a read at `at` that etcd refused as compacted or (`future`) as a
    /// future revision, with the store's compacted or current revision.
    async fn past_read_error(&self, future: bool, at: Revision) -> StoreError {
        if future {
            return match self.revision().await {
                Ok(current) => StoreError::FutureRevision {
                    requested: at,
                    current,
                },
                Err(e) => e,
            };
        }
        match self.compacted_revision().await {
            Ok(compacted) => StoreError::Compacted {
                requested: at,
                compacted: compacted.max(at + 1),
            },
            Err(e) => e,
        }
    }

    /// A put, also requiring `fence` to hold (when given), attached to `lease` (when not
    /// 0).
    async fn put_with(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
        fence: Option<&Fence>,
        lease: i64,
    ) -> Result<KeyValue, StoreError> {
        const OPERATION: &str = "write a key";
        let full = self.full_key(key);
        let mut compare = match precondition {
            Precondition::None => Vec::new(),
            Precondition::Absent => vec![rpc::create_revision_is(&full, CompareResult::Equal, 0)],
            Precondition::ModRevision(revision) => vec![
                rpc::create_revision_is(&full, CompareResult::Greater, 0),
                rpc::mod_revision_is(&full, CompareResult::Equal, revision),
            ],
        };
        let mut failure = vec![rpc::get(&full)];
        self.add_fence(fence, &mut compare, &mut failure);
        let txn = TxnRequest {
            compare,
            success: vec![rpc::put(&full, value.to_vec(), lease)],
            failure,
        };
        // A write whose answer was lost is sent again (its precondition keeps it from
        // applying twice); `lost` keeps why, for when that cannot settle it.
        let mut lost = None;
        let answer = loop {
            match self.txn(OPERATION, txn.clone()).await {
                Ok(answer) => break answer,
                Err(error @ StoreError::Indeterminate { .. })
                    if lost.is_none() && !matches!(precondition, Precondition::None) =>
                {
                    tracing::debug!(key, error = %error, "the answer to a write was lost; sending it again");
                    lost = Some(error);
                }
                // The first try's outcome is still unknown.
                Err(error) => return Err(lost.unwrap_or(error)),
            }
        };
        if !answer.succeeded {
            let current = self.current_from(&answer)?;
            if let Some(error) = lost {
                // The first try applied when the key now holds exactly its value and
                // lease; otherwise someone else's write (or ours, then overwritten) is
                // there, and which cannot be told.
                return match current {
                    Some(current) if current.value == value && self.lease_is(&answer, lease) => {
                        Ok(current)
                    }
                    _ => Err(error),
                };
            }
            self.check_fence(fence, &answer)?;
            return Err(StoreError::PreconditionFailed {
                key: key.to_string(),
                current,
            });
        }
        let revision = header_revision(answer.header.as_ref(), OPERATION)?;
        let prev = answer.responses.iter().find_map(|op| match &op.response {
            Some(Response::ResponsePut(put)) => put.prev_kv.as_ref().map(|kv| kv.create_revision),
            _ => None,
        });
        Ok(KeyValue {
            key: key.to_string(),
            value,
            create_revision: prev.unwrap_or(revision),
            mod_revision: revision,
        })
    }

    /// A delete, also requiring `fence` to hold (when given).
    async fn delete_with(
        &self,
        key: &str,
        precondition: Precondition,
        fence: Option<&Fence>,
    ) -> Result<Event, StoreError> {
        const OPERATION: &str = "delete a key";
        let full = self.full_key(key);
        let mut compare = vec![rpc::create_revision_is(&full, CompareResult::Greater, 0)];
        match precondition {
            Precondition::None => {}
            // The key must exist and must not: never both.
            Precondition::Absent => {
                compare.push(rpc::create_revision_is(&full, CompareResult::Equal, 0))
            }
            Precondition::ModRevision(revision) => {
                compare.push(rpc::mod_revision_is(&full, CompareResult::Equal, revision))
            }
        }
        let mut failure = vec![rpc::get(&full)];
        self.add_fence(fence, &mut compare, &mut failure);
        let txn = TxnRequest {
            compare,
            success: vec![rpc::delete(&full)],
            failure,
        };
        let answer = self.txn(OPERATION, txn).await?;
        if !answer.succeeded {
            self.check_fence(fence, &answer)?;
            return Err(match self.current_from(&answer)? {
                None => StoreError::NotFound {
                    key: key.to_string(),
                },
                current => StoreError::PreconditionFailed {
                    key: key.to_string(),
                    current,
                },
            });
        }
        let revision = header_revision(answer.header.as_ref(), OPERATION)?;
        let prev = answer
            .responses
            .into_iter()
            .find_map(|op| match op.response {
                Some(Response::ResponseDeleteRange(delete)) => delete.prev_kvs.into_iter().next(),
                _ => None,
            })
            .ok_or_else(|| StoreError::Backend {
                operation: OPERATION,
                source: "etcd deleted the key but returned no previous value".into(),
            })?;
        let prev = self.key_value(&prev)?;
        Ok(Event {
            revision,
            kind: EventKind::Delete,
            kv: KeyValue {
                mod_revision: revision,
                ..prev.clone()
            },
            prev: Some(prev),
        })
    }

    /// Adds the fence's compare (the election key still has the fence's create
    /// revision) and, to the failure branch, a read of the election key.
    fn add_fence(
        &self,
        fence: Option<&Fence>,
        compare: &mut Vec<Compare>,
        failure: &mut Vec<RequestOp>,
    ) {
        if let Some(fence) = fence {
            let key = self.full_key(&fence.key);
            compare.push(rpc::create_revision_is(
                &key,
                CompareResult::Equal,
                fence.revision,
            ));
            failure.push(rpc::get(&key));
        }
    }

    /// After a failed transaction: [`StoreError::Fenced`] when the fence no longer holds
    /// (the failure branch's second read is the election key).
    fn check_fence(&self, fence: Option<&Fence>, response: &TxnResponse) -> Result<(), StoreError> {
        let Some(fence) = fence else { return Ok(()) };
        let holder = reads(response)
            .nth(1)
            .and_then(|get| get.kvs.first().map(|kv| kv.create_revision));
        if holder == Some(fence.revision) {
            Ok(())
        } else {
            Err(StoreError::Fenced {
                key: fence.key.clone(),
            })
        }
    }
}

/// The reads ([`rpc::get`]) of a transaction's answer, in order.
fn reads(response: &TxnResponse) -> impl Iterator<Item = &RangeResponse> {
    response
        .responses
        .iter()
        .filter_map(|op| match &op.response {
            Some(Response::ResponseRange(get)) => Some(get),
            _ => None,
        })
}

fn header_revision(
    header: Option<&ResponseHeader>,
    operation: &'static str,
) -> Result<Revision, StoreError> {
    header
        .map(|header| header.revision)
        .ok_or_else(|| StoreError::Backend {
            operation,
            source: "etcd answered without a response header".into(),
        })
}

/// The smallest key greater than every key starting with `prefix` (etcd's range end
/// for a prefix); `[0]` ("to the end") when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[async_trait::async_trait]
impl Store for EtcdStore {
    async fn revision(&self) -> Result<Revision, StoreError> {
        let answer = self
            .count_probe(None)
            .await
            .map_err(|f| f.into_store("read the revision"))?;
        header_revision(answer.header.as_ref(), "read the revision")
    }

    async fn compacted_revision(&self) -> Result<Revision, StoreError> {
        let known = self.compacted.load(Ordering::Acquire);
        let checked = known.max(1);
        if !self.compacted_above(checked).await? {
            return Ok(known);
        }
        // Someone compacted beyond what we know: the compacted revision is the smallest
        // r in (checked, current] at which a range still works.
        let (mut low, mut high) = (checked + 1, self.revision().await?);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.compacted_above(middle).await? {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        self.saw_compacted(low);
        Ok(self.compacted.load(Ordering::Acquire))
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        self.get_raw(key)
            .await?
            .map(|kv| self.key_value(&kv))
            .transpose()
    }

    async fn range(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<RangeResult, StoreError> {
        self.range_inner(prefix, start_after, limit, None).await
    }

    async fn range_at(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
        revision: Revision,
    ) -> Result<RangeResult, StoreError> {
        self.range_inner(prefix, start_after, limit, Some(revision))
            .await
    }

    async fn put(
        &self,
        key: &str,
        value: Bytes,
        precondition: Precondition,
    ) -> Result<KeyValue, StoreError> {
        self.put_with(key, value, precondition, None, 0).await
    }

    async fn delete(&self, key: &str, precondition: Precondition) -> Result<Event, StoreError> {
        self.delete_with(key, precondition, None).await
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream, StoreError> {
        let compacted = self.compacted_revision().await?;
        if after < compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted,
            });
        }
        watch::start(self.clone(), prefix, after).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        if revision <= self.compacted.load(Ordering::Acquire) {
            return Ok(());
        }
        let answer = self
            .call(false, move |mut client| async move {
                let request = CompactionRequest {
                    revision,
                    physical: false,
                };
                Ok(client.kv.compact(request).await?.into_inner())
            })
            .await;
        match answer {
            Ok(_) => {
                self.saw_compacted(revision);
                Ok(())
            }
            // Someone compacted to this revision or beyond already.
            Err(failure) if failure.is_compacted() => Ok(()),
            Err(failure) if failure.is_future_revision() => Err(StoreError::FutureRevision {
                requested: revision,
                current: self.revision().await?,
            }),
            Err(failure) => Err(failure.into_store("compact history")),
        }
    }
}

#[cfg(test)]
mod tests {
    use tonic::Status;

    use super::*;

    fn failure(status: Status, read: bool) -> StoreError {
        Failure::Etcd {
            error: rpc::Error::Status(status),
            read,
        }
        .into_store("write a key")
    }

    #[test]
    fn failures_say_whether_anything_changed() {
        // A member killed mid-request: tonic's broken HTTP/2 connection.
        let broken = || Status::unknown("h2 protocol error: error reading a body from connection");
        assert!(matches!(
            failure(broken(), true),
            StoreError::Unavailable { .. }
        ));
        assert!(matches!(
            failure(broken(), false),
            StoreError::Indeterminate { .. }
        ));
        assert!(matches!(
            failure(Status::cancelled("connection reset"), false),
            StoreError::Indeterminate { .. }
        ));
        // Refused before proposing: nothing changed, even for a write.
        let no_leader = Status::unavailable("etcdserver: no leader");
        assert!(matches!(
            failure(no_leader, false),
            StoreError::Unavailable { .. }
        ));
        let timed_out = Failure::Timeout {
            after: Duration::from_secs(10),
            read: false,
        };
        assert!(matches!(
            timed_out.into_store("write a key"),
            StoreError::Indeterminate { .. }
        ));
        // etcd's own refusals are neither.
        let too_large = Status::invalid_argument("etcdserver: request is too large");
        assert!(matches!(
            failure(too_large, false),
            StoreError::Backend { .. }
        ));
    }

    #[test]
    fn only_reads_and_unproposed_writes_are_retried() {
        let broken = rpc::Error::Status(Status::unknown("h2 protocol error"));
        assert!(retryable(&broken, true));
        assert!(!retryable(&broken, false));
        let refused =
            rpc::Error::Status(Status::unavailable("tcp connect error: Connection refused"));
        assert!(retryable(&refused, false));
        let compacted = rpc::Error::Status(Status::out_of_range(
            "etcdserver: mvcc: required revision has been compacted",
        ));
        assert!(!retryable(&compacted, true));
    }
}
