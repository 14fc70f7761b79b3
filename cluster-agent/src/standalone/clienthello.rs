//! Reads a TLS ClientHello off a connection without decrypting anything, for the SNI
//! host name that routes TLS connections (passthrough and termination alike).
//!
//! [`read`] buffers whole TLS records until the handshake message is complete (it may
//! span several records), then [`parse`] walks the ClientHello to the `server_name`
//! extension (RFC 6066). The bytes read are returned untouched so that they can be
//! replayed to the TLS acceptor or to a passthrough backend.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest ClientHello accepted (post-quantum key shares make them ~1.5-2 KiB; the
/// record layer allows 16 KiB per record).
pub(crate) const MAX_HELLO: usize = 64 * 1024;

const RECORD_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST: u8 = 0;

/// What the first flight of a client says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The SNI host name, lower-cased, without a trailing dot; `None` when the client
    /// sent none (e.g. connecting to an IP address).
    pub sni: Option<String>,
}

/// Why the first bytes are not a usable ClientHello.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HelloError {
    #[error("reading the ClientHello")]
    Io(#[from] io::Error),
    #[error("not a TLS handshake")]
    NotTls,
    #[error("malformed ClientHello")]
    Malformed,
    #[error("ClientHello larger than {MAX_HELLO} bytes")]
    TooLarge,
}

/// Reads records from `stream` until a whole ClientHello is buffered; returns it parsed
/// with every byte read.
///
/// # Errors
/// I/O errors, end of stream, and data that is not a TLS ClientHello.
pub(crate) async fn read<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<(Hello, Vec<u8>), HelloError> {
    let mut raw: Vec<u8> = Vec::with_capacity(2048);
    // The handshake bytes carried by the records read so far.
    let mut handshake: Vec<u8> = Vec::with_capacity(2048);
    loop {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).await?;
        if header[0] != RECORD_HANDSHAKE || header[1] != 3 {
            return Err(HelloError::NotTls);
        }
        let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if length == 0 {
            return Err(HelloError::Malformed);
        }
        if raw.len() + 5 + length > MAX_HELLO {
            return Err(HelloError::TooLarge);
        }
        raw.extend_from_slice(&header);
        let start = raw.len();
        raw.resize(start + length, 0);
        stream.read_exact(&mut raw[start..]).await?;
        handshake.extend_from_slice(&raw[start..]);
        if handshake.len() >= 4 {
            if handshake[0] != HANDSHAKE_CLIENT_HELLO {
                return Err(HelloError::NotTls);
            }
            let body = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if body + 4 > MAX_HELLO {
                return Err(HelloError::TooLarge);
            }
            if handshake.len() >= body + 4 {
                let hello = parse(&handshake[4..body + 4])?;
                return Ok((hello, raw));
            }
        }
    }
}

/// A cursor over a byte slice that fails instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, HelloError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, HelloError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a `len_bytes`-byte length prefix.
    fn vec(&mut self, len_bytes: usize) -> Result<Reader<'a>, HelloError> {
        let len = match len_bytes {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        Ok(Reader(self.take(len)?))
    }
}

/// Parses a ClientHello body (after the 4-byte handshake header).
///
/// # Errors
/// [`HelloError::Malformed`] when a length points past the end or the SNI is not a
/// valid host name.
pub(crate) fn parse(body: &[u8]) -> Result<Hello, HelloError> {
    let mut r = Reader(body);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    r.vec(1)?; // legacy_session_id
    r.vec(2)?; // cipher_suites
    r.vec(1)?; // legacy_compression_methods
    if r.0.is_empty() {
        // No extensions at all (very old clients).
        return Ok(Hello { sni: None });
    }
    let mut extensions = r.vec(2)?;
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let mut data = extensions.vec(2)?;
        if kind != EXTENSION_SERVER_NAME {
            continue;
        }
        let mut names = data.vec(2)?;
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let name = names.vec(2)?.0;
            if name_type != NAME_TYPE_HOST {
                continue;
            }
            let text = std::str::from_utf8(name).map_err(|_| HelloError::Malformed)?;
            let valid = !text.is_empty()
                && text.len() <= 253
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
            if !valid {
                return Err(HelloError::Malformed);
            }
            let host = text.trim_end_matches('.').to_ascii_lowercase();
            return Ok(Hello { sni: Some(host) });
        }
        return Ok(Hello { sni: None });
    }
    Ok(Hello { sni: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The first flight of a real rustls client for `server_name`.
    fn client_hello(server_name: &str) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let name = rustls_pki_types::ServerName::try_from(server_name.to_owned()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    #[tokio::test]
    async fn reads_the_sni_of_a_real_client_and_keeps_every_byte() {
        let bytes = client_hello("Shop.Example.com");
        let mut stream = &bytes[..];
        let (hello, raw) = read(&mut stream).await.unwrap();
        assert_eq!(hello.sni.as_deref(), Some("shop.example.com"));
        assert_eq!(raw, bytes);
    }

    #[tokio::test]
    async fn an_ip_address_sends_no_sni() {
        let bytes = client_hello("127.0.0.1");
        let (hello, _) = read(&mut &bytes[..]).await.unwrap();
        assert_eq!(hello.sni, None);
    }

    #[tokio::test]
    async fn a_hello_split_over_two_records_is_reassembled() {
        let bytes = client_hello("db.example.com");
        // Re-frame the one handshake record as two records.
        let payload = &bytes[5..];
        let (a, b) = payload.split_at(40);
        let mut split = Vec::new();
        for part in [a, b] {
            split.extend_from_slice(&[22, 3, 1]);
            split.extend_from_slice(&u16::try_from(part.len()).unwrap().to_be_bytes());
            split.extend_from_slice(part);
        }
        let (hello, raw) = read(&mut &split[..]).await.unwrap();
        assert_eq!(hello.sni.as_deref(), Some("db.example.com"));
        assert_eq!(raw, split);
    }

    #[tokio::test]
    async fn garbage_is_refused_without_panicking() {
        let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert!(matches!(
            read(&mut &http[..]).await,
            Err(HelloError::NotTls)
        ));
        let truncated = client_hello("a.example.com");
        for cut in [3, 5, 9, 60, truncated.len() - 1] {
            assert!(read(&mut &truncated[..cut]).await.is_err(), "cut {cut}");
        }
        // Every prefix of a body parses or fails cleanly.
        let body = &truncated[9..];
        for cut in 0..body.len() {
            let _ = parse(&body[..cut]);
        }
        // Lengths pointing past the end.
        let mut bad = truncated.clone();
        bad[3] = 0xff;
        bad[4] = 0xff;
        assert!(read(&mut &bad[..]).await.is_err());
    }
}
