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
//! - `builder`: [`Builder`], TLS roots and the connection pool;
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

mod builder;
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

pub use crate::builder::{BuildError, Builder};
use crate::retry::{Attempt, Backoff};

/// The cell API over workers. Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) workers: Vec<Url>,
    pub(crate) token: Option<String>,
    /// Where the next call starts, so calls spread over the workers.
    pub(crate) next: AtomicUsize,
    pub(crate) deadline: Duration,
    pub(crate) backoff: Backoff,
    /// The instance as the workers described it at connect.
    pub(crate) info: wire::Info,
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
}
