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
//!    Schemaless's, by ref key;
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
//! `verify full` again continues an unfinished run; `--restart` plans a
//! new one. Rows only Schemaless has are not found this way (the diff walks
//! the legacy ids); sampled reads find them.

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

/// How many times a difference is read again before it is left
/// unjudged.
const TRIAGE_ROUNDS: usize = 5;

/// A run of the full diff.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunStatus {
    /// Its id.
    pub id: i64,
    /// Chunks in all.
    pub chunks: u64,
    /// Chunks compared.
    pub done: u64,
    /// Parent rows compared.
    pub parents: u64,
    /// Cells compared (legacy side).
    pub cells: u64,
    /// (row, column)s recorded as mismatches.
    pub mismatches: u64,
    /// Chunks compared with the strict check (`verify full --strict`).
    pub strict_chunks: u64,
    /// Row keys of some of them.
    pub sample_row_keys: Vec<String>,
    /// Started, seconds since the epoch.
    pub started_at: f64,
    /// Finished, if it has.
    pub finished_at: Option<f64>,
}

impl RunStatus {
    /// Whether every chunk is compared.
    pub fn finished(&self) -> bool {
        self.done == self.chunks
    }
}

/// The newest run, if any.
pub async fn latest(pool: &PgPool) -> Result<Option<RunStatus>, Error> {
    let id: Option<i64> =
        sqlx::query_scalar("/* mezzanine */ SELECT max(id) FROM mezzanine.verify_runs")
            .fetch_one(pool)
            .await
            .map_err(Error::postgres("reading the full diff's runs"))?;
    match id {
        Some(id) => status(pool, id).await.map(Some),
        None => Ok(None),
    }
}

/// A run's state.
pub async fn status(pool: &PgPool, id: i64) -> Result<RunStatus, Error> {
    let context = "reading a full diff run";
    let row = sqlx::query(
        "/* mezzanine */ SELECT count(*), count(*) FILTER (WHERE c.state = 'done'),
                COALESCE(sum(c.parents), 0)::int8, COALESCE(sum(c.cells), 0)::int8,
                COALESCE(sum(c.mismatches), 0)::int8,
                count(*) FILTER (WHERE c.state = 'done' AND c.strict),
                (SELECT array_agg(k::text) FROM (SELECT unnest(sample_row_keys) k FROM mezzanine.verify_chunks
                     WHERE run = $1 ORDER BY start_id LIMIT 20) s),
                extract(epoch FROM r.started_at)::float8, extract(epoch FROM r.finished_at)::float8
         FROM mezzanine.verify_runs r LEFT JOIN mezzanine.verify_chunks c ON c.run = r.id
         WHERE r.id = $1 GROUP BY r.id",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    let get_u = |i: usize| -> Result<u64, Error> {
        Ok(row.try_get::<i64, _>(i).map_err(Error::postgres(context))? as u64)
    };
    Ok(RunStatus {
        id,
        chunks: get_u(0)?,
        done: get_u(1)?,
        parents: get_u(2)?,
        cells: get_u(3)?,
        mismatches: get_u(4)?,
        strict_chunks: get_u(5)?,
        sample_row_keys: row
            .try_get::<Option<Vec<String>>, _>(6)
            .map_err(Error::postgres(context))?
            .unwrap_or_default(),
        started_at: row.try_get(7).map_err(Error::postgres(context))?,
        finished_at: row.try_get(8).map_err(Error::postgres(context))?,
    })
}

/// What a run compares: some layout columns, some parent ids (a partial
/// diff, after a partial backfill).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// The layout columns (`None`: all).
    pub columns: Option<Vec<String>>,
    /// The parent ids, `low..high` (`None`: the whole table).
    pub ids: Option<(i64, i64)>,
}

/// The run to work on: the newest unfinished one, or (with `restart`, or
/// when there is none) a new one over the legacy id range as it is now.
pub async fn plan(
    pool: &PgPool,
    legacy: &LegacyStore,
    chunk_size: u64,
    restart: bool,
) -> Result<i64, Error> {
    plan_scoped(pool, legacy, chunk_size, restart, &Scope::default()).await
}

