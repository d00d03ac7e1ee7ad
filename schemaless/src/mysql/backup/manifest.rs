//! The backup's manifest: what it holds, where each shard's file is, and
//! the checksums that prove the files are whole.
//!
//! `manifest.json` is written last, after every shard file is on disk and
//! synced, and by rename: a directory without one is an unfinished backup
//! and nothing reads it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::format::{file_digest, ContentDigest, Reader};
use super::BackupError;

/// The manifest's file name inside a backup directory.
pub const MANIFEST: &str = "manifest.json";

/// The most ranges of missing ids a shard's entry lists.
pub const MAX_MISSING_RANGES: usize = 10_000;

/// The format this build writes and reads.
pub const FORMAT: u32 = 1;

/// Everything a backup directory holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// [`FORMAT`] when written.
    pub format: u32,
    /// A fresh UUID per backup: a restore cut short is resumed only from
    /// the same backup.
    pub id: String,
    /// The instance backed up.
    pub instance: String,
    /// Its shard count: routing depends on it, so a restore needs the same.
    pub shard_count: u32,
    /// When the backup started and finished, microseconds since the Unix
    /// epoch.
    pub started_at_us: i64,
    pub finished_at_us: i64,
    /// The version of Mezzanine that wrote it.
    pub written_by: String,
    /// One entry per shard backed up, in shard order.
    pub shards: Vec<ShardEntry>,
}

/// One shard's file and the position it is consistent at.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardEntry {
    /// The shard number.
    pub shard: u32,
    /// The file's name inside the backup directory.
    pub file: String,
    /// The file's length and SHA-256.
    pub file_bytes: u64,
    pub file_sha256: String,
    /// How many cells, and the SHA-256 of their records (see
    /// [`super::format`]).
    pub cells: u64,
    pub body_bytes: u64,
    pub content_sha256: String,
    /// The change-log position the file is consistent at: the highest
    /// added_id in the snapshot it was read from (0 for an empty shard).
    pub position: u64,
    /// Ids at or below `position` that the snapshot did not hold, as
    /// ranges (`3-5,9`): inserts rolled back, duplicates refused, and
    /// writes that had taken an id but not yet committed when the snapshot
    /// was taken (they are after the snapshot, whatever their number).
    /// At most [`MAX_MISSING_RANGES`] are listed; `missing_complete` says
    /// whether that is all of them.
    pub missing: String,
    pub missing_complete: bool,
    /// The storage node it was read from.
    pub source: String,
}

impl Manifest {
    /// Reads `DIR/manifest.json`.
    pub fn load(dir: &Path) -> Result<Manifest, BackupError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BackupError::Manifest {
                path: path.clone(),
                reason: "not found: not a backup directory, or a backup that did not finish".into(),
            },
            _ => BackupError::io(&path, e),
        })?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| BackupError::Manifest {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if manifest.format != FORMAT {
            return Err(BackupError::Manifest {
                path,
                reason: format!(
                    "format {} is not the {FORMAT} this build reads",
                    manifest.format
                ),
            });
        }
        for entry in &manifest.shards {
            let name_is_plain = !entry.file.is_empty()
                && entry
                    .file
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && !entry.file.starts_with('.');
            if entry.shard >= manifest.shard_count || !name_is_plain {
                return Err(BackupError::Manifest {
                    path,
                    reason: format!(
                        "entry for shard {} (file {:?}) does not fit an instance of {} shards in one directory",
                        entry.shard, entry.file, manifest.shard_count
                    ),
                });
            }
        }
        Ok(manifest)
    }

    /// Writes `DIR/manifest.json` through a temporary file and a rename.
    pub fn save(&self, dir: &Path) -> Result<(), BackupError> {
        let path = dir.join(MANIFEST);
        let temporary = dir.join(format!("{MANIFEST}.partial"));
        let text = serde_json::to_string_pretty(self).expect("a manifest serializes");
        std::fs::write(&temporary, text).map_err(|e| BackupError::io(&temporary, e))?;
        std::fs::File::open(&temporary)
            .and_then(|f| f.sync_all())
            .map_err(|e| BackupError::io(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| BackupError::io(&path, e))?;
        Ok(())
    }

    /// The entry of `shard`, if backed up.
    pub fn shard(&self, shard: u32) -> Option<&ShardEntry> {
        self.shards.iter().find(|e| e.shard == shard)
    }
}

impl ShardEntry {
    /// Its file's path inside `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.file)
    }
}

/// What `verify` found of one shard's file.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    pub shard: u32,
    pub file: String,
    pub cells: u64,
    /// `None` when whole; what is wrong otherwise.
    pub problem: Option<String>,
}

/// Checks every file of the backup against the manifest: its length and
/// SHA-256, and (with `deep`) its records read back: their order, count
/// and content digest. Returns one result per shard; the call fails only
/// when the manifest itself cannot be read.
pub fn verify(dir: &Path, deep: bool) -> Result<(Manifest, Vec<Checked>), BackupError> {
    let manifest = Manifest::load(dir)?;
    let checked = manifest
        .shards
        .iter()
        .map(|entry| Checked {
            shard: entry.shard,
            file: entry.file.clone(),
            cells: entry.cells,
            problem: check_entry(dir, entry, deep).err().map(|e| e.to_string()),
        })
        .collect();
    Ok((manifest, checked))
}

/// Checks one shard's file; see [`verify`].
pub fn check_entry(dir: &Path, entry: &ShardEntry, deep: bool) -> Result<(), BackupError> {
    let path = entry.path(dir);
    let (sha, bytes) = file_digest(&path)?;
    if bytes != entry.file_bytes || sha != entry.file_sha256 {
        return Err(BackupError::Damaged {
            path,
            reason: format!(
                "checksum mismatch: the manifest records {} bytes with SHA-256 {}, the file has {bytes} bytes with {sha}",
                entry.file_bytes, entry.file_sha256
            ),
        });
    }
    if !deep {
        return Ok(());
    }
    let mut reader = Reader::open(&path)?;
    let mut digest = ContentDigest::default();
    let mut last = 0;
    while let Some(record) = reader.next_record()? {
        last = record.added_id;
        digest.add(&record);
    }
    let cells = digest.cells();
    let content = digest.finish();
    if cells != entry.cells || content != entry.content_sha256 || last != entry.position {
        return Err(BackupError::Damaged {
            path,
            reason: format!(
                "its records do not match the manifest: {cells} cells up to added_id {last} with content SHA-256 {content}, \
                 the manifest says {} cells up to {} with {}",
                entry.cells, entry.position, entry.content_sha256
            ),
        });
    }
    Ok(())
}
