//! A translated INSERT or UPDATE run through a cell store: the proxy's
//! `primary` and `schemaless`, where an app's plain SQL write goes
//! through the facade (Schemaless is the source of truth there).
//!
//! PostgreSQL still evaluates every value, so a value means what it
//! would have meant in the app's statement: each is cast to its column's
//! exact type (from the catalog) and read back through the layout's
//! conversion, as the backfill reads a row. It reads none of the app's
//! tables (they are stale in these modes):
//! - an INSERT's values are evaluated on their own; a mapped column the
//!   INSERT leaves out takes its default expression, as in PostgreSQL;
//! - an UPDATE's SET expressions and the WHERE's other conditions are
//!   evaluated over the row's latest cells, given as a typed `VALUES` row
//!   under the name the statement calls the table (`version + 1`,
//!   `t.fare * 2`);
//! - an upsert's `EXCLUDED.x` is the proposed row's value, typed;
//! - a DELETE's other conditions are evaluated as an UPDATE's, and each
//!   row there that matches gets a tombstone (its RETURNING is the row as
//!   it was).
//!
//! What PostgreSQL would have raised is raised with its SQLSTATE: a
//! unique key (`23505`: the row, or the child row, exists), a missing
//! parent (`23503`), `NOT NULL` (`23502`, checked on an INSERT's proposed
//! row before any conflict, as PostgreSQL does), an error evaluating a value
//! (PostgreSQL's own), and a concurrent UPDATE that wrote the same
//! version first (`40001`, as PostgreSQL's repeatable read reports it:
//! the app retries, reading the new latest cell).
//!
//! The legacy tables' CHECK constraints and triggers are not run: they
//! are PostgreSQL's, and the reverse mirror applies the cells as rows.
//!
//! A write is not atomic across rows and layout columns: its cells go to
//! the store in one `put_cells` call, and a failure part-way can leave
//! some written (each cell is whole; the cell API has no transactions).
//! A retry of the same INSERT then fails with `23505` where the row was
//! written; an UPDATE's retry writes the next version.
//!
//! The answer is a statement PostgreSQL runs in the app's session in the
//! app's statement's place: a `SELECT` of RETURNING's items over the
//! written rows (PostgreSQL's own types, names and formats, as a served
//! read's), or, without RETURNING, a statement that returns nothing; the
//! proxy puts the write's command tag ([`Written::tag`]) in place of the
//! one PostgreSQL sends.
//!
//! Its rooms: `columns` (the table's mapped columns, and each value's
//! way into SQL and back), `rows` (an INSERT's proposed row, an UPDATE's
//! next version, their cells), `answer` (the cells put, the app
//! answered), `batch` (statements pipelined in one implicit transaction,
//! run as one), `targets` (an INSERT's expressions per column, and its
//! sequence draws), `ids` (the integer ids reserved for the rows
//! inserted), `references` (a parent DELETE the child tables' foreign
//! keys refuse); this file evaluates and runs a statement's rows.

use legacy::layout::{Field, Shape};
use schemaless::{Body, Cell, RefKey, WriteOutcome};
use sqlparser::ast::SelectItem;

use super::serve::{literal, quote, unquote, Attribute};
use super::*;
use crate::expr::strip;
use crate::model::{folded, Table};
use crate::plan::{Inserted, OnConflict, Rows, Write};

mod answer;
mod batch;
mod checks;
mod columns;
mod constraint;
mod evaluations;
mod ids;
mod readahead;
mod references;
mod rows;
mod targets;

use answer::put_all;
pub use batch::write_batch;
use columns::{columns, Col, Kind};

/// What a write did, and how PostgreSQL is to answer the app.
#[derive(Clone, Debug)]
pub struct Written {
    pub rendering: Rendering,
    /// `INSERT 0 n`, `UPDATE n` or `DELETE n`.
    pub tag: String,
    /// Cells put.
    pub cells: usize,
    /// The cells the store took as new (`Written`): what the reverse
    /// mirror is to apply to PostgreSQL in `primary`, which a proxy
    /// session waits for before it forwards a statement there (its own
    /// writes read back).
    pub written: Vec<Cell>,
}

/// A write refused or failed, as PostgreSQL would raise it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub sqlstate: String,
    pub message: String,
    /// The row whose state in the stores the error comes from (a key
    /// taken, a parent missing): in a batch, an earlier write of the same
    /// row may be what the statement needed ([`write_batch`]).
    pub row: Option<RowKey>,
    /// PostgreSQL's other fields of the error, where it has them.
    pub diagnostics: Box<Diagnostics>,
    /// A unique violation of the row key (a parent row) or of the
    /// parent and ref key (a child row, its ref key where known), whose
    /// constraint [`constraint::explain`] names as PostgreSQL would.
    duplicate: Option<Box<(Table, Option<i64>)>>,
}

