//! Reads with failover: a read goes to the first node of the shard's
//! cluster that answers (a minion's answer for a master that is down is
//! flagged stale), and entity rows are decoded, damaged ones set aside
//! or named whole in the error.

use std::future::Future;
use std::sync::Arc;

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::MySqlStore;
use crate::api::{Answer, ReadFrom};
use crate::cell::{Cell, Column, RefKey, RowKey, StoredCell};
use crate::codec;
use crate::error::{Error, Result};
use crate::mysql::topology::Node;

impl MySqlStore {
    /// Runs `read` on the nodes of `shard`'s cluster in
    /// [`crate::mysql::topology::ClusterNodes::readers`] order until one answers:
    /// a node that fails (down, frozen) passes the read to the next, an
    /// error answer ends it, unless it says the shard moved away (then the
    /// read follows it).
    pub(crate) async fn read_failover<T, F, Fut>(
        &self,
        shard: u32,
        from: ReadFrom,
        mut read: F,
    ) -> Result<Answer<T>>
    where
        F: FnMut(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let waited = std::time::Instant::now();
        loop {
            let index = self.inner.topology.cluster_index(shard)?;
            match self.read_cluster(index, from, &mut read).await {
                Err(e) if self.follows_move(&e, &[shard], index, waited).await => continue,
                answer => return answer,
            }
        }
    }

    /// [`MySqlStore::read_failover`] on one cluster.
    async fn read_cluster<T, F, Fut>(
        &self,
        index: usize,
        from: ReadFrom,
        read: &mut F,
    ) -> Result<Answer<T>>
    where
        F: FnMut(Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let cluster = &self.inner.topology.clusters[index];
        let mut last = None;
        for reader in cluster.readers(from) {
            match read(reader.node).await {
                Ok(value) => {
                    if reader.stale {
                        metrics::counter!("mezzanine_schemaless_reads_failed_over_total", "cluster" => cluster.name.clone())
                            .increment(1);
                    }
                    return Ok(Answer {
                        value,
                        stale: reader.stale,
                    });
                }
                Err(e) if e.is_unavailable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Unavailable {
            node: cluster.master().label.clone(),
            reason: format!(
                "every node of cluster {:?} has its circuit breaker open",
                cluster.name
            ),
        }))
    }

    /// [`MySqlStore::fetch`], setting damaged cells aside (recorded, see
    /// [`crate::mysql::damaged`]) instead of failing on the first.
    pub(super) async fn fetch_setting_aside(
        &self,
        node: &Node,
        shard: u32,
        sql: String,
    ) -> Result<crate::mysql::damaged::Decoded> {
        let rows = node.fetch_all(sql).await?;
        self.decode_setting_aside(shard, &rows).await
    }

    /// Decodes `rows` of `shard`'s entity table, setting damaged ones aside.
    pub(super) async fn decode_setting_aside(
        &self,
        shard: u32,
        rows: &[MySqlRow],
    ) -> Result<crate::mysql::damaged::Decoded> {
        let master = self.inner.topology.cluster(shard)?.master();
        crate::mysql::damaged::decode_rows(self, &master, "entity", rows, |_| Ok(shard)).await
    }

    pub(super) async fn fetch(
        &self,
        node: &Node,
        shard: u32,
        sql: String,
    ) -> Result<Vec<StoredCell>> {
        let rows = node.fetch_all(sql).await?;
        rows.iter()
            .map(|row| decode_row(row, shard, self.inner.inflated_cap))
            .collect()
    }

    pub(super) async fn fetch_one(
        &self,
        shard: u32,
        from: ReadFrom,
        sql: String,
    ) -> Result<Answer<Option<StoredCell>>> {
        self.read_failover(shard, from, |node| {
            let sql = sql.clone();
            async move { Ok(self.fetch(&node, shard, sql).await?.into_iter().next()) }
        })
        .await
    }

    pub(super) async fn fetch_prepared(
        &self,
        shard: u32,
        from: ReadFrom,
        query: impl Fn() -> sqlx::query::Query<'static, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<Answer<Option<StoredCell>>> {
        self.read_failover(shard, from, |node| {
            let query = query();
            async move {
                let row = node.fetch_optional(query).await?;
                row.map(|r| decode_row(&r, shard, self.inner.inflated_cap))
                    .transpose()
            }
        })
        .await
    }

    pub(in crate::mysql) async fn fetch_cells(
        &self,
        node: &Node,
        shard: u32,
        sql: String,
    ) -> Result<Vec<StoredCell>> {
        self.fetch(node, shard, sql).await
    }
}

/// Decodes one entity row; anything malformed is a [`Error::CorruptCell`]
/// naming as much of the cell as could be read.
pub(in crate::mysql) fn decode_row(row: &MySqlRow, shard: u32, cap: usize) -> Result<StoredCell> {
    let corrupt = |cell: String, added_id: u64, reason: String| Error::CorruptCell {
        cell,
        shard,
        added_id,
        reason,
    };
    let added_id: u64 = row
        .try_get(0)
        .map_err(|e| corrupt("?".into(), 0, e.to_string()))?;
    let row_key_bytes: Vec<u8> = row
        .try_get(1)
        .map_err(|e| corrupt("?".into(), added_id, e.to_string()))?;
    let column_name: String = row
        .try_get(2)
        .map_err(|e| corrupt("?".into(), added_id, e.to_string()))?;
    let ref_key: i64 = row
        .try_get(3)
        .map_err(|e| corrupt("?".into(), added_id, e.to_string()))?;
    // The cell's name, for an error only: a good row is not named.
    let named = || format!("{}/{column_name}/{ref_key}", hex_or_uuid(&row_key_bytes));
    let row_key = RowKey::from_slice(&row_key_bytes)
        .ok_or_else(|| corrupt(named(), added_id, "row key is not 16 bytes".into()))?;
    let column =
        Column::new(&column_name).map_err(|e| corrupt(named(), added_id, e.to_string()))?;
    let ref_key = RefKey::new(ref_key).map_err(|e| corrupt(named(), added_id, e.to_string()))?;
    let body_bytes: Vec<u8> = row
        .try_get(4)
        .map_err(|e| corrupt(named(), added_id, e.to_string()))?;
    let created_at: i64 = row
        .try_get(5)
        .map_err(|e| corrupt(named(), added_id, e.to_string()))?;
    let body = codec::decode(&body_bytes, cap)
        .map_err(|e| corrupt(named(), added_id, format!("undecodable body: {e}")))?;
    Ok(StoredCell {
        cell: Cell::new(row_key, column, ref_key, body),
        added_id,
        created_at,
    })
}

fn hex_or_uuid(bytes: &[u8]) -> String {
    match RowKey::from_slice(bytes) {
        Some(key) => key.to_string(),
        None => bytes.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_row_keys_are_shown_in_hex() {
        assert_eq!(hex_or_uuid(&[0xab, 0x01]), "ab01");
    }
}
