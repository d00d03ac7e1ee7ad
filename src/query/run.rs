//! `mezzanine query run`: a translated read executed both ways, as SQL on
//! PostgreSQL and as its cell API calls on Schemaless, with the rows of
//! both rebuilt through the layout and compared.
//!
//! Both sides are turned into the same JSON values by the layout's own
//! conversions: PostgreSQL's answer is re-selected through each field's
//! read expression (the one the backfill and the verifier read with), and
//! Schemaless's rows come from the cells' bodies. The statement's values
//! (`$n` from `--param`, literals, `now()`) are evaluated by PostgreSQL
//! once, and the same values are handed to the cell API: a row key as a
//! UUID, an index filter in its field's stored form.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use legacy::layout::ColumnLayout;
use legacy::LegacyStore;
use query::plan::{IndexRead, Keys, Output, Plan, Projected, RowRead};
use query::sqlparser::ast::{visit_expressions_mut, Expr, SetExpr, Statement};
use query::sqlparser::dialect::PostgreSqlDialect;
use query::sqlparser::parser::Parser;
use schemaless::{CellStore, Column, Filter, FilterOp, IndexQuery, ReadFrom, RowKey, StoredCell};
use serde_json::{json, Value};

/// One result row: the outputs' values, then the ORDER BY values.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub values: Vec<Value>,
    pub order: Vec<Value>,
}

/// Both answers and what differs.
pub struct Verdict {
    pub columns: Vec<String>,
    pub postgres: Vec<Row>,
    pub schemaless: Vec<Row>,
    /// Empty when equal.
    pub differences: Vec<String>,
    /// How the rows were compared.
    pub compared: &'static str,
}

