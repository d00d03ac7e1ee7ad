//! Replaying the buffers at a promotion: the buffered writes of a cluster
//! written to its new master before the promotion is recorded, so that the
//! first acknowledged write of each address wins (see
//! [`super::failover::promote`]).

use std::collections::{BTreeMap, HashMap};

use sqlx::Row;

use super::schema::meta_database;
use super::store::{decode_row, MySqlStore, Pending};
use crate::cell::{Body, CellKey};
use crate::error::Result;

/// What [`replay_cluster`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Buffered cells written (or already there).
    pub replayed: u64,
    /// Buffered cells whose address held another body already; the
    /// reconciler records them as lost (see [`super::lost`]).
    pub conflicts: u64,
    /// Later buffered writes to an address an earlier one took.
    pub later_writes: u64,
    /// Buffers that could not be read, with why: what they hold is
    /// replayed by the reconciler once they answer.
    pub unread: Vec<String>,
}

/// Writes every buffered cell of cluster `cluster` to its master as this
/// store's topology names it, oldest first and the first write of each
/// address alone, so that the first acknowledged write wins. A promotion
/// runs it after the new master takes writes and before the promotion is
/// recorded, that is before any other store sends it a write; the copies
/// stay buffered for the reconciler to drain once replicated.
pub async fn replay_cluster(store: &MySqlStore, cluster: usize) -> Result<Replayed> {
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    let mut out = Replayed::default();
    // (buffered at, table, id) -> the cell.
    let mut found: BTreeMap<(i64, usize, u64), (u32, Pending)> = BTreeMap::new();
    for (table, owner) in topology.clusters.iter().enumerate() {
        if table == cluster {
            continue;
        }
        let node = owner.master();
        let mut after = 0u64;
        loop {
            let rows = match super::buffer::page(&node, &meta, after).await {
                Ok(rows) => rows,
                Err(e) => {
                    out.unread.push(format!("{}: {e}", node.label));
                    break;
                }
            };
            let Some(last) = rows.last() else { break };
            after = last.try_get(0).map_err(|e| node.error(e))?;
            for row in &rows {
                let shard: u32 = row.try_get(6).map_err(|e| node.error(e))?;
                if topology.cluster_index(shard)? != cluster {
                    continue;
                }
                // Damaged copies are the reconciler's to set aside.
                let Ok(stored) = decode_row(row, shard, store.inflated_cap()) else {
                    continue;
                };
                let encoded: Vec<u8> = row.try_get(4).map_err(|e| node.error(e))?;
                found.insert(
                    (stored.created_at, table, stored.added_id),
                    (
                        shard,
                        Pending {
                            index: 0,
                            cell: stored.cell,
                            encoded,
                        },
                    ),
                );
            }
        }
    }
    let mut first: HashMap<CellKey, Body> = HashMap::new();
    let mut groups: BTreeMap<u32, Vec<Pending>> = BTreeMap::new();
    for (index, (shard, mut pending)) in found.into_values().enumerate() {
        match first.get(&pending.cell.key) {
            Some(body) => {
                if *body != pending.cell.body {
                    out.later_writes += 1;
                }
                continue;
            }
            None => {
                first.insert(pending.cell.key.clone(), pending.cell.body.clone());
            }
        }
        pending.index = index;
        groups.entry(shard).or_default().push(pending);
    }
    // A few shards' groups per write, so no transaction holds the whole
    // backlog.
    let mut batch = Vec::new();
    let mut cells = 0;
    let mut groups = groups.into_iter().peekable();
    while let Some((shard, mut items)) = groups.next() {
        items.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
        cells += items.len();
        batch.push((shard, items));
        if cells >= super::buffer::PAGE || groups.peek().is_none() {
            for (_, result) in store.write_master(std::mem::take(&mut batch)).await? {
                match result {
                    Ok(_) => out.replayed += 1,
                    Err(_) => out.conflicts += 1,
                }
            }
            cells = 0;
        }
    }
    Ok(out)
}
