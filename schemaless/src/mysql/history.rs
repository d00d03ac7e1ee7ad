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
use crate::error::{Error, Result};

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

    /// The row keys `shard` stores a cell of (any column), above `after`,
    /// in key order, at most `limit`: one page of a sweep over a shard's
    /// rows (the full diff's search for rows only Schemaless has), read on
    /// the cell key's index.
    pub async fn shard_row_keys(
        &self,
        shard: u32,
        after: Option<&RowKey>,
        limit: usize,
        from: ReadFrom,
    ) -> Result<Vec<RowKey>> {
        use sqlx::Row;
        let topology = self.topology();
        let mut sql = format!(
            "SELECT DISTINCT row_key FROM `{}`.`entity`",
            topology.database(shard)
        );
        if let Some(after) = after {
            sql.push_str(" WHERE row_key > ");
            push_hex(&mut sql, after.as_bytes());
        }
        sql.push_str(&format!(" ORDER BY row_key LIMIT {limit}"));
        let node = topology.reader(shard, from)?;
        let rows = node.fetch_all(sql).await?;
        rows.iter()
            .map(|row| {
                let unreadable = |reason: String| Error::Unreadable {
                    what: format!("a row key of shard {shard}"),
                    reason,
                };
                let bytes: Vec<u8> = row.try_get(0).map_err(|e| unreadable(e.to_string()))?;
                RowKey::from_slice(&bytes)
                    .ok_or_else(|| unreadable(format!("{} bytes, not 16", bytes.len())))
            })
            .collect()
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
