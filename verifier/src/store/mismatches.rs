//! Mismatches: recorded after triage, resolved by a later match or a
//! repair, listed; and buffered writes that lost, taken in as mismatches.

use super::*;

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
/// The instant is turned into the database's clock as "its clock minus the
/// instant's age", so the rule compares two readings of PostgreSQL's clock
/// and no host's wall clock has to agree with it. The clock is read first,
/// on the connection that then records, and the age is taken after that
/// answer arrived: the stamp can only come out earlier than the reads
/// began, never later. (Taking the age before sending one statement that
/// reads the clock erred the other way by however long the statement
/// waited for a connection or a core, and a replay recorded late under
/// load reopened the mismatch a repair had just closed.)
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
    let context = "recording mismatches";
    let mut connection = pool.acquire().await.map_err(Error::postgres(context))?;
    let clock: String = sqlx::query_scalar("/* mezzanine */ SELECT clock_timestamp()::text")
        .fetch_one(&mut *connection)
        .await
        .map_err(Error::postgres(context))?;
    let age = observed.elapsed().as_secs_f64();
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.verify_mismatches AS m
             (row_key, column_name, source, read_kind, legacy_value, schemaless_value,
              first_seen, last_seen)
         SELECT DISTINCT ON (r, c) r, c, $3, $4, l::jsonb, s::jsonb, o.at, o.at
         FROM unnest($1::uuid[], $2::text[], $5::text[], $6::text[]) AS d(r, c, l, s),
              (SELECT $7::timestamptz - make_interval(secs => $8::double precision)) AS o(at)
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
    .bind(&clock)
    .bind(age)
    .execute(&mut *connection)
    .await
    .map_err(Error::postgres(context))?;
    Ok(())
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

/// How many mismatches are open and were last seen within `span`: the
/// guard's "new mismatches" over its window.
pub async fn open_seen_within(pool: &PgPool, span: std::time::Duration) -> Result<i64, Error> {
    sqlx::query_scalar(
        "/* mezzanine */ SELECT count(*) FROM mezzanine.verify_mismatches
         WHERE resolved_at IS NULL AND last_seen > now() - make_interval(secs => $1)",
    )
    .bind(span.as_secs_f64())
    .fetch_one(pool)
    .await
    .map_err(Error::postgres("counting the mismatches seen lately"))
}
