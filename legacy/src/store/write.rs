//! Writes: each cell checked against the layout and canonicalized, a
//! batch applied in address order in one transaction (row columns as
//! guarded upserts, child columns as idempotent inserts), every value
//! read back through the read conversion, lost races retried.

use std::time::Duration;

use schemaless::retry::{self, Retryable};
use schemaless::{
    cell::check_batch, Body, Cell, CellKey, CellResult, Conflict, Error, Failure, RefKey, Result,
    RowKey, WriteOutcome,
};
use serde_json::{Map, Value};
use sqlx::postgres::{PgDatabaseError, PgRow};
use sqlx::{AssertSqlSafe, Postgres, Row, Transaction};
use uuid::Uuid;

use super::delete::Deleted;
use super::hook::{SKIP_CAPTURE, SKIP_CAPTURE_MARKED};
use super::{read_body, LegacyStore, TransactionHook};
use crate::layout::{quote, ColumnLayout, Shape};

/// How many times a batch is tried again when it loses a race or a
/// deadlock.
const RETRIES: usize = 4;

/// A cell checked against the layout, ready to write.
pub(super) struct Prepared {
    pub(super) row_key: Uuid,
    pub(super) ref_key: i64,
    /// The body in canonical form, every field present.
    pub(super) canonical: Body,
    pub(super) what: Write,
}

/// What writing a prepared cell does.
pub(super) enum Write {
    /// Writes a layout column's cell (the column's index) with, per field
    /// (layout order), the text cast into the SQL column.
    Cell {
        column: usize,
        params: Vec<Option<String>>,
    },
    /// Deletes what a tombstone names.
    Delete(Deleted),
}

fn same_or_conflict(stored: &Body, canonical: &Body, key: CellKey) -> CellResult {
    if stored == canonical {
        Ok(WriteOutcome::AlreadyPresent)
    } else {
        Err(Conflict { key })
    }
}

/// The canonical body of `body` for `column`, and the SQL parameter of each
/// field; unknown fields and values of the wrong type are errors naming
/// the field.
pub(super) fn canonicalize(
    column: &ColumnLayout,
    body: &Body,
) -> Result<(Body, Vec<Option<String>>)> {
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
        let (canonical, param) = field.accept(value).map_err(|message| {
            Error::invalid(
                &format!("body.{}", field.json),
                format!(
                    "{message} (for {}.{}, {})",
                    column.table, field.sql, field.sql_type
                ),
            )
        })?;
        map.insert(field.json.clone(), canonical);
        params.push(param);
    }
    Ok((Body::from(map), params))
}

/// A unique violation that trying again did not clear is no lost race
/// but another row holding the value (a unique column outside the keys):
/// bad input naming PostgreSQL's reason, as a CHECK's refusal is, so a
/// writer (the reverse mirror too) sees it refused, not failing.
fn still_unique(e: Error) -> Error {
    let refusal = match &e {
        Error::Storage { source, .. } if e.is_unique_violation() => source
            .as_database_error()
            .map(|db| (db.code(), db.message().to_string())),
        _ => None,
    };
    match refusal {
        Some((code, message)) => Error::refused(
            "body",
            code.as_deref().unwrap_or("23505"),
            format!("PostgreSQL refuses the value: {message}"),
        ),
        None => e,
    }
}

/// A batch that lost a race (two writers creating one parent row: unique
/// violation) or a deadlock is tried again from the start.
fn retry_batch(e: &Error) -> bool {
    matches!(e, Error::Storage { .. }) && (e.is_retryable() || e.is_unique_violation())
}

impl LegacyStore {
    pub(super) fn prepare(&self, cell: &Cell) -> Result<Prepared> {
        if cell.key.column == self.tombstones {
            return self.prepare_deletion(cell);
        }
        let (index, layout) = self.column(&cell.key.column)?;
        let (canonical, params) = canonicalize(layout, &cell.body)?;
        Ok(Prepared {
            row_key: cell.key.row_key.uuid(),
            ref_key: cell.key.ref_key.get(),
            canonical,
            what: Write::Cell {
                column: index,
                params,
            },
        })
    }

