//! One shard moved, phase by phase, and the moves resumed, rolled back
//! and collected.
//!
//! The order of the steps is what makes a move safe to kill anywhere:
//!
//! 1. *copying*, *catching up*: [`ShardCopy`] while writes go on, until a
//!    pass copies little; the target's minions apply the copy; one more
//!    pass.
//! 2. *fenced*: the source's fence (every table, with a deadline) goes
//!    up; the last pass copies what landed before it, then the shard's
//!    other tables are copied whole.
//! 3. The target's `entity` is fenced (with a deadline), and the source's
//!    `entity` fence made permanent; one more pass copies anything a
//!    lapsed deadline let in, and counts are compared.
//! 4. The placement is recorded: from here the target is the shard's
//!    home. Stores that have not read it yet still write the source and
//!    meet its permanent fence; they re-read the placements and follow.
//! 5. *switched*: the source's `entity` is renamed [`MOVED_ENTITY`], so a
//!    store that has not read the placement and reads the old copy gets
//!    "no such table", re-reads the placements and reads the new home
//!    instead of an answer the new home has moved past. Only then is the
//!    target's fence lifted: no write lands on the new home while a read
//!    could still be answered by the old one.
//! 6. *done*: the old copy's other tables are fenced for good (outside
//!    the writers' wait, long before the deadline); `shard gc` drops the
//!    old copy after the grace period.
//!
//! Only `entity` is held inside the window writers wait through: each
//! trigger is a DDL statement (a few milliseconds, replicated), and the
//! rest needs holding only until the switch.
//!
//! Killed before step 4 a move leaves the shard at its source: fenced
//! until the deadline at most (a permanent fence from step 3 until `shard
//! resume` or `shard rollback`), never writable in two places. Killed
//! after it, the target is the home and `shard resume` finishes steps 5
//! and 6.

use std::time::{Duration, Instant};

use sqlx::Row;

use super::fence::{self, Hold, Scope};
use super::state::{self, MoveRecord, Phase};
use super::{side, ShardCopy, MOVED_ENTITY};
use crate::mysql::backup::BackupError;
use crate::mysql::topology::{placement, ClusterNodes, Node, Topology};

/// How a move runs.
#[derive(Clone, Debug)]
pub struct MoveOptions {
    /// How long a fence holds if the mover dies under it.
    pub fence_timeout: Duration,
    /// Catching up ends when a pass copies at most this many cells.
    pub level_cells: u64,
    /// ... or after this many passes.
    pub max_passes: usize,
    /// Stop (and wait to be killed) after saving this phase: fire drills
    /// and the tests of a killed move.
    pub hold_at: Option<Phase>,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            fence_timeout: Duration::from_secs(10),
            level_cells: 200,
            max_passes: 50,
            hold_at: None,
        }
    }
}

/// What one shard's move did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MoveReport {
    pub shard: u32,
    pub source: String,
    pub target: String,
    /// Cells copied (snapshot and passes).
    pub copied: u64,
    /// Catch-up passes before the fence.
    pub passes: usize,
    /// Rows of the shard's other tables copied under the fence.
    pub side_rows: u64,
    /// From the start to the fence.
    pub copy_ms: u64,
    /// How long writes to the shard were refused.
    pub fence_ms: u64,
    /// When the fence went up and came down (microseconds since the
    /// epoch, this host's clock), to line up with writers' latencies.
    pub fenced_from_us: Option<i64>,
    pub fenced_until_us: Option<i64>,
}

/// Checks a move of `shards` to the cluster named `target` and returns
/// the records it would start with: refused if the cluster is unknown, a
/// shard does not exist or is on the target already, or a move still in
/// progress holds a shard.
pub async fn plan(
    topology: &Topology,
    shards: &[u32],
    target: &str,
) -> Result<Vec<MoveRecord>, BackupError> {
    let Some(target_index) = topology.cluster_named(target) else {
        return Err(BackupError::Refused(format!(
            "no cluster named {target:?} in the config (clusters: {})",
            topology.cluster_names()
        )));
    };
    placement::refresh(topology).await;
    let busy = state::in_progress(topology).await;
    let id = crate::cell::now_micros() as u64;
    let mut records = Vec::new();
    for &shard in shards {
        let source = topology.cluster_index(shard)?;
        if source == target_index {
            return Err(BackupError::Refused(format!(
                "shard {shard} is on cluster {target:?} already"
            )));
        }
        if let Some(other) = busy.get(&shard) {
            return Err(BackupError::Refused(format!(
                "shard {shard} is being moved already ({} to {}, {}): `shard resume` or `shard rollback` it first",
                other.source, other.target, other.phase
            )));
        }
        records.push(MoveRecord {
            id,
            shard,
            source: topology.clusters[source].name.clone(),
            target: target.to_string(),
            phase: Phase::Copying,
            seq: 0,
            copied: 0,
            fence_ms: None,
            updated_at: 0,
        });
    }
    Ok(records)
}

