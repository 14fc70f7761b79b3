//! The agents' gRPC endpoint (`fedingress.v1.AgentGateway/Connect`).
//!
//! # Guarantees
//! - The first message must be a Hello naming a cluster, authenticated either by the
//!   client certificate of the TLS connection (issued by the agent CA for that cluster's
//!   current uid and not revoked) or, for compatibility, by a live bearer token of that
//!   cluster's current uid (else `Unauthenticated`, saying why); everything on the stream
//!   is then attributed to that cluster only, so a connection speaks only for its own
//!   cluster.
//! - `Join` (no credential but a join token) and `Renew` (the client certificate) issue
//!   client certificates; see [`super::pki`]. A join token is consumed by a
//!   compare-and-swap: of two racing joins only one gets a certificate.
//! - Deleting the credential that authenticated a session, or its Cluster, ends the
//!   session at once on whichever replica holds it ([`super::credentials`]).
//! - After Welcome the agent gets a Snapshot unless the plan it applied (by digest) is
//!   the current one; then a Delta per plan change, always against the plan last sent
//!   on this stream.
//! - A session that sends nothing for one lease is ended (the agent reconnects); a
//!   newer session of the same cluster replaces the older.
//! - Welcome carries the Cluster's `spec.provider` as stored when the session started; a
//!   later change of it ends the session ([`Sessions::end_session`], called by the
//!   controller), so the agent reconnects and is welcomed with the new value.

pub mod incoming;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fedingress_api::cluster::Provider;
use fedingress_proto::convert::{agent_from_pb, hub_to_pb};
use fedingress_proto::pb::agent_gateway_server::{AgentGateway, AgentGatewayServer};
use fedingress_proto::pb::{AgentMessage, HubMessage};
use fedingress_proto::{AgentToHub, HubToAgent};
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::credentials::{IDENTITY, Registration, Revocations};
use super::pki::AgentCa;
use super::tokens::{CertRecord, TokenStore, Verdict};
use super::{MemberInfo, Published, Sessions};
use fedingress_apiserver::registry::Registry;

/// How agents prove who they are beyond bearer tokens: the agent CA (none: `Join` and
/// `Renew` are refused and only tokens work), the validity of the certificates it issues,
/// whether the gateway serves TLS at all, and the live sessions to end on revocation.
#[derive(Clone)]
pub struct Identity {
    pub ca: Option<Arc<AgentCa>>,
    pub certificate_validity: Duration,
    pub tls: bool,
    pub revocations: Revocations,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("ca", &self.ca.is_some())
            .field("certificate_validity", &self.certificate_validity)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// How long an agent has to say Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Plans sent on one stream that an Ack may still refer to.
const SENT_PLANS_KEPT: usize = 4;

pub struct Gateway {
    hub: Arc<Sessions>,
    tokens: TokenStore,
    registry: Registry,
    identity: Identity,
}

/// The member a Hello speaks for: its `member`, or for an agent from before members
/// (none given) the cluster's name. A name that is not a DNS-1123 label is refused
/// without echoing it.
fn member_name(cluster: &str, member: &str) -> Result<String, Status> {
    if member.is_empty() {
        return Ok(cluster.to_string());
    }
    if fedingress_api::names::dns1123_label(member).is_empty() {
        return Ok(member.to_string());
    }
    IDENTITY.refused("member");
    Err(Status::invalid_argument(format!(
        "the member name ({} bytes) is not a DNS-1123 label (set member.name in the agent's config)",
        member.len()
    )))
}

/// A client certificate that names a member speaks for that member only; one of the
/// whole cluster (from before members) or a token speaks for any member of it.
fn certificate_speaks_for(
    certified: Option<&str>,
    cluster: &str,
    member: &str,
) -> Result<(), Status> {
    match certified {
        None | Some("") => Ok(()),
        Some(certified) if certified == member => Ok(()),
        Some(certified) => {
            IDENTITY.refused("member");
            Err(Status::permission_denied(format!(
                "the client certificate is member {certified:?}'s of cluster {cluster:?}: it cannot speak as member {member:?}"
            )))
        }
    }
}

/// Refuses a cluster name that no Cluster can have before it is logged or looked up:
/// an unauthenticated client chooses it (a 4 MiB name would be a 4 MiB log line).
fn valid_cluster_name(name: &str) -> Result<(), Status> {
    if fedingress_api::names::dns1123_subdomain(name).is_empty() {
        return Ok(());
    }
    IDENTITY.refused("name");
    tracing::debug!(
        length = name.len(),
        "agent refused: not a valid cluster name"
    );
    Err(Status::invalid_argument(format!(
        "the cluster name ({} bytes) is not a valid Cluster name (a DNS-1123 subdomain)",
        name.len()
    )))
}
impl Gateway {
    pub fn server(
        hub: Arc<Sessions>,
        tokens: TokenStore,
        registry: Registry,
        identity: Identity,
    ) -> AgentGatewayServer<Self> {
        AgentGatewayServer::new(Self {
            hub,
            tokens,
            registry,
            identity,
        })
    }

