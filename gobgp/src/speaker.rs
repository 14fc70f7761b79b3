//! [`Speaker`]: a connected GoBGP gRPC client with the typed API (the conversions are
//! in `convert`).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use tonic::transport::{Channel, Endpoint};

use crate::convert::{self, ConvertError};
use crate::error::{SpeakerError, chain};
use crate::pb;
use crate::pb::gobgp_api_client::GobgpApiClient;
use crate::types::{Global, Peer, PeerState, RibEntry, Route};

/// The import policy [`Speaker::reject_imports`] defines: local routes only.
pub const ANNOUNCE_ONLY: &str = "fedingress-announce-only";

/// A GoBGP API client (plain HTTP/2: gobgpd's API is meant for loopback). Cloning is
/// cheap and shares the connection.
#[derive(Clone, Debug)]
pub struct Speaker {
    endpoint: SocketAddr,
    timeout: Duration,
    client: GobgpApiClient<Channel>,
}

impl Speaker {
    /// Connects to gobgpd's API at `endpoint`. `timeout` bounds the connection and,
    /// later, every call (a streamed list as a whole).
    ///
    /// # Errors
    /// [`SpeakerError::Connect`] when nothing answers HTTP/2 there within `timeout`.
    pub async fn connect(endpoint: SocketAddr, timeout: Duration) -> Result<Speaker, SpeakerError> {
        let connect_error = |reason: String| SpeakerError::Connect { endpoint, reason };
        let channel = Endpoint::from_shared(format!("http://{endpoint}"))
            .map_err(|e| connect_error(chain(&e)))?
            .connect_timeout(timeout)
            .timeout(timeout)
            .tcp_nodelay(true);
        let channel = tokio::time::timeout(timeout, channel.connect())
            .await
            .map_err(|_| connect_error(format!("no connection within {timeout:?}")))?
            .map_err(|e| connect_error(chain(&e)))?;
        Ok(Speaker {
            endpoint,
            timeout,
            client: GobgpApiClient::new(channel),
        })
    }

    /// The API endpoint this client talks to.
    pub fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    /// BGP's running global configuration; `None` when BGP is not started.
    pub async fn global(&mut self) -> Result<Option<Global>, SpeakerError> {
        const CALL: &str = "GetBgp";
        let mut client = self.client.clone();
        let response = self
            .call(CALL, client.get_bgp(pb::GetBgpRequest {}))
            .await?;
        match response.global {
            Some(global) => convert::global_from_pb(&global).map_err(|e| self.unreadable(CALL, e)),
            None => Ok(None),
        }
    }

    /// Starts BGP with `global`.
    ///
    /// # Guarantees
    /// Idempotent: when BGP already runs with the same AS, router id and listen
    /// settings (after GoBGP's defaults) it returns `Ok` and changes nothing.
    ///
    /// # Errors
    /// [`SpeakerError::AlreadyStarted`] naming what differs when BGP already runs with
    /// another configuration (GoBGP itself would start a second time over the first);
    /// [`SpeakerError::Invalid`] for AS 0.
    pub async fn start(&mut self, global: &Global) -> Result<(), SpeakerError> {
        if global.asn == 0 {
            return Err(SpeakerError::Invalid {
                endpoint: self.endpoint,
                reason: "AS 0 is not a BGP AS number".to_string(),
            });
        }
        if let Some(running) = self.global().await? {
            let differences = global.differences(&running);
            if differences.is_empty() {
                return Ok(());
            }
            return Err(SpeakerError::AlreadyStarted {
                endpoint: self.endpoint,
                differences: differences.join(", "),
            });
        }
        let request = pb::StartBgpRequest {
            global: Some(convert::global_to_pb(global)),
        };
        let mut client = self.client.clone();
        self.call("StartBgp", client.start_bgp(request)).await?;
        tracing::info!(
            endpoint = %self.endpoint,
            asn = global.asn,
            router_id = %global.router_id,
            listen_port = global.listen_port,
            "BGP started"
        );
        Ok(())
    }

    /// Adds a neighbor (IPv4 and IPv6 unicast on one session).
    ///
    /// # Errors
    /// GoBGP refuses a neighbor that already exists ([`SpeakerError::Call`]): delete it
    /// first to change it.
    pub async fn add_peer(&mut self, peer: &Peer) -> Result<(), SpeakerError> {
        let request = pb::AddPeerRequest {
            peer: Some(convert::peer_to_pb(peer)),
        };
        let mut client = self.client.clone();
        self.call("AddPeer", client.add_peer(request)).await?;
        Ok(())
    }

