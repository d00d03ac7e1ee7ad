//! Triggers: a handler called for every new cell of a column, per shard in
//! added_id order, at least once.
//!
//! Per shard and trigger, rows in the shard's own database:
//! - `trigger_offsets`: the added_id of the last cell handled; a restarted
//!   runner resumes after it (cells handled after the last saved offset are
//!   handled again: at least once);
//! - `trigger_leases`: which runner owns the shard, until when (by the
//!   master's clock). Runners renew their leases every third of
//!   `triggers.lease_ms`; a dead runner's shards are taken over once its
//!   leases expire. An offset is only saved while the lease is held, in the
//!   same statement, and a runner stops handling a shard as soon as its own
//!   clock says the lease may have run out, so two runners never work one
//!   shard at once;
//! - `trigger_dead_letters`: cells whose handler failed
//!   `triggers.max_tries` times, with the last error. [`retry_parked`]
//!   flags them and the owning runner calls the handler on them again.
//!
//! Waking: a shard worker reads its log until a page reaches the end, then
//! waits. Writes of this process wake their shards at once; a head watcher
//! per cluster (one `MAX(added_id)` query for all the shards the runner
//! owns there, every `triggers.watch_ms`) wakes the shards others wrote;
//! `triggers.poll_ms` is the backstop. Workers publish their positions;
//! a task per cluster saves them every [`SAVE_EVERY`] in one transaction,
//! and a worker saves its own when it leaves a shard (see [`cluster`]).
//!
//! A runner stops (and says why) when the shards it owns hold more than
//! `triggers.max_parked` parked cells. With `on_failure = "stop_shard"` it
//! parks nothing: the failing shard stops there and the others go on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::Row;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::awaited::Awaited;
use super::follow::ShardFollower;
use super::sql::NOW_MICROS;
use super::store::MySqlStore;
use crate::api::{CellStore, ReadFrom};
use crate::cell::{now_micros, CellKey, Column, RefKey, RowKey, StoredCell};
use crate::error::{Error, Result};

mod cluster;

/// How often a shard's offset is saved at most, busy or idle: each save
/// is a commit on the master, and a crash redelivers at most this much.
const SAVE_EVERY: Duration = Duration::from_millis(500);

/// What a handler says about one cell: `Err` is retried.
pub type HandlerResult = std::result::Result<(), String>;

/// The code a trigger runs for each new cell of its column.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one cell. Called at least once per cell, in added_id order
    /// within a shard; must be idempotent.
    async fn handle(&self, cell: &StoredCell) -> HandlerResult;

    /// Handles a run of cells of one shard, in added_id order. `Ok` means
    /// all of them; `Err((i, e))` means `cells[..i]` were handled and
    /// `cells[i]` failed with `e` (it is then retried on its own, and the
    /// rest after it). Override it where a batch is cheaper than its cells
    /// one by one; the default calls [`Handler::handle`] for each.
    async fn handle_batch(&self, cells: &[StoredCell]) -> std::result::Result<(), (usize, String)> {
        for (i, cell) in cells.iter().enumerate() {
            self.handle(cell).await.map_err(|e| (i, e))?;
        }
        Ok(())
    }
}

/// Why a runner returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Its cancellation token was cancelled.
    Cancelled,
    /// More cells are parked than `triggers.max_parked` allows.
    TooManyParked {
        /// Parked cells over the runner's shards.
        parked: u64,
        /// The limit.
        limit: u64,
    },
}

/// Counters of one runner, for metrics and tests.
#[derive(Debug, Default)]
pub struct TriggerStats {
    /// Cells the handler accepted.
    pub handled: AtomicU64,
    /// Handler failures (each failed try counts).
    pub failures: AtomicU64,
    /// Cells parked in the dead letters by this runner.
    pub parked: AtomicU64,
    /// Shards owned now.
    pub shards_owned: AtomicU64,
    /// Shards stopped by `on_failure = "stop_shard"`.
    pub shards_stopped: AtomicU64,
}

