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
//! - an upsert's `EXCLUDED.x` is the proposed row's value, typed.
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
//! answered); this file evaluates and runs a statement's rows.

use legacy::layout::{Field, Shape};
use schemaless::{Body, Cell, RefKey, WriteOutcome};
use sqlparser::ast::SelectItem;

use super::serve::{literal, quote, unquote, Attribute};
use super::*;
use crate::expr::strip;
use crate::model::{folded, Table};
use crate::plan::{Inserted, OnConflict, Rows, Write};

mod answer;
mod columns;
mod rows;

use columns::{columns, Col, Kind};
use rows::duplicate;

/// What a write did, and how PostgreSQL is to answer the app.
#[derive(Clone, Debug)]
pub struct Written {
    pub rendering: Rendering,
    /// `INSERT 0 n` or `UPDATE n`.
    pub tag: String,
    /// Cells put.
    pub cells: usize,
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
}

impl Refused {
    pub fn new(sqlstate: &str, message: impl Into<String>) -> Refused {
        Refused {
            sqlstate: sqlstate.to_string(),
            message: message.into(),
            row: None,
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

/// Runs statements an app pipelined in one implicit transaction (a
/// driver's batch: JDBC's `executeBatch`, asyncpg's `executemany`) as one
/// write, as PostgreSQL runs them: every statement's rows are evaluated
/// and checked before any cell is put, so a statement that fails leaves
/// nothing of the batch written, as PostgreSQL rolls the batch back.
///
/// The results, in order: one per statement, or up to the first that
/// fails, ending with its error; the ones before it are answered as
/// PostgreSQL answers them before the rollback (their rows, not written).
///
/// A statement's rows are evaluated against the stores as they are, not
/// as the batch's earlier statements would leave them: a statement
/// writing a row an earlier one writes is refused (`0A000`; send them
/// with a `Sync` each). As for one statement of several rows, a store
/// failing while the cells are put can leave some written.
pub async fn write_batch<S: CellStore>(
    eval: Evaluator<'_>,
    store: &S,
    catalog: &Catalog,
    (model, limits): (&crate::Model, &config::Limits),
    statements: &[(&str, &[Option<String>])],
) -> Vec<Result<Written, Refused>> {
    // Each statement's plan and its table's columns, up to the first
    // that does not translate.
    let mut analyzed = Vec::with_capacity(statements.len());
    let mut failed = None;
    for (sql, params) in statements {
        match analyze(eval, catalog, model, sql, params).await {
            Ok(ok) => analyzed.push(ok),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let writers: Vec<Writer<'_, S>> = analyzed
        .iter()
        .map(|(write, cols)| Writer {
            eval,
            limits,
            store,
            cols,
            write,
        })
        .collect();
    // Every statement's rows, evaluated and checked, nothing put yet.
    let mut planned = Vec::with_capacity(writers.len());
    let mut earlier = BatchWrites::default();
    // A batch's statements are evaluated a few at once, as a statement's
    // rows are; each is still checked against the ones before it, in
    // order.
    'plans: for chunk in writers.chunks(ROWS_AT_ONCE) {
        let plans = futures::future::join_all(chunk.iter().map(|writer| writer.plan())).await;
        for (writer, plan) in chunk.iter().zip(plans) {
            let (rows, cells, tag, named) = match plan {
                Ok(plan) => plan,
                Err(e) => {
                    // A row an earlier write of the batch writes may be what
                    // this one needed (a parent row, a key to update).
                    failed = Some(match &e.row {
                        Some(key)
                            if earlier.rows.contains(key) || earlier.children_of.contains(key) =>
                        {
                            again(key)
                        }
                        _ => e,
                    });
                    break 'plans;
                }
            };
            if let Err(e) = earlier.check(writer, &named, &cells) {
                failed = Some(e);
                break 'plans;
            }
            earlier.add(writer, &cells);
            planned.push((rows, cells, tag));
        }
    }
    if let Some(e) = failed {
        // As PostgreSQL answers the statements before the one that failed,
        // then rolls them back: nothing is put.
        let mut results: Vec<Result<Written, Refused>> = writers
            .iter()
            .zip(planned)
            .map(|(writer, (rows, _, tag))| {
                Ok(Written {
                    rendering: writer.rendering(&rows)?,
                    tag: format!("{tag} {}", rows.len()),
                    cells: 0,
                })
            })
            .collect();
        results.push(Err(e));
        return results;
    }
    // Put a few statements at once too (the batch's rows are apart); the
    // results end at the first that failed.
    let mut results: Vec<Result<Written, Refused>> = Vec::with_capacity(writers.len());
    let mut planned = planned.into_iter();
    for chunk in writers.chunks(ROWS_AT_ONCE) {
        let finishing = chunk
            .iter()
            .zip(planned.by_ref())
            .map(|(writer, (rows, cells, tag))| writer.finish(rows, cells, tag));
        results.extend(futures::future::join_all(finishing).await);
        if results.iter().any(Result::is_err) {
            break;
        }
    }
    if let Some(first) = results.iter().position(Result::is_err) {
        results.truncate(first + 1);
    }
    results
}

/// What a batch's earlier writes write, to tell a later write that
/// depends on them: each was evaluated against the stores alone.
#[derive(Default)]
struct BatchWrites {
    /// Rows whose parent-table cells an earlier write writes.
    rows: std::collections::HashSet<RowKey>,
    /// Child rows an earlier write writes, and the rows they belong to.
    children: std::collections::HashSet<schemaless::CellKey>,
    children_of: std::collections::HashSet<RowKey>,
}

impl BatchWrites {
    /// Whether `writer`'s statement, which names rows `named` and writes
    /// `cells`, was evaluated without what an earlier write writes: an
    /// INSERT of a row or child row an earlier INSERT writes fails as
    /// PostgreSQL's would (`23505`); any other overlap is refused.
    fn check<S: CellStore>(
        &self,
        writer: &Writer<'_, S>,
        named: &[RowKey],
        cells: &[Vec<Cell>],
    ) -> Result<(), Refused> {
        let child = matches!(writer.write.table, Table::Child(_));
        let inserts = matches!(
            writer.write.rows,
            Rows::Insert {
                conflict: OnConflict::Fail,
                ..
            }
        );
        let updates = matches!(writer.write.rows, Rows::Update { .. });
        if let Some(key) = named.iter().find(|k| self.rows.contains(k)) {
            return Err(if inserts && !child {
                duplicate(&writer.table_name(), key)
            } else {
                again(key)
            });
        }
        if child && updates {
            if let Some(key) = named.iter().find(|k| self.children_of.contains(k)) {
                return Err(again(key));
            }
        }
        if child {
            if let Some(cell) = cells
                .iter()
                .flatten()
                .find(|c| self.children.contains(&c.key))
            {
                return Err(if inserts {
                    duplicate(&writer.table_name(), &cell.key.row_key)
                } else {
                    again(&cell.key.row_key)
                });
            }
        }
        Ok(())
    }

    fn add<S: CellStore>(&mut self, writer: &Writer<'_, S>, cells: &[Vec<Cell>]) {
        for cell in cells.iter().flatten() {
            if matches!(writer.write.table, Table::Child(_)) {
                self.children.insert(cell.key.clone());
                self.children_of.insert(cell.key.row_key);
            } else {
                self.rows.insert(cell.key.row_key);
            }
        }
    }
}

/// A write of a batch on a row an earlier write of the batch writes.
fn again(key: &RowKey) -> Refused {
    Refused::new(
        "0A000",
        format!(
            "this write names row {} that an earlier write of its pipelined batch writes, and \
             the facade evaluates a batch's writes before it writes any: send them with a \
             Sync each",
            key.uuid()
        ),
    )
}

/// A statement's translated plan and its table's columns.
async fn analyze<'a>(
    eval: Evaluator<'a>,
    catalog: &Catalog,
    model: &crate::Model,
    sql: &str,
    params: &[Option<String>],
) -> Result<(Write, Vec<Col<'a>>), Refused> {
    let statement = bind_nullable(sql, params)?;
    let write = match crate::analyze(model, &statement.to_string()).plan {
        Some(Plan::Write(write)) => write,
        _ => return Err(Refused::new("0A000", "not a translatable write")),
    };
    let cols = columns(eval.legacy, catalog, model, write.table).await?;
    Ok((*write, cols))
}

/// A statement's rows, evaluated: each written row's values and cells,
/// its command tag's verb, and every row key it names (an UPDATE's
/// matching nothing too).
type Planned = (Vec<Vec<Value>>, Vec<Vec<Cell>>, &'static str, Vec<RowKey>);

struct Writer<'a, S> {
    eval: Evaluator<'a>,
    /// The store's batch limits: a long INSERT's cells are put in as many
    /// batches as they take.
    limits: &'a config::Limits,
    store: &'a S,
    cols: &'a [Col<'a>],
    write: &'a Write,
}

/// A written row's values (one per [`Col`]) and its cells.
type RowWrite = (Vec<Value>, Vec<Cell>);

impl<S: CellStore> Writer<'_, S> {
    /// Reads and evaluates the statement's rows a few at a time; nothing
    /// is put. An error is the first failing row's, as in PostgreSQL,
    /// whichever finished first.
    async fn plan(&self) -> Result<Planned, Refused> {
        let mut done: Vec<Option<RowWrite>> = Vec::new();
        let mut named = Vec::new();
        let tag = match &self.write.rows {
            Rows::Insert { rows, conflict } => {
                for chunk in rows.chunks(ROWS_AT_ONCE) {
                    let rows = chunk.iter().map(|row| self.insert(row, conflict));
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
        };
        let (rows, cells): (Vec<_>, Vec<Vec<Cell>>) = done.into_iter().flatten().unzip();
        named.extend(cells.iter().flatten().map(|c| c.key.row_key));
        Ok((rows, cells, tag, named))
    }

    /// Puts a planned statement's cells, and answers it.
    async fn finish(
        &self,
        rows: Vec<Vec<Value>>,
        cells: Vec<Vec<Cell>>,
        tag: &str,
    ) -> Result<Written, Refused> {
        let count = self.put(cells).await?;
        let rows: Vec<Vec<Value>> = rows
            .into_iter()
            .zip(&count)
            .filter(|(_, &kept)| kept)
            .map(|(row, _)| row)
            .collect();
        Ok(Written {
            rendering: self.rendering(&rows)?,
            tag: format!("{tag} {}", rows.len()),
            cells: count.len(),
        })
    }

    fn layout(&self) -> &legacy::layout::Layout {
        self.eval.legacy.layout()
    }

    fn position(&self, sql: &str) -> Option<usize> {
        self.cols.iter().position(|c| c.sql == sql)
    }

    /// The latest cell of each of the parent's layout columns (`None` for
    /// the others).
    async fn latest(&self, key: &RowKey) -> Result<Vec<Option<StoredCell>>, Refused> {
        let layout = self.layout();
        futures::future::try_join_all(layout.columns.iter().map(|c| async move {
            match c.shape {
                Shape::Row => {
                    self.store
                        .get_cell_latest(key, &c.name, ReadFrom::Master)
                        .await
                }
                Shape::Child { .. } => Ok(None),
            }
        }))
        .await
        .map_err(|e| Refused::new("58000", format!("reading the row's latest cells: {e}")))
    }

    /// Evaluates `targets` (column, expression) and whether `conditions`
    /// hold, over `base` (the row's values, named as the statement names
    /// the table) when given. `key`: a row key expression evaluated too.
    async fn evaluate(
        &self,
        key: Option<&Expr>,
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
        let mut texts = texts(self.eval, &sql).await?.into_iter();
        let key = if key.is_some() {
            texts.next().flatten()
        } else {
            None
        };
        let mut values = Vec::with_capacity(targets.len());
        for (i, _) in targets {
            values.push(self.cols[*i].render(texts.next().flatten())?);
        }
        let holds = conditions.is_empty() || texts.next().flatten().as_deref() == Some("true");
        Ok((key, values, holds))
    }

    /// The values of column defaults that draw from a sequence
    /// (`targets`: column, default expression), drawn in a committed
    /// transaction ([`Evaluator::committed_rows`]).
    async fn draw(&self, targets: &[(usize, String)]) -> Result<Vec<Value>, Refused> {
        let items: Vec<String> = targets.iter().map(|(i, e)| self.cols[*i].read(e)).collect();
        let sql = format!(
            "/* mezzanine: a write through the facade */ SELECT {}",
            items.join(", ")
        );
        let texts = first_row(self.eval.committed_rows(&sql).await)?;
        targets
            .iter()
            .zip(texts)
            .map(|((i, _), text)| self.cols[*i].render(text))
            .collect()
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

/// One row of text values, PostgreSQL's errors kept with their SQLSTATE.
async fn texts(eval: Evaluator<'_>, sql: &str) -> Result<Vec<Option<String>>, Refused> {
    first_row(eval.rows(sql).await)
}

fn first_row(
    rows: Result<Vec<sqlx::postgres::PgRow>, sqlx::Error>,
) -> Result<Vec<Option<String>>, Refused> {
    use sqlx::Row as _;
    let rows = rows.map_err(|e| match &e {
        sqlx::Error::Database(db) => Refused::new(
            db.code().as_deref().unwrap_or("XX000"),
            db.message().to_string(),
        ),
        _ => Refused::new("58000", format!("evaluating the write's values: {e}")),
    })?;
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
