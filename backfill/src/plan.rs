//! Plans: parent id ranges in chunks, and each chunk's state.
//!
//! Several named plans coexist, each with its own chunks and status. The
//! plan named [`MAIN`] is the full backfill (every column, every parent,
//! the id range extended as the table grows). A partial plan
//! ([`Spec`]) copies some columns (after a column is added to the
//! layout), a fixed id range, and/or the parents a predicate on the parent
//! table admits (checked by [`legacy::predicate`]); a migration plans
//! several full and partial backfills over its life.

use legacy::predicate::Predicate;
use legacy::LegacyStore;
use sqlx::{PgPool, Row};

use crate::error::Error;

/// The name of the full backfill's plan.
pub const MAIN: &str = "main";

/// The plan row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Its name ([`MAIN`] for the full backfill).
    pub name: String,
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
    /// The layout columns it copies (`None`: all).
    pub columns: Option<Vec<String>>,
    /// The predicate on the parent table it copies the parents of, as
    /// checked and rendered (`None`: all).
    pub predicate: Option<String>,
    /// Whether its id range was given (`--ids`): it is not extended.
    pub ids_fixed: bool,
}

impl Plan {
    /// Whether it copies every column of every parent, over a range that
    /// follows the table: what the `shadow` gate needs one of.
    pub fn is_full(&self) -> bool {
        self.columns.is_none() && self.predicate.is_none() && !self.ids_fixed
    }

    /// What it covers, in words: `all`, or its columns, ids and predicate.
    pub fn scope(&self) -> String {
        let mut parts = Vec::new();
        if let Some(columns) = &self.columns {
            parts.push(format!("columns {}", columns.join(",")));
        }
        if self.ids_fixed {
            parts.push(format!("ids {}..{}", self.low_id, self.high_id));
        }
        if let Some(predicate) = &self.predicate {
            parts.push(format!("where {predicate}"));
        }
        if parts.is_empty() {
            "every column of every parent".into()
        } else {
            parts.join(", ")
        }
    }
}

/// What a new plan covers.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Its name: 1-64 of `[a-z0-9_-]`.
    pub name: String,
    /// The layout columns to copy (`None`: all).
    pub columns: Option<Vec<String>>,
    /// The parent ids to copy, `low..high` (`None`: the whole table, and
    /// the range follows it when extended).
    pub ids: Option<(i64, i64)>,
    /// The parents to copy (`None`: all).
    pub predicate: Option<Predicate>,
}

impl Spec {
    /// The full backfill, named [`MAIN`].
    pub fn main() -> Spec {
        Spec {
            name: MAIN.into(),
            columns: None,
            ids: None,
            predicate: None,
        }
    }
}

/// Checks a plan name: 1-64 of `[a-z0-9_-]`.
pub fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::BadPlan(format!(
            "{name:?} is not a plan name: use 1-64 of a-z, 0-9, _ and -"
        )))
    }
}

/// Creates the backfill's tables if they are missing, and moves tables of
/// the single-plan version to named plans (its plan becomes [`MAIN`]).
pub async fn ensure_tables(pool: &PgPool) -> Result<(), Error> {
    let everything = legacy::connection::present(
        pool,
        &[
            "mezzanine.backfill_plan",
            "mezzanine.backfill_plan_by_name",
            "mezzanine.backfill_chunks",
            "mezzanine.backfill_chunks_state",
            "mezzanine.backfill_chunks_by_plan",
        ],
        &[
            ("mezzanine.backfill_plan", "name"),
            ("mezzanine.backfill_plan", "columns"),
            ("mezzanine.backfill_plan", "predicate"),
            ("mezzanine.backfill_plan", "ids_fixed"),
            ("mezzanine.backfill_chunks", "plan"),
        ],
    );
    if everything.await {
        return Ok(());
    }
    let context = "creating the backfill's tables";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::raw_sql(
        "/* mezzanine */ SELECT pg_advisory_xact_lock(7415262543);
         CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.backfill_plan (
             name text NOT NULL DEFAULT 'main',
             table_name text NOT NULL,
             chunk_size bigint NOT NULL,
             low_id bigint NOT NULL,
             high_id bigint NOT NULL,
             planned_at timestamptz NOT NULL DEFAULT now(),
             extended_at timestamptz NOT NULL DEFAULT now(),
             planned_by text NOT NULL,
             paused boolean NOT NULL DEFAULT false);
         ALTER TABLE mezzanine.backfill_plan
             ADD COLUMN IF NOT EXISTS name text NOT NULL DEFAULT 'main',
             ADD COLUMN IF NOT EXISTS columns text[],
             ADD COLUMN IF NOT EXISTS predicate text,
             ADD COLUMN IF NOT EXISTS ids_fixed boolean NOT NULL DEFAULT false,
             DROP COLUMN IF EXISTS id;
         CREATE UNIQUE INDEX IF NOT EXISTS backfill_plan_by_name ON mezzanine.backfill_plan (name);
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
         ALTER TABLE mezzanine.backfill_chunks ADD COLUMN IF NOT EXISTS plan text NOT NULL DEFAULT 'main';
         CREATE INDEX IF NOT EXISTS backfill_chunks_state ON mezzanine.backfill_chunks (state, start_id);
         CREATE INDEX IF NOT EXISTS backfill_chunks_by_plan ON mezzanine.backfill_chunks (plan, state, start_id);",
    )
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))
}

