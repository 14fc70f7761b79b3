//! The agent sessions this replica holds and what they said: the published plan of
//! every cluster, each connected agent's last report, acks and lease, and the sessions'
//! ends. One per replica; with several replicas, the directory mirrors the other
//! replicas' agents into a second one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fedingress_api::Time;
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

/// A cluster's plan as published to its agent.
#[derive(Clone, Debug, Default)]
pub struct Published {
    /// Derived from the store revision the plan was computed at.
    pub version: u64,
    pub digest: String,
    pub plan: Arc<ClusterPlan>,
}

/// What the hub knows of a cluster's agent.
#[derive(Clone, Debug)]
pub struct AgentState {
    pub session: u64,
    pub connected: bool,
    pub agent_version: String,
    pub driver: String,
    /// What the driver serves, from the session's Hello (see
    /// `fedingress_api::capability`); kept while the cluster is offline. Empty: unknown.
    pub capabilities: Vec<String>,
    pub last_seen: Instant,
    pub last_seen_time: Time,
    /// The plan the agent last acknowledged (fully or with rule errors).
    pub applied: Option<Published>,
    pub rule_errors: Vec<RuleError>,
    /// Shared: the controller copies agent states on every pass.
    pub report: Option<Arc<AgentReport>>,
}

struct ClusterEntry {
    plan: watch::Sender<Published>,
    agent: Option<AgentState>,
    /// Dropping it tells the current session it was replaced; a value sent on it ends
    /// the session with that reason ([`Sessions::end_session`]).
    kill: Option<watch::Sender<&'static str>>,
}

impl ClusterEntry {
    fn new() -> Self {
        Self {
            plan: watch::channel(Published::default()).0,
            agent: None,
            kill: None,
        }
    }
}

