//! A small OIDC issuer for tests: discovery document and JWKS over HTTPS on loopback
//! (its own CA), RS256 and ES256 signing keys that can be rotated, and tokens minted
//! with any claims.
//!
//! [`Issuer::start`] binds `127.0.0.1:0`; [`Issuer::url`] is the `iss` and the
//! `--oidc-issuer-url`; [`Issuer::ca_pem`] goes to `--oidc-ca-file`. The server counts
//! JWKS fetches ([`Issuer::jwks_fetches`]) so tests can see refreshes.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

/// A signing key of the issuer.
pub enum SigningKey {
    Rs256(RsaKeyPair),
    Es256(EcdsaKeyPair),
}

impl SigningKey {
    pub fn rs256() -> Self {
        Self::Rs256(RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("RSA key"))
    }

    pub fn es256() -> Self {
        Self::Es256(
            EcdsaKeyPair::generate(&signature::ECDSA_P256_SHA256_FIXED_SIGNING).expect("EC key"),
        )
    }

    fn alg(&self) -> &'static str {
        match self {
            Self::Rs256(_) => "RS256",
            Self::Es256(_) => "ES256",
        }
    }

    fn jwk(&self, kid: &str) -> Value {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        match self {
            Self::Rs256(key) => json!({
                "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                "n": b64(key.public_key().modulus().big_endian_without_leading_zero()),
                "e": b64(key.public_key().exponent().big_endian_without_leading_zero()),
            }),
            Self::Es256(key) => {
                let point = key.public_key().as_ref();
                json!({
                    "kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                    "x": b64(&point[1..33]), "y": b64(&point[33..65]),
                })
            }
        }
    }

    fn sign(&self, message: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match self {
            Self::Rs256(key) => {
                let mut signature = vec![0; key.public_modulus_len()];
                key.sign(&signature::RSA_PKCS1_SHA256, &rng, message, &mut signature)
                    .expect("RSA signature");
                signature
            }
            Self::Es256(key) => key
                .sign(&rng, message)
                .expect("EC signature")
                .as_ref()
                .to_vec(),
        }
    }
}

/// Keys served in the JWKS, by kid.
type Keys = Arc<Mutex<Vec<(String, Arc<SigningKey>)>>>;

/// A running issuer; stops when dropped.
pub struct Issuer {
    pub addr: SocketAddr,
    pub ca_pem: String,
    keys: Keys,
    fetches: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Issuer {
    /// Starts with one RS256 key (`kid` "rsa-1") and one ES256 key ("ec-1").
    pub fn start() -> anyhow::Result<Self> {
        let ca = fedingress_testsupport::tls::Ca::new("fedingress test OIDC CA");
        let (cert_pem, key_pem) = ca.leaf(&["127.0.0.1", "localhost"]);
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())?;
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?,
        );
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let keys: Keys = Arc::new(Mutex::new(vec![
            ("rsa-1".to_string(), Arc::new(SigningKey::rs256())),
            ("ec-1".to_string(), Arc::new(SigningKey::es256())),
        ]));
        let fetches = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("https://{addr}");
        let thread = {
            let (keys, fetches, stop) = (keys.clone(), fetches.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let (config, keys, fetches, url) =
                                (config.clone(), keys.clone(), fetches.clone(), url.clone());
                            std::thread::spawn(move || {
                                serve(stream, config, &keys, &fetches, &url)
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        Ok(Self {
            addr,
            ca_pem: ca.pem,
            keys,
            fetches,
            stop,
            thread: Some(thread),
        })
    }

    /// The issuer URL (`iss`).
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// How often the JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Adds a key to the JWKS (key rotation).
    pub fn add_key(&self, kid: &str, key: SigningKey) {
        self.lock().push((kid.to_string(), Arc::new(key)));
    }

    /// Removes a key from the JWKS.
    pub fn remove_key(&self, kid: &str) {
        self.lock().retain(|(k, _)| k != kid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Arc<SigningKey>)>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A token signed by key `kid` (which may be one not served: signed with a fresh
    /// key then) with `claims`.
    pub fn token(&self, kid: &str, claims: &Value) -> String {
        let key = self
            .lock()
            .iter()
            .find(|(k, _)| k == kid)
            .map(|(_, key)| key.clone())
            .unwrap_or_else(|| Arc::new(SigningKey::rs256()));
        mint(&key, kid, claims)
    }

    /// Claims for `email` valid for five minutes for `audience`.
    pub fn claims(&self, audience: &str, email: &str, groups: &[&str]) -> Value {
        let now = chrono::Utc::now().timestamp();
        json!({
            "iss": self.url(), "aud": audience, "sub": format!("sub-{email}"),
            "email": email, "email_verified": true, "groups": groups,
            "iat": now, "nbf": now - 5, "exp": now + 300,
        })
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A compact JWT signed by `key`.
pub fn mint(key: &SigningKey, kid: &str, claims: &Value) -> String {
    let header = json!({"alg": key.alg(), "kid": kid, "typ": "JWT"});
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = key.sign(signed.as_bytes());
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

fn serve(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    keys: &Keys,
    fetches: &AtomicUsize,
    url: &str,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(connection) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut request_line = String::new();
    {
        let mut reader = BufReader::new(&mut tls);
        if reader.read_line(&mut request_line).is_err() {
            return;
        }
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != "" {
            line.clear();
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or_default();
    let (status, body) = match path {
        "/.well-known/openid-configuration" => (
            "200 OK",
            json!({
                "issuer": url, "jwks_uri": format!("{url}/jwks"),
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }),
        ),
        "/jwks" => {
            fetches.fetch_add(1, Ordering::SeqCst);
            let keys = keys.lock().unwrap_or_else(|e| e.into_inner());
            let jwks: Vec<Value> = keys.iter().map(|(kid, key)| key.jwk(kid)).collect();
            ("200 OK", json!({"keys": jwks}))
        }
        _ => ("404 Not Found", json!({})),
    };
    let body = body.to_string();
    let _ = write!(
        tls,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}
