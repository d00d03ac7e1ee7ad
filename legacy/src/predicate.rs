//! Which parents a partial backfill (or full diff) covers: a subset of the
//! layout's columns and a predicate on the parent table.
//!
//! A predicate is SQL a person typed (`--where "city_id = 7"`), pasted into
//! the scan's `WHERE`. So it is parsed with sqlparser (PostgreSQL dialect)
//! and refused unless it is an expression that only reads columns of the
//! parent table: literals, those columns, operators, `CASE`, casts, `IN`
//! lists, `BETWEEN`, `LIKE`, and a short list of functions without side
//! effects. Subqueries, other tables, and every other function are refused
//! (a function may write, sleep or read what the scan must not). What is
//! pasted is sqlparser's rendering of the checked tree, with every column
//! qualified by the scan's alias, never the text as typed.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    visit_expressions, visit_expressions_mut, Expr, FunctionArguments, Ident, InTarget, ObjectName,
    ObjectNamePart,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

/// Functions a predicate may call: deterministic or merely time-reading,
/// and without side effects.
const PURE_FUNCTIONS: &[&str] = &[
    "abs",
    "btrim",
    "ceil",
    "ceiling",
    "char_length",
    "coalesce",
    "concat",
    "current_date",
    "current_timestamp",
    "date_part",
    "date_trunc",
    "floor",
    "greatest",
    "least",
    "left",
    "length",
    "lower",
    "ltrim",
    "md5",
    "now",
    "nullif",
    "right",
    "round",
    "rtrim",
    "substr",
    "trunc",
    "upper",
];

/// A checked predicate on the parent table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Predicate {
    /// The expression as sqlparser renders it, columns unqualified: what
    /// plans store and show.
    text: String,
    /// The same, every column qualified as `p."column"`: what the scan
    /// pastes.
    sql: String,
}

impl Predicate {
    /// Parses and checks `text` against the parent table `table` and its
    /// `columns` (their names as PostgreSQL has them).
    pub fn parse(text: &str, table: &str, columns: &[String]) -> Result<Predicate, String> {
        let dialect = PostgreSqlDialect {};
        let mut parser = Parser::new(&dialect)
            .try_with_sql(text)
            .map_err(|e| format!("the predicate does not parse: {e}"))?;
        let mut expr = parser
            .parse_expr()
            .map_err(|e| format!("the predicate does not parse: {e}"))?;
        let rest = parser.peek_token();
        if rest.token != Token::EOF {
            return Err(format!(
                "the predicate is one expression; {} follows it",
                rest.token
            ));
        }
        let known: BTreeSet<&str> = columns.iter().map(String::as_str).collect();
        let refusal = visit_expressions(&expr, |e| match allowed(e, table, &known) {
            Ok(()) => ControlFlow::Continue(()),
            Err(why) => ControlFlow::Break(why),
        });
        if let ControlFlow::Break(why) = refusal {
            return Err(why);
        }
        let text = expr.to_string();
        let _ = visit_expressions_mut(&mut expr, |e| {
            if let Some(column) = column_of(e) {
                *e =
                    Expr::CompoundIdentifier(vec![Ident::new("p"), Ident::with_quote('"', column)]);
            }
            ControlFlow::<()>::Continue(())
        });
        Ok(Predicate {
            text,
            sql: expr.to_string(),
        })
    }

    /// The predicate as stored and shown.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The predicate with its columns qualified by the parent alias `p`.
    pub fn sql(&self) -> &str {
        &self.sql
    }
}

/// An identifier's name as PostgreSQL resolves it: unquoted folds to
/// lower case.
fn resolved(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The parent column `e` names, if it is a column reference.
fn column_of(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(ident) => Some(resolved(ident)),
        Expr::CompoundIdentifier(parts) => parts.last().map(resolved),
        _ => None,
    }
}

fn function_name(name: &ObjectName) -> Option<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] => Some(resolved(ident)),
        _ => None,
    }
}

