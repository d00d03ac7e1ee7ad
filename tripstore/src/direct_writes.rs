//! The `primary` gate's count of direct writes: writes to layout tables by
//! statements Mezzanine did not send, since the current mode began.
//!
//! `pg_stat_statements` counts calls per statement since its last reset;
//! a snapshot of those counts is taken whenever a mode is entered (the
//! gates' `prepare`), and the gate counts the calls since. Mezzanine's own
//! statements start with `/* mezzanine */` ([`query::audit::OWN_MARK`]):
//! the facade's writes, the reverse mirror's and repair's are not direct.
//! A statement is a write to a layout table when it parses as INSERT,
//! UPDATE, DELETE, MERGE, TRUNCATE or COPY FROM into one
//! ([`query::audit::direct_write`]).
//!
//! The proxy forwards an app's translatable writes to PostgreSQL before
//! `primary`, and runs them through the facade from then on: they are
//! not direct writes that would go on behind the step. PostgreSQL cannot
//! tell them from the app's own (the proxy sends the app's statement as
//! it came, in the app's session), so each proxy counts them by mode and
//! [`query::audit::shape`] in `mezzanine.proxied_writes`
//! ([`record_proxied`]), and the count here takes those calls off the
//! statements of the same shape. The table is emptied with each
//! snapshot, and only the current mode's counts are taken off: a proxy
//! tags a write with the mode it saw, which changes only after the
//! snapshot. A forwarded write PostgreSQL then failed is counted by the
//! proxy and not by `pg_stat_statements`; it can hide at most one call of
//! the same statement by another writer.

use sqlx::PgPool;

use crate::error::Error;

/// Statements shown in a refusal.
const SHOWN: usize = 5;

/// Takes the snapshot the next count starts from. Creates the extension
/// if the server offers it; without it (or without the right to read
/// it), the snapshot is skipped with a warning and the gate says why.
pub async fn snapshot(pool: &PgPool) -> Result<(), Error> {
    ensure_table(pool).await?;
    if let Err(e) =
        sqlx::raw_sql("/* mezzanine */ CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(pool)
            .await
    {
        tracing::warn!("pg_stat_statements cannot be created, so the primary gate cannot count direct writes: {e}");
        return Ok(());
    }
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| Error::postgres("snapshotting pg_stat_statements", e))?;
    let taken = async {
        sqlx::query("/* mezzanine */ DELETE FROM mezzanine.statement_baseline")
            .execute(&mut *tx)
            .await?;
        sqlx::query("/* mezzanine */ DELETE FROM mezzanine.proxied_writes")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.statement_baseline (userid, queryid, toplevel, calls)
             SELECT s.userid, s.queryid, s.toplevel, s.calls FROM pg_stat_statements s
             JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = current_database() AND s.queryid IS NOT NULL
             ON CONFLICT DO NOTHING",
        )
        .execute(&mut *tx)
        .await
    }
    .await;
    match taken {
        Ok(_) => tx
            .commit()
            .await
            .map_err(|e| Error::postgres("snapshotting pg_stat_statements", e)),
        Err(e) => {
            tracing::warn!("pg_stat_statements cannot be read, so the primary gate cannot count direct writes: {e}");
            Ok(())
        }
    }
}

/// The snapshot's table, and the proxies' counts.
async fn ensure_table(pool: &PgPool) -> Result<(), Error> {
    sqlx::raw_sql(
        "/* mezzanine */ CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.statement_baseline (
             userid oid NOT NULL,
             queryid bigint NOT NULL,
             toplevel boolean NOT NULL,
             calls bigint NOT NULL,
             taken_at timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (userid, queryid, toplevel)
         );
         CREATE TABLE IF NOT EXISTS mezzanine.proxied_writes (
             mode text NOT NULL,
             shape text NOT NULL,
             calls bigint NOT NULL,
             PRIMARY KEY (mode, shape)
         )",
    )
    .execute(pool)
    .await
    .map_err(|e| Error::postgres("creating mezzanine.statement_baseline", e))?;
    Ok(())
}

/// Adds a proxy's counts of the translatable writes it forwarded, by
/// (mode, shape), to `mezzanine.proxied_writes`, in one statement.
pub async fn record_proxied(
    pool: &PgPool,
    counts: &[(crate::Mode, String, u64)],
) -> Result<(), Error> {
    if counts.is_empty() {
        return Ok(());
    }
    let modes: Vec<&str> = counts.iter().map(|(m, _, _)| m.as_str()).collect();
    let shapes: Vec<&str> = counts.iter().map(|(_, s, _)| s.as_str()).collect();
    let calls: Vec<i64> = counts
        .iter()
        .map(|(_, _, n)| i64::try_from(*n).unwrap_or(i64::MAX))
        .collect();
    let record = || {
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.proxied_writes (mode, shape, calls)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[])
             ON CONFLICT (mode, shape) DO UPDATE SET calls = proxied_writes.calls + EXCLUDED.calls",
        )
        .bind(&modes)
        .bind(&shapes)
        .bind(&calls)
        .execute(pool)
    };
    let context = "recording the proxy's forwarded writes";
    match record().await {
        Ok(_) => Ok(()),
        // The table is made by the first snapshot or the first record.
        Err(e) if e.as_database_error().and_then(|d| d.code()).as_deref() == Some("42P01") => {
            ensure_table(pool).await?;
            record()
                .await
                .map(|_| ())
                .map_err(|e| Error::postgres(context, e))
        }
        Err(e) => Err(Error::postgres(context, e)),
    }
}

