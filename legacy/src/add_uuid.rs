//! `mezzanine legacy add-uuid`: gives every parent row a UUID online.
//!
//! Legacy tables often have only an integer id; Schemaless needs a UUID
//! row key. This adds the column and fills it without long locks, while
//! the app keeps inserting and updating:
//!
//! 1. `ADD COLUMN` (no default: a catalog change, no table rewrite), then a
//!    column default and a trigger, so that every row inserted or updated
//!    from now on gets a UUID by itself. DDL runs with a short
//!    `lock_timeout` and is retried, so it never queues the app's writes
//!    behind a long transaction.
//! 2. Fills old rows in small id-range batches, each its own transaction
//!    that also records the next id in `mezzanine.add_uuid_progress`; a
//!    crash resumes from there.
//! 3. `CREATE UNIQUE INDEX CONCURRENTLY` (an invalid index left by a crash
//!    is dropped and rebuilt).
//! 4. `NOT NULL` through a `CHECK ... NOT VALID` constraint validated
//!    without blocking writes, so `SET NOT NULL` needs no table scan under
//!    its exclusive lock; then the helper constraint and trigger go. The
//!    column default stays, for rows inserted by code that knows nothing
//!    of UUIDs.
//!
//! Every step checks whether it is already done, so the whole command can
//! be rerun at any point.

use std::time::Duration;

use sqlx::{AssertSqlSafe, PgPool};

use crate::error::Error;
use crate::layout::quote;

/// How long add-uuid's DDL waits for its table lock before it gives way
/// and tries again.
const LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// How add-uuid paces itself.
#[derive(Clone, Debug)]
pub struct Options {
    /// Parent ids per fill transaction.
    pub batch: i64,
    /// Sleep between batches, to leave room for the app.
    pub pause: Duration,
}

/// Progress of the fill, reported after every batch.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Rows given a UUID so far (this run and earlier ones).
    pub filled: u64,
    /// The next id to fill from.
    pub next_id: i64,
    /// The largest id when the fill began.
    pub last_id: i64,
}

/// What add-uuid did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The column did not exist and was added.
    pub added_column: bool,
    /// Rows given a UUID by this run's fill.
    pub filled: u64,
    /// The unique index was (re)built by this run.
    pub built_index: bool,
    /// The column was made NOT NULL by this run.
    pub set_not_null: bool,
}

struct Names {
    /// `"public"."trips"`
    table: String,
    /// `public.trips`, the progress key.
    key: String,
    schema: String,
    table_name: String,
    uuid_name: String,
    uuid: String,
    id: String,
    index: String,
    check: String,
    function: String,
}

impl Names {
    fn new(layout: &config::Layout) -> Names {
        let base = format!("{}_{}", layout.table, layout.uuid);
        Names {
            table: format!("{}.{}", quote(&layout.schema), quote(&layout.table)),
            key: format!("{}.{}", layout.schema, layout.table),
            schema: layout.schema.clone(),
            table_name: layout.table.clone(),
            uuid_name: layout.uuid.clone(),
            uuid: quote(&layout.uuid),
            id: quote(&layout.id),
            index: truncate_identifier(&format!("{base}_key")),
            check: truncate_identifier(&format!("{base}_not_null")),
            function: format!(
                "mezzanine.{}",
                quote(&truncate_identifier(&format!("fill_{base}")))
            ),
        }
    }
}

/// PostgreSQL truncates identifiers to 63 bytes; do it ourselves so the
/// names we look up are the names it stored.
fn truncate_identifier(name: &str) -> String {
    name.chars().take(63).collect()
}

async fn execute(pool: &PgPool, sql: String, context: &str) -> Result<u64, Error> {
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(pool)
        .await
        .map(|r| r.rows_affected())
        .map_err(|e| Error::postgres(context.to_string(), e))
}