    /// The Cluster's uid, or `Unauthenticated` naming it missing.
    async fn cluster(&self, cluster: &str) -> Result<String, Status> {
        match self
            .registry
            .get::<fedingress_api::Cluster>(None, cluster)
            .await
        {
            Ok(object) => Ok(object.metadata.uid.unwrap_or_default()),
            Err(e) if e.code == http::StatusCode::NOT_FOUND => Err(Status::unauthenticated(
                format!("no cluster {cluster:?} (deleted, or never created)"),
            )),
            Err(e) => Err(Status::unavailable(e.message)),
        }
    }

    /// Authenticates a Hello: the client certificate when there is one, else the token.
    /// Returns the registration that ends the session on revocation, the method
    /// (`certificate` or `token`), and the member the certificate names: `None` for a
    /// token (cluster-wide) or a certificate from before members (whole cluster), so
    /// such a session may speak as any member.
    ///
    /// The session is registered under the keys of its credential and Cluster before
    /// either is read: a deletion the reads below miss is then one the revocation watch
    /// sees, so no session outlives its credential.
    async fn authenticate(
        &self,
        cluster: &str,
        token: &str,
        peer_cert: Option<&[u8]>,
    ) -> Result<(Registration, &'static str, Option<String>), Status> {
        let fingerprint = peer_cert.map(super::pki::fingerprint);
        let credential = match &fingerprint {
            Some(fingerprint) => super::tokens::cert_key(cluster, fingerprint),
            None => super::tokens::token_key(cluster, super::tokens::token_id(token)),
        };
        let cluster_key = format!(
            "{}{cluster}",
            fedingress_apiserver::registry::prefix::<fedingress_api::Cluster>(None)
        );
        let registration = self
            .identity
            .revocations
            .register(credential.clone(), cluster_key);
        let uid = self.cluster(cluster).await?;
        let (verdict, method, member) = match fingerprint {
            Some(fingerprint) => {
                let (verdict, record) = self
                    .tokens
                    .verify_cert_record(cluster, &uid, &fingerprint, unix_now())
                    .await
                    .map_err(|e| Status::unavailable(e.message))?;
                let member = record.map(|r| r.member).filter(|m| !m.is_empty());
                if matches!(verdict, Verdict::Valid { .. }) {
                    // The agent's newest certificate works: the ones before it go.
                    let tokens = self.tokens.clone();
                    let cluster = cluster.to_string();
                    tokio::spawn(async move {
                        match tokens.retire_older_certs(&cluster, &fingerprint).await {
                            Ok(0) => {}
                            Ok(n) => tracing::info!(
                                cluster,
                                certificates = n,
                                "older client certificates of the cluster retired"
                            ),
                            Err(e) => {
                                tracing::warn!(cluster, error = %e.message, "retiring older client certificates failed")
                            }
                        }
                    });
                }
                (verdict, "certificate", member)
            }
            None if token.is_empty() => {
                return Err(Status::unauthenticated(format!(
                    "no credential for cluster {cluster:?}: connect with the client certificate from a join, or give a token"
                )));
            }
            None => (
                self.tokens
                    .verify(cluster, &uid, token)
                    .await
                    .map_err(|e| Status::unavailable(e.message))?,
                "token",
                None,
            ),
        };
        match verdict {
            Verdict::Valid { key } => {
                debug_assert_eq!(key, credential, "registered under another key");
                Ok((registration, method, member))
            }
            Verdict::Refused(why) => {
                IDENTITY.refused(method);
                Err(Status::unauthenticated(why))
            }
        }
    }

