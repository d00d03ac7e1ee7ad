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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use schemaless::{
    CellKey, CellStore, Column, IndexEntry, IndexQuery, ReadFrom, RowKey, StoredCell,
};
use sqlx::PgPool;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::compare::{self, Canonical, Difference, Rules, Side, Unit};
use crate::store::{self, Counts, Settings, Source, Verified};

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

/// How often counts and coverage are written: small batches often rather
/// than a burst of PostgreSQL work once a second.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Flushes between two reads of the stored settings (one a second).
const SETTINGS_EVERY: u32 = 4;

/// How many samples the cap lets through at once after a quiet spell.
const BURST: u64 = 4;

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

/// The facade's side of sampling: cheap checks on the read path.
#[derive(Clone)]
pub struct Sampler {
    shared: Arc<Shared>,
}

struct Shared {
    /// The rate as f64 bits.
    rate: AtomicU64,
    cap: AtomicU64,
    /// The cap's theoretical arrival time, nanoseconds since `started`.
    tat: AtomicU64,
    queue: mpsc::Sender<Sample>,
    tally: Mutex<Tally>,
    started: Instant,
}

#[derive(Default)]
struct Tally {
    counts: HashMap<String, Counts>,
    verified: Vec<Verified>,
}

impl Sampler {
    /// Whether to sample this read: a draw against the rate, then the
    /// per-second cap.
    pub fn wants(&self) -> bool {
        let rate = f64::from_bits(self.shared.rate.load(Ordering::Relaxed));
        if rate <= 0.0 || (rate < 1.0 && rand::random::<f64>() >= rate) {
            return false;
        }
        // The cap as an evenly spaced rate (GCRA, without a lock): each
        // sample moves the theoretical arrival time on by 1/cap; a sample is
        // taken while that time is at most a few intervals ahead of now. A
        // per-second window would let the whole second's samples through
        // in its first milliseconds, a burst of replays the served reads
        // would queue behind.
        let cap = self.shared.cap.load(Ordering::Relaxed).max(1);
        let interval = 1_000_000_000 / cap;
        let tolerance = interval * BURST;
        let now = self.shared.started.elapsed().as_nanos() as u64;
        let mut tat = self.shared.tat.load(Ordering::Relaxed);
        loop {
            let from = tat.max(now);
            if from - now > tolerance {
                return false;
            }
            match self.shared.tat.compare_exchange_weak(
                tat,
                from + interval,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }

    /// Hands a served read over for replay; never waits. A full queue
    /// drops it (counted).
    pub fn offer(&self, sample: Sample) {
        let column = sample.read.column_label();
        if self.shared.queue.try_send(sample).is_err() {
            metrics::counter!("mezzanine_verify_dropped_total").increment(1);
            self.count(&column, |c| c.dropped += 1);
        }
    }

    /// The sampling now in force.
    pub fn settings(&self) -> Settings {
        Settings {
            sample_rate: f64::from_bits(self.shared.rate.load(Ordering::Relaxed)),
            max_samples_per_sec: self.shared.cap.load(Ordering::Relaxed),
        }
    }

    /// Changes the sampling of this facade (until the next stored setting
    /// is read; see [`store::set_settings`] for every facade).
    pub fn set(&self, settings: Settings) {
        self.shared.rate.store(
            settings.sample_rate.clamp(0.0, 1.0).to_bits(),
            Ordering::Relaxed,
        );
        self.shared.cap.store(
            settings.max_samples_per_sec.clamp(1, 1_000_000),
            Ordering::Relaxed,
        );
    }

    fn count(&self, column: &str, f: impl FnOnce(&mut Counts)) {
        let mut tally = self.shared.tally.lock().expect("sampler tally");
        f(tally.counts.entry(column.to_string()).or_default());
    }

    fn verified(&self, units: &[Unit]) {
        let at = now_secs();
        let mut tally = self.shared.tally.lock().expect("sampler tally");
        tally.verified.extend(units.iter().map(|u| Verified {
            row_key: u.row_key,
            column: u.column.clone(),
            ref_key: u.ref_key,
            at,
        }));
    }

    fn take(&self) -> Tally {
        std::mem::take(&mut *self.shared.tally.lock().expect("sampler tally"))
    }

    fn put_back(&self, tally: Tally) {
        let mut current = self.shared.tally.lock().expect("sampler tally");
        for (column, counts) in tally.counts {
            current.counts.entry(column).or_default().add(&counts);
        }
        // Coverage is kept only while it stays small: losing some of it
        // under a long outage only makes coverage look lower.
        if current.verified.len() < 100_000 {
            current.verified.extend(tally.verified);
        }
    }
}

pub(crate) fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
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
    let (sampler, receiver) = sampler(config);
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
                    dispatch(
                        replayer.clone(),
                        thread_sampler.clone(),
                        receiver,
                        cancel.clone()
                    ),
                    flush_loop(replayer, thread_sampler, cancel),
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

/// The facade's sampler and the queue its samples go to.
fn sampler(config: &config::Verify) -> (Sampler, mpsc::Receiver<Sample>) {
    let (sender, receiver) = mpsc::channel(config.queue);
    let sampler = Sampler {
        shared: Arc::new(Shared {
            rate: AtomicU64::new(config.sample_rate.to_bits()),
            cap: AtomicU64::new(config.max_samples_per_sec),
            tat: AtomicU64::new(0),
            queue: sender,
            tally: Mutex::new(Tally::default()),
            started: Instant::now(),
        }),
    };
    (sampler, receiver)
}

async fn dispatch(
    replayer: Arc<Replayer>,
    sampler: Sampler,
    mut queue: mpsc::Receiver<Sample>,
    cancel: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(replayer.config.replayers));
    loop {
        let sample = tokio::select! {
            _ = cancel.cancelled() => return,
            sample = queue.recv() => match sample {
                Some(s) => s,
                None => return,
            },
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (replayer, sampler, cancel) = (replayer.clone(), sampler.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = replay(&replayer, &sampler, sample) => {}
            }
            drop(permit);
        });
    }
}

