//! Sessions to the legacy PostgreSQL database, all configured alike.
//!
//! Every session runs in UTC with ISO dates and a statement timeout, so
//! that what a value reads as never depends on the server's defaults, and a
//! stuck statement fails instead of hanging its caller.

use std::str::FromStr;
use std::time::Duration;

use schemaless::retry::{self, Retryable};
use schemaless::Failure;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};

use crate::error::Error;

/// The `[legacy]` section, or an error saying it is needed.
pub fn legacy_config(config: &config::Config) -> Result<&config::Legacy, Error> {
    config.legacy.as_ref().ok_or_else(|| {
        Error::Config("no [legacy] section: the legacy PostgreSQL database's url is needed".into())
    })
}

/// The `[layout]` section, or an error saying it is needed.
pub fn layout_config(config: &config::Config) -> Result<&config::Layout, Error> {
    config.layout.as_ref().ok_or_else(|| {
        Error::Config("no [layout] section: the legacy tables' mapping to columns is needed".into())
    })
}

/// Connection options for `url` with the toolkit's session settings.
pub fn options(url: &str, statement_timeout_ms: u64) -> Result<PgConnectOptions, Error> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| Error::Config(format!("legacy.url {}: {e}", config::urls::redact(url))))?;
    let timeout = statement_timeout_ms.to_string();
    Ok(options.application_name("mezzanine").options([
        ("TimeZone", "UTC"),
        ("DateStyle", "ISO, YMD"),
        ("IntervalStyle", "iso_8601"),
        ("extra_float_digits", "1"),
        ("bytea_output", "hex"),
        ("statement_timeout", timeout.as_str()),
    ]))
}

/// A pool to the legacy database (connections are opened lazily; the first
/// query says whether the server is there).
pub fn pool(legacy: &config::Legacy) -> Result<PgPool, Error> {
    // Only a connection idle for a while is pinged on its way out, as the
    // Schemaless nodes' are.
    Ok(schemaless::pool::ping_if_idle(
        PgPoolOptions::new()
            .max_connections(legacy.max_connections)
            .acquire_timeout(Duration::from_millis(legacy.statement_timeout_ms.max(1000))),
    )
    .connect_lazy_with(options(&legacy.url, legacy.statement_timeout_ms)?))
}

/// A small pool of sessions like [`pool`]'s that plan every prepared
/// statement generically (`plan_cache_mode`), for a statement whose plan
/// is the same whatever its parameters and costs more to plan than to
/// run: the check statement asked before a write in `primary`, with a
/// subquery per unique index, planned anew for each batch (PostgreSQL
/// keeps a custom plan when a generic one is estimated dearer, as one
/// over arrays of unknown length is) took a millisecond, to run a third
/// of that. Opened only when used.
pub fn generic_plans_pool(legacy: &config::Legacy) -> Result<PgPool, Error> {
    let options = options(&legacy.url, legacy.statement_timeout_ms)?
        .options([("plan_cache_mode", "force_generic_plan")]);
    Ok(schemaless::pool::ping_if_idle(
        PgPoolOptions::new()
            .max_connections((legacy.max_connections / 4).max(2))
            .acquire_timeout(Duration::from_millis(legacy.statement_timeout_ms.max(1000))),
    )
    .connect_lazy_with(options))
}

/// `host:port/database` of a URL, without user or password, for messages.
pub fn label(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "postgres {}:{}{}",
            u.host_str().unwrap_or("?"),
            u.port().unwrap_or(5432),
            u.path()
        ),
        Err(_) => "postgres".to_string(),
    }
}

