//! What `mezzanine capture status` shows, the gates check and the metrics
//! export: the tables covered, the queue's depth and age, what is parked.

use std::collections::BTreeMap;

use legacy::Layout;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::install::{self, Coverage};
use crate::error::Error;

/// The queue and what is parked.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Queue {
    /// Entries waiting in `mezzanine.capture_queue`.
    pub depth: u64,
    /// Age of the oldest, in seconds (since its change was captured).
    pub oldest_secs: Option<f64>,
    /// Entries set aside in `mezzanine.capture_parked`.
    pub parked: u64,
    /// Of those, per kind (`no_new_version`, `edited_in_place`,
    /// `unreadable`, `refused`, `truncate`, `conflict`).
    pub parked_by_kind: BTreeMap<String, u64>,
    /// With `capture.method = "logical"`: the slot, which holds the
    /// changes not delivered yet (`oldest_secs` includes its oldest).
    pub slot: Option<super::slot::Slot>,
}

/// A parked change.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Parked {
    /// Its number in `mezzanine.capture_parked`.
    pub id: i64,
    /// The layout column; none for the parent row as a whole.
    pub column: Option<String>,
    /// The parent's id.
    pub parent_id: Option<i64>,
    /// The row key, when the change carried it.
    pub row_key: Option<String>,
    /// The child's ref key.
    pub ref_key: Option<i64>,
    /// `w` (written), `d` (deleted), `t` (truncated).
    pub op: String,
    /// Why, by kind.
    pub kind: String,
    /// Why, in words.
    pub reason: String,
    /// The body the legacy tables have, if any.
    pub legacy_body: Option<String>,
    /// The body Schemaless has at the address, if any.
    pub schemaless_body: Option<String>,
    /// When it was parked, seconds since the epoch.
    pub parked_at: f64,
}

/// Everything `capture status` shows.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CaptureStatus {
    /// `capture.enabled`.
    pub enabled: bool,
    /// `capture.bump_version`.
    pub bump_version: bool,
    /// `capture.required`.
    pub required: bool,
    /// Per table of the layout, how it is covered.
    pub tables: Vec<Coverage>,
    /// The queue and what is parked.
    pub queue: Queue,
    /// The latest parked changes.
    pub recent_parked: Vec<Parked>,
}

/// The queue's depth and age and the parked entries: cheap enough for
/// every scrape and gate check.
pub async fn queue(pool: &PgPool) -> Result<Queue, Error> {
    let context = "reading the capture queue";
    let row = sqlx::query(
        "/* mezzanine */ SELECT (SELECT count(*) FROM mezzanine.capture_queue),
                (SELECT extract(epoch FROM clock_timestamp() - min(captured_at))::float8 FROM mezzanine.capture_queue),
                (SELECT count(*) FROM mezzanine.capture_parked)",
    )
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    let depth: i64 = row.try_get(0).map_err(Error::postgres(context))?;
    let oldest: Option<f64> = row.try_get(1).map_err(Error::postgres(context))?;
    let parked: i64 = row.try_get(2).map_err(Error::postgres(context))?;
    let mut parked_by_kind = BTreeMap::new();
    if parked > 0 {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "/* mezzanine */ SELECT kind, count(*) FROM mezzanine.capture_parked GROUP BY kind ORDER BY kind",
        )
        .fetch_all(pool)
        .await
        .map_err(Error::postgres(context))?;
        parked_by_kind = rows.into_iter().map(|(k, n)| (k, n as u64)).collect();
    }
    // The slot, if logical capture has one: its oldest change counts as
    // the queue's (reading it needs the REPLICATION attribute; without,
    // the slot's size still shows).
    let slot = super::slot::slot(pool).await?;
    let mut oldest = oldest;
    if slot.is_some() {
        match super::slot::oldest_pending(pool).await {
            Ok(Some(age)) => oldest = Some(oldest.map_or(age, |o| o.max(age))),
            Ok(None) => {}
            Err(e) => tracing::debug!("the capture slot's oldest change: {e}"),
        }
    }
    Ok(Queue {
        depth: depth as u64,
        oldest_secs: oldest,
        parked: parked as u64,
        parked_by_kind,
        slot,
    })
}