/// What a runner and its shard workers share.
struct Shared {
    name: String,
    column: Column,
    store: MySqlStore,
    handler: Arc<dyn Handler>,
    options: config::Triggers,
    /// Unique per runner: `host:pid:random`.
    owner: String,
    stats: Arc<TriggerStats>,
    /// Parked cells over the owned shards (existing ones counted when a
    /// shard is taken).
    parked: AtomicU64,
    /// Per shard, until when (ms after `epoch`, by this runner's clock) the
    /// lease is surely held: the time of the claim plus the lease, taken
    /// before the claim was sent.
    lease_until: Vec<AtomicU64>,
    /// Per shard, the follower's offset as its worker last left it (0
    /// until it starts): the head watcher wakes a shard whose head is
    /// past it.
    reached: Vec<AtomicU64>,
    /// Per shard, whether its worker is reading or handling (not waiting
    /// for a write): the head watcher leaves it be.
    busy: Vec<AtomicBool>,
    /// Per shard, the position its worker reached and has not seen saved:
    /// the cluster's upkeep task takes it and saves it.
    published: Vec<std::sync::Mutex<Option<Position>>>,
    /// Per shard, whether the upkeep task found dead letters flagged for
    /// retry there.
    retry_asked: Vec<AtomicBool>,
    epoch: Instant,
}

/// A shard's position as a worker publishes it for saving.
#[derive(Clone, Debug)]
struct Position {
    /// The offset.
    offset: u64,
    /// The awaited ids, as saved.
    awaited: String,
}

impl Position {
    fn of(follower: &ShardFollower) -> Position {
        Position {
            offset: follower.offset(),
            awaited: follower.awaited().to_text(),
        }
    }
}

impl Shared {
    fn holds(&self, shard: u32) -> bool {
        let until = self.lease_until[shard as usize].load(Ordering::Relaxed);
        (self.epoch.elapsed().as_millis() as u64) < until
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.options.lease_ms)
    }

    fn database(&self, shard: u32) -> String {
        self.store.topology().database(shard)
    }

    fn master(&self, shard: u32) -> Result<std::sync::Arc<super::topology::Node>> {
        Ok(self.store.topology().cluster(shard)?.master())
    }
}

/// A trigger: a named handler on one column of the instance.
pub struct Trigger {
    shared: Arc<Shared>,
}

/// Checks a trigger name: 1–64 characters of `[a-z0-9_]`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "trigger",
            format!("{name:?} is not a valid trigger name: use 1-64 characters of [a-z0-9_]"),
        ))
    }
}

/// A quoted SQL literal of a checked name or owner id.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

impl Trigger {
    /// A trigger called `name` running `handler` on every new cell of
    /// `column`.
    pub fn new(
        name: &str,
        column: Column,
        store: MySqlStore,
        handler: Arc<dyn Handler>,
        options: config::Triggers,
    ) -> Result<Trigger> {
        check_name(name)?;
        let host: String = host::name()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(64)
            .collect();
        let shard_count = store.topology().shard_count;
        Ok(Trigger {
            shared: Arc::new(Shared {
                name: name.to_string(),
                column,
                store,
                handler,
                options,
                owner: format!(
                    "{host}:{}:{:08x}",
                    std::process::id(),
                    rand::random::<u32>()
                ),
                stats: Arc::new(TriggerStats::default()),
                parked: AtomicU64::new(0),
                lease_until: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
                reached: (0..shard_count).map(|_| AtomicU64::new(0)).collect(),
                busy: (0..shard_count).map(|_| AtomicBool::new(false)).collect(),
                published: (0..shard_count)
                    .map(|_| std::sync::Mutex::new(None))
                    .collect(),
                retry_asked: (0..shard_count).map(|_| AtomicBool::new(false)).collect(),
                epoch: Instant::now(),
            }),
        })
    }

    /// This runner's counters.
    pub fn stats(&self) -> Arc<TriggerStats> {
        self.shared.stats.clone()
    }

