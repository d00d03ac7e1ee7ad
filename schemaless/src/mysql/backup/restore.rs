//! `mezzanine restore`: a backup written into an instance with no cells,
//! whole or up to a point of each shard's change log.
//!
//! In order, each step only after the one before succeeded:
//!
//! 1. every file to restore is checked against the manifest (checksum and
//!    records) and the target instance is checked: the same shard count,
//!    and no cells in any shard to restore. Nothing is written before
//!    both pass;
//! 2. the target's schema is applied, and the restore is recorded in
//!    `<instance>_meta.restores` on every master;
//! 3. each shard's records are inserted with their own added_ids (so the
//!    target's change log has the source's positions, and its
//!    auto-increment continues after them);
//! 4. each shard is read back and its cell count and content digest are
//!    compared with what was restored; for a whole shard, that is the
//!    manifest's.
//!
//! A restore cut short (a crash, a node lost) leaves shards with some
//! cells; run the same restore again and it continues: shards holding
//! cells are accepted when the target records this very restore (the same
//! backup, the same point in time), and inserts of rows already there are
//! skipped. Step 4 proves the result either way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use futures::StreamExt;
use serde::Serialize;

use super::format::{ContentDigest, Reader};
use super::insert::Inserter;
use super::manifest::{check_entry, Manifest, ShardEntry};
use super::{now_micros, BackupError};
use crate::mysql::schema::{self, meta_database};
use crate::mysql::topology::{Node, Topology};

/// How far into each shard's change log to restore.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Until {
    /// For every shard not listed in `shards`: restore cells with an
    /// added_id at most this (everything when `None`).
    pub all: Option<u64>,
    /// Per shard.
    pub shards: BTreeMap<u32, u64>,
}

impl Until {
    /// Parses `N` (every shard) or `SHARD:N,SHARD:N,…`, or both
    /// (`100,3:40`: shard 3 to 40, the others to 100).
    pub fn parse(text: &str) -> Result<Until, String> {
        let mut until = Until::default();
        for part in text.split(',').map(str::trim) {
            let number = |s: &str| {
                s.trim().parse::<u64>().map_err(|_| {
                    format!("{text:?}: expected an added_id or SHARD:ADDED_ID, comma-separated")
                })
            };
            match part.split_once(':') {
                Some((shard, id)) => {
                    let shard = u32::try_from(number(shard)?)
                        .map_err(|_| format!("{text:?}: {shard} is not a shard number"))?;
                    if until.shards.insert(shard, number(id)?).is_some() {
                        return Err(format!("{text:?}: shard {shard} is given twice"));
                    }
                }
                None => {
                    if until.all.replace(number(part)?).is_some() {
                        return Err(format!("{text:?}: more than one added_id for every shard"));
                    }
                }
            }
        }
        Ok(until)
    }

    /// The last added_id to restore of `shard`.
    pub fn of(&self, shard: u32) -> Option<u64> {
        self.shards.get(&shard).copied().or(self.all)
    }

    /// The saved form, to recognize the same restore when it is resumed.
    fn text(&self) -> String {
        let mut out = self.all.map(|n| n.to_string()).unwrap_or_default();
        for (shard, id) in &self.shards {
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write!(out, "{shard}:{id}");
        }
        out
    }
}

/// What to restore.
#[derive(Clone, Debug, Default)]
pub struct RestoreOptions {
    /// Point in time within each shard's change log.
    pub until: Until,
    /// How many shards are written at once.
    pub parallel: usize,
}

/// One shard restored.
#[derive(Clone, Debug, Serialize)]
pub struct RestoredShard {
    pub shard: u32,
    /// Cells restored (and read back).
    pub cells: u64,
    /// The highest added_id restored (0 for none).
    pub position: u64,
    /// Whether this is the whole of the backed-up shard.
    pub whole: bool,
    /// The content digest both sides agree on.
    pub content_sha256: String,
}

