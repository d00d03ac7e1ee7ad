//! What only PostgreSQL can judge of a layout column's cell, asked of it
//! without writing.
//!
//! The layout checks a value as far as its type goes in Rust (the
//! conversion, a length, an enum's labels, the digits a `numeric(p,s)`
//! keeps). Some of what the legacy table refuses is PostgreSQL's alone:
//! a domain's constraints (at any level, or of an array's elements),
//! whether an `xml` is well-formed, the table's `CHECK` constraints, the
//! value of a generated column, a foreign key to a table outside the
//! layout. Where a write goes to PostgreSQL first,
//! PostgreSQL refuses such a cell in the write itself. In mode `primary`
//! a facade write goes to Schemaless first and reaches PostgreSQL only
//! through the reverse mirror, which would park it there: acknowledged,
//! yet never applied. So the facade asks first, with [`Checks`]: one
//! statement that casts each value into its column's own type, evaluates
//! the `CHECK` constraints and the generated columns over those values,
//! looks up the rows its foreign keys outside the layout refer to,
//! finds another row holding the cell's values of each unique index (or
//! refused beside it by an exclusion constraint's operators),
//! and reads the row back through the read conversions, for a whole batch
//! of one column's cells (arrays of parameters, so one prepared
//! statement serves every batch size).
//!
//! A `CHECK` constraint, a generated column, a unique index or an
//! exclusion constraint that reads
//! a column the cell cannot give (one outside the layout, a child's key
//! to its parent, which PostgreSQL assigns) is left to the reverse
//! mirror, as are foreign keys to the layout's own tables: their answer
//! depends on rows PostgreSQL holds only as the reverse mirror has
//! applied them so far. A table outside the layout is PostgreSQL's own,
//! current. A unique index's holder is PostgreSQL's word for the same
//! reason, so the statement only names it (row key and ref key), and the
//! asker confirms it with Schemaless ([`crate::LegacyStore::ask`]).

use std::collections::HashMap;

use sqlx::PgPool;

use super::quote;
use crate::error::Error;

mod unique;

pub(super) use unique::Owner;
use unique::{holders, UniqueIndex};

/// A table's catalog facts the checks need.
#[derive(Default)]
pub(super) struct TableChecks {
    /// By column name.
    columns: HashMap<String, ColumnFacts>,
    /// The table's `CHECK` constraints.
    constraints: Vec<Constraint>,
    /// The table's foreign keys.
    foreign: Vec<ForeignKey>,
    /// The table's unique indexes (a unique or primary key constraint's
    /// among them) and exclusion constraints.
    unique: Vec<UniqueIndex>,
}

#[derive(Default)]
struct ColumnFacts {
    /// `NOT NULL`.
    not_null: bool,
    /// Its type casts with checks of its own: a domain with constraints
    /// (at any level), an `xml`, or an array of one of these.
    cast_checks: bool,
    /// A generated column's expression, and the columns it reads.
    generated: Option<(String, Vec<String>)>,
}

/// One `CHECK` constraint.
struct Constraint {
    name: String,
    /// As `pg_get_expr` prints it, columns unqualified.
    expr: String,
    /// The columns it reads.
    columns: Vec<String>,
}

/// One foreign key.
struct ForeignKey {
    name: String,
    /// The referring columns, in key order.
    columns: Vec<String>,
    /// The table referred to: its schema and name.
    schema: String,
    table: String,
    /// The columns referred to, in key order.
    referred: Vec<String>,
    /// `MATCH FULL`: all columns null or none.
    full: bool,
}

/// The rows `sql` finds of `schema.table` (its `$1` and `$2`).
async fn rows<T>(
    pool: &PgPool,
    schema: &str,
    table: &str,
    sql: &'static str,
) -> Result<Vec<T>, Error>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql)
        .bind(schema)
        .bind(table)
        .fetch_all(pool)
        .await
        .map_err(|e| Error::postgres(format!("reading the constraints of {schema}.{table}"), e))
}

