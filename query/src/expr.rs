//! The pieces of a statement the rules look at: the tables in scope, a
//! column reference resolved to where the layout keeps it, and a WHERE
//! clause cut into conditions.

use std::collections::HashSet;
use std::ops::ControlFlow;

use schemaless::FilterOp;
use sqlparser::ast::{
    visit_expressions, visit_expressions_mut, BinaryOperator, Expr, FunctionArg, FunctionArguments,
    Ident, InTarget, ObjectName, TableFactor, UnaryOperator,
};

use crate::model::{folded, Model, Source, Table};

/// A table in the statement's scope, by the name the statement calls it.
#[derive(Clone, Debug)]
pub struct Scoped {
    /// Its alias, or its own (last) name.
    pub alias: String,
    /// The layout table, or `None` for a table outside the layout.
    pub table: Option<Table>,
    /// The name as written.
    pub written: String,
}

/// The tables of a FROM clause (or an UPDATE's target).
#[derive(Clone, Debug, Default)]
pub struct Scope {
    pub tables: Vec<Scoped>,
}

/// A column reference resolved through the scope and the layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Col {
    /// Index into [`Scope::tables`].
    pub at: usize,
    /// The SQL column name.
    pub name: String,
    /// Where the layout keeps it.
    pub source: Source,
}

impl Scope {
    /// Adds a table factor; `Err` names what is not a plain table.
    pub fn add(&mut self, model: &Model, factor: &TableFactor) -> Result<(), String> {
        let TableFactor::Table {
            name,
            alias,
            sample,
            args,
            ..
        } = factor
        else {
            return Err(format!("a derived table or function in FROM ({factor})"));
        };
        if sample.is_some() {
            return Err(format!(
                "TABLESAMPLE on {name}: a sample of the rows, which PostgreSQL draws anew \
                 each time; the cell API reads every row asked for"
            ));
        }
        if args.is_some() {
            return Err(format!("a function in FROM ({factor})"));
        }
        if let Some(a) = alias.as_ref().filter(|a| !a.columns.is_empty()) {
            return Err(format!(
                "{factor} gives the table's columns other names (in alias {}): use the \
                 table's own names",
                a.name
            ));
        }
        let table = model.table(name);
        let alias = match alias {
            Some(a) => folded(&a.name),
            None => last_name(name),
        };
        self.tables.push(Scoped {
            alias,
            table,
            written: name.to_string(),
        });
        Ok(())
    }

    /// The layout table of entry `at`.
    pub fn table(&self, at: usize) -> Option<Table> {
        self.tables.get(at).and_then(|t| t.table)
    }

    /// `alias.column` as written, for reasons.
    pub fn show(&self, col: &Col) -> String {
        format!("{}.{}", self.tables[col.at].alias, col.name)
    }

    /// Resolves a column reference (through parentheses, not casts).
    /// `Ok(None)`: not a column reference; `Err`: a column the scope
    /// cannot place.
    ///
    /// A cast makes another value of the column: `requested_at::date`
    /// selected is a date (served as the column, it came back a
    /// timestamp), `uuid::text = $1` compares text (an upper-case UUID
    /// matches no row in PostgreSQL, and was read as the row key). So a
    /// cast column is an expression, which the translator computes
    /// nowhere: the statement is forwarded (or refused where forwarding
    /// is not allowed). A cast of a value (`$1::uuid`) is still a value.
    pub fn column(&self, model: &Model, expr: &Expr) -> Result<Option<Col>, String> {
        match unnested(expr) {
            Expr::Identifier(ident) => {
                let name = folded(ident);
                let known: Vec<usize> = (0..self.tables.len())
                    .filter(|&at| match self.tables[at].table {
                        Some(table) => model.source(table, &name) != Source::Unmapped,
                        None => false,
                    })
                    .collect();
                let at = match (known.as_slice(), self.tables.len()) {
                    ([at], _) => *at,
                    (_, 1) => 0,
                    ([], _) => {
                        return Err(format!(
                        "column {name} is in none of the layout's tables as the layout maps them"
                    ))
                    }
                    _ => return Err(format!("column {name} is ambiguous; qualify it")),
                };
                Ok(Some(self.col(model, at, name)))
            }
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let name = folded(&parts[parts.len() - 1]);
                let qualifier = folded(&parts[parts.len() - 2]);
                let Some(at) = self.tables.iter().position(|t| t.alias == qualifier) else {
                    return Err(format!(
                        "{qualifier}.{name} names no table of the statement"
                    ));
                };
                Ok(Some(self.col(model, at, name)))
            }
            _ => Ok(None),
        }
    }

    fn col(&self, model: &Model, at: usize, name: String) -> Col {
        let source = match self.tables[at].table {
            Some(table) => model.source(table, &name),
            None => Source::Unmapped,
        };
        Col { at, name, source }
    }
}