/// Moves one shard, from wherever its record stands: from the copy if it
/// has not switched, else only what is left after the switch.
pub async fn run(
    topology: &Topology,
    record: &mut MoveRecord,
    options: &MoveOptions,
) -> Result<MoveReport, BackupError> {
    let (source, target) = ends(topology, record)?;
    let database = topology.database(record.shard);
    let mut report = MoveReport {
        shard: record.shard,
        source: record.source.clone(),
        target: record.target.clone(),
        copied: 0,
        passes: 0,
        side_rows: 0,
        copy_ms: 0,
        fence_ms: 0,
        fenced_from_us: None,
        fenced_until_us: None,
    };
    placement::refresh(topology).await;
    let target_index = topology
        .cluster_named(&record.target)
        .expect("ends() found the target");
    let mut fenced_at = None;
    if topology.cluster_index(record.shard)? != target_index {
        let started = Instant::now();
        save(topology, record, Phase::Copying, options).await?;
        clear_leftovers(&target, &database).await?;
        let mut copy = ShardCopy::start(topology, record.shard, target_index).await?;
        record.copied = copy.copied();
        save(topology, record, Phase::CatchingUp, options).await?;
        while report.passes < options.max_passes {
            report.passes += 1;
            if copy.catch_up().await? <= options.level_cells {
                break;
            }
        }
        // The target's minions apply the copy before the switch, so that
        // minion reads on the new home are not behind by a whole shard;
        // then one more pass, for what came in meanwhile.
        minions_applied(&topology.clusters[target_index]).await;
        copy.catch_up().await?;
        report.passes += 1;
        report.copy_ms = started.elapsed().as_millis() as u64;
        fenced_at = Some(Instant::now());
        report.fenced_from_us = Some(crate::cell::now_micros());
        let mut lap = Lap::new(record.shard);
        let until = Hold::Until(options.fence_timeout.as_millis() as u64);
        retry_ddl(|| fence::fence(&source, &database, record.shard, until, Scope::Shard)).await?;
        lap.mark("source fenced");
        record.copied = copy.copied();
        save(topology, record, Phase::Fenced, options).await?;
        lap.mark("phase saved");
        copy.catch_up().await?;
        lap.mark("last pass");
        report.side_rows = side::copy(&source, &target, &database).await?;
        lap.mark("other tables copied");
        // The target takes no cell until the old copy is out of sight.
        retry_ddl(|| fence::fence(&target, &database, record.shard, until, Scope::Entity)).await?;
        lap.mark("target fenced");
        // Cells never reach the source again: not even if the deadline
        // lapses now. (Its other tables are made permanent after the
        // switch, outside the writers' wait: see below.)
        retry_ddl(|| {
            fence::fence(
                &source,
                &database,
                record.shard,
                Hold::Always,
                Scope::Entity,
            )
        })
        .await?;
        lap.mark("source entity fenced for good");
        // The deadline may have lapsed on a slow pass: what it let in is
        // copied now, under the permanent fence.
        if copy.catch_up().await? > 0 {
            report.side_rows = side::copy(&source, &target, &database).await?;
        }
        lap.mark("checking pass");
        let (on_source, on_target) = (
            level(&source, &database).await?,
            level(&target, &database).await?,
        );
        lap.mark("counts compared");
        if on_source != on_target {
            // Writes resume at the source; `shard resume` starts over.
            fence::lift(&source, &database).await?;
            return Err(BackupError::Mismatch {
                shard: record.shard,
                reason: format!(
                    "after the last pass the source holds {} cells up to added_id {} and the copy {} up to {}; the fence is lifted and the shard stays where it was",
                    on_source.0, on_source.1, on_target.0, on_target.1
                ),
            });
        }
        record.copied = copy.copied();
        report.copied = copy.copied();
        placement::record(topology, record.shard, &record.target).await?;
        lap.mark("placement recorded");
    }
    // Switched: the old copy's reads sent to the new home, then its writes.
    retry_ddl(|| rename_old_copy(&source, &database)).await?;
    save(topology, record, Phase::Switched, options).await?;
    retry_ddl(|| fence::lift(&target, &database)).await?;
    if let Some(at) = fenced_at {
        report.fence_ms = at.elapsed().as_millis() as u64;
        report.fenced_until_us = Some(crate::cell::now_micros());
    }
    // The old copy's other tables refuse writes for good, long before the
    // deadline: a store that has not read the placement yet (it re-reads
    // it every `storage.topology_refresh_ms`) and writes an index entry
    // or a trigger offset there is told to follow the move, never lets it
    // land where no one will look.
    retry_ddl(|| fence::fence(&source, &database, record.shard, Hold::Always, Scope::Shard))
        .await?;
    record.fence_ms = Some(report.fence_ms);
    save(topology, record, Phase::Done, options).await?;
    Ok(report)
}

