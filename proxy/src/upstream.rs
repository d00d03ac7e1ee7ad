//! The proxy's connections to PostgreSQL, plain or TLS as `legacy.url`'s
//! `sslmode` asks, read as libpq reads it and as the facade's own pool
//! reads the same URL, so one setting covers both:
//!
//! | `sslmode` | the proxy's connection |
//! |---|---|
//! | `disable` | plain |
//! | `allow`, `prefer` (the default) | TLS when the server has it (the certificate not checked), else plain |
//! | `require` | TLS or no connection; the certificate checked against `sslrootcert` when one is given, as libpq checks it |
//! | `verify-ca` | TLS, the certificate signed by `sslrootcert`'s CA (without one, the Mozilla roots built in, as the facade's driver) |
//! | `verify-full` | TLS, signed by that CA and naming the URL's host |
//!
//! `sslcert` and `sslkey` present a client certificate, for a server
//! that asks for one (`clientcert=verify-ca`); the app's own
//! authentication still passes through. The app's TLS ends at the proxy
//! (`proxy.tls_cert`); this is the other hop. `allow` tries TLS first
//! where libpq tries plain first: the connection it makes is one libpq
//! would accept.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::ProxyError;

/// A connection to PostgreSQL.
pub type Backend = Either<TcpStream, TlsStream<TcpStream>>;

/// PostgreSQL's `SSLRequest`: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// `sslmode`, as libpq names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(text: &str) -> Option<SslMode> {
        Some(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where and how the proxy reaches PostgreSQL.
#[derive(Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    pub mode: SslMode,
    /// The handshake's settings and the name the certificate must carry;
    /// `None` for `disable`.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Upstream {
    /// The server of `url` (`legacy.url`) and its `sslmode`.
    pub async fn from_url(url: &str) -> Result<Upstream, ProxyError> {
        let shown = config::urls::redact(url);
        let bad = |why: String| ProxyError::Config(format!("legacy.url {shown}: {why}"));
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                bad("the proxy needs a TCP host (a Unix socket is not supported)".into())
            })?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = parsed.port().unwrap_or(5432);
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| bad(format!("resolving {host}: {e}")))?
            .next()
            .ok_or_else(|| bad(format!("{host} has no address")))?;
        let mut mode = SslMode::Prefer;
        let mut files = Files::default();
        for (key, value) in parsed.query_pairs() {
            match key.as_ref() {
                "sslmode" | "ssl-mode" => {
                    mode = SslMode::parse(&value).ok_or_else(|| {
                        bad(format!(
                            "sslmode={value}: one of disable, allow, prefer, require, verify-ca, verify-full"
                        ))
                    })?
                }
                "sslrootcert" | "ssl-root-cert" => files.root = Some(value.into_owned()),
                "sslcert" | "ssl-cert" => files.cert = Some(value.into_owned()),
                "sslkey" | "ssl-key" => files.key = Some(value.into_owned()),
                _ => {}
            }
        }
        let tls = match mode {
            SslMode::Disable => None,
            _ => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| bad(format!("{host} is no TLS server name: {e}")))?;
                let config = client_config(mode, &files).map_err(bad)?;
                Some((TlsConnector::from(Arc::new(config)), name))
            }
        };
        Ok(Upstream { addr, mode, tls })
    }

    /// A new connection, encrypted as the mode asks.
    pub async fn connect(&self) -> Result<Backend, String> {
        let mut tcp = TcpStream::connect(self.addr)
            .await
            .map_err(|e| format!("could not connect to PostgreSQL at {}: {e}", self.addr))?;
        let _ = tcp.set_nodelay(true);
        let Some((connector, name)) = &self.tls else {
            return Ok(Either::Left(tcp));
        };
        let mut answer = [0u8; 1];
        let asked = async {
            tcp.write_all(&SSL_REQUEST).await?;
            tcp.read_exact(&mut answer).await
        };
        asked.await.map_err(|e| {
            format!(
                "PostgreSQL at {} closed the connection at the TLS request: {e}",
                self.addr
            )
        })?;
        match answer[0] {
            b'S' => connector
                .connect(name.clone(), tcp)
                .await
                .map(Either::Right)
                .map_err(|e| {
                    format!(
                        "the TLS handshake with PostgreSQL at {} failed (sslmode={}): {e}",
                        self.addr,
                        self.mode.as_str()
                    )
                }),
            b'N' if matches!(self.mode, SslMode::Allow | SslMode::Prefer) => Ok(Either::Left(tcp)),
            b'N' => Err(format!(
                "PostgreSQL at {} does not offer TLS, and legacy.url asks for sslmode={}",
                self.addr,
                self.mode.as_str()
            )),
            other => Err(format!(
                "PostgreSQL at {} answered the TLS request with {other:#04x}, neither S nor N",
                self.addr
            )),
        }
    }
}

