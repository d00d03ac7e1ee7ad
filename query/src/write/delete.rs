//! DELETE: a tombstone of each parent row the WHERE names by key (see
//! `schemaless::tombstone`), put once the row's latest cells show it is
//! there and the WHERE's other conditions hold on them; or, of a child
//! table, a tombstone of each child row of the parent the WHERE names
//! (`parent = (SELECT id FROM parent WHERE uuid = $1)`) on which its other
//! conditions hold.

use super::*;

/// The plan of a DELETE.
pub fn delete(model: &Model, delete: &Delete) -> Result<Plan, String> {
    let from = match &delete.from {
        FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from) => from,
    };
    let [target] = from.as_slice() else {
        return Err("DELETE from several tables: delete from each on its own".to_string());
    };
    let rewritten = match &target.relation {
        sqlparser::ast::TableFactor::Table { name, alias, .. } => {
            unqualified(delete, name, alias.is_some())
        }
        _ => None,
    };
    let delete = rewritten.as_ref().unwrap_or(delete);
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
        Some(Table::Child(c)) => return child(model, &scope, c, delete),
        None => {
            return Err(format!(
                "deletes from {written}, outside the layout, by a layout table: read the cells \
                 in the app and delete from {written} on its own"
            ))
        }
    }
    let (keys, conditions, checks) =
        by_row_key(model, &scope, delete.selection.as_ref(), "DELETE")?;
    let reads_ids = check_returning(
        model,
        Table::Parent,
        &ObjectName::from(vec![sqlparser::ast::Ident::new(written)]),
        delete.returning.as_deref(),
        Ids::Existing,
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
    // The child tables' foreign keys, as PostgreSQL follows them.
    reads.extend(
        model
            .layout
            .columns
            .iter()
            .filter(|c| c.kind == config::ColumnKind::Child)
            .map(|c| {
                format!(
                    "get_column_cells({row}, {}): none, unless {}'s foreign key to {} \
                     cascades (else PostgreSQL's 23503; ON DELETE SET NULL: refused)",
                    c.name,
                    c.table.as_deref().unwrap_or_default(),
                    model.layout.table
                )
            }),
    );
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
        returning: returning_items(model, Table::Parent, delete.returning.as_deref()),
        reserves_ids: false,
        reads_ids,
        bumped: Vec::new(),
    })))
}

/// The plan of a DELETE of a child table's rows: its parent named by
/// UUID, every other condition checked on each child row.
fn child(model: &Model, scope: &Scope, c: usize, delete: &Delete) -> Result<Plan, String> {
    let column = model.column(c);
    let written = &scope.tables[0].written;
    let by_parent = || {
        format!(
            "deletes rows of {written} without naming their parent by UUID: name it as \
             {written}.<parent key> = (SELECT {id} FROM {parent} WHERE {uuid} = $1)",
            id = model.layout.id,
            parent = model.layout.table,
            uuid = model.layout.uuid,
        )
    };
    let selection = delete.selection.as_ref().ok_or_else(by_parent)?;
    let mut key = None;
    let mut conditions = Vec::new();
    let mut checks = Vec::new();
    for e in conjuncts(selection) {
        if let Expr::BinaryOp {
            left,
            op: sqlparser::ast::BinaryOperator::Eq,
            right,
        } = strip(e)
        {
            let parent_key = |side: &Expr| matches!(scope.column(model, side), Ok(Some(col)) if col.source == Source::IntegerId);
            // The parent named by UUID, or by its integer id (a value),
            // which PostgreSQL maps to its UUID.
            let named = |side: &Expr| {
                super::insert::parent_by_uuid(model, side)
                    .cloned()
                    .or_else(|| {
                        (is_value(side) && subquery_in(side).is_none())
                            .then(|| super::uuid_of_id(model, side, false))
                            .flatten()
                    })
            };
            let named = match (parent_key(left), parent_key(right)) {
                (true, _) => named(right),
                (_, true) => named(left),
                _ => None,
            };
            if let (Some(v), None) = (named, &key) {
                key = Some(Keys::One(v));
                continue;
            }
        }
        if let Some(sub) = crate::expr::subquery_in(e) {
            return Err(format!("subquery {sub} in DELETE's WHERE: run it first"));
        }
        let cond = cond(scope, model, e)?;
        for col in cond.cols() {
            unreadable(model, scope, col)?;
        }
        checks.push(format!("check in the app: {e}"));
        conditions.push(e.clone());
    }
    let keys = key.ok_or_else(by_parent)?;
    let reads_ids = check_returning(
        model,
        Table::Child(c),
        &ObjectName::from(vec![sqlparser::ast::Ident::new(written.clone())]),
        delete.returning.as_deref(),
        Ids::Parent,
    )?;
    let row = keys.text();
    let mut reads = vec![format!("get_column_cells({row}, {})", column.name)];
    reads.extend(checks);
    Ok(Plan::Write(Box::new(Write {
        puts: vec![Put {
            row,
            column: model.tombstones.clone(),
            ref_key: format!("derived from ({}, each child's ref key)", column.name),
            fields: vec![
                ("column".to_string(), format!("'{}'", column.name)),
                (
                    "ref_key".to_string(),
                    format!("the child's {}", column.ref_key),
                ),
            ],
            read_latest: false,
            merge: false,
            checks: reads,
        }],
        table: Table::Child(c),
        alias: scope.tables[0].alias.clone(),
        rows: Rows::Delete {
            keys: Box::new(keys),
            conditions,
        },
        returning: returning_items(model, Table::Child(c), delete.returning.as_deref()),
        reserves_ids: false,
        reads_ids,
        bumped: Vec::new(),
    })))
}