/// Replays one sample, compares, triages and counts.
async fn replay(replayer: &Replayer, sampler: &Sampler, sample: Sample) {
    // A column only Schemaless keeps has nothing to compare with.
    if let Some(column) = sample.read.column() {
        if !replayer.stores.canonical.compares(column) {
            return;
        }
    }
    let label = sample.read.column_label();
    let started = Instant::now();
    let other = replayer
        .stores
        .read(sample.served.other(), &sample.read)
        .await;
    let took = started.elapsed();
    metrics::histogram!("mezzanine_verify_replay_seconds").record(took.as_secs_f64());
    sampler.count(&label, |c| {
        c.replays += 1;
        c.replay_micros += took.as_micros() as u64;
    });
    let other = match other {
        Ok(answer) => answer,
        Err(e) => {
            tracing::debug!(
                "verify: replay of a {} read failed: {e}",
                sample.read.kind()
            );
            metrics::counter!("mezzanine_verify_replay_errors_total").increment(1);
            sampler.count(&label, |c| c.replay_errors += 1);
            return;
        }
    };
    let (legacy, schemaless) = match sample.served {
        Side::Legacy => (&sample.answer, &other),
        Side::Schemaless => (&other, &sample.answer),
    };
    let units = replayer.stores.compare(&sample.read, legacy, schemaless);
    if units.iter().all(|u| u.difference.is_none()) {
        count_matches(sampler, &units, false);
        sampler.verified(&units);
        return;
    }
    // Triage: wait, let in-flight writes land, read both again.
    let mut previous = differences_of(&units);
    let mut outcome = Verdict::Unsettled;
    let mut verified_now = Vec::new();
    for _ in 0..TRIAGE_ROUNDS {
        tokio::time::sleep(Duration::from_millis(replayer.config.triage_delay_ms)).await;
        let rows: Vec<RowKey> = previous.iter().map(|d| d.row_key).collect();
        let index = match &sample.read {
            Read::Index(query, _) => Some(query.index.as_str()),
            _ => None,
        };
        let settled = replayer
            .triage
            .settle(
                &rows,
                index,
                Duration::from_millis(replayer.config.triage_wait_ms),
            )
            .await;
        let reads_began = Instant::now();
        let again = futures::future::try_join(
            replayer.stores.read(Side::Legacy, &sample.read),
            replayer.stores.read(Side::Schemaless, &sample.read),
        )
        .await;
        let (legacy, schemaless) = match again {
            Ok(answers) => answers,
            Err(e) => {
                tracing::debug!("verify: triage re-read failed: {e}");
                outcome = Verdict::ReplayError;
                break;
            }
        };
        let units = replayer.stores.compare(&sample.read, &legacy, &schemaless);
        let now = differences_of(&units);
        verified_now = units
            .into_iter()
            .filter(|u| u.difference.is_none())
            .collect();
        if now.is_empty() {
            outcome = Verdict::Transient;
            break;
        }
        // A divergence stays put: the same values twice, with nothing in
        // flight in between. Lag and in-flight writes move.
        if settled && now == previous {
            outcome = Verdict::Confirmed(now, reads_began);
            break;
        }
        previous = now;
    }
    sampler.verified(&verified_now);
    match outcome {
        Verdict::Transient => count_matches(sampler, &verified_now, true),
        Verdict::ReplayError => sampler.count(&label, |c| c.replay_errors += 1),
        Verdict::Unsettled => {
            count_matches(sampler, &verified_now, false);
            for d in &previous {
                sampler.count(d.column.as_str(), |c| c.unsettled += 1);
            }
        }
        Verdict::Confirmed(differences, observed) => {
            count_matches(sampler, &verified_now, false);
            record(replayer, sampler, sample.read.kind(), differences, observed).await;
        }
    }
}