/// The fields of PostgreSQL's error besides its code and message (an
/// `ErrorResponse`'s `D`, `s`, `t`, `n`): what an app or its ORM reads
/// to tell which constraint a write broke (Prisma's `P2002` takes the
/// fields from the detail's `Key (…)`, else the constraint's name;
/// psycopg's `diag.constraint_name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    pub detail: Option<String>,
    pub schema: Option<String>,
    pub table: Option<String>,
    pub constraint: Option<String>,
}

impl Refused {
    pub fn new(sqlstate: &str, message: impl Into<String>) -> Refused {
        Refused {
            sqlstate: sqlstate.to_string(),
            message: message.into(),
            row: None,
            diagnostics: Box::default(),
            duplicate: None,
        }
    }

    /// The error, with PostgreSQL's other fields.
    fn with(self, diagnostics: Diagnostics) -> Refused {
        Refused {
            diagnostics: Box::new(diagnostics),
            ..self
        }
    }

    /// The error, coming from the state of `row`.
    fn of_row(self, row: RowKey) -> Refused {
        Refused {
            row: Some(row),
            ..self
        }
    }
}

impl From<RunError> for Refused {
    fn from(e: RunError) -> Refused {
        match e {
            RunError::Untranslatable(why) => Refused::new("0A000", why),
            RunError::Failed(e) => Refused::new("58000", format!("{e:#}")),
        }
    }
}

/// How many of a statement's rows are read and evaluated at once.
const ROWS_AT_ONCE: usize = 8;

/// Runs `sql`, its `$n` bound to `params` (`None`: NULL), through
/// `store`. `eval` evaluates the values (as the app's role) on the
/// legacy database, whose catalog types them.
pub async fn write_through<S: CellStore>(
    eval: Evaluator<'_>,
    store: &S,
    catalog: &Catalog,
    model: (&crate::Model, &config::Limits),
    sql: &str,
    params: &[Option<String>],
) -> Result<Written, Refused> {
    let mut results = write_batch(eval, store, catalog, model, &[(sql, params)]).await;
    results.pop().expect("a result per statement run")
}

/// A statement's rows, evaluated: each written row's values and cells,
/// its command tag's verb, and every row key it names (an UPDATE's
/// matching nothing too).
type Planned = (Vec<Vec<Value>>, Vec<Vec<Cell>>, &'static str, Vec<RowKey>);

struct Writer<'a, S> {
    eval: Evaluator<'a>,
    store: &'a S,
    cols: &'a [Col<'a>],
    write: &'a Write,
    /// What the earlier statements of its batch write, read before the
    /// store.
    earlier: &'a batch::Earlier,
    /// The batch's evaluations, combined into shared round trips.
    evaluations: &'a evaluations::Evaluations,
    /// The rows the batch names by literal keys, read for all at once.
    readahead: &'a readahead::Readahead,
    /// The integer ids of the existing rows the statement names, where
    /// its RETURNING reads them ([`Write::reads_ids`]): an UPDATE's or
    /// DELETE's, read before its rows are evaluated; an upsert's, of each
    /// row found to exist, read before its DO UPDATE is evaluated.
    ids: std::sync::Mutex<std::collections::HashMap<RowKey, i64>>,
}

/// A written row's values (one per [`Col`]) and its cells.
type RowWrite = (Vec<Value>, Vec<Cell>);

/// An INSERTed row's expression for each [`Col`] (by position), the
/// columns among them that draw from a sequence (with the expression
/// drawn), and which columns the INSERT gives ([`Writer::targets`]).
struct Targets {
    targets: Vec<(usize, String)>,
    drawn: Vec<(usize, String)>,
    given: Vec<bool>,
}

