//! Delivering captured changes: the relay's half for
//! `mezzanine.capture_queue`.
//!
//! A queue entry says *which* parent changed in which column, not *how*:
//! the relay reads the rows as they are now, through the layout, and
//! writes their cells. So a change is always delivered at its newest
//! version, and the order entries are taken in does not matter (cells are
//! immutable; the latest is the highest ref key).
//!
//! One batch is one PostgreSQL transaction, as for the outbox:
//!
//! 1. delete entries no other relay holds (`FOR UPDATE SKIP LOCKED`, in
//!    the same statement; by `ctid`, since the queue has no key: any
//!    entries will do);
//! 2. read the rows behind them in the same transaction, after the delete
//!    (so every change whose entry was taken is visible): the parents in
//!    one query, each child table in one
//!    ([`legacy::LegacyStore::read_current`]);
//! 3. write the cells to Schemaless with `put_cells`: a row column's
//!    current cell, each changed child row's cell, and a tombstone per
//!    deletion (see [`schemaless::tombstone`]: `{"row": true}` for a
//!    parent, `{"column", "ref_key"}` for a child row, at a ref key
//!    derived from what it deletes, so a redelivery is `AlreadyPresent`);
//! 4. record the tombstones written in `mezzanine.deletions` (see
//!    [`crate::retired`]), park what Schemaless cannot take, with the
//!    reason and both bodies, in `mezzanine.capture_parked`; commit.
//!
//! A crash anywhere before the commit puts the entries back, and they are
//! delivered again (`AlreadyPresent` for what had landed). A change whose
//! row is gone by the time it is read (deleted or moved since) writes
//! nothing: the entry of that deletion does. A deleted row that is back
//! (the same row key, or the same child address, inserted again) before
//! its deletion was delivered gets no tombstone: its insert's entry
//! delivers it. Back after its tombstone was written, it is parked.
//!
//! What is parked, by kind:
//!
//! - `no_new_version`: a row column's fields changed but its version did
//!   not, so Schemaless holds another body at that ref key
//!   (`capture.bump_version` prevents it);
//! - `edited_in_place`: a child row's fields changed at the same (parent,
//!   ref key): its address is its identity, and cells are immutable;
//! - `unreadable`: the layout cannot convert the row's values;
//! - `refused`: Schemaless refuses the cell: over its limits, or under a
//!   key a tombstone retired (a row deleted, then inserted again with the
//!   same row key; a child row at the address of a deleted one). That
//!   holds even for the body stored before the deletion: a delivery reads
//!   the row as it is now, so it is the key written again, which
//!   Schemaless would hide, not a redelivery;
//! - `truncate`: a table was truncated; which rows it held is no longer
//!   known, so no tombstone can be written;
//! - `conflict`: any other address holding another body.
//!
//! Its rooms: `cells` (a change's cells) and `write` (writing and
//! parking); this file reads the slot or the queue and the current rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use config::ColumnKind;
use legacy::{Current, LegacyStore};
use schemaless::tombstone;
use schemaless::{Body, Cell, CellKey, CellStore, Column, ReadFrom, RowKey, WriteOutcome};
use sqlx::{PgConnection, Row};

use super::change::Change;
use crate::error::Error;

mod cells;
mod write;

use cells::Plan;
use write::Refusal;

/// What one batch of captured changes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// Queue entries taken (and not put back).
    pub entries: u64,
    /// Cells written to Schemaless or found there, tombstones included.
    pub cells: u64,
    /// Of those, cells Schemaless already had.
    pub already_present: u64,
    /// Of those, tombstones (deletions).
    pub tombstones: u64,
    /// Entries that needed no cell (their row is gone, has no row key yet,
    /// or is back).
    pub skipped: u64,
    /// Entries set aside in `mezzanine.capture_parked`.
    pub parked: u64,
    /// Whether a source gave as many changes as asked: more may wait.
    pub more: bool,
}

impl Captured {
    /// Adds another batch's counts.
    pub fn add(&mut self, other: Captured) {
        self.entries += other.entries;
        self.cells += other.cells;
        self.already_present += other.already_present;
        self.tombstones += other.tombstones;
        self.skipped += other.skipped;
        self.parked += other.parked;
        self.more |= other.more;
    }
}

/// How many more changes a read of the logical slot takes than a batch of
/// the queue.
const SLOT_BATCH_FACTOR: usize = 10;

/// Delivers captured changes into a cell store (Schemaless).
pub struct CaptureDelivery {
    legacy: LegacyStore,
    target: Arc<dyn CellStore>,
    tombstones: Column,
    batch: usize,
    limits: config::Limits,
    /// `capture.method = "logical"`: the slot is read too.
    logical: bool,
    /// The slot's name, read once.
    slot: tokio::sync::OnceCell<String>,
}

