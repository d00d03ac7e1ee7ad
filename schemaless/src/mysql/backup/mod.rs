//! Backup and restore of an instance's cells.
//!
//! A backup is a directory: one gzip file per shard holding its entity
//! rows exactly as stored ([`format`]), and a [`manifest`] written last
//! with each file's checksum, its cell count and content digest, and the
//! change-log position it is consistent at.
//!
//! - [`dump`]: `mezzanine backup`: each shard read inside one InnoDB
//!   consistent snapshot (on a minion when there is one, so the masters'
//!   purge is not held back), while writes go on;
//! - [`restore`]: `mezzanine restore`: into an instance with no cells,
//!   all of it or up to an added_id per shard (point in time within the
//!   change log), compared with the manifest afterwards;
//! - `manifest::verify`: `mezzanine backup verify`;
//! - [`insert`]: rows written back with their own added_ids (a restore's
//!   and a shard copy's writes);
//! - [`snapshot`]: a shard's rows read inside one consistent snapshot (the
//!   backup's reader, and a shard copy's).
//!
//! What is backed up is the cells: the entity table is the change log and
//! the whole truth of a shard. Index entries, trigger offsets and buffers
//! are derived or transient; a restored instance rebuilds its indexes with
//! `index backfill`, and its triggers start from the beginning of the log
//! (handlers are at-least-once already).

pub mod dump;
pub mod format;
pub mod insert;
pub mod manifest;
pub mod restore;
pub mod snapshot;

use std::path::{Path, PathBuf};

pub use dump::{backup, BackupOptions};
pub use manifest::{Manifest, ShardEntry, MANIFEST};
pub use restore::{restore, RestoreOptions, RestoreReport, Until};

/// What can go wrong backing up or restoring. Every variant is found
/// before anything is written, except [`BackupError::Store`] during the
/// copy and [`BackupError::Mismatch`] after it.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A backup file is not what its manifest says, or not a backup file.
    #[error("{path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    /// The manifest is missing or unreadable.
    #[error("manifest {path}: {reason}")]
    Manifest { path: PathBuf, reason: String },
    /// The request does not fit the backup or the target.
    #[error("{0}")]
    Refused(String),
    /// A storage node failed.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// A restored shard read back differs from what was restored.
    #[error("shard {shard} restored wrongly: {reason}")]
    Mismatch { shard: u32, reason: String },
}

impl BackupError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> BackupError {
        BackupError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The file of `shard` inside a backup directory.
pub fn shard_file(shard: u32) -> String {
    format!("shard_{shard:04}.cells.gz")
}

/// Reads an entity row (`sql::CELL_COLUMNS` order) as a record, without
/// decoding its body.
pub(crate) fn record_of_row(
    row: &sqlx::mysql::MySqlRow,
    node: &super::topology::Node,
    shard: u32,
) -> Result<format::Record, BackupError> {
    use sqlx::Row;
    let field = |e: sqlx::Error| BackupError::Store(node.error(e));
    let added_id: u64 = row.try_get(0).map_err(field)?;
    let key: Vec<u8> = row.try_get(1).map_err(field)?;
    let row_key: [u8; 16] = key.as_slice().try_into().map_err(|_| {
        BackupError::Store(crate::Error::CorruptCell {
            cell: hex::encode(&key),
            shard,
            added_id,
            reason: "row key is not 16 bytes".into(),
        })
    })?;
    Ok(format::Record {
        added_id,
        row_key,
        column: row.try_get(2).map_err(field)?,
        ref_key: row.try_get(3).map_err(field)?,
        body: row.try_get(4).map_err(field)?,
        created_at: row.try_get(5).map_err(field)?,
    })
}

/// The cell count and content digest of a shard's entity table as `node`
/// holds it now (read page by page, not in one snapshot: meant for a shard
/// no one writes, such as a restore's target).
pub async fn shard_digest(
    node: &super::topology::Node,
    database: &str,
    shard: u32,
) -> Result<(u64, String), BackupError> {
    use sqlx::Row;
    let mut digest = format::ContentDigest::default();
    let mut after = 0;
    loop {
        let rows = node
            .fetch_all(super::sql::select_changes(
                database,
                after,
                2000,
                snapshot::PAGE_BYTES,
            ))
            .await?;
        let Some(last) = rows.last() else { break };
        after = last.try_get(0).map_err(|e| node.error(e))?;
        for row in &rows {
            digest.add(&record_of_row(row, node, shard)?);
        }
    }
    Ok((digest.cells(), digest.finish()))
}

/// Unix time in microseconds.
pub(crate) fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}
