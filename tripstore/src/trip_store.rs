//! [`TripStore`]: the cell API apps call, routed by the mode.
//!
//! The current mode is held in a watch channel, updated by a background
//! task that listens on `mezzanine_mode` and re-reads the control row every
//! `legacy.mode_poll_ms` in case a notification was lost (a dropped
//! connection drops notifications). A call reads the mode once, at its
//! start, and is routed by it:
//!
//! | mode | writes | reads |
//! |---|---|---|
//! | `legacy` | the legacy tables | the legacy tables |
//! | `mirror` | the legacy tables + the outbox, one transaction | the legacy tables |
//! | `shadow` | as `mirror`, and put to Schemaless before the answer | Schemaless for the read share's rows, PostgreSQL for the rest |
//! | `primary` | Schemaless (cells checked against the layout first) | Schemaless |
//! | `schemaless` | Schemaless | Schemaless |
//!
//! In `shadow`, the read share ([`ReadShare`], `mezzanine mode reads`)
//! decides by row key which store answers: a read of one row (a cell, a
//! row, a column's versions of several rows by the first) goes to
//! Schemaless when the row's bucket is below the share of the column read,
//! so one row is always answered by the same store at a given share. An
//! index query has no row key: it goes to Schemaless only at a share of
//! 100% for its column. A shard's change log exists only in Schemaless.
//! The share is followed as the mode is, from the same row.
//!
//! Unless `[mirror]` says otherwise, every facade also runs an outbox
//! relay (in every mode after `legacy`) and a reverse mirror (in `shadow`
//! and `primary`) as background tasks; several facades share the work.
//!
//! In `mirror`, `shadow` and `primary` a share of reads
//! (`[verify] sample_rate`, capped per second, changed at runtime by
//! `mezzanine verify sample`) is handed, with the answer served, to the
//! verifier ([`verifier::sample`]), which replays it on the other store in
//! the background. The served answer is returned as it is, whatever the
//! verifier does: sampling clones it, never waits, and drops the sample
//! when the verifier's queue is full.
//!
//! Reads from Schemaless honour tombstones ([`schemaless::tombstone`]): a
//! legacy row deleted by a plain SQL writer, captured and delivered as a
//! tombstone, reads as absent from both stores. The verifier compares
//! through the same view.
//!
//! In `shadow` a write is also put to Schemaless before it is
//! acknowledged, so its writer reads it back (the outbox still carries it,
//! in case that put fails). Other facades may miss it until then. In
//! `primary` the legacy tables lag behind Schemaless by the reverse
//! mirror's delay; nobody reads them in that mode.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use legacy::LegacyStore;
use mirror::{MirrorStatus, Outbox, Relay, ReverseMirror, WorkerStats};
use schemaless::tombstone::Tombstoned;
use schemaless::{
    Cell, CellKey, CellResult, CellStore, Column, IndexEntry, IndexQuery, MySqlStore, ReadFrom,
    Result, RowKey, ShardPage, StoredCell, WriteOutcome,
};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::gates::MigrationGate;
use crate::mode::{self, Mode, ModeChange, ModeRequest, ModeState, ReadShare, ReadsRequest};
use crate::report::{self, CallStats, Served};
use crate::triage::MirrorTriage;
use verifier::sample::{Answer, Read, Replayer, Sample, Stores};
use verifier::{Sampler, Side};