    /// Writes one prepared cell inside the batch's transaction.
    async fn write(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        cell: &Prepared,
        hook: &(dyn TransactionHook + '_),
    ) -> Result<CellResult> {
        match &cell.what {
            Write::Cell { column, params } => {
                let reserved = hook.reserved_ids() && hook.copy_table().is_none();
                self.write_cell(tx, cell, *column, params, (hook.copy_table(), reserved))
                    .await
            }
            Write::Delete(deleted) => self.delete(tx, cell, deleted, hook.copy_table()).await,
        }
    }

    /// Writes one layout column's cell; `copy_to` and `reserved` as the
    /// hook's [`TransactionHook::copy_table`] and
    /// [`TransactionHook::reserved_ids`].
    async fn write_cell(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        cell: &Prepared,
        column: usize,
        params: &[Option<String>],
        (copy_to, reserved): (Option<&str>, bool),
    ) -> Result<CellResult> {
        let layout = &*self.layout;
        let column = &layout.columns[column];
        let key = || CellKey {
            row_key: RowKey::from(cell.row_key),
            column: column.name.clone(),
            ref_key: RefKey::new(cell.ref_key).expect("checked at the boundary"),
        };
        // The fields written (PostgreSQL computes a generated one; the
        // read-back compares it), each with its parameter: `$3` on.
        let written: Vec<usize> = (0..column.fields.len())
            .filter(|&i| !column.fields[i].generated)
            .collect();
        let casts: Vec<String> = written
            .iter()
            .enumerate()
            .map(|(n, &i)| format!("CAST(${}::text AS {})", n + 3, column.fields[i].sql_type))
            .collect();
        let names: Vec<String> = written
            .iter()
            .map(|&i| quote(&column.fields[i].sql))
            .collect();
        // An identity column GENERATED ALWAYS takes the cell's value only
        // so; an UPDATE leaves it out (its parameter then unused).
        let overriding = match written.iter().any(|&i| column.fields[i].identity_always) {
            true => "OVERRIDING SYSTEM VALUE ",
            false => "",
        };
        // Wraps the statement that writes the cell so that it also copies
        // the cell into `copy_to`, when it wrote a row.
        let n = written.len();
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
        match &column.shape {
            Shape::Row => {
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
                    None if reserved => format!(
                        "/* mezzanine */ WITH r AS (DELETE FROM mezzanine.row_ids
                             WHERE parent = {regclass}::regclass AND row_key = $1 RETURNING id),
                         a AS (INSERT INTO {table} AS p ({uuid}, {v}{cols}, {id}) OVERRIDING SYSTEM VALUE
                             SELECT $1, $2{casts}, r.id FROM r RETURNING {exprs}),
                         b AS (INSERT INTO {table} AS p ({uuid}, {v}{cols}) {overriding}
                             SELECT $1, $2{casts} WHERE NOT EXISTS (SELECT FROM r) RETURNING {exprs})
                         SELECT * FROM a UNION ALL SELECT * FROM b",
                        regclass = regclass_literal(&layout.table_sql),
                        table = layout.table_sql,
                        uuid = layout.uuid_sql,
                        v = column.ref_key_sql,
                        id = layout.id_sql,
                        cols = listed(&names),
                        casts = listed(&casts),
                        overriding = overriding,
                        exprs = column.read_exprs("p"),
                    ),
                    None => format!(
                        "/* mezzanine */ INSERT INTO {table} AS p ({uuid}, {v}{cols}) {overriding}VALUES ($1, $2{casts}) RETURNING {exprs}",
                        table = layout.table_sql,
                        uuid = layout.uuid_sql,
                        v = column.ref_key_sql,
                        cols = listed(&names),
                        casts = listed(&casts),
                        overriding = overriding,
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
                                "/* mezzanine */ UPDATE {table} AS p SET {v} = $2{sets} WHERE p.{uuid} = $1 RETURNING {exprs}",
                                table = layout.table_sql,
                                v = column.ref_key_sql,
                                sets = names
                                    .iter()
                                    .zip(&casts)
                                    .zip(&written)
                                    .filter(|(_, &i)| !column.fields[i].identity_always)
                                    .map(|((name, cast), _)| format!(", {name} = {cast}"))
                                    .collect::<String>(),
                                uuid = layout.uuid_sql,
                                exprs = column.read_exprs("p"),
                            ),
                        }
                    }
                };
                let mut query = sqlx::query(AssertSqlSafe(with_copy(statement)))
                    .bind(cell.row_key)
                    .bind(cell.ref_key);
                for &i in &written {
                    query = query.bind(params[i].as_deref());
                }
                let row = copy_params(query)
                    .fetch_one(&mut **tx)
                    .await
                    .map_err(|e| self.write_error(column, e))?;
                self.check_read_back(column, &row, 0, cell)?;
                Ok(Ok(WriteOutcome::Written))
            }
            Shape::Child { parent_sql } => {
                let parent = parent_sql;
                let insert = format!(
                    "/* mezzanine */ INSERT INTO {table} AS c ({parent}, {s}{cols}) {overriding}
                     SELECT p.{id}, $2{casts} FROM {parent_table} p WHERE p.{uuid} = $1
                     ON CONFLICT ({parent}, {s}) DO NOTHING RETURNING {exprs}",
                    table = column.table_sql,
                    s = column.ref_key_sql,
                    cols = listed(&names),
                    overriding = overriding,
                    id = layout.id_sql,
                    casts = listed(&casts),
                    parent_table = layout.table_sql,
                    uuid = layout.uuid_sql,
                    exprs = column.read_exprs("c"),
                );
                let mut query = sqlx::query(AssertSqlSafe(with_copy(insert)))
                    .bind(cell.row_key)
                    .bind(cell.ref_key);
                for &i in &written {
                    query = query.bind(params[i].as_deref());
                }
                if let Some(row) = copy_params(query)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(|e| self.write_error(column, e))?
                {
                    self.check_read_back(column, &row, 0, cell)?;
                    return Ok(Ok(WriteOutcome::Written));
                }
                match self.child_cell(&mut **tx, column, parent_sql, cell.row_key, Some(cell.ref_key)).await? {
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
    /// `start`: the position of the row's first field.
    pub(super) fn check_read_back(
        &self,
        column: &ColumnLayout,
        row: &PgRow,
        start: usize,
        cell: &Prepared,
    ) -> Result<()> {
        let what = || format!("the row just written to {}", column.table);
        let stored = read_body(column, row, start, &what)?;
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
    /// range, a constraint, a trigger's exception, an index entry too
    /// large) are bad input naming the field; the rest are storage
    /// errors.
    pub(super) fn write_error(&self, column: &ColumnLayout, e: sqlx::Error) -> Error {
        // A value past a limit of PostgreSQL's (an index entry over a
        // btree page's third) is this cell's alone: each write is a
        // statement of one cell.
        let refused = matches!(
            crate::classify(&e),
            Failure::BadValue | Failure::ConstraintViolation | Failure::TooLarge
        );
        let refusal = e
            .as_database_error()
            .filter(|_| refused)
            .and_then(|db| db.try_downcast_ref::<PgDatabaseError>());
        if let Some(pg) = refusal {
            let field = pg
                .column()
                .and_then(|sql| column.fields.iter().find(|f| f.sql == sql))
                .map_or_else(|| "body".to_string(), |f| format!("body.{}", f.json));
            return Error::refused(
                &field,
                pg.code(),
                format!(
                    "PostgreSQL refuses the value for {}: {}",
                    column.table,
                    pg.message()
                ),
            );
        }
        self.storage(e)
    }

    /// Writes a batch as [`schemaless::CellStore::put_cells`] does, running `hook` in
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
        // Address order (stable, so copies of one cell keep batch order),
        // but a row's child cells after its row cell, whatever the
        // columns are called: a child row needs its parent row. Deletions
        // last: a tombstone hides the cells it names whenever they were
        // written, so a row the batch also writes ends deleted.
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.sort_by_key(|&i| {
            let key = &cells[i].key;
            let (deletion, child) = match &prepared[i].what {
                Write::Delete(_) => (true, false),
                Write::Cell { column, .. } => (
                    false,
                    matches!(self.layout.columns[*column].shape, Shape::Child { .. }),
                ),
            };
            (deletion, &key.row_key, child, &key.column, key.ref_key)
        });

        (|| self.write_batch(&prepared, &order, &canonical, hook))
            .retry(retry::backoff(
                Duration::from_millis(10),
                Duration::from_millis(200),
                RETRIES,
            ))
            .when(retry_batch)
            .await
            .map_err(still_unique)
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
            results[i] = Some(self.write(&mut tx, &prepared[i], hook).await?);
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

/// `'"s"."t"'`: a quoted table name as a string literal, for `::regclass`.
fn regclass_literal(table_sql: &str) -> String {
    format!("'{}'", table_sql.replace('\'', "''"))
}

/// `, a, b`: items after the ones a statement always has.
fn listed(items: &[String]) -> String {
    items.iter().map(|item| format!(", {item}")).collect()
}
