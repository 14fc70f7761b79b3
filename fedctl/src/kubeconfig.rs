//! kubeconfig files: which file(s), which context, and what fedctl needs from them
//! (server, CA, bearer token, namespace, the hub's agent gateway).
//!
//! The files are read the way kubectl reads them: `--kubeconfig FILE`, else every file of
//! `$KUBECONFIG` (separated by `:`; for each named cluster, user and context the first
//! file that has it wins, and so does the first `current-context`), else
//! `~/.kube/config`. Relative paths in a file are relative to that file's directory.
//!
//! Supported: `server`, `certificate-authority`, `certificate-authority-data`,
//! `insecure-skip-tls-verify`, `token`, `tokenFile`, the context's `namespace`, and the
//! cluster extension `fedingress.io/agent-gateway` (`{address: URL}`, or `{addresses:
//! [URL, ...]}` with one per federation-apiserver replica), which `fedctl dev up` writes
//! so that `fedctl join --emit` knows where agents connect. Client
//! certificates and exec/auth-provider plugins are not: the federation-apiserver
//! authenticates bearer tokens only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use serde::Deserialize;

/// Name of the kubeconfig cluster extension holding the agent gateway's address.
pub const AGENT_GATEWAY_EXTENSION: &str = "fedingress.io/agent-gateway";

/// What fedctl connects with, resolved from a kubeconfig context. `Debug` shows
/// whether there is a token, never the token.
#[derive(Clone, PartialEq)]
pub struct Connection {
    /// `http(s)://host:port`, no trailing slash.
    pub server: String,
    /// PEM CA bundle to verify the server with.
    pub ca_pem: Option<Vec<u8>>,
    /// Where that CA came from, when it is a file (for agent configs).
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_tls_verify: bool,
    pub token: Option<String>,
    /// The context's namespace, if it sets one.
    pub namespace: Option<String>,
    /// `fedingress.io/agent-gateway` extension of the cluster entry: `address`, or
    /// every one of `addresses` (one per replica); empty without the extension.
    pub agent_gateways: Vec<String>,
    /// The context's name.
    pub context: String,
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    #[serde(default = "Option::default")]
    value: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    #[serde(default)]
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    #[serde(default)]
    extensions: Vec<Extension>,
}

#[derive(Debug, Deserialize)]
struct Extension {
    name: String,
    #[serde(default)]
    extension: yaml_serde::Value,
}

#[derive(Default, Deserialize)]
struct UserEntry {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
}

/// What `Debug` shows of a secret: whether there is one.
fn redacted(secret: &Option<String>) -> &'static str {
    match secret {
        Some(_) => "Some(<redacted>)",
        None => "None",
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("ca_file", &self.ca_file)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("token", &format_args!("{}", redacted(&self.token)))
            .field("namespace", &self.namespace)
            .field("agent_gateways", &self.agent_gateways)
            .field("context", &self.context)
            .finish()
    }
}

impl std::fmt::Debug for UserEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserEntry")
            .field("token", &format_args!("{}", redacted(&self.token)))
            .field("token_file", &self.token_file)
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
struct ContextEntry {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
    namespace: Option<String>,
}

/// Entries merged from all files, each with the directory of the file it came from.
#[derive(Default)]
struct Merged {
    clusters: BTreeMap<String, (ClusterEntry, PathBuf)>,
    users: BTreeMap<String, (UserEntry, PathBuf)>,
    contexts: BTreeMap<String, ContextEntry>,
    current_context: Option<String>,
}

/// The kubeconfig files to read: `--kubeconfig`, else `$KUBECONFIG`, else
/// `~/.kube/config`.
pub fn files(flag: Option<&Path>) -> Vec<PathBuf> {
    if let Some(path) = flag {
        return vec![path.to_path_buf()];
    }
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    vec![home.join(".kube").join("config")]
}

