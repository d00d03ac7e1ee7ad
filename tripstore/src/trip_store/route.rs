//! Routing a call by the mode: which store writes, which store reads
//! (by the read share), delivering a mirror write at once in `shadow`,
//! sampling what was served, and counting it for the guard.

use super::*;

impl TripStore {
    /// In `shadow` reads come from Schemaless, so a write is also delivered
    /// there before it is acknowledged: the writer reads its own write.
    /// The outbox entries stay (the relay finds the cells already present),
    /// so if Schemaless fails here the write is still acknowledged, and
    /// only reaches Schemaless when the relay moves it.
    pub(super) async fn deliver_now(&self, cells: &[Cell], results: &[CellResult]) {
        let kept: Vec<Cell> = cells
            .iter()
            .zip(results)
            .filter(|(_, r)| matches!(r, Ok(WriteOutcome::Written | WriteOutcome::AlreadyPresent)))
            .filter_map(|(cell, _)| self.legacy.canonical_cell(cell).ok())
            .collect();
        if kept.is_empty() {
            return;
        }
        if let Err(e) = self.visible.put_cells(kept).await {
            tracing::warn!("shadow: a write reaches Schemaless only through the relay: {e}");
        }
    }

    /// The store a read goes to, and the side to sample (when this read
    /// is sampled): by the mode, and in `shadow` by the read share of the
    /// row (`None`: a read of no single row, which goes to Schemaless only
    /// at 100%) in the column read (`None`: several columns, the default
    /// share).
    pub(super) fn reads(
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
    pub(super) fn count<T>(&self, served: Served, started: Instant, result: &Result<T>) {
        let failed = result.as_ref().err().is_some_and(report::store_failed);
        self.stats.record(served, started.elapsed(), failed);
    }

    /// A write, routed by the mode.
    pub(super) async fn put_routed(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
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
                let results = self.legacy.put_cells_with(cells, &self.outbox).await?;
                self.relay_wake.notify_one();
                Ok(results)
            }
            Mode::Shadow => {
                let results = self
                    .legacy
                    .put_cells_with(cells.clone(), &self.outbox)
                    .await?;
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
                self.ask_postgres(&checked).await?;
                self.visible.put_cells(checked).await
            }
            // Through the tombstones: a cell they would hide is refused.
            Mode::Schemaless => self.visible.put_cells(cells).await,
        }
    }

    /// In `primary`, asks PostgreSQL what it alone judges of the cells
    /// (a domain's or the table's `CHECK`, a malformed `xml`, a generated
    /// column: [`legacy::LegacyStore::ask`]) before they go to Schemaless,
    /// so that one the reverse mirror could never apply is refused, not
    /// acknowledged and parked. Schemaless is the store of record here and
    /// must not wait on PostgreSQL: an answer not given within
    /// [`ASK_TIMEOUT`] lets the write through unasked (the reverse mirror
    /// parks what PostgreSQL then refuses), and writes go unasked for
    /// [`UNASKED_FOR`] after, so a PostgreSQL that is down costs one wait,
    /// not one per write.
    async fn ask_postgres(&self, cells: &[Cell]) -> Result<()> {
        let within = (!self.unasked.paused()).then_some(ASK_TIMEOUT);
        let outcome = match self.legacy.ask(cells, within, &*self.visible).await {
            Ok(legacy::Asked::Taken { asked: 0 }) => return Ok(()),
            Ok(legacy::Asked::Taken { .. }) => "taken",
            Ok(legacy::Asked::Unasked(reason)) => {
                if within.is_some() {
                    tracing::warn!(
                        "primary: writes go to Schemaless without asking PostgreSQL for {UNASKED_FOR:?}: {reason}"
                    );
                    self.unasked.pause();
                }
                "unasked"
            }
            Err(e) => {
                metrics::counter!("mezzanine_primary_asked_total", "outcome" => "refused")
                    .increment(1);
                return Err(e);
            }
        };
        metrics::counter!("mezzanine_primary_asked_total", "outcome" => outcome).increment(1);
        Ok(())
    }

    /// Hands a served read to the verifier. Errors are not sampled (there
    /// is nothing to compare), nor answers a minion gave for a master that
    /// is down (they may be stale).
    pub(super) fn sample_answer<T>(
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
    pub(super) fn index_column(&self, index: &str) -> Option<Column> {
        let layout = self.legacy.layout();
        let column = layout.index(index)?.column;
        layout.columns.get(column).map(|c| c.name.clone())
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
                .map_err(|e| legacy::storage_error("postgres (mezzanine.mode)", e))?;
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

/// How long a write in `primary` waits for PostgreSQL's answer to
/// [`TripStore::ask_postgres`].
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// How long writes go unasked after PostgreSQL gave no answer.
const UNASKED_FOR: Duration = Duration::from_secs(5);

/// When asking PostgreSQL may start again.
#[derive(Default)]
pub(super) struct Unasked(Mutex<Option<Instant>>);

impl Unasked {
    fn paused(&self) -> bool {
        let until = self.0.lock().unwrap_or_else(|e| e.into_inner());
        until.is_some_and(|until| Instant::now() < until)
    }

    fn pause(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + UNASKED_FOR);
    }
}
