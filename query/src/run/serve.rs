//! A translated read answered from Schemaless, as a statement PostgreSQL
//! can render in the app's own session: the proxy's `shadow` serving.
//!
//! The rows come from the cells (the plan's cell API calls, rows rebuilt
//! through the layout, as `query run` builds them). PostgreSQL does not
//! read the app's tables for them: the proxy sends it a `SELECT` over a
//! `VALUES` list holding those rows, each value written as the layout
//! writes it (the text [`legacy::conversion::Conversion::accept`] gives,
//! cast to the column's exact type, `numeric(10,2)` included), and with
//! the statement's own `ORDER BY`, `LIMIT` and `OFFSET`. Running in the
//! app's session, with its `TimeZone`, `DateStyle` and
//! `extra_float_digits`, each value goes through the type's own output
//! function in the format the app asked for, so the bytes are those
//! PostgreSQL would have sent. Only the `RowDescription` differs: a
//! `VALUES` column belongs to no table, so the proxy puts back each
//! column's table and attribute number ([`Rendering::origins`]).

use std::collections::HashMap;
use std::sync::Mutex;

use super::values::{kept, typed_of, value_sql, Typed};
use super::*;

/// Where a result column comes from, as `RowDescription` names it: the
/// table's OID and the column's attribute number (0 and 0 for a value
/// the statement computes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    pub table: u32,
    pub attnum: i16,
}

/// The statement PostgreSQL runs to send the rows, and what its
/// `RowDescription` must say instead of "no table".
#[derive(Clone, Debug)]
pub struct Rendering {
    pub sql: String,
    pub origins: Vec<Origin>,
    /// Rows read from Schemaless (before `LIMIT`/`OFFSET`).
    pub rows: usize,
}

/// Serve from Schemaless, or forward (and why).
#[derive(Clone, Debug)]
pub enum Serving {
    Serve(Rendering),
    Forward(String),
}

/// The catalog facts the renderings need, looked up once per column.
#[derive(Default)]
pub struct Catalog {
    /// (quoted table, unquoted column) -> what the catalog says of it.
    columns: Mutex<HashMap<(String, String), Attribute>>,
}

/// A table column, as the catalog describes it.
#[derive(Clone, Debug)]
pub(super) struct Attribute {
    pub(super) origin: Origin,
    /// `format_type`: `numeric(10,2)`.
    pub(super) sql_type: String,
    /// The default's expression, if it has one.
    pub(super) default: Option<String>,
    pub(super) not_null: bool,
    /// A generated column: `default` is its generation expression, over
    /// the row's other columns.
    pub(super) generated: bool,
    /// An identity column `GENERATED ALWAYS`: a value for it is refused.
    pub(super) always: bool,
    /// PostgreSQL orders its text byte by byte, as an index's strings are
    /// ordered: not collatable, or collated `C`/`POSIX`/`C.UTF-8` (the
    /// column's collation or the database's).
    pub(super) bytewise: bool,
    /// Its `=` is byte equality: not `citext`, not of a nondeterministic
    /// (case- or accent-insensitive) collation.
    pub(super) exact: bool,
    /// ` COLLATE "name"` when the column has a collation of its own (not
    /// its type's default), else empty: a served value carries it, so
    /// PostgreSQL orders the rows as it orders the column.
    pub(super) collate: String,
}

impl Catalog {
    pub(super) async fn column(
        &self,
        legacy: &LegacyStore,
        table_sql: &str,
        column: &str,
    ) -> Result<(Origin, String), RunError> {
        let a = self.attribute(legacy, table_sql, column).await?;
        Ok((a.origin, a.sql_type))
    }