/// Times the steps under the fence (logged at debug level).
struct Lap {
    shard: u32,
    last: Instant,
}

impl Lap {
    fn new(shard: u32) -> Lap {
        Lap {
            shard,
            last: Instant::now(),
        }
    }

    fn mark(&mut self, step: &str) {
        tracing::debug!(
            shard = self.shard,
            step,
            ms = self.last.elapsed().as_secs_f64() * 1e3,
            "shard move step"
        );
        self.last = Instant::now();
    }
}

/// Waits (a minute at most) until every minion of `cluster` has applied
/// what its master has now. A minion that does not is only warned about:
/// it is behind as any minion may be, and the move does not need it.
async fn minions_applied(cluster: &ClusterNodes) {
    let position = match cluster.master().gtid_binlog_pos().await {
        Ok(p)
            if p.chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '-' | ',')) =>
        {
            p
        }
        Ok(_) | Err(_) => return,
    };
    for minion in cluster.minions() {
        let waited = minion
            .fetch_all(format!("SELECT MASTER_GTID_WAIT('{position}', 60)"))
            .await
            .map(|rows| rows.first().and_then(|r| r.try_get::<i64, _>(0).ok()));
        if waited.as_ref().ok() != Some(&Some(0)) {
            tracing::warn!(minion = %minion.label, "a minion of the move's target did not apply the copy within a minute; moving on");
        }
    }
}

/// The source and target masters of a record's move.
fn ends(
    topology: &Topology,
    record: &MoveRecord,
) -> Result<(std::sync::Arc<Node>, std::sync::Arc<Node>), BackupError> {
    let named = |name: &str| {
        topology
            .cluster_named(name)
            .map(|i| topology.clusters[i].master())
            .ok_or_else(|| {
                BackupError::Refused(format!(
                    "the move of shard {} names cluster {name:?}, which this config does not have",
                    record.shard
                ))
            })
    };
    Ok((named(&record.source)?, named(&record.target)?))
}

