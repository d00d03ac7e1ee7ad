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
//! Parameters sent in binary form are read for the types whose binary
//! form is fixed and simple (integers, floats, booleans, UUIDs, text);
//! a statement with any other binary parameter is not sampled (counted
//! as `params_not_read`, as is one with a NULL parameter).

use std::sync::Arc;

use bytes::Bytes;
use query::run::{CellRead, Refused, Serving, Written};
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
}

/// What sampling, serving and writing through the facade need, shared
/// by every session.
pub(crate) struct Sampling {
    facade: Arc<TripStore>,
    model: Option<Arc<Model>>,
    /// Tables' OIDs and columns' attribute numbers and types, for served
    /// reads.
    catalog: Arc<query::run::Catalog>,
    /// The facade's runtime: its pools belong to it, and the relay's
    /// threads stay free of the replay's work.
    runtime: tokio::runtime::Handle,
}

impl Sampling {
    pub(crate) fn new(facade: Arc<TripStore>, model: Option<Arc<Model>>) -> Sampling {
        Sampling {
            facade,
            model,
            catalog: Arc::default(),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    /// Whether to sample the next translatable read: the mode samples and
    /// the sampler's draw says so.
    pub(crate) fn wants(&self) -> bool {
        self.model.is_some() && self.facade.mode().samples() && self.facade.sampler().wants()
    }

    /// Samples `sql` with `params` in the background, as a read `served`
    /// answered.
    pub(crate) fn sample(&self, stats: Arc<Stats>, sql: String, params: Vec<String>, served: Side) {
        let (Some(model), facade) = (self.model.clone(), self.facade.clone()) else {
            return;
        };
        stats.sample(SampleOutcome::Drawn);
        self.runtime.spawn(async move {
            let outcome = match offer(&facade, &model, &sql, &params, served).await {
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
    ) -> tokio::sync::oneshot::Receiver<Held> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (facade, catalog, model) = (
            self.facade.clone(),
            self.catalog.clone(),
            self.model.clone(),
        );
        self.runtime.spawn(async move {
            let Some(model) = model else {
                let _ = tx.send(Held::Read(Serving::Forward("no layout".into())));
                return;
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
            let served = query::run::render_from(
                facade.legacy(),
                facade.schemaless_reads(),
                &catalog,
                &model,
                &sql,
                &params,
                &serves,
            )
            .await;
            let _ = tx.send(Held::Read(served.unwrap_or_else(|e| {
                tracing::warn!("proxy: a read is forwarded, Schemaless did not answer it: {e}");
                Serving::Forward(format!("Schemaless did not answer: {e}"))
            })));
        });
        rx
    }

    /// Runs the translatable write `sql` (its `$n` bound to `params`,
    /// `None` a NULL) through the facade in the background
    /// ([`query::run::write_through`]): the facade routes its cells by the
    /// mode, as it routes an app's `put_cells`. Acknowledged to the app
    /// only once the facade has taken every cell.
    pub(crate) fn write(
        &self,
        sql: String,
        params: Vec<Option<String>>,
    ) -> tokio::sync::oneshot::Receiver<Held> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (facade, catalog, model) = (
            self.facade.clone(),
            self.catalog.clone(),
            self.model.clone(),
        );
        self.runtime.spawn(async move {
            let written = match model {
                Some(model) => {
                    query::run::write_through(
                        facade.legacy(),
                        facade.as_ref(),
                        &catalog,
                        &model,
                        &sql,
                        &params,
                    )
                    .await
                }
                None => Err(Refused {
                    sqlstate: "0A000".into(),
                    message: "no layout".into(),
                }),
            };
            if let Err(e) = &written {
                tracing::debug!("proxy: a write through the facade failed: {e:?}\n  {sql}");
            }
            let _ = tx.send(Held::Write(written));
        });
        rx
    }
}

/// Reads each of the statement's cell reads from the store that `served`
/// it and offers it to the verifier. How many were offered.
async fn offer(
    facade: &TripStore,
    model: &Model,
    sql: &str,
    params: &[String],
    served: Side,
) -> Result<u64, String> {
    let legacy = facade.legacy();
    let reads = query::run::cell_reads(legacy, model, sql, params)
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

/// The parameters of a `Bind` as text, the way `query run` binds them, or
/// `None` when one cannot be read as text (a NULL, or a binary value of a
/// type whose form is not read here). `types` are the `Parse`'s type OIDs
/// (0 or missing: unspecified).
pub(crate) fn params_text(
    types: &[u32],
    formats: &[i16],
    params: &[Option<Bytes>],
) -> Option<Vec<String>> {
    params_nullable(types, formats, params)?
        .into_iter()
        .collect()
}

/// [`params_text`], a NULL read as `None`; `None` when a value cannot be
/// read as text.
pub(crate) fn params_nullable(
    types: &[u32],
    formats: &[i16],
    params: &[Option<Bytes>],
) -> Option<Vec<Option<String>>> {
    params
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let Some(value) = value.as_ref() else {
                return Some(None);
            };
            // One format code applies to all; none means text.
            let format = match formats {
                [] => 0,
                [one] => *one,
                many => *many.get(i)?,
            };
            if format == 0 {
                return String::from_utf8(value.to_vec()).ok().map(Some);
            }
            binary_text(types.get(i).copied().unwrap_or(0), value).map(Some)
        })
        .collect()
}

/// A binary parameter of type `oid` as PostgreSQL's text form.
fn binary_text(oid: u32, value: &[u8]) -> Option<String> {
    let fixed = |n: usize| (value.len() == n).then_some(value);
    Some(match oid {
        16 => (fixed(1)?[0] != 0).to_string(),
        20 => i64::from_be_bytes(fixed(8)?.try_into().ok()?).to_string(),
        21 => i16::from_be_bytes(fixed(2)?.try_into().ok()?).to_string(),
        23 => i32::from_be_bytes(fixed(4)?.try_into().ok()?).to_string(),
        // float4 and float8, exact: Rust prints the shortest text that
        // reads back as the same value, as PostgreSQL does.
        700 => f32::from_be_bytes(fixed(4)?.try_into().ok()?).to_string(),
        701 => f64::from_be_bytes(fixed(8)?.try_into().ok()?).to_string(),
        // text, varchar, bpchar, name: the text itself.
        25 | 1043 | 1042 | 19 => String::from_utf8(value.to_vec()).ok()?,
        2950 => uuid::Uuid::from_slice(value).ok()?.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_parameters_are_taken_as_they_are() {
        let p = [
            Some(Bytes::from_static(b"42")),
            Some(Bytes::from_static(b"x")),
        ];
        assert_eq!(
            params_text(&[], &[], &p),
            Some(vec!["42".into(), "x".into()])
        );
        assert_eq!(
            params_text(&[], &[0], &p),
            Some(vec!["42".into(), "x".into()])
        );
        assert_eq!(
            params_text(&[], &[], &[None]),
            None,
            "NULL is not a literal"
        );
    }

    #[test]
    fn binary_parameters_of_simple_types_read_as_text() {
        let uuid = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1122_3344_5566_7788);
        let p = [
            Some(Bytes::copy_from_slice(uuid.as_bytes())),
            Some(Bytes::copy_from_slice(&(-7_i64).to_be_bytes())),
            Some(Bytes::copy_from_slice(&0.1_f64.to_be_bytes())),
            Some(Bytes::from_static(b"caf\xc3\xa9")),
        ];
        assert_eq!(
            params_text(&[2950, 20, 701, 25], &[1], &p),
            Some(vec![
                uuid.to_string(),
                "-7".into(),
                "0.1".into(),
                "café".into()
            ])
        );
        // Mixed formats, one per parameter.
        let mixed = [Some(Bytes::from_static(b"5")), p[1].clone()];
        assert_eq!(
            params_text(&[0, 20], &[0, 1], &mixed),
            Some(vec!["5".into(), "-7".into()])
        );
    }

    #[test]
    fn binary_parameters_of_other_or_unknown_types_are_not_read() {
        let p = [Some(Bytes::from_static(&[0, 0, 0, 1]))];
        assert_eq!(params_text(&[1700], &[1], &p), None, "numeric");
        assert_eq!(params_text(&[0], &[1], &p), None, "unspecified type");
        assert_eq!(
            params_text(&[23], &[1], &[Some(Bytes::from_static(&[1]))]),
            None,
            "short"
        );
    }
}
