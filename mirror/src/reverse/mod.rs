//! The reverse mirror: applies Schemaless's change log to the legacy
//! tables in mode `primary`.
//!
//! Per shard, one pass reads the next cells with a gap-safe
//! [`ShardFollower`] (a cell still being committed below a newer one is not
//! skipped), then writes them through the legacy model in one PostgreSQL
//! transaction that also advances the shard's row in
//! `mezzanine.reverse_offsets`. That transaction first locks the row with
//! `FOR UPDATE SKIP LOCKED` and checks it still holds the position the
//! cells were read from: two reverse mirrors (every facade runs one, and
//! so may `mezzanine mirror reverse`) never apply a shard at once, and one
//! that lost the race re-reads its position instead of moving it back.
//!
//! The legacy model's writes are version-guarded: a row cell older than
//! the row is `Superseded` and changes nothing, a child cell already there
//! is `AlreadyPresent`. Replays after a crash and late arrivals are
//! therefore harmless.
//!
//! It works only on shards with an offset: [`start_offsets`] sets them at
//! the change-log heads when the mode enters `primary` (the cells before
//! came from the legacy tables). Until then it does nothing.
//!
//! Tombstones (`capture.tombstone_column`) delete what they name: the
//! parent row with its child rows, or one child row. Cells of other
//! columns the layout does not map are skipped (counted). Cells
//! the legacy model refuses (a value its SQL type cannot hold, a child
//! whose parent row exists nowhere), and cells whose legacy row it cannot
//! read as a cell (a value the layout refuses, written there directly),
//! are parked in `mezzanine.reverse_parked` with the reason, and the
//! shard moves on.
//!
//! A row's child cells may come before its row cell in the change log:
//! one put writes its cells in address order, and a child column's name
//! may sort before the row column's. Within one pass the legacy model
//! writes a row's cell before its children's. A child whose row cell is
//! only in a later pass is applied with the row's latest row cell from
//! Schemaless (read through the tombstones: a deleted row is not made
//! again: such a child is skipped, as the row's tombstone deletes it),
//! which the version guard makes harmless when its turn comes.
//!
//! Its rooms: `offset` (the transaction hook that moves a shard's
//! offset with its writes), `alone` (cells applied on their own, outside
//! it), `parked` (refused cells and their retry), `ahead` (a child cell
//! met before its row cell).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use legacy::{LegacyStore, TransactionHook};
use schemaless::mysql::awaited::Awaited;
use schemaless::mysql::follow::ShardFollower;
use schemaless::retry::{self, Retryable};
use schemaless::tombstone::Tombstoned;
use schemaless::{
    Cell, CellResult, CellStore, Column, MySqlStore, ReadFrom, StoredCell, WriteOutcome,
};
use sqlx::{PgPool, Row};
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::relay::changed;
use crate::worker::{Heartbeat, WorkerStats};

mod ahead;
mod alone;
mod offset;
mod parked;

use ahead::Parent;
use alone::OnItsOwn;
use offset::{conflict_reason, OffsetHook, FREE};
pub use parked::retry_parked;

/// A shard's position: the offset and the ids below it still awaited.
/// (The awaited ids in their saved text form, see
/// [`schemaless::mysql::awaited`].)
type Position = (u64, String);

/// Applies Schemaless's change log to the legacy tables.
pub struct ReverseMirror {
    legacy: LegacyStore,
    schemaless: MySqlStore,
    /// Schemaless as reads see it, for a child's row cell applied ahead
    /// of its turn (`None`: the tombstone column is not a column name, and
    /// such a child is parked).
    visible: Option<Tombstoned<MySqlStore>>,
    settings: config::Mirror,
    /// The legacy sessions' `statement_timeout`: a transaction open
    /// longer may hold what a statement of a pass waited on.
    statement_timeout: Duration,
    stats: Arc<WorkerStats>,
    /// This mirror's followers, by shard; dropped (and rebuilt from
    /// PostgreSQL) whenever their position may be stale.
    followers: Mutex<HashMap<u32, ShardFollower>>,
}

/// What one pass over a shard did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Cells written to the legacy tables (or found there, or superseded).
    pub applied: u64,
    /// Of those, cells that changed nothing.
    pub already_there: u64,
    /// Cells of columns outside the layout, and child cells of rows
    /// deleted in Schemaless (found before their row cell: the tombstone
    /// deletes the child rows with the row).
    pub skipped: u64,
    /// Cells the legacy model refused, or whose address the legacy tables
    /// hold with another body (conflicts, counted in `conflicts` too).
    pub parked: u64,
    /// Of the parked, conflicts: never counted as applied.
    pub conflicts: u64,
}

