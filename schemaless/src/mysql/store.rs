//! The cell API on MySQL/MariaDB shards.
//!
//! Writes: a batch is validated and encoded as a whole (an invalid cell
//! fails the call with nothing written), then grouped by shard. The groups
//! of one master go as one transaction holding one plain multi-row
//! `INSERT` per shard, combined with those of other calls of this process
//! waiting for the same master (group commit, see [`super::commit`]); the
//! masters are written in parallel. Plain means not `IGNORE`, not `ON
//! DUPLICATE KEY UPDATE`: a duplicate address fails its statement and the
//! whole transaction is rolled back. Each group of that master then takes
//! the careful path, up to `storage.write_parallelism` at a time: read the
//! cells that exist,
//! compare bodies (same body: `AlreadyPresent`; different: conflict), and
//! insert only the rest. A concurrent writer inserting one of those in
//! between fails that insert again and the comparison is redone, so nothing
//! is ever overwritten or silently dropped.
//!
//! A failed call may have written some masters' groups: batches are not
//! atomic across masters. Retrying the same batch is always safe; the cells
//! that landed come back `AlreadyPresent`.
//!
//! Every statement runs within `storage.request_timeout_ms` (see
//! [`super::topology::Node::run`]).
//!
//! Availability: with `storage.buffer_secondaries` on, each master's part
//! of a batch is first written to the buffers of other clusters' masters
//! and answered `Buffered` if its own master then fails (see
//! [`super::buffer`]). Reads go to the first node of
//! [`super::topology::ClusterNodes::readers`] that answers: a master read
//! whose master is down is answered by a minion and flagged stale.
//!
//! Each store runs one maintenance task for as long as it lives: it probes
//! nodes whose breaker is open, re-reads promotions
//! ([`super::failover::refresh`]) and, with buffering on and
//! `storage.reconcile_in_app`, runs the buffer reconciler.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Row};

use super::sql;
use super::topology::{Node, Topology};
use crate::api::{
    Answer, CellResult, CellStore, Conflict, IndexEntry, IndexQuery, ReadFrom, ShardPage,
    WriteOutcome,
};
use crate::cell::{
    check_batch, now_micros, Body, Cell, CellKey, Column, RefKey, RowKey, StoredCell,
};
use crate::codec;
use crate::error::{Error, Result};
use crate::routing::shard_of;

/// How often a group redoes its comparison when concurrent writers keep
/// inserting the same addresses between its read and its insert.
const MAX_INSERT_ATTEMPTS: usize = 8;

/// Wakes the followers of a shard's change log in this process after a
/// write to it. Followers in other processes poll; this only makes the
/// local ones quicker.
pub struct ChangeSignal {
    shards: Vec<tokio::sync::Notify>,
}

impl ChangeSignal {
    fn new(shard_count: u32) -> ChangeSignal {
        ChangeSignal {
            shards: (0..shard_count)
                .map(|_| tokio::sync::Notify::new())
                .collect(),
        }
    }

    fn notify(&self, shard: u32) {
        if let Some(n) = self.shards.get(shard as usize) {
            n.notify_waiters();
        }
    }

    /// Resolves at the next write to `shard` after it is created (enable it
    /// before reading, so a write in between is not missed).
    pub fn notified(&self, shard: u32) -> Option<tokio::sync::futures::Notified<'_>> {
        self.shards.get(shard as usize).map(|n| n.notified())
    }
}

/// The Schemaless store on MySQL/MariaDB.
#[derive(Clone)]
pub struct MySqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    topology: Topology,
    /// Wakes change-log followers in this process when a shard gets new
    /// cells, so they need not poll fast.
    signal: ChangeSignal,
    limits: config::Limits,
    write_parallelism: usize,
    /// The group commit of each cluster's master, in `topology.clusters`
    /// order.
    committers: Vec<Arc<super::commit::Committer>>,
    /// Inflated-size cap for decoding, derived from the body limit.
    inflated_cap: usize,
    /// The declared secondary indexes.
    indexes: Vec<crate::index::IndexSpec>,
    /// Their active versions, cached briefly.
    index_versions: super::index::VersionCache,
    /// `storage.buffer_secondaries`.
    buffer_secondaries: usize,
    /// `storage.durability`.
    durability: config::Durability,
    /// `storage.buffer_replay_after_ms`.
    buffer_replay_after: Duration,
    /// Change-log page reads, combined per node.
    pages: super::pages::PageReaders,
    /// Stops the maintenance task (on `close`, or when the last clone is
    /// dropped).
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A cell of a batch on its way to a shard.
pub(super) struct Pending {
    /// Position in the caller's batch.
    pub(super) index: usize,
    pub(super) cell: Cell,
    pub(super) encoded: Vec<u8>,
}

