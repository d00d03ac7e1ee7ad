//! The verifier's tables in PostgreSQL (schema `mezzanine`):
//!
//! | table | what |
//! |---|---|
//! | `verify_mismatches` | one row per (row key, column) found different after triage: both values, first and last seen, how often, whether resolved (a later match, a repair) |
//! | `verify_stats` | counts per second (bucket) and column: samples, matches, mismatches, transient differences, unsettled, not yet backfilled, replay errors, dropped samples, replays and their total time |
//! | `verify_coverage` | per (row key, column), the ref key last verified and when: a row is verified "since its last write" while that ref key is still its current one |
//! | `verify_settings` | the sample rate and cap every facade follows (set by `mezzanine verify sample`) |
//! | `verify_runs`, `verify_chunks` | the full diff's runs and their chunks |

use std::collections::HashMap;
use std::time::Instant;

use schemaless::{Column, RowKey};
use serde_json::Value;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::compare::Difference;
use crate::error::Error;

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
        &[
            ("mezzanine.verify_chunks", "strict"),
            ("mezzanine.verify_runs", "columns"),
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
         ALTER TABLE mezzanine.verify_runs ADD COLUMN IF NOT EXISTS columns text[];",
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

/// Takes the buffered writes Schemaless's reconciler recorded as lost (see
/// [`schemaless::mysql::lost`]) into the mismatch store, one open mismatch
/// per (row, column), and marks them taken there. A write acknowledged and
/// then lost is a difference between what a writer was told and what is
/// stored: it blocks the gates until `verify repair` (or a person) settles
/// the (row, column). Masters that do not answer are skipped (their
/// records are taken on a later call). Returns how many were taken.
pub async fn take_buffer_conflicts(
    pool: &PgPool,
    schemaless: &schemaless::MySqlStore,
) -> Result<usize, Error> {
    let (lost, unread) = schemaless::mysql::lost::read(schemaless, true).await;
    for (node, e) in &unread {
        tracing::warn!("lost buffered writes on {node} not read: {e}");
    }
    if lost.is_empty() {
        return Ok(0);
    }
    let json =
        |text: &str| serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.into()));
    let differences: Vec<Difference> = lost
        .iter()
        .map(|l| Difference {
            row_key: l.key.row_key,
            column: l.key.column.clone(),
            legacy: serde_json::json!({
                "lost_buffered_write": {
                    "ref_key": l.key.ref_key.get(),
                    "body": json(&l.buffered_body),
                    "buffered_at_us": l.buffered_at,
                }
            }),
            schemaless: serde_json::json!({
                "ref_key": l.key.ref_key.get(),
                "body": l.stored_body.as_deref().map_or(Value::Null, json),
            }),
        })
        .collect();
    // A lost buffered write is news whenever it is taken: it was never
    // compared before, so no repair can predate it.
    record(
        pool,
        Source::Buffer,
        "buffered_write",
        &differences,
        Instant::now(),
    )
    .await?;
    schemaless::mysql::lost::mark_taken(schemaless, &lost).await?;
    Ok(lost.len())
}

