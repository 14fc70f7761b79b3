//! The agent sessions this replica holds and what they said: the published plan of
//! every cluster, each connected member's last report, acks and lease, and the sessions'
//! ends. One per replica; with several replicas, the directory mirrors the other
//! replicas' agents into a second one.
//!
//! A cluster has members, one agent each, named by the agent (`member.name`; an agent
//! from before members is named after its cluster). There is one session per member: a
//! newer session of the same member replaces the older, and members of one cluster
//! never replace each other. A member that disconnected is kept (as last seen) for
//! [`MEMBER_FORGOTTEN_AFTER`], then forgotten.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fedingress_api::Time;
use fedingress_api::cluster::MEMBER_FORGOTTEN_AFTER;
use fedingress_api::plan::{AgentReport, ClusterPlan, RuleError};
use tokio::sync::watch;

/// Heartbeat and lease of agent sessions.
#[derive(Clone, Copy, Debug)]
pub struct SessionSettings {
    pub heartbeat_interval: Duration,
    pub lease: Duration,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            heartbeat_interval: Duration::from_secs(2),
            lease: Duration::from_secs(6),
        }
    }
}

/// A cluster's plan as published to its members (each gets its own view, see
/// [`ClusterPlan::for_member`]).
#[derive(Clone, Debug, Default)]
pub struct Published {
    /// Derived from the store revision the plan was computed at.
    pub version: u64,
    pub digest: String,
    pub plan: Arc<ClusterPlan>,
}

impl Published {
    /// What `member` is sent of this plan: the same version, its own view and digest.
    pub fn for_member(&self, member: &str) -> Published {
        if self.plan.pools.pools.is_empty() && self.plan.pools.bindings.is_empty() {
            return self.clone();
        }
        let plan = self.plan.for_member(member);
        Published {
            version: self.version,
            digest: plan.digest(),
            plan: Arc::new(plan),
        }
    }
}

/// Who a member is, from its Hello.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member's name (never empty: an agent that gave none is named after its
    /// cluster).
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Its real address, which VRRP peers reach.
    pub address: Option<IpAddr>,
    pub agent_version: String,
    pub driver: String,
    /// What the driver serves (see `fedingress_api::capability`). Empty: unknown.
    pub capabilities: Vec<String>,
}

/// What the hub knows of one member's agent.
#[derive(Clone, Debug)]
pub struct AgentState {
    pub session: u64,
    pub connected: bool,
    /// The member's name, labels and address.
    pub member: String,
    pub labels: BTreeMap<String, String>,
    pub address: Option<IpAddr>,
    pub agent_version: String,
    pub driver: String,
    /// What the driver serves, from the session's Hello (see
    /// `fedingress_api::capability`); kept while the member is offline. Empty: unknown.
    pub capabilities: Vec<String>,
    pub last_seen: Instant,
    pub last_seen_time: Time,
    /// The plan the agent last acknowledged (its member's view).
    pub applied: Option<Published>,
    pub rule_errors: Vec<RuleError>,
    /// Shared: the controller copies agent states on every pass.
    pub report: Option<Arc<AgentReport>>,
}

/// A member's key in [`Sessions::agents`] and the shared agent records:
/// `<cluster>/<member>` (both DNS labels, so the `/` is unambiguous).
pub fn member_id(cluster: &str, member: &str) -> String {
    format!("{cluster}/{member}")
}

/// The cluster and member of a [`member_id`].
pub fn split_member_id(id: &str) -> Option<(&str, &str)> {
    id.split_once('/')
}

struct MemberEntry {
    agent: AgentState,
    /// Dropping it tells the current session it was replaced; a value sent on it ends
    /// the session with that reason ([`Sessions::end_session`]).
    kill: Option<watch::Sender<&'static str>>,
}

struct ClusterEntry {
    plan: watch::Sender<Published>,
    members: BTreeMap<String, MemberEntry>,
}

impl ClusterEntry {
    fn new() -> Self {
        Self {
            plan: watch::channel(Published::default()).0,
            members: BTreeMap::new(),
        }
    }

    /// The member whose session is `session`.
    fn session_mut(&mut self, session: u64) -> Option<&mut MemberEntry> {
        self.members
            .values_mut()
            .find(|m| m.agent.session == session)
    }
}

#[derive(Default)]
struct DirtySets {
    clusters: BTreeSet<String>,
    members: BTreeSet<String>,
}