/// Why `query run` cannot run a statement (exit 2), or a failure (exit 1).
pub enum RunError {
    Untranslatable(String),
    Failed(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for RunError {
    fn from(e: E) -> Self {
        RunError::Failed(e.into())
    }
}

fn untranslatable(why: impl Into<String>) -> RunError {
    RunError::Untranslatable(why.into())
}

/// Runs `sql` with `params` both ways.
pub async fn run(
    config: &config::Config,
    model: &query::Model,
    sql: &str,
    params: &[String],
) -> Result<Verdict, RunError> {
    // The values are bound first, so the plan's expressions are literals.
    let statement = bind(sql, params)?;
    let analysis = query::analyze(model, &statement.to_string());
    let plan =
        match analysis.plan {
            Some(plan @ (Plan::Rows(_) | Plan::Index(_))) => plan,
            Some(Plan::Write(_)) => return Err(untranslatable(
                "a write: query run proves reads; a write's calls are shown by `query translate`",
            )),
            None => {
                return Err(untranslatable(format!(
                    "class {}: {}",
                    analysis.class,
                    analysis
                        .reason
                        .unwrap_or_else(|| "it touches no layout table".to_string())
                )))
            }
        };
    let legacy = LegacyStore::connect(config).await?;
    let store =
        schemaless::tombstone::Tombstoned::new(schemaless::MySqlStore::connect(config)?, config)?;
    let result = async {
        let (outputs, order, ordered_by_sql) = match &plan {
            Plan::Rows(read) => (&read.outputs, &read.order, !read.order.is_empty()),
            Plan::Index(read) => (&read.outputs, &read.order, !read.order.is_empty()),
            Plan::Write(_) => unreachable!("writes are refused above"),
        };
        let postgres = postgres_rows(&legacy, &statement, outputs, order).await?;
        let eval = Evaluator { legacy: &legacy };
        let schemaless = match &plan {
            Plan::Rows(read) => row_reads(&eval, &store, read).await?,
            Plan::Index(read) => index_reads(&eval, &store, read).await?,
            Plan::Write(_) => unreachable!("writes are refused above"),
        };
        let (differences, compared) = compare(outputs, &postgres, &schemaless, ordered_by_sql);
        Ok::<_, RunError>(Verdict {
            columns: outputs.iter().map(|o| o.name.clone()).collect(),
            postgres,
            schemaless,
            differences,
            compared,
        })
    }
    .await;
    legacy.close().await;
    store.inner().close().await;
    result
}

/// The statement with its `$n` replaced by `--param` values (as untyped
/// literals, so PostgreSQL types them as it would a bound parameter).
fn bind(sql: &str, params: &[String]) -> Result<Statement, RunError> {
    let mut statements =
        Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| untranslatable(e.to_string()))?;
    if statements.len() != 1 {
        return Err(untranslatable(format!(
            "{} statements where one was expected",
            statements.len()
        )));
    }
    let mut statement = statements.remove(0);
    let mut missing = None;
    let _ = visit_expressions_mut(&mut statement, |e| {
        if let Expr::Value(v) = e {
            if let query::sqlparser::ast::Value::Placeholder(name) = &v.value {
                let n: Option<usize> = name.strip_prefix('$').and_then(|n| n.parse().ok());
                match n.and_then(|n| n.checked_sub(1)).and_then(|i| params.get(i)) {
                    Some(value) => {
                        v.value = query::sqlparser::ast::Value::SingleQuotedString(value.clone());
                    }
                    None => {
                        missing = Some(name.clone());
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    if let Some(name) = missing {
        return Err(RunError::Untranslatable(format!(
            "the statement uses {name}, and {} --param values were given",
            params.len()
        )));
    }
    Ok(statement)
}

/// The SQL that reads `from` (an expression of the statement) as the text
/// the layout's conversion renders.
fn read_expr(legacy: &LegacyStore, from: &Output, expr: &str) -> String {
    match field(legacy, from) {
        Some(f) => f.conversion.read_expr(&format!("({expr})")),
        None => format!("({expr})::text"),
    }
}

fn field<'a>(legacy: &'a LegacyStore, from: &Output) -> Option<&'a legacy::layout::Field> {
    match from {
        Output::Field { column, field } => {
            let (_, c) = legacy.layout().column(column)?;
            c.field(field)
        }
        _ => None,
    }
}

/// A value read as text, as JSON the way a cell holds it.
fn render(legacy: &LegacyStore, from: &Output, text: Option<String>) -> Result<Value, RunError> {
    let Some(text) = text else {
        return Ok(Value::Null);
    };
    Ok(match from {
        Output::Field { .. } => match field(legacy, from) {
            Some(f) => f
                .conversion
                .render(Some(&text))
                .map_err(|e| anyhow::anyhow!("reading {text:?}: {e}"))?,
            None => Value::String(text),
        },
        Output::RefKey { .. } => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or(Value::String(text)),
        Output::RowKey | Output::Value(_) => Value::String(text),
    })
}

/// PostgreSQL's answer: the statement with its select list replaced by
/// each output's read expression (then the ORDER BY columns').
async fn postgres_rows(
    legacy: &LegacyStore,
    statement: &Statement,
    outputs: &[Projected],
    order: &[(Projected, bool)],
) -> Result<Vec<Row>, RunError> {
    let all: Vec<&Projected> = outputs.iter().chain(order.iter().map(|(p, _)| p)).collect();
    let items: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                "{} AS \"mezzanine_{i}\"",
                read_expr(legacy, &p.from, &p.expr)
            )
        })
        .collect();
    let select_list = Parser::parse_sql(
        &PostgreSqlDialect {},
        &format!("SELECT {}", items.join(", ")),
    )
    .map_err(|e| anyhow::anyhow!("building the PostgreSQL side: {e}"))?;
    let projection = match select_list.first() {
        Some(Statement::Query(q)) => match q.body.as_ref() {
            SetExpr::Select(s) => s.projection.clone(),
            _ => unreachable!("a SELECT parses as a select"),
        },
        _ => unreachable!("a SELECT parses as a query"),
    };
    let mut statement = statement.clone();
    let Statement::Query(query) = &mut statement else {
        return Err(untranslatable("not a SELECT"));
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return Err(untranslatable("not a plain SELECT"));
    };
    select.projection = projection;
    let sql = format!("/* mezzanine */ {statement}");
    let rows: Vec<sqlx::postgres::PgRow> = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
        .fetch_all(legacy.pool())
        .await
        .map_err(|e| anyhow::anyhow!("running on PostgreSQL: {e}\n  {sql}"))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        use sqlx::Row as _;
        let mut values = Vec::with_capacity(all.len());
        for (i, p) in all.iter().enumerate() {
            let text: Option<String> = row.try_get(i)?;
            values.push(render(legacy, &p.from, text)?);
        }
        let order = values.split_off(outputs.len());
        out.push(Row { values, order });
    }
    Ok(out)
}

/// Evaluates the statement's values on PostgreSQL, in the types the
/// cell API takes them.
struct Evaluator<'a> {
    legacy: &'a LegacyStore,
}

