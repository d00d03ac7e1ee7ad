//! INSERT, UPDATE and DELETE: `put_cell`s by row key (a DELETE's is a
//! tombstone), or the reason they are not.
//!
//! Its rooms: `insert`, `update` and `delete`; this file holds what they
//! share (rows named by key, RETURNING, values shown in reasons, readable
//! columns).

use sqlparser::ast::{
    AssignmentTarget, ConflictTarget, Delete, Expr, FromTable, Insert, ObjectName,
    OnConflictAction, OnInsert, Query, SelectItem, SetExpr, TableObject, Update,
};

use crate::expr::{
    column_names_in, cond, conjuncts, is_value, strip, subquery_in, value_text, Col, Cond, Scope,
};
use crate::model::{folded, Model, Source, Table};
use crate::plan::{Inserted, Keys, OnConflict, Plan, Put, Rows, Write};

mod delete;
mod insert;
mod update;

pub use delete::delete;
pub use insert::insert;
pub use update::update;

/// How the reason of a write PostgreSQL itself refuses before it runs
/// begins (an error of parse analysis: more values than columns, VALUES
/// rows of different lengths, a column listed or assigned twice): the
/// proxy forwards such a statement in every mode, so the app gets
/// PostgreSQL's own error, and nothing is written either way.
pub const REFUSED_BY_POSTGRES: &str = "PostgreSQL refuses it (";

/// The reason of a write PostgreSQL refuses before it runs, with the
/// SQLSTATE it raises ([`REFUSED_BY_POSTGRES`]).
fn refused_by_postgres(sqlstate: &str, why: impl std::fmt::Display) -> String {
    format!("{REFUSED_BY_POSTGRES}{sqlstate}): {why}")
}

/// Refuses, as PostgreSQL does, a SET that assigns a column twice
/// (`SET a = 1, a = 2`, an UPDATE's or a DO UPDATE's): translated, one
/// of the two values was written and the other dropped.
fn assigned_once(assignments: &[sqlparser::ast::Assignment]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for a in assignments {
        if let AssignmentTarget::ColumnName(target) = &a.target {
            let column = last(target);
            if !seen.insert(column.clone()) {
                return Err(refused_by_postgres(
                    "42601",
                    format!("multiple assignments to same column \"{column}\""),
                ));
            }
        }
    }
    Ok(())
}

