//! The dev federation's state file (`<state-dir>/state.json`): which `fedctl dev up`
//! supervises it, where it listens, and every process it started with its PID. `dev
//! down` and `dev backend` read it; writes replace the file atomically.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::process::Proc;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// The `fedctl dev up` process.
    pub supervisor: Option<Proc>,
    /// Loopback block (127.0.N.x).
    pub block: u8,
    /// REST API URL, agent gateway URL, DNS address.
    pub api: String,
    pub agent_gateway: String,
    pub dns: String,
    pub kubeconfig: PathBuf,
    pub processes: Vec<Proc>,
}

impl State {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    /// The state of the dev federation in `dir`, if there is one.
    pub fn load(dir: &Path) -> anyhow::Result<Option<State>> {
        let path = Self::path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is not a dev federation state file", path.display())
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let path = Self::path(dir);
        let temporary = dir.join("state.json.tmp");
        std::fs::write(&temporary, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", temporary.display()))?;
        std::fs::rename(&temporary, &path)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    pub fn remove(dir: &Path) {
        let _ = std::fs::remove_file(Self::path(dir));
    }

    /// The backend process of `cluster`.
    pub fn backend_mut(&mut self, cluster: &str) -> Option<&mut Proc> {
        self.processes
            .iter_mut()
            .find(|p| p.role == "backend" && p.name == cluster)
    }
}