impl Evaluator<'_> {
    async fn texts(&self, sql: String) -> Result<Vec<Option<String>>, RunError> {
        let rows: Vec<(Option<String>,)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("/* mezzanine */ {sql}")))
                .fetch_all(self.legacy.pool())
                .await
                .map_err(|e| anyhow::anyhow!("evaluating {sql}: {e}"))?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    /// The row keys named.
    async fn keys(&self, keys: &Keys) -> Result<Vec<RowKey>, RunError> {
        let texts = match keys {
            Keys::One(e) => self.texts(format!("SELECT ({e})::uuid::text")).await?,
            Keys::List(list) => {
                let mut all = Vec::new();
                for e in list {
                    all.extend(self.texts(format!("SELECT ({e})::uuid::text")).await?);
                }
                all
            }
            Keys::Array(e) => {
                self.texts(format!("SELECT k::text FROM unnest(({e})::uuid[]) AS k"))
                    .await?
            }
        };
        let mut out: Vec<RowKey> = Vec::new();
        for text in texts.into_iter().flatten() {
            let uuid: uuid::Uuid = text.parse().map_err(|e| anyhow::anyhow!("{text}: {e}"))?;
            let key = RowKey::from(uuid);
            if !out.contains(&key) {
                out.push(key);
            }
        }
        Ok(out)
    }

    /// One value of `from`'s field, as the cells hold it.
    async fn field_value(
        &self,
        column: &ColumnLayout,
        field: &str,
        e: &Expr,
    ) -> Result<Value, RunError> {
        let f = column
            .field(field)
            .ok_or_else(|| anyhow::anyhow!("column {} has no field {field}", column.name))?;
        let read = f.conversion.read_expr(&format!("(({e})::{})", f.sql_type));
        let text = self.texts(format!("SELECT {read}")).await?.pop().flatten();
        Ok(f.conversion
            .render_owned(text)
            .map_err(|e| anyhow::anyhow!(e))?)
    }

    /// The values of an array expression, as the cells hold the field.
    async fn field_values(
        &self,
        column: &ColumnLayout,
        field: &str,
        e: &Expr,
    ) -> Result<Vec<Value>, RunError> {
        let f = column
            .field(field)
            .ok_or_else(|| anyhow::anyhow!("column {} has no field {field}", column.name))?;
        let read = f.conversion.read_expr("v");
        let texts = self
            .texts(format!(
                "SELECT {read} FROM unnest(({e})::{}[]) AS v",
                f.sql_type
            ))
            .await?;
        texts
            .iter()
            .map(|t| {
                f.conversion
                    .render(t.as_deref())
                    .map_err(|e| RunError::Failed(anyhow::anyhow!(e)))
            })
            .collect()
    }

    async fn count(&self, e: &Expr) -> Result<usize, RunError> {
        let text = self
            .texts(format!("SELECT ({e})::bigint::text"))
            .await?
            .pop()
            .flatten();
        text.and_then(|t| t.parse().ok())
            .ok_or_else(|| untranslatable(format!("{e} is not a row count")))
    }
}

/// The cells of one row, by column.
#[derive(Default)]
struct RowCells {
    latest: BTreeMap<String, StoredCell>,
    /// Child column -> its cells, in ref key order.
    children: BTreeMap<String, Vec<StoredCell>>,
    /// From an index entry: the fields it holds.
    entry: Option<(String, Value)>,
}

