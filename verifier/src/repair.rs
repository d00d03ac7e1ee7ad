//! `mezzanine verify repair`: rewrite the side that is not the source of
//! truth, re-verify, clear the mismatch.
//!
//! The source of truth follows the mode: the legacy tables until
//! `primary` (writes reach them first), Schemaless from `primary` on. For
//! one (row, column):
//!
//! - truth is legacy: Schemaless's cells of the column are replaced by the
//!   legacy ones (for a row column, the cells at or above the legacy
//!   version; older versions stay as history), with
//!   [`schemaless::MySqlStore::replace_cells`];
//! - truth is Schemaless: the legacy column is rewritten from Schemaless's
//!   latest cell (a row column) or all its cells (a child column), with
//!   [`legacy::LegacyStore::replace_column`].
//!
//! Both sides are then read again and compared; only an equal result
//! resolves the mismatch.
//!
//! What the truth no longer has is deleted the way the stores record a
//! deletion, not by removing cells: Schemaless is append-only, and its
//! triggers (and everything fed by them) learn of a deletion only from a
//! tombstone. So, with the tombstone column known:
//!
//! - truth is legacy and the row has no cells in PostgreSQL any more (a
//!   delete capture never saw): the row's tombstone is written to
//!   Schemaless; a child row PostgreSQL no longer has gets its own
//!   tombstone. That is what capture writes for the same deletes, so a
//!   repaired store is the one capture would have made. Before writing,
//!   PostgreSQL is read again, after Schemaless was read: a row inserted
//!   meanwhile is not deleted (a tombstone retires its key for good).
//!   Other differences of a child column are replaced cell by cell,
//!   leaving the hidden cells in place as history;
//! - truth is legacy and Schemaless's tombstones hide what PostgreSQL has
//!   (a deleted key written again in PostgreSQL): refused before anything
//!   is written, since a tombstone retires its key and no repair can bring
//!   the row back under it;
//! - truth is Schemaless and its tombstone deletes the whole row: the
//!   tombstone is applied to the legacy tables as the reverse mirror
//!   applies it (the parent row and its child rows deleted), capture
//!   skipped. Without a tombstone, a row Schemaless lacks is still not
//!   deleted from PostgreSQL: a missing row is not a deleted one.

use std::collections::BTreeMap;

use async_trait::async_trait;
use config::ColumnKind;
use legacy::{LegacyStore, TransactionHook};
use schemaless::tombstone::{self, Tombstones};
use schemaless::{Cell, CellStore, Column, MySqlStore, ReadFrom, RowKey, WriteOutcome};
use sqlx::PgPool;

use crate::compare::{self, Rules, Side, Unit};
use crate::error::Error;
use crate::store;

/// What the repair of one (row, column) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repaired {
    /// The stores already agreed; the mismatch (if any) is resolved.
    AlreadyEqual,
    /// The other side was rewritten and now agrees.
    Rewritten,
    /// What the truth no longer has was deleted from the other side (a
    /// tombstone written to Schemaless, or Schemaless's tombstone applied
    /// to the legacy tables), and nothing else differed: the sides agree.
    Deleted,
}

/// Both sides of one (row, column) as read for the repair.
struct Sides {
    /// PostgreSQL's cells of the column.
    legacy: Vec<Cell>,
    /// Whether PostgreSQL has no cell of the row in any column: the row is
    /// gone, as the layout sees it.
    row_gone: bool,
    /// Schemaless's visible cells of the column: a row column's latest,
    /// a child column's every one.
    schemaless: Vec<Cell>,
    /// What the row's tombstones hide in Schemaless.
    tombstones: Tombstones,
}

/// Repairs with the legacy model and Schemaless.
pub struct Repair<'a> {
    /// The legacy model.
    pub legacy: &'a LegacyStore,
    /// Schemaless.
    pub schemaless: &'a MySqlStore,
    /// The verifier's database.
    pub pool: &'a PgPool,
    /// The comparison rules.
    pub rules: &'a Rules,
    /// The tombstone column: what its tombstones hide is absent from
    /// Schemaless's side.
    pub tombstones: Option<&'a Column>,
    /// The source of truth.
    pub truth: Side,
}