/// How many times triage reads a difference again before calling it
/// unsettled.
const TRIAGE_ROUNDS: usize = 5;

/// Where triage ended.
enum Verdict {
    /// Equal on a re-read.
    Transient,
    /// The same difference twice, nothing in flight: a mismatch, with
    /// when the reads that confirmed it began.
    Confirmed(Vec<Difference>, Instant),
    /// Still moving after every round.
    Unsettled,
    /// A re-read failed.
    ReplayError,
}

fn differences_of(units: &[Unit]) -> Vec<Difference> {
    units.iter().filter_map(|u| u.difference.clone()).collect()
}

/// Records confirmed differences (or counts them as not yet backfilled).
async fn record(
    replayer: &Replayer,
    sampler: &Sampler,
    kind: &str,
    differences: Vec<Difference>,
    observed: Instant,
) {
    let (pending, real): (Vec<Difference>, Vec<Difference>) =
        if replayer.triage.backfill_pending().await {
            differences
                .into_iter()
                .partition(|d| d.schemaless_missing())
        } else {
            (Vec::new(), differences)
        };
    for d in &pending {
        sampler.count(d.column.as_str(), |c| c.pending_backfill += 1);
    }
    if real.is_empty() {
        return;
    }
    match store::record(&replayer.pool, Source::Sample, kind, &real, observed).await {
        Ok(()) => {
            for d in &real {
                tracing::warn!(
                    "verify: {} differs in column {} after triage (a {kind} read)",
                    d.row_key,
                    d.column
                );
                let column = d.column.to_string();
                metrics::counter!("mezzanine_verify_samples_total", "column" => column.clone())
                    .increment(1);
                metrics::counter!("mezzanine_verify_mismatches_total", "column" => column)
                    .increment(1);
                sampler.count(d.column.as_str(), |c| {
                    c.samples += 1;
                    c.mismatches += 1;
                });
            }
        }
        Err(e) => tracing::warn!("verify: recording mismatches: {e}"),
    }
}

fn count_matches(sampler: &Sampler, units: &[Unit], after_triage: bool) {
    for u in units {
        let column = u.column.to_string();
        metrics::counter!("mezzanine_verify_samples_total", "column" => column.clone())
            .increment(1);
        metrics::counter!("mezzanine_verify_matches_total", "column" => column.clone())
            .increment(1);
        if after_triage {
            metrics::counter!("mezzanine_verify_transient_total", "column" => column.clone())
                .increment(1);
        }
        sampler.count(&column, |c| {
            c.samples += 1;
            c.matches += 1;
            if after_triage {
                c.transient += 1;
            }
        });
    }
}

/// Writes the tally every [`FLUSH_EVERY`], and follows the stored
/// settings.
async fn flush_loop(replayer: Arc<Replayer>, sampler: Sampler, cancel: CancellationToken) {
    if let Err(e) = store::ensure(&replayer.pool).await {
        tracing::warn!("verify: {e}");
    }
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    let mut ticks = 0u32;
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            _ = cancel.cancelled() => true,
            _ = tick.tick() => false,
        };
        let tally = sampler.take();
        if !tally.counts.is_empty() || !tally.verified.is_empty() {
            if let Err(e) = store::flush(&replayer.pool, &tally.counts, &tally.verified).await {
                tracing::warn!("verify: {e}");
                sampler.put_back(tally);
            }
        }
        if stopping {
            return;
        }
        // The settings change by hand: a look once a second is enough.
        ticks += 1;
        if !ticks.is_multiple_of(SETTINGS_EVERY) {
            continue;
        }
        match store::settings(&replayer.pool).await {
            Ok(Some(settings)) if settings != sampler.settings() => {
                tracing::info!(
                    "verify: sampling {:.4} of reads, at most {}/s",
                    settings.sample_rate,
                    settings.max_samples_per_sec
                );
                sampler.set(settings);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("verify: {e}"),
        }
    }
}