/// Loads `files` and resolves `context` (default: the current context).
///
/// # Errors
/// A file that cannot be read (with `--kubeconfig` or a single file: also a missing
/// one), YAML that is not a kubeconfig, no or an unknown context, a context naming a
/// cluster or user that is not there, a CA or token file that cannot be read.
pub fn load(files: &[PathBuf], context: Option<&str>) -> anyhow::Result<Connection> {
    let mut merged = Merged::default();
    let mut read_any = false;
    for path in files {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && files.len() > 1 => continue,
            Err(e) => bail!(
                "reading kubeconfig {}: {} (point --kubeconfig or $KUBECONFIG at the federation's kubeconfig)",
                path.display(),
                io_text(&e)
            ),
        };
        read_any = true;
        let file: File = if text.trim().is_empty() {
            File::default()
        } else {
            yaml_serde::from_str(&text)
                .with_context(|| format!("kubeconfig {} is not valid", path.display()))?
        };
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        for entry in file.clusters {
            if let Some(value) = entry.value {
                merged
                    .clusters
                    .entry(entry.name)
                    .or_insert((value, dir.clone()));
            }
        }
        for entry in file.users {
            merged
                .users
                .entry(entry.name)
                .or_insert((entry.value.unwrap_or_default(), dir.clone()));
        }
        for entry in file.contexts {
            if let Some(value) = entry.value {
                merged.contexts.entry(entry.name).or_insert(value);
            }
        }
        if merged.current_context.is_none() {
            merged.current_context = file.current_context.filter(|c| !c.is_empty());
        }
    }
    if !read_any {
        bail!(
            "no kubeconfig found in {} (point --kubeconfig or $KUBECONFIG at the federation's kubeconfig)",
            files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(":")
        );
    }
    let name = match context {
        Some(name) => name.to_string(),
        None => merged.current_context.clone().ok_or_else(|| {
            anyhow::anyhow!("the kubeconfig has no current-context: pass --context NAME")
        })?,
    };
    let Some(ctx) = merged.contexts.get(&name) else {
        bail!("context {name:?} is not in the kubeconfig");
    };
    let Some((cluster, cluster_dir)) = merged.clusters.get(&ctx.cluster) else {
        bail!(
            "context {name:?} names cluster {:?}, which is not in the kubeconfig",
            ctx.cluster
        );
    };
    if cluster.server.is_empty() {
        bail!("cluster {:?} of the kubeconfig has no server", ctx.cluster);
    }
    let (ca_pem, ca_file) = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .context("certificate-authority-data of the kubeconfig is not base64")?;
            (Some(pem), None)
        }
        (None, Some(path)) => {
            let path = cluster_dir.join(path);
            let pem = std::fs::read(&path).map_err(|e| {
                anyhow::anyhow!(
                    "reading certificate-authority {}: {}",
                    path.display(),
                    io_text(&e)
                )
            })?;
            (Some(pem), Some(path))
        }
        (None, None) => (None, None),
    };
    let token = match merged.users.get(&ctx.user) {
        None if ctx.user.is_empty() => None,
        None => bail!(
            "context {name:?} names user {:?}, which is not in the kubeconfig",
            ctx.user
        ),
        Some((user, dir)) => match (&user.token, &user.token_file) {
            (Some(token), _) => Some(token.trim().to_string()),
            (None, Some(path)) => {
                let path = dir.join(path);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    anyhow::anyhow!("reading tokenFile {}: {}", path.display(), io_text(&e))
                })?;
                Some(text.trim().to_string())
            }
            (None, None) => None,
        },
    };
    let agent_gateways = cluster
        .extensions
        .iter()
        .find(|e| e.name == AGENT_GATEWAY_EXTENSION)
        .map(|e| {
            let one = e.extension.get("address").and_then(|a| a.as_str());
            let many = e
                .extension
                .get("addresses")
                .and_then(|a| a.as_sequence())
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str());
            one.into_iter().chain(many).map(str::to_string).collect()
        })
        .unwrap_or_default();
    Ok(Connection {
        server: cluster.server.trim_end_matches('/').to_string(),
        ca_pem,
        ca_file,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
        token: token.filter(|t| !t.is_empty()),
        namespace: ctx.namespace.clone().filter(|n| !n.is_empty()),
        agent_gateways,
        context: name,
    })
}

/// An I/O error as a short phrase ("No such file or directory").
pub fn io_text(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// One context of a kubeconfig [`render`] writes; its cluster and user entries take
/// its name.
pub struct RenderContext<'a> {
    pub name: &'a str,
    pub server: &'a str,
    /// Written as the agent gateway extension: `address` for one, `addresses` for
    /// several (one per replica), none when empty.
    pub agent_gateways: &'a [String],
}

