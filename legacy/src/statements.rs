//! The statements the legacy database has run, from `pg_stat_statements`:
//! the live inventory `mezzanine query audit --from-pg-stat-statements`
//! classifies.

use sqlx::PgPool;

use crate::Error;

/// One normalized statement (`$n` where its constants were) and how much
/// it ran since the statistics were last reset.
#[derive(Clone, Debug, PartialEq)]
pub struct Statement {
    pub query: String,
    pub calls: u64,
    pub total_ms: f64,
}

/// The statements run on the current database with at least `min_calls`
/// calls, most called first. Statements of every user are read, which
/// needs the `pg_read_all_stats` role (or a superuser) to see their text.
pub async fn read(pool: &PgPool, min_calls: u64) -> Result<Vec<Statement>, Error> {
    let installed: Option<(String,)> = sqlx::query_as(
        "/* mezzanine */ SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements'",
    )
    .fetch_optional(pool)
    .await
    .map_err(|e| Error::postgres("looking for pg_stat_statements", e))?;
    if installed.is_none() {
        return Err(Error::Config(
            "pg_stat_statements is not installed in the legacy database: add it to \
             shared_preload_libraries, restart, and run CREATE EXTENSION pg_stat_statements \
             (the dev cluster preloads it and `mezzanine legacy init` creates it)"
                .into(),
        ));
    }
    let rows: Vec<(Option<String>, i64, f64)> = sqlx::query_as(
        "/* mezzanine */ SELECT s.query, s.calls::bigint, s.total_exec_time::float8
         FROM pg_stat_statements s
         JOIN pg_database d ON d.oid = s.dbid
         WHERE d.datname = current_database() AND s.calls >= $1
         ORDER BY s.calls DESC, s.queryid",
    )
    .bind(i64::try_from(min_calls).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await
    .map_err(|e| {
        Error::postgres(
            "reading pg_stat_statements (is it in shared_preload_libraries?)",
            e,
        )
    })?;
    Ok(rows
        .into_iter()
        .filter_map(|(query, calls, total_ms)| {
            Some(Statement {
                // NULL: another user's statement this role may not see.
                query: query?,
                calls: u64::try_from(calls).unwrap_or(0),
                total_ms,
            })
        })
        .collect())
}