    /// Signs `csr_pem` for `member` of `cluster` of `uid` (`""`: the whole cluster) and
    /// records the certificate.
    async fn issue(
        &self,
        cluster: &str,
        uid: &str,
        member: &str,
        csr_pem: &str,
    ) -> Result<fedingress_proto::IssuedCertificate, Status> {
        let Some(ca) = &self.identity.ca else {
            return Err(Status::failed_precondition(
                "this hub has no agent CA (give --agent-ca-cert-file and --agent-ca-key-file): agents authenticate with tokens only",
            ));
        };
        let now = std::time::SystemTime::now();
        let signed = ca
            .sign(
                csr_pem,
                cluster,
                uid,
                member,
                self.identity.certificate_validity,
                now,
            )
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let record = CertRecord {
            fingerprint: signed.fingerprint.clone(),
            cluster: cluster.to_string(),
            uid: uid.to_string(),
            serial: signed.serial.clone(),
            created_at: fedingress_api::Time(chrono::Utc::now()),
            not_after: signed.not_after,
            member: member.to_string(),
        };
        self.tokens
            .record_cert(&record, unix_now())
            .await
            .map_err(|e| Status::unavailable(e.message))?;
        Ok(fedingress_proto::IssuedCertificate {
            certificate_pem: signed.pem,
            ca_pem: ca.cert_pem().to_string(),
            not_after_unix: signed.not_after,
            fingerprint: signed.fingerprint,
        })
    }
}

/// Refuses a member name that is not a DNS-1123 label (`""` is an agent from before
/// members, and fine) before it is logged or signed into a certificate.
fn valid_member_name(member: &str) -> Result<(), Status> {
    let problems = fedingress_api::names::dns1123_label(member);
    if member.is_empty() || problems.is_empty() {
        return Ok(());
    }
    IDENTITY.refused("member");
    if member.len() > 253 {
        return Err(Status::invalid_argument(format!(
            "the member name ({} bytes) is not a DNS-1123 label",
            member.len()
        )));
    }
    Err(Status::invalid_argument(format!(
        "member {member:?} is not a DNS-1123 label: {}",
        problems.join("; ")
    )))
}

/// The member a renewed certificate names: the current certificate's. A certificate of
/// the whole cluster (`""`, from before members) is renewed as the member asked for,
/// which only narrows what it may speak for.
///
/// # Errors
/// `PermissionDenied` when the request asks for another member than the certificate's.
fn renewed_member(current: &str, asked: &str) -> Result<String, Status> {
    match (current, asked) {
        ("", asked) => Ok(asked.to_string()),
        (current, "") => Ok(current.to_string()),
        (current, asked) if current == asked => Ok(current.to_string()),
        (current, asked) => Err(Status::permission_denied(format!(
            "the client certificate is member {current:?}'s; a renewal keeps its member, so it cannot be renewed as {asked:?}"
        ))),
    }
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn leaf<T>(request: &Request<T>) -> Option<Vec<u8>> {
    request
        .peer_certs()
        .and_then(|chain| chain.first().map(|c| c.to_vec()))
}

type HubStream = Pin<Box<dyn Stream<Item = Result<HubMessage, Status>> + Send>>;

#[tonic::async_trait]
impl AgentGateway for Gateway {
    type ConnectStream = HubStream;

    async fn join(
        &self,
        request: Request<fedingress_proto::pb::JoinRequest>,
    ) -> Result<Response<fedingress_proto::pb::IssuedCertificate>, Status> {
        let peer = request.remote_addr();
        let join = fedingress_proto::convert::join_from_pb(request.into_inner())?;
        if !self.identity.tls {
            return Err(Status::failed_precondition(
                "the agent gateway serves no TLS, so it cannot authenticate client certificates: use a token, or give the hub --tls-cert-file",
            ));
        }
        let cluster = join.cluster.clone();
        valid_cluster_name(&cluster)?;
        valid_member_name(&join.member)?;
        let uid = self.cluster(&cluster).await?;
        if self.identity.ca.is_none() {
            return Err(Status::failed_precondition(
                "this hub has no agent CA (give --agent-ca-cert-file and --agent-ca-key-file)",
            ));
        }
        // Check the CSR before spending the token on it.
        if let Err(e) = super::pki::check_csr_pem(&join.csr_pem, &cluster) {
            IDENTITY.refused("csr");
            return Err(Status::invalid_argument(e.to_string()));
        }
        match self
            .tokens
            .consume_join(
                &cluster,
                &uid,
                &join.join_token,
                fedingress_api::Time(chrono::Utc::now()),
            )
            .await
            .map_err(|e| Status::unavailable(e.message))?
        {
            Verdict::Valid { .. } => {}
            Verdict::Refused(why) => {
                tracing::warn!(cluster, peer = ?peer, reason = %why, "join refused");
                IDENTITY.refused("join");
                return Err(Status::unauthenticated(why));
            }
        }
        let issued = self
            .issue(&cluster, &uid, &join.member, &join.csr_pem)
            .await?;
        IDENTITY
            .joins
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(cluster, member = %join.member, peer = ?peer, fingerprint = %issued.fingerprint, not_after = issued.not_after_unix, "agent joined: client certificate issued");
        Ok(Response::new(fedingress_proto::convert::issued_to_pb(
            &issued,
        )))
    }

    async fn renew(
        &self,
        request: Request<fedingress_proto::pb::RenewRequest>,
    ) -> Result<Response<fedingress_proto::pb::IssuedCertificate>, Status> {
        let peer = request.remote_addr();
        let Some(der) = leaf(&request) else {
            return Err(Status::unauthenticated(
                "Renew needs the current client certificate (mTLS)",
            ));
        };
        let renew = fedingress_proto::convert::renew_from_pb(request.into_inner())?;
        let cluster = renew.cluster.clone();
        valid_cluster_name(&cluster)?;
        valid_member_name(&renew.member)?;
        let uid = self.cluster(&cluster).await?;
        let current = match self
            .tokens
            .verify_cert_record(&cluster, &uid, &super::pki::fingerprint(&der), unix_now())
            .await
            .map_err(|e| Status::unavailable(e.message))?
        {
            (Verdict::Valid { .. }, record) => record.map(|r| r.member).unwrap_or_default(),
            (Verdict::Refused(why), _) => {
                tracing::warn!(cluster, peer = ?peer, reason = %why, "renewal refused");
                IDENTITY.refused("renew");
                return Err(Status::unauthenticated(why));
            }
        };
        let member = renewed_member(&current, &renew.member).inspect_err(|_| {
            tracing::warn!(cluster, member = current, asked = renew.member, peer = ?peer, "renewal refused: another member");
            IDENTITY.refused("renew");
        })?;
        let issued = self
            .issue(&cluster, &uid, &member, &renew.csr_pem)
            .await
            .inspect_err(|status| {
                if status.code() == tonic::Code::InvalidArgument {
                    IDENTITY.refused("csr");
                }
            })?;
        IDENTITY
            .renewals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(cluster, member, peer = ?peer, fingerprint = %issued.fingerprint, not_after = issued.not_after_unix, "client certificate renewed");
        Ok(Response::new(fedingress_proto::convert::issued_to_pb(
            &issued,
        )))
    }

    async fn connect(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let peer = request.remote_addr();
        let peer_cert = leaf(&request);
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(HELLO_TIMEOUT, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no Hello within 10 s"))??
            .ok_or_else(|| Status::cancelled("stream closed before Hello"))?;
        let AgentToHub::Hello(hello) = agent_from_pb(first)? else {
            return Err(Status::invalid_argument(
                "the first message must be a Hello",
            ));
        };
        let cluster = hello.cluster.clone();
        valid_cluster_name(&cluster)?;
        let (registration, method, cert_member) = match self
            .authenticate(&cluster, &hello.token, peer_cert.as_deref())
            .await
        {
            Ok(ok) => ok,
            Err(status) => {
                tracing::warn!(cluster, peer = ?peer, reason = %status.message(), "agent refused");
                return Err(status);
            }
        };
        let member = member_name(&cluster, &hello.member)?;
        if let Err(status) = certificate_speaks_for(cert_member.as_deref(), &cluster, &member) {
            tracing::warn!(cluster, member, peer = ?peer, reason = %status.message(), "agent refused");
            return Err(status);
        }
        let (session, kill) = self.hub.connect(
            &cluster,
            MemberInfo {
                name: member.clone(),
                labels: hello.member_labels.clone(),
                address: hello.member_address,
                agent_version: hello.agent_version.clone(),
                driver: hello.driver.clone(),
                capabilities: hello.capabilities.clone(),
            },
        );
        // Read after the session is registered: a provider or cordon change stored later
        // ends this session (the controller sees it after this read), one stored earlier is
        // read here.
        let (provider, cordoned) = match self
            .registry
            .get::<fedingress_api::Cluster>(None, &cluster)
            .await
        {
            Ok(object) => (Some(object.spec.provider), object.spec.unschedulable),
            Err(e) => {
                tracing::warn!(cluster, error = %e.message, "reading the cluster's provider failed; Welcome says none, not cordoned");
                (None, false)
            }
        };
        tracing::info!(cluster, member, session, peer = ?peer, auth = method, agent_version = %hello.agent_version, driver = %hello.driver, capabilities = ?hello.capabilities, applied_version = hello.applied_version, "agent connected");
        let (tx, rx) = mpsc::channel::<Result<HubMessage, Status>>(64);
        let hub = self.hub.clone();
        tokio::spawn(async move {
            let end = session_loop(
                &hub,
                (&cluster, &member),
                session,
                &hello,
                (provider, cordoned),
                inbound,
                &tx,
                kill,
                registration,
            )
            .await;
            tracing::info!(cluster, member, session, reason = %end, "agent session ended");
            hub.disconnect(&cluster, session);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

async fn send(
    tx: &mpsc::Sender<Result<HubMessage, Status>>,
    message: &HubToAgent,
) -> Result<(), String> {
    tx.send(Ok(hub_to_pb(message)))
        .await
        .map_err(|_| "agent went away".to_string())
}

/// Runs one agent session; returns why it ended.
#[allow(clippy::too_many_arguments)]
async fn session_loop(
    hub: &Sessions,
    (cluster, member): (&str, &str),
    session: u64,
    hello: &fedingress_proto::Hello,
    (provider, cordoned): (Option<Provider>, bool),
    mut inbound: Streaming<AgentMessage>,
    tx: &mpsc::Sender<Result<HubMessage, Status>>,
    mut kill: tokio::sync::watch::Receiver<&'static str>,
    mut registration: Registration,
) -> String {
    let settings = hub.settings;
    let welcome = HubToAgent::Welcome {
        heartbeat_interval_ms: u32::try_from(settings.heartbeat_interval.as_millis())
            .unwrap_or(u32::MAX),
        lease_ms: u32::try_from(settings.lease.as_millis()).unwrap_or(u32::MAX),
        provider,
        cordoned,
    };
    if let Err(e) = send(tx, &welcome).await {
        return e;
    }
    let mut plans = hub.plan_receiver(cluster);
    let current = plans.borrow_and_update().for_member(member);
    // Plans sent on this stream by version, for Acks.
    let mut sent: BTreeMap<u64, Published> = BTreeMap::new();
    let mut last_sent = current.clone();
    if !hello.applied_digest.is_empty() && hello.applied_digest == current.digest {
        // Same content under the agent's own version number (versions are re-derived
        // after a hub restart): deltas build on the agent's version.
        tracing::debug!(
            cluster,
            version = hello.applied_version,
            "agent's plan is current: no snapshot"
        );
        last_sent.version = hello.applied_version;
        hub.applied(cluster, session, last_sent.clone(), Vec::new());
    } else {
        let snapshot = HubToAgent::Snapshot {
            version: current.version,
            digest: current.digest.clone(),
            plan: (*current.plan).clone(),
        };
        if let Err(e) = send(tx, &snapshot).await {
            return e;
        }
    }
    sent.insert(last_sent.version, last_sent.clone());
    loop {
        tokio::select! {
            changed = plans.changed() => {
                if changed.is_err() {
                    return "cluster removed".into();
                }
                let next = plans.borrow_and_update().for_member(member);
                if next.digest == last_sent.digest {
                    continue;
                }
                let delta = HubToAgent::Delta {
                    version: next.version,
                    digest: next.digest.clone(),
                    base_version: last_sent.version,
                    delta: last_sent.plan.delta_to(&next.plan),
                };
                if let Err(e) = send(tx, &delta).await {
                    return e;
                }
                last_sent = next.clone();
                sent.insert(next.version, next);
                while sent.len() > SENT_PLANS_KEPT {
                    sent.pop_first();
                }
            }
            message = tokio::time::timeout(settings.lease, inbound.message()) => {
                let message = match message {
                    Err(_) => return "lease expired".into(),
                    Ok(Err(status)) => return format!("stream error: {}", status.message()),
                    Ok(Ok(None)) => return "agent closed the stream".into(),
                    Ok(Ok(Some(message))) => message,
                };
                let message = match agent_from_pb(message) {
                    Ok(message) => message,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return "invalid message".into();
                    }
                };
                if !hub.seen(cluster, session) {
                    return "replaced by a newer session".into();
                }
                match message {
                    AgentToHub::Hello(_) => {
                        let _ = tx.send(Err(Status::invalid_argument("Hello may only be sent once"))).await;
                        return "second Hello".into();
                    }
                    AgentToHub::Ack { version } => match sent.get(&version) {
                        Some(published) => {
                            tracing::debug!(cluster, version, "plan acknowledged");
                            hub.applied(cluster, session, published.clone(), Vec::new());
                        }
                        None => tracing::warn!(cluster, version, "ack for a version not sent on this stream"),
                    },
                    AgentToHub::Nack { version, error, rule_errors } => {
                        tracing::warn!(cluster, version, error = %error, rule_errors = rule_errors.len(), "plan not fully applied");
                        // With `error` nothing was applied; otherwise all but `rule_errors`.
                        if let (true, Some(published)) = (error.is_empty(), sent.get(&version)) {
                            hub.applied(cluster, session, published.clone(), rule_errors);
                        }
                    }
                    AgentToHub::Report(report) => hub.reported(cluster, session, report),
                    AgentToHub::Heartbeat => {}
                }
            }
            revoked = registration.ended.changed() => {
                if revoked.is_ok() {
                    let reason = *registration.ended.borrow();
                    let _ = tx.send(Err(Status::unauthenticated(format!("{reason}: the session ends")))).await;
                    return reason.to_string();
                }
            }
            ended = kill.changed() => {
                // A reason sent by the hub (`Sessions::end_session`), or the sender dropped by a
                // newer session of the same cluster.
                return match ended {
                    Ok(()) => (*kill.borrow()).to_string(),
                    Err(_) => "replaced by a newer session".into(),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 24: a certificate naming a member cannot open another member's session.
    #[test]
    fn a_members_certificate_speaks_for_that_member_only() {
        assert!(certificate_speaks_for(Some("web-1"), "eu", "web-1").is_ok());
        assert!(
            certificate_speaks_for(None, "eu", "web-2").is_ok(),
            "a token"
        );
        assert!(
            certificate_speaks_for(Some(""), "eu", "web-2").is_ok(),
            "a whole-cluster certificate"
        );
        let refused = certificate_speaks_for(Some("web-1"), "eu", "web-2").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(refused.message().contains("\"web-1\"") && refused.message().contains("\"web-2\""));
        // An agent from before members is named after its cluster.
        assert_eq!(member_name("eu", "").unwrap(), "eu");
        assert_eq!(member_name("eu", "host-a").unwrap(), "host-a");
        assert_eq!(
            member_name("eu", "Bad_Name").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn an_impossible_cluster_name_is_refused_without_echoing_it() {
        assert!(valid_cluster_name("eu-west-1").is_ok());
        let huge = "x".repeat(4 << 20);
        for name in [huge.as_str(), "Bad_Name", "", "a\nb"] {
            let status = valid_cluster_name(name).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().len() < 200, "the name is not echoed");
        }
    }

    /// Issue 24: a certificate names one member; its renewal keeps it.
    #[test]
    fn a_renewal_keeps_the_member_of_the_certificate() {
        assert_eq!(renewed_member("web-1", "web-1").unwrap(), "web-1");
        assert_eq!(renewed_member("web-1", "").unwrap(), "web-1");
        assert_eq!(
            renewed_member("", "web-2").unwrap(),
            "web-2",
            "a whole-cluster certificate narrows to the member"
        );
        assert_eq!(renewed_member("", "").unwrap(), "");
        let status = renewed_member("web-1", "web-2").unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(
            status.message().contains("\"web-1\""),
            "{}",
            status.message()
        );
    }

    #[test]
    fn a_member_name_must_be_a_label_and_is_not_echoed_when_huge() {
        assert!(
            valid_member_name("").is_ok(),
            "an agent from before members"
        );
        assert!(valid_member_name("web-1").is_ok());
        for name in ["Web_1", "web.1", "-web"] {
            let status = valid_member_name(name).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().contains(name), "{}", status.message());
        }
        let status = valid_member_name(&"x".repeat(4 << 20)).unwrap_err();
        assert!(status.message().len() < 200, "the name is not echoed");
    }
}
