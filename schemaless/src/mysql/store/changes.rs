//! New cells, as followers of a shard's change log see them: the signal
//! that wakes followers in this process after a write, the change-log
//! reads (pages combined per node, ranges of added ids) and the newest
//! added_id of every shard.

use sqlx::Row;

use super::MySqlStore;
use crate::cell::StoredCell;
use crate::error::Result;
use crate::mysql::sql;
use crate::mysql::topology::Node;

/// Wakes the followers of a shard's change log in this process after a
/// write to it. Followers in other processes poll; this only makes the
/// local ones quicker.
pub struct ChangeSignal {
    shards: Vec<tokio::sync::Notify>,
}

impl ChangeSignal {
    pub(super) fn new(shard_count: u32) -> ChangeSignal {
        ChangeSignal {
            shards: (0..shard_count)
                .map(|_| tokio::sync::Notify::new())
                .collect(),
        }
    }

    pub(super) fn notify(&self, shard: u32) {
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

impl MySqlStore {
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
        let request = crate::mysql::pages::PageRequest {
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
        let reads = topology.clusters.iter().enumerate().map(|(i, _)| {
            let shards: Vec<u32> = topology.shards_of(i);
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
    pub(in crate::mysql) async fn heads_of(
        &self,
        cluster: usize,
        shards: &[u32],
    ) -> Result<Vec<(u32, u64)>> {
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

    pub(in crate::mysql) fn changes_signal(&self, shard: u32) {
        self.inner.signal.notify(shard);
    }
}