    /// This runner's lease owner id.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Takes or renews the leases of every shard of one cluster in two
    /// round trips; which shards this runner holds. The claims are one
    /// batch of statements; the answer is one `SELECT` of its own (a batch
    /// ending in a `SELECT` leaves a read view open on the connection in
    /// MariaDB, which holds back purge).
    async fn claim_cluster(&self, cluster: usize) -> Result<Vec<(u32, bool)>> {
        let s = &self.shared;
        let topology = s.store.topology();
        let nodes = &topology.clusters[cluster];
        let name = literal(&s.name);
        let owner = literal(&s.owner);
        let ttl = s.options.lease_ms * 1000;
        let claims: Vec<String> = nodes
            .shards
            .iter()
            .map(|shard| {
                format!(
                    "INSERT INTO `{db}`.`trigger_leases` (name, owner, expires_at)
                     VALUES ({name}, {owner}, {NOW_MICROS} + {ttl})
                     ON DUPLICATE KEY UPDATE
                       owner = IF(expires_at < {NOW_MICROS} OR owner = VALUES(owner), VALUES(owner), owner),
                       expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)",
                    db = topology.database(shard)
                )
            })
            .collect();
        nodes.master().execute(claims.join(";")).await?;
        let owners: Vec<String> = nodes
            .shards
            .iter()
            .map(|shard| {
                format!(
                    "SELECT {shard}, owner FROM `{}`.`trigger_leases` WHERE name = {name}",
                    topology.database(shard)
                )
            })
            .collect();
        let rows = nodes.master().fetch_all(owners.join(" UNION ALL ")).await?;
        let mut held: HashMap<u32, bool> =
            nodes.shards.iter().map(|shard| (shard, false)).collect();
        for row in rows {
            let shard: i64 = row.try_get(0).map_err(|e| nodes.master().error(e))?;
            let holder: String = row.try_get(1).map_err(|e| nodes.master().error(e))?;
            held.insert(shard as u32, holder == s.owner);
        }
        Ok(held.into_iter().collect())
    }

    async fn release(&self, shard: u32) -> Result<()> {
        let s = &self.shared;
        s.master(shard)?
            .execute(format!(
                "DELETE FROM `{}`.`trigger_leases` WHERE name = {} AND owner = {}",
                s.database(shard),
                literal(&s.name),
                literal(&s.owner)
            ))
            .await
    }

    /// Runs the trigger until cancelled or stopped: claims free shards,
    /// renews its leases, and follows each owned shard in a task of its
    /// own. Shards are released on the way out.
    pub async fn run(&self, cancel: CancellationToken) -> Result<Stopped> {
        let s = &self.shared;
        let shard_count = s.store.topology().shard_count;
        let (stop_tx, mut stop_rx) = mpsc::channel::<Stopped>(4);
        let mut workers = Workers(HashMap::new());
        // The per-cluster tasks stop after the shard workers (the upkeep
        // saves what the workers published), so they get a token of their
        // own, cancelled below however the runner ends.
        let upkeep_cancel = CancellationToken::new();
        let clusters = s.store.topology().clusters.len();
        let mut cluster_tasks = cluster::ClusterTasks(
            (0..clusters)
                .map(|c| tokio::spawn(cluster::upkeep(s.clone(), c, upkeep_cancel.clone())))
                .collect(),
        );
        if s.options.watch_ms > 0 {
            cluster_tasks.0.extend(
                (0..clusters).map(|c| {
                    tokio::spawn(cluster::watch_heads(s.clone(), c, upkeep_cancel.clone()))
                }),
            );
        }
        let mut renew = tokio::time::interval(s.lease() / 3);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let outcome = loop {
            tokio::select! {
                _ = cancel.cancelled() => break Stopped::Cancelled,
                Some(stop) = stop_rx.recv() => break stop,
                _ = renew.tick() => {}
            }
            workers.0.retain(|_, (_, task)| !task.is_finished());
            let asked = s.epoch.elapsed();
            let claims = futures::future::join_all(
                (0..s.store.topology().clusters.len()).map(|cluster| self.claim_cluster(cluster)),
            )
            .await;
            let mut owned_shards: HashMap<u32, bool> = HashMap::new();
            for (cluster, claim) in claims.into_iter().enumerate() {
                match claim {
                    Ok(held) => owned_shards.extend(held),
                    Err(e) => {
                        tracing::warn!(trigger = %s.name, cluster = %s.store.topology().clusters[cluster].name, "leases: {e}");
                    }
                }
            }
            for shard in 0..shard_count {
                let owned = owned_shards.get(&shard).copied().unwrap_or(false);
                if owned {
                    s.lease_until[shard as usize]
                        .store((asked + s.lease()).as_millis() as u64, Ordering::Relaxed);
                    if let std::collections::hash_map::Entry::Vacant(slot) = workers.0.entry(shard)
                    {
                        let token = cancel.child_token();
                        let worker = ShardWorker {
                            shared: s.clone(),
                            shard,
                            cancel: token.clone(),
                            stop: stop_tx.clone(),
                        };
                        slot.insert((token, tokio::spawn(worker.run())));
                    }
                } else if let Some((token, _)) = workers.0.remove(&shard) {
                    tracing::info!(trigger = %s.name, shard, "lease lost; another runner owns the shard");
                    token.cancel();
                }
            }
            s.stats
                .shards_owned
                .store(workers.0.len() as u64, Ordering::Relaxed);
        };
        let mut released = Vec::new();
        for (shard, (token, task)) in workers.0.drain() {
            token.cancel();
            let _ = task.await;
            released.push(shard);
        }
        // What the workers published is saved before their leases go.
        upkeep_cancel.cancel();
        for task in std::mem::take(&mut cluster_tasks.0) {
            let _ = task.await;
        }
        for shard in released {
            if let Err(e) = self.release(shard).await {
                tracing::warn!(trigger = %s.name, shard, "releasing the lease: {e}");
            }
        }
        s.stats.shards_owned.store(0, Ordering::Relaxed);
        if let Stopped::TooManyParked { parked, limit } = &outcome {
            tracing::error!(
                trigger = %s.name,
                "stopped: {parked} cells parked, over triggers.max_parked = {limit}; see `mezzanine trigger status {}`",
                s.name
            );
        }
        Ok(outcome)
    }
}

