//! The reconciler: every master's buffer table walked, each buffered
//! cell deleted once its cluster holds it, replayed to its master when
//! the primary write never landed, or recorded as lost to another body.

use super::*;

/// What one reconciler pass did, over every buffer table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Buffered cells written to their master.
    pub replayed: u64,
    /// Buffered copies deleted because the cell is safe on its cluster.
    pub drained: u64,
    /// Buffered cells whose address holds a different body: deleted.
    pub conflicts: u64,
    /// Buffered cells left for a later pass (master down, not yet
    /// replicated, or too young to replay).
    pub pending: u64,
    /// Buffer tables skipped: their master did not answer, or another
    /// reconciler held them.
    pub skipped_tables: u64,
}

impl Pass {
    fn add(&mut self, other: &Pass) {
        self.replayed += other.replayed;
        self.drained += other.drained;
        self.conflicts += other.conflicts;
        self.pending += other.pending;
        self.skipped_tables += other.skipped_tables;
    }
}

/// One buffered cell.
struct Buffered {
    id: u64,
    shard: u32,
    pending: Pending,
    buffered_at: i64,
}

/// One pass over every master's buffer table.
pub async fn reconcile_once(store: &MySqlStore) -> Result<Pass> {
    let topology = store.topology();
    let mut total = Pass::default();
    for cluster in &topology.clusters {
        let node = cluster.master();
        match reconcile_table(store, &node).await {
            Ok(pass) => total.add(&pass),
            Err(e) if e.is_unavailable() => total.skipped_tables += 1,
            Err(e) => return Err(e),
        }
    }
    metrics::counter!("mezzanine_schemaless_buffer_replayed_total").increment(total.replayed);
    metrics::counter!("mezzanine_schemaless_buffer_drained_total").increment(total.drained);
    metrics::counter!("mezzanine_schemaless_buffer_conflicts_total").increment(total.conflicts);
    Ok(total)
}