/// The facade over the legacy model and Schemaless.
pub struct TripStore {
    legacy: LegacyStore,
    schemaless: MySqlStore,
    /// Schemaless as reads see it: cells hidden by tombstones are absent.
    visible: Arc<Tombstoned<MySqlStore>>,
    /// The mode as last seen; the watcher task keeps it current.
    mode: watch::Receiver<Mode>,
    /// Updated directly by this facade's own mode changes, so its caller
    /// sees them at once.
    mode_sender: watch::Sender<Mode>,
    /// The share of `shadow`'s reads Schemaless serves, as last seen.
    reads: watch::Receiver<Arc<ReadShare>>,
    /// Updated directly by this facade's own changes of the share.
    reads_sender: watch::Sender<Arc<ReadShare>>,
    /// The outbox relay (run in the background unless
    /// `mirror.relay_in_app` is false).
    relay: Arc<Relay>,
    /// Wakes the relay after a mirrored write commits.
    relay_wake: Arc<Notify>,
    /// The reverse mirror (run in the background unless
    /// `mirror.reverse_in_app` is false).
    reverse: Arc<ReverseMirror>,
    /// The gates of `set_mode`.
    gate: MigrationGate,
    /// Hands sampled reads to the verifier.
    sampler: Sampler,
    /// Calls, failures and latencies per store, reported to the guard.
    stats: Arc<CallStats>,
    /// This facade's name in its reports (`facade:host:pid:suffix`).
    name: String,
    /// Stops the background tasks.
    cancel: CancellationToken,
    /// The mode watcher and the mirror's tasks, joined by
    /// [`TripStore::close`].
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl TripStore {
    /// Connects both stores (Schemaless connections open lazily, so a
    /// facade in `legacy` mode runs before the Schemaless servers exist),
    /// checks the layout, creates the control and mirror tables if needed,
    /// starts following the mode and, as `[mirror]` says, the relay and
    /// the reverse mirror.
    pub async fn connect(config: &config::Config) -> Result<TripStore, Error> {
        let legacy = LegacyStore::connect(config).await?;
        let schemaless = MySqlStore::connect(config)?;
        let poll = Duration::from_millis(
            legacy::connection::legacy_config(config)
                .map_err(Error::Legacy)?
                .mode_poll_ms,
        );
        mode::ensure_control(legacy.pool()).await?;
        mirror::schema::ensure(legacy.pool()).await?;
        verifier::store::ensure(legacy.pool()).await?;
        report::ensure(legacy.pool()).await?;
        let current = mode::read(legacy.pool()).await?;
        let (sender, receiver) = watch::channel(current.mode);
        let (reads_sender, reads) = watch::channel(Arc::new(current.reads));
        let cancel = CancellationToken::new();
        let mut tasks = vec![tokio::spawn(watch_mode(
            legacy.pool().clone(),
            (sender.clone(), reads_sender.clone()),
            poll,
            cancel.clone(),
        ))];
        let visible = Arc::new(Tombstoned::new(schemaless.clone(), config)?);
        let relay = Arc::new(Relay::new(&legacy, Arc::new(schemaless.clone()), config)?);
        let reverse = Arc::new(ReverseMirror::new(
            legacy.clone(),
            schemaless.clone(),
            config,
        ));
        if config.mirror.relay_in_app {
            let relay = relay.clone();
            let enabled = enabled_while(&receiver, Mode::relays, &cancel);
            let cancel = cancel.clone();
            tasks.push(tokio::spawn(
                async move { relay.run(cancel, enabled).await },
            ));
        }
        if config.mirror.reverse_in_app {
            let reverse = reverse.clone();
            let enabled = enabled_while(&receiver, Mode::reverse_mirrors, &cancel);
            let cancel = cancel.clone();
            tasks.push(tokio::spawn(
                async move { reverse.run(cancel, enabled).await },
            ));
        }
        let stats = Arc::new(CallStats::default());
        let name = mirror::worker::worker_name("facade");
        tasks.push(tokio::spawn(report::run(
            legacy.pool().clone(),
            name.clone(),
            stats.clone(),
            schemaless.clone(),
            receiver.clone(),
            Duration::from_millis(config.guard.report_ms),
            cancel.clone(),
        )));
        let (sampler, verify_tasks) = verifier::sample::start_isolated(
            &config.verify,
            ReplayStores::new(config),
            cancel.clone(),
        );
        tasks.extend(verify_tasks);
        Ok(TripStore {
            gate: MigrationGate::new(legacy.pool().clone(), schemaless.clone(), config)
                .with_legacy(legacy.clone()),
            sampler,
            stats,
            name,
            relay_wake: relay.waker(),
            legacy,
            schemaless,
            visible,
            mode: receiver,
            mode_sender: sender,
            reads,
            reads_sender,
            relay,
            reverse,
            cancel,
            tasks: Mutex::new(tasks),
        })
    }

    /// The mode calls are routed by now.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// The share of `shadow`'s reads this facade sends to Schemaless now.
    pub fn read_share(&self) -> Arc<ReadShare> {
        self.reads.borrow().clone()
    }

    /// A receiver that sees every change of the read share this facade
    /// learns of.
    pub fn read_share_changes(&self) -> watch::Receiver<Arc<ReadShare>> {
        self.reads.clone()
    }

    /// This facade's name in its reports to the guard.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A receiver that sees every mode change this facade learns of.
    pub fn mode_changes(&self) -> watch::Receiver<Mode> {
        self.mode.clone()
    }

    /// The control row: mode, when, by whom, forced or not.
    pub async fn mode_state(&self) -> Result<ModeState, Error> {
        mode::read(self.legacy.pool()).await
    }

    /// Changes the mode for every facade (see [`mode::set`]), through the
    /// migration's gates ([`crate::gates`]).
    pub async fn set_mode(&self, request: &ModeRequest) -> Result<ModeChange, Error> {
        let change = mode::set(self.legacy.pool(), request, &self.gate).await?;
        self.mode_sender.send_replace(change.to);
        Ok(change)
    }

    /// Changes the share of `shadow`'s reads Schemaless serves, for every
    /// facade (see [`mode::set_reads`]).
    pub async fn set_reads(&self, request: &ReadsRequest) -> Result<ReadShare, Error> {
        let (_, after) = mode::set_reads(self.legacy.pool(), request).await?;
        self.reads_sender.send_replace(Arc::new(after.clone()));
        Ok(after)
    }

    /// The legacy model behind the facade.
    pub fn legacy(&self) -> &LegacyStore {
        &self.legacy
    }

    /// The Schemaless store behind the facade (reads there see cells that
    /// tombstones hide; see [`TripStore::schemaless_reads`]).
    pub fn schemaless(&self) -> &MySqlStore {
        &self.schemaless
    }

    /// Schemaless as the facade reads it: deleted (tombstoned) cells are
    /// absent.
    pub fn schemaless_reads(&self) -> &Tombstoned<MySqlStore> {
        &self.visible
    }

    /// This facade's read sampling (to change its rate at runtime; `verify
    /// sample` changes every facade's through the database).
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// The outbox relay (to run it by hand, or drain the outbox now).
    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    /// The outbox relay's counters.
    pub fn relay_stats(&self) -> Arc<WorkerStats> {
        self.relay.stats()
    }

    /// The reverse mirror (to run it by hand, or catch up now).
    pub fn reverse(&self) -> &ReverseMirror {
        &self.reverse
    }

    /// The reverse mirror's counters.
    pub fn reverse_stats(&self) -> Arc<WorkerStats> {
        self.reverse.stats()
    }

    /// Both directions of the mirror: outbox depth and age, reverse lag per
    /// shard, the running relays and reverse mirrors.
    pub async fn mirror_status(&self) -> Result<MirrorStatus, Error> {
        Ok(mirror::status::read(self.legacy.pool(), &self.schemaless).await?)
    }

    /// Stops the background tasks and closes both stores.
    pub async fn close(&self) {
        self.cancel.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks lock"));
        for task in tasks {
            let _ = task.await;
        }
        self.legacy.close().await;
        self.schemaless.close().await;
    }

    /// In `shadow` reads come from Schemaless, so a write is also delivered
    /// there before it is acknowledged: the writer reads its own write.
    /// The outbox entries stay (the relay finds the cells already present),
    /// so if Schemaless fails here the write is still acknowledged, and
    /// only reaches Schemaless when the relay moves it.
    async fn deliver_now(&self, cells: &[Cell], results: &[CellResult]) {
        let kept: Vec<Cell> = cells
            .iter()
            .zip(results)
            .filter(|(_, r)| matches!(r, Ok(WriteOutcome::Written | WriteOutcome::AlreadyPresent)))
            .filter_map(|(cell, _)| self.legacy.canonical_cell(cell).ok())
            .collect();
        if kept.is_empty() {
            return;
        }
        if let Err(e) = self.schemaless.put_cells(kept).await {
            tracing::warn!("shadow: a write reaches Schemaless only through the relay: {e}");
        }
    }

    /// The store a read goes to, and the side to sample (when this read
    /// is sampled): by the mode, and in `shadow` by the read share of the
    /// row (`None`: a read of no single row, which goes to Schemaless only
    /// at 100%) in the column read (`None`: several columns, the default
    /// share).
    fn reads(
        &self,
        row: Option<&RowKey>,
        column: Option<&str>,
    ) -> (&dyn CellStore, Option<Side>, Served) {
        let mode = self.mode();
        let schemaless = match mode {
            Mode::Shadow => {
                let share = self.reads.borrow();
                match row {
                    Some(row) => share.serves_schemaless(row, column),
                    None => share.share(column) == ReadShare::ALL,
                }
            }
            _ => mode.reads_schemaless(),
        };
        let (store, side): (&dyn CellStore, Side) = if schemaless {
            (&*self.visible, Side::Schemaless)
        } else {
            (&self.legacy, Side::Legacy)
        };
        let sampled = mode.samples() && self.sampler.wants();
        let served = match side {
            Side::Legacy => Served::Legacy,
            Side::Schemaless => Served::Schemaless,
        };
        (store, sampled.then_some(side), served)
    }

    /// Counts a call for the guard.
    fn count<T>(&self, served: Served, started: Instant, result: &Result<T>) {
        let failed = result.as_ref().err().is_some_and(report::store_failed);
        self.stats.record(served, started.elapsed(), failed);
    }

    /// A write, routed by the mode.
    async fn put_routed(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        match self.mode() {
            Mode::Legacy => {
                let guard = StillLegacy::default();
                match self.legacy.put_cells_with(cells.clone(), &guard).await {
                    Err(_) if guard.moved.load(std::sync::atomic::Ordering::Relaxed) => {
                        // The mode moved on while this facade had not seen
                        // it yet: nothing was written; again, in the mode
                        // the control row says.
                        let state = mode::read(self.legacy.pool())
                            .await
                            .map_err(|e| schemaless::Error::Schema(e.to_string()))?;
                        self.mode_sender.send_replace(state.mode);
                        Box::pin(self.put_routed(cells)).await
                    }
                    other => other,
                }
            }
            Mode::Mirror => {
                let results = self.legacy.put_cells_with(cells, &Outbox).await?;
                self.relay_wake.notify_one();
                Ok(results)
            }
            Mode::Shadow => {
                let results = self.legacy.put_cells_with(cells.clone(), &Outbox).await?;
                self.relay_wake.notify_one();
                self.deliver_now(&cells, &results).await;
                Ok(results)
            }
            Mode::Primary => {
                // Only what the reverse mirror can apply to the legacy
                // tables is written.
                let checked = cells
                    .iter()
                    .enumerate()
                    .map(|(i, cell)| self.legacy.canonical_cell(cell).map_err(|e| e.in_batch(i)))
                    .collect::<Result<Vec<_>>>()?;
                self.schemaless.put_cells(checked).await
            }
            Mode::Schemaless => self.schemaless.put_cells(cells).await,
        }
    }

    /// Hands a served read to the verifier. Errors are not sampled (there
    /// is nothing to compare), nor answers a minion gave for a master that
    /// is down (they may be stale).
    fn sample_answer<T>(
        &self,
        side: Option<Side>,
        result: &Result<schemaless::Answer<T>>,
        read: impl FnOnce() -> Read,
        answer: impl FnOnce(&T) -> Answer,
    ) {
        if let (Some(served), Ok(value)) = (side, result) {
            if value.stale {
                return;
            }
            self.sampler.offer(Sample {
                read: read(),
                served,
                answer: answer(&value.value),
            });
        }
    }

    /// The column an index's entries come from.
    fn index_column(&self, index: &str) -> Option<Column> {
        let layout = self.legacy.layout();
        let column = layout.index(index)?.column;
        layout.columns.get(column).map(|c| c.name.clone())
    }
}

/// The sampled-read replay's own stores, opened on its thread
/// ([`verifier::sample::start_isolated`]): pools of their own, sized for
/// `verify.replayers` replays at once, so that no connection of the
/// serving path belongs to the replay's runtime or waits behind a replay.
struct ReplayStores {
    config: config::Config,
    opened: Mutex<Option<(LegacyStore, MySqlStore)>>,
}

impl ReplayStores {
    fn new(config: &config::Config) -> ReplayStores {
        let mut config = config.clone();
        // A replay holds one connection to one store at a time; the
        // flusher and triage one more each.
        let wanted = config.verify.replayers as u32 + 2;
        if let Some(legacy) = config.legacy.as_mut() {
            legacy.max_connections = legacy.max_connections.min(wanted);
        }
        config.storage.max_connections_per_node =
            config.storage.max_connections_per_node.min(wanted);
        // The facade's own store reconciles buffered writes; the replay
        // only reads.
        config.storage.reconcile_in_app = false;
        ReplayStores {
            config,
            opened: Mutex::new(None),
        }
    }
}

#[async_trait]
impl verifier::sample::ReplayerSource for ReplayStores {
    async fn build(&self) -> Result<Replayer, String> {
        let config = &self.config;
        let legacy = LegacyStore::connect(config)
            .await
            .map_err(|e| e.to_string())?;
        let schemaless = MySqlStore::connect(config).map_err(|e| e.to_string())?;
        let visible =
            Arc::new(Tombstoned::new(schemaless.clone(), config).map_err(|e| e.to_string())?);
        *self.opened.lock().expect("replay stores lock") =
            Some((legacy.clone(), schemaless.clone()));
        Ok(Replayer {
            stores: Stores {
                legacy: Arc::new(legacy.clone()),
                schemaless: visible,
                canonical: Arc::new(legacy.clone()),
                rules: verifier::Rules::from_config(&config.verify),
            },
            pool: legacy.pool().clone(),
            triage: Arc::new(MirrorTriage::new(legacy, schemaless)),
            config: config.verify.clone(),
        })
    }

