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
//!
//! This file holds the trigger, its handler and the runner's loop; its
//! rooms: `lease` (taking, renewing and releasing shards), `worker` (the
//! shard worker following one shard), `dead_letter` (parking, retrying,
//! the `max_parked` stop), `status` (what `trigger status` shows) and
//! [`cluster`] (per-cluster head watching and offset saving).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::ShardFollower;
use super::store::MySqlStore;
use crate::cell::{Column, StoredCell};
use crate::error::{Error, Result};

mod cluster;
mod dead_letter;
mod lease;
mod status;
mod worker;

pub use dead_letter::retry_parked;
pub use status::{lag, names, status, ShardStatus};
use worker::{ShardWorker, Workers};

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
