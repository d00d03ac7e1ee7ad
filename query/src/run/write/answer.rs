//! The end of a write: its cells put through the store, and the
//! statement PostgreSQL runs to answer the app.

use super::*;

/// A statement's cells ready to be put: which of its rows are kept so
/// far, the row of each cell, and the cells.
pub(super) struct Staged {
    kept: Vec<bool>,
    of_row: Vec<usize>,
    pub(super) cells: Vec<Cell>,
}

impl Staged {
    /// How many cells it puts (also once they are taken to be put).
    pub(super) fn len(&self) -> usize {
        self.of_row.len()
    }

    /// Which of its rows are kept so far.
    pub(super) fn kept(&self) -> &[bool] {
        &self.kept
    }

    /// Its rows, and the row of each cell.
    pub(super) fn rows(&self) -> (usize, &[usize]) {
        (self.kept.len(), &self.of_row)
    }
}

/// Puts `cells` through `store` in as few calls as the batch limits
/// allow: one result per cell, or the store's failure (with the results
/// of the calls before it). `skippable` gives, by cell, the row (numbered
/// across the batch) of a `DO NOTHING` without a conflict target: such a
/// row is skipped when the store refuses one of its cells as a duplicate
/// of a unique value ([`put_skipping`]).
pub(super) async fn put_all<S: CellStore>(
    store: &S,
    limits: &config::Limits,
    cells: Vec<Cell>,
    skippable: &[Option<usize>],
) -> (Vec<schemaless::CellResult>, Option<Refused>) {
    let sizes = schemaless::cell::batch_sizes(cells.iter().map(|c| c.body.json_len()), limits);
    let mut cells = cells.into_iter();
    let mut results = Vec::with_capacity(cells.len());
    let mut at = 0;
    for size in sizes {
        let batch: Vec<Cell> = cells.by_ref().take(size).collect();
        // A row with cells in another call is not skipped: some of it
        // may be written already.
        let whole = |row: usize| {
            !skippable[..at].contains(&Some(row))
                && !skippable[(at + size).min(skippable.len())..].contains(&Some(row))
        };
        let rows = skippable.get(at..at + size).unwrap_or_default();
        match put_skipping(store, batch, rows, whole).await {
            Ok(put) => results.extend(put),
            Err(e) => {
                let failed = Refused::new(
                    sqlstate_of(&e),
                    format!("Schemaless did not take the write: {e}"),
                );
                return (results, Some(failed));
            }
        }
        at += size;
    }
    (results, None)
}

/// Puts `batch`. PostgreSQL's `INSERT ... ON CONFLICT DO NOTHING` without
/// a conflict target skips a row that would duplicate a value of any
/// unique index, or that an exclusion constraint refuses; the store
/// refuses such a cell (asked of PostgreSQL in `primary`) and names it. Its row (`rows`, by cell; `whole` says the
/// row's cells are all in `batch`) is left out, each of its cells answered
/// as a conflict, so the row is not counted as written, and the rest is
/// put again. Any other refusal is the batch's.
async fn put_skipping<S: CellStore>(
    store: &S,
    batch: Vec<Cell>,
    rows: &[Option<usize>],
    whole: impl Fn(usize) -> bool,
) -> schemaless::Result<Vec<schemaless::CellResult>> {
    if rows.iter().all(Option::is_none) {
        return store.put_cells(batch).await;
    }
    let mut skipped = vec![false; batch.len()];
    loop {
        let left: Vec<usize> = (0..batch.len()).filter(|&i| !skipped[i]).collect();
        let put = if left.is_empty() {
            Vec::new()
        } else {
            let cells = left.iter().map(|&i| batch[i].clone()).collect();
            match store.put_cells(cells).await {
                Ok(put) => put,
                Err(e) => {
                    let row = matches!(sqlstate_of(&e), "23505" | "23P01")
                        .then(|| e.batch_index())
                        .flatten()
                        .and_then(|j| left.get(j))
                        .and_then(|&i| rows.get(i).copied().flatten())
                        .filter(|&row| whole(row));
                    let Some(row) = row else {
                        return Err(e);
                    };
                    for (i, of) in rows.iter().enumerate() {
                        skipped[i] |= *of == Some(row);
                    }
                    continue;
                }
            }
        };
        let mut put = put.into_iter();
        return batch
            .iter()
            .zip(&skipped)
            .map(|(cell, &skipped)| {
                if skipped {
                    Ok(Err(schemaless::Conflict {
                        key: cell.key.clone(),
                    }))
                } else {
                    put.next().ok_or_else(|| {
                        schemaless::Error::Schema(
                            "the store answered fewer cells than were put".into(),
                        )
                    })
                }
            })
            .collect();
    }
}

