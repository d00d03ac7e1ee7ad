//! A unique violation the facade finds, raised with PostgreSQL's own
//! fields: the constraint's name in the message and its own field, the
//! table and schema, and the detail's `Key (…)=(…) already exists.`
//! Before, the proxy raised only the code and a message of its own, and
//! an ORM that names the fields of a `23505` from the detail or the
//! constraint (Prisma's `P2002`) could not tell which.

use legacy::layout::Shape;
use legacy::LegacyStore;
use schemaless::{CellStore, RowKey};

use super::{Diagnostics, Refused, Table, Writer, Written};

impl<S: CellStore> Writer<'_, S> {
    /// The unique violation of a row that exists: a parent row's key
    /// taken, or a child row's (its parent's and `ref_key`, where known).
    pub(super) fn duplicate(&self, key: &RowKey, ref_key: Option<i64>) -> Refused {
        let mut refused = Refused::new(
            "23505",
            format!(
                "duplicate key value violates unique constraint: a row of {} with key {} \
                 exists",
                self.table_name(),
                key.uuid()
            ),
        )
        .of_row(*key);
        refused.duplicate = Some(Box::new((self.write.table, ref_key)));
        refused
    }
}

/// Gives each unique violation of `results` found by the facade
/// ([`Refused::duplicate`]) PostgreSQL's fields, read from the catalog:
/// a violation is rare, and a constraint may be renamed while the proxy
/// runs. Where the catalog cannot be read the error stays as it was.
pub(super) async fn explain(legacy: &LegacyStore, results: &mut [Result<Written, Refused>]) {
    for refused in results.iter_mut().filter_map(|r| r.as_mut().err()) {
        let (Some((table, ref_key)), Some(row)) = (refused.duplicate.as_deref(), refused.row)
        else {
            continue;
        };
        if let Some((message, diagnostics)) = of_key(legacy, *table, row, *ref_key).await {
            refused.message = message;
            *refused.diagnostics = diagnostics;
        }
    }
}

/// PostgreSQL's message and fields for row `row`'s key taken in `table`
/// (a child row's: its parent's id and `ref_key`).
async fn of_key(
    legacy: &LegacyStore,
    table: Table,
    row: RowKey,
    ref_key: Option<i64>,
) -> Option<(String, Diagnostics)> {
    let layout = legacy.layout();
    let (table_sql, columns): (&str, Vec<&str>) = match table {
        Table::Parent => (layout.table_sql(), vec![layout.uuid_sql()]),
        Table::Child(i) => {
            let column = layout.columns.get(i)?;
            let Shape::Child { parent_sql } = &column.shape else {
                return None;
            };
            (
                column.table_sql(),
                vec![parent_sql.as_str(), column.ref_key_sql()],
            )
        }
    };
    // The unique index on exactly those columns (the primary key first),
    // its columns in its order as PostgreSQL names them in a detail.
    let (constraint, schema, relation, names, quoted): (
        String,
        String,
        String,
        Vec<String>,
        Vec<String>,
    ) = sqlx::query_as(
        "/* mezzanine */ SELECT ic.relname::text, n.nspname::text, t.relname::text,
                    array_agg(quote_ident(a.attname) ORDER BY k.n),
                    array_agg('\"' || replace(a.attname, '\"', '\"\"') || '\"' ORDER BY k.n)
             FROM pg_index i
             JOIN pg_class ic ON ic.oid = i.indexrelid
             JOIN pg_class t ON t.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = t.relnamespace
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = $1::regclass AND i.indisunique
               AND i.indpred IS NULL AND i.indexprs IS NULL
             GROUP BY ic.relname, n.nspname, t.relname, i.indisprimary
             HAVING array_agg('\"' || replace(a.attname, '\"', '\"\"') || '\"' ORDER BY a.attname)
                    @> $2::text[]
                AND cardinality(array_agg(a.attnum)) = cardinality($2::text[])
             ORDER BY i.indisprimary DESC, ic.relname
             LIMIT 1",
    )
    .bind(table_sql)
    .bind(&columns)
    .fetch_optional(legacy.pool())
    .await
    .ok()??;
    // Each column's value as PostgreSQL prints it: the row key's UUID, a
    // child's parent id and ref key.
    let parent_id = match table {
        Table::Parent => None,
        Table::Child(_) => super::ids::existing_ids(legacy, &[row])
            .await
            .ok()?
            .get(&row)
            .copied(),
    };
    let values: Option<Vec<String>> = quoted
        .iter()
        .map(|q| match table {
            Table::Parent => Some(row.uuid().to_string()),
            Table::Child(_) if q.as_str() == columns[0] => parent_id.map(|id| id.to_string()),
            Table::Child(_) => ref_key.map(|r| r.to_string()),
        })
        .collect();
    let diagnostics = Diagnostics {
        detail: values.map(|values| {
            format!(
                "Key ({})=({}) already exists.",
                names.join(", "),
                values.join(", ")
            )
        }),
        schema: Some(schema),
        table: Some(relation),
        constraint: Some(constraint.clone()),
    };
    Some((
        format!("duplicate key value violates unique constraint \"{constraint}\""),
        diagnostics,
    ))
}