    async fn close(&self) {
        let opened = self.opened.lock().expect("replay stores lock").take();
        if let Some((legacy, schemaless)) = opened {
            legacy.close().await;
            schemaless.close().await;
        }
    }
}

/// A flag that follows `mode` through `wanted`, until `cancel`.
fn enabled_while(
    mode: &watch::Receiver<Mode>,
    wanted: fn(&Mode) -> bool,
    cancel: &CancellationToken,
) -> watch::Receiver<bool> {
    let mut mode = mode.clone();
    let (sender, receiver) = watch::channel(wanted(&mode.borrow_and_update()));
    let cancel = cancel.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = mode.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let on = wanted(&mode.borrow_and_update());
                    sender.send_if_modified(|was| std::mem::replace(was, on) != on);
                }
            }
        }
    });
    receiver
}

impl Drop for TripStore {
    fn drop(&mut self) {
        // A facade dropped without `close` must not leave its watcher
        // running.
        self.cancel.cancel();
        if let Ok(tasks) = self.tasks.get_mut() {
            for task in tasks.drain(..) {
                task.abort();
            }
        }
    }
}

/// Follows the mode until cancelled: notifications for speed, polling for
/// safety.
async fn watch_mode(
    pool: PgPool,
    (sender, reads): (watch::Sender<Mode>, watch::Sender<Arc<ReadShare>>),
    poll: Duration,
    cancel: CancellationToken,
) {
    let mut listener = None;
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if listener.is_none() {
            listener = listen(&pool).await;
        }
        let notified = async {
            match listener.as_mut() {
                Some(l) => l.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            result = notified => {
                if let Err(e) = result {
                    tracing::warn!("mode notifications lost ({e}); polling until they return");
                    listener = None;
                }
            }
            _ = tick.tick() => {}
        }
        match mode::read(&pool).await {
            Ok(state) => {
                reads.send_if_modified(|share| {
                    let changed = **share != state.reads;
                    if changed {
                        tracing::info!(
                            "reads in shadow: {} of them to Schemaless (was {})",
                            state.reads.describe(),
                            share.describe()
                        );
                        *share = Arc::new(state.reads.clone());
                    }
                    changed
                });
                sender.send_if_modified(|mode| {
                    let changed = *mode != state.mode;
                    if changed {
                        tracing::info!("mode is now {} (was {mode})", state.mode);
                        *mode = state.mode;
                    }
                    changed
                });
            }
            Err(e) => tracing::warn!("reading the mode: {e}"),
        }
    }
}

