//! The cell API emulated on the legacy tables.
//!
//! - A `row` column's cell is the parent row: its ref key is the version
//!   column, and a put is an upsert guarded by it. A higher ref key
//!   replaces the row's fields; the same ref key with the same body is
//!   already present, with another body a conflict; a lower one is
//!   [`WriteOutcome::Superseded`] and changes nothing (even when the body
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
//! What the legacy model cannot do (`get_cells_for_shard`: it has no change
//! log) is [`Error::Unsupported`].

use std::sync::Arc;

use async_trait::async_trait;
use config::ColumnKind;
use schemaless::{
    cell::check_batch, Answer, Body, Cell, CellKey, CellResult, CellStore, Column, Conflict, Error,
    IndexEntry, IndexQuery, ReadFrom, RefKey, Result, RowKey, ShardPage, StoredCell, WriteOutcome,
};
use serde_json::{Map, Value};
use sqlx::postgres::{PgDatabaseError, PgRow};
use sqlx::{AssertSqlSafe, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::layout::{quote, ColumnLayout, Layout};

/// How many times a batch is tried when it loses a race or a deadlock.
const ATTEMPTS: usize = 5;

/// The legacy PostgreSQL tables behind the cell API.
#[derive(Clone)]
pub struct LegacyStore {
    pub(crate) pool: PgPool,
    pub(crate) layout: Arc<Layout>,
    /// Checked at the API boundary, as the Schemaless store does.
    limits: config::Limits,
    /// Reported by `shard_count`, so callers route as for Schemaless.
    shard_count: u32,
    /// `postgres host:port/db`, naming the node in errors.
    pub(crate) label: String,
}

/// A cell checked against the layout, ready to write.
struct Prepared {
    column: usize,
    row_key: Uuid,
    ref_key: i64,
    /// The body in canonical form, every field present.
    canonical: Body,
    /// Per field (layout order), the text cast into the SQL column.
    params: Vec<Option<String>>,
}

impl LegacyStore {
    /// Connects to `[legacy]` and resolves `[layout]` and `[[index]]`
    /// against the live schema.
    pub async fn connect(config: &config::Config) -> Result<LegacyStore, crate::Error> {
        let legacy = crate::connection::legacy_config(config)?;
        let layout = crate::connection::layout_config(config)?;
        let pool = crate::connection::pool(legacy)?;
        let layout = Layout::resolve(layout, &config.indexes, &pool).await?;
        Ok(LegacyStore {
            pool,
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

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) fn storage(&self, source: sqlx::Error) -> Error {
        Error::Storage {
            node: self.label.clone(),
            source,
        }
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

    fn prepare(&self, cell: &Cell) -> Result<Prepared> {
        let (index, layout) = self.column(&cell.key.column)?;
        let (canonical, params) = canonicalize(layout, &cell.body)?;
        Ok(Prepared {
            column: index,
            row_key: cell.key.row_key.uuid(),
            ref_key: cell.key.ref_key.get(),
            canonical,
            params,
        })
    }

    /// Writes one prepared cell inside the batch's transaction.
    async fn write(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        cell: &Prepared,
        copy_to: Option<&str>,
    ) -> Result<CellResult> {
        let layout = &*self.layout;
        let column = &layout.columns[cell.column];
        let key = || CellKey {
            row_key: RowKey::from(cell.row_key),
            column: column.name.clone(),
            ref_key: RefKey::new(cell.ref_key).expect("checked at the boundary"),
        };
        let casts: Vec<String> = column
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| format!("CAST(${}::text AS {})", i + 3, f.sql_type))
            .collect();
        // Wraps the statement that writes the cell so that it also copies
        // the cell into `copy_to`, when it wrote a row.
        let n = column.fields.len();
        let with_copy = |statement: String| match copy_to {
            None => statement,
            Some(table) => format!(
                "/* mezzanine */ WITH w AS ({statement}),
                 c AS (INSERT INTO {table} (row_key, column_name, ref_key, body)
                       SELECT $1, ${}, $2, ${} FROM w)
                 SELECT * FROM w",
                n + 3,
                n + 4
            ),
        };
        let copy_params =
            |query: sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>| {
                match copy_to {
                    None => query,
                    Some(_) => query
                        .bind(column.name.as_str().to_string())
                        .bind(cell.canonical.to_string()),
                }
            };
        match column.kind {
            ColumnKind::Row => {
                let select = format!(
                    "/* mezzanine */ SELECT p.{v}::int8, {exprs} FROM {table} p WHERE p.{uuid} = $1 FOR UPDATE",
                    v = column.ref_key_sql,
                    exprs = column.read_exprs("p"),
                    table = layout.table_sql,
                    uuid = layout.uuid_sql,
                );
                let current = sqlx::query(AssertSqlSafe(select))
                    .bind(cell.row_key)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(|e| self.write_error(column, e))?;
                let statement = match &current {
                    None => format!(
                        "/* mezzanine */ INSERT INTO {table} AS p ({uuid}, {v}, {cols}) VALUES ($1, $2, {casts}) RETURNING {exprs}",
                        table = layout.table_sql,
                        uuid = layout.uuid_sql,
                        v = column.ref_key_sql,
                        cols = column.fields.iter().map(|f| quote(&f.sql)).collect::<Vec<_>>().join(", "),
                        casts = casts.join(", "),
                        exprs = column.read_exprs("p"),
                    ),
                    Some(row) => {
                        let version: Option<i64> = row.try_get(0).map_err(|e| self.storage(e))?;
                        match version {
                            Some(v) if v > cell.ref_key => return Ok(Ok(WriteOutcome::Superseded)),
                            Some(v) if v == cell.ref_key => {
                                let what = || format!("{} {}", layout.table, key());
                                let stored = read_body(column, row, 1, &what)?;
                                return Ok(same_or_conflict(&stored, &cell.canonical, key()));
                            }
                            _ => format!(
                                "/* mezzanine */ UPDATE {table} AS p SET {v} = $2, {sets} WHERE p.{uuid} = $1 RETURNING {exprs}",
                                table = layout.table_sql,
                                v = column.ref_key_sql,
                                sets = column
                                    .fields
                                    .iter()
                                    .zip(&casts)
                                    .map(|(f, cast)| format!("{} = {cast}", quote(&f.sql)))
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                uuid = layout.uuid_sql,
                                exprs = column.read_exprs("p"),
                            ),
                        }
                    }
                };
                let mut query = sqlx::query(AssertSqlSafe(with_copy(statement)))
                    .bind(cell.row_key)
                    .bind(cell.ref_key);
                for param in &cell.params {
                    query = query.bind(param.as_deref());
                }
                let row = copy_params(query)
                    .fetch_one(&mut **tx)
                    .await
                    .map_err(|e| self.write_error(column, e))?;
                self.check_read_back(column, &row, cell)?;
                Ok(Ok(WriteOutcome::Written))
            }
            ColumnKind::Child => {
                let parent = column
                    .parent_sql
                    .as_deref()
                    .expect("a child has a parent key");
                let insert = format!(
                    "/* mezzanine */ INSERT INTO {table} AS c ({parent}, {s}, {cols})
                     SELECT p.{id}, $2, {casts} FROM {parent_table} p WHERE p.{uuid} = $1
                     ON CONFLICT ({parent}, {s}) DO NOTHING RETURNING {exprs}",
                    table = column.table_sql,
                    s = column.ref_key_sql,
                    cols = column
                        .fields
                        .iter()
                        .map(|f| quote(&f.sql))
                        .collect::<Vec<_>>()
                        .join(", "),
                    id = layout.id_sql,
                    casts = casts.join(", "),
                    parent_table = layout.table_sql,
                    uuid = layout.uuid_sql,
                    exprs = column.read_exprs("c"),
                );
                let mut query = sqlx::query(AssertSqlSafe(with_copy(insert)))
                    .bind(cell.row_key)
                    .bind(cell.ref_key);
                for param in &cell.params {
                    query = query.bind(param.as_deref());
                }
                if let Some(row) = copy_params(query)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(|e| self.write_error(column, e))?
                {
                    self.check_read_back(column, &row, cell)?;
                    return Ok(Ok(WriteOutcome::Written));
                }
                match self.child_cell(&mut **tx, column, cell.row_key, Some(cell.ref_key)).await? {
                    Some((_, stored)) => Ok(same_or_conflict(&stored, &cell.canonical, key())),
                    None => Err(Error::invalid(
                        "row_key",
                        format!(
                            "{} has no row in {}: column {} is kept in the child table {}, which needs its parent row; write the parent's row column first",
                            cell.row_key, layout.table, column.name, column.table
                        ),
                    )),
                }
            }
        }
    }

    /// Refuses a write PostgreSQL would not keep exactly as given.
    fn check_read_back(&self, column: &ColumnLayout, row: &PgRow, cell: &Prepared) -> Result<()> {
        let what = || format!("the row just written to {}", column.table);
        let stored = read_body(column, row, 0, &what)?;
        for field in &column.fields {
            let want = cell.canonical.fields().get(&field.json);
            let got = stored.fields().get(&field.json);
            if want != got {
                return Err(Error::invalid(
                    &format!("body.{}", field.json),
                    format!(
                        "{} cannot be stored exactly in {}.{} ({}): it would read back as {}",
                        want.unwrap_or(&Value::Null),
                        column.table,
                        field.sql,
                        field.sql_type,
                        got.unwrap_or(&Value::Null)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Maps a failed write: values PostgreSQL refuses (too long, out of
    /// range, a NOT NULL or CHECK constraint) are bad input naming the
    /// field; the rest are storage errors.
    fn write_error(&self, column: &ColumnLayout, e: sqlx::Error) -> Error {
        if let Some(db) = e.as_database_error() {
            if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
                let code = pg.code();
                if code.starts_with("22") || matches!(code, "23502" | "23514") {
                    let field = pg
                        .column()
                        .and_then(|sql| column.fields.iter().find(|f| f.sql == sql))
                        .map_or_else(|| "body".to_string(), |f| format!("body.{}", f.json));
                    return Error::invalid(
                        &field,
                        format!(
                            "PostgreSQL refuses the value for {}: {}",
                            column.table,
                            pg.message()
                        ),
                    );
                }
            }
        }
        self.storage(e)
    }

    /// A child cell by parent UUID and ref key (the latest when `None`).
    async fn child_cell<'e, E>(
        &self,
        executor: E,
        column: &ColumnLayout,
        row_key: Uuid,
        ref_key: Option<i64>,
    ) -> Result<Option<(i64, Body)>>
    where
        E: sqlx::PgExecutor<'e>,
    {
        let layout = &*self.layout;
        let parent = column
            .parent_sql
            .as_deref()
            .expect("a child has a parent key");
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
    async fn cell(&self, key: &CellKey) -> Result<Option<StoredCell>> {
        let (_, column) = self.column(&key.column)?;
        let wanted = key.ref_key.get();
        match column.kind {
            ColumnKind::Row => match self.row_cell(column, key.row_key.uuid()).await? {
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
            ColumnKind::Child => self
                .child_cell(&self.pool, column, key.row_key.uuid(), Some(wanted))
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

    async fn latest(&self, column: &ColumnLayout, row_key: &RowKey) -> Result<Option<StoredCell>> {
        let found = match column.kind {
            ColumnKind::Row => self.row_cell(column, row_key.uuid()).await?,
            ColumnKind::Child => {
                self.child_cell(&self.pool, column, row_key.uuid(), None)
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

fn same_or_conflict(stored: &Body, canonical: &Body, key: CellKey) -> CellResult {
    if stored == canonical {
        Ok(WriteOutcome::AlreadyPresent)
    } else {
        Err(Conflict { key })
    }
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
        let value = field
            .conversion
            .render_owned(text)
            .map_err(|reason| Error::Unreadable {
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

/// The canonical body of `body` for `column`, and the SQL parameter of each
/// field; unknown fields and values of the wrong type are errors naming
/// the field.
fn canonicalize(column: &ColumnLayout, body: &Body) -> Result<(Body, Vec<Option<String>>)> {
    for name in body.fields().keys() {
        if column.field(name).is_none() {
            return Err(Error::invalid(
                &format!("body.{name}"),
                format!(
                    "column {} has no field {name:?} (its fields are {})",
                    column.name,
                    column.field_names()
                ),
            ));
        }
    }
    let mut map = Map::with_capacity(column.fields.len());
    let mut params = Vec::with_capacity(column.fields.len());
    for field in &column.fields {
        let value = body.fields().get(&field.json).unwrap_or(&Value::Null);
        let (canonical, param) = field.conversion.accept(value).map_err(|message| {
            Error::invalid(
                &format!("body.{}", field.json),
                format!(
                    "{message} (for {}.{}, {})",
                    column.table, field.sql, field.sql_type
                ),
            )
        })?;
        if let (Some(max), Value::String(text)) = (field.max_chars, &canonical) {
            let chars = text.chars().count();
            if chars > max {
                return Err(Error::invalid(
                    &format!("body.{}", field.json),
                    format!(
                        "is {chars} characters, over the {max} of {}.{} ({})",
                        column.table, field.sql, field.sql_type
                    ),
                ));
            }
        }
        map.insert(field.json.clone(), canonical);
        params.push(param);
    }
    Ok((Body::from(map), params))
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
        Ok(Answer::fresh(self.cell(key).await?))
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        _from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
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
        let (_, column) = self.column(column)?;
        let layout = &*self.layout;
        let uuids: Vec<Uuid> = rows.iter().map(|r| r.uuid()).collect();
        let sql = match column.kind {
            ColumnKind::Row => format!(
                "/* mezzanine */ SELECT p.{uuid}, p.{v}::int8, {exprs} FROM {table} p
                 WHERE p.{uuid} = ANY($1) AND p.{v} IS NOT NULL",
                uuid = layout.uuid_sql,
                v = column.ref_key_sql,
                exprs = column.read_exprs("p"),
                table = layout.table_sql,
            ),
            ColumnKind::Child => format!(
                "/* mezzanine */ SELECT p.{uuid}, c.{s}::int8, {exprs} FROM {table} c
                 JOIN {parent_table} p ON p.{id} = c.{parent} WHERE p.{uuid} = ANY($1)",
                uuid = layout.uuid_sql,
                s = column.ref_key_sql,
                exprs = column.read_exprs("c"),
                table = column.table_sql,
                parent_table = layout.table_sql,
                id = layout.id_sql,
                parent = column
                    .parent_sql
                    .as_deref()
                    .expect("a child has a parent key"),
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

impl LegacyStore {
    /// Writes a batch as [`CellStore::put_cells`] does, running `hook` in
    /// the batch's transaction: the hook's statements commit with the
    /// legacy write or not at all. The mirror's outbox and the reverse
    /// mirror's offsets are written this way. When the batch is tried
    /// again (a lost race, a deadlock) the hook runs again, in the new
    /// transaction.
    pub async fn put_cells_with(
        &self,
        cells: Vec<Cell>,
        hook: &(dyn TransactionHook + '_),
    ) -> Result<Vec<CellResult>> {
        check_batch(&cells, &self.limits)?;
        let prepared = cells
            .iter()
            .enumerate()
            .map(|(i, cell)| self.prepare(cell).map_err(|e| e.in_batch(i)))
            .collect::<Result<Vec<_>>>()?;
        let canonical: Vec<Cell> = cells
            .iter()
            .zip(&prepared)
            .map(|(cell, p)| {
                let mut cell = cell.clone();
                cell.body = p.canonical.clone();
                cell
            })
            .collect();
        // Address order (stable, so copies of one cell keep batch order).
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.sort_by(|&a, &b| cells[a].key.cmp(&cells[b].key));

        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.write_batch(&prepared, &order, &canonical, hook).await {
                Ok(results) => return Ok(results),
                Err(e) if attempt < ATTEMPTS && retry_batch(&e) => {
                    tokio::time::sleep(std::time::Duration::from_millis(5 << attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `cell` with its body in canonical form (every field present, each
    /// value in its one form), or the error a put of it would get, without
    /// writing anything. The facade checks cells this way before it writes
    /// them to Schemaless in mode `primary`, so that the reverse mirror
    /// can always apply them.
    pub fn canonical_cell(&self, cell: &Cell) -> Result<Cell> {
        schemaless::cell::check_body(&cell.body, &self.limits)?;
        let prepared = self.prepare(cell)?;
        let mut cell = cell.clone();
        cell.body = prepared.canonical;
        Ok(cell)
    }

    async fn write_batch(
        &self,
        prepared: &[Prepared],
        order: &[usize],
        canonical: &[Cell],
        hook: &(dyn TransactionHook + '_),
    ) -> Result<Vec<CellResult>> {
        let mut tx = match (hook.skip_capture(), hook.copy_table()) {
            (false, _) => self.pool.begin().await,
            // The outbox row it writes marks it for a logical slot too.
            (true, Some(_)) => self.pool.begin_with(SKIP_CAPTURE).await,
            (true, None) => self.pool.begin_with(SKIP_CAPTURE_MARKED).await,
        }
        .map_err(|e| self.storage(e))?;
        hook.begin(&mut tx).await?;
        let mut results: Vec<Option<CellResult>> = vec![None; prepared.len()];
        for &i in order {
            results[i] = Some(self.write(&mut tx, &prepared[i], hook.copy_table()).await?);
        }
        let results: Vec<CellResult> = results
            .into_iter()
            .map(|r| r.expect("every cell was written"))
            .collect();
        hook.before_commit(&mut tx, canonical, &results).await?;
        tx.commit().await.map_err(|e| self.storage(e))?;
        Ok(results)
    }
}

/// The setting database-side capture (`mezzanine capture install`) reads:
/// a transaction that sets it to `skip` is not captured.
pub const CAPTURE_SETTING: &str = "mezzanine.capture";

/// How a transaction whose changes reach Schemaless another way begins:
/// with [`CAPTURE_SETTING`] set for the transaction alone (capture
/// triggers read it), in the same round trip as its `BEGIN`.
const SKIP_CAPTURE: &str = "BEGIN; SET LOCAL mezzanine.capture = 'skip'";

/// The same, for a transaction that writes no outbox row: it also emits
/// the logical decoding message `mezzanine.capture`, by which a logical
/// capture slot knows to skip it (a facade write is known by its outbox
/// row).
const SKIP_CAPTURE_MARKED: &str = "BEGIN; SET LOCAL mezzanine.capture = 'skip';
     SELECT pg_catalog.pg_logical_emit_message(true, 'mezzanine.capture', 'skip')";

/// Statements that must commit in the same PostgreSQL transaction as a
/// legacy write (see [`LegacyStore::put_cells_with`]).
#[async_trait]
pub trait TransactionHook: Send + Sync {
    /// Whether the batch's changes reach Schemaless another way (the
    /// outbox carries them, or they came from Schemaless), so that
    /// database-side capture must skip the transaction: a facade write is
    /// then delivered once, not twice. Default false: plain writes are
    /// captured like any other writer's.
    fn skip_capture(&self) -> bool {
        false
    }

    /// A table `(row_key uuid, column_name text, ref_key bigint, body
    /// text)` that every cell the batch writes (`Written`) is also inserted
    /// into, by the very statement that writes it (a data-modifying CTE):
    /// no round trip of its own. Cells found already there are not copied.
    fn copy_table(&self) -> Option<&str> {
        None
    }

    /// Runs first in the transaction (e.g. to lock what the hook updates);
    /// an error rolls the batch back.
    async fn begin(&self, _tx: &mut sqlx::PgConnection) -> Result<()> {
        Ok(())
    }

    /// Runs after every cell was written, before the commit. `cells` are
    /// the batch's cells with canonical bodies, `results` what each write
    /// did, in batch order; an error rolls the batch back. Does nothing
    /// unless overridden.
    async fn before_commit(
        &self,
        _tx: &mut sqlx::PgConnection,
        _cells: &[Cell],
        _results: &[CellResult],
    ) -> Result<()> {
        Ok(())
    }
}

/// The hook of a plain `put_cells`.
struct NoHook;

impl TransactionHook for NoHook {}

/// A batch that lost a race (two writers creating one parent row: unique
/// violation) or a deadlock is tried again from the start.
fn retry_batch(e: &Error) -> bool {
    match e {
        Error::Storage { source, .. } => {
            e.is_retryable()
                || source
                    .as_database_error()
                    .and_then(|db| db.code())
                    .is_some_and(|code| code == "23505")
        }
        _ => false,
    }
}
