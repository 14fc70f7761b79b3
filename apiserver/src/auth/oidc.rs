//! OIDC ID tokens as bearer tokens, like kube-apiserver's `--oidc-*` flags.
//!
//! The issuer's discovery document (`{issuer}/.well-known/openid-configuration`) names
//! its `jwks_uri`; keys are fetched from there, cached, and fetched again when a token
//! names an unknown `kid` (at most once per [`OidcSettings::min_key_refresh`]).
//! Signatures: RS256/RS384/RS512 and ES256/ES384, verified with aws-lc-rs (already in
//! the tree for rustls: no new crypto crate). Claims: `iss` must equal the issuer URL,
//! `aud` must contain the client id, `exp` is required and `exp`/`nbf` are checked with
//! [`OidcSettings::clock_skew`] of leeway. With `usernameClaim: email`, a present
//! `email_verified` must be true.
//!
//! The pure part ([`verify`]) takes the keys and `now`; [`OidcAuthenticator`] adds the
//! HTTP fetching and the cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_lc_rs::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::Value;

use super::User;

/// What the operator configured (checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcSettings {
    /// `https://...`, exactly as the tokens' `iss`.
    pub issuer_url: String,
    pub client_id: String,
    /// Claim holding the user name (default `sub`).
    pub username_claim: String,
    /// Prepended to user names. kube's default: `{issuer}#` unless the claim is `email`.
    pub username_prefix: String,
    /// Claim holding the groups (string or list), if any.
    pub groups_claim: Option<String>,
    pub groups_prefix: String,
    /// PEM CA bundle that signs the issuer's certificate (else the system's roots).
    pub ca_file: Option<PathBuf>,
    /// Leeway on `exp` and `nbf`.
    pub clock_skew: Duration,
    /// Least time between two key fetches caused by unknown `kid`s.
    pub min_key_refresh: Duration,
}

impl OidcSettings {
    /// kube's default username prefix for `claim` when none is given; `-` means none.
    pub fn default_username_prefix(issuer: &str, claim: &str, given: Option<&str>) -> String {
        match given {
            Some("-") => String::new(),
            Some(prefix) => prefix.to_string(),
            None if claim == "email" => String::new(),
            None => format!("{issuer}#"),
        }
    }
}

/// Why a token was refused (logged at debug; the client sees a plain 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("not a JWT")]
    Malformed,
    #[error("issuer {0:?} is not the configured one")]
    OtherIssuer(String),
    #[error("unsupported signing algorithm {0:?}")]
    Algorithm(String),
    #[error("no key with kid {0:?}")]
    UnknownKey(String),
    #[error("bad signature")]
    Signature,
    #[error("token expired")]
    Expired,
    #[error("token not valid yet (nbf)")]
    NotYetValid,
    #[error("token has no exp")]
    NoExpiry,
    #[error("audience does not contain the client id")]
    Audience,
    #[error("claim {0:?} missing or not a string")]
    Claim(String),
    #[error("email not verified")]
    EmailNotVerified,
}

/// One verification key from the JWKS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// Uncompressed point (0x04 || x || y).
    Ec {
        curve: String,
        point: Vec<u8>,
    },
}

/// Keys by `kid` (`""` for keys without one).
pub type KeySet = Vec<(String, Key)>;

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: String,
    #[serde(default, rename = "use")]
    use_: Option<String>,
    n: Option<String>,
    e: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// Parses a JWKS document; keys it cannot use (other types, `use: enc`) are skipped.
pub fn parse_jwks(body: &[u8]) -> Result<KeySet, String> {
    #[derive(Deserialize)]
    struct Jwks {
        keys: Vec<Jwk>,
    }
    let jwks: Jwks = serde_json::from_slice(body).map_err(|e| format!("invalid JWKS: {e}"))?;
    let b64 = |v: &Option<String>| v.as_deref().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
    let mut keys = Vec::new();
    for jwk in jwks.keys {
        if jwk.use_.as_deref().is_some_and(|u| u != "sig") {
            continue;
        }
        let key = match jwk.kty.as_str() {
            "RSA" => match (b64(&jwk.n), b64(&jwk.e)) {
                (Some(n), Some(e)) => Key::Rsa { n, e },
                _ => continue,
            },
            "EC" => match (jwk.crv.clone(), b64(&jwk.x), b64(&jwk.y)) {
                (Some(curve), Some(x), Some(y)) => {
                    let mut point = vec![4u8];
                    point.extend(x);
                    point.extend(y);
                    Key::Ec { curve, point }
                }
                _ => continue,
            },
            _ => continue,
        };
        keys.push((jwk.kid, key));
    }
    Ok(keys)
}