/// Records differences that survived triage: new ones are inserted, known
/// ones (same row key and column) get the new values, `last_seen` and one
/// more occurrence, and are open again if they had been resolved.
///
/// `observed` is when the reads that showed the differences began. A
/// difference resolved after that instant (by `verify repair`, or a later
/// match) is not reopened: what the reads saw may predate the repair, and
/// the repair itself read both sides equal. Without this a replay in
/// flight during a repair (reads before it, recorded after it) reopened
/// the mismatch it had just closed. A divergence that is still there is
/// found again by the next sample or diff, whose reads begin after the
/// repair.
///
/// The instant is turned into the database's clock as "now minus its age"
/// when the statement runs, so the rule compares two readings of
/// PostgreSQL's clock and no host's wall clock has to agree with it.
pub async fn record(
    pool: &PgPool,
    source: Source,
    read_kind: &str,
    differences: &[Difference],
    observed: Instant,
) -> Result<(), Error> {
    if differences.is_empty() {
        return Ok(());
    }
    let rows: Vec<Uuid> = differences.iter().map(|d| d.row_key.uuid()).collect();
    let columns: Vec<String> = differences.iter().map(|d| d.column.to_string()).collect();
    let legacy: Vec<String> = differences.iter().map(|d| d.legacy.to_string()).collect();
    let schemaless: Vec<String> = differences
        .iter()
        .map(|d| d.schemaless.to_string())
        .collect();
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.verify_mismatches AS m
             (row_key, column_name, source, read_kind, legacy_value, schemaless_value,
              first_seen, last_seen)
         SELECT DISTINCT ON (r, c) r, c, $3, $4, l::jsonb, s::jsonb, o.at, o.at
         FROM unnest($1::uuid[], $2::text[], $5::text[], $6::text[]) AS d(r, c, l, s),
              (SELECT clock_timestamp() - make_interval(secs => $7::double precision)) AS o(at)
         ON CONFLICT (row_key, column_name) DO UPDATE SET
             source = excluded.source,
             read_kind = excluded.read_kind,
             legacy_value = excluded.legacy_value,
             schemaless_value = excluded.schemaless_value,
             last_seen = greatest(m.last_seen, excluded.last_seen),
             occurrences = m.occurrences + 1,
             resolved_at = NULL,
             resolution = NULL
         WHERE m.resolved_at IS NULL OR m.resolved_at < excluded.last_seen",
    )
    .bind(&rows)
    .bind(&columns)
    .bind(source.as_str())
    .bind(read_kind)
    .bind(&legacy)
    .bind(&schemaless)
    .bind(observed.elapsed().as_secs_f64())
    .execute(pool)
    .await
    .map_err(Error::postgres("recording mismatches"))?;
    Ok(())
}

/// Counts of one column in one flush (or summed over a window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Comparisons made.
    pub samples: u64,
    /// Of those, equal at once or after triage.
    pub matches: u64,
    /// Different after triage: recorded.
    pub mismatches: u64,
    /// Different at first, equal after triage (writes in flight, lag).
    pub transient: u64,
    /// Still different, with writes of the rows still in flight after
    /// `verify.triage_wait_ms`: not judged.
    pub unsettled: u64,
    /// Missing from Schemaless while the backfill is not finished: not
    /// judged.
    pub pending_backfill: u64,
    /// The other store failed the replay: not judged.
    pub replay_errors: u64,
    /// Samples dropped on a full queue.
    pub dropped: u64,
    /// Replays timed (one per sampled read).
    pub replays: u64,
    /// Their total time, microseconds.
    pub replay_micros: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, other: &Counts) {
        self.samples += other.samples;
        self.matches += other.matches;
        self.mismatches += other.mismatches;
        self.transient += other.transient;
        self.unsettled += other.unsettled;
        self.pending_backfill += other.pending_backfill;
        self.replay_errors += other.replay_errors;
        self.dropped += other.dropped;
        self.replays += other.replays;
        self.replay_micros += other.replay_micros;
    }

    fn is_empty(&self) -> bool {
        *self == Counts::default()
    }
}

/// A (row, column) verified equal: at which ref key, and when (seconds
/// since the epoch).
#[derive(Clone, Debug)]
pub struct Verified {
    /// The row.
    pub row_key: RowKey,
    /// The column.
    pub column: Column,
    /// The ref key compared.
    pub ref_key: i64,
    /// When.
    pub at: f64,
}

/// Adds counts to the current second's bucket, records what was verified
/// (coverage) and resolves open mismatches of those (row, column)s last
/// seen before they were verified equal. One transaction.
pub async fn flush(
    pool: &PgPool,
    counts: &HashMap<String, Counts>,
    verified: &[Verified],
) -> Result<(), Error> {
    // Rows are locked in one order (column, then row key) by every writer,
    // but a deadlock with another kind of writer is still possible: it
    // rolls back and is simply redone.
    let mut attempt = 0;
    loop {
        attempt += 1;
        match flush_once(pool, counts, verified).await {
            Err(Error::Postgres { source, .. })
                if attempt < 5
                    && source
                        .as_database_error()
                        .and_then(|db| db.code())
                        .is_some_and(|code| code == "40P01" || code == "40001") =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(10 << attempt)).await;
            }
            other => return other,
        }
    }
}

