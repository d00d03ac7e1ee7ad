//! Dead letters: a cell whose handler failed `triggers.max_tries` times
//! is parked with its last error; [`retry_parked`] flags them, and the
//! owning runner calls the handler on them again. A runner stops when its
//! shards hold more than `triggers.max_parked`.

use std::sync::atomic::Ordering;

use sqlx::Row;

use super::worker::{Handled, ShardWorker};
use super::{check_name, literal, Stopped};
use crate::api::{CellStore, ReadFrom};
use crate::cell::{now_micros, CellKey, Column, RefKey, RowKey, StoredCell};
use crate::error::{Error, Result};
use crate::mysql::store::MySqlStore;

impl ShardWorker {
    pub(super) async fn check_parked(&self, total: u64) {
        let limit = self.shared.options.max_parked;
        if total > limit {
            let _ = self.stop.try_send(Stopped::TooManyParked {
                parked: total,
                limit,
            });
        }
    }

    pub(super) async fn park(&self, cell: &StoredCell, tries: u32, error: &str) -> Result<()> {
        let s = &self.shared;
        let db = s.database(self.shard);
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO `{db}`.`trigger_dead_letters`
               (name, added_id, row_key, column_name, ref_key, tries, error, parked_at, retry)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)
             ON DUPLICATE KEY UPDATE tries = VALUES(tries), error = VALUES(error),
               parked_at = VALUES(parked_at), retry = 0"
        )))
        .bind(s.name.clone())
        .bind(cell.added_id)
        .bind(cell.cell.key.row_key.as_bytes().to_vec())
        .bind(cell.cell.key.column.as_str().to_string())
        .bind(cell.cell.key.ref_key.get())
        .bind(tries)
        .bind(error.chars().take(4000).collect::<String>())
        .bind(now_micros());
        s.master(self.shard)?.execute_prepared(query).await?;
        s.stats.parked.fetch_add(1, Ordering::Relaxed);
        let total = s.parked.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            trigger = %s.name,
            shard = self.shard,
            "parked {} (added_id {}) after {tries} tries: {error}",
            cell.cell.key,
            cell.added_id
        );
        self.check_parked(total).await;
        Ok(())
    }

    /// Calls the handler again on parked cells flagged for retry; those
    /// that succeed leave the dead letters.
    pub(super) async fn retry_flagged(&self, counted_parked: &mut u64) -> Result<()> {
        let s = &self.shared;
        let db = s.database(self.shard);
        let master = s.master(self.shard)?;
        let rows = master
            .fetch_all(format!(
                "SELECT added_id, row_key, column_name, ref_key FROM `{db}`.`trigger_dead_letters`
                 WHERE name = {} AND retry = 1 ORDER BY added_id LIMIT 100",
                literal(&s.name)
            ))
            .await?;
        for row in rows {
            let added_id: u64 = row.try_get(0).map_err(|e| master.error(e))?;
            let row_key: Vec<u8> = row.try_get(1).map_err(|e| master.error(e))?;
            let column: String = row.try_get(2).map_err(|e| master.error(e))?;
            let ref_key: i64 = row.try_get(3).map_err(|e| master.error(e))?;
            let key = CellKey {
                row_key: RowKey::from_slice(&row_key)
                    .ok_or_else(|| Error::Schema(format!("dead letter {added_id}: bad row key")))?,
                column: Column::new(&column)?,
                ref_key: RefKey::new(ref_key)?,
            };
            let Some(mut cell) = s.store.get_cell(&key, ReadFrom::Master).await? else {
                continue;
            };
            cell.added_id = added_id;
            match self.handle(&cell).await? {
                Handled::Done => {
                    master
                        .execute(format!(
                            "DELETE FROM `{db}`.`trigger_dead_letters` WHERE name = {} AND added_id = {added_id}",
                            literal(&s.name)
                        ))
                        .await?;
                    *counted_parked = counted_parked.saturating_sub(1);
                    s.parked.fetch_sub(1, Ordering::Relaxed);
                }
                // Parked again (retry flag cleared) or stopping.
                Handled::Parked => {
                    s.parked.fetch_sub(1, Ordering::Relaxed);
                }
                Handled::Stop | Handled::Halt => return Ok(()),
            }
        }
        Ok(())
    }
}

/// Flags every parked cell of trigger `name` for retry; the runners owning
/// their shards call the handler on them again. Returns how many.
pub async fn retry_parked(store: &MySqlStore, name: &str) -> Result<u64> {
    check_name(name)?;
    let topology = store.topology();
    let mut flagged = 0;
    for shard in 0..topology.shard_count {
        let master = &topology.cluster(shard)?.master();
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE `{}`.`trigger_dead_letters` SET retry = 1 WHERE name = ? AND retry = 0",
            topology.database(shard)
        )))
        .bind(name.to_string());
        let mut conn = master.acquire().await?;
        let done = master
            .run(&mut conn, |c| Box::pin(query.execute(c)))
            .await?;
        flagged += done.rows_affected();
    }
    Ok(flagged)
}
