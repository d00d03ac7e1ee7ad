//! The verifier's tables in PostgreSQL (schema `mezzanine`):
//!
//! | table | what |
//! |---|---|
//! | `verify_mismatches` | one row per (row key, column) found different after triage: both values, first and last seen, how often, whether resolved (a later match, a repair) |
//! | `verify_stats` | counts per second (bucket) and column: samples, matches, mismatches, transient differences, unsettled, not yet backfilled, replay errors, dropped samples, replays and their total time |
//! | `verify_coverage` | per (row key, column), the ref key last verified and when: a row is verified "since its last write" while that ref key is still its current one |
//! | `verify_settings` | the sample rate and cap every facade follows (set by `mezzanine verify sample`) |
//! | `verify_runs`, `verify_chunks` | the full diff's runs and their chunks |
//!
//! Its rooms: `mismatches`, `counts` (with coverage), `settings`; this
//! file creates the tables. The full diff's tables are [`crate::full`]'s.

use std::collections::HashMap;
use std::time::Instant;

use schemaless::{Column, RowKey};
use serde_json::Value;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::compare::Difference;
use crate::error::Error;

mod counts;
mod mismatches;
mod settings;

pub use counts::{flush, Counts, Verified};
pub use mismatches::{
    mismatches, open_seen_within, record, resolve, take_buffer_conflicts, Mismatch,
};
pub use settings::{forget_settings, set_settings, settings, Settings};

/// Creates the verifier's tables if they are missing.
pub async fn ensure(pool: &PgPool) -> Result<(), Error> {
    let everything = legacy::connection::present(
        pool,
        &[
            "mezzanine.verify_mismatches",
            "mezzanine.verify_mismatches_open",
            "mezzanine.verify_stats",
            "mezzanine.verify_coverage",
            "mezzanine.verify_settings",
            "mezzanine.verify_runs",
            "mezzanine.verify_chunks",
        ],
        // The columns added since the tables were first made: an older
        // installation gets them below.
        &[
            ("mezzanine.verify_chunks", "strict"),
            ("mezzanine.verify_runs", "columns"),
            ("mezzanine.verify_chunks", "shard"),
            ("mezzanine.verify_chunks", "swept"),
            ("mezzanine.verify_chunks", "sweep_after"),
        ],
    );
    if everything.await {
        return Ok(());
    }
    let context = "creating the verifier's tables";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    sqlx::raw_sql(
        "/* mezzanine */ SELECT pg_advisory_xact_lock(7415262544);
         CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.verify_mismatches (
             row_key uuid NOT NULL,
             column_name text NOT NULL,
             source text NOT NULL,
             read_kind text NOT NULL,
             legacy_value jsonb,
             schemaless_value jsonb,
             first_seen timestamptz NOT NULL DEFAULT now(),
             last_seen timestamptz NOT NULL DEFAULT now(),
             occurrences bigint NOT NULL DEFAULT 1,
             resolved_at timestamptz,
             resolution text,
             PRIMARY KEY (row_key, column_name));
         CREATE INDEX IF NOT EXISTS verify_mismatches_open
             ON mezzanine.verify_mismatches (last_seen) WHERE resolved_at IS NULL;
         CREATE TABLE IF NOT EXISTS mezzanine.verify_stats (
             bucket timestamptz NOT NULL,
             column_name text NOT NULL,
             samples bigint NOT NULL DEFAULT 0,
             matches bigint NOT NULL DEFAULT 0,
             mismatches bigint NOT NULL DEFAULT 0,
             transient bigint NOT NULL DEFAULT 0,
             unsettled bigint NOT NULL DEFAULT 0,
             pending_backfill bigint NOT NULL DEFAULT 0,
             replay_errors bigint NOT NULL DEFAULT 0,
             dropped bigint NOT NULL DEFAULT 0,
             replays bigint NOT NULL DEFAULT 0,
             replay_micros bigint NOT NULL DEFAULT 0,
             PRIMARY KEY (bucket, column_name));
         CREATE TABLE IF NOT EXISTS mezzanine.verify_coverage (
             row_key uuid NOT NULL,
             column_name text NOT NULL,
             ref_key bigint NOT NULL,
             verified_at timestamptz NOT NULL,
             PRIMARY KEY (row_key, column_name));
         CREATE TABLE IF NOT EXISTS mezzanine.verify_settings (
             id boolean PRIMARY KEY DEFAULT true CHECK (id),
             sample_rate double precision NOT NULL CHECK (sample_rate BETWEEN 0 AND 1),
             max_samples_per_sec bigint NOT NULL CHECK (max_samples_per_sec > 0),
             updated_at timestamptz NOT NULL DEFAULT now(),
             updated_by text NOT NULL);
         CREATE TABLE IF NOT EXISTS mezzanine.verify_runs (
             id bigserial PRIMARY KEY,
             chunk_size bigint NOT NULL,
             low_id bigint NOT NULL,
             high_id bigint NOT NULL,
             started_at timestamptz NOT NULL DEFAULT now(),
             finished_at timestamptz);
         CREATE TABLE IF NOT EXISTS mezzanine.verify_chunks (
             run bigint NOT NULL REFERENCES mezzanine.verify_runs (id) ON DELETE CASCADE,
             start_id bigint NOT NULL,
             end_id bigint NOT NULL,
             state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done')),
             claimed_at timestamptz,
             parents bigint NOT NULL DEFAULT 0,
             cells bigint NOT NULL DEFAULT 0,
             mismatches bigint NOT NULL DEFAULT 0,
             sample_row_keys uuid[] NOT NULL DEFAULT '{}',
             done_at timestamptz,
             PRIMARY KEY (run, start_id));
         ALTER TABLE mezzanine.verify_chunks ADD COLUMN IF NOT EXISTS strict boolean NOT NULL DEFAULT false;
         ALTER TABLE mezzanine.verify_runs ADD COLUMN IF NOT EXISTS columns text[];
         ALTER TABLE mezzanine.verify_chunks ADD COLUMN IF NOT EXISTS shard int;
         ALTER TABLE mezzanine.verify_chunks ADD COLUMN IF NOT EXISTS swept bigint NOT NULL DEFAULT 0;
         ALTER TABLE mezzanine.verify_chunks ADD COLUMN IF NOT EXISTS sweep_after uuid;",
    )
    .execute(&mut *tx)
    .await
    .map_err(Error::postgres(context))?;
    tx.commit().await.map_err(Error::postgres(context))
}

/// Where a mismatch was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A sampled read, replayed.
    Sample,
    /// `verify full`.
    Full,
    /// A buffered write the reconciler found lost to another body
    /// (`<instance>_meta.buffer_conflicts`).
    Buffer,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Sample => "sample",
            Source::Full => "full",
            Source::Buffer => "buffer",
        }
    }
}

/// Starts verification afresh: mismatches, counts, coverage, full-diff
/// runs and stored settings are all forgotten (a demo or a rehearsal
/// that starts over; nothing a running migration should call).
pub async fn reset(pool: &PgPool) -> Result<(), Error> {
    sqlx::raw_sql(
        "TRUNCATE mezzanine.verify_mismatches, mezzanine.verify_stats, mezzanine.verify_coverage,
                  mezzanine.verify_runs CASCADE;
         DELETE FROM mezzanine.verify_settings",
    )
    .execute(pool)
    .await
    .map(|_| ())
    .map_err(Error::postgres("starting verification afresh"))
}