/// Whether one node of the tree may appear (its children are visited on
/// their own).
fn allowed(e: &Expr, table: &str, columns: &BTreeSet<&str>) -> Result<(), String> {
    match e {
        Expr::Identifier(ident) => {
            let name = resolved(ident);
            if columns.contains(name.as_str()) {
                Ok(())
            } else {
                Err(format!(
                    "{name:?} is not a column of the parent table {table} (its columns: {})",
                    columns.iter().copied().collect::<Vec<_>>().join(", ")
                ))
            }
        }
        Expr::CompoundIdentifier(parts) => {
            let (column, qualifier) = parts.split_last().expect("a compound has parts");
            let owner = qualifier.last().map(resolved);
            if owner.as_deref() != Some(table.rsplit('.').next().unwrap_or(table)) {
                return Err(format!(
                    "{e} reads another table: a predicate reads only the parent table {table}"
                ));
            }
            allowed(&Expr::Identifier(column.clone()), table, columns)
        }
        Expr::Value(_)
        | Expr::TypedString(_)
        | Expr::Interval(_)
        | Expr::Nested(_)
        | Expr::BinaryOp { .. }
        | Expr::UnaryOp { .. }
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsNotTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotFalse(_)
        | Expr::IsUnknown(_)
        | Expr::IsNotUnknown(_)
        | Expr::IsDistinctFrom(..)
        | Expr::IsNotDistinctFrom(..)
        | Expr::Between { .. }
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::Cast { .. }
        | Expr::AtTimeZone { .. }
        | Expr::Extract { .. }
        | Expr::Ceil { .. }
        | Expr::Floor { .. }
        | Expr::Substring { .. }
        | Expr::Trim { .. }
        | Expr::Position { .. }
        | Expr::Case { .. } => Ok(()),
        Expr::In {
            target: InTarget::List(_),
            ..
        } => Ok(()),
        Expr::Function(f) => {
            let name = function_name(&f.name).unwrap_or_else(|| f.name.to_string());
            if !PURE_FUNCTIONS.contains(&name.as_str()) {
                return Err(format!(
                    "function {name} is not allowed in a predicate (it may have side effects or read other tables); allowed: {}",
                    PURE_FUNCTIONS.join(", ")
                ));
            }
            let plain = matches!(f.args, FunctionArguments::None | FunctionArguments::List(_))
                && matches!(f.parameters, FunctionArguments::None)
                && f.over.is_none()
                && f.filter.is_none()
                && f.within_group.is_empty();
            if plain {
                Ok(())
            } else {
                Err(format!(
                    "{e}: a function in a predicate takes plain arguments (no subquery, window or filter)"
                ))
            }
        }
        Expr::Subquery(_)
        | Expr::Exists { .. }
        | Expr::In { .. }
        | Expr::AnyOp { .. }
        | Expr::AllOp { .. } => Err(format!(
            "{e}: a subquery is not allowed in a predicate, which reads only the parent table {table}"
        )),
        other => Err(format!("{other} is not allowed in a predicate")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Vec<String> {
        ["id", "city_id", "status", "requested_at", "Mixed"]
            .iter()
            .map(|c| c.to_string())
            .collect()
    }

    fn parse(text: &str) -> Result<Predicate, String> {
        Predicate::parse(text, "public.trips", &columns())
    }

    #[test]
    fn parent_columns_are_qualified_and_the_rest_is_kept() {
        let p = parse(
            "city_id IN (1, 2) AND lower(status) LIKE 'comp%' AND trips.id BETWEEN 10 AND 20",
        )
        .unwrap();
        assert_eq!(
            p.text(),
            "city_id IN (1, 2) AND lower(status) LIKE 'comp%' AND trips.id BETWEEN 10 AND 20"
        );
        assert_eq!(
            p.sql(),
            r#"p."city_id" IN (1, 2) AND lower(p."status") LIKE 'comp%' AND p."id" BETWEEN 10 AND 20"#
        );
        let p =
            parse(r#"requested_at >= now() - INTERVAL '7 days' AND "Mixed" IS NOT NULL"#).unwrap();
        assert!(
            p.sql().contains(r#"p."requested_at" >= now()"#),
            "{}",
            p.sql()
        );
        assert!(p.sql().contains(r#"p."Mixed" IS NOT NULL"#), "{}", p.sql());
    }

    #[test]
    fn subqueries_other_tables_and_side_effects_are_refused() {
        for (text, why) in [
            ("id IN (SELECT trip_id FROM trip_notes)", "subquery"),
            ("EXISTS (SELECT 1)", "subquery"),
            ("city_id = (SELECT 1)", "subquery"),
            ("id = ANY(SELECT 1)", "subquery"),
            ("nextval('s') > 0", "function nextval"),
            ("pg_sleep(10) IS NULL", "function pg_sleep"),
            ("set_config('a', 'b', false) = 'b'", "function set_config"),
            ("notes.author = 'x'", "another table"),
            ("driver_name = 'x'", "not a column"),
            ("mixed = 1", "not a column"),
            ("lower((SELECT 'x')) = 'x'", "subquery"),
            ("count(*) OVER () > 1", "function count"),
            ("city_id = 1; DROP TABLE trips", "one expression"),
            ("city_id =", "does not parse"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