impl CaptureDelivery {
    /// Delivery through `legacy`'s layout into `target`, with the config's
    /// batch size and tombstone column.
    pub fn new(
        legacy: LegacyStore,
        target: Arc<dyn CellStore>,
        config: &config::Config,
    ) -> Result<CaptureDelivery, Error> {
        Ok(CaptureDelivery {
            legacy,
            target,
            tombstones: Column::new(&config.capture.tombstone_column)?,
            batch: config.mirror.relay_batch,
            limits: config.limits.clone(),
            logical: config.capture.method == config::CaptureMethod::Logical,
            slot: tokio::sync::OnceCell::new(),
        })
    }

    /// Delivers one batch of queued changes and, with the logical method,
    /// one of the slot's; nothing taken means both are empty or held by
    /// other relays. An error leaves every change of the failed batch
    /// where it was.
    pub async fn deliver_batch(&self) -> Result<Captured, Error> {
        let mut done = self.deliver_queue().await?;
        if self.logical {
            done.add(self.deliver_slot().await?);
        }
        Ok(done)
    }

    /// One batch of the slot's changes: read under the reader lock,
    /// delivered, then the slot advanced past them.
    async fn deliver_slot(&self) -> Result<Captured, Error> {
        let context = "delivering the capture slot's changes";
        let mut conn = self
            .legacy
            .pool()
            .acquire()
            .await
            .map_err(Error::postgres(context))?;
        let slot = self
            .slot
            .get_or_try_init(|| super::slot::slot_name(self.legacy.pool()))
            .await?
            .clone();
        // No slot (capture not installed yet): nothing to read, and the
        // outbox must not wait on it. `capture status` says why.
        if !super::slot::try_lock(&mut conn, &slot).await? {
            return Ok(Captured::default());
        }
        let result = async {
            let before = super::slot::current_lsn(&mut conn).await?;
            // Each read of the slot decodes from its start: read many
            // changes at a time (most of the log may be facade writes,
            // read only to be skipped).
            let max = self.batch.saturating_mul(SLOT_BATCH_FACTOR);
            let decoded = super::slot::peek(&mut conn, &slot, self.legacy.layout(), max).await?;
            let Some(end) = decoded.end_lsn.clone() else {
                // Nothing of the layout's committed before the read began:
                // the slot may let go of the WAL up to there, whatever
                // other tables wrote.
                if decoded.messages == 0 {
                    super::slot::advance(&mut conn, &slot, &before).await?;
                }
                return Ok(Captured::default());
            };
            let mut tx = sqlx::Connection::begin(&mut *conn)
                .await
                .map_err(Error::postgres(context))?;
            let mut done = self.deliver_entries(&mut tx, &decoded.entries).await?;
            tx.commit().await.map_err(Error::postgres(context))?;
            // Only now: a crash before this reads the same changes again.
            super::slot::advance(&mut conn, &slot, &end).await?;
            // More may wait when the slot gave as many changes as asked,
            // whatever became of them.
            done.more = decoded.messages >= max as u64;
            Ok::<_, Error>(done)
        }
        .await;
        super::slot::unlock(&mut conn).await?;
        result
    }

    /// One batch of the queue table: taken and delivered in one
    /// transaction.
    async fn deliver_queue(&self) -> Result<Captured, Error> {
        let context = "delivering captured changes";
        let mut tx = self
            .legacy
            .pool()
            .begin()
            .await
            .map_err(Error::postgres(context))?;
        let rows = sqlx::query(
            "/* mezzanine */ DELETE FROM mezzanine.capture_queue WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM mezzanine.capture_queue LIMIT $1 FOR UPDATE SKIP LOCKED))
             RETURNING column_name, parent_id, row_key, ref_key, op::text,
                       extract(epoch FROM captured_at)::float8",
        )
        .bind(self.batch as i64)
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
        let entries = rows
            .iter()
            .map(|row| {
                Ok(Change {
                    column: row.try_get(0)?,
                    parent_id: row.try_get(1)?,
                    row_key: row.try_get(2)?,
                    ref_key: row.try_get(3)?,
                    op: row.try_get(4)?,
                    captured_at: row.try_get(5)?,
                })
            })
            .collect::<Result<Vec<Change>, sqlx::Error>>()
            .map_err(Error::postgres(context))?;
        let mut done = self.deliver_entries(&mut tx, &entries).await?;
        tx.commit().await.map_err(Error::postgres(context))?;
        done.more = entries.len() >= self.batch;
        Ok(done)
    }

