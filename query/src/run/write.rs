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

use legacy::layout::{Field, Shape};
use schemaless::{Body, Cell, RefKey, WriteOutcome};
use sqlparser::ast::SelectItem;

use super::serve::{literal, quote, unquote, Attribute};
use super::*;
use crate::expr::strip;
use crate::model::{folded, Table};
use crate::plan::{Inserted, OnConflict, Rows, Write};

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
}

impl Refused {
    fn new(sqlstate: &str, message: impl Into<String>) -> Refused {
        Refused {
            sqlstate: sqlstate.to_string(),
            message: message.into(),
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

/// The statement PostgreSQL runs in place of a write without RETURNING:
/// it answers `NoData` to a `Describe` and a bare `CommandComplete`.
pub const NOTHING: &str = "DO $mezzanine$ BEGIN END $mezzanine$";

/// Runs `sql`, its `$n` bound to `params` (`None`: NULL), through
/// `store`. `legacy` evaluates the values and knows the catalog.
pub async fn write_through<S: CellStore>(
    eval: Evaluator<'_>,
    store: &S,
    catalog: &Catalog,
    (model, limits): (&crate::Model, &config::Limits),
    sql: &str,
    params: &[Option<String>],
) -> Result<Written, Refused> {
    let legacy = eval.legacy;
    let statement = bind_nullable(sql, params)?;
    let write = match crate::analyze(model, &statement.to_string()).plan {
        Some(Plan::Write(write)) => write,
        _ => return Err(Refused::new("0A000", "not a translatable write")),
    };
    let cols = columns(legacy, catalog, model, write.table).await?;
    let writer = Writer {
        legacy,
        eval,
        limits,
        store,
        cols: &cols,
        write: &write,
    };
    // Rows are read and evaluated a few at a time; nothing is put before
    // all of them are, and an error is the first failing row's.
    let mut done: Vec<Option<RowWrite>> = Vec::new();
    let tag = match &write.rows {
        Rows::Insert { rows, conflict } => {
            for chunk in rows.chunks(ROWS_AT_ONCE) {
                let mut rows = Vec::with_capacity(chunk.len());
                for row in chunk {
                    rows.push(writer.insert(row, conflict));
                }
                // Every row's outcome, so the error is the first row's, as in
                // PostgreSQL, whichever finished first.
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
            let keys = eval.keys(keys).await?;
            for chunk in keys.chunks(ROWS_AT_ONCE) {
                let mut rows = Vec::with_capacity(chunk.len());
                for key in chunk {
                    rows.push(writer.update_existing(key, sets, conditions));
                }
                // Every row's outcome, so the error is the first row's, as in
                // PostgreSQL, whichever finished first.
                for row in futures::future::join_all(rows).await {
                    done.push(row?);
                }
            }
            "UPDATE"
        }
    };
    let (rows, cells): (Vec<_>, Vec<_>) = done.into_iter().flatten().unzip();
    let count = writer.put(cells).await?;
    let rows: Vec<Vec<Value>> = rows
        .into_iter()
        .zip(&count)
        .filter(|(_, &kept)| kept)
        .map(|(row, _)| row)
        .collect();
    Ok(Written {
        rendering: writer.rendering(&rows)?,
        tag: format!("{tag} {}", rows.len()),
        cells: count.len(),
    })
}

/// A mapped column of the table written, in the order the `VALUES` rows
/// give them.
struct Col<'a> {
    /// Its SQL name, unquoted.
    sql: String,
    attr: Attribute,
    kind: Kind<'a>,
}

enum Kind<'a> {
    RowKey,
    /// The ref key of layout column `usize`.
    RefKey(usize),
    /// A field of layout column `usize`.
    Field(usize, &'a Field),
}

impl Col<'_> {
    /// `v` as a typed SQL value.
    fn typed(&self, v: &Value) -> Result<String, Refused> {
        let text = match &self.kind {
            Kind::Field(_, f) => {
                f.conversion
                    .accept(v)
                    .map_err(|e| Refused::new("XX001", format!("a stored {}: {e}", f.json)))?
                    .1
            }
            _ => match v {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            },
        };
        let ty = &self.attr.sql_type;
        Ok(match text {
            Some(text) => format!("CAST({} AS {ty})", literal(&text)),
            None => format!("CAST(NULL AS {ty})"),
        })
    }

    /// The SQL reading `expr`, cast to the column's type, as text the
    /// layout renders.
    fn read(&self, expr: &str) -> String {
        let cast = format!("CAST(({expr}) AS {})", self.attr.sql_type);
        match &self.kind {
            Kind::Field(_, f) => f.conversion.read_expr(&cast),
            _ => format!("({cast})::text"),
        }
    }

    fn render(&self, text: Option<String>) -> Result<Value, Refused> {
        let Some(text) = text else {
            return Ok(Value::Null);
        };
        match &self.kind {
            Kind::Field(_, f) => f.conversion.render_owned(Some(text)).map_err(|e| {
                Refused::new(
                    "0A000",
                    format!("{} {e}: Schemaless cannot hold this value", f.json),
                )
            }),
            Kind::RowKey => Ok(Value::String(text)),
            Kind::RefKey(_) => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|e| Refused::new("22003", format!("ref key {text}: {e}"))),
        }
    }
}

/// The mapped columns of `table`: the parent's UUID, then each layout
/// column's ref key and fields (a child table: its column's).
async fn columns<'a>(
    legacy: &'a LegacyStore,
    catalog: &Catalog,
    model: &crate::Model,
    table: Table,
) -> Result<Vec<Col<'a>>, Refused> {
    let layout = legacy.layout();
    let mut wanted: Vec<(&str, String, Kind<'a>)> = Vec::new();
    let of_table: Vec<usize> = match table {
        Table::Parent => {
            wanted.push((layout.table_sql(), unquote(layout.uuid_sql()), Kind::RowKey));
            (0..layout.columns.len())
                .filter(|&i| layout.columns[i].shape == Shape::Row)
                .collect()
        }
        Table::Child(c) => layout
            .column(model.column(c).name.as_str())
            .map(|(i, _)| vec![i])
            .unwrap_or_default(),
    };
    for i in of_table {
        let c = &layout.columns[i];
        wanted.push((c.table_sql(), unquote(c.ref_key_sql()), Kind::RefKey(i)));
        for f in &c.fields {
            wanted.push((c.table_sql(), f.sql.clone(), Kind::Field(i, f)));
        }
    }
    let mut cols: Vec<Col> = Vec::new();
    for (table_sql, sql, kind) in wanted {
        if cols.iter().any(|c| c.sql == sql) {
            continue;
        }
        let attr = catalog.attribute(legacy, table_sql, &sql).await?;
        cols.push(Col { sql, attr, kind });
    }
    Ok(cols)
}

