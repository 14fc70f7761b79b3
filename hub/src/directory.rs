//! What each cluster's agent said, shared between the replicas of one federation (several
//! API servers on one etcd), so that the leader decides routing from every agent
//! whichever replica holds its session.
//!
//! - [`AgentPublisher`] (every replica) writes a record per agent session it holds under
//!   `/fedingress/agents/<cluster>/<member>`, attached to the replica's lease: when the replica
//!   dies the records vanish with it. It writes when something the controller uses
//!   changed (connect, ack/nack, report, end of the session, lease missed), coalesced;
//!   changes of load figures alone at most every [`LOAD_INTERVAL`] (15 s). Heartbeats are not
//!   written: a session is alive as long as its record exists and says so.
//! - [`AgentDirectory`] (every replica; the leader uses it) mirrors the records into a
//!   [`Sessions`] of its own that the controller reads agents from. A record that vanished
//!   (its replica died) leaves the agent as last seen: it goes offline one agent lease
//!   later unless the agent reconnected to another replica meanwhile, whose record then
//!   replaces it. So a replica's death costs no routing change when its agents come back
//!   within the lease.
//!
//! The last writer of a record owns it: a replica whose session ended writes "not
//! connected" only if the record is still the one it wrote (compare-and-swap on its
//! revision), so it never overwrites the record of the replica the agent moved to.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fedingress_api::Time;
use fedingress_api::plan::{AgentReport, ClusterPlan, RuleError};
use fedingress_store::{EventKind, Lease, Precondition, Revision, SharedStore, Store, StoreError};
use futures_util::{StreamExt, stream};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{AgentState, Published, Sessions};

/// Storage prefix of agent records.
pub const PREFIX: &str = "/fedingress/agents/";
/// A record whose only change is load figures is rewritten at most this often (three
/// times the agents' default report interval: load only steers Overflow, and a few
/// seconds of staleness there cost less than a write per report).
pub const LOAD_INTERVAL: Duration = Duration::from_secs(15);
/// How often the publisher looks for sessions past their lease.
const TICK: Duration = Duration::from_millis(250);
/// Wait after a change before writing, so bursts coalesce.
const DEBOUNCE: Duration = Duration::from_millis(10);
/// Record writes in flight at once.
const WRITE_CONCURRENCY: usize = 32;

/// One agent session as stored for the other replicas.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    /// The replica holding the session.
    pub replica: String,
    pub connected: bool,
    pub agent_version: String,
    pub driver: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// The member's labels and real address.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    pub last_seen: Time,
    /// The plan the agent last acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<AppliedPlan>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_errors: Vec<RuleError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<AgentReport>,
}

/// A plan an agent acknowledged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedPlan {
    pub version: u64,
    pub digest: String,
    pub plan: ClusterPlan,
}

impl AgentRecord {
    /// The record of a local session.
    pub fn of(replica: &str, state: &AgentState) -> Self {
        Self {
            replica: replica.to_string(),
            connected: state.connected,
            agent_version: state.agent_version.clone(),
            driver: state.driver.clone(),
            capabilities: state.capabilities.clone(),
            labels: state.labels.clone(),
            address: state.address,
            last_seen: state.last_seen_time,
            applied: state.applied.as_ref().map(|p| AppliedPlan {
                version: p.version,
                digest: p.digest.clone(),
                plan: (*p.plan).clone(),
            }),
            rule_errors: state.rule_errors.clone(),
            report: state.report.as_deref().cloned(),
        }
    }

    /// The agent state the controller reads (seen now); the member's name comes from
    /// the record's key.
    pub fn into_state(self) -> AgentState {
        AgentState {
            session: 0,
            connected: self.connected,
            member: String::new(),
            labels: self.labels,
            address: self.address,
            agent_version: self.agent_version,
            driver: self.driver,
            capabilities: self.capabilities,
            last_seen: Instant::now(),
            last_seen_time: self.last_seen,
            applied: self.applied.map(|a| Published {
                version: a.version,
                digest: a.digest,
                plan: Arc::new(a.plan),
            }),
            rule_errors: self.rule_errors,
            report: self.report.map(Arc::new),
        }
    }

