//! The relay: drains `mezzanine.outbox` into Schemaless.
//!
//! One batch is one PostgreSQL transaction: delete the oldest entries no
//! other relay holds (`FOR UPDATE SKIP LOCKED`, in the same statement),
//! write their cells to Schemaless with `put_cells`, commit. A crash or a
//! failure anywhere before the commit rolls the delete back and leaves the
//! entries in the outbox, to be delivered again (the cells that had landed
//! come back `AlreadyPresent`); nothing is lost and nothing is doubled,
//! because a cell is its address.
//!
//! Under load a relay lingers `mirror.relay_linger_ms` before a batch that
//! would not be full, so that one transaction carries many cells instead
//! of each write paying for a relay transaction of its own.
//!
//! The same relay delivers captured changes (`mezzanine.capture_queue`,
//! see [`crate::capture`]) when `capture.enabled`: each round moves a
//! batch of each.
//!
//! Three answers set an entry aside (into `mezzanine.outbox_parked`, with
//! the reason): a conflict (Schemaless holds a different body at the
//! address: the stores disagree, and a person must decide), input
//! Schemaless refuses (a body over its limits, a key a tombstone retired),
//! and a cell written under its key after the key's deletion
//! ([`crate::retired`]) that PostgreSQL still holds: Schemaless would
//! take even the same body as already there and hide it, so it is never
//! delivered; one PostgreSQL deleted again since is dropped (`retired`).
//! Everything else, a server down or a missing schema, fails the whole
//! batch, which is tried again after a backoff while the outbox grows.

use std::sync::Arc;
use std::time::Duration;

use schemaless::tombstone::Tombstoned;
use schemaless::{Body, Cell, CellStore, Column, ReadFrom, RefKey, RowKey, WriteOutcome};
use sqlx::{PgPool, Row};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::capture::{CaptureDelivery, Captured};
use crate::error::Error;
use crate::worker::{Heartbeat, WorkerStats};

/// What one batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Outbox entries whose cell is now in Schemaless (written or already
    /// there).
    pub delivered: u64,
    /// Of those, cells Schemaless already had.
    pub already_present: u64,
    /// Outbox entries set aside for good.
    pub parked: u64,
    /// Outbox entries written under a key deleted before them that
    /// PostgreSQL no longer holds (deleted again since): nothing to
    /// deliver, since Schemaless hides them too ([`crate::retired`]).
    pub retired: u64,
    /// Captured changes delivered.
    pub captured: Captured,
}

impl Moved {
    /// Entries that left the outbox or the capture queue (or the slot).
    pub fn total(&self) -> u64 {
        self.delivered + self.parked + self.retired + self.captured.entries
    }

    /// Whether nothing moved and nothing is known to wait (a slot read
    /// whose transactions were all skipped moved nothing, yet may have
    /// more).
    pub fn idle(&self) -> bool {
        self.total() == 0 && !self.captured.more
    }

    fn add(&mut self, other: Moved) {
        self.delivered += other.delivered;
        self.already_present += other.already_present;
        self.parked += other.parked;
        self.retired += other.retired;
        self.captured.add(other.captured);
    }
}

/// Drains the outbox and the capture queue into a cell store (Schemaless;
/// the in-memory model in tests).
pub struct Relay {
    pool: PgPool,
    /// The legacy tables, read for an entry written after its key's
    /// deletion.
    legacy: legacy::LegacyStore,
    /// `capture.tombstone_column`.
    tombstones: Column,
    target: Arc<dyn CellStore>,
    batch: usize,
    /// Bytes of body one batch may carry (`limits.max_batch_bytes`).
    batch_bytes: usize,
    limits: config::Limits,
    settings: config::Mirror,
    /// Captured changes, unless `capture.enabled` is off.
    capture: Option<CaptureDelivery>,
    stats: Arc<WorkerStats>,
    wake: Arc<Notify>,
}

/// The answer for one entry: delivered (with how), or parked (with why).
type Delivery = Result<WriteOutcome, String>;