/// Adds, fills and indexes the layout's UUID column; see the module docs.
pub async fn run(
    pool: &PgPool,
    layout: &config::Layout,
    options: &Options,
    mut progress: impl FnMut(Progress),
) -> Result<Report, Error> {
    let names = Names::new(layout);
    let mut report = Report::default();
    execute(
        pool,
        "CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.add_uuid_progress (
             table_name text PRIMARY KEY,
             next_id bigint NOT NULL,
             last_id bigint NOT NULL,
             filled bigint NOT NULL DEFAULT 0,
             started_at timestamptz NOT NULL DEFAULT now(),
             finished_at timestamptz)"
            .into(),
        "creating mezzanine.add_uuid_progress",
    )
    .await?;

    // 1. The column, its default, and the trigger for updated rows.
    let column: Option<(bool,)> = sqlx::query_as(
        "/* mezzanine */ SELECT a.attnotnull FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3 AND NOT a.attisdropped",
    )
    .bind(&names.schema)
    .bind(&names.table_name)
    .bind(&names.uuid_name)
    .fetch_optional(pool)
    .await
    .map_err(|e| Error::postgres("looking for the uuid column", e))?;
    let finished = column.is_some_and(|(not_null,)| not_null);
    if column.is_none() {
        crate::connection::ddl(
            pool,
            LOCK_TIMEOUT,
            &format!(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} uuid",
                names.table, names.uuid
            ),
            "adding the uuid column",
        )
        .await?;
        report.added_column = true;
    }
    crate::connection::ddl(
        pool,
        LOCK_TIMEOUT,
        &format!(
            "ALTER TABLE {} ALTER COLUMN {} SET DEFAULT gen_random_uuid()",
            names.table, names.uuid
        ),
        "setting the uuid column's default",
    )
    .await?;
    if !finished {
        execute(
            pool,
            format!(
                "CREATE OR REPLACE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN NEW.{u} := gen_random_uuid(); RETURN NEW; END $$",
                f = names.function,
                u = names.uuid
            ),
            "creating the uuid fill function",
        )
        .await?;
        crate::connection::ddl(
            pool,
            LOCK_TIMEOUT,
            &format!(
                "CREATE OR REPLACE TRIGGER mezzanine_fill_uuid BEFORE INSERT OR UPDATE ON {t}
                 FOR EACH ROW WHEN (NEW.{u} IS NULL) EXECUTE FUNCTION {f}()",
                t = names.table,
                u = names.uuid,
                f = names.function
            ),
            "creating the uuid fill trigger",
        )
        .await?;
    }

    // 2. Fill old rows, resumably.
    if !finished {
        report.filled = fill(pool, &names, options, &mut progress).await?;
    }

    // 3. The unique index, concurrently. CONCURRENTLY cannot run in a
    // transaction, and may take longer than the statement timeout.
    let index: Option<(bool,)> = sqlx::query_as(
        "/* mezzanine */ SELECT i.indisvalid FROM pg_index i
         JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname = $2",
    )
    .bind(&names.schema)
    .bind(&names.index)
    .fetch_optional(pool)
    .await
    .map_err(|e| Error::postgres("looking for the uuid index", e))?;
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| Error::postgres("connecting for the index build", e))?;
    // Index builds and validation scan the whole table: no statement
    // timeout on this session until they are done.
    sqlx::raw_sql("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await
        .map_err(|e| Error::postgres("preparing the index build", e))?;
    let index_name = format!("{}.{}", quote(&names.schema), quote(&names.index));
    if index == Some((false,)) {
        // Left invalid by a build that was interrupted.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP INDEX CONCURRENTLY IF EXISTS {index_name}"
        )))
        .execute(&mut *conn)
        .await
        .map_err(|e| Error::postgres("dropping an invalid uuid index", e))?;
    }
    if index != Some((true,)) {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} ({})",
            quote(&names.index),
            names.table,
            names.uuid
        )))
        .execute(&mut *conn)
        .await
        .map_err(|e| Error::postgres("building the unique uuid index", e))?;
        report.built_index = true;
    }

    // 4. NOT NULL without a scan under an exclusive lock.
    if !finished {
        let has_check: Option<(i32,)> = sqlx::query_as(
            "/* mezzanine */ SELECT 1 FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
             WHERE n.nspname = $1 AND c.conname = $2",
        )
        .bind(&names.schema)
        .bind(&names.check)
        .fetch_optional(pool)
        .await
        .map_err(|e| Error::postgres("looking for the not-null check", e))?;
        if has_check.is_none() {
            crate::connection::ddl(
                pool,
                LOCK_TIMEOUT,
                &format!(
                    "ALTER TABLE {} ADD CONSTRAINT {} CHECK ({} IS NOT NULL) NOT VALID",
                    names.table,
                    quote(&names.check),
                    names.uuid
                ),
                "adding the not-null check",
            )
            .await?;
        }
        // VALIDATE takes a lock that lets reads and writes go on.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "ALTER TABLE {} VALIDATE CONSTRAINT {}",
            names.table,
            quote(&names.check)
        )))
        .execute(&mut *conn)
        .await
        .map_err(|e| Error::postgres("validating the not-null check", e))?;
        crate::connection::ddl(
            pool,
            LOCK_TIMEOUT,
            &format!(
                "ALTER TABLE {t} ALTER COLUMN {u} SET NOT NULL;
                 ALTER TABLE {t} DROP CONSTRAINT {c};
                 DROP TRIGGER IF EXISTS mezzanine_fill_uuid ON {t}",
                t = names.table,
                u = names.uuid,
                c = quote(&names.check)
            ),
            "making the uuid column NOT NULL",
        )
        .await?;
        execute(
            pool,
            format!("DROP FUNCTION IF EXISTS {}()", names.function),
            "dropping the uuid fill function",
        )
        .await?;
        report.set_not_null = true;
    }
    // The session goes back to the pool: give it its timeout back.
    let timeout: (String,) = sqlx::query_as(
        "/* mezzanine */ SELECT reset_val FROM pg_settings WHERE name = 'statement_timeout'",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| Error::postgres("restoring the statement timeout", e))?;
    sqlx::query("/* mezzanine */ SELECT set_config('statement_timeout', $1, false)")
        .bind(&timeout.0)
        .execute(&mut *conn)
        .await
        .map_err(|e| Error::postgres("restoring the statement timeout", e))?;
    drop(conn);
    sqlx::query("/* mezzanine */ UPDATE mezzanine.add_uuid_progress SET finished_at = now() WHERE table_name = $1 AND finished_at IS NULL")
        .bind(&names.key)
        .execute(pool)
        .await
        .map_err(|e| Error::postgres("recording the end of add-uuid", e))?;
    Ok(report)
}