impl MySqlStore {
    /// A store over the configured clusters. Connections are made on first
    /// use, so a node that is down only fails the requests that need it.
    pub fn connect(config: &config::Config) -> Result<MySqlStore> {
        let stop = tokio_util::sync::CancellationToken::new();
        let one_host = config.storage.durability == config::Durability::OneHost;
        if one_host {
            tracing::warn!("{}", config::ONE_HOST_WARNING);
        }
        metrics::gauge!("schemaless_durability_one_host").set(f64::from(u8::from(one_host)));
        let topology = Topology::from_config(config)?;
        let committers = topology
            .clusters
            .iter()
            .map(|c| super::commit::Committer::new(config.storage.write_lanes, &c.name))
            .collect();
        let store = MySqlStore {
            inner: Arc::new(Inner {
                signal: ChangeSignal::new(config.instance.shard_count),
                topology,
                committers,
                limits: config.limits.clone(),
                write_parallelism: config.storage.write_parallelism,
                inflated_cap: codec::inflated_cap(config.limits.max_body_bytes),
                indexes: config
                    .indexes
                    .iter()
                    .map(crate::index::IndexSpec::from_config)
                    .collect::<Result<_>>()?,
                index_versions: super::index::VersionCache::default(),
                buffer_secondaries: config.storage.buffer_secondaries as usize,
                durability: config.storage.durability,
                buffer_replay_after: Duration::from_millis(config.storage.buffer_replay_after_ms),
                pages: super::pages::PageReaders::default(),
                stop: stop.clone(),
            }),
        };
        tokio::spawn(maintain(
            Arc::downgrade(&store.inner),
            Maintenance {
                refresh: Duration::from_millis(config.storage.topology_refresh_ms),
                reconcile: (config.storage.buffer_secondaries > 0
                    && config.storage.reconcile_in_app)
                    .then(|| Duration::from_millis(config.storage.buffer_replay_after_ms.max(250))),
            },
            stop,
        ));
        Ok(store)
    }

    /// What the change-log page reads combined so far (see
    /// `super::pages`).
    pub fn page_stats(&self) -> super::pages::PageStats {
        self.inner.pages.stats()
    }

    /// What the group commit combined so far (see [`super::commit`]).
    pub fn commit_stats(&self) -> super::commit::CommitStats {
        self.inner
            .committers
            .iter()
            .map(|c| c.stats())
            .fold(Default::default(), |a, b| super::commit::CommitStats {
                transactions: a.transactions + b.transactions,
                calls: a.calls + b.calls,
            })
    }

    /// How many other clusters' buffers each write goes to (0: off).
    pub fn buffer_secondaries(&self) -> usize {
        self.inner.buffer_secondaries
    }

    pub(super) fn buffer_replay_after(&self) -> Duration {
        self.inner.buffer_replay_after
    }

