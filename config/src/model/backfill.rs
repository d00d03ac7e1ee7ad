//! `[backfill]`: the chunked copy of the history.

use serde::Deserialize;

/// `[backfill]`: how the history is copied. Every key is also a flag of
/// `mezzanine backfill plan|run`, which overrides it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backfill {
    /// `backfill.chunk_size`: parent ids per chunk (a chunk is read in one
    /// snapshot and written in a few batches; memory per worker follows
    /// it). 1–1000000. Default 1000.
    #[serde(default = "default_chunk_size")]
    pub chunk_size: u64,
    /// `backfill.workers`: chunks copied at once by one process. 1–256.
    /// Default 4.
    #[serde(default = "default_backfill_workers")]
    pub workers: usize,
    /// `backfill.max_rows_per_sec`: legacy rows copied per second by one
    /// process, at most; 0 for no limit. Default 0.
    #[serde(default)]
    pub max_rows_per_sec: u64,
    /// `backfill.max_replication_lag_ms`: workers pause while any minion is
    /// further behind its master than this. 0 turns the check off.
    /// 0–3600000. Default 5000.
    #[serde(default = "default_max_replication_lag_ms")]
    pub max_replication_lag_ms: u64,
    /// `backfill.stale_after_ms`: a running chunk whose owner has not
    /// written a heartbeat for this long is claimed again by another
    /// worker. 100–3600000. Default 30000.
    #[serde(default = "default_stale_after_ms")]
    pub stale_after_ms: u64,
}

impl Default for Backfill {
    fn default() -> Self {
        Backfill {
            chunk_size: default_chunk_size(),
            workers: default_backfill_workers(),
            max_rows_per_sec: 0,
            max_replication_lag_ms: default_max_replication_lag_ms(),
            stale_after_ms: default_stale_after_ms(),
        }
    }
}

fn default_chunk_size() -> u64 {
    1000
}

fn default_backfill_workers() -> usize {
    4
}

fn default_max_replication_lag_ms() -> u64 {
    5000
}

fn default_stale_after_ms() -> u64 {
    30_000
}
