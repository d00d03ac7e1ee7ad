//! What `mezzanine mirror status` prints and the metrics export.

use schemaless::MySqlStore;
use sqlx::{PgPool, Row};

use crate::error::Error;

/// Workers whose heartbeat is older than this are shown as gone.
pub const STALE_AFTER_SECS: f64 = 10.0;

/// The state of both directions of the mirror.
#[derive(Clone, Debug, Default)]
pub struct MirrorStatus {
    /// Entries waiting in `mezzanine.outbox`.
    pub outbox_depth: u64,
    /// Age of the oldest waiting entry, in seconds.
    pub outbox_oldest_secs: Option<f64>,
    /// Entries set aside in `mezzanine.outbox_parked`.
    pub outbox_parked: u64,
    /// Per shard with a reverse offset: how far the reverse mirror is.
    /// Empty before the reverse mirror ever started.
    pub reverse: Vec<ShardLag>,
    /// Why the reverse lag could not be measured (Schemaless unreachable).
    pub reverse_error: Option<String>,
    /// Cells in `mezzanine.reverse_parked`.
    pub reverse_parked: u64,
    /// Relays and reverse mirrors that wrote a heartbeat in the last hour.
    pub workers: Vec<Worker>,
    /// The capture queue and its parked changes.
    pub capture: crate::capture::Queue,
    /// Buffered writes (the relay's or anyone's) acknowledged while a
    /// master was down and later found beaten by another body at their
    /// address, recorded by Schemaless's reconciler: the relay counted
    /// them delivered. `None`: not read.
    pub lost_buffered_writes: Option<u64>,
}

impl MirrorStatus {
    /// Change-log cells not yet applied to the legacy tables, over every
    /// shard.
    pub fn reverse_lag(&self) -> u64 {
        self.reverse.iter().map(|s| s.lag).sum()
    }
}

/// The reverse mirror's position on one shard.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ShardLag {
    /// The shard.
    pub shard: u32,
    /// The last added_id applied.
    pub offset: u64,
    /// The newest added_id of the shard's change log.
    pub head: u64,
    /// Cells between them (`head - offset`).
    pub lag: u64,
    /// Ids below the offset still awaited (commits in flight).
    pub awaited: usize,
    /// Change-log cells applied on this shard since its offset was set.
    pub applied: u64,
}

/// A relay or reverse mirror, from its heartbeat row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Worker {
    /// `kind:host:pid:suffix`.
    pub name: String,
    /// `relay` or `reverse`.
    pub kind: String,
    /// Seconds since its last heartbeat.
    pub silent_secs: f64,
    /// Cells it moved since it started.
    pub cells: u64,
    /// Cells per second over its last heartbeat interval.
    pub rate: f64,
    /// Failed attempts since it started.
    pub failures: u64,
    /// Entries it parked since it started.
    pub parked: u64,
    /// Its last failure.
    pub last_error: Option<String>,
}

impl Worker {
    /// Whether it has not written a heartbeat for [`STALE_AFTER_SECS`].
    pub fn stale(&self) -> bool {
        self.silent_secs > STALE_AFTER_SECS
    }
}

/// Depth and age of the outbox, and its parked entries.
pub async fn outbox(pool: &PgPool) -> Result<(u64, Option<f64>, u64), Error> {
    let row = sqlx::query(
        "/* mezzanine */ SELECT (SELECT count(*) FROM mezzanine.outbox),
                (SELECT extract(epoch FROM clock_timestamp() - min(enqueued_at))::float8 FROM mezzanine.outbox),
                (SELECT count(*) FROM mezzanine.outbox_parked)",
    )
    .fetch_one(pool)
    .await
    .map_err(Error::postgres("reading the outbox"))?;
    let get = Error::postgres("reading the outbox");
    let depth: i64 = row.try_get(0).map_err(get)?;
    let oldest: Option<f64> = row
        .try_get(1)
        .map_err(Error::postgres("reading the outbox"))?;
    let parked: i64 = row
        .try_get(2)
        .map_err(Error::postgres("reading the outbox"))?;
    Ok((depth as u64, oldest, parked as u64))
}