impl Repair<'_> {
    /// Repairs every layout column of `row_key`.
    pub async fn row(&self, row_key: &RowKey) -> Result<Vec<(Column, Repaired)>, Error> {
        let mut done = Vec::new();
        for column in &self.legacy.layout().columns {
            let outcome = self.column(row_key, &column.name).await?;
            done.push((column.name.clone(), outcome));
        }
        Ok(done)
    }

    /// Repairs one (row, column).
    pub async fn column(&self, row_key: &RowKey, column: &Column) -> Result<Repaired, Error> {
        let kind = self
            .legacy
            .layout()
            .column(column.as_str())
            .map(|(_, c)| c.kind())
            .ok_or_else(|| {
                Error::Refused(format!(
                    "{column} is not a column of the layout (its columns are {})",
                    self.legacy.layout().column_names()
                ))
            })?;
        let sides = self.read(row_key, column, kind).await?;
        if self
            .compare(row_key, column, kind, &sides.legacy, &sides.schemaless)
            .is_none()
        {
            store::resolve(self.pool, row_key, column, "already equal").await?;
            return Ok(Repaired::AlreadyEqual);
        }
        let done = match self.truth {
            Side::Legacy => self.follow_legacy(row_key, column, kind, &sides).await?,
            Side::Schemaless => {
                self.follow_schemaless(row_key, column, kind, &sides)
                    .await?
            }
        };
        let after = self.read(row_key, column, kind).await?;
        match self.compare(row_key, column, kind, &after.legacy, &after.schemaless) {
            None => {
                let note = match done {
                    Repaired::Deleted => "deleted",
                    _ => "repaired",
                };
                store::resolve(self.pool, row_key, column, note).await?;
                Ok(done)
            }
            Some(d) => Err(Error::Refused(format!(
                "{row_key} column {column} still differs after the repair (a write raced it?): legacy {}, schemaless {}",
                d.legacy, d.schemaless
            ))),
        }
    }

    /// Makes Schemaless's side of (row, column) what the legacy tables
    /// hold.
    async fn follow_legacy(
        &self,
        row_key: &RowKey,
        column: &Column,
        kind: ColumnKind,
        sides: &Sides,
    ) -> Result<Repaired, Error> {
        let cells = sides
            .legacy
            .iter()
            .map(|c| self.legacy.canonical_cell(c))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(tombstones) = self.tombstones else {
            self.replace(row_key, column, kind, cells, &sides.schemaless)
                .await?;
            return Ok(Repaired::Rewritten);
        };
        if let Some(hidden) = cells.iter().find(|c| sides.tombstones.hides(&c.key)) {
            return Err(Error::Refused(format!(
                "{row_key}: PostgreSQL, the source of truth in this mode, has {} (ref key {}), but Schemaless deleted it: a tombstone in {tombstones} hides it, and a deleted row key (or child address) is retired, never written again. Nothing was written. Delete it from PostgreSQL if it must go, or write it again under a new key",
                hidden.key.column,
                hidden.key.ref_key.get()
            )));
        }
        if sides.row_gone {
            // Read PostgreSQL again, after Schemaless: a row inserted since
            // the first read is not gone, and a tombstone cannot be undone.
            if !self.legacy.row_cells(row_key).await?.is_empty() {
                return Err(Error::Refused(format!(
                    "{row_key} is in PostgreSQL again (inserted while the repair compared): not deleted; compare again"
                )));
            }
            self.put_tombstones(vec![tombstone::row_tombstone(*row_key, tombstones)])
                .await?;
            return Ok(Repaired::Deleted);
        }
        if kind == ColumnKind::Row {
            self.replace(row_key, column, kind, cells, &sides.schemaless)
                .await?;
            return Ok(Repaired::Rewritten);
        }
        // A child column: a tombstone for each child row PostgreSQL no
        // longer has, then each cell it has that Schemaless lacks or holds
        // otherwise replaced on its own (the hidden cells stay as history).
        let legacy_at: BTreeMap<i64, &Cell> =
            cells.iter().map(|c| (c.key.ref_key.get(), c)).collect();
        let gone: Vec<i64> = sides
            .schemaless
            .iter()
            .map(|c| c.key.ref_key.get())
            .filter(|r| !legacy_at.contains_key(r))
            .collect();
        if !gone.is_empty() {
            let now: Vec<i64> = self
                .legacy
                .row_cells(row_key)
                .await?
                .into_iter()
                .filter(|c| c.key.column == *column)
                .map(|c| c.key.ref_key.get())
                .collect();
            if let Some(back) = gone.iter().find(|r| now.contains(r)) {
                return Err(Error::Refused(format!(
                    "{row_key} {column} ref key {back} is in PostgreSQL again (inserted while the repair compared): not deleted; compare again"
                )));
            }
            self.put_tombstones(
                gone.iter()
                    .map(|r| tombstone::cell_tombstone(*row_key, tombstones, column, *r))
                    .collect(),
            )
            .await?;
        }
        let stored: BTreeMap<i64, &Cell> = sides
            .schemaless
            .iter()
            .map(|c| (c.key.ref_key.get(), c))
            .collect();
        let mut rewritten = false;
        for cell in &cells {
            let r = cell.key.ref_key.get();
            if stored.get(&r).is_some_and(|s| s.body == cell.body) {
                continue;
            }
            self.schemaless
                .replace_cells(row_key, column, r, r, vec![cell.clone()])
                .await?;
            rewritten = true;
        }
        Ok(if rewritten || gone.is_empty() {
            Repaired::Rewritten
        } else {
            Repaired::Deleted
        })
    }

    /// Replaces Schemaless's cells of (row, column) with the legacy
    /// tables' `cells`: a row column's at or above the legacy version, a
    /// child column's all.
    async fn replace(
        &self,
        row_key: &RowKey,
        column: &Column,
        kind: ColumnKind,
        cells: Vec<Cell>,
        schemaless: &[Cell],
    ) -> Result<(), Error> {
        let from = match kind {
            ColumnKind::Row => cells.first().map_or(0, |c| c.key.ref_key.get()),
            ColumnKind::Child => 0,
        };
        // Only up to the highest ref key either side showed: a cell
        // relayed after the read (a newer version, a new child) is not the
        // repair's to delete; if it differs, the check after says so.
        let to = cells
            .iter()
            .chain(schemaless)
            .map(|c| c.key.ref_key.get())
            .max()
            .unwrap_or(from)
            .max(from);
        self.schemaless
            .replace_cells(row_key, column, from, to, cells)
            .await?;
        Ok(())
    }

    /// Writes `cells`, tombstones, to Schemaless: each new or already
    /// there.
    async fn put_tombstones(&self, cells: Vec<Cell>) -> Result<(), Error> {
        for (cell, result) in cells
            .iter()
            .zip(self.schemaless.put_cells(cells.clone()).await?)
        {
            match result {
                Ok(
                    WriteOutcome::Written | WriteOutcome::AlreadyPresent | WriteOutcome::Buffered,
                ) => {}
                other => {
                    return Err(Error::Refused(format!(
                        "the tombstone {} was not written ({other:?})",
                        cell.key
                    )))
                }
            }
        }
        Ok(())
    }

    /// Makes the legacy tables' side of (row, column) what Schemaless
    /// holds.
    async fn follow_schemaless(
        &self,
        row_key: &RowKey,
        column: &Column,
        kind: ColumnKind,
        sides: &Sides,
    ) -> Result<Repaired, Error> {
        if kind == ColumnKind::Row && sides.schemaless.is_empty() {
            let Some(tombstones) = self.tombstones.filter(|_| sides.tombstones.row_deleted())
            else {
                return Err(Error::Refused(format!(
                    "{row_key} has no {column} cell in Schemaless, the source of truth in this mode, and no tombstone deletes it; the repair does not delete legacy parent rows (and their children) that Schemaless merely lacks: delete it by hand if it must go"
                )));
            };
            // Deleted in Schemaless: deleted from the legacy tables as the
            // reverse mirror deletes it.
            let results = self
                .legacy
                .put_cells_with(
                    vec![tombstone::row_tombstone(*row_key, tombstones)],
                    &FromSchemaless,
                )
                .await?;
            if let Some(Err(conflict)) = results.first() {
                return Err(Error::Refused(format!(
                    "the deletion of {row_key} was not applied to PostgreSQL: {conflict:?}"
                )));
            }
            return Ok(Repaired::Deleted);
        }
        self.legacy
            .replace_column(row_key, column, sides.schemaless.clone())
            .await?;
        Ok(Repaired::Rewritten)
    }

    /// Both sides of (row, column): a row column's current cell, a child
    /// column's every cell, and what the row's tombstones hide.
    async fn read(
        &self,
        row_key: &RowKey,
        column: &Column,
        kind: ColumnKind,
    ) -> Result<Sides, Error> {
        let row = self.legacy.row_cells(row_key).await?;
        let row_gone = row.is_empty();
        let legacy: Vec<Cell> = row
            .into_iter()
            .filter(|c| c.key.column == *column)
            .collect();
        let mut stored = self
            .schemaless
            .get_rows_all(std::slice::from_ref(row_key), ReadFrom::Master)
            .await?;
        let mut tombstones = Tombstones::default();
        if let Some(column) = self.tombstones {
            tombstones = Tombstones::from_cells(
                stored
                    .iter()
                    .map(|s| &s.cell)
                    .filter(|c| c.key.column == *column),
            )?;
            stored = schemaless::tombstone::visible(stored, column)?;
        }
        let mut schemaless: Vec<Cell> = stored
            .into_iter()
            .map(|s| s.cell)
            .filter(|c| c.key.column == *column)
            .collect();
        if kind == ColumnKind::Row {
            schemaless.sort_by_key(|c| std::cmp::Reverse(c.key.ref_key));
            schemaless.truncate(1);
        }
        Ok(Sides {
            legacy,
            row_gone,
            schemaless,
            tombstones,
        })
    }

    fn compare(
        &self,
        row_key: &RowKey,
        column: &Column,
        kind: ColumnKind,
        legacy: &[Cell],
        schemaless: &[Cell],
    ) -> Option<compare::Difference> {
        let unit: Option<Unit> = match kind {
            ColumnKind::Row => compare::one_cell(
                self.rules,
                self.legacy,
                *row_key,
                column,
                legacy.first(),
                schemaless.first(),
            ),
            ColumnKind::Child => compare::cell_sets(
                self.rules,
                self.legacy,
                *row_key,
                column,
                &legacy.iter().collect::<Vec<_>>(),
                &schemaless.iter().collect::<Vec<_>>(),
            ),
        };
        unit.and_then(|u| u.difference)
    }
}

/// The hook of a repair's legacy write: its change came from Schemaless,
/// so capture must not send it back.
struct FromSchemaless;

#[async_trait]
impl TransactionHook for FromSchemaless {
    fn skip_capture(&self) -> bool {
        true
    }
}
