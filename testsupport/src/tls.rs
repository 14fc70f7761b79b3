//! Test PKI and a TLS peer (feature `tls`): a CA that signs leaves for any names
//! ([`Ca`]) and a TLS echo backend with its own certificate ([`TlsEcho`]), for the tests
//! of TLS termination and passthrough.
//!
//! Nothing here is for a product: keys are generated fresh for each CA, never stored.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA that signs leaf certificates; its certificate (PEM) is [`Ca::pem`].
pub struct Ca {
    /// The CA's self-signed certificate, PEM.
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    /// A new CA (a fresh key) with the common name `name`.
    ///
    /// # Panics
    ///
    /// When rcgen cannot generate the key or the certificate.
    pub fn new(name: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A leaf for `names` (a name that parses as an IP address is an IP address SAN, any
    /// other a DNS name): (certificate PEM, key PEM).
    ///
    /// # Panics
    ///
    /// When a name is not a valid SAN, or rcgen cannot sign.
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
        self.sign(rcgen::CertificateParams::new(names).expect("leaf params"))
    }

    /// A leaf from `params` (subject, SANs, key usages of the caller's choosing), signed
    /// with a fresh key: (certificate PEM, key PEM).
    ///
    /// # Panics
    ///
    /// When rcgen cannot generate the key or sign.
    pub fn sign(&self, params: rcgen::CertificateParams) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        (cert.pem(), key.serialize_pem())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A TLS server with its own certificate that upper-cases what it receives, on a thread
/// of its own (so sync and async tests alike can start and stop it); stops when dropped.
pub struct TlsEcho {
    /// The address it listens on (the kernel's pick when started on port 0).
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsEcho {
    /// Listens on `addr` (port 0: any free port) with the certificate chain and key
    /// given as PEM.
    ///
    /// # Errors
    ///
    /// When the PEM does not parse, rustls refuses the pair, or `addr` cannot be bound.
    pub fn start(addr: SocketAddr, cert_pem: &str, key_pem: &str) -> io::Result<Self> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(io::Error::other)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(io::Error::other)?;
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .map_err(io::Error::other)?
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .map_err(io::Error::other)?,
        );
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let config = Arc::clone(&config);
                        std::thread::spawn(move || echo(stream, config));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for TlsEcho {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn echo(stream: TcpStream, config: Arc<rustls::ServerConfig>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(connection) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut buffer = [0u8; 4096];
    while let Ok(n) = tls.read(&mut buffer) {
        if n == 0 || tls.write_all(&buffer[..n].to_ascii_uppercase()).is_err() {
            return;
        }
        let _ = tls.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};

    use super::{Ca, TlsEcho, provider};

    #[test]
    fn the_echo_answers_in_upper_case_with_a_leaf_of_the_ca() {
        let ca = Ca::new("testsupport CA");
        let (cert, key) = ca.leaf(&["echo.example.com", "127.0.0.1"]);
        let echo = TlsEcho::start(([127, 0, 0, 1], 0).into(), &cert, &key).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        for name in ["echo.example.com", "127.0.0.1"] {
            let name = ServerName::try_from(name.to_string()).unwrap();
            let connection = rustls::ClientConnection::new(Arc::new(config.clone()), name).unwrap();
            let stream = TcpStream::connect(echo.addr).unwrap();
            let mut tls = rustls::StreamOwned::new(connection, stream);
            tls.write_all(b"hello").unwrap();
            let mut answer = [0u8; 5];
            tls.read_exact(&mut answer).unwrap();
            assert_eq!(&answer, b"HELLO");
        }
    }
}