async fn read_cells<S: CellStore>(
    store: &S,
    rows: &[RowKey],
    latest: &[String],
    children: &[String],
) -> Result<Vec<(RowKey, RowCells)>, RunError> {
    let mut out = Vec::new();
    for row in rows {
        let mut cells = RowCells::default();
        for name in latest {
            let column = Column::new(name)?;
            if let Some(cell) = store
                .get_cell_latest(row, &column, ReadFrom::Master)
                .await?
            {
                cells.latest.insert(name.clone(), cell);
            }
        }
        out.push((*row, cells));
    }
    for name in children {
        let column = Column::new(name)?;
        let all = store
            .get_column_cells(rows, &column, ReadFrom::Master)
            .await?;
        for cell in all {
            if let Some((_, cells)) = out.iter_mut().find(|(k, _)| *k == cell.cell.key.row_key) {
                cells.children.entry(name.clone()).or_default().push(cell);
            }
        }
    }
    Ok(out)
}

/// The result rows of one parent row: one per combination of its child
/// cells (a parent without cells of an inner-joined child has none).
/// What a read's result rows are made of.
struct Shape<'a> {
    outputs: &'a [Projected],
    order: &'a [(Projected, bool)],
    children: &'a [String],
    left: &'a [String],
}

fn rows_of(key: &RowKey, cells: &RowCells, shape: &Shape) -> Vec<Row> {
    let Shape {
        outputs,
        order,
        children,
        left,
    } = *shape;
    // Each combination: child column -> its cell (None: a LEFT JOIN's
    // missing child).
    let mut combos: Vec<BTreeMap<&str, Option<&StoredCell>>> = vec![BTreeMap::new()];
    for name in children {
        let list: Vec<Option<&StoredCell>> = match cells.children.get(name) {
            Some(list) if !list.is_empty() => list.iter().map(Some).collect(),
            _ if left.contains(name) => vec![None],
            _ => Vec::new(),
        };
        let mut next = Vec::new();
        for combo in &combos {
            for cell in &list {
                let mut c = combo.clone();
                c.insert(name.as_str(), *cell);
                next.push(c);
            }
        }
        combos = next;
    }
    let value = |p: &Projected, combo: &BTreeMap<&str, Option<&StoredCell>>| -> Value {
        match &p.from {
            Output::RowKey => Value::String(key.to_string()),
            Output::Value(_) => Value::Null,
            Output::RefKey { column } => {
                let cell = cells
                    .latest
                    .get(column)
                    .or_else(|| combo.get(column.as_str()).copied().flatten());
                cell.map_or(Value::Null, |c| Value::from(c.cell.key.ref_key.get()))
            }
            Output::Field { column, field } => {
                let cell = cells
                    .latest
                    .get(column)
                    .or_else(|| combo.get(column.as_str()).copied().flatten());
                match cell {
                    Some(c) => c
                        .cell
                        .body
                        .fields()
                        .get(field)
                        .cloned()
                        .unwrap_or(Value::Null),
                    None => match &cells.entry {
                        Some((index_column, fields)) if index_column == column => {
                            fields.get(field).cloned().unwrap_or(Value::Null)
                        }
                        _ => Value::Null,
                    },
                }
            }
        }
    };
    combos
        .iter()
        .map(|combo| Row {
            values: outputs.iter().map(|p| value(p, combo)).collect(),
            order: order.iter().map(|(p, _)| value(p, combo)).collect(),
        })
        .collect()
}

