//! `mezzanine backup`: every shard's cells written to a directory while
//! writes go on.
//!
//! Each shard is read inside one `START TRANSACTION WITH CONSISTENT
//! SNAPSHOT`: what the file holds is the shard exactly as it was at one
//! instant, and the highest added_id it saw is the position it is
//! consistent at. Ids below that position the snapshot did not hold are
//! listed in the manifest (see [`super::ShardEntry::missing`]): a write
//! that took its id before the snapshot but committed after it is after
//! the backup, as it should be.
//!
//! The snapshot is taken on a minion when the cluster has one that
//! answers (a replica applies the master's transactions in commit order,
//! so its state is one the master had), once it has applied everything
//! its master had when the backup started (`MASTER_GTID_WAIT`: every write
//! acknowledged before the backup is in it), falling back to the others
//! and then the master. A node that fails mid-shard is left and the shard is
//! read again, whole, from the next one.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;

use super::format::Writer;
use super::manifest::{Manifest, ShardEntry, FORMAT, MAX_MISSING_RANGES};
use super::snapshot::{self, Snapshot};
use super::{now_micros, shard_file, BackupError};
use crate::mysql::topology::{Node, Topology};

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    /// The shards to back up; all of them when `None`.
    pub shards: Option<config::ShardRange>,
    /// How many shards are read at once.
    pub parallel: usize,
    /// Cells per page read inside the snapshot.
    pub page_cells: usize,
}

impl Default for BackupOptions {
    fn default() -> Self {
        BackupOptions {
            shards: None,
            parallel: 4,
            page_cells: 2000,
        }
    }
}

/// Backs up the instance into `dir`, which must be empty or not exist.
/// `progress` is called after every page with the cells it held. The
/// manifest is written last; it is returned.
pub async fn backup(
    topology: &Topology,
    dir: &Path,
    options: &BackupOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Manifest, BackupError> {
    let shards: Vec<u32> = match options.shards {
        Some(range) if range.last >= topology.shard_count => {
            return Err(BackupError::Refused(format!(
                "shards {range}: the instance has shards 0-{}",
                topology.shard_count.saturating_sub(1)
            )))
        }
        Some(range) => range.iter().collect(),
        None => (0..topology.shard_count).collect(),
    };
    prepare_directory(dir)?;
    let started_at_us = now_micros();
    let positions = master_positions(topology).await;
    // Futures made in a loop, not by a closure in the stream: a closure
    // borrowing the topology makes the caller's future lose `Send` (the
    // compiler cannot prove it for every lifetime).
    let mut dumps = Vec::with_capacity(shards.len());
    for shard in shards {
        let position = &positions[topology.cluster_index(shard)?];
        dumps.push(dump_shard(
            topology,
            shard,
            position.as_deref(),
            dir,
            options.page_cells,
            progress,
        ));
    }
    let mut entries = futures::stream::iter(dumps)
        .buffer_unordered(options.parallel.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    entries.sort_by_key(|e| e.shard);
    let manifest = Manifest {
        format: FORMAT,
        id: uuid::Uuid::new_v4().to_string(),
        instance: topology.instance.clone(),
        shard_count: topology.shard_count,
        started_at_us,
        finished_at_us: now_micros(),
        written_by: env!("CARGO_PKG_VERSION").to_string(),
        shards: entries,
    };
    manifest.save(dir)?;
    Ok(manifest)
}

/// Creates `dir`, or checks that it is empty: a backup never mixes its
/// files with another's.
fn prepare_directory(dir: &Path) -> Result<(), BackupError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) if !dir.join(super::MANIFEST).exists() => Err(BackupError::Refused(format!(
                "{} is not empty and has no manifest: an unfinished backup or other files; \
                     delete it or choose a new or empty directory",
                dir.display()
            ))),
            Some(_) => Err(BackupError::Refused(format!(
                "{} is not empty: it holds a backup; a backup goes into a new or empty directory",
                dir.display()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| BackupError::io(dir, e))
        }
        Err(e) => Err(BackupError::io(dir, e)),
    }
}

/// Each cluster's master's GTID position as the backup starts (`None`
/// for a master that does not answer): a minion's snapshot is taken only
/// once it has applied that much, so that every write acknowledged before
/// the backup began is in it. (Semi-sync acknowledges a write once a
/// minion has *received* it; applying may come later.)
async fn master_positions(topology: &Topology) -> Vec<Option<String>> {
    let mut positions = Vec::with_capacity(topology.clusters.len());
    for cluster in &topology.clusters {
        let position = match cluster.master().gtid_binlog_pos().await {
            Ok(position) => Some(position),
            Err(e) => {
                tracing::warn!(cluster = %cluster.name, error = %e, "the master does not answer: its shards are backed up as its minions have them");
                None
            }
        };
        positions.push(position);
    }
    positions
}