/// The hook of a write in `legacy`: the mode row is read `FOR SHARE` in
/// the write's own transaction. A write that still routes by `legacy`
/// after the mode moved on would reach neither the outbox nor a backfill
/// planned after the move (its commit can come long after the facade's
/// last poll, with a statement timeout and retries), so it is refused and
/// sent again in the new mode. The lock also makes `mode set` wait for the
/// legacy-mode writes in flight: none commits after the change.
#[derive(Default)]
struct StillLegacy {
    moved: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl legacy::TransactionHook for StillLegacy {
    async fn begin(&self, tx: &mut sqlx::PgConnection) -> Result<()> {
        let current: Option<String> =
            sqlx::query_scalar("/* mezzanine */ SELECT mode FROM mezzanine.mode FOR SHARE")
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| schemaless::Error::Storage {
                    node: "postgres (mezzanine.mode)".into(),
                    source: e,
                })?;
        match current.as_deref() {
            None | Some("legacy") => Ok(()),
            Some(other) => {
                self.moved.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(schemaless::Error::Unsupported {
                    operation: "a write in mode legacy",
                    reason: format!("the mode is {other} now"),
                })
            }
        }
    }
}

async fn listen(pool: &PgPool) -> Option<PgListener> {
    let result = async {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(mode::CHANNEL).await?;
        Ok::<_, sqlx::Error>(listener)
    }
    .await;
    match result {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!("listening for mode changes: {e}; polling instead");
            None
        }
    }
}

