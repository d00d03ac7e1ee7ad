//! An INSERT's rows of values and the columns each value goes to: the
//! columns it lists, or the table's first ones in the catalog's order;
//! VALUES rows, or a child's `SELECT parent.id, ... FROM parent WHERE
//! uuid = $1`; and the shapes PostgreSQL itself refuses.

use super::*;

/// PostgreSQL's own refusal of VALUES rows of `lengths` for `columns`
/// target columns, if it refuses them.
fn values_refused(lengths: &[usize], columns: usize) -> Option<String> {
    let (Some(&first), Some(&longest), Some(&shortest)) =
        (lengths.first(), lengths.iter().max(), lengths.iter().min())
    else {
        return None;
    };
    let why = if longest != shortest {
        format!(
            "VALUES lists must all be the same length (rows of {shortest} and {longest} values)"
        )
    } else if first > columns {
        format!(
            "INSERT has more expressions than target columns ({first} values for {columns} columns)"
        )
    } else if first < columns {
        format!(
            "INSERT has more target columns than expressions ({first} values for {columns} columns)"
        )
    } else {
        return None;
    };
    Some(refused_by_postgres("42601", why))
}

/// The target columns of an INSERT that lists none, as PostgreSQL takes
/// them: the table's first columns, as many as each row has values.
pub(super) fn positional(
    model: &Model,
    table: Table,
    name: &ObjectName,
    source: &Query,
) -> Result<Vec<String>, String> {
    let Some(order) = model.column_order(table) else {
        return Err(format!(
            "INSERT INTO {name} names no columns, so each value's column is the table's \
             column at its place, which only the database's catalog says (the proxy reads it \
             when it starts): list the columns"
        ));
    };
    let width = match source.body.as_ref() {
        SetExpr::Values(values) => {
            let lengths: Vec<usize> = values.rows.iter().map(|r| r.len()).collect();
            let longest = lengths.iter().copied().max().unwrap_or(0);
            if let Some(refused) = values_refused(&lengths, longest) {
                return Err(refused);
            }
            longest
        }
        SetExpr::Select(select) => select.projection.len(),
        _ => order.len(),
    };
    if width > order.len() {
        return Err(refused_by_postgres(
            "42601",
            format!(
                "INSERT has more expressions than target columns ({width} values for the {} \
                 columns of {name})",
                order.len()
            ),
        ));
    }
    Ok(order[..width].to_vec())
}

/// One row of values, and the row key found for a child row.
pub(super) struct Values<'a> {
    pub(super) values: Vec<&'a Expr>,
    /// A child row's parent, found by UUID: the UUID's expression.
    pub(super) parent_uuid: Option<&'a Expr>,
}

pub(super) fn source_rows<'a>(
    model: &Model,
    table: Table,
    columns: &[String],
    source: Option<&'a Query>,
    name: &ObjectName,
) -> Result<Vec<Values<'a>>, String> {
    let Some(source) = source else {
        // DEFAULT VALUES.
        return Ok(vec![Values {
            values: Vec::new(),
            parent_uuid: None,
        }]);
    };
    match source.body.as_ref() {
        SetExpr::Values(values) => {
            let lengths: Vec<usize> = values.rows.iter().map(|r| r.len()).collect();
            if let Some(refused) = values_refused(&lengths, columns.len()) {
                return Err(refused);
            }
            let mut rows = Vec::new();
            for row in &values.rows {
                rows.push(Values {
                    values: row.iter().collect(),
                    parent_uuid: None,
                });
            }
            Ok(rows)
        }
        SetExpr::Select(select) if matches!(table, Table::Child(_)) => {
            // INSERT INTO child (...) SELECT parent.id, $2, ... FROM parent
            // WHERE parent.uuid = $1.
            let shape = format!(
                "INSERT ... SELECT into a child table is translated only as SELECT {}.{}, \
                 values... FROM {} WHERE {} = value",
                model.layout.table, model.layout.id, model.layout.table, model.layout.uuid
            );
            let mut scope = Scope::default();
            if select.from.len() != 1 || !select.from[0].joins.is_empty() {
                return Err(shape);
            }
            scope.add(model, &select.from[0].relation)?;
            if scope.table(0) != Some(Table::Parent) {
                return Err(shape);
            }
            let uuid = select
                .selection
                .as_ref()
                .and_then(|w| match conjuncts(w).as_slice() {
                    [only] => match cond(&scope, model, only) {
                        Ok(Cond::Cmp {
                            col,
                            op: schemaless::FilterOp::Eq,
                            value,
                        }) if col.source == Source::RowKey => Some(value),
                        _ => None,
                    },
                    _ => None,
                })
                .ok_or_else(|| shape.clone())?;
            let mut values = Vec::new();
            for item in &select.projection {
                let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item
                else {
                    return Err(shape);
                };
                values.push(e);
            }
            if values.len() != columns.len() {
                return Err(format!(
                    "a SELECT of {} values for {} columns",
                    values.len(),
                    columns.len()
                ));
            }
            Ok(vec![Values {
                values,
                parent_uuid: Some(uuid),
            }])
        }
        _ => Err(format!(
            "INSERT INTO {name} ... SELECT: read the source rows first and write each by its UUID"
        )),
    }
}
