//! `mezzanine.mode_history`: every change of the mode or of the read
//! share, with who, when, why, whether forced, and the gate's checks.

use serde::Serialize;
use sqlx::{PgPool, Row};

use super::*;
use crate::error::Error;

/// One line of `mezzanine.mode_history`: a change of the mode or of the
/// read share.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryEntry {
    /// When.
    pub at: String,
    /// `mode` or `reads`.
    pub kind: String,
    /// From which mode.
    pub from: String,
    /// To which mode (the same for a change of the read share).
    pub to: String,
    /// The read share after the change, where recorded.
    pub reads: Option<ReadShare>,
    /// Who (`user@host`, or `guard@host` for the guard).
    pub by: String,
    /// Whether a refusal was overridden.
    pub forced: bool,
    /// The refusal `--force` overrode, if any.
    pub overridden: Option<String>,
    /// The reason given.
    pub reason: Option<String>,
    /// The gate's checks of the step at that moment, with their figures
    /// (empty for a step back or a change of the read share).
    pub checks: Vec<Check>,
}

/// A history line about to be written, in the transaction of its change.
pub(super) struct NewEntry<'a> {
    pub(super) kind: &'static str,
    pub(super) from: Mode,
    pub(super) to: Mode,
    pub(super) reads: i32,
    pub(super) reads_columns: String,
    pub(super) by: &'a str,
    pub(super) overridden: Option<&'a str>,
    pub(super) reason: Option<&'a str>,
    pub(super) checks: &'a [Check],
}

impl NewEntry<'_> {
    /// Appends the line and notifies every facade (delivered when the
    /// transaction commits, never before).
    pub(super) async fn record(&self, tx: &mut sqlx::PgConnection) -> Result<(), Error> {
        let context = "recording the mode history";
        let checks = serde_json::to_string(self.checks).expect("checks serialize");
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.mode_history
                 (kind, from_mode, to_mode, changed_by, forced, overridden, reason, reads_bp, reads_columns, checks)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb)",
        )
        .bind(self.kind)
        .bind(self.from.as_str())
        .bind(self.to.as_str())
        .bind(self.by)
        .bind(self.overridden.is_some())
        .bind(self.overridden)
        .bind(self.reason)
        .bind(self.reads)
        .bind(&self.reads_columns)
        .bind(checks)
        .execute(&mut *tx)
        .await
        .map_err(|e| Error::postgres(context, e))?;
        sqlx::query("/* mezzanine */ SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(self.to.as_str())
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::postgres(context, e))?;
        Ok(())
    }
}

/// The latest `limit` changes of the mode and the read share, newest
/// first.
pub async fn history(pool: &PgPool, limit: i64) -> Result<Vec<HistoryEntry>, Error> {
    let context = "reading the mode history";
    let sql = format!(
        "/* mezzanine */ SELECT {}, kind, from_mode, to_mode, reads_bp, reads_columns::text, changed_by, forced, overridden, reason, checks::text
         FROM mezzanine.mode_history ORDER BY id DESC LIMIT $1",
        timestamp_sql("at")
    );
    let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(limit)
        .fetch_all(pool)
        .await
        .map_err(|e| Error::postgres(context, e))?;
    rows.iter()
        .map(|row| {
            let get = |e| Error::postgres(context, e);
            let bp: Option<i32> = row.try_get(4).map_err(get)?;
            let columns: Option<String> = row.try_get(5).map_err(get)?;
            let reads = match bp {
                Some(bp) => Some(ReadShare::from_row(bp, columns.as_deref().unwrap_or("{}"))?),
                None => None,
            };
            let checks: String = row.try_get(10).map_err(get)?;
            Ok(HistoryEntry {
                at: row.try_get(0).map_err(get)?,
                kind: row.try_get(1).map_err(get)?,
                from: row.try_get(2).map_err(get)?,
                to: row.try_get(3).map_err(get)?,
                reads,
                by: row.try_get(6).map_err(get)?,
                forced: row.try_get(7).map_err(get)?,
                overridden: row.try_get(8).map_err(get)?,
                reason: row.try_get(9).map_err(get)?,
                checks: checks_from_json(checks)?,
            })
        })
        .collect()
}

/// The checks recorded with a change (lines of an older version
/// recorded none: `[]`).
fn checks_from_json(value: String) -> Result<Vec<Check>, Error> {
    serde_json::from_str(&value).map_err(|e| {
        Error::Corrupt(format!(
            "mezzanine.mode_history holds checks that do not read ({e}): {value}"
        ))
    })
}
