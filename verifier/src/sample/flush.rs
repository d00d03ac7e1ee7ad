//! The flush loop: counts, coverage and resolutions written every
//! [`FLUSH_EVERY`] in one transaction, picking up the sampling settings.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{self};

use super::*;

/// How often counts and coverage are written: small batches often rather
/// than a burst of PostgreSQL work once a second.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Flushes between two reads of the stored settings (one a second).
const SETTINGS_EVERY: u32 = 4;

/// Writes the tally every [`FLUSH_EVERY`], and follows the stored
/// settings.
pub(super) async fn flush_loop(
    replayer: Arc<Replayer>,
    sampler: Sampler,
    cancel: CancellationToken,
) {
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