/// Whether every relation of `relations` (`schema.name`: tables, indexes)
/// and every `(schema.table, column)` of `columns` exists: the fast path of
/// the toolkit's `ensure` functions. Their `CREATE ... IF NOT EXISTS` and
/// `ALTER TABLE ... ADD COLUMN IF NOT EXISTS` take their locks even when
/// there is nothing to do (an `ALTER` takes `ACCESS EXCLUSIVE`), so run on
/// every facade start, mode change and gate check under live traffic they
/// queue every reader of the table behind whatever transaction holds it.
/// An error reads as "not all present": the DDL then runs as before.
pub async fn present(pool: &PgPool, relations: &[&str], columns: &[(&str, &str)]) -> bool {
    let tables: Vec<String> = columns.iter().map(|(t, _)| t.to_string()).collect();
    let names: Vec<String> = columns.iter().map(|(_, c)| c.to_string()).collect();
    let relations: Vec<String> = relations.iter().map(|r| r.to_string()).collect();
    sqlx::query_scalar::<_, bool>(
        "/* mezzanine */ SELECT
             (SELECT bool_and(to_regclass(r) IS NOT NULL) FROM unnest($1::text[]) AS r)
             AND (SELECT count(*) = cardinality($2::text[]) FROM unnest($2::text[], $3::text[]) AS w(t, c)
                  WHERE EXISTS (SELECT 1 FROM pg_attribute a
                                WHERE a.attrelid = to_regclass(w.t) AND a.attname = w.c AND NOT a.attisdropped))",
    )
    .bind(&relations)
    .bind(&tables)
    .bind(&names)
    .fetch_one(pool)
    .await
    .unwrap_or(false)
}

/// How many times [`ddl`] asks for its lock again before it gives up.
const DDL_RETRIES: usize = 29;

/// Runs DDL that needs a strong lock (`sql`, one or more statements, in one
/// transaction) with a short `lock_timeout`, retrying with a growing pause
/// (50 ms doubling to 2 s, with jitter) when the lock is not granted or a
/// deadlock chose it, so that the app's statements never wait long behind
/// it. Gives up after 30 attempts with the last error.
pub async fn ddl(
    pool: &PgPool,
    lock_timeout: Duration,
    sql: &str,
    context: &str,
) -> Result<(), Error> {
    let attempt = || async {
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SET LOCAL lock_timeout = '{}ms'; {sql}",
            lock_timeout.as_millis().max(1)
        )))
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    };
    attempt
        .retry(retry::backoff(
            Duration::from_millis(50),
            Duration::from_secs(2),
            DDL_RETRIES,
        ))
        .when(|e| crate::classify(e) == Failure::Conflict)
        .notify(|_, wait| tracing::info!("{context}: lock not granted, retrying in {wait:?}"))
        .await
        .map_err(|e| Error::postgres(context.to_string(), e))
}

/// Whether `e` is PostgreSQL cancelling a statement at its
/// `statement_timeout` (or at a cancel request).
pub fn timed_out(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "57014")
}

/// The transactions of the legacy database open for longer than
/// `older_than` (the statement timeout), oldest first, at most five, one
/// line each: pid, application, client, state, age, what it waits on and
/// its last statement. A statement that ran past its timeout while
/// waiting for a lock waited on one of them: every statement of the
/// toolkit ends within the timeout, so only a transaction left open
/// across other work (an app's, or one idle in transaction) holds a lock
/// longer. Empty when there are none or they cannot be read.
pub async fn long_transactions(pool: &PgPool, older_than: Duration) -> Vec<String> {
    type Row = (i32, String, String, String, f64, String, String);
    let rows: Result<Vec<Row>, sqlx::Error> = sqlx::query_as(
        "/* mezzanine */ SELECT pid, coalesce(application_name, ''),
                coalesce(host(client_addr) || ':' || client_port, 'local'), coalesce(state, ''),
                extract(epoch FROM now() - xact_start)::float8,
                coalesce(wait_event_type || '/' || wait_event, 'not waiting'),
                left(regexp_replace(coalesce(query, ''), '\\s+', ' ', 'g'), 200)
         FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND xact_start < now() - make_interval(secs => $1)
         ORDER BY xact_start LIMIT 5",
    )
    .bind(older_than.as_secs_f64())
    .fetch_all(pool)
    .await;
    match rows {
        Ok(rows) => rows
            .into_iter()
            .map(|(pid, app, client, state, age, wait, query)| {
                format!(
                    "pid {pid} ({app:?} from {client}, {state}, open {age:.1}s, {wait}): {query}"
                )
            })
            .collect(),
        Err(e) => {
            tracing::debug!("reading the long transactions: {e}");
            Vec::new()
        }
    }
}