/// The shard tasks of a runner. Dropped with the runner (a cancelled or
/// aborted `run`), it aborts them: no shard task outlives its runner.
struct Workers(HashMap<u32, (CancellationToken, JoinHandle<()>)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (token, task) in self.0.values() {
            token.cancel();
            task.abort();
        }
    }
}

/// Follows one owned shard.
struct ShardWorker {
    shared: Arc<Shared>,
    shard: u32,
    cancel: CancellationToken,
    stop: mpsc::Sender<Stopped>,
}

/// What became of one cell.
enum Handled {
    Done,
    Parked,
    /// The lease ran out or the runner is stopping: leave the shard.
    Stop,
    /// `on_failure = "stop_shard"`: keep the shard, do nothing more on it.
    Halt,
}

impl ShardWorker {
    async fn run(self) {
        let s = &self.shared;
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.follow().await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(trigger = %s.name, shard = self.shard, "{e}; retrying in {backoff:?}");
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
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

    async fn check_parked(&self, total: u64) {
        let limit = self.shared.options.max_parked;
        if total > limit {
            let _ = self.stop.try_send(Stopped::TooManyParked {
                parked: total,
                limit,
            });
        }
    }

    /// Calls the handler with retries; parks or stops on exhaustion.
    async fn handle(&self, cell: &StoredCell) -> Result<Handled> {
        let s = &self.shared;
        let mut wait = Duration::from_millis(s.options.retry_backoff_ms);
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
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }

    async fn park(&self, cell: &StoredCell, tries: u32, error: &str) -> Result<()> {
        let s = &self.shared;
        let db = s.database(self.shard);
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO `{db}`.`trigger_dead_letters`
               (name, added_id, row_key, column_name, ref_key, tries, error, parked_at, retry)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)
             ON DUPLICATE KEY UPDATE tries = VALUES(tries), error = VALUES(error),
               parked_at = VALUES(parked_at), retry = 0"
        )))
        .bind(s.name.clone())
        .bind(cell.added_id)
        .bind(cell.cell.key.row_key.as_bytes().to_vec())
        .bind(cell.cell.key.column.as_str().to_string())
        .bind(cell.cell.key.ref_key.get())
        .bind(tries)
        .bind(error.chars().take(4000).collect::<String>())
        .bind(now_micros());
        s.master(self.shard)?.execute_prepared(query).await?;
        s.stats.parked.fetch_add(1, Ordering::Relaxed);
        let total = s.parked.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            trigger = %s.name,
            shard = self.shard,
            "parked {} (added_id {}) after {tries} tries: {error}",
            cell.cell.key,
            cell.added_id
        );
        self.check_parked(total).await;
        Ok(())
    }

    /// Calls the handler again on parked cells flagged for retry; those
    /// that succeed leave the dead letters.
    async fn retry_flagged(&self, counted_parked: &mut u64) -> Result<()> {
        let s = &self.shared;
        let db = s.database(self.shard);
        let master = s.master(self.shard)?;
        let rows = master
            .fetch_all(format!(
                "SELECT added_id, row_key, column_name, ref_key FROM `{db}`.`trigger_dead_letters`
                 WHERE name = {} AND retry = 1 ORDER BY added_id LIMIT 100",
                literal(&s.name)
            ))
            .await?;
        for row in rows {
            let added_id: u64 = row.try_get(0).map_err(|e| master.error(e))?;
            let row_key: Vec<u8> = row.try_get(1).map_err(|e| master.error(e))?;
            let column: String = row.try_get(2).map_err(|e| master.error(e))?;
            let ref_key: i64 = row.try_get(3).map_err(|e| master.error(e))?;
            let key = CellKey {
                row_key: RowKey::from_slice(&row_key)
                    .ok_or_else(|| Error::Schema(format!("dead letter {added_id}: bad row key")))?,
                column: Column::new(&column)?,
                ref_key: RefKey::new(ref_key)?,
            };
            let Some(mut cell) = s.store.get_cell(&key, ReadFrom::Master).await? else {
                continue;
            };
            cell.added_id = added_id;
            match self.handle(&cell).await? {
                Handled::Done => {
                    master
                        .execute(format!(
                            "DELETE FROM `{db}`.`trigger_dead_letters` WHERE name = {} AND added_id = {added_id}",
                            literal(&s.name)
                        ))
                        .await?;
                    *counted_parked = counted_parked.saturating_sub(1);
                    s.parked.fetch_sub(1, Ordering::Relaxed);
                }
                // Parked again (retry flag cleared) or stopping.
                Handled::Parked => {
                    s.parked.fetch_sub(1, Ordering::Relaxed);
                }
                Handled::Stop | Handled::Halt => return Ok(()),
            }
        }
        Ok(())
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

/// One shard of a trigger, as `mezzanine trigger status` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardStatus {
    /// The shard.
    pub shard: u32,
    /// The last added_id handled (0: none yet).
    pub offset: u64,
    /// The shard's newest added_id.
    pub head: u64,
    /// Cells of the log not handled yet (all columns).
    pub lag: u64,
    /// The runner holding the shard, if its lease is live.
    pub owner: Option<String>,
    /// Parked cells.
    pub parked: u64,
    /// Parked cells flagged for retry.
    pub retrying: u64,
}