/// One statement's direct writes since the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct DirectWrite {
    pub table: String,
    pub sql: String,
    pub calls: u64,
}

/// The direct writes since the snapshot, most first; `Err` when they
/// cannot be counted.
pub async fn since_snapshot(
    pool: &PgPool,
    model: &query::Model,
    mode: crate::Mode,
) -> Result<Vec<DirectWrite>, String> {
    // A mode entered before this check existed has no snapshot: every
    // call since the statistics' last reset counts.
    ensure_table(pool).await.map_err(|e| e.to_string())?;
    let rows: Vec<(Option<String>, i64, Option<i64>)> = sqlx::query_as(
        "/* mezzanine */ SELECT s.query, s.calls, b.calls FROM pg_stat_statements s
         JOIN pg_database d ON d.oid = s.dbid
         LEFT JOIN mezzanine.statement_baseline b
           ON b.userid = s.userid AND b.queryid = s.queryid AND b.toplevel = s.toplevel
         WHERE d.datname = current_database()",
    )
    .fetch_all(pool)
    .await
    .map_err(|e| {
        format!(
            "direct writes to the layout's tables cannot be counted ({e}): gates.max_direct_writes \
             needs pg_stat_statements (in shared_preload_libraries, and CREATE EXTENSION \
             pg_stat_statements, which entering a mode tries)"
        )
    })?;
    // The proxies' forwarded writes in this mode, by shape.
    let proxied: Vec<(String, i64)> = sqlx::query_as(
        "/* mezzanine */ SELECT shape, calls FROM mezzanine.proxied_writes WHERE mode = $1",
    )
    .bind(mode.as_str())
    .fetch_all(pool)
    .await
    .map_err(|e| format!("reading the proxies' forwarded writes: {e}"))?;
    let mut proxied: std::collections::HashMap<String, i64> = proxied.into_iter().collect();
    let mut found: Vec<DirectWrite> = Vec::new();
    for (sql, calls, before) in rows {
        let Some(sql) = sql else { continue };
        // A reset of the statistics since the snapshot: all of it is new.
        let calls = match before {
            Some(before) if calls >= before => calls - before,
            _ => calls,
        };
        if calls <= 0 {
            continue;
        }
        if let Some(table) = query::audit::direct_write(model, &sql) {
            let through_proxy = query::audit::shape_of(&sql)
                .and_then(|shape| proxied.get_mut(&shape))
                .map_or(0, |left| {
                    let taken = (*left).min(calls);
                    *left -= taken;
                    taken
                });
            let calls = calls - through_proxy;
            if calls <= 0 {
                continue;
            }
            found.push(DirectWrite {
                table,
                sql,
                calls: calls as u64,
            });
        }
    }
    found.sort_by(|a, b| b.calls.cmp(&a.calls).then_with(|| a.sql.cmp(&b.sql)));
    Ok(found)
}

/// The refusal of the step to `to` for `writes` over `max`, or `None`.
pub fn refusal(writes: &[DirectWrite], max: u64, to: crate::Mode) -> Option<String> {
    let total: u64 = writes.iter().map(|w| w.calls).sum();
    if total <= max {
        return None;
    }
    let shown: Vec<String> = writes
        .iter()
        .take(SHOWN)
        .map(|w| format!("{} x {}", w.calls, query::audit::one_line(&w.sql, 120)))
        .collect();
    let more = writes.len().saturating_sub(SHOWN);
    Some(format!(
        "{total} writes to layout tables since this mode began came from statements Mezzanine did \
         not send (gates.max_direct_writes = {max}); {}: move them to the facade (out of \
         transaction blocks, through the proxy), then step again. {}{}",
        if to == crate::Mode::Schemaless {
            "in schemaless no one reads PostgreSQL any more, and such a write would be stranded \
             there; one made in primary may already differ from Schemaless (`mezzanine verify \
             full` shows where)"
        } else {
            "in primary they would land where reads no longer come from"
        },
        shown.join("; "),
        if more > 0 {
            format!(
                "; and {more} more statements (`mezzanine query audit --from-pg-stat-statements`)"
            )
        } else {
            String::new()
        }
    ))
}
