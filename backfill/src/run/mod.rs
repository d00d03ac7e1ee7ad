//! Running the plan: workers claiming chunks and copying them.
//!
//! Its rooms: `copy` (one chunk copied) and `pace` (the replication-lag
//! pause, the rate limit); this file holds the workers, claims and
//! heartbeats.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use legacy::scan::ScanFilter;
use legacy::LegacyStore;
use schemaless::retry::Pauses;
use schemaless::{routing, Cell, CellKey, CellStore, MySqlStore, WriteOutcome};
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;

use crate::error::Error;

mod copy;
mod pace;

use pace::Throttle;

/// How a process runs the plan.
#[derive(Clone, Debug)]
pub struct Options {
    /// Chunks copied at once.
    pub workers: usize,
    /// Legacy rows copied per second by this process; 0 for no limit.
    pub max_rows_per_sec: u64,
    /// Pause while any minion lags more than this; zero: never.
    pub max_replication_lag: Duration,
    /// A running chunk whose owner has been silent this long is claimed
    /// again.
    pub stale_after: Duration,
}

impl Options {
    /// The config's `[backfill]` settings.
    pub fn from_config(config: &config::Backfill) -> Options {
        Options {
            workers: config.workers,
            max_rows_per_sec: config.max_rows_per_sec,
            max_replication_lag: Duration::from_millis(config.max_replication_lag_ms),
            stale_after: Duration::from_millis(config.stale_after_ms),
        }
    }
}

/// Counters of one process's run, for progress, metrics and tests.
#[derive(Debug, Default)]
pub struct Progress {
    /// Chunks this process finished.
    pub chunks_done: AtomicU64,
    /// Chunks this process marked failed.
    pub chunks_failed: AtomicU64,
    /// Stale chunks this process claimed from a silent owner.
    pub chunks_reclaimed: AtomicU64,
    /// Parent rows read.
    pub parents: AtomicU64,
    /// Legacy rows read (parents with a row key and their children).
    pub rows: AtomicU64,
    /// Cells sent to Schemaless.
    pub cells: AtomicU64,
    /// Of those, cells that were new (the rest were already there).
    pub written: AtomicU64,
    /// Attempts that failed on a server (the chunk went back to pending).
    pub failures: AtomicU64,
    /// Times the workers paused for replication lag.
    pub lag_pauses: AtomicU64,
    /// Whether the workers are paused for lag now.
    pub lagging: AtomicBool,
    /// Whether the plan is paused now (as last seen).
    pub paused: AtomicBool,
}

impl Progress {
    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A claimed chunk.
struct Claimed {
    id: i64,
    start: i64,
    end: i64,
}

/// One process's share of the backfill.
pub struct Backfill {
    legacy: LegacyStore,
    schemaless: MySqlStore,
    options: Options,
    owner: String,
    limits: config::Limits,
    progress: Arc<Progress>,
    throttle: Throttle,
    /// The chunks this process's workers are copying now: the only ones
    /// its heartbeat keeps alive.
    in_progress: Mutex<std::collections::HashSet<i64>>,
    /// The plan it runs.
    plan: String,
    /// What the plan copies, read when the run starts.
    filter: Mutex<ScanFilter>,
}

impl Backfill {
    /// Copies the plan of `legacy`'s database into `schemaless`.
    pub fn new(
        legacy: LegacyStore,
        schemaless: MySqlStore,
        config: &config::Config,
        options: Options,
    ) -> Backfill {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Backfill {
            owner: format!(
                "backfill:{host}:{}:{:04x}",
                std::process::id(),
                uuid::Uuid::new_v4().as_u128() as u16
            ),
            throttle: Throttle::new(options.max_rows_per_sec),
            limits: config.limits.clone(),
            legacy,
            schemaless,
            options,
            progress: Arc::default(),
            in_progress: Mutex::default(),
            plan: crate::plan::MAIN.into(),
            filter: Mutex::default(),
        }
    }

    /// Runs plan `name` instead of the full backfill's.
    pub fn for_plan(mut self, name: &str) -> Backfill {
        self.plan = name.to_string();
        self
    }

    /// The plan it runs.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// This process's counters.
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// The owner name this process's chunks carry.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn pool(&self) -> &PgPool {
        self.legacy.pool()
    }

