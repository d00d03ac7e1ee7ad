//! Deletes in an append-only store: tombstones.
//!
//! Cells are immutable, so nothing is ever deleted from Schemaless. A
//! deletion (a legacy row deleted by a plain SQL writer, captured by the
//! mirror; or, after the migration, an app's own delete) is recorded as a
//! **tombstone**: a cell of the same row in the instance's tombstone
//! column (`capture.tombstone_column`, `DELETED` by default), whose body
//! names what it hides:
//!
//! - `{"row": true}`: every cell of every column of the row, including
//!   cells written later (a deleted row key is retired);
//! - `{"column": "NOTES", "ref_key": 3}`: that one cell.
//!
//! Each deletion is a cell of its own, so writers never read and rewrite a
//! shared one. Its ref key is derived from what it deletes
//! ([`row_ref_key`], [`cell_ref_key`]): every writer of the same deletion
//! writes the same cell, so deliveries twice over (a relay that died
//! before its commit) are `AlreadyPresent`. Tombstones are cells like any
//! other: replicated, buffered, in the change log, where triggers see
//! deletes.
//!
//! Readers that honour deletes go through [`Tombstoned`], a [`CellStore`]
//! over any other that reads a row's tombstones along with its cells and
//! leaves hidden cells out: a hidden latest cell falls back to the newest
//! visible one, index entries of hidden cells are dropped. The facade reads
//! Schemaless through it, and the verifier compares through it. The raw
//! store, its change log and [`visible`] on whole-row reads stay available
//! to tools that must see everything.

#[cfg(test)]
mod fixtures;
mod guard;
mod view;

use std::collections::{BTreeSet, HashMap};

use serde_json::{json, Value};

use crate::cell::{Body, Cell, CellKey, Column, RefKey, RowKey, StoredCell};
use crate::error::{Error, Result};

pub use view::Tombstoned;

/// What a row's tombstones hide.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tombstones {
    /// The whole row is deleted.
    row: bool,
    /// Single deleted cells: (column, ref key).
    cells: BTreeSet<(Column, i64)>,
}

impl Tombstones {
    /// The union of what `cells` (tombstone cells of one row) hide. A
    /// body that is not a tombstone is an error naming the cell: the
    /// tombstone column holds nothing else.
    pub fn from_cells<'a>(cells: impl IntoIterator<Item = &'a Cell>) -> Result<Tombstones> {
        let mut tombstones = Tombstones::default();
        for cell in cells {
            tombstones.add(cell)?;
        }
        Ok(tombstones)
    }

    fn add(&mut self, cell: &Cell) -> Result<()> {
        match Deletion::of(cell)? {
            Deletion::Row => self.row = true,
            Deletion::Cell(column, ref_key) => {
                self.cells.insert((column, ref_key));
            }
        }
        Ok(())
    }

    /// Whether the whole row is deleted.
    pub fn row_deleted(&self) -> bool {
        self.row
    }

    /// Whether the cell at `key` is hidden.
    pub fn hides(&self, key: &CellKey) -> bool {
        self.row
            || self
                .cells
                .contains(&(key.column.clone(), key.ref_key.get()))
    }

    /// Whether any cell of `column` may be hidden.
    pub fn touches(&self, column: &Column) -> bool {
        self.row || self.cells.iter().any(|(c, _)| c == column)
    }
}

/// What one tombstone cell deletes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The whole row (`{"row": true}`).
    Row,
    /// The cell at (column, ref key) (`{"column": NAME, "ref_key": N}`).
    Cell(Column, i64),
}