async fn flush_once(
    pool: &PgPool,
    counts: &HashMap<String, Counts>,
    verified: &[Verified],
) -> Result<(), Error> {
    let context = "writing the verifier's counts";
    let mut tx = pool.begin().await.map_err(Error::postgres(context))?;
    let mut ordered: Vec<(&String, &Counts)> =
        counts.iter().filter(|(_, c)| !c.is_empty()).collect();
    ordered.sort_by_key(|(column, _)| *column);
    for (column, c) in ordered {
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.verify_stats AS s (bucket, column_name, samples, matches, mismatches,
                 transient, unsettled, pending_backfill, replay_errors, dropped, replays, replay_micros)
             VALUES (date_trunc('second', now()), $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (bucket, column_name) DO UPDATE SET
                 samples = s.samples + excluded.samples,
                 matches = s.matches + excluded.matches,
                 mismatches = s.mismatches + excluded.mismatches,
                 transient = s.transient + excluded.transient,
                 unsettled = s.unsettled + excluded.unsettled,
                 pending_backfill = s.pending_backfill + excluded.pending_backfill,
                 replay_errors = s.replay_errors + excluded.replay_errors,
                 dropped = s.dropped + excluded.dropped,
                 replays = s.replays + excluded.replays,
                 replay_micros = s.replay_micros + excluded.replay_micros",
        )
        .bind(column)
        .bind(c.samples as i64)
        .bind(c.matches as i64)
        .bind(c.mismatches as i64)
        .bind(c.transient as i64)
        .bind(c.unsettled as i64)
        .bind(c.pending_backfill as i64)
        .bind(c.replay_errors as i64)
        .bind(c.dropped as i64)
        .bind(c.replays as i64)
        .bind(c.replay_micros as i64)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    }
    if !verified.is_empty() {
        // One row per key (the newest), or the upsert would touch a row
        // twice.
        let mut newest: std::collections::BTreeMap<(Uuid, &str), &Verified> =
            std::collections::BTreeMap::new();
        for v in verified {
            let slot = newest
                .entry((v.row_key.uuid(), v.column.as_str()))
                .or_insert(v);
            if v.at >= slot.at {
                *slot = v;
            }
        }
        let rows: Vec<Uuid> = newest.keys().map(|k| k.0).collect();
        let columns: Vec<String> = newest.keys().map(|k| k.1.to_string()).collect();
        let ref_keys: Vec<i64> = newest.values().map(|v| v.ref_key).collect();
        let at: Vec<f64> = newest.values().map(|v| v.at).collect();
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.verify_coverage AS v (row_key, column_name, ref_key, verified_at)
             SELECT r, c, k, to_timestamp(t) FROM unnest($1::uuid[], $2::text[], $3::int8[], $4::float8[]) AS x(r, c, k, t)
             ON CONFLICT (row_key, column_name) DO UPDATE SET
                 ref_key = excluded.ref_key, verified_at = excluded.verified_at
             WHERE v.verified_at <= excluded.verified_at",
        )
        .bind(&rows)
        .bind(&columns)
        .bind(&ref_keys)
        .bind(&at)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
        sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.verify_mismatches m SET resolved_at = now(), resolution = 'verified equal'
             FROM unnest($1::uuid[], $2::text[], $3::float8[]) AS x(r, c, t)
             WHERE m.row_key = x.r AND m.column_name = x.c AND m.resolved_at IS NULL
               AND m.last_seen < to_timestamp(x.t)",
        )
        .bind(&rows)
        .bind(&columns)
        .bind(&at)
        .execute(&mut *tx)
        .await
        .map_err(Error::postgres(context))?;
    }
    tx.commit().await.map_err(Error::postgres(context))
}

/// Marks the mismatch of (row, column) resolved.
pub async fn resolve(
    pool: &PgPool,
    row_key: &RowKey,
    column: &Column,
    resolution: &str,
) -> Result<(), Error> {
    sqlx::query(
        "/* mezzanine */ UPDATE mezzanine.verify_mismatches SET resolved_at = now(), resolution = $3
         WHERE row_key = $1 AND column_name = $2 AND resolved_at IS NULL",
    )
    .bind(row_key.uuid())
    .bind(column.as_str())
    .bind(resolution)
    .execute(pool)
    .await
    .map_err(Error::postgres("resolving a mismatch"))?;
    Ok(())
}

/// The sampling settings every facade follows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Share of reads sampled.
    pub sample_rate: f64,
    /// Samples per second per facade, at most.
    pub max_samples_per_sec: u64,
}

