//! Leader election among agent replicas with a `coordination.k8s.io/v1` Lease.
//!
//! Several agent replicas may run in one member cluster; exactly one of them (the
//! leader) may apply the cluster's share and hold the hub session. [`LeaderElector`]
//! decides which one, with the same Lease record and the same rules as client-go's
//! `leaderelection` package with a `resourcelock.LeaseLock`: `holderIdentity`,
//! `leaseDurationSeconds`, `acquireTime`, `renewTime` and `leaseTransitions` mean what
//! they mean there, so `kubectl get lease` and Go tooling read our Leases as usual.
//!
//! - A Lease is **free** when it does not exist, when its `holderIdentity` is empty, or
//!   when its `renewTime` plus its `leaseDurationSeconds` lies in the past.
//! - Every write is optimistic: a free Lease is taken with a replace (PUT) that carries
//!   the `metadata.resourceVersion` that was read, so a `409 Conflict` means another
//!   replica wrote first and won; an absent Lease is created (POST), and
//!   `409 AlreadyExists` means another replica created it first.
//! - The leader renews every `retry_period`, keeping `acquireTime` and
//!   `leaseTransitions`; a replica that takes the Lease from another holder (or from
//!   nobody) sets `acquireTime` and adds one to `leaseTransitions`.
//!
//! # Guarantees
//!
//! - **At most one leader at a time**, given bounded clock skew. The leader stops
//!   leading ([`LeaderElector::hold`] returns) when no renew has succeeded for
//!   `renew_deadline`, counted from the moment the last successful renew stamped its
//!   `renewTime`; a follower takes the Lease only once `renewTime + leaseDurationSeconds`
//!   has passed on its own clock. Both cannot lead at once as long as the follower's
//!   wall clock is ahead of the leader's by less than `lease_duration - renew_deadline`
//!   (5 s with the defaults). Keep node clocks synchronised (NTP).
//! - **Takeover within the lease duration**: a follower in [`LeaderElector::acquire`]
//!   sleeps at most until the observed Lease expires, so it takes over within
//!   `lease_duration` of the leader's last successful renew (plus one API round trip and
//!   the clock skew), or at once after a [`LeaderElector::release`].
//!
//! This differs from client-go in one respect: client-go judges expiry from the local
//! time at which it first *observed* the current record, which tolerates any clock
//! offset but delays takeover by up to one more retry period. We judge from `renewTime`
//! so that the takeover bound above holds.
//!
//! # Contract for the caller
//!
//! ```text
//! elector.acquire().await;          // follower until this returns
//! start applying + open the hub session
//! elector.hold().await;             // returns when leadership is lost
//! stop applying, drop the hub session, elector.release().await, exit non-zero
//! ```
//!
//! When [`LeaderElector::hold`] returns, this replica is no longer the leader and
//! another may already be: the caller must stop applying at once and drop its hub
//! session. The agent then exits so that Kubernetes restarts it as a follower; it does
//! not try to become leader again in-process. On a clean shutdown the leader calls
//! [`LeaderElector::release`] (client-go's `ReleaseOnCancel`) so a follower takes over
//! without waiting for the Lease to expire.
//!
//! # Assumptions
//!
//! - Every replica has a distinct identity ([`default_identity`]: the pod name). Two
//!   live processes with one identity would both believe they lead.
//! - `lease_duration > renew_deadline > retry_period` ([`LeaseSettings::validate`]).
//!
//! # RBAC
//!
//! The agent's ServiceAccount needs, in the Lease's namespace only:
//!
//! ```yaml
//! apiGroups: ["coordination.k8s.io"]
//! resources: ["leases"]
//! verbs: ["get", "create", "update"]
//! ```
//!
//! (`resourceNames` cannot restrict `create`; it may restrict `get` and `update` to the
//! Lease's name.) A denied request is logged at ERROR and retried; it never panics.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::core::response::reason;
use tokio::time::Instant;

/// Default [`LeaseSettings::lease_duration`] (client-go's and kube-controller-manager's).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default [`LeaseSettings::renew_deadline`].
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default [`LeaseSettings::retry_period`].
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// client-go's `JitterFactor`: a follower waits `retry_period * (1 + rand[0, 1.2))`.
const JITTER_FACTOR: f64 = 1.2;
/// The field manager our Lease writes are recorded under.
const FIELD_MANAGER: &str = "fedingress-agent";
/// `leaseDurationSeconds` written on release (client-go writes 1 as well).
const RELEASED_LEASE_SECONDS: i32 = 1;

/// Where the Lease lives, who we are, and the election's timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Namespace of the Lease (the agent's own namespace).
    pub namespace: String,
    /// Name of the Lease, shared by all replicas of one agent.
    pub name: String,
    /// This replica's identity, written to `holderIdentity`; unique per replica.
    pub identity: String,
    /// How long a follower waits after the last renew before it takes the Lease
    /// (written as whole seconds to `leaseDurationSeconds`). Default 15 s.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renew. Default 10 s.
    pub renew_deadline: Duration,
    /// Interval between attempts (renewals, and followers' tries before jitter). Default 2 s.
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// Settings with the default timing (15 s / 10 s / 2 s).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Checks what client-go's `NewLeaderElector` checks: names are set and
    /// `lease_duration > renew_deadline > retry_period * 1.2 > 0`.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Settings`] naming the first rule broken.
    pub fn validate(&self) -> Result<(), LeaseError> {
        let problem = if self.namespace.is_empty() || self.name.is_empty() {
            Some("the Lease namespace and name must not be empty")
        } else if self.identity.is_empty() {
            Some("the identity must not be empty")
        } else if self.retry_period.is_zero() {
            Some("retry_period must be positive")
        } else if self.lease_duration.as_secs() == 0
            || i32::try_from(self.lease_duration.as_secs()).is_err()
        {
            Some("lease_duration must be between 1 s and 2^31 s")
        } else if self.renew_deadline >= Duration::from_secs(self.lease_duration.as_secs()) {
            Some("renew_deadline must be shorter than lease_duration (whole seconds)")
        } else if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            Some("renew_deadline must be longer than 1.2 * retry_period")
        } else {
            None
        };
        match problem {
            None => Ok(()),
            Some(problem) => Err(LeaseError::Settings {
                lease: self.lease_ref(),
                problem,
            }),
        }
    }

    /// `namespace/name`, for messages and logs.
    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `leaseDurationSeconds` as written (whole seconds, at least 1).
    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1)
    }
}

