//! Damaged stored cells, set aside so that nothing waits on them.
//!
//! A body that no longer decodes (damaged on disk, written by something
//! that is not this store) used to stop every reader that met it: a
//! change-log follower stayed at that cell for ever, a write to its
//! address failed its whole batch on every retry, a reconciler pass
//! aborted. Readers that walk many cells now record it in
//! `<instance>_meta.damaged_cells` on its master (where, what could be
//! read of its address, why), count it in `mezzanine_schemaless_damaged_cells_total`,
//! and go on without it:
//!
//! - change-log followers (triggers, index maintainers, the reverse
//!   mirror) skip it;
//! - a write to its address is answered `Conflict` for that cell alone
//!   (the relay parks it, naming the damage);
//! - the buffer reconciler leaves it in the buffer and drains the rest.
//!
//! A point read of it still fails, naming the cell: a caller asking for
//! exactly that cell must not be told it does not exist. `cluster status`
//! shows how many each master holds; repair the cell from the source of
//! truth (`verify repair`) and delete its row here.

use sqlx::mysql::MySqlRow;

use super::schema::meta_database;
use super::store::{decode_row, MySqlStore};
use super::topology::Node;
use crate::cell::{CellKey, Column, RefKey, RowKey, StoredCell};
use crate::error::{Error, Result};

/// `CREATE TABLE` of a master's damaged cells.
pub fn create_damaged_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`damaged_cells` (
            source VARCHAR(16) CHARACTER SET ascii NOT NULL,
            shard INT UNSIGNED NOT NULL,
            added_id BIGINT UNSIGNED NOT NULL,
            cell VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
            reason TEXT CHARACTER SET utf8mb4 NOT NULL,
            found_at BIGINT NOT NULL,
            PRIMARY KEY (source, shard, added_id)
        ) ENGINE=InnoDB"
    )
}

/// Rows decoded: the cells, and the damaged ones (with their address when
/// that much could be read).
pub(crate) struct Decoded {
    pub cells: Vec<StoredCell>,
    pub damaged: Vec<(Option<CellKey>, Error)>,
}

/// Decodes `rows` of `shard`, setting damaged ones aside (recorded on
/// `master` as found in `source`: `entity` or `buffer`).
pub(crate) async fn decode_rows(
    store: &MySqlStore,
    master: &Node,
    source: &str,
    rows: &[MySqlRow],
    shard_of: impl Fn(&MySqlRow) -> Result<u32>,
) -> Result<Decoded> {
    let mut out = Decoded {
        cells: Vec::with_capacity(rows.len()),
        damaged: Vec::new(),
    };
    for row in rows {
        let shard = shard_of(row)?;
        match decode_row(row, shard, store.inflated_cap()) {
            Ok(cell) => out.cells.push(cell),
            Err(e @ Error::CorruptCell { .. }) => {
                record(store, master, source, &e).await;
                out.damaged.push((key_of(row), e));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The address of a row whose body is damaged, if the address is intact.
fn key_of(row: &MySqlRow) -> Option<CellKey> {
    use sqlx::Row;
    let row_key: Vec<u8> = row.try_get(1).ok()?;
    let column: String = row.try_get(2).ok()?;
    let ref_key: i64 = row.try_get(3).ok()?;
    Some(CellKey {
        row_key: RowKey::from_slice(&row_key)?,
        column: Column::new(&column).ok()?,
        ref_key: RefKey::new(ref_key).ok()?,
    })
}

/// Records a damaged cell (once: the row is keyed by where it was found)
/// and counts it. Best effort: a failure to record is logged, and the
/// reader goes on all the same.
pub(crate) async fn record(store: &MySqlStore, master: &Node, source: &str, damage: &Error) {
    let Error::CorruptCell {
        cell,
        shard,
        added_id,
        reason,
    } = damage
    else {
        return;
    };
    // Once per process: a follower meets it again at every recheck.
    static SEEN: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    let seen = format!("{}/{source}/{shard}/{added_id}", store.topology().instance);
    if !SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(seen)
    {
        return;
    }
    tracing::error!(
        source,
        "damaged cell {cell} (shard {shard}, added_id {added_id}) set aside: {reason}"
    );
    let meta = meta_database(&store.topology().instance);
    let query = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT IGNORE INTO `{meta}`.`damaged_cells` (source, shard, added_id, cell, reason, found_at)
         VALUES (?, ?, ?, ?, ?, ?)"
    )))
    .bind(source.to_string())
    .bind(*shard)
    .bind(*added_id)
    .bind(cell.chars().take(255).collect::<String>())
    .bind(reason.clone())
    .bind(crate::cell::now_micros());
    match master.execute_prepared(query).await {
        Ok(()) => metrics::counter!("mezzanine_schemaless_damaged_cells_total").increment(1),
        Err(e) => tracing::warn!("recording damaged cell {cell}: {e}"),
    }
}

/// How many damaged cells each master has set aside.
pub async fn counts(store: &MySqlStore) -> Vec<(String, Result<u64>)> {
    let meta = meta_database(&store.topology().instance);
    let mut out = Vec::new();
    for cluster in &store.topology().clusters {
        let node = cluster.master();
        let count = node
            .fetch_all(format!(
                "SELECT CAST(COUNT(*) AS UNSIGNED) FROM `{meta}`.`damaged_cells`"
            ))
            .await
            .and_then(|rows| {
                use sqlx::Row;
                rows.first()
                    .map(|r| r.try_get::<u64, _>(0).map_err(|e| node.error(e)))
                    .unwrap_or(Ok(0))
            });
        let count = match count {
            Err(e) if e.is_missing_table() => Ok(0),
            other => other,
        };
        out.push((node.label.clone(), count));
    }
    out
}
