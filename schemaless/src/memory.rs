//! The in-memory store: the model the MySQL store is tested against.
//!
//! It implements the cell API as plainly as possible — one map of cells,
//! one append-only log per shard — so that property tests can run the same
//! operations on it and on MariaDB and demand the same answers. It is not a
//! stand-in for a database: nothing here is durable.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::api::{
    Answer, CellResult, CellStore, Conflict, IndexEntry, IndexQuery, ReadFrom, ShardPage,
    WriteOutcome,
};
use crate::cell::{check_batch, now_micros, Cell, CellKey, Column, RowKey, StoredCell};
use crate::error::{Error, Result};
use crate::index::IndexSpec;
use crate::routing::shard_of;

/// The cell API over plain maps.
pub struct MemoryStore {
    shard_count: u32,
    limits: config::Limits,
    /// Answered by brute force over the latest cells.
    indexes: Vec<IndexSpec>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Every cell by address; ordered so "latest" is a range scan.
    cells: BTreeMap<CellKey, StoredCell>,
    /// Per shard, the addresses in added_id order (index = added_id - 1).
    logs: HashMap<u32, Vec<CellKey>>,
}

impl MemoryStore {
    /// An empty store with `shard_count` shards and the given limits.
    pub fn new(shard_count: u32, limits: config::Limits) -> MemoryStore {
        MemoryStore {
            shard_count,
            limits,
            indexes: Vec::new(),
            state: Mutex::new(State::default()),
        }
    }

    /// The same, answering `query_index` for `indexes` (by brute force: the
    /// definition the MariaDB indexes are tested against).
    pub fn with_indexes(
        shard_count: u32,
        limits: config::Limits,
        indexes: &[config::Index],
    ) -> Result<MemoryStore> {
        let mut store = MemoryStore::new(shard_count, limits);
        store.indexes = indexes
            .iter()
            .map(IndexSpec::from_config)
            .collect::<Result<_>>()?;
        Ok(store)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated
        // in a way later calls could observe wrongly, so poisoning is moot.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl CellStore for MemoryStore {
    fn shard_count(&self) -> u32 {
        self.shard_count
    }

    async fn put_cells(&self, cells: Vec<Cell>) -> Result<Vec<CellResult>> {
        check_batch(&cells, &self.limits)?;
        let mut state = self.state();
        let mut results = Vec::with_capacity(cells.len());
        let mut new_cells: BTreeMap<CellKey, Cell> = BTreeMap::new();
        for cell in cells {
            let existing = state
                .cells
                .get(&cell.key)
                .map(|c| &c.cell.body)
                .or_else(|| new_cells.get(&cell.key).map(|c| &c.body));
            results.push(match existing {
                Some(body) if *body == cell.body => Ok(WriteOutcome::AlreadyPresent),
                Some(_) => Err(Conflict { key: cell.key }),
                None => {
                    new_cells.insert(cell.key.clone(), cell);
                    Ok(WriteOutcome::Written)
                }
            });
        }
        // A call's new cells enter each shard's log in address order, as
        // they do on MariaDB (see `CellStore::put_cells`).
        let created_at = now_micros();
        for (key, cell) in new_cells {
            let shard = shard_of(&key.row_key, self.shard_count);
            let log = state.logs.entry(shard).or_default();
            log.push(key.clone());
            let added_id = log.len() as u64;
            state.cells.insert(
                key,
                StoredCell {
                    cell,
                    added_id,
                    created_at,
                },
            );
        }
        Ok(results)
    }

    async fn get_cell_answer(
        &self,
        key: &CellKey,
        _from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        Ok(Answer::fresh(self.state().cells.get(key).cloned()))
    }

    async fn get_cell_latest_answer(
        &self,
        row_key: &RowKey,
        column: &Column,
        _from: ReadFrom,
    ) -> Result<Answer<Option<StoredCell>>> {
        let state = self.state();
        Ok(Answer::fresh(
            state
                .cells
                .values()
                .filter(|c| c.cell.key.row_key == *row_key && c.cell.key.column == *column)
                .max_by_key(|c| c.cell.key.ref_key)
                .cloned(),
        ))
    }

    async fn get_cells_for_row_answer(
        &self,
        row_key: &RowKey,
        _from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let state = self.state();
        let mut latest: BTreeMap<&Column, &StoredCell> = BTreeMap::new();
        for stored in state
            .cells
            .values()
            .filter(|c| c.cell.key.row_key == *row_key)
        {
            let slot = latest.entry(&stored.cell.key.column).or_insert(stored);
            if stored.cell.key.ref_key > slot.cell.key.ref_key {
                *slot = stored;
            }
        }
        Ok(Answer::fresh(latest.into_values().cloned().collect()))
    }

    async fn get_column_cells_answer(
        &self,
        rows: &[RowKey],
        column: &Column,
        _from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let state = self.state();
        Ok(Answer::fresh(
            state
                .cells
                .values()
                .filter(|c| c.cell.key.column == *column && rows.contains(&c.cell.key.row_key))
                .cloned()
                .collect(),
        ))
    }

    async fn query_index_answer(
        &self,
        query: &IndexQuery,
        _from: ReadFrom,
    ) -> Result<Answer<Vec<IndexEntry>>> {
        let spec = self
            .indexes
            .iter()
            .find(|i| i.name == query.index)
            .ok_or_else(|| unknown_index(&self.indexes, &query.index))?;
        let checked = spec.check(query)?;
        let state = self.state();
        let mut latest: BTreeMap<RowKey, &StoredCell> = BTreeMap::new();
        for stored in state
            .cells
            .values()
            .filter(|c| c.cell.key.column == spec.column)
        {
            let slot = latest.entry(stored.cell.key.row_key).or_insert(stored);
            if stored.cell.key.ref_key > slot.cell.key.ref_key {
                *slot = stored;
            }
        }
        Ok(Answer::fresh(spec.brute_force(
            &checked,
            latest.into_iter().map(|(row, c)| (row, &c.cell.body)),
        )))
    }

    async fn get_cells_for_shard(
        &self,
        shard: u32,
        after: u64,
        limit: usize,
        _from: ReadFrom,
    ) -> Result<ShardPage> {
        if shard >= self.shard_count {
            return Err(Error::NoSuchShard {
                shard,
                shard_count: self.shard_count,
            });
        }
        let state = self.state();
        let log = state.logs.get(&shard).map(Vec::as_slice).unwrap_or(&[]);
        let start = usize::try_from(after).unwrap_or(usize::MAX).min(log.len());
        let cells: Vec<StoredCell> = log[start..]
            .iter()
            .take(limit)
            .map(|key| state.cells[key].clone())
            .collect();
        let next = cells.last().map_or(after, |c| c.added_id);
        Ok(ShardPage { cells, next })
    }
}

/// The error for a query naming an index that is not declared.
pub(crate) fn unknown_index(indexes: &[IndexSpec], name: &str) -> Error {
    let names: Vec<&str> = indexes.iter().map(|i| i.name.as_str()).collect();
    Error::invalid(
        "index",
        format!(
            "no index is called {name:?} (declared: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ),
    )
}
