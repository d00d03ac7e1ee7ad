//! The cell API emulated on the legacy tables.
//!
//! - A `row` column's cell is the parent row: its ref key is the version
//!   column, and a put is an upsert guarded by it. A higher ref key
//!   replaces the row's fields; the same ref key with the same body is
//!   already present, with another body a conflict; a lower one is
//!   [`schemaless::WriteOutcome::Superseded`] and changes nothing (even when the body
//!   differs from what was once written at that ref key, which Schemaless
//!   would call a conflict: the legacy row kept no history to compare
//!   with). Only the latest cell exists, so `get_cell` of an older ref key
//!   is unsupported.
//! - A `child` column's cell is one child row, found by (parent key, ref
//!   key); a put inserts it, idempotently. The parent row must exist.
//! - Every written value is read back in the same transaction through the
//!   same conversion as every read; if PostgreSQL would keep something else
//!   (a numeric rounded to its scale), the write is refused and rolled back.
//! - A batch is one transaction, applied in address order (so concurrent
//!   batches lock parent rows in the same order); a lost race for a new
//!   parent row retries the batch.
//!
//! - A tombstone (`capture.tombstone_column`) deletes what it names: the
//!   parent row with its child-table rows, or one child row. The tables
//!   keep no tombstones: reads of that column find none.
//!
//! What the legacy model cannot do (`get_cells_for_shard`: it has no change
//! log) is [`Error::Unsupported`].
//!
//! Its rooms: `write` (checking, canonicalizing and writing batches),
//! `delete` (tombstones applied as deletes),
//! `read` (cells read back through the layout), `hook` (what a caller
//! runs inside a write's transaction, and skipping capture); the chunk
//! scan is [`crate::scan`].

use std::sync::Arc;

use async_trait::async_trait;
use schemaless::{
    Answer, Body, Cell, CellKey, CellResult, CellStore, Column, Error, IndexEntry, IndexQuery,
    ReadFrom, Result, RowKey, ShardPage, StoredCell,
};
use sqlx::{AssertSqlSafe, PgPool, Row};
use uuid::Uuid;

use crate::layout::{ColumnLayout, Layout, Shape};

mod ask;
mod delete;
mod hook;
mod read;
mod write;

pub use ask::Asked;
pub(crate) use hook::NoHook;
pub use hook::{TransactionHook, CAPTURE_SETTING};
pub(crate) use read::{read_body, read_cell, stored};
use write::canonicalize;

/// The legacy PostgreSQL tables behind the cell API.
#[derive(Clone)]
pub struct LegacyStore {
    pub(crate) pool: PgPool,
    /// Sessions that plan generically, for [`LegacyStore::ask`] (opened
    /// when first asked).
    pub(crate) asking: PgPool,
    pub(crate) layout: Arc<Layout>,
    /// Checked at the API boundary, as the Schemaless store does.
    limits: config::Limits,
    /// Reported by `shard_count`, so callers route as for Schemaless.
    shard_count: u32,
    /// `postgres host:port/db`, naming the node in errors.
    pub(crate) label: String,
    /// `capture.tombstone_column`: a cell put there deletes what it names
    /// (see [`LegacyStore::put_cells_with`]).
    pub(crate) tombstones: Column,
}

impl LegacyStore {
    /// Connects to `[legacy]` and resolves `[layout]` and `[[index]]`
    /// against the live schema.
    pub async fn connect(config: &config::Config) -> Result<LegacyStore, crate::Error> {
        let legacy = crate::connection::legacy_config(config)?;
        let layout = crate::connection::layout_config(config)?;
        let tombstones = Column::new(&config.capture.tombstone_column)
            .map_err(|e| crate::Error::Config(format!("capture.tombstone_column: {e}")))?;
        let pool = crate::connection::pool(legacy)?;
        let asking = crate::connection::generic_plans_pool(legacy)?;
        let layout = Layout::resolve(layout, &config.indexes, &pool).await?;
        Ok(LegacyStore {
            tombstones,
            pool,
            asking,
            layout: Arc::new(layout),
            limits: config.limits.clone(),
            shard_count: config.instance.shard_count,
            label: crate::connection::label(&legacy.url),
        })
    }

    /// The resolved layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// `capture.tombstone_column`, where deletions are written.
    pub fn tombstones(&self) -> &Column {
        &self.tombstones
    }

    /// Whether a cell of `column` can be written here: a layout column's,
    /// or a tombstone (which deletes what it names).
    pub fn writes(&self, column: &Column) -> bool {
        self.layout.column(column.as_str()).is_some() || *column == self.tombstones
    }