const PLAN_COLUMNS: &str = "name, table_name, chunk_size, low_id, high_id,
    (SELECT count(*) FROM mezzanine.backfill_chunks c WHERE c.plan = p.name),
    to_char(extended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), paused,
    columns, predicate, ids_fixed";

fn plan_of(row: &sqlx::postgres::PgRow) -> Result<Plan, Error> {
    let get = |e| Error::Postgres {
        context: "reading a backfill plan".into(),
        source: e,
    };
    Ok(Plan {
        name: row.try_get(0).map_err(get)?,
        table: row.try_get(1).map_err(get)?,
        chunk_size: row.try_get::<i64, _>(2).map_err(get)? as u64,
        low_id: row.try_get(3).map_err(get)?,
        high_id: row.try_get(4).map_err(get)?,
        chunks: row.try_get::<i64, _>(5).map_err(get)? as u64,
        extended_at: row.try_get(6).map_err(get)?,
        paused: row.try_get(7).map_err(get)?,
        columns: row.try_get(8).map_err(get)?,
        predicate: row.try_get(9).map_err(get)?,
        ids_fixed: row.try_get(10).map_err(get)?,
    })
}

/// The full backfill's plan ([`MAIN`]), if there is one.
pub async fn read(pool: &PgPool) -> Result<Option<Plan>, Error> {
    read_plan(pool, MAIN).await
}

