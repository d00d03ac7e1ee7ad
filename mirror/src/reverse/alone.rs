//! Cells applied on their own, outside their shard's transaction: a
//! batch the legacy model refused as a whole, applied cell by cell (the
//! refusals parked), and the hook under which such a cell, or a parked
//! cell retried, is written as the shard's transaction writes it.

use super::*;
use offset::record_deletions;

/// One cell applied on its own, outside its shard's transaction (a batch
/// the legacy model refused as a whole, applied cell by cell; a parked
/// cell retried): as that transaction applies it, not captured back,
/// its row taking the integer id the proxy reserved for it, a deletion
/// recorded, but the offset left alone. Before, such a cell was written
/// as a plain write: captured back to Schemaless, and a row the proxy
/// had answered `RETURNING id` for inserted under another id than the
/// app was told.
pub(super) struct OnItsOwn {
    /// `capture.tombstone_column`, as [`OffsetHook::tombstones`].
    pub(super) tombstones: Column,
}

#[async_trait]
impl TransactionHook for OnItsOwn {
    fn skip_capture(&self) -> bool {
        true
    }

    fn reserved_ids(&self) -> bool {
        true
    }

    async fn before_commit(
        &self,
        tx: &mut sqlx::PgConnection,
        cells: &[Cell],
        results: &[CellResult],
    ) -> schemaless::Result<()> {
        record_deletions(tx, &self.tombstones, cells, results).await
    }
}

impl ReverseMirror {
    /// A batch the legacy model refused as a whole: each cell on its own
    /// (refusals parked), then the position in a transaction of its own.
    /// A crash in between applies the cells again, harmlessly.
    pub(super) async fn apply_one_by_one(
        &self,
        shard: u32,
        apply: Vec<StoredCell>,
        mut parked: Vec<(StoredCell, String)>,
        before: Position,
        after: Position,
        mut applied: Applied,
    ) -> Result<Applied, Error> {
        let mut conflicts = Vec::new();
        let one = OnItsOwn {
            tombstones: self.legacy.tombstones().clone(),
        };
        for stored in apply {
            match self
                .legacy
                .put_cells_with(vec![stored.cell.clone()], &one)
                .await
            {
                Ok(results) if results.iter().any(|r| r.is_err()) => {
                    conflicts.push((stored.added_id, stored.cell.key.clone()));
                    parked.push((stored, conflict_reason()));
                }
                Ok(results) => count(&mut applied, &results),
                Err(schemaless::Error::InvalidInput { field, message, .. }) => {
                    // A child before its row cell: with the row cell.
                    let with_row = match self.row_cell(&stored.cell).await {
                        Some(Parent::Row(row)) => self
                            .legacy
                            .put_cells_with(vec![row, stored.cell.clone()], &one)
                            .await
                            .ok(),
                        Some(Parent::Deleted) => {
                            applied.skipped += 1;
                            continue;
                        }
                        None => None,
                    };
                    match with_row.as_deref() {
                        Some([_, Err(_)]) => {
                            conflicts.push((stored.added_id, stored.cell.key.clone()));
                            parked.push((stored, conflict_reason()));
                        }
                        Some([_, child]) => count(&mut applied, std::slice::from_ref(child)),
                        _ => parked.push((stored, format!("invalid {field}: {message}"))),
                    }
                }
                // The legacy row it would change holds a value the layout
                // cannot read (an infinite timestamp written directly):
                // no pass would ever apply it, and the shard would stop.
                // Parked with the reason; the row is left as it is, to be
                // mended in PostgreSQL and the cell retried.
                Err(e @ schemaless::Error::Unreadable { .. }) => parked.push((
                    stored,
                    format!(
                        "{e}: mend the row in PostgreSQL, then retry the parked cells \
                         (`mezzanine mirror retry`)"
                    ),
                )),
                Err(e) => return Err(e.into()),
            }
        }
        let hook = OffsetHook {
            shard,
            before,
            after,
            parked: parked.clone(),
            added_ids: Vec::new(),
            conflicts: std::sync::Mutex::default(),
            cells: (applied.applied + parked.len() as u64) as i64,
            refused: AtomicU8::new(FREE),
            tombstones: self.legacy.tombstones().clone(),
        };
        match self.legacy.put_cells_with(Vec::new(), &hook).await {
            Ok(_) => {
                applied.parked += parked.len() as u64;
                applied.conflicts += conflicts.len() as u64;
                self.record_legacy_bodies(shard, &conflicts).await;
                Ok(applied)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Adds the legacy side's body to parked conflicts (after the commit
    /// that parked them: the legacy row stays, so a crash before this only
    /// leaves the column empty; `mirror status` reads both).
    pub(super) async fn record_legacy_bodies(
        &self,
        shard: u32,
        conflicts: &[(u64, schemaless::CellKey)],
    ) {
        for (added_id, key) in conflicts {
            let body = match self.legacy.get_cell(key, ReadFrom::Master).await {
                Ok(Some(stored)) => stored.cell.body.to_string(),
                Ok(None) => "(none: the row is gone)".into(),
                Err(e) => format!("(unreadable: {e})"),
            };
            let stored = sqlx::query(
                "/* mezzanine */ UPDATE mezzanine.reverse_parked SET legacy_body = $3 WHERE shard = $1 AND added_id = $2",
            )
            .bind(shard as i32)
            .bind(*added_id as i64)
            .bind(body)
            .execute(self.legacy.pool())
            .await;
            if let Err(e) = stored {
                tracing::warn!("reverse mirror: recording a conflict's legacy body: {e}");
            }
        }
    }
}