/// Text of a kubeconfig with these contexts, the first one current (what `fedctl dev
/// up` writes: one context, or one per replica).
pub fn render(contexts: &[RenderContext<'_>], namespace: &str) -> String {
    let mut clusters = String::new();
    let mut users = String::new();
    let mut entries = String::new();
    for context in contexts {
        let name = context.name;
        clusters.push_str(&format!(
            "- name: {name}\n  cluster:\n    server: {}\n",
            context.server
        ));
        match context.agent_gateways {
            [] => {}
            [address] => clusters.push_str(&format!(
                "    extensions:\n    - name: {AGENT_GATEWAY_EXTENSION}\n      extension:\n        address: {address}\n"
            )),
            addresses => clusters.push_str(&format!(
                "    extensions:\n    - name: {AGENT_GATEWAY_EXTENSION}\n      extension:\n        addresses: [{}]\n",
                addresses.join(", ")
            )),
        }
        users.push_str(&format!("- name: {name}\n  user: {{}}\n"));
        entries.push_str(&format!(
            "- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: {namespace}\n"
        ));
    }
    let current = contexts.first().map(|c| c.name).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n{clusters}users:\n{users}contexts:\n{entries}current-context: {current}\n"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn resolves_context_ca_token_and_extension() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "ca.pem", "PEM");
        write(dir.path(), "tok", "secret-from-file\n");
        let path = write(
            dir.path(),
            "config",
            "apiVersion: v1\nkind: Config\nclusters:\n- name: a\n  cluster:\n    server: https://hub:6443/\n    certificate-authority: ca.pem\n    extensions:\n    - name: fedingress.io/agent-gateway\n      extension: {address: \"https://hub:6444\"}\n- name: b\n  cluster:\n    server: http://127.0.0.1:1\n    certificate-authority-data: UEVN\nusers:\n- name: u\n  user: {token: abc}\n- name: v\n  user: {tokenFile: tok}\ncontexts:\n- name: one\n  context: {cluster: a, user: u, namespace: shop}\n- name: two\n  context: {cluster: b, user: v}\ncurrent-context: one\n",
        );
        let one = load(std::slice::from_ref(&path), None).unwrap();
        assert_eq!(one.server, "https://hub:6443");
        assert_eq!(one.ca_pem.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(one.ca_file, Some(dir.path().join("ca.pem")));
        assert_eq!(one.token.as_deref(), Some("abc"));
        assert_eq!(one.namespace.as_deref(), Some("shop"));
        assert_eq!(one.agent_gateways, vec!["https://hub:6444"]);
        let two = load(std::slice::from_ref(&path), Some("two")).unwrap();
        assert_eq!(two.ca_pem.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(two.token.as_deref(), Some("secret-from-file"));
        assert_eq!(two.namespace, None);
        // Tokens never show in Debug output (logs, panics).
        let shown = format!("{one:?} {two:?}");
        assert!(
            !shown.contains("abc\"") && !shown.contains("secret-from-file"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
        let entry: UserEntry = yaml_serde::from_str("{token: abc}").unwrap();
        assert!(!format!("{entry:?}").contains("abc"));
        let err = load(std::slice::from_ref(&path), Some("three")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "context \"three\" is not in the kubeconfig"
        );
    }

    #[test]
    fn merges_files_first_wins() {
        let dir = tempfile::tempdir().unwrap();
        let first = write(
            dir.path(),
            "first",
            "clusters:\n- name: a\n  cluster: {server: \"http://first\"}\ncontexts:\n- name: c\n  context: {cluster: a}\n",
        );
        let second = write(
            dir.path(),
            "second",
            "clusters:\n- name: a\n  cluster: {server: \"http://second\"}\ncurrent-context: c\n",
        );
        let missing = dir.path().join("missing");
        let connection = load(&[missing, first, second], None).unwrap();
        assert_eq!(connection.server, "http://first");
        assert_eq!(connection.token, None);
    }

    #[test]
    fn missing_file_is_one_clear_line() {
        let err = load(&[PathBuf::from("/nonexistent/kubeconfig")], None).unwrap_err();
        let text = format!("{err:#}");
        assert!(!text.contains('\n'));
        assert!(text.contains("No such file or directory"), "{text}");
    }

    #[test]
    fn rendered_config_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "kubeconfig",
            &render(
                &[RenderContext {
                    name: "fedingress-dev",
                    server: "http://127.0.0.1:6443",
                    agent_gateways: &["http://127.0.0.1:6444".to_string()],
                }],
                "default",
            ),
        );
        let connection = load(&[path], None).unwrap();
        assert_eq!(connection.server, "http://127.0.0.1:6443");
        assert_eq!(connection.agent_gateways, vec!["http://127.0.0.1:6444"]);
        assert_eq!(connection.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn rendered_config_with_a_context_per_replica() {
        let dir = tempfile::tempdir().unwrap();
        let gateways: Vec<String> = (1..=3)
            .map(|i| format!("http://127.0.0.{i}:6444"))
            .collect();
        let servers: Vec<String> = (1..=3)
            .map(|i| format!("http://127.0.0.{i}:6443"))
            .collect();
        let contexts: Vec<RenderContext<'_>> = ["r1", "r2", "r3"]
            .iter()
            .zip(&servers)
            .map(|(name, server)| RenderContext {
                name,
                server,
                agent_gateways: &gateways,
            })
            .collect();
        let path = write(dir.path(), "kubeconfig", &render(&contexts, "default"));
        let current = load(std::slice::from_ref(&path), None).unwrap();
        assert_eq!(current.context, "r1");
        assert_eq!(current.server, "http://127.0.0.1:6443");
        assert_eq!(current.agent_gateways, gateways);
        let r3 = load(&[path], Some("r3")).unwrap();
        assert_eq!(r3.server, "http://127.0.0.3:6443");
        assert_eq!(r3.agent_gateways, gateways);
    }
}