impl TableChecks {
    /// Reads them for `schema.table`.
    pub(super) async fn read(
        pool: &PgPool,
        schema: &str,
        table: &str,
    ) -> Result<TableChecks, Error> {
        // A type's checks are found by following domains to their base
        // types and arrays to their elements. A generated column's
        // expression depends on the columns it reads as the column itself
        // (or, in older servers, its default) does.
        // (name, NOT NULL, checks of its type, generated expression, the
        // columns it reads)
        type Row = (String, bool, bool, Option<String>, Option<Vec<String>>);
        let columns: Vec<Row> =
            rows(pool, schema, table,
                "/* mezzanine */ SELECT a.attname::text, a.attnotnull,
                    (WITH RECURSIVE reached(oid) AS (
                         SELECT a.atttypid
                         UNION
                         SELECT CASE WHEN x.typtype = 'd' THEN x.typbasetype ELSE x.typelem END
                         FROM reached JOIN pg_type x ON x.oid = reached.oid
                         WHERE x.typtype = 'd'
                            OR (x.typelem <> 0 AND EXISTS (
                                SELECT 1 FROM pg_type e WHERE e.oid = x.typelem AND e.typarray = x.oid)))
                     SELECT coalesce(bool_or(
                         x.oid = 'pg_catalog.xml'::regtype
                         OR (x.typtype = 'd' AND (x.typnotnull OR EXISTS (
                             SELECT 1 FROM pg_constraint k WHERE k.contypid = x.oid)))), false)
                     FROM reached JOIN pg_type x ON x.oid = reached.oid),
                    CASE WHEN a.attgenerated = 's' THEN pg_get_expr(d.adbin, d.adrelid) END,
                    CASE WHEN a.attgenerated = 's' THEN ARRAY(
                        SELECT r.attname::text FROM pg_depend dep
                        JOIN pg_attribute r ON r.attrelid = dep.refobjid AND r.attnum = dep.refobjsubid
                        WHERE ((dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid)
                               OR (dep.classid = 'pg_class'::regclass AND dep.objid = a.attrelid
                                   AND dep.objsubid = a.attnum))
                          AND dep.refclassid = 'pg_class'::regclass AND dep.refobjid = a.attrelid
                          AND dep.refobjsubid > 0 AND dep.refobjsubid <> a.attnum) END
                 FROM pg_attribute a
                 JOIN pg_class c ON c.oid = a.attrelid
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                 WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped",
            )
            .await?;
        let constraints: Vec<(String, String, Vec<String>)> = rows(
            pool,
            schema,
            table,
            "/* mezzanine */ SELECT k.conname::text, pg_get_expr(k.conbin, k.conrelid),
                    ARRAY(SELECT a.attname::text FROM pg_attribute a
                          WHERE a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey))
             FROM pg_constraint k
             JOIN pg_class c ON c.oid = k.conrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2 AND k.contype = 'c'
             ORDER BY k.conname",
        )
        .await?;
        // (name, schema and table referred to, columns, columns referred
        // to, MATCH FULL)
        type Foreign = (String, String, String, Vec<String>, Vec<String>, bool);
        let foreign: Vec<Foreign> = rows(
            pool,
            schema,
            table,
            "/* mezzanine */ SELECT k.conname::text, rn.nspname::text, rc.relname::text,
                    ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY AS u(n, i)
                          JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
                          ORDER BY u.i),
                    ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY AS u(n, i)
                          JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n
                          ORDER BY u.i),
                    k.confmatchtype = 'f'
             FROM pg_constraint k
             JOIN pg_class c ON c.oid = k.conrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_class rc ON rc.oid = k.confrelid
             JOIN pg_namespace rn ON rn.oid = rc.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2 AND k.contype = 'f'
             ORDER BY k.conname",
        )
        .await?;
        let unique = unique::read(pool, schema, table).await?;
        Ok(TableChecks {
            unique,
            foreign: foreign
                .into_iter()
                .map(
                    |(name, schema, table, columns, referred, full)| ForeignKey {
                        name,
                        columns,
                        schema,
                        table,
                        referred,
                        full,
                    },
                )
                .collect(),
            columns: columns
                .into_iter()
                .map(|(name, not_null, cast_checks, expr, reads)| {
                    let generated = expr.map(|e| (e, reads.unwrap_or_default()));
                    (
                        name,
                        ColumnFacts {
                            not_null,
                            cast_checks,
                            generated,
                        },
                    )
                })
                .collect(),
            constraints: constraints
                .into_iter()
                .map(|(name, expr, columns)| Constraint {
                    name,
                    expr,
                    columns,
                })
                .collect(),
        })
    }

    /// Whether column `name` is `NOT NULL`.
    pub(super) fn not_null(&self, name: &str) -> bool {
        self.columns.get(name).is_some_and(|c| c.not_null)
    }
}

/// A column the check statement gives a value: a field (its parameter
/// cast into the column) or one of the cell's keys.
pub(super) struct Given<'a> {
    /// The SQL column.
    pub(super) sql: &'a str,
    /// Its exact type, which the value is cast to.
    pub(super) sql_type: &'a str,
    /// A generated column: computed from the others when it can be.
    pub(super) generated: bool,
}