/// What a restore did.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    /// The backup's id and instance.
    pub backup_id: String,
    pub from_instance: String,
    /// The instance restored into.
    pub instance: String,
    /// Whether an earlier run of the same restore was continued.
    pub resumed: bool,
    pub shards: Vec<RestoredShard>,
}

/// Restores the backup in `dir` into `topology`'s instance.
pub async fn restore(
    dir: &Path,
    topology: &Topology,
    options: &RestoreOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RestoreReport, BackupError> {
    let manifest = Manifest::load(dir)?;
    if manifest.shard_count != topology.shard_count {
        return Err(BackupError::Refused(format!(
            "the backup is of an instance with {} shards, the target config has {}: \
             a row's shard depends on the count, so it must be the same",
            manifest.shard_count, topology.shard_count
        )));
    }
    let unknown: Vec<u32> = options
        .until
        .shards
        .keys()
        .copied()
        .filter(|s| manifest.shard(*s).is_none())
        .collect();
    if !unknown.is_empty() {
        return Err(BackupError::Refused(format!(
            "--until-added-id names shards the backup does not hold: {unknown:?}"
        )));
    }
    for entry in &manifest.shards {
        check_entry(dir, entry, true)?;
    }
    let marker = Marker {
        backup_id: manifest.id.clone(),
        until: options.until.text(),
    };
    let resumed = check_target(topology, &manifest, &marker).await?;
    schema::apply(topology).await?;
    for cluster in &topology.clusters {
        marker.record(&cluster.master(), &topology.instance).await?;
    }
    // Made in a loop, not by a closure in the stream (see `dump`).
    let mut restores = Vec::with_capacity(manifest.shards.len());
    for entry in &manifest.shards {
        restores.push(restore_shard(
            dir,
            topology,
            entry,
            options.until.of(entry.shard),
            progress,
        ));
    }
    let mut shards = futures::stream::iter(restores)
        .buffer_unordered(options.parallel.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    shards.sort_by_key(|s| s.shard);
    for cluster in &topology.clusters {
        marker.finish(&cluster.master(), &topology.instance).await?;
    }
    Ok(RestoreReport {
        backup_id: manifest.id,
        from_instance: manifest.instance,
        instance: topology.instance.clone(),
        resumed,
        shards,
    })
}

/// Refuses a target with cells in a shard to restore, unless it records
/// this same restore (then returns true: a resumed one).
async fn check_target(
    topology: &Topology,
    manifest: &Manifest,
    marker: &Marker,
) -> Result<bool, BackupError> {
    let mut occupied = Vec::new();
    for entry in &manifest.shards {
        let node = topology.cluster(entry.shard)?.master();
        let database = topology.database(entry.shard);
        match node
            .fetch_all(format!("SELECT 1 FROM `{database}`.`entity` LIMIT 1"))
            .await
        {
            Ok(rows) if rows.is_empty() => {}
            Ok(_) => occupied.push((entry.shard, node)),
            Err(e) if e.is_missing_table() => {}
            Err(e) => return Err(e.into()),
        }
    }
    if occupied.is_empty() {
        return Ok(false);
    }
    for (_, node) in &occupied {
        if !marker.recorded_on(node, &topology.instance).await? {
            let shards: Vec<String> = occupied.iter().map(|(s, _)| s.to_string()).collect();
            return Err(BackupError::Refused(format!(
                "instance {:?} is not empty: shards {} hold cells; a restore goes into an instance \
                 with no cells (or continues the same restore, from the same backup to the same point)",
                topology.instance,
                abbreviate(&shards)
            )));
        }
    }
    Ok(true)
}

fn abbreviate(items: &[String]) -> String {
    if items.len() <= 8 {
        items.join(", ")
    } else {
        format!("{}, … ({} in all)", items[..8].join(", "), items.len())
    }
}

/// The record of a restore on a master, saying which backup to which
/// point: what makes a rerun a continuation.
struct Marker {
    backup_id: String,
    until: String,
}

impl Marker {
    fn create(meta: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS `{meta}`.`restores` (
                backup_id CHAR(36) CHARACTER SET ascii NOT NULL,
                until_added_id VARCHAR(2048) CHARACTER SET ascii NOT NULL,
                started_at BIGINT NOT NULL,
                finished_at BIGINT NULL,
                PRIMARY KEY (backup_id, until_added_id)
            ) ENGINE=InnoDB"
        )
    }

    async fn recorded_on(&self, node: &Node, instance: &str) -> Result<bool, BackupError> {
        let meta = meta_database(instance);
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT 1 FROM `{meta}`.`restores` WHERE backup_id = ? AND until_added_id = ?"
        )))
        .bind(self.backup_id.clone())
        .bind(self.until.clone());
        match node.fetch_optional(query).await {
            Ok(row) => Ok(row.is_some()),
            Err(e) if e.is_missing_table() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn record(&self, node: &Node, instance: &str) -> Result<(), BackupError> {
        let meta = meta_database(instance);
        node.execute(Marker::create(&meta)).await?;
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT IGNORE INTO `{meta}`.`restores` (backup_id, until_added_id, started_at) VALUES (?, ?, ?)"
        )))
        .bind(self.backup_id.clone())
        .bind(self.until.clone())
        .bind(now_micros());
        node.execute_prepared(query).await?;
        Ok(())
    }

    async fn finish(&self, node: &Node, instance: &str) -> Result<(), BackupError> {
        let meta = meta_database(instance);
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE `{meta}`.`restores` SET finished_at = ? WHERE backup_id = ? AND until_added_id = ?"
        )))
        .bind(now_micros())
        .bind(self.backup_id.clone())
        .bind(self.until.clone());
        node.execute_prepared(query).await?;
        Ok(())
    }
}

