//! The figures of the mirror and the backfill, recorded through the
//! `metrics` crate so that `/metrics` (rendered by
//! `metrics-exporter-prometheus`, see [`worker::metrics`]) shows them
//! beside every other metric of the process: breakers, buffers, the
//! verifier's facades, a worker's requests. Gauges read from PostgreSQL
//! are set just before each scrape; counters of this process's workers
//! are copied from their running totals.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `mezzanine_mode{mode}` | gauge | 1 for the current mode |
//! | `mezzanine_outbox_depth` | gauge | entries waiting in the outbox |
//! | `mezzanine_outbox_oldest_age_seconds` | gauge | age of the oldest waiting entry (0 when empty) |
//! | `mezzanine_outbox_parked` | gauge | outbox entries set aside |
//! | `mezzanine_capture_queue_depth` | gauge | captured changes waiting for the relay |
//! | `mezzanine_capture_oldest_age_seconds` | gauge | age of the oldest (0 when empty) |
//! | `mezzanine_capture_parked{kind}` | gauge | captured changes set aside, by kind |
//! | `mezzanine_capture_slot_retained_bytes` | gauge | WAL the logical capture slot holds (0 without one) |
//! | `mezzanine_mirror_workers{kind}` | gauge | live relays / reverse mirrors (heartbeat within 10 s) |
//! | `mezzanine_mirror_rate_cells_per_second{kind}` | gauge | cells/s over all live workers of the kind |
//! | `mezzanine_reverse_lag_cells{shard}` | gauge | change-log cells not yet applied to PostgreSQL |
//! | `mezzanine_reverse_parked` | gauge | change-log cells the legacy model refused |
//! | `mezzanine_relay_cells_total` | counter | cells this process's relay delivered |
//! | `mezzanine_relay_failures_total` | counter | failed relay attempts in this process |
//! | `mezzanine_relay_retired_total` | counter | outbox entries this process's relay dropped: written after their key's deletion, deleted again since |
//! | `mezzanine_capture_changes_total` | counter | captured changes this process's relay took from the queue |
//! | `mezzanine_capture_tombstones_total` | counter | tombstones this process's relay wrote for deleted rows |
//! | `mezzanine_reverse_cells_total` | counter | cells this process's reverse mirror applied |
//! | `mezzanine_reverse_failures_total` | counter | failed reverse attempts in this process |
//! | `mezzanine_backfill_chunks{state}` | gauge | chunks pending, running, done, failed |
//! | `mezzanine_backfill_cells_done` | gauge | cells of done chunks (whole plan) |
//! | `mezzanine_backfill_cells_per_second` | gauge | over chunks finished in the last minute (whole plan) |
//! | `mezzanine_backfill_rows_total` | counter | legacy rows this process read |
//! | `mezzanine_backfill_cells_total` | counter | cells this process wrote |
//! | `mezzanine_backfill_failures_total` | counter | attempts that failed on a server in this process |
//! | `mezzanine_backfill_lag_pauses_total` | counter | pauses for replication lag in this process |

use std::net::SocketAddr;
use std::sync::Arc;

use mirror::{MirrorStatus, WorkerStats};
use tokio_util::sync::CancellationToken;
use worker::metrics::Refresh;

/// Every kind a captured change is parked as (see
/// [`mirror::capture::deliver`]), each exported even at 0.
pub const CAPTURE_PARKED_KINDS: [&str; 6] = [
    "no_new_version",
    "edited_in_place",
    "unreadable",
    "refused",
    "truncate",
    "conflict",
];

/// The counters of this process's workers.
#[derive(Default, Clone)]
pub struct Local {
    pub relay: Option<Arc<WorkerStats>>,
    pub reverse: Option<Arc<WorkerStats>>,
}

/// Sets the mode gauge.
pub fn record_mode(mode: tripstore::Mode) {
    for m in tripstore::Mode::ALL {
        metrics::gauge!("mezzanine_mode", "mode" => m.as_str()).set(f64::from(u8::from(m == mode)));
    }
}

