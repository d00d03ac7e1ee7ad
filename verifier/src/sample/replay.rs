//! Replay with triage: a sample's read replayed on the other store,
//! compared, and a difference re-read until the stores agree, show the
//! same difference twice with nothing in flight, or stay unsettled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use schemaless::RowKey;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::compare::{Difference, Side, Unit};
use crate::store::{self, Source};

use super::*;

pub(super) async fn dispatch(
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
