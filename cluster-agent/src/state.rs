//! The agent's persisted state: the last plan it applied (`plan.json` in the state
//! dir), so that it fails static: after a restart it serves that plan at once, before
//! (and whether or not) the hub is reachable, and tells the hub which version it has.
//!
//! Entry types: [`PlanStore`] (load / save one file) and [`PersistedPlan`] (what is
//! in it). Saving is atomic: a reader, or the agent after a crash at any point, sees
//! either the previous file or the new one, never a mix. The file is written `0600` and a
//! directory created for it `0700`: a plan names every service, port and host the
//! cluster serves. What does not belong here:
//! deciding when to save (that is [`crate::hub`]).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use fedingress_api::plan::ClusterPlan;
use serde::{Deserialize, Serialize};

/// The plan applied last, with the version and digest the hub gave it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PersistedPlan {
    pub version: u64,
    pub digest: String,
    pub plan: ClusterPlan,
}

/// Why the persisted plan could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding the plan")]
    Encode(#[source] serde_json::Error),
}

/// One persisted plan file (normally `<stateDir>/plan.json`).
#[derive(Clone, Debug)]
pub struct PlanStore {
    path: PathBuf,
}

impl PlanStore {
    /// The store backed by the file at `path`; its directory is created on first save.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn tmp_path(&self) -> PathBuf {
        let mut name = self
            .path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "plan.json".into());
        name.push(".tmp");
        self.path.with_file_name(name)
    }

    /// Reads the persisted plan; `Ok(None)` when there is none (no file).
    ///
    /// # Errors
    /// The file exists but cannot be read ([`StateError::Read`]) or is not a persisted
    /// plan ([`StateError::Parse`]).
    pub fn load(&self) -> Result<Option<PersistedPlan>, StateError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StateError::Parse {
                path: self.path.clone(),
                source,
            })
    }

    /// [`PlanStore::load`] for start-up: a file that cannot be read or parsed is logged
    /// (and a corrupt one moved aside to `plan.json.corrupt` for inspection) and the
    /// agent starts with no plan, as if the file were missing. Never fails.
    pub fn load_or_empty(&self) -> Option<PersistedPlan> {
        match self.load() {
            Ok(plan) => plan,
            Err(error) => {
                tracing::error!(
                    error = %error_chain(&error),
                    path = %self.path.display(),
                    "persisted plan unusable; starting without a plan"
                );
                if matches!(error, StateError::Parse { .. }) {
                    let mut aside = self.path.clone().into_os_string();
                    aside.push(".corrupt");
                    if let Err(e) = std::fs::rename(&self.path, &aside) {
                        tracing::warn!(error = %e, "could not move the corrupt plan aside");
                    }
                }
                None
            }
        }
    }

    /// Writes `plan` atomically and durably: a temporary file in the same directory
    /// (mode `0600`), fsync, rename over the old file, fsync of the directory (created
    /// `0700` when missing). Blocking: call it from `spawn_blocking` on a runtime.
    ///
    /// # Errors
    /// [`StateError::Write`] naming the path that failed; the previous file is intact.
    pub fn save(&self, plan: &PersistedPlan) -> Result<(), StateError> {
        let bytes = serde_json::to_vec_pretty(plan).map_err(StateError::Encode)?;
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let write_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StateError::Write { path, source }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(write_err(&dir))?;
        let tmp = self.tmp_path();
        {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(write_err(&tmp))?;
            // A temporary file left by a crash keeps its old mode when opened again.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(write_err(&tmp))?;
            file.write_all(&bytes).map_err(write_err(&tmp))?;
            file.sync_all().map_err(write_err(&tmp))?;
        }
        std::fs::rename(&tmp, &self.path).map_err(write_err(&self.path))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(write_err(&dir))?;
        Ok(())
    }
}

/// `error: cause: cause` on one line, for log fields; a cause whose text is already
/// there (some errors repeat their source) is left out.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use fedingress_api::ingress::{Backend, IngressRule, Protocol};
    use fedingress_api::plan::{IngressKey, IngressShare};

    fn plan() -> PersistedPlan {
        let mut rule = IngressRule::new(Protocol::Tcp);
        rule.port = Some(3306);
        rule.backend = Some(Backend::new("mysql", 3306));
        let share = IngressShare {
            key: IngressKey::new("default", "db"),
            uid: "uid-db".into(),
            generation: 2,
            rules: vec![rule],
            tls: Vec::new(),
            cluster_override: None,
            anycast_addresses: Vec::new(),
        };
        let plan = ClusterPlan::from(vec![share]);
        PersistedPlan {
            version: 42,
            digest: plan.digest(),
            plan,
        }
    }

    #[test]
    fn round_trip_creates_the_directory_and_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = PlanStore::new(dir.path().join("state/plan.json"));
        assert_eq!(store.load().unwrap(), None);
        let first = plan();
        store.save(&first).unwrap();
        assert_eq!(store.load().unwrap(), Some(first.clone()));
        let second = PersistedPlan {
            version: 43,
            digest: ClusterPlan::default().digest(),
            plan: ClusterPlan::default(),
        };
        store.save(&second).unwrap();
        assert_eq!(store.load().unwrap(), Some(second));
        assert!(
            !store.tmp_path().exists(),
            "no temporary file is left behind"
        );
    }

    #[test]
    fn the_plan_is_private_to_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let store = PlanStore::new(dir.path().join("state/nested/plan.json"));
        // A world-readable leftover from a crash must not pass its mode on.
        std::fs::create_dir_all(dir.path().join("state/nested")).unwrap();
        std::fs::write(store.tmp_path(), "old").unwrap();
        std::fs::set_permissions(store.tmp_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        store.save(&plan()).unwrap();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.path()), 0o600);

        let fresh = PlanStore::new(dir.path().join("fresh/state/plan.json"));
        fresh.save(&plan()).unwrap();
        assert_eq!(mode(fresh.path()), 0o600);
        assert_eq!(mode(&dir.path().join("fresh/state")), 0o700);
        assert_eq!(mode(&dir.path().join("fresh")), 0o700);
    }

    #[test]
    fn missing_file_is_no_plan() {
        let dir = tempfile::tempdir().unwrap();
        let store = PlanStore::new(dir.path().join("plan.json"));
        assert_eq!(store.load().unwrap(), None);
        assert_eq!(store.load_or_empty(), None);
    }

    #[test]
    fn corrupt_file_is_an_error_and_start_up_goes_on_empty() {
        let dir = tempfile::tempdir().unwrap();
        let store = PlanStore::new(dir.path().join("plan.json"));
        for junk in ["{\"version\": 1, \"dig", "[]", "", "null"] {
            std::fs::write(store.path(), junk).unwrap();
            let err = store.load().unwrap_err();
            assert!(matches!(err, StateError::Parse { .. }), "{junk:?}: {err:?}");
            assert_eq!(store.load_or_empty(), None);
            assert!(!store.path().exists(), "the corrupt file is moved aside");
            assert!(dir.path().join("plan.json.corrupt").exists());
        }
        // The next save works as usual.
        store.save(&plan()).unwrap();
        assert_eq!(store.load_or_empty(), Some(plan()));
    }

    #[test]
    fn unreadable_path_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be.
        let store = PlanStore::new(dir.path());
        let err = store.load().unwrap_err();
        assert!(matches!(err, StateError::Read { .. }), "{err:?}");
        assert_eq!(store.load_or_empty(), None);
    }
}