async fn row_reads<S: CellStore>(
    eval: &Evaluator<'_>,
    store: &S,
    read: &RowRead,
) -> Result<Vec<Row>, RunError> {
    if read.filtered {
        return Err(untranslatable(
            "it filters what it reads in the app (a condition besides the UUID), which query run does not evaluate; run it without that condition",
        ));
    }
    if !read.order.is_empty() && (read.limit.is_some() || read.offset.is_some()) {
        return Err(untranslatable(
            "it sorts in the app and then limits, which query run does not evaluate",
        ));
    }
    let keys = eval.keys(&read.keys).await?;
    let cells = read_cells(store, &keys, &read.latest, &read.children).await?;
    let shape = Shape {
        outputs: &read.outputs,
        order: &read.order,
        children: &read.children,
        left: &read.left,
    };
    let mut rows = Vec::new();
    for (key, cells) in &cells {
        // A parent read at its latest cell exists only if it has one.
        if !read.latest.is_empty() && cells.latest.is_empty() {
            continue;
        }
        if read.latest.is_empty() && cells.children.is_empty() && read.left.is_empty() {
            continue;
        }
        rows.extend(rows_of(key, cells, &shape));
    }
    let offset = match &read.offset {
        Some(e) => eval.count(e).await?,
        None => 0,
    };
    if let Some(limit) = &read.limit {
        let limit = eval.count(limit).await?;
        if rows.len() > offset + limit {
            return Err(untranslatable(
                "its LIMIT without ORDER BY picks any of more rows than it keeps, so no answer is the one to compare",
            ));
        }
    }
    Ok(rows.into_iter().skip(offset).collect())
}

async fn index_reads<S: CellStore>(
    eval: &Evaluator<'_>,
    store: &S,
    read: &IndexRead,
) -> Result<Vec<Row>, RunError> {
    let legacy = eval.legacy;
    let index = legacy
        .layout()
        .index(&read.index)
        .ok_or_else(|| anyhow::anyhow!("index {} is not in the legacy layout", read.index))?;
    let column = &legacy.layout().columns[index.column];
    let shard_value = eval
        .field_value(column, &read.shard_field, &read.shard_value)
        .await?;
    let mut filters = Vec::new();
    for f in &read.filters {
        let value = match (f.op, f.array) {
            (FilterOp::In, true) => {
                Value::Array(eval.field_values(column, &f.field, &f.values[0]).await?)
            }
            (FilterOp::In, false) => {
                let mut all = Vec::new();
                for e in &f.values {
                    all.push(eval.field_value(column, &f.field, e).await?);
                }
                Value::Array(all)
            }
            _ => eval.field_value(column, &f.field, &f.values[0]).await?,
        };
        filters.push(Filter {
            field: f.field.clone(),
            op: f.op,
            value,
        });
    }
    let limit = match &read.limit {
        Some(e) => eval.count(e).await?,
        None => schemaless::index::MAX_LIMIT,
    };
    let query = IndexQuery {
        index: read.index.clone(),
        shard_value,
        filters,
        order_by: read.order_by.clone(),
        descending: read.descending,
        limit: limit.clamp(1, schemaless::index::MAX_LIMIT),
    };
    let entries = if limit == 0 {
        Vec::new()
    } else {
        store.query_index(&query, ReadFrom::Master).await?
    };
    let keys: Vec<RowKey> = entries.iter().map(|e| e.row_key).collect();
    let mut cells = read_cells(store, &keys, &read.latest, &read.children).await?;
    let shape = Shape {
        outputs: &read.outputs,
        order: &read.order,
        children: &read.children,
        left: &read.left,
    };
    let mut rows = Vec::new();
    for (entry, (key, cells)) in entries.iter().zip(cells.iter_mut()) {
        cells.entry = Some((column.name.to_string(), entry.fields.to_value()));
        rows.extend(rows_of(key, cells, &shape));
    }
    Ok(rows)
}