/// One shard, from the first node that completes it.
async fn dump_shard(
    topology: &Topology,
    shard: u32,
    master_position: Option<&str>,
    dir: &Path,
    page_cells: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ShardEntry, BackupError> {
    let cluster = topology.cluster(shard)?;
    let path = dir.join(shard_file(shard));
    let mut last_error = None;
    let master = cluster.master();
    for node in snapshot::sources(cluster) {
        let wait_for = master_position.filter(|_| !Arc::ptr_eq(&node, &master));
        match dump_from(
            topology, &node, shard, wait_for, &path, page_cells, progress,
        )
        .await
        {
            Ok(entry) => return Ok(entry),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                match &e {
                    BackupError::Store(store) if store.is_retryable() => {
                        tracing::warn!(shard, node = %node.label, error = %e, "backup of the shard failed on this node; trying the next");
                        last_error = Some(e);
                    }
                    _ => return Err(e),
                }
            }
        }
    }
    Err(last_error.expect("at least one node was tried"))
}

/// One shard from `node`, inside one consistent snapshot taken once the
/// node has applied `wait_for` (a master's GTID position).
async fn dump_from(
    topology: &Topology,
    node: &Node,
    shard: u32,
    wait_for: Option<&str>,
    path: &Path,
    page_cells: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ShardEntry, BackupError> {
    let mut snapshot =
        Snapshot::open(node, topology.database(shard), shard, wait_for, page_cells).await?;
    let mut writer = Writer::create(path)?;
    let mut missing = Missing::default();
    let mut after = 0u64;
    loop {
        let page = snapshot.next_page().await?;
        if page.is_empty() {
            break;
        }
        for record in &page {
            missing.saw(after, record.added_id);
            after = record.added_id;
            writer.push(record)?;
        }
        progress(page.len() as u64);
    }
    snapshot.close().await?;
    let written = writer.finish()?;
    Ok(ShardEntry {
        shard,
        file: shard_file(shard),
        file_bytes: written.file_bytes,
        file_sha256: written.file_sha256,
        cells: written.cells,
        body_bytes: written.body_bytes,
        content_sha256: written.content_sha256,
        position: after,
        missing: missing.text,
        missing_complete: missing.ranges <= MAX_MISSING_RANGES,
        source: node.label.clone(),
    })
}

/// The ids skipped between consecutive records, as ranges.
#[derive(Default)]
struct Missing {
    text: String,
    ranges: usize,
}

impl Missing {
    /// `id` follows `previous` (0 before the first record).
    fn saw(&mut self, previous: u64, id: u64) {
        if id <= previous + 1 {
            return;
        }
        self.ranges += 1;
        if self.ranges > MAX_MISSING_RANGES {
            return;
        }
        if !self.text.is_empty() {
            self.text.push(',');
        }
        let (first, last) = (previous + 1, id - 1);
        if first == last {
            let _ = write!(self.text, "{first}");
        } else {
            let _ = write!(self.text, "{first}-{last}");
        }
    }
}

/// Parses a manifest's `missing` text back into ranges.
pub fn missing_ranges(text: &str) -> Vec<(u64, u64)> {
    text.split(',')
        .filter(|e| !e.is_empty())
        .filter_map(|entry| match entry.split_once('-') {
            Some((a, b)) => a.parse().ok().zip(b.parse().ok()),
            None => entry.parse().ok().map(|id| (id, id)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_ids_become_ranges() {
        let mut m = Missing::default();
        let mut previous = 0;
        for id in [1, 2, 4, 8, 9, 10, 12] {
            m.saw(previous, id);
            previous = id;
        }
        assert_eq!(m.text, "3,5-7,11");
        assert_eq!(missing_ranges(&m.text), vec![(3, 3), (5, 7), (11, 11)]);
        let mut from_start = Missing::default();
        from_start.saw(0, 5);
        assert_eq!(from_start.text, "1-4");
    }

    #[test]
    fn a_non_empty_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        prepare_directory(dir.path()).unwrap();
        std::fs::write(dir.path().join("x"), b"x").unwrap();
        assert!(matches!(
            prepare_directory(dir.path()),
            Err(BackupError::Refused(_))
        ));
        let fresh = dir.path().join("a/b");
        prepare_directory(&fresh).unwrap();
        assert!(fresh.is_dir());
    }
}
