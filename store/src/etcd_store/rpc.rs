//! The etcd v3 gRPC client under [`EtcdStore`](super::EtcdStore): the generated code
//! ([`pb`], from etcd's own `.proto` files in `proto/etcd/api/`, checked in so building
//! needs no `protoc`; `tests/bootstrap.rs` regenerates it and fails on drift), one
//! channel balanced over every endpoint, and the few constructors the store's
//! transactions are made of.
//!
//! Only the KV, Watch and Lease services are used. Nothing here retries or maps errors
//! onto [`StoreError`](crate::StoreError): that is the store's job.

use std::time::Duration;

use futures_util::StreamExt;

use tonic::codegen::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

/// Generated code (prost + tonic), clients only. Only what the store uses is called: the
/// rest of etcd's API (cluster, maintenance, auth) stays unused.
#[allow(dead_code, clippy::all, clippy::pedantic, missing_docs)]
pub(crate) mod pb {
    pub mod etcdserverpb {
        include!("generated/etcdserverpb.rs");
    }
    pub mod mvccpb {
        include!("generated/mvccpb.rs");
    }
    pub mod authpb {
        include!("generated/authpb.rs");
    }
}

use pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::etcdserverpb::kv_client::KvClient;
use pb::etcdserverpb::lease_client::LeaseClient;
use pb::etcdserverpb::request_op::Request as Op;
use pb::etcdserverpb::watch_client::WatchClient;
use pb::etcdserverpb::watch_request::RequestUnion;
use pb::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, PutRequest,
    RangeRequest, RequestOp, WatchCreateRequest, WatchRequest, WatchResponse,
};

/// Largest gRPC message accepted from etcd: etcd's own server-side send limit
/// (`math.MaxInt32`). tonic's default of 4 MiB would fail a whole-prefix list of a few
/// thousand objects, or a watch catching up on large ones.
const MAX_MESSAGE_BYTES: usize = i32::MAX as usize;

/// A request failed: the channel could not be set up, or etcd (or the transport on its
/// way) answered with a gRPC status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("etcd endpoint: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("{0}")]
    Status(#[from] Status),
    #[error("https:// etcd endpoints need TLS material (a CA)")]
    NoTls,
}

/// Every request says it needs a leader (etcd's `hasleader` metadata, clientv3's
/// `WithRequireLeader`): a member cut off from the quorum fails it at once with
/// "no leader" instead of waiting, so the request is retried on another member.
fn require_leader(mut request: Request<()>) -> Result<Request<()>, Status> {
    request.metadata_mut().insert(
        "hasleader",
        tonic::metadata::MetadataValue::from_static("true"),
    );
    Ok(request)
}

type Transport = InterceptedService<Channel, fn(Request<()>) -> Result<Request<()>, Status>>;

/// TLS material for `https://` endpoints, as PEM.
pub(crate) struct Tls<'a> {
    pub ca_pem: &'a [u8],
    pub identity: Option<(&'a [u8], &'a [u8])>,
}

/// Clients of etcd's KV, Watch and Lease services on one channel; clones share it.
#[derive(Clone)]
pub(crate) struct Client {
    pub kv: KvClient<Transport>,
    pub watch: WatchClient<Transport>,
    pub lease: LeaseClient<Transport>,
}

impl Client {
    /// A channel balanced over `endpoints` (connected lazily, on the first request),
    /// with HTTP/2 keep-alive so that a dead member is noticed while idle.
    pub fn new(
        endpoints: &[String],
        tls: Option<Tls<'_>>,
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        let tls = tls.map(|tls| {
            let mut config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(tls.ca_pem));
            if let Some((cert, key)) = tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            config
        });
        let endpoints = endpoints
            .iter()
            .map(|url| {
                let mut endpoint = Endpoint::from_shared(url.clone())?
                    .connect_timeout(connect_timeout)
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .keep_alive_timeout(Duration::from_secs(5))
                    .keep_alive_while_idle(true);
                if url.starts_with("https://") {
                    let tls = tls.clone().ok_or(Error::NoTls)?;
                    endpoint = endpoint.tls_config(tls)?;
                }
                Ok(endpoint)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let channel = Channel::balance_list(endpoints.into_iter());
        let interceptor: fn(Request<()>) -> Result<Request<()>, Status> = require_leader;
        let transport = InterceptedService::new(channel, interceptor);
        Ok(Self {
            kv: KvClient::new(transport.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES),
            watch: WatchClient::new(transport.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES),
            lease: LeaseClient::new(transport),
        })
    }
}

/// A transaction compare on one key's create revision.
pub(crate) fn create_revision_is(key: &[u8], result: CompareResult, revision: i64) -> Compare {
    Compare {
        result: result as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
    }
}

/// A transaction compare on one key's mod revision.
pub(crate) fn mod_revision_is(key: &[u8], result: CompareResult, revision: i64) -> Compare {
    Compare {
        result: result as i32,
        target: CompareTarget::Mod as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::ModRevision(revision)),
    }
}

/// A transaction step that reads one key.
pub(crate) fn get(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(RangeRequest {
            key: key.to_vec(),
            ..RangeRequest::default()
        })),
    }
}

/// A transaction step that writes one key, returning its previous value, attached to
/// `lease` (0: none).
pub(crate) fn put(key: &[u8], value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: key.to_vec(),
            value,
            lease,
            prev_kv: true,
            ..PutRequest::default()
        })),
    }
}

/// A transaction step that deletes one key, returning its previous value.
pub(crate) fn delete(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
            key: key.to_vec(),
            range_end: Vec::new(),
            prev_kv: true,
        })),
    }
}

/// A lease's keep-alive stream: each request sent renews the lease once, and etcd
/// answers each with the lease's time to live (0: it expired).
pub(crate) struct KeepAlive {
    pub requests: tokio::sync::mpsc::Sender<LeaseKeepAliveRequest>,
    pub responses: tonic::Streaming<LeaseKeepAliveResponse>,
}

impl Client {
    /// Opens a keep-alive stream for lease `id`, which renews it once; `None` when etcd
    /// says the lease has expired (or never existed).
    pub async fn keep_alive(&self, id: i64) -> Result<Option<KeepAlive>, Error> {
        let (requests, receiver) = tokio::sync::mpsc::channel(4);
        // A fresh channel with room: the first renewal cannot fail to queue.
        let _ = requests.try_send(LeaseKeepAliveRequest { id });
        let outgoing = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|request| (request, receiver))
        });
        let mut responses = self
            .lease
            .clone()
            .lease_keep_alive(outgoing)
            .await?
            .into_inner();
        match responses.message().await? {
            Some(first) if first.ttl > 0 => Ok(Some(KeepAlive {
                requests,
                responses,
            })),
            Some(_) => Ok(None),
            None => Err(Status::unavailable("etcd closed the lease keep-alive stream").into()),
        }
    }

    /// Opens a watch: one create request on a stream kept open (etcd cancels a stream's
    /// watches when the client half-closes it); the stream ends when dropped.
    pub async fn watch(
        &self,
        create: WatchCreateRequest,
    ) -> Result<tonic::Streaming<WatchResponse>, Error> {
        let request = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        };
        let outgoing = futures_util::stream::iter([request]).chain(futures_util::stream::pending());
        Ok(self.watch.clone().watch(outgoing).await?.into_inner())
    }
}