    /// Equal apart from when the agent was last seen and its load figures.
    fn same_but_load(&self, other: &Self) -> bool {
        let strip = |r: &Self| {
            let mut r = r.clone();
            r.last_seen = Time(chrono::DateTime::UNIX_EPOCH);
            if let Some(report) = &mut r.report {
                report.requests_per_second = 0.0;
                report.active_connections = 0;
                report.process_cpu = 0.0;
                report.host_cpu = 0.0;
                report.bytes_per_second = 0.0;
                for ingress in &mut report.ingresses {
                    for listener in &mut ingress.listeners {
                        listener.connections_per_second = 0.0;
                        listener.active_connections = 0;
                    }
                }
            }
            r
        };
        strip(self) == strip(other)
    }
}

/// The record of a member ([`member_id`](crate::member_id): `<cluster>/<member>`).
fn key(member: &str) -> String {
    format!("{PREFIX}{member}")
}

/// What the publisher last wrote for a member.
struct Written {
    record: AgentRecord,
    /// The local session it describes.
    session: u64,
    /// The record's revision; `None` when another replica's write replaced ours.
    revision: Option<Revision>,
    at: Instant,
    /// A change of load figures alone is waiting for [`LOAD_INTERVAL`] to pass.
    held_back: bool,
}

/// One write the publisher decided on (or, `held_back`, decided to make later).
struct Write {
    member: String,
    session: u64,
    record: Option<AgentRecord>,
    precondition: Precondition,
    held_back: bool,
}

/// Writes the records of this replica's agent sessions; see the module docs.
pub struct AgentPublisher {
    pub hub: Arc<Sessions>,
    pub store: Arc<dyn SharedStore>,
    pub replica: String,
    /// The replica's current lease (`None` while there is none: etcd unreachable).
    pub lease: watch::Receiver<Option<Arc<Lease>>>,
}

impl AgentPublisher {
    /// Runs until the process ends.
    pub async fn run(mut self) {
        let mut changes = self.hub.subscribe_changes();
        let mut written: HashMap<String, Written> = HashMap::new();
        // Members whose write failed: decided again on the next round.
        let mut retry: BTreeSet<String> = BTreeSet::new();
        let mut lease_id = None;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = changes.changed() => {}
                _ = tick.tick() => {}
                _ = self.lease.changed() => {}
            }
            tokio::time::sleep(DEBOUNCE).await;
            let Some(lease) = self.lease.borrow().clone() else {
                continue;
            };
            let mut candidates = self.hub.take_dirty_members();
            candidates.append(&mut retry);
            if lease_id != Some(lease.id) {
                // Records of an earlier lease went with it: everything is written again.
                written.clear();
                lease_id = Some(lease.id);
                candidates.extend(self.hub.agents().into_keys());
            }
            let (held, writes): (Vec<Write>, Vec<Write>) = self
                .decide(candidates, &written)
                .into_iter()
                .partition(|w| w.held_back);
            for write in held {
                if let Some(w) = written.get_mut(&write.member) {
                    w.held_back = true;
                }
            }
            if writes.is_empty() {
                continue;
            }
            let this = &self;
            let results: Vec<(Write, Result<Option<Revision>, StoreError>)> = stream::iter(writes)
                .map(|write| {
                    let lease = lease.clone();
                    async move {
                        let result = this.apply(&write, &lease).await;
                        (write, result)
                    }
                })
                .buffer_unordered(WRITE_CONCURRENCY)
                .collect()
                .await;
            for (write, result) in results {
                match result {
                    Ok(revision) => match write.record {
                        Some(record) => {
                            written.insert(
                                write.member,
                                Written {
                                    record,
                                    session: write.session,
                                    revision,
                                    at: Instant::now(),
                                    held_back: false,
                                },
                            );
                        }
                        None => {
                            written.remove(&write.member);
                        }
                    },
                    Err(StoreError::PreconditionFailed { .. } | StoreError::NotFound { .. }) => {
                        // Another replica holds the agent now: its record stands.
                        tracing::debug!(member = %write.member, "agent record owned by another replica");
                        if let Some(record) = write.record {
                            written.insert(
                                write.member,
                                Written {
                                    record,
                                    session: write.session,
                                    revision: None,
                                    at: Instant::now(),
                                    held_back: false,
                                },
                            );
                        } else {
                            written.remove(&write.member);
                        }
                    }
                    Err(error) => {
                        // Retried on the next tick (nothing is remembered as written).
                        tracing::warn!(member = %write.member, error = %error, "writing an agent record failed");
                        retry.insert(write.member);
                    }
                }
            }
        }
    }

    /// The writes that make the stored records say what the local sessions say: for the
    /// members the hub marked dirty (`candidates`), sessions whose lease passed, load
    /// changes held back that are now due, and members the hub forgot. Records are
    /// built (the applied plan copied) only for those.
    fn decide(
        &self,
        mut candidates: BTreeSet<String>,
        written: &HashMap<String, Written>,
    ) -> Vec<Write> {
        let agents = self.hub.agents();
        for (member, w) in written {
            let state = agents.get(member);
            let expired = state.is_some_and(|s| s.connected != w.record.connected);
            let held_back = w.held_back && w.at.elapsed() >= LOAD_INTERVAL;
            if expired || held_back || state.is_none() {
                candidates.insert(member.clone());
            }
        }
        let mut writes = Vec::new();
        for member in candidates {
            let before = written.get(&member);
            let Some(state) = agents.get(&member) else {
                // The hub forgot the member (its cluster deleted, or it was disconnected too long): our record goes.
                if let Some(Written {
                    revision: Some(revision),
                    session,
                    ..
                }) = before
                {
                    writes.push(Write {
                        member,
                        session: *session,
                        record: None,
                        precondition: Precondition::ModRevision(*revision),
                        held_back: false,
                    });
                }
                continue;
            };
            let record = AgentRecord::of(&self.replica, state);
            let precondition = match before {
                // A session that started here since: it is ours, whoever wrote last.
                Some(w) if w.session != state.session => Precondition::None,
                Some(Written { revision: None, .. }) => continue,
                Some(w) if w.record == record => continue,
                Some(w) if w.record.same_but_load(&record) && w.at.elapsed() < LOAD_INTERVAL => {
                    // Load alone changed: written once the interval has passed.
                    writes.push(Write {
                        member,
                        session: state.session,
                        record: None,
                        precondition: Precondition::None,
                        held_back: true,
                    });
                    continue;
                }
                Some(Written {
                    revision: Some(revision),
                    ..
                }) => Precondition::ModRevision(*revision),
                None if state.connected => Precondition::None,
                // A session that ended before it was ever written: nothing to say.
                None => continue,
            };
            writes.push(Write {
                member,
                session: state.session,
                record: Some(record),
                precondition,
                held_back: false,
            });
        }
        writes
    }

    async fn apply(&self, write: &Write, lease: &Lease) -> Result<Option<Revision>, StoreError> {
        let key = key(&write.member);
        match &write.record {
            Some(record) => {
                let value = serde_json::to_vec(record).map_err(|e| StoreError::Corrupt {
                    detail: format!("encoding the agent record of {}: {e}", write.member),
                })?;
                let kv = self
                    .store
                    .put_leased(&key, Bytes::from(value), write.precondition, lease)
                    .await?;
                Ok(Some(kv.mod_revision))
            }
            None => {
                self.store.delete(&key, write.precondition).await?;
                Ok(None)
            }
        }
    }
}

