//! Sampling the translatable reads the proxy forwards, so the verifier
//! checks what the app actually reads; and, in `shadow`, answering them
//! from Schemaless ([`Sampling::serve`], [`query::run::render_from`]).
//!
//! A read the translator answers (class `row` or `index`, one statement,
//! forwarded) is drawn against the facade's sampler (`verify.sample_rate`
//! and `verify.max_samples_per_sec`, also as `verify sample` changed
//! them) in every mode whose facade samples. A drawn statement, with its
//! parameters as text, is handed to a task on the facade's runtime and
//! the relay goes on at once: the app gets PostgreSQL's answer and never
//! waits for the replay. That task evaluates the statement's values on
//! PostgreSQL ([`query::run::cell_reads`]), turns it into the cell reads
//! its translation makes, reads each from the legacy store (rows rebuilt
//! through the layout) and offers it to the verifier as a read the legacy
//! side served. The verifier replays it on Schemaless, compares, triages
//! and records it like any sampled read of the facade, so the dashboard,
//! the gates and `verify status` see it.
//!
//! Why the legacy side is read again instead of comparing the bytes the
//! app received: triage needs to read both stores again until they agree
//! or differ the same way twice with nothing in flight, and it can do so
//! only for reads it can repeat. A write landing between the app's read
//! and the replay is then a transient difference, not a false mismatch.
//!
//! A read the proxy serves from Schemaless (`shadow`, `primary`) is
//! sampled the same way, as the facade samples its own reads there: the
//! cells are read again from Schemaless and offered as a read Schemaless
//! served, which the verifier replays on the legacy store.
//!
//! Parameters are read as text (`params`); a statement with a parameter
//! that cannot be (a NULL, a binary one of a type not read) is not
//! sampled (counted as `params_not_read`).

use std::sync::Arc;

use query::run::{AppSession, CellRead, Refused, Serving, Written};
use query::Model;
use schemaless::{CellStore, Column, ReadFrom};
use tripstore::TripStore;
use verifier::sample::{Answer, Read, Sample};
use verifier::Side;

use crate::stats::{SampleOutcome, Stats};

/// What a held statement gets: a read's serving, or a write's outcome.
#[derive(Debug)]
pub(crate) enum Held {
    Read(Serving),
    Write(Result<Written, Refused>),
    /// A pipelined batch of writes run as one: a result per statement, or
    /// up to the first that failed ([`query::run::write_batch`]).
    Batch(Vec<Result<Written, Refused>>),
    /// The writes of one simple `Query` of several statements, run as
    /// one: a result per statement, or up to the first that failed.
    Writes(Vec<Result<Written, Refused>>),
    /// The session's writes were awaited in PostgreSQL ([`crate::fresh`]),
    /// and how that ended. The statement held is forwarded now;
    /// `unserved`, a read Schemaless did not answer, says why it is not
    /// served.
    Applied {
        awaited: crate::fresh::Awaited,
        unserved: Option<String>,
    },
}

/// What sampling, serving and writing through the facade need, shared
/// by every session.
pub(crate) struct Sampling {
    facade: Arc<TripStore>,
    model: Option<Arc<Model>>,
    /// The store's batch limits, for writes through the facade.
    limits: Arc<config::Limits>,
    /// Tables' OIDs and columns' attribute numbers and types, for served
    /// reads.
    catalog: Arc<query::run::Catalog>,
    /// The facade's runtime: its pools belong to it, and the relay's
    /// threads stay free of the replay's work.
    runtime: tokio::runtime::Handle,
}

