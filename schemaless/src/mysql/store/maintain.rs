//! The store's background work: probes of open breakers, promotions and
//! shard placements re-read, and (if configured) the buffer reconciler.

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::{Inner, MySqlStore};

/// What a store's maintenance task does besides probing.
pub(super) struct Maintenance {
    /// How often promotions are re-read.
    pub(super) refresh: Duration,
    /// How often the buffer reconciler runs, if it runs here.
    pub(super) reconcile: Option<Duration>,
}

/// How often open breakers are checked for a due probe.
const PROBE_TICK: Duration = Duration::from_millis(100);

/// The store's background work, until the store is dropped: probes of
/// open breakers, promotions, and (if configured) the buffer reconciler.
/// It holds the store only while working, so dropping the last clone of
/// the store ends it.
pub(super) async fn maintain(
    inner: Weak<Inner>,
    every: Maintenance,
    stop: tokio_util::sync::CancellationToken,
) {
    // Promotions and placements are first read at the first tick, not a
    // whole period after connecting: a process started after a shard move
    // would otherwise route the shard by config for up to a period.
    let mut refreshed = Instant::now()
        .checked_sub(every.refresh)
        .unwrap_or_else(Instant::now);
    let mut reconciled = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PROBE_TICK) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        let store = MySqlStore { inner };
        for cluster in &store.inner.topology.clusters {
            for node in &cluster.members {
                if node.breaker.start_probe() {
                    let node = node.clone();
                    tokio::spawn(async move {
                        // The probe reports to the breaker itself.
                        let _ = node.probe().await;
                    });
                }
            }
        }
        if refreshed.elapsed() >= every.refresh {
            refreshed = Instant::now();
            crate::mysql::failover::refresh(&store.inner.topology).await;
            crate::mysql::topology::placement::refresh(&store.inner.topology).await;
        }
        if let Some(period) = every.reconcile {
            if reconciled.elapsed() >= period {
                reconciled = Instant::now();
                if let Err(e) = crate::mysql::buffer::reconcile_once(&store).await {
                    tracing::warn!("buffer reconciler: {e}");
                }
            }
        }
    }
}