/// Runs passes every `every` until `stop` is cancelled. Errors are logged
/// and the next pass tries again.
pub async fn run(store: MySqlStore, every: Duration, stop: tokio_util::sync::CancellationToken) {
    loop {
        match reconcile_once(&store).await {
            Ok(pass) if pass != Pass::default() => tracing::debug!(?pass, "buffer reconciler pass"),
            Ok(_) => {}
            Err(e) => tracing::warn!("buffer reconciler: {e}"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

async fn reconcile_table(store: &MySqlStore, node: &Node) -> Result<Pass> {
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    let lock_name = format!("{meta}.buffer");
    let mut lock = node.acquire().await?;
    let got: Option<i64> = {
        let name = lock_name.clone();
        node.run(&mut lock, |c| {
            Box::pin(async move {
                sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                    .bind(name)
                    .fetch_one(c)
                    .await
            })
        })
        .await?
    };
    if got != Some(1) {
        return Ok(Pass {
            skipped_tables: 1,
            ..Pass::default()
        });
    }
    let result = drain_table(store, node, &meta).await;
    let name = lock_name.clone();
    let released = node
        .run(&mut lock, |c| {
            Box::pin(async move {
                sqlx::query("DO RELEASE_LOCK(?)")
                    .bind(name)
                    .execute(c)
                    .await
                    .map(|_| ())
            })
        })
        .await;
    if released.is_err() {
        lock.close_on_drop();
    }
    let pass = result?;
    metrics::gauge!("mezzanine_schemaless_buffer_pending", "node" => node.label.clone())
        .set(pass.pending as f64);
    Ok(pass)
}

/// Up to [`PAGE`] buffered cells of `node`'s buffer after `after`, in id
/// order (columns as [`decode_row`] reads them, and the shard). A master
/// whose schema predates buffered writes has nothing buffered.
pub(in crate::mysql) async fn page(node: &Node, meta: &str, after: u64) -> Result<Vec<MySqlRow>> {
    match node
        .fetch_all(format!(
            "SELECT buffer_id, row_key, column_name, ref_key, body, buffered_at, shard \
             FROM `{meta}`.`buffer` WHERE buffer_id > {after} ORDER BY buffer_id LIMIT {PAGE}"
        ))
        .await
    {
        Err(e) if e.is_missing_table() => Ok(Vec::new()),
        other => other,
    }
}

async fn drain_table(store: &MySqlStore, node: &Node, meta: &str) -> Result<Pass> {
    let topology = store.topology();
    let mut pass = Pass::default();
    let mut after = 0u64;
    loop {
        let rows = page(node, meta, after).await?;
        let Some(last) = rows.last() else {
            return Ok(pass);
        };
        after = last.try_get(0).map_err(|e| node.error(e))?;
        let mut by_cluster: BTreeMap<usize, Vec<Buffered>> = BTreeMap::new();
        let mut done = Vec::new();
        let mut lost = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let shard: u32 = row.try_get(6).map_err(|e| node.error(e))?;
            // A damaged buffered cell stays in the buffer, set aside; the
            // rest of the pass goes on.
            let stored = match decode_row(row, shard, store.inflated_cap()) {
                Ok(stored) => stored,
                Err(e @ Error::CorruptCell { .. }) => {
                    crate::mysql::damaged::record(store, node, "buffer", &e).await;
                    pass.pending += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let encoded: Vec<u8> = row.try_get(4).map_err(|e| node.error(e))?;
            let cluster = topology.cluster_index(shard)?;
            by_cluster.entry(cluster).or_default().push(Buffered {
                id: stored.added_id,
                shard,
                buffered_at: stored.created_at,
                pending: Pending {
                    index: i,
                    cell: stored.cell,
                    encoded,
                },
            });
        }
        for (cluster, items) in by_cluster {
            let step = settle(
                store,
                &topology.clusters[cluster],
                items,
                &mut done,
                &mut lost,
            )
            .await;
            pass.add(&step);
        }
        // Recorded before the copies go: a pass that cannot record them
        // keeps them buffered.
        crate::mysql::lost::record(node, meta, &lost).await?;
        if !done.is_empty() {
            let ids: Vec<String> = done.iter().map(u64::to_string).collect();
            node.execute(format!(
                "DELETE FROM `{meta}`.`buffer` WHERE buffer_id IN ({})",
                ids.join(",")
            ))
            .await?;
        }
    }
}

/// Decides the fate of one cluster's buffered cells; the ids that may be
/// deleted go to `done`, the writes that lost to another body to `lost`.
async fn settle(
    store: &MySqlStore,
    cluster: &ClusterNodes,
    items: Vec<Buffered>,
    done: &mut Vec<u64>,
    lost: &mut Vec<crate::mysql::lost::Found>,
) -> Pass {
    let mut pass = Pass::default();
    let master = cluster.master();
    let on_master = match present(store, &master, &items).await {
        Ok(found) => found,
        Err(e) => {
            if !e.is_unavailable() {
                tracing::warn!(cluster = %cluster.name, "buffer reconciler: {e}");
            }
            pass.pending += items.len() as u64;
            return pass;
        }
    };
    let replay_after = store.buffer_replay_after().as_micros() as i64;
    let now = now_micros();
    let mut landed = Vec::new();
    let mut replay: BTreeMap<u32, Vec<Pending>> = BTreeMap::new();
    let mut replay_ids: HashMap<usize, (u64, u32, i64)> = HashMap::new();
    for item in items {
        match on_master.get(&item.pending.cell.key) {
            Some(Some(body)) if *body == item.pending.cell.body => landed.push(item),
            Some(None) => pass.pending += 1,
            Some(Some(stored)) => {
                pass.conflicts += 1;
                done.push(item.id);
                lost.push(crate::mysql::lost::Found {
                    buffer_id: item.id,
                    shard: item.shard,
                    key: item.pending.cell.key.clone(),
                    buffered: item.pending.cell.body.clone(),
                    stored: Some(stored.clone()),
                    buffered_at: item.buffered_at,
                });
            }
            None if now - item.buffered_at >= replay_after => {
                replay_ids.insert(item.pending.index, (item.id, item.shard, item.buffered_at));
                replay.entry(item.shard).or_default().push(item.pending);
            }
            None => pass.pending += 1,
        }
    }
    if !replay.is_empty() {
        let count = replay.values().map(Vec::len).sum::<usize>() as u64;
        let bodies: HashMap<usize, Body> = replay
            .values()
            .flatten()
            .map(|p| (p.index, p.cell.body.clone()))
            .collect();
        let groups = replay
            .into_iter()
            .map(|(shard, mut items)| {
                items.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
                (shard, items)
            })
            .collect();
        match store.write_master(groups).await {
            Ok(results) => {
                for (index, result) in results {
                    match result {
                        Ok(WriteOutcome::Written) | Ok(WriteOutcome::AlreadyPresent) => {
                            pass.replayed += 1;
                            pass.pending += 1;
                        }
                        Ok(_) => pass.pending += 1,
                        Err(conflict) => {
                            let (Some(&(id, shard, buffered_at)), Some(body)) =
                                (replay_ids.get(&index), bodies.get(&index))
                            else {
                                continue;
                            };
                            pass.conflicts += 1;
                            done.push(id);
                            lost.push(crate::mysql::lost::Found {
                                buffer_id: id,
                                shard,
                                key: conflict.key,
                                buffered: body.clone(),
                                stored: None,
                                buffered_at,
                            });
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(cluster = %cluster.name, "replaying buffered cells: {e}");
                pass.pending += count;
            }
        }
    }
    if landed.is_empty() {
        return pass;
    }
    let minions = cluster.minions();
    if minions.is_empty() {
        pass.drained += landed.len() as u64;
        done.extend(landed.iter().map(|b| b.id));
        return pass;
    }
    let answering: Vec<_> = minions
        .into_iter()
        .filter(|m| m.breaker.admit() == Admission::Allowed)
        .collect();
    let mut safe = vec![!answering.is_empty(); landed.len()];
    for minion in &answering {
        match present(store, minion, &landed).await {
            Ok(found) => {
                for (i, item) in landed.iter().enumerate() {
                    safe[i] &= found.get(&item.pending.cell.key)
                        == Some(&Some(item.pending.cell.body.clone()));
                }
            }
            Err(_) => safe.iter_mut().for_each(|s| *s = false),
        }
    }
    for (item, safe) in landed.iter().zip(safe) {
        if safe {
            pass.drained += 1;
            done.push(item.id);
        } else {
            pass.pending += 1;
        }
    }
    pass
}

/// The bodies `node` holds at the addresses of `items` (`None`: a damaged
/// cell, set aside, see [`crate::mysql::damaged`]).
async fn present(
    store: &MySqlStore,
    node: &Node,
    items: &[Buffered],
) -> Result<HashMap<CellKey, Option<Body>>> {
    let topology = store.topology();
    let mut by_shard: BTreeMap<u32, Vec<&CellKey>> = BTreeMap::new();
    for item in items {
        by_shard
            .entry(item.shard)
            .or_default()
            .push(&item.pending.cell.key);
    }
    let statements: Vec<String> = by_shard
        .iter()
        .map(|(shard, keys)| {
            sql::select_keys(&topology.database(*shard), keys.iter().copied()).replacen(
                sql::CELL_COLUMNS,
                &format!("{}, {shard}", sql::CELL_COLUMNS),
                1,
            )
        })
        .collect();
    let rows = node.fetch_all(statements.join(" UNION ALL ")).await?;
    let master = store
        .topology()
        .cluster(items.first().map_or(0, |i| i.shard))?
        .master();
    let decoded = crate::mysql::damaged::decode_rows(store, &master, "entity", &rows, |row| {
        let shard: i64 = row.try_get(6).map_err(|e| node.error(e))?;
        Ok(shard as u32)
    })
    .await?;
    // A damaged cell at an address cannot be compared: `None`, so the
    // buffered copy is kept (not replayed over it, not drained).
    Ok(decoded
        .cells
        .into_iter()
        .map(|s| (s.cell.key, Some(s.cell.body)))
        .chain(
            decoded
                .damaged
                .into_iter()
                .filter_map(|(key, _)| key.map(|k| (k, None))),
        )
        .collect())
}

/// How many cells each master's buffer holds, and the age of the oldest.
pub async fn backlog(store: &MySqlStore) -> Vec<(String, Result<(u64, Option<i64>)>)> {
    let topology = store.topology();
    let meta = meta_database(&topology.instance);
    let mut out = Vec::new();
    for cluster in &topology.clusters {
        let node = cluster.master();
        let result = node
            .fetch_all(format!(
                "SELECT COUNT(*), MIN(buffered_at) FROM `{meta}`.`buffer`"
            ))
            .await
            .and_then(|rows| {
                let row = rows
                    .first()
                    .ok_or_else(|| Error::Schema("no answer".into()))?;
                let count: i64 = row.try_get(0).map_err(|e| node.error(e))?;
                let oldest: Option<i64> = row.try_get(1).map_err(|e| node.error(e))?;
                Ok((count as u64, oldest.map(|at| now_micros() - at)))
            });
        out.push((node.label.clone(), result));
    }
    out
}
