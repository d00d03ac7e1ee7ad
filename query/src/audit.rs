//! An inventory of statements: each one's verdict, with how often it ran
//! when it comes from `pg_stat_statements`, and the summary a team plans
//! its rewrite from.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::ControlFlow;

use serde_json::{json, Value};

use crate::analysis::{Analysis, Class};

/// The comment Mezzanine's own statements to PostgreSQL start with, so
/// that an inventory of the app's SQL can leave them out.
pub const OWN_MARK: &str = "/* mezzanine */";

/// Whether `sql` is one of Mezzanine's own statements.
pub fn is_own(sql: &str) -> bool {
    sql.trim_start().starts_with(OWN_MARK)
}

/// A statement's shape: the statement with every value (literal or
/// parameter, a negated number too) made `$0`, as the parser prints it.
/// `pg_stat_statements` counts texts that differ only in their constants
/// (and spacing, case, comments) as one statement, whose text it keeps
/// with `$n` for the constants: that text and each text it counted have
/// the same shape. The proxy counts by shape the writes it forwards and
/// will run through the facade from `primary` on, and the `primary`
/// gate matches them against `pg_stat_statements` by shape
/// (`tripstore::direct_writes`).
pub fn shape(statement: &sqlparser::ast::Statement) -> String {
    use sqlparser::ast::{Expr, UnaryOperator, Value, ValueWithSpan, VisitMut, VisitorMut};
    struct Valueless;
    impl VisitorMut for Valueless {
        type Break = ();
        fn pre_visit_value(&mut self, value: &mut ValueWithSpan) -> ControlFlow<()> {
            value.value = Value::Placeholder("$0".into());
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            // PostgreSQL's parser folds `-5` into one constant.
            if let Expr::UnaryOp {
                op: UnaryOperator::Minus,
                expr: inner,
            } = expr
            {
                if matches!(inner.as_ref(), Expr::Value(_)) {
                    *expr = std::mem::replace(inner.as_mut(), Expr::value(Value::Null));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut statement = statement.clone();
    let _ = statement.visit(&mut Valueless);
    statement.to_string()
}

/// The [`shape`] of `sql`, if it is one statement that parses.
pub fn shape_of(sql: &str) -> Option<String> {
    let statements =
        sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, sql)
            .ok()?;
    match statements.as_slice() {
        [statement] => Some(shape(statement)),
        _ => None,
    }
}

/// The layout table `sql` writes (INSERT, UPDATE, DELETE, MERGE, TRUNCATE
/// or COPY FROM), unless it is one of Mezzanine's own statements. A
/// statement that does not parse writes nothing this can tell.
pub fn direct_write(model: &crate::Model, sql: &str) -> Option<String> {
    use sqlparser::ast::{CopySource, Statement, TableObject};
    if is_own(sql) {
        return None;
    }
    let statements =
        sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, sql)
            .ok()?;
    statements.iter().find_map(|statement| {
        let names: Vec<&sqlparser::ast::ObjectName> = match statement {
            Statement::Insert(insert) => match &insert.table {
                TableObject::TableName(name) => vec![name],
                _ => Vec::new(),
            },
            Statement::Update(update) => match &update.table.relation {
                sqlparser::ast::TableFactor::Table { name, .. } => vec![name],
                _ => Vec::new(),
            },
            Statement::Delete(delete) => {
                let from = match &delete.from {
                    sqlparser::ast::FromTable::WithFromKeyword(t)
                    | sqlparser::ast::FromTable::WithoutKeyword(t) => t,
                };
                from.iter()
                    .filter_map(|t| match &t.relation {
                        sqlparser::ast::TableFactor::Table { name, .. } => Some(name),
                        _ => None,
                    })
                    .chain(delete.tables.iter())
                    .collect()
            }
            Statement::Merge(merge) => match &merge.table {
                sqlparser::ast::TableFactor::Table { name, .. } => vec![name],
                _ => Vec::new(),
            },
            Statement::Truncate(truncate) => truncate.table_names.iter().map(|t| &t.name).collect(),
            Statement::Copy {
                source: CopySource::Table { table_name, .. },
                to: false,
                ..
            } => vec![table_name],
            _ => Vec::new(),
        };
        names
            .into_iter()
            .find_map(|name| model.table(name).map(|t| model.table_name(t).to_string()))
    })
}

/// One statement of the inventory.
#[derive(Clone, Debug)]
pub struct Entry {
    pub analysis: Analysis,
    /// From pg_stat_statements: how many times it ran, and for how long.
    pub calls_count: Option<u64>,
    pub total_ms: Option<f64>,
}

impl Entry {
    pub fn new(analysis: Analysis) -> Entry {
        Entry {
            analysis,
            calls_count: None,
            total_ms: None,
        }
    }

    /// Executions it stands for: its calls, or 1 when read from a file.
    pub fn weight(&self) -> u64 {
        self.calls_count.unwrap_or(1)
    }

    /// The `--json` line of this statement.
    pub fn json(&self) -> Value {
        let a = &self.analysis;
        let mut line = json!({
            "sql": a.sql,
            "class": a.class.as_str(),
            "calls": a.calls(),
            "reason": a.reason,
            "tables": a.tables,
        });
        if let Some(calls) = self.calls_count {
            line["calls_count"] = json!(calls);
        }
        if let Some(ms) = self.total_ms {
            line["total_ms"] = json!(ms);
        }
        line
    }
}

/// Counts per class, and how much of what ran the cell API answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub statements: usize,
    pub per_class: BTreeMap<Class, usize>,
    /// Executions of statements that are not `other` (each statement of a
    /// file counts once).
    pub calls: u64,
    /// Of those, executions of `row`, `index` and `write` statements.
    pub translatable_calls: u64,
}

impl Summary {
    pub fn of(entries: &[Entry]) -> Summary {
        let mut summary = Summary {
            statements: entries.len(),
            ..Summary::default()
        };
        for class in Class::ALL {
            summary.per_class.insert(class, 0);
        }
        for entry in entries {
            let class = entry.analysis.class;
            *summary.per_class.entry(class).or_default() += 1;
            if class != Class::Other {
                summary.calls += entry.weight();
                if class.translatable() {
                    summary.translatable_calls += entry.weight();
                }
            }
        }
        summary
    }

    /// Translatable executions over all executions touching the layout
    /// (unparsed ones included), or `None` when there are none.
    pub fn translatable_share(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.translatable_calls as f64 / self.calls as f64)
    }

    /// The last `--json` line.
    pub fn json(&self) -> Value {
        json!({ "summary": self.figures() })
    }

    /// The figures themselves: statements, calls, the translatable calls
    /// and share, and the statements of each class by its name.
    pub fn figures(&self) -> Value {
        let mut summary = json!({
            "statements": self.statements,
            "calls": self.calls,
            "translatable_calls": self.translatable_calls,
            "translatable_share": self.translatable_share(),
        });
        for (class, n) in &self.per_class {
            summary[class.as_str()] = json!(n);
        }
        summary
    }
}

