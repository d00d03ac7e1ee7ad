//! A trigger runner's work per cluster rather than per shard: what each
//! shard worker would otherwise ask its master for on its own, asked once
//! for all the shards the runner owns there.
//!
//! - [`watch_heads`]: every `triggers.watch_ms`, one `MAX(added_id)` query
//!   for the owned shards, waking the idle workers of shards others wrote;
//! - [`upkeep`]: every [`SAVE_EVERY`], the positions the workers published
//!   saved in one transaction; every [`RETRY_CHECK_EVERY`], one query for
//!   the shards with dead letters flagged for retry.
//!
//! Per shard, these were the most frequent statements a master answered
//! for an index maintainer under a steady write load (`bench index`): a
//! durable commit per shard for each offset save (64 a second on a master
//! of 32 busy shards), a dead-letter check per shard a second, and change-
//! log reads a head probe started while the shard's own worker was already
//! reading the same cells. They took the machine, and with it the lag.
//! Nothing here changes what is delivered or when an offset may move: the
//! worker still decides both; this only carries them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{literal, Position, Shared, SAVE_EVERY};
use crate::cell::now_micros;
use crate::mysql::sql::NOW_MICROS;

/// How often the dead letters of the owned shards are looked at for cells
/// flagged by `trigger retry`.
pub const RETRY_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The per-cluster tasks of a runner, aborted with it.
pub(super) struct ClusterTasks(pub(super) Vec<JoinHandle<()>>);

impl Drop for ClusterTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The cross-process wake-up of a runner's shards on one cluster: every
/// `triggers.watch_ms`, one query to the master for the newest added_id
/// of each shard the runner owns there, and a wake-up for each shard whose
/// head is past what its worker has reached. Writes of this process wake
/// their shards at once; this makes everyone else's writes seen within a
/// few milliseconds, where each shard polling as often would cost a query
/// per shard.
///
/// A worker that is reading or handling is not woken: its own read may
/// already hold the cells the probe saw (a write of this process woke it),
/// and a wake-up would make it read again for nothing. When it goes idle
/// with its head still ahead, the next probe wakes it: a write of another
/// process is seen at most one probe later than it would be otherwise.
pub(super) async fn watch_heads(s: Arc<Shared>, cluster: usize, cancel: CancellationToken) {
    let every = Duration::from_millis(s.options.watch_ms.max(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let owned = owned(&s, cluster);
        if owned.is_empty() {
            continue;
        }
        match s.store.heads_of(cluster, &owned).await {
            Ok(heads) => {
                failing = false;
                for (shard, head) in heads {
                    let i = shard as usize;
                    if head > s.reached[i].load(Ordering::Relaxed)
                        && !s.busy[i].load(Ordering::Relaxed)
                    {
                        s.store.changes_signal(shard);
                    }
                }
            }
            // The shard workers meet the same failure and say so; this
            // only says it once, and keeps trying.
            Err(e) if !failing => {
                failing = true;
                tracing::debug!(trigger = %s.name, cluster, "watching log heads: {e}");
            }
            Err(_) => {}
        }
    }
}

/// Saves the positions the cluster's shard workers published, every
/// [`SAVE_EVERY`], in one transaction (one commit) on the master; and
/// every [`RETRY_CHECK_EVERY`] asks which owned shards have dead letters
/// flagged for retry, and tells their workers. Runs until cancelled, then
/// saves what is still published.
pub(super) async fn upkeep(s: Arc<Shared>, cluster: usize, cancel: CancellationToken) {
    let mut save = tokio::time::interval(SAVE_EVERY);
    save.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retries = tokio::time::interval(RETRY_CHECK_EVERY);
    retries.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => {
                if let Err(e) = save_positions(&s, cluster).await {
                    tracing::warn!(trigger = %s.name, cluster, "saving offsets on the way out: {e}");
                }
                return;
            }
            _ = save.tick() => {
                match save_positions(&s, cluster).await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(trigger = %s.name, cluster, "saving offsets (kept for the next try): {e}");
                    }
                    Err(_) => {}
                }
            }
            _ = retries.tick() => {
                if let Err(e) = ask_for_retries(&s, cluster).await {
                    tracing::debug!(trigger = %s.name, cluster, "looking for flagged dead letters: {e}");
                }
            }
        }
    }
}

/// The shards of `cluster` this runner holds now.
fn owned(s: &Shared, cluster: usize) -> Vec<u32> {
    s.store
        .topology()
        .shards_of(cluster)
        .into_iter()
        .filter(|shard| s.holds(*shard))
        .collect()
}

/// One transaction for every published position of the cluster's shards.
/// Each statement saves only while the lease is held (as a worker's own
/// save does). On failure the positions go back for the next try, unless
/// their workers have published newer ones meanwhile.
async fn save_positions(s: &Shared, cluster: usize) -> crate::error::Result<()> {
    let topology = s.store.topology();
    let taken: Vec<(u32, Position)> = topology
        .shards_of(cluster)
        .into_iter()
        .filter_map(|shard| {
            s.published[shard as usize]
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take()
                .map(|p| (shard, p))
        })
        .collect();
    if taken.is_empty() {
        return Ok(());
    }
    let statements: Vec<String> = taken
        .iter()
        .map(|(shard, p)| save_statement(s, &topology.database(*shard), p))
        .collect();
    let master = topology.clusters[cluster].master();
    let saved = crate::mysql::store::transaction(&master, &statements).await;
    if saved.is_err() {
        for (shard, p) in taken {
            let mut slot = s.published[shard as usize]
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if slot.is_none() {
                *slot = Some(p);
            }
        }
    }
    saved
}

/// The statement that saves `p` in `database` while this runner holds the
/// shard's lease. The awaited ids are taken only with an offset at least
/// the stored one (assignments run left to right, so it comes first): a
/// save that lands after a newer one keeps the newer position whole.
pub(super) fn save_statement(s: &Shared, database: &str, p: &Position) -> String {
    let name = literal(&s.name);
    format!(
        "INSERT INTO `{database}`.`trigger_offsets` (name, added_id, awaited, updated_at)
         SELECT {name}, {offset}, '{awaited}', {now} FROM `{database}`.`trigger_leases`
         WHERE name = {name} AND owner = {owner} AND expires_at > {NOW_MICROS}
         ON DUPLICATE KEY UPDATE
           awaited = IF(VALUES(added_id) >= added_id, VALUES(awaited), awaited),
           added_id = GREATEST(added_id, VALUES(added_id)),
           updated_at = VALUES(updated_at)",
        offset = p.offset,
        awaited = p.awaited,
        now = now_micros(),
        owner = literal(&s.owner),
    )
}

/// Flags the owned shards of `cluster` whose dead letters hold cells
/// flagged for retry, and wakes their workers.
async fn ask_for_retries(s: &Shared, cluster: usize) -> crate::error::Result<()> {
    let owned = owned(s, cluster);
    if owned.is_empty() {
        return Ok(());
    }
    let topology = s.store.topology();
    let name = literal(&s.name);
    let sql = owned
        .iter()
        .map(|shard| {
            format!(
                "(SELECT {shard} FROM `{}`.`trigger_dead_letters` WHERE name = {name} AND retry = 1 LIMIT 1)",
                topology.database(*shard)
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let master = topology.clusters[cluster].master();
    for row in master.fetch_all(sql).await? {
        let shard: i64 = row.try_get(0).map_err(|e| master.error(e))?;
        if let Some(flag) = s.retry_asked.get(shard as usize) {
            flag.store(true, Ordering::Relaxed);
            s.store.changes_signal(shard as u32);
        }
    }
    Ok(())
}
