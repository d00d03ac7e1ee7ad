//! Copying one shard to another cluster while it takes writes.
//!
//! [`ShardCopy::start`] creates the shard's database on the target master,
//! reads the source in one consistent snapshot (on a minion that has
//! applied what its master had, as a backup does) and writes every row to
//! the target with its own added_id. [`ShardCopy::catch_up`] then reads the
//! source master's change log after the position copied so far, and looks
//! again for the ids the copy has not seen below it (*awaited*: writes
//! that had taken an id but not committed when it read past it, and ids
//! rolled back for good), as a trigger's follower does
//! ([`crate::mysql::follow`]). Rows go in with `INSERT IGNORE` on their
//! added_id, so a pass repeated after a crash changes nothing.
//!
//! Under writes the copy is only ever nearly level: a move fences the
//! source before its last pass, after which one more pass makes the copy
//! exact ([`ShardCopy::digests`] proves it).

use std::sync::Arc;
use std::time::Instant;

use crate::mysql::awaited::{Awaited, RECHECK_RANGES};
use crate::mysql::backup::format::Record;
use crate::mysql::backup::insert::Inserter;
use crate::mysql::backup::snapshot::{self, Snapshot, PAGE_BYTES};
use crate::mysql::backup::{record_of_row, shard_digest, BackupError};
use crate::mysql::topology::{Node, Topology};
use crate::mysql::{schema, sql};

/// Cells per page read from the source.
const PAGE_CELLS: usize = 2000;

/// One shard being copied from its cluster's master to another cluster's.
pub struct ShardCopy {
    shard: u32,
    database: String,
    source: Arc<Node>,
    target: Arc<Node>,
    /// The highest added_id copied.
    position: u64,
    /// Ids below `position` not seen yet.
    awaited: Awaited,
    /// Cells written to the target so far.
    copied: u64,
}

impl ShardCopy {
    /// Creates the shard on `target`'s master and copies a snapshot of it
    /// there. The shard's rows on the target must be none or a subset of
    /// the source's (a copy started again after a crash).
    pub async fn start(
        topology: &Topology,
        shard: u32,
        target: usize,
    ) -> Result<ShardCopy, BackupError> {
        let from = topology.cluster(shard)?;
        let to = topology.clusters.get(target).ok_or_else(|| {
            BackupError::Refused(format!("no cluster number {target} in the config"))
        })?;
        if from.name == to.name {
            return Err(BackupError::Refused(format!(
                "shard {shard} is on cluster {:?} already",
                to.name
            )));
        }
        let database = topology.database(shard);
        let target_node = to.master();
        schema::create_shard(&target_node, database.clone()).await?;
        let source = from.master();
        // The snapshot from a minion that has applied everything the
        // master had now, else from the master.
        let position = source.gtid_binlog_pos().await?;
        let mut copy = ShardCopy {
            shard,
            database,
            source,
            target: target_node,
            position: 0,
            awaited: Awaited::default(),
            copied: 0,
        };
        let mut last_error = None;
        for node in snapshot::sources(from) {
            let wait_for = Some(position.as_str()).filter(|_| !Arc::ptr_eq(&node, &copy.source));
            match copy.copy_snapshot(&node, wait_for).await {
                Ok(()) => return Ok(copy),
                Err(BackupError::Store(e)) if e.is_retryable() => {
                    tracing::warn!(shard, node = %node.label, error = %e, "snapshot for the shard copy failed on this node; trying the next");
                    last_error = Some(BackupError::Store(e));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("at least one node was tried"))
    }

    async fn copy_snapshot(
        &mut self,
        node: &Node,
        wait_for: Option<&str>,
    ) -> Result<(), BackupError> {
        let mut snapshot = Snapshot::open(
            node,
            self.database.clone(),
            self.shard,
            wait_for,
            PAGE_CELLS,
        )
        .await?;
        let mut inserter = Inserter::new(&self.target, self.database.clone());
        let now = Instant::now();
        loop {
            let page = snapshot.next_page().await?;
            if page.is_empty() {
                break;
            }
            for record in &page {
                if record.added_id > self.position + 1 {
                    self.awaited
                        .insert(self.position + 1, record.added_id - 1, now);
                }
                self.position = record.added_id;
                self.copied += inserter.push(record).await?;
            }
        }
        self.copied += inserter.flush().await?;
        snapshot.close().await
    }

    /// One pass over the source master: the log after the position, and
    /// a page of the awaited ids. Returns the cells copied by the pass.
    pub async fn catch_up(&mut self) -> Result<u64, BackupError> {
        let mut copied = 0;
        let mut inserter = Inserter::new(&self.target, self.database.clone());
        loop {
            let page = self
                .read(sql::select_changes(
                    &self.database,
                    self.position,
                    PAGE_CELLS,
                    PAGE_BYTES,
                ))
                .await?;
            if page.is_empty() {
                break;
            }
            let now = Instant::now();
            for record in &page {
                if record.added_id > self.position + 1 {
                    self.awaited
                        .insert(self.position + 1, record.added_id - 1, now);
                }
                self.position = record.added_id;
                copied += inserter.push(record).await?;
            }
        }
        // Every awaited id once per pass, a page of ranges at a time.
        for _ in 0..self.awaited.ranges().div_ceil(RECHECK_RANGES) {
            let ranges = self.awaited.next_page();
            if ranges.is_empty() {
                break;
            }
            for record in self
                .read(sql::select_changes_in(&self.database, &ranges))
                .await?
            {
                self.awaited.remove(record.added_id);
                copied += inserter.push(&record).await?;
            }
        }
        copied += inserter.flush().await?;
        self.copied += copied;
        Ok(copied)
    }

    async fn read(&self, text: String) -> Result<Vec<Record>, BackupError> {
        self.source
            .fetch_all(text)
            .await?
            .iter()
            .map(|row| record_of_row(row, &self.source, self.shard))
            .collect()
    }

    /// The highest added_id copied.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Cells written to the target so far.
    pub fn copied(&self) -> u64 {
        self.copied
    }

    /// Ranges of ids below the position not seen (yet).
    pub fn awaited(&self) -> usize {
        self.awaited.ranges()
    }

    /// The shard's cell count and content digest on the source and on the
    /// target: equal once the copy is exact (meant for a shard no one
    /// writes, such as a fenced one).
    pub async fn digests(&self) -> Result<((u64, String), (u64, String)), BackupError> {
        Ok((
            shard_digest(&self.source, &self.database, self.shard).await?,
            shard_digest(&self.target, &self.database, self.shard).await?,
        ))
    }
}
