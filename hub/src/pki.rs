//! The hub's CA for agent client certificates (kubeadm join, kubelet CSR flow).
//!
//! An agent sends a PKCS#10 request for a key it generated; [`AgentCa::sign`] checks it
//! ([`check_csr`]: signature, CN = the cluster's name, no CA, key usage and extended key
//! usage at most what a TLS client needs) and issues a certificate of its own making:
//! CN = the cluster, URI SAN `fedingress://clusters/<name>/<uid>/members/<member>`
//! ([`identity_uri`]; without `/members/<member>` for an agent that names no member),
//! digitalSignature, clientAuth, the configured validity. Nothing of the request but its
//! subject public key ends up in the certificate.
//!
//! Where the CA comes from: `--agent-ca-cert-file`/`--agent-ca-key-file` (the anchor is
//! kube-controller-manager's `--cluster-signing-cert-file`), or, with the embedded store
//! and no files, one generated once into the data dir (`agent-ca.crt`, `agent-ca.key`,
//! mode 0600). Replicas on etcd must all be given the same files.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};

/// File names of a CA generated into the data dir.
pub const GENERATED_CERT: &str = "agent-ca.crt";
pub const GENERATED_KEY: &str = "agent-ca.key";

/// Why a CSR was refused (the agent sees the message).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CsrError {
    #[error("the certificate signing request is not a PEM PKCS#10 request")]
    Parse,
    #[error("the certificate signing request's signature does not verify")]
    Signature,
    #[error("the certificate signing request is not usable: {0}")]
    Unsupported(String),
    #[error("the request's subject CN is {got:?}; it must be the cluster's name {expected:?}")]
    CommonName { expected: String, got: String },
    #[error("the request asks for a CA certificate")]
    IsCa,
    #[error(
        "the request asks for key usage {0}; only digitalSignature and keyEncipherment are allowed"
    )]
    KeyUsage(String),
    #[error("the request asks for extended key usage {0}; only clientAuth is allowed")]
    ExtendedKeyUsage(String),
    #[error("signing the certificate failed: {0}")]
    Sign(String),
}

/// A certificate the CA issued.
#[derive(Clone, Debug)]
pub struct Signed {
    pub pem: String,
    /// SHA-256 of the DER, lower-case hex: the certificate's id.
    pub fingerprint: String,
    /// Serial number, hex.
    pub serial: String,
    /// notAfter, Unix seconds.
    pub not_after: i64,
}

/// The CA: its certificate and the signing key. `Debug` shows the certificate only.
pub struct AgentCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl std::fmt::Debug for AgentCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentCa")
            .field("cert_pem", &self.cert_pem)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl AgentCa {
    /// The CA from PEM text: a CA certificate and its private key.
    ///
    /// # Errors
    /// Unparsable PEM, a certificate that is not a CA, or a key that is not its key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| format!("private key: {e}"))?;
        let public = rcgen::PublicKeyData::subject_public_key_info(&key);
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| format!("certificate: {e}"))?;
        // The certificate must carry the key's public half.
        let der = pem_der(cert_pem).ok_or("certificate: no PEM CERTIFICATE block")?;
        if !contains(&der, &public) {
            return Err("the private key does not belong to the certificate".into());
        }
        Ok(Self {
            issuer,
            cert_pem: cert_pem.to_string(),
        })
    }

    /// Reads the CA from files (`--agent-ca-cert-file`, `--agent-ca-key-file`).
    ///
    /// # Errors
    /// A file that cannot be read, or what [`AgentCa::from_pem`] refuses.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))
        };
        Self::from_pem(&read(cert)?, &read(key)?)
            .map_err(|e| format!("agent CA {} / {}: {e}", cert.display(), key.display()))
    }

    /// A new self-signed CA; returns it and its key's PEM.
    ///
    /// # Errors
    /// Key generation or signing failed.
    pub fn generate(name: &str) -> Result<(Self, String), String> {
        let key = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
        let key_pem = key.serialize_pem();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = offset(now - Duration::from_secs(3600));
        params.not_after = offset(now + Duration::from_secs(10 * 365 * 24 * 3600));
        let cert = params
            .self_signed(&key)
            .map_err(|e| format!("signing the CA certificate: {e}"))?;
        let ca = Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        };
        Ok((ca, key_pem))
    }

    /// The CA generated once into `dir` (`agent-ca.crt`, `agent-ca.key`, 0600): read it
    /// when it is there, else generate and write it. Returns the CA and the cert path.
    ///
    /// # Errors
    /// Unreadable or unwritable files, or a CA that does not load.
    pub fn load_or_generate(dir: &Path) -> Result<(Self, PathBuf), String> {
        let cert = dir.join(GENERATED_CERT);
        let key = dir.join(GENERATED_KEY);
        if cert.exists() || key.exists() {
            return Ok((Self::load(&cert, &key)?, cert));
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let (ca, key_pem) = Self::generate("fedingress agent CA")?;
        write_private(&key, key_pem.as_bytes())?;
        write_private(&cert, ca.cert_pem.as_bytes())?;
        tracing::info!(cert = %cert.display(), "generated the agent CA into the data dir");
        Ok((ca, cert))
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Checks `csr_pem` for `cluster` and signs a client certificate for its key, naming
    /// `member` of the cluster (`""`: the whole cluster, for agents before members).
    ///
    /// # Errors
    /// What [`check_csr`] refuses, or signing failed.
    pub fn sign(
        &self,
        csr_pem: &str,
        cluster: &str,
        uid: &str,
        member: &str,
        validity: Duration,
        now: SystemTime,
    ) -> Result<Signed, CsrError> {
        let csr = parse_csr(csr_pem)?;
        check_csr(&csr.params, cluster)?;
        let serial: [u8; 16] = rand::random();
        let mut serial = serial.to_vec();
        serial[0] &= 0x7f; // positive
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cluster);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "fedingress:agents");
        params.subject_alt_names = vec![SanType::URI(
            identity_uri(cluster, uid, member)
                .try_into()
                .map_err(|e| CsrError::Sign(format!("{e}")))?,
        )];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        // A minute back, for clocks a little behind the hub's.
        params.not_before = offset(now - Duration::from_secs(60));
        let not_after = now + validity;
        params.not_after = offset(not_after);
        params.serial_number = Some(SerialNumber::from(serial.clone()));
        let signed = CertificateSigningRequestParams {
            params,
            public_key: csr.public_key,
        }
        .signed_by(&self.issuer)
        .map_err(|e| CsrError::Sign(e.to_string()))?;
        Ok(Signed {
            pem: signed.pem(),
            fingerprint: fingerprint(signed.der()),
            serial: hex::encode(serial),
            not_after: unix(not_after),
        })
    }
}

