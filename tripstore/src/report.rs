//! What every facade tells the guard: its calls, failures and latencies
//! per store, and the storage-node breakers it has open.
//!
//! A facade counts each cell API call by the store that served it, in a
//! latency histogram of fixed buckets (so that histograms of many facades
//! and intervals add up), and every `guard.report_ms` appends what it
//! counted since its last report to `mezzanine.facade_reports`, one row per
//! store. A row is written even without calls: it is the facade's
//! heartbeat, which `status` counts. Rows older than an hour are deleted by
//! the reporters themselves.
//!
//! A failure counts only when the store failed (unreachable, timed out,
//! corrupt data), not when the caller sent bad input or a write conflicts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use schemaless::MySqlStore;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// Latency buckets: bucket `i` holds calls of at most `BASE_MICROS *
/// GROWTH^i` microseconds; the last holds every slower call.
pub const BUCKETS: usize = 48;
const BASE_MICROS: f64 = 100.0;
const GROWTH: f64 = 1.25;

/// The upper bound of bucket `i`, in milliseconds (infinite for the last).
pub fn bucket_bound_ms(i: usize) -> f64 {
    if i + 1 >= BUCKETS {
        f64::INFINITY
    } else {
        BASE_MICROS * GROWTH.powi(i as i32) / 1000.0
    }
}

fn bucket_of(elapsed: Duration) -> usize {
    let micros = elapsed.as_secs_f64() * 1e6;
    if micros <= BASE_MICROS {
        return 0;
    }
    let i = ((micros / BASE_MICROS).ln() / GROWTH.ln()).ceil() as usize;
    i.min(BUCKETS - 1)
}

/// The latency under which `quantile` of the calls of `buckets` finished:
/// the upper bound of the bucket it falls in (`None` without calls).
pub fn quantile_ms(buckets: &[u64], quantile: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let wanted = (total as f64 * quantile).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= wanted {
            return Some(bucket_bound_ms(i));
        }
    }
    Some(f64::INFINITY)
}

/// The stores a call can be served by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// PostgreSQL, through the layout.
    Legacy,
    /// Schemaless.
    Schemaless,
}

impl Served {
    /// `legacy` or `schemaless`, as stored.
    pub fn as_str(&self) -> &'static str {
        match self {
            Served::Legacy => "legacy",
            Served::Schemaless => "schemaless",
        }
    }
}