/// A failed Lease operation. Messages name the Lease; the cause is the source.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// [`LeaseSettings::validate`] rejected the settings.
    #[error("invalid leader-election settings for Lease {lease}: {problem}")]
    Settings {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The rule that was broken.
        problem: &'static str,
    },
    /// Reading the Lease failed.
    #[error("reading Lease {lease}")]
    Get {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Creating the absent Lease failed (other than losing the race to create it).
    #[error("creating Lease {lease}")]
    Create {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Replacing the Lease failed (other than losing to a concurrent write).
    #[error("updating Lease {lease}")]
    Update {
        /// `namespace/name` of the Lease.
        lease: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl LeaseError {
    /// Whether the API denied the request (403): RBAC is missing, someone must act.
    pub fn is_forbidden(&self) -> bool {
        match self {
            Self::Settings { .. } => false,
            Self::Get { source, .. }
            | Self::Create { source, .. }
            | Self::Update { source, .. } => status_is(source, reason::FORBIDDEN, 403),
        }
    }
}

/// Whether `error` is an API status with `wanted` as reason, or with `code` and a
/// reason the API does not define. This is apimachinery's `errors.ReasonForError`
/// check; kube-core 5.0's `Status::is_conflict`/`is_forbidden` test whether the
/// *wanted* reason is known instead of the received one, so their code fallback
/// never applies (a proxy's plain-text 409 would not count).
fn status_is(error: &kube::Error, wanted: &str, code: u16) -> bool {
    match error {
        kube::Error::Api(status) => {
            status.reason == wanted || (!reason::is_known(&status.reason) && status.code == code)
        }
        _ => false,
    }
}

/// The wall clock the elector stamps `renewTime` with and judges expiry by.
/// [`LeaderElector::new`] uses [`Timestamp::now`]; tests inject their own.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// What this replica last saw and wrote.
#[derive(Debug, Default)]
struct State {
    /// Whether this replica leads: set by a successful write, cleared when
    /// [`LeaderElector::hold`] returns, on a lost attempt, and on release.
    leading: bool,
    /// The Lease as our last successful write returned it (its resourceVersion is the
    /// precondition of [`LeaderElector::release`]); `None` once another writer is seen.
    written: Option<Lease>,
    /// Start of the attempt that produced `written`, when it stamped `renewTime`.
    renewed_at: Option<Instant>,
    /// `holderIdentity` as last observed (`None`: absent or empty).
    holder: Option<String>,
    /// When the other holder's Lease seen by the last attempt expires.
    other_expires_at: Option<Timestamp>,
}

/// Elects one leader among replicas with a Lease; see the [module docs](self).
///
/// Methods take `&self`, so the elector can be shared (`Arc`) with readiness and status
/// code that reads [`observed_holder`](Self::observed_holder) and
/// [`is_leader`](Self::is_leader).
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    lease_ref: String,
    clock: Clock,
    state: Mutex<State>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("settings", &self.settings)
            .field("state", &*self.state())
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// An elector for `settings.namespace/settings.name` on the system clock.
    /// Call [`LeaseSettings::validate`] first.
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Self {
        Self::with_clock(client, settings, Arc::new(Timestamp::now))
    }

    /// An elector with an injected wall clock (tests: a clock driven by tokio's paused
    /// time).
    pub fn with_clock(client: kube::Client, settings: LeaseSettings, clock: Clock) -> Self {
        Self {
            api: Api::namespaced(client, &settings.namespace),
            lease_ref: settings.lease_ref(),
            settings,
            clock,
            state: Mutex::new(State::default()),
        }
    }

    /// Who holds the Lease as last observed (for logs, `/readyz` and status): the
    /// recorded `holderIdentity`, ours after a successful write, `None` when the Lease
    /// was absent or free, or before the first attempt.
    pub fn observed_holder(&self) -> Option<String> {
        self.state().holder.clone()
    }

    /// Whether this replica currently leads (between a successful
    /// [`acquire`](Self::acquire) and the return of [`hold`](Self::hold)).
    pub fn is_leader(&self) -> bool {
        self.state().leading
    }

    /// One attempt: `Ok(true)` when this replica holds the Lease afterwards (created,
    /// taken over, or renewed), `Ok(false)` when another replica holds a valid Lease or
    /// won a concurrent write (409).
    ///
    /// # Errors
    ///
    /// [`LeaseError::Get`], [`LeaseError::Create`] or [`LeaseError::Update`] when the
    /// API fails or denies the request; the state is left as it was.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaseError> {
        let started = Instant::now();
        let now = (self.clock)();
        self.state().other_expires_at = None;
        let current = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|source| LeaseError::Get {
                lease: self.lease_ref.clone(),
                source,
            })?;
        let Some(current) = current else {
            return self.create(now, started).await;
        };

        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        self.observe(holder.clone());
        let ours = holder.as_deref() == Some(self.settings.identity.as_str());
        if holder.is_some() && !ours {
            let expires_at = expiry(&spec, self.settings.lease_duration_seconds());
            if expires_at.is_some_and(|at| now < at) {
                let mut state = self.state();
                state.other_expires_at = expires_at;
                state.leading = false;
                state.written = None;
                return Ok(false);
            }
            tracing::info!(
                lease = %self.lease_ref,
                holder = holder.as_deref().unwrap_or_default(),
                "lease expired; taking it over"
            );
        }

        let mut next = current;
        let spec = next.spec.get_or_insert_with(LeaseSpec::default);
        if ours {
            spec.acquire_time.get_or_insert(MicroTime(now));
            spec.lease_transitions.get_or_insert(0);
        } else {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.settings.identity.clone());
        spec.lease_duration_seconds = Some(self.settings.lease_duration_seconds());
        spec.renew_time = Some(MicroTime(now));
        match self
            .api
            .replace(&self.settings.name, &write_params(), &next)
            .await
        {
            Ok(written) => {
                self.won(written, started);
                Ok(true)
            }
            Err(error) if status_is(&error, reason::CONFLICT, 409) => {
                tracing::debug!(lease = %self.lease_ref, "lease written concurrently by another replica");
                self.lost_race();
                Ok(false)
            }
            Err(source) => Err(LeaseError::Update {
                lease: self.lease_ref.clone(),
                source,
            }),
        }
    }

    /// Waits until this replica leads. Tries every `retry_period` with client-go's
    /// jitter, but wakes no later than the moment the observed Lease expires. API
    /// errors (RBAC denied, API down) are logged and retried; each attempt is bounded
    /// by `renew_deadline` so a hung connection cannot stall the follower.
    pub async fn acquire(&self) {
        tracing::info!(lease = %self.lease_ref, identity = %self.settings.identity, "waiting for leadership");
        loop {
            match tokio::time::timeout(self.settings.renew_deadline, self.try_acquire_or_renew())
                .await
            {
                Ok(Ok(true)) => {
                    tracing::info!(lease = %self.lease_ref, identity = %self.settings.identity, "acquired the lease; leading");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => self.log_error(&error),
                Err(_) => tracing::warn!(
                    lease = %self.lease_ref,
                    timeout_ms = self.settings.renew_deadline.as_millis(),
                    "lease attempt timed out"
                ),
            }
            tokio::time::sleep(self.acquire_delay()).await;
        }
    }

    /// Renews every `retry_period` while leading and returns when leadership is lost:
    /// another holder observed, a 409 on renew, or no successful renew for
    /// `renew_deadline` (counted from the start of the last successful renew; a renew
    /// still in flight at that moment is abandoned). A Lease found with an empty
    /// `holderIdentity` is taken again (as client-go does), since nobody else can have
    /// led meanwhile. Returns at once when this replica does not lead. See the
    /// [module docs](self) for what the caller must do next.
    pub async fn hold(&self) {
        let Some(mut renewed_at) = self.leading_since() else {
            tracing::warn!(lease = %self.lease_ref, "not leading; nothing to hold");
            return;
        };
        loop {
            let deadline = renewed_at + self.settings.renew_deadline;
            let next_try = Instant::now() + self.settings.retry_period;
            if next_try >= deadline {
                tokio::time::sleep_until(deadline).await;
                self.step_down();
                tracing::warn!(
                    lease = %self.lease_ref,
                    renew_deadline_ms = self.settings.renew_deadline.as_millis(),
                    "no successful lease renew within the renew deadline; leadership lost"
                );
                return;
            }
            tokio::time::sleep_until(next_try).await;
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    if let Some(at) = self.leading_since() {
                        renewed_at = at;
                    }
                }
                Ok(Ok(false)) => {
                    self.step_down();
                    tracing::warn!(
                        lease = %self.lease_ref,
                        holder = self.observed_holder().unwrap_or_default(),
                        "another replica holds the lease; leadership lost"
                    );
                    return;
                }
                Ok(Err(error)) => self.log_error(&error),
                Err(_) => {
                    self.step_down();
                    tracing::warn!(
                        lease = %self.lease_ref,
                        renew_deadline_ms = self.settings.renew_deadline.as_millis(),
                        "lease renew did not finish within the renew deadline; leadership lost"
                    );
                    return;
                }
            }
        }
    }

    /// Gives the Lease up so a follower takes over at once (client-go's
    /// `ReleaseOnCancel`): clears `holderIdentity`, sets `leaseDurationSeconds` to 1 and
    /// keeps the Lease object and `leaseTransitions`. Only if we still hold it: the write
    /// carries the resourceVersion of our last successful write, so a Lease anyone has
    /// written since is left alone (409). Call it after [`hold`](Self::hold) returned
    /// or was dropped. Bounded by `renew_deadline`; failures are logged.
    pub async fn release(&self) {
        let written = {
            let mut state = self.state();
            state.leading = false;
            state.written.take()
        };
        let Some(mut released) = written else {
            tracing::debug!(lease = %self.lease_ref, "lease not held; nothing to release");
            return;
        };
        let now = MicroTime((self.clock)());
        let spec = released.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(RELEASED_LEASE_SECONDS);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        let params = write_params();
        let write = self.api.replace(&self.settings.name, &params, &released);
        match tokio::time::timeout(self.settings.renew_deadline, write).await {
            Ok(Ok(_)) => {
                self.state().holder = None;
                tracing::info!(lease = %self.lease_ref, "lease released");
            }
            Ok(Err(error)) if status_is(&error, reason::CONFLICT, 409) => tracing::info!(
                lease = %self.lease_ref,
                "lease written by another replica since our last renew; left as it is"
            ),
            Ok(Err(source)) => self.log_error(&LeaseError::Update {
                lease: self.lease_ref.clone(),
                source,
            }),
            Err(_) => tracing::warn!(
                lease = %self.lease_ref,
                timeout_ms = self.settings.renew_deadline.as_millis(),
                "lease release timed out"
            ),
        }
    }

    /// Creates the absent Lease with us as holder.
    async fn create(&self, now: Timestamp, started: Instant) -> Result<bool, LeaseError> {
        self.observe(None);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                lease_duration_seconds: Some(self.settings.lease_duration_seconds()),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&write_params(), &lease).await {
            Ok(created) => {
                self.won(created, started);
                Ok(true)
            }
            Err(error) if status_is(&error, reason::ALREADY_EXISTS, 409) => {
                tracing::debug!(lease = %self.lease_ref, "lease created concurrently by another replica");
                self.lost_race();
                Ok(false)
            }
            Err(source) => Err(LeaseError::Create {
                lease: self.lease_ref.clone(),
                source,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the observed holder, logging changes.
    fn observe(&self, holder: Option<String>) {
        let mut state = self.state();
        if state.holder != holder {
            tracing::info!(
                lease = %self.lease_ref,
                holder = holder.as_deref().unwrap_or_default(),
                "lease holder changed"
            );
            state.holder = holder;
        }
    }

    fn won(&self, written: Lease, started: Instant) {
        self.observe(Some(self.settings.identity.clone()));
        let mut state = self.state();
        state.leading = true;
        state.written = Some(written);
        state.renewed_at = Some(started);
    }

    /// Another replica wrote between our read and our write.
    fn lost_race(&self) {
        let mut state = self.state();
        state.leading = false;
        state.written = None;
    }

    /// Leadership ends; `written` stays so that [`release`](Self::release) may still
    /// hand the Lease over if nobody has written it since.
    fn step_down(&self) {
        self.state().leading = false;
    }

    fn leading_since(&self) -> Option<Instant> {
        let state = self.state();
        if state.leading {
            state.renewed_at
        } else {
            None
        }
    }

    /// The follower's next wait: jittered `retry_period`, but no later than the expiry of
    /// the other holder's Lease seen by the last attempt.
    fn acquire_delay(&self) -> Duration {
        let jittered = self
            .settings
            .retry_period
            .mul_f64(1.0 + JITTER_FACTOR * rand::random::<f64>());
        let Some(expires_at) = self.state().other_expires_at else {
            return jittered;
        };
        let until =
            Duration::try_from(expires_at.duration_since((self.clock)())).unwrap_or(Duration::ZERO);
        jittered.min(until)
    }

    fn log_error(&self, error: &LeaseError) {
        let error_ref = error as &(dyn std::error::Error + 'static);
        if error.is_forbidden() {
            tracing::error!(
                lease = %self.lease_ref,
                error = error_ref,
                "lease access denied; grant the agent get, create and update on leases.coordination.k8s.io in its namespace"
            );
        } else {
            tracing::warn!(lease = %self.lease_ref, error = error_ref, "lease attempt failed");
        }
    }
}

/// Write parameters of every Lease write.
fn write_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    }
}

/// When a held Lease stops being valid: `renewTime` (else `acquireTime`) plus its
/// `leaseDurationSeconds` (else ours). `None` (already expired) without either time.
fn expiry(spec: &LeaseSpec, default_seconds: i32) -> Option<Timestamp> {
    let since = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let seconds = spec
        .lease_duration_seconds
        .filter(|s| *s > 0)
        .unwrap_or(default_seconds);
    Some(
        since
            .saturating_add(SignedDuration::from_secs(i64::from(seconds)))
            .unwrap_or(Timestamp::MAX),
    )
}

/// This replica's identity: `POD_NAME` (set from the downward API), else the host
/// name (a pod's host name is its name), else `cluster-agent-` and a random suffix.
pub fn default_identity() -> String {
    identity_from(std::env::var("POD_NAME").ok(), hostname(), random_suffix)
}

fn identity_from(
    pod_name: Option<String>,
    hostname: Option<String>,
    suffix: impl FnOnce() -> String,
) -> String {
    let usable = |s: Option<String>| s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
    usable(pod_name)
        .or_else(|| usable(hostname))
        .unwrap_or_else(|| format!("cluster-agent-{}", suffix()))
}

fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
}

