//! The shard worker: follows one owned shard's change log in added_id
//! order, calls the handler with retries, publishes its position, and
//! leaves the shard when its lease may have run out.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{cluster, literal, Position, Shared, Stopped};
use crate::api::ReadFrom;
use crate::cell::StoredCell;
use crate::error::{Error, Result};
use crate::mysql::awaited::Awaited;
use crate::mysql::follow::ShardFollower;
use crate::retry::Pauses;

/// The shard tasks of a runner. Dropped with the runner (a cancelled or
/// aborted `run`), it aborts them: no shard task outlives its runner.
pub(super) struct Workers(pub(super) HashMap<u32, (CancellationToken, JoinHandle<()>)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (token, task) in self.0.values() {
            token.cancel();
            task.abort();
        }
    }
}

/// Follows one owned shard.
pub(super) struct ShardWorker {
    pub(super) shared: Arc<Shared>,
    pub(super) shard: u32,
    pub(super) cancel: CancellationToken,
    pub(super) stop: mpsc::Sender<Stopped>,
}

/// What became of one cell.
pub(super) enum Handled {
    Done,
    Parked,
    /// The lease ran out or the runner is stopping: leave the shard.
    Stop,
    /// `on_failure = "stop_shard"`: keep the shard, do nothing more on it.
    Halt,
}