/// [`plan`] of a run over `scope`. An unfinished run is continued only
/// if it has the same columns (and, with ids given, the same range);
/// otherwise a new run replaces it.
pub async fn plan_scoped(
    pool: &PgPool,
    legacy: &LegacyStore,
    chunk_size: u64,
    restart: bool,
    scope: &Scope,
) -> Result<i64, Error> {
    store::ensure(pool).await?;
    if let Some(columns) = &scope.columns {
        legacy
            .layout()
            .check_columns(columns)
            .map_err(|why| Error::Usage(format!("--columns: {why}")))?;
    }
    if !restart {
        let unfinished: Option<(i64, Option<Vec<String>>, i64, i64)> = sqlx::query_as(
            "/* mezzanine */ SELECT id, columns, low_id, high_id FROM mezzanine.verify_runs
             WHERE finished_at IS NULL ORDER BY id DESC LIMIT 1",
        )
        .fetch_optional(pool)
        .await
        .map_err(Error::postgres("reading the full diff runs"))?;
        if let Some((id, columns, low, high)) = unfinished {
            let same_ids = scope.ids.is_none_or(|ids| ids == (low, high));
            if columns == scope.columns && same_ids {
                return Ok(id);
            }
        }
    }
    let (low, high) = match scope.ids {
        Some(ids) => ids,
        None => {
            let (low, high) = legacy.id_range().await?.unwrap_or((0, -1));
            (low, high + 1)
        }
    };
    let context = "planning a full diff";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    let id: i64 = sqlx::query_scalar(
        "/* mezzanine */ INSERT INTO mezzanine.verify_runs (chunk_size, low_id, high_id, columns) VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(chunk_size as i64)
    .bind(low)
    .bind(high)
    .bind(&scope.columns)
    .fetch_one(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.verify_chunks (run, start_id, end_id)
         SELECT $1, s, least(s + $4, $3) FROM generate_series($2::int8, $3::int8 - 1, $4::int8) s",
    )
    .bind(id)
    .bind(low)
    .bind(high)
    .bind(chunk_size as i64)
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    // Runs before this one are finished or abandoned: only one is worked.
    sqlx::query("/* mezzanine */ UPDATE mezzanine.verify_runs SET finished_at = now() WHERE id < $1 AND finished_at IS NULL")
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))?;
    Ok(id)
}

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
            let Some((start, end)) = self.claim(id).await? else {
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
            let checked = {
                let heartbeat = self.heartbeat(id, start);
                tokio::pin!(heartbeat);
                tokio::select! {
                    checked = self.check_columns(start..end, columns) => checked?,
                    never = &mut heartbeat => match never {},
                }
            };
            sqlx::query(
                "/* mezzanine */ UPDATE mezzanine.verify_chunks SET state = 'done', done_at = now(),
                     parents = $3, cells = $4, mismatches = $5, sample_row_keys = $6, strict = $7
                 WHERE run = $1 AND start_id = $2",
            )
            .bind(id)
            .bind(start)
            .bind(checked.parents as i64)
            .bind(checked.cells as i64)
            .bind(checked.mismatches.len() as i64)
            .bind(
                checked
                    .mismatches
                    .iter()
                    .take(5)
                    .map(|d| d.row_key.uuid())
                    .collect::<Vec<Uuid>>(),
            )
            .bind(checked.strict)
            .execute(&self.pool)
            .await
            .map_err(Error::postgres("marking a chunk compared"))?;
            progress.chunks.fetch_add(1, Ordering::Relaxed);
            progress
                .parents
                .fetch_add(checked.parents, Ordering::Relaxed);
            progress.cells.fetch_add(checked.cells, Ordering::Relaxed);
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

    async fn claim(&self, id: i64) -> Result<Option<(i64, i64)>, Error> {
        let row = sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.verify_chunks SET state = 'running', claimed_at = now()
             WHERE (run, start_id) = (
                 SELECT run, start_id FROM mezzanine.verify_chunks
                 WHERE run = $1 AND (state = 'pending' OR (state = 'running' AND claimed_at < now() - make_interval(secs => $2)))
                 ORDER BY start_id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING start_id, end_id",
        )
        .bind(id)
        .bind(self.config.stale_after_ms as f64 / 1000.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(Error::postgres("claiming a chunk to compare"))?;
        row.map(|r| {
            Ok((
                r.try_get(0).map_err(Error::postgres("claiming a chunk"))?,
                r.try_get(1).map_err(Error::postgres("claiming a chunk"))?,
            ))
        })
        .transpose()
    }

    /// Compares the parents with ids in `ids`; records what differs after
    /// triage and what was verified.
    pub async fn check(&self, ids: std::ops::Range<i64>) -> Result<Checked, Error> {
        self.check_columns(ids, None).await
    }

    /// [`FullDiff::check`] of `columns` only (`None`: all).
    pub async fn check_columns(
        &self,
        ids: std::ops::Range<i64>,
        columns: Option<&BTreeSet<String>>,
    ) -> Result<Checked, Error> {
        // When this chunk's reads began: a mismatch repaired since is not
        // reopened by what they saw (see `store::record`).
        let observed = std::time::Instant::now();
        let filter = legacy::scan::ScanFilter {
            columns: columns.cloned(),
            predicate: None,
        };
        let chunk = self.legacy.scan_filtered(ids.clone(), &filter).await?;
        for e in &chunk.unreadable {
            tracing::warn!("verify full: a legacy row cannot be read through the layout: {e}");
        }
        let mut legacy_cells: BTreeMap<RowKey, Vec<Cell>> = BTreeMap::new();
        for cell in &chunk.cells {
            legacy_cells
                .entry(cell.key.row_key)
                .or_default()
                .push(cell.clone());
        }
        let rows: Vec<RowKey> = legacy_cells.keys().copied().collect();
        let stored = self.schemaless_cells(&rows).await?;
        let units = self.compare(&legacy_cells, &stored, columns);
        let (mut equal, first): (Vec<Unit>, Vec<Unit>) =
            units.into_iter().partition(|u| u.difference.is_none());
        // What Schemaless held for each unit found equal: the strict
        // check reads it through PostgreSQL's own casts.
        let mut strict_cells = self.compared_cells(&stored, &equal);
        // Triage as for samples: read the differing rows again until they
        // agree or show the same difference twice with nothing in flight.
        let mut previous: Vec<Difference> =
            first.into_iter().filter_map(|u| u.difference).collect();
        let mut mismatches = Vec::new();
        for _ in 0..TRIAGE_ROUNDS {
            if previous.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(self.config.triage_delay_ms)).await;
            let rows: Vec<RowKey> = previous
                .iter()
                .map(|d| d.row_key)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let settled = self
                .triage
                .settle(
                    &rows,
                    None,
                    Duration::from_millis(self.config.triage_wait_ms),
                )
                .await;
            let mut again: BTreeMap<RowKey, Vec<Cell>> = BTreeMap::new();
            for row in &rows {
                again.insert(*row, self.legacy.row_cells(row).await?);
            }
            let stored = self.schemaless_cells(&rows).await?;
            let keys: std::collections::BTreeSet<(RowKey, String)> = previous
                .iter()
                .map(|d| (d.row_key, d.column.to_string()))
                .collect();
            let (now_equal, now_different): (Vec<Unit>, Vec<Unit>) = self
                .compare(&again, &stored, columns)
                .into_iter()
                .filter(|u| keys.contains(&(u.row_key, u.column.to_string())))
                .partition(|u| u.difference.is_none());
            strict_cells.extend(self.compared_cells(&stored, &now_equal));
            equal.extend(now_equal);
            let now: Vec<Difference> = now_different
                .into_iter()
                .filter_map(|u| u.difference)
                .collect();
            if settled {
                let (same, moved): (Vec<Difference>, Vec<Difference>) =
                    now.into_iter().partition(|d| previous.contains(d));
                mismatches.extend(same);
                previous = moved;
            } else {
                previous = now;
            }
        }
        if !previous.is_empty() {
            tracing::warn!(
                "verify full: {} (row, column)s kept changing during triage (hot rows?); not judged",
                previous.len()
            );
        }
        let mut strict_failed = Vec::new();
        if self.config.strict {
            strict_failed = strict::check(&self.legacy, &self.rules, &strict_cells).await?;
            let failed: BTreeSet<(RowKey, &str)> = strict_failed
                .iter()
                .map(|d| (d.row_key, d.column.as_str()))
                .collect();
            equal.retain(|u| !failed.contains(&(u.row_key, u.column.as_str())));
        }
        let at = now_secs();
        let verified: Vec<Verified> = equal
            .iter()
            .map(|u| Verified {
                row_key: u.row_key,
                column: u.column.clone(),
                ref_key: u.ref_key,
                at,
            })
            .collect();
        // Every compared (row, column) counts as a sample of the gates'
        // figures: the full diff is the largest sample there is.
        let mut counts: HashMap<String, Counts> = HashMap::new();
        for v in &verified {
            let c = counts.entry(v.column.to_string()).or_default();
            c.samples += 1;
            c.matches += 1;
        }
        for d in mismatches.iter().chain(&strict_failed) {
            let c = counts.entry(d.column.to_string()).or_default();
            c.samples += 1;
            c.mismatches += 1;
        }
        store::record(&self.pool, Source::Full, "full", &mismatches, observed).await?;
        store::record(&self.pool, Source::Full, "strict", &strict_failed, observed).await?;
        store::flush(&self.pool, &counts, &verified).await?;
        mismatches.extend(strict_failed);
        Ok(Checked {
            parents: chunk.parents,
            cells: chunk.cells.len() as u64,
            strict: self.config.strict,
            mismatches,
        })
    }

    async fn schemaless_cells(
        &self,
        rows: &[RowKey],
    ) -> Result<BTreeMap<RowKey, Vec<Cell>>, Error> {
        let mut by_row: BTreeMap<RowKey, Vec<Cell>> = BTreeMap::new();
        let mut cells = self.schemaless.get_rows_all(rows, ReadFrom::Master).await?;
        if let Some(column) = &self.tombstones {
            cells = schemaless::tombstone::visible(cells, column)?;
        }
        for stored in cells {
            by_row
                .entry(stored.cell.key.row_key)
                .or_default()
                .push(stored.cell);
        }
        Ok(by_row)
    }

    /// Schemaless's cells behind `units`: a row column's latest, a child
    /// column's every cell.
    fn compared_cells(&self, stored: &BTreeMap<RowKey, Vec<Cell>>, units: &[Unit]) -> Vec<Cell> {
        let mut cells = Vec::new();
        for unit in units {
            let (Some(row), Some((_, layout))) = (
                stored.get(&unit.row_key),
                self.legacy.layout().column(unit.column.as_str()),
            ) else {
                continue;
            };
            let theirs = row.iter().filter(|c| c.key.column == unit.column);
            match layout.kind {
                ColumnKind::Row => cells.extend(theirs.max_by_key(|c| c.key.ref_key).cloned()),
                ColumnKind::Child => cells.extend(theirs.cloned()),
            }
        }
        cells
    }

    /// Per row of `legacy` and layout column: a row column's current cell
    /// against Schemaless's latest, a child column's cells against all of
    /// Schemaless's.
    fn compare(
        &self,
        legacy: &BTreeMap<RowKey, Vec<Cell>>,
        schemaless: &BTreeMap<RowKey, Vec<Cell>>,
        columns: Option<&BTreeSet<String>>,
    ) -> Vec<Unit> {
        let none = Vec::new();
        let mut units = Vec::new();
        for (row, cells) in legacy {
            let stored = schemaless.get(row).unwrap_or(&none);
            let compared = self
                .legacy
                .layout()
                .columns
                .iter()
                .filter(|c| columns.is_none_or(|set| set.contains(c.name.as_str())));
            for column in compared {
                let ours: Vec<&Cell> = cells
                    .iter()
                    .filter(|c| c.key.column == column.name)
                    .collect();
                let theirs: Vec<&Cell> = stored
                    .iter()
                    .filter(|c| c.key.column == column.name)
                    .collect();
                let unit = match column.kind {
                    ColumnKind::Row => compare::one_cell(
                        &self.rules,
                        &self.legacy,
                        *row,
                        &column.name,
                        ours.iter().max_by_key(|c| c.key.ref_key).copied(),
                        theirs.iter().max_by_key(|c| c.key.ref_key).copied(),
                    ),
                    ColumnKind::Child => compare::cell_sets(
                        &self.rules,
                        &self.legacy,
                        *row,
                        &column.name,
                        &ours,
                        &theirs,
                    ),
                };
                units.extend(unit);
            }
        }
        units
    }
}

/// What one chunk's comparison found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Parent rows compared.
    pub parents: u64,
    /// Legacy cells compared.
    pub cells: u64,
    /// Whether the strict check ran on it.
    pub strict: bool,
    /// What was recorded.
    pub mismatches: Vec<Difference>,
}