    pub(super) async fn attribute(
        &self,
        legacy: &LegacyStore,
        table_sql: &str,
        column: &str,
    ) -> Result<Attribute, RunError> {
        let key = (table_sql.to_string(), column.to_string());
        if let Some(found) = lock(&self.columns).get(&key) {
            return Ok(found.clone());
        }
        // An identity column's default is its sequence's next value.
        // (table, attnum, type, default, not null, generated, always,
        // bytewise, exact, collate)
        type Row = (
            i64,
            i16,
            String,
            Option<String>,
            bool,
            bool,
            bool,
            bool,
            bool,
            String,
        );
        let row: Option<Row> = sqlx::query_as(
            "/* mezzanine */ SELECT a.attrelid::int8, a.attnum, format_type(a.atttypid, a.atttypmod),
                    coalesce(pg_get_expr(d.adbin, d.adrelid),
                             CASE WHEN a.attidentity <> '' THEN format('nextval(%L::regclass)',
                                  pg_get_serial_sequence(a.attrelid::regclass::text, a.attname)) END),
                    a.attnotnull, a.attgenerated <> '', a.attidentity = 'a',
                    CASE WHEN a.attcollation = 0 THEN true
                         WHEN c.collprovider = 'd' THEN
                              (SELECT b.datlocprovider = 'c' AND b.datcollate IN ('C', 'POSIX', 'C.UTF-8', 'C.utf8')
                               FROM pg_database b WHERE b.datname = current_database())
                         ELSE c.collprovider = 'c' AND c.collcollate IN ('C', 'POSIX', 'C.UTF-8', 'C.utf8') END,
                    coalesce(c.collisdeterministic, true)
                        AND NOT EXISTS (
                            WITH RECURSIVE chain(oid) AS (
                                SELECT x FROM unnest(ARRAY[t.oid, t.typelem]) x WHERE x <> 0
                                UNION ALL
                                SELECT d.typbasetype FROM chain JOIN pg_type d ON d.oid = chain.oid
                                WHERE d.typtype = 'd')
                            SELECT 1 FROM chain JOIN pg_type y ON y.oid = chain.oid
                            WHERE y.typname IN ('citext', '_citext')),
                    CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                         THEN ' COLLATE ' || quote_ident(cn.nspname) || '.' || quote_ident(c.collname)
                         ELSE '' END
             FROM pg_attribute a
             JOIN pg_type t ON t.oid = a.atttypid
             LEFT JOIN pg_collation c ON c.oid = a.attcollation
             LEFT JOIN pg_namespace cn ON cn.oid = c.collnamespace
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
             WHERE a.attrelid = ($1)::regclass AND a.attname = $2",
        )
        .bind(table_sql)
        .bind(column)
        .fetch_optional(legacy.pool())
        .await
        .map_err(|e| anyhow::anyhow!("reading the catalog for {table_sql}.{column}: {e}"))?;
        let (
            table,
            attnum,
            sql_type,
            default,
            not_null,
            generated,
            always,
            bytewise,
            exact,
            collate,
        ) = row.ok_or_else(|| anyhow::anyhow!("{table_sql} has no column {column}"))?;
        let found = Attribute {
            origin: Origin {
                table: u32::try_from(table).unwrap_or(0),
                attnum,
            },
            sql_type,
            default,
            not_null,
            generated,
            always,
            bytewise,
            exact,
            collate,
        };
        lock(&self.columns).insert(key, found.clone());
        Ok(found)
    }
}

/// Each layout table's columns in PostgreSQL's order (`attnum`, dropped
/// ones left out), by the table's name as the config spells it: the
/// target columns of an INSERT that lists none
/// ([`crate::Model::with_column_orders`]). Read once, like the columns' types:
/// a layout table's columns are not changed while the migration runs,
/// and whoever changes them restarts what read them.
pub async fn column_orders(
    pool: &sqlx::PgPool,
    model: &crate::Model,
) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut orders = BTreeMap::new();
    for table in model.table_names() {
        let columns: Vec<String> = sqlx::query_scalar(
            "/* mezzanine */ SELECT attname::text FROM pg_attribute
             WHERE attrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass
               AND attnum > 0 AND NOT attisdropped
             ORDER BY attnum",
        )
        .bind(&model.layout.schema)
        .bind(table)
        .fetch_all(pool)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "reading the columns of {}.{table}: {e}",
                model.layout.schema
            )
        })?;
        orders.insert(table.to_string(), columns);
    }
    Ok(orders)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why an output's text cannot be given back exactly from its cell, if
