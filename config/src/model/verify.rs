//! `[verify]` and `[gates]`: sampled and full verification, and what the
//! gates of the cutover require.

use serde::Deserialize;

/// `[verify]`: how reads are sampled, replayed and compared. The sample
/// rate and the cap are only the starting values: `mezzanine verify
/// sample` changes them for every running facade.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verify {
    /// `verify.sample_rate`: the share of facade reads (in `mirror`,
    /// `shadow` and `primary`) replayed on the other store. 0.0–1.0.
    /// Default 0.01.
    #[serde(default = "default_sample_rate")]
    pub sample_rate: f64,
    /// `verify.max_samples_per_sec`: at most this many samples per second
    /// per facade, whatever the rate. 1–1000000. Default 500.
    #[serde(default = "default_max_samples_per_sec")]
    pub max_samples_per_sec: u64,
    /// `verify.queue`: samples waiting for replay per facade; a sample
    /// that finds the queue full is dropped and counted. 1–1000000.
    /// Default 1024.
    #[serde(default = "default_verify_queue")]
    pub queue: usize,
    /// `verify.replayers`: replays run at once per facade. 1–64. Default 2.
    #[serde(default = "default_replayers")]
    pub replayers: usize,
    /// `verify.triage_delay_ms`: a difference is read again after this
    /// long (and once the outbox and the reverse mirror have caught up
    /// with its rows) before it is recorded. 0–600000. Default 200.
    #[serde(default = "default_triage_delay_ms")]
    pub triage_delay_ms: u64,
    /// `verify.triage_wait_ms`: how long triage waits at most for
    /// in-flight writes of the rows to land. 0–3600000. Default 5000.
    #[serde(default = "default_triage_wait_ms")]
    pub triage_wait_ms: u64,
    /// `verify.ignore`: what comparisons skip: `"COLUMN"` (a whole
    /// column) or `"COLUMN.field"` (one field of its bodies).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// `verify.tolerance`: `"COLUMN.field" = number`: numbers of that
    /// field that differ by at most this much are equal.
    #[serde(default)]
    pub tolerance: std::collections::BTreeMap<String, f64>,
    /// `verify.chunk_size`: parent ids per chunk of `verify full`.
    /// 1–1000000. Default 1000.
    #[serde(default = "default_verify_chunk_size")]
    pub chunk_size: u64,
    /// `verify.workers`: chunks `verify full` compares at once. 1–256.
    /// Default 4.
    #[serde(default = "default_verify_workers")]
    pub workers: usize,
    /// `verify.stale_after_ms`: a chunk of `verify full` whose worker has
    /// not written a heartbeat for this long (it died) is compared again
    /// by another. 100–3600000. Default 20000.
    #[serde(default = "default_verify_stale_after_ms")]
    pub stale_after_ms: u64,
    /// `verify.strict`: `verify full` also has PostgreSQL read every value
    /// Schemaless holds, cast to its column's type, and compares that with
    /// the column itself, so that a bug in the conversion shows instead of
    /// agreeing with itself. `verify full --strict` turns it on for a run.
    /// Default false.
    #[serde(default)]
    pub strict: bool,
}

impl Default for Verify {
    fn default() -> Self {
        Verify {
            sample_rate: default_sample_rate(),
            max_samples_per_sec: default_max_samples_per_sec(),
            queue: default_verify_queue(),
            replayers: default_replayers(),
            triage_delay_ms: default_triage_delay_ms(),
            triage_wait_ms: default_triage_wait_ms(),
            ignore: Vec::new(),
            tolerance: Default::default(),
            chunk_size: default_verify_chunk_size(),
            workers: default_verify_workers(),
            stale_after_ms: default_verify_stale_after_ms(),
            strict: false,
        }
    }
}

/// `[gates]`: the thresholds of the steps forward.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    /// `gates.max_outbox_lag_ms`: entering `shadow` or `primary` waits
    /// until the oldest outbox entry is younger than this: the relay keeps
    /// up, and what is left is seconds of live writes in flight. 0 demands
    /// an empty outbox (possible only without writes). 0–3600000. Default
    /// 2000.
    #[serde(default = "default_max_outbox_lag_ms")]
    pub max_outbox_lag_ms: u64,
    /// `gates.max_mismatch_upper_bound`: entering `shadow` or `primary`
    /// needs the 95% upper confidence bound of the mismatch rate, over the
    /// samples since the current mode began (and since the backfill
    /// finished), at most this. 0.0–1.0. Default 0.0001.
    #[serde(default = "default_max_mismatch_upper_bound")]
    pub max_mismatch_upper_bound: f64,
    /// `gates.min_samples`: ... and at least this many samples in that
    /// window (the full diff's comparisons count as samples). 0 waives
    /// both sample checks while nothing was sampled. Default 10000.
    #[serde(default = "default_min_samples")]
    pub min_samples: u64,
    /// `gates.min_coverage`: ... and at least this share of parent rows
    /// verified (sampled or fully diffed) since their last write, in every
    /// column. 0.0–1.0. Default 0.0 (not checked).
    #[serde(default)]
    pub min_coverage: f64,
    /// `gates.max_direct_writes`: entering `primary` needs at most this
    /// many writes to layout tables, since the current mode began, by
    /// statements Mezzanine did not send (counted from
    /// `pg_stat_statements`; Mezzanine's own start with `/* mezzanine */`).
    /// In `primary` such a write would land where Schemaless no longer
    /// reads from. Default 0.
    #[serde(default)]
    pub max_direct_writes: u64,
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            max_outbox_lag_ms: default_max_outbox_lag_ms(),
            max_mismatch_upper_bound: default_max_mismatch_upper_bound(),
            min_samples: default_min_samples(),
            min_coverage: 0.0,
            max_direct_writes: 0,
        }
    }
}

fn default_verify_stale_after_ms() -> u64 {
    20_000
}

fn default_sample_rate() -> f64 {
    0.01
}

fn default_max_samples_per_sec() -> u64 {
    500
}

fn default_verify_queue() -> usize {
    1024
}

fn default_replayers() -> usize {
    2
}

fn default_triage_delay_ms() -> u64 {
    200
}

fn default_triage_wait_ms() -> u64 {
    5000
}

fn default_verify_chunk_size() -> u64 {
    1000
}

fn default_verify_workers() -> usize {
    4
}

fn default_max_mismatch_upper_bound() -> f64 {
    0.0001
}

fn default_min_samples() -> u64 {
    10_000
}

fn default_max_outbox_lag_ms() -> u64 {
    2000
}