impl Sampling {
    pub(crate) fn new(
        facade: Arc<TripStore>,
        model: Option<Arc<Model>>,
        limits: config::Limits,
    ) -> Sampling {
        Sampling {
            facade,
            model,
            limits: Arc::new(limits),
            catalog: Arc::default(),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Whether to sample the next translatable read: the mode samples and
    /// the sampler's draw says so.
    pub(crate) fn wants(&self) -> bool {
        self.model.is_some() && self.facade.mode().samples() && self.facade.sampler().wants()
    }

    /// Samples `sql` with `params` (its values evaluated in `session`) in the
    /// background, as a read `served` answered.
    pub(crate) fn sample(
        &self,
        stats: Arc<Stats>,
        (sql, params, session): (String, Vec<String>, Arc<AppSession>),
        served: Side,
    ) {
        let (Some(model), facade) = (self.model.clone(), self.facade.clone()) else {
            return;
        };
        stats.sample(SampleOutcome::Drawn);
        self.runtime.spawn(async move {
            let outcome = match offer(&facade, &model, (&sql, &params, &session), served).await {
                Ok(reads) => {
                    stats.sample_reads(reads);
                    SampleOutcome::Offered
                }
                Err(e) => {
                    tracing::debug!("proxy: a sampled statement was not replayed: {e}\n  {sql}");
                    SampleOutcome::Failed
                }
            };
            stats.sample(outcome);
        });
    }
}

impl Sampling {
    /// Whether a translatable read may be served from Schemaless: the
    /// mode is `shadow` and some read share is above 0%, or the mode
    /// reads Schemaless only (`primary`, `schemaless`), as the facade's
    /// reads do.
    pub(crate) fn may_serve(&self) -> bool {
        self.model.is_some()
            && match self.facade.mode() {
                tripstore::Mode::Shadow => {
                    let share = self.facade.read_share();
                    share.default_bp > 0 || share.columns.values().any(|&bp| bp > 0)
                }
                mode => mode.reads_schemaless(),
            }
    }

    /// Answers `sql` (its `$n` bound to `params`, as text) from Schemaless in the background, or says to
    /// forward it (the read share, or a plan it cannot serve); an error
    /// reading Schemaless is a forward too, logged.
    pub(crate) fn serve(
        &self,
        sql: String,
        params: Vec<String>,
        session: Arc<AppSession>,
    ) -> tokio::sync::oneshot::Receiver<Held> {
        self.background(move |facade, catalog, model| async move {
            let Some(model) = model else {
                return Held::Read(Serving::Forward("no layout".into()));
            };
            // The share splits reads in `shadow` only; past it, every
            // read is Schemaless's.
            let shadow = facade.mode() == tripstore::Mode::Shadow;
            let share = facade.read_share();
            let serves = |row: Option<&schemaless::RowKey>, column: &str| match row {
                _ if !shadow => true,
                Some(row) => share.serves_schemaless(row, Some(column)),
                None => share.share(Some(column)) == tripstore::ReadShare::ALL,
            };
            let eval = session.evaluator(facade.legacy());
            let served = query::run::render_from(
                eval,
                facade.schemaless_reads(),
                &catalog,
                &model,
                &sql,
                &params,
                &serves,
            )
            .await;
            Held::Read(served.unwrap_or_else(|e| {
                tracing::warn!("proxy: a read is forwarded, Schemaless did not answer it: {e}");
                Serving::Forward(format!("Schemaless did not answer: {e}"))
            }))
        })
    }

    /// Runs the translatable write `sql` (its `$n` bound to `params`,
    /// `None` a NULL) through the facade in the background
    /// ([`query::run::write_through`]): the facade routes its cells by the
    /// mode, as it routes an app's `put_cells`. Acknowledged to the app
    /// only once the facade has taken every cell. A `sql` of several
    /// statements (a simple `Query`'s) is run as one batch
    /// ([`query::run::write_batch`]), answered [`Held::Writes`].
    pub(crate) fn write(
        &self,
        sql: String,
        params: Vec<Option<String>>,
        session: Arc<AppSession>,
    ) -> tokio::sync::oneshot::Receiver<Held> {
        let limits = self.limits.clone();
        self.background(move |facade, catalog, model| async move {
            // Several statements (a simple `Query`'s): run as one, as
            // PostgreSQL runs them in one implicit transaction.
            let pieces = query::split::statements(&sql);
            if let (Some(model), [_, _, ..]) = (&model, pieces.as_slice()) {
                let eval = session.evaluator(facade.legacy());
                let statements: Vec<(&str, &[Option<String>])> = pieces
                    .iter()
                    .map(|p| (p.text.as_str(), params.as_slice()))
                    .collect();
                let results = query::run::write_batch(
                    eval,
                    facade.as_ref(),
                    &catalog,
                    (model, &limits),
                    &statements,
                )
                .await;
                if let Some(Err(e)) = results.last() {
                    tracing::debug!("proxy: writes through the facade failed: {e:?}\n  {sql}");
                }
                return Held::Writes(results);
            }
            let written = match model {
                Some(model) => {
                    let eval = session.evaluator(facade.legacy());
                    query::run::write_through(
                        eval,
                        facade.as_ref(),
                        &catalog,
                        (&model, &limits),
                        &sql,
                        &params,
                    )
                    .await
                }
                None => Err(Refused::new("0A000", "no layout")),
            };
            if let Err(e) = &written {
                tracing::debug!("proxy: a write through the facade failed: {e:?}\n  {sql}");
            }
            Held::Write(written)
        })
    }

    /// Runs the translatable writes an app pipelined in one implicit
    /// transaction (`statements`: each one's SQL and parameters) through
    /// the facade as one batch, in the background: nothing is put unless
    /// every statement evaluates and checks
    /// ([`query::run::write_batch`]).
    pub(crate) fn write_batch(
        &self,
        statements: Vec<(String, Vec<Option<String>>)>,
        session: Arc<AppSession>,
    ) -> tokio::sync::oneshot::Receiver<Held> {
        let limits = self.limits.clone();
        self.background(move |facade, catalog, model| async move {
            let Some(model) = model else {
                return Held::Batch(vec![Err(Refused::new("0A000", "no layout"))]);
            };
            let eval = session.evaluator(facade.legacy());
            let batch: Vec<(&str, &[Option<String>])> = statements
                .iter()
                .map(|(sql, params)| (sql.as_str(), params.as_slice()))
                .collect();
            let results =
                query::run::write_batch(eval, facade.as_ref(), &catalog, (&model, &limits), &batch)
                    .await;
            if let Some(Err(e)) = results.last() {
                tracing::debug!(
                    "proxy: a batch of {} writes through the facade failed at its write {}: {e:?}",
                    statements.len(),
                    results.len()
                );
            }
            Held::Batch(results)
        })
    }

    /// The instance's shard count.
    pub(crate) fn shard_count(&self) -> u32 {
        self.facade.shard_count()
    }

    /// Waits on the facade's runtime until PostgreSQL holds each of
    /// `cells`, the session's writes through the facade
    /// ([`crate::fresh::applied`]), every 10 ms, at most `within`; then
    /// answers [`Held::Applied`] (`unserved` passed through).
    pub(crate) fn applied(
        &self,
        mut cells: Vec<schemaless::Cell>,
        within: std::time::Duration,
        unserved: Option<String>,
    ) -> tokio::sync::oneshot::Receiver<Held> {
        self.background(move |facade, _, model| async move {
            use crate::fresh::Awaited;
            let tombstones = model.map(|m| m.tombstones.clone()).unwrap_or_default();
            let deadline = tokio::time::Instant::now() + within;
            let mut awaited = Awaited::Applied;
            let ended = |awaited| Held::Applied { awaited, unserved };
            loop {
                let mut kept = Vec::with_capacity(cells.len());
                for cell in cells {
                    let legacy = facade.legacy();
                    // Done with it: there, or parked (it will not come).
                    let done = match crate::fresh::applied(legacy, &tombstones, &cell).await {
                        Ok(false) => crate::fresh::parked(legacy, &cell)
                            .await
                            .map_err(|e| e.to_string())
                            .inspect(|&parked| {
                                if parked {
                                    tracing::warn!(
                                        "proxy: the reverse mirror parked the session's write \
                                         of {} (`mezzanine mirror status` says why): a statement \
                                         is forwarded to PostgreSQL without it",
                                        cell.key
                                    );
                                    awaited = Awaited::Parked;
                                }
                            }),
                        other => other.map_err(|e| e.to_string()),
                    };
                    match done {
                        Ok(true) => {}
                        Ok(false) => kept.push(cell),
                        Err(e) => {
                            tracing::warn!(
                                "proxy: could not tell whether PostgreSQL holds {} yet: {e}",
                                cell.key
                            );
                            return ended(Awaited::Failed);
                        }
                    }
                }
                cells = kept;
                if cells.is_empty() {
                    return ended(awaited);
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(
                        "proxy: a statement is forwarded to PostgreSQL before the reverse mirror \
                         applied the session's write of {} (waited {within:?}): it may not see it",
                        cells[0].key
                    );
                    return ended(Awaited::TimedOut);
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    }

    /// Runs `work` on the facade's runtime with what it needs; what it
    /// comes to arrives on the receiver.
    fn background<F, Fut>(&self, work: F) -> tokio::sync::oneshot::Receiver<Held>
    where
        F: FnOnce(Arc<TripStore>, Arc<query::run::Catalog>, Option<Arc<Model>>) -> Fut,
        Fut: std::future::Future<Output = Held> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let done = work(
            self.facade.clone(),
            self.catalog.clone(),
            self.model.clone(),
        );
        self.runtime.spawn(async move {
            let _ = tx.send(done.await);
        });
        rx
    }
}

/// Reads each of the statement's cell reads from the store that `served`
/// it and offers it to the verifier. How many were offered.
async fn offer(
    facade: &TripStore,
    model: &Model,
    (sql, params, session): (&str, &[String], &AppSession),
    served: Side,
) -> Result<u64, String> {
    let legacy = facade.legacy();
    let eval = session.evaluator(legacy);
    let reads = query::run::cell_reads(eval, model, sql, params)
        .await
        .map_err(|e| e.to_string())?;
    let store: &dyn CellStore = match served {
        Side::Legacy => legacy,
        Side::Schemaless => facade.schemaless_reads(),
    };
    let master = ReadFrom::Master;
    let mut offered = 0;
    for read in reads {
        let failed = |e: schemaless::Error| format!("reading {}: {e}", served.as_str());
        let (read, answer, stale) = match read {
            CellRead::Latest(row, column) => {
                let a = store
                    .get_cell_latest_answer(&row, &column, master)
                    .await
                    .map_err(failed)?;
                (Read::Latest(row, column), Answer::Cell(a.value), a.stale)
            }
            CellRead::Row(row) => {
                let a = store
                    .get_cells_for_row_answer(&row, master)
                    .await
                    .map_err(failed)?;
                (Read::Row(row), Answer::Cells(a.value), a.stale)
            }
            CellRead::Index(query, column) => {
                let column = Column::new(&column).map_err(|e| e.to_string())?;
                let a = store
                    .query_index_answer(&query, master)
                    .await
                    .map_err(failed)?;
                (
                    Read::Index(query, column),
                    Answer::Entries(a.value),
                    a.stale,
                )
            }
        };
        if stale {
            continue;
        }
        facade.sampler().offer(Sample {
            read,
            served,
            answer,
        });
        offered += 1;
    }
    Ok(offered)
}
