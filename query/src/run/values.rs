//! Values read from Schemaless written as PostgreSQL values of their
//! columns: each as the layout writes it, cast to the column's exact type
//! and collation. A served read renders its rows this way
//! ([`super::serve`]), and a read's conditions besides the row key are
//! evaluated by PostgreSQL over rows written this way ([`kept`]).

use sqlparser::ast::Ident;

use super::serve::{literal, unquote, Catalog, Origin};
use super::*;
use crate::expr::fill_columns;

/// An output's origin and the type its values are cast to, with the
/// column's own collation where it has one; the field, when it is one.
pub(super) type Typed<'f> = (Origin, String, Option<&'f legacy::layout::Field>, String);

/// How `p`'s values are written in a statement (`None`: a value the
/// statement computes, rendered by its own expression).
pub(super) async fn typed_of<'f>(
    legacy: &'f LegacyStore,
    catalog: &Catalog,
    p: &Projected,
) -> Result<Option<Typed<'f>>, RunError> {
    let layout = legacy.layout();
    Ok(match &p.from {
        Output::Value(_) => None,
        Output::RowKey => {
            let (origin, ty) = catalog
                .column(legacy, layout.table_sql(), &unquote(layout.uuid_sql()))
                .await?;
            Some((origin, ty, None, String::new()))
        }
        Output::RefKey { column } => {
            let (_, c) = layout
                .column(column)
                .ok_or_else(|| anyhow::anyhow!("no layout column {column}"))?;
            let (origin, ty) = catalog
                .column(legacy, c.table_sql(), &unquote(c.ref_key_sql()))
                .await?;
            Some((origin, ty, None, String::new()))
        }
        Output::Field { column, field } => {
            let (_, c) = layout
                .column(column)
                .ok_or_else(|| anyhow::anyhow!("no layout column {column}"))?;
            let f = c
                .field(field)
                .ok_or_else(|| anyhow::anyhow!("column {column} has no field {field}"))?;
            let a = catalog.attribute(legacy, c.table_sql(), &f.sql).await?;
            Some((a.origin, f.sql_type.clone(), Some(f), a.collate))
        }
    })
}

/// `v` as a value of `t` in a statement: its text as the layout writes
/// it, cast to the column's exact type (and collation).
pub(super) fn value_sql(t: &Typed, v: &Value) -> Result<String, RunError> {
    let (_, ty, field, collate) = t;
    let text = match field {
        Some(f) => f
            .text_of(v)
            .map_err(|e| anyhow::anyhow!("a stored value of {}: {e}", f.json))?,
        None => match v {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        },
    };
    Ok(match text {
        Some(text) => format!("CAST({} AS {ty}){collate}", literal(&text)),
        None => format!("CAST(NULL AS {ty}){collate}"),
    })
}

/// Of `rows`, those `filter` keeps, as PostgreSQL evaluates it in the
/// app's session over the rows' values, each written as a served value
/// is (its column's exact type and collation), so that every comparison,
/// cast, collation and function means what it means on the table. The
/// filter's values are the rows' `order` values from `columns.0` on
/// (`columns.1`, in placeholder order); the rows kept lose them.
///
/// `Err` when PostgreSQL refuses the condition (a literal its column's
/// type does not take, a division by zero, a function a read-only
/// transaction may not call): the statement then goes to PostgreSQL,
/// which raises the same error where the app expects it. It is checked
/// over no row when no row was read, as PostgreSQL checks it when it
/// finds none.
pub(super) async fn kept(
    eval: &Evaluator<'_>,
    catalog: &Catalog,
    filter: &Expr,
    (first, columns): (usize, &[Projected]),
    rows: Vec<Row>,
) -> Result<Result<Vec<Row>, String>, RunError> {
    let mut typed = Vec::with_capacity(columns.len());
    for p in columns {
        match typed_of(eval.legacy, catalog, p).await? {
            Some(t) => typed.push(t),
            None => return Ok(Err(format!("it filters by {}, a computed value", p.expr))),
        }
    }
    let row_sql =
        |n: usize, values: &mut dyn Iterator<Item = &Value>| -> Result<String, RunError> {
            let mut items = vec![n.to_string()];
            for (t, v) in typed.iter().zip(values) {
                items.push(value_sql(t, v)?);
            }
            Ok(format!("({})", items.join(", ")))
        };
    let mut values = Vec::with_capacity(rows.len().max(1));
    for (n, row) in rows.iter().enumerate() {
        values.push(row_sql(n, &mut row.order.iter().skip(first))?);
    }
    let filter = fill_columns(filter, |k| {
        Expr::CompoundIdentifier(vec![Ident::new("v"), Ident::new(format!("c{k}"))])
    });
    let condition = match values.is_empty() {
        true => {
            let nulls = vec![Value::Null; typed.len()];
            values.push(row_sql(0, &mut nulls.iter())?);
            format!("false AND ({filter})")
        }
        false => filter.to_string(),
    };
    let names: Vec<String> = (0..typed.len()).map(|k| format!("c{k}")).collect();
    let sql = format!(
        "SELECT v.n FROM (VALUES {}) AS v(n, {}) WHERE {condition}",
        values.join(", "),
        names.join(", ")
    );
    let passed = match eval.rows(&sql).await {
        Ok(passed) => passed,
        Err(e) => {
            return Ok(Err(format!(
                "PostgreSQL refuses its condition over the rows read: {e}"
            )))
        }
    };
    let mut keep = vec![false; rows.len()];
    for row in passed {
        let n: i32 = sqlx::Row::try_get(&row, 0).map_err(anyhow::Error::from)?;
        if let Some(k) = usize::try_from(n).ok().and_then(|n| keep.get_mut(n)) {
            *k = true;
        }
    }
    Ok(Ok(rows
        .into_iter()
        .zip(keep)
        .filter_map(|(mut row, keep)| {
            row.order.truncate(first);
            keep.then_some(row)
        })
        .collect()))
}