async fn save(
    topology: &Topology,
    record: &mut MoveRecord,
    phase: Phase,
    options: &MoveOptions,
) -> Result<(), BackupError> {
    record.phase = phase;
    state::save(topology, record).await?;
    tracing::info!(shard = record.shard, phase = %phase, "shard move");
    if options.hold_at == Some(phase) {
        tracing::warn!(shard = record.shard, phase = %phase, "holding here, as asked");
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// A target that held the shard before (moved away and back) keeps the
/// old copy and its permanent fence: both go before a new copy arrives.
async fn clear_leftovers(target: &Node, database: &str) -> Result<(), BackupError> {
    let tables = fence::tables(target, database).await?;
    if tables.is_empty() {
        return Ok(());
    }
    fence::lift(target, database).await?;
    if tables.iter().any(|t| t == MOVED_ENTITY) {
        target
            .execute(format!(
                "DROP TABLE IF EXISTS `{database}`.`{MOVED_ENTITY}`"
            ))
            .await?;
    }
    Ok(())
}

/// Renames the old copy's `entity` away (if it was not already).
async fn rename_old_copy(source: &Node, database: &str) -> crate::Result<()> {
    let tables = fence::tables(source, database).await?;
    if !tables.iter().any(|t| t == "entity") {
        return Ok(());
    }
    source
        .execute(format!(
            "SET SESSION lock_wait_timeout = 2;
             RENAME TABLE `{database}`.`entity` TO `{database}`.`{MOVED_ENTITY}`;
             SET SESSION lock_wait_timeout = DEFAULT"
        ))
        .await
}

/// The cell count and highest added_id of the shard on `node`.
async fn level(node: &Node, database: &str) -> Result<(u64, u64), BackupError> {
    let row = node
        .fetch_all(format!(
            "SELECT COUNT(*), CAST(COALESCE(MAX(added_id), 0) AS UNSIGNED) FROM `{database}`.`entity`"
        ))
        .await?;
    let row = row.first().ok_or_else(|| {
        BackupError::Refused(format!(
            "{database}.entity on {} answered no row",
            node.label
        ))
    })?;
    let count: i64 = row.try_get(0).map_err(|e| node.error(e))?;
    let max: u64 = row.try_get(1).map_err(|e| node.error(e))?;
    Ok((count as u64, max))
}

/// A DDL statement of the move, tried again while a long transaction
/// holds the table's metadata lock (or the node fails for a moment).
async fn retry_ddl<T, F, Fut>(mut ddl: F) -> Result<T, BackupError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<T>>,
{
    let mut tries = 0;
    loop {
        match ddl().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && tries < 10 => {
                tries += 1;
                tracing::warn!(error = %e, "a shard move's DDL waited too long; trying again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Rolls back a move that has not switched: the fences lifted and the
/// partial copy dropped from the target; the shard stays where it was.
/// A switched move is refused: the target is the shard's home, and
/// moving it back is another move.
pub async fn rollback(topology: &Topology, record: &mut MoveRecord) -> Result<(), BackupError> {
    let (source, target) = ends(topology, record)?;
    placement::refresh(topology).await;
    if topology.cluster_named(&record.target) == Some(topology.cluster_index(record.shard)?) {
        return Err(BackupError::Refused(format!(
            "shard {} has switched to {:?} already; `shard resume` finishes the move, and `shard move {} --to {}` moves it back",
            record.shard, record.target, record.shard, record.source
        )));
    }
    let database = topology.database(record.shard);
    retry_ddl(|| fence::lift(&source, &database)).await?;
    target
        .execute(format!("DROP DATABASE IF EXISTS `{database}`"))
        .await?;
    record.phase = Phase::RolledBack;
    state::save(topology, record).await?;
    Ok(())
}

/// Drops the old copy of every move done at least `grace` ago (`shard
/// gc`). The copy is dropped only from a cluster the shard is not placed
/// on. Returns the records collected (or that would be, with `dry_run`).
pub async fn collect(
    topology: &Topology,
    grace: Duration,
    dry_run: bool,
) -> Result<Vec<MoveRecord>, BackupError> {
    placement::refresh(topology).await;
    let now = crate::cell::now_micros();
    let mut collected = Vec::new();
    for mut record in state::recorded(topology).await {
        if record.phase != Phase::Done
            || now.saturating_sub(record.updated_at) < grace.as_micros() as i64
        {
            continue;
        }
        let Some(source) = topology.cluster_named(&record.source) else {
            continue;
        };
        if topology.cluster_index(record.shard)? == source {
            // Moved back since: the source is the home again, and the
            // move back replaced its old copy.
            if !dry_run {
                record.phase = Phase::Collected;
                state::save(topology, &mut record).await?;
            }
            continue;
        }
        if !dry_run {
            let database = topology.database(record.shard);
            let master = topology.clusters[source].master();
            master
                .execute(format!("DROP DATABASE IF EXISTS `{database}`"))
                .await?;
            record.phase = Phase::Collected;
            state::save(topology, &mut record).await?;
        }
        collected.push(record);
    }
    Ok(collected)
}