/// Mirrors every replica's agent records into a [`Sessions`]; see the module docs.
pub struct AgentDirectory {
    pub store: Arc<dyn Store>,
    pub mirror: Arc<Sessions>,
}

impl AgentDirectory {
    /// Runs until the process ends: lists, then follows the records; lists again when
    /// the watch breaks.
    pub async fn run(self) {
        let refresh_every = (self.mirror.settings.lease / 4).max(Duration::from_millis(100));
        let mut live: BTreeSet<String> = BTreeSet::new();
        loop {
            let revision = match self.list(&mut live).await {
                Ok(revision) => revision,
                Err(error) => {
                    tracing::warn!(error = %error, "listing agent records failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let mut events = match self.store.watch(PREFIX, revision).await {
                Ok(events) => events,
                Err(error) => {
                    tracing::warn!(error = %error, "watching agent records failed; listing again");
                    continue;
                }
            };
            let mut tick = tokio::time::interval(refresh_every);
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(Ok(event)) => {
                            let Some(member) = event.kv.key.strip_prefix(PREFIX) else { continue };
                            match event.kind {
                                EventKind::Put => self.observe(member, &event.kv.value, &mut live),
                                EventKind::Delete => {
                                    // Its replica's lease ended: the agent is as last seen.
                                    live.remove(member);
                                }
                            }
                        }
                        Some(Err(error)) => {
                            tracing::warn!(error = %error, "agent record watch ended; listing again");
                            break;
                        }
                        None => break,
                    },
                    _ = tick.tick() => self.mirror.refresh(live.iter().map(String::as_str)),
                }
            }
        }
    }

    /// Mirrors every record; returns the revision to watch from. Agents live before
    /// the list (the watch broke, e.g. etcd was unreachable and nothing could be
    /// refreshed) get one more lease from now: records that vanished meanwhile (an old
    /// lease expiring) are written again by their replicas within it.
    async fn list(&self, live: &mut BTreeSet<String>) -> Result<Revision, StoreError> {
        let mut start_after: Option<String> = None;
        let mut revision = None;
        let mut fresh = BTreeSet::new();
        loop {
            let page = self
                .store
                .range(PREFIX, start_after.as_deref(), 1000)
                .await?;
            // Later pages are read at later revisions: watch from the first page's, so
            // nothing written meanwhile is missed (a record seen twice is harmless).
            revision.get_or_insert(page.revision);
            for kv in &page.kvs {
                if let Some(member) = kv.key.strip_prefix(PREFIX) {
                    self.observe(member, &kv.value, &mut fresh);
                }
            }
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => start_after = Some(last.key.clone()),
                _ => break,
            }
        }
        self.mirror
            .refresh(live.iter().chain(fresh.iter()).map(String::as_str));
        *live = fresh;
        Ok(revision.unwrap_or_default())
    }

    fn observe(&self, member: &str, value: &[u8], live: &mut BTreeSet<String>) {
        match serde_json::from_slice::<AgentRecord>(value) {
            Ok(record) => {
                if record.connected {
                    live.insert(member.to_string());
                } else {
                    live.remove(member);
                }
                self.mirror.mirror(member, record.into_state());
            }
            Err(error) => {
                tracing::warn!(member, error = %error, "agent record does not decode; ignored");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::plan::IngressReport;

    fn state(connected: bool) -> AgentState {
        AgentState {
            session: 7,
            connected,
            member: "host-a".into(),
            labels: [("rack".to_owned(), "r1".to_owned())].into(),
            address: Some("10.0.0.1".parse().unwrap()),
            agent_version: "0.1.0".into(),
            driver: "standalone".into(),
            capabilities: vec!["TCP".into()],
            last_seen: Instant::now(),
            last_seen_time: Time::new(chrono::Utc::now()),
            applied: Some(Published {
                version: 12,
                digest: "abc".into(),
                plan: Arc::new(ClusterPlan::default()),
            }),
            rule_errors: Vec::new(),
            report: Some(Arc::new(AgentReport {
                ingresses: vec![IngressReport::default()],
                addresses: Vec::new(),
                requests_per_second: 1.5,
                active_connections: 3,
                speaker: None,
                ..AgentReport::default()
            })),
        }
    }

    #[test]
    fn a_record_round_trips_into_the_state_the_controller_reads() {
        let record = AgentRecord::of("r1", &state(true));
        let json = serde_json::to_vec(&record).unwrap();
        let back: AgentRecord = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, record);
        let state = back.into_state();
        assert!(state.connected);
        assert_eq!(state.applied.as_ref().map(|p| p.version), Some(12));
        assert_eq!(state.capabilities, ["TCP"]);
        assert_eq!(state.labels["rack"], "r1");
        assert_eq!(state.address, Some("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn load_alone_is_not_a_relevant_change() {
        let before = AgentRecord::of("r1", &state(true));
        let mut busier = state(true);
        let mut report = (*busier.report.clone().unwrap()).clone();
        report.requests_per_second = 900.0;
        report.active_connections = 40;
        report.host_cpu = 0.9;
        report.bytes_per_second = 1e6;
        busier.report = Some(Arc::new(report));
        assert!(before.same_but_load(&AgentRecord::of("r1", &busier)));
        assert!(!before.same_but_load(&AgentRecord::of("r1", &state(false))));
    }

    #[test]
    fn a_mirrored_agent_expires_one_lease_after_its_record_stops_being_refreshed() {
        let hub = Sessions::new(super::super::SessionSettings {
            heartbeat_interval: Duration::from_millis(10),
            lease: Duration::from_millis(50),
        });
        hub.mirror(
            "eu/host-a",
            AgentRecord::of("r1", &state(true)).into_state(),
        );
        assert!(hub.take_dirty().contains("eu"));
        assert!(hub.agents()["eu/host-a"].connected);
        assert_eq!(hub.members()["eu"]["host-a"].member, "host-a");
        std::thread::sleep(Duration::from_millis(40));
        hub.refresh(["eu/host-a"]);
        std::thread::sleep(Duration::from_millis(30));
        assert!(
            hub.agents()["eu/host-a"].connected,
            "refreshed: its replica lives"
        );
        std::thread::sleep(Duration::from_millis(40));
        assert!(
            !hub.agents()["eu/host-a"].connected,
            "not refreshed for a lease"
        );
    }
}