    /// Runs workers until every chunk is done or failed, or `cancel`.
    /// Returns whether the plan is finished (as far as this process saw).
    pub async fn run(&self, cancel: CancellationToken) -> Result<bool, Error> {
        crate::plan::ensure_tables(self.pool()).await?;
        let plan = match crate::plan::existing(self.pool(), &self.plan).await {
            Err(Error::NoSuchPlan { .. }) if self.plan == crate::plan::MAIN => {
                return Err(Error::NoPlan)
            }
            other => other?,
        };
        // The predicate is checked again against the table as it is now.
        let predicate = match &plan.predicate {
            Some(text) => Some(self.legacy.predicate(text).await?),
            None => None,
        };
        *self.filter.lock().expect("filter lock") = ScanFilter {
            columns: plan.columns.map(|c| c.into_iter().collect()),
            predicate,
        };
        let stop_helpers = cancel.child_token();
        let heartbeat = self.heartbeat(stop_helpers.clone());
        let lag = self.watch_lag(stop_helpers.clone());
        let workers = futures::future::join_all(
            (0..self.options.workers).map(|_| self.worker(cancel.clone())),
        );
        let (results, (), ()) = tokio::join!(
            async {
                let results = workers.await;
                stop_helpers.cancel();
                results
            },
            heartbeat,
            lag
        );
        let mut finished = true;
        for result in results {
            finished &= result?;
        }
        Ok(finished)
    }