struct Writer<'a, S> {
    legacy: &'a LegacyStore,
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
    fn position(&self, sql: &str) -> Option<usize> {
        self.cols.iter().position(|c| c.sql == sql)
    }

    /// The latest cell of each of the parent's layout columns (`None` for
    /// the others).
    async fn latest(&self, key: &RowKey) -> Result<Vec<Option<StoredCell>>, Refused> {
        let layout = self.legacy.layout();
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

    /// One INSERTed row: its values and cells, or `None` when the row
    /// exists and ON CONFLICT DO NOTHING leaves it.
    async fn insert(
        &self,
        row: &Inserted,
        conflict: &OnConflict,
    ) -> Result<Option<RowWrite>, Refused> {
        // Every mapped column: the value given, or the default.
        let mut targets = Vec::new();
        let mut given = vec![false; self.cols.len()];
        for (i, c) in self.cols.iter().enumerate() {
            let value = row.values.iter().find(|(name, _)| *name == c.sql);
            given[i] = value.is_some();
            targets.push((
                i,
                match value {
                    Some((_, e)) => e.to_string(),
                    None => c.attr.default.clone().unwrap_or_else(|| "NULL".into()),
                },
            ));
        }
        let (key, new, _) = self.evaluate(Some(&row.key), &targets, &[], None).await?;
        let key = row_key(key)?;
        // PostgreSQL checks the proposed row before it looks for a
        // conflict: an upsert's too.
        self.check_not_null(&new)?;
        let latest = self.latest(&key).await?;
        let exists = latest.iter().any(Option::is_some);
        if let Table::Child(_) = self.write.table {
            if !exists {
                return Err(Refused::new(
                    "23503",
                    format!(
                        "insert on table {} violates its key to {}: no row {key} there",
                        self.table_name(),
                        self.legacy.layout().table
                    ),
                ));
            }
        } else if exists {
            return match conflict {
                OnConflict::Fail => Err(duplicate(&self.legacy.layout().table, &key)),
                OnConflict::Nothing => Ok(None),
                OnConflict::Update(sets) => {
                    let sets = excluded(sets, self.cols, &new)?;
                    self.update(&key, &latest, &sets, &[]).await
                }
            };
        }
        // Each layout column the INSERT gives a value of.
        let mut cells = Vec::new();
        for (i, c) in self.cols.iter().enumerate() {
            let Kind::RefKey(column) = c.kind else {
                continue;
            };
            let touched = self.cols.iter().enumerate().any(|(j, d)| {
                given[j] && matches!(d.kind, Kind::RefKey(k) | Kind::Field(k, _) if k == column)
            });
            if touched {
                cells.push(self.cell(&key, column, i, &new)?);
            }
        }
        Ok(Some((new, cells)))
    }

    /// An UPDATE of row `key`: nothing when it is not there.
    async fn update_existing(
        &self,
        key: &RowKey,
        sets: &[(String, Expr)],
        conditions: &[Expr],
    ) -> Result<Option<RowWrite>, Refused> {
        let latest = self.latest(key).await?;
        if latest.iter().all(Option::is_none) {
            return Ok(None);
        }
        self.update(key, &latest, sets, conditions).await
    }

    /// The next version of an existing row: `sets` evaluated over its
    /// latest cells, if `conditions` hold there.
    async fn update(
        &self,
        key: &RowKey,
        latest: &[Option<StoredCell>],
        sets: &[(String, Expr)],
        conditions: &[Expr],
    ) -> Result<Option<RowWrite>, Refused> {
        let base: Vec<Value> = self
            .cols
            .iter()
            .map(|c| match c.kind {
                Kind::RowKey => Value::String(key.uuid().to_string()),
                Kind::RefKey(i) => latest[i]
                    .as_ref()
                    .map_or(Value::Null, |s| Value::from(s.cell.key.ref_key.get())),
                Kind::Field(i, f) => latest[i]
                    .as_ref()
                    .and_then(|s| s.cell.body.fields().get(&f.json).cloned())
                    .unwrap_or(Value::Null),
            })
            .collect();
        let mut targets = Vec::new();
        for (name, e) in sets {
            let at = self.position(name).ok_or_else(|| {
                Refused::new(
                    "0A000",
                    format!("sets {name}, which the layout does not map"),
                )
            })?;
            targets.push((at, e.to_string()));
        }
        let (_, values, holds) = self
            .evaluate(None, &targets, conditions, Some(&base))
            .await?;
        if !holds {
            return Ok(None);
        }
        let mut new = base;
        for ((at, _), v) in targets.iter().zip(values) {
            new[*at] = v;
        }
        self.check_not_null(&new)?;
        let mut cells = Vec::new();
        for (i, c) in self.cols.iter().enumerate() {
            if let Kind::RefKey(column) = c.kind {
                if targets.iter().any(|(at, _)| *at == i) {
                    cells.push(self.cell(key, column, i, &new)?);
                }
            }
        }
        Ok(Some((new, cells)))
    }

    /// The cell of layout column `column` in row `new` (`at`: its ref
    /// key's position).
    fn cell(&self, key: &RowKey, column: usize, at: usize, new: &[Value]) -> Result<Cell, Refused> {
        let ref_key = new[at].as_i64().ok_or_else(|| {
            Refused::new(
                "23502",
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null \
                     constraint: it is the ref key of Schemaless column {}",
                    self.cols[at].sql,
                    self.table_name(),
                    self.legacy.layout().columns[column].name
                ),
            )
        })?;
        let ref_key = RefKey::new(ref_key).map_err(|e| Refused::new("22023", e.to_string()))?;
        let mut body = serde_json::Map::new();
        for (c, v) in self.cols.iter().zip(new) {
            if let Kind::Field(k, f) = c.kind {
                if k == column {
                    body.insert(f.json.clone(), v.clone());
                }
            }
        }
        let body = Body::from_value(Value::Object(body))
            .map_err(|e| Refused::new("22023", e.to_string()))?;
        Ok(Cell::new(
            *key,
            self.legacy.layout().columns[column].name.clone(),
            ref_key,
            body,
        ))
    }

    fn check_not_null(&self, new: &[Value]) -> Result<(), Refused> {
        match self
            .cols
            .iter()
            .zip(new)
            .find(|(c, v)| c.attr.not_null && v.is_null())
        {
            Some((c, _)) => Err(Refused::new(
                "23502",
                format!(
                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                    c.sql,
                    self.table_name()
                ),
            )),
            None => Ok(()),
        }
    }

    fn table_name(&self) -> String {
        match self.write.table {
            Table::Parent => self.legacy.layout().table.clone(),
            Table::Child(_) => self
                .cols
                .iter()
                .find_map(|c| match c.kind {
                    Kind::RefKey(i) => Some(self.legacy.layout().columns[i].table.clone()),
                    _ => None,
                })
                .unwrap_or_default(),
        }
    }

    /// Puts every row's cells, in as few calls as the batch limits allow;
    /// which rows were written (a row of ON CONFLICT DO NOTHING whose cell
    /// was taken meanwhile is not).
    async fn put(&self, rows: Vec<Vec<Cell>>) -> Result<Vec<bool>, Refused> {
        let of_row: Vec<usize> = rows
            .iter()
            .enumerate()
            .flat_map(|(r, cells)| std::iter::repeat_n(r, cells.len()))
            .collect();
        let mut kept = vec![true; rows.len()];
        let cells: Vec<Cell> = rows.into_iter().flatten().collect();
        if cells.is_empty() {
            return Ok(kept);
        }
        let keys: Vec<RowKey> = cells.iter().map(|c| c.key.row_key).collect();
        let sizes =
            schemaless::cell::batch_sizes(cells.iter().map(|c| c.body.json_len()), self.limits);
        let mut cells = cells.into_iter();
        let mut results = Vec::with_capacity(keys.len());
        for size in sizes {
            let batch: Vec<Cell> = cells.by_ref().take(size).collect();
            results.extend(self.store.put_cells(batch).await.map_err(|e| {
                Refused::new("58000", format!("Schemaless did not take the write: {e}"))
            })?);
        }
        let insert = match &self.write.rows {
            Rows::Insert { conflict, .. } => Some(conflict),
            Rows::Update { .. } => None,
        };
        for ((result, r), key) in results.iter().zip(of_row).zip(keys) {
            let taken = matches!(result, Err(_) | Ok(WriteOutcome::AlreadyPresent));
            match (insert, taken) {
                (_, false) => {}
                (Some(OnConflict::Nothing), true) => kept[r] = false,
                (Some(_), true) => return Err(duplicate(&self.table_name(), &key)),
                // The same next version, written by an equal UPDATE.
                (None, true) if result.is_ok() => {}
                (None, true) => {
                    return Err(Refused::new(
                        "40001",
                        format!(
                            "could not serialize access due to concurrent update: row {} \
                             got a new version meanwhile; retry",
                            key.uuid()
                        ),
                    ))
                }
            }
        }
        Ok(kept)
    }

    /// The statement PostgreSQL runs in the app's statement's place.
    fn rendering(&self, rows: &[Vec<Value>]) -> Result<Rendering, Refused> {
        if self.write.returning.is_empty() {
            return Ok(Rendering {
                sql: NOTHING.to_string(),
                origins: Vec::new(),
                rows: rows.len(),
            });
        }
        let items: Vec<String> = self
            .write
            .returning
            .iter()
            .map(ToString::to_string)
            .collect();
        let origins = self
            .write
            .returning
            .iter()
            .map(|item| {
                let e = match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                    _ => return Origin::default(),
                };
                let name = match strip(e) {
                    Expr::Identifier(i) => folded(i),
                    Expr::CompoundIdentifier(parts) => parts.last().map(folded).unwrap_or_default(),
                    _ => return Origin::default(),
                };
                self.position(&name)
                    .map_or_else(Origin::default, |at| self.cols[at].attr.origin)
            })
            .collect();
        let null_row = vec![Value::Null; self.cols.len()];
        let sql = format!(
            "/* mezzanine: written through the facade */ SELECT {} FROM {}{}",
            items.join(", "),
            if rows.is_empty() {
                self.values(&[null_row])?
            } else {
                self.values(rows)?
            },
            if rows.is_empty() { " WHERE false" } else { "" }
        );
        Ok(Rendering {
            sql,
            origins,
            rows: rows.len(),
        })
    }
}

