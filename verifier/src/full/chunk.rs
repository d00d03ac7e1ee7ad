//! Comparing one chunk: the legacy scan against every stored cell of
//! those rows, per column, with triage before anything is recorded.

use super::*;

/// What one chunk's comparison found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Parent rows compared.
    pub parents: u64,
    /// Legacy cells compared.
    pub cells: u64,
    /// Whether the strict check ran on it.
    pub strict: bool,
    /// What was recorded.
    pub mismatches: Vec<Difference>,
}

/// What triage made of a chunk's differences.
#[derive(Default)]
pub(super) struct Triaged {
    /// Differences seen the same twice, with nothing in flight.
    pub mismatches: Vec<Difference>,
    /// (row, column)s that agree when read again.
    pub equal: Vec<Unit>,
    /// Schemaless's cells behind `equal`.
    pub equal_cells: Vec<Cell>,
}

/// How many times a difference is read again before it is left
/// unjudged.
const TRIAGE_ROUNDS: usize = 5;

impl FullDiff {
    /// Compares the parents with ids in `ids`; records what differs after
    /// triage and what was verified.
    pub async fn check(&self, ids: std::ops::Range<i64>) -> Result<Checked, Error> {
        self.check_columns(ids, None).await
    }

    /// [`FullDiff::check`] of `columns` only (`None`: all).
    pub async fn check_columns(
        &self,
        ids: std::ops::Range<i64>,
        columns: Option<&BTreeSet<String>>,
    ) -> Result<Checked, Error> {
        // When this chunk's reads began: a mismatch repaired since is not
        // reopened by what they saw (see `store::record`).
        let observed = std::time::Instant::now();
        let filter = legacy::scan::ScanFilter {
            columns: columns.cloned(),
            predicate: None,
        };
        let chunk = self.legacy.scan_filtered(ids.clone(), &filter).await?;
        // A (row, column) the layout cannot read is a mismatch of its
        // own, not compared: the legacy side of it is not known.
        let mut unreadable: BTreeMap<(RowKey, Column), String> = BTreeMap::new();
        for u in &chunk.unreadable {
            tracing::warn!("verify full: a legacy row cannot be read through the layout: {u}");
            unreadable
                .entry((u.row_key, u.column.clone()))
                .or_insert_with(|| u.error.to_string());
        }
        let mut legacy_cells: BTreeMap<RowKey, Vec<Cell>> = BTreeMap::new();
        for cell in &chunk.cells {
            legacy_cells
                .entry(cell.key.row_key)
                .or_default()
                .push(cell.clone());
        }
        for (row, _) in unreadable.keys() {
            legacy_cells.entry(*row).or_default();
        }
        let rows: Vec<RowKey> = legacy_cells.keys().copied().collect();
        let stored = self.schemaless_cells(&rows).await?;
        let units: Vec<Unit> = self
            .compare(&legacy_cells, &stored, columns)
            .into_iter()
            .filter(|u| !unreadable.contains_key(&(u.row_key, u.column.clone())))
            .collect();
        let (mut equal, first): (Vec<Unit>, Vec<Unit>) =
            units.into_iter().partition(|u| u.difference.is_none());
        // What Schemaless held for each unit found equal: the strict
        // check reads it through PostgreSQL's own casts.
        let mut strict_cells = self.compared_cells(&stored, &equal);
        let first: Vec<Difference> = first.into_iter().filter_map(|u| u.difference).collect();
        let triaged = self.triage(first, columns).await?;
        strict_cells.extend(triaged.equal_cells);
        equal.extend(triaged.equal);
        let mut mismatches = triaged.mismatches;
        mismatches.extend(unreadable.into_iter().map(|((row_key, column), error)| {
            let held = stored
                .get(&row_key)
                .into_iter()
                .flatten()
                .filter(|c| c.key.column == column)
                .max_by_key(|c| c.key.ref_key)
                .map(|c| json!({"ref_key": c.key.ref_key.get(), "body": c.body.to_value()}));
            Difference {
                row_key,
                column,
                legacy: json!({ "unreadable": error }),
                schemaless: held.unwrap_or(Value::Null),
            }
        }));
        let mut strict_failed = Vec::new();
        if self.config.strict {
            strict_failed = strict::check(&self.legacy, &self.rules, &strict_cells).await?;
            let failed: BTreeSet<(RowKey, &str)> = strict_failed
                .iter()
                .map(|d| (d.row_key, d.column.as_str()))
                .collect();
            equal.retain(|u| !failed.contains(&(u.row_key, u.column.as_str())));
        }
        let at = now_secs();
        let verified: Vec<Verified> = equal
            .iter()
            .map(|u| Verified {
                row_key: u.row_key,
                column: u.column.clone(),
                ref_key: u.ref_key,
                at,
            })
            .collect();
        // Every compared (row, column) counts as a sample of the gates'
        // figures: the full diff is the largest sample there is.
        let mut counts: HashMap<String, Counts> = HashMap::new();
        for v in &verified {
            let c = counts.entry(v.column.to_string()).or_default();
            c.samples += 1;
            c.matches += 1;
        }
        for d in mismatches.iter().chain(&strict_failed) {
            let c = counts.entry(d.column.to_string()).or_default();
            c.samples += 1;
            c.mismatches += 1;
        }
        store::record(&self.pool, Source::Full, "full", &mismatches, observed).await?;
        store::record(&self.pool, Source::Full, "strict", &strict_failed, observed).await?;
        store::flush(&self.pool, &counts, &verified).await?;
        mismatches.extend(strict_failed);
        Ok(Checked {
            parents: chunk.parents,
            cells: chunk.cells.len() as u64,
            strict: self.config.strict,
            mismatches,
        })
    }

