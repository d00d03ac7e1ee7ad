//! The write path: a batch encoded whole, grouped by shard and master,
//! each master's groups written in one transaction (group commit), and
//! the careful path that compares existing cells and inserts only what
//! is missing. See the module docs of [`super`] for the rules.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use sqlx::AssertSqlSafe;

use super::{MySqlStore, Pending};
use crate::api::{CellResult, Conflict, WriteOutcome};
use crate::cell::{check_batch, now_micros, Body, Cell, CellKey};
use crate::codec;
use crate::error::{Error, Result};
use crate::mysql::commit::Groups;
use crate::mysql::sql;
use crate::mysql::topology::Node;

/// How often a group redoes its comparison when concurrent writers keep
/// inserting the same addresses between its read and its insert.
const MAX_INSERT_ATTEMPTS: usize = 8;

fn row(p: &Pending, created_at: i64) -> sql::InsertRow<'_> {
    sql::InsertRow {
        key: &p.cell.key,
        body: &p.encoded,
        created_at,
    }
}

/// Inserts rows with autocommit: small rows as one literal multi-row
/// statement, large bodies one at a time as bound parameters (a hex
/// literal would double their size on the wire).
async fn insert<'a>(
    node: &Node,
    database: &str,
    items: impl IntoIterator<Item = &'a Pending>,
    created_at: i64,
) -> Result<()> {
    let (large, small): (Vec<&Pending>, Vec<&Pending>) =
        items.into_iter().partition(|p| sql::needs_bind(&p.encoded));
    for statement in sql::insert_cells(
        database,
        small.iter().map(|p| row(p, created_at)),
        node.packet_budget(),
    ) {
        node.execute(statement).await?;
    }
    for p in large {
        let query = sqlx::query(AssertSqlSafe(sql::insert_one_bound(database)))
            .bind(p.cell.key.row_key.as_bytes().to_vec())
            .bind(p.cell.key.column.as_str().to_string())
            .bind(p.cell.key.ref_key.get())
            .bind(p.encoded.clone())
            .bind(created_at);
        node.execute_prepared(query).await?;
    }
    Ok(())
}

impl MySqlStore {
    /// [`CellStore::put_cells`](crate::CellStore::put_cells): validate
    /// and encode the whole batch, group it by shard and master, write
    /// the masters in parallel and wake this process's followers.
    pub(super) async fn put(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        check_batch(&cells, &self.inner.limits)?;
        let count = cells.len();
        // Encode everything before writing anything: a body that cannot be
        // stored must fail the call with nothing written.
        let mut groups: BTreeMap<u32, Vec<Pending>> = BTreeMap::new();
        for (index, cell) in cells.into_iter().enumerate() {
            let encoded = codec::encode(&cell.body, self.inner.inflated_cap).map_err(|e| {
                Error::invalid("body", format!("cannot be stored: {e}")).in_batch(index)
            })?;
            groups
                .entry(self.shard_of(&cell.key.row_key))
                .or_default()
                .push(Pending {
                    index,
                    cell,
                    encoded,
                });
        }
        // Shard groups of one master are written together, in one
        // transaction: one commit (and one binlog group) per node instead
        // of one per shard. Shards in ascending order and rows sorted by
        // address give every writer the same lock order, so overlapping
        // batches wait for each other instead of deadlocking. The sort is
        // stable: copies of one address keep their batch order.
        let mut todo: Vec<(u32, Vec<Pending>)> = groups
            .into_iter()
            .map(|(shard, mut items)| {
                items.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
                (shard, items)
            })
            .collect();
        let shards: Vec<u32> = todo.iter().map(|(shard, _)| *shard).collect();
        let mut results: Vec<Option<CellResult>> = vec![None; count];
        // A cluster's part that meets a shard move goes again, to where
        // the placements put its shards then (see `moving`).
        let waited = std::time::Instant::now();
        while !todo.is_empty() {
            let mut by_node: BTreeMap<usize, Vec<(u32, Vec<Pending>)>> = BTreeMap::new();
            for (shard, items) in todo {
                by_node
                    .entry(self.inner.topology.cluster_index(shard)?)
                    .or_default()
                    .push((shard, items));
            }
            let mut writes = futures::stream::iter(by_node.into_iter().map(|(cluster, groups)| {
                let groups = Arc::new(groups);
                async move {
                    (
                        cluster,
                        groups.clone(),
                        self.write_cluster(cluster, groups).await,
                    )
                }
            }))
            .buffer_unordered(self.inner.topology.clusters.len().max(1));
            todo = Vec::new();
            while let Some((cluster, groups, outcome)) = writes.next().await {
                match outcome {
                    Ok(node_results) => {
                        for (index, result) in node_results {
                            results[index] = Some(result);
                        }
                    }
                    Err(e) => {
                        let of_groups: Vec<u32> = groups.iter().map(|(s, _)| *s).collect();
                        if !self.follows_move(&e, &of_groups, cluster, waited).await {
                            return Err(e);
                        }
                        todo.extend(groups.iter().map(|(shard, items)| {
                            (*shard, items.iter().map(Pending::again).collect())
                        }));
                    }
                }
            }
        }
        for shard in shards {
            self.inner.signal.notify(shard);
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every cell belongs to exactly one group"))
            .collect())
    }

