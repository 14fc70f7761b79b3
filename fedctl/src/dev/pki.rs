//! Certificates for `fedctl dev up`'s agent gateway: a dev CA and a serving certificate
//! for every replica's address (the agents verify the gateway with the CA), and the
//! agent CA that signs the agents' client certificates (the same files for every
//! replica, as several replicas need). Written to `<state dir>/pki/`, keys 0600.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

use crate::files::write_private;

/// The files `dev up` hands to the apiserver(s) and the agents.
pub struct DevPki {
    /// CA that signed the gateway's certificate: the agents' `hub.caFile`.
    pub ca: PathBuf,
    pub gateway_cert: PathBuf,
    pub gateway_key: PathBuf,
    /// `agentCa` of every replica.
    pub agent_ca_cert: PathBuf,
    pub agent_ca_key: PathBuf,
}

fn ca(name: &str) -> anyhow::Result<(String, Issuer<'static, KeyPair>, String)> {
    let key = KeyPair::generate().context("generating a CA key")?;
    let key_pem = key.serialize_pem();
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params
        .self_signed(&key)
        .context("signing a CA certificate")?;
    Ok((cert.pem(), Issuer::new(params, key), key_pem))
}

/// Generates the files into `dir/pki`, the gateway's certificate naming `ips` (and
/// 127.0.0.1 and localhost).
pub fn generate(dir: &Path, ips: &[String]) -> anyhow::Result<DevPki> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).with_context(|| format!("creating {}", pki.display()))?;
    let files = DevPki {
        ca: pki.join("ca.crt"),
        gateway_cert: pki.join("gateway.crt"),
        gateway_key: pki.join("gateway.key"),
        agent_ca_cert: pki.join("agent-ca.crt"),
        agent_ca_key: pki.join("agent-ca.key"),
    };
    let (ca_pem, issuer, _) = ca("fedingress dev CA")?;
    let key = KeyPair::generate().context("generating the gateway key")?;
    let mut params = CertificateParams::new(vec!["localhost".to_string()])
        .context("the gateway certificate's names")?;
    let mut addresses: Vec<String> = ips.to_vec();
    addresses.push("127.0.0.1".into());
    addresses.sort();
    addresses.dedup();
    for ip in &addresses {
        let ip = ip
            .parse()
            .with_context(|| format!("{ip:?} is not an IP address"))?;
        params.subject_alt_names.push(SanType::IpAddress(ip));
    }
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the gateway certificate")?;
    let (agent_ca_pem, _, agent_ca_key) = ca("fedingress dev agent CA")?;
    let write = |path: &Path, text: &str| {
        write_private(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))
    };
    write(&files.ca, &ca_pem)?;
    write(&files.gateway_cert, &cert.pem())?;
    write(&files.gateway_key, &key.serialize_pem())?;
    write(&files.agent_ca_cert, &agent_ca_pem)?;
    write(&files.agent_ca_key, &agent_ca_key)?;
    Ok(files)
}
