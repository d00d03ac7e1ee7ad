//! `query_index` answered by SQL over the legacy tables.
//!
//! An index entry is a row whose latest cell of the indexed column matches:
//! for a `row` column the parent row itself (when its version is set), for
//! a `child` column the child row with the highest ref key of its parent.
//! Filter values go through the field's conversion, so they are checked
//! and compared as the SQL type (a `numeric` as a number, a timestamp as an
//! instant). Results are ordered by the `order_by` field (NULLs last), then
//! by row key; a NULL never matches a filter.
//!
//! Text (and an enum's labels) is compared and ordered byte by byte
//! (`COLLATE "C"`), as the in-memory model and Schemaless's indexes do,
//! whatever the column's collation or type says: in `en_US.UTF-8` `'B'`
//! sorts after `'a'`, a `citext` finds `Bob` equal to `bob`, an enum
//! orders as declared. Without it the legacy store answered an index
//! query otherwise than Schemaless in such a database, and a sampled
//! read was a false mismatch. An equality keeps the column's own
//! comparison too, so PostgreSQL can still find the rows by an index of
//! its own; the byte comparison then keeps the exact ones.

use config::ColumnKind;
use schemaless::{Body, Error, FilterOp, IndexEntry, IndexQuery, Result, RowKey};
use serde_json::{Map, Value};
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use crate::layout::{quote, Field, Shape};
use crate::store::LegacyStore;

/// The most entries one query returns.
pub const MAX_LIMIT: usize = 10_000;

fn cast(field: &Field, n: usize) -> String {
    format!("CAST(${n}::text AS {})", field.sql_type)
}

/// Whether the field's values are text to an index: compared byte by
/// byte (see the module's docs).
fn textual(field: &Field) -> bool {
    use crate::conversion::Conversion;
    matches!(
        field.conversion,
        Conversion::Text | Conversion::Char | Conversion::Enum
    )
}

/// `column op $n` as an index compares it: a textual field's text byte
/// by byte (an equality also in the column's own terms, which an index
/// of PostgreSQL's can answer); any other in its SQL type.
fn comparison(field: &Field, column: &str, op: &str, n: usize) -> String {
    let native = format!("{column} {op} {}", cast(field, n));
    if !textual(field) {
        return native;
    }
    let bytes = format!("({column})::text COLLATE \"C\" {op} ${n}::text");
    match op {
        "=" => format!("{native} AND {bytes}"),
        _ => bytes,
    }
}

/// The SQL parameter of a filter value, checked by the field's conversion.
fn param(field: &Field, value: &Value, key: &str) -> Result<String> {
    match field.accept(value) {
        Ok((_, Some(text))) => Ok(text),
        Ok((_, None)) => Err(Error::invalid(
            key,
            format!(
                "null matches nothing; give a value of field {:?}",
                field.json
            ),
        )),
        Err(message) => Err(Error::invalid(
            key,
            format!("{message} (field {:?} is {})", field.json, field.sql_type),
        )),
    }
}

