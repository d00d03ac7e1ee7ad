//! UPDATE: the next ref key's cell of each row the WHERE names by key.

use super::*;

/// The plan of an UPDATE.
pub fn update(model: &Model, update: &Update) -> Result<Plan, String> {
    let rewritten = match &update.table.relation {
        sqlparser::ast::TableFactor::Table { name, alias, .. } => {
            unqualified(update, name, alias.is_some())
        }
        _ => None,
    };
    let update = rewritten.as_ref().unwrap_or(update);
    let mut scope = Scope::default();
    scope.add(model, &update.table.relation)?;
    let written = scope.tables[0].written.clone();
    let table = match scope.table(0) {
        Some(Table::Parent) => Table::Parent,
        Some(Table::Child(c)) => {
            return Err(format!(
                "updates rows of {written} in place: a child row is one cell of column {}, \
                 never changed; insert a new child row (the next {}) instead",
                model.column(c).name,
                model.column(c).ref_key
            ))
        }
        None => {
            return Err(format!(
                "updates {written}, outside the layout, from a layout table: read the cells in \
                 the app and write {written} on its own"
            ))
        }
    };
    if !update.table.joins.is_empty() || update.from.is_some() {
        return Err(
            "UPDATE ... FROM (a join): find the rows first, then write each by its UUID"
                .to_string(),
        );
    }
    assigned_once(&update.assignments)?;
    let (keys, others, checks) = by_row_key(model, &scope, update.selection.as_ref(), "UPDATE")?;
    let row = keys.text();
    let reads_ids = check_returning(
        model,
        table,
        &ObjectName::from(vec![sqlparser::ast::Ident::new(written.clone())]),
        update.returning.as_deref(),
        Ids::Existing,
    )?;
    // What the SET changes, per layout column.
    let mut sets: Vec<(Col, &Expr)> = Vec::new();
    for assignment in &update.assignments {
        let AssignmentTarget::ColumnName(target) = &assignment.target else {
            return Err("SET (a, b) = (...): set each column on its own".to_string());
        };
        let name = last(target);
        let col = Col {
            at: 0,
            source: model.source(table, &name),
            name,
        };
        match &col.source {
            Source::RowKey => {
                return Err(format!(
                    "changes {}, the row key: a row's UUID never changes",
                    scope.show(&col)
                ))
            }
            Source::IntegerId | Source::Unmapped => unreadable(model, &scope, &col)?,
            _ => {}
        }
        if let Some(sub) = crate::expr::subquery_in(&assignment.value) {
            return Err(format!(
                "sets {} from subquery {sub}: run it first",
                col.name
            ));
        }
        for used in crate::expr::columns_in(&scope, model, &assignment.value)? {
            unreadable(model, &scope, &used)?;
        }
        sets.push((col, &assignment.value));
    }
    // With `capture.bump_version`, the ref keys of the columns whose
    // fields are set and whose ref key is not: each raised by one, as
    // capture's trigger raises it in PostgreSQL.
    let mut bumped = Vec::new();
    let mut puts = Vec::new();
    for c in model.columns_of(Table::Parent) {
        let column = model.column(c);
        let fields: Vec<(String, String)> = sets
            .iter()
            .filter_map(|(col, value)| match &col.source {
                Source::Field { column, field } if *column == c => {
                    Some((field.clone(), shown_value(value)))
                }
                _ => None,
            })
            .collect();
        let ref_key = sets
            .iter()
            .find(|(col, _)| col.name == column.ref_key)
            .map(|(_, value)| shown_value(value));
        match (fields.is_empty(), ref_key) {
            (true, None) => {}
            (false, None) if model.bump_version => {
                bumped.push(column.ref_key.clone());
                puts.push(Put {
                    row: row.clone(),
                    column: column.name.clone(),
                    ref_key: bumped_text(&column.ref_key),
                    fields,
                    read_latest: true,
                    merge: true,
                    checks: checks.clone(),
                });
            }
            (false, None) => {
                return Err(format!(
                    "sets {} of column {} without a new ref key: a cell is never changed; \
                     also set {} (e.g. {} = {} + 1) so the change is a new version",
                    fields
                        .iter()
                        .map(|(f, _)| f.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    column.name,
                    column.ref_key,
                    column.ref_key,
                    column.ref_key
                ))
            }
            (_, Some(ref_key)) => puts.push(Put {
                row: row.clone(),
                column: column.name.clone(),
                ref_key,
                fields,
                read_latest: true,
                merge: true,
                checks: checks.clone(),
            }),
        }
    }
    if puts.is_empty() {
        return Err(format!(
            "sets no field of a layout column of {written}: nothing reaches Schemaless"
        ));
    }
    Ok(Plan::Write(Box::new(Write {
        puts,
        table,
        alias: scope.tables[0].alias.clone(),
        rows: Rows::Update {
            keys: Box::new(keys),
            sets: sets
                .iter()
                .map(|(col, value)| (col.name.clone(), (*value).clone()))
                .chain(bumped.iter().map(|r| (r.clone(), next_version(r))))
                .collect(),
            conditions: others,
        },
        returning: returning_items(model, table, update.returning.as_deref()),
        reserves_ids: false,
        reads_ids,
        bumped,
    })))
}

/// How a call shows the version `capture.bump_version` raises.
pub(super) fn bumped_text(ref_key: &str) -> String {
    format!(
        "{ref_key} + 1 (of the latest cell, as capture.bump_version raises it; no new version \
         when its fields come out unchanged)"
    )
}

/// `column + 1`: the next version of a row column whose ref key is
/// `column`.
pub(super) fn next_version(column: &str) -> Expr {
    Expr::BinaryOp {
        left: Box::new(Expr::Identifier(sqlparser::ast::Ident::with_quote(
            '"', column,
        ))),
        op: sqlparser::ast::BinaryOperator::Plus,
        right: Box::new(Expr::value(sqlparser::ast::Value::Number(
            "1".to_string(),
            false,
        ))),
    }
}
