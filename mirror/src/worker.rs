//! What the relay and the reverse mirror share: counters, the heartbeat
//! row each keeps in `mezzanine.mirror_workers`, and the backoff after a
//! failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use schemaless::retry::Pauses;
use sqlx::PgPool;

/// How often a worker writes its heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// Heartbeat rows older than this are removed by the next worker that
/// starts (their worker died without saying goodbye).
const FORGET_AFTER: &str = "1 hour";

/// Counters of one relay or reverse mirror, for metrics and tests.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Cells delivered to the other store (the relay: written to
    /// Schemaless or found there; the reverse mirror: applied to the
    /// legacy tables, superseded ones included).
    pub cells: AtomicU64,
    /// Of those, cells the other store already had (`AlreadyPresent`) or
    /// had a newer version of (`Superseded`).
    pub already_there: AtomicU64,
    /// Transactions that moved cells.
    pub batches: AtomicU64,
    /// Failed attempts (each followed by a backoff and a retry).
    pub failures: AtomicU64,
    /// Entries set aside for good, with their reason.
    pub parked: AtomicU64,
    /// Change-log cells of columns the layout does not map (reverse only).
    pub skipped: AtomicU64,
    /// Captured changes taken from the capture queue (relay only).
    pub captured: AtomicU64,
    /// Tombstones written for deleted legacy rows (relay only).
    pub tombstones: AtomicU64,
    /// Outbox entries written after their key's deletion and deleted
    /// again since in PostgreSQL: dropped, nothing to deliver (relay only).
    pub retired: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl WorkerStats {
    pub(crate) fn add(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self, error: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().expect("stats lock") = Some(error.to_string());
    }

    /// The last failure's message, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().expect("stats lock").clone()
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A worker's name: kind, host, process and a random suffix.
pub fn worker_name(kind: &str) -> String {
    let host = host::name();
    format!(
        "{kind}:{host}:{}:{:04x}",
        std::process::id(),
        uuid::Uuid::new_v4().as_u128() as u16
    )
}

/// Writes a worker's heartbeat row at most every [`HEARTBEAT`].
pub(crate) struct Heartbeat {
    name: String,
    kind: &'static str,
    last: Option<(Instant, u64)>,
}

impl Heartbeat {
    pub(crate) fn new(kind: &'static str) -> Heartbeat {
        Heartbeat {
            name: worker_name(kind),
            kind,
            last: None,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Writes the row if a beat is due. Failures are logged, never fatal:
    /// the heartbeat is for people, the work goes on without it.
    pub(crate) async fn beat(&mut self, pool: &PgPool, stats: &WorkerStats) {
        let now = Instant::now();
        let cells = WorkerStats::get(&stats.cells);
        let rate = match self.last {
            Some((at, _)) if now.duration_since(at) < HEARTBEAT => return,
            Some((at, before)) => {
                cells.saturating_sub(before) as f64 / now.duration_since(at).as_secs_f64()
            }
            None => {
                let forget = format!(
                    "/* mezzanine */ DELETE FROM mezzanine.mirror_workers WHERE heartbeat_at < now() - interval '{FORGET_AFTER}'"
                );
                let _ = sqlx::query(sqlx::AssertSqlSafe(forget)).execute(pool).await;
                0.0
            }
        };
        self.last = Some((now, cells));
        let result = sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.mirror_workers (name, kind, cells, rate, failures, parked, last_error)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (name) DO UPDATE SET heartbeat_at = now(), cells = $3, rate = $4,
                 failures = $5, parked = $6, last_error = $7",
        )
        .bind(&self.name)
        .bind(self.kind)
        .bind(cells as i64)
        .bind(rate)
        .bind(WorkerStats::get(&stats.failures) as i64)
        .bind(WorkerStats::get(&stats.parked) as i64)
        .bind(stats.last_error())
        .execute(pool)
        .await;
        if let Err(e) = result {
            tracing::debug!("{}: heartbeat not written: {e}", self.name);
        }
    }

    /// Removes the row of a worker that stops cleanly.
    pub(crate) async fn retire(&self, pool: &PgPool) {
        let _ = sqlx::query("/* mezzanine */ DELETE FROM mezzanine.mirror_workers WHERE name = $1")
            .bind(&self.name)
            .execute(pool)
            .await;
    }
}

/// The pauses after consecutive failures: from `mirror.retry_backoff_ms`,
/// doubling with jitter, at most `mirror.max_backoff_ms`; short again
/// after a success.
pub(crate) fn pauses(settings: &config::Mirror) -> Pauses {
    Pauses::new(
        Duration::from_millis(settings.retry_backoff_ms),
        Duration::from_millis(settings.max_backoff_ms),
    )
}
