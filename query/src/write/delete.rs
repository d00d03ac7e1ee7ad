//! DELETE: a tombstone of each parent row the WHERE names by key (see
//! `schemaless::tombstone`), put once the row's latest cells show it is
//! there and the WHERE's other conditions hold on them.

use super::*;

/// The plan of a DELETE.
pub fn delete(model: &Model, delete: &Delete) -> Result<Plan, String> {
    let from = match &delete.from {
        FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from) => from,
    };
    let [target] = from.as_slice() else {
        return Err("DELETE from several tables: delete from each on its own".to_string());
    };
    if !delete.tables.is_empty()
        || delete.using.is_some()
        || !target.joins.is_empty()
        || !delete.order_by.is_empty()
        || delete.limit.is_some()
    {
        return Err(
            "DELETE ... USING (a join), ORDER BY or LIMIT: find the rows first, then delete \
             each by its UUID"
                .to_string(),
        );
    }
    let mut scope = Scope::default();
    scope.add(model, &target.relation)?;
    let written = scope.tables[0].written.clone();
    match scope.table(0) {
        Some(Table::Parent) => {}
        Some(Table::Child(c)) => {
            return Err(format!(
                "deletes rows of {written}: a child row is one cell of column {}, and a \
                 deleted one is hidden by a tombstone cell of column {} naming it (`{{\"column\": \
                 \"{}\", \"ref_key\": N}}`); put that tombstone through the facade",
                model.column(c).name,
                model.tombstones,
                model.column(c).name,
            ))
        }
        None => {
            return Err(format!(
                "deletes from {written}, outside the layout, by a layout table: read the cells \
                 in the app and delete from {written} on its own"
            ))
        }
    }
    let (keys, conditions, checks) =
        by_row_key(model, &scope, delete.selection.as_ref(), "DELETE")?;
    check_returning(
        model,
        Table::Parent,
        &ObjectName::from(vec![sqlparser::ast::Ident::new(written)]),
        delete.returning.as_deref(),
    )?;
    let row = keys.text();
    // The row is there (a tombstone of a row that is not would change
    // nothing, and the count says 0), and the conditions hold on it.
    let mut reads: Vec<String> = model
        .columns_of(Table::Parent)
        .into_iter()
        .map(|c| format!("get_cell_latest({row}, {})", model.column(c).name))
        .collect();
    reads.extend(checks);
    Ok(Plan::Write(Box::new(Write {
        puts: vec![Put {
            row,
            column: model.tombstones.clone(),
            ref_key: "0".to_string(),
            fields: vec![("row".to_string(), "true".to_string())],
            read_latest: false,
            merge: false,
            checks: reads,
        }],
        table: Table::Parent,
        alias: scope.tables[0].alias.clone(),
        rows: Rows::Delete {
            keys: Box::new(keys),
            conditions,
        },
        returning: returning_items(delete.returning.as_deref()),
    })))
}
