//! Deletes: a tombstone (`capture.tombstone_column`) checked against
//! the layout and applied as a DELETE of what it names, inside a write
//! batch's transaction (see [`super::write`]).

use schemaless::tombstone::Deletion;
use schemaless::{Cell, CellResult, Error, Result, WriteOutcome};
use sqlx::{AssertSqlSafe, Postgres, Transaction};

use super::write::{Prepared, Write};
use super::LegacyStore;
use crate::layout::Shape;

/// What a tombstone deletes from the legacy tables.
pub(super) enum Deleted {
    /// The parent row, and its rows in the layout's child tables.
    Row,
    /// One child row: the child column's index and the row's ref key.
    Child(usize, i64),
}

impl LegacyStore {
    /// A tombstone, checked: its body and derived ref key as every writer
    /// of the deletion writes them, and something the legacy tables can
    /// delete (a whole row, or one child row). One version of a row column
    /// cannot be deleted here: PostgreSQL keeps only the row's current
    /// version.
    pub(super) fn prepare_deletion(&self, cell: &Cell) -> Result<Prepared> {
        let deletion = Deletion::checked(cell)?;
        let deleted = match &deletion {
            Deletion::Row => Deleted::Row,
            Deletion::Cell(column, ref_key) => {
                let (index, layout) = self
                    .column(column)
                    .map_err(|e| Error::invalid("body.column", e.to_string()))?;
                if matches!(layout.shape, Shape::Row) {
                    return Err(Error::invalid(
                        "body.column",
                        format!(
                            "{column} is a row column, kept in the parent row of {}, which holds only the row's current version: one version of it cannot be deleted; delete the whole row ({})",
                            layout.table,
                            Deletion::Row.body()
                        ),
                    ));
                }
                Deleted::Child(index, *ref_key)
            }
        };
        Ok(Prepared {
            row_key: cell.key.row_key.uuid(),
            ref_key: cell.key.ref_key.get(),
            canonical: deletion.body(),
            what: Write::Delete(deleted),
        })
    }

    /// Deletes what a tombstone names, inside the batch's transaction:
    /// `Written` when a row was deleted, `AlreadyPresent` when there was
    /// none (a deletion applied twice deletes once). A whole row's
    /// deletion removes its rows in the layout's child tables first, so a
    /// foreign key without `ON DELETE CASCADE` does not refuse it; a row
    /// of another table that still refers to the parent does (bad input
    /// naming PostgreSQL's reason).
    pub(super) async fn delete(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        cell: &Prepared,
        deleted: &Deleted,
        copy_to: Option<&str>,
    ) -> Result<CellResult> {
        let layout = &*self.layout;
        let parent_is_p = format!("p.{} = $1", layout.uuid_sql);
        let (statement, child_ref_key) = match deleted {
            Deleted::Row => {
                let mut children: Vec<(&str, &str)> = Vec::new();
                for column in &layout.columns {
                    if let Shape::Child { parent_sql } = &column.shape {
                        let child = (column.table_sql.as_str(), parent_sql.as_str());
                        if !children.contains(&child) {
                            children.push(child);
                        }
                    }
                }
                for (table, parent) in children {
                    let sql = format!(
                        "/* mezzanine */ DELETE FROM {table} c USING {parent_table} p WHERE c.{parent} = p.{id} AND {parent_is_p}",
                        parent_table = layout.table_sql,
                        id = layout.id_sql,
                    );
                    sqlx::query(AssertSqlSafe(sql))
                        .bind(cell.row_key)
                        .execute(&mut **tx)
                        .await
                        .map_err(|e| self.delete_error(table, e))?;
                }
                (
                    format!(
                        "DELETE FROM {table} p WHERE {parent_is_p} RETURNING 1",
                        table = layout.table_sql
                    ),
                    None,
                )
            }
            Deleted::Child(index, ref_key) => {
                let column = &layout.columns[*index];
                let Shape::Child { parent_sql } = &column.shape else {
                    unreachable!("prepare_deletion takes child columns only")
                };
                (
                    format!(
                        "DELETE FROM {table} c USING {parent_table} p WHERE c.{parent_sql} = p.{id} AND {parent_is_p} AND c.{s} = $2 RETURNING 1",
                        table = column.table_sql,
                        parent_table = layout.table_sql,
                        id = layout.id_sql,
                        s = column.ref_key_sql,
                    ),
                    Some(*ref_key),
                )
            }
        };
        // The tombstone is copied (into the outbox) when it deleted a row,
        // by the same statement; parameters after the ones it uses.
        let next = if child_ref_key.is_some() { 3 } else { 2 };
        let sql = match copy_to {
            None => format!("/* mezzanine */ WITH w AS ({statement}) SELECT count(*) FROM w"),
            Some(table) => format!(
                "/* mezzanine */ WITH w AS ({statement}),
                 c AS (INSERT INTO {table} (row_key, column_name, ref_key, body)
                       SELECT $1, ${}, ${}, ${} WHERE EXISTS (SELECT 1 FROM w))
                 SELECT count(*) FROM w",
                next,
                next + 1,
                next + 2
            ),
        };
        let mut query = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql)).bind(cell.row_key);
        if let Some(r) = child_ref_key {
            query = query.bind(r);
        }
        if copy_to.is_some() {
            query = query
                .bind(self.tombstones.as_str().to_string())
                .bind(cell.ref_key)
                .bind(cell.canonical.to_string());
        }
        let deleted_rows = query
            .fetch_one(&mut **tx)
            .await
            .map_err(|e| self.delete_error(&layout.table, e))?;
        Ok(Ok(match deleted_rows {
            0 => WriteOutcome::AlreadyPresent,
            _ => WriteOutcome::Written,
        }))
    }

    /// Maps a failed delete: a row of another table still referring to
    /// the deleted one (`23503`) is bad input naming PostgreSQL's reason.
    fn delete_error(&self, table: &str, e: sqlx::Error) -> Error {
        let referred = |db: &&dyn sqlx::error::DatabaseError| db.code().as_deref() == Some("23503");
        match e.as_database_error().filter(referred) {
            Some(db) => Error::invalid(
                "body",
                format!(
                    "PostgreSQL refuses the deletion from {table}: {}",
                    db.message()
                ),
            ),
            None => self.storage(e),
        }
    }
}
