//! Reads of every stored version: whole rows for the verifier's full diff
//! and repair, one column of many rows for tombstones (and the history a
//! hidden latest cell falls back on).
//!
//! The cell API's other reads see only the latest cell of a (row,
//! column); these see them all, one query per shard, the shards read in
//! parallel.

use std::collections::BTreeMap;

use super::sql::{self, push_column, push_hex};
use super::store::MySqlStore;
use crate::api::{Answer, ReadFrom};
use crate::cell::{Column, RowKey, StoredCell};
use crate::error::Result;

impl MySqlStore {
    /// Every stored cell of these rows, every version of every column, in
    /// address order: one query per shard, the shards read in parallel.
    pub async fn get_rows_all(&self, rows: &[RowKey], from: ReadFrom) -> Result<Vec<StoredCell>> {
        let topology = self.topology();
        let reads =
            rows_by_shard(rows, topology.shard_count)
                .into_iter()
                .map(|(shard, rows)| async move {
                    let mut sql = format!(
                        "SELECT {} FROM `{}`.`entity` WHERE row_key IN (",
                        sql::CELL_COLUMNS,
                        topology.database(shard)
                    );
                    push_row_keys(&mut sql, &rows);
                    sql.push(')');
                    let node = topology.reader(shard, from)?;
                    self.fetch_cells(&node, shard, sql).await
                });
        let mut cells: Vec<StoredCell> = futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect();
        cells.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
        Ok(cells)
    }

    /// Every stored cell of `column` in `rows`, every ref key, in address
    /// order; master reads fail over to a minion (and say so) when the
    /// master is down.
    pub async fn column_cells(
        &self,
        rows: &[RowKey],
        column: &Column,
        from: ReadFrom,
    ) -> Result<Answer<Vec<StoredCell>>> {
        let topology = self.topology();
        let reads = rows_by_shard(rows, topology.shard_count)
            .into_iter()
            .map(|(shard, rows)| {
                let mut sql = format!(
                    "SELECT {} FROM `{}`.`entity` WHERE column_name = ",
                    sql::CELL_COLUMNS,
                    topology.database(shard)
                );
                push_column(&mut sql, column);
                sql.push_str(" AND row_key IN (");
                push_row_keys(&mut sql, &rows);
                sql.push(')');
                self.read_failover(shard, from, move |node| {
                    let sql = sql.clone();
                    async move { self.fetch_cells(&node, shard, sql).await }
                })
            });
        let mut stale = false;
        let mut cells = Vec::new();
        for answer in futures::future::try_join_all(reads).await? {
            stale |= answer.stale;
            cells.extend(answer.value);
        }
        cells.sort_by(|a, b| a.cell.key.cmp(&b.cell.key));
        Ok(Answer {
            value: cells,
            stale,
        })
    }
}

/// `rows` grouped by the shard they route to.
fn rows_by_shard(rows: &[RowKey], shard_count: u32) -> BTreeMap<u32, Vec<&RowKey>> {
    let mut by_shard: BTreeMap<u32, Vec<&RowKey>> = BTreeMap::new();
    for row in rows {
        by_shard
            .entry(crate::routing::shard_of(row, shard_count))
            .or_default()
            .push(row);
    }
    by_shard
}

/// Appends `X'..', X'..'`.
fn push_row_keys(sql: &mut String, rows: &[&RowKey]) {
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            sql.push(',');
        }
        push_hex(sql, row.as_bytes());
    }
}