struct Counts {
    calls: AtomicU64,
    errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Counts {
    fn default() -> Counts {
        Counts {
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Counts {
    /// What was counted since the last take, and zero.
    fn take(&self) -> (u64, u64, Vec<u64>) {
        (
            self.calls.swap(0, Ordering::Relaxed),
            self.errors.swap(0, Ordering::Relaxed),
            self.buckets
                .iter()
                .map(|b| b.swap(0, Ordering::Relaxed))
                .collect(),
        )
    }
}

/// A facade's counts since its last report.
#[derive(Default)]
pub struct CallStats {
    legacy: Counts,
    schemaless: Counts,
}

impl CallStats {
    /// Counts one call served by `store`.
    pub fn record(&self, store: Served, elapsed: Duration, store_failed: bool) {
        let counts = match store {
            Served::Legacy => &self.legacy,
            Served::Schemaless => &self.schemaless,
        };
        counts.calls.fetch_add(1, Ordering::Relaxed);
        if store_failed {
            counts.errors.fetch_add(1, Ordering::Relaxed);
        }
        counts.buckets[bucket_of(elapsed)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether an error of a call is the store's failure (counted against
/// it), not the caller's (bad input, a conflicting write, an unsupported
/// call).
pub fn store_failed(error: &schemaless::Error) -> bool {
    !matches!(
        error,
        schemaless::Error::InvalidInput { .. }
            | schemaless::Error::Conflict { .. }
            | schemaless::Error::NoSuchShard { .. }
            | schemaless::Error::Unsupported { .. }
    )
}

/// Creates the reports table if it is missing.
pub async fn ensure(pool: &PgPool) -> Result<(), Error> {
    let relations = ["mezzanine.facade_reports", "mezzanine.facade_reports_at"];
    if legacy::connection::present(pool, &relations, &[]).await {
        return Ok(());
    }
    let context = "creating the facade reports table";
    sqlx::raw_sql(
        "/* mezzanine */ CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.facade_reports (
             facade text NOT NULL,
             at timestamptz NOT NULL DEFAULT now(),
             mode text NOT NULL,
             store text NOT NULL CHECK (store IN ('legacy', 'schemaless')),
             calls bigint NOT NULL,
             errors bigint NOT NULL,
             buckets bigint[] NOT NULL,
             open_breakers integer NOT NULL);
         CREATE INDEX IF NOT EXISTS facade_reports_at ON mezzanine.facade_reports (at);",
    )
    .execute(pool)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    Ok(())
}

/// Breakers of `store`'s nodes that are open (or half open) now.
pub fn open_breakers(store: &MySqlStore) -> usize {
    store
        .topology()
        .clusters
        .iter()
        .flat_map(|c| c.members.iter())
        .filter(|node| node.breaker.state() != schemaless::mysql::breaker::BreakerState::Closed)
        .count()
}

/// Writes `stats` every `every` until cancelled (and once more then), as
/// facade `name`, with the mode `mode` gives.
pub async fn run(
    pool: PgPool,
    name: String,
    stats: Arc<CallStats>,
    schemaless: MySqlStore,
    mode: tokio::sync::watch::Receiver<crate::Mode>,
    every: Duration,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reports: u64 = 0;
    loop {
        let last = tokio::select! {
            _ = cancel.cancelled() => true,
            _ = tick.tick() => false,
        };
        let current = *mode.borrow();
        if let Err(e) = write(&pool, &name, &stats, &schemaless, current).await {
            tracing::warn!("reporting to the guard: {e}");
        }
        reports += 1;
        // About once a minute, whoever reports clears what is an hour old.
        if reports.is_multiple_of((60_000 / every.as_millis().max(1) as u64).max(1)) {
            let _ = sqlx::query(
                "/* mezzanine */ DELETE FROM mezzanine.facade_reports WHERE at < now() - interval '1 hour'",
            )
            .execute(&pool)
            .await;
        }
        if last {
            return;
        }
    }
}

async fn write(
    pool: &PgPool,
    name: &str,
    stats: &CallStats,
    schemaless: &MySqlStore,
    mode: crate::Mode,
) -> Result<(), sqlx::Error> {
    let breakers = open_breakers(schemaless) as i32;
    let mut rows = Vec::new();
    for (store, counts) in [
        (Served::Legacy, &stats.legacy),
        (Served::Schemaless, &stats.schemaless),
    ] {
        rows.push((store, counts.take()));
    }
    let mut tx = pool.begin().await?;
    for (store, (calls, errors, buckets)) in rows {
        let buckets: Vec<i64> = buckets.into_iter().map(|b| b as i64).collect();
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.facade_reports (facade, mode, store, calls, errors, buckets, open_breakers)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(name)
        .bind(mode.as_str())
        .bind(store.as_str())
        .bind(calls as i64)
        .bind(errors as i64)
        .bind(&buckets)
        .bind(breakers)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// What the facades reported over a window, per store.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Window {
    /// Facades that reported in the window.
    pub facades: u64,
    /// Per store (`legacy`, `schemaless`).
    pub stores: Vec<StoreWindow>,
    /// The most breakers open in one facade's latest report.
    pub open_breakers: u64,
}

/// One store over the window.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreWindow {
    /// `legacy` or `schemaless`.
    pub store: String,
    /// Calls.
    pub calls: u64,
    /// Calls the store failed.
    pub errors: u64,
    /// errors / calls (0 without calls).
    pub error_rate: f64,
    /// The p99 latency, ms (the upper bound of its bucket).
    pub p99_ms: Option<f64>,
}

impl Window {
    /// The figures of `store`, if any facade served it.
    pub fn store(&self, store: Served) -> Option<&StoreWindow> {
        self.stores.iter().find(|s| s.store == store.as_str())
    }
}

/// Sums the reports of the last `window`.
pub async fn window(pool: &PgPool, window: Duration) -> Result<Window, Error> {
    let context = "reading the facade reports";
    let secs = window.as_secs_f64();
    let rows: Vec<(String, i64, i64, Vec<i64>)> = sqlx::query_as(
        "/* mezzanine */ SELECT store, calls, errors, buckets FROM mezzanine.facade_reports
         WHERE at > now() - make_interval(secs => $1)",
    )
    .bind(secs)
    .fetch_all(pool)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    let (facades, open_breakers): (i64, Option<i32>) = sqlx::query_as(
        "/* mezzanine */ SELECT count(*), max(open_breakers) FROM (
             SELECT DISTINCT ON (facade) facade, open_breakers FROM mezzanine.facade_reports
             WHERE at > now() - make_interval(secs => $1)
             ORDER BY facade, at DESC) latest",
    )
    .bind(secs)
    .fetch_one(pool)
    .await
    .map_err(|e| Error::postgres(context, e))?;
    let mut out = Window {
        facades: facades as u64,
        stores: Vec::new(),
        open_breakers: open_breakers.unwrap_or(0).max(0) as u64,
    };
    for store in [Served::Legacy, Served::Schemaless] {
        let mut calls = 0u64;
        let mut errors = 0u64;
        let mut buckets = vec![0u64; BUCKETS];
        for (_, c, e, b) in rows.iter().filter(|r| r.0 == store.as_str()) {
            calls += (*c).max(0) as u64;
            errors += (*e).max(0) as u64;
            for (sum, n) in buckets.iter_mut().zip(b) {
                *sum += (*n).max(0) as u64;
            }
        }
        out.stores.push(StoreWindow {
            store: store.as_str().into(),
            calls,
            errors,
            error_rate: if calls > 0 {
                errors as f64 / calls as f64
            } else {
                0.0
            },
            p99_ms: quantile_ms(&buckets, 0.99),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_grow_by_a_quarter_and_quantiles_take_their_bound() {
        assert_eq!(bucket_of(Duration::from_micros(50)), 0);
        assert_eq!(bucket_of(Duration::from_micros(100)), 0);
        assert_eq!(bucket_of(Duration::from_micros(125)), 1);
        assert_eq!(bucket_of(Duration::from_micros(126)), 2);
        assert_eq!(bucket_of(Duration::from_secs(3600)), BUCKETS - 1);
        // Each call lies within its bucket's bound, above the one before.
        for micros in [150u64, 999, 1_000, 12_345, 250_000, 2_000_000] {
            let d = Duration::from_micros(micros);
            let i = bucket_of(d);
            assert!(
                micros as f64 / 1000.0 <= bucket_bound_ms(i) + 1e-9,
                "{micros}"
            );
            assert!(
                i == 0 || micros as f64 / 1000.0 > bucket_bound_ms(i - 1),
                "{micros}"
            );
        }
        let mut buckets = vec![0u64; BUCKETS];
        buckets[bucket_of(Duration::from_millis(1))] = 99;
        buckets[bucket_of(Duration::from_millis(400))] = 1;
        assert!(quantile_ms(&buckets, 0.99).unwrap() < 1.3);
        buckets[bucket_of(Duration::from_millis(400))] = 2;
        let p99 = quantile_ms(&buckets, 0.99).unwrap();
        assert!((400.0..500.0).contains(&p99), "{p99}");
        assert_eq!(quantile_ms(&[0; BUCKETS], 0.99), None);
    }

    #[test]
    fn only_the_stores_failures_count() {
        assert!(!store_failed(&schemaless::Error::Unsupported {
            operation: "x",
            reason: "y".into()
        }));
        assert!(store_failed(&schemaless::Error::Schema("gone".into())));
    }
}