/// The plan named `name`, if there is one.
pub async fn read_plan(pool: &PgPool, name: &str) -> Result<Option<Plan>, Error> {
    ensure_tables(pool).await?;
    let sql = format!(
        "/* mezzanine */ SELECT {PLAN_COLUMNS} FROM mezzanine.backfill_plan p WHERE name = $1"
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(name)
        .fetch_optional(pool)
        .await
        .map_err(Error::postgres("reading the backfill plan"))?;
    row.as_ref().map(plan_of).transpose()
}

/// Every plan, by name.
pub async fn list(pool: &PgPool) -> Result<Vec<Plan>, Error> {
    ensure_tables(pool).await?;
    let sql = format!(
        "/* mezzanine */ SELECT {PLAN_COLUMNS} FROM mezzanine.backfill_plan p ORDER BY name"
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .map_err(Error::postgres("reading the backfill plans"))?;
    rows.iter().map(plan_of).collect()
}

/// The plan named `name`, or [`Error::NoSuchPlan`] naming the plans
/// there are.
pub async fn existing(pool: &PgPool, name: &str) -> Result<Plan, Error> {
    if let Some(plan) = read_plan(pool, name).await? {
        return Ok(plan);
    }
    let names: Vec<String> = list(pool).await?.into_iter().map(|p| p.name).collect();
    Err(Error::NoSuchPlan {
        name: name.into(),
        known: names,
    })
}

/// Plans the full backfill ([`MAIN`]) of every parent id there is now,
/// in chunks of `chunk_size` (see [`create_plan`]).
pub async fn create(
    legacy: &LegacyStore,
    chunk_size: u64,
    replace: bool,
    by: &str,
) -> Result<Plan, Error> {
    create_plan(legacy, &Spec::main(), chunk_size, replace, by).await
}

/// Plans a backfill of what `spec` covers, in chunks of `chunk_size`. A
/// plan of the same name is refused unless `replace`, which forgets it and
/// every chunk's state (the copy is idempotent, so starting over only
/// costs time).
pub async fn create_plan(
    legacy: &LegacyStore,
    spec: &Spec,
    chunk_size: u64,
    replace: bool,
    by: &str,
) -> Result<Plan, Error> {
    check_name(&spec.name)?;
    let layout = legacy.layout();
    if let Some(columns) = &spec.columns {
        layout.check_columns(columns).map_err(Error::BadPlan)?;
    }
    if let Some((low, high)) = spec.ids {
        if high <= low {
            return Err(Error::BadPlan(format!(
                "--ids {low}..{high} is empty: the end is past the last id"
            )));
        }
    }
    let pool = legacy.pool();
    ensure_tables(pool).await?;
    let context = "planning the backfill";
    let (low, high) = match spec.ids {
        Some(range) => range,
        None => match legacy.id_range().await? {
            Some((low, high)) => (low, high + 1),
            None => (0, 0),
        },
    };
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::query("/* mezzanine */ SELECT pg_advisory_xact_lock(7415262544)")
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    let existing: Option<(String, i64, i64)> = sqlx::query_as(
        "/* mezzanine */ SELECT table_name, low_id, high_id FROM mezzanine.backfill_plan WHERE name = $1",
    )
    .bind(&spec.name)
    .fetch_optional(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    if let Some((table, low, high)) = existing {
        if !replace {
            return Err(Error::PlanExists(format!(
                "{}: {table}, ids {low}..{high}",
                spec.name
            )));
        }
        sqlx::query("/* mezzanine */ DELETE FROM mezzanine.backfill_chunks WHERE plan = $1")
            .bind(&spec.name)
            .execute(&mut *tx)
            .await
            .map_err(Error::postgres(context))?;
        sqlx::query("/* mezzanine */ DELETE FROM mezzanine.backfill_plan WHERE name = $1")
            .bind(&spec.name)
            .execute(&mut *tx)
            .await
            .map_err(Error::postgres(context))?;
    }
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.backfill_plan
             (name, table_name, chunk_size, low_id, high_id, planned_by, columns, predicate, ids_fixed)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(&spec.name)
    .bind(layout.table.clone())
    .bind(chunk_size as i64)
    .bind(low)
    .bind(high)
    .bind(by)
    .bind(&spec.columns)
    .bind(spec.predicate.as_ref().map(|p| p.text().to_string()))
    .bind(spec.ids.is_some())
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    add_chunks(&mut tx, &spec.name, low, high, chunk_size).await?;
    tx.commit().await.map_err(Error::postgres(context))?;
    existing_plan(pool, &spec.name).await
}

async fn existing_plan(pool: &PgPool, name: &str) -> Result<Plan, Error> {
    read_plan(pool, name).await?.ok_or(Error::NoPlan)
}

/// Adds chunks to the full backfill's plan ([`MAIN`]) for the parent ids
/// created since it was made or last extended.
pub async fn extend(legacy: &LegacyStore) -> Result<(Plan, u64), Error> {
    extend_plan(legacy, MAIN).await
}

/// Adds chunks to plan `name` for the parent ids created since it was
/// made or last extended. Returns the plan and how many chunks were
/// added. A plan over given ids (`--ids`) is not extended.
pub async fn extend_plan(legacy: &LegacyStore, name: &str) -> Result<(Plan, u64), Error> {
    let pool = legacy.pool();
    let plan = existing(pool, name).await?;
    if plan.ids_fixed {
        return Err(Error::BadPlan(format!(
            "plan {name} covers the ids {}..{} it was given: it is not extended; plan the new ids under another name",
            plan.low_id, plan.high_id
        )));
    }
    let context = "extending the backfill plan";
    let range = legacy.id_range().await?;
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    let (chunk_size, high): (i64, i64) = sqlx::query_as(
        "/* mezzanine */ SELECT chunk_size, high_id FROM mezzanine.backfill_plan WHERE name = $1 FOR UPDATE",
    )
    .bind(name)
    .fetch_one(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    let new_high = range.map_or(high, |(_, max)| (max + 1).max(high));
    let added = add_chunks(&mut tx, name, high, new_high, chunk_size as u64).await?;
    sqlx::query(
        "/* mezzanine */ UPDATE mezzanine.backfill_plan SET high_id = $2, extended_at = now() WHERE name = $1",
    )
    .bind(name)
    .bind(new_high)
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))?;
    Ok((existing_plan(pool, name).await?, added))
}

async fn add_chunks(
    tx: &mut sqlx::PgConnection,
    plan: &str,
    low: i64,
    high: i64,
    chunk_size: u64,
) -> Result<u64, Error> {
    if high <= low {
        return Ok(0);
    }
    let done = sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.backfill_chunks (plan, start_id, end_id)
         SELECT $4, s, LEAST(s + $3, $2) FROM generate_series($1::int8, $2::int8 - 1, $3::int8) AS s",
    )
    .bind(low)
    .bind(high)
    .bind(chunk_size as i64)
    .bind(plan)
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres("adding backfill chunks"))?;
    Ok(done.rows_affected())
}

/// Tells every worker of the full backfill ([`MAIN`]) to stop (`true`)
/// or go on (`false`) claiming chunks; chunks in progress finish.
pub async fn set_paused(pool: &PgPool, paused: bool) -> Result<(), Error> {
    set_paused_plan(pool, MAIN, paused).await
}

/// [`set_paused`] for plan `name`.
pub async fn set_paused_plan(pool: &PgPool, name: &str, paused: bool) -> Result<(), Error> {
    existing(pool, name).await?;
    sqlx::query("/* mezzanine */ UPDATE mezzanine.backfill_plan SET paused = $2 WHERE name = $1")
        .bind(name)
        .bind(paused)
        .execute(pool)
        .await
        .map_err(Error::postgres("pausing the backfill"))?;
    Ok(())
}

/// Puts the full backfill's failed chunks back to pending (after fixing
/// their data).
pub async fn retry_failed(pool: &PgPool) -> Result<u64, Error> {
    retry_failed_plan(pool, MAIN).await
}

/// [`retry_failed`] for plan `name`.
pub async fn retry_failed_plan(pool: &PgPool, name: &str) -> Result<u64, Error> {
    existing(pool, name).await?;
    let done = sqlx::query(
        "/* mezzanine */ UPDATE mezzanine.backfill_chunks SET state = 'pending', owner = NULL
         WHERE plan = $1 AND state = 'failed'",
    )
    .bind(name)
    .execute(pool)
    .await
    .map_err(Error::postgres("retrying failed chunks"))?;
    Ok(done.rows_affected())
}
