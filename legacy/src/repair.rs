//! Whole-row reads and the operator's rewrite of one (row, column), for
//! the verifier's comparisons and `mezzanine verify repair`.
//!
//! The repair writes the legacy tables the way the store always does
//! (every value cast, read back and checked), after a statement in the
//! same transaction that makes room for it: a row column's version is
//! lowered below the replacement so the version-guarded update applies;
//! a child column's rows of the parent are deleted so the replacements
//! are inserted. The two commit together or not at all.

use async_trait::async_trait;
use schemaless::{Body, Cell, Column, Error, Result, RowKey};
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use crate::layout::{ColumnLayout, Shape};
use crate::store::{read_body, LegacyStore, TransactionHook};

impl LegacyStore {
    /// Every cell of one row as the legacy tables hold it: the current
    /// cell of each row column and every child cell, in address order.
    pub async fn row_cells(&self, row_key: &RowKey) -> Result<Vec<Cell>> {
        let mut cells = Vec::new();
        for column in &self.layout.columns {
            for (ref_key, body) in self.column_rows(column, row_key.uuid()).await? {
                cells.push(Cell::new(
                    *row_key,
                    column.name.clone(),
                    schemaless::RefKey::new(ref_key).map_err(|_| Error::Unreadable {
                        what: format!("{row_key}, column {}", column.name),
                        reason: format!("ref key {ref_key} is negative"),
                    })?,
                    body,
                ));
            }
        }
        cells.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(cells)
    }

    /// Which of `rows` the parent table has (by row key, whatever its
    /// columns hold): the full diff's check of rows Schemaless holds.
    pub async fn existing_row_keys(
        &self,
        rows: &[RowKey],
    ) -> Result<std::collections::HashSet<RowKey>> {
        let layout = &*self.layout;
        let sql = format!(
            "/* mezzanine */ SELECT p.{uuid} FROM {table} p WHERE p.{uuid} = ANY($1)",
            uuid = layout.uuid_sql,
            table = layout.table_sql,
        );
        let keys: Vec<Uuid> = rows.iter().map(|r| r.uuid()).collect();
        let found: Vec<Uuid> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(&keys)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.storage(e))?;
        Ok(found.into_iter().map(RowKey::from).collect())
    }

    async fn column_rows(&self, column: &ColumnLayout, row_key: Uuid) -> Result<Vec<(i64, Body)>> {
        let layout = &*self.layout;
        let sql = match &column.shape {
            Shape::Row => format!(
                "/* mezzanine */ SELECT p.{v}::int8, {exprs} FROM {table} p WHERE p.{uuid} = $1 AND p.{v} IS NOT NULL",
                v = column.ref_key_sql,
                exprs = column.read_exprs("p"),
                table = layout.table_sql,
                uuid = layout.uuid_sql,
            ),
            Shape::Child { parent_sql } => format!(
                "/* mezzanine */ SELECT c.{s}::int8, {exprs} FROM {table} c JOIN {parent_table} p ON p.{id} = c.{parent}
                 WHERE p.{uuid} = $1 ORDER BY c.{s}",
                s = column.ref_key_sql,
                exprs = column.read_exprs("c"),
                table = column.table_sql,
                parent_table = layout.table_sql,
                id = layout.id_sql,
                parent = parent_sql,
                uuid = layout.uuid_sql,
            ),
        };
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(row_key)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.storage(e))?;
        rows.iter()
            .map(|row| {
                let ref_key: i64 = row.try_get(0).map_err(|e| self.storage(e))?;
                let what = || {
                    format!(
                        "{} {row_key}, column {} ref {ref_key}",
                        layout.table, column.name
                    )
                };
                Ok((ref_key, read_body(column, row, 1, &what)?))
            })
            .collect()
    }

    /// A query of `(row_key uuid, ref_key int8)`: for every parent row
    /// with a UUID, the ref key of its current cell of `column` (-1 when
    /// it has none). The verifier joins its record of what it verified
    /// against it to tell what is still verified since its last write.
    pub fn current_ref_keys_sql(&self, column: &Column) -> Option<String> {
        let layout = &*self.layout;
        let (_, c) = self.layout.column(column.as_str())?;
        Some(match &c.shape {
            Shape::Row => format!(
                "/* mezzanine */ SELECT p.{uuid} AS row_key, COALESCE(p.{v}::int8, -1) AS ref_key FROM {table} p WHERE p.{uuid} IS NOT NULL",
                uuid = layout.uuid_sql,
                v = c.ref_key_sql,
                table = layout.table_sql,
            ),
            Shape::Child { parent_sql } => format!(
                "/* mezzanine */ SELECT p.{uuid} AS row_key, COALESCE((SELECT max(c.{s})::int8 FROM {child} c WHERE c.{parent} = p.{id}), -1) AS ref_key
                 FROM {table} p WHERE p.{uuid} IS NOT NULL",
                uuid = layout.uuid_sql,
                s = c.ref_key_sql,
                child = c.table_sql,
                parent = parent_sql,
                id = layout.id_sql,
                table = layout.table_sql,
            ),
        })
    }

    /// Makes the cells of (`row_key`, `column`) exactly `cells`: for a row
    /// column, its one current cell (which may have a lower version than
    /// the stored one); for a child column, the parent's whole set of
    /// child rows. A row column cannot be emptied (that would delete the
    /// parent row and its children); that is refused.
    pub async fn replace_column(
        &self,
        row_key: &RowKey,
        column: &Column,
        cells: Vec<Cell>,
    ) -> Result<()> {
        let (_, layout_column) = self.layout.column(column.as_str()).ok_or_else(|| {
            Error::invalid(
                "column",
                format!(
                    "{column} is not a column of the layout (its columns are {})",
                    self.layout.column_names()
                ),
            )
        })?;
        schemaless::cell::check_cells_of(row_key, column, &cells)?;
        let layout = &*self.layout;
        let hook = match &layout_column.shape {
            Shape::Row => {
                let [cell] = cells.as_slice() else {
                    return Err(Error::invalid(
                        "cells",
                        format!(
                            "row column {column} of {} holds exactly one current cell; the repair got {} (emptying it would delete the parent row)",
                            layout.table,
                            cells.len()
                        ),
                    ));
                };
                MakeRoom {
                    sql: format!(
                        "/* mezzanine */ UPDATE {table} AS p SET {v} = $2 - 1 WHERE p.{uuid} = $1 AND p.{v} >= $2",
                        table = layout.table_sql,
                        v = layout_column.ref_key_sql,
                        uuid = layout.uuid_sql,
                    ),
                    row_key: row_key.uuid(),
                    ref_key: Some(cell.key.ref_key.get()),
                    reserved: self.row_ids_exist().await?,
                }
            }
            Shape::Child { parent_sql } => MakeRoom {
                sql: format!(
                    "/* mezzanine */ DELETE FROM {table} c USING {parent_table} p WHERE p.{id} = c.{parent} AND p.{uuid} = $1",
                    table = layout_column.table_sql,
                    parent_table = layout.table_sql,
                    id = layout.id_sql,
                    parent = parent_sql,
                    uuid = layout.uuid_sql,
                ),
                row_key: row_key.uuid(),
                ref_key: None,
                reserved: false,
            },
        };
        let results = self.put_cells_with(cells, &hook).await?;
        if let Some(i) = results.iter().position(|r| {
            !matches!(
                r,
                Ok(schemaless::WriteOutcome::Written | schemaless::WriteOutcome::AlreadyPresent)
            )
        }) {
            return Err(Error::invalid(
                "cells",
                format!(
                    "cell {i} of the repair was not written ({:?}): the row changed meanwhile; compare again",
                    results[i]
                ),
            ));
        }
        Ok(())
    }
}

