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
//!
//! This file holds the store and the cell API's face; its rooms:
//!
//! - `write`: the write path, group commit and the careful path;
//! - `transaction`: statements cut into packets, run on one connection;
//! - `read`: reads with failover, and decoding entity rows;
//! - `changes`: the change signal and change-log reads;
//! - `maintain`: probes, promotions re-read, the in-app reconciler;
//! - `moving`: calls that meet a shard move's fence or its old copy.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::AssertSqlSafe;

use super::sql;
use super::topology::Topology;
use crate::api::{Answer, CellResult, CellStore, IndexEntry, IndexQuery, ReadFrom, ShardPage};
use crate::cell::{Cell, CellKey, Column, RowKey, StoredCell};
use crate::codec;
use crate::error::Result;
use crate::routing::shard_of;

mod changes;
mod maintain;
mod moving;
mod read;
mod transaction;
mod write;

pub use changes::ChangeSignal;
use maintain::{maintain, Maintenance};
pub(super) use read::decode_row;
pub(crate) use transaction::{run_transaction_reusing, transaction};

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

impl Pending {
    /// The same cell, for a write that goes again (after a shard move).
    pub(super) fn again(&self) -> Pending {
        Pending {
            index: self.index,
            cell: self.cell.clone(),
            encoded: self.encoded.clone(),
        }
    }
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
        metrics::gauge!("mezzanine_schemaless_durability_one_host")
            .set(f64::from(u8::from(one_host)));
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

    /// Stops the background work and closes every connection pool.
    pub async fn close(&self) {
        self.inner.stop.cancel();
        self.inner.topology.close().await;
    }

    pub(super) fn limits(&self) -> &config::Limits {
        &self.inner.limits
    }

    pub(super) fn inflated_cap(&self) -> usize {
        self.inner.inflated_cap
    }

    fn shard_of(&self, row_key: &RowKey) -> u32 {
        shard_of(row_key, self.inner.topology.shard_count)
    }
}

#[async_trait]
impl CellStore for MySqlStore {
    fn shard_count(&self) -> u32 {
        self.inner.topology.shard_count
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        self.put(cells).await
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
        if limit == 0 {
            self.inner.topology.cluster_index(shard)?;
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
        let waited = std::time::Instant::now();
        loop {
            let cluster = self.inner.topology.cluster_index(shard)?;
            let node = self.inner.topology.reader(shard, from)?;
            match self.fetch(&node, shard, sql.clone()).await {
                Ok(cells) => {
                    let next = cells.last().map_or(after, |c| c.added_id);
                    return Ok(ShardPage { cells, next });
                }
                Err(e) if self.follows_move(&e, &[shard], cluster, waited).await => {}
                Err(e) => return Err(e),
            }
        }
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