/// `node` (a write statement) with each column reference qualified by
/// its table's schema-qualified name (`"billing"."Accounts"."ext_id"`,
/// as Prisma writes every one) qualified by the table's own name
/// instead: the runner evaluates SET, WHERE and RETURNING over rows
/// named so, where PostgreSQL could not resolve the schema, and before,
/// the answer failed after the cells were put (the app was told the
/// write failed). PostgreSQL resolves both to the one table. `None`
/// (nothing to rewrite) where the statement names the table without its
/// schema, or gives it an alias (which PostgreSQL then requires).
fn unqualified<T: sqlparser::ast::VisitMut + Clone>(
    node: &T,
    table: &ObjectName,
    aliased: bool,
) -> Option<T> {
    let named: Vec<String> = table
        .0
        .iter()
        .filter_map(|part| part.as_ident().map(folded))
        .collect();
    if aliased || named.len() < 2 || named.len() != table.0.len() {
        return None;
    }
    let mut node = node.clone();
    let _ = sqlparser::ast::visit_expressions_mut(&mut node, |e| {
        if let Expr::CompoundIdentifier(parts) = e {
            let n = named.len();
            if parts.len() == n + 1 && parts[..n].iter().map(folded).eq(named.iter().cloned()) {
                *parts = parts[n - 1..].to_vec();
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    Some(node)
}

/// The rows an UPDATE's or DELETE's WHERE names by row key (`uuid = $1`,
/// `IN (...)`, `= ANY($1)`), its other conditions (on the latest cells),
/// and those as the calls show them; or why the statement writes by
/// something else.
fn by_row_key(
    model: &Model,
    scope: &Scope,
    selection: Option<&Expr>,
    verb: &str,
) -> Result<(Keys, Vec<Expr>, Vec<String>), String> {
    let written = &scope.tables[0].written;
    let Some(selection) = selection else {
        return Err(format!(
            "writes every row of {written}: a write by a non-key predicate; find the rows \
             first (an index query) and write each by its UUID"
        ));
    };
    let mut key = None;
    let mut others = Vec::new();
    for e in conjuncts(selection) {
        if let Some(sub) = crate::expr::subquery_in(e) {
            return Err(format!("subquery {sub} in {verb}'s WHERE: run it first"));
        }
        let c = cond(scope, model, e)?;
        let by_row_key = match &c {
            Cond::Cmp {
                col,
                op: schemaless::FilterOp::Eq,
                value,
            } if col.source == Source::RowKey => Some(Keys::One((*value).clone())),
            Cond::InList { col, values } if col.source == Source::RowKey => {
                Some(Keys::List(values.iter().map(|v| (*v).clone()).collect()))
            }
            Cond::Any { col, array } if col.source == Source::RowKey => {
                Some(Keys::Array((*array).clone()))
            }
            _ => None,
        };
        match by_row_key {
            Some(rows) if key.is_none() => key = Some(rows),
            _ => others.push((e, c)),
        }
    }
    // No row key: the parent's integer id names the rows as well, through
    // PostgreSQL's own mapping of ids to UUIDs.
    if key.is_none() && scope.table(0) == Some(Table::Parent) {
        if let Some(at) = others.iter().position(|(_, c)| by_id(model, c).is_some()) {
            let (_, c) = others.remove(at);
            key = by_id(model, &c);
        }
    }
    let Some(keys) = key else {
        let by_id = others.iter().find_map(|(_, c)| {
            c.cols()
                .into_iter()
                .find(|col| col.source == Source::IntegerId)
                .cloned()
        });
        return Err(match by_id {
            Some(col) => format!(
                "writes by {}, the integer id: rewrite it to the UUID {} (the row key)",
                scope.show(&col),
                model.layout.uuid
            ),
            None => format!(
                "a write by a non-key predicate ({selection}): find the rows first (an index \
                 query), then write each by its UUID {}",
                model.layout.uuid
            ),
        });
    };
    let mut checks = Vec::new();
    for (e, c) in &others {
        for col in c.cols() {
            unreadable(model, scope, col)?;
        }
        checks.push(format!("check in the app: {e}"));
    }
    Ok((
        keys,
        others.into_iter().map(|(e, _)| e.clone()).collect(),
        checks,
    ))
}

/// The rows a condition on the parent's integer id names (`id = v`,
/// `id IN (...)`, `id = ANY(v)`, each `v` a value), as keys PostgreSQL
/// evaluates ([`uuid_of_id`]).
fn by_id(model: &Model, c: &Cond) -> Option<Keys> {
    let plain = |v: &Expr| subquery_in(v).is_none();
    match c {
        Cond::Cmp {
            col,
            op: schemaless::FilterOp::Eq,
            value,
        } if col.source == Source::IntegerId && plain(value) => {
            uuid_of_id(model, value, false).map(Keys::One)
        }
        Cond::InList { col, values }
            if col.source == Source::IntegerId && values.iter().all(|v| plain(v)) =>
        {
            values
                .iter()
                .map(|v| uuid_of_id(model, v, false))
                .collect::<Option<Vec<Expr>>>()
                .map(Keys::List)
        }
        Cond::Any { col, array } if col.source == Source::IntegerId && plain(array) => {
            uuid_of_id(model, array, true).map(Keys::Array)
        }
        _ => None,
    }
}

/// The parent's UUID for integer id `id` (`any`: every UUID for an array
/// of ids), as PostgreSQL maps them: `(SELECT uuid FROM parent WHERE id =
/// $1)`. In every mode the mapping holds: an id is the row's for life,
/// and a row has one only once it is in PostgreSQL (in `primary`, once
/// the reverse mirror applied it), so an id an app knows is there; a
/// row deleted since has no cells to write, and the statement counts 0
/// rows, as PostgreSQL would.
pub(crate) fn uuid_of_id(model: &Model, id: &Expr, any: bool) -> Option<Expr> {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let layout = &model.layout;
    let table = format!("{}.{}", quote(&layout.schema), quote(&layout.table));
    let of = if any {
        format!("ANY({id})")
    } else {
        id.to_string()
    };
    let select = format!(
        "SELECT {} FROM {table} WHERE {} = {of}",
        quote(&layout.uuid),
        quote(&layout.id),
    );
    // An id the proxy answered an INSERT's RETURNING with, whose row the
    // reverse mirror has not inserted yet (the same transaction that
    // inserts it ends the reservation, so one snapshot finds an id in
    // one place).
    let reserved = format!(
        "SELECT row_key FROM mezzanine.row_ids WHERE parent = '{}'::regclass AND id = {of}",
        table.replace('\'', "''")
    );
    let text = if any {
        format!("ARRAY({select} UNION {reserved})")
    } else {
        format!("COALESCE(({select}), ({reserved}))")
    };
    sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

/// Where the integer ids of a write's parent rows come from, for its
/// RETURNING (no cell holds them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ids {
    /// A parent INSERT that updates no existing row: the runner draws
    /// each row's id and reserves it for the row (`mezzanine.row_ids`),
    /// which the reverse mirror inserts under it.
    Reserved,
    /// A parent UPDATE or DELETE by row key: each existing row's id, as
    /// the legacy table has it or, for a row the reverse mirror has not
    /// inserted yet, as its reservation says (ids never change).
    Existing,
    /// A parent upsert: a row inserted is [`Ids::Reserved`], one that
    /// exists keeps its own ([`Ids::Existing`]), read as its DO UPDATE
    /// is evaluated.
    Upserted,
    /// A child table's key to its parent, of a child INSERT or DELETE:
    /// the parent's own id, read as [`Ids::Existing`] is (Prisma's
    /// `create` of a child row returns every column, the key included).
    Parent,
}

/// RETURNING may name only what the cells hold, and the parent's integer
/// id where `ids` says where it comes from. Whether it names the id.
fn check_returning(
    model: &Model,
    table: Table,
    name: &ObjectName,
    returning: Option<&[SelectItem]>,
    ids: Ids,
) -> Result<bool, String> {
    let has_ids = match ids {
        Ids::Parent => matches!(table, Table::Child(_)),
        Ids::Reserved | Ids::Existing | Ids::Upserted => table == Table::Parent,
    };
    let mut names_id = false;
    for item in returning.unwrap_or_default() {
        let expr = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            // `RETURNING *` of a parent INSERT (pgjdbc's
            // `RETURN_GENERATED_KEYS`), UPDATE or DELETE (Prisma's): every
            // column, in the catalog's order, each held by the cells or
            // the row's id.
            _ if has_ids => {
                let Some(order) = model.column_order(table) else {
                    return Err(format!(
                        "RETURNING * returns the columns of {name} in the order of the \
                         database's catalog, which the proxy reads when it starts: name the \
                         columns the app needs"
                    ));
                };
                if let Some(column) = order
                    .iter()
                    .find(|c| model.source(table, c) == Source::Unmapped)
                {
                    return Err(format!(
                        "RETURNING * includes {name}.{column}, which the layout does not map: \
                         return the fields the app needs"
                    ));
                }
                names_id = true;
                continue;
            }
            // `RETURNING *` includes the integer id.
            _ => {
                return Err(format!(
                    "RETURNING * includes {name}.{}, which no cell holds: return the fields \
                     the app needs",
                    if table == Table::Parent {
                        model.layout.id.clone()
                    } else {
                        "its parent key".to_string()
                    }
                ))
            }
        };
        // An expression is evaluated over the written rows' values, as
        // PostgreSQL evaluates it over the rows it wrote: every column it
        // reads must be one the cells hold, and it may read no table (a
        // subquery would read PostgreSQL's, which lag the facade's
        // writes).
        if is_value(expr) {
            continue;
        }
        if let Some(subquery) = subquery_in(expr) {
            return Err(format!(
                "RETURNING {expr} reads the tables ({subquery}): compute it in the app"
            ));
        }
        for column in column_names_in(expr) {
            match model.source(table, &column) {
                Source::IntegerId if has_ids => names_id = true,
                Source::IntegerId => {
                    return Err(format!(
                        "RETURNING {name}.{column}, the integer id, which no cell holds{}: the \
                         app knows the UUID it wrote; use it instead",
                        if table == Table::Parent {
                            " (an upsert's row may be an existing one under another id)"
                        } else {
                            ""
                        }
                    ))
                }
                Source::Unmapped => {
                    return Err(format!(
                        "RETURNING {name}.{column}, which the layout does not map"
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(names_id)
}

/// RETURNING's items as written, a `*` (or `t.*`) spelled out as the
/// table's columns in the catalog's order ([`check_returning`] allows one
/// only where that order is known).
fn returning_items(
    model: &Model,
    table: Table,
    returning: Option<&[SelectItem]>,
) -> Vec<SelectItem> {
    let mut items = Vec::new();
    for item in returning.unwrap_or_default() {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => items.extend(
                model
                    .column_order(table)
                    .unwrap_or_default()
                    .iter()
                    .map(|c| {
                        SelectItem::UnnamedExpr(Expr::Identifier(
                            sqlparser::ast::Ident::with_quote('"', c.as_str()),
                        ))
                    }),
            ),
            other => items.push(other.clone()),
        }
    }
    items
}

/// A SET value as the calls show it: a value, or an expression of the
/// latest cell's fields.
fn shown_value(value: &Expr) -> String {
    if is_value(value) {
        value_text(value)
    } else {
        format!("{value} (of the latest cell)")
    }
}

/// `Err` for a column no cell holds.
fn unreadable(model: &Model, scope: &Scope, col: &Col) -> Result<(), String> {
    match col.source {
        Source::IntegerId => Err(format!(
            "uses {}, the integer id, which no cell holds: use the UUID {} (the row key)",
            scope.show(col),
            model.layout.uuid
        )),
        Source::Unmapped => Err(format!(
            "uses {}, which the layout does not map: add it to the fields of a column",
            scope.show(col)
        )),
        _ => Ok(()),
    }
}

fn last(name: &ObjectName) -> String {
    crate::expr::last_name(name)
}
