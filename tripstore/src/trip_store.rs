//! [`TripStore`]: the cell API apps call, routed by the mode.
//!
//! The current mode is held in a watch channel, updated by a background
//! task that listens on `mezzanine_mode` and re-reads the control row every
//! `legacy.mode_poll_ms` in case a notification was lost (a dropped
//! connection drops notifications). A call reads the mode once, at its
//! start, and goes entirely to the store that mode names.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use legacy::LegacyStore;
use schemaless::{
    Cell, CellKey, CellResult, CellStore, Column, IndexEntry, IndexQuery, MySqlStore, ReadFrom,
    Result, RowKey, ShardPage, StoredCell,
};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::mode::{self, Mode, ModeChange, ModeRequest, ModeState};

/// The facade over the legacy model and Schemaless.
pub struct TripStore {
    legacy: LegacyStore,
    schemaless: MySqlStore,
    /// The mode as last seen; the watcher task keeps it current.
    mode: watch::Receiver<Mode>,
    /// Updated directly by this facade's own mode changes, so its caller
    /// sees them at once.
    mode_sender: watch::Sender<Mode>,
    /// Stops the watcher.
    cancel: CancellationToken,
    /// The watcher, joined by [`TripStore::close`].
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl TripStore {
    /// Connects both stores (Schemaless connections open lazily, so a
    /// facade in `legacy` mode runs before the Schemaless servers exist),
    /// checks the layout, creates the control table if needed and starts
    /// following the mode.
    pub async fn connect(config: &config::Config) -> Result<TripStore, Error> {
        let legacy = LegacyStore::connect(config).await?;
        let schemaless = MySqlStore::connect(config)?;
        let poll = Duration::from_millis(
            legacy::connection::legacy_config(config)
                .map_err(Error::Legacy)?
                .mode_poll_ms,
        );
        mode::ensure_control(legacy.pool()).await?;
        let current = mode::read(legacy.pool()).await?;
        let (sender, receiver) = watch::channel(current.mode);
        let cancel = CancellationToken::new();
        let watcher = tokio::spawn(watch_mode(
            legacy.pool().clone(),
            sender.clone(),
            poll,
            cancel.clone(),
        ));
        Ok(TripStore {
            legacy,
            schemaless,
            mode: receiver,
            mode_sender: sender,
            cancel,
            watcher: Mutex::new(Some(watcher)),
        })
    }

    /// The mode calls are routed by now.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// A receiver that sees every mode change this facade learns of.
    pub fn mode_changes(&self) -> watch::Receiver<Mode> {
        self.mode.clone()
    }

    /// The control row: mode, when, by whom, forced or not.
    pub async fn mode_state(&self) -> Result<ModeState, Error> {
        mode::read(self.legacy.pool()).await
    }

    /// Changes the mode for every facade (see [`mode::set`]).
    pub async fn set_mode(&self, request: &ModeRequest) -> Result<ModeChange, Error> {
        let change = mode::set(self.legacy.pool(), request).await?;
        self.mode_sender.send_replace(change.to);
        Ok(change)
    }

    /// The legacy model behind the facade.
    pub fn legacy(&self) -> &LegacyStore {
        &self.legacy
    }

    /// The Schemaless store behind the facade.
    pub fn schemaless(&self) -> &MySqlStore {
        &self.schemaless
    }

    /// Stops following the mode and closes both stores.
    pub async fn close(&self) {
        self.cancel.cancel();
        let watcher = self.watcher.lock().expect("watcher lock").take();
        if let Some(watcher) = watcher {
            let _ = watcher.await;
        }
        self.legacy.close().await;
        self.schemaless.close().await;
    }

    /// The store the current mode sends calls to.
    fn route(&self) -> Result<&dyn CellStore> {
        let mode = self.mode();
        match mode {
            Mode::Legacy => Ok(&self.legacy),
            Mode::Schemaless => Ok(&self.schemaless),
            other => Err(schemaless::Error::Unsupported {
                operation: "the facade",
                reason: format!(
                    "the mode is {other}, which this build cannot serve: {}",
                    other.unavailable().unwrap_or("")
                ),
            }),
        }
    }
}

impl Drop for TripStore {
    fn drop(&mut self) {
        // A facade dropped without `close` must not leave its watcher
        // running.
        self.cancel.cancel();
        if let Some(watcher) = self.watcher.get_mut().ok().and_then(Option::take) {
            watcher.abort();
        }
    }
}

/// Follows the mode until cancelled: notifications for speed, polling for
/// safety.
async fn watch_mode(
    pool: PgPool,
    sender: watch::Sender<Mode>,
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
        self.route()?.put_cells(cells).await
    }

    async fn get_cell(&self, key: &CellKey, from: ReadFrom) -> Result<Option<StoredCell>> {
        self.route()?.get_cell(key, from).await
    }

    async fn get_cell_latest(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Option<StoredCell>> {
        self.route()?.get_cell_latest(row_key, column, from).await
    }

    async fn get_cells_for_row(&self, row_key: &RowKey, from: ReadFrom) -> Result<Vec<StoredCell>> {
        self.route()?.get_cells_for_row(row_key, from).await
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage> {
        self.route()?
            .get_cells_for_shard(shard, after, limit, from)
            .await
    }

    async fn query_index(&self, query: &IndexQuery, from: ReadFrom) -> Result<Vec<IndexEntry>> {
        self.route()?.query_index(query, from).await
    }
}