    /// One worker: claims and copies chunks until none is left to claim.
    /// Returns false when cancelled first.
    async fn worker(&self, cancel: CancellationToken) -> Result<bool, Error> {
        let mut backoff = Pauses::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            if self.progress.lagging.load(Ordering::Relaxed) {
                sleep_or_cancel(&cancel, Duration::from_millis(200)).await;
                continue;
            }
            let claimed = match self.claim().await {
                Ok(c) => c,
                Err(e) => {
                    self.failed(&format!("claiming a chunk: {e}"), &cancel, &mut backoff)
                        .await;
                    continue;
                }
            };
            let Some(chunk) = claimed else {
                let remaining = match self.remaining().await {
                    Ok(r) => r,
                    Err(e) => {
                        self.failed(&e.to_string(), &cancel, &mut backoff).await;
                        continue;
                    }
                };
                match remaining {
                    Remaining::Finished => return Ok(true),
                    Remaining::Paused => {
                        self.progress.paused.store(true, Ordering::Relaxed);
                        sleep_or_cancel(&cancel, Duration::from_millis(500)).await;
                    }
                    Remaining::HeldByOthers => {
                        self.progress.paused.store(false, Ordering::Relaxed);
                        sleep_or_cancel(&cancel, Duration::from_millis(200)).await;
                    }
                }
                continue;
            };
            self.progress.paused.store(false, Ordering::Relaxed);
            let copied = self.copy(&chunk).await;
            self.in_progress
                .lock()
                .expect("in-progress lock")
                .remove(&chunk.id);
            match copied {
                Ok(()) => backoff.succeeded(),
                Err(e) => {
                    let _ = self.release(&chunk, &e.to_string()).await;
                    let what = format!(
                        "chunk {} (ids {}..{}): {e}; it goes back to pending",
                        chunk.id, chunk.start, chunk.end
                    );
                    self.failed(&what, &cancel, &mut backoff).await;
                }
            }
        }
    }

    /// Counts and logs a failed attempt, then pauses (100 ms doubling with
    /// jitter to at most 10 s while attempts keep failing).
    async fn failed(&self, what: &str, cancel: &CancellationToken, backoff: &mut Pauses) {
        Progress::add(&self.progress.failures, 1);
        tracing::warn!("{}: {what}", self.owner);
        sleep_or_cancel(cancel, backoff.failed()).await;
    }

    /// Claims the first pending chunk, or a running one whose owner went
    /// silent (never one this process is copying: its heartbeat may only be
    /// late), unless the plan is paused.
    async fn claim(&self) -> Result<Option<Claimed>, Error> {
        let busy: Vec<i64> = self
            .in_progress
            .lock()
            .expect("in-progress lock")
            .iter()
            .copied()
            .collect();
        let row = sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.backfill_chunks c
             SET state = 'running', owner = $1, heartbeat_at = now(), attempts = c.attempts + 1
             FROM (SELECT id, state AS was, owner AS was_owner FROM mezzanine.backfill_chunks
                   WHERE plan = $4
                     AND (state = 'pending'
                          OR (state = 'running' AND NOT (id = ANY($3))
                              AND heartbeat_at < now() - $2 * interval '1 millisecond'))
                     AND NOT (SELECT paused FROM mezzanine.backfill_plan WHERE name = $4)
                   ORDER BY start_id LIMIT 1 FOR UPDATE SKIP LOCKED) AS pick
             WHERE c.id = pick.id
             RETURNING c.id, c.start_id, c.end_id, pick.was, pick.was_owner",
        )
        .bind(&self.owner)
        .bind(self.options.stale_after.as_millis() as f64)
        .bind(&busy)
        .bind(&self.plan)
        .fetch_optional(self.pool())
        .await
        .map_err(Error::postgres("claiming a backfill chunk"))?;
        let Some(row) = row else { return Ok(None) };
        let get = |e| Error::Postgres {
            context: "claiming a backfill chunk".into(),
            source: e,
        };
        let chunk = Claimed {
            id: row.try_get(0).map_err(get)?,
            start: row.try_get(1).map_err(get)?,
            end: row.try_get(2).map_err(get)?,
        };
        self.in_progress
            .lock()
            .expect("in-progress lock")
            .insert(chunk.id);
        let was: String = row.try_get(3).map_err(get)?;
        if was == "running" {
            let owner: Option<String> = row.try_get(4).map_err(get)?;
            Progress::add(&self.progress.chunks_reclaimed, 1);
            tracing::warn!(
                "{}: chunk {} (ids {}..{}) reclaimed from {}, silent for over {:?}",
                self.owner,
                chunk.id,
                chunk.start,
                chunk.end,
                owner.as_deref().unwrap_or("nobody"),
                self.options.stale_after
            );
        }
        Ok(Some(chunk))
    }

    async fn remaining(&self) -> Result<Remaining, Error> {
        let (open, paused): (i64, bool) = sqlx::query_as(
            "/* mezzanine */ SELECT (SELECT count(*) FROM mezzanine.backfill_chunks WHERE plan = $1 AND state IN ('pending', 'running')),
                    coalesce((SELECT paused FROM mezzanine.backfill_plan WHERE name = $1), false)",
        )
        .bind(&self.plan)
        .fetch_one(self.pool())
        .await
        .map_err(Error::postgres("reading the backfill plan"))?;
        Ok(if open == 0 {
            Remaining::Finished
        } else if paused {
            Remaining::Paused
        } else {
            Remaining::HeldByOthers
        })
    }

    /// Puts a chunk that could not be copied back to pending.
    async fn release(&self, chunk: &Claimed, error: &str) -> Result<(), Error> {
        sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.backfill_chunks SET state = 'pending', owner = NULL, error = $3
             WHERE id = $1 AND owner = $2 AND state = 'running'",
        )
        .bind(chunk.id)
        .bind(&self.owner)
        .bind(error)
        .execute(self.pool())
        .await
        .map_err(Error::postgres("releasing a backfill chunk"))?;
        Ok(())
    }

    /// Keeps the chunks this process is copying from looking stale (and
    /// only those: a chunk it failed to hand back goes stale, and is
    /// claimed again).
    async fn heartbeat(&self, stop: CancellationToken) {
        let every = (self.options.stale_after / 3).max(Duration::from_millis(20));
        loop {
            sleep_or_cancel(&stop, every).await;
            if stop.is_cancelled() {
                return;
            }
            let busy: Vec<i64> = self
                .in_progress
                .lock()
                .expect("in-progress lock")
                .iter()
                .copied()
                .collect();
            if busy.is_empty() {
                continue;
            }
            let result = sqlx::query(
                "/* mezzanine */ UPDATE mezzanine.backfill_chunks SET heartbeat_at = now()
                 WHERE owner = $1 AND state = 'running' AND id = ANY($2)",
            )
            .bind(&self.owner)
            .bind(&busy)
            .execute(self.pool())
            .await;
            if let Err(e) = result {
                tracing::warn!("{}: heartbeat: {e}", self.owner);
            }
        }
    }
}

enum Remaining {
    Finished,
    Paused,
    HeldByOthers,
}

async fn sleep_or_cancel(cancel: &CancellationToken, wait: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
}