impl Relay {
    /// A relay over `legacy`'s database into `target`, with the config's
    /// `[mirror]` settings (batches capped at `limits.max_batch_cells`);
    /// it delivers captured changes too, through `legacy`'s layout, unless
    /// `capture.enabled` is off. Writes go through `target`'s tombstones
    /// ([`Tombstoned`]): a cell one would hide is parked with the reason.
    pub fn new(
        legacy: &legacy::LegacyStore,
        target: Arc<dyn CellStore>,
        config: &config::Config,
    ) -> Result<Relay, Error> {
        // A cell a tombstone would hide (a row deleted, then written to
        // again) is refused there and parked here, not acknowledged and lost.
        // Captured changes are delivered as the rows are now, so for them
        // even the body stored before the deletion is the key written
        // again, not a redelivery.
        let current: Arc<dyn CellStore> =
            Arc::new(Tombstoned::new(target.clone(), config)?.current_state());
        let target: Arc<dyn CellStore> = Arc::new(Tombstoned::new(target, config)?);
        let mut settings = config.clone();
        settings.mirror.relay_batch = config.mirror.relay_batch.min(config.limits.max_batch_cells);
        let capture = match config.capture.enabled {
            true => Some(CaptureDelivery::new(legacy.clone(), current, &settings)?),
            false => None,
        };
        Ok(Relay {
            pool: legacy.pool().clone(),
            legacy: legacy.clone(),
            tombstones: legacy.tombstones().clone(),
            target,
            batch: settings.mirror.relay_batch,
            batch_bytes: config.limits.max_batch_bytes,
            limits: config.limits.clone(),
            settings: config.mirror.clone(),
            capture,
            stats: Arc::default(),
            wake: Arc::default(),
        })
    }

    /// The relay's counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// Notify it (`notify_one`) after committing outbox entries, so an
    /// idle relay starts at once instead of at its next poll.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Moves one batch of the oldest unlocked outbox entries, then one of
    /// captured changes. Returns what it did; nothing moved means both are
    /// empty or every entry is held by another relay. An error leaves every
    /// entry of the failed batch where it was.
    pub async fn relay_batch(&self) -> Result<Moved, Error> {
        let mut moved = self.relay_outbox().await?;
        if let Some(capture) = &self.capture {
            let captured = capture.deliver_batch().await?;
            let stats = &self.stats;
            stats.add(&stats.captured, captured.entries);
            stats.add(&stats.cells, captured.cells);
            stats.add(&stats.already_there, captured.already_present);
            stats.add(&stats.tombstones, captured.tombstones);
            stats.add(&stats.parked, captured.parked);
            moved.captured = captured;
        }
        Ok(moved)
    }

    /// Whether `moved` filled a batch of either kind (more may wait).
    fn full(&self, moved: &Moved) -> bool {
        moved.delivered + moved.parked + moved.retired >= self.batch as u64 || moved.captured.more
    }