    /// Removes a neighbor (its session closes; routes learned from it go).
    pub async fn delete_peer(&mut self, address: IpAddr) -> Result<(), SpeakerError> {
        let request = pb::DeletePeerRequest {
            address: address.to_string(),
            interface: String::new(),
        };
        let mut client = self.client.clone();
        self.call("DeletePeer", client.delete_peer(request)).await?;
        Ok(())
    }

    /// Every neighbor and its session state.
    pub async fn peers(&mut self) -> Result<Vec<PeerState>, SpeakerError> {
        const CALL: &str = "ListPeer";
        let mut client = self.client.clone();
        let request = pb::ListPeerRequest {
            address: String::new(),
            enable_advertised: false,
        };
        let responses = self
            .stream(CALL, async move {
                let mut stream = client.list_peer(request).await?.into_inner();
                let mut out = Vec::new();
                while let Some(response) = stream.message().await? {
                    out.extend(response.peer);
                }
                Ok(out)
            })
            .await?;
        responses
            .iter()
            .map(|p| convert::peer_state_from_pb(p).map_err(|e| self.unreadable(CALL, e)))
            .collect()
    }

    /// Originates `route` in the global RIB (sent to every neighbor). Announcing the
    /// same prefix again replaces the earlier route.
    ///
    /// # Errors
    /// [`SpeakerError::Invalid`] for a route peers would drop (a loopback or multicast
    /// next hop: [`Route::unannounceable`]).
    pub async fn announce(&mut self, route: &Route) -> Result<(), SpeakerError> {
        if let Some(reason) = route.unannounceable() {
            return Err(SpeakerError::Invalid {
                endpoint: self.endpoint,
                reason: format!("route {}: {reason}", route.prefix),
            });
        }
        let request = pb::AddPathRequest {
            table_type: pb::TableType::Global as i32,
            vrf_id: String::new(),
            path: Some(convert::route_to_path(route)),
        };
        let mut client = self.client.clone();
        self.call("AddPath", client.add_path(request)).await?;
        tracing::debug!(endpoint = %self.endpoint, prefix = %route.prefix, next_hop = %route.next_hop, "route announced");
        Ok(())
    }

    /// Withdraws `route` (its prefix: the next hop and communities do not matter).
    /// Withdrawing a route that is not announced is not an error.
    pub async fn withdraw(&mut self, route: &Route) -> Result<(), SpeakerError> {
        let path = convert::route_to_path(route);
        let request = pb::DeletePathRequest {
            table_type: pb::TableType::Global as i32,
            vrf_id: String::new(),
            family: path.family,
            path: Some(path),
            uuid: Vec::new(),
        };
        let mut client = self.client.clone();
        self.call("DeletePath", client.delete_path(request)).await?;
        tracing::debug!(endpoint = %self.endpoint, prefix = %route.prefix, "route withdrawn");
        Ok(())
    }

    /// Makes the speaker accept no route from any peer: the global import policy is
    /// [`ANNOUNCE_ONLY`] (accept local routes) with default reject. An announce-only speaker needs this: otherwise a
    /// route reflector's copy of another site's path for the same prefix can become its
    /// best path, and a speaker advertises only its best path (and never an iBGP-learnt
    /// one to an iBGP peer), so it would withdraw its own announcement.
    /// Idempotent.
    pub async fn reject_imports(&mut self) -> Result<(), SpeakerError> {
        let mut client = self.client.clone();
        // GoBGP answers an unknown policy name with an error on the stream.
        let existing = self
            .stream("ListPolicy", async {
                let request = pb::ListPolicyRequest {
                    name: ANNOUNCE_ONLY.to_string(),
                };
                let mut stream = client.list_policy(request).await?.into_inner();
                let mut found = false;
                while let Some(item) = stream.message().await? {
                    found |= item.policy.is_some_and(|p| p.name == ANNOUNCE_ONLY);
                }
                Ok(found)
            })
            .await
            .unwrap_or(false);
        if !existing {
            let local = pb::Statement {
                name: format!("{ANNOUNCE_ONLY}-local"),
                conditions: Some(pb::Conditions {
                    route_type: pb::conditions::RouteType::Local as i32,
                    ..Default::default()
                }),
                actions: Some(pb::Actions {
                    route_action: pb::RouteAction::Accept as i32,
                    ..Default::default()
                }),
            };
            let request = pb::AddPolicyRequest {
                policy: Some(pb::Policy {
                    name: ANNOUNCE_ONLY.to_string(),
                    statements: vec![local],
                }),
                refer_existing_statements: false,
            };
            self.call("AddPolicy", client.add_policy(request)).await?;
        }
        let request = pb::SetPolicyAssignmentRequest {
            assignment: Some(pb::PolicyAssignment {
                name: "global".to_string(),
                direction: pb::PolicyDirection::Import as i32,
                policies: vec![pb::Policy {
                    name: ANNOUNCE_ONLY.to_string(),
                    statements: Vec::new(),
                }],
                default_action: pb::RouteAction::Reject as i32,
            }),
        };
        self.call("SetPolicyAssignment", client.set_policy_assignment(request))
            .await?;
        Ok(())
    }

