//! Sampled read replay.
//!
//! The facade asks [`Sampler::wants`] on each read (a random draw against
//! the rate, then a per-second cap) and hands what it served to
//! [`Sampler::offer`], which never waits: a full queue drops the sample
//! and counts it. Background tasks take samples off the queue, replay the
//! read on the other store, compare, and triage differences before any is
//! recorded:
//!
//! 1. wait `verify.triage_delay_ms`;
//! 2. wait (up to `verify.triage_wait_ms`) until no write of the rows is in
//!    flight between the stores ([`Triage::settle`]: the outbox, the
//!    reverse mirror's position);
//! 3. read both stores again, from the masters, and compare again;
//! 4. repeat, up to five rounds, until the stores agree or show the same
//!    difference twice in a row with nothing in flight.
//!
//! Equal: a transient difference (in-flight write, lag), counted but not
//! recorded. The same difference twice, settled: a mismatch, recorded (a
//! write landing between a check and a re-read can make one round look
//! wrong, never two with the same values). Still moving after five
//! rounds: `unsettled`, not judged. Missing from Schemaless while the
//! backfill is unfinished: `pending_backfill`.
//!
//! Counts, coverage and resolutions are written to PostgreSQL every 250 ms
//! in one transaction ([`crate::store::flush`]); the same flush picks up
//! the sampling settings `mezzanine verify sample` stored.
//!
//! Metrics (the `metrics` crate; the app installs a recorder):
//! `mezzanine_verify_samples_total{column}`, `..._matches_total{column}`,
//! `..._mismatches_total{column}`, `..._transient_total{column}`,
//! `..._dropped_total`, `..._replay_errors_total`, and the histogram
//! `mezzanine_verify_replay_seconds`.
//!
//! Its rooms: `sampler` (the draw, the cap, the queue, the tallies),
//! `replay` (replay with triage, recording), `flush` (the flush loop);
//! this file holds the reads, the stores they are replayed on and the
//! isolated runtime the replay runs in.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemaless::{
    CellKey, CellStore, Column, IndexEntry, IndexQuery, ReadFrom, RowKey, StoredCell,
};
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::compare::{self, Canonical, Rules, Side, Unit};

mod flush;
mod replay;
mod sampler;

pub(crate) use sampler::now_secs;
pub use sampler::Sampler;

/// A read the facade served.
#[derive(Clone, Debug)]
pub enum Read {
    /// `get_cell`.
    Cell(CellKey),
    /// `get_cell_latest`.
    Latest(RowKey, Column),
    /// `get_cells_for_row`.
    Row(RowKey),
    /// `query_index`, with the index's column.
    Index(IndexQuery, Column),
}

impl Read {
    /// `cell`, `latest`, `row` or `index`.
    pub fn kind(&self) -> &'static str {
        match self {
            Read::Cell(_) => "cell",
            Read::Latest(..) => "latest",
            Read::Row(_) => "row",
            Read::Index(..) => "index",
        }
    }

    /// The one column the read is about, if it is about one.
    fn column(&self) -> Option<&Column> {
        match self {
            Read::Cell(key) => Some(&key.column),
            Read::Latest(_, column) | Read::Index(_, column) => Some(column),
            Read::Row(_) => None,
        }
    }

    /// The column the read's counts go under (`*` for a whole row).
    fn column_label(&self) -> String {
        match self {
            Read::Cell(key) => key.column.to_string(),
            Read::Latest(_, column) | Read::Index(_, column) => column.to_string(),
            Read::Row(_) => "*".into(),
        }
    }
}

/// What a store answered.
#[derive(Clone, Debug)]
pub enum Answer {
    /// One cell or none.
    Cell(Option<StoredCell>),
    /// The latest cells of a row.
    Cells(Vec<StoredCell>),
    /// Index entries.
    Entries(Vec<IndexEntry>),
}

/// A served read, handed to the verifier.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The request.
    pub read: Read,
    /// Which store served it.
    pub served: Side,
    /// What it answered.
    pub answer: Answer,
}

/// What the verifier asks of the mirror during triage.
#[async_trait]
pub trait Triage: Send + Sync {
    /// Waits until no write of these rows is in flight between the stores
    /// (outbox entries, change-log cells the reverse mirror has not
    /// applied) and, for an index read, until the index's maintainer has
    /// passed every change-log cell written before the call; at most
    /// `wait`. Whether that happened.
    async fn settle(&self, rows: &[RowKey], index: Option<&str>, wait: Duration) -> bool;

    /// Whether rows may still be missing from Schemaless because the
    /// backfill has not finished.
    async fn backfill_pending(&self) -> bool;
}

/// The two stores and how to compare them.
#[derive(Clone)]
pub struct Stores {
    /// The legacy model.
    pub legacy: Arc<dyn CellStore>,
    /// Schemaless.
    pub schemaless: Arc<dyn CellStore>,
    /// The canonical form of bodies.
    pub canonical: Arc<dyn Canonical>,
    /// `[verify]` ignore rules and tolerances.
    pub rules: Rules,
}

impl Stores {
    fn side(&self, side: Side) -> &dyn CellStore {
        match side {
            Side::Legacy => &*self.legacy,
            Side::Schemaless => &*self.schemaless,
        }
    }