/// The human-readable report: each statement with its class and calls or
/// reason, then the summary.
pub fn report(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        let a = &entry.analysis;
        let mut head = format!("[{}] {}", a.class, one_line(&a.sql, 160));
        if let (Some(calls), Some(ms)) = (entry.calls_count, entry.total_ms) {
            let _ = write!(head, "  ({calls} calls, {ms:.1} ms)");
        }
        let _ = writeln!(out, "{head}");
        for call in a.calls() {
            let _ = writeln!(out, "    {call}");
        }
        if let Some(reason) = &a.reason {
            let _ = writeln!(out, "    why: {reason}");
        }
    }
    let summary = Summary::of(entries);
    let counts: Vec<String> = summary
        .per_class
        .iter()
        .map(|(class, n)| format!("{class} {n}"))
        .collect();
    let _ = write!(
        out,
        "{} statements: {}",
        summary.statements,
        counts.join(", ")
    );
    match summary.translatable_share() {
        Some(share) => {
            let _ = writeln!(
                out,
                "; {:.1}% of {} calls touching the layout are translatable",
                share * 100.0,
                summary.calls
            );
        }
        None => {
            let _ = writeln!(out, "; none touches the layout");
        }
    }
    out
}

/// The statement on one line, cut at `max` characters.
pub fn one_line(sql: &str, max: usize) -> String {
    let flat: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_pg_stat_statements_counts_as_one_have_one_shape() {
        // What the app sent, and the text pg_stat_statements keeps for it.
        let same = [
            (
                "INSERT INTO trips (uuid, city_id, fare, status) VALUES ('8c1e…', -7, 12.5, NULL)",
                "insert into trips (uuid, city_id, fare, status) values ($1, $2, $3, $4)",
            ),
            (
                "UPDATE trips SET status = 'done', version = version + 1 \
                 WHERE uuid = '8c1e'::uuid AND paid = true",
                "UPDATE trips  SET status = $1, version = version + $2 /* a comment */\n\
                 WHERE uuid = $3::uuid AND paid = $4",
            ),
            (
                "DELETE FROM trips WHERE uuid = ANY($1) LIMIT 10",
                "DELETE FROM trips WHERE uuid = ANY($1) LIMIT $2",
            ),
        ];
        for (sent, kept) in same {
            assert_eq!(shape_of(sent), shape_of(kept), "{sent}");
            assert!(shape_of(sent).is_some());
        }
        // Another statement, or another number of rows, is another shape.
        let base = shape_of("INSERT INTO trips (uuid) VALUES ($1)");
        for other in [
            "INSERT INTO trips (uuid) VALUES ($1), ($2)",
            "INSERT INTO trips (uuid, fare) VALUES ($1, $2)",
            "INSERT INTO trips (uuid) VALUES ($1::uuid)",
            "INSERT INTO trip_notes (uuid) VALUES ($1)",
        ] {
            assert_ne!(shape_of(other), base, "{other}");
        }
        assert_eq!(shape_of("SELECT 1; SELECT 2"), None);
        assert_eq!(shape_of("INSERT INTO"), None);
    }
}