/// Everything at once. Schemaless is only asked for its change-log heads;
/// when it cannot answer, the rest is still reported.
pub async fn read(pool: &PgPool, schemaless: &MySqlStore) -> Result<MirrorStatus, Error> {
    let (outbox_depth, outbox_oldest_secs, outbox_parked) = outbox(pool).await?;
    let context = "reading the reverse offsets";
    let offsets = sqlx::query(
        "/* mezzanine */ SELECT shard, added_id, cardinality(awaited), applied FROM mezzanine.reverse_offsets ORDER BY shard",
    )
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    let reverse_parked: i64 =
        sqlx::query_scalar("/* mezzanine */ SELECT count(*) FROM mezzanine.reverse_parked")
            .fetch_one(pool)
            .await
            .map_err(Error::postgres(context))?;
    let mut status = MirrorStatus {
        outbox_depth,
        outbox_oldest_secs,
        outbox_parked,
        reverse_parked: reverse_parked as u64,
        capture: crate::capture::status::queue(pool).await?,
        ..MirrorStatus::default()
    };
    let (lost, unread) = schemaless::mysql::lost::read(schemaless, false).await;
    if unread.is_empty() {
        status.lost_buffered_writes = Some(lost.len() as u64);
    }
    if !offsets.is_empty() {
        match schemaless.log_heads().await {
            Ok(heads) => {
                for row in &offsets {
                    let shard: i32 = row.try_get(0).map_err(Error::postgres(context))?;
                    let offset: i64 = row.try_get(1).map_err(Error::postgres(context))?;
                    let awaited: i32 = row.try_get(2).map_err(Error::postgres(context))?;
                    let applied: i64 = row.try_get(3).map_err(Error::postgres(context))?;
                    let head = heads.get(shard as usize).copied().unwrap_or(0);
                    status.reverse.push(ShardLag {
                        shard: shard as u32,
                        offset: offset as u64,
                        head,
                        lag: head.saturating_sub(offset as u64),
                        awaited: awaited.max(0) as usize,
                        applied: applied as u64,
                    });
                }
            }
            Err(e) => status.reverse_error = Some(e.to_string()),
        }
    }
    let context = "reading the mirror's workers";
    let rows = sqlx::query(
        "/* mezzanine */ SELECT name, kind, extract(epoch FROM now() - heartbeat_at)::float8, cells, rate, failures, parked, last_error
         FROM mezzanine.mirror_workers ORDER BY kind, name",
    )
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    for row in rows {
        let get = |i: usize| row.try_get::<i64, _>(i).map(|v| v.max(0) as u64);
        status.workers.push(Worker {
            name: row.try_get(0).map_err(Error::postgres(context))?,
            kind: row.try_get(1).map_err(Error::postgres(context))?,
            silent_secs: row.try_get(2).map_err(Error::postgres(context))?,
            cells: get(3).map_err(Error::postgres(context))?,
            rate: row.try_get(4).map_err(Error::postgres(context))?,
            failures: get(5).map_err(Error::postgres(context))?,
            parked: get(6).map_err(Error::postgres(context))?,
            last_error: row.try_get(7).map_err(Error::postgres(context))?,
        });
    }
    Ok(status)
}

/// Puts every parked outbox entry back into the outbox (after the cause
/// was fixed). Returns how many.
pub async fn retry_parked_outbox(pool: &PgPool) -> Result<u64, Error> {
    let context = "retrying parked outbox entries";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    let moved = sqlx::query(
        "/* mezzanine */ WITH parked AS (DELETE FROM mezzanine.outbox_parked RETURNING row_key, column_name, ref_key, body, enqueued_at, id)
         INSERT INTO mezzanine.outbox (row_key, column_name, ref_key, body, enqueued_at)
         SELECT row_key, column_name, ref_key, body, enqueued_at FROM parked ORDER BY id",
    )
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))?;
    Ok(moved.rows_affected())
}