impl LegacyStore {
    /// Whether `mezzanine.row_ids` (the mirror's schema) exists.
    async fn row_ids_exist(&self) -> Result<bool> {
        sqlx::query_scalar("/* mezzanine */ SELECT to_regclass('mezzanine.row_ids') IS NOT NULL")
            .fetch_one(self.pool())
            .await
            .map_err(|e| crate::storage_error("postgres (repair)", e))
    }
}

/// The statement run first in a repair's transaction.
struct MakeRoom {
    sql: String,
    row_key: Uuid,
    ref_key: Option<i64>,
    /// A parent row the repair inserts takes the integer id reserved for
    /// it in `mezzanine.row_ids` (the id the proxy answered the app's
    /// `RETURNING id` with), as the reverse mirror's row would: before,
    /// the sequence's next. Only where that table exists (the mirror's
    /// schema).
    reserved: bool,
}

#[async_trait]
impl TransactionHook for MakeRoom {
    /// The repair copies Schemaless (the source of truth) into the legacy
    /// tables: capturing it would send the same cells back.
    fn skip_capture(&self) -> bool {
        true
    }

    fn reserved_ids(&self) -> bool {
        self.reserved
    }

    async fn begin(&self, tx: &mut sqlx::PgConnection) -> Result<()> {
        let mut query = sqlx::query(AssertSqlSafe(self.sql.clone())).bind(self.row_key);
        if let Some(r) = self.ref_key {
            query = query.bind(r);
        }
        query
            .execute(tx)
            .await
            .map_err(|e| crate::storage_error("postgres (repair)", e))?;
        Ok(())
    }

    async fn before_commit(
        &self,
        _: &mut sqlx::PgConnection,
        _: &[Cell],
        _: &[schemaless::CellResult],
    ) -> Result<()> {
        Ok(())
    }
}
