//! What another row holds: a unique index's values, or those an
//! exclusion constraint's operators refuse beside a cell, looked up by
//! the check statement in the table and among the batch's earlier cells
//! ([`holders`]), for the asker to confirm with Schemaless.

use sqlx::PgPool;

use super::{rows, Place, LAST, ORDINAL};
use crate::error::Error;
use crate::layout::quote;

/// One unique index, or an exclusion constraint (a unique index is one
/// whose operators are all `=`).
pub(super) struct UniqueIndex {
    /// As PostgreSQL names it when it refuses a duplicate: the index, or
    /// the exclusion constraint.
    pub(super) name: String,
    /// An exclusion constraint's operators, one per key column, each as
    /// `OPERATOR(schema.name)` (`None`: a unique index).
    pub(super) operators: Option<Vec<String>>,
    /// The key columns, in key order (`INCLUDE` columns left out).
    pub(super) columns: Vec<String>,
    /// The columns it reads, its predicate's too (PostgreSQL records a
    /// constraint's dependence on its columns with the constraint, an
    /// index's with the index).
    pub(super) reads: Vec<String>,
    /// A key is an expression: not asked.
    pub(super) expression: bool,
    /// A partial index's predicate, columns unqualified.
    pub(super) predicate: Option<String>,
    /// `NULLS NOT DISTINCT`: two nulls are duplicates.
    pub(super) nulls_not_distinct: bool,
}

/// The unique indexes and exclusion constraints of `schema.table`.
pub(super) async fn read(
    pool: &PgPool,
    schema: &str,
    table: &str,
) -> Result<Vec<UniqueIndex>, Error> {
    // (name, key columns, columns read, an expression, predicate,
    // NULLS NOT DISTINCT: read through `to_jsonb`, absent before
    // PostgreSQL 15; an exclusion constraint's operators). An index
    // being built is not yet `indisready`.
    type Unique = (
        String,
        Vec<String>,
        Vec<String>,
        bool,
        Option<String>,
        bool,
        Option<Vec<String>>,
    );
    let unique: Vec<Unique> = rows(
        pool,
        schema,
        table,
        "/* mezzanine */ SELECT CASE WHEN k.contype = 'x' THEN k.conname ELSE ic.relname END::text,
                ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS u(n, o)
                      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = u.n
                      WHERE u.o <= i.indnkeyatts ORDER BY u.o),
                ARRAY(SELECT DISTINCT a.attname::text FROM pg_depend d
                      JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                      WHERE ((d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid)
                             OR (d.classid = 'pg_constraint'::regclass AND d.objid = k.oid))
                        AND d.refclassid = 'pg_class'::regclass AND d.refobjid = i.indrelid
                        AND d.refobjsubid > 0),
                i.indexprs IS NOT NULL OR 0 = ANY (i.indkey::int2[]),
                pg_get_expr(i.indpred, i.indrelid),
                coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::bool, false),
                CASE WHEN k.contype = 'x' THEN ARRAY(
                    SELECT format('OPERATOR(%I.%s)', opn.nspname, op.oprname)
                    FROM unnest(k.conexclop) WITH ORDINALITY AS u(o, at)
                    JOIN pg_operator op ON op.oid = u.o
                    JOIN pg_namespace opn ON opn.oid = op.oprnamespace
                    ORDER BY u.at) END
         FROM pg_index i
         JOIN pg_class c ON c.oid = i.indrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_class ic ON ic.oid = i.indexrelid
         LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.conrelid = i.indrelid
                                  AND k.contype IN ('p', 'u', 'x')
         WHERE n.nspname = $1 AND c.relname = $2 AND i.indisready
           AND (i.indisunique OR k.contype = 'x')
         ORDER BY 1",
    )
    .await?;
    Ok(unique
        .into_iter()
        .map(
            |(name, columns, reads, expression, predicate, nulls_not_distinct, operators)| {
                UniqueIndex {
                    name,
                    operators,
                    columns,
                    reads,
                    expression,
                    predicate,
                    nulls_not_distinct,
                }
            },
        )
        .collect())
}

/// Whose row of the table a cell writes (column names unquoted).
pub(in crate::layout) enum Owner<'a> {
    /// A row column's cell: the row whose row key column is the cell's
    /// row key.
    Row { uuid: &'a str },
    /// A child's cell: the row whose key to the parent is the id of the
    /// parent row (in `parent`, of the same schema) whose row key column
    /// is the cell's row key, and whose ref key column is the cell's ref
    /// key.
    Child {
        parent_key: &'a str,
        parent: &'a str,
        id: &'a str,
        uuid: &'a str,
    },
}