impl Applied {
    fn add(&mut self, other: Applied) {
        self.applied += other.applied;
        self.already_there += other.already_there;
        self.skipped += other.skipped;
        self.parked += other.parked;
        self.conflicts += other.conflicts;
    }

    /// Change-log cells handled, whatever became of them.
    pub fn total(&self) -> u64 {
        self.applied + self.skipped + self.parked
    }
}

/// Sets the reverse offset of every shard that has none to the head of its
/// change log, so the reverse mirror applies exactly what is written from
/// now on. `mode set primary` calls it before the mode changes: everything
/// already in Schemaless then came from the legacy tables (relayed or
/// backfilled). Shards that have an offset keep it (after a step back from
/// `primary` and forward again, the cells written in between are applied
/// again, harmlessly). Returns how many offsets were set. Until it is
/// called the reverse mirror does nothing.
/// The reverse mirror's offsets of these shards (shard, last applied
/// added_id); shards it has not started are absent.
pub async fn offsets(pool: &PgPool, shards: &[i32]) -> Result<Vec<(i32, i64)>, sqlx::Error> {
    sqlx::query_as(
        "/* mezzanine */ SELECT shard, added_id FROM mezzanine.reverse_offsets WHERE shard = ANY($1)",
    )
    .bind(shards)
    .fetch_all(pool)
    .await
}

pub async fn start_offsets(pool: &PgPool, schemaless: &MySqlStore) -> Result<u64, Error> {
    let heads = schemaless.log_heads().await?;
    let shards: Vec<i32> = (0..heads.len() as i32).collect();
    let heads: Vec<i64> = heads.iter().map(|&h| h as i64).collect();
    // A shard's row locked by a running reverse mirror (a step back from
    // `schemaless`) makes this insert wait for it to commit; under load
    // that can pass the statement timeout. It changes only the rows that
    // are missing, so it is simply tried again.
    let insert = || async {
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.reverse_offsets (shard, added_id)
             SELECT * FROM UNNEST($1::int4[], $2::int8[]) ON CONFLICT (shard) DO NOTHING",
        )
        .bind(&shards)
        .bind(&heads)
        .execute(pool)
        .await
        .map_err(Error::postgres("starting the reverse offsets"))
    };
    let done = insert
        .retry(retry::backoff(
            Duration::from_millis(200),
            Duration::from_secs(3),
            6,
        ))
        .when(Error::is_retryable)
        .notify(|e, wait| tracing::warn!("{e}; again in {wait:?}"))
        .await?;
    Ok(done.rows_affected())
}

impl ReverseMirror {
    /// A reverse mirror from `schemaless` into `legacy`.
    pub fn new(legacy: LegacyStore, schemaless: MySqlStore, config: &config::Config) -> Self {
        ReverseMirror {
            legacy,
            visible: Tombstoned::new(schemaless.clone(), config).ok(),
            schemaless,
            settings: config.mirror.clone(),
            statement_timeout: Duration::from_millis(
                config
                    .legacy
                    .as_ref()
                    .map_or(10_000, |l| l.statement_timeout_ms),
            ),
            stats: Arc::default(),
            followers: Mutex::default(),
        }
    }

    /// The mirror's counters.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// One pass over every shard. Returns what was applied; nothing means
    /// every shard is caught up (or held by another reverse mirror).
    pub async fn step(&self) -> Result<Applied, Error> {
        let mut followers = self.followers.lock().await;
        if followers.is_empty() && !self.started().await? {
            // Not started: nothing to apply until the mode enters primary.
            return Ok(Applied::default());
        }
        let mut total = Applied::default();
        let mut first_error = None;
        let mut timed_out = false;
        for shard in 0..self.schemaless.shard_count() {
            match self.step_shard(shard, &mut followers).await {
                Ok(applied) => total.add(applied),
                Err(e) => {
                    followers.remove(&shard);
                    timed_out |= e.timed_out();
                    first_error.get_or_insert(e);
                }
            }
        }
        if timed_out {
            self.name_long_transactions().await;
        }
        let stats = &self.stats;
        stats.add(&stats.cells, total.applied);
        stats.add(&stats.already_there, total.already_there);
        stats.add(&stats.skipped, total.skipped);
        stats.add(&stats.parked, total.parked);
        match first_error {
            // A shard that failed does not hold up the others; the pass
            // still reports the failure.
            Some(e) if total.total() == 0 => Err(e),
            Some(e) => {
                self.stats.failed(&e.to_string());
                tracing::warn!("reverse mirror: {e}");
                Ok(total)
            }
            None => Ok(total),
        }
    }

