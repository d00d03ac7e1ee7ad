//! [`Builder`]: the workers, the token, the deadlines and TLS roots, and
//! the connection pool, sized from what the workers say at connect.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use url::Url;

use crate::retry::Backoff;
use crate::{wire, Client, Inner};

/// Builds a [`Client`].
#[derive(Clone, Debug)]
pub struct Builder {
    workers: Vec<Url>,
    token: Option<String>,
    deadline: Duration,
    request_timeout: Duration,
    backoff: Backoff,
    root_certificates: Vec<Vec<u8>>,
}

/// What can keep a client from being built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A worker URL that is not `http://` or `https://` with a host.
    #[error("worker URL {url:?}: {reason}")]
    BadUrl {
        /// What was given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No worker was given.
    #[error("no worker URL given")]
    NoWorkers,
    /// A root certificate could not be read.
    #[error("TLS: {0}")]
    Tls(String),
    /// No worker answered `/v1/info`.
    #[error(transparent)]
    Store(#[from] schemaless::Error),
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            workers: Vec::new(),
            token: None,
            deadline: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
            backoff: Backoff::default(),
            root_certificates: Vec::new(),
        }
    }
}

impl Builder {
    /// Adds a worker, `http://host:port` or `https://host:port`.
    pub fn worker(mut self, url: &str) -> std::result::Result<Builder, BuildError> {
        let bad = |reason: &str| BuildError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(bad("use http://host:port or https://host:port"));
        }
        self.workers.push(parsed);
        Ok(self)
    }

    /// The bearer token's secret.
    pub fn token(mut self, secret: impl Into<String>) -> Builder {
        self.token = Some(secret.into());
        self
    }

    /// How long a call may take in all, retries included. Default 10 s.
    pub fn deadline(mut self, deadline: Duration) -> Builder {
        self.deadline = deadline;
        self
    }

    /// How long one attempt may take before the next worker is tried.
    /// Default 5 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Builder {
        self.request_timeout = timeout;
        self
    }

    /// The delays between attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Builder {
        self.backoff = backoff;
        self
    }

    /// Trusts this PEM certificate (a private CA, or a worker's own
    /// self-signed certificate) besides the public roots.
    pub fn root_certificate_pem(mut self, pem: &[u8]) -> Builder {
        self.root_certificates.push(pem.to_vec());
        self
    }

    /// Builds the client and asks the workers for the instance's shard
    /// count and limits (retrying as every call does).
    pub async fn connect(self) -> std::result::Result<Client, BuildError> {
        if self.workers.is_empty() {
            return Err(BuildError::NoWorkers);
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for pem in &self.root_certificates {
            use rustls::pki_types::pem::PemObject;
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| BuildError::Tls(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| BuildError::Tls(e.to_string()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| BuildError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let http = |idle: Duration| {
            reqwest::Client::builder()
                .use_preconfigured_tls(tls.clone())
                .timeout(self.request_timeout)
                .connect_timeout(self.request_timeout.min(Duration::from_secs(2)))
                .pool_idle_timeout(idle)
                .tcp_nodelay(true)
                .build()
                .map_err(|e| BuildError::Tls(e.to_string()))
        };
        // Until the workers say how long they keep an idle connection,
        // a pooled one is not reused after a second.
        let mut client = Client {
            inner: Arc::new(Inner {
                http: http(Duration::from_secs(1))?,
                workers: self.workers,
                token: self.token,
                next: AtomicUsize::new(0),
                deadline: self.deadline,
                backoff: self.backoff,
                info: wire::Info::default(),
            }),
        };
        let info: wire::Info = client.call(Method::GET, "/v1/info", None).await?.json()?;
        let inner = Arc::get_mut(&mut client.inner).expect("the client is not shared yet");
        // A worker closes a connection idle for its header read timeout;
        // one reused at that moment fails. Dropping pooled connections at
        // half that time avoids the race (a failed send would be retried
        // anyway, but costs a backoff).
        if info.idle_timeout_ms > 0 {
            inner.http = http(Duration::from_millis(info.idle_timeout_ms / 2))?;
        }
        inner.info = info;
        Ok(client)
    }
}