    /// Writes shard groups of one master, with no buffering: the
    /// reconciler's replays.
    pub(in crate::mysql) async fn write_master(
        &self,
        groups: Vec<(u32, Vec<Pending>)>,
    ) -> Result<Vec<(usize, CellResult)>> {
        let shards: Vec<u32> = groups.iter().map(|(s, _)| *s).collect();
        let Some(&first) = shards.first() else {
            return Ok(Vec::new());
        };
        let cluster = self.inner.topology.cluster_index(first)?;
        let results = self.write_node(cluster, Arc::new(groups)).await?;
        for shard in shards {
            self.inner.signal.notify(shard);
        }
        Ok(results)
    }

    /// Writes one cluster's part of a batch: to the buffers first when
    /// buffering is on, then to its master. With the master failing after
    /// the buffers took the cells, they are answered `Buffered`.
    async fn write_cluster(
        &self,
        cluster: usize,
        groups: Groups,
    ) -> Result<Vec<(usize, CellResult)>> {
        if self.inner.buffer_secondaries == 0 {
            if self.inner.durability == config::Durability::TwoHosts {
                self.check_durable(cluster).await?;
            }
            return self.write_node(cluster, groups).await;
        }
        let held = crate::mysql::buffer::write(self, cluster, &groups).await?;
        let indexes: Vec<usize> = groups
            .iter()
            .flat_map(|(_, items)| items.iter().map(|p| p.index))
            .collect();
        let keys: HashMap<usize, CellKey> = groups
            .iter()
            .flat_map(|(_, items)| items.iter().map(|p| (p.index, p.cell.key.clone())))
            .collect();
        match self.write_node(cluster, groups).await {
            Ok(results) => {
                // An address the batch also wrote (a second copy of it
                // conflicting with the first) keeps its buffered copies.
                let landed: HashSet<&CellKey> = results
                    .iter()
                    .filter(|(_, r)| r.is_ok())
                    .filter_map(|(i, _)| keys.get(i))
                    .collect();
                let refused: Vec<&CellKey> = results
                    .iter()
                    .filter(|(_, r)| r.is_err())
                    .filter_map(|(i, _)| keys.get(i))
                    .filter(|key| !landed.contains(key))
                    .collect();
                crate::mysql::buffer::forget(self, &held, &refused).await;
                Ok(results)
            }
            Err(e) if e.is_moving() || e.is_missing_table() => {
                // The write goes again where the shard is now, buffered
                // again there: these copies are not needed.
                let all: Vec<&CellKey> = keys.values().collect();
                crate::mysql::buffer::forget(self, &held, &all).await;
                Err(e)
            }
            Err(e) if e.is_unavailable() => {
                tracing::debug!(
                    "master unavailable, {} cells handed off: {e}",
                    indexes.len()
                );
                metrics::counter!("mezzanine_schemaless_writes_handed_off_total")
                    .increment(indexes.len() as u64);
                Ok(indexes
                    .into_iter()
                    .map(|i| (i, Ok(WriteOutcome::Buffered)))
                    .collect())
            }
            Err(e) => Err(e),
        }
    }

    /// With `storage.durability = "two_hosts"` and no buffering, refuses a
    /// write to a master whose replication would not hold it on a second
    /// host before the commit returns (see [`crate::mysql::topology::SemiSync`]).
    async fn check_durable(&self, cluster: usize) -> Result<()> {
        let master = self.inner.topology.clusters[cluster].master();
        let cached = master
            .semi_sync()
            .and_then(|settings| settings.gap(master.request_timeout).map(|_| ()));
        if master.semi_sync().is_some() && cached.is_none() {
            return Ok(());
        }
        // Unknown, or short of durable as last read: read again before
        // refusing (a promotion turns it on for a node that was a minion).
        let settings = master.refresh_semi_sync().await?;
        match settings.gap(master.request_timeout) {
            None => Ok(()),
            Some(reason) => Err(Error::NotDurable {
                node: master.label.clone(),
                reason,
            }),
        }
    }

