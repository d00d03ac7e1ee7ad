//! Index queries: one shard-field value's entries of the active version,
//! read from the one shard that holds them, filtered, ordered, limited.

use sqlx::{AssertSqlSafe, Row};

use super::version::active_version;
use super::*;

/// Answers an index query from the active version, on one shard.
pub(crate) async fn query(
    store: &MySqlStore,
    query: &IndexQuery,
    from: ReadFrom,
) -> Result<crate::api::Answer<Vec<IndexEntry>>> {
    let spec = spec(store, &query.index)?;
    let checked = spec.check(query)?;
    let version = active_version(store, &spec.name).await?;
    let topology = store.topology();
    let shard = shard_of_bytes(&checked.shard_value.routing_bytes(), topology.shard_count);
    let column_of = |field: &str| -> String {
        if field == spec.shard_field {
            "shard_value".to_string()
        } else {
            let i = spec
                .fields
                .iter()
                .position(|f| f == field)
                .expect("checked");
            format!("f{i}")
        }
    };
    let mut sql = format!(
        "SELECT row_key, fields FROM `{}`.`{}` WHERE shard_value = ?",
        topology.database(shard),
        entry_table(&spec.name, version)
    );
    let mut values: Vec<IndexValue> = vec![checked.shard_value.clone()];
    for (field, op, candidates) in &checked.filters {
        let column = column_of(field);
        let op = match op {
            crate::api::FilterOp::Eq => "=",
            crate::api::FilterOp::Lt => "<",
            crate::api::FilterOp::Le => "<=",
            crate::api::FilterOp::Gt => ">",
            crate::api::FilterOp::Ge => ">=",
            crate::api::FilterOp::In => {
                let marks = vec!["?"; candidates.len()].join(", ");
                sql.push_str(&format!(" AND {column} IN ({marks})"));
                values.extend(candidates.iter().cloned());
                continue;
            }
        };
        sql.push_str(&format!(" AND {column} {op} ?"));
        values.push(candidates[0].clone());
    }
    let direction = if checked.descending { "DESC" } else { "ASC" };
    sql.push_str(" ORDER BY ");
    if let Some(order) = &checked.order_by {
        let column = column_of(order);
        sql.push_str(&format!("({column} IS NULL), {column} {direction}, "));
    }
    sql.push_str(&format!("row_key {direction} LIMIT {}", checked.limit));
    store
        .read_failover(shard, from, |node| {
            let mut q = sqlx::query(AssertSqlSafe(sql.clone()));
            for value in &values {
                q = bind(q, Some(value));
            }
            let spec = &spec;
            async move {
                let mut conn = node.acquire().await?;
                let rows = node.run(&mut conn, |c| Box::pin(q.fetch_all(c))).await?;
                rows.iter()
                    .map(|r| {
                        let row_key: Vec<u8> = r.try_get(0).map_err(|e| node.error(e))?;
                        let fields: String = r.try_get(1).map_err(|e| node.error(e))?;
                        let row_key =
                            RowKey::from_slice(&row_key).ok_or_else(|| Error::CorruptCell {
                                cell: format!("index {} entry", spec.name),
                                shard,
                                added_id: 0,
                                reason: "row key is not 16 bytes".into(),
                            })?;
                        let fields = Body::parse(&fields).map_err(|e| Error::CorruptCell {
                            cell: format!("index {} entry of {row_key}", spec.name),
                            shard,
                            added_id: 0,
                            reason: e.to_string(),
                        })?;
                        Ok(IndexEntry { row_key, fields })
                    })
                    .collect::<Result<Vec<_>>>()
            }
        })
        .await
}