/// The header, payload and signed part of a compact JWT.
pub struct Parsed {
    pub alg: String,
    pub kid: String,
    pub claims: serde_json::Map<String, Value>,
    signed: Vec<u8>,
    signature: Vec<u8>,
}

/// Splits and decodes a JWT without verifying anything.
pub fn parse(token: &str) -> Result<Parsed, TokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|_| TokenError::Malformed);
    let header: Value =
        serde_json::from_slice(&decode(header)?).map_err(|_| TokenError::Malformed)?;
    let claims: Value =
        serde_json::from_slice(&decode(payload)?).map_err(|_| TokenError::Malformed)?;
    let Value::Object(claims) = claims else {
        return Err(TokenError::Malformed);
    };
    let field = |name: &str| {
        header
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(Parsed {
        alg: field("alg"),
        kid: field("kid"),
        claims,
        signed: token.as_bytes()[..token.rfind('.').unwrap_or_default()].to_vec(),
        signature: decode(signature)?,
    })
}

fn verify_signature(parsed: &Parsed, key: &Key) -> bool {
    match (parsed.alg.as_str(), key) {
        ("RS256" | "RS384" | "RS512", Key::Rsa { n, e }) => {
            let params = match parsed.alg.as_str() {
                "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                _ => &signature::RSA_PKCS1_2048_8192_SHA512,
            };
            RsaPublicKeyComponents { n, e }
                .verify(params, &parsed.signed, &parsed.signature)
                .is_ok()
        }
        ("ES256", Key::Ec { curve, point }) if curve == "P-256" => {
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(&parsed.signed, &parsed.signature)
                .is_ok()
        }
        ("ES384", Key::Ec { curve, point }) if curve == "P-384" => {
            UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_FIXED, point)
                .verify(&parsed.signed, &parsed.signature)
                .is_ok()
        }
        _ => false,
    }
}

/// Verifies a parsed token against `keys` at `now` (Unix seconds) and maps it to a user.
pub fn verify(
    settings: &OidcSettings,
    parsed: &Parsed,
    keys: &KeySet,
    now: i64,
) -> Result<User, TokenError> {
    let claims = &parsed.claims;
    let iss = claims
        .get("iss")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if iss != settings.issuer_url {
        return Err(TokenError::OtherIssuer(iss.to_string()));
    }
    if !matches!(
        parsed.alg.as_str(),
        "RS256" | "RS384" | "RS512" | "ES256" | "ES384"
    ) {
        return Err(TokenError::Algorithm(parsed.alg.clone()));
    }
    let candidates: Vec<&Key> = keys
        .iter()
        .filter(|(kid, _)| parsed.kid.is_empty() || *kid == parsed.kid)
        .map(|(_, key)| key)
        .collect();
    if candidates.is_empty() {
        return Err(TokenError::UnknownKey(parsed.kid.clone()));
    }
    if !candidates.iter().any(|key| verify_signature(parsed, key)) {
        return Err(TokenError::Signature);
    }
    let skew = settings.clock_skew.as_secs() as i64;
    let number = |name: &str| claims.get(name).and_then(Value::as_f64).map(|v| v as i64);
    match number("exp") {
        None => return Err(TokenError::NoExpiry),
        Some(exp) if now > exp.saturating_add(skew) => return Err(TokenError::Expired),
        Some(_) => {}
    }
    if number("nbf").is_some_and(|nbf| now.saturating_add(skew) < nbf) {
        return Err(TokenError::NotYetValid);
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => *aud == settings.client_id,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(&settings.client_id)),
        _ => false,
    };
    if !audience_ok {
        return Err(TokenError::Audience);
    }
    let username = claims
        .get(&settings.username_claim)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| TokenError::Claim(settings.username_claim.clone()))?;
    if settings.username_claim == "email"
        && let Some(verified) = claims.get("email_verified")
        && verified != &Value::Bool(true)
    {
        return Err(TokenError::EmailNotVerified);
    }
    let groups = match settings.groups_claim.as_deref().and_then(|c| claims.get(c)) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(group)) => vec![group.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|g| g.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| TokenError::Claim(settings.groups_claim.clone().unwrap_or_default()))?,
        Some(_) => {
            return Err(TokenError::Claim(
                settings.groups_claim.clone().unwrap_or_default(),
            ));
        }
    };
    Ok(User {
        name: format!("{}{username}", settings.username_prefix),
        uid: String::new(),
        groups: groups
            .into_iter()
            .map(|g| format!("{}{g}", settings.groups_prefix))
            .collect(),
    })
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("reading --oidc-ca-file {path}")]
    CaFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--oidc-ca-file {path}: {problem}")]
    CaPem { path: String, problem: String },
    #[error("building the OIDC HTTP client: {0}")]
    Client(String),
}