/// The row key evaluated, or PostgreSQL's NOT NULL error.
fn row_key(text: Option<String>) -> Result<RowKey, Refused> {
    let text = text.ok_or_else(|| Refused::new("23502", "the row key (the UUID) is null"))?;
    text.parse::<uuid::Uuid>()
        .map(RowKey::from)
        .map_err(|e| Refused::new("22P02", format!("{text}: {e}")))
}

fn duplicate(table: &str, key: &RowKey) -> Refused {
    Refused::new(
        "23505",
        format!(
            "duplicate key value violates unique constraint: a row of {table} with key {} \
             exists",
            key.uuid()
        ),
    )
}

/// `sets` with every `EXCLUDED.x` replaced by the proposed row's typed
/// value of `x` (`NULL` for a column the layout does not map).
fn excluded(
    sets: &[(String, Expr)],
    cols: &[Col],
    proposed: &[Value],
) -> Result<Vec<(String, Expr)>, Refused> {
    let mut out = Vec::with_capacity(sets.len());
    for (name, e) in sets {
        let mut e = e.clone();
        let mut failed = None;
        let _ = visit_expressions_mut(&mut e, |e| {
            if let Expr::CompoundIdentifier(parts) = e {
                if let [table, column] = parts.as_slice() {
                    if folded(table) == "excluded" {
                        let column = folded(column);
                        let typed = match cols.iter().position(|c| c.sql == column) {
                            Some(at) => cols[at].typed(&proposed[at]),
                            None => Ok("NULL".to_string()),
                        };
                        match typed.and_then(|sql| {
                            Parser::new(&PostgreSqlDialect {})
                                .try_with_sql(&sql)
                                .and_then(|mut p| p.parse_expr())
                                .map_err(|e| Refused::new("XX000", e.to_string()))
                        }) {
                            Ok(value) => *e = Expr::Nested(Box::new(value)),
                            Err(err) => {
                                failed = Some(err);
                                return ControlFlow::Break(());
                            }
                        }
                    }
                }
            }
            ControlFlow::Continue(())
        });
        if let Some(err) = failed {
            return Err(err);
        }
        out.push((name.clone(), e));
    }
    Ok(out)
}

/// One row of text values, PostgreSQL's errors kept with their SQLSTATE.
async fn texts(eval: Evaluator<'_>, sql: &str) -> Result<Vec<Option<String>>, Refused> {
    use sqlx::Row as _;
    let rows = eval.rows(sql).await.map_err(|e| match &e {
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
