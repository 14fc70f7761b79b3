//! The agent's client certificate (kubeadm join, kubelet certificate rotation): the key
//! it generates, the certificate the hub's agent CA signs for it, and when to renew.
//!
//! Files in the state dir: `agent.key` (PEM PKCS#8, mode 0600), `agent.crt`, and
//! `agent-cert.json` (when it was issued, notAfter, fingerprint, and the id of the join
//! token that bought the first one, so a join token is never sent twice). Each is
//! replaced atomically (written beside, then renamed), the key before the certificate.
//!
//! What does not belong here: the RPCs (see [`crate::hub`]).

use std::path::{Path, PathBuf};

use fedingress_proto::IssuedCertificate;
use serde::{Deserialize, Serialize};

/// Renewal happens at a random point between these fractions of the lifetime.
pub const RENEW_FROM: f64 = 0.7;
pub const RENEW_TO: f64 = 0.8;

/// A certificate and its key. `Debug` leaves the key out.
#[derive(Clone)]
pub struct ClientIdentity {
    pub cert_pem: String,
    pub key_pem: String,
    pub meta: CertMeta,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("meta", &self.meta)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// What the agent keeps about its certificate besides the PEM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertMeta {
    /// Unix seconds.
    pub issued_at: i64,
    pub not_after: i64,
    pub fingerprint: String,
    /// Id (the part before the dot, not secret) of the join token last used.
    #[serde(default)]
    pub join_token_id: String,
}

impl CertMeta {
    /// When to ask for the next certificate: `fraction` (in [`RENEW_FROM`], [`RENEW_TO`])
    /// of the way from issue to expiry.
    pub fn renew_at(&self, fraction: f64) -> i64 {
        let lifetime = (self.not_after - self.issued_at).max(0);
        // Whole seconds are precise enough: lifetimes are at least 10 s.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_precision_loss,
            reason = "lifetimes are far below 2^52 seconds"
        )]
        let offset = (lifetime as f64 * fraction.clamp(0.0, 1.0)) as i64;
        self.issued_at + offset
    }

    pub fn expired(&self, now: i64) -> bool {
        self.not_after <= now
    }
}

/// The identity files in a state dir.
#[derive(Clone, Debug)]
pub struct IdentityFiles {
    dir: PathBuf,
}

impl IdentityFiles {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
        }
    }

    pub fn cert_path(&self) -> PathBuf {
        self.dir.join("agent.crt")
    }

    pub fn key_path(&self) -> PathBuf {
        self.dir.join("agent.key")
    }

    fn meta_path(&self) -> PathBuf {
        self.dir.join("agent-cert.json")
    }

    /// The stored identity; `None` when there is none (or only part of one).
    ///
    /// # Errors
    /// A file that exists but cannot be read or parsed.
    pub fn load(&self) -> Result<Option<ClientIdentity>, String> {
        let read = |path: PathBuf| match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        };
        let (Some(cert_pem), Some(key_pem), Some(meta)) = (
            read(self.cert_path())?,
            read(self.key_path())?,
            read(self.meta_path())?,
        ) else {
            return Ok(None);
        };
        let meta = serde_json::from_str(&meta)
            .map_err(|e| format!("parsing {}: {e}", self.meta_path().display()))?;
        Ok(Some(ClientIdentity {
            cert_pem,
            key_pem,
            meta,
        }))
    }

    /// Keeps the current identity as the previous one (`*.prev`), for when the renewed
    /// certificate is refused. Nothing to keep is not an error.
    ///
    /// # Errors
    /// A file that cannot be copied.
    pub fn keep_previous(&self) -> Result<(), String> {
        for path in [self.key_path(), self.cert_path(), self.meta_path()] {
            let text = match std::fs::read(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("reading {}: {e}", path.display())),
            };
            replace(&previous(&path), &text)?;
        }
        Ok(())
    }

    /// The identity kept by [`IdentityFiles::keep_previous`], if any.
    pub fn load_previous(&self) -> Option<ClientIdentity> {
        let read = |path: PathBuf| std::fs::read_to_string(previous(&path)).ok();
        let meta = serde_json::from_str(&read(self.meta_path())?).ok()?;
        Some(ClientIdentity {
            cert_pem: read(self.cert_path())?,
            key_pem: read(self.key_path())?,
            meta,
        })
    }

    /// Forgets the previous identity (the current one works).
    pub fn drop_previous(&self) {
        for path in [self.key_path(), self.cert_path(), self.meta_path()] {
            let _ = std::fs::remove_file(previous(&path));
        }
    }

    /// The id of the join token that bought the stored certificate ("" when none).
    pub fn used_join_token(&self) -> String {
        std::fs::read_to_string(self.meta_path())
            .ok()
            .and_then(|text| serde_json::from_str::<CertMeta>(&text).ok())
            .map(|meta| meta.join_token_id)
            .unwrap_or_default()
    }

    /// Stores a new identity (key 0600), each file replaced atomically.
    ///
    /// # Errors
    /// A file that cannot be written.
    pub fn store(
        &self,
        key_pem: &str,
        issued: &IssuedCertificate,
        now: i64,
        join_token_id: &str,
    ) -> Result<ClientIdentity, String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let meta = CertMeta {
            issued_at: now,
            not_after: issued.not_after_unix,
            fingerprint: issued.fingerprint.clone(),
            join_token_id: join_token_id.to_owned(),
        };
        let meta_text = serde_json::to_string_pretty(&meta)
            .map_err(|e| format!("encoding the certificate's metadata: {e}"))?;
        replace(&self.key_path(), key_pem.as_bytes())?;
        replace(&self.cert_path(), issued.certificate_pem.as_bytes())?;
        replace(&self.meta_path(), meta_text.as_bytes())?;
        Ok(ClientIdentity {
            cert_pem: issued.certificate_pem.clone(),
            key_pem: key_pem.to_owned(),
            meta,
        })
    }
}

