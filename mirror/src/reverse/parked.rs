//! Cells the legacy model refused, parked with the reason, and retried.

use super::*;

/// Applies parked change-log cells again (after the cause was fixed, e.g.
/// the parent row now exists); those that now apply leave the parked
/// table. Returns (applied, still parked).
pub async fn retry_parked(legacy: &LegacyStore) -> Result<(u64, u64), Error> {
    let context = "retrying parked reverse cells";
    let rows = sqlx::query(
        "/* mezzanine */ SELECT shard, added_id, row_key, column_name, ref_key, body FROM mezzanine.reverse_parked
         ORDER BY shard, added_id",
    )
    .fetch_all(legacy.pool())
    .await
    .map_err(Error::postgres(context))?;
    let (mut applied, mut still) = (0, 0);
    let one = OnItsOwn {
        tombstones: legacy.tombstones().clone(),
    };
    for row in rows {
        let shard: i32 = row.try_get(0).map_err(Error::postgres(context))?;
        let added_id: i64 = row.try_get(1).map_err(Error::postgres(context))?;
        let cell = parked_cell(&row);
        let outcome = match cell {
            Ok(cell) => match legacy.put_cells_with(vec![cell], &one).await {
                // Still a conflict: it stays parked.
                Ok(results) if results.iter().any(|r| r.is_err()) => {
                    Err(schemaless::Error::invalid("body", conflict_reason()))
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
            Err(reason) => Err(schemaless::Error::invalid("body", reason)),
        };
        match outcome {
            Ok(()) => {
                sqlx::query(
                    "/* mezzanine */ DELETE FROM mezzanine.reverse_parked WHERE shard = $1 AND added_id = $2",
                )
                .bind(shard)
                .bind(added_id)
                .execute(legacy.pool())
                .await
                .map_err(Error::postgres(context))?;
                applied += 1;
            }
            Err(e) if e.is_retryable() => return Err(e.into()),
            Err(e) => {
                sqlx::query(
                    "/* mezzanine */ UPDATE mezzanine.reverse_parked SET error = $3, parked_at = now()
                     WHERE shard = $1 AND added_id = $2",
                )
                .bind(shard)
                .bind(added_id)
                .bind(e.to_string())
                .execute(legacy.pool())
                .await
                .map_err(Error::postgres(context))?;
                still += 1;
            }
        }
    }
    Ok((applied, still))
}

fn parked_cell(row: &sqlx::postgres::PgRow) -> Result<Cell, String> {
    let row_key: uuid::Uuid = row.try_get(2).map_err(|e| e.to_string())?;
    let column: String = row.try_get(3).map_err(|e| e.to_string())?;
    let ref_key: i64 = row.try_get(4).map_err(|e| e.to_string())?;
    let body: String = row.try_get(5).map_err(|e| e.to_string())?;
    Ok(Cell::new(
        schemaless::RowKey::from(row_key),
        schemaless::Column::new(&column).map_err(|e| e.to_string())?,
        schemaless::RefKey::new(ref_key).map_err(|e| e.to_string())?,
        schemaless::Body::parse(&body).map_err(|e| e.to_string())?,
    ))
}