/// Records the mirror's figures and this process's workers' counters.
pub fn record_mirror(status: &MirrorStatus, mode: Option<tripstore::Mode>, local: &Local) {
    if let Some(mode) = mode {
        record_mode(mode);
    }
    metrics::gauge!("mezzanine_outbox_depth").set(status.outbox_depth as f64);
    metrics::gauge!("mezzanine_outbox_oldest_age_seconds")
        .set(status.outbox_oldest_secs.unwrap_or(0.0));
    metrics::gauge!("mezzanine_outbox_parked").set(status.outbox_parked as f64);
    let capture = &status.capture;
    metrics::gauge!("mezzanine_capture_queue_depth").set(capture.depth as f64);
    metrics::gauge!("mezzanine_capture_oldest_age_seconds").set(capture.oldest_secs.unwrap_or(0.0));
    metrics::gauge!("mezzanine_capture_slot_retained_bytes")
        .set(capture.slot.as_ref().map_or(0, |s| s.retained_bytes) as f64);
    for kind in CAPTURE_PARKED_KINDS {
        metrics::gauge!("mezzanine_capture_parked", "kind" => kind)
            .set(capture.parked_by_kind.get(kind).copied().unwrap_or(0) as f64);
    }
    for kind in ["relay", "reverse"] {
        let live: Vec<_> = status
            .workers
            .iter()
            .filter(|w| w.kind == kind && !w.stale())
            .collect();
        let rate: f64 = live.iter().map(|w| w.rate).sum();
        metrics::gauge!("mezzanine_mirror_workers", "kind" => kind).set(live.len() as f64);
        metrics::gauge!("mezzanine_mirror_rate_cells_per_second", "kind" => kind).set(rate);
    }
    for shard in &status.reverse {
        metrics::gauge!("mezzanine_reverse_lag_cells", "shard" => shard.shard.to_string())
            .set(shard.lag as f64);
    }
    metrics::gauge!("mezzanine_reverse_parked").set(status.reverse_parked as f64);
    if let Some(stats) = &local.relay {
        metrics::counter!("mezzanine_capture_changes_total")
            .absolute(WorkerStats::get(&stats.captured));
        metrics::counter!("mezzanine_capture_tombstones_total")
            .absolute(WorkerStats::get(&stats.tombstones));
        metrics::counter!("mezzanine_relay_retired_total")
            .absolute(WorkerStats::get(&stats.retired));
    }
    for (kind, stats) in [("relay", &local.relay), ("reverse", &local.reverse)] {
        let Some(stats) = stats else { continue };
        metrics::counter!(format!("mezzanine_{kind}_cells_total"))
            .absolute(WorkerStats::get(&stats.cells));
        metrics::counter!(format!("mezzanine_{kind}_failures_total"))
            .absolute(WorkerStats::get(&stats.failures));
    }
}

/// Records the backfill's figures: the plan's state, and this process's
/// counters when it runs workers.
pub fn record_backfill(status: &backfill::PlanStatus, local: Option<&backfill::Progress>) {
    use backfill::Progress;
    for (state, n) in [
        ("pending", status.pending),
        ("running", status.running),
        ("done", status.done),
        ("failed", status.failed),
    ] {
        metrics::gauge!("mezzanine_backfill_chunks", "state" => state).set(n as f64);
    }
    metrics::gauge!("mezzanine_backfill_cells_done").set(status.cells_done as f64);
    metrics::gauge!("mezzanine_backfill_cells_per_second").set(status.recent_cells_per_sec);
    if let Some(p) = local {
        for (name, value) in [
            ("rows_total", &p.rows),
            ("cells_total", &p.cells),
            ("failures_total", &p.failures),
            ("lag_pauses_total", &p.lag_pauses),
        ] {
            metrics::counter!(format!("mezzanine_backfill_{name}")).absolute(Progress::get(value));
        }
    }
}

/// Everything the process has recorded, as Prometheus text.
pub fn render() -> String {
    worker::metrics::install().render()
}

/// Serves `GET /metrics` on `addr` until `cancel`, `refresh` setting the
/// gauges read from the databases before each scrape.
pub async fn serve(
    addr: SocketAddr,
    refresh: Refresh,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let router = worker::metrics::router(Some(refresh));
    let served = worker::stack::serve(router, &worker::Listen::plain(addr), cancel).await?;
    eprintln!("metrics on http://{}/metrics", served.addr);
    Ok(())
}
