//! client: the cell API over HTTP. [`Client`] implements
//! [`schemaless::CellStore`] over a list of workers (`mezzanine worker`),
//! so code written against the trait runs unchanged whether it links the
//! facade or calls workers.
//!
//! Calls are spread over the workers in turn. A call that fails in a way
//! another worker may not — the connection refused or reset, no answer in
//! time, a 502, 503 or 504 (a 503 may carry `Retry-After`) — is sent to
//! the next worker, after an exponential backoff with full jitter, until
//! [`Builder::deadline`] has passed. Any other answer, success or error,
//! is final.
//!
//! **Puts are retried too**, because a put is idempotent by design: the
//! same cell written again is `already_present`, never a second copy and
//! never an overwrite. A put whose first attempt landed but whose answer
//! was lost therefore comes back `already_present` from the retry; both
//! mean the cell is stored. A batch is retried whole, and its cells that
//! landed the first time come back `already_present`.
//!
//! # Layout
//!
//! - [`retry`]: which failures are retried, and the backoff;
//! - [`wire`]: JSON answers into cells and errors.
//!
//! # Example
//!
//! ```no_run
//! use schemaless::{Cell, CellStore, ReadFrom};
//! use serde_json::json;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = client::Client::builder()
//!     .worker("http://127.0.0.1:9500")?
//!     .worker("http://127.0.0.1:9501")?
//!     .token(std::env::var("MEZZANINE_TOKEN_APP")?)
//!     .connect()
//!     .await?;
//! let trip = "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d";
//! store.put_cell(Cell::parse(trip, "BASE", 1, json!({"status": "requested"}))?).await?;
//! let latest = store
//!     .get_cell_latest(&schemaless::RowKey::parse(trip)?, &schemaless::Column::new("BASE")?, ReadFrom::Master)
//!     .await?;
//! # Ok(())
//! # }
//! ```

pub mod retry;
pub mod wire;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use schemaless::{
    Answer, Cell, CellKey, CellResult, CellStore, Column, IndexEntry, IndexQuery, ReadFrom, Result,
    RowKey, ShardPage, StoredCell,
};
use serde_json::{json, Value};
use url::Url;

use crate::retry::{Attempt, Backoff};

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

/// The cell API over workers. Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    workers: Vec<Url>,
    token: Option<String>,
    /// Where the next call starts, so calls spread over the workers.
    next: AtomicUsize,
    deadline: Duration,
    backoff: Backoff,
    /// The instance as the workers described it at connect.
    info: wire::Info,
}

impl Client {
    /// A [`Builder`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The mode the workers reported at connect.
    pub fn mode_at_connect(&self) -> &str {
        &self.inner.info.mode
    }

