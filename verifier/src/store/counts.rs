//! Counts per second and column, and coverage, flushed in one
//! transaction.

use schemaless::retry::Retryable;

use super::*;

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
    let conflict = |e: &Error| {
        matches!(e, Error::Postgres { source, .. }
            if legacy::classify(source) == schemaless::Failure::Conflict)
    };
    (|| flush_once(pool, counts, verified))
        .retry(schemaless::retry::backoff(
            std::time::Duration::from_millis(20),
            std::time::Duration::from_millis(320),
            4,
        ))
        .when(conflict)
        .await
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
