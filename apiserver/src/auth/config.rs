//! Flags and config-file keys of authentication (OIDC) and the audit log, checked
//! strictly (a bad value is a config error: exit 64 with one line).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::oidc::OidcSettings;

/// Default of `--audit-log-batch-buffer-size` (kube's default too).
pub const DEFAULT_AUDIT_BUFFER: usize = 10_000;
const DEFAULT_CLOCK_SKEW_SECONDS: u64 = 30;
const DEFAULT_MIN_KEY_REFRESH_SECONDS: u64 = 10;

/// The auth flags, flattened into the server's command line.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct AuthFlags {
    /// OIDC issuer URL (https): its ID tokens are accepted as bearer tokens beside the
    /// token file (config `oidc.issuerUrl`). Needs --oidc-client-id.
    #[arg(long, value_name = "URL")]
    pub oidc_issuer_url: Option<String>,
    /// The client id the tokens must carry in `aud` (config `oidc.clientId`).
    #[arg(long, value_name = "ID")]
    pub oidc_client_id: Option<String>,
    /// The claim naming the user (config `oidc.usernameClaim`, default `sub`).
    #[arg(long, value_name = "CLAIM")]
    pub oidc_username_claim: Option<String>,
    /// Prepended to OIDC user names; `-` for none (config `oidc.usernamePrefix`;
    /// default `<issuer>#`, or none when the claim is `email`).
    #[arg(long, value_name = "PREFIX")]
    pub oidc_username_prefix: Option<String>,
    /// The claim listing the user's groups (config `oidc.groupsClaim`; default none).
    #[arg(long, value_name = "CLAIM")]
    pub oidc_groups_claim: Option<String>,
    /// Prepended to OIDC group names (config `oidc.groupsPrefix`; default none).
    #[arg(long, value_name = "PREFIX")]
    pub oidc_groups_prefix: Option<String>,
    /// PEM CA bundle that signs the issuer's certificate (config `oidc.caFile`;
    /// default: the system's roots).
    #[arg(long, value_name = "FILE")]
    pub oidc_ca_file: Option<PathBuf>,
    /// Audit log of writes as JSON lines (`-` for stdout; config `audit.logPath`).
    #[arg(long, value_name = "FILE")]
    pub audit_log_path: Option<PathBuf>,
    /// Audit events that may wait for the writer; more are dropped and counted
    /// (config `audit.batchBufferSize`, default 10000).
    #[arg(long, value_name = "N")]
    pub audit_log_batch_buffer_size: Option<usize>,
}

/// `oidc:` in the config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcFile {
    pub issuer_url: Option<String>,
    pub client_id: Option<String>,
    pub username_claim: Option<String>,
    pub username_prefix: Option<String>,
    pub groups_claim: Option<String>,
    pub groups_prefix: Option<String>,
    pub ca_file: Option<PathBuf>,
    /// Leeway on `exp`/`nbf` (default 30).
    pub clock_skew_seconds: Option<u64>,
    /// Least time between key fetches caused by unknown key ids (default 10).
    pub min_key_refresh_seconds: Option<u64>,
}

/// `audit:` in the config file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditFile {
    pub log_path: Option<PathBuf>,
    pub batch_buffer_size: Option<usize>,
}

/// Where audit events go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSettings {
    pub path: PathBuf,
    pub batch_buffer_size: usize,
}