/// Fills NULL UUIDs in id-range batches from the recorded position.
async fn fill(
    pool: &PgPool,
    names: &Names,
    options: &Options,
    progress: &mut impl FnMut(Progress),
) -> Result<u64, Error> {
    let (low, high): (Option<i64>, Option<i64>) = sqlx::query_as(AssertSqlSafe(format!(
        "/* mezzanine */ SELECT min({id})::int8, max({id})::int8 FROM {t}",
        id = names.id,
        t = names.table
    )))
    .fetch_one(pool)
    .await
    .map_err(|e| Error::postgres("reading the id range", e))?;
    let (Some(low), Some(high)) = (low, high) else {
        return Ok(0);
    };
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.add_uuid_progress (table_name, next_id, last_id) VALUES ($1, $2, $3)
         ON CONFLICT (table_name) DO NOTHING",
    )
    .bind(&names.key)
    .bind(low)
    .bind(high)
    .execute(pool)
    .await
    .map_err(|e| Error::postgres("recording the start of add-uuid", e))?;
    let (mut next, last, mut filled): (i64, i64, i64) = sqlx::query_as(
        "/* mezzanine */ SELECT next_id, last_id, filled FROM mezzanine.add_uuid_progress WHERE table_name = $1",
    )
    .bind(&names.key)
    .fetch_one(pool)
    .await
    .map_err(|e| Error::postgres("reading add-uuid progress", e))?;
    let update = format!(
        "/* mezzanine */ UPDATE {t} SET {u} = gen_random_uuid() WHERE {id} >= $1 AND {id} < $2 AND {u} IS NULL",
        t = names.table,
        u = names.uuid,
        id = names.id
    );
    let mut this_run = 0u64;
    while next <= last {
        let end = next.saturating_add(options.batch.max(1));
        let mut tx = pool
            .begin()
            .await
            .map_err(|e| Error::postgres("filling uuids", e))?;
        let n = sqlx::query(AssertSqlSafe(update.clone()))
            .bind(next)
            .bind(end)
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::postgres(format!("filling uuids of ids {next}..{end}"), e))?
            .rows_affected();
        sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.add_uuid_progress SET next_id = $2, filled = filled + $3 WHERE table_name = $1",
        )
        .bind(&names.key)
        .bind(end)
        .bind(n as i64)
        .execute(&mut *tx)
        .await
        .map_err(|e| Error::postgres("recording add-uuid progress", e))?;
        tx.commit()
            .await
            .map_err(|e| Error::postgres("filling uuids", e))?;
        next = end;
        filled += n as i64;
        this_run += n;
        progress(Progress {
            filled: filled as u64,
            next_id: next,
            last_id: last,
        });
        if !options.pause.is_zero() {
            tokio::time::sleep(options.pause).await;
        }
    }
    // Rows the ranges could not see (inserted with an id below the start
    // before the trigger existed) are swept up here.
    let sweep = format!(
        "/* mezzanine */ UPDATE {t} SET {u} = gen_random_uuid() WHERE {id} IN (SELECT {id} FROM {t} WHERE {u} IS NULL LIMIT {n})",
        t = names.table,
        u = names.uuid,
        id = names.id,
        n = options.batch.max(1)
    );
    loop {
        let n = execute(pool, sweep.clone(), "sweeping rows left without a uuid").await?;
        if n == 0 {
            break;
        }
        this_run += n;
    }
    Ok(this_run)
}
