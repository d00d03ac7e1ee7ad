//! The plan: the parent id range in chunks, and each chunk's state.

use legacy::LegacyStore;
use sqlx::{PgPool, Row};

use crate::error::Error;

/// The plan row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The parent table it covers (`schema.table`).
    pub table: String,
    /// Parent ids per chunk.
    pub chunk_size: u64,
    /// The first planned id.
    pub low_id: i64,
    /// One past the last planned id.
    pub high_id: i64,
    /// How many chunks.
    pub chunks: u64,
    /// When the range was last set (planned or extended), canonical UTC.
    pub extended_at: String,
    /// Whether workers are told to stop claiming chunks.
    pub paused: bool,
}

/// Creates the backfill's tables if they are missing.
pub async fn ensure_tables(pool: &PgPool) -> Result<(), Error> {
    let relations = [
        "mezzanine.backfill_plan",
        "mezzanine.backfill_chunks",
        "mezzanine.backfill_chunks_state",
    ];
    if legacy::connection::present(pool, &relations, &[]).await {
        return Ok(());
    }
    let context = "creating the backfill's tables";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::raw_sql(
        "/* mezzanine */ SELECT pg_advisory_xact_lock(7415262543);
         CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.backfill_plan (
             id boolean PRIMARY KEY DEFAULT true CHECK (id),
             table_name text NOT NULL,
             chunk_size bigint NOT NULL,
             low_id bigint NOT NULL,
             high_id bigint NOT NULL,
             planned_at timestamptz NOT NULL DEFAULT now(),
             extended_at timestamptz NOT NULL DEFAULT now(),
             planned_by text NOT NULL,
             paused boolean NOT NULL DEFAULT false);
         CREATE TABLE IF NOT EXISTS mezzanine.backfill_chunks (
             id bigserial PRIMARY KEY,
             start_id bigint NOT NULL,
             end_id bigint NOT NULL,
             state text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'done', 'failed')),
             owner text,
             heartbeat_at timestamptz,
             attempts integer NOT NULL DEFAULT 0,
             parents bigint NOT NULL DEFAULT 0,
             cells bigint NOT NULL DEFAULT 0,
             written bigint NOT NULL DEFAULT 0,
             error text,
             done_at timestamptz);
         CREATE INDEX IF NOT EXISTS backfill_chunks_state ON mezzanine.backfill_chunks (state, start_id);",
    )
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))
}

/// The plan, if there is one.
pub async fn read(pool: &PgPool) -> Result<Option<Plan>, Error> {
    ensure_tables(pool).await?;
    let row = sqlx::query(
        "/* mezzanine */ SELECT table_name, chunk_size, low_id, high_id,
                (SELECT count(*) FROM mezzanine.backfill_chunks),
                to_char(extended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), paused
         FROM mezzanine.backfill_plan",
    )
    .fetch_optional(pool)
    .await
    .map_err(Error::postgres("reading the backfill plan"))?;
    let Some(row) = row else { return Ok(None) };
    let get = |e| Error::Postgres {
        context: "reading the backfill plan".into(),
        source: e,
    };
    Ok(Some(Plan {
        table: row.try_get(0).map_err(get)?,
        chunk_size: row.try_get::<i64, _>(1).map_err(get)? as u64,
        low_id: row.try_get(2).map_err(get)?,
        high_id: row.try_get(3).map_err(get)?,
        chunks: row.try_get::<i64, _>(4).map_err(get)? as u64,
        extended_at: row.try_get(5).map_err(get)?,
        paused: row.try_get(6).map_err(get)?,
    }))
}