/// Every shard's state of trigger `name`, read from the masters.
pub async fn status(store: &MySqlStore, name: &str) -> Result<Vec<ShardStatus>> {
    check_name(name)?;
    let topology = store.topology();
    let name = literal(name);
    let mut out = Vec::with_capacity(topology.shard_count as usize);
    for shard in 0..topology.shard_count {
        let db = topology.database(shard);
        let rows = topology
            .cluster(shard)?
            .master()
            .fetch_all(format!(
                "SELECT
                   CAST(COALESCE((SELECT added_id FROM `{db}`.`trigger_offsets` WHERE name = {name}), 0) AS UNSIGNED),
                   CAST(COALESCE((SELECT MAX(added_id) FROM `{db}`.`entity`), 0) AS UNSIGNED),
                   (SELECT owner FROM `{db}`.`trigger_leases` WHERE name = {name} AND expires_at > {NOW_MICROS}),
                   CAST((SELECT COUNT(*) FROM `{db}`.`trigger_dead_letters` WHERE name = {name}) AS UNSIGNED),
                   CAST((SELECT COUNT(*) FROM `{db}`.`trigger_dead_letters` WHERE name = {name} AND retry = 1) AS UNSIGNED)"
            ))
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::Schema(format!("no status row for shard {shard}")))?;
        let get_u64 = |i: usize| -> Result<u64> {
            row.try_get::<u64, _>(i).map_err(|e| {
                topology
                    .cluster(shard)
                    .map_or_else(|e| e, |c| c.master().error(e))
            })
        };
        let offset = get_u64(0)?;
        let head = get_u64(1)?;
        out.push(ShardStatus {
            shard,
            offset,
            head,
            lag: head.saturating_sub(offset),
            owner: row.try_get::<Option<String>, _>(2).ok().flatten(),
            parked: get_u64(3)?,
            retrying: get_u64(4)?,
        });
    }
    Ok(out)
}