    /// The same store over another resolved layout: `change` edits a copy
    /// of this one. A test swaps a field's [`crate::conversion::Conversion`] this way to
    /// prove that a check which must not trust the conversion does not.
    pub fn with_layout(&self, change: impl FnOnce(&mut Layout)) -> LegacyStore {
        let mut layout = Layout::clone(&self.layout);
        change(&mut layout);
        LegacyStore {
            layout: Arc::new(layout),
            ..self.clone()
        }
    }

    /// The connection pool (the facade and the mirror share it).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes the pools.
    pub async fn close(&self) {
        self.pool.close().await;
        self.asking.close().await;
    }

    pub(crate) fn storage(&self, source: sqlx::Error) -> Error {
        crate::storage_error(self.label.clone(), source)
    }

    fn column(&self, column: &Column) -> Result<(usize, &ColumnLayout)> {
        self.layout.column(column.as_str()).ok_or_else(|| {
            Error::invalid(
                "column",
                format!(
                    "{column} is not a column of the layout (its columns are {})",
                    self.layout.column_names()
                ),
            )
        })
    }

    /// The canonical form of a body for `column`: every field present,
    /// each value in its conversion's one form. The verifier compares
    /// bodies through it.
    pub fn canonical_body(&self, column: &Column, body: &Body) -> Result<Body> {
        let (_, layout) = self.column(column)?;
        Ok(canonicalize(layout, body)?.0)
    }
}

#[async_trait]
impl CellStore for LegacyStore {
    fn shard_count(&self) -> u32 {
        self.shard_count
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        self.put_cells_with(cells, &NoHook).await
    }

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        _from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        if key.column == self.tombstones {
            // A deleted legacy row is simply gone: no tombstone is kept.
            return Ok(Answer::fresh(None));
        }
        Ok(Answer::fresh(self.cell(key).await?))
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        _from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        if *column == self.tombstones {
            return Ok(Answer::fresh(None));
        }
        let (_, column) = self.column(column)?;
        Ok(Answer::fresh(self.latest(column, row_key).await?))
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        _from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let reads = self
            .layout
            .columns
            .iter()
            .map(|column| self.latest(column, row_key));
        let mut cells: Vec<StoredCell> = futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect();
        cells.sort_by(|a, b| a.cell.key.column.cmp(&b.cell.key.column));
        Ok(Answer::fresh(cells))
    }

    async fn get_cells_for_shard(
        &self,
        _shard: u32,
        _after: u64,
        _limit: usize,
        _from: ReadFrom,
    ) -> Result<ShardPage> {
        Err(Error::Unsupported {
            operation: "get_cells_for_shard",
            reason: "unsupported by the legacy model: PostgreSQL tables have no per-shard change log (scan parent id ranges instead)".into(),
        })
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        _from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        Ok(Answer::fresh(crate::index::query(self, query).await?))
    }

    /// A row column keeps one cell per parent (the current row), a child
    /// column one per child row.
    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        _from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        if *column == self.tombstones {
            return Ok(Answer::fresh(Vec::new()));
        }
        let (_, column) = self.column(column)?;
        let layout = &*self.layout;
        let uuids: Vec<Uuid> = rows.iter().map(|r| r.uuid()).collect();
        let sql = match &column.shape {
            Shape::Row => format!(
                "/* mezzanine */ SELECT p.{uuid}, p.{v}::int8, {exprs} FROM {table} p
                 WHERE p.{uuid} = ANY($1) AND p.{v} IS NOT NULL",
                uuid = layout.uuid_sql,
                v = column.ref_key_sql,
                exprs = column.read_exprs("p"),
                table = layout.table_sql,
            ),
            Shape::Child { parent_sql } => format!(
                "/* mezzanine */ SELECT p.{uuid}, c.{s}::int8, {exprs} FROM {table} c
                 JOIN {parent_table} p ON p.{id} = c.{parent} WHERE p.{uuid} = ANY($1)",
                uuid = layout.uuid_sql,
                s = column.ref_key_sql,
                exprs = column.read_exprs("c"),
                table = column.table_sql,
                parent_table = layout.table_sql,
                id = layout.id_sql,
                parent = parent_sql,
            ),
        };
        let found = sqlx::query(AssertSqlSafe(sql))
            .bind(&uuids)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.storage(e))?;
        let mut cells = Vec::with_capacity(found.len());
        for row in &found {
            let uuid: Uuid = row.try_get(0).map_err(|e| self.storage(e))?;
            let ref_key: i64 = row.try_get(1).map_err(|e| self.storage(e))?;
            let row_key = RowKey::from(uuid);
            let what = || {
                format!(
                    "{} {row_key}, column {} ref {ref_key}",
                    column.table, column.name
                )
            };
            let body = read_body(column, row, 2, &what)?;
            cells.push(stored(row_key, column, ref_key, body)?);
        }
        cells.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
        Ok(Answer::fresh(cells))
    }
}