/// Shared hub state. Cheap to clone through `Arc`.
pub struct Sessions {
    pub settings: SessionSettings,
    clusters: Mutex<HashMap<String, ClusterEntry>>,
    next_session: Mutex<u64>,
    /// Bumped whenever an agent connects, disconnects, acks or reports: the controller
    /// recomputes what depends on the clusters in `dirty`.
    changed: watch::Sender<u64>,
    dirty: Mutex<DirtySets>,
    /// When this hub started: clusters whose agents have not reconnected since are
    /// routed from persisted state for one lease.
    started: Instant,
}

impl Sessions {
    pub fn new(settings: SessionSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            clusters: Mutex::new(HashMap::new()),
            next_session: Mutex::new(0),
            changed: watch::channel(0).0,
            dirty: Mutex::new(DirtySets::default()),
            started: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, ClusterEntry>> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters more than losing the hub: keep serving with what is there.
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self, cluster: &str, member: &str) {
        {
            let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            dirty.clusters.insert(cluster.to_string());
            dirty.members.insert(member_id(cluster, member));
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The clusters whose members said something since the last call.
    pub fn take_dirty(&self) -> BTreeSet<String> {
        std::mem::take(
            &mut self
                .dirty
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clusters,
        )
    }

    /// The members ([`member_id`]s) that said something since the last call.
    pub fn take_dirty_members(&self) -> BTreeSet<String> {
        std::mem::take(&mut self.dirty.lock().unwrap_or_else(|p| p.into_inner()).members)
    }

    /// Whether a cluster whose agent has not connected since this hub started may still
    /// be routed from persisted state (within one lease of the start).
    pub fn restoring(&self) -> bool {
        self.started.elapsed() <= self.settings.lease
    }

    /// How long until [`Sessions::restoring`] turns false (zero once it has).
    pub fn restoring_left(&self) -> Duration {
        self.settings.lease.saturating_sub(self.started.elapsed())
    }

    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Publishes a cluster's plan computed at `revision`; a plan equal to the current one
    /// keeps its version (agents are not disturbed).
    pub fn publish(&self, cluster: &str, plan: ClusterPlan, revision: u64) {
        let digest = plan.digest();
        let mut clusters = self.lock();
        let entry = clusters
            .entry(cluster.to_string())
            .or_insert_with(ClusterEntry::new);
        if entry.plan.borrow().digest == digest {
            return;
        }
        tracing::debug!(cluster, version = revision, digest = %digest, shares = plan.ingresses.len(), pools = plan.pools.pools.len(), "plan published");
        entry.plan.send_replace(Published {
            version: revision,
            digest,
            plan: Arc::new(plan),
        });
    }

    /// Forgets clusters that no longer exist (their sessions end).
    pub fn retain_clusters(&self, names: &[String]) {
        let mut clusters = self.lock();
        clusters.retain(|name, _| names.iter().any(|n| n == name));
    }

    pub fn plan_receiver(&self, cluster: &str) -> watch::Receiver<Published> {
        let mut clusters = self.lock();
        clusters
            .entry(cluster.to_string())
            .or_insert_with(ClusterEntry::new)
            .plan
            .subscribe()
    }

    /// Registers a new session for a member of `cluster`, replacing (ending) that
    /// member's previous one. Returns the session id and the receiver that fires when it
    /// is replaced or ended. The cluster is marked dirty, so the ingresses there are
    /// recomputed with the driver's (possibly new) `capabilities`.
    pub fn connect(
        &self,
        cluster: &str,
        member: MemberInfo,
    ) -> (u64, watch::Receiver<&'static str>) {
        let session = {
            let mut next = self.next_session.lock().unwrap_or_else(|p| p.into_inner());
            *next += 1;
            *next
        };
        let (kill_tx, kill_rx) = watch::channel("");
        let name = member.name.clone();
        {
            let mut clusters = self.lock();
            let entry = clusters
                .entry(cluster.to_string())
                .or_insert_with(ClusterEntry::new);
            let previous = entry.members.remove(&name).map(|m| m.agent);
            entry.members.insert(
                name.clone(),
                MemberEntry {
                    kill: Some(kill_tx),
                    agent: AgentState {
                        session,
                        connected: true,
                        member: member.name,
                        labels: member.labels,
                        address: member.address,
                        agent_version: member.agent_version,
                        driver: member.driver,
                        capabilities: member.capabilities,
                        last_seen: Instant::now(),
                        last_seen_time: Time(chrono::Utc::now()),
                        applied: previous.as_ref().and_then(|p| p.applied.clone()),
                        rule_errors: previous
                            .as_ref()
                            .map(|p| p.rule_errors.clone())
                            .unwrap_or_default(),
                        report: previous.and_then(|p| p.report),
                    },
                },
            );
        }
        self.notify(cluster, &name);
        (session, kill_rx)
    }

    /// Applies `f` to the agent state of the member of `cluster` whose session is
    /// `session`, if that session is still its member's.
    fn with_session(
        &self,
        cluster: &str,
        session: u64,
        f: impl FnOnce(&mut AgentState),
    ) -> Option<String> {
        let mut clusters = self.lock();
        let member = clusters.get_mut(cluster)?.session_mut(session)?;
        let agent = &mut member.agent;
        agent.last_seen = Instant::now();
        agent.last_seen_time = Time(chrono::Utc::now());
        agent.connected = true;
        f(agent);
        Some(agent.member.clone())
    }

    /// Any message from the agent: it is alive. False once the session was replaced.
    pub fn seen(&self, cluster: &str, session: u64) -> bool {
        self.with_session(cluster, session, |_| {}).is_some()
    }

    pub fn applied(
        &self,
        cluster: &str,
        session: u64,
        published: Published,
        rule_errors: Vec<RuleError>,
    ) {
        if let Some(member) = self.with_session(cluster, session, |agent| {
            agent.applied = Some(published);
            agent.rule_errors = rule_errors;
        }) {
            self.notify(cluster, &member);
        }
    }

    pub fn reported(&self, cluster: &str, session: u64, report: AgentReport) {
        let mut changed = false;
        let member = self.with_session(cluster, session, |agent| {
            changed = agent.report.as_deref() != Some(&report);
            if changed {
                agent.report = Some(Arc::new(report));
            }
        });
        if let (true, Some(member)) = (changed, member) {
            self.notify(cluster, &member);
        }
    }

    /// Ends the live sessions of every member of `cluster`, if any, with `reason` (their
    /// agents reconnect), e.g. when the Cluster's provider changed and the agents must
    /// be welcomed again.
    pub fn end_session(&self, cluster: &str, reason: &'static str) {
        let clusters = self.lock();
        for member in clusters
            .get(cluster)
            .into_iter()
            .flat_map(|e| e.members.values())
        {
            if let Some(kill) = &member.kill {
                kill.send_replace(reason);
            }
        }
    }

    /// The session ended (stream closed, lease missed or replaced).
    pub fn disconnect(&self, cluster: &str, session: u64) {
        let mut clusters = self.lock();
        if let Some(member) = clusters
            .get_mut(cluster)
            .and_then(|e| e.session_mut(session))
        {
            member.agent.connected = false;
            member.kill = None;
            let name = member.agent.member.clone();
            drop(clusters);
            self.notify(cluster, &name);
        }
    }

    /// Every member of every cluster, by cluster then member name, with `connected`
    /// false for sessions past their lease. Members disconnected for longer than
    /// [`MEMBER_FORGOTTEN_AFTER`] are forgotten here.
    pub fn members(&self) -> BTreeMap<String, BTreeMap<String, AgentState>> {
        let lease = self.settings.lease;
        let mut clusters = self.lock();
        let mut out = BTreeMap::new();
        for (name, entry) in clusters.iter_mut() {
            entry.members.retain(|_, m| {
                m.kill.is_some() || m.agent.last_seen.elapsed() <= MEMBER_FORGOTTEN_AFTER
            });
            if entry.members.is_empty() {
                continue;
            }
            let members = entry
                .members
                .iter()
                .map(|(member, m)| {
                    let mut agent = m.agent.clone();
                    if agent.last_seen.elapsed() > lease {
                        agent.connected = false;
                    }
                    (member.clone(), agent)
                })
                .collect();
            out.insert(name.clone(), members);
        }
        out
    }

    /// Every member's state by [`member_id`] (what the shared agent records hold).
    pub fn agents(&self) -> BTreeMap<String, AgentState> {
        self.members()
            .into_iter()
            .flat_map(|(cluster, members)| {
                members
                    .into_iter()
                    .map(move |(member, agent)| (member_id(&cluster, &member), agent))
            })
            .collect()
    }

    /// The published plan of a cluster.
    pub fn published(&self, cluster: &str) -> Option<Published> {
        self.lock().get(cluster).map(|e| e.plan.borrow().clone())
    }

    /// Sets what the shared record of a member's agent (`id`, a [`member_id`]) says (a
    /// mirror of agents held by any replica; see [`directory`](crate::directory)): seen
    /// now, the cluster marked dirty.
    pub fn mirror(&self, id: &str, mut state: AgentState) {
        let Some((cluster, member)) = split_member_id(id) else {
            return;
        };
        state.last_seen = Instant::now();
        state.member = member.to_string();
        {
            let mut clusters = self.lock();
            let entry = clusters
                .entry(cluster.to_string())
                .or_insert_with(ClusterEntry::new);
            entry.members.insert(
                member.to_string(),
                MemberEntry {
                    agent: state,
                    kill: None,
                },
            );
        }
        self.notify(cluster, member);
    }

    /// Marks the mirrored agents of `ids` ([`member_id`]s) seen now: their records still
    /// exist, so the replicas holding them are alive. Agents not refreshed expire one
    /// lease later.
    pub fn refresh<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let now = Instant::now();
        let now_time = Time(chrono::Utc::now());
        let mut entries = self.lock();
        for id in ids {
            let Some((cluster, member)) = split_member_id(id) else {
                continue;
            };
            if let Some(m) = entries
                .get_mut(cluster)
                .and_then(|e| e.members.get_mut(member))
            {
                m.agent.last_seen = now;
                m.agent.last_seen_time = now_time;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, driver: &str, capabilities: &[&str]) -> MemberInfo {
        MemberInfo {
            name: name.into(),
            driver: driver.into(),
            agent_version: "0.1.0".into(),
            capabilities: capabilities.iter().map(ToString::to_string).collect(),
            ..MemberInfo::default()
        }
    }

    #[test]
    fn a_hello_records_capabilities_marks_the_cluster_dirty_and_keeps_them_offline() {
        let hub = Sessions::new(SessionSettings::default());
        let capabilities = ["TCP", "TLS/Passthrough"];
        let (session, _kill) =
            hub.connect("eu-west", member("eu-west", "kubernetes", &capabilities));
        assert!(hub.take_dirty().contains("eu-west"));
        assert_eq!(
            hub.members()["eu-west"]["eu-west"].capabilities,
            capabilities
        );
        hub.disconnect("eu-west", session);
        let offline = &hub.members()["eu-west"]["eu-west"];
        assert!(!offline.connected);
        assert_eq!(
            offline.capabilities, capabilities,
            "last known while offline"
        );
        // A newer agent says more: the cluster is dirty again, with the new list.
        let _ = hub.take_dirty();
        hub.connect("eu-west", member("eu-west", "kubernetes", &["UDP"]));
        assert!(hub.take_dirty().contains("eu-west"));
        assert_eq!(hub.members()["eu-west"]["eu-west"].capabilities, ["UDP"]);
    }

    #[tokio::test]
    async fn end_session_tells_every_member_why() {
        let hub = Sessions::new(SessionSettings::default());
        let (_, mut a) = hub.connect("eu-west", member("a", "standalone", &[]));
        let (_, mut b) = hub.connect("eu-west", member("b", "standalone", &[]));
        hub.end_session("eu-west", "the cluster's provider changed");
        for kill in [&mut a, &mut b] {
            kill.changed().await.unwrap();
            assert_eq!(*kill.borrow(), "the cluster's provider changed");
        }
        // A replaced session sees its sender dropped instead.
        let (_, mut replaced) = hub.connect("eu-west", member("a", "standalone", &[]));
        hub.connect("eu-west", member("a", "standalone", &[]));
        assert!(replaced.changed().await.is_err());
    }

    #[tokio::test]
    async fn members_of_one_cluster_keep_their_own_sessions() {
        let hub = Sessions::new(SessionSettings::default());
        let (a, mut kill_a) = hub.connect("eu-west", member("host-a", "standalone", &[]));
        let (b, _kill_b) = hub.connect("eu-west", member("host-b", "standalone", &[]));
        assert_ne!(a, b);
        assert!(
            hub.seen("eu-west", a) && hub.seen("eu-west", b),
            "neither replaced"
        );
        assert!(
            !kill_a.has_changed().unwrap(),
            "host-b did not end host-a's session"
        );
        hub.reported("eu-west", b, AgentReport::default());
        assert_eq!(
            hub.take_dirty_members(),
            BTreeSet::from(["eu-west/host-a".to_string(), "eu-west/host-b".to_string()])
        );
        hub.disconnect("eu-west", a);
        let members = &hub.members()["eu-west"];
        assert!(!members["host-a"].connected && members["host-b"].connected);
        assert_eq!(
            hub.agents().keys().collect::<Vec<_>>(),
            ["eu-west/host-a", "eu-west/host-b"]
        );
        kill_a.changed().await.ok();
    }
}