/// Shared hub state. Cheap to clone through `Arc`.
pub struct Sessions {
    pub settings: SessionSettings,
    clusters: Mutex<HashMap<String, ClusterEntry>>,
    next_session: Mutex<u64>,
    /// Bumped whenever an agent connects, disconnects, acks or reports: the controller
    /// recomputes what depends on the clusters in `dirty`.
    changed: watch::Sender<u64>,
    dirty: Mutex<BTreeSet<String>>,
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
            dirty: Mutex::new(BTreeSet::new()),
            started: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, ClusterEntry>> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters more than losing the hub: keep serving with what is there.
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self, cluster: &str) {
        self.dirty
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cluster.to_string());
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The clusters whose agents said something since the last call.
    pub fn take_dirty(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner()))
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
        tracing::debug!(cluster, version = revision, digest = %digest, shares = plan.ingresses.len(), "plan published");
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

    /// Registers a new session for `cluster`, replacing (ending) any previous one.
    /// Returns the session id and the receiver that fires when it is replaced or ended.
    /// The cluster is marked dirty, so the ingresses there are recomputed with the
    /// driver's (possibly new) `capabilities`.
    pub fn connect(
        &self,
        cluster: &str,
        agent_version: &str,
        driver: &str,
        capabilities: &[String],
    ) -> (u64, watch::Receiver<&'static str>) {
        let session = {
            let mut next = self.next_session.lock().unwrap_or_else(|p| p.into_inner());
            *next += 1;
            *next
        };
        let (kill_tx, kill_rx) = watch::channel("");
        {
            let mut clusters = self.lock();
            let entry = clusters
                .entry(cluster.to_string())
                .or_insert_with(ClusterEntry::new);
            let previous = entry.agent.take();
            entry.kill = Some(kill_tx);
            entry.agent = Some(AgentState {
                session,
                connected: true,
                agent_version: agent_version.to_string(),
                driver: driver.to_string(),
                capabilities: capabilities.to_vec(),
                last_seen: Instant::now(),
                last_seen_time: Time(chrono::Utc::now()),
                applied: previous.as_ref().and_then(|p| p.applied.clone()),
                rule_errors: previous
                    .as_ref()
                    .map(|p| p.rule_errors.clone())
                    .unwrap_or_default(),
                report: previous.and_then(|p| p.report),
            });
        }
        self.notify(cluster);
        (session, kill_rx)
    }

    /// Applies `f` to the agent state of `cluster` if `session` is still its session.
    fn with_session(&self, cluster: &str, session: u64, f: impl FnOnce(&mut AgentState)) -> bool {
        let mut clusters = self.lock();
        match clusters.get_mut(cluster).and_then(|e| e.agent.as_mut()) {
            Some(agent) if agent.session == session => {
                agent.last_seen = Instant::now();
                agent.last_seen_time = Time(chrono::Utc::now());
                agent.connected = true;
                f(agent);
                true
            }
            _ => false,
        }
    }

    /// Any message from the agent: it is alive.
    pub fn seen(&self, cluster: &str, session: u64) -> bool {
        self.with_session(cluster, session, |_| {})
    }

    pub fn applied(
        &self,
        cluster: &str,
        session: u64,
        published: Published,
        rule_errors: Vec<RuleError>,
    ) {
        if self.with_session(cluster, session, |agent| {
            agent.applied = Some(published);
            agent.rule_errors = rule_errors;
        }) {
            self.notify(cluster);
        }
    }

    pub fn reported(&self, cluster: &str, session: u64, report: AgentReport) {
        let mut changed = false;
        self.with_session(cluster, session, |agent| {
            changed = agent.report.as_deref() != Some(&report);
            if changed {
                agent.report = Some(Arc::new(report));
            }
        });
        if changed {
            self.notify(cluster);
        }
    }

    /// Ends the live session of `cluster`, if any, with `reason` (its agent reconnects),
    /// e.g. when the Cluster's provider changed and the agent must be welcomed again.
    pub fn end_session(&self, cluster: &str, reason: &'static str) {
        let clusters = self.lock();
        if let Some(kill) = clusters.get(cluster).and_then(|e| e.kill.as_ref()) {
            kill.send_replace(reason);
        }
    }

    /// The session ended (stream closed, lease missed or replaced).
    pub fn disconnect(&self, cluster: &str, session: u64) {
        let mut clusters = self.lock();
        if let Some(entry) = clusters.get_mut(cluster)
            && let Some(agent) = entry.agent.as_mut().filter(|a| a.session == session)
        {
            agent.connected = false;
            entry.kill = None;
            drop(clusters);
            self.notify(cluster);
        }
    }

    /// Agent states by cluster, with `connected` false for sessions past their lease.
    pub fn agents(&self) -> BTreeMap<String, AgentState> {
        let lease = self.settings.lease;
        self.lock()
            .iter()
            .filter_map(|(name, entry)| {
                entry.agent.clone().map(|mut agent| {
                    if agent.last_seen.elapsed() > lease {
                        agent.connected = false;
                    }
                    (name.clone(), agent)
                })
            })
            .collect()
    }

    /// The published plan of a cluster.
    pub fn published(&self, cluster: &str) -> Option<Published> {
        self.lock().get(cluster).map(|e| e.plan.borrow().clone())
    }

    /// Sets what the shared record of `cluster`'s agent says (a mirror of agents held by
    /// any replica; see [`directory`](crate::directory)): seen now, the cluster marked dirty.
    pub fn mirror(&self, cluster: &str, mut state: AgentState) {
        state.last_seen = Instant::now();
        {
            let mut clusters = self.lock();
            let entry = clusters
                .entry(cluster.to_string())
                .or_insert_with(ClusterEntry::new);
            entry.agent = Some(state);
        }
        self.notify(cluster);
    }

    /// Marks the mirrored agents of `clusters` seen now: their records still exist, so
    /// the replicas holding them are alive. Agents not refreshed expire one lease later.
    pub fn refresh<'a>(&self, clusters: impl IntoIterator<Item = &'a str>) {
        let now = Instant::now();
        let now_time = Time(chrono::Utc::now());
        let mut entries = self.lock();
        for cluster in clusters {
            if let Some(agent) = entries.get_mut(cluster).and_then(|e| e.agent.as_mut()) {
                agent.last_seen = now;
                agent.last_seen_time = now_time;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_records_capabilities_marks_the_cluster_dirty_and_keeps_them_offline() {
        let hub = Sessions::new(SessionSettings::default());
        let capabilities = vec!["TCP".to_string(), "TLS/Passthrough".to_string()];
        let (session, _kill) = hub.connect("eu-west", "0.1.0", "kubernetes", &capabilities);
        assert!(hub.take_dirty().contains("eu-west"));
        assert_eq!(hub.agents()["eu-west"].capabilities, capabilities);
        hub.disconnect("eu-west", session);
        let offline = &hub.agents()["eu-west"];
        assert!(!offline.connected);
        assert_eq!(
            offline.capabilities, capabilities,
            "last known while offline"
        );
        // A newer agent says more: the cluster is dirty again, with the new list.
        let _ = hub.take_dirty();
        hub.connect("eu-west", "0.2.0", "kubernetes", &["UDP".to_string()]);
        assert!(hub.take_dirty().contains("eu-west"));
        assert_eq!(hub.agents()["eu-west"].capabilities, ["UDP"]);
    }

    #[tokio::test]
    async fn end_session_tells_the_session_why() {
        let hub = Sessions::new(SessionSettings::default());
        let (_, mut kill) = hub.connect("eu-west", "0.1.0", "standalone", &[]);
        hub.end_session("eu-west", "the cluster's provider changed");
        kill.changed().await.unwrap();
        assert_eq!(*kill.borrow(), "the cluster's provider changed");
        // A replaced session sees its sender dropped instead.
        let (_, mut replaced) = hub.connect("eu-west", "0.1.0", "standalone", &[]);
        hub.connect("eu-west", "0.1.0", "standalone", &[]);
        assert!(replaced.changed().await.is_err());
    }
}
