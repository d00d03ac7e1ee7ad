//! `mezzanine verify report`: the figures cutover is decided on.
//!
//! Over a window (samples since a moment; the gates use the later of the
//! current mode's start and the backfill's end; counts are kept in
//! one-second buckets, and only buckets that start within the window
//! count: a window leaves out up to a second of samples, and never takes
//! in earlier ones, such as the mismatch a repair resolved just before the
//! mode changed): samples, matches and
//! mismatches per column, the mismatch rate with its 95% upper confidence
//! bound ([`crate::bound`]), the open mismatches, and coverage: per
//! column, the share of parent rows whose current cell was verified equal
//! (by a sample or the full diff) since it was written.

use legacy::LegacyStore;
use schemaless::Column;
use sqlx::{PgPool, Row};

use crate::bound::upper_bound;
use crate::error::Error;
use crate::store::{Counts, Settings};

/// Per column.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ColumnCounts {
    /// The column (`*` for counts of whole-row reads not tied to one).
    pub column: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
}

/// Verified share of one column.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Coverage {
    /// The column.
    pub column: String,
    /// Parent rows whose current cell of the column was verified.
    pub verified: u64,
    /// Parent rows (with a row key).
    pub rows: u64,
}

impl Coverage {
    /// verified / rows (1.0 without rows).
    pub fn share(&self) -> f64 {
        if self.rows == 0 {
            1.0
        } else {
            self.verified as f64 / self.rows as f64
        }
    }
}

/// One point of the match-rate series (10-second buckets).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Point {
    /// Bucket start, seconds since the epoch.
    pub at: f64,
    /// Samples compared.
    pub samples: u64,
    /// Mismatches.
    pub mismatches: u64,
}

/// The report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// Window start (seconds since the epoch), if the window is bounded.
    pub since: Option<f64>,
    /// Totals over the window.
    pub totals: Counts,
    /// Mean time of a replay on the other store, milliseconds (0 without
    /// replays).
    pub replay_mean_ms: f64,
    /// Per column.
    pub by_column: Vec<ColumnCounts>,
    /// mismatches / samples (0 without samples).
    pub mismatch_rate: f64,
    /// Its 95% upper confidence bound.
    pub upper_bound: f64,
    /// Mismatches not resolved, whenever found.
    pub open_mismatches: u64,
    /// Open mismatches per column.
    pub open_by_column: Vec<(String, u64)>,
    /// Coverage per layout column (empty when not computed).
    pub coverage: Vec<Coverage>,
    /// Samples and mismatches per 10 s over the last hour.
    pub series: Vec<Point>,
    /// The stored sampling settings (facades use `[verify]` without them).
    pub settings: Option<(f64, u64)>,
}

/// Reads the report (the verifier's tables must exist: see
/// [`crate::store::ensure`]). `legacy` given: coverage is computed too (a
/// scan of the parent table).
pub async fn read(
    pool: &PgPool,
    legacy: Option<&LegacyStore>,
    since: Option<f64>,
) -> Result<Report, Error> {
    let context = "reading the verifier's counts";
    let rows = sqlx::query(
        "/* mezzanine */ SELECT column_name, sum(samples)::int8, sum(matches)::int8, sum(mismatches)::int8, sum(transient)::int8,
                sum(unsettled)::int8, sum(pending_backfill)::int8, sum(replay_errors)::int8, sum(dropped)::int8,
                sum(replays)::int8, sum(replay_micros)::int8
         FROM mezzanine.verify_stats
         WHERE $1::float8 IS NULL OR bucket >= to_timestamp($1::float8)
         GROUP BY column_name ORDER BY column_name",
    )
    .bind(since)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    let mut totals = Counts::default();
    let mut by_column = Vec::new();
    for r in &rows {
        let n = |i: usize| -> Result<u64, Error> {
            Ok(r.try_get::<i64, _>(i).map_err(Error::postgres(context))? as u64)
        };
        let counts = Counts {
            samples: n(1)?,
            matches: n(2)?,
            mismatches: n(3)?,
            transient: n(4)?,
            unsettled: n(5)?,
            pending_backfill: n(6)?,
            replay_errors: n(7)?,
            dropped: n(8)?,
            replays: n(9)?,
            replay_micros: n(10)?,
        };
        totals.add(&counts);
        by_column.push(ColumnCounts {
            column: r.try_get(0).map_err(Error::postgres(context))?,
            counts,
        });
    }
    let open: Vec<(String, i64)> = sqlx::query_as(
        "/* mezzanine */ SELECT column_name, count(*) FROM mezzanine.verify_mismatches WHERE resolved_at IS NULL
         GROUP BY column_name ORDER BY column_name",
    )
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    let series: Vec<(f64, i64, i64)> = sqlx::query_as(
        "/* mezzanine */ SELECT (floor(extract(epoch FROM bucket) / 10) * 10)::float8 AS at, sum(samples)::int8, sum(mismatches)::int8
         FROM mezzanine.verify_stats WHERE bucket > now() - interval '1 hour'
         GROUP BY at ORDER BY at",
    )
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    let settings = crate::store::settings(pool).await?;
    let coverage = match legacy {
        Some(legacy) => coverage(pool, legacy).await?,
        None => Vec::new(),
    };
    Ok(Report {
        since,
        mismatch_rate: if totals.samples == 0 {
            0.0
        } else {
            totals.mismatches as f64 / totals.samples as f64
        },
        upper_bound: upper_bound(totals.mismatches, totals.samples),
        replay_mean_ms: if totals.replays == 0 {
            0.0
        } else {
            totals.replay_micros as f64 / totals.replays as f64 / 1000.0
        },
        totals,
        by_column,
        open_mismatches: open.iter().map(|(_, n)| *n as u64).sum(),
        open_by_column: open.into_iter().map(|(c, n)| (c, n as u64)).collect(),
        coverage,
        series: series
            .into_iter()
            .map(|(at, s, m)| Point {
                at,
                samples: s as u64,
                mismatches: m as u64,
            })
            .collect(),
        settings: settings.map(|s: Settings| (s.sample_rate, s.max_samples_per_sec)),
    })
}

/// Per layout column: parent rows whose current cell was verified since
/// its last write (a new ref key), and has no open mismatch (a change
/// that kept the ref key, as a hand-made UPDATE does).
pub async fn coverage(pool: &PgPool, legacy: &LegacyStore) -> Result<Vec<Coverage>, Error> {
    let mut out = Vec::new();
    let columns: Vec<Column> = legacy
        .layout()
        .columns
        .iter()
        .map(|c| c.name.clone())
        .collect();
    for column in columns {
        let Some(current) = legacy.current_ref_keys_sql(&column) else {
            continue;
        };
        let sql = format!(
            "/* mezzanine */ SELECT count(v.row_key), count(*) FROM ({current}) l
             LEFT JOIN mezzanine.verify_coverage v
               ON v.row_key = l.row_key AND v.column_name = $1 AND v.ref_key = l.ref_key
                  AND NOT EXISTS (SELECT 1 FROM mezzanine.verify_mismatches m
                                  WHERE m.row_key = l.row_key AND m.column_name = $1
                                    AND m.resolved_at IS NULL)"
        );
        let (verified, rows): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(column.as_str())
            .fetch_one(pool)
            .await
            .map_err(Error::postgres("reading the verified coverage"))?;
        out.push(Coverage {
            column: column.to_string(),
            verified: verified as u64,
            rows: rows as u64,
        });
    }
    Ok(out)
}
