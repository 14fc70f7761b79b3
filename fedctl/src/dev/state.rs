//! The dev federation's state file (`<state-dir>/state.json`): which `fedctl dev up`
//! supervises it, where its replicas listen, and every process it started with its
//! PID. `dev down` and `dev backend` read it; writes replace the file atomically.

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
    /// REST API URL, agent gateway URL, DNS address (of the first replica).
    pub api: String,
    pub agent_gateway: String,
    pub dns: String,
    /// Every federation-apiserver replica (one without `--ha`).
    #[serde(default)]
    pub replicas: Vec<Replica>,
    /// The etcd client URL (`--ha`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<String>,
    pub kubeconfig: PathBuf,
    pub processes: Vec<Proc>,
}

/// One federation-apiserver replica: its addresses and its kubeconfig context.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replica {
    /// `r1`…`r3` with `--ha`, else `apiserver`: the name of its process.
    pub name: String,
    pub context: String,
    pub api: String,
    pub agent_gateway: String,
    pub dns: String,
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

    /// The kubeconfig context of the first replica that still runs (`None`: the current
    /// context).
    pub fn live_context(&self) -> Option<String> {
        self.replicas
            .iter()
            .find(|r| {
                self.processes
                    .iter()
                    .any(|p| p.role == "apiserver" && p.name == r.name && super::process::alive(p))
            })
            .map(|r| r.context.clone())
    }

    /// The backend process of `cluster`.
    pub fn backend_mut(&mut self, cluster: &str) -> Option<&mut Proc> {
        self.processes
            .iter_mut()
            .find(|p| p.role == "backend" && p.name == cluster)
    }
}
