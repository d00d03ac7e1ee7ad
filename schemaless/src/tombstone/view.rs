//! [`Tombstoned`]: a store whose reads honour tombstones (see the module
//! above): a row's tombstones are read with its cells, hidden cells are
//! left out, a hidden latest cell falls back to the newest visible one,
//! and index entries of hidden cells are dropped (more are asked for, so
//! a limit still fills).
//!
//! Its writes refuse what a tombstone would hide ([`Tombstoned::put_cells`],
//! the guard in `super::guard`).

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::Value;

use super::Tombstones;
use crate::api::{Answer, CellResult, CellStore, IndexEntry, IndexQuery, ReadFrom, ShardPage};
use crate::cell::{Cell, CellKey, Column, RowKey, StoredCell};
use crate::error::{Error, Result};

/// A store whose reads honour tombstones; see the module docs of [`super`].
pub struct Tombstoned<S> {
    inner: S,
    /// The tombstone column.
    column: Column,
    /// Each index's column, to tell which entries a tombstone may hide.
    index_columns: HashMap<String, Column>,
    /// A batch over these is refused before its tombstones are read.
    limits: config::Limits,
    /// Whether a hidden cell stored with the same body is let through as
    /// a redelivery ([`Tombstoned::current_state`]).
    redeliveries: bool,
}

impl<S: CellStore> Tombstoned<S> {
    /// `inner` read through the tombstones of `config.capture`'s column,
    /// with the config's `[[index]]` declarations.
    pub fn new(inner: S, config: &config::Config) -> Result<Tombstoned<S>> {
        let column = Column::new(&config.capture.tombstone_column)
            .map_err(|e| Error::invalid("capture.tombstone_column", e.to_string()))?;
        let index_columns = config
            .indexes
            .iter()
            .map(|i| Ok((i.name.clone(), Column::new(&i.column)?)))
            .collect::<Result<_>>()?;
        Ok(Tombstoned {
            inner,
            column,
            index_columns,
            limits: config.limits.clone(),
            redeliveries: true,
        })
    }

    /// The same store for a writer whose cells are its source's state as
    /// it is when it writes them (capture delivery reads the legacy rows
    /// as they are now): a hidden cell it writes is never a redelivery of
    /// a write made before the deletion, but the deleted key written
    /// again, so it is refused even where the same body is stored. (A
    /// writer of queued cells, as the outbox relay, may deliver a cell
    /// again after the deletion behind it landed; it keeps the
    /// `AlreadyPresent` answer.)
    pub fn current_state(mut self) -> Tombstoned<S> {
        self.redeliveries = false;
        self
    }

    /// Whether a hidden cell stored with the same body is let through.
    pub(super) fn takes_redeliveries(&self) -> bool {
        self.redeliveries
    }

    /// The store underneath (reads there see hidden cells).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The tombstone column.
    pub fn column(&self) -> &Column {
        &self.column
    }

    /// The tombstones of `rows` (rows without any are left out).
    pub async fn tombstones(
        &self,
        rows: &[RowKey],
        from: ReadFrom,
    ) -> Result<Answer<HashMap<RowKey, Tombstones>>> {
        if rows.is_empty() {
            return Ok(Answer::fresh(HashMap::new()));
        }
        let answer = self
            .inner
            .get_column_cells_answer(rows, &self.column, from)
            .await?;
        let mut by_row: HashMap<RowKey, Vec<&Cell>> = HashMap::new();
        for stored in &answer.value {
            by_row
                .entry(stored.cell.key.row_key)
                .or_default()
                .push(&stored.cell);
        }
        let value = by_row
            .into_iter()
            .map(|(row, cells)| Ok((row, Tombstones::from_cells(cells)?)))
            .collect::<Result<_>>()?;
        Ok(Answer {
            value,
            stale: answer.stale,
        })
    }

    async fn row_tombstones(&self, row: &RowKey, from: ReadFrom) -> Result<Answer<Tombstones>> {
        let answer = self.tombstones(std::slice::from_ref(row), from).await?;
        Ok(Answer {
            value: answer.value.into_values().next().unwrap_or_default(),
            stale: answer.stale,
        })
    }

