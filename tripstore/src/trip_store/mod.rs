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
//! | `primary` | Schemaless (cells checked against the layout, then asked of PostgreSQL, first) | Schemaless |
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
//!
//! Its rooms: `route` (which store a call goes to, sampling, counting),
//! `follow` (following the mode and share, the background tasks),
//! `replay` (the verifier's replay stores); this file holds the facade,
//! its accessors and the cell API.

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

mod follow;
mod replay;
mod route;

use follow::{enabled_while, watch_mode};
use replay::ReplayStores;

/// The facade over the legacy model and Schemaless.
pub struct TripStore {
    legacy: LegacyStore,
    schemaless: MySqlStore,
    /// Schemaless as reads see it: cells hidden by tombstones are absent.
    /// Writes to Schemaless go through it too, which refuses a cell a
    /// tombstone would hide (a deleted row key is retired).
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
    /// The hook of a mirrored write (`mirror`, `shadow`).
    outbox: Outbox,
    /// Whether a write in `primary` asks PostgreSQL first
    /// ([`TripStore::ask_postgres`]).
    unasked: route::Unasked,
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
            outbox: Outbox::new(legacy.tombstones().clone()),
            unasked: route::Unasked::default(),
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