    /// Sends one call, retried on other workers as the crate doc says.
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<wire::Reply> {
        let inner = &self.inner;
        let started = Instant::now();
        let n = inner.workers.len();
        let first = inner.next.fetch_add(1, Ordering::Relaxed);
        let mut attempt = 0u32;
        loop {
            let worker = &inner.workers[(first + attempt as usize) % n];
            let url = worker.join(path).map_err(|e| schemaless::Error::Remote {
                node: worker.to_string(),
                code: "bad_path".into(),
                message: e.to_string(),
                retryable: false,
            })?;
            let mut request = inner.http.request(method.clone(), url);
            if let Some(token) = &inner.token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let outcome = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let retry_after = retry::retry_after(response.headers());
                    let stale = response
                        .headers()
                        .get("mezzanine-stale")
                        .is_some_and(|v| v == "true");
                    match response.bytes().await {
                        Ok(bytes) if retry::retried_status(status) => Attempt::Retry {
                            error: wire::error(worker, status, &bytes),
                            retry_after,
                        },
                        Ok(bytes) => Attempt::Done(wire::Reply {
                            worker: worker.to_string(),
                            status,
                            stale,
                            bytes,
                        }),
                        Err(e) => Attempt::Retry {
                            error: retry::transport(worker, &e),
                            retry_after: None,
                        },
                    }
                }
                Err(e) => Attempt::Retry {
                    error: retry::transport(worker, &e),
                    retry_after: None,
                },
            };
            match outcome {
                Attempt::Done(reply) if reply.status == StatusCode::OK => return Ok(reply),
                Attempt::Done(reply) => return Err(reply.error()),
                Attempt::Retry { error, retry_after } => {
                    attempt += 1;
                    // A lone worker that asked for a pause gets it;
                    // another worker is tried after the backoff alone.
                    let mut delay = inner.backoff.delay(attempt);
                    if n == 1 {
                        delay = delay.max(retry_after.unwrap_or_default());
                    }
                    if started.elapsed() + delay >= inner.deadline {
                        tracing::debug!("giving up after {attempt} attempts: {error}");
                        return Err(error);
                    }
                    tracing::debug!("attempt {attempt} failed ({error}); retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn read_cell(&self, path: String, from: ReadFrom) -> Result<Answer<Option<StoredCell>>> {
        let reply = self
            .call(
                Method::GET,
                &format!("{path}?from={}", wire::from(from)),
                None,
            )
            .await?;
        let answer: wire::CellAnswer = reply.json()?;
        Ok(Answer {
            value: answer.cell.map(|c| c.stored()).transpose()?,
            stale: answer.stale || reply.stale,
        })
    }
}

#[async_trait]
impl CellStore for Client {
    fn shard_count(&self) -> u32 {
        self.inner.info.shard_count
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        let mut results = Vec::with_capacity(cells.len());
        // Batches the workers accept, in order: cells of one call still
        // take effect in order.
        for chunk in cells.chunks(self.inner.info.max_batch_cells.max(1)) {
            let body = json!({ "cells": chunk.iter().map(wire::cell_in).collect::<Vec<_>>() });
            let reply: wire::PutResponse = self
                .call(Method::POST, "/v1/cells", Some(&body))
                .await?
                .json()?;
            if reply.results.len() != chunk.len() {
                return Err(schemaless::Error::Remote {
                    node: "workers".into(),
                    code: "bad_answer".into(),
                    message: format!("{} results for {} cells", reply.results.len(), chunk.len()),
                    retryable: false,
                });
            }
            for (cell, result) in chunk.iter().zip(reply.results) {
                results.push(result.outcome.result(&cell.key));
            }
        }
        Ok(results)
    }

    async fn get_cell(&self, key: &CellKey, from: ReadFrom) -> Result<Option<StoredCell>> {
        Ok(self.get_cell_answer(key, from).await?.value)
    }

    async fn get_cell_latest(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Option<StoredCell>> {
        Ok(self
            .get_cell_latest_answer(row_key, column, from)
            .await?
            .value)
    }

    async fn get_cells_for_row(&self, row_key: &RowKey, from: ReadFrom) -> Result<Vec<StoredCell>> {
        Ok(self.get_cells_for_row_answer(row_key, from).await?.value)
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage> {
        let path = format!(
            "/v1/shards/{shard}/changes?after={after}&limit={}&from={}",
            limit.clamp(1, 10_000),
            wire::from(from)
        );
        let page: wire::ChangesAnswer = self.call(Method::GET, &path, None).await?.json()?;
        Ok(ShardPage {
            cells: page
                .cells
                .into_iter()
                .map(|c| c.stored())
                .collect::<Result<_>>()?,
            next: page.next,
        })
    }

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        self.read_cell(
            format!(
                "/v1/rows/{}/columns/{}/refs/{}",
                key.row_key, key.column, key.ref_key
            ),
            from,
        )
        .await
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        self.read_cell(format!("/v1/rows/{row_key}/columns/{column}/latest"), from)
            .await
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let path = format!("/v1/rows/{row_key}?from={}", wire::from(from));
        let reply = self.call(Method::GET, &path, None).await?;
        wire::cells_answer(&reply)
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let mut all = Answer::fresh(Vec::new());
        for chunk in rows.chunks(self.inner.info.max_batch_cells.max(1)) {
            let body = json!({
                "rows": chunk.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
                "from": wire::from(from),
            });
            let reply = self
                .call(
                    Method::POST,
                    &format!("/v1/columns/{column}/cells"),
                    Some(&body),
                )
                .await?;
            let answer = wire::cells_answer(&reply)?;
            all.value.extend(answer.value);
            all.stale |= answer.stale;
        }
        Ok(all)
    }

    async fn get_column_cells(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Vec<StoredCell>> {
        Ok(self
            .get_column_cells_answer(rows, column, from)
            .await?
            .value)
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        let body = wire::index_query(query, from);
        let reply = self
            .call(
                Method::POST,
                &format!("/v1/indexes/{}/query", wire::segment(&query.index)),
                Some(&body),
            )
            .await?;
        let answer: wire::EntriesAnswer = reply.json()?;
        Ok(Answer {
            value: answer
                .entries
                .into_iter()
                .map(|e| e.entry())
                .collect::<Result<_>>()?,
            stale: answer.stale || reply.stale,
        })
    }

    async fn query_index(&self, query: &IndexQuery, from: ReadFrom) -> Result<Vec<IndexEntry>> {
        Ok(self.query_index_answer(query, from).await?.value)
    }
}