impl ShardWorker {
    pub(super) async fn run(self) {
        let s = &self.shared;
        let mut pauses = Pauses::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            match self.follow().await {
                Ok(()) => return,
                Err(e) => {
                    let pause = pauses.failed();
                    tracing::warn!(trigger = %s.name, shard = self.shard, "{e}; retrying in {pause:?}");
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    /// Follows the shard until cancelled (Ok) or an error (retried by
    /// `run` from the saved offset).
    async fn follow(&self) -> Result<()> {
        let s = &self.shared;
        let master = s.master(self.shard)?;
        let db = s.database(self.shard);
        let name = literal(&s.name);
        let rows = master
            .fetch_all(format!(
                "SELECT (SELECT added_id FROM `{db}`.`trigger_offsets` WHERE name = {name}),
                        (SELECT awaited FROM `{db}`.`trigger_offsets` WHERE name = {name}),
                        CAST((SELECT COUNT(*) FROM `{db}`.`trigger_dead_letters` WHERE name = {name}) AS UNSIGNED)"
            ))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::Schema(format!("no offset row read for shard {}", self.shard)))?;
        let offset: u64 = row
            .try_get::<Option<u64>, _>(0)
            .map_err(|e| master.error(e))?
            .unwrap_or(0);
        let awaited = Awaited::parse(
            &row.try_get::<Option<String>, _>(1)
                .map_err(|e| master.error(e))?
                .unwrap_or_default(),
        );
        let already_parked: u64 = row.try_get(2).map_err(|e| master.error(e))?;
        let mut counted_parked = already_parked;
        let total = s.parked.fetch_add(counted_parked, Ordering::Relaxed) + counted_parked;
        let result = async {
            self.check_parked(total).await;
            let from = match s.options.read_from {
                config::TriggerRead::Master => ReadFrom::Master,
                config::TriggerRead::Minion => ReadFrom::Minion,
            };
            let mut follower =
                ShardFollower::new(s.store.clone(), self.shard, offset, awaited, from)?;
            let poll = Duration::from_millis(s.options.poll_ms);
            // What was published last: the offset and the awaited set's
            // generation (the set is compared by its generation, cheaply).
            let at = |f: &ShardFollower| (f.offset(), f.awaited().generation());
            let mut published = at(&follower);
            // Dead letters flagged before this worker started are looked
            // for once; later flags are found by the cluster's upkeep.
            s.retry_asked[self.shard as usize].store(true, Ordering::Relaxed);
            loop {
                let mut signal = std::pin::pin!(s.store.changes().notified(self.shard));
                // Register for wake-ups before reading, so a write in
                // between is not missed.
                if let Some(n) = signal.as_mut().as_pin_mut() {
                    n.enable();
                }
                s.busy[self.shard as usize].store(true, Ordering::Relaxed);
                if self.cancel.is_cancelled() || !s.holds(self.shard) {
                    // Leaving: save what was handled (the save checks the
                    // lease, so a lost shard is not moved), in place of
                    // what the upkeep has not saved yet. Nothing to save
                    // when the upkeep has taken the last position
                    // published (if its save fails, it puts it back and
                    // saves it as it stops).
                    let unsaved = s.published[self.shard as usize]
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .take()
                        .is_some();
                    if unsaved || published != at(&follower) {
                        self.save_offset(&follower).await?;
                    }
                    return Ok(());
                }
                if s.retry_asked[self.shard as usize].swap(false, Ordering::Relaxed) {
                    self.retry_flagged(&mut counted_parked).await?;
                }
                let cells = follower.next(s.options.batch).await?;
                s.reached[self.shard as usize].store(follower.offset(), Ordering::Relaxed);
                let read = cells.len();
                if read > 0 {
                    let mine: Vec<StoredCell> = cells
                        .into_iter()
                        .filter(|c| c.cell.key.column == s.column)
                        .collect();
                    let mut start = 0;
                    while start < mine.len() {
                        if !s.holds(self.shard) || self.cancel.is_cancelled() {
                            return Ok(());
                        }
                        let failed = match s.handler.handle_batch(&mine[start..]).await {
                            Ok(()) => {
                                s.stats
                                    .handled
                                    .fetch_add((mine.len() - start) as u64, Ordering::Relaxed);
                                break;
                            }
                            Err((i, error)) => {
                                // A handler that names a cell outside the batch
                                // broke its contract: nothing of the batch is
                                // known handled, so its first cell is the one
                                // to retry on its own (not a panic, which would
                                // respawn into the same panic).
                                let i = if i < mine.len() - start {
                                    i
                                } else {
                                    tracing::error!(
                                        trigger = %s.name,
                                        shard = self.shard,
                                        "the handler said cell {i} of a batch of {} failed; retrying the batch cell by cell",
                                        mine.len() - start
                                    );
                                    0
                                };
                                s.stats.handled.fetch_add(i as u64, Ordering::Relaxed);
                                s.stats.failures.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!(trigger = %s.name, shard = self.shard, "batch failed at {}: {error}", mine[start + i].cell.key);
                                start + i
                            }
                        };
                        // The failed cell on its own, with retries; then the
                        // rest as a batch again.
                        match self.handle(&mine[failed]).await? {
                            Handled::Done => {}
                            Handled::Parked => counted_parked += 1,
                            Handled::Stop => return Ok(()),
                            Handled::Halt => {
                                // Keep the shard (so no other runner hits the
                                // same wall) but do nothing more with it.
                                self.cancel.cancelled().await;
                                return Ok(());
                            }
                        }
                        start = failed + 1;
                    }
                    // Published for the upkeep, which saves every
                    // SAVE_EVERY (a crash redelivers what came after the
                    // last save: at least once).
                    if published != at(&follower) {
                        self.publish(&follower);
                        published = at(&follower);
                    }
                    // A cut page: more may be waiting, read on. A whole
                    // one caught up with the log as of the read; wait for
                    // the next write (the wake-up was armed before the
                    // read, so one that came meanwhile is not missed).
                    if !follower.at_end() {
                        continue;
                    }
                }
                // Idle: an offset moved over other columns' cells or
                // holes is published too.
                if published != at(&follower) {
                    self.publish(&follower);
                    published = at(&follower);
                }
                s.busy[self.shard as usize].store(false, Ordering::Relaxed);
                tokio::select! {
                    _ = self.cancel.cancelled() => continue,
                    _ = async {
                        match signal.as_mut().as_pin_mut() {
                            Some(n) => n.await,
                            None => std::future::pending().await,
                        }
                    } => {}
                    _ = tokio::time::sleep(poll) => {}
                }
            }
        }
        .await;
        s.parked.fetch_sub(counted_parked, Ordering::Relaxed);
        result
    }

    /// Calls the handler with retries; parks or stops on exhaustion.
    pub(super) async fn handle(&self, cell: &StoredCell) -> Result<Handled> {
        let s = &self.shared;
        let mut pauses = Pauses::new(
            Duration::from_millis(s.options.retry_backoff_ms),
            Duration::from_secs(30),
        );
        let mut tries = 0;
        loop {
            if !s.holds(self.shard) || self.cancel.is_cancelled() {
                return Ok(Handled::Stop);
            }
            tries += 1;
            let error = match s.handler.handle(cell).await {
                Ok(()) => {
                    s.stats.handled.fetch_add(1, Ordering::Relaxed);
                    return Ok(Handled::Done);
                }
                Err(e) => e,
            };
            s.stats.failures.fetch_add(1, Ordering::Relaxed);
            if tries >= s.options.max_tries {
                return match s.options.on_failure {
                    config::OnFailure::Park => {
                        self.park(cell, tries, &error).await?;
                        Ok(Handled::Parked)
                    }
                    config::OnFailure::StopShard => {
                        s.stats.shards_stopped.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(
                            trigger = %s.name,
                            shard = self.shard,
                            "shard stopped at added_id {} ({}): {error}",
                            cell.added_id,
                            cell.cell.key
                        );
                        Ok(Handled::Halt)
                    }
                };
            }
            tracing::debug!(trigger = %s.name, shard = self.shard, "try {tries} of {}: {error}", cell.cell.key);
            tokio::select! {
                _ = self.cancel.cancelled() => return Ok(Handled::Stop),
                _ = tokio::time::sleep(pauses.failed()) => {}
            }
        }
    }

    /// Hands the follower's position to the cluster's upkeep task, which
    /// saves it with the other shards' (replacing one not saved yet).
    fn publish(&self, follower: &ShardFollower) {
        *self.shared.published[self.shard as usize]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Position::of(follower));
    }

    /// Saves the position (offset and awaited ids) now, only while this
    /// runner holds the lease.
    async fn save_offset(&self, follower: &ShardFollower) -> Result<()> {
        let s = &self.shared;
        s.master(self.shard)?
            .execute(cluster::save_statement(
                s,
                &s.database(self.shard),
                &Position::of(follower),
            ))
            .await
    }
}