impl Deletion {
    /// What the tombstone `cell` deletes. A body that is not a tombstone
    /// is an error naming the cell: the tombstone column holds nothing
    /// else. (The ref key is not checked here: readers honour what is
    /// stored; [`Deletion::checked`] is for writers.)
    pub fn of(cell: &Cell) -> Result<Deletion> {
        let unreadable = |reason: &str| {
            Error::Unreadable {
            what: format!("tombstone {}", cell.key),
            reason: format!(
                "{reason}; a tombstone body is {{\"row\": true}} or {{\"column\": NAME, \"ref_key\": N}}, got {}",
                cell.body
            ),
        }
        };
        let fields = cell.body.fields();
        match (
            fields.get("row"),
            fields.get("column"),
            fields.get("ref_key"),
        ) {
            (Some(Value::Bool(true)), None, None) => Ok(Deletion::Row),
            (None, Some(Value::String(column)), Some(ref_key)) => {
                let column = Column::new(column).map_err(|_| unreadable("a bad column name"))?;
                let ref_key = ref_key
                    .as_i64()
                    .filter(|r| *r >= 0)
                    .ok_or_else(|| unreadable("a bad ref key"))?;
                Ok(Deletion::Cell(column, ref_key))
            }
            _ => Err(unreadable("not a tombstone")),
        }
    }

    /// What a tombstone about to be written deletes: its body must be a
    /// tombstone and its ref key the one derived from what it deletes
    /// ([`row_ref_key`], [`cell_ref_key`]), so that every writer of one
    /// deletion writes the same cell. Errors are bad input naming the
    /// field.
    pub fn checked(cell: &Cell) -> Result<Deletion> {
        let deletion = Deletion::of(cell).map_err(|e| match e {
            Error::Unreadable { reason, .. } => Error::invalid("body", reason),
            other => other,
        })?;
        if cell.body.fields() != deletion.body().fields() {
            return Err(Error::invalid(
                "body",
                format!(
                    "a tombstone body is {} and nothing else, got {}",
                    deletion.body(),
                    cell.body
                ),
            ));
        }
        let want = match &deletion {
            Deletion::Row => row_ref_key(),
            Deletion::Cell(column, ref_key) => cell_ref_key(column, *ref_key),
        };
        if cell.key.ref_key != want {
            return Err(Error::invalid(
                "ref_key",
                format!(
                    "a tombstone's ref key is derived from what it deletes: {} here, not {} (see schemaless::tombstone)",
                    want.get(),
                    cell.key.ref_key.get()
                ),
            ));
        }
        Ok(deletion)
    }

    /// Whether this deletion hides the cell at `key` (of its row).
    pub fn hides(&self, key: &CellKey) -> bool {
        match self {
            Deletion::Row => true,
            Deletion::Cell(column, ref_key) => {
                key.column == *column && key.ref_key.get() == *ref_key
            }
        }
    }

    /// The tombstone's body in its one form.
    pub fn body(&self) -> Body {
        match self {
            Deletion::Row => row_body(),
            Deletion::Cell(column, ref_key) => cell_body(column, *ref_key),
        }
    }
}

/// The ref key of the tombstone deleting a whole row.
pub fn row_ref_key() -> RefKey {
    RefKey::new(0).expect("0 is a ref key")
}

/// The ref key of the tombstone deleting the cell at (`column`,
/// `ref_key`): a hash of both, from 1 up (0 is the row's).
pub fn cell_ref_key(column: &Column, ref_key: i64) -> RefKey {
    let hash = crate::routing::fnv1a64(format!("{column}\0{ref_key}").as_bytes());
    RefKey::new(1 + (hash % (i64::MAX as u64 - 1)) as i64).expect("a positive ref key")
}

/// The tombstone deleting the whole row `row_key`, in `column`.
pub fn row_tombstone(row_key: RowKey, column: &Column) -> Cell {
    Cell::new(row_key, column.clone(), row_ref_key(), row_body())
}

/// The tombstone deleting the cell at (`deleted`, `ref_key`) of `row_key`,
/// in `column`.
pub fn cell_tombstone(row_key: RowKey, column: &Column, deleted: &Column, ref_key: i64) -> Cell {
    Cell::new(
        row_key,
        column.clone(),
        cell_ref_key(deleted, ref_key),
        cell_body(deleted, ref_key),
    )
}

/// The body of a tombstone deleting the whole row.
pub fn row_body() -> Body {
    Body::from_value(json!({"row": true})).expect("an object")
}

