//! Buffered writes that lost to another body at their address, kept
//! where people and tools can see them.
//!
//! While a master is down, every write to its cluster is answered
//! `Buffered` once the buffers hold it, conflict or not: nothing can
//! compare it with what the master holds. The reconciler finds out later,
//! when the master (or a promoted minion) holds a different body at the
//! address. By then the writer counted the cell written (the relay and
//! the backfill moved on), so dropping the buffered copy with a log line
//! would lose an acknowledged write without a trace.
//!
//! Instead the reconciler first records it in
//! `<instance>_meta.buffer_conflicts` on the master whose buffer held it
//! (both bodies as JSON, when it was buffered and found), then deletes the
//! buffered copy. The record is keyed by the buffered copy's id, so a
//! reconciler killed between the two statements records it once and
//! deletes it on its next pass. With `storage.buffer_secondaries = N` a
//! write is held by N buffers, so the same lost write may be recorded on N
//! masters: [`read`] merges them by address and buffering time.
//!
//! Who reads it:
//! - `mezzanine buffer status` lists them and exits 1 while any is not yet
//!   taken;
//! - the verifier ([`take`], from the gates, `verify report` and
//!   `verify full`) turns each into an open mismatch of the (row, column),
//!   which blocks the cutover gates until `verify repair` settles it, and
//!   marks it taken;
//! - `mirror status` shows how many there are, beside what the relay
//!   counted delivered.

use std::collections::BTreeMap;

use sqlx::Row;

use super::schema::meta_database;
use super::store::MySqlStore;
use super::topology::Node;
use crate::cell::{now_micros, Body, CellKey, Column, RefKey, RowKey};
use crate::error::{Error, Result};

/// `CREATE TABLE` of a master's lost buffered writes.
pub fn create_conflicts_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`buffer_conflicts` (
            buffer_id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
            row_key BINARY(16) NOT NULL,
            column_name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            ref_key BIGINT NOT NULL,
            shard INT UNSIGNED NOT NULL,
            buffered_body LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
            stored_body LONGTEXT CHARACTER SET utf8mb4,
            buffered_at BIGINT NOT NULL,
            found_at BIGINT NOT NULL,
            taken_at BIGINT
        ) ENGINE=InnoDB"
    )
}

/// A buffered write the reconciler found beaten by another body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostWrite {
    /// The address.
    pub key: CellKey,
    /// The body that was buffered and acknowledged, as JSON.
    pub buffered_body: String,
    /// What the address holds, as JSON (`None`: not read).
    pub stored_body: Option<String>,
    /// When it was buffered, microseconds since the epoch.
    pub buffered_at: i64,
    /// When the reconciler found it lost.
    pub found_at: i64,
    /// When the verifier took it as a mismatch, if it has.
    pub taken_at: Option<i64>,
    /// Where it is recorded: (master label, buffered copy's id).
    pub records: Vec<(String, u64)>,
}

/// One lost write, as the reconciler found it.
pub(super) struct Found {
    pub buffer_id: u64,
    pub shard: u32,
    pub key: CellKey,
    pub buffered: Body,
    pub stored: Option<Body>,
    pub buffered_at: i64,
}

/// Records `found` on `node` (the master whose buffer held them), once per
/// buffered copy. Fails if it cannot: the copies must then stay buffered.
pub(super) async fn record(node: &Node, meta: &str, found: &[Found]) -> Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    node.execute(create_conflicts_table(meta)).await?;
    let now = now_micros();
    for f in found {
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT IGNORE INTO `{meta}`.`buffer_conflicts`
                 (buffer_id, row_key, column_name, ref_key, shard, buffered_body, stored_body, buffered_at, found_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )))
        .bind(f.buffer_id)
        .bind(f.key.row_key.as_bytes().to_vec())
        .bind(f.key.column.as_str().to_string())
        .bind(f.key.ref_key.get())
        .bind(f.shard)
        .bind(f.buffered.to_string())
        .bind(f.stored.as_ref().map(|b| b.to_string()))
        .bind(f.buffered_at)
        .bind(now);
        node.execute_prepared(query).await?;
    }
    tracing::warn!(
        node = %node.label,
        "{} buffered writes lost to another body at their address; recorded in buffer_conflicts",
        found.len()
    );
    metrics::counter!("mezzanine_schemaless_buffer_conflicts_recorded_total")
        .increment(found.len() as u64);
    Ok(())
}