/// it cannot ([`legacy::layout::Field::keeps_text`]).
fn inexact(layout: &legacy::layout::Layout, p: &Projected) -> Option<String> {
    let Output::Field { column, field } = &p.from else {
        return None;
    };
    let f = layout.column(column)?.1.field(field)?;
    (!f.keeps_text()).then(|| {
        format!(
            "{} is {}: Schemaless keeps its value, not the text PostgreSQL would send; \
             PostgreSQL answers it",
            p.name, f.sql_type
        )
    })
}

/// Whether the statement's select list has a `*` or `t.*`: the layout's
/// view of a table (the columns it maps) is not the table's.
fn selects_wildcard(statement: &Statement) -> bool {
    let Statement::Query(query) = statement else {
        return false;
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return false;
    };
    select.projection.iter().any(|item| {
        matches!(
            item,
            sqlparser::ast::SelectItem::Wildcard(_)
                | sqlparser::ast::SelectItem::QualifiedWildcard(..)
        )
    })
}

/// `"name"` with quotes doubled; also undoes it.
pub(super) fn unquote(quoted: &str) -> String {
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .map_or_else(|| quoted.to_string(), |q| q.replace("\"\"", "\""))
}

pub(super) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub(super) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// `sql`, its `$n` bound to `params` (as text), answered from `store` when `serves` says so for
/// every row and column it reads (`None`: a read of no single row, an
/// index query). `legacy` evaluates the statement's values and knows the
/// catalog.
pub async fn render_from<S: CellStore>(
    eval: Evaluator<'_>,
    store: &S,
    catalog: &Catalog,
    model: &crate::Model,
    sql: &str,
    params: &[String],
    serves: &(dyn Fn(Option<&RowKey>, &str) -> bool + Sync),
) -> Result<Serving, RunError> {
    let statement = bind(sql, params)?;
    if selects_wildcard(&statement) {
        return Ok(Serving::Forward(
            "a `*` stands for every column of the table in its order, unmapped ones included; \
             PostgreSQL answers it"
                .into(),
        ));
    }
    let legacy = eval.legacy;
    let (rows, outputs, order, limit, offset) =
        match crate::analyze_statement(model, sql.to_string(), &statement).plan {
            Some(Plan::Rows(read)) => {
                if let Some(on) = &read.outer_condition {
                    return Ok(Serving::Forward(format!(
                        "its LEFT JOIN picks the child rows by {on} besides the parent key; \
                         PostgreSQL answers it"
                    )));
                }
                if let Some(why) = read
                    .filter_columns
                    .iter()
                    .find_map(|p| inexact(legacy.layout(), p))
                {
                    return Ok(Serving::Forward(format!(
                        "a condition reads a field: {why}"
                    )));
                }
                let keys = eval.keys(&read.keys).await?;
                let columns: Vec<&String> = read.latest.iter().chain(&read.children).collect();
                if !keys
                    .iter()
                    .all(|k| columns.iter().all(|c| serves(Some(k), c)))
                {
                    return Ok(Serving::Forward(
                        "the read share sends it to PostgreSQL".into(),
                    ));
                }
                let cells = cells::read_cells(store, &keys, &read.latest, &read.children).await?;
                // The filter's columns ride along past the ORDER BY's.
                let mut order = read.order.clone();
                order.extend(read.filter_columns.iter().map(|p| (p.clone(), false)));
                let shape = cells::Shape {
                    outputs: &read.outputs,
                    order: &order,
                    children: &read.children,
                    left: &read.left,
                };
                let mut rows = Vec::new();
                for (key, cells) in &cells {
                    if cells::exists(&read, cells) {
                        rows.extend(cells::rows_of(key, cells, &shape));
                    }
                }
                if let Some(filter) = &read.filter {
                    let columns = (read.order.len(), read.filter_columns.as_slice());
                    match kept(&eval, catalog, filter, columns, rows).await? {
                        Ok(kept) => rows = kept,
                        Err(why) => return Ok(Serving::Forward(why)),
                    }
                }
                (rows, read.outputs, read.order, read.limit, read.offset)
            }
            Some(Plan::Index(read)) => {
                let column = legacy
                    .layout()
                    .index(&read.index)
                    .map(|i| legacy.layout().columns[i.column].name.to_string())
                    .unwrap_or_default();
                if !serves(None, &column) {
                    return Ok(Serving::Forward(
                        "the read share sends it to PostgreSQL".into(),
                    ));
                }
                if let Some(why) =
                    super::agree::compared_otherwise(legacy, catalog, model, &read).await?
                {
                    return Ok(Serving::Forward(why));
                }
                let rows = cells::index_reads(&eval, store, &read).await?;
                (rows, read.outputs, read.order, None, None)
            }
            _ => return Ok(Serving::Forward("not a translatable read".into())),
        };
    let layout = legacy.layout();
    if let Some(why) = outputs.iter().find_map(|p| inexact(layout, p)) {
        return Ok(Serving::Forward(why));
    }
    let mut typed: Vec<Option<Typed>> = Vec::new();
    for p in outputs.iter().chain(order.iter().map(|(p, _)| p)) {
        typed.push(typed_of(legacy, catalog, p).await?);
    }
    // VALUES columns: n (the order Schemaless gave), then one per typed
    // output or ORDER BY item.
    let mut values = Vec::new();
    for (n, row) in rows.iter().enumerate() {
        let mut items = vec![n.to_string()];
        for (t, v) in typed.iter().zip(row.values.iter().chain(&row.order)) {
            if let Some(t) = t {
                items.push(value_sql(t, v)?);
            }
        }
        values.push(format!("({})", items.join(", ")));
    }
    let null_row = || -> Result<String, RunError> {
        let mut items = vec!["0".to_string()];
        for t in typed.iter().flatten() {
            items.push(value_sql(t, &Value::Null)?);
        }
        Ok(format!("({})", items.join(", ")))
    };
    let mut names = vec!["n".to_string()];
    let mut place = Vec::with_capacity(typed.len());
    for t in &typed {
        place.push(t.as_ref().map(|_| {
            names.push(format!("c{}", names.len()));
            names.len() - 1
        }));
    }
    let select: Vec<String> = outputs
        .iter()
        .zip(&place)
        .map(|(p, at)| match at {
            Some(at) => format!("v.c{at} AS {}", quote(&p.name)),
            None => format!("{} AS {}", p.expr, quote(&p.name)),
        })
        .collect();
    let mut sql = format!(
        "/* mezzanine: served from Schemaless */ SELECT {} FROM (VALUES {}) AS v({}){}",
        select.join(", "),
        if values.is_empty() {
            null_row()?
        } else {
            values.join(", ")
        },
        names.join(", "),
        if values.is_empty() {
            " WHERE false"
        } else {
            ""
        }
    );
    let mut order_by: Vec<String> = order
        .iter()
        .zip(&place[outputs.len()..])
        .filter_map(|((_, desc), at)| {
            at.map(|at| format!("v.c{at}{}", if *desc { " DESC" } else { "" }))
        })
        .collect();
    order_by.push("v.n".into());
    sql.push_str(&format!(" ORDER BY {}", order_by.join(", ")));
    if let Some(limit) = limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    if let Some(offset) = offset {
        sql.push_str(&format!(" OFFSET {offset}"));
    }
    let origins = typed
        .iter()
        .take(outputs.len())
        .map(|t| t.as_ref().map_or_else(Origin::default, |(o, _, _, _)| *o))
        .collect();
    Ok(Serving::Serve(Rendering {
        sql,
        origins,
        rows: rows.len(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_round_trip_through_quotes() {
        assert_eq!(unquote("\"a\"\"b\""), "a\"b");
        assert_eq!(unquote("plain"), "plain");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
        assert_eq!(literal("it's"), "'it''s'");
    }

    #[test]
    fn a_star_is_left_to_postgresql() {
        let star = |sql: &str| selects_wildcard(&bind(sql, &[]).ok().expect("parses"));
        assert!(star("SELECT * FROM t WHERE id = 1"));
        assert!(star("SELECT a, t.* FROM t"));
        assert!(!star("SELECT a, count(b) FROM t"));
    }
}