/// The `limit` most recently parked changes.
pub async fn parked(pool: &PgPool, limit: i64) -> Result<Vec<Parked>, Error> {
    let context = "reading parked captured changes";
    let rows = sqlx::query(
        "/* mezzanine */ SELECT id, column_name, parent_id, row_key::text, ref_key, op::text, kind, reason,
                legacy_body, schemaless_body, extract(epoch FROM parked_at)::float8
         FROM mezzanine.capture_parked ORDER BY parked_at DESC, id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    rows.iter()
        .map(|row| {
            Ok(Parked {
                id: row.try_get(0)?,
                column: row.try_get(1)?,
                parent_id: row.try_get(2)?,
                row_key: row.try_get(3)?,
                ref_key: row.try_get(4)?,
                op: row.try_get(5)?,
                kind: row.try_get(6)?,
                reason: row.try_get(7)?,
                legacy_body: row.try_get(8)?,
                schemaless_body: row.try_get(9)?,
                parked_at: row.try_get(10)?,
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::postgres(context))
}

/// The whole status; `layout` to report the tables covered.
pub async fn read(
    pool: &PgPool,
    layout: Option<&Layout>,
    settings: &config::Capture,
) -> Result<CaptureStatus, Error> {
    let tables = match layout {
        Some(layout) => install::coverage(pool, layout, settings).await?,
        None => Vec::new(),
    };
    Ok(CaptureStatus {
        enabled: settings.enabled,
        bump_version: settings.bump_version,
        required: settings.required,
        tables,
        queue: queue(pool).await?,
        recent_parked: parked(pool, 10).await?,
    })
}

/// Puts every parked change back into the queue, to be read and
/// delivered again: after the cause was fixed (a version raised, a row
/// corrected), or to see whether it still holds. Returns how many.
pub async fn retry_parked(pool: &PgPool) -> Result<u64, Error> {
    let context = "retrying parked captured changes";
    let moved = sqlx::query(
        "/* mezzanine */ WITH parked AS (DELETE FROM mezzanine.capture_parked
                         RETURNING column_name, parent_id, row_key, ref_key, op, captured_at)
         INSERT INTO mezzanine.capture_queue (column_name, parent_id, row_key, ref_key, op, captured_at)
         SELECT * FROM parked",
    )
    .execute(pool)
    .await
    .map_err(Error::postgres(context))?;
    Ok(moved.rows_affected())
}

/// Whether changes of these rows (by row key) wait in the capture queue
/// or in the logical slot: the verifier's triage waits for them before it
/// judges a difference. `layout` finds the rows' parent ids, which child
/// changes carry.
pub async fn holds(pool: &PgPool, layout: &Layout, rows: &[Uuid]) -> Result<bool, Error> {
    let context = "looking for captured changes of rows";
    let parents: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "/* mezzanine */ SELECT p.{id}::int8 FROM {table} p WHERE p.{uuid} = ANY($1)",
        id = layout.id_sql(),
        table = layout.table_sql(),
        uuid = layout.uuid_sql(),
    )))
    .bind(rows)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    let queued: bool = sqlx::query_scalar(
        "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM mezzanine.capture_queue
             WHERE row_key = ANY($1) OR parent_id = ANY($2))",
    )
    .bind(rows)
    .bind(&parents)
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    if queued || super::slot::slot(pool).await?.is_none() {
        return Ok(queued);
    }
    Ok(super::slot::pending(pool, layout, SLOT_LOOKAHEAD)
        .await?
        .iter()
        .any(|c| {
            c.row_key.is_some_and(|r| rows.contains(&r))
                || c.parent_id.is_some_and(|p| parents.contains(&p))
        }))
}

/// How many of the slot's changes triage looks through for a row's.
const SLOT_LOOKAHEAD: usize = 20_000;
