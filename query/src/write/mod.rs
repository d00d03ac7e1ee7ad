//! INSERT and UPDATE: `put_cell`s by row key, or the reason they are not.
//!
//! Its rooms: `insert` and `update`; this file holds what they share
//! (RETURNING, values shown in reasons, readable columns).

use sqlparser::ast::{
    AssignmentTarget, Expr, Insert, ObjectName, OnConflictAction, OnInsert, Query, SelectItem,
    SetExpr, TableObject, Update,
};

use crate::expr::{cond, conjuncts, is_value, strip, value_text, Col, Cond, Scope};
use crate::model::{folded, Model, Source, Table};
use crate::plan::{Inserted, Keys, OnConflict, Plan, Put, Rows, Write};

mod insert;
mod update;

pub use insert::insert;
pub use update::update;

/// RETURNING may name only what the cells hold.
fn check_returning(
    model: &Model,
    table: Table,
    name: &ObjectName,
    returning: Option<&[SelectItem]>,
) -> Result<(), String> {
    for item in returning.unwrap_or_default() {
        let expr = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
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
        let column = match strip(expr) {
            Expr::Identifier(i) => folded(i),
            Expr::CompoundIdentifier(parts) => parts.last().map(folded).unwrap_or_default(),
            _ if is_value(expr) => continue,
            other => return Err(format!("RETURNING {other}: compute it in the app")),
        };
        match model.source(table, &column) {
            Source::IntegerId => {
                return Err(format!(
                    "RETURNING {name}.{column}, the integer id, which no cell holds: the app \
                     knows the UUID it wrote; use it instead"
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
    Ok(())
}

/// RETURNING's items as written.
fn returning_items(returning: Option<&[SelectItem]>) -> Vec<SelectItem> {
    returning.unwrap_or_default().to_vec()
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