/// The body of a tombstone deleting one cell.
pub fn cell_body(column: &Column, ref_key: i64) -> Body {
    Body::from_value(json!({"column": column.as_str(), "ref_key": ref_key})).expect("an object")
}

/// `cells` (whole rows, every version: what
/// [`crate::MySqlStore::get_rows_all`] returns) without the tombstones of
/// `column` and without what they hide.
pub fn visible(cells: Vec<StoredCell>, column: &Column) -> Result<Vec<StoredCell>> {
    let mut by_row: HashMap<RowKey, Vec<&Cell>> = HashMap::new();
    for stored in cells.iter().filter(|s| s.cell.key.column == *column) {
        by_row
            .entry(stored.cell.key.row_key)
            .or_default()
            .push(&stored.cell);
    }
    if by_row.is_empty() {
        return Ok(cells);
    }
    let tombstones: HashMap<RowKey, Tombstones> = by_row
        .into_iter()
        .map(|(row, cells)| Ok((row, Tombstones::from_cells(cells)?)))
        .collect::<Result<_>>()?;
    Ok(cells
        .into_iter()
        .filter(|s| {
            s.cell.key.column != *column
                && !tombstones
                    .get(&s.cell.key.row_key)
                    .is_some_and(|t| t.hides(&s.cell.key))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_has_one_tombstone_address() {
        let notes = Column::new("NOTES").unwrap();
        let base = Column::new("BASE").unwrap();
        let row = RowKey::parse("6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d").unwrap();
        assert_eq!(cell_ref_key(&notes, 3), cell_ref_key(&notes, 3));
        assert_ne!(cell_ref_key(&notes, 3), cell_ref_key(&notes, 4));
        assert_ne!(cell_ref_key(&notes, 3), cell_ref_key(&base, 3));
        assert_ne!(cell_ref_key(&notes, 0), row_ref_key());
        let column = Column::new("DELETED").unwrap();
        let t = cell_tombstone(row, &column, &notes, 3);
        assert_eq!(Tombstones::from_cells([&t]).unwrap().cells.len(), 1);
        assert!(Tombstones::from_cells([&row_tombstone(row, &column)])
            .unwrap()
            .row_deleted());
    }

    #[test]
    fn a_tombstone_to_write_is_checked_whole() {
        let row = RowKey::parse("6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d").unwrap();
        let column = Column::new("DELETED").unwrap();
        let notes = Column::new("NOTES").unwrap();
        let good = cell_tombstone(row, &column, &notes, 3);
        assert_eq!(
            Deletion::checked(&good).unwrap(),
            Deletion::Cell(notes.clone(), 3)
        );
        assert_eq!(
            Deletion::checked(&row_tombstone(row, &column)).unwrap(),
            Deletion::Row
        );
        let with = |ref_key: i64, body: Value| {
            Cell::new(
                row,
                column.clone(),
                RefKey::new(ref_key).unwrap(),
                Body::from_value(body).unwrap(),
            )
        };
        let refused = [
            (with(0, json!({"row": false})), "body"),
            (with(0, json!({"row": true, "why": 1})), "body"),
            (with(5, json!({"row": true})), "ref_key"),
            (
                with(
                    cell_ref_key(&notes, 3).get(),
                    json!({"column": "NOTES", "ref_key": 4}),
                ),
                "ref_key",
            ),
            (with(1, json!({"column": "no such", "ref_key": 1})), "body"),
            (with(1, json!({"column": "NOTES", "ref_key": -1})), "body"),
        ];
        for (cell, field) in refused {
            match Deletion::checked(&cell) {
                Err(Error::InvalidInput { field: f, .. }) => assert_eq!(f, field, "{}", cell.body),
                other => panic!("{} was not refused: {other:?}", cell.body),
            }
        }
        // Readers stay lenient: a stored body with more fields still reads.
        assert_eq!(
            Deletion::of(&with(0, json!({"row": true, "why": 1}))).unwrap(),
            Deletion::Row
        );
    }
}