/// Flags over the file: the OIDC settings, if OIDC is configured.
pub fn oidc_settings(flags: &AuthFlags, file: &OidcFile) -> Result<Option<OidcSettings>, String> {
    let pick = |flag: &Option<String>, key: &Option<String>| flag.clone().or_else(|| key.clone());
    let issuer = pick(&flags.oidc_issuer_url, &file.issuer_url);
    let client_id = pick(&flags.oidc_client_id, &file.client_id);
    let (issuer, client_id) = match (issuer, client_id) {
        (None, None) => {
            let stray = flags.oidc_username_claim.is_some()
                || flags.oidc_groups_claim.is_some()
                || flags.oidc_ca_file.is_some()
                || file.username_claim.is_some()
                || file.groups_claim.is_some()
                || file.ca_file.is_some();
            if stray {
                return Err("--oidc-* options need --oidc-issuer-url and --oidc-client-id".into());
            }
            return Ok(None);
        }
        (Some(_), None) => return Err("--oidc-issuer-url needs --oidc-client-id".into()),
        (None, Some(_)) => return Err("--oidc-client-id needs --oidc-issuer-url".into()),
        (Some(issuer), Some(client_id)) => (issuer, client_id),
    };
    let parsed = url_parts(&issuer)
        .ok_or_else(|| format!("--oidc-issuer-url {issuer:?} is not an https:// URL"))?;
    if parsed.contains('?') || parsed.contains('#') {
        return Err(format!(
            "--oidc-issuer-url {issuer:?} must not have a query or fragment"
        ));
    }
    if client_id.trim().is_empty() {
        return Err("--oidc-client-id must not be empty".into());
    }
    let username_claim =
        pick(&flags.oidc_username_claim, &file.username_claim).unwrap_or_else(|| "sub".into());
    if username_claim.is_empty() {
        return Err("--oidc-username-claim must not be empty".into());
    }
    let prefix = pick(&flags.oidc_username_prefix, &file.username_prefix);
    let groups_claim = pick(&flags.oidc_groups_claim, &file.groups_claim).filter(|c| !c.is_empty());
    let groups_prefix = pick(&flags.oidc_groups_prefix, &file.groups_prefix).unwrap_or_default();
    if groups_claim.is_none() && !groups_prefix.is_empty() {
        return Err("--oidc-groups-prefix needs --oidc-groups-claim".into());
    }
    let ca_file = flags.oidc_ca_file.clone().or_else(|| file.ca_file.clone());
    if let Some(path) = &ca_file
        && !path.is_file()
    {
        return Err(format!("--oidc-ca-file {}: no such file", path.display()));
    }
    let clock_skew = file
        .clock_skew_seconds
        .unwrap_or(DEFAULT_CLOCK_SKEW_SECONDS);
    if clock_skew > 300 {
        return Err("oidc.clockSkewSeconds must be at most 300".into());
    }
    let min_key_refresh = file
        .min_key_refresh_seconds
        .unwrap_or(DEFAULT_MIN_KEY_REFRESH_SECONDS);
    if min_key_refresh == 0 {
        return Err("oidc.minKeyRefreshSeconds must be positive".into());
    }
    Ok(Some(OidcSettings {
        username_prefix: OidcSettings::default_username_prefix(
            &issuer,
            &username_claim,
            prefix.as_deref(),
        ),
        issuer_url: issuer,
        client_id,
        username_claim,
        groups_claim,
        groups_prefix,
        ca_file,
        clock_skew: Duration::from_secs(clock_skew),
        min_key_refresh: Duration::from_secs(min_key_refresh),
    }))
}

/// The part after `https://` when the URL has a host.
fn url_parts(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://")?;
    let host = rest.split('/').next()?;
    (!host.is_empty()).then_some(rest)
}

/// Flags over the file: where the audit log goes, if anywhere.
pub fn audit_settings(
    flags: &AuthFlags,
    file: &AuditFile,
) -> Result<Option<AuditSettings>, String> {
    let size = flags
        .audit_log_batch_buffer_size
        .or(file.batch_buffer_size)
        .unwrap_or(DEFAULT_AUDIT_BUFFER);
    if size == 0 {
        return Err("--audit-log-batch-buffer-size must be positive".into());
    }
    let Some(path) = flags
        .audit_log_path
        .clone()
        .or_else(|| file.log_path.clone())
    else {
        return Ok(None);
    };
    if path.as_os_str().is_empty() {
        return Err("--audit-log-path must not be empty".into());
    }
    if path != std::path::Path::new("-")
        && let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.is_dir()
    {
        return Err(format!(
            "--audit-log-path {}: directory {} does not exist",
            path.display(),
            parent.display()
        ));
    }
    Ok(Some(AuditSettings {
        path,
        batch_buffer_size: size,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(issuer: Option<&str>, client: Option<&str>) -> AuthFlags {
        AuthFlags {
            oidc_issuer_url: issuer.map(String::from),
            oidc_client_id: client.map(String::from),
            ..AuthFlags::default()
        }
    }

    #[test]
    fn oidc_needs_both_and_https() {
        let file = OidcFile::default();
        assert_eq!(oidc_settings(&flags(None, None), &file), Ok(None));
        assert!(oidc_settings(&flags(Some("https://i"), None), &file).is_err());
        assert!(oidc_settings(&flags(None, Some("c")), &file).is_err());
        let err = oidc_settings(&flags(Some("http://i"), Some("c")), &file).unwrap_err();
        assert!(err.contains("https"), "{err}");
        let s = oidc_settings(&flags(Some("https://i/x"), Some("c")), &file)
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.username_claim.as_str(), s.username_prefix.as_str()),
            ("sub", "https://i/x#")
        );
        let mut f = flags(Some("https://i"), Some("c"));
        f.oidc_groups_prefix = Some("g:".into());
        assert!(
            oidc_settings(&f, &file).is_err(),
            "groups prefix without claim"
        );
        let mut f = flags(None, None);
        f.oidc_groups_claim = Some("groups".into());
        assert!(oidc_settings(&f, &file).is_err(), "stray oidc flag");
    }

    #[test]
    fn audit_path_checks() {
        let mut f = AuthFlags::default();
        assert_eq!(audit_settings(&f, &AuditFile::default()), Ok(None));
        f.audit_log_path = Some("/nonexistent-dir/audit.log".into());
        assert!(audit_settings(&f, &AuditFile::default()).is_err());
        f.audit_log_path = Some("-".into());
        assert_eq!(
            audit_settings(&f, &AuditFile::default())
                .unwrap()
                .unwrap()
                .batch_buffer_size,
            DEFAULT_AUDIT_BUFFER
        );
        f.audit_log_batch_buffer_size = Some(0);
        assert!(audit_settings(&f, &AuditFile::default()).is_err());
    }
}