#[async_trait]
impl CellStore for TripStore {
    fn shard_count(&self) -> u32 {
        self.schemaless.shard_count()
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        let started = Instant::now();
        let served = match self.mode() {
            Mode::Primary | Mode::Schemaless => Served::Schemaless,
            _ => Served::Legacy,
        };
        let result = self.put_routed(cells).await;
        self.count(served, started, &result);
        result
    }

    // The `_answer` reads say whether a minion answered for a master that
    // is down. Such answers are not sampled: a stale answer compared with
    // the other store would be a false mismatch.

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        from: ReadFrom,
    ) -> Result<schemaless::Answer<Option<StoredCell>>> {
        let (store, sampled, served) = self.reads(Some(&key.row_key), Some(key.column.as_str()));
        let started = Instant::now();
        let result = store.get_cell_answer(key, from).await;
        self.count(served, started, &result);
        self.sample_answer(
            sampled,
            &result,
            || Read::Cell(key.clone()),
            |v| Answer::Cell(v.clone()),
        );
        result
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<schemaless::Answer<Option<StoredCell>>> {
        let (store, sampled, served) = self.reads(Some(row_key), Some(column.as_str()));
        let started = Instant::now();
        let result = store.get_cell_latest_answer(row_key, column, from).await;
        self.count(served, started, &result);
        self.sample_answer(
            sampled,
            &result,
            || Read::Latest(*row_key, column.clone()),
            |v| Answer::Cell(v.clone()),
        );
        result
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        from: ReadFrom,
    ) -> Result<schemaless::Answer<Vec<StoredCell>>> {
        let (store, sampled, served) = self.reads(Some(row_key), None);
        let started = Instant::now();
        let result = store.get_cells_for_row_answer(row_key, from).await;
        self.count(served, started, &result);
        self.sample_answer(
            sampled,
            &result,
            || Read::Row(*row_key),
            |v| Answer::Cells(v.clone()),
        );
        result
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        from: ReadFrom,
    ) -> Result<schemaless::Answer<Vec<IndexEntry>>> {
        let column = self.index_column(&query.index);
        let (store, sampled, served) = self.reads(None, column.as_ref().map(Column::as_str));
        let started = Instant::now();
        let result = store.query_index_answer(query, from).await;
        self.count(served, started, &result);
        if let Some(column) = sampled.and(column) {
            self.sample_answer(
                sampled,
                &result,
                || Read::Index(query.clone(), column),
                |v| Answer::Entries(v.clone()),
            );
        }
        result
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<schemaless::Answer<Vec<StoredCell>>> {
        // Every version of a column is no read the verifier replays (the
        // legacy tables keep only the current row): not sampled.
        let (store, _, served) = self.reads(rows.first(), Some(column.as_str()));
        let started = Instant::now();
        let result = store.get_column_cells_answer(rows, column, from).await;
        self.count(served, started, &result);
        result
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage> {
        // The legacy model has no change log: nothing to compare with, and
        // in `shadow` only Schemaless can answer, whatever the share.
        let (store, served): (&dyn CellStore, Served) = if self.mode() == Mode::Shadow {
            (&*self.visible, Served::Schemaless)
        } else {
            let (store, _, served) = self.reads(None, None);
            (store, served)
        };
        let started = Instant::now();
        let result = store.get_cells_for_shard(shard, after, limit, from).await;
        self.count(served, started, &result);
        result
    }
}