fn previous(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".prev");
    PathBuf::from(name)
}

/// Writes `path` via a 0600 temporary file beside it and a rename.
fn replace(path: &Path, contents: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("writing {}: {e}", path.display()))
}

/// A fresh key and a certificate signing request for it, CN = `cluster`, client auth.
///
/// # Errors
/// Key generation or encoding failed.
pub fn new_key_and_csr(cluster: &str) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("generating a key: {e}"))?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cluster);
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let csr = params
        .serialize_request(&key)
        .and_then(|csr| csr.pem())
        .map_err(|e| format!("encoding the certificate signing request: {e}"))?;
    Ok((key.serialize_pem(), csr))
}

/// The id part (before the dot) of a token: not secret, used to tell tokens apart.
pub fn token_id(token: &str) -> &str {
    token.split_once('.').map_or("", |(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_falls_between_70_and_80_percent() {
        let meta = CertMeta {
            issued_at: 1000,
            not_after: 1100,
            ..CertMeta::default()
        };
        assert_eq!(meta.renew_at(RENEW_FROM), 1070);
        assert_eq!(meta.renew_at(RENEW_TO), 1080);
        assert!(!meta.expired(1099));
        assert!(meta.expired(1100));
    }

    #[test]
    fn identity_files_round_trip_with_a_private_key() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let files = IdentityFiles::new(dir.path());
        assert!(files.load().unwrap().is_none());
        let (key, csr) = new_key_and_csr("eu").unwrap();
        assert!(csr.contains("CERTIFICATE REQUEST"));
        let issued = IssuedCertificate {
            certificate_pem: "CERT".into(),
            ca_pem: "CA".into(),
            not_after_unix: 2000,
            fingerprint: "ab".into(),
        };
        let stored = files.store(&key, &issued, 1000, "abc").unwrap();
        assert!(!format!("{stored:?}").contains("PRIVATE KEY"));
        let loaded = files.load().unwrap().unwrap();
        assert_eq!(loaded.meta, stored.meta);
        assert_eq!(loaded.key_pem, key);
        assert_eq!(files.used_join_token(), "abc");
        let mode = std::fs::metadata(files.key_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(token_id("abc.secret"), "abc");
        // Renewal keeps the previous identity until the new one works.
        assert!(files.load_previous().is_none());
        files.keep_previous().unwrap();
        let renewed = IssuedCertificate {
            fingerprint: "cd".into(),
            ..issued
        };
        files.store("KEY2", &renewed, 1500, "abc").unwrap();
        assert_eq!(files.load().unwrap().unwrap().meta.fingerprint, "cd");
        let kept = files.load_previous().unwrap();
        assert_eq!(
            (kept.meta.fingerprint.as_str(), kept.key_pem.as_str()),
            ("ab", key.as_str())
        );
        files.drop_previous();
        assert!(files.load_previous().is_none());
        assert_eq!(token_id("nodot"), "");
    }
}