/// The SQLSTATE of a put the store refused: a cell PostgreSQL would
/// refuse (the facade asks it first in `primary`) gets the code
/// PostgreSQL gives that refusal ([`schemaless::Error::sqlstate`]), other
/// bad input `invalid_parameter_value`, a failure `io_error`.
fn sqlstate_of(e: &schemaless::Error) -> &str {
    match e {
        schemaless::Error::InvalidInput { sqlstate, .. } => sqlstate.as_deref().unwrap_or("22023"),
        _ => "58000",
    }
}

/// The statement PostgreSQL runs in place of a write without RETURNING:
/// it answers `NoData` to a `Describe` and a bare `CommandComplete`.
const NOTHING: &str = "DO $mezzanine$ BEGIN END $mezzanine$";

impl<S: CellStore> Writer<'_, S> {
    /// A planned statement's cells, to be put with its batch's: checked
    /// against each other first ([`Writer::repeated`]), nothing put.
    pub(super) fn stage(&self, mut rows: Vec<Vec<Cell>>) -> Result<Staged, Refused> {
        let mut kept = vec![true; rows.len()];
        if let Rows::Insert { conflict, .. } = &self.write.rows {
            self.repeated(conflict, &mut rows, &mut kept)?;
        }
        let of_row: Vec<usize> = rows
            .iter()
            .enumerate()
            .flat_map(|(r, cells)| std::iter::repeat_n(r, cells.len()))
            .collect();
        let cells = rows.into_iter().flatten().collect();
        Ok(Staged {
            kept,
            of_row,
            cells,
        })
    }

    /// Which of a staged statement's rows were written, from its cells'
    /// `results` (a row of ON CONFLICT DO NOTHING whose cell was taken
    /// meanwhile is not); or the error PostgreSQL would have raised.
    pub(super) fn outcome(
        &self,
        staged: &Staged,
        cells: &[Cell],
        results: &[schemaless::CellResult],
    ) -> Result<Vec<bool>, Refused> {
        let insert = match &self.write.rows {
            Rows::Insert { conflict, .. } => Some(conflict),
            Rows::Update { .. } => None,
            Rows::Delete { .. } => {
                return Ok(self.deleted(staged, results));
            }
        };
        let mut kept = staged.kept.clone();
        for ((result, &r), cell) in results.iter().zip(&staged.of_row).zip(cells) {
            let key = &cell.key.row_key;
            let taken = matches!(result, Err(_) | Ok(WriteOutcome::AlreadyPresent));
            match (insert, taken) {
                (_, false) => {}
                (Some(OnConflict::Nothing { .. }), true) => kept[r] = false,
                (Some(_), true) => return Err(self.duplicate(key, Some(cell.key.ref_key.get()))),
                // The same next version, written by an equal UPDATE.
                (None, true) if result.is_ok() => {}
                (None, true) => {
                    return Err(Refused::new(
                        "40001",
                        format!(
                            "could not serialize access due to concurrent update: row {} \
                             got a new version meanwhile; retry",
                            key.uuid()
                        ),
                    ))
                }
            }
        }
        Ok(kept)
    }

    /// Which rows a DELETE deleted: those whose tombstone it wrote. One
    /// already there was put by another deleter meanwhile, whose count
    /// the row is in, as a concurrent DELETE in PostgreSQL waits and
    /// then finds the row gone.
    fn deleted(&self, staged: &Staged, results: &[schemaless::CellResult]) -> Vec<bool> {
        let mut kept = staged.kept.clone();
        for (result, &r) in results.iter().zip(&staged.of_row) {
            if !matches!(result, Ok(WriteOutcome::Written)) {
                kept[r] = false;
            }
        }
        kept
    }

    /// An INSERT's rows that name a cell an earlier row of the statement
    /// names (one row key twice; a child row twice), before anything is
    /// put: each row was judged against the stores alone, where neither
    /// was yet. PostgreSQL checks a row against the statement's earlier
    /// rows too, and writes nothing when one fails: a plain INSERT fails
    /// with `23505`, `DO UPDATE` with `21000`, and `DO NOTHING` skips the
    /// later row (its cells are dropped, and it is not kept). Without this
    /// the earlier row was put and then the statement failed: a refused
    /// write that had changed the store.
    fn repeated(
        &self,
        conflict: &OnConflict,
        rows: &mut [Vec<Cell>],
        kept: &mut [bool],
    ) -> Result<(), Refused> {
        let mut seen = std::collections::HashSet::new();
        for (r, cells) in rows.iter_mut().enumerate() {
            let Some(again) = cells.iter().find(|c| seen.contains(&c.key)) else {
                seen.extend(cells.iter().map(|c| c.key.clone()));
                continue;
            };
            match conflict {
                OnConflict::Fail => {
                    return Err(self.duplicate(&again.key.row_key, Some(again.key.ref_key.get())))
                }
                OnConflict::Update { .. } => {
                    return Err(Refused::new(
                        "21000",
                        "ON CONFLICT DO UPDATE command cannot affect row a second time: \
                         rows proposed for insertion within the same command have the same key",
                    ))
                }
                OnConflict::Nothing { .. } => {
                    kept[r] = false;
                    cells.clear();
                }
            }
        }
        Ok(())
    }

    /// The statement PostgreSQL runs in the app's statement's place.
    /// Refuses, before any cell is put, a RETURNING whose expressions
    /// PostgreSQL cannot evaluate over the rows (`1 / (fare - fare)`, a
    /// cast a value does not fit): PostgreSQL would fail the statement
    /// and write nothing, where the answer, run once the cells are put,
    /// would tell the app that a write it made failed. Evaluated as the
    /// app's values are, in the batch's shared round trips; RETURNING
    /// only of columns (an ORM's id or row) costs nothing, since the
    /// rows' values are the ones evaluated already.
    pub(super) async fn renders(&self, rows: &[Vec<Value>]) -> Result<(), Refused> {
        let columns_only = self.write.returning.iter().all(|item| match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                matches!(strip(e), Expr::Identifier(_) | Expr::CompoundIdentifier(_))
            }
            _ => true,
        });
        if columns_only || rows.is_empty() {
            return Ok(());
        }
        let rendering = self.rendering(rows)?;
        let sql = format!(
            "SELECT count(*)::text FROM ({}) AS mezzanine_r WHERE mezzanine_r::text IS NOT NULL",
            rendering.sql
        );
        self.evaluations.texts(self.eval, sql).await.map(|_| ())
    }

    pub(super) fn rendering(&self, rows: &[Vec<Value>]) -> Result<Rendering, Refused> {
        if self.write.returning.is_empty() {
            return Ok(Rendering {
                sql: NOTHING.to_string(),
                origins: Vec::new(),
                rows: rows.len(),
            });
        }
        let items: Vec<String> = self
            .write
            .returning
            .iter()
            .map(ToString::to_string)
            .collect();
        let origins = self
            .write
            .returning
            .iter()
            .map(|item| {
                let e = match item {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                    _ => return Origin::default(),
                };
                let name = match strip(e) {
                    Expr::Identifier(i) => folded(i),
                    Expr::CompoundIdentifier(parts) => parts.last().map(folded).unwrap_or_default(),
                    _ => return Origin::default(),
                };
                self.position(&name)
                    .map_or_else(Origin::default, |at| self.cols[at].attr.origin)
            })
            .collect();
        let null_row = vec![Value::Null; self.cols.len()];
        let sql = format!(
            "/* mezzanine: written through the facade */ SELECT {} FROM {}{}",
            items.join(", "),
            if rows.is_empty() {
                self.values(&[null_row])?
            } else {
                self.values(rows)?
            },
            if rows.is_empty() { " WHERE false" } else { "" }
        );
        Ok(Rendering {
            sql,
            origins,
            rows: rows.len(),
        })
    }
}