/// The certificate files `legacy.url` names.
#[derive(Default)]
struct Files {
    root: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

enum Check {
    None,
    Ca,
    Full,
}

fn client_config(mode: SslMode, files: &Files) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    // libpq: `require` with a root certificate file checks as verify-ca.
    let check = match (mode, &files.root) {
        (SslMode::VerifyFull, _) => Check::Full,
        (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Check::Ca,
        _ => Check::None,
    };
    let builder = match check {
        Check::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider))),
        Check::Ca | Check::Full => {
            let mut roots = rustls::RootCertStore::empty();
            match &files.root {
                Some(root) => {
                    for cert in read_certs(root, "sslrootcert")? {
                        roots
                            .add(cert)
                            .map_err(|e| format!("sslrootcert {root}: {e}"))?;
                    }
                }
                None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| format!("the root certificates: {e}"))?;
            match check {
                Check::Full => builder.with_webpki_verifier(verifier),
                _ => builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(verifier))),
            }
        }
    };
    match (&files.cert, &files.key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let certs = read_certs(cert, "sslcert")?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("sslkey {key}: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("sslcert and sslkey do not fit: {e}"))
        }
        _ => Err("sslcert and sslkey go together: give both, or neither".into()),
    }
}

/// The PEM certificates of `file` (the URL's `key`), at least one.
fn read_certs(file: &str, key: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{key} {file}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} {file} holds no PEM certificate"));
    }
    Ok(certs)
}

/// `prefer` and `require` without a root certificate: the connection is
/// encrypted, the certificate not checked (as libpq does); the handshake's
/// signatures still are.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain checked against the CA, whatever name the
/// certificate carries.
#[derive(Debug)]
struct AnyName(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sslmode_is_read_as_libpq_reads_it() {
        let at = |query: &str| format!("postgres://u@127.0.0.1:5999/db{query}");
        for (query, mode) in [
            ("", SslMode::Prefer),
            ("?sslmode=disable", SslMode::Disable),
            ("?sslmode=require&application_name=x", SslMode::Require),
            ("?sslmode=allow", SslMode::Allow),
        ] {
            let up = Upstream::from_url(&at(query)).await.unwrap();
            assert_eq!(
                (up.mode, up.tls.is_some()),
                (mode, mode != SslMode::Disable)
            );
            assert_eq!(up.addr.port(), 5999);
        }
        // Without sslrootcert, the roots built in, as the facade's driver.
        let up = Upstream::from_url(&at("?sslmode=verify-full"))
            .await
            .unwrap();
        assert_eq!(up.mode, SslMode::VerifyFull);
        for (query, says) in [
            ("?sslmode=strict", "one of disable, allow"),
            (
                "?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
                "sslrootcert /nonexistent/ca.crt",
            ),
            (
                "?sslmode=require&sslcert=me.crt",
                "sslcert and sslkey go together",
            ),
            (
                "?sslmode=require&sslcert=/nonexistent/me.crt&sslkey=/nonexistent/me.key",
                "sslcert /nonexistent/me.crt",
            ),
        ] {
            let err = Upstream::from_url(&at(query))
                .await
                .err()
                .expect(query)
                .to_string();
            assert!(err.contains(says), "{query}: {err}");
        }
    }
}