pub(crate) async fn query(store: &LegacyStore, query: &IndexQuery) -> Result<Vec<IndexEntry>> {
    let layout = &*store.layout;
    let index = layout.index(&query.index).ok_or_else(|| {
        let names: Vec<&str> = layout.indexes.iter().map(|i| i.name.as_str()).collect();
        Error::invalid(
            "index",
            format!(
                "no index is called {:?} (declared: {})",
                query.index,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        )
    })?;
    if query.limit == 0 || query.limit > MAX_LIMIT {
        return Err(Error::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}, got {}", query.limit),
        ));
    }
    let column = &layout.columns[index.column];
    // The entry's table alias: the parent for a row column, the child else.
    let alias = match column.kind() {
        ColumnKind::Row => "p",
        ColumnKind::Child => "c",
    };
    let col = |f: &Field| format!("{alias}.{}", quote(&f.sql));

    let mut params: Vec<String> = vec![param(
        &index.shard_field,
        &query.shard_value,
        "shard_value",
    )?];
    let mut conditions = vec![comparison(
        &index.shard_field,
        &col(&index.shard_field),
        "=",
        1,
    )];
    for (i, filter) in query.filters.iter().enumerate() {
        let field = index.field(&filter.field).ok_or_else(|| {
            Error::invalid(
                &format!("filters[{i}].field"),
                format!(
                    "index {} holds no field {:?} (it holds {})",
                    index.name,
                    filter.field,
                    std::iter::once(&index.shard_field)
                        .chain(&index.fields)
                        .map(|f| f.json.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let key = format!("filters[{i}].value");
        let condition = match filter.op {
            FilterOp::In => {
                let values = filter
                    .value
                    .as_array()
                    .ok_or_else(|| Error::invalid(&key, "IN takes an array of values"))?;
                if values.is_empty() {
                    return Err(Error::invalid(&key, "IN takes at least one value"));
                }
                let mut each = Vec::with_capacity(values.len());
                for (k, value) in values.iter().enumerate() {
                    params.push(param(field, value, &format!("{key}[{k}]"))?);
                    each.push(format!(
                        "({})",
                        comparison(field, &col(field), "=", params.len())
                    ));
                }
                format!("({})", each.join(" OR "))
            }
            op => {
                params.push(param(field, &filter.value, &key)?);
                let sql_op = match op {
                    FilterOp::Eq => "=",
                    FilterOp::Lt => "<",
                    FilterOp::Le => "<=",
                    FilterOp::Gt => ">",
                    FilterOp::Ge => ">=",
                    FilterOp::In => unreachable!("handled above"),
                };
                comparison(field, &col(field), sql_op, params.len())
            }
        };
        conditions.push(condition);
    }
    let direction = if query.descending { "DESC" } else { "ASC" };
    let mut order = Vec::new();
    if let Some(name) = &query.order_by {
        let field = index.field(name).ok_or_else(|| {
            Error::invalid(
                "order_by",
                format!("index {} holds no field {name:?}", index.name),
            )
        })?;
        let key = match textual(field) {
            true => format!("({})::text COLLATE \"C\"", col(field)),
            false => col(field),
        };
        order.push(format!("{key} {direction} NULLS LAST"));
    }
    order.push(format!("p.{} {direction}", layout.uuid_sql));

    let fields: Vec<&Field> = std::iter::once(&index.shard_field)
        .chain(&index.fields)
        .collect();
    let exprs = fields
        .iter()
        .map(|f| f.conversion.read_expr(&col(f)))
        .collect::<Vec<_>>()
        .join(", ");
    let from = match &column.shape {
        Shape::Row => format!(
            "FROM {table} p WHERE p.{uuid} IS NOT NULL AND p.{v} IS NOT NULL",
            table = layout.table_sql,
            uuid = layout.uuid_sql,
            v = column.ref_key_sql,
        ),
        Shape::Child { parent_sql } => {
            let parent = parent_sql;
            format!(
                "FROM {child} c JOIN {table} p ON p.{id} = c.{parent}
                 WHERE p.{uuid} IS NOT NULL
                   AND c.{s} = (SELECT max(l.{s}) FROM {child} l WHERE l.{parent} = c.{parent})",
                child = column.table_sql,
                table = layout.table_sql,
                id = layout.id_sql,
                uuid = layout.uuid_sql,
                s = column.ref_key_sql,
            )
        }
    };
    let sql = format!(
        "/* mezzanine */ SELECT p.{uuid}, {exprs} {from} AND {conditions} ORDER BY {order} LIMIT {limit}",
        uuid = layout.uuid_sql,
        conditions = conditions.join(" AND "),
        order = order.join(", "),
        limit = query.limit,
    );
    let mut q = sqlx::query(AssertSqlSafe(sql));
    for p in &params {
        q = q.bind(p);
    }
    let rows = q
        .fetch_all(&store.pool)
        .await
        .map_err(|e| store.storage(e))?;
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let uuid: Uuid = row.try_get(0).map_err(|e| store.storage(e))?;
        let mut map = Map::with_capacity(fields.len());
        for (i, field) in fields.iter().enumerate() {
            let text: Option<String> = row.try_get(i + 1).map_err(|e| store.storage(e))?;
            let value = field.render(text).map_err(|reason| Error::Unreadable {
                what: format!("index {} entry of {uuid}", index.name),
                reason: format!("field {}: {reason}", field.json),
            })?;
            map.insert(field.json.clone(), value);
        }
        entries.push(IndexEntry {
            row_key: RowKey::from(uuid),
            fields: Body::from(map),
        });
    }
    Ok(entries)
}