    /// The newest cell of (`row`, `column`) that `tombstones` leave
    /// visible: the rare path, when the latest one is hidden.
    async fn newest_visible(
        &self,
        row: &RowKey,
        column: &Column,
        tombstones: &Tombstones,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        if tombstones.row_deleted() {
            return Ok(Answer::fresh(None));
        }
        let all = self
            .inner
            .get_column_cells_answer(std::slice::from_ref(row), column, from)
            .await?;
        Ok(Answer {
            value: all
                .value
                .into_iter()
                .filter(|s| !tombstones.hides(&s.cell.key))
                .max_by_key(|s| s.cell.key.ref_key),
            stale: all.stale,
        })
    }

    /// Whether `entry` of an index over `column` still reflects a visible
    /// cell of its row.
    async fn entry_visible(
        &self,
        entry: &IndexEntry,
        column: &Column,
        tombstones: &Tombstones,
        from: ReadFrom,
    ) -> Result<Answer<bool>> {
        if tombstones.row_deleted() {
            return Ok(Answer::fresh(false));
        }
        if !tombstones.touches(column) {
            return Ok(Answer::fresh(true));
        }
        let latest = self
            .inner
            .get_cell_latest_answer(&entry.row_key, column, from)
            .await?;
        let Some(latest) = latest.value else {
            return Ok(Answer::fresh(false));
        };
        if !tombstones.hides(&latest.cell.key) {
            return Ok(Answer::fresh(true));
        }
        // The indexed (latest) cell is hidden; the entry stands only if
        // the newest visible cell has the same indexed values.
        let visible = self
            .newest_visible(&entry.row_key, column, tombstones, from)
            .await?;
        let same = visible.value.is_some_and(|v| {
            entry
                .fields
                .fields()
                .iter()
                .all(|(k, value)| v.cell.body.fields().get(k).unwrap_or(&Value::Null) == value)
        });
        Ok(Answer {
            value: same,
            stale: visible.stale,
        })
    }
}

#[async_trait]
impl<S: CellStore> CellStore for Tombstoned<S> {
    fn shard_count(&self) -> u32 {
        self.inner.shard_count()
    }

