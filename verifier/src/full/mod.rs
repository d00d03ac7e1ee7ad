//! The full diff: every cell of every parent, chunk by chunk over the
//! legacy ids, compared with everything Schemaless holds for those rows.
//!
//! A run is planned in `mezzanine.verify_runs`/`verify_chunks` (the legacy
//! id range cut into `verify.chunk_size` chunks). Workers, in one process
//! or several, claim chunks with `FOR UPDATE SKIP LOCKED`. A worker
//! renews its chunk's `claimed_at` while it compares it; a chunk not
//! renewed for `verify.stale_after_ms` (its worker died) is claimed again,
//! and workers out of chunks wait for such chunks before they stop, so a
//! run resumed after a crash finishes. A chunk:
//!
//! 1. the legacy side: one snapshot scan of the parents and their
//!    children ([`legacy::LegacyStore::scan`]);
//! 2. Schemaless: every stored cell of those rows, one query per shard,
//!    less what tombstones hide (deleted legacy rows, see
//!    [`schemaless::tombstone`]);
//! 3. per parent and layout column: a row column's current cell against
//!    Schemaless's latest; a child column's whole set of cells against
//!    Schemaless's, by ref key; a (row, column) the layout cannot read
//!    (a value no cell can hold, such as an infinite timestamp or an
//!    array subscripted from 0) is not compared but recorded as a
//!    mismatch carrying the reason, so that a row the migration cannot
//!    carry is counted, and the run goes on (so is a difference whose
//!    row triage finds unreadable when it reads it again);
//! 4. rows that differ are triaged as sampled reads are (wait, let
//!    in-flight writes land, read them again, until they agree or show the
//!    same difference twice) and recorded in the same mismatch store; what
//!    matched counts as verified (coverage), and every comparison counts
//!    as a sample in the gates' figures;
//! 5. with `verify.strict` (`verify full --strict`), what matched is read
//!    once more through PostgreSQL's own casts ([`crate::strict`]), which
//!    do not trust the conversion both sides of step 3 went through; what
//!    PostgreSQL reads otherwise is a mismatch of read kind `strict`.
//!
//! Rows only Schemaless has have no legacy id to be found by: a run over
//! the whole table also sweeps each shard's row keys for them
//! ([`sweep`], one chunk per shard).
//!
//! `verify full` again continues an unfinished run; `--restart` plans a
//! new one.
//!
//! Its rooms: `plan` (runs, chunks, scope, status), `chunk` (comparing
//! one chunk, and the triage it shares) and `sweep` (one shard's rows only
//! Schemaless has; a sweep is one chunk, done again whole if its worker
//! dies); this file holds the workers that claim and run chunks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::ColumnKind;
use legacy::LegacyStore;
use schemaless::{Cell, Column, MySqlStore, ReadFrom, RowKey};
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::compare::{self, Difference, Rules, Unit};
use crate::error::Error;
use crate::sample::{now_secs, Triage};
use crate::store::{self, Counts, Source, Verified};
use crate::strict;
use serde_json::{json, Value};

mod chunk;
mod plan;
mod sweep;

pub use chunk::Checked;
pub use plan::{latest, plan, plan_scoped, status, RunStatus, Scope, SWEEP_BASE};
pub use sweep::{Place, Swept, PAGE as SWEEP_PAGE};

/// Live counters of this process's workers.
#[derive(Default, Debug)]
pub struct Progress {
    /// Chunks compared by this process.
    pub chunks: AtomicU64,
    /// Parents compared.
    pub parents: AtomicU64,
    /// Cells compared.
    pub cells: AtomicU64,
    /// Mismatches recorded.
    pub mismatches: AtomicU64,
    /// Schemaless row keys swept for rows only it has.
    pub swept: AtomicU64,
}

/// The full diff over both stores.
pub struct FullDiff {
    /// The legacy model.
    pub legacy: LegacyStore,
    /// Schemaless.
    pub schemaless: MySqlStore,
    /// The comparison rules.
    pub rules: Rules,
    /// The tombstone column (`capture.tombstone_column`): cells its
    /// tombstones hide are absent from Schemaless's side, as in the
    /// facade's reads.
    pub tombstones: Option<Column>,
    /// The verifier's database.
    pub pool: PgPool,
    /// Triage's questions to the mirror.
    pub triage: Arc<dyn Triage>,
    /// `[verify]` (triage delays).
    pub config: config::Verify,
    /// Row keys a sweep reads per page ([`SWEEP_PAGE`]); its place is kept
    /// after each.
    pub sweep_page: usize,
}

impl FullDiff {
    /// Works on run `id` with `workers` tasks until no chunk is left (or
    /// `cancel`); marks the run finished when every chunk is done.
    pub async fn run(
        &self,
        id: i64,
        workers: usize,
        progress: &Progress,
        cancel: &CancellationToken,
    ) -> Result<RunStatus, Error> {
        let columns: Option<Vec<String>> = sqlx::query_scalar(
            "/* mezzanine */ SELECT columns FROM mezzanine.verify_runs WHERE id = $1",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .map_err(Error::postgres("reading a full diff run"))?;
        let columns: Option<BTreeSet<String>> = columns.map(|c| c.into_iter().collect());
        let work = (0..workers.max(1)).map(|_| self.worker(id, columns.as_ref(), progress, cancel));
        futures::future::try_join_all(work).await?;
        sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.verify_runs SET finished_at = now() WHERE id = $1 AND finished_at IS NULL
               AND NOT EXISTS (SELECT 1 FROM mezzanine.verify_chunks WHERE run = $1 AND state <> 'done')",
        )
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(Error::postgres("finishing a full diff run"))?;
        status(&self.pool, id).await
    }