/// Every recorded lost write (`untaken_only`: those the verifier has not
/// taken), merged across masters, oldest first; and the masters that could
/// not be read, with why.
pub async fn read(
    store: &MySqlStore,
    untaken_only: bool,
) -> (Vec<LostWrite>, Vec<(String, Error)>) {
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    let mut merged: BTreeMap<(i64, CellKey), LostWrite> = BTreeMap::new();
    let mut failed = Vec::new();
    for cluster in &topology.clusters {
        let node = cluster.master();
        match read_node(&node, &meta, untaken_only).await {
            Ok(found) => {
                for (id, lost) in found {
                    let entry = merged
                        .entry((lost.buffered_at, lost.key.clone()))
                        .or_insert_with(|| LostWrite {
                            records: Vec::new(),
                            ..lost.clone()
                        });
                    entry.records.push((node.label.clone(), id));
                    entry.taken_at = entry.taken_at.max(lost.taken_at);
                    entry.stored_body = entry.stored_body.take().or(lost.stored_body);
                }
            }
            Err(e) => failed.push((node.label.clone(), e)),
        }
    }
    let mut out: Vec<LostWrite> = merged.into_values().collect();
    out.sort_by_key(|l| (l.found_at, l.buffered_at));
    metrics::gauge!("mezzanine_schemaless_buffer_conflicts_untaken")
        .set(out.iter().filter(|l| l.taken_at.is_none()).count() as f64);
    (out, failed)
}

async fn read_node(node: &Node, meta: &str, untaken_only: bool) -> Result<Vec<(u64, LostWrite)>> {
    let rows = match node
        .fetch_all(format!(
            "SELECT buffer_id, row_key, column_name, ref_key, buffered_body, stored_body, \
                    buffered_at, found_at, taken_at \
             FROM `{meta}`.`buffer_conflicts`{} ORDER BY buffer_id",
            if untaken_only {
                " WHERE taken_at IS NULL"
            } else {
                ""
            }
        ))
        .await
    {
        Ok(rows) => rows,
        Err(e) if e.is_missing_table() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    rows.iter()
        .map(|row| {
            let row_key: Vec<u8> = row.try_get(1).map_err(|e| node.error(e))?;
            let column: String = row.try_get(2).map_err(|e| node.error(e))?;
            let ref_key: i64 = row.try_get(3).map_err(|e| node.error(e))?;
            let key = CellKey {
                row_key: RowKey::from_slice(&row_key).ok_or_else(|| {
                    Error::Schema(format!(
                        "{}: a recorded lost write's row key is not 16 bytes",
                        node.label
                    ))
                })?,
                column: Column::new(&column).map_err(|e| {
                    Error::Schema(format!(
                        "{}: a recorded lost write's column: {e}",
                        node.label
                    ))
                })?,
                ref_key: RefKey::new(ref_key).map_err(|e| {
                    Error::Schema(format!(
                        "{}: a recorded lost write's ref key: {e}",
                        node.label
                    ))
                })?,
            };
            Ok((
                row.try_get(0).map_err(|e| node.error(e))?,
                LostWrite {
                    key,
                    buffered_body: row.try_get(4).map_err(|e| node.error(e))?,
                    stored_body: row.try_get(5).map_err(|e| node.error(e))?,
                    buffered_at: row.try_get(6).map_err(|e| node.error(e))?,
                    found_at: row.try_get(7).map_err(|e| node.error(e))?,
                    taken_at: row.try_get(8).map_err(|e| node.error(e))?,
                    records: Vec::new(),
                },
            ))
        })
        .collect()
}

/// Marks `lost` taken by the verifier on every master that records it.
pub async fn mark_taken(store: &MySqlStore, lost: &[LostWrite]) -> Result<()> {
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    let mut by_node: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for l in lost {
        for (node, id) in &l.records {
            by_node.entry(node.as_str()).or_default().push(*id);
        }
    }
    let now = now_micros();
    for cluster in &topology.clusters {
        let node = cluster.master();
        let Some(ids) = by_node.get(node.label.as_str()) else {
            continue;
        };
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        node.execute(format!(
            "UPDATE `{meta}`.`buffer_conflicts` SET taken_at = {now} \
             WHERE taken_at IS NULL AND buffer_id IN ({})",
            ids.join(",")
        ))
        .await?;
    }
    Ok(())
}