async fn restore_shard(
    dir: &Path,
    topology: &Topology,
    entry: &ShardEntry,
    until: Option<u64>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<RestoredShard, BackupError> {
    let node = topology.cluster(entry.shard)?.master();
    let database = topology.database(entry.shard);
    let mut reader = Reader::open(&entry.path(dir))?;
    let mut expected = ContentDigest::default();
    let mut position = 0;
    let mut inserter = Inserter::new(&node, database.clone());
    while let Some(record) = reader.next_record()? {
        if until.is_some_and(|last| record.added_id > last) {
            break;
        }
        position = record.added_id;
        expected.add(&record);
        progress(inserter.push(&record).await?);
    }
    progress(inserter.flush().await?);
    let whole = position == entry.position;
    let cells = expected.cells();
    let expected = expected.finish();
    if whole && (expected != entry.content_sha256 || cells != entry.cells) {
        // The file was checked against the manifest before the restore;
        // only a change made to it since could get here.
        return Err(BackupError::Damaged {
            path: entry.path(dir),
            reason: "it changed during the restore".into(),
        });
    }
    let (found_cells, found) = super::shard_digest(&node, &database, entry.shard).await?;
    if found_cells != cells || found != expected {
        return Err(BackupError::Mismatch {
            shard: entry.shard,
            reason: format!(
                "{cells} cells restored with content SHA-256 {expected}, the target holds {found_cells} with {found}"
            ),
        });
    }
    Ok(RestoredShard {
        shard: entry.shard,
        cells,
        position,
        whole,
        content_sha256: expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_takes_one_id_per_shard_and_one_for_the_rest() {
        let until = Until::parse("100, 3:40,7:0").unwrap();
        assert_eq!(until.of(3), Some(40));
        assert_eq!(until.of(7), Some(0));
        assert_eq!(until.of(5), Some(100));
        assert_eq!(until.text(), "100,3:40,7:0");
        assert_eq!(Until::parse("3:9").unwrap().of(4), None);
        for bad in ["", "x", "3:", "1,2", "3:1,3:2", "-1", "99999999999:1"] {
            assert!(Until::parse(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