fn random_suffix() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    //! Every scenario scripts the API server call by call with `tower_test::mock`: the
    //! script asserts each call's method, path and body, a missing call fails by the
    //! (virtual) time limit, and [`ApiServer::finish`] fails on any call left over.
    //! Time is tokio's paused clock; the elector's wall clock is derived from it.

    use super::*;
    use http::{Method, Request, Response, StatusCode};
    use http_body_util::BodyExt;
    use kube::client::Body;
    use serde_json::{Value, json};
    use std::future::Future;
    use tower_test::mock;

    const NS: &str = "fedingress-system";
    const NAME: &str = "cluster-agent";
    const ME: &str = "agent-a";
    const OTHER: &str = "agent-b";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/fedingress-system/leases";
    const LEASE: &str =
        "/apis/coordination.k8s.io/v1/namespaces/fedingress-system/leases/cluster-agent";
    /// Every scenario ends within this much virtual time, or a call is missing.
    const LIMIT: Duration = Duration::from_secs(600);

    /// A wall clock that moves with tokio's (paused) clock.
    #[derive(Clone, Copy)]
    struct TestClock {
        start: Instant,
        epoch: Timestamp,
    }

    impl TestClock {
        fn new() -> Self {
            Self {
                start: Instant::now(),
                epoch: Timestamp::from_second(1_800_000_000).unwrap(),
            }
        }

        fn elapsed(&self) -> Duration {
            self.start.elapsed()
        }

        fn now(&self) -> Timestamp {
            self.epoch + SignedDuration::try_from(self.elapsed()).unwrap()
        }

        fn ago(&self, seconds: i64) -> Timestamp {
            self.now() - SignedDuration::from_secs(seconds)
        }
    }

    /// The fake API server's side of the mock.
    struct ApiServer {
        handle: mock::Handle<Request<Body>, Response<Body>>,
        clock: TestClock,
    }

    /// One call the elector made.
    struct Call {
        method: Method,
        query: String,
        body: Value,
        send: mock::SendResponse<Response<Body>>,
    }

    impl ApiServer {
        async fn next(&mut self, method: Method, path: &str) -> Call {
            let (request, send) = self
                .handle
                .next_request()
                .await
                .expect("the elector stopped calling the API");
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.unwrap().to_bytes();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            assert_eq!(
                (&parts.method, parts.uri.path()),
                (&method, path),
                "unexpected call at {:?}; body: {body}",
                self.clock.elapsed()
            );
            Call {
                method: parts.method,
                query: parts.uri.query().unwrap_or_default().to_owned(),
                body,
                send,
            }
        }

        async fn get(&mut self) -> Call {
            self.next(Method::GET, LEASE).await
        }

        async fn put(&mut self) -> Call {
            let call = self.next(Method::PUT, LEASE).await;
            assert_field_manager(&call);
            call
        }

        async fn post(&mut self) -> Call {
            let call = self.next(Method::POST, LEASES).await;
            assert_field_manager(&call);
            call
        }

        /// GET 404 then POST of a fresh Lease held by us, accepted as `rv`; returns
        /// the stored Lease.
        async fn expect_create(&mut self, rv: &str) -> Value {
            self.get().await.not_found();
            let post = self.post().await;
            assert_holder(&post.body, Some(ME));
            assert_eq!(post.body["spec"]["leaseTransitions"], 0);
            post.accept(rv)
        }

        /// After the elector is done: drops it (and with it the client), then checks
        /// that no call is left over.
        async fn finish(mut self, elector: LeaderElector) {
            drop(elector);
            let left = within(self.handle.next_request()).await;
            assert!(
                left.is_none(),
                "unexpected call: {:?}",
                left.map(|(r, _)| (r.method().clone(), r.uri().clone()))
            );
        }
    }

    impl Call {
        fn respond(self, status: StatusCode, body: &Value) {
            let response = Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap();
            self.send.send_response(response);
        }

        fn ok(self, lease: &Value) {
            self.respond(StatusCode::OK, lease);
        }

        fn not_found(self) {
            self.fail(StatusCode::NOT_FOUND, "NotFound");
        }

        /// A Kubernetes `Status` error as the API server sends it.
        fn fail(self, status: StatusCode, reason: &str) {
            let body = json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": format!("leases.coordination.k8s.io \"{NAME}\": {reason}"),
                "reason": reason,
                "code": status.as_u16(),
            });
            self.respond(status, &body);
        }

        /// Stores the written Lease at resourceVersion `rv` and answers with it.
        fn accept(self, rv: &str) -> Value {
            let mut stored = self.body.clone();
            stored["metadata"]["resourceVersion"] = json!(rv);
            let status = if self.method == Method::POST {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            self.respond(status, &stored);
            stored
        }
    }

    /// kube writes `?&fieldManager=…`; the empty pair is harmless.
    fn assert_field_manager(call: &Call) {
        let pairs: Vec<&str> = call.query.split('&').filter(|p| !p.is_empty()).collect();
        assert_eq!(pairs, ["fieldManager=fedingress-agent"]);
    }

    fn settings() -> LeaseSettings {
        LeaseSettings::new(NS, NAME, ME)
    }

    fn elector(settings: LeaseSettings) -> (LeaderElector, ApiServer) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let clock = TestClock::new();
        let client = kube::Client::new(service, NS);
        let elector = LeaderElector::with_clock(client, settings, Arc::new(move || clock.now()));
        (elector, ApiServer { handle, clock })
    }

    async fn within<F: Future>(future: F) -> F::Output {
        tokio::time::timeout(LIMIT, future).await.expect(
            "scenario timed out: a scripted call is missing or an unexpected call is pending",
        )
    }

    /// Runs the elector's side and the script together; a script panic fails at once.
    async fn run<T>(
        code: impl Future<Output = T>,
        script: impl Future<Output = ApiServer>,
    ) -> (T, ApiServer) {
        within(async { tokio::join!(code, script) }).await
    }

    fn lease(
        holder: Option<&str>,
        renewed: Timestamp,
        seconds: i32,
        transitions: i32,
        rv: &str,
    ) -> Value {
        let mut spec = json!({
            "leaseDurationSeconds": seconds,
            "acquireTime": micro(renewed - SignedDuration::from_secs(300)),
            "renewTime": micro(renewed),
            "leaseTransitions": transitions,
        });
        if let Some(holder) = holder {
            spec["holderIdentity"] = json!(holder);
        }
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": NAME, "namespace": NS, "resourceVersion": rv },
            "spec": spec,
        })
    }

    fn micro(at: Timestamp) -> Value {
        serde_json::to_value(MicroTime(at)).unwrap()
    }

    fn time(value: &Value) -> Timestamp {
        value.as_str().expect("a MicroTime string").parse().unwrap()
    }

    fn assert_holder(lease: &Value, holder: Option<&str>) {
        assert_eq!(
            lease["spec"].get("holderIdentity").and_then(Value::as_str),
            holder
        );
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_creates_an_absent_lease() {
        let (elector, mut api) = elector(settings());
        let (won, api) = run(elector.try_acquire_or_renew(), async move {
            api.get().await.not_found();
            let post = api.post().await;
            let spec = &post.body["spec"];
            assert_eq!(post.body["metadata"]["name"], NAME);
            assert_eq!(post.body["metadata"]["namespace"], NS);
            assert_holder(&post.body, Some(ME));
            assert_eq!(spec["leaseDurationSeconds"], 15);
            assert_eq!(spec["leaseTransitions"], 0);
            assert_eq!(time(&spec["acquireTime"]), api.clock.now());
            assert_eq!(time(&spec["renewTime"]), api.clock.now());
            post.accept("1");
            api
        })
        .await;
        assert!(won.unwrap());
        assert!(elector.is_leader());
        assert_eq!(elector.observed_holder().as_deref(), Some(ME));
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn lost_create_race_is_not_an_error() {
        let (elector, mut api) = elector(settings());
        let (won, api) = run(elector.try_acquire_or_renew(), async move {
            api.get().await.not_found();
            api.post().await.fail(StatusCode::CONFLICT, "AlreadyExists");
            api
        })
        .await;
        assert!(!won.unwrap());
        assert!(!elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn takes_over_an_expired_lease_held_by_another() {
        let (elector, mut api) = elector(settings());
        let (won, api) = run(elector.try_acquire_or_renew(), async move {
            let held = lease(Some(OTHER), api.clock.ago(16), 15, 3, "41");
            api.get().await.ok(&held);
            let put = api.put().await;
            let spec = &put.body["spec"];
            assert_eq!(put.body["metadata"]["resourceVersion"], "41");
            assert_holder(&put.body, Some(ME));
            assert_eq!(spec["leaseTransitions"], 4);
            assert_eq!(spec["leaseDurationSeconds"], 15);
            assert_eq!(time(&spec["acquireTime"]), api.clock.now());
            assert_eq!(time(&spec["renewTime"]), api.clock.now());
            put.accept("42");
            api
        })
        .await;
        assert!(won.unwrap());
        assert!(elector.is_leader());
        assert_eq!(elector.observed_holder().as_deref(), Some(ME));
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn leaves_a_fresh_lease_held_by_another() {
        let (elector, mut api) = elector(settings());
        let (won, api) = run(elector.try_acquire_or_renew(), async move {
            // Renewed 14.999 s ago with 15 s: still valid, so no write follows.
            let renewed = api.clock.now() - SignedDuration::from_millis(14_999);
            api.get()
                .await
                .ok(&lease(Some(OTHER), renewed, 15, 3, "41"));
            api
        })
        .await;
        assert!(!won.unwrap());
        assert!(!elector.is_leader());
        assert_eq!(elector.observed_holder().as_deref(), Some(OTHER));
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn takes_a_released_lease_at_once() {
        let (elector, mut api) = elector(settings());
        let (won, api) = run(elector.try_acquire_or_renew(), async move {
            // Released just now: no holder, so it is free although renewTime is fresh.
            api.get()
                .await
                .ok(&lease(None, api.clock.now(), 1, 4, "50"));
            let put = api.put().await;
            assert_eq!(put.body["metadata"]["resourceVersion"], "50");
            assert_holder(&put.body, Some(ME));
            assert_eq!(put.body["spec"]["leaseTransitions"], 5);
            assert_eq!(put.body["spec"]["leaseDurationSeconds"], 15);
            put.accept("51");
            api
        })
        .await;
        assert!(won.unwrap());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn follower_takes_over_exactly_when_the_lease_expires() {
        let (elector, mut api) = elector(settings());
        let clock = api.clock;
        let last_renew = clock.ago(14);
        let (took_over_at, api) = run(
            async {
                elector.acquire().await;
                clock.elapsed()
            },
            async move {
                let held = lease(Some(OTHER), last_renew, 15, 3, "41");
                api.get().await.ok(&held);
                // The next try is due in 2-4.4 s, but the lease expires in 1 s: the
                // follower wakes at the expiry, not later.
                let get = api.get().await;
                assert_eq!(api.clock.elapsed(), Duration::from_secs(1));
                get.ok(&held);
                let put = api.put().await;
                assert_eq!(put.body["metadata"]["resourceVersion"], "41");
                assert_eq!(put.body["spec"]["leaseTransitions"], 4);
                assert_eq!(
                    time(&put.body["spec"]["renewTime"]),
                    last_renew + SignedDuration::from_secs(15)
                );
                put.accept("42");
                api
            },
        )
        .await;
        assert_eq!(took_over_at, Duration::from_secs(1));
        assert!(elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn renews_its_own_lease_keeping_acquire_time_and_transitions() {
        let (elector, mut api) = elector(settings());
        let (won, api) = run(elector.try_acquire_or_renew(), async move {
            let ours = lease(Some(ME), api.clock.ago(1), 15, 2, "7");
            api.get().await.ok(&ours);
            let put = api.put().await;
            let spec = &put.body["spec"];
            assert_eq!(put.body["metadata"]["resourceVersion"], "7");
            assert_holder(&put.body, Some(ME));
            assert_eq!(spec["leaseTransitions"], 2);
            assert_eq!(spec["acquireTime"], ours["spec"]["acquireTime"]);
            assert_eq!(time(&spec["renewTime"]), api.clock.now());
            put.accept("8");
            api
        })
        .await;
        assert!(won.unwrap());
        assert!(elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn hold_renews_every_retry_period_until_another_holder_appears() {
        let (elector, mut api) = elector(settings());
        let clock = api.clock;
        let (lost_at, api) = run(
            async {
                elector.acquire().await;
                elector.hold().await;
                clock.elapsed()
            },
            async move {
                let mut stored = api.expect_create("1").await;
                for (second, rv) in [(2, "2"), (4, "3")] {
                    api.get().await.ok(&stored);
                    assert_eq!(api.clock.elapsed(), Duration::from_secs(second));
                    let put = api.put().await;
                    assert_eq!(
                        put.body["metadata"]["resourceVersion"],
                        stored["metadata"]["resourceVersion"]
                    );
                    assert_eq!(put.body["spec"]["leaseTransitions"], 0);
                    assert_eq!(
                        put.body["spec"]["acquireTime"],
                        stored["spec"]["acquireTime"]
                    );
                    assert_eq!(time(&put.body["spec"]["renewTime"]), api.clock.now());
                    stored = put.accept(rv);
                }
                // Someone else holds it now (for instance after an operator's edit).
                api.get()
                    .await
                    .ok(&lease(Some(OTHER), api.clock.now(), 15, 1, "9"));
                api
            },
        )
        .await;
        assert_eq!(lost_at, Duration::from_secs(6));
        assert!(!elector.is_leader());
        assert_eq!(elector.observed_holder().as_deref(), Some(OTHER));
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn hold_loses_on_conflict_during_renew() {
        let (elector, mut api) = elector(settings());
        let clock = api.clock;
        let (lost_at, api) = run(
            async {
                elector.acquire().await;
                elector.hold().await;
                let lost_at = clock.elapsed();
                // The lease is no longer ours to give up: release writes nothing.
                elector.release().await;
                lost_at
            },
            async move {
                let stored = api.expect_create("1").await;
                api.get().await.ok(&stored);
                let put = api.put().await;
                assert_eq!(put.body["metadata"]["resourceVersion"], "1");
                put.fail(StatusCode::CONFLICT, "Conflict");
                api
            },
        )
        .await;
        assert_eq!(lost_at, Duration::from_secs(2));
        assert!(!elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn hold_steps_down_after_renew_deadline_of_api_errors() {
        let (elector, mut api) = elector(settings());
        let clock = api.clock;
        let (lost_at, api) = run(
            async {
                elector.acquire().await;
                elector.hold().await;
                clock.elapsed()
            },
            async move {
                api.expect_create("1").await;
                // API down: a Status 503, a load balancer's plain-text 503, a refused
                // connection, a 503 again; the next try would be at the deadline.
                api.get()
                    .await
                    .fail(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
                assert_eq!(api.clock.elapsed(), Duration::from_secs(2));
                let get = api.get().await;
                let response = Response::builder()
                    .status(StatusCode::SERVICE_UNAVAILABLE)
                    .body(Body::from(b"no healthy upstream".to_vec()))
                    .unwrap();
                get.send.send_response(response);
                api.get().await.send.send_error(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "connection refused",
                ));
                api.get()
                    .await
                    .fail(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
                assert_eq!(api.clock.elapsed(), Duration::from_secs(8));
                api
            },
        )
        .await;
        // Steps down at the renew deadline, before a follower may take over (15 s).
        assert_eq!(lost_at, Duration::from_secs(10));
        assert!(!elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn hold_steps_down_at_the_deadline_when_a_renew_hangs() {
        let (elector, mut api) = elector(settings());
        let clock = api.clock;
        let (lost_at, api) = run(
            async {
                elector.acquire().await;
                elector.hold().await;
                clock.elapsed()
            },
            async move {
                let stored = api.expect_create("1").await;
                api.get().await.ok(&stored);
                let put = api.put().await;
                // Never answered while the elector waits.
                tokio::time::sleep(Duration::from_secs(30)).await;
                drop(put);
                api
            },
        )
        .await;
        assert_eq!(lost_at, Duration::from_secs(10));
        assert!(!elector.is_leader());
        api.finish(elector).await;
    }

    /// Log lines written by the code under test (the test runtime has one thread).
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
        type Writer = Logs;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn forbidden_is_logged_and_retried() {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let (elector, mut api) = elector(settings());
        let (_, api) = run(elector.acquire(), async move {
            api.get().await.fail(StatusCode::FORBIDDEN, "Forbidden");
            let first = api.clock.elapsed();
            // RBAC lacks create: the read works, the create is denied.
            api.get().await.not_found();
            let second = api.clock.elapsed();
            api.post().await.fail(StatusCode::FORBIDDEN, "Forbidden");
            api.expect_create("1").await;
            let third = api.clock.elapsed();
            // client-go's jitter: each wait lies in [retry_period, 2.2 * retry_period).
            for gap in [second - first, third - second] {
                assert!(
                    (Duration::from_secs(2)..Duration::from_millis(4400)).contains(&gap),
                    "retry after {gap:?}"
                );
            }
            api
        })
        .await;
        assert!(elector.is_leader());
        api.finish(elector).await;

        let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        let denied: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("lease access denied"))
            .collect();
        assert_eq!(denied.len(), 2, "{logs}");
        assert!(denied.iter().all(|l| l.contains("ERROR")), "{logs}");
        assert!(
            denied[0].contains("reading Lease fedingress-system/cluster-agent"),
            "{logs}"
        );
        assert!(
            denied[1].contains("creating Lease fedingress-system/cluster-agent"),
            "{logs}"
        );
        assert!(
            denied[1].contains("Forbidden"),
            "the cause is logged: {logs}"
        );
        assert!(logs.contains("acquired the lease; leading"), "{logs}");
    }

    #[tokio::test(start_paused = true)]
    async fn api_errors_name_the_operation_and_the_lease() {
        let (elector, mut api) = elector(settings());
        let ((read, update), api) = run(
            async {
                let read = elector.try_acquire_or_renew().await;
                let update = elector.try_acquire_or_renew().await;
                (read, update)
            },
            async move {
                api.get()
                    .await
                    .fail(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable");
                api.get()
                    .await
                    .ok(&lease(Some(OTHER), api.clock.ago(60), 15, 0, "3"));
                api.put().await.fail(StatusCode::FORBIDDEN, "Forbidden");
                api
            },
        )
        .await;
        let read = read.unwrap_err();
        assert!(matches!(read, LeaseError::Get { .. }));
        assert_eq!(
            read.to_string(),
            "reading Lease fedingress-system/cluster-agent"
        );
        assert!(std::error::Error::source(&read).is_some());
        assert!(!read.is_forbidden());
        let update = update.unwrap_err();
        assert!(matches!(update, LeaseError::Update { .. }));
        assert_eq!(
            update.to_string(),
            "updating Lease fedingress-system/cluster-agent"
        );
        assert!(update.is_forbidden());
        assert!(!elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn release_clears_the_holder() {
        let (elector, mut api) = elector(settings());
        let ((), api) = run(
            async {
                elector.acquire().await;
                elector.release().await;
            },
            async move {
                api.expect_create("1").await;
                let put = api.put().await;
                let spec = &put.body["spec"];
                assert_eq!(put.body["metadata"]["resourceVersion"], "1");
                assert_holder(&put.body, None);
                assert_eq!(spec["leaseDurationSeconds"], 1);
                assert_eq!(spec["leaseTransitions"], 0);
                assert_eq!(time(&spec["renewTime"]), api.clock.now());
                put.accept("2");
                api
            },
        )
        .await;
        assert!(!elector.is_leader());
        assert_eq!(elector.observed_holder(), None);
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn release_leaves_a_lease_written_since() {
        let (elector, mut api) = elector(settings());
        let ((), api) = run(
            async {
                elector.acquire().await;
                elector.release().await;
                // Nothing left to release.
                elector.release().await;
            },
            async move {
                api.expect_create("1").await;
                api.put().await.fail(StatusCode::CONFLICT, "Conflict");
                api
            },
        )
        .await;
        assert!(!elector.is_leader());
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn release_without_the_lease_makes_no_call() {
        let (elector, mut api) = elector(settings());
        let ((), api) = run(
            async {
                assert!(!elector.try_acquire_or_renew().await.unwrap());
                elector.release().await;
            },
            async move {
                api.get()
                    .await
                    .ok(&lease(Some(OTHER), api.clock.now(), 15, 0, "3"));
                api
            },
        )
        .await;
        assert_eq!(elector.observed_holder().as_deref(), Some(OTHER));
        api.finish(elector).await;
    }

    #[tokio::test(start_paused = true)]
    async fn hold_without_leadership_returns_at_once() {
        let (elector, api) = elector(settings());
        within(elector.hold()).await;
        assert_eq!(api.clock.elapsed(), Duration::ZERO);
        api.finish(elector).await;
    }

    #[test]
    fn expiry_counts_from_renew_time_with_the_leases_own_duration() {
        let renewed = Timestamp::from_second(1_800_000_000).unwrap();
        let mut spec = LeaseSpec {
            holder_identity: Some(OTHER.to_owned()),
            renew_time: Some(MicroTime(renewed)),
            acquire_time: Some(MicroTime(renewed - SignedDuration::from_secs(100))),
            lease_duration_seconds: Some(30),
            ..LeaseSpec::default()
        };
        let after = |s: i64| Some(renewed + SignedDuration::from_secs(s));
        assert_eq!(expiry(&spec, 15), after(30));
        spec.lease_duration_seconds = None;
        assert_eq!(expiry(&spec, 15), after(15));
        spec.renew_time = None;
        assert_eq!(expiry(&spec, 15), after(-85));
        spec.acquire_time = None;
        assert_eq!(expiry(&spec, 15), None);
    }

    #[test]
    fn settings_default_to_client_go_timing_and_validate() {
        let settings = settings();
        assert_eq!(settings.lease_duration, Duration::from_secs(15));
        assert_eq!(settings.renew_deadline, Duration::from_secs(10));
        assert_eq!(settings.retry_period, Duration::from_secs(2));
        settings.validate().unwrap();

        let mut bad = LeaseSettings::new(NS, NAME, ME);
        bad.renew_deadline = Duration::from_secs(15);
        let error = bad.validate().unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid leader-election settings for Lease fedingress-system/cluster-agent: \
             renew_deadline must be shorter than lease_duration (whole seconds)"
        );
        let mut bad = LeaseSettings::new(NS, NAME, ME);
        bad.retry_period = Duration::from_secs(9);
        assert!(bad.validate().is_err());
        assert!(LeaseSettings::new(NS, NAME, "").validate().is_err());
        assert!(LeaseSettings::new(NS, "", ME).validate().is_err());
    }

    #[test]
    fn identity_prefers_the_pod_name_then_the_host_name() {
        let pod = || Some("agent-7d9f-x2".to_owned());
        let host = || Some("node-host\n".to_owned());
        let suffix = || "0123".to_owned();
        assert_eq!(identity_from(pod(), host(), suffix), "agent-7d9f-x2");
        assert_eq!(identity_from(None, host(), suffix), "node-host");
        assert_eq!(
            identity_from(Some(" ".to_owned()), None, suffix),
            "cluster-agent-0123"
        );
        let a = default_identity();
        assert!(!a.is_empty());
        assert_eq!(random_suffix().len(), 16);
        assert_ne!(random_suffix(), random_suffix());
    }
}