/// The last part of a qualified name, folded.
pub fn last_name(name: &ObjectName) -> String {
    match name.0.last() {
        Some(sqlparser::ast::ObjectNamePart::Identifier(i)) => folded(i),
        _ => name.to_string(),
    }
}

/// The expression without enclosing parentheses.
pub fn unnested(expr: &Expr) -> &Expr {
    match expr {
        Expr::Nested(inner) => unnested(inner),
        other => other,
    }
}

/// The expression without enclosing parentheses and casts.
pub fn strip(expr: &Expr) -> &Expr {
    match expr {
        Expr::Nested(inner) => strip(inner),
        Expr::Cast { expr, .. } => strip(expr),
        other => other,
    }
}

/// Whether `expr` is a value for the statement: it reads no column and
/// runs no subquery (a parameter, a literal, a cast of one, `now()`), so
/// the app can compute it before calling the cell API.
pub fn is_value(expr: &Expr) -> bool {
    let names = argument_names(expr);
    visit_expressions(expr, |e| match e {
        _ if names.contains(&(e as *const Expr)) => ControlFlow::Continue(()),
        Expr::Identifier(_)
        | Expr::CompoundIdentifier(_)
        | Expr::CompoundFieldAccess { .. }
        | Expr::Subquery(_)
        | Expr::Exists { .. }
        | Expr::In {
            target: InTarget::Subquery(_),
            ..
        } => ControlFlow::Break(()),
        Expr::Function(f) if is_aggregate(&f.name) || f.over.is_some() => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_continue()
}

/// The names of the columns `expr` reads (each identifier's last part,
/// folded as PostgreSQL folds it), in order; a function's argument names
/// are not columns.
pub fn column_names_in(expr: &Expr) -> Vec<String> {
    let names = argument_names(expr);
    let mut columns = Vec::new();
    let _ = visit_expressions(expr, |e| {
        if !names.contains(&(e as *const Expr)) {
            match e {
                Expr::Identifier(i) => columns.push(folded(i)),
                Expr::CompoundIdentifier(parts) => {
                    columns.extend(parts.last().map(folded));
                }
                _ => {}
            }
        }
        ControlFlow::<()>::Continue(())
    });
    columns
}

/// The expressions in `expr` that name a function's arguments (`secs` in
/// `make_interval(secs => 5)`): sqlparser keeps them as expressions, so a
/// walk over the tree meets them as identifiers, but they are words of
/// the call, never columns. Known by address, to be skipped in such walks.
fn argument_names(expr: &Expr) -> HashSet<*const Expr> {
    let mut names = HashSet::new();
    let _ = visit_expressions(expr, |e| {
        if let Expr::Function(f) = e {
            if let FunctionArguments::List(list) = &f.args {
                for arg in &list.args {
                    if let FunctionArg::ExprNamed { name, .. } = arg {
                        names.insert(name as *const Expr);
                    }
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    names
}

/// Whether `name` is one of PostgreSQL's aggregate functions.
pub fn is_aggregate(name: &ObjectName) -> bool {
    const AGGREGATES: &[&str] = &[
        "count",
        "sum",
        "avg",
        "min",
        "max",
        "array_agg",
        "string_agg",
        "json_agg",
        "jsonb_agg",
        "json_object_agg",
        "jsonb_object_agg",
        "bool_and",
        "bool_or",
        "every",
        "bit_and",
        "bit_or",
        "stddev",
        "stddev_pop",
        "stddev_samp",
        "variance",
        "var_pop",
        "var_samp",
        "percentile_cont",
        "percentile_disc",
        "mode",
    ];
    AGGREGATES.contains(&last_name(name).as_str())
}

/// The first aggregate or window call in `expr`, as written.
pub fn aggregate_in(expr: &Expr) -> Option<String> {
    let found = visit_expressions(expr, |e| match e {
        Expr::Function(f) if is_aggregate(&f.name) || f.over.is_some() => {
            ControlFlow::Break(e.to_string())
        }
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Break(text) => Some(text),
        ControlFlow::Continue(()) => None,
    }
}

/// The first subquery in `expr`, as written.
pub fn subquery_in(expr: &Expr) -> Option<String> {
    let found = visit_expressions(expr, |e| match e {
        Expr::Subquery(_)
        | Expr::Exists { .. }
        | Expr::In {
            target: InTarget::Subquery(_),
            ..
        } => ControlFlow::Break(e.to_string()),
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Break(text) => Some(text),
        ControlFlow::Continue(()) => None,
    }
}

/// The conditions joined by AND.
pub fn conjuncts(expr: &Expr) -> Vec<&Expr> {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut all = conjuncts(left);
            all.extend(conjuncts(right));
            all
        }
        Expr::Nested(inner) => conjuncts(inner),
        other => vec![other],
    }
}

/// One condition, as the cell API could use it.
#[derive(Clone, Debug)]
pub enum Cond<'a> {
    /// `col op value` (either way round).
    Cmp {
        col: Col,
        op: FilterOp,
        value: &'a Expr,
    },
    /// `col IN (v, ...)`.
    InList { col: Col, values: Vec<&'a Expr> },
    /// `col = ANY(array)`.
    Any { col: Col, array: &'a Expr },
    /// `col BETWEEN low AND high`.
    Between {
        col: Col,
        low: &'a Expr,
        high: &'a Expr,
    },
    /// `a.x = b.y`: a join condition.
    Link { left: Col, right: Col },
    /// Anything else, with the columns it reads.
    Other { cols: Vec<Col> },
}

impl Cond<'_> {
    /// The columns the condition reads.
    pub fn cols(&self) -> Vec<&Col> {
        match self {
            Cond::Cmp { col, .. }
            | Cond::InList { col, .. }
            | Cond::Any { col, .. }
            | Cond::Between { col, .. } => vec![col],
            Cond::Link { left, right } => vec![left, right],
            Cond::Other { cols } => cols.iter().collect(),
        }
    }
}

/// Reads one condition; `Err` names a column the scope cannot place.
pub fn cond<'a>(scope: &Scope, model: &Model, expr: &'a Expr) -> Result<Cond<'a>, String> {
    let column = |e: &Expr| scope.column(model, e);
    match strip(expr) {
        Expr::BinaryOp { left, op, right } => {
            if let Some(op) = filter_op(op) {
                match (column(left)?, column(right)?) {
                    (Some(l), Some(r)) if op == FilterOp::Eq => {
                        return Ok(Cond::Link { left: l, right: r })
                    }
                    (Some(col), None) if is_value(right) => {
                        return Ok(Cond::Cmp {
                            col,
                            op,
                            value: right,
                        })
                    }
                    (None, Some(col)) if is_value(left) => {
                        return Ok(Cond::Cmp {
                            col,
                            op: flipped(op),
                            value: left,
                        })
                    }
                    _ => {}
                }
            }
        }
        Expr::In {
            expr,
            target: InTarget::List(list),
            negated: false,
            ..
        } if list.iter().all(is_value) => {
            if let Some(col) = column(expr)? {
                return Ok(Cond::InList {
                    col,
                    values: list.iter().collect(),
                });
            }
        }
        Expr::AnyOp {
            left,
            compare_op: BinaryOperator::Eq,
            right,
            ..
        } if is_value(right) => {
            if let Some(col) = column(left)? {
                return Ok(Cond::Any { col, array: right });
            }
        }
        Expr::Between {
            expr,
            negated: false,
            low,
            high,
        } if is_value(low) && is_value(high) => {
            if let Some(col) = column(expr)? {
                return Ok(Cond::Between { col, low, high });
            }
        }
        _ => {}
    }
    Ok(Cond::Other {
        cols: columns_in(scope, model, expr)?,
    })
}

/// `expr` with each column it reads replaced by a placeholder numbered
/// from `first`, and those columns in placeholder order: the condition as
/// it can be evaluated over rows that hold the columns' values under other
/// names ([`fill_columns`]). A column read twice is two placeholders.
pub fn over_columns(
    scope: &Scope,
    model: &Model,
    expr: &Expr,
    first: usize,
) -> Result<(Expr, Vec<Col>), String> {
    let mut rewritten = expr.clone();
    let names = argument_names(&rewritten);
    let mut cols = Vec::new();
    let mut failed = None;
    let _ = visit_expressions_mut(&mut rewritten, |e| {
        if matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
            && !names.contains(&(e as *const Expr))
        {
            match scope.column(model, e) {
                Ok(Some(col)) => {
                    *e = Expr::Identifier(Ident::with_quote(
                        '"',
                        format!("{PLACEHOLDER}{}", first + cols.len()),
                    ));
                    cols.push(col);
                }
                Ok(None) => {}
                Err(why) => {
                    failed = Some(why);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    });
    match failed {
        Some(why) => Err(why),
        None => Ok((rewritten, cols)),
    }
}

/// What names the k-th column of an [`over_columns`] condition: not a
/// name a statement could hold (a control character).
const PLACEHOLDER: &str = "\u{1}mezzanine column ";

/// An [`over_columns`] condition with its k-th column replaced by
/// `column(k)`.
pub fn fill_columns(expr: &Expr, column: impl Fn(usize) -> Expr) -> Expr {
    let mut filled = expr.clone();
    let _ = visit_expressions_mut(&mut filled, |e| {
        if let Expr::Identifier(ident) = e {
            if let Some(k) = ident
                .value
                .strip_prefix(PLACEHOLDER)
                .and_then(|k| k.parse::<usize>().ok())
            {
                *e = column(k);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    filled
}

/// Every column `expr` reads.
pub fn columns_in(scope: &Scope, model: &Model, expr: &Expr) -> Result<Vec<Col>, String> {
    over_columns(scope, model, expr, 0).map(|(_, cols)| cols)
}

fn filter_op(op: &BinaryOperator) -> Option<FilterOp> {
    Some(match op {
        BinaryOperator::Eq => FilterOp::Eq,
        BinaryOperator::Lt => FilterOp::Lt,
        BinaryOperator::LtEq => FilterOp::Le,
        BinaryOperator::Gt => FilterOp::Gt,
        BinaryOperator::GtEq => FilterOp::Ge,
        _ => return None,
    })
}

fn flipped(op: FilterOp) -> FilterOp {
    match op {
        FilterOp::Lt => FilterOp::Gt,
        FilterOp::Le => FilterOp::Ge,
        FilterOp::Gt => FilterOp::Lt,
        FilterOp::Ge => FilterOp::Le,
        other => other,
    }
}

/// `=`, `<`, ... as SQL writes them.
pub fn op_text(op: FilterOp) -> &'static str {
    match op {
        FilterOp::Eq => "=",
        FilterOp::Lt => "<",
        FilterOp::Le => "<=",
        FilterOp::Gt => ">",
        FilterOp::Ge => ">=",
        FilterOp::In => "in",
    }
}

/// A value as the calls show it: without casts (`$1::uuid` is `$1`).
pub fn value_text(expr: &Expr) -> String {
    match expr {
        Expr::Nested(inner) => value_text(inner),
        Expr::Cast { expr, .. } => value_text(expr),
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => format!("-{}", value_text(expr)),
        other => other.to_string(),
    }
}