    /// Withdraws every route this speaker originates (IPv4 and IPv6 unicast), whoever
    /// announced it: a clean start on a speaker that outlived its last user.
    pub async fn withdraw_all(&mut self) -> Result<(), SpeakerError> {
        for family in convert::unicast_families() {
            let request = pb::DeletePathRequest {
                table_type: pb::TableType::Global as i32,
                vrf_id: String::new(),
                family: Some(family),
                path: None,
                uuid: Vec::new(),
            };
            let mut client = self.client.clone();
            self.call("DeletePath", client.delete_path(request)).await?;
        }
        Ok(())
    }

    /// The global RIB, IPv4 then IPv6 unicast: every path, local (no `neighbor`) and
    /// learned.
    pub async fn rib(&mut self) -> Result<Vec<RibEntry>, SpeakerError> {
        const CALL: &str = "ListPath";
        let mut entries = Vec::new();
        for family in convert::unicast_families() {
            let request = pb::ListPathRequest {
                table_type: pb::TableType::Global as i32,
                family: Some(family),
                ..Default::default()
            };
            let mut client = self.client.clone();
            let destinations = self
                .stream(CALL, async move {
                    let mut stream = client.list_path(request).await?.into_inner();
                    let mut out = Vec::new();
                    while let Some(response) = stream.message().await? {
                        out.extend(response.destination);
                    }
                    Ok(out)
                })
                .await?;
            for destination in &destinations {
                entries.extend(
                    convert::rib_entries(destination).map_err(|e| self.unreadable(CALL, e))?,
                );
            }
        }
        Ok(entries)
    }

    /// The prefixes this speaker has sent to `neighbor` and not withdrawn (its
    /// Adj-RIB-Out, IPv4 then IPv6 unicast): what the neighbor holds from this speaker
    /// while its session is established. Empty for a neighbor whose session is not.
    ///
    /// # Errors
    /// [`SpeakerError::Call`] for a neighbor the speaker does not know.
    pub async fn advertised(&mut self, neighbor: IpAddr) -> Result<Vec<IpNet>, SpeakerError> {
        const CALL: &str = "ListPath";
        let mut prefixes = Vec::new();
        for family in convert::unicast_families() {
            let request = pb::ListPathRequest {
                table_type: pb::TableType::AdjOut as i32,
                name: neighbor.to_string(),
                family: Some(family),
                ..Default::default()
            };
            let mut client = self.client.clone();
            let destinations = self
                .stream(CALL, async move {
                    let mut stream = client.list_path(request).await?.into_inner();
                    let mut out = Vec::new();
                    while let Some(response) = stream.message().await? {
                        out.extend(response.destination);
                    }
                    Ok(out)
                })
                .await?;
            for destination in &destinations {
                let entries =
                    convert::rib_entries(destination).map_err(|e| self.unreadable(CALL, e))?;
                prefixes.extend(entries.into_iter().map(|e| e.prefix));
            }
        }
        Ok(prefixes)
    }

    async fn call<T>(
        &self,
        call: &'static str,
        request: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, SpeakerError> {
        self.stream(call, async {
            request.await.map(tonic::Response::into_inner)
        })
        .await
    }

    /// Runs `work` (a call, or a call and its whole response stream) under the
    /// client's timeout.
    async fn stream<T>(
        &self,
        call: &'static str,
        work: impl Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, SpeakerError> {
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(status)) => Err(self.failed(call, &status)),
            Err(_) => Err(SpeakerError::Timeout {
                call,
                endpoint: self.endpoint,
                timeout: self.timeout,
            }),
        }
    }

    fn failed(&self, call: &'static str, status: &tonic::Status) -> SpeakerError {
        let mut message = status.message().to_string();
        if let Some(source) = std::error::Error::source(status) {
            message.push_str(": ");
            message.push_str(&chain(source));
        }
        SpeakerError::Call {
            call,
            endpoint: self.endpoint,
            code: status.code(),
            message,
        }
    }

    fn unreadable(&self, call: &'static str, reason: ConvertError) -> SpeakerError {
        SpeakerError::Unreadable {
            call,
            endpoint: self.endpoint,
            reason,
        }
    }
}