/// Plans the backfill of every parent id there is now, in chunks of
/// `chunk_size`. An existing plan is refused unless `replace`, which
/// forgets it and every chunk's state (the copy is idempotent, so starting
/// over only costs time).
pub async fn create(
    legacy: &LegacyStore,
    chunk_size: u64,
    replace: bool,
    by: &str,
) -> Result<Plan, Error> {
    let pool = legacy.pool();
    ensure_tables(pool).await?;
    let context = "planning the backfill";
    let range = legacy.id_range().await?;
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::query("/* mezzanine */ SELECT pg_advisory_xact_lock(7415262544)")
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    let existing: Option<(String, i64, i64)> = sqlx::query_as(
        "/* mezzanine */ SELECT table_name, low_id, high_id FROM mezzanine.backfill_plan",
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    if let Some((table, low, high)) = existing {
        if !replace {
            return Err(Error::PlanExists(format!("{table}, ids {low}..{high}")));
        }
        sqlx::raw_sql(
            "/* mezzanine */ DELETE FROM mezzanine.backfill_chunks; DELETE FROM mezzanine.backfill_plan;",
        )
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    }
    let (low, high) = match range {
        Some((low, high)) => (low, high + 1),
        None => (0, 0),
    };
    let layout = legacy.layout();
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.backfill_plan (table_name, chunk_size, low_id, high_id, planned_by)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(layout.table.clone())
    .bind(chunk_size as i64)
    .bind(low)
    .bind(high)
    .bind(by)
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    add_chunks(&mut tx, low, high, chunk_size).await?;
    tx.commit().await.map_err(Error::postgres(context))?;
    read(pool).await?.ok_or(Error::NoPlan)
}

/// Adds chunks for the parent ids created since the plan was made or last
/// extended. Returns the plan and how many chunks were added.
pub async fn extend(legacy: &LegacyStore) -> Result<(Plan, u64), Error> {
    let pool = legacy.pool();
    ensure_tables(pool).await?;
    let context = "extending the backfill plan";
    let range = legacy.id_range().await?;
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    let plan: Option<(i64, i64)> = sqlx::query_as(
        "/* mezzanine */ SELECT chunk_size, high_id FROM mezzanine.backfill_plan FOR UPDATE",
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    let (chunk_size, high) = plan.ok_or(Error::NoPlan)?;
    let new_high = range.map_or(high, |(_, max)| (max + 1).max(high));
    let added = add_chunks(&mut tx, high, new_high, chunk_size as u64).await?;
    sqlx::query(
        "/* mezzanine */ UPDATE mezzanine.backfill_plan SET high_id = $1, extended_at = now()",
    )
    .bind(new_high)
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))?;
    Ok((read(pool).await?.ok_or(Error::NoPlan)?, added))
}

async fn add_chunks(
    tx: &mut sqlx::PgConnection,
    low: i64,
    high: i64,
    chunk_size: u64,
) -> Result<u64, Error> {
    if high <= low {
        return Ok(0);
    }
    let done = sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.backfill_chunks (start_id, end_id)
         SELECT s, LEAST(s + $3, $2) FROM generate_series($1::int8, $2::int8 - 1, $3::int8) AS s",
    )
    .bind(low)
    .bind(high)
    .bind(chunk_size as i64)
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres("adding backfill chunks"))?;
    Ok(done.rows_affected())
}

/// Tells every worker to stop (`true`) or go on (`false`) claiming chunks;
/// chunks in progress finish.
pub async fn set_paused(pool: &PgPool, paused: bool) -> Result<(), Error> {
    ensure_tables(pool).await?;
    let done = sqlx::query("/* mezzanine */ UPDATE mezzanine.backfill_plan SET paused = $1")
        .bind(paused)
        .execute(pool)
        .await
        .map_err(Error::postgres("pausing the backfill"))?;
    if done.rows_affected() == 0 {
        return Err(Error::NoPlan);
    }
    Ok(())
}

/// Puts failed chunks back to pending (after fixing their data).
pub async fn retry_failed(pool: &PgPool) -> Result<u64, Error> {
    ensure_tables(pool).await?;
    let done = sqlx::query(
        "/* mezzanine */ UPDATE mezzanine.backfill_chunks SET state = 'pending', owner = NULL WHERE state = 'failed'",
    )
    .execute(pool)
    .await
    .map_err(Error::postgres("retrying failed chunks"))?;
    Ok(done.rows_affected())
}