    /// Replays `read` on one side, from the master. An answer a minion gave
    /// because the master is down may be stale: it is an error here (the
    /// replay is counted as failed), never a comparison that could record
    /// a false mismatch.
    pub async fn read(&self, side: Side, read: &Read) -> schemaless::Result<Answer> {
        let store = self.side(side);
        let master = ReadFrom::Master;
        let (answer, stale) = match read {
            Read::Cell(key) => {
                let a = store.get_cell_answer(key, master).await?;
                (Answer::Cell(a.value), a.stale)
            }
            Read::Latest(row, column) => {
                let a = store.get_cell_latest_answer(row, column, master).await?;
                (Answer::Cell(a.value), a.stale)
            }
            Read::Row(row) => {
                let a = store.get_cells_for_row_answer(row, master).await?;
                (Answer::Cells(a.value), a.stale)
            }
            Read::Index(query, _) => {
                let a = store.query_index_answer(query, master).await?;
                (Answer::Entries(a.value), a.stale)
            }
        };
        if stale {
            return Err(schemaless::Error::Unavailable {
                node: format!("the {side:?} master"),
                reason: "a minion answered instead, possibly stale: not compared".into(),
            });
        }
        Ok(answer)
    }

    /// Compares the legacy side's answer with Schemaless's.
    pub fn compare(&self, read: &Read, legacy: &Answer, schemaless: &Answer) -> Vec<Unit> {
        let (rules, canon) = (&self.rules, &*self.canonical);
        match (read, legacy, schemaless) {
            (Read::Cell(key), Answer::Cell(a), Answer::Cell(b)) => compare::one_cell(
                rules,
                canon,
                key.row_key,
                &key.column,
                a.as_ref().map(|c| &c.cell),
                b.as_ref().map(|c| &c.cell),
            )
            .into_iter()
            .collect(),
            (Read::Latest(row, column), Answer::Cell(a), Answer::Cell(b)) => compare::one_cell(
                rules,
                canon,
                *row,
                column,
                a.as_ref().map(|c| &c.cell),
                b.as_ref().map(|c| &c.cell),
            )
            .into_iter()
            .collect(),
            (Read::Row(row), Answer::Cells(a), Answer::Cells(b)) => {
                compare::rows(rules, canon, *row, a, b)
            }
            (Read::Index(_, column), Answer::Entries(a), Answer::Entries(b)) => {
                compare::index_entries(rules, column, a, b)
            }
            _ => Vec::new(),
        }
    }
}

/// Everything the background replay needs.
pub struct Replayer {
    /// The stores.
    pub stores: Stores,
    /// The verifier's database (the legacy one).
    pub pool: PgPool,
    /// Triage's questions to the mirror.
    pub triage: Arc<dyn Triage>,
    /// `[verify]`.
    pub config: config::Verify,
}

/// Builds the replay's stores on the replay thread (so that their
/// connections belong to its runtime), and closes them when it stops.
#[async_trait]
pub trait ReplayerSource: Send + 'static {
    /// The replayer, connected from the replay thread.
    async fn build(&self) -> Result<Replayer, String>;
    /// Closes what `build` opened.
    async fn close(&self);
}

/// The replay thread's niceness: the kernel gives it about a tenth of the
/// CPU a serving thread gets when both want it, and all of it when the
/// serving threads are idle.
const REPLAY_NICE: i32 = 10;

/// Starts sampling with the replays, their comparisons, triage and
/// bookkeeping on a thread of their own, with its own single-threaded
/// runtime, its own connection pools (`source` builds them there) and a
/// lower CPU priority ([`REPLAY_NICE`]). The serving path pays for a
/// sample with a clone of its answer and a queue push, never waits on a
/// replay, and does not share its threads (or its connections) with one:
/// a replay, its decoding and its comparison cannot delay a served read
/// queued behind them on a runtime worker.
///
/// The returned task ends when the thread has stopped (after `cancel`).
/// If the thread, its runtime or its stores cannot start, no replay runs
/// (logged as an error; samples then fill the queue and are counted as
/// dropped) and the served reads are unaffected.
pub fn start_isolated(
    config: &config::Verify,
    source: impl ReplayerSource,
    cancel: CancellationToken,
) -> (Sampler, Vec<JoinHandle<()>>) {
    let (sampler, receiver) = sampler::with_queue(config);
    let (done, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread_sampler = sampler.clone();
    let spawned = std::thread::Builder::new()
        .name("mz-replay".into())
        .spawn(move || {
            lower_priority(REPLAY_NICE);
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    tracing::error!("verify: the replay runtime did not start ({e}); no replays");
                    return;
                }
            };
            runtime.block_on(async move {
                let replayer = match source.build().await {
                    Ok(replayer) => Arc::new(replayer),
                    Err(e) => {
                        tracing::error!(
                            "verify: the replay's stores did not open ({e}); no replays"
                        );
                        return;
                    }
                };
                tokio::join!(
                    replay::dispatch(
                        replayer.clone(),
                        thread_sampler.clone(),
                        receiver,
                        cancel.clone()
                    ),
                    flush::flush_loop(replayer, thread_sampler, cancel),
                );
                source.close().await;
            });
            drop(done);
        });
    if let Err(e) = spawned {
        tracing::error!("verify: the replay thread did not start ({e}); no replays");
    }
    let waiter = tokio::spawn(async move {
        let _ = stopped.await;
    });
    (sampler, vec![waiter])
}

/// Lowers the calling thread's CPU priority (on Linux a thread has its
/// own nice value). Best effort: a failure leaves it as it was.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        // nix has no setpriority.
        // SAFETY: setpriority with PRIO_PROCESS and who = 0 changes only
        // the calling thread's nice value; it reads no memory of ours.
        let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0;
        if failed {
            tracing::debug!(
                "verify: the replay thread keeps its priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}
