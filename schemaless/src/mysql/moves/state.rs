//! Where each move stands: the `moves` table of the instance's metadata
//! database, on every master.
//!
//! A row per shard of a move, keyed by the move's id (when it started, in
//! microseconds) and the shard, and versioned by `seq`, which every change
//! raises: readers take the highest `seq` of each row over every master
//! that answers, as placements and promotions are read. `shard status`
//! shows what is in progress, `shard resume` and `shard rollback` find the
//! moves to act on here, and a new move refuses a shard that one still
//! holds.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::Row;

use crate::error::{Error, Result};
use crate::mysql::schema::meta_database;
use crate::mysql::topology::{Node, Topology};

/// `CREATE TABLE` of the moves.
pub fn create_moves_table(meta: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS `{meta}`.`moves` (
            id BIGINT UNSIGNED NOT NULL,
            shard INT UNSIGNED NOT NULL,
            source VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            target VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
            phase VARCHAR(16) CHARACTER SET ascii NOT NULL,
            seq BIGINT UNSIGNED NOT NULL,
            copied BIGINT UNSIGNED NOT NULL,
            fence_ms BIGINT UNSIGNED NULL,
            updated_at BIGINT NOT NULL,
            PRIMARY KEY (id, shard)
        ) ENGINE=InnoDB"
    )
}

/// The steps of a move, in order. A move killed in any phase before
/// [`Phase::Switched`] is run again from its copy (which keeps what it
/// copied); from `Switched` on it only finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The snapshot is being copied to the target.
    Copying,
    /// The source's log is being followed until the copy is nearly level.
    CatchingUp,
    /// Writes to the shard are refused for the last pass and the switch.
    Fenced,
    /// The placement names the target; the old copy is renamed away.
    Switched,
    /// Writes go to the target; the old copy waits for `shard gc`.
    Done,
    /// Given up before the switch: the shard stayed where it was.
    RolledBack,
    /// The old copy was dropped by `shard gc`.
    Collected,
}

impl Phase {
    /// Its name in the table and in `shard status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Copying => "copying",
            Phase::CatchingUp => "catching_up",
            Phase::Fenced => "fenced",
            Phase::Switched => "switched",
            Phase::Done => "done",
            Phase::RolledBack => "rolled_back",
            Phase::Collected => "collected",
        }
    }

    fn parse(text: &str) -> Option<Phase> {
        [
            Phase::Copying,
            Phase::CatchingUp,
            Phase::Fenced,
            Phase::Switched,
            Phase::Done,
            Phase::RolledBack,
            Phase::Collected,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }

    /// Whether the move still has work to do (and holds its shard).
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Phase::Copying | Phase::CatchingUp | Phase::Fenced | Phase::Switched
        )
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One shard of one move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MoveRecord {
    /// When the move started (microseconds since the epoch): its identity.
    pub id: u64,
    /// The shard.
    pub shard: u32,
    /// The cluster it is moved from, by name.
    pub source: String,
    /// The cluster it is moved to.
    pub target: String,
    /// Where it stands.
    pub phase: Phase,
    /// Raised by every change.
    pub seq: u64,
    /// Cells copied so far.
    pub copied: u64,
    /// How long writes to the shard were fenced, once switched.
    pub fence_ms: Option<u64>,
    /// When it last changed (microseconds since the epoch).
    pub updated_at: i64,
}

async fn read_on(node: &Node, meta: &str) -> Result<Vec<MoveRecord>> {
    let rows = match node
        .fetch_all(format!(
            "SELECT id, shard, source, target, phase, seq, copied, fence_ms, updated_at FROM `{meta}`.`moves`"
        ))
        .await
    {
        Ok(rows) => rows,
        Err(e) if e.is_missing_table() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    rows.iter()
        .map(|row| {
            let phase: String = row.try_get(4).map_err(|e| node.error(e))?;
            Ok(MoveRecord {
                id: row.try_get(0).map_err(|e| node.error(e))?,
                shard: row.try_get(1).map_err(|e| node.error(e))?,
                source: row.try_get(2).map_err(|e| node.error(e))?,
                target: row.try_get(3).map_err(|e| node.error(e))?,
                phase: Phase::parse(&phase).ok_or_else(|| {
                    Error::Schema(format!(
                        "{meta}.moves on {}: unknown phase {phase:?}",
                        node.label
                    ))
                })?,
                seq: row.try_get(5).map_err(|e| node.error(e))?,
                copied: row.try_get(6).map_err(|e| node.error(e))?,
                fence_ms: row.try_get(7).map_err(|e| node.error(e))?,
                updated_at: row.try_get(8).map_err(|e| node.error(e))?,
            })
        })
        .collect()
}

/// Every move's newest record over every master that answers, oldest
/// move first.
pub async fn recorded(topology: &Topology) -> Vec<MoveRecord> {
    let meta = meta_database(&topology.instance);
    let reads = crate::mysql::failover::sources(topology)
        .into_iter()
        .map(|node| {
            let meta = meta.clone();
            async move { read_on(&node, &meta).await }
        })
        .collect::<Vec<_>>();
    let mut newest: HashMap<(u64, u32), MoveRecord> = HashMap::new();
    for records in futures::future::join_all(reads).await.into_iter().flatten() {
        for r in records {
            let key = (r.id, r.shard);
            if newest.get(&key).is_none_or(|known| known.seq < r.seq) {
                newest.insert(key, r);
            }
        }
    }
    let mut all: Vec<MoveRecord> = newest.into_values().collect();
    all.sort_by_key(|r| (r.id, r.shard));
    all
}

/// The newest move of each shard that is still in progress.
pub async fn in_progress(topology: &Topology) -> HashMap<u32, MoveRecord> {
    let mut latest: HashMap<u32, MoveRecord> = HashMap::new();
    for r in recorded(topology).await {
        latest.insert(r.shard, r);
    }
    latest.retain(|_, r| r.phase.in_progress());
    latest
}

/// Writes `record` (its `seq` raised first) to every master. Every master
/// must take it: a phase only some know could be read back older.
pub async fn save(topology: &Topology, record: &mut MoveRecord) -> Result<()> {
    let meta = meta_database(&topology.instance);
    record.seq += 1;
    record.updated_at = crate::cell::now_micros();
    for c in &topology.clusters {
        let master = c.master();
        master.execute(create_moves_table(&meta)).await?;
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO `{meta}`.`moves` (id, shard, source, target, phase, seq, copied, fence_ms, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE
               phase = IF(VALUES(seq) > seq, VALUES(phase), phase),
               copied = IF(VALUES(seq) > seq, VALUES(copied), copied),
               fence_ms = IF(VALUES(seq) > seq, VALUES(fence_ms), fence_ms),
               updated_at = IF(VALUES(seq) > seq, VALUES(updated_at), updated_at),
               seq = GREATEST(seq, VALUES(seq))"
        )))
        .bind(record.id)
        .bind(record.shard)
        .bind(record.source.clone())
        .bind(record.target.clone())
        .bind(record.phase.as_str())
        .bind(record.seq)
        .bind(record.copied)
        .bind(record.fence_ms)
        .bind(record.updated_at);
        master.execute_prepared(query).await?;
    }
    Ok(())
}