/// The identity a certificate names: `fedingress://clusters/<name>/<uid>/members/<member>`,
/// or `fedingress://clusters/<name>/<uid>` when `member` is empty (an agent from before
/// members, which speaks for the whole cluster).
pub fn identity_uri(cluster: &str, uid: &str, member: &str) -> String {
    if member.is_empty() {
        format!("fedingress://clusters/{cluster}/{uid}")
    } else {
        format!("fedingress://clusters/{cluster}/{uid}/members/{member}")
    }
}

/// SHA-256 of a certificate's DER, lower-case hex.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

fn parse_csr(csr_pem: &str) -> Result<CertificateSigningRequestParams, CsrError> {
    CertificateSigningRequestParams::from_pem(csr_pem).map_err(|e| match e {
        rcgen::Error::InvalidCertificationRequestSignature => CsrError::Signature,
        rcgen::Error::CouldNotParseCertificationRequest => CsrError::Parse,
        other => CsrError::Unsupported(other.to_string()),
    })
}

/// Parses `csr_pem` and checks it for `cluster` (see [`check_csr`]).
///
/// # Errors
/// Unparsable, badly signed, or asking for what is not allowed.
pub fn check_csr_pem(csr_pem: &str, cluster: &str) -> Result<(), CsrError> {
    check_csr(&parse_csr(csr_pem)?.params, cluster)
}

/// What a request may ask for: CN = `cluster`, no CA, key usage within
/// digitalSignature/keyEncipherment, extended key usage within clientAuth.
///
/// # Errors
/// The first thing that is not allowed.
pub fn check_csr(params: &CertificateParams, cluster: &str) -> Result<(), CsrError> {
    let cn = match params.distinguished_name.get(&DnType::CommonName) {
        Some(DnValue::Utf8String(s)) => s.clone(),
        Some(DnValue::PrintableString(s)) => s.as_str().to_string(),
        Some(DnValue::Ia5String(s)) => s.as_str().to_string(),
        Some(_) => "<not a UTF-8 or printable string>".to_string(),
        None => String::new(),
    };
    if cn != cluster {
        return Err(CsrError::CommonName {
            expected: cluster.to_string(),
            got: cn,
        });
    }
    if matches!(params.is_ca, IsCa::Ca(_)) {
        return Err(CsrError::IsCa);
    }
    for usage in &params.key_usages {
        if !matches!(
            usage,
            KeyUsagePurpose::DigitalSignature | KeyUsagePurpose::KeyEncipherment
        ) {
            return Err(CsrError::KeyUsage(format!("{usage:?}")));
        }
    }
    for usage in &params.extended_key_usages {
        if *usage != ExtendedKeyUsagePurpose::ClientAuth {
            return Err(CsrError::ExtendedKeyUsage(format!("{usage:?}")));
        }
    }
    Ok(())
}