/// The stored settings, if `verify sample` ever set them.
pub async fn settings(pool: &PgPool) -> Result<Option<Settings>, Error> {
    let row = sqlx::query(
        "/* mezzanine */ SELECT sample_rate, max_samples_per_sec FROM mezzanine.verify_settings",
    )
    .fetch_optional(pool)
    .await
    .map_err(Error::postgres("reading the sampling settings"))?;
    row.map(|r| {
        Ok(Settings {
            sample_rate: r
                .try_get(0)
                .map_err(Error::postgres("reading the sampling settings"))?,
            max_samples_per_sec: r
                .try_get::<i64, _>(1)
                .map_err(Error::postgres("reading the sampling settings"))?
                as u64,
        })
    })
    .transpose()
}

/// Sets the sampling every facade follows (within a second).
pub async fn set_settings(pool: &PgPool, settings: Settings, by: &str) -> Result<(), Error> {
    if !(0.0..=1.0).contains(&settings.sample_rate) {
        return Err(Error::Refused(format!(
            "the sample rate must be between 0.0 and 1.0, got {}",
            settings.sample_rate
        )));
    }
    if settings.max_samples_per_sec == 0 || settings.max_samples_per_sec > 1_000_000 {
        return Err(Error::Refused(format!(
            "the cap must be between 1 and 1000000 samples per second, got {}",
            settings.max_samples_per_sec
        )));
    }
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.verify_settings (id, sample_rate, max_samples_per_sec, updated_by)
         VALUES (true, $1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET sample_rate = excluded.sample_rate,
             max_samples_per_sec = excluded.max_samples_per_sec,
             updated_at = now(), updated_by = excluded.updated_by",
    )
    .bind(settings.sample_rate)
    .bind(settings.max_samples_per_sec as i64)
    .bind(by)
    .execute(pool)
    .await
    .map_err(Error::postgres("setting the sampling"))?;
    Ok(())
}

/// One recorded mismatch.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Mismatch {
    /// The row key.
    pub row_key: String,
    /// The column.
    pub column: String,
    /// `sample`, `full` or `buffer` (a lost buffered write).
    pub source: String,
    /// The read that found it (`cell`, `latest`, `row`, `index`, `full`).
    pub read_kind: String,
    /// The legacy side's value.
    pub legacy: Value,
    /// Schemaless's value.
    pub schemaless: Value,
    /// First seen, seconds since the epoch.
    pub first_seen: f64,
    /// Last seen.
    pub last_seen: f64,
    /// How often.
    pub occurrences: i64,
    /// When resolved, if it is.
    pub resolved_at: Option<f64>,
    /// How.
    pub resolution: Option<String>,
}

/// Mismatches, newest first: the open ones (or all), of one row key (or
/// all), at most `limit`.
pub async fn mismatches(
    pool: &PgPool,
    open_only: bool,
    row_key: Option<&RowKey>,
    limit: i64,
) -> Result<Vec<Mismatch>, Error> {
    let context = "reading mismatches";
    let rows = sqlx::query(
        "/* mezzanine */ SELECT row_key::text, column_name, source, read_kind, legacy_value::text, schemaless_value::text,
                extract(epoch FROM first_seen)::float8, extract(epoch FROM last_seen)::float8, occurrences,
                extract(epoch FROM resolved_at)::float8, resolution
         FROM mezzanine.verify_mismatches
         WHERE (NOT $1 OR resolved_at IS NULL) AND ($2::uuid IS NULL OR row_key = $2)
         ORDER BY last_seen DESC, row_key, column_name LIMIT $3",
    )
    .bind(open_only)
    .bind(row_key.map(|r| r.uuid()))
    .bind(limit)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    rows.iter()
        .map(|r| {
            let json = |i: usize| -> Result<Value, Error> {
                let text: Option<String> = r.try_get(i).map_err(Error::postgres(context))?;
                Ok(text
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or(Value::Null))
            };
            Ok(Mismatch {
                row_key: r.try_get(0).map_err(Error::postgres(context))?,
                column: r.try_get(1).map_err(Error::postgres(context))?,
                source: r.try_get(2).map_err(Error::postgres(context))?,
                read_kind: r.try_get(3).map_err(Error::postgres(context))?,
                legacy: json(4)?,
                schemaless: json(5)?,
                first_seen: r.try_get(6).map_err(Error::postgres(context))?,
                last_seen: r.try_get(7).map_err(Error::postgres(context))?,
                occurrences: r.try_get(8).map_err(Error::postgres(context))?,
                resolved_at: r.try_get(9).map_err(Error::postgres(context))?,
                resolution: r.try_get(10).map_err(Error::postgres(context))?,
            })
        })
        .collect()
}
