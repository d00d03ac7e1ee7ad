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

use config::ColumnKind;
use legacy::LegacyStore;
use schemaless::{Cell, Column, MySqlStore, ReadFrom, RowKey};
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
        let (legacy, schemaless) = self.read(row_key, column, kind).await?;
        if self
            .compare(row_key, column, kind, &legacy, &schemaless)
            .is_none()
        {
            store::resolve(self.pool, row_key, column, "already equal").await?;
            return Ok(Repaired::AlreadyEqual);
        }
        match self.truth {
            Side::Legacy => {
                let cells = legacy
                    .iter()
                    .map(|c| self.legacy.canonical_cell(c))
                    .collect::<Result<Vec<_>, _>>()?;
                let from = match kind {
                    ColumnKind::Row => cells.first().map_or(0, |c| c.key.ref_key.get()),
                    ColumnKind::Child => 0,
                };
                // Only up to the highest ref key either side showed: a cell
                // relayed after the read (a newer version, a new child) is
                // not the repair's to delete; if it differs, the check
                // below says so.
                let to = legacy
                    .iter()
                    .chain(&schemaless)
                    .map(|c| c.key.ref_key.get())
                    .max()
                    .unwrap_or(from)
                    .max(from);
                self.schemaless
                    .replace_cells(row_key, column, from, to, cells)
                    .await?;
            }
            Side::Schemaless => {
                if kind == ColumnKind::Row && schemaless.is_empty() {
                    return Err(Error::Refused(format!(
                        "{row_key} has no {column} cell in Schemaless, the source of truth in this mode; the repair does not delete legacy parent rows (and their children): delete it by hand if it must go"
                    )));
                }
                self.legacy
                    .replace_column(row_key, column, schemaless.clone())
                    .await?;
            }
        }
        let (legacy, schemaless) = self.read(row_key, column, kind).await?;
        match self.compare(row_key, column, kind, &legacy, &schemaless) {
            None => {
                store::resolve(self.pool, row_key, column, "repaired").await?;
                Ok(Repaired::Rewritten)
            }
            Some(d) => Err(Error::Refused(format!(
                "{row_key} column {column} still differs after the repair (a write raced it?): legacy {}, schemaless {}",
                d.legacy, d.schemaless
            ))),
        }
    }

    /// Both sides' cells of (row, column): a row column's current cell, a
    /// child column's every cell.
    async fn read(
        &self,
        row_key: &RowKey,
        column: &Column,
        kind: ColumnKind,
    ) -> Result<(Vec<Cell>, Vec<Cell>), Error> {
        let legacy: Vec<Cell> = self
            .legacy
            .row_cells(row_key)
            .await?
            .into_iter()
            .filter(|c| c.key.column == *column)
            .collect();
        let mut stored = self
            .schemaless
            .get_rows_all(std::slice::from_ref(row_key), ReadFrom::Master)
            .await?;
        if let Some(column) = self.tombstones {
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
        Ok((legacy, schemaless))
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