/// The statement that asks PostgreSQL what it would refuse of a batch of
/// one layout column's cells. Parameters: `$1` the row keys (`uuid[]`),
/// `$2` the ref keys (`int8[]`), then one `text[]` per field in layout
/// order (a generated field's too, unused when PostgreSQL computes it).
/// Each row: the cell's position in the batch (from 1), one boolean per
/// [`Checks::refusals`] (true: refused), then each field's read
/// expression, to compare with the cell.
#[derive(Clone, Debug)]
pub struct Checks {
    pub(crate) statement: String,
    /// For each constraint evaluated, in output order, what PostgreSQL
    /// says when it refuses a row for it.
    pub(crate) refusals: Vec<Refusal>,
    /// Each unique index asked, in output order after the refusals. Each
    /// gives three columns: the row key and the ref key of another row
    /// holding the cell's values (null: none does), and whether an
    /// earlier cell of the batch holds them.
    pub(crate) unique: Vec<Unique>,
}

/// What PostgreSQL says when it refuses a row: its message and SQLSTATE.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub(crate) says: String,
    pub(crate) sqlstate: &'static str,
}

/// A unique index asked about.
#[derive(Clone, Debug)]
pub struct Unique {
    /// What PostgreSQL says of a duplicate (`23505`), or of a row an
    /// exclusion constraint refuses (`23P01`).
    pub(crate) refusal: Refusal,
    /// The positions in the layout column's fields of the columns the
    /// index reads, its predicate's too (`None`: one is not a field): a
    /// row whose values of these are the same holds the same entry.
    pub(crate) fields: Option<Vec<usize>>,
}

impl Checks {
    /// The output column where the fields' read expressions start.
    pub(crate) fn read_back_at(&self) -> usize {
        1 + self.refusals.len() + 3 * self.unique.len()
    }
}

/// The ordinal's name in the statement: no column of a table is likely
/// to be called so, and none of the table's expressions reads it.
const ORDINAL: &str = "\"mezzanine ordinal\"";

/// Whether a cell is the last of its row in the batch, by the same rule.
const LAST: &str = "\"mezzanine last\"";

/// Where the statement is built for: the table (as named in messages)
/// and the layout's tables, whose rows a foreign key must not be checked
/// against (`schema`, names).
pub(super) struct Place<'a> {
    pub(super) table: &'a str,
    pub(super) schema: &'a str,
    pub(super) layout_tables: &'a [&'a str],
    /// Whose row a cell writes, for a unique index's question: which
    /// *other* row holds these values?
    pub(super) owner: Owner<'a>,
    /// The ref key column.
    pub(super) ref_key: &'a str,
}

