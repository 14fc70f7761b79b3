//! The agent's TLS secrets (`tlsSecrets` in the config): certificate and key files
//! loaded into rustls server configs, reloaded when the files change.
//!
//! Each secret gets two configs: one offering ALPN `h2` and `http/1.1` (HTTPS rules)
//! and one without ALPN (TLS rules with `tlsMode: Terminate`, which forward bytes).
//! [`CertStore::reload_changed`] compares each file's modification time and size with
//! what was loaded (a Kubernetes Secret volume swaps a symlink; both follow it) and
//! reloads changed secrets; a pair that fails to load keeps the previous one serving.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use rustls::ServerConfig;
use rustls::sign::{CertifiedKey, SingleCertAndKey};

use crate::config::TlsSecretFiles;

/// The server configs of one secret.
#[derive(Debug)]
pub(crate) struct Configs {
    /// ALPN `h2`, `http/1.1`.
    pub http: Arc<ServerConfig>,
    /// No ALPN.
    pub raw: Arc<ServerConfig>,
}

/// What the loaded files looked like: (modified, length) of the cert and the key file.
type Stamp = [(Option<SystemTime>, u64); 2];

#[derive(Debug)]
struct Secret {
    files: TlsSecretFiles,
    current: ArcSwapOption<Configs>,
    stamp: Mutex<Option<Stamp>>,
}

/// Every configured TLS secret.
#[derive(Debug, Default)]
pub(crate) struct CertStore {
    secrets: BTreeMap<String, Secret>,
}

fn stamp(files: &TlsSecretFiles) -> Stamp {
    let one = |path: &std::path::Path| match std::fs::metadata(path) {
        Ok(meta) => (meta.modified().ok(), meta.len()),
        Err(_) => (None, 0),
    };
    [one(&files.cert_file), one(&files.key_file)]
}

fn configs(certified: Arc<CertifiedKey>) -> Result<Configs, rustls::Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let build = |alpn: Vec<Vec<u8>>| -> Result<Arc<ServerConfig>, rustls::Error> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(Arc::clone(&certified))));
        config.alpn_protocols = alpn;
        // The server's order of cipher suites (strongest first), not the client's.
        config.ignore_client_order = true;
        Ok(Arc::new(config))
    };
    Ok(Configs {
        http: build(vec![b"h2".to_vec(), b"http/1.1".to_vec()])?,
        raw: build(Vec::new())?,
    })
}

impl CertStore {
    /// Loads every secret; one that fails is logged and serves nothing until its files
    /// are fixed (the config check refuses such files at start, so this is rare).
    pub fn new(secrets: &BTreeMap<String, TlsSecretFiles>) -> Self {
        let store = CertStore {
            secrets: secrets
                .iter()
                .map(|(name, files)| {
                    let secret = Secret {
                        files: files.clone(),
                        current: ArcSwapOption::empty(),
                        stamp: Mutex::new(None),
                    };
                    (name.clone(), secret)
                })
                .collect(),
        };
        store.reload_changed();
        store
    }

    /// Whether the store has no secrets (then nothing needs watching).
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// Whether `name` is a configured secret.
    pub fn contains(&self, name: &str) -> bool {
        self.secrets.contains_key(name)
    }

    /// The configs of `name`, if it is configured and loaded.
    pub fn get(&self, name: &str) -> Option<Arc<Configs>> {
        self.secrets.get(name).and_then(|s| s.current.load_full())
    }

    /// Reloads every secret whose files changed since they were loaded; returns the
    /// names reloaded successfully.
    pub fn reload_changed(&self) -> Vec<String> {
        let mut reloaded = Vec::new();
        for (name, secret) in &self.secrets {
            let now = stamp(&secret.files);
            let mut last = secret.stamp.lock().unwrap_or_else(PoisonError::into_inner);
            if *last == Some(now) {
                continue;
            }
            *last = Some(now);
            let loaded = secret
                .files
                .load()
                .map_err(|e| crate::state::error_chain(&e))
                .and_then(|material| {
                    configs(material.certified).map_err(|e| crate::state::error_chain(&e))
                });
            match loaded {
                Ok(configs) => {
                    let first = secret.current.load().is_none();
                    secret.current.store(Some(Arc::new(configs)));
                    if !first {
                        tracing::info!(secret = %name, "TLS secret reloaded");
                    }
                    reloaded.push(name.clone());
                }
                Err(error) => {
                    tracing::warn!(
                        secret = %name,
                        %error,
                        "loading TLS secret failed; the previous certificate (if any) keeps serving"
                    );
                }
            }
        }
        reloaded
    }

    /// `(secret, loaded)` for every configured secret.
    pub fn loaded(&self) -> Vec<(String, bool)> {
        self.secrets
            .iter()
            .map(|(name, s)| (name.clone(), s.current.load().is_some()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &std::path::Path, host: &str) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![host.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    }

    #[test]
    fn loads_and_reloads_changed_files_and_keeps_the_old_pair_on_errors() {
        let dir = tempfile::tempdir().unwrap();
        pair(dir.path(), "a.example.com");
        let files = TlsSecretFiles {
            cert_file: dir.path().join("tls.crt"),
            key_file: dir.path().join("tls.key"),
        };
        let store = CertStore::new(&BTreeMap::from([("shop-tls".to_owned(), files)]));
        let first = store.get("shop-tls").expect("loaded");
        assert_eq!(first.http.alpn_protocols.len(), 2);
        assert!(first.raw.alpn_protocols.is_empty());
        assert!(store.get("other").is_none());
        assert!(store.reload_changed().is_empty(), "unchanged files");

        // A broken key: the old pair keeps serving.
        std::fs::write(dir.path().join("tls.key"), "not a key").unwrap();
        assert!(store.reload_changed().is_empty());
        assert!(Arc::ptr_eq(&store.get("shop-tls").unwrap(), &first));

        pair(dir.path(), "b.example.com");
        assert_eq!(store.reload_changed(), vec!["shop-tls".to_owned()]);
        assert!(!Arc::ptr_eq(&store.get("shop-tls").unwrap(), &first));
        assert_eq!(store.loaded(), vec![("shop-tls".to_owned(), true)]);
    }
}
