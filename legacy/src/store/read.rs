//! Reads: a row column's cell is the parent row, a child column's cell
//! one child row; values are read back through the layout's conversions,
//! and anything that cannot be is a corrupt cell naming where.

use schemaless::{Body, Cell, CellKey, Error, RefKey, Result, RowKey, StoredCell};
use serde_json::Map;
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use super::LegacyStore;
use crate::layout::{ColumnLayout, Shape};

impl LegacyStore {
    /// A child cell by parent UUID and ref key (the latest when `None`);
    /// `parent` is the child's key to the parent id.
    pub(super) async fn child_cell<'e, E>(
        &self,
        executor: E,
        column: &ColumnLayout,
        parent: &str,
        row_key: Uuid,
        ref_key: Option<i64>,
    ) -> Result<Option<(i64, Body)>>
    where
        E: sqlx::PgExecutor<'e>,
    {
        let layout = &*self.layout;
        let filter = if ref_key.is_some() {
            format!("AND c.{} = $2", column.ref_key_sql)
        } else {
            format!("ORDER BY c.{} DESC LIMIT 1", column.ref_key_sql)
        };
        let sql = format!(
            "/* mezzanine */ SELECT c.{s}::int8, {exprs} FROM {table} c JOIN {parent_table} p ON p.{id} = c.{parent}
             WHERE p.{uuid} = $1 {filter}",
            s = column.ref_key_sql,
            exprs = column.read_exprs("c"),
            table = column.table_sql,
            parent_table = layout.table_sql,
            id = layout.id_sql,
            uuid = layout.uuid_sql,
        );
        let mut query = sqlx::query(AssertSqlSafe(sql)).bind(row_key);
        if let Some(r) = ref_key {
            query = query.bind(r);
        }
        let Some(row) = query
            .fetch_optional(executor)
            .await
            .map_err(|e| self.storage(e))?
        else {
            return Ok(None);
        };
        let seq: i64 = row.try_get(0).map_err(|e| self.storage(e))?;
        let what = || {
            format!(
                "{} of {} {row_key}, column {} ref {seq}",
                column.table, layout.table, column.name
            )
        };
        Ok(Some((seq, read_body(column, &row, 1, &what)?)))
    }

    /// One cell by its full address: a row column has only its current
    /// ref key, a child column one per child row.
    pub(super) async fn cell(&self, key: &CellKey) -> Result<Option<StoredCell>> {
        let (_, column) = self.column(&key.column)?;
        let wanted = key.ref_key.get();
        match &column.shape {
            Shape::Row => match self.row_cell(column, key.row_key.uuid()).await? {
                Some((v, body)) if v == wanted => Ok(Some(stored(key.row_key, column, v, body)?)),
                Some((v, _)) if v > wanted => Err(Error::Unsupported {
                    operation: "get_cell",
                    reason: format!(
                        "the legacy model keeps only the latest cell of row column {} (ref key {v}), not ref key {wanted}",
                        column.name
                    ),
                }),
                _ => Ok(None),
            },
            Shape::Child { parent_sql } => self
                .child_cell(&self.pool, column, parent_sql, key.row_key.uuid(), Some(wanted))
                .await?
                .map(|(v, body)| stored(key.row_key, column, v, body))
                .transpose(),
        }
    }

    /// The row column's current ref key and body for a UUID.
    async fn row_cell(&self, column: &ColumnLayout, row_key: Uuid) -> Result<Option<(i64, Body)>> {
        let layout = &*self.layout;
        let sql = format!(
            "/* mezzanine */ SELECT p.{v}::int8, {exprs} FROM {table} p WHERE p.{uuid} = $1",
            v = column.ref_key_sql,
            exprs = column.read_exprs("p"),
            table = layout.table_sql,
            uuid = layout.uuid_sql,
        );
        let Some(row) = sqlx::query(AssertSqlSafe(sql))
            .bind(row_key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| self.storage(e))?
        else {
            return Ok(None);
        };
        let Some(version) = row
            .try_get::<Option<i64>, _>(0)
            .map_err(|e| self.storage(e))?
        else {
            return Ok(None);
        };
        let what = || format!("{} {row_key}, column {}", layout.table, column.name);
        Ok(Some((version, read_body(column, &row, 1, &what)?)))
    }

    pub(super) async fn latest(
        &self,
        column: &ColumnLayout,
        row_key: &RowKey,
    ) -> Result<Option<StoredCell>> {
        let found = match &column.shape {
            Shape::Row => self.row_cell(column, row_key.uuid()).await?,
            Shape::Child { parent_sql } => {
                self.child_cell(&self.pool, column, parent_sql, row_key.uuid(), None)
                    .await?
            }
        };
        found
            .map(|(ref_key, body)| stored(*row_key, column, ref_key, body))
            .transpose()
    }
}

/// A cell as the legacy model returns it: it has no change log, so
/// `added_id` and `created_at` are 0.
pub(crate) fn stored(
    row_key: RowKey,
    column: &ColumnLayout,
    ref_key: i64,
    body: Body,
) -> Result<StoredCell> {
    Ok(StoredCell {
        cell: Cell::new(
            row_key,
            column.name.clone(),
            ref_key_of(ref_key, || row_key.to_string())?,
            body,
        ),
        added_id: 0,
        created_at: 0,
    })
}

fn ref_key_of(value: i64, what: impl Fn() -> String) -> Result<RefKey> {
    RefKey::new(value).map_err(|_| Error::Unreadable {
        what: what(),
        reason: format!("ref key {value} is negative"),
    })
}

/// The body of `column` from the row's fields starting at `start`.
pub(crate) fn read_body(
    column: &ColumnLayout,
    row: &PgRow,
    start: usize,
    what: &dyn Fn() -> String,
) -> Result<Body> {
    let mut map = Map::with_capacity(column.fields.len());
    for (i, field) in column.fields.iter().enumerate() {
        let text: Option<String> = row.try_get(start + i).map_err(|e| Error::Unreadable {
            what: what(),
            reason: format!("field {}: {e}", field.json),
        })?;
        let value = field.render(text).map_err(|reason| Error::Unreadable {
            what: what(),
            reason: format!(
                "field {} ({}.{}): {reason}",
                field.json, column.table, field.sql
            ),
        })?;
        map.insert(field.json.clone(), value);
    }
    Ok(Body::from(map))
}

/// The cell at `start` (ref key, then fields) of a scanned row; `None` when
/// a row column's version is NULL (the row has no cell of it).
pub(crate) fn read_cell(
    column: &ColumnLayout,
    row: &PgRow,
    start: usize,
    row_key: RowKey,
    what: &dyn Fn() -> String,
) -> Result<Option<Cell>> {
    let ref_key: Option<i64> = row.try_get(start).map_err(|e| Error::Unreadable {
        what: what(),
        reason: e.to_string(),
    })?;
    let Some(ref_key) = ref_key else {
        return Ok(None);
    };
    let body = read_body(column, row, start + 1, what)?;
    Ok(Some(Cell::new(
        row_key,
        column.name.clone(),
        ref_key_of(ref_key, what)?,
        body,
    )))
}