impl<S: CellStore> Writer<'_, S> {
    /// Reads and evaluates the statement's rows a few at a time; nothing
    /// is put. An error is the first failing row's, as in PostgreSQL,
    /// whichever finished first.
    async fn plan(&self) -> Result<Planned, Refused> {
        let mut done: Vec<Option<RowWrite>> = Vec::new();
        let mut named = Vec::new();
        let tag = match &self.write.rows {
            Rows::Insert { rows, conflict } => {
                let mut targets = rows
                    .iter()
                    .map(|row| self.targets(row))
                    .collect::<Result<Vec<_>, _>>()?;
                self.draw_all(&mut targets).await?;
                let rows: Vec<_> = rows.iter().zip(&targets).collect();
                for chunk in rows.chunks(ROWS_AT_ONCE) {
                    let rows = chunk
                        .iter()
                        .map(|(row, targets)| self.insert(row, conflict, targets));
                    for row in futures::future::join_all(rows).await {
                        done.push(row?);
                    }
                }
                "INSERT 0"
            }
            Rows::Update {
                keys,
                sets,
                conditions,
            } => {
                let keys = self.eval.keys(keys).await?;
                self.read_ids(&keys).await?;
                named.extend(keys.iter().copied());
                for chunk in keys.chunks(ROWS_AT_ONCE) {
                    let rows = chunk
                        .iter()
                        .map(|key| self.update_existing(key, sets, conditions));
                    for row in futures::future::join_all(rows).await {
                        done.push(row?);
                    }
                }
                "UPDATE"
            }
            Rows::Delete { keys, conditions } => {
                let keys = self.eval.keys(keys).await?;
                self.read_ids(&keys).await?;
                named.extend(keys.iter().copied());
                for chunk in keys.chunks(ROWS_AT_ONCE) {
                    let rows = chunk.iter().map(|key| self.delete(key, conditions));
                    for rows in futures::future::join_all(rows).await {
                        done.extend(rows?.into_iter().map(Some));
                    }
                }
                if self.write.table == Table::Parent {
                    let deleted: Vec<RowKey> = done
                        .iter()
                        .flatten()
                        .filter_map(|(_, cells)| Some(cells.first()?.key.row_key))
                        .collect();
                    self.still_referenced(&deleted).await?;
                }
                "DELETE"
            }
        };
        let (rows, cells): (Vec<_>, Vec<Vec<Cell>>) = done.into_iter().flatten().unzip();
        self.ids_known(&rows)?;
        self.renders(&rows).await?;
        named.extend(cells.iter().flatten().map(|c| c.key.row_key));
        Ok((rows, cells, tag, named))
    }

    /// A statement answered once its cells are put: the rows `kept`, and
    /// the number of `cells` put.
    fn answer(
        &self,
        rows: Vec<Vec<Value>>,
        kept: &[bool],
        (cells, written): (usize, Vec<Cell>),
        tag: &str,
    ) -> Result<Written, Refused> {
        let rows: Vec<Vec<Value>> = rows
            .into_iter()
            .zip(kept)
            .filter(|(_, &kept)| kept)
            .map(|(row, _)| row)
            .collect();
        Ok(Written {
            rendering: self.rendering(&rows)?,
            tag: format!("{tag} {}", rows.len()),
            cells,
            written,
        })
    }

    fn layout(&self) -> &legacy::layout::Layout {
        self.eval.legacy.layout()
    }

    fn position(&self, sql: &str) -> Option<usize> {
        self.cols.iter().position(|c| c.sql == sql)
    }

    /// The latest cell of each of the parent's layout columns (`None` for
    /// the others): the one an earlier write of the batch writes, else
    /// the store's.
    async fn latest(&self, key: &RowKey) -> Result<Vec<Option<StoredCell>>, Refused> {
        let layout = self.layout();
        if self.earlier.deletes(key) {
            return Ok(vec![None; layout.columns.len()]);
        }
        if let Some(found) = self.readahead.of(self.store, key).await {
            let found = found.map_err(|e| {
                Refused::new("58000", format!("reading the row's latest cells: {e}"))
            })?;
            return Ok(layout
                .columns
                .iter()
                .map(|c| match c.shape {
                    Shape::Row => self
                        .earlier
                        .latest(key, &c.name)
                        .or_else(|| found.latest(key, &c.name)),
                    Shape::Child { .. } => None,
                })
                .collect());
        }
        futures::future::try_join_all(layout.columns.iter().map(|c| async move {
            match c.shape {
                Shape::Row => match self.earlier.latest(key, &c.name) {
                    Some(cell) => Ok(Some(cell)),
                    None => {
                        self.store
                            .get_cell_latest(key, &c.name, ReadFrom::Master)
                            .await
                    }
                },
                Shape::Child { .. } => Ok(None),
            }
        }))
        .await
        .map_err(|e| Refused::new("58000", format!("reading the row's latest cells: {e}")))
    }

    /// Whether parent row `key` was deleted (its key retired: the row's
    /// tombstone hides every cell of it, also ones written later), by
    /// an earlier statement of the batch or in the store. A child
    /// table's INSERT does not ask: its parent reads as missing.
    async fn retired(&self, key: &RowKey) -> Result<bool, Refused> {
        if !matches!(self.write.table, Table::Parent) {
            return Ok(false);
        }
        if self.earlier.deletes(key) {
            return Ok(true);
        }
        if let Some(found) = self.readahead.of(self.store, key).await {
            return found
                .map(|found| found.retired(key))
                .map_err(|e| Refused::new("58000", format!("reading the row's tombstone: {e}")));
        }
        let tombstone = schemaless::tombstone::row_tombstone(*key, self.eval.legacy.tombstones());
        self.store
            .get_cell(&tombstone.key, ReadFrom::Master)
            .await
            .map(|cell| cell.is_some())
            .map_err(|e| Refused::new("58000", format!("reading the row's tombstone: {e}")))
    }

    /// Evaluates `targets` (column, expression) and whether `conditions`
    /// hold, over `base` (the row's values, named as the statement names
    /// the table) when given. `key`: a row key expression evaluated too.
    async fn evaluate(
        &self,
        key: Option<&str>,
        targets: &[(usize, String)],
        conditions: &[Expr],
        base: Option<&[Value]>,
    ) -> Result<(Option<String>, Vec<Value>, bool), Refused> {
        let mut items: Vec<String> = Vec::new();
        if let Some(key) = key {
            items.push(format!("(CAST(({key}) AS uuid))::text"));
        }
        items.extend(targets.iter().map(|(i, e)| self.cols[*i].read(e)));
        if !conditions.is_empty() {
            let all: Vec<String> = conditions.iter().map(|c| format!("({c})")).collect();
            items.push(format!("(({}) IS TRUE)::text", all.join(" AND ")));
        }
        if items.is_empty() {
            return Ok((None, Vec::new(), true));
        }
        let mut sql = format!(
            "/* mezzanine: a write through the facade */ SELECT {}",
            items.join(", ")
        );
        if let Some(base) = base {
            sql.push_str(&format!(" FROM {}", self.values(&[base.to_vec()])?));
        }
        let mut texts = self.evaluations.texts(self.eval, sql).await?.into_iter();
        let key = if key.is_some() {
            texts.next().flatten()
        } else {
            None
        };
        let mut values = Vec::with_capacity(targets.len());
        for (i, _) in targets {
            values.push(self.rendered(*i, texts.next().flatten())?);
        }
        let holds = conditions.is_empty() || texts.next().flatten().as_deref() == Some("true");
        Ok((key, values, holds))
    }

    /// `(VALUES (...), ...) AS "alias"("col", ...)`.
    fn values(&self, rows: &[Vec<Value>]) -> Result<String, Refused> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let typed: Vec<String> = self
                .cols
                .iter()
                .zip(row)
                .map(|(c, v)| c.typed(v))
                .collect::<Result<_, _>>()?;
            out.push(format!("({})", typed.join(", ")));
        }
        let names: Vec<String> = self.cols.iter().map(|c| quote(&c.sql)).collect();
        Ok(format!(
            "(VALUES {}) AS {}({})",
            out.join(", "),
            quote(&self.write.alias),
            names.join(", ")
        ))
    }

    fn table_name(&self) -> String {
        match self.write.table {
            Table::Parent => self.layout().table.clone(),
            Table::Child(_) => self
                .cols
                .iter()
                .find_map(|c| match c.kind {
                    Kind::RefKey(i) => Some(self.layout().columns[i].table.clone()),
                    _ => None,
                })
                .unwrap_or_default(),
        }
    }
}

/// PostgreSQL's error evaluating a write's values, with its SQLSTATE.
fn evaluation_error(e: sqlx::Error) -> Refused {
    match &e {
        sqlx::Error::Database(db) => Refused::new(
            db.code().as_deref().unwrap_or("XX000"),
            db.message().to_string(),
        ),
        _ => Refused::new("58000", format!("evaluating the write's values: {e}")),
    }
}

/// One row of text values, PostgreSQL's errors kept with their SQLSTATE.
fn first_row(
    rows: Result<Vec<sqlx::postgres::PgRow>, sqlx::Error>,
) -> Result<Vec<Option<String>>, Refused> {
    use sqlx::Row as _;
    let rows = rows.map_err(evaluation_error)?;
    let row = rows
        .first()
        .ok_or_else(|| Refused::new("XX000", "the values' evaluation gave no row"))?;
    (0..row.len())
        .map(|i| {
            row.try_get::<Option<String>, _>(i)
                .map_err(|e| Refused::new("XX000", e.to_string()))
        })
        .collect()
}