    /// Reads the rows behind `entries` on `conn`, writes their cells,
    /// parks what Schemaless refuses (on `conn`, in the caller's
    /// transaction).
    async fn deliver_entries(
        &self,
        conn: &mut PgConnection,
        entries: &[Change],
    ) -> Result<Captured, Error> {
        let context = "delivering captured changes";
        let mut done = Captured {
            entries: entries.len() as u64,
            ..Captured::default()
        };
        if entries.is_empty() {
            return Ok(done);
        }
        let current = self.read_current(conn, entries).await?;
        let mut cells: BTreeMap<CellKey, Cell> = BTreeMap::new();
        let plans: Vec<Plan> = entries
            .iter()
            .map(|entry| self.plan(entry, &current, &mut cells))
            .collect();
        let results = self.write(cells.values().cloned().collect()).await?;
        // The tombstones that landed: an outbox entry written after this
        // under a key they retire is never delivered (`crate::retired`).
        let landed = cells
            .values()
            .filter(|cell| matches!(results.get(&cell.key), Some(Ok(_))));
        crate::retired::record(conn, &self.tombstones, landed).await?;

        let mut parked = Vec::new();
        for (entry, plan) in entries.iter().zip(plans) {
            match plan {
                Plan::Skip => done.skipped += 1,
                Plan::Park(kind, reason, body) => parked.push((entry, kind, reason, body, None)),
                Plan::Cell(key) => match &results[&key] {
                    Ok(_) => {}
                    Err(Refusal::Conflict) => {
                        let kind = self.conflict_kind(&key);
                        let stored = match self.target.get_cell(&key, ReadFrom::Master).await {
                            Ok(Some(s)) => Some(s.cell.body),
                            _ => None,
                        };
                        let reason = match kind {
                            "no_new_version" => format!(
                                "{key}: the row changed but its version did not, and Schemaless holds another body at that ref key (raise the version, or turn capture.bump_version on)"
                            ),
                            "edited_in_place" => format!(
                                "{key}: a child row was edited in place, and Schemaless holds another body at its address (cells are immutable: insert a new child row instead)"
                            ),
                            _ => format!("{key}: Schemaless holds another body at this address"),
                        };
                        let legacy_body = cells.get(&key).map(|c| c.body.clone());
                        parked.push((entry, kind, reason, legacy_body, stored));
                    }
                    Err(Refusal::Refused(why)) => parked.push((
                        entry,
                        "refused",
                        format!("{key}: Schemaless refuses the cell: {why}"),
                        None,
                        None,
                    )),
                },
            }
        }
        done.parked = parked.len() as u64;
        for (entry, kind, reason, legacy_body, schemaless_body) in parked {
            tracing::warn!("a captured change is parked ({kind}): {reason}");
            // The same change parked again (delivered twice) updates its
            // row.
            sqlx::query(
                "/* mezzanine */ INSERT INTO mezzanine.capture_parked
                     (column_name, parent_id, row_key, ref_key, op, captured_at, kind, reason, legacy_body, schemaless_body)
                 VALUES ($1, $2, $3, $4, $5::\"char\", to_timestamp($6), $7, $8, $9, $10)
                 ON CONFLICT (coalesce(column_name, ''), coalesce(parent_id, -1),
                              coalesce(row_key, '00000000-0000-0000-0000-000000000000'::uuid),
                              coalesce(ref_key, -1), op, kind)
                 DO UPDATE SET reason = EXCLUDED.reason, legacy_body = EXCLUDED.legacy_body,
                     schemaless_body = EXCLUDED.schemaless_body, parked_at = now()",
            )
            .bind(&entry.column)
            .bind(entry.parent_id)
            .bind(entry.row_key)
            .bind(entry.ref_key)
            .bind(&entry.op)
            .bind(entry.captured_at)
            .bind(kind)
            .bind(&reason)
            .bind(legacy_body.map(|b| b.to_string()))
            .bind(schemaless_body.map(|b| b.to_string()))
            .execute(&mut *conn)
            .await
            .map_err(Error::postgres(context))?;
        }
        for (key, result) in &results {
            if let Ok(outcome) = result {
                done.cells += 1;
                done.already_present += u64::from(*outcome == WriteOutcome::AlreadyPresent);
                done.tombstones += u64::from(key.column == self.tombstones);
            }
        }
        Ok(done)
    }

    /// Reads what the entries point at, as it is now.
    async fn read_current(
        &self,
        conn: &mut PgConnection,
        entries: &[Change],
    ) -> Result<Current, Error> {
        let layout = self.legacy.layout();
        let mut parents = Vec::new();
        let mut row_keys = Vec::new();
        let mut children = Vec::new();
        for entry in entries {
            match (entry.op.as_str(), entry.column.as_deref()) {
                ("d", None) => row_keys.extend(entry.row_key),
                ("w" | "d", Some(name)) => match layout.column(name) {
                    Some((_, c)) if c.kind() == ColumnKind::Row => parents.extend(entry.parent_id),
                    Some((_, c)) => {
                        if let (Some(p), Some(r)) = (entry.parent_id, entry.ref_key) {
                            children.push((c.name.clone(), p, r));
                        }
                    }
                    None => {}
                },
                _ => {}
            }
        }
        Ok(self
            .legacy
            .read_current(conn, &parents, &row_keys, &children)
            .await?)
    }
}