/// Builds the statement for a layout column whose fields are `fields`
/// (layout order, with each one's read expression on alias `p`), keyed by
/// `keys`: the row key column and the ref key column, each with its type,
/// or `None` where the table has no such column or a field is that
/// column. `None` when PostgreSQL has nothing to add to the layout's own
/// checks.
pub(super) fn build(
    table: &TableChecks,
    place: &Place<'_>,
    fields: &[(Given<'_>, String)],
    keys: [Option<(&str, &str)>; 2],
) -> Option<Checks> {
    // Columns the statement can give a value: keys and written fields.
    let mut known: Vec<&str> = keys.iter().flatten().map(|(name, _)| *name).collect();
    known.extend(
        fields
            .iter()
            .filter(|(f, _)| !f.generated)
            .map(|(f, _)| f.sql),
    );
    let computable = |reads: &[String]| reads.iter().all(|r| known.contains(&r.as_str()));
    let computed: Vec<&str> = fields
        .iter()
        .filter(|(f, _)| f.generated)
        .filter(|(f, _)| {
            table
                .columns
                .get(f.sql)
                .and_then(|c| c.generated.as_ref())
                .is_some_and(|(_, reads)| computable(reads))
        })
        .map(|(f, _)| f.sql)
        .collect();
    let mut readable = known.clone();
    readable.extend(&computed);
    let readable_all = |columns: &[String]| columns.iter().all(|c| readable.contains(&c.as_str()));
    // Each constraint asked: (refused when true, what PostgreSQL says).
    let mut constraints: Vec<(String, Refusal)> = table
        .constraints
        .iter()
        .filter(|k| readable_all(&k.columns))
        .map(|k| {
            (
                format!("(({})) IS FALSE", k.expr),
                Refusal {
                    says: format!(
                        "new row for relation \"{}\" violates check constraint \"{}\"",
                        place.table, k.name
                    ),
                    sqlstate: "23514",
                },
            )
        })
        .collect();
    let outside = |k: &ForeignKey| {
        k.schema != place.schema || !place.layout_tables.contains(&k.table.as_str())
    };
    for k in table
        .foreign
        .iter()
        .filter(|k| outside(k) && readable_all(&k.columns))
    {
        let given: Vec<String> = k
            .columns
            .iter()
            .map(|c| format!("p.{}", quote(c)))
            .collect();
        let nulls = given
            .iter()
            .map(|c| format!("{c} IS NULL"))
            .collect::<Vec<_>>()
            .join(if k.full { " AND " } else { " OR " });
        let matched = given
            .iter()
            .zip(&k.referred)
            .map(|(c, r)| format!("r.{} = {c}", quote(r)))
            .collect::<Vec<_>>()
            .join(" AND ");
        constraints.push((
            format!(
                "NOT (({nulls}) OR EXISTS (SELECT 1 FROM {}.{} r WHERE {matched}))",
                quote(&k.schema),
                quote(&k.table)
            ),
            Refusal {
                says: format!(
                    "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
                    place.table, k.name
                ),
                sqlstate: "23503",
            },
        ));
    }
    let cast_checks = fields
        .iter()
        .any(|(f, _)| !f.generated && table.columns.get(f.sql).is_some_and(|c| c.cast_checks));
    let unique: Vec<&UniqueIndex> = table
        .unique
        .iter()
        .filter(|u| {
            !u.expression
                && u.operators
                    .as_ref()
                    .is_none_or(|o| o.len() == u.columns.len())
                && readable_all(&u.columns)
                && readable_all(&u.reads)
                && !place.owner.owns(&u.columns)
        })
        .collect();
    if !cast_checks && constraints.is_empty() && computed.is_empty() && unique.is_empty() {
        return None;
    }

    // u: the parameters, one row per cell; q: each cast into its column
    // (a generated field PostgreSQL cannot compute keeps the cell's
    // value); p: q with the computable generated columns.
    let mut unnest = vec!["$1::uuid[]".to_string(), "$2::int8[]".to_string()];
    let mut names = vec!["\" k\"".to_string(), "\" r\"".to_string()];
    let mut casts = vec![
        format!("u.{ORDINAL}"),
        "u.\" k\"".into(),
        "u.\" r\"".into(),
        format!("{} AS {LAST}", place.owner.last_of_row()),
    ];
    for (param, key) in names.iter().zip(keys) {
        if let Some((name, sql_type)) = key {
            casts.push(format!("CAST(u.{param} AS {sql_type}) AS {}", quote(name)));
        }
    }
    for (i, (field, _)) in fields.iter().enumerate() {
        unnest.push(format!("${}::text[]", i + 3));
        names.push(format!("\" {i}\""));
        if !computed.contains(&field.sql) {
            casts.push(format!(
                "CAST(u.\" {i}\" AS {}) AS {}",
                field.sql_type,
                quote(field.sql)
            ));
        }
    }
    names.push(ORDINAL.to_string());
    let generated: String = fields
        .iter()
        .filter(|(f, _)| computed.contains(&f.sql))
        .map(|(f, _)| {
            let (expr, _) = table.columns[f.sql].generated.as_ref().expect("computed");
            format!(", CAST(({expr}) AS {}) AS {}", f.sql_type, quote(f.sql))
        })
        .collect();
    let mut outputs = vec![format!("p.{ORDINAL}")];
    outputs.extend(constraints.iter().map(|(refused, _)| refused.clone()));
    let mut windows = String::new();
    for (j, u) in unique.iter().enumerate() {
        let (asked, window) = holders(u, j, place);
        outputs.extend(asked);
        if let Some(window) = window {
            windows.push_str(", ");
            windows.push_str(&window);
        }
    }
    outputs.extend(fields.iter().map(|(_, read)| read.clone()));
    let statement = format!(
        "/* mezzanine */ WITH p AS (SELECT g.*{windows} FROM (SELECT q.*{generated} FROM \
         (SELECT {casts} FROM unnest({unnest}) WITH ORDINALITY AS u({names})) AS q) AS g) \
         SELECT {outputs} FROM p ORDER BY 1",
        outputs = outputs.join(", "),
        casts = casts.join(", "),
        unnest = unnest.join(", "),
        names = names.join(", "),
    );
    Some(Checks {
        statement,
        refusals: constraints
            .into_iter()
            .map(|(_, refusal)| refusal)
            .collect(),
        unique: unique
            .iter()
            .map(|u| Unique {
                refusal: match u.operators {
                    None => Refusal {
                        says: format!(
                            "duplicate key value violates unique constraint \"{}\"",
                            u.name
                        ),
                        sqlstate: "23505",
                    },
                    Some(_) => Refusal {
                        says: format!(
                            "conflicting key value violates exclusion constraint \"{}\"",
                            u.name
                        ),
                        sqlstate: "23P01",
                    },
                },
                fields: u
                    .columns
                    .iter()
                    .chain(&u.reads)
                    .map(|c| fields.iter().position(|(f, _)| f.sql == c))
                    .collect(),
            })
            .collect(),
    })
}
