//! [`Tombstoned`]: a store whose reads honour tombstones (see the module
//! above): a row's tombstones are read with its cells, hidden cells are
//! left out, a hidden latest cell falls back to the newest visible one,
//! and index entries of hidden cells are dropped (more are asked for, so
//! a limit still fills).
//!
//! Its writes refuse what a tombstone would hide ([`Tombstoned::put_cells`]):
//! a cell written under a deleted row key, or at a deleted child address,
//! would be acknowledged and then never read, an acknowledged write lost
//! in plain sight. Every writer into Schemaless that is not a bulk copy of
//! PostgreSQL's rows goes through it: the facade in `primary` and
//! `schemaless`, the relay (outbox and capture), the proxy's writes.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::Value;

use super::{Deletion, Tombstones};
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
        })
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

    /// Refuses `cells`, before anything is written, if one of them would
    /// be hidden the moment it lands: a cell of a row whose row tombstone
    /// is stored (the key is retired), at a child address whose cell
    /// tombstone is, or behind a tombstone earlier in the same batch. A
    /// hidden cell already stored with the same body is let through (the
    /// write comes back `AlreadyPresent`: a relay delivering again what it
    /// delivered before the deletion). Tombstones themselves are checked
    /// as a writer must ([`Deletion::checked`]). Costs one read of the
    /// tombstone column per shard the batch touches, from the masters;
    /// a deletion racing the write may still hide it, as a delete right
    /// after the write would.
    pub async fn refuse_hidden(&self, cells: &[Cell]) -> Result<()> {
        let mut deleting: HashMap<RowKey, Vec<(usize, Deletion)>> = HashMap::new();
        let mut rows = Vec::with_capacity(cells.len());
        for (i, cell) in cells.iter().enumerate() {
            if cell.key.column == self.column {
                let deletion = Deletion::checked(cell).map_err(|e| e.in_batch(i))?;
                deleting
                    .entry(cell.key.row_key)
                    .or_default()
                    .push((i, deletion));
            } else {
                rows.push(cell.key.row_key);
            }
        }
        rows.sort_unstable();
        rows.dedup();
        if rows.is_empty() {
            return Ok(());
        }
        let stored = self.tombstones(&rows, ReadFrom::Master).await?.value;
        let hidden = cells.iter().enumerate().filter(|(i, cell)| {
            let row = &cell.key.row_key;
            cell.key.column != self.column
                && (stored.get(row).is_some_and(|t| t.hides(&cell.key))
                    || deleting.get(row).is_some_and(|earlier| {
                        earlier
                            .iter()
                            .any(|(j, deletion)| j < i && deletion.hides(&cell.key))
                    }))
        });
        for (i, cell) in hidden {
            let same = self
                .inner
                .get_cell(&cell.key, ReadFrom::Master)
                .await?
                .is_some_and(|s| s.cell.body == cell.body);
            if same {
                continue;
            }
            let row_deleted = stored
                .get(&cell.key.row_key)
                .is_some_and(|t| t.row_deleted())
                || deleting
                    .get(&cell.key.row_key)
                    .is_some_and(|d| d.iter().any(|(j, d)| *j < i && *d == Deletion::Row));
            let error = if row_deleted {
                Error::invalid(
                    "row_key",
                    format!(
                        "row {} was deleted: its tombstone in {} retires the key, and a cell \
                         written under it would never be read; write the entity under a new row key",
                        cell.key.row_key, self.column
                    ),
                )
            } else {
                Error::invalid(
                    "ref_key",
                    format!(
                        "cell {} was deleted: a tombstone in {} hides that address, and a cell \
                         written there would never be read; a child's address is not reused \
                         after a delete, write it under a new ref key",
                        cell.key, self.column
                    ),
                )
            };
            return Err(error.in_batch(i));
        }
        Ok(())
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
    use super::super::{cell_body, row_body, visible};
    use super::*;
    use crate::cell::{Body, RefKey};
    use crate::memory::MemoryStore;
    use serde_json::json;

    const ROW: &str = "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d";
    const OTHER: &str = "fb6d4a3e-2f11-4c5e-8d7a-9e1f2a3b4c5d";

    fn config() -> config::Config {
        config::Config::parse(
            r#"
[instance]
name = "t"
shard_count = 4
[[cluster]]
name = "a"
master = "mysql://root@127.0.0.1:1"
shards = "0-3"
[[index]]
name = "by_driver"
column = "BASE"
shard_field = "driver"
fields = ["status"]
"#,
            "test.toml",
        )
        .unwrap()
    }

    fn cell(row: &str, column: &str, ref_key: i64, body: Value) -> Cell {
        Cell::parse(row, column, ref_key, body).unwrap()
    }

    fn tombstone(row: &str, ref_key: i64, body: Body) -> Cell {
        Cell::new(
            RowKey::parse(row).unwrap(),
            Column::new("DELETED").unwrap(),
            RefKey::new(ref_key).unwrap(),
            body,
        )
    }

    async fn store() -> Tombstoned<MemoryStore> {
        let config = config();
        let memory =
            MemoryStore::with_indexes(4, config::Limits::default(), &config.indexes).unwrap();
        memory
            .put_cells(vec![
                cell(
                    ROW,
                    "BASE",
                    1,
                    json!({"driver": "d1", "status": "requested"}),
                ),
                cell(
                    ROW,
                    "BASE",
                    2,
                    json!({"driver": "d1", "status": "completed"}),
                ),
                cell(ROW, "NOTES", 1, json!({"text": "one"})),
                cell(ROW, "NOTES", 2, json!({"text": "two"})),
                cell(ROW, "NOTES", 3, json!({"text": "three"})),
                cell(
                    OTHER,
                    "BASE",
                    1,
                    json!({"driver": "d1", "status": "requested"}),
                ),
            ])
            .await
            .unwrap();
        Tombstoned::new(memory, &config).unwrap()
    }

    fn notes() -> Column {
        Column::new("NOTES").unwrap()
    }

    fn base() -> Column {
        Column::new("BASE").unwrap()
    }

    fn row() -> RowKey {
        RowKey::parse(ROW).unwrap()
    }

    fn by_driver(limit: usize) -> IndexQuery {
        IndexQuery {
            index: "by_driver".into(),
            shard_value: json!("d1"),
            filters: vec![],
            order_by: None,
            descending: false,
            limit,
        }
    }

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

    fn invalid_field(err: Error) -> (String, String) {
        match err {
            Error::InvalidInput { field, message } => (field, message),
            other => panic!("expected invalid input, got {other:?}"),
        }
    }

    async fn stored(store: &Tombstoned<MemoryStore>) -> Vec<StoredCell> {
        let mut all = Vec::new();
        for shard in 0..store.shard_count() {
            all.extend(
                store
                    .inner()
                    .get_cells_for_shard(shard, 0, 1000, ReadFrom::Master)
                    .await
                    .unwrap()
                    .cells,
            );
        }
        all
    }

    #[tokio::test]
    async fn a_write_under_a_deleted_row_key_is_refused_and_writes_nothing() {
        let store = store().await;
        let column = store.column().clone();
        store
            .put_cell(super::super::row_tombstone(row(), &column))
            .await
            .unwrap();
        let before = stored(&store).await;

        // A new version of the deleted row, in a batch with a good cell:
        // the batch is refused, naming the cell, and nothing is written.
        let err = store
            .put_cells(vec![
                cell(OTHER, "NOTES", 1, json!({"text": "fine"})),
                cell(ROW, "BASE", 3, json!({"driver": "d1", "status": "x"})),
            ])
            .await
            .unwrap_err();
        let (field, message) = invalid_field(err);
        assert_eq!(field, "cells[1].row_key");
        assert!(message.contains("retires the key"), "{message}");
        assert_eq!(stored(&store).await, before);

        // Delivered again as it was before the deletion: AlreadyPresent.
        let again = store
            .put_cell(cell(
                ROW,
                "BASE",
                2,
                json!({"driver": "d1", "status": "completed"}),
            ))
            .await
            .unwrap();
        assert_eq!(again, crate::WriteOutcome::AlreadyPresent);
        // The same address with another body is refused as retired too.
        let err = store
            .put_cell(cell(ROW, "BASE", 2, json!({"driver": "d2"})))
            .await
            .unwrap_err();
        assert_eq!(invalid_field(err).0, "cells[0].row_key");
        // More tombstones of the row are taken: deleting is idempotent.
        let child = super::super::cell_tombstone(row(), &column, &notes(), 2);
        assert_eq!(
            store.put_cell(child).await.unwrap(),
            crate::WriteOutcome::Written
        );
        // Other rows are written as before.
        assert_eq!(
            store
                .put_cell(cell(OTHER, "BASE", 2, json!({"driver": "d1"})))
                .await
                .unwrap(),
            crate::WriteOutcome::Written
        );
    }

    #[tokio::test]
    async fn a_deleted_child_address_is_not_reused_and_a_batch_sees_its_own_tombstones() {
        let store = store().await;
        let column = store.column().clone();
        store
            .put_cell(super::super::cell_tombstone(row(), &column, &notes(), 2))
            .await
            .unwrap();
        let err = store
            .put_cell(cell(ROW, "NOTES", 2, json!({"text": "again"})))
            .await
            .unwrap_err();
        let (field, message) = invalid_field(err);
        assert_eq!(field, "cells[0].ref_key");
        assert!(message.contains("not reused"), "{message}");
        // Other addresses of the row are open.
        assert_eq!(
            store
                .put_cell(cell(ROW, "NOTES", 4, json!({"text": "four"})))
                .await
                .unwrap(),
            crate::WriteOutcome::Written
        );

        // Within one batch cells take effect in order: a cell before the
        // row's tombstone is written, one after it would be hidden.
        let before = stored(&store).await;
        let err = store
            .put_cells(vec![
                cell(OTHER, "NOTES", 1, json!({"text": "kept"})),
                super::super::row_tombstone(RowKey::parse(OTHER).unwrap(), &column),
                cell(OTHER, "NOTES", 2, json!({"text": "hidden"})),
            ])
            .await
            .unwrap_err();
        assert_eq!(invalid_field(err).0, "cells[2].row_key");
        assert_eq!(stored(&store).await, before);
        let results = store
            .put_cells(vec![
                cell(OTHER, "NOTES", 1, json!({"text": "kept"})),
                super::super::row_tombstone(RowKey::parse(OTHER).unwrap(), &column),
            ])
            .await
            .unwrap();
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(|r| r.is_ok()));
    }

    #[tokio::test]
    async fn a_tombstone_written_must_be_well_formed_and_at_its_derived_ref_key() {
        let store = store().await;
        let before = stored(&store).await;
        for (bad, field) in [
            (tombstone(ROW, 7, row_body()), "cells[0].ref_key"),
            (
                tombstone(
                    ROW,
                    0,
                    Body::from_value(json!({"row": true, "x": 1})).unwrap(),
                ),
                "cells[0].body",
            ),
            (
                tombstone(
                    ROW,
                    0,
                    Body::from_value(json!({"column": "NOTES"})).unwrap(),
                ),
                "cells[0].body",
            ),
        ] {
            let err = store.put_cell(bad).await.unwrap_err();
            assert_eq!(invalid_field(err).0, field);
        }
        assert_eq!(stored(&store).await, before);
    }
}
