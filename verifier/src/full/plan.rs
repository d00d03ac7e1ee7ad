//! A full diff's plan: the run and its chunks of legacy ids, optionally
//! scoped to columns and an id range, and their status.
//!
//! A run over the whole table also gets one chunk per Schemaless shard:
//! its sweep for rows only Schemaless has ([`super::sweep`]). Such a chunk
//! has its `shard` set, and a `start_id` below every legacy chunk's
//! ([`SWEEP_BASE`] plus the shard), which keeps the table's primary key.

use super::*;

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
    /// Chunks that sweep a Schemaless shard for rows only it has (one per
    /// shard; none in a run scoped to ids).
    pub sweeps: u64,
    /// Row keys those sweeps read.
    pub swept_rows: u64,
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
                count(c.shard), COALESCE(sum(c.swept), 0)::int8,
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
        sweeps: get_u(6)?,
        swept_rows: get_u(7)?,
        sample_row_keys: row
            .try_get::<Option<Vec<String>>, _>(8)
            .map_err(Error::postgres(context))?
            .unwrap_or_default(),
        started_at: row.try_get(9).map_err(Error::postgres(context))?,
        finished_at: row.try_get(10).map_err(Error::postgres(context))?,
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

/// The `start_id` of shard 0's sweep chunk; shard `n`'s is this plus `n`.
/// Below any legacy id a chunk could start at.
pub const SWEEP_BASE: i64 = i64::MIN;

/// The run to work on: the newest unfinished one, or (with `restart`, or
/// when there is none) a new one over the legacy id range as it is now,
/// and a sweep of each of Schemaless's `shards`.
pub async fn plan(
    pool: &PgPool,
    legacy: &LegacyStore,
    shards: u32,
    chunk_size: u64,
    restart: bool,
) -> Result<i64, Error> {
    plan_scoped(pool, legacy, shards, chunk_size, restart, &Scope::default()).await
}

/// [`plan`] of a run over `scope`. An unfinished run is continued only
/// if it has the same columns (and, with ids given, the same range);
/// otherwise a new run replaces it. A run scoped to ids sweeps no shard:
/// a row only Schemaless has has no id to be in the range.
pub async fn plan_scoped(
    pool: &PgPool,
    legacy: &LegacyStore,
    shards: u32,
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
    if scope.ids.is_none() && shards > 0 {
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.verify_chunks (run, start_id, end_id, shard)
             SELECT $1, $2::int8 + s, $2::int8 + s, s FROM generate_series(0, $3::int4 - 1) s",
        )
        .bind(id)
        .bind(SWEEP_BASE)
        .bind(shards as i32)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    }
    // Runs before this one are finished or abandoned: only one is worked.
    sqlx::query("/* mezzanine */ UPDATE mezzanine.verify_runs SET finished_at = now() WHERE id < $1 AND finished_at IS NULL")
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))?;
    Ok(id)
}