/// What differs between the two answers. With an ORDER BY the rows are
/// compared in order, rows with equal ORDER BY values as a group in any
/// order (the statement leaves their order open); without one, as
/// multisets.
fn compare(
    outputs: &[Projected],
    postgres: &[Row],
    schemaless: &[Row],
    ordered: bool,
) -> (Vec<String>, &'static str) {
    // Constants are not read from either store.
    let comparable = |row: &Row| -> Vec<Value> {
        outputs
            .iter()
            .zip(&row.values)
            .filter(|(p, _)| !matches!(p.from, Output::Value(_)))
            .map(|(_, v)| v.clone())
            .collect()
    };
    let groups = |rows: &[Row]| -> Vec<(Vec<Value>, Vec<Vec<Value>>)> {
        let mut out: Vec<(Vec<Value>, Vec<Vec<Value>>)> = Vec::new();
        for row in rows {
            match out.last_mut() {
                Some((key, members)) if ordered && *key == row.order => {
                    members.push(comparable(row))
                }
                _ => out.push((row.order.clone(), vec![comparable(row)])),
            }
        }
        if !ordered {
            let all: Vec<Vec<Value>> = out.into_iter().flat_map(|(_, m)| m).collect();
            return vec![(Vec::new(), all)];
        }
        out
    };
    let mut differences = Vec::new();
    if postgres.len() != schemaless.len() {
        differences.push(format!(
            "PostgreSQL returned {} rows, Schemaless {}",
            postgres.len(),
            schemaless.len()
        ));
    }
    let (pg_groups, sl_groups) = (groups(postgres), groups(schemaless));
    for (i, (pg, sl)) in pg_groups.iter().zip(&sl_groups).enumerate() {
        if ordered && pg.0 != sl.0 {
            differences.push(format!(
                "in order position {i}: PostgreSQL orders by {:?}, Schemaless by {:?}",
                pg.0, sl.0
            ));
            break;
        }
        let mut only_sl: Vec<&Vec<Value>> = sl.1.iter().collect();
        let mut only_pg = Vec::new();
        for row in &pg.1 {
            match only_sl.iter().position(|r| *r == row) {
                Some(at) => {
                    only_sl.remove(at);
                }
                None => only_pg.push(row),
            }
        }
        // Pair what is left by position and name the fields that differ.
        for (p, s) in only_pg.iter().zip(&only_sl) {
            let fields: Vec<String> = outputs
                .iter()
                .filter(|o| !matches!(o.from, Output::Value(_)))
                .zip(p.iter().zip(s.iter()))
                .filter(|(_, (a, b))| a != b)
                .map(|(o, (a, b))| format!("{}: PostgreSQL {a}, Schemaless {b}", o.name))
                .collect();
            differences.push(format!("a row differs in {}", fields.join("; ")));
        }
        for p in only_pg.iter().skip(only_sl.len()) {
            differences.push(format!("only in PostgreSQL: {p:?}"));
        }
        for s in only_sl.iter().skip(only_pg.len()) {
            differences.push(format!("only in Schemaless: {s:?}"));
        }
    }
    (
        differences,
        if ordered {
            "in the statement's order (rows tied on the ORDER BY as a group)"
        } else {
            "as sets of rows (the statement gives no order)"
        },
    )
}

/// The verdict as JSON.
pub fn json(verdict: &Verdict) -> Value {
    let rows = |rows: &[Row]| -> Vec<Value> {
        rows.iter()
            .map(|r| {
                Value::Object(
                    verdict
                        .columns
                        .iter()
                        .cloned()
                        .zip(r.values.iter().cloned())
                        .collect(),
                )
            })
            .collect()
    };
    json!({
        "verdict": if verdict.differences.is_empty() { "equal" } else { "different" },
        "compared": verdict.compared,
        "columns": verdict.columns,
        "postgres": rows(&verdict.postgres),
        "schemaless": rows(&verdict.schemaless),
        "differences": verdict.differences,
    })
}

/// The verdict for people: both answers as tables, then what differs.
pub fn text(verdict: &Verdict) -> String {
    let mut out = String::new();
    for (name, rows) in [
        ("PostgreSQL", &verdict.postgres),
        ("Schemaless", &verdict.schemaless),
    ] {
        out.push_str(&format!("{name}: {} rows\n", rows.len()));
        out.push_str(&format!("  {}\n", verdict.columns.join(" | ")));
        for row in rows.iter().take(50) {
            let cells: Vec<String> = row.values.iter().map(Value::to_string).collect();
            out.push_str(&format!("  {}\n", cells.join(" | ")));
        }
        if rows.len() > 50 {
            out.push_str(&format!("  ... {} more\n", rows.len() - 50));
        }
    }
    if verdict.differences.is_empty() {
        out.push_str(&format!(
            "equal: {} rows, compared {}\n",
            verdict.postgres.len(),
            verdict.compared
        ));
    } else {
        out.push_str(&format!("DIFFERENT (compared {}):\n", verdict.compared));
        for d in &verdict.differences {
            out.push_str(&format!("  {d}\n"));
        }
    }
    out
}