    /// After a statement of a pass ran past the statement timeout: says
    /// which transactions have been open longer, one of which holds what
    /// it waited on (a lock held that long is not the toolkit's own
    /// statements', each of which ends within the timeout).
    async fn name_long_transactions(&self) {
        let held =
            legacy::connection::long_transactions(self.legacy.pool(), self.statement_timeout).await;
        if !held.is_empty() {
            tracing::warn!(
                "reverse mirror: a statement waited past the statement timeout ({:?}); transactions open longer, one of which holds what it waited on: {}",
                self.statement_timeout,
                held.join("; ")
            );
        }
    }

    /// Applies until every shard is caught up with what its change log
    /// holds now. Returns the total.
    pub async fn catch_up(&self) -> Result<Applied, Error> {
        // A pass that fails for a moment (a lock held by the running
        // reverse mirror past the statement timeout, a deadlock, a lost
        // connection) is tried again: the step back to `mirror` waits on
        // this catch-up and should not fail for a passing contention.
        // Applying is idempotent and the offsets only move forward.
        let step = || {
            (|| self.step())
                .retry(retry::backoff(
                    Duration::from_millis(200),
                    Duration::from_secs(3),
                    6,
                ))
                .when(Error::is_retryable)
                .notify(|e, wait| tracing::warn!("reverse mirror catch-up: {e}; again in {wait:?}"))
        };
        let mut total = Applied::default();
        loop {
            let applied = step().await?;
            if applied.total() == 0 {
                // A hole waits out its grace period before it is settled:
                // look once more after it.
                tokio::time::sleep(schemaless::mysql::follow::HOLE_GRACE * 5).await;
                let again = step().await?;
                if again.total() == 0 {
                    return Ok(total);
                }
                total.add(again);
                continue;
            }
            total.add(applied);
        }
    }

