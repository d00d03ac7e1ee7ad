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
//!
//! Its rooms: `postgres` (binding, evaluating and re-reading on
//! PostgreSQL), `cells` (the cell API calls and rows rebuilt from
//! cells), `reads` (a statement's cell reads, for sampling), `serve` (a
//! read answered from Schemaless, for the proxy), `values` (Schemaless's
//! values as PostgreSQL values of their columns, and conditions evaluated
//! over them), `write` (a write run
//! through the facade, for the proxy); this file runs both and compares.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::plan::{IndexRead, Keys, Output, Plan, Projected, RowRead};
use legacy::layout::ColumnLayout;
use legacy::LegacyStore;
use schemaless::{CellStore, Column, Filter, FilterOp, IndexQuery, ReadFrom, RowKey, StoredCell};
use serde_json::{json, Value};
use sqlparser::ast::{visit_expressions_mut, Expr, SetExpr, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

mod agree;
mod cells;
mod postgres;
mod reads;
mod serve;
mod session;
mod values;
mod write;

use cells::{index_reads, row_reads};
use postgres::postgres_rows;
pub use postgres::Evaluator;
pub use reads::{cell_reads, CellRead};
pub use serve::{column_orders, render_from, Catalog, Origin, Rendering, Serving};
pub use session::AppSession;
pub use write::{write_batch, write_through, Diagnostics, Refused, Written};

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

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Untranslatable(why) => write!(f, "not run: {why}"),
            RunError::Failed(e) => write!(f, "{e:#}"),
        }
    }
}

fn untranslatable(why: impl Into<String>) -> RunError {
    RunError::Untranslatable(why.into())
}

/// Runs `sql` with `params` both ways.
pub async fn run(
    config: &config::Config,
    model: &crate::Model,
    sql: &str,
    params: &[String],
) -> Result<Verdict, RunError> {
    // The values are bound first, so the plan's expressions are literals.
    let statement = bind(sql, params)?;
    let analysis = crate::analyze_statement(model, sql.to_string(), &statement);
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
        let eval = Evaluator::own(&legacy);
        let schemaless = match &plan {
            Plan::Rows(read) if ordered_by_sql => {
                sorted_as(&postgres, row_reads(&eval, &store, read).await?)
            }
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
    let params: Vec<Option<String>> = params.iter().cloned().map(Some).collect();
    bind_nullable(sql, &params)
}

/// [`bind`], a `None` bound as `NULL`.
fn bind_nullable(sql: &str, params: &[Option<String>]) -> Result<Statement, RunError> {
    let mut statement = parse_one(sql)?;
    bind_parsed(&mut statement, params)?;
    Ok(statement)
}

/// The one statement `sql` is.
fn parse_one(sql: &str) -> Result<Statement, RunError> {
    let mut statements =
        Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| untranslatable(e.to_string()))?;
    if statements.len() != 1 {
        return Err(untranslatable(format!(
            "{} statements where one was expected",
            statements.len()
        )));
    }
    let mut statement = statements.remove(0);
    crate::literal::exact_strings(&mut statement);
    Ok(statement)
}

/// Binds `params` to the `$n` of a parsed `statement` ([`bind_nullable`]).
fn bind_parsed(statement: &mut Statement, params: &[Option<String>]) -> Result<(), RunError> {
    let mut missing = None;
    let _ = visit_expressions_mut(statement, |e| {
        if let Expr::Value(v) = e {
            if let sqlparser::ast::Value::Placeholder(name) = &v.value {
                let n: Option<usize> = name.strip_prefix('$').and_then(|n| n.parse().ok());
                match n.and_then(|n| n.checked_sub(1)).and_then(|i| params.get(i)) {
                    Some(Some(value)) => v.value = crate::literal::string_literal(value.clone()),
                    Some(None) => v.value = sqlparser::ast::Value::Null,
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
    Ok(())
}

/// A row read's rows sorted as its plan's app step sorts them (`sort in
/// the app`): by their ORDER BY values, in the order PostgreSQL gave the
/// same values (its collation and NULL placement, which an app sorting
/// with the database's rules follows). Values PostgreSQL did not return
/// come last, and show as a difference.
fn sorted_as(postgres: &[Row], mut rows: Vec<Row>) -> Vec<Row> {
    let rank = |row: &Row| {
        postgres
            .iter()
            .position(|p| p.order == row.order)
            .unwrap_or(usize::MAX)
    };
    rows.sort_by_cached_key(rank);
    rows
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
