//! A batch's rows read ahead: the latest cells and the row tombstones of
//! every row its statements name by a literal key (a bound parameter),
//! read for the whole batch at once, one statement per shard and column,
//! while its statements' values are being evaluated.
//!
//! A driver's `executemany` of a thousand INSERTs made, per row, a read
//! of its latest cells and one of its tombstone: thousands of point reads
//! on the masters for one batch. Read ahead, the batch costs
//! `(row columns + 1) x shards` statements, whatever its size. The
//! statements read what the store held when the batch began, as their
//! own reads would have (nothing of the batch is put before all its
//! statements are planned); what an earlier statement of the batch
//! writes is still read first ([`super::batch::Earlier`]). A row not read
//! ahead (its key an expression) is read on its own, as before.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::*;
use crate::plan::Keys;

/// The rows read ahead, by key.
#[derive(Default)]
pub(super) struct Found {
    /// The latest cell of each row column, as the store reads it.
    latest: HashMap<(RowKey, Column), StoredCell>,
    /// Rows whose row tombstone is stored: their key is retired.
    retired: HashSet<RowKey>,
}

impl Found {
    /// The latest cell of `column` in row `key`.
    pub(super) fn latest(&self, key: &RowKey, column: &Column) -> Option<StoredCell> {
        self.latest.get(&(*key, column.clone())).cloned()
    }

    /// Whether row `key` was deleted.
    pub(super) fn retired(&self, key: &RowKey) -> bool {
        self.retired.contains(key)
    }
}

/// The read of a batch's rows, made once, by the first statement that
/// needs one of them, and awaited by every other.
pub(super) struct Readahead {
    keys: HashSet<RowKey>,
    /// Each of the layout's row columns.
    columns: Vec<Column>,
    /// The tombstone column.
    tombstones: Column,
    found: tokio::sync::OnceCell<Result<Arc<Found>, String>>,
}

impl Readahead {
    /// The rows `writes` name by a literal key (a parent row an INSERT
    /// gives, the parent of a child row it gives, a row an UPDATE or
    /// DELETE names by its key), to be read of each of `layout`'s row
    /// columns and of `tombstones` (the tombstone column). Nothing is
    /// read yet.
    pub(super) fn new<'w>(
        layout: &legacy::layout::Layout,
        tombstones: &Column,
        writes: impl IntoIterator<Item = &'w Write>,
    ) -> Readahead {
        let mut keys = HashSet::new();
        for write in writes {
            let named: Vec<&Expr> = match &write.rows {
                Rows::Insert { rows, .. } => rows.iter().filter_map(|r| r.key.as_ref()).collect(),
                Rows::Update { keys, .. } | Rows::Delete { keys, .. } => match keys.as_ref() {
                    Keys::One(e) => vec![e],
                    Keys::List(es) => es.iter().collect(),
                    Keys::Array(_) => Vec::new(),
                },
            };
            keys.extend(
                named
                    .into_iter()
                    .filter_map(super::super::postgres::literal_uuid)
                    .map(RowKey::from),
            );
        }
        let columns = layout
            .columns
            .iter()
            .filter(|c| matches!(c.shape, Shape::Row))
            .map(|c| c.name.clone())
            .collect();
        Readahead {
            keys,
            columns,
            tombstones: tombstones.clone(),
            found: tokio::sync::OnceCell::new(),
        }
    }

    /// Every row at once from `store`: one `get_column_cells` per row
    /// column and one of the tombstone column.
    async fn read<S: CellStore>(&self, store: &S) -> Result<Arc<Found>, String> {
        let rows: Vec<RowKey> = self.keys.iter().copied().collect();
        let latest = futures::future::try_join_all(
            self.columns
                .iter()
                .map(|c| store.get_column_cells(&rows, c, ReadFrom::Master)),
        );
        let deleted = store.get_column_cells(&rows, &self.tombstones, ReadFrom::Master);
        let (cells, deleted) = futures::try_join!(latest, deleted).map_err(|e| e.to_string())?;
        let mut found = Found::default();
        for stored in cells.into_iter().flatten() {
            let at = (stored.cell.key.row_key, stored.cell.key.column.clone());
            let newer = found
                .latest
                .get(&at)
                .is_none_or(|s| s.cell.key.ref_key < stored.cell.key.ref_key);
            if newer {
                found.latest.insert(at, stored);
            }
        }
        let row = schemaless::tombstone::row_ref_key();
        found.retired = deleted
            .into_iter()
            .filter(|s| s.cell.key.ref_key == row)
            .map(|s| s.cell.key.row_key)
            .collect();
        Ok(Arc::new(found))
    }

    /// What was read of row `key`; `None` when it is not read ahead.
    pub(super) async fn of<S: CellStore>(
        &self,
        store: &S,
        key: &RowKey,
    ) -> Option<Result<Arc<Found>, String>> {
        if !self.keys.contains(key) {
            return None;
        }
        Some(self.found.get_or_init(|| self.read(store)).await.clone())
    }
}
