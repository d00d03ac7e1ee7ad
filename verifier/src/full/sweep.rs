//! The full diff's other direction: rows only Schemaless has.
//!
//! The chunks walk the legacy ids, so a row PostgreSQL no longer has (a
//! delete capture never saw, a row written to Schemaless alone) is in no
//! chunk. Left unfound, it would come back to the app's reads the day
//! Schemaless serves them. A sweep reads one shard's row keys in key order,
//! a page at a time (on the cell key's index), asks PostgreSQL which of
//! them its parent table has, and compares each row it lacks with
//! Schemaless's visible cells of it (less what tombstones hide: a row
//! deleted in Schemaless too is no difference). What differs is triaged as
//! a chunk's differences are and recorded as the same kind of mismatch
//! (`full`), with nothing on the legacy side; `verify repair` then writes
//! its tombstone.
//!
//! A sweep keeps its place: after each page (its mismatches recorded
//! first), the chunk's row holds the last row key swept and the counts so
//! far. A worker killed mid-sweep leaves that behind, and the worker that
//! takes the chunk over goes on from it instead of reading the shard
//! again from its first key. A page swept twice (a crash between its
//! mismatches and its place) records the same mismatches again, which
//! replaces them.

use super::*;

/// Row keys read per page of a sweep, unless [`FullDiff::sweep_page`]
/// says otherwise.
pub const PAGE: usize = 1000;

/// What one shard's sweep found.
#[derive(Debug, Default)]
pub struct Swept {
    /// Its mismatches, as a chunk's.
    pub checked: Checked,
    /// Row keys read, counting those a worker before this one read.
    pub rows: u64,
    /// Mismatches found, counting those a worker before this one found.
    pub mismatches: u64,
}

/// Where a sweep stands: the last row key swept (and its mismatches
/// recorded), and the counts so far. Kept in the chunk's row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub after: Option<RowKey>,
    pub rows: u64,
    pub mismatches: u64,
}

impl FullDiff {
    /// Sweeps `shard` for rows only Schemaless has, comparing `columns`
    /// (`None`: all), from `place` on; records what differs after triage,
    /// and the new place after each page in chunk `chunk` (run, start id).
    pub async fn sweep(
        &self,
        shard: u32,
        columns: Option<&BTreeSet<String>>,
        chunk: (i64, i64),
        place: Place,
    ) -> Result<Swept, Error> {
        let mut swept = Swept {
            rows: place.rows,
            mismatches: place.mismatches,
            ..Swept::default()
        };
        let mut after = place.after;
        let page = self.sweep_page.max(1);
        loop {
            let observed = std::time::Instant::now();
            let keys = self
                .schemaless
                .shard_row_keys(shard, after.as_ref(), page, ReadFrom::Master)
                .await?;
            swept.rows += keys.len() as u64;
            let Some(last) = keys.last().copied() else {
                break;
            };
            after = Some(last);
            let existing = self.legacy.existing_row_keys(&keys).await?;
            let missing: BTreeMap<RowKey, Vec<Cell>> = keys
                .iter()
                .filter(|k| !existing.contains(k))
                .map(|k| (*k, Vec::new()))
                .collect();
            if !missing.is_empty() {
                let rows: Vec<RowKey> = missing.keys().copied().collect();
                let stored = self.schemaless_cells(&rows).await?;
                let first: Vec<Difference> = self
                    .compare(&missing, &stored, columns)
                    .into_iter()
                    .filter_map(|u| u.difference)
                    .collect();
                if !first.is_empty() {
                    let found = self.triage(first, columns).await?.mismatches;
                    let mut counts: HashMap<String, Counts> = HashMap::new();
                    for d in &found {
                        let c = counts.entry(d.column.to_string()).or_default();
                        c.samples += 1;
                        c.mismatches += 1;
                    }
                    store::record(&self.pool, Source::Full, "full", &found, observed).await?;
                    store::flush(&self.pool, &counts, &[]).await?;
                    swept.mismatches += found.len() as u64;
                    swept.checked.mismatches.extend(found);
                }
            }
            let now = Place {
                after,
                rows: swept.rows,
                mismatches: swept.mismatches,
            };
            self.keep_place(chunk, now).await?;
            if keys.len() < page {
                break;
            }
        }
        Ok(swept)
    }

    /// Writes where chunk `(run, start id)`'s sweep stands, while it is
    /// still running (a chunk another worker finished is left alone).
    async fn keep_place(&self, (run, start): (i64, i64), place: Place) -> Result<(), Error> {
        sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.verify_chunks SET sweep_after = $3, swept = $4, mismatches = $5
             WHERE run = $1 AND start_id = $2 AND state = 'running'",
        )
        .bind(run)
        .bind(start)
        .bind(place.after.map(|k| k.uuid()))
        .bind(place.rows as i64)
        .bind(place.mismatches as i64)
        .execute(&self.pool)
        .await
        .map_err(Error::postgres("keeping a sweep's place"))?;
        Ok(())
    }

    /// Where chunk `(run, start id)`'s sweep stands, as a worker before
    /// this one left it (nothing swept yet: the default).
    pub(super) async fn place(&self, (run, start): (i64, i64)) -> Result<Place, Error> {
        let row: Option<(Option<uuid::Uuid>, i64, i64)> = sqlx::query_as(
            "/* mezzanine */ SELECT sweep_after, swept, mismatches FROM mezzanine.verify_chunks
             WHERE run = $1 AND start_id = $2",
        )
        .bind(run)
        .bind(start)
        .fetch_optional(&self.pool)
        .await
        .map_err(Error::postgres("reading a sweep's place"))?;
        Ok(match row {
            Some((Some(after), rows, mismatches)) => Place {
                after: Some(RowKey::from(after)),
                rows: rows.max(0) as u64,
                mismatches: mismatches.max(0) as u64,
            },
            _ => Place::default(),
        })
    }
}