    /// Writes shard groups of one master, with no buffering: the
    /// reconciler's replays.
    pub(super) async fn write_master(
        &self,
        groups: Vec<(u32, Vec<Pending>)>,
    ) -> Result<Vec<(usize, CellResult)>> {
        let shards: Vec<u32> = groups.iter().map(|(s, _)| *s).collect();
        let results = self.write_node(groups).await?;
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
        groups: Vec<(u32, Vec<Pending>)>,
    ) -> Result<Vec<(usize, CellResult)>> {
        if self.inner.buffer_secondaries == 0 {
            if self.inner.durability == config::Durability::TwoHosts {
                self.check_durable(cluster).await?;
            }
            return self.write_node(groups).await;
        }
        let held = super::buffer::write(self, cluster, &groups).await?;
        let indexes: Vec<usize> = groups
            .iter()
            .flat_map(|(_, items)| items.iter().map(|p| p.index))
            .collect();
        let keys: HashMap<usize, CellKey> = groups
            .iter()
            .flat_map(|(_, items)| items.iter().map(|p| (p.index, p.cell.key.clone())))
            .collect();
        match self.write_node(groups).await {
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
                super::buffer::forget(self, &held, &refused).await;
                Ok(results)
            }
            Err(e) if e.is_unavailable() => {
                tracing::debug!(
                    "master unavailable, {} cells handed off: {e}",
                    indexes.len()
                );
                metrics::counter!("schemaless_writes_handed_off_total")
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
    /// host before the commit returns (see [`super::topology::SemiSync`]).
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

    /// Runs `read` on the nodes of `shard`'s cluster in
    /// [`super::topology::ClusterNodes::readers`] order until one answers:
    /// a node that fails (down, frozen) passes the read to the next, an
    /// error answer ends it.
    pub(crate) async fn read_failover<T, F, Fut>(
        &self,
        shard: u32,
        from: ReadFrom,
        mut read: F,
    ) -> Result<Answer<T>>
    where
        F: FnMut(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let cluster = self.inner.topology.cluster(shard)?;
        let mut last = None;
        for reader in cluster.readers(from) {
            match read(reader.node).await {
                Ok(value) => {
                    if reader.stale {
                        metrics::counter!("schemaless_reads_failed_over_total", "cluster" => cluster.name.clone())
                            .increment(1);
                    }
                    return Ok(Answer {
                        value,
                        stale: reader.stale,
                    });
                }
                Err(e) if e.is_unavailable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Unavailable {
            node: cluster.master().label.clone(),
            reason: format!(
                "every node of cluster {:?} has its circuit breaker open",
                cluster.name
            ),
        }))
    }

    /// Where each shard lives.
    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// The declared secondary indexes.
    pub fn indexes(&self) -> &[crate::index::IndexSpec] {
        &self.inner.indexes
    }

    pub(crate) fn index_versions(&self) -> &super::index::VersionCache {
        &self.inner.index_versions
    }

    /// Signals new cells per shard to followers in this process.
    pub fn changes(&self) -> &ChangeSignal {
        &self.inner.signal
    }

    /// Up to `limit` cells of the shard's change log after `after`, read
    /// from `node` (followers pin the node they read from), and whether the
    /// page was cut (by `limit` or by bytes): an uncut page reached the end
    /// of the log as of the read.
    pub async fn read_changes(
        &self,
        node: &Node,
        shard: u32,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<StoredCell>, bool)> {
        let max_bytes = self.inner.limits.max_batch_bytes;
        let request = super::pages::PageRequest {
            database: self.inner.topology.database(shard),
            after,
            limit,
        };
        let rows = self.inner.pages.read(node, request, max_bytes).await?;
        // The server keeps a cell while the bodies before it are under
        // `max_bytes`: a page holding that many bytes may have been cut.
        let bytes: usize = rows
            .iter()
            .map(|row| row.try_get::<&[u8], _>("body").map_or(0, <[u8]>::len))
            .sum();
        let cut = rows.len() >= limit || bytes >= max_bytes;
        Ok((self.decode_setting_aside(shard, &rows).await?.cells, cut))
    }

    /// The change-log cells of `shard` whose added_id lies in one of these
    /// inclusive ranges, read from `node`.
    pub async fn read_changes_in(
        &self,
        node: &Node,
        shard: u32,
        ranges: &[(u64, u64)],
    ) -> Result<Vec<StoredCell>> {
        let sql = sql::select_changes_in(&self.inner.topology.database(shard), ranges);
        Ok(self.fetch_setting_aside(node, shard, sql).await?.cells)
    }

    /// The newest added_id of every shard's change log (0 for an empty
    /// shard), read from the masters in one query per cluster. A follower
    /// started at these offsets sees exactly the cells written after.
    pub async fn log_heads(&self) -> Result<Vec<u64>> {
        let topology = &self.inner.topology;
        let mut heads = vec![0u64; topology.shard_count as usize];
        let reads = topology.clusters.iter().enumerate().map(|(i, cluster)| {
            let shards: Vec<u32> = cluster.shards.iter().collect();
            async move { self.heads_of(i, &shards).await }
        });
        for rows in futures::future::try_join_all(reads).await? {
            for (shard, head) in rows {
                heads[shard as usize] = head;
            }
        }
        Ok(heads)
    }

    /// The newest added_id of each of `shards` (all on `cluster`), read
    /// from its master in one query.
    pub(super) async fn heads_of(&self, cluster: usize, shards: &[u32]) -> Result<Vec<(u32, u64)>> {
        let topology = &self.inner.topology;
        let sql = shards
            .iter()
            .map(|shard| {
                format!(
                    "SELECT {shard}, CAST(COALESCE(MAX(added_id), 0) AS UNSIGNED) FROM `{}`.`entity`",
                    topology.database(*shard)
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let master = topology.clusters[cluster].master();
        let rows = master.fetch_all(sql).await?;
        rows.iter()
            .map(|row| {
                let shard: i64 = row.try_get(0).map_err(|e| master.error(e))?;
                let head: u64 = row.try_get(1).map_err(|e| master.error(e))?;
                Ok((shard as u32, head))
            })
            .collect()
    }

    /// Stops the background work and closes every connection pool.
    pub async fn close(&self) {
        self.inner.stop.cancel();
        self.inner.topology.close().await;
    }

    /// Writes the shard groups of one master. The fast path is one
    /// transaction, combined with other calls' (see [`super::commit`]):
    /// one multi-row `INSERT` per shard. If any address already exists the
    /// transaction is rolled back whole and every group takes the careful
    /// path ([`MySqlStore::write_group`]), which compares and inserts what
    /// is missing.
    async fn write_node(
        &self,
        groups: Vec<(u32, Vec<Pending>)>,
    ) -> Result<Vec<(usize, CellResult)>> {
        let Some(&(first_shard, _)) = groups.first() else {
            return Ok(Vec::new());
        };
        let cluster = self.inner.topology.cluster_index(first_shard)?;
        let fast = groups.iter().all(|(_, items)| {
            let mut seen = HashSet::with_capacity(items.len());
            items
                .iter()
                .all(|p| seen.insert(&p.cell.key) && !sql::needs_bind(&p.encoded))
        });
        let groups = Arc::new(groups);
        if fast {
            match self.inner.committers[cluster]
                .write(self, cluster, groups.clone())
                .await
            {
                super::commit::Outcome::Written => {
                    return Ok(groups
                        .iter()
                        .flat_map(|(_, items)| {
                            items.iter().map(|p| (p.index, Ok(WriteOutcome::Written)))
                        })
                        .collect())
                }
                super::commit::Outcome::Alone => {}
                super::commit::Outcome::Failed(e) => return Err(e),
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
    ) -> Result<super::damaged::Decoded> {
        let keys: HashSet<&CellKey> = items.iter().map(|p| &p.cell.key).collect();
        let sql = sql::select_keys(database, keys);
        self.fetch_setting_aside(node, shard, sql).await
    }

    /// [`MySqlStore::fetch`], setting damaged cells aside (recorded, see
    /// [`super::damaged`]) instead of failing on the first.
    async fn fetch_setting_aside(
        &self,
        node: &Node,
        shard: u32,
        sql: String,
    ) -> Result<super::damaged::Decoded> {
        let rows = node.fetch_all(sql).await?;
        self.decode_setting_aside(shard, &rows).await
    }

    /// Decodes `rows` of `shard`'s entity table, setting damaged ones aside.
    async fn decode_setting_aside(
        &self,
        shard: u32,
        rows: &[MySqlRow],
    ) -> Result<super::damaged::Decoded> {
        let master = self.inner.topology.cluster(shard)?.master();
        super::damaged::decode_rows(self, &master, "entity", rows, |_| Ok(shard)).await
    }

    async fn fetch(&self, node: &Node, shard: u32, sql: String) -> Result<Vec<StoredCell>> {
        let rows = node.fetch_all(sql).await?;
        rows.iter()
            .map(|row| decode_row(row, shard, self.inner.inflated_cap))
            .collect()
    }

    async fn fetch_one(
        &self,
        shard: u32,
        from: ReadFrom,
        sql: String,
    ) -> Result<Answer<Option<StoredCell>>> {
        self.read_failover(shard, from, |node| {
            let sql = sql.clone();
            async move { Ok(self.fetch(&node, shard, sql).await?.into_iter().next()) }
        })
        .await
    }

    async fn fetch_prepared(
        &self,
        shard: u32,
        from: ReadFrom,
        query: impl Fn() -> sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<Answer<Option<StoredCell>>> {
        self.read_failover(shard, from, |node| {
            let query = query();
            async move {
                let row = node.fetch_optional(query).await?;
                row.map(|r| decode_row(&r, shard, self.inner.inflated_cap))
                    .transpose()
            }
        })
        .await
    }

    pub(super) async fn fetch_cells(
        &self,
        node: &Node,
        shard: u32,
        sql: String,
    ) -> Result<Vec<StoredCell>> {
        self.fetch(node, shard, sql).await
    }

    pub(super) fn limits(&self) -> &config::Limits {
        &self.inner.limits
    }

    pub(super) fn inflated_cap(&self) -> usize {
        self.inner.inflated_cap
    }

    pub(super) fn changes_signal(&self, shard: u32) {
        self.inner.signal.notify(shard);
    }

    fn shard_of(&self, row_key: &RowKey) -> u32 {
        shard_of(row_key, self.inner.topology.shard_count)
    }
}

fn row(p: &Pending, created_at: i64) -> sql::InsertRow<'_> {
    sql::InsertRow {
        key: &p.cell.key,
        body: &p.encoded,
        created_at,
    }
}

/// Runs `statements` as one transaction: in one round trip when their text
/// fits the node's packet budget, else in as few packets as fit, on one
/// connection (see [`run_transaction`]).
pub(crate) async fn transaction(node: &Node, statements: &[String]) -> Result<()> {
    run_transaction(node, packets(statements, node.packet_budget())).await
}

/// Runs a transaction already cut into packets (the first starting it, the
/// last committing it) on one connection. On any error the transaction is
/// rolled back before the connection goes back to the pool (or the
/// connection is closed, which rolls back too).
pub(crate) async fn run_transaction(node: &Node, packets: Vec<String>) -> Result<()> {
    run_transaction_reusing(node, packets, &mut Vec::new()).await
}

/// [`run_transaction`], handing the packets' buffers back in `spent`
/// (emptied, their capacity kept) for the next transaction's text: a bulk
/// writer that allocates hundreds of kilobytes afresh per transaction has
/// the kernel zero new pages for each.
pub(crate) async fn run_transaction_reusing(
    node: &Node,
    packets: Vec<String>,
    spent: &mut Vec<String>,
) -> Result<()> {
    let mut conn = node.acquire().await?;
    // Cancelled between packets (or before its ROLLBACK is answered), the
    // connection is closed, which rolls back, rather than reused with the
    // transaction open.
    conn.begin_transaction();
    let mut result = Ok(());
    for sql in packets {
        let sql = Arc::new(sql);
        let sent = sql.clone();
        result = node
            .run(&mut conn, |c| {
                Box::pin(async move {
                    sqlx::raw_sql(AssertSqlSafe(sent)).execute(c).await?;
                    Ok(())
                })
            })
            .await;
        // The driver is done with the text once the call returned.
        if let Ok(mut text) = Arc::try_unwrap(sql) {
            text.clear();
            spent.push(text);
        }
        if result.is_err() {
            break;
        }
    }
    if let Err(Error::Storage { .. }) = result {
        // A statement failed and the rest were skipped: the transaction is
        // still open on this connection.
        let rollback = node
            .run(&mut conn, |c| {
                Box::pin(async move { sqlx::raw_sql("ROLLBACK").execute(c).await.map(|_| ()) })
            })
            .await;
        if rollback.is_err() {
            conn.close_on_drop();
        } else {
            conn.end_transaction();
        }
    } else if result.is_err() {
        // A timeout: the connection is closed, which rolls back.
        conn.close_on_drop();
    } else {
        // The last packet ended with COMMIT.
        conn.end_transaction();
    }
    result
}

/// `START TRANSACTION`, the statements and `COMMIT`, joined by `;` into
/// texts of at most `budget` bytes (a statement longer than that alone).
fn packets(statements: &[String], budget: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut sql = String::from("START TRANSACTION");
    for statement in statements.iter().map(String::as_str).chain(["COMMIT"]) {
        if !sql.is_empty() && sql.len() + 1 + statement.len() > budget {
            out.push(std::mem::take(&mut sql));
        }
        if !sql.is_empty() {
            sql.push(';');
        }
        sql.push_str(statement);
    }
    out.push(sql);
    out
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

/// Decodes one entity row; anything malformed is a [`Error::CorruptCell`]
/// naming as much of the cell as could be read.
pub(super) fn decode_row(row: &MySqlRow, shard: u32, cap: usize) -> Result<StoredCell> {
    let corrupt = |cell: String, added_id: u64, reason: String| Error::CorruptCell {
        cell,
        shard,
        added_id,
        reason,
    };
    let added_id: u64 = row
        .try_get(0)
        .map_err(|e| corrupt("?".into(), 0, e.to_string()))?;
    let row_key_bytes: Vec<u8> = row
        .try_get(1)
        .map_err(|e| corrupt("?".into(), added_id, e.to_string()))?;
    let column_name: String = row
        .try_get(2)
        .map_err(|e| corrupt("?".into(), added_id, e.to_string()))?;
    let ref_key: i64 = row
        .try_get(3)
        .map_err(|e| corrupt("?".into(), added_id, e.to_string()))?;
    let named = format!("{}/{column_name}/{ref_key}", hex_or_uuid(&row_key_bytes));
    let row_key = RowKey::from_slice(&row_key_bytes)
        .ok_or_else(|| corrupt(named.clone(), added_id, "row key is not 16 bytes".into()))?;
    let column =
        Column::new(&column_name).map_err(|e| corrupt(named.clone(), added_id, e.to_string()))?;
    let ref_key =
        RefKey::new(ref_key).map_err(|e| corrupt(named.clone(), added_id, e.to_string()))?;
    let body_bytes: Vec<u8> = row
        .try_get(4)
        .map_err(|e| corrupt(named.clone(), added_id, e.to_string()))?;
    let created_at: i64 = row
        .try_get(5)
        .map_err(|e| corrupt(named.clone(), added_id, e.to_string()))?;
    let body = codec::decode(&body_bytes, cap)
        .map_err(|e| corrupt(named.clone(), added_id, format!("undecodable body: {e}")))?;
    Ok(StoredCell {
        cell: Cell::new(row_key, column, ref_key, body),
        added_id,
        created_at,
    })
}

fn hex_or_uuid(bytes: &[u8]) -> String {
    match RowKey::from_slice(bytes) {
        Some(key) => key.to_string(),
        None => bytes.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

#[async_trait]
impl CellStore for MySqlStore {
    fn shard_count(&self) -> u32 {
        self.inner.topology.shard_count
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
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
        let mut by_node: BTreeMap<usize, Vec<(u32, Vec<Pending>)>> = BTreeMap::new();
        for (shard, mut items) in groups {
            items.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
            by_node
                .entry(self.inner.topology.cluster_index(shard)?)
                .or_default()
                .push((shard, items));
        }
        let shards: Vec<u32> = by_node
            .values()
            .flat_map(|groups| groups.iter().map(|(shard, _)| *shard))
            .collect();
        let mut results: Vec<Option<CellResult>> = vec![None; count];
        let mut writes = futures::stream::iter(
            by_node
                .into_iter()
                .map(|(cluster, groups)| self.write_cluster(cluster, groups)),
        )
        .buffer_unordered(self.inner.topology.clusters.len().max(1));
        while let Some(node_results) = writes.try_next().await? {
            for (index, result) in node_results {
                results[index] = Some(result);
            }
        }
        drop(writes);
        for shard in shards {
            self.inner.signal.notify(shard);
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every cell belongs to exactly one group"))
            .collect())
    }

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        let shard = self.shard_of(&key.row_key);
        let database = self.inner.topology.database(shard);
        if self.inner.topology.prepared_reads() {
            let sql = sql::select_key_bound(&database);
            return self
                .fetch_prepared(shard, from, || {
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(key.row_key.as_bytes().to_vec())
                        .bind(key.column.as_str().to_string())
                        .bind(key.ref_key.get())
                })
                .await;
        }
        self.fetch_one(shard, from, sql::select_keys(&database, [key]))
            .await
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        let shard = self.shard_of(row_key);
        let database = self.inner.topology.database(shard);
        if self.inner.topology.prepared_reads() {
            let sql = sql::select_latest_bound(&database);
            return self
                .fetch_prepared(shard, from, || {
                    sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(row_key.as_bytes().to_vec())
                        .bind(column.as_str().to_string())
                })
                .await;
        }
        self.fetch_one(shard, from, sql::select_latest(&database, row_key, column))
            .await
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let shard = self.shard_of(row_key);
        let sql = sql::select_row(&self.inner.topology.database(shard), row_key);
        self.read_failover(shard, from, |node| {
            let sql = sql.clone();
            async move { self.fetch(&node, shard, sql).await }
        })
        .await
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage> {
        let node = self.inner.topology.reader(shard, from)?;
        if limit == 0 {
            return Ok(ShardPage {
                cells: Vec::new(),
                next: after,
            });
        }
        let sql = sql::select_changes(
            &self.inner.topology.database(shard),
            after,
            limit,
            self.inner.limits.max_batch_bytes,
        );
        let cells = self.fetch(&node, shard, sql).await?;
        let next = cells.last().map_or(after, |c| c.added_id);
        Ok(ShardPage { cells, next })
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        self.column_cells(rows, column, from).await
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        super::index::query(self, query, from).await
    }
}

/// What a store's maintenance task does besides probing.
struct Maintenance {
    /// How often promotions are re-read.
    refresh: Duration,
    /// How often the buffer reconciler runs, if it runs here.
    reconcile: Option<Duration>,
}

/// How often open breakers are checked for a due probe.
const PROBE_TICK: Duration = Duration::from_millis(100);

/// The store's background work, until the store is dropped: probes of
/// open breakers, promotions, and (if configured) the buffer reconciler.
/// It holds the store only while working, so dropping the last clone of
/// the store ends it.
async fn maintain(
    inner: Weak<Inner>,
    every: Maintenance,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut refreshed = Instant::now();
    let mut reconciled = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PROBE_TICK) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        let store = MySqlStore { inner };
        for cluster in &store.inner.topology.clusters {
            for node in &cluster.members {
                if node.breaker.start_probe() {
                    let node = node.clone();
                    tokio::spawn(async move {
                        // The probe reports to the breaker itself.
                        let _ = node.probe().await;
                    });
                }
            }
        }
        if refreshed.elapsed() >= every.refresh {
            refreshed = Instant::now();
            super::failover::refresh(&store.inner.topology).await;
        }
        if let Some(period) = every.reconcile {
            if reconciled.elapsed() >= period {
                reconciled = Instant::now();
                if let Err(e) = super::buffer::reconcile_once(&store).await {
                    tracing::warn!("buffer reconciler: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_row_keys_are_shown_in_hex() {
        assert_eq!(hex_or_uuid(&[0xab, 0x01]), "ab01");
    }

    #[test]
    fn a_transaction_is_one_packet_when_it_fits_and_cut_when_not() {
        let statements: Vec<String> = (0..10).map(|i| format!("INSERT {i:0>40}")).collect();
        assert_eq!(
            packets(&statements, 1 << 20),
            vec![format!("START TRANSACTION;{};COMMIT", statements.join(";"))]
        );
        let cut = packets(&statements, 120);
        assert!(cut.len() > 3);
        assert!(cut.iter().all(|p| p.len() <= 120));
        assert_eq!(
            cut.join(";"),
            format!("START TRANSACTION;{};COMMIT", statements.join(";"))
        );
    }
}
