//! Copying one claimed chunk: the legacy scan, cells grouped by shard and
//! written to Schemaless, conflicts recorded, the chunk marked done.

use super::*;

impl Backfill {
    /// Reads the chunk in one snapshot, writes its cells grouped by shard,
    /// and marks it done (or failed, naming what could not be copied).
    pub(super) async fn copy(&self, chunk: &Claimed) -> Result<(), Error> {
        let filter = self.filter.lock().expect("filter lock").clone();
        let scanned = self
            .legacy
            .scan_filtered(chunk.start..chunk.end, &filter)
            .await?;
        let rows = scanned.cells.len() as u64 + scanned.unreadable.len() as u64;
        self.throttle.acquire(rows).await;
        // A cell too large for Schemaless cannot be copied however often
        // the chunk is tried: it is reported with its row, once, and the
        // rest of the chunk is copied.
        // Each body is measured once (its JSON length is a walk of the
        // value), and the cells move into their batches, not copied.
        let shard_count = self.schemaless.shard_count();
        let mut cells: Vec<(u32, usize, Cell)> = Vec::with_capacity(scanned.cells.len());
        let mut oversized: Vec<(usize, Cell)> = Vec::new();
        for cell in scanned.cells {
            let len = cell.body.json_len();
            if len > self.limits.max_body_bytes {
                oversized.push((len, cell));
            } else {
                cells.push((routing::shard_of(&cell.key.row_key, shard_count), len, cell));
            }
        }
        cells.sort_by_key(|(shard, ..)| *shard);
        let copied = cells.len() as u64;
        let sizes =
            schemaless::cell::batch_sizes(cells.iter().map(|(_, len, _)| *len), &self.limits);
        let mut cells = cells.into_iter().map(|(.., cell)| cell);
        let mut written = 0u64;
        let mut conflicts: Vec<String> = Vec::new();
        for size in sizes {
            let batch: Vec<Cell> = cells.by_ref().take(size).collect();
            let keys: Vec<CellKey> = batch.iter().map(|c| c.key.clone()).collect();
            let results = self.schemaless.put_cells(batch).await?;
            for (key, result) in keys.iter().zip(results) {
                match result {
                    Ok(WriteOutcome::Written) => written += 1,
                    Ok(_) => {}
                    Err(_) => conflicts.push(key.to_string()),
                }
            }
        }
        let progress = &self.progress;
        Progress::add(&progress.parents, scanned.parents);
        Progress::add(&progress.rows, rows);
        Progress::add(&progress.cells, copied);
        Progress::add(&progress.written, written);
        let mut problems = Vec::new();
        if !scanned.unreadable.is_empty() {
            let first: Vec<String> = scanned
                .unreadable
                .iter()
                .take(3)
                .map(|e| e.to_string())
                .collect();
            problems.push(format!(
                "{} rows cannot be converted through the layout: {}",
                scanned.unreadable.len(),
                first.join("; ")
            ));
        }
        if !oversized.is_empty() {
            let first: Vec<String> = oversized
                .iter()
                .take(3)
                .map(|(len, c)| {
                    format!(
                        "row {} column {} is {len} bytes",
                        c.key.row_key, c.key.column
                    )
                })
                .collect();
            problems.push(format!(
                "{} cells are over limits.max_body_bytes = {}: {}",
                oversized.len(),
                self.limits.max_body_bytes,
                first.join("; ")
            ));
        }
        if !conflicts.is_empty() {
            problems.push(format!(
                "{} cells conflict with different bodies already in Schemaless: {}",
                conflicts.len(),
                conflicts
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let (state, error) = if problems.is_empty() {
            Progress::add(&progress.chunks_done, 1);
            ("done", None)
        } else {
            Progress::add(&progress.chunks_failed, 1);
            tracing::warn!(
                "chunk {} (ids {}..{}) failed: {}",
                chunk.id,
                chunk.start,
                chunk.end,
                problems.join("; ")
            );
            ("failed", Some(problems.join("; ")))
        };
        let done = sqlx::query(
            "/* mezzanine */ UPDATE mezzanine.backfill_chunks
             SET state = $3, error = $4, parents = $5, cells = $6, written = $7,
                 done_at = now(), heartbeat_at = now()
             WHERE id = $1 AND owner = $2 AND state = 'running'",
        )
        .bind(chunk.id)
        .bind(&self.owner)
        .bind(state)
        .bind(error)
        .bind(scanned.parents as i64)
        .bind(copied as i64)
        .bind(written as i64)
        .execute(self.pool())
        .await
        .map_err(Error::postgres("finishing a backfill chunk"))?;
        if done.rows_affected() == 0 {
            // Another worker took it over meanwhile (this one was silent
            // for too long); it copies the same cells again, harmlessly.
            tracing::warn!(
                "{}: chunk {} was reclaimed while it was being copied",
                self.owner,
                chunk.id
            );
        }
        Ok(())
    }
}