    /// Writes the shard groups of one master. The fast path is one
    /// transaction, combined with other calls' (see [`crate::mysql::commit`]):
    /// one multi-row `INSERT` per shard. If any address already exists the
    /// transaction is rolled back whole and every group takes the careful
    /// path ([`MySqlStore::write_group`]), which compares and inserts what
    /// is missing.
    ///
    /// `cluster` is the one the groups were made for, not looked up again:
    /// a shard placed elsewhere since must not take the others of its
    /// group along (they would land where they do not live). A write to a
    /// shard that moved meets its old home's fence and goes again.
    async fn write_node(&self, cluster: usize, groups: Groups) -> Result<Vec<(usize, CellResult)>> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let fast = groups.iter().all(|(_, items)| {
            let mut seen = HashSet::with_capacity(items.len());
            items
                .iter()
                .all(|p| seen.insert(&p.cell.key) && !sql::needs_bind(&p.encoded))
        });
        if fast {
            match self.inner.committers[cluster]
                .write(self, cluster, groups.clone())
                .await
            {
                crate::mysql::commit::Outcome::Written => {
                    return Ok(groups
                        .iter()
                        .flat_map(|(_, items)| {
                            items.iter().map(|p| (p.index, Ok(WriteOutcome::Written)))
                        })
                        .collect())
                }
                crate::mysql::commit::Outcome::Alone => {}
                crate::mysql::commit::Outcome::Failed(e) => return Err(e),
            }
        }
        let writes: Vec<_> = groups
            .iter()
            .map(|(shard, items)| self.write_group(*shard, items.as_slice()))
            .collect();
        let results: Vec<Vec<(usize, CellResult)>> = futures::stream::iter(writes)
            .buffer_unordered(self.inner.write_parallelism)
            .try_collect()
            .await?;
        Ok(results.into_iter().flatten().collect())
    }

    /// The careful path for one shard: read what exists, compare, insert
    /// only what is missing, and redo it if a concurrent writer got there
    /// first.
    async fn write_group(&self, shard: u32, items: &[Pending]) -> Result<Vec<(usize, CellResult)>> {
        let node = &self.inner.topology.cluster(shard)?.master();
        let database = self.inner.topology.database(shard);
        let mut last_error = None;
        for _ in 0..MAX_INSERT_ATTEMPTS {
            let read = self.read_keys(node, shard, &database, items).await?;
            let existing = read.cells;
            // A damaged cell holds its address: a write there is a
            // conflict for that cell alone (set aside, see `damaged`).
            let damaged: HashSet<CellKey> = read
                .damaged
                .into_iter()
                .filter_map(|(key, _)| key)
                .collect();
            // Cells take effect in batch order: the first copy of a new
            // address is written, later copies compare against it.
            let mut effective: HashMap<&CellKey, &Body> = existing
                .iter()
                .map(|c| (&c.cell.key, &c.cell.body))
                .collect();
            let mut results = Vec::with_capacity(items.len());
            let mut to_insert = Vec::new();
            for p in items {
                if damaged.contains(&p.cell.key) {
                    results.push((
                        p.index,
                        Err(Conflict {
                            key: p.cell.key.clone(),
                        }),
                    ));
                    continue;
                }
                let outcome = match effective.get(&p.cell.key) {
                    Some(body) if **body == p.cell.body => Ok(WriteOutcome::AlreadyPresent),
                    Some(_) => Err(Conflict {
                        key: p.cell.key.clone(),
                    }),
                    None => {
                        effective.insert(&p.cell.key, &p.cell.body);
                        to_insert.push(p);
                        Ok(WriteOutcome::Written)
                    }
                };
                results.push((p.index, outcome));
            }
            if to_insert.is_empty() {
                return Ok(results);
            }
            match insert(node, &database, to_insert.iter().copied(), now_micros()).await {
                Ok(()) => return Ok(results),
                Err(e) if e.is_unique_violation() || e.is_lock_conflict() => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("the loop only continues after a duplicate or a lock conflict"))
    }

    async fn read_keys(
        &self,
        node: &Node,
        shard: u32,
        database: &str,
        items: &[Pending],
    ) -> Result<crate::mysql::damaged::Decoded> {
        let keys: HashSet<&CellKey> = items.iter().map(|p| &p.cell.key).collect();
        let sql = sql::select_keys(database, keys);
        self.fetch_setting_aside(node, shard, sql).await
    }
}
