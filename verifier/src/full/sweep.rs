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

use super::*;

/// Row keys read per page of a sweep.
const PAGE: usize = 1000;

/// What one shard's sweep found.
#[derive(Debug, Default)]
pub struct Swept {
    /// Its mismatches, as a chunk's.
    pub checked: Checked,
    /// Row keys read.
    pub rows: u64,
}

impl FullDiff {
    /// Sweeps `shard` for rows only Schemaless has, comparing `columns`
    /// (`None`: all); records what differs after triage.
    pub async fn sweep(
        &self,
        shard: u32,
        columns: Option<&BTreeSet<String>>,
    ) -> Result<Swept, Error> {
        let mut swept = Swept::default();
        let mut after: Option<RowKey> = None;
        loop {
            let observed = std::time::Instant::now();
            let keys = self
                .schemaless
                .shard_row_keys(shard, after.as_ref(), PAGE, ReadFrom::Master)
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
                    swept.checked.mismatches.extend(found);
                }
            }
            if keys.len() < PAGE {
                break;
            }
        }
        Ok(swept)
    }
}