/// What the key fetches remember (the keys themselves are in
/// [`OidcAuthenticator::keys`]).
struct Cache {
    jwks_uri: Option<String>,
    last_fetch: Option<Instant>,
}

/// Validates OIDC tokens against the configured issuer, fetching its keys.
pub struct OidcAuthenticator {
    settings: OidcSettings,
    http: reqwest::Client,
    /// Held across a fetch, so that concurrent unknown `kid`s cause one fetch.
    cache: tokio::sync::Mutex<Cache>,
    /// The keys last fetched, read without a lock.
    keys: arc_swap::ArcSwap<KeySet>,
    counters: Counters,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    rejected: AtomicU64,
    fetches: AtomicU64,
    fetch_errors: AtomicU64,
    refresh_skipped: AtomicU64,
}

impl std::fmt::Debug for OidcAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcAuthenticator")
            .field("issuer_url", &self.settings.issuer_url)
            .field("client_id", &self.settings.client_id)
            .finish_non_exhaustive()
    }
}

impl OidcAuthenticator {
    pub fn new(settings: OidcSettings) -> Result<Arc<Self>, SetupError> {
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &settings.ca_file {
            let shown = path.display().to_string();
            let pem = std::fs::read(path).map_err(|source| SetupError::CaFile {
                path: shown.clone(),
                source,
            })?;
            let certificates =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| SetupError::CaPem {
                    path: shown.clone(),
                    problem: e.to_string(),
                })?;
            if certificates.is_empty() {
                return Err(SetupError::CaPem {
                    path: shown,
                    problem: "no PEM certificate in it".into(),
                });
            }
            builder = builder.tls_certs_only(certificates);
        }
        let http = builder
            .build()
            .map_err(|e| SetupError::Client(e.to_string()))?;
        Ok(Arc::new(Self {
            settings,
            http,
            cache: tokio::sync::Mutex::new(Cache {
                jwks_uri: None,
                last_fetch: None,
            }),
            keys: arc_swap::ArcSwap::from_pointee(Vec::new()),
            counters: Counters::default(),
        }))
    }

    pub fn issuer(&self) -> &str {
        &self.settings.issuer_url
    }

    /// The user behind `token`; `Ok(None)` when it is not a token of this issuer.
    pub async fn authenticate(&self, token: &str) -> Result<Option<User>, TokenError> {
        let result = self.verify_token(token).await;
        let counter = match &result {
            Ok(Some(_)) => &self.counters.accepted,
            Ok(None) => return result,
            Err(_) => &self.counters.rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn verify_token(&self, token: &str) -> Result<Option<User>, TokenError> {
        let parsed = match parse(token) {
            Ok(parsed) => parsed,
            Err(_) => return Ok(None),
        };
        let iss = parsed.claims.get("iss").and_then(Value::as_str);
        if iss != Some(self.settings.issuer_url.as_str()) {
            return Ok(None);
        }
        let now = chrono::Utc::now().timestamp();
        let keys = self.keys.load_full();
        match verify(&self.settings, &parsed, &keys, now) {
            Err(TokenError::UnknownKey(_)) => {}
            other => return other.map(Some),
        }
        // An unknown kid: the issuer may have rotated its keys.
        let keys = self.refresh_keys().await;
        verify(&self.settings, &parsed, &keys, now).map(Some)
    }

    /// Fetches the keys again unless that happened less than `min_key_refresh` ago.
    async fn refresh_keys(&self) -> Arc<KeySet> {
        let mut cache = self.cache.lock().await;
        if cache
            .last_fetch
            .is_some_and(|at| at.elapsed() < self.settings.min_key_refresh)
        {
            self.counters
                .refresh_skipped
                .fetch_add(1, Ordering::Relaxed);
            return self.keys.load_full();
        }
        cache.last_fetch = Some(Instant::now());
        self.counters.fetches.fetch_add(1, Ordering::Relaxed);
        match self.fetch_keys(&mut cache.jwks_uri).await {
            Ok(keys) => {
                tracing::info!(issuer = %self.settings.issuer_url, keys = keys.len(), "OIDC keys fetched");
                self.keys.store(Arc::new(keys));
            }
            Err(error) => {
                self.counters.fetch_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(issuer = %self.settings.issuer_url, %error, "fetching OIDC keys failed");
            }
        }
        self.keys.load_full()
    }

    async fn fetch_keys(&self, jwks_uri: &mut Option<String>) -> Result<KeySet, String> {
        if jwks_uri.is_none() {
            let url = format!(
                "{}/.well-known/openid-configuration",
                self.settings.issuer_url.trim_end_matches('/')
            );
            let document: Value = self.get_json(&url).await?;
            let issuer = document.get("issuer").and_then(Value::as_str);
            if issuer != Some(self.settings.issuer_url.as_str()) {
                return Err(format!(
                    "discovery document names issuer {issuer:?}, not {:?}",
                    self.settings.issuer_url
                ));
            }
            let uri = document
                .get("jwks_uri")
                .and_then(Value::as_str)
                .ok_or("discovery document has no jwks_uri")?;
            *jwks_uri = Some(uri.to_string());
        }
        let uri = jwks_uri.clone().unwrap_or_default();
        parse_jwks(&self.get(&uri).await?)
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        serde_json::from_slice(&self.get(url).await?).map_err(|e| format!("GET {url}: {e}"))
    }

    /// The body of a successful GET.
    async fn get(&self, url: &str) -> Result<bytes::Bytes, String> {
        self.http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("GET {url}: {e}"))?
            .bytes()
            .await
            .map_err(|e| format!("GET {url}: {e}"))
    }

    /// Appends the OIDC metrics in the Prometheus text format.
    pub fn write_prometheus(&self, out: &mut String) {
        use std::fmt::Write;
        let c = &self.counters;
        let _ = writeln!(
            out,
            "# HELP fedingress_oidc_tokens_total OIDC ID tokens of the configured issuer, by result.\n# TYPE fedingress_oidc_tokens_total counter"
        );
        for (result, counter) in [("accepted", &c.accepted), ("rejected", &c.rejected)] {
            let _ = writeln!(
                out,
                "fedingress_oidc_tokens_total{{result=\"{result}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP fedingress_oidc_key_fetches_total Fetches of the issuer's keys (start, unknown kid), by result.\n# TYPE fedingress_oidc_key_fetches_total counter"
        );
        let fetches = c.fetches.load(Ordering::Relaxed);
        let errors = c.fetch_errors.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "fedingress_oidc_key_fetches_total{{result=\"ok\"}} {}\nfedingress_oidc_key_fetches_total{{result=\"error\"}} {errors}",
            fetches.saturating_sub(errors)
        );
        let _ = writeln!(
            out,
            "# HELP fedingress_oidc_key_refreshes_skipped_total Unknown kids not refetched because of oidc.minKeyRefreshSeconds.\n# TYPE fedingress_oidc_key_refreshes_skipped_total counter\nfedingress_oidc_key_refreshes_skipped_total {}",
            c.refresh_skipped.load(Ordering::Relaxed)
        );
    }

    /// Fetches the keys once at start (failures are only logged: tokens retry).
    pub async fn warm_up(self: Arc<Self>) {
        self.refresh_keys().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair};

    fn settings() -> OidcSettings {
        OidcSettings {
            issuer_url: "https://issuer.test".into(),
            client_id: "fedingress".into(),
            username_claim: "email".into(),
            username_prefix: String::new(),
            groups_claim: Some("groups".into()),
            groups_prefix: "oidc:".into(),
            ca_file: None,
            clock_skew: Duration::from_secs(30),
            min_key_refresh: Duration::from_secs(10),
        }
    }

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn token(alg: &str, kid: &str, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
        let header = serde_json::json!({"alg": alg, "kid": kid, "typ": "JWT"});
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = sign(signed.as_bytes());
        format!("{signed}.{}", b64(&signature))
    }

    fn claims(now: i64) -> Value {
        serde_json::json!({
            "iss": "https://issuer.test", "aud": ["other", "fedingress"], "sub": "123",
            "email": "ann@example.com", "email_verified": true, "groups": ["dev", "ops"],
            "exp": now + 300, "nbf": now - 10, "iat": now - 10,
        })
    }

    #[test]
    fn rs256_and_es256_tokens_verify_and_claims_are_checked() {
        let rng = SystemRandom::new();
        let rsa = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let ec = EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let rsa_sign = |msg: &[u8]| {
            let mut sig = vec![0; rsa.public_modulus_len()];
            rsa.sign(&signature::RSA_PKCS1_SHA256, &rng, msg, &mut sig)
                .unwrap();
            sig
        };
        let ec_sign = |msg: &[u8]| ec.sign(&rng, msg).unwrap().as_ref().to_vec();
        let keys = vec![
            (
                "r1".to_string(),
                Key::Rsa {
                    n: rsa
                        .public_key()
                        .modulus()
                        .big_endian_without_leading_zero()
                        .to_vec(),
                    e: rsa
                        .public_key()
                        .exponent()
                        .big_endian_without_leading_zero()
                        .to_vec(),
                },
            ),
            (
                "e1".to_string(),
                Key::Ec {
                    curve: "P-256".into(),
                    point: ec.public_key().as_ref().to_vec(),
                },
            ),
        ];
        let s = settings();
        let now = 1_800_000_000;
        let check = |t: &str| verify(&s, &parse(t).unwrap(), &keys, now);
        let user = check(&token("RS256", "r1", &claims(now), rsa_sign)).unwrap();
        assert_eq!(user.name, "ann@example.com");
        assert_eq!(user.groups, vec!["oidc:dev", "oidc:ops"]);
        assert!(check(&token("ES256", "e1", &claims(now), ec_sign)).is_ok());
        // Signed by the EC key but naming the RSA key id.
        assert_eq!(
            check(&token("ES256", "r1", &claims(now), ec_sign)),
            Err(TokenError::Signature)
        );
        assert_eq!(
            check(&token("RS256", "nope", &claims(now), rsa_sign)),
            Err(TokenError::UnknownKey("nope".into()))
        );
        let mut c = claims(now);
        c["exp"] = (now - 31).into();
        assert_eq!(
            check(&token("RS256", "r1", &c, rsa_sign)),
            Err(TokenError::Expired)
        );
        c["exp"] = (now - 29).into();
        assert!(
            check(&token("RS256", "r1", &c, rsa_sign)).is_ok(),
            "within the leeway"
        );
        let mut c = claims(now);
        c["nbf"] = (now + 60).into();
        assert_eq!(
            check(&token("RS256", "r1", &c, rsa_sign)),
            Err(TokenError::NotYetValid)
        );
        let mut c = claims(now);
        c["aud"] = "someone-else".into();
        assert_eq!(
            check(&token("RS256", "r1", &c, rsa_sign)),
            Err(TokenError::Audience)
        );
        let mut c = claims(now);
        c["iss"] = "https://evil.test".into();
        assert!(matches!(
            check(&token("RS256", "r1", &c, rsa_sign)),
            Err(TokenError::OtherIssuer(_))
        ));
        let mut c = claims(now);
        c["email_verified"] = false.into();
        assert_eq!(
            check(&token("RS256", "r1", &c, rsa_sign)),
            Err(TokenError::EmailNotVerified)
        );
        let mut c = claims(now);
        c.as_object_mut().unwrap().remove("exp");
        assert_eq!(
            check(&token("RS256", "r1", &c, rsa_sign)),
            Err(TokenError::NoExpiry)
        );
        // alg none is refused before any key is looked at.
        let unsigned = token("none", "r1", &claims(now), |_| Vec::new());
        assert_eq!(check(&unsigned), Err(TokenError::Algorithm("none".into())));
        // A tampered payload fails the signature.
        let good = token("RS256", "r1", &claims(now), rsa_sign);
        let mut parts: Vec<String> = good.split('.').map(String::from).collect();
        let mut c = claims(now);
        c["email"] = "root@example.com".into();
        parts[1] = b64(c.to_string().as_bytes());
        assert_eq!(check(&parts.join(".")), Err(TokenError::Signature));
    }

    #[test]
    fn username_prefix_defaults_like_kube() {
        let d = OidcSettings::default_username_prefix;
        assert_eq!(d("https://i", "sub", None), "https://i#");
        assert_eq!(d("https://i", "email", None), "");
        assert_eq!(d("https://i", "sub", Some("-")), "");
        assert_eq!(d("https://i", "sub", Some("oidc:")), "oidc:");
    }

    #[test]
    fn jwks_parsing_skips_unusable_keys() {
        let body = serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "a", "n": "AQAB", "e": "AQAB"},
            {"kty": "EC", "kid": "b", "crv": "P-256", "x": "AQ", "y": "Ag"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
            {"kty": "oct", "kid": "c", "k": "AQ"},
        ]});
        let keys = parse_jwks(body.to_string().as_bytes()).unwrap();
        assert_eq!(
            keys.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert!(parse_jwks(b"{}").is_err());
    }
}