    async fn worker(
        &self,
        id: i64,
        columns: Option<&BTreeSet<String>>,
        progress: &Progress,
        cancel: &CancellationToken,
    ) -> Result<(), Error> {
        while !cancel.is_cancelled() {
            let Some((start, end, shard)) = self.claim(id).await? else {
                // Chunks claimed by others: wait in case their worker died.
                if self.unfinished(id).await? == 0 {
                    return Ok(());
                }
                tokio::select! {
                    _ = cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(Duration::from_millis(
                        (self.config.stale_after_ms / 4).clamp(50, 2000),
                    )) => {}
                }
                continue;
            };
            // What the chunk found, its counts (a sweep's include what a
            // worker before this one found), and the row keys this worker
            // swept itself.
            let (checked, (swept, mismatches), swept_here) = {
                let heartbeat = self.heartbeat(id, start);
                tokio::pin!(heartbeat);
                let work = async {
                    match shard {
                        Some(shard) => {
                            let place = self.place((id, start)).await?;
                            self.sweep(shard, columns, (id, start), place)
                                .await
                                .map(|s| {
                                    let here = s.rows - place.rows;
                                    (s.checked, (s.rows, s.mismatches), here)
                                })
                        }
                        None => self.check_columns(start..end, columns).await.map(|c| {
                            let found = c.mismatches.len() as u64;
                            (c, (0, found), 0)
                        }),
                    }
                };
                tokio::select! {
                    done = work => done?,
                    never = &mut heartbeat => match never {},
                }
            };
            sqlx::query(
                "/* mezzanine */ UPDATE mezzanine.verify_chunks SET state = 'done', done_at = now(),
                     parents = $3, cells = $4, mismatches = $5, sample_row_keys = $6, strict = $7, swept = $8
                 WHERE run = $1 AND start_id = $2",
            )
            .bind(id)
            .bind(start)
            .bind(checked.parents as i64)
            .bind(checked.cells as i64)
            .bind(mismatches as i64)
            .bind(
                checked
                    .mismatches
                    .iter()
                    .take(5)
                    .map(|d| d.row_key.uuid())
                    .collect::<Vec<Uuid>>(),
            )
            .bind(checked.strict)
            .bind(swept as i64)
            .execute(&self.pool)
            .await
            .map_err(Error::postgres("marking a chunk compared"))?;
            progress.chunks.fetch_add(1, Ordering::Relaxed);
            progress
                .parents
                .fetch_add(checked.parents, Ordering::Relaxed);
            progress.cells.fetch_add(checked.cells, Ordering::Relaxed);
            progress.swept.fetch_add(swept_here, Ordering::Relaxed);
            progress
                .mismatches
                .fetch_add(checked.mismatches.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Chunks of the run not done yet.
    async fn unfinished(&self, id: i64) -> Result<i64, Error> {
        sqlx::query_scalar(
            "/* mezzanine */ SELECT count(*) FROM mezzanine.verify_chunks WHERE run = $1 AND state <> 'done'",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await
        .map_err(Error::postgres("reading a full diff run"))
    }

    /// Renews the chunk's claim every quarter of `verify.stale_after_ms`,
    /// until dropped.
    async fn heartbeat(&self, id: i64, start: i64) -> std::convert::Infallible {
        let every = Duration::from_millis((self.config.stale_after_ms / 4).max(25));
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = sqlx::query(
                "/* mezzanine */ UPDATE mezzanine.verify_chunks SET claimed_at = now()
                 WHERE run = $1 AND start_id = $2 AND state = 'running'",
            )
            .bind(id)
            .bind(start)
            .execute(&self.pool)
            .await
            {
                tracing::warn!("verify full: renewing a chunk's claim: {e}");
            }
        }
    }

    /// A chunk to compare: its start and end ids, and the shard it
    /// sweeps if it is a sweep.
    async fn claim(&self, id: i64) -> Result<Option<(i64, i64, Option<u32>)>, Error> {
        let row = sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.verify_chunks SET state = 'running', claimed_at = now()
             WHERE (run, start_id) = (
                 SELECT run, start_id FROM mezzanine.verify_chunks
                 WHERE run = $1 AND (state = 'pending' OR (state = 'running' AND claimed_at < now() - make_interval(secs => $2)))
                 ORDER BY start_id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING start_id, end_id, shard",
        )
        .bind(id)
        .bind(self.config.stale_after_ms as f64 / 1000.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(Error::postgres("claiming a chunk to compare"))?;
        row.map(|r| {
            let shard: Option<i32> = r.try_get(2).map_err(Error::postgres("claiming a chunk"))?;
            Ok((
                r.try_get(0).map_err(Error::postgres("claiming a chunk"))?,
                r.try_get(1).map_err(Error::postgres("claiming a chunk"))?,
                shard.map(|s| s as u32),
            ))
        })
        .transpose()
    }
}