    async fn follower<'a>(
        &self,
        shard: u32,
        followers: &'a mut HashMap<u32, ShardFollower>,
    ) -> Result<Option<&'a mut ShardFollower>, Error> {
        match followers.entry(shard) {
            std::collections::hash_map::Entry::Occupied(entry) => Ok(Some(entry.into_mut())),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let Some((offset, awaited)) = self.position(shard).await? else {
                    return Ok(None);
                };
                let follower = ShardFollower::new(
                    self.schemaless.clone(),
                    shard,
                    offset,
                    Awaited::parse(&awaited),
                    ReadFrom::Master,
                )?;
                Ok(Some(entry.insert(follower)))
            }
        }
    }

    /// The stored position of `shard`, if the reverse mirror was started
    /// there (see [`start_offsets`]).
    async fn position(&self, shard: u32) -> Result<Option<Position>, Error> {
        let context = "reading a reverse offset";
        let row =
            sqlx::query("/* mezzanine */ SELECT added_id, awaited, awaited_ranges FROM mezzanine.reverse_offsets WHERE shard = $1")
                .bind(shard as i32)
                .fetch_optional(self.legacy.pool())
                .await
                .map_err(Error::postgres(context))?;
        row.map(|row| position_of(&row).map_err(Error::postgres(context)))
            .transpose()
    }

    /// Whether the reverse mirror was started (offsets exist).
    pub async fn started(&self) -> Result<bool, Error> {
        let (started,): (bool,) = sqlx::query_as(
            "/* mezzanine */ SELECT EXISTS (SELECT 1 FROM mezzanine.reverse_offsets)",
        )
        .fetch_one(self.legacy.pool())
        .await
        .map_err(Error::postgres("reading the reverse offsets"))?;
        Ok(started)
    }

    async fn step_shard(
        &self,
        shard: u32,
        followers: &mut HashMap<u32, ShardFollower>,
    ) -> Result<Applied, Error> {
        let Some(follower) = self.follower(shard, followers).await? else {
            return Ok(Applied::default());
        };
        let before = (follower.offset(), follower.awaited().to_text());
        let cells = follower.next(self.settings.reverse_batch).await?;
        let after = (follower.offset(), follower.awaited().to_text());
        if cells.is_empty() && after == before {
            return Ok(Applied::default());
        }
        let mut applied = Applied::default();
        let mut apply = Vec::with_capacity(cells.len());
        let mut parked = Vec::new();
        for stored in cells {
            if !self.legacy.writes(&stored.cell.key.column) {
                applied.skipped += 1;
                continue;
            }
            match self.legacy.canonical_cell(&stored.cell) {
                Ok(_) => apply.push(stored),
                Err(e) => parked.push((stored, e.to_string())),
            }
        }
        let hook = OffsetHook {
            shard,
            before: before.clone(),
            after: after.clone(),
            parked: parked.clone(),
            added_ids: apply.iter().map(|s| s.added_id).collect(),
            conflicts: std::sync::Mutex::default(),
            cells: (apply.len() + parked.len()) as i64,
            refused: AtomicU8::new(FREE),
            tombstones: self.legacy.tombstones().clone(),
        };
        let batch: Vec<Cell> = apply.iter().map(|s| s.cell.clone()).collect();
        match self.legacy.put_cells_with(batch, &hook).await {
            Ok(results) => {
                count(&mut applied, &results);
                let conflicts = hook.take_conflicts();
                applied.parked += (parked.len() + conflicts.len()) as u64;
                applied.conflicts += conflicts.len() as u64;
                self.record_legacy_bodies(shard, &conflicts).await;
                Ok(applied)
            }
            Err(_) if hook.refused.load(Ordering::Relaxed) != FREE => {
                // Another reverse mirror holds or moved the shard: start
                // again from what it stored.
                followers.remove(&shard);
                Ok(Applied::default())
            }
            // A cell refused, or one whose legacy row cannot be read as a
            // cell: each on its own, so the others are applied.
            Err(schemaless::Error::InvalidInput { .. } | schemaless::Error::Unreadable { .. }) => {
                self.apply_one_by_one(shard, apply, parked, before, after, applied)
                    .await
                    .inspect_err(|_| {
                        followers.remove(&shard);
                    })
            }
            Err(e) => {
                followers.remove(&shard);
                Err(e.into())
            }
        }
    }

    /// Applies until `cancel`, while `enabled` says so, every
    /// `mirror.reverse_poll_ms` when caught up, after a growing backoff on
    /// failure. Writes a heartbeat row every second.
    pub async fn run(&self, cancel: CancellationToken, mut enabled: watch::Receiver<bool>) {
        let pool = self.legacy.pool().clone();
        let mut heartbeat = Heartbeat::new("reverse");
        let mut backoff = crate::worker::pauses(&self.settings);
        let poll = Duration::from_millis(self.settings.reverse_poll_ms);
        tracing::info!("{} started", heartbeat.name());
        while !cancel.is_cancelled() {
            if !*enabled.borrow_and_update() {
                // Positions may move while this one sleeps.
                self.followers.lock().await.clear();
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = changed(&mut enabled) => continue,
                }
            }
            match self.step().await {
                Ok(applied) => {
                    backoff.succeeded();
                    heartbeat.beat(&pool, &self.stats).await;
                    if applied.total() > 0 {
                        continue;
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(poll) => {}
                        _ = changed(&mut enabled) => {}
                    }
                }
                Err(e) => {
                    self.stats.failed(&e.to_string());
                    let wait = backoff.failed();
                    tracing::warn!("{}: {e}; trying again in {wait:?}", heartbeat.name());
                    heartbeat.beat(&pool, &self.stats).await;
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        heartbeat.retire(&pool).await;
        tracing::info!("{} stopped", heartbeat.name());
    }
}

/// Counts what was applied; a conflict is not (the hook parked it).
fn count(applied: &mut Applied, results: &[schemaless::CellResult]) {
    for result in results.iter().filter(|r| r.is_ok()) {
        applied.applied += 1;
        if matches!(
            result,
            Ok(WriteOutcome::AlreadyPresent | WriteOutcome::Superseded)
        ) {
            applied.already_there += 1;
        }
    }
}

/// A position from `added_id, awaited, awaited_ranges` (the ids array is
/// the form of older versions, read while `awaited_ranges` is NULL).
fn position_of(row: &sqlx::postgres::PgRow) -> Result<Position, sqlx::Error> {
    let offset: i64 = row.try_get(0)?;
    let ranges: Option<String> = row.try_get(2)?;
    let awaited = match ranges {
        Some(text) => text,
        None => {
            let ids: Vec<i64> = row.try_get(1)?;
            Awaited::parse(
                &ids.iter()
                    .map(|id| id.max(&0).to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            )
            .to_text()
        }
    };
    Ok((offset.max(0) as u64, awaited))
}