fn offset(at: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(unix(at)).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

fn unix(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn pem_der(pem: &str) -> Option<Vec<u8>> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()
        .map(|c| c.to_vec())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Writes a file readable by its owner only (created 0600, then written).
pub fn write_private(path: &Path, contents: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    file.write_all(contents)
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(params: CertificateParams) -> String {
        let key = KeyPair::generate().unwrap();
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn named(cn: &str) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
    }

    #[test]
    fn signs_a_client_certificate_naming_the_cluster_and_uid() {
        let (ca, _) = AgentCa::generate("test").unwrap();
        let now = SystemTime::now();
        let signed = ca
            .sign(
                &csr(named("eu")),
                "eu",
                "uid-1",
                "",
                Duration::from_secs(60),
                now,
            )
            .unwrap();
        assert_eq!(signed.fingerprint.len(), 64);
        assert_eq!(signed.not_after, unix(now) + 60);
        let der = pem_der(&signed.pem).unwrap();
        assert!(contains(&der, b"fedingress://clusters/eu/uid-1"));
        assert!(!contains(&der, b"/members/"));
        assert!(contains(&der, b"eu"));
    }

    #[test]
    fn a_member_certificate_names_the_member_in_its_uri() {
        assert_eq!(
            identity_uri("eu", "uid-1", "web-1"),
            "fedingress://clusters/eu/uid-1/members/web-1"
        );
        assert_eq!(
            identity_uri("eu", "uid-1", ""),
            "fedingress://clusters/eu/uid-1",
            "an agent before members: the old form"
        );
        let (ca, _) = AgentCa::generate("test").unwrap();
        let signed = ca
            .sign(
                &csr(named("eu")),
                "eu",
                "uid-1",
                "web-1",
                Duration::from_secs(60),
                SystemTime::now(),
            )
            .unwrap();
        let der = pem_der(&signed.pem).unwrap();
        assert!(contains(
            &der,
            b"fedingress://clusters/eu/uid-1/members/web-1"
        ));
    }

    /// CA rotation (docs/security.md): the new CA first, the old one appended. The hub
    /// signs with the first and trusts both, so agents holding certificates from the old
    /// CA still connect and renew.
    #[test]
    fn a_cert_file_may_append_the_previous_ca_for_rotation() {
        let (old, _) = AgentCa::generate("old").unwrap();
        let (new, new_key) = AgentCa::generate("new").unwrap();
        let bundle = format!("{}{}", new.cert_pem(), old.cert_pem());
        let rotated = AgentCa::from_pem(&bundle, &new_key).unwrap();
        assert_eq!(rotated.cert_pem(), bundle, "both are trusted");
        let signed = rotated
            .sign(
                &csr(named("eu")),
                "eu",
                "u",
                "",
                Duration::from_secs(60),
                SystemTime::now(),
            )
            .unwrap();
        let issuer_name = |pem: &str| {
            let der = pem_der(pem).unwrap();
            (contains(&der, b"new"), contains(&der, b"old"))
        };
        assert_eq!(
            issuer_name(&signed.pem),
            (true, false),
            "signed by the new CA"
        );
        // The old CA's key does not fit a bundle that starts with the new CA.
        let (_, old_key) = AgentCa::generate("other").unwrap();
        assert!(AgentCa::from_pem(&bundle, &old_key).is_err());
    }

    #[test]
    fn csr_checks_refuse_what_an_agent_may_not_ask_for() {
        let (ca, _) = AgentCa::generate("test").unwrap();
        let now = SystemTime::now();
        let sign = |params: CertificateParams| {
            ca.sign(&csr(params), "eu", "u", "", Duration::from_secs(60), now)
        };
        assert!(matches!(
            sign(named("us")),
            Err(CsrError::CommonName { ref got, .. }) if got == "us"
        ));
        assert!(matches!(
            sign(CertificateParams::default()),
            Err(CsrError::CommonName { .. })
        ));
        let mut wrong_usage = named("eu");
        wrong_usage.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        assert!(matches!(sign(wrong_usage), Err(CsrError::KeyUsage(_))));
        let mut server = named("eu");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        assert!(matches!(sign(server), Err(CsrError::ExtendedKeyUsage(_))));
        let mut is_ca = named("eu");
        is_ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        assert_eq!(sign(is_ca).unwrap_err(), CsrError::IsCa);
        let mut fine = named("eu");
        fine.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        fine.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        assert!(sign(fine).is_ok());
        assert_eq!(
            ca.sign("garbage", "eu", "u", "", Duration::from_secs(1), now)
                .unwrap_err(),
            CsrError::Parse
        );
    }

    #[test]
    fn the_generated_ca_is_written_once_0600_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (first, cert) = AgentCa::load_or_generate(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(GENERATED_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (second, again) = AgentCa::load_or_generate(dir.path()).unwrap();
        assert_eq!(cert, again);
        assert_eq!(first.cert_pem(), second.cert_pem());
        assert!(!format!("{first:?}").contains("PRIVATE KEY"));
        let (other, other_key) = AgentCa::generate("other").unwrap();
        assert!(AgentCa::from_pem(first.cert_pem(), &other_key).is_err());
        assert!(AgentCa::from_pem(other.cert_pem(), &other_key).is_ok());
    }
}