    /// Triage as for samples: reads the rows of `first` (differences) again,
    /// both sides, until each agrees or shows the same difference twice
    /// with nothing in flight.
    pub(super) async fn triage(
        &self,
        first: Vec<Difference>,
        columns: Option<&BTreeSet<String>>,
    ) -> Result<Triaged, Error> {
        let mut previous = first;
        let mut triaged = Triaged::default();
        for _ in 0..TRIAGE_ROUNDS {
            if previous.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(self.config.triage_delay_ms)).await;
            let rows: Vec<RowKey> = previous
                .iter()
                .map(|d| d.row_key)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let settled = self
                .triage
                .settle(
                    &rows,
                    None,
                    Duration::from_millis(self.config.triage_wait_ms),
                )
                .await;
            let mut again: BTreeMap<RowKey, Vec<Cell>> = BTreeMap::new();
            for row in &rows {
                match self.legacy.row_cells(row).await {
                    Ok(cells) => {
                        again.insert(*row, cells);
                    }
                    // Unreadable since the scan: its differences are
                    // mismatches carrying the reason, as the scan's are.
                    Err(e @ schemaless::Error::Unreadable { .. }) => {
                        let (now, rest): (Vec<Difference>, Vec<Difference>) =
                            previous.into_iter().partition(|d| d.row_key == *row);
                        previous = rest;
                        triaged
                            .mismatches
                            .extend(now.into_iter().map(|d| Difference {
                                legacy: json!({ "unreadable": e.to_string() }),
                                ..d
                            }));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let stored = self.schemaless_cells(&rows).await?;
            let keys: std::collections::BTreeSet<(RowKey, String)> = previous
                .iter()
                .map(|d| (d.row_key, d.column.to_string()))
                .collect();
            let (now_equal, now_different): (Vec<Unit>, Vec<Unit>) = self
                .compare(&again, &stored, columns)
                .into_iter()
                .filter(|u| keys.contains(&(u.row_key, u.column.to_string())))
                .partition(|u| u.difference.is_none());
            triaged
                .equal_cells
                .extend(self.compared_cells(&stored, &now_equal));
            triaged.equal.extend(now_equal);
            let now: Vec<Difference> = now_different
                .into_iter()
                .filter_map(|u| u.difference)
                .collect();
            if settled {
                let (same, moved): (Vec<Difference>, Vec<Difference>) =
                    now.into_iter().partition(|d| previous.contains(d));
                triaged.mismatches.extend(same);
                previous = moved;
            } else {
                previous = now;
            }
        }
        if !previous.is_empty() {
            tracing::warn!(
                "verify full: {} (row, column)s kept changing during triage (hot rows?); not judged",
                previous.len()
            );
        }
        Ok(triaged)
    }

    pub(super) async fn schemaless_cells(
        &self,
        rows: &[RowKey],
    ) -> Result<BTreeMap<RowKey, Vec<Cell>>, Error> {
        let mut by_row: BTreeMap<RowKey, Vec<Cell>> = BTreeMap::new();
        let mut cells = self.schemaless.get_rows_all(rows, ReadFrom::Master).await?;
        if let Some(column) = &self.tombstones {
            cells = schemaless::tombstone::visible(cells, column)?;
        }
        for stored in cells {
            by_row
                .entry(stored.cell.key.row_key)
                .or_default()
                .push(stored.cell);
        }
        Ok(by_row)
    }

    /// Schemaless's cells behind `units`: a row column's latest, a child
    /// column's every cell.
    pub(super) fn compared_cells(
        &self,
        stored: &BTreeMap<RowKey, Vec<Cell>>,
        units: &[Unit],
    ) -> Vec<Cell> {
        let mut cells = Vec::new();
        for unit in units {
            let (Some(row), Some((_, layout))) = (
                stored.get(&unit.row_key),
                self.legacy.layout().column(unit.column.as_str()),
            ) else {
                continue;
            };
            let theirs = row.iter().filter(|c| c.key.column == unit.column);
            match layout.kind() {
                ColumnKind::Row => cells.extend(theirs.max_by_key(|c| c.key.ref_key).cloned()),
                ColumnKind::Child => cells.extend(theirs.cloned()),
            }
        }
        cells
    }

    /// Per row of `legacy` and layout column: a row column's current cell
    /// against Schemaless's latest, a child column's cells against all of
    /// Schemaless's.
    pub(super) fn compare(
        &self,
        legacy: &BTreeMap<RowKey, Vec<Cell>>,
        schemaless: &BTreeMap<RowKey, Vec<Cell>>,
        columns: Option<&BTreeSet<String>>,
    ) -> Vec<Unit> {
        let none = Vec::new();
        let mut units = Vec::new();
        for (row, cells) in legacy {
            let stored = schemaless.get(row).unwrap_or(&none);
            let compared = self
                .legacy
                .layout()
                .columns
                .iter()
                .filter(|c| columns.is_none_or(|set| set.contains(c.name.as_str())));
            for column in compared {
                let ours: Vec<&Cell> = cells
                    .iter()
                    .filter(|c| c.key.column == column.name)
                    .collect();
                let theirs: Vec<&Cell> = stored
                    .iter()
                    .filter(|c| c.key.column == column.name)
                    .collect();
                let unit = match column.kind() {
                    ColumnKind::Row => compare::one_cell(
                        &self.rules,
                        &self.legacy,
                        *row,
                        &column.name,
                        ours.iter().max_by_key(|c| c.key.ref_key).copied(),
                        theirs.iter().max_by_key(|c| c.key.ref_key).copied(),
                    ),
                    ColumnKind::Child => compare::cell_sets(
                        &self.rules,
                        &self.legacy,
                        *row,
                        &column.name,
                        &ours,
                        &theirs,
                    ),
                };
                units.extend(unit);
            }
        }
        units
    }
}
