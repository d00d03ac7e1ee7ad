//! The transaction that applies a shard's cells: it locks the shard's
//! offset row, checks the position the cells were read from, and moves
//! it in the same commit as the legacy writes.

use super::*;

impl OffsetHook {
    pub(super) fn take_conflicts(&self) -> Vec<(u64, schemaless::CellKey)> {
        std::mem::take(&mut *self.conflicts.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Why a conflict is parked.
pub(super) fn conflict_reason() -> String {
    "conflict: the legacy tables hold another body at this address (legacy_body); \
     the Schemaless cell (body) was not applied"
        .into()
}

pub(super) const FREE: u8 = 0;

pub(super) const BUSY: u8 = 1;

pub(super) const MOVED: u8 = 2;

/// Locks and checks a shard's position before its cells are applied, and
/// moves it (and parks what was refused) before the commit.
pub(super) struct OffsetHook {
    pub(super) shard: u32,
    pub(super) before: Position,
    pub(super) after: Position,
    pub(super) parked: Vec<(StoredCell, String)>,
    /// The added_id of each cell of the batch, in batch order.
    pub(super) added_ids: Vec<u64>,
    /// (added_id, address) of the cells the legacy tables held with
    /// another body, parked by `before_commit`.
    pub(super) conflicts: std::sync::Mutex<Vec<(u64, schemaless::CellKey)>>,
    /// Change-log cells the transaction covers, for the `applied` count.
    pub(super) cells: i64,
    /// Why `begin` refused, if it did.
    pub(super) refused: AtomicU8,
    /// `capture.tombstone_column`: the deletions applied are recorded
    /// ([`crate::retired`]), for a mode moved back to `shadow`.
    pub(super) tombstones: Column,
}

#[async_trait]
impl TransactionHook for OffsetHook {
    /// The cells came from Schemaless: capturing them would send them back.
    fn skip_capture(&self) -> bool {
        true
    }

    /// A row the proxy inserted with an id, or with `RETURNING id`, takes
    /// the id the app gave or was answered.
    fn reserved_ids(&self) -> bool {
        true
    }

    async fn begin(&self, tx: &mut sqlx::PgConnection) -> schemaless::Result<()> {
        let row = sqlx::query(
            "/* mezzanine */ SELECT added_id, awaited, awaited_ranges FROM mezzanine.reverse_offsets WHERE shard = $1
             FOR UPDATE SKIP LOCKED",
        )
        .bind(self.shard as i32)
        .fetch_optional(&mut *tx)
        .await
        .map_err(storage)?;
        let state = match row {
            None => BUSY,
            Some(row) if position_of(&row).map_err(storage)? != self.before => MOVED,
            Some(_) => FREE,
        };
        if state == FREE {
            return Ok(());
        }
        self.refused.store(state, Ordering::Relaxed);
        Err(schemaless::Error::Unsupported {
            operation: "the reverse mirror",
            reason: format!(
                "shard {} is being applied by another reverse mirror",
                self.shard
            ),
        })
    }

    async fn before_commit(
        &self,
        tx: &mut sqlx::PgConnection,
        cells: &[Cell],
        results: &[CellResult],
    ) -> schemaless::Result<()> {
        // A conflict is parked with the Schemaless body, in the transaction
        // that moves the offset past it: never applied, never lost.
        let mut conflicts = Vec::new();
        for ((cell, result), added_id) in cells.iter().zip(results).zip(&self.added_ids) {
            if result.is_err() {
                conflicts.push((*added_id, cell.key.clone()));
                tracing::warn!(
                    "reverse mirror: shard {} added_id {added_id} ({}) parked: {}",
                    self.shard,
                    cell.key,
                    conflict_reason()
                );
                sqlx::query(
                    "/* mezzanine */ INSERT INTO mezzanine.reverse_parked (shard, added_id, row_key, column_name, ref_key, body, error)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (shard, added_id) DO UPDATE SET error = EXCLUDED.error, parked_at = now()",
                )
                .bind(self.shard as i32)
                .bind(*added_id as i64)
                .bind(cell.key.row_key.uuid())
                .bind(cell.key.column.as_str())
                .bind(cell.key.ref_key.get())
                .bind(cell.body.to_string())
                .bind(conflict_reason())
                .execute(&mut *tx)
                .await
                .map_err(storage)?;
            }
        }
        *self.conflicts.lock().unwrap_or_else(|p| p.into_inner()) = conflicts;
        record_deletions(&mut *tx, &self.tombstones, cells, results).await?;
        for (stored, reason) in &self.parked {
            tracing::warn!(
                "reverse mirror: shard {} added_id {} ({}) parked: {reason}",
                self.shard,
                stored.added_id,
                stored.cell.key
            );
            sqlx::query(
                "/* mezzanine */ INSERT INTO mezzanine.reverse_parked (shard, added_id, row_key, column_name, ref_key, body, error)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (shard, added_id) DO UPDATE SET error = EXCLUDED.error, parked_at = now()",
            )
            .bind(self.shard as i32)
            .bind(stored.added_id as i64)
            .bind(stored.cell.key.row_key.uuid())
            .bind(stored.cell.key.column.as_str())
            .bind(stored.cell.key.ref_key.get())
            .bind(stored.cell.body.to_string())
            .bind(reason)
            .execute(&mut *tx)
            .await
            .map_err(storage)?;
        }
        sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.reverse_offsets
             SET added_id = $2, awaited = '{}', awaited_ranges = $3, applied = applied + $4,
                 updated_at = now()
             WHERE shard = $1",
        )
        .bind(self.shard as i32)
        .bind(self.after.0 as i64)
        .bind(&self.after.1)
        .bind(self.cells)
        .execute(&mut *tx)
        .await
        .map_err(storage)?;
        Ok(())
    }
}

/// Records the deletions among `cells` that were applied (`results`),
/// for a mode moved back to `shadow` ([`crate::retired`]).
pub(super) async fn record_deletions(
    tx: &mut sqlx::PgConnection,
    tombstones: &Column,
    cells: &[Cell],
    results: &[CellResult],
) -> schemaless::Result<()> {
    let applied = cells
        .iter()
        .zip(results)
        .filter(|(_, result)| result.is_ok())
        .map(|(cell, _)| cell);
    crate::retired::record(tx, tombstones, applied).await
}

pub(super) fn storage(source: sqlx::Error) -> schemaless::Error {
    legacy::storage_error("postgres (mezzanine.reverse_offsets)", source)
}