/// The names of every trigger that ever saved a position, over all shards
/// (one statement per cluster, read from its master), sorted.
pub async fn names(store: &MySqlStore) -> Result<Vec<String>> {
    let topology = store.topology();
    let mut names = std::collections::BTreeSet::new();
    for cluster in &topology.clusters {
        let parts: Vec<String> = cluster
            .shards
            .iter()
            .map(|shard| {
                format!(
                    "SELECT name FROM `{}`.`trigger_offsets`",
                    topology.database(shard)
                )
            })
            .collect();
        if parts.is_empty() {
            continue;
        }
        for row in cluster.master().fetch_all(parts.join(" UNION ")).await? {
            let name: String = row.try_get(0).map_err(|e| cluster.master().error(e))?;
            names.insert(name);
        }
    }
    Ok(names.into_iter().collect())
}

/// Change-log cells of every shard that trigger `name` has not handled
/// yet (0: caught up).
pub async fn lag(store: &MySqlStore, name: &str) -> Result<u64> {
    Ok(status(store, name).await?.iter().map(|s| s.lag).sum())
}

/// Flags every parked cell of trigger `name` for retry; the runners owning
/// their shards call the handler on them again. Returns how many.
pub async fn retry_parked(store: &MySqlStore, name: &str) -> Result<u64> {
    check_name(name)?;
    let topology = store.topology();
    let mut flagged = 0;
    for shard in 0..topology.shard_count {
        let master = &topology.cluster(shard)?.master();
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE `{}`.`trigger_dead_letters` SET retry = 1 WHERE name = ? AND retry = 0",
            topology.database(shard)
        )))
        .bind(name.to_string());
        let mut conn = master.acquire().await?;
        let done = master
            .run(&mut conn, |c| Box::pin(query.execute(c)))
            .await?;
        flagged += done.rows_affected();
    }
    Ok(flagged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_literals_quoted() {
        assert!(check_name("billing_v2").is_ok());
        for bad in ["", "Billing", "a-b", "x'y", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(literal("host:1:ab"), "'host:1:ab'");
        assert_eq!(literal("o'k\\"), "'o''k\\\\'");
    }
}
