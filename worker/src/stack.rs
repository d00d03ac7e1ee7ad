//! The HTTP stack every long-running command serves on: the worker, the
//! dashboard and each `--metrics-addr`.
//!
//! axum routes; hyper serves each connection with a header read timeout
//! (a client that trickles its headers is cut off: slowloris) and a cap on
//! the header buffer; tokio-rustls terminates TLS when configured. The
//! accept loop is ours only because axum's `serve` has neither TLS nor a
//! header timeout: it backs off on accept errors (a full file table must
//! not spin a core) and, on shutdown, stops accepting and lets in-flight
//! requests finish before it returns.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// How one listener serves.
#[derive(Clone, Debug)]
pub struct Listen {
    /// Where.
    pub addr: SocketAddr,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// The most bytes hyper buffers for a request's headers: past it the
    /// connection gets 431 (the worker's own check answers a smaller
    /// excess with a JSON 431 first).
    pub max_header_buffer: usize,
    /// Serve HTTPS with this certificate chain and key (PEM).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// How long shutdown waits for in-flight requests.
    pub drain: Duration,
}

impl Listen {
    /// Plain HTTP on `addr` with the defaults of `[worker]`.
    pub fn plain(addr: SocketAddr) -> Listen {
        let defaults = config::Worker::default();
        Listen {
            addr,
            header_read_timeout: Duration::from_millis(defaults.header_read_timeout_ms),
            max_header_buffer: 64 * 1024,
            tls: None,
            drain: Duration::from_secs(30),
        }
    }
}

/// What can keep a listener from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StackError {
    /// The address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate or key could not be read or used.
    #[error("TLS: {0}")]
    Tls(String),
}

/// A running listener.
pub struct Served {
    /// The address bound (the port, when 0 was asked for).
    pub addr: SocketAddr,
    /// Whether it speaks HTTPS.
    pub tls: bool,
    /// Ends when the listener has stopped and its connections drained.
    pub done: JoinHandle<()>,
}

impl Served {
    /// `http://addr` or `https://addr`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }
}

/// Serves `router` as `listen` says until `shutdown`, then drains.
pub async fn serve(
    router: Router,
    listen: &Listen,
    shutdown: CancellationToken,
) -> Result<Served, StackError> {
    let acceptor = match &listen.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    let listener = TcpListener::bind(listen.addr)
        .await
        .map_err(|source| StackError::Bind {
            addr: listen.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StackError::Bind {
        addr: listen.addr,
        source,
    })?;
    let tls = acceptor.is_some();
    let listen = listen.clone();
    let done = tokio::spawn(accept_loop(listener, router, acceptor, listen, shutdown));
    Ok(Served { addr, tls, done })
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    acceptor: Option<TlsAcceptor>,
    listen: Listen,
    shutdown: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(listen.header_read_timeout)
        .max_buf_size(listen.max_header_buffer.max(8192));
    let http = Arc::new(http);
    let mut backoff =
        schemaless::retry::Pauses::new(Duration::from_millis(5), Duration::from_secs(1));
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => {
                    backoff.succeeded();
                    a
                }
                Err(e) => {
                    // Out of file descriptors, say: wait, or the loop
                    // would spin a core while the condition lasts.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(backoff.failed()).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let http = http.clone();
        let watcher = graceful.watcher();
        let acceptor = acceptor.clone();
        let handshake = listen.header_read_timeout;
        tokio::spawn(async move {
            let result = match acceptor {
                None => {
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn).await
                }
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!("TLS handshake: {e}");
                                return;
                            }
                            Err(_) => return,
                        };
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(conn).await
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection: {e}");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(listen.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still running {:?} after shutdown began; stopping anyway",
            listen.drain
        );
    }
}

/// A TLS acceptor for a PEM certificate chain and key.
pub fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, StackError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| StackError::Tls(format!("reading {}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(StackError::Tls(format!(
            "{} holds no PEM certificate",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| StackError::Tls(format!("reading {}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StackError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| StackError::Tls(format!("the certificate and key do not fit: {e}")))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(server)))
}
