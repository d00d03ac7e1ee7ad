//! An INSERT's ON CONFLICT: the target it may name, and a DO UPDATE's
//! puts.

use super::*;

/// The conflict an ON CONFLICT names must be the one a cell put reports:
/// the row's own, on its key (the parent's UUID column; a child's key to
/// its parent with its ref key). A conflict on another unique index is
/// PostgreSQL's to find, in rows the cells do not key by: translated, the
/// statement would skip or update the row the key names, where
/// PostgreSQL skips or updates the row holding the other value. No target
/// (`DO NOTHING` on any conflict) is taken as the key's; a duplicate of
/// another unique value is then refused as PostgreSQL refuses it in a
/// plain INSERT (asked before the write in `primary`).
pub(super) fn conflict_target(
    model: &Model,
    table: Table,
    name: &ObjectName,
    target: Option<&ConflictTarget>,
) -> Result<(), String> {
    let key: Vec<String> = match table {
        Table::Parent => vec![model.layout.uuid.clone()],
        Table::Child(c) => {
            let column = model.column(c);
            let mut key = vec![column.ref_key.clone()];
            key.extend(column.parent.clone());
            key
        }
    };
    let shown = key.join(", ");
    let columns = match target {
        None => return Ok(()),
        Some(ConflictTarget::OnConstraint(constraint)) => {
            return Err(format!(
                "ON CONFLICT ON CONSTRAINT {constraint}: name the key's columns instead, \
                 ON CONFLICT ({shown}), so that the conflict is known to be the one a \
                 cell put reports"
            ))
        }
        Some(ConflictTarget::Columns {
            predicate: Some(predicate),
            ..
        }) => {
            return Err(format!(
                "ON CONFLICT (...) WHERE {predicate}: a partial index's conflict; a cell put \
                 reports only the key's, ON CONFLICT ({shown})"
            ))
        }
        Some(ConflictTarget::Columns { columns, .. }) => columns,
    };
    let mut named: Vec<String> = columns.iter().map(folded).collect();
    named.sort();
    named.dedup();
    let mut wanted = key.clone();
    wanted.sort();
    if named != wanted {
        return Err(format!(
            "ON CONFLICT ({}) on {name}: a cell put reports a conflict on the row's key \
             alone, ({shown}); a conflict on other columns is PostgreSQL's to find in \
             its rows, and the translation would skip or update another row than \
             PostgreSQL",
            named.join(", ")
        ));
    }
    Ok(())
}

/// An upsert that sets the ref key: the latest cell decides between the
/// first version (the inserted row) and the next one (the DO UPDATE's
/// assignments on the latest body; `EXCLUDED.x` is the inserted value).
pub(super) fn upserted(
    model: &Model,
    table: Table,
    name: &ObjectName,
    columns: &[String],
    row: &Values,
    inserted: Vec<Put>,
    update: &sqlparser::ast::DoUpdate,
) -> Result<Vec<Put>, String> {
    if table != Table::Parent {
        return Err(format!(
            "an upsert of a row of {name}: a child row is one cell, never changed; insert the \
             next child row instead"
        ));
    }
    for a in &update.assignments {
        cells_only(
            model,
            table,
            name,
            &format!("SET {} = {}", a.target, a.value),
            &a.value,
        )?;
    }
    let condition = match &update.selection {
        Some(condition) => {
            cells_only(model, table, name, &format!("WHERE {condition}"), condition)?;
            Some(condition.to_string())
        }
        None => None,
    };
    let shown = |e: &Expr| -> String {
        if let Expr::CompoundIdentifier(parts) = strip(e) {
            if let [table, column] = parts.as_slice() {
                if folded(table) == "excluded" {
                    let column = folded(column);
                    return match columns.iter().position(|c| *c == column) {
                        Some(i) => value_text(row.values[i]),
                        None => "null".to_string(),
                    };
                }
            }
        }
        shown_value(e)
    };
    let mut out = Vec::new();
    for mut first in inserted {
        let c = model
            .columns_of(Table::Parent)
            .into_iter()
            .find(|&c| model.column(c).name == first.column)
            .expect("a put names a layout column");
        let column = model.column(c);
        let mut ref_key = None;
        let mut fields = Vec::new();
        for a in &update.assignments {
            let AssignmentTarget::ColumnName(target) = &a.target else {
                return Err("SET (a, b) = (...): set each column on its own".to_string());
            };
            let target = last(target);
            match model.source(table, &target) {
                Source::RefKey { .. } if target == column.ref_key => {
                    ref_key = Some(shown(&a.value))
                }
                Source::Field { column: fc, field } if fc == c => {
                    fields.push((field, shown(&a.value)))
                }
                Source::Field { .. } | Source::RefKey { .. } => {}
                Source::RowKey => {
                    return Err(format!("the upsert changes {name}.{target}, the row key"))
                }
                Source::IntegerId | Source::Unmapped => {
                    return Err(format!(
                        "the upsert sets {name}.{target}, which the layout does not map"
                    ))
                }
            }
        }
        let ref_key = match ref_key {
            Some(ref_key) => ref_key,
            None if model.bump_version => super::update::bumped_text(&column.ref_key),
            None => {
                return Err(format!(
                    "an upsert (ON CONFLICT DO UPDATE) that changes column {} of {name} without \
                     a new ref key: also set {} (e.g. {} = {name}.{} + 1)",
                    column.name, column.ref_key, column.ref_key, column.ref_key
                ))
            }
        };
        let next = Put {
            row: first.row.clone(),
            column: first.column.clone(),
            ref_key,
            fields,
            read_latest: false,
            merge: true,
            checks: vec![match &condition {
                Some(condition) => format!(
                    "otherwise (a cell exists), if {condition} holds on the latest cells \
                     (EXCLUDED: the proposed row; else the row is left, neither counted nor \
                     returned):"
                ),
                None => "otherwise (a cell exists):".to_string(),
            }],
        };
        first.read_latest = true;
        first.checks = vec![format!("if the row has no {} cell:", first.column)];
        out.push(first);
        out.push(next);
    }
    Ok(out)
}

/// Refuses a DO UPDATE's `clause` whose expression `e` the runner
/// cannot evaluate as PostgreSQL does, over the existing row's latest
/// cells (`EXCLUDED.x` being the proposed row's value): one that reads a
/// column no cell holds (before, a SET of `t.id` evaluated over a row
/// without it, as NULL), or a table (a subquery would read
/// PostgreSQL's, which lag the facade's writes).
fn cells_only(
    model: &Model,
    table: Table,
    name: &ObjectName,
    clause: &str,
    e: &Expr,
) -> Result<(), String> {
    if let Some(subquery) = crate::expr::subquery_in(e) {
        return Err(format!(
            "ON CONFLICT DO UPDATE {clause} reads the tables ({subquery}): run it first, in \
             the app"
        ));
    }
    for column in column_names_in(e) {
        match model.source(table, &column) {
            Source::IntegerId => {
                return Err(format!(
                    "ON CONFLICT DO UPDATE {clause} uses {name}.{column}, the integer id, \
                     which no cell holds: use the UUID {} (the row key)",
                    model.layout.uuid
                ))
            }
            Source::Unmapped => {
                return Err(format!(
                    "ON CONFLICT DO UPDATE {clause} uses {name}.{column}, which the layout \
                     does not map: add it to the fields of a column"
                ))
            }
            Source::RowKey | Source::RefKey { .. } | Source::Field { .. } => {}
        }
    }
    Ok(())
}
