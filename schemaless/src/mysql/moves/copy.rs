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

/// Inserts of a snapshot's pages running on the target at once.
const INSERTS_IN_FLIGHT: usize = 4;

/// An insert task's outcome (a task that panicked is a bug, passed on).
fn joined(
    done: Option<Result<Result<u64, BackupError>, tokio::task::JoinError>>,
) -> Result<u64, BackupError> {
    match done {
        None => Ok(0),
        Some(Ok(result)) => result,
        Some(Err(e)) => std::panic::resume_unwind(e.into_panic()),
    }
}

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
            let started = Instant::now();
            match copy.copy_snapshot(&node, wait_for).await {
                Ok(()) => {
                    tracing::debug!(shard, node = %node.label, cells = copy.copied, ms = started.elapsed().as_secs_f64() * 1e3, "shard copy: snapshot copied");
                    return Ok(copy);
                }
                Err(BackupError::Store(e)) if e.is_retryable() => {
                    tracing::warn!(shard, node = %node.label, error = %e, "snapshot for the shard copy failed on this node; trying the next");
                    last_error = Some(BackupError::Store(e));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("at least one node was tried"))
    }

    /// Copies the snapshot of `node`, reading the next pages while up to
    /// [`INSERTS_IN_FLIGHT`] inserts of earlier ones run on the target (a
    /// read and an insert one after the other left both servers idle half
    /// the time). Rows carry their added_ids, so the order the inserts
    /// land in does not matter.
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
        let mut statements = Inserter::new(&self.target, self.database.clone());
        let mut inserts: tokio::task::JoinSet<Result<u64, BackupError>> =
            tokio::task::JoinSet::new();
        let mut copied = 0;
        let now = Instant::now();
        loop {
            while inserts.len() >= INSERTS_IN_FLIGHT {
                copied += joined(inserts.join_next().await)?;
            }
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
            }
            for (text, rows) in statements.statements(&page) {
                let target = self.target.clone();
                inserts.spawn(async move {
                    target.execute(text).await?;
                    Ok(rows)
                });
            }
        }
        while let Some(done) = inserts.join_next().await {
            copied += joined(Some(done))?;
        }
        snapshot.close().await?;
        self.copied += copied;
        Ok(())
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
