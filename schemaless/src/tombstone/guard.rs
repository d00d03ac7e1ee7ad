//! The write side of [`Tombstoned`]: a cell a tombstone would hide is
//! refused before anything is written. A cell written under a deleted row
//! key, or at a deleted child address, would be acknowledged and then
//! never read, an acknowledged write lost in plain sight. Every writer
//! into Schemaless that is not a bulk copy of PostgreSQL's rows goes
//! through it: the facade in `primary` and `schemaless`, the relay
//! (outbox and capture), the proxy's writes.

use std::collections::HashMap;

use super::{Deletion, Tombstoned};
use crate::api::{CellStore, ReadFrom};
use crate::cell::{Cell, RowKey};
use crate::error::{Error, Result};

impl<S: CellStore> Tombstoned<S> {
    /// Refuses `cells`, before anything is written, if one of them would
    /// be hidden the moment it lands: a cell of a row whose row tombstone
    /// is stored (the key is retired), at a child address whose cell
    /// tombstone is, or behind a tombstone earlier in the same batch. A
    /// hidden cell already stored with the same body is let through (the
    /// write comes back `AlreadyPresent`: a relay delivering again what it
    /// delivered before the deletion), unless the writer writes its
    /// source's current state ([`Tombstoned::current_state`]), for which
    /// it is the deleted key written again. Tombstones themselves are checked
    /// as a writer must ([`Deletion::checked`]). Costs one read of the
    /// tombstone column per shard the batch touches, from the masters;
    /// a deletion racing the write may still hide it, as a delete right
    /// after the write would.
    pub async fn refuse_hidden(&self, cells: &[Cell]) -> Result<()> {
        let mut deleting: HashMap<RowKey, Vec<(usize, Deletion)>> = HashMap::new();
        let mut rows = Vec::with_capacity(cells.len());
        for (i, cell) in cells.iter().enumerate() {
            if cell.key.column == *self.column() {
                let deletion = Deletion::checked(cell).map_err(|e| e.in_batch(i))?;
                deleting
                    .entry(cell.key.row_key)
                    .or_default()
                    .push((i, deletion));
            } else {
                rows.push(cell.key.row_key);
            }
        }
        rows.sort_unstable();
        rows.dedup();
        if rows.is_empty() {
            return Ok(());
        }
        let stored = self.tombstones(&rows, ReadFrom::Master).await?.value;
        let hidden = cells.iter().enumerate().filter(|(i, cell)| {
            let row = &cell.key.row_key;
            cell.key.column != *self.column()
                && (stored.get(row).is_some_and(|t| t.hides(&cell.key))
                    || deleting.get(row).is_some_and(|earlier| {
                        earlier
                            .iter()
                            .any(|(j, deletion)| j < i && deletion.hides(&cell.key))
                    }))
        });
        for (i, cell) in hidden {
            if self.takes_redeliveries() {
                let same = self
                    .inner()
                    .get_cell(&cell.key, ReadFrom::Master)
                    .await?
                    .is_some_and(|s| s.cell.body == cell.body);
                if same {
                    continue;
                }
            }
            let row_deleted = stored
                .get(&cell.key.row_key)
                .is_some_and(|t| t.row_deleted())
                || deleting
                    .get(&cell.key.row_key)
                    .is_some_and(|d| d.iter().any(|(j, d)| *j < i && *d == Deletion::Row));
            let error = if row_deleted {
                Error::invalid(
                    "row_key",
                    format!(
                        "row {} was deleted: its tombstone in {} retires the key, and a cell \
                         written under it would never be read; write the entity under a new row key",
                        cell.key.row_key, self.column()
                    ),
                )
            } else {
                Error::invalid(
                    "ref_key",
                    format!(
                        "cell {} was deleted: a tombstone in {} hides that address, and a cell \
                         written there would never be read; a child's address is not reused \
                         after a delete, write it under a new ref key",
                        cell.key,
                        self.column()
                    ),
                )
            };
            return Err(error.in_batch(i));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::row_body;
    use super::*;
    use crate::cell::{Body, StoredCell};
    use crate::memory::MemoryStore;
    use serde_json::json;

    fn invalid_field(err: Error) -> (String, String) {
        match err {
            Error::InvalidInput { field, message, .. } => (field, message),
            other => panic!("expected invalid input, got {other:?}"),
        }
    }

    async fn stored(store: &Tombstoned<MemoryStore>) -> Vec<StoredCell> {
        let mut all = Vec::new();
        for shard in 0..store.shard_count() {
            all.extend(
                store
                    .inner()
                    .get_cells_for_shard(shard, 0, 1000, ReadFrom::Master)
                    .await
                    .unwrap()
                    .cells,
            );
        }
        all
    }

    #[tokio::test]
    async fn a_write_under_a_deleted_row_key_is_refused_and_writes_nothing() {
        let store = store().await;
        let column = store.column().clone();
        store
            .put_cell(super::super::row_tombstone(row(), &column))
            .await
            .unwrap();
        let before = stored(&store).await;

        // A new version of the deleted row, in a batch with a good cell:
        // the batch is refused, naming the cell, and nothing is written.
        let err = store
            .put_cells(vec![
                cell(OTHER, "NOTES", 1, json!({"text": "fine"})),
                cell(ROW, "BASE", 3, json!({"driver": "d1", "status": "x"})),
            ])
            .await
            .unwrap_err();
        let (field, message) = invalid_field(err);
        assert_eq!(field, "cells[1].row_key");
        assert!(message.contains("retires the key"), "{message}");
        assert_eq!(stored(&store).await, before);

        // Delivered again as it was before the deletion: AlreadyPresent.
        let again = store
            .put_cell(cell(
                ROW,
                "BASE",
                2,
                json!({"driver": "d1", "status": "completed"}),
            ))
            .await
            .unwrap();
        assert_eq!(again, crate::WriteOutcome::AlreadyPresent);
        // The same address with another body is refused as retired too.
        let err = store
            .put_cell(cell(ROW, "BASE", 2, json!({"driver": "d2"})))
            .await
            .unwrap_err();
        assert_eq!(invalid_field(err).0, "cells[0].row_key");
        // More tombstones of the row are taken: deleting is idempotent.
        let child = super::super::cell_tombstone(row(), &column, &notes(), 2);
        assert_eq!(
            store.put_cell(child).await.unwrap(),
            crate::WriteOutcome::Written
        );
        // Other rows are written as before.
        assert_eq!(
            store
                .put_cell(cell(OTHER, "BASE", 2, json!({"driver": "d1"})))
                .await
                .unwrap(),
            crate::WriteOutcome::Written
        );
    }

    #[tokio::test]
    async fn a_writer_of_current_state_is_refused_the_same_body_under_a_deleted_key() {
        let store = store().await.current_state();
        let column = store.column().clone();
        store
            .put_cell(super::super::row_tombstone(row(), &column))
            .await
            .unwrap();
        store
            .put_cell(super::super::cell_tombstone(row(), &column, &notes(), 1))
            .await
            .unwrap();
        let before = stored(&store).await;
        // The row as it was before its deletion, read from its source
        // now: the key was written again, and Schemaless would hide it.
        let err = store
            .put_cell(cell(
                ROW,
                "BASE",
                2,
                json!({"driver": "d1", "status": "completed"}),
            ))
            .await
            .unwrap_err();
        let (field, message) = invalid_field(err);
        assert_eq!(field, "cells[0].row_key");
        assert!(message.contains("retires the key"), "{message}");
        assert_eq!(stored(&store).await, before);
        // Tombstones are still taken again.
        assert_eq!(
            store
                .put_cell(super::super::row_tombstone(row(), &column))
                .await
                .unwrap(),
            crate::WriteOutcome::AlreadyPresent
        );
    }

    #[tokio::test]
    async fn a_deleted_child_address_is_not_reused_and_a_batch_sees_its_own_tombstones() {
        let store = store().await;
        let column = store.column().clone();
        store
            .put_cell(super::super::cell_tombstone(row(), &column, &notes(), 2))
            .await
            .unwrap();
        let err = store
            .put_cell(cell(ROW, "NOTES", 2, json!({"text": "again"})))
            .await
            .unwrap_err();
        let (field, message) = invalid_field(err);
        assert_eq!(field, "cells[0].ref_key");
        assert!(message.contains("not reused"), "{message}");
        // Other addresses of the row are open.
        assert_eq!(
            store
                .put_cell(cell(ROW, "NOTES", 4, json!({"text": "four"})))
                .await
                .unwrap(),
            crate::WriteOutcome::Written
        );

        // Within one batch cells take effect in order: a cell before the
        // row's tombstone is written, one after it would be hidden.
        let before = stored(&store).await;
        let err = store
            .put_cells(vec![
                cell(OTHER, "NOTES", 1, json!({"text": "kept"})),
                super::super::row_tombstone(RowKey::parse(OTHER).unwrap(), &column),
                cell(OTHER, "NOTES", 2, json!({"text": "hidden"})),
            ])
            .await
            .unwrap_err();
        assert_eq!(invalid_field(err).0, "cells[2].row_key");
        assert_eq!(stored(&store).await, before);
        let results = store
            .put_cells(vec![
                cell(OTHER, "NOTES", 1, json!({"text": "kept"})),
                super::super::row_tombstone(RowKey::parse(OTHER).unwrap(), &column),
            ])
            .await
            .unwrap();
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(|r| r.is_ok()));
    }

    #[tokio::test]
    async fn a_tombstone_written_must_be_well_formed_and_at_its_derived_ref_key() {
        let store = store().await;
        let before = stored(&store).await;
        for (bad, field) in [
            (tombstone(ROW, 7, row_body()), "cells[0].ref_key"),
            (
                tombstone(
                    ROW,
                    0,
                    Body::from_value(json!({"row": true, "x": 1})).unwrap(),
                ),
                "cells[0].body",
            ),
            (
                tombstone(
                    ROW,
                    0,
                    Body::from_value(json!({"column": "NOTES"})).unwrap(),
                ),
                "cells[0].body",
            ),
        ] {
            let err = store.put_cell(bad).await.unwrap_err();
            assert_eq!(invalid_field(err).0, field);
        }
        assert_eq!(stored(&store).await, before);
    }
}