    /// Writes `cells` unless one of them would be hidden by a tombstone
    /// ([`Tombstoned::refuse_hidden`]); then nothing is written.
    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        crate::cell::check_batch(&cells, &self.limits)?;
        self.refuse_hidden(&cells).await?;
        self.inner.put_cells(cells).await
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        from: ReadFrom,
    ) -> Result<ShardPage> {
        // The change log is history: deletions are in it as cells.
        self.inner
            .get_cells_for_shard(shard, after, limit, from)
            .await
    }

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        if key.column == self.column {
            return self.inner.get_cell_answer(key, from).await;
        }
        let (cell, tombstones) = futures::try_join!(
            self.inner.get_cell_answer(key, from),
            self.row_tombstones(&key.row_key, from)
        )?;
        Ok(Answer {
            value: cell.value.filter(|_| !tombstones.value.hides(key)),
            stale: cell.stale || tombstones.stale,
        })
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        if *column == self.column {
            return self
                .inner
                .get_cell_latest_answer(row_key, column, from)
                .await;
        }
        let (latest, tombstones) = futures::try_join!(
            self.inner.get_cell_latest_answer(row_key, column, from),
            self.row_tombstones(row_key, from)
        )?;
        let stale = latest.stale || tombstones.stale;
        match latest.value {
            Some(cell) if tombstones.value.hides(&cell.cell.key) => {
                let visible = self
                    .newest_visible(row_key, column, &tombstones.value, from)
                    .await?;
                Ok(Answer {
                    value: visible.value,
                    stale: stale || visible.stale,
                })
            }
            value => Ok(Answer { value, stale }),
        }
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let latest = self.inner.get_cells_for_row_answer(row_key, from).await?;
        // The latest cell of every column: a row with tombstones has a
        // latest tombstone, so a row without one needs no second read.
        if !latest
            .value
            .iter()
            .any(|s| s.cell.key.column == self.column)
        {
            return Ok(latest);
        }
        let tombstones = self.row_tombstones(row_key, from).await?;
        let mut stale = latest.stale || tombstones.stale;
        let mut cells = Vec::with_capacity(latest.value.len());
        for stored in latest.value {
            if stored.cell.key.column == self.column {
                continue;
            }
            if !tombstones.value.hides(&stored.cell.key) {
                cells.push(stored);
                continue;
            }
            let visible = self
                .newest_visible(row_key, &stored.cell.key.column, &tombstones.value, from)
                .await?;
            stale |= visible.stale;
            cells.extend(visible.value);
        }
        Ok(Answer {
            value: cells,
            stale,
        })
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        if *column == self.column {
            return self.inner.get_column_cells_answer(rows, column, from).await;
        }
        let (cells, tombstones) = futures::try_join!(
            self.inner.get_column_cells_answer(rows, column, from),
            self.tombstones(rows, from)
        )?;
        Ok(Answer {
            value: cells
                .value
                .into_iter()
                .filter(|s| {
                    !tombstones
                        .value
                        .get(&s.cell.key.row_key)
                        .is_some_and(|t| t.hides(&s.cell.key))
                })
                .collect(),
            stale: cells.stale || tombstones.stale,
        })
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        let Some(column) = self.index_columns.get(&query.index) else {
            return self.inner.query_index_answer(query, from).await;
        };
        // Entries of hidden cells are dropped; ask for more until `limit`
        // visible ones are found or the index has no more.
        let mut asked = query.clone();
        loop {
            let answer = self.inner.query_index_answer(&asked, from).await?;
            let mut stale = answer.stale;
            let exhausted = answer.value.len() < asked.limit;
            let rows: Vec<RowKey> = answer.value.iter().map(|e| e.row_key).collect();
            let tombstones = self.tombstones(&rows, from).await?;
            stale |= tombstones.stale;
            let mut kept = Vec::with_capacity(answer.value.len());
            let mut dropped = 0;
            for entry in answer.value {
                let visible = match tombstones.value.get(&entry.row_key) {
                    None => true,
                    Some(t) => {
                        let visible = self.entry_visible(&entry, column, t, from).await?;
                        stale |= visible.stale;
                        visible.value
                    }
                };
                if visible {
                    kept.push(entry);
                } else {
                    dropped += 1;
                }
            }
            if dropped == 0 || exhausted || kept.len() >= query.limit {
                kept.truncate(query.limit);
                return Ok(Answer { value: kept, stale });
            }
            asked.limit = asked.limit.saturating_add(dropped.max(asked.limit));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{cell_body, row_body, visible};
    use super::*;
    use crate::cell::{Body, RefKey};
    use serde_json::json;

    #[tokio::test]
    async fn a_row_without_tombstones_reads_as_it_is() {
        let store = store().await;
        let latest = store
            .get_cell_latest(&row(), &notes(), ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.cell.key.ref_key.get(), 3);
        assert_eq!(
            store
                .get_cells_for_row(&row(), ReadFrom::Master)
                .await
                .unwrap(),
            store
                .inner()
                .get_cells_for_row(&row(), ReadFrom::Master)
                .await
                .unwrap()
        );
        assert_eq!(
            store
                .query_index(&by_driver(10), ReadFrom::Master)
                .await
                .unwrap()
                .len(),
            2
        );
    }

    #[tokio::test]
    async fn a_deleted_child_cell_is_absent_and_the_latest_falls_back() {
        let store = store().await;
        store
            .inner()
            .put_cell(tombstone(ROW, 10, cell_body(&notes(), 3)))
            .await
            .unwrap();
        let latest = store
            .get_cell_latest(&row(), &notes(), ReadFrom::Master)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.cell.key.ref_key.get(), 2, "the newest visible note");
        let key = CellKey {
            row_key: row(),
            column: notes(),
            ref_key: RefKey::new(3).unwrap(),
        };
        assert_eq!(store.get_cell(&key, ReadFrom::Master).await.unwrap(), None);
        assert!(store
            .inner()
            .get_cell(&key, ReadFrom::Master)
            .await
            .unwrap()
            .is_some());
        let row_cells = store
            .get_cells_for_row(&row(), ReadFrom::Master)
            .await
            .unwrap();
        let seen: Vec<(String, i64)> = row_cells
            .iter()
            .map(|s| (s.cell.key.column.to_string(), s.cell.key.ref_key.get()))
            .collect();
        assert_eq!(seen, [("BASE".into(), 2), ("NOTES".into(), 2)]);
        let all = store
            .get_column_cells(&[row()], &notes(), ReadFrom::Master)
            .await
            .unwrap();
        assert_eq!(all.len(), 2);
        // Deleting the rest leaves the column empty.
        store
            .inner()
            .put_cells(vec![
                tombstone(ROW, 11, cell_body(&notes(), 2)),
                tombstone(ROW, 12, cell_body(&notes(), 1)),
            ])
            .await
            .unwrap();
        assert_eq!(
            store
                .get_cell_latest(&row(), &notes(), ReadFrom::Master)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_deleted_row_is_absent_everywhere_and_leaves_its_index() {
        let store = store().await;
        store
            .inner()
            .put_cell(tombstone(ROW, 1, row_body()))
            .await
            .unwrap();
        assert_eq!(
            store
                .get_cell_latest(&row(), &base(), ReadFrom::Master)
                .await
                .unwrap(),
            None
        );
        assert!(store
            .get_cells_for_row(&row(), ReadFrom::Master)
            .await
            .unwrap()
            .is_empty());
        let entries = store
            .query_index(&by_driver(10), ReadFrom::Master)
            .await
            .unwrap();
        assert_eq!(
            entries.iter().map(|e| e.row_key).collect::<Vec<_>>(),
            [RowKey::parse(OTHER).unwrap()]
        );
        // With a limit of one, the hidden entry (first in row key order)
        // must not starve the visible one.
        let unfiltered = store
            .inner()
            .query_index(&by_driver(1), ReadFrom::Master)
            .await
            .unwrap();
        assert_eq!(unfiltered[0].row_key, row());
        let one = store
            .query_index(&by_driver(1), ReadFrom::Master)
            .await
            .unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].row_key, RowKey::parse(OTHER).unwrap());
        // The change log still has everything, the tombstone included.
        let shard = crate::routing::shard_of(&row(), 4);
        let log = store
            .get_cells_for_shard(shard, 0, 100, ReadFrom::Master)
            .await
            .unwrap();
        assert!(log
            .cells
            .iter()
            .any(|s| s.cell.key.column.as_str() == "DELETED"));
    }

    #[tokio::test]
    async fn whole_row_reads_are_filtered_the_same_way() {
        let store = store().await;
        store
            .inner()
            .put_cell(tombstone(ROW, 5, cell_body(&notes(), 1)))
            .await
            .unwrap();
        let mut everything = store
            .inner()
            .get_column_cells(&[row()], &notes(), ReadFrom::Master)
            .await
            .unwrap();
        everything.extend(
            store
                .inner()
                .get_column_cells(&[row()], store.column(), ReadFrom::Master)
                .await
                .unwrap(),
        );
        let left = visible(everything, store.column()).unwrap();
        let refs: Vec<i64> = left.iter().map(|s| s.cell.key.ref_key.get()).collect();
        assert_eq!(refs, [2, 3]);
    }

    #[tokio::test]
    async fn a_corrupt_tombstone_is_a_clear_error() {
        let store = store().await;
        store
            .inner()
            .put_cell(tombstone(
                ROW,
                1,
                Body::from_value(json!({"column": "NOTES"})).unwrap(),
            ))
            .await
            .unwrap();
        let err = store
            .get_cell_latest(&row(), &notes(), ReadFrom::Master)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("tombstone") && text.contains("not a tombstone"),
            "{text}"
        );
    }
}