impl Owner<'_> {
    /// SQL over the table's row `r` and the asked cell's `p`: `r` is the
    /// row the cell writes. The row key is `p." k"`, the ref key `p." r"`.
    fn same_row(&self, schema: &str, ref_key: &str) -> String {
        match self {
            Owner::Row { uuid } => format!("r.{} = p.\" k\"", quote(uuid)),
            Owner::Child {
                parent_key,
                parent,
                id,
                uuid,
            } => format!(
                "r.{} IS NOT DISTINCT FROM (SELECT o.{} FROM {}.{} o WHERE o.{} = p.\" k\") AND r.{} = p.\" r\"",
                quote(parent_key),
                quote(id),
                quote(schema),
                quote(parent),
                quote(uuid),
                quote(ref_key)
            ),
        }
    }

    /// SQL of the row key of the table's row `r`.
    fn row_key(&self, schema: &str) -> String {
        match self {
            Owner::Row { uuid } => format!("r.{}", quote(uuid)),
            Owner::Child {
                parent_key,
                parent,
                id,
                uuid,
            } => format!(
                "(SELECT o.{} FROM {}.{} o WHERE o.{} = r.{})",
                quote(uuid),
                quote(schema),
                quote(parent),
                quote(id),
                quote(parent_key)
            ),
        }
    }

    /// SQL over two asked cells, `e` and `p`: they write different rows.
    fn other_row(&self) -> &'static str {
        match self {
            Owner::Row { .. } => "e.\" k\" <> p.\" k\"",
            Owner::Child { .. } => "(e.\" k\", e.\" r\") <> (p.\" k\", p.\" r\")",
        }
    }

    /// SQL over the parameters `u`: no later cell of the batch writes
    /// the cell's row (a child's cell is its own row).
    pub(super) fn last_of_row(&self) -> String {
        match self {
            Owner::Row { .. } => {
                format!("max(u.{ORDINAL}) OVER (PARTITION BY u.\" k\") = u.{ORDINAL}")
            }
            Owner::Child { .. } => "true".to_string(),
        }
    }

    /// Whether a unique index on `columns` says nothing of other rows:
    /// it includes the row key column, which only this row holds.
    pub(super) fn owns(&self, columns: &[String]) -> bool {
        match self {
            Owner::Row { uuid } => columns.iter().any(|c| c == uuid),
            Owner::Child { .. } => false,
        }
    }
}

/// What the check statement asks of unique index (or exclusion
/// constraint) `u`, the `j`th: its three outputs, each over the cell
/// `p`, and the window it adds to `p`, if any. The outputs: the row key
/// and the ref key of another row of the table holding the cell's values
/// (null: none), and whether an earlier cell of the batch, the last of
/// its row there, holds them (both would be written, and PostgreSQL would
/// refuse the later). A partial index counts only rows its predicate
/// holds for, the cell's own included (unqualified, its columns are those
/// of the innermost `FROM`).
///
/// Subqueries in the select list rather than joins: each is planned on
/// its own, where a join of one per index multiplies the planner's work.
pub(super) fn holders(
    u: &UniqueIndex,
    j: usize,
    place: &Place<'_>,
) -> ([String; 3], Option<String>) {
    // The values of row `r` (a table's or an earlier cell's) meet the
    // cell's `p` as the index compares them.
    let meets = |r: &str| {
        u.columns
            .iter()
            .enumerate()
            .map(|(at, c)| {
                let c = quote(c);
                if let Some(operator) = u.operators.as_ref().and_then(|o| o.get(at)) {
                    format!("{r}.{c} {operator} p.{c}")
                } else if u.nulls_not_distinct {
                    format!("{r}.{c} IS NOT DISTINCT FROM p.{c}")
                } else {
                    format!("{r}.{c} = p.{c}")
                }
            })
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    let (of_row, of_cell) = match &u.predicate {
        Some(predicate) => (
            format!(" AND ({predicate})"),
            format!("({predicate}) IS TRUE"),
        ),
        None => (String::new(), "true".to_string()),
    };
    let not_null = u
        .columns
        .iter()
        .map(|c| format!(" AND p.{} IS NOT NULL", quote(c)))
        .collect::<String>();
    let same_row = place.owner.same_row(place.schema, place.ref_key);
    let row_key = place.owner.row_key(place.schema);
    let ref_key = format!("r.{}::int8", quote(place.ref_key));
    let table = format!("{}.{}", quote(place.schema), quote(place.table));
    // A unique index holds one such row at most, found through it. An
    // exclusion constraint's operators may match several: the first by
    // (row key, ref key) for both outputs, aggregated, since a LIMIT
    // would have the planner look for a first match in that order (or
    // scan the table for one it expects soon) instead of asking the
    // constraint's index for the rows that match.
    let holder = |output: &str| {
        let (select, limit) = match u.operators {
            None => (output.to_string(), " LIMIT 1"),
            Some(_) => (
                format!("(array_agg({output} ORDER BY {row_key}, {ref_key}))[1]"),
                "",
            ),
        };
        format!(
            "CASE WHEN {of_cell} THEN (SELECT {select} FROM {table} r WHERE {}{of_row} \
             AND NOT ({same_row}){limit}) END",
            meets("r")
        )
    };
    let (earlier, window) = match u.operators {
        // The first cell of each set of values among the last cells of
        // their rows, by a window over the batch (not a scan per cell).
        // A window's partition holds nulls together: for an index whose
        // nulls are distinct a cell with one holds nothing.
        None => {
            let first = format!("\"first cell {j}\"");
            let columns: Vec<String> = u.columns.iter().map(|c| quote(c)).collect();
            (
                format!(
                    "({of_cell} AND p.{first} < p.{ORDINAL}{})",
                    if u.nulls_not_distinct { "" } else { &not_null }
                ),
                Some(format!(
                    "min({ORDINAL}) FILTER (WHERE {LAST}{of_row}) OVER (PARTITION BY {}) AS {first}",
                    columns.join(", ")
                )),
            )
        }
        // Operators other than equality group nothing: each earlier cell,
        // a scan of the batch per cell, so only for a cell with a value
        // in every column (the operators are strict: a null excludes
        // nothing).
        Some(_) => (
            format!(
                "({of_cell}{not_null} AND EXISTS (SELECT 1 FROM p e WHERE e.{ORDINAL} < p.{ORDINAL} \
                 AND {} AND e.{LAST} AND {}{of_row}))",
                place.owner.other_row(),
                meets("e"),
            ),
            None,
        ),
    };
    ([holder(&row_key), holder(&ref_key), earlier], window)
}
