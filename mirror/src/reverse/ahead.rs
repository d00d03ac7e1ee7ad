//! A child cell met before its row cell (see the module above): the row
//! it belongs to, as reads see it.

use schemaless::{Cell, CellStore, Column, ReadFrom, RowKey, StoredCell};

use super::ReverseMirror;

/// The latest cell of (`row_key`, `column`) in `store`; `None` when it
/// does not answer.
async fn latest(store: &dyn CellStore, row_key: &RowKey, column: &Column) -> Option<StoredCell> {
    store
        .get_cell_latest(row_key, column, ReadFrom::Master)
        .await
        .ok()
        .flatten()
}

/// The row of a child cell found before its row cell.
pub(super) enum Parent {
    /// Its latest row cell.
    Row(Cell),
    /// Deleted: a tombstone hides its row cells.
    Deleted,
}

impl ReverseMirror {
    /// The row of a child cell, as reads see it: its latest row cell, or
    /// deleted (a tombstone hides the row, and the child with it). `None`
    /// for a cell of a row column, a row with no row cell, or when
    /// Schemaless does not answer.
    pub(super) async fn row_cell(&self, child: &Cell) -> Option<Parent> {
        let layout = self.legacy.layout();
        let (_, column) = layout.column(child.key.column.as_str())?;
        if column.kind() != config::ColumnKind::Child {
            return None;
        }
        let visible = self.visible.as_ref()?;
        let row_key = &child.key.row_key;
        for row in layout
            .columns
            .iter()
            .filter(|c| c.kind() == config::ColumnKind::Row)
        {
            if let Some(stored) = latest(visible, row_key, &row.name).await {
                return Some(Parent::Row(stored.cell));
            }
            if latest(&self.schemaless, row_key, &row.name).await.is_some() {
                return Some(Parent::Deleted);
            }
        }
        None
    }
}