    /// One batch of the outbox.
    async fn relay_outbox(&self) -> Result<Moved, Error> {
        let context = "relaying the outbox";
        let mut tx = self.pool.begin().await.map_err(Error::postgres(context))?;
        // Taken out of the outbox at once; if delivery fails, the rollback
        // puts them back. At most `batch` entries and, past the first,
        // `batch_bytes` of bodies: large entries cannot add up to more
        // memory than a batch may take. With each, the mark of a recorded
        // deletion of its row or address (`crate::retired`), if any.
        let rows = sqlx::query(
            "/* mezzanine */ DELETE FROM mezzanine.outbox o WHERE o.id IN (
                 SELECT id FROM (
                     SELECT id, sum(octet_length(body)) OVER (ORDER BY id) - octet_length(body) AS before
                     FROM (SELECT id, body FROM mezzanine.outbox ORDER BY id LIMIT $1
                           FOR UPDATE SKIP LOCKED) locked) sized
                 WHERE before < $2)
             RETURNING o.id, o.row_key, o.column_name, o.ref_key, o.body, o.enqueued_at::text,
                 (SELECT min(d.after) FROM mezzanine.deletions d
                  WHERE d.row_key = o.row_key
                    AND (d.column_name = '' OR (d.column_name = o.column_name AND d.ref_key = o.ref_key)))",
        )
        .bind(self.batch as i64)
        .bind(self.batch_bytes as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
        if rows.is_empty() {
            tx.commit().await.map_err(Error::postgres(context))?;
            return Ok(Moved::default());
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut cells = Vec::with_capacity(rows.len());
        // Per entry: the index of its cell in `cells`, nothing to deliver,
        // or why it is parked.
        let mut readable: Vec<Result<Option<usize>, String>> = Vec::with_capacity(rows.len());
        for row in &rows {
            let id = row.try_get::<i64, _>(0).map_err(Error::postgres(context))?;
            ids.push(id);
            let deleted_after: Option<i64> = row.try_get(6).map_err(Error::postgres(context))?;
            match entry_cell(row) {
                Ok(cell)
                    if cell.key.column != self.tombstones
                        && deleted_after.is_some_and(|after| after < id) =>
                {
                    let after = deleted_after.unwrap_or_default();
                    readable.push(self.written_after_deletion(&cell, id, after).await?);
                }
                Ok(cell) => {
                    readable.push(Ok(Some(cells.len())));
                    cells.push(cell);
                }
                Err(reason) => readable.push(Err(format!("unreadable outbox entry: {reason}"))),
            }
        }
        let delivered = self.deliver(cells).await?;

        let mut moved = Moved::default();
        let mut parked = Vec::new();
        for ((row, id), entry) in rows.iter().zip(&ids).zip(readable) {
            let delivery = match entry {
                Ok(Some(i)) => delivered[i].clone(),
                Ok(None) => {
                    moved.retired += 1;
                    continue;
                }
                Err(reason) => Err(reason),
            };
            match delivery {
                Ok(outcome) => {
                    moved.delivered += 1;
                    if outcome == WriteOutcome::AlreadyPresent {
                        moved.already_present += 1;
                    }
                }
                Err(reason) => {
                    tracing::warn!("outbox entry {id} parked: {reason}");
                    parked.push((row, *id, reason));
                }
            }
        }
        moved.parked = parked.len() as u64;
        for (row, id, reason) in parked {
            sqlx::query(
                "/* mezzanine */ INSERT INTO mezzanine.outbox_parked (id, row_key, column_name, ref_key, body, enqueued_at, error)
                 VALUES ($1, $2, $3, $4, $5, $6::text::timestamptz, $7)
                 ON CONFLICT (id) DO UPDATE SET error = EXCLUDED.error, parked_at = now()",
            )
            .bind(id)
            .bind(row.try_get::<uuid::Uuid, _>(1).map_err(Error::postgres(context))?)
            .bind(row.try_get::<String, _>(2).map_err(Error::postgres(context))?)
            .bind(row.try_get::<i64, _>(3).map_err(Error::postgres(context))?)
            .bind(row.try_get::<String, _>(4).map_err(Error::postgres(context))?)
            .bind(row.try_get::<String, _>(5).map_err(Error::postgres(context))?)
            .bind(reason)
            .execute(&mut *tx)
            .await
            .map_err(Error::postgres(context))?;
        }
        tx.commit().await.map_err(Error::postgres(context))?;
        let stats = &self.stats;
        stats.add(&stats.cells, moved.delivered);
        stats.add(&stats.already_there, moved.already_present);
        stats.add(&stats.parked, moved.parked);
        stats.add(&stats.retired, moved.retired);
        stats.add(&stats.batches, 1);
        Ok(moved)
    }

    /// Writes `cells`; per cell, what happened or why it is parked. Fails
    /// as a whole on anything that is not about one cell.
    async fn deliver(&self, cells: Vec<Cell>) -> Result<Vec<Delivery>, Error> {
        if cells.is_empty() {
            return Ok(Vec::new());
        }
        let cut = schemaless::cell::batches(&cells, &self.limits);
        if cut.len() > 1 {
            let mut out = Vec::with_capacity(cells.len());
            for batch in cut {
                out.extend(Box::pin(self.deliver(batch.to_vec())).await?);
            }
            return Ok(out);
        }
        match self.target.put_cells(cells.clone()).await {
            Ok(results) => {
                let mut out = Vec::with_capacity(results.len());
                for (cell, result) in cells.iter().zip(results) {
                    out.push(match result {
                        Ok(outcome) => Ok(outcome),
                        Err(conflict) => Err(self.conflict_reason(cell, &conflict.key).await),
                    });
                }
                Ok(out)
            }
            Err(schemaless::Error::InvalidInput { .. }) if cells.len() > 1 => {
                // One cell spoils the batch: find it by writing them one
                // at a time.
                let mut out = Vec::with_capacity(cells.len());
                for cell in cells {
                    let one = Box::pin(self.deliver(vec![cell])).await?;
                    out.extend(one);
                }
                Ok(out)
            }
            Err(schemaless::Error::InvalidInput { field, message, .. }) => Ok(vec![Err(format!(
                "Schemaless refuses the cell: invalid {field}: {message}"
            ))]),
            Err(e) => Err(e.into()),
        }
    }

    /// An entry written under a key whose deletion was recorded before it
    /// (`after`, see [`crate::retired`]): Schemaless would take it as
    /// already there, or refuse it, and hide it either way. Nothing to
    /// deliver (`None`) when PostgreSQL no longer holds the cell (deleted
    /// again since, the stores agree); parked with the reason while it
    /// does.
    async fn written_after_deletion(
        &self,
        cell: &Cell,
        id: i64,
        after: i64,
    ) -> Result<Result<Option<usize>, String>, Error> {
        if self
            .legacy
            .get_cell(&cell.key, ReadFrom::Master)
            .await?
            .is_none()
        {
            tracing::info!(
                "outbox entry {id} ({}) was written after its key's deletion and is deleted again: nothing to deliver",
                cell.key
            );
            return Ok(Ok(None));
        }
        Ok(Err(format!(
            "{key} was written to PostgreSQL after its deletion (outbox entry {id}; the deletion was \
             recorded after entry {after}), and PostgreSQL holds it: the tombstone in {tombstones} \
             retires the key, and Schemaless would hide the cell for good. If the row was meant to \
             stay deleted, delete it again in PostgreSQL; if it is a new entity, write it under a new \
             row key (or child address); then `mezzanine mirror retry`",
            key = cell.key,
            tombstones = self.tombstones,
        )))
    }

    async fn conflict_reason(&self, cell: &Cell, key: &schemaless::CellKey) -> String {
        let stored = match self.target.get_cell(key, ReadFrom::Master).await {
            Ok(Some(stored)) => stored.cell.body.to_string(),
            Ok(None) => "nothing (it vanished since)".into(),
            Err(e) => format!("an unreadable cell ({e})"),
        };
        format!(
            "conflict: Schemaless holds {key} with body {stored}, the legacy write was {}",
            cell.body
        )
    }

    /// Relays until the outbox and the capture queue have nothing this
    /// relay can take. Returns the total moved.
    pub async fn drain(&self) -> Result<Moved, Error> {
        let mut total = Moved::default();
        loop {
            let moved = self.relay_batch().await?;
            if moved.idle() {
                return Ok(total);
            }
            total.add(moved);
        }
    }

    /// Relays until `cancel`, while `enabled` says so: at once when woken,
    /// every `mirror.relay_poll_ms` when idle, after a growing backoff
    /// when Schemaless or PostgreSQL fails. Writes a heartbeat row every
    /// second.
    pub async fn run(&self, cancel: CancellationToken, mut enabled: watch::Receiver<bool>) {
        let mut heartbeat = Heartbeat::new("relay");
        let mut backoff = crate::worker::pauses(&self.settings);
        let poll = Duration::from_millis(self.settings.relay_poll_ms);
        let linger = Duration::from_millis(self.settings.relay_linger_ms);
        // Whether the last batch was full: then the next is taken at once.
        let mut full = false;
        tracing::info!("{} started", heartbeat.name());
        while !cancel.is_cancelled() {
            if !*enabled.borrow_and_update() {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = changed(&mut enabled) => continue,
                }
            }
            if !full && !linger.is_zero() {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(linger) => {}
                }
            }
            let woken = self.wake.notified();
            match self.relay_batch().await {
                Ok(moved) => {
                    backoff.succeeded();
                    heartbeat.beat(&self.pool, &self.stats).await;
                    full = self.full(&moved);
                    if !moved.idle() {
                        continue;
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = woken => {}
                        _ = tokio::time::sleep(poll) => {}
                        _ = changed(&mut enabled) => {}
                    }
                }
                Err(e) => {
                    self.stats.failed(&e.to_string());
                    let wait = backoff.failed();
                    tracing::warn!("{}: {e}; trying again in {wait:?}", heartbeat.name());
                    heartbeat.beat(&self.pool, &self.stats).await;
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        heartbeat.retire(&self.pool).await;
        tracing::info!("{} stopped", heartbeat.name());
    }
}

/// Resolves when `enabled` changes; never, once its sender is gone.
pub(crate) async fn changed(enabled: &mut watch::Receiver<bool>) {
    if enabled.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn entry_cell(row: &sqlx::postgres::PgRow) -> Result<Cell, String> {
    let row_key: uuid::Uuid = row.try_get(1).map_err(|e| e.to_string())?;
    let column: String = row.try_get(2).map_err(|e| e.to_string())?;
    let ref_key: i64 = row.try_get(3).map_err(|e| e.to_string())?;
    let body: String = row.try_get(4).map_err(|e| e.to_string())?;
    Ok(Cell::new(
        RowKey::from(row_key),
        Column::new(&column).map_err(|e| e.to_string())?,
        RefKey::new(ref_key).map_err(|e| e.to_string())?,
        Body::parse(&body).map_err(|e| e.to_string())?,
    ))
}
